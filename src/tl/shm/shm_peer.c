/*
 * shm_peer.c - the remote ifaces an iface talks to: mapping their rings, waking them, control
 * messages that wait for room, and noticing when they die.
 *
 * Every remote iface we send to or answer gets one mapping of its segment and one pidfd.
 * A peer that dies or closes its iface keeps them only while an ep or an outbox slot still
 * points to it: after that progress releases both (fy_shm_peers_reap), so a server that
 * sees thousands of short-lived clients holds the fds and mappings of the live ones only.  The
 * pidfds sit in an epoll set with the wake-up socket; that epoll fd is the iface's event fd, so a
 * worker asleep waiting on a peer that dies wakes up and fails its eps instead of hanging.
 * Progress looks at the set without blocking every FERRY_SHM_LIVENESS_INTERVAL, and also
 * notices peers that closed their iface, producers that died holding a claimed cell of our
 * ring, and half-pushed messages whose sender is gone.
 *
 * Waking: a producer that finds the consumer's sleep mark sends one datagram to the
 * consumer's socket in the abstract namespace, named after the iface's random id (nothing to
 * clean up, no permission needed).  A producer that wants to sleep while a peer's ring is full
 * leaves its id in a waiter slot of that ring; the consumer wakes it when it frees cells.
 *
 * Control messages (answers to pulls and atomics, push aborts) are small inline cells; when
 * the peer's ring is full they queue per peer, in order, and progress retries them.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tl/shm/shm.h"
#include "util/clock.h"
#include "util/log.h"

void fy_shm_sock_name(uint64_t id, int path, struct sockaddr_un *sun, socklen_t *len)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    if (path) {
        int n = snprintf(sun->sun_path, sizeof(sun->sun_path), "/dev/shm/ferry-wake-%016llx",
                         (unsigned long long)id);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
        return;
    }
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
int fy_shm_pid_is_dead(pid_t pid)
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
    uint64_t bufs_end = h->bufs_off + (uint64_t)n * h->bcopy_size;
    uint64_t pulls_end = h->pulls_off + SHM_PULL_SLOTS * sizeof(uint64_t);
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_SEG_MAGIC || h->id != a->id ||
        h->pid != (uint32_t)a->pid || n < 8 || (n & (n - 1)) != 0 || cs < 64 ||
        (cs & (cs - 1)) != 0 || h->bcopy_size < a->bcopy_size || h->cells_off % 128 != 0 ||
        h->cells_off < sizeof(shm_seg_hdr_t) || cells_end > h->bufs_off || bufs_end > a->size ||
        h->pulls_off < bufs_end || h->pulls_off % 64 != 0 || pulls_end > a->size ||
        (h->obox_size != 0 && (h->obox_off < pulls_end || h->obox_off % 64 != 0 ||
                               h->obox_size > a->size || h->obox_off > a->size - h->obox_size))) {
        fy_warn("process %d's shm segment does not look like a ferry ring: ignored", (int)a->pid);
        fy_shmem_detach(seg);
        return FERRY_ERR_INVALID_ADDR;
    }
    /* the peer's ring (we write its cells and buffers) and the first round of its outbox (we
     * read messages there), mapped now rather than a page fault at a time (fy_shmem_populate):
     * both lie in what the peer reserved when it opened */
    fy_shmem_populate(seg, FY_MIN(pulls_end, (uint64_t)SHM_POPULATE_MAX));
    if (h->obox_size != 0)
        fy_shmem_populate((char *)seg + h->obox_off,
                          FY_MIN(h->obox_size, (uint64_t)SHM_OBOX_ROTATE));
    peer->hdr = h;
    peer->cells = (char *)seg + h->cells_off;
    peer->bufs = (char *)seg + h->bufs_off;
    peer->mask = n - 1;
    peer->cell_shift = (unsigned)__builtin_ctz(cs);
    peer->bcopy_size = h->bcopy_size;
    peer->obox_lo = h->obox_off;
    peer->obox_hi = h->obox_size != 0 ? h->obox_off + h->obox_size : h->obox_off;
    peer->pulls = (uint64_t *)((char *)seg + h->pulls_off);
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
    fy_shm_sock_name(peer->id, (addr->flags & SHM_ADDR_F_WAKE_PATH) != 0, &peer->sun,
                     &peer->sunlen);
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

void fy_shm_send_wake(shm_iface_t *iface, const struct sockaddr_un *sun, socklen_t len)
{
    char b = 0;
    iface->stats.wakeups_sent++;
    /* EAGAIN: its queue is full, so it is awake anyway; ECONNREFUSED: it is gone. */
    (void)sendto(iface->txsock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)sun,
                 len);
}

void fy_shm_wake_id(shm_iface_t *iface, uint64_t id)
{
    shm_peer_t *peer = fy_hash_get(&iface->peers, id);
    if (peer != NULL) {
        fy_shm_send_wake(iface, &peer->sun, peer->sunlen);
        return;
    }
    /* a producer we have not mapped: its socket file if there is one, else the abstract name */
    struct sockaddr_un sun;
    socklen_t len;
    char b = 0;
    fy_shm_sock_name(id, 1, &sun, &len);
    iface->stats.wakeups_sent++;
    if (sendto(iface->txsock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)&sun,
               len) < 0 &&
        (errno == ENOENT || errno == ECONNREFUSED)) {
        fy_shm_sock_name(id, 0, &sun, &len);
        fy_shm_send_wake(iface, &sun, len);
    }
}

void fy_shm_peer_wake(shm_iface_t *iface, shm_peer_t *peer)
{
    fy_shm_send_wake(iface, &peer->sun, peer->sunlen);
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
    iface->pending_reap = 1;
}

int fy_shm_peer_check(shm_iface_t *iface, shm_peer_t *peer)
{
    if (peer->status != FERRY_OK)
        return 0;
    int dead = __atomic_load_n(&peer->hdr->closed, __ATOMIC_ACQUIRE) != 0;
    if (!dead && peer->pidfd >= 0) {
        struct pollfd p = {.fd = peer->pidfd, .events = POLLIN};
        dead = poll(&p, 1, 0) == 1;
    } else if (!dead) {
        dead = fy_shm_pid_is_dead(peer->addr.pid);
    }
    if (dead)
        fy_shm_peer_fail(iface, peer, FERRY_ERR_CONNECTION_RESET);
    return !dead;
}

void fy_shm_peers_reap(shm_iface_t *iface)
{
    /* Messages of a dead sender still in our ring may point into its segment: deliver them
     * before its mapping goes. */
    const shm_cell_t *c = shm_cell_at(iface->cells, iface->cell_shift, iface->mask, iface->head);
    if ((__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) & SHM_KEY_MASK) ==
        SHM_STATE(SHM_PHASE_READY, iface->head))
        return;
    iface->pending_reap = 0;
    fy_shm_obox_reclaim(iface); /* slots a dead receiver will never give back */
    fy_list_t *pos, *next;
    for (pos = iface->peer_list.next; pos != &iface->peer_list; pos = next) {
        next = pos->next;
        shm_peer_t *peer = fy_container_of(pos, shm_peer_t, link);
        if (peer->status == FERRY_OK || peer->refs != 0)
            continue;
        fy_list_del(&peer->link);
        if (peer->full)
            fy_list_del(&peer->full_link);
        fy_hash_del(&iface->peers, peer->id);
        if (peer->pidfd >= 0)
            close(peer->pidfd); /* (out of the epoll set since it failed) */
        fy_shmem_detach(peer->hdr);
        free(peer);
    }
}

/* Is there room at the tail of a peer's ring now? */
int fy_shm_peer_has_room(const shm_peer_t *peer)
{
    uint32_t t = __atomic_load_n(&peer->hdr->tail, __ATOMIC_SEQ_CST);
    const shm_cell_t *c = shm_cell_at(peer->cells, peer->cell_shift, peer->mask, t);
    uint64_t s = __atomic_load_n(&c->state, __ATOMIC_SEQ_CST);
    return (int32_t)((uint32_t)s - t) >= 0;
}

/* Leave our id in a peer's waiter slots; 0 if every slot is taken. */
int fy_shm_peer_add_waiter(shm_iface_t *iface, shm_peer_t *peer)
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

unsigned fy_shm_flush_ctl(shm_iface_t *iface)
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

/* Drop half-received pushed messages whose sender has died. */
typedef struct frag_scan {
    uint64_t dead[16];
    unsigned n;
} frag_scan_t;

static void frag_find_dead(uint64_t token, void *value, void *arg)
{
    frag_scan_t *s = arg;
    if (s->n < FY_ARRAY_SIZE(s->dead) && fy_shm_pid_is_dead((pid_t)(token >> 32)))
        s->dead[s->n++] = token;
}

static void drop_dead_frags(shm_iface_t *iface)
{
    frag_scan_t s = {.n = 0};
    fy_hash_foreach(&iface->frags, frag_find_dead, &s);
    for (unsigned i = 0; i < s.n; i++) {
        shm_frag_rx_t *f = fy_hash_del(&iface->frags, s.dead[i]);
        fy_shm_frag_free(f);
        iface->stats.drops_dead++;
    }
}

void fy_shm_check_liveness(shm_iface_t *iface)
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
            (peer->pidfd < 0 && fy_shm_pid_is_dead(peer->addr.pid)))
            fy_shm_peer_fail(iface, peer, FERRY_ERR_CONNECTION_RESET);
    }
    fy_shm_check_stuck(iface);
    if (FY_UNLIKELY(fy_hash_count(&iface->frags) != 0))
        drop_dead_frags(iface);
    if (FY_UNLIKELY(iface->obox_reserved > iface->obox_base))
        fy_shm_obox_idle(iface, fy_time_ns());
    if (FY_UNLIKELY(iface->rxbuf_size > SHM_OBOX_BASE))
        fy_shm_rx_idle(iface, fy_time_ns());
    if (FY_UNLIKELY(fy_shmem_parked() != 0)) /* peers' memory we read in place */
        fy_shmem_trim(fy_time_ns(), iface->md->opts.obox_idle_ns);
}

/* Fail the eps of failed peers: err_cb, then their operations. */
