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
 *
 *   msg_cost -2 CPU,CPU [-t tag|am] [-s SIZE] [-n BATCHES]
 *
 * The same workers in two threads, one per cpu: A streams messages with at most 64 sends
 * outstanding (a send that finds the ring full is queued and completes later), B keeps 64
 * receives posted (tag) and reads the clock after every STREAM_BATCH messages it has taken:
 * ucx_perftest's tag_bw, in threads.  Prints the fastest and the median interval per
 * message: the streaming rate's cost per message with the transfers between the cores, and
 * still free of the intervals in which another process had either core.
 *
 *   msg_cost -2 CPU,CPU -l [-s SIZE] [-n BATCHES]
 *
 * Tagged ping-pong between the two threads (tag_lat's scheme): A posts the receive of the
 * answer, sends, and waits; B answers each message.  A reads the clock every BATCH round
 * trips; prints the fastest and median batch's one-way time (round trip / 2) per message.
 */
/* pthread_setaffinity_np: _GNU_SOURCE comes from the build */
#include <pthread.h>
#include <sched.h>
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

/* ---- two threads: a stream from A (one cpu) to B (another) ---------------------------------- */

#define STREAM_BATCH 1024

/* The two threads' run: A (cpu[0]) sends on ep to B (cpu[1]), which answers on ba. */
typedef struct two {
    int tag, cpu[2];
    size_t size;
    unsigned n; /* batches */
    ferry_worker_t *a, *b;
    ferry_ep_t *ep, *ba;
    char *sbuf, *rbuf;
    uint64_t *t; /* the clock readings */
    volatile int failed;
} two_t;

static unsigned long stream_done; /* tagged messages delivered to B (B's thread) */

static void stream_recv_done(ferry_request_t *req, ferry_status_t status)
{
    (void)req;
    if (status == FERRY_OK)
        stream_done++;
}

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *stream_sender(void *arg)
{
    two_t *x = arg;
    ferry_request_t sq[BATCH];
    memset(sq, 0, sizeof(sq));
    for (unsigned k = 0; k < BATCH; k++)
        sq[k].status = FERRY_OK;
    if (pin(x->cpu[0]) != 0)
        x->failed = 1;
    unsigned long total = (unsigned long)x->n * STREAM_BATCH;
    for (unsigned long i = 0; i < total && !x->failed; i++) {
        ferry_request_t *r = &sq[i % BATCH];
        while (r->status == FERRY_INPROGRESS && !x->failed) /* queued behind a full ring */
            ferry_worker_progress(x->a);
        r->cb = NULL;
        r->user_data = NULL;
        ferry_status_t st;
        while ((st = x->tag ? ferry_tag_send(x->ep, 5, x->sbuf, x->size, r)
                            : ferry_am_send(x->ep, 3, NULL, 0, x->sbuf, x->size, r)) ==
                   FERRY_ERR_NO_RESOURCE &&
               !x->failed)
            ferry_worker_progress(x->a);
        if (st == FERRY_OK) /* done: the request was not kept (its status is not ours) */
            r->status = FERRY_OK;
        else if (st != FERRY_INPROGRESS)
            x->failed = 1;
    }
    for (unsigned k = 0; k < BATCH && !x->failed; k++)
        while (sq[k].status == FERRY_INPROGRESS && !x->failed)
            ferry_worker_progress(x->a);
    return NULL;
}

/* B: the receiver, in the calling thread; 0 on success. */
static int stream_receiver(two_t *x)
{
    ferry_request_t rq[BATCH];
    unsigned long total = (unsigned long)x->n * STREAM_BATCH, posted = 0, next = 0;
    unsigned k = 0;
    if (pin(x->cpu[1]) != 0)
        return 1;
    stream_done = 0;
    delivered = 0;
    for (; x->tag && posted < BATCH; posted++) {
        rq[posted].cb = stream_recv_done;
        rq[posted].user_data = NULL;
        if (ferry_tag_recv(x->b, x->rbuf + posted * x->size, x->size, 5, ~0ull, &rq[posted]) !=
            FERRY_INPROGRESS)
            return 1;
    }
    uint64_t deadline = clock_ns() + 600000000000ull; /* 10 minutes: something is lost */
    for (unsigned long spins = 1; !x->failed; spins++) {
        ferry_worker_progress(x->b);
        if (!x->tag)
            stream_done = delivered; /* (the AM handler counts in delivered) */
        unsigned long got = stream_done;
        while (x->tag && posted < total && posted - got < BATCH) { /* repost, in order */
            ferry_request_t *r = &rq[posted % BATCH];
            r->cb = stream_recv_done;
            r->user_data = NULL;
            if (ferry_tag_recv(x->b, x->rbuf + (posted % BATCH) * x->size, x->size, 5, ~0ull, r) !=
                FERRY_INPROGRESS)
                return 1;
            posted++;
        }
        if (got >= next * STREAM_BATCH) { /* the first reading: after the first batch's first */
            x->t[k++] = clock_ns();
            next++;
            if (k > x->n)
                return 0;
        }
        if ((spins & 0xffff) == 0 && clock_ns() > deadline)
            return 1;
    }
    return 1;
}

/* ---- two threads: tagged ping-pong ------------------------------------------------------------
 */

#define PP_PING 7
#define PP_PONG 8

/* Send on ep, progressing w while the transport pushes back; 0 on success. */
static int pp_send(two_t *x, ferry_worker_t *w, ferry_ep_t *ep, const char *buf, uint64_t tag)
{
    ferry_status_t st;
    while ((st = ferry_tag_send(ep, tag, buf, x->size, NULL)) == FERRY_ERR_NO_RESOURCE &&
           !x->failed)
        ferry_worker_progress(w);
    return st != FERRY_OK;
}

/* Post a receive on w and wait for it (progressing w); 0 on success. */
static int pp_recv(two_t *x, ferry_worker_t *w, char *buf, uint64_t tag)
{
    ferry_request_t r;
    r.cb = NULL;
    r.user_data = NULL;
    ferry_status_t st = ferry_tag_recv(w, buf, x->size, tag, ~0ull, &r);
    if (st == FERRY_INPROGRESS)
        while ((st = r.status) == FERRY_INPROGRESS && !x->failed)
            ferry_worker_progress(w);
    return st != FERRY_OK;
}

static void *pp_responder(void *arg)
{
    two_t *x = arg;
    if (pin(x->cpu[1]) != 0)
        x->failed = 1;
    for (unsigned long i = 0; i < (unsigned long)x->n * BATCH && !x->failed; i++)
        if (pp_recv(x, x->b, x->rbuf, PP_PING) != 0 ||
            pp_send(x, x->b, x->ba, x->rbuf, PP_PONG) != 0)
            x->failed = 1;
    return NULL;
}

/* A, the initiator, in the calling thread; 0 on success. */
static int pingpong_main(two_t *x)
{
    pthread_t th;
    x->t = calloc(x->n, sizeof(*x->t));
    if (x->t == NULL || pthread_create(&th, NULL, pp_responder, x) != 0)
        return 1;
    if (pin(x->cpu[0]) != 0)
        x->failed = 1;
    for (unsigned k = 0; k < x->n && !x->failed; k++) {
        uint64_t t0 = clock_ns();
        for (unsigned j = 0; j < BATCH && !x->failed; j++) {
            ferry_request_t r;
            r.cb = NULL;
            r.user_data = NULL;
            if (ferry_tag_recv(x->a, x->sbuf, x->size, PP_PONG, ~0ull, &r) != FERRY_INPROGRESS ||
                pp_send(x, x->a, x->ep, x->sbuf, PP_PING) != 0) {
                x->failed = 1;
                break;
            }
            while (r.status == FERRY_INPROGRESS && !x->failed)
                ferry_worker_progress(x->a);
        }
        x->t[k] = clock_ns() - t0;
    }
    int failed = x->failed;
    x->failed = 1; /* (stops the responder if it still waits) */
    pthread_join(th, NULL);
    if (!failed) {
        qsort(x->t, x->n, sizeof(*x->t), by_time);
        printf("tag %zu B, ping-pong cpu %d <-> %d: %.1f ns one-way (fastest batch of %d), %.1f "
               "(median)\n",
               x->size, x->cpu[0], x->cpu[1], (double)x->t[0] / BATCH / 2, BATCH,
               (double)x->t[x->n / 2] / BATCH / 2);
    }
    free(x->t);
    return failed;
}

static int stream_main(two_t *x)
{
    pthread_t th;
    x->t = calloc((size_t)x->n + 1, sizeof(*x->t));
    if (x->t == NULL || pthread_create(&th, NULL, stream_sender, x) != 0)
        return 1;
    int rc = stream_receiver(x);
    if (rc != 0)
        x->failed = 1;
    pthread_join(th, NULL);
    if (rc != 0 || x->failed) {
        free(x->t);
        return 1;
    }
    for (unsigned i = 0; i < x->n; i++)
        x->t[i] = x->t[i + 1] - x->t[i];
    qsort(x->t, x->n, sizeof(*x->t), by_time);
    printf("%s %zu B, stream cpu %d -> %d: %.2f ns/message (fastest %d), %.2f (median), %.1f M/s "
           "(fastest)\n",
           x->tag ? "tag" : "am", x->size, x->cpu[0], x->cpu[1], (double)x->t[0] / STREAM_BATCH,
           STREAM_BATCH, (double)x->t[x->n / 2] / STREAM_BATCH,
           STREAM_BATCH * 1e3 / (double)x->t[0]);
    free(x->t);
    return 0;
}

int main(int argc, char **argv)
{
    int tag = 1;
    size_t size = 8;
    unsigned n = 20000;
    int cpu[2] = {-1, -1}, lat = 0;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "-l") == 0) {
            lat = 1;
            i--;
        } else if (i + 1 >= argc) {
            n = 0; /* an option without its value */
        } else if (strcmp(argv[i], "-2") == 0) {
            if (sscanf(argv[i + 1], "%d,%d", &cpu[0], &cpu[1]) != 2)
                cpu[0] = -1;
        } else if (strcmp(argv[i], "-t") == 0)
            tag = strcmp(argv[i + 1], "am") != 0;
        else if (strcmp(argv[i], "-s") == 0)
            size = strtoul(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "-n") == 0)
            n = (unsigned)strtoul(argv[i + 1], NULL, 0);
    }
    if (size == 0 || size > 65536 || n < 10 || (lat && (cpu[0] < 0 || !tag))) {
        fprintf(stderr,
                "usage: msg_cost [-2 CPU,CPU [-l]] [-t tag|am] [-s 1..65536] [-n BATCHES>=10]\n");
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
    for (unsigned i = 0; cpu[0] < 0 && i < n; i++) { /* (not for the stream) */
        uint64_t t0 = clock_ns();
        if (batch(tag, a, b, ep, sbuf, rbuf, size, rq, sq) != 0) {
            fprintf(stderr, "msg_cost: a batch failed\n");
            return 1;
        }
        t[i] = clock_ns() - t0;
    }
    int rc = 0;
    char aaddr[4096];
    size_t aalen = sizeof(aaddr);
    ferry_ep_t *ba = NULL;
    two_t x = {.tag = tag,
               .cpu = {cpu[0], cpu[1]},
               .size = size,
               .n = n / 20 + 10,
               .a = a,
               .b = b,
               .ep = ep,
               .sbuf = sbuf,
               .rbuf = rbuf};
    if (lat) { /* B's endpoint to A for the answers, connected by a first exchange */
        ferry_ep_params_t q = {.field_mask = FERRY_EP_FIELD_ADDRESS, .address = aaddr};
        ferry_request_t r = {.cb = NULL};
        ferry_status_t st = FERRY_ERR_INVALID_PARAM;
        if (ferry_worker_get_address(a, aaddr, &aalen) == FERRY_OK &&
            (q.address_len = aalen, ferry_ep_create(b, &q, &ba)) == FERRY_OK &&
            ferry_tag_send(ba, PP_PONG, sbuf, size, NULL) == FERRY_OK)
            st = ferry_tag_recv(a, rbuf, size, PP_PONG, ~0ull, &r);
        while (st == FERRY_INPROGRESS && (st = r.status) == FERRY_INPROGRESS) {
            ferry_worker_progress(a);
            ferry_worker_progress(b);
        }
        x.ba = ba;
        rc = st != FERRY_OK || pingpong_main(&x) != 0;
        if (rc != 0)
            fprintf(stderr, "msg_cost: the ping-pong failed\n");
    } else if (cpu[0] >= 0) {
        rc = stream_main(&x);
        if (rc != 0)
            fprintf(stderr, "msg_cost: the stream failed\n");
    } else {
        qsort(t, n, sizeof(*t), by_time);
        printf("%s %zu B: %.1f ns/message (fastest batch), %.1f (median batch)\n",
               tag ? "tag" : "am", size, (double)t[0] / BATCH, (double)t[n / 2] / BATCH);
    }
    free(t);
    free(sq);
    free(rq);
    free(rbuf);
    free(sbuf);
    if (ba != NULL)
        ferry_ep_close(ba, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(b);
    ferry_worker_destroy(a);
    ferry_context_destroy(ctx);
    return rc;
}
