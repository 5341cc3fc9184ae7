/*
 * AM fragments as a striped peer sends them, handed straight to the receive path
 * (fy_am_recv_cb) in the orders one lane never produces: the anchor last, the anchor first and
 * the rest backwards, a whole message behind an announced one, and fragments that contradict
 * their message.  Checks what a rendezvous handler sees (announced or whole, the data placed
 * right, the request completing once with the last byte), that an announced message no longer
 * holds later ones back, that a plain handler still gets the whole message in order, and that
 * bad fragments are dropped and counted, never delivered.  Over self: the receiver is a real
 * worker and endpoint; only the wire is skipped.
 */
#include <stdint.h>
#include <time.h>

#include "common.h"
#include "proto/proto_int.h"

#define MSG_LEN 10000u
#define PIECE   2500u

typedef struct rx {
    ferry_worker_t *w;
    int recv_now; /* place the data at once (else keep the descriptor) */
    unsigned calls, announced, whole, bad, order[8];
    char buf[MSG_LEN];
    ferry_request_t req;
    done_t done;
    ferry_status_t recv_st;
    ferry_am_desc_t *kept;
} rx_t;

static ferry_status_t on_rndv(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_am_desc_t *desc, ferry_ep_t *reply_ep)
{
    (void)reply_ep;
    rx_t *rx = arg;
    unsigned seed;
    FY_ASSERT_EQ(header_len, sizeof(seed));
    memcpy(&seed, header, sizeof(seed));
    if (rx->calls < 8)
        rx->order[rx->calls] = seed;
    rx->calls++;
    if (desc == NULL) {
        rx->whole++;
        if (!check_pattern(data, data_len, seed))
            rx->bad++;
        return FERRY_OK;
    }
    rx->announced++;
    FY_ASSERT_EQ(data_len, (size_t)MSG_LEN);
    if (!rx->recv_now) {
        rx->kept = desc;
        return FERRY_OK;
    }
    memset(&rx->done, 0, sizeof(rx->done));
    rx->req.cb = req_cb;
    rx->req.user_data = &rx->done;
    rx->recv_st = ferry_am_recv_data(rx->w, desc, rx->buf, sizeof(rx->buf), &rx->req);
    return FERRY_OK;
}

static ferry_status_t on_plain(void *arg, const void *header, size_t header_len, const void *data,
                               size_t data_len, ferry_ep_t *reply_ep)
{
    return on_rndv(arg, header, header_len, data, data_len, NULL, reply_ep);
}

typedef struct wire {
    ferry_worker_t *w;
    uint32_t ep_id; /* the receiver's endpoint */
} wire_t;

/* Deliver one message to the receiver as if it came off a lane. */
static void inject(wire_t *wi, unsigned id, const void *uhdr, size_t uhdr_len, const void *data,
                   size_t len)
{
    uint8_t m[16 + 64 + PIECE + 16];
    FY_ASSERT(uhdr_len <= 64 && len <= PIECE + 16);
    fy_am_hdr_t h = {.id = (uint16_t)id, .len_flags = (uint16_t)uhdr_len, .ep_id = wi->ep_id};
    if (id >= FY_AM_ID_INTERNAL_BASE) {
        h.id = (uint16_t)(id - FY_AM_ID_INTERNAL_BASE);
        h.len_flags |= FY_AM_F_INT;
    }
    memcpy(m, &h, sizeof(h));
    memcpy(m + sizeof(h), uhdr, uhdr_len);
    if (len != 0)
        memcpy(m + sizeof(h) + uhdr_len, data, len);
    fy_am_recv_cb(&wi->w->ifaces[0], FY_TLAM_MSG, m, sizeof(h) + uhdr_len + len);
}

/* Fragment k (of MSG_LEN / PIECE) of message number seq: a 4-byte user header (the seed),
 * then the data of pattern seed. */
static void frag(wire_t *wi, unsigned id, uint32_t seq, unsigned seed, unsigned k,
                 uint64_t total_override)
{
    static char payload[4 + MSG_LEN];
    memcpy(payload, &seed, 4);
    fill_pattern(payload + 4, MSG_LEN, seed);
    uint64_t total = 4 + MSG_LEN;
    uint64_t off = (uint64_t)k * PIECE;
    size_t len = total - off < PIECE ? (size_t)(total - off) : PIECE;
    fy_am_frag_hdr_t fh = {.total = total_override != 0 ? total_override : total,
                           .offset = off,
                           .id = id,
                           .user_hdr_len = 4,
                           .seq = seq | (k == 0 ? FY_AM_FRAG_ANCHOR : 0)};
    inject(wi, FY_AM_ID_FRAG, &fh, sizeof(fh), payload + off, len);
}

/* fragment k covers [k * PIECE, ...): k = 0..4, the last one 4 bytes (the header's) */
#define NFRAGS 5u

static void setup(pair_t *p, wire_t *wi, rx_t *rx)
{
    pair_open(p);
    memset(rx, 0, sizeof(*rx));
    rx->w = p->w[1];
    /* connect: one message each way through a plain handler */
    FY_ASSERT_OK(ferry_worker_set_am_handler(p->w[1], 9, on_plain, rx));
    unsigned v = 1000;
    FY_ASSERT_OK(ferry_am_send(p->ep[0], 9, &v, sizeof(v), NULL, 0, NULL));
    for (int i = 0; i < 100000 && rx->calls == 0; i++)
        pair_progress(p);
    FY_ASSERT_EQ(rx->calls, 1u);
    rx->calls = rx->whole = 0;
    FY_ASSERT_OK(ferry_worker_set_am_handler_rndv(p->w[1], 7, on_rndv, rx));
    wi->w = p->w[1];
    wi->ep_id = p->ep[1]->id;
}

/* Every fragment before the anchor: the message is whole at its turn (no descriptor). */
static void anchor_last(void)
{
    pair_t p;
    wire_t wi;
    rx_t rx;
    setup(&p, &wi, &rx);
    for (unsigned k = NFRAGS; k-- > 0;)
        frag(&wi, 7, 1, 11, k, 0);
    FY_ASSERT_EQ(rx.calls, 1u);
    FY_ASSERT_EQ(rx.whole, 1u);
    FY_ASSERT_EQ(rx.bad, 0u);
    pair_close(&p);
}

/* The anchor first: announced; the rest, backwards, lands in the handler's buffer; a whole
 * message after the anchor runs at once (not held behind the announced one); the request
 * completes once, with the last fragment. */
static void anchor_first(void)
{
    pair_t p;
    wire_t wi;
    rx_t rx;
    setup(&p, &wi, &rx);
    rx.recv_now = 1;
    frag(&wi, 7, 2, 12, 0, 0);
    FY_ASSERT_EQ(rx.announced, 1u);
    FY_ASSERT_EQ(rx.recv_st, FERRY_INPROGRESS);
    unsigned s = 13;
    inject(&wi, 9, &s, sizeof(s), NULL, 0);
    FY_ASSERT_EQ(rx.calls, 2u);
    FY_ASSERT_EQ(rx.order[1], 13u);
    for (unsigned k = NFRAGS - 1; k >= 1; k--) {
        FY_ASSERT_EQ(rx.done.calls, 0);
        frag(&wi, 7, 2, 12, k, 0);
    }
    for (int i = 0; i < 10; i++)
        pair_progress(&p); /* the callback comes from progress */
    FY_ASSERT_EQ(rx.done.calls, 1);
    FY_ASSERT_OK(rx.done.st);
    FY_ASSERT_EQ(rx.req.length, (size_t)MSG_LEN);
    FY_ASSERT_MSG(check_pattern(rx.buf, MSG_LEN, 12), "the data was not placed right");
    pair_close(&p);
}

/* Kept: fragments between the announcement and recv_data are staged, then copied; a plain
 * handler's message held behind an incomplete plain one still runs in order. */
static void kept_and_plain_order(void)
{
    pair_t p;
    wire_t wi;
    rx_t rx;
    setup(&p, &wi, &rx);
    frag(&wi, 7, 3, 14, 0, 0);
    frag(&wi, 7, 3, 14, 2, 0);
    FY_ASSERT(rx.kept != NULL);
    FY_ASSERT_EQ(ferry_am_recv_data(p.w[1], rx.kept, rx.buf, sizeof(rx.buf), &rx.req),
                 FERRY_INPROGRESS);
    for (unsigned k = 1; k < NFRAGS; k++)
        if (k != 2)
            frag(&wi, 7, 3, 14, k, 0);
    for (int i = 0; i < 10; i++)
        pair_progress(&p);
    FY_ASSERT_OK(rx.req.status);
    FY_ASSERT_MSG(check_pattern(rx.buf, MSG_LEN, 14), "staged data was not copied right");
    /* a plain id: its anchor first, then a whole message, which waits for it */
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 8, on_plain, &rx));
    unsigned before = rx.calls;
    frag(&wi, 8, 4, 15, 0, 0);
    unsigned s = 16;
    inject(&wi, 9, &s, sizeof(s), NULL, 0);
    FY_ASSERT_EQ(rx.calls, before);
    for (unsigned k = 1; k < NFRAGS; k++)
        frag(&wi, 8, 4, 15, k, 0);
    FY_ASSERT_EQ(rx.calls, before + 2);
    FY_ASSERT_EQ(rx.order[before], 15u);
    FY_ASSERT_EQ(rx.order[before + 1], 16u);
    FY_ASSERT_EQ(rx.bad, 0u);
    pair_close(&p);
}

/* Fragments that contradict their announced message are dropped and counted; a repeated
 * anchor is too; the message completes with the right ones.  Released: the rest is dropped. */
static void bad_fragments(void)
{
    pair_t p;
    wire_t wi;
    rx_t rx;
    setup(&p, &wi, &rx);
    rx.recv_now = 1;
    frag(&wi, 7, 5, 17, 0, 0);
    FY_ASSERT_EQ(rx.announced, 1u);
    uint64_t drops = p.w[1]->drops_malformed;
    frag(&wi, 7, 5, 17, 1, 4 + MSG_LEN + 1); /* another total */
    frag(&wi, 7, 5, 17, 0, 0);               /* the anchor again */
    frag(&wi, 8, 5, 17, 1, 0);               /* another id */
    FY_ASSERT_EQ(p.w[1]->drops_malformed, drops + 3);
    for (unsigned k = 1; k < NFRAGS - 1; k++)
        frag(&wi, 7, 5, 17, k, 0);
    frag(&wi, 7, 5, 17, 3, 0); /* once more: more bytes than the message has */
    frag(&wi, 7, 5, 17, NFRAGS - 1, 0);
    FY_ASSERT_EQ(p.w[1]->drops_malformed, drops + 4);
    for (int i = 0; i < 10; i++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.done.calls, 1);
    FY_ASSERT_MSG(check_pattern(rx.buf, MSG_LEN, 17), "a bad fragment got into the data");
    /* released at once: the rest is dropped, not counted as malformed */
    rx.recv_now = 0;
    frag(&wi, 7, 6, 18, 0, 0);
    FY_ASSERT(rx.kept != NULL);
    FY_ASSERT_OK(ferry_am_data_release(p.w[1], rx.kept));
    FY_ASSERT_STATUS(ferry_am_recv_data(NULL, rx.kept, rx.buf, MSG_LEN, NULL),
                     FERRY_ERR_INVALID_PARAM);
    for (unsigned k = 1; k < NFRAGS; k++)
        frag(&wi, 7, 6, 18, k, 0);
    FY_ASSERT_EQ(p.w[1]->drops_malformed, drops + 4);
    /* bad arguments */
    FY_ASSERT_STATUS(ferry_am_data_release(NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_am_recv_data(p.w[1], NULL, rx.buf, 1, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_set_am_handler_rndv(NULL, 7, on_rndv, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_set_am_handler_rndv(p.w[1], 65536, on_rndv, NULL),
                     FERRY_ERR_INVALID_PARAM);
    pair_close(&p);
}

/* FERRY_AM_RECV_MAX: a message announced above it is dropped with a warning at its first
 * fragment, before anything is allocated, and so are its later fragments; the endpoint's order
 * goes on (a whole message after it runs).  A rendezvous handler's too: the anchor's data
 * arrives before the handler can give its buffer and would be staged in one of the whole
 * size (fuzz_am: an announced 8 GB total). */
static void recv_max(void)
{
    setenv("FERRY_AM_RECV_MAX", "8k", 1); /* MSG_LEN is 10000 */
    pair_t p;
    wire_t wi;
    rx_t rx;
    setup(&p, &wi, &rx);
    unsetenv("FERRY_AM_RECV_MAX");
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 8, on_plain, &rx));
    uint64_t drops = p.w[1]->drops_malformed;
    frag(&wi, 8, 20, 21, 1, 0); /* a piece before its anchor */
    frag(&wi, 8, 20, 21, 0, 0);
    FY_ASSERT_EQ(p.w[1]->drops_malformed, drops + 1);
    for (unsigned k = 2; k < NFRAGS; k++)
        frag(&wi, 8, 20, 21, k, 0);
    unsigned s = 22;
    inject(&wi, 9, &s, sizeof(s), NULL, 0);
    FY_ASSERT_EQ(rx.calls, 1u);
    FY_ASSERT_EQ(rx.order[0], 22u);
    FY_ASSERT_EQ(rx.whole, 1u);
    /* a 2.5 GB announcement: refused the same way, nothing allocated */
    frag(&wi, 8, 23, 24, 0, 2500000000ull);
    FY_ASSERT_EQ(p.w[1]->drops_malformed, drops + 2);
    rx.recv_now = 1; /* a rendezvous handler's message of the same size: dropped the same way */
    for (unsigned k = 0; k < NFRAGS; k++)
        frag(&wi, 7, 25, 26, k, 0);
    FY_ASSERT_EQ(p.w[1]->drops_malformed, drops + 3);
    FY_ASSERT_EQ(rx.announced, 0u);
    FY_ASSERT_EQ(rx.calls, 1u);
    FY_ASSERT_EQ(rx.bad, 0u);
    pair_close(&p);
}

/* The receiver's endpoint goes while data is due: a pending recv_data completes with the
 * endpoint's status, a kept descriptor reports it, a kept one whose bytes had all come still
 * gives them. */
static void ep_gone(void)
{
    pair_t p;
    wire_t wi;
    rx_t rx;
    setup(&p, &wi, &rx);
    frag(&wi, 7, 20, 21, 0, 0); /* kept, data due */
    ferry_am_desc_t *due = rx.kept;
    frag(&wi, 7, 22, 23, 0, 0); /* kept, then complete */
    ferry_am_desc_t *full = rx.kept;
    for (unsigned k = 1; k < NFRAGS; k++)
        frag(&wi, 7, 22, 23, k, 0);
    rx.recv_now = 1;
    frag(&wi, 7, 24, 25, 0, 0); /* placed, data due */
    FY_ASSERT_EQ(rx.recv_st, FERRY_INPROGRESS);
    FY_ASSERT(due != NULL && full != NULL && due != full);
    FY_ASSERT_OK(ferry_ep_close(p.ep[1], FERRY_EP_CLOSE_FORCE, NULL));
    p.ep[1] = NULL;
    for (int i = 0; i < 10; i++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.done.calls, 1);
    FY_ASSERT(rx.done.st < 0);
    static char buf[MSG_LEN];
    done_t d = {0};
    ferry_request_t req = {.cb = req_cb, .user_data = &d};
    ferry_status_t st = ferry_am_recv_data(p.w[1], due, buf, sizeof(buf), &req);
    FY_ASSERT(st < 0 && st != FERRY_ERR_MESSAGE_TRUNCATED && st != FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_EQ(d.calls, 0);
    FY_ASSERT_OK(ferry_am_recv_data(p.w[1], full, buf, sizeof(buf), NULL));
    FY_ASSERT_MSG(check_pattern(buf, MSG_LEN, 23), "complete data lost with its endpoint");
    FY_ASSERT_OK(ferry_ep_close(p.ep[0], FERRY_EP_CLOSE_FORCE, NULL));
    p.ep[0] = NULL;
    pair_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(anchor_last), FYTEST_CASE(anchor_first), FYTEST_CASE(kept_and_plain_order),
            FYTEST_CASE(bad_fragments), FYTEST_CASE(ep_gone), FYTEST_CASE(recv_max))
