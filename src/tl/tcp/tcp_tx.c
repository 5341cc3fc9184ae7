/*
 * tcp_tx.c - the send side of the tcp transport: write at once when the socket has room,
 * queue otherwise, and stripe large zero-copy payloads over the peer's links.
 *
 * The fast path is one sendmsg of the frame header and the caller's iov (scatter/gather, no
 * copy, no allocation) when link 0's queue is empty: a frame written whole returns FERRY_OK.
 * Whatever the kernel does not take waits in the link's queue: copied (short/bcopy data, and
 * proto's header of a zcopy AM) or referenced (zcopy data, until written: comp then).  The
 * queue of a peer is bounded (TX_QUEUE bytes of copies, TX_QUEUE_OPS frames); past the bound
 * a send takes nothing and returns FERRY_ERR_NO_RESOURCE.  The remainder of a partly written
 * frame is always queued, whatever the bound: a frame, once started, must end.
 *
 * Progress writes a queue with one sendmsg over many frames (up to 64 iov entries), so a
 * burst of small sends costs one system call once the socket has room again.
 *
 * Striping: a zero-copy payload of STRIPE_MIN bytes or more, on an up peer with several
 * links, is cut into one piece per link.  Piece 0 follows the frame header on link 0 (with
 * the stripe extension: seq, len0), piece k travels on link k as a CHUNK (seq, offset).  The
 * receiver handles link 0 in order and waits for the chunks before the next frame, so AM
 * order is kept; each link carries its chunks in seq order, so chunk links never deadlock.
 * The pieces share one completion: the leader (piece 0's descriptor) counts the pieces not
 * yet written and calls comp when the last one is.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "tl/tcp/tcp.h"
#include "util/log.h"
#include "util/status.h"

#define FY_TCP_SMALL_SEND 256

static void gather_from(const void *a, size_t alen, const struct iovec *iov, size_t cnt,
                        size_t skip, char *dst, size_t len);

int fy_tcp_over_bound(const fy_tcp_peer_t *p)
{
    const fy_tcp_config_t *cfg = p->iface->cfg;
    return p->q_bytes >= cfg->tx_queue || p->q_ops >= cfg->tx_queue_ops;
}

static fy_tcp_tx_t *tx_alloc(fy_tcp_iface_t *iface, size_t copy)
{
    fy_tcp_tx_t *tx;
    uint8_t pool;
    if (copy == 0) {
        tx = fy_mpool_get(&iface->tx_pool);
        pool = 1;
    } else if (copy <= FY_TCP_SHORT_COPY) {
        tx = fy_mpool_get(&iface->copy_pool);
        pool = 2;
    } else {
        tx = malloc(sizeof(*tx) + copy);
        pool = 0;
    }
    if (tx == NULL)
        return NULL;
    memset(tx, 0, sizeof(*tx));
    fy_list_init(&tx->elem);
    tx->pool = pool;
    tx->pieces = 1;
    return tx;
}

static void tx_free(fy_tcp_iface_t *iface, fy_tcp_tx_t *tx)
{
    free(tx->owned);
    if (tx->pool == 1)
        fy_mpool_put(&iface->tx_pool, tx);
    else if (tx->pool == 2)
        fy_mpool_put(&iface->copy_pool, tx);
    else
        free(tx);
}

static void tx_enqueue(fy_tcp_peer_t *p, fy_list_t *q, fy_tcp_tx_t *tx)
{
    fy_list_add_tail(q, &tx->elem);
    tx->queued = 1;
    p->q_ops++;
    p->q_bytes += tx->copied;
}

/* Written (status OK) or abandoned (error): account, complete the frame if it was the last
 * piece.  tx is out of its queue. */
void fy_tcp_tx_done(fy_tcp_peer_t *p, fy_tcp_tx_t *tx, ferry_status_t status)
{
    fy_tcp_iface_t *iface = p->iface;
    if (tx->queued) {
        tx->queued = 0;
        p->q_ops--;
        p->q_bytes -= tx->copied;
    }
    fy_tcp_tx_t *l = tx->leader != NULL ? tx->leader : tx;
    if (status != FERRY_OK && l->status == FERRY_OK)
        l->status = status;
    if (tx != l)
        tx_free(iface, tx);
    if (--l->pieces == 0) {
        fy_tl_comp_t *comp = l->comp;
        ferry_status_t st = l->status;
        tx_free(iface, l);
        if (comp != NULL)
            comp->cb(comp, st);
    }
}

/* Move a descriptor past n written bytes. */
static void tx_advance(fy_tcp_tx_t *tx, size_t n)
{
    tx->left -= n;
    while (n > 0) {
        struct iovec *v = &tx->iov[tx->iovidx];
        if (n < v->iov_len) {
            v->iov_base = (char *)v->iov_base + n;
            v->iov_len -= n;
            return;
        }
        n -= v->iov_len;
        v->iov_len = 0;
        tx->iovidx++;
    }
    while (tx->iovidx < tx->iovcnt && tx->iov[tx->iovidx].iov_len == 0)
        tx->iovidx++;
}

static void link_want_out(fy_tcp_link_t *link, int out)
{
    uint32_t want = link->ev & ~(FY_TCP_EV_REG | EPOLLOUT);
    if (out)
        want |= EPOLLOUT;
    fy_tcp_epoll_set(link->peer->iface, link->fd, link, &link->ev, want);
}

void fy_tcp_link_write(fy_tcp_link_t *link)
{
    fy_tcp_peer_t *p = link->peer;
    while (!fy_list_is_empty(&link->txq) && link->state == FY_TCP_LINK_UP) {
        struct iovec v[64];
        size_t cnt = 0, want = 0;
        fy_list_t *e;
        for (e = link->txq.next; e != &link->txq; e = e->next) {
            fy_tcp_tx_t *tx = fy_container_of(e, fy_tcp_tx_t, elem);
            for (unsigned i = tx->iovidx; i < tx->iovcnt && cnt < FY_ARRAY_SIZE(v); i++) {
                if (tx->iov[i].iov_len == 0)
                    continue;
                v[cnt++] = tx->iov[i];
                want += tx->iov[i].iov_len;
            }
            if (cnt == FY_ARRAY_SIZE(v))
                break;
        }
        ssize_t n = fy_tcp_sendv(link->fd, v, cnt);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            ferry_status_t st = fy_status_from_errno(errno);
            fy_tcp_peer_fail(p,
                             st == FERRY_ERR_TIMED_OUT ? FERRY_ERR_ENDPOINT_TIMEOUT
                                                       : FERRY_ERR_CONNECTION_RESET,
                             strerror(errno));
            return;
        }
        size_t left = (size_t)n;
        while (left > 0) {
            fy_tcp_tx_t *tx = fy_container_of(link->txq.next, fy_tcp_tx_t, elem);
            size_t take = FY_MIN(left, tx->left);
            tx_advance(tx, take);
            tx->started = 1;
            left -= take;
            if (tx->left == 0) {
                fy_list_del(&tx->elem);
                fy_tcp_tx_done(p, tx, FERRY_OK);
                if (link->state != FY_TCP_LINK_UP) /* a completion failed the peer */
                    return;
            }
        }
        if ((size_t)n < want)
            break;
    }
    if (link->state == FY_TCP_LINK_UP)
        link_want_out(link, !fy_list_is_empty(&link->txq));
}

/* The connection is up: what waited in preq goes to link 0, in order. */
void fy_tcp_peer_up_flush(fy_tcp_peer_t *p)
{
    fy_tcp_link_t *l0 = p->links[0];
    fy_list_t *e;
    while ((e = fy_list_pop_head(&p->preq)) != NULL)
        fy_list_add_tail(&l0->txq, e);
    if (!fy_list_is_empty(&l0->txq))
        fy_tcp_link_write(l0);
}

/* Copy bytes [skip, skip+len) of the concatenation (a, alen) + iov into dst. */
static void gather_from(const void *a, size_t alen, const struct iovec *iov, size_t cnt,
                        size_t skip, char *dst, size_t len)
{
    if (skip < alen) {
        size_t n = FY_MIN(alen - skip, len);
        memcpy(dst, (const char *)a + skip, n);
        dst += n;
        len -= n;
        skip = 0;
    } else {
        skip -= alen;
    }
    for (size_t i = 0; i < cnt && len > 0; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        size_t n = FY_MIN(iov[i].iov_len - skip, len);
        memcpy(dst, (const char *)iov[i].iov_base + skip, n);
        dst += n;
        len -= n;
        skip = 0;
    }
}

/* A descriptor holding the frame minus its first `skip` bytes (already written). */
static fy_tcp_tx_t *make_tx(fy_tcp_iface_t *iface, const fy_tcp_msg_t *m, size_t skip)
{
    size_t total = m->hdr_len + m->copy_len + m->zc_len;
    fy_tcp_tx_t *tx;
    if (m->zc_len == 0) {
        size_t rest = total - skip;
        tx = tx_alloc(iface, rest);
        if (tx == NULL)
            return NULL;
        gather_from(m->hdr, m->hdr_len, m->copy, m->copy_cnt, skip, tx->data, rest);
        tx->iov[0].iov_base = tx->data;
        tx->iov[0].iov_len = rest;
        tx->iovcnt = 1;
        tx->copied = rest;
        tx->left = rest;
        return tx;
    }
    tx = tx_alloc(iface, m->copy_len);
    if (tx == NULL)
        return NULL;
    tx->zc = 1;
    memcpy(tx->hdr, m->hdr, m->hdr_len);
    tx->iov[0].iov_base = tx->hdr;
    tx->iov[0].iov_len = m->hdr_len;
    unsigned k = 1;
    if (m->copy_len != 0) {
        gather_from(NULL, 0, m->copy, m->copy_cnt, 0, tx->data, m->copy_len);
        tx->iov[k].iov_base = tx->data;
        tx->iov[k++].iov_len = m->copy_len;
        tx->copied = m->copy_len;
    }
    for (size_t i = 0; i < m->zc_cnt && k < FY_ARRAY_SIZE(tx->iov); i++)
        if (m->zc[i].iov_len != 0)
            tx->iov[k++] = m->zc[i];
    tx->iovcnt = k;
    tx->left = total;
    tx_advance(tx, skip);
    return tx;
}

static void count_frame(fy_tcp_peer_t *p, fy_tcp_ep_t *ep, size_t bytes)
{
    p->tx_msgs++;
    p->tx_bytes += bytes;
    p->unflushed++;
    if (ep != NULL) {
        ep->tx_msgs++;
        ep->tx_bytes += bytes;
    }
}

static ferry_status_t send_striped(fy_tcp_peer_t *p, fy_tcp_ep_t *ep, const fy_tcp_msg_t *m);

ferry_status_t fy_tcp_send(fy_tcp_peer_t *p, fy_tcp_ep_t *ep, const fy_tcp_msg_t *m)
{
    fy_tcp_iface_t *iface = p->iface;
    if (FY_UNLIKELY(p->state != FY_TCP_PEER_UP)) {
        if (p->state == FY_TCP_PEER_FAILED)
            return FERRY_ERR_NOT_CONNECTED;
        if (p->state == FY_TCP_PEER_IDLE) {
            ferry_status_t st = fy_tcp_peer_connect(p); /* reconnect on demand */
            if (st != FERRY_OK) {
                fy_tcp_peer_fail(p, FERRY_ERR_UNREACHABLE, "cannot reconnect");
                return st;
            }
        }
    }
    size_t payload = m->copy_len + m->zc_len;
    size_t total = m->hdr_len + payload;
    fy_tcp_link_t *l0 = p->links[0];
    int up = p->state == FY_TCP_PEER_UP;
    if (m->stripe && up && p->nlinks > 1 && m->zc_len >= iface->cfg->stripe_min)
        return send_striped(p, ep, m);

    size_t written = 0;
    if (FY_LIKELY(up && fy_list_is_empty(&l0->txq))) {
        struct iovec v[2 * FY_TCP_MAX_IOV + 2];
        size_t k = 0;
        ssize_t n;
        if (total <= FY_TCP_SMALL_SEND && m->zc_len == 0) {
            /* small: one contiguous send() is cheaper than importing an iovec */
            char buf[FY_TCP_SMALL_SEND];
            gather_from(m->hdr, m->hdr_len, m->copy, m->copy_cnt, 0, buf, total);
            v[0].iov_base = buf;
            v[0].iov_len = total;
            n = fy_tcp_sendv(l0->fd, v, 1);
        } else {
            v[k].iov_base = (void *)(uintptr_t)m->hdr;
            v[k++].iov_len = m->hdr_len;
            for (size_t i = 0; i < m->copy_cnt; i++)
                v[k++] = m->copy[i];
            for (size_t i = 0; i < m->zc_cnt; i++)
                v[k++] = m->zc[i];
            n = fy_tcp_sendv(l0->fd, v, k);
        }
        if (FY_LIKELY((size_t)n == total)) {
            count_frame(p, ep, payload);
            return FERRY_OK;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                fy_tcp_peer_fail(p, FERRY_ERR_CONNECTION_RESET, strerror(errno));
                return FERRY_ERR_CONNECTION_RESET;
            }
            n = 0;
        }
        written = (size_t)n;
    }
    if (written == 0 && fy_tcp_over_bound(p))
        return FERRY_ERR_NO_RESOURCE;
    fy_tcp_tx_t *tx = make_tx(iface, m, written);
    if (tx == NULL) {
        if (written != 0) /* half a frame is on the wire and the rest cannot follow */
            fy_tcp_peer_fail(p, FERRY_ERR_NO_MEMORY, "out of memory for a send queue");
        return FERRY_ERR_NO_MEMORY;
    }
    tx->started = written != 0;
    tx->ep = ep;
    count_frame(p, ep, payload);
    if (up) {
        tx_enqueue(p, &l0->txq, tx);
        link_want_out(l0, 1);
    } else {
        tx_enqueue(p, &p->preq, tx);
    }
    if (m->zc_len == 0)
        return FERRY_OK;
    tx->comp = m->comp;
    return FERRY_INPROGRESS;
}

static ferry_status_t send_striped(fy_tcp_peer_t *p, fy_tcp_ep_t *ep, const fy_tcp_msg_t *m)
{
    fy_tcp_iface_t *iface = p->iface;
    unsigned k = p->nlinks;
    int busy = 0;
    for (unsigned i = 0; i < k; i++)
        busy |= !fy_list_is_empty(&p->links[i]->txq);
    if (busy && fy_tcp_over_bound(p))
        return FERRY_ERR_NO_RESOURCE;

    /* piece sizes: zc split evenly (4 KiB multiples); piece 0 also carries the copy part */
    size_t len = m->zc_len, share = FY_ALIGN_UP((len + k - 1) / k, 4096);
    size_t off[FY_TCP_MAX_LINKS], plen[FY_TCP_MAX_LINKS];
    for (unsigned i = 0; i < k; i++) {
        off[i] = FY_MIN(len, share * i);
        plen[i] = i + 1 == k ? len - off[i] : FY_MIN(len - off[i], share);
    }
    fy_tcp_tx_t *tx[FY_TCP_MAX_LINKS] = {0};
    for (unsigned i = 0; i < k; i++) {
        tx[i] = tx_alloc(iface, i == 0 ? m->copy_len : 0);
        if (tx[i] == NULL) {
            for (unsigned j = 0; j < i; j++)
                tx_free(iface, tx[j]);
            return FERRY_ERR_NO_MEMORY;
        }
        tx[i]->zc = 1;
    }
    uint32_t seq = p->tx_seq++;
    /* piece 0: header + stripe ext, the copy part, zc [0, plen0) */
    fy_tcp_tx_t *t0 = tx[0];
    memcpy(t0->hdr, m->hdr, m->hdr_len);
    fy_tcp_hdr_t *h0 = (fy_tcp_hdr_t *)(void *)t0->hdr;
    h0->flags |= FY_TCP_F_STRIPED;
    fy_tcp_stripe_ext_t se = {htole32(seq), htole32((uint32_t)(m->copy_len + plen[0]))};
    memcpy(t0->hdr + m->hdr_len, &se, sizeof(se));
    t0->iov[0].iov_base = t0->hdr;
    t0->iov[0].iov_len = m->hdr_len + sizeof(se);
    unsigned n0 = 1;
    if (m->copy_len != 0) {
        gather_from(NULL, 0, m->copy, m->copy_cnt, 0, t0->data, m->copy_len);
        t0->iov[n0].iov_base = t0->data;
        t0->iov[n0++].iov_len = m->copy_len;
        t0->copied = m->copy_len;
    }
    n0 += (unsigned)fy_tcp_iov_slice(m->zc, m->zc_cnt, 0, plen[0], &t0->iov[n0],
                                     FY_ARRAY_SIZE(t0->iov) - n0);
    t0->iovcnt = n0;
    t0->left = m->hdr_len + sizeof(se) + m->copy_len + plen[0];
    /* pieces 1..: CHUNK header, zc slice */
    for (unsigned i = 1; i < k; i++) {
        fy_tcp_tx_t *t = tx[i];
        fy_tcp_hdr_t ch = {.type = FY_TCP_CHUNK, .length = htole32((uint32_t)plen[i])};
        fy_tcp_chunk_ext_t ce = {.seq = htole32(seq), .offset = htole64(m->copy_len + off[i])};
        memcpy(t->hdr, &ch, sizeof(ch));
        memcpy(t->hdr + sizeof(ch), &ce, sizeof(ce));
        t->iov[0].iov_base = t->hdr;
        t->iov[0].iov_len = sizeof(ch) + sizeof(ce);
        t->iovcnt = 1 + (unsigned)fy_tcp_iov_slice(m->zc, m->zc_cnt, off[i], plen[i], &t->iov[1],
                                                   FY_ARRAY_SIZE(t->iov) - 1);
        t->left = sizeof(ch) + sizeof(ce) + plen[i];
        t->leader = t0;
    }
    count_frame(p, ep, m->copy_len + m->zc_len);
    t0->ep = ep;
    t0->pieces = 0;
    ferry_status_t err = FERRY_OK;
    for (unsigned i = 0; i < k; i++) {
        fy_tcp_tx_t *t = tx[i];
        fy_tcp_link_t *link = p->links[i];
        t->ep = ep;
        if (plen[i] == 0 && i != 0) {
            tx_free(iface, t);
            continue;
        }
        if (err == FERRY_OK && fy_list_is_empty(&link->txq)) {
            ssize_t n = fy_tcp_sendv(link->fd, &t->iov[t->iovidx], t->iovcnt - t->iovidx);
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                fy_tcp_peer_fail(p, FERRY_ERR_CONNECTION_RESET, strerror(errno));
                err = FERRY_ERR_CONNECTION_RESET;
            } else if (n > 0) {
                tx_advance(t, (size_t)n);
                t->started = 1;
            }
        }
        if (t->left == 0 && err == FERRY_OK) {
            if (t != t0)
                tx_free(iface, t);
            continue;
        }
        if (err != FERRY_OK && !t->started) {
            if (t != t0)
                tx_free(iface, t);
            continue;
        }
        t0->pieces++;
        tx_enqueue(p, &link->txq, t);
        link_want_out(link, 1);
    }
    if (err != FERRY_OK) {
        /* failed now: no callback; pieces already queued end with the peer */
        if (t0->pieces == 0)
            tx_free(iface, t0);
        return err;
    }
    if (t0->pieces == 0) {
        tx_free(iface, t0);
        return FERRY_OK;
    }
    t0->comp = m->comp;
    return FERRY_INPROGRESS;
}

/* ---- requests awaiting answers ---------------------------------------------------------- */

fy_tcp_op_t *fy_tcp_op_new(fy_tcp_peer_t *p, fy_tcp_ep_t *ep, uint8_t kind, fy_tl_comp_t *comp)
{
    fy_tcp_op_t *op = fy_mpool_get(&p->iface->op_pool);
    if (op == NULL)
        return NULL;
    memset(op, 0, offsetof(fy_tcp_op_t, iov));
    op->id = p->next_op_id++;
    op->kind = kind;
    op->ep = ep;
    op->comp = comp;
    fy_list_add_tail(&p->ops, &op->elem);
    return op;
}

void fy_tcp_op_free(fy_tcp_iface_t *iface, fy_tcp_op_t *op)
{
    fy_mpool_put(&iface->op_pool, op);
}

/* ep_destroy: everything of this ep completes now with CANCELED.  Frames already queued are
 * still sent (a started frame must end, and a request must keep its answer in step), from a
 * copy, since the caller's memory is no longer ours to read. */
static void orphan_queue(fy_tcp_iface_t *iface, fy_list_t *q, fy_tcp_ep_t *ep)
{
    fy_list_t *e;
    for (e = q->next; e != q; e = e->next) {
        fy_tcp_tx_t *tx = fy_container_of(e, fy_tcp_tx_t, elem);
        fy_tcp_tx_t *l = tx->leader != NULL ? tx->leader : tx;
        if (tx->ep != ep && l->ep != ep)
            continue;
        if (tx->zc && tx->left != 0) {
            char *copy = malloc(tx->left);
            if (copy != NULL) {
                size_t o = 0;
                for (unsigned i = tx->iovidx; i < tx->iovcnt; i++) {
                    memcpy(copy + o, tx->iov[i].iov_base, tx->iov[i].iov_len);
                    o += tx->iov[i].iov_len;
                }
                free(tx->owned);
                tx->owned = copy;
                tx->iov[0].iov_base = copy;
                tx->iov[0].iov_len = tx->left;
                tx->iovidx = 0;
                tx->iovcnt = 1;
                tx->zc = 0;
            } else {
                fy_error("tcp: out of memory orphaning a send: the connection is dropped");
                fy_tcp_peer_fail(ep->peer, FERRY_ERR_NO_MEMORY, "out of memory");
            }
        }
        tx->ep = NULL;
        if (l->comp != NULL) {
            fy_tl_comp_t *c = l->comp;
            l->comp = NULL;
            c->cb(c, FERRY_ERR_CANCELED);
        }
        l->ep = NULL;
    }
}

void fy_tcp_ep_orphan(fy_tcp_ep_t *ep)
{
    fy_tcp_peer_t *p = ep->peer;
    if (p == NULL)
        return;
    fy_tcp_iface_t *iface = p->iface;
    orphan_queue(iface, &p->preq, ep);
    for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++)
        if (p->links[i] != NULL)
            orphan_queue(iface, &p->links[i]->txq, ep);
    /* a get answer arriving right now: the rest goes to the sink, not to the caller */
    fy_tcp_dest_t *d[FY_TCP_MAX_LINKS + 1];
    unsigned nd = 0;
    d[nd++] = &p->stripe;
    for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++)
        if (p->links[i] != NULL)
            d[nd++] = &p->links[i]->frame;
    for (unsigned i = 0; i < nd; i++) {
        fy_tcp_op_t *op = d[i]->op;
        if (op == NULL || op->ep != ep)
            continue;
        d[i]->discard = 1;
        op->ep = NULL;
        if (op->comp != NULL) {
            fy_tl_comp_t *c = op->comp;
            op->comp = NULL;
            c->cb(c, FERRY_ERR_CANCELED);
        }
    }
    fy_list_t *e;
    for (e = p->ops.next; e != &p->ops; e = e->next) {
        fy_tcp_op_t *op = fy_container_of(e, fy_tcp_op_t, elem);
        if (op->ep != ep)
            continue;
        op->ep = NULL;
        if (op->comp != NULL) {
            fy_tl_comp_t *c = op->comp;
            op->comp = NULL;
            c->cb(c, FERRY_ERR_CANCELED);
        }
    }
}
