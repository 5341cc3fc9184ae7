/*
 * udp_ack.c - ACKs: when the receiving end of a connection sends its explicit ACKs, and
 * what is done with one that comes (an explicit ACK, or the one an in-order AM carried).
 *
 * Most ACKs ride on data going the other way (piggy-backing, udp_tx.c).  A connection owed
 * one is put on the iface's ACK list; at the end of a progress pass (and between two full
 * receive batches of one, for the ACKs that must go at once) the list is walked and an
 * explicit ACK (an unsequenced datagram with the SACK bitmap extension when segments wait
 * out of order) leaves for each connection whose ACK is due: at once when something must be
 * reported (a hole, a duplicate, ACK_EVERY segments or ACK_BYTES bytes unacknowledged), else
 * after ACK_PASSES passes or ACK_DELAY, and part-way through a large message in order only
 * every FY_UDP_ACK_MID segments.  Fewer ACKs leave the sender's window open just as well and
 * leave the link to data.  Out of order (fy_udp_ack_ooo), only a new hole or a segment that
 * fills the first one makes the ACK go at once.
 *
 * Kept apart from the receive path (udp_rx.c) so that the policy - which arrival is news
 * for the sender, which only progress - reads in one place.
 */
#include "tl/udp/udp.h"
#include "util/log.h"

/* Mark that the peer is owed an ACK; now: as soon as this pass ends. */
void fy_udp_ack_schedule(fy_udp_conn_t *c, int now, size_t bytes)
{
    c->ack_unsent++;
    c->ack_unsent_bytes += bytes;
    if (!c->ack_pending) {
        c->ack_pending = 1;
        c->ack_passes = 0;
        c->ack_since = c->iface->now;
        fy_list_add_tail(&c->iface->acklist, &c->ack_link);
    }
    if (now || c->ack_unsent >= c->iface->opts->ack_every ||
        c->ack_unsent_bytes >= c->iface->opts->ack_bytes)
        c->ack_now = 1;
}

/* Part-way through a large AM, with nothing to report but progress: the sender waits for no
 * completion yet, only for room in its window, which ACK_EVERY, ACK_BYTES and ACK_DELAY give,
 * or every FY_UDP_ACK_MID segments (a delayed ACK's echo makes the RTT sample longer by its
 * wait: keep that short).  An ACK per progress pass or per wake-up would be one per one or two
 * segments on a link slower than the CPU (76,000 ACKs for 115,000 segments in 6 s through the
 * 200 Mbit/s link of bench/udp_loss.sh, whose bucket both directions share).  The same holds
 * with holes below: what the sender's loss detection needs - a new hole, the first hole
 * filled, a duplicate resend (fy_udp_ack_ooo below, and udp_rx.c) - sets ack_now and goes at once;
 * the rest waits here.  (Held to "no hole", a receiver sleeping between datagrams sent an ACK per
 * wake-up all through a repair: 58,000-78,000 ACK datagrams, 7-12 MB, per 6 s run at 1-10% loss on
 * that link, against 21,000-35,000 and 2-6 MB.) */
static inline int ack_may_wait(const fy_udp_conn_t *c)
{
    return c->rx_active && c->ack_unsent < FY_UDP_ACK_MID && !c->dsack_pending;
}

/* The explicit ACK of connection c leaves (into the channel's batch). */
static void ack_send(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    fy_list_del(&c->ack_link);
    c->ack_pending = c->ack_now = 0;
    c->ack_unsent = 0;
    c->ack_unsent_bytes = 0;
    if (c->peer_id == 0)
        return;
    /* The bitmap reaches the highest segment held; one too large for the priority channel
     * goes on the data channel (cut to its size if need be). */
    fy_udp_sack_ext_t ext;
    size_t elen = c->nstash ? fy_udp_sack_ext(c, &ext) : 0;
    uint8_t chan = FY_UDP_CH_PRIO;
    if (FY_UDP_HDR_LEN + elen > c->prio_mtu) {
        chan = FY_UDP_CH_DATA;
        if (FY_UDP_HDR_LEN + elen > c->seg_size) {
            uint32_t nb = (uint32_t)((c->seg_size - FY_UDP_HDR_LEN - 4) * 8);
            ext.nbits = FY_MIN(ext.nbits, nb);
            elen = 4 + ext.nbits / 8;
        }
    }
    fy_udp_tx_ctrl(iface, c, chan, FY_UDP_T_ACK, &ext, elen, 0, &c->addr[chan], c->addrlen);
}

/* Send the explicit ACKs that are due (with force, all but those mid-message, which wait
 * for ACK_DELAY).  Returns when the first ACK left waiting is due, 0 for none. */
uint64_t fy_udp_send_acks(fy_udp_iface_t *iface, int force)
{
    const fy_udp_opts_t *o = iface->opts;
    fy_list_t *e, *tmp;
    uint64_t due = 0;
    fy_list_for_each_safe(e, tmp, &iface->acklist)
    {
        fy_udp_conn_t *c = fy_container_of(e, fy_udp_conn_t, ack_link);
        c->ack_passes++;
        if (!c->ack_now && iface->now - c->ack_since < o->ack_delay) {
            if (ack_may_wait(c)) {
                uint64_t t = c->ack_since + o->ack_delay;
                due = due == 0 ? t : FY_MIN(due, t);
                continue;
            }
            if (!force && c->ack_passes <= o->ack_passes)
                continue;
        }
        ack_send(iface, c);
    }
    return due;
}

/* Between two full batches of a pass: a receiver with a backlog (it was descheduled, or is
 * slower than its sender) drains up to RX_MORE + 1 batches - megabytes on the loopback,
 * more than the sender's credits - before the pass ends and sends its ACKs; until then the
 * sender, out of credits, waits, and the two take turns instead of working at once.  The
 * ACKs that must go at once (ACK_EVERY segments or ACK_BYTES bytes unacknowledged, a hole)
 * leave here, between the batches; the others keep their delay. */
void fy_udp_send_acks_due(fy_udp_iface_t *iface)
{
    fy_list_t *e, *tmp;
    int any = 0;
    fy_list_for_each_safe(e, tmp, &iface->acklist)
    {
        fy_udp_conn_t *c = fy_container_of(e, fy_udp_conn_t, ack_link);
        if (c->ack_now) {
            ack_send(iface, c);
            any = 1;
        }
    }
    if (any)
        fy_udp_tx_flush_all(iface);
}

/* An out-of-order arrival d segments above rcv_nxt (early: it overtook a queue, udp_sack.c).
 * A new hole goes to the sender at once (dup ACK + SACK); so does anything while a DSACK is
 * owed, and an arrival beyond the window.  A segment that only extends the run above a known
 * hole, or a resend that fills a hole other than the first (the first drains the stash:
 * udp_rx.c, drain), is news the sender's loss detection can take one ACK later - it is by time
 * (RACK) and needs the news of an arrival, not of every arrival: every FY_UDP_ACK_MID-th goes
 * at once, the rest waits like an in-order ACK (ack_may_wait).  Through the 200 Mbit/s link
 * of bench/udp_loss.sh at 1-10% loss, an ACK every 4th segment and at once for every filled
 * hole was 21,000-35,000 ACK datagrams (2-6 MB) per 6 s run; now 12,000-17,000 (1-3 MB), with
 * no more resends or timeouts. */
void fy_udp_ack_ooo(fy_udp_conn_t *c, const fy_udp_hdr_t *h, uint32_t d, int early)
{
    int news = !early;
    if (news && d < c->iface->wsize && c->nstash != 0 && !c->dsack_pending && c->stash != NULL &&
        (h->seq == c->stash_top + 1 ||
         ((h->flags & FY_UDP_F_RESENT) && fy_udp_seq_diff(h->seq, c->stash_top) < 0)))
        news = c->ack_unsent + 1 >= FY_UDP_ACK_MID;
    fy_udp_ack_schedule(c, news, 0);
}

/* An explicit ACK (a control message whose header checked out: rx_ctrl, udp_rx.c), with its
 * SACK bitmap extension if any.  Returns 0: its buffer is never kept. */
int fy_udp_rx_ack(fy_udp_iface_t *iface, const fy_udp_hdr_t *h, const uint8_t *p)
{
    fy_udp_conn_t *c = fy_udp_conn_lookup(iface, h->dst_id);
    if (c == NULL || c->peer_id != h->src_id || c->peer_id == 0 || !fy_udp_conn_alive(c)) {
        iface->drops_unknown_ep++;
        return 0;
    }
    c->last_rx_ns = c->last_seg_ns = iface->now;
    fy_udp_sack_ext_t ext;
    const fy_udp_sack_ext_t *e = NULL;
    if (h->len >= sizeof(ext.nbits)) {
        memcpy(&ext.nbits, p, sizeof(ext.nbits));
        if (ext.nbits <= FY_UDP_SACK_EXT_BITS && ext.nbits % 8 == 0 &&
            h->len == sizeof(ext.nbits) + ext.nbits / 8) {
            memcpy(ext.bits, p + sizeof(ext.nbits), ext.nbits / 8);
            e = &ext;
        } else {
            iface->drops_malformed++;
            return 0;
        }
    }
    if (h->flags & FY_UDP_F_ACK)
        fy_udp_process_ack(c, h, 1, e);
    return 0;
}

/* The ACK of an in-order AM: its processing (freeing what it ACKs, the RTT sample, the
 * window) is kept for the start of the next progress pass.  A busy-polling application
 * answers between two passes - the answer's send no longer waits for ~320 instructions of
 * bookkeeping (callgrind, 8 B ping-pong), which then run while the worker waits for the
 * next datagram.  Anything else that reads the window first settles it (fy_udp_ack_settle),
 * as does the next datagram received, so ACKs are still processed in order.  It is processed
 * as of its arrival time: the application's time between two passes (seconds, for one that
 * computes without a progress thread) never enters the RTT sample. */
void fy_udp_ack_settle_now(fy_udp_iface_t *iface)
{
    fy_udp_conn_t *c = iface->dack_conn;
    iface->dack_conn = NULL;
    if (fy_udp_conn_alive(c)) {
        uint64_t now = iface->now;
        iface->now = iface->dack_ns;
        fy_udp_process_ack(c, &iface->dack_hdr, 0, NULL);
        iface->now = now;
    }
}
