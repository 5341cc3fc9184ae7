/*
 * shm_obox.c - the outbox's slots: where a sender copies a message the receiver then reads
 * in place (shm.h, THE OUTBOX; the send itself is obox_send in shm_ep.c).
 *
 * The outbox is a region of our own segment that every peer maps.  Its slots are taken in a
 * queue, back at offset 0 when there is room (below) so that a stream rewrites the same
 * cache-warm bytes, and given back in order when each receiver marks its slot done (or
 * died).  Only the outbox's base is reserved at open; room for the largest messages is
 * reserved when one first needs it, and a message that finds no memory there is pulled
 * instead; that room is given back after OUTBOX_IDLE without use (fy_shm_obox_idle).  The
 * copies of the largest messages use streamed stores (copy_nt below).
 */
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tl/shm/shm.h"
#include "util/clock.h"
#include "util/log.h"

static inline shm_obox_slot_t *obox_slot(const shm_iface_t *iface, uint64_t off)
{
    return (shm_obox_slot_t *)(iface->obox + off);
}

/* Give back the slots at the head of the queue that their receivers are done with (or that
 * a dead receiver will never give back). */
void fy_shm_obox_reclaim(shm_iface_t *iface)
{
    while (iface->obox_count != 0) {
        const shm_obox_entry_t *e = &iface->obox_q[iface->obox_first];
        if (__atomic_load_n(&obox_slot(iface, e->off)->done, __ATOMIC_ACQUIRE) != e->gen &&
            e->peer->status == FERRY_OK)
            break;
        if (--e->peer->refs == 0 && e->peer->status != FERRY_OK)
            iface->pending_reap = 1;
        iface->obox_first = (iface->obox_first + 1) % SHM_OBOX_QMAX;
        iface->obox_count--;
    }
}

/*
 * Wait a little for the last slot to come back when it is the only one out.  A receiver that
 * polls gives a slot back within a microsecond or so of its announcement, and rewriting the
 * same bytes, still in our cache, copies a large message about a third faster than writing
 * cold ones (1 MiB: ~31 vs ~23 GB/s here).  The wait is bounded by a small share of the copy
 * (need / 256 ns: 4 us for 1 MiB), skipped for our own process (nobody else would give the
 * slot back) and, after a wait that went unanswered, for the next 64 messages.
 */
static void obox_wait_last(shm_iface_t *iface, uint64_t need)
{
    const shm_obox_entry_t *e = &iface->obox_q[iface->obox_first];
    if (need < SHM_OBOX_WAIT_MIN || e->peer->addr.pid == iface->addr.pid)
        return;
    if (iface->obox_nowait != 0) {
        iface->obox_nowait--;
        return;
    }
    const shm_obox_slot_t *sl = obox_slot(iface, e->off);
    uint64_t t0 = fy_time_ns(), budget = need >> 8;
    for (unsigned i = 1; __atomic_load_n(&sl->done, __ATOMIC_ACQUIRE) != e->gen; i++) {
        fy_cpu_relax();
        if ((i & 15) == 0 && fy_time_ns() - t0 > budget) {
            iface->obox_nowait = 64;
            return;
        }
    }
    fy_shm_obox_reclaim(iface);
}

/* Have the outbox's first `end` bytes reserved (shm.h: SHM_OBOX_BASE): 0 when the memory is
 * not there, and the outbox ends at what was reserved from then on (larger messages are
 * pulled). */
static int obox_reserve(shm_iface_t *iface, uint64_t end)
{
    if (FY_LIKELY(end <= iface->obox_reserved))
        return 1;
    uint64_t to = FY_MIN(FY_ALIGN_UP(end, (uint64_t)SHM_OBOX_RESERVE), iface->obox_size);
    ferry_status_t st = fy_shmem_reserve(iface->seg, iface->obox_off + iface->obox_reserved,
                                         to - iface->obox_reserved);
    if (st == FERRY_OK) {
        iface->obox_reserved = to;
        return 1;
    }
    fy_info("shm: cannot reserve %llu bytes of outbox (%s): it stays at %llu bytes, larger "
            "messages are pulled",
            (unsigned long long)to, ferry_status_string(st),
            (unsigned long long)iface->obox_reserved);
    iface->obox_size = iface->obox_reserved;
    iface->obox_max = FY_MIN(iface->obox_max, iface->obox_size);
    return 0;
}

/*
 * Take a slot of `need` bytes (its header included, a multiple of 64) for a message to peer:
 * its queue entry, or NULL when the outbox is full.  Offset 0 when nothing is out, and back
 * to it once the room there is ample (below), so a stream keeps rewriting the same few
 * (cache-warm) bytes.
 *
 * Except, with `rotate`, a slot of up to SHM_OBOX_ROTATE_MAX taken when nothing is out, as in
 * a ping-pong: it follows the last one, round the first SHM_OBOX_ROTATE bytes.  A
 * receiver that reads its messages (every tagged one: it copies the data out; the sender says
 * so with FY_TL_COMP_F_RX_COPIES) holds the slot's lines when the next message comes, and
 * rewriting them at once costs the sender a round of invalidations: a tagged 8114-byte
 * message took the sender 1,900-10,900 cycles to copy into the same slot against 1,350-3,850
 * into the next one (same minutes, load 7-9), and one-way latency went 1.42-6.16 -> 1.25-3.52
 * us.  Where the receiver may not read (an AM handler given the data in place: ferry_perf's
 * am_lat reads none of it) the same slot is the faster one, its lines still ours: AM 8122 B
 * 0.51 rotated vs 0.38 us in place, 16 KiB 1.05 vs 0.58 (medians of 9 interleaved runs, load
 * 7-9), so an AM is not rotated.  Up to 36 KiB only at first; past it the same slot cost a
 * tagged message 2-3x (tag_lat one-way p50, everything eager, medians of 3 interleaved runs:
 * 48 KiB 7.6 -> 2.8 us rotated, 64 KiB 9.9 -> 3.5, 128 KiB 17.5 -> 6.7, 256 KiB 27.7 -> 12.2,
 * 512 KiB 32.5 -> 22.5).  A larger round (4 or 8 MiB, or 4 slots of any size) was slower at
 * every size: the round's 2 MiB stay in the last-level cache.
 */
shm_obox_entry_t *fy_shm_obox_alloc(shm_iface_t *iface, uint64_t need, shm_peer_t *peer, int rotate)
{
    fy_shm_obox_reclaim(iface);
    if (iface->obox_count == 1)
        obox_wait_last(iface, need);
    /* Nothing outstanding: start over at the beginning, where the bytes are still in our
     * cache; except a small slot, which moves on (below). */
    uint64_t start = 0;
    uint64_t limit = need <= SHM_OBOX_SMALL ? iface->obox_base
                     : need <= SHM_OBOX_MID ? FY_MIN(iface->obox_size, (uint64_t)SHM_OBOX_MID_END)
                                            : iface->obox_size;
    if (rotate && iface->obox_count == 0 && need <= SHM_OBOX_ROTATE_MAX &&
        iface->obox_next + need <= FY_MIN((uint64_t)SHM_OBOX_ROTATE, limit))
        start = iface->obox_next;
    if (iface->obox_count == SHM_OBOX_QMAX)
        return NULL;
    if (iface->obox_count != 0) {
        const shm_obox_entry_t *first = &iface->obox_q[iface->obox_first];
        const shm_obox_entry_t *last =
            &iface->obox_q[(iface->obox_first + iface->obox_count - 1) % SHM_OBOX_QMAX];
        uint64_t end = last->off + last->size;
        if (end > first->off) { /* in use: [first, end); room after end, or before first */
            /* Back to the start once the room there holds this slot and twice what is in
             * flight, or a quarter of the base if that is more, not as soon as one slot
             * fits: after a wrap every slot must fit between the last one and `first`,
             * which moves only as fast as the receiver gives slots back, and a stream with
             * two slots out found the outbox "full" with megabytes free after `end` (tag_bw
             * 8114 B: 46,610 of 220,037 messages pulled instead). */
            uint64_t want = need + FY_MAX(2 * (end - first->off), iface->obox_base / 4);
            if (end + need <= limit && first->off < want)
                start = end;
            else if (need <= first->off)
                start = 0;
            else
                return NULL;
        } else if (end + need <= first->off) { /* wrapped: in use [first, size) + [0, end) */
            start = end;
        } else {
            return NULL;
        }
    }
    if (start + need > limit || !obox_reserve(iface, start + need))
        return NULL;
    if (start + need > iface->obox_base)
        iface->obox_big_ns = fy_time_ns(); /* (a message above 2 MiB: the call costs nothing) */
    shm_obox_entry_t *e = &iface->obox_q[(iface->obox_first + iface->obox_count) % SHM_OBOX_QMAX];
    e->off = start;
    iface->obox_next = start + need;
    e->size = need;
    e->gen = ++iface->obox_gen;
    e->peer = peer;
    peer->refs++;
    iface->obox_count++;
    /* Stale bytes must never read as this generation's `done`. */
    __atomic_store_n(&obox_slot(iface, start)->done, 0, __ATOMIC_RELAXED);
    return e;
}

/*
 * Give the outbox beyond its base back once no slot has reached there for OUTBOX_IDLE: the
 * largest messages may have grown the reserved outbox to OUTBOX_SIZE (160 MiB by default), and
 * a process that sent a few of them once should not hold that for the rest of its life.  The
 * memory is released only while every slot still out lies in the base, so no receiver reads
 * a released page; the next large message reserves it again (posix_fallocate, then its first
 * touches fault the pages in: a few ms for 64 MiB, against a copy of 5 or more).
 */
void fy_shm_obox_idle(shm_iface_t *iface, uint64_t now)
{
    if (FY_LIKELY(iface->obox_reserved <= iface->obox_base) ||
        now - iface->obox_big_ns < iface->md->opts.obox_idle_ns)
        return;
    fy_shm_obox_reclaim(iface);
    for (unsigned i = 0; i < iface->obox_count; i++) {
        const shm_obox_entry_t *e = &iface->obox_q[(iface->obox_first + i) % SHM_OBOX_QMAX];
        if (e->off + e->size > iface->obox_base)
            return; /* a receiver still reads there */
    }
    ferry_status_t st = fy_shmem_release(iface->seg, iface->obox_off + iface->obox_base,
                                         iface->obox_reserved - iface->obox_base);
    if (st != FERRY_OK) {
        fy_info("shm: cannot give back %llu bytes of outbox (%s): kept",
                (unsigned long long)(iface->obox_reserved - iface->obox_base),
                ferry_status_string(st));
        iface->obox_big_ns = now; /* try again after another idle time */
        return;
    }
    iface->obox_reserved = iface->obox_base;
    if (iface->obox_next > iface->obox_base)
        iface->obox_next = 0;
    iface->stats.obox_shrunk++;
}

/*
 * A worker that sleeps on its event fd runs no liveness check, and one that sent (or pulled) a
 * few large messages and then waits for events would hold the grown outbox (or the large
 * receive buffer, shm_rx.c) for as long as it sleeps.  So before it sleeps, while either is
 * held, a timerfd in the event fd's set (made on first need) is set to when the first falls
 * due: the worker wakes, finds nothing, arms again, and that arm's liveness check gives the
 * memory back.  Without a timerfd (it could not be made) the memory is given back at the
 * first check after the worker wakes for other reasons.
 */
void fy_shm_obox_arm(shm_iface_t *iface)
{
    if (iface->obox_timer >= 0) {
        uint64_t expirations;
        while (read(iface->obox_timer, &expirations, sizeof(expirations)) > 0) {
        }
    }
    uint64_t idle = iface->md->opts.obox_idle_ns;
    int grown = iface->obox_reserved > iface->obox_base;
    if (FY_LIKELY(!grown && iface->rxbuf_size <= SHM_OBOX_BASE) || idle == UINT64_MAX)
        return;
    if (iface->obox_timer < 0) {
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (fd < 0 || epoll_ctl(iface->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            if (fd >= 0)
                close(fd);
            return;
        }
        iface->obox_timer = fd;
    }
    /* Past due and still grown: a receiver holds a slot out there; look again an idle time
     * later (at least 10 ms apart), not in a loop of wake-ups. */
    uint64_t now = fy_time_ns();
    uint64_t due =
        FY_MIN(grown ? iface->obox_big_ns + idle : UINT64_MAX, fy_shm_rx_idle(iface, now));
    if (due == UINT64_MAX)
        return; /* the receive buffer just went back and the outbox is not grown */
    uint64_t in = due > now ? due - now : FY_MAX(idle, (uint64_t)10000000);
    struct itimerspec t = {
        .it_value = {(time_t)(in / FY_NSEC_PER_SEC), (long)(in % FY_NSEC_PER_SEC)}};
    (void)timerfd_settime(iface->obox_timer, 0, &t, NULL);
}

/*
 * Non-temporal stores for the copies of the largest messages.  A message of SHM_NT_MIN bytes
 * or more and its slot are a working set of at least twice that, more than this host's share
 * of the last-level cache, so the destination's lines come from memory either way: a plain
 * copy first reads each of them (read-for-ownership) and later writes it back, streaming
 * stores only write.  Below it the slot is rewritten while still cached, and plain copies win
 * (1 MiB: ~38 vs ~22 GB/s here).  16 MiB: 1.1-1.5 GB/s plain vs 1.8-3.1 streamed per core
 * under a loaded memory bus (bench/RESULTS.md).
 */
#define SHM_NT_MIN ((size_t)8 << 20)

static void copy_nt(char *d, const char *s, size_t n)
{
#if defined(__SSE2__)
    size_t head = FY_MIN((size_t)(-(uintptr_t)d & 63), n); /* to a cache line boundary */
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    _mm_sfence(); /* the streamed stores are seen before the cell that announces them */
    memcpy(d + body, s + body, n - body);
#else
    memcpy(d, s, n);
#endif
}

/* Gather the message's pieces into an outbox slot: streamed when the message is large. */
void fy_shm_obox_gather(char *dst, const struct iovec *iov, size_t iovcnt, size_t total)
{
    if (total < SHM_NT_MIN) {
        shm_iov_gather(dst, iov, iovcnt);
        return;
    }
    for (size_t i = 0; i < iovcnt; i++) {
        copy_nt(dst, iov[i].iov_base, iov[i].iov_len);
        dst += iov[i].iov_len;
    }
}
