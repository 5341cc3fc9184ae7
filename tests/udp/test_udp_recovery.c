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
 * The early rule (udp_sack.c, udp_rx.c) and the scoreboard, case by case (the flow of
 * tests/faults/test_netfault's net_dup_queue shows them together):
 *   early_flow       fy_udp_arrival_sooner on made-up arrivals: a copy that overtook a queue
 *                    is early; the flow behind it, the arrivals after a loss, a flow come
 *                    sooner after a pause (and its next segment) are not
 *   dup_first_send   a network duplicate of a first send (no F_RESENT) is counted, but asks
 *                    for no ACK at once and is no DSACK
 *   sack_scoreboard  after an ACK that SACKs s2..s9 (s1 lost, resent), an older ACK that
 *                    knew only of s9 must not call s2..s8 lost: the scoreboard holds them
 *   spurious_rto     the peer's answers held 50 ms: the timer resends once; the ACK of the
 *                    original shows it needless (udp_retx.c), the RTO floor rises above the
 *                    delay, and the next answer as late brings no timeout
 */
#include <time.h>

#include "fytest.h"
#include "tl/udp/udp.h"
#include "udp_test.h"

static const fy_tl_ops_t *ops;
static ut_side_t sa, sb;

/* A udp interface on the loopback, IPv4 (every case here runs there). */
static void side_open(ut_side_t *s, uint64_t uuid)
{
    FY_ASSERT_OK(ut_lo_open(&ops, s, uuid));
}

static void side_close(ut_side_t *s)
{
    ut_lo_close(ops, s);
}

static void both(void)
{
    ops->iface_progress(sa.iface);
    ops->iface_progress(sb.iface);
}

/* Progress both until *flag reaches want (10 s at most). */
static void both_until(volatile int *flag, int want)
{
    FY_ASSERT_MSG(ut_sides_until(ops, &sa, &sb, flag, want, 10000) == 0,
                  "no progress in 10 s (%d of %d)", *flag, want);
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

static void send_bcopy(ut_side_t *s, size_t len)
{
    static uint8_t buf[4096];
    struct iovec iov = {buf, len};
    FY_ASSERT_OK(ops->am_bcopy(s->ep, 1, &iov, 1));
}

static void send_short(ut_side_t *s)
{
    struct iovec iov = {"ping", 4};
    FY_ASSERT_OK(ops->am_short(s->ep, 2, &iov, 1));
}

/* Open a and b, one connection with an ep on each side (b's adopts the one a opened), one
 * short AM each way. */
static void pair_connect(uint64_t uuid_a, uint64_t uuid_b)
{
    FY_ASSERT_EQ(ut_lo_pair(&ops, &sa, &sb, uuid_a, uuid_b), 0);
    FY_ASSERT_EQ(fy_udp_conn(sb.ep)->peer_id, fy_udp_conn(sa.ep)->id);
}

/* ---- RACK: a hole in a burst ------------------------------------------------------------ */

#define BURST    16
#define BURST_SZ 2000 /* above the priority channel's 768 B: every segment on the data channel */
#define DROP_AT  7

static void rack_burst(void)
{
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
    pair_connect(31, 32);
    fy_udp_conn_t *cb = fy_udp_conn(sb.ep);

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

/* ---- the early rule, on the receiver (udp_sack.c, udp_rx.c) ----------------------------- */

/* fy_udp_arrival_sooner on a made-up flow of arrivals (seq, delay in us). */
static void early_flow(void)
{
    fy_udp_arrival_t a;
    memset(&a, 0, sizeof(a));
    /* a queue fills: each arrival waits 20 us longer than the one before */
    for (uint32_t i = 0; i < 50; i++)
        FY_ASSERT_EQ(fy_udp_arrival_sooner(&a, i, 1000 + 20 * i), 0);
    /* a copy of 70 that went round the queue: 1 ms sooner than the flow, 21 above it */
    FY_ASSERT_EQ(fy_udp_arrival_sooner(&a, 70, 980), 1);
    /* the flow goes on behind it; after a loss (51..55) too: no arrival is sooner */
    FY_ASSERT_EQ(fy_udp_arrival_sooner(&a, 50, 2000), 0);
    FY_ASSERT_EQ(fy_udp_arrival_sooner(&a, 56, 2020), 0);
    /* sooner by a drained queue but only a few above the flow's highest: no overtaker */
    FY_ASSERT_EQ(fy_udp_arrival_sooner(&a, 60, 1020), 0);
    /* 1 ms sooner and 30 above: early; the next one continues it (the next seq, about the
     * same delay): that is the flow, come sooner (a new batch, a drained queue) */
    FY_ASSERT_EQ(fy_udp_arrival_sooner(&a, 90, 20), 1);
    FY_ASSERT_EQ(fy_udp_arrival_sooner(&a, 91, 30), 0);
    FY_ASSERT_EQ(fy_udp_arrival_sooner(&a, 92, 40), 0);
}

/* Connect a to b, an ep each way on the one connection, and learn the round trip. */
static void pair_open(void)
{
    pair_connect(41, 42);
    for (int i = 0; i < 4; i++) {
        send_bcopy(&sa, BURST_SZ);
        both_until(&sb.ams, i + 2);
        both_until_acked();
    }
}

/* A network duplicate of a first send (no F_RESENT) is counted, but asks for no ACK at
 * once and is no DSACK: with 5% duplicates those ACKs were a sixth of all ACKs. */
static void dup_first_send(void)
{
    /* (an ACK with nothing to report waits far longer than this case) */
    setenv("FERRY_UDP_ACK_DELAY", "5s", 1);
    setenv("FERRY_UDP_ACK_PASSES", "1000000", 1);
    pair_open();
    fy_udp_iface_t *ia = fy_udp_iface(sa.iface);
    fy_udp_conn_t *cb = fy_udp_conn(sb.ep);
    both_until_acked();
    uint64_t dups = cb->stats.drops_duplicate;
    int want = sb.ams + 1;

    ia->fault.chan_mask = 1u << FY_UDP_CH_DATA;
    ia->fault.dup = 100;
    ia->fault.enabled = 1;
    send_bcopy(&sa, BURST_SZ);
    ia->fault.enabled = 0;
    ia->fault.dup = 0;
    FY_ASSERT_EQ(ia->fault.n_dup, 1);
    /* b reads both copies (only b runs: nothing else reaches it) */
    uint64_t t0 = fy_time_ns();
    while (sb.ams < want || cb->stats.drops_duplicate == dups) {
        ops->iface_progress(sb.iface);
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "b got nothing in 10 s");
    }
    FY_ASSERT_EQ(cb->stats.drops_duplicate - dups, 1);
    FY_ASSERT_EQ(cb->dsack_pending, 0);
    FY_ASSERT_EQ(cb->ack_now, 0);
    FY_ASSERT_EQ(cb->ack_pending, 1); /* the original's ACK waits; the copy sent none */
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

/* ---- the scoreboard (udp_retx.c): what the peer said it holds is never lost ------------- */

static fy_udp_seg_t *seg_at(fy_udp_conn_t *c, uint32_t seq)
{
    return c->win[seq & (c->iface->wsize - 1)];
}

/* An ACK as the peer would send it (explicit: pure), processed by a at this moment. */
static void give_ack(fy_udp_conn_t *c, uint32_t ack, uint32_t sack, uint32_t tsecr)
{
    fy_udp_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.flags = FY_UDP_F_ACK | FY_UDP_F_ECHO_DATA;
    h.ack = ack;
    h.sack = sack;
    h.tsecr = tsecr;
    c->iface->now = fy_time_ns();
    fy_udp_process_ack(c, &h, 1, NULL);
}

/* a sends s0..s9; the peer's newest ACK: s0 arrived, s1 missing, s2..s9 held (s1 is lost, the
 * others are on the scoreboard); then an older ACK, overtaken by it, that knew of s9 only.
 * The older ACK must not call s2..s8 lost: the scoreboard knows them held. */
static void sack_scoreboard(void)
{
    pair_open();
    fy_udp_iface_t *ia = fy_udp_iface(sa.iface);
    fy_udp_conn_t *c = fy_udp_conn(sa.ep);
    both_until_acked();
    fy_udp_ack_settle(ia);
    int want = sb.ams + 10;
    uint32_t s0 = c->snd_nxt;
    /* s0..s8, then s9 later by more than any reorder window (it is at most half the SRTT):
     * RACK calls lost whatever of s0..s8 an ACK showing s9 arrived does not show held */
    for (int i = 0; i < 9; i++)
        send_bcopy(&sa, BURST_SZ); /* (b does not read them yet) */
    uint64_t s8_tx = seg_at(c, s0 + 8)->tx_ns;
    while (fy_time_ns() < s8_tx + (uint64_t)FY_MAX(c->srtt, c->min_rtt) + 100 * FY_NSEC_PER_USEC) {
    }
    send_bcopy(&sa, BURST_SZ);
    FY_ASSERT_EQ(c->snd_nxt - s0, 10);
    fy_udp_seg_t *s9 = seg_at(c, s0 + 9);
    uint32_t ts9;
    memcpy(&ts9, s9->hdr + FY_UDP_D_TSVAL, sizeof(ts9));
    uint64_t fast0 = c->stats.fast_retransmits;
    give_ack(c, s0 + 1, 0xffu, ts9);                    /* s2..s9 held */
    FY_ASSERT_EQ(c->stats.fast_retransmits - fast0, 1); /* s1 */
    FY_ASSERT(fy_list_is_linked(&seg_at(c, s0 + 1)->rlink));
    for (uint32_t s = s0 + 2; s <= s0 + 9; s++)
        FY_ASSERT(seg_at(c, s)->sacked);
    give_ack(c, s0 + 1, 0x80u, 0); /* the older one: s9 held */
    FY_ASSERT_EQ(c->stats.fast_retransmits - fast0, 1);
    for (uint32_t s = s0 + 2; s <= s0 + 9; s++)
        FY_ASSERT_MSG(!fy_list_is_linked(&seg_at(c, s)->rlink), "s%u, held, queued for resend",
                      s - s0);
    /* the stream ends as it should: b gets all ten, a's window empties */
    both_until(&sb.ams, want);
    both_until_acked();
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

/* ---- spurious timeouts (udp_retx.c): a peer that answers late is not resent to again ---- */

#define LATE_MS 50

/* b's answers held LATE_MS (a peer descheduled that long): a's timer, at RTO_MIN after a
 * quick round trip, resends; the ACK of the original then shows the resend was needless,
 * and the connection's RTO floor rises above the delay - the next late answer is waited for. */
static void spurious_rto(void)
{
    pair_connect(51, 52);
    fy_udp_iface_t *ib = fy_udp_iface(sb.iface);
    fy_udp_conn_t *c = fy_udp_conn(sa.ep);
    int want = sb.ams;
    /* A quick round trip learned. A loaded machine can deschedule a side past the RTO while
     * this runs, which makes a spurious timeout of its own and raises the floor: such a
     * start is forgotten and learned again, so the case starts from a floor at RTO_MIN. */
    for (int tries = 0; tries < 5; tries++) {
        c->spurious_rtos = 0;
        c->rto_floor = 0;
        for (int i = 0; i < 8; i++) {
            send_bcopy(&sa, BURST_SZ);
            both_until(&sb.ams, ++want);
            both_until_acked();
        }
        if (c->spurious_rtos == 0)
            break;
    }
    FY_ASSERT_LT(c->rto, LATE_MS * FY_NSEC_PER_MSEC / 2);
    FY_ASSERT_EQ(c->spurious_rtos, 0);
    ib->fault.chan_mask = (1u << FY_UDP_CH_PRIO) | (1u << FY_UDP_CH_DATA);
    ib->fault.delay = 100;
    ib->fault.delay_ns = LATE_MS * FY_NSEC_PER_MSEC;
    ib->fault.enabled = 1;
    ferry_ep_stats_t s0, s1, s2;
    FY_ASSERT_OK(ops->ep_get_stats(sa.ep, &s0));
    send_bcopy(&sa, BURST_SZ);
    both_until(&sb.ams, ++want);
    both_until_acked();
    FY_ASSERT_OK(ops->ep_get_stats(sa.ep, &s1));
    FY_ASSERT_GE(s1.timeouts - s0.timeouts, 1); /* the timer did not wait */
    FY_ASSERT_EQ(c->spurious_rtos, 1);
    FY_ASSERT_GT(c->rto_floor, LATE_MS * FY_NSEC_PER_MSEC);
    /* the next answer as late: no timeout now */
    send_bcopy(&sa, BURST_SZ);
    both_until(&sb.ams, ++want);
    both_until_acked();
    FY_ASSERT_OK(ops->ep_get_stats(sa.ep, &s2));
    FY_ASSERT_EQ(s2.timeouts - s1.timeouts, 0);
    ib->fault.enabled = 0;
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

FYTEST_MAIN(FYTEST_CASE(rack_burst), FYTEST_CASE(dack_rtt), FYTEST_CASE(early_flow),
            FYTEST_CASE(dup_first_send), FYTEST_CASE(sack_scoreboard), FYTEST_CASE(spurious_rto), )
