/*
 * test_world.c - ranks of one job (started by ferryrun) exchange active messages and use RMA
 * and atomics through the public API, over whatever transport FERRY_TLS selects.
 *
 *   alltoall_sizes   every rank sends every other rank messages of 0 B .. 4 MiB (and one of
 *                    64 MiB to its right neighbour); each arrives once, in order, intact
 *   many_to_one      every rank floods rank 0, which is slower (it sleeps now and then);
 *                    nothing is lost, order per sender holds
 *   counter          every rank fetch-adds one counter at rank 0: exactly N x iters
 *   put_get_ring     each rank puts a pattern into its right neighbour's memory, then gets
 *                    it back from its left neighbour's; verified at the target and the origin
 *   tags             tagged messages to every rank, eager and rendezvous, order per sender
 *   from_allocated   AMs (contiguous and iovec) and tagged messages of 16 KiB to 4 MiB sent,
 *                    with requests, from memory ferry allocated (over shm the receiver reads
 *                    it in place) and received into such memory: each arrives once, intact
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fytest.h"
#include "ferry.h"
#include "fytest_util.h"

enum { AM_DATA = 10, AM_RKEY = 11 };

static ferry_context_t *ctx;
static ferry_worker_t *worker;
static ferry_world_t *world;
static int rank, size;

typedef struct peer_rx {
    unsigned count, bad, next_seq;
} peer_rx_t;
static peer_rx_t *rx; /* per sender */

typedef struct hdr {
    int32_t src;
    uint32_t seq;
    uint32_t seed;
    uint32_t slow; /* receiver: sleep a little now and then */
} hdr_t;

static ferry_status_t on_data(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)reply_ep;
    hdr_t h;
    if (header_len != sizeof(h))
        FYTEST_FAIL("header of %zu bytes", header_len);
    memcpy(&h, header, sizeof(h));
    if (h.src < 0 || h.src >= size)
        FYTEST_FAIL("bad source rank %d", h.src);
    peer_rx_t *p = &rx[h.src];
    if (h.seq != p->next_seq || !fy_pattern_ok(data, len, h.seed)) {
        fprintf(stderr, "rank %d: from %d seq %u (expected %u) len %zu: %s\n", rank, h.src, h.seq,
                p->next_seq, len, fy_pattern_ok(data, len, h.seed) ? "out of order" : "corrupt");
        p->bad++;
    }
    p->next_seq = h.seq + 1;
    p->count++;
    if (h.slow && (p->count % 512) == 0)
        usleep(2000);
    return FERRY_OK;
}

static void reset_rx(void)
{
    memset(rx, 0, sizeof(*rx) * (size_t)size);
}

static ferry_ep_t *ep_to(int r)
{
    ferry_ep_t *ep;
    FY_ASSERT_OK(ferry_world_ep(world, r, &ep));
    return ep;
}

static void send_msg(int to, uint32_t seq, uint32_t slow, void *buf, size_t len)
{
    hdr_t h = {rank, seq, (uint32_t)(rank * 100000 + to * 1000) + seq, slow};
    fy_pattern(buf, len, h.seed);
    ferry_status_t st;
    while ((st = ferry_am_send(ep_to(to), AM_DATA, &h, sizeof(h), buf, len, NULL)) ==
           FERRY_ERR_NO_RESOURCE)
        ferry_worker_progress(worker);
    FY_ASSERT_OK(st);
}

static void wait_counts(unsigned expected_from_each, int only_rank0)
{
    for (;;) {
        int done = 1;
        for (int r = 0; r < size; r++)
            if (r != rank && (!only_rank0 || rank == 0) && rx[r].count < expected_from_each)
                done = 0;
        if (done)
            break;
        ferry_worker_wait(worker, 100);
    }
    for (int r = 0; r < size; r++)
        FY_ASSERT_EQ(rx[r].bad, 0);
}

static void alltoall_sizes(void)
{
    static const size_t sizes[] = {0,    1,    8,     63,     64,      1000,
                                   4096, 8191, 65536, 300000, 1 << 20, 4 << 20};
    unsigned n = sizeof(sizes) / sizeof(sizes[0]);
    reset_rx();
    FY_ASSERT_OK(ferry_world_barrier(world));
    void *buf = malloc(64 << 20);
    for (unsigned i = 0; i < n; i++)
        for (int k = 1; k < size; k++)
            send_msg((rank + k) % size, i, 0, buf, sizes[i]);
    /* one 64 MiB message to the right neighbour */
    send_msg((rank + 1) % size, n, 0, buf, 64 << 20);
    for (;;) {
        int done = 1;
        for (int r = 0; r < size; r++) {
            unsigned want = r == rank ? 0 : n + (r == (rank + size - 1) % size ? 1 : 0);
            if (rx[r].count < want)
                done = 0;
        }
        if (done)
            break;
        ferry_worker_wait(worker, 100);
    }
    for (int r = 0; r < size; r++)
        FY_ASSERT_EQ(rx[r].bad, 0);
    FY_ASSERT_OK(ferry_world_barrier(world));
    free(buf);
}

static void many_to_one(void)
{
    unsigned iters = 5000;
    reset_rx();
    FY_ASSERT_OK(ferry_world_barrier(world));
    if (rank != 0) {
        char buf[256];
        for (unsigned i = 0; i < iters; i++) {
            send_msg(0, i, 1, buf, (i % 7 == 0) ? 256 : 24);
            if (i % 256 == 0)
                ferry_worker_progress(worker);
        }
    } else {
        wait_counts(iters, 1);
    }
    FY_ASSERT_OK(ferry_world_barrier(world));
}

/* rank 0 (or each rank) shares a region: rkeys travel by AM */
static char rkey_buf[64][1024];
static size_t rkey_len[64];
static int rkeys_got;
static uint64_t raddr[64];

static ferry_status_t on_rkey(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)reply_ep;
    int32_t src;
    FY_ASSERT(header_len == sizeof(src) + sizeof(uint64_t) && len <= sizeof(rkey_buf[0]));
    memcpy(&src, header, sizeof(src));
    memcpy(&raddr[src], (const char *)header + sizeof(src), sizeof(uint64_t));
    memcpy(rkey_buf[src], data, len);
    rkey_len[src] = len;
    rkeys_got++;
    return FERRY_OK;
}

static ferry_mem_t *share_region(size_t len, void **addr, int to_all)
{
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                             .length = len,
                             .flags = FERRY_MEM_ALLOCATE};
    ferry_mem_t *mem;
    FY_ASSERT_OK(ferry_mem_map(ctx, &mp, &mem));
    FY_ASSERT_OK(ferry_mem_query(mem, addr, NULL));
    memset(*addr, 0, len);
    char buf[1024];
    size_t blen = sizeof(buf);
    FY_ASSERT_OK(ferry_rkey_pack(ctx, mem, buf, &blen));
    char h[12];
    int32_t me = rank;
    uint64_t a = (uint64_t)(uintptr_t)*addr;
    memcpy(h, &me, 4);
    memcpy(h + 4, &a, 8);
    for (int r = 0; r < size; r++)
        if (r != rank && to_all)
            FY_ASSERT_OK(ferry_am_send(ep_to(r), AM_RKEY, h, sizeof(h), buf, blen, NULL));
    return mem;
}

static void counter(void)
{
    unsigned iters = 2000;
    rkeys_got = 0;
    FY_ASSERT_OK(ferry_world_barrier(world));
    void *addr = NULL;
    ferry_mem_t *mem = NULL;
    if (rank == 0) {
        mem = share_region(4096, &addr, 1);
    } else {
        while (rkeys_got < 1)
            ferry_worker_wait(worker, 100);
        ferry_rkey_t *rk;
        ferry_ep_t *ep = ep_to(0);
        FY_ASSERT_OK(ferry_rkey_unpack(ep, rkey_buf[0], rkey_len[0], &rk));
        uint64_t prev = 0;
        for (unsigned i = 0; i < iters; i++) {
            uint64_t old = 0;
            FY_ASSERT_OK(ferry_atomic(ep, FERRY_ATOMIC_ADD, 8, 1, 0, &old, raddr[0], rk, NULL));
            FY_ASSERT(i == 0 || old > prev); /* strictly increasing as seen by one rank */
            prev = old;
            /* and a non-fetching add on the second word */
            FY_ASSERT_OK(ferry_atomic(ep, FERRY_ATOMIC_ADD, 8, 2, 0, NULL, raddr[0] + 8, rk, NULL));
        }
        FY_ASSERT_OK(ferry_ep_flush(ep, NULL));
        ferry_rkey_destroy(rk);
    }
    FY_ASSERT_OK(ferry_world_barrier(world));
    if (rank == 0) {
        uint64_t *c = addr;
        FY_ASSERT_U64_EQ(c[0], (uint64_t)(size - 1) * iters);
        FY_ASSERT_U64_EQ(c[1], (uint64_t)(size - 1) * iters * 2);
        FY_ASSERT_OK(ferry_mem_unmap(ctx, mem));
    }
    FY_ASSERT_OK(ferry_world_barrier(world));
}

static void put_get_ring(void)
{
    size_t len = 4 << 20;
    rkeys_got = 0;
    FY_ASSERT_OK(ferry_world_barrier(world));
    void *addr;
    ferry_mem_t *mem = share_region(len, &addr, 1);
    while (rkeys_got < size - 1)
        ferry_worker_wait(worker, 100);
    int right = (rank + 1) % size;
    ferry_ep_t *ep = ep_to(right);
    ferry_rkey_t *rk;
    FY_ASSERT_OK(ferry_rkey_unpack(ep, rkey_buf[right], rkey_len[right], &rk));
    char *src = malloc(len), *back = malloc(len);
    fy_pattern(src, len, (unsigned)rank + 7);
    static const size_t pieces[] = {1, 8, 100, 4096, 65536, 1 << 20};
    size_t off = 0;
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        FY_ASSERT_OK(ferry_put(ep, src + off, pieces[i], raddr[right] + off, rk, NULL));
        off += pieces[i];
    }
    FY_ASSERT_OK(ferry_put(ep, src + off, len - off, raddr[right] + off, rk, NULL));
    FY_ASSERT_OK(ferry_ep_flush(ep, NULL));
    FY_ASSERT_OK(ferry_world_barrier(world));
    int left = (rank + size - 1) % size;
    FY_ASSERT(fy_pattern_ok(addr, len, (unsigned)left + 7)); /* verified at the target */
    memset(back, 0, len);
    FY_ASSERT_OK(ferry_get(ep, back, len, raddr[right], rk, NULL));
    FY_ASSERT_MEM_EQ(back, src, len);
    /* out of bounds is refused, nothing touched */
    FY_ASSERT_STATUS(ferry_put(ep, src, 16, raddr[right] + len - 8, rk, NULL),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_OK(ferry_world_barrier(world));
    ferry_rkey_destroy(rk);
    free(src);
    free(back);
    FY_ASSERT_OK(ferry_world_barrier(world));
    FY_ASSERT_OK(ferry_mem_unmap(ctx, mem));
}

/* Tagged messages: each rank sends every other rank an eager and a rendezvous message; the
 * receiver takes them with a wildcard on the source and checks each, in per-sender order. */
static void tags(void)
{
    static const size_t lens[] = {100, 1 << 20, 0};
    FY_ASSERT_OK(ferry_world_barrier(world));
    ferry_request_t sreq[64 * 3];
    memset(sreq, 0, sizeof(sreq));
    char *bufs[3];
    for (int k = 0; k < 3; k++) {
        bufs[k] = malloc(lens[k] + 1);
        fy_pattern(bufs[k], lens[k], (unsigned)(rank * 10 + k));
    }
    int nreq = 0;
    for (int d = 1; d < size; d++) {
        int to = (rank + d) % size;
        for (int k = 0; k < 3; k++) {
            uint64_t tag = ((uint64_t)rank << 8) | (uint64_t)k;
            ferry_status_t st = ferry_tag_send(ep_to(to), tag, bufs[k], lens[k], &sreq[nreq]);
            FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
            if (st == FERRY_INPROGRESS)
                nreq++;
            else
                sreq[nreq].status = FERRY_OK;
        }
    }
    char *in = malloc(1 << 20);
    int next_k[64] = {0};
    for (int n = 0; n < (size - 1) * 3; n++) {
        ferry_request_t r;
        memset(&r, 0, sizeof(r));
        ferry_status_t st = ferry_tag_recv(worker, in, 1 << 20, 0, 0, &r);
        while (st == FERRY_INPROGRESS && r.status == FERRY_INPROGRESS)
            ferry_worker_wait(worker, 100);
        if (st == FERRY_INPROGRESS)
            st = r.status;
        FY_ASSERT_OK(st);
        int src = (int)(r.tag >> 8), k = (int)(r.tag & 0xff);
        FY_ASSERT(src >= 0 && src < size && src != rank && k < 3);
        FY_ASSERT_EQ(k, next_k[src]); /* per-sender order */
        next_k[src]++;
        FY_ASSERT_EQ(r.length, lens[k]);
        FY_ASSERT(fy_pattern_ok(in, lens[k], (unsigned)(src * 10 + k)));
    }
    for (int i = 0; i < nreq; i++)
        while (sreq[i].status == FERRY_INPROGRESS)
            ferry_worker_wait(worker, 100);
    for (int i = 0; i < nreq; i++)
        FY_ASSERT_OK(sreq[i].status);
    for (int k = 0; k < 3; k++)
        free(bufs[k]);
    free(in);
    FY_ASSERT_OK(ferry_world_barrier(world));
}

/* Sends from FERRY_MEM_ALLOCATE memory (over shm: read in place by the receiver), with a
 * request each, every size and kind to one peer at a time; tagged ones received into such
 * memory too. */
static void from_allocated(void)
{
    static const size_t lens[] = {16 << 10, (1 << 20) + 5, 4 << 20};
    const unsigned n = sizeof(lens) / sizeof(lens[0]);
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                             .length = 24 << 20,
                             .flags = FERRY_MEM_ALLOCATE};
    ferry_mem_t *mem;
    FY_ASSERT_OK(ferry_mem_map(ctx, &mp, &mem));
    char *base;
    size_t got;
    FY_ASSERT_OK(ferry_mem_query(mem, (void **)&base, &got));
    char *in = base + (20 << 20); /* tagged messages land here */
    reset_rx();
    FY_ASSERT_OK(ferry_world_barrier(world));
    for (int k = 1; k < size; k++) {
        int to = (rank + k) % size;
        uint32_t seq = 0; /* (each receiver counts per sender) */
        ferry_request_t req[2 * 3 + 3];
        memset(req, 0, sizeof(req));
        char *at = base;
        for (unsigned i = 0; i < 2 * n; i++) { /* first contiguous, then as two pieces */
            size_t len = lens[i % n];
            hdr_t h = {rank, seq++, (uint32_t)(rank * 100000 + to * 1000 + 500) + i, 0};
            fy_pattern(at, len, h.seed);
            struct iovec v[2] = {{at, 100}, {at + 100, len - 100}};
            ferry_status_t st =
                i < n ? ferry_am_send(ep_to(to), AM_DATA, &h, sizeof(h), at, len, &req[i])
                      : ferry_am_sendv(ep_to(to), AM_DATA, &h, sizeof(h), v, 2, &req[i]);
            FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
            if (st == FERRY_OK)
                req[i].status = FERRY_OK;
            at += (len + 4095) & ~(size_t)4095;
        }
        for (unsigned i = 0; i < n; i++) {
            fy_pattern(at, lens[i], (unsigned)(rank * 10 + 7 + i));
            ferry_status_t st = ferry_tag_send(ep_to(to), ((uint64_t)rank << 8) | (0x80 + i), at,
                                               lens[i], &req[2 * n + i]);
            FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
            if (st == FERRY_OK)
                req[2 * n + i].status = FERRY_OK;
            at += (lens[i] + 4095) & ~(size_t)4095;
        }
        /* what the one to our left sends us meanwhile (it goes round as we do) */
        int from = (rank + size - k) % size;
        for (unsigned i = 0; i < n; i++) {
            ferry_request_t r;
            memset(&r, 0, sizeof(r));
            ferry_status_t st =
                ferry_tag_recv(worker, in, 4 << 20, ((uint64_t)from << 8) | (0x80 + i), ~0ull, &r);
            while (st == FERRY_INPROGRESS && r.status == FERRY_INPROGRESS)
                ferry_worker_wait(worker, 100);
            FY_ASSERT_OK(st == FERRY_INPROGRESS ? r.status : st);
            FY_ASSERT_EQ(r.length, lens[i]);
            FY_ASSERT(fy_pattern_ok(in, lens[i], (unsigned)(from * 10 + 7 + i)));
        }
        for (unsigned i = 0; i < 3 * n; i++) {
            while (req[i].status == FERRY_INPROGRESS)
                ferry_worker_wait(worker, 100);
            FY_ASSERT_OK(req[i].status);
        }
        FY_ASSERT_OK(ferry_world_barrier(world)); /* before the memory is written again */
    }
    for (int r = 0; r < size; r++) {
        unsigned want = r == rank ? 0 : 2 * n;
        while (rx[r].count < want)
            ferry_worker_wait(worker, 100);
        FY_ASSERT_EQ(rx[r].bad, 0);
    }
    FY_ASSERT_OK(ferry_world_barrier(world));
    FY_ASSERT_OK(ferry_mem_unmap(ctx, mem));
}

static void setup(void)
{
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &worker));
    FY_ASSERT_OK(ferry_world_create(worker, &world));
    rank = ferry_world_rank(world);
    size = ferry_world_size(world);
    FY_ASSERT(size >= 2 && size <= 64);
    rx = calloc((size_t)size, sizeof(*rx));
    FY_ASSERT_OK(ferry_worker_set_am_handler(worker, AM_DATA, on_data, NULL));
    FY_ASSERT_OK(ferry_worker_set_am_handler(worker, AM_RKEY, on_rkey, NULL));
}

static void teardown(void)
{
    FY_ASSERT_OK(ferry_world_barrier(world));
    ferry_world_destroy(world);
    ferry_worker_destroy(worker);
    ferry_context_destroy(ctx);
    free(rx);
}

FYTEST_MAIN_INPROC(FYTEST_CASE(setup), FYTEST_CASE(alltoall_sizes), FYTEST_CASE(many_to_one),
                   FYTEST_CASE(counter), FYTEST_CASE(put_get_ring), FYTEST_CASE(tags),
                   FYTEST_CASE(from_allocated), FYTEST_CASE(teardown))
