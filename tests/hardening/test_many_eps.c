/*
 * Endpoints by the ten thousand (issue 14, defect 8): creating one must not cost more when
 * many exist (slots come from a free stack, not a scan), and one active message on each must
 * arrive in a time that grows with the messages, not with their square (progress retries only
 * the endpoints that wait, and stops early when the transport refuses).  Also: freed slots
 * are reused and messages still reach the right endpoint.  The 100,000-endpoint figures are
 * bench/many_eps's; this stays at 20,000 to stay small in time and memory.  With every
 * transport offered (hard_many_eps_all), an endpoint has other candidates to fall back to, and
 * its heap cost must stay small all the same: the fallback state shares the peer's address and
 * grows only when a lane fails (it was 3.5 KiB more per endpoint).
 */
#include <malloc.h>
#include <time.h>

#include "fytest.h"

enum { N = 20000, WIN = 1000 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static unsigned char *seen; /* per message index: arrivals */
static long received, bad;

static ferry_status_t on_am(void *arg, const void *header, size_t header_len, const void *data,
                            size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)reply_ep;
    uint64_t i;
    if (len != sizeof(i)) {
        bad++;
        return FERRY_OK;
    }
    memcpy(&i, data, sizeof(i));
    if (i >= 2 * (uint64_t)N || seen[i]++ != 0)
        bad++;
    received++;
    return FERRY_OK;
}

typedef struct world {
    ferry_context_t *ctx;
    ferry_worker_t *a, *b;
    char addr[4096];
    size_t alen;
} world_t;

static ferry_ep_t *ep_new(world_t *w)
{
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = w->addr, .address_len = w->alen};
    ferry_ep_t *ep;
    FY_ASSERT_OK(ferry_ep_create(w->a, &p, &ep));
    return ep;
}

/* Send message index idx[i] on eps[i] for each i, and wait for all to arrive. */
static double am_round(world_t *w, ferry_ep_t **eps, const uint64_t *idx, long n)
{
    received = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++)
        FY_ASSERT_OK(ferry_am_send(eps[i], 1, NULL, 0, &idx[i], sizeof(idx[i]), NULL));
    while (received < n && now_s() < t0 + 60) {
        ferry_worker_progress(w->a);
        ferry_worker_progress(w->b);
    }
    FY_ASSERT_EQ(received, n);
    FY_ASSERT_EQ(bad, 0);
    return now_s() - t0;
}

static void many_eps(void)
{
    world_t w;
    FY_ASSERT_OK(ferry_context_create(NULL, &w.ctx));
    FY_ASSERT_OK(ferry_worker_create(w.ctx, NULL, &w.a));
    FY_ASSERT_OK(ferry_worker_create(w.ctx, NULL, &w.b));
    FY_ASSERT_OK(ferry_worker_set_am_handler(w.b, 1, on_am, NULL));
    w.alen = sizeof(w.addr);
    FY_ASSERT_OK(ferry_worker_get_address(w.b, w.addr, &w.alen));
    seen = calloc(2 * N, 1);
    ferry_ep_t **eps = calloc(N, sizeof(*eps));
    uint64_t *idx = calloc(N, sizeof(*idx));
    double *t = calloc(N, sizeof(*t));
    FY_ASSERT(seen != NULL && eps != NULL && idx != NULL && t != NULL);

    struct mallinfo2 m0 = mallinfo2();
    for (long i = 0; i < N; i++) {
        double a = now_s();
        eps[i] = ep_new(&w);
        t[i] = now_s() - a;
        idx[i] = (uint64_t)i;
    }
    struct mallinfo2 m1 = mallinfo2();
    size_t heap0 = m0.uordblks + m0.hblkhd, heap1 = m1.uordblks + m1.hblkhd;
    if (heap1 > heap0) { /* (a sanitizer's allocator reports nothing here) */
        double per_ep = (double)(heap1 - heap0) / N;
        printf("heap per endpoint (with its reply endpoint): %.0f bytes\n", per_ep);
        FY_ASSERT_MSG(per_ep < 4096, "each endpoint costs %.0f bytes of heap", per_ep);
    }
    /* the last thousand creations cost about what the first thousand did */
    double first = median(t, WIN), last = median(t + N - WIN, WIN);
    printf("ferry_ep_create median: first %d %.3f us, last %d %.3f us\n", WIN, first * 1e6, WIN,
           last * 1e6);
    FY_ASSERT_MSG(last < 3 * first + 1e-6, "creation slows down with the number of endpoints");

    double s = am_round(&w, eps, idx, N);
    printf("one AM on each of %d endpoints: %.3f s\n", N, s);
    FY_ASSERT_MSG(s < 5.0, "one AM on each of %d endpoints took %.1f s", N, s);

    /* free every other slot, take them again: messages still land where they should */
    for (long i = 0; i < N; i += 2)
        FY_ASSERT_OK(ferry_ep_close(eps[i], FERRY_EP_CLOSE_FORCE, NULL));
    for (long i = 0; i < N; i += 2) {
        eps[i] = ep_new(&w);
        idx[i] = (uint64_t)(N + i);
    }
    for (long i = 1; i < N; i += 2)
        idx[i] = (uint64_t)(N + i);
    s = am_round(&w, eps, idx, N);
    printf("again after reusing %d slots: %.3f s\n", N / 2, s);
    for (long i = 0; i < 2 * N; i++)
        FY_ASSERT_EQ(seen[i], 1);

    for (long i = 0; i < N; i++)
        FY_ASSERT_OK(ferry_ep_close(eps[i], FERRY_EP_CLOSE_FORCE, NULL));
    ferry_worker_destroy(w.a);
    ferry_worker_destroy(w.b);
    ferry_context_destroy(w.ctx);
    free(seen);
    free(eps);
    free(idx);
    free(t);
}

FYTEST_MAIN(FYTEST_CASE(many_eps))
