/*
 * tcp_accept.c - the accepting side of the tcp transport's handshake: the listener, the
 * sockets accepted but not yet known, the HELLO that names their sender, and the answer.
 *
 * An accepted socket is a stranger until its HELLO arrives: a wrong magic, version, job key or
 * iface id, or silence past CONN_TIMEOUT, closes it and counts it, and no peer is created for
 * it.  A good HELLO is matched to the peer of its sender's iface id: the socket becomes a link
 * of that peer (the acceptor adopts the connection), or is answered REJECT (simultaneous
 * connect: the lower iface id keeps its own outgoing connection, tcp_conn.c has the rule), or
 * waits parked while an older connection of that peer is still up, and is handled once that
 * one ends.  When accept() fails for want of a resource the listener pauses for a while
 * instead of spinning.  This is apart from tcp_conn.c (peers, links, the connector's side,
 * failures, timers, teardown) only to keep each file readable: the two share the helpers
 * declared in tcp.h, and nothing here changed in the split.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tl/tcp/tcp.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

void fy_tcp_accept_drop(fy_tcp_iface_t *iface, fy_tcp_accept_t *a)
{
    if (a->fd >= 0) {
        epoll_ctl(iface->epfd, EPOLL_CTL_DEL, a->fd, NULL);
        close(a->fd);
        a->fd = -1;
    }
    fy_list_del(&a->elem);
    fy_list_add_tail(&iface->dead_accepts, &a->elem);
}

static void listener_events(fy_tcp_iface_t *iface, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = &iface->listen_kind};
    if (epoll_ctl(iface->epfd, EPOLL_CTL_MOD, iface->listen_fd, &ev) != 0)
        fy_debug("tcp: epoll_ctl on the listener: %s", strerror(errno));
}

/*
 * accept() failed for want of a resource: the connection stays in the kernel's backlog and
 * the listener stays readable, so trying again at once would spin.  Stop watching the
 * listener for a while (1 ms, doubling up to 100 ms while it keeps failing) and say so once
 * per FY_TCP_ACCEPT_LOG_NS.
 */
static void accept_pause(fy_tcp_iface_t *iface, int err)
{
    uint64_t now = fy_time_ns();
    uint64_t b = iface->accept_backoff_ns * 2;
    b = FY_MAX(b, FY_TCP_ACCEPT_BACKOFF_MIN_NS);
    iface->accept_backoff_ns = FY_MIN(b, FY_TCP_ACCEPT_BACKOFF_MAX_NS);
    iface->accept_fails++;
    if (iface->accept_log_ns == 0 || now - iface->accept_log_ns >= FY_TCP_ACCEPT_LOG_NS) {
        uint64_t since = iface->accept_fails - iface->accept_fails_logged;
        fy_warn("tcp: accepting a connection failed: %s; retrying every %.0f ms at most while "
                "it fails (%llu failure%s since the last such message; raise the limit of open "
                "files?)",
                strerror(err), (double)FY_TCP_ACCEPT_BACKOFF_MAX_NS / 1e6,
                (unsigned long long)since, since == 1 ? "" : "s");
        iface->accept_log_ns = now;
        iface->accept_fails_logged = iface->accept_fails;
    }
    listener_events(iface, 0);
    iface->accept_resume_ns = now + iface->accept_backoff_ns;
    fy_tcp_timer_arm_first(iface, iface->accept_backoff_ns);
}

/* From the timer: is the pause over?  Returns 1 while the listener is still paused. */
int fy_tcp_accept_resume(fy_tcp_iface_t *iface, uint64_t now)
{
    if (iface->accept_resume_ns == 0)
        return 0;
    if (now < iface->accept_resume_ns)
        return 1;
    iface->accept_resume_ns = 0;
    listener_events(iface, EPOLLIN); /* level-triggered: waiting connections show at once */
    return 0;
}

void fy_tcp_accept_new(fy_tcp_iface_t *iface)
{
    if (iface->accept_resume_ns != 0)
        return; /* paused (an event read before the pause began) */
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd =
            accept4(iface->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                accept_pause(iface, errno);
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                fy_warn("tcp: accept failed: %s", strerror(errno));
            return;
        }
        if (iface->accept_backoff_ns != 0) {
            fy_info("tcp: accepting connections again after %llu failed attempts",
                    (unsigned long long)iface->accept_fails);
            iface->accept_backoff_ns = 0;
        }
        fy_tcp_accept_t *a = calloc(1, sizeof(*a));
        if (a == NULL) {
            close(fd);
            return;
        }
        fy_tcp_sock_tune(fd, iface->cfg);
        a->kind = FY_TCP_OBJ_ACCEPT;
        a->fd = fd;
        a->start_ns = fy_time_ns();
        fy_netif_addr_from_sockaddr((struct sockaddr *)&ss, &a->from);
        fy_list_add_tail(&iface->accepting, &a->elem);
        iface->accepted++;
        if (fy_tcp_epoll_set(iface, fd, a, &a->ev, EPOLLIN) != 0) {
            fy_tcp_accept_drop(iface, a);
            continue;
        }
        fy_tcp_timer_arm(iface);
    }
}

static void answer(fy_tcp_iface_t *iface, fy_tcp_accept_t *a, uint8_t kind)
{
    fy_tcp_hello_t r;
    fy_tcp_fill_hello(iface, &r, kind, a->hello.link, a->hello.nlinks, le64toh(a->hello.src_iface),
                      le64toh(a->hello.conn_id));
    if (fy_tcp_send_hello(a->fd, &r) != 0)
        fy_debug("tcp: cannot answer a handshake: %s", strerror(errno));
}

/* Become the acceptor of connection conn_id: drop whatever attempt the peer had. */
static void adopt(fy_tcp_peer_t *p, const fy_tcp_hello_t *h)
{
    if (p->iface->hot == p)
        p->iface->hot = NULL;
    for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++) {
        fy_tcp_link_free(p->iface, p->links[i]);
        p->links[i] = NULL;
    }
    p->conn_id = le64toh(h->conn_id);
    p->outgoing = 0;
    p->nlinks = h->nlinks;
    p->nup = 0;
    p->state = FY_TCP_PEER_CONNECTING;
    p->remote_closed = 0;
    p->conn_start_ns = fy_time_ns();
    fy_tcp_conn_reset_seq(p);
    if (!p->have_raddr) {
        p->raddr = h->src_addr;
        p->have_raddr = 1;
    }
    p->remote_host = le64toh(h->host_id);
}

static void attach(fy_tcp_iface_t *iface, fy_tcp_peer_t *p, fy_tcp_accept_t *a)
{
    unsigned idx = a->hello.link;
    if (p->links[idx] != NULL) {
        iface->drops_malformed++;
        fy_warn("tcp: a second link %u of one connection: closing it", idx);
        fy_tcp_accept_drop(iface, a);
        return;
    }
    fy_tcp_link_t *link = fy_tcp_link_new(p, idx, a->fd);
    if (link == NULL) {
        fy_tcp_accept_drop(iface, a);
        return;
    }
    fy_tcp_sock_congestion(a->fd, iface->cfg, p->remote_host == iface->md->host_id);
    answer(iface, a, FY_TCP_ACCEPT);
    link->ev = FY_TCP_EV_REG; /* registered (by the accept): the MOD below points it here */
    a->fd = -1;
    fy_tcp_accept_drop(iface, a);
    p->links[idx] = link;
    link->state = FY_TCP_LINK_UP;
    fy_tcp_epoll_set(iface, link->fd, link, &link->ev, EPOLLIN);
    if (++p->nup == p->nlinks)
        fy_tcp_peer_up(p);
}

static void handle_hello(fy_tcp_iface_t *iface, fy_tcp_accept_t *a)
{
    const fy_tcp_hello_t *h = &a->hello;
    uint64_t remote = le64toh(h->src_iface), conn = le64toh(h->conn_id);
    fy_tcp_peer_t *p = NULL;
    if (remote == iface->id) {
        /* our own ep connecting to us: the accepted end is a peer of its own */
        fy_list_t *e;
        for (e = iface->peers.next; e != &iface->peers; e = e->next) {
            fy_tcp_peer_t *q = fy_container_of(e, fy_tcp_peer_t, elem);
            if (!q->in_table && q->remote_id == remote && q->conn_id == conn && !q->outgoing &&
                q->state == FY_TCP_PEER_CONNECTING)
                p = q;
        }
        if (p == NULL && (p = fy_tcp_peer_new(iface, remote)) != NULL)
            adopt(p, h);
    } else {
        p = fy_tcp_peer_get(iface, remote, 1);
    }
    if (p == NULL) {
        fy_tcp_accept_drop(iface, a);
        return;
    }
    switch (p->state) {
    case FY_TCP_PEER_IDLE:
        adopt(p, h);
        break;
    case FY_TCP_PEER_CONNECTING:
        if (p->conn_id == conn && !p->outgoing)
            break; /* another link of the connection being accepted */
        if (p->outgoing && iface->id < remote) {
            answer(iface, a, FY_TCP_REJECT); /* simultaneous connect: ours wins */
            fy_tcp_accept_drop(iface, a);
            return;
        }
        adopt(p, h); /* theirs wins (or they restarted their attempt) */
        break;
    case FY_TCP_PEER_UP:
        if (p->conn_id == conn) {
            attach(iface, p, a); /* rejects a duplicate link */
            return;
        }
        /* A new connection while the old one is up: either the remote dropped the old one
         * (we have not read that yet: wait for it to end, with its last frames), or it is
         * the remote's losing half of a simultaneous connect, which the remote closes as
         * soon as it sees ours: watch for that. */
        a->parked = 1;
        fy_tcp_epoll_set(iface, a->fd, a, &a->ev, EPOLLRDHUP);
        return;
    default:
        fy_tcp_accept_drop(iface, a);
        return;
    }
    attach(iface, p, a);
}

void fy_tcp_accept_retry(fy_tcp_iface_t *iface, uint64_t remote_id)
{
    fy_list_t *e, *t;
    for (e = iface->accepting.next, t = e->next; e != &iface->accepting; e = t, t = e->next) {
        fy_tcp_accept_t *a = fy_container_of(e, fy_tcp_accept_t, elem);
        if (a->parked && le64toh(a->hello.src_iface) == remote_id) {
            a->parked = 0;
            fy_tcp_epoll_set(iface, a->fd, a, &a->ev, EPOLLIN);
            handle_hello(iface, a);
            return; /* handle_hello may retry others; the list changed */
        }
    }
}

void fy_tcp_accept_read(fy_tcp_iface_t *iface, fy_tcp_accept_t *a, uint32_t events)
{
    if (a->fd < 0)
        return;
    char from[FY_NETIF_ADDR_STRLEN];
    fy_netif_addr_str(&a->from, 0, from, sizeof(from));
    if (a->parked) {
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLIN)) {
            fy_debug("tcp: %s gave up a connection attempt", from);
            fy_tcp_accept_drop(iface, a);
        }
        return;
    }
    struct iovec v = {(char *)&a->hello + a->got, sizeof(a->hello) - a->got};
    ssize_t n = fy_tcp_recvv(a->fd, &v, 1);
    if (n == 0 || (n < 0 && errno != EAGAIN)) {
        fy_debug("tcp: %s closed before completing a handshake", from);
        iface->drops_malformed += a->got != 0;
        fy_tcp_accept_drop(iface, a);
        return;
    }
    if (n < 0)
        return;
    a->got += (size_t)n;
    if (a->got >= sizeof(uint32_t) && le32toh(a->hello.magic) != FY_TCP_MAGIC)
        goto malformed;
    if (a->got < sizeof(a->hello))
        return;
    const fy_tcp_hello_t *h = &a->hello;
    if (le16toh(h->version) != FY_TCP_VERSION || h->kind != FY_TCP_HELLO || h->nlinks < 1 ||
        h->nlinks > FY_TCP_MAX_LINKS || h->link >= h->nlinks ||
        (h->src_addr.family != 4 && h->src_addr.family != 6))
        goto malformed;
    if (le64toh(h->job_key) != iface->super.params.job_key) {
        iface->drops_bad_key++;
        fy_warn("tcp: dropping a connection from %s: it belongs to another job (key %016llx)", from,
                (unsigned long long)le64toh(h->job_key));
        fy_tcp_accept_drop(iface, a);
        return;
    }
    if (le64toh(h->dst_iface) != iface->id) {
        iface->drops_unknown++;
        fy_warn("tcp: dropping a connection from %s: it is for interface %016llx, not this one",
                from, (unsigned long long)le64toh(h->dst_iface));
        fy_tcp_accept_drop(iface, a);
        return;
    }
    handle_hello(iface, a);
    return;
malformed:
    iface->drops_malformed++;
    fy_warn("tcp: dropping a connection from %s: not a ferry tcp handshake", from);
    fy_tcp_accept_drop(iface, a);
}
