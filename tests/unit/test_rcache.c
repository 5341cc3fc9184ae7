/*
 * test_rcache.c - the registration cache over counting fake callbacks: hits and misses, page
 * sharing, access upgrade, overlapping ranges merged, LRU eviction by entries and by bytes,
 * FERRY_RCACHE=n and no monitor (pass-through), and invalidation by the memory monitor: a buffer
 * unmapped (munmap, MAP_FIXED over it, madvise, mremap, free) and mapped again at the same
 * address with other contents is registered anew, and the stale registration is never returned
 * and is deregistered.  The fake registration records the bytes it saw, so a stale one is told
 * apart from a new one by what it registered, not only by the counters.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#include "fytest.h"
#include "util/memmon.h"
#include "util/rcache.h"

#define RD FERRY_MEM_REMOTE_READ
#define WR FERRY_MEM_REMOTE_WRITE

typedef struct fake_memh {
    uint64_t id;    /* unique per registration */
    uintptr_t addr; /* registered range */
    size_t len;
    unsigned char saw; /* first byte of the buffer when it was registered */
    unsigned access;
} fake_memh_t;

typedef struct fake {
    uint64_t next_id;
    long live; /* registered and not yet deregistered */
    long regs, deregs;
    int fail_next;
} fake_t;

static ferry_status_t fake_reg(void *arg, void *addr, size_t len, unsigned access, void *memh)
{
    fake_t *f = arg;
    fake_memh_t *m = memh;
    if (f->fail_next) {
        f->fail_next = 0;
        return FERRY_ERR_IO;
    }
    FY_ASSERT_EQ(m->id, 0); /* zeroed storage */
    m->id = ++f->next_id;
    m->addr = (uintptr_t)addr;
    m->len = len;
    m->saw = *(volatile unsigned char *)addr;
    m->access = access;
    __atomic_add_fetch(&f->live, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&f->regs, 1, __ATOMIC_SEQ_CST);
    return FERRY_OK;
}

static void fake_dereg(void *arg, void *memh)
{
    fake_t *f = arg;
    fake_memh_t *m = memh;
    FY_ASSERT_NE(m->id, 0);
    m->id = 0;
    __atomic_sub_fetch(&f->live, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&f->deregs, 1, __ATOMIC_SEQ_CST);
}

static fy_rcache_t *make(fake_t *f, int enable, size_t max_bytes, size_t max_entries)
{
    memset(f, 0, sizeof(*f));
    fy_rcache_opts_t o = {.enable = enable, .max_bytes = max_bytes, .max_entries = max_entries};
    fy_rcache_params_t p = {.name = "test",
                            .memh_size = sizeof(fake_memh_t),
                            .reg = fake_reg,
                            .dereg = fake_dereg,
                            .arg = f,
                            .opts = &o};
    fy_rcache_t *rc = NULL;
    FY_ASSERT_OK(fy_rcache_create(&p, &rc));
    return rc;
}

static fake_memh_t *memh(fy_rcache_region_t *r)
{
    return fy_rcache_region_memh(r);
}

static size_t page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static unsigned char *map(size_t len, int c)
{
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FY_ASSERT(p != MAP_FAILED);
    memset(p, c, len);
    return p;
}

static void finish(fy_rcache_t *rc, fake_t *f)
{
    fy_rcache_destroy(rc);
    FY_ASSERT_EQ(f->live, 0);
    FY_ASSERT_EQ(f->regs, f->deregs);
}

static void hits(void)
{
    fake_t f;
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 100);
    FY_ASSERT(fy_rcache_is_caching(rc));
    size_t ps = page();
    unsigned char *b = map(4 * ps, 'a');
    fy_rcache_region_t *r1, *r2, *r3;
    FY_ASSERT_OK(fy_rcache_get(rc, b + 100, 2 * ps, RD, &r1));
    FY_ASSERT_OK(fy_rcache_get(rc, b + 100, 2 * ps, RD, &r2)); /* the same */
    FY_ASSERT(r1 == r2);
    FY_ASSERT_OK(fy_rcache_get(rc, b + 10, 50, RD, &r3)); /* inside the same pages */
    FY_ASSERT(r3 == r1);
    /* registered page aligned */
    FY_ASSERT_U64_EQ(memh(r1)->addr, (uintptr_t)b);
    FY_ASSERT_EQ(memh(r1)->len, 3 * ps);
    void *a;
    size_t l;
    fy_rcache_region_range(r1, &a, &l);
    FY_ASSERT(a == b);
    FY_ASSERT_EQ(l, 3 * ps);
    fy_rcache_put(rc, r1);
    fy_rcache_put(rc, r2);
    fy_rcache_put(rc, r3);
    /* unused but kept: the next get is a hit */
    FY_ASSERT_EQ(f.deregs, 0);
    FY_ASSERT_OK(fy_rcache_get(rc, b + ps, ps, RD, &r1));
    FY_ASSERT(r1 == r2);
    fy_rcache_put(rc, r1);
    fy_rcache_stats_t s;
    fy_rcache_get_stats(rc, &s);
    FY_ASSERT_EQ(s.hits, 3);
    FY_ASSERT_EQ(s.misses, 1);
    FY_ASSERT_EQ(f.regs, 1);
    FY_ASSERT_EQ(s.entries, 1);
    FY_ASSERT_EQ(s.bytes, 3 * ps);
    /* a bad argument */
    FY_ASSERT_STATUS(fy_rcache_get(rc, b, 0, RD, &r1), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_rcache_get(rc, NULL, 8, RD, &r1), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_rcache_get(rc, (void *)(UINTPTR_MAX - 4), 8, RD, &r1),
                     FERRY_ERR_INVALID_PARAM);
    /* a failed registration is returned and leaves nothing */
    unsigned char *c = map(ps, 'c');
    f.fail_next = 1;
    FY_ASSERT_STATUS(fy_rcache_get(rc, c, 8, RD, &r1), FERRY_ERR_IO);
    fy_rcache_get_stats(rc, &s);
    FY_ASSERT_EQ(s.entries, 1);
    finish(rc, &f);
    munmap(b, 4 * ps);
    munmap(c, ps);
}

static void access_and_merge(void)
{
    fake_t f;
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 100);
    size_t ps = page();
    unsigned char *b = map(8 * ps, 'm');
    fy_rcache_region_t *r1, *r2, *r3, *r4;
    FY_ASSERT_OK(fy_rcache_get(rc, b, ps, RD, &r1));
    /* more access on the same pages: a new registration with both, the old one retires */
    FY_ASSERT_OK(fy_rcache_get(rc, b, ps, RD | WR, &r2));
    FY_ASSERT(r2 != r1);
    FY_ASSERT_EQ(memh(r2)->access, RD | WR);
    FY_ASSERT_EQ(f.deregs, 0); /* r1 still in use */
    fy_rcache_put(rc, r1);
    FY_ASSERT_EQ(f.deregs, 1); /* retired and unused: gone */
    /* RD alone is served by the RD|WR one */
    FY_ASSERT_OK(fy_rcache_get(rc, b, ps, RD, &r1));
    FY_ASSERT(r1 == r2);
    fy_rcache_put(rc, r1);
    fy_rcache_put(rc, r2);
    /* two separate regions, then a range over both: one union registration */
    FY_ASSERT_OK(fy_rcache_get(rc, b + 4 * ps, ps, RD, &r3));
    FY_ASSERT_OK(fy_rcache_get(rc, b + ps / 2, 4 * ps, RD, &r4));
    FY_ASSERT_U64_EQ(memh(r4)->addr, (uintptr_t)b);
    FY_ASSERT_EQ(memh(r4)->len, 5 * ps);
    FY_ASSERT_EQ(memh(r4)->access, RD | WR);
    fy_rcache_put(rc, r3);
    fy_rcache_put(rc, r4);
    fy_rcache_stats_t s;
    fy_rcache_get_stats(rc, &s);
    FY_ASSERT_EQ(s.entries, 1); /* only the union is left */
    FY_ASSERT_EQ(f.live, 1);
    /* and it serves both */
    FY_ASSERT_OK(fy_rcache_get(rc, b + 4 * ps + 8, 16, RD, &r1));
    FY_ASSERT(r1 == r4);
    fy_rcache_put(rc, r1);
    finish(rc, &f);
    munmap(b, 8 * ps);
}

static void lru_bounds(void)
{
    fake_t f;
    size_t ps = page();
    /* by entries */
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 2);
    unsigned char *b = map(8 * ps, 'l');
    fy_rcache_region_t *r[4];
    for (int i = 0; i < 3; i++) /* three in use: above the bound, none evicted */
        FY_ASSERT_OK(fy_rcache_get(rc, b + 2 * i * ps, 8, RD, &r[i]));
    FY_ASSERT_EQ(f.deregs, 0);
    fy_rcache_put(rc, r[1]);   /* LRU order: 1, then 0, then 2 */
    FY_ASSERT_EQ(f.deregs, 1); /* 3 > 2: the one unused goes */
    fy_rcache_put(rc, r[0]);
    fy_rcache_put(rc, r[2]);
    FY_ASSERT_EQ(f.deregs, 1); /* two left: within the bound */
    /* touch 0, then a new one evicts the least recently used: 2 */
    FY_ASSERT_OK(fy_rcache_get(rc, b, 8, RD, &r[0]));
    fy_rcache_put(rc, r[0]);
    FY_ASSERT_OK(fy_rcache_get(rc, b + 6 * ps, 8, RD, &r[3]));
    fy_rcache_put(rc, r[3]);
    FY_ASSERT_EQ(f.deregs, 2);
    FY_ASSERT_OK(fy_rcache_get(rc, b, 8, RD, &r[0])); /* 0 is still there */
    fy_rcache_stats_t s;
    fy_rcache_get_stats(rc, &s);
    FY_ASSERT_EQ(s.evictions, 2);
    FY_ASSERT_EQ(s.hits, 2);
    fy_rcache_put(rc, r[0]);
    finish(rc, &f);
    /* by bytes: 3 pages fit, a fourth evicts */
    rc = make(&f, 1, 3 * ps, 100);
    for (int i = 0; i < 4; i++) {
        FY_ASSERT_OK(fy_rcache_get(rc, b + 2 * i * ps, ps, RD, &r[i]));
        fy_rcache_put(rc, r[i]);
    }
    fy_rcache_get_stats(rc, &s);
    FY_ASSERT_EQ(s.evictions, 1);
    FY_ASSERT_EQ(s.bytes, 3 * ps);
    FY_ASSERT_EQ(f.deregs, 1);
    finish(rc, &f);
    munmap(b, 8 * ps);
}

/* FERRY_RCACHE=n, and no monitor: every get registers exactly the range, every put
 * deregisters. */
static void pass_through(void)
{
    fake_t f;
    size_t ps = page();
    unsigned char *b = map(2 * ps, 'p');
    for (int mode = 0; mode < 3; mode++) {
        fy_rcache_t *rc;
        if (mode == 0) {
            rc = make(&f, 0, SIZE_MAX, 100);
        } else if (mode == 1) {
            fy_memmon_test_disable(1);
            rc = make(&f, 1, SIZE_MAX, 100);
            fy_memmon_test_disable(0);
        } else {
            /* from the environment */
            setenv("FERRY_RCACHE", "n", 1);
            memset(&f, 0, sizeof(f));
            fy_rcache_params_t p = {
                .memh_size = sizeof(fake_memh_t), .reg = fake_reg, .dereg = fake_dereg, .arg = &f};
            FY_ASSERT_OK(fy_rcache_create(&p, &rc));
            unsetenv("FERRY_RCACHE");
        }
        FY_ASSERT(!fy_rcache_is_caching(rc));
        fy_rcache_region_t *r1, *r2;
        FY_ASSERT_OK(fy_rcache_get(rc, b + 10, 20, RD, &r1));
        FY_ASSERT_OK(fy_rcache_get(rc, b + 10, 20, RD, &r2));
        FY_ASSERT(r1 != r2);
        FY_ASSERT_EQ(f.regs, 2);
        FY_ASSERT_U64_EQ(memh(r1)->addr, (uintptr_t)(b + 10));
        FY_ASSERT_EQ(memh(r1)->len, 20);
        fy_rcache_put(rc, r1);
        FY_ASSERT_EQ(f.deregs, 1);
        fy_rcache_put(rc, r2);
        FY_ASSERT_EQ(f.deregs, 2);
        finish(rc, &f);
    }
    /* a bad FERRY_RCACHE is refused */
    setenv("FERRY_RCACHE", "maybe", 1);
    fy_rcache_params_t p = {.memh_size = 8, .reg = fake_reg, .dereg = fake_dereg, .arg = &f};
    fy_rcache_t *rc = NULL;
    FY_ASSERT_STATUS(fy_rcache_create(&p, &rc), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT(rc == NULL);
    unsetenv("FERRY_RCACHE");
    munmap(b, 2 * ps);
}

/* Map len bytes again at exactly b, which the caller just unmapped; NULL when another thread
 * took the hole meanwhile (under ASan the runtime maps memory in the monitor's thread): a test
 * never maps MAP_FIXED over memory that is not its own. */
static unsigned char *map_again(unsigned char *b, size_t len, int c)
{
    unsigned char *n = mmap(b, len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (n == MAP_FAILED)
        return NULL;
    if (n != b) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        munmap(n, len);
        return NULL;
    }
    memset(n, c, len);
    return n;
}

/* The case: register a buffer, unmap it, map a new one at the same address with other
 * contents, get it again: a new registration of the new memory, never the stale one.  how 0:
 * munmap, then mmap at the same address; how 1: mmap MAP_FIXED straight over it. */
static void remap_same_address(void)
{
    fake_t f;
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 100);
    FY_ASSERT(fy_rcache_is_caching(rc));
    size_t ps = page(), len = 4 * ps;
    for (int how = 0; how < 2; how++) {
        unsigned char *b = NULL, *n = NULL;
        fy_rcache_region_t *r1, *r2;
        fy_rcache_stats_t s0, s1;
        uint64_t id1 = 0;
        for (int attempt = 0; n == NULL; attempt++) {
            FY_ASSERT_LT(attempt, 20);
            b = map(len, 'A');
            FY_ASSERT_OK(fy_rcache_get(rc, b, len, RD, &r1));
            id1 = memh(r1)->id;
            FY_ASSERT_EQ(memh(r1)->saw, 'A');
            fy_rcache_put(rc, r1);
            fy_rcache_get_stats(rc, &s0);
            if (how == 0) {
                FY_ASSERT_EQ(munmap(b, len), 0);
                n = map_again(b, len, 'B');
            } else {
                n = mmap(b, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                         -1, 0);
                FY_ASSERT(n == b);
                memset(n, 'B', len);
            }
        }
        fy_rcache_get_stats(rc, &s1);
        FY_ASSERT_EQ(s1.invalidations, s0.invalidations + 1); /* seen as soon as munmap returned */
        long deregs = f.deregs;
        FY_ASSERT_OK(fy_rcache_get(rc, n, len, RD, &r2));
        FY_ASSERT_NE(memh(r2)->id, id1);
        FY_ASSERT_EQ(memh(r2)->saw, 'B');
        FY_ASSERT_EQ(f.deregs, deregs + 1); /* the stale one is gone */
        fy_rcache_put(rc, r2);
        FY_ASSERT_OK(fy_rcache_get(rc, n, len, RD, &r1)); /* the new one is cached */
        FY_ASSERT(r1 == r2);
        fy_rcache_put(rc, r1);
        fy_rcache_get_stats(rc, &s1);
        FY_ASSERT_EQ(s1.misses, s0.misses + 1);
        FY_ASSERT_EQ(s1.hits, s0.hits + 1);
        munmap(n, len);
    }
    FY_ASSERT_GE(fy_memmon_events(), 3);
    finish(rc, &f);
}

/* Unmapped while in use: the user keeps its (stale) region until it puts it, which
 * deregisters it; a get meanwhile registers the new memory. */
static void unmap_while_held(void)
{
    fake_t f;
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 100);
    size_t ps = page(), len = 2 * ps;
    fy_rcache_region_t *r1, *r2;
    unsigned char *n = NULL;
    for (int attempt = 0; n == NULL; attempt++) {
        FY_ASSERT_LT(attempt, 20);
        unsigned char *b = map(len, 'A');
        FY_ASSERT_OK(fy_rcache_get(rc, b, len, RD, &r1));
        FY_ASSERT_EQ(munmap(b, len), 0);
        n = map_again(b, len, 'B');
        if (n == NULL)
            fy_rcache_put(rc, r1);
    }
    long deregs = f.deregs;
    FY_ASSERT_OK(fy_rcache_get(rc, n, len, RD, &r2));
    FY_ASSERT(r2 != r1);
    FY_ASSERT_EQ(memh(r2)->saw, 'B');
    FY_ASSERT_EQ(f.deregs, deregs);
    fy_rcache_put(rc, r1); /* its last user: deregistered now */
    FY_ASSERT_EQ(f.deregs, deregs + 1);
    fy_rcache_put(rc, r2);
    FY_ASSERT_EQ(f.live, 1);
    finish(rc, &f);
    munmap(n, len);
}

/* Other ways memory goes: madvise(DONTNEED), mremap moving it, a partial munmap, and free()
 * of a block the C library mapped (not under ASan, whose allocator keeps freed blocks). */
static void other_unmaps(void)
{
    fake_t f;
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 100);
    size_t ps = page(), len = 4 * ps;
    fy_rcache_region_t *r1, *r2;
    fy_rcache_stats_t s;

    unsigned char *b = map(len, 'A');
    FY_ASSERT_OK(fy_rcache_get(rc, b, len, RD, &r1));
    fy_rcache_put(rc, r1);
    FY_ASSERT_EQ(madvise(b + ps, ps, MADV_DONTNEED), 0);
    b[ps] = 'Z';
    FY_ASSERT_OK(fy_rcache_get(rc, b, len, RD, &r2));
    FY_ASSERT_EQ(memh(r2)->saw, 'A');
    FY_ASSERT_EQ(f.regs, 2);
    fy_rcache_put(rc, r2);

    /* a partial munmap of the last page invalidates the whole region */
    FY_ASSERT_EQ(munmap(b + 3 * ps, ps), 0);
    FY_ASSERT_OK(fy_rcache_get(rc, b, ps, RD, &r1));
    FY_ASSERT_EQ(f.regs, 3);
    fy_rcache_put(rc, r1);

    /* mremap moving the pages away: the old range is invalid */
    FY_ASSERT_OK(fy_rcache_get(rc, b, 3 * ps, RD, &r1));
    fy_rcache_put(rc, r1);
    long regs = f.regs;
    unsigned char *m = mremap(b, 3 * ps, 16 * ps, MREMAP_MAYMOVE);
    FY_ASSERT(m != MAP_FAILED);
    fy_rcache_get_stats(rc, &s);
    if (m != b) {
        unsigned char *n = mmap(b, 3 * ps, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (n == b) {
            FY_ASSERT_OK(fy_rcache_get(rc, b, 3 * ps, RD, &r1));
            FY_ASSERT_EQ(f.regs, regs + 1);
            fy_rcache_put(rc, r1);
            munmap(n, 3 * ps);
        }
    }
    munmap(m, 16 * ps);
    fy_rcache_get_stats(rc, &s);
    FY_ASSERT_GE(s.invalidations, 3);

#ifndef FYTEST_LSAN
    /* glibc maps a block this large and unmaps it at free */
    size_t big = 8 << 20;
    unsigned char *p = malloc(big);
    FY_ASSERT(p != NULL);
    memset(p, 'A', big);
    FY_ASSERT_OK(fy_rcache_get(rc, p + 4096, big / 2, RD, &r1));
    uint64_t id1 = memh(r1)->id;
    fy_rcache_put(rc, r1);
    free(p);
    unsigned char *q = malloc(big);
    FY_ASSERT(q != NULL);
    memset(q, 'B', big);
    FY_ASSERT_OK(fy_rcache_get(rc, q + 4096, big / 2, RD, &r2));
    FY_ASSERT_NE(memh(r2)->id, id1);
    FY_ASSERT_EQ(memh(r2)->saw, 'B');
    fy_rcache_put(rc, r2);
    free(q);
#endif
    finish(rc, &f);
}

/* A child forked from a process with a monitor has none: it caches nothing. */
static void forked_child(void)
{
    fake_t f;
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 100);
    size_t ps = page();
    unsigned char *b = map(ps, 'f');
    fy_rcache_region_t *r1, *r2;
    FY_ASSERT_OK(fy_rcache_get(rc, b, 8, RD, &r1));
    fy_rcache_put(rc, r1);
    int pfd[2];
    FY_ASSERT_EQ(pipe(pfd), 0);
    pid_t pid = fork();
    FY_ASSERT(pid >= 0);
    if (pid == 0) {
        int ok = 1;
        ok &= fy_rcache_get(rc, b, 8, RD, &r1) == FERRY_OK;
        ok &= fy_rcache_get(rc, b, 8, RD, &r2) == FERRY_OK && r1 != r2;
        ok &= f.regs == 3;
        /* and munmap here does not hang (the child inherits no watched range) */
        ok &= munmap(b, ps) == 0;
        char c = ok ? 'y' : 'n';
        if (write(pfd[1], &c, 1) != 1)
            _exit(2);
        _exit(0);
    }
    char c = 0;
    FY_ASSERT_EQ(read(pfd[0], &c, 1), 1);
    FY_ASSERT_EQ(c, 'y');
    int st;
    FY_ASSERT_EQ(waitpid(pid, &st, 0), pid);
    close(pfd[0]);
    close(pfd[1]);
    finish(rc, &f);
    munmap(b, ps);
}

/* Gets from this thread while another unmaps and maps again: every get after a remap (told
 * through a sequence number) registers what the new mapping holds. */
typedef struct {
    unsigned char *b;
    size_t len;
    int rounds;
    volatile int gen;
} race_t;

static void *remapper(void *arg)
{
    race_t *r = arg;
    for (int i = 1; i <= r->rounds; i++) {
        unsigned char *n = mmap(r->b, r->len, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (n != r->b)
            abort();
        memset(n, 'a' + i % 26, r->len);
        __atomic_store_n(&r->gen, i, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&r->gen, __ATOMIC_SEQ_CST) != -i) /* the getter checked */
            sched_yield();
    }
    return NULL;
}

static void threads(void)
{
    fake_t f;
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 100);
    race_t r = {.len = 2 * page(), .rounds = 200};
    r.b = map(r.len, 'a');
    pthread_t th;
    FY_ASSERT_EQ(pthread_create(&th, NULL, remapper, &r), 0);
    for (int i = 1; i <= r.rounds; i++) {
        while (__atomic_load_n(&r.gen, __ATOMIC_SEQ_CST) != i)
            sched_yield();
        fy_rcache_region_t *x, *y;
        FY_ASSERT_OK(fy_rcache_get(rc, r.b, r.len, RD, &x));
        FY_ASSERT_EQ(memh(x)->saw, 'a' + i % 26);
        FY_ASSERT_OK(fy_rcache_get(rc, r.b, r.len, RD, &y));
        FY_ASSERT(x == y);
        fy_rcache_put(rc, x);
        fy_rcache_put(rc, y);
        __atomic_store_n(&r.gen, -i, __ATOMIC_SEQ_CST);
    }
    pthread_join(th, NULL);
    FY_ASSERT_EQ(f.regs, r.rounds);
    finish(rc, &f);
    munmap(r.b, r.len);
}

/* Without privilege (vm.unprivileged_userfaultfd=0 is the default): the monitor still works,
 * through UFFD_USER_MODE_ONLY (Linux 5.11 on).  As root, the case drops to nobody first. */
static void unprivileged(void)
{
    struct utsname u;
    int major = 0, minor = 0;
    FY_ASSERT_EQ(uname(&u), 0);
    sscanf(u.release, "%d.%d", &major, &minor);
    if (getuid() == 0)
        FY_ASSERT_EQ(setresuid(65534, 65534, 65534), 0);
    FY_ASSERT_NE(geteuid(), 0);
    fake_t f;
    fy_rcache_t *rc = make(&f, 1, SIZE_MAX, 100);
    if (major < 5 || (major == 5 && minor < 11)) {
        printf("kernel %s: no UFFD_USER_MODE_ONLY, nothing to check\n", u.release);
        finish(rc, &f);
        return;
    }
    FY_ASSERT(fy_rcache_is_caching(rc));
    size_t ps = page();
    unsigned char *b = map(ps, 'A');
    fy_rcache_region_t *r1, *r2;
    FY_ASSERT_OK(fy_rcache_get(rc, b, ps, RD, &r1));
    fy_rcache_put(rc, r1);
    unsigned char *n =
        mmap(b, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    FY_ASSERT(n == b);
    memset(n, 'B', ps);
    FY_ASSERT_OK(fy_rcache_get(rc, n, ps, RD, &r2));
    FY_ASSERT_EQ(memh(r2)->saw, 'B');
    FY_ASSERT_EQ(f.regs, 2);
    fy_rcache_put(rc, r2);
    finish(rc, &f);
    munmap(n, ps);
}

/* FERRY_RCACHE* are known variables (no "nobody reads it" warning). */
static void known_variables(void)
{
    unsigned before = fy_config_warn_unused(NULL, 0, NULL);
    setenv("FERRY_RCACHE", "y", 1);
    setenv("FERRY_RCACHE_MAX_BYTES", "1m", 1);
    setenv("FERRY_RCACHE_MAX_ENTRIES", "10", 1);
    FY_ASSERT_EQ(fy_config_warn_unused(NULL, 0, NULL), before);
    setenv("FERRY_RCACHE_MAX_BYTEZ", "1m", 1);
    FY_ASSERT_EQ(fy_config_warn_unused(NULL, 0, NULL), before + 1);
    /* and the values are read */
    fake_t f;
    memset(&f, 0, sizeof(f));
    fy_rcache_params_t p = {
        .memh_size = sizeof(fake_memh_t), .reg = fake_reg, .dereg = fake_dereg, .arg = &f};
    fy_rcache_t *rc;
    FY_ASSERT_OK(fy_rcache_create(&p, &rc));
    size_t ps = page();
    unsigned char *b = map(40 * ps, 'k');
    for (int i = 0; i < 20; i++) {
        fy_rcache_region_t *r;
        FY_ASSERT_OK(fy_rcache_get(rc, b + 2 * i * ps, 8, RD, &r));
        fy_rcache_put(rc, r);
    }
    fy_rcache_stats_t s;
    fy_rcache_get_stats(rc, &s);
    FY_ASSERT_EQ(s.entries, 10);
    FY_ASSERT_EQ(s.evictions, 10);
    finish(rc, &f);
    munmap(b, 40 * ps);
}

FYTEST_MAIN(FYTEST_CASE(hits), FYTEST_CASE(access_and_merge), FYTEST_CASE(lru_bounds),
            FYTEST_CASE(pass_through), FYTEST_CASE(remap_same_address),
            FYTEST_CASE(unmap_while_held), FYTEST_CASE(other_unmaps), FYTEST_CASE(forked_child),
            FYTEST_CASE(threads), FYTEST_CASE(known_variables), FYTEST_CASE(unprivileged))
