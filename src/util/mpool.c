/*
 * mpool.c - pools of fixed-size objects: chunks carved into objects, and a free list.
 *
 * The fast path (a request descriptor, a segment, a receive descriptor) must not call malloc,
 * so objects come from chunks of per_chunk objects each and return to a LIFO free list whose
 * link is stored in the free object itself: get and put are a pointer pop and push, and the
 * most recently freed object (the one still in cache) is reused first.  Chunks are only freed
 * when the pool is destroyed, because an object's address must stay valid while it is in use
 * and a pool sized for a peak is usually needed again.  The optional max_elems limit turns
 * growth into back-pressure: get() returns NULL and the caller answers NO_RESOURCE.
 */
#include <stdint.h>
#include <stdlib.h>

#include "util/log.h"
#include "util/mpool.h"
#include "util/status.h"

struct fy_mpool_chunk {
    fy_mpool_chunk_t *next;
    size_t nelems;
};

#define MPOOL_DEFAULT_ALIGN     16
#define MPOOL_DEFAULT_PER_CHUNK 64

/* Offset of the first object in a chunk: the header, rounded up to the alignment. */
static size_t chunk_header_size(const fy_mpool_t *mp)
{
    return FY_ALIGN_UP(sizeof(fy_mpool_chunk_t), mp->align);
}

ferry_status_t fy_mpool_init(fy_mpool_t *mp, const char *name, size_t elem_size, size_t align,
                             size_t per_chunk, size_t max_elems)
{
    if (align == 0)
        align = MPOOL_DEFAULT_ALIGN;
    if (mp == NULL || elem_size == 0 || (align & (align - 1)) != 0)
        return FERRY_ERR_INVALID_PARAM;
    /* The free-list link lives in the object, and posix_memalign wants a pointer multiple. */
    if (align < sizeof(void *))
        align = sizeof(void *);
    if (elem_size < sizeof(void *))
        elem_size = sizeof(void *);
    if (elem_size > SIZE_MAX - align)
        return FERRY_ERR_INVALID_PARAM;
    mp->elem_size = FY_ALIGN_UP(elem_size, align);
    mp->align = align;
    mp->per_chunk = per_chunk != 0 ? per_chunk : MPOOL_DEFAULT_PER_CHUNK;
    mp->max_elems = max_elems;
    mp->free_list = NULL;
    mp->chunks = NULL;
    mp->allocated = 0;
    mp->in_use = 0;
    mp->name = name != NULL ? name : "?";
    return FERRY_OK;
}

void fy_mpool_destroy(fy_mpool_t *mp)
{
    if (mp == NULL)
        return;
    if (mp->in_use != 0)
        fy_warn("memory pool '%s' destroyed with %zu of %zu objects still in use", mp->name,
                mp->in_use, mp->allocated);
    fy_mpool_chunk_t *c = mp->chunks;
    while (c != NULL) {
        fy_mpool_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    mp->chunks = NULL;
    mp->free_list = NULL;
    mp->allocated = 0;
    mp->in_use = 0;
}

/* Add one chunk (fewer objects if the limit is near) and thread its objects on the free list. */
int fy_mpool_grow(fy_mpool_t *mp)
{
    size_t n = mp->per_chunk;
    if (mp->max_elems != 0) {
        if (mp->allocated >= mp->max_elems)
            return 0;
        n = FY_MIN(n, mp->max_elems - mp->allocated);
    }
    size_t hdr = chunk_header_size(mp);
    if (n > (SIZE_MAX - hdr) / mp->elem_size)
        return 0;
    void *mem = NULL;
    if (posix_memalign(&mem, mp->align, hdr + n * mp->elem_size) != 0)
        return 0;
    fy_mpool_chunk_t *c = mem;
    c->nelems = n;
    c->next = mp->chunks;
    mp->chunks = c;
    /* Push in reverse so objects come out in address order. */
    char *base = (char *)mem + hdr;
    for (size_t i = n; i-- > 0;) {
        void **obj = (void **)(base + i * mp->elem_size);
        *obj = mp->free_list;
        mp->free_list = obj;
    }
    mp->allocated += n;
    return 1;
}
