/*
 * shm_iface.c - a shared-memory interface: its receive ring, progress (delivery of every cell
 * type), the peers it talks to, their liveness, and sleeping on an event fd.
 *
 * Progress is built around one rule: an idle poll is one load of one state word.  Cells are
 * handled in ticket order (so every ep's AMs arrive in the order sent) and freed in batches
 * after the poll that found nothing, so in a ping-pong the write that frees a cell is not on
 * the path of the reply.  Everything slow — pushing a fallback transfer, answers that found a
 * full ring, failed peers, liveness checks — sits behind one test or a poll counter.
 *
 * Peers: every remote iface we send to or answer gets one mapping of its segment and one
 * pidfd, kept until this iface closes.  The pidfds sit in an epoll set with the wake-up
 * socket; that epoll fd is the iface's event fd, so a worker asleep waiting on a peer that
 * dies wakes up and fails its eps instead of hanging.  Progress looks at the set (without
 * blocking) every FERRY_SHM_LIVENESS_INTERVAL.
 *
 * Waking: a sleeping consumer marks the head cell (see shm.h); a producer that finds the mark
 * sends one datagram to the consumer's socket in the abstract namespace, named after the
 * iface's random id.  A producer that wants to sleep while a peer's ring is full leaves its
 * id in one of the ring's waiter slots; the consumer wakes the waiters when it frees cells.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tl/shm/shm.h"
#include "util/clock.h"
#include "util/log.h"

static void sock_name(uint64_t id, struct sockaddr_un *sun, socklen_t *len)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "ferry-shm-%016llx",
                     (unsigned long long)id);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* Is the process gone (exited, even if not yet reaped)? */
static int pid_is_dead(pid_t pid)
{
    if (pid == getpid())
        return 0;
    int fd = pidfd_open_(pid);
    if (fd < 0)
        return errno == ESRCH || (kill(pid, 0) != 0 && errno == ESRCH);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int dead = poll(&p, 1, 0) == 1;
    close(fd);
    return dead;
}

/* ---- open / close ---------------------------------------------------------------------- */

static ferry_status_t open_socket(shm_iface_t *iface)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        struct sockaddr_un sun;
        socklen_t len;
        sock_name(iface->id, &sun, &len);
        if (bind(iface->sock, (struct sockaddr *)&sun, len) == 0)
            return FERRY_OK;
        if (errno != EADDRINUSE) {
            fy_error("binding the shm wake-up socket failed: %m");
            return FERRY_ERR_IO;
        }
        iface->id = fy_random64() | 1; /* a clash of random ids: draw again */
    }
    return FERRY_ERR_IO;
}

ferry_status_t fy_shm_iface_open(fy_tl_md_t *tl_md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p)
{
    shm_md_t *md = (shm_md_t *)tl_md;
    const shm_opts_t *o = &md->opts;
    shm_iface_t *iface;
    if (posix_memalign((void **)&iface, 128, sizeof(*iface)) != 0)
        return FERRY_ERR_NO_MEMORY;
    memset(iface, 0, sizeof(*iface));
    fy_tl_iface_base_init(&iface->super, &fy_tl_shm_component, tl_md, params);
    iface->md = md;
    iface->sock = iface->txsock = iface->epfd = -1;
    fy_list_init(&iface->push_eps);
    fy_list_init(&iface->peer_list);
    fy_list_init(&iface->full_peers);
    fy_list_init(&iface->eps);
    iface->id = fy_random64() | 1;
    iface->owner = (uint64_t)getpid() << SHM_OWNER_SHIFT;
    iface->cma_ok = o->cma;

    uint32_t n = (uint32_t)o->ring_size;
    size_t cells_off = FY_ALIGN_UP(sizeof(shm_seg_hdr_t), 128);
    size_t bufs_off = FY_ALIGN_UP(cells_off + (size_t)n * o->cell_size, 4096);
    size_t seg_size = bufs_off + (size_t)n * o->bcopy_size;
    ferry_status_t st = fy_shmem_alloc(seg_size, "ferry-shm-ring", &iface->seg);
    if (st != FERRY_OK)
        goto err_free;
    fy_shmem_ref_t ref;
    size_t off;
    fy_shmem_find(iface->seg, seg_size, &ref, &off);

    iface->hdr = iface->seg;
    iface->cells = (char *)iface->seg + cells_off;
    iface->bufs = (char *)iface->seg + bufs_off;
    iface->mask = n - 1;
    iface->cell_shift = (unsigned)__builtin_ctzl(o->cell_size);
    iface->bcopy_size = (uint32_t)o->bcopy_size;
    for (uint32_t t = 0; t < n; t++)
        shm_cell_at(iface->cells, iface->cell_shift, iface->mask, t)->state =
            SHM_STATE(SHM_PHASE_FREE, t);

    iface->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    iface->txsock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    iface->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (iface->sock < 0 || iface->txsock < 0 || iface->epfd < 0) {
        fy_error("shm iface: socket or epoll failed: %m");
        st = FERRY_ERR_IO;
        goto err_fds;
    }
    if ((st = open_socket(iface)) != FERRY_OK)
        goto err_fds;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(iface->epfd, EPOLL_CTL_ADD, iface->sock, &ev) != 0) {
        st = FERRY_ERR_IO;
        goto err_fds;
    }
    if ((st = fy_hash_init(&iface->peers, 16)) != FERRY_OK)
        goto err_fds;
    if ((st = fy_hash_init(&iface->ops, 64)) != FERRY_OK)
        goto err_peers;
    if ((st = fy_hash_init(&iface->frags, 16)) != FERRY_OK)
        goto err_ops;
    if ((st = fy_mpool_init(&iface->op_mp, "shm ops", sizeof(shm_op_t), 64, 32, 0)) != FERRY_OK)
        goto err_frags;

    shm_seg_hdr_t *h = iface->hdr;
    h->id = iface->id;
    h->base = (uint64_t)(uintptr_t)iface->seg;
    h->pid = (uint32_t)getpid();
    h->ring_size = n;
    h->cell_size = (uint32_t)o->cell_size;
    h->bcopy_size = (uint32_t)o->bcopy_size;
    h->cells_off = cells_off;
    h->bufs_off = bufs_off;
    h->seg_size = ref.size;
    __atomic_store_n(&h->magic, SHM_SEG_MAGIC, __ATOMIC_RELEASE);

    iface->addr = (shm_iface_addr_t){.id = iface->id,
                                     .ino = ref.ino,
                                     .size = ref.size,
                                     .pid = ref.pid,
                                     .fd = ref.fd,
                                     .version = SHM_ADDR_VERSION,
                                     .flags = o->cma ? 0 : SHM_ADDR_F_NO_CMA,
                                     .bcopy_size = (uint32_t)o->bcopy_size};
    iface->next_check_ns = fy_time_ns() + o->liveness_ns;
    *iface_p = &iface->super;
    return FERRY_OK;

err_frags:
    fy_hash_destroy(&iface->frags);
err_ops:
    fy_hash_destroy(&iface->ops);
err_peers:
    fy_hash_destroy(&iface->peers);
err_fds:
    if (iface->epfd >= 0)
        close(iface->epfd);
    if (iface->sock >= 0)
        close(iface->sock);
    if (iface->txsock >= 0)
        close(iface->txsock);
    fy_shmem_free(iface->seg);
err_free:
    free(iface);
    return st;
}

static void free_frag(uint64_t key, void *value, void *arg)
{
    shm_frag_rx_t *f = value;
    free(f->buf);
    free(f);
}

void fy_shm_iface_close(fy_tl_iface_t *tl_iface)
{
    if (tl_iface == NULL)
        return;
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    __atomic_store_n(&iface->hdr->closed, 1, __ATOMIC_RELEASE);
    fy_list_t *pos;
    while ((pos = iface->eps.next) != &iface->eps) {
        fy_warn("shm iface closed with an endpoint still open: destroying it");
        fy_shm_ep_destroy(&fy_container_of(pos, shm_ep_t, link)->super);
    }
    while ((pos = fy_list_pop_head(&iface->peer_list)) != NULL) {
        shm_peer_t *peer = fy_container_of(pos, shm_peer_t, link);
        fy_list_t *r;
        while ((r = fy_list_pop_head(&peer->replies)) != NULL)
            free(fy_container_of(r, shm_pending_ctl_t, link));
        if (peer->pidfd >= 0)
            close(peer->pidfd);
        fy_shmem_detach(peer->hdr);
        free(peer);
    }
    fy_hash_foreach(&iface->frags, free_frag, NULL);
    fy_hash_destroy(&iface->frags);
    fy_hash_destroy(&iface->peers);
    fy_hash_destroy(&iface->ops);
    fy_mpool_destroy(&iface->op_mp);
    free(iface->rxbuf);
    close(iface->epfd);
    close(iface->sock);
    close(iface->txsock);
    fy_shmem_free(iface->seg);
    free(iface);
}

/* ---- attributes and addresses ---------------------------------------------------------- */

void fy_shm_iface_query(fy_tl_iface_t *tl_iface, fy_tl_iface_attr_t *attr)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    const shm_opts_t *o = &iface->md->opts;
    memset(attr, 0, sizeof(*attr));
    attr->caps = FY_TL_CAP_AM_SHORT | FY_TL_CAP_AM_BCOPY | FY_TL_CAP_AM_ZCOPY |
                 FY_TL_CAP_AM_ORDERED | FY_TL_CAP_EVENT_FD | FY_TL_CAP_CONNECT_TO_IFACE |
                 FY_TL_CAP_AMO32 | FY_TL_CAP_AMO64;
    /* Put and get reach any registered memory only through cross-memory attach. */
    if (o->cma)
        attr->caps |= FY_TL_CAP_PUT | FY_TL_CAP_GET;
    /* Measured on the reference 2-core box with tests/shm/shm_pingpong (see docs/shm.md). */
    attr->latency_ns = 120;
    attr->bandwidth = o->cma ? 18e9 : 6e9;
    attr->overhead_ns = 15;
    attr->max_short = o->cell_size - SHM_CELL_HDR;
    attr->max_bcopy = o->bcopy_size;
    attr->max_zcopy = (size_t)1 << 40;
    attr->max_zcopy_hdr = SHM_MAX_ZCOPY_HDR;
    attr->max_put_short = o->bcopy_size;
    attr->max_rma = (size_t)1 << 40;
    attr->max_iov = SHM_MAX_IOV;
    attr->device_addr_len = sizeof(shm_dev_addr_t);
    attr->iface_addr_len = sizeof(shm_iface_addr_t);
    attr->priority = 30;
}

ferry_status_t fy_shm_iface_get_address(fy_tl_iface_t *tl_iface, void *dev_addr,
                                        void *iface_addr)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    if (dev_addr != NULL)
        memcpy(dev_addr, &iface->md->dev_addr, sizeof(shm_dev_addr_t));
    if (iface_addr != NULL)
        memcpy(iface_addr, &iface->addr, sizeof(shm_iface_addr_t));
    return FERRY_OK;
}

int fy_shm_iface_is_reachable(fy_tl_iface_t *tl_iface, const void *dev_addr,
                              const void *iface_addr)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    if (memcmp(dev_addr, &iface->md->dev_addr, sizeof(shm_dev_addr_t)) != 0)
        return 0; /* another host, or other namespaces */
    if (iface_addr == NULL)
        return 1;
    shm_iface_addr_t a;
    memcpy(&a, iface_addr, sizeof(a));
    /* The peer's buffers must hold what our attributes promise. */
    return a.version == SHM_ADDR_VERSION && a.pid > 0 && a.bcopy_size >= iface->bcopy_size;
}

/* ---- peers ------------------------------------------------------------------------------ */

static ferry_status_t peer_map(shm_peer_t *peer)
{
    const shm_iface_addr_t *a = &peer->addr;
    fy_shmem_ref_t ref = {.pid = a->pid, .fd = a->fd, .ino = a->ino, .size = a->size};
    void *seg;
    ferry_status_t st = fy_shmem_attach(&ref, &seg);
    if (st != FERRY_OK) {
        fy_debug("cannot map the ring of process %d: %s", (int)a->pid, ferry_status_string(st));
        return st == FERRY_ERR_NO_MEMORY ? st : FERRY_ERR_UNREACHABLE;
    }
    shm_seg_hdr_t *h = seg;
    uint32_t n = h->ring_size, cs = h->cell_size;
    uint64_t cells_end = h->cells_off + (uint64_t)n * cs;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_SEG_MAGIC || h->id != a->id ||
        h->pid != (uint32_t)a->pid || n < 8 || (n & (n - 1)) != 0 || cs < 64 ||
        (cs & (cs - 1)) != 0 || h->bcopy_size < a->bcopy_size || h->cells_off % 128 != 0 ||
        h->cells_off < sizeof(shm_seg_hdr_t) || cells_end > h->bufs_off ||
        h->bufs_off + (uint64_t)n * h->bcopy_size > a->size) {
        fy_warn("process %d's shm segment does not look like a ferry ring: ignored", (int)a->pid);
        fy_shmem_detach(seg);
        return FERRY_ERR_INVALID_ADDR;
    }
    peer->hdr = h;
    peer->cells = (char *)seg + h->cells_off;
    peer->bufs = (char *)seg + h->bufs_off;
    peer->mask = n - 1;
    peer->cell_shift = (unsigned)__builtin_ctz(cs);
    peer->bcopy_size = h->bcopy_size;
    return FERRY_OK;
}

ferry_status_t fy_shm_peer_get(shm_iface_t *iface, const shm_iface_addr_t *addr,
                               shm_peer_t **peer_p)
{
    shm_peer_t *peer = fy_hash_get(&iface->peers, addr->id);
    if (peer != NULL) {
        if (peer->addr.pid != addr->pid || peer->addr.ino != addr->ino)
            return FERRY_ERR_INVALID_ADDR;
        *peer_p = peer;
        return FERRY_OK;
    }
    if (addr->version != SHM_ADDR_VERSION || addr->pid <= 0)
        return FERRY_ERR_INVALID_ADDR;
    peer = calloc(1, sizeof(*peer));
    if (peer == NULL)
        return FERRY_ERR_NO_MEMORY;
    peer->addr = *addr;
    peer->id = addr->id;
    peer->pidfd = -1;
    fy_list_init(&peer->replies);
    fy_list_init(&peer->full_link);
    ferry_status_t st = peer_map(peer);
    if (st != FERRY_OK)
        goto err_free;
    if (addr->pid != (int32_t)getpid()) {
        peer->pidfd = pidfd_open_(addr->pid);
        if (peer->pidfd < 0 && errno == ESRCH) {
            st = FERRY_ERR_UNREACHABLE;
            goto err_unmap;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = peer};
        if (peer->pidfd >= 0 && epoll_ctl(iface->epfd, EPOLL_CTL_ADD, peer->pidfd, &ev) != 0) {
            st = FERRY_ERR_IO;
            goto err_unmap;
        }
    }
    if ((st = fy_hash_put(&iface->peers, peer->id, peer)) != FERRY_OK)
        goto err_unmap;
    sock_name(peer->id, &peer->sun, &peer->sunlen);
    fy_list_add_tail(&iface->peer_list, &peer->link);
    *peer_p = peer;
    return FERRY_OK;

err_unmap:
    if (peer->pidfd >= 0)
        close(peer->pidfd);
    fy_shmem_detach(peer->hdr);
err_free:
    free(peer);
    return st;
}

static void send_wake(shm_iface_t *iface, const struct sockaddr_un *sun, socklen_t len)
{
    char b = 0;
    iface->stats.wakeups_sent++;
    /* EAGAIN: its queue is full, so it is awake anyway; ECONNREFUSED: it is gone. */
    (void)sendto(iface->txsock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)sun,
                 len);
}

void fy_shm_peer_wake(shm_iface_t *iface, shm_peer_t *peer)
{
    send_wake(iface, &peer->sun, peer->sunlen);
}

void fy_shm_peer_full(shm_iface_t *iface, shm_peer_t *peer)
{
    iface->stats.full++;
    if (!peer->full) {
        peer->full = 1;
        fy_list_add_tail(&iface->full_peers, &peer->full_link);
    }
    if (FY_UNLIKELY(__atomic_load_n(&peer->hdr->closed, __ATOMIC_ACQUIRE)) &&
        peer->status == FERRY_OK)
        fy_shm_peer_fail(iface, peer, FERRY_ERR_CONNECTION_RESET);
}

void fy_shm_peer_fail(shm_iface_t *iface, shm_peer_t *peer, ferry_status_t status)
{
    if (peer->status != FERRY_OK)
        return;
    fy_debug("shm peer process %d is gone: %s", (int)peer->addr.pid, ferry_status_string(status));
    peer->status = status;
    if (peer->pidfd >= 0)
        epoll_ctl(iface->epfd, EPOLL_CTL_DEL, peer->pidfd, NULL);
    fy_list_t *r;
    while ((r = fy_list_pop_head(&peer->replies)) != NULL) {
        free(fy_container_of(r, shm_pending_ctl_t, link));
        iface->nreplies--;
    }
    iface->pending_fail = 1; /* progress fails the eps (callbacks run from progress) */
}

/* Is there room at the tail of a peer's ring now? */
static int peer_has_room(const shm_peer_t *peer)
{
    uint32_t t = __atomic_load_n(&peer->hdr->tail, __ATOMIC_SEQ_CST);
    const shm_cell_t *c = shm_cell_at(peer->cells, peer->cell_shift, peer->mask, t);
    uint64_t s = __atomic_load_n(&c->state, __ATOMIC_SEQ_CST);
    return (int32_t)((uint32_t)s - t) >= 0;
}

/* Leave our id in a peer's waiter slots; 0 if every slot is taken. */
static int peer_add_waiter(shm_iface_t *iface, shm_peer_t *peer)
{
    shm_seg_hdr_t *h = peer->hdr;
    for (unsigned i = 0; i < SHM_MAX_WAITERS; i++)
        if (__atomic_load_n(&h->waiters[i], __ATOMIC_RELAXED) == iface->id)
            return 1;
    for (unsigned i = 0; i < SHM_MAX_WAITERS; i++) {
        uint64_t expect = 0;
        if (__atomic_compare_exchange_n(&h->waiters[i], &expect, iface->id, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED)) {
            __atomic_fetch_add(&h->nwaiters, 1, __ATOMIC_SEQ_CST);
            return 1;
        }
    }
    return 0;
}

/* ---- answers (ZDONE, AMO_REP) ------------------------------------------------------------ */

static int try_ctl(shm_iface_t *iface, shm_peer_t *peer, const shm_pending_ctl_t *m)
{
    uint32_t t;
    int wake = 0;
    shm_cell_t *c = shm_ring_claim(peer->cells, &peer->hdr->tail, peer->mask, peer->cell_shift,
                                   iface->owner, &t, &wake);
    if (c == NULL) {
        fy_shm_peer_full(iface, peer);
        return 0;
    }
    shm_cell_hdr(c, m->type, 0, m->flags, m->len);
    memcpy(c->data, m->data, SHM_CTL_MAX);
    shm_ring_publish(c, iface->owner, t);
    if (wake)
        fy_shm_peer_wake(iface, peer);
    return 1;
}

void fy_shm_send_ctl(shm_iface_t *iface, shm_peer_t *peer, uint8_t type, uint16_t flags,
                     const void *data, uint32_t len, uint32_t len_field)
{
    shm_pending_ctl_t m = {.type = type, .flags = flags, .len = len_field};
    memcpy(m.data, data, len);
    if (peer->status != FERRY_OK)
        return;
    if (fy_list_is_empty(&peer->replies) && try_ctl(iface, peer, &m))
        return;
    shm_pending_ctl_t *p = malloc(sizeof(*p));
    if (p == NULL) {
        fy_error("out of memory queueing a message to process %d: dropped", (int)peer->addr.pid);
        return;
    }
    *p = m;
    fy_list_add_tail(&peer->replies, &p->link);
    iface->nreplies++;
}

void fy_shm_reply(shm_iface_t *iface, const shm_iface_addr_t *to, uint8_t type, uint64_t cookie,
                  ferry_status_t status, uint64_t value)
{
    shm_peer_t *peer;
    shm_reply_t r = {.cookie = cookie, .status = status, .value = value};
    if (fy_shm_peer_get(iface, to, &peer) != FERRY_OK) {
        fy_debug("cannot answer process %d: its ring cannot be mapped", (int)to->pid);
        return;
    }
    fy_shm_send_ctl(iface, peer, type, 0, &r, sizeof(r), sizeof(r));
}

static unsigned flush_replies(shm_iface_t *iface)
{
    unsigned n = 0;
    fy_list_t *pos;
    fy_list_for_each(pos, &iface->peer_list)
    {
        shm_peer_t *peer = fy_container_of(pos, shm_peer_t, link);
        fy_list_t *r;
        while ((r = peer->replies.next) != &peer->replies) {
            shm_pending_ctl_t *p = fy_container_of(r, shm_pending_ctl_t, link);
            if (!try_ctl(iface, peer, p))
                break;
            fy_list_del(r);
            free(p);
            iface->nreplies--;
            n++;
        }
    }
    return n;
}

/* ---- receiving ---------------------------------------------------------------------------- */

static char *rx_buffer(shm_iface_t *iface, size_t len)
{
    if (iface->rxbuf != NULL && len <= iface->rxbuf_size)
        return iface->rxbuf;
    if (len > iface->md->opts.rx_keep)
        return malloc(len ? len : 1);
    char *b = malloc(len ? len : 1);
    if (b == NULL)
        return NULL;
    free(iface->rxbuf);
    iface->rxbuf = b;
    iface->rxbuf_size = len;
    return b;
}

static void rx_buffer_done(shm_iface_t *iface, char *b)
{
    if (b != iface->rxbuf)
        free(b);
}

static void rx_pull(shm_iface_t *iface, uint8_t am_id, const char *buf, uint32_t len)
{
    shm_pull_desc_t d;
    if (len < sizeof(d)) {
        iface->stats.drops_malformed++;
        return;
    }
    memcpy(&d, buf, sizeof(d));
    uint64_t sum = 0;
    for (uint32_t i = 0; i < d.iovcnt && i < SHM_MAX_IOV; i++)
        sum += d.iov[i].len;
    if (d.iovcnt > SHM_MAX_IOV || d.hdr_len > SHM_MAX_ZCOPY_HDR ||
        sizeof(d) + d.hdr_len > len || sum != d.data_len || d.data_len > SIZE_MAX / 2) {
        iface->stats.drops_malformed++;
        return;
    }
    iface->stats.rx_pull++;
    if (!iface->cma_ok && d.reply.pid != iface->addr.pid) {
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, SHM_STATUS_NEED_PUSH, 0);
        return;
    }
    size_t total = d.hdr_len + (size_t)d.data_len;
    char *dst = rx_buffer(iface, total);
    if (dst == NULL) {
        fy_error("no memory for a %zu-byte message from process %d", total, (int)d.reply.pid);
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, FERRY_ERR_NO_MEMORY, 0);
        return;
    }
    memcpy(dst, buf + sizeof(d), d.hdr_len);
    int err = 0;
    if (d.reply.pid == iface->addr.pid) {
        char *p = dst + d.hdr_len;
        for (uint32_t i = 0; i < d.iovcnt; i++) {
            memcpy(p, (const void *)(uintptr_t)d.iov[i].addr, d.iov[i].len);
            p += d.iov[i].len;
        }
    } else {
        struct iovec l = {dst + d.hdr_len, (size_t)d.data_len}, r[SHM_MAX_IOV];
        for (uint32_t i = 0; i < d.iovcnt; i++)
            r[i] = (struct iovec){(void *)(uintptr_t)d.iov[i].addr, d.iov[i].len};
        err = fy_shm_cma_copy(d.reply.pid, &l, 1, r, d.iovcnt, 0);
    }
    if (err == 0) {
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, FERRY_OK, 0);
        iface->stats.rx_msgs++;
        iface->stats.rx_bytes += total;
        iface->super.params.am_cb(iface->super.params.am_arg, am_id, dst, total);
    } else if (err == EPERM || err == ENOSYS || err == EACCES) {
        fy_info("cross-memory attach to process %d refused (%s): asking it to push",
                (int)d.reply.pid, strerror(err));
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, SHM_STATUS_NEED_PUSH, 0);
    } else if (err == ESRCH) {
        iface->stats.drops_dead++; /* the sender is gone */
    } else {
        fy_warn("pulling %zu bytes from process %d failed: %s", (size_t)d.data_len,
                (int)d.reply.pid, strerror(err));
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, FERRY_ERR_IO, 0);
    }
    rx_buffer_done(iface, dst);
}

static void rx_frag(shm_iface_t *iface, const shm_cell_t *c, uint8_t am_id, const char *chunk,
                    uint32_t len)
{
    shm_frag_hdr_t fh;
    memcpy(&fh, c->data, sizeof(fh));
    shm_frag_rx_t *f = fy_hash_get(&iface->frags, fh.token);
    iface->stats.rx_frag++;
    if (c->flags & SHM_FRAG_ABORT) { /* the sender's ep was destroyed mid-message */
        if (f != NULL) {
            fy_hash_del(&iface->frags, fh.token);
            free(f->buf);
            free(f);
        }
        return;
    }
    if (fh.offset == 0) {
        if (f != NULL) { /* a sender restarted a message: drop the old one */
            fy_hash_del(&iface->frags, fh.token);
            free(f->buf);
            free(f);
        }
        if (fh.total > SIZE_MAX / 2 || (f = calloc(1, sizeof(*f))) == NULL)
            goto drop;
        f->buf = malloc(fh.total ? (size_t)fh.total : 1);
        if (f->buf == NULL || fy_hash_put(&iface->frags, fh.token, f) != FERRY_OK) {
            fy_error("no memory for a %llu-byte pushed message: dropped",
                     (unsigned long long)fh.total);
            free(f->buf);
            free(f);
            goto drop;
        }
        f->token = fh.token;
        f->total = (size_t)fh.total;
        f->am_id = am_id;
    } else if (f == NULL || fh.offset != f->got || fh.total != f->total) {
        goto drop;
    }
    if (len > f->total - f->got)
        goto drop;
    memcpy(f->buf + f->got, chunk, len);
    f->got += len;
    if (f->got == f->total) {
        fy_hash_del(&iface->frags, fh.token);
        iface->stats.rx_msgs++;
        iface->stats.rx_bytes += f->total;
        iface->super.params.am_cb(iface->super.params.am_arg, f->am_id, f->buf, f->total);
        free(f->buf);
        free(f);
    }
    return;
drop:
    iface->stats.drops_malformed++;
}

static void dispatch(shm_iface_t *iface, shm_cell_t *c, uint32_t ticket)
{
    uint32_t len = c->len;
    uint8_t am_id = c->am_id;
    const char *buf = iface->bufs + (size_t)(ticket & iface->mask) * iface->bcopy_size;
    size_t inline_max = iface->md->opts.cell_size - SHM_CELL_HDR;
    switch (c->type) {
    case SHM_CELL_SHORT:
        if (len > inline_max || am_id > FY_TL_AM_ID_MAX)
            break;
        iface->stats.rx_msgs++;
        iface->stats.rx_bytes += len;
        iface->super.params.am_cb(iface->super.params.am_arg, am_id, c->data, len);
        return;
    case SHM_CELL_BCOPY:
        if (len > iface->bcopy_size || am_id > FY_TL_AM_ID_MAX)
            break;
        iface->stats.rx_msgs++;
        iface->stats.rx_bytes += len;
        iface->super.params.am_cb(iface->super.params.am_arg, am_id, buf, len);
        return;
    case SHM_CELL_PULL:
        if (len > iface->bcopy_size || am_id > FY_TL_AM_ID_MAX)
            break;
        rx_pull(iface, am_id, buf, len);
        return;
    case SHM_CELL_FRAG:
        if (len > iface->bcopy_size || am_id > FY_TL_AM_ID_MAX ||
            inline_max < sizeof(shm_frag_hdr_t))
            break;
        rx_frag(iface, c, am_id, buf, len);
        return;
    case SHM_CELL_ZDONE:
    case SHM_CELL_AMO_REP: {
        shm_reply_t r;
        if (len != sizeof(r))
            break;
        memcpy(&r, c->data, sizeof(r));
        if (c->type == SHM_CELL_ZDONE)
            fy_shm_zdone(iface, &r);
        else
            fy_shm_amo_reply(iface, &r);
        return;
    }
    case SHM_CELL_AMO_REQ: {
        shm_amo_req_t q;
        if (len != sizeof(q))
            break;
        memcpy(&q, buf, sizeof(q));
        iface->stats.rx_amo++;
        fy_shm_amo_serve(iface, &q);
        return;
    }
    default:
        break;
    }
    iface->stats.drops_malformed++;
}

/* Free the cells consumed so far, then wake senders that wait for room. */
static void ring_release(shm_iface_t *iface)
{
    uint32_t n = iface->mask + 1, head = iface->head;
    for (uint32_t t = iface->released; t != head; t++)
        __atomic_store_n(&shm_cell_at(iface->cells, iface->cell_shift, iface->mask, t)->state,
                         SHM_STATE(SHM_PHASE_FREE, t + n), __ATOMIC_RELEASE);
    iface->released = head;
    /* Pairs with the waiter's CAS + recheck in peer_add_waiter / arm. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    shm_seg_hdr_t *h = iface->hdr;
    if (FY_UNLIKELY(__atomic_load_n(&h->nwaiters, __ATOMIC_RELAXED) != 0)) {
        for (unsigned i = 0; i < SHM_MAX_WAITERS; i++) {
            uint64_t id = __atomic_exchange_n(&h->waiters[i], 0, __ATOMIC_SEQ_CST);
            if (id == 0)
                continue;
            __atomic_fetch_sub(&h->nwaiters, 1, __ATOMIC_SEQ_CST);
            struct sockaddr_un sun;
            socklen_t len;
            sock_name(id, &sun, &len);
            send_wake(iface, &sun, len);
        }
    }
}

/* The head cell is claimed by a producer that never publishes: if that process is dead,
 * skip the cell (it held no message yet) so the ring keeps moving. */
static void check_stuck(shm_iface_t *iface)
{
    uint32_t head = iface->head;
    shm_cell_t *c = shm_cell_at(iface->cells, iface->cell_shift, iface->mask, head);
    uint64_t s = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    if ((s & SHM_KEY_MASK) != SHM_STATE(SHM_PHASE_CLAIMED, head)) {
        iface->stuck_seen = 0;
        return;
    }
    if (!iface->stuck_seen || iface->stuck_ticket != head) {
        iface->stuck_seen = 1;
        iface->stuck_ticket = head;
        return;
    }
    pid_t owner = (pid_t)(s >> SHM_OWNER_SHIFT);
    if (!pid_is_dead(owner))
        return;
    ring_release(iface);
    if (!__atomic_compare_exchange_n(&c->state, &s,
                                     SHM_STATE(SHM_PHASE_FREE, head + iface->mask + 1), 0,
                                     __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        return;
    uint32_t t = head;
    __atomic_compare_exchange_n(&iface->hdr->tail, &t, head + 1, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    iface->head = iface->released = head + 1;
    iface->stuck_seen = 0;
    iface->stats.skipped_dead++;
    fy_warn("process %d died while writing into this ring: its message is lost", (int)owner);
}

/* Drop half-received pushed messages whose sender has died. */
typedef struct frag_scan {
    uint64_t dead[16];
    unsigned n;
} frag_scan_t;

static void frag_find_dead(uint64_t token, void *value, void *arg)
{
    frag_scan_t *s = arg;
    if (s->n < FY_ARRAY_SIZE(s->dead) && pid_is_dead((pid_t)(token >> 32)))
        s->dead[s->n++] = token;
}

static void drop_dead_frags(shm_iface_t *iface)
{
    frag_scan_t s = {.n = 0};
    fy_hash_foreach(&iface->frags, frag_find_dead, &s);
    for (unsigned i = 0; i < s.n; i++) {
        shm_frag_rx_t *f = fy_hash_del(&iface->frags, s.dead[i]);
        free(f->buf);
        free(f);
        iface->stats.drops_dead++;
    }
}

static void check_liveness(shm_iface_t *iface)
{
    struct epoll_event evs[16];
    int n = epoll_wait(iface->epfd, evs, 16, 0);
    for (int i = 0; i < n; i++)
        if (evs[i].data.ptr != NULL)
            fy_shm_peer_fail(iface, evs[i].data.ptr, FERRY_ERR_CONNECTION_RESET);
    fy_list_t *pos;
    fy_list_for_each(pos, &iface->peer_list)
    {
        shm_peer_t *peer = fy_container_of(pos, shm_peer_t, link);
        if (peer->status != FERRY_OK)
            continue;
        if (__atomic_load_n(&peer->hdr->closed, __ATOMIC_ACQUIRE) ||
            (peer->pidfd < 0 && pid_is_dead(peer->addr.pid)))
            fy_shm_peer_fail(iface, peer, FERRY_ERR_CONNECTION_RESET);
    }
    check_stuck(iface);
    if (FY_UNLIKELY(fy_hash_count(&iface->frags) != 0))
        drop_dead_frags(iface);
}

/* Fail the eps of failed peers: err_cb, then their operations. */
static void fail_eps(shm_iface_t *iface)
{
    iface->pending_fail = 0;
    fy_list_t *pos;
again:
    fy_list_for_each(pos, &iface->eps)
    {
        shm_ep_t *ep = fy_container_of(pos, shm_ep_t, link);
        if (ep->peer->status != FERRY_OK && !ep->notified) {
            fy_shm_ep_fail(ep, ep->peer->status); /* may destroy eps: walk again */
            goto again;
        }
    }
}

static unsigned slow_progress(shm_iface_t *iface)
{
    unsigned n = 0;
    if (iface->nreplies != 0)
        n += flush_replies(iface);
    if (!fy_list_is_empty(&iface->push_eps))
        n += fy_shm_push_progress(iface);
    if (iface->pending_fail) {
        fail_eps(iface);
        n++;
    }
    return n;
}

unsigned fy_shm_iface_progress(fy_tl_iface_t *tl_iface)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    if (FY_UNLIKELY(iface->in_progress))
        return 0; /* called from a callback: the outer call goes on */
    iface->in_progress = 1;
    unsigned n = 0;
    uint32_t head = iface->head;
    for (; n < SHM_RX_BATCH; n++) {
        shm_cell_t *c = shm_cell_at(iface->cells, iface->cell_shift, iface->mask, head);
        uint64_t s = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
        if ((s & SHM_KEY_MASK) != SHM_STATE(SHM_PHASE_READY, head))
            break;
        iface->head = ++head;
        dispatch(iface, c, head - 1);
    }
    if (head != iface->released && (n == 0 || head - iface->released >= SHM_RELEASE_BATCH))
        ring_release(iface);
    if (FY_UNLIKELY(iface->nreplies != 0 || !fy_list_is_empty(&iface->push_eps) ||
                    iface->pending_fail))
        n += slow_progress(iface);
    if (FY_UNLIKELY((++iface->polls & 255) == 0)) {
        uint64_t now = fy_time_ns();
        if (now >= iface->next_check_ns) {
            iface->next_check_ns = now + iface->md->opts.liveness_ns;
            check_liveness(iface);
            if (iface->pending_fail)
                n += slow_progress(iface);
        }
    }
    iface->in_progress = 0;
    return n;
}

/* ---- sleeping ------------------------------------------------------------------------------ */

int fy_shm_iface_event_fd(fy_tl_iface_t *tl_iface) { return ((shm_iface_t *)tl_iface)->epfd; }

ferry_status_t fy_shm_iface_event_arm(fy_tl_iface_t *tl_iface)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    char b[64];
    while (recv(iface->sock, b, sizeof(b), MSG_DONTWAIT) > 0) {
    }
    check_liveness(iface);
    if (iface->pending_fail)
        return FERRY_ERR_BUSY;
    if ((iface->nreplies != 0 || !fy_list_is_empty(&iface->push_eps)) &&
        slow_progress(iface) != 0)
        return FERRY_ERR_BUSY;
    /* Sends that found a ring full: ask its owner to wake us when it drains. */
    fy_list_t *pos;
    while ((pos = fy_list_pop_head(&iface->full_peers)) != NULL) {
        shm_peer_t *peer = fy_container_of(pos, shm_peer_t, full_link);
        peer->full = 0;
        if (peer->status != FERRY_OK)
            continue;
        if (!peer_add_waiter(iface, peer) || peer_has_room(peer))
            return FERRY_ERR_BUSY; /* (the list is rebuilt by the next full send) */
    }
    ring_release(iface);
    uint32_t head = iface->head;
    shm_cell_t *c = shm_cell_at(iface->cells, iface->cell_shift, iface->mask, head);
    uint64_t s = SHM_STATE(SHM_PHASE_FREE, head);
    if (__atomic_compare_exchange_n(&c->state, &s, s | SHM_SLEEP_BIT, 0, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST))
        return FERRY_OK;
    return s == (SHM_STATE(SHM_PHASE_FREE, head) | SHM_SLEEP_BIT) ? FERRY_OK : FERRY_ERR_BUSY;
}

/* ---- printing ------------------------------------------------------------------------------ */

void fy_shm_iface_print(fy_tl_iface_t *tl_iface, FILE *f)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    const shm_opts_t *o = &iface->md->opts;
    fprintf(f, "shm/%s id %016llx pid %d: ring %lu x %zu B cells + %zu B buffers, cma %s\n",
            iface->super.dev_name, (unsigned long long)iface->id, (int)getpid(), o->ring_size,
            o->cell_size, o->bcopy_size, iface->cma_ok ? "on" : "off");
    fprintf(f,
            "  rx %llu msgs %llu B (pulled %llu, chunks %llu, atomics %llu), dropped %llu "
            "malformed %llu from dead senders, %llu dead claims skipped\n",
            (unsigned long long)iface->stats.rx_msgs, (unsigned long long)iface->stats.rx_bytes,
            (unsigned long long)iface->stats.rx_pull, (unsigned long long)iface->stats.rx_frag,
            (unsigned long long)iface->stats.rx_amo,
            (unsigned long long)iface->stats.drops_malformed,
            (unsigned long long)iface->stats.drops_dead,
            (unsigned long long)iface->stats.skipped_dead);
    fprintf(f, "  tx: ring full %llu times, %llu wake-ups sent; %zu peers, %u answers queued\n",
            (unsigned long long)iface->stats.full, (unsigned long long)iface->stats.wakeups_sent,
            fy_hash_count(&iface->peers), iface->nreplies);
    fy_list_t *pos;
    fy_list_for_each(pos, &iface->eps)
    {
        shm_ep_t *ep = fy_container_of(pos, shm_ep_t, link);
        fprintf(f, "  ep -> pid %d iface %016llx: tx %llu msgs %llu B, %zu ops pending, %s%s\n",
                (int)ep->peer->addr.pid, (unsigned long long)ep->peer->id,
                (unsigned long long)ep->stats.tx_msgs, (unsigned long long)ep->stats.tx_bytes,
                fy_list_length(&ep->ops),
                ep->zc_mode == SHM_ZC_PULL   ? "zcopy pulled"
                : ep->zc_mode == SHM_ZC_PUSH ? "zcopy pushed"
                                             : "zcopy mode not yet known",
                ep->status != FERRY_OK ? ", FAILED" : "");
    }
}
