/*
 * mem.c - memory that ferry allocates for the caller (FERRY_MEM_ALLOCATE): shared and
 * page-aligned, so that a transport for local peers can let them map it and reach it with
 * plain loads, stores and atomics.
 */
#include <sys/mman.h>

#include "proto/proto_int.h"

void *fy_mem_alloc_shared(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void fy_mem_free_shared(void *addr, size_t len) { munmap(addr, len); }
