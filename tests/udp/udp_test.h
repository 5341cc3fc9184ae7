/*
 * udp_test.h - helpers for the udp transport's tests and tools: open the transport directly
 * (fy_tl_find("udp")->ops, no proto), fork a peer and exchange addresses over pipes (never
 * sleep to wait), progress with or without sleeping on the event fd, and a checked message
 * stream (every message numbered and checksummed) used by the transfer tests.
 */
#ifndef FY_UDP_TEST_H
#define FY_UDP_TEST_H

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fytest_proc.h"
#include "tl/tl.h"
#include "util/clock.h"
#include "util/status.h"

#define UT_JOB_KEY  0x5eedf00dcafe0001ull
#define UT_ADDR_MAX 128

typedef struct ut_node {
    const fy_tl_component_t *tl;
    const fy_tl_ops_t *ops;
    fy_tl_md_t *md;
    fy_tl_iface_t *iface;
    fy_tl_ep_t *ep;
    fy_tl_iface_attr_t attr;
    int sleepy; /* wait on the event fd instead of spinning */
    int failed; /* err_cb seen */
    ferry_status_t fail_status;
    uint64_t fail_ns;
} ut_node_t;

/* An address as exchanged over the pipe. */
typedef struct ut_addr {
    uint32_t dlen, ilen;
    uint8_t bytes[UT_ADDR_MAX];
} ut_addr_t;

static inline void ut_err_cb(void *arg, fy_tl_ep_t *ep, ferry_status_t status)
{
    ut_node_t *n = arg;
    n->failed = 1;
    n->fail_status = status;
    n->fail_ns = fy_time_ns();
}

static inline int ut_open(ut_node_t *n, const char *device, fy_tl_am_cb_t am_cb, void *am_arg)
{
    fy_tl_iface_params_t p;
    memset(n, 0, sizeof(*n));
    n->tl = fy_tl_find("udp");
    if (n->tl == NULL)
        return -1;
    n->ops = n->tl->ops;
    if (n->ops->md_open(n->tl, &n->md) != FERRY_OK)
        return -2;
    memset(&p, 0, sizeof(p));
    p.device = device;
    p.am_cb = am_cb;
    p.am_arg = am_arg;
    p.err_cb = ut_err_cb;
    p.err_arg = n;
    p.job_key = UT_JOB_KEY;
    p.worker_uuid = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
    if (n->ops->iface_open(n->md, &p, &n->iface) != FERRY_OK) {
        n->ops->md_close(n->md);
        n->md = NULL;
        return -3;
    }
    n->ops->iface_query(n->iface, &n->attr);
    return 0;
}

static inline void ut_close(ut_node_t *n)
{
    if (n->ep != NULL)
        n->ops->ep_destroy(n->ep);
    if (n->iface != NULL)
        n->ops->iface_close(n->iface);
    if (n->md != NULL)
        n->ops->md_close(n->md);
}

static inline void ut_get_addr(ut_node_t *n, ut_addr_t *a)
{
    a->dlen = (uint32_t)n->attr.device_addr_len;
    a->ilen = (uint32_t)n->attr.iface_addr_len;
    n->ops->iface_get_address(n->iface, a->bytes, a->bytes + a->dlen);
}

static inline ferry_status_t ut_connect(ut_node_t *n, const ut_addr_t *a)
{
    if (!n->ops->iface_is_reachable(n->iface, a->bytes, a->bytes + a->dlen))
        return FERRY_ERR_UNREACHABLE;
    return n->ops->ep_create(n->iface, a->bytes, a->bytes + a->dlen, &n->ep);
}

static inline int ut_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t r = write(fd, p, len);
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static inline int ut_read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* A peer process running fn(rfd, wfd, arg), whose return value is its exit status, started
 * by the tree's one helper (fytest_proc.h: own process group, hard timeout, death with the
 * parent).  Returns the pid; *p has the pipes (p->rfd: what the peer writes). */
#define UT_PEER_TIMEOUT 200 /* seconds */
typedef struct ut_body {
    int (*fn)(int rfd, int wfd, void *arg);
    void *arg;
} ut_body_t;

static inline void ut_body_run(int rfd, int wfd, void *arg)
{
    ut_body_t *b = arg;
    fflush(stdout);
    exit(b->fn(rfd, wfd, b->arg));
}

static inline pid_t ut_spawn(fyproc_t *p, int (*fn)(int rfd, int wfd, void *arg), void *arg)
{
    ut_body_t b = {fn, arg}; /* the child has its copy from fork */
    if (fyproc_fork(p, ut_body_run, &b, UT_PEER_TIMEOUT) != 0)
        return -1;
    return p->pid;
}

/* One progress step; a sleepy node that found nothing sleeps on the event fd (up to ms). */
static inline unsigned ut_progress(ut_node_t *n, int ms)
{
    unsigned e = n->ops->iface_progress(n->iface);
    if (e == 0 && n->sleepy && n->ops->iface_event_arm(n->iface) == FERRY_OK) {
        struct pollfd pfd = {n->ops->iface_event_fd(n->iface), POLLIN, 0};
        poll(&pfd, 1, ms);
    }
    return e;
}

/* Progress until *flag becomes nonzero or timeout_ms passes; returns the flag. */
static inline int ut_wait_flag(ut_node_t *n, volatile int *flag, int timeout_ms)
{
    uint64_t end = fy_time_ns() + (uint64_t)timeout_ms * FY_NSEC_PER_MSEC;
    unsigned idle = 0;
    while (!*flag && fy_time_ns() < end) {
        if (ut_progress(n, 10) == 0 && ++idle > 256 && !n->sleepy) {
            /* more processes than cores: let the peer run */
            idle = 0;
            sched_yield();
        }
    }
    return *flag;
}

/* ---- a checked stream of messages ----------------------------------------------------- */

/* Message i: [u32 index][u32 len][u32 crc][len bytes of pattern(i)] */
#define UT_META 12

static inline void ut_pattern(uint8_t *buf, size_t len, uint32_t index)
{
    uint64_t s = 0x9e3779b97f4a7c15ull * (index + 1);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        memcpy(buf + i, &s, 8);
    }
    for (; i < len; i++)
        buf[i] = (uint8_t)(index + i);
}

uint32_t fy_udp_crc32c(uint32_t crc, const void *buf, size_t len);

typedef struct ut_rx {
    uint32_t expect; /* next index */
    uint32_t count;  /* messages expected in all */
    uint64_t bytes;
    int bad; /* first error seen */
    char why[200];
    volatile int done;
} ut_rx_t;

/* The receiver's AM handler for id 1: check number, length and content. */
static inline void ut_rx_check(ut_rx_t *rx, const void *data, size_t len)
{
    uint32_t meta[3];
    if (rx->bad)
        return;
    if (len < UT_META) {
        rx->bad = 1;
        snprintf(rx->why, sizeof(rx->why), "message %u: %zu bytes, shorter than its header",
                 rx->expect, len);
        return;
    }
    memcpy(meta, data, sizeof(meta));
    if (meta[0] != rx->expect || meta[1] != len - UT_META) {
        rx->bad = 1;
        snprintf(rx->why, sizeof(rx->why),
                 "expected message %u, got %u (len %u, %zu bytes arrived)", rx->expect, meta[0],
                 meta[1], len - UT_META);
        return;
    }
    uint32_t crc = fy_udp_crc32c(0, (const uint8_t *)data + UT_META, len - UT_META);
    if (crc != meta[2]) {
        rx->bad = 1;
        snprintf(rx->why, sizeof(rx->why), "message %u (%zu bytes): checksum differs", rx->expect,
                 len - UT_META);
        return;
    }
    rx->expect++;
    rx->bytes += len - UT_META;
    if (rx->expect == rx->count)
        rx->done = 1;
}

/* ---- two interfaces in one process, progressed in turn (no fork, no pipes) ----------- */

typedef struct ut_side {
    fy_tl_md_t *md; /* its own (tests that set the environment per side), or NULL */
    fy_tl_iface_t *iface;
    fy_tl_ep_t *ep;
    uint8_t dev[64], ifa[64];
    volatile int ams, errs; /* AMs received, errors reported */
} ut_side_t;

static inline void ut_side_am(void *arg, uint8_t id, const void *data, size_t len)
{
    (void)id;
    (void)data;
    (void)len;
    ((ut_side_t *)arg)->ams++;
}

static inline void ut_side_err(void *arg, fy_tl_ep_t *ep, ferry_status_t st)
{
    (void)ep;
    (void)st;
    ((ut_side_t *)arg)->errs++;
}

/* Open s's interface on the loopback in md, its AMs and errors counted in s, its address in
 * s->dev and s->ifa. */
static inline ferry_status_t ut_side_open(const fy_tl_ops_t *ops, ut_side_t *s, fy_tl_md_t *md,
                                          uint64_t uuid)
{
    fy_tl_iface_params_t p = {.device = "lo",
                              .am_cb = ut_side_am,
                              .am_arg = s,
                              .err_cb = ut_side_err,
                              .err_arg = s,
                              .job_key = UT_JOB_KEY,
                              .worker_uuid = uuid};
    ferry_status_t st = ops->iface_open(md, &p, &s->iface);
    return st != FERRY_OK ? st : ops->iface_get_address(s->iface, s->dev, s->ifa);
}

/* A side on the loopback, IPv4, with an md of its own (so it reads the environment as it is
 * now); *ops is set to the udp transport's.  ut_lo_close undoes it (and the ep, if any). */
static inline ferry_status_t ut_lo_open(const fy_tl_ops_t **ops, ut_side_t *s, uint64_t uuid)
{
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_AF", "inet", 1);
    const fy_tl_component_t *tl = fy_tl_find("udp");
    if (tl == NULL)
        return FERRY_ERR_UNSUPPORTED;
    *ops = tl->ops;
    memset(s, 0, sizeof(*s));
    ferry_status_t st = tl->ops->md_open(tl, &s->md);
    return st != FERRY_OK ? st : ut_side_open(tl->ops, s, s->md, uuid);
}

static inline void ut_lo_close(const fy_tl_ops_t *ops, ut_side_t *s)
{
    if (s->ep != NULL)
        ops->ep_destroy(s->ep);
    ops->iface_close(s->iface);
    ops->md_close(s->md);
}

/* Progress a and b in turn until *flag reaches want; 0, or -1 after timeout_ms. */
static inline int ut_sides_until(const fy_tl_ops_t *ops, ut_side_t *a, ut_side_t *b,
                                 volatile int *flag, int want, int timeout_ms)
{
    uint64_t end = fy_time_ns() + (uint64_t)timeout_ms * FY_NSEC_PER_MSEC;
    while (*flag < want) {
        ops->iface_progress(a->iface);
        ops->iface_progress(b->iface);
        if (fy_time_ns() > end)
            return -1;
    }
    return 0;
}

/* Open a and b on the loopback with one connection, an ep on each side (b's adopts the one a
 * opened), and one short AM (id 2, "ping") each way; 0, or -1 with a message. */
static inline int ut_lo_pair(const fy_tl_ops_t **ops, ut_side_t *a, ut_side_t *b, uint64_t uuid_a,
                             uint64_t uuid_b)
{
    struct iovec iov = {"ping", 4};
    if (ut_lo_open(ops, a, uuid_a) != FERRY_OK || ut_lo_open(ops, b, uuid_b) != FERRY_OK ||
        (*ops)->ep_create(a->iface, b->dev, b->ifa, &a->ep) != FERRY_OK ||
        (*ops)->am_short(a->ep, 2, &iov, 1) != FERRY_OK ||
        ut_sides_until(*ops, a, b, &b->ams, 1, 10000) != 0 ||
        (*ops)->ep_create(b->iface, a->dev, a->ifa, &b->ep) != FERRY_OK ||
        (*ops)->am_short(b->ep, 2, &iov, 1) != FERRY_OK ||
        ut_sides_until(*ops, a, b, &a->ams, 1, 10000) != 0) {
        fprintf(stderr, "ut_lo_pair: the loopback pair did not connect\n");
        return -1;
    }
    return 0;
}

#endif
