/*
 * tcp_ep.c - the tcp transport's endpoint operations: create / destroy / flush / stats, and
 * the sends proto calls (AM short, bcopy and zcopy, put and get).
 *
 * An ep is a handle on the peer of its remote iface (tcp_conn.c); every send becomes one
 * frame (tcp_tx.c).  Puts complete when the target acknowledges them, so a refused put
 * completes with FERRY_ERR_ACCESS_DENIED and a completed put is remotely complete; gets
 * complete when the data is in place.  Flush sends a FLUSH frame whose ACK comes back after
 * every earlier frame was handled at the target, or answers at once when nothing was sent
 * since the last flush and nothing is pending.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/tcp/tcp.h"
#include "util/log.h"
#include "util/status.h"

ferry_status_t fy_tcp_ep_create(fy_tl_iface_t *super, const void *dev_addr, const void *iface_addr,
                                fy_tl_ep_t **ep_p)
{
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    fy_tcp_dev_addr_t da;
    fy_tcp_iface_addr_t ia;
    memcpy(&da, dev_addr, sizeof(da));
    memcpy(&ia, iface_addr, sizeof(ia));
    if (da.addr.family != 4 && da.addr.family != 6)
        return FERRY_ERR_INVALID_ADDR;
    uint64_t remote = le64toh(ia.iface_id);
    fy_tcp_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return FERRY_ERR_NO_MEMORY;
    fy_tcp_peer_t *p = fy_tcp_peer_get(iface, remote, 1);
    if (p == NULL) {
        free(ep);
        return FERRY_ERR_NO_MEMORY;
    }
    p->raddr = da.addr;
    p->raddr.port_be = ia.port_be;
    p->have_raddr = 1;
    p->remote_host = le64toh(da.host_id);
    ep->super.iface = super;
    ep->peer = p;
    fy_list_add_tail(&p->eps, &ep->elem);
    if (p->state == FY_TCP_PEER_IDLE) {
        ferry_status_t st = fy_tcp_peer_connect(p);
        if (st != FERRY_OK) {
            fy_list_del(&ep->elem);
            free(ep);
            fy_tcp_peer_maybe_free(p);
            return st;
        }
    }
    *ep_p = &ep->super;
    return FERRY_OK;
}

void fy_tcp_ep_destroy(fy_tl_ep_t *super)
{
    fy_tcp_ep_t *ep = fy_tcp_ep(super);
    if (ep == NULL)
        return;
    fy_tcp_peer_t *p = ep->peer;
    if (p != NULL) {
        fy_tcp_ep_orphan(ep);
        fy_list_del(&ep->elem);
        fy_tcp_peer_maybe_free(p);
    }
    free(ep);
}

/* An ep that can take a send: NULL and *st set otherwise. */
static inline fy_tcp_peer_t *ep_peer(fy_tcp_ep_t *ep, ferry_status_t *st)
{
    if (FY_UNLIKELY(ep->failed || ep->peer == NULL)) {
        *st = FERRY_ERR_NOT_CONNECTED;
        return NULL;
    }
    return ep->peer;
}

ferry_status_t fy_tcp_ep_flush(fy_tl_ep_t *super, fy_tl_comp_t *comp)
{
    fy_tcp_ep_t *ep = fy_tcp_ep(super);
    ferry_status_t st;
    fy_tcp_peer_t *p = ep_peer(ep, &st);
    if (p == NULL)
        return st;
    if (p->unflushed == 0 && fy_list_is_empty(&p->ops))
        return FERRY_OK;
    if (p->state != FY_TCP_PEER_UP && p->state != FY_TCP_PEER_CONNECTING)
        return p->unflushed == 0 ? FERRY_OK : FERRY_ERR_NOT_CONNECTED;
    if (comp == NULL)
        return FERRY_ERR_NO_RESOURCE; /* not yet: progress and ask again (tl.h) */
    fy_tcp_op_t *op = fy_tcp_op_new(p, ep, FY_TCP_FLUSH, comp);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    struct {
        fy_tcp_hdr_t h;
        fy_tcp_ack_ext_t a;
    } f;
    memset(&f, 0, sizeof(f));
    f.h.type = FY_TCP_FLUSH;
    f.a.op_id = htole64(op->id);
    fy_tcp_msg_t m = {.hdr = &f, .hdr_len = sizeof(f)};
    st = fy_tcp_send(p, NULL, &m);
    if (st < 0) {
        fy_list_del(&op->elem);
        p->next_op_id--;
        fy_tcp_op_free(p->iface, op);
        return st;
    }
    p->unflushed = 0;
    return FERRY_INPROGRESS;
}

int fy_tcp_ep_ready(fy_tl_ep_t *super)
{
    fy_tcp_ep_t *ep = fy_tcp_ep(super);
    return !ep->failed && ep->peer != NULL && ep->peer->state == FY_TCP_PEER_UP;
}

ferry_status_t fy_tcp_ep_get_stats(fy_tl_ep_t *super, ferry_ep_stats_t *stats)
{
    fy_tcp_ep_t *ep = fy_tcp_ep(super);
    memset(stats, 0, sizeof(*stats));
    stats->tx_msgs = ep->tx_msgs;
    stats->tx_bytes = ep->tx_bytes;
    fy_tcp_peer_t *p = ep->peer;
    if (p != NULL) {
        /* receive counts are the connection's: AMs carry no ep */
        stats->rx_msgs = p->rx_msgs;
        stats->rx_bytes = p->rx_bytes;
        stats->window_used = p->q_ops;
        stats->window_max = p->iface->cfg->tx_queue_ops;
        stats->drops_malformed = p->iface->drops_malformed;
        stats->drops_bad_key = p->iface->drops_bad_key;
        stats->drops_unknown_ep = p->iface->drops_unknown;
    }
    return FERRY_OK;
}

/* am_short and am_bcopy: the same path (written at once, copied only if queued), each
 * refusing more than its attribute announces (tl.h, LIMITS). */
static inline ferry_status_t am_copy(fy_tl_ep_t *super, uint8_t id, const struct iovec *iov,
                                     size_t iovcnt, size_t max)
{
    fy_tcp_ep_t *ep = fy_tcp_ep(super);
    ferry_status_t st;
    fy_tcp_peer_t *p = ep_peer(ep, &st);
    if (FY_UNLIKELY(p == NULL))
        return st;
    size_t len = fy_iov_total(iov, iovcnt);
    if (FY_UNLIKELY(id > FY_TL_AM_ID_MAX || iovcnt > FY_TCP_MAX_IOV || len > max))
        return FERRY_ERR_INVALID_PARAM;
    fy_tcp_hdr_t h = {.type = FY_TCP_AM, .am_id = id, .length = htole32((uint32_t)len)};
    fy_tcp_msg_t m = {
        .hdr = &h, .hdr_len = sizeof(h), .copy = iov, .copy_cnt = iovcnt, .copy_len = len};
    return fy_tcp_send(p, ep, &m);
}

ferry_status_t fy_tcp_am_short(fy_tl_ep_t *super, uint8_t id, const struct iovec *iov,
                               size_t iovcnt)
{
    return am_copy(super, id, iov, iovcnt, FY_TCP_SHORT_COPY);
}

ferry_status_t fy_tcp_am_bcopy(fy_tl_ep_t *super, uint8_t id, const struct iovec *iov,
                               size_t iovcnt)
{
    return am_copy(super, id, iov, iovcnt, FY_TCP_MAX_BCOPY);
}

ferry_status_t fy_tcp_am_zcopy(fy_tl_ep_t *super, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp)
{
    fy_tcp_ep_t *ep = fy_tcp_ep(super);
    ferry_status_t st;
    fy_tcp_peer_t *p = ep_peer(ep, &st);
    if (FY_UNLIKELY(p == NULL))
        return st;
    size_t len = fy_iov_total(iov, iovcnt);
    if (FY_UNLIKELY(id > FY_TL_AM_ID_MAX || iovcnt > FY_TCP_MAX_IOV || comp == NULL ||
                    hdr_len > FY_TCP_SHORT_COPY || hdr_len + len > p->iface->cfg->max_msg))
        return FERRY_ERR_INVALID_PARAM;
    fy_tcp_hdr_t h = {.type = FY_TCP_AM, .am_id = id, .length = htole32((uint32_t)(hdr_len + len))};
    struct iovec hv = {(void *)(uintptr_t)hdr, hdr_len};
    fy_tcp_msg_t m = {.hdr = &h,
                      .hdr_len = sizeof(h),
                      .copy = &hv,
                      .copy_cnt = hdr_len != 0,
                      .copy_len = hdr_len,
                      .zc = iov,
                      .zc_cnt = iovcnt,
                      .zc_len = len,
                      .comp = comp,
                      .stripe = 1};
    return fy_tcp_send(p, ep, &m);
}

static ferry_status_t rma(fy_tcp_ep_t *ep, uint8_t type, const struct iovec *iov, size_t iovcnt,
                          uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    ferry_status_t st;
    fy_tcp_peer_t *p = ep_peer(ep, &st);
    if (FY_UNLIKELY(p == NULL))
        return st;
    size_t len = fy_iov_total(iov, iovcnt);
    if (FY_UNLIKELY(iovcnt > FY_TCP_MAX_IOV || len > (1u << 30) || comp == NULL))
        return FERRY_ERR_INVALID_PARAM;
    if (fy_tcp_over_bound(p))
        return FERRY_ERR_NO_RESOURCE;
    fy_tcp_op_t *op = fy_tcp_op_new(p, ep, type, comp);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    const fy_swmd_key_t *k = rkey;
    struct {
        fy_tcp_hdr_t h;
        fy_tcp_rma_ext_t r;
    } f;
    memset(&f, 0, sizeof(f));
    f.h.type = type;
    f.h.length = htole32((uint32_t)len);
    f.r.op_id = htole64(op->id);
    f.r.remote_addr = htole64(remote_addr);
    f.r.region_id = htole64(k->id);
    f.r.key = htole64(k->key);
    fy_tcp_msg_t m = {.hdr = &f, .hdr_len = sizeof(f)};
    if (type == FY_TCP_PUT) {
        m.zc = iov;
        m.zc_cnt = iovcnt;
        m.zc_len = len;
        m.stripe = 1;
    } else {
        op->length = len;
        op->iovcnt = (unsigned)iovcnt;
        memcpy(op->iov, iov, iovcnt * sizeof(*iov));
    }
    st = fy_tcp_send(p, ep, &m);
    if (st < 0) {
        fy_list_del(&op->elem);
        p->next_op_id--;
        fy_tcp_op_free(p->iface, op);
        return st;
    }
    return FERRY_INPROGRESS; /* puts complete at the target's ACK, gets with their data */
}

ferry_status_t fy_tcp_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    return rma(fy_tcp_ep(ep), FY_TCP_PUT, iov, iovcnt, remote_addr, rkey, comp);
}

ferry_status_t fy_tcp_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    return rma(fy_tcp_ep(ep), FY_TCP_GET_REQ, iov, iovcnt, remote_addr, rkey, comp);
}
