/*
 * test_region.c - the remote-access check: admitted inside the region with the registered
 * rights and key; denied for an unknown id, a wrong key, a range outside or wrapping around
 * the address space, a missing right, and after removal.  Also distinct ids and keys, and
 * checks racing registrations from other threads.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "fytest.h"
#include "util/region.h"

#define RD FERRY_MEM_REMOTE_READ
#define WR FERRY_MEM_REMOTE_WRITE
#define AT FERRY_MEM_REMOTE_ATOMIC

static void admit_and_deny(void)
{
    static char buf[4096];
    fy_region_table_t t;
    fy_region_t r;
    void *local = NULL;
    uint64_t base = (uint64_t)(uintptr_t)buf;

    FY_ASSERT_OK(fy_region_table_init(&t));
    FY_ASSERT_OK(fy_region_add(&t, buf, sizeof(buf), RD | WR, &r));
    FY_ASSERT(r.base == (uintptr_t)buf);
    FY_ASSERT_EQ(r.length, sizeof(buf));
    FY_ASSERT_EQ(r.access, RD | WR);

    /* Inside, with granted rights. */
    FY_ASSERT_OK(fy_region_check(&t, r.id, r.key, base, sizeof(buf), RD, &local));
    FY_ASSERT(local == buf);
    FY_ASSERT_OK(fy_region_check(&t, r.id, r.key, base + 100, 50, RD | WR, &local));
    FY_ASSERT(local == buf + 100);
    FY_ASSERT_OK(fy_region_check(&t, r.id, r.key, base + 4095, 1, WR, &local));
    FY_ASSERT(local == buf + 4095);
    /* Zero length inside (and at the very end) is fine. */
    FY_ASSERT_OK(fy_region_check(&t, r.id, r.key, base + 10, 0, RD, &local));
    FY_ASSERT_OK(fy_region_check(&t, r.id, r.key, base + 4096, 0, RD, NULL));

    /* Unknown id, wrong key. */
    FY_ASSERT_STATUS(fy_region_check(&t, r.id + 1, r.key, base, 8, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key ^ 1, base, 8, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, 0, base, 8, RD, &local), FERRY_ERR_ACCESS_DENIED);
    /* Missing right. */
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base, 8, AT, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base, 8, RD | AT, &local),
                     FERRY_ERR_ACCESS_DENIED);
    /* Out of bounds: before, after, straddling either end. */
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base - 1, 1, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base - 1, 2, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base + 4096, 1, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base + 4095, 2, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base, 4097, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base + 8192, 0, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    /* Overflow: addr + len wraps around to land inside, or a huge address. */
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base + 8, SIZE_MAX, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base + 8, SIZE_MAX - 7, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, UINT64_MAX, 2, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(
        fy_region_check(&t, r.id, r.key, UINT64_MAX - 1, (size_t)(base + 10), RD, &local),
        FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, 0, (size_t)(base + 10), RD, &local),
                     FERRY_ERR_ACCESS_DENIED);

    /* Removal: then denied; removing twice is NO_ELEM. */
    FY_ASSERT_OK(fy_region_remove(&t, r.id));
    FY_ASSERT_STATUS(fy_region_check(&t, r.id, r.key, base, 8, RD, &local),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_region_remove(&t, r.id), FERRY_ERR_NO_ELEM);
    fy_region_table_destroy(&t);
}

static void bad_registration(void)
{
    fy_region_table_t t;
    fy_region_t r;
    char buf[16];
    FY_ASSERT_OK(fy_region_table_init(&t));
    FY_ASSERT_STATUS(fy_region_add(&t, buf, sizeof(buf), 1u << 7, &r), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_region_add(&t, (void *)(UINTPTR_MAX - 10), 100, RD, &r),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_region_add(&t, NULL, 10, RD, &r), FERRY_ERR_INVALID_PARAM);
    fy_region_table_destroy(&t);
}

/* Two regions over the same memory: each key opens only its own region. */
static void ids_and_keys(void)
{
    enum { N = 200 };
    static char buf[64];
    fy_region_table_t t;
    fy_region_t r[N];
    FY_ASSERT_OK(fy_region_table_init(&t));
    for (int i = 0; i < N; i++)
        FY_ASSERT_OK(fy_region_add(&t, buf, sizeof(buf), RD, &r[i]));
    for (int i = 0; i < N; i++) {
        FY_ASSERT_NE(r[i].id, 0);
        for (int j = 0; j < i; j++) {
            FY_ASSERT_MSG(r[i].id != r[j].id, "ids %d and %d equal", i, j);
            FY_ASSERT_MSG(r[i].key != r[j].key, "keys %d and %d equal", i, j);
        }
    }
    uint64_t base = (uint64_t)(uintptr_t)buf;
    FY_ASSERT_OK(fy_region_check(&t, r[5].id, r[5].key, base, 8, RD, NULL));
    FY_ASSERT_STATUS(fy_region_check(&t, r[5].id, r[6].key, base, 8, RD, NULL),
                     FERRY_ERR_ACCESS_DENIED);
    fy_region_table_destroy(&t);

    /* A second table starts its ids elsewhere (random start): not 0 or 1 as a counter would. */
    fy_region_table_t t2;
    fy_region_t a, b;
    FY_ASSERT_OK(fy_region_table_init(&t));
    FY_ASSERT_OK(fy_region_table_init(&t2));
    FY_ASSERT_OK(fy_region_add(&t, buf, 8, RD, &a));
    FY_ASSERT_OK(fy_region_add(&t2, buf, 8, RD, &b));
    FY_ASSERT_NE(a.id, b.id);
    FY_ASSERT_STATUS(fy_region_check(&t2, a.id, a.key, base, 8, RD, NULL), FERRY_ERR_ACCESS_DENIED);
    fy_region_table_destroy(&t);
    fy_region_table_destroy(&t2);

    /* fy_random64 is not constant and uses the high bits. */
    uint64_t x = fy_random64(), y = fy_random64(), orv = 0;
    FY_ASSERT_NE(x, y);
    for (int i = 0; i < 64; i++)
        orv |= fy_random64();
    FY_ASSERT_U64_EQ(orv >> 56, 0xff);
}

typedef struct race {
    fy_region_table_t *t;
    fy_region_t fixed;
    char *buf;
    volatile int stop;
    int denied;
} race_t;

static void *checker(void *arg)
{
    race_t *r = arg;
    uint64_t base = (uint64_t)(uintptr_t)r->buf;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) /* the main thread sets it */
        if (fy_region_check(r->t, r->fixed.id, r->fixed.key, base, 64, RD, NULL) != FERRY_OK)
            __atomic_fetch_add(&r->denied, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* Checks from two threads while a third registers and removes regions. */
static void concurrent(void)
{
    static char buf[128];
    fy_region_table_t t;
    race_t r = {.t = &t, .buf = buf};
    pthread_t th[2];
    FY_ASSERT_OK(fy_region_table_init(&t));
    FY_ASSERT_OK(fy_region_add(&t, buf, sizeof(buf), RD, &r.fixed));
    for (int i = 0; i < 2; i++)
        FY_ASSERT_EQ(pthread_create(&th[i], NULL, checker, &r), 0);
    for (int i = 0; i < 20000; i++) {
        fy_region_t tmp;
        FY_ASSERT_OK(fy_region_add(&t, buf, 16, WR, &tmp));
        FY_ASSERT_OK(fy_region_check(&t, tmp.id, tmp.key, (uint64_t)(uintptr_t)buf, 16, WR, NULL));
        FY_ASSERT_OK(fy_region_remove(&t, tmp.id));
    }
    __atomic_store_n(&r.stop, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    FY_ASSERT_EQ(r.denied, 0);
    fy_region_table_destroy(&t);
}

FYTEST_MAIN(FYTEST_CASE(admit_and_deny), FYTEST_CASE(bad_registration), FYTEST_CASE(ids_and_keys),
            FYTEST_CASE(concurrent))
