/*
 * rcache.c - the registration cache (rcache.h): registrations kept for reuse, found by address,
 * bounded in bytes and entries with LRU eviction of unused ones, invalidated by the memory
 * monitor (memmon.c).
 *
 * THE INDEX.  Valid cached regions never overlap: a miss whose pages overlap cached regions
 * registers the union of them all (with the union of their access) and retires the old ones
 * (deregistered when unused).  Disjoint regions sorted by start address also have sorted ends,
 * so the index is a sorted array: a lookup is one binary search for the last region starting at
 * or before the address, an invalidation a binary search and a walk back.  Inserting moves at
 * most max_entries pointers, which only a miss does - and a miss registers memory, which costs
 * far more.  Registrations are page aligned, so buffers sharing pages share a registration.
 *
 * STATES of a region: PENDING (registering, on the pending list, outside the index), CACHED (in
 * the index; with no user also on the LRU list), and retired (out of the index: invalidated,
 * replaced by a union, evicted, or never cacheable).  A retired region is deregistered by the
 * put of its last user, or, when it had none, by the next get / put / destroy (the monitor's
 * thread only marks and queues it on `dead`).  All regions are on the `all` list, for destroy.
 *
 * LOCKS.  rc->lock guards everything here.  A lookup runs inside fy_memmon_sync_begin/end
 * (lock order: monitor, then cache), so it sees every unmap that returned before it.  Nothing
 * is allocated, freed, registered or deregistered with a lock held (memmon.h: a free() that
 * trims the heap onto watched memory would wait for the monitor, which waits for our lock).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/memmon.h"
#include "util/rcache.h"

enum { R_PENDING, R_CACHED, R_RETIRED };

struct fy_rcache_region {
    uintptr_t start, end; /* the registered range */
    unsigned access;      /* registered with */
    unsigned refs;        /* users (gets not yet put) */
    int state;            /* R_* */
    int invalid;          /* the monitor saw the memory go (or it was never watched) */
    fy_rcache_region_t *lru_prev, *lru_next; /* CACHED with no user: the LRU list */
    fy_rcache_region_t *all_prev, *all_next; /* every region the cache registered */
    fy_rcache_region_t *link;                /* pending / dead / local lists */
    _Alignas(16) unsigned char memh[];
};

struct fy_rcache {
    fy_rcache_params_t p;
    fy_rcache_opts_t opts;
    int caching;
    fy_memmon_sub_t *sub;
    pthread_mutex_t lock;
    fy_rcache_region_t **index; /* CACHED regions sorted by start */
    size_t count, cap;
    fy_rcache_region_t *lru_head, *lru_tail; /* head: most recently used */
    fy_rcache_region_t *all;
    fy_rcache_region_t *pending;     /* being registered */
    fy_rcache_region_t *dead;        /* retired with no user: to deregister */
    size_t held_entries, held_bytes; /* registered and not on `dead`: what the bounds count */
    fy_rcache_stats_t st;
    size_t page;
};

static const fy_config_field_t rcache_fields[] = {
    FY_CONFIG_FIELD("RCACHE", "y",
                    "Keep memory registrations for reuse (ofi rendezvous and RMA buffers), "
                    "invalidated when the memory is unmapped or freed; n: register at every use "
                    "and deregister after it. Without a memory monitor (userfaultfd) it is off.",
                    FY_CFG_BOOL, fy_rcache_opts_t, enable),
    FY_CONFIG_FIELD("RCACHE_MAX_BYTES", "1g",
                    "Bytes of registered memory a registration cache holds; unused registrations "
                    "above it are released, least recently used first.",
                    FY_CFG_SIZE, fy_rcache_opts_t, max_bytes),
    FY_CONFIG_FIELD("RCACHE_MAX_ENTRIES", "4096",
                    "Registrations a registration cache holds; unused ones above it are "
                    "released, least recently used first.",
                    FY_CFG_SIZE, fy_rcache_opts_t, max_entries),
};

const fy_config_table_t fy_rcache_config_table = {"rcache", "", rcache_fields,
                                                  sizeof(rcache_fields) / sizeof(rcache_fields[0])};

/* ---- lists (rc->lock held) ----------------------------------------------------------------- */

static void lru_remove(fy_rcache_t *rc, fy_rcache_region_t *r)
{
    if (r->lru_prev != NULL)
        r->lru_prev->lru_next = r->lru_next;
    else if (rc->lru_head == r)
        rc->lru_head = r->lru_next;
    else
        return; /* not on the list */
    if (r->lru_next != NULL)
        r->lru_next->lru_prev = r->lru_prev;
    else
        rc->lru_tail = r->lru_prev;
    r->lru_prev = r->lru_next = NULL;
}

static void lru_push(fy_rcache_t *rc, fy_rcache_region_t *r)
{
    r->lru_prev = NULL;
    r->lru_next = rc->lru_head;
    if (rc->lru_head != NULL)
        rc->lru_head->lru_prev = r;
    else
        rc->lru_tail = r;
    rc->lru_head = r;
}

static void all_add(fy_rcache_t *rc, fy_rcache_region_t *r)
{
    r->all_prev = NULL;
    r->all_next = rc->all;
    if (rc->all != NULL)
        rc->all->all_prev = r;
    rc->all = r;
}

static void all_remove(fy_rcache_t *rc, fy_rcache_region_t *r)
{
    if (r->all_prev != NULL)
        r->all_prev->all_next = r->all_next;
    else
        rc->all = r->all_next;
    if (r->all_next != NULL)
        r->all_next->all_prev = r->all_prev;
}

static void unlink_from(fy_rcache_region_t **head, fy_rcache_region_t *r)
{
    for (fy_rcache_region_t **pp = head; *pp != NULL; pp = &(*pp)->link)
        if (*pp == r) {
            *pp = r->link;
            r->link = NULL;
            return;
        }
}

/* r has no user and will not be used again: deregister it soon. */
static void to_dead(fy_rcache_t *rc, fy_rcache_region_t *r)
{
    r->link = rc->dead;
    rc->dead = r;
    rc->held_entries--;
    rc->held_bytes -= r->end - r->start;
}

/* ---- the index (rc->lock held) ------------------------------------------------------------- */

/* The number of regions starting at or before addr (so index[i - 1] is the candidate). */
static size_t index_upper(const fy_rcache_t *rc, uintptr_t addr)
{
    size_t lo = 0, hi = rc->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rc->index[mid]->start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void index_remove_at(fy_rcache_t *rc, size_t i)
{
    memmove(&rc->index[i], &rc->index[i + 1], (rc->count - i - 1) * sizeof(rc->index[0]));
    rc->count--;
}

static void index_insert(fy_rcache_t *rc, fy_rcache_region_t *r)
{
    size_t i = index_upper(rc, r->start);
    memmove(&rc->index[i + 1], &rc->index[i], (rc->count - i) * sizeof(rc->index[0]));
    rc->index[i] = r;
    rc->count++;
}

/* Take r out of the index (it is there) and retire it: dead at once if no one uses it. */
static void retire_at(fy_rcache_t *rc, size_t i)
{
    fy_rcache_region_t *r = rc->index[i];
    index_remove_at(rc, i);
    r->state = R_RETIRED;
    if (r->refs == 0) {
        lru_remove(rc, r);
        to_dead(rc, r);
    }
}

/* ---- the monitor's callback (its thread; marks only) --------------------------------------- */

static void invalidate(void *arg, uintptr_t start, uintptr_t end)
{
    fy_rcache_t *rc = arg;
    pthread_mutex_lock(&rc->lock);
    size_t i = index_upper(rc, end - 1 < end ? end - 1 : end);
    /* regions are disjoint and sorted, so their ends are sorted too: walk back while they
     * reach into [start, end) */
    while (i > 0 && rc->index[i - 1]->end > start) {
        fy_rcache_region_t *r = rc->index[i - 1];
        if (r->start < end) {
            r->invalid = 1;
            rc->st.invalidations++;
            retire_at(rc, i - 1);
        }
        i--;
    }
    for (fy_rcache_region_t *r = rc->pending; r != NULL; r = r->link)
        if (r->start < end && r->end > start && !r->invalid) {
            r->invalid = 1;
            rc->st.invalidations++;
        }
    pthread_mutex_unlock(&rc->lock);
}

/* ---- deregistration (no lock held) --------------------------------------------------------- */

static void release_list(fy_rcache_t *rc, fy_rcache_region_t *list)
{
    while (list != NULL) {
        fy_rcache_region_t *r = list;
        list = r->link;
        rc->p.dereg(rc->p.arg, r->memh);
        pthread_mutex_lock(&rc->lock);
        rc->st.deregs++;
        rc->st.entries--;
        rc->st.bytes -= r->end - r->start;
        all_remove(rc, r);
        pthread_mutex_unlock(&rc->lock);
        free(r);
    }
}

static fy_rcache_region_t *take_dead(fy_rcache_t *rc)
{
    fy_rcache_region_t *d = rc->dead;
    rc->dead = NULL;
    return d;
}

/* Over a bound: retire unused regions, least recently used first, onto `dead`. */
static void evict(fy_rcache_t *rc)
{
    while ((rc->held_bytes > rc->opts.max_bytes || rc->held_entries > rc->opts.max_entries) &&
           rc->lru_tail != NULL) {
        fy_rcache_region_t *r = rc->lru_tail;
        size_t i = index_upper(rc, r->start);
        if (i == 0 || rc->index[i - 1] != r) { /* cannot happen: LRU regions are indexed */
            lru_remove(rc, r);
            continue;
        }
        rc->st.evictions++;
        retire_at(rc, i - 1);
    }
}

/* ---- the API ------------------------------------------------------------------------------- */

ferry_status_t fy_rcache_create(const fy_rcache_params_t *params, fy_rcache_t **rcache_p)
{
    if (params == NULL || rcache_p == NULL || params->reg == NULL || params->dereg == NULL)
        return FERRY_ERR_INVALID_PARAM;
    *rcache_p = NULL;
    fy_rcache_t *rc = calloc(1, sizeof(*rc));
    if (rc == NULL)
        return FERRY_ERR_NO_MEMORY;
    rc->p = *params;
    rc->p.opts = NULL;
    rc->page = (size_t)sysconf(_SC_PAGESIZE);
    if (params->opts != NULL) {
        rc->opts = *params->opts;
    } else {
        ferry_status_t st = fy_config_read(&fy_rcache_config_table, &rc->opts);
        if (st != FERRY_OK) {
            free(rc);
            return st;
        }
    }
    pthread_mutex_init(&rc->lock, NULL);
    if (rc->opts.enable) {
        const char *why = NULL;
        if (fy_memmon_subscribe(invalidate, rc, &rc->sub, &why) == FERRY_OK) {
            rc->caching = 1;
        } else {
            fy_debug("rcache %s: off (%s)", rc->p.name != NULL ? rc->p.name : "", why);
        }
    }
    *rcache_p = rc;
    return FERRY_OK;
}

void fy_rcache_destroy(fy_rcache_t *rc)
{
    if (rc == NULL)
        return;
    fy_memmon_unsubscribe(rc->sub); /* no callback after this */
    rc->sub = NULL;
    unsigned held = 0;
    fy_rcache_region_t *list = NULL;
    pthread_mutex_lock(&rc->lock);
    for (fy_rcache_region_t *r = rc->all; r != NULL; r = r->all_next) {
        held += r->refs != 0;
        r->link = list;
        list = r;
    }
    rc->count = 0;
    rc->dead = rc->pending = NULL;
    rc->lru_head = rc->lru_tail = NULL;
    pthread_mutex_unlock(&rc->lock);
    if (held != 0)
        fy_warn("rcache %s: destroyed with %u region(s) still in use",
                rc->p.name != NULL ? rc->p.name : "", held);
    release_list(rc, list);
    pthread_mutex_destroy(&rc->lock);
    free(rc->index);
    free(rc);
}

static fy_rcache_region_t *region_new(fy_rcache_t *rc)
{
    return calloc(1, sizeof(fy_rcache_region_t) + rc->p.memh_size);
}

/* Pass-through: register exactly the range, deregister at put. */
static ferry_status_t get_uncached(fy_rcache_t *rc, void *addr, size_t len, unsigned access,
                                   fy_rcache_region_t **region_p)
{
    fy_rcache_region_t *r = region_new(rc);
    if (r == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_status_t st = rc->p.reg(rc->p.arg, addr, len, access, r->memh);
    if (st != FERRY_OK) {
        free(r);
        return st;
    }
    r->start = (uintptr_t)addr;
    r->end = r->start + len;
    r->access = access;
    r->refs = 1;
    r->state = R_RETIRED;
    pthread_mutex_lock(&rc->lock);
    rc->st.misses++;
    rc->st.regs++;
    rc->st.entries++;
    rc->st.bytes += len;
    rc->held_entries++;
    rc->held_bytes += len;
    all_add(rc, r);
    pthread_mutex_unlock(&rc->lock);
    *region_p = r;
    return FERRY_OK;
}

/* Make room in the index for one more (no lock held on entry or exit). */
static ferry_status_t index_reserve(fy_rcache_t *rc)
{
    for (;;) {
        pthread_mutex_lock(&rc->lock);
        size_t need = rc->count + 1, cap = rc->cap;
        pthread_mutex_unlock(&rc->lock);
        if (need <= cap)
            return FERRY_OK;
        size_t ncap = cap != 0 ? cap * 2 : 64;
        fy_rcache_region_t **ni = malloc(ncap * sizeof(*ni)), **old = NULL;
        if (ni == NULL)
            return FERRY_ERR_NO_MEMORY;
        pthread_mutex_lock(&rc->lock);
        if (rc->cap < ncap) {
            if (rc->count != 0)
                memcpy(ni, rc->index, rc->count * sizeof(*ni));
            old = rc->index;
            rc->index = ni;
            rc->cap = ncap;
        } else {
            old = ni;
        }
        pthread_mutex_unlock(&rc->lock);
        free(old);
    }
}

ferry_status_t fy_rcache_get(fy_rcache_t *rc, void *addr, size_t len, unsigned access,
                             fy_rcache_region_t **region_p)
{
    if (rc == NULL || addr == NULL || len == 0 || region_p == NULL ||
        (uintptr_t)addr + len < (uintptr_t)addr)
        return FERRY_ERR_INVALID_PARAM;
    *region_p = NULL;
    if (!rc->caching)
        return get_uncached(rc, addr, len, access, region_p);

    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(rc->page - 1);
    uintptr_t end = ((uintptr_t)addr + len + rc->page - 1) & ~(uintptr_t)(rc->page - 1);
    if (end < (uintptr_t)addr + len) /* the last page wraps around */
        return get_uncached(rc, addr, len, access, region_p);

    fy_rcache_region_t *nr = region_new(rc), *dead = NULL;
    ferry_status_t st = nr != NULL ? index_reserve(rc) : FERRY_ERR_NO_MEMORY;
    if (st != FERRY_OK) {
        free(nr);
        return st;
    }

    int monitored = fy_memmon_sync_begin();
    pthread_mutex_lock(&rc->lock);
    size_t i = index_upper(rc, start);
    if (monitored && i > 0) {
        fy_rcache_region_t *r = rc->index[i - 1];
        if (r->start <= start && r->end >= end && (r->access & access) == access) {
            if (r->refs++ == 0)
                lru_remove(rc, r);
            rc->st.hits++;
            dead = take_dead(rc);
            pthread_mutex_unlock(&rc->lock);
            fy_memmon_sync_end();
            free(nr);
            release_list(rc, dead);
            *region_p = r;
            return FERRY_OK;
        }
    }
    /* A miss: register the union with the regions it overlaps, which retire. */
    unsigned acc = access;
    if (monitored) {
        if (i > 0 && rc->index[i - 1]->end <= start)
            ; /* the one before ends before us */
        else if (i > 0)
            i--;
        while (i < rc->count && rc->index[i]->start < end) {
            fy_rcache_region_t *r = rc->index[i];
            if (r->start < start)
                start = r->start;
            if (r->end > end)
                end = r->end;
            acc |= r->access;
            retire_at(rc, i); /* the next one moves to i */
        }
    }
    nr->start = start;
    nr->end = end;
    nr->access = acc;
    nr->refs = 1;
    nr->state = R_PENDING;
    nr->link = rc->pending;
    rc->pending = nr;
    rc->st.misses++;
    dead = take_dead(rc);
    pthread_mutex_unlock(&rc->lock);
    fy_memmon_sync_end();
    release_list(rc, dead);

    /* Watch before registering: a change after the watch is seen, one before it is what
     * gets registered. */
    int watched = monitored && fy_memmon_watch((void *)start, end - start) == FERRY_OK;
    st = rc->p.reg(rc->p.arg, (void *)start, end - start, acc, nr->memh);

    pthread_mutex_lock(&rc->lock);
    unlink_from(&rc->pending, nr);
    if (st != FERRY_OK) {
        pthread_mutex_unlock(&rc->lock);
        free(nr);
        return st;
    }
    rc->st.regs++;
    rc->st.entries++;
    rc->st.bytes += end - start;
    rc->held_entries++;
    rc->held_bytes += end - start;
    all_add(rc, nr);
    if (!watched)
        nr->invalid = 1; /* not watchable: used once, never cached */
    if (!nr->invalid && rc->count < rc->cap) {
        nr->state = R_CACHED;
        index_insert(rc, nr);
    } else {
        nr->state = R_RETIRED;
    }
    evict(rc);
    dead = take_dead(rc);
    pthread_mutex_unlock(&rc->lock);
    release_list(rc, dead);
    *region_p = nr;
    return FERRY_OK;
}

void fy_rcache_put(fy_rcache_t *rc, fy_rcache_region_t *r)
{
    if (rc == NULL || r == NULL)
        return;
    fy_rcache_region_t *dead;
    pthread_mutex_lock(&rc->lock);
    if (r->refs == 0) {
        pthread_mutex_unlock(&rc->lock);
        fy_error("rcache %s: a region put more often than got",
                 rc->p.name != NULL ? rc->p.name : "");
        return;
    }
    if (--r->refs == 0) {
        if (r->state == R_CACHED) {
            lru_push(rc, r);
            evict(rc);
        } else {
            to_dead(rc, r);
        }
    }
    dead = take_dead(rc);
    pthread_mutex_unlock(&rc->lock);
    release_list(rc, dead);
}

void *fy_rcache_region_memh(fy_rcache_region_t *region)
{
    return region->memh;
}

void fy_rcache_region_range(const fy_rcache_region_t *region, void **addr_p, size_t *len_p)
{
    *addr_p = (void *)region->start;
    *len_p = region->end - region->start;
}

int fy_rcache_is_caching(const fy_rcache_t *rcache)
{
    return rcache != NULL && rcache->caching;
}

void fy_rcache_get_stats(fy_rcache_t *rc, fy_rcache_stats_t *stats)
{
    fy_memmon_sync_begin(); /* counts every invalidation of memory unmapped before the call */
    pthread_mutex_lock(&rc->lock);
    *stats = rc->st;
    pthread_mutex_unlock(&rc->lock);
    fy_memmon_sync_end();
}

void fy_rcache_print(fy_rcache_t *rc, FILE *f)
{
    fy_rcache_stats_t s;
    fy_rcache_get_stats(rc, &s);
    fprintf(f,
            "rcache %s: %s, %zu regions / %zu bytes registered, %llu hits, %llu misses, "
            "%llu evictions, %llu invalidations\n",
            rc->p.name != NULL ? rc->p.name : "", rc->caching ? "on" : "off", s.entries, s.bytes,
            (unsigned long long)s.hits, (unsigned long long)s.misses,
            (unsigned long long)s.evictions, (unsigned long long)s.invalidations);
}
