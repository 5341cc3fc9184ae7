/*
 * test_shm_pull_big.c - active messages above FERRY_SHM_OUTBOX_MAX (64 MiB), which the receiver
 * pulls with cross-memory attach into the receive buffer it keeps (up to FERRY_SHM_RX_CACHE,
 * given back after FERRY_SHM_OUTBOX_IDLE without a pull): sizes just above 64 MiB and odd ones,
 * every byte checked, in order with small messages between, the larger ones landing in the one
 * kept buffer; the buffer given back when idle (also by a receiver asleep on its event fd) and
 * made again for the next message; a message above RX_CACHE in a buffer of its own; a sender
 * SIGKILLed while the receiver copies its memory (the message is whole or dropped, the ring
 * moves on, the dead sender's segment is freed) and a receiver SIGKILLed while it copies (the
 * send fails, its pull slot comes back, the next receiver gets the next message whole).
 */
#include <signal.h>
#include <sys/wait.h>

#include "shm_test.h"
#include "util/clock.h"

#define MiB         ((size_t)1 << 20)
#define DEADLINE_NS (30 * FY_NSEC_PER_SEC)
/* A message of n bytes of data: tp_send sends its first 16 bytes as the header, and only
 * data above OUTBOX_MAX is pulled. */
#define DATA(n) ((n) + 16)

/* ---- a receiver that checks message id k: sizes[k] bytes of pattern seed k ---- */

typedef struct check {
    const size_t *sizes;
    size_t n;
    unsigned long count, errors;
    unsigned long seen; /* bit k: message k arrived */
    shm_iface_t *si;    /* when set: pulled messages must lie in its kept buffer */
    unsigned long in_kept;
} check_t;

static void check_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    check_t *c = arg;
    c->count++;
    long bad = id < c->n && len == c->sizes[id] ? pat_check(data, len, id) : -2;
    if (bad != -1 && c->errors++ < 5)
        fprintf(stderr, "message %u: %zu bytes, wrong byte at %ld\n", id, len, bad);
    if (id < c->n)
        c->seen |= 1ul << id;
    if (c->si != NULL && c->si->rxbuf != NULL && (const char *)data >= c->si->rxbuf &&
        (const char *)data + len <= c->si->rxbuf + c->si->rxbuf_size)
        c->in_kept++;
}

static void ev_cb(void *arg, uint8_t id, const void *data, size_t len) {}

/* Send message k of len bytes from buf (filled with pattern k) as a zero-copy AM. */
static ferry_status_t send_k(tproc_t *p, fy_tl_ep_t *ep, char *buf, size_t len, unsigned long k,
                             tcomp_t *comp)
{
    pat_fill(buf, len, k);
    tcomp_init(comp);
    return tp_send(p, ep, (uint8_t)k, buf, len, len > 4096, &comp->super, NULL);
}

static void wait_comp(tproc_t *p, tcomp_t *comp)
{
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (comp->done == 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "a pulled message was never answered");
        tp_progress(p);
    }
}

/* The sending peer: send sizes[0..n) one after the other (each complete before the next; with
 * `step`, each after the first when told to), then wait to be told to close. */
typedef struct tx_args {
    const size_t *sizes;
    size_t n;
    int step;
} tx_args_t;

static void tx_main(int rfd, int wfd, void *arg)
{
    tx_args_t *a = arg;
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    taddr_t addr;
    tc_read(rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    size_t max = 0;
    for (size_t k = 0; k < a->n; k++)
        max = FY_MAX(max, a->sizes[k]);
    char *buf = malloc(max);
    FY_ASSERT(buf != NULL);
    for (size_t k = 0; k < a->n; k++) {
        if (a->step && k != 0)
            FY_ASSERT_EQ(tc_get_u64(rfd), k);
        tcomp_t comp;
        ferry_status_t st = send_k(&p, ep, buf, a->sizes[k], k, &comp);
        if (st == FERRY_INPROGRESS) {
            wait_comp(&p, &comp);
            st = comp.status;
        }
        FY_ASSERT_OK(st);
    }
    tc_put_u64(wfd, a->n);
    tp_wait_fd(&p, rfd);
    tc_get_u64(rfd);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    free(buf);
}

/* Receive until ck->count reaches n. */
static void recv_until(tproc_t *p, check_t *ck, unsigned long n)
{
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (ck->count < n) {
        FY_ASSERT_MSG(fy_time_ns() < end, "%lu of %lu messages", ck->count, n);
        tp_progress(p);
    }
}

/* ---- in order, each pulled one into the kept buffer ---- */

static const size_t order_sizes[] = {
    DATA(64 * MiB + 1), 8, DATA(96 * MiB + 3), 100, DATA(64 * MiB + 4095), DATA(65 * MiB), 9000};

static void pulled_in_order(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "60s", 1); /* (kept while the checks run) */
    const size_t n = FY_ARRAY_SIZE(order_sizes);
    static check_t ck;
    tproc_t p;
    tp_open(&p, check_cb, &ck);
    shm_iface_t *si = tp_shm(&p);
    ck = (check_t){.sizes = order_sizes, .n = n, .si = si};
    static tx_args_t a;
    a = (tx_args_t){.sizes = order_sizes, .n = n};
    tchild_t c = tc_spawn(tx_main, &a);
    taddr_t addr = tp_addr(&p);
    tc_write(c.wfd, &addr, sizeof(addr));
    recv_until(&p, &ck, n);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), n);
    FY_ASSERT_EQ(ck.errors, 0);
    FY_ASSERT_EQ(ck.seen, (1ul << n) - 1);
    printf("  pulled %llu, from the outbox %llu\n", (unsigned long long)si->stats.rx_pull,
           (unsigned long long)si->stats.rx_obox);
    FY_ASSERT_EQ(si->stats.rx_pull, 4); /* the four above 64 MiB */
    /* the first grew the buffer, the second grew it once more, the others fit in it */
    FY_ASSERT_GE(si->rxbuf_size, DATA(96 * MiB + 3));
    FY_ASSERT_EQ(ck.in_kept, 4);
    FY_ASSERT_EQ(si->stats.rx_shrunk, 0);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    tp_close(&p);
}

/* ---- the buffer given back when idle, by a busy and by a sleeping receiver ---- */

static const size_t back_sizes[] = {DATA(64 * MiB + 1), DATA(80 * MiB + 7), DATA(64 * MiB + 5)};

static void rx_buffer_given_back(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "300ms", 1);
    static check_t ck;
    tproc_t p;
    tp_open(&p, check_cb, &ck);
    shm_iface_t *si = tp_shm(&p);
    ck = (check_t){.sizes = back_sizes, .n = FY_ARRAY_SIZE(back_sizes), .si = si};
    static tx_args_t a;
    a = (tx_args_t){.sizes = back_sizes, .n = FY_ARRAY_SIZE(back_sizes), .step = 1};
    tchild_t c = tc_spawn(tx_main, &a);
    taddr_t addr = tp_addr(&p);
    tc_write(c.wfd, &addr, sizeof(addr));

    /* busy: progress gives it back */
    recv_until(&p, &ck, 1);
    FY_ASSERT_GE(si->rxbuf_size, DATA(64 * MiB + 1));
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (si->rxbuf != NULL) {
        FY_ASSERT_MSG(fy_time_ns() < end, "receive buffer never given back");
        tp_progress(&p);
    }
    FY_ASSERT_EQ(si->rxbuf_size, 0);
    FY_ASSERT_EQ(si->stats.rx_shrunk, 1);

    /* asleep on the event fd: the timer wakes it to give the buffer back */
    tc_put_u64(c.wfd, 1);
    recv_until(&p, &ck, 2);
    FY_ASSERT_GE(si->rxbuf_size, DATA(80 * MiB + 7));
    unsigned sleeps = 0;
    uint64_t t0 = fy_time_ns();
    int due_at_first_arm = t0 >= si->rxbuf_used_ns + si->md->opts.obox_idle_ns;
    for (;;) {
        ferry_status_t st = p.ops->iface_event_arm(p.iface);
        if (si->rxbuf == NULL)
            break; /* (the arm's own liveness check gave it back) */
        if (st == FERRY_OK) {
            struct pollfd pf = {.fd = p.ops->iface_event_fd(p.iface), .events = POLLIN};
            FY_ASSERT_MSG(poll(&pf, 1, 10000) == 1, "asleep holding a %zu B receive buffer",
                          si->rxbuf_size);
            sleeps++;
        }
        p.ops->iface_progress(p.iface);
        FY_ASSERT(fy_time_ns() - t0 < DEADLINE_NS);
    }
    printf("  given back after %.0f ms, %u sleeps\n", (double)(fy_time_ns() - t0) / 1e6, sleeps);
    FY_ASSERT(sleeps >= 1 || due_at_first_arm);
    FY_ASSERT_LE(sleeps, 20); /* woken for it, not in a loop */
    FY_ASSERT_EQ(si->stats.rx_shrunk, 2);

    /* the next one makes a buffer again */
    tc_put_u64(c.wfd, 2);
    recv_until(&p, &ck, 3);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 3);
    FY_ASSERT_EQ(ck.errors, 0);
    FY_ASSERT_EQ(ck.in_kept, 3);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    tp_close(&p);
}

/* ---- above RX_CACHE: a buffer of its own, not kept ---- */

static const size_t own_sizes[] = {DATA(64 * MiB + 1), DATA(72 * MiB + 9)};

static void above_rx_cache(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "60s", 1);
    setenv("FERRY_SHM_RX_CACHE", "65m", 1);
    static check_t ck;
    tproc_t p;
    tp_open(&p, check_cb, &ck);
    unsetenv("FERRY_SHM_RX_CACHE");
    shm_iface_t *si = tp_shm(&p);
    ck = (check_t){.sizes = own_sizes, .n = FY_ARRAY_SIZE(own_sizes), .si = si};
    static tx_args_t a;
    a = (tx_args_t){.sizes = own_sizes, .n = FY_ARRAY_SIZE(own_sizes)};
    tchild_t c = tc_spawn(tx_main, &a);
    taddr_t addr = tp_addr(&p);
    tc_write(c.wfd, &addr, sizeof(addr));
    recv_until(&p, &ck, 2);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 2);
    FY_ASSERT_EQ(ck.errors, 0);
    FY_ASSERT_EQ(ck.in_kept, 1); /* the first only */
    FY_ASSERT_LT(si->rxbuf_size, (66 * MiB));
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    tp_close(&p);
}

/* ---- a sender killed while the receiver copies its memory ---- */

/* The pull slot a receiver is copying from now, or -1. */
static int slot_reading(shm_iface_t *si)
{
    for (int i = 0; i < SHM_PULL_SLOTS; i++)
        if ((__atomic_load_n(&si->pulls[i], __ATOMIC_ACQUIRE) & 3) == SHM_PULL_READING)
            return i;
    return -1;
}

#define BIG ((160 * MiB) + 3)

static const size_t dying_sizes[] = {8, BIG, 8};

static void dying_sender(int rfd, int wfd, void *arg)
{
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    fy_tl_ep_t *ep = tp_answer(&p, rfd, wfd);
    char *buf = malloc(BIG);
    FY_ASSERT(buf != NULL);
    tcomp_t comp;
    FY_ASSERT_OK(send_k(&p, ep, buf, 8, 0, &comp));
    FY_ASSERT_STATUS(send_k(&p, ep, buf, BIG, 1, &comp), FERRY_INPROGRESS);
    /* the receiver copies our memory now: die (if it was done already, die all the same) */
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (slot_reading(tp_shm(&p)) < 0 && comp.done == 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "the receiver never pulled");
        fy_cpu_relax();
    }
    raise(SIGKILL);
}

static void sender_killed_mid_pull(void)
{
    static check_t ck;
    tproc_t p;
    tp_open(&p, check_cb, &ck);
    shm_iface_t *si = tp_shm(&p);
    ck = (check_t){.sizes = dying_sizes, .n = FY_ARRAY_SIZE(dying_sizes)};
    taddr_t addr = tp_addr(&p), sender;
    tchild_t c = tc_spawn(dying_sender, NULL);
    tc_write(c.wfd, &addr, sizeof(addr));
    tc_read(c.rfd, &sender, sizeof(sender));
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (si->stats.rx_pull == 0) { /* (it returns once the copy ended, whole or cut) */
        FY_ASSERT_MSG(fy_time_ns() < end, "the pull never came");
        tp_progress(&p);
    }
    int st;
    FY_ASSERT(waitpid(c.pid, &st, 0) == c.pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    fyproc_release(&c);
    int whole = (ck.seen >> 1) & 1;
    printf("  the %zu-byte message: %s\n", (size_t)BIG,
           whole ? "read whole before the sender died" : "dropped");
    FY_ASSERT(whole || si->stats.drops_dead >= 1);
    /* the ring moves on: a message of ours comes next */
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    uint64_t v = 0;
    pat_fill(&v, 8, 2);
    FY_ASSERT_OK(tp_send(&p, ep, 2, &v, 8, 0, NULL, NULL));
    while (((ck.seen >> 2) & 1) == 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "ring stuck after the sender died");
        tp_progress(&p);
    }
    FY_ASSERT_EQ(ck.errors, 0);
    FY_ASSERT(ck.seen & 1);
    p.ops->ep_destroy(ep);
    while (segment_holders(addr_ino(&sender)) != 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "the dead sender's segment is still held");
        uint64_t t = fy_time_ns() + 3 * si->md->opts.liveness_ns;
        while (fy_time_ns() < t)
            tp_progress(&p);
    }
    tp_close(&p);
}

/* ---- a receiver killed while it copies ---- */

static void rx_main(int rfd, int wfd, void *arg)
{
    check_t *ck = arg;
    tproc_t p;
    tp_open(&p, check_cb, ck);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    while (ck->count < ck->n)
        tp_progress(&p);
    tc_put_u64(wfd, ck->count);
    tc_put_u64(wfd, ck->errors);
    tp_wait_fd(&p, rfd);
    tc_get_u64(rfd);
    tp_close(&p);
}

static void receiver_killed_mid_pull(void)
{
    static const size_t one[] = {BIG};
    static const size_t next[] = {DATA(64 * MiB + 1)};
    static check_t ck;
    ck = (check_t){.sizes = one, .n = 1};
    tproc_t p;
    tp_open(&p, ev_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    tchild_t c = tc_spawn(rx_main, &ck);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *buf = malloc(BIG);
    FY_ASSERT(buf != NULL);
    tcomp_t comp;
    FY_ASSERT_STATUS(send_k(&p, ep, buf, BIG, 0, &comp), FERRY_INPROGRESS);
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (slot_reading(si) < 0 && comp.done == 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "the receiver never pulled");
        fy_cpu_relax();
    }
    int mid = comp.done == 0;
    fyproc_kill(&c, SIGKILL);
    wait_comp(&p, &comp);
    printf("  killed %s its copy; the send: %s\n", mid ? "during" : "after",
           ferry_status_string(comp.status));
    FY_ASSERT(comp.status == FERRY_OK || (mid && comp.status < 0));
    while (p.nfailed == 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "the killed receiver's ep never failed");
        tp_progress(&p);
    }
    FY_ASSERT(p.failed_ep == ep);
    FY_ASSERT_EQ(si->pull_nfree, SHM_PULL_SLOTS); /* its slot came back */
    fyproc_release(&c);
    p.ops->ep_destroy(ep);

    /* the next receiver gets the next message whole */
    ck = (check_t){.sizes = next, .n = 1};
    c = tc_spawn(rx_main, &ck);
    tc_read(c.rfd, &addr, sizeof(addr));
    ep = tp_ep(&p, &addr);
    FY_ASSERT_STATUS(send_k(&p, ep, buf, next[0], 0, &comp), FERRY_INPROGRESS);
    wait_comp(&p, &comp);
    FY_ASSERT_OK(comp.status);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 1);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    free(buf);
}

FYTEST_MAIN(FYTEST_CASE(pulled_in_order), FYTEST_CASE(rx_buffer_given_back),
            FYTEST_CASE(above_rx_cache), FYTEST_CASE(sender_killed_mid_pull),
            FYTEST_CASE(receiver_killed_mid_pull))
