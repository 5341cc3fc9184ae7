/*
 * many_eps.c - endpoints by the hundred thousand: what one ferry_ep_create costs when a
 * worker already has many, and how long one active message on each of them takes to arrive.
 * Both must not grow with the number of endpoints (issue 14, defect 8: slots found by a
 * linear scan, and progress walking every endpoint with pending work, made them O(n)).
 *
 *   many_eps [-n ENDPOINTS] [-p PROGRESS_EVERY]
 *
 * One process, two workers (the transport is FERRY_TLS's choice; self by default here):
 * worker A creates n endpoints to worker B, each timed alone; then A sends one 8-byte AM
 * (no request) on each, and both workers progress until B has counted n.  With -p K, both
 * workers progress once every K creations (0: never during creation, the default).
 * Prints the creation median / p90 / p99 / mean in microseconds, the time of the AM round,
 * and the peak resident memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ferry.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long received;

static ferry_status_t on_am(void *arg, const void *header, size_t header_len, const void *data,
                            size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)data, (void)reply_ep;
    if (len == 8)
        received++;
    return FERRY_OK;
}

static void die(const char *what, ferry_status_t st)
{
    fprintf(stderr, "many_eps: %s: %s\n", what, ferry_status_string(st));
    exit(1);
}

int main(int argc, char **argv)
{
    long n = 100000, every = 0;
    int c;
    while ((c = getopt(argc, argv, "n:p:h")) != -1) {
        switch (c) {
        case 'n':
            n = atol(optarg);
            break;
        case 'p':
            every = atol(optarg);
            break;
        default:
            fprintf(stderr, "usage: many_eps [-n ENDPOINTS] [-p PROGRESS_EVERY]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (n <= 0) {
        fprintf(stderr, "many_eps: -n must be positive\n");
        return 2;
    }
    setenv("FERRY_TLS", "self", 0);
    ferry_context_t *ctx;
    ferry_worker_t *wa = NULL, *wb = NULL;
    ferry_status_t st;
    if ((st = ferry_context_create(NULL, &ctx)) != FERRY_OK)
        die("context", st);
    if ((st = ferry_worker_create(ctx, NULL, &wa)) != FERRY_OK ||
        (st = ferry_worker_create(ctx, NULL, &wb)) != FERRY_OK)
        die("worker", st);
    if ((st = ferry_worker_set_am_handler(wb, 1, on_am, NULL)) != FERRY_OK)
        die("handler", st);
    char addr[4096];
    size_t alen = sizeof(addr);
    if ((st = ferry_worker_get_address(wb, addr, &alen)) != FERRY_OK)
        die("address", st);
    ferry_ep_t **eps = calloc((size_t)n, sizeof(*eps));
    double *t = calloc((size_t)n, sizeof(*t));
    if (eps == NULL || t == NULL)
        die("memory", FERRY_ERR_NO_MEMORY);
    ferry_ep_params_t ep = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
    double t0 = now_us();
    for (long i = 0; i < n; i++) {
        double a = now_us();
        if ((st = ferry_ep_create(wa, &ep, &eps[i])) != FERRY_OK)
            die("ferry_ep_create", st);
        t[i] = now_us() - a;
        if (every > 0 && i % every == every - 1) {
            ferry_worker_progress(wa);
            ferry_worker_progress(wb);
        }
    }
    double create_total = now_us() - t0;
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += t[i];
    qsort(t, (size_t)n, sizeof(*t), cmp_double);
    uint64_t v = 42;
    t0 = now_us();
    for (long i = 0; i < n; i++)
        if ((st = ferry_am_send(eps[i], 1, NULL, 0, &v, sizeof(v), NULL)) != FERRY_OK)
            die("ferry_am_send", st);
    double sent = now_us() - t0;
    double deadline = t0 + 600e6;
    while (received < n && now_us() < deadline) {
        ferry_worker_progress(wa);
        ferry_worker_progress(wb);
    }
    double am_total = now_us() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("endpoints %ld (progress every %ld creations)\n", n, every);
    printf("ferry_ep_create us: median %.3f  p90 %.3f  p99 %.3f  mean %.3f  (all: %.3f s)\n",
           t[n / 2], t[n * 9 / 10], t[n * 99 / 100], sum / (double)n, create_total / 1e6);
    printf("one AM on each: %ld of %ld arrived in %.3f s (sends returned after %.3f s)\n", received,
           n, am_total / 1e6, sent / 1e6);
    printf("peak RSS %.0f MiB\n", (double)ru.ru_maxrss / 1024.0);
    for (long i = 0; i < n; i++)
        ferry_ep_close(eps[i], FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(wa);
    ferry_worker_destroy(wb);
    ferry_context_destroy(ctx);
    free(eps);
    free(t);
    return received == n ? 0 : 1;
}
