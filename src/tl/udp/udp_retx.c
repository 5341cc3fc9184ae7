/*
 * udp_retx.c - reliability on the sender's side: cumulative ACKs, the RTT estimate, fast
 * retransmission and the hotel.
 *
 * Every segment sent is checked into the hotel (util/hotel.h, a timing wheel: O(1) check-in
 * and check-out) for one retransmission timeout, and checked out when an ACK covers it or
 * when it is put on the resend queue.  The timeout adapts to the path, as TCP's does
 * (RFC 6298): SRTT and RTTVAR from ACKs of segments sent once (Karn), RTO = SRTT + 4 RTTVAR
 * between FERRY_UDP_RTO_MIN and _MAX, doubled for each resend of the same segment.
 *
 * A loss is normally found well before the timeout: the receiver ACKs at once when a segment
 * arrives out of order, and that ACK carries SACK bits of what it holds beyond the hole.  A
 * duplicate ACK, or SACK bits showing a hole, resends the missing segments at once - but only
 * those sent more than about half an RTT ago, so a segment merely overtaken (a tiny one on
 * the priority channel passing a large one on the data channel) is not sent twice.  A loss
 * thus costs about one RTT, not a timeout.
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

static void rtt_sample(fy_udp_conn_t *c, int64_t r)
{
    const fy_udp_opts_t *o = c->iface->opts;
    if (r <= 0)
        r = 1;
    if (c->min_rtt == 0 || r < c->min_rtt)
        c->min_rtt = r;
    /* Queueing delay: the window fills a bottleneck's buffer (a slow link, a busy
     * receiver).  Shrink it by an eighth, once per round trip, before that queue makes the
     * round trip (and every loss recovery) long; random loss alone never shrinks it. */
    if (r > 4 * c->min_rtt && r > c->min_rtt + FY_UDP_QUEUE_NS &&
        c->iface->now - c->cwnd_cut_ns > (uint64_t)FY_MAX(c->srtt, c->min_rtt)) {
        uint32_t w = FY_MIN(c->cwnd, c->snd_nxt - c->snd_una); /* what is really out */
        c->cwnd = FY_MAX(w - w / 8, (uint32_t)FY_UDP_CWND_MIN);
        c->cwnd_cut_ns = c->iface->now;
    }
    if (c->srtt == 0) {
        c->srtt = r;
        c->rttvar = r / 2;
    } else {
        int64_t delta = c->srtt > r ? c->srtt - r : r - c->srtt;
        c->rttvar = (3 * c->rttvar + delta) / 4;
        c->srtt = (7 * c->srtt + r) / 8;
    }
    uint64_t rto = (uint64_t)(c->srtt + FY_MAX(4 * c->rttvar, (int64_t)FY_NSEC_PER_USEC * 5));
    c->rto = FY_MIN(FY_MAX(rto, o->rto_min), o->rto_max);
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

/* Resend the holes below the highest segment the receiver holds (from the SACK bits). */
static void resend_holes(fy_udp_conn_t *c, uint32_t ack, uint32_t sack,
                         const fy_udp_sack_ext_t *ext, uint32_t top)
{
    fy_udp_iface_t *iface = c->iface;
    uint64_t thresh = c->srtt ? (uint64_t)c->srtt / 2 : iface->opts->rto_min / 2;
    /* RACK: a segment is lost when one sent after it (by more than a reordering allowance)
     * has been delivered - whatever the RTT estimate says.  That holds for a resend too. */
    uint64_t reo = (uint64_t)c->min_rtt / 4 + 2 * FY_NSEC_PER_USEC;
    for (uint32_t s = ack; fy_udp_seq_diff(s, top) < 0; s++) {
        if (fy_udp_seq_diff(s, c->snd_nxt) >= 0)
            break;
        fy_udp_seg_t *seg = c->win[s & (iface->wsize - 1)];
        if (s != ack && sacked(ack, sack, ext, s)) {
            if (seg != NULL && !seg->sacked) {
                seg->sacked = 1; /* the scoreboard: no timer resends it */
                fy_hotel_checkout(&iface->hotel, &seg->timer.room);
                if (fy_list_is_linked(&seg->rlink))
                    fy_list_del(&seg->rlink);
            }
            continue;
        }
        /* Sent once: missing after half an RTT is lost.  Resent already: its resend is
         * still on the way for an RTO. */
        if (seg == NULL || fy_list_is_linked(&seg->rlink))
            continue;
        if (c->rack_tx != 0 ? seg->tx_ns + reo > c->rack_tx
                            : iface->now - seg->tx_ns < (seg->tries > 1 ? c->rto : thresh))
            continue;
        c->stats.fast_retransmits++;
        fy_udp_resend_push(iface, seg);
    }
}

/* An ACK from the peer: every seq before ack arrived; sack: what it holds beyond. */
void fy_udp_process_ack(fy_udp_conn_t *c, uint32_t ack, uint32_t sack, int pure,
                        const fy_udp_sack_ext_t *ext)
{
    fy_udp_iface_t *iface = c->iface;
    uint32_t mask = iface->wsize - 1;
    int32_t d = fy_udp_seq_diff(ack, c->snd_una);

    if (d > 0) {
        if (fy_udp_seq_diff(ack, c->snd_nxt) > 0)
            return; /* acknowledges what was never sent: not from our peer's stream */
        /* RTT: the oldest segment this ACK covers (with ACKs that cover many segments,
         * its wait is what a timeout must outlast) - but only when no segment in the range
         * was resent or held out of order: then the ACK waited for a recovery, which is
         * not the path's round trip (Karn, extended to the whole range). */
        fy_udp_seg_t *oldest = NULL;
        for (uint32_t s = c->snd_una; s != ack; s++) {
            fy_udp_seg_t *seg = c->win[s & mask];
            if (seg != NULL && (seg->tries > 1 || seg->sacked)) {
                oldest = NULL;
                break;
            }
            if (oldest == NULL)
                oldest = seg;
        }
        if (oldest != NULL)
            rtt_sample(c, (int64_t)(iface->now - oldest->tx_ns));
        fy_udp_seg_t *newest = c->win[(ack - 1) & mask];
        if (newest != NULL && newest->tx_ns > c->rack_tx)
            c->rack_tx = newest->tx_ns;
        for (uint32_t s = c->snd_una; s != ack; s++) {
            fy_udp_seg_t *seg = c->win[s & mask];
            c->win[s & mask] = NULL;
            if (seg == NULL)
                continue;
            fy_hotel_checkout(&iface->hotel, &seg->timer.room);
            fy_list_del(&seg->rlink);
            c->inflight -= fy_udp_seg_cost(seg);
            if (seg->frag != NULL)
                fy_udp_frag_release_seg(iface, seg->frag);
            fy_udp_seg_free(iface, seg);
        }
        /* The congestion window opens as ACKs come (doubling per round trip), so the first
         * burst to a new peer does not flood a receiver that has not shown its pace; it
         * closes only on queueing delay (rtt_sample).  Loss does not close it: random loss
         * is not congestion, and SACK recovery handles it. */
        if (c->iface->now - c->cwnd_cut_ns > (uint64_t)c->srtt)
            c->cwnd = FY_MIN(c->wnd, c->cwnd + (uint32_t)d);
        c->snd_una = ack;
        c->last_ack_ns = iface->now;
        if (!fy_list_is_empty(&c->sendq))
            fy_udp_ready_add(c);
        if (!fy_list_is_empty(&c->flushq))
            fy_udp_flush_check(c);
    } else if (d == 0 && pure && c->snd_una != c->snd_nxt) {
        c->stats.dup_acks++;
    } else if (d < 0) {
        return; /* an old ACK, overtaken */
    }
    if (c->snd_una == c->snd_nxt)
        return;
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
    if (fy_udp_seq_diff(top - 1, c->snd_high) > 0) {
        /* The newest segment the peer holds is the one whose arrival made it send this
         * ACK at once: a true round trip, if it was sent once. */
        fy_udp_seg_t *seg = top != ack ? c->win[(top - 1) & mask] : NULL;
        if (seg != NULL && seg->tries == 1 && !seg->sacked)
            rtt_sample(c, (int64_t)(iface->now - seg->tx_ns));
        if (seg != NULL && seg->tx_ns > c->rack_tx)
            c->rack_tx = seg->tx_ns;
        c->snd_high = top - 1;
        c->last_ack_ns = iface->now; /* news from the receiver: the path is moving */
    }
    if (top != ack || (d == 0 && pure))
        resend_holes(c, ack, sack, ext, top == ack ? ack + 1 : top);
}

void fy_udp_hotel_expired(fy_hotel_t *hotel, fy_hotel_room_t *room, void *arg)
{
    fy_udp_iface_t *iface = arg;
    fy_udp_timer_t *t = fy_container_of(room, fy_udp_timer_t, room);

    if (t->kind == FY_UDP_TIMER_CONN) {
        fy_udp_conn_timer_expired(iface, fy_container_of(t, fy_udp_conn_t, conn_timer));
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
    c->stats.timeouts++;
    /* Like TCP's single resend at a timeout: the others above what the peer holds wait
     * one more RTO (the resend's SACKs will show what is really missing). */
    if (fy_udp_seq_diff(seg->seq, c->snd_high) > 0)
        c->last_ack_ns = iface->now;
    fy_udp_resend_push(iface, seg);
}
