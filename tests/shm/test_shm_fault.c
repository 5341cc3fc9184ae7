/*
 * test_shm_fault.c - failures of the shm transport: a receiver SIGKILLed mid-transfer (err_cb
 * on the ep, every outstanding operation completed with an error, no hang), a sender killed
 * while writing into a ring (the ring keeps moving), a producer dead between claiming a cell
 * and publishing it (the cell is skipped), a peer that closes its iface, an ep destroyed with
 * operations outstanding (a cancelled pull is never read afterwards), unreachable and malformed
 * addresses, bad configuration — and after each of them, nothing left in /dev/shm.
 */
#include <signal.h>
#include <sys/stat.h>

#include "shm_test.h"
#include "util/clock.h"

static unsigned long rx_count;
static uint8_t rx_last_id;
static void count_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    rx_count++;
    rx_last_id = id;
}

/* Entries of /dev/shm that look like ferry's (ferry names none: memfd segments have no name;
 * other programs on the box may create their own entries meanwhile, so only ours count). */
static unsigned dev_shm_entries(void)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return 0;
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, "ferry-shm") != NULL || strstr(e->d_name, "ferry-mem") != NULL;
    closedir(d);
    return n;
}

/* A peer that receives (counting), reports once after `report` messages, and otherwise
 * only progresses — until it is killed, or told to stop (then it closes cleanly). */
static void busy_receiver(int rfd, int wfd, void *arg)
{
    unsigned long report = (unsigned long)(uintptr_t)arg;
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    int reported = 0;
    struct pollfd pf = {.fd = rfd, .events = POLLIN};
    for (unsigned i = 0;; i++) {
        p.ops->iface_progress(p.iface);
        if (!reported && rx_count >= report) {
            tc_put_u64(wfd, rx_count);
            reported = 1;
        }
        if ((i & 1023) == 0 && poll(&pf, 1, 0) == 1)
            break;
    }
    tp_close(&p);
}

/* The receiver is SIGKILLed while 1 MiB zero-copy sends are in flight. */
static void receiver_killed(void)
{
    setenv("FERRY_SHM_OUTBOX_SIZE", "0", 1); /* every send pulled: all are in flight */
    unsigned shm_before = dev_shm_entries();
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    tchild_t c = tc_spawn(busy_receiver, (void *)(uintptr_t)10);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    enum { W = 4 };
    static char buf[W][1 << 20];
    tcomp_t comps[W];
    unsigned long posted = 0;
    for (int w = 0; w < W; w++)
        comps[w].done = 1;
    int killed = 0;
    uint64_t t_kill = 0;
    struct pollfd pf = {.fd = c.rfd, .events = POLLIN};
    while (p.nfailed == 0) {
        tcomp_t *cp = &comps[posted % W];
        if (cp->done) {
            tcomp_init(cp);
            struct iovec v = {buf[posted % W] + 16, sizeof(buf[0]) - 16};
            ferry_status_t st = p.ops->am_zcopy(ep, 1, buf[posted % W], 16, &v, 1, &cp->super);
            if (st == FERRY_INPROGRESS)
                posted++;
            else if (st == FERRY_ERR_NO_RESOURCE)
                cp->done = 1;
            else
                FY_ASSERT_MSG(killed, "zcopy send: %s", ferry_status_string(st));
        }
        p.ops->iface_progress(p.iface);
        if (!killed && poll(&pf, 1, 0) == 1) {
            FY_ASSERT_GE(tc_get_u64(c.rfd), 10);
            FY_ASSERT(kill(c.pid, SIGKILL) == 0); /* not reaped: a zombie must count as dead */
            t_kill = fy_time_ns();
            killed = 1;
        }
    }
    double ms = (double)(fy_time_ns() - t_kill) / 1e6;
    FY_ASSERT(killed);
    FY_ASSERT_EQ(p.nfailed, 1);
    FY_ASSERT(p.failed_ep == ep);
    FY_ASSERT_STATUS(p.fail_status, FERRY_ERR_CONNECTION_RESET);
    /* every operation posted completed exactly once; those in flight with an error */
    for (int w = 0; w < W; w++)
        FY_ASSERT_EQ(comps[w].done, 1);
    /* the ep is dead from now on */
    uint64_t v8 = 0;
    struct iovec iov = {&v8, 8};
    FY_ASSERT_STATUS(p.ops->am_short(ep, 1, &iov, 1), FERRY_ERR_NOT_CONNECTED);
    tcomp_t fl;
    tcomp_init(&fl);
    FY_ASSERT_STATUS(p.ops->ep_flush(ep, &fl.super), FERRY_ERR_NOT_CONNECTED);
    for (int i = 0; i < 100; i++)
        p.ops->iface_progress(p.iface);
    FY_ASSERT_EQ(p.nfailed, 1); /* once */
    printf("  %lu zero-copy sends posted; err_cb %.1f ms after SIGKILL\n", posted, ms);
    int st;
    waitpid(c.pid, &st, 0);
    FY_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    FY_ASSERT_GT(segment_holders(addr_ino(&addr)), 0); /* we still map its ring */
    p.ops->ep_destroy(ep);
    tp_close(&p);
    FY_ASSERT_EQ(segment_holders(addr_ino(&addr)), 0); /* now it is gone for good */
    FY_ASSERT_EQ(dev_shm_entries(), shm_before);
}

/* A sender that streams until killed. */
static void busy_sender(int rfd, int wfd, void *arg)
{
    uint8_t id = (uint8_t)(uintptr_t)arg;
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    fy_tl_ep_t *ep = tp_answer(&p, rfd, wfd);
    static char buf[200000];
    tcomp_t comp;
    tcomp_init(&comp);
    comp.done = 1;
    for (unsigned long i = 0;; i++) {
        size_t len = (i % 3 == 0) ? 8000 : (i % 3 == 1) ? 8 : 200000;
        if (len == 200000 && !comp.done) {
            p.ops->iface_progress(p.iface);
            continue;
        }
        tcomp_init(&comp);
        ferry_status_t st = tp_send(&p, ep, id, buf, len, len == 200000, &comp.super, NULL);
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
        if (st == FERRY_OK)
            comp.done = 1;
        if (i == 100)
            tc_put_u64(wfd, i);
    }
}

/* A sender killed while it writes into our ring: the ring keeps moving for others. */
static void sender_killed(void)
{
    unsigned shm_before = dev_shm_entries();
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    taddr_t addr = tp_addr(&p), senders[5];
    for (int round = 0; round < 5; round++) {
        tchild_t a = tc_spawn(busy_sender, (void *)(uintptr_t)1);
        tc_write(a.wfd, &addr, sizeof(addr));
        tc_read(a.rfd, &senders[round], sizeof(senders[round]));
        tp_wait_fd(&p, a.rfd);
        tc_get_u64(a.rfd);
        for (int i = 0; i < round * 50; i++) /* land the kill at different moments */
            p.ops->iface_progress(p.iface);
        kill(a.pid, SIGKILL);
        int st;
        waitpid(a.pid, &st, 0);
        close(a.rfd);
        close(a.wfd);
        /* a second sender: its messages must all arrive */
        tp_progress(&p);
        unsigned long before = rx_count;
        fy_tl_ep_t *ep = tp_ep(&p, &addr); /* (our own ring, from here) */
        uint64_t v = 0;
        for (int i = 0; i < 100; i++)
            FY_ASSERT_OK(tp_send(&p, ep, 2, &v, 8, 0, NULL, NULL));
        uint64_t t0 = fy_time_ns();
        while (!(rx_count >= before + 100 && rx_last_id == 2)) {
            FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "ring stuck after a kill");
            p.ops->iface_progress(p.iface);
        }
        p.ops->ep_destroy(ep);
    }
    printf("  dead claims skipped: %llu\n", (unsigned long long)tp_shm(&p)->stats.skipped_dead);
    tp_close(&p);
    for (int round = 0; round < 5; round++)
        FY_ASSERT_EQ(segment_holders(addr_ino(&senders[round])), 0);
    FY_ASSERT_EQ(dev_shm_entries(), shm_before);
}

/* A producer dies between claiming a cell and publishing it: deterministic. */
static void dead_claim_child(int rfd, int wfd, void *arg)
{
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    taddr_t addr;
    tc_read(rfd, &addr, sizeof(addr));
    shm_ep_t *ep = (shm_ep_t *)tp_ep(&p, &addr);
    uint32_t t;
    int wake = 0;
    shm_cell_t *c =
        shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
    FY_ASSERT(c != NULL);
    tc_put_u64(wfd, t);
    raise(SIGKILL);
}

static void dead_claim(void)
{
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tchild_t c = tc_spawn(dead_claim_child, NULL);
    tc_write(c.wfd, &addr, sizeof(addr));
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0); /* it holds ticket 0 */
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    uint64_t v = 0;
    FY_ASSERT_OK(tp_send(&p, ep, 5, &v, 8, 0, NULL, NULL)); /* ticket 1 */
    unsigned long before = rx_count;
    for (int i = 0; i < 1000; i++)
        p.ops->iface_progress(p.iface);
    FY_ASSERT_EQ(rx_count, before); /* blocked behind the claim, for now */
    uint64_t t0 = fy_time_ns();
    while (rx_count == before) {
        p.ops->iface_progress(p.iface);
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "dead claim never skipped");
    }
    FY_ASSERT_EQ(rx_last_id, 5);
    FY_ASSERT_EQ(tp_shm(&p)->stats.skipped_dead, 1);
    int st;
    waitpid(c.pid, &st, 0);
    close(c.rfd);
    close(c.wfd);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

/* A peer that closes its iface but lives on: our ep fails. */
static void closing_peer(int rfd, int wfd, void *arg)
{
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    tp_wait_fd(&p, rfd);
    tc_get_u64(rfd);
    tp_close(&p);
    tc_put_u64(wfd, 1);
    tc_get_u64(rfd);
}

static void peer_closed(void)
{
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    tchild_t c = tc_spawn(closing_peer, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    uint64_t v = 0;
    FY_ASSERT_OK(tp_send(&p, ep, 1, &v, 8, 0, NULL, NULL));
    tc_put_u64(c.wfd, 1);
    tc_get_u64(c.rfd);
    uint64_t t0 = fy_time_ns();
    while (p.nfailed == 0) {
        p.ops->iface_progress(p.iface);
        FY_ASSERT_MSG(fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC, "closed peer not noticed");
    }
    FY_ASSERT(p.failed_ep == ep);
    struct iovec iov = {&v, 8};
    FY_ASSERT_STATUS(p.ops->am_short(ep, 1, &iov, 1), FERRY_ERR_NOT_CONNECTED);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

/* ep_destroy with zero-copy sends outstanding: they complete with CANCELED, once. */
static void stalled_receiver(int rfd, int wfd, void *arg)
{
    tproc_t p;
    rx_count = 0;
    tp_open(&p, count_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    tc_get_u64(rfd); /* not progressing until told */
    for (int i = 0; i < 10000; i++)
        p.ops->iface_progress(p.iface);
    tc_put_u64(wfd, rx_count);
    tc_get_u64(rfd);
    tp_close(&p);
}

/* A receiver that never progresses holds the outbox slots of the messages sent to it; once it
 * is killed, its slots come back and the next receiver gets messages through the outbox. */
static void outbox_receiver_killed(void)
{
    setenv("FERRY_SHM_OUTBOX_SIZE", "4m", 1);
    setenv("FERRY_SHM_OUTBOX_MAX", "1m", 1);
    tproc_t p;
    rx_count = 0;
    tp_open(&p, count_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    tchild_t a = tc_spawn(stalled_receiver, NULL);
    taddr_t addr;
    tc_read(a.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    static char buf[1 << 20];
    tcomp_t comp;
    for (int i = 0; i < 3; i++) { /* three slots of 1 MiB + 64 B fit in 4 MiB */
        tcomp_init(&comp);
        struct iovec v = {buf, sizeof(buf)};
        FY_ASSERT_OK(p.ops->am_zcopy(ep, 1, NULL, 0, &v, 1, &comp.super));
    }
    FY_ASSERT_EQ(si->stats.tx_obox, 3);
    FY_ASSERT_EQ(si->obox_count, 3);
    tcomp_init(&comp); /* the fourth finds the outbox full: a pull, which waits */
    struct iovec v = {buf, sizeof(buf)};
    FY_ASSERT_STATUS(p.ops->am_zcopy(ep, 1, NULL, 0, &v, 1, &comp.super), FERRY_INPROGRESS);
    FY_ASSERT_EQ(si->stats.obox_full, 1);
    FY_ASSERT(kill(a.pid, SIGKILL) == 0);
    while (p.nfailed == 0)
        p.ops->iface_progress(p.iface);
    FY_ASSERT_EQ(comp.done, 1);
    FY_ASSERT(comp.status != FERRY_OK);
    int st;
    waitpid(a.pid, &st, 0);
    close(a.rfd);
    close(a.wfd);
    p.ops->ep_destroy(ep);

    tchild_t b = tc_spawn(busy_receiver, (void *)(uintptr_t)3);
    tc_read(b.rfd, &addr, sizeof(addr));
    ep = tp_ep(&p, &addr);
    for (int i = 0; i < 3; i++) { /* the dead receiver's slots are free again */
        tcomp_init(&comp);
        FY_ASSERT_OK(p.ops->am_zcopy(ep, 1, NULL, 0, &v, 1, &comp.super));
    }
    FY_ASSERT_EQ(si->stats.tx_obox, 6);
    FY_ASSERT_EQ(si->stats.obox_full, 1);
    FY_ASSERT_EQ(tc_get_u64(b.rfd), 3);
    tc_put_u64(b.wfd, 1);
    tc_join(&b);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

/* ep_destroy in the middle of a pushed message: the receiver is told to drop the part it has
 * (the abort waits for room in its ring like any control message). */
static void frag_receiver(int rfd, int wfd, void *arg)
{
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    tc_get_u64(rfd); /* stalled until told */
    tp_wait_fd(&p, rfd);
    /* The abort was in the ring before the sender wrote to the pipe, but the pipe may have
     * been seen first: take what the ring holds. */
    while (p.ops->iface_progress(p.iface) != 0) {
    }
    tc_get_u64(rfd);
    tc_put_u64(wfd, tp_shm(&p)->stats.rx_frag);
    tc_put_u64(wfd, fy_hash_count(&tp_shm(&p)->frags));
    tc_get_u64(rfd);
    tp_close(&p);
}

static void destroy_mid_push(void)
{
    setenv("FERRY_SHM_CMA", "n", 1);
    setenv("FERRY_SHM_RING_SIZE", "8", 1);
    setenv("FERRY_SHM_OUTBOX_SIZE", "0", 1);
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    tchild_t c = tc_spawn(frag_receiver, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    static char buf[1 << 20];
    tcomp_t comp;
    tcomp_init(&comp);
    struct iovec v = {buf, sizeof(buf)};
    FY_ASSERT_STATUS(p.ops->am_zcopy(ep, 1, NULL, 0, &v, 1, &comp.super), FERRY_INPROGRESS);
    p.ops->ep_destroy(ep); /* 8 chunks are in its ring, which is full */
    FY_ASSERT_EQ(comp.done, 1);
    FY_ASSERT_STATUS(comp.status, FERRY_ERR_CANCELED);
    FY_ASSERT_EQ(tp_shm(&p)->nreplies, 1); /* the abort waits */
    tc_put_u64(c.wfd, 1);
    while (tp_shm(&p)->nreplies != 0)
        p.ops->iface_progress(p.iface);
    tc_put_u64(c.wfd, 1);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 9); /* 8 chunks and the abort */
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 0); /* nothing kept */
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    tp_close(&p);
}

/* A receiver that stalls, then progresses until message 9: how many messages it delivered,
 * and how many pulls it dropped because their sender had revoked them. */
static void revoked_receiver(int rfd, int wfd, void *arg)
{
    tproc_t p;
    rx_count = 0;
    rx_last_id = 0;
    tp_open(&p, count_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    tc_get_u64(rfd); /* stalled until told */
    uint64_t end = fy_time_ns() + 30000000000ull;
    while (rx_last_id != 9) {
        FY_ASSERT(fy_time_ns() < end);
        p.ops->iface_progress(p.iface);
    }
    tc_put_u64(wfd, rx_count);
    tc_put_u64(wfd, tp_shm(&p)->stats.drops_revoked);
    tc_get_u64(rfd);
    tp_close(&p);
}

/* ep_destroy with a pull outstanding in another process: the completion (CANCELED) gives the
 * buffer back, so the receiver must never read it afterwards — it finds the pull slot revoked
 * and drops the message; later messages still arrive. */
static void destroy_revokes_pull(void)
{
    setenv("FERRY_SHM_OUTBOX_SIZE", "0", 1); /* 1 MiB is pulled */
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    tchild_t c = tc_spawn(revoked_receiver, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    static char buf[1 << 20];
    tcomp_t comp;
    tcomp_init(&comp);
    struct iovec v = {buf, sizeof(buf)};
    FY_ASSERT_STATUS(p.ops->am_zcopy(ep, 1, NULL, 0, &v, 1, &comp.super), FERRY_INPROGRESS);
    FY_ASSERT_EQ(si->pull_nfree, SHM_PULL_SLOTS - 1);
    p.ops->ep_destroy(ep);
    FY_ASSERT_EQ(comp.done, 1);
    FY_ASSERT_STATUS(comp.status, FERRY_ERR_CANCELED);
    FY_ASSERT_EQ(si->pull_nfree, SHM_PULL_SLOTS); /* revoked, and free again */
    memset(buf, 0xdd, sizeof(buf));               /* the caller's again */
    ep = tp_ep(&p, &addr);
    uint64_t v8 = 9;
    struct iovec iov = {&v8, 8};
    FY_ASSERT_OK(p.ops->am_short(ep, 9, &iov, 1));
    tc_put_u64(c.wfd, 1);
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 1); /* message 9 only */
    FY_ASSERT_EQ(tc_get_u64(c.rfd), 1); /* the pull, dropped unread */
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

/* A receiver that pulls at once: message 1 must carry the pattern (seed 5) whole. */
#define RACE_LEN ((size_t)32 << 20)
static unsigned long race_good, race_bad;
static void race_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    rx_last_id = id;
    if (id == 1) {
        if (len == RACE_LEN && pat_check(data, len, 5) == -1)
            race_good++;
        else
            race_bad++;
    }
}

static void racing_receiver(int rfd, int wfd, void *arg)
{
    tproc_t p;
    rx_last_id = 0;
    tp_open(&p, race_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    uint64_t end = fy_time_ns() + 60000000000ull;
    while (rx_last_id != 9) {
        FY_ASSERT(fy_time_ns() < end);
        p.ops->iface_progress(p.iface);
    }
    tc_put_u64(wfd, race_good);
    tc_put_u64(wfd, race_bad);
    tc_put_u64(wfd, tp_shm(&p)->stats.drops_revoked);
    tc_get_u64(rfd);
    tp_close(&p);
}

/* ep_destroy while the receiver is copying the pull (its slot READING): the destroy waits for
 * the copy to end, so the message arrives whole, never with the bytes written after the
 * cancel; had the receiver not started, it drops the message. */
static void destroy_during_pull(void)
{
    setenv("FERRY_SHM_OUTBOX_SIZE", "0", 1);
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    tchild_t c = tc_spawn(racing_receiver, NULL);
    taddr_t addr;
    tc_read(c.rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    char *buf = malloc(RACE_LEN);
    FY_ASSERT(buf != NULL);
    pat_fill(buf, RACE_LEN, 5);
    tcomp_t comp;
    tcomp_init(&comp);
    struct iovec v = {buf, RACE_LEN};
    FY_ASSERT_STATUS(p.ops->am_zcopy(ep, 1, NULL, 0, &v, 1, &comp.super), FERRY_INPROGRESS);
    const uint64_t *w = &si->pulls[si->pull_free[si->pull_nfree]]; /* the slot just taken */
    uint64_t open = __atomic_load_n(w, __ATOMIC_ACQUIRE), end = fy_time_ns() + 30000000000ull;
    /* The receiver polls on the other core: it may have taken the slot (READING), or even read
     * it all (CLOSED), before this load; if it is still OPEN, wait until it is taken. */
    FY_ASSERT(open >> 2 != 0);
    if ((open & 3) == SHM_PULL_OPEN)
        while (__atomic_load_n(w, __ATOMIC_ACQUIRE) == open)
            FY_ASSERT(fy_time_ns() < end);
    p.ops->ep_destroy(ep);
    FY_ASSERT_EQ(comp.done, 1);
    FY_ASSERT_STATUS(comp.status, FERRY_ERR_CANCELED);
    FY_ASSERT_EQ(__atomic_load_n(w, __ATOMIC_ACQUIRE) & 3, SHM_PULL_CLOSED);
    FY_ASSERT(si->stats.revoke_waits <= 1);
    fprintf(stderr, "  the destroy waited for the reader: %s\n",
            si->stats.revoke_waits ? "yes" : "no");
    memset(buf, 0xdd, RACE_LEN);
    ep = tp_ep(&p, &addr);
    uint64_t v8 = 9;
    struct iovec iov = {&v8, 8};
    FY_ASSERT_OK(p.ops->am_short(ep, 9, &iov, 1));
    uint64_t good = tc_get_u64(c.rfd), bad = tc_get_u64(c.rfd), revoked = tc_get_u64(c.rfd);
    FY_ASSERT_EQ(bad, 0);
    FY_ASSERT_EQ(good, 1); /* it had taken the slot: the copy finished before the destroy */
    FY_ASSERT_EQ(revoked, 0);
    tc_put_u64(c.wfd, 1);
    tc_join(&c);
    p.ops->ep_destroy(ep);
    tp_close(&p);
    free(buf);
}

/* Write one crafted cell into ep's ring: header fields, inline bytes, buffer bytes. */
static unsigned inject_flags; /* the next injected cells' flags (copy alignment: pad) */

static void inject(fy_tl_ep_t *tl_ep, uint8_t type, uint8_t id, uint32_t len, const void *in,
                   size_t in_len, const void *buf, size_t buf_len)
{
    shm_ep_t *ep = (shm_ep_t *)tl_ep;
    uint32_t t;
    int wake = 0;
    shm_cell_t *c =
        shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
    FY_ASSERT(c != NULL);
    shm_cell_hdr(c, type, id, inject_flags, len);
    if (in_len != 0)
        memcpy(c->data, in, in_len);
    if (buf_len != 0)
        memcpy(ep->bufs + (size_t)(t & ep->mask) * ep->bcopy_size, buf, buf_len);
    shm_ring_publish(c, ep->owner, t);
}

/* Cells no honest sender writes: each is counted and dropped, nothing is delivered, nothing
 * outside the bounds is read or written, and the ring goes on. */
static void malformed_cells(void)
{
    tproc_t p;
    rx_count = 0;
    tp_open(&p, count_cb, NULL);
    shm_iface_t *si = tp_shm(&p);
    taddr_t addr = tp_addr(&p);
    fy_tl_ep_t *ep = tp_ep(&p, &addr); /* to our own ring */
    uint8_t junk[64];
    memset(junk, 0xab, sizeof(junk));
    shm_obox_desc_t d = {.from = si->addr, .len = 100, .gen = 1};
    unsigned n = 0;
    inject(ep, 99, 0, 8, junk, 8, NULL, 0), n++;                               /* unknown type */
    inject(ep, SHM_CELL_SHORT, FY_TL_AM_ID_MAX + 1, 8, junk, 8, NULL, 0), n++; /* bad id */
    inject(ep, SHM_CELL_SHORT, 1, 4096, junk, 8, NULL, 0), n++;                /* over the cell */
    inject(ep, SHM_CELL_BCOPY, 1, si->bcopy_size + 1, NULL, 0, NULL, 0), n++;
    inject(ep, SHM_CELL_PULL, 1, 8, NULL, 0, junk, 8), n++; /* short descriptor */
    shm_pull_desc_t pd = {.data_len = 8, .iovcnt = 1, .slot = SHM_PULL_SLOTS, .reply = si->addr};
    pd.iov[0].addr = (uint64_t)(uintptr_t)junk;
    pd.iov[0].len = 8;
    inject(ep, SHM_CELL_PULL, 1, sizeof(pd), NULL, 0, &pd, sizeof(pd)), n++; /* slot past end */
    pd.slot = 0; /* a slot that is not open (for this generation): dropped, nothing read */
    pd.gen = 12345;
    inject(ep, SHM_CELL_PULL, 1, sizeof(pd), NULL, 0, &pd, sizeof(pd));
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d) - 1, NULL, 0, &d, sizeof(d)), n++;
    d.off = si->obox_off + si->obox_size; /* past the outbox */
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    d.off = si->obox_off; /* no room for the slot header before it */
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    d.off = si->obox_off + 128 + 8; /* not on a 64-byte boundary */
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    d.off = si->obox_off + 128;
    d.len = si->obox_size; /* runs past the end */
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    d.len = 100;
    /* copy alignment: a pad that would run the message past its buffer, or put the slot's
     * start off a 64-byte boundary, before the outbox, or below offset 0 */
    inject_flags = 63;
    inject(ep, SHM_CELL_BCOPY, 1, si->bcopy_size - 62, NULL, 0, NULL, 0), n++;
    inject_flags = 8;
    d.off = si->obox_off + 128;
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    inject_flags = 16;
    d.off = si->obox_off + 16;
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    d.off = 8;
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    inject_flags = 0;
    d.off = si->obox_off + 128;
    d.from.id ^= 1; /* a sender that does not exist */
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    d.from = si->addr;
    d.from.ino ^= 1; /* our id with another segment's inode */
    inject(ep, SHM_CELL_OUTBOX, 1, sizeof(d), NULL, 0, &d, sizeof(d)), n++;
    for (int i = 0; i < 100; i++)
        p.ops->iface_progress(p.iface);
    FY_ASSERT_EQ(si->stats.drops_malformed, n);
    FY_ASSERT_EQ(si->stats.drops_revoked, 1);
    FY_ASSERT_EQ(rx_count, 0);
    /* the ring still works, and so does the outbox */
    uint64_t v8 = 7;
    struct iovec iov = {&v8, 8};
    FY_ASSERT_OK(p.ops->am_short(ep, 3, &iov, 1));
    static char big[100000];
    tcomp_t comp;
    tcomp_init(&comp);
    struct iovec bv = {big, sizeof(big)};
    FY_ASSERT_OK(p.ops->am_zcopy(ep, 4, NULL, 0, &bv, 1, &comp.super));
    while (rx_count < 2)
        p.ops->iface_progress(p.iface);
    FY_ASSERT_EQ(rx_last_id, 4);
    FY_ASSERT_EQ(si->stats.rx_obox, 1);
    FY_ASSERT_EQ(si->stats.drops_malformed, n);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

/* Addresses: other host or namespace, malformed, of a process that has exited. */
static void exiting_peer(int rfd, int wfd, void *arg)
{
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    tp_close(&p);
}

static void addresses(void)
{
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    const fy_tl_ops_t *o = p.ops;
    FY_ASSERT_EQ(p.attr.device_addr_len, sizeof(shm_dev_addr_t));
    FY_ASSERT_EQ(p.attr.iface_addr_len, sizeof(shm_iface_addr_t));
    taddr_t good = tp_addr(&p), bad;
    fy_tl_ep_t *ep = NULL;
    FY_ASSERT(o->iface_is_reachable(p.iface, good.dev, good.iface));

    bad = good;
    bad.dev[3] ^= 1; /* another boot id: another host */
    FY_ASSERT(!o->iface_is_reachable(p.iface, bad.dev, bad.iface));
    FY_ASSERT_STATUS(o->ep_create(p.iface, bad.dev, bad.iface, &ep), FERRY_ERR_UNREACHABLE);
    bad = good;
    bad.dev[20] ^= 1; /* another namespace */
    FY_ASSERT(!o->iface_is_reachable(p.iface, bad.dev, bad.iface));

    shm_iface_addr_t *a = (shm_iface_addr_t *)bad.iface;
    bad = good;
    a->pid = 0;
    FY_ASSERT(!o->iface_is_reachable(p.iface, bad.dev, bad.iface));
    bad = good;
    a->bcopy_size = 1024; /* smaller buffers than we promise */
    FY_ASSERT(!o->iface_is_reachable(p.iface, bad.dev, bad.iface));

    /* a live peer's address, tampered with */
    tchild_t live = tc_spawn(busy_receiver, (void *)(uintptr_t)~0ul);
    taddr_t peer;
    tc_read(live.rfd, &peer, sizeof(peer));
    a = (shm_iface_addr_t *)peer.iface;
    int32_t fd = a->fd;
    a->fd = 0; /* not its segment */
    FY_ASSERT_STATUS(o->ep_create(p.iface, peer.dev, peer.iface, &ep), FERRY_ERR_UNREACHABLE);
    a->fd = fd;
    a->ino ^= 1; /* the right fd, the wrong inode */
    FY_ASSERT_STATUS(o->ep_create(p.iface, peer.dev, peer.iface, &ep), FERRY_ERR_UNREACHABLE);
    a->ino ^= 1;
    a->id ^= 1; /* the right segment, another iface id: no wake-up socket of that name */
    FY_ASSERT_STATUS(o->ep_create(p.iface, peer.dev, peer.iface, &ep), FERRY_ERR_UNREACHABLE);
    a->id ^= 1;
    FY_ASSERT_OK(o->ep_create(p.iface, peer.dev, peer.iface, &ep));
    o->ep_destroy(ep);
    tc_put_u64(live.wfd, 1);
    tc_join(&live);

    tchild_t c = tc_spawn(exiting_peer, NULL);
    taddr_t gone;
    tc_read(c.rfd, &gone, sizeof(gone));
    tc_join(&c);
    FY_ASSERT_STATUS(o->ep_create(p.iface, gone.dev, gone.iface, &ep), FERRY_ERR_UNREACHABLE);
    tp_close(&p);
}

/* Bad FERRY_SHM_* values are refused by md_open, naming the variable. */
static void bad_config(void)
{
    const fy_tl_component_t *tl = fy_tl_find("shm");
    FY_ASSERT(tl != NULL && tl->config != NULL);
    static const char *const cases[][2] = {
        {"FERRY_SHM_RING_SIZE", "100"},  {"FERRY_SHM_RING_SIZE", "4"},
        {"FERRY_SHM_CELL_SIZE", "96"},   {"FERRY_SHM_BCOPY_SIZE", "1k"},
        {"FERRY_SHM_CMA", "maybe"},      {"FERRY_SHM_OUTBOX_SIZE", "5000"},
        {"FERRY_SHM_OUTBOX_MAX", "160m"}};
    for (size_t i = 0; i < FY_ARRAY_SIZE(cases); i++) {
        setenv(cases[i][0], cases[i][1], 1);
        fy_tl_md_t *md = NULL;
        FY_ASSERT_STATUS(tl->ops->md_open(tl, &md), FERRY_ERR_BAD_CONFIG);
        unsetenv(cases[i][0]);
    }
    setenv("FERRY_SHM_RING_SIZE", "64", 1);
    setenv("FERRY_SHM_CELL_SIZE", "256", 1);
    tproc_t p;
    tp_open(&p, count_cb, NULL);
    FY_ASSERT_EQ(p.attr.max_short, 256 - 16);
    FY_ASSERT_EQ(tp_shm(&p)->mask, 63);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    taddr_t addr = tp_addr(&p);
    fy_tl_ep_t *ep = tp_ep(&p, &addr);
    p.ops->iface_print(p.iface, f);
    fclose(f);
    FY_ASSERT_MSG(strstr(text, "ring 64 x 256 B") != NULL && strstr(text, "ep -> pid") != NULL &&
                      strstr(text, "outbox 167772160 B") != NULL,
                  "iface_print said: %s", text);
    free(text);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(receiver_killed), FYTEST_CASE(outbox_receiver_killed),
            FYTEST_CASE(sender_killed), FYTEST_CASE(dead_claim), FYTEST_CASE(peer_closed),
            FYTEST_CASE(destroy_mid_push), FYTEST_CASE(destroy_revokes_pull),
            FYTEST_CASE(destroy_during_pull), FYTEST_CASE(malformed_cells), FYTEST_CASE(addresses),
            FYTEST_CASE(bad_config))
