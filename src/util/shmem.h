/*
 * shmem.h - shareable memory: segments backed by memfd, and a process-wide registry of them.
 *
 * A segment is created with memfd_create, sized, sealed against shrinking and mapped
 * MAP_SHARED.  A peer process on the same host maps it by opening /proc/<pid>/fd/<fd> (or,
 * where that is refused, pidfd_getfd) and checking the inode number, so nothing is ever named
 * in /dev/shm: when the last process holding a segment exits, even by SIGKILL, the kernel
 * frees it.  A segment is named to peers by (pid, fd, inode, size); see fy_shmem_find().
 *
 * Users: the proto layer allocates FERRY_MEM_ALLOCATE memory here; the shm transport
 * allocates its receive rings here and recognises registered memory that lives in a segment,
 * so a peer can map it and reach it with loads, stores and atomics instead of system calls.
 * Every function is thread-safe (one mutex; none of them is on a fast path).
 */
#ifndef FY_UTIL_SHMEM_H
#define FY_UTIL_SHMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ferry.h"

/* How a peer finds a segment: open /proc/<pid>/fd/<fd>, check the inode, map size bytes. */
typedef struct fy_shmem_ref {
    int32_t pid;   /* the process that allocated the segment */
    int32_t fd;    /* its memfd, open in that process */
    uint64_t ino;  /* inode number of the memfd (guards against a reused pid or fd) */
    uint64_t size; /* bytes of the segment (a page multiple) */
} fy_shmem_ref_t;

/* Allocate len bytes (rounded up to pages) of zeroed shareable memory, every page reserved
 * (posix_fallocate) before it is mapped, so no later access can fault for want of memory.
 * name shows in /proc/<pid>/maps as "memfd:<name>".  FERRY_ERR_NO_MEMORY (with an error
 * logged naming the size) / FERRY_ERR_IO on failure. */
ferry_status_t fy_shmem_alloc(size_t len, const char *name, void **addr_p);
/* The same with only the first `reserve` bytes reserved: the rest is reserved by
 * fy_shmem_reserve before its first use (a part used rarely costs no memory until then). */
ferry_status_t fy_shmem_alloc_part(size_t len, size_t reserve, const char *name, void **addr_p);
/* Reserve [off, off + len) of a segment allocated here (posix_fallocate on its memfd).  OK,
 * or FERRY_ERR_NO_MEMORY where the memory is not there (nothing is logged). */
ferry_status_t fy_shmem_reserve(void *addr, size_t off, size_t len);
/* Give the memory of [off, off + len) of a segment allocated here back to the system (a hole
 * punched in its memfd: every mapping of it, here and in peers, reads zeros there until it is
 * written or reserved again; the size stays).  OK, or the error (the memory is then kept). */
ferry_status_t fy_shmem_release(void *addr, size_t off, size_t len);

/* Map the pages of [p, p + len) of a mapped segment (ours or a peer's) into this process now,
 * instead of at each page's first touch, and read a byte of each (nothing is written).  The
 * range must lie in reserved memory. */
void fy_shmem_populate(void *p, size_t len);
/* Free a segment from fy_shmem_alloc (addr is its start).  NULL is accepted.  Mappings that
 * peers hold stay valid until they detach. */
void fy_shmem_free(void *addr);

/* How many segments fy_shmem_alloc (not _part) made here are live: a read without the lock;
 * 0 says that no memory given to users (FERRY_MEM_ALLOCATE) exists, before fy_shmem_find's. */
unsigned fy_shmem_allocated(void);

/* Does [addr, addr + len) lie inside one segment allocated by this process?  If so fill *ref
 * (how a peer maps the whole segment) and *offset (of addr in it), and return 1. */
int fy_shmem_find(const void *addr, size_t len, fy_shmem_ref_t *ref, size_t *offset);

/* Map a segment named by ref (of another process, or of this one: then its own mapping is
 * returned).  Attachments are counted: attaching a segment already attached returns the same
 * address.  FERRY_ERR_ACCESS_DENIED when the process refuses access, FERRY_ERR_NO_ELEM when
 * the segment is gone (process exited, fd closed, inode differs). */
ferry_status_t fy_shmem_attach(const fy_shmem_ref_t *ref, void **addr_p);
/* Drop one attachment (addr as returned by fy_shmem_attach). */
void fy_shmem_detach(void *addr);
/* The same, but a peer's segment stays mapped, parked, when its last attachment goes (the next
 * attach finds it: no mmap, no page faults again), until fy_shmem_trim unmaps it. */
void fy_shmem_detach_park(void *addr);
/* How many are parked (a cheap read); unmap those parked idle_ns or more, or whose owner died. */
unsigned fy_shmem_parked(void);
void fy_shmem_trim(uint64_t now, uint64_t idle_ns);

#endif
