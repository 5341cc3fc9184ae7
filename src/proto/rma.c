/*
 * rma.c - put, get and atomics: the API calls, and the native paths on a transport that does
 * them.  Where the endpoint has no native lane (or the key did not unpack for it), the call
 * goes to the emulation over active messages (rma_emu.c).
 *
 * The initiator checks bounds and rights against the remote key before anything is sent, so
 * a mistake is reported at once with a clear message, native or emulated.  A small put or get
 * on memory the lane reaches at once goes to its put_short / get_short with no operation
 * object.
 *
 * A native put or get larger than the lane's max_rma goes as several transport operations of
 * at most max_rma each, pieces of one parent op (ep.c) that completes once, when they all have;
 * above FERRY_RAILS_THRESH the pieces are spread over the ep's rails (rails.c).
 *
 * ferry_putv and ferry_getv move one contiguous remote range from or to several local pieces.
 * Natively each piece (cut at max_rma) is a transport operation of its own, all pieces of one
 * parent op like a split put; emulated, a putv is one AM the transport gathers, and a getv one
 * emulated get per piece under a parent.  (The rails are not used for them.)
 *
 * Atomics are decided per width: a transport reports which ops it does natively at 32 and 64
 * bits (tl.h, amo_ops), and a width goes native only when all six ops do; otherwise every
 * atomic of that width is emulated over AM, the other width staying native.  Mixing paths
 * per operation would let a native op (done by the provider or NIC) and an emulated one (a
 * CPU atomic in the target's progress) race on one word without atomicity between them; with
 * one path per width, all the ops one endpoint issues on a word are atomic with each other,
 * as a UCX user expects.  FERRY_AMO_NATIVE_OPS narrows the native set (testing).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

static void rma_comp_cb(fy_tl_comp_t *comp, ferry_status_t st)
{
    fy_op_t *op = fy_container_of(comp, fy_op_t, comp);
    fy_worker_complete_later(op->worker, op, st);
}

/* The starts of the native types (op.c's table): one transport operation each. */
static ferry_status_t put_start(fy_op_t *op)
{
    fy_lane_t *lane = op->rail != NULL ? op->rail : &op->ep->lanes[FY_LANE_RMA]; /* rails.c */
    struct iovec iov = {op->rma.buf, op->rma.len};
    op->comp.cb = rma_comp_cb;
    return lane->iface->tl->ops->put_zcopy(lane->tl_ep, &iov, 1, op->rma.remote_addr,
                                           op->rma.rkey->tl_rkey, &op->comp);
}

static ferry_status_t get_start(fy_op_t *op)
{
    fy_lane_t *lane = op->rail != NULL ? op->rail : &op->ep->lanes[FY_LANE_RMA]; /* rails.c */
    struct iovec iov = {op->rma.buf, op->rma.len};
    op->comp.cb = rma_comp_cb;
    return lane->iface->tl->ops->get_zcopy(lane->tl_ep, &iov, 1, op->rma.remote_addr,
                                           op->rma.rkey->tl_rkey, &op->comp);
}

static ferry_status_t amo_start(fy_op_t *op)
{
    fy_lane_t *lane = &op->ep->lanes[FY_LANE_AMO];
    const fy_op_amo_t *a = &op->amo;
    op->comp.cb = rma_comp_cb;
    return lane->iface->tl->ops->atomic(lane->tl_ep, a->op, a->size, a->operand, a->compare,
                                        a->result, a->remote_addr, a->rkey->tl_rkey, &op->comp);
}

unsigned fy_amo_widths(const ferry_worker_t *w, const fy_tl_iface_attr_t *attr, uint64_t pair_caps)
{
    fy_tl_iface_attr_t pair = *attr;
    pair.caps &= pair_caps; /* a width the remote end lacks is not native either */
    unsigned widths = 0;
    for (int k = 0; k < 2; k++) {
        unsigned ops = fy_tl_amo_ops(&pair, k ? 8 : 4);
        ops &= (unsigned)(w->ctx->opts.amo_native_ops >> (8 * k)) & 0x3fu;
        if (ops == 0x3fu)
            widths |= 1u << k;
    }
    return widths;
}

static size_t put_data(const fy_op_t *op)
{
    return op->rma.len;
}

/* A put refused by the transport is also the news of the flush that covers it. */
const fy_op_ops_t fy_rma_put_op_ops = {.name = "put",
                                       .start = put_start,
                                       .data = put_data,
                                       .flags = FY_OP_F_FLUSH_ERR | FY_OP_F_UNQUEUE};
const fy_op_ops_t fy_rma_get_op_ops = {.name = "get", .start = get_start, .flags = FY_OP_F_UNQUEUE};
const fy_op_ops_t fy_rma_amo_op_ops = {.name = "atomic", .start = amo_start};

/* The log line of an access outside a key (kept out of the inline checks below). */
static ferry_status_t rkey_denied(const ferry_rkey_t *rk, uint64_t addr, size_t len,
                                  unsigned access)
{
    fy_error("remote access [0x%llx, +%zu) %s is outside the key's region [0x%llx, +%llu) "
             "or its rights",
             (unsigned long long)addr, len,
             access == FERRY_MEM_REMOTE_READ    ? "(read)"
             : access == FERRY_MEM_REMOTE_WRITE ? "(write)"
                                                : "(atomic)",
             (unsigned long long)rk->base, (unsigned long long)rk->length);
    return FERRY_ERR_ACCESS_DENIED;
}

/* Inline: every put and get starts here, and a small put's whole cost is a few dozen
 * instructions more than its copy. */
static inline ferry_status_t check_rkey(ferry_ep_t *ep, ferry_rkey_t *rk, uint64_t addr, size_t len,
                                        unsigned access)
{
    if (FY_UNLIKELY(ep == NULL || rk == NULL || rk->ep != ep))
        return FERRY_ERR_INVALID_PARAM;
    if (FY_UNLIKELY(ep->state == FY_EP_FAILED))
        return ep->failure;
    if (FY_UNLIKELY(ep->state == FY_EP_CLOSED))
        return FERRY_ERR_NOT_CONNECTED;
    if (FY_UNLIKELY(addr < rk->base || len > rk->length || addr - rk->base > rk->length - len ||
                    !(rk->access & access)))
        return rkey_denied(rk, addr, len, access);
    return FERRY_OK;
}

static ferry_status_t wait_done(ferry_worker_t *w, ferry_request_t *req)
{
    while (req->status == FERRY_INPROGRESS)
        ferry_worker_wait(w, 100);
    return req->status;
}

/* The checks every put and get starts with.  0: the call is over, with *st its result (a
 * zero-length transfer is done at once); 1: go on. */
static inline int rma_begin(ferry_ep_t *ep, const void *buf, size_t len, ferry_rkey_t *rkey,
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
        op->rma.rkey = rkey;
        op->rma.remote_addr = remote_addr + off;
        op->rma.len = n;
        op->rma.buf = (uint8_t *)buf + off;
        st = fy_ep_submit_child(ep, parent, op);
        if (st < 0 && type == FY_OP_PUT)
            fy_ep_note_error(ep, st); /* refused by the transport: the covering flush says so */
    }
    return fy_op_parent_end(parent, st < 0 ? st : FERRY_OK);
}

/* A put that is no short one: an operation on the native lane (pieces above max_rma), or the
 * emulation.  Out of line, so the short path keeps no frame for it. */
static __attribute__((noinline)) ferry_status_t put_op(ferry_ep_t *ep, const void *buf, size_t len,
                                                       uint64_t remote_addr, ferry_rkey_t *rkey,
                                                       ferry_request_t *req)
{
    if (!ep->rma_native || rkey->tl_rkey == NULL)
        return fy_rma_emu_put(ep, buf, len, remote_addr, rkey, req);
    fy_lane_t *lane = &ep->lanes[FY_LANE_RMA];
    if (fy_ep_queue_full(ep, len))
        return FERRY_ERR_NO_RESOURCE; /* FERRY_MAX_QUEUED: nothing taken */
    if (FY_UNLIKELY(len > lane->iface->attr.max_rma || fy_rails_stripe_rma(ep, rkey, len)))
        return rma_split(ep, FY_OP_PUT, (void *)buf, len, remote_addr, rkey, req,
                         lane->iface->attr.max_rma);
    fy_op_t *op = fy_op_get(ep->worker, ep, FY_OP_PUT, req);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->rma.rkey = rkey;
    op->rma.remote_addr = remote_addr;
    op->rma.len = len;
    op->rma.buf = (void *)buf;
    if (req == NULL) {
        op->copy = malloc(len);
        if (op->copy == NULL) {
            fy_op_put(op);
            return FERRY_ERR_NO_MEMORY;
        }
        memcpy(op->copy, buf, len);
        op->rma.buf = op->copy;
    }
    return fy_ep_submit(ep, op);
}

/* The checks, then a small put on memory the lane reaches at once goes to its put_short. */
static inline ferry_status_t put(ferry_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                                 ferry_rkey_t *rkey, ferry_request_t *req)
{
    ferry_status_t st;
    if (!rma_begin(ep, buf, len, rkey, remote_addr, FERRY_MEM_REMOTE_WRITE, &st))
        return st;
    if (FY_LIKELY(len <= ep->put_short_max && rkey->tl_rkey != NULL &&
                  fy_queue_is_empty(&ep->pending))) {
        st = ep->put_short(ep->lanes[FY_LANE_RMA].tl_ep, buf, len, remote_addr, rkey->tl_rkey);
        if (FY_LIKELY(st == FERRY_OK))
            return st;
        if (st != FERRY_ERR_NO_RESOURCE) {
            fy_ep_note_error(ep, st); /* refused: the covering flush says so too */
            return st;
        }
    }
    return put_op(ep, buf, len, remote_addr, rkey, req);
}

static __attribute__((noinline)) ferry_status_t put_locked(ferry_ep_t *ep, const void *buf,
                                                           size_t len, uint64_t remote_addr,
                                                           ferry_rkey_t *rkey, ferry_request_t *req)
{
    FY_WORKER_LOCK(ep->worker);
    ferry_status_t st = put(ep, buf, len, remote_addr, rkey, req);
    FY_WORKER_UNLOCK(ep->worker);
    return st;
}

/* The worker's lock only where it is one, out of line: single-threaded, no frame is kept for a
 * guard nor for the lock's path (a short put on shm: 114 instructions, 110 in a build without
 * the lock, 119 with its path in line). */
ferry_status_t ferry_put(ferry_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                         ferry_rkey_t *rkey, ferry_request_t *req)
{
    if (FY_UNLIKELY(ep == NULL))
        return FERRY_ERR_INVALID_PARAM;
    if (FY_UNLIKELY(FY_WORKER_MT(ep->worker)))
        return put_locked(ep, buf, len, remote_addr, rkey, req);
    return put(ep, buf, len, remote_addr, rkey, req);
}

/* A get that is no short one: an operation on the native lane (pieces above max_rma), or the
 * emulation; without a request, waited for here.  Out of line, so the short path keeps no
 * frame for it (nor for the local request). */
static __attribute__((noinline)) ferry_status_t get_op(ferry_ep_t *ep, void *buf, size_t len,
                                                       uint64_t remote_addr, ferry_rkey_t *rkey,
                                                       ferry_request_t *req)
{
    ferry_status_t st;
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        fy_request_local_init(&local);
        r = &local;
    }
    int native = ep->rma_native && rkey->tl_rkey != NULL;
    if (native && FY_UNLIKELY(len > ep->lanes[FY_LANE_RMA].iface->attr.max_rma ||
                              fy_rails_stripe_rma(ep, rkey, len))) {
        st = rma_split(ep, FY_OP_GET, buf, len, remote_addr, rkey, r,
                       ep->lanes[FY_LANE_RMA].iface->attr.max_rma);
        if (st == FERRY_INPROGRESS && req == NULL)
            st = wait_done(ep->worker, r);
        return st;
    }
    fy_op_t *op = fy_op_get(ep->worker, ep, native ? FY_OP_GET : FY_OP_GET_EMU, r);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->rma.rkey = rkey;
    op->rma.remote_addr = remote_addr;
    op->rma.len = len;
    op->rma.buf = buf;
    st = native ? fy_ep_submit(ep, op) : fy_rma_emu_start(op);
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_done(ep->worker, r);
    return st;
}

/* The checks, then a small get from memory the lane reaches at once is its get_short. */
static inline ferry_status_t get(ferry_ep_t *ep, void *buf, size_t len, uint64_t remote_addr,
                                 ferry_rkey_t *rkey, ferry_request_t *req)
{
    ferry_status_t st;
    if (!rma_begin(ep, buf, len, rkey, remote_addr, FERRY_MEM_REMOTE_READ, &st))
        return st;
    if (FY_LIKELY(ep->rma_native && rkey->tl_rkey != NULL)) {
        const fy_lane_t *lane = &ep->lanes[FY_LANE_RMA];
        const fy_tl_ops_t *ops = lane->iface->tl->ops;
        if (FY_LIKELY(len <= lane->iface->attr.max_get_short && ops->get_short != NULL &&
                      fy_queue_is_empty(&ep->pending))) {
            st = ops->get_short(lane->tl_ep, buf, len, remote_addr, rkey->tl_rkey);
            if (FY_LIKELY(st != FERRY_ERR_NO_RESOURCE))
                return st;
        }
    }
    return get_op(ep, buf, len, remote_addr, rkey, req);
}

static __attribute__((noinline)) ferry_status_t get_locked(ferry_ep_t *ep, void *buf, size_t len,
                                                           uint64_t remote_addr, ferry_rkey_t *rkey,
                                                           ferry_request_t *req)
{
    FY_WORKER_LOCK(ep->worker);
    ferry_status_t st = get(ep, buf, len, remote_addr, rkey, req);
    FY_WORKER_UNLOCK(ep->worker);
    return st;
}

/* As ferry_put: the lock out of line, so a single-threaded short get keeps no frame. */
ferry_status_t ferry_get(ferry_ep_t *ep, void *buf, size_t len, uint64_t remote_addr,
                         ferry_rkey_t *rkey, ferry_request_t *req)
{
    if (FY_UNLIKELY(ep == NULL))
        return FERRY_ERR_INVALID_PARAM;
    if (FY_UNLIKELY(FY_WORKER_MT(ep->worker)))
        return get_locked(ep, buf, len, remote_addr, rkey, req);
    return get(ep, buf, len, remote_addr, rkey, req);
}

ferry_status_t ferry_atomic(ferry_ep_t *ep, ferry_atomic_op_t aop, size_t size, uint64_t operand,
                            uint64_t compare, void *result, uint64_t remote_addr,
                            ferry_rkey_t *rkey, ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    if ((size != 4 && size != 8) || aop > FERRY_ATOMIC_CSWAP || (remote_addr % size) != 0 ||
        (aop == FERRY_ATOMIC_CSWAP && result == NULL))
        return FERRY_ERR_INVALID_PARAM;
    ferry_status_t st = check_rkey(ep, rkey, remote_addr, size, FERRY_MEM_REMOTE_ATOMIC);
    if (st != FERRY_OK)
        return st;
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        fy_request_local_init(&local);
        r = &local;
    }
    int native = (ep->amo_native & (1 << (size == 8))) && rkey->tl_rkey != NULL &&
                 ep->lanes[FY_LANE_AMO].iface == ep->lanes[FY_LANE_RMA].iface;
    if (!native)
        ep->worker->amo_emulated++;
    fy_op_t *op = fy_op_get(ep->worker, ep, native ? FY_OP_AMO : FY_OP_AMO_EMU, r);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->amo.rkey = rkey;
    op->amo.remote_addr = remote_addr;
    op->amo.op = aop;
    op->amo.size = size;
    op->amo.operand = operand;
    op->amo.compare = compare;
    op->amo.result = result;
    st = native ? fy_ep_submit(ep, op) : fy_rma_emu_start(op);
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_done(ep->worker, r);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Several local pieces: putv, getv                                                            */
/* ------------------------------------------------------------------------------------------ */

/* The pieces v[0..n) (none empty) to or from [remote_addr, +total), each a child op of one
 * parent holding req (not NULL): native puts or gets of at most max_rma, or emulated gets. */
static ferry_status_t rma_pieces(ferry_ep_t *ep, fy_op_type_t type, const struct iovec *v, size_t n,
                                 uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req)
{
    int native = ep->rma_native && rkey->tl_rkey != NULL;
    size_t max = native ? ep->lanes[FY_LANE_RMA].iface->attr.max_rma : SIZE_MAX;
    fy_op_type_t child = native ? type : FY_OP_GET_EMU;
    if (max == 0)
        max = SIZE_MAX;
    fy_op_t *parent = fy_op_get(ep->worker, NULL, type, req);
    if (parent == NULL)
        return FERRY_ERR_NO_MEMORY;
    fy_op_parent_init(parent);
    ferry_status_t st = FERRY_OK;
    uint64_t off = 0;
    for (size_t i = 0; i < n && st >= 0; i++) {
        for (size_t done = 0; done < v[i].iov_len && st >= 0;) {
            size_t len = FY_MIN(v[i].iov_len - done, max);
            fy_op_t *op = fy_op_get(ep->worker, ep, child, NULL);
            if (op == NULL) {
                st = FERRY_ERR_NO_MEMORY;
                break;
            }
            op->rma.rkey = rkey;
            op->rma.remote_addr = remote_addr + off;
            op->rma.len = len;
            op->rma.buf = (uint8_t *)v[i].iov_base + done;
            st = fy_ep_submit_child(ep, parent, op);
            if (st < 0 && type == FY_OP_PUT)
                fy_ep_note_error(ep, st); /* refused by the transport: the flush says so */
            done += len;
            off += len;
        }
    }
    return fy_op_parent_end(parent, st < 0 ? st : FERRY_OK);
}

/* The common start of putv and getv: the caller's pieces taken (empty ones dropped) into v,
 * their count and total length, and the remote range checked against the key. */
static ferry_status_t rmav_take(const char *fn, ferry_ep_t *ep, const struct iovec *iov,
                                size_t iovcnt, uint64_t remote_addr, ferry_rkey_t *rkey,
                                unsigned access, struct iovec *v, size_t *n, size_t *len)
{
    long k = fy_iov_take(fn, iov, iovcnt, v);
    *n = 0;
    *len = 0;
    if (k < 0)
        return FERRY_ERR_INVALID_PARAM;
    *n = (size_t)k;
    *len = fy_iov_total(v, *n);
    return check_rkey(ep, rkey, remote_addr, *len, access);
}

ferry_status_t ferry_putv(ferry_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                          uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    struct iovec v[FY_MAX_IOV];
    size_t n, len;
    ferry_status_t st = rmav_take("ferry_putv", ep, iov, iovcnt, remote_addr, rkey,
                                  FERRY_MEM_REMOTE_WRITE, v, &n, &len);
    if (st != FERRY_OK || n == 0)
        return st;
    if (n == 1)
        return ferry_put(ep, v[0].iov_base, len, remote_addr, rkey, req);
    if (!ep->rma_native || rkey->tl_rkey == NULL)
        return fy_rma_emu_putv(ep, v, n, remote_addr, rkey, req);
    if (fy_ep_queue_full(ep, len))
        return FERRY_ERR_NO_RESOURCE; /* FERRY_MAX_QUEUED: nothing taken */
    if (req == NULL) { /* the caller's pieces are free at return: one contiguous copy */
        void *tmp = malloc(len);
        if (tmp == NULL)
            return FERRY_ERR_NO_MEMORY;
        fy_iov_gather(tmp, v, n);
        st = ferry_put(ep, tmp, len, remote_addr, rkey, NULL);
        free(tmp);
        return st;
    }
    return rma_pieces(ep, FY_OP_PUT, v, n, remote_addr, rkey, req);
}

ferry_status_t ferry_getv(ferry_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                          uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req)
{
    FY_EP_GUARD(ep);
    struct iovec v[FY_MAX_IOV];
    size_t n, len;
    ferry_status_t st = rmav_take("ferry_getv", ep, iov, iovcnt, remote_addr, rkey,
                                  FERRY_MEM_REMOTE_READ, v, &n, &len);
    if (st != FERRY_OK || n == 0)
        return st;
    if (n == 1)
        return ferry_get(ep, v[0].iov_base, len, remote_addr, rkey, req);
    ferry_request_t local;
    ferry_request_t *r = req;
    if (r == NULL) {
        fy_request_local_init(&local);
        r = &local;
    }
    r->length = len;
    st = rma_pieces(ep, FY_OP_GET, v, n, remote_addr, rkey, r);
    if (st == FERRY_INPROGRESS && req == NULL)
        st = wait_done(ep->worker, r);
    return st;
}
