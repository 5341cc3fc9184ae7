/*
 * udp_retx.c - reliability on the sender's side: cumulative and selective ACKs, the RTT
 * estimate, time-based loss detection (RACK) and the hotel.
 *
 * RTT: every datagram carries the sender's clock (tsval) and every ACK echoes the tsval of
 * the segment whose arrival it answers (tsecr), so every ACK is an unambiguous sample -
 * resends included, and whatever the receiver held in its stash.  SRTT, RTTVAR and RTO as
 * in RFC 6298, RTO = SRTT + max(4 RTTVAR, SRTT/4) (the adaptive floor: a steady path does
 * not get an RTO at its bare RTT), between FERRY_UDP_RTO_MIN and _MAX, doubled per resend
 * of one segment.
 *
 * Loss detection is by time, as RACK (RFC 8985): the echo of an ACK names the send time of
 * a segment that arrived; a segment sent before it by more than the reorder window and not
 * held by the receiver (the SACK bitmap covers the whole window) is lost and resent at once
 * - a resend too, so a lost resend is repaired after one more round trip, not by the timer.
 * So is a segment sent before it at all that has been out for a round trip and the reorder
 * window (a hole in a burst: nothing sent a reorder window after it may ever arrive); the
 * reorder timer judges such a hole again when that time comes, if no ACK did.
 * The reorder window starts at a quarter of the minimum RTT and doubles (never beyond half
 * the SRTT or the RTO, nor 3/4 of the RTO's margin over the SRTT) each time the receiver reports a
 * resend (F_RESENT) of a segment it held already (F_DSACK): a resend that proved needless.  It
 * halves after 64 calm recoveries. Reordering between the two channels (a tiny segment on the
 * priority channel overtakes a large one on the data channel) is expected: a segment is judged only
 * by segments sent after it on its own channel.
 *
 * What the receiver holds out of order leaves the pipe: the congestion window counts only
 * segments in flight, so new data keeps flowing while holes are repaired.
 *
 * The timeout is the time without ACK progress, as in TCP: a segment whose timer runs out
 * while the ACK point moved within the last RTO is checked in again instead of resent.
 *
 * A peer is presumed dead when a segment's timer runs out and nothing at all has been heard
 * from it for FERRY_UDP_PEER_TIMEOUT while data was waiting for its ACK.
 */
#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"

uint64_t fy_udp_seg_stay(const fy_udp_conn_t *c, const fy_udp_seg_t *seg)
{
    uint64_t max = c->iface->opts->rto_max;
    unsigned shift = seg->tries > 1 ? FY_MIN((unsigned)seg->tries - 1, 16u) : 0;
    uint64_t stay = c->rto << shift;
    return stay > max || (stay >> shift) != c->rto ? max : stay;
}

/* The plain window (no model: a peer at our own address, or FERRY_UDP_PACING=n) is cut by
 * an eighth, at most once per round trip, when RTT samples show a long queue (random loss
 * never cuts it).  After the first cut, while the last sample shows a queue of a quarter
 * of that or more, it grows by 4 segments per round trip instead of doubling: doubling
 * from just below a full buffer overflows it by a window's worth.  Without a queue (the
 * link is not full: heavy loss, an application that paused) it doubles again.
 * A peer at our own address is never cut: the only queue is its socket, which the credits
 * (at most half of it) keep from overflowing, and its delay is the receiver's scheduling -
 * on a busy host a receiver descheduled for tens of milliseconds cut the window to its
 * floor (2 MiB of 64 KiB segments, a quarter of the credits), and it grew back by a segment
 * per round trip while the next such pause came (a 1 MiB AM stream on the loopback at load
 * 5-10, FERRY_UDP_CREDIT=16m: 0.59 -> 0.66 of raw UDP's, medians of 6 interleaved runs). */
static void plain_cut(fy_udp_conn_t *c)
{
    if (c->pace_ok || c->local ||
        c->iface->now - c->cwnd_cut_ns <= (uint64_t)FY_MAX(c->srtt, c->min_rtt))
        return;
    uint32_t w = FY_MIN(c->cwnd, c->snd_nxt - c->snd_una - c->nsacked); /* really out */
    c->cwnd = FY_MAX(w - w / 8, (uint32_t)FY_UDP_CWND_MIN);
    c->ssthresh = c->cwnd;
    c->cwnd_acc = 0;
    c->cwnd_cut_ns = c->iface->now;
    c->cwnd_cuts++;
}

/* The RTO's floor: RTO_MIN, or above it after spurious timeouts (see spurious_rto); the
 * part above RTO_MIN halves every FLOOR_HALF_NS without a new one. */
#define FLOOR_HALF_NS (1 * FY_NSEC_PER_SEC)

static uint64_t rto_floor(fy_udp_conn_t *c)
{
    uint64_t lo = c->iface->opts->rto_min;
    if (c->rto_floor <= lo)
        return lo;
    if (c->iface->now - c->rto_floor_ns >= FLOOR_HALF_NS) {
        c->rto_floor = lo + (c->rto_floor - lo) / 2;
        c->rto_floor_ns = c->iface->now;
        if (c->rto_floor - lo < FY_NSEC_PER_USEC)
            c->rto_floor = 0;
    }
    return FY_MAX(c->rto_floor, lo);
}

/* A timeout proved needless: the original arrived, the peer only answered late (a peer
 * descheduled for milliseconds on a loaded machine; the RTT samples between such pauses are
 * tens of microseconds, so RTTVAR forgets them within a few dozen round trips and the next
 * pause times out again: 1.5-2% of a loaded ping-pong's messages were resent so).  As TCP's
 * spurious-RTO detection (Eifel, by the timestamp echo), the delay the timer did not wait for -
 * from the original's send to the ACK - plus a quarter becomes the RTO's floor for this
 * connection, halving its excess each second without another: a connection on a loaded
 * machine waits as long as the scheduler makes it, one on a quiet machine keeps RTO_MIN
 * (a real loss there is still repaired one RTO after it, and by RACK at once when anything
 * after it arrives). */
static void spurious_rto(fy_udp_conn_t *c, uint64_t took)
{
    fy_udp_iface_t *iface = c->iface;
    uint64_t f = FY_MIN(took + took / 4, iface->opts->rto_max);
    c->spurious_rtos++;
    if (f > c->rto_floor) {
        c->rto_floor = f;
        c->rto_floor_ns = iface->now;
    }
    c->rto = FY_MIN(FY_MAX(c->rto, f), iface->opts->rto_max);
}

/* A timeout that was needed (the original was lost): a floor raised by earlier pauses
 * made its repair that much later - halve what it adds to RTO_MIN, so a lossy path on a
 * loaded machine weighs its losses against the peer's pauses. */
static void needed_rto(fy_udp_conn_t *c)
{
    uint64_t lo = c->iface->opts->rto_min;
    if (c->rto_floor > lo) {
        c->rto_floor = lo + (c->rto_floor - lo) / 2;
        c->rto_floor_ns = c->iface->now;
    }
}

static void rtt_sample(fy_udp_conn_t *c, int64_t r)
{
    const fy_udp_opts_t *o = c->iface->opts;
    if (r <= 0)
        r = 1;
    if (c->min_rtt == 0 || r < c->min_rtt)
        c->min_rtt = r;
    fy_udp_cc_rtt(c, r);
    /* (Without the model of udp_cc.c: a peer at our own address.)  Queueing delay: the
     * window fills a bottleneck's buffer (a slow link, a busy receiver).  Shrink it by an eighth,
     * once per round trip, before that queue makes the round trip (and every loss recovery) long;
     * random loss alone never shrinks it. */
    c->last_rtt = r;
    if (r > 4 * c->min_rtt && r > c->min_rtt + FY_UDP_QUEUE_NS)
        plain_cut(c);
    if (c->srtt == 0) {
        c->srtt = r;
        c->rttvar = r / 2;
    } else {
        int64_t delta = c->srtt > r ? c->srtt - r : r - c->srtt;
        c->rttvar = (3 * c->rttvar + delta) / 4;
        c->srtt = (7 * c->srtt + r) / 8;
    }
    uint64_t rto = (uint64_t)(c->srtt + FY_MAX(FY_MAX(4 * c->rttvar, c->srtt / 4),
                                               (int64_t)FY_NSEC_PER_USEC * 5));
    c->rto = FY_MIN(FY_MAX(rto, rto_floor(c)), o->rto_max);
}

void fy_udp_resend_push(fy_udp_iface_t *iface, fy_udp_seg_t *seg)
{
    fy_hotel_checkout(&iface->hotel, &seg->timer.room);
    if (!fy_list_is_linked(&seg->rlink))
        fy_list_add_tail(&iface->resendq, &seg->rlink);
}

/* The kernel refused it: first in line for the next pass. */
void fy_udp_seg_unsent(fy_udp_iface_t *iface, fy_udp_seg_t *seg)
{
    fy_hotel_checkout(&iface->hotel, &seg->timer.room);
    if (!fy_list_is_linked(&seg->rlink))
        fy_list_add_head(&iface->resendq, &seg->rlink);
}

static inline int sacked(uint32_t ack, uint32_t sack, const fy_udp_sack_ext_t *ext, uint32_t s)
{
    uint32_t i = s - ack - 1;
    if (i < 32 && ((sack >> i) & 1u))
        return 1;
    return ext != NULL && i < ext->nbits && ((ext->bits[i / 8] >> (i % 8)) & 1u);
}

/* RACK (RFC 8985): lost when a segment sent after it on the same channel has arrived,
 * and either that one left more than the reorder window after it, or it has been out for
 * a round trip and the reorder window.  (The second is what a burst needs: its segments
 * left together, so no arrival ever shows one of them sent a reorder window later; without
 * it a hole in a burst waited for the timer.)  Across channels nothing can be told: a busy
 * receiver may read one socket milliseconds behind the other (there the timer decides).
 * *due: the earliest time a hole not lost yet will be, for the reorder timer. */
static int rack_lost(const fy_udp_conn_t *c, const fy_udp_seg_t *seg, uint64_t reo, uint64_t *due)
{
    uint64_t newest = c->rack_ch[seg->chan];
    if (seg->tx_ns + reo <= newest)
        return 1;
    /* (An echo names its send time to the microsecond, and a batch may be stamped at once:
     * within 2 us, which left first is not known.) */
    if (newest < seg->tx_ns + 2 * FY_NSEC_PER_USEC)
        return 0;
    uint64_t t = seg->tx_ns + (uint64_t)FY_MAX(c->last_rtt, c->srtt) + reo;
    if (t <= c->iface->now)
        return 1;
    if (*due == 0 || t < *due)
        *due = t;
    return 0;
}

/* The reorder window (see the top of the file). */
static uint64_t rack_reo(const fy_udp_conn_t *c)
{
    uint64_t reo = (uint64_t)c->min_rtt / 4 * FY_MAX(c->reo_quarters, 1u) + 2 * FY_NSEC_PER_USEC;
    if (c->srtt != 0) {
        /* (and well inside the timeout, or the timer would fire first: RACK's verdict on a
         * hole comes a reorder window after it left plus the round trip of the echo that
         * shows it, the timer an RTO after the ACK point stopped - so at most 3/4 of the
         * RTO's margin over the SRTT, never below the starting window) */
        uint64_t srtt = (uint64_t)c->srtt;
        uint64_t margin = c->rto > srtt ? (c->rto - srtt) * 3 / 4 : 0;
        margin = FY_MAX(margin, (uint64_t)c->min_rtt / 4 + 2 * FY_NSEC_PER_USEC);
        reo = FY_MIN(reo, FY_MIN(FY_MIN(srtt / 2, c->rto / 2), margin));
    }
    return reo;
}

static void rack_resend(fy_udp_conn_t *c, fy_udp_seg_t *seg)
{
    c->stats.fast_retransmits++;
    c->fast_again += seg->tries > 1;
    c->reo_calm++;
    fy_udp_cc_lost(c);
    fy_udp_resend_push(c->iface, seg);
}

/* A hole RACK will call lost at due unless an ACK says otherwise first. */
static void rack_arm(fy_udp_conn_t *c, uint64_t due)
{
    fy_udp_iface_t *iface = c->iface;
    if (due == 0)
        return;
    if (fy_hotel_is_checked_in(&c->rack_timer.room) && c->rack_due <= due &&
        c->rack_due > iface->now)
        return;
    c->rack_due = due;
    fy_hotel_checkin(&iface->hotel, &c->rack_timer.room, due > iface->now ? due - iface->now : 1,
                     iface->now);
}

/* The reorder timer: judge again every hole below what the peer holds. */
static void rack_expired(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    uint64_t reo = rack_reo(c), due = 0;
    if (c->snd_una == c->snd_nxt || c->in_fail_list)
        return;
    for (uint32_t s = c->snd_una; fy_udp_seq_diff(s, c->snd_high) < 0; s++) {
        fy_udp_seg_t *seg = c->win[s & (iface->wsize - 1)];
        if (seg == NULL || seg->sacked || fy_list_is_linked(&seg->rlink))
            continue;
        if (rack_lost(c, seg, reo, &due))
            rack_resend(c, seg);
    }
    rack_arm(c, due);
}

/* Resend the holes below the highest segment the receiver holds (from the SACK bits). */
static void resend_holes(fy_udp_conn_t *c, uint32_t ack, uint32_t sack,
                         const fy_udp_sack_ext_t *ext, uint32_t top)
{
    fy_udp_iface_t *iface = c->iface;
    uint64_t thresh = c->srtt ? (uint64_t)c->srtt / 2 : iface->opts->rto_min / 2;
    /* RACK: a segment is lost when one sent after it (by more than the reorder window)
     * has been delivered - whatever the RTT estimate says.  That holds for a resend too. */
    uint64_t reo = rack_reo(c), due = 0;
    for (uint32_t s = ack; fy_udp_seq_diff(s, top) < 0; s++) {
        if (fy_udp_seq_diff(s, c->snd_nxt) >= 0)
            break;
        fy_udp_seg_t *seg = c->win[s & (iface->wsize - 1)];
        if (s != ack && sacked(ack, sack, ext, s)) {
            if (seg != NULL && !seg->sacked) {
                fy_udp_cc_delivered(c, seg);
                seg->sacked = 1; /* the scoreboard: no timer resends it; out of the pipe */
                c->nsacked++;
                c->sacked_bytes += fy_udp_seg_cost(seg);
                fy_hotel_checkout(&iface->hotel, &seg->timer.room);
                if (fy_list_is_linked(&seg->rlink))
                    fy_list_del(&seg->rlink);
            }
            continue;
        }
        /* Sent once: missing after half an RTT is lost.  Resent already: its resend is
         * still on the way for an RTO. */
        if (seg == NULL || seg->sacked || fy_list_is_linked(&seg->rlink))
            continue;
        if (c->rack_tx != 0 ? !rack_lost(c, seg, reo, &due)
                            : iface->now - seg->tx_ns < (seg->tries > 1 ? c->rto : thresh))
            continue;
        rack_resend(c, seg);
    }
    rack_arm(c, due);
}

/* The send time (ns, our clock) that an echoed tsval stands for. */
static uint64_t echo_time(const fy_udp_iface_t *iface, uint32_t tsecr)
{
    uint32_t ago_us = fy_udp_ts(iface->now) - tsecr;
    uint64_t ago = (uint64_t)ago_us * 1000;
    return ago < iface->now ? iface->now - ago : 0;
}

/* An ACK from the peer: every seq before ack arrived; sack: what it holds beyond. */
static void process_ack(fy_udp_conn_t *c, const fy_udp_hdr_t *h, int pure,
                        const fy_udp_sack_ext_t *ext)
{
    fy_udp_iface_t *iface = c->iface;
    uint32_t mask = iface->wsize - 1;
    uint32_t ack = h->ack, sack = h->sack;
    int32_t d = fy_udp_seq_diff(ack, c->snd_una);

    if (d > 0 && fy_udp_seq_diff(ack, c->snd_nxt) > 0)
        return; /* acknowledges what was never sent: not from our peer's stream */
    /* The receiver's window: explicit ACKs carry it while its socket drops (F_RWND), and
     * one without it lifts it.  Segments carrying ACKs say nothing of it: it lapses. */
    if (pure && (h->flags & FY_UDP_F_RWND)) {
        c->peer_rwnd = FY_MAX((uint64_t)h->seq << 10, (uint64_t)2 * c->seg_size);
        c->peer_rwnd_ns = iface->now;
    } else if (c->peer_rwnd != 0 && (pure || iface->now - c->peer_rwnd_ns > FY_UDP_RWND_LAPSE)) {
        c->peer_rwnd = 0;
    }
    uint64_t sent = 0;
    if (d >= 0 && h->tsecr != 0 && h->tsecr != c->last_tsecr) {
        /* The echo: the send time of a segment that just arrived - a true round trip
         * (plus the receiver's ACK delay), and the RACK clock. */
        sent = echo_time(iface, h->tsecr);
        c->last_tsecr = h->tsecr;
        if (sent != 0 && iface->now - sent < 60ull * FY_NSEC_PER_SEC) {
            uint8_t ch = (h->flags & FY_UDP_F_ECHO_DATA) ? FY_UDP_CH_DATA : FY_UDP_CH_PRIO;
            rtt_sample(c, (int64_t)(iface->now - sent));
            if (sent > c->rack_tx)
                c->rack_tx = sent;
            if (sent > c->rack_ch[ch])
                c->rack_ch[ch] = sent;
        }
    }
    /* A timer episode ends with the ACK that covers what it resent.  Echoing a segment
     * sent before the first timer resend, that ACK answers an original: the timeout was
     * spurious (Eifel).  A DSACK alone does not say so: it also answers a resend whose
     * original arrived but whose ACK was lost - a timeout no longer wait would have spared
     * (an ACK lost is never echoed again: the ACK the duplicate asks carries no echo).
     * Taken as spurious, every lost ACK of a ping-pong at 1% loss raised the floor, up to
     * RTO_MAX. */
    if (c->rto_at != 0 && d > 0 && fy_udp_seq_diff(ack, c->rto_seq) > 0) {
        if (sent != 0 && sent < c->rto_at)
            spurious_rto(c, iface->now - c->rto_orig_ns);
        else if (sent != 0)
            needed_rto(c); /* (the echo is the resend's: the original was lost) */
        c->rto_at = 0;
    }
    if ((h->flags & FY_UDP_F_DSACK) && c->resent_at != 0 &&
        iface->now - c->resent_at < 4 * (uint64_t)FY_MAX(c->srtt, c->min_rtt)) {
        /* A resend of ours arrived as a duplicate: it was needless - reordering read as
         * loss.  Widen the reorder window. */
        c->dsacks++;
        if (c->reo_quarters < 1024)
            c->reo_quarters = FY_MAX(c->reo_quarters, 1u) * 2;
        c->reo_calm = 0;
    } else if (c->reo_calm > 64 && c->reo_quarters > 1) {
        c->reo_quarters /= 2;
        c->reo_calm = 0;
    }
    if (d > 0) {
        fy_udp_seg_t *newest = c->win[(ack - 1) & mask];
        if (newest != NULL && newest->tries == 1 && newest->tx_ns > c->rack_tx)
            c->rack_tx = newest->tx_ns;
        if (newest != NULL && newest->tries == 1 && newest->tx_ns > c->rack_ch[newest->chan])
            c->rack_ch[newest->chan] = newest->tx_ns;
        for (uint32_t s = c->snd_una; s != ack; s++) {
            fy_udp_seg_t *seg = c->win[s & mask];
            c->win[s & mask] = NULL;
            if (seg == NULL)
                continue;
            if (!seg->sacked)
                fy_udp_cc_delivered(c, seg);
            fy_hotel_checkout(&iface->hotel, &seg->timer.room);
            fy_list_del(&seg->rlink);
            c->inflight -= fy_udp_seg_cost(seg);
            if (seg->sacked) {
                c->nsacked--;
                c->sacked_bytes -= fy_udp_seg_cost(seg);
            }
            if (seg->frag != NULL)
                fy_udp_frag_release_seg(iface, seg->frag);
            fy_udp_seg_free(iface, seg);
        }
        /* The congestion window opens as ACKs come (doubling per round trip), so the first
         * burst to a new peer does not flood a receiver that has not shown its pace; it
         * closes only on queueing delay (rtt_sample).  Loss does not close it: random loss
         * is not congestion, and SACK recovery handles it.  (With the model, udp_cc.c
         * sets it.) */
        if (!c->pace_ok && c->iface->now - c->cwnd_cut_ns > (uint64_t)c->srtt) {
            if (c->ssthresh == 0 || c->cwnd < c->ssthresh ||
                c->last_rtt < c->min_rtt + FY_UDP_QUEUE_NS / 4) {
                c->cwnd = FY_MIN(c->wnd, c->cwnd + (uint32_t)d);
            } else if ((c->cwnd_acc += (uint32_t)d) >= c->cwnd / 4) {
                c->cwnd_acc = 0;
                c->cwnd = FY_MIN(c->wnd, c->cwnd + 1);
            }
        }
        c->snd_una = ack;
        c->last_ack_ns = iface->now;
        c->una_moved_ns = iface->now;
        if (!fy_list_is_empty(&c->sendq))
            fy_udp_ready_add(c);
        if (!fy_list_is_empty(&c->flushq))
            fy_udp_flush_check(c);
        if (c->snd_una == c->snd_nxt)
            fy_udp_win_release(c); /* idle again (unless more waits on the send queue) */
    } else if (d == 0 && pure && c->snd_una != c->snd_nxt) {
        c->stats.dup_acks++;
    } else if (d < 0) {
        return; /* an old ACK, overtaken */
    }
    if (c->snd_una == c->snd_nxt) {
        c->rto_probing = 0;
        return;
    }
    /* The highest seq the peer holds: below it, what is missing is lost (or overtaken). */
    uint32_t top = ack;
    if (ext != NULL) {
        for (uint32_t i = ext->nbits; i > 0; i--)
            if ((ext->bits[(i - 1) / 8] >> ((i - 1) % 8)) & 1u) {
                top = ack + i + 1;
                break;
            }
    }
    if (top == ack && sack != 0)
        top = ack + 1 + (31u - (uint32_t)__builtin_clz(sack)) + 1;
    int news = d > 0;
    if (fy_udp_seq_diff(top - 1, c->snd_high) > 0) {
        c->snd_high = top - 1;
        c->last_ack_ns = iface->now; /* news from the receiver: the path is moving */
        news = 1;
    }
    if (news && c->rto_probing) {
        /* The first news after a timeout: the receiver is back.  What was sent before the
         * segment this ACK answers and is still missing is lost (RACK over the whole
         * window, once); the rest waits for its own timer again. */
        c->rto_probing = 0;
        resend_holes(c, ack, sack, ext, c->snd_nxt);
        return;
    }
    if (top != ack || (d == 0 && pure))
        resend_holes(c, ack, sack, ext, top == ack ? ack + 1 : top);
}

void fy_udp_process_ack(fy_udp_conn_t *c, const fy_udp_hdr_t *h, int pure,
                        const fy_udp_sack_ext_t *ext)
{
    process_ack(c, h, pure, ext);
    fy_udp_cc_ack(c);
}

void fy_udp_hotel_expired(fy_hotel_t *hotel, fy_hotel_room_t *room, void *arg)
{
    fy_udp_iface_t *iface = arg;
    fy_udp_timer_t *t = fy_container_of(room, fy_udp_timer_t, room);

    if (t->kind == FY_UDP_TIMER_CONN) {
        fy_udp_conn_timer_expired(iface, fy_container_of(t, fy_udp_conn_t, conn_timer));
        return;
    }
    if (t->kind == FY_UDP_TIMER_RACK) {
        rack_expired(fy_container_of(t, fy_udp_conn_t, rack_timer));
        return;
    }
    if (t->kind == FY_UDP_TIMER_PACE) {
        fy_udp_cc_pace_expired(iface, fy_container_of(t, fy_udp_conn_t, pace_timer));
        return;
    }
    fy_udp_seg_t *seg = fy_container_of(t, fy_udp_seg_t, timer);
    fy_udp_conn_t *c = seg->conn;
    if (c->in_fail_list)
        return;                         /* failing already: conn_fail releases the segment */
    if (fy_udp_conn_presumed_dead(c)) { /* udp_live.c: silent and not answering heartbeats */
        char buf[FY_NETIF_ADDR_STRLEN];
        fy_warn("udp: peer %s silent for %.1f s with %u segments unacknowledged: presumed "
                "dead",
                fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)),
                (double)(iface->now - c->last_rx_ns) / 1e9, c->snd_nxt - c->snd_una);
        fy_udp_conn_schedule_fail(c, FERRY_ERR_ENDPOINT_TIMEOUT);
        return;
    }
    /* As TCP restarts its timer on every ACK that advances: while the ACK point moves, a
     * segment above everything the peer reported holding is only waiting in line at a busy
     * receiver.  Wait on.  One below it is a hole: resend. */
    if (fy_udp_seq_diff(seg->seq, c->snd_high) > 0 && iface->now - c->last_ack_ns < c->rto) {
        fy_hotel_checkin(&iface->hotel, &seg->timer.room, c->rto - (iface->now - c->last_ack_ns),
                         iface->now);
        return;
    }
    /* Below it, a hole is for RACK to judge while the ACK point still moves (a burst of
     * ACKs may wait in the socket behind this timer); the timer is for when it stopped. */
    if (seg->tries == 1 && iface->now - c->una_moved_ns < c->rto) {
        fy_hotel_checkin(&iface->hotel, &seg->timer.room, c->rto - (iface->now - c->una_moved_ns),
                         iface->now);
        return;
    }
    /* A timeout fired, no ACK brought news since, and the peer has sent nothing at all for
     * an RTO: the path or the receiver stopped (a receiver descheduled, an application
     * that does not call progress, a link down; its liveness thread may still answer
     * heartbeats, which says it lives, not that it reads).  (While datagrams still come, the
     * timeouts are lost resends on a lossy path: each is resent at once.)
     * Resending the whole window into it is a flood that helps nothing: as TCP, only the
     * oldest segment goes, at a backed-off interval, as the probe; the others wait until
     * an ACK says the receiver is back (then RACK judges them at once). */
    int silent = iface->now - c->last_seg_ns >= c->rto; /* a liveness answer is no news */
    if (silent && c->rto_probing && seg->seq != c->snd_una) {
        fy_udp_seg_t *old = c->win[c->snd_una & (iface->wsize - 1)];
        if (old != NULL) {
            fy_hotel_checkin(&iface->hotel, &seg->timer.room, fy_udp_seg_stay(c, old), iface->now);
            return;
        }
    }
    c->rto_probing = (uint8_t)silent;
    c->stats.timeouts++;
    c->to_kind[silent                                       ? FY_UDP_TO_SILENT
               : fy_udp_seq_diff(seg->seq, c->snd_high) > 0 ? FY_UDP_TO_ABOVE
               : seg->tries > 1                             ? FY_UDP_TO_RESENT
                                                            : FY_UDP_TO_HOLE]++;
    fy_udp_cc_lost(c);
    if (c->rto_at == 0) {
        c->rto_at = iface->now;
        c->rto_orig_ns = seg->tx_ns;
        c->rto_seq = seg->seq;
    } else if (fy_udp_seq_diff(seg->seq, c->rto_seq) > 0) {
        c->rto_seq = seg->seq;
    }
    /* Like TCP's single resend at a timeout: the others above what the peer holds wait
     * one more RTO (the resend's SACKs will show what is really missing). */
    if (fy_udp_seq_diff(seg->seq, c->snd_high) > 0)
        c->last_ack_ns = iface->now;
    fy_udp_resend_push(iface, seg);
}
