/*
 * test_mpool.c - the fixed-size object pool: the limit as back-pressure, reuse without growth,
 * alignment and non-overlap of objects, and the warning for objects leaked at destroy.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>

#include "fytest.h"
#include "util/log.h"
#include "util/mpool.h"

static void limit(void)
{
    fy_mpool_t mp;
    void *objs[10];
    FY_ASSERT_OK(fy_mpool_init(&mp, "limited", 40, 0, 4, 10));
    for (int i = 0; i < 10; i++) {
        objs[i] = fy_mpool_get(&mp);
        FY_ASSERT_MSG(objs[i] != NULL, "object %d of 10 refused", i);
    }
    FY_ASSERT(fy_mpool_get(&mp) == NULL);
    FY_ASSERT(fy_mpool_get(&mp) == NULL);
    FY_ASSERT_EQ(mp.allocated, 10); /* the last chunk was cut to the limit */
    FY_ASSERT_EQ(mp.in_use, 10);
    fy_mpool_put(&mp, objs[3]);
    void *again = fy_mpool_get(&mp);
    FY_ASSERT(again == objs[3]);
    FY_ASSERT(fy_mpool_get(&mp) == NULL);
    for (int i = 0; i < 10; i++)
        fy_mpool_put(&mp, objs[i]);
    FY_ASSERT_EQ(mp.in_use, 0);
    fy_mpool_destroy(&mp);
}

static void reuse(void)
{
    fy_mpool_t mp;
    FY_ASSERT_OK(fy_mpool_init(&mp, "reuse", 100, 8, 16, 0));
    void *a = fy_mpool_get(&mp);
    FY_ASSERT(a != NULL);
    size_t allocated = mp.allocated;
    FY_ASSERT_EQ(allocated, 16);
    for (int i = 0; i < 100000; i++) {
        fy_mpool_put(&mp, a);
        void *b = fy_mpool_get(&mp);
        FY_ASSERT(b == a); /* LIFO: the warm object comes back */
        a = b;
    }
    FY_ASSERT_EQ(mp.allocated, allocated);

    /* Unlimited pools grow chunk by chunk. */
    void *many[1000];
    many[0] = a;
    for (int i = 1; i < 1000; i++)
        FY_ASSERT((many[i] = fy_mpool_get(&mp)) != NULL);
    FY_ASSERT_EQ(mp.allocated, 1008);
    FY_ASSERT_EQ(mp.in_use, 1000);
    for (int i = 0; i < 1000; i++)
        fy_mpool_put(&mp, many[i]);
    for (int i = 0; i < 1000; i++)
        FY_ASSERT((many[i] = fy_mpool_get(&mp)) != NULL);
    FY_ASSERT_EQ(mp.allocated, 1008); /* all reused, no new chunk */
    for (int i = 0; i < 1000; i++)
        fy_mpool_put(&mp, many[i]);
    fy_mpool_destroy(&mp);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

static void alignment(void)
{
    static const size_t aligns[] = {0, 8, 16, 64, 256, 4096};
    static const size_t sizes[] = {1, 24, 64, 65, 1000};
    for (size_t a = 0; a < sizeof(aligns) / sizeof(aligns[0]); a++) {
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            fy_mpool_t mp;
            void *objs[50];
            size_t align = aligns[a] ? aligns[a] : 16, size = sizes[s];
            FY_ASSERT_OK(fy_mpool_init(&mp, "align", size, aligns[a], 7, 0));
            FY_ASSERT_GE(mp.elem_size, size);
            for (int i = 0; i < 50; i++) {
                objs[i] = fy_mpool_get(&mp);
                FY_ASSERT(objs[i] != NULL);
                FY_ASSERT_MSG(((uintptr_t)objs[i] & (align - 1)) == 0,
                              "object %p not aligned to %zu (size %zu)", objs[i], align, size);
                memset(objs[i], i + 1, size);
            }
            /* Every object keeps its whole pattern: no two overlap. */
            for (int i = 0; i < 50; i++)
                for (size_t b = 0; b < size; b++)
                    FY_ASSERT_EQ(((unsigned char *)objs[i])[b], i + 1);
            qsort(objs, 50, sizeof(objs[0]), cmp_ptr);
            for (int i = 1; i < 50; i++)
                FY_ASSERT_GE((uintptr_t)objs[i] - (uintptr_t)objs[i - 1], size);
            for (int i = 0; i < 50; i++)
                fy_mpool_put(&mp, objs[i]);
            fy_mpool_destroy(&mp);
        }
    }
    fy_mpool_t mp;
    FY_ASSERT_STATUS(fy_mpool_init(&mp, "bad", 8, 24, 4, 0), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_mpool_init(&mp, "bad", 0, 8, 4, 0), FERRY_ERR_INVALID_PARAM);
}

/* Destroying with objects out warns, naming the pool; a clean destroy says nothing. */
static void destroy_warns_in_use(void)
{
    char path[] = "/tmp/fytest_mpool_XXXXXX";
    int fd = mkstemp(path);
    FY_ASSERT(fd >= 0);
    unlink(path);
    fy_log_init();
    fy_log_level_current = FY_LOG_WARN;
    FY_ASSERT(dup2(fd, 2) == 2);

    fy_mpool_t mp;
    FY_ASSERT_OK(fy_mpool_init(&mp, "quiet-pool", 32, 0, 8, 0));
    void *o = fy_mpool_get(&mp);
    fy_mpool_put(&mp, o);
    fy_mpool_destroy(&mp);
    FY_ASSERT_EQ(lseek(fd, 0, SEEK_END), 0);

    FY_ASSERT_OK(fy_mpool_init(&mp, "leaky-pool", 32, 0, 8, 0));
    FY_ASSERT(fy_mpool_get(&mp) != NULL);
    FY_ASSERT(fy_mpool_get(&mp) != NULL);
    fy_mpool_destroy(&mp);

    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    FY_ASSERT_GT(n, 0);
    buf[n] = '\0';
    FY_ASSERT_MSG(strstr(buf, "leaky-pool") != NULL, "no pool name in: %s", buf);
    FY_ASSERT_MSG(strstr(buf, "2 ") != NULL, "no count in: %s", buf);
    close(fd);
}

FYTEST_MAIN(FYTEST_CASE(limit), FYTEST_CASE(reuse), FYTEST_CASE(alignment),
            FYTEST_CASE(destroy_warns_in_use))
