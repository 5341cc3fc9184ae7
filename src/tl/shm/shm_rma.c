/*
 * shm_rma.c - put, get and atomics between local processes, and the target's half of an
 * atomic it is asked to perform.
 *
 * Three ways to reach remote memory, cheapest first:
 *   mapped   the region lies in a ferry-allocated shared segment that rkey_unpack mapped (or
 *            it is our own memory): memcpy, and __atomic builtins for atomics — no system
 *            call, and atomics stay atomic against the owner's own and every other peer's;
 *   CMA      any other registered memory: process_vm_writev / process_vm_readv, a single
 *            copy by the kernel (put and get complete before the call returns);
 *   request  an atomic on memory we cannot map: an AMO_REQ cell to the target's ring; its
 *            progress checks the region (id, key, bounds, rights) and answers with the old
 *            value.
 * Before any of them, the initiator checks the address range and rights against the key, so
 * an out-of-bounds or forbidden access fails with FERRY_ERR_ACCESS_DENIED and touches
 * nothing.  (Cross-memory attach itself is not a security boundary: any process allowed to
 * use it could read the whole target; the check protects against mistakes.)
 */
#include <errno.h>
#include <limits.h>
#include <sys/uio.h>

#include "tl/shm/shm.h"
#include "util/log.h"

static ferry_status_t rkey_check(const shm_ep_t *ep, const shm_rkey_t *rk, uint64_t addr,
                                 size_t len, unsigned access, char **local)
{
    if (FY_UNLIKELY(ep->blocked & SHM_EP_FAILED))
        return ep->status;
    if (rk->p.shm.pid != ep->peer->addr.pid || (rk->p.access & access) != access) {
        fy_debug("rkey refused: it is for process %d (ep to %d), rights 0x%x, need 0x%x",
                 (int)rk->p.shm.pid, (int)ep->peer->addr.pid, rk->p.access, access);
        return FERRY_ERR_ACCESS_DENIED;
    }
    uint64_t off = addr - rk->p.base;
    if (addr < rk->p.base || off > rk->p.length || len > rk->p.length - off) {
        fy_debug("remote access [0x%llx, +%zu) is outside the region [0x%llx, +%llu)",
                 (unsigned long long)addr, len, (unsigned long long)rk->p.base,
                 (unsigned long long)rk->p.length);
        return FERRY_ERR_ACCESS_DENIED;
    }
    *local = rk->mapped != NULL ? rk->mapped + off : NULL;
    return FERRY_OK;
}

/* Skip n bytes (and then any empty entries) of an iov list. */
static void iov_advance(struct iovec **v, size_t *cnt, size_t n)
{
    while (*cnt > 0) {
        if (n < (*v)->iov_len) {
            /* integer arithmetic: a remote address may be anything, NULL too */
            (*v)->iov_base = (void *)((uintptr_t)(*v)->iov_base + n);
            (*v)->iov_len -= n;
            return;
        }
        n -= (*v)->iov_len;
        (*v)++;
        (*cnt)--;
    }
}

int fy_shm_cma_copy(pid_t pid, struct iovec *l, size_t lcnt, struct iovec *r, size_t rcnt,
                    int write)
{
    iov_advance(&l, &lcnt, 0);
    iov_advance(&r, &rcnt, 0);
    while (lcnt > 0 && rcnt > 0) {
        unsigned long lc = FY_MIN(lcnt, (size_t)IOV_MAX), rc = FY_MIN(rcnt, (size_t)IOV_MAX);
        ssize_t n = write ? process_vm_writev(pid, l, lc, r, rc, 0)
                          : process_vm_readv(pid, l, lc, r, rc, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EFAULT;
        iov_advance(&l, &lcnt, (size_t)n);
        iov_advance(&r, &rcnt, (size_t)n);
    }
    return 0;
}

static ferry_status_t rma(fy_tl_ep_t *tl_ep, const struct iovec *iov, size_t iovcnt,
                          uint64_t remote_addr, const void *rkey, int write)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    if (FY_UNLIKELY(iovcnt > SHM_MAX_IOV))
        return FERRY_ERR_INVALID_PARAM;
    size_t len = fy_iov_total(iov, iovcnt);
    char *local;
    ferry_status_t st = rkey_check(ep, rkey, remote_addr, len,
                                   write ? FERRY_MEM_REMOTE_WRITE : FERRY_MEM_REMOTE_READ, &local);
    if (FY_UNLIKELY(st != FERRY_OK))
        return st;
    if (local != NULL) {
        for (size_t i = 0; i < iovcnt; i++) {
            if (write)
                fy_copy(local, iov[i].iov_base, iov[i].iov_len);
            else
                fy_copy(iov[i].iov_base, local, iov[i].iov_len);
            local += iov[i].iov_len;
        }
        ep->stats.tx_bytes += len;
        return FERRY_OK;
    }
    if (!ep->cma_ok || !ep->iface->md->opts.cma)
        return FERRY_ERR_UNSUPPORTED; /* neither shared nor reachable by CMA */
    struct iovec l[SHM_MAX_IOV], r = {(void *)(uintptr_t)remote_addr, len};
    memcpy(l, iov, iovcnt * sizeof(*iov));
    int err = fy_shm_cma_copy(ep->peer->addr.pid, l, iovcnt, &r, 1, write);
    switch (err) {
    case 0:
        ep->stats.tx_bytes += len;
        return FERRY_OK;
    case ESRCH:
        fy_shm_peer_fail(ep->iface, ep->peer, FERRY_ERR_CONNECTION_RESET);
        return FERRY_ERR_NOT_CONNECTED;
    case EPERM:
    case EACCES:
    case ENOSYS:
        fy_warn("cross-memory attach to process %d refused (%s): put/get to it now need "
                "ferry-allocated shared memory",
                (int)ep->peer->addr.pid, strerror(err));
        ep->cma_ok = 0;
        return FERRY_ERR_UNSUPPORTED;
    default:
        fy_error("%s %zu bytes at 0x%llx of process %d failed: %s", write ? "put" : "get", len,
                 (unsigned long long)remote_addr, (int)ep->peer->addr.pid, strerror(err));
        return FERRY_ERR_IO;
    }
}

/* A short put into memory we map (put_lat is this path): the key's checks and one copy, with
 * no iov to build and walk; memory reached by CMA goes through rma(). */
ferry_status_t fy_shm_put_short(fy_tl_ep_t *tl_ep, const void *buf, size_t len,
                                uint64_t remote_addr, const void *rkey)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    char *local = NULL; /* (set by rkey_check when it succeeds) */
    ferry_status_t st = rkey_check(ep, rkey, remote_addr, len, FERRY_MEM_REMOTE_WRITE, &local);
    if (FY_LIKELY(st == FERRY_OK && local != NULL)) {
        fy_copy(local, buf, len);
        ep->stats.tx_bytes += len;
        return FERRY_OK;
    }
    if (st != FERRY_OK)
        return st;
    struct iovec v = {(void *)(uintptr_t)buf, len};
    return rma(tl_ep, &v, 1, remote_addr, rkey, 1);
}

ferry_status_t fy_shm_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    return rma(ep, iov, iovcnt, remote_addr, rkey, 1);
}

/* Mapped memory only (a small get through CMA is better left to get_zcopy's accounting): as
 * put_short, the key's checks and one copy, with no iov to build and walk (get_lat is this
 * path). */
ferry_status_t fy_shm_get_short(fy_tl_ep_t *tl_ep, void *buf, size_t len, uint64_t remote_addr,
                                const void *rkey)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    char *local = NULL; /* (set by rkey_check when it succeeds) */
    if (((const shm_rkey_t *)rkey)->mapped == NULL)
        return FERRY_ERR_NO_RESOURCE;
    ferry_status_t st = rkey_check(ep, rkey, remote_addr, len, FERRY_MEM_REMOTE_READ, &local);
    if (FY_UNLIKELY(st != FERRY_OK))
        return st;
    fy_copy(buf, local, len);
    ep->stats.tx_bytes += len;
    return FERRY_OK;
}

ferry_status_t fy_shm_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    return rma(ep, iov, iovcnt, remote_addr, rkey, 0);
}

/* ---- atomics ------------------------------------------------------------------------------ */

#define AMO_CASES(T, q, v, cmp, old)                                                               \
    switch (op) {                                                                                  \
    case FERRY_ATOMIC_ADD:                                                                         \
        old = __atomic_fetch_add(q, v, __ATOMIC_SEQ_CST);                                          \
        break;                                                                                     \
    case FERRY_ATOMIC_AND:                                                                         \
        old = __atomic_fetch_and(q, v, __ATOMIC_SEQ_CST);                                          \
        break;                                                                                     \
    case FERRY_ATOMIC_OR:                                                                          \
        old = __atomic_fetch_or(q, v, __ATOMIC_SEQ_CST);                                           \
        break;                                                                                     \
    case FERRY_ATOMIC_XOR:                                                                         \
        old = __atomic_fetch_xor(q, v, __ATOMIC_SEQ_CST);                                          \
        break;                                                                                     \
    case FERRY_ATOMIC_SWAP:                                                                        \
        old = __atomic_exchange_n(q, v, __ATOMIC_SEQ_CST);                                         \
        break;                                                                                     \
    case FERRY_ATOMIC_CSWAP:                                                                       \
        old = (T)(cmp);                                                                            \
        __atomic_compare_exchange_n(q, &old, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
        break;                                                                                     \
    }

/* Perform an atomic on local (mapped) memory; returns the old value. */
static uint64_t do_amo(void *p, ferry_atomic_op_t op, size_t size, uint64_t operand,
                       uint64_t compare)
{
    if (size == 4) {
        uint32_t *q = p, v = (uint32_t)operand, old = 0;
        AMO_CASES(uint32_t, q, v, compare, old)
        return old;
    }
    uint64_t *q = p, old = 0;
    AMO_CASES(uint64_t, q, operand, compare, old)
    return old;
}

static void store_result(void *result, size_t size, uint64_t v)
{
    if (size == 4) {
        uint32_t x = (uint32_t)v;
        memcpy(result, &x, 4);
    } else {
        memcpy(result, &v, 8);
    }
}

static int amo_valid(unsigned op, size_t size, uint64_t addr)
{
    return op <= FERRY_ATOMIC_CSWAP && (size == 4 || size == 8) && addr % size == 0;
}

ferry_status_t fy_shm_atomic(fy_tl_ep_t *tl_ep, ferry_atomic_op_t aop, size_t size,
                             uint64_t operand, uint64_t compare, void *result, uint64_t remote_addr,
                             const void *rkey, fy_tl_comp_t *comp)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    const shm_rkey_t *rk = rkey;
    if (!amo_valid((unsigned)aop, size, remote_addr))
        return FERRY_ERR_INVALID_PARAM;
    char *local;
    ferry_status_t st = rkey_check(ep, rk, remote_addr, size, FERRY_MEM_REMOTE_ATOMIC, &local);
    if (st != FERRY_OK)
        return st;
    if (local != NULL) {
        uint64_t old = do_amo(local, aop, size, operand, compare);
        if (result != NULL)
            store_result(result, size, old);
        ep->stats.tx_bytes += size; /* (a flush checks the peer after any traffic) */
        return FERRY_OK;
    }
    /* Not mapped here: the target performs it. */
    if (result != NULL && comp == NULL)
        return FERRY_ERR_INVALID_PARAM;
    shm_op_t *op = fy_shm_op_new(ep, SHM_OP_AMO, result != NULL ? comp : NULL);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    uint32_t t;
    int wake = 0;
    shm_cell_t *c =
        shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
    if (c == NULL) {
        fy_shm_op_drop(op);
        fy_shm_peer_full(ep->iface, ep->peer);
        return ep->peer->status == FERRY_OK ? FERRY_ERR_NO_RESOURCE : FERRY_ERR_NOT_CONNECTED;
    }
    op->result = result;
    op->amo_size = size;
    shm_amo_req_t q = {.cookie = op->cookie,
                       .reply = ep->iface->addr,
                       .region_id = rk->p.region_id,
                       .region_key = rk->p.region_key,
                       .addr = remote_addr,
                       .operand = operand,
                       .compare = compare,
                       .op = (uint8_t)aop,
                       .size = (uint8_t)size,
                       .fetch = result != NULL};
    memcpy(ep->bufs + (size_t)(t & ep->mask) * ep->bcopy_size, &q, sizeof(q));
    shm_cell_hdr(c, SHM_CELL_AMO_REQ, 0, 0, sizeof(q));
    shm_ring_publish(c, ep->owner, t);
    if (wake)
        fy_shm_peer_wake(ep->iface, ep->peer);
    ep->stats.tx_msgs++;
    return result != NULL ? FERRY_INPROGRESS : FERRY_OK;
}

void fy_shm_amo_serve(shm_iface_t *iface, const shm_amo_req_t *q)
{
    void *local = NULL;
    uint64_t old = 0;
    ferry_status_t st = FERRY_ERR_INVALID_PARAM;
    if (amo_valid(q->op, q->size, q->addr))
        st = fy_shm_region_check(q->region_id, q->region_key, q->addr, q->size,
                                 FERRY_MEM_REMOTE_ATOMIC, &local);
    if (st == FERRY_OK)
        old = do_amo(local, (ferry_atomic_op_t)q->op, q->size, q->operand, q->compare);
    else
        fy_debug("atomic request from process %d refused: %s", (int)q->reply.pid,
                 ferry_status_string(st));
    fy_shm_reply(iface, &q->reply, SHM_CELL_AMO_REP, q->cookie, st, old);
}

void fy_shm_amo_reply(shm_iface_t *iface, const shm_reply_t *r)
{
    shm_op_t *op = fy_hash_get(&iface->ops, r->cookie);
    if (op == NULL || op->type != SHM_OP_AMO)
        return;
    ferry_status_t st = (ferry_status_t)r->status;
    if (st == FERRY_OK && op->result != NULL)
        store_result(op->result, op->amo_size, r->value);
    if (st != FERRY_OK && op->comp == NULL)
        fy_warn("a non-fetching atomic failed at process %d: %s", (int)op->ep->peer->addr.pid,
                ferry_status_string(st));
    fy_shm_op_complete(op, st);
}
