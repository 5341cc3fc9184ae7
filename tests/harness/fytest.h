/*
 * fytest.h - ferry's test harness: a file of cases, each run in a child process with a
 * timeout (so one crash or hang fails one case, not the file), assertions that print both
 * operands, and a way to run one case by name:
 *
 *     ./test_hotel                 run every case
 *     ./test_hotel expiry_order    run one
 *     FYTEST_NOFORK=1 ./test_x     run in-process (for gdb)
 *     FYTEST_TIMEOUT=30            per-case timeout in seconds (default 60)
 *
 * A file ends with:
 *     FYTEST_MAIN(FYTEST_CASE(expiry_order), FYTEST_CASE(checkout_before_expiry))
 *
 * Multi-process tests (started by ferryrun) use FYTEST_MAIN_INPROC: cases run in the rank's
 * own process, in order, since the ranks share one job.
 */
#ifndef FYTEST_H
#define FYTEST_H

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferry.h"

/* LeakSanitizer checks a process when it leaves through exit(); a forked child that leaves
 * with _exit (so it runs none of the parent's atexit handlers and flushes none of its stdio
 * buffers twice) is never checked.  fytest_exit runs the check first when built with ASan:
 * a leak makes the child die with LSan's report, so the case fails. */
#if defined(__SANITIZE_ADDRESS__)
#define FYTEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FYTEST_LSAN 1
#endif
#endif
#ifdef FYTEST_LSAN
void __lsan_do_leak_check(void);
#endif

static inline void fytest_exit(int code) __attribute__((noreturn, unused));
static inline void fytest_exit(int code)
{
    fflush(stdout);
    fflush(stderr);
#ifdef FYTEST_LSAN
    __lsan_do_leak_check();
#endif
    _exit(code);
}

typedef struct fytest_case {
    const char *name;
    void (*fn)(void);
} fytest_case_t;

#define FYTEST_CASE(fn)                                                                            \
    {                                                                                              \
#fn, fn                                                                                    \
    }

static const char *fytest_current = "?";

#define FYTEST_FAIL(...)                                                                           \
    do {                                                                                           \
        fprintf(stderr, "FAIL %s (%s:%d): ", fytest_current, __FILE__, __LINE__);                  \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        fflush(stderr);                                                                            \
        abort();                                                                                   \
    } while (0)

#define FY_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FYTEST_FAIL("assertion failed: %s", #cond);                                            \
    } while (0)

#define FY_ASSERT_MSG(cond, ...)                                                                   \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FYTEST_FAIL(__VA_ARGS__);                                                              \
    } while (0)

#define FYTEST_CMP_(a, b, op)                                                                      \
    do {                                                                                           \
        long long fy_a_ = (long long)(a), fy_b_ = (long long)(b);                                  \
        if (!(fy_a_ op fy_b_))                                                                     \
            FYTEST_FAIL("expected %s %s %s, got %lld vs %lld", #a, #op, #b, fy_a_, fy_b_);         \
    } while (0)

#define FY_ASSERT_EQ(a, b) FYTEST_CMP_(a, b, ==)
#define FY_ASSERT_NE(a, b) FYTEST_CMP_(a, b, !=)
#define FY_ASSERT_LT(a, b) FYTEST_CMP_(a, b, <)
#define FY_ASSERT_LE(a, b) FYTEST_CMP_(a, b, <=)
#define FY_ASSERT_GT(a, b) FYTEST_CMP_(a, b, >)
#define FY_ASSERT_GE(a, b) FYTEST_CMP_(a, b, >=)

#define FY_ASSERT_U64_EQ(a, b)                                                                     \
    do {                                                                                           \
        uint64_t fy_a_ = (uint64_t)(a), fy_b_ = (uint64_t)(b);                                     \
        if (fy_a_ != fy_b_)                                                                        \
            FYTEST_FAIL("expected %s == %s, got %" PRIu64 " vs %" PRIu64, #a, #b, fy_a_, fy_b_);   \
    } while (0)

#define FY_ASSERT_STR_EQ(a, b)                                                                     \
    do {                                                                                           \
        const char *fy_a_ = (a), *fy_b_ = (b);                                                     \
        if (fy_a_ == NULL || fy_b_ == NULL || strcmp(fy_a_, fy_b_) != 0)                           \
            FYTEST_FAIL("expected %s == %s, got \"%s\" vs \"%s\"", #a, #b,                         \
                        fy_a_ ? fy_a_ : "(null)", fy_b_ ? fy_b_ : "(null)");                       \
    } while (0)

#define FY_ASSERT_STATUS(st, expected)                                                             \
    do {                                                                                           \
        ferry_status_t fy_s_ = (st), fy_e_ = (expected);                                           \
        if (fy_s_ != fy_e_)                                                                        \
            FYTEST_FAIL("%s: expected %d (%s), got %d (%s)", #st, fy_e_,                           \
                        ferry_status_string(fy_e_), fy_s_, ferry_status_string(fy_s_));            \
    } while (0)

#define FY_ASSERT_OK(st) FY_ASSERT_STATUS(st, FERRY_OK)

#define FY_ASSERT_MEM_EQ(a, b, n)                                                                  \
    do {                                                                                           \
        const unsigned char *fy_a_ = (const unsigned char *)(a),                                   \
                            *fy_b_ = (const unsigned char *)(b);                                   \
        size_t fy_n_ = (n);                                                                        \
        for (size_t fy_i_ = 0; fy_i_ < fy_n_; fy_i_++)                                             \
            if (fy_a_[fy_i_] != fy_b_[fy_i_])                                                      \
                FYTEST_FAIL("%s and %s differ at byte %zu of %zu: 0x%02x vs 0x%02x", #a, #b,       \
                            fy_i_, fy_n_, fy_a_[fy_i_], fy_b_[fy_i_]);                             \
    } while (0)

static int fytest_run_one(const fytest_case_t *c, int nofork, unsigned timeout)
{
    fytest_current = c->name;
    if (nofork) {
        c->fn();
        return 0;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        alarm(timeout);
        c->fn();
        fytest_exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    kill(-pid, SIGKILL); /* anything the case left behind */
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        fprintf(stderr, "FAIL %s: timed out after %u s\n", c->name, timeout);
    else if (WIFSIGNALED(st))
        fprintf(stderr, "FAIL %s: killed by signal %d (%s)\n", c->name, WTERMSIG(st),
                strsignal(WTERMSIG(st)));
    else
        fprintf(stderr, "FAIL %s: exit status %d\n", c->name, WEXITSTATUS(st));
    return 1;
}

static int fytest_main(int argc, char **argv, const fytest_case_t *cases, size_t n, int inproc)
{
    const char *e = getenv("FYTEST_NOFORK");
    int nofork = inproc || (e != NULL && *e == '1');
    unsigned timeout = 60;
    if ((e = getenv("FYTEST_TIMEOUT")) != NULL && atoi(e) > 0)
        timeout = (unsigned)atoi(e);
    int failed = 0, ran = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1) {
            int wanted = 0;
            for (int a = 1; a < argc; a++)
                wanted |= strcmp(argv[a], cases[i].name) == 0;
            if (!wanted)
                continue;
        }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int r = fytest_run_one(&cases[i], nofork, timeout);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (!inproc || getenv("FYTEST_VERBOSE"))
            printf("%s %s (%.1f ms)\n", r ? "FAIL" : "ok  ", cases[i].name, ms);
        failed += r;
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "no case matched\n");
        return 2;
    }
    if (!inproc)
        printf("%d passed, %d failed\n", ran - failed, failed);
    return failed ? 1 : 0;
}

/* A large test buffer (zeroed): an anonymous mapping, not a static array.  LeakSanitizer
 * scans every global, and every reachable heap block, at each process exit, and every
 * forked child of the harness exits through that check: 128 MiB of static buffers made each
 * exit of one tcp test cost ~0.25 s under ASan (25 forks: 12.5 s, against 0.5 s without the
 * check).  A mapping is not scanned. */
static inline void *fytest_map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("fytest_map");
        fytest_exit(1);
    }
    return p;
}

static inline void fytest_unmap(void *p, size_t len)
{
    munmap(p, len);
}

#define FYTEST_MAIN(...)                                                                           \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        static const fytest_case_t cases[] = {__VA_ARGS__};                                        \
        return fytest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 0);                \
    }

#define FYTEST_MAIN_INPROC(...)                                                                    \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        static const fytest_case_t cases[] = {__VA_ARGS__};                                        \
        return fytest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 1);                \
    }

#endif
