/*
 * udp_rma.c - put and get: the initiator's operations and the target's side.
 *
 * A put is a fragment of PUT chunks, each carrying the region id, key and the put's target
 * address; the target checks the whole range against its region table at the first chunk
 * and every chunk again, and places each chunk straight into the target memory (no bounce
 * buffer).  When the last chunk is placed the target answers RMA_DONE with the outcome, so
 * the initiator's put completes with FERRY_OK, or FERRY_ERR_ACCESS_DENIED when refused, in
 * which case nothing was written.  A put_short is an operation without a callback: its
 * refusal is reported by the next ep_flush, which waits for its answer.
 *
 * A get is a GET_REQ; the target checks it and answers with a fragment of GET_RESP chunks
 * sent from the region itself, or one empty GET_RESP carrying the refusal.  Answers come
 * back in the order of the requests (the target processes in sequence order and answers
 * through its FIFO send queue), so the initiator matches each with the oldest operation
 * still waiting for one, and checks the op id and offset.
 */
#include <string.h>

#include "tl/udp/udp.h"
#include "util/log.h"

static fy_udp_rma_op_t *op_new(fy_udp_conn_t *c, int is_get, fy_tl_comp_t *comp,
                               const struct iovec *iov, size_t iovcnt)
{
    fy_udp_rma_op_t *op = fy_mpool_get(&c->iface->op_pool);
    if (op == NULL)
        return NULL;
    op->op_id = c->next_op_id++;
    if (c->next_op_id == 0)
        c->next_op_id = 1;
    op->is_get = (uint8_t)is_get;
    op->responded = 0;
    op->pending = is_get ? 1 : 2;
    op->status = FERRY_OK;
    op->comp = comp;
    op->total = fy_iov_total(iov, iovcnt);
    op->got = 0;
    op->iovcnt = iovcnt;
    if (iovcnt != 0)
        memcpy(op->iov, iov, iovcnt * sizeof(*iov));
    fy_list_add_tail(&c->rma_fifo, &op->link);
    return op;
}

void fy_udp_rma_op_done(fy_udp_conn_t *c, fy_udp_rma_op_t *op)
{
    fy_udp_iface_t *iface = c->iface;
    fy_list_del(&op->link);
    if (op->comp != NULL)
        op->comp->cb(op->comp, op->status);
    else if (op->status != FERRY_OK && c->sticky == FERRY_OK)
        c->sticky = op->status; /* a put_short: the next flush reports it */
    fy_mpool_put(&iface->op_pool, op);
    iface->events++;
    if (!fy_list_is_empty(&c->flushq))
        fy_udp_flush_check(c);
}

void fy_udp_rma_fail_all(fy_udp_conn_t *c, ferry_status_t status)
{
    fy_list_t *e;
    while ((e = fy_list_pop_head(&c->rma_fifo)) != NULL) {
        fy_udp_rma_op_t *op = fy_container_of(e, fy_udp_rma_op_t, link);
        if (op->comp != NULL)
            op->comp->cb(op->comp, status);
        fy_mpool_put(&c->iface->op_pool, op);
    }
}

static fy_udp_rma_op_t *next_response(fy_udp_conn_t *c)
{
    fy_list_t *e;
    fy_list_for_each(e, &c->rma_fifo)
    {
        fy_udp_rma_op_t *op = fy_container_of(e, fy_udp_rma_op_t, link);
        if (!op->responded)
            return op;
    }
    return NULL;
}

static ferry_status_t usable(const fy_udp_conn_t *c)
{
    return fy_udp_conn_alive(c) ? FERRY_OK : FERRY_ERR_NOT_CONNECTED;
}

ferry_status_t fy_udp_put_short(fy_tl_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                                const void *rkey)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    size_t xl = fy_udp_xhdr_len(FY_UDP_T_PUT, 1);
    fy_udp_key_t k;
    fy_udp_seg_t *seg;

    if (usable(c) != FERRY_OK)
        return FERRY_ERR_NOT_CONNECTED;
    if (FY_UDP_DHDR_LEN + FY_UDP_DACK_LEN + xl + len > c->iface->opts->prio_mtu)
        return FERRY_ERR_INVALID_PARAM;
    memcpy(&k, rkey, sizeof(k));
    seg = fy_udp_seg_alloc(c->iface, len + 1);
    if (seg == NULL)
        return FERRY_ERR_NO_RESOURCE;
    /* An operation without a callback: its answer must be in before a flush completes
     * (an ACK alone can overtake a lost refusal), and a refusal becomes the flush's. */
    fy_udp_rma_op_t *op = op_new(c, 0, NULL, NULL, 0);
    if (op == NULL) {
        fy_udp_seg_free(c->iface, seg);
        return FERRY_ERR_NO_RESOURCE;
    }
    op->pending = 1;
    fy_udp_seg_init_hdr(c, seg, FY_UDP_T_PUT, 0, xl, len);
    fy_udp_chunk_t ch = {.op_id = op->op_id, .offset = 0, .total = len};
    fy_udp_rma_t rma = {.region_id = k.id, .key = k.key, .addr = remote_addr};
    memcpy(fy_udp_seg_xhdr(seg), &ch, sizeof(ch));
    memcpy(fy_udp_seg_xhdr(seg) + sizeof(ch), &rma, sizeof(rma));
    if (len != 0)
        memcpy(seg->data, buf, len);
    c->stats.tx_msgs++;
    c->stats.tx_bytes += len;
    return fy_udp_send_inline(c, seg);
}

ferry_status_t fy_udp_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    fy_udp_key_t k;
    fy_udp_frag_t *f;
    fy_udp_rma_op_t *op;

    if (usable(c) != FERRY_OK)
        return FERRY_ERR_NOT_CONNECTED;
    if (iovcnt > FY_UDP_MAX_IOV || comp == NULL)
        return FERRY_ERR_INVALID_PARAM;
    memcpy(&k, rkey, sizeof(k));
    f = fy_udp_frag_alloc(c->iface);
    if (f == NULL)
        return FERRY_ERR_NO_RESOURCE;
    op = op_new(c, 0, comp, iov, iovcnt);
    if (op == NULL) {
        fy_mpool_put(&c->iface->frag_pool, f);
        return FERRY_ERR_NO_RESOURCE;
    }
    f->type = FY_UDP_T_PUT;
    f->op_id = op->op_id;
    f->op = op;
    f->total = op->total;
    f->rma.region_id = k.id;
    f->rma.key = k.key;
    f->rma.addr = remote_addr;
    f->iovcnt = iovcnt;
    memcpy(f->iov, iov, iovcnt * sizeof(*iov));
    c->stats.tx_msgs++;
    c->stats.tx_bytes += op->total;
    fy_udp_frag_submit(c, f);
    return FERRY_INPROGRESS;
}

ferry_status_t fy_udp_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    fy_udp_key_t k;
    fy_udp_seg_t *seg;
    fy_udp_rma_op_t *op;
    fy_udp_get_req_t req;

    if (usable(c) != FERRY_OK)
        return FERRY_ERR_NOT_CONNECTED;
    if (iovcnt > FY_UDP_MAX_IOV || comp == NULL)
        return FERRY_ERR_INVALID_PARAM;
    memcpy(&k, rkey, sizeof(k));
    seg = fy_udp_seg_alloc(c->iface, sizeof(req));
    if (seg == NULL)
        return FERRY_ERR_NO_RESOURCE;
    op = op_new(c, 1, comp, iov, iovcnt);
    if (op == NULL) {
        fy_udp_seg_free(c->iface, seg);
        return FERRY_ERR_NO_RESOURCE;
    }
    memset(&req, 0, sizeof(req));
    req.op_id = op->op_id;
    req.region_id = k.id;
    req.key = k.key;
    req.addr = remote_addr;
    req.len = op->total;
    fy_udp_seg_init_hdr(c, seg, FY_UDP_T_GET_REQ, 0, sizeof(req), 0);
    memcpy(fy_udp_seg_xhdr(seg), &req, sizeof(req));
    c->stats.tx_msgs++;
    fy_udp_send_inline(c, seg);
    return FERRY_INPROGRESS;
}

/* ---- target side ---------------------------------------------------------------------- */

static void send_rma_done(fy_udp_conn_t *c, uint32_t op_id, ferry_status_t status)
{
    fy_udp_rma_done_t d = {.op_id = op_id, .status = status};
    fy_udp_seg_t *seg = fy_udp_seg_alloc(c->iface, sizeof(d));
    if (seg == NULL) {
        fy_error("udp: no memory for a put's answer: the initiator will time out");
        return;
    }
    fy_udp_seg_init_hdr(c, seg, FY_UDP_T_RMA_DONE, 0, sizeof(d), 0);
    memcpy(fy_udp_seg_xhdr(seg), &d, sizeof(d));
    fy_udp_send_inline(c, seg);
}

ferry_status_t fy_udp_rx_put(fy_udp_conn_t *c, const fy_udp_chunk_t *ch, const fy_udp_rma_t *rma,
                             const uint8_t *data, size_t dlen)
{
    fy_region_table_t *t = &c->iface->md->super.regions;
    void *la = NULL;

    if (ch->offset == 0) {
        /* The whole put is admitted or refused at once: nothing outside is ever written. */
        c->rx_put_op = ch->op_id;
        c->rx_put_status = fy_region_check(t, rma->region_id, rma->key, rma->addr,
                                           (size_t)ch->total, FERRY_MEM_REMOTE_WRITE, &la);
    } else if (ch->op_id != c->rx_put_op) {
        c->rx_put_status = FERRY_ERR_PROTOCOL;
    }
    if (c->rx_put_status == FERRY_OK && dlen != 0) {
        ferry_status_t st = fy_region_check(t, rma->region_id, rma->key, rma->addr + ch->offset,
                                            dlen, FERRY_MEM_REMOTE_WRITE, &la);
        if (st == FERRY_OK)
            memcpy(la, data, dlen);
        else
            c->rx_put_status = st;
    }
    c->stats.rx_bytes += dlen;
    if (ch->offset + dlen == ch->total) {
        ferry_status_t st = c->rx_put_status;
        if (st != FERRY_OK)
            fy_debug("udp: refused a put of %llu bytes at 0x%llx (region %llu): %s",
                     (unsigned long long)ch->total, (unsigned long long)rma->addr,
                     (unsigned long long)rma->region_id, ferry_status_string(st));
        c->stats.rx_msgs++;
        if (ch->op_id != 0 || st != FERRY_OK)
            send_rma_done(c, ch->op_id, st == FERRY_ERR_PROTOCOL ? FERRY_ERR_ACCESS_DENIED : st);
    }
    return FERRY_OK;
}

ferry_status_t fy_udp_rx_get_req(fy_udp_conn_t *c, const fy_udp_get_req_t *req)
{
    fy_udp_iface_t *iface = c->iface;
    void *la = NULL;
    ferry_status_t st = fy_region_check(&iface->md->super.regions, req->region_id, req->key,
                                        req->addr, (size_t)req->len, FERRY_MEM_REMOTE_READ, &la);
    fy_udp_frag_t *f = fy_udp_frag_alloc(iface);
    if (f == NULL) {
        fy_error("udp: no memory to answer a get: the initiator will time out");
        return FERRY_ERR_NO_MEMORY;
    }
    f->type = FY_UDP_T_GET_RESP;
    f->op_id = req->op_id;
    if (st != FERRY_OK) {
        fy_debug("udp: refused a get of %llu bytes at 0x%llx: %s", (unsigned long long)req->len,
                 (unsigned long long)req->addr, ferry_status_string(st));
        f->status = (int8_t)st;
        f->total = 0;
        f->iovcnt = 0;
    } else {
        f->total = req->len;
        f->iovcnt = 1;
        f->iov[0].iov_base = la;
        f->iov[0].iov_len = (size_t)req->len;
    }
    c->stats.rx_msgs++;
    fy_udp_frag_submit(c, f);
    return FERRY_OK;
}

ferry_status_t fy_udp_rx_get_resp(fy_udp_conn_t *c, const fy_udp_chunk_t *ch, const uint8_t *data,
                                  size_t dlen)
{
    fy_udp_rma_op_t *op = next_response(c);
    if (op == NULL || !op->is_get || op->op_id != ch->op_id || ch->offset != op->got)
        return FERRY_ERR_PROTOCOL;
    if (ch->status != 0) {
        op->status = (ferry_status_t)ch->status;
    } else if (ch->total != op->total) {
        return FERRY_ERR_PROTOCOL;
    } else {
        fy_iov_scatter(op->iov, op->iovcnt, (size_t)ch->offset, data, dlen);
        op->got += dlen;
        c->stats.rx_bytes += dlen;
        if (op->got < op->total)
            return FERRY_OK;
    }
    op->responded = 1;
    c->stats.rx_msgs++;
    if (--op->pending == 0)
        fy_udp_rma_op_done(c, op);
    return FERRY_OK;
}

ferry_status_t fy_udp_rx_rma_done(fy_udp_conn_t *c, const fy_udp_rma_done_t *d)
{
    fy_udp_rma_op_t *op;
    if (d->op_id == 0) {
        if (c->sticky == FERRY_OK)
            c->sticky = d->status;
        return FERRY_OK;
    }
    op = next_response(c);
    if (op == NULL || op->is_get || op->op_id != d->op_id)
        return FERRY_ERR_PROTOCOL;
    op->responded = 1;
    if (d->status != FERRY_OK && op->status == FERRY_OK)
        op->status = d->status;
    if (--op->pending == 0)
        fy_udp_rma_op_done(c, op);
    return FERRY_OK;
}
