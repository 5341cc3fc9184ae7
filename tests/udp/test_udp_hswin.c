/*
 * test_udp_hswin.c - the handshake window of the udp transport (udp_handshake.c: hs_begin,
 * fy_udp_hs_end, fy_udp_hs_admit): at most FY_UDP_HS_WINDOW (128) handshakes of one iface
 * are under way, the others wait in order of their ep_create, and a waiting handshake's
 * PEER_TIMEOUT starts when it is admitted.  One iface opens N > 128 endpoints at once, in
 * this process on the loopback, and the test reads the iface's state after every call:
 *
 *   live  N endpoints to one real iface (b, progressed in turn with a): "handshakes queued"
 *         (hs_waited) is N - 128 at once, never more than 128 are under way, the waiting ones
 *         are always the last ones created, in creation order (first come, first served),
 *         and every handshake completes: an AM on each endpoint arrives.
 *   dead  N endpoints to addresses where a bound socket takes every datagram and answers
 *         none (PEER_TIMEOUT 300 ms): never more than 128 under way, admitted in order, each
 *         fails (UNREACHABLE) no sooner than PEER_TIMEOUT after its admission - not after its
 *         ep_create - and no later than PEER_TIMEOUT plus the retry interval and some slack;
 *         the last fails after about ceil(N / 128) x PEER_TIMEOUT.
 *
 * Without the window both fail at once (N handshakes under way); with the deadline taken
 * from ep_create, dead fails (a waiting handshake fails at its first retry).
 *
 *   slow_peer  handshakes one after another to a peer that answers 40 ms late: the first
 *              retry waits 1.5 x what the iface's recent handshakes took (hs_time), so a
 *              later handshake is asked again at most once where the first was 2-3 times.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "fytest.h"
#include "tl/udp/udp.h"
#include "udp_test.h"

#define N         300 /* 128 + 128 + 44: three turns of the window */
#define PT_MS     300 /* FERRY_UDP_PEER_TIMEOUT of the dead case */
#define RETRY_MAX 100 /* ms: the handshake's longest retry interval (udp_handshake.c) */
#define LATE_MS   250 /* a loaded machine's slack on top */
#define NS_PER_MS FY_NSEC_PER_MSEC

static const fy_tl_ops_t *ops;
static ut_side_t sa, sb;
static fy_tl_ep_t *eps[N];
static uint64_t admit_ns[N], fail_ns[N];
static ferry_status_t fail_st[N];
static int nfailed;

static void side_open(ut_side_t *s, uint64_t uuid)
{
    FY_ASSERT_OK(ut_lo_open(&ops, s, uuid));
}

static void side_close(ut_side_t *s)
{
    ut_lo_close(ops, s);
}

/* a's err_cb: which endpoint failed, when and why. */
static void ep_failed(void *arg, fy_tl_ep_t *ep, ferry_status_t st)
{
    (void)arg;
    for (int i = 0; i < N; i++)
        if (eps[i] == ep) {
            FY_ASSERT_MSG(fail_ns[i] == 0, "endpoint %d failed twice", i);
            fail_ns[i] = fy_time_ns();
            fail_st[i] = st;
            nfailed++;
            return;
        }
    FY_ASSERT_MSG(0, "err_cb for an endpoint never created");
}

/* The window's invariants, read after every call with eps[0..n) created: at most 128
 * handshakes under way, the waiting ones are the last created, in creation order.  Records
 * when each left the queue.  Returns how many still wait. */
static int check_window(fy_udp_iface_t *ia, int n)
{
    int waiting = 0, under_way = 0;
    fy_list_t *e;
    FY_ASSERT_LE(ia->hs_active, FY_UDP_HS_WINDOW);
    fy_list_for_each(e, &ia->hs_wait) waiting++;
    int first = n - waiting, k = first;
    fy_list_for_each(e, &ia->hs_wait)
    {
        fy_udp_conn_t *c = fy_container_of(e, fy_udp_conn_t, hs_link);
        FY_ASSERT_MSG(c == fy_udp_conn(eps[k]),
                      "the queue's %d-th handshake is not endpoint %d: not in creation order",
                      k - first, k);
        k++;
    }
    uint64_t now = fy_time_ns();
    for (int i = 0; i < first; i++) {
        if (admit_ns[i] == 0)
            admit_ns[i] = now;
        under_way += fy_udp_conn(eps[i])->hs_slot;
    }
    FY_ASSERT_EQ(under_way, ia->hs_active);
    return waiting;
}

/* N endpoints to b at once: the first 128 start, the rest wait, all complete. */
static void live(void)
{
    side_open(&sb, 0xb0b);
    side_open(&sa, 0xa11ce);
    fy_udp_iface_t *ia = fy_udp_iface(sa.iface);
    memset(eps, 0, sizeof(eps));
    memset(admit_ns, 0, sizeof(admit_ns));
    for (int i = 0; i < N; i++) {
        FY_ASSERT_OK(ops->ep_create(sa.iface, sb.dev, sb.ifa, &eps[i]));
        check_window(ia, i + 1);
    }
    FY_ASSERT_EQ(ia->hs_active, FY_UDP_HS_WINDOW);
    FY_ASSERT_EQ(ia->hs_waited, N - FY_UDP_HS_WINDOW); /* "handshakes queued" */
    FY_ASSERT_EQ(check_window(ia, N), N - FY_UDP_HS_WINDOW);

    uint64_t t0 = fy_time_ns();
    int connected = 0, max_waiting = N;
    while (connected < N) {
        ops->iface_progress(sa.iface);
        int waiting = check_window(ia, N);
        FY_ASSERT_LE(waiting, max_waiting); /* (a handshake never goes back to the queue) */
        max_waiting = waiting;
        ops->iface_progress(sb.iface);
        connected = 0;
        for (int i = 0; i < N; i++)
            connected += fy_udp_conn(eps[i])->state == FY_UDP_CONN_CONNECTED;
        FY_ASSERT_MSG(fy_time_ns() - t0 < 30 * FY_NSEC_PER_SEC,
                      "%d of %d connected in 30 s (%d waiting, %u under way)", connected, N,
                      waiting, ia->hs_active);
    }
    FY_ASSERT_EQ(ia->hs_active, 0);
    FY_ASSERT_EQ(check_window(ia, N), 0);
    FY_ASSERT_EQ(ia->hs_waited, N - FY_UDP_HS_WINDOW);
    /* every connection works: an AM on each */
    for (int i = 0; i < N; i++) {
        struct iovec iov = {&i, sizeof(i)};
        FY_ASSERT_OK(ops->am_short(eps[i], 1, &iov, 1));
    }
    FY_ASSERT_OK(ut_sides_until(ops, &sa, &sb, &sb.ams, N, 30000));
    FY_ASSERT_EQ(sb.ams, N);
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr, "live: %d handshakes in %.1f ms, %llu queued\n", N,
                (double)(fy_time_ns() - t0) / 1e6, (unsigned long long)ia->hs_waited);
    for (int i = 0; i < N; i++)
        ops->ep_destroy(eps[i]);
    side_close(&sa);
    side_close(&sb);
}

/* N endpoints to peers that never answer: each fails PEER_TIMEOUT after its admission. */
static void dead(void)
{
    /* The black hole: a bound socket nobody reads (the kernel drops what overflows it). */
    int hole = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in hin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t hl = sizeof(hin);
    FY_ASSERT(hole >= 0);
    FY_ASSERT(bind(hole, (struct sockaddr *)&hin, sizeof(hin)) == 0);
    FY_ASSERT(getsockname(hole, (struct sockaddr *)&hin, &hl) == 0);

    /* (each failure logs its "no answer from ...": 300 expected lines) */
    if (getenv("FERRY_LOG_LEVEL") == NULL)
        setenv("FERRY_LOG_LEVEL", "none", 1);
    setenv("FERRY_UDP_PEER_TIMEOUT", "300ms", 1);
    side_open(&sa, 0xdead);
    unsetenv("FERRY_UDP_PEER_TIMEOUT");
    fy_udp_iface_t *ia = fy_udp_iface(sa.iface);
    FY_ASSERT_EQ(ia->opts->peer_timeout, (uint64_t)PT_MS * NS_PER_MS);
    sa.iface->params.err_cb = ep_failed;

    /* The peers' addresses: this host, the hole's port, a uuid each (no two alike, so
     * every endpoint is a connection of its own). */
    fy_udp_iface_addr_t ifa;
    memcpy(&ifa, sa.ifa, sizeof(ifa));
    ifa.prio_port = ifa.data_port = ntohs(hin.sin_port);
    memset(eps, 0, sizeof(eps));
    memset(admit_ns, 0, sizeof(admit_ns));
    memset(fail_ns, 0, sizeof(fail_ns));
    nfailed = 0;
    uint64_t t0 = fy_time_ns();
    for (int i = 0; i < N; i++) {
        ifa.uuid = 0x5eed0000u + (uint64_t)i;
        FY_ASSERT_OK(ops->ep_create(sa.iface, sa.dev, &ifa, &eps[i]));
        check_window(ia, i + 1);
    }
    FY_ASSERT_EQ(ia->hs_active, FY_UDP_HS_WINDOW);
    FY_ASSERT_EQ(ia->hs_waited, N - FY_UDP_HS_WINDOW);

    int turns = (N + FY_UDP_HS_WINDOW - 1) / FY_UDP_HS_WINDOW;
    uint64_t limit = (uint64_t)turns * (PT_MS + RETRY_MAX + LATE_MS) * NS_PER_MS;
    while (nfailed < N) {
        ops->iface_progress(sa.iface);
        check_window(ia, N);
        FY_ASSERT_MSG(fy_time_ns() - t0 < limit, "%d of %d failed in %.1f s", nfailed, N,
                      limit / 1e9);
    }
    uint64_t last = 0;
    for (int i = 0; i < N; i++) {
        FY_ASSERT_STATUS(fail_st[i], FERRY_ERR_UNREACHABLE);
        FY_ASSERT_MSG(admit_ns[i] != 0 && fail_ns[i] > admit_ns[i],
                      "endpoint %d failed before its handshake started", i);
        uint64_t took = fail_ns[i] - admit_ns[i];
        /* (admit_ns is read after the pass that admitted it: up to a pass late) */
        FY_ASSERT_MSG(took >= (uint64_t)(PT_MS - 50) * NS_PER_MS,
                      "endpoint %d failed %.1f ms after its admission (%.1f ms after its "
                      "creation): its PEER_TIMEOUT (%d ms) did not start at its admission",
                      i, took / 1e6, (fail_ns[i] - t0) / 1e6, PT_MS);
        FY_ASSERT_MSG(took <= (uint64_t)(PT_MS + RETRY_MAX + LATE_MS) * NS_PER_MS,
                      "endpoint %d failed %.1f ms after its admission (PEER_TIMEOUT %d ms)", i,
                      took / 1e6, PT_MS);
        last = FY_MAX(last, fail_ns[i]);
    }
    /* (each turn of the window waits out one PEER_TIMEOUT) */
    FY_ASSERT_GE(last - t0, (uint64_t)turns * (PT_MS - 50) * NS_PER_MS);
    FY_ASSERT_EQ(ia->hs_active, 0);
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr, "dead: %d handshakes failed, the last after %.1f ms (%d turns of %d ms)\n",
                N, (last - t0) / 1e6, turns, PT_MS);
    for (int i = 0; i < N; i++)
        ops->ep_destroy(eps[i]);
    side_close(&sa);
    close(hole);
}

/* Handshakes one after another to a peer whose answers come 40 ms late (its fault injector
 * holds what it sends; the COOKIE and PROBE_ACK, sent directly, come at once, the CONN_ACK
 * late): the first, with no history, is asked again at 5, 15 (and 35) ms; once the iface
 * knows its handshakes take ~40 ms, the first retry waits 1.5 times that - one at most. */
#define SLOW_MS 40
#define SLOW_N  5

static void slow_peer(void)
{
    setenv("FERRY_UDP_FAULT_DELAY", "100", 1);
    setenv("FERRY_UDP_FAULT_DELAY_TIME", "40ms", 1);
    side_open(&sb, 0xb0b);
    unsetenv("FERRY_UDP_FAULT_DELAY");
    unsetenv("FERRY_UDP_FAULT_DELAY_TIME");
    side_open(&sa, 0xa11ce);
    fy_udp_iface_t *ia = fy_udp_iface(sa.iface);
    uint64_t tx[SLOW_N], first_retry[SLOW_N];
    for (int i = 0; i < SLOW_N; i++) {
        uint64_t tx0 = ia->tx_dgrams, t0 = fy_time_ns();
        FY_ASSERT_OK(ops->ep_create(sa.iface, sb.dev, sb.ifa, &eps[i]));
        fy_udp_conn_t *c = fy_udp_conn(eps[i]);
        /* when the first retry is due (the request left in ep_create) */
        first_retry[i] = c->conn_timer.room.expiry - c->conn_last_tx;
        while (c->state != FY_UDP_CONN_CONNECTED) {
            ops->iface_progress(sa.iface);
            ops->iface_progress(sb.iface);
            FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "handshake %d: 10 s", i);
        }
        tx[i] = ia->tx_dgrams - tx0; /* (a sends nothing but the handshake) */
        if (getenv("FYTEST_VERBOSE"))
            fprintf(stderr,
                    "slow_peer: handshake %d in %.1f ms, first retry due at %.1f ms, %llu "
                    "datagrams sent\n",
                    i, (fy_time_ns() - t0) / 1e6, first_retry[i] / 1e6, (unsigned long long)tx[i]);
    }
    FY_ASSERT_GE(ia->hs_time, (uint64_t)SLOW_MS * NS_PER_MS);
    /* The first, with no history, is asked again after 5 ms; the last after 1.5 x the
     * handshakes' time (>= 60 ms) */
    FY_ASSERT_EQ(first_retry[0], 5 * NS_PER_MS);
    FY_ASSERT_GE(first_retry[SLOW_N - 1], (uint64_t)SLOW_MS * 3 / 2 * NS_PER_MS);
    /* request, probe, request with the cookie, and one retry at most (a late answer on a
     * busy host); the first had its retries at 5 and 15 ms (requests only, once the probe's
     * answer came) */
    FY_ASSERT_LE(tx[SLOW_N - 1], 4);
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    for (int i = 0; i < SLOW_N; i++)
        ops->ep_destroy(eps[i]);
    side_close(&sa);
    side_close(&sb);
}

FYTEST_MAIN(FYTEST_CASE(live), FYTEST_CASE(dead), FYTEST_CASE(slow_peer), )
