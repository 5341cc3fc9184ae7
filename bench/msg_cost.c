/*
 * msg_cost.c - what one small message costs the processor, send and receive together, measured
 * in one thread so that a loaded machine does not hide it: the two-process rate and latency
 * figures of ferry_perf swing by 10x when other work shares the cores, this one by a few
 * percent (a batch that was interrupted is simply not the fastest one).
 *
 *   msg_cost [-t tag|am] [-s SIZE] [-n BATCHES]
 *
 * One process, two workers (the transport is FERRY_TLS's choice): worker A has an endpoint to
 * worker B.  A batch is 64 messages of SIZE bytes (default 8): for tag, B posts 64 receives
 * and A sends 64 tagged messages; for am, A sends 64 active messages to a handler of B.  Then
 * B progresses until all 64 have been delivered.  Prints the fastest batch's time per message
 * in nanoseconds (the floor, free of interruptions) and the median batch's.  What it leaves
 * out: the cache-line transfers between two cores, which ferry_perf's two processes pay.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferry.h"

#define BATCH 64

static unsigned delivered;

static void recv_done(ferry_request_t *req, ferry_status_t status)
{
    (void)req;
    if (status == FERRY_OK)
        delivered++;
}

static ferry_status_t am_done(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)data, (void)len, (void)reply_ep;
    delivered++;
    return FERRY_OK;
}

/* The monotonic clock in nanoseconds: a batch of 64 takes microseconds, far above its cost. */
static uint64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int by_time(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* One batch; 0 on success. */
static int batch(int tag, ferry_worker_t *a, ferry_worker_t *b, ferry_ep_t *ep, char *sbuf,
                 char *rbuf, size_t size, ferry_request_t *rq, ferry_request_t *sq)
{
    delivered = 0;
    for (unsigned k = 0; tag && k < BATCH; k++) {
        rq[k].cb = recv_done;   /* what the API asks of a request before the call (no memset: */
        rq[k].user_data = NULL; /* 200 bytes cleared by rep stosq would cost more than ferry) */
        ferry_status_t st = ferry_tag_recv(b, rbuf + k * size, size, 5, ~0ull, &rq[k]);
        if (st != FERRY_INPROGRESS && st != FERRY_OK)
            return 1;
    }
    for (unsigned k = 0; k < BATCH; k++) {
        sq[k].cb = NULL;
        sq[k].user_data = NULL;
        ferry_status_t st;
        while ((st = tag ? ferry_tag_send(ep, 5, sbuf, size, &sq[k])
                         : ferry_am_send(ep, 3, NULL, 0, sbuf, size, &sq[k])) ==
               FERRY_ERR_NO_RESOURCE) {
            ferry_worker_progress(b);
            ferry_worker_progress(a);
        }
        if (st != FERRY_INPROGRESS && st != FERRY_OK)
            return 1;
    }
    for (unsigned long spins = 0; delivered < BATCH; spins++) {
        ferry_worker_progress(b);
        if (spins > 1000)
            ferry_worker_progress(a); /* only while connecting: the fast path needs none */
        if (spins > 100000000ul)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int tag = 1;
    size_t size = 8;
    unsigned n = 20000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-t") == 0)
            tag = strcmp(argv[i + 1], "am") != 0;
        else if (strcmp(argv[i], "-s") == 0)
            size = strtoul(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "-n") == 0)
            n = (unsigned)strtoul(argv[i + 1], NULL, 0);
    }
    if (size == 0 || size > 65536 || n < 10) {
        fprintf(stderr, "usage: msg_cost [-t tag|am] [-s 1..65536] [-n BATCHES>=10]\n");
        return 2;
    }
    ferry_context_t *ctx;
    ferry_worker_t *a, *b;
    ferry_ep_t *ep;
    char addr[4096];
    size_t alen = sizeof(addr);
    if (ferry_context_create(NULL, &ctx) != FERRY_OK ||
        ferry_worker_create(ctx, NULL, &a) != FERRY_OK ||
        ferry_worker_create(ctx, NULL, &b) != FERRY_OK ||
        ferry_worker_get_address(b, addr, &alen) != FERRY_OK ||
        ferry_worker_set_am_handler(b, 3, am_done, NULL) != FERRY_OK) {
        fprintf(stderr, "msg_cost: cannot start ferry\n");
        return 1;
    }
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
    char *sbuf = calloc(1, size), *rbuf = calloc(BATCH, size);
    ferry_request_t *rq = calloc(BATCH, sizeof(*rq)), *sq = calloc(BATCH, sizeof(*sq));
    uint64_t *t = calloc(n, sizeof(*t)); /* each batch's time, ns */
    if (ferry_ep_create(a, &p, &ep) != FERRY_OK || !sbuf || !rbuf || !rq || !sq || !t) {
        fprintf(stderr, "msg_cost: cannot connect\n");
        return 1;
    }
    for (unsigned i = 0; i < 100; i++) /* warm-up: the connection, the pools, the caches */
        if (batch(tag, a, b, ep, sbuf, rbuf, size, rq, sq) != 0) {
            fprintf(stderr, "msg_cost: a batch failed\n");
            return 1;
        }
    for (unsigned i = 0; i < n; i++) {
        uint64_t t0 = clock_ns();
        if (batch(tag, a, b, ep, sbuf, rbuf, size, rq, sq) != 0) {
            fprintf(stderr, "msg_cost: a batch failed\n");
            return 1;
        }
        t[i] = clock_ns() - t0;
    }
    qsort(t, n, sizeof(*t), by_time);
    printf("%s %zu B: %.1f ns/message (fastest batch), %.1f (median batch)\n", tag ? "tag" : "am",
           size, (double)t[0] / BATCH, (double)t[n / 2] / BATCH);
    free(t);
    free(sq);
    free(rq);
    free(rbuf);
    free(sbuf);
    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(b);
    ferry_worker_destroy(a);
    ferry_context_destroy(ctx);
    return 0;
}
