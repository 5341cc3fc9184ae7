/*
 * ofi_ep.c - the ofi endpoint: an address vector entry and the operations on it.
 *
 * AM.  Every message is [fy_ofi_hdr_t][payload] on fi_send, received into the iface's
 * pre-posted buffers (ofi_progress.c); FI_ORDER_SAS keeps the AMs of one ep in order.
 * am_short goes by fi_inject when it fits the provider's inject size (done in the call, no
 * completion), otherwise as am_bcopy: a copy into the op's buffer and fi_send.  am_zcopy
 * sends the header (copied) and the caller's iov by fi_sendmsg, completing when libfabric
 * gives the buffers back.  AMs are at most iface->msg_max on the wire; a longer am_zcopy
 * (above FERRY_OFI_RNDV_THRESH, at most the eager size) goes by rendezvous: the receiver
 * fi_reads the caller's iov (ofi_rndv.c).
 *
 * RMA.  fi_writemsg / fi_readmsg straight from and to the caller's buffers; the rkey tells
 * the region's base, length, rights and whether the provider addresses by virtual address
 * or by offset.  Atomics go to fi_atomic / fi_fetch_atomic / fi_compare_atomic when
 * fi_atomicvalid says the provider has every form of the op at that width (ofi_iface.c);
 * the iface reports which ops are native per width (attr.amo_ops), and proto emulates a
 * width that lacks any of them over AM, as a whole (rma.c).
 *
 * DESCRIPTORS.  Under FI_MR_LOCAL every post passes descriptors (fy_ofi_op_local_mr for the
 * op's own buffers, registered once; fy_ofi_op_descs for the caller's, from the registration
 * cache, held until the op returns to the pool); otherwise they are NULL.
 *
 * FLUSH.  Operations are posted with FI_DELIVERY_COMPLETE where the provider accepts it, so
 * their completion already means remote completion, and a flush waits for the ops before it
 * (issue order, the ep's list).  Injected sends have no completion: a flush after them sends
 * a small probe message with delivery completion (sends are ordered, so when the probe is
 * delivered so is everything before it).  Without FI_DELIVERY_COMPLETE, a flush after writes
 * reads 8 bytes from the peer's flush word: the provider orders a read after earlier writes
 * (FI_ORDER_RAW), so the read's completion means the writes landed.
 */
#include <endian.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "tl/ofi/ofi.h"
#include "util/log.h"
#include "util/status.h"

static inline fy_ofi_iface_t *ep_iface(fy_ofi_ep_t *ep)
{
    return (fy_ofi_iface_t *)ep->super.iface;
}

/* iov entries of the caller's (one more goes to the header) */
static size_t max_iov(const fy_ofi_iface_t *iface)
{
    return iface->max_iov > 1 ? iface->max_iov - 1 : 1;
}

static uint64_t dc_flags(fy_ofi_iface_t *iface)
{
    return FI_COMPLETION | (iface->md->delivery ? FI_DELIVERY_COMPLETE : 0);
}

ferry_status_t fy_ofi_ep_create(fy_tl_iface_t *super, const void *dev_addr, const void *iface_addr,
                                fy_tl_ep_t **ep_p)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    if (!fy_ofi_iface_is_reachable(super, dev_addr, iface_addr))
        return FERRY_ERR_UNREACHABLE;
    fy_ofi_iface_addr_t a;
    memcpy(&a, iface_addr, sizeof(a));
    pid_t pid = (pid_t)le32toh(a.pid);
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
        return FERRY_ERR_UNREACHABLE; /* the peer's process is gone */
    if (pid == getpid() && fy_ofi_park_has(a.name, le32toh(a.name_len)))
        return FERRY_ERR_UNREACHABLE; /* an interface of this process that closed */
    fy_ofi_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return FERRY_ERR_NO_MEMORY;
    ep->super.iface = super;
    ep->pid = pid;
    if (pid == getpid())
        iface->same_process = 1;        /* shm: its endpoint is parked at close (ofi_park.c) */
    ep->name_len = le32toh(a.name_len); /* checked by is_reachable */
    memcpy(ep->name, a.name, ep->name_len);
    ep->flush_addr = le64toh(a.flush_addr);
    ep->flush_key = le64toh(a.flush_key);
    fy_list_init(&ep->ops);
    int ret = fy_ofi_av_insert(iface, a.name, le32toh(a.name_len), &ep->addr); /* SEP hook */
    if (ret != 1) {
        fy_debug("ofi: fi_av_insert failed: %s", fi_strerror(ret < 0 ? -ret : FI_EINVAL));
        free(ep);
        return FERRY_ERR_UNREACHABLE;
    }
    fy_list_add_tail(&iface->eps, &ep->elem);
    *ep_p = &ep->super;
    return FERRY_OK;
}

void fy_ofi_ep_destroy(fy_tl_ep_t *super)
{
    fy_ofi_ep_t *ep = (fy_ofi_ep_t *)super;
    if (ep == NULL || ep->destroyed)
        return;
    ep->depth++;
    fy_ofi_ep_drain(ep);
    fy_list_del(&ep->elem);
    ep->destroyed = 1;
    if (--ep->depth == 0)
        free(ep);
}

ferry_status_t fy_ofi_ep_get_stats(fy_tl_ep_t *super, ferry_ep_stats_t *stats)
{
    fy_ofi_ep_t *ep = (fy_ofi_ep_t *)super;
    fy_ofi_iface_t *iface = ep_iface(ep);
    memset(stats, 0, sizeof(*stats));
    stats->tx_msgs = ep->tx_msgs;
    stats->tx_bytes = ep->tx_bytes;
    stats->drops_malformed = iface->rx_dropped;
    stats->window_used = iface->inflight;
    stats->window_max = iface->tx_ops;
    return FERRY_OK;
}

/* Post an op built by the caller: on success it joins the ep's list. */
static void track(fy_ofi_ep_t *ep, fy_ofi_op_t *op)
{
    op->posted = 1;
    ep->unflushed++;
    fy_list_add_tail(&ep->ops, &op->elem);
}

static ferry_status_t posted_status(fy_ofi_iface_t *iface, fy_ofi_op_t *op, ssize_t ret)
{
    if (ret == 0)
        return FERRY_OK;
    fy_ofi_op_put(iface, op);
    if (ret == -FI_EAGAIN)
        return FERRY_ERR_NO_RESOURCE;
    fy_debug("ofi: posting an operation failed: %s", fi_strerror((int)-ret));
    return fy_ofi_status((int)ret);
}

static ssize_t post_send(fy_ofi_ep_t *ep, fy_ofi_op_t *op, const struct iovec *v, size_t n)
{
    fy_ofi_iface_t *iface = ep_iface(ep);
    struct fi_msg m = {.msg_iov = v,
                       .desc = iface->md->mrdom.mode.local ? op->desc : NULL,
                       .iov_count = n,
                       .addr = ep->addr,
                       .context = &op->ctx};
    return fi_sendmsg(iface->ep, &m, dc_flags(iface));
}

/* Send now, or queue behind earlier queued sends (AM order): a send libfabric refuses with
 * -FI_EAGAIN is queued and posted from progress, so it is never dropped and never reordered;
 * the op limit (FERRY_OFI_TX_OPS) is what says NO_RESOURCE to the caller. */
ferry_status_t fy_ofi_send_iov(fy_ofi_ep_t *ep, fy_ofi_op_t *op, const struct iovec *v, size_t n)
{
    fy_ofi_iface_t *iface = ep_iface(ep);
    ssize_t ret = ep->nqueued > 0 ? -FI_EAGAIN : post_send(ep, op, v, n);
    if (ret == -FI_EAGAIN) {
        for (size_t i = 0; i < n; i++)
            op->iov[i] = v[i];
        op->niov = (uint8_t)n;
        op->queued = 1;
        ep->nqueued++;
        iface->eagain = 1;
        ep->unflushed++;
        fy_list_add_tail(&ep->ops, &op->elem);
        return FERRY_OK;
    }
    ferry_status_t st = posted_status(iface, op, ret);
    if (st == FERRY_OK)
        track(ep, op);
    return st;
}

/* From progress: post what was queued, in order, until libfabric is busy again.  Returns 1
 * when the ep failed (callbacks ran). */
int fy_ofi_ep_retry(fy_ofi_ep_t *ep)
{
    fy_ofi_iface_t *iface = ep_iface(ep);
    fy_list_t *e;
    fy_list_for_each(e, &ep->ops)
    {
        fy_ofi_op_t *op = fy_container_of(e, fy_ofi_op_t, elem);
        if (op->queued) {
            ssize_t ret = post_send(ep, op, op->iov, op->niov);
            if (ret == -FI_EAGAIN) {
                iface->eagain = 1;
                return 0;
            }
            op->queued = 0;
            ep->nqueued--;
            if (ret != 0) { /* the peer cannot be reached: the ep fails, like a send */
                fy_debug("ofi: a queued send failed: %s", fi_strerror((int)-ret));
                iface->eagain = 1;
                fy_ofi_ep_fail(ep, fy_ofi_status((int)ret));
                return 1;
            }
            op->posted = 1;
        } else if (op->kind == FY_OFI_OP_FLUSH && op->need_read && !op->posted) {
            if (fy_ofi_post_flush_read(iface, op) == -FI_EAGAIN)
                return 0;
        }
    }
    return 0;
}

/* The op's copy buffer (kept across reuse; registered once under FI_MR_LOCAL), its
 * descriptor in op->desc[0]. */
int fy_ofi_op_bbuf(fy_ofi_iface_t *iface, fy_ofi_op_t *op)
{
    if (op->bbuf == NULL)
        op->bbuf = malloc(iface->bbuf_size);
    if (op->bbuf == NULL ||
        fy_ofi_op_local_mr(iface, op, op->bbuf, iface->bbuf_size, &op->bbuf_mr) != FERRY_OK)
        return 0;
    op->desc[0] = fy_ofi_mr_desc(&op->bbuf_mr);
    return 1;
}

void fy_ofi_put_hdr(fy_ofi_iface_t *iface, void *dst, uint8_t type, uint8_t id)
{
    fy_ofi_hdr_t h = {.type = type, .am_id = id, .rsvd = 0, .job_tag = htole32(iface->job_tag)};
    memcpy(dst, &h, sizeof(h));
}

ferry_status_t fy_ofi_am_bcopy(fy_tl_ep_t *super, uint8_t id, const struct iovec *iov,
                               size_t iovcnt)
{
    fy_ofi_ep_t *ep = (fy_ofi_ep_t *)super;
    fy_ofi_iface_t *iface = ep_iface(ep);
    size_t len = fy_iov_total(iov, iovcnt);
    if (id > FY_TL_AM_ID_MAX || len > iface->bcopy_max - sizeof(fy_ofi_hdr_t) ||
        iovcnt > max_iov(iface))
        return FERRY_ERR_INVALID_PARAM;
    if (ep->failed != FERRY_OK)
        return ep->failed;
    fy_ofi_op_t *op = fy_ofi_op_get(iface, ep, FY_OFI_OP_SEND, NULL);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    if (!fy_ofi_op_bbuf(iface, op)) {
        fy_ofi_op_put(iface, op);
        return FERRY_ERR_NO_MEMORY;
    }
    fy_ofi_put_hdr(iface, op->bbuf, FY_OFI_AM, id);
    fy_iov_gather((uint8_t *)op->bbuf + sizeof(fy_ofi_hdr_t), iov, iovcnt);
    struct iovec v = {op->bbuf, len + sizeof(fy_ofi_hdr_t)};
    ferry_status_t st = fy_ofi_send_iov(ep, op, &v, 1);
    if (st == FERRY_OK) {
        ep->tx_msgs++;
        ep->tx_bytes += len;
    }
    return st;
}

ferry_status_t fy_ofi_am_short(fy_tl_ep_t *super, uint8_t id, const struct iovec *iov,
                               size_t iovcnt)
{
    fy_ofi_ep_t *ep = (fy_ofi_ep_t *)super;
    fy_ofi_iface_t *iface = ep_iface(ep);
    size_t len = fy_iov_total(iov, iovcnt);
    size_t inj = iface->inject_size > iface->bcopy_max ? iface->bcopy_max : iface->inject_size;
    size_t max = inj >= 64 + sizeof(fy_ofi_hdr_t) ? inj - sizeof(fy_ofi_hdr_t) : 64;
    if (id > FY_TL_AM_ID_MAX || len > max || iovcnt > max_iov(iface))
        return FERRY_ERR_INVALID_PARAM;
    if (ep->failed != FERRY_OK)
        return ep->failed;
    if (len + sizeof(fy_ofi_hdr_t) > inj || ep->nqueued > 0 || iface->no_inject)
        return fy_ofi_am_bcopy(super, id, iov, iovcnt);
    uint8_t buf[FY_OFI_BCOPY];
    fy_ofi_put_hdr(iface, buf, FY_OFI_AM, id);
    fy_iov_gather(buf + sizeof(fy_ofi_hdr_t), iov, iovcnt);
    ssize_t ret = fi_inject(iface->ep, buf, len + sizeof(fy_ofi_hdr_t), ep->addr);
    if (ret == -FI_EAGAIN)
        return fy_ofi_am_bcopy(super, id, iov, iovcnt); /* queued in order */
    if (ret != 0) {
        fy_debug("ofi: fi_inject: %s", fi_strerror((int)-ret));
        return fy_ofi_status((int)ret);
    }
    ep->injects++;
    ep->unflushed++;
    ep->tx_msgs++;
    ep->tx_bytes += len;
    return FERRY_OK;
}

ferry_status_t fy_ofi_am_zcopy(fy_tl_ep_t *super, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp)
{
    fy_ofi_ep_t *ep = (fy_ofi_ep_t *)super;
    fy_ofi_iface_t *iface = ep_iface(ep);
    size_t len = fy_iov_total(iov, iovcnt);
    size_t max = iface->rndv_thresh != SIZE_MAX ? iface->rndv_max : iface->msg_max;
    /* by rendezvous each entry is read on its own: more entries than the provider's iov */
    int rndv = hdr_len + len > iface->rndv_thresh;
    if (id > FY_TL_AM_ID_MAX || hdr_len > 256 ||
        iovcnt > (rndv ? FY_OFI_RNDV_IOV : max_iov(iface)) || comp == NULL ||
        hdr_len + len > max - sizeof(fy_ofi_hdr_t))
        return FERRY_ERR_INVALID_PARAM;
    if (ep->failed != FERRY_OK)
        return ep->failed;
    if (rndv) /* the receiver reads it (ofi_rndv.c) */
        return fy_ofi_rndv_send(ep, id, hdr, hdr_len, iov, iovcnt, comp);
    fy_ofi_op_t *op = fy_ofi_op_get(iface, ep, FY_OFI_OP_SEND, comp);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    if (!fy_ofi_op_bbuf(iface, op)) {
        fy_ofi_op_put(iface, op);
        return FERRY_ERR_NO_MEMORY;
    }
    fy_ofi_put_hdr(iface, op->bbuf, FY_OFI_AM, id);
    if (hdr_len > 0)
        memcpy((uint8_t *)op->bbuf + sizeof(fy_ofi_hdr_t), hdr, hdr_len);
    struct iovec v[8];
    size_t n = 0;
    v[n++] = (struct iovec){op->bbuf, sizeof(fy_ofi_hdr_t) + hdr_len};
    if (iface->zcopy_copies) { /* one buffer of the op's own (rxd) */
        fy_iov_gather((uint8_t *)op->bbuf + v[0].iov_len, iov, iovcnt);
        v[0].iov_len += len;
    } else {
        for (size_t i = 0; i < iovcnt; i++)
            if (iov[i].iov_len > 0)
                v[n++] = iov[i];
    }
    ferry_status_t st = fy_ofi_op_descs(iface, op, v, 1, n);
    if (st != FERRY_OK) {
        fy_ofi_op_put(iface, op);
        return st;
    }
    st = fy_ofi_send_iov(ep, op, v, n);
    if (st != FERRY_OK)
        return st;
    ep->tx_msgs++;
    ep->tx_bytes += len + hdr_len;
    return FERRY_INPROGRESS;
}

/* ---- RMA ---------------------------------------------------------------------------------- */

/* Refuse at once what the key does not allow; the provider's address for remote_addr. */
static ferry_status_t rma_check(const fy_ofi_mr_rkey_t *k, uint64_t remote_addr, size_t len,
                                unsigned right, uint64_t *addr)
{
    return fy_ofi_rkey_addr(k, remote_addr, len, right, addr) == FERRY_OK ? FERRY_OK
                                                                          : FERRY_ERR_ACCESS_DENIED;
}

static ferry_status_t rma(fy_ofi_ep_t *ep, int write, const struct iovec *iov, size_t iovcnt,
                          uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    fy_ofi_iface_t *iface = ep_iface(ep);
    size_t len = fy_iov_total(iov, iovcnt);
    if (comp == NULL || iovcnt > max_iov(iface) || len > iface->max_msg || len > (1ull << 30))
        return FERRY_ERR_INVALID_PARAM;
    uint64_t addr;
    ferry_status_t st = rma_check(rkey, remote_addr, len,
                                  write ? FERRY_MEM_REMOTE_WRITE : FERRY_MEM_REMOTE_READ, &addr);
    if (st != FERRY_OK)
        return st;
    if (ep->failed != FERRY_OK)
        return ep->failed;
    if (len == 0)
        return FERRY_OK;
    fy_ofi_op_t *op = fy_ofi_op_get(iface, ep, write ? FY_OFI_OP_WRITE : FY_OFI_OP_READ, comp);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    struct iovec v[8];
    size_t n = 0;
    for (size_t i = 0; i < iovcnt; i++)
        if (iov[i].iov_len > 0)
            v[n++] = iov[i];
    st = fy_ofi_op_descs(iface, op, v, 0, n);
    if (st != FERRY_OK) {
        fy_ofi_op_put(iface, op);
        return st;
    }
    struct fi_rma_iov r = {.addr = addr, .len = len, .key = ((const fy_ofi_mr_rkey_t *)rkey)->key};
    struct fi_msg_rma m = {.msg_iov = v,
                           .desc = iface->md->mrdom.mode.local ? op->desc : NULL,
                           .iov_count = n,
                           .addr = ep->addr,
                           .rma_iov = &r,
                           .rma_iov_count = 1,
                           .context = &op->ctx};
    ssize_t ret = write ? fi_writemsg(iface->ep, &m, dc_flags(iface))
                        : fi_readmsg(iface->ep, &m, FI_COMPLETION);
    st = posted_status(iface, op, ret);
    if (st != FERRY_OK)
        return st;
    track(ep, op);
    if (write)
        ep->writes++;
    ep->tx_bytes += len;
    return FERRY_INPROGRESS;
}

ferry_status_t fy_ofi_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    return rma((fy_ofi_ep_t *)ep, 1, iov, iovcnt, remote_addr, rkey, comp);
}

ferry_status_t fy_ofi_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    return rma((fy_ofi_ep_t *)ep, 0, iov, iovcnt, remote_addr, rkey, comp);
}

ferry_status_t fy_ofi_atomic(fy_tl_ep_t *super, ferry_atomic_op_t aop, size_t size,
                             uint64_t operand, uint64_t compare, void *result, uint64_t remote_addr,
                             const void *rkey, fy_tl_comp_t *comp)
{
    fy_ofi_ep_t *ep = (fy_ofi_ep_t *)super;
    fy_ofi_iface_t *iface = ep_iface(ep);
    if ((size != 4 && size != 8) || (unsigned)aop > FERRY_ATOMIC_CSWAP || remote_addr % size ||
        (aop == FERRY_ATOMIC_CSWAP && result == NULL) || (result != NULL && comp == NULL))
        return FERRY_ERR_INVALID_PARAM;
    if (!(iface->md->amo_mask[size == 8] & (1u << aop)))
        return FERRY_ERR_UNSUPPORTED;
    uint64_t addr;
    ferry_status_t st = rma_check(rkey, remote_addr, size, FERRY_MEM_REMOTE_ATOMIC, &addr);
    if (st != FERRY_OK)
        return st;
    if (ep->failed != FERRY_OK)
        return ep->failed;
    fy_ofi_op_t *op = fy_ofi_op_get(iface, ep, FY_OFI_OP_AMO, comp);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    enum fi_datatype dt = size == 4 ? FI_UINT32 : FI_UINT64;
    static const enum fi_op map[] = {FI_SUM, FI_BAND, FI_BOR, FI_BXOR, FI_ATOMIC_WRITE, FI_CSWAP};
    if (size == 4) {
        uint32_t o = (uint32_t)operand, c = (uint32_t)compare;
        memcpy(&op->operand, &o, 4);
        memcpy(&op->compare, &c, 4);
    } else {
        op->operand = operand;
        op->compare = compare;
    }
    op->amo_size = size;
    op->result_dst = result;
    /* FI_MR_LOCAL: operand, compare and result live in the op, registered once */
    st = fy_ofi_op_local_mr(iface, op, op, sizeof(*op), &op->self_mr);
    if (st != FERRY_OK) {
        fy_ofi_op_put(iface, op);
        return st;
    }
    void *d = fy_ofi_mr_desc(&op->self_mr);
    uint64_t key = ((const fy_ofi_mr_rkey_t *)rkey)->key;
    struct fi_ioc ioc = {&op->operand, 1}, cmp = {&op->compare, 1}, res = {&op->result, 1};
    struct fi_rma_ioc rioc = {.addr = addr, .count = 1, .key = key};
    struct fi_msg_atomic m = {.msg_iov = &ioc,
                              .desc = &d,
                              .iov_count = 1,
                              .addr = ep->addr,
                              .rma_iov = &rioc,
                              .rma_iov_count = 1,
                              .datatype = dt,
                              .op = map[aop],
                              .context = &op->ctx};
    ssize_t ret;
    if (aop == FERRY_ATOMIC_CSWAP)
        ret = fi_compare_atomicmsg(iface->ep, &m, &cmp, &d, 1, &res, &d, 1, FI_COMPLETION);
    else if (result != NULL)
        ret = fi_fetch_atomicmsg(iface->ep, &m, &res, &d, 1, FI_COMPLETION);
    else
        ret = fi_atomicmsg(iface->ep, &m, dc_flags(iface));
    st = posted_status(iface, op, ret);
    if (st != FERRY_OK)
        return st;
    track(ep, op);
    if (result == NULL)
        ep->writes++;
    /* a non-fetching atomic without comp is done for its caller; errors go to the flush */
    return comp == NULL ? FERRY_OK : FERRY_INPROGRESS;
}

/* ---- flush -------------------------------------------------------------------------------- */

int fy_ofi_post_flush_read(fy_ofi_iface_t *iface, fy_ofi_op_t *op)
{
    fy_ofi_ep_t *ep = op->ep;
    ssize_t ret = -FI_EINVAL;
    if (fy_ofi_op_local_mr(iface, op, op, sizeof(*op), &op->self_mr) == FERRY_OK)
        ret = fi_read(iface->ep, &op->result, sizeof(op->result), fy_ofi_mr_desc(&op->self_mr),
                      ep->addr, ep->flush_addr, ep->flush_key, &op->ctx);
    if (ret == 0) {
        op->posted = 1;
        op->need_read = 0;
    } else {
        op->need_read = 1;
        if (ret == -FI_EAGAIN) {
            iface->eagain = 1;
        } else {
            fy_debug("ofi: the flush read failed: %s", fi_strerror((int)-ret));
            op->need_read = 0;
            op->status = fy_ofi_status((int)ret);
        }
    }
    return (int)ret;
}

/* A probe after injected sends: delivered means everything before it was delivered. */
static ferry_status_t post_probe(fy_ofi_ep_t *ep)
{
    fy_ofi_iface_t *iface = ep_iface(ep);
    fy_ofi_op_t *op = fy_ofi_op_get(iface, ep, FY_OFI_OP_SEND, NULL);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    if (!fy_ofi_op_bbuf(iface, op)) {
        fy_ofi_op_put(iface, op);
        return FERRY_ERR_NO_MEMORY;
    }
    fy_ofi_put_hdr(iface, op->bbuf, FY_OFI_PROBE, 0);
    struct iovec v = {op->bbuf, sizeof(fy_ofi_hdr_t)};
    ferry_status_t st = fy_ofi_send_iov(ep, op, &v, 1);
    if (st == FERRY_OK)
        ep->injects = 0;
    return st;
}

ferry_status_t fy_ofi_ep_flush(fy_tl_ep_t *super, fy_tl_comp_t *comp)
{
    fy_ofi_ep_t *ep = (fy_ofi_ep_t *)super;
    fy_ofi_iface_t *iface = ep_iface(ep);
    if (ep->failed != FERRY_OK)
        return ep->failed;
    /* read after write: the read covers every send and write before it */
    int need_read = !iface->md->delivery && ep->unflushed > 0;
    if (fy_list_is_empty(&ep->ops) && ep->injects == 0 && !need_read) {
        ferry_status_t st = ep->deferred;
        ep->deferred = FERRY_OK;
        return st;
    }
    if (ep->injects > 0 && iface->md->delivery) {
        ferry_status_t st = post_probe(ep);
        if (st != FERRY_OK)
            return st;
    }
    if (comp == NULL && !need_read)
        return FERRY_ERR_NO_RESOURCE; /* "not yet" */
    fy_ofi_op_t *op = fy_ofi_op_get(iface, ep, FY_OFI_OP_FLUSH, comp);
    if (op == NULL)
        return comp == NULL ? FERRY_ERR_NO_RESOURCE : FERRY_ERR_NO_MEMORY;
    fy_list_add_tail(&ep->ops, &op->elem);
    if (need_read) {
        ep->unflushed = 0;
        ep->injects = 0;
        if (ep->nqueued > 0) { /* posted after the queued sends, from progress */
            op->need_read = 1;
            iface->eagain = 1;
        } else {
            fy_ofi_post_flush_read(iface, op);
        }
    }
    if (comp == NULL)
        return FERRY_ERR_NO_RESOURCE; /* "not yet": the marker carries the read */
    if (ep->ops.next == &op->elem && !op->posted && !op->need_read) {
        ferry_status_t st = op->status != FERRY_OK ? op->status : ep->deferred;
        ep->deferred = FERRY_OK;
        fy_ofi_op_put(iface, op);
        return st;
    }
    return FERRY_INPROGRESS;
}
