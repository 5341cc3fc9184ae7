/*
 * tag.c - tagged messages with MPI matching semantics, built on the AM lane: the API calls and
 * matching.  The protocols that move the data live in files of their own:
 *
 *   tag_eager.c     messages up to the endpoint's rendezvous threshold, and sends given no
 *                   request, travel whole (AM id FY_AM_ID_TAG, header: the 8-byte tag alone).
 *   tag_rndv.c      larger ones stay in the caller's memory until a receive has matched their
 *                   RTS (AM id FY_AM_ID_TAG_RNDV, header fy_tag_msg_t in tag_int.h); the data
 *                   then moves by one of two schemes:
 *   tag_rndv_get.c    RTS_GET -> the receiver reads the sender's memory -> ATS
 *   tag_rndv_am.c     RTS -> CTS -> DATA, an AM from the sender's memory
 *
 * A receive names a tag and a mask; a message matches the first posted receive (in posting
 * order) whose (tag & mask) equals the message's (tag & mask).  Messages that find no receive
 * wait in the unexpected queue, in arrival order; a later receive takes the first that
 * matches.  The AM lane delivers each sender's messages in order, so matching is ordered per
 * sender.  An unexpected eager message is copied once into the queue; an unexpected
 * rendezvous costs the receiver a small descriptor, never a copy.
 *
 * Matching hands a matched message to its protocol and is never called back: the protocols
 * complete the receive themselves (fy_tag_recv_deliver, or their own completions).
 *
 * Also here, the calls runtimes need beyond send and receive:
 *
 *   sendv / recvv   a message gathered from, or scattered into, up to FERRY_IOV_MAX pieces.
 *                   A receive of several pieces keeps their iovec array (a copy, in op->copy);
 *                   every protocol writes through fy_tag_recv_copy / fy_tag_recv_piece.
 *   ssend           completes when a receive has matched: eager sizes wait for an ATS the
 *                   receiver sends at match (tag_eager.c); a rendezvous completes only after
 *                   its match anyway.
 *   mprobe / mrecv  mprobe takes a message off the unexpected queue (onto tag_mprobed) and
 *                   gives it to the caller as a handle; mrecv receives exactly that message.
 *   cancel          a posted receive not yet matched; a send whose first message is still on
 *                   its endpoint's pending queue (waiting for connect or for credits): it is
 *                   taken off and completes CANCELED.  A send on the wire gets FERRY_ERR_BUSY.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/tag_int.h"
#include "util/copy.h"

_Static_assert(FERRY_IOV_MAX == FY_MAX_IOV, "the public iov limit is proto's");

static int matches(uint64_t msg_tag, uint64_t tag, uint64_t mask)
{
    return ((msg_tag ^ tag) & mask) == 0;
}

static size_t unexp_msg_len(const fy_tag_unexp_t *u)
{
    return u->m.type == TAG_EAGER ? u->len : u->m.len;
}

/* Copy n bytes at byte off of the receive buffer (its pieces, if recvv); into a contiguous
 * one with `rep movsb` from movsb_min bytes (util/copy.h: SIZE_MAX, never). */
static void recv_copy(fy_op_t *op, size_t off, const void *data, size_t n, size_t movsb_min)
{
    const fy_op_tag_recv_t *r = &op->tag_recv;
    if (n == 0)
        return;
    if (r->iovcnt == 0) /* inline for the few bytes of a small one */
        fy_copy_rx((uint8_t *)r->buf + off, data, n, movsb_min);
    else
        fy_iov_scatter(r->buf, r->iovcnt, off, data, n);
}

struct iovec fy_tag_recv_piece(const fy_op_t *op, size_t off, size_t n)
{
    const fy_op_tag_recv_t *r = &op->tag_recv;
    struct iovec v = {NULL, 0};
    if (r->iovcnt == 0) {
        v.iov_base = (uint8_t *)r->buf + off;
        v.iov_len = n;
        return v;
    }
    const struct iovec *iov = r->buf;
    for (size_t i = 0; i < r->iovcnt; i++) {
        if (off < iov[i].iov_len) {
            v.iov_base = (uint8_t *)iov[i].iov_base + off;
            v.iov_len = FY_MIN(n, iov[i].iov_len - off);
            return v;
        }
        off -= iov[i].iov_len;
    }
    return v;
}

void fy_tag_sync_ack(ferry_ep_t *ep, const fy_tag_msg_t *m)
{
    fy_tag_msg_t a = {.type = TAG_ATS, .status = FERRY_OK, .tag = m->tag, .wait_id = m->wait_id};
    ferry_status_t st = fy_tag_rndv_ctl(ep, &a);
    if (st < 0)
        fy_warn("cannot answer a synchronous send on ep %u (%s): it completes when the endpoint "
                "fails",
                ep->id, ferry_status_string(st));
}

static inline void recv_deliver(fy_op_t *op, uint64_t tag, const void *data, size_t len)
{
    ferry_status_t st = FERRY_OK;
    size_t n = len;
    if (len > op->tag_recv.len) {
        n = op->tag_recv.len;
        st = FERRY_ERR_MESSAGE_TRUNCATED;
    }
    recv_copy(op, 0, data, n, op->worker->rx_copy_movsb); /* out of the transport's buffer */
    ferry_request_t *req = op->req;
    if (req != NULL) {
        req->tag = tag;
        req->length = n;
    }
    /* Handlers run from progress: the callback may run now.  A plain posted receive (no
     * endpoint, wait id, count, parent or copy of its own: an eager message's) is recycled
     * here, without fy_op_finish's general bookkeeping, which has nothing to do for it. */
    if (FY_LIKELY(req != NULL && op->type == FY_OP_TAG_RECV && op->ep == NULL && op->wait_id == 0 &&
                  !op->counted && op->parent == NULL && op->copy == NULL &&
                  !fy_list_is_linked(&op->wait_link))) {
        fy_mpool_put(&op->worker->ops, op);
        req->status = st;
        req->priv[0] = 0;
        if (req->cb != NULL)
            req->cb(req, st);
        return;
    }
    fy_op_finish(op, st);
}

void fy_tag_recv_deliver(fy_op_t *op, uint64_t tag, const void *data, size_t len)
{
    recv_deliver(op, tag, data, len);
}

/* No posted receive took the message: it waits in the unexpected queue (an eager one with a
 * copy of its data, a rendezvous one as its descriptor). */
static void queue_unexp(ferry_worker_t *w, const fy_tag_msg_t *m, const void *data, size_t len,
                        ferry_ep_t *ep)
{
    size_t keep = m->type == TAG_RTS ? 0 : len;
    fy_tag_unexp_t *u = malloc(sizeof(*u) + keep);
    if (u == NULL) {
        fy_error("out of memory for an unexpected tagged message of %zu bytes: dropped",
                 m->type == TAG_EAGER ? len : (size_t)m->len);
        return;
    }
    u->ep = ep;
    u->ep_id = ep->id;
    u->m = *m;
    u->len = keep;
    if (keep != 0)
        fy_copy_rx(u->data, data, keep, w->rx_copy_movsb);
    fy_list_add_tail(&w->tag_unexp, &u->link);
}

void fy_tag_eager_arrived(ferry_worker_t *w, uint64_t tag, const void *data, size_t len,
                          ferry_ep_t *ep)
{
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_posted)
    {
        fy_op_t *op = fy_container_of(pos, fy_op_t, wait_link);
        if (!matches(tag, op->tag_recv.tag, op->tag_recv.tag_mask))
            continue;
        fy_list_del(&op->wait_link);
        recv_deliver(op, tag, data, len);
        return;
    }
    fy_tag_msg_t m = {.type = TAG_EAGER, .tag = tag};
    queue_unexp(w, &m, data, len, ep);
}

void fy_tag_match_or_queue(ferry_worker_t *w, const fy_tag_msg_t *m, const void *data, size_t len,
                           ferry_ep_t *ep)
{
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_posted)
    {
        fy_op_t *op = fy_container_of(pos, fy_op_t, wait_link);
        if (!matches(m->tag, op->tag_recv.tag, op->tag_recv.tag_mask))
            continue;
        fy_list_del(&op->wait_link);
        ferry_status_t st;
        switch (m->type) {
        case TAG_EAGER:
            if (FY_UNLIKELY(m->flags & TAG_F_SYNC))
                fy_tag_sync_ack(ep, m);
            recv_deliver(op, m->tag, data, len);
            break;
        case TAG_RTS:
            st = fy_tag_recv_rts(op, ep, m->tag, m->len, m->wait_id, 0);
            if (st < 0)
                fy_worker_complete_later(w, op, st);
            break;
        default:
            st = fy_tag_recv_rts_get(op, ep, m, data, len);
            if (st != FERRY_INPROGRESS)
                fy_op_finish(op, st);
        }
        return;
    }
    queue_unexp(w, m, data, len, ep);
}

static int unexp_ep_alive(ferry_worker_t *w, const fy_tag_unexp_t *u)
{
    return fy_worker_ep_lookup(w, u->ep_id) == u->ep && u->ep->state != FY_EP_CLOSED;
}

/* Take an unexpected message for a new receive: FERRY_OK or an error (done now, no callback,
 * the op released), or INPROGRESS (the op waits for the rest of a rendezvous). */
static ferry_status_t recv_unexp(ferry_worker_t *w, fy_op_t *op, fy_tag_unexp_t *u)
{
    ferry_request_t *r = op->req;
    ferry_status_t st;
    if (u->m.type == TAG_EAGER) {
        size_t n = FY_MIN(u->len, op->tag_recv.len);
        recv_copy(op, 0, u->data, n, SIZE_MAX); /* our own copy, in this core's cache */
        r->tag = u->m.tag;
        r->length = n;
        st = u->len <= op->tag_recv.len ? FERRY_OK : FERRY_ERR_MESSAGE_TRUNCATED;
        if ((u->m.flags & TAG_F_SYNC) && unexp_ep_alive(w, u) && fy_tag_ep_usable(u->ep))
            fy_tag_sync_ack(u->ep, &u->m);
    } else if ((u->m.flags & TAG_F_GONE) || !unexp_ep_alive(w, u)) {
        st = (u->m.flags & TAG_F_GONE) ? FERRY_ERR_CANCELED : FERRY_ERR_NOT_CONNECTED;
    } else if (u->m.type == TAG_RTS) {
        st = fy_tag_recv_rts(op, u->ep, u->m.tag, u->m.len, u->m.wait_id, 0);
        if (st >= 0)
            return FERRY_INPROGRESS;
    } else {
        st = fy_tag_recv_rts_get(op, u->ep, &u->m, u->data, u->len);
        if (st == FERRY_INPROGRESS)
            return st;
    }
    r->status = st; /* complete now: no callback (the contract for FERRY_OK) */
    fy_op_put(op);
    return st;
}

/* Check an iov a call was given and copy its non-empty pieces to v (FY_MAX_IOV entries):
 * the count, or -1 (with a log line naming the call) for a NULL or too long iov. */
long fy_iov_take(const char *call, const struct iovec *iov, size_t iovcnt, struct iovec *v)
{
    if (iov == NULL && iovcnt != 0)
        return -1;
    if (iovcnt > FY_MAX_IOV) {
        fy_error("%s: %zu iov entries, at most FERRY_IOV_MAX (%d)", call, iovcnt, FY_MAX_IOV);
        return -1;
    }
    long n = 0;
    for (size_t i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len == 0)
            continue;
        if (iov[i].iov_base == NULL) {
            fy_error("%s: iov entry %zu has %zu bytes at NULL", call, i, iov[i].iov_len);
            return -1;
        }
        v[n++] = iov[i];
    }
    return n;
}

/* A receive's buffer: buf/len, or n > 1 pieces (their array copied into op->copy). */
static ferry_status_t recv_set_buf(fy_op_t *op, void *buf, size_t len, const struct iovec *v,
                                   size_t n)
{
    if (v == NULL || n <= 1) {
        op->tag_recv.buf = v == NULL ? buf : n == 1 ? v[0].iov_base : NULL;
        op->tag_recv.len = v == NULL ? len : n == 1 ? v[0].iov_len : 0;
        return FERRY_OK;
    }
    op->copy = malloc(n * sizeof(*v));
    if (op->copy == NULL)
        return FERRY_ERR_NO_MEMORY;
    memcpy(op->copy, v, n * sizeof(*v));
    op->tag_recv.buf = op->copy;
    op->tag_recv.iovcnt = n;
    op->tag_recv.len = fy_iov_total(v, n);
    return FERRY_OK;
}

static ferry_status_t wait_req(ferry_worker_t *w, ferry_request_t *r)
{
    ferry_status_t st;
    while ((st = r->status) == FERRY_INPROGRESS)
        ferry_worker_wait(w, 100);
    return st;
}

/* ferry_tag_recv and ferry_tag_recvv: v == NULL for buf/len. */
static ferry_status_t tag_recv(ferry_worker_t *w, void *buf, size_t len, const struct iovec *v,
                               size_t n, uint64_t tag, uint64_t tag_mask, ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        fy_request_local_init(&local);
        r = &local;
    }
    fy_op_t *op = fy_op_get(w, NULL, FY_OP_TAG_RECV, r);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_status_t st = recv_set_buf(op, buf, len, v, n);
    if (st != FERRY_OK) {
        fy_op_put(op);
        r->status = st;
        return st;
    }
    op->tag_recv.tag = tag;
    op->tag_recv.tag_mask = tag_mask;
    st = FERRY_INPROGRESS;
    int matched = 0;
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_unexp)
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if (!matches(u->m.tag, tag, tag_mask))
            continue;
        fy_list_del(&u->link);
        matched = 1;
        st = recv_unexp(w, op, u);
        free(u);
        break;
    }
    if (!matched)
        fy_list_add_tail(&w->tag_posted, &op->wait_link);
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_req(w, r);
    return st;
}

ferry_status_t ferry_tag_recv(ferry_worker_t *w, void *buf, size_t len, uint64_t tag,
                              uint64_t tag_mask, ferry_request_t *req)
{
    if (w == NULL || (buf == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    return tag_recv(w, buf, len, NULL, 0, tag, tag_mask, req);
}

ferry_status_t ferry_tag_recvv(ferry_worker_t *w, const struct iovec *iov, size_t iovcnt,
                               uint64_t tag, uint64_t tag_mask, ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    struct iovec v[FY_MAX_IOV];
    long n = fy_iov_take("ferry_tag_recvv", iov, iovcnt, v);
    if (w == NULL || n < 0)
        return FERRY_ERR_INVALID_PARAM;
    return tag_recv(w, NULL, 0, v, (size_t)n, tag, tag_mask, req);
}

static ferry_status_t tag_send(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                               ferry_request_t *req)
{
    /* Sends given no request go eager: the data is copied at once, so the call can return. */
    if (req == NULL || len <= ep->tag_rndv_thresh)
        return fy_tag_eager_send(ep, tag, buf, len, req);
    struct iovec iov = {(void *)buf, len};
    if (len <= ep->tag_staged_max)
        return fy_tag_staged_send(ep, tag, &iov, 1, req);
    return fy_tag_rndv_send(ep, tag, &iov, 1, req);
}

/* The worker's lock only where it is one (FERRY_WORKER_THREAD_MULTI): single-threaded, the
 * send is a tail call, with no frame kept for a guard's cleanup (the 8-byte rate's path). */
ferry_status_t ferry_tag_send(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                              ferry_request_t *req)
{
    if (ep == NULL || (buf == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    ferry_worker_t *w = ep->worker;
    if (FY_LIKELY(!FY_WORKER_MT(w)))
        return tag_send(ep, tag, buf, len, req);
    FY_WORKER_LOCK(w);
    ferry_status_t st = tag_send(ep, tag, buf, len, req);
    FY_WORKER_UNLOCK(w);
    return st;
}

/* The sends of pieces (v: non-empty pieces), plain or synchronous. */
static ferry_status_t tag_sendv(ferry_ep_t *ep, uint64_t tag, const struct iovec *v, size_t n,
                                int sync, ferry_request_t *req)
{
    size_t len = fy_iov_total(v, n);
    if (!sync) {
        if (req == NULL || len <= ep->tag_rndv_thresh)
            return fy_tag_eager_sendv(ep, &tag, sizeof(tag), v, n, req);
        if (len <= ep->tag_staged_max)
            return fy_tag_staged_send(ep, tag, v, n, req);
        return fy_tag_rndv_send(ep, tag, v, n, req);
    }
    /* Synchronous: given no request, block until matched (progressing this worker). */
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        fy_request_local_init(&local);
        r = &local;
    }
    ferry_status_t st = len <= ep->tag_rndv_thresh ? fy_tag_ssend_eager(ep, tag, v, n, r)
                                                   : fy_tag_rndv_send(ep, tag, v, n, r);
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_req(ep->worker, r);
    return st;
}

ferry_status_t ferry_tag_sendv(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov, size_t iovcnt,
                               ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    struct iovec v[FY_MAX_IOV];
    long n = fy_iov_take("ferry_tag_sendv", iov, iovcnt, v);
    if (ep == NULL || n < 0)
        return FERRY_ERR_INVALID_PARAM;
    return tag_sendv(ep, tag, v, (size_t)n, 0, req);
}

ferry_status_t ferry_tag_ssend(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                               ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    if (ep == NULL || (buf == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    struct iovec v = {(void *)buf, len};
    return tag_sendv(ep, tag, &v, len != 0, 1, req);
}

ferry_status_t ferry_tag_ssendv(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                size_t iovcnt, ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    struct iovec v[FY_MAX_IOV];
    long n = fy_iov_take("ferry_tag_ssendv", iov, iovcnt, v);
    if (ep == NULL || n < 0)
        return FERRY_ERR_INVALID_PARAM;
    return tag_sendv(ep, tag, v, (size_t)n, 1, req);
}

ferry_status_t ferry_tag_probe(ferry_worker_t *w, uint64_t tag, uint64_t tag_mask,
                               ferry_tag_info_t *info)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || info == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_unexp)
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if (matches(u->m.tag, tag, tag_mask)) {
            info->tag = u->m.tag;
            info->length = unexp_msg_len(u);
            return FERRY_OK;
        }
    }
    return FERRY_ERR_NO_MESSAGE;
}

/* ------------------------------------------------------------------------------------------ */
/* Matched probe and receive                                                                   */
/* ------------------------------------------------------------------------------------------ */

ferry_status_t ferry_tag_mprobe(ferry_worker_t *w, uint64_t tag, uint64_t tag_mask,
                                ferry_tag_info_t *info, ferry_tag_message_t **msg_p)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || info == NULL || msg_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_unexp)
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if (!matches(u->m.tag, tag, tag_mask))
            continue;
        fy_list_del(&u->link);
        fy_list_add_tail(&w->tag_mprobed, &u->link);
        /* matched now: a synchronous sender hears it at once */
        if ((u->m.flags & TAG_F_SYNC) && unexp_ep_alive(w, u) && fy_tag_ep_usable(u->ep))
            fy_tag_sync_ack(u->ep, &u->m);
        u->m.flags &= (uint8_t)~TAG_F_SYNC;
        info->tag = u->m.tag;
        info->length = unexp_msg_len(u);
        *msg_p = (ferry_tag_message_t *)u;
        return FERRY_OK;
    }
    return FERRY_ERR_NO_MESSAGE;
}

/* The mprobed message msg of w, taken off tag_mprobed; NULL (logged) if it is not one. */
static fy_tag_unexp_t *take_mprobed(ferry_worker_t *w, ferry_tag_message_t *msg)
{
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_mprobed)
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if ((void *)u == (void *)msg) {
            fy_list_del(&u->link);
            return u;
        }
    }
    fy_error("ferry_tag_mrecv: %p is not a message ferry_tag_mprobe gave on this worker (or it "
             "was received already)",
             (void *)msg);
    return NULL;
}

static ferry_status_t tag_mrecv(ferry_worker_t *w, ferry_tag_message_t *msg, void *buf, size_t len,
                                const struct iovec *v, size_t n, ferry_request_t *req)
{
    fy_tag_unexp_t *u = take_mprobed(w, msg);
    if (u == NULL)
        return FERRY_ERR_INVALID_PARAM;
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        fy_request_local_init(&local);
        r = &local;
    }
    fy_op_t *op = fy_op_get(w, NULL, FY_OP_TAG_RECV, r);
    ferry_status_t st = op == NULL ? FERRY_ERR_NO_MEMORY : recv_set_buf(op, buf, len, v, n);
    if (st != FERRY_OK) {
        if (op != NULL) {
            fy_op_put(op);
            r->status = st;
        }
        fy_list_add_head(&w->tag_mprobed, &u->link); /* still the caller's: try again */
        return st;
    }
    op->tag_recv.tag = u->m.tag;
    op->tag_recv.tag_mask = ~0ull;
    st = recv_unexp(w, op, u);
    free(u);
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_req(w, r);
    return st;
}

ferry_status_t ferry_tag_mrecv(ferry_worker_t *w, ferry_tag_message_t *msg, void *buf, size_t len,
                               ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || msg == NULL || (buf == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    return tag_mrecv(w, msg, buf, len, NULL, 0, req);
}

ferry_status_t ferry_tag_mrecvv(ferry_worker_t *w, ferry_tag_message_t *msg,
                                const struct iovec *iov, size_t iovcnt, ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    struct iovec v[FY_MAX_IOV];
    long n = fy_iov_take("ferry_tag_mrecvv", iov, iovcnt, v);
    if (w == NULL || msg == NULL || n < 0)
        return FERRY_ERR_INVALID_PARAM;
    return tag_mrecv(w, msg, NULL, 0, v, (size_t)n, req);
}

/* ------------------------------------------------------------------------------------------ */
/* Cancel                                                                                      */
/* ------------------------------------------------------------------------------------------ */

int fy_tag_unqueue(ferry_ep_t *ep, fy_op_t *op)
{
    fy_queue_t *q = &ep->pending;
    for (fy_qelem_t **pp = &q->head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp != &op->q)
            continue;
        *pp = op->q.next;
        if (q->ptail == &op->q.next)
            q->ptail = pp;
        op->q.next = NULL;
        return 1;
    }
    return 0;
}

ferry_status_t ferry_request_cancel(ferry_worker_t *w, ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || req == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_op_t *op = fy_op_of_req(req);
    if (op == NULL || req->status != FERRY_INPROGRESS)
        return FERRY_ERR_NO_ELEM; /* completed already (or never started) */
    if (op->worker != w) {
        fy_error("ferry_request_cancel: the request belongs to another worker");
        return FERRY_ERR_INVALID_PARAM;
    }
    if (op->type == FY_OP_TAG_RECV && op->wait_id == 0 && fy_list_is_linked(&op->wait_link)) {
        fy_list_del(&op->wait_link);
        fy_worker_complete_later(w, op, FERRY_ERR_CANCELED);
        return FERRY_OK;
    }
    /* A send, put or get still waiting on its endpoint's queue has not started: drop it. */
    if ((fy_op_flags(op) & FY_OP_F_UNQUEUE) && op->ep != NULL && op->parent == NULL &&
        fy_tag_unqueue(op->ep, op)) {
        fy_worker_complete_later(w, op, FERRY_ERR_CANCELED);
        return FERRY_OK;
    }
    if (op->type == FY_OP_TAG_SEND && fy_tag_send_cancel(op))
        return FERRY_OK;
    fy_debug("ferry_request_cancel: the %s operation has started (matched or on the wire): it "
             "completes on its own",
             fy_op_ops[op->type]->name);
    return FERRY_ERR_BUSY;
}

void fy_tag_init_worker(ferry_worker_t *w)
{
    fy_list_init(&w->tag_posted);
    fy_list_init(&w->tag_unexp);
    fy_list_init(&w->tag_mprobed);
    fy_tag_eager_init_worker(w);
    fy_tag_rndv_init_worker(w);
}

void fy_tag_cleanup_worker(ferry_worker_t *w)
{
    fy_list_t *pos, *tmp;
    fy_list_for_each_safe(pos, tmp, &w->tag_unexp)
    {
        fy_list_del(pos);
        free(fy_container_of(pos, fy_tag_unexp_t, link));
    }
    fy_list_for_each_safe(pos, tmp, &w->tag_mprobed)
    {
        fy_list_del(pos);
        free(fy_container_of(pos, fy_tag_unexp_t, link));
    }
    fy_list_for_each_safe(pos, tmp, &w->tag_posted)
    {
        fy_op_t *op = fy_container_of(pos, fy_op_t, wait_link);
        fy_list_del(&op->wait_link);
        fy_worker_complete_later(w, op, FERRY_ERR_CANCELED);
    }
}
