/*
 * tcp_iface.c - the tcp transport's interface: the listening socket, the epoll set that is
 * both the progress engine and the event fd a worker sleeps on, and what the iface reports
 * (address, reachability, attributes, statistics).
 *
 * Progress is one epoll_wait with a zero timeout, then the work it names: accepts,
 * handshakes, reads (which deliver AMs), writes of queued frames, the timer of pending
 * handshakes; then links whose buffers still hold frames (they were stalled behind a striped
 * frame), then failure reports.  The epoll set is level-triggered, so "ready to sleep?"
 * (iface_event_arm) is one more zero-timeout epoll_wait: nothing pending in the kernel and
 * nothing pending here means the fd will wake the worker when something arrives.  A link
 * that must not be read (stalled) leaves the set's EPOLLIN until it may be read again, so a
 * stalled link never keeps a worker awake.
 *
 * When every recent event was a read from one peer (a ping-pong partner, a stream), that
 * peer is "hot": its links are read directly and epoll_wait runs every 8th pass only.  A
 * small message then costs one read instead of an epoll_wait and a read, and a spinning
 * receiver stays off the epoll lock that the sender's wake-ups take.  Any other event (a
 * write becoming possible, another peer, an accept, the timer) ends it at the next epoll.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "tl/tcp/tcp.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define SINK_SIZE (64u << 10)
/* While a peer is hot, epoll_wait (for everything else: other peers, writes, accepts,
 * timers) runs every FY_TCP_HOT_EPOLL-th pass; after FY_TCP_HOT_IDLE passes without a byte
 * the peer is no longer hot. */
#define FY_TCP_HOT_EPOLL 8
#define FY_TCP_HOT_IDLE  32

static const fy_netif_t *find_dev(const fy_tcp_md_t *md, const char *name)
{
    for (unsigned i = 0; i < md->ndevs; i++)
        if (name != NULL && strcmp(md->devs[i].name, name) == 0)
            return &md->devs[i];
    return NULL;
}

static ferry_status_t open_listener(fy_tcp_iface_t *iface, const fy_netif_t *dev)
{
    struct sockaddr_storage ss;
    fy_netif_addr_t a = dev->addr;
    a.port_be = 0;
    socklen_t sl = fy_netif_addr_to_sockaddr(&a, &ss);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fy_error("tcp: socket() for %s: %s", dev->name, strerror(errno));
        return FERRY_ERR_IO;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    char s[FY_NETIF_ADDR_STRLEN];
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, SOMAXCONN) != 0) {
        fy_error("tcp: cannot listen on %s (%s): %s", fy_netif_addr_str(&a, 0, s, sizeof(s)),
                 dev->name, strerror(errno));
        close(fd);
        return FERRY_ERR_IO;
    }
    sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        fy_netif_addr_from_sockaddr((struct sockaddr *)&ss, &iface->addr) != FERRY_OK) {
        close(fd);
        return FERRY_ERR_IO;
    }
    iface->addr.prefix_len = dev->addr.prefix_len;
    iface->listen_fd = fd;
    return FERRY_OK;
}

ferry_status_t fy_tcp_iface_open(fy_tl_md_t *super, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p)
{
    fy_tcp_md_t *md = (fy_tcp_md_t *)super;
    const fy_netif_t *dev = find_dev(md, params->device);
    if (dev == NULL) {
        fy_error("tcp: no device '%s'", params->device ? params->device : "(null)");
        return FERRY_ERR_NO_DEVICE;
    }
    fy_tcp_iface_t *iface = calloc(1, sizeof(*iface));
    if (iface == NULL)
        return FERRY_ERR_NO_MEMORY;
    fy_tl_iface_base_init(&iface->super, md->super.super.component, super, params);
    iface->md = md;
    iface->cfg = &md->cfg;
    iface->epfd = iface->listen_fd = iface->timer_fd = -1;
    iface->listen_kind = FY_TCP_OBJ_LISTEN;
    iface->timer_kind = FY_TCP_OBJ_TIMER;
    iface->is_loopback = dev->is_loopback;
    fy_list_init(&iface->peers);
    fy_list_init(&iface->accepting);
    fy_list_init(&iface->ready);
    fy_list_init(&iface->notify);
    fy_list_init(&iface->dead);
    fy_list_init(&iface->dead_accepts);
    fy_list_init(&iface->dead_links);
    do {
        iface->id = fy_random64();
    } while (iface->id == 0);
    ferry_status_t st = fy_hash_init(&iface->peers_by_id, 64);
    if (st != FERRY_OK)
        goto err_free;
    st = fy_mpool_init(&iface->tx_pool, "tcp tx", sizeof(fy_tcp_tx_t), 0, 64, 0);
    if (st != FERRY_OK)
        goto err_hash;
    st = fy_mpool_init(&iface->copy_pool, "tcp tx copy", sizeof(fy_tcp_tx_t) + FY_TCP_SHORT_COPY, 0,
                       32, 0);
    if (st != FERRY_OK)
        goto err_txpool;
    st = fy_mpool_init(&iface->op_pool, "tcp op", sizeof(fy_tcp_op_t), 0, 64, 0);
    if (st != FERRY_OK)
        goto err_copypool;
    st = FERRY_ERR_NO_MEMORY;
    iface->sink_size = SINK_SIZE;
    iface->sink = malloc(iface->sink_size);
    if (iface->sink == NULL)
        goto err_oppool;
    st = FERRY_ERR_IO;
    iface->epfd = epoll_create1(EPOLL_CLOEXEC);
    iface->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (iface->epfd < 0 || iface->timer_fd < 0) {
        fy_error("tcp: epoll/timerfd: %s", strerror(errno));
        goto err_fds;
    }
    st = open_listener(iface, dev);
    if (st != FERRY_OK)
        goto err_fds;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &iface->listen_kind};
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &iface->timer_kind};
    if (epoll_ctl(iface->epfd, EPOLL_CTL_ADD, iface->listen_fd, &ev) != 0 ||
        epoll_ctl(iface->epfd, EPOLL_CTL_ADD, iface->timer_fd, &tev) != 0) {
        fy_error("tcp: epoll_ctl: %s", strerror(errno));
        st = FERRY_ERR_IO;
        goto err_listen;
    }
    char a[FY_NETIF_ADDR_STRLEN];
    fy_debug("tcp: iface %016llx listening on %s (%s)", (unsigned long long)iface->id,
             fy_netif_addr_str(&iface->addr, 0, a, sizeof(a)), dev->name);
    *iface_p = &iface->super;
    return FERRY_OK;

err_listen:
    close(iface->listen_fd);
err_fds:
    if (iface->epfd >= 0)
        close(iface->epfd);
    if (iface->timer_fd >= 0)
        close(iface->timer_fd);
    free(iface->sink);
err_oppool:
    fy_mpool_destroy(&iface->op_pool);
err_copypool:
    fy_mpool_destroy(&iface->copy_pool);
err_txpool:
    fy_mpool_destroy(&iface->tx_pool);
err_hash:
    fy_hash_destroy(&iface->peers_by_id);
err_free:
    free(iface);
    return st;
}

void fy_tcp_iface_close(fy_tl_iface_t *super)
{
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    if (iface == NULL)
        return;
    fy_tcp_peer_destroy_all(iface);
    close(iface->listen_fd);
    close(iface->timer_fd);
    close(iface->epfd);
    fy_tcp_cache_release(iface);
    free(iface->sink);
    fy_mpool_destroy(&iface->op_pool);
    fy_mpool_destroy(&iface->copy_pool);
    fy_mpool_destroy(&iface->tx_pool);
    fy_hash_destroy(&iface->peers_by_id);
    free(iface);
}

void fy_tcp_iface_query(fy_tl_iface_t *super, fy_tl_iface_attr_t *attr)
{
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    const fy_tcp_config_t *cfg = iface->cfg;
    memset(attr, 0, sizeof(*attr));
    attr->caps = FY_TL_CAP_AM_SHORT | FY_TL_CAP_AM_BCOPY | FY_TL_CAP_AM_ZCOPY | FY_TL_CAP_PUT |
                 FY_TL_CAP_GET | FY_TL_CAP_AM_ORDERED | FY_TL_CAP_EVENT_FD |
                 FY_TL_CAP_CONNECT_TO_IFACE;
    /* Measured on this project's 2-core VM (docs/tcp.md): over loopback 3.2-3.4 us one way
     * and 9.6-11 GB/s for 1 MiB messages; between network namespaces over a veth ~7 GB/s (the
     * kernel's segmentation offloads make the stream cost what the copies cost, whatever the
     * MTU).  A hardware NIC adds its wire time (10 us is a typical Ethernet round of kernel +
     * switch), and its speed (sysfs) bounds the bandwidth; a virtual device's speed means
     * nothing, so only the copy rate does. */
    double speed = fy_netif_speed(super->dev_name);
    int virt = iface->is_loopback || fy_netif_is_virtual(super->dev_name) != 0;
    double cpu_bw = iface->is_loopback ? 10.0e9 : 7.0e9;
    attr->latency_ns = cfg->latency_ns > 0  ? cfg->latency_ns
                       : iface->is_loopback ? 3300
                       : virt               ? 4000
                                            : 10000;
    attr->bandwidth = cfg->bandwidth > 0                   ? cfg->bandwidth
                      : speed > 0 && speed * 0.95 < cpu_bw ? speed * 0.95
                                                           : cpu_bw;
    attr->overhead_ns = 1000;
    attr->max_short = FY_TCP_SHORT_COPY;
    attr->max_bcopy = FY_TCP_MAX_BCOPY;
    attr->max_zcopy = cfg->max_msg;
    attr->max_zcopy_hdr = FY_TCP_SHORT_COPY;
    attr->max_put_short = 0;
    attr->max_rma = 1u << 30;
    attr->max_iov = FY_TCP_MAX_IOV;
    attr->device_addr_len = sizeof(fy_tcp_dev_addr_t);
    attr->iface_addr_len = sizeof(fy_tcp_iface_addr_t);
    attr->priority = 10;
}

ferry_status_t fy_tcp_iface_get_address(fy_tl_iface_t *super, void *dev_addr, void *iface_addr)
{
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    fy_tcp_dev_addr_t da;
    memset(&da, 0, sizeof(da));
    da.host_id = htole64(iface->md->host_id);
    da.addr = iface->addr;
    da.addr.port_be = 0;
    fy_tcp_iface_addr_t ia;
    memset(&ia, 0, sizeof(ia));
    ia.iface_id = htole64(iface->id);
    ia.port_be = iface->addr.port_be;
    memcpy(dev_addr, &da, sizeof(da));
    memcpy(iface_addr, &ia, sizeof(ia));
    return FERRY_OK;
}

int fy_tcp_iface_is_reachable(fy_tl_iface_t *super, const void *dev_addr, const void *iface_addr)
{
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    fy_tcp_dev_addr_t da;
    memcpy(&da, dev_addr, sizeof(da));
    if (da.addr.family != 4 && da.addr.family != 6)
        return 0;
    return fy_netif_addr_reachable(&iface->addr, iface->md->host_id, &da.addr, le64toh(da.host_id));
}

void fy_tcp_iface_unreachable_why(fy_tl_iface_t *super, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len)
{
    (void)iface_addr;
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    fy_tcp_dev_addr_t da;
    memcpy(&da, dev_addr, sizeof(da));
    fy_netif_unreachable_why(&iface->addr, iface->md->host_id, &da.addr, le64toh(da.host_id), buf,
                             len);
}

void fy_tcp_addr_str(const void *dev_addr, const void *iface_addr, char *buf, size_t len)
{
    fy_tcp_dev_addr_t da;
    fy_tcp_iface_addr_t ia;
    memcpy(&da, dev_addr, sizeof(da));
    memcpy(&ia, iface_addr, sizeof(ia));
    da.addr.port_be = ia.port_be;
    fy_netif_addr_str(&da.addr, 0, buf, len);
}

static void link_event(fy_tcp_iface_t *iface, fy_tcp_link_t *link, uint32_t events)
{
    if (link->state == FY_TCP_LINK_CLOSED)
        return;
    if (link->state == FY_TCP_LINK_CONNECTING) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            fy_tcp_link_connected(link);
        return;
    }
    if ((events & EPOLLOUT) && link->state == FY_TCP_LINK_UP)
        fy_tcp_link_write(link);
    if (link->state == FY_TCP_LINK_CLOSED || !(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        return;
    if (link->stall) {
        /* not to be read now: leave the read interest until unstalled */
        if (link->ev & EPOLLIN)
            fy_tcp_epoll_set(iface, link->fd, link, &link->ev,
                             link->ev & ~(FY_TCP_EV_REG | EPOLLIN));
        return;
    }
    fy_tcp_link_read(link);
}

/* Read the hot peer's links directly.  1 if anything came. */
static unsigned hot_poll(fy_tcp_iface_t *iface)
{
    fy_tcp_peer_t *p = iface->hot;
    size_t got = 0;
    for (unsigned i = 0; i < p->nlinks && iface->hot == p; i++) {
        fy_tcp_link_t *l = p->links[i];
        /* the links epoll named, and every chunk link while a striped frame comes in (link
         * 0 waits for them: leaving one to the next epoll would stall the stream) */
        int want = (iface->hot_mask & (1u << i)) || (i > 0 && p->rx_active);
        if (want && l != NULL && l->state == FY_TCP_LINK_UP && !l->stall)
            got += fy_tcp_link_read(l);
    }
    if (got != 0) {
        iface->hot_idle = 0;
        return 1;
    }
    if (++iface->hot_idle >= FY_TCP_HOT_IDLE)
        iface->hot = NULL; /* gone quiet: back to epoll only */
    return 0;
}

unsigned fy_tcp_iface_progress(fy_tl_iface_t *super)
{
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    struct epoll_event evs[32];
    unsigned count = 0;
    iface->in_progress = 1;
    /* a peer with frames queued to send needs epoll's word on writability at once */
    if (iface->hot != NULL && iface->hot->q_ops == 0 && ++iface->hot_pass % FY_TCP_HOT_EPOLL != 0) {
        count += hot_poll(iface);
        goto rest;
    }
    int n = epoll_wait(iface->epfd, evs, (int)FY_ARRAY_SIZE(evs), 0);
    fy_tcp_peer_t *hot = NULL;
    unsigned mask = 0;
    int single = n > 0;
    for (int i = 0; i < n; i++) {
        int *kind = evs[i].data.ptr;
        switch (*kind) {
        case FY_TCP_OBJ_LINK: {
            fy_tcp_link_t *link = (fy_tcp_link_t *)(void *)kind;
            /* only reads, all from one peer: that peer becomes hot */
            if (evs[i].events == EPOLLIN && (hot == NULL || hot == link->peer)) {
                hot = link->peer;
                mask |= 1u << link->index;
            } else {
                single = 0;
            }
            link_event(iface, link, evs[i].events);
            break;
        }
        case FY_TCP_OBJ_LISTEN:
            single = 0;
            fy_tcp_accept_new(iface);
            break;
        case FY_TCP_OBJ_ACCEPT:
            single = 0;
            fy_tcp_accept_read(iface, (fy_tcp_accept_t *)(void *)kind, evs[i].events);
            break;
        case FY_TCP_OBJ_TIMER:
            single = 0;
            fy_tcp_timers(iface, fy_time_ns());
            break;
        }
        count++;
    }
    if (n > 0 && iface->cfg->direct_poll) {
        iface->hot = single && hot->state == FY_TCP_PEER_UP ? hot : NULL;
        iface->hot_mask = mask;
        iface->hot_idle = 0;
    }
rest:
    /* links unstalled with frames already in their buffers */
    for (int guard = 0; guard < 64 && !fy_list_is_empty(&iface->ready); guard++) {
        fy_list_t *e = fy_list_pop_head(&iface->ready);
        fy_tcp_link_t *link = fy_container_of(e, fy_tcp_link_t, ready_elem);
        fy_tcp_link_parse(link);
        count++;
    }
    if (FY_UNLIKELY(!fy_list_is_empty(&iface->notify))) {
        fy_tcp_peer_notify(iface);
        count++;
    }
    iface->in_progress = 0;
    if (FY_UNLIKELY(!fy_list_is_empty(&iface->dead) || !fy_list_is_empty(&iface->dead_links) ||
                    !fy_list_is_empty(&iface->dead_accepts)))
        fy_tcp_free_dead(iface);
    return count;
}

int fy_tcp_iface_event_fd(fy_tl_iface_t *super)
{
    return fy_tcp_iface(super)->epfd;
}

ferry_status_t fy_tcp_iface_event_arm(fy_tl_iface_t *super)
{
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    if (!fy_list_is_empty(&iface->ready) || !fy_list_is_empty(&iface->notify))
        return FERRY_ERR_BUSY;
    struct epoll_event ev;
    return epoll_wait(iface->epfd, &ev, 1, 0) > 0 ? FERRY_ERR_BUSY : FERRY_OK;
}

static const char *peer_state_name(int s)
{
    switch (s) {
    case FY_TCP_PEER_IDLE:
        return "idle";
    case FY_TCP_PEER_CONNECTING:
        return "connecting";
    case FY_TCP_PEER_UP:
        return "up";
    case FY_TCP_PEER_FAILED:
        return "failed";
    }
    return "?";
}

void fy_tcp_iface_print(fy_tl_iface_t *super, FILE *f)
{
    fy_tcp_iface_t *iface = fy_tcp_iface(super);
    char a[FY_NETIF_ADDR_STRLEN];
    fy_tl_iface_attr_t attr;
    fy_tcp_iface_query(super, &attr);
    char links[32];
    if (iface->cfg->links != 0)
        snprintf(links, sizeof(links), "%lu", iface->cfg->links);
    else
        snprintf(links, sizeof(links), "1 (this host) / 2");
    fprintf(f, "tcp/%s: iface %016llx on %s, %s link(s) per peer, stripe >= %zu B\n",
            super->dev_name, (unsigned long long)iface->id,
            fy_netif_addr_str(&iface->addr, 1, a, sizeof(a)), links, iface->cfg->stripe_min);
    fprintf(f,
            "  latency %.1f us, bandwidth %.2f GB/s; accepted %llu, dropped: bad key %llu, "
            "malformed %llu, unknown iface %llu, handshake timeout %llu\n",
            attr.latency_ns / 1e3, attr.bandwidth / 1e9, (unsigned long long)iface->accepted,
            (unsigned long long)iface->drops_bad_key, (unsigned long long)iface->drops_malformed,
            (unsigned long long)iface->drops_unknown, (unsigned long long)iface->drops_timeout);
    fy_list_t *e;
    for (e = iface->peers.next; e != &iface->peers; e = e->next) {
        const fy_tcp_peer_t *p = fy_container_of(e, fy_tcp_peer_t, elem);
        unsigned neps = (unsigned)fy_list_length(&p->eps);
        fprintf(f,
                "  peer %016llx %s: %s, %u/%u links (%s), %u ep(s), queued %u (%zu B), "
                "pending %zu; tx %llu msgs %llu B, rx %llu msgs %llu B\n",
                (unsigned long long)p->remote_id,
                p->have_raddr ? fy_netif_addr_str(&p->raddr, 0, a, sizeof(a)) : "?",
                peer_state_name(p->state), p->nup, p->nlinks, p->outgoing ? "outgoing" : "accepted",
                neps, p->q_ops, p->q_bytes, fy_list_length(&p->ops), (unsigned long long)p->tx_msgs,
                (unsigned long long)p->tx_bytes, (unsigned long long)p->rx_msgs,
                (unsigned long long)p->rx_bytes);
    }
}
