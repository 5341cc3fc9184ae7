/*
 * tcp_raw.c - the raw TCP floor that ferry's tcp transport is measured against: a ping-pong
 * of small messages and a stream of large writes between two processes, written with plain
 * sockets and nothing else (no ferry code), so the numbers say what the kernel alone costs.
 *
 *   cc -O2 -o tcp_raw bench/tcp_raw.c
 *   ./tcp_raw [-a 127.0.0.1] [-s 8] [-n 100000] [-b 1048576] [-t 2000] [-l links] [-B]
 *
 *   -a addr   address to use (a local address: the peer is a forked child)
 *   -s size   ping-pong message size (default 8)
 *   -n iters  ping-pong round trips (default 100000)
 *   -b size   stream write size (default 1 MiB)
 *   -t ms     stream duration (default 2000 ms)
 *   -l links  stream over this many connections at once, each written as it has room
 *             (default 1: plain blocking writes)
 *   -B        blocking reads in the ping-pong (default: busy-poll with MSG_DONTWAIT, the way a
 *             spinning progress loop reads)
 *
 * Latency is half the mean round trip.  Bandwidth counts bytes the receiver has read.  Both
 * sides set TCP_NODELAY; socket buffers are left to the kernel's autotuning unless -S size.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LINKS 16

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void tune(int fd, int sockbuf)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sockbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof(sockbuf));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof(sockbuf));
    }
}

static void read_full(int fd, void *buf, size_t len, int spin)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, spin ? MSG_DONTWAIT : 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            fprintf(stderr, "peer closed\n");
            exit(1);
        } else if (errno != EAGAIN && errno != EINTR) {
            die("recv");
        }
    }
}

static void write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            die("send");
        }
    }
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1";
    size_t size = 8, bsize = 1 << 20;
    long iters = 100000, ms = 2000;
    int links = 1, spin = 1, sockbuf = 0, opt;
    while ((opt = getopt(argc, argv, "a:s:n:b:t:l:BS:")) != -1) {
        switch (opt) {
        case 'a':
            addr = optarg;
            break;
        case 's':
            size = strtoul(optarg, NULL, 0);
            break;
        case 'n':
            iters = atol(optarg);
            break;
        case 'b':
            bsize = strtoul(optarg, NULL, 0);
            break;
        case 't':
            ms = atol(optarg);
            break;
        case 'l':
            links = atoi(optarg);
            break;
        case 'B':
            spin = 0;
            break;
        case 'S':
            sockbuf = atoi(optarg);
            break;
        default:
            fprintf(stderr,
                    "usage: %s [-a addr] [-s size] [-n iters] [-b size] [-t ms] "
                    "[-l links] [-B] [-S sockbuf]\n",
                    argv[0]);
            return 2;
        }
    }
    if (links < 1 || links > MAX_LINKS)
        links = 1;

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t sl;
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        sl = sizeof(*in4);
    } else if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        sl = sizeof(*in6);
    } else {
        fprintf(stderr, "bad address %s\n", addr);
        return 2;
    }
    int lfd = socket(ss.ss_family, SOCK_STREAM, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&ss, sl) != 0 || listen(lfd, 64) != 0)
        die("listen");
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) != 0)
        die("getsockname");

    size_t bufsz = size > bsize ? size : bsize;
    char *buf = calloc(1, bufsz);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        /* the echo / sink side */
        int fds[MAX_LINKS + 1];
        for (int i = 0; i < links + 1; i++) {
            fds[i] = accept(lfd, NULL, NULL);
            if (fds[i] < 0)
                die("accept");
            tune(fds[i], sockbuf);
        }
        for (long i = 0; i < iters; i++) {
            read_full(fds[0], buf, size, spin);
            write_full(fds[0], buf, size);
        }
        /* stream: read whatever arrives on every link until all are closed */
        struct pollfd p[MAX_LINKS];
        for (int i = 0; i < links; i++) {
            p[i].fd = fds[1 + i];
            p[i].events = POLLIN;
        }
        int open_links = links;
        uint64_t total = 0;
        while (open_links > 0) {
            if (poll(p, (nfds_t)links, -1) < 0 && errno != EINTR)
                die("poll");
            for (int i = 0; i < links; i++) {
                if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t n = recv(p[i].fd, buf, bsize, MSG_DONTWAIT);
                if (n > 0) {
                    total += (uint64_t)n;
                } else if (n == 0) {
                    close(p[i].fd);
                    p[i].fd = -1;
                    open_links--;
                }
            }
        }
        write_full(fds[0], &total, sizeof(total));
        _exit(0);
    }
    close(lfd);
    int fds[MAX_LINKS + 1];
    for (int i = 0; i < links + 1; i++) {
        fds[i] = socket(ss.ss_family, SOCK_STREAM, 0);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&ss, sl) != 0)
            die("connect");
        tune(fds[i], sockbuf);
    }
    long warm = iters / 10;
    double t0 = 0;
    for (long i = 0; i < iters; i++) {
        if (i == warm)
            t0 = now_sec();
        write_full(fds[0], buf, size);
        read_full(fds[0], buf, size, spin);
    }
    double lat = (now_sec() - t0) / (double)(iters - warm) / 2.0;
    printf("raw tcp ping-pong %zu B (%s): %.2f us one-way\n", size, spin ? "busy-poll" : "blocking",
           lat * 1e6);

    double start = now_sec(), end = start + (double)ms / 1e3;
    if (links == 1) {
        while (now_sec() < end)
            write_full(fds[1], buf, bsize);
    } else {
        /* several links: each writes its own stream of bsize blocks, non-blocking, as each
         * socket has room (one full socket must not hold the others back) */
        size_t off[MAX_LINKS] = {0};
        struct pollfd p[MAX_LINKS];
        for (int i = 0; i < links; i++) {
            fcntl(fds[1 + i], F_SETFL, fcntl(fds[1 + i], F_GETFL) | O_NONBLOCK);
            p[i].fd = fds[1 + i];
            p[i].events = POLLOUT;
        }
        while (now_sec() < end) {
            if (poll(p, (nfds_t)links, 100) < 0 && errno != EINTR)
                die("poll");
            for (int i = 0; i < links; i++) {
                if (!(p[i].revents & POLLOUT))
                    continue;
                ssize_t n = send(fds[1 + i], buf + off[i], bsize - off[i], MSG_NOSIGNAL);
                if (n > 0)
                    off[i] = (off[i] + (size_t)n) % bsize;
                else if (n < 0 && errno != EAGAIN)
                    die("send");
            }
        }
    }
    for (int i = 0; i < links; i++)
        close(fds[1 + i]);
    uint64_t total = 0;
    read_full(fds[0], &total, sizeof(total), 0);
    double secs = now_sec() - start;
    printf("raw tcp stream %zu B x %d link%s: %.2f GB/s\n", bsize, links, links > 1 ? "s" : "",
           (double)total / secs / 1e9);
    int st;
    waitpid(pid, &st, 0);
    free(buf);
    return 0;
}
