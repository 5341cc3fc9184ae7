/*
 * shm_iface.c - a shared-memory interface: its segment and receive ring, progress, freeing
 * cells, sleeping on the event fd, attributes and printing.
 *
 * Progress is built around one rule: an idle poll is one load of one state word.  Cells are
 * handled in ticket order (so every ep's AMs arrive in the order sent) and freed in batches
 * after the poll that found nothing, so in a ping-pong the write that frees a cell is not on
 * the path of the reply.  Everything slow — pushing a fallback transfer, control messages
 * that found a full ring, failed peers, liveness checks — sits behind one test or a poll
 * counter.  See shm.h for the ring protocol, shm_rx.c for delivery, shm_peer.c for peers.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tl/shm/shm.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- open / close ---------------------------------------------------------------------- */

/* Remove the wake-up socket files of ifaces that are gone (a killed process leaves its file):
 * a socket file nobody is bound to refuses a connect. */
static void sweep_wake_files(void)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct dirent *e;
    while (fd >= 0 && (e = readdir(d)) != NULL) {
        unsigned long long id;
        char end;
        if (sscanf(e->d_name, "ferry-wake-%16llx%c", &id, &end) != 1)
            continue;
        struct sockaddr_un sun;
        socklen_t len;
        fy_shm_sock_name(id, 1, &sun, &len);
        if (connect(fd, (struct sockaddr *)&sun, len) != 0 && errno == ECONNREFUSED)
            unlink(sun.sun_path);
    }
    if (fd >= 0)
        close(fd);
    closedir(d);
}

/*
 * Bind the wake-up socket: a socket file in /dev/shm, which every process sharing this
 * /dev/shm reaches whatever its network namespace (an abstract name lives in one network
 * namespace only); where /dev/shm cannot hold one, the abstract name.
 */
static ferry_status_t open_socket(shm_iface_t *iface)
{
    sweep_wake_files();
    for (int path = 1; path >= 0; path--) {
        for (int attempt = 0; attempt < 8; attempt++) {
            struct sockaddr_un sun;
            socklen_t len;
            fy_shm_sock_name(iface->id, path, &sun, &len);
            if (bind(iface->sock, (struct sockaddr *)&sun, len) == 0) {
                if (path) {
                    snprintf(iface->wake_path, sizeof(iface->wake_path), "%s", sun.sun_path);
                    iface->wake_pid = (int32_t)getpid();
                }
                return FERRY_OK;
            }
            if (errno != EADDRINUSE)
                break;
            iface->id = fy_random64() | 1; /* a clash of random ids: draw again */
        }
        if (path)
            fy_info("shm: no wake-up socket in /dev/shm (%m): an abstract one, seen only in "
                    "this network namespace");
    }
    fy_error("binding the shm wake-up socket failed: %m");
    return FERRY_ERR_IO;
}

ferry_status_t fy_shm_iface_open(fy_tl_md_t *tl_md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p)
{
    shm_md_t *md = (shm_md_t *)tl_md;
    const shm_opts_t *o = &md->opts;
    shm_iface_t *iface;
    if (params->device != NULL && strcmp(params->device, "memory") != 0)
        return FERRY_ERR_NO_DEVICE;
    if (posix_memalign((void **)&iface, 128, sizeof(*iface)) != 0)
        return FERRY_ERR_NO_MEMORY;
    memset(iface, 0, sizeof(*iface));
    fy_tl_iface_base_init(&iface->super, &fy_tl_shm_component, tl_md, params);
    iface->md = md;
    iface->sock = iface->txsock = iface->epfd = iface->obox_timer = -1;
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
    size_t pulls_off = FY_ALIGN_UP(bufs_off + (size_t)n * o->bcopy_size, 4096);
    size_t obox_off = FY_ALIGN_UP(pulls_off + SHM_PULL_SLOTS * sizeof(uint64_t), 4096);
    size_t seg_size = obox_off + o->obox_size;
    /* the outbox beyond its base is reserved as it is first used (shm_obox.c, fy_shm_obox_alloc) */
    size_t obox_base = FY_MIN(o->obox_size, (size_t)SHM_OBOX_BASE);
    ferry_status_t st =
        fy_shmem_alloc_part(seg_size, obox_off + obox_base, "ferry-shm-ring", &iface->seg);
    if (st != FERRY_OK)
        goto err_free;
    fy_shmem_ref_t ref;
    size_t off;
    fy_shmem_find(iface->seg, seg_size, &ref, &off);

    /* the ring, its buffers and the outbox's first round, mapped now (fy_shmem_populate) */
    fy_shmem_populate(iface->seg, FY_MIN(obox_off, SHM_POPULATE_MAX));
    fy_shmem_populate((char *)iface->seg + obox_off, FY_MIN(obox_base, (size_t)SHM_OBOX_ROTATE));
    iface->hdr = iface->seg;
    iface->cells = (char *)iface->seg + cells_off;
    iface->bufs = (char *)iface->seg + bufs_off;
    iface->mask = n - 1;
    iface->cell_shift = (unsigned)__builtin_ctzl(o->cell_size);
    iface->bcopy_size = (uint32_t)o->bcopy_size;
    iface->obox = (char *)iface->seg + obox_off;
    iface->obox_off = obox_off;
    iface->obox_size = o->obox_size;
    iface->obox_base = obox_base;
    iface->obox_reserved = obox_base;
    iface->obox_max = o->obox_size != 0 ? o->obox_max : 0;
    iface->pulls = (uint64_t *)((char *)iface->seg + pulls_off); /* zero: CLOSED */
    for (unsigned i = 0; i < SHM_PULL_SLOTS; i++)
        iface->pull_free[i] = (uint16_t)(SHM_PULL_SLOTS - 1 - i);
    iface->pull_nfree = SHM_PULL_SLOTS;
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
    h->obox_off = obox_off;
    h->obox_size = o->obox_size;
    h->pulls_off = pulls_off;
    h->seg_size = ref.size;
    __atomic_store_n(&h->magic, SHM_SEG_MAGIC, __ATOMIC_RELEASE);

    iface->addr = (shm_iface_addr_t){
        .id = iface->id,
        .ino = ref.ino,
        .size = ref.size,
        .pid = ref.pid,
        .fd = ref.fd,
        .version = SHM_ADDR_VERSION,
        .flags = (uint16_t)((o->cma ? 0 : SHM_ADDR_F_NO_CMA) |
                            (iface->wake_path[0] != '\0' ? SHM_ADDR_F_WAKE_PATH : 0)),
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
    if (iface->wake_path[0] != '\0' && iface->wake_pid == (int32_t)getpid())
        unlink(iface->wake_path);
    fy_shmem_free(iface->seg);
err_free:
    free(iface);
    return st;
}

static void free_frag(uint64_t key, void *value, void *arg)
{
    shm_frag_rx_t *f = value;
    fy_shm_frag_free(f);
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
    fy_shm_rx_free(iface);
    if (iface->obox_timer >= 0)
        close(iface->obox_timer);
    close(iface->epfd);
    close(iface->sock);
    close(iface->txsock);
    if (iface->wake_path[0] != '\0' && iface->wake_pid == (int32_t)getpid())
        unlink(iface->wake_path);
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
    attr->latency_ns = 220;
    attr->bandwidth = o->cma ? 18e9 : 10e9;
    attr->overhead_ns = 40;
    attr->max_short = o->cell_size - SHM_CELL_HDR;
    /* a buffered message must leave room to be aligned in its cell buffer (shm.h, copy
     * alignment): 8121-8184 bytes of AM data went unaligned at 2.4-3.2 us one-way where
     * 8185 through the outbox took 0.3-0.8 */
    attr->max_bcopy = o->bcopy_size - SHM_PAD_MASK;
    attr->max_zcopy = (size_t)1 << 40;
    attr->max_zcopy_hdr = SHM_MAX_ZCOPY_HDR;
    /* a message whose data fits the outbox is complete once copied there (obox_send) */
    attr->max_zcopy_local = iface->obox_max != 0 ? iface->obox_max + SHM_MAX_ZCOPY_HDR : 0;
    attr->max_put_short = o->bcopy_size;
    attr->max_get_short = o->bcopy_size;
    attr->max_rma = (size_t)1 << 40;
    attr->max_iov = SHM_MAX_IOV;
    attr->device_addr_len = sizeof(shm_dev_addr_t);
    attr->iface_addr_len = sizeof(shm_iface_addr_t);
    attr->priority = 30;
}

ferry_status_t fy_shm_iface_get_address(fy_tl_iface_t *tl_iface, void *dev_addr, void *iface_addr)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    if (dev_addr != NULL)
        memcpy(dev_addr, &iface->md->dev_addr, sizeof(shm_dev_addr_t));
    if (iface_addr != NULL)
        memcpy(iface_addr, &iface->addr, sizeof(shm_iface_addr_t));
    return FERRY_OK;
}

/* Does the peer's /dev/shm probe open here with its value? */
static int probe_matches(uint64_t probe)
{
    char path[64];
    uint64_t v = 0;
    snprintf(path, sizeof(path), "/dev/shm/ferry-probe-%016llx", (unsigned long long)probe);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, &v, sizeof(v)); /* the file's first 8 bytes: the probe */
    close(fd);
    return n == (ssize_t)sizeof(v) && v == probe;
}

/* Is the peer's wake-up socket visible from here (a file in the /dev/shm we share, or an
 * abstract name: only in its network namespace)? */
static int wake_socket_visible(uint64_t id, int path)
{
    struct sockaddr_un sun;
    socklen_t len;
    fy_shm_sock_name(id, path, &sun, &len);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 1; /* cannot tell: let the connect decide */
    int ok = connect(fd, (struct sockaddr *)&sun, len) == 0;
    close(fd);
    return ok;
}

/*
 * Reachability is proved, never inferred: the same kernel, the peer's /dev/shm probe readable
 * here with its value (so its segments and ours live in one tmpfs world), its wake-up socket
 * visible, and buffers as large as ours.  Whether its segment can be mapped (same pid
 * namespace, ptrace rules) is proved by ep_create, which maps it; a failure there sends
 * proto to the next lane.  Returns 1, or 0 with the reason in why.
 */
static int shm_check(shm_iface_t *iface, const void *dev_addr, const void *iface_addr, char *why,
                     size_t len)
{
    shm_dev_addr_t d;
    const shm_dev_addr_t *mine = &iface->md->dev_addr;
    memcpy(&d, dev_addr, sizeof(d));
    if (memcmp(d.boot_id, mine->boot_id, sizeof(d.boot_id)) != 0) {
        snprintf(why, len, "another host (its kernel's boot id differs)");
        return 0;
    }
    if (d.probe != mine->probe || mine->probe == 0) {
        if (d.probe == 0) {
            snprintf(why, len, "it has no /dev/shm probe (it could not create one)");
            return 0;
        }
        if (d.probe != iface->probe_seen) {
            if (!probe_matches(d.probe)) {
                snprintf(why, len,
                         "no shared /dev/shm: its probe /dev/shm/ferry-probe-%016llx is not here",
                         (unsigned long long)d.probe);
                return 0;
            }
            iface->probe_seen = d.probe;
        }
    }
    if (iface_addr == NULL)
        return 1;
    shm_iface_addr_t a;
    memcpy(&a, iface_addr, sizeof(a));
    if (a.version != SHM_ADDR_VERSION || a.pid <= 0) {
        snprintf(why, len, "address version %u (this build speaks %u)", a.version,
                 SHM_ADDR_VERSION);
        return 0;
    }
    /* The peer's buffers must hold what our attributes promise. */
    if (a.bcopy_size < iface->bcopy_size) {
        snprintf(why, len, "its FERRY_SHM_BCOPY_SIZE (%u) is below ours (%u)", a.bcopy_size,
                 (unsigned)iface->bcopy_size);
        return 0;
    }
    if (a.id != iface->wake_seen) {
        if (!wake_socket_visible(a.id, (a.flags & SHM_ADDR_F_WAKE_PATH) != 0)) {
            if (a.flags & SHM_ADDR_F_WAKE_PATH)
                snprintf(why, len, "its wake-up socket /dev/shm/ferry-wake-%016llx is not here",
                         (unsigned long long)a.id);
            else
                snprintf(why, len,
                         "its wake-up socket is abstract (it had none in /dev/shm): "
                         "not visible from another network namespace");
            return 0;
        }
        iface->wake_seen = a.id;
    }
    return 1;
}

int fy_shm_iface_is_reachable(fy_tl_iface_t *tl_iface, const void *dev_addr, const void *iface_addr)
{
    char why[128];
    if (shm_check((shm_iface_t *)tl_iface, dev_addr, iface_addr, why, sizeof(why)))
        return 1;
    fy_info("shm: refused: %s", why);
    return 0;
}

void fy_shm_iface_unreachable_why(fy_tl_iface_t *tl_iface, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len)
{
    if (shm_check((shm_iface_t *)tl_iface, dev_addr, iface_addr, buf, len))
        snprintf(buf, len, "reachable");
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
            fy_shm_wake_id(iface, id);
        }
    }
}

/* The head cell is claimed by a producer that never publishes: if that process is dead,
 * skip the cell (it held no message yet) so the ring keeps moving. */
void fy_shm_check_stuck(shm_iface_t *iface)
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
    if (!fy_shm_pid_is_dead(owner))
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
        n += fy_shm_flush_ctl(iface);
    if (!fy_list_is_empty(&iface->push_eps))
        n += fy_shm_push_progress(iface);
    if (iface->pending_fail) {
        fail_eps(iface);
        n++;
    }
    if (iface->pending_reap)
        fy_shm_peers_reap(iface);
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
        /* A short message that runs into the cell's second line: ask for that line now, so
         * that its transfer overlaps the dispatch instead of stalling the copy at its end. */
        if (c->len > 64 - SHM_CELL_HDR && c->type == SHM_CELL_SHORT)
            __builtin_prefetch((const char *)c + 64);
        fy_shm_dispatch(iface, c, head - 1);
    }
    if (head != iface->released && (n == 0 || head - iface->released >= SHM_RELEASE_BATCH))
        ring_release(iface);
    if (FY_UNLIKELY(iface->nreplies != 0 || !fy_list_is_empty(&iface->push_eps) ||
                    iface->pending_fail || iface->pending_reap))
        n += slow_progress(iface);
    if (FY_UNLIKELY((++iface->polls & 255) == 0)) {
        uint64_t now = fy_time_ns();
        if (now >= iface->next_check_ns) {
            iface->next_check_ns = now + iface->md->opts.liveness_ns;
            fy_shm_check_liveness(iface);
            if (iface->pending_fail)
                n += slow_progress(iface);
        }
    }
    iface->in_progress = 0;
    return n;
}

/* ---- sleeping ------------------------------------------------------------------------------ */

int fy_shm_iface_event_fd(fy_tl_iface_t *tl_iface)
{
    return ((shm_iface_t *)tl_iface)->epfd;
}

ferry_status_t fy_shm_iface_event_arm(fy_tl_iface_t *tl_iface)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    char b[64];
    while (recv(iface->sock, b, sizeof(b), MSG_DONTWAIT) > 0) {
    }
    fy_shm_check_liveness(iface);
    if (iface->pending_fail)
        return FERRY_ERR_BUSY;
    fy_shm_obox_arm(iface); /* wake up to give the grown outbox back */
    if ((iface->nreplies != 0 || !fy_list_is_empty(&iface->push_eps)) && slow_progress(iface) != 0)
        return FERRY_ERR_BUSY;
    /* Sends that found a ring full: ask its owner to wake us when it drains. */
    fy_list_t *pos;
    while ((pos = fy_list_pop_head(&iface->full_peers)) != NULL) {
        shm_peer_t *peer = fy_container_of(pos, shm_peer_t, full_link);
        peer->full = 0;
        if (peer->status != FERRY_OK)
            continue;
        if (!fy_shm_peer_add_waiter(iface, peer) || fy_shm_peer_has_room(peer))
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
    fprintf(f,
            "shm/%s id %016llx pid %d: ring %lu x %zu B cells + %zu B buffers, outbox %zu B "
            "(messages up to %zu B; %llu B reserved now, given back %llu times), cma %s\n",
            iface->super.dev_name, (unsigned long long)iface->id, (int)getpid(), o->ring_size,
            o->cell_size, o->bcopy_size, o->obox_size, (size_t)iface->obox_max,
            (unsigned long long)iface->obox_reserved, (unsigned long long)iface->stats.obox_shrunk,
            iface->cma_ok ? "on" : "off");
    fprintf(f,
            "  rx %llu msgs %llu B (from outboxes %llu, %llu of them split, read in place %llu, "
            "pulled %llu into a "
            "%zu B buffer given back %llu times, chunks %llu, atomics %llu), dropped %llu "
            "malformed %llu from dead senders %llu revoked, %llu dead claims skipped\n",
            (unsigned long long)iface->stats.rx_msgs, (unsigned long long)iface->stats.rx_bytes,
            (unsigned long long)iface->stats.rx_obox, (unsigned long long)iface->stats.rx_split,
            (unsigned long long)iface->stats.rx_mapped, (unsigned long long)iface->stats.rx_pull,
            iface->rxbuf_size, (unsigned long long)iface->stats.rx_shrunk,
            (unsigned long long)iface->stats.rx_frag, (unsigned long long)iface->stats.rx_amo,
            (unsigned long long)iface->stats.drops_malformed,
            (unsigned long long)iface->stats.drops_dead,
            (unsigned long long)iface->stats.drops_revoked,
            (unsigned long long)iface->stats.skipped_dead);
    fprintf(f,
            "  tx: %llu through the outbox (%llu split, found full %llu times), %llu read in "
            "place, ring full %llu times, %llu wake-ups sent; %u pull slots out, %llu "
            "revocations waited for a reader; %zu peers, %u answers queued\n",
            (unsigned long long)iface->stats.tx_obox, (unsigned long long)iface->stats.tx_split,
            (unsigned long long)iface->stats.obox_full, (unsigned long long)iface->stats.tx_mapped,
            (unsigned long long)iface->stats.full, (unsigned long long)iface->stats.wakeups_sent,
            SHM_PULL_SLOTS - iface->pull_nfree, (unsigned long long)iface->stats.revoke_waits,
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
