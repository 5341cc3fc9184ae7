/*
 * tag_rndv_am.c - the am scheme of tagged rendezvous: RTS -> CTS -> DATA.
 *
 * The receive that matched an RTS (or declined an RTS_GET: tag_rndv_get.c) enters the wait
 * table under a wait id of its own and answers CTS carrying it; the sender then sends DATA,
 * an AM from the caller's memory whose request is the user's, and the receiver copies it into
 * the user's buffer.  Any transport that carries AMs carries this scheme; it costs a round
 * trip before the data moves, and a copy at the receiver.
 *
 * A send of several pieces (ferry_tag_sendv) always takes this scheme: DATA goes from the
 * pieces as they are, the transport gathering them (and fragments cutting across them), unless
 * the lane takes fewer pieces at once than the message has: then they are gathered into one
 * copy first.  The receiver scatters DATA into its pieces (fy_tag_recv_deliver).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/tag_int.h"

ferry_status_t fy_tag_recv_rts(fy_op_t *op, ferry_ep_t *ep, uint64_t tag, size_t len,
                               uint64_t sender_wait_id, unsigned flags)
{
    ferry_worker_t *w = op->worker;
    op->type = FY_OP_TAG_RECV;
    op->wait_id = ++w->next_wait_id;
    ferry_status_t st = fy_hash_put(&w->waiting, op->wait_id, op);
    if (st != FERRY_OK) {
        op->wait_id = 0;
        return st;
    }
    op->ep = ep; /* so that the sender's failure fails this receive too */
    op->tag_recv.msg_tag = tag;
    op->tag_recv.msg_len = len;
    op->tag_recv.peer_wait_id = sender_wait_id; /* for an ABORT */
    fy_tag_msg_t m = {.type = TAG_CTS,
                      .flags = (uint8_t)flags,
                      .tag = tag,
                      .len = len,
                      .wait_id = sender_wait_id,
                      .arg = op->wait_id};
    st = fy_tag_rndv_ctl(ep, &m);
    if (st < 0) {
        fy_hash_del(&w->waiting, op->wait_id);
        op->wait_id = 0;
    }
    return st;
}

void fy_tag_send_data(fy_op_t *op, uint64_t recv_wait_id)
{
    ferry_worker_t *w = op->worker;
    ferry_ep_t *ep = op->ep;
    ferry_request_t *req = op->req;
    const fy_op_tag_send_t *s = &op->tag_send;
    /* The user's request moves from the RTS op to the AM op that sends the data. */
    op->req = NULL;
    fy_tag_msg_t m = {.type = TAG_DATA, .tag = s->tag, .len = s->len, .wait_id = recv_wait_id};
    struct iovec one = {(void *)s->buf, s->len};
    const struct iovec *iov = s->iovcnt != 0 ? (const struct iovec *)s->buf : &one;
    size_t iovcnt = s->iovcnt != 0 ? s->iovcnt : s->len != 0;
    ferry_status_t st;
    if (fy_tag_lane_takes(ep, iovcnt)) {
        /* from the caller's pieces, gathered by the transport (or fragments of them) */
        st = fy_am_send(ep, FY_AM_ID_TAG_RNDV, &m, sizeof(m), iov, iovcnt, req);
    } else {
        /* more pieces than the lane takes at once: gathered here, sent as a copy */
        void *tmp = malloc(s->len);
        st = FERRY_ERR_NO_MEMORY;
        if (tmp != NULL) {
            fy_iov_gather(tmp, iov, iovcnt);
            one.iov_base = tmp;
            st = fy_am_send(ep, FY_AM_ID_TAG_RNDV, &m, sizeof(m), &one, 1, NULL);
            free(tmp);
        }
    }
    if (st != FERRY_INPROGRESS) {
        /* done (or failed) at once: the request still owes its one callback */
        fy_op_t *done = fy_op_get(w, NULL, FY_OP_AM, req);
        if (done != NULL)
            fy_worker_complete_later(w, done, st);
    }
    fy_op_finish(op, FERRY_OK); /* releases the RTS op (and a registration it holds) */
}

void fy_tag_recv_data(ferry_worker_t *w, const fy_tag_msg_t *m, const void *data, size_t len)
{
    fy_op_t *op = fy_hash_get(&w->waiting, m->wait_id);
    if (op == NULL || op->type != FY_OP_TAG_RECV) {
        w->drops_unknown_ep++;
        return;
    }
    fy_hash_del(&w->waiting, m->wait_id);
    op->wait_id = 0;
    fy_tag_recv_deliver(op, m->tag, data, len);
}
