/*
 * pull_dest.c - what a pull of a large message costs besides the copy: the receive buffer.
 *
 *   cc -O2 bench/pull_dest.c -o pull_dest && ./pull_dest MiB [reps]
 *
 * A child process (on cpu 1) reads its parent's buffer (4 KiB pages, written before the fork,
 * reused every time as ferry_perf reuses its send buffer) with process_vm_readv, as shm's
 * receiver pulls a message above FERRY_SHM_OUTBOX_MAX, into:
 *   kept        one buffer, faulted in once and reused (shm_rx.c's kept receive buffer)
 *   fresh-huge  a new mmap with MADV_HUGEPAGE each time (the receive path before the buffer
 *               was kept above 64 MiB), unmapped after
 *   fresh-4k    a new mmap each time with no advice (huge pages refused or unavailable)
 *   kept-4m, kept-1m   the kept buffer, in calls of 4 MiB / 1 MiB
 * Printed per destination: best and median GB/s (10^9 B/s) and the median time of one read.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static char *map(size_t len, int huge)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (huge)
        (void)madvise(p, len, MADV_HUGEPAGE);
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pull_dest MiB [reps]\n");
        return 2;
    }
    size_t len = (size_t)atoi(argv[1]) << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (len == 0 || reps < 1 || reps > 64)
        return 2;
    char *src = map(len, 0);
    memset(src, 1, len);
    pid_t parent = getpid(), c = fork();
    if (c == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(1, &set);
        (void)sched_setaffinity(0, sizeof(set), &set);
        static const char *const names[] = {"kept", "fresh-huge", "fresh-4k", "kept-4m", "kept-1m"};
        static const size_t chunk[] = {0, 0, 0, 4u << 20, 1u << 20};
        char *kept = map(len, 1);
        memset(kept, 0, len);
        for (int m = 0; m < 5; m++) {
            double t[64];
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                char *dst = m == 1 || m == 2 ? map(len, m == 1) : kept;
                size_t ch = chunk[m] != 0 ? chunk[m] : len;
                for (size_t off = 0; off < len; off += ch) {
                    size_t n = len - off < ch ? len - off : ch;
                    struct iovec l = {dst + off, n}, rv = {src + off, n};
                    if (process_vm_readv(parent, &l, 1, &rv, 1, 0) != (ssize_t)n) {
                        perror("process_vm_readv");
                        _exit(1);
                    }
                }
                t[r] = now_s() - t0;
                if (dst != kept)
                    munmap(dst, len);
            }
            qsort(t, (size_t)reps, sizeof(t[0]), cmp_d);
            printf("%zu MiB %-10s best %5.2f GB/s median %5.2f GB/s (%.2f ms)\n", len >> 20,
                   names[m], (double)len / t[0] / 1e9, (double)len / t[reps / 2] / 1e9,
                   t[reps / 2] * 1e3);
            fflush(stdout);
        }
        _exit(0);
    }
    int st;
    waitpid(c, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
