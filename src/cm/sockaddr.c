/*
 * sockaddr.c - the sockaddr connection manager: a listener on ip:port and endpoint creation
 * from ip:port, for client/server programs that have no launcher to exchange addresses.
 *
 * A short-lived TCP side channel carries one message each way (cm.h draws it): the client
 * sends its worker address, the server answers with its own or a refusal, and the socket is
 * closed.  Each side then makes its endpoint from the other's worker address through the
 * normal path, so every transport and lane choice works as if the addresses had come from a
 * launcher.  Everything read from the socket is checked (magic, version, job key, a bounded
 * address size) before it is believed; a peer that says nothing is dropped by its deadline,
 * which the caller (proto's listener) enforces.  This file knows sockets and bytes only.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cm/cm.h"
#include "util/log.h"

static int parse_ip(const char *ip, uint16_t port, struct sockaddr_storage *ss, socklen_t *sl)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (ip == NULL || ip[0] == '\0') {
        in4->sin_family = AF_INET;
        in4->sin_addr.s_addr = htonl(INADDR_ANY);
        in4->sin_port = htons(port);
        *sl = sizeof(*in4);
        return 0;
    }
    if (inet_pton(AF_INET, ip, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        *sl = sizeof(*in4);
        return 0;
    }
    if (inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        *sl = sizeof(*in6);
        return 0;
    }
    return -1;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void fy_cm_peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in4->sin_addr, host, sizeof(host));
            port = ntohs(in4->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
            port = ntohs(in6->sin6_port);
        }
    }
    snprintf(buf, len, "%s:%u", host, port);
}

ferry_status_t fy_cm_listen(const char *ip, uint16_t port, int *fd_p, uint16_t *port_p)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_ip(ip, port, &ss, &sl) != 0) {
        fy_error("listener: '%s' is not an IPv4 or IPv6 address", ip);
        return FERRY_ERR_INVALID_PARAM;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fy_error("listener: socket: %s", strerror(errno));
        return FERRY_ERR_IO;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        fy_error("listener: cannot listen on %s:%u: %s", ip != NULL && ip[0] ? ip : "*",
                 (unsigned)port, strerror(e));
        close(fd);
        return e == EADDRINUSE      ? FERRY_ERR_BUSY
               : e == EADDRNOTAVAIL ? FERRY_ERR_INVALID_ADDR
                                    : FERRY_ERR_IO;
    }
    sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_p = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                            : ((struct sockaddr_in6 *)&ss)->sin6_port);
    *fd_p = fd;
    return FERRY_OK;
}

ferry_status_t fy_cm_rx_progress(fy_cm_rx_t *rx, int fd, uint64_t job_key)
{
    if (rx->buf == NULL) {
        rx->buf = malloc(sizeof(fy_cm_msg_hdr_t));
        if (rx->buf == NULL)
            return FERRY_ERR_NO_MEMORY;
        rx->have = 0;
        rx->need = sizeof(fy_cm_msg_hdr_t);
    }
    for (;;) {
        while (rx->have < rx->need) {
            ssize_t r = recv(fd, rx->buf + rx->have, rx->need - rx->have, 0);
            if (r > 0) {
                rx->have += (size_t)r;
                continue;
            }
            if (r == 0)
                return FERRY_ERR_CONNECTION_RESET;
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return FERRY_ERR_NO_RESOURCE;
            return FERRY_ERR_CONNECTION_RESET;
        }
        fy_cm_msg_hdr_t h;
        memcpy(&h, rx->buf, sizeof(h));
        if (rx->need == sizeof(h)) {
            /* The header is in: check it before trusting its length. */
            if (h.magic != FY_CM_MAGIC || h.version != FY_CM_VERSION || h.type < FY_CM_HELLO ||
                h.type > FY_CM_REJECT)
                return FERRY_ERR_PROTOCOL;
            if (h.job_key != job_key)
                return FERRY_ERR_ACCESS_DENIED;
            if (h.addr_len > FY_CM_ADDR_MAX || (h.type != FY_CM_REJECT && h.addr_len == 0))
                return FERRY_ERR_PROTOCOL;
            if (h.addr_len == 0)
                return FERRY_OK;
            uint8_t *nb = realloc(rx->buf, sizeof(h) + h.addr_len);
            if (nb == NULL)
                return FERRY_ERR_NO_MEMORY;
            rx->buf = nb;
            rx->need = sizeof(h) + h.addr_len;
            continue;
        }
        return FERRY_OK;
    }
}

void fy_cm_rx_release(fy_cm_rx_t *rx)
{
    free(rx->buf);
    rx->buf = NULL;
    rx->have = rx->need = 0;
}

ferry_status_t fy_cm_send_msg(int fd, unsigned type, uint64_t job_key, const void *addr, size_t len,
                              int timeout_ms)
{
    if (len > FY_CM_ADDR_MAX)
        return FERRY_ERR_INVALID_PARAM;
    fy_cm_msg_hdr_t h = {FY_CM_MAGIC, FY_CM_VERSION, (uint16_t)type, job_key, (uint32_t)len, 0};
    struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)addr, len}};
    size_t total = sizeof(h) + len, sent = 0;
    int64_t deadline = now_ms() + timeout_ms;
    while (sent < total) {
        struct iovec v[2];
        int n = 0;
        size_t off = sent;
        for (int i = 0; i < 2; i++) {
            if (off >= iov[i].iov_len) {
                off -= iov[i].iov_len;
                continue;
            }
            v[n].iov_base = (uint8_t *)iov[i].iov_base + off;
            v[n].iov_len = iov[i].iov_len - off;
            off = 0;
            n++;
        }
        struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)n};
        ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (r > 0) {
            sent += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int64_t left = deadline - now_ms();
            if (left <= 0)
                return FERRY_ERR_TIMED_OUT;
            struct pollfd p = {fd, POLLOUT, 0};
            poll(&p, 1, (int)left);
            continue;
        }
        return FERRY_ERR_CONNECTION_RESET;
    }
    return FERRY_OK;
}

ferry_status_t fy_cm_client_exchange(const char *ip, uint16_t port, uint64_t job_key,
                                     const void *addr, size_t len, int timeout_ms, void **peer_p,
                                     size_t *peer_len_p)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (ip == NULL || parse_ip(ip, port, &ss, &sl) != 0 || port == 0) {
        fy_error("ferry_ep_create: '%s:%u' is not an IPv4 or IPv6 address and a port",
                 ip != NULL ? ip : "(null)", (unsigned)port);
        return FERRY_ERR_INVALID_ADDR;
    }
    int64_t deadline = now_ms() + timeout_ms;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return FERRY_ERR_IO;
    ferry_status_t st;
    fy_cm_rx_t rx = {0};
    const char *what = "connect";
    if (connect(fd, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS) {
        st = errno == ECONNREFUSED ? FERRY_ERR_UNREACHABLE : FERRY_ERR_IO;
        fy_error("sockaddr: %s:%u: %s", ip, (unsigned)port, strerror(errno));
        goto out;
    }
    for (;;) {
        struct pollfd p = {fd, POLLOUT, 0};
        int64_t left = deadline - now_ms();
        int r = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            st = FERRY_ERR_TIMED_OUT;
            goto timeout;
        }
        break;
    }
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
        st = err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH
                 ? FERRY_ERR_UNREACHABLE
                 : FERRY_ERR_IO;
        fy_error("sockaddr: connect to %s:%u: %s (is a listener there?)", ip, (unsigned)port,
                 strerror(err));
        goto out;
    }
    int64_t left = deadline - now_ms();
    st = fy_cm_send_msg(fd, FY_CM_HELLO, job_key, addr, len, left > 0 ? (int)left : 0);
    if (st != FERRY_OK) {
        what = "send";
        goto timeout;
    }
    what = "answer";
    for (;;) {
        st = fy_cm_rx_progress(&rx, fd, job_key);
        if (st != FERRY_ERR_NO_RESOURCE)
            break;
        struct pollfd p = {fd, POLLIN, 0};
        left = deadline - now_ms();
        int r = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (r == 0 || (r < 0 && errno != EINTR)) {
            st = FERRY_ERR_TIMED_OUT;
            break;
        }
    }
    if (st != FERRY_OK)
        goto timeout;
    fy_cm_msg_hdr_t h;
    memcpy(&h, rx.buf, sizeof(h));
    if (h.type == FY_CM_REJECT) {
        fy_error("sockaddr: %s:%u rejected the connection request", ip, (unsigned)port);
        st = FERRY_ERR_ACCESS_DENIED;
        goto out;
    }
    if (h.type != FY_CM_ACCEPT) {
        st = FERRY_ERR_PROTOCOL;
        goto timeout;
    }
    memmove(rx.buf, rx.buf + sizeof(h), h.addr_len);
    *peer_p = rx.buf;
    *peer_len_p = h.addr_len;
    rx.buf = NULL;
    close(fd);
    return FERRY_OK;

timeout:
    fy_error("sockaddr: %s:%u: no valid %s: %s", ip, (unsigned)port, what,
             st == FERRY_ERR_TIMED_OUT ? "timed out" : ferry_status_string(st));
out:
    fy_cm_rx_release(&rx);
    close(fd);
    return st;
}

/* The manager: it can connect wherever a TCP socket can reach, so it answers for every
 * interface, at a low priority: with an address in hand, direct is better. */
static int sockaddr_query(const fy_cm_iface_info_t *iface)
{
    (void)iface;
    return 10;
}

static ferry_status_t sockaddr_start_connect(const fy_cm_host_t *host, const fy_cm_target_t *t,
                                             void **ep_p)
{
    if (t->tl_iface != NULL) /* a lane: of an endpoint made from this manager's exchange */
        return t->via == &fy_cm_sockaddr ? fy_cm_lane_connect(t, ep_p) : FERRY_ERR_UNSUPPORTED;
    if (t->ip == NULL)
        return FERRY_ERR_INVALID_PARAM;
    void *peer = NULL;
    size_t peer_len = 0;
    ferry_status_t st =
        fy_cm_client_exchange(t->ip, t->port, host->job_key, host->address, host->address_len,
                              host->timeout_ms, &peer, &peer_len);
    if (st != FERRY_OK)
        return st;
    st = host->connect_address(host->arg, peer, peer_len, ep_p);
    free(peer);
    return st;
}

static const fy_cm_ops_t sockaddr_ops = {
    .query = sockaddr_query,
    .start_connect = sockaddr_start_connect,
};

const fy_cm_component_t fy_cm_sockaddr = {
    "sockaddr", "a listener on ip:port, and endpoints created from ip:port (no launcher)",
    &sockaddr_ops};
