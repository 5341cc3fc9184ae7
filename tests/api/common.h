/* Shared set-up for the API tests: a context, two workers, endpoints both ways. */
#ifndef FY_API_TEST_COMMON_H
#define FY_API_TEST_COMMON_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fytest.h"
#include "ferry.h"

typedef struct pair {
    ferry_context_t *ctx;
    ferry_worker_t *w[2];
    ferry_ep_t *ep[2]; /* ep[i]: from w[i] to w[1-i] */
} pair_t;

/* A context and two workers (each with params wp, NULL: defaults) with endpoints both ways. */
static inline void pair_open_params(pair_t *p, const ferry_worker_params_t *wp)
{
    memset(p, 0, sizeof(*p));
    FY_ASSERT_OK(ferry_context_create(NULL, &p->ctx));
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_worker_create(p->ctx, wp, &p->w[i]));
    for (int i = 0; i < 2; i++) {
        size_t len = 0;
        FY_ASSERT_STATUS(ferry_worker_get_address(p->w[1 - i], NULL, &len), FERRY_ERR_TRUNCATED);
        void *addr = malloc(len);
        FY_ASSERT_OK(ferry_worker_get_address(p->w[1 - i], addr, &len));
        ferry_ep_params_t ep = {
            .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
        FY_ASSERT_OK(ferry_ep_create(p->w[i], &ep, &p->ep[i]));
        free(addr);
    }
}

static inline void pair_open(pair_t *p)
{
    pair_open_params(p, NULL);
}

static inline void pair_progress(pair_t *p)
{
    ferry_worker_progress(p->w[0]);
    ferry_worker_progress(p->w[1]);
}

static inline void pair_close_cb(ferry_request_t *req, ferry_status_t st)
{
    (void)st;
    *(int *)req->user_data = 1;
}

/* Close both endpoints with a flush.  The flush needs the peer's answer (tcp, udp), and the
 * peer is a worker of this process: both are progressed, never one alone in a blocking call. */
static inline void pair_close(pair_t *p)
{
    ferry_request_t req[2];
    int done[2] = {1, 1}, waited[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        if (p->ep[i] == NULL)
            continue;
        memset(&req[i], 0, sizeof(req[i]));
        req[i].cb = pair_close_cb;
        req[i].user_data = &done[i];
        done[i] = 0;
        ferry_status_t st = ferry_ep_close(p->ep[i], FERRY_EP_CLOSE_FLUSH, &req[i]);
        waited[i] = st == FERRY_INPROGRESS;
        if (!waited[i]) {
            FY_ASSERT_OK(st);
            done[i] = 1;
        }
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!(done[0] && done[1])) {
        pair_progress(p);
        clock_gettime(CLOCK_MONOTONIC, &t);
        FY_ASSERT_MSG(t.tv_sec - t0.tv_sec < 30, "pair_close: a flush did not complete in 30 s");
    }
    for (int i = 0; i < 2; i++)
        if (waited[i])
            FY_ASSERT_OK(req[i].status);
    for (int i = 0; i < 2; i++)
        ferry_worker_destroy(p->w[i]);
    ferry_context_destroy(p->ctx);
}

/* A byte pattern that depends on the seed and the position: byte i is
 * (i * 31 + seed * 7 + i / 256) mod 256.  Within the 256-byte block j (i = 256 j + k) that is
 * 31 (k + d) mod 256 with d = (seed * 7 + j) * 223 mod 256 (223 = 1/31 mod 256): bytes d ..
 * d + 255 of the sequence 31 m mod 256, so large buffers are filled and checked a block at a
 * time (memcpy, memcmp) instead of a byte at a time, which costs seconds per GiB under the
 * sanitizers.  The bytes are the same either way. */
static inline void pattern_seq(unsigned char seq[512])
{
    for (unsigned m = 0; m < 512; m++)
        seq[m] = (unsigned char)(m * 31u);
}

static inline size_t pattern_block(size_t j, unsigned seed)
{
    return ((seed * 7u + (unsigned)j) * 223u) & 0xff;
}

static inline void fill_pattern(void *buf, size_t len, unsigned seed)
{
    unsigned char *b = buf, seq[512];
    pattern_seq(seq);
    for (size_t i = 0; i < len; i += 256)
        memcpy(b + i, seq + pattern_block(i >> 8, seed), len - i < 256 ? len - i : 256);
}

static inline int check_pattern(const void *buf, size_t len, unsigned seed)
{
    const unsigned char *b = buf;
    unsigned char seq[512];
    pattern_seq(seq);
    for (size_t i = 0; i < len; i += 256)
        if (memcmp(b + i, seq + pattern_block(i >> 8, seed), len - i < 256 ? len - i : 256) != 0)
            return 0;
    return 1;
}

/* A request's completion record: how many callbacks came, with which status. */
typedef struct done {
    int calls;
    ferry_status_t st;
} done_t;

static inline void req_cb(ferry_request_t *req, ferry_status_t st)
{
    done_t *d = req->user_data;
    d->calls++;
    d->st = st;
}

#endif
