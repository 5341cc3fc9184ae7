/*
 * hash.c - the open-addressing map from 64-bit keys to pointers.
 *
 * Keys are spread with fy_hash_mix64() and placed by linear probing in a power-of-two table,
 * so finding a key walks a few adjacent slots of one cache line or two, with no pointer
 * chasing.  The table doubles before it passes 70% full: above that, linear probing's runs
 * grow quickly.  Deletion shifts the following entries of the run back into the hole
 * (backward shift) instead of leaving tombstones, so a map that sees millions of inserts and
 * deletes (endpoint ids, fragment ids) keeps the probe lengths of a fresh one.  A NULL value
 * marks an empty slot, which is why NULL values cannot be stored.
 */
#include <stdlib.h>

#include "util/hash.h"
#include "util/status.h"

#define HASH_MIN_CAPACITY 8

/* Entries allowed before growing: 70% of the capacity. */
static size_t hash_limit(size_t capacity)
{
    return capacity / 10 * 7 + capacity % 10 * 7 / 10;
}

static size_t hash_home(const fy_hash_t *h, uint64_t key)
{
    return (size_t)fy_hash_mix64(key) & h->mask;
}

ferry_status_t fy_hash_init(fy_hash_t *h, size_t initial_capacity)
{
    size_t cap = HASH_MIN_CAPACITY;
    while (hash_limit(cap) < initial_capacity) {
        if (cap > SIZE_MAX / 2 / sizeof(fy_hash_slot_t))
            return FERRY_ERR_NO_MEMORY;
        cap *= 2;
    }
    h->slots = calloc(cap, sizeof(*h->slots));
    if (h->slots == NULL) {
        h->mask = 0;
        h->count = 0;
        return FERRY_ERR_NO_MEMORY;
    }
    h->mask = cap - 1;
    h->count = 0;
    return FERRY_OK;
}

void fy_hash_destroy(fy_hash_t *h)
{
    if (h == NULL)
        return;
    free(h->slots);
    h->slots = NULL;
    h->mask = 0;
    h->count = 0;
}

/* Place an entry known to be absent; the table has room. */
static void hash_place(fy_hash_t *h, uint64_t key, void *value)
{
    size_t i = hash_home(h, key);
    while (h->slots[i].value != NULL)
        i = (i + 1) & h->mask;
    h->slots[i].key = key;
    h->slots[i].value = value;
}

static ferry_status_t hash_grow(fy_hash_t *h)
{
    size_t oldcap = h->mask + 1;
    if (oldcap > SIZE_MAX / 2 / sizeof(fy_hash_slot_t))
        return FERRY_ERR_NO_MEMORY;
    fy_hash_slot_t *old = h->slots;
    fy_hash_slot_t *slots = calloc(oldcap * 2, sizeof(*slots));
    if (slots == NULL)
        return FERRY_ERR_NO_MEMORY;
    h->slots = slots;
    h->mask = oldcap * 2 - 1;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].value != NULL)
            hash_place(h, old[i].key, old[i].value);
    free(old);
    return FERRY_OK;
}

ferry_status_t fy_hash_put(fy_hash_t *h, uint64_t key, void *value)
{
    if (FY_UNLIKELY(value == NULL || h->slots == NULL))
        return FERRY_ERR_INVALID_PARAM;
    size_t i = hash_home(h, key);
    for (; h->slots[i].value != NULL; i = (i + 1) & h->mask) {
        if (h->slots[i].key == key) {
            h->slots[i].value = value;
            return FERRY_OK;
        }
    }
    if (h->count + 1 > hash_limit(h->mask + 1)) {
        ferry_status_t st = hash_grow(h);
        if (st != FERRY_OK)
            return st;
        hash_place(h, key, value);
    } else {
        h->slots[i].key = key;
        h->slots[i].value = value;
    }
    h->count++;
    return FERRY_OK;
}

void *fy_hash_get(const fy_hash_t *h, uint64_t key)
{
    if (FY_UNLIKELY(h->slots == NULL))
        return NULL;
    for (size_t i = hash_home(h, key); h->slots[i].value != NULL; i = (i + 1) & h->mask)
        if (h->slots[i].key == key)
            return h->slots[i].value;
    return NULL;
}

void *fy_hash_del(fy_hash_t *h, uint64_t key)
{
    if (FY_UNLIKELY(h->slots == NULL))
        return NULL;
    size_t i = hash_home(h, key);
    for (;; i = (i + 1) & h->mask) {
        if (h->slots[i].value == NULL)
            return NULL;
        if (h->slots[i].key == key)
            break;
    }
    void *value = h->slots[i].value;
    /*
     * Backward shift: walk the rest of the run; an entry may move into the hole at i unless
     * its home lies cyclically in (i, j], in which case moving it would put it before its
     * home and lookups would miss it.
     */
    size_t hole = i;
    for (size_t j = (hole + 1) & h->mask; h->slots[j].value != NULL; j = (j + 1) & h->mask) {
        size_t home = hash_home(h, h->slots[j].key);
        if (((j - home) & h->mask) >= ((j - hole) & h->mask)) {
            h->slots[hole] = h->slots[j];
            hole = j;
        }
    }
    h->slots[hole].value = NULL;
    h->slots[hole].key = 0;
    h->count--;
    return value;
}

void fy_hash_foreach(const fy_hash_t *h, void (*cb)(uint64_t key, void *value, void *arg),
                     void *arg)
{
    if (h->slots == NULL)
        return;
    for (size_t i = 0; i <= h->mask; i++)
        if (h->slots[i].value != NULL)
            cb(h->slots[i].key, h->slots[i].value, arg);
}
