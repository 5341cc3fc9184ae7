/*
 * mpool.h - a memory pool of fixed-size objects for the fast path.
 *
 * Objects come from chunks allocated elem_count at a time and go back on a free list, so
 * get/put are a pointer pop/push with no malloc after warm-up.  An optional limit on the
 * number of objects makes get() return NULL (back-pressure) instead of growing forever.
 * Not thread-safe.
 */
#ifndef FY_UTIL_MPOOL_H
#define FY_UTIL_MPOOL_H

#include <stddef.h>

#include "ferry.h"

typedef struct fy_mpool_chunk fy_mpool_chunk_t;

typedef struct fy_mpool {
    void *free_list;
    fy_mpool_chunk_t *chunks;
    size_t elem_size; /* rounded up to alignment */
    size_t align;
    size_t per_chunk;
    size_t max_elems; /* 0 = unlimited */
    size_t allocated; /* objects carved so far */
    size_t in_use;
    const char *name;
} fy_mpool_t;

/* align: a power of two (0 = 16).  per_chunk: objects per growth step. */
ferry_status_t fy_mpool_init(fy_mpool_t *mp, const char *name, size_t elem_size, size_t align,
                             size_t per_chunk, size_t max_elems);
/* Frees every chunk; warns (with the pool name) if objects are still in use. */
void fy_mpool_destroy(fy_mpool_t *mp);
/* Adds a chunk of objects to the free list; 0 at the limit or out of memory (fy_mpool_get's
 * rare case). */
int fy_mpool_grow(fy_mpool_t *mp);

/* An object, or NULL when the limit is reached or memory is out.  (get and put are inline:
 * the fast paths take and return several objects per message.) */
static inline void *fy_mpool_get(fy_mpool_t *mp)
{
    if (__builtin_expect(mp->free_list == NULL, 0) && !fy_mpool_grow(mp))
        return NULL;
    void **obj = mp->free_list;
    mp->free_list = *obj;
    mp->in_use++;
    return obj;
}

static inline void fy_mpool_put(fy_mpool_t *mp, void *obj)
{
    if (obj == NULL)
        return;
    *(void **)obj = mp->free_list;
    mp->free_list = obj;
    mp->in_use--;
}

#endif
