/*
 * Operations above a transport's one-call limits, through the public API: proto splits them
 * and the caller sees one operation.  An AM larger than the lane's max_zcopy arrives as one
 * message (whole user header and data, one handler call, in order with its neighbours), with
 * and without a request, from an iovec; a put and a get larger than max_rma land whole with
 * one completion.  CTest runs it over tcp and udp with small maxima (FERRY_TCP_MAX_MSG,
 * FERRY_UDP_MAX_ZCOPY) so a message is many fragments, and once over tcp's real 1 GiB max_rma.
 */
#include <stdint.h>
#include <time.h>

#include "common.h"

#define DEADLINE_MS 60000

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

typedef struct big_rx {
    unsigned count, bad;
    size_t lens[4];
} big_rx_t;

/* Each message: a header of hlen bytes of pattern seed+100, data of pattern seed (its index). */
static ferry_status_t on_big(void *arg, const void *header, size_t header_len, const void *data,
                             size_t data_len, ferry_ep_t *reply_ep)
{
    (void)reply_ep;
    big_rx_t *rx = arg;
    unsigned seed = rx->count;
    if (!check_pattern(header, header_len, seed + 100) || !check_pattern(data, data_len, seed))
        rx->bad++;
    if (rx->count < 4)
        rx->lens[rx->count] = data_len;
    rx->count++;
    return FERRY_OK;
}

static void wait_count(pair_t *p, big_rx_t *rx, unsigned n)
{
    int64_t end = now_ms() + DEADLINE_MS;
    while (rx->count < n) {
        FY_ASSERT_MSG(now_ms() < end, "%u of %u messages arrived", rx->count, n);
        pair_progress(p);
    }
}

/* Wait for a request (st is what the call returned), progressing both workers. */
static ferry_status_t wait_req(pair_t *p, ferry_status_t st, done_t *d)
{
    int64_t end = now_ms() + DEADLINE_MS;
    while (st == FERRY_INPROGRESS && d->calls == 0) {
        FY_ASSERT_MSG(now_ms() < end, "a request never completed");
        pair_progress(p);
    }
    FY_ASSERT_EQ(d->calls, st == FERRY_INPROGRESS ? 1 : 0);
    return d->calls ? d->st : st;
}

/* Close both endpoints with a flush while both workers progress (the peer must answer). */
static void split_close(pair_t *p)
{
    for (int i = 0; i < 2; i++) {
        done_t d = {0};
        ferry_request_t req = {.cb = req_cb, .user_data = &d};
        FY_ASSERT_OK(wait_req(p, ferry_ep_close(p->ep[i], FERRY_EP_CLOSE_FLUSH, &req), &d));
        p->ep[i] = NULL;
    }
    pair_close(p);
}

static void am_fragmented(void)
{
    pair_t p;
    pair_open(&p);
    big_rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 9, on_big, &rx));
    size_t lens[4] = {(3u << 20) + 777, 100, (1u << 20) + 3, 0};
    size_t hlens[4] = {FERRY_AM_HEADER_MAX, 3, 0, FERRY_AM_HEADER_MAX};
    char hdr[FERRY_AM_HEADER_MAX];
    /* 0: no request, one buffer; 1: small; 2: a request, from a 3-piece iovec; 3: header only */
    for (unsigned i = 0; i < 4; i++) {
        char *buf = malloc(lens[i] + 1);
        FY_ASSERT(buf != NULL);
        fill_pattern(buf, lens[i], i);
        fill_pattern(hdr, hlens[i], i + 100);
        if (i != 2) {
            FY_ASSERT_OK(ferry_am_send(p.ep[0], 9, hdr, hlens[i], buf, lens[i], NULL));
            memset(buf, 0xee, lens[i]); /* no request: the caller's buffer is free at once */
        } else {
            struct iovec iov[3] = {{buf, 5}, {buf + 5, lens[i] / 2}, {buf + 5 + lens[i] / 2, 0}};
            iov[2].iov_len = lens[i] - iov[0].iov_len - iov[1].iov_len;
            done_t d = {0};
            ferry_request_t req = {.cb = req_cb, .user_data = &d};
            ferry_status_t st = ferry_am_sendv(p.ep[0], 9, hdr, hlens[i], iov, 3, &req);
            FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
            FY_ASSERT_OK(wait_req(&p, st, &d));
        }
        free(buf);
    }
    wait_count(&p, &rx, 4);
    for (unsigned i = 0; i < 4; i++)
        FY_ASSERT_EQ(rx.lens[i], lens[i]);
    FY_ASSERT_EQ(rx.bad, 0u);
    /* nothing more: each message ran its handler once */
    for (int i = 0; i < 100; i++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.count, 4u);
    split_close(&p);
}

/* A put then a get of FYTEST_RMA_LEN bytes (default 9 MiB + 1), checked byte for byte. */
static void rma_split(void)
{
    const char *e = getenv("FYTEST_RMA_LEN");
    size_t len = e != NULL ? (size_t)strtoull(e, NULL, 0) : (9u << 20) + 1;
    /* filled before the endpoints exist: a GiB takes seconds under sanitizers, and a
     * connection whose peer does not progress meanwhile times out (FERRY_TCP_CONN_TIMEOUT).
     * Anonymous mappings (zeroed) in huge pages where the kernel gives them: a GiB in 4 KiB
     * pages is 262144 page faults per buffer, seconds on a virtual machine. */
    char *src = fytest_map(len), *dst = fytest_map(len);
    (void)madvise(src, len, MADV_HUGEPAGE);
    (void)madvise(dst, len, MADV_HUGEPAGE);
    fill_pattern(src, len, 5);
    pair_t p;
    pair_open(&p);
    ferry_mem_t *mem;
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_ADDRESS | FERRY_MEM_FIELD_LENGTH,
                             .address = dst,
                             .length = len};
    FY_ASSERT_OK(ferry_mem_map(p.ctx, &mp, &mem));
    char rk[1024];
    size_t rklen = sizeof(rk);
    FY_ASSERT_OK(ferry_rkey_pack(p.ctx, mem, rk, &rklen));
    ferry_rkey_t *rkey;
    FY_ASSERT_OK(ferry_rkey_unpack(p.ep[0], rk, rklen, &rkey));
    done_t d = {0};
    ferry_request_t req = {.cb = req_cb, .user_data = &d};
    ferry_status_t st = ferry_put(p.ep[0], src, len, (uint64_t)(uintptr_t)dst, rkey, &req);
    FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
    FY_ASSERT_OK(wait_req(&p, st, &d));
    done_t f = {0};
    ferry_request_t freq = {.cb = req_cb, .user_data = &f};
    FY_ASSERT_OK(wait_req(&p, ferry_ep_flush(p.ep[0], &freq), &f));
    FY_ASSERT_MSG(memcmp(src, dst, len) == 0, "the put of %zu bytes did not land whole", len);
    /* the get: back into src, zeroed */
    memset(src, 0, len);
    done_t g = {0};
    ferry_request_t greq = {.cb = req_cb, .user_data = &g};
    st = ferry_get(p.ep[0], src, len, (uint64_t)(uintptr_t)dst, rkey, &greq);
    FY_ASSERT_OK(wait_req(&p, st, &g));
    FY_ASSERT_MSG(check_pattern(src, len, 5), "the get of %zu bytes did not come whole", len);
    ferry_rkey_destroy(rkey);
    FY_ASSERT_OK(ferry_mem_unmap(p.ctx, mem));
    fytest_unmap(src, len);
    fytest_unmap(dst, len);
    split_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(am_fragmented), FYTEST_CASE(rma_split))
