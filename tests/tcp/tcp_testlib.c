/*
 * tcp_testlib.c - helpers for the tl-level tcp tests (see tcp_testlib.h).
 *
 * Waiting never sleeps a fixed time: a node progresses, and when progress found nothing it
 * arms the iface and sleeps in poll() on the event fd (and on a pipe when the test waits for
 * a peer's word), so an idle test process costs no CPU and wakes on the first event.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* the assertion macros of the harness, without its main */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "fytest.h"
#include "tcp_testlib.h"

static void on_am(void *arg, uint8_t id, const void *data, size_t len)
{
    tt_node_t *n = arg;
    if (n->on_am != NULL)
        n->on_am(n, id, data, len);
}

static void on_err(void *arg, fy_tl_ep_t *ep, ferry_status_t st)
{
    tt_node_t *n = arg;
    if (n->nerr < 16) {
        n->err_ep[n->nerr] = ep;
        n->err_st[n->nerr] = st;
    }
    n->nerr++;
}

void tt_open(tt_node_t *n, uint64_t job_key, tt_am_fn_t fn, void *user)
{
    memset(n, 0, sizeof(*n));
    n->tl = fy_tl_find("tcp");
    FY_ASSERT_MSG(n->tl != NULL, "the tcp transport is not built in");
    n->ops = n->tl->ops;
    n->on_am = fn;
    n->user = user;
    FY_ASSERT_OK(n->ops->md_open(n->tl, &n->md));
    unsigned count = 0;
    FY_ASSERT_OK(n->ops->query_devices(n->md, &n->dev, 1, &count));
    FY_ASSERT_MSG(count == 1, "tcp found no device");
    fy_tl_iface_params_t p = {
        .device = n->dev.name,
        .am_cb = on_am,
        .am_arg = n,
        .err_cb = on_err,
        .err_arg = n,
        .job_key = job_key,
        .worker_uuid = (uint64_t)getpid(),
    };
    FY_ASSERT_OK(n->ops->iface_open(n->md, &p, &n->iface));
    n->ops->iface_query(n->iface, &n->attr);
    FY_ASSERT(n->attr.device_addr_len <= sizeof(((tt_addr_t *)0)->dev));
    FY_ASSERT(n->attr.iface_addr_len <= sizeof(((tt_addr_t *)0)->iface));
}

void tt_close(tt_node_t *n)
{
    n->ops->iface_close(n->iface);
    n->ops->md_close(n->md);
}

void tt_get_addr(tt_node_t *n, tt_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    FY_ASSERT_OK(n->ops->iface_get_address(n->iface, a->dev, a->iface));
}

fy_tl_ep_t *tt_ep(tt_node_t *n, const tt_addr_t *a)
{
    FY_ASSERT(n->ops->iface_is_reachable(n->iface, a->dev, a->iface));
    fy_tl_ep_t *ep = NULL;
    FY_ASSERT_OK(n->ops->ep_create(n->iface, a->dev, a->iface, &ep));
    FY_ASSERT(ep != NULL);
    return ep;
}

unsigned tt_progress(tt_node_t *n)
{
    return n->ops->iface_progress(n->iface);
}

int tt_wait(tt_node_t *n, int extra_fd, int ms)
{
    if (tt_progress(n) != 0)
        return extra_fd >= 0 && tt_readable(extra_fd);
    if (n->ops->iface_event_arm(n->iface) != FERRY_OK)
        return extra_fd >= 0 && tt_readable(extra_fd);
    struct pollfd p[2] = {{.fd = n->ops->iface_event_fd(n->iface), .events = POLLIN},
                          {.fd = extra_fd, .events = POLLIN}};
    int r = poll(p, extra_fd >= 0 ? 2 : 1, ms);
    FY_ASSERT(r >= 0 || errno == EINTR);
    return extra_fd >= 0 && r > 0 && (p[1].revents & (POLLIN | POLLHUP)) != 0;
}

static void comp_cb(fy_tl_comp_t *c, ferry_status_t st)
{
    tt_comp_t *t = (tt_comp_t *)c;
    FY_ASSERT_MSG(!t->done, "a completion called twice");
    t->done = 1;
    t->status = st;
}

void tt_comp_init(tt_comp_t *c)
{
    memset(c, 0, sizeof(*c));
    c->super.cb = comp_cb;
}

void tt_comp_wait(tt_node_t *n, tt_comp_t *c)
{
    while (!c->done)
        tt_wait(n, -1, 1000);
}

void tt_fork(tt_proc_t *p, void (*fn)(int rfd, int wfd, void *arg), void *arg)
{
    int to_child[2], to_parent[2];
    FY_ASSERT(pipe(to_child) == 0 && pipe(to_parent) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    FY_ASSERT(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        fn(to_child[0], to_parent[1], arg);
        fytest_exit(0);
    }
    close(to_child[0]);
    close(to_parent[1]);
    p->pid = pid;
    p->rfd = to_parent[0];
    p->wfd = to_child[1];
}

void tt_join(tt_proc_t *p)
{
    int st = 0;
    while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
    }
    FY_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "peer %d ended with status 0x%x",
                  (int)p->pid, st);
    close(p->rfd);
    close(p->wfd);
}

void tt_write(int fd, const void *buf, size_t len)
{
    const char *c = buf;
    while (len > 0) {
        ssize_t n = write(fd, c, len);
        if (n < 0 && errno == EINTR)
            continue;
        FY_ASSERT_MSG(n > 0, "pipe write: %s", strerror(errno));
        c += n;
        len -= (size_t)n;
    }
}

void tt_read(int fd, void *buf, size_t len)
{
    char *c = buf;
    while (len > 0) {
        ssize_t n = read(fd, c, len);
        if (n < 0 && errno == EINTR)
            continue;
        FY_ASSERT_MSG(n > 0, "pipe read: %s", n == 0 ? "the other side is gone" : strerror(errno));
        c += n;
        len -= (size_t)n;
    }
}

int tt_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

void tt_fill(void *p, size_t len, uint64_t seed)
{
    unsigned char *c = p;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(c + i, &x, 8);
    }
    for (; i < len; i++)
        c[i] = (unsigned char)(seed + i);
}

uint64_t tt_sum(const void *p, size_t len)
{
    const unsigned char *c = p;
    uint64_t h = 0xcbf29ce484222325ull ^ len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < len; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}
