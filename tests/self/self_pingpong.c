/*
 * self_pingpong.c - a benchmark of active messages between two workers of one process over
 * the self transport, through the public API, in the two ways they are driven:
 *
 *   1 thread    one thread progresses both workers in turn (a runtime that owns every
 *               worker of the process, or a test)
 *   2 threads   each worker has its own thread, pinned to its own core when there are two
 *               (what examples/two_workers measures)
 *
 * For each size it prints the one-way latency (half the round trip of a ping-pong) and the
 * message rate and bandwidth of a stream (windows of 64 messages, one acknowledgement per
 * window; every message is a plain ferry_am_send without a request, as in two_workers).
 *
 * Usage: self_pingpong [-t 1|2|0 (both)] [-n latency iterations] [-w windows] [-s bytes]
 * Not a correctness test (the tests are test_self*.c), but it checks every status and counts
 * every message.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ferry.h"

enum { AM_PING = 1, AM_PONG, AM_DATA, AM_ACK, AM_STOP };
#define WINDOW 64

typedef struct side {
    ferry_worker_t *w;
    ferry_ep_t *ep;
    volatile unsigned long pongs, data, acks;
    volatile int stop;
} side_t;

static void check(ferry_status_t st, const char *what)
{
    if (st != FERRY_OK) {
        fprintf(stderr, "self_pingpong: %s: %s\n", what, ferry_status_string(st));
        exit(1);
    }
}

static ferry_status_t on_ping(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                              ferry_ep_t *reply)
{
    (void)arg;
    return ferry_am_send(reply, AM_PONG, h, hl, d, dl, NULL);
}
static ferry_status_t on_pong(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                              ferry_ep_t *reply)
{
    (void)h, (void)hl, (void)d, (void)dl, (void)reply;
    ((side_t *)arg)->pongs++;
    return FERRY_OK;
}
static ferry_status_t on_data(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                              ferry_ep_t *reply)
{
    (void)h, (void)d, (void)dl;
    ((side_t *)arg)->data++;
    return hl == 1 ? ferry_am_send(reply, AM_ACK, NULL, 0, NULL, 0, NULL) : FERRY_OK;
}
static ferry_status_t on_ack(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                             ferry_ep_t *reply)
{
    (void)h, (void)hl, (void)d, (void)dl, (void)reply;
    ((side_t *)arg)->acks++;
    return FERRY_OK;
}
static ferry_status_t on_stop(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                              ferry_ep_t *reply)
{
    (void)h, (void)hl, (void)d, (void)dl, (void)reply;
    ((side_t *)arg)->stop = 1;
    return FERRY_OK;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2)
        (void)pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

static side_t a, b;
static int threads;

static void *serve(void *arg)
{
    (void)arg;
    pin(1);
    while (!b.stop)
        ferry_worker_progress(b.w);
    return NULL;
}

/* Progress until *counter reaches n: our worker, and the other one too when one thread
 * drives both. */
static void wait_for(volatile unsigned long *counter, unsigned long n)
{
    while (*counter < n) {
        ferry_worker_progress(a.w);
        if (threads == 1)
            ferry_worker_progress(b.w);
    }
}

static void run(const size_t *sizes, size_t nsizes, unsigned iters, unsigned windows)
{
    printf("%d thread%s: %s\n", threads, threads == 1 ? "" : "s",
           threads == 1 ? "one thread progresses both workers"
                        : "each worker progressed by its own thread");
    printf("%10s %14s %14s %16s\n", "bytes", "latency (us)", "rate (Mmsg/s)", "bandwidth (MB/s)");
    pthread_t th;
    b.stop = 0;
    if (threads == 2)
        pthread_create(&th, NULL, serve, NULL);
    pin(0);
    char *buf = calloc(1, sizes[nsizes - 1]);
    for (size_t i = 0; i < nsizes; i++) {
        size_t sz = sizes[i];
        unsigned n = sz >= 65536 ? iters / 20 + 10 : iters;
        unsigned w = sz >= 65536 ? windows / 20 + 5 : windows;
        for (int pass = 0; pass < 2; pass++) { /* warm-up, then measured */
            a.pongs = 0;
            double t0 = now();
            for (unsigned k = 0; k < n; k++) {
                check(ferry_am_send(a.ep, AM_PING, NULL, 0, buf, sz, NULL), "ping");
                wait_for(&a.pongs, k + 1);
            }
            double lat = (now() - t0) / n / 2 * 1e6;
            a.acks = 0;
            t0 = now();
            for (unsigned k = 0; k < w; k++) {
                for (unsigned j = 0; j < WINDOW; j++)
                    check(ferry_am_send(a.ep, AM_DATA, "x", j == WINDOW - 1, buf, sz, NULL),
                          "data");
                wait_for(&a.acks, k + 1);
            }
            double dt = now() - t0;
            if (pass == 1)
                printf("%10zu %14.3f %14.2f %16.1f\n", sz, lat, (double)w * WINDOW / dt / 1e6,
                       (double)sz * w * WINDOW / dt / 1e6);
        }
    }
    free(buf);
    if (threads == 2) {
        check(ferry_am_send(a.ep, AM_STOP, NULL, 0, NULL, 0, NULL), "stop");
        wait_for(&a.acks, 0);
        pthread_join(th, NULL);
    }
}

int main(int argc, char **argv)
{
    int mode = 0;
    unsigned iters = 20000, windows = 2000;
    size_t one = 0;
    int opt;
    while ((opt = getopt(argc, argv, "t:n:w:s:")) != -1) {
        switch (opt) {
        case 't':
            mode = atoi(optarg);
            break;
        case 'n':
            iters = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'w':
            windows = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 's':
            one = (size_t)strtoull(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr, "usage: %s [-t 1|2] [-n iters] [-w windows] [-s bytes]\n", argv[0]);
            return 2;
        }
    }
    static const size_t all[] = {8, 64, 1024, 8192, 65536, 1 << 20};
    const size_t *sizes = one != 0 ? &one : all;
    size_t nsizes = one != 0 ? 1 : sizeof(all) / sizeof(all[0]);

    setenv("FERRY_TLS", "self", 0);
    ferry_context_t *ctx;
    check(ferry_context_create(NULL, &ctx), "context");
    check(ferry_worker_create(ctx, NULL, &a.w), "worker");
    check(ferry_worker_create(ctx, NULL, &b.w), "worker");
    char addr[8192];
    size_t len = sizeof(addr);
    check(ferry_worker_get_address(b.w, addr, &len), "address");
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
    check(ferry_ep_create(a.w, &p, &a.ep), "endpoint");
    ferry_worker_set_am_handler(b.w, AM_PING, on_ping, &b);
    ferry_worker_set_am_handler(b.w, AM_DATA, on_data, &b);
    ferry_worker_set_am_handler(b.w, AM_STOP, on_stop, &b);
    ferry_worker_set_am_handler(a.w, AM_PONG, on_pong, &a);
    ferry_worker_set_am_handler(a.w, AM_ACK, on_ack, &a);
    for (threads = 1; threads <= 2; threads++)
        if (mode == 0 || mode == threads)
            run(sizes, nsizes, iters, windows);
    ferry_ep_close(a.ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(a.w);
    ferry_worker_destroy(b.w);
    ferry_context_destroy(ctx);
    return 0;
}
