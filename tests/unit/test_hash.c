/*
 * test_hash.c - the open-addressing map: basic contract, a long random run checked against a
 * plain array, growth under the 70% load limit, and no tombstone build-up after churn.
 */
#include <stdint.h>
#include <stdlib.h>

#include "fytest.h"
#include "fytest_util.h"
#include "util/hash.h"

/* Entries actually present in the slot array (independent of h->count). */
static size_t occupied_slots(const fy_hash_t *h)
{
    size_t n = 0;
    for (size_t i = 0; i <= h->mask; i++)
        n += h->slots[i].value != NULL;
    return n;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    return fy_xorshift64(&rng_state);
}

static void basic(void)
{
    fy_hash_t h;
    int a, b, c;
    FY_ASSERT_OK(fy_hash_init(&h, 0));
    FY_ASSERT_EQ(fy_hash_count(&h), 0);
    FY_ASSERT(fy_hash_get(&h, 1) == NULL);
    FY_ASSERT(fy_hash_del(&h, 1) == NULL);

    FY_ASSERT_OK(fy_hash_put(&h, 1, &a));
    FY_ASSERT_OK(fy_hash_put(&h, 0, &b)); /* key 0 is an ordinary key */
    FY_ASSERT_OK(fy_hash_put(&h, UINT64_MAX, &c));
    FY_ASSERT_EQ(fy_hash_count(&h), 3);
    FY_ASSERT(fy_hash_get(&h, 1) == &a);
    FY_ASSERT(fy_hash_get(&h, 0) == &b);
    FY_ASSERT(fy_hash_get(&h, UINT64_MAX) == &c);

    /* Replace keeps the count. */
    FY_ASSERT_OK(fy_hash_put(&h, 1, &c));
    FY_ASSERT_EQ(fy_hash_count(&h), 3);
    FY_ASSERT(fy_hash_get(&h, 1) == &c);

    /* NULL values are refused and change nothing. */
    FY_ASSERT_STATUS(fy_hash_put(&h, 7, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_EQ(fy_hash_count(&h), 3);

    FY_ASSERT(fy_hash_del(&h, 0) == &b);
    FY_ASSERT(fy_hash_get(&h, 0) == NULL);
    FY_ASSERT(fy_hash_del(&h, 0) == NULL);
    FY_ASSERT_EQ(fy_hash_count(&h), 2);
    FY_ASSERT_EQ(occupied_slots(&h), 2);
    fy_hash_destroy(&h);
    fy_hash_destroy(&h); /* harmless twice */
}

/* A long random mix of put / del / get against an array indexed by key number. */
#define REF_KEYS 3000
static void random_vs_reference(void)
{
    static void *ref[REF_KEYS];
    static char values[REF_KEYS * 2];
    uint64_t keys[REF_KEYS];
    fy_hash_t h;
    size_t count = 0;

    /* Keys: some dense small integers (the common case: ids), some spread over 64 bits. */
    for (size_t i = 0; i < REF_KEYS; i++)
        keys[i] = i < REF_KEYS / 2 ? i : rng();
    FY_ASSERT_OK(fy_hash_init(&h, 4));
    for (int op = 0; op < 400000; op++) {
        size_t k = (size_t)(rng() % REF_KEYS);
        unsigned what = (unsigned)(rng() % 8);
        if (what < 4) {
            void *v = &values[k * 2 + (rng() & 1)];
            FY_ASSERT_OK(fy_hash_put(&h, keys[k], v));
            if (ref[k] == NULL)
                count++;
            ref[k] = v;
        } else if (what < 7) {
            void *got = fy_hash_del(&h, keys[k]);
            FY_ASSERT_MSG(got == ref[k], "op %d: del key %zu returned %p, expected %p", op, k, got,
                          ref[k]);
            if (ref[k] != NULL)
                count--;
            ref[k] = NULL;
        } else {
            FY_ASSERT(fy_hash_get(&h, keys[k]) == ref[k]);
        }
        FY_ASSERT_EQ(fy_hash_count(&h), count);
        if (op % 20000 == 0) {
            for (size_t i = 0; i < REF_KEYS; i++)
                FY_ASSERT_MSG(fy_hash_get(&h, keys[i]) == ref[i], "op %d: key %zu", op, i);
            FY_ASSERT_EQ(occupied_slots(&h), count);
        }
    }
    for (size_t i = 0; i < REF_KEYS; i++)
        FY_ASSERT(fy_hash_get(&h, keys[i]) == ref[i]);
    FY_ASSERT_EQ(occupied_slots(&h), count);
    fy_hash_destroy(&h);
}

/* The table doubles and never passes 70% full; every entry survives the rehash. */
static void growth(void)
{
    fy_hash_t h;
    static char v[1];
    FY_ASSERT_OK(fy_hash_init(&h, 0));
    size_t cap0 = h.mask + 1, grew = 0, last = cap0;
    FY_ASSERT_EQ(cap0 & (cap0 - 1), 0);
    for (uint64_t i = 0; i < 100000; i++) {
        FY_ASSERT_OK(fy_hash_put(&h, i * 7919, v + 0));
        size_t cap = h.mask + 1;
        FY_ASSERT_EQ(cap & (cap - 1), 0);
        FY_ASSERT_MSG(fy_hash_count(&h) * 10 <= cap * 7, "load %zu/%zu above 70%%",
                      fy_hash_count(&h), cap);
        if (cap != last) {
            FY_ASSERT_EQ(cap, last * 2);
            grew++;
            last = cap;
        }
    }
    FY_ASSERT_GT(grew, 10);
    for (uint64_t i = 0; i < 100000; i++)
        FY_ASSERT(fy_hash_get(&h, i * 7919) == v);
    FY_ASSERT(fy_hash_get(&h, 1) == NULL);
    fy_hash_destroy(&h);

    /* An initial capacity is honoured: no growth up to it. */
    FY_ASSERT_OK(fy_hash_init(&h, 1000));
    size_t cap = h.mask + 1;
    for (uint64_t i = 0; i < 1000; i++)
        FY_ASSERT_OK(fy_hash_put(&h, i, v));
    FY_ASSERT_EQ(h.mask + 1, cap);
    fy_hash_destroy(&h);
}

/* Insert / delete churn with a small live set: no tombstones means no growth, short probes. */
static void churn_no_growth(void)
{
    fy_hash_t h;
    static char v[1];
    FY_ASSERT_OK(fy_hash_init(&h, 10));
    size_t cap = h.mask + 1;
    uint64_t live[10];
    for (int i = 0; i < 10; i++) {
        live[i] = rng();
        FY_ASSERT_OK(fy_hash_put(&h, live[i], v));
    }
    for (int round = 0; round < 200000; round++) {
        int i = round % 10;
        FY_ASSERT(fy_hash_del(&h, live[i]) == v);
        live[i] = rng();
        FY_ASSERT_OK(fy_hash_put(&h, live[i], v));
    }
    FY_ASSERT_EQ(h.mask + 1, cap);
    FY_ASSERT_EQ(occupied_slots(&h), 10);
    for (int i = 0; i < 10; i++)
        FY_ASSERT(fy_hash_get(&h, live[i]) == v);
    fy_hash_destroy(&h);
}

/* Deleting from the middle of a run that wraps around the end of the table. */
static void wraparound_runs(void)
{
    fy_hash_t h;
    static char v[64];
    FY_ASSERT_OK(fy_hash_init(&h, 4));
    size_t mask = h.mask;
    /* Find keys whose home is the last slot or the first: their run wraps. */
    uint64_t ks[5];
    int n = 0;
    for (uint64_t k = 1; n < 5; k++) {
        size_t home = (size_t)fy_hash_mix64(k) & mask;
        if (home == mask || (home == 0 && n >= 3))
            ks[n++] = k;
    }
    for (int i = 0; i < 5; i++)
        FY_ASSERT_OK(fy_hash_put(&h, ks[i], &v[i]));
    FY_ASSERT_EQ(h.mask, mask); /* 5 entries in 8 slots: no growth */
    for (int d = 0; d < 5; d++) {
        FY_ASSERT(fy_hash_del(&h, ks[d]) == &v[d]);
        for (int i = d + 1; i < 5; i++)
            FY_ASSERT_MSG(fy_hash_get(&h, ks[i]) == &v[i], "after deleting %d, key %d lost", d, i);
    }
    FY_ASSERT_EQ(fy_hash_count(&h), 0);
    FY_ASSERT_EQ(occupied_slots(&h), 0);
    fy_hash_destroy(&h);
}

static void sum_cb(uint64_t key, void *value, void *arg)
{
    uint64_t *acc = arg;
    acc[0] += key;
    acc[1]++;
    FY_ASSERT(value != NULL);
}

static void foreach_visits_all(void)
{
    fy_hash_t h;
    static char v[1];
    uint64_t expect = 0, acc[2] = {0, 0};
    FY_ASSERT_OK(fy_hash_init(&h, 0));
    for (uint64_t i = 1; i <= 500; i++) {
        FY_ASSERT_OK(fy_hash_put(&h, i * 3, v));
        expect += i * 3;
    }
    for (uint64_t i = 1; i <= 500; i += 5) {
        FY_ASSERT(fy_hash_del(&h, i * 3) == v);
        expect -= i * 3;
    }
    fy_hash_foreach(&h, sum_cb, acc);
    FY_ASSERT_U64_EQ(acc[0], expect);
    FY_ASSERT_EQ(acc[1], 400);
    fy_hash_destroy(&h);
}

FYTEST_MAIN(FYTEST_CASE(basic), FYTEST_CASE(random_vs_reference), FYTEST_CASE(growth),
            FYTEST_CASE(churn_no_growth), FYTEST_CASE(wraparound_runs),
            FYTEST_CASE(foreach_visits_all))
