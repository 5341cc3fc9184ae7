/*
 * test_tcp_accept.c - the tcp listener when accept() cannot get a file descriptor.
 *
 * A server process fills its fd table (a low RLIMIT_NOFILE, then dup() until EMFILE) while a
 * client connects to it: the connections wait in the kernel's backlog and the listener stays
 * readable.  Over one second of progress the server must use little CPU (no retry loop) and
 * write at most a couple of log lines about it; once fds are free again the waiting
 * connections are accepted and the client's message arrives.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fytest.h"
#include "tcp_testlib.h"
#include "tl/tcp/tcp.h"
#include "util/log.h"

#define AM_ID     5
#define NRAW      4
#define WINDOW_MS 1000

typedef struct report {
    uint64_t cpu_us;     /* CPU time the server used during the window */
    uint64_t log_lines;  /* lines about accept in its log */
    uint64_t got;        /* messages received after fds came back */
    uint64_t accepted;   /* connections accepted in all */
    uint64_t hit_emfile; /* the fd table was really full */
} report_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t cpu_us(void)
{
    struct rusage ru;
    FY_ASSERT(getrusage(RUSAGE_SELF, &ru) == 0);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* f was opened before the fd table filled up */
static uint64_t count_lines(FILE *f, const char *needle)
{
    char line[1024];
    uint64_t n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void count_rx(tt_node_t *n, uint8_t id, const void *data, size_t len)
{
    (void)data;
    (void)len;
    if (id == AM_ID)
        (*(uint64_t *)n->user)++;
}

static void server(int rfd, int wfd, void *arg)
{
    const char *logpath = arg;
    setenv("FERRY_LOG_FILE", logpath, 1);
    fy_log_init();
    report_t rep;
    memset(&rep, 0, sizeof(rep));
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, count_rx, &rep.got);
    tt_addr_t a;
    tt_get_addr(&n, &a);
    tt_write(wfd, &a, sizeof(a));
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    FY_ASSERT(getsockname(fy_tcp_iface(n.iface)->listen_fd, (struct sockaddr *)&sin, &sl) == 0);
    tt_write(wfd, &sin, sizeof(sin));

    /* fill the fd table: the soft limit a little above the highest fd, then dup to it */
    FILE *logf = fopen(logpath, "a+");
    FY_ASSERT_MSG(logf != NULL, "cannot open %s: %s", logpath, strerror(errno));
    rewind(logf);
    struct rlimit rl, low;
    FY_ASSERT(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    int top = dup(0);
    FY_ASSERT(top >= 0);
    low = rl;
    low.rlim_cur = (rlim_t)top + 8;
    FY_ASSERT(setrlimit(RLIMIT_NOFILE, &low) == 0);
    int fill[64], nfill = 0;
    fill[nfill++] = top;
    int fd;
    while (nfill < 64 && (fd = dup(0)) >= 0)
        fill[nfill++] = fd;
    rep.hit_emfile = nfill < 64 && errno == EMFILE;

    uint8_t go = 1;
    tt_write(wfd, &go, 1);
    tt_read(rfd, &go, 1); /* the client has connected (into the backlog) */

    uint64_t c0 = cpu_us(), t0 = now_ms();
    while (now_ms() - t0 < WINDOW_MS)
        tt_wait(&n, -1, 50);
    rep.cpu_us = cpu_us() - c0;
    rep.log_lines = count_lines(logf, "accept");

    /* fds come back: the waiting connections are served */
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    FY_ASSERT(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    uint64_t deadline = now_ms() + 20000;
    while (rep.got < 1 && now_ms() < deadline)
        tt_wait(&n, -1, 100);
    rep.accepted = fy_tcp_iface(n.iface)->accepted;
    tt_write(wfd, &rep, sizeof(rep));
    tt_read(rfd, &go, 1);
    tt_close(&n);
}

static void emfile_backoff(void)
{
    char logpath[64];
    snprintf(logpath, sizeof(logpath), "/tmp/ferry_accept_%d.log", (int)getpid());
    unlink(logpath);
    tt_proc_t srv;
    tt_fork(&srv, server, logpath);
    tt_addr_t sa;
    struct sockaddr_in sin;
    tt_read(srv.rfd, &sa, sizeof(sa));
    tt_read(srv.rfd, &sin, sizeof(sin));
    uint8_t go;
    tt_read(srv.rfd, &go, 1);

    /* plain connections, and a real peer with a message to deliver */
    int raw[NRAW];
    for (int i = 0; i < NRAW; i++) {
        raw[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        FY_ASSERT(raw[i] >= 0);
        FY_ASSERT_MSG(connect(raw[i], (struct sockaddr *)&sin, sizeof(sin)) == 0, "connect: %s",
                      strerror(errno));
    }
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    fy_tl_ep_t *ep = tt_ep(&n, &sa);
    uint64_t token = 0x61636365;
    struct iovec v = {&token, sizeof(token)};
    ferry_status_t st;
    TT_RETRY(&n, st, n.ops->am_short(ep, AM_ID, &v, 1));
    FY_ASSERT_OK(st);
    tt_write(srv.wfd, &go, 1);

    report_t rep;
    while (!tt_wait(&n, srv.rfd, 100)) {
    }
    tt_read(srv.rfd, &rep, sizeof(rep));
    tt_write(srv.wfd, &go, 1);
    n.ops->ep_destroy(ep);
    tt_close(&n);
    for (int i = 0; i < NRAW; i++)
        close(raw[i]);
    tt_join(&srv);

    printf("accept under EMFILE: %llu us of CPU in %d ms, %llu log lines; accepted %llu, "
           "delivered %llu\n",
           (unsigned long long)rep.cpu_us, WINDOW_MS, (unsigned long long)rep.log_lines,
           (unsigned long long)rep.accepted, (unsigned long long)rep.got);
    fflush(stdout);
    unlink(logpath);
    FY_ASSERT_EQ(rep.hit_emfile, 1);
    /* a retry loop burns the whole second; backing off costs a few milliseconds */
    FY_ASSERT_LT(rep.cpu_us, WINDOW_MS * 1000 / 4);
    FY_ASSERT_GE(rep.log_lines, 1); /* the failure is said ... */
    FY_ASSERT_LE(rep.log_lines, 2); /* ... once, not for every retry */
    FY_ASSERT_EQ(rep.got, 1);
    FY_ASSERT_GE(rep.accepted, NRAW + 1);
}

FYTEST_MAIN(FYTEST_CASE(emfile_backoff))
