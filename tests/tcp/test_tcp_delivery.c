/*
 * test_tcp_delivery.c - the tcp transport delivers, in order and intact: every size from 0 B
 * to 64 MiB through am_short / am_bcopy / am_zcopy, striped over several links (one link is
 * what tests/conformance checks over tcp);
 * many senders to one receiver; a receiver that stops reading (the sender sees NO_RESOURCE,
 * nothing is lost); put and get placed directly, with refusals for bad keys and ranges that
 * leave everything outside the region untouched, striped.  Peers are forked processes; every
 * message carries a checksum the receiver checks.
 */
#include <stdlib.h>
#include <string.h>

#include "fytest.h"
#include "tcp_testlib.h"
#include "util/status.h"

#define AM_ID 5

typedef struct msg_hdr {
    uint32_t seq, sender;
    uint64_t sum, len;
} msg_hdr_t;

typedef struct rx_state {
    uint32_t next[8];
    uint64_t got, bytes;
} rx_state_t;

static void rx_check(tt_node_t *n, uint8_t id, const void *data, size_t len)
{
    rx_state_t *s = n->user;
    msg_hdr_t h;
    FY_ASSERT_EQ(id, AM_ID);
    FY_ASSERT_GE(len, sizeof(h));
    memcpy(&h, data, sizeof(h));
    FY_ASSERT_LT(h.sender, 8);
    FY_ASSERT_U64_EQ(h.len, len - sizeof(h));
    FY_ASSERT_EQ(h.seq, s->next[h.sender]);
    s->next[h.sender]++;
    FY_ASSERT_U64_EQ(tt_sum((const char *)data + sizeof(h), len - sizeof(h)), h.sum);
    s->got++;
    s->bytes += len;
}

/* Send one checked message the way its size calls for; the buffer is free on return. */
static void send_msg(tt_node_t *n, fy_tl_ep_t *ep, uint32_t sender, uint32_t seq, const char *data,
                     size_t len)
{
    msg_hdr_t h = {seq, sender, tt_sum(data, len), len};
    ferry_status_t st;
    if (sizeof(h) + len <= n->attr.max_bcopy) {
        /* split the data over several iov entries to exercise the gather */
        size_t a = len / 3, b = len / 2;
        struct iovec v[4] = {{&h, sizeof(h)},
                             {(void *)data, a},
                             {(void *)(data + a), b - a},
                             {(void *)(data + b), len - b}};
        if (sizeof(h) + len <= n->attr.max_short)
            TT_RETRY(n, st, n->ops->am_short(ep, AM_ID, v, 4));
        else
            TT_RETRY(n, st, n->ops->am_bcopy(ep, AM_ID, v, 4));
        FY_ASSERT_OK(st);
        return;
    }
    tt_comp_t c;
    tt_comp_init(&c);
    struct iovec v[2] = {{(void *)data, len / 2}, {(void *)(data + len / 2), len - len / 2}};
    TT_RETRY(n, st, n->ops->am_zcopy(ep, AM_ID, &h, sizeof(h), v, 2, &c.super));
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "am_zcopy: %s",
                  ferry_status_string(st));
    if (st == FERRY_INPROGRESS) {
        tt_comp_wait(n, &c);
        FY_ASSERT_OK(c.status);
    }
}

/* A receiver: tells its address, then counts checked messages until told how many. */
static void receiver(int rfd, int wfd, void *arg)
{
    rx_state_t s;
    memset(&s, 0, sizeof(s));
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, rx_check, &s);
    tt_addr_t a;
    tt_get_addr(&n, &a);
    tt_write(wfd, &a, sizeof(a));
    uint64_t expect = UINT64_MAX;
    while (s.got < expect)
        if (tt_wait(&n, expect == UINT64_MAX ? rfd : -1, 1000))
            tt_read(rfd, &expect, sizeof(expect));
    uint64_t res[2] = {s.got, s.bytes};
    tt_write(wfd, res, sizeof(res));
    uint64_t bye;
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, &bye, sizeof(bye));
    tt_close(&n);
}

static void sizes_case(const char *links)
{
    setenv("FERRY_TCP_LINKS", links, 1);
    setenv("FERRY_TCP_STRIPE_MIN", "64k", 1);
    static const size_t sizes[] = {0,
                                   1,
                                   2,
                                   7,
                                   8,
                                   9,
                                   15,
                                   16,
                                   17,
                                   63,
                                   64,
                                   65,
                                   1000,
                                   4071,
                                   4072,
                                   4073,
                                   4096,
                                   8191,
                                   65535,
                                   65536,
                                   65537,
                                   100000,
                                   131072,
                                   262143,
                                   1 << 20,
                                   (1 << 20) + 7,
                                   (3 << 20) + 1,
                                   16 << 20,
                                   64 << 20};
    tt_proc_t peer;
    tt_fork(&peer, receiver, NULL);
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    tt_addr_t a;
    tt_read(peer.rfd, &a, sizeof(a));
    fy_tl_ep_t *ep = tt_ep(&n, &a);
    char *buf = malloc(64 << 20);
    FY_ASSERT(buf != NULL);
    uint64_t count = FY_ARRAY_SIZE(sizes), bytes = 0;
    for (uint32_t i = 0; i < count; i++) {
        tt_fill(buf, sizes[i], i + 1);
        send_msg(&n, ep, 0, i, buf, sizes[i]);
        bytes += sizes[i] + sizeof(msg_hdr_t);
    }
    tt_write(peer.wfd, &count, sizeof(count));
    uint64_t res[2];
    while (!tt_wait(&n, peer.rfd, 1000)) {
    }
    tt_read(peer.rfd, res, sizeof(res));
    FY_ASSERT_U64_EQ(res[0], count);
    FY_ASSERT_U64_EQ(res[1], bytes);
    ferry_ep_stats_t stats;
    FY_ASSERT_OK(n.ops->ep_get_stats(ep, &stats));
    FY_ASSERT_U64_EQ(stats.tx_msgs, count);
    FY_ASSERT_EQ(n.nerr, 0);
    tt_write(peer.wfd, &count, sizeof(count));
    tt_join(&peer);
    n.ops->ep_destroy(ep);
    tt_close(&n);
    free(buf);
}

static void sizes_two_links(void)
{
    sizes_case("2");
}
static void sizes_four_links(void)
{
    sizes_case("4");
}

/* ---- many senders ----------------------------------------------------------------------- */

#define SENDERS    4
#define PER_SENDER 3000

static void sender(int rfd, int wfd, void *arg)
{
    uint32_t id = (uint32_t)(uintptr_t)arg;
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    tt_addr_t a;
    tt_read(rfd, &a, sizeof(a));
    fy_tl_ep_t *ep = tt_ep(&n, &a);
    char *buf = malloc(300000);
    for (uint32_t i = 0; i < PER_SENDER; i++) {
        size_t len = i % 500 == 7 ? 200000 + i : (i * 37u) % 3000;
        tt_fill(buf, len, id * 100000 + i);
        send_msg(&n, ep, id, i, buf, len);
    }
    tt_comp_t c;
    tt_comp_init(&c);
    ferry_status_t st;
    TT_RETRY(&n, st, n.ops->ep_flush(ep, &c.super));
    if (st == FERRY_INPROGRESS) {
        tt_comp_wait(&n, &c);
        st = c.status;
    }
    FY_ASSERT_OK(st);
    tt_write(wfd, &id, sizeof(id));
    uint32_t bye;
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, &bye, sizeof(bye));
    n.ops->ep_destroy(ep);
    tt_close(&n);
    free(buf);
}

static void many_senders(void)
{
    rx_state_t s;
    memset(&s, 0, sizeof(s));
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, rx_check, &s);
    tt_addr_t a;
    tt_get_addr(&n, &a);
    tt_proc_t p[SENDERS];
    for (uintptr_t i = 0; i < SENDERS; i++) {
        tt_fork(&p[i], sender, (void *)i);
        tt_write(p[i].wfd, &a, sizeof(a));
    }
    while (s.got < (uint64_t)SENDERS * PER_SENDER)
        tt_wait(&n, -1, 1000);
    for (int i = 0; i < SENDERS; i++) {
        FY_ASSERT_EQ(s.next[i], PER_SENDER);
        uint32_t id;
        while (!tt_wait(&n, p[i].rfd, 1000)) {
        }
        tt_read(p[i].rfd, &id, sizeof(id));
        FY_ASSERT_EQ(id, i);
    }
    for (int i = 0; i < SENDERS; i++) {
        tt_write(p[i].wfd, &s.got, sizeof(uint32_t));
        tt_join(&p[i]);
    }
    FY_ASSERT_EQ(n.nerr, 0);
    tt_close(&n);
}

/* ---- slow receiver ---------------------------------------------------------------------- */

static void slow_receiver_peer(int rfd, int wfd, void *arg)
{
    rx_state_t s;
    memset(&s, 0, sizeof(s));
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, rx_check, &s);
    tt_addr_t a;
    tt_get_addr(&n, &a);
    tt_write(wfd, &a, sizeof(a));
    while (s.got < 1) /* the first message: the connection is up */
        tt_wait(&n, -1, 1000);
    tt_write(wfd, &s.got, sizeof(s.got));
    uint64_t expect; /* now stop reading until told how many to expect */
    tt_read(rfd, &expect, sizeof(expect));
    while (s.got < expect)
        tt_wait(&n, -1, 1000);
    tt_write(wfd, &s.got, sizeof(s.got));
    tt_read(rfd, &expect, sizeof(expect));
    tt_close(&n);
}

static void slow_receiver(void)
{
    setenv("FERRY_TCP_TX_QUEUE", "256k", 1);
    tt_proc_t peer;
    tt_fork(&peer, slow_receiver_peer, NULL);
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    tt_addr_t a;
    tt_read(peer.rfd, &a, sizeof(a));
    fy_tl_ep_t *ep = tt_ep(&n, &a);
    char buf[1024];
    uint32_t seq = 0;
    tt_fill(buf, sizeof(buf), 1);
    send_msg(&n, ep, 0, seq++, buf, sizeof(buf));
    uint64_t got;
    while (!tt_wait(&n, peer.rfd, 1000)) {
    }
    tt_read(peer.rfd, &got, sizeof(got));
    /* the receiver reads nothing now: fill socket buffers and our queue until refused */
    msg_hdr_t h = {0, 0, tt_sum(buf, sizeof(buf)), sizeof(buf)};
    struct iovec v[2] = {{&h, sizeof(h)}, {buf, sizeof(buf)}};
    ferry_status_t st = FERRY_OK;
    for (int i = 0; i < 1000000 && st == FERRY_OK; i++) {
        h.seq = seq;
        st = n.ops->am_short(ep, AM_ID, v, 2);
        seq += st == FERRY_OK;
        tt_progress(&n);
    }
    FY_ASSERT_STATUS(st, FERRY_ERR_NO_RESOURCE);
    /* refused means refused: a second try without progress in between is refused too */
    FY_ASSERT_STATUS(n.ops->am_short(ep, AM_ID, v, 2), FERRY_ERR_NO_RESOURCE);
    uint64_t expect = seq + 2000;
    tt_write(peer.wfd, &expect, sizeof(expect));
    while (seq < expect)
        send_msg(&n, ep, 0, seq++, buf, sizeof(buf));
    while (!tt_wait(&n, peer.rfd, 1000)) {
    }
    tt_read(peer.rfd, &got, sizeof(got));
    FY_ASSERT_U64_EQ(got, expect);
    tt_write(peer.wfd, &got, sizeof(got));
    tt_join(&peer);
    FY_ASSERT_EQ(n.nerr, 0);
    n.ops->ep_destroy(ep);
    tt_close(&n);
}

/* ---- put and get ------------------------------------------------------------------------ */

#define REGION (1u << 20)
#define GUARD  (1u << 20)

typedef struct rma_info {
    uint64_t base, ro_base;
    uint8_t rkey[64], ro_rkey[64];
} rma_info_t;

static void rma_target(int rfd, int wfd, void *arg)
{
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    char *mem = malloc(REGION + 2 * GUARD), *ro = malloc(65536);
    tt_fill(mem, REGION + 2 * GUARD, 77);
    tt_fill(ro, 65536, 78);
    uint64_t guard0 = tt_sum(mem, GUARD), guard1 = tt_sum(mem + GUARD + REGION, GUARD);
    void *memh = calloc(1, n.tl->memh_size), *ro_memh = calloc(1, n.tl->memh_size);
    FY_ASSERT_OK(n.ops->mem_reg(n.md, mem + GUARD, REGION,
                                FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE, memh));
    FY_ASSERT_OK(n.ops->mem_reg(n.md, ro, 65536, FERRY_MEM_REMOTE_READ, ro_memh));
    rma_info_t info;
    memset(&info, 0, sizeof(info));
    info.base = (uint64_t)(uintptr_t)(mem + GUARD);
    info.ro_base = (uint64_t)(uintptr_t)ro;
    FY_ASSERT(n.tl->rkey_packed_size <= sizeof(info.rkey));
    FY_ASSERT_OK(n.ops->rkey_pack(n.md, memh, info.rkey));
    FY_ASSERT_OK(n.ops->rkey_pack(n.md, ro_memh, info.ro_rkey));
    tt_addr_t a;
    tt_get_addr(&n, &a);
    tt_write(wfd, &a, sizeof(a));
    tt_write(wfd, &info, sizeof(info));
    uint64_t want;
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, &want, sizeof(want));
    uint64_t res[3];
    res[0] = tt_sum(mem + GUARD, REGION) == want;
    res[1] = tt_sum(mem, GUARD) == guard0 && tt_sum(mem + GUARD + REGION, GUARD) == guard1;
    char *ro_expect = malloc(65536);
    tt_fill(ro_expect, 65536, 78);
    res[2] = memcmp(ro, ro_expect, 65536) == 0;
    free(ro_expect);
    tt_write(wfd, res, sizeof(res));
    tt_read(rfd, &want, sizeof(want));
    n.ops->mem_dereg(n.md, memh);
    n.ops->mem_dereg(n.md, ro_memh);
    tt_close(&n);
    free(memh);
    free(ro_memh);
    free(mem);
    free(ro);
}

static ferry_status_t rma_op(tt_node_t *n, fy_tl_ep_t *ep, int put, void *buf, size_t len,
                             uint64_t addr, const void *rkey)
{
    tt_comp_t c;
    tt_comp_init(&c);
    struct iovec v = {buf, len};
    ferry_status_t st;
    if (put)
        TT_RETRY(n, st, n->ops->put_zcopy(ep, &v, 1, addr, rkey, &c.super));
    else
        TT_RETRY(n, st, n->ops->get_zcopy(ep, &v, 1, addr, rkey, &c.super));
    if (st != FERRY_INPROGRESS)
        return st;
    tt_comp_wait(n, &c);
    return c.status;
}

static void put_get_case(const char *links)
{
    setenv("FERRY_TCP_LINKS", links, 1);
    setenv("FERRY_TCP_STRIPE_MIN", "64k", 1);
    tt_proc_t peer;
    tt_fork(&peer, rma_target, NULL);
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    tt_addr_t a;
    rma_info_t info;
    tt_read(peer.rfd, &a, sizeof(a));
    tt_read(peer.rfd, &info, sizeof(info));
    fy_tl_ep_t *ep = tt_ep(&n, &a);
    void *rkey = calloc(1, n.tl->rkey_size), *ro_rkey = calloc(1, n.tl->rkey_size);
    void *bad_rkey = calloc(1, n.tl->rkey_size);
    FY_ASSERT_OK(n.ops->rkey_unpack(n.md, info.rkey, rkey));
    FY_ASSERT_OK(n.ops->rkey_unpack(n.md, info.ro_rkey, ro_rkey));
    info.rkey[12] ^= 0x40; /* the key half of (region id, key) */
    FY_ASSERT_OK(n.ops->rkey_unpack(n.md, info.rkey, bad_rkey));

    char *mirror = malloc(REGION), *buf = malloc(REGION), *back = malloc(REGION);
    tt_fill(mirror, REGION, 77 + 1000); /* what we expect the region to hold */
    /* the region's initial content is unknown here: write all of it first */
    FY_ASSERT_OK(rma_op(&n, ep, 1, mirror, REGION, info.base, rkey));
    static const size_t at[][2] = {{0, 100},        {4096, 65536}, {REGION - 1, 1},
                                   {12345, 300000}, {REGION, 0},   {0, 7}};
    for (size_t i = 0; i < FY_ARRAY_SIZE(at); i++) {
        tt_fill(buf, at[i][1], 500 + i);
        memcpy(mirror + at[i][0], buf, at[i][1]);
        FY_ASSERT_OK(rma_op(&n, ep, 1, buf, at[i][1], info.base + at[i][0], rkey));
    }
    tt_comp_t fc;
    tt_comp_init(&fc);
    ferry_status_t st = n.ops->ep_flush(ep, &fc.super);
    if (st == FERRY_INPROGRESS) {
        tt_comp_wait(&n, &fc);
        st = fc.status;
    }
    FY_ASSERT_OK(st);
    memset(back, 0, REGION);
    FY_ASSERT_OK(rma_op(&n, ep, 0, back, REGION, info.base, rkey));
    FY_ASSERT_MEM_EQ(back, mirror, REGION);
    memset(back, 0, 1000);
    FY_ASSERT_OK(rma_op(&n, ep, 0, back, 1000, info.base + REGION - 1000, rkey));
    FY_ASSERT_MEM_EQ(back, mirror + REGION - 1000, 1000);

    /* refusals: one byte past either end, a wrong key, writing a read-only region */
    tt_fill(buf, REGION, 999);
    FY_ASSERT_STATUS(rma_op(&n, ep, 1, buf, 11, info.base + REGION - 10, rkey),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(rma_op(&n, ep, 1, buf, 2, info.base - 1, rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(rma_op(&n, ep, 1, buf, 512 * 1024, info.base + REGION / 2 + 1, rkey),
                     FERRY_ERR_ACCESS_DENIED); /* striped, refused, its bytes discarded */
    FY_ASSERT_STATUS(rma_op(&n, ep, 1, buf, 100, info.base, bad_rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(rma_op(&n, ep, 0, back, 100, info.base, bad_rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(rma_op(&n, ep, 0, back, REGION + 1, info.base, rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(rma_op(&n, ep, 1, buf, 100, info.ro_base, ro_rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(rma_op(&n, ep, 1, buf, 100, info.ro_base, rkey), FERRY_ERR_ACCESS_DENIED);
    /* ... and the connection is still fine */
    FY_ASSERT_OK(rma_op(&n, ep, 0, back, 65536, info.ro_base, ro_rkey));
    char *expect_ro = malloc(65536);
    tt_fill(expect_ro, 65536, 78);
    FY_ASSERT_MEM_EQ(back, expect_ro, 65536);
    FY_ASSERT_OK(rma_op(&n, ep, 0, back, REGION, info.base, rkey));
    FY_ASSERT_MEM_EQ(back, mirror, REGION);
    FY_ASSERT_EQ(n.nerr, 0);

    uint64_t want = tt_sum(mirror, REGION), res[3];
    tt_write(peer.wfd, &want, sizeof(want));
    while (!tt_wait(&n, peer.rfd, 1000)) {
    }
    tt_read(peer.rfd, res, sizeof(res));
    FY_ASSERT_MSG(res[0], "the target region does not hold what was put");
    FY_ASSERT_MSG(res[1], "bytes outside the region were changed");
    FY_ASSERT_MSG(res[2], "a read-only region was changed");
    tt_write(peer.wfd, &want, sizeof(want));
    tt_join(&peer);
    n.ops->ep_destroy(ep);
    tt_close(&n);
    free(rkey);
    free(ro_rkey);
    free(bad_rkey);
    free(mirror);
    free(buf);
    free(back);
    free(expect_ro);
}

static void put_get_two_links(void)
{
    put_get_case("2");
}

FYTEST_MAIN(FYTEST_CASE(sizes_two_links), FYTEST_CASE(sizes_four_links), FYTEST_CASE(many_senders),
            FYTEST_CASE(slow_receiver), FYTEST_CASE(put_get_two_links))
