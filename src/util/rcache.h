/*
 * rcache.h - a registration cache: memory registrations kept after their last user released
 * them, so a buffer sent again and again is registered once.  Generic: the registration itself
 * is two callbacks (reg / dereg) writing an opaque memh of memh_size bytes.
 *
 * GET.  fy_rcache_get(addr, len, access) returns a region whose registration covers
 * [addr, addr + len) with at least access: a hit when a cached, valid region does (its reference
 * count goes up), otherwise a new registration of the pages holding the range (page aligned).
 * fy_rcache_put() releases it; a region with no user stays registered, on an LRU list, until
 * the cache goes above FERRY_RCACHE_MAX_BYTES or FERRY_RCACHE_MAX_ENTRIES (unused regions are
 * evicted, least recently used first; regions in use are never evicted, so the bounds may be
 * exceeded while they are held).
 *
 * INVALIDATION.  The cache subscribes to the memory monitor (util/memmon.h): when memory is
 * unmapped, remapped or given back to the kernel (munmap, mremap, MAP_FIXED over it, brk
 * shrinking, madvise(DONTNEED/REMOVE/FREE) - what free() does), every region overlapping it is
 * invalid: never returned again, and deregistered when its last user puts it (at once when it
 * has none).  A get that follows the munmap in program order always sees the invalidation (see
 * memmon.h), so memory mapped again at the same address gets a new registration.
 *
 * OFF.  FERRY_RCACHE=n, or no working memory monitor (the reason is logged once at info level),
 * makes the cache a pass-through: every get registers, every put deregisters.  A region the
 * monitor cannot watch (memory of a kind userfaultfd refuses, such as a regular file mapping)
 * is not cached either.  fy_rcache_is_caching() tells which.
 *
 * THREADS.  Every call may come from any thread; a mutex guards the cache.  The monitor
 * delivers invalidations from its own thread; they only mark regions, and the reg / dereg
 * callbacks run only in the threads calling fy_rcache_get / put / destroy, never in the
 * monitor's, and never with the cache's lock held (so a callback may take the transport's
 * locks).  A region must be put by its getter exactly once.
 */
#ifndef FY_UTIL_RCACHE_H
#define FY_UTIL_RCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry.h"
#include "util/config.h"

typedef struct fy_rcache fy_rcache_t;
typedef struct fy_rcache_region fy_rcache_region_t;

/* Register [addr, addr + len) with access; fill memh (memh_size bytes, zeroed before). */
typedef ferry_status_t (*fy_rcache_reg_cb_t)(void *arg, void *addr, size_t len, unsigned access,
                                             void *memh);
/* Deregister what reg filled. */
typedef void (*fy_rcache_dereg_cb_t)(void *arg, void *memh);

/* The options (FERRY_RCACHE*, in fy_rcache_config_table). */
typedef struct fy_rcache_opts {
    int enable;         /* FERRY_RCACHE */
    size_t max_bytes;   /* FERRY_RCACHE_MAX_BYTES: bytes registered by unused + used regions */
    size_t max_entries; /* FERRY_RCACHE_MAX_ENTRIES */
} fy_rcache_opts_t;

extern const fy_config_table_t fy_rcache_config_table;

typedef struct fy_rcache_params {
    const char *name; /* for logs: "ofi", ... */
    size_t memh_size;
    fy_rcache_reg_cb_t reg;
    fy_rcache_dereg_cb_t dereg;
    void *arg;
    /* NULL: read FERRY_RCACHE* from the environment */
    const fy_rcache_opts_t *opts;
} fy_rcache_params_t;

/* Counters, for tests and iface_print. */
typedef struct fy_rcache_stats {
    uint64_t hits;          /* gets served by a cached region */
    uint64_t misses;        /* gets that registered */
    uint64_t regs;          /* reg callbacks that succeeded */
    uint64_t deregs;        /* dereg callbacks */
    uint64_t evictions;     /* unused regions evicted by the bounds */
    uint64_t invalidations; /* regions invalidated by the monitor */
    size_t entries;         /* regions registered now (cached or in use) */
    size_t bytes;           /* bytes they cover */
} fy_rcache_stats_t;

/* Create a cache.  FERRY_ERR_BAD_CONFIG when opts come from a bad FERRY_RCACHE* value. */
ferry_status_t fy_rcache_create(const fy_rcache_params_t *params, fy_rcache_t **rcache_p);
/* Deregister every region; regions still held are reported (a warning) and deregistered too.
 * Accepts NULL. */
void fy_rcache_destroy(fy_rcache_t *rcache);

/* A region covering [addr, addr + len) with at least access; len > 0.  The reg callback's
 * error is returned as is. */
ferry_status_t fy_rcache_get(fy_rcache_t *rcache, void *addr, size_t len, unsigned access,
                             fy_rcache_region_t **region_p);
/* Release a region from fy_rcache_get. */
void fy_rcache_put(fy_rcache_t *rcache, fy_rcache_region_t *region);

/* The region's memh (memh_size bytes, aligned for any type) and registered range. */
void *fy_rcache_region_memh(fy_rcache_region_t *region);
void fy_rcache_region_range(const fy_rcache_region_t *region, void **addr_p, size_t *len_p);

/* Does the cache keep registrations (1), or is it a pass-through (0)? */
int fy_rcache_is_caching(const fy_rcache_t *rcache);
void fy_rcache_get_stats(fy_rcache_t *rcache, fy_rcache_stats_t *stats);
/* One line of counters. */
void fy_rcache_print(fy_rcache_t *rcache, FILE *f);

#endif
