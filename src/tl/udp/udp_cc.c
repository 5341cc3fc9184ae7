/*
 * udp_cc.c - congestion control and pacing: a model of the path (bottleneck bandwidth and
 * round-trip propagation time, as BBR builds it) instead of reading every loss as
 * congestion, so that random loss on a lossy link does not throttle the stream, while sends
 * are paced at the rate the model says the path delivers (RFC 8085 asks a UDP protocol for
 * congestion control; a paced sender does not dump a window into a bottleneck's queue).
 *
 *   delivery rate   bytes the peer acknowledged or SACKed over a sample period of at least
 *                   max(min RTT, 10 ms) (per-segment samples over a few hundred microseconds
 *                   read the bursts of a token-bucket link or of our own batched sends as
 *                   bandwidth; a period smooths them and ACK bunching), and never more
 *                   than we sent in the period (a receiver held up by its scheduler that
 *                   then ACKs a backlog at once is not a fast path), over the longer of the
 *                   period and the send interval of what it delivered (a shrinking queue
 *                   releases ACKs bunched).
 *   bandwidth       the largest sample of the last 12 periods (a period in which the
 *                   application ran dry, or the sender woke too late to keep its pace,
 *                   counts only when it raises the estimate).
 *   min RTT         the smallest RTT sample of the last 10 s.
 *   phases          STARTUP (pacing gain 2.89) until the bandwidth grows less than 25% in
 *                   three periods; DRAIN (gain 1/2.89) until what is in flight fits one BDP;
 *                   PROBE_BW: gains 5/4, 3/4, then 1 for six phases, each one period long
 *                   (probe for more, drain what the probe queued, cruise).
 *   cwnd            2 x bandwidth x smoothed RTT (+ the segments one delayed ACK may cover),
 *                   a cap for ACK bunching and RTT jitter; pacing is the real control.
 *   loss            alone is not congestion (a lossy radio, a bad cable).  Loss in a period
 *                   whose smallest RTT sample shows a standing queue (above the min RTT by
 *                   more than max(min RTT / 2, 10 ms): a busy host delays single samples by
 * milliseconds, not every sample of a period) is: the rate the model allows (bw_lo) is cut by 20%
 * per such period and grows back by 1/32 per calm one. queue           a queue that stands (every
 * RTT sample of two periods in a row above the min RTT by max(min RTT, 10 ms)) without loss
 * reaching us is a flow that fills buffers sharing the bottleneck (a loss-based TCP, whose bursts
 * take the drops our paced sends avoid): bw_lo is cut by 10% per such period, never below half the
 * bandwidth.  These two let a TCP flow on the same link keep its share, and keep ours.
 *
 * Pacing: each connection has a next-send time; a segment may leave when that time is less
 * than one burst ahead (1 ms at the pacing rate, 2 segments to 64 KiB), which keeps batched
 * sends (sendmmsg, GSO) working.  A connection that must wait checks its pace timer into
 * the iface's hotel; its expiry puts the connection back on the ready queue, and the event
 * fd's timer is armed to it.  Resends are paced too (they advance the clock).
 *
 * A peer at our own address (the same host and network namespace: loopback, or two
 * processes on one interface) is not paced and keeps the simple window of udp_retx.c: there
 * is no wire to share, and the bottleneck is the CPU.  Nor is a rate above
 * FERRY_UDP_PACE_MAX.  FERRY_UDP_PACING=y turns the model on: it is off by default for now
 * (docs/udp.md).
 */
#include "tl/udp/udp.h"
#include "util/clock.h"

#define GAIN_STARTUP_X1000 2885
#define CONG_FLOOR_NS      (10 * FY_NSEC_PER_MSEC)
#define QUEUE_FLOOR_NS     (10 * FY_NSEC_PER_MSEC)

static const uint16_t cycle_gain_x4[8] = {5, 3, 4, 4, 4, 4, 4, 4}; /* in quarters */

void fy_udp_cc_init(fy_udp_conn_t *c)
{
    fy_hotel_room_init(&c->pace_timer.room);
    c->pace_timer.kind = FY_UDP_TIMER_PACE;
}

static inline uint64_t wire_bytes(const fy_udp_seg_t *seg)
{
    return (uint64_t)seg->hlen + seg->dlen + 28; /* + IP and UDP headers */
}

static inline uint64_t mul_div(uint64_t a, uint64_t b, uint64_t d)
{
    return d == 0 ? 0 : (uint64_t)((unsigned __int128)a * b / d);
}

static inline uint64_t period_ns(const fy_udp_conn_t *c)
{
    return FY_MAX((uint64_t)c->cc_min_rtt, FY_UDP_CC_PERIOD);
}

void fy_udp_cc_sent(fy_udp_conn_t *c, fy_udp_seg_t *seg)
{
    uint64_t now = c->iface->now;
    if (!c->pace_ok)
        return;
    if (c->snd_nxt - c->snd_una - c->nsacked <= 1 && seg->tries == 1) {
        /* Nothing else in flight: a new sample period starts (an idle gap is not a slow
         * path). */
        c->ck_ns = now;
        c->ck_dlv = c->delivered;
        c->ck_app = 0;
        c->ck_sent = 0;
        c->ck_tx = c->dlv_tx;
    }
    c->ck_sent += wire_bytes(seg);
    if (c->pace_rate != 0) {
        /* A process that woke late (a busy machine, a coarse timer) may catch up on the
         * time it missed, up to 4 ms or 64 KiB at the pacing rate: the rate is an average,
         * and a sender that never catches up measures its own wake-ups as the path. */
        uint64_t gap = mul_div(wire_bytes(seg), FY_NSEC_PER_SEC, c->pace_rate);
        uint64_t slack =
            FY_MIN(4 * FY_NSEC_PER_MSEC, mul_div(65536, FY_NSEC_PER_SEC, c->pace_rate));
        if (c->next_tx_ns + slack < now && c->snd_nxt - c->snd_una - c->nsacked < c->cwnd)
            c->ck_app = 1; /* late beyond the slack: we, not the path, set this period's pace */
        c->next_tx_ns = FY_MAX(c->next_tx_ns, now > slack ? now - slack : 0) + gap;
        /* A burst of resends (a timeout) or a rate that was low a moment ago must not push
         * the next send far ahead: at most one sample period. */
        c->next_tx_ns = FY_MIN(c->next_tx_ns, now + FY_UDP_CC_PERIOD);
    }
}

void fy_udp_cc_delivered(fy_udp_conn_t *c, const fy_udp_seg_t *seg)
{
    if (!c->pace_ok)
        return;
    c->delivered += wire_bytes(seg);
    c->acked_segs++;
    if (seg->tx_ns > c->dlv_tx)
        c->dlv_tx = seg->tx_ns;
}

void fy_udp_cc_rtt(fy_udp_conn_t *c, int64_t r)
{
    uint64_t now = c->iface->now;
    if (!c->pace_ok)
        return;
    if (c->cc_min_rtt == 0 || r <= c->cc_min_rtt || now - c->cc_min_rtt_ns > FY_UDP_MIN_RTT_WIN) {
        c->cc_min_rtt = r;
        c->cc_min_rtt_ns = now;
    }
    if (c->per_min_rtt == 0 || r < c->per_min_rtt)
        c->per_min_rtt = r;
}

void fy_udp_cc_lost(fy_udp_conn_t *c)
{
    c->per_lost++;
}

void fy_udp_cc_app_limited(fy_udp_conn_t *c)
{
    c->ck_app = 1;
}

/* The rate the model lets us use: the bandwidth, unless congestion cut it. */
static inline uint64_t model_bw(const fy_udp_conn_t *c)
{
    return c->bw_lo != 0 ? FY_MIN(c->bw, c->bw_lo) : c->bw;
}

/* The end of a sample period: the delivery rate, the bandwidth filter, congestion. */
static void period_end(fy_udp_conn_t *c, uint64_t now)
{
    int app = c->ck_app;
    uint32_t lost = c->per_lost;
    int64_t prtt = c->per_min_rtt;
    /* Never above what we sent in the period: a receiver (or its ACKs) held up and then
     * released at once would read as a fast path. */
    uint64_t dlv = FY_MIN(c->delivered - c->ck_dlv, c->ck_sent);
    /* ... and over the longer of the ACK interval and the send interval of what was
     * delivered: a queue that shrinks releases the ACKs of a longer send time at once. */
    uint64_t iv = FY_MAX(now - c->ck_ns, c->dlv_tx - FY_MIN(c->ck_tx, c->dlv_tx));
    uint64_t rate = mul_div(dlv, FY_NSEC_PER_SEC, iv);
    c->period++;
    if (!c->ck_app || rate > c->bw) { /* (else the filter keeps what it had: not fed) */
        c->bw_slot[c->period % FY_UDP_BW_SLOTS] = rate;
        uint64_t bw = 0;
        for (unsigned i = 0; i < FY_UDP_BW_SLOTS; i++)
            bw = FY_MAX(bw, c->bw_slot[i]);
        c->bw = bw;
    }
    /* Congestion: loss while even the period's best RTT sample waited in a queue. */
    int64_t q = c->per_min_rtt - c->cc_min_rtt;
    int cong = c->per_lost != 0 && c->per_min_rtt != 0 &&
               q > FY_MAX(c->cc_min_rtt / 2, (int64_t)CONG_FLOOR_NS);
    /* A standing queue for two periods in a row, without loss: a flow that fills
     * buffers (a loss-based TCP) shares the bottleneck.  Yield a little each period, but
     * never below half the bandwidth: a fair share is ours to keep. */
    int queued = c->per_min_rtt != 0 && q > FY_MAX(c->cc_min_rtt, (int64_t)QUEUE_FLOOR_NS);
    c->queued_periods = queued ? c->queued_periods + 1 : 0;
    if (!cong && c->queued_periods >= 2) {
        uint64_t base = model_bw(c);
        if (base > c->bw / 2) {
            c->bw_lo = FY_MAX(base - base / 10, c->bw / 2);
            c->cong_cuts++;
        }
    } else if (cong) {
        uint64_t base = model_bw(c);
        c->bw_lo = FY_MAX(base - base / 5, c->bw / 16);
        c->cong_cuts++;
        if (c->cc_state == FY_UDP_CC_STARTUP) /* a queue that drops already: the pipe is full */
            c->cc_state = FY_UDP_CC_DRAIN;
    } else if (c->bw_lo != 0 && !queued) {
        c->bw_lo += c->bw_lo / 32;
        if (c->bw_lo >= c->bw)
            c->bw_lo = 0;
    }
    c->per_lost = 0;
    c->per_min_rtt = 0;
    c->ck_ns = now;
    c->ck_dlv = c->delivered;
    int paced = c->ck_paced;
    c->ck_paced = 0;
    c->ck_app = 0;
    c->ck_sent = 0;
    c->ck_tx = c->dlv_tx;

    /* Held back by pacing for a whole period, with no loss and no queue: the path has
     * room the estimate does not know of (it came from a slower phase of the application,
     * or a competitor left).  Search again, as at the start. */
    if (c->cc_state == FY_UDP_CC_PROBE_BW && paced && !app && lost == 0 && c->bw_lo == 0 &&
        prtt != 0 && q < FY_MAX(c->cc_min_rtt / 2, (int64_t)FY_NSEC_PER_MSEC)) {
        c->cc_state = FY_UDP_CC_STARTUP;
        c->full_bw = c->bw;
        c->full_bw_cnt = 0;
    }
    if (c->cc_state == FY_UDP_CC_STARTUP && !app) {
        if (c->bw >= c->full_bw + c->full_bw / 4) {
            c->full_bw = c->bw;
            c->full_bw_cnt = 0;
        } else if (++c->full_bw_cnt >= 3) {
            c->cc_state = FY_UDP_CC_DRAIN;
        }
    }
    /* While cut, we hold ourselves below the bandwidth: the samples say so little about the
     * path that they count only when they raise the estimate. */
    c->ck_app = c->bw_lo != 0;
}

void fy_udp_cc_ack(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    uint64_t now = iface->now;
    uint32_t acked = c->acked_segs;

    if (acked == 0)
        return;
    c->acked_segs = 0;
    if (c->ck_ns == 0) {
        c->ck_ns = now;
        c->ck_dlv = c->delivered;
        c->ck_tx = c->dlv_tx;
    } else if (c->cc_min_rtt != 0 && now - c->ck_ns >= period_ns(c)) {
        period_end(c, now);
    }
    if (c->bw == 0) {
        c->cwnd = FY_MIN(c->wnd, c->cwnd + acked); /* no model yet: slow start */
        return;
    }

    uint64_t bw = model_bw(c);
    uint64_t bdp = mul_div(bw, (uint64_t)c->cc_min_rtt, FY_NSEC_PER_SEC);
    uint64_t seg = (uint64_t)c->seg_size + 28;
    uint64_t in_flight = (uint64_t)(c->snd_nxt - c->snd_una - c->nsacked) * seg;
    unsigned gain_x1000 = 1000, cwnd_gain_x1000 = 2000;
    switch (c->cc_state) {
    case FY_UDP_CC_STARTUP:
        gain_x1000 = cwnd_gain_x1000 = GAIN_STARTUP_X1000;
        break;
    case FY_UDP_CC_DRAIN:
        gain_x1000 = 1000000 / GAIN_STARTUP_X1000;
        cwnd_gain_x1000 = GAIN_STARTUP_X1000;
        if (in_flight > bdp)
            break;
        c->cc_state = FY_UDP_CC_PROBE_BW;
        c->cc_cycle = (uint8_t)(2 + (c->id + c->period) % 6); /* not all flows in step */
        c->cycle_ns = now;
        /* fall through */
    case FY_UDP_CC_PROBE_BW: {
        uint64_t phase = period_ns(c);
        int next = now - c->cycle_ns > phase;
        if (c->cc_cycle == 0) /* probing: until the extra is really in flight */
            next = next && (in_flight >= bdp + bdp / 4 || now - c->cycle_ns > 2 * phase);
        else if (c->cc_cycle == 1) /* draining the probe: as soon as it is gone */
            next = next || in_flight <= bdp;
        if (next) {
            c->cc_cycle = (uint8_t)((c->cc_cycle + 1) & 7);
            c->cycle_ns = now;
        }
        gain_x1000 = cycle_gain_x4[c->cc_cycle] * 250u;
        cwnd_gain_x1000 = 2000;
        break;
    }
    }

    /* cwnd: a cap for bunched ACKs; the pacing rate governs. */
    /* (over the smoothed RTT, not the min: where the RTT jitters far above its minimum - a
     * busy host, a software hop - a window of the min RTT would starve the pipe) */
    uint64_t rtt = (uint64_t)FY_MAX(c->cc_min_rtt, c->srtt);
    uint64_t target = mul_div(mul_div(bw, rtt, FY_NSEC_PER_SEC), cwnd_gain_x1000, 1000);
    /* (+ what one delayed ACK may cover: ACK_EVERY segments, or ACK_DELAY at this rate) */
    uint64_t ack_segs = mul_div(bw, iface->opts->ack_delay, FY_NSEC_PER_SEC) / seg + 1;
    uint64_t tsegs = target / seg + FY_MIN((uint64_t)iface->opts->ack_every, ack_segs) + 4;
    tsegs = FY_MIN(FY_MAX(tsegs, (uint64_t)FY_UDP_CWND_MIN), (uint64_t)c->wnd);
    if (c->cc_state == FY_UDP_CC_STARTUP) {
        if (c->cwnd < tsegs) /* (a burst of ACKs must not blow it up) */
            c->cwnd = (uint32_t)FY_MIN((uint64_t)c->cwnd + acked, tsegs);
    } else {
        c->cwnd = (uint32_t)FY_MIN((uint64_t)c->cwnd + acked, tsegs);
    }
    /* The probing phase probes from the bandwidth, not from a cut: a flow that met a
     * competitor at its start measured only its share, and must find out whether there
     * is more. */
    uint64_t rate = mul_div(c->cc_state == FY_UDP_CC_PROBE_BW && c->cc_cycle == 0 ? c->bw : bw,
                            gain_x1000, 1000);
    c->pace_rate = rate > iface->opts->pace_max ? 0 : FY_MAX(rate, (uint64_t)64 * 1024);
}

/* Is the next send too early?  Then wait for the pace timer. */
int fy_udp_cc_pace_block(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    uint64_t now = iface->now;
    uint64_t burst = FY_MIN(FY_MAX(c->pace_rate / 1000, 2ull * (c->seg_size + 28)), 65536ull);
    uint64_t burst_ns = mul_div(burst, FY_NSEC_PER_SEC, c->pace_rate);
    if (c->next_tx_ns <= now + burst_ns) {
        if (c->pace_wait) {
            c->pace_wait = 0;
            fy_hotel_checkout(&iface->hotel, &c->pace_timer.room);
        }
        return 0;
    }
    uint64_t due = c->next_tx_ns - burst_ns;
    c->paced_waits += !c->pace_wait;
    c->ck_paced = 1;
    c->pace_wait = 1;
    fy_hotel_checkin(&iface->hotel, &c->pace_timer.room, due - now, now);
    if (iface->pace_due == 0 || due < iface->pace_due)
        iface->pace_due = due;
    return 1;
}

void fy_udp_cc_pace_expired(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    (void)iface;
    c->pace_wait = 0;
    fy_udp_ready_add(c);
}
