/*
 * hotel.h - the retransmission hotel: O(1) check-in / check-out timers on a timing wheel.
 *
 * The name is the usnic design's: every sent segment "checks into the hotel" until it is
 * acknowledged (check-out) or its stay runs out (expiry: resend).  Rooms are intrusive
 * (embedded in the guest), so check-in never allocates.  The wheel has nslots slots of
 * tick_ns each; a stay longer than the wheel's span is kept in its slot and skipped until its
 * round comes.  Rooms expire in order of their expiry time up to one tick of granularity, and
 * rooms due in the same tick expire in check-in order.  A bitmap of the slots that may hold a
 * room lets a run and the next-run query skip empty stretches: their cost follows the rooms
 * and the occupied slots, not the ticks elapsed.
 */
#ifndef FY_UTIL_HOTEL_H
#define FY_UTIL_HOTEL_H

#include <stdint.h>

#include "ferry.h"
#include "util/list.h"

typedef struct fy_hotel_room {
    fy_list_t link;  /* self-linked when not checked in */
    uint64_t expiry; /* absolute, ns */
} fy_hotel_room_t;

struct fy_hotel;
/* Called for each expired room, already checked out; it may check the room (or any other) in
 * or out.  A room checked in from the callback fires again in the same fy_hotel_run() only if
 * it lands in a later tick that run still has to process and is due by its now; one landing in
 * the tick being processed (e.g. a zero stay) waits for the next run. */
typedef void (*fy_hotel_expire_cb_t)(struct fy_hotel *hotel, fy_hotel_room_t *room, void *arg);

typedef struct fy_hotel {
    fy_list_t *slots;
    uint64_t *occ;   /* bit per slot: set at check-in, cleared when a run finds it empty */
    unsigned nslots; /* power of two */
    unsigned wbits;  /* slots per word of occ: min(nslots, 64) */
    uint64_t tick_ns;
    uint64_t current_tick; /* the next tick to process */
    uint64_t behind;       /* a run's check-ins for a tick it had passed: it goes back */
    size_t occupancy;
    fy_hotel_expire_cb_t expire_cb;
    void *arg;
} fy_hotel_t;

ferry_status_t fy_hotel_init(fy_hotel_t *h, uint64_t tick_ns, unsigned nslots,
                             fy_hotel_expire_cb_t cb, void *arg, uint64_t now_ns);
void fy_hotel_destroy(fy_hotel_t *h);
static inline void fy_hotel_room_init(fy_hotel_room_t *r)
{
    fy_list_init(&r->link);
}
static inline int fy_hotel_is_checked_in(const fy_hotel_room_t *r)
{
    return fy_list_is_linked(&r->link);
}
/* Check in for stay_ns from now (re-check-in of a room moves it). */
void fy_hotel_checkin(fy_hotel_t *h, fy_hotel_room_t *r, uint64_t stay_ns, uint64_t now_ns);
/* Check out before expiry (no-op if not checked in). */
void fy_hotel_checkout(fy_hotel_t *h, fy_hotel_room_t *r);
/* When to run the hotel next, for a caller about to sleep: the end of the tick of the
 * earliest room (rooms fire up to one tick late, as in a polling loop), at least now_ns;
 * UINT64_MAX when the hotel is empty.  Exact: never later than that room's expiry, and not
 * earlier than its tick, however far ahead it is.  Cost: the occupied slots up to the first
 * one holding a room of the wheel's current turn, and their rooms (one word of the bitmap
 * covers 64 empty slots). */
uint64_t fy_hotel_next_run(const fy_hotel_t *h, uint64_t now_ns);
/* Expire every room due at now_ns (expiry <= now_ns: never early); returns how many expired.
 * Cost: the rooms that fire and the occupied slots between the last run and now (empty
 * stretches skipped through the bitmap); after more than a turn of the wheel, per turn that
 * holds a due room, one look at every occupied slot. */
unsigned fy_hotel_run_slow(fy_hotel_t *h, uint64_t now_ns);
static inline unsigned fy_hotel_run(fy_hotel_t *h, uint64_t now_ns)
{
    /* The common case of a busy-polling worker, inline: a run a tick or a few after the
     * last, whose ticks' slots are all unmarked (and in one word of the bitmap). */
    uint64_t now_tick = now_ns / h->tick_ns, left = now_tick - h->current_tick;
    unsigned slot = (unsigned)h->current_tick & (h->nslots - 1), bit = slot % 64;
    if (now_tick >= h->current_tick && left < h->wbits - bit) {
        uint64_t w = h->occ[slot / 64] >> bit;
        if (left < 63)
            w &= (2ull << left) - 1;
        if (w == 0) {
            h->current_tick = now_tick;
            return 0;
        }
    }
    return fy_hotel_run_slow(h, now_ns);
}
static inline size_t fy_hotel_occupancy(const fy_hotel_t *h)
{
    return h->occupancy;
}

#endif
