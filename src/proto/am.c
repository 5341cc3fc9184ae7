/*
 * am.c - active messages: the send paths by size and the receive dispatch.
 *
 * Sending picks the transport operation by total size: am_short (the header, user header and
 * data copied straight into the transport: no allocation, no operation object), am_bcopy (the
 * same through a transport buffer), or am_zcopy (sent from the caller's memory, completed
 * later).  Only when the transport pushes back (FERRY_ERR_NO_RESOURCE), or for zcopy, does an
 * operation object come from the worker's pool; without a request the data is copied so the
 * call can return FERRY_OK at once.  What an endpoint holds (waiting, or carried by the
 * transport and not completed) is bounded (FERRY_MAX_QUEUED): past it a user's send returns
 * FERRY_ERR_NO_RESOURCE and takes nothing.
 *
 * A message larger than the lane's one-operation maximum goes as fragments (FY_AM_ID_FRAG,
 * proto_int.h), each a zcopy from the caller's memory (or the copy), under one parent op that
 * completes when every fragment has; the receiver gathers them and runs the handler once.
 * Fragments rather than a rendezvous: every transport carries AMs, not every one reads remote
 * memory.  Fragments may be spread over several lanes (multi-rail): rails.c numbers them,
 * gathers them and keeps the ep's order.
 *
 * Receiving checks everything that came from outside before trusting it: the header length,
 * the AM id, that a handler is registered, and which endpoint the message belongs to.  Bad
 * input is counted and dropped with a log line, never delivered.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

static void am_comp_cb(fy_tl_comp_t *comp, ferry_status_t st)
{
    fy_op_t *op = fy_container_of(comp, fy_op_t, comp);
    fy_worker_complete_later(op->worker, op, st);
}

/* Build the proto header for ep into buf; returns its length (8, or 16 naming the sender). */
static inline size_t am_proto_hdr(ferry_ep_t *ep, unsigned id, size_t header_len, uint8_t *buf)
{
    fy_am_hdr_t h;
    unsigned f = (unsigned)header_len;
    if (FY_UNLIKELY(id >= FY_AM_ID_INTERNAL_BASE)) { /* ferry's own: its own id space */
        id -= FY_AM_ID_INTERNAL_BASE;
        f |= FY_AM_F_INT;
    }
    h.id = (uint16_t)id;
    if (FY_LIKELY(ep->state == FY_EP_CONNECTED)) {
        h.len_flags = (uint16_t)f;
        h.ep_id = ep->remote_id;
        memcpy(buf, &h, sizeof(h));
        return sizeof(h);
    }
    h.len_flags = (uint16_t)(f | FY_AM_F_SRC);
    h.ep_id = ep->id;
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), &ep->worker->uuid, 8);
    return sizeof(h) + 8;
}

/* Start (or retry) an AM operation on its lane: the start of FY_OP_AM in op.c's table. */
ferry_status_t fy_am_op_start(fy_op_t *op)
{
    ferry_ep_t *ep = op->ep;
    fy_lane_t *lane = op->rail != NULL ? op->rail : &ep->lanes[FY_LANE_AM]; /* rails.c */
    const fy_tl_ops_t *ops = lane->iface->tl->ops;
    const fy_tl_iface_attr_t *attr = &lane->iface->attr;
    struct iovec iov[FY_MAX_IOV + 2];
    size_t n = 0;
    if (FY_UNLIKELY(op->iovcnt > 1 && op->iovcnt + 2 > attr->max_iov && op->copy == NULL)) {
        /* more pieces than the lane gathers (with the two headers): one copy of the data,
         * the op's own, freed with it */
        size_t dlen = fy_iov_total(op->iov, op->iovcnt);
        uint8_t *c = malloc(dlen);
        if (c == NULL)
            return FERRY_ERR_NO_MEMORY;
        fy_iov_gather(c, op->iov, op->iovcnt);
        op->copy = c;
        op->iov[0].iov_base = c;
        op->iov[0].iov_len = dlen;
        op->iovcnt = 1;
    }
    if (op->hdr_len != 0) {
        iov[n].iov_base = op->hdr;
        iov[n++].iov_len = op->hdr_len;
    }
    for (size_t i = 0; i < op->iovcnt; i++)
        iov[n++] = op->iov[i];
    size_t total = fy_iov_total(iov, n);
    ferry_status_t st;
    if (total <= attr->max_short && (attr->caps & FY_TL_CAP_AM_SHORT) && n <= attr->max_iov)
        st = ops->am_short(lane->tl_ep, (uint8_t)op->am_id, iov, n);
    else if (total <= attr->max_bcopy && (attr->caps & FY_TL_CAP_AM_BCOPY) && n <= attr->max_iov)
        st = ops->am_bcopy(lane->tl_ep, (uint8_t)op->am_id, iov, n);
    else if (total <= attr->max_zcopy && (attr->caps & FY_TL_CAP_AM_ZCOPY)) {
        /* the proto header as the transport header; user header + data from memory */
        op->comp.cb = am_comp_cb;
        iov[0].iov_base = op->hdr + op->proto_len;
        iov[0].iov_len = op->hdr_len - op->proto_len;
        struct iovec *zi = iov;
        size_t zn = n;
        if (iov[0].iov_len == 0) { /* no user header: do not hand the transport an empty piece */
            zi++;
            zn--;
        }
        st = ops->am_zcopy(lane->tl_ep, (uint8_t)op->am_id, op->hdr, op->proto_len, zi, zn,
                           &op->comp);
    } else {
        fy_error("active message of %zu bytes exceeds what %s carries (%zu)", total,
                 lane->iface->tl->name, attr->max_zcopy);
        return FERRY_ERR_INVALID_PARAM;
    }
    if (st == FERRY_OK || st == FERRY_INPROGRESS) {
        ep->stats.tx_msgs++;
        ep->stats.tx_bytes += total;
    }
    return st;
}

size_t fy_am_op_data(const fy_op_t *op)
{
    return op->hdr_len + fy_iov_total(op->iov, op->iovcnt);
}

static ferry_status_t check_send(ferry_ep_t *ep, unsigned id, const void *header, size_t header_len,
                                 size_t iovcnt)
{
    if (FY_UNLIKELY(ep == NULL || id >= FY_AM_ID_TOTAL || header_len > FERRY_AM_HEADER_MAX ||
                    (header == NULL && header_len != 0) || iovcnt > FY_MAX_IOV)) {
        if (ep != NULL && header_len > FERRY_AM_HEADER_MAX)
            fy_error("AM header of %zu bytes is over the limit of %d", header_len,
                     FERRY_AM_HEADER_MAX);
        return FERRY_ERR_INVALID_PARAM;
    }
    if (FY_UNLIKELY(ep->state == FY_EP_FAILED))
        return ep->failure;
    if (FY_UNLIKELY(ep->state == FY_EP_CLOSED))
        return FERRY_ERR_NOT_CONNECTED;
    return FERRY_OK;
}

/* Whether a message of total bytes (proto header included) may go by the fast path. */
static inline int am_fast_fits(const ferry_ep_t *ep, const fy_tl_iface_attr_t *attr, size_t total)
{
    return total <= attr->max_bcopy && FY_LIKELY(total <= ep->worker->ctx->opts.am_eager_max);
}

/* The tail of every fast send: iov[0..n) (total bytes, proto header first) to the lane's short
 * send, or its buffered one when too large for short; counted when the lane took it. */
static inline ferry_status_t am_send_lane(ferry_ep_t *ep, const fy_lane_t *lane,
                                          const fy_tl_iface_attr_t *attr, const struct iovec *iov,
                                          size_t n, size_t total)
{
    const fy_tl_ops_t *ops = lane->iface->tl->ops;
    ferry_status_t st = total <= attr->max_short ? ops->am_short(lane->tl_ep, FY_TLAM_MSG, iov, n)
                                                 : ops->am_bcopy(lane->tl_ep, FY_TLAM_MSG, iov, n);
    if (FY_LIKELY(st == FERRY_OK)) {
        ep->stats.tx_msgs++;
        ep->stats.tx_bytes += total;
    }
    return st;
}

/*
 * The fast path: copied into the transport at once, no operation object.  The data comes as
 * (one_base, one_len) when the caller had one contiguous piece, or as an iov otherwise: a
 * one-entry iovec built by the caller and reloaded here whole would stall on store forwarding.
 * Returns NO_RESOURCE when the slow path must take over (too big, or back-pressure).
 */
static inline ferry_status_t am_send_fast(ferry_ep_t *ep, unsigned id, const void *header,
                                          size_t header_len, const void *one_base, size_t one_len,
                                          const struct iovec *data, size_t iovcnt, size_t dlen)
{
    fy_lane_t *lane = &ep->lanes[FY_LANE_AM];
    const fy_tl_iface_attr_t *attr = &lane->iface->attr;
    if (FY_UNLIKELY(!fy_queue_is_empty(&ep->pending) || iovcnt + 2 > attr->max_iov))
        return FERRY_ERR_NO_RESOURCE;
    uint8_t ph[16];
    size_t plen = am_proto_hdr(ep, id, header_len, ph);
    size_t total = plen + header_len + dlen;
    if (!am_fast_fits(ep, attr, total))
        return FERRY_ERR_NO_RESOURCE;
    struct iovec iov[FY_MAX_IOV + 2];
    size_t n = 0;
    iov[n].iov_base = ph;
    iov[n++].iov_len = plen;
    if (header_len != 0) {
        iov[n].iov_base = (void *)header;
        iov[n++].iov_len = header_len;
    }
    if (data == NULL) {
        if (one_len != 0) {
            iov[n].iov_base = (void *)one_base;
            iov[n++].iov_len = one_len;
        }
    } else {
        for (size_t i = 0; i < iovcnt; i++) {
            iov[n].iov_base = data[i].iov_base;
            iov[n++].iov_len = data[i].iov_len;
        }
    }
    return am_send_lane(ep, lane, attr, iov, n, total);
}

static ferry_status_t am_send_slow(ferry_ep_t *ep, unsigned id, const void *header,
                                   size_t header_len, const struct iovec *data, size_t iovcnt,
                                   size_t dlen, ferry_request_t *req);

ferry_status_t fy_am_send(ferry_ep_t *ep, unsigned id, const void *header, size_t header_len,
                          const struct iovec *data, size_t iovcnt, ferry_request_t *req)
{
    ferry_status_t st = check_send(ep, id, header, header_len, iovcnt);
    if (FY_UNLIKELY(st != FERRY_OK))
        return st;
    size_t dlen = fy_iov_total(data, iovcnt);
    st = am_send_fast(ep, id, header, header_len, NULL, 0, data, iovcnt, dlen);
    if (FY_LIKELY(st != FERRY_ERR_NO_RESOURCE))
        return st;
    return am_send_slow(ep, id, header, header_len, data, iovcnt, dlen, req);
}

/*
 * An AM whose user header is one 8-byte word and whose data is one piece: the eager tagged
 * message.  On a connected endpoint with nothing queued, the proto header and the word go as
 * one 16-byte piece straight to the lane, with no size sum over an iov: the 8-byte tagged
 * message rate is this path.  (The connected test comes first so that the compiler knows the
 * proto header's length: the word lands at a constant offset.)  Anything else (wireup, a
 * queue, too large, back-pressure) takes fy_am_send.
 */
ferry_status_t fy_am_send_word(ferry_ep_t *ep, unsigned id, uint64_t word, const void *data,
                               size_t len, ferry_request_t *req)
{
    const fy_lane_t *lane = &ep->lanes[FY_LANE_AM];
    if (FY_LIKELY(ep->state == FY_EP_CONNECTED && fy_queue_is_empty(&ep->pending))) {
        const fy_tl_iface_attr_t *attr = &lane->iface->attr;
        uint64_t h[3]; /* the proto header (8 bytes here, 16 at most) and the word */
        size_t plen = am_proto_hdr(ep, id, sizeof(word), (uint8_t *)h);
        memcpy((uint8_t *)h + plen, &word, sizeof(word));
        size_t total = plen + sizeof(word) + len;
        if (FY_LIKELY(am_fast_fits(ep, attr, total) && attr->max_iov >= 2)) {
            struct iovec iov[2] = {{h, plen + sizeof(word)}, {(void *)data, len}};
            ferry_status_t st = am_send_lane(ep, lane, attr, iov, len != 0 ? 2 : 1, total);
            if (FY_LIKELY(st != FERRY_ERR_NO_RESOURCE))
                return st;
        }
    }
    struct iovec one = {(void *)data, len};
    return fy_am_send(ep, id, &word, sizeof(word), &one, len != 0, req);
}

/* Point out[] at bytes [off, off + len) of iov[0..n); returns the entries used. */
static size_t iov_slice(const struct iovec *iov, size_t n, size_t off, size_t len,
                        struct iovec *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n && len != 0; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        size_t take = iov[i].iov_len - off;
        if (take > len)
            take = len;
        out[k].iov_base = (uint8_t *)iov[i].iov_base + off;
        out[k++].iov_len = take;
        len -= take;
        off = 0;
    }
    return k;
}

/* The most one AM on ep's lane carries, proto header included, at most FERRY_AM_EAGER_MAX
 * (0: cannot tell yet). */
size_t fy_am_eager_max(const ferry_ep_t *ep)
{
    const fy_lane_t *lane = &ep->lanes[FY_LANE_AM];
    if (lane->iface == NULL)
        return 0;
    const fy_tl_iface_attr_t *attr = &lane->iface->attr;
    size_t m = (attr->caps & FY_TL_CAP_AM_ZCOPY) ? attr->max_zcopy : 0;
    if ((attr->caps & FY_TL_CAP_AM_BCOPY) && attr->max_bcopy > m)
        m = attr->max_bcopy;
    size_t cap = ep->worker->ctx->opts.am_eager_max;
    return m < cap ? m : cap;
}

/*
 * Send a message too large for one operation as fragments of at most `max` bytes each.  The
 * parent op (the user's request, and the copy when there is none) completes when its last
 * fragment does, with the first error among them.  The user header travels at the front of
 * the first fragment's bytes, kept in the parent's hdr until then.
 */
static ferry_status_t am_send_frags(ferry_ep_t *ep, unsigned id, const void *header,
                                    size_t header_len, const struct iovec *data, size_t iovcnt,
                                    size_t dlen, ferry_request_t *req, size_t max)
{
    ferry_worker_t *w = ep->worker;
    size_t room = max - 16 - sizeof(fy_am_frag_hdr_t);
    fy_op_t *parent = fy_op_get(w, NULL, FY_OP_AM, req);
    if (parent == NULL)
        return FERRY_ERR_NO_MEMORY;
    /* parent->iov: the user header (in parent->hdr), then the data */
    if (header_len != 0)
        memcpy(parent->hdr, header, header_len);
    parent->iov[0].iov_base = parent->hdr;
    parent->iov[0].iov_len = header_len;
    if (req == NULL && dlen != 0) {
        parent->copy = malloc(dlen);
        if (parent->copy == NULL) {
            fy_op_put(parent);
            return FERRY_ERR_NO_MEMORY;
        }
        fy_iov_gather(parent->copy, data, iovcnt);
        parent->iov[1].iov_base = parent->copy;
        parent->iov[1].iov_len = dlen;
        parent->iovcnt = 2;
    } else {
        for (size_t i = 0; i < iovcnt; i++)
            parent->iov[1 + i] = data[i];
        parent->iovcnt = 1 + iovcnt;
    }
    size_t total = header_len + dlen, off, len;
    fy_op_parent_init(parent);
    ferry_status_t st = FERRY_OK;
    fy_rails_cursor_t cur; /* the fragments spread over the rails (rails.c) */
    fy_lane_t *rail;
    uint32_t tag;
    fy_rails_begin(ep, total, room, &cur);
    while (st >= 0 && (len = fy_rails_next(ep, &cur, &off, &rail, &tag)) != 0) {
        fy_op_t *op = fy_op_get(w, ep, FY_OP_AM, NULL);
        if (op == NULL) {
            st = FERRY_ERR_NO_MEMORY;
            break;
        }
        fy_am_frag_hdr_t fh = {.total = total,
                               .offset = off,
                               .id = (uint32_t)id,
                               .user_hdr_len = (uint16_t)header_len,
                               .seq = tag};
        op->rail = rail;
        op->am_id = FY_TLAM_MSG;
        op->proto_len = am_proto_hdr(ep, FY_AM_ID_FRAG, sizeof(fh), op->hdr);
        memcpy(op->hdr + op->proto_len, &fh, sizeof(fh));
        op->hdr_len = op->proto_len + sizeof(fh);
        op->iovcnt = iov_slice(parent->iov, parent->iovcnt, off, len, op->iov);
        st = fy_ep_submit_child(ep, parent, op);
    }
    return fy_op_parent_end(parent, st < 0 ? st : FERRY_OK);
}

static ferry_status_t am_send_slow(ferry_ep_t *ep, unsigned id, const void *header,
                                   size_t header_len, const struct iovec *data, size_t iovcnt,
                                   size_t dlen, ferry_request_t *req)
{
    /* Slow path: an operation object (zcopy, or queued behind back-pressure).  A user's
     * message (AM or eager tagged) that would pass FERRY_MAX_QUEUED is refused; ferry's own
     * (answers, wireup, control) never are: the peer waits for them. */
    if ((id < FY_AM_ID_INTERNAL_BASE || id == FY_AM_ID_TAG) &&
        fy_ep_queue_full(ep, header_len + dlen))
        return FERRY_ERR_NO_RESOURCE;
    size_t max = fy_am_eager_max(ep);
    if (FY_UNLIKELY(max > 16 + 2 * sizeof(fy_am_frag_hdr_t) &&
                    (16 + header_len + dlen > max || fy_rails_stripe(ep, header_len + dlen))))
        return am_send_frags(ep, id, header, header_len, data, iovcnt, dlen, req, max);
    fy_op_t *op = fy_op_get(ep->worker, ep, FY_OP_AM, req);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->am_id = FY_TLAM_MSG;
    if (id == FY_AM_ID_TAG) /* the receiver copies it out (tl.h) */
        op->comp.flags = FY_TL_COMP_F_RX_COPIES;
    op->proto_len = am_proto_hdr(ep, id, header_len, op->hdr);
    if (header_len != 0)
        memcpy(op->hdr + op->proto_len, header, header_len);
    op->hdr_len = op->proto_len + header_len;
    if (req == NULL && dlen != 0) {
        /* No request: the caller's buffers are free when we return. */
        op->copy = malloc(dlen);
        if (op->copy == NULL) {
            fy_op_put(op);
            return FERRY_ERR_NO_MEMORY;
        }
        fy_iov_gather(op->copy, data, iovcnt);
        op->iov[0].iov_base = op->copy;
        op->iov[0].iov_len = dlen;
        op->iovcnt = 1;
    } else {
        for (size_t i = 0; i < iovcnt; i++)
            op->iov[i] = data[i];
        op->iovcnt = iovcnt;
    }
    return fy_ep_submit(ep, op);
}

ferry_status_t ferry_am_send(ferry_ep_t *ep, unsigned id, const void *header, size_t header_len,
                             const void *data, size_t data_len, ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    if (FY_UNLIKELY(id > FERRY_AM_ID_MAX || (data == NULL && data_len != 0)))
        return FERRY_ERR_INVALID_PARAM;
    ferry_status_t st = check_send(ep, id, header, header_len, 0);
    if (FY_UNLIKELY(st != FERRY_OK))
        return st;
    st = am_send_fast(ep, id, header, header_len, data, data_len, NULL, 0, data_len);
    if (FY_LIKELY(st != FERRY_ERR_NO_RESOURCE))
        return st;
    struct iovec iov = {(void *)data, data_len};
    return am_send_slow(ep, id, header, header_len, &iov, data_len != 0 ? 1 : 0, data_len, req);
}

ferry_status_t ferry_am_sendv(ferry_ep_t *ep, unsigned id, const void *header, size_t header_len,
                              const struct iovec *iov, size_t iovcnt, ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    if (FY_UNLIKELY(id > FERRY_AM_ID_MAX || (iov == NULL && iovcnt != 0)))
        return FERRY_ERR_INVALID_PARAM;
    if (iovcnt > FY_MAX_IOV) {
        fy_error("ferry_am_sendv: %zu iov entries, at most %d", iovcnt, FY_MAX_IOV);
        return FERRY_ERR_INVALID_PARAM;
    }
    return fy_am_send(ep, id, header, header_len, iov, iovcnt, req);
}

/* Set id's entry, growing the user table to hold it (a power of two, at least 64 entries).
 * Removing a handler never shrinks it. */
static ferry_status_t am_set(ferry_worker_t *w, unsigned id, ferry_am_cb_t cb,
                             ferry_am_rndv_cb_t rndv_cb, void *arg)
{
    if (id <= FERRY_AM_ID_MAX && id >= w->am_user_cap) {
        if (cb == NULL && rndv_cb == NULL)
            return FERRY_OK; /* nothing registered there */
        unsigned cap = w->am_user_cap != 0 ? w->am_user_cap : 64;
        while (cap <= id)
            cap *= 2;
        fy_am_entry_t *t = realloc(w->am_user, cap * sizeof(*t));
        if (t == NULL)
            return FERRY_ERR_NO_MEMORY;
        memset(t + w->am_user_cap, 0, (cap - w->am_user_cap) * sizeof(*t));
        w->am_user = t;
        w->am_user_cap = cap;
    }
    fy_am_entry_t *e = fy_am_entry(w, id);
    e->cb = cb;
    e->rndv_cb = rndv_cb;
    e->arg = arg;
    return FERRY_OK;
}

ferry_status_t fy_am_set_handler(ferry_worker_t *w, unsigned id, ferry_am_cb_t cb, void *arg)
{
    if (w == NULL || id >= FY_AM_ID_TOTAL)
        return FERRY_ERR_INVALID_PARAM;
    return am_set(w, id, cb, NULL, arg);
}

ferry_status_t ferry_worker_set_am_handler(ferry_worker_t *w, unsigned id, ferry_am_cb_t cb,
                                           void *arg)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || id > FERRY_AM_ID_MAX) {
        if (w != NULL)
            fy_error("AM id %u is out of range (0..%d)", id, FERRY_AM_ID_MAX);
        return FERRY_ERR_INVALID_PARAM;
    }
    return am_set(w, id, cb, NULL, arg);
}

ferry_status_t ferry_worker_set_am_handler_rndv(ferry_worker_t *w, unsigned id,
                                                ferry_am_rndv_cb_t cb, void *arg)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || id > FERRY_AM_ID_MAX) {
        if (w != NULL)
            fy_error("AM id %u is out of range (0..%d)", id, FERRY_AM_ID_MAX);
        return FERRY_ERR_INVALID_PARAM;
    }
    return am_set(w, id, NULL, cb, arg);
}

void fy_am_cleanup_worker(ferry_worker_t *w)
{
    fy_rails_rndv_free_all(w);
    free(w->am_user);
    w->am_user = NULL;
    w->am_user_cap = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Receive                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* One received AM: head (the AM header, then the user header) and its data, which follows
 * in head itself (data == NULL: a contiguous message) or lies apart (a transport's split
 * delivery, fy_tl_am_split_cb_t). */
static inline __attribute__((always_inline)) void am_recv(fy_iface_t *fi, uint8_t am_id,
                                                          const void *head, size_t len,
                                                          const void *data, size_t data_len)
{
    ferry_worker_t *w = fi->worker;
    if (FY_UNLIKELY(w->closing))
        return;
    if (FY_UNLIKELY(am_id != FY_TLAM_MSG)) {
        if (data == NULL && (am_id == FY_TLAM_WIREUP_REQ || am_id == FY_TLAM_WIREUP_REP))
            fy_wireup_am_cb(fi, am_id, head, len);
        else
            w->drops_malformed++;
        return;
    }
    fy_am_hdr_t h;
    if (FY_UNLIKELY(len < sizeof(h))) {
        w->drops_malformed++;
        return;
    }
    memcpy(&h, head, sizeof(h));
    const uint8_t *p = (const uint8_t *)head + sizeof(h);
    size_t rest = len - sizeof(h);
    unsigned id = h.id + (h.len_flags & FY_AM_F_INT ? FY_AM_ID_INTERNAL_BASE : 0);
    unsigned header_len = h.len_flags & FY_AM_HLEN_MASK;
    ferry_ep_t *ep;
    if (FY_LIKELY(!(h.len_flags & FY_AM_F_SRC))) {
        ep = fy_worker_ep_at(w, h.ep_id);
    } else {
        uint64_t uuid;
        if (rest < 8) {
            w->drops_malformed++;
            return;
        }
        memcpy(&uuid, p, 8);
        p += 8;
        rest -= 8;
        ep = fy_wireup_find_src(w, uuid, h.ep_id);
    }
    if (FY_UNLIKELY(ep == NULL || ep->state == FY_EP_CLOSED)) {
        if (w->drops_unknown_ep++ == 0)
            fy_warn("dropping a message for an unknown endpoint (id %u)", h.ep_id);
        return;
    }
    if (FY_UNLIKELY(header_len > rest || header_len > FERRY_AM_HEADER_MAX ||
                    id >= FY_AM_ID_TOTAL)) {
        if (w->drops_malformed++ == 0)
            fy_warn("dropping a malformed message (header_len %u of %zu bytes, id %u)", header_len,
                    rest, id);
        return;
    }
    const uint8_t *body = p + header_len;
    size_t body_len = rest - header_len;
    if (data != NULL) { /* split: head holds exactly the headers (else am_recv_split copied) */
        body = data;
        body_len = data_len;
    }
    fy_am_entry_t *e = fy_am_entry(w, id);
    ep->stats.rx_msgs++;
    ep->stats.rx_bytes += data != NULL ? len + data_len : len;
    if (FY_UNLIKELY(e == NULL || (e->cb == NULL && e->rndv_cb == NULL))) {
        if (id == FY_AM_ID_FRAG) {
            fy_rails_frag_recv(w, ep, p, header_len, body, body_len);
            return;
        }
        w->drops_no_handler++;
        if (w->drops_no_handler <= 8)
            fy_warn("dropping an active message with id %u: no handler is registered", id);
        return;
    }
    /* behind a message still being gathered from its rails: wait for it (rails.c) */
    if (FY_UNLIKELY(ep->frag_rx != NULL) && fy_rails_hold(w, ep, id, p, header_len, body, body_len))
        return;
    if (FY_UNLIKELY(body_len > w->am_rx_max))
        w->am_rx_max = body_len;
    if (FY_LIKELY(e->cb != NULL))
        e->cb(e->arg, p, header_len, body, body_len, ep);
    else
        e->rndv_cb(e->arg, p, header_len, body, body_len, NULL, ep);
}

void fy_am_recv_cb(void *arg, uint8_t am_id, const void *data, size_t len)
{
    am_recv(arg, am_id, data, len, NULL, 0);
}

/* The headers in head, the data in place where the sender's memory is mapped (shm). */
void fy_am_recv_split_cb(void *arg, uint8_t am_id, const void *head, size_t head_len,
                         const void *data, size_t data_len)
{
    fy_am_hdr_t h;
    size_t hdrs = sizeof(h);
    if (head_len >= sizeof(h)) {
        memcpy(&h, head, sizeof(h));
        hdrs += (h.len_flags & FY_AM_F_SRC ? 8 : 0) + (h.len_flags & FY_AM_HLEN_MASK);
    }
    if (FY_LIKELY(hdrs == head_len && am_id == FY_TLAM_MSG)) {
        am_recv(arg, am_id, head, head_len, data, data_len);
        return;
    }
    /* anything else (data split elsewhere, a malformed head): made contiguous, checked there */
    uint8_t *m = malloc(head_len + data_len);
    if (m == NULL) {
        fy_error("no memory for a %zu-byte active message: dropped", head_len + data_len);
        ((fy_iface_t *)arg)->worker->drops_malformed++;
        return;
    }
    memcpy(m, head, head_len);
    memcpy(m + head_len, data, data_len);
    am_recv(arg, am_id, m, head_len + data_len, NULL, 0);
    free(m);
}
