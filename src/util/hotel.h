/*
 * hotel.h - the retransmission hotel: O(1) check-in / check-out timers on a timing wheel.
 *
 * The name is the usnic design's: every sent segment "checks into the hotel" until it is
 * acknowledged (check-out) or its stay runs out (expiry: resend).  Rooms are intrusive
 * (embedded in the guest), so check-in never allocates.  The wheel has nslots slots of
 * tick_ns each; a stay longer than the wheel's span is kept in its slot and skipped until its
 * round comes.  Rooms expire in order of their expiry time up to one tick of granularity, and
 * rooms due in the same tick expire in check-in order.
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
    unsigned nslots; /* power of two */
    uint64_t tick_ns;
    uint64_t current_tick; /* the next tick to process */
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
/* When to run the hotel next, for a caller about to sleep: the end of the first tick from
 * the current one whose slot holds a room (rooms fire up to one tick late, as in a
 * polling loop), at least now_ns; now_ns + about max_ns when no slot within max_ns of now
 * holds one; UINT64_MAX when the hotel is empty.  Never later than a room's expiry, but it
 * may be earlier (a slot's room may be due a later turn of the wheel).  O(max_ns / tick). */
uint64_t fy_hotel_next_run(const fy_hotel_t *h, uint64_t now_ns, uint64_t max_ns);
/* Expire every room due at now_ns (expiry <= now_ns: never early); returns how many expired. */
unsigned fy_hotel_run(fy_hotel_t *h, uint64_t now_ns);
static inline size_t fy_hotel_occupancy(const fy_hotel_t *h)
{
    return h->occupancy;
}

#endif
