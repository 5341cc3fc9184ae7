/*
 * tcp_sock.c - the tcp transport's boundary with the kernel: socket creation and options
 * (TCP_NODELAY, buffer sizes, keepalive), scatter/gather I/O, the epoll interest of each
 * socket, and a small cache of large receive buffers.
 *
 * All socket I/O of the transport goes through fy_tcp_sendv / fy_tcp_recvv so that one test
 * hook (fy_tcp_test_io_limit) can cut every transfer to k bytes and make every partial read
 * and write at every byte boundary of a header happen on purpose.  Sends use sendmsg with
 * MSG_NOSIGNAL so a closed peer gives EPIPE, never SIGPIPE.
 *
 * The buffer cache exists because a large AM is read straight into one contiguous buffer of
 * its size: allocating and faulting in 1 MiB per message would cost more than the copy it
 * avoids, so the last few buffers are kept for the next message.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tl/tcp/tcp.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

size_t fy_tcp_test_io_limit;

void fy_tcp_sock_tune(int fd, const fy_tcp_config_t *cfg)
{
    int one = 1;
    if (cfg->nodelay)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (cfg->sndbuf != 0) {
        int v = cfg->sndbuf > (size_t)INT32_MAX ? INT32_MAX : (int)cfg->sndbuf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
    if (cfg->rcvbuf != 0) {
        int v = cfg->rcvbuf > (size_t)INT32_MAX ? INT32_MAX : (int)cfg->rcvbuf;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
    /* Keepalive notices a dead peer on an idle connection.  TCP_USER_TIMEOUT would also
     * notice one while data waits for acknowledgement, but current kernels apply it to a
     * zero window too: a live receiver that stops reading for that long is cut off.  So it
     * is opt-in (FERRY_TCP_USER_TIMEOUT), for jobs whose workers always progress. */
    if (cfg->keepidle != 0 && cfg->keepidle != UINT64_MAX) {
        int idle = (int)FY_MAX(1, cfg->keepidle / FY_NSEC_PER_SEC);
        int intvl = (int)FY_MAX(1, cfg->keepintvl / FY_NSEC_PER_SEC);
        int cnt = (int)FY_MAX(1, cfg->keepcnt);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    }
    if (cfg->user_timeout != 0 && cfg->user_timeout != UINT64_MAX) {
        unsigned ut = (unsigned)FY_MAX(1, cfg->user_timeout / FY_NSEC_PER_MSEC);
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
    }
}

/* Within one host a connection is a memory copy: pacing (BBR's, a common system default)
 * only slows it down, by half here.  So "auto" gives same-host connections reno -- on a
 * loss-free loopback any unpaced algorithm does the same (cubic measured alike), and reno is
 * the one every kernel lets every user select -- and leaves the others to the system. */
void fy_tcp_sock_congestion(int fd, const fy_tcp_config_t *cfg, int local)
{
    const char *cc = cfg->congestion;
    if (cc == NULL || cc[0] == '\0' || strcasecmp(cc, "system") == 0)
        return;
    int automatic = strcasecmp(cc, "auto") == 0;
    if (automatic && !local)
        return;
    if (automatic)
        cc = "reno";
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) != 0) {
        static int warned;
        if (!automatic && !warned++)
            fy_warn("tcp: FERRY_TCP_CONGESTION=%s is not available here: %s (see "
                    "/proc/sys/net/ipv4/tcp_available_congestion_control)",
                    cc, strerror(errno));
    }
}

int fy_tcp_socket(int family, const fy_tcp_config_t *cfg)
{
    int fd =
        socket(family == 6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fy_error("tcp: socket() failed: %s", strerror(errno));
        return -1;
    }
    fy_tcp_sock_tune(fd, cfg);
    return fd;
}

/* Cut an iov to at most limit bytes (the test hook). */
static size_t clip_iov(const struct iovec *iov, size_t iovcnt, size_t limit, struct iovec *out)
{
    size_t n = 0;
    for (size_t i = 0; i < iovcnt && limit > 0; i++) {
        if (iov[i].iov_len == 0)
            continue;
        out[n] = iov[i];
        if (out[n].iov_len > limit)
            out[n].iov_len = limit;
        limit -= out[n].iov_len;
        n++;
    }
    return n;
}

#define FY_TCP_IO_TMP (FY_TCP_MAX_IOV * 4 + 4)

/* A msghdr over iov; under the partial-I/O test hook, over a clipped copy in tmp. */
static void io_msg(struct msghdr *msg, const struct iovec *iov, size_t iovcnt,
                   struct iovec tmp[FY_TCP_IO_TMP])
{
    memset(msg, 0, sizeof(*msg));
    msg->msg_iov = (struct iovec *)(uintptr_t)iov;
    msg->msg_iovlen = iovcnt;
    if (FY_UNLIKELY(fy_tcp_test_io_limit != 0)) {
        msg->msg_iov = tmp;
        msg->msg_iovlen = clip_iov(iov, FY_MIN(iovcnt, FY_TCP_IO_TMP), fy_tcp_test_io_limit, tmp);
    }
}

ssize_t fy_tcp_sendv(int fd, const struct iovec *iov, size_t iovcnt)
{
    struct iovec tmp[FY_TCP_IO_TMP];
    struct msghdr msg;
    io_msg(&msg, iov, iovcnt, tmp);
    ssize_t n;
    do {
        n = msg.msg_iovlen == 1 ? send(fd, msg.msg_iov[0].iov_base, msg.msg_iov[0].iov_len,
                                       MSG_NOSIGNAL | MSG_DONTWAIT)
                                : sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

ssize_t fy_tcp_recvv(int fd, const struct iovec *iov, size_t iovcnt)
{
    struct iovec tmp[FY_TCP_IO_TMP];
    struct msghdr msg;
    io_msg(&msg, iov, iovcnt, tmp);
    ssize_t n;
    do {
        n = iovcnt == 1 && msg.msg_iovlen == 1
                ? recv(fd, msg.msg_iov[0].iov_base, msg.msg_iov[0].iov_len, MSG_DONTWAIT)
                : recvmsg(fd, &msg, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* *cur holds the interest registered so far, with FY_TCP_EV_REG once the fd is in the set
 * (an fd may be registered with no events: epoll still reports hang-ups and errors). */
int fy_tcp_epoll_set(fy_tcp_iface_t *iface, int fd, void *obj, uint32_t *cur, uint32_t want)
{
    if ((*cur & FY_TCP_EV_REG) && (*cur & ~FY_TCP_EV_REG) == want)
        return 0;
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.events = want;
    ev.data.ptr = obj;
    int op = (*cur & FY_TCP_EV_REG) ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(iface->epfd, op, fd, &ev) != 0) {
        fy_error("tcp: epoll_ctl(fd %d, events 0x%x) failed: %s", fd, want, strerror(errno));
        return -1;
    }
    *cur = want | FY_TCP_EV_REG;
    return 0;
}

size_t fy_tcp_iov_slice(const struct iovec *src, size_t cnt, size_t off, size_t len,
                        struct iovec *dst, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < cnt && len > 0 && n < max; i++) {
        if (off >= src[i].iov_len) {
            off -= src[i].iov_len;
            continue;
        }
        size_t take = FY_MIN(src[i].iov_len - off, len);
        dst[n].iov_base = (char *)src[i].iov_base + off;
        dst[n].iov_len = take;
        n++;
        len -= take;
        off = 0;
    }
    return n;
}

/* ---- large receive buffers -------------------------------------------------------------- */

#define CACHE_MAX_BUF (64u << 20)

char *fy_tcp_buf_get(fy_tcp_iface_t *iface, size_t len, size_t *cap)
{
    int best = -1;
    for (int i = 0; i < (int)FY_ARRAY_SIZE(iface->cache); i++) {
        size_t c = iface->cache[i].cap;
        if (iface->cache[i].p != NULL && c >= len && c / 4 <= len &&
            (best < 0 || c < iface->cache[best].cap))
            best = i;
    }
    if (best >= 0) {
        char *p = iface->cache[best].p;
        *cap = iface->cache[best].cap;
        iface->cache[best].p = NULL;
        iface->cache[best].cap = 0;
        return p;
    }
    size_t c = len < 4096 ? 4096 : len;
    char *p = malloc(c);
    *cap = p != NULL ? c : 0;
    return p;
}

void fy_tcp_buf_put(fy_tcp_iface_t *iface, char *p, size_t cap)
{
    if (p == NULL)
        return;
    if (cap <= CACHE_MAX_BUF) {
        int slot = -1;
        for (int i = 0; i < (int)FY_ARRAY_SIZE(iface->cache); i++) {
            if (iface->cache[i].p == NULL) {
                slot = i;
                break;
            }
            if (slot < 0 || iface->cache[i].cap < iface->cache[slot].cap)
                slot = i;
        }
        /* keep the larger buffers: replace the smallest if this one is bigger */
        if (iface->cache[slot].p == NULL || iface->cache[slot].cap < cap) {
            free(iface->cache[slot].p);
            iface->cache[slot].p = p;
            iface->cache[slot].cap = cap;
            return;
        }
    }
    free(p);
}

void fy_tcp_cache_release(fy_tcp_iface_t *iface)
{
    for (int i = 0; i < (int)FY_ARRAY_SIZE(iface->cache); i++) {
        free(iface->cache[i].p);
        iface->cache[i].p = NULL;
        iface->cache[i].cap = 0;
    }
}
