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

/* Sooner than the flow by this much (us), for its send time, a segment overtook a queue ... */
#define FY_UDP_EARLY_US 250
/* ... and this many sequence numbers above the flow's highest. */
#define FY_UDP_EARLY_GAP 8

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
 * wait, and ahead of it by the segments in that queue; the flow itself goes on behind it.
 * What comes after a lost segment is never sooner: it waited behind the one before it in the
 * same queue.  Two things make the flow itself come sooner: a queue that drained while the
 * sender paused, and a new send batch (a batch carries one send time, so the delays within
 * it grow as a bottleneck spaces its datagrams; the next batch starts lower by up to the
 * batch's length).  Such an arrival is a few sequence numbers at most above the flow's
 * highest (those lost between), so only one more than FY_UDP_EARLY_GAP above it counts; and
 * the next arrival continues it (the next sequence number, about the same delay) and
 * becomes the flow.  Isolated duplicates never continue one another (two neighbours both
 * duplicated and arriving in a row excepted).  So a loss is judged at most one arrival
 * later, and only after more than FY_UDP_EARLY_GAP lost in a row. */
int fy_udp_arrival_sooner(fy_udp_arrival_t *a, uint32_t seq, uint32_t owd)
{
    int32_t by = (int32_t)(a->ref - owd), from_prev = (int32_t)(a->prev - owd);
    int sooner = a->ref != 0 && by > FY_UDP_EARLY_US &&
                 fy_udp_seq_diff(seq, a->top) > FY_UDP_EARLY_GAP &&
                 !(a->prev_sooner && seq == a->prev_seq + 1 && from_prev <= FY_UDP_EARLY_US &&
                   from_prev >= -FY_UDP_EARLY_US);
    if (!sooner) {
        if (a->ref == 0 || fy_udp_seq_diff(seq, a->top) > 0)
            a->top = seq;
        a->ref = owd;
    }
    a->prev = owd;
    a->prev_seq = seq;
    a->prev_sooner = (uint8_t)(by > FY_UDP_EARLY_US);
    return sooner;
}

void fy_udp_early_add(fy_udp_conn_t *c, fy_udp_rxbuf_t *b, uint32_t seq)
{
    b->early = 1;
    b->early_next = c->early_head;
    c->early_head = seq;
    c->nearly++;
    c->rx_early++;
}

/* Take the early one stashed as seq (there, and early) off the list; b is its buffer. */
static void early_off(fy_udp_conn_t *c, fy_udp_rxbuf_t *b, uint32_t seq)
{
    uint32_t mask = c->iface->wsize - 1;
    if (c->early_head == seq) {
        c->early_head = b->early_next;
    } else {
        fy_udp_rxbuf_t *p = c->stash[c->early_head & mask];
        for (uint32_t n = c->nearly; n > 1 && p->early_next != seq; n--)
            p = c->stash[p->early_next & mask];
        p->early_next = b->early_next;
    }
    b->early = 0;
    c->nearly--;
}

void fy_udp_early_unlink(fy_udp_conn_t *c, uint32_t seq)
{
    fy_udp_rxbuf_t *b = c->stash[seq & (c->iface->wsize - 1)];
    if (b != NULL && b->early)
        early_off(c, b, seq);
}

/* A segment of the flow arrived: the originals of the early ones sent before it (an earlier
 * send time, or the same batch and a lower sequence number) would have come before it, in
 * the same queue, and have not - they were lost, and the early copies are ordinary segments
 * held from now on (SACKed, so that the sender does not resend them).  Resends count: one
 * sent after an early one's original proves it lost as well.  The list is short (what
 * overtook one queue). */
void fy_udp_early_passed(fy_udp_conn_t *c, uint32_t tsval, uint32_t seq)
{
    uint32_t mask = c->iface->wsize - 1, s = c->early_head;
    for (uint32_t n = c->nearly; n > 0; n--) {
        fy_udp_rxbuf_t *b = c->stash[s & mask];
        uint32_t t, next = b->early_next;
        memcpy(&t, b->data + FY_UDP_D_TSVAL, sizeof(t));
        if ((int32_t)(t - tsval) < 0 || (t == tsval && fy_udp_seq_diff(s, seq) < 0))
            early_off(c, b, s);
        s = next;
    }
}
