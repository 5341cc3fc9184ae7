/*
 * test_udp_backlog.c - how a udp stream behaves when its receiver has a backlog, and the
 * window of a peer on the same host: three mechanisms of the bulk path, each observed through
 * its counter, with two ifaces in this process on the loopback so that the test decides when
 * each side runs (the sender fills the receiver's socket while the receiver does not run):
 *
 *   acks_between  a receiver that finds a backlog of 1,400-byte segments drains up to nine
 *                 full batches in one progress pass; the ACKs due (ACK_EVERY segments) leave
 *                 between two batches (fy_udp_send_acks_due), not all at the pass's end: in
 *                 the pass that drained the backlog the receiver sent several ACK datagrams
 *                 (its iface's tx count; it sends nothing else).  Without it: one per pass.
 *   placed_batch  a backlog of 1 MiB AMs (17 chunks each) drained with direct placement: a
 *                 batch takes only the placed slots (rx_vlen) - the rest of the current AM and
 *                 the whole next one - so no chunk of a third AM lands in a plain slot and is
 *                 copied: the receiver's "chunks copied" (rx_copied) stays 0 over the backlog.
 *                 Without it (a batch of 32) about half the chunks were copied.
 *   local_window  the receiver's ACKs held 40 ms (its fault injector) after a round trip of
 *                 microseconds: RTT samples that show a queue.  The window of a peer at our own
 *                 address (c->local) is not cut (cwnd_cuts 0, cwnd kept); the same connection
 *                 taken for a remote one (local cleared) is cut - the signal was there.
 */
#include "fytest.h"
#include "tl/udp/udp.h"
#include "udp_test.h"

static const fy_tl_ops_t *ops;
static ut_side_t sa, sb;

static void side_close(ut_side_t *s)
{
    ut_lo_close(ops, s);
}

static void both(void)
{
    ops->iface_progress(sa.iface);
    ops->iface_progress(sb.iface);
}

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
    while (c->snd_una != c->snd_nxt || !fy_list_is_empty(&c->sendq)) {
        both();
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "%u segments unACKed for 10 s",
                      c->snd_nxt - c->snd_una);
    }
}

/* Progress a alone until everything queued has left (numbered and handed to the kernel). */
static void a_until_sent(uint32_t segs)
{
    fy_udp_conn_t *c = fy_udp_conn(sa.ep);
    uint64_t t0 = fy_time_ns();
    while (c->snd_nxt - c->snd_una < segs || !fy_list_is_empty(&c->sendq)) {
        ops->iface_progress(sa.iface);
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC,
                      "%u of %u segments sent in 10 s (cwnd %u, credit %llu)",
                      c->snd_nxt - c->snd_una, segs, c->cwnd, (unsigned long long)c->credit);
    }
    ops->iface_progress(sa.iface); /* (the last batch flushed) */
}

static void send_bcopy(ut_side_t *s, size_t len)
{
    static uint8_t buf[4096];
    struct iovec iov = {buf, len};
    FY_ASSERT_OK(ops->am_bcopy(s->ep, 1, &iov, 1));
}

/* Open a and b, one connection with an ep on each side (b's adopts the one a opened). */
static void pair_connect(uint64_t uuid_a, uint64_t uuid_b)
{
    FY_ASSERT_EQ(ut_lo_pair(&ops, &sa, &sb, uuid_a, uuid_b), 0);
    FY_ASSERT_EQ(fy_udp_conn(sb.ep)->peer_id, fy_udp_conn(sa.ep)->id);
}

/* ---- the ACKs due leave between two full batches --------------------------------------- */

#define SEG_SZ  1400 /* above the priority channel's 768 B: every segment on the data channel */
#define BACKLOG 300  /* more than the 9 full batches (288) one pass drains */

static void acks_between(void)
{
    /* (1500-byte segments: on the loopback's 64 KiB ones a copied send takes a 64 KiB
     * buffer, and 256 of them are the most the pool gives) */
    setenv("FERRY_UDP_MTU", "1500", 1);
    pair_connect(61, 62);
    unsetenv("FERRY_UDP_MTU");
    fy_udp_conn_t *c = fy_udp_conn(sa.ep);
    fy_udp_iface_t *ib = fy_udp_iface(sb.iface);
    /* The congestion window opens with the ACKs (slow start): bursts until it holds the
     * backlog. */
    int want = sb.ams;
    for (int burst = 64; c->cwnd < BACKLOG; burst *= 2) {
        FY_ASSERT_LT(burst, 4096);
        for (int i = 0; i < burst; i++)
            send_bcopy(&sa, SEG_SZ);
        want += burst;
        both_until(&sb.ams, want);
        both_until_acked();
    }
    /* b's socket fills while b does not run. */
    for (int i = 0; i < BACKLOG; i++)
        send_bcopy(&sa, SEG_SZ);
    want += BACKLOG;
    a_until_sent(BACKLOG);
    FY_ASSERT_EQ(c->snd_nxt - c->snd_una, BACKLOG);

    /* b drains it, one pass at a time: what each pass received, and sent (ACKs only). */
    uint64_t best_rx = 0, best_tx = 0, t0 = fy_time_ns();
    unsigned passes = 0;
    while (sb.ams < want) {
        uint64_t rx = ib->rx_dgrams, tx = ib->tx_dgrams;
        ops->iface_progress(sb.iface);
        passes++;
        if (ib->rx_dgrams - rx > best_rx) {
            best_rx = ib->rx_dgrams - rx;
            best_tx = ib->tx_dgrams - tx;
        }
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "b got %d of %d in 10 s", sb.ams,
                      want);
    }
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr,
                "acks_between: %u passes, the largest received %llu datagrams and sent %llu "
                "ACKs (ACK_EVERY %lu)\n",
                passes, (unsigned long long)best_rx, (unsigned long long)best_tx,
                ib->opts->ack_every);
    FY_ASSERT_EQ(ib->drops_sock, 0); /* (the backlog was all in b's socket) */
    /* One pass drained several full batches (32 each)... */
    FY_ASSERT_GE(best_rx, 4 * FY_UDP_BATCH);
    /* ... and the ACKs owed (every ACK_EVERY segments) left between them. */
    FY_ASSERT_GE(best_tx, 2);
    FY_ASSERT_GE(best_tx, best_rx / ib->opts->ack_every - 1);
    both_until_acked();
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

/* ---- a batch takes only the placed slots ------------------------------------------------ */

#define AM_SZ  (1u << 20)
#define AMS    6 /* the backlog, if the credits hold it */
#define WARMUP 8

typedef struct comp {
    fy_tl_comp_t super;
    int done;
} comp_t;

static void comp_done(fy_tl_comp_t *comp, ferry_status_t st)
{
    FY_ASSERT_OK(st);
    ((comp_t *)comp)->done = 1;
}

static uint8_t *am_buf;

static void send_am(comp_t *cp)
{
    struct iovec iov = {am_buf, AM_SZ};
    cp->super.cb = comp_done;
    cp->done = 0;
    ferry_status_t st = ops->am_zcopy(sa.ep, 1, "h", 1, &iov, 1, &cp->super);
    if (st == FERRY_OK)
        cp->done = 1;
    else
        FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
}

static void placed_batch(void)
{
    pair_connect(71, 72);
    fy_udp_conn_t *c = fy_udp_conn(sa.ep), *cb = fy_udp_conn(sb.ep);
    am_buf = calloc(1, AM_SZ);
    FY_ASSERT(am_buf != NULL);
    comp_t cp[AMS];
    /* Both reassembly buffers made, the placement's hint set, the window opened. */
    int want = sb.ams;
    for (int i = 0; i < WARMUP; i++) {
        send_am(&cp[0]);
        both_until(&sb.ams, ++want);
        both_until_acked();
        FY_ASSERT(cp[0].done);
    }
    uint32_t s0 = c->snd_nxt; /* (one more, to count its chunks) */
    send_am(&cp[0]);
    both_until(&sb.ams, ++want);
    both_until_acked();
    uint32_t chunks = c->snd_nxt - s0;
    FY_ASSERT_GE(chunks, 16); /* (a 1 MiB AM on the loopback: 17 chunks of ~64 KiB) */
    /* As many AMs as the credits hold (charged a chunk's size and 512 B each). */
    int n = (int)FY_MIN((uint64_t)AMS, c->credit / (chunks * ((uint64_t)c->seg_size + 512)));
    FY_ASSERT_MSG(n >= 3, "credits of %llu B hold only %d AMs of 1 MiB",
                  (unsigned long long)c->credit, n);
    FY_ASSERT_GE(c->cwnd, (uint32_t)n * chunks);

    /* b's socket fills with n AMs while b does not run; then b drains them. */
    uint64_t copied0 = cb->rx_copied;
    for (int i = 0; i < n; i++)
        send_am(&cp[i]);
    a_until_sent((uint32_t)n * chunks);
    uint64_t t0 = fy_time_ns();
    while (sb.ams < want + n) {
        ops->iface_progress(sb.iface);
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "b got %d of %d in 10 s",
                      sb.ams - want, n);
    }
    uint64_t copied = cb->rx_copied - copied0;
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr, "placed_batch: %d AMs of %u chunks in b's socket, %llu chunks copied\n", n,
                chunks, (unsigned long long)copied);
    FY_ASSERT_EQ(fy_udp_iface(sb.iface)->drops_sock, 0);
    FY_ASSERT_EQ(copied, 0);
    both_until_acked();
    for (int i = 0; i < n; i++)
        FY_ASSERT(cp[i].done);
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
    free(am_buf);
}

/* ---- a peer at our own address: its window is not cut by a queue ----------------------- */

#define HOLD_MS 40 /* b's ACKs held: beyond 4 x min RTT and min RTT + FY_UDP_QUEUE_NS (20 ms) */
#define BURST   16

/* A burst of BURST segments, ACKed late; returns a's cwnd before it. */
static uint32_t late_burst(fy_udp_conn_t *c, int *want)
{
    uint32_t before = c->cwnd;
    uint64_t t0 = fy_time_ns();
    for (int i = 0; i < BURST; i++)
        send_bcopy(&sa, SEG_SZ);
    *want += BURST;
    both_until(&sb.ams, *want);
    both_until_acked();
    FY_ASSERT_GE(fy_time_ns() - t0, HOLD_MS * FY_NSEC_PER_MSEC); /* (it was late) */
    FY_ASSERT_GT(c->last_rtt, c->min_rtt + FY_UDP_QUEUE_NS);
    return before;
}

static void local_window(void)
{
    /* (no timer resend while the ACKs are held) */
    setenv("FERRY_UDP_RTO_MIN", "1s", 1);
    setenv("FERRY_UDP_RTO_MAX", "2s", 1);
    pair_connect(81, 82);
    unsetenv("FERRY_UDP_RTO_MIN");
    unsetenv("FERRY_UDP_RTO_MAX");
    fy_udp_conn_t *c = fy_udp_conn(sa.ep);
    fy_udp_iface_t *ib = fy_udp_iface(sb.iface);
    FY_ASSERT(c->local);
    FY_ASSERT(!c->pace_ok);
    int want = sb.ams;
    for (int i = 0; i < 8; i++) { /* the round trip of an idle loopback learned */
        send_bcopy(&sa, SEG_SZ);
        both_until(&sb.ams, ++want);
        both_until_acked();
    }
    FY_ASSERT_LT(c->min_rtt, HOLD_MS * FY_NSEC_PER_MSEC / 8);
    FY_ASSERT_GT(c->cwnd, BURST * 2); /* (a cut would show: to at most FY_UDP_CWND_MIN) */
    ib->fault.chan_mask = (1u << FY_UDP_CH_PRIO) | (1u << FY_UDP_CH_DATA);
    ib->fault.delay = 100;
    ib->fault.delay_ns = HOLD_MS * FY_NSEC_PER_MSEC;
    ib->fault.enabled = 1;

    /* Ours: the queue's signal, and no cut. */
    uint32_t before = late_burst(c, &want);
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr, "local_window: local: cwnd %u -> %u, cuts %llu, last rtt %.1f ms\n", before,
                c->cwnd, (unsigned long long)c->cwnd_cuts, c->last_rtt / 1e6);
    FY_ASSERT_EQ(c->cwnd_cuts, 0);
    FY_ASSERT_GE(c->cwnd, before);

    /* The same connection taken for a remote peer's: the same signal cuts it. */
    c->local = 0;
    before = late_burst(c, &want);
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr, "local_window: remote: cwnd %u -> %u, cuts %llu\n", before, c->cwnd,
                (unsigned long long)c->cwnd_cuts);
    FY_ASSERT_GE(c->cwnd_cuts, 1);
    FY_ASSERT_LT(c->cwnd, before);
    ib->fault.enabled = 0;
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

FYTEST_MAIN(FYTEST_CASE(acks_between), FYTEST_CASE(placed_batch), FYTEST_CASE(local_window), )
