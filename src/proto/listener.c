/*
 * listener.c - proto's side of the sockaddr connection manager: ferry_listener_* and the two
 * sockaddr forms of ferry_ep_create (by ip:port, and from a listener's connection request).
 *
 * The socket work (listen, the one-message exchange, its checks) lives in cm/sockaddr.c,
 * which knows no proto object; this file keeps the per-worker state.  A listener's socket and
 * every accepted connection still reading its request are in the worker's epoll set, so a
 * sleeping worker wakes for them; progress accepts on a wake-up or every FY_IDLE_POLL-th pass
 * (a system call the shared-memory fast path must not pay each time) and reads the
 * connections being received on every pass while there are any.  Bounds: at most
 * FY_LISTENER_MAX_CONNS connections being read per listener (more are closed at once), and
 * each must deliver its request within FERRY_CM_TIMEOUT, or it is dropped: a silent or
 * garbage client costs a file descriptor for a while, never the listener.  A timerfd in the
 * epoll set, armed at the earliest of those deadlines, wakes a worker that sleeps with no
 * timeout so that the deadline is enforced there too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "proto/proto_int.h"
#include "util/clock.h"

#define FY_LISTENER_MAX_CONNS 64
#define FY_LISTENER_EPOLL_TAG (UINT32_MAX - 1) /* epoll data of listener sockets */

enum { CONN_READING, CONN_WAITING_APP };

struct ferry_conn_request {
    ferry_listener_t *listener;
    int fd;
    int state;
    fy_list_t link;
    fy_cm_rx_t rx;
    uint64_t deadline_ns;
    char peer[64];
};

struct ferry_listener {
    ferry_worker_t *worker;
    int fd;
    uint16_t port;
    ferry_listener_conn_cb_t cb;
    void *arg;
    fy_list_t conns; /* ferry_conn_request: being read and waiting for the application */
    unsigned nreading;
    int timer_fd;      /* wakes a sleeping worker at the earliest deadline of a request */
    uint64_t armed_ns; /* the deadline it is armed for (0: disarmed) */
    struct ferry_listener *next;
};

static void epoll_add(ferry_worker_t *w, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = FY_LISTENER_EPOLL_TAG};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        fy_warn("listener: epoll_ctl: %s (a sleeping worker may not wake for it)", strerror(errno));
}

static void conn_free(ferry_conn_request_t *c)
{
    ferry_listener_t *l = c->listener;
    if (c->state == CONN_READING)
        l->nreading--;
    fy_list_del(&c->link);
    epoll_ctl(l->worker->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    fy_cm_rx_release(&c->rx);
    free(c);
}

static uint64_t cm_timeout_ns(const ferry_worker_t *w)
{
    return w->ctx->opts.cm_timeout_ns;
}

static int cm_timeout_ms(const ferry_worker_t *w)
{
    uint64_t ms = cm_timeout_ns(w) / FY_NSEC_PER_MSEC;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static unsigned accept_some(ferry_listener_t *l)
{
    unsigned n = 0;
    for (int i = 0; i < 16; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;
        n++;
        ferry_conn_request_t *c = NULL;
        if (l->nreading >= FY_LISTENER_MAX_CONNS || (c = calloc(1, sizeof(*c))) == NULL) {
            char peer[64];
            fy_cm_peer_name(fd, peer, sizeof(peer));
            fy_warn("listener :%u: %u connections already waiting: %s closed at once",
                    (unsigned)l->port, l->nreading, peer);
            close(fd);
            continue;
        }
        c->listener = l;
        c->fd = fd;
        c->state = CONN_READING;
        c->deadline_ns = fy_time_ns() + cm_timeout_ns(l->worker);
        fy_cm_peer_name(fd, c->peer, sizeof(c->peer));
        fy_list_add_tail(&l->conns, &c->link);
        l->nreading++;
        epoll_add(l->worker, fd);
    }
    return n;
}

static unsigned read_requests(ferry_listener_t *l)
{
    unsigned n = 0;
    uint64_t now = fy_time_ns();
    fy_list_t *pos, *tmp;
    fy_list_for_each_safe(pos, tmp, &l->conns)
    {
        ferry_conn_request_t *c = fy_container_of(pos, ferry_conn_request_t, link);
        if (c->state != CONN_READING)
            continue;
        ferry_status_t st = fy_cm_rx_progress(&c->rx, c->fd, l->worker->ctx->job_key);
        if (st == FERRY_ERR_NO_RESOURCE) {
            if (now < c->deadline_ns)
                continue;
            st = FERRY_ERR_TIMED_OUT;
        }
        if (st == FERRY_OK) {
            fy_cm_msg_hdr_t h;
            memcpy(&h, c->rx.buf, sizeof(h));
            if (h.type != FY_CM_HELLO)
                st = FERRY_ERR_PROTOCOL;
        }
        n++;
        if (st != FERRY_OK) {
            fy_info("listener :%u: dropped the connection from %s: %s", (unsigned)l->port, c->peer,
                    st == FERRY_ERR_TIMED_OUT       ? "no request in FERRY_CM_TIMEOUT"
                    : st == FERRY_ERR_ACCESS_DENIED ? "another job key"
                                                    : ferry_status_string(st));
            conn_free(c);
            continue;
        }
        /* A whole, checked request: it now waits for the application's answer. */
        c->state = CONN_WAITING_APP;
        l->nreading--;
        epoll_ctl(l->worker->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        l->cb(c, l->arg); /* may consume c (and so unlink it): pos is not touched again */
    }
    return n;
}

/* Arm the timer at the earliest deadline of a request being read (or disarm it). */
static void arm_timer(ferry_listener_t *l)
{
    uint64_t first = 0;
    fy_list_t *pos;
    fy_list_for_each(pos, &l->conns)
    {
        ferry_conn_request_t *c = fy_container_of(pos, ferry_conn_request_t, link);
        if (c->state == CONN_READING && (first == 0 || c->deadline_ns < first))
            first = c->deadline_ns;
    }
    if (first == l->armed_ns)
        return;
    uint64_t v;
    while (read(l->timer_fd, &v, sizeof(v)) == sizeof(v)) {
    }
    struct itimerspec its = {{0, 0},
                             {(time_t)(first / FY_NSEC_PER_SEC), (long)(first % FY_NSEC_PER_SEC)}};
    timerfd_settime(l->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
    l->armed_ns = first;
}

unsigned fy_listener_progress(ferry_worker_t *w, int poll_all)
{
    unsigned n = 0;
    for (ferry_listener_t *l = w->listeners; l != NULL; l = l->next) {
        if (poll_all)
            n += accept_some(l);
        if (l->nreading != 0 || l->armed_ns != 0) {
            n += read_requests(l);
            arm_timer(l);
        }
    }
    return n;
}

ferry_status_t ferry_listener_create(ferry_worker_t *w, const ferry_listener_params_t *params,
                                     ferry_listener_t **listener_p)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || params == NULL || listener_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    uint64_t known = FERRY_LISTENER_FIELD_SOCKADDR | FERRY_LISTENER_FIELD_CONN_HANDLER;
    if ((params->field_mask & ~known) != 0) {
        fy_error("ferry_listener_create: unknown field_mask bits 0x%llx",
                 (unsigned long long)(params->field_mask & ~known));
        return FERRY_ERR_INVALID_PARAM;
    }
    if (!(params->field_mask & FERRY_LISTENER_FIELD_CONN_HANDLER) || params->conn_cb == NULL) {
        fy_error("ferry_listener_create: a connection handler is required "
                 "(FERRY_LISTENER_FIELD_CONN_HANDLER)");
        return FERRY_ERR_INVALID_PARAM;
    }
    if (fy_cm_find(&w->ctx->cms, "sockaddr") == NULL) {
        fy_error("ferry_listener_create: the sockaddr connection manager is excluded by "
                 "FERRY_CM");
        return FERRY_ERR_UNSUPPORTED;
    }
    const char *ip = (params->field_mask & FERRY_LISTENER_FIELD_SOCKADDR) ? params->ip : NULL;
    uint16_t port = (params->field_mask & FERRY_LISTENER_FIELD_SOCKADDR) ? params->port : 0;
    ferry_listener_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_status_t st = fy_cm_listen(ip, port, &l->fd, &l->port);
    if (st != FERRY_OK) {
        free(l);
        return st;
    }
    l->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (l->timer_fd < 0) {
        fy_error("ferry_listener_create: timerfd_create: %s", strerror(errno));
        close(l->fd);
        free(l);
        return FERRY_ERR_IO;
    }
    l->worker = w;
    l->cb = params->conn_cb;
    l->arg = params->conn_arg;
    fy_list_init(&l->conns);
    epoll_add(w, l->fd);
    epoll_add(w, l->timer_fd);
    l->next = w->listeners;
    w->listeners = l;
    w->idle_left = 0; /* poll everything at the next pass */
    fy_worker_poll_plan(w);
    fy_info("listening on %s:%u", ip != NULL && ip[0] != '\0' ? ip : "*", (unsigned)l->port);
    *listener_p = l;
    return FERRY_OK;
}

ferry_status_t ferry_listener_query(const ferry_listener_t *l, ferry_listener_attr_t *attr)
{
    if (l == NULL || attr == NULL)
        return FERRY_ERR_INVALID_PARAM;
    attr->port = l->port;
    return FERRY_OK;
}

static void answer_and_free(ferry_conn_request_t *c, unsigned type, const void *addr, size_t len)
{
    ferry_worker_t *w = c->listener->worker;
    ferry_status_t st = fy_cm_send_msg(c->fd, type, w->ctx->job_key, addr, len, cm_timeout_ms(w));
    if (st != FERRY_OK)
        fy_info("listener :%u: cannot answer %s: %s", (unsigned)c->listener->port, c->peer,
                ferry_status_string(st));
    conn_free(c);
}

ferry_status_t ferry_listener_reject(ferry_listener_t *l, ferry_conn_request_t *c)
{
    FY_WORKER_GUARD(l != NULL ? l->worker : NULL);
    if (l == NULL || c == NULL || c->listener != l || c->state != CONN_WAITING_APP)
        return FERRY_ERR_INVALID_PARAM;
    answer_and_free(c, FY_CM_REJECT, NULL, 0);
    return FERRY_OK;
}

ferry_status_t ferry_conn_request_peer(const ferry_conn_request_t *c, char *buf, size_t len)
{
    if (c == NULL || buf == NULL || len == 0)
        return FERRY_ERR_INVALID_PARAM;
    if ((size_t)snprintf(buf, len, "%s", c->peer) >= len)
        return FERRY_ERR_TRUNCATED;
    return FERRY_OK;
}

void ferry_listener_destroy(ferry_listener_t *l)
{
    FY_WORKER_GUARD(l != NULL ? l->worker : NULL);
    if (l == NULL)
        return;
    ferry_worker_t *w = l->worker;
    for (ferry_listener_t **pp = &w->listeners; *pp != NULL; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    fy_worker_poll_plan(w);
    while (!fy_list_is_empty(&l->conns)) {
        ferry_conn_request_t *c = fy_container_of(l->conns.next, ferry_conn_request_t, link);
        if (c->state == CONN_WAITING_APP)
            answer_and_free(c, FY_CM_REJECT, NULL, 0);
        else
            conn_free(c);
    }
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, l->fd, NULL);
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, l->timer_fd, NULL);
    close(l->fd);
    close(l->timer_fd);
    free(l);
}

void fy_listener_destroy_all(ferry_worker_t *w)
{
    if (w->listeners != NULL)
        fy_warn("ferry_worker_destroy: listener(s) still open: closed");
    while (w->listeners != NULL)
        ferry_listener_destroy(w->listeners);
}

/* ------------------------------------------------------------------------------------------ */
/* Endpoints by sockaddr                                                                       */
/* ------------------------------------------------------------------------------------------ */

static ferry_status_t host_connect(void *arg, const void *addr, size_t len, void **ep_p)
{
    ferry_ep_t *ep;
    ferry_status_t st = fy_ep_create_internal(arg, addr, len, &fy_cm_sockaddr, &ep);
    if (st == FERRY_OK)
        *ep_p = ep;
    return st;
}

ferry_status_t fy_listener_ep_create(ferry_worker_t *w, const ferry_ep_params_t *params,
                                     ferry_ep_t **ep_p)
{
    const fy_cm_component_t *cm = fy_cm_find(&w->ctx->cms, "sockaddr");
    if (params->field_mask & FERRY_EP_FIELD_CONN_REQUEST) {
        ferry_conn_request_t *c = params->conn_request;
        if (c == NULL || c->state != CONN_WAITING_APP || c->listener->worker != w) {
            fy_error("ferry_ep_create: conn_request is not a pending request of a listener "
                     "of this worker");
            return FERRY_ERR_INVALID_PARAM;
        }
        fy_cm_msg_hdr_t h;
        memcpy(&h, c->rx.buf, sizeof(h));
        ferry_ep_t *ep;
        ferry_status_t st =
            fy_ep_create_internal(w, c->rx.buf + sizeof(h), h.addr_len, &fy_cm_sockaddr, &ep);
        if (st != FERRY_OK) {
            fy_error("ferry_ep_create: the client %s is not reachable: %s", c->peer,
                     ferry_status_string(st));
            answer_and_free(c, FY_CM_REJECT, NULL, 0);
            return st;
        }
        answer_and_free(c, FY_CM_ACCEPT, w->address, w->address_len);
        *ep_p = ep;
        return FERRY_OK;
    }
    if (cm == NULL) {
        fy_error("ferry_ep_create: the sockaddr connection manager is excluded by FERRY_CM");
        return FERRY_ERR_UNSUPPORTED;
    }
    fy_cm_host_t host = {
        .arg = w,
        .job_key = w->ctx->job_key,
        .address = w->address,
        .address_len = w->address_len,
        .timeout_ms = cm_timeout_ms(w),
        .connect_address = host_connect,
    };
    fy_cm_target_t t = {.ip = params->sockaddr_ip, .port = params->sockaddr_port};
    void *ep = NULL;
    ferry_status_t st = cm->ops->start_connect(&host, &t, &ep);
    if (st == FERRY_OK)
        *ep_p = ep;
    return st;
}
