/*
 * two_workers.c - the smallest ferry program that measures something: two workers of one
 * process, each driven by its own thread, exchange active messages.  Prints a table of
 * one-way latency (ping-pong) and bandwidth (a stream acknowledged at the end) by size.
 * Uses only the public API.
 */
#include <ferry.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { AM_PING = 1, AM_PONG = 2, AM_DATA = 3, AM_ACK = 4, AM_STOP = 5 };

typedef struct side {
    ferry_worker_t *w;
    ferry_ep_t *ep;
    volatile unsigned long pongs, data, acks;
    volatile int stop;
} side_t;

static ferry_status_t on_ping(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                              ferry_ep_t *reply)
{
    (void)arg;
    return ferry_am_send(reply, AM_PONG, h, hl, d, dl, NULL);
}
static ferry_status_t on_count(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                               ferry_ep_t *reply)
{
    (void)h, (void)hl, (void)d, (void)dl, (void)reply;
    ((side_t *)arg)->pongs++;
    return FERRY_OK;
}
static ferry_status_t on_data(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                              ferry_ep_t *reply)
{
    (void)h, (void)hl, (void)d, (void)dl;
    side_t *s = arg;
    s->data++;
    if (hl == 1) /* last of a window: acknowledge */
        return ferry_am_send(reply, AM_ACK, NULL, 0, NULL, 0, NULL);
    return FERRY_OK;
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

static void *serve(void *arg)
{
    side_t *s = arg;
    while (!s->stop)
        ferry_worker_progress(s->w);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int die(const char *what, ferry_status_t st)
{
    fprintf(stderr, "two_workers: %s: %s\n", what, ferry_status_string(st));
    return 1;
}

int main(void)
{
    ferry_context_t *ctx;
    side_t a = {0}, b = {0};
    ferry_status_t st;
    if ((st = ferry_context_create(NULL, &ctx)) != FERRY_OK)
        return die("context", st);
    if ((st = ferry_worker_create(ctx, NULL, &a.w)) || (st = ferry_worker_create(ctx, NULL, &b.w)))
        return die("worker", st);
    char addr[8192];
    size_t len = sizeof(addr);
    ferry_worker_get_address(b.w, addr, &len);
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
    if ((st = ferry_ep_create(a.w, &p, &a.ep)) != FERRY_OK)
        return die("endpoint", st);
    ferry_worker_set_am_handler(b.w, AM_PING, on_ping, &b);
    ferry_worker_set_am_handler(b.w, AM_DATA, on_data, &b);
    ferry_worker_set_am_handler(b.w, AM_STOP, on_stop, &b);
    ferry_worker_set_am_handler(a.w, AM_PONG, on_count, &a);
    ferry_worker_set_am_handler(a.w, AM_ACK, on_ack, &a);
    pthread_t th;
    pthread_create(&th, NULL, serve, &b);

    printf("ferry %s: two workers, one process, active messages\n", ferry_version());
    printf("%10s %14s %14s\n", "bytes", "latency (us)", "bandwidth (MB/s)");
    static const size_t sizes[] = {8, 64, 1024, 8192, 65536, 1 << 20};
    char *buf = calloc(1, 1 << 20);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t sz = sizes[i];
        unsigned iters = sz >= 65536 ? 200 : 5000;
        a.pongs = 0;
        for (unsigned k = 0; k < 100; k++) { /* warm-up */
            ferry_am_send(a.ep, AM_PING, NULL, 0, buf, sz, NULL);
            while (a.pongs <= k)
                ferry_worker_progress(a.w);
        }
        a.pongs = 0;
        double t0 = now();
        for (unsigned k = 0; k < iters; k++) {
            if ((st = ferry_am_send(a.ep, AM_PING, NULL, 0, buf, sz, NULL)) != FERRY_OK)
                return die("send", st);
            while (a.pongs <= k)
                ferry_worker_progress(a.w);
        }
        double lat = (now() - t0) / iters / 2 * 1e6;
        unsigned window = 32, windows = sz >= 65536 ? 20 : 200;
        a.acks = 0;
        t0 = now();
        for (unsigned w = 0; w < windows; w++) {
            for (unsigned k = 0; k < window; k++)
                ferry_am_send(a.ep, AM_DATA, "x", k == window - 1 ? 1 : 0, buf, sz, NULL);
            while (a.acks <= w)
                ferry_worker_progress(a.w);
        }
        double bw = (double)sz * window * windows / (now() - t0) / 1e6;
        printf("%10zu %14.2f %14.1f\n", sz, lat, bw);
    }
    ferry_am_send(a.ep, AM_STOP, NULL, 0, NULL, 0, NULL);
    pthread_join(th, NULL);
    free(buf);
    ferry_ep_close(a.ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(a.w);
    ferry_worker_destroy(b.w);
    ferry_context_destroy(ctx);
    return 0;
}
