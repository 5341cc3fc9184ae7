/*
 * memmon.h - the memory monitor: tells subscribers (registration caches) when a range of the
 * process's address space is unmapped, remapped or given back to the kernel, so a registration
 * of it is never used again.  One monitor per process, shared by every subscriber, started by
 * the first subscription and stopped by the last.  See memmon.c for how (userfaultfd) and why.
 *
 * ORDER GUARANTEE.  When munmap (or mremap, MAP_FIXED, brk shrinking, madvise DONTNEED/REMOVE)
 * of a watched range has returned in some thread, every subscriber's callback for it has run
 * before any later fy_memmon_sync_begin() returns, in any thread.  A cache brackets its lookup
 * with fy_memmon_sync_begin / end, so a lookup after the munmap in program order sees it.
 *
 * THREADS.  Callbacks run in the monitor's own thread, with the monitor's lock held: they must
 * be short, must not unmap watched memory, call fy_memmon_* or free memory that might trim the
 * heap (mark and return).  Everything else here may be called from any thread.
 */
#ifndef FY_UTIL_MEMMON_H
#define FY_UTIL_MEMMON_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

/* [start, end) is no longer what it was. */
typedef void (*fy_memmon_cb_t)(void *arg, uintptr_t start, uintptr_t end);

typedef struct fy_memmon_sub fy_memmon_sub_t;

/* Subscribe; starts the monitor.  FERRY_ERR_UNSUPPORTED when no monitor can work here (the
 * reason, once, at info level; why_p gets a static string naming it). */
ferry_status_t fy_memmon_subscribe(fy_memmon_cb_t cb, void *arg, fy_memmon_sub_t **sub_p,
                                   const char **why_p);
/* Unsubscribe; no callback of sub runs after it returns.  The last one stops the monitor.
 * Accepts NULL. */
void fy_memmon_unsubscribe(fy_memmon_sub_t *sub);

/* Watch [addr, addr + len) (page aligned by the caller).  FERRY_ERR_UNSUPPORTED when this range
 * cannot be watched (not anonymous or shared memory, watched by another monitor, not mapped):
 * the caller must not cache a registration of it. */
ferry_status_t fy_memmon_watch(void *addr, size_t len);

/* Bracket a lookup (see ORDER GUARANTEE).  Nothing that can unmap watched memory or free heap
 * memory may run in between.  Returns 0 when no monitor serves this process (none started, or
 * this is a child forked from the process it serves): cached registrations must not be used. */
int fy_memmon_sync_begin(void);
void fy_memmon_sync_end(void);

/* Events read so far (for tests and statistics). */
uint64_t fy_memmon_events(void);

/* Testing: 1 makes the next subscriptions fail as if the system had no userfaultfd. */
void fy_memmon_test_disable(int disable);

#endif
