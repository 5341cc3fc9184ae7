/*
 * A put the target refuses (out of its region, or a key the target no longer knows) must not
 * vanish: the flush that covers it, of the endpoint or of the worker, completes with the
 * error, once, and nothing at the target is touched.  Run over each transport (FERRY_TLS) and
 * with the RMA emulated over active messages (FERRY_RMA_EMULATE), from CMakeLists.txt.
 *
 * A refusal that passes the initiator's own check is made by forging the packed key: its
 * length field (proto's copy) is doubled, so the put lands past the real region, which the
 * target's check (or, on self and shm, the transport's own copy of the key) refuses.  The
 * stale-key case unregisters the region after packing its key; self and shm write one-sided
 * (their targets check nothing), so that case runs only where the target checks.
 */
#include "../api/common.h"

/* Offset of the length field in a packed key (u32 magic, u32 access, u64 id, key, base). */
#define RKEY_LENGTH_OFF 32

static ferry_request_t the_req;
static ferry_request_t *rq(void)
{
    memset(&the_req, 0, sizeof(the_req));
    return &the_req;
}

/* Both workers progress in this one thread: pump them until the request completes. */
static ferry_status_t run(pair_t *p, ferry_status_t st)
{
    for (long i = 0; st == FERRY_INPROGRESS && i < 20000000; i++) {
        pair_progress(p);
        if (the_req.status != FERRY_INPROGRESS)
            return the_req.status;
    }
    return st;
}

static ferry_status_t ep_flush(pair_t *p)
{
    return run(p, ferry_ep_flush(p->ep[0], rq()));
}

static ferry_status_t worker_flush(pair_t *p)
{
    return run(p, ferry_worker_flush(p->w[0], rq()));
}

/* Close the initiator's endpoint with a flush, pumping both workers (the blocking close
 * would progress only its own, and over a network transport the peer must answer); the
 * target's by force (its peer is gone: a flush could only time out). */
static void pair_shut(pair_t *p)
{
    FY_ASSERT_OK(run(p, ferry_ep_close(p->ep[0], FERRY_EP_CLOSE_FLUSH, rq())));
    FY_ASSERT_OK(ferry_ep_close(p->ep[1], FERRY_EP_CLOSE_FORCE, NULL));
    p->ep[0] = p->ep[1] = NULL;
    pair_close(p);
}

enum { LEN = 64 * 1024 };

typedef struct target {
    uint8_t *buf; /* 2 * LEN: the first half registered, the second a guard */
    ferry_mem_t *mem;
    ferry_rkey_t *rk;
} target_t;

static void target_open(pair_t *p, target_t *t, int forge_length)
{
    t->buf = malloc(2 * LEN);
    FY_ASSERT(t->buf != NULL);
    fill_pattern(t->buf, 2 * LEN, 9);
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_ADDRESS,
                             .address = t->buf,
                             .length = LEN};
    FY_ASSERT_OK(ferry_mem_map(p->ctx, &mp, &t->mem));
    uint8_t rk[1024];
    size_t rklen = sizeof(rk);
    FY_ASSERT_OK(ferry_rkey_pack(p->ctx, t->mem, rk, &rklen));
    if (forge_length) {
        uint64_t l;
        memcpy(&l, rk + RKEY_LENGTH_OFF, 8);
        FY_ASSERT_EQ(l, LEN);
        l = 2 * LEN;
        memcpy(rk + RKEY_LENGTH_OFF, &l, 8);
    }
    FY_ASSERT_OK(ferry_rkey_unpack(p->ep[0], rk, rklen, &t->rk));
}

static void target_close(pair_t *p, target_t *t)
{
    ferry_rkey_destroy(t->rk);
    if (t->mem != NULL)
        FY_ASSERT_OK(ferry_mem_unmap(p->ctx, t->mem));
    free(t->buf);
}

/* One put that the target refuses, with or without a request; then the covering flush. */
static void refused_put(pair_t *p, target_t *t, uint64_t addr, int with_req, int worker)
{
    uint8_t src[256];
    fill_pattern(src, sizeof(src), 1);
    done_t d = {0, FERRY_INPROGRESS};
    ferry_request_t r = {.cb = req_cb, .user_data = &d};
    ferry_status_t st = ferry_put(p->ep[0], src, sizeof(src), addr, t->rk, with_req ? &r : NULL);
    /* refused at once (the transport checks its own key), or sent and refused later */
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS || st == FERRY_ERR_ACCESS_DENIED,
                  "put: %s", ferry_status_string(st));
    ferry_status_t fst = worker ? worker_flush(p) : ep_flush(p);
    FY_ASSERT_MSG(fst < 0, "the flush covering a refused put returned %s",
                  ferry_status_string(fst));
    if (st == FERRY_INPROGRESS) {
        for (long i = 0; d.calls == 0 && i < 1000000; i++)
            pair_progress(p);
        FY_ASSERT_EQ(d.calls, 1);
    }
    /* reported once: the next flush is clean */
    FY_ASSERT_OK(worker ? worker_flush(p) : ep_flush(p));
    FY_ASSERT_MSG(check_pattern(t->buf, 2 * LEN, 9), "a refused put touched the target");
}

static void good_put(pair_t *p, target_t *t)
{
    uint8_t src[256];
    fill_pattern(src, sizeof(src), 5);
    ferry_status_t st =
        ferry_put(p->ep[0], src, sizeof(src), (uint64_t)(uintptr_t)t->buf, t->rk, NULL);
    FY_ASSERT_OK(st);
    FY_ASSERT_OK(ep_flush(p));
    FY_ASSERT_MEM_EQ(t->buf, src, sizeof(src));
    fill_pattern(t->buf, 2 * LEN, 9); /* back to the pattern the checks expect */
}

static void refused_oob_put(void)
{
    for (int worker = 0; worker < 2; worker++)
        for (int with_req = 0; with_req < 2; with_req++) {
            pair_t p;
            pair_open(&p);
            target_t t;
            target_open(&p, &t, 1);
            good_put(&p, &t);
            refused_put(&p, &t, (uint64_t)(uintptr_t)t.buf + LEN + 128, with_req, worker);
            /* a straddling put: refused whole, its first half (in the region) untouched */
            refused_put(&p, &t, (uint64_t)(uintptr_t)t.buf + LEN - 128, with_req, worker);
            good_put(&p, &t);
            target_close(&p, &t);
            pair_shut(&p);
        }
}

static void refused_stale_key(void)
{
    for (int worker = 0; worker < 2; worker++)
        for (int with_req = 0; with_req < 2; with_req++) {
            pair_t p;
            pair_open(&p);
            target_t t;
            target_open(&p, &t, 0);
            good_put(&p, &t);
            FY_ASSERT_OK(ferry_mem_unmap(p.ctx, t.mem));
            t.mem = NULL;
            refused_put(&p, &t, (uint64_t)(uintptr_t)t.buf + 512, with_req, worker);
            target_close(&p, &t);
            pair_shut(&p);
        }
}

/* Many refused puts without requests, behind good ones: the first flush reports, the
 * good ones landed. */
static void refused_among_many(void)
{
    pair_t p;
    pair_open(&p);
    target_t t;
    target_open(&p, &t, 1);
    uint8_t src[64];
    fill_pattern(src, sizeof(src), 3);
    for (int i = 0; i < 200; i++) {
        uint64_t addr = (uint64_t)(uintptr_t)t.buf + (i % 2 ? LEN + 64 * (uint64_t)i : 0);
        ferry_status_t st = ferry_put(p.ep[0], src, sizeof(src), addr, t.rk, NULL);
        FY_ASSERT(st == FERRY_OK || st == FERRY_ERR_ACCESS_DENIED);
        if (i % 16 == 0)
            pair_progress(&p);
    }
    FY_ASSERT(ep_flush(&p) < 0);
    FY_ASSERT_OK(ep_flush(&p));
    FY_ASSERT_MEM_EQ(t.buf, src, sizeof(src));
    for (size_t i = LEN; i < 2 * LEN; i++)
        FY_ASSERT_MSG(t.buf[i] == (uint8_t)((i * 31u + 9 * 7u + (i >> 8)) & 0xff),
                      "byte %zu past the region was written", i);
    target_close(&p, &t);
    pair_shut(&p);
}

/* ferry_worker_flush keeps the nonblocking contract: OK now and no callback, or INPROGRESS
 * and exactly one callback from progress; it never blocks (here it could not return at all
 * if it waited: the target is progressed only by this thread). */
static void worker_flush_nonblocking(void)
{
    pair_t p;
    pair_open(&p);
    target_t t;
    target_open(&p, &t, 0);
    const char *emu = getenv("FERRY_RMA_EMULATE");
    for (int round = 0; round < 3; round++) {
        uint8_t src[128];
        fill_pattern(src, sizeof(src), (unsigned)round);
        for (int i = 0; i < 4; i++)
            FY_ASSERT_OK(ferry_put(p.ep[0], src, sizeof(src),
                                   (uint64_t)(uintptr_t)t.buf + 1024 * (uint64_t)i, t.rk, NULL));
        done_t d = {0, FERRY_INPROGRESS};
        ferry_request_t r = {.cb = req_cb, .user_data = &d};
        ferry_status_t st = ferry_worker_flush(p.w[0], &r);
        FY_ASSERT_EQ(d.calls, 0);
        if (emu != NULL && *emu == 'y') /* a PING/PONG round trip: cannot be done yet */
            FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
        if (st == FERRY_INPROGRESS) {
            for (long i = 0; d.calls == 0 && i < 20000000; i++)
                pair_progress(&p);
            FY_ASSERT_EQ(d.calls, 1);
            FY_ASSERT_OK(d.st);
            FY_ASSERT_OK(r.status);
        } else {
            FY_ASSERT_OK(st);
        }
        for (int i = 0; i < 1000; i++)
            pair_progress(&p);
        FY_ASSERT_EQ(d.calls, st == FERRY_INPROGRESS ? 1 : 0);
        for (int i = 0; i < 4; i++)
            FY_ASSERT_MEM_EQ(t.buf + 1024 * i, src, sizeof(src));
    }
    /* the target's worker has only a reply endpoint with nothing in flight */
    pair_progress(&p);
    FY_ASSERT_STATUS(ferry_worker_flush(NULL, NULL), FERRY_ERR_INVALID_PARAM);
    target_close(&p, &t);
    pair_shut(&p);
}

FYTEST_MAIN(FYTEST_CASE(refused_oob_put), FYTEST_CASE(refused_stale_key),
            FYTEST_CASE(refused_among_many), FYTEST_CASE(worker_flush_nonblocking))
