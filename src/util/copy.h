/*
 * copy.h - memcpy for sizes that are often tiny: up to 16 bytes done inline with overlapping
 * moves (a libc call costs more than the copy of a few bytes), larger ones by memcpy.
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

#endif
