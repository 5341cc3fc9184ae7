/*
 * copy.h - memcpy for sizes that are often tiny: up to 16 bytes done inline with overlapping
 * moves (a libc call costs more than the copy of a few bytes), larger ones by memcpy; and the
 * receiver's copy of a message out of a transport's buffer (fy_copy_rx).
 */
#ifndef FY_UTIL_COPY_H
#define FY_UTIL_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void fy_copy(void *dst, const void *src, size_t n)
{
    char *d = dst;
    const char *s = src;
    if (n > 16) {
        memcpy(d, s, n);
    } else if (n >= 8) { /* two overlapping 8-byte moves */
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else if (n > 0) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}

/* `rep movsb` is ours to use where the compiler is not instrumenting memory accesses: under
 * a sanitizer every copy goes through memcpy, which it checks. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#if defined(__has_feature)
#if !__has_feature(address_sanitizer) && !__has_feature(thread_sanitizer) &&                       \
    !__has_feature(memory_sanitizer)
#define FY_COPY_MOVSB 1
#endif
#else
#define FY_COPY_MOVSB 1
#endif
#endif

/*
 * Copy a received message (n bytes another core has just written into a transport's buffer)
 * to where the receiver wants it: from movsb_min bytes up as one `rep movsb`, below as
 * fy_copy.  On a processor with fast string moves the string copy reads the other core's lines,
 * while that core writes the next buffers of a stream, faster than the vector loop glibc uses
 * below its own rep-movsb threshold (2112 bytes on the reference host): tagged stream 768 B
 * 79-89 -> 50-59 ns a message, 1 KiB 73-99 -> 56-62, 2 KiB 104-115 -> 98-101, for one-way
 * latency 5-10 ns more at 576 B-1 KiB (docs/perf.md "The receiver's copy").
 * movsb_min is the worker's (FERRY_RX_COPY_MOVSB); SIZE_MAX: never.
 */
static inline void fy_copy_rx(void *dst, const void *src, size_t n, size_t movsb_min)
{
#ifdef FY_COPY_MOVSB
    if (n >= movsb_min) {
        __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
        return;
    }
#else
    (void)movsb_min;
#endif
    fy_copy(dst, src, n);
}

/* FERRY_RX_COPY_MOVSB=auto: FY_COPY_RX_MOVSB_AUTO where the processor has fast string moves
 * (x86-64 with ERMS and FSRM) and this build may use them, otherwise SIZE_MAX (never). */
#define FY_COPY_RX_MOVSB_AUTO 576
size_t fy_copy_rx_movsb_auto(void);

#endif
