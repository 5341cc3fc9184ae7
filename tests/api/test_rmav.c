/*
 * ferry_putv and ferry_getv: one contiguous remote range from or to several local pieces
 * (zero-length ones among them, up to FERRY_IOV_MAX), checked byte for byte at the target and
 * back; with and without a request; the count limit and the key's bounds refused at once.
 * CTest runs the file natively (self, shm, tcp, udp on loopback), with the RMA emulated over
 * active messages, and with small transport maxima (pieces cut across fragments).
 */
#include "common.h"

static ferry_request_t the_req;

static ferry_request_t *rq(void)
{
    memset(&the_req, 0, sizeof(the_req));
    return &the_req;
}

/* Progress both workers until the_req completes (the target must be progressed too). */
static ferry_status_t run(pair_t *p, ferry_status_t st)
{
    for (long i = 0; st == FERRY_INPROGRESS && i < 20000000; i++) {
        pair_progress(p);
        if (the_req.status != FERRY_INPROGRESS)
            return the_req.status;
    }
    return st;
}

static int is_udp(void)
{
    const char *t = getenv("FERRY_TLS");
    return t != NULL && strcmp(t, "udp") == 0;
}

/* Over udp the end closed first resets the other's flush (see test_tag_api.c): every
 * operation has completed here, so a close by force loses nothing. */
static void close_pair(pair_t *p)
{
    if (!is_udp()) {
        pair_close(p);
        return;
    }
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_ep_close(p->ep[i], FERRY_EP_CLOSE_FORCE, NULL));
    for (int i = 0; i < 2; i++)
        ferry_worker_destroy(p->w[i]);
    ferry_context_destroy(p->ctx);
}

typedef struct target {
    ferry_mem_t *mem;
    ferry_rkey_t *rk;
    char *buf;
    size_t len;
} target_t;

static void target_open(pair_t *p, target_t *t, size_t len)
{
    t->len = len;
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                             .length = len,
                             .flags = FERRY_MEM_ALLOCATE};
    FY_ASSERT_OK(ferry_mem_map(p->ctx, &mp, &t->mem));
    void *a;
    size_t l;
    FY_ASSERT_OK(ferry_mem_query(t->mem, &a, &l));
    t->buf = a;
    memset(t->buf, 0, len);
    char rk[1024];
    size_t rklen = sizeof(rk);
    FY_ASSERT_OK(ferry_rkey_pack(p->ctx, t->mem, rk, &rklen));
    FY_ASSERT_OK(ferry_rkey_unpack(p->ep[0], rk, rklen, &t->rk));
}

static void target_close(pair_t *p, target_t *t)
{
    ferry_rkey_destroy(t->rk);
    FY_ASSERT_OK(ferry_mem_unmap(p->ctx, t->mem));
}

/* n pieces of buf (len bytes): the even ones uneven in size, the odd ones empty. */
static size_t pieces(char *buf, size_t len, size_t n, struct iovec *iov)
{
    size_t off = 0, each = len / ((n + 1) / 2);
    for (size_t i = 0; i < n; i++) {
        if (i % 2) {
            iov[i] = (struct iovec){NULL, 0};
            continue;
        }
        size_t take = len - off;
        if (i + 2 < n && each + i % 3 < take)
            take = each + i % 3;
        iov[i] = (struct iovec){buf + off, take};
        off += take;
    }
    return n;
}

static void putv_getv_case(size_t len, size_t n, int with_req)
{
    pair_t p;
    pair_open(&p);
    target_t t;
    target_open(&p, &t, len + 4096);
    uint64_t base = (uint64_t)(uintptr_t)t.buf + 100;
    char *src = malloc(len), *back = malloc(len + 1);
    fill_pattern(src, len, (unsigned)(len + n));
    struct iovec iov[FERRY_IOV_MAX];
    size_t k = pieces(src, len, n, iov);
    ferry_status_t st = ferry_putv(p.ep[0], iov, k, base, t.rk, with_req ? rq() : NULL);
    if (with_req)
        st = run(&p, st);
    FY_ASSERT_OK(st);
    if (!with_req)
        memset(src, 0, len); /* copied at the call: the target sees the old bytes */
    FY_ASSERT_OK(run(&p, ferry_ep_flush(p.ep[0], rq())));
    FY_ASSERT(check_pattern(t.buf + 100, len, (unsigned)(len + n)));
    FY_ASSERT_EQ(t.buf[99], 0);
    FY_ASSERT_EQ(t.buf[100 + len], 0);
    /* back into other pieces */
    memset(back, 0xee, len + 1);
    k = pieces(back, len, n > 3 ? n - 1 : n, iov);
    FY_ASSERT_OK(run(&p, ferry_getv(p.ep[0], iov, k, base, t.rk, rq())));
    FY_ASSERT(check_pattern(back, len, (unsigned)(len + n)));
    FY_ASSERT_EQ((unsigned char)back[len], 0xee);
    free(src);
    free(back);
    target_close(&p, &t);
    close_pair(&p);
}

/* Sizes from a few bytes to 3 MiB (above the 64k transport maxima of the *_frag runs), 2 to
 * FERRY_IOV_MAX pieces (half of them empty). */
static void putv_getv(void)
{
    static const size_t lens[] = {40, 5000, 300001, (3 << 20) + 9};
    static const size_t ns[] = {3, 6, FERRY_IOV_MAX};
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 3; j++)
            putv_getv_case(lens[i], ns[j], (i + j) % 2);
}

/* Bad input, refused at once with nothing sent. */
static void limits(void)
{
    pair_t p;
    pair_open(&p);
    target_t t;
    target_open(&p, &t, 4096);
    uint64_t base = (uint64_t)(uintptr_t)t.buf;
    char b[64];
    struct iovec many[FERRY_IOV_MAX + 1];
    for (int i = 0; i <= FERRY_IOV_MAX; i++)
        many[i] = (struct iovec){b, 2};
    FY_ASSERT_STATUS(ferry_putv(p.ep[0], many, FERRY_IOV_MAX + 1, base, t.rk, rq()),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_getv(p.ep[0], many, FERRY_IOV_MAX + 1, base, t.rk, rq()),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_putv(p.ep[0], NULL, 1, base, t.rk, rq()), FERRY_ERR_INVALID_PARAM);
    struct iovec bad[2] = {{b, 4}, {NULL, 4}};
    FY_ASSERT_STATUS(ferry_getv(p.ep[0], bad, 2, base, t.rk, rq()), FERRY_ERR_INVALID_PARAM);
    /* 16 pieces of 2 bytes run 32 bytes: past the region's end from 4096 - 31 */
    FY_ASSERT_STATUS(ferry_putv(p.ep[0], many, FERRY_IOV_MAX, base + 4096 - 31, t.rk, rq()),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(ferry_getv(p.ep[0], many, FERRY_IOV_MAX, base + 4096 - 31, t.rk, rq()),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(ferry_putv(NULL, many, 2, base, t.rk, rq()), FERRY_ERR_INVALID_PARAM);
    /* nothing at all: done at once */
    struct iovec none[2] = {{NULL, 0}, {b, 0}};
    FY_ASSERT_OK(ferry_putv(p.ep[0], none, 2, base, t.rk, rq()));
    FY_ASSERT_OK(ferry_getv(p.ep[0], none, 2, base, t.rk, rq()));
    FY_ASSERT_OK(ferry_putv(p.ep[0], none, 0, base, t.rk, rq()));
    /* and exactly to the end is fine */
    memset(b, 0x5a, sizeof(b));
    FY_ASSERT_OK(run(&p, ferry_putv(p.ep[0], many, FERRY_IOV_MAX, base + 4096 - 32, t.rk, rq())));
    FY_ASSERT_OK(run(&p, ferry_ep_flush(p.ep[0], rq())));
    FY_ASSERT_EQ((unsigned char)t.buf[4095], 0x5a);
    FY_ASSERT_EQ((unsigned char)t.buf[4096 - 33], 0);
    target_close(&p, &t);
    close_pair(&p);
}

FYTEST_MAIN(FYTEST_CASE(putv_getv), FYTEST_CASE(limits))
