/*
 * test_shm_big.c - active messages above 16 MiB over shm, which go through the sender's outbox
 * (grown on demand up to FERRY_SHM_OUTBOX_SIZE, given back after FERRY_SHM_OUTBOX_IDLE): 17 to
 * 64 MiB and odd sizes, every byte checked, in order with small messages between, one at a
 * time (each through the outbox, complete on return) and in a burst (the outbox fills, some
 * are pulled, the order holds); the outbox's memory given back when idle (also by a sender
 * asleep on its event fd) and reserved again for the next large message; a receiver killed while it
 * holds a 64 MiB slot (the sender fails the ep, gets the slot and then the memory back, and the
 * next receiver is served through the outbox); a sender killed while the receiver reads its slot
 * (the message is read whole, the ring keeps moving, the dead sender's segment is freed).
 */
#include <signal.h>
#include <sys/wait.h>

#include "shm_test.h"
#include "util/clock.h"

#define MiB         ((size_t)1 << 20)
#define DEADLINE_NS (20 * FY_NSEC_PER_SEC)

/* ---- a receiver that checks message k: sizes[k % n] bytes of pattern seed k, id k ---- */

typedef struct check {
    const size_t *sizes;
    size_t n;
    unsigned long count, errors, expected;
    int kill_pid_at_big; /* sender_killed: SIGKILL this pid from inside the first big message */
} check_t;

static pid_t victim;

static void check_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    check_t *c = arg;
    unsigned long k = c->count++;
    size_t want = c->sizes[k % c->n];
    if (victim > 0 && len > 16 * MiB) { /* the sender dies while we read its slot */
        FY_ASSERT(kill(victim, SIGKILL) == 0);
        int st;
        FY_ASSERT(waitpid(victim, &st, 0) == victim);
        victim = 0;
    }
    long bad = len == want ? pat_check(data, len, k) : -2;
    if ((bad != -1 || id != (k & FY_TL_AM_ID_MAX)) && c->errors++ < 5)
        fprintf(stderr, "message %lu: %zu bytes (expected %zu), id %u, wrong byte at %ld\n", k, len,
                want, id, bad);
}

typedef struct rx_args {
    check_t check;
} rx_args_t;

/* The receiving peer: send the address, take `expected` messages, report count and errors,
 * keep progressing until told to close. */
static void rx_main(int rfd, int wfd, void *arg)
{
    rx_args_t *a = arg;
    tproc_t p;
    tp_open(&p, check_cb, &a->check);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    while (a->check.count < a->check.expected)
        tp_progress(&p);
    tc_put_u64(wfd, a->check.count);
    tc_put_u64(wfd, a->check.errors);
    tp_wait_fd(&p, rfd);
    tc_get_u64(rfd);
    tp_close(&p);
}

static void ev_cb(void *arg, uint8_t id, const void *data, size_t len) {}

/* Progress until every outbox slot has come back. */
static void wait_slots(tproc_t *p)
{
    shm_iface_t *si = tp_shm(p);
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    for (fy_shm_obox_reclaim(si); si->obox_count != 0; fy_shm_obox_reclaim(si)) {
        FY_ASSERT_MSG(fy_time_ns() < end, "outbox slots not given back");
        tp_progress(p);
    }
}

/* Progress for a few liveness checks (between two slow looks through /proc). */
static void progress_a_while(tproc_t *p)
{
    uint64_t end = fy_time_ns() + 3 * tp_shm(p)->md->opts.liveness_ns;
    while (fy_time_ns() < end)
        tp_progress(p);
}

/* Bytes of memory the segment holds now (the memfd's allocated blocks). */
static uint64_t seg_bytes(tproc_t *p)
{
    struct stat sb;
    FY_ASSERT(fstat(tp_shm(p)->addr.fd, &sb) == 0);
    return (uint64_t)sb.st_blocks * 512;
}

/* Send message k of len bytes from buf (filled with pattern k) as a zero-copy AM. */
static ferry_status_t send_k(tproc_t *p, fy_tl_ep_t *ep, char *buf, size_t len, unsigned long k,
                             tcomp_t *comp)
{
    pat_fill(buf, len, k);
    tcomp_init(comp);
    return tp_send(p, ep, (uint8_t)(k & FY_TL_AM_ID_MAX), buf, len, len > 4096, &comp->super, NULL);
}

/* ---- in order, one at a time and in a burst ---- */

static const size_t order_sizes[] = {
    (17 * MiB) + 13, 8, 32 * MiB, 100, 64 * MiB, 3000, 9000, 33 * MiB + 7, (40 * MiB) + 1};

static void large_in_order(void)
{
    static rx_args_t a;
    const size_t n = FY_ARRAY_SIZE(order_sizes);
    setenv("FERRY_SHM_OUTBOX_IDLE", "10m", 1); /* (kept while slow checks run) */
    a = (rx_args_t){.check = {.sizes = order_sizes, .n = n, .expected = 2 * n}};
    tchild_t c = tc_spawn(rx_main, &a);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    FY_ASSERT_EQ(si->obox_size, 160 * MiB);
    FY_ASSERT_EQ(si->obox_max, 64 * MiB);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *bufs[FY_ARRAY_SIZE(order_sizes)];
    for (size_t i = 0; i < n; i++)
        FY_ASSERT((bufs[i] = malloc(order_sizes[i])) != NULL);
    tcomp_t comps[FY_ARRAY_SIZE(order_sizes)];

    /* One at a time: each large message through the outbox, complete when the call returns. */
    unsigned obox = 0;
    for (unsigned long k = 0; k < n; k++) {
        size_t len = order_sizes[k];
        if (len > 8192) /* one at a time: a large slot still out would make it a pull */
            wait_slots(&p);
        obox += len > 8192; /* above a cell buffer: through the outbox */
        ferry_status_t st = send_k(&p, ep, bufs[k], len, k, &comps[k]);
        FY_ASSERT_MSG(st == FERRY_OK, "message %lu (%zu bytes): %s (outbox full %llu)", k, len,
                      ferry_status_string(st), (unsigned long long)si->stats.obox_full);
        FY_ASSERT_EQ(si->stats.tx_obox, obox);
        if (len == 64 * MiB) /* grown past the first 40 MiB */
            FY_ASSERT(si->obox_reserved >= 64 * MiB);
    }
    FY_ASSERT_EQ(si->stats.obox_full, 0);

    /* A burst: nothing waited for; what finds the outbox full is pulled, in order still. */
    unsigned long inflight = 0;
    for (unsigned long k = n; k < 2 * n; k++) {
        ferry_status_t st = send_k(&p, ep, bufs[k - n], order_sizes[k - n], k, &comps[k - n]);
        FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "message %lu: %s", k,
                      ferry_status_string(st));
        if (st == FERRY_OK)
            comps[k - n].done = 1;
        inflight += st == FERRY_INPROGRESS;
    }
    uint64_t end = fy_time_ns() + DEADLINE_NS * 3;
    for (size_t i = 0; i < n; i++) {
        while (comps[i].done == 0) {
            FY_ASSERT_MSG(fy_time_ns() < end, "message %zu never completed", i);
            tp_progress(&p);
        }
        FY_ASSERT_EQ(comps[i].done, 1);
        if (comps[i].status != FERRY_INPROGRESS)
            FY_ASSERT_OK(comps[i].status);
    }
    printf("  burst: %lu of %zu pulled (outbox full %llu times)\n", inflight, n,
           (unsigned long long)si->stats.obox_full);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 2 * n);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
}

/* ---- the memory beyond the base given back when idle, and reserved again ---- */

static const size_t back_sizes[] = {32 * MiB, 8, (48 * MiB) + 5};

static void outbox_gives_back(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "20ms", 1);
    static rx_args_t a;
    const size_t n = FY_ARRAY_SIZE(back_sizes);
    a = (rx_args_t){.check = {.sizes = back_sizes, .n = n, .expected = n}};
    tchild_t c = tc_spawn(rx_main, &a);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    const uint64_t idle_bytes = seg_bytes(&p); /* ring, buffers and the outbox's base */
    FY_ASSERT(idle_bytes >= SHM_OBOX_BASE && idle_bytes <= si->obox_off + SHM_OBOX_BASE);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *buf = malloc(48 * MiB + 5);
    FY_ASSERT(buf != NULL);
    tcomp_t comp;
    for (unsigned long k = 0; k < n; k++) {
        FY_ASSERT_STATUS(send_k(&p, ep, buf, back_sizes[k], k, &comp), FERRY_OK);
        if (back_sizes[k] < MiB)
            continue;
        FY_ASSERT(si->obox_reserved >= back_sizes[k]);
        FY_ASSERT(seg_bytes(&p) >= idle_bytes + back_sizes[k] - SHM_OBOX_BASE);
        wait_slots(&p);
        /* idle: the liveness check gives the memory beyond the base back */
        uint64_t shrunk = si->stats.obox_shrunk, end = fy_time_ns() + DEADLINE_NS;
        while (si->stats.obox_shrunk == shrunk) {
            FY_ASSERT_MSG(fy_time_ns() < end,
                          "outbox memory never given back (%llu B reserved, %u slots out)",
                          (unsigned long long)si->obox_reserved, si->obox_count);
            tp_progress(&p);
        }
        FY_ASSERT_EQ(si->obox_reserved, SHM_OBOX_BASE);
        FY_ASSERT_EQ(seg_bytes(&p), idle_bytes);
    }
    FY_ASSERT_EQ(si->stats.obox_shrunk, 2);
    FY_ASSERT_EQ(si->stats.tx_obox, 2); /* the large ones (8 B is a short message) */
    FY_ASSERT_EQ(tc_get_u64(c.rfd), n);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0); /* the second large one read right after a release */
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    free(buf);
}

/* A sender that sleeps on its event fd after a large message: the event fd wakes it when the
 * grown outbox falls due, and it gives the memory back (without the wake-up it would hold it
 * for as long as it sleeps: the poll below would time out). */
static void sleeper_gives_back(void)
{
    /* long enough that the sender is asleep before it falls due (the receiver checks 32 MiB
     * first: well under 1 s under the sanitizers) */
    setenv("FERRY_SHM_OUTBOX_IDLE", "1500ms", 1);
    static const size_t one[] = {32 * MiB};
    static rx_args_t a;
    a = (rx_args_t){.check = {.sizes = one, .n = 1, .expected = 1}};
    tchild_t c = tc_spawn(rx_main, &a);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *buf = malloc(32 * MiB);
    FY_ASSERT(buf != NULL);
    tcomp_t comp;
    FY_ASSERT_STATUS(send_k(&p, ep, buf, 32 * MiB, 0, &comp), FERRY_OK);
    wait_slots(&p);
    FY_ASSERT(si->obox_reserved > SHM_OBOX_BASE);
    unsigned sleeps = 0;
    uint64_t t0 = fy_time_ns(); /* (under load it may be due already: then no sleep needed) */
    int due_at_first_arm = t0 >= si->obox_big_ns + si->md->opts.obox_idle_ns;
    for (;;) {
        ferry_status_t st = p.ops->iface_event_arm(p.iface);
        if (si->obox_reserved == SHM_OBOX_BASE)
            break; /* (the arm's own liveness check gave it back) */
        if (st == FERRY_OK) {
            struct pollfd pf = {.fd = p.ops->iface_event_fd(p.iface), .events = POLLIN};
            FY_ASSERT_MSG(poll(&pf, 1, 10000) == 1, "asleep with %llu B of outbox reserved",
                          (unsigned long long)si->obox_reserved);
            sleeps++;
        }
        p.ops->iface_progress(p.iface);
        FY_ASSERT(fy_time_ns() - t0 < DEADLINE_NS);
    }
    printf("  given back after %.0f ms, %u sleeps\n", (double)(fy_time_ns() - t0) / 1e6, sleeps);
    FY_ASSERT(sleeps >= 1 || due_at_first_arm);
    FY_ASSERT_LE(sleeps, 20); /* woken for it, not in a loop */
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 1);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    free(buf);
}

/* ---- a receiver killed while it holds a 64 MiB slot ---- */

static int stuck_wfd;
static void stuck_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    tc_put_u64(stuck_wfd, len); /* in the handler, reading the sender's slot: kill me now */
    for (;;)
        pause();
}

static void stuck_receiver(int rfd, int wfd, void *arg)
{
    tproc_t p;
    stuck_wfd = wfd;
    tp_open(&p, stuck_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    tp_wait_fd(&p, rfd);
    tp_close(&p);
}

static void big_receiver_killed(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "20ms", 1);
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    tchild_t c = tc_spawn(stuck_receiver, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *buf = malloc(64 * MiB);
    FY_ASSERT(buf != NULL);
    tcomp_t comp;
    FY_ASSERT_STATUS(send_k(&p, ep, buf, 64 * MiB, 0, &comp), FERRY_OK);
    tp_wait_fd(&p, c.rfd);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 64 * MiB);
    FY_ASSERT_EQ(si->obox_count, 1);
    fyproc_kill(&c, SIGKILL);
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (p.nfailed == 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "the killed receiver's ep never failed");
        tp_progress(&p);
    }
    FY_ASSERT(p.failed_ep == ep);
    wait_slots(&p); /* its slot comes back: it will never say done */
    while (si->obox_reserved != SHM_OBOX_BASE) {
        FY_ASSERT_MSG(fy_time_ns() < end, "outbox memory never given back");
        tp_progress(&p);
    }
    fyproc_release(&c);
    p.ops->ep_destroy(ep);
    for (end = fy_time_ns() + DEADLINE_NS; segment_holders(addr_ino(&addr)) != 0;) {
        FY_ASSERT_MSG(fy_time_ns() < end, "the dead receiver's segment is still held");
        progress_a_while(&p);
    }

    /* the next receiver gets the outbox, grown again */
    static const size_t one[] = {64 * MiB};
    static rx_args_t a;
    a = (rx_args_t){.check = {.sizes = one, .n = 1, .expected = 1}};
    c = tc_spawn(rx_main, &a);
    tc_read(c.rfd, &addr, sizeof(addr));
    ep = tp_ep(&p, &addr);
    FY_ASSERT_STATUS(send_k(&p, ep, buf, 64 * MiB, 0, &comp), FERRY_OK);
    FY_ASSERT_EQ(si->stats.tx_obox, 2);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 1);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    free(buf);
}

/* ---- a sender killed while the receiver reads its slot ---- */

static void big_sender(int rfd, int wfd, void *arg)
{
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    fy_tl_ep_t *ep = tp_answer(&p, rfd, wfd);
    static const size_t lens[] = {8, 40 * MiB, 100};
    char *buf = malloc(40 * MiB);
    FY_ASSERT(buf != NULL);
    tcomp_t comp;
    for (unsigned long k = 0; k < 3; k++)
        FY_ASSERT_STATUS(send_k(&p, ep, buf, lens[k], k, &comp), FERRY_OK);
    tc_put_u64(wfd, 3);
    for (;;) /* killed by the receiver, from inside its handler of the 40 MiB message */
        p.ops->iface_progress(p.iface);
}

static void big_sender_killed(void)
{
    static const size_t lens[] = {8, 40 * MiB, 100, 8};
    static check_t ck;
    ck = (check_t){.sizes = lens, .n = FY_ARRAY_SIZE(lens)};
    tproc_t p;
    tp_open(&p, check_cb, &ck);
    taddr_t addr = tp_addr(&p), sender;
    tchild_t c = tc_spawn(big_sender, NULL);
    tc_write(c.wfd, &addr, sizeof(addr));
    tc_read(c.rfd, &sender, sizeof(sender));
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 3); /* all three sent (complete: in its outbox) */
    victim = c.pid;
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (ck.count < 3) {
        FY_ASSERT_MSG(fy_time_ns() < end, "the dead sender's messages were not delivered");
        tp_progress(&p);
    }
    FY_ASSERT_EQ(victim, 0); /* it died inside the handler of the 40 MiB message */
    fyproc_release(&c);
    /* the ring keeps moving: a message of ours comes next, in the dead sender's wake */
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    uint64_t v = 0;
    pat_fill(&v, 8, 3);
    FY_ASSERT_OK(tp_send(&p, ep, 3, &v, 8, 0, NULL, NULL));
    while (ck.count < 4) {
        FY_ASSERT_MSG(fy_time_ns() < end, "ring stuck after the sender died");
        tp_progress(&p);
    }
    FY_ASSERT_EQ(ck.errors, 0);
    p.ops->ep_destroy(ep);
    /* its segment (and its grown outbox) is let go once the death is noticed */
    while (segment_holders(addr_ino(&sender)) != 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "the dead sender's segment is still held");
        progress_a_while(&p);
    }
    tp_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(large_in_order), FYTEST_CASE(outbox_gives_back),
            FYTEST_CASE(sleeper_gives_back), FYTEST_CASE(big_receiver_killed),
            FYTEST_CASE(big_sender_killed))
