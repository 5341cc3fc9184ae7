/*
 * fuzz_am.c - libFuzzer target for what a peer's active messages carry into proto
 * (src/proto/am.c, rails.c): the proto header (16-bit id, header length, flags, endpoint id,
 * the sender's uuid), the user header, and fragments (total, offset, id, message number,
 * anchor) in any order, to plain and rendezvous handlers and to ferry's own protocols.  The
 * receiver must drop what is malformed, count it, and never deliver a byte it was not sent.
 *
 * The input is a list of messages, each: a flag byte, two bytes n, and n bytes handed to the
 * receiving worker's receive path as one transport message.  With flag bit 0 the endpoint id
 * in the proto header is replaced by the receiver's real one (so the checks behind the
 * endpoint lookup are reached).  Handlers: id 7 plain, id 8 rendezvous (it places data of up
 * to 1 MiB at once, keeps the descriptor or drops it, by the user header's first byte; kept
 * ones are released at the end of each input), 65535 plain.  Two workers of one process over
 * the self transport; replies ferry's own protocols send go back over it.
 */
#include "fuzz_common.h"
#include "proto/proto_int.h"

#define RX_MAX (1u << 20)
#define KEPT   16

/* A peer may claim any total: the receiver's allocation fails and it drops the message. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

static ferry_context_t *ctx;
static ferry_worker_t *w0, *w1;
static ferry_ep_t *ep01;
static uint32_t rx_ep_id;
static unsigned long sum;
static uint8_t rx_buf[RX_MAX];
static ferry_am_desc_t *kept[KEPT];
static unsigned nkept;

static void touch(const void *p, size_t len)
{
    const volatile uint8_t *b = p;
    if (len > 0) /* both ends: ASan checks the bounds handed to the handler */
        sum += b[0] + b[len - 1];
}

static ferry_status_t on_plain(void *arg, const void *header, size_t header_len, const void *data,
                               size_t data_len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)reply_ep;
    touch(header, header_len);
    touch(data, data_len);
    return FERRY_OK;
}

static void recv_done(ferry_request_t *req, ferry_status_t st)
{
    (void)st;
    free(req);
}

static ferry_status_t on_rndv(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_am_desc_t *desc, ferry_ep_t *reply_ep)
{
    (void)arg, (void)reply_ep;
    touch(header, header_len);
    if (desc == NULL) {
        touch(data, data_len);
        return FERRY_OK;
    }
    unsigned mode = header_len != 0 ? ((const uint8_t *)header)[0] % 3 : 0;
    if (mode == 0 && data_len <= RX_MAX) {
        ferry_request_t *req = calloc(1, sizeof(*req));
        if (req == NULL) {
            ferry_am_data_release(w1, desc);
            return FERRY_OK;
        }
        req->cb = recv_done;
        if (ferry_am_recv_data(w1, desc, rx_buf, RX_MAX, req) != FERRY_INPROGRESS)
            free(req);
    } else if (mode == 1 && nkept < KEPT) {
        kept[nkept++] = desc;
    } else {
        ferry_am_data_release(w1, desc);
    }
    return FERRY_OK;
}

static void seed_msg(const char *name, unsigned id, const void *uhdr, uint16_t uhdr_len,
                     const void *data, uint16_t len)
{
    uint8_t s[4096];
    fy_am_hdr_t h = {.id = (uint16_t)id, .len_flags = uhdr_len, .ep_id = 0};
    if (id >= FY_AM_ID_INTERNAL_BASE) {
        h.id = (uint16_t)(id - FY_AM_ID_INTERNAL_BASE);
        h.len_flags |= FY_AM_F_INT;
    }
    uint16_t n = (uint16_t)(sizeof(h) + uhdr_len + len);
    s[0] = 1;
    memcpy(s + 1, &n, 2);
    memcpy(s + 3, &h, sizeof(h));
    memcpy(s + 3 + sizeof(h), uhdr, uhdr_len);
    if (len != 0)
        memcpy(s + 3 + sizeof(h) + uhdr_len, data, len);
    fz_seed(name, NULL, 0, s, 3 + n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_quiet();
    setenv("FERRY_TLS", "self", 1);
    setenv("FERRY_AM_RECV_MAX", "16m", 1); /* announced sizes above it: dropped, not allocated */
    FZ_CHECK(ferry_context_create(NULL, &ctx) == FERRY_OK);
    FZ_CHECK(ferry_worker_create(ctx, NULL, &w0) == FERRY_OK);
    FZ_CHECK(ferry_worker_create(ctx, NULL, &w1) == FERRY_OK);
    uint8_t addr[4096];
    size_t len = sizeof(addr);
    FZ_CHECK(ferry_worker_get_address(w1, addr, &len) == FERRY_OK);
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
    FZ_CHECK(ferry_ep_create(w0, &p, &ep01) == FERRY_OK);
    FZ_CHECK(ferry_worker_set_am_handler(w1, 7, on_plain, NULL) == FERRY_OK);
    FZ_CHECK(ferry_worker_set_am_handler_rndv(w1, 8, on_rndv, NULL) == FERRY_OK);
    FZ_CHECK(ferry_worker_set_am_handler(w1, FERRY_AM_ID_MAX, on_plain, NULL) == FERRY_OK);
    /* connect, and learn the receiver's endpoint for w0 (an interface with no endpoint yet
     * is polled every FY_IDLE_POLL-th progress only) */
    FZ_CHECK(ferry_am_send(ep01, 7, NULL, 0, NULL, 0, NULL) == FERRY_OK);
    for (int i = 0; i < 100000 && ep01->state != FY_EP_CONNECTED; i++) {
        ferry_worker_progress(w0);
        ferry_worker_progress(w1);
    }
    FZ_CHECK(ep01->state == FY_EP_CONNECTED);
    rx_ep_id = ep01->remote_id;

    /* seeds: a plain message, one to the top id, a header-only one, and a message of three
     * fragments to each handler, anchor first and anchor last */
    uint8_t data[3000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7);
    uint8_t hdr[4] = {0, 1, 2, 3};
    seed_msg("plain", 7, hdr, 4, data, 100);
    seed_msg("top_id", FERRY_AM_ID_MAX, hdr, 4, data, 10);
    seed_msg("rndv_small", 8, hdr, 4, NULL, 0);
    for (unsigned id = 7; id <= 8; id++) {
        uint8_t s[8192];
        size_t o = 0;
        for (int k = 0; k < 3; k++) {
            int kk = id == 7 ? k : 2 - k;
            fy_am_frag_hdr_t fh = {.total = 4 + 3000,
                                   .offset = (uint64_t)kk * 1000,
                                   .id = id,
                                   .user_hdr_len = 4,
                                   .seq = 5u | (kk == 0 ? FY_AM_FRAG_ANCHOR : 0)};
            uint16_t flen = (uint16_t)(kk == 2 ? 1004 : 1000);
            uint8_t payload[4 + 3000];
            memcpy(payload, hdr, 4);
            memcpy(payload + 4, data, 3000);
            fy_am_hdr_t h = {.id = FY_AM_ID_FRAG - FY_AM_ID_INTERNAL_BASE,
                             .len_flags = (uint16_t)(sizeof(fh) | FY_AM_F_INT),
                             .ep_id = 0};
            uint16_t n = (uint16_t)(sizeof(h) + sizeof(fh) + flen);
            s[o] = 1;
            memcpy(s + o + 1, &n, 2);
            memcpy(s + o + 3, &h, sizeof(h));
            memcpy(s + o + 3 + sizeof(h), &fh, sizeof(fh));
            memcpy(s + o + 3 + sizeof(h) + sizeof(fh), payload + fh.offset, flen);
            o += 3 + n;
        }
        fz_seed(id == 7 ? "frags_plain" : "frags_rndv", NULL, 0, s, o);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t msg[65536 + 16];
    size_t o = 0;
    while (o + 3 <= size) {
        uint8_t flags = data[o];
        uint16_t n;
        memcpy(&n, data + o + 1, 2);
        o += 3;
        if (n > size - o)
            n = (uint16_t)(size - o);
        memcpy(msg, data + o, n);
        o += n;
        if ((flags & 1) && n >= sizeof(fy_am_hdr_t))
            memcpy(msg + offsetof(fy_am_hdr_t, ep_id), &rx_ep_id, 4);
        fy_am_recv_cb(&w1->ifaces[0], FY_TLAM_MSG, msg, n);
    }
    for (int i = 0; i < 4; i++) {
        ferry_worker_progress(w1);
        ferry_worker_progress(w0);
    }
    while (nkept > 0)
        ferry_am_data_release(w1, kept[--nkept]);
    return 0;
}
