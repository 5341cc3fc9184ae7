/*
 * clock.h - the monotonic clock, in nanoseconds.
 *
 * Every timeout in ferry (retransmission, keepalive, waits) is measured with this clock; it
 * never jumps with the wall time.  clock_gettime(CLOCK_MONOTONIC) is served by the vDSO, so
 * reading it costs tens of nanoseconds, no system call.
 */
#ifndef FY_UTIL_CLOCK_H
#define FY_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

#define FY_NSEC_PER_USEC 1000ull
#define FY_NSEC_PER_MSEC 1000000ull
#define FY_NSEC_PER_SEC  1000000000ull

static inline uint64_t fy_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * FY_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static inline double fy_time_sec(void)
{
    return (double)fy_time_ns() / 1e9;
}

#endif
