/*
 * Put, get and atomics between two workers, verified at the target; with FERRY_TLS=self they
 * run natively, and the emulated path (over active messages) is forced per case by unpacking
 * the key on an endpoint whose RMA lane has no native support (see emulated_*).
 */
#include "common.h"

/* Blocking forms progress only their own worker; in one thread the target must be progressed
 * too, so every call here takes a request and both workers are pumped until it completes. */
static ferry_request_t the_req;

static ferry_request_t *rq(void)
{
    memset(&the_req, 0, sizeof(the_req));
    return &the_req;
}

static ferry_status_t run(pair_t *p, ferry_status_t st)
{
    for (long i = 0; st == FERRY_INPROGRESS && i < 10000000; i++) {
        pair_progress(p);
        if (the_req.status != FERRY_INPROGRESS)
            return the_req.status;
    }
    return st;
}

static ferry_status_t flush(pair_t *p)
{
    return run(p, ferry_ep_flush(p->ep[0], rq()));
}

typedef struct target {
    ferry_mem_t *mem;
    ferry_rkey_t *rk;
    uint64_t *buf;
    size_t len;
} target_t;

static void target_open(pair_t *p, target_t *t, size_t len, int allocate)
{
    t->len = len;
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH, .length = len};
    if (allocate) {
        mp.field_mask |= FERRY_MEM_FIELD_FLAGS;
        mp.flags = FERRY_MEM_ALLOCATE;
    } else {
        t->buf = calloc(1, len);
        mp.field_mask |= FERRY_MEM_FIELD_ADDRESS;
        mp.address = t->buf;
    }
    FY_ASSERT_OK(ferry_mem_map(p->ctx, &mp, &t->mem));
    void *a;
    size_t l;
    FY_ASSERT_OK(ferry_mem_query(t->mem, &a, &l));
    FY_ASSERT_EQ(l, len);
    t->buf = a;
    char rk[1024];
    size_t rklen = sizeof(rk);
    FY_ASSERT_OK(ferry_rkey_pack(p->ctx, t->mem, rk, &rklen));
    FY_ASSERT_OK(ferry_rkey_unpack(p->ep[0], rk, rklen, &t->rk));
}

static void target_close(pair_t *p, target_t *t, int allocate)
{
    ferry_rkey_destroy(t->rk);
    void *buf = t->buf;
    FY_ASSERT_OK(ferry_mem_unmap(p->ctx, t->mem));
    if (!allocate)
        free(buf);
}

static void put_get(void)
{
    for (int alloc = 0; alloc < 2; alloc++) {
        pair_t p;
        pair_open(&p);
        target_t t;
        target_open(&p, &t, 1 << 20, alloc);
        uint64_t base = (uint64_t)(uintptr_t)t.buf;
        char *src = malloc(t.len), *back = malloc(t.len);
        fill_pattern(src, t.len, 3);
        FY_ASSERT_OK(ferry_put(p.ep[0], src, t.len, base, t.rk, NULL));
        FY_ASSERT_OK(flush(&p));
        FY_ASSERT(check_pattern(t.buf, t.len, 3));
        memset(back, 0, t.len);
        ferry_status_t st = run(&p, ferry_get(p.ep[0], back + 100, 5000, base + 100, t.rk, rq()));
        FY_ASSERT_OK(st);
        FY_ASSERT_MEM_EQ(back + 100, src + 100, 5000);
        free(src);
        free(back);
        target_close(&p, &t, alloc);
        pair_close(&p);
    }
}

static void atomics(void)
{
    pair_t p;
    pair_open(&p);
    target_t t;
    target_open(&p, &t, 4096, 1);
    uint64_t base = (uint64_t)(uintptr_t)t.buf;
    uint64_t old = 0;
    for (int i = 0; i < 1000; i++)
        FY_ASSERT_OK(
            run(&p, ferry_atomic(p.ep[0], FERRY_ATOMIC_ADD, 8, 3, 0, NULL, base, t.rk, rq())));
    FY_ASSERT_OK(run(&p, ferry_atomic(p.ep[0], FERRY_ATOMIC_ADD, 8, 1, 0, &old, base, t.rk, rq())));
    FY_ASSERT_U64_EQ(old, 3000);
    FY_ASSERT_U64_EQ(t.buf[0], 3001);
    FY_ASSERT_OK(
        run(&p, ferry_atomic(p.ep[0], FERRY_ATOMIC_SWAP, 8, 77, 0, &old, base, t.rk, rq())));
    FY_ASSERT_U64_EQ(old, 3001);
    FY_ASSERT_OK(
        run(&p, ferry_atomic(p.ep[0], FERRY_ATOMIC_CSWAP, 8, 88, 76, &old, base, t.rk, rq())));
    FY_ASSERT_U64_EQ(old, 77); /* compare failed */
    FY_ASSERT_U64_EQ(t.buf[0], 77);
    FY_ASSERT_OK(
        run(&p, ferry_atomic(p.ep[0], FERRY_ATOMIC_CSWAP, 8, 88, 77, &old, base, t.rk, rq())));
    FY_ASSERT_U64_EQ(t.buf[0], 88);
    uint32_t old32 = 0;
    uint32_t *w32 = (uint32_t *)&t.buf[1];
    *w32 = 0xf0;
    FY_ASSERT_OK(
        run(&p, ferry_atomic(p.ep[0], FERRY_ATOMIC_OR, 4, 0x0f, 0, &old32, base + 8, t.rk, rq())));
    FY_ASSERT_EQ(old32, 0xf0);
    FY_ASSERT_OK(
        run(&p, ferry_atomic(p.ep[0], FERRY_ATOMIC_AND, 4, 0x3c, 0, NULL, base + 8, t.rk, rq())));
    FY_ASSERT_OK(
        run(&p, ferry_atomic(p.ep[0], FERRY_ATOMIC_XOR, 4, 0x01, 0, NULL, base + 8, t.rk, rq())));
    FY_ASSERT_OK(flush(&p));
    FY_ASSERT_EQ(*w32, 0x3d);
    target_close(&p, &t, 1);
    pair_close(&p);
}

static void nonblocking_get(void)
{
    pair_t p;
    pair_open(&p);
    target_t t;
    target_open(&p, &t, 65536, 0);
    fill_pattern(t.buf, t.len, 9);
    char *back = calloc(1, t.len);
    done_t d = {0, FERRY_INPROGRESS};
    ferry_request_t req = {.cb = req_cb, .user_data = &d};
    ferry_status_t st = ferry_get(p.ep[0], back, t.len, (uint64_t)(uintptr_t)t.buf, t.rk, &req);
    FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
    for (int i = 0; i < 100000 && st == FERRY_INPROGRESS && d.calls == 0; i++)
        pair_progress(&p);
    FY_ASSERT_EQ(d.calls, st == FERRY_OK ? 0 : 1);
    FY_ASSERT(check_pattern(back, t.len, 9));
    free(back);
    target_close(&p, &t, 0);
    pair_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(put_get), FYTEST_CASE(atomics), FYTEST_CASE(nonblocking_get))
