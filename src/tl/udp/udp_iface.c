/*
 * udp_iface.c - the udp interface: which network interfaces are devices (include/exclude
 * with names and CIDR wide match, through util/netif), the two sockets of an interface
 * (priority and data channel), its address and reachability, the progress loop, the event
 * fd a worker sleeps on, and the statistics.
 *
 * Progress order follows the usnic notes: receive the priority channel first (its tiny
 * fragments are delivered at once), then the data channel, then run the hotel (expired
 * segments go on the resend queue; once per 20 us tick, not every pass), then send: resends
 * first, then the ready endpoints, then the ACKs that found no data to ride on.  An idle data
 * channel is polled only every sixteenth pass, and never by a pass that just delivered from
 * the priority channel, so a ping-pong of tiny messages pays for one receive system call per
 * pass and none between a message and its answer.  A pass starts by processing the ACK the last
 * in-order AM carried (udp_rx.c: kept off the path between a message and its answer).
 *
 * The event fd is an epoll set of a timerfd and, while a worker may sleep on it, both
 * sockets.  Before sleeping, arm sends every owed ACK (a sleeping peer must not hold ACKs) and
 * sets the timerfd to the first timer that is really due - a retransmission, a handshake's
 * retry, a delayed ACK, a pace or reorder timer, a keepalive - so a lost datagram wakes the
 * sleeper and an idle one sleeps until its next keepalive.  A socket in an epoll set costs every
 * datagram the kernel's wake-up chain (ev_socks below), so a worker that polls and does not arm
 * leaves them out.
 */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define HOTEL_TICK_NS (20 * FY_NSEC_PER_USEC)
#define HOTEL_SLOTS   8192
#define RX_MORE       8 /* extra batches a pass drains while they come full */
/* The sockets leave the event fd's epoll set after this long without an arm (ev_socks). */
#define EV_SOCKS_KEEP_NS (10 * FY_NSEC_PER_MSEC)

/* The selected addresses, filtered by FERRY_UDP_AF. */
/*
 * Without an include list, the loopback device is offered beside the network devices: a peer on
 * this host is reached through the kernel's loopback whatever address names it, and a lane on
 * the loopback device gets its 64 KiB MTU (segments 40x larger than an Ethernet MTU's), while
 * the network devices serve the other hosts.  Wireup picks by cost, so local peers take it.
 */
static ferry_status_t add_loopback(const fy_netif_t *all, unsigned nall,
                                   const fy_netif_filter_t *exc, fy_netif_t **sel_p, unsigned *n_p)
{
    unsigned extra = 0;
    for (unsigned i = 0; i < *n_p; i++)
        if ((*sel_p)[i].is_loopback)
            return FERRY_OK; /* already there */
    for (unsigned i = 0; i < nall; i++)
        extra += all[i].is_loopback && !fy_netif_filter_match(exc, &all[i]);
    if (extra == 0)
        return FERRY_OK;
    fy_netif_t *n = malloc((*n_p + extra) * sizeof(*n));
    if (n == NULL)
        return FERRY_ERR_NO_MEMORY;
    if (*n_p != 0)
        memcpy(n, *sel_p, *n_p * sizeof(*n));
    unsigned k = *n_p;
    for (unsigned i = 0; i < nall; i++)
        if (all[i].is_loopback && !fy_netif_filter_match(exc, &all[i]))
            n[k++] = all[i];
    fy_netif_list_free(*sel_p);
    *sel_p = n;
    *n_p = k;
    return FERRY_OK;
}

static ferry_status_t select_addrs(const fy_udp_opts_t *o, fy_netif_t **sel_p, unsigned *n_p)
{
    fy_netif_t *all = NULL;
    unsigned nall = 0, flags = 0;
    fy_netif_filter_t inc = {0}, exc = {0};
    ferry_status_t st;

    if (o->af == 1)
        flags |= FY_NETIF_LIST_NO_IPV6;
    else if (o->af == 2)
        flags |= FY_NETIF_LIST_NO_IPV4;
    st = fy_netif_filter_parse(o->if_include, &inc);
    if (st != FERRY_OK)
        return st;
    st = fy_netif_filter_parse(o->if_exclude, &exc);
    if (st != FERRY_OK)
        goto out_inc;
    st = fy_netif_list(flags, &all, &nall);
    if (st != FERRY_OK)
        goto out_exc;
    st = fy_netif_select(all, nall, &inc, &exc, FY_NETIF_SELECT_DEFAULT, sel_p, n_p);
    if (st == FERRY_OK && (o->if_include == NULL || o->if_include[0] == '\0'))
        st = add_loopback(all, nall, &exc, sel_p, n_p);
    fy_netif_list_free(all);
out_exc:
    fy_netif_filter_release(&exc);
out_inc:
    fy_netif_filter_release(&inc);
    return st;
}

ferry_status_t fy_udp_query_devices(fy_tl_md_t *tl_md, fy_tl_device_t *devs, unsigned max,
                                    unsigned *count)
{
    fy_udp_md_t *md = (fy_udp_md_t *)tl_md;
    fy_netif_t *sel = NULL;
    unsigned nsel = 0, n = 0;
    ferry_status_t st = select_addrs(&md->opts, &sel, &nsel);
    if (st != FERRY_OK)
        return st;
    for (unsigned i = 0; i < nsel; i++) {
        int seen = 0;
        for (unsigned j = 0; j < i; j++)
            seen |= strcmp(sel[j].name, sel[i].name) == 0;
        if (seen)
            continue;
        if (n < max && devs != NULL) {
            snprintf(devs[n].name, sizeof(devs[n].name), "%s", sel[i].name);
            devs[n].is_loopback = sel[i].is_loopback;
        }
        n++;
    }
    fy_netif_list_free(sel);
    *count = n;
    return FERRY_OK;
}

static uint32_t if_mtu(const char *name)
{
    struct ifreq ifr;
    int fd = socket(AF_INET, SOCK_DGRAM, 0), mtu = 1500;
    if (fd < 0)
        return 1500;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    if (ioctl(fd, SIOCGIFMTU, &ifr) == 0)
        mtu = ifr.ifr_mtu;
    close(fd);
    return (uint32_t)mtu;
}

/* Open, size and bind one channel's socket on the interface address. */
static ferry_status_t chan_open(fy_udp_iface_t *iface, uint8_t chan, size_t rcvbuf, size_t sndbuf)
{
    fy_udp_chan_t *ch = &iface->ch[chan];
    struct sockaddr_storage ss;
    socklen_t sl = fy_netif_addr_to_sockaddr(&iface->addr, &ss);
    int af = ss.ss_family, one = 1, v;

    ch->fd = socket(af, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ch->fd < 0) {
        fy_error("udp: socket: %s", strerror(errno));
        return fy_status_from_errno(errno);
    }
    v = (int)FY_MIN(rcvbuf, (size_t)INT32_MAX / 2);
    if (setsockopt(ch->fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) != 0)
        setsockopt(ch->fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    v = (int)FY_MIN(sndbuf, (size_t)INT32_MAX / 2);
    if (setsockopt(ch->fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) != 0)
        setsockopt(ch->fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    /* Never fragment: a segment that does not fit the path must fail, not crawl. */
    if (af == AF_INET) {
        v = IP_PMTUDISC_DO;
        setsockopt(ch->fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof(v));
    } else {
        v = IPV6_PMTUDISC_DO;
        setsockopt(ch->fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &v, sizeof(v));
        setsockopt(ch->fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    if (bind(ch->fd, (struct sockaddr *)&ss, sl) != 0) {
        char buf[FY_NETIF_ADDR_STRLEN];
        fy_error("udp: bind %s: %s", fy_netif_addr_str(&iface->addr, 0, buf, sizeof(buf)),
                 strerror(errno));
        return fy_status_from_errno(errno);
    }
    sl = sizeof(ss);
    getsockname(ch->fd, (struct sockaddr *)&ss, &sl);
    ch->port = ntohs(af == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                   : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return FERRY_OK;
}

static ferry_status_t pools_init(fy_udp_iface_t *iface)
{
    const fy_udp_opts_t *o = iface->opts;
    size_t large_max = FY_MAX((size_t)256, 2 * o->credit / iface->seg_size);
    ferry_status_t st;

    iface->seg_pool_size[FY_UDP_POOL_SMALL] = o->prio_mtu;
    iface->seg_pool_size[FY_UDP_POOL_LARGE] = iface->seg_size;
    iface->seg_pool_size[FY_UDP_POOL_DESC] = 0;
    st = fy_mpool_init(&iface->seg_pool[FY_UDP_POOL_SMALL], "udp small segments",
                       sizeof(fy_udp_seg_t) + o->prio_mtu, 64, 256, 0);
    if (st == FERRY_OK)
        st = fy_mpool_init(&iface->seg_pool[FY_UDP_POOL_LARGE], "udp large segments",
                           sizeof(fy_udp_seg_t) + iface->seg_size, 64, 8, large_max);
    if (st == FERRY_OK)
        st = fy_mpool_init(&iface->seg_pool[FY_UDP_POOL_DESC], "udp chunk segments",
                           sizeof(fy_udp_seg_t), 64, 512, 0);
    if (st == FERRY_OK)
        st = fy_mpool_init(&iface->frag_pool, "udp fragments", sizeof(fy_udp_frag_t), 64, 32, 0);
    if (st == FERRY_OK)
        st = fy_mpool_init(&iface->op_pool, "udp rma ops", sizeof(fy_udp_rma_op_t), 64, 32, 0);
    if (st == FERRY_OK)
        st = fy_mpool_init(&iface->flush_pool, "udp flushes", sizeof(fy_udp_flush_t), 64, 32, 0);
    return st;
}

static void pools_fini(fy_udp_iface_t *iface)
{
    for (int i = 0; i < FY_UDP_NPOOL; i++)
        fy_mpool_destroy(&iface->seg_pool[i]);
    fy_mpool_destroy(&iface->frag_pool);
    fy_mpool_destroy(&iface->op_pool);
    fy_mpool_destroy(&iface->flush_pool);
}

static ferry_status_t events_init(fy_udp_iface_t *iface)
{
    struct epoll_event ev = {.events = EPOLLIN};
    iface->epfd = epoll_create1(EPOLL_CLOEXEC);
    iface->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (iface->epfd < 0 || iface->tfd < 0) {
        fy_error("udp: epoll/timerfd: %s", strerror(errno));
        return fy_status_from_errno(errno);
    }
    ev.data.u32 = FY_UDP_NCH; /* (the sockets join at the first arm: ev_socks) */
    if (epoll_ctl(iface->epfd, EPOLL_CTL_ADD, iface->tfd, &ev) != 0)
        return fy_status_from_errno(errno);
    return FERRY_OK;
}

ferry_status_t fy_udp_iface_open(fy_tl_md_t *tl_md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p)
{
    fy_udp_md_t *md = (fy_udp_md_t *)tl_md;
    const fy_udp_opts_t *o = &md->opts;
    fy_udp_iface_t *iface;
    fy_netif_t *sel = NULL;
    unsigned nsel = 0, i;
    ferry_status_t st;

    iface = calloc(1, sizeof(*iface));
    if (iface == NULL)
        return FERRY_ERR_NO_MEMORY;
    fy_tl_iface_base_init(&iface->super, &fy_tl_udp_component, tl_md, params);
    iface->md = md;
    iface->opts = o;
    iface->ch[0].fd = iface->ch[1].fd = iface->epfd = iface->tfd = -1;
    fy_list_init(&iface->ready);
    fy_list_init(&iface->resendq);
    fy_list_init(&iface->acklist);
    fy_list_init(&iface->faillist);
    fy_list_init(&iface->zombies);
    fy_list_init(&iface->hs_wait);

    /* The device's address: the first selected one of that name (IPv4 before IPv6). */
    st = select_addrs(o, &sel, &nsel);
    if (st != FERRY_OK)
        goto err;
    for (i = 0; i < nsel; i++)
        if (params->device == NULL || strcmp(sel[i].name, params->device) == 0)
            break;
    if (i == nsel) {
        fy_error("udp: device '%s' is not a usable interface (see FERRY_UDP_IF_INCLUDE / "
                 "_EXCLUDE / _AF)",
                 params->device ? params->device : "(null)");
        fy_netif_list_free(sel);
        st = FERRY_ERR_NO_DEVICE;
        goto err;
    }
    iface->addr = sel[i].addr;
    iface->is_loopback = sel[i].is_loopback;
    iface->if_mtu = if_mtu(sel[i].name);
    fy_netif_list_free(sel);

    {
        size_t ipudp = iface->addr.family == 4 ? 28 : 48;
        size_t maxdg = iface->addr.family == 4 ? 65507 : 65527;
        size_t mtu = o->mtu ? o->mtu : iface->if_mtu;
        if (mtu < 576 || mtu <= ipudp + o->prio_mtu / 2) {
            fy_error("udp: MTU %zu of %s is too small (need >= 576)", mtu, params->device);
            st = FERRY_ERR_BAD_CONFIG;
            goto err;
        }
        iface->seg_size = (uint32_t)FY_MIN(mtu - ipudp, maxdg);
    }
    if (getrandom(&iface->uuid, sizeof(iface->uuid), 0) != sizeof(iface->uuid))
        iface->uuid = fy_time_ns() ^ ((uint64_t)getpid() << 32);
    iface->uuid ^= params->worker_uuid;
    if (iface->uuid == 0)
        iface->uuid = 1;
    /* The iface's key replaces the job key on the wire: drawn here, published in the iface
     * address, required in every datagram that reaches us (the peer learned it from our
     * address, or from our CONN_REQ).  The address is the capability: two jobs, or two
     * unlaunched programs, never share a key, and a forger must first obtain an address.
     * No fallback to something guessable: without randomness there is no iface. */
    {
        uint64_t key = 0;
        while (key == 0) {
            if (getrandom(&key, sizeof(key), 0) != sizeof(key)) {
                fy_error("udp: cannot draw the iface key (getrandom: %s)", strerror(errno));
                st = FERRY_ERR_NO_RESOURCE;
                goto err;
            }
        }
        iface->super.params.job_key = key;
    }
    iface->host_id = fy_netif_host_id();
    iface->wsize = 1;
    while (iface->wsize < o->window)
        iface->wsize <<= 1;
    iface->csum = o->checksum || o->fault_corrupt > 0;
    /* GSO pays when several segments fit one 64 KiB send; the injector needs datagrams. */
    iface->gso = o->gso && 2 * iface->seg_size <= FY_UDP_GSO_BYTES;

    st = chan_open(iface, FY_UDP_CH_PRIO, 2u << 20, 1u << 20);
    if (st == FERRY_OK)
        st = chan_open(iface, FY_UDP_CH_DATA, o->rcvbuf, o->sndbuf);
    if (st != FERRY_OK)
        goto err;
    {
        int v = 0;
        socklen_t vl = sizeof(v);
        getsockopt(iface->ch[FY_UDP_CH_DATA].fd, SOL_SOCKET, SO_RCVBUF, &v, &vl);
        /* The kernel doubles what it was asked for and charges overhead to the double. */
        iface->credit = FY_MIN((uint64_t)o->credit, (uint64_t)v / 2);
        if (iface->credit < 4u * iface->seg_size)
            iface->credit = 4u * iface->seg_size;
    }
    iface->ch[FY_UDP_CH_PRIO].mtu = (uint32_t)o->prio_mtu;
    iface->ch[FY_UDP_CH_DATA].mtu = iface->seg_size;

    st = pools_init(iface);
    if (st != FERRY_OK)
        goto err;
    for (int c = 0; c < FY_UDP_NCH; c++) {
        st = fy_udp_chan_rx_init(iface, (uint8_t)c);
        if (st != FERRY_OK)
            goto err;
    }
    st = fy_hotel_init(&iface->hotel, HOTEL_TICK_NS, HOTEL_SLOTS, fy_udp_hotel_expired, iface,
                       fy_time_ns());
    if (st != FERRY_OK)
        goto err;
    st = fy_hash_init(&iface->by_peer, 64);
    if (st != FERRY_OK)
        goto err;
    st = events_init(iface);
    if (st != FERRY_OK)
        goto err;
    st = fy_udp_fault_init(iface);
    if (st != FERRY_OK)
        goto err;
    st = fy_udp_live_open(iface);
    if (st != FERRY_OK)
        goto err;
    if (iface->fault.enabled && (iface->fault.chan_mask & (1u << FY_UDP_CH_DATA)))
        iface->gso = 0;
    {
        char buf[FY_NETIF_ADDR_STRLEN];
        fy_debug("udp: iface %s %s ports %u/%u seg %u window %u credit %llu%s", params->device,
                 fy_netif_addr_str(&iface->addr, 1, buf, sizeof(buf)), iface->ch[0].port,
                 iface->ch[1].port, iface->seg_size, iface->wsize,
                 (unsigned long long)iface->credit, iface->fault.enabled ? " FAULTS" : "");
    }
    *iface_p = &iface->super;
    return FERRY_OK;

err:
    fy_udp_iface_close(&iface->super);
    return st;
}

void fy_udp_iface_close(fy_tl_iface_t *tl_iface)
{
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    if (iface == NULL)
        return;
    if (iface->conns != NULL && fy_udp_stats_wanted(iface))
        fy_udp_iface_print(tl_iface, stderr);
    fy_udp_conn_destroy_all(iface);
    fy_udp_live_close(iface);
    fy_udp_fault_fini(iface);
    if (iface->hotel.slots != NULL)
        fy_hotel_destroy(&iface->hotel);
    if (iface->by_peer.slots != NULL)
        fy_hash_destroy(&iface->by_peer);
    for (int c = 0; c < FY_UDP_NCH; c++) {
        fy_udp_chan_rx_fini(iface, (uint8_t)c);
        if (iface->ch[c].fd >= 0)
            close(iface->ch[c].fd);
    }
    if (iface->epfd >= 0)
        close(iface->epfd);
    if (iface->tfd >= 0)
        close(iface->tfd);
    pools_fini(iface);
    fy_udp_win_spare_free(iface);
    free(iface->conns);
    free(iface->conn_gen);
    free(iface);
}

void fy_udp_iface_query(fy_tl_iface_t *tl_iface, fy_tl_iface_attr_t *attr)
{
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    double speed = fy_netif_speed(iface->super.dev_name);
    memset(attr, 0, sizeof(*attr));
    attr->caps = FY_TL_CAP_AM_SHORT | FY_TL_CAP_AM_BCOPY | FY_TL_CAP_AM_ZCOPY | FY_TL_CAP_PUT |
                 FY_TL_CAP_GET | FY_TL_CAP_AM_ORDERED | FY_TL_CAP_EVENT_FD |
                 FY_TL_CAP_CONNECT_TO_IFACE;
    /* Every datagram costs a fixed ~1.2 us of system calls and stack on the two ends, plus
     * the copies (~12 GB/s): the segment size (the MTU) bounds what the CPU moves -- 9.8 GB/s
     * with loopback's 64 KiB, 1.1 GB/s with Ethernet's 1500 bytes (measured 8.3 and 0.6-1.0
     * GB/s on this project's VM).  A hardware link's speed (sysfs) bounds it further; one
     * way is ~0.8 us below tcp's. */
    int virt = iface->is_loopback || fy_netif_is_virtual(iface->super.dev_name) != 0;
    double seg = iface->seg_size, cpu_bw = seg / (1.2e-6 + seg / 12e9);
    attr->latency_ns = iface->is_loopback ? 2500 : virt ? 3200 : 9200;
    attr->bandwidth = speed > 0 && speed < cpu_bw ? speed : cpu_bw;
    attr->overhead_ns = 1000;
    attr->max_short = iface->opts->prio_mtu - FY_UDP_AM_HDR_MAX;
    attr->max_bcopy = iface->seg_size - FY_UDP_AM_HDR_MAX;
    attr->max_zcopy = FY_MIN(iface->opts->max_zcopy, (size_t)UINT32_MAX); /* 32-bit offsets */
    attr->max_zcopy_hdr = FY_UDP_MAX_ZHDR;
    attr->max_put_short = iface->opts->prio_mtu - FY_UDP_DHDR_LEN - FY_UDP_DACK_LEN -
                          fy_udp_xhdr_len(FY_UDP_T_PUT, 1);
    attr->max_rma = (size_t)1 << 40;
    attr->max_iov = FY_UDP_MAX_IOV;
    attr->device_addr_len = sizeof(fy_udp_dev_addr_t);
    attr->iface_addr_len = sizeof(fy_udp_iface_addr_t);
    attr->priority = 10;
}

ferry_status_t fy_udp_iface_get_address(fy_tl_iface_t *tl_iface, void *dev_addr, void *iface_addr)
{
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    fy_udp_dev_addr_t d = {.ip = iface->addr, .mtu = iface->if_mtu, .host_id = iface->host_id};
    fy_udp_iface_addr_t a = {.prio_port = iface->ch[FY_UDP_CH_PRIO].port,
                             .data_port = iface->ch[FY_UDP_CH_DATA].port,
                             .seg_size = iface->seg_size,
                             .uuid = iface->uuid,
                             .key = iface->super.params.job_key};
    if (dev_addr != NULL)
        memcpy(dev_addr, &d, sizeof(d));
    if (iface_addr != NULL)
        memcpy(iface_addr, &a, sizeof(a));
    return FERRY_OK;
}

int fy_udp_iface_is_reachable(fy_tl_iface_t *tl_iface, const void *dev_addr, const void *iface_addr)
{
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    fy_udp_dev_addr_t d;
    memcpy(&d, dev_addr, sizeof(d));
    if (d.ip.family != 4 && d.ip.family != 6)
        return 0;
    return fy_netif_addr_reachable(&iface->addr, iface->host_id, &d.ip, d.host_id);
}

void fy_udp_iface_unreachable_why(fy_tl_iface_t *tl_iface, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len)
{
    (void)iface_addr;
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    fy_udp_dev_addr_t d;
    memcpy(&d, dev_addr, sizeof(d));
    fy_netif_unreachable_why(&iface->addr, iface->host_id, &d.ip, d.host_id, buf, len);
}

void fy_udp_addr_str(const void *dev_addr, const void *iface_addr, char *buf, size_t len)
{
    fy_udp_dev_addr_t d;
    fy_udp_iface_addr_t a;
    memcpy(&d, dev_addr, sizeof(d));
    memcpy(&a, iface_addr, sizeof(a));
    d.ip.port_be = htons(a.data_port);
    fy_netif_addr_str(&d.ip, 0, buf, len);
}

/* The sockets in the event fd's epoll set, or out of it.  While a socket is in an epoll set,
 * every datagram it gets runs the kernel's wake-up chain in the sender's send call (the
 * socket's wait queue, this set's callback, the worker's set this one is nested in) and every
 * datagram it sent runs its write-space wake-up in the receiver's receive call: on the
 * development VM an 8 B ping-pong's one-way time 0.4-1.3 us more (raw UDP with and without its
 * socket in a set, and ferry, interleaved: docs/perf.md).  A worker that busy-polls never
 * sleeps on the fd, so the sockets are in the set only from an arm (a worker about to sleep)
 * until EV_SOCKS_KEEP_NS pass without one; an arm puts them back.  Adding a socket that holds a
 * datagram makes the set readable at once (epoll looks at the socket as it adds it), so
 * nothing that arrived before the arm is slept through.  A thread may sleep on the fd while
 * another progresses the worker (a progress thread, FERRY_THREAD_MODE_MULTI): taking the
 * sockets out fires the timerfd, so such a sleeper wakes, arms again and puts them back. */
static ferry_status_t ev_socks(fy_udp_iface_t *iface, int on)
{
    struct epoll_event ev = {.events = EPOLLIN};
    for (int c = 0; c < FY_UDP_NCH; c++) {
        ev.data.u32 = (uint32_t)c;
        if (epoll_ctl(iface->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, iface->ch[c].fd, &ev) != 0 &&
            on && errno != EEXIST) {
            fy_warn("udp: epoll_ctl: %s", strerror(errno));
            return fy_status_from_errno(errno);
        }
    }
    iface->ev_socks = on;
    if (!on) {
        struct itimerspec its = {{0, 0}, {0, 1}};
        timerfd_settime(iface->tfd, 0, &its, NULL);
    }
    return FERRY_OK;
}

unsigned fy_udp_iface_progress(fy_tl_iface_t *tl_iface)
{
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    fy_udp_chan_t *data = &iface->ch[FY_UDP_CH_DATA];
    unsigned events;
    int counted;

    iface->in_progress++;
    iface->events = 0;
    iface->now = fy_time_ns();
    /* (the receive that finds something first takes this time, unless an ACK ran first) */
    iface->now_fresh = iface->dack_conn == NULL;
    fy_udp_ack_settle(iface);
    /* An idle data channel is polled every 16th pass, but not by a pass whose priority poll
     * delivered: the application's answer waits for this pass to return, and an empty
     * receive call is the dearest thing a pass does (as dear as the poll that found the
     * message).  Such a pass is not counted, nor two in a row: a stream of tiny messages
     * has the data channel polled every 32nd pass at the least. */
    counted = fy_udp_rx_progress(iface, FY_UDP_CH_PRIO) == 0 || iface->pass_uncounted;
    iface->pass_uncounted = !counted;
    iface->pass += (unsigned)counted;
    if (data->idle < 16 || (counted && (iface->pass & 15) == 0))
        fy_udp_rx_progress(iface, FY_UDP_CH_DATA);
    /* A full batch means more is waiting: with thousands of peers (handshakes, probes,
     * heartbeats at once) one batch per pass lets the socket overflow, the drops bring
     * resends, and the resends more drops.  Drain a few batches more. */
    for (int i = 0; i < RX_MORE && iface->ch[FY_UDP_CH_PRIO].rx_full; i++)
        fy_udp_rx_progress(iface, FY_UDP_CH_PRIO);
    for (int i = 0; i < RX_MORE && data->rx_full; i++) {
        if (!fy_list_is_empty(&iface->acklist)) /* (the sender waits for them: udp_ack.c) */
            fy_udp_send_acks_due(iface);
        fy_udp_rx_progress(iface, FY_UDP_CH_DATA);
    }
    /* (a receive that found something took a fresh time already) */
    if (iface->fault.enabled)
        fy_udp_fault_poll(iface, iface->now);
    iface->now_fresh = 0;
    /* A busy-polling worker runs this hundreds of thousands of times a second, nearly always
     * to find nothing: what has nothing to do is skipped here, not inside a call (an empty
     * pass's instructions in udp ~455 -> ~350, callgrind).  The hotels run once per tick, at
     * its end: a room due within the tick in progress fires at most one tick late (20 us for
     * the retransmission hotel, whose shortest stay is RTO_MIN, 200 us; 1 ms for keepalives);
     * a run per pass cost ~80 and ~55 instructions (callgrind, 8 B ping-pong: an empty pass
     * ~370 -> ~230).  A pace timer (udp_cc.c) that is due runs the hotel at once, as before. */
    if (fy_hotel_occupancy(&iface->hotel) != 0 &&
        (iface->now >= iface->hotel_gate ||
         (iface->pace_due != 0 && iface->pace_due <= iface->now))) {
        iface->hotel_gate = (iface->now / HOTEL_TICK_NS + 1) * HOTEL_TICK_NS;
        fy_udp_ack_settle(iface); /* (ACKs before timers) */
        if (iface->pace_due != 0 && iface->pace_due <= iface->now)
            iface->pace_due = 0; /* (the pace timers due are in this run of the hotel) */
        fy_hotel_run(&iface->hotel, iface->now);
    }
    if (iface->now >= iface->live_gate) {
        fy_udp_ack_settle(iface);
        fy_udp_live_progress(iface);
        if (iface->ev_socks && iface->now - iface->armed_ns >= EV_SOCKS_KEEP_NS)
            ev_socks(iface, 0); /* (no arm for a while: a polling worker) */
    }
    if (!fy_list_is_empty(&iface->faillist)) /* (scheduled by timers, a RESET, ...) */
        fy_udp_conn_run_failures(iface);
    if (fy_udp_hs_admissible(iface))
        fy_udp_hs_admit(iface);
    if (!fy_list_is_empty(&iface->resendq) || !fy_list_is_empty(&iface->ready)) {
        fy_udp_ack_settle(iface); /* (sends waiting for the window: it may open) */
        fy_udp_tx_progress(iface);
    }
    if (!fy_list_is_empty(&iface->acklist))
        fy_udp_send_acks(iface, 0);
    if (iface->ch[FY_UDP_CH_PRIO].ntx != 0 || iface->ch[FY_UDP_CH_DATA].ntx != 0)
        fy_udp_tx_flush_all(iface);
    events = iface->events;
    if (--iface->in_progress == 0 && !fy_list_is_empty(&iface->zombies))
        fy_udp_conn_free_zombies(iface);
    return events;
}

int fy_udp_iface_event_fd(fy_tl_iface_t *tl_iface)
{
    return fy_udp_iface(tl_iface)->epfd;
}

ferry_status_t fy_udp_iface_event_arm(fy_tl_iface_t *tl_iface)
{
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    struct itimerspec its = {{0, 0}, {0, 0}};
    uint64_t now = fy_time_ns(), deadline = 0;

    iface->now = now;
    /* (first: a worker that arms means to sleep, even if this arm finds work) */
    iface->armed_ns = now;
    if (!iface->ev_socks && ev_socks(iface, 1) != FERRY_OK)
        return FERRY_ERR_BUSY; /* (it cannot wake: it polls) */
    /* A sleep that brought nothing (a timer, or a datagram on the data channel that the
     * passes since skipped: an idle data channel is read every 16th pass) makes the first
     * counted pass after the next sleep read the data channel: such a datagram kept the fd
     * readable, and the worker woke at once again, up to 16 times, without reading it.  A
     * sleep that brought datagrams (a sleeping ping-pong) changes nothing. */
    if (iface->rx_dgrams == iface->rx_at_arm)
        iface->pass |= 15;
    iface->rx_at_arm = iface->rx_dgrams;
    fy_udp_ack_settle(iface);
    if (!fy_list_is_empty(&iface->ready) || !fy_list_is_empty(&iface->resendq) ||
        !fy_list_is_empty(&iface->faillist) || fy_udp_hs_admissible(iface))
        return FERRY_ERR_BUSY;
    if (!fy_list_is_empty(&iface->acklist)) {
        deadline = fy_udp_send_acks(iface, 1); /* (mid-message ones wait: ACK_DELAY) */
        fy_udp_tx_flush_all(iface);
    }
    /* The hotel's first room (a timer, a handshake's retry, a pace or reorder timer), not
     * every RTO_MIN: a process sleeping on many workers, each with a segment waiting for its
     * ACK (an RTO of 10 ms before the first RTT sample, 200 ms backed off), woke every 200 us
     * per worker for nothing - 500 workers of tests/udp/test_udp_scale.c, 2.5 million
     * wake-ups a second asked of a process that got a tenth of a core. */
    if (fy_hotel_occupancy(&iface->hotel) != 0) {
        uint64_t t = fy_hotel_next_run(&iface->hotel, now);
        deadline = deadline == 0 ? t : FY_MIN(deadline, t);
    }
    if (iface->pace_due != 0) {       /* a paced connection's next send (udp_cc.c) */
        if (iface->pace_due <= now) { /* (once: it may be stale, its timer checked out) */
            iface->pace_due = 0;
            return FERRY_ERR_BUSY;
        }
        deadline = deadline == 0 ? iface->pace_due : FY_MIN(deadline, iface->pace_due);
    }
    {
        uint64_t live = fy_udp_live_deadline(iface, now);
        if (live != 0 && (deadline == 0 || live < deadline))
            deadline = live;
    }
    if (iface->fault.enabled) {
        uint64_t held = fy_udp_fault_poll(iface, now);
        if (held != 0 && (deadline == 0 || held < deadline))
            deadline = held;
    }
    if (deadline != 0) {
        uint64_t d = deadline > now ? deadline - now : 1000;
        its.it_value.tv_sec = (time_t)(d / FY_NSEC_PER_SEC);
        its.it_value.tv_nsec = (long)(d % FY_NSEC_PER_SEC);
    }
    /* Setting the timer (even to disarmed) also clears a past expiry. */
    timerfd_settime(iface->tfd, 0, &its, NULL);
    return FERRY_OK;
}

void fy_udp_conn_print(const fy_udp_conn_t *c, FILE *f)
{
    char buf[FY_NETIF_ADDR_STRLEN];
    const ferry_ep_stats_t *s = &c->stats;
    fprintf(f,
            "  ep %08x -> %s peer %08x %s%s: tx %llu msgs %llu B, rx %llu msgs %llu B, "
            "resent %llu (fast %llu, timeouts %llu), dup acks %llu, dup segs %llu (early %llu), "
            "rtt %.1f us rto %.1f us (min %.1f), reorder window %u/4 min rtt, dsacks %llu, "
            "cwnd %u (cut %llu), window %u/%u, inflight %llu/%llu B, seg %u B, chunks copied %llu",
            c->id, fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)), c->peer_id,
            c->owned ? "" : "(passive)",
            c->state == FY_UDP_CONN_CONNECTED    ? ""
            : c->state == FY_UDP_CONN_CONNECTING ? " connecting"
                                                 : " failed",
            (unsigned long long)s->tx_msgs, (unsigned long long)s->tx_bytes,
            (unsigned long long)s->rx_msgs, (unsigned long long)s->rx_bytes,
            (unsigned long long)s->retransmits, (unsigned long long)s->fast_retransmits,
            (unsigned long long)s->timeouts, (unsigned long long)s->dup_acks,
            (unsigned long long)s->drops_duplicate, (unsigned long long)c->rx_early,
            (double)c->srtt / 1e3, (double)c->rto / 1e3, (double)c->min_rtt / 1e3, c->reo_quarters,
            (unsigned long long)c->dsacks, c->cwnd, (unsigned long long)c->cwnd_cuts,
            c->snd_nxt - c->snd_una, c->wnd, (unsigned long long)c->inflight,
            (unsigned long long)c->credit, c->seg_size, (unsigned long long)c->rx_copied);
    if (s->timeouts != 0 || s->fast_retransmits != 0)
        fprintf(f,
                ", timeouts: %u holes %u resends %u above %u silent, %u spurious (RTO floor "
                "%.1f us); fast: %u again",
                c->to_kind[FY_UDP_TO_HOLE], c->to_kind[FY_UDP_TO_RESENT],
                c->to_kind[FY_UDP_TO_ABOVE], c->to_kind[FY_UDP_TO_SILENT], c->spurious_rtos,
                (double)FY_MAX(c->rto_floor, c->iface->opts->rto_min) / 1e3, c->fast_again);
    if (c->pace_ok)
        fprintf(f,
                ", model: bw %.1f MB/s%s min rtt %.1f us cwnd %u, pacing %.1f MB/s (%llu waits), "
                "%llu congestion cuts",
                (double)c->bw / 1e6, c->bw_lo != 0 && c->bw_lo < c->bw ? " (cut)" : "",
                (double)c->cc_min_rtt / 1e3, c->cwnd, (double)c->pace_rate / 1e6,
                (unsigned long long)c->paced_waits, (unsigned long long)c->cong_cuts);
    fputc('\n', f);
}

int fy_udp_stats_wanted(const fy_udp_iface_t *iface)
{
    const char *e = getenv("FERRY_STATS");
    return iface->opts->stats || (e != NULL && *e != '\0' && *e != '0' && *e != 'n');
}

void fy_udp_iface_print(fy_tl_iface_t *tl_iface, FILE *f)
{
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    char buf[FY_NETIF_ADDR_STRLEN];
    const fy_udp_fault_t *ft = &iface->fault;

    fprintf(f,
            "udp %s %s ports %u/%u seg %u B window %u: rx %llu tx %llu datagrams, "
            "dropped: bad key %llu, malformed %llu, truncated %llu, bad checksum %llu, "
            "unknown ep %llu, beyond window %llu, no stash room %llu, socket full %llu; tx "
            "errors %llu\n",
            iface->super.dev_name, fy_netif_addr_str(&iface->addr, 1, buf, sizeof(buf)),
            iface->ch[0].port, iface->ch[1].port, iface->seg_size, iface->wsize,
            (unsigned long long)iface->rx_dgrams, (unsigned long long)iface->tx_dgrams,
            (unsigned long long)iface->drops_bad_key, (unsigned long long)iface->drops_malformed,
            (unsigned long long)iface->drops_trunc, (unsigned long long)iface->drops_csum,
            (unsigned long long)iface->drops_unknown_ep, (unsigned long long)iface->drops_window,
            (unsigned long long)iface->drops_stash, (unsigned long long)iface->drops_sock,
            (unsigned long long)iface->tx_errors);
    fprintf(f,
            "  liveness port %u: heartbeats sent %llu answered %llu, peers dead %llu; cookies "
            "sent %llu, half-open refused %llu (passive %u), idle reclaimed %llu, resets sent "
            "%llu received %llu; handshakes queued %llu\n",
            iface->live_port, (unsigned long long)iface->hb_sent,
            (unsigned long long)iface->hb_acked, (unsigned long long)iface->peers_dead,
            (unsigned long long)iface->cookies_sent, (unsigned long long)iface->half_open_refused,
            iface->npassive, (unsigned long long)iface->passive_reclaimed,
            (unsigned long long)iface->resets_sent, (unsigned long long)iface->resets_rx,
            (unsigned long long)iface->hs_waited);
    if (ft->enabled)
        fprintf(f,
                "  fault injector: dropped %llu, duplicated %llu, reordered %llu, delayed "
                "%llu, corrupted %llu, oversize %llu\n",
                (unsigned long long)ft->n_drop, (unsigned long long)ft->n_dup,
                (unsigned long long)ft->n_reorder, (unsigned long long)ft->n_delay,
                (unsigned long long)ft->n_corrupt, (unsigned long long)ft->n_oversize);
    for (uint32_t i = 1; i < iface->conn_cap; i++)
        if (iface->conns[i] != NULL)
            fy_udp_conn_print(iface->conns[i], f);
}
