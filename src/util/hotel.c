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
 * still has to process fires in this run if it is due by now.  After a long idle period the
 * run jumps over ticks with nothing due instead of visiting each of them.
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
    if (h->slots == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (unsigned i = 0; i < n; i++)
        fy_list_init(&h->slots[i]);
    h->nslots = n;
    h->tick_ns = tick_ns;
    h->current_tick = now_ns / tick_ns;
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
    h->slots = NULL;
    h->occupancy = 0;
}

void fy_hotel_checkin(fy_hotel_t *h, fy_hotel_room_t *r, uint64_t stay_ns, uint64_t now_ns)
{
    if (fy_list_is_linked(&r->link))
        fy_hotel_checkout(h, r);
    r->expiry = stay_ns > UINT64_MAX - now_ns ? UINT64_MAX : now_ns + stay_ns;
    uint64_t tick = room_tick(h, r);
    /* Already due (or due in a tick already processed): the tick being processed takes it. */
    if (tick < h->current_tick)
        tick = h->current_tick;
    fy_list_add_tail(&h->slots[tick & (h->nslots - 1)], &r->link);
    h->occupancy++;
}

void fy_hotel_checkout(fy_hotel_t *h, fy_hotel_room_t *r)
{
    if (!fy_list_is_linked(&r->link))
        return;
    fy_list_del(&r->link);
    h->occupancy--;
}

/* The earliest tick at which some room is due (occupancy must be non-zero). */
static uint64_t hotel_first_tick(const fy_hotel_t *h)
{
    uint64_t first = UINT64_MAX;
    for (unsigned i = 0; i < h->nslots; i++) {
        const fy_list_t *e;
        fy_list_for_each(e, &h->slots[i])
        {
            uint64_t t = room_tick(h, fy_container_of(e, fy_hotel_room_t, link));
            if (t < first)
                first = t;
        }
    }
    return first;
}

/* Fire the due rooms of one tick's slot; returns how many fired. */
static unsigned hotel_run_tick(fy_hotel_t *h, uint64_t tick, uint64_t now_ns)
{
    fy_list_t *slot = &h->slots[tick & (h->nslots - 1)];
    fy_list_t pending, keep;
    unsigned fired = 0;

    if (fy_list_is_empty(slot))
        return 0;
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
    return fired;
}

uint64_t fy_hotel_next_run(const fy_hotel_t *h, uint64_t now_ns, uint64_t max_ns)
{
    uint64_t now_tick = now_ns / h->tick_ns;
    uint64_t span = FY_MIN(max_ns / h->tick_ns + 1, (uint64_t)h->nslots);
    if (h->occupancy == 0)
        return UINT64_MAX;
    /* Not run for longer than the scan would cover: whatever it holds may be due. */
    if (now_tick >= h->current_tick + span)
        return now_ns;
    for (uint64_t t = h->current_tick; t < now_tick + span; t++)
        if (!fy_list_is_empty(&h->slots[t & (h->nslots - 1)]))
            return FY_MAX((t + 1) * h->tick_ns, now_ns);
    return (now_tick + span) * h->tick_ns;
}

unsigned fy_hotel_run(fy_hotel_t *h, uint64_t now_ns)
{
    uint64_t now_tick = now_ns / h->tick_ns;
    unsigned fired = 0;

    if (now_tick < h->current_tick)
        return 0;
    if (h->occupancy == 0) {
        h->current_tick = now_tick;
        return 0;
    }
    /* Idle for more than a turn of the wheel: skip straight to the first tick with a room. */
    if (now_tick - h->current_tick >= h->nslots) {
        uint64_t first = hotel_first_tick(h);
        if (first > h->current_tick)
            h->current_tick = FY_MIN(first, now_tick);
    }
    for (;;) {
        uint64_t t = h->current_tick;
        fired += hotel_run_tick(h, t, now_ns);
        if (t == now_tick)
            break;
        h->current_tick = t + 1;
        if (h->occupancy == 0) {
            h->current_tick = now_tick;
            break;
        }
    }
    return fired;
}
