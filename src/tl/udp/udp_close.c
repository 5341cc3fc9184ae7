/*
 * udp_close.c - closing an ep without resetting its peer, and reclaiming passive connections.
 *
 * One connection serves a pair of ifaces in both directions, so the peer's endpoint to us
 * usually rides on the connection our endpoint opened (or the other way round).  ep_destroy
 * therefore keeps a healthy connection, passive, as if the peer had opened it, cancelling only
 * what belongs to the caller; what still reads the caller's memory forbids it (keepable()).
 * A passive connection nobody takes up is reclaimed when idle (FERRY_UDP_PASSIVE_IDLE, the
 * live timer in udp_live.c): quietly, a peer that still uses it gets a RESET.  Both bound what
 * a peer, or a forger with a valid cookie, can make us keep.  docs/udp.md, Close.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"

/* An idle connection a peer opened and proto never adopted: drop it quietly (a peer that
 * still uses it gets a RESET). */
void fy_udp_conn_reclaim(fy_udp_conn_t *c)
{
    if (c->owned)
        return;
    fy_udp_conn_fail(c, FERRY_ERR_CANCELED, 0);
}

/* Can the connection outlive its owner's ep?  Only when what stays of its send side reads no
 * memory of the caller's and answers nobody: in the window and the queue, segments and
 * messages with a copy of their own; a zero-copy message not yet begun is cancelled, one
 * part-way through (or an RMA, or a GET answer the peer waits for) means no. */
static int keepable(const fy_udp_conn_t *c)
{
    const fy_udp_iface_t *iface = c->iface;
    const fy_list_t *e;
    if (!fy_udp_conn_alive(c) || c->peer_id == 0 || c->in_fail_list ||
        (c->state == FY_UDP_CONN_CONNECTING && !c->verifying) || !fy_list_is_empty(&c->rma_fifo) ||
        iface->npassive >= iface->opts->max_passive)
        return 0;
    for (uint32_t s = c->snd_una; s != c->snd_nxt; s++) {
        const fy_udp_seg_t *seg = c->win[s & (iface->wsize - 1)];
        if (seg != NULL && seg->frag != NULL && seg->frag->bounce == NULL)
            return 0;
    }
    fy_list_for_each(e, &c->sendq)
    {
        const fy_udp_pend_t *p = fy_container_of(e, fy_udp_pend_t, link);
        const fy_udp_frag_t *f = (const fy_udp_frag_t *)p;
        if (p->kind == FY_UDP_PEND_FRAG && f->bounce == NULL &&
            (f->next_off != 0 || f->outstanding != 0 || f->type != FY_UDP_T_AM_CHUNK))
            return 0;
    }
    return 1;
}

/* Close, keeping the connection: the peer's endpoint to us shares it (one stream per pair
 * of ifaces), and may still be flushing or sending; dropping it would reset the peer.  The
 * connection becomes passive, as if the peer had opened it, and is reclaimed when idle
 * (FERRY_UDP_PASSIVE_IDLE) or taken up again by a new ep of ours to that peer (then verified:
 * the peer's end may have gone meanwhile). */
static void release(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    fy_list_t keep, *e;
    fy_list_init(&keep);
    if (c->verifying) { /* (nothing of the new owner was numbered yet) */
        c->state = FY_UDP_CONN_CONNECTED;
        c->verifying = 0;
        c->got_conn_ack = 1;
        fy_udp_hs_end(c);
    }
    while ((e = fy_list_pop_head(&c->sendq)) != NULL) {
        fy_udp_pend_t *p = fy_container_of(e, fy_udp_pend_t, link);
        if (p->kind == FY_UDP_PEND_FLUSH) {
            fy_udp_flush_t *fl = (fy_udp_flush_t *)p;
            fl->comp->cb(fl->comp, FERRY_ERR_CANCELED);
            fy_mpool_put(&iface->flush_pool, fl);
        } else if (p->kind == FY_UDP_PEND_FRAG && ((fy_udp_frag_t *)p)->bounce == NULL) {
            fy_udp_frag_t *f = (fy_udp_frag_t *)p;
            f->queued = 0;
            f->result = FERRY_ERR_CANCELED;
            fy_udp_frag_finish(iface, f);
        } else {
            fy_list_add_tail(&keep, e);
        }
    }
    while ((e = fy_list_pop_head(&keep)) != NULL)
        fy_list_add_tail(&c->sendq, e);
    while ((e = fy_list_pop_head(&c->flushq)) != NULL) {
        fy_udp_flush_t *fl = fy_container_of(e, fy_udp_flush_t, pend.link);
        fl->comp->cb(fl->comp, FERRY_ERR_CANCELED);
        fy_mpool_put(&iface->flush_pool, fl);
    }
    c->sticky = FERRY_OK;
    c->owned = 0;
    c->super.owner = NULL;
    c->released = 1;
    fy_udp_passive_count(c, 1);
    fy_udp_ready_add(c);
}

void fy_udp_ep_destroy(fy_tl_ep_t *ep)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    if (c == NULL || c->state == FY_UDP_CONN_CLOSED)
        return;
    fy_udp_ack_settle(c->iface); /* (what is still in the window decides) */
    if (fy_udp_stats_wanted(c->iface))
        fy_udp_conn_print(c, stderr);
    if (c->owned && keepable(c)) {
        release(c);
        return;
    }
    fy_udp_conn_fail(c, FERRY_ERR_CANCELED, 0); /* still owned: it stays for fy_udp_conn_zombie() */
    c->owned = 0;
    fy_udp_conn_zombie(c->iface, c);
}
