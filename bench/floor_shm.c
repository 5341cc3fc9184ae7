/*
 * floor_shm.c - the floors of shared-memory communication on this host, which no library can
 * beat: what bench/run.sh reports ferry's distance to.
 *
 *   floor_shm [-C cpu0,cpu1] [-n iters] [-m cacheline,copies,rma] [-s sizes]
 *
 * -m picks the groups of rows (default cacheline,copies: what bench/run.sh reads); -s the
 * sizes of the rma rows (default 8,64; at most 16 MiB).
 *
 *   cacheline_lat  two processes ping-pong one cache line in shared memory (each spins on
 *                  the line until the other's sequence number appears, then writes its own);
 *                  one-way latency = round trip / 2, median of per-iteration samples, in us.
 *                  It is the cost of moving one line between two cores and nothing else.
 *   cma_read_1m    process_vm_readv of 1 MiB from another process into a local buffer
 *                  (single copy across address spaces, what shm does for large transfers),
 *                  MB/s (10^6 bytes), median of 5 timed runs.
 *   memcpy_1m      memcpy of 1 MiB within one process, MB/s: the copy bandwidth of one core.
 *   memcpy_16m     the same for 16 MiB: a working set past this host's share of the L3, so
 *                  from memory (what the outbox's largest messages cost one core);
 *                  memcpy_4m, 4 MiB, inside it.
 *   nt_16m         16 MiB copied with streamed (non-temporal) stores, as the outbox does from
 *                  8 MiB: one core's best copy out of memory (nt_4m: 4 MiB the same way).
 *   split_16m      16 MiB into shared memory by two processes at once: one copies the first
 *                  half with streamed stores, the other pulls the second half from the first
 *                  one's memory with process_vm_readv (the outbox's split messages).
 *   put_lat_<size>  (rma) ferry_perf's put_lat with nothing of a library in it: each process
 *                  owns a region of shared memory (a page, or <size> rounded up to pages)
 *                  and polls the last byte of the <size> bytes; the initiator copies <size>
 *                  bytes, the flag in the last one, into the peer's region and waits for
 *                  the peer's copy into its own.  One-way = round trip / 2.  This host
 *                  shows a step here that no library adds: a flag in the last byte of a
 *                  2 KiB-aligned block (sizes 2048, 4096, 6144, 16 KiB, 64 KiB...) costs
 *                  50-90 ns more one-way than one byte further (bench/RESULTS.md).
 *   get_lat_<size>  (rma) ferry_perf's get_lat loop around a plain copy of <size> bytes out of a
 *                  shared region nobody writes (as a get of mapped memory is): what one whole
 *                  get costs with the timing loop around it and no library.
 *   clock_step     (rma) the same loop with nothing in it: the cost of reading the clock.
 * Each rma row is timed as ferry_perf times it (the TSC read once per iteration) and printed
 * four ways: _p50_us, the median of the per-iteration samples (what bench/run.sh reports for
 * ferry_perf and ucx_perftest; it moves in the steps the clock advances by); _avg_us, the
 * mean (exact: the samples add up to the whole run); _b64_us, the median of the means of
 * batches of 64 iterations (the resolution of the mean, and a preempted batch drops out);
 * and _min_us.  -n is their iteration count too.
 *
 * Output: CSV lines "floor,<name>,<value>".
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MIB           (1u << 20)
#define FLOOR_RMA_MAX (16u * MIB) /* the rma rows' largest size */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The clock ferry_perf reads: the TSC, calibrated against CLOCK_MONOTONIC. */
static inline uint64_t ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return (uint64_t)hi << 32 | lo;
#else
    return (uint64_t)now_ns();
#endif
}

static double ns_per_tick(void)
{
    static double r;
    if (r == 0) {
        double n0 = now_ns();
        uint64_t c0 = ticks();
        while (now_ns() - n0 < 50e6)
            ;
        r = (now_ns() - n0) / (double)(ticks() - c0);
    }
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cpu_of(const char *list, int index)
{
    int cpus[64], n = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save))
        cpus[n++] = atoi(t);
    free(copy);
    return n ? cpus[index % n] : -1;
}

static void pin(const char *list, int index)
{
    int cpu = list ? cpu_of(list, index) : -1;
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

static void cacheline(const char *cpus, long iters)
{
    volatile uint64_t *line =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double *samples = malloc(sizeof(double) * (size_t)iters);
    long warmup = iters / 10;
    if (line == MAP_FAILED || samples == NULL)
        return;
    line[0] = 0;
    pid_t child = fork();
    if (child == 0) {
        pin(cpus, 1);
        for (uint64_t i = 1; i <= (uint64_t)(warmup + iters); i++) {
            while (__atomic_load_n(&line[0], __ATOMIC_ACQUIRE) != 2 * i - 1)
                ;
            __atomic_store_n(&line[0], 2 * i, __ATOMIC_RELEASE);
        }
        _exit(0);
    }
    pin(cpus, 0);
    double t_prev = now_ns();
    for (uint64_t i = 1; i <= (uint64_t)(warmup + iters); i++) {
        __atomic_store_n(&line[0], 2 * i - 1, __ATOMIC_RELEASE);
        while (__atomic_load_n(&line[0], __ATOMIC_ACQUIRE) != 2 * i)
            ;
        double t = now_ns();
        if ((long)i > warmup)
            samples[i - 1 - (uint64_t)warmup] = (t - t_prev) / 2;
        t_prev = t;
    }
    waitpid(child, NULL, 0);
    qsort(samples, (size_t)iters, sizeof(double), cmp_double);
    printf("floor,cacheline_lat_us,%.4f\n", samples[(iters - 1) / 2] / 1e3);
    free(samples);
    munmap((void *)line, 4096);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The four figures of one rma row, from per-iteration tick samples (divided by div: 2 for a
 * ping-pong's one-way time). */
static void rma_row(const char *name, uint64_t *t, long n, double div)
{
    enum { B = 64 };
    long nb = n / B;
    double tick = ns_per_tick() / div / 1e3, sum = 0,
           *batch = malloc(sizeof(double) * (size_t)(nb + 1));
    if (batch == NULL)
        return;
    for (long b = 0; b < nb; b++) {
        double bs = 0;
        for (long i = b * B; i < (b + 1) * B; i++)
            bs += (double)t[i];
        batch[b] = bs / B;
    }
    for (long i = 0; i < n; i++)
        sum += (double)t[i];
    qsort(t, (size_t)n, sizeof(*t), cmp_u64);
    qsort(batch, (size_t)nb, sizeof(double), cmp_double);
    printf("floor,%s_p50_us,%.4f\n", name, (double)t[(n - 1) / 2] * tick);
    printf("floor,%s_avg_us,%.4f\n", name, sum / (double)n * tick);
    if (nb > 0)
        printf("floor,%s_b64_us,%.4f\n", name, batch[(nb - 1) / 2] * tick);
    printf("floor,%s_min_us,%.4f\n", name, (double)t[0] * tick);
    free(batch);
}

/* put_lat without a library: each side polls the last byte of its own region (a page, or the
 * size rounded up to pages) and copies size bytes, the flag last, into the peer's, as
 * ferry_perf's put_lat and ucx_perftest's ucp_put_lat do with a put into memory the peer
 * mapped. */
static void put_floor(const char *cpus, long iters, size_t size)
{
    long warmup = iters / 10 > 10 ? iters / 10 : 10;
    size_t region = (size + 4095) / 4096 * 4096;
    if (size == 0 || size > FLOOR_RMA_MAX)
        return;
    uint8_t *pages =
        mmap(NULL, 2 * region, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    uint64_t *t = malloc(sizeof(uint64_t) * (size_t)iters);
    uint8_t *src = aligned_alloc(4096, region);
    if (pages == MAP_FAILED || t == NULL || src == NULL)
        return;
    memset(pages, 0, 2 * region);
    memset(src, 7, region);
    (void)ns_per_tick(); /* calibrated before the child exists */
    pid_t child = fork();
    if (child == 0) {
        uint8_t *mine = pages + region, *peer = pages;
        pin(cpus, 1);
        for (long i = 0; i < warmup + iters; i++) {
            uint8_t flag = (uint8_t)(i % 255 + 1);
            while (__atomic_load_n(&mine[size - 1], __ATOMIC_ACQUIRE) != flag)
                ;
            src[size - 1] = flag;
            memcpy(peer, src, size);
            __asm__ __volatile__("" ::: "memory");
        }
        _exit(0);
    }
    uint8_t *mine = pages, *peer = pages + region;
    pin(cpus, 0);
    uint64_t t_prev = ticks();
    for (long i = 0; i < warmup + iters; i++) {
        uint8_t flag = (uint8_t)(i % 255 + 1);
        src[size - 1] = flag;
        memcpy(peer, src, size);
        __asm__ __volatile__("" ::: "memory");
        while (__atomic_load_n(&mine[size - 1], __ATOMIC_ACQUIRE) != flag)
            ;
        uint64_t now = ticks();
        if (i >= warmup)
            t[i - warmup] = now - t_prev;
        t_prev = now;
    }
    waitpid(child, NULL, 0);
    char name[32];
    snprintf(name, sizeof(name), "put_lat_%zu", size);
    rma_row(name, t, iters, 2.0);
    free(t);
    free(src);
    munmap(pages, 2 * region);
}

/* get_lat's loop around a plain copy out of a shared region nobody writes (size 0: the loop
 * and the clock alone). */
static void get_floor(const char *cpus, long iters, size_t size)
{
    long warmup = iters / 10 > 10 ? iters / 10 : 10;
    size_t region = size > 4096 ? (size + 4095) / 4096 * 4096 : 4096;
    if (size > FLOOR_RMA_MAX)
        return;
    uint8_t *page = mmap(NULL, region, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    uint64_t *t = malloc(sizeof(uint64_t) * (size_t)iters);
    uint8_t *dst = aligned_alloc(4096, region);
    if (page == MAP_FAILED || t == NULL || dst == NULL)
        return;
    memset(page, 5, region);
    memset(dst, 0, region);
    pin(cpus, 0);
    (void)ns_per_tick();
    uint64_t t_prev = ticks();
    for (long i = 0; i < warmup + iters; i++) {
        memcpy(dst, page, size);
        __asm__ __volatile__("" ::"r"(dst) : "memory");
        uint64_t now = ticks();
        if (i >= warmup)
            t[i - warmup] = now - t_prev;
        t_prev = now;
    }
    char name[32];
    if (size == 0)
        snprintf(name, sizeof(name), "clock_step");
    else
        snprintf(name, sizeof(name), "get_lat_%zu", size);
    rma_row(name, t, iters, 1.0);
    free(t);
    free(dst);
    munmap(page, region);
}

static double median5(double *v)
{
    qsort(v, 5, sizeof(double), cmp_double);
    return v[2];
}

/* 16 MiB with streamed stores (a plain copy where the compiler has no SSE2). */
static void copy_nt(char *d, const char *s, size_t n)
{
#if defined(__SSE2__)
    for (size_t i = 0; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    _mm_sfence();
#else
    memcpy(d, s, n);
#endif
}

/* One core, 16 MiB: plain memcpy and streamed stores, into shared memory as the outbox is. */
static void copies_16m(const char *cpus)
{
    size_t n = 16 * (size_t)MIB;
    char *src = aligned_alloc(4096, n);
    char *dst = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double runs[5];
    int reps = 16;
    if (src == NULL || dst == MAP_FAILED)
        return;
    memset(src, 1, n);
    memset(dst, 2, n);
    pin(cpus, 0);
    for (size_t m = 4; m <= 16; m *= 4) { /* 4 MiB (inside the L3) and 16 MiB */
        size_t len = m * MIB;
        int k = reps * (int)(16 / m);
        for (int nt = 0; nt < 2; nt++) {
            for (int r = 0; r < 5; r++) {
                double t0 = now_ns();
                for (int i = 0; i < k; i++) {
                    if (nt)
                        copy_nt(dst, src, len);
                    else
                        memcpy(dst, src, len);
                    __asm__ __volatile__("" ::"r"(dst) : "memory");
                }
                runs[r] = (double)len * k / (now_ns() - t0) * 1e3;
            }
            printf("floor,%s_%zum_MBps,%.0f\n", nt ? "nt" : "memcpy", m, median5(runs));
        }
    }

    /* Two processes: we copy the first half, the child pulls the second from our src. */
    int go[2], done[2];
    if (pipe(go) != 0 || pipe(done) != 0)
        return;
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        char c;
        pin(cpus, 1);
        while (read(go[0], &c, 1) == 1 && c == 'g') {
            struct iovec l = {dst + n / 2, n / 2}, rv = {src + n / 2, n / 2};
            c = process_vm_readv(parent, &l, 1, &rv, 1, 0) == (ssize_t)(n / 2) ? 'd' : 'e';
            if (write(done[1], &c, 1) != 1)
                break;
        }
        _exit(0);
    }
    int ok = 1;
    for (int r = 0; r < 5 && ok; r++) {
        double t0 = now_ns();
        for (int i = 0; i < reps && ok; i++) {
            char c = 'g';
            ok = write(go[1], &c, 1) == 1;
            copy_nt(dst, src, n / 2);
            ok = ok && read(done[0], &c, 1) == 1 && c == 'd';
        }
        runs[r] = (double)n * reps / (now_ns() - t0) * 1e3;
    }
    char q = 'q';
    if (write(go[1], &q, 1) != 1)
        ok = 0;
    waitpid(child, NULL, 0);
    if (ok)
        printf("floor,split_16m_MBps,%.0f\n", median5(runs));
    else
        printf("floor,split_16m_MBps,n/a\n");
    free(src);
    munmap(dst, n);
}

static void copies(const char *cpus)
{
    char *src = aligned_alloc(4096, MIB), *dst = aligned_alloc(4096, MIB);
    double runs[5];
    int reps = 200;
    memset(src, 1, MIB);
    memset(dst, 2, MIB);

    pin(cpus, 0);
    for (int r = 0; r < 5; r++) {
        double t0 = now_ns();
        for (int i = 0; i < reps; i++) {
            memcpy(dst, src, MIB);
            __asm__ __volatile__("" ::"r"(dst) : "memory");
        }
        runs[r] = (double)MIB * reps / (now_ns() - t0) * 1e3;
    }
    printf("floor,memcpy_1m_MBps,%.0f\n", median5(runs));

    /* The child keeps src (same address after fork); the parent reads it across. */
    int go[2];
    if (pipe(go) != 0)
        return;
    pid_t child = fork();
    if (child == 0) {
        char c;
        pin(cpus, 1);
        close(go[1]);
        if (read(go[0], &c, 1) < 0) /* until the parent is done */
            _exit(1);
        _exit(0);
    }
    close(go[0]);
    struct iovec l = {dst, MIB}, rv = {src, MIB};
    int ok = 1;
    for (int r = 0; r < 5 && ok; r++) {
        double t0 = now_ns();
        for (int i = 0; i < reps && ok; i++)
            ok = process_vm_readv(child, &l, 1, &rv, 1, 0) == (ssize_t)MIB;
        runs[r] = (double)MIB * reps / (now_ns() - t0) * 1e3;
    }
    close(go[1]);
    waitpid(child, NULL, 0);
    if (ok)
        printf("floor,cma_read_1m_MBps,%.0f\n", median5(runs));
    else
        printf("floor,cma_read_1m_MBps,n/a\n");
    free(src);
    free(dst);
}

int main(int argc, char **argv)
{
    const char *cpus = NULL, *modes = "cacheline,copies", *sizes = "8,64";
    long iters = 200000;
    int c;
    while ((c = getopt(argc, argv, "C:n:m:s:")) != -1) {
        if (c == 'C')
            cpus = optarg;
        else if (c == 'n')
            iters = atol(optarg) > 0 ? atol(optarg) : iters;
        else if (c == 'm')
            modes = optarg;
        else if (c == 's')
            sizes = optarg;
        else {
            fprintf(stderr, "usage: floor_shm [-C cpu0,cpu1] [-n iters] [-m cacheline,copies,rma] "
                            "[-s sizes]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char m[256];
    snprintf(m, sizeof(m), ",%s,", modes);
    if (strstr(m, ",cacheline,"))
        cacheline(cpus, iters);
    if (strstr(m, ",copies,")) {
        copies(cpus);
        copies_16m(cpus);
    }
    if (strstr(m, ",rma,")) {
        char *copy = strdup(sizes), *save = NULL;
        get_floor(cpus, iters, 0);
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            put_floor(cpus, iters, (size_t)atol(tok));
            get_floor(cpus, iters, (size_t)atol(tok));
        }
        free(copy);
    }
    return 0;
}
