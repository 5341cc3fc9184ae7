/*
 * tcp_conn.c - connections of the tcp transport: peers and their links, the handshake,
 * strangers, simultaneous connects, failures and the timers that bound connection setup.
 * The accepting side (listener, accepted sockets, their HELLO) is in tcp_accept.c.
 *
 * A peer is the connection to one remote iface, whoever opened it: ep_create connects (all
 * `links` sockets at once, one conn_id for the attempt), and an incoming HELLO is matched to
 * the peer of its sender's iface id.  When both sides connect at once, the side with the
 * lower iface id keeps its outgoing connection: it REJECTs the other's HELLO, and the other
 * side, on seeing the lower id's HELLO, abandons its own attempt and accepts.  Both sides
 * apply the same rule to the same pair of ids, so exactly one connection survives.  Nothing
 * but the handshake is written before the connection is up; frames sent meanwhile wait in
 * the peer's preq, so abandoning an attempt loses nothing.
 *
 * How many links, and which congestion control, depends on where the peer is (its host id
 * comes in its device address, or in its HELLO): one unpaced (reno) link within a host, two
 * links under the system's congestion control to another host (FERRY_TCP_LINKS and
 * FERRY_TCP_CONGESTION override); the connector's count is the connection's.
 *
 * A stranger (wrong magic, version, job key or iface id, or silence past CONN_TIMEOUT) is
 * closed and counted; no peer is created for it.  A peer fails as a whole (reset, EOF without
 * a CLOSE, keepalive, malformed frame): its sockets close at once, and from progress its
 * queued sends and pending requests complete with the error and each of its eps hears of it
 * once through err_cb.  A CLOSE (the remote iface closing) with nothing outstanding is no
 * error: the peer goes idle and the next send reconnects (and fails then if nobody listens).
 */
#include <errno.h>
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

/* ---- links ------------------------------------------------------------------------------ */

fy_tcp_link_t *fy_tcp_link_new(fy_tcp_peer_t *peer, unsigned index, int fd)
{
    fy_tcp_link_t *link = calloc(1, sizeof(*link));
    if (link == NULL)
        return NULL;
    link->rx_size = peer->iface->cfg->rx_buf;
    link->rxbuf = malloc(link->rx_size);
    if (link->rxbuf == NULL) {
        free(link);
        return NULL;
    }
    link->kind = FY_TCP_OBJ_LINK;
    link->fd = fd;
    link->peer = peer;
    link->index = index;
    fy_list_init(&link->txq);
    fy_list_init(&link->ready_elem);
    return link;
}

static void link_close(fy_tcp_link_t *link)
{
    if (link->fd >= 0) {
        epoll_ctl(link->peer->iface->epfd, EPOLL_CTL_DEL, link->fd, NULL);
        close(link->fd);
        link->fd = -1;
    }
    link->state = FY_TCP_LINK_CLOSED;
    link->ev = 0;
    fy_list_del(&link->ready_elem);
}

/* Links are freed at the end of progress: an event of this very epoll batch may still
 * point to one. */
void fy_tcp_link_free(fy_tcp_iface_t *iface, fy_tcp_link_t *link)
{
    if (link == NULL)
        return;
    link_close(link);
    fy_tcp_dest_abort(iface, &link->frame, FERRY_ERR_CANCELED);
    fy_list_add_tail(&iface->dead_links, &link->ready_elem);
}

/* Write a handshake record on a fresh socket (it always fits; a short write is a failure). */
int fy_tcp_send_hello(int fd, const fy_tcp_hello_t *h)
{
    size_t done = 0;
    while (done < sizeof(*h)) {
        struct iovec v = {(char *)h + done, sizeof(*h) - done};
        ssize_t n = fy_tcp_sendv(fd, &v, 1);
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

void fy_tcp_fill_hello(fy_tcp_iface_t *iface, fy_tcp_hello_t *h, uint8_t kind, unsigned link,
                       unsigned nlinks, uint64_t dst, uint64_t conn_id)
{
    memset(h, 0, sizeof(*h));
    h->magic = htole32(FY_TCP_MAGIC);
    h->version = htole16(FY_TCP_VERSION);
    h->kind = kind;
    h->link = (uint8_t)link;
    h->nlinks = (uint8_t)nlinks;
    h->job_key = htole64(iface->super.params.job_key);
    h->src_iface = htole64(iface->id);
    h->dst_iface = htole64(dst);
    h->conn_id = htole64(conn_id);
    h->worker_uuid = htole64(iface->super.params.worker_uuid);
    h->src_addr = iface->addr;
    h->host_id = htole64(iface->md->host_id);
}

static uint64_t timer_period(const fy_tcp_iface_t *iface)
{
    uint64_t period = iface->cfg->conn_timeout / 4;
    period = FY_MAX(period, 10 * FY_NSEC_PER_MSEC);
    return FY_MIN(period, 250 * FY_NSEC_PER_MSEC);
}

static void ns_to_timespec(uint64_t ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(ns / FY_NSEC_PER_SEC);
    ts->tv_nsec = (long)(ns % FY_NSEC_PER_SEC);
}

void fy_tcp_timer_arm(fy_tcp_iface_t *iface)
{
    if (iface->timer_armed || iface->timer_fd < 0)
        return;
    struct itimerspec its;
    ns_to_timespec(timer_period(iface), &its.it_interval);
    its.it_value = its.it_interval;
    if (timerfd_settime(iface->timer_fd, 0, &its, NULL) == 0)
        iface->timer_armed = 1;
}

/* Fire the (periodic) timer first after `first` ns: an accept pause ends then. */
void fy_tcp_timer_arm_first(fy_tcp_iface_t *iface, uint64_t first)
{
    if (iface->timer_fd < 0)
        return;
    struct itimerspec its;
    ns_to_timespec(timer_period(iface), &its.it_interval);
    ns_to_timespec(first, &its.it_value);
    if (timerfd_settime(iface->timer_fd, 0, &its, NULL) == 0)
        iface->timer_armed = 1;
}

static void timer_disarm(fy_tcp_iface_t *iface)
{
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    if (iface->timer_armed)
        timerfd_settime(iface->timer_fd, 0, &its, NULL);
    iface->timer_armed = 0;
}

/* ---- peers ------------------------------------------------------------------------------ */

fy_tcp_peer_t *fy_tcp_peer_new(fy_tcp_iface_t *iface, uint64_t remote_id)
{
    fy_tcp_peer_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->iface = iface;
    p->remote_id = remote_id;
    p->state = FY_TCP_PEER_IDLE;
    fy_list_init(&p->eps);
    fy_list_init(&p->preq);
    fy_list_init(&p->ops);
    fy_list_add_tail(&iface->peers, &p->elem);
    return p;
}

fy_tcp_peer_t *fy_tcp_peer_get(fy_tcp_iface_t *iface, uint64_t remote_id, int create)
{
    fy_tcp_peer_t *p = fy_hash_get(&iface->peers_by_id, remote_id);
    if (p != NULL && p->state != FY_TCP_PEER_FAILED)
        return p;
    if (!create)
        return NULL;
    if (p != NULL) { /* a failed peer keeps serving its old eps, out of the table */
        fy_hash_del(&iface->peers_by_id, remote_id);
        p->in_table = 0;
    }
    p = fy_tcp_peer_new(iface, remote_id);
    if (p == NULL)
        return NULL;
    if (fy_hash_put(&iface->peers_by_id, remote_id, p) != FERRY_OK) {
        fy_list_del(&p->elem);
        free(p);
        return NULL;
    }
    p->in_table = 1;
    return p;
}

static void peer_close_links(fy_tcp_peer_t *p)
{
    for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++)
        if (p->links[i] != NULL)
            link_close(p->links[i]);
}

static void peer_free(fy_tcp_peer_t *p)
{
    fy_tcp_iface_t *iface = p->iface;
    if (iface->hot == p)
        iface->hot = NULL;
    for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++) {
        if (p->links[i] == NULL)
            continue;
        fy_list_t *e;
        while ((e = fy_list_pop_head(&p->links[i]->txq)) != NULL)
            fy_tcp_tx_done(p, fy_container_of(e, fy_tcp_tx_t, elem), FERRY_ERR_CANCELED);
        fy_tcp_link_free(iface, p->links[i]);
        p->links[i] = NULL;
    }
    fy_list_t *e;
    while ((e = fy_list_pop_head(&p->preq)) != NULL)
        fy_tcp_tx_done(p, fy_container_of(e, fy_tcp_tx_t, elem), FERRY_ERR_CANCELED);
    while ((e = fy_list_pop_head(&p->ops)) != NULL) {
        fy_tcp_op_t *op = fy_container_of(e, fy_tcp_op_t, elem);
        if (op->comp != NULL)
            op->comp->cb(op->comp, FERRY_ERR_CANCELED);
        fy_tcp_op_free(iface, op);
    }
    fy_tcp_dest_abort(iface, &p->stripe, FERRY_ERR_CANCELED);
    if (p->in_table)
        fy_hash_del(&iface->peers_by_id, p->remote_id);
    fy_list_del(&p->elem);
    free(p);
}

void fy_tcp_peer_maybe_free(fy_tcp_peer_t *p)
{
    if (!fy_list_is_empty(&p->eps) || p->notify ||
        (p->state != FY_TCP_PEER_FAILED && p->state != FY_TCP_PEER_IDLE))
        return;
    fy_tcp_iface_t *iface = p->iface;
    if (p->in_table) {
        fy_hash_del(&iface->peers_by_id, p->remote_id);
        p->in_table = 0;
    }
    fy_list_del(&p->elem);
    if (iface->in_progress)
        fy_list_add_tail(&iface->dead, &p->elem); /* may be on the stack of this progress */
    else
        peer_free(p);
}

static const char *peer_str(const fy_tcp_peer_t *p, char *buf, size_t len)
{
    char a[FY_NETIF_ADDR_STRLEN] = "?";
    if (p->have_raddr)
        fy_netif_addr_str(&p->raddr, 0, a, sizeof(a));
    snprintf(buf, len, "%s (iface %016llx)", a, (unsigned long long)p->remote_id);
    return buf;
}

void fy_tcp_peer_fail(fy_tcp_peer_t *p, ferry_status_t status, const char *why)
{
    if (p->state == FY_TCP_PEER_FAILED)
        return;
    fy_tcp_iface_t *iface = p->iface;
    char s[128];
    if (!fy_list_is_empty(&p->eps))
        fy_warn("tcp: connection to %s failed: %s (%s)", peer_str(p, s, sizeof(s)), why,
                ferry_status_string(status));
    else
        fy_debug("tcp: connection from %s ended: %s (%s)", peer_str(p, s, sizeof(s)), why,
                 ferry_status_string(status));
    p->state = FY_TCP_PEER_FAILED;
    p->fail_status = status;
    if (iface->hot == p)
        iface->hot = NULL;
    peer_close_links(p);
    if (p->in_table) {
        fy_hash_del(&iface->peers_by_id, p->remote_id);
        p->in_table = 0;
    }
    if (!p->notify) {
        p->notify = 1;
        fy_list_del(&p->elem);
        fy_list_add_tail(&iface->notify, &p->elem);
    }
    fy_tcp_accept_retry(iface, p->remote_id);
}

/* From progress: complete what the failed peers had outstanding, tell their eps. */
void fy_tcp_peer_notify(fy_tcp_iface_t *iface)
{
    fy_list_t *e;
    while ((e = fy_list_pop_head(&iface->notify)) != NULL) {
        fy_tcp_peer_t *p = fy_container_of(e, fy_tcp_peer_t, elem);
        fy_list_add_tail(&iface->peers, &p->elem);
        ferry_status_t st = p->fail_status;
        fy_list_t *t;
        for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++)
            while (p->links[i] != NULL && (t = fy_list_pop_head(&p->links[i]->txq)) != NULL)
                fy_tcp_tx_done(p, fy_container_of(t, fy_tcp_tx_t, elem), st);
        while ((t = fy_list_pop_head(&p->preq)) != NULL)
            fy_tcp_tx_done(p, fy_container_of(t, fy_tcp_tx_t, elem), st);
        while ((t = fy_list_pop_head(&p->ops)) != NULL) {
            fy_tcp_op_t *op = fy_container_of(t, fy_tcp_op_t, elem);
            if (op->comp != NULL)
                op->comp->cb(op->comp, st);
            fy_tcp_op_free(iface, op);
        }
        for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++)
            if (p->links[i] != NULL) {
                p->links[i]->rx_dest = NULL;
                fy_tcp_dest_abort(iface, &p->links[i]->frame, st);
            }
        fy_tcp_dest_abort(iface, &p->stripe, st);
        p->rx_active = 0;
        /* each ep once; a callback may destroy eps, so rescan from the head each time */
        for (;;) {
            fy_tcp_ep_t *victim = NULL;
            fy_list_t *x;
            for (x = p->eps.next; x != &p->eps; x = x->next) {
                fy_tcp_ep_t *ep = fy_container_of(x, fy_tcp_ep_t, elem);
                if (!ep->failed) {
                    victim = ep;
                    break;
                }
            }
            if (victim == NULL)
                break;
            victim->failed = 1;
            if (iface->super.params.err_cb != NULL)
                iface->super.params.err_cb(iface->super.params.err_arg, &victim->super, st);
        }
        p->notify = 0;
        fy_tcp_peer_maybe_free(p);
    }
}

/* The remote iface said CLOSE and its sockets ended: idle if nothing was lost, else fail. */
void fy_tcp_peer_closed(fy_tcp_peer_t *p)
{
    int outstanding = !fy_list_is_empty(&p->ops) || !fy_list_is_empty(&p->preq) || p->rx_active;
    for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++)
        if (p->links[i] != NULL)
            outstanding |= !fy_list_is_empty(&p->links[i]->txq) || p->links[i]->rx_dest != NULL;
    if (outstanding) {
        fy_tcp_peer_fail(p, FERRY_ERR_CONNECTION_RESET, "remote closed with operations pending");
        return;
    }
    char s[128];
    fy_debug("tcp: %s closed its interface", peer_str(p, s, sizeof(s)));
    if (p->iface->hot == p)
        p->iface->hot = NULL;
    for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++) {
        fy_tcp_link_free(p->iface, p->links[i]);
        p->links[i] = NULL;
    }
    p->state = FY_TCP_PEER_IDLE;
    p->remote_closed = 0;
    p->nup = 0;
    p->rx_seq = p->tx_seq = 0;
    p->next_op_id = p->next_ans_id = 0;
    p->unflushed = 0;
    fy_tcp_iface_t *iface = p->iface;
    uint64_t id = p->remote_id;
    fy_tcp_peer_maybe_free(p);
    fy_tcp_accept_retry(iface, id);
}

/*
 * A new connection attempt (ours, or the remote's we adopt) starts its striped-frame numbers
 * at 0.  This is done here, before any byte of the new connection can arrive, and not when
 * the connection comes up: the acceptor may send right after its ACCEPT, so the connector can
 * read striped frames on its first links (and count them) before the last link's ACCEPT
 * makes the connection up.  A reassembly left over from an abandoned attempt is dropped.
 */
void fy_tcp_conn_reset_seq(fy_tcp_peer_t *p)
{
    if (p->rx_active)
        fy_tcp_dest_abort(p->iface, &p->stripe, FERRY_ERR_CONNECTION_RESET);
    p->rx_active = 0;
    p->rx_seq = p->tx_seq = 0;
}

ferry_status_t fy_tcp_peer_connect(fy_tcp_peer_t *p)
{
    fy_tcp_iface_t *iface = p->iface;
    if (!p->have_raddr)
        return FERRY_ERR_UNREACHABLE;
    struct sockaddr_storage ss;
    socklen_t sl = fy_netif_addr_to_sockaddr(&p->raddr, &ss);
    p->conn_id = fy_random64();
    p->outgoing = 1;
    p->state = FY_TCP_PEER_CONNECTING;
    int local = p->remote_host == iface->md->host_id;
    p->nlinks = iface->cfg->links != 0 ? (unsigned)iface->cfg->links : local ? 1 : 3;
    p->nup = 0;
    p->remote_closed = 0;
    p->conn_start_ns = fy_time_ns();
    fy_tcp_conn_reset_seq(p);
    ferry_status_t st = FERRY_OK;
    for (unsigned i = 0; i < p->nlinks; i++) {
        int fd = fy_tcp_socket(p->raddr.family, iface->cfg);
        if (fd < 0) {
            st = FERRY_ERR_IO;
            break;
        }
        fy_tcp_sock_congestion(fd, iface->cfg, local);
        fy_tcp_link_t *link = fy_tcp_link_new(p, i, fd);
        if (link == NULL) {
            close(fd);
            st = FERRY_ERR_NO_MEMORY;
            break;
        }
        p->links[i] = link;
        link->state = FY_TCP_LINK_CONNECTING;
        if (connect(fd, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS) {
            char a[FY_NETIF_ADDR_STRLEN];
            fy_warn("tcp: connect to %s failed: %s", fy_netif_addr_str(&p->raddr, 0, a, sizeof(a)),
                    strerror(errno));
            st = fy_status_from_errno(errno);
            if (st != FERRY_ERR_NO_MEMORY)
                st = FERRY_ERR_UNREACHABLE;
            break;
        }
        if (fy_tcp_epoll_set(iface, fd, link, &link->ev, EPOLLOUT) != 0) {
            st = FERRY_ERR_IO;
            break;
        }
    }
    if (st != FERRY_OK) {
        for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++) {
            fy_tcp_link_free(iface, p->links[i]);
            p->links[i] = NULL;
        }
        p->state = FY_TCP_PEER_IDLE;
        return st;
    }
    fy_tcp_timer_arm(iface);
    return FERRY_OK;
}

void fy_tcp_peer_up(fy_tcp_peer_t *p)
{
    p->state = FY_TCP_PEER_UP; /* (striped-frame numbers were reset when the attempt began) */
    char s[128];
    fy_debug("tcp: connected to %s over %u link(s), %s", peer_str(p, s, sizeof(s)), p->nlinks,
             p->outgoing ? "outgoing" : "accepted");
    fy_tcp_peer_up_flush(p);
}

/* Our connect of one link finished (EPOLLOUT): send HELLO, or fail. */
void fy_tcp_link_connected(fy_tcp_link_t *link)
{
    fy_tcp_peer_t *p = link->peer;
    fy_tcp_iface_t *iface = p->iface;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(link->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err == 0) {
        fy_tcp_hello_t h;
        fy_tcp_fill_hello(iface, &h, FY_TCP_HELLO, link->index, p->nlinks, p->remote_id,
                          p->conn_id);
        if (fy_tcp_send_hello(link->fd, &h) != 0)
            err = errno != 0 ? errno : EIO;
    }
    if (err != 0) {
        char s[128];
        fy_warn("tcp: connecting to %s: %s", peer_str(p, s, sizeof(s)), strerror(err));
        fy_tcp_peer_fail(p, FERRY_ERR_UNREACHABLE, "connect failed");
        return;
    }
    link->state = FY_TCP_LINK_HELLO_SENT;
    fy_tcp_epoll_set(iface, link->fd, link, &link->ev, EPOLLIN);
}

/* The acceptor's answer to our HELLO is in the link's buffer (or not yet): 1 = link up,
 * 0 = wait for more bytes, -1 = the link is gone. */
int fy_tcp_link_hello_answer(fy_tcp_link_t *link)
{
    fy_tcp_peer_t *p = link->peer;
    fy_tcp_iface_t *iface = p->iface;
    if (link->rx_tail - link->rx_head < sizeof(fy_tcp_hello_t))
        return 0;
    fy_tcp_hello_t h;
    memcpy(&h, link->rxbuf + link->rx_head, sizeof(h));
    link->rx_head += sizeof(h);
    int ok = le32toh(h.magic) == FY_TCP_MAGIC && le16toh(h.version) == FY_TCP_VERSION &&
             (h.kind == FY_TCP_ACCEPT || h.kind == FY_TCP_REJECT) && h.link == link->index &&
             le64toh(h.job_key) == iface->super.params.job_key &&
             le64toh(h.src_iface) == p->remote_id && le64toh(h.dst_iface) == iface->id &&
             le64toh(h.conn_id) == p->conn_id;
    if (!ok) {
        iface->drops_malformed++;
        fy_tcp_peer_fail(p, FERRY_ERR_UNREACHABLE,
                         "the listener answered with a foreign or malformed handshake");
        return -1;
    }
    if (h.kind == FY_TCP_REJECT) {
        /* the other side connects to us at the same time and keeps its connection */
        p->links[link->index] = NULL;
        fy_tcp_link_free(iface, link);
        return -1;
    }
    link->state = FY_TCP_LINK_UP;
    if (++p->nup == p->nlinks)
        fy_tcp_peer_up(p);
    return 1;
}

/* ---- timers and teardown ---------------------------------------------------------------- */

void fy_tcp_timers(fy_tcp_iface_t *iface, uint64_t now)
{
    uint64_t expiries;
    ssize_t r = read(iface->timer_fd, &expiries, sizeof(expiries));
    (void)r;
    uint64_t limit = iface->cfg->conn_timeout;
    int pending = fy_tcp_accept_resume(iface, now);
    fy_list_t *e, *t;
    for (e = iface->accepting.next, t = e->next; e != &iface->accepting; e = t, t = e->next) {
        fy_tcp_accept_t *a = fy_container_of(e, fy_tcp_accept_t, elem);
        if (now - a->start_ns < limit) {
            pending = 1;
            continue;
        }
        char from[FY_NETIF_ADDR_STRLEN];
        iface->drops_timeout++;
        fy_warn("tcp: dropping a connection from %s: no handshake within %.1f s",
                fy_netif_addr_str(&a->from, 0, from, sizeof(from)), (double)limit / 1e9);
        fy_tcp_accept_drop(iface, a);
    }
    for (e = iface->peers.next, t = e->next; e != &iface->peers; e = t, t = e->next) {
        fy_tcp_peer_t *p = fy_container_of(e, fy_tcp_peer_t, elem);
        if (p->state != FY_TCP_PEER_CONNECTING)
            continue;
        if (now - p->conn_start_ns < limit)
            pending = 1;
        else
            fy_tcp_peer_fail(p, FERRY_ERR_ENDPOINT_TIMEOUT, "connection setup timed out");
    }
    if (!pending)
        timer_disarm(iface);
}

/* iface_close: say CLOSE where the stream is at a frame boundary, close everything. */
void fy_tcp_peer_destroy_all(fy_tcp_iface_t *iface)
{
    fy_list_t *e;
    fy_tcp_peer_notify(iface);
    while ((e = fy_list_pop_head(&iface->peers)) != NULL) {
        fy_tcp_peer_t *p = fy_container_of(e, fy_tcp_peer_t, elem);
        fy_list_init(&p->elem);
        fy_tcp_link_t *l0 = p->links[0];
        if (l0 != NULL && l0->state == FY_TCP_LINK_UP && fy_list_is_empty(&l0->txq)) {
            fy_tcp_hdr_t h = {.type = FY_TCP_CLOSE};
            struct iovec v = {&h, sizeof(h)};
            if (fy_tcp_sendv(l0->fd, &v, 1) != (ssize_t)sizeof(h))
                fy_debug("tcp: could not say CLOSE to a peer");
        }
        for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++)
            if (p->links[i] != NULL && p->links[i]->fd >= 0)
                shutdown(p->links[i]->fd, SHUT_WR);
        fy_list_t *x;
        while ((x = fy_list_pop_head(&p->eps)) != NULL) {
            /* iface_close destroys the eps still open (tl.h): cancel their work, free them */
            fy_tcp_ep_t *ep = fy_container_of(x, fy_tcp_ep_t, elem);
            fy_tcp_ep_orphan(ep);
            free(ep);
        }
        if (p->in_table)
            fy_hash_del(&iface->peers_by_id, p->remote_id);
        p->in_table = 0;
        fy_list_add_tail(&iface->dead, &p->elem);
    }
    while ((e = fy_list_pop_head(&iface->accepting)) != NULL) {
        fy_tcp_accept_t *a = fy_container_of(e, fy_tcp_accept_t, elem);
        fy_list_init(&a->elem);
        fy_tcp_accept_drop(iface, a);
    }
    fy_tcp_free_dead(iface);
}

void fy_tcp_free_dead(fy_tcp_iface_t *iface)
{
    fy_list_t *e;
    while ((e = fy_list_pop_head(&iface->dead)) != NULL) {
        fy_tcp_peer_t *p = fy_container_of(e, fy_tcp_peer_t, elem);
        fy_list_init(&p->elem);
        fy_list_add_tail(&iface->peers, &p->elem); /* peer_free unlinks it */
        peer_free(p);
    }
    while ((e = fy_list_pop_head(&iface->dead_accepts)) != NULL)
        free(fy_container_of(e, fy_tcp_accept_t, elem));
    while ((e = fy_list_pop_head(&iface->dead_links)) != NULL) {
        fy_tcp_link_t *link = fy_container_of(e, fy_tcp_link_t, ready_elem);
        free(link->rxbuf);
        free(link);
    }
}
