/*
 * udp_sack.c - the receiver's account of its window for the sender: the stash of segments
 * held out of order, the SACK bitmaps that report it, and the segments that came early.
 *
 * A segment out of order is either news of a loss (the ones before it, sent earlier through
 * the same queue, did not come) or it overtook them (a duplicate the network made past a
 * queue, another path).  The sender's loss detection (RACK, udp_retx.c) cannot tell the two
 * apart: it reads any arrival as proof that what was sent before it is lost.  The receiver
 * can - the overtaker came sooner, for the send time it carries, than the flow of arrivals
 * before it - and keeps it from the sender's loss detection: no echo of its send time, no
 * SACK bit, no ACK at once (udp_rx.c, rx_dgram), until the flow passes it.
 */
#include <string.h>

#include "tl/udp/udp.h"

/* Sooner than the flow by this much (us), for its send time, a segment overtook a queue. */
#define FY_UDP_EARLY_US 250

void fy_udp_stash_clear(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    if (c->stash == NULL)
        return;
    for (uint32_t i = 0; i < iface->wsize && c->nstash > 0; i++) {
        fy_udp_rxbuf_t *b = c->stash[i];
        if (b != NULL) {
            fy_mpool_put(&iface->ch[b->chan].rxpool, b);
            c->stash[i] = NULL;
            c->nstash--;
        }
    }
    c->nearly = 0;
}

/* The SACK bitmaps report what the stash holds but the segments that came early (rx_dgram):
 * their originals are still in the queue they overtook, so to the sender they are still in
 * flight, and a hole below them is no hole (reported held, they let the sender put more
 * into that queue than its window - the original is there still). */
static inline int sack_held(const fy_udp_conn_t *c, uint32_t seq)
{
    const fy_udp_rxbuf_t *b = c->stash[seq & (c->iface->wsize - 1)];
    return b != NULL && !b->early;
}

size_t fy_udp_sack_ext(const fy_udp_conn_t *c, fy_udp_sack_ext_t *ext)
{
    uint32_t span = c->stash_top - c->rcv_nxt; /* bits needed: seq rcv_nxt+1 .. stash_top */
    uint32_t hi = 0;
    if (c->nstash == c->nearly || span <= 32)
        return 0;
    span = FY_MIN(span, (uint32_t)FY_UDP_SACK_EXT_BITS);
    span = FY_MIN(span, c->iface->wsize - 1);
    span = (span + 7) & ~7u;
    memset(ext->bits, 0, span / 8);
    for (uint32_t i = 0; i < span; i++)
        if (sack_held(c, c->rcv_nxt + 1 + i)) {
            ext->bits[i / 8] |= (uint8_t)(1u << (i % 8));
            hi = i + 1;
        }
    if (hi <= 32)
        return 0; /* (the header's 32 bits say it all) */
    ext->nbits = (hi + 7) & ~7u;
    return sizeof(ext->nbits) + ext->nbits / 8;
}

uint32_t fy_udp_sack_bits(const fy_udp_conn_t *c)
{
    uint32_t bits = 0;
    for (uint32_t i = 0; i < 32 && i + 1 < c->iface->wsize; i++)
        if (sack_held(c, c->rcv_nxt + 1 + i))
            bits |= 1u << i;
    return bits;
}

/* Did this arrival overtake the flow of the segments before it?  The flow's delay (our
 * clock at arrival minus the send time it carries) is that of the last arrival that was not
 * sooner than it by FY_UDP_EARLY_US.  A datagram that went round a queue - a duplicate the
 * network made past its queue, another path - comes sooner than the flow by the queue's
 * wait; the flow itself goes on behind it.  What comes after a lost segment is never sooner:
 * it waited behind the one before it in the same queue.  Two things make the flow itself
 * come sooner, and both are seen at the next arrival, which then continues the sooner one (the
 * next sequence number, about the same delay) and becomes the flow: a queue that drained
 * while the sender paused, and a new send batch (a batch carries one send time, so the
 * delays within it grow as a bottleneck spaces its datagrams; the next batch starts lower).
 * Isolated duplicates never continue one another (two neighbours both duplicated and
 * arriving in a row excepted).  So a loss is judged at most one arrival later. */
int fy_udp_arrival_sooner(fy_udp_arrival_t *a, uint32_t seq, uint32_t owd)
{
    int32_t by = (int32_t)(a->ref - owd), from_prev = (int32_t)(a->prev - owd);
    int sooner = a->ref != 0 && by > FY_UDP_EARLY_US &&
                 !(a->prev_sooner && seq == a->prev_seq + 1 && from_prev <= FY_UDP_EARLY_US &&
                   from_prev >= -FY_UDP_EARLY_US);
    if (!sooner)
        a->ref = owd;
    a->prev = owd;
    a->prev_seq = seq;
    a->prev_sooner = (uint8_t)(by > FY_UDP_EARLY_US);
    return sooner;
}

/* A segment of the flow out of order: the originals of the early segments below it were
 * sent before it, in the same queue, and have not come - they were lost, and the early
 * copies are ordinary segments held from now on (SACKed, so that the sender does not resend
 * them).  Each sequence number is looked at once. */
void fy_udp_early_passed(fy_udp_conn_t *c, uint32_t seq)
{
    uint32_t s = fy_udp_seq_diff(c->early_scan, c->rcv_nxt) > 0 ? c->early_scan : c->rcv_nxt + 1;
    for (; c->nearly != 0 && fy_udp_seq_diff(s, seq) < 0; s++) {
        fy_udp_rxbuf_t *b = c->stash[s & (c->iface->wsize - 1)];
        if (b != NULL && b->early) {
            b->early = 0;
            c->nearly--;
        }
    }
    if (fy_udp_seq_diff(seq, c->early_scan) > 0)
        c->early_scan = seq;
}
