/*
 * rma.c - put, get and atomics: native on a transport that has them, emulated over active
 * messages otherwise.
 *
 * Emulation is a small protocol on the internal AM id FY_AM_ID_RMA.  The target checks every
 * request against the context's region table (id, key, bounds, rights) exactly as a native
 * transport's target would, and touches nothing outside a registered region.  A get or a
 * fetching atomic waits for its answer under a wait id (a hash lookup, never a raw pointer
 * from the wire).  A refused put has no request to fail: the target answers PUT_NACK before it
 * handles anything later, so the NACK is in before the PONG of the flush that covers the put,
 * and that flush completes with FERRY_ERR_ACCESS_DENIED.  Flush after
 * emulated puts is a PING/PONG round trip: the target handles messages in order, so the PONG
 * means every earlier put has landed.
 *
 * The initiator also checks bounds and rights against the remote key before sending, so a
 * mistake is reported at once with a clear message.
 *
 * A native put or get larger than the lane's max_rma goes as several transport operations of
 * at most max_rma each, pieces of one parent op (ep.c) that completes once, when they all have;
 * above FERRY_RAILS_THRESH the pieces are spread over the ep's rails (rails.c).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

enum { RMA_PUT, RMA_GET, RMA_AMO, RMA_GET_REP, RMA_AMO_REP, RMA_PUT_NACK, RMA_PING, RMA_PONG };

typedef struct fy_rma_msg {
    uint8_t op;
    uint8_t amo_op;
    uint8_t size;
    uint8_t pad;
    int32_t status;
    uint64_t region_id, key, addr, len, wait_id, operand, compare;
} fy_rma_msg_t;

static void rma_comp_cb(fy_tl_comp_t *comp, ferry_status_t st)
{
    fy_op_t *op = fy_container_of(comp, fy_op_t, comp);
    fy_worker_complete_later(op->worker, op, st);
}

ferry_status_t fy_rma_start(fy_op_t *op)
{
    ferry_ep_t *ep = op->ep;
    ferry_rkey_t *rk = op->rkey;
    op->comp.cb = rma_comp_cb;
    if (op->type == FY_OP_AMO) {
        fy_lane_t *lane = &ep->lanes[FY_LANE_AMO];
        return lane->iface->tl->ops->atomic(lane->tl_ep, op->amo_op, op->amo_size, op->operand,
                                            op->compare, op->result, op->remote_addr, rk->tl_rkey,
                                            &op->comp);
    }
    fy_lane_t *lane = op->rail != NULL ? op->rail : &ep->lanes[FY_LANE_RMA]; /* rails.c */
    struct iovec iov = {op->buf, op->len};
    if (op->type == FY_OP_PUT)
        return lane->iface->tl->ops->put_zcopy(lane->tl_ep, &iov, 1, op->remote_addr, rk->tl_rkey,
                                               &op->comp);
    return lane->iface->tl->ops->get_zcopy(lane->tl_ep, &iov, 1, op->remote_addr, rk->tl_rkey,
                                           &op->comp);
}

static ferry_status_t check_rkey(ferry_ep_t *ep, ferry_rkey_t *rk, uint64_t addr, size_t len,
                                 unsigned access)
{
    if (ep == NULL || rk == NULL || rk->ep != ep)
        return FERRY_ERR_INVALID_PARAM;
    if (ep->state == FY_EP_FAILED)
        return ep->failure;
    if (ep->state == FY_EP_CLOSED)
        return FERRY_ERR_NOT_CONNECTED;
    if (addr < rk->base || len > rk->length || addr - rk->base > rk->length - len ||
        !(rk->access & access)) {
        fy_error("remote access [0x%llx, +%zu) %s is outside the key's region [0x%llx, +%llu) "
                 "or its rights",
                 (unsigned long long)addr, len,
                 access == FERRY_MEM_REMOTE_READ    ? "(read)"
                 : access == FERRY_MEM_REMOTE_WRITE ? "(write)"
                                                    : "(atomic)",
                 (unsigned long long)rk->base, (unsigned long long)rk->length);
        return FERRY_ERR_ACCESS_DENIED;
    }
    return FERRY_OK;
}

static ferry_status_t wait_done(ferry_worker_t *w, ferry_request_t *req)
{
    while (req->status == FERRY_INPROGRESS)
        ferry_worker_wait(w, 100);
    return req->status;
}

/* Send an emulated request that waits for an answer (get, atomic, ping). */
static ferry_status_t emu_request(fy_op_t *op, fy_rma_msg_t *m, const void *data, size_t len)
{
    ferry_worker_t *w = op->worker;
    op->wait_id = ++w->next_wait_id;
    m->wait_id = op->wait_id;
    ferry_status_t st = fy_hash_put(&w->waiting, op->wait_id, op);
    if (st != FERRY_OK) {
        op->wait_id = 0;
        return st;
    }
    struct iovec iov = {(void *)data, len};
    st = fy_am_send(op->ep, FY_AM_ID_RMA, m, sizeof(*m), &iov, len != 0, NULL);
    if (st < 0) {
        fy_hash_del(&w->waiting, op->wait_id);
        op->wait_id = 0;
        return st;
    }
    return FERRY_INPROGRESS;
}

/* Start an emulated get or atomic: counted on its endpoint until the answer comes; released
 * at once if it could not be sent. */
static ferry_status_t emu_start(fy_op_t *op, fy_rma_msg_t *m)
{
    ferry_status_t st = emu_request(op, m, NULL, 0);
    if (st == FERRY_INPROGRESS) {
        op->counted = 1;
        op->ep->outstanding++;
    } else {
        fy_op_put(op);
    }
    return st;
}

ferry_status_t fy_rma_flush_ping(fy_op_t *flush_op)
{
    fy_rma_msg_t m = {.op = RMA_PING};
    flush_op->ep->emulated_since_flush = 0;
    return emu_request(flush_op, &m, NULL, 0);
}

static void emu_init(fy_rma_msg_t *m, int op, ferry_rkey_t *rk, uint64_t addr, size_t len)
{
    memset(m, 0, sizeof(*m));
    m->op = (uint8_t)op;
    m->region_id = rk->region_id;
    m->key = rk->key;
    m->addr = addr;
    m->len = len;
}

/* The checks every put and get starts with.  0: the call is over, with *st its result (a
 * zero-length transfer is done at once); 1: go on. */
static int rma_begin(ferry_ep_t *ep, const void *buf, size_t len, ferry_rkey_t *rkey,
                     uint64_t remote_addr, unsigned access, ferry_status_t *st)
{
    if (buf == NULL && len != 0) {
        *st = FERRY_ERR_INVALID_PARAM;
        return 0;
    }
    *st = check_rkey(ep, rkey, remote_addr, len, access);
    return *st == FERRY_OK && len != 0;
}

/* A native put or get above the lane's max_rma: pieces of at most max_rma under a parent
 * that holds the request (and the put's copy). */
static ferry_status_t rma_split(ferry_ep_t *ep, fy_op_type_t type, void *buf, size_t len,
                                uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req,
                                size_t max)
{
    fy_op_t *parent = fy_op_get(ep->worker, NULL, type, req);
    if (parent == NULL)
        return FERRY_ERR_NO_MEMORY;
    if (type == FY_OP_PUT && req == NULL) {
        parent->copy = malloc(len);
        if (parent->copy == NULL) {
            fy_op_put(parent);
            return FERRY_ERR_NO_MEMORY;
        }
        memcpy(parent->copy, buf, len);
        buf = parent->copy;
    }
    fy_op_parent_init(parent);
    ferry_status_t st = FERRY_OK;
    fy_rails_cursor_t cur; /* pieces spread over the rails (rails.c) */
    fy_lane_t *rail;
    uint32_t tag;
    size_t off, n;
    fy_rails_begin_rma(ep, rkey, len, max, &cur);
    while (st >= 0 && (n = fy_rails_next(ep, &cur, &off, &rail, &tag)) != 0) {
        fy_op_t *op = fy_op_get(ep->worker, ep, type, NULL);
        if (op == NULL) {
            st = FERRY_ERR_NO_MEMORY;
            break;
        }
        op->rail = rail;
        op->rkey = rkey;
        op->remote_addr = remote_addr + off;
        op->len = n;
        op->buf = (uint8_t *)buf + off;
        st = fy_ep_submit_child(ep, parent, op);
        if (st < 0 && type == FY_OP_PUT)
            fy_ep_note_error(ep, st); /* refused by the transport: the covering flush says so */
    }
    return fy_op_parent_end(parent, st < 0 ? st : FERRY_OK);
}

ferry_status_t ferry_put(ferry_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                         ferry_rkey_t *rkey, ferry_request_t *req)
{
    ferry_status_t st;
    if (!rma_begin(ep, buf, len, rkey, remote_addr, FERRY_MEM_REMOTE_WRITE, &st))
        return st;
    if (ep->rma_native && rkey->tl_rkey != NULL) {
        fy_lane_t *lane = &ep->lanes[FY_LANE_RMA];
        if (len <= lane->iface->attr.max_put_short && fy_queue_is_empty(&ep->pending) &&
            lane->iface->tl->ops->put_short != NULL) {
            st = lane->iface->tl->ops->put_short(lane->tl_ep, buf, len, remote_addr, rkey->tl_rkey);
            if (st != FERRY_ERR_NO_RESOURCE) {
                if (st < 0)
                    fy_ep_note_error(ep, st); /* refused: the covering flush says so too */
                return st;
            }
        }
        if (fy_ep_queue_full(ep, len))
            return FERRY_ERR_NO_RESOURCE; /* FERRY_MAX_QUEUED: nothing taken */
        if (FY_UNLIKELY(len > lane->iface->attr.max_rma || fy_rails_stripe_rma(ep, rkey, len)))
            return rma_split(ep, FY_OP_PUT, (void *)buf, len, remote_addr, rkey, req,
                             lane->iface->attr.max_rma);
        fy_op_t *op = fy_op_get(ep->worker, ep, FY_OP_PUT, req);
        if (op == NULL)
            return FERRY_ERR_NO_MEMORY;
        op->rkey = rkey;
        op->remote_addr = remote_addr;
        op->len = len;
        op->buf = (void *)buf;
        if (req == NULL) {
            op->copy = malloc(len);
            if (op->copy == NULL) {
                fy_op_put(op);
                return FERRY_ERR_NO_MEMORY;
            }
            memcpy(op->copy, buf, len);
            op->buf = op->copy;
        }
        return fy_ep_submit(ep, op);
    }
    fy_rma_msg_t m;
    emu_init(&m, RMA_PUT, rkey, remote_addr, len);
    if (fy_ep_queue_full(ep, sizeof(m) + len))
        return FERRY_ERR_NO_RESOURCE; /* FERRY_MAX_QUEUED: nothing taken */
    struct iovec iov = {(void *)buf, len};
    ep->emulated_since_flush++;
    return fy_am_send(ep, FY_AM_ID_RMA, &m, sizeof(m), &iov, 1, req);
}

ferry_status_t ferry_get(ferry_ep_t *ep, void *buf, size_t len, uint64_t remote_addr,
                         ferry_rkey_t *rkey, ferry_request_t *req)
{
    ferry_status_t st;
    if (!rma_begin(ep, buf, len, rkey, remote_addr, FERRY_MEM_REMOTE_READ, &st))
        return st;
    if (ep->rma_native && rkey->tl_rkey != NULL) {
        fy_lane_t *lane = &ep->lanes[FY_LANE_RMA];
        const fy_tl_ops_t *ops = lane->iface->tl->ops;
        if (len <= lane->iface->attr.max_get_short && ops->get_short != NULL &&
            fy_queue_is_empty(&ep->pending)) {
            st = ops->get_short(lane->tl_ep, buf, len, remote_addr, rkey->tl_rkey);
            if (st != FERRY_ERR_NO_RESOURCE)
                return st;
        }
    }
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        memset(&local, 0, sizeof(local));
        r = &local;
    }
    if (ep->rma_native && rkey->tl_rkey != NULL &&
        FY_UNLIKELY(len > ep->lanes[FY_LANE_RMA].iface->attr.max_rma ||
                    fy_rails_stripe_rma(ep, rkey, len))) {
        st = rma_split(ep, FY_OP_GET, buf, len, remote_addr, rkey, r,
                       ep->lanes[FY_LANE_RMA].iface->attr.max_rma);
        if (st == FERRY_INPROGRESS && req == NULL)
            st = wait_done(ep->worker, r);
        return st;
    }
    fy_op_t *op =
        fy_op_get(ep->worker, ep, ep->rma_native && rkey->tl_rkey ? FY_OP_GET : FY_OP_RMA_EMU, r);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->rkey = rkey;
    op->remote_addr = remote_addr;
    op->len = len;
    op->buf = buf;
    if (op->type == FY_OP_GET) {
        st = fy_ep_submit(ep, op);
    } else {
        fy_rma_msg_t m;
        emu_init(&m, RMA_GET, rkey, remote_addr, len);
        st = emu_start(op, &m);
    }
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_done(ep->worker, r);
    return st;
}

ferry_status_t ferry_atomic(ferry_ep_t *ep, ferry_atomic_op_t aop, size_t size, uint64_t operand,
                            uint64_t compare, void *result, uint64_t remote_addr,
                            ferry_rkey_t *rkey, ferry_request_t *req)
{
    if ((size != 4 && size != 8) || aop > FERRY_ATOMIC_CSWAP || (remote_addr % size) != 0 ||
        (aop == FERRY_ATOMIC_CSWAP && result == NULL))
        return FERRY_ERR_INVALID_PARAM;
    ferry_status_t st = check_rkey(ep, rkey, remote_addr, size, FERRY_MEM_REMOTE_ATOMIC);
    if (st != FERRY_OK)
        return st;
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        memset(&local, 0, sizeof(local));
        r = &local;
    }
    int native = ep->amo_native && rkey->tl_rkey != NULL &&
                 ep->lanes[FY_LANE_AMO].iface == ep->lanes[FY_LANE_RMA].iface;
    fy_op_t *op = fy_op_get(ep->worker, ep, native ? FY_OP_AMO : FY_OP_RMA_EMU, r);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->rkey = rkey;
    op->remote_addr = remote_addr;
    op->amo_op = aop;
    op->amo_size = size;
    op->operand = operand;
    op->compare = compare;
    op->result = result;
    if (native) {
        st = fy_ep_submit(ep, op);
    } else {
        fy_rma_msg_t m;
        emu_init(&m, RMA_AMO, rkey, remote_addr, size);
        m.amo_op = (uint8_t)aop;
        m.size = (uint8_t)size;
        m.operand = operand;
        m.compare = compare;
        st = emu_start(op, &m);
    }
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_done(ep->worker, r);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* The emulation protocol's handler (both sides)                                               */
/* ------------------------------------------------------------------------------------------ */

#define AMO_APPLY(T, ptr, m, old)                                                                  \
    do {                                                                                           \
        T *p_ = (T *)(ptr);                                                                        \
        T v_ = (T)(m)->operand;                                                                    \
        switch ((m)->amo_op) {                                                                     \
        case FERRY_ATOMIC_ADD:                                                                     \
            old = __atomic_fetch_add(p_, v_, __ATOMIC_SEQ_CST);                                    \
            break;                                                                                 \
        case FERRY_ATOMIC_AND:                                                                     \
            old = __atomic_fetch_and(p_, v_, __ATOMIC_SEQ_CST);                                    \
            break;                                                                                 \
        case FERRY_ATOMIC_OR:                                                                      \
            old = __atomic_fetch_or(p_, v_, __ATOMIC_SEQ_CST);                                     \
            break;                                                                                 \
        case FERRY_ATOMIC_XOR:                                                                     \
            old = __atomic_fetch_xor(p_, v_, __ATOMIC_SEQ_CST);                                    \
            break;                                                                                 \
        case FERRY_ATOMIC_SWAP:                                                                    \
            old = __atomic_exchange_n(p_, v_, __ATOMIC_SEQ_CST);                                   \
            break;                                                                                 \
        default: {                                                                                 \
            T c_ = (T)(m)->compare;                                                                \
            __atomic_compare_exchange_n(p_, &c_, v_, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
            old = c_;                                                                              \
        }                                                                                          \
        }                                                                                          \
    } while (0)

static void reply(ferry_ep_t *ep, fy_rma_msg_t *m, int op, ferry_status_t st, const void *data,
                  size_t len)
{
    m->op = (uint8_t)op;
    m->status = st;
    struct iovec iov = {(void *)data, len};
    ferry_status_t s = fy_am_send(ep, FY_AM_ID_RMA, m, sizeof(*m), &iov, len != 0, NULL);
    if (s < 0)
        fy_warn("cannot answer an RMA request: %s", ferry_status_string(s));
}

static fy_op_t *take_waiting(ferry_worker_t *w, uint64_t wait_id)
{
    fy_op_t *op = fy_hash_del(&w->waiting, wait_id);
    if (op != NULL)
        op->wait_id = 0;
    return op;
}

static ferry_status_t rma_handler(void *arg, const void *header, size_t header_len,
                                  const void *data, size_t len, ferry_ep_t *ep)
{
    ferry_worker_t *w = arg;
    fy_rma_msg_t m;
    if (header_len != sizeof(m)) {
        w->drops_malformed++;
        return FERRY_OK;
    }
    memcpy(&m, header, sizeof(m));
    fy_region_table_t *rt = &w->ctx->regions;
    void *local = NULL;
    ferry_status_t st;
    switch (m.op) {
    case RMA_PUT:
        st = m.len == len ? fy_region_check(rt, m.region_id, m.key, m.addr, m.len,
                                            FERRY_MEM_REMOTE_WRITE, &local)
                          : FERRY_ERR_PROTOCOL;
        if (st == FERRY_OK)
            memcpy(local, data, len);
        else
            reply(ep, &m, RMA_PUT_NACK, st, NULL, 0);
        break;
    case RMA_GET:
        st = fy_region_check(rt, m.region_id, m.key, m.addr, m.len, FERRY_MEM_REMOTE_READ, &local);
        reply(ep, &m, RMA_GET_REP, st, st == FERRY_OK ? local : NULL, st == FERRY_OK ? m.len : 0);
        break;
    case RMA_AMO: {
        uint64_t old = 0;
        st = (m.size == 4 || m.size == 8) && m.amo_op <= FERRY_ATOMIC_CSWAP && m.addr % m.size == 0
                 ? fy_region_check(rt, m.region_id, m.key, m.addr, m.size, FERRY_MEM_REMOTE_ATOMIC,
                                   &local)
                 : FERRY_ERR_PROTOCOL;
        if (st == FERRY_OK) {
            if (m.size == 8)
                AMO_APPLY(uint64_t, local, &m, old);
            else
                AMO_APPLY(uint32_t, local, &m, old);
        }
        m.operand = old;
        reply(ep, &m, RMA_AMO_REP, st, NULL, 0);
        break;
    }
    case RMA_PING:
        reply(ep, &m, RMA_PONG, FERRY_OK, NULL, 0);
        break;
    case RMA_PUT_NACK:
        fy_warn("a put to [0x%llx, +%llu) was refused by the target: %s",
                (unsigned long long)m.addr, (unsigned long long)m.len,
                ferry_status_string(m.status));
        fy_ep_note_error(ep, m.status < 0 ? m.status : FERRY_ERR_ACCESS_DENIED);
        break;
    case RMA_GET_REP:
    case RMA_AMO_REP:
    case RMA_PONG: {
        fy_op_t *op = take_waiting(w, m.wait_id);
        if (op == NULL) {
            w->drops_unknown_ep++;
            break;
        }
        st = m.status;
        if (m.op == RMA_PONG) {
            fy_ep_flush_sub_done(op, FERRY_OK);
            break;
        }
        if (st == FERRY_OK && m.op == RMA_GET_REP) {
            if (len != op->len)
                st = FERRY_ERR_PROTOCOL;
            else
                memcpy(op->buf, data, len);
            if (op->req != NULL)
                op->req->length = len;
        } else if (st == FERRY_OK && op->result != NULL) {
            if (op->amo_size == 8)
                memcpy(op->result, &m.operand, 8);
            else {
                uint32_t v = (uint32_t)m.operand;
                memcpy(op->result, &v, 4);
            }
        }
        fy_op_finish(op, st);
        break;
    }
    default:
        w->drops_malformed++;
    }
    return FERRY_OK;
}

void fy_rma_init_worker(ferry_worker_t *w)
{
    fy_am_set_handler(w, FY_AM_ID_RMA, rma_handler, w);
}
