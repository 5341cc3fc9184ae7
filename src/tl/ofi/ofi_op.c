/*
 * ofi_op.c - the ofi interface's operations: the pool every send, RMA, atomic, flush and
 * rendezvous op comes from, and how an op finishes.
 *
 * An op lives on its ep's list in issue order from post to completion, so a flush at the head
 * of that list completes right after the op before it (flush means every earlier op remotely
 * complete).  An ep that fails or is destroyed takes every op off its list at once: ops
 * libfabric still holds become orphans of the iface (their buffers and contexts must stay
 * valid until the provider gives the context back), their callers are answered now.  The
 * pool bounds what an iface has in flight (FERRY_OFI_TX_OPS); with FI_MR_LOCAL an op also
 * holds the registrations of the buffers it passed, given back when the op is.
 * Kept apart from ofi_progress.c (which reads the CQ and calls into here) and ofi_iface.c
 * (open and close) because this is the one place an op's lifetime is decided.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/ofi/ofi.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* ---- the op pool ------------------------------------------------------------------------- */

fy_ofi_op_t *fy_ofi_op_get(fy_ofi_iface_t *iface, fy_ofi_ep_t *ep, int kind, fy_tl_comp_t *comp)
{
    int counted = kind != FY_OFI_OP_FLUSH;
    if (counted && iface->inflight >= iface->tx_ops)
        return NULL;
    fy_ofi_op_t *op;
    if (!fy_list_is_empty(&iface->free)) {
        op = fy_container_of(fy_list_pop_head(&iface->free), fy_ofi_op_t, elem);
    } else {
        if (iface->nops == iface->all_cap) {
            unsigned cap = iface->all_cap ? 2 * iface->all_cap : 64;
            fy_ofi_op_t **a = realloc(iface->all_ops, cap * sizeof(*a));
            if (a == NULL)
                return NULL;
            iface->all_ops = a;
            iface->all_cap = cap;
        }
        op = calloc(1, sizeof(*op));
        if (op == NULL)
            return NULL;
        op->index = iface->nops;
        iface->all_ops[iface->nops++] = op;
    }
    uint32_t index = op->index;
    void *bbuf = op->bbuf;
    fy_ofi_mr_t bbuf_mr = op->bbuf_mr, self_mr = op->self_mr;
    memset(op, 0, sizeof(*op));
    op->index = index;
    op->bbuf = bbuf;
    op->bbuf_mr = bbuf_mr;
    op->self_mr = self_mr;
    op->ep = ep;
    op->kind = (uint8_t)kind;
    op->comp = comp;
    op->counted = (uint8_t)counted;
    fy_list_init(&op->elem);
    if (counted)
        iface->inflight++;
    return op;
}

/* FI_MR_LOCAL: the cache regions of the caller's buffers an op held, given back */
static void op_release_regions(fy_ofi_iface_t *iface, fy_ofi_op_t *op)
{
    for (unsigned i = 0; i < op->nregions; i++)
        fy_rcache_put(iface->md->rcache, op->regions[i]);
    op->nregions = 0;
}

/* FI_MR_LOCAL: register [buf, +len) for local use into mr (bound to the iface's endpoint
 * under FI_MR_ENDPOINT), once: an op keeps it across reuse. */
ferry_status_t fy_ofi_op_local_mr(fy_ofi_iface_t *iface, fy_ofi_op_t *op, void *buf, size_t len,
                                  fy_ofi_mr_t *mr)
{
    (void)op;
    if (!iface->md->mrdom.mode.local || mr->mr != NULL)
        return FERRY_OK;
    return fy_ofi_mr_reg(&iface->md->mrdom, iface->ep, buf, len, 0, 1, mr);
}

/* FI_MR_LOCAL: op->desc[first..n) for the caller's buffers v[first..n), from the md's
 * registration cache; the op holds the regions until it goes back to the pool (a buffer sent
 * again is registered once).  Without FI_MR_LOCAL the descriptors stay NULL. */
ferry_status_t fy_ofi_op_descs(fy_ofi_iface_t *iface, fy_ofi_op_t *op, const struct iovec *v,
                               size_t first, size_t n)
{
    if (!iface->md->mrdom.mode.local)
        return FERRY_OK;
    fy_rcache_t *rc = fy_ofi_md_rcache(iface->md);
    if (rc == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (size_t i = first; i < n; i++) {
        fy_rcache_region_t *r;
        ferry_status_t st = fy_rcache_get(rc, v[i].iov_base, v[i].iov_len, 0, &r);
        if (st != FERRY_OK)
            return st; /* the regions taken so far go back with the op */
        op->regions[op->nregions++] = r;
        op->desc[i] = fy_ofi_mr_desc(fy_rcache_region_memh(r));
    }
    return FERRY_OK;
}

void fy_ofi_op_put(fy_ofi_iface_t *iface, fy_ofi_op_t *op)
{
    if (op->nregions > 0)
        op_release_regions(iface, op);
    if (fy_list_is_linked(&op->elem))
        fy_list_del(&op->elem);
    if (op->counted)
        iface->inflight--;
    op->counted = 0;
    op->ep = NULL;
    fy_list_add_head(&iface->free, &op->elem);
}

void fy_ofi_op_free_all(fy_ofi_iface_t *iface, fy_list_t *head)
{
    while (!fy_list_is_empty(head)) {
        fy_ofi_op_t *op = fy_container_of(fy_list_pop_head(head), fy_ofi_op_t, elem);
        op_release_regions(iface, op);
        fy_ofi_mr_dereg(&op->bbuf_mr);
        fy_ofi_mr_dereg(&op->self_mr);
        free(op->bbuf);
        free(op);
    }
}

/* ---- ops finishing ------------------------------------------------------------------------ */

/* The flushes now at the head of ep's list with nothing left to wait for: detached, their
 * completions and statuses returned (the caller calls them after the op before them). */
#define MAX_READY 16
static unsigned take_flushes(fy_ofi_ep_t *ep, fy_tl_comp_t **comps, ferry_status_t *sts)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)ep->super.iface;
    unsigned n = 0;
    while (n < MAX_READY && !fy_list_is_empty(&ep->ops)) {
        fy_ofi_op_t *f = fy_container_of(ep->ops.next, fy_ofi_op_t, elem);
        if (f->kind != FY_OFI_OP_FLUSH || f->posted || f->need_read)
            break;
        ferry_status_t st = f->status;
        if (f->comp == NULL) { /* a marker of flush(NULL): keep its error for the next */
            if (st != FERRY_OK && ep->deferred == FERRY_OK)
                ep->deferred = st;
            fy_ofi_op_put(iface, f);
            continue;
        }
        if (st == FERRY_OK && ep->deferred != FERRY_OK) {
            st = ep->deferred;
            ep->deferred = FERRY_OK;
        }
        comps[n] = f->comp;
        sts[n++] = st;
        fy_ofi_op_put(iface, f);
    }
    return n;
}

void fy_ofi_op_done(fy_ofi_iface_t *iface, fy_ofi_op_t *op, ferry_status_t st)
{
    fy_ofi_ep_t *ep = op->ep;
    fy_tl_comp_t *comp = op->comp;
    if (op->kind == FY_OFI_OP_AMO && op->result_dst != NULL && st == FERRY_OK) {
        if (op->amo_size == 4) {
            uint32_t v = (uint32_t)op->result;
            memcpy(op->result_dst, &v, 4);
        } else {
            memcpy(op->result_dst, &op->result, 8);
        }
    }
    if (op->kind == FY_OFI_OP_FLUSH) { /* its read came back */
        op->posted = 0;
        op->need_read = 0;
        if (st != FERRY_OK && op->status == FERRY_OK)
            op->status = st;
        if (ep == NULL) {
            fy_ofi_op_put(iface, op);
            return;
        }
        fy_tl_comp_t *fc[MAX_READY];
        ferry_status_t fs[MAX_READY];
        unsigned n = take_flushes(ep, fc, fs);
        for (unsigned i = 0; i < n; i++)
            if (fc[i] != NULL)
                fc[i]->cb(fc[i], fs[i]);
        return;
    }
    fy_ofi_op_put(iface, op);
    if (ep == NULL)
        return;
    if (st != FERRY_OK && comp == NULL && ep->deferred == FERRY_OK)
        ep->deferred = st;
    fy_tl_comp_t *fc[MAX_READY];
    ferry_status_t fs[MAX_READY];
    unsigned n = take_flushes(ep, fc, fs);
    if (comp != NULL)
        comp->cb(comp, st);
    for (unsigned i = 0; i < n; i++)
        if (fc[i] != NULL)
            fc[i]->cb(fc[i], fs[i]);
}

/* Take every op off a failing or destroyed ep: posted ones become orphans (libfabric still
 * holds their context), the others go back to the pool; each caller is answered with st. */
static void ep_cancel_all(fy_ofi_ep_t *ep, ferry_status_t st)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)ep->super.iface;
    while (!fy_list_is_empty(&ep->ops)) {
        fy_ofi_op_t *op = fy_container_of(fy_list_pop_head(&ep->ops), fy_ofi_op_t, elem);
        fy_list_init(&op->elem);
        fy_tl_comp_t *comp = op->comp;
        op->comp = NULL;
        op->ep = NULL;
        op->queued = 0;
        op->result_dst = NULL;
        if (op->posted)
            fy_list_add_tail(&iface->orphans, &op->elem);
        else
            fy_ofi_op_put(iface, op);
        ferry_status_t s = st;
        if (s == FERRY_ERR_CANCELED && op->kind == FY_OFI_OP_FLUSH && ep->failed != FERRY_OK)
            s = ep->failed;
        if (comp != NULL)
            comp->cb(comp, s);
    }
}

void fy_ofi_ep_drain(fy_ofi_ep_t *ep)
{
    ep->nqueued = 0;
    ep_cancel_all(ep, FERRY_ERR_CANCELED);
}

void fy_ofi_ep_fail(fy_ofi_ep_t *ep, ferry_status_t st)
{
    if (ep->failed != FERRY_OK)
        return;
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)ep->super.iface;
    ep->failed = st;
    ep->nqueued = 0;
    if (st == FERRY_ERR_ENDPOINT_TIMEOUT || st == FERRY_ERR_CONNECTION_RESET)
        fy_ofi_iface_break_peer(iface, ep); /* no new ep to it here (ofi_iface.c says why) */
    ep->depth++;
    ep_cancel_all(ep, st);
    if (!ep->err_reported && !ep->destroyed) {
        ep->err_reported = 1;
        if (iface->super.params.err_cb != NULL)
            iface->super.params.err_cb(iface->super.params.err_arg, &ep->super, st);
    }
    if (--ep->depth == 0 && ep->destroyed)
        free(ep);
}
