/*
 * copy_cores.c - what bounds a copy of a large message on this host: one core, or the memory?
 *
 *   copy_cores [-C cpu0,cpu1] [-r rounds] [-b MiB per timed run] [-d destinations]
 *              [-m method,method...] [-s sizes in MiB, e.g. 1,4,16]
 *
 * Each method copies SIZE bytes from one buffer to another, again and again (-b MiB per timed
 * run, at least 8 copies); the methods and sizes take turns within each of -r rounds, so a
 * method's figures and the 1 MiB one-core memcpy they are divided by come from the same
 * minutes (this VM changes speed every few seconds and is shared).  Printed per method and
 * size: the median GB/s (10^9 B/s) over the rounds, [min-max], and the median as a multiple of
 * mc1's 1 MiB median.
 *
 *   mc1    glibc memcpy, one thread
 *   mc2    memcpy, two threads at once (cpu0 and cpu1), a half each
 *   nt1    AVX2 streamed (non-temporal) stores, one thread; nt2: two threads
 *   nts1   SSE2 streamed stores (the outbox's copy of its largest messages), one thread;
 *          nts2: two threads
 *   ntz1   AVX-512 streamed stores, one thread; ntz2: two threads
 *   cma1   process_vm_readv of the whole from another process, one thread (a pull)
 *   cma2   two threads, process_vm_readv a half each
 *   rw2    one thread process_vm_readv the first half, the other process_vm_writev the second
 *          (a receiver pulling while the sender pushes)
 *   mccma  one thread memcpy the first half, the other process_vm_readv the second
 *   ntcma  one thread streamed stores, the other process_vm_readv (the outbox's split)
 *   relay  the receiver copies staged pieces: only the sender reads the source, both write
 *          the destination (relay_copy, below)
 *   lend   the receiver lends its core: a second process polls on cpu1 and, when a message
 *          is announced, sleeps until it is whole; a thread of the sender's process on cpu1
 *          copies chunks of it meanwhile, with the sender's own thread (lend_copy, below)
 *
 * The source is private memory written before a fork() (the child holds it, unwritten, for
 * cross-memory attach: the same physical pages the parent's copies read); the destinations are
 * shared memory, as the outbox is.  -d N rotates over N destinations (the outbox alternates
 * between slots when the receiver is slow to give one back).  The second thread spins while it
 * waits, as a polling receiver does.
 *
 * Why: one core's copy of 16 MiB (32 MiB with its destination: past this host's share of the
 * L3) runs at about half its 1 MiB rate.  If two cores copy it twice as fast, the bound is the
 * core's own outstanding misses, not the memory; then what matters is whether the second core
 * can reach the sender's memory at a user-space copy's rate (only the kernel's cross-memory
 * attach reaches another process's private pages).  docs/perf.md "One core or two" has the
 * figures.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum {
    MC1,
    MC2,
    NT1,
    NT2,
    NTS1,
    NTS2,
    NTZ1,
    NTZ2,
    CMA1,
    CMA2,
    RW2,
    MCCMA,
    NTCMA,
    LEND,
    RELAY,
    NMETH
};
static const char *const mname[NMETH] = {"mc1",  "mc2",   "nt1",   "nt2",  "nts1",
                                         "nts2", "ntz1",  "ntz2",  "cma1", "cma2",
                                         "rw2",  "mccma", "ntcma", "lend", "relay"};
enum { OP_NONE, OP_MC, OP_NT, OP_NTS, OP_NTZ, OP_CMAR, OP_CMAW, OP_LEND, OP_RELAY };

#define MAXSZ 8

static pid_t child;
static uint64_t go_seq, done_seq; /* the helper's start and end, by __atomic */
static struct {
    int op;
    char *dst;
    const char *src;
    size_t len;
} job;
static int quit;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0)
        perror("copy_cores: sched_setaffinity");
}

static inline void relax(void)
{
#if defined(__x86_64__)
    _mm_pause();
#endif
}

#if defined(__x86_64__)
static void nts_copy(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    memcpy(d + i, s + i, n - i);
    _mm_sfence();
}

__attribute__((target("avx2"))) static void nt_copy(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_stream_si256((__m256i *)(d + i), a);
        _mm256_stream_si256((__m256i *)(d + i + 32), b);
        _mm256_stream_si256((__m256i *)(d + i + 64), c);
        _mm256_stream_si256((__m256i *)(d + i + 96), e);
    }
    memcpy(d + i, s + i, n - i);
    _mm_sfence();
}

__attribute__((target("avx512f"))) static void ntz_copy(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        __m512i a = _mm512_loadu_si512((const void *)(s + i));
        __m512i b = _mm512_loadu_si512((const void *)(s + i + 64));
        __m512i c = _mm512_loadu_si512((const void *)(s + i + 128));
        __m512i e = _mm512_loadu_si512((const void *)(s + i + 192));
        _mm512_stream_si512((void *)(d + i), a);
        _mm512_stream_si512((void *)(d + i + 64), b);
        _mm512_stream_si512((void *)(d + i + 128), c);
        _mm512_stream_si512((void *)(d + i + 192), e);
    }
    memcpy(d + i, s + i, n - i);
    _mm_sfence();
}
#else
#define nts_copy memcpy
#define nt_copy  memcpy
#define ntz_copy memcpy
#endif

/* Cross-memory attach between us and the child: read its s into our d, or write our s into
 * its d (the buffers sit at the same addresses in both). */
static void cma(int op, char *d, const char *s, size_t n)
{
    while (n != 0) {
        ssize_t k;
        if (op == OP_CMAR) {
            struct iovec l = {d, n}, r = {(void *)s, n};
            k = process_vm_readv(child, &l, 1, &r, 1, 0);
        } else {
            struct iovec l = {(void *)s, n}, r = {d, n};
            k = process_vm_writev(child, &l, 1, &r, 1, 0);
        }
        if (k <= 0) {
            perror("copy_cores: process_vm_readv/writev");
            exit(1);
        }
        d += k;
        s += k;
        n -= (size_t)k;
    }
}

/*
 * lend: the receiver lends its core to a thread of the sender.  The sender announces the
 * message; the receiver (the child, polling on cpu1 as a receiver does) sees it, says so in
 * `lent` and sleeps on a futex until the message is whole; that wakes the sender's helper
 * thread (on cpu1, idle now), and the two threads of the sender copy the message in chunks
 * (LEND_CHUNK), each taking the next one not taken; the sender's own thread never waits for
 * the helper to start, only for a chunk the helper holds.  Then the sender marks the message
 * ready and wakes the receiver.  Copies as the outbox makes them: streamed from 8 MiB.
 */
#define LEND_CHUNK  ((size_t)256 << 10)
#define LEND_NT_MIN ((size_t)8 << 20)

typedef struct {
    uint32_t mode;      /* 1: the receiver polls for announcements; 0: it sleeps (other methods) */
    uint32_t quit;      /* the receiver exits */
    uint32_t ann;       /* message `ann` is announced */
    uint32_t lent;      /* the receiver sleeps until message `lent` is whole */
    uint32_t ready;     /* message `ready` is whole */
    uint32_t stop;      /* the helper leaves its lend loop */
    uint32_t completed; /* chunks of the current message copied */
    uint32_t pad;
    uint64_t claim; /* message << 32 | the next chunk to take */
} lend_t;
static lend_t *lc;
static struct {
    char *d;
    const char *s;
    size_t n;
} lmsg;
static uint32_t lseq;

static void futex_wait(uint32_t *w, uint32_t v, long ns)
{
    struct timespec ts = {0, ns};
    syscall(SYS_futex, w, FUTEX_WAIT, v, ns ? &ts : NULL, NULL, 0);
}

static void futex_wake(uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Copy the chunks of message seq that nobody has taken yet. */
static void lend_chunks(uint32_t seq)
{
    size_t n = lmsg.n, nch = (n + LEND_CHUNK - 1) / LEND_CHUNK;
    uint64_t w = __atomic_load_n(&lc->claim, __ATOMIC_ACQUIRE);
    while ((uint32_t)(w >> 32) == seq && (uint32_t)w < nch) {
        if (!__atomic_compare_exchange_n(&lc->claim, &w, w + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        size_t off = (size_t)(uint32_t)w * LEND_CHUNK, len = n - off;
        len = len < LEND_CHUNK ? len : LEND_CHUNK;
        if (n >= LEND_NT_MIN)
            nts_copy(lmsg.d + off, lmsg.s + off, len);
        else
            memcpy(lmsg.d + off, lmsg.s + off, len);
        __atomic_fetch_add(&lc->completed, 1, __ATOMIC_RELEASE);
        w = __atomic_load_n(&lc->claim, __ATOMIC_ACQUIRE);
    }
}

/* The sender's helper thread: help with each message the receiver stepped aside for. */
static void lend_helper(void)
{
    uint32_t served = __atomic_load_n(&lc->lent, __ATOMIC_ACQUIRE), l;
    for (;;) {
        while ((l = __atomic_load_n(&lc->lent, __ATOMIC_ACQUIRE)) == served) {
            if (__atomic_load_n(&lc->stop, __ATOMIC_ACQUIRE))
                return;
            futex_wait(&lc->lent, l, 1000000);
        }
        served = l;
        lend_chunks(l);
    }
}

/* The receiver (the child): poll for announcements, step aside for each until it is whole. */
static void lend_receiver(int cpu)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the parent */
    pin(cpu);
    uint32_t last = 0;
    for (;;) {
        while (__atomic_load_n(&lc->mode, __ATOMIC_ACQUIRE) == 0) {
            if (__atomic_load_n(&lc->quit, __ATOMIC_ACQUIRE))
                _exit(0);
            futex_wait(&lc->mode, 0, 0);
        }
        uint32_t a = __atomic_load_n(&lc->ann, __ATOMIC_ACQUIRE), r;
        if (a == last) {
            relax();
            continue;
        }
        last = a;
        __atomic_store_n(&lc->lent, a, __ATOMIC_RELEASE);
        futex_wake(&lc->lent);
        while ((int32_t)((r = __atomic_load_n(&lc->ready, __ATOMIC_ACQUIRE)) - a) < 0)
            futex_wait(&lc->ready, r, 0);
    }
}

static void lend_copy(char *d, const char *s, size_t n)
{
    uint32_t seq = ++lseq;
    size_t nch = (n + LEND_CHUNK - 1) / LEND_CHUNK;
    lmsg.d = d;
    lmsg.s = s;
    lmsg.n = n;
    __atomic_store_n(&lc->completed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&lc->claim, (uint64_t)seq << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&lc->ann, seq, __ATOMIC_RELEASE);
    lend_chunks(seq);
    while (__atomic_load_n(&lc->completed, __ATOMIC_ACQUIRE) != nch)
        relax();
    __atomic_store_n(&lc->ready, seq, __ATOMIC_RELEASE);
    futex_wake(&lc->ready);
}

static void lend_begin(void)
{
    __atomic_store_n(&lc->stop, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&lc->mode, 1, __ATOMIC_RELEASE);
    futex_wake(&lc->mode);
    job.op = OP_LEND;
    __atomic_add_fetch(&go_seq, 1, __ATOMIC_RELEASE);
}

static void lend_end(void)
{
    uint64_t seq = __atomic_load_n(&go_seq, __ATOMIC_RELAXED);
    __atomic_store_n(&lc->stop, 1, __ATOMIC_RELEASE);
    futex_wake(&lc->lent);
    while (__atomic_load_n(&done_seq, __ATOMIC_ACQUIRE) != seq)
        relax();
    __atomic_store_n(&lc->mode, 0, __ATOMIC_RELEASE);
}

/*
 * relay: the receiver copies part of the message out of pieces the sender stages.  The sender
 * copies from the front of the message straight into its destination (streamed from 8 MiB),
 * and whenever one of RELAY_SLOTS staging pieces is free it copies the last RELAY_PIECE bytes
 * not yet done into it instead, with plain stores (a few hundred KiB: they stay in cache); the
 * receiver (the helper thread, polling on cpu1) copies each staged piece to its place in the
 * destination.  Only the sender reads the source (its private memory), but the writes of the
 * destination are shared by both cores.  The sender moves on to the next message without
 * waiting for the receiver's last pieces; the timed run ends when the receiver has copied all.
 */
#define RELAY_PIECE ((size_t)128 << 10)
#define RELAY_SLOTS 4
#define RELAY_STEP  ((size_t)64 << 10) /* the sender's direct copy between looks at the pieces */

static char *stage;
static struct {
    char *d;
    size_t len;
    int nt;
} rdesc[RELAY_SLOTS];
static uint64_t rpub, rcon; /* pieces published (sender), copied (receiver), by __atomic */
static uint32_t rstop;

static void relay_copy(char *d, const char *s, size_t n)
{
    int nt = n >= LEND_NT_MIN;
    size_t front = 0, back = n;
    uint64_t pub = __atomic_load_n(&rpub, __ATOMIC_RELAXED);
    while (front < back) {
        if (pub - __atomic_load_n(&rcon, __ATOMIC_ACQUIRE) < RELAY_SLOTS) {
            size_t len = back - front < RELAY_PIECE ? back - front : RELAY_PIECE;
            unsigned slot = (unsigned)(pub % RELAY_SLOTS);
            back -= len;
            memcpy(stage + slot * RELAY_PIECE, s + back, len);
            rdesc[slot].d = d + back;
            rdesc[slot].len = len;
            rdesc[slot].nt = nt;
            __atomic_store_n(&rpub, ++pub, __ATOMIC_RELEASE);
        } else {
            size_t len = back - front < RELAY_STEP ? back - front : RELAY_STEP;
            if (nt)
                nts_copy(d + front, s + front, len);
            else
                memcpy(d + front, s + front, len);
            front += len;
        }
    }
}

static void relay_receiver(void)
{
    uint64_t con = __atomic_load_n(&rcon, __ATOMIC_RELAXED);
    for (;;) {
        while (__atomic_load_n(&rpub, __ATOMIC_ACQUIRE) == con) {
            if (__atomic_load_n(&rstop, __ATOMIC_ACQUIRE))
                return;
            relax();
        }
        unsigned slot = (unsigned)(con % RELAY_SLOTS);
        if (rdesc[slot].nt)
            nts_copy(rdesc[slot].d, stage + slot * RELAY_PIECE, rdesc[slot].len);
        else
            memcpy(rdesc[slot].d, stage + slot * RELAY_PIECE, rdesc[slot].len);
        __atomic_store_n(&rcon, ++con, __ATOMIC_RELEASE);
    }
}

static void relay_begin(void)
{
    __atomic_store_n(&rstop, 0, __ATOMIC_RELEASE);
    job.op = OP_RELAY;
    __atomic_add_fetch(&go_seq, 1, __ATOMIC_RELEASE);
}

static void relay_end(void)
{
    uint64_t seq = __atomic_load_n(&go_seq, __ATOMIC_RELAXED);
    while (__atomic_load_n(&rcon, __ATOMIC_ACQUIRE) != __atomic_load_n(&rpub, __ATOMIC_RELAXED))
        relax();
    __atomic_store_n(&rstop, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&done_seq, __ATOMIC_ACQUIRE) != seq)
        relax();
}

static void run(int op, char *d, const char *s, size_t n)
{
    switch (op) {
    case OP_MC:
        memcpy(d, s, n);
        break;
    case OP_NT:
        nt_copy(d, s, n);
        break;
    case OP_NTS:
        nts_copy(d, s, n);
        break;
    case OP_NTZ:
        ntz_copy(d, s, n);
        break;
    case OP_CMAR:
    case OP_CMAW:
        cma(op, d, s, n);
        break;
    case OP_LEND:
        lend_helper();
        break;
    case OP_RELAY:
        relay_receiver();
        break;
    }
}

static void *helper(void *arg)
{
    pin(*(int *)arg);
    uint64_t seen = 0;
    for (;;) {
        while (__atomic_load_n(&go_seq, __ATOMIC_ACQUIRE) == seen) {
            if (__atomic_load_n(&quit, __ATOMIC_RELAXED))
                return NULL;
            relax();
        }
        seen = __atomic_load_n(&go_seq, __ATOMIC_RELAXED);
        run(job.op, job.dst, job.src, job.len);
        __atomic_store_n(&done_seq, seen, __ATOMIC_RELEASE);
    }
}

/* One copy of n bytes by method m; the two-thread methods cut on a page. */
static void copy(int m, char *d, const char *s, size_t n)
{
    static const int one[NMETH] = {
        [MC1] = OP_MC, [NT1] = OP_NT, [NTS1] = OP_NTS, [NTZ1] = OP_NTZ, [CMA1] = OP_CMAR};
    static const int first[NMETH] = {
        [MC2] = OP_MC,    [NT2] = OP_NT,   [NTS2] = OP_NTS, [NTZ2] = OP_NTZ,
        [CMA2] = OP_CMAR, [RW2] = OP_CMAR, [MCCMA] = OP_MC, [NTCMA] = OP_NT};
    static const int second[NMETH] = {
        [MC2] = OP_MC,    [NT2] = OP_NT,   [NTS2] = OP_NTS,   [NTZ2] = OP_NTZ,
        [CMA2] = OP_CMAR, [RW2] = OP_CMAW, [MCCMA] = OP_CMAR, [NTCMA] = OP_CMAR};
    if (m == LEND) {
        lend_copy(d, s, n);
        return;
    }
    if (m == RELAY) {
        relay_copy(d, s, n);
        return;
    }
    if (one[m] != OP_NONE) {
        run(one[m], d, s, n);
        return;
    }
    size_t h = n / 2 & ~(size_t)4095;
    job.op = second[m];
    job.dst = d + h;
    job.src = s + h;
    job.len = n - h;
    uint64_t seq = __atomic_load_n(&go_seq, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&go_seq, seq, __ATOMIC_RELEASE);
    run(first[m], d, s, h);
    while (__atomic_load_n(&done_seq, __ATOMIC_ACQUIRE) != seq)
        relax();
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int rounds = 9, ndst = 1, cpus[2] = {0, 1}, o;
    size_t per_run = (size_t)64 << 20, sizes[MAXSZ] = {1, 4, 16};
    int nsz = 3;
    const char *meths = NULL;
    while ((o = getopt(argc, argv, "C:r:b:d:m:s:")) != -1) {
        switch (o) {
        case 'C':
            if (sscanf(optarg, "%d,%d", &cpus[0], &cpus[1]) != 2)
                return fprintf(stderr, "copy_cores: -C wants cpu0,cpu1\n"), 2;
            break;
        case 'r':
            rounds = atoi(optarg);
            break;
        case 'b':
            per_run = (size_t)atol(optarg) << 20;
            break;
        case 'd':
            ndst = atoi(optarg);
            break;
        case 'm':
            meths = optarg;
            break;
        case 's':
            nsz = 0;
            for (char *t = strtok(optarg, ","); t != NULL && nsz < MAXSZ; t = strtok(NULL, ","))
                sizes[nsz++] = (size_t)atol(t);
            break;
        default:
            return fprintf(stderr, "usage: copy_cores [-C c0,c1] [-r rounds] [-b MiB] [-d dsts] "
                                   "[-m methods] [-s MiB,...]\n"),
                   2;
        }
    }
    if (rounds < 1 || ndst < 1 || nsz < 1 || per_run == 0)
        return fprintf(stderr, "copy_cores: bad arguments\n"), 2;
    size_t maxsz = 0;
    for (int z = 0; z < nsz; z++) {
        sizes[z] <<= 20;
        if (sizes[z] == 0)
            return fprintf(stderr, "copy_cores: sizes are whole MiB\n"), 2;
        if (sizes[z] > maxsz)
            maxsz = sizes[z];
    }
    char *src = mmap(NULL, maxsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *dst =
        mmap(NULL, maxsz * (size_t)ndst, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED || dst == MAP_FAILED)
        return perror("copy_cores: mmap"), 1;
    memset(src, 1, maxsz);
    memset(dst, 2, maxsz * (size_t)ndst);
    stage = mmap(NULL, RELAY_SLOTS * RELAY_PIECE, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (stage == MAP_FAILED)
        return perror("copy_cores: mmap"), 1;
    lc = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (lc == MAP_FAILED)
        return perror("copy_cores: mmap"), 1;
    memset(lc, 0, sizeof(*lc));
    /* The child holds the buffers for cross-memory attach, and is the receiver of `lend`. */
    if ((child = fork()) == 0)
        lend_receiver(cpus[1]);
    pin(cpus[0]);
    pthread_t th;
    if (pthread_create(&th, NULL, helper, &cpus[1]) != 0)
        return fprintf(stderr, "copy_cores: no thread\n"), 1;
    int use[NMETH];
    for (int m = 0; m < NMETH; m++) {
        use[m] = meths == NULL;
        for (const char *p = meths; p != NULL && (p = strstr(p, mname[m])) != NULL; p++)
            if ((p == meths || p[-1] == ',') &&
                (p[strlen(mname[m])] == ',' || p[strlen(mname[m])] == '\0'))
                use[m] = 1;
    }
    use[MC1] = 1; /* the reference */
    double *res = calloc((size_t)rounds * NMETH * (size_t)nsz, sizeof(double));
    if (res == NULL)
        return 1;
    for (int r = 0; r < rounds; r++)
        for (int z = 0; z < nsz; z++)
            for (int m = 0; m < NMETH; m++) {
                if (!use[m])
                    continue;
                size_t n = sizes[z];
                long iters = (long)(per_run / n);
                iters = iters < 8 ? 8 : iters;
                if (m == LEND)
                    lend_begin();
                if (m == RELAY)
                    relay_begin();
                for (int w = 0; w < 2; w++)
                    copy(m, dst + (size_t)(w % ndst) * maxsz, src, n);
                double t0 = now_s();
                for (long i = 0; i < iters; i++)
                    copy(m, dst + (size_t)(i % ndst) * maxsz, src, n);
                if (m == RELAY)
                    relay_end();
                double t = now_s() - t0;
                if (m == LEND)
                    lend_end();
                res[((size_t)m * (size_t)nsz + (size_t)z) * (size_t)rounds + (size_t)r] =
                    (double)n * (double)iters / t / 1e9;
            }
    printf("# copy_cores: cpus %d,%d, %d rounds, %d destination(s), %zu MiB per timed run; GB/s "
           "median [min-max], x = median / mc1's 1st-size median\n",
           cpus[0], cpus[1], rounds, ndst, per_run >> 20);
    double base = 0;
    for (int m = 0; m < NMETH; m++) {
        if (!use[m])
            continue;
        printf("%-6s", mname[m]);
        for (int z = 0; z < nsz; z++) {
            double *v = &res[((size_t)m * (size_t)nsz + (size_t)z) * (size_t)rounds];
            qsort(v, (size_t)rounds, sizeof(*v), cmp_double);
            double med = v[rounds / 2];
            if (m == MC1 && z == 0)
                base = med;
            printf("  %2zuM %6.1f [%5.1f-%5.1f] x%.2f", sizes[z] >> 20, med, v[0], v[rounds - 1],
                   base > 0 ? med / base : 0);
        }
        printf("\n");
    }
    __atomic_store_n(&quit, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    __atomic_store_n(&lc->quit, 1, __ATOMIC_RELEASE);
    futex_wake(&lc->mode);
    waitpid(child, NULL, 0);
    free(res);
    return 0;
}
