/*
 * hotel.c - the retransmission hotel as a hashed timing wheel.
 *
 * Every segment a reliable transport sends is checked in, and nearly every one is checked out
 * again by its ACK long before it expires, so check-in and check-out must be O(1) and cheap:
 * a room goes on the tail of the list of slot (expiry tick mod nslots) and comes off with an
 * unlink.  A stay longer than the wheel's span simply stays in its slot and is skipped (its
 * expiry tick is later than the tick being processed) until the wheel comes round to its
 * tick: no cascading, no overflow list.  Within a slot rooms sit in check-in order, which is
 * the order promised for rooms due in the same tick.
 *
 * fy_hotel_run() processes the ticks from current_tick up to the tick of now.  A room fires
 * only when now has reached its exact expiry (never early); ticks wholly in the past are
 * finished and current_tick moves past them, the tick of now is kept since rooms later in it
 * are not due yet.  To make callbacks safe, a slot's list is first moved to a private list on
 * the stack: the callback may check the fired room (or any other) in or out; rooms it checks
 * in land in the real slots, so a room re-checked in for the tick being processed waits for
 * the next run (no endless loop on a zero stay), while one that lands in a later tick this run
 * still has to process fires in this run if it is due by now.
 *
 * Why a bitmap: a worker asleep for 250 ms walked 12,500 empty 20 us ticks at its wake-up,
 * and one that knew only "some slot within 20 ms holds a room" could not sleep longer than
 * that.  A bit per slot (8192 slots: 128 words) is set at check-in - one OR beside the list
 * insert - and cleared lazily, when a run or a scan finds the slot's list empty, so check-out
 * (an unlink, once per ACKed segment) stays as it was.  A run jumps from one occupied slot to
 * the next; after an idle period longer than a turn of the wheel it first jumps to the
 * earliest room's tick (every room's tick is at least current_tick, so a slot at distance d
 * holds rooms of tick current_tick + d or of later turns), and does so again for each turn
 * it still has to cover.  The next-run query walks the occupied slots in wheel order and stops
 * at the first room of the current turn: exact, however far ahead the room is.
 */
#include <stdlib.h>

#include "util/hotel.h"
#include "util/status.h"

/* Move all of src's elements to the tail of dst; src becomes empty. */
static void list_splice_tail(fy_list_t *dst, fy_list_t *src)
{
    if (fy_list_is_empty(src))
        return;
    fy_list_t *first = src->next, *last = src->prev;
    first->prev = dst->prev;
    dst->prev->next = first;
    last->next = dst;
    dst->prev = last;
    fy_list_init(src);
}

/* Move all of src's elements to the head of dst; src becomes empty. */
static void list_splice_head(fy_list_t *dst, fy_list_t *src)
{
    if (fy_list_is_empty(src))
        return;
    fy_list_t *first = src->next, *last = src->prev;
    last->next = dst->next;
    dst->next->prev = last;
    first->prev = dst;
    dst->next = first;
    fy_list_init(src);
}

static inline uint64_t room_tick(const fy_hotel_t *h, const fy_hotel_room_t *r)
{
    return r->expiry / h->tick_ns;
}

ferry_status_t fy_hotel_init(fy_hotel_t *h, uint64_t tick_ns, unsigned nslots,
                             fy_hotel_expire_cb_t cb, void *arg, uint64_t now_ns)
{
    if (h == NULL || tick_ns == 0 || nslots == 0 || nslots > (1u << 30) || cb == NULL)
        return FERRY_ERR_INVALID_PARAM;
    unsigned n = 1;
    while (n < nslots)
        n <<= 1;
    h->slots = malloc(n * sizeof(*h->slots));
    h->occ = calloc((n + 63) / 64, sizeof(*h->occ));
    if (h->slots == NULL || h->occ == NULL) {
        free(h->slots);
        free(h->occ);
        h->slots = NULL;
        h->occ = NULL;
        return FERRY_ERR_NO_MEMORY;
    }
    for (unsigned i = 0; i < n; i++)
        fy_list_init(&h->slots[i]);
    h->nslots = n;
    h->wbits = n < 64 ? n : 64;
    h->tick_ns = tick_ns;
    h->current_tick = now_ns / tick_ns;
    h->behind = UINT64_MAX;
    h->occupancy = 0;
    h->expire_cb = cb;
    h->arg = arg;
    return FERRY_OK;
}

void fy_hotel_destroy(fy_hotel_t *h)
{
    if (h == NULL || h->slots == NULL)
        return;
    /* Leave the guests' rooms self-linked, so "is it checked in?" stays answerable. */
    for (unsigned i = 0; i < h->nslots; i++)
        while (fy_list_pop_head(&h->slots[i]) != NULL) {
        }
    free(h->slots);
    free(h->occ);
    h->slots = NULL;
    h->occ = NULL;
    h->occupancy = 0;
}

void fy_hotel_checkin(fy_hotel_t *h, fy_hotel_room_t *r, uint64_t stay_ns, uint64_t now_ns)
{
    if (fy_list_is_linked(&r->link))
        fy_hotel_checkout(h, r);
    r->expiry = stay_ns > UINT64_MAX - now_ns ? UINT64_MAX : now_ns + stay_ns;
    uint64_t tick = room_tick(h, r);
    /* Already due (or due in a tick already processed): the tick being processed takes it. */
    if (tick < h->current_tick) {
        tick = h->current_tick;
        h->behind = FY_MIN(h->behind, tick); /* (a run moving on must come back for it) */
    }
    unsigned slot = (unsigned)tick & (h->nslots - 1);
    fy_list_add_tail(&h->slots[slot], &r->link);
    h->occ[slot / 64] |= 1ull << (slot % 64);
    h->occupancy++;
}

void fy_hotel_checkout(fy_hotel_t *h, fy_hotel_room_t *r)
{
    if (!fy_list_is_linked(&r->link))
        return;
    fy_list_del(&r->link);
    h->occupancy--;
}

/* The distance from slot `from` to the next slot whose bit is set (itself included), going
 * round the wheel, if it is at most limit; nslots otherwise.  A bit may be stale (its slot
 * emptied by check-outs): the caller looks at the slot.  Reads the words up to limit only. */
static unsigned next_marked(const fy_hotel_t *h, unsigned from, uint64_t limit)
{
    unsigned mask = h->nslots - 1, d;
    if (limit > mask)
        limit = mask;
    if (h->nslots <= 64) { /* one word, maybe partly used */
        uint64_t word = h->occ[0], hi = word >> from;
        uint64_t lo = from == 0 ? 0 : word & ((1ull << from) - 1);
        if (hi != 0)
            d = (unsigned)__builtin_ctzll(hi);
        else if (lo != 0)
            d = h->nslots - from + (unsigned)__builtin_ctzll(lo);
        else
            return h->nslots;
        return d <= limit ? d : h->nslots;
    }
    /* Whole words; the first is read again last, for the slots below from. */
    unsigned nwords = h->nslots / 64, w = from / 64;
    uint64_t bits = h->occ[w] & (~0ull << (from % 64)), next = 64 - from % 64;
    for (;;) {
        if (bits != 0) {
            d = (w * 64 + (unsigned)__builtin_ctzll(bits) - from) & mask;
            return d <= limit ? d : h->nslots;
        }
        if (next > limit)
            return h->nslots;
        w = w + 1 == nwords ? 0 : w + 1;
        bits = h->occ[w];
        next += 64;
    }
}

static inline void unmark(fy_hotel_t *h, unsigned slot)
{
    h->occ[slot / 64] &= ~(1ull << (slot % 64));
}

/* The earliest tick at which some room is due, at least current_tick (occupancy must be
 * non-zero).  Every room's tick is at least current_tick, so one in the slot at distance d
 * is of tick current_tick + d (this turn) or later turns: the first slot in wheel order that
 * holds a room of this turn has the earliest; if none does, the least tick seen. */
static uint64_t hotel_first_tick(const fy_hotel_t *h)
{
    uint64_t first = UINT64_MAX;
    unsigned mask = h->nslots - 1, base = (unsigned)h->current_tick & mask, d = 0;
    while (d < h->nslots) {
        unsigned step = next_marked(h, (base + d) & mask, mask - d);
        if (step == h->nslots)
            break;
        d += step;
        if (d >= h->nslots)
            break;
        uint64_t turn = h->current_tick + d;
        const fy_list_t *e;
        fy_list_for_each(e, &h->slots[(base + d) & mask])
        {
            uint64_t t = room_tick(h, fy_container_of(e, fy_hotel_room_t, link));
            if (t <= turn)
                return FY_MAX(t, h->current_tick);
            if (t < first)
                first = t;
        }
        d++;
    }
    return first;
}

/* Fire the due rooms of one tick's slot; returns how many fired. */
static unsigned hotel_run_tick(fy_hotel_t *h, uint64_t tick, uint64_t now_ns)
{
    fy_list_t *slot = &h->slots[tick & (h->nslots - 1)];
    fy_list_t pending, keep;
    unsigned fired = 0;

    if (fy_list_is_empty(slot)) {
        unmark(h, (unsigned)tick & (h->nslots - 1));
        return 0;
    }
    fy_list_init(&pending);
    fy_list_init(&keep);
    list_splice_tail(&pending, slot);
    fy_list_t *e;
    /* Take the head each time: the callback may check out any room still pending. */
    while ((e = pending.next) != &pending) {
        fy_hotel_room_t *r = fy_container_of(e, fy_hotel_room_t, link);
        fy_list_del(e);
        /* A later round of this slot, or later in the current tick: not due yet. */
        if (room_tick(h, r) > tick || r->expiry > now_ns) {
            fy_list_add_tail(&keep, e);
            continue;
        }
        h->occupancy--;
        fired++;
        h->expire_cb(h, r, h->arg);
    }
    /* The kept rooms were checked in before anything the callbacks added: they go first. */
    list_splice_head(slot, &keep);
    if (fy_list_is_empty(slot))
        unmark(h, (unsigned)tick & (h->nslots - 1));
    return fired;
}

uint64_t fy_hotel_next_run(const fy_hotel_t *h, uint64_t now_ns)
{
    if (h->occupancy == 0)
        return UINT64_MAX;
    uint64_t first = hotel_first_tick(h);
    if (first == UINT64_MAX) /* (cannot be: occupancy counts the rooms in the slots) */
        return now_ns;
    return first >= UINT64_MAX / h->tick_ns - 1 ? UINT64_MAX
                                                : FY_MAX((first + 1) * h->tick_ns, now_ns);
}

unsigned fy_hotel_run_slow(fy_hotel_t *h, uint64_t now_ns)
{
    uint64_t now_tick = now_ns / h->tick_ns, rejump = 0;
    unsigned mask = h->nslots - 1, fired = 0;

    if (now_tick < h->current_tick)
        return 0;
    h->behind = UINT64_MAX;
    for (;;) {
        if (h->occupancy == 0) {
            h->current_tick = now_tick;
            break;
        }
        /* More than a turn still to cover: skip straight to the earliest room's tick, once
         * per turn (a turn visits every occupied slot). */
        if (now_tick - h->current_tick >= h->nslots && h->current_tick >= rejump) {
            uint64_t first = hotel_first_tick(h);
            if (first > h->current_tick)
                h->current_tick = FY_MIN(first, now_tick);
            rejump = h->current_tick + h->nslots;
        }
        uint64_t left = now_tick - h->current_tick;
        unsigned d = next_marked(h, (unsigned)h->current_tick & mask, left);
        if (d > left) { /* nothing marked up to now's tick */
            h->current_tick = now_tick;
            break;
        }
        uint64_t t = h->current_tick + d;
        h->current_tick = t; /* (a room the callbacks check in for an earlier tick lands here) */
        fired += hotel_run_tick(h, t, now_ns);
        if (t == now_tick)
            break;
        h->current_tick = t + 1;
    }
    /* A callback checked a room in for a tick this run had passed (a now older than the
     * run's): the next run starts there, so the room is neither lost for a turn nor fired
     * again in this run. */
    if (h->behind < h->current_tick)
        h->current_tick = h->behind;
    return fired;
}
