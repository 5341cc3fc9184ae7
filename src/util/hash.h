/*
 * hash.h - an open-addressing hash map from 64-bit keys to pointers.
 *
 * Linear probing over a power-of-two table kept at most 70% full; deletion uses backward
 * shift (no tombstones), so lookups stay short however many inserts and deletes happen.
 * Not thread-safe: one owner (a worker, a context under its lock).
 */
#ifndef FY_UTIL_HASH_H
#define FY_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

typedef struct fy_hash_slot {
    uint64_t key;
    void *value; /* NULL marks an empty slot: NULL values cannot be stored */
} fy_hash_slot_t;

typedef struct fy_hash {
    fy_hash_slot_t *slots;
    size_t mask; /* capacity - 1 */
    size_t count;
} fy_hash_t;

ferry_status_t fy_hash_init(fy_hash_t *h, size_t initial_capacity);
void fy_hash_destroy(fy_hash_t *h);
/* Insert or replace; value must not be NULL (FERRY_ERR_INVALID_PARAM).  FERRY_ERR_NO_MEMORY if
 * it cannot grow. */
ferry_status_t fy_hash_put(fy_hash_t *h, uint64_t key, void *value);
/* The value, or NULL. */
void *fy_hash_get(const fy_hash_t *h, uint64_t key);
/* Remove and return the value, or NULL if absent. */
void *fy_hash_del(fy_hash_t *h, uint64_t key);
static inline size_t fy_hash_count(const fy_hash_t *h)
{
    return h->count;
}
/* Visit every entry (do not modify the map from cb). */
void fy_hash_foreach(const fy_hash_t *h, void (*cb)(uint64_t key, void *value, void *arg),
                     void *arg);
/* A good 64-bit mixer, for building keys from several fields. */
static inline uint64_t fy_hash_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

#endif
