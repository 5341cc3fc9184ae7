/*
 * floor_shm.c - the floors of shared-memory communication on this host, which no library can
 * beat: what bench/run.sh reports ferry's distance to.
 *
 *   floor_shm [-C cpu0,cpu1] [-n iters]
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
 *                  from memory (what the outbox's largest messages cost one core).
 *   nt_16m         16 MiB copied with streamed (non-temporal) stores, as the outbox does from
 *                  8 MiB: one core's best copy out of memory.
 *   split_16m      16 MiB into shared memory by two processes at once: one copies the first
 *                  half with streamed stores, the other pulls the second half from the first
 *                  one's memory with process_vm_readv (the outbox's split messages).
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

#define MIB (1u << 20)

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
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
    for (int nt = 0; nt < 2; nt++) {
        for (int r = 0; r < 5; r++) {
            double t0 = now_ns();
            for (int i = 0; i < reps; i++) {
                if (nt)
                    copy_nt(dst, src, n);
                else
                    memcpy(dst, src, n);
                __asm__ __volatile__("" ::"r"(dst) : "memory");
            }
            runs[r] = (double)n * reps / (now_ns() - t0) * 1e3;
        }
        printf("floor,%s_16m_MBps,%.0f\n", nt ? "nt" : "memcpy", median5(runs));
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
    const char *cpus = NULL;
    long iters = 200000;
    int c;
    while ((c = getopt(argc, argv, "C:n:")) != -1) {
        if (c == 'C')
            cpus = optarg;
        else if (c == 'n')
            iters = atol(optarg) > 0 ? atol(optarg) : iters;
        else {
            fprintf(stderr, "usage: floor_shm [-C cpu0,cpu1] [-n iters]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    cacheline(cpus, iters);
    copies(cpus);
    copies_16m(cpus);
    return 0;
}
