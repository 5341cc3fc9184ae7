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
 */
#include <stdlib.h>
#include <string.h>

#include "proto/tag_int.h"

static int matches(uint64_t msg_tag, uint64_t tag, uint64_t mask)
{
    return ((msg_tag ^ tag) & mask) == 0;
}

static size_t unexp_msg_len(const fy_tag_unexp_t *u)
{
    return u->m.type == TAG_EAGER ? u->len : u->m.len;
}

void fy_tag_recv_deliver(fy_op_t *op, uint64_t tag, const void *data, size_t len)
{
    ferry_status_t st = FERRY_OK;
    size_t n = len;
    if (len > op->tag_recv.len) {
        n = op->tag_recv.len;
        st = FERRY_ERR_MESSAGE_TRUNCATED;
    }
    if (n != 0)
        memcpy(op->tag_recv.buf, data, n);
    if (op->req != NULL) {
        op->req->tag = tag;
        op->req->length = n;
    }
    fy_op_finish(op, st); /* handlers run from progress: the callback may run now */
}

void fy_tag_match_or_queue(ferry_worker_t *w, const fy_tag_msg_t *mp, const void *data, size_t len,
                           ferry_ep_t *ep)
{
    fy_tag_msg_t m = *mp;
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_posted)
    {
        fy_op_t *op = fy_container_of(pos, fy_op_t, wait_link);
        if (!matches(m.tag, op->tag_recv.tag, op->tag_recv.tag_mask))
            continue;
        fy_list_del(&op->wait_link);
        ferry_status_t st;
        switch (m.type) {
        case TAG_EAGER:
            fy_tag_recv_deliver(op, m.tag, data, len);
            break;
        case TAG_RTS:
            st = fy_tag_recv_rts(op, ep, m.tag, m.len, m.wait_id, 0);
            if (st < 0)
                fy_worker_complete_later(w, op, st);
            break;
        default:
            st = fy_tag_recv_rts_get(op, ep, &m, data, len);
            if (st != FERRY_INPROGRESS)
                fy_op_finish(op, st);
        }
        return;
    }
    size_t keep = m.type == TAG_RTS ? 0 : len;
    fy_tag_unexp_t *u = malloc(sizeof(*u) + keep);
    if (u == NULL) {
        fy_error("out of memory for an unexpected tagged message of %zu bytes: dropped",
                 m.type == TAG_EAGER ? len : (size_t)m.len);
        return;
    }
    u->ep = ep;
    u->ep_id = ep->id;
    u->m = m;
    u->len = keep;
    if (keep != 0)
        memcpy(u->data, data, keep);
    fy_list_add_tail(&w->tag_unexp, &u->link);
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
        if (n != 0)
            memcpy(op->tag_recv.buf, u->data, n);
        r->tag = u->m.tag;
        r->length = n;
        st = u->len <= op->tag_recv.len ? FERRY_OK : FERRY_ERR_MESSAGE_TRUNCATED;
    } else if (!unexp_ep_alive(w, u)) {
        st = FERRY_ERR_NOT_CONNECTED;
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

ferry_status_t ferry_tag_recv(ferry_worker_t *w, void *buf, size_t len, uint64_t tag,
                              uint64_t tag_mask, ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || (buf == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        memset(&local, 0, sizeof(local));
        r = &local;
    }
    fy_op_t *op = fy_op_get(w, NULL, FY_OP_TAG_RECV, r);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->tag_recv.buf = buf;
    op->tag_recv.len = len;
    op->tag_recv.tag = tag;
    op->tag_recv.tag_mask = tag_mask;
    ferry_status_t st = FERRY_INPROGRESS;
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
        while ((st = r->status) == FERRY_INPROGRESS)
            ferry_worker_wait(w, 100);
    return st;
}

ferry_status_t ferry_tag_send(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                              ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    if (ep == NULL || (buf == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    /* Sends given no request go eager: the data is copied at once, so the call can return. */
    if (req == NULL || len <= ep->tag_rndv_thresh)
        return fy_tag_eager_send(ep, tag, buf, len, req);
    return fy_tag_rndv_send(ep, tag, buf, len, req);
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

ferry_status_t ferry_request_cancel(ferry_worker_t *w, ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || req == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_op_t *op = fy_op_of_req(req);
    if (op == NULL || req->status != FERRY_INPROGRESS)
        return FERRY_ERR_NO_ELEM; /* completed already (or never started) */
    if (op->type == FY_OP_TAG_RECV && op->wait_id == 0 && fy_list_is_linked(&op->wait_link)) {
        fy_list_del(&op->wait_link);
        fy_worker_complete_later(w, op, FERRY_ERR_CANCELED);
        return FERRY_OK;
    }
    return FERRY_ERR_BUSY; /* matched or on the wire: it will complete on its own */
}

void fy_tag_init_worker(ferry_worker_t *w)
{
    fy_list_init(&w->tag_posted);
    fy_list_init(&w->tag_unexp);
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
    fy_list_for_each_safe(pos, tmp, &w->tag_posted)
    {
        fy_op_t *op = fy_container_of(pos, fy_op_t, wait_link);
        fy_list_del(&op->wait_link);
        fy_worker_complete_later(w, op, FERRY_ERR_CANCELED);
    }
}
