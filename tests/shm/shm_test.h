/*
 * shm_test.h - helpers for the tl-level tests of the shm transport: open an md and an iface,
 * exchange addresses with forked peers over pipes (never by sleeping), drive the ops table,
 * send with retry on back-pressure, idle on the event fd, and fill / check data patterns.
 *
 * Peers are started by the tree's one helper (fytest_proc.h: own process group, hard timeout,
 * death with the parent), and the parent reads its pipe until EOF, so a peer that crashes or
 * hangs fails the case instead of hanging it.
 */
#ifndef SHM_TEST_H
#define SHM_TEST_H

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "fytest.h"
#include "fytest_proc.h"
#include "tl/shm/shm.h"
#include "tl/tl.h"

#define TP_PEER_TIMEOUT 140 /* seconds: below the case timeout CTest sets (FYTEST_TIMEOUT) */

/* ---- pipes and peers ---- */

/* A peer process: the one helper of the tree (fytest_proc.h); pid, rfd (what the peer
 * writes) and wfd (what it reads). */
typedef fyproc_t tchild_t;

static inline void tc_write(int fd, const void *buf, size_t len)
{
    FY_ASSERT_MSG(fyproc_send(fd, buf, len) == 0, "pipe write failed: %s", strerror(errno));
}

static inline void tc_read(int fd, void *buf, size_t len)
{
    FY_ASSERT_MSG(fyproc_recv(fd, buf, len, -1) == 0, "the peer process went away");
}

static inline void tc_put_u64(int fd, uint64_t v)
{
    tc_write(fd, &v, sizeof(v));
}
static inline uint64_t tc_get_u64(int fd)
{
    uint64_t v;
    tc_read(fd, &v, sizeof(v));
    return v;
}

typedef fyproc_body_t tc_fn_t;

static inline tchild_t tc_spawn(tc_fn_t fn, void *arg)
{
    tchild_t c;
    FY_ASSERT(fyproc_fork(&c, fn, arg, TP_PEER_TIMEOUT) == 0);
    return c;
}

static inline void tc_join(tchild_t *c)
{
    int st = fyproc_wait(c, TP_PEER_TIMEOUT * 1000);
    fyproc_release(c);
    FY_ASSERT_MSG(st == 0, "peer %d ended badly: %s %d", (int)c->pid,
                  st > 128 ? "signal" : "exit status", st > 128 ? st - 128 : st);
}

/* ---- a process's transport objects ---- */

typedef struct taddr {
    uint8_t dev[64];
    uint8_t iface[64];
} taddr_t;

typedef struct tproc {
    const fy_tl_component_t *tl;
    const fy_tl_ops_t *ops;
    fy_tl_md_t *md;
    fy_tl_iface_t *iface;
    fy_tl_iface_attr_t attr;
    int sleepy;       /* when idle, sleep on the event fd instead of spinning */
    unsigned nfailed; /* err_cb calls */
    fy_tl_ep_t *failed_ep;
    ferry_status_t fail_status;
} tproc_t;

static inline void tp_err_cb(void *arg, fy_tl_ep_t *ep, ferry_status_t status)
{
    tproc_t *p = arg;
    p->nfailed++;
    p->failed_ep = ep;
    p->fail_status = status;
}

static inline void tp_open(tproc_t *p, fy_tl_am_cb_t cb, void *arg)
{
    memset(p, 0, sizeof(*p));
    p->tl = fy_tl_find("shm");
    FY_ASSERT(p->tl != NULL);
    p->ops = p->tl->ops;
    FY_ASSERT_OK(p->ops->md_open(p->tl, &p->md));
    fy_tl_iface_params_t params = {
        .device = "memory", .am_cb = cb, .am_arg = arg, .err_cb = tp_err_cb, .err_arg = p};
    FY_ASSERT_OK(p->ops->iface_open(p->md, &params, &p->iface));
    p->ops->iface_query(p->iface, &p->attr);
    FY_ASSERT(p->attr.device_addr_len <= sizeof(((taddr_t *)0)->dev));
    FY_ASSERT(p->attr.iface_addr_len <= sizeof(((taddr_t *)0)->iface));
}

static inline void tp_close(tproc_t *p)
{
    p->ops->iface_close(p->iface);
    p->ops->md_close(p->md);
}

static inline taddr_t tp_addr(tproc_t *p)
{
    taddr_t a;
    memset(&a, 0, sizeof(a));
    FY_ASSERT_OK(p->ops->iface_get_address(p->iface, a.dev, a.iface));
    return a;
}

static inline fy_tl_ep_t *tp_ep(tproc_t *p, const taddr_t *a)
{
    fy_tl_ep_t *ep = NULL;
    FY_ASSERT(p->ops->iface_is_reachable(p->iface, a->dev, a->iface));
    FY_ASSERT_OK(p->ops->ep_create(p->iface, a->dev, a->iface, &ep));
    return ep;
}

/* A child's side of the address exchange: read the parent's address from rfd, make an ep to
 * it, and write our own address to wfd (so the parent can make its ep back). */
static inline fy_tl_ep_t *tp_answer(tproc_t *p, int rfd, int wfd)
{
    taddr_t addr;
    tc_read(rfd, &addr, sizeof(addr));
    fy_tl_ep_t *ep = tp_ep(p, &addr);
    taddr_t mine = tp_addr(p);
    tc_write(wfd, &mine, sizeof(mine));
    return ep;
}

/* Sleep on the event fd if the iface agrees that there is nothing to do. */
static inline void tp_idle(tproc_t *p)
{
    if (p->ops->iface_event_arm(p->iface) != FERRY_OK)
        return;
    struct pollfd pf = {.fd = p->ops->iface_event_fd(p->iface), .events = POLLIN};
    poll(&pf, 1, 100);
}

static inline unsigned tp_progress(tproc_t *p)
{
    unsigned n = p->ops->iface_progress(p->iface);
    if (n == 0 && p->sleepy)
        tp_idle(p);
    return n;
}

/* Progress until fd (a pipe from a peer) is readable, idling on the event fd when sleepy. */
static inline void tp_wait_fd(tproc_t *p, int fd)
{
    for (unsigned i = 0;; i++) {
        unsigned n = p->ops->iface_progress(p->iface);
        struct pollfd pf[2] = {{.fd = fd, .events = POLLIN},
                               {.fd = p->ops->iface_event_fd(p->iface), .events = POLLIN}};
        if (n == 0 && p->sleepy && p->ops->iface_event_arm(p->iface) == FERRY_OK)
            poll(pf, 2, 100);
        else if ((i & 255) == 0)
            poll(pf, 1, 0);
        else
            continue;
        if (pf[0].revents != 0)
            return;
    }
}

/* Send one AM of len bytes from buf, choosing short / bcopy / zcopy by size (force_zcopy:
 * always zcopy), retrying while the transport pushes back.  Returns the final status (OK or
 * INPROGRESS for a zcopy; comp then fires later).  *nores counts NO_RESOURCE answers. */
static inline ferry_status_t tp_send(tproc_t *p, fy_tl_ep_t *ep, uint8_t id, const void *buf,
                                     size_t len, int force_zcopy, fy_tl_comp_t *comp,
                                     unsigned long *nores)
{
    const char *b = buf;
    for (;;) {
        ferry_status_t st;
        if (!force_zcopy && len <= p->attr.max_short) {
            /* two pieces, to exercise the gather */
            struct iovec v[2] = {{(void *)b, len / 2}, {(void *)(b + len / 2), len - len / 2}};
            st = p->ops->am_short(ep, id, v, 2);
        } else if (!force_zcopy && len <= p->attr.max_bcopy) {
            struct iovec v[1] = {{(void *)b, len}};
            st = p->ops->am_bcopy(ep, id, v, 1);
        } else {
            size_t h = len < 16 ? len : 16, rest = len - h, third = rest / 3;
            struct iovec v[3] = {{(void *)(b + h), third},
                                 {(void *)(b + h + third), third},
                                 {(void *)(b + h + 2 * third), rest - 2 * third}};
            st = p->ops->am_zcopy(ep, id, b, h, v, 3, comp);
        }
        if (st != FERRY_ERR_NO_RESOURCE)
            return st;
        if (nores != NULL)
            (*nores)++;
        tp_progress(p);
    }
}

/* ---- completions ---- */

typedef struct tcomp {
    fy_tl_comp_t super;
    unsigned done;
    ferry_status_t status;
} tcomp_t;

static inline void tcomp_cb(fy_tl_comp_t *c, ferry_status_t st)
{
    tcomp_t *t = (tcomp_t *)c;
    t->done++;
    t->status = st;
}

static inline void tcomp_init(tcomp_t *c)
{
    c->super.cb = tcomp_cb;
    c->super.flags = 0;
    c->done = 0;
    c->status = FERRY_INPROGRESS;
}

/* ---- data patterns ---- */

static inline uint64_t pat_next(uint64_t *s)
{
    uint64_t x = *s += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline void pat_fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *p = buf;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = pat_next(&seed);
        memcpy(p + i, &v, 8);
    }
    if (i < len) {
        uint64_t v = pat_next(&seed);
        memcpy(p + i, &v, len - i);
    }
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline long pat_check(const void *buf, size_t len, uint64_t seed)
{
    const uint8_t *p = buf;
    size_t i = 0;
    for (; i < len; i += 8) {
        uint64_t v = pat_next(&seed);
        size_t k = len - i < 8 ? len - i : 8;
        if (memcmp(p + i, &v, k) != 0)
            for (size_t j = 0; j < k; j++)
                if (p[i + j] != ((uint8_t *)&v)[j])
                    return (long)(i + j);
    }
    return -1;
}

static inline shm_iface_t *tp_shm(tproc_t *p)
{
    return (shm_iface_t *)p->iface;
}

/* ---- what holds a segment ---- */

/* How many fds and mappings of any process on the host still hold the memfd segment with
 * this inode (0: the kernel has freed it). */
static inline unsigned segment_holders(uint64_t ino)
{
    unsigned n = 0;
    DIR *proc = opendir("/proc");
    FY_ASSERT(proc != NULL);
    struct dirent *p;
    while ((p = readdir(proc)) != NULL) {
        if (p->d_name[0] < '0' || p->d_name[0] > '9')
            continue;
        static const char *const kinds[] = {"fd", "map_files"};
        for (int k = 0; k < 2; k++) {
            char dir[300];
            snprintf(dir, sizeof(dir), "/proc/%s/%s", p->d_name, kinds[k]);
            DIR *d = opendir(dir);
            if (d == NULL)
                continue;
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                char path[600], link[256];
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                ssize_t len = readlink(path, link, sizeof(link) - 1);
                if (len <= 0)
                    continue;
                link[len] = '\0';
                struct stat sb;
                if (strstr(link, "memfd:ferry") != NULL && stat(path, &sb) == 0 &&
                    (uint64_t)sb.st_ino == ino)
                    n++;
            }
            closedir(d);
        }
    }
    closedir(proc);
    return n;
}

static inline uint64_t addr_ino(const taddr_t *a)
{
    return ((const shm_iface_addr_t *)a->iface)->ino;
}

#endif
