/*
 * self.c - the self transport: workers of one process talking to each other, and a worker to
 * itself.  This file has the memory domain, the interface (its port in the process-wide
 * table, receiving, sleeping), the endpoints, and RMA and atomics, which are native: the
 * target memory is in this address space, checked against the key's bounds and rights, and
 * complete when the call returns.  The design of the ring, and why it needs no lock, is in
 * self.h; sending is in self_tx.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "tl/self/self.h"
#include "util/log.h"
#include "util/region.h"

/* A registration is an entry of the process-wide region table: a key names (id, key), and
 * every access is checked against the table, so a key whose region was deregistered (or a
 * forged one) is refused instead of reaching memory that may have been freed. */
typedef struct self_memh {
    fy_region_t region;
} self_memh_t;

typedef struct self_rkey {
    uint64_t token;
    uint64_t id;
    uint64_t key;
} self_rkey_t;

/* The process-wide table of ports, by id: taken by iface_open, iface_close and ep_create. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static fy_list_t table = {&table, &table};
static uint64_t process_token;
static pthread_once_t token_once = PTHREAD_ONCE_INIT;

_Thread_local self_zc_t *fy_self_reading;

static fy_region_table_t regions; /* process lifetime: created once, never destroyed */
static ferry_status_t regions_status;

static void token_init(void)
{
    process_token = fy_random64() ^ (uint64_t)getpid();
    regions_status = fy_region_table_init(&regions);
}

/* ---- the port ---- */

void fy_self_port_wake(self_port_t *p)
{
    uint64_t one = 1;
    ssize_t r = write(p->efd, &one, sizeof(one));
    (void)r; /* EAGAIN: the counter is already non-zero, the fd readable */
}

void fy_self_port_unref(self_port_t *p)
{
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    close(p->efd);
    free(p->cells);
    free(p);
}

/* ---- memory domain ---- */

static fy_tl_md_t self_md_singleton;

static ferry_status_t self_md_open(const fy_tl_component_t *tl, fy_tl_md_t **md_p)
{
    pthread_once(&token_once, token_init);
    if (regions_status != FERRY_OK)
        return regions_status;
    self_md_singleton.component = tl;
    *md_p = &self_md_singleton;
    return FERRY_OK;
}

static void self_md_close(fy_tl_md_t *md)
{
    (void)md;
}

static ferry_status_t self_query_devices(fy_tl_md_t *md, fy_tl_device_t *devs, unsigned max,
                                         unsigned *count)
{
    (void)md;
    if (max < 1)
        return FERRY_ERR_NO_RESOURCE;
    memset(&devs[0], 0, sizeof(devs[0]));
    snprintf(devs[0].name, sizeof(devs[0].name), "process");
    devs[0].is_loopback = 1;
    *count = 1;
    return FERRY_OK;
}

static ferry_status_t self_mem_reg(fy_tl_md_t *md, void *addr, size_t len, unsigned access,
                                   void *memh)
{
    (void)md;
    self_memh_t *m = memh;
    return fy_region_add(&regions, addr, len, access, &m->region);
}

static void self_mem_dereg(fy_tl_md_t *md, void *memh)
{
    (void)md;
    self_memh_t *m = memh;
    fy_region_remove(&regions, m->region.id);
}

static ferry_status_t self_rkey_pack(fy_tl_md_t *md, const void *memh, void *buf)
{
    (void)md;
    const self_memh_t *m = memh;
    self_rkey_t rk = {process_token, m->region.id, m->region.key};
    memcpy(buf, &rk, sizeof(rk));
    return FERRY_OK;
}

static ferry_status_t self_rkey_unpack(fy_tl_md_t *md, const void *buf, void *rkey)
{
    (void)md;
    self_rkey_t rk;
    memcpy(&rk, buf, sizeof(rk));
    if (rk.token != process_token)
        return FERRY_ERR_UNREACHABLE; /* a key of another process */
    memcpy(rkey, &rk, sizeof(rk));
    return FERRY_OK;
}

/* ---- the interface ---- */

static ferry_status_t self_iface_open(fy_tl_md_t *md, const fy_tl_iface_params_t *params,
                                      fy_tl_iface_t **iface_p)
{
    ferry_status_t st = FERRY_ERR_NO_MEMORY;
    self_iface_t *si = calloc(1, sizeof(*si));
    if (si == NULL)
        return st;
    self_port_t *p = aligned_alloc(128, sizeof(*p));
    if (p == NULL)
        goto err_iface;
    memset(p, 0, sizeof(*p));
    p->cells = aligned_alloc(SELF_CELL_SIZE, (size_t)SELF_RING_CELLS * SELF_CELL_SIZE);
    if (p->cells == NULL)
        goto err_port;
    memset(p->cells, 0, (size_t)SELF_RING_CELLS * SELF_CELL_SIZE);
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->efd < 0) {
        st = fy_status_from_errno(errno);
        goto err_cells;
    }
    p->id = fy_random64();
    p->refs = 1;
    fy_tl_iface_base_init(&si->super, md->component, md, params);
    si->port = p;
    si->cells = p->cells;
    /* The pool grows only to the budget proto gives (a stalled peer costs the sender at most
     * that, besides what proto counts), one buffer always allowed. */
    si->flight_max = params->tx_copy_max != 0 && params->tx_copy_max < SELF_BUF_FLIGHT_MAX
                         ? params->tx_copy_max
                         : SELF_BUF_FLIGHT_MAX;
    fy_list_init(&si->zc_flight);
    fy_list_init(&si->eps);
    fy_list_init(&si->buf_flight);
    pthread_mutex_lock(&table_lock);
    fy_list_add_tail(&table, &p->link);
    pthread_mutex_unlock(&table_lock);
    *iface_p = &si->super;
    return FERRY_OK;

err_cells:
    free(p->cells);
err_port:
    free(p);
err_iface:
    free(si);
    return st;
}

/* Empty a closed ring: wait for claims still being written (a copy at most), then let go of
 * every message without delivering it. */
static void ring_drain(self_iface_t *si, uint64_t end)
{
    while (si->head < end) {
        self_cell_t *c = self_cell_at(si->cells, si->head);
        unsigned type;
        while ((type = self_cell_ready(c, si->head)) == 0)
            fy_cpu_relax();
        unsigned n = 1;
        if (type == SELF_CELL_PAD)
            n = c->len;
        else if (type == SELF_CELL_SHORT)
            n = self_cells_for(c->len);
        else
            fy_self_tx_release(self_cell_ptr(c), FERRY_ERR_NOT_CONNECTED);
        si->head += n;
    }
    __atomic_store_n(&si->port->released, si->head, __ATOMIC_RELEASE);
}
static void self_ep_destroy(fy_tl_ep_t *tl_ep);

static void self_iface_close(fy_tl_iface_t *iface)
{
    if (iface == NULL)
        return;
    self_iface_t *si = (self_iface_t *)iface;
    self_port_t *p = si->port;
    /* Eps still open go as by ep_destroy: their zcopies and flushes complete (CANCELED). */
    while (!fy_list_is_empty(&si->eps))
        self_ep_destroy(&fy_container_of(si->eps.next, self_ep_t, link)->super);
    pthread_mutex_lock(&table_lock);
    fy_list_del(&p->link);
    pthread_mutex_unlock(&table_lock);
    /* As a receiver: nothing enters the ring from now on, and what is in it is dropped. */
    uint64_t t = __atomic_fetch_or(&p->tail, SELF_TAIL_CLOSED, __ATOMIC_SEQ_CST);
    ring_drain(si, t & SELF_TICKET_MASK);
    /* As a sender: what we lent to other rings, and our pools. */
    fy_self_tx_cleanup(si);
    free(si->rxbuf);
    free(si);
    fy_self_port_unref(p);
}

static void self_iface_query(fy_tl_iface_t *iface, fy_tl_iface_attr_t *attr)
{
    (void)iface;
    memset(attr, 0, sizeof(*attr));
    attr->caps = FY_TL_CAP_AM_SHORT | FY_TL_CAP_AM_BCOPY | FY_TL_CAP_AM_ZCOPY | FY_TL_CAP_PUT |
                 FY_TL_CAP_GET | FY_TL_CAP_AMO32 | FY_TL_CAP_AMO64 | FY_TL_CAP_AM_ORDERED |
                 FY_TL_CAP_EVENT_FD | FY_TL_CAP_CONNECT_TO_IFACE;
    attr->latency_ns = 10;
    attr->bandwidth = 20e9;
    attr->overhead_ns = 10;
    attr->max_short = SELF_MAX_SHORT;
    attr->max_bcopy = SELF_MAX_BCOPY;
    attr->max_zcopy = SIZE_MAX / 2;
    attr->max_zcopy_hdr = SELF_MAX_ZCOPY_HDR;
    attr->max_put_short = SELF_MAX_SHORT;
    attr->max_get_short = SELF_MAX_SHORT;
    attr->max_rma = SIZE_MAX / 2;
    attr->max_iov = SELF_MAX_IOV;
    attr->device_addr_len = sizeof(uint64_t);
    attr->iface_addr_len = sizeof(uint64_t);
    attr->priority = 10;
}

static ferry_status_t self_iface_get_address(fy_tl_iface_t *iface, void *dev_addr, void *iface_addr)
{
    memcpy(dev_addr, &process_token, sizeof(uint64_t));
    memcpy(iface_addr, &((self_iface_t *)iface)->port->id, sizeof(uint64_t));
    return FERRY_OK;
}

static int self_iface_is_reachable(fy_tl_iface_t *iface, const void *dev_addr,
                                   const void *iface_addr)
{
    (void)iface, (void)iface_addr;
    uint64_t token;
    memcpy(&token, dev_addr, sizeof(token));
    return token == process_token;
}

static void self_iface_unreachable_why(fy_tl_iface_t *iface, const void *dev_addr,
                                       const void *iface_addr, char *buf, size_t len)
{
    (void)iface, (void)dev_addr, (void)iface_addr;
    snprintf(buf, len, "another process (self joins the workers of one process)");
}

/* ---- receiving ---- */

static int rxbuf_reserve(self_iface_t *si, size_t len)
{
    if (len <= si->rxbuf_size && si->rxbuf != NULL)
        return 1;
    if (len < 4096)
        len = 4096;
    free(si->rxbuf);
    si->rxbuf = malloc(len);
    si->rxbuf_size = si->rxbuf != NULL ? len : 0;
    return si->rxbuf != NULL;
}

static void deliver_zcopy(self_iface_t *si, const self_cell_t *c)
{
    fy_tl_iface_params_t *pr = &si->super.params;
    self_zc_t *z = self_cell_ptr(c);
    uint32_t expect = TX_PENDING;
    if (!__atomic_compare_exchange_n(&z->tx.state, &expect, TX_READING, 0, __ATOMIC_ACQUIRE,
                                     __ATOMIC_ACQUIRE)) {
        fy_self_tx_release(&z->tx, FERRY_ERR_CANCELED); /* withdrawn by its sender */
        return;
    }
    size_t len = z->hdr_len + z->len;
    si->stats.rx_bytes += len;
    if (z->iovcnt == 0 || (z->hdr_len == 0 && z->iovcnt == 1)) {
        /* one piece: the handler reads it where it lies, and only then is it handed back */
        si->stats.rx_zcopy_inplace++;
        fy_self_reading = z;
        pr->am_cb(pr->am_arg, c->am_id, z->iovcnt == 0 ? z->hdr : z->iov[0].iov_base, len);
        fy_self_reading = NULL;
        fy_self_tx_release(&z->tx, FERRY_OK);
        return;
    }
    if (!rxbuf_reserve(si, len)) {
        fy_error("self: no memory to receive a message of %zu bytes", len);
        si->stats.rx_drops++;
        fy_self_tx_release(&z->tx, FERRY_ERR_NO_MEMORY);
        return;
    }
    si->stats.rx_zcopy_gather++;
    memcpy(si->rxbuf, z->hdr, z->hdr_len);
    fy_iov_gather(si->rxbuf + z->hdr_len, z->iov, z->iovcnt);
    fy_self_tx_release(&z->tx, FERRY_OK); /* the caller's memory is free before the handler runs */
    pr->am_cb(pr->am_arg, c->am_id, si->rxbuf, len);
    if (si->rxbuf_size > SELF_RXBUF_KEEP) {
        free(si->rxbuf);
        si->rxbuf = NULL;
        si->rxbuf_size = 0;
    }
}

static unsigned self_iface_progress(fy_tl_iface_t *iface)
{
    self_iface_t *si = (self_iface_t *)iface;
    if (FY_UNLIKELY(si->in_progress))
        return 0;
    unsigned n = 0;
    if (FY_UNLIKELY(__atomic_load_n(&si->port->zc_done, __ATOMIC_RELAXED) != si->zc_seen)) {
        si->in_progress = 1;
        n += fy_self_zc_reap(si);
        si->in_progress = 0;
    }
    if (FY_UNLIKELY(si->idle_bytes > SELF_BUF_IDLE_KEEP))
        fy_self_buf_trim(si);
    self_cell_t *c = self_cell_at(si->cells, si->head);
    unsigned type = self_cell_ready(c, si->head);
    if (type == 0)
        return n; /* idle: one load */
    si->in_progress = 1;
    const fy_tl_iface_params_t *pr = &iface->params;
    for (unsigned i = 0; type != 0 && i < SELF_RX_BATCH; i++) {
        unsigned cells = 1;
        switch (type) {
        case SELF_CELL_SHORT:
            cells = self_cells_for(c->len);
            si->stats.rx_bytes += c->len;
            pr->am_cb(pr->am_arg, c->am_id, c->data, c->len);
            /* continuation cells held data where a state word goes: clear it */
            for (unsigned k = 1; k < cells; k++)
                __atomic_store_n(&self_cell_at(si->cells, si->head + k)->state, 0,
                                 __ATOMIC_RELAXED);
            break;
        case SELF_CELL_BUF: {
            self_buf_t *b = self_cell_ptr(c);
            si->stats.rx_bytes += c->len;
            si->stats.rx_buf++;
            pr->am_cb(pr->am_arg, c->am_id, SELF_BUF_DATA(b), c->len);
            fy_self_tx_release(&b->tx, FERRY_OK);
            break;
        }
        case SELF_CELL_ZCOPY:
            deliver_zcopy(si, c);
            break;
        default: /* SELF_CELL_PAD: the rest of the lap, no message */
            cells = c->len;
            n--;
            break;
        }
        n++;
        si->head += cells;
        __atomic_store_n(&si->port->released, si->head, __ATOMIC_RELEASE);
        c = self_cell_at(si->cells, si->head);
        type = self_cell_ready(c, si->head);
    }
    si->stats.rx_msgs += n;
    si->in_progress = 0;
    return n;
}

static int self_iface_event_fd(fy_tl_iface_t *iface)
{
    return ((self_iface_t *)iface)->port->efd;
}

static ferry_status_t self_iface_event_arm(fy_tl_iface_t *iface)
{
    self_iface_t *si = (self_iface_t *)iface;
    self_port_t *p = si->port;
    uint64_t v;
    while (read(p->efd, &v, sizeof(v)) == sizeof(v)) {
    }
    /* zcopy completions: the receiver bumps zc_done, then looks at zsleep */
    __atomic_store_n(&p->zsleep, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&p->zc_done, __ATOMIC_SEQ_CST) != si->zc_seen)
        return FERRY_ERR_BUSY;
    /* the ring: SLEEP goes in only if nothing is claimed beyond what we consumed */
    uint64_t expect = si->head;
    if (__atomic_compare_exchange_n(&p->tail, &expect, si->head | SELF_TAIL_SLEEP, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return FERRY_OK;
    return expect == (si->head | SELF_TAIL_SLEEP) ? FERRY_OK : FERRY_ERR_BUSY;
}

static void self_iface_print(fy_tl_iface_t *iface, FILE *f)
{
    self_iface_t *si = (self_iface_t *)iface;
    uint64_t tail = __atomic_load_n(&si->port->tail, __ATOMIC_RELAXED) & SELF_TICKET_MASK;
    fprintf(f,
            "    self: ring %llu/%u cells used; rx %llu msgs %llu bytes (%llu bcopy buffers, "
            "%llu zcopy in place, %llu gathered, %llu dropped); tx full %llu, pool empty %llu, "
            "%zu buffer bytes out, %u zcopies out, %llu buffers allocated, %llu wake-ups\n",
            (unsigned long long)(tail - si->head), SELF_RING_CELLS,
            (unsigned long long)si->stats.rx_msgs, (unsigned long long)si->stats.rx_bytes,
            (unsigned long long)si->stats.rx_buf, (unsigned long long)si->stats.rx_zcopy_inplace,
            (unsigned long long)si->stats.rx_zcopy_gather, (unsigned long long)si->stats.rx_drops,
            (unsigned long long)si->stats.tx_full, (unsigned long long)si->stats.tx_pool_empty,
            si->flight_bytes, si->nzc, (unsigned long long)si->stats.bufs_allocated,
            (unsigned long long)si->stats.wakeups_sent);
}

/* ---- endpoints ---- */

static ferry_status_t self_ep_create(fy_tl_iface_t *iface, const void *dev_addr,
                                     const void *iface_addr, fy_tl_ep_t **ep_p)
{
    if (!self_iface_is_reachable(iface, dev_addr, iface_addr))
        return FERRY_ERR_UNREACHABLE;
    self_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return FERRY_ERR_NO_MEMORY;
    uint64_t id;
    memcpy(&id, iface_addr, sizeof(id));
    self_port_t *peer = NULL;
    pthread_mutex_lock(&table_lock);
    fy_list_t *pos;
    fy_list_for_each(pos, &table)
    {
        self_port_t *p = fy_container_of(pos, self_port_t, link);
        if (p->id == id) {
            __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED); /* the table's entry holds one */
            peer = p;
            break;
        }
    }
    pthread_mutex_unlock(&table_lock);
    if (peer == NULL) {
        free(ep);
        return FERRY_ERR_UNREACHABLE; /* no such interface (any more) in this process */
    }
    ep->super.iface = iface;
    ep->peer = peer;
    ep->cells = peer->cells;
    ep->iface = (self_iface_t *)iface;
    fy_list_init(&ep->zcs);
    fy_list_init(&ep->flushes);
    fy_list_add_tail(&ep->iface->eps, &ep->link);
    *ep_p = &ep->super;
    return FERRY_OK;
}

static void self_ep_destroy(fy_tl_ep_t *tl_ep)
{
    if (tl_ep == NULL)
        return;
    self_ep_t *ep = (self_ep_t *)tl_ep;
    fy_list_t *pos;
    while ((pos = fy_list_pop_head(&ep->zcs)) != NULL) {
        self_zc_t *z = fy_container_of(pos, self_zc_t, ep_link);
        ferry_status_t st = fy_self_zc_settle(z);
        z->comp_done = 1; /* it stays on iface->zc_flight until the receiver lets go */
        z->ep = NULL;
        z->comp->cb(z->comp, st);
    }
    while ((pos = fy_list_pop_head(&ep->flushes)) != NULL) {
        self_flush_t *f = fy_container_of(pos, self_flush_t, link);
        f->comp->cb(f->comp, FERRY_ERR_CANCELED);
        free(f);
    }
    fy_list_del(&ep->link);
    fy_self_port_unref(ep->peer);
    free(ep);
}

static ferry_status_t self_ep_flush(fy_tl_ep_t *tl_ep, fy_tl_comp_t *comp)
{
    self_ep_t *ep = (self_ep_t *)tl_ep;
    if (fy_list_is_empty(&ep->zcs))
        return FERRY_OK; /* everything else completed inside its call */
    if (comp == NULL)
        return FERRY_ERR_NO_RESOURCE; /* not yet: progress and ask again (tl.h) */
    self_flush_t *f = malloc(sizeof(*f));
    if (f == NULL)
        return FERRY_ERR_NO_RESOURCE;
    f->comp = comp;
    f->need = ep->zc_issued;
    fy_list_add_tail(&ep->flushes, &f->link);
    return FERRY_INPROGRESS;
}

/* ---- RMA and atomics: plain memory operations in this address space ---- */

static ferry_status_t rkey_check(const void *rkey, uint64_t addr, size_t len, unsigned access)
{
    const self_rkey_t *rk = rkey;
    void *local;
    return fy_region_check(&regions, rk->id, rk->key, addr, len, access, &local);
}

static ferry_status_t self_put_short(fy_tl_ep_t *ep, const void *buf, size_t len,
                                     uint64_t remote_addr, const void *rkey)
{
    (void)ep;
    ferry_status_t st = rkey_check(rkey, remote_addr, len, FERRY_MEM_REMOTE_WRITE);
    if (st == FERRY_OK && len != 0)
        memmove((void *)(uintptr_t)remote_addr, buf, len);
    return st;
}

static ferry_status_t self_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                     uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    (void)ep, (void)comp;
    size_t len = fy_iov_total(iov, iovcnt);
    ferry_status_t st = rkey_check(rkey, remote_addr, len, FERRY_MEM_REMOTE_WRITE);
    if (st == FERRY_OK)
        fy_iov_gather((void *)(uintptr_t)remote_addr, iov, iovcnt);
    return st;
}

static ferry_status_t self_get_short(fy_tl_ep_t *ep, void *buf, size_t len, uint64_t remote_addr,
                                     const void *rkey)
{
    (void)ep;
    ferry_status_t st = rkey_check(rkey, remote_addr, len, FERRY_MEM_REMOTE_READ);
    if (st == FERRY_OK && len != 0)
        memmove(buf, (const void *)(uintptr_t)remote_addr, len);
    return st;
}

static ferry_status_t self_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                     uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    (void)ep, (void)comp;
    size_t len = fy_iov_total(iov, iovcnt);
    ferry_status_t st = rkey_check(rkey, remote_addr, len, FERRY_MEM_REMOTE_READ);
    if (st == FERRY_OK)
        fy_iov_scatter(iov, iovcnt, 0, (const void *)(uintptr_t)remote_addr, len);
    return st;
}

#define SELF_AMO(T)                                                                                \
    do {                                                                                           \
        T *p = (T *)(uintptr_t)remote_addr, v = (T)operand, old;                                   \
        switch (op) {                                                                              \
        case FERRY_ATOMIC_ADD:                                                                     \
            old = __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);                                      \
            break;                                                                                 \
        case FERRY_ATOMIC_AND:                                                                     \
            old = __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);                                      \
            break;                                                                                 \
        case FERRY_ATOMIC_OR:                                                                      \
            old = __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);                                       \
            break;                                                                                 \
        case FERRY_ATOMIC_XOR:                                                                     \
            old = __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);                                      \
            break;                                                                                 \
        case FERRY_ATOMIC_SWAP:                                                                    \
            old = __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);                                     \
            break;                                                                                 \
        default:                                                                                   \
            old = (T)compare;                                                                      \
            __atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);        \
        }                                                                                          \
        if (result != NULL)                                                                        \
            memcpy(result, &old, sizeof(T));                                                       \
    } while (0)

static ferry_status_t self_atomic(fy_tl_ep_t *ep, ferry_atomic_op_t op, size_t size,
                                  uint64_t operand, uint64_t compare, void *result,
                                  uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp)
{
    (void)ep, (void)comp;
    if ((size != 4 && size != 8) || remote_addr % size != 0)
        return FERRY_ERR_INVALID_PARAM;
    ferry_status_t st = rkey_check(rkey, remote_addr, size, FERRY_MEM_REMOTE_ATOMIC);
    if (st != FERRY_OK)
        return st;
    if (size == 8)
        SELF_AMO(uint64_t);
    else
        SELF_AMO(uint32_t);
    return FERRY_OK;
}

static const fy_tl_ops_t self_ops = {
    .md_open = self_md_open,
    .md_close = self_md_close,
    .query_devices = self_query_devices,
    .mem_reg = self_mem_reg,
    .mem_dereg = self_mem_dereg,
    .rkey_pack = self_rkey_pack,
    .rkey_unpack = self_rkey_unpack,
    .iface_open = self_iface_open,
    .iface_close = self_iface_close,
    .iface_query = self_iface_query,
    .iface_get_address = self_iface_get_address,
    .iface_is_reachable = self_iface_is_reachable,
    .iface_unreachable_why = self_iface_unreachable_why,
    .iface_progress = self_iface_progress,
    .iface_event_fd = self_iface_event_fd,
    .iface_event_arm = self_iface_event_arm,
    .iface_print = self_iface_print,
    .ep_create = self_ep_create,
    .ep_destroy = self_ep_destroy,
    .ep_flush = self_ep_flush,
    .am_short = fy_self_am_short,
    .am_bcopy = fy_self_am_bcopy,
    .am_zcopy = fy_self_am_zcopy,
    .put_short = self_put_short,
    .put_zcopy = self_put_zcopy,
    .get_zcopy = self_get_zcopy,
    .get_short = self_get_short,
    .atomic = self_atomic,
};

const fy_tl_component_t fy_tl_self_component = {
    .name = "self",
    .description = "workers of one process",
    .ops = &self_ops,
    .config = NULL,
    .memh_size = sizeof(self_memh_t),
    .rkey_packed_size = sizeof(self_rkey_t),
    .rkey_size = sizeof(self_rkey_t),
};
