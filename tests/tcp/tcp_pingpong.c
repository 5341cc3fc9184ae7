/*
 * tcp_pingpong.c - the tcp transport measured at the tl level, next to bench/tcp_raw.c (the
 * kernel's floor) and ferry_perf (the whole stack): a ping-pong of small AMs and a stream of
 * large zero-copy AMs between this process and a forked peer, both spinning on progress.
 *
 *   tcp_pingpong [-n iters] [-s size] [-b size] [-w window] [-t ms]
 *
 *   -n iters   ping-pong round trips (default 100000); latency is half the mean round trip
 *   -s size    ping-pong AM size (default 8)
 *   -b size    stream message size (default 1 MiB), sent with am_zcopy
 *   -w window  stream messages in flight (default 8)
 *   -t ms      stream duration (default 2000); bandwidth counts what the peer received
 *   -W         stream phase: sleep on the event fd when idle instead of spinning (compare
 *              CPU time per byte with tcp_raw, whose sockets block)
 *
 * FERRY_TCP_* variables apply (FERRY_TCP_LINKS, FERRY_TCP_STRIPE_MIN, ...).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the assertion macros of the harness, without its main */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "fytest.h"
#include "tcp_testlib.h"
#include "util/clock.h"

enum { ID_PING = 1, ID_DATA, ID_DONE };

typedef struct state {
    fy_tl_ep_t *ep;
    uint64_t pongs, bytes, msgs, done;
} state_t;

static int sleep_mode;

static void idle(tt_node_t *n)
{
    if (sleep_mode)
        tt_wait(n, -1, 100);
    else
        tt_progress(n);
}

static void server_am(tt_node_t *n, uint8_t id, const void *data, size_t len)
{
    state_t *s = n->user;
    struct iovec v = {(void *)data, len};
    if (id == ID_PING) {
        FY_ASSERT_OK(n->ops->am_short(s->ep, ID_PING, &v, 1));
    } else if (id == ID_DATA) {
        s->bytes += len;
        s->msgs++;
    } else if (id == ID_DONE) {
        uint64_t r[2] = {s->bytes, s->msgs};
        struct iovec rv = {r, sizeof(r)};
        FY_ASSERT_OK(n->ops->am_short(s->ep, ID_DONE, &rv, 1));
        s->bytes = s->msgs = 0;
    }
}

static void client_am(tt_node_t *n, uint8_t id, const void *data, size_t len)
{
    state_t *s = n->user;
    if (id == ID_PING) {
        s->pongs++;
    } else if (id == ID_DONE) {
        uint64_t r[2];
        memcpy(r, data, sizeof(r));
        s->bytes = r[0];
        s->msgs = r[1];
        s->done = 1;
    }
}

static void server(int rfd, int wfd, void *arg)
{
    state_t s;
    memset(&s, 0, sizeof(s));
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, server_am, &s);
    tt_addr_t me, other;
    tt_get_addr(&n, &me);
    tt_write(wfd, &me, sizeof(me));
    tt_read(rfd, &other, sizeof(other));
    s.ep = tt_ep(&n, &other);
    for (unsigned i = 0;; i++) { /* spin: the latency of waking up is not what we measure */
        if (s.msgs != 0)
            idle(&n); /* streaming */
        else
            tt_progress(&n);
        if ((i & 1023) == 0 && tt_readable(rfd))
            break;
    }
    n.ops->ep_destroy(s.ep);
    tt_close(&n);
}

typedef struct zc {
    tt_comp_t c;
    int busy;
} zc_t;

int main(int argc, char **argv)
{
    long iters = 100000, ms = 2000;
    size_t size = 8, bsize = 1 << 20;
    int window = 8, opt;
    while ((opt = getopt(argc, argv, "n:s:b:w:t:W")) != -1) {
        switch (opt) {
        case 'n':
            iters = atol(optarg);
            break;
        case 's':
            size = strtoul(optarg, NULL, 0);
            break;
        case 'b':
            bsize = strtoul(optarg, NULL, 0);
            break;
        case 'w':
            window = atoi(optarg);
            break;
        case 't':
            ms = atol(optarg);
            break;
        case 'W':
            sleep_mode = 1;
            break;
        default:
            fprintf(stderr, "usage: %s [-n iters] [-s size] [-b size] [-w window] [-t ms] [-W]\n",
                    argv[0]);
            return 2;
        }
    }
    if (window < 1 || window > 64)
        window = 8;
    tt_proc_t peer;
    tt_fork(&peer, server, NULL);
    state_t s;
    memset(&s, 0, sizeof(s));
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, client_am, &s);
    tt_addr_t me, other;
    tt_read(peer.rfd, &other, sizeof(other));
    tt_get_addr(&n, &me);
    tt_write(peer.wfd, &me, sizeof(me));
    s.ep = tt_ep(&n, &other);

    char *ping = calloc(1, size + 1);
    struct iovec pv = {ping, size};
    long warm = iters / 10 + 1;
    uint64_t t0 = 0;
    for (long i = 0; i < iters + warm; i++) {
        if (i == warm)
            t0 = fy_time_ns();
        uint64_t want = s.pongs + 1;
        ferry_status_t st;
        TT_RETRY(&n, st, n.ops->am_short(s.ep, ID_PING, &pv, 1));
        FY_ASSERT_OK(st);
        while (s.pongs < want)
            tt_progress(&n);
    }
    double lat = (double)(fy_time_ns() - t0) / (double)iters / 2.0;
    printf("ferry tcp tl ping-pong %zu B: %.2f us one-way\n", size, lat / 1e3);

    char *buf = malloc(bsize);
    memset(buf, 1, bsize);
    zc_t *z = calloc((size_t)window, sizeof(*z));
    uint64_t start = fy_time_ns(), end = start + (uint64_t)ms * FY_NSEC_PER_MSEC;
    uint64_t sent = 0;
    while (fy_time_ns() < end) {
        for (int k = 0; k < window; k++) {
            if (z[k].busy && !z[k].c.done)
                continue;
            if (z[k].busy)
                FY_ASSERT_OK(z[k].c.status);
            tt_comp_init(&z[k].c);
            struct iovec v = {buf, bsize};
            ferry_status_t st = n.ops->am_zcopy(s.ep, ID_DATA, NULL, 0, &v, 1, &z[k].c.super);
            if (st == FERRY_ERR_NO_RESOURCE) {
                z[k].busy = 0;
                break;
            }
            FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
            z[k].busy = st == FERRY_INPROGRESS;
            sent++;
        }
        int all_busy = 1;
        for (int k = 0; k < window; k++)
            all_busy &= z[k].busy && !z[k].c.done;
        if (all_busy)
            idle(&n);
        else
            tt_progress(&n);
    }
    for (int k = 0; k < window; k++)
        while (z[k].busy && !z[k].c.done)
            idle(&n);
    uint64_t dummy = 0;
    struct iovec dv = {&dummy, sizeof(dummy)};
    ferry_status_t st;
    TT_RETRY(&n, st, n.ops->am_short(s.ep, ID_DONE, &dv, 1));
    while (!s.done)
        idle(&n);
    double secs = (double)(fy_time_ns() - start) / 1e9;
    FY_ASSERT_U64_EQ(s.msgs, sent);
    printf("ferry tcp tl stream %zu B x window %d: %.2f GB/s (%llu messages)\n", bsize, window,
           (double)s.bytes / secs / 1e9, (unsigned long long)s.msgs);
    tt_write(peer.wfd, &dummy, sizeof(dummy));
    tt_join(&peer);
    n.ops->ep_destroy(s.ep);
    tt_close(&n);
    free(ping);
    free(buf);
    free(z);
    return 0;
}
