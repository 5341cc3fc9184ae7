/*
 * Tagged messages between two workers: eager and rendezvous, expected (receive posted first)
 * and unexpected (message first), matching with masks in posting order, per-sender order,
 * truncation, probe and cancel.  One thread drives both workers, so every call takes a
 * request and both are progressed until it completes.
 *
 * Rendezvous: sizes from 0 to 64 MiB, RTS matched late, many sends outstanding, a cancelled
 * receive, and a sender that closes its endpoint mid-rendezvous (by force: both sides end,
 * nothing leaks; with flush: the close waits for the receiver).  The scheme that should carry
 * the data (FERRY_TAG_RNDV_SCHEME: get unless "am") is checked on the sender's counters: a get
 * moves the data without an active message from the sender.  CTest runs the file over self
 * and over shm, with each scheme.
 */
#include "common.h"

/* Wait for a request; returns its final status and checks the one-callback contract. */
static ferry_status_t finish(pair_t *p, ferry_status_t st, ferry_request_t *req, done_t *d)
{
    if (st != FERRY_INPROGRESS) {
        FY_ASSERT_EQ(d->calls, 0);
        return st;
    }
    for (long i = 0; i < 20000000 && d->calls == 0; i++)
        pair_progress(p);
    FY_ASSERT_EQ(d->calls, 1);
    FY_ASSERT_EQ(req->status, d->st);
    return d->st;
}

/* Rendezvous by get unless FERRY_TAG_RNDV_SCHEME=am (both transports of these tests can get). */
static int expect_get(void)
{
    const char *s = getenv("FERRY_TAG_RNDV_SCHEME");
    return s == NULL || strcmp(s, "am") != 0;
}

static uint64_t tx_bytes(ferry_ep_t *ep)
{
    ferry_ep_stats_t st;
    FY_ASSERT_OK(ferry_ep_get_stats(ep, &st));
    return st.tx_bytes;
}

/* A message of len bytes (above any rendezvous threshold) went the expected way: bytes the
 * sender's endpoint sent as active messages since `before`. */
static void check_scheme(ferry_ep_t *ep, uint64_t before, size_t len)
{
    uint64_t sent = tx_bytes(ep) - before;
    if (expect_get())
        FY_ASSERT_LT(sent, 4096); /* RTS_GET only: the receiver read the data */
    else
        FY_ASSERT_GE(sent, len); /* RTS, then DATA */
}

static void roundtrip(size_t len, int recv_first)
{
    pair_t p;
    pair_open(&p);
    uint64_t before = tx_bytes(p.ep[0]);
    char *src = malloc(len + 1), *dst = calloc(1, len + 1);
    fill_pattern(src, len, (unsigned)len);
    done_t ds = {0, 0}, dr = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds}, rr = {.cb = req_cb, .user_data = &dr};
    ferry_status_t sts = FERRY_OK, str = FERRY_OK;
    if (recv_first)
        str = ferry_tag_recv(p.w[1], dst, len, 0x1234, ~0ull, &rr);
    sts = ferry_tag_send(p.ep[0], 0x1234, src, len, &rs);
    FY_ASSERT(sts == FERRY_OK || sts == FERRY_INPROGRESS);
    if (!recv_first) {
        for (int i = 0; i < 1000; i++)
            pair_progress(&p); /* the message (or its RTS) arrives unexpected */
        ferry_tag_info_t info;
        FY_ASSERT_OK(ferry_tag_probe(p.w[1], 0x1234, ~0ull, &info));
        FY_ASSERT_U64_EQ(info.tag, 0x1234);
        FY_ASSERT_EQ(info.length, len);
        str = ferry_tag_recv(p.w[1], dst, len, 0x1234, ~0ull, &rr);
    }
    FY_ASSERT_OK(finish(&p, str, &rr, &dr));
    FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
    FY_ASSERT_U64_EQ(rr.tag, 0x1234);
    FY_ASSERT_EQ(rr.length, len);
    FY_ASSERT(check_pattern(dst, len, (unsigned)len));
    FY_ASSERT_EQ(dst[len], 0); /* nothing past the message */
    if (len >= (1 << 20))
        check_scheme(p.ep[0], before, len);
    free(src);
    free(dst);
    pair_close(&p);
}

static void eager_expected(void)
{
    roundtrip(1000, 1);
}
static void eager_unexpected(void)
{
    roundtrip(1000, 0);
}
static void rndv_expected(void)
{
    roundtrip(3 << 20, 1);
}
static void rndv_unexpected(void)
{
    roundtrip(3 << 20, 0);
}
static void zero_bytes(void)
{
    roundtrip(0, 0);
}

/* Every size class, both ways of meeting: around the thresholds (8k on shm, 64k on self) and
 * up to 64 MiB. */
static void rndv_sizes(void)
{
    static const size_t sizes[] = {1, 8175, 8176, 8177, 65535, 65536, 65537, 300001, (1 << 20) + 3};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (int first = 0; first < 2; first++)
            roundtrip(sizes[i], first);
}

static void rndv_64m(void)
{
    roundtrip(64 << 20, 1);
    roundtrip(64 << 20, 0);
}

static void masks_and_order(void)
{
    pair_t p;
    pair_open(&p);
    /* messages with tags 1..6; receives: exact 3, then "low byte 0x0?" mask, in order */
    for (uint64_t t = 1; t <= 6; t++)
        FY_ASSERT_OK(ferry_tag_send(p.ep[0], t | (t << 32), &t, sizeof(t), NULL));
    for (int i = 0; i < 1000; i++)
        pair_progress(&p);
    uint64_t v;
    done_t d = {0, 0};
    ferry_request_t r = {.cb = req_cb, .user_data = &d};
    FY_ASSERT_OK(ferry_tag_recv(p.w[1], &v, sizeof(v), 3, 0xffffffffull, &r));
    FY_ASSERT_U64_EQ(v, 3);
    FY_ASSERT_U64_EQ(r.tag, 3 | (3ull << 32));
    /* wildcard: the earliest remaining (1, 2, 4, 5, 6 in order) */
    static const uint64_t want[] = {1, 2, 4, 5, 6};
    for (int i = 0; i < 5; i++) {
        FY_ASSERT_OK(ferry_tag_recv(p.w[1], &v, sizeof(v), 0, 0, &r));
        FY_ASSERT_U64_EQ(v, want[i]);
    }
    ferry_tag_info_t info;
    FY_ASSERT_STATUS(ferry_tag_probe(p.w[1], 0, 0, &info), FERRY_ERR_NO_MESSAGE);
    /* posted receives match in posting order */
    uint64_t a = 0, b = 0;
    done_t da = {0, 0}, db = {0, 0};
    ferry_request_t ra = {.cb = req_cb, .user_data = &da}, rb = {.cb = req_cb, .user_data = &db};
    FY_ASSERT_STATUS(ferry_tag_recv(p.w[1], &a, 8, 0x70, 0xf0, &ra), FERRY_INPROGRESS);
    FY_ASSERT_STATUS(ferry_tag_recv(p.w[1], &b, 8, 0x77, ~0ull, &rb), FERRY_INPROGRESS);
    uint64_t x = 111;
    FY_ASSERT_OK(ferry_tag_send(p.ep[0], 0x77, &x, 8, NULL));
    FY_ASSERT_OK(finish(&p, FERRY_INPROGRESS, &ra, &da));
    FY_ASSERT_U64_EQ(a, 111);
    FY_ASSERT_EQ(db.calls, 0);
    /* cancel the other */
    FY_ASSERT_OK(ferry_request_cancel(p.w[1], &rb));
    FY_ASSERT_STATUS(finish(&p, FERRY_INPROGRESS, &rb, &db), FERRY_ERR_CANCELED);
    FY_ASSERT_STATUS(ferry_request_cancel(p.w[1], &rb), FERRY_ERR_NO_ELEM);
    pair_close(&p);
}

static void truncation(void)
{
    for (int big = 0; big < 2; big++) {
        pair_t p;
        pair_open(&p);
        size_t len = big ? (1 << 20) : 100;
        char *src = malloc(len), *dst = calloc(1, len);
        fill_pattern(src, len, 1);
        done_t ds = {0, 0}, dr = {0, 0};
        ferry_request_t rs = {.cb = req_cb, .user_data = &ds},
                        rr = {.cb = req_cb, .user_data = &dr};
        ferry_status_t str = ferry_tag_recv(p.w[1], dst, len / 2, 9, ~0ull, &rr);
        ferry_status_t sts = ferry_tag_send(p.ep[0], 9, src, len, &rs);
        FY_ASSERT_STATUS(finish(&p, str, &rr, &dr), FERRY_ERR_MESSAGE_TRUNCATED);
        FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
        FY_ASSERT_EQ(rr.length, len / 2);
        FY_ASSERT_MEM_EQ(dst, src, len / 2);
        free(src);
        free(dst);
        pair_close(&p);
    }
}

/* A large message into a smaller buffer: only what fits is read, the receive says TRUNCATED and
 * the send completes normally; expected and unexpected, and into an empty buffer. */
static void rndv_truncation(void)
{
    static const size_t recv_len[] = {0, 1, 100000, (1 << 20) - 1};
    size_t len = 1 << 20;
    for (size_t k = 0; k < sizeof(recv_len) / sizeof(recv_len[0]); k++)
        for (int first = 0; first < 2; first++) {
            pair_t p;
            pair_open(&p);
            char *src = malloc(len), *dst = malloc(len);
            fill_pattern(src, len, 5);
            memset(dst, 0xee, len);
            done_t ds = {0, 0}, dr = {0, 0};
            ferry_request_t rs = {.cb = req_cb, .user_data = &ds},
                            rr = {.cb = req_cb, .user_data = &dr};
            ferry_status_t str = FERRY_INPROGRESS;
            if (first)
                str = ferry_tag_recv(p.w[1], dst, recv_len[k], 9, ~0ull, &rr);
            ferry_status_t sts = ferry_tag_send(p.ep[0], 9, src, len, &rs);
            FY_ASSERT_STATUS(sts, FERRY_INPROGRESS);
            if (!first) {
                ferry_tag_info_t info;
                while (ferry_tag_probe(p.w[1], 9, ~0ull, &info) != FERRY_OK)
                    pair_progress(&p);
                FY_ASSERT_EQ(info.length, len);
                str = ferry_tag_recv(p.w[1], dst, recv_len[k], 9, ~0ull, &rr);
            }
            FY_ASSERT_STATUS(finish(&p, str, &rr, &dr), FERRY_ERR_MESSAGE_TRUNCATED);
            FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
            FY_ASSERT_EQ(rr.length, recv_len[k]);
            FY_ASSERT_U64_EQ(rr.tag, 9);
            FY_ASSERT_MEM_EQ(dst, src, recv_len[k]);
            FY_ASSERT_EQ((unsigned char)dst[recv_len[k]], 0xee); /* nothing past the buffer */
            free(src);
            free(dst);
            pair_close(&p);
        }
}

/* RTSs wait unexpected while the senders keep their buffers: no send completes before its
 * receive; then receives in the reverse order read every one intact. */
static void rndv_unexpected_late(void)
{
    enum { N = 6 };
    size_t len = 700000;
    pair_t p;
    pair_open(&p);
    char *src[N], *dst[N];
    done_t ds[N], dr[N];
    ferry_request_t rs[N], rr[N];
    ferry_status_t sts[N];
    for (int i = 0; i < N; i++) {
        src[i] = malloc(len);
        dst[i] = calloc(1, len);
        fill_pattern(src[i], len, 100 + (unsigned)i);
        ds[i] = (done_t){0, 0};
        dr[i] = (done_t){0, 0};
        rs[i] = (ferry_request_t){.cb = req_cb, .user_data = &ds[i]};
        rr[i] = (ferry_request_t){.cb = req_cb, .user_data = &dr[i]};
        sts[i] = ferry_tag_send(p.ep[0], 500 + (uint64_t)i, src[i], len, &rs[i]);
        FY_ASSERT_STATUS(sts[i], FERRY_INPROGRESS);
    }
    ferry_tag_info_t info;
    while (ferry_tag_probe(p.w[1], 500 + N - 1, ~0ull, &info) != FERRY_OK)
        pair_progress(&p);
    for (int k = 0; k < 10000; k++)
        pair_progress(&p);
    for (int i = 0; i < N; i++)
        FY_ASSERT_EQ(ds[i].calls, 0); /* nobody has matched: every sender still waits */
    for (int i = N - 1; i >= 0; i--) {
        ferry_status_t st = ferry_tag_recv(p.w[1], dst[i], len, 500 + (uint64_t)i, ~0ull, &rr[i]);
        FY_ASSERT_OK(finish(&p, st, &rr[i], &dr[i]));
        FY_ASSERT_EQ(rr[i].length, len);
        FY_ASSERT(check_pattern(dst[i], len, 100 + (unsigned)i));
    }
    for (int i = 0; i < N; i++) {
        FY_ASSERT_OK(finish(&p, sts[i], &rs[i], &ds[i]));
        free(src[i]);
        free(dst[i]);
    }
    FY_ASSERT_STATUS(ferry_tag_probe(p.w[1], 0, 0, &info), FERRY_ERR_NO_MESSAGE);
    pair_close(&p);
}

/* Many large sends outstanding at once, half met by receives posted before, half after, in
 * another order than sent. */
static void rndv_many_outstanding(void)
{
    enum { N = 200 };
    size_t len = 200000;
    pair_t p;
    pair_open(&p);
    char *src = malloc(len * N), *dst = calloc(N, len);
    static done_t ds[N], dr[N];
    static ferry_request_t rs[N], rr[N];
    ferry_status_t str[N];
    for (int i = 0; i < N; i++) {
        fill_pattern(src + (size_t)i * len, len, (unsigned)i);
        ds[i] = dr[i] = (done_t){0, 0};
        rs[i] = (ferry_request_t){.cb = req_cb, .user_data = &ds[i]};
        rr[i] = (ferry_request_t){.cb = req_cb, .user_data = &dr[i]};
    }
    for (int i = 0; i < N; i += 2) /* the even ones are expected */
        str[i] = ferry_tag_recv(p.w[1], dst + (size_t)i * len, len, (uint64_t)i, ~0ull, &rr[i]);
    for (int i = 0; i < N; i++)
        FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], (uint64_t)i, src + (size_t)i * len, len, &rs[i]),
                         FERRY_INPROGRESS);
    for (int i = N - 1; i >= 0; i -= 2)
        str[i] = ferry_tag_recv(p.w[1], dst + (size_t)i * len, len, (uint64_t)i, ~0ull, &rr[i]);
    for (int i = 0; i < N; i++) {
        FY_ASSERT_OK(finish(&p, str[i], &rr[i], &dr[i]));
        FY_ASSERT_EQ(rr[i].length, len);
        FY_ASSERT_U64_EQ(rr[i].tag, i);
    }
    for (int i = 0; i < N; i++)
        FY_ASSERT_OK(finish(&p, FERRY_INPROGRESS, &rs[i], &ds[i]));
    for (int i = 0; i < N; i++)
        FY_ASSERT(check_pattern(dst + (size_t)i * len, len, (unsigned)i));
    free(src);
    free(dst);
    pair_close(&p);
}

/* A cancelled large receive gets nothing; the message goes to the next matching receive. */
static void rndv_cancel(void)
{
    size_t len = 1 << 20;
    pair_t p;
    pair_open(&p);
    char *src = malloc(len), *a = calloc(1, len), *b = calloc(1, len);
    fill_pattern(src, len, 3);
    done_t ds = {0, 0}, da = {0, 0}, db = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds}, ra = {.cb = req_cb, .user_data = &da},
                    rb = {.cb = req_cb, .user_data = &db};
    FY_ASSERT_STATUS(ferry_tag_recv(p.w[1], a, len, 77, ~0ull, &ra), FERRY_INPROGRESS);
    FY_ASSERT_OK(ferry_request_cancel(p.w[1], &ra));
    FY_ASSERT_STATUS(finish(&p, FERRY_INPROGRESS, &ra, &da), FERRY_ERR_CANCELED);
    FY_ASSERT_STATUS(ferry_tag_recv(p.w[1], b, len, 77, ~0ull, &rb), FERRY_INPROGRESS);
    ferry_status_t sts = ferry_tag_send(p.ep[0], 77, src, len, &rs);
    FY_ASSERT_OK(finish(&p, FERRY_INPROGRESS, &rb, &db));
    FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
    FY_ASSERT(check_pattern(b, len, 3));
    for (size_t i = 0; i < len; i++)
        FY_ASSERT_EQ(a[i], 0);
    /* a matched receive can no longer be cancelled (and a completed one is gone) */
    FY_ASSERT_STATUS(ferry_request_cancel(p.w[1], &rb), FERRY_ERR_NO_ELEM);
    free(src);
    free(a);
    free(b);
    pair_close(&p);
}

/* The sender closes its endpoint by force with an RTS still unmatched: its send completes
 * CANCELED at once, and the receiver forgets the message (it never reads the buffer, which is
 * freed here: the sanitizer build would see a read). */
static void rndv_sender_force_close(void)
{
    size_t len = 1 << 20;
    pair_t p;
    pair_open(&p);
    char *src = malloc(len), *dst = calloc(1, len);
    fill_pattern(src, len, 4);
    done_t ds = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds};
    FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], 88, src, len, &rs), FERRY_INPROGRESS);
    ferry_tag_info_t info;
    while (ferry_tag_probe(p.w[1], 88, ~0ull, &info) != FERRY_OK)
        pair_progress(&p);
    FY_ASSERT_OK(ferry_ep_close(p.ep[0], FERRY_EP_CLOSE_FORCE, NULL));
    p.ep[0] = NULL;
    FY_ASSERT_STATUS(finish(&p, FERRY_INPROGRESS, &rs, &ds), FERRY_ERR_CANCELED);
    free(src);
    /* the receiver hears the send is gone */
    for (long i = 0; i < 1000000 && ferry_tag_probe(p.w[1], 88, ~0ull, &info) == FERRY_OK; i++)
        pair_progress(&p);
    FY_ASSERT_STATUS(ferry_tag_probe(p.w[1], 88, ~0ull, &info), FERRY_ERR_NO_MESSAGE);
    /* and later messages on the same tag still flow, from a new endpoint */
    size_t alen = 0;
    FY_ASSERT_STATUS(ferry_worker_get_address(p.w[1], NULL, &alen), FERRY_ERR_TRUNCATED);
    void *addr = malloc(alen);
    FY_ASSERT_OK(ferry_worker_get_address(p.w[1], addr, &alen));
    ferry_ep_params_t ep = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
    FY_ASSERT_OK(ferry_ep_create(p.w[0], &ep, &p.ep[0]));
    free(addr);
    src = malloc(len);
    fill_pattern(src, len, 6);
    done_t dr = {0, 0};
    ds = (done_t){0, 0};
    ferry_request_t rr = {.cb = req_cb, .user_data = &dr};
    ferry_status_t sts = ferry_tag_send(p.ep[0], 88, src, len, &rs);
    ferry_status_t str = ferry_tag_recv(p.w[1], dst, len, 88, ~0ull, &rr);
    FY_ASSERT_OK(finish(&p, str, &rr, &dr));
    FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
    FY_ASSERT(check_pattern(dst, len, 6));
    free(src);
    free(dst);
    pair_close(&p);
}

/* The receiver has matched and asked for the data (am scheme), then the sender closes by
 * force: the receive ends CANCELED instead of waiting forever.  With get, the data was read at
 * the match and the receive completes normally (self, shm), or the read reaches the sender
 * after its close and is refused (udp): never a hang. */
static void rndv_sender_force_close_matched(void)
{
    size_t len = 1 << 20;
    pair_t p;
    pair_open(&p);
    char *src = malloc(len), *dst = calloc(1, len);
    fill_pattern(src, len, 8);
    done_t ds = {0, 0}, dr = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds}, rr = {.cb = req_cb, .user_data = &dr};
    /* A transport that connects lazily (udp) sends nothing before its sender progresses: one
     * eager message both ways first, so the RTS below leaves at once. */
    uint64_t v = 7, got = 0;
    ferry_status_t sw = ferry_tag_send(p.ep[0], 87, &v, sizeof(v), &rs);
    FY_ASSERT_OK(finish(&p, ferry_tag_recv(p.w[1], &got, sizeof(got), 87, ~0ull, &rr), &rr, &dr));
    FY_ASSERT_OK(finish(&p, sw, &rs, &ds));
    FY_ASSERT_U64_EQ(got, v);
    ds = dr = (done_t){0, 0};
    FY_ASSERT_STATUS(ferry_tag_recv(p.w[1], dst, len, 89, ~0ull, &rr), FERRY_INPROGRESS);
    FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], 89, src, len, &rs), FERRY_INPROGRESS);
    /* only the receiver runs: it matches the RTS and answers (CTS or ATS), unheard */
    for (int i = 0; i < 10000; i++)
        ferry_worker_progress(p.w[1]);
    FY_ASSERT_EQ(ds.calls, 0);
    FY_ASSERT_OK(ferry_ep_close(p.ep[0], FERRY_EP_CLOSE_FORCE, NULL));
    p.ep[0] = NULL;
    FY_ASSERT_STATUS(finish(&p, FERRY_INPROGRESS, &rs, &ds), FERRY_ERR_CANCELED);
    ferry_status_t st = finish(&p, FERRY_INPROGRESS, &rr, &dr);
    if (expect_get()) {
        /* a read done in the call (self, shm) has the data; one served by the target (udp)
         * meets the registration the close released */
        if (st == FERRY_OK)
            FY_ASSERT(check_pattern(dst, len, 8));
        else
            FY_ASSERT_STATUS(st, FERRY_ERR_ACCESS_DENIED);
    } else {
        FY_ASSERT_STATUS(st, FERRY_ERR_CANCELED);
    }
    free(src);
    free(dst);
    pair_close(&p);
}

/* Close with flush waits for the receiver to take the message: the buffer (and its
 * registration) stays valid until then. */
static void rndv_sender_flush_close(void)
{
    size_t len = 3 << 20;
    pair_t p;
    pair_open(&p);
    char *src = malloc(len), *dst = calloc(1, len);
    fill_pattern(src, len, 9);
    done_t ds = {0, 0}, dr = {0, 0}, dc = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds}, rr = {.cb = req_cb, .user_data = &dr},
                    rc = {.cb = req_cb, .user_data = &dc};
    FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], 90, src, len, &rs), FERRY_INPROGRESS);
    FY_ASSERT_STATUS(ferry_ep_close(p.ep[0], FERRY_EP_CLOSE_FLUSH, &rc), FERRY_INPROGRESS);
    for (int i = 0; i < 10000; i++)
        pair_progress(&p);
    FY_ASSERT_EQ(dc.calls, 0); /* still waiting for the receiver */
    FY_ASSERT_EQ(ds.calls, 0);
    ferry_status_t str = ferry_tag_recv(p.w[1], dst, len, 90, ~0ull, &rr);
    FY_ASSERT_OK(finish(&p, str, &rr, &dr));
    FY_ASSERT_OK(finish(&p, FERRY_INPROGRESS, &rs, &ds));
    FY_ASSERT_OK(finish(&p, FERRY_INPROGRESS, &rc, &dc));
    p.ep[0] = NULL;
    FY_ASSERT(check_pattern(dst, len, 9));
    free(src);
    free(dst);
    pair_close(&p);
}

static void many_senders_order(void)
{
    /* two endpoints to one receiver (w0 -> w1 and a second worker), per-sender order */
    pair_t p;
    pair_open(&p);
    for (uint64_t i = 0; i < 500; i++)
        FY_ASSERT_OK(ferry_tag_send(p.ep[0], 42, &i, 8, NULL));
    uint64_t v;
    done_t d = {0, 0};
    ferry_request_t r = {.cb = req_cb, .user_data = &d};
    for (uint64_t i = 0; i < 500; i++) {
        d.calls = 0;
        ferry_status_t st = ferry_tag_recv(p.w[1], &v, 8, 42, ~0ull, &r);
        FY_ASSERT_OK(finish(&p, st, &r, &d));
        FY_ASSERT_U64_EQ(v, i);
    }
    pair_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(eager_expected), FYTEST_CASE(eager_unexpected), FYTEST_CASE(rndv_expected),
            FYTEST_CASE(rndv_unexpected), FYTEST_CASE(zero_bytes), FYTEST_CASE(masks_and_order),
            FYTEST_CASE(truncation), FYTEST_CASE(many_senders_order), FYTEST_CASE(rndv_sizes),
            FYTEST_CASE(rndv_64m), FYTEST_CASE(rndv_truncation), FYTEST_CASE(rndv_unexpected_late),
            FYTEST_CASE(rndv_many_outstanding), FYTEST_CASE(rndv_cancel),
            FYTEST_CASE(rndv_sender_force_close), FYTEST_CASE(rndv_sender_force_close_matched),
            FYTEST_CASE(rndv_sender_flush_close))
