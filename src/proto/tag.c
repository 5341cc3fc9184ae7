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
 *               one is copied once into the unexpected queue.  Sends given no request always
 *               go eager (the data is copied at once, so the call can return).
 *   rendezvous  (AM id FY_AM_ID_TAG_RNDV, header fy_tag_msg_t) a larger message stays in the
 *               caller's memory until a receive has matched its RTS, so an unexpected large
 *               message costs the receiver a small descriptor, never a copy.  Two schemes:
 *
 *     get   RTS_GET -> the receiver reads -> ATS.  When the AM lane's transport can read
 *           remote memory (FY_TL_CAP_GET), the sender registers its buffer with that transport
 *           alone (for shm: its pid and the address, for process_vm_readv; nothing is copied)
 *           and RTS_GET carries the address and (transport name, packed key).  The receiver
 *           that matches it reads min(length, its buffer) straight into the user's buffer, in
 *           pieces of at most the transport's max_rma, then sends ATS; at ATS the sender
 *           completes and deregisters.  One copy, and no round trip before the data moves.
 *     am    RTS -> CTS -> DATA.  The receiver answers CTS; the sender sends DATA, an AM from
 *           the caller's memory, and the receiver copies it into the user's buffer.
 *
 *   The sender chooses per message (FERRY_TAG_RNDV_SCHEME, the lane's caps, whether
 *   registration and packing worked).  The receiver may turn an RTS_GET into the am scheme by
 *   answering CTS instead: when its lane cannot read the sender (another transport, no GET, a
 *   key that does not unpack, FERRY_TAG_RNDV_SCHEME=am here) or the transport refuses the read
 *   with FERRY_ERR_UNSUPPORTED (cross-memory attach denied).  That CTS carries TAG_F_NO_GET,
 *   after which a sender in `auto` offers that endpoint no more gets.  Any other failure of
 *   the read ends the receive with that status and reports it in ATS, which completes the send
 *   with it too: neither side is left waiting for the other.
 *
 * Lifetimes.  The sender's op (FY_OP_TAG_SEND) waits in the worker's wait table, counted on
 * its endpoint, and holds the registration until CTS or ATS comes or the endpoint fails: an
 * RTS_GET matched late still names valid memory.  The receiver's op (FY_OP_TAG_GET) holds the
 * unpacked key while it reads; it is counted on the endpoint while reads are in flight or
 * wait on the pending queue (so the endpoint outlives them), and is never in the wait table,
 * because nothing comes back for it: an endpoint failure reaches it only through the
 * transport's completions or the pending queue, never while a read is still in flight.
 * fy_op_put() releases whatever an op holds (op->release), on every path.  A sender that
 * closes its endpoint by force sends ABORT for each rendezvous still waiting (best effort):
 * the receiver drops the unmatched RTS, or fails the receive waiting for DATA, rather than
 * read a buffer the sender has been given back, or wait forever.  (A receive that matches
 * before the ABORT has arrived still reads: one-sided reads cannot be revoked.)
 *
 * Wait ids are looked up in a hash, never trusted as pointers.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

enum { TAG_EAGER, TAG_RTS, TAG_CTS, TAG_DATA, TAG_RTS_GET, TAG_ATS, TAG_ABORT };

#define TAG_F_NO_GET 1u  /* CTS: the receiver cannot read the sender's memory */
#define TAG_KEY_MAX  512 /* an RTS_GET's data: transport name + that transport's packed key */

/*
 * The rendezvous header (40 bytes, host order):
 *
 *   0        8        16               32                               63
 *   +--------+--------+----------------+--------------------------------+
 *   | type   | flags  | tl_len         | status                         |
 *   +--------+--------+----------------+--------------------------------+
 *   | tag                                                               |
 *   | len      RTS, RTS_GET: the message's length                       |
 *   | wait_id  RTS, RTS_GET, ABORT: the sender's; CTS, ATS: the sender's |
 *   |          (echoed); DATA: the receiver's                           |
 *   | arg      RTS_GET: address of the sender's buffer;                 |
 *   |          CTS: the receiver's wait id                              |
 *   +-------------------------------------------------------------------+
 *   RTS_GET data: transport name (tl_len bytes) | that transport's packed key
 *   DATA data:    the message
 */
typedef struct fy_tag_msg {
    uint8_t type;
    uint8_t flags;   /* CTS: TAG_F_NO_GET */
    uint16_t tl_len; /* RTS_GET: bytes of transport name at the start of the data */
    int32_t status;  /* ATS: FERRY_OK, or why the receiver gave up reading */
    uint64_t tag;
    uint64_t len;
    uint64_t wait_id;
    uint64_t arg;
} fy_tag_msg_t;

/* An unexpected message: eager data, or a rendezvous descriptor (with the key of an RTS_GET). */
typedef struct fy_tag_unexp {
    fy_list_t link;
    ferry_ep_t *ep;
    uint32_t ep_id;
    fy_tag_msg_t m; /* type TAG_EAGER (m.tag only), TAG_RTS or TAG_RTS_GET */
    size_t len;     /* bytes of data[]: the eager payload, or the RTS_GET's key */
    uint8_t data[];
} fy_tag_unexp_t;

static int matches(uint64_t msg_tag, uint64_t tag, uint64_t mask)
{
    return ((msg_tag ^ tag) & mask) == 0;
}

static size_t unexp_msg_len(const fy_tag_unexp_t *u)
{
    return u->m.type == TAG_EAGER ? u->len : u->m.len;
}

static int ep_usable(const ferry_ep_t *ep)
{
    return ep->state == FY_EP_CONNECTED || ep->state == FY_EP_WIREUP;
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

/* A receive matched an RTS (or declined an RTS_GET): ask the sender for the data. */
static ferry_status_t recv_rts(fy_op_t *op, ferry_ep_t *ep, uint64_t tag, size_t len,
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
    op->operand = tag;
    op->msg_len = len;
    op->peer_wait_id = sender_wait_id; /* for an ABORT */
    fy_tag_msg_t m = {.type = TAG_CTS,
                      .flags = (uint8_t)flags,
                      .tag = tag,
                      .len = len,
                      .wait_id = sender_wait_id,
                      .arg = op->wait_id};
    st = send_ctl(ep, &m);
    if (st < 0) {
        fy_hash_del(&w->waiting, op->wait_id);
        op->wait_id = 0;
    }
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* The get scheme, receiver's side                                                             */
/* ------------------------------------------------------------------------------------------ */

/* What an op holds (op->copy), released by fy_op_put or op_release. */
static void release_key(fy_op_t *op)
{
    const fy_tl_component_t *tl = op->reg_tl->tl;
    if (tl->ops->rkey_release != NULL)
        tl->ops->rkey_release(op->reg_tl->md, op->copy);
}

static void release_reg(fy_op_t *op)
{
    op->reg_tl->tl->ops->mem_dereg(op->reg_tl->md, op->copy);
}

/* Drop what the op holds now; the op lives on. */
static void op_release(fy_op_t *op)
{
    if (op->release != NULL)
        op->release(op);
    op->release = NULL;
    free(op->copy);
    op->copy = NULL;
    op->reg_tl = NULL;
}

/* Count a receive on its endpoint while it outlives the call that started it. */
static void op_hold(fy_op_t *op)
{
    if (!op->counted) {
        op->counted = 1;
        op->ep->outstanding++;
    }
}

static void op_unhold(fy_op_t *op)
{
    if (op->counted) {
        op->counted = 0;
        fy_ep_op_done(op->ep); /* the ep is usable here, so this never destroys it */
    }
}

static void send_ats(fy_op_t *op, ferry_status_t status)
{
    fy_tag_msg_t m = {.type = TAG_ATS,
                      .status = status,
                      .tag = op->operand,
                      .len = op->msg_len,
                      .wait_id = op->peer_wait_id};
    ferry_status_t st = send_ctl(op->ep, &m);
    if (st < 0)
        fy_warn("cannot send ATS to ep %u (%s): its send completes only when the endpoint fails",
                op->ep->id, ferry_status_string(st));
}

/* Ask for the pieces not asked for yet: OK when all are (some may still be in flight, counted
 * in op->nsub), NO_RESOURCE, or the error that stopped it. */
static ferry_status_t get_issue(fy_op_t *op)
{
    fy_lane_t *lane = &op->ep->lanes[FY_LANE_AM];
    size_t total = FY_MIN(op->msg_len, op->len), max = lane->iface->attr.max_rma;
    while (op->offset < total) {
        size_t n = FY_MIN(total - op->offset, max);
        struct iovec iov = {(char *)op->buf + op->offset, n};
        ferry_status_t st = lane->iface->tl->ops->get_zcopy(
            lane->tl_ep, &iov, 1, op->remote_addr + op->offset, op->copy, &op->comp);
        if (st == FERRY_INPROGRESS)
            op->nsub++;
        else if (st != FERRY_OK)
            return st;
        op->offset += n;
    }
    return FERRY_OK;
}

/* Every read has come back (nsub == 0): finish, or turn to the am scheme.  Returns the
 * receive's final status, or INPROGRESS when it now waits for DATA. */
static ferry_status_t get_done(fy_op_t *op)
{
    ferry_ep_t *ep = op->ep;
    ferry_status_t st = op->status;
    size_t n = FY_MIN(op->msg_len, op->len);
    op_release(op);
    if (st == FERRY_OK) {
        send_ats(op, FERRY_OK);
        if (op->req != NULL) {
            op->req->tag = op->operand;
            op->req->length = n;
        }
        return n < op->msg_len ? FERRY_ERR_MESSAGE_TRUNCATED : FERRY_OK;
    }
    if (!ep_usable(ep))
        return ep->state == FY_EP_FAILED ? ep->failure : st;
    if (st == FERRY_ERR_UNSUPPORTED) {
        /* This process cannot read the sender (cross-memory attach refused): the sender still
         * has the data, so it sends it, and hears not to offer us gets again. */
        fy_debug("tag rendezvous from ep %u: the read was refused, asking for the data instead",
                 ep->id);
        op_unhold(op);
        op->status = FERRY_OK;
        op->offset = 0;
        st = recv_rts(op, ep, op->operand, op->msg_len, op->peer_wait_id, TAG_F_NO_GET);
        return st < 0 ? st : FERRY_INPROGRESS;
    }
    fy_warn("reading a %zu-byte tagged message from ep %u failed: %s", (size_t)op->msg_len, ep->id,
            ferry_status_string(st));
    send_ats(op, st);
    return st;
}

/* Go on reading: INPROGRESS (reads in flight, or the op waits for DATA now), NO_RESOURCE
 * (nothing in flight: retry from the pending queue), or the receive's final status. */
static ferry_status_t get_run(fy_op_t *op)
{
    if (op->status == FERRY_OK && !ep_usable(op->ep))
        op->status = op->ep->state == FY_EP_FAILED ? op->ep->failure : FERRY_ERR_NOT_CONNECTED;
    if (op->status == FERRY_OK) {
        ferry_status_t st = get_issue(op);
        if (st == FERRY_ERR_NO_RESOURCE && op->nsub == 0)
            return st;
        if (st != FERRY_OK && st != FERRY_ERR_NO_RESOURCE)
            op->status = st;
        if (op->nsub > 0) {
            op_hold(op); /* the last completion goes on from here */
            return FERRY_INPROGRESS;
        }
    }
    return get_done(op);
}

static void get_comp_cb(fy_tl_comp_t *comp, ferry_status_t st)
{
    fy_op_t *op = fy_container_of(comp, fy_op_t, comp);
    if (st != FERRY_OK && op->status == FERRY_OK)
        op->status = st;
    if (--op->nsub != 0)
        return;
    st = get_run(op);
    if (st == FERRY_ERR_NO_RESOURCE)
        fy_ep_add_pending(op->ep, op); /* held: op_hold ran when the reads went out */
    else if (st != FERRY_INPROGRESS)
        fy_worker_complete_later(op->worker, op, st);
}

ferry_status_t fy_tag_get_retry(fy_op_t *op)
{
    /* From the pending queue: NO_RESOURCE leaves it there, a final status completes it. */
    return get_run(op);
}

/* A receive matched an RTS_GET: read the message from the sender's memory, or (when this lane
 * cannot) answer CTS.  Returns INPROGRESS, or the receive's final status with the op still
 * the caller's to complete or release. */
static ferry_status_t recv_rts_get(fy_op_t *op, ferry_ep_t *ep, const fy_tag_msg_t *m,
                                   const uint8_t *key, size_t key_len)
{
    fy_iface_t *fi = ep->lanes[FY_LANE_AM].iface;
    const fy_tl_component_t *tl = fi->tl;
    op->type = FY_OP_TAG_GET;
    op->ep = ep;
    op->operand = m->tag;
    op->msg_len = m->len;
    op->peer_wait_id = m->wait_id;
    op->remote_addr = m->arg;
    op->offset = 0;
    op->nsub = 0;
    op->status = FERRY_OK;
    op->comp.cb = get_comp_cb;
    const char *why = NULL;
    unsigned flags = TAG_F_NO_GET;
    if (op->worker->ctx->opts.tag_rndv_scheme == FY_TAG_SCHEME_AM)
        why = "FERRY_TAG_RNDV_SCHEME=am";
    else if (!(fi->attr.caps & FY_TL_CAP_GET) || fi->attr.max_rma == 0 ||
             tl->ops->get_zcopy == NULL || tl->ops->rkey_unpack == NULL || tl->rkey_size == 0)
        why = "the lane cannot read remote memory";
    else if (m->tl_len != strlen(tl->name) || memcmp(key, tl->name, m->tl_len) != 0 ||
             key_len - m->tl_len != tl->rkey_packed_size)
        why = "the key is for another transport";
    else if ((op->copy = malloc(tl->rkey_size)) == NULL) {
        why = "no memory";
        flags = 0; /* for now only */
    } else if (tl->ops->rkey_unpack(fi->ctl->md, key + m->tl_len, op->copy) != FERRY_OK) {
        free(op->copy);
        op->copy = NULL;
        why = "the key does not unpack";
    }
    if (why != NULL) {
        fy_debug("tag rendezvous from ep %u: %s, asking for the data instead", ep->id, why);
        ferry_status_t st = recv_rts(op, ep, m->tag, m->len, m->wait_id, flags);
        return st < 0 ? st : FERRY_INPROGRESS;
    }
    op->reg_tl = fi->ctl;
    op->release = release_key;
    ferry_status_t st = get_run(op);
    if (st == FERRY_ERR_NO_RESOURCE) {
        op_hold(op);
        fy_ep_add_pending(ep, op);
        st = FERRY_INPROGRESS;
    }
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* The API                                                                                     */
/* ------------------------------------------------------------------------------------------ */

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
        size_t n = FY_MIN(u->len, op->len);
        if (n != 0)
            memcpy(op->buf, u->data, n);
        r->tag = u->m.tag;
        r->length = n;
        st = u->len <= op->len ? FERRY_OK : FERRY_ERR_MESSAGE_TRUNCATED;
    } else if (!unexp_ep_alive(w, u)) {
        st = FERRY_ERR_NOT_CONNECTED;
    } else if (u->m.type == TAG_RTS) {
        st = recv_rts(op, u->ep, u->m.tag, u->m.len, u->m.wait_id, 0);
        if (st >= 0)
            return FERRY_INPROGRESS;
    } else {
        st = recv_rts_get(op, u->ep, &u->m, u->data, u->len);
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

/* Offer the get scheme for op's message: register the buffer with the AM lane's transport and
 * write (transport name, packed key) into key.  Returns the bytes written; 0 means "use am". */
static size_t offer_get(ferry_ep_t *ep, fy_op_t *op, fy_tag_msg_t *m, uint8_t *key)
{
    int scheme = ep->worker->ctx->opts.tag_rndv_scheme;
    fy_iface_t *fi = ep->lanes[FY_LANE_AM].iface;
    const fy_tl_component_t *tl = fi->tl;
    size_t nl = strlen(tl->name);
    if (scheme == FY_TAG_SCHEME_AM || (scheme == FY_TAG_SCHEME_AUTO && ep->tag_no_get) ||
        !(fi->attr.caps & FY_TL_CAP_GET) || fi->attr.max_rma == 0 || tl->ops->mem_reg == NULL ||
        tl->ops->rkey_pack == NULL || tl->memh_size == 0 || nl + tl->rkey_packed_size > TAG_KEY_MAX)
        return 0;
    void *memh = calloc(1, tl->memh_size);
    if (memh == NULL)
        return 0;
    ferry_status_t st =
        tl->ops->mem_reg(fi->ctl->md, op->buf, op->len, FERRY_MEM_REMOTE_READ, memh);
    if (st != FERRY_OK) {
        fy_debug("%s cannot register %zu bytes at %p (%s): rendezvous by am", tl->name, op->len,
                 op->buf, ferry_status_string(st));
        free(memh);
        return 0;
    }
    op->copy = memh;
    op->reg_tl = fi->ctl;
    op->release = release_reg;
    memcpy(key, tl->name, nl);
    st = tl->ops->rkey_pack(fi->ctl->md, memh, key + nl);
    if (st != FERRY_OK) {
        fy_debug("%s cannot pack a key (%s): rendezvous by am", tl->name, ferry_status_string(st));
        op_release(op);
        return 0;
    }
    m->type = TAG_RTS_GET;
    m->tl_len = (uint16_t)nl;
    m->arg = (uint64_t)(uintptr_t)op->buf;
    return nl + tl->rkey_packed_size;
}

ferry_status_t ferry_tag_send(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                              ferry_request_t *req)
{
    if (ep == NULL || (buf == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    ferry_worker_t *w = ep->worker;
    if (req == NULL || len <= ep->tag_rndv_thresh) {
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
    uint8_t key[TAG_KEY_MAX];
    struct iovec iov = {key, offer_get(ep, op, &m, key)};
    st = fy_am_send(ep, FY_AM_ID_TAG_RNDV, &m, sizeof(m), &iov, iov.iov_len != 0, NULL);
    if (st < 0) {
        fy_hash_del(&w->waiting, op->wait_id);
        op->wait_id = 0;
        fy_op_put(op); /* deregisters */
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

/* ------------------------------------------------------------------------------------------ */
/* Receiving                                                                                   */
/* ------------------------------------------------------------------------------------------ */

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
    fy_op_finish(op, FERRY_OK); /* releases the RTS op (and a registration it holds) */
}

/* An eager message, an RTS or an RTS_GET arrived: the first posted receive that matches takes
 * it; otherwise it waits in the unexpected queue. */
static ferry_status_t tag_match_or_queue(ferry_worker_t *w, const fy_tag_msg_t *mp,
                                         const void *data, size_t len, ferry_ep_t *ep)
{
    fy_tag_msg_t m = *mp;
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_posted)
    {
        fy_op_t *op = fy_container_of(pos, fy_op_t, wait_link);
        if (!matches(m.tag, op->operand, op->compare))
            continue;
        fy_list_del(&op->wait_link);
        ferry_status_t st;
        switch (m.type) {
        case TAG_EAGER:
            recv_deliver(op, m.tag, data, len);
            break;
        case TAG_RTS:
            st = recv_rts(op, ep, m.tag, m.len, m.wait_id, 0);
            if (st < 0)
                fy_worker_complete_later(w, op, st);
            break;
        default:
            st = recv_rts_get(op, ep, &m, data, len);
            if (st != FERRY_INPROGRESS)
                fy_op_finish(op, st);
        }
        return FERRY_OK;
    }
    size_t keep = m.type == TAG_RTS ? 0 : len;
    fy_tag_unexp_t *u = malloc(sizeof(*u) + keep);
    if (u == NULL) {
        fy_error("out of memory for an unexpected tagged message of %zu bytes: dropped",
                 m.type == TAG_EAGER ? len : (size_t)m.len);
        return FERRY_OK;
    }
    u->ep = ep;
    u->ep_id = ep->id;
    u->m = m;
    u->len = keep;
    if (keep != 0)
        memcpy(u->data, data, keep);
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

/* The sender's op named by an answer (CTS, ATS) from ep, taken off the wait table. */
static fy_op_t *take_send_op(ferry_worker_t *w, uint64_t wait_id, ferry_ep_t *ep)
{
    fy_op_t *op = fy_hash_get(&w->waiting, wait_id);
    if (op == NULL || op->type != FY_OP_TAG_SEND || op->ep != ep) {
        w->drops_unknown_ep++;
        return NULL;
    }
    fy_hash_del(&w->waiting, wait_id);
    op->wait_id = 0;
    return op;
}

/* The sender cancelled a rendezvous (it closed its endpoint): forget its RTS if no receive has
 * taken it, fail the receive that waits for its DATA.  A read already under way needs nothing:
 * it has finished (shm, self) or fails at the target's key check (tcp, udp). */
typedef struct recv_key {
    ferry_ep_t *ep;
    uint64_t sender_wait_id;
    fy_op_t *found;
} recv_key_t;

static void find_recv(uint64_t key, void *value, void *arg)
{
    (void)key;
    fy_op_t *op = value;
    recv_key_t *k = arg;
    if (op->type == FY_OP_TAG_RECV && op->ep == k->ep && op->peer_wait_id == k->sender_wait_id)
        k->found = op;
}

static void recv_abort(ferry_worker_t *w, ferry_ep_t *ep, uint64_t sender_wait_id)
{
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_unexp)
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if (u->ep == ep && u->m.type != TAG_EAGER && u->m.wait_id == sender_wait_id) {
            fy_list_del(&u->link);
            free(u);
            return;
        }
    }
    recv_key_t k = {ep, sender_wait_id, NULL};
    fy_hash_foreach(&w->waiting, find_recv, &k);
    if (k.found != NULL)
        fy_op_finish(k.found, FERRY_ERR_CANCELED);
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
        return tag_match_or_queue(w, &m, NULL, 0, ep);
    case TAG_RTS_GET:
        if (m.tl_len == 0 || m.tl_len >= len || len > TAG_KEY_MAX) {
            w->drops_malformed++;
            return FERRY_OK;
        }
        return tag_match_or_queue(w, &m, data, len, ep);
    case TAG_CTS: {
        fy_op_t *op = take_send_op(w, m.wait_id, ep);
        if (op == NULL)
            return FERRY_OK;
        if ((m.flags & TAG_F_NO_GET) && !ep->tag_no_get) {
            ep->tag_no_get = 1;
            fy_tag_ep_init(ep); /* in auto, back to the threshold for the am scheme */
        }
        send_data(w, op, m.arg);
        return FERRY_OK;
    }
    case TAG_ATS: {
        fy_op_t *op = take_send_op(w, m.wait_id, ep);
        if (op != NULL)
            fy_op_finish(op, m.status <= 0 && m.status > FERRY_ERR_LAST ? (ferry_status_t)m.status
                                                                        : FERRY_ERR_PROTOCOL);
        return FERRY_OK;
    }
    case TAG_ABORT:
        recv_abort(w, ep, m.wait_id);
        return FERRY_OK;
    case TAG_DATA: {
        fy_op_t *op = fy_hash_get(&w->waiting, m.wait_id);
        if (op == NULL || op->type != FY_OP_TAG_RECV) {
            w->drops_unknown_ep++;
            return FERRY_OK;
        }
        fy_hash_del(&w->waiting, m.wait_id);
        op->wait_id = 0;
        recv_deliver(op, m.tag, data, len);
        return FERRY_OK;
    }
    default:
        w->drops_malformed++;
    }
    return FERRY_OK;
}

static void abort_send(uint64_t key, void *value, void *arg)
{
    fy_op_t *op = value;
    ferry_ep_t *ep = arg;
    if (op->type != FY_OP_TAG_SEND || op->ep != ep)
        return;
    fy_tag_msg_t m = {.type = TAG_ABORT, .tag = op->operand, .len = op->len, .wait_id = key};
    (void)send_ctl(ep, &m); /* best effort: the endpoint is going away */
}

/*
 * FERRY_TAG_RNDV_THRESH=auto, measured with ferry_perf tag_lat/tag_bw on the reference 2-core
 * box: over shm a get rendezvous beats eager from 8k on, where an eager message
 * stops fitting one cell buffer and becomes a pulled zero-copy message plus a copy out of the
 * receive buffer (8k: 1.9 vs 2.2 us; 64k: 4.2 vs 11.6 us).  Over tcp and udp a rendezvous costs
 * round trips of several microseconds, and eager stays ahead up to 256k and beyond, so the old
 * 64k stays.  The sign that reads are memory copies, not requests over a network, is the
 * lane's latency.
 */
#define TAG_THRESH_DEFAULT (64 * 1024)
#define TAG_MEMORY_LATENCY 1000.0 /* ns: below this, the lane is a memory transport */

void fy_tag_ep_init(ferry_ep_t *ep)
{
    const fy_ctx_opts_t *o = &ep->worker->ctx->opts;
    const fy_iface_t *fi = ep->lanes[FY_LANE_AM].iface;
    ep->tag_rndv_thresh = o->tag_rndv_thresh;
    if (o->tag_rndv_thresh != FY_TAG_THRESH_AUTO)
        return;
    ep->tag_rndv_thresh = TAG_THRESH_DEFAULT;
    size_t hdr = sizeof(fy_am_hdr_t) + sizeof(uint64_t); /* an eager message's headers */
    int by_get = o->tag_rndv_scheme == FY_TAG_SCHEME_GET ||
                 (o->tag_rndv_scheme == FY_TAG_SCHEME_AUTO && !ep->tag_no_get);
    if (by_get && (fi->attr.caps & FY_TL_CAP_GET) && fi->attr.latency_ns < TAG_MEMORY_LATENCY &&
        fi->attr.max_bcopy > hdr)
        ep->tag_rndv_thresh = FY_MIN(fi->attr.max_bcopy - hdr, (size_t)TAG_THRESH_DEFAULT);
}

void fy_tag_ep_closing(ferry_ep_t *ep)
{
    if (ep_usable(ep))
        fy_hash_foreach(&ep->worker->waiting, abort_send, ep);
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
