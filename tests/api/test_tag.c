/*
 * Tagged messages between two workers: eager and rendezvous, expected (receive posted first)
 * and unexpected (message first), matching with masks in posting order, per-sender order,
 * truncation, probe and cancel.  One thread drives both workers, so every call takes a
 * request and both are progressed until it completes.
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

static void roundtrip(size_t len, int recv_first)
{
    pair_t p;
    pair_open(&p);
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
    free(src);
    free(dst);
    pair_close(&p);
}

static void eager_expected(void) { roundtrip(1000, 1); }
static void eager_unexpected(void) { roundtrip(1000, 0); }
static void rndv_expected(void) { roundtrip(3 << 20, 1); }
static void rndv_unexpected(void) { roundtrip(3 << 20, 0); }
static void zero_bytes(void) { roundtrip(0, 0); }

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
        ferry_request_t rs = {.cb = req_cb, .user_data = &ds}, rr = {.cb = req_cb, .user_data = &dr};
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
            FYTEST_CASE(truncation), FYTEST_CASE(many_senders_order))
