/*
 * rma_emu.c - put, get and atomics emulated over active messages, for endpoints without a
 * native RMA lane (or with FERRY_RMA_EMULATE=y): both sides of a small protocol on the
 * internal AM id FY_AM_ID_RMA.
 *
 * The target checks every request against the context's region table (id, key, bounds,
 * rights) exactly as a native transport's target would, and touches nothing outside a
 * registered region.  A get or a fetching atomic waits for its answer under a wait id (a hash
 * lookup, never a raw pointer from the wire), and an answer must be of the kind its waiting
 * operation asked for.  A refused put has no request to fail: the target answers PUT_NACK
 * before it handles anything later, so the NACK is in before the PONG of the flush that
 * covers the put, and that flush completes with FERRY_ERR_ACCESS_DENIED.  Flush after
 * emulated puts is a PING/PONG round trip: the target handles messages in order, so the PONG
 * means every earlier put has landed.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

/*
 * The emulation header (64 bytes, host order), the user header of every FY_AM_ID_RMA message;
 * PUT and GET_REP carry the bytes as the AM's data.
 *
 *   0        8        16       24       32                               63
 *   +--------+--------+--------+--------+--------------------------------+
 *   | op     | amo_op | size   | pad    | status (answers)               |
 *   +--------+--------+--------+--------+--------------------------------+
 *   | region_id | key | addr | len | wait_id | operand (AMO_REP: old) | compare |
 *   +--------------------------------------------------------------------+
 */
enum { RMA_PUT, RMA_GET, RMA_AMO, RMA_GET_REP, RMA_AMO_REP, RMA_PUT_NACK, RMA_PING, RMA_PONG };

typedef struct fy_rma_msg {
    uint8_t op;
    uint8_t amo_op;
    uint8_t size;
    uint8_t pad;
    int32_t status;
    uint64_t region_id, key, addr, len, wait_id, operand, compare;
} fy_rma_msg_t;

static void emu_init(fy_rma_msg_t *m, int op, ferry_rkey_t *rk, uint64_t addr, size_t len)
{
    memset(m, 0, sizeof(*m));
    m->op = (uint8_t)op;
    m->region_id = rk->region_id;
    m->key = rk->key;
    m->addr = addr;
    m->len = len;
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

/* The starts of FY_OP_GET_EMU and FY_OP_AMO_EMU (op.c's table): send the request. */
static ferry_status_t get_emu_send(fy_op_t *op)
{
    fy_rma_msg_t m;
    emu_init(&m, RMA_GET, op->rma.rkey, op->rma.remote_addr, op->rma.len);
    return emu_request(op, &m, NULL, 0);
}

static ferry_status_t amo_emu_send(fy_op_t *op)
{
    const fy_op_amo_t *a = &op->amo;
    fy_rma_msg_t m;
    emu_init(&m, RMA_AMO, a->rkey, a->remote_addr, a->size);
    m.amo_op = (uint8_t)a->op;
    m.size = (uint8_t)a->size;
    m.operand = a->operand;
    m.compare = a->compare;
    return emu_request(op, &m, NULL, 0);
}

const fy_op_ops_t fy_rma_get_emu_op_ops = {.name = "get-emulated", .start = get_emu_send};
const fy_op_ops_t fy_rma_amo_emu_op_ops = {.name = "atomic-emulated", .start = amo_emu_send};

/* Start an emulated get or atomic: counted on its endpoint until the answer comes; released
 * at once if it could not be sent. */
ferry_status_t fy_rma_emu_start(fy_op_t *op)
{
    ferry_status_t st = fy_op_start(op);
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

/* A put emulated over AM: no answer unless the target refuses it (PUT_NACK); the next flush
 * on the endpoint makes a PING round trip that covers it.  From several pieces (putv) it is
 * still one AM: the transport gathers them, unless its lane takes fewer pieces in one operation
 * (max_iov, less the two headers): then they are gathered here first. */
ferry_status_t fy_rma_emu_putv(ferry_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                               uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req)
{
    size_t len = fy_iov_total(iov, iovcnt);
    fy_rma_msg_t m;
    emu_init(&m, RMA_PUT, rkey, remote_addr, len);
    if (fy_ep_queue_full(ep, sizeof(m) + len))
        return FERRY_ERR_NO_RESOURCE; /* FERRY_MAX_QUEUED: nothing taken */
    const fy_iface_t *fi = ep->lanes[FY_LANE_AM].iface;
    if (iovcnt > 1 && fi != NULL && iovcnt + 2 > fi->attr.max_iov) {
        void *tmp = malloc(len);
        if (tmp == NULL)
            return FERRY_ERR_NO_MEMORY;
        fy_iov_gather(tmp, iov, iovcnt);
        struct iovec one = {tmp, len};
        ep->emulated_since_flush++;
        ferry_status_t st = fy_am_send(ep, FY_AM_ID_RMA, &m, sizeof(m), &one, 1, NULL);
        free(tmp); /* given no request, the AM copied what it could not send at once */
        return st;
    }
    ep->emulated_since_flush++;
    return fy_am_send(ep, FY_AM_ID_RMA, &m, sizeof(m), iov, iovcnt, req);
}

ferry_status_t fy_rma_emu_put(ferry_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                              ferry_rkey_t *rkey, ferry_request_t *req)
{
    struct iovec iov = {(void *)buf, len};
    return fy_rma_emu_putv(ep, &iov, 1, remote_addr, rkey, req);
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
        fy_op_t *op = fy_hash_get(&w->waiting, m.wait_id);
        fy_op_type_t want = m.op == RMA_GET_REP   ? FY_OP_GET_EMU
                            : m.op == RMA_AMO_REP ? FY_OP_AMO_EMU
                                                  : FY_OP_FLUSH;
        if (op == NULL || (op->type != want && !(want == FY_OP_FLUSH && op->type == FY_OP_CLOSE))) {
            w->drops_unknown_ep++; /* no such wait, or an answer of another kind */
            break;
        }
        take_waiting(w, m.wait_id);
        st = m.status;
        if (m.op == RMA_PONG) {
            fy_ep_flush_sub_done(op, FERRY_OK);
            break;
        }
        if (st == FERRY_OK && m.op == RMA_GET_REP) {
            if (len != op->rma.len)
                st = FERRY_ERR_PROTOCOL;
            else
                memcpy(op->rma.buf, data, len);
            if (op->req != NULL)
                op->req->length = len;
        } else if (st == FERRY_OK && m.op == RMA_AMO_REP && op->amo.result != NULL) {
            if (op->amo.size == 8)
                memcpy(op->amo.result, &m.operand, 8);
            else {
                uint32_t v = (uint32_t)m.operand;
                memcpy(op->amo.result, &v, 4);
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
