/*
 * self_tx.c - the sending side of the self transport: claiming cells of a peer's ring, the
 * pool of bcopy buffers, zero-copy descriptors, and taking both back once the receiver lets
 * go (the ring, the tx states and their invariants are described in self.h).
 *
 * A send of up to SELF_MAX_SHORT bytes is one compare-and-swap on the peer's tail, the copy
 * and one release store: no lock, no allocation, no system call.  Larger bcopy messages are
 * copied once into a buffer of this interface's pool; a zcopy is not copied at all by the
 * sender.  Everything here runs on the sender's thread, except fy_self_tx_release, which the
 * receiver (or whoever drains a closing ring) calls.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/self/self.h"
#include "util/clock.h"
#include "util/copy.h"

/* ---- the ring ---- */

/*
 * Claim `need` consecutive cells of the peer's ring, behind a PAD if they would cross its
 * end.  Returns the first ticket in *ticket_p; *wake_p says the consumer armed to sleep.
 */
static inline ferry_status_t ring_claim(self_ep_t *ep, unsigned need, uint64_t *ticket_p,
                                        int *wake_p)
{
    self_port_t *p = ep->peer;
    uint64_t t = __atomic_load_n(&p->tail, __ATOMIC_RELAXED);
    for (;;) {
        if (FY_UNLIKELY(t & SELF_TAIL_CLOSED))
            return FERRY_ERR_NOT_CONNECTED;
        uint64_t tk = t & SELF_TICKET_MASK;
        unsigned pos = (unsigned)(tk & (SELF_RING_CELLS - 1));
        unsigned skip = pos + need > SELF_RING_CELLS ? SELF_RING_CELLS - pos : 0;
        uint64_t end = tk + skip + need;
        if (FY_UNLIKELY(end > ep->limit)) {
            /* acquire: the consumer's reads of these cells come before our writes */
            ep->limit = __atomic_load_n(&p->released, __ATOMIC_ACQUIRE) + SELF_RING_CELLS;
            if (end > ep->limit) {
                ep->iface->stats.tx_full++;
                return FERRY_ERR_NO_RESOURCE;
            }
        }
        if (FY_LIKELY(__atomic_compare_exchange_n(&p->tail, &t, end, 0, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED))) {
            *wake_p = (t & SELF_TAIL_SLEEP) != 0;
            if (FY_UNLIKELY(skip != 0)) {
                self_cell_t *c = self_cell_at(ep->cells, tk);
                c->len = skip;
                __atomic_store_n(&c->state, SELF_STATE(tk, SELF_CELL_PAD), __ATOMIC_RELEASE);
            }
            *ticket_p = tk + skip;
            return FERRY_OK;
        }
    }
}

static inline void ring_publish(self_ep_t *ep, self_cell_t *c, uint64_t ticket, unsigned type,
                                int wake)
{
    __atomic_store_n(&c->state, SELF_STATE(ticket, type), __ATOMIC_RELEASE);
    if (FY_UNLIKELY(wake)) {
        ep->iface->stats.wakeups_sent++;
        fy_self_port_wake(ep->peer);
    }
}

/* ---- handing back (the receiver's side) ---- */

void fy_self_tx_release(self_tx_t *tx, ferry_status_t status)
{
    /* After the exchange the sender may reuse tx at once: nothing of it is read after. */
    self_port_t *from = tx->kind == SELF_TX_ZCOPY ? ((self_zc_t *)tx)->from : NULL;
    tx->status = status;
    uint32_t prev = __atomic_exchange_n(&tx->state, TX_DONE, __ATOMIC_ACQ_REL);
    if (prev & TX_ORPHAN) {
        free(tx);
    } else if (from != NULL) {
        /* Dekker with event_arm: bump, then look; it sets zsleep, then looks at zc_done */
        __atomic_add_fetch(&from->zc_done, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&from->zsleep, __ATOMIC_SEQ_CST) &&
            __atomic_exchange_n(&from->zsleep, 0, __ATOMIC_SEQ_CST))
            fy_self_port_wake(from);
    }
    if (from != NULL)
        fy_self_port_unref(from);
}

/* ---- the bcopy buffer pool ---- */

static inline unsigned buf_class(size_t len)
{
    unsigned k = SELF_BUF_MIN_SHIFT;
    while (((size_t)1 << k) + SELF_BUF_SLACK < len)
        k++;
    return k - SELF_BUF_MIN_SHIFT;
}

/* A buffer the receiver handed back goes to its idle list, warmest first. */
static void buf_idle(self_iface_t *si, self_buf_t *b)
{
    si->flight_bytes -= b->cap;
    si->idle_bytes += b->cap;
    b->next = si->buf_idle[b->cls];
    si->buf_idle[b->cls] = b;
}

void fy_self_buf_trim(self_iface_t *si)
{
    if ((++si->trim_polls & 1023) != 0)
        return; /* the clock every 1024th call */
    uint64_t now = fy_time_ns();
    if (si->buf_gets != si->trim_gets || si->trim_since == 0) {
        si->trim_gets = si->buf_gets;
        si->trim_since = now;
        return;
    }
    if (now - si->trim_since < SELF_BUF_TRIM_NS)
        return;
    for (int c = SELF_BUF_CLASSES - 1; c >= 0 && si->idle_bytes > SELF_BUF_IDLE_KEEP; c--)
        while (si->buf_idle[c] != NULL && si->idle_bytes > SELF_BUF_IDLE_KEEP) {
            self_buf_t *b = si->buf_idle[c];
            si->buf_idle[c] = b->next;
            si->idle_bytes -= b->cap;
            free(b);
        }
    si->trim_since = 0;
}

/* Take back handed-back buffers: from the front of the FIFO, or (all) from anywhere in it
 * (buffers sent to several peers come back out of order). */
static void buf_reap(self_iface_t *si, int all)
{
    fy_list_t *pos, *tmp;
    fy_list_for_each_safe(pos, tmp, &si->buf_flight)
    {
        self_buf_t *b = fy_container_of(pos, self_buf_t, link);
        if (__atomic_load_n(&b->tx.state, __ATOMIC_ACQUIRE) != TX_DONE) {
            if (!all)
                return;
            continue;
        }
        fy_list_del(&b->link);
        buf_idle(si, b);
    }
}

static self_buf_t *buf_get(self_iface_t *si, size_t len)
{
    unsigned cls = buf_class(len);
    size_t cap = ((size_t)1 << (cls + SELF_BUF_MIN_SHIFT)) + SELF_BUF_SLACK;
    si->buf_gets++;
    if (!fy_list_is_empty(&si->buf_flight))
        buf_reap(si, 0);
    if (si->buf_idle[cls] == NULL && si->flight_bytes + cap > si->flight_max)
        buf_reap(si, 1);
    self_buf_t *b = si->buf_idle[cls];
    if (b != NULL) {
        si->buf_idle[cls] = b->next;
        si->idle_bytes -= cap;
    } else {
        if (si->flight_bytes != 0 && si->flight_bytes + cap > si->flight_max) {
            si->stats.tx_pool_empty++;
            return NULL;
        }
        b = aligned_alloc(SELF_CELL_SIZE, SELF_BUF_HDR + cap);
        if (b == NULL)
            return NULL;
        b->tx.kind = SELF_TX_BUF;
        b->cls = (uint8_t)cls;
        b->cap = cap;
        si->stats.bufs_allocated++;
    }
    si->flight_bytes += cap;
    return b;
}

/* bcopy above SELF_MAX_SHORT: through a buffer of our pool, one cell in the ring. */
static ferry_status_t send_buf(self_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt,
                               size_t len)
{
    if (len > SELF_MAX_BCOPY)
        return FERRY_ERR_INVALID_PARAM;
    /* room first, so a full ring costs no copy (one cell: never a PAD) */
    uint64_t tail = __atomic_load_n(&ep->peer->tail, __ATOMIC_RELAXED);
    if (FY_UNLIKELY(tail & SELF_TAIL_CLOSED))
        return FERRY_ERR_NOT_CONNECTED;
    tail &= SELF_TICKET_MASK;
    if (tail + 1 > ep->limit &&
        tail + 1 > __atomic_load_n(&ep->peer->released, __ATOMIC_ACQUIRE) + SELF_RING_CELLS) {
        ep->iface->stats.tx_full++;
        return FERRY_ERR_NO_RESOURCE;
    }
    self_iface_t *si = ep->iface;
    self_buf_t *b = buf_get(si, len);
    if (b == NULL)
        return FERRY_ERR_NO_RESOURCE;
    fy_iov_gather(SELF_BUF_DATA(b), iov, iovcnt);
    uint64_t t;
    int wake = 0;
    ferry_status_t st = ring_claim(ep, 1, &t, &wake);
    if (FY_UNLIKELY(st != FERRY_OK)) {
        buf_idle(si, b);
        return st;
    }
    __atomic_store_n(&b->tx.state, TX_PENDING, __ATOMIC_RELAXED);
    fy_list_add_tail(&si->buf_flight, &b->link);
    self_cell_t *c = self_cell_at(ep->cells, t);
    c->len = (uint32_t)len;
    c->am_id = id;
    memcpy(c->data, &b, sizeof(b));
    ring_publish(ep, c, t, SELF_CELL_BUF, wake);
    return FERRY_OK;
}

/* Inline in the ring: up to SELF_MAX_SHORT bytes. */
static inline ferry_status_t send_short(self_ep_t *ep, uint8_t id, const struct iovec *iov,
                                        size_t iovcnt, size_t len)
{
    uint64_t t;
    int wake = 0;
    ferry_status_t st = ring_claim(ep, self_cells_for(len), &t, &wake);
    if (FY_UNLIKELY(st != FERRY_OK))
        return st;
    self_cell_t *c = self_cell_at(ep->cells, t);
    c->len = (uint32_t)len;
    c->am_id = id;
    uint8_t *p = c->data;
    for (size_t i = 0; i < iovcnt; i++) {
        fy_copy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    ring_publish(ep, c, t, SELF_CELL_SHORT, wake);
    return FERRY_OK;
}

/* am_short: inline, refusing anything beyond the attributes (tl.h: LIMITS). */
ferry_status_t fy_self_am_short(fy_tl_ep_t *tl_ep, uint8_t id, const struct iovec *iov,
                                size_t iovcnt)
{
    size_t len = fy_iov_total(iov, iovcnt);
    if (FY_UNLIKELY(len > SELF_MAX_SHORT || iovcnt > SELF_MAX_IOV || id > FY_TL_AM_ID_MAX))
        return FERRY_ERR_INVALID_PARAM;
    return send_short((self_ep_t *)tl_ep, id, iov, iovcnt, len);
}

/* am_bcopy: inline up to SELF_MAX_SHORT, through a buffer above. */
ferry_status_t fy_self_am_bcopy(fy_tl_ep_t *tl_ep, uint8_t id, const struct iovec *iov,
                                size_t iovcnt)
{
    self_ep_t *ep = (self_ep_t *)tl_ep;
    size_t len = fy_iov_total(iov, iovcnt);
    if (FY_UNLIKELY(iovcnt > SELF_MAX_IOV || id > FY_TL_AM_ID_MAX))
        return FERRY_ERR_INVALID_PARAM;
    if (len > SELF_MAX_SHORT)
        return send_buf(ep, id, iov, iovcnt, len);
    return send_short(ep, id, iov, iovcnt, len);
}

/* ---- zero-copy ---- */

static self_zc_t *zc_get(self_iface_t *si)
{
    self_zc_t *z = si->zc_idle;
    if (z != NULL) {
        si->zc_idle = z->next;
        si->nzc_idle--;
        return z;
    }
    z = malloc(sizeof(*z));
    if (z != NULL)
        z->tx.kind = SELF_TX_ZCOPY;
    return z;
}

static void zc_put(self_iface_t *si, self_zc_t *z)
{
    if (si->nzc_idle >= SELF_ZC_IDLE_MAX) {
        free(z);
        return;
    }
    z->next = si->zc_idle;
    si->zc_idle = z;
    si->nzc_idle++;
}

ferry_status_t fy_self_am_zcopy(fy_tl_ep_t *tl_ep, uint8_t id, const void *hdr, size_t hdr_len,
                                const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp)
{
    self_ep_t *ep = (self_ep_t *)tl_ep;
    self_iface_t *si = ep->iface;
    if (hdr_len > SELF_MAX_ZCOPY_HDR || iovcnt > SELF_MAX_IOV || comp == NULL ||
        id > FY_TL_AM_ID_MAX || (hdr == NULL && hdr_len != 0))
        return FERRY_ERR_INVALID_PARAM;
    if (si->nzc >= SELF_ZC_FLIGHT_MAX) {
        si->stats.tx_pool_empty++;
        return FERRY_ERR_NO_RESOURCE;
    }
    self_zc_t *z = zc_get(si);
    if (z == NULL)
        return FERRY_ERR_NO_RESOURCE;
    uint64_t t;
    int wake = 0;
    ferry_status_t st = ring_claim(ep, 1, &t, &wake);
    if (FY_UNLIKELY(st != FERRY_OK)) {
        zc_put(si, z);
        return st;
    }
    __atomic_store_n(&z->tx.state, TX_PENDING, __ATOMIC_RELAXED);
    z->comp_done = 0;
    z->from = si->port;
    __atomic_add_fetch(&si->port->refs, 1, __ATOMIC_RELAXED);
    z->comp = comp;
    z->ep = ep;
    z->hdr_len = (uint32_t)hdr_len;
    if (hdr_len != 0)
        memcpy(z->hdr, hdr, hdr_len);
    z->iovcnt = (uint32_t)iovcnt;
    z->len = 0;
    for (size_t i = 0; i < iovcnt; i++) {
        z->iov[i] = iov[i];
        z->len += iov[i].iov_len;
    }
    fy_list_add_tail(&si->zc_flight, &z->link);
    fy_list_add_tail(&ep->zcs, &z->ep_link);
    si->nzc++;
    ep->zc_issued++;
    self_cell_t *c = self_cell_at(ep->cells, t);
    c->len = (uint32_t)FY_MIN(hdr_len + z->len, (size_t)UINT32_MAX);
    c->am_id = id;
    memcpy(c->data, &z, sizeof(z));
    ring_publish(ep, c, t, SELF_CELL_ZCOPY, wake);
    return FERRY_INPROGRESS;
}

/* Flushes of ep that no zcopy holds back any more move to list. */
static void ep_flushes_ready(self_ep_t *ep, fy_list_t *list)
{
    while (!fy_list_is_empty(&ep->flushes)) {
        self_flush_t *f = fy_container_of(ep->flushes.next, self_flush_t, link);
        if (f->need > ep->zc_completed)
            break;
        fy_list_del(&f->link);
        fy_list_add_tail(list, &f->link);
    }
}

unsigned fy_self_zc_reap(self_iface_t *si)
{
    /* Every list is updated before the first callback, so a callback may send or destroy eps. */
    si->zc_seen = __atomic_load_n(&si->port->zc_done, __ATOMIC_ACQUIRE);
    fy_list_t done, flushes, *pos, *tmp;
    fy_list_init(&done);
    fy_list_init(&flushes);
    fy_list_for_each_safe(pos, tmp, &si->zc_flight)
    {
        self_zc_t *z = fy_container_of(pos, self_zc_t, link);
        if (__atomic_load_n(&z->tx.state, __ATOMIC_ACQUIRE) != TX_DONE)
            continue;
        fy_list_del(&z->link);
        fy_list_add_tail(&done, &z->link);
        si->nzc--;
        if (!z->comp_done) {
            fy_list_del(&z->ep_link);
            z->ep->zc_completed++;
            if (!fy_list_is_empty(&z->ep->flushes))
                ep_flushes_ready(z->ep, &flushes);
        }
    }
    unsigned n = 0;
    while ((pos = fy_list_pop_head(&done)) != NULL) {
        self_zc_t *z = fy_container_of(pos, self_zc_t, link);
        if (!z->comp_done) {
            z->comp_done = 1;
            z->comp->cb(z->comp, z->tx.status);
            n++;
        }
        zc_put(si, z);
    }
    while ((pos = fy_list_pop_head(&flushes)) != NULL) {
        self_flush_t *f = fy_container_of(pos, self_flush_t, link);
        f->comp->cb(f->comp, FERRY_OK);
        free(f);
        n++;
    }
    return n;
}

ferry_status_t fy_self_zc_settle(self_zc_t *z)
{
    for (;;) {
        uint32_t s = __atomic_load_n(&z->tx.state, __ATOMIC_ACQUIRE);
        if (s == TX_DONE)
            return z->tx.status;
        if (s == TX_READING) {
            if (fy_self_reading == z)
                return FERRY_ERR_CANCELED; /* our own caller is reading it, up the stack */
            fy_cpu_relax();
            continue; /* another thread copies from the caller's memory: a bounded wait */
        }
        if (__atomic_compare_exchange_n(&z->tx.state, &s, TX_CANCELED, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return FERRY_ERR_CANCELED;
    }
}

/* Our interface closes while zcopy z is out: settle its comp, and make sure nobody reads the
 * caller's memory once we return; z is freed here or by the receiver, whoever is second. */
static void zc_orphan(self_zc_t *z)
{
    for (;;) {
        uint32_t s = __atomic_load_n(&z->tx.state, __ATOMIC_ACQUIRE);
        ferry_status_t st = FERRY_ERR_CANCELED;
        if (s == TX_DONE) {
            st = z->tx.status;
        } else if (s == TX_READING && fy_self_reading != z) {
            fy_cpu_relax();
            continue;
        } else if (!__atomic_compare_exchange_n(&z->tx.state, &s, s | TX_ORPHAN, 0,
                                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            continue;
        }
        if (!z->comp_done) {
            z->comp_done = 1;
            fy_list_del(&z->ep_link);
            z->comp->cb(z->comp, st);
        }
        if (s == TX_DONE)
            free(z);
        return;
    }
}

void fy_self_tx_cleanup(self_iface_t *si)
{
    fy_list_t *pos, *tmp;
    fy_list_for_each_safe(pos, tmp, &si->zc_flight)
    {
        fy_list_del(pos);
        zc_orphan(fy_container_of(pos, self_zc_t, link));
    }
    fy_list_for_each_safe(pos, tmp, &si->buf_flight)
    {
        self_buf_t *b = fy_container_of(pos, self_buf_t, link);
        fy_list_del(pos);
        if (__atomic_fetch_or(&b->tx.state, TX_ORPHAN, __ATOMIC_ACQ_REL) == TX_DONE)
            free(b);
    }
    for (unsigned c = 0; c < SELF_BUF_CLASSES; c++)
        while (si->buf_idle[c] != NULL) {
            self_buf_t *b = si->buf_idle[c];
            si->buf_idle[c] = b->next;
            free(b);
        }
    while (si->zc_idle != NULL) {
        self_zc_t *z = si->zc_idle;
        si->zc_idle = z->next;
        free(z);
    }
}
