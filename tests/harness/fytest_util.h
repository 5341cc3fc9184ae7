/*
 * fytest_util.h - helpers several test programs share: a seeded byte pattern to fill and check
 * payloads with, a xorshift generator, a seccomp filter that refuses cross-memory attach in the
 * calling process, and the job key a new context takes from the environment.
 */
#ifndef FYTEST_UTIL_H
#define FYTEST_UTIL_H

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fytest.h"
#include "proto/proto.h"

/* The next number of a xorshift64 generator (state: any non-zero start). */
static inline uint64_t fy_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* Fill len bytes with the pattern of seed; fy_pattern_ok says whether they still hold it. */
static inline void fy_pattern(void *buf, size_t len, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    unsigned char *b = buf;
    for (size_t i = 0; i < len; i++) {
        if ((i & 3) == 0)
            x = x * 1664525u + 1013904223u;
        b[i] = (unsigned char)(x >> ((i & 3) * 8));
    }
}

static inline int fy_pattern_ok(const void *buf, size_t len, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    const unsigned char *b = buf;
    for (size_t i = 0; i < len; i++) {
        if ((i & 3) == 0)
            x = x * 1664525u + 1013904223u;
        if (b[i] != (unsigned char)(x >> ((i & 3) * 8)))
            return 0;
    }
    return 1;
}

/* Refuse process_vm_readv/writev in this process, as a kernel with Yama ptrace_scope=3 or a
 * container's seccomp profile does.  (The filter does not check the architecture: it only has
 * to stop ferry's own calls, not an adversary.) */
static inline void fy_deny_cma(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
    FY_ASSERT(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    FY_ASSERT(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
    char c;
    struct iovec l = {&c, 1}, r = {&c, 1};
    FY_ASSERT(syscall(__NR_process_vm_readv, getppid(), &l, 1, &r, 1, 0) < 0 && errno == EPERM);
}

/* The job key (tcp, ofi, the listener) of a context made now, from the environment. */
static inline uint64_t fytest_context_job_key(void)
{
    ferry_context_t *ctx;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    uint64_t k = fy_context_job_key(ctx);
    ferry_context_destroy(ctx);
    return k;
}

#endif
