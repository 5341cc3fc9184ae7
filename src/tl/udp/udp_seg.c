/*
 * udp_seg.c - segments and fragments: where they come from and how they end.
 *
 * A segment (one datagram's worth: the compact header, room for an ACK block, the type
 * header and, for a copied send, its data inline) comes from one of three pools by the size
 * it must hold - a bare descriptor for a chunk of a large fragment that stays in the caller's
 * memory, a small one, a large one - so a busy connection never calls malloc.  A fragment is
 * one send the window cuts into chunks; it completes (its callback, or its RMA operation's
 * share) when the last chunk is made and ACKed.  The window array, one pointer per sequence
 * number in flight, is attached on demand and given back when the window empties, so an
 * idle connection holds none (the 10,000-peer goal: udp.md, Scale).  Apart from udp_tx.c,
 * which decides what leaves and when.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/udp/udp.h"

fy_udp_seg_t *fy_udp_seg_alloc(fy_udp_iface_t *iface, size_t inline_len)
{
    uint8_t pool;
    fy_udp_seg_t *seg;
    if (inline_len == 0)
        pool = FY_UDP_POOL_DESC;
    else if (inline_len <= iface->seg_pool_size[FY_UDP_POOL_SMALL])
        pool = FY_UDP_POOL_SMALL;
    else if (inline_len <= iface->seg_pool_size[FY_UDP_POOL_LARGE])
        pool = FY_UDP_POOL_LARGE;
    else
        return NULL;
    seg = fy_mpool_get(&iface->seg_pool[pool]);
    if (seg == NULL)
        return NULL;
    seg->pend.kind = FY_UDP_PEND_SEG;
    fy_list_init(&seg->pend.link);
    fy_list_init(&seg->rlink);
    fy_hotel_room_init(&seg->timer.room);
    seg->timer.kind = FY_UDP_TIMER_SEG;
    seg->frag = NULL;
    seg->tries = 0;
    seg->sacked = 0;
    seg->pool = pool;
    return seg;
}

/* ---- the window array, on demand ------------------------------------------------------ */
/* An idle connection holds no window array (wsize pointers, 32 KiB at the default window):
 * it is attached before the first segment takes a sequence number and released when the
 * window is empty again.  Every slot of an empty window is NULL (an ACK clears the slots
 * it passes), so a released array goes to the iface's few spares as it is. */
__attribute__((noinline)) int fy_udp_win_attach(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    if (iface->nwin_spare != 0)
        c->win = iface->win_spare[--iface->nwin_spare];
    else
        c->win = calloc(iface->wsize, sizeof(*c->win));
    return c->win != NULL;
}

void fy_udp_win_release(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    if (c->win == NULL || c->snd_una != c->snd_nxt || !fy_list_is_empty(&c->sendq))
        return;
    if (iface->nwin_spare < FY_UDP_WIN_SPARE)
        iface->win_spare[iface->nwin_spare++] = c->win;
    else
        free(c->win);
    c->win = NULL;
}

void fy_udp_win_spare_free(fy_udp_iface_t *iface)
{
    while (iface->nwin_spare != 0)
        free(iface->win_spare[--iface->nwin_spare]);
}

void fy_udp_seg_free(fy_udp_iface_t *iface, fy_udp_seg_t *seg)
{
    fy_mpool_put(&iface->seg_pool[seg->pool], seg);
}

void fy_udp_seg_init_hdr(fy_udp_conn_t *conn, fy_udp_seg_t *seg, uint8_t type, uint8_t am_id,
                         size_t xhdr_len, size_t dlen)
{
    /* dst_id, check and seq are filled when the segment takes its sequence number (the
     * peer's id and token may not be known yet), flags, tsval and the ACK when it leaves. */
    fy_udp_dhdr_t h;
    (void)conn;
    memset(&h, 0, sizeof(h));
    h.type = type;
    memcpy(seg->hdr, &h, sizeof(h));
    if (type == FY_UDP_T_AM) {
        fy_udp_am_t a = {.am_id = am_id};
        memcpy(fy_udp_seg_xhdr(seg), &a, sizeof(a));
    }
    seg->hlen = (uint16_t)(FY_UDP_DHDR_LEN + xhdr_len);
    seg->dlen = (uint32_t)dlen;
}

fy_udp_frag_t *fy_udp_frag_alloc(fy_udp_iface_t *iface)
{
    fy_udp_frag_t *f = fy_mpool_get(&iface->frag_pool);
    if (f == NULL)
        return NULL;
    memset(f, 0, offsetof(fy_udp_frag_t, iov));
    f->pend.kind = FY_UDP_PEND_FRAG;
    fy_list_init(&f->pend.link);
    f->bounce = NULL;
    f->result = FERRY_OK;
    return f;
}

/* A fragment is done when every chunk was made and ACKed. */
void fy_udp_frag_finish(fy_udp_iface_t *iface, fy_udp_frag_t *f)
{
    if (f->queued || f->outstanding != 0)
        return;
    if (f->comp != NULL) {
        f->comp->cb(f->comp, f->result);
        iface->events++;
    }
    if (f->op != NULL) {
        fy_udp_rma_op_t *op = f->op;
        if (f->result != FERRY_OK && op->status == FERRY_OK)
            op->status = f->result;
        f->op = NULL;
        if (--op->pending == 0)
            fy_udp_rma_op_done(f->conn, op);
    }
    if (f->bounce != NULL)
        fy_udp_seg_free(iface, f->bounce);
    fy_mpool_put(&iface->frag_pool, f);
}

void fy_udp_frag_release_seg(fy_udp_iface_t *iface, fy_udp_frag_t *f)
{
    f->outstanding--;
    fy_udp_frag_finish(iface, f);
}
