/*
 * test_shm_mapped.c - zero-copy messages whose data lies in ferry-allocated memory (a memfd
 * segment, as FERRY_MEM_ALLOCATE makes): the receiver maps the sender's segment and reads the
 * data in place (MAPPED cells, shm_mapped.c).
 *
 * in_place: sizes from the threshold to 17 MiB at odd offsets, with headers in one and in
 * several pieces, in order with outbox and short messages between; the data handed to
 * am_split_cb is the sender's memory itself (a byte the sender changes after the send is seen),
 * nothing of it copied; below the threshold and from malloc'd memory the outbox is used.  The
 * receiver's mapping is parked after the message and unmapped once idle.
 * contiguous: an owner without am_split_cb gets header and data in one piece; by default every
 * message past the cell buffers is read in place.
 * revoked: a send whose ep is destroyed before the receiver reads it is dropped unread.
 * receiver_killed: a receiver killed inside its handler (holding the data): the send fails,
 * never hangs.  sender_killed: a sender killed while the receiver reads its data: the data is
 * read whole (the mapping keeps the memory), and the dead sender's segment is freed after.
 * malformed: descriptors naming bytes outside the segment, another process, or a segment that
 * is not there are dropped or refused, and the next good message arrives.
 */
#include <signal.h>
#include <sys/wait.h>

#include "shm_test.h"
#include "util/clock.h"
#include "util/shmem.h"

#define KiB         ((size_t)1 << 10)
#define MiB         ((size_t)1 << 20)
#define SEG_SIZE    (20 * MiB)
#define DEADLINE_NS (20 * FY_NSEC_PER_SEC)

/* ---- the receiving peer ---- */

typedef struct rx {
    unsigned long count, errors, split, expected;
    uintptr_t seg_lo, seg_hi; /* where the sender's segment is mapped here (after the first) */
    int kill_sender_at;       /* sender_killed: SIGKILL it inside message k (1-based) */
    int die_at;               /* receiver_killed: die inside message k (1-based) */
    pid_t sender;
} rx_t;

static rx_t rx;

/* Message k: its header is "hdr:k" padded with k's pattern to 16 B, the data pattern k. */
static void check_msg(uint8_t id, const char *head, size_t head_len, const char *data,
                      size_t data_len)
{
    unsigned long k = rx.count++;
    if (rx.die_at != 0 && rx.count == (unsigned long)rx.die_at)
        _exit(9); /* (no answer: the sender must notice the death) */
    if (rx.kill_sender_at != 0 && rx.count == (unsigned long)rx.kill_sender_at) {
        FY_ASSERT(kill(rx.sender, SIGKILL) == 0);
        for (uint64_t end = fy_time_ns() + DEADLINE_NS; !fy_shm_pid_is_dead(rx.sender);)
            FY_ASSERT_MSG(fy_time_ns() < end, "sender %d never died", (int)rx.sender);
    }
    long bad = head_len == 16 ? pat_check(head, 16, ~k) : -3;
    if (bad == -1)
        bad = pat_check(data, data_len, k);
    if ((bad != -1 || id != (k & FY_TL_AM_ID_MAX)) && rx.errors++ < 5)
        fprintf(stderr, "message %lu: head %zu B, data %zu B, id %u, wrong byte at %ld\n", k,
                head_len, data_len, id, bad);
}

static void split_cb(void *arg, uint8_t id, const void *head, size_t head_len, const void *data,
                     size_t data_len)
{
    (void)arg;
    rx.split++;
    uintptr_t d = (uintptr_t)data;
    if (rx.seg_lo == 0 || d < rx.seg_lo || d + data_len > rx.seg_hi) {
        rx.seg_lo = d; /* (a lower bound of the mapping: messages start at offsets >= 0) */
        rx.seg_hi = d + SEG_SIZE;
    }
    check_msg(id, head, head_len, data, data_len);
}

static void whole_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    (void)arg;
    if (len < 16) {
        rx.errors++;
        return;
    }
    check_msg(id, data, 16, (const char *)data + 16, len - 16);
}

/* Open an iface with or without am_split_cb. */
static void open_rx(tproc_t *p, int split)
{
    tp_open(p, whole_cb, NULL);
    if (split)
        p->iface->params.am_split_cb = split_cb;
}

/* The receiver: send our address, take `expected` messages, report count, errors and split
 * deliveries and what the receive side counted, then wait to be told to close. */
static void rx_main(int rfd, int wfd, void *arg)
{
    tproc_t p;
    open_rx(&p, arg != NULL);
    taddr_t mine = tp_addr(&p);
    tc_write(wfd, &mine, sizeof(mine));
    rx.sender = (pid_t)tc_get_u64(rfd);
    tc_get_u64(rfd); /* go */
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (rx.count < rx.expected) {
        FY_ASSERT_MSG(fy_time_ns() < end, "%lu of %lu messages", rx.count, rx.expected);
        tp_progress(&p);
    }
    shm_iface_t *si = tp_shm(&p);
    tc_put_u64(wfd, rx.count);
    tc_put_u64(wfd, rx.errors);
    tc_put_u64(wfd, rx.split);
    tc_put_u64(wfd, si->stats.rx_mapped);
    tc_put_u64(wfd, si->stats.drops_malformed + si->stats.drops_revoked);
    tc_put_u64(wfd, fy_shmem_parked());
    /* idle: the liveness check unmaps the parked segment (OUTBOX_IDLE) */
    end = fy_time_ns() + DEADLINE_NS;
    while (fy_shmem_parked() != 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "a sender's segment still mapped");
        tp_progress(&p);
    }
    tc_put_u64(wfd, fy_shmem_parked());
    tp_wait_fd(&p, rfd);
    tc_get_u64(rfd);
    tp_close(&p);
}

/* ---- the sender's side ---- */

typedef struct tx {
    tproc_t p;
    tchild_t c;
    taddr_t addr; /* the receiver's */
    fy_tl_ep_t *ep;
    char *seg;  /* ferry-allocated */
    char *heap; /* malloc'd */
} tx_t;

/* Start a receiver (its rx as given), and be its sender unless sender_pid says who is. */
static void tx_open(tx_t *t, int split, rx_t r, pid_t sender_pid)
{
    rx = r;
    t->c = tc_spawn(rx_main, split ? (void *)1 : NULL);
    tp_open(&t->p, whole_cb, NULL);
    tc_read(t->c.rfd, &t->addr, sizeof(t->addr));
    t->ep = tp_ep(&t->p, &t->addr);
    FY_ASSERT_OK(fy_shmem_alloc(SEG_SIZE, "ferry-test-mapped", (void **)&t->seg));
    FY_ASSERT((t->heap = malloc(SEG_SIZE)) != NULL);
    tc_put_u64(t->c.wfd, (uint64_t)(sender_pid != 0 ? sender_pid : getpid()));
}

static void tx_close(tx_t *t)
{
    if (t->ep != NULL)
        t->p.ops->ep_destroy(t->ep);
    tp_close(&t->p);
    fy_shmem_free(t->seg);
    free(t->heap);
}

/* The receiver's report: count, errors, split deliveries, rx_mapped, drops, parked before and
 * after idling. */
static void expect_report(tx_t *t, unsigned long count, unsigned long split, unsigned long drops,
                          unsigned long parked)
{
    FY_ASSERT_EQ(tc_get_u64(t->c.rfd), count);
    FY_ASSERT_EQ(tc_get_u64(t->c.rfd), 0); /* errors */
    FY_ASSERT_EQ(tc_get_u64(t->c.rfd), split);
    tc_get_u64(t->c.rfd); /* rx_mapped: asserted by the callers that know it */
    FY_ASSERT_EQ(tc_get_u64(t->c.rfd), drops);
    FY_ASSERT_EQ(tc_get_u64(t->c.rfd), parked);
    FY_ASSERT_EQ(tc_get_u64(t->c.rfd), 0); /* nothing mapped once idle */
    tc_put_u64(t->c.wfd, 1);
    tc_join(&t->c);
}

/* Message k: data_len bytes of pattern k at buf, a 16-byte head of pattern ~k in one piece or
 * in three (the transport header, then two iov pieces before the data). */
static ferry_status_t send_k(tx_t *t, char *buf, size_t data_len, unsigned long k, int pieces,
                             tcomp_t *comp)
{
    static char head[16];
    pat_fill(head, 16, ~k);
    pat_fill(buf, data_len, k);
    tcomp_init(comp);
    size_t h = pieces == 1 ? 16 : 4;
    struct iovec v[3] = {{head + h, (16 - h) / 2},
                         {head + h + (16 - h) / 2, 16 - h - (16 - h) / 2},
                         {buf, data_len}};
    struct iovec *iv = pieces == 1 ? &v[2] : v;
    size_t n = pieces == 1 ? 1 : 3;
    for (;;) {
        ferry_status_t st =
            t->p.ops->am_zcopy(t->ep, (uint8_t)(k & FY_TL_AM_ID_MAX), head, h, iv, n, &comp->super);
        if (st != FERRY_ERR_NO_RESOURCE)
            return st;
        tp_progress(&t->p);
    }
}

static void wait_comp(tx_t *t, tcomp_t *c)
{
    uint64_t end = fy_time_ns() + DEADLINE_NS;
    while (c->done == 0) {
        FY_ASSERT_MSG(fy_time_ns() < end, "a send never completed");
        tp_progress(&t->p);
    }
    FY_ASSERT_EQ(c->done, 1);
}

/* ---- in place, in order with other paths ---- */

typedef struct step {
    size_t off, len;
    int heap, pieces;
} step_t;

static const step_t steps[] = {{0, 16 * KiB, 0, 1},         {8, 16 * KiB - 1, 0, 1},
                               {4096 + 7, MiB + 13, 0, 3},  {0, 100 * KiB, 1, 1},
                               {64, 17 * MiB, 0, 1},        {3, 16 * KiB, 1, 3},
                               {SEG_SIZE - MiB, MiB, 0, 3}, {100, 64 * KiB + 1, 0, 1}};

static void in_place(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "50ms", 1);
    setenv("FERRY_SHM_MAPPED_THRESH", "16k", 1); /* (the default, 0, reads all in place) */
    const unsigned long n = FY_ARRAY_SIZE(steps);
    tx_t t;
    tx_open(&t, 1, (rx_t){.expected = n}, 0);
    unsetenv("FERRY_SHM_MAPPED_THRESH");
    shm_iface_t *si = tp_shm(&t.p);
    FY_ASSERT_EQ(si->md->opts.mapped_thresh, 16 * KiB);
    tc_put_u64(t.c.wfd, 1); /* go */
    unsigned long mapped = 0;
    for (unsigned long k = 0; k < n; k++) {
        const step_t *s = &steps[k];
        int in_seg = !s->heap && s->len >= 16 * KiB;
        char *buf = (s->heap ? t.heap : t.seg) + s->off;
        tcomp_t comp;
        ferry_status_t st = send_k(&t, buf, s->len, k, s->pieces, &comp);
        mapped += in_seg;
        FY_ASSERT_EQ(si->stats.tx_mapped, mapped);
        /* read in place: done when the receiver answers; the outbox copies: done now */
        FY_ASSERT_STATUS(st, in_seg ? FERRY_INPROGRESS : FERRY_OK);
        if (st == FERRY_INPROGRESS) {
            wait_comp(&t, &comp);
            FY_ASSERT_OK(comp.status);
        }
    }
    expect_report(&t, n, mapped, 0, 1);
    tx_close(&t);
}

/* An owner without am_split_cb: header and data handed over in one piece. */
static void contiguous(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "50ms", 1);
    const unsigned long n = 3;
    tx_t t;
    tx_open(&t, 0, (rx_t){.expected = n}, 0);
    FY_ASSERT_EQ(tp_shm(&t.p)->md->opts.mapped_thresh, 0);
    tc_put_u64(t.c.wfd, 1);
    for (unsigned long k = 0; k < n; k++) { /* (the first past the cell buffers, 9000 B) */
        size_t len = k == 0 ? 9000 : MiB + k;
        tcomp_t comp;
        FY_ASSERT_STATUS(send_k(&t, t.seg + 100 * k, len, k, (int)(1 + 2 * (k & 1)), &comp),
                         FERRY_INPROGRESS);
        wait_comp(&t, &comp);
        FY_ASSERT_OK(comp.status);
    }
    FY_ASSERT_EQ(tp_shm(&t.p)->stats.tx_mapped, n);
    expect_report(&t, n, 0, 0, 1);
    tx_close(&t);
}

/* ---- a send cancelled before it is read ---- */

static void revoked(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "50ms", 1);
    tx_t t;
    tx_open(&t, 1, (rx_t){.expected = 1}, 0);
    /* the receiver waits for "go": the descriptor sits in its ring unread */
    tcomp_t comp;
    FY_ASSERT_STATUS(send_k(&t, t.seg, MiB, 0, 1, &comp), FERRY_INPROGRESS);
    t.p.ops->ep_destroy(t.ep);
    FY_ASSERT_EQ(comp.done, 1);
    FY_ASSERT_STATUS(comp.status, FERRY_ERR_CANCELED);
    memset(t.seg, 0xee, MiB); /* ours again at once: never read */
    t.ep = tp_ep(&t.p, &t.addr);
    tc_put_u64(t.c.wfd, 1);
    FY_ASSERT_STATUS(send_k(&t, t.seg + 4096, MiB, 0, 1, &comp), FERRY_INPROGRESS);
    wait_comp(&t, &comp);
    FY_ASSERT_OK(comp.status);
    expect_report(&t, 1, 1, 1, 1); /* the revoked one dropped */
    tx_close(&t);
}

/* ---- deaths ---- */

/* The receiver dies inside its handler, the sender's data in hand: the send fails. */
static void receiver_killed(void)
{
    tx_t t;
    tx_open(&t, 1, (rx_t){.expected = 1, .die_at = 1}, 0);
    tc_put_u64(t.c.wfd, 1);
    tcomp_t comp;
    FY_ASSERT_STATUS(send_k(&t, t.seg, 2 * MiB, 0, 1, &comp), FERRY_INPROGRESS);
    wait_comp(&t, &comp);
    FY_ASSERT_MSG(comp.status != FERRY_OK, "a send to a receiver that died completed OK");
    FY_ASSERT_EQ(fyproc_wait(&t.c, TP_PEER_TIMEOUT * 1000), 9);
    fyproc_release(&t.c);
    tx_close(&t);
}

/* A sending peer that sends message 0 (2 MiB from its segment), tells the parent its
 * segment's inode, and then progresses until it is killed. */
static void sender_main(int rfd, int wfd, void *arg)
{
    (void)arg;
    tx_t t;
    memset(&t, 0, sizeof(t));
    tp_open(&t.p, whole_cb, NULL);
    tc_read(rfd, &t.addr, sizeof(t.addr));
    t.ep = tp_ep(&t.p, &t.addr);
    FY_ASSERT_OK(fy_shmem_alloc(SEG_SIZE, "ferry-test-mapped", (void **)&t.seg));
    fy_shmem_ref_t ref;
    size_t off;
    FY_ASSERT(fy_shmem_find(t.seg, 1, &ref, &off));
    tcomp_t comp;
    FY_ASSERT_STATUS(send_k(&t, t.seg + 64, 2 * MiB, 0, 1, &comp), FERRY_INPROGRESS);
    tc_put_u64(wfd, ref.ino);
    for (;;)
        tp_progress(&t.p);
}

/* The sender is killed while the receiver's handler reads its data: the data is whole (the
 * mapping holds the memory), and the segment is freed once the receiver lets go of it. */
static void sender_killed(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "50ms", 1);
    tx_t t; /* (only its receiver and address) */
    rx = (rx_t){.expected = 1, .kill_sender_at = 1};
    t.c = tc_spawn(rx_main, (void *)1);
    tc_read(t.c.rfd, &t.addr, sizeof(t.addr));
    tchild_t s = tc_spawn(sender_main, NULL);
    tc_write(s.wfd, &t.addr, sizeof(t.addr));
    uint64_t ino = tc_get_u64(s.rfd); /* its message is in the receiver's ring */
    tc_put_u64(t.c.wfd, (uint64_t)s.pid);
    tc_put_u64(t.c.wfd, 1); /* go */
    expect_report(&t, 1, 1, 0, 1);
    FY_ASSERT_EQ(fyproc_wait(&s, TP_PEER_TIMEOUT * 1000), 128 + SIGKILL);
    fyproc_release(&s);
    FY_ASSERT_EQ(segment_holders(ino), 0);
}

/* ---- malformed descriptors ---- */

static void raw_mapped(tx_t *t, const shm_mapped_desc_t *d)
{
    shm_ep_t *ep = (shm_ep_t *)t->ep;
    uint32_t tk;
    int wake = 0;
    shm_cell_t *c;
    while ((c = shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &tk,
                               &wake)) == NULL)
        tp_progress(&t->p);
    char *b = ep->bufs + (size_t)(tk & ep->mask) * ep->bcopy_size;
    memcpy(b, d, sizeof(*d));
    memset(b + sizeof(*d), 0, 16);
    shm_cell_hdr(c, SHM_CELL_MAPPED, 0, 0, (uint32_t)(sizeof(*d) + 16));
    shm_ring_publish(c, ep->owner, tk);
    if (wake)
        fy_shm_peer_wake(tp_shm(&t->p), ep->peer);
}

static void malformed(void)
{
    setenv("FERRY_SHM_OUTBOX_IDLE", "50ms", 1);
    tx_t t;
    tx_open(&t, 1, (rx_t){.expected = 1}, 0);
    /* (a generation no send of ours reaches: a crafted cell never takes a live send's slot) */
    shm_mapped_desc_t good = {.head_len = 16, .gen = 1ull << 61, .seg_off = 0, .data_len = 64};
    good.reply = tp_shm(&t.p)->addr;
    size_t off;
    FY_ASSERT(fy_shmem_find(t.seg, 1, &good.seg, &off));
    shm_mapped_desc_t bad[5];
    for (int i = 0; i < 5; i++)
        bad[i] = good;
    bad[0].seg_off = good.seg.size; /* past the segment's end */
    bad[1].seg_off = 8;
    bad[1].data_len = UINT64_MAX - 4; /* wraps */
    bad[2].seg.pid = 1;               /* not the sender's */
    bad[3].head_len = 100000;         /* more head than the cell holds */
    bad[4].seg.ino = 0;               /* no such segment: refused (an answer), not malformed */
    for (int i = 0; i < 5; i++)
        raw_mapped(&t, &bad[i]);
    tc_put_u64(t.c.wfd, 1);
    tcomp_t comp;
    FY_ASSERT_STATUS(send_k(&t, t.seg, 32 * KiB, 0, 1, &comp), FERRY_INPROGRESS);
    wait_comp(&t, &comp);
    FY_ASSERT_OK(comp.status);
    expect_report(&t, 1, 1, 4, 1);
    tx_close(&t);
}

FYTEST_MAIN(FYTEST_CASE(in_place), FYTEST_CASE(contiguous), FYTEST_CASE(revoked),
            FYTEST_CASE(receiver_killed), FYTEST_CASE(sender_killed), FYTEST_CASE(malformed))
