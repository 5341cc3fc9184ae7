/*
 * udp_pingpong.c - a tl-level latency and bandwidth tool for the udp transport, driving
 * fy_tl_find("udp")->ops directly between this process and a forked peer on one interface:
 *
 *   udp_pingpong lat [-s size] [-n iters] [-d dev]    ping-pong, prints one-way latency
 *   udp_pingpong bw  [-s size] [-n iters] [-d dev]    stream, prints bandwidth
 *
 * Messages up to max_short go with am_short, up to max_bcopy with am_bcopy, larger ones with
 * am_zcopy (up to 32 in flight).  FERRY_UDP_* variables apply (e.g. FERRY_UDP_FAULT_DROP=1
 * for the bandwidth under 1% loss).  Both processes busy-poll (-w: sleep on the event fd).
 *
 * For runs across a real (impaired) path, bench/udp_loss.sh uses: -N netns -D dev (the peer
 * enters that network namespace and uses that device), -T secs (bw: stream for this long
 * instead of -n messages), -c (bw: every message carries its number and a pattern derived
 * from it; the receiver checks each byte and the run fails on any difference).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>

#include "tl/udp/udp.h"
#include "udp_test.h"

typedef struct st {
    volatile uint64_t msgs, bytes, bad;
    volatile int done;
} st_t;

static int check;

/* Byte k of message i (its first 8 bytes hold i). */
static inline uint8_t pat(uint64_t i, size_t k)
{
    return (uint8_t)(i * 131u + k * 7u + (k >> 9));
}

static void fill(uint8_t *buf, size_t len, uint64_t i)
{
    for (size_t k = 0; k < len; k++)
        buf[k] = pat(i, k);
    if (len >= 8)
        memcpy(buf, &i, 8);
}

static void am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    st_t *s = arg;
    if (check && id == 1) {
        const uint8_t *d = data;
        uint64_t i = s->msgs, got = UINT64_MAX;
        if (len >= 8)
            memcpy(&got, d, 8);
        size_t k = len >= 8 ? 8 : 0;
        while (k < len && d[k] == pat(i, k))
            k++;
        if ((len >= 8 && got != i) || k != len) {
            if (s->bad++ == 0)
                fprintf(stderr, "message %llu: wrong data at byte %zu of %zu\n",
                        (unsigned long long)i, k, len);
        }
    }
    s->msgs++;
    s->bytes += len;
    if (id == 2)
        s->done = 1;
}

typedef struct comp {
    fy_tl_comp_t comp;
    int busy;
} comp_t;

static void comp_cb(fy_tl_comp_t *c, ferry_status_t st)
{
    if (st != FERRY_OK)
        fprintf(stderr, "send failed: %s\n", ferry_status_string(st));
    ((comp_t *)c)->busy = 0;
}

static size_t size = 8;
static unsigned long iters = 0;
static const char *dev = "lo";
static int sleepy;
static double secs_max;
static const char *peer_ns, *peer_dev;

static void send_msg(ut_node_t *n, uint8_t id, void *buf, size_t len, comp_t *c)
{
    struct iovec iov = {buf, len};
    ferry_status_t st;
    for (;;) {
        if (len <= n->attr.max_short)
            st = n->ops->am_short(n->ep, id, &iov, 1);
        else if (len <= n->attr.max_bcopy)
            st = n->ops->am_bcopy(n->ep, id, &iov, 1);
        else {
            c->busy = 1;
            c->comp.cb = comp_cb;
            st = n->ops->am_zcopy(n->ep, id, NULL, 0, &iov, 1, &c->comp);
        }
        if (st != FERRY_ERR_NO_RESOURCE)
            break;
        ut_progress(n, 1);
    }
    if (st != FERRY_OK && st != FERRY_INPROGRESS) {
        fprintf(stderr, "send: %s\n", ferry_status_string(st));
        exit(1);
    }
}

static void wait_count(ut_node_t *n, st_t *s, uint64_t want)
{
    while (s->msgs < want)
        ut_progress(n, 100);
}

static int run(int lat, int is_server, int rfd, int wfd)
{
    st_t s = {0, 0, 0, 0};
    ut_node_t n;
    ut_addr_t mine, theirs;
    uint8_t *buf = calloc(1, size ? size : 1);
    uint8_t *bufs[32] = {NULL};
    comp_t comps[32];

    memset(comps, 0, sizeof(comps));
    if (ut_open(&n, dev, am_cb, &s) != 0) {
        fprintf(stderr, "cannot open udp on %s\n", dev);
        return 1;
    }
    n.sleepy = sleepy;
    ut_get_addr(&n, &mine);
    ut_write_all(wfd, &mine, sizeof(mine));
    ut_read_all(rfd, &theirs, sizeof(theirs));
    if (ut_connect(&n, &theirs) != FERRY_OK) {
        fprintf(stderr, "cannot connect\n");
        return 1;
    }
    /* (a timed stream counts every message from the first: the first ones go into the
     * window at once, so leaving them out of the count would understate the rate) */
    unsigned long warm = lat ? 1000 : secs_max > 0 ? 0 : 10;
    if (lat) {
        uint64_t t0 = 0;
        for (unsigned long i = 0; i < warm + iters; i++) {
            if (i == warm)
                t0 = fy_time_ns();
            if (is_server) {
                wait_count(&n, &s, i + 1);
                send_msg(&n, 1, buf, size, &comps[0]);
            } else {
                send_msg(&n, 1, buf, size, &comps[0]);
                wait_count(&n, &s, i + 1);
            }
        }
        uint64_t t1 = fy_time_ns();
        while (comps[0].busy)
            ut_progress(&n, 1);
        if (!is_server)
            printf("udp lat size %zu: %.3f us one-way (%lu round trips)\n", size,
                   (double)(t1 - t0) / 1e3 / 2.0 / (double)iters, iters);
    } else if (is_server) {
        uint64_t want;
        /* the sender tells how many it sent (a -T run does not know beforehand) */
        while (!s.done)
            ut_progress(&n, 100);
        ut_read_all(rfd, &want, sizeof(want));
        wait_count(&n, &s, want + 1);
        send_msg(&n, 2, buf, 1, &comps[0]);
        if (s.bad != 0 || s.msgs != want + 1) {
            fprintf(stderr, "receiver: %llu bad messages, %llu of %llu arrived\n",
                    (unsigned long long)s.bad, (unsigned long long)s.msgs - 1,
                    (unsigned long long)want);
            return 1;
        }
    } else {
        uint64_t t0 = 0, t1;
        unsigned long i;
        for (i = 0; secs_max > 0 || i < warm + iters; i++) {
            if (i == warm)
                t0 = fy_time_ns();
            if (secs_max > 0 && i > 0 && (double)(fy_time_ns() - t0) / 1e9 >= secs_max)
                break;
            comp_t *c = &comps[i % 32];
            while (c->busy)
                ut_progress(&n, 1);
            uint8_t *b = buf;
            if (check) {
                if (bufs[i % 32] == NULL)
                    bufs[i % 32] = malloc(size ? size : 1);
                b = bufs[i % 32];
                fill(b, size, i);
            }
            send_msg(&n, 1, b, size, c);
            n.ops->iface_progress(n.iface);
        }
        uint64_t sent = i;
        iters = i - warm;
        send_msg(&n, 2, buf, 1, &comps[(i + 1) % 32]);
        ut_write_all(wfd, &sent, sizeof(sent));
        /* every message is received when the peer's answer comes */
        while (s.msgs == 0)
            ut_progress(&n, 1);
        t1 = fy_time_ns();
        double secs = (double)(t1 - t0) / 1e9;
        printf("udp bw size %zu: %.4f GB/s (%.2f msg/s, %lu messages)\n", size,
               (double)size * (double)iters / secs / 1e9, (double)iters / secs, iters);
    }
    if (getenv("FERRY_STATS") && !is_server) {
        ferry_ep_stats_t es;
        n.ops->ep_get_stats(n.ep, &es);
        printf("  resent %llu (fast %llu, timeouts %llu), dup acks %llu, rtt %.1f us, "
               "rto %.1f us\n",
               (unsigned long long)es.retransmits, (unsigned long long)es.fast_retransmits,
               (unsigned long long)es.timeouts, (unsigned long long)es.dup_acks,
               (double)es.rtt_ns / 1e3, (double)es.rto_ns / 1e3);
        fy_udp_conn_t *uc = (fy_udp_conn_t *)n.ep;
        printf("  min rtt %.1f us, cwnd %u, reorder window %u/4 min rtt, dsacks %llu\n",
               (double)uc->min_rtt / 1e3, uc->cwnd, uc->reo_quarters,
               (unsigned long long)uc->dsacks);
    }
    /* Stay until the peer is done too (it may need our ACKs). */
    char x = 1;
    ut_write_all(wfd, &x, 1);
    for (;;) {
        struct pollfd pfd = {rfd, POLLIN, 0};
        ut_progress(&n, 1);
        if (poll(&pfd, 1, 0) > 0)
            break;
    }
    ut_close(&n);
    free(buf);
    for (unsigned k = 0; k < 32; k++)
        free(bufs[k]);
    return 0;
}

/* The other side, in a peer process (in its own network namespace with -N). */
static int peer_main(int rfd, int wfd, void *arg)
{
    if (peer_ns != NULL) {
        char path[256];
        snprintf(path, sizeof(path), "/var/run/netns/%s", peer_ns);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
            fprintf(stderr, "cannot enter network namespace %s: %s\n", peer_ns, strerror(errno));
            return 1;
        }
        close(fd);
    }
    if (peer_dev != NULL) {
        dev = peer_dev;
        setenv("FERRY_UDP_IF_INCLUDE", dev, 1);
    }
    return run(*(int *)arg, 1, rfd, wfd);
}

int main(int argc, char **argv)
{
    int opt;
    if (argc < 2 || (strcmp(argv[1], "lat") != 0 && strcmp(argv[1], "bw") != 0)) {
        fprintf(stderr,
                "usage: %s lat|bw [-s size] [-n iters] [-d device] [-w] "
                "[-N peer_netns] [-D peer_device] [-T secs] [-c]\n",
                argv[0]);
        return 2;
    }
    int lat = strcmp(argv[1], "lat") == 0;
    optind = 2;
    while ((opt = getopt(argc, argv, "s:n:d:wN:D:T:c")) != -1) {
        if (opt == 's')
            size = strtoull(optarg, NULL, 0);
        else if (opt == 'n')
            iters = strtoul(optarg, NULL, 0);
        else if (opt == 'd')
            dev = optarg;
        else if (opt == 'w')
            sleepy = 1;
        else if (opt == 'N')
            peer_ns = optarg;
        else if (opt == 'D')
            peer_dev = optarg;
        else if (opt == 'T')
            secs_max = strtod(optarg, NULL);
        else if (opt == 'c')
            check = 1;
    }
    if (iters == 0)
        iters = lat ? 100000 : (size >= 65536 ? 20000 : 200000);
    if (getenv("FERRY_UDP_IF_INCLUDE") == NULL)
        setenv("FERRY_UDP_IF_INCLUDE", dev, 1);
    fyproc_t peer;
    if (ut_spawn(&peer, peer_main, &lat) < 0)
        return 1;
    int r = run(lat, 0, peer.rfd, peer.wfd);
    int st = fyproc_wait(&peer, UT_PEER_TIMEOUT * 1000);
    fyproc_release(&peer);
    return r || st != 0;
}
