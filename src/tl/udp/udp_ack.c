/*
 * udp_ack.c - when the receiving end of a connection sends its explicit ACKs.
 *
 * Most ACKs ride on data going the other way (piggy-backing, udp_tx.c).  A connection owed
 * one is put on the iface's ACK list; at the end of a progress pass the list is walked and an
 * explicit ACK (an unsequenced datagram with the SACK bitmap extension when segments wait
 * out of order) leaves for each connection whose ACK is due: at once when something must be
 * reported (a hole, a duplicate, ACK_EVERY segments or ACK_BYTES bytes unacknowledged), else
 * after ACK_PASSES passes or ACK_DELAY, and part-way through a large message in order only
 * every FY_UDP_ACK_MID segments.  Fewer ACKs leave the sender's window open just as well and
 * leave the link to data.
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
 * with holes below: what the sender's loss detection needs - a new hole, a hole filled, every
 * 4th segment above a hole, a duplicate resend - sets ack_now and goes at once; the rest waits
 * here.  (Held to "no hole", a receiver sleeping between datagrams sent an ACK per wake-up all
 * through a repair: 58,000-78,000 ACK datagrams, 7-12 MB, per 6 s run at 1-10% loss on that
 * link, against 21,000-35,000 and 2-6 MB.) */
static inline int ack_may_wait(const fy_udp_conn_t *c)
{
    return c->rx_active && c->ack_unsent < FY_UDP_ACK_MID && !c->dsack_pending;
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
        fy_list_del(&c->ack_link);
        c->ack_pending = c->ack_now = 0;
        c->ack_unsent = 0;
        c->ack_unsent_bytes = 0;
        if (c->peer_id != 0) {
            /* The bitmap reaches the highest segment held; one too large for the priority
             * channel goes on the data channel (cut to its size if need be). */
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
    }
    return due;
}
