/*
 * status.h - internal helpers around ferry_status_t: mapping errno at the OS boundary.
 */
#ifndef FY_UTIL_STATUS_H
#define FY_UTIL_STATUS_H

#include "ferry.h"

/* Map an errno value to the closest status (EAGAIN -> NO_RESOURCE, ECONNRESET -> ...). */
ferry_status_t fy_status_from_errno(int err);

#define FY_UNLIKELY(x)    __builtin_expect(!!(x), 0)
#define FY_LIKELY(x)      __builtin_expect(!!(x), 1)
#define FY_ARRAY_SIZE(a)  (sizeof(a) / sizeof((a)[0]))
#define FY_MIN(a, b)      ((a) < (b) ? (a) : (b))
#define FY_MAX(a, b)      ((a) > (b) ? (a) : (b))
#define FY_ALIGN_UP(x, a) ((((x) + (a)-1) / (a)) * (a))
#define FY_CACHE_LINE     64

/* One spin-wait pause: in a loop that polls memory another core writes, it spaces the reads
 * so they do not keep taking the line from the writer's store. */
static inline void fy_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

#endif
