/*
 * test_tcp_partial.c - partial reads and writes never corrupt a frame.  With the transport's
 * test hook every socket read and write moves at most k bytes, for every k from 1 to past
 * the largest frame header (48 bytes), so each header is cut at each of its byte boundaries
 * on the way out and on the way in; then the same traffic with tiny socket buffers, where
 * the kernel cuts wherever it likes.  The traffic mixes every frame type: AMs of many sizes,
 * striped zero-copy AMs, puts (striped too), gets and flushes, in both directions.
 */
#include <stdlib.h>
#include <string.h>

#include "fytest.h"
#include "tcp_testlib.h"
#include "tl/tcp/tcp.h"
#include "util/status.h"

#define AM_ID  3
#define REGION 65536

typedef struct peer_state {
    uint64_t got, sum; /* AMs received, and a running checksum of (length, content) */
} peer_state_t;

static void rx(tt_node_t *n, uint8_t id, const void *data, size_t len)
{
    peer_state_t *s = n->user;
    FY_ASSERT_EQ(id, AM_ID);
    s->got++;
    s->sum = s->sum * 31 + tt_sum(data, len);
}

static const size_t am_sizes[] = {0, 1, 7, 8, 9, 47, 48, 49, 100, 3000, 5000, 9000, 20000};

/* The same traffic from either side: returns the checksum the receiver must find. */
static uint64_t traffic(tt_node_t *n, fy_tl_ep_t *ep, uint64_t base, const void *rkey,
                        uint64_t seed)
{
    static char buf[20000], back[8000];
    uint64_t sum = 0;
    ferry_status_t st;
    for (size_t i = 0; i < FY_ARRAY_SIZE(am_sizes); i++) {
        size_t len = am_sizes[i];
        tt_fill(buf, len, seed + i);
        sum = sum * 31 + tt_sum(buf, len);
        tt_comp_t c;
        tt_comp_init(&c);
        if (len < 4000) {
            struct iovec v = {buf, len};
            TT_RETRY(n, st, n->ops->am_short(ep, AM_ID, &v, 1));
            FY_ASSERT_OK(st);
            continue;
        }
        /* zcopy with a 5-byte "proto header" of its own, striped above 4 KiB */
        struct iovec v = {buf + 5, len - 5};
        TT_RETRY(n, st, n->ops->am_zcopy(ep, AM_ID, buf, 5, &v, 1, &c.super));
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
        if (st == FERRY_INPROGRESS) {
            tt_comp_wait(n, &c);
            FY_ASSERT_OK(c.status);
        }
    }
    /* put 6000 bytes (striped), get them back, flush */
    tt_fill(buf, 6000, seed + 99);
    tt_comp_t c;
    tt_comp_init(&c);
    struct iovec v = {buf, 6000};
    TT_RETRY(n, st, n->ops->put_zcopy(ep, &v, 1, base + 100, rkey, &c.super));
    FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
    tt_comp_wait(n, &c);
    FY_ASSERT_OK(c.status);
    tt_comp_init(&c);
    struct iovec g = {back, 6000};
    TT_RETRY(n, st, n->ops->get_zcopy(ep, &g, 1, base + 100, rkey, &c.super));
    FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
    tt_comp_wait(n, &c);
    FY_ASSERT_OK(c.status);
    FY_ASSERT_MEM_EQ(back, buf, 6000);
    tt_comp_init(&c);
    st = n->ops->ep_flush(ep, &c.super);
    if (st == FERRY_INPROGRESS) {
        tt_comp_wait(n, &c);
        st = c.status;
    }
    FY_ASSERT_OK(st);
    return sum;
}

typedef struct hello {
    tt_addr_t addr;
    uint64_t base;
    uint8_t rkey[64];
} hello_t;

/* Both sides: open, register a region, swap addresses and keys, run the traffic both ways,
 * compare what each received with what the other sent. */
static void side(int rfd, int wfd, uint64_t seed)
{
    peer_state_t s = {0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, rx, &s);
    char *mem = calloc(1, REGION);
    void *memh = calloc(1, n.tl->memh_size), *rkey = calloc(1, n.tl->rkey_size);
    FY_ASSERT_OK(
        n.ops->mem_reg(n.md, mem, REGION, FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE, memh));
    hello_t me, other;
    memset(&me, 0, sizeof(me));
    tt_get_addr(&n, &me.addr);
    me.base = (uint64_t)(uintptr_t)mem;
    FY_ASSERT_OK(n.ops->rkey_pack(n.md, memh, me.rkey));
    tt_write(wfd, &me, sizeof(me));
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, &other, sizeof(other));
    FY_ASSERT_OK(n.ops->rkey_unpack(n.md, other.rkey, rkey));
    fy_tl_ep_t *ep = tt_ep(&n, &other.addr);
    uint64_t sent = traffic(&n, ep, other.base, rkey, seed);
    uint64_t msg[2] = {FY_ARRAY_SIZE(am_sizes), sent}, theirs[2];
    tt_write(wfd, msg, sizeof(msg));
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, theirs, sizeof(theirs));
    while (s.got < theirs[0])
        tt_wait(&n, -1, 1000);
    FY_ASSERT_U64_EQ(s.got, theirs[0]);
    FY_ASSERT_U64_EQ(s.sum, theirs[1]);
    FY_ASSERT_EQ(n.nerr, 0);
    /* stay up until the other side has checked too (its last gets need us) */
    tt_write(wfd, msg, sizeof(msg));
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, theirs, sizeof(theirs));
    n.ops->ep_destroy(ep);
    n.ops->mem_dereg(n.md, memh);
    tt_close(&n);
    free(mem);
    free(memh);
    free(rkey);
}

static void child_side(int rfd, int wfd, void *arg)
{
    side(rfd, wfd, 1000);
}

static void run_pair(void)
{
    tt_proc_t peer;
    tt_fork(&peer, child_side, NULL);
    side(peer.rfd, peer.wfd, 2000);
    tt_join(&peer);
}

/* The peer of header_boundaries: one round per limit the parent sends (0: done), each with
 * fresh ifaces and connections, as run_pair's; one process for all of them, since a process
 * leaving under the sanitizers costs a leak check. */
static void child_rounds(int rfd, int wfd, void *arg)
{
    for (;;) {
        uint64_t k;
        tt_read(rfd, &k, sizeof(k));
        if (k == 0)
            break;
        fy_tcp_test_io_limit = (size_t)k;
        side(rfd, wfd, 1000);
    }
}

static void header_boundaries(void)
{
    setenv("FERRY_TCP_LINKS", "2", 1);
    setenv("FERRY_TCP_STRIPE_MIN", "4k", 1);
    tt_proc_t peer;
    tt_fork(&peer, child_rounds, NULL);
    for (uint64_t k = 1; k <= FY_TCP_HDR_MAX + 9; k++) {
        fy_tcp_test_io_limit = (size_t)k; /* the peer sets the same */
        tt_write(peer.wfd, &k, sizeof(k));
        side(peer.rfd, peer.wfd, 2000);
    }
    uint64_t done = 0;
    tt_write(peer.wfd, &done, sizeof(done));
    tt_join(&peer);
    fy_tcp_test_io_limit = 0;
}

static void tiny_socket_buffers(void)
{
    setenv("FERRY_TCP_LINKS", "2", 1);
    setenv("FERRY_TCP_STRIPE_MIN", "4k", 1);
    setenv("FERRY_TCP_SNDBUF", "4k", 1);
    setenv("FERRY_TCP_RCVBUF", "4k", 1);
    setenv("FERRY_TCP_RX_BUF", "4k", 1);
    for (int i = 0; i < 5; i++)
        run_pair();
}

FYTEST_MAIN(FYTEST_CASE(header_boundaries), FYTEST_CASE(tiny_socket_buffers))
