/*
 * test_shm_am.c - active messages over the shm transport, driven through the tl ops table
 * between forked processes: every size from 0 B to 64 MiB + 4 KiB delivered once, intact and in
 * order (with cross-memory attach, with FERRY_SHM_CMA=n, and with CMA refused at run time by
 * a seccomp filter), the outbox growing for large messages, pipelined zero-copy mixed with small
 * messages, many senders under pressure, a slow receiver (back-pressure, nothing lost),
 * sleeping on the event fd, and a ring's first lap without page faults.
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "shm_test.h"
#include "util/clock.h"
#include "fytest_util.h"

static unsigned long ev_count; /* messages to a process that expects none but events */
static void ev_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    ev_count++;
}

/* ---- a receiver that checks message k: sizes[k % nsizes] bytes of pattern seed k ---- */

typedef struct rxcheck {
    const size_t *sizes;
    size_t nsizes;
    unsigned long count, errors, expected;
    uint64_t delay_ns; /* a slow receiver: spin this long per message */
    int sparse;        /* huge messages: check one signature word per 4 KiB page */
} rxcheck_t;

/* A page signature for the sparse check: cheap to write and to check, different per page. */
static uint64_t page_sig(size_t page)
{
    return page * 0x9e3779b97f4a7c15ull + 0x5a;
}

static void rxcheck_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    rxcheck_t *r = arg;
    unsigned long k = r->count++;
    size_t want = r->sizes[k % r->nsizes];
    if (len != want) {
        if (r->errors++ < 5)
            fprintf(stderr, "message %lu: %zu bytes, expected %zu\n", k, len, want);
        return;
    }
    long bad = -1;
    if (r->sparse) {
        for (size_t pg = 0; pg < len / 4096 && bad < 0; pg++)
            if (memcmp((const char *)data + pg * 4096, &(uint64_t){page_sig(pg)}, 8) != 0)
                bad = (long)(pg * 4096);
    } else {
        bad = pat_check(data, len, k);
    }
    if (bad >= 0 && r->errors++ < 5)
        fprintf(stderr, "message %lu (%zu bytes): wrong byte at %ld\n", k, len, bad);
    if (id != (k & FY_TL_AM_ID_MAX) && r->errors++ < 5)
        fprintf(stderr, "message %lu: id %u, expected %lu\n", k, id, k & FY_TL_AM_ID_MAX);
    if (r->delay_ns != 0) {
        uint64_t until = fy_time_ns() + r->delay_ns;
        while (fy_time_ns() < until) {
        }
    }
}

typedef struct rx_args {
    rxcheck_t check;
    int sleepy;
    int deny_cma; /* install a seccomp filter: process_vm_readv/writev fail with EPERM */
} rx_args_t;

/* The receiving peer: open, send the address, take `expected` messages, report
 * (count, errors, chunks received), wait for the go-ahead to close. */
static void rx_main(int rfd, int wfd, void *arg)
{
    rx_args_t *a = arg;
    if (a->deny_cma)
        fy_deny_cma();
    tproc_t p;
    tp_open(&p, rxcheck_cb, &a->check);
    p.sleepy = a->sleepy;
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    while (a->check.count < a->check.expected)
        tp_progress(&p);
    tc_put_u64(wfd, a->check.count);
    tc_put_u64(wfd, a->check.errors);
    tc_put_u64(wfd, tp_shm(&p)->stats.rx_frag);
    tp_wait_fd(&p, rfd); /* keep answering until the sender is done */
    tc_get_u64(rfd);
    tp_close(&p);
}

static const size_t sweep[] = {0,
                               1,
                               7,
                               8,
                               15,
                               16,
                               17,
                               64,
                               111,
                               112,
                               113,
                               1000,
                               4095,
                               4096,
                               8191,
                               8192,
                               8193,
                               12345,
                               65536,
                               1 << 20,
                               (1 << 20) + 3,
                               (2 << 20) - 64,
                               (2 << 20) + 1,
                               4 << 20,
                               12345679, /* outbox, streamed stores, pieces off line bounds */
                               16 << 20, /* the largest in the outbox's first 40 MiB */
                               (16 << 20) + 1,
                               (17 << 20) + 13,    /* the outbox beyond its first 40 MiB */
                               64 << 20,           /* the largest through the outbox */
                               (64 << 20) + 4097}; /* past it: pulled (or pushed) */

static uint64_t last_split; /* messages the last sweep or mixed run sent split */

/* Send sweep[] twice (natural op choice, then all zcopy); each zcopy waits for its
 * completion.  Returns the chunks the receiver got. */
static uint64_t run_sweep(int deny)
{
    static rx_args_t a;
    a = (rx_args_t){.check = {.sizes = sweep, .nsizes = FY_ARRAY_SIZE(sweep)}, .deny_cma = deny};
    size_t n = FY_ARRAY_SIZE(sweep);
    a.check.expected = 2 * n;
    tchild_t c = tc_spawn(rx_main, &a);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *buf = malloc((64 << 20) + 4097);
    FY_ASSERT(buf != NULL);
    for (unsigned long k = 0; k < 2 * n; k++) {
        size_t len = sweep[k % n];
        pat_fill(buf, len, k);
        tcomp_t comp;
        tcomp_init(&comp);
        ferry_status_t st =
            tp_send(&p, ep, (uint8_t)(k & FY_TL_AM_ID_MAX), buf, len, k >= n, &comp.super, NULL);
        FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "send of %zu bytes: %s", len,
                      ferry_status_string(st));
        if (st == FERRY_INPROGRESS) {
            while (comp.done == 0)
                tp_progress(&p);
            FY_ASSERT_EQ(comp.done, 1);
            FY_ASSERT_OK(comp.status);
        } else {
            FY_ASSERT_EQ(comp.done, 0);
        }
    }
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 2 * n);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    uint64_t chunks = tc_get_u64(c.rfd);
    tcomp_t fl;
    tcomp_init(&fl);
    ferry_status_t st = p.ops->ep_flush(ep, &fl.super);
    FY_ASSERT(st == FERRY_OK);
    shm_ep_t *sep = (shm_ep_t *)ep;
    int mode = sep->zc_mode;
    last_split = tp_shm(&p)->stats.tx_split;
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    free(buf);
    FY_ASSERT_EQ(mode, deny || getenv("FERRY_SHM_CMA") ? SHM_ZC_PUSH : SHM_ZC_PULL);
    return chunks;
}

/* 0 B .. 64 MiB + 4097 B with cross-memory attach: zero-copy messages are pulled (no chunks). */
static void sweep_cma(void)
{
    FY_ASSERT_EQ(run_sweep(0), 0);
}

/* The same with FERRY_SHM_CMA=n: zero-copy messages are pushed through the ring. */
static void sweep_no_cma(void)
{
    setenv("FERRY_SHM_CMA", "n", 1);
    FY_ASSERT_GT(run_sweep(0), 8192); /* 64 MiB + 4097 B alone is 8193 chunks of 8 KiB */
}

/* CMA refused at run time (seccomp in the receiver): the first pull is refused, the sender
 * falls back to pushing, and nothing is lost or reordered. */
static void sweep_cma_denied(void)
{
    FY_ASSERT_GT(run_sweep(1), 8192);
}

/* Outbox messages of 1 MiB and more split (shm.h, shm_obox_split_t): the first one is pulled
 * (the probe that shows the receiver can pull), the later ones are copied half by each side
 * into the slot; every byte checked. */
static void sweep_split(void)
{
    setenv("FERRY_SHM_OUTBOX_SPLIT", "1m", 1);
    FY_ASSERT_EQ(run_sweep(0), 0);
    FY_ASSERT_GE(last_split, 6); /* 1m+3 .. 16m, zero-copy at least once */
}

/* The same where the receiver may not pull: its probe is refused, nothing is split. */
static void sweep_split_denied(void)
{
    setenv("FERRY_SHM_OUTBOX_SPLIT", "1m", 1);
    FY_ASSERT_GT(run_sweep(1), 8192);
    FY_ASSERT_EQ(last_split, 0);
}

/* The outbox beyond its 8 MiB base is reserved only when a large message first needs it: a
 * 12 MiB message is sent through it at once (complete on return), and 2 MiB ones stay in the
 * base (shm.h, SHM_OBOX_BASE). */
static const size_t grow[] = {2 << 20, (12 << 20) + 5, 2 << 20, 3 << 20};

static void outbox_grows(void)
{
    static rx_args_t a;
    a = (rx_args_t){.check = {.sizes = grow, .nsizes = FY_ARRAY_SIZE(grow)}};
    a.check.expected = FY_ARRAY_SIZE(grow);
    tchild_t c = tc_spawn(rx_main, &a);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    FY_ASSERT_EQ(si->obox_size, 160u << 20);
    FY_ASSERT_EQ(si->obox_reserved, SHM_OBOX_BASE);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *buf = malloc(12 << 20 | 4096);
    FY_ASSERT(buf != NULL);
    for (unsigned long k = 0; k < FY_ARRAY_SIZE(grow); k++) {
        /* the receiver gives each slot back: a 2 MiB message finding the 12 MiB one still
         * out beyond the base would be pulled instead */
        uint64_t end = fy_time_ns() + 10000000000ull;
        for (fy_shm_obox_reclaim(si); si->obox_count != 0; fy_shm_obox_reclaim(si)) {
            FY_ASSERT(fy_time_ns() < end);
            tp_progress(&p);
        }
        pat_fill(buf, grow[k], k);
        tcomp_t comp;
        tcomp_init(&comp);
        ferry_status_t st = tp_send(&p, ep, (uint8_t)k, buf, grow[k], 1, &comp.super, NULL);
        FY_ASSERT_MSG(st == FERRY_OK, "message %lu (%zu bytes): %s (reserved %llu)", k, grow[k],
                      ferry_status_string(st), (unsigned long long)si->obox_reserved);
        if (k == 0) /* still the base */
            FY_ASSERT_EQ(si->obox_reserved, SHM_OBOX_BASE);
        if (k == 1)
            FY_ASSERT(si->obox_reserved >= (12u << 20) + 5 && si->obox_reserved <= 14u << 20);
        for (unsigned i = 0; i < si->obox_count; i++) { /* 2 MiB slots lie in the base */
            const shm_obox_entry_t *e = &si->obox_q[(si->obox_first + i) % SHM_OBOX_QMAX];
            FY_ASSERT(e->size > SHM_OBOX_SMALL || e->off + e->size <= SHM_OBOX_BASE);
        }
    }
    FY_ASSERT_EQ(si->stats.tx_obox, FY_ARRAY_SIZE(grow));
    FY_ASSERT_EQ(tc_get_u64(c.rfd), FY_ARRAY_SIZE(grow));
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    free(buf);
}

/* One 1 GiB zero-copy message, pulled in one go; every page of it checked. */
static const size_t gib[] = {1u << 30};

static void zcopy_1gib(void)
{
    static rx_args_t a;
    a = (rx_args_t){.check = {.sizes = gib, .nsizes = 1, .expected = 1, .sparse = 1}};
    tchild_t c = tc_spawn(rx_main, &a);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *buf = fytest_map(gib[0]);
    (void)madvise(buf, gib[0], MADV_HUGEPAGE); /* 512 page faults instead of 262144 */
    for (size_t pg = 0; pg < gib[0] / 4096; pg++)
        memcpy(buf + pg * 4096, &(uint64_t){page_sig(pg)}, 8);
    tcomp_t comp;
    tcomp_init(&comp);
    FY_ASSERT_STATUS(tp_send(&p, ep, 0, buf, gib[0], 1, &comp.super, NULL), FERRY_INPROGRESS);
    while (comp.done == 0)
        tp_progress(&p);
    FY_ASSERT_OK(comp.status);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 1);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0); /* pulled, not pushed */
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    fytest_unmap(buf, gib[0]);
}

/* Pipelined zero-copy sends (up to 8 in flight) mixed with short and buffered ones: every
 * message arrives once, intact, in order, and every completion fires once. */
static const size_t mix[] = {8, 100, 3000, 20000, 50, 9000, 111, 70000, 8192, 0};

static void run_mixed(uint64_t delay_ns)
{
    static rx_args_t a;
    const unsigned long total = delay_ns != 0 ? 4000 : 20000;
    a = (rx_args_t){
        .check = {
            .sizes = mix, .nsizes = FY_ARRAY_SIZE(mix), .expected = total, .delay_ns = delay_ns}};
    tchild_t c = tc_spawn(rx_main, &a);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    enum { W = 8 };
    static char bufs[W][70000];
    tcomp_t comps[W];
    int busy[W] = {0};
    unsigned long completions = 0, nores = 0, nzcopy = 0;
    for (size_t i = 0; i < FY_ARRAY_SIZE(mix); i++) /* sent by zcopy: forced, or above bcopy */
        nzcopy += mix[i] >= 9000 || mix[i] > p.attr.max_bcopy;
    for (unsigned long k = 0; k < total; k++) {
        size_t len = mix[k % FY_ARRAY_SIZE(mix)];
        unsigned w = (unsigned)(k % W);
        while (busy[w] && comps[w].done == 0)
            tp_progress(&p);
        if (busy[w]) {
            FY_ASSERT_OK(comps[w].status);
            completions++;
            busy[w] = 0;
        }
        pat_fill(bufs[w], len, k);
        tcomp_init(&comps[w]);
        ferry_status_t st = tp_send(&p, ep, (uint8_t)(k & FY_TL_AM_ID_MAX), bufs[w], len,
                                    len >= 9000, &comps[w].super, &nores);
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
        busy[w] = st == FERRY_INPROGRESS;
        /* sent through the outbox */
        completions += st == FERRY_OK && (len >= 9000 || len > p.attr.max_bcopy);
    }
    tcomp_t fl;
    tcomp_init(&fl);
    ferry_status_t st = p.ops->ep_flush(ep, &fl.super);
    FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
    while (st == FERRY_INPROGRESS && fl.done == 0)
        tp_progress(&p);
    for (unsigned w = 0; w < W; w++) {
        if (busy[w]) {
            FY_ASSERT_EQ(comps[w].done, 1); /* the flush came after every one of them */
            completions++;
        }
    }
    FY_ASSERT_EQ(completions, total / FY_ARRAY_SIZE(mix) * nzcopy);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), total);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    tc_get_u64(c.rfd);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    shm_iface_t *si = tp_shm(&p);
    printf("  outbox: %llu sent through it (%llu split), found full %llu times\n",
           (unsigned long long)si->stats.tx_obox, (unsigned long long)si->stats.tx_split,
           (unsigned long long)si->stats.obox_full);
    last_split = si->stats.tx_split;
    if (si->obox_max != 0)
        FY_ASSERT_GT(si->stats.tx_obox, 0);
    else
        FY_ASSERT_EQ(si->stats.tx_obox, 0);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

/* Medium zero-copy messages go through the sender's outbox (complete at once). */
static void mixed_order(void)
{
    run_mixed(0);
}

/* No outbox: every medium zero-copy message is pulled and completes later. */
static void mixed_order_pull(void)
{
    setenv("FERRY_SHM_OUTBOX_SIZE", "0", 1);
    run_mixed(0);
}

/* Medium messages split: eight in flight, the receiver pulling parts of some while the
 * sender copies others; in order, nothing lost. */
static void mixed_order_split(void)
{
    setenv("FERRY_SHM_OUTBOX_SPLIT", "16k", 1);
    run_mixed(0);
    FY_ASSERT_GT(last_split, 0);
}

/* A small outbox and a slow receiver: slots wrap around, the outbox fills, and sends that
 * find it full are pulled instead — still in order, nothing lost. */
static void mixed_order_small_outbox(void)
{
    setenv("FERRY_SHM_OUTBOX_SIZE", "160k", 1);
    setenv("FERRY_SHM_OUTBOX_MAX", "72k", 1);
    run_mixed(2000);
}

/* ---- many senders to one receiver ---- */

enum { NSENDERS = 3, PER_SENDER = 20000 };

typedef struct multi_rx {
    unsigned long next[NSENDERS];
    unsigned long count, errors;
} multi_rx_t;

static size_t multi_len(unsigned long seq)
{
    return 8 + (seq * 37) % 3000;
}

static void multi_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    multi_rx_t *r = arg;
    uint64_t tag;
    r->count++;
    if (len < 8) {
        r->errors++;
        return;
    }
    memcpy(&tag, data, 8);
    unsigned s = (unsigned)(tag >> 32);
    unsigned long seq = (uint32_t)tag;
    if (s >= NSENDERS || seq != r->next[s] || len != multi_len(seq) ||
        pat_check((const char *)data + 8, len - 8, tag) >= 0) {
        if (r->errors++ < 5)
            fprintf(stderr, "from sender %u: seq %lu (expected %lu), %zu bytes\n", s, seq,
                    s < NSENDERS ? r->next[s] : 0, len);
        return;
    }
    r->next[s]++;
}

static void multi_sender(int rfd, int wfd, void *arg)
{
    unsigned me = (unsigned)(uintptr_t)arg;
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    p.sleepy = 1;
    taddr_t addr;
    tc_read(rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char buf[3100];
    unsigned long nores = 0;
    for (unsigned long seq = 0; seq < PER_SENDER; seq++) {
        uint64_t tag = ((uint64_t)me << 32) | seq;
        size_t len = multi_len(seq);
        memcpy(buf, &tag, 8);
        pat_fill(buf + 8, len - 8, tag);
        FY_ASSERT_OK(tp_send(&p, ep, 1, buf, len, 0, NULL, &nores));
    }
    tc_put_u64(wfd, nores);
    tc_get_u64(rfd);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

static void many_senders(void)
{
    setenv("FERRY_SHM_RING_SIZE", "16", 1); /* pressure */
    static multi_rx_t r;
    tproc_t p;
    tp_open(&p, multi_cb, &r);
    p.sleepy = 1; /* 4 processes on 2 cores: idle ones must sleep */
    taddr_t addr = tp_addr(&p);
    tchild_t c[NSENDERS];
    for (unsigned i = 0; i < NSENDERS; i++) {
        c[i] = tc_spawn(multi_sender, (void *)(uintptr_t)i);
        tc_write(c[i].wfd, &addr, sizeof(addr));
    }
    while (r.count < NSENDERS * PER_SENDER)
        tp_progress(&p);
    unsigned long nores = 0;
    for (unsigned i = 0; i < NSENDERS; i++)
        nores += tc_get_u64(c[i].rfd);
    for (unsigned i = 0; i < NSENDERS; i++) {
        tc_put_u64(c[i].wfd, 1);
        tc_join(&c[i]);
    }
    FY_ASSERT_EQ(r.errors, 0);
    for (unsigned i = 0; i < NSENDERS; i++)
        FY_ASSERT_EQ(r.next[i], PER_SENDER);
    FY_ASSERT_EQ(r.count, NSENDERS * PER_SENDER);
    printf("  %u senders x %u messages, ring of 16: %lu NO_RESOURCE answers\n", NSENDERS,
           PER_SENDER, nores);
    tp_close(&p);
}

/* A receiver slower than its sender: the sender sees NO_RESOURCE, nothing is lost. */
static const size_t slow_sizes[] = {8, 64, 500, 4000, 8000, 112, 113};

static void slow_receiver(void)
{
    setenv("FERRY_SHM_RING_SIZE", "16", 1);
    static rx_args_t a;
    const unsigned long total = 3000;
    a = (rx_args_t){.check = {.sizes = slow_sizes,
                              .nsizes = FY_ARRAY_SIZE(slow_sizes),
                              .expected = total,
                              .delay_ns = 20000}};
    tchild_t c = tc_spawn(rx_main, &a);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char buf[8000];
    unsigned long nores = 0;
    for (unsigned long k = 0; k < total; k++) {
        size_t len = slow_sizes[k % FY_ARRAY_SIZE(slow_sizes)];
        pat_fill(buf, len, k);
        FY_ASSERT_OK(tp_send(&p, ep, (uint8_t)(k & FY_TL_AM_ID_MAX), buf, len, 0, NULL, &nores));
    }
    FY_ASSERT_EQ(tc_get_u64(c.rfd), total);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    tc_get_u64(c.rfd);
    FY_ASSERT_GT(nores, 0);
    FY_ASSERT_GT(tp_shm(&p)->stats.full, 0);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

/* ---- sleeping on the event fd ---- */

static int fd_readable(int fd, int timeout_ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, timeout_ms) == 1;
}

static void ev_sender(int rfd, int wfd, void *arg)
{
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    taddr_t addr;
    tc_read(rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    uint64_t v = 42;
    struct iovec iov = {&v, sizeof(v)};
    /* 1: the receiver sleeps; one message must wake it */
    tc_get_u64(rfd);
    FY_ASSERT_OK(p.ops->am_short(ep, 3, &iov, 1));
    /* 2: a message is pending before the receiver arms: arm must say BUSY */
    tc_get_u64(rfd);
    FY_ASSERT_OK(p.ops->am_short(ep, 3, &iov, 1));
    tc_put_u64(wfd, 2);
    /* 3: fill the receiver's ring, then sleep until it makes room */
    tc_get_u64(rfd);
    unsigned long sent = 0;
    while (p.ops->am_short(ep, 3, &iov, 1) == FERRY_OK)
        sent++;
    FY_ASSERT_EQ(sent, 8);
    FY_ASSERT_OK(p.ops->iface_event_arm(p.iface));
    int fd = p.ops->iface_event_fd(p.iface);
    FY_ASSERT(!fd_readable(fd, 0));
    tc_put_u64(wfd, sent);
    FY_ASSERT_MSG(fd_readable(fd, 10000), "not woken when the full ring drained");
    FY_ASSERT_OK(p.ops->am_short(ep, 3, &iov, 1));
    tc_put_u64(wfd, 1);
    tc_get_u64(rfd);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

static void event_wakeup(void)
{
    setenv("FERRY_SHM_RING_SIZE", "8", 1);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    FY_ASSERT(p.attr.caps & FY_TL_CAP_EVENT_FD);
    int fd = p.ops->iface_event_fd(p.iface);
    FY_ASSERT(fd >= 0);
    tchild_t c = tc_spawn(ev_sender, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(c.wfd, &addr, sizeof(addr));

    FY_ASSERT_OK(p.ops->iface_event_arm(p.iface));
    FY_ASSERT(!fd_readable(fd, 0));
    tc_put_u64(c.wfd, 1);
    FY_ASSERT_MSG(fd_readable(fd, 10000), "a message did not wake the sleeping receiver");
    while (ev_count < 1)
        p.ops->iface_progress(p.iface);

    tc_put_u64(c.wfd, 2);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 2);
    FY_ASSERT_STATUS(p.ops->iface_event_arm(p.iface), FERRY_ERR_BUSY);
    while (ev_count < 2)
        p.ops->iface_progress(p.iface);

    for (int i = 0; i < 4; i++) /* idle polls free the consumed cells */
        p.ops->iface_progress(p.iface);
    tc_put_u64(c.wfd, 3);
    unsigned long sent = tc_get_u64(c.rfd);
    while (ev_count < 2 + sent)
        p.ops->iface_progress(p.iface);
    for (int i = 0; i < 4; i++) /* idle polls free the cells and wake the waiter */
        p.ops->iface_progress(p.iface);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 1);
    while (ev_count < 3 + sent)
        p.ops->iface_progress(p.iface);
    tc_put_u64(c.wfd, 4);
    tc_join(&c);
    tp_close(&p);
}

/* ---- the first lap of a ring: no page faults ---------------------------------------------
 * An iface maps and reads its ring, its buffers and its outbox's first 2 MiB when it opens,
 * and a sender the receiver's when it attaches (fy_shmem_populate): sending two laps of 1 KiB
 * messages (each in a cell buffer of its own, 8 KiB apart) must then fault nearly no page in
 * either process.  Unmapped, it was a fault per buffer page on each side (>= 256 here). */

#define LAP_MSGS  512 /* two laps of the default 256-cell ring */
#define LAP_LEN   1024
#define LAP_FAULT 64 /* faults allowed for anything else (the heap, the stack) */

static long minor_faults(void)
{
    struct rusage ru;
    FY_ASSERT(getrusage(RUSAGE_SELF, &ru) == 0);
    return ru.ru_minflt;
}

static void lap_sender(int rfd, int wfd, void *arg)
{
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    taddr_t addr;
    tc_read(rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    static char buf[LAP_LEN];
    memset(buf, 7, sizeof(buf));
    long f0 = minor_faults();
    for (unsigned i = 0; i < LAP_MSGS; i++)
        FY_ASSERT_OK(tp_send(&p, ep, 3, buf, sizeof(buf), 0, NULL, NULL));
    tc_put_u64(wfd, (uint64_t)(minor_faults() - f0));
    tc_get_u64(rfd);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

static void first_lap_mapped(void)
{
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    FY_ASSERT(p.attr.max_short < LAP_LEN && LAP_LEN <= p.attr.max_bcopy); /* a cell buffer */
    tchild_t c = tc_spawn(lap_sender, NULL);
    taddr_t addr = tp_addr(&p);
    long f0 = minor_faults();
    tc_write(c.wfd, &addr, sizeof(addr));
    while (ev_count < LAP_MSGS)
        tp_progress(&p);
    long ours = minor_faults() - f0;
    uint64_t theirs = tc_get_u64(c.rfd);
    printf("  %u messages of %u B: %ld page faults here, %llu in the sender\n", LAP_MSGS, LAP_LEN,
           ours, (unsigned long long)theirs);
    FY_ASSERT_LE(ours, LAP_FAULT);
    FY_ASSERT_LE(theirs, (uint64_t)LAP_FAULT);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    tp_close(&p);
}

/* One process talking to itself through its own ring (pid == self paths). */
static void loopback(void)
{
    static rxcheck_t r;
    static const size_t sizes[] = {8, 0, 5000, 200000, 112};
    r = (rxcheck_t){.sizes = sizes, .nsizes = FY_ARRAY_SIZE(sizes)};
    tproc_t p;
    tp_open(&p, rxcheck_cb, &r);
    taddr_t addr = tp_addr(&p);
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    static char buf[200000];
    for (unsigned long k = 0; k < FY_ARRAY_SIZE(sizes); k++) {
        tcomp_t comp;
        tcomp_init(&comp);
        pat_fill(buf, sizes[k], k);
        ferry_status_t st = tp_send(&p, ep, (uint8_t)k, buf, sizes[k], 0, &comp.super, NULL);
        while (st == FERRY_INPROGRESS && comp.done == 0)
            tp_progress(&p);
        FY_ASSERT(st == FERRY_OK || comp.status == FERRY_OK);
    }
    while (r.count < FY_ARRAY_SIZE(sizes))
        tp_progress(&p);
    FY_ASSERT_EQ(r.errors, 0);
    ferry_ep_stats_t stats;
    FY_ASSERT_OK(p.ops->ep_get_stats(ep, &stats));
    FY_ASSERT_EQ(stats.tx_msgs, FY_ARRAY_SIZE(sizes));
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(loopback), FYTEST_CASE(sweep_cma), FYTEST_CASE(sweep_no_cma),
            FYTEST_CASE(sweep_cma_denied), FYTEST_CASE(sweep_split),
            FYTEST_CASE(sweep_split_denied), FYTEST_CASE(outbox_grows), FYTEST_CASE(zcopy_1gib),
            FYTEST_CASE(mixed_order), FYTEST_CASE(mixed_order_split), FYTEST_CASE(mixed_order_pull),
            FYTEST_CASE(mixed_order_small_outbox), FYTEST_CASE(many_senders),
            FYTEST_CASE(slow_receiver), FYTEST_CASE(event_wakeup), FYTEST_CASE(first_lap_mapped))
