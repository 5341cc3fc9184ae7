/*
 * udp_stream.h - the checked message stream shared by the udp transfer tests and the
 * real-network fault tests: a sender process sends numbered, checksummed messages of the
 * given sizes (am_short / am_bcopy / am_zcopy by size), the receiver checks each one
 * (udp_test.h: ut_rx_check) and says "done", and both stay until the other is finished.
 * Addresses travel over pipes.  Include after fytest.h and udp_test.h.
 */
#ifndef FY_UDP_STREAM_H
#define FY_UDP_STREAM_H

/* The devices of the receiver (this process) and of the forked sender, and a hook the
 * sender runs first (the fault tests move it into another network namespace). */
static const char *stream_dev_rx = "lo", *stream_dev_tx = "lo";
static void (*stream_child_setup)(void);
/* Set by a case: the receiver checks that at most this many segments per 1000 (plus 10
 * for processes descheduled past a retransmission timeout on a loaded machine) arrived
 * twice - needless resends. */
static unsigned stream_max_dup_permille;
static unsigned stream_dup_slack = 10; /* the "plus 10" above */
/* Set by a case: the receiver's application stops for stream_stall_ms inside the handler of
 * message stream_stall_at (no progress, no ACKs: a slow receiver); the sender may resend at
 * most stream_max_resends segments in the whole stream (0: not checked). */
static unsigned stream_stall_at, stream_stall_ms, stream_max_resends;
static unsigned stream_stall_every; /* then again every this many messages (0: once) */
/* Set by a case: run by the receiver after the stream, before it closes (its checks), and
 * at the start of each stall (k = 0, 1, ...). */
static void (*stream_rx_after)(ut_node_t *n);
static void (*stream_on_stall)(ut_node_t *n, unsigned k);
static ut_node_t *stream_rx_node;
/* Set by a case: the sender's own check after the stream (nonzero: the sender fails). */
static int (*stream_tx_check)(ut_node_t *n);
static unsigned stream_nstalls;

typedef struct ut_comp {
    fy_tl_comp_t comp;
    volatile int done;
    ferry_status_t st;
    uint8_t *buf;
} ut_comp_t;

static void comp_cb(fy_tl_comp_t *comp, ferry_status_t st)
{
    ut_comp_t *c = (ut_comp_t *)comp;
    c->st = st;
    c->done = 1;
}

typedef struct peer_state {
    ut_rx_t rx;
    volatile int got_done;
} peer_state_t;

static void am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    peer_state_t *ps = arg;
    if (id == 1) {
        ut_rx_check(&ps->rx, data, len);
        uint32_t e = ps->rx.expect;
        if (stream_stall_ms != 0 &&
            (e == stream_stall_at || (stream_stall_every != 0 && e > stream_stall_at &&
                                      (e - stream_stall_at) % stream_stall_every == 0))) {
            if (stream_on_stall != NULL && stream_rx_node != NULL)
                stream_on_stall(stream_rx_node, stream_nstalls);
            stream_nstalls++;
            usleep(stream_stall_ms * 1000u);
        }
    } else if (id == 2)
        ps->got_done = 1;
}

static const size_t all_sizes[] = {0,     1,     7,      8,      100,     715,     716,
                                   717,   1000,  1460,   4096,   65000,   65403,   65404,
                                   65467, 65468, 100000, 999999, 1 << 20, 8388611, 64 << 20,
                                   3,     64,    70000,  0,      12345};
static const size_t small_sizes[] = {0, 8, 700, 5000, 65000, 200000, 1 << 20, 13, 3 << 20};

/* Send message i of the stream: am_short, am_bcopy or am_zcopy by size and index. */
static void send_one(ut_node_t *n, uint32_t i, size_t size, ut_comp_t *c)
{
    size_t total = UT_META + size;
    uint32_t meta[3];
    ferry_status_t st;
    c->buf = malloc(total ? total : 1);
    FY_ASSERT(c->buf != NULL);
    ut_pattern(c->buf + UT_META, size, i);
    meta[0] = i;
    meta[1] = (uint32_t)size;
    meta[2] = fy_udp_crc32c(0, c->buf + UT_META, size);
    memcpy(c->buf, meta, UT_META);
    c->comp.cb = comp_cb;
    c->done = 0;
    for (;;) {
        struct iovec iov = {c->buf, total};
        if (total <= n->attr.max_short && i % 3 == 0) {
            st = n->ops->am_short(n->ep, 1, &iov, 1);
        } else if (total <= n->attr.max_bcopy && i % 3 != 2) {
            st = n->ops->am_bcopy(n->ep, 1, &iov, 1);
        } else {
            /* header = the meta, data in two iov pieces */
            struct iovec d[2] = {{c->buf + UT_META, size / 3},
                                 {c->buf + UT_META + size / 3, size - size / 3}};
            st = n->ops->am_zcopy(n->ep, 1, c->buf, UT_META, d, 2, &c->comp);
        }
        if (st != FERRY_ERR_NO_RESOURCE)
            break;
        n->ops->iface_progress(n->iface);
    }
    if (st == FERRY_OK) {
        c->done = 1;
        c->st = FERRY_OK;
    } else {
        FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
    }
}

/* The sender (child): connect, send the stream, wait until the receiver says done. */
static int sender(int rfd, int wfd, const size_t *sizes, unsigned nsizes, unsigned rounds,
                  int sleepy)
{
    peer_state_t ps;
    ut_node_t n;
    ut_addr_t mine, theirs;
    unsigned count = nsizes * rounds;
    ut_comp_t *comps = calloc(count, sizeof(*comps));

    memset(&ps, 0, sizeof(ps));
    if (stream_child_setup != NULL)
        stream_child_setup();
    setenv("FERRY_UDP_IF_INCLUDE", stream_dev_tx, 1);
    if (ut_open(&n, stream_dev_tx, am_cb, &ps) != 0)
        return 10;
    n.sleepy = sleepy;
    ut_get_addr(&n, &mine);
    if (ut_write_all(wfd, &mine, sizeof(mine)) || ut_read_all(rfd, &theirs, sizeof(theirs)))
        return 11;
    if (ut_connect(&n, &theirs) != FERRY_OK)
        return 12;
    for (unsigned i = 0; i < count; i++) {
        send_one(&n, i, sizes[i % nsizes], &comps[i]);
        /* free what completed, keep memory bounded */
        for (unsigned j = 0; j <= i; j++)
            if (comps[j].done && comps[j].buf != NULL) {
                FY_ASSERT_OK(comps[j].st);
                free(comps[j].buf);
                comps[j].buf = NULL;
            }
        ut_progress(&n, 1);
    }
    if (!ut_wait_flag(&n, &ps.got_done, 60000))
        return 13;
    for (unsigned j = 0; j < count; j++) {
        while (!comps[j].done)
            ut_progress(&n, 10);
        FY_ASSERT_OK(comps[j].st);
        free(comps[j].buf);
    }
    free(comps);
    /* The statistics API: under real loss there were resends, an RTT, every message. */
    ferry_ep_stats_t es;
    const char *drop = getenv("FERRY_UDP_FAULT_DROP");
    if (n.ops->ep_get_stats(n.ep, &es) != FERRY_OK || es.tx_msgs < count)
        return 14;
    if (drop != NULL && atof(drop) >= 5 &&
        (es.retransmits == 0 || es.rtt_ns == 0 || es.rto_ns < es.rtt_ns / 2 ||
         es.window_max == 0)) {
        fprintf(stderr, "sender: statistics: %llu resends, rtt %llu ns, rto %llu ns, window %llu\n",
                (unsigned long long)es.retransmits, (unsigned long long)es.rtt_ns,
                (unsigned long long)es.rto_ns, (unsigned long long)es.window_max);
        return 15;
    }
    if (stream_max_resends != 0) {
        fprintf(stderr, "sender: %llu segments resent (%llu by the timer)\n",
                (unsigned long long)es.retransmits, (unsigned long long)es.timeouts);
        if (es.retransmits > stream_max_resends)
            return 16;
    }
    if (stream_tx_check != NULL && stream_tx_check(&n) != 0)
        return 17;
    ut_close(&n);
    return 0;
}

typedef struct sender_args {
    const size_t *sizes;
    unsigned nsizes, rounds;
    int sleepy;
} sender_args_t;

static int sender_body(int rfd, int wfd, void *arg)
{
    sender_args_t *a = arg;
    return sender(rfd, wfd, a->sizes, a->nsizes, a->rounds, a->sleepy);
}

static void run_transfer(const size_t *sizes, unsigned nsizes, unsigned rounds, int sleepy)
{
    int st = 0;
    peer_state_t ps;
    ut_node_t n;
    ut_addr_t mine, theirs;
    pid_t pid;

    sender_args_t sa = {sizes, nsizes, rounds, sleepy};
    fyproc_t peer;
    pid = ut_spawn(&peer, sender_body, &sa);
    FY_ASSERT(pid > 0);
    memset(&ps, 0, sizeof(ps));
    ps.rx.count = nsizes * rounds;
    setenv("FERRY_UDP_IF_INCLUDE", stream_dev_rx, 1);
    FY_ASSERT_EQ(ut_open(&n, stream_dev_rx, am_cb, &ps), 0);
    n.sleepy = sleepy;
    stream_rx_node = &n;
    stream_nstalls = 0;
    ut_get_addr(&n, &mine);
    FY_ASSERT_EQ(ut_write_all(peer.wfd, &mine, sizeof(mine)), 0);
    FY_ASSERT_EQ(ut_read_all(peer.rfd, &theirs, sizeof(theirs)), 0);
    FY_ASSERT_OK(ut_connect(&n, &theirs));
    uint64_t t0 = fy_time_ns();
    ut_wait_flag(&n, &ps.rx.done, 100000);
    double secs = (double)(fy_time_ns() - t0) / 1e9;
    FY_ASSERT_MSG(!ps.rx.bad, "receiver: %s", ps.rx.why);
    FY_ASSERT_MSG(ps.rx.done, "receiver got %u of %u messages", ps.rx.expect, ps.rx.count);
    printf("  %u messages, %.1f MiB in %.2f s\n", ps.rx.count, (double)ps.rx.bytes / 1048576.0,
           secs);
    /* Tell the sender, and keep progressing (it may need our retransmissions) until it ends. */
    struct iovec iov = {"done", 4};
    ferry_status_t s;
    while ((s = n.ops->am_short(n.ep, 2, &iov, 1)) == FERRY_ERR_NO_RESOURCE)
        ut_progress(&n, 1);
    FY_ASSERT_OK(s);
    uint64_t end = fy_time_ns() + 30 * FY_NSEC_PER_SEC;
    int exited = 0;
    while (!exited && fy_time_ns() < end) {
        ut_progress(&n, 1);
        exited = waitpid(pid, &st, WNOHANG) == pid;
    }
    FY_ASSERT_MSG(exited, "the sender did not finish");
    FY_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sender failed: status 0x%x", st);
    peer.reaped = 1;
    fyproc_release(&peer);
    if (stream_max_dup_permille != 0) {
        ferry_ep_stats_t es;
        uint64_t segs = 0;
        FY_ASSERT_OK(n.ops->ep_get_stats(n.ep, &es));
        for (unsigned i = 0; i < nsizes * rounds; i++)
            segs += sizes[i % nsizes] / (n.attr.max_bcopy - 64) + 1;
        printf("  %llu of ~%llu segments received twice (needless resends)\n",
               (unsigned long long)es.drops_duplicate, (unsigned long long)segs);
        FY_ASSERT_MSG(es.drops_duplicate <=
                          stream_dup_slack + segs * stream_max_dup_permille / 1000,
                      "%llu needless resends in ~%llu segments",
                      (unsigned long long)es.drops_duplicate, (unsigned long long)segs);
    }
    if (getenv("FERRY_STATS"))
        n.ops->iface_print(n.iface, stdout);
    if (stream_rx_after != NULL)
        stream_rx_after(&n);
    stream_rx_node = NULL;
    ut_close(&n);
}

#endif
