/*
 * udp_raw.c - the floor for the udp transport: raw UDP between two processes on loopback
 * with nonblocking sockets and busy polling, no protocol at all.
 *
 *   udp_raw lat [-s size] [-n iters] [-C a,b]   ping-pong, one-way latency: the median round
 *                                        trip / 2 (as ferry_perf's figure; the average, which
 *                                        a descheduled moment on a busy machine inflates, and
 *                                        the minimum follow)
 *   udp_raw bw  [-s size] [-n iters] [-C a,b]   one-way stream (no flow control, so the
 *                                        receiver counts what arrived: loss is possible)
 *
 * -C a,b pins the first process (the sender of bw) to cpu a and the other to cpu b, as
 * ferry_perf -C pins its two ranks.  Pinning both to a set (taskset -c a,b) is not the same
 * floor: the scheduler may then run both on one cpu by turns, where the datagram a sender
 * just wrote is still in the cache its receiver reads it from - on the 2-core development
 * VM under load the 1 MiB stream's sender copied from user space ~1.4x dearer per byte
 * pinned apart (perf, 3 interleaved pairs), as ferry's ranks always are.
 *
 * bw with a size up to 65507 bytes (the largest UDP datagram) streams datagrams of that size
 * from one buffer of that size.  A larger size is a stream of messages of that size: each is
 * sent from one buffer of that size as datagrams of 65507 bytes (the last one shorter), and
 * the receiver takes each datagram into its place in one buffer of that size - what a 1 MiB
 * message stream costs the two ends without a protocol: the same bytes in the same number of
 * system calls as a reliable transport's 64 KiB segments, read from and written to buffers
 * as large as the messages (a 64 KiB buffer stays in the core's cache, a 1 MiB one less
 * so: on the 2-core development VM under load the 1 MiB message stream ran at 0.6-0.95 of
 * the 64 KiB one, median 0.74, and perf showed the sender's copy from user ~1.5x dearer
 * per byte).
 *
 * The stream's first figure is the sender's (bytes sent over its time: datagrams the
 * receiver's socket dropped count, and the last socket buffer's worth is still on its way);
 * the "delivered" one is the receiver's (bytes that arrived, over the time from the first
 * to the last), the figure a reliable transport's stream compares with.
 *
 * ferry's udp transport is measured against it (bench/RESULTS.md).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DGRAM_MAX 65507 /* the largest UDP datagram over IPv4 */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int open_sock(uint16_t *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), v = 16 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v));
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

int main(int argc, char **argv)
{
    size_t size = 8;
    unsigned long iters = 0;
    int cpu[2] = {-1, -1};
    int opt, lat, p[2], q[2];
    if (argc < 2 || (strcmp(argv[1], "lat") && strcmp(argv[1], "bw"))) {
        fprintf(stderr, "usage: %s lat|bw [-s size] [-n iters] [-C cpu_a,cpu_b]\n", argv[0]);
        return 2;
    }
    lat = strcmp(argv[1], "lat") == 0;
    optind = 2;
    while ((opt = getopt(argc, argv, "s:n:C:")) != -1) {
        if (opt == 'C' && sscanf(optarg, "%d,%d", &cpu[0], &cpu[1]) != 2) {
            fprintf(stderr, "udp_raw: -C takes two cpus, a,b\n");
            return 2;
        }
        if (opt == 's')
            size = strtoull(optarg, NULL, 0);
        else if (opt == 'n')
            iters = strtoul(optarg, NULL, 0);
    }
    if (iters == 0)
        iters = 100000;
    /* A bw message larger than a datagram goes as datagrams of the largest size. */
    size_t dgram = size < DGRAM_MAX ? size : DGRAM_MAX;
    if (size < 2 || (lat && size > DGRAM_MAX) || size > (1u << 30) || size % DGRAM_MAX == 1) {
        fprintf(stderr, "udp_raw: size must be 2 .. 65507 (the largest UDP datagram), or for bw "
                        "up to 1 GiB (a message as datagrams of 65507 B; not 1 byte more than a "
                        "multiple, the end marker's size)\n");
        return 2;
    }
    char *buf = calloc(1, size + dgram + 1);
    uint16_t ports[2];
    if (pipe(p) || pipe(q))
        return 1;
    pid_t pid = fork();
    int me = pid == 0;
    if (cpu[me] >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu[me], &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            perror("udp_raw: sched_setaffinity");
    }
    int fd = open_sock(&ports[me]);
    /* exchange ports */
    if (write(me ? q[1] : p[1], &ports[me], 2) != 2 || read(me ? p[0] : q[0], &ports[!me], 2) != 2)
        return 1;
    struct sockaddr_in peer = {.sin_family = AF_INET,
                               .sin_port = htons(ports[!me]),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    unsigned long warm = lat ? 1000 : 1000;
    if (lat) {
        uint64_t t0 = 0, t = 0;
        uint64_t *rt = me ? NULL : calloc(iters, sizeof(*rt));
        if (!me && rt == NULL)
            return 1;
        for (unsigned long i = 0; i < warm + iters; i++) {
            if (i == warm)
                t0 = t = now_ns();
            if (!me && sendto(fd, buf, size, 0, (struct sockaddr *)&peer, sizeof(peer)) < 0) {
                perror("udp_raw: sendto");
                return 1;
            }
            while (recv(fd, buf, size + 1, 0) < 0) {
            }
            if (me && sendto(fd, buf, size, 0, (struct sockaddr *)&peer, sizeof(peer)) < 0) {
                perror("udp_raw: sendto");
                return 1;
            }
            if (!me && i >= warm) {
                uint64_t t1 = now_ns();
                rt[i - warm] = t1 - t;
                t = t1;
            }
        }
        if (!me) {
            double avg = (double)(now_ns() - t0) / 1e3 / 2.0 / (double)iters;
            qsort(rt, iters, sizeof(*rt), cmp_u64);
            printf("raw udp lat size %zu: %.3f us one-way (median; average %.3f, min %.3f)\n", size,
                   (double)rt[iters / 2] / 2e3, avg, (double)rt[0] / 2e3);
            free(rt);
        }
    } else if (!me) {
        uint64_t t0 = now_ns();
        unsigned long per = (unsigned long)((size + dgram - 1) / dgram), sent = 0;
        warm = (warm + per - 1) / per; /* (in messages: about 1000 datagrams) */
        for (unsigned long i = 0; i < warm + iters; i++) {
            if (i == warm)
                t0 = now_ns();
            for (size_t off = 0; off < size; off += dgram, sent++) {
                size_t l = size - off < dgram ? size - off : dgram;
                while (sendto(fd, buf + off, l, 0, (struct sockaddr *)&peer, sizeof(peer)) < 0) {
                }
            }
        }
        buf[0] = 1; /* the end marker: a 1-byte datagram */
        uint64_t t1 = now_ns();
        /* again every millisecond until the receiver answers: a full socket drops it */
        struct pollfd pf = {.fd = q[0], .events = POLLIN};
        do
            sendto(fd, buf, 1, 0, (struct sockaddr *)&peer, sizeof(peer));
        while (poll(&pf, 1, 1) == 0);
        /* datagrams arrived, first and last arrival, bytes arrived, the first one's bytes */
        uint64_t rx[5];
        if (read(q[0], rx, sizeof(rx)) != sizeof(rx))
            return 1;
        double secs = (double)(t1 - t0) / 1e9, rsecs = (double)(rx[2] - rx[1]) / 1e9;
        printf("raw udp bw size %zu: %.3f GB/s sent, %lu of %lu datagrams arrived, %.3f GB/s "
               "delivered",
               size, (double)size * (double)iters / secs / 1e9, (unsigned long)rx[0], sent,
               rx[0] > 1 && rsecs > 0 ? (double)(rx[3] - rx[4]) / rsecs / 1e9 : 0.0);
        if (per > 1)
            printf(" (messages of %lu datagrams, %zu B and a last of %zu B)", per, dgram,
                   size - (per - 1) * dgram);
        printf("\n");
    } else {
        /* Each datagram into its place in the message (in the order sent: a lost one
         * shifts the rest of its message, whose bytes are not looked at). */
        uint64_t rx[5] = {0, 0, 0, 0, 0};
        size_t off = 0;
        for (;;) {
            ssize_t r = recv(fd, buf + off, dgram + 1, 0);
            if (r == 1)
                break;
            if (r > 0) {
                rx[2] = now_ns();
                rx[3] += (uint64_t)r;
                if (rx[0]++ == 0) {
                    rx[1] = rx[2];
                    rx[4] = (uint64_t)r;
                }
                off += dgram;
                if (off >= size)
                    off = 0;
            }
        }
        if (write(q[1], rx, sizeof(rx)) != sizeof(rx))
            return 1;
    }
    if (pid != 0)
        waitpid(pid, NULL, 0);
    return 0;
}
