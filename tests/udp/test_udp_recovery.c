/*
 * test_udp_recovery.c - loss recovery of the udp transport, each mechanism on its own, with
 * two ifaces in this process on the loopback so that the test decides when each side runs
 * and reads the sender's state directly (tl/udp/udp.h):
 *
 *   rack_burst   one segment in the middle of a burst is dropped (the sender's fault
 *                injector, turned on for that one send) and nothing is sent after the
 *                burst.  RACK's time rule and the reorder timer (udp_retx.c) must resend it
 *                about a round trip and a reorder window after it left: the repair comes
 *                well inside the RTO floor (500 ms here, against a ~10 ms round trip: the
 *                receiver's fault injector holds every datagram it sends 10 ms), as a fast
 *                retransmit, with no timeout.  Without the time rule only the timer, an RTO
 *                later, would resend it.
 *   dack_rtt     ping-pong where one side computes 80 ms between receiving a request and
 *                answering it, without calling progress.  The request carried the ACK of its
 *                previous answer; that ACK's processing is deferred to the next pass
 *                (fy_udp_ack_settle) and must be timed at the request's arrival (dack_ns):
 *                the answering side's RTT samples stay far below the 80 ms it computed.
 */
#include <time.h>

#include "fytest.h"
#include "tl/udp/udp.h"
#include "udp_test.h"

typedef struct side {
    fy_tl_md_t *md;
    fy_tl_iface_t *iface;
    fy_tl_ep_t *ep;
    uint8_t dev[64], ifa[64];
    volatile int ams, errs;
} side_t;

static const fy_tl_ops_t *ops;
static side_t sa, sb;

static void side_am(void *arg, uint8_t id, const void *data, size_t len)
{
    (void)id;
    (void)data;
    (void)len;
    ((side_t *)arg)->ams++;
}

static void side_err(void *arg, fy_tl_ep_t *ep, ferry_status_t st)
{
    (void)ep;
    (void)st;
    ((side_t *)arg)->errs++;
}

/* Open side s (its own md, so each side reads the environment as it is now). */
static void side_open(side_t *s, uint64_t uuid)
{
    const fy_tl_component_t *tl = fy_tl_find("udp");
    FY_ASSERT(tl != NULL);
    ops = tl->ops;
    memset(s, 0, sizeof(*s));
    FY_ASSERT_OK(ops->md_open(tl, &s->md));
    fy_tl_iface_params_t p = {.device = "lo",
                              .am_cb = side_am,
                              .am_arg = s,
                              .err_cb = side_err,
                              .err_arg = s,
                              .job_key = UT_JOB_KEY,
                              .worker_uuid = uuid};
    FY_ASSERT_OK(ops->iface_open(s->md, &p, &s->iface));
    FY_ASSERT_OK(ops->iface_get_address(s->iface, s->dev, s->ifa));
}

static void side_close(side_t *s)
{
    if (s->ep != NULL)
        ops->ep_destroy(s->ep);
    ops->iface_close(s->iface);
    ops->md_close(s->md);
}

static void both(void)
{
    ops->iface_progress(sa.iface);
    ops->iface_progress(sb.iface);
}

/* Progress both until *flag reaches want (10 s at most). */
static void both_until(volatile int *flag, int want)
{
    uint64_t t0 = fy_time_ns();
    while (*flag < want) {
        both();
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "no progress in 10 s (%d of %d)",
                      *flag, want);
    }
}

/* Progress both until a's window is empty (everything it sent ACKed; 10 s at most). */
static void both_until_acked(void)
{
    fy_udp_conn_t *c = fy_udp_conn(sa.ep);
    uint64_t t0 = fy_time_ns();
    while (c->snd_una != c->snd_nxt) {
        both();
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "%u segments unACKed for 10 s",
                      c->snd_nxt - c->snd_una);
    }
}

static void send_bcopy(side_t *s, size_t len)
{
    static uint8_t buf[4096];
    struct iovec iov = {buf, len};
    FY_ASSERT_OK(ops->am_bcopy(s->ep, 1, &iov, 1));
}

static void send_short(side_t *s)
{
    struct iovec iov = {"ping", 4};
    FY_ASSERT_OK(ops->am_short(s->ep, 2, &iov, 1));
}

/* ---- RACK: a hole in a burst ------------------------------------------------------------ */

#define BURST    16
#define BURST_SZ 2000 /* above the priority channel's 768 B: every segment on the data channel */
#define DROP_AT  7

static void rack_burst(void)
{
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_AF", "inet", 1);
    /* b: every datagram it sends (its ACKs) held 10 ms - a round trip far longer than the
     * time the burst takes to leave, so a reorder window (a quarter of the min RTT) covers
     * the whole burst and only the time rule can call the hole lost */
    setenv("FERRY_UDP_FAULT_DELAY", "100", 1);
    setenv("FERRY_UDP_FAULT_DELAY_TIME", "10ms", 1);
    side_open(&sb, 22);
    unsetenv("FERRY_UDP_FAULT_DELAY");
    unsetenv("FERRY_UDP_FAULT_DELAY_TIME");
    /* a: a timeout never comes before 500 ms */
    setenv("FERRY_UDP_RTO_MIN", "500ms", 1);
    setenv("FERRY_UDP_RTO_MAX", "2s", 1);
    side_open(&sa, 21);
    FY_ASSERT_OK(ops->ep_create(sa.iface, sb.dev, sb.ifa, &sa.ep));
    fy_udp_conn_t *c = fy_udp_conn(sa.ep);
    fy_udp_iface_t *ia = fy_udp_iface(sa.iface);

    /* The round trip learned: one message at a time. */
    int want = 0;
    for (int i = 0; i < 8; i++) {
        send_bcopy(&sa, BURST_SZ);
        both_until(&sb.ams, ++want);
        both_until_acked();
    }
    FY_ASSERT_GT(c->min_rtt, 5 * FY_NSEC_PER_MSEC);
    ferry_ep_stats_t s0, s1;
    FY_ASSERT_OK(ops->ep_get_stats(sa.ep, &s0));

    /* The burst, each message sent at once (window and credit are open); the injector drops
     * the one sent while it is on. */
    for (int i = 0; i < BURST; i++) {
        if (i == DROP_AT) {
            ia->fault.chan_mask = 1u << FY_UDP_CH_DATA;
            ia->fault.drop = 100;
            ia->fault.enabled = 1;
        }
        send_bcopy(&sa, BURST_SZ);
        if (i == DROP_AT) {
            ia->fault.enabled = 0;
            ia->fault.drop = 0;
        }
    }
    uint64_t t0 = fy_time_ns();
    FY_ASSERT_EQ(ia->fault.n_drop, 1); /* (it left in the burst, not from the send queue) */
    FY_ASSERT_EQ(c->snd_nxt - c->snd_una, BURST);
    both_until(&sb.ams, want + BURST);
    uint64_t repair = fy_time_ns() - t0;
    both_until_acked();
    FY_ASSERT_OK(ops->ep_get_stats(sa.ep, &s1));
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr,
                "rack_burst: repaired in %.1f ms, srtt %.1f ms min rtt %.1f ms rto %.1f ms, "
                "resent %llu fast %llu timeouts %llu\n",
                repair / 1e6, c->srtt / 1e6, c->min_rtt / 1e6, c->rto / 1e6,
                (unsigned long long)(s1.retransmits - s0.retransmits),
                (unsigned long long)(s1.fast_retransmits - s0.fast_retransmits),
                (unsigned long long)(s1.timeouts - s0.timeouts));
    /* Resent by RACK, not by the timer. */
    FY_ASSERT_EQ(s1.timeouts - s0.timeouts, 0);
    FY_ASSERT_GE(s1.fast_retransmits - s0.fast_retransmits, 1);
    FY_ASSERT_GE(s1.retransmits - s0.retransmits, 1);
    /* ~ one round trip and a reorder window after it left (~13 ms; the timer: >= 500 ms) */
    FY_ASSERT_LT(repair, 250 * FY_NSEC_PER_MSEC);
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

/* ---- the deferred ACK's RTT sample ------------------------------------------------------ */

#define ROUNDS     6
#define COMPUTE_MS 80

static void dack_rtt(void)
{
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_AF", "inet", 1);
    side_open(&sa, 31);
    side_open(&sb, 32);
    /* One connection, an ep on each side (b's adopts the one a opened). */
    FY_ASSERT_OK(ops->ep_create(sa.iface, sb.dev, sb.ifa, &sa.ep));
    send_short(&sa);
    both_until(&sb.ams, 1);
    FY_ASSERT_OK(ops->ep_create(sb.iface, sa.dev, sa.ifa, &sb.ep));
    FY_ASSERT_EQ(fy_udp_conn(sb.ep)->peer_id, fy_udp_conn(sa.ep)->id);
    fy_udp_conn_t *cb = fy_udp_conn(sb.ep);
    send_short(&sb);
    both_until(&sa.ams, 1);

    int64_t worst = 0;
    for (int r = 0; r < ROUNDS; r++) {
        /* a asks (its request carries the ACK of b's last answer) */
        send_short(&sa);
        both_until(&sb.ams, r + 2);
        /* b computes without calling progress, then answers; its next pass processes the
         * ACK the request carried (application time, not a wait for readiness) */
        struct timespec ts = {0, COMPUTE_MS * 1000 * 1000};
        while (nanosleep(&ts, &ts) != 0) {
        }
        send_short(&sb);
        ops->iface_progress(sb.iface);
        /* the sample that ACK gave (any explicit ACK of a's came before it, faster) */
        if (r > 0)
            worst = FY_MAX(worst, cb->last_rtt);
        both_until(&sa.ams, r + 2);
    }
    ferry_ep_stats_t st;
    FY_ASSERT_OK(ops->ep_get_stats(sb.ep, &st));
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr, "dack_rtt: b's worst sample %.2f ms, srtt %.2f ms (computing %d ms)\n",
                worst / 1e6, st.rtt_ns / 1e6, COMPUTE_MS);
    FY_ASSERT_GT(worst, 0);
    FY_ASSERT_LT(worst, COMPUTE_MS / 2 * FY_NSEC_PER_MSEC);
    FY_ASSERT_LT(st.rtt_ns, COMPUTE_MS / 2 * FY_NSEC_PER_MSEC);
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

FYTEST_MAIN(FYTEST_CASE(rack_burst), FYTEST_CASE(dack_rtt), )
