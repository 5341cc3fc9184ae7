/*
 * shm_ep.c - shared-memory endpoints: creation from a peer's address, active messages
 * (short, buffered, zero-copy: through a cell buffer, the outbox, a pull or a push), flush.
 *
 * The small-message path is a claim, a few stores and a release store into the peer's ring
 * (shm.h): no system call, no lock, no allocation.  One flag (ep->blocked) keeps every rare
 * state — a failed peer, a zero-copy probe, a pushed transfer — off that path.
 *
 * Zero-copy AMs are pulled by the receiver with process_vm_readv (single copy).  Whether the
 * receiver may read our memory is only known when it tries, so the first zero-copy send of
 * an ep is a probe: until its answer comes back the ep takes no other send (returning
 * FERRY_ERR_NO_RESOURCE), so that if the receiver is refused and asks for the data to be
 * pushed instead, the pushed message still arrives in order.  Pushing copies the message
 * through the peer's cell buffers in chunks, continued from progress as cells free up; the
 * ep again takes nothing else until the last chunk is in.  FERRY_SHM_CMA=n on either side
 * makes every zero-copy send a push from the start.
 *
 * Operations that complete later (pulls, pushes, atomics answered by the target, flushes)
 * sit on the ep's list in issue order, so a flush completes when it reaches the head; that
 * list, their completion and the pull slots that guard a cancelled pull are shm_op.c.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tl/shm/shm.h"
#include "util/clock.h"
#include "util/log.h"

static uint32_t shm_next_token; /* names eps of this process in pushed chunks */

/* ---- create / destroy ------------------------------------------------------------------- */

ferry_status_t fy_shm_ep_create(fy_tl_iface_t *tl_iface, const void *dev_addr,
                                const void *iface_addr, fy_tl_ep_t **ep_p)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    if (dev_addr == NULL || iface_addr == NULL)
        return FERRY_ERR_INVALID_ADDR;
    if (!fy_shm_iface_is_reachable(tl_iface, dev_addr, iface_addr))
        return FERRY_ERR_UNREACHABLE;
    shm_iface_addr_t addr;
    memcpy(&addr, iface_addr, sizeof(addr));
    shm_peer_t *peer;
    ferry_status_t st = fy_shm_peer_get(iface, &addr, &peer);
    if (st != FERRY_OK)
        return st;
    if (peer->status != FERRY_OK)
        return FERRY_ERR_UNREACHABLE;
    shm_ep_t *ep;
    if (posix_memalign((void **)&ep, 64, sizeof(*ep)) != 0)
        return FERRY_ERR_NO_MEMORY;
    memset(ep, 0, sizeof(*ep));
    ep->super.iface = tl_iface;
    ep->cells = peer->cells;
    ep->tail = &peer->hdr->tail;
    ep->mask = peer->mask;
    ep->cell_shift = peer->cell_shift;
    ep->inline_max = (uint32_t)((1u << peer->cell_shift) - SHM_CELL_HDR);
    ep->bcopy_size = peer->bcopy_size;
    ep->short_max =
        (uint32_t)FY_MIN((size_t)ep->inline_max, iface->md->opts.cell_size - SHM_CELL_HDR);
    /* as iface_query's max_bcopy: room to align the copy in the buffer */
    ep->bcopy_max =
        (uint32_t)(FY_MIN((size_t)ep->bcopy_size, iface->md->opts.bcopy_size) - SHM_PAD_MASK);
    ep->bufs = peer->bufs;
    ep->owner = iface->owner;
    ep->iface = iface;
    ep->peer = peer;
    peer->refs++;
    ep->token = __atomic_add_fetch(&shm_next_token, 1, __ATOMIC_RELAXED);
    ep->status = FERRY_OK;
    fy_list_init(&ep->ops);
    fy_list_init(&ep->push_link);
    ep->stats.window_max = peer->mask + 1;

    int self = addr.pid == (int32_t)getpid();
    if (self) {
        ep->cma_ok = 1; /* our own memory: plain copies */
    } else if (iface->md->opts.cma) {
        /* Can we reach the peer with cross-memory attach?  Read its segment's magic. */
        uint64_t magic = 0;
        struct iovec l = {&magic, sizeof(magic)};
        struct iovec r = {(void *)(uintptr_t)peer->hdr->base, sizeof(magic)};
        ep->cma_ok = fy_shm_cma_copy(addr.pid, &l, 1, &r, 1, 0) == 0 && magic == SHM_SEG_MAGIC;
        if (!ep->cma_ok)
            fy_info("cross-memory attach to process %d refused: put/get need shared memory, "
                    "zero-copy messages are pushed",
                    (int)addr.pid);
    }
    if (self || (iface->md->opts.cma && ep->cma_ok && !(addr.flags & SHM_ADDR_F_NO_CMA)))
        ep->zc_mode = self ? SHM_ZC_PULL : SHM_ZC_UNKNOWN;
    else
        ep->zc_mode = SHM_ZC_PUSH;
    fy_list_add_tail(&iface->eps, &ep->link);
    *ep_p = &ep->super;
    return FERRY_OK;
}

/* Tell the peer that a half-pushed message will never be completed. */
static void push_abort(shm_ep_t *ep, const shm_op_t *op)
{
    if (op->offset == 0)
        return;
    shm_frag_hdr_t fh = {((ep->owner >> SHM_OWNER_SHIFT) << 32) | ep->token, op->total, op->offset};
    fy_shm_send_ctl(ep->iface, ep->peer, SHM_CELL_FRAG, SHM_FRAG_ABORT, &fh, sizeof(fh), 0);
}

void fy_shm_ep_destroy(fy_tl_ep_t *tl_ep)
{
    if (tl_ep == NULL)
        return;
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    shm_iface_t *iface = ep->iface;
    if (ep->push_op != NULL)
        push_abort(ep, ep->push_op);
    fy_list_t ops;
    fy_shm_ep_detach_ops(ep, &ops);
    fy_list_del(&ep->link);
    if (--ep->peer->refs == 0 && ep->peer->status != FERRY_OK)
        iface->pending_reap = 1; /* its fd and mapping go at the next progress */
    free(ep);
    fy_shm_ops_complete_detached(iface, &ops, FERRY_ERR_CANCELED);
}

ferry_status_t fy_shm_ep_flush(fy_tl_ep_t *tl_ep, fy_tl_comp_t *comp)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    if (ep->blocked & SHM_EP_FAILED)
        return ep->status;
    /* A peer that died since the last liveness check: say so now rather than vouch for what
     * was sent to it.  Looking costs a system call (its pidfd), so only when something was
     * sent since a flush last found it alive. */
    uint64_t mark = ep->stats.tx_msgs + ep->stats.tx_bytes;
    if (mark != ep->flush_mark || !fy_list_is_empty(&ep->ops) || ep->peer->status != FERRY_OK) {
        if (!fy_shm_peer_check(ep->iface, ep->peer))
            return FERRY_ERR_NOT_CONNECTED;
        ep->flush_mark = mark;
    }
    /* Puts into mapped memory are plain stores: make them visible before we say done. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (fy_list_is_empty(&ep->ops))
        return FERRY_OK;
    if (comp == NULL)
        return FERRY_ERR_NO_RESOURCE; /* not yet: progress and ask again (tl.h) */
    if (fy_shm_op_new(ep, SHM_OP_FLUSH, comp) == NULL)
        return FERRY_ERR_NO_RESOURCE;
    return FERRY_INPROGRESS;
}

ferry_status_t fy_shm_ep_get_stats(fy_tl_ep_t *tl_ep, ferry_ep_stats_t *stats)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    *stats = ep->stats;
    stats->window_used = fy_list_length(&ep->ops);
    return FERRY_OK;
}

/* ---- active messages -------------------------------------------------------------------- */

static ferry_status_t blocked_status(const shm_ep_t *ep)
{
    return (ep->blocked & SHM_EP_FAILED) ? ep->status : FERRY_ERR_NO_RESOURCE;
}

ferry_status_t fy_shm_ep_full(shm_ep_t *ep)
{
    fy_shm_peer_full(ep->iface, ep->peer);
    return ep->peer->status == FERRY_OK ? FERRY_ERR_NO_RESOURCE : FERRY_ERR_NOT_CONNECTED;
}

/* A stream of sends (nothing received since our last one): ask for the line of the cell four
 * ahead now, so that about four transfers are in flight instead of each CAS waiting for its
 * own (8-byte rate here: two ahead 12-13 M/s, four ahead 19-22 M/s).  Not in a ping-pong,
 * where taking the line early only delays the peer. */
#define SHM_STREAM_AHEAD 4
static inline void stream_prefetch(shm_ep_t *ep, uint32_t ticket)
{
    uint64_t rx = ep->iface->stats.rx_msgs;
    if (rx == ep->last_rx)
        shm_prefetchw(shm_cell_at(ep->cells, ep->cell_shift, ep->mask, ticket + SHM_STREAM_AHEAD));
    ep->last_rx = rx;
}

ferry_status_t fy_shm_am_short(fy_tl_ep_t *tl_ep, uint8_t id, const struct iovec *iov,
                               size_t iovcnt)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    if (FY_UNLIKELY(ep->blocked))
        return blocked_status(ep);
    size_t len = fy_iov_total(iov, iovcnt);
    if (FY_UNLIKELY(len > ep->short_max || iovcnt > SHM_MAX_IOV || id > FY_TL_AM_ID_MAX)) {
        /* beyond what we announced: refused (tl.h, LIMITS) */
        if (len > ep->iface->md->opts.cell_size - SHM_CELL_HDR || iovcnt > SHM_MAX_IOV ||
            id > FY_TL_AM_ID_MAX)
            return FERRY_ERR_INVALID_PARAM;
        return fy_shm_am_bcopy(tl_ep, id, iov, iovcnt); /* the peer's cells are smaller */
    }
    uint32_t t;
    int wake = 0;
    shm_cell_t *c =
        shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
    if (FY_UNLIKELY(c == NULL))
        return fy_shm_ep_full(ep);
    shm_cell_hdr(c, SHM_CELL_SHORT, id, 0, len);
    shm_iov_gather(c->data, iov, iovcnt);
    shm_ring_publish(c, ep->owner, t);
    stream_prefetch(ep, t);
    /* A message that used the cell's second line: take the next cell's second line now (the
     * receiver's adjacent-line prefetch may hold it), so the next send does not wait for it
     * before its publish can be seen; no poll watches that line.  64 B one-way 0.40-0.44 ->
     * 0.34-0.36 us here. */
    if (len > 64 - SHM_CELL_HDR)
        shm_prefetchw((char *)shm_cell_at(ep->cells, ep->cell_shift, ep->mask, t + 1) + 64);
    if (FY_UNLIKELY(wake))
        fy_shm_peer_wake(ep->iface, ep->peer);
    ep->stats.tx_msgs++;
    ep->stats.tx_bytes += len;
    return FERRY_OK;
}

ferry_status_t fy_shm_am_bcopy(fy_tl_ep_t *tl_ep, uint8_t id, const struct iovec *iov,
                               size_t iovcnt)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    if (FY_UNLIKELY(ep->blocked))
        return blocked_status(ep);
    size_t len = fy_iov_total(iov, iovcnt);
    if (FY_UNLIKELY(len > ep->bcopy_max || iovcnt > SHM_MAX_IOV || id > FY_TL_AM_ID_MAX))
        return FERRY_ERR_INVALID_PARAM;
    uint32_t t;
    int wake = 0;
    shm_cell_t *c =
        shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
    if (FY_UNLIKELY(c == NULL))
        return fy_shm_ep_full(ep);
    if (len <= ep->inline_max) {
        shm_cell_hdr(c, SHM_CELL_SHORT, id, 0, len);
        shm_iov_gather(c->data, iov, iovcnt);
    } else {
        char *b = shm_cell_buf(ep, t);
        unsigned pad = shm_copy_pad((uintptr_t)b, iov, iovcnt, len);
        if (len + pad > ep->bcopy_size)
            pad = 0; /* no room to align: a full buffer */
        shm_cell_hdr(c, SHM_CELL_BCOPY, id, pad, len);
        shm_iov_gather(b + pad, iov, iovcnt);
    }
    shm_ring_publish(c, ep->owner, t);
    stream_prefetch(ep, t);
    if (FY_UNLIKELY(wake))
        fy_shm_peer_wake(ep->iface, ep->peer);
    ep->stats.tx_msgs++;
    ep->stats.tx_bytes += len;
    return FERRY_OK;
}

/* Copy n bytes at offset off of the message [hdr | iov...] of op into dst. */
static void op_copy_out(const shm_op_t *op, size_t off, char *dst, size_t n)
{
    if (off < op->hdr_len) {
        size_t k = FY_MIN(n, op->hdr_len - off);
        memcpy(dst, op->hdr + off, k);
        dst += k;
        n -= k;
        off = 0;
    } else {
        off -= op->hdr_len;
    }
    for (size_t i = 0; i < op->iovcnt && n > 0; i++) {
        if (off >= op->iov[i].iov_len) {
            off -= op->iov[i].iov_len;
            continue;
        }
        size_t k = FY_MIN(n, op->iov[i].iov_len - off);
        memcpy(dst, (const char *)op->iov[i].iov_base + off, k);
        dst += k;
        n -= k;
        off = 0;
    }
}

/* Push chunks of op into the peer's ring while there is room.  1 when all are in. */
static int push_some(shm_ep_t *ep, shm_op_t *op)
{
    do {
        uint32_t t;
        int wake = 0;
        shm_cell_t *c =
            shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
        if (c == NULL) {
            fy_shm_peer_full(ep->iface, ep->peer);
            return 0;
        }
        size_t n = FY_MIN((size_t)ep->bcopy_size, op->total - op->offset);
        shm_frag_hdr_t fh = {((ep->owner >> SHM_OWNER_SHIFT) << 32) | ep->token, op->total,
                             op->offset};
        memcpy(c->data, &fh, sizeof(fh));
        op_copy_out(op, op->offset, shm_cell_buf(ep, t), n);
        shm_cell_hdr(c, SHM_CELL_FRAG, op->am_id, 0, n);
        shm_ring_publish(c, ep->owner, t);
        if (wake)
            fy_shm_peer_wake(ep->iface, ep->peer);
        op->offset += n;
    } while (op->offset < op->total);
    return 1;
}

static void push_start(shm_ep_t *ep, shm_op_t *op)
{
    op->type = SHM_OP_PUSH;
    op->offset = 0;
    op->probe = 0;
    ep->push_op = op;
    ep->blocked |= SHM_EP_PUSHING;
    fy_list_add_tail(&ep->iface->push_eps, &ep->push_link);
}

unsigned fy_shm_push_progress(shm_iface_t *iface)
{
    unsigned n = 0;
    fy_list_t *pos;
again:
    fy_list_for_each(pos, &iface->push_eps)
    {
        shm_ep_t *ep = fy_container_of(pos, shm_ep_t, push_link);
        shm_op_t *op = ep->push_op;
        if (!push_some(ep, op))
            continue;
        fy_list_del(&ep->push_link);
        ep->push_op = NULL;
        ep->blocked &= ~SHM_EP_PUSHING;
        n++;
        fy_shm_op_complete(op, FERRY_OK); /* may destroy eps: walk again */
        goto again;
    }
    return n;
}

/* ---- sending through the outbox (its slots: shm_obox.c) ------------------------------------ */

/* Describe to the receiver of a split message the pieces of iov from byte `cut` on. */
static void split_describe(shm_obox_split_t *sp, const struct iovec *iov, size_t iovcnt, size_t cut)
{
    uint32_t n = 0;
    for (size_t i = 0; i < iovcnt; i++) {
        size_t len = iov[i].iov_len;
        if (cut >= len) {
            cut -= len;
            continue;
        }
        sp->iov[n].addr = (uint64_t)(uintptr_t)iov[i].iov_base + cut;
        sp->iov[n++].len = len - cut;
        cut = 0;
    }
    sp->iovcnt = n;
}

/* Copy the first `n` bytes of the message's pieces into dst (the rest is the receiver's). */
static void split_gather(char *dst, const struct iovec *iov, size_t iovcnt, size_t n, size_t total)
{
    struct iovec v[SHM_MAX_IOV];
    size_t k = 0;
    for (size_t i = 0; i < iovcnt && n != 0; i++) {
        v[k].iov_base = iov[i].iov_base;
        v[k].iov_len = FY_MIN(iov[i].iov_len, n);
        n -= v[k++].iov_len;
    }
    fy_shm_obox_gather(dst, v, k, total);
}

/* The sender's share of a split message, in tenths: its streamed copy runs at about twice
 * the rate of the receiver's process_vm_readv (16 MiB, one-way, best of 60 under load ~9:
 * 1.03-1.38 ms at 7/10, 1.79-4.54 at 6/10, 2.90-5.59 at 5/10, unsplit 1.27-1.40). */
#define SHM_SPLIT_SENDER 7

/*
 * Send through the outbox: copy header and data into a slot, then announce it.  Returns 0 when
 * the outbox has no room (the caller pulls instead); otherwise 1 with *st set: FERRY_OK (sent,
 * and complete: the caller's memory is free), FERRY_INPROGRESS (split: complete when the
 * receiver has pulled its part) or the ring's back-pressure.
 *
 * A message of OUTBOX_SPLIT bytes of data or more to a peer that has pulled from us before is
 * split (shm.h, shm_obox_split_t): announced first, then the sender copies the first part
 * while the receiver pulls the rest, the cut on a page boundary of the slot.
 */
static int obox_send(shm_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                     const struct iovec *iov, size_t iovcnt, size_t total, fy_tl_comp_t *comp,
                     ferry_status_t *st)
{
    shm_iface_t *iface = ep->iface;
    /* Copy first and claim after, so that no other sender's message waits behind our copy in
     * the ring; a look at the tail cell first saves a copy that could not be announced. */
    uint32_t pos = __atomic_load_n(ep->tail, __ATOMIC_RELAXED);
    uint64_t state = __atomic_load_n(&shm_cell_at(ep->cells, ep->cell_shift, ep->mask, pos)->state,
                                     __ATOMIC_RELAXED);
    if ((int32_t)((uint32_t)state - pos) < 0) {
        *st = fy_shm_ep_full(ep);
        return 1;
    }
    uint64_t room = FY_ALIGN_UP((uint64_t)total, 64) + (total >= SHM_PAD_MIN ? 64 : 0);
    shm_obox_entry_t *e =
        fy_shm_obox_alloc(iface, SHM_OBOX_SLOT_HDR + room, ep->peer,
                          comp != NULL && (comp->flags & FY_TL_COMP_F_RX_COPIES) != 0);
    if (e == NULL) {
        iface->stats.obox_full++;
        return 0;
    }
    char *data = iface->obox + e->off + SHM_OBOX_SLOT_HDR;
    unsigned pad = shm_copy_pad((uintptr_t)(data + hdr_len), iov, iovcnt, total - hdr_len);
    data += pad;

    /* Split: an operation answered by the receiver's ZDONE, its pull slot guarding iov. */
    shm_op_t *op = NULL;
    size_t cut = total;
    if (total - hdr_len >= iface->md->opts.obox_split && ep->zc_mode == SHM_ZC_PULL &&
        comp != NULL && (op = fy_shm_op_new(ep, SHM_OP_PULL, comp)) != NULL) {
        if (fy_shm_pull_slot_get(iface, op)) {
            op->total = total;
            uintptr_t at = (uintptr_t)data + total / 10 * SHM_SPLIT_SENDER;
            cut = FY_MIN((size_t)(FY_ALIGN_UP(at, (uintptr_t)4096) - (uintptr_t)data), total);
            cut = FY_MAX(cut, hdr_len);
        } else {
            fy_shm_op_drop(op);
            op = NULL;
        }
    }
    if (op == NULL) { /* whole: copy first, claim after */
        if (hdr_len != 0)
            memcpy(data, hdr, hdr_len);
        fy_shm_obox_gather(data + hdr_len, iov, iovcnt, total);
    }

    uint32_t t;
    int wake = 0;
    shm_cell_t *c =
        shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
    if (c == NULL) { /* others filled the ring meanwhile: the slot is the last one taken */
        iface->obox_count--;
        if (op != NULL) {
            fy_shm_pull_slot_put(iface, op); /* never published */
            fy_shm_op_drop(op);
        }
        *st = fy_shm_ep_full(ep);
        return 1;
    }
    shm_obox_desc_t *d = (shm_obox_desc_t *)shm_cell_buf(ep, t);
    d->from = iface->addr;
    d->off = iface->obox_off + e->off + SHM_OBOX_SLOT_HDR + pad;
    d->len = total;
    d->gen = e->gen;
    unsigned flags = pad;
    size_t desc_len = sizeof(*d);
    if (op != NULL) {
        shm_obox_split_t *sp = (shm_obox_split_t *)(d + 1);
        sp->cookie = op->cookie;
        sp->cut = cut;
        sp->slot = op->pull_slot;
        sp->gen = op->pull_gen;
        split_describe(sp, iov, iovcnt, cut - hdr_len);
        flags |= SHM_OBOX_F_SPLIT;
        desc_len += sizeof(*sp);
    }
    shm_cell_hdr(c, SHM_CELL_OUTBOX, id, flags, desc_len);
    shm_ring_publish(c, ep->owner, t);
    if (wake)
        fy_shm_peer_wake(iface, ep->peer);
    iface->stats.tx_obox++;
    ep->stats.tx_msgs++;
    ep->stats.tx_bytes += total;
    *st = FERRY_OK;
    if (op != NULL) { /* our part while the receiver pulls its own, then say it is there */
        if (hdr_len != 0)
            memcpy(data, hdr, hdr_len);
        split_gather(data + hdr_len, iov, iovcnt, cut - hdr_len, total);
        shm_obox_slot_t *slot = (shm_obox_slot_t *)(iface->obox + e->off);
        __atomic_store_n(&slot->ready, e->gen, __ATOMIC_RELEASE);
        iface->stats.tx_split++;
        *st = FERRY_INPROGRESS;
    }
    return 1;
}

static void op_save_message(shm_op_t *op, uint8_t id, const void *hdr, size_t hdr_len,
                            const struct iovec *iov, size_t iovcnt)
{
    op->am_id = id;
    op->hdr_len = hdr_len;
    if (hdr_len != 0)
        memcpy(op->hdr, hdr, hdr_len);
    op->iovcnt = iovcnt;
    memcpy(op->iov, iov, iovcnt * sizeof(*iov));
    op->total = hdr_len + fy_iov_total(iov, iovcnt);
}

ferry_status_t fy_shm_am_zcopy(fy_tl_ep_t *tl_ep, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    shm_iface_t *iface = ep->iface;
    if (FY_UNLIKELY(ep->blocked))
        return blocked_status(ep);
    if (hdr_len > SHM_MAX_ZCOPY_HDR || iovcnt > SHM_MAX_IOV || id > FY_TL_AM_ID_MAX)
        return FERRY_ERR_INVALID_PARAM;
    size_t data_len = fy_iov_total(iov, iovcnt);
    size_t total = hdr_len + data_len;
    /* Small: a copy through a cell buffer is faster than a pull and its answer (up to
     * bcopy_max: room to align the copy in the buffer; the outbox aligns larger ones). */
    if (total <= FY_MIN(iface->md->opts.zcopy_thresh, (size_t)ep->bcopy_max)) {
        struct iovec v[SHM_MAX_IOV + 1];
        v[0] = (struct iovec){(void *)(uintptr_t)hdr, hdr_len};
        memcpy(&v[1], iov, iovcnt * sizeof(*iov));
        return fy_shm_am_bcopy(tl_ep, id, v, iovcnt + 1);
    }
    /* A message the outbox would split goes to a peer not yet known to pull from us as a
     * pull, the probe that tells (a split's receiver must pull its part). */
    int probe = data_len >= iface->md->opts.obox_split && ep->zc_mode == SHM_ZC_UNKNOWN;
    ferry_status_t st;
    if (fy_shm_mapped_send(ep, id, hdr, hdr_len, iov, iovcnt, comp, &st))
        return st; /* the data where the receiver maps it: no copy at all */
    if (data_len <= iface->obox_max && !(probe && comp != NULL) &&
        obox_send(ep, id, hdr, hdr_len, iov, iovcnt, total, comp, &st))
        return st;
    if (comp == NULL)
        return FERRY_ERR_INVALID_PARAM;
    shm_op_t *op = fy_shm_op_new(ep, SHM_OP_PULL, comp);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    if (ep->zc_mode != SHM_ZC_PULL) /* a push, or a probe that may turn into one */
        op_save_message(op, id, hdr, hdr_len, iov, iovcnt);
    if (ep->zc_mode != SHM_ZC_PUSH && !fy_shm_pull_slot_get(iface, op)) {
        fy_shm_op_drop(op); /* SHM_PULL_SLOTS pulls out: wait for answers */
        return FERRY_ERR_NO_RESOURCE;
    }
    ep->stats.tx_msgs++;
    ep->stats.tx_bytes += total;

    if (ep->zc_mode == SHM_ZC_PUSH) {
        push_start(ep, op);
        if (!push_some(ep, op))
            return FERRY_INPROGRESS; /* progress pushes the rest */
        fy_list_del(&ep->push_link);
        ep->push_op = NULL;
        ep->blocked &= ~SHM_EP_PUSHING;
        fy_shm_op_drop(op); /* all copied: done now, no callback */
        return FERRY_OK;
    }

    uint32_t t;
    int wake = 0;
    shm_cell_t *c =
        shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
    if (c == NULL) {
        ep->stats.tx_msgs--;
        ep->stats.tx_bytes -= total;
        fy_shm_pull_slot_put(iface, op); /* never published */
        fy_shm_op_drop(op);
        return fy_shm_ep_full(ep);
    }
    shm_pull_desc_t *d = (shm_pull_desc_t *)shm_cell_buf(ep, t);
    d->cookie = op->cookie;
    d->data_len = data_len;
    d->hdr_len = (uint32_t)hdr_len;
    d->iovcnt = (uint32_t)iovcnt;
    d->slot = op->pull_slot;
    d->pad = 0;
    d->gen = op->pull_gen;
    d->reply = iface->addr;
    for (size_t i = 0; i < iovcnt; i++) {
        d->iov[i].addr = (uint64_t)(uintptr_t)iov[i].iov_base;
        d->iov[i].len = iov[i].iov_len;
    }
    if (hdr_len != 0)
        memcpy((char *)d + sizeof(*d), hdr, hdr_len);
    shm_cell_hdr(c, SHM_CELL_PULL, id, 0, sizeof(*d) + hdr_len);
    if (ep->zc_mode == SHM_ZC_UNKNOWN) {
        op->probe = 1;
        ep->blocked |= SHM_EP_PROBING;
    }
    shm_ring_publish(c, ep->owner, t);
    if (wake)
        fy_shm_peer_wake(iface, ep->peer);
    return FERRY_INPROGRESS;
}

/* The receiver's answer to a pull. */
void fy_shm_zdone(shm_iface_t *iface, const shm_reply_t *r)
{
    shm_op_t *op = fy_hash_get(&iface->ops, r->cookie);
    if (op == NULL || op->type != SHM_OP_PULL)
        return; /* its ep was destroyed */
    shm_ep_t *ep = op->ep;
    ferry_status_t st = (ferry_status_t)r->status;
    fy_shm_pull_slot_put(iface, op); /* the receiver answers after its last read */
    if (op->probe) {
        ep->blocked &= ~SHM_EP_PROBING;
        if (r->status == SHM_STATUS_NEED_PUSH) {
            /* Nothing was sent after the probe: push it now, still in order. */
            ep->zc_mode = SHM_ZC_PUSH;
            push_start(ep, op);
            return;
        }
        if (st == FERRY_OK)
            ep->zc_mode = SHM_ZC_PULL;
    } else if (r->status == SHM_STATUS_NEED_PUSH) {
        fy_error("process %d refused a pull after accepting earlier ones: message lost",
                 (int)ep->peer->addr.pid);
        st = FERRY_ERR_IO;
    }
    fy_shm_op_complete(op, st);
}
