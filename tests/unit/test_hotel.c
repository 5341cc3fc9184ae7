/*
 * test_hotel.c - the timing-wheel hotel: rooms fire in expiry order (same tick: check-in
 * order), never early and at the first run that reaches their expiry; checked-out rooms never
 * fire; stays far beyond the wheel's span; re-check-in from the expiry callback; a hundred
 * thousand rooms through one hotel; the next-run query; long sleeps with a few rooms far apart.
 */
#include <stdint.h>
#include <stdlib.h>

#include "fytest.h"
#include "fytest_util.h"
#include "util/hotel.h"

#define TICK 1000ull
#define T0   1000000000ull

typedef struct guest {
    fy_hotel_room_t room;
    int index; /* check-in order */
    int fired; /* times the callback saw it */
    uint64_t expiry_at_checkin;
} guest_t;

/* What the callbacks saw, in order. */
typedef struct log_state {
    guest_t **order;
    uint64_t *fired_at;
    unsigned *run_id;
    size_t n, cap;
    uint64_t now; /* the now of the current run */
    unsigned run; /* the current run's number */
} log_state_t;

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rng(void)
{
    return fy_xorshift64(&rng_state);
}

static void log_init_state(log_state_t *s, size_t cap)
{
    s->order = calloc(cap, sizeof(*s->order));
    s->fired_at = calloc(cap, sizeof(*s->fired_at));
    s->run_id = calloc(cap, sizeof(*s->run_id));
    FY_ASSERT(s->order != NULL && s->fired_at != NULL && s->run_id != NULL);
    s->n = 0;
    s->cap = cap;
    s->run = 0;
}

static void log_free_state(log_state_t *s)
{
    free(s->order);
    free(s->fired_at);
    free(s->run_id);
}

static void record_cb(fy_hotel_t *h, fy_hotel_room_t *room, void *arg)
{
    log_state_t *s = arg;
    guest_t *g = fy_container_of(room, guest_t, room);
    FY_ASSERT(!fy_hotel_is_checked_in(room)); /* already checked out */
    FY_ASSERT_LT(s->n, s->cap);
    s->order[s->n] = g;
    s->fired_at[s->n] = s->now;
    s->run_id[s->n] = s->run;
    s->n++;
    g->fired++;
}

static unsigned run_at(fy_hotel_t *h, log_state_t *s, uint64_t now)
{
    s->now = now;
    s->run++;
    return fy_hotel_run(h, now);
}

/* Every fire: not early, at the first run that reached the expiry, in expiry / check-in order. */
static void check_log(const log_state_t *s, const uint64_t *run_now, uint64_t tick)
{
    for (size_t i = 0; i < s->n; i++) {
        const guest_t *g = s->order[i];
        uint64_t exp = g->room.expiry;
        FY_ASSERT_MSG(s->fired_at[i] >= exp, "guest %d fired early: at %" PRIu64 ", due %" PRIu64,
                      g->index, s->fired_at[i], exp);
        unsigned r = s->run_id[i];
        FY_ASSERT_MSG(r == 1 || run_now[r - 1] < exp,
                      "guest %d (due %" PRIu64 ") missed the run at %" PRIu64, g->index, exp,
                      run_now[r - 1]);
        if (i > 0) {
            const guest_t *p = s->order[i - 1];
            uint64_t pt = p->room.expiry / tick, gt = exp / tick;
            FY_ASSERT_MSG(pt <= gt,
                          "guest %d (tick %" PRIu64 ") fired after guest %d (tick %" PRIu64 ")",
                          g->index, gt, p->index, pt);
            if (pt == gt && s->run_id[i - 1] == r)
                FY_ASSERT_MSG(p->index < g->index,
                              "same tick: guest %d checked in after %d but fired first", p->index,
                              g->index);
        }
    }
}

static void expiry_order(void)
{
    enum { N = 3000 };
    static guest_t g[N];
    static uint64_t run_now[200000];
    log_state_t s;
    fy_hotel_t h;
    log_init_state(&s, N);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 64, record_cb, &s, T0));
    for (int i = 0; i < N; i++) {
        fy_hotel_room_init(&g[i].room);
        g[i].index = i;
        /* Up to three turns of the 64-tick wheel, many rooms sharing a tick. */
        uint64_t stay = rng() % (3 * 64 * TICK);
        fy_hotel_checkin(&h, &g[i].room, stay, T0);
        FY_ASSERT(fy_hotel_is_checked_in(&g[i].room));
        FY_ASSERT_U64_EQ(g[i].room.expiry, T0 + stay);
    }
    FY_ASSERT_EQ(fy_hotel_occupancy(&h), N);
    uint64_t now = T0;
    run_now[0] = T0;
    while (fy_hotel_occupancy(&h) > 0) {
        /* Steps from a fraction of a tick to several ticks. */
        now += 1 + rng() % (5 * TICK);
        FY_ASSERT_LT(s.run + 1, 200000);
        run_at(&h, &s, now);
        run_now[s.run] = now;
    }
    FY_ASSERT_EQ(s.n, N);
    for (int i = 0; i < N; i++)
        FY_ASSERT_EQ(g[i].fired, 1);
    check_log(&s, run_now, TICK);
    fy_hotel_destroy(&h);
    log_free_state(&s);
}

static void checkout_before_expiry(void)
{
    enum { N = 2000 };
    static guest_t g[N];
    log_state_t s;
    fy_hotel_t h;
    log_init_state(&s, N);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 32, record_cb, &s, T0));
    for (int i = 0; i < N; i++) {
        fy_hotel_room_init(&g[i].room);
        g[i].index = i;
        fy_hotel_checkin(&h, &g[i].room, TICK + rng() % (100 * TICK), T0);
    }
    /* Check out every even room at some point before its expiry, while time moves. */
    uint64_t now = T0;
    size_t expected = N;
    while (fy_hotel_occupancy(&h) > 0) {
        now += TICK / 2;
        for (int i = 0; i < N; i += 2) {
            if (fy_hotel_is_checked_in(&g[i].room) &&
                (g[i].room.expiry <= now + TICK || rng() % 50 == 0)) {
                FY_ASSERT_GT(g[i].room.expiry, now - TICK / 2);
                fy_hotel_checkout(&h, &g[i].room);
                FY_ASSERT(!fy_hotel_is_checked_in(&g[i].room));
                expected--;
            }
        }
        run_at(&h, &s, now);
    }
    FY_ASSERT_EQ(expected, N / 2);
    FY_ASSERT_EQ(s.n, N / 2);
    for (int i = 0; i < N; i++)
        FY_ASSERT_MSG(g[i].fired == (i % 2), "room %d fired %d times", i, g[i].fired);
    /* Check-out of a room that is not checked in is a no-op. */
    fy_hotel_checkout(&h, &g[0].room);
    FY_ASSERT_EQ(fy_hotel_occupancy(&h), 0);
    fy_hotel_destroy(&h);
    log_free_state(&s);
}

/* Checking in a checked-in room moves it: it fires once, at the new time. */
static void recheckin_moves(void)
{
    guest_t a = {.index = 0};
    log_state_t s;
    fy_hotel_t h;
    log_init_state(&s, 4);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 16, record_cb, &s, T0));
    fy_hotel_room_init(&a.room);
    fy_hotel_checkin(&h, &a.room, 5 * TICK, T0);
    fy_hotel_checkin(&h, &a.room, 50 * TICK, T0);
    FY_ASSERT_EQ(fy_hotel_occupancy(&h), 1);
    FY_ASSERT_EQ(run_at(&h, &s, T0 + 10 * TICK), 0);
    FY_ASSERT_EQ(run_at(&h, &s, T0 + 50 * TICK - 1), 0);
    FY_ASSERT_EQ(run_at(&h, &s, T0 + 50 * TICK), 1);
    FY_ASSERT_EQ(a.fired, 1);
    fy_hotel_destroy(&h);
    log_free_state(&s);
}

/* Stays of up to 1000 turns of an 8-slot wheel. */
static void long_stays(void)
{
    enum { N = 500 };
    static guest_t g[N];
    static uint64_t run_now[100000];
    log_state_t s;
    fy_hotel_t h;
    const unsigned nslots = 8;

    /* Run often. */
    log_init_state(&s, N);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, nslots, record_cb, &s, T0));
    for (int i = 0; i < N; i++) {
        fy_hotel_room_init(&g[i].room);
        g[i].index = i;
        g[i].fired = 0;
        fy_hotel_checkin(&h, &g[i].room, rng() % (1000ull * nslots * TICK), T0);
    }
    uint64_t now = T0;
    run_now[0] = now;
    while (fy_hotel_occupancy(&h) > 0) {
        now += 7 * TICK / 3;
        run_at(&h, &s, now);
        FY_ASSERT_LT(s.run, 100000);
        run_now[s.run] = now;
    }
    FY_ASSERT_EQ(s.n, N);
    check_log(&s, run_now, TICK);
    fy_hotel_destroy(&h);
    log_free_state(&s);

    /* Then idle: one run long after all of them fires all, still in order. */
    log_init_state(&s, N + 1);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, nslots, record_cb, &s, T0));
    for (int i = 0; i < N; i++) {
        g[i].fired = 0;
        /* Dense: about three rooms per tick, so a tick processed out of order shows. */
        fy_hotel_checkin(&h, &g[i].room, TICK * nslots * 10 + rng() % (N / 3 * TICK), T0);
    }
    FY_ASSERT_EQ(run_at(&h, &s, T0 + TICK * nslots * 5), 0);
    run_now[1] = T0 + TICK * nslots * 5;
    FY_ASSERT_EQ(run_at(&h, &s, T0 + 2000ull * nslots * TICK), N);
    FY_ASSERT_EQ(s.n, N);
    FY_ASSERT_EQ(fy_hotel_occupancy(&h), 0);
    check_log(&s, run_now, TICK);

    /* A room checked in with a now far ahead of the last run still fires on time. */
    guest_t late = {.index = 0};
    fy_hotel_room_init(&late.room);
    uint64_t base = T0 + 5000ull * nslots * TICK;
    fy_hotel_checkin(&h, &late.room, 3 * TICK, base);
    FY_ASSERT_EQ(run_at(&h, &s, base + 2 * TICK), 0);
    FY_ASSERT_EQ(run_at(&h, &s, base + 3 * TICK), 1);
    FY_ASSERT_EQ(late.fired, 1);
    fy_hotel_destroy(&h);
    log_free_state(&s);
}

/* --- re-check-in from the callback -------------------------------------------------------- */

typedef struct recheck_state {
    uint64_t restay; /* stay of the re-check-in */
    int from_expiry; /* re-check-in relative to the room's expiry (else to run_now) */
    uint64_t run_now;
    int limit; /* re-check-ins left */
    int fired;
    guest_t *victim;   /* checked out by the first callback, if any */
    guest_t *newcomer; /* checked in by the first callback, if any, for newstay */
    uint64_t newstay;
} recheck_state_t;

static void recheck_cb(fy_hotel_t *h, fy_hotel_room_t *room, void *arg)
{
    recheck_state_t *s = arg;
    guest_t *g = fy_container_of(room, guest_t, room);
    g->fired++;
    s->fired++;
    if (s->victim != NULL) {
        fy_hotel_checkout(h, &s->victim->room);
        s->victim = NULL;
    }
    if (s->newcomer != NULL) {
        fy_hotel_checkin(h, &s->newcomer->room, s->newstay, s->run_now);
        s->newcomer = NULL;
    }
    if (s->limit > 0 && g->index == 0) {
        s->limit--;
        fy_hotel_checkin(h, room, s->restay, s->from_expiry ? room->expiry : s->run_now);
        FY_ASSERT(fy_hotel_is_checked_in(room));
    }
}

static void recheckin_from_callback(void)
{
    fy_hotel_t h;
    recheck_state_t s = {0};
    guest_t a = {.index = 0}, b = {.index = 1}, c = {.index = 2}, d = {.index = 3};

    /* Zero stay from the callback: safe, and not run again in the same pass. */
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 16, recheck_cb, &s, T0));
    fy_hotel_room_init(&a.room);
    fy_hotel_checkin(&h, &a.room, 0, T0);
    s.restay = 0;
    s.limit = 3;
    s.run_now = T0;
    FY_ASSERT_EQ(fy_hotel_run(&h, T0), 1);
    FY_ASSERT_EQ(a.fired, 1);
    FY_ASSERT(fy_hotel_is_checked_in(&a.room));
    FY_ASSERT_EQ(fy_hotel_occupancy(&h), 1);
    FY_ASSERT_EQ(fy_hotel_run(&h, T0), 1); /* due now: the next pass takes it */
    FY_ASSERT_EQ(fy_hotel_run(&h, T0), 1);
    FY_ASSERT_EQ(fy_hotel_run(&h, T0), 1); /* limit reached: not re-checked in */
    FY_ASSERT_EQ(fy_hotel_run(&h, T0), 0);
    FY_ASSERT_EQ(a.fired, 4);
    FY_ASSERT_EQ(fy_hotel_occupancy(&h), 0);

    /* A re-check-in that is due within this pass's span fires again in this pass, once per
     * due time: every 2 ticks from T0+1 tick, up to the run's now of T0+10 ticks. */
    a.fired = 0;
    s = (recheck_state_t){.restay = 2 * TICK, .from_expiry = 1, .limit = 100};
    fy_hotel_checkin(&h, &a.room, TICK, T0);
    FY_ASSERT_EQ(fy_hotel_run(&h, T0 + 10 * TICK), 5); /* T0 + 1, 3, 5, 7, 9 ticks */
    FY_ASSERT_EQ(a.fired, 5);
    FY_ASSERT(fy_hotel_is_checked_in(&a.room));
    FY_ASSERT_U64_EQ(a.room.expiry, T0 + 11 * TICK);
    FY_ASSERT_EQ(fy_hotel_run(&h, T0 + 11 * TICK), 1);
    fy_hotel_checkout(&h, &a.room);
    fy_hotel_destroy(&h);

    /* The callback checks out a room still pending in the same tick (it must not fire) and
     * checks in a new one: due at the pass's now, in a tick the pass has still to process,
     * it fires in this pass; due later, it waits. */
    for (int due_now = 1; due_now >= 0; due_now--) {
        s = (recheck_state_t){
            .victim = &c, .newcomer = &d, .run_now = T0 + 5 * TICK, .newstay = due_now ? 0 : TICK};
        FY_ASSERT_OK(fy_hotel_init(&h, TICK, 16, recheck_cb, &s, T0));
        a.fired = b.fired = c.fired = d.fired = 0;
        fy_hotel_room_init(&a.room);
        fy_hotel_room_init(&b.room);
        fy_hotel_room_init(&c.room);
        fy_hotel_room_init(&d.room);
        fy_hotel_checkin(&h, &b.room, 2 * TICK, T0);
        fy_hotel_checkin(&h, &c.room, 2 * TICK, T0);
        FY_ASSERT_EQ(fy_hotel_run(&h, T0 + 5 * TICK), due_now ? 2 : 1);
        FY_ASSERT_EQ(b.fired, 1);
        FY_ASSERT_EQ(c.fired, 0);
        FY_ASSERT(!fy_hotel_is_checked_in(&c.room));
        FY_ASSERT_EQ(d.fired, due_now);
        FY_ASSERT_EQ(fy_hotel_is_checked_in(&d.room), !due_now);
        if (!due_now) {
            FY_ASSERT_EQ(fy_hotel_run(&h, T0 + 6 * TICK - 1), 0);
            FY_ASSERT_EQ(fy_hotel_run(&h, T0 + 6 * TICK), 1);
            FY_ASSERT_EQ(d.fired, 1);
        }
        FY_ASSERT_EQ(fy_hotel_occupancy(&h), 0);
        if (due_now)
            fy_hotel_destroy(&h);
    }

    /* Destroy leaves rooms still checked in self-linked. */
    fy_hotel_checkin(&h, &a.room, 100 * TICK, T0 + 5 * TICK);
    fy_hotel_destroy(&h);
    FY_ASSERT(!fy_hotel_is_checked_in(&a.room));
}

/* Rooms left waiting in the tick being processed keep their place ahead of rooms the
 * callbacks check in to that tick: same-tick rooms fire in check-in order. */
typedef struct order_state {
    guest_t *fired[4];
    int n;
    guest_t *newcomer;
    uint64_t run_now;
} order_state_t;

static void order_cb(fy_hotel_t *h, fy_hotel_room_t *room, void *arg)
{
    order_state_t *s = arg;
    FY_ASSERT_LT(s->n, 4);
    s->fired[s->n++] = fy_container_of(room, guest_t, room);
    if (s->newcomer != NULL) {
        fy_hotel_checkin(h, &s->newcomer->room, TICK / 10, s->run_now);
        s->newcomer = NULL;
    }
}

static void same_tick_checkin_order(void)
{
    fy_hotel_t h;
    guest_t a = {.index = 0}, k = {.index = 1}, n = {.index = 2};
    order_state_t s = {.newcomer = &n, .run_now = T0 + 5 * TICK + TICK / 2};
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 16, order_cb, &s, T0));
    fy_hotel_room_init(&a.room);
    fy_hotel_room_init(&k.room);
    fy_hotel_room_init(&n.room);
    fy_hotel_checkin(&h, &k.room, 5 * TICK + 9 * TICK / 10, T0); /* tick 5, late in it */
    fy_hotel_checkin(&h, &a.room, 5 * TICK + TICK / 10, T0);     /* tick 5, early */
    FY_ASSERT_EQ(fy_hotel_run(&h, s.run_now), 1);                /* a; n checked in, tick 5 */
    FY_ASSERT(s.fired[0] == &a);
    FY_ASSERT(fy_hotel_is_checked_in(&n.room));
    FY_ASSERT_LT(n.room.expiry, k.room.expiry);
    FY_ASSERT_EQ(fy_hotel_run(&h, T0 + 6 * TICK), 2);
    FY_ASSERT_MSG(s.fired[1] == &k && s.fired[2] == &n,
                  "same tick: k (checked in first) must fire before n, got %d then %d",
                  s.fired[1]->index, s.fired[2]->index);
    fy_hotel_destroy(&h);
}

/* 100k rooms: check-in, check-out of a third, everything else fires once, never early. */
static void many_rooms(void)
{
    enum { N = 100000 };
    guest_t *g = calloc(N, sizeof(*g));
    log_state_t s;
    fy_hotel_t h;
    FY_ASSERT(g != NULL);
    log_init_state(&s, N);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 1024, record_cb, &s, T0));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++) {
        fy_hotel_room_init(&g[i].room);
        g[i].index = i;
        fy_hotel_checkin(&h, &g[i].room, rng() % (5000 * TICK), T0);
    }
    for (int i = 0; i < N; i += 3)
        fy_hotel_checkout(&h, &g[i].room);
    size_t expected = fy_hotel_occupancy(&h);
    FY_ASSERT_EQ(expected, N - (N + 2) / 3);
    uint64_t now = T0;
    size_t fired = 0;
    while (fy_hotel_occupancy(&h) > 0) {
        now += 10 * TICK;
        fired += run_at(&h, &s, now);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    FY_ASSERT_EQ(fired, expected);
    FY_ASSERT_EQ(s.n, expected);
    for (size_t i = 0; i < s.n; i++) {
        FY_ASSERT_GE(s.fired_at[i], s.order[i]->room.expiry);
        FY_ASSERT_LT(s.fired_at[i], s.order[i]->room.expiry + 10 * TICK);
    }
    for (int i = 0; i < N; i++)
        FY_ASSERT_EQ(g[i].fired, i % 3 != 0);
    printf("  %d rooms in %.1f ms (information, not a limit)\n", N,
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    fy_hotel_destroy(&h);
    log_free_state(&s);
    free(g);
}

/* Callers sample now before they progress, so a check-in may name a time before the last
 * run: a room whose tick is already processed still fires at the next run that reaches it. */
static void stale_now(void)
{
    guest_t a = {.index = 0}, b = {.index = 1};
    log_state_t s;
    fy_hotel_t h;
    log_init_state(&s, 4);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 8, record_cb, &s, T0));
    fy_hotel_room_init(&a.room);
    fy_hotel_room_init(&b.room);
    FY_ASSERT_EQ(run_at(&h, &s, T0 + 10 * TICK), 0);
    FY_ASSERT_U64_EQ(h.current_tick, T0 / TICK + 10);        /* an empty hotel jumps to now */
    fy_hotel_checkin(&h, &a.room, 3 * TICK, T0);             /* due 7 ticks ago */
    fy_hotel_checkin(&h, &b.room, 10 * TICK + TICK / 2, T0); /* later in the current tick */
    FY_ASSERT_EQ(run_at(&h, &s, T0 + 10 * TICK), 1);
    FY_ASSERT_EQ(a.fired, 1);
    FY_ASSERT_EQ(b.fired, 0);
    FY_ASSERT_EQ(run_at(&h, &s, T0 + 10 * TICK + TICK / 2), 1);
    FY_ASSERT_EQ(b.fired, 1);
    fy_hotel_destroy(&h);
    log_free_state(&s);
}

/* fy_hotel_next_run: the end of the tick of the earliest room, never after its expiry,
 * however far ahead it is (rooms of later turns in earlier slots do not count); now when the
 * hotel has not run since a room was due. */
static void next_run(void)
{
    fy_hotel_t h;
    log_state_t s;
    guest_t a = {0}, b = {0}, c = {0};
    log_init_state(&s, 4);
    fy_hotel_room_init(&a.room);
    fy_hotel_room_init(&b.room);
    fy_hotel_room_init(&c.room);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 64, record_cb, &s, T0));
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, T0), UINT64_MAX);
    fy_hotel_checkin(&h, &a.room, 5 * TICK + 300, T0);
    fy_hotel_checkin(&h, &b.room, 40 * TICK, T0);
    uint64_t t = fy_hotel_next_run(&h, T0);
    FY_ASSERT_U64_EQ(t, T0 + 6 * TICK); /* a's tick ends: a fires in the run at t */
    FY_ASSERT(t >= a.room.expiry);
    s.now = t;
    FY_ASSERT_EQ(fy_hotel_run(&h, t), 1);
    FY_ASSERT_EQ(a.fired, 1);
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, t), T0 + 41 * TICK);
    /* c, three turns ahead, sits in a slot before b's: b is still first. */
    fy_hotel_checkin(&h, &c.room, 3 * 64 * TICK + 10 * TICK, t);
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, t), T0 + 41 * TICK);
    /* A hotel not run since b was due: at once. */
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, T0 + 50 * TICK), T0 + 50 * TICK);
    fy_hotel_checkout(&h, &b.room);
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, t), c.room.expiry / TICK * TICK + TICK);
    fy_hotel_checkout(&h, &c.room);
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, t), UINT64_MAX);
    fy_hotel_destroy(&h);

    /* The same on a wheel of many words (8192 slots), with rooms only far away. */
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 8192, record_cb, &s, T0));
    fy_hotel_checkin(&h, &a.room, 8192ull * 5 * TICK + 7 * TICK, T0); /* five turns ahead */
    fy_hotel_checkin(&h, &b.room, 8192ull * 2 * TICK + 8000 * TICK, T0);
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, T0), b.room.expiry / TICK * TICK + TICK);
    fy_hotel_checkout(&h, &b.room);
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, T0), a.room.expiry / TICK * TICK + TICK);
    fy_hotel_checkout(&h, &a.room);
    fy_hotel_destroy(&h);
    log_free_state(&s);
}

/* A long sleep (a worker whose timers are far apart): a few rooms, one run after seconds of
 * 20 us ticks, and rooms a billion ticks apart.  Each run fires exactly what is due, in order,
 * and the next-run query says when the next is; a run costs the rooms and the occupied slots,
 * so runs across 10^12 ticks finish at once (walking every tick they would never end). */
static void long_sleep(void)
{
    enum { N = 6 };
    static const uint64_t stay_ticks[N] = {
        3, 50000, 50001, 1000000000ull, 1000000000ull + 8192, 1000000000000ull,
    };
    guest_t g[N];
    uint64_t run_now[16];
    log_state_t s;
    fy_hotel_t h;
    log_init_state(&s, N);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 8192, record_cb, &s, T0));
    for (int i = 0; i < N; i++) {
        fy_hotel_room_init(&g[i].room);
        g[i].index = i;
        g[i].fired = 0;
        fy_hotel_checkin(&h, &g[i].room, stay_ticks[i] * TICK + TICK / 2, T0);
    }
    run_now[0] = T0;
    /* Sleep from one next-run to the next: each wake-up fires the rooms of one tick. */
    uint64_t now = T0;
    unsigned wakeups = 0;
    while (fy_hotel_occupancy(&h) > 0) {
        uint64_t next = fy_hotel_next_run(&h, now);
        FY_ASSERT(next > now);
        now = next;
        FY_ASSERT_LT(s.run + 1, 16);
        FY_ASSERT_GE(run_at(&h, &s, now), 1);
        run_now[s.run] = now;
        wakeups++;
    }
    FY_ASSERT_EQ(wakeups, N);
    check_log(&s, run_now, TICK);
    for (int i = 0; i < N; i++) {
        FY_ASSERT_EQ(g[i].fired, 1);
        FY_ASSERT_U64_EQ(s.fired_at[i], T0 + (stay_ticks[i] + 1) * TICK);
    }

    /* One run after sleeping past all of them (seconds of ticks): all fire, in order. */
    s.n = 0;
    s.run = 0;
    now += 1000 * TICK;
    run_now[0] = now;
    for (int i = 0; i < N; i++) {
        g[i].fired = 0;
        fy_hotel_checkin(&h, &g[i].room, stay_ticks[i] * TICK, now);
    }
    FY_ASSERT_EQ(run_at(&h, &s, now + 100000 * TICK), 3);
    run_now[1] = now + 100000 * TICK;
    FY_ASSERT_EQ(run_at(&h, &s, now + 2000000000000ull * TICK), 3);
    run_now[2] = now + 2000000000000ull * TICK;
    FY_ASSERT_EQ(s.n, N);
    check_log(&s, run_now, TICK);
    FY_ASSERT_EQ(fy_hotel_occupancy(&h), 0);
    fy_hotel_destroy(&h);
    log_free_state(&s);
}

/* A room checked in from a callback with a now older than the tick being processed (its
 * tick already passed) is not lost for a turn of the wheel: the next run fires it. */
static void stale_checkin_in_run(void)
{
    fy_hotel_t h;
    recheck_state_t s = {0};
    guest_t a = {.index = 0};
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 64, recheck_cb, &s, T0));
    fy_hotel_room_init(&a.room);
    fy_hotel_checkin(&h, &a.room, 2 * TICK, T0);
    s.restay = 0;
    s.limit = 1;
    s.run_now = T0; /* re-check-in for T0: 2 ticks behind the tick being processed */
    FY_ASSERT_EQ(fy_hotel_run(&h, T0 + 10 * TICK), 1);
    FY_ASSERT(fy_hotel_is_checked_in(&a.room));
    FY_ASSERT_U64_EQ(fy_hotel_next_run(&h, T0 + 10 * TICK), T0 + 10 * TICK);
    FY_ASSERT_EQ(fy_hotel_run(&h, T0 + 10 * TICK), 1);
    FY_ASSERT_EQ(a.fired, 2);
    FY_ASSERT_EQ(fy_hotel_occupancy(&h), 0);
    fy_hotel_destroy(&h);
}

static void bad_params(void)
{
    fy_hotel_t h;
    FY_ASSERT_STATUS(fy_hotel_init(&h, 0, 16, record_cb, NULL, T0), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_hotel_init(&h, TICK, 0, record_cb, NULL, T0), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_OK(fy_hotel_init(&h, TICK, 100, record_cb, NULL, T0));
    FY_ASSERT_EQ(h.nslots, 128); /* rounded up to a power of two */
    /* A run with a time before the last one does nothing. */
    FY_ASSERT_EQ(fy_hotel_run(&h, T0 - 10 * TICK), 0);
    fy_hotel_destroy(&h);
}

FYTEST_MAIN(FYTEST_CASE(expiry_order), FYTEST_CASE(checkout_before_expiry),
            FYTEST_CASE(recheckin_moves), FYTEST_CASE(long_stays),
            FYTEST_CASE(recheckin_from_callback), FYTEST_CASE(same_tick_checkin_order),
            FYTEST_CASE(many_rooms), FYTEST_CASE(stale_now), FYTEST_CASE(next_run),
            FYTEST_CASE(long_sleep), FYTEST_CASE(stale_checkin_in_run), FYTEST_CASE(bad_params))
