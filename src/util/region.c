/*
 * region.c - the table of memory regions open to remote access, and the check of every access.
 *
 * A transport that places incoming data itself (a udp PUT chunk, an emulated RMA or atomic)
 * must never trust an address off the wire: fy_region_check() admits an access only if its
 * (id, key) names a registered region and the whole range lies inside it with the rights it
 * was registered with.  Ids come from a counter that starts at a random value, so ids of a
 * restarted process do not repeat the old ones; keys are 64 random bits from the kernel, so a
 * peer cannot guess its way into a region whose rkey it was not given.  The bounds check is
 * written as subtractions from the region's own extent, so no addr + len can wrap around.
 * Registration is rare and checks are frequent and come from every worker: a read-write lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "util/region.h"
#include "util/status.h"

#define REGION_ACCESS_ALL (FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC)

uint64_t fy_random64(void)
{
    uint64_t v = 0;
    size_t got = 0;
    while (got < sizeof(v)) {
        ssize_t n = getrandom((char *)&v + got, sizeof(v) - got, 0);
        if (n > 0) {
            got += (size_t)n;
        } else if (n < 0 && errno != EINTR) {
            break;
        }
    }
    if (got == sizeof(v))
        return v;
    /* No getrandom (very old kernel, seccomp): /dev/urandom, then the clock as a last resort. */
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, &v, sizeof(v));
        close(fd);
        if (n == (ssize_t)sizeof(v))
            return v;
    }
    static int warned;
    if (!warned) {
        warned = 1;
        fy_warn("no kernel randomness (getrandom and /dev/urandom failed): memory keys are "
                "guessable");
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return fy_hash_mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                         ((uint64_t)getpid() << 48) ^ (uint64_t)(uintptr_t)&v);
}

ferry_status_t fy_region_table_init(fy_region_table_t *t)
{
    ferry_status_t st = fy_hash_init(&t->by_id, 64);
    if (st != FERRY_OK)
        return st;
    int rc = pthread_rwlock_init(&t->lock, NULL);
    if (rc != 0) {
        fy_hash_destroy(&t->by_id);
        return fy_status_from_errno(rc);
    }
    /* Keep the top bit clear so the counter does not wrap in practice. */
    t->next_id = fy_random64() >> 1;
    return FERRY_OK;
}

static void region_free_cb(uint64_t key, void *value, void *arg)
{
    free(value);
}

void fy_region_table_destroy(fy_region_table_t *t)
{
    if (t == NULL || t->by_id.slots == NULL)
        return;
    fy_hash_foreach(&t->by_id, region_free_cb, NULL);
    fy_hash_destroy(&t->by_id);
    pthread_rwlock_destroy(&t->lock);
}

ferry_status_t fy_region_add(fy_region_table_t *t, void *addr, size_t len, unsigned access,
                             fy_region_t *out)
{
    uintptr_t base = (uintptr_t)addr;
    if ((access & ~(unsigned)REGION_ACCESS_ALL) != 0 || len > UINTPTR_MAX - base ||
        (addr == NULL && len != 0))
        return FERRY_ERR_INVALID_PARAM;
    fy_region_t *r = malloc(sizeof(*r));
    if (r == NULL)
        return FERRY_ERR_NO_MEMORY;
    r->key = fy_random64();
    r->base = base;
    r->length = len;
    r->access = access;

    pthread_rwlock_wrlock(&t->lock);
    do {
        r->id = t->next_id++;
    } while (r->id == 0 || fy_hash_get(&t->by_id, r->id) != NULL);
    ferry_status_t st = fy_hash_put(&t->by_id, r->id, r);
    pthread_rwlock_unlock(&t->lock);
    if (st != FERRY_OK) {
        free(r);
        return st;
    }
    if (out != NULL)
        *out = *r;
    return FERRY_OK;
}

ferry_status_t fy_region_remove(fy_region_table_t *t, uint64_t id)
{
    pthread_rwlock_wrlock(&t->lock);
    fy_region_t *r = fy_hash_del(&t->by_id, id);
    pthread_rwlock_unlock(&t->lock);
    if (r == NULL)
        return FERRY_ERR_NO_ELEM;
    free(r);
    return FERRY_OK;
}

ferry_status_t fy_region_check(fy_region_table_t *t, uint64_t id, uint64_t key, uint64_t addr,
                               size_t len, unsigned access, void **local_addr)
{
    ferry_status_t st = FERRY_ERR_ACCESS_DENIED;
    pthread_rwlock_rdlock(&t->lock);
    const fy_region_t *r = fy_hash_get(&t->by_id, id);
    if (r == NULL || r->key != key || (access & ~r->access) != 0)
        goto out;
    /* [addr, addr+len) within [base, base+length), with no sum that could wrap. */
    if (addr < (uint64_t)r->base)
        goto out;
    uint64_t off = addr - (uint64_t)r->base;
    if (off > (uint64_t)r->length || (uint64_t)len > (uint64_t)r->length - off)
        goto out;
    if (local_addr != NULL)
        *local_addr = (void *)(r->base + (uintptr_t)off);
    st = FERRY_OK;
out:
    pthread_rwlock_unlock(&t->lock);
    return st;
}
