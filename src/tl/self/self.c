/*
 * self.c - the self transport: workers of one process talking to each other (and a worker
 * to itself).
 *
 * A message is copied into the target interface's queue and delivered from the target
 * worker's progress, never from the sender's call: a handler always runs on the thread that
 * drives its worker.  The queue is guarded by a mutex because the two workers may be driven by
 * two threads; this is loopback, where simplicity beats the last nanosecond.  Interfaces are
 * found by id in a process-wide table, so a message to an interface that has closed fails with
 * FERRY_ERR_NOT_CONNECTED instead of touching freed memory.  RMA and atomics are native: the
 * target memory is in this address space, checked against the key's bounds and rights.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "tl/tl.h"
#include "util/list.h"
#include "util/log.h"
#include "util/region.h"
#include "util/status.h"

#define SELF_MAX_SHORT 8192
#define SELF_MAX_BCOPY (1u << 20)

typedef struct self_msg {
    fy_qelem_t q;
    uint8_t am_id;
    size_t len;
    uint8_t data[];
} self_msg_t;

typedef struct self_iface {
    fy_tl_iface_t super;
    uint64_t id;
    pthread_mutex_t lock;
    fy_queue_t queue;
    int armed;
    int efd;
    fy_list_t link; /* in the process-wide table */
} self_iface_t;

typedef struct self_ep {
    fy_tl_ep_t super;
    uint64_t target_id;
} self_ep_t;

typedef struct self_memh {
    uintptr_t base;
    size_t length;
    unsigned access;
} self_memh_t;

typedef struct self_rkey {
    uint64_t token;
    uint64_t base;
    uint64_t length;
    uint32_t access;
    uint32_t pad;
} self_rkey_t;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static fy_list_t table = {&table, &table};
static uint64_t process_token;
static pthread_once_t token_once = PTHREAD_ONCE_INIT;

static void token_init(void) { process_token = fy_random64() ^ (uint64_t)getpid(); }

static fy_tl_md_t self_md_singleton;

static ferry_status_t self_md_open(const fy_tl_component_t *tl, fy_tl_md_t **md_p)
{
    pthread_once(&token_once, token_init);
    self_md_singleton.component = tl;
    *md_p = &self_md_singleton;
    return FERRY_OK;
}

static void self_md_close(fy_tl_md_t *md) { (void)md; }

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
    m->base = (uintptr_t)addr;
    m->length = len;
    m->access = access;
    return FERRY_OK;
}

static void self_mem_dereg(fy_tl_md_t *md, void *memh) { (void)md, (void)memh; }

static ferry_status_t self_rkey_pack(fy_tl_md_t *md, const void *memh, void *buf)
{
    (void)md;
    const self_memh_t *m = memh;
    self_rkey_t rk = {process_token, m->base, m->length, m->access, 0};
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

static ferry_status_t self_iface_open(fy_tl_md_t *md, const fy_tl_iface_params_t *params,
                                      fy_tl_iface_t **iface_p)
{
    self_iface_t *si = calloc(1, sizeof(*si));
    if (si == NULL)
        return FERRY_ERR_NO_MEMORY;
    fy_tl_iface_base_init(&si->super, md->component, md, params);
    si->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (si->efd < 0) {
        free(si);
        return fy_status_from_errno(errno);
    }
    pthread_mutex_init(&si->lock, NULL);
    fy_queue_init(&si->queue);
    si->id = fy_random64();
    pthread_mutex_lock(&table_lock);
    fy_list_add_tail(&table, &si->link);
    pthread_mutex_unlock(&table_lock);
    *iface_p = &si->super;
    return FERRY_OK;
}

static void self_iface_close(fy_tl_iface_t *iface)
{
    self_iface_t *si = (self_iface_t *)iface;
    pthread_mutex_lock(&table_lock);
    fy_list_del(&si->link);
    pthread_mutex_unlock(&table_lock);
    fy_qelem_t *e;
    while ((e = fy_queue_pop(&si->queue)) != NULL)
        free(fy_container_of(e, self_msg_t, q));
    pthread_mutex_destroy(&si->lock);
    close(si->efd);
    free(si);
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
    attr->max_zcopy_hdr = 64;
    attr->max_put_short = SELF_MAX_SHORT;
    attr->max_rma = SIZE_MAX / 2;
    attr->max_iov = 32;
    attr->device_addr_len = sizeof(uint64_t);
    attr->iface_addr_len = sizeof(uint64_t);
    attr->priority = 10;
}

static ferry_status_t self_iface_get_address(fy_tl_iface_t *iface, void *dev_addr,
                                             void *iface_addr)
{
    memcpy(dev_addr, &process_token, sizeof(uint64_t));
    memcpy(iface_addr, &((self_iface_t *)iface)->id, sizeof(uint64_t));
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

static unsigned self_iface_progress(fy_tl_iface_t *iface)
{
    self_iface_t *si = (self_iface_t *)iface;
    if (__atomic_load_n(&si->queue.head, __ATOMIC_RELAXED) == NULL) /* a miss: next poll */
        return 0;
    pthread_mutex_lock(&si->lock);
    fy_queue_t q = si->queue;
    fy_queue_init(&si->queue);
    pthread_mutex_unlock(&si->lock);
    unsigned n = 0;
    fy_qelem_t *e;
    while ((e = fy_queue_pop(&q)) != NULL) {
        self_msg_t *m = fy_container_of(e, self_msg_t, q);
        iface->params.am_cb(iface->params.am_arg, m->am_id, m->data, m->len);
        free(m);
        n++;
    }
    return n;
}

static int self_iface_event_fd(fy_tl_iface_t *iface) { return ((self_iface_t *)iface)->efd; }

static ferry_status_t self_iface_event_arm(fy_tl_iface_t *iface)
{
    self_iface_t *si = (self_iface_t *)iface;
    uint64_t v;
    while (read(si->efd, &v, sizeof(v)) == sizeof(v)) {
    }
    pthread_mutex_lock(&si->lock);
    ferry_status_t st = fy_queue_is_empty(&si->queue) ? FERRY_OK : FERRY_ERR_BUSY;
    si->armed = st == FERRY_OK;
    pthread_mutex_unlock(&si->lock);
    return st;
}

static ferry_status_t self_ep_create(fy_tl_iface_t *iface, const void *dev_addr,
                                     const void *iface_addr, fy_tl_ep_t **ep_p)
{
    if (!self_iface_is_reachable(iface, dev_addr, iface_addr))
        return FERRY_ERR_UNREACHABLE;
    uint64_t id;
    int found = 0;
    memcpy(&id, iface_addr, sizeof(id));
    pthread_mutex_lock(&table_lock);
    fy_list_t *pos;
    fy_list_for_each(pos, &table) found |= fy_container_of(pos, self_iface_t, link)->id == id;
    pthread_mutex_unlock(&table_lock);
    if (!found)
        return FERRY_ERR_UNREACHABLE; /* no such interface (any more) in this process */
    self_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return FERRY_ERR_NO_MEMORY;
    ep->super.iface = iface;
    memcpy(&ep->target_id, iface_addr, sizeof(uint64_t));
    *ep_p = &ep->super;
    return FERRY_OK;
}

static void self_ep_destroy(fy_tl_ep_t *ep) { free(ep); }

static ferry_status_t self_ep_flush(fy_tl_ep_t *ep, fy_tl_comp_t *comp)
{
    (void)ep, (void)comp;
    return FERRY_OK; /* every operation completes inside its call */
}

/* Deliver into the target's queue; the table lock keeps the target alive meanwhile. */
static ferry_status_t self_deliver(self_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                                   const struct iovec *iov, size_t iovcnt)
{
    size_t len = hdr_len + fy_iov_total(iov, iovcnt);
    self_msg_t *m = malloc(sizeof(*m) + len);
    if (m == NULL)
        return FERRY_ERR_NO_MEMORY;
    m->am_id = id;
    m->len = len;
    if (hdr_len != 0)
        memcpy(m->data, hdr, hdr_len);
    fy_iov_gather(m->data + hdr_len, iov, iovcnt);
    ferry_status_t st = FERRY_ERR_NOT_CONNECTED;
    pthread_mutex_lock(&table_lock);
    fy_list_t *pos;
    fy_list_for_each(pos, &table)
    {
        self_iface_t *t = fy_container_of(pos, self_iface_t, link);
        if (t->id != ep->target_id)
            continue;
        pthread_mutex_lock(&t->lock);
        fy_queue_push(&t->queue, &m->q);
        if (t->armed) {
            t->armed = 0;
            uint64_t one = 1;
            ssize_t r = write(t->efd, &one, sizeof(one));
            (void)r;
        }
        pthread_mutex_unlock(&t->lock);
        st = FERRY_OK;
        break;
    }
    pthread_mutex_unlock(&table_lock);
    if (st != FERRY_OK)
        free(m);
    return st;
}

static ferry_status_t self_am_short(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov,
                                    size_t iovcnt)
{
    return self_deliver((self_ep_t *)ep, id, NULL, 0, iov, iovcnt);
}

static ferry_status_t self_am_zcopy(fy_tl_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                                    const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp)
{
    (void)comp;
    return self_deliver((self_ep_t *)ep, id, hdr, hdr_len, iov, iovcnt);
}

static ferry_status_t rkey_check(const void *rkey, uint64_t addr, size_t len, unsigned access)
{
    const self_rkey_t *rk = rkey;
    if (addr < rk->base || len > rk->length || addr - rk->base > rk->length - len ||
        !(rk->access & access))
        return FERRY_ERR_ACCESS_DENIED;
    return FERRY_OK;
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

#define SELF_AMO(T)                                                                            \
    do {                                                                                       \
        T *p = (T *)(uintptr_t)remote_addr, v = (T)operand, old;                               \
        switch (op) {                                                                          \
        case FERRY_ATOMIC_ADD: old = __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); break;        \
        case FERRY_ATOMIC_AND: old = __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); break;        \
        case FERRY_ATOMIC_OR: old = __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); break;          \
        case FERRY_ATOMIC_XOR: old = __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); break;        \
        case FERRY_ATOMIC_SWAP: old = __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); break;      \
        default:                                                                               \
            old = (T)compare;                                                                  \
            __atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
        }                                                                                      \
        if (result != NULL)                                                                    \
            memcpy(result, &old, sizeof(T));                                                   \
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
    .iface_progress = self_iface_progress,
    .iface_event_fd = self_iface_event_fd,
    .iface_event_arm = self_iface_event_arm,
    .ep_create = self_ep_create,
    .ep_destroy = self_ep_destroy,
    .ep_flush = self_ep_flush,
    .am_short = self_am_short,
    .am_bcopy = self_am_short,
    .am_zcopy = self_am_zcopy,
    .put_short = self_put_short,
    .put_zcopy = self_put_zcopy,
    .get_zcopy = self_get_zcopy,
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
