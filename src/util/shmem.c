/*
 * shmem.c - memfd-backed shareable segments and the process-wide table of those mapped here.
 *
 * Why memfd and /proc/<pid>/fd: a named POSIX segment (/dev/shm) outlives a process killed
 * before it can unlink it; a memfd has no name, so the kernel frees it with the last fd or
 * mapping.  A peer reaches it through the owner's fd table, which needs the same permission
 * as reading the owner's /proc entries (same user, dumpable) — the same trust that
 * cross-memory attach needs, so the shm transport asks for nothing more.  The segment is
 * sealed against shrinking and growing: a peer cannot truncate it under the owner (which
 * would turn the owner's next access into SIGBUS).  Every page is reserved with
 * posix_fallocate before the segment is mapped: where the memory is not there (a memory
 * limit, a full tmpfs) the allocation fails with an error naming the size, instead of a
 * SIGBUS or an OOM kill at some later first touch, in whichever process touches first.
 *
 * The table holds both segments allocated here (owned, with their memfd open) and segments
 * of peers attached here (counted, so two endpoints to one peer share one mapping).  It is a
 * small array under a mutex: allocation, registration and attachment are slow-path calls.
 *
 * A peer's segment whose last attachment is dropped stays mapped, parked (up to SHMEM_PARKED,
 * the least recently parked going first), until fy_shmem_trim finds it idle or its owner dead:
 * the shm transport attaches a sender's memory per message read in place and per rendezvous
 * key, and a fresh mapping would cost an mmap and a page fault per 4 KiB touched each time.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/shmem.h"
#include "util/status.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

typedef struct shmem_entry {
    char *addr;
    size_t size;
    fy_shmem_ref_t ref; /* ref.fd is -1 for a peer's segment */
    unsigned refs;      /* the owner's allocation counts one */
    int owned;          /* allocated here and not yet freed */
    uint64_t parked;    /* a peer's, with no attachment: since when (fy_time_ns), else 0 */
    int whole;          /* ours, from fy_shmem_alloc (counted in shmem_nwhole) */
} shmem_entry_t;

#define SHMEM_PARKED 16

static pthread_mutex_t shmem_lock = PTHREAD_MUTEX_INITIALIZER;
static shmem_entry_t *shmem_tab;
static size_t shmem_count, shmem_cap;
static unsigned shmem_nparked; /* read without the lock by fy_shmem_parked */
static unsigned shmem_nwhole;  /* and by fy_shmem_allocated */

static ferry_status_t table_add(const shmem_entry_t *e)
{
    if (shmem_count == shmem_cap) {
        size_t cap = shmem_cap ? shmem_cap * 2 : 16;
        shmem_entry_t *t = realloc(shmem_tab, cap * sizeof(*t));
        if (t == NULL)
            return FERRY_ERR_NO_MEMORY;
        shmem_tab = t;
        shmem_cap = cap;
    }
    shmem_tab[shmem_count++] = *e;
    return FERRY_OK;
}

static void table_drop(size_t i)
{
    shmem_entry_t *e = &shmem_tab[i];
    munmap(e->addr, e->size);
    if (e->ref.fd >= 0)
        close(e->ref.fd);
    shmem_tab[i] = shmem_tab[--shmem_count];
    if (shmem_count == 0) {
        free(shmem_tab);
        shmem_tab = NULL;
        shmem_cap = 0;
    }
}

/* A peer's segment lost its last attachment (lock held): keep it mapped for a while. */
static void park(size_t i)
{
    if (shmem_tab[i].ref.fd >= 0) { /* (only peers' segments come here) */
        table_drop(i);
        return;
    }
    if (shmem_nparked == SHMEM_PARKED) {
        size_t old = SIZE_MAX;
        for (size_t k = 0; k < shmem_count; k++)
            if (shmem_tab[k].parked != 0 &&
                (old == SIZE_MAX || shmem_tab[k].parked < shmem_tab[old].parked))
                old = k;
        __atomic_store_n(&shmem_nparked, shmem_nparked - 1, __ATOMIC_RELAXED);
        table_drop(old); /* moves the last entry into old: i may have moved */
        if (i == shmem_count)
            i = old;
    }
    shmem_tab[i].parked = fy_time_ns() | 1;
    __atomic_store_n(&shmem_nparked, shmem_nparked + 1, __ATOMIC_RELAXED);
}

/* Has the process gone (a parked mapping of it only holds memory)? */
static int owner_dead(int32_t pid)
{
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static shmem_entry_t *table_by_addr(const void *addr, size_t *idx)
{
    for (size_t i = 0; i < shmem_count; i++)
        if (shmem_tab[i].addr == addr) {
            *idx = i;
            return &shmem_tab[i];
        }
    return NULL;
}

static int create_memfd(const char *name)
{
    /* Newer kernels warn when neither MFD_EXEC nor MFD_NOEXEC_SEAL is given; older ones
     * reject the flag with EINVAL. */
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
    if (fd < 0 && errno == EINVAL)
        fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    return fd;
}

static ferry_status_t alloc_seg(size_t len, size_t reserve, const char *name, int whole,
                                void **addr_p);

ferry_status_t fy_shmem_alloc(size_t len, const char *name, void **addr_p)
{
    return alloc_seg(len, len, name, 1, addr_p);
}

ferry_status_t fy_shmem_alloc_part(size_t len, size_t reserve, const char *name, void **addr_p)
{
    return alloc_seg(len, reserve, name, 0, addr_p);
}

unsigned fy_shmem_allocated(void)
{
    return __atomic_load_n(&shmem_nwhole, __ATOMIC_RELAXED);
}

static ferry_status_t alloc_seg(size_t len, size_t reserve, const char *name, int whole,
                                void **addr_p)
{
    long page = sysconf(_SC_PAGESIZE);
    if (len == 0 || len > SIZE_MAX - (size_t)page)
        return FERRY_ERR_INVALID_PARAM;
    size_t size = FY_ALIGN_UP(len, (size_t)page);
    reserve = FY_MIN(FY_ALIGN_UP(reserve, (size_t)page), size);
    int fd = create_memfd(name != NULL ? name : "ferry");
    if (fd < 0) {
        fy_error("memfd_create(%s) failed: %m", name);
        return fy_status_from_errno(errno);
    }
    ferry_status_t st;
    if (ftruncate(fd, (off_t)size) != 0) {
        fy_error("sizing a shared segment to %zu bytes failed: %m", size);
        st = FERRY_ERR_NO_MEMORY;
        goto err_close;
    }
    int err = reserve != 0 ? posix_fallocate(fd, 0, (off_t)reserve) : 0;
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
        fy_error("cannot reserve %zu bytes of shared memory for a segment (%s): %s; memfd "
                 "segments are charged to this process's memory, not to /dev/shm: is a memory "
                 "limit (cgroup, ulimit) reached?",
                 reserve, name != NULL ? name : "ferry", strerror(err));
        st = err == ENOMEM || err == ENOSPC || err == EFBIG ? FERRY_ERR_NO_MEMORY
                                                            : fy_status_from_errno(err);
        goto err_close;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        fy_debug("sealing a shared segment failed: %m (continuing unsealed)");
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = FERRY_ERR_IO;
        goto err_close;
    }
    void *addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
        fy_error("mapping a shared segment of %zu bytes failed: %m", size);
        st = FERRY_ERR_NO_MEMORY;
        goto err_close;
    }
    shmem_entry_t e = {.addr = addr,
                       .size = size,
                       .ref = {.pid = (int32_t)getpid(), .fd = fd, .ino = sb.st_ino, .size = size},
                       .refs = 1,
                       .owned = 1,
                       .whole = whole};
    pthread_mutex_lock(&shmem_lock);
    st = table_add(&e);
    if (st == FERRY_OK && whole)
        __atomic_store_n(&shmem_nwhole, shmem_nwhole + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&shmem_lock);
    if (st != FERRY_OK) {
        munmap(addr, size);
        goto err_close;
    }
    *addr_p = addr;
    return FERRY_OK;

err_close:
    close(fd);
    return st;
}

/* The fd of the segment we own at addr when [off, off + len) lies inside it, else -1. */
static int owned_range_fd(void *addr, size_t off, size_t len)
{
    size_t i;
    pthread_mutex_lock(&shmem_lock);
    shmem_entry_t *e = table_by_addr(addr, &i);
    int fd = e != NULL && e->owned ? e->ref.fd : -1;
    size_t size = e != NULL ? e->size : 0;
    pthread_mutex_unlock(&shmem_lock);
    return off > size || len > size - off ? -1 : fd;
}

ferry_status_t fy_shmem_reserve(void *addr, size_t off, size_t len)
{
    int fd = owned_range_fd(addr, off, len);
    if (fd < 0)
        return FERRY_ERR_INVALID_PARAM;
    int err = posix_fallocate(fd, (off_t)off, (off_t)len);
    if (err == 0 || err == EOPNOTSUPP || err == EINVAL)
        return FERRY_OK;
    return err == ENOMEM || err == ENOSPC || err == EFBIG ? FERRY_ERR_NO_MEMORY
                                                          : fy_status_from_errno(err);
}

ferry_status_t fy_shmem_release(void *addr, size_t off, size_t len)
{
    int fd = owned_range_fd(addr, off, len);
    if (fd < 0)
        return FERRY_ERR_INVALID_PARAM;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) != 0)
        return fy_status_from_errno(errno);
    return FERRY_OK;
}

/*
 * A page of a shared segment is mapped into a process at its first touch there: a page fault,
 * in each process that touches it.  On the reference host (a VM) the first lap of a peer's
 * ring (256 cells, 8 KiB buffers) cost every message above the inline size ~24 us on each
 * side that way: am_lat 1 KiB 24 us for the first ~300 round trips, 0.49 after (2026-12-02).
 * MADV_POPULATE_WRITE maps the range in one call (nothing of a peer's cells is written).  That
 * halved it: the guest's faults were gone (perf stat: flat at ~405 over 10 to 3000 round
 * trips, against +1000 before), yet the first lap still ran at 12 us a message, the first
 * access of each page costing the host's own paging.  A read of one byte of each page, once,
 * takes that too (0.52 us from the first round trip; the process starts no slower: ~70 ms
 * for ferryrun -n 2 either way).  The read is atomic (relaxed): a peer may be writing there.
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
void fy_shmem_populate(void *p, size_t len)
{
    static int unsupported;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(page - 1);
    uintptr_t hi = FY_ALIGN_UP((uintptr_t)p + len, (uintptr_t)page);
    if (len == 0)
        return;
    if (!__atomic_load_n(&unsupported, __ATOMIC_RELAXED) &&
        madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) != 0) {
        if (errno == EINVAL)
            __atomic_store_n(&unsupported, 1, __ATOMIC_RELAXED); /* a kernel before 5.14 */
        fy_debug("populating %zu bytes of a shared segment failed: %m (read page by page)",
                 (size_t)(hi - lo));
    }
    for (uintptr_t a = lo; a < hi; a += page)
        (void)__atomic_load_n((const char *)a, __ATOMIC_RELAXED);
}

void fy_shmem_free(void *addr)
{
    if (addr == NULL)
        return;
    size_t i;
    pthread_mutex_lock(&shmem_lock);
    shmem_entry_t *e = table_by_addr(addr, &i);
    if (e == NULL || !e->owned) {
        pthread_mutex_unlock(&shmem_lock);
        fy_error("fy_shmem_free(%p): not a segment allocated here", addr);
        return;
    }
    e->owned = 0;
    if (e->whole)
        __atomic_store_n(&shmem_nwhole, shmem_nwhole - 1, __ATOMIC_RELAXED);
    if (--e->refs == 0)
        table_drop(i);
    pthread_mutex_unlock(&shmem_lock);
}

int fy_shmem_find(const void *addr, size_t len, fy_shmem_ref_t *ref, size_t *offset)
{
    uintptr_t a = (uintptr_t)addr;
    int found = 0;
    pthread_mutex_lock(&shmem_lock);
    for (size_t i = 0; i < shmem_count && !found; i++) {
        const shmem_entry_t *e = &shmem_tab[i];
        uintptr_t b = (uintptr_t)e->addr;
        if (!e->owned || a < b || a - b > e->size || len > e->size - (a - b))
            continue;
        *ref = e->ref;
        *offset = a - b;
        found = 1;
    }
    pthread_mutex_unlock(&shmem_lock);
    return found;
}

/* Open the peer's memfd: through /proc first; pidfd_getfd where /proc is refused. */
static int open_peer_fd(const fy_shmem_ref_t *ref)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)ref->pid, (int)ref->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 || (errno != EACCES && errno != EPERM))
        return fd;
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
    int err = errno;
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)ref->pid, 0);
    if (pidfd >= 0) {
        fd = (int)syscall(SYS_pidfd_getfd, pidfd, ref->fd, 0);
        err = errno;
        close(pidfd);
        if (fd >= 0)
            return fd;
    }
    errno = err;
#endif
    return -1;
}

ferry_status_t fy_shmem_attach(const fy_shmem_ref_t *ref, void **addr_p)
{
    ferry_status_t st = FERRY_OK;
    pthread_mutex_lock(&shmem_lock);
    for (size_t i = 0; i < shmem_count; i++) {
        shmem_entry_t *e = &shmem_tab[i];
        if (e->ref.pid == ref->pid && e->ref.ino == ref->ino && e->size >= ref->size &&
            (e->owned || e->ref.fd < 0)) {
            if (e->parked != 0) {
                e->parked = 0;
                __atomic_store_n(&shmem_nparked, shmem_nparked - 1, __ATOMIC_RELAXED);
            }
            e->refs++;
            *addr_p = e->addr;
            goto out;
        }
    }
    if (ref->pid == (int32_t)getpid()) {
        st = FERRY_ERR_NO_ELEM; /* ours, but freed */
        goto out;
    }
    int fd = open_peer_fd(ref);
    if (fd < 0) {
        int err = errno;
        fy_debug("cannot open segment fd %d of process %d: %s", (int)ref->fd, (int)ref->pid,
                 strerror(err));
        st = (err == EACCES || err == EPERM) ? FERRY_ERR_ACCESS_DENIED : FERRY_ERR_NO_ELEM;
        goto out;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_ino != ref->ino || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size < ref->size || ref->size == 0 || ref->size > SIZE_MAX) {
        fy_debug("fd %d of process %d is not the segment expected (inode %llu, %llu bytes)",
                 (int)ref->fd, (int)ref->pid, (unsigned long long)ref->ino,
                 (unsigned long long)ref->size);
        close(fd);
        st = FERRY_ERR_NO_ELEM;
        goto out;
    }
    void *addr = mmap(NULL, (size_t)ref->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (addr == MAP_FAILED) {
        fy_error("mapping %llu bytes of process %d's segment failed: %m",
                 (unsigned long long)ref->size, (int)ref->pid);
        st = FERRY_ERR_NO_MEMORY;
        goto out;
    }
    shmem_entry_t e = {.addr = addr, .size = (size_t)ref->size, .ref = *ref, .refs = 1};
    e.ref.fd = -1;
    st = table_add(&e);
    if (st != FERRY_OK)
        munmap(addr, (size_t)ref->size);
    else
        *addr_p = addr;
out:
    pthread_mutex_unlock(&shmem_lock);
    return st;
}

static void detach(void *addr, int keep);

void fy_shmem_detach(void *addr)
{
    detach(addr, 0);
}

void fy_shmem_detach_park(void *addr)
{
    detach(addr, 1);
}

static void detach(void *addr, int keep)
{
    if (addr == NULL)
        return;
    size_t i;
    pthread_mutex_lock(&shmem_lock);
    shmem_entry_t *e = table_by_addr(addr, &i);
    if (e == NULL || e->refs == 0 || (e->owned && e->refs == 1))
        fy_error("fy_shmem_detach(%p): not attached", addr);
    else if (--e->refs == 0 && keep)
        park(i);
    else if (e->refs == 0)
        table_drop(i);
    pthread_mutex_unlock(&shmem_lock);
}

unsigned fy_shmem_parked(void)
{
    return __atomic_load_n(&shmem_nparked, __ATOMIC_RELAXED);
}

void fy_shmem_trim(uint64_t now, uint64_t idle_ns)
{
    pthread_mutex_lock(&shmem_lock);
    for (size_t i = shmem_count; i-- > 0;) {
        const shmem_entry_t *e = &shmem_tab[i];
        if (e->parked != 0 && (now - e->parked >= idle_ns || owner_dead(e->ref.pid))) {
            __atomic_store_n(&shmem_nparked, shmem_nparked - 1, __ATOMIC_RELAXED);
            table_drop(i);
        }
    }
    pthread_mutex_unlock(&shmem_lock);
}
