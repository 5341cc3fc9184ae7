/*
 * memmon.c - the memory monitor over userfaultfd: one descriptor per process, the watched ranges
 * registered on it in write-protect mode, and a thread that turns its UNMAP / REMOVE / REMAP
 * events into subscriber callbacks.
 *
 * WHY USERFAULTFD.  A registration cache must learn that memory it registered went away, also
 * when it goes away inside the C library: free() gives large blocks back with munmap and heap
 * tops with brk or madvise, through internal calls that no symbol interposed in ferry sees.  The
 * kernel sees every one: a userfaultfd with UFFD_FEATURE_EVENT_UNMAP / _REMOVE / _REMAP gets an
 * event for munmap, mremap, MAP_FIXED over a mapping, brk shrinking and madvise(DONTNEED /
 * REMOVE) of any range registered on it, whoever calls them, and the call does not return before
 * the event is read.  Patching the library's own call sites (UCX's relocation patching, the
 * memory hooks libfabric once used) covers more systems but is fragile (static binaries, other
 * allocators, libc internals) - the monitor here is the kernel's, or none.
 *
 * WRITE-PROTECT MODE, NEVER PROTECTING.  A range must be registered in some mode to deliver
 * events.  In MISSING mode every first touch of a page would stop the toucher until we resolved
 * the fault; in WP mode faults come only from pages write-protected with UFFDIO_WRITEPROTECT,
 * which ferry never does.  So watching costs the program nothing but the events themselves.
 * (Should a WP fault arrive anyway, the thread unprotects the page and wakes the faulter.)
 * Ranges stay registered until unmapped or until the monitor stops (closing the descriptor
 * unregisters everything): unregistering an evicted registration's range could silence another
 * one on the same pages.
 *
 * ORDER.  The munmap caller is released when the event is *read*, so the thread reads only
 * while holding `lock` and calls the subscribers before releasing it; fy_memmon_sync_begin takes
 * the same lock.  Hence after munmap returns, the next sync_begin waits for the callbacks.
 *
 * WHEN IT IS UNAVAILABLE.  userfaultfd(2) is tried with UFFD_USER_MODE_ONLY (allowed to
 * unprivileged processes when /proc/sys/vm/unprivileged_userfaultfd is 0, since Linux 5.11:
 * ferry needs no kernel-mode faults), then without it, then /dev/userfaultfd (Linux 6.1, by
 * file permission).  Where all fail (old kernel, seccomp in a container, no permission) or the
 * kernel lacks the events, subscriptions fail and the caches stay pass-through: correct, only
 * slower.  A process forked from one with a monitor has no monitor thread and inherits no
 * registrations (no UFFD_FEATURE_EVENT_FORK): the child sees fy_memmon_sync_begin() return 0
 * and caches nothing.
 *
 * DEADLOCK RULES (why the callbacks only mark): the thread must never block on an event of its
 * own, so it allocates and frees nothing; a thread holding `lock`, or a subscriber's lock the
 * callback takes, must not unmap watched memory - no free() there either, since free can trim
 * the heap.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"
#include "util/memmon.h"

#define MAX_SUBS 64

struct fy_memmon_sub {
    fy_memmon_cb_t cb;
    void *arg;
    int used;
};

static struct {
    pthread_mutex_t life; /* start / stop, subscribe / unsubscribe */
    pthread_mutex_t lock; /* reading events + callbacks, the subscriber table */
    int uffd, wakefd;
    pid_t pid; /* the process the monitor serves */
    pthread_t thread;
    int running;
    unsigned nsubs;
    fy_memmon_sub_t subs[MAX_SUBS];
    int test_disabled;
    uint64_t events;
} mon = {
    .life = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .uffd = -1,
    .wakefd = -1,
};

static const uint64_t want_features =
    UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

/* A userfaultfd with the events enabled, or -1 and why. */
static int uffd_open(const char **why)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0 && errno == EINVAL)
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev >= 0) {
            fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
            close(dev);
        }
        if (fd < 0) {
            *why = e == ENOSYS  ? "userfaultfd is not in this kernel"
                   : e == EPERM ? "userfaultfd is not permitted (vm.unprivileged_userfaultfd=0 "
                                  "and no access to /dev/userfaultfd, or a seccomp filter)"
                                : "userfaultfd failed";
            return -1;
        }
    }
    struct uffdio_api api = {.api = UFFD_API, .features = want_features};
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        *why = "this kernel's userfaultfd lacks the unmap/remove/remap events";
        close(fd);
        return -1;
    }
    return fd;
}

static void dispatch(uintptr_t start, uintptr_t end)
{
    for (unsigned i = 0; i < MAX_SUBS; i++)
        if (mon.subs[i].used)
            mon.subs[i].cb(mon.subs[i].arg, start, end);
}

/* Read every pending event and tell the subscribers; with mon.lock held. */
static void drain(void)
{
    struct uffd_msg msgs[16];
    for (;;) {
        ssize_t n = read(mon.uffd, msgs, sizeof(msgs));
        if (n <= 0)
            return; /* EAGAIN: nothing more */
        for (size_t i = 0; i < (size_t)n / sizeof(msgs[0]); i++) {
            const struct uffd_msg *m = &msgs[i];
            mon.events++;
            switch (m->event) {
            case UFFD_EVENT_UNMAP:
            case UFFD_EVENT_REMOVE:
                dispatch((uintptr_t)m->arg.remove.start, (uintptr_t)m->arg.remove.end);
                break;
            case UFFD_EVENT_REMAP:
                dispatch((uintptr_t)m->arg.remap.from,
                         (uintptr_t)(m->arg.remap.from + m->arg.remap.len));
                break;
            case UFFD_EVENT_PAGEFAULT: {
                /* Not expected (nothing is write-protected): let the faulter go on. */
                long psz = sysconf(_SC_PAGESIZE);
                struct uffdio_writeprotect wp = {
                    .range = {.start = m->arg.pagefault.address & ~(uint64_t)(psz - 1),
                              .len = (uint64_t)psz},
                    .mode = 0};
                if (ioctl(mon.uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
                    struct uffdio_range r = wp.range;
                    ioctl(mon.uffd, UFFDIO_WAKE, &r);
                }
                break;
            }
            default:
                break;
            }
        }
    }
}

static void *monitor_thread(void *arg)
{
    (void)arg;
    struct pollfd pfd[2] = {{.fd = mon.uffd, .events = POLLIN},
                            {.fd = mon.wakefd, .events = POLLIN}};
    for (;;) {
        int n = poll(pfd, 2, -1);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        if (pfd[1].revents)
            break;
        if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL))
            break;
        if (pfd[0].revents & POLLIN) {
            pthread_mutex_lock(&mon.lock);
            drain();
            pthread_mutex_unlock(&mon.lock);
        }
    }
    return NULL;
}

/* A fork while another thread holds a lock would leave it held forever in the child. */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&mon.life);
    pthread_mutex_lock(&mon.lock);
}
static void atfork_release(void)
{
    pthread_mutex_unlock(&mon.lock);
    pthread_mutex_unlock(&mon.life);
}
static void atfork_once(void)
{
    pthread_atfork(atfork_prepare, atfork_release, atfork_release);
}

static ferry_status_t start(const char **why)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, atfork_once);
    mon.uffd = uffd_open(why);
    if (mon.uffd < 0)
        return FERRY_ERR_UNSUPPORTED;
    mon.wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (mon.wakefd < 0) {
        *why = "eventfd failed";
        goto fail;
    }
    if (pthread_create(&mon.thread, NULL, monitor_thread, NULL) != 0) {
        *why = "the monitor thread could not start";
        goto fail;
    }
    pthread_mutex_lock(&mon.lock); /* read by sync_begin and watch under it */
    mon.running = 1;
    mon.pid = getpid();
    pthread_mutex_unlock(&mon.lock);
    return FERRY_OK;
fail:
    if (mon.wakefd >= 0)
        close(mon.wakefd);
    close(mon.uffd);
    mon.uffd = mon.wakefd = -1;
    return FERRY_ERR_UNSUPPORTED;
}

static void stop(void)
{
    uint64_t one = 1;
    if (write(mon.wakefd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        fy_warn("memmon: waking the monitor thread: %s", strerror(errno));
    pthread_join(mon.thread, NULL);
    /* Closing unregisters every watched range and releases anyone waiting on an event. */
    pthread_mutex_lock(&mon.lock);
    mon.running = 0;
    int uffd = mon.uffd, wakefd = mon.wakefd;
    mon.uffd = mon.wakefd = -1;
    pthread_mutex_unlock(&mon.lock);
    close(uffd);
    close(wakefd);
}

ferry_status_t fy_memmon_subscribe(fy_memmon_cb_t cb, void *arg, fy_memmon_sub_t **sub_p,
                                   const char **why_p)
{
    static int told;
    const char *why = NULL;
    ferry_status_t st = FERRY_OK;
    *sub_p = NULL;
    if (cb == NULL)
        return FERRY_ERR_INVALID_PARAM;
    pthread_mutex_lock(&mon.life);
    if (mon.test_disabled) {
        why = "disabled for a test";
        st = FERRY_ERR_UNSUPPORTED;
    } else if (mon.running && mon.pid != getpid()) {
        why = "this process was forked from the one the monitor serves";
        st = FERRY_ERR_UNSUPPORTED;
    } else if (!mon.running) {
        st = start(&why);
    }
    if (st == FERRY_OK) {
        pthread_mutex_lock(&mon.lock);
        for (unsigned i = 0; i < MAX_SUBS; i++)
            if (!mon.subs[i].used) {
                mon.subs[i] = (fy_memmon_sub_t){.cb = cb, .arg = arg, .used = 1};
                *sub_p = &mon.subs[i];
                mon.nsubs++;
                break;
            }
        pthread_mutex_unlock(&mon.lock);
        if (*sub_p == NULL) {
            why = "too many subscribers";
            st = FERRY_ERR_NO_RESOURCE;
            if (mon.nsubs == 0)
                stop();
        }
    }
    pthread_mutex_unlock(&mon.life);
    if (st != FERRY_OK && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        fy_info("memory monitor unavailable (%s): registration caches are off", why);
    if (why_p != NULL)
        *why_p = why;
    return st;
}

void fy_memmon_unsubscribe(fy_memmon_sub_t *sub)
{
    if (sub == NULL)
        return;
    pthread_mutex_lock(&mon.life);
    pthread_mutex_lock(&mon.lock);
    sub->used = 0;
    unsigned left = --mon.nsubs;
    pthread_mutex_unlock(&mon.lock);
    if (left == 0 && mon.running && mon.pid == getpid())
        stop();
    pthread_mutex_unlock(&mon.life);
}

ferry_status_t fy_memmon_watch(void *addr, size_t len)
{
    /* Read the state under the lock, but never hold it across the ioctl: UFFDIO_REGISTER takes
     * the address space's lock, which a munmap waiting for the monitor (which waits for our
     * lock) may hold.  mon.uffd stays open while a subscriber (our caller) exists. */
    pthread_mutex_lock(&mon.lock);
    int uffd = mon.running && mon.pid == getpid() ? mon.uffd : -1;
    pthread_mutex_unlock(&mon.lock);
    if (uffd < 0 || len == 0)
        return FERRY_ERR_UNSUPPORTED;
    struct uffdio_register reg = {
        .range = {.start = (uint64_t)(uintptr_t)addr, .len = len},
        .mode = UFFDIO_REGISTER_MODE_WP,
    };
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) {
        fy_debug("memmon: cannot watch [%p, +%zu): %s", addr, len, strerror(errno));
        return FERRY_ERR_UNSUPPORTED;
    }
    return FERRY_OK;
}

int fy_memmon_sync_begin(void)
{
    pthread_mutex_lock(&mon.lock);
    return mon.running && mon.pid == getpid();
}

void fy_memmon_sync_end(void)
{
    pthread_mutex_unlock(&mon.lock);
}

void fy_memmon_test_disable(int disable)
{
    pthread_mutex_lock(&mon.life);
    mon.test_disabled = disable;
    pthread_mutex_unlock(&mon.life);
}

uint64_t fy_memmon_events(void)
{
    pthread_mutex_lock(&mon.lock);
    uint64_t n = mon.events;
    pthread_mutex_unlock(&mon.lock);
    return n;
}
