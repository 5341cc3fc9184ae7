/*
 * test_udp_scale.c - one process with 10,000 udp endpoints, each to another worker, through
 * the public API (FERRY_TLS=udp on loopback):
 *
 *   many_peers  PROCS peer processes (this binary re-executed) hold PEERS workers between them;
 *               the hub process has HUB workers, and each hub worker creates an endpoint to
 *               every peer worker: HUB x PEERS endpoints in the hub process (4 x 2,500 =
 *               10,000), HUB connections on each peer worker.  Each endpoint sends an AM; the
 *               peer answers on its reply endpoint; every answer must arrive, once.  Then all
 *               stay idle for IDLE seconds (11: past FERRY_UDP_PEER_TIMEOUT, its default 10 s,
 *               with FERRY_UDP_KEEPALIVE 1 s, so heartbeats run on every connection many
 *               times), and a second round of AMs must arrive over every endpoint with no
 *               error anywhere: no false timeout at either end.  The hub's
 *               heap growth per idle endpoint (proto's endpoint and udp's connection end) is
 *               printed, with the times of both rounds, for bench/RESULTS.md.
 *
 * FYTEST_SCALE_HUB, FYTEST_SCALE_PEERS, FYTEST_SCALE_PROCS, FYTEST_SCALE_IDLE set the sizes;
 * the sanitizer build runs 2 x 500 (1,000 endpoints) by default, a tenth of the real case,
 * because each worker costs several times more there (shadow memory, redzones, quarantine).
 * Workers run with FERRY_UDP_MTU=1500 (a peer worker's buffers are sized by its segment size:
 * ~250 KiB of resident memory each at 1500, the 2,500 peer workers fit in ~0.7 GiB).
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "fytest.h"
#include "fytest_proc.h"

#if defined(__SANITIZE_ADDRESS__)
#define SCALE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SCALE_SANITIZED 1
#endif
#endif
#ifndef SCALE_SANITIZED
#define SCALE_SANITIZED 0
#endif

#define AM_PING  1
#define AM_PONG  2
#define ADDR_MAX 512

typedef struct ping {
    uint32_t hub, peer, round;
} ping_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s != NULL && atol(s) > 0 ? atol(s) : dflt;
}

static size_t heap_bytes(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

/* ---- a peer process: workers that answer every ping on the reply endpoint ---------------- */

typedef struct peer_w {
    ferry_worker_t *w;
    long pings;
    long errors;
} peer_w_t;

static ferry_status_t on_ping(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *reply_ep)
{
    peer_w_t *p = arg;
    (void)header;
    (void)header_len;
    if (len != sizeof(ping_t)) {
        p->errors++;
        return FERRY_OK;
    }
    p->pings++;
    if (ferry_am_send(reply_ep, AM_PONG, NULL, 0, data, len, NULL) != FERRY_OK)
        p->errors++;
    return FERRY_OK;
}

static int peer_role(int rfd, int wfd, int argc, char **argv)
{
    FY_ASSERT(argc >= 1);
    long n = atol(argv[0]);
    setenv("FERRY_WAIT", "block", 1);
    ferry_context_t *ctx;
    peer_w_t *pw = calloc((size_t)n, sizeof(*pw));
    FY_ASSERT(pw != NULL);
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    for (long i = 0; i < n; i++) {
        FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &pw[i].w));
        FY_ASSERT_OK(ferry_worker_set_am_handler(pw[i].w, AM_PING, on_ping, &pw[i]));
        char addr[ADDR_MAX];
        size_t len = sizeof(addr);
        FY_ASSERT_OK(ferry_worker_get_address(pw[i].w, addr, &len));
        uint32_t l = (uint32_t)len;
        FY_ASSERT(fyproc_send(wfd, &l, sizeof(l)) == 0 && fyproc_send(wfd, addr, len) == 0);
    }
    /* Serve until told to stop ('x'); on 'r' report pings and errors.  Event-driven, as a
     * process with many workers would run them: sleep on all their fds at once, progress the
     * ones that woke (ferry_worker_wait sleeps on an fd that is already readable, then polls
     * every interface), re-arm each before sleeping again.  Spinning over hundreds of workers
     * in several processes on two cores would measure the scheduler, not the transport. */
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    FY_ASSERT(epfd >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    FY_ASSERT(epoll_ctl(epfd, EPOLL_CTL_ADD, rfd, &ev) == 0);
    for (long i = 0; i < n; i++) {
        int fd;
        FY_ASSERT_OK(ferry_worker_get_fd(pw[i].w, &fd));
        ev.data.u64 = (uint64_t)i;
        FY_ASSERT(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0);
        while (ferry_worker_arm(pw[i].w) == FERRY_ERR_BUSY)
            ferry_worker_progress(pw[i].w);
    }
    for (;;) {
        struct epoll_event evs[256];
        int ne = epoll_wait(epfd, evs, 256, 100);
        int stop = 0;
        for (int e = 0; e < ne; e++) {
            if (evs[e].data.u64 != UINT64_MAX) {
                ferry_worker_t *w = pw[evs[e].data.u64].w;
                (void)ferry_worker_wait(w, 1); /* (its fd is readable: no sleep) */
                for (int k = 0; k < 64 && ferry_worker_arm(w) == FERRY_ERR_BUSY; k++)
                    ferry_worker_progress(w);
                continue;
            }
            char c;
            FY_ASSERT(fyproc_recv(rfd, &c, 1, 1000) == 0);
            if (c == 'x') {
                stop = 1;
                break;
            }
            long tot[2] = {0, 0};
            for (long i = 0; i < n; i++) {
                tot[0] += pw[i].pings;
                tot[1] += pw[i].errors;
            }
            FY_ASSERT(fyproc_send(wfd, tot, sizeof(tot)) == 0);
        }
        if (stop)
            break;
    }
    close(epfd);
    for (long i = 0; i < n; i++)
        ferry_worker_destroy(pw[i].w);
    ferry_context_destroy(ctx);
    free(pw);
    return 0;
}

static const fyproc_role_t roles[] = {{"peer", peer_role}};

/* ---- the hub --------------------------------------------------------------------------- */

typedef struct hub {
    long nhub, npeers, nprocs;
    ferry_worker_t **w;
    ferry_ep_t **ep; /* [hub * npeers + peer] */
    uint8_t *got;    /* pongs per endpoint, this round */
    long pongs, dup, bad, errs;
    uint32_t round;
} hub_t;

static hub_t H;

static ferry_status_t on_pong(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *reply_ep)
{
    ping_t p;
    (void)arg, (void)header, (void)header_len, (void)reply_ep;
    if (len != sizeof(p)) {
        H.bad++;
        return FERRY_OK;
    }
    memcpy(&p, data, sizeof(p));
    if (p.hub >= H.nhub || p.peer >= H.npeers || p.round != H.round) {
        H.bad++;
        return FERRY_OK;
    }
    if (H.got[p.hub * H.npeers + p.peer]++ != 0)
        H.dup++;
    else
        H.pongs++;
    return FERRY_OK;
}

static void hub_err(void *arg, ferry_ep_t *ep, ferry_status_t st)
{
    (void)arg, (void)ep;
    H.errs++;
    fprintf(stderr, "hub endpoint failed: %s\n", ferry_status_string(st));
}

static void hub_progress(void)
{
    for (long h = 0; h < H.nhub; h++)
        ferry_worker_progress(H.w[h]);
}

/* Send a ping on every endpoint; progress until every pong is in.  Returns the seconds. */
static double hub_round(uint32_t round, double limit_s)
{
    long n = H.nhub * H.npeers;
    double t0 = now_s();
    H.round = round;
    H.pongs = 0;
    memset(H.got, 0, (size_t)n);
    for (long i = 0; i < n; i++) {
        ping_t p = {(uint32_t)(i / H.npeers), (uint32_t)(i % H.npeers), round};
        ferry_status_t st;
        while ((st = ferry_am_send(H.ep[i], AM_PING, NULL, 0, &p, sizeof(p), NULL)) ==
               FERRY_ERR_NO_RESOURCE)
            hub_progress();
        if (st != FERRY_OK)
            ferry_worker_print_info(H.w[p.hub], stderr);
        FY_ASSERT_OK(st);
        if (i % 64 == 63)
            hub_progress();
    }
    while (H.pongs < n) {
        hub_progress();
        if (now_s() - t0 >= limit_s) /* what the transport saw, for the failure's reader */
            for (long h = 0; h < H.nhub; h++)
                ferry_worker_print_info(H.w[h], stderr);
        FY_ASSERT_MSG(now_s() - t0 < limit_s, "round %u: %ld of %ld answers in %.0f s", round,
                      H.pongs, n, limit_s);
    }
    return now_s() - t0;
}

static void many_peers(void)
{
    H.nhub = env_long("FYTEST_SCALE_HUB", SCALE_SANITIZED ? 2 : 4);
    H.npeers = env_long("FYTEST_SCALE_PEERS", SCALE_SANITIZED ? 500 : 2500);
    H.nprocs = env_long("FYTEST_SCALE_PROCS", SCALE_SANITIZED ? 2 : 5);
    double idle = (double)env_long("FYTEST_SCALE_IDLE", 11);
    long n = H.nhub * H.npeers;
    fyproc_t *procs = calloc((size_t)H.nprocs, sizeof(*procs));
    char(*addr)[ADDR_MAX] = calloc((size_t)H.npeers, ADDR_MAX);
    uint32_t *alen = calloc((size_t)H.npeers, sizeof(*alen));
    H.w = calloc((size_t)H.nhub, sizeof(*H.w));
    H.ep = calloc((size_t)n, sizeof(*H.ep));
    H.got = calloc((size_t)n, 1);
    FY_ASSERT(procs && addr && alen && H.w && H.ep && H.got);

    ferry_context_t *ctx;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    for (long h = 0; h < H.nhub; h++) {
        FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &H.w[h]));
        FY_ASSERT_OK(ferry_worker_set_am_handler(H.w[h], AM_PONG, on_pong, NULL));
    }
    /* The peers: their worker addresses come over the pipes. */
    double t0 = now_s();
    long k = 0;
    for (long p = 0; p < H.nprocs; p++) {
        char cnt[32];
        long mine = H.npeers / H.nprocs + (p < H.npeers % H.nprocs);
        snprintf(cnt, sizeof(cnt), "%ld", mine);
        const char *args[] = {cnt, NULL};
        FY_ASSERT(fyproc_spawn(&procs[p], "peer", args, 600) == 0);
        for (long i = 0; i < mine; i++, k++) {
            FY_ASSERT(fyproc_recv(procs[p].rfd, &alen[k], sizeof(alen[k]), 120000) == 0);
            FY_ASSERT(alen[k] > 0 && alen[k] <= ADDR_MAX);
            FY_ASSERT(fyproc_recv(procs[p].rfd, addr[k], alen[k], 120000) == 0);
        }
    }
    FY_ASSERT_EQ(k, H.npeers);
    double t_workers = now_s() - t0;
    hub_progress();
    size_t heap0 = heap_bytes();

    t0 = now_s();
    for (long i = 0; i < n; i++) {
        long p = i % H.npeers;
        ferry_ep_params_t ep = {.field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER,
                                .address = addr[p],
                                .address_len = alen[p],
                                .err_cb = hub_err};
        FY_ASSERT_OK(ferry_ep_create(H.w[i / H.npeers], &ep, &H.ep[i]));
    }
    double t_create = now_s() - t0;
    double t_first = hub_round(1, 120);
    if (getenv("FYTEST_SCALE_STATS") != NULL)
        ferry_worker_print_info(H.w[0], stderr);

    /* Idle: keepalives run; then the memory of idle endpoints. */
    t0 = now_s();
    while (now_s() - t0 < idle)
        hub_progress();
    size_t heap1 = heap_bytes();
    double t_second = hub_round(2, 120);
    FY_ASSERT_EQ(H.errs, 0);
    FY_ASSERT_EQ(H.dup, 0);
    FY_ASSERT_EQ(H.bad, 0);
    long pings = 0;
    for (long p = 0; p < H.nprocs; p++) {
        long tot[2];
        FY_ASSERT(fyproc_send(procs[p].wfd, "r", 1) == 0);
        while (!fyproc_readable(procs[p].rfd))
            hub_progress();
        FY_ASSERT(fyproc_recv(procs[p].rfd, tot, sizeof(tot), 10000) == 0);
        FY_ASSERT_EQ(tot[1], 0);
        pings += tot[0];
    }
    FY_ASSERT_EQ(pings, 2 * n);
    printf("  %ld hub workers x %ld peer workers in %ld processes = %ld endpoints in the hub "
           "process\n",
           H.nhub, H.npeers, H.nprocs, n);
    printf("  peer workers up in %.2f s; %ld ferry_ep_create in %.3f s; first AM round %.2f s; "
           "after %.0f s idle, second round %.2f s\n",
           t_workers, n, t_create, t_first, idle, t_second);
    if (!SCALE_SANITIZED) /* (mallinfo2 does not see the sanitizer's allocator) */
        printf("  hub heap per idle endpoint: %.0f B (%.1f MiB for %ld)\n",
               (double)(heap1 - heap0) / (double)n, (double)(heap1 - heap0) / 1048576.0, n);
    for (long i = 0; i < n; i++)
        ferry_ep_close(H.ep[i], FERRY_EP_CLOSE_FORCE, NULL);
    for (long p = 0; p < H.nprocs; p++) {
        FY_ASSERT(fyproc_send(procs[p].wfd, "x", 1) == 0);
        FY_ASSERT_EQ(fyproc_wait(&procs[p], 60000), 0);
        fyproc_release(&procs[p]);
    }
    for (long h = 0; h < H.nhub; h++)
        ferry_worker_destroy(H.w[h]);
    ferry_context_destroy(ctx);
    free(procs);
    free(addr);
    free(alen);
    free(H.w);
    free(H.ep);
    free(H.got);
}

int main(int argc, char **argv)
{
    static const fytest_case_t cases[] = {FYTEST_CASE(many_peers)};
    int st;
    setenv("FERRY_TLS", "udp", 0);
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 0);
    setenv("FERRY_UDP_MTU", "1500", 0);
    setenv("FERRY_UDP_KEEPALIVE", "1s", 0);
    if (fyproc_child_main(argc, argv, roles, 1, &st))
        return st;
    return fytest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 0);
}
