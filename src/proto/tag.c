/*
 * tag.c - tagged messages with MPI matching semantics, built on the AM lane.
 *
 * A receive names a tag and a mask; a message matches the first posted receive (in posting
 * order) whose (tag & mask) equals the message's (tag & mask).  Messages that find no receive
 * wait in the unexpected queue, in arrival order; a later receive takes the first that
 * matches.  The AM lane delivers each sender's messages in order, so matching is ordered per
 * sender.
 *
 * Protocols:
 *   eager       (AM id FY_AM_ID_TAG, header: the 8-byte tag alone, so a small message fits one
 *               cache line) messages up to FERRY_TAG_RNDV_THRESH travel whole; an unexpected
 *               one is copied once into the unexpected queue.
 *   rendezvous  (AM id FY_AM_ID_TAG_RNDV, header fy_tag_msg_t) a larger message sends RTS (tag, length, its wait id) only; the receiver that
 *               matches it answers CTS (its own wait id), and the sender then sends DATA from
 *               the caller's memory.  An unexpected large message costs the receiver nothing
 *               but a small descriptor, never a copy of the data.
 * Sends given no request always go eager (the data is copied at once, so the call can return).
 * Wait ids are looked up in a hash, never trusted as pointers.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

enum { TAG_EAGER, TAG_RTS, TAG_CTS, TAG_DATA };

typedef struct fy_tag_msg {
    uint8_t type;
    uint8_t pad[7];
    uint64_t tag;
    uint64_t len;     /* RTS: the message's length */
    uint64_t wait_id; /* RTS: the sender's; CTS: the sender's (echo); DATA: the receiver's */
    uint64_t wait_id2;/* CTS: the receiver's */
} fy_tag_msg_t;

/* An unexpected message: eager data, or a rendezvous descriptor. */
typedef struct fy_tag_unexp {
    fy_list_t link;
    ferry_ep_t *ep;
    uint32_t ep_id;
    int rts;
    uint64_t tag;
    size_t len;
    uint64_t sender_wait_id;
    uint8_t data[];
} fy_tag_unexp_t;

static int matches(uint64_t msg_tag, uint64_t tag, uint64_t mask)
{
    return ((msg_tag ^ tag) & mask) == 0;
}

/* The receive side of a completed match: copy, truncate if need be, complete. */
static void recv_deliver(fy_op_t *op, uint64_t tag, const void *data, size_t len)
{
    ferry_status_t st = FERRY_OK;
    size_t n = len;
    if (len > op->len) {
        n = op->len;
        st = FERRY_ERR_MESSAGE_TRUNCATED;
    }
    if (n != 0)
        memcpy(op->buf, data, n);
    if (op->req != NULL) {
        op->req->tag = tag;
        op->req->length = n;
    }
    fy_op_finish(op, st); /* handlers run from progress: the callback may run now */
}

static ferry_status_t send_ctl(ferry_ep_t *ep, fy_tag_msg_t *m)
{
    return fy_am_send(ep, FY_AM_ID_TAG_RNDV, m, sizeof(*m), NULL, 0, NULL);
}

/* A receive matched an RTS: ask the sender for the data. */
static ferry_status_t recv_rts(fy_op_t *op, ferry_ep_t *ep, uint64_t tag, size_t len,
                               uint64_t sender_wait_id)
{
    ferry_worker_t *w = op->worker;
    op->wait_id = ++w->next_wait_id;
    ferry_status_t st = fy_hash_put(&w->waiting, op->wait_id, op);
    if (st != FERRY_OK) {
        op->wait_id = 0;
        return st;
    }
    op->ep = ep; /* so that the sender's failure fails this receive too */
    fy_tag_msg_t m = {.type = TAG_CTS, .tag = tag, .len = len, .wait_id = sender_wait_id,
                      .wait_id2 = op->wait_id};
    st = send_ctl(ep, &m);
    if (st < 0) {
        fy_hash_del(&w->waiting, op->wait_id);
        op->wait_id = 0;
    }
    return st;
}

static int unexp_ep_alive(ferry_worker_t *w, const fy_tag_unexp_t *u)
{
    return fy_worker_ep_lookup(w, u->ep_id) == u->ep && u->ep->state != FY_EP_CLOSED;
}

ferry_status_t ferry_tag_recv(ferry_worker_t *w, void *buf, size_t len, uint64_t tag,
                              uint64_t tag_mask, ferry_request_t *req)
{
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
    op->buf = buf;
    op->len = len;
    op->operand = tag;
    op->compare = tag_mask;
    ferry_status_t st = FERRY_INPROGRESS;
    int matched = 0;
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_unexp)
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if (!matches(u->tag, tag, tag_mask))
            continue;
        fy_list_del(&u->link);
        matched = 1;
        if (!u->rts) {
            /* complete now: no callback (the contract for FERRY_OK) */
            size_t n = u->len <= len ? u->len : len;
            if (n != 0)
                memcpy(buf, u->data, n);
            r->tag = u->tag;
            r->length = n;
            st = u->len <= len ? FERRY_OK : FERRY_ERR_MESSAGE_TRUNCATED;
            r->status = st;
            fy_op_put(op);
        } else if (!unexp_ep_alive(w, u)) {
            r->status = st = FERRY_ERR_NOT_CONNECTED;
            fy_op_put(op);
        } else {
            st = recv_rts(op, u->ep, u->tag, u->len, u->sender_wait_id);
            if (st < 0)
                fy_op_put(op);
            else
                st = FERRY_INPROGRESS;
        }
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
    if (ep == NULL || (buf == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    ferry_worker_t *w = ep->worker;
    if (req == NULL || len <= w->ctx->opts.tag_rndv_thresh) {
        /* eager: the header is the tag alone, so a small message stays in one cache line */
        struct iovec iov = {(void *)buf, len};
        return fy_am_send(ep, FY_AM_ID_TAG, &tag, sizeof(tag), &iov, len != 0, req);
    }
    if (ep->state == FY_EP_FAILED)
        return ep->failure;
    if (ep->state == FY_EP_CLOSED)
        return FERRY_ERR_NOT_CONNECTED;
    fy_op_t *op = fy_op_get(w, ep, FY_OP_TAG_SEND, req);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->buf = (void *)buf;
    op->len = len;
    op->operand = tag;
    op->wait_id = ++w->next_wait_id;
    ferry_status_t st = fy_hash_put(&w->waiting, op->wait_id, op);
    if (st != FERRY_OK) {
        op->wait_id = 0;
        fy_op_put(op);
        return st;
    }
    fy_tag_msg_t m = {.type = TAG_RTS, .tag = tag, .len = len, .wait_id = op->wait_id};
    st = send_ctl(ep, &m);
    if (st < 0) {
        fy_hash_del(&w->waiting, op->wait_id);
        op->wait_id = 0;
        fy_op_put(op);
        return st;
    }
    op->counted = 1;
    ep->outstanding++;
    return FERRY_INPROGRESS;
}

ferry_status_t ferry_tag_probe(ferry_worker_t *w, uint64_t tag, uint64_t tag_mask,
                               ferry_tag_info_t *info)
{
    if (w == NULL || info == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_unexp)
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if (matches(u->tag, tag, tag_mask)) {
            info->tag = u->tag;
            info->length = u->len;
            return FERRY_OK;
        }
    }
    return FERRY_ERR_NO_MESSAGE;
}

ferry_status_t ferry_request_cancel(ferry_worker_t *w, ferry_request_t *req)
{
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

/* The DATA of a rendezvous, once the receiver asked for it. */
static void send_data(ferry_worker_t *w, fy_op_t *op, uint64_t recv_wait_id)
{
    ferry_ep_t *ep = op->ep;
    ferry_request_t *req = op->req;
    void *buf = op->buf;
    size_t len = op->len;
    uint64_t tag = op->operand;
    /* The user's request moves from the RTS op to the AM op that sends the data. */
    op->req = NULL;
    fy_tag_msg_t m = {.type = TAG_DATA, .tag = tag, .len = len, .wait_id = recv_wait_id};
    struct iovec iov = {buf, len};
    ferry_status_t st = fy_am_send(ep, FY_AM_ID_TAG_RNDV, &m, sizeof(m), &iov, 1, req);
    if (st != FERRY_INPROGRESS) {
        /* done (or failed) at once: the request still owes its one callback */
        fy_op_t *done = fy_op_get(w, NULL, FY_OP_AM, req);
        if (done != NULL)
            fy_worker_complete_later(w, done, st);
    }
    fy_op_finish(op, FERRY_OK); /* releases the RTS op, counts it off the endpoint */
}

/* An eager message or an RTS arrived: the first posted receive that matches takes it;
 * otherwise it waits in the unexpected queue. */
static ferry_status_t tag_match_or_queue(ferry_worker_t *w, const fy_tag_msg_t *mp,
                                         const void *data, size_t len, ferry_ep_t *ep)
{
    fy_tag_msg_t m = *mp;
    size_t mlen = m.type == TAG_EAGER ? len : m.len;
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_posted)
    {
        fy_op_t *op = fy_container_of(pos, fy_op_t, wait_link);
        if (!matches(m.tag, op->operand, op->compare))
            continue;
        fy_list_del(&op->wait_link);
        if (m.type == TAG_EAGER) {
            recv_deliver(op, m.tag, data, len);
        } else {
            ferry_status_t st = recv_rts(op, ep, m.tag, mlen, m.wait_id);
            if (st < 0)
                fy_worker_complete_later(w, op, st);
        }
        return FERRY_OK;
    }
    fy_tag_unexp_t *u = malloc(sizeof(*u) + (m.type == TAG_EAGER ? len : 0));
    if (u == NULL) {
        fy_error("out of memory for an unexpected tagged message of %zu bytes: dropped", mlen);
        return FERRY_OK;
    }
    u->ep = ep;
    u->ep_id = ep->id;
    u->rts = m.type == TAG_RTS;
    u->tag = m.tag;
    u->len = mlen;
    u->sender_wait_id = m.wait_id;
    if (!u->rts && len != 0)
        memcpy(u->data, data, len);
    fy_list_add_tail(&w->tag_unexp, &u->link);
    return FERRY_OK;
}

static ferry_status_t tag_eager_handler(void *arg, const void *header, size_t header_len,
                                        const void *data, size_t len, ferry_ep_t *ep)
{
    ferry_worker_t *w = arg;
    fy_tag_msg_t m = {.type = TAG_EAGER};
    if (header_len != sizeof(m.tag)) {
        w->drops_malformed++;
        return FERRY_OK;
    }
    memcpy(&m.tag, header, sizeof(m.tag));
    return tag_match_or_queue(w, &m, data, len, ep);
}

static ferry_status_t tag_handler(void *arg, const void *header, size_t header_len,
                                  const void *data, size_t len, ferry_ep_t *ep)
{
    ferry_worker_t *w = arg;
    fy_tag_msg_t m;
    if (header_len != sizeof(m)) {
        w->drops_malformed++;
        return FERRY_OK;
    }
    memcpy(&m, header, sizeof(m));
    switch (m.type) {
    case TAG_RTS:
        return tag_match_or_queue(w, &m, data, len, ep);
    case TAG_CTS: {
        fy_op_t *op = fy_hash_del(&w->waiting, m.wait_id);
        if (op == NULL || op->type != FY_OP_TAG_SEND || op->ep != ep) {
            if (op != NULL)
                fy_hash_put(&w->waiting, m.wait_id, op);
            w->drops_unknown_ep++;
            return FERRY_OK;
        }
        op->wait_id = 0;
        send_data(w, op, m.wait_id2);
        return FERRY_OK;
    }
    case TAG_DATA: {
        fy_op_t *op = fy_hash_del(&w->waiting, m.wait_id);
        if (op == NULL || op->type != FY_OP_TAG_RECV) {
            if (op != NULL)
                fy_hash_put(&w->waiting, m.wait_id, op);
            w->drops_unknown_ep++;
            return FERRY_OK;
        }
        op->wait_id = 0;
        recv_deliver(op, m.tag, data, len);
        return FERRY_OK;
    }
    default:
        w->drops_malformed++;
    }
    return FERRY_OK;
}

void fy_tag_init_worker(ferry_worker_t *w)
{
    fy_list_init(&w->tag_posted);
    fy_list_init(&w->tag_unexp);
    fy_am_set_handler(w, FY_AM_ID_TAG, tag_eager_handler, w);
    fy_am_set_handler(w, FY_AM_ID_TAG_RNDV, tag_handler, w);
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
