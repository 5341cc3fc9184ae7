/*
 * tcp_conn.c - connections of the tcp transport: peers and their links, the handshake,
 * strangers, simultaneous connects, failures and the timers that bound connection setup.
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

static fy_tcp_link_t *link_new(fy_tcp_peer_t *peer, unsigned index, int fd)
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
static void link_free(fy_tcp_iface_t *iface, fy_tcp_link_t *link)
{
    if (link == NULL)
        return;
    link_close(link);
    fy_tcp_dest_abort(iface, &link->frame, FERRY_ERR_CANCELED);
    fy_list_add_tail(&iface->dead_links, &link->ready_elem);
}

/* Write a handshake record on a fresh socket (it always fits; a short write is a failure). */
static int send_hello(int fd, const fy_tcp_hello_t *h)
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

static void fill_hello(fy_tcp_iface_t *iface, fy_tcp_hello_t *h, uint8_t kind, unsigned link,
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

static void timer_arm(fy_tcp_iface_t *iface)
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
static void timer_arm_first(fy_tcp_iface_t *iface, uint64_t first)
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

static fy_tcp_peer_t *peer_new(fy_tcp_iface_t *iface, uint64_t remote_id)
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
    p = peer_new(iface, remote_id);
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
        link_free(iface, p->links[i]);
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

static void accept_retry(fy_tcp_iface_t *iface, uint64_t remote_id);

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
    accept_retry(iface, p->remote_id);
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
        link_free(p->iface, p->links[i]);
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
    accept_retry(iface, id);
}

/*
 * A new connection attempt (ours, or the remote's we adopt) starts its striped-frame numbers
 * at 0.  This is done here, before any byte of the new connection can arrive, and not when
 * the connection comes up: the acceptor may send right after its ACCEPT, so the connector can
 * read striped frames on its first links (and count them) before the last link's ACCEPT
 * makes the connection up.  A reassembly left over from an abandoned attempt is dropped.
 */
static void conn_reset_seq(fy_tcp_peer_t *p)
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
    conn_reset_seq(p);
    ferry_status_t st = FERRY_OK;
    for (unsigned i = 0; i < p->nlinks; i++) {
        int fd = fy_tcp_socket(p->raddr.family, iface->cfg);
        if (fd < 0) {
            st = FERRY_ERR_IO;
            break;
        }
        fy_tcp_sock_congestion(fd, iface->cfg, local);
        fy_tcp_link_t *link = link_new(p, i, fd);
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
            link_free(iface, p->links[i]);
            p->links[i] = NULL;
        }
        p->state = FY_TCP_PEER_IDLE;
        return st;
    }
    timer_arm(iface);
    return FERRY_OK;
}

static void peer_up(fy_tcp_peer_t *p)
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
        fill_hello(iface, &h, FY_TCP_HELLO, link->index, p->nlinks, p->remote_id, p->conn_id);
        if (send_hello(link->fd, &h) != 0)
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
        link_free(iface, link);
        return -1;
    }
    link->state = FY_TCP_LINK_UP;
    if (++p->nup == p->nlinks)
        peer_up(p);
    return 1;
}

/* ---- accepting -------------------------------------------------------------------------- */

static void accept_drop(fy_tcp_iface_t *iface, fy_tcp_accept_t *a)
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
    timer_arm_first(iface, iface->accept_backoff_ns);
}

/* From the timer: is the pause over?  Returns 1 while the listener is still paused. */
static int accept_resume(fy_tcp_iface_t *iface, uint64_t now)
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
            accept_drop(iface, a);
            continue;
        }
        timer_arm(iface);
    }
}

static void answer(fy_tcp_iface_t *iface, fy_tcp_accept_t *a, uint8_t kind)
{
    fy_tcp_hello_t r;
    fill_hello(iface, &r, kind, a->hello.link, a->hello.nlinks, le64toh(a->hello.src_iface),
               le64toh(a->hello.conn_id));
    if (send_hello(a->fd, &r) != 0)
        fy_debug("tcp: cannot answer a handshake: %s", strerror(errno));
}

/* Become the acceptor of connection conn_id: drop whatever attempt the peer had. */
static void adopt(fy_tcp_peer_t *p, const fy_tcp_hello_t *h)
{
    if (p->iface->hot == p)
        p->iface->hot = NULL;
    for (unsigned i = 0; i < FY_TCP_MAX_LINKS; i++) {
        link_free(p->iface, p->links[i]);
        p->links[i] = NULL;
    }
    p->conn_id = le64toh(h->conn_id);
    p->outgoing = 0;
    p->nlinks = h->nlinks;
    p->nup = 0;
    p->state = FY_TCP_PEER_CONNECTING;
    p->remote_closed = 0;
    p->conn_start_ns = fy_time_ns();
    conn_reset_seq(p);
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
        accept_drop(iface, a);
        return;
    }
    fy_tcp_link_t *link = link_new(p, idx, a->fd);
    if (link == NULL) {
        accept_drop(iface, a);
        return;
    }
    fy_tcp_sock_congestion(a->fd, iface->cfg, p->remote_host == iface->md->host_id);
    answer(iface, a, FY_TCP_ACCEPT);
    link->ev = FY_TCP_EV_REG; /* registered (by the accept): the MOD below points it here */
    a->fd = -1;
    accept_drop(iface, a);
    p->links[idx] = link;
    link->state = FY_TCP_LINK_UP;
    fy_tcp_epoll_set(iface, link->fd, link, &link->ev, EPOLLIN);
    if (++p->nup == p->nlinks)
        peer_up(p);
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
        if (p == NULL && (p = peer_new(iface, remote)) != NULL)
            adopt(p, h);
    } else {
        p = fy_tcp_peer_get(iface, remote, 1);
    }
    if (p == NULL) {
        accept_drop(iface, a);
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
            accept_drop(iface, a);
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
        accept_drop(iface, a);
        return;
    }
    attach(iface, p, a);
}

static void accept_retry(fy_tcp_iface_t *iface, uint64_t remote_id)
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
            accept_drop(iface, a);
        }
        return;
    }
    struct iovec v = {(char *)&a->hello + a->got, sizeof(a->hello) - a->got};
    ssize_t n = fy_tcp_recvv(a->fd, &v, 1);
    if (n == 0 || (n < 0 && errno != EAGAIN)) {
        fy_debug("tcp: %s closed before completing a handshake", from);
        iface->drops_malformed += a->got != 0;
        accept_drop(iface, a);
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
        accept_drop(iface, a);
        return;
    }
    if (le64toh(h->dst_iface) != iface->id) {
        iface->drops_unknown++;
        fy_warn("tcp: dropping a connection from %s: it is for interface %016llx, not this one",
                from, (unsigned long long)le64toh(h->dst_iface));
        accept_drop(iface, a);
        return;
    }
    handle_hello(iface, a);
    return;
malformed:
    iface->drops_malformed++;
    fy_warn("tcp: dropping a connection from %s: not a ferry tcp handshake", from);
    accept_drop(iface, a);
}

/* ---- timers and teardown ---------------------------------------------------------------- */

void fy_tcp_timers(fy_tcp_iface_t *iface, uint64_t now)
{
    uint64_t expiries;
    ssize_t r = read(iface->timer_fd, &expiries, sizeof(expiries));
    (void)r;
    uint64_t limit = iface->cfg->conn_timeout;
    int pending = accept_resume(iface, now);
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
        accept_drop(iface, a);
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
        accept_drop(iface, a);
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
