/*
 * ep.c - endpoints: creation (lanes through wireup.c), the pending queue that absorbs
 * back-pressure, flush, close, and failure.
 *
 * An operation a transport cannot take now (FERRY_ERR_NO_RESOURCE) waits on its endpoint's
 * pending queue, and every later operation of that endpoint waits behind it, so order is
 * kept.  Progress retries the queues of the endpoints that have one.  An endpoint counts its
 * operations in flight; flush waits for that count to reach zero and for each transport
 * endpoint's own flush; close is flush followed by destruction.  Failure (a peer died, reset,
 * or stopped answering) completes everything pending with the error and tells the user's
 * error handler once.  The memory of a closed endpoint is kept until its last operation has
 * completed, so a late completion never touches freed memory.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

ferry_status_t fy_ep_create_internal(ferry_worker_t *w, const void *addr, size_t len,
                                     const fy_cm_component_t *via, ferry_ep_t **ep_p)
{
    ferry_ep_t *ep;
    ferry_status_t st = fy_worker_ep_alloc(w, &ep);
    if (st != FERRY_OK)
        return st;
    int is_reply = via == &fy_cm_am;
    ep->is_reply = is_reply;
    ep->via = via;
    ep->state = FY_EP_WIREUP;
    st = fy_ep_connect(ep, addr, len);
    if (st != FERRY_OK) {
        for (unsigned i = 0; i < ep->ntl_eps; i++)
            fy_wireup_tl_ep_destroy(ep, i);
        fy_rails_rx_free(ep);
        fy_worker_ep_free(w, ep);
        return st;
    }
    fy_tag_ep_init(ep);
    /* Introduce ourselves: the first message on the AM lane, so everything after it is
     * known at the peer (wireup.c). */
    if (!is_reply && (st = fy_wireup_start(ep)) < 0) {
        fy_ep_destroy_now(ep);
        return st;
    }
    *ep_p = ep;
    return FERRY_OK;
}

ferry_status_t ferry_ep_create(ferry_worker_t *w, const ferry_ep_params_t *params,
                               ferry_ep_t **ep_p)
{
    FY_WORKER_GUARD(w);
    return fy_ep_create_via(w, params, NULL, ep_p);
}

ferry_status_t fy_ep_create_via(ferry_worker_t *w, const ferry_ep_params_t *params,
                                const fy_cm_component_t *via, ferry_ep_t **ep_p)
{
    if (w == NULL || params == NULL || ep_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    uint64_t known = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER |
                     FERRY_EP_FIELD_USER_DATA | FERRY_EP_FIELD_SOCKADDR |
                     FERRY_EP_FIELD_CONN_REQUEST;
    if ((params->field_mask & ~known) != 0) {
        fy_error("ferry_ep_create: unknown field_mask bits 0x%llx",
                 (unsigned long long)(params->field_mask & ~known));
        return FERRY_ERR_INVALID_PARAM;
    }
    uint64_t peer = params->field_mask & (FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_SOCKADDR |
                                          FERRY_EP_FIELD_CONN_REQUEST);
    if (peer == 0 || (peer & (peer - 1)) != 0 ||
        (peer == FERRY_EP_FIELD_ADDRESS && (params->address == NULL || params->address_len == 0))) {
        fy_error("ferry_ep_create: exactly one peer is required: an address "
                 "(FERRY_EP_FIELD_ADDRESS), an ip:port (FERRY_EP_FIELD_SOCKADDR) or a "
                 "connection request (FERRY_EP_FIELD_CONN_REQUEST)");
        return FERRY_ERR_INVALID_PARAM;
    }
    /* The peer may have connected to us first: its endpoint becomes the application's. */
    ferry_ep_t *ep = NULL;
    ferry_status_t st = FERRY_OK;
    if (peer == FERRY_EP_FIELD_ADDRESS) {
        ep = fy_wireup_adopt(w, params->address, params->address_len);
        if (ep == NULL)
            st = fy_ep_create_internal(w, params->address, params->address_len, via, &ep);
    } else {
        st = fy_listener_ep_create(w, params, &ep); /* the sockaddr manager (listener.c) */
    }
    if (st != FERRY_OK)
        return st;
    if (params->field_mask & FERRY_EP_FIELD_ERR_HANDLER) {
        ep->err_cb = params->err_cb;
        ep->err_arg = params->err_arg;
    }
    if (params->field_mask & FERRY_EP_FIELD_USER_DATA)
        ep->user_data = params->user_data;
    *ep_p = ep;
    return FERRY_OK;
}

void *ferry_ep_get_user_data(const ferry_ep_t *ep)
{
    return ep != NULL ? ep->user_data : NULL;
}
ferry_worker_t *ferry_ep_get_worker(const ferry_ep_t *ep)
{
    return ep != NULL ? ep->worker : NULL;
}

ferry_status_t ferry_ep_get_stats(const ferry_ep_t *ep, ferry_ep_stats_t *stats)
{
    FY_EP_GUARD(ep);
    if (ep == NULL || stats == NULL)
        return FERRY_ERR_INVALID_PARAM;
    *stats = ep->stats;
    if (ep->state == FY_EP_CLOSED)
        return FERRY_OK;
    /* The transports' counters add to proto's: resends and drops summed over every transport
     * endpoint of this one (its lanes and rails); the estimates (RTT, window) of the AM lane. */
    for (unsigned i = 0; i < ep->ntl_eps; i++) {
        fy_tl_ep_t *te = ep->tl_eps[i];
        const fy_tl_ops_t *ops = te->iface->component->ops;
        ferry_ep_stats_t t;
        memset(&t, 0, sizeof(t));
        if (ops->ep_get_stats == NULL || ops->ep_get_stats(te, &t) != FERRY_OK)
            continue;
        stats->retransmits += t.retransmits;
        stats->dup_acks += t.dup_acks;
        stats->fast_retransmits += t.fast_retransmits;
        stats->timeouts += t.timeouts;
        stats->drops_bad_key += t.drops_bad_key;
        stats->drops_malformed += t.drops_malformed;
        stats->drops_duplicate += t.drops_duplicate;
        stats->drops_unknown_ep += t.drops_unknown_ep;
        if (te == ep->lanes[FY_LANE_AM].tl_ep) {
            stats->rtt_ns = t.rtt_ns;
            stats->rto_ns = t.rto_ns;
            stats->window_used = t.window_used;
            stats->window_max = t.window_max;
        }
    }
    return FERRY_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Submission and the pending queue                                                            */
/* ------------------------------------------------------------------------------------------ */

/*
 * What an operation holds from submission until it completes: itself, and the data it sends
 * (copied, or the caller's).  It counts against FERRY_MAX_QUEUED both while it waits on the
 * pending queue and while the transport carries it: a transport that takes sends faster than
 * the peer reads them (udp's window, tcp's socket queue) would otherwise let an endpoint hold
 * unbounded memory.
 */
static void op_add_bytes(fy_op_t *op)
{
    if (op->qcost != 0 || op->ep == NULL)
        return;
    op->qcost = sizeof(*op);
    if (fy_op_ops[op->type]->data != NULL)
        op->qcost += fy_op_ops[op->type]->data(op);
    op->ep->queued_bytes += op->qcost;
}

void fy_op_uncount_bytes(fy_op_t *op)
{
    if (op->qcost != 0 && op->ep != NULL)
        op->ep->queued_bytes -= op->qcost;
    op->qcost = 0;
}

void fy_ep_add_pending(ferry_ep_t *ep, fy_op_t *op)
{
    op_add_bytes(op);
    fy_queue_push(&ep->pending, &op->q);
    if (!fy_list_is_linked(&ep->pending_link))
        fy_list_add_tail(&ep->worker->pending_eps, &ep->pending_link);
}

/* The op leaves the queue; its bytes stay counted until it completes (fy_op_finish). */
fy_op_t *fy_ep_pop_pending(ferry_ep_t *ep)
{
    fy_qelem_t *e = fy_queue_pop(&ep->pending);
    if (e == NULL)
        return NULL;
    return fy_container_of(e, fy_op_t, q);
}

void fy_op_count(fy_op_t *op)
{
    if (!op->counted && !(fy_op_flags(op) & FY_OP_F_UNCOUNTED) && op->ep != NULL) {
        op->counted = 1;
        op->ep->outstanding++;
        op_add_bytes(op);
    }
}

/*
 * Operations split in several (an AM above the lane's maximum, a put or get above max_rma):
 * a parent op carries the user's request (and the copy, when there is none) and no endpoint;
 * each piece is an op of its own with op->parent set, started or queued in order like any
 * other.  The parent completes once, when the last piece has, with the first error.
 */
void fy_op_parent_init(fy_op_t *parent)
{
    parent->status = FERRY_OK;
    parent->nsub = 1; /* held until every piece is handed over (fy_op_parent_end) */
}

ferry_status_t fy_ep_submit_child(ferry_ep_t *ep, fy_op_t *parent, fy_op_t *op)
{
    op->parent = parent;
    parent->nsub++;
    ferry_status_t st = fy_queue_is_empty(&ep->pending) ? fy_op_start(op) : FERRY_ERR_NO_RESOURCE;
    if (st == FERRY_INPROGRESS) {
        fy_op_count(op);
    } else if (st == FERRY_ERR_NO_RESOURCE) {
        fy_op_count(op);
        fy_ep_add_pending(ep, op);
        st = FERRY_INPROGRESS;
    } else {
        op->parent = NULL;
        parent->nsub--;
        fy_op_put(op);
    }
    return st;
}

ferry_status_t fy_op_parent_end(fy_op_t *parent, ferry_status_t st)
{
    ferry_request_t *req = parent->req;
    if (st < 0 && parent->nsub == 1) { /* nothing went out: refuse the call, no completion */
        fy_op_put(parent);
        return st;
    }
    if (st < 0 && parent->status == FERRY_OK)
        parent->status = st; /* some pieces went: the operation failed, its completion says so */
    if (--parent->nsub == 0) {
        st = parent->status;
        fy_op_put(parent);
        return st;
    }
    return req != NULL ? FERRY_INPROGRESS : FERRY_OK;
}

/*
 * Hand an operation to its endpoint.  Returns what the API call returns: OK (done, or copied
 * and queued without a request: the op is owned here), INPROGRESS (the request's callback will
 * come), or an error (the op was released).
 */
ferry_status_t fy_ep_submit(ferry_ep_t *ep, fy_op_t *op)
{
    if (FY_UNLIKELY(ep->state == FY_EP_FAILED || ep->state == FY_EP_CLOSED)) {
        ferry_status_t st = ep->state == FY_EP_FAILED ? ep->failure : FERRY_ERR_NOT_CONNECTED;
        fy_op_put(op);
        return st;
    }
    ferry_status_t st;
    if (!fy_queue_is_empty(&ep->pending)) {
        st = FERRY_ERR_NO_RESOURCE;
    } else {
        st = fy_op_start(op);
    }
    switch (st) {
    case FERRY_OK:
        if (op->req != NULL)
            op->req->status = FERRY_OK; /* done now: a caller reading the status sees it */
        fy_op_put(op);
        return FERRY_OK;
    case FERRY_INPROGRESS:
        fy_op_count(op);
        return op->req != NULL ? FERRY_INPROGRESS : FERRY_OK;
    case FERRY_ERR_NO_RESOURCE:
        fy_op_count(op);
        fy_ep_add_pending(ep, op);
        return op->req != NULL ? FERRY_INPROGRESS : FERRY_OK;
    default:
        if (fy_op_flags(op) & FY_OP_F_FLUSH_ERR)
            fy_ep_note_error(ep, st); /* refused by the transport: the covering flush says so */
        fy_op_put(op);
        return st;
    }
}

/*
 * Retry the endpoints that wait for resources.  An endpoint still refused goes to the back of
 * the list, and a pass ends after FY_PENDING_MISSES refusals in a row or once round the list,
 * so a pass costs what it moves plus a few refusals, not the number of endpoints waiting
 * (they mostly wait for the same full ring or socket: asking each of them again is waste).
 */
#define FY_PENDING_MISSES 8

unsigned fy_worker_progress_pending(ferry_worker_t *w)
{
    unsigned n = 0, misses = 0;
    fy_list_t *last = w->pending_eps.prev; /* once round: stop after this one */
    while (!fy_list_is_empty(&w->pending_eps)) {
        fy_list_t *pos = w->pending_eps.next;
        int at_last = pos == last;
        ferry_ep_t *ep = fy_container_of(pos, ferry_ep_t, pending_link);
        fy_qelem_t *e;
        int refused = 0;
        while ((e = fy_queue_peek(&ep->pending)) != NULL) {
            fy_op_t *op = fy_container_of(e, fy_op_t, q);
            ferry_status_t st = fy_op_start(op);
            if (st == FERRY_ERR_NO_RESOURCE) {
                refused = 1;
                break;
            }
            fy_ep_pop_pending(ep);
            n++;
            if (st != FERRY_INPROGRESS)
                fy_worker_complete_later(w, op, st);
        }
        /* the start of an op may have failed the endpoint, which unlinks it */
        if (fy_list_is_linked(&ep->pending_link)) {
            fy_list_del(&ep->pending_link);
            if (!fy_queue_is_empty(&ep->pending))
                fy_list_add_tail(&w->pending_eps, &ep->pending_link);
        }
        misses = refused ? misses + 1 : 0;
        if (at_last || misses >= FY_PENDING_MISSES)
            break;
    }
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Flush and close                                                                             */
/* ------------------------------------------------------------------------------------------ */

void fy_ep_note_error(ferry_ep_t *ep, ferry_status_t st)
{
    if (ep != NULL && st < 0 && st != FERRY_ERR_CANCELED && ep->op_error == FERRY_OK)
        ep->op_error = st;
}

/* A flush is complete: every operation it covers has completed, so any refusal among them
 * has been noted on the endpoint; the flush reports it (once). */
static ferry_status_t flush_take_error(fy_op_t *op)
{
    ferry_ep_t *ep = op->ep;
    if (ep != NULL && ep->op_error != FERRY_OK) {
        if (op->status == FERRY_OK)
            op->status = ep->op_error;
        ep->op_error = FERRY_OK;
    }
    return op->status;
}

void fy_ep_flush_sub_done(fy_op_t *op, ferry_status_t st)
{
    if (st != FERRY_OK && op->status == FERRY_OK)
        op->status = st;
    if (--op->nsub == 0)
        fy_worker_complete_later(op->worker, op, flush_take_error(op));
}

static void flush_comp_cb(fy_tl_comp_t *comp, ferry_status_t st)
{
    fy_ep_flush_sub_done(fy_container_of(comp, fy_op_t, comp), st);
}

void fy_ep_op_done(ferry_ep_t *ep)
{
    if (--ep->outstanding != 0)
        return;
    fy_list_t *pos, *tmp;
    fy_list_for_each_safe(pos, tmp, &ep->close_waiters)
    {
        fy_op_t *op = fy_container_of(pos, fy_op_t, wait_link);
        fy_list_del(&op->wait_link);
        fy_ep_flush_sub_done(op, FERRY_OK);
    }
    if (ep->state == FY_EP_CLOSED && fy_list_is_empty(&ep->close_waiters))
        fy_ep_destroy_now(ep);
}

/* Start a flush (or the flush part of a close): OK if already complete, else INPROGRESS. */
ferry_status_t fy_ep_flush_start(fy_op_t *op)
{
    ferry_ep_t *ep = op->ep;
    op->status = FERRY_OK;
    op->nsub = 1; /* held until every part is started */
    op->comp.cb = flush_comp_cb;
    for (unsigned i = 0; i < ep->ntl_eps; i++) {
        fy_tl_ep_t *te = ep->tl_eps[i];
        if (te->iface->component->ops->ep_flush == NULL)
            continue;
        ferry_status_t st = te->iface->component->ops->ep_flush(te, &op->comp);
        if (st == FERRY_INPROGRESS)
            op->nsub++;
        else if (st == FERRY_ERR_NO_RESOURCE)
            return st; /* retried from the pending queue */
        else if (st != FERRY_OK && op->status == FERRY_OK)
            op->status = st;
    }
    if (ep->emulated_since_flush) {
        ferry_status_t st = fy_rma_flush_ping(op);
        if (st == FERRY_INPROGRESS)
            op->nsub++;
        else if (st != FERRY_OK && op->status == FERRY_OK)
            op->status = st;
    }
    if (ep->outstanding > 0) {
        fy_list_add_tail(&ep->close_waiters, &op->wait_link);
        op->nsub++;
    }
    if (--op->nsub == 0)
        return flush_take_error(op);
    return FERRY_INPROGRESS;
}

/* Run until req completes (the blocking form of calls given no request). */
static ferry_status_t wait_req(ferry_worker_t *w, ferry_request_t *req)
{
    while (req->status == FERRY_INPROGRESS)
        ferry_worker_wait(w, 100);
    return req->status;
}

ferry_status_t ferry_ep_flush(ferry_ep_t *ep, ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    if (ep == NULL || ep->state == FY_EP_CLOSED)
        return FERRY_ERR_INVALID_PARAM;
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        memset(&local, 0, sizeof(local));
        r = &local;
    }
    fy_op_t *op = fy_op_get(ep->worker, ep, FY_OP_FLUSH, r);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_status_t st = fy_ep_submit(ep, op);
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_req(ep->worker, r);
    return st;
}

ferry_status_t ferry_ep_fence(ferry_ep_t *ep)
{
    FY_EP_GUARD(ep);
    if (ep == NULL || ep->state == FY_EP_CLOSED)
        return FERRY_ERR_INVALID_PARAM;
    /* Every lane of an endpoint delivers in order and emulated operations travel on the AM
     * lane; a fence is needed only between native RMA and the rest: flush then. */
    return ep->rma_native ? ferry_ep_flush(ep, NULL) : FERRY_OK;
}

/*
 * Worker flush: one flush per endpoint, as children of one operation that completes when the
 * last of them has (with the first error among them).  Nothing blocks: an endpoint whose
 * flush must wait for resources queues it on its pending list like any other operation.
 */
static void wflush_child_done(fy_op_t *parent, ferry_status_t st)
{
    /* a flush ignores what was cancelled; a fragmented AM is cancelled by any fragment */
    if (st < 0 && (st != FERRY_ERR_CANCELED || (fy_op_flags(parent) & FY_OP_F_ONE_MESSAGE)) &&
        parent->status == FERRY_OK)
        parent->status = st;
    if (--parent->nsub == 0)
        fy_worker_complete_later(parent->worker, parent, parent->status);
}

void fy_op_child_done(fy_op_t *op, ferry_status_t st)
{
    fy_op_t *parent = op->parent;
    op->parent = NULL;
    wflush_child_done(parent, st);
}

ferry_status_t ferry_worker_flush(ferry_worker_t *w, ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    if (w == NULL)
        return FERRY_ERR_INVALID_PARAM;
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        memset(&local, 0, sizeof(local));
        r = &local;
    }
    fy_op_t *wop = fy_op_get(w, NULL, FY_OP_FLUSH, r);
    if (wop == NULL)
        return FERRY_ERR_NO_MEMORY;
    wop->status = FERRY_OK;
    wop->nsub = 1; /* held until every endpoint's flush is started */
    for (uint32_t i = 0; i < w->eps_cap; i++) {
        ferry_ep_t *ep = w->eps[i];
        if (ep == NULL || (ep->state != FY_EP_CONNECTED && ep->state != FY_EP_WIREUP))
            continue;
        fy_op_t *op = fy_op_get(w, ep, FY_OP_FLUSH, NULL);
        if (op == NULL) {
            wop->status = FERRY_ERR_NO_MEMORY;
            break;
        }
        op->parent = wop;
        ferry_status_t st =
            fy_queue_is_empty(&ep->pending) ? fy_ep_flush_start(op) : FERRY_ERR_NO_RESOURCE;
        if (st == FERRY_INPROGRESS) {
            wop->nsub++; /* fy_op_finish tells the parent */
        } else if (st == FERRY_ERR_NO_RESOURCE) {
            wop->nsub++;
            fy_ep_add_pending(ep, op);
        } else {
            op->parent = NULL;
            fy_op_put(op);
            if (st < 0 && wop->status == FERRY_OK)
                wop->status = st;
        }
    }
    ferry_status_t st;
    if (--wop->nsub == 0) {
        st = wop->status;
        fy_op_put(wop); /* done now: no callback */
        r->status = st;
    } else {
        st = FERRY_INPROGRESS;
    }
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_req(w, r);
    return st;
}

void fy_ep_destroy_now(ferry_ep_t *ep)
{
    ferry_worker_t *w = ep->worker;
    for (unsigned i = 0; i < ep->ntl_eps; i++)
        fy_wireup_tl_ep_destroy(ep, i);
    ep->ntl_eps = 0;
    fy_wireup_forget(ep);
    if (fy_list_is_linked(&ep->pending_link))
        fy_list_del(&ep->pending_link);
    /* Completions still queued must not reach back into this endpoint. */
    for (fy_qelem_t *e = w->completed.head; e != NULL; e = e->next) {
        fy_op_t *op = fy_container_of(e, fy_op_t, q);
        if (op->ep == ep) {
            op->ep = NULL;
            op->counted = 0;
        }
    }
    fy_rails_rx_free(ep); /* fragmented AMs never finished */
    fy_rails_rndv_ep_gone(ep, ep->state == FY_EP_FAILED ? ep->failure : FERRY_ERR_CANCELED);
    fy_worker_ep_free(w, ep);
}

static void fail_waiting(uint64_t key, void *value, void *arg)
{
    (void)key;
    fy_op_t *op = value;
    ferry_ep_t *ep = ((void **)arg)[0];
    fy_op_t **list = ((void **)arg)[1];
    if (op->ep == ep) {
        op->q.next = (fy_qelem_t *)*list;
        *list = op;
    }
}

void fy_ep_fail(ferry_ep_t *ep, ferry_status_t st)
{
    if (ep->state == FY_EP_FAILED || ep->state == FY_EP_CLOSED)
        return;
    ferry_worker_t *w = ep->worker;
    if (st == FERRY_ERR_CANCELED)
        fy_tag_ep_closing(ep); /* closed on this side: the peer can still hear it */
    ep->state = FY_EP_FAILED;
    ep->failure = st;
    if (st != FERRY_ERR_CANCELED)
        ep->stats.errors++;
    fy_rails_rndv_ep_gone(ep, st); /* AM data still to come will not */
    fy_op_t *pop;
    while ((pop = fy_ep_pop_pending(ep)) != NULL)
        fy_worker_complete_later(w, pop, st);
    if (fy_list_is_linked(&ep->pending_link))
        fy_list_del(&ep->pending_link);
    /* Emulated operations waiting for the peer's answer will never get it. */
    fy_op_t *list = NULL;
    void *args[2] = {ep, &list};
    fy_hash_foreach(&w->waiting, fail_waiting, args);
    while (list != NULL) {
        fy_op_t *op = list;
        list = (fy_op_t *)op->q.next;
        fy_hash_del(&w->waiting, op->wait_id);
        op->wait_id = 0;
        if (fy_op_ops[op->type]->fail != NULL)
            fy_op_ops[op->type]->fail(op, st);
        else
            fy_worker_complete_later(w, op, st);
    }
    if (st != FERRY_ERR_CANCELED) {
        /* A peer that leaves with nothing in flight (the end of a job) is news, not trouble. */
        fy_log(ep->outstanding != 0 ? FY_LOG_WARN : FY_LOG_INFO,
               "endpoint %u to worker %016llx failed: %s%s", ep->id,
               (unsigned long long)ep->remote_uuid, ferry_status_string(st),
               ep->outstanding != 0 ? " (operations in flight fail with it)" : "");
        if (ep->err_cb != NULL)
            ep->err_cb(ep->err_arg, ep, st);
    }
}

void fy_ep_tl_err_cb(void *arg, fy_tl_ep_t *tl_ep, ferry_status_t status)
{
    (void)arg;
    ferry_ep_t *ep = tl_ep->owner;
    if (ep != NULL && !fy_rails_tl_failed(ep, tl_ep) &&
        !fy_wireup_tl_failed(ep, tl_ep, status)) /* the next lane, if any */
        fy_ep_fail(ep, status);
}

/* The end of a close: after the flush (or at once by force). */
void fy_ep_close_now(ferry_ep_t *ep)
{
    if (ep->state != FY_EP_FAILED)
        fy_ep_fail(ep, FERRY_ERR_CANCELED);
    ep->state = FY_EP_CLOSED;
    for (unsigned i = 0; i < ep->ntl_eps; i++)
        fy_wireup_tl_ep_destroy(ep, i);
    ep->ntl_eps = 0;
    if (ep->outstanding == 0 && fy_list_is_empty(&ep->close_waiters))
        fy_ep_destroy_now(ep);
}

/* The end of a close's flush: the endpoint closes before the user hears of it. */
void fy_ep_close_finish(fy_op_t *op)
{
    ferry_ep_t *ep = op->ep;
    op->ep = NULL;
    fy_ep_close_now(ep);
}

ferry_status_t ferry_ep_close(ferry_ep_t *ep, unsigned mode, ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    if (ep == NULL || ep->state == FY_EP_CLOSED ||
        (mode != FERRY_EP_CLOSE_FLUSH && mode != FERRY_EP_CLOSE_FORCE))
        return FERRY_ERR_INVALID_PARAM;
    ferry_worker_t *w = ep->worker;
    if (ep->worker->ctx->opts.stats) {
        fprintf(stderr, "ferry stats: ep %u -> %016llx\n", ep->id,
                (unsigned long long)ep->remote_uuid);
        ferry_worker_print_info(w, stderr);
    }
    if (mode == FERRY_EP_CLOSE_FLUSH && ep->state != FY_EP_FAILED) {
        ferry_request_t local;
        ferry_request_t *r = req;
        if (r == NULL) {
            memset(&local, 0, sizeof(local));
            r = &local;
        }
        fy_op_t *op = fy_op_get(w, ep, FY_OP_CLOSE, r);
        if (op == NULL)
            return FERRY_ERR_NO_MEMORY;
        ferry_status_t st = fy_ep_submit(ep, op);
        if (st == FERRY_INPROGRESS) {
            if (req != NULL)
                return st; /* fy_op_finish closes it before the callback */
            st = wait_req(w, r);
            return st == FERRY_OK || st == FERRY_ERR_CANCELED ? FERRY_OK : st;
        }
        if (ep->state == FY_EP_CLOSED)
            return FERRY_OK;
    }
    fy_ep_close_now(ep);
    return FERRY_OK;
}
