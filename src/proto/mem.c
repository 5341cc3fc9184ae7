/*
 * mem.c - memory that ferry allocates for the caller (FERRY_MEM_ALLOCATE): a memfd-backed
 * shareable segment (util/shmem), so that the shared-memory transport can let local peers map
 * it and reach it with plain loads, stores and atomics instead of system calls.
 */
#include "proto/proto_int.h"
#include "util/shmem.h"

void *fy_mem_alloc_shared(size_t len)
{
    void *p = NULL;
    return fy_shmem_alloc(len, "ferry-mem", &p) == FERRY_OK ? p : NULL;
}

void fy_mem_free_shared(void *addr, size_t len)
{
    (void)len;
    fy_shmem_free(addr);
}
