/*
 * region.h - the table of memory regions registered for remote access, for the transports
 * whose target checks every remote access (udp, tcp, emulated RMA over AM).
 *
 * A region gets an id and a random 64-bit key at registration.  A remote access names
 * (id, key, address, length, access); fy_region_check() admits it only when the key matches
 * and [address, address+length) lies inside the region with the rights it was registered
 * with.  The table is shared by the workers of a context: lookups take a read lock.
 */
#ifndef FY_UTIL_REGION_H
#define FY_UTIL_REGION_H

#include <pthread.h>
#include <stdint.h>

#include "ferry.h"
#include "util/hash.h"

typedef struct fy_region {
    uint64_t id;
    uint64_t key;
    uintptr_t base;
    size_t length;
    unsigned access; /* FERRY_MEM_REMOTE_* */
} fy_region_t;

typedef struct fy_region_table {
    pthread_rwlock_t lock;
    fy_hash_t by_id;
    uint64_t next_id;
} fy_region_table_t;

ferry_status_t fy_region_table_init(fy_region_table_t *t);
void fy_region_table_destroy(fy_region_table_t *t);
/* Register; fills *out (id, key chosen here). */
ferry_status_t fy_region_add(fy_region_table_t *t, void *addr, size_t len, unsigned access,
                             fy_region_t *out);
ferry_status_t fy_region_remove(fy_region_table_t *t, uint64_t id);
/* FERRY_OK, or FERRY_ERR_ACCESS_DENIED (unknown id, wrong key, out of bounds, no right).
 * On OK, *local_addr is where the access lands in this process. */
ferry_status_t fy_region_check(fy_region_table_t *t, uint64_t id, uint64_t key, uint64_t addr,
                               size_t len, unsigned access, void **local_addr);
/* A random 64-bit value from the kernel (getrandom), for keys and ids. */
uint64_t fy_random64(void);

#endif
