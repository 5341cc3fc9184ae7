/*
 * fuzz_keys.h - placeholders for values a fuzzer cannot guess across runs (a region's random
 * key, where the region lies): seeds carry the placeholder, and the target replaces every
 * 8-byte occurrence (at any offset) by the real value before the bytes go in.  So a seed PUT
 * names the registered region, and mutations of it reach the code behind the key check.
 */
#ifndef FY_FUZZ_KEYS_H
#define FY_FUZZ_KEYS_H

#include <stdint.h>
#include <string.h>

#define FZ_PH_REGION_ID 0x1111111111111111ull
#define FZ_PH_KEY       0x2222222222222222ull
#define FZ_PH_BASE      0x3333333333333333ull

typedef struct fz_keys {
    uint64_t region_id, key, base;
} fz_keys_t;

static inline void fz_keys_apply(const fz_keys_t *k, uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 8 <= n; i++) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        const uint64_t *real = v == FZ_PH_REGION_ID ? &k->region_id
                               : v == FZ_PH_KEY     ? &k->key
                               : v == FZ_PH_BASE    ? &k->base
                                                    : NULL;
        if (real != NULL) {
            memcpy(p + i, real, 8);
            i += 7;
        }
    }
}

#endif
