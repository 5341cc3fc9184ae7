/*
 * tag_rndv_get.c - the get scheme of tagged rendezvous: RTS_GET -> the receiver reads -> ATS.
 *
 * When the AM lane's transport can read remote memory (FY_TL_CAP_GET), the sender registers
 * its buffer with that transport alone (for shm: its pid and the address, for
 * process_vm_readv; nothing is copied) and RTS_GET carries the address and (transport name,
 * packed key).  The receiver that matches it reads min(length, its buffer) straight into the
 * user's buffer, in pieces of at most the transport's max_rma (and, into a buffer of several
 * pieces, within one piece each), then sends ATS; at ATS the sender completes and deregisters.
 * One copy, and no round trip before the data moves.  A send of several pieces offers no get
 * (its memory is not one region): it goes by the am scheme.
 *
 * The receiver answers CTS instead (the am scheme, tag_rndv_am.c) when its lane cannot read
 * the sender (another transport, no GET, a key that does not unpack,
 * FERRY_TAG_RNDV_SCHEME=am here) or the transport refuses the read with
 * FERRY_ERR_UNSUPPORTED (cross-memory attach denied).  Any other failure of the read ends the
 * receive with that status and reports it in ATS, which completes the send with it too:
 * neither side is left waiting for the other.
 *
 * The receiver's op (FY_OP_TAG_GET) holds the unpacked key while it reads; it is counted on
 * the endpoint while reads are in flight or wait on the pending queue (so the endpoint
 * outlives them), and is never in the wait table, because nothing comes back for it: an
 * endpoint failure reaches it only through the transport's completions or the pending queue,
 * never while a read is still in flight.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/tag_int.h"

/* ---- the sender ----------------------------------------------------------------------- */

size_t fy_tag_offer_get(ferry_ep_t *ep, fy_op_t *op, fy_tag_msg_t *m, uint8_t *key)
{
    int scheme = ep->worker->ctx->opts.tag_rndv_scheme;
    fy_iface_t *fi = ep->lanes[FY_LANE_AM].iface;
    const fy_tl_component_t *tl = fi->tl;
    fy_op_tag_send_t *s = &op->tag_send;
    size_t nl = strlen(tl->name);
    if (s->iovcnt != 0 || scheme == FY_TAG_SCHEME_AM ||
        (scheme == FY_TAG_SCHEME_AUTO && ep->tag_no_get) || !(fi->attr.caps & FY_TL_CAP_GET) ||
        fi->attr.max_rma == 0 || tl->ops->mem_reg == NULL || tl->ops->rkey_pack == NULL ||
        tl->memh_size == 0 || nl + tl->rkey_packed_size > TAG_KEY_MAX)
        return 0;
    void *memh = calloc(1, tl->memh_size);
    if (memh == NULL)
        return 0;
    /* a transport with a registration cache registers a buffer sent again and again once */
    ferry_status_t st =
        (tl->ops->mem_reg_cached != NULL ? tl->ops->mem_reg_cached : tl->ops->mem_reg)(
            fi->ctl->md, (void *)s->buf, s->len, FERRY_MEM_REMOTE_READ, memh);
    if (st != FERRY_OK) {
        fy_debug("%s cannot register %zu bytes at %p (%s): rendezvous by am", tl->name, s->len,
                 s->buf, ferry_status_string(st));
        free(memh);
        return 0;
    }
    s->memh = memh;
    s->reg_tl = fi->ctl;
    memcpy(key, tl->name, nl);
    st = tl->ops->rkey_pack(fi->ctl->md, memh, key + nl);
    if (st != FERRY_OK) {
        fy_debug("%s cannot pack a key (%s): rendezvous by am", tl->name, ferry_status_string(st));
        fy_op_release(op);
        return 0;
    }
    m->type = TAG_RTS_GET;
    m->tl_len = (uint16_t)nl;
    m->arg = (uint64_t)(uintptr_t)s->buf;
    return nl + tl->rkey_packed_size;
}

/* ---- the receiver ----------------------------------------------------------------------- */

/* The unpacked key the receive holds while it reads (the release of FY_OP_TAG_GET). */
static void tag_get_release(fy_op_t *op)
{
    fy_op_tag_recv_t *r = &op->tag_recv;
    if (r->rkey == NULL)
        return;
    if (r->key_tl->tl->ops->rkey_release != NULL)
        r->key_tl->tl->ops->rkey_release(r->key_tl->md, r->rkey);
    free(r->rkey);
    r->rkey = NULL;
    r->key_tl = NULL;
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
                      .tag = op->tag_recv.msg_tag,
                      .len = op->tag_recv.msg_len,
                      .wait_id = op->tag_recv.peer_wait_id};
    ferry_status_t st = fy_tag_rndv_ctl(op->ep, &m);
    if (st < 0)
        fy_warn("cannot send ATS to ep %u (%s): its send completes only when the endpoint fails",
                op->ep->id, ferry_status_string(st));
}

/* Ask for the pieces not asked for yet: OK when all are (some may still be in flight, counted
 * in op->nsub), NO_RESOURCE, or the error that stopped it. */
static ferry_status_t get_issue(fy_op_t *op)
{
    fy_lane_t *lane = &op->ep->lanes[FY_LANE_AM];
    fy_op_tag_recv_t *r = &op->tag_recv;
    size_t total = FY_MIN(r->msg_len, r->len), max = lane->iface->attr.max_rma;
    while (r->offset < total) {
        /* at most max_rma, within one piece of the receive buffer (recvv) */
        struct iovec iov = fy_tag_recv_piece(op, r->offset, FY_MIN(total - r->offset, max));
        ferry_status_t st = lane->iface->tl->ops->get_zcopy(
            lane->tl_ep, &iov, 1, r->remote_addr + r->offset, r->rkey, &op->comp);
        if (st == FERRY_INPROGRESS)
            op->nsub++;
        else if (st != FERRY_OK)
            return st;
        r->offset += iov.iov_len;
    }
    return FERRY_OK;
}

/* Every read has come back (nsub == 0): finish, or turn to the am scheme.  Returns the
 * receive's final status, or INPROGRESS when it now waits for DATA. */
static ferry_status_t get_done(fy_op_t *op)
{
    ferry_ep_t *ep = op->ep;
    fy_op_tag_recv_t *r = &op->tag_recv;
    ferry_status_t st = op->status;
    size_t n = FY_MIN(r->msg_len, r->len);
    fy_op_release(op);
    if (st == FERRY_OK) {
        send_ats(op, FERRY_OK);
        if (op->req != NULL) {
            op->req->tag = r->msg_tag;
            op->req->length = n;
        }
        return n < r->msg_len ? FERRY_ERR_MESSAGE_TRUNCATED : FERRY_OK;
    }
    if (!fy_tag_ep_usable(ep))
        return ep->state == FY_EP_FAILED ? ep->failure : st;
    if (st == FERRY_ERR_UNSUPPORTED) {
        /* This process cannot read the sender (cross-memory attach refused): the sender still
         * has the data, so it sends it, and hears not to offer us gets again. */
        fy_debug("tag rendezvous from ep %u: the read was refused, asking for the data instead",
                 ep->id);
        op_unhold(op);
        op->status = FERRY_OK;
        r->offset = 0;
        st = fy_tag_recv_rts(op, ep, r->msg_tag, r->msg_len, r->peer_wait_id, TAG_F_NO_GET);
        return st < 0 ? st : FERRY_INPROGRESS;
    }
    fy_warn("reading a %zu-byte tagged message from ep %u failed: %s", r->msg_len, ep->id,
            ferry_status_string(st));
    send_ats(op, st);
    return st;
}

/* Go on reading: INPROGRESS (reads in flight, or the op waits for DATA now), NO_RESOURCE
 * (nothing in flight: retry from the pending queue), or the receive's final status.  The
 * start of FY_OP_TAG_GET in op.c's table. */
static ferry_status_t get_run(fy_op_t *op)
{
    if (op->status == FERRY_OK && !fy_tag_ep_usable(op->ep))
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

const fy_op_ops_t fy_tag_get_op_ops = {
    .name = "tag-rndv-get", .start = get_run, .release = tag_get_release};

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

ferry_status_t fy_tag_recv_rts_get(fy_op_t *op, ferry_ep_t *ep, const fy_tag_msg_t *m,
                                   const uint8_t *key, size_t key_len)
{
    fy_iface_t *fi = ep->lanes[FY_LANE_AM].iface;
    const fy_tl_component_t *tl = fi->tl;
    fy_op_tag_recv_t *r = &op->tag_recv;
    op->type = FY_OP_TAG_GET;
    op->ep = ep;
    r->msg_tag = m->tag;
    r->msg_len = m->len;
    r->peer_wait_id = m->wait_id;
    r->remote_addr = m->arg;
    r->offset = 0;
    op->nsub = 0;
    op->status = FERRY_OK;
    op->comp.cb = get_comp_cb;
    const char *why = NULL;
    unsigned flags = TAG_F_NO_GET;
    void *rkey = NULL;
    if (op->worker->ctx->opts.tag_rndv_scheme == FY_TAG_SCHEME_AM)
        why = "FERRY_TAG_RNDV_SCHEME=am";
    else if (!(fi->attr.caps & FY_TL_CAP_GET) || fi->attr.max_rma == 0 ||
             tl->ops->get_zcopy == NULL || tl->ops->rkey_unpack == NULL || tl->rkey_size == 0)
        why = "the lane cannot read remote memory";
    else if (m->tl_len != strlen(tl->name) || memcmp(key, tl->name, m->tl_len) != 0 ||
             key_len - m->tl_len != tl->rkey_packed_size)
        why = "the key is for another transport";
    else if ((rkey = malloc(tl->rkey_size)) == NULL) {
        why = "no memory";
        flags = 0; /* for now only */
    } else if (tl->ops->rkey_unpack(fi->ctl->md, key + m->tl_len, rkey) != FERRY_OK) {
        free(rkey);
        why = "the key does not unpack";
    }
    if (why != NULL) {
        fy_debug("tag rendezvous from ep %u: %s, asking for the data instead", ep->id, why);
        ferry_status_t st = fy_tag_recv_rts(op, ep, m->tag, m->len, m->wait_id, flags);
        return st < 0 ? st : FERRY_INPROGRESS;
    }
    r->rkey = rkey;
    r->key_tl = fi->ctl;
    ferry_status_t st = get_run(op);
    if (st == FERRY_ERR_NO_RESOURCE) {
        op_hold(op);
        fy_ep_add_pending(ep, op);
        st = FERRY_INPROGRESS;
    }
    return st;
}
