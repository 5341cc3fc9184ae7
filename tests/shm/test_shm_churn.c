/*
 * test_shm_churn.c - a long-lived shm iface and many short-lived peers.
 *
 * 200 client processes come one after another: each maps the server's ring, sends a message
 * through its outbox (so the server maps the client's segment), and gets an answer over an ep
 * the server creates back to it and destroys; then it exits.  Afterwards the server's open
 * fds and memfd mappings must be back near where they started: a departed peer's pidfd and
 * mapping are released.  Then a flush to a peer killed with SIGKILL must report an error
 * (not FERRY_OK) and not hang.
 */
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>

#include "fytest.h"
#include "shm_test.h"
#include "tl/shm/shm.h"

#define AM_HELLO  3
#define AM_ANSWER 4
#define NCLIENTS  200
#define MSG_LEN   (32u << 10) /* above the cell buffer: through the sender's outbox */

typedef struct server {
    unsigned got;
    taddr_t from; /* the last client's address (the message starts with it) */
} server_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    FY_ASSERT(d != NULL);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 3; /* ., .. and the directory's own fd */
}

static int count_memfd_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    FY_ASSERT(f != NULL);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, "memfd:") != NULL;
    fclose(f);
    return n;
}

static void server_rx(void *arg, uint8_t id, const void *data, size_t len)
{
    server_t *s = arg;
    FY_ASSERT_EQ(id, AM_HELLO);
    FY_ASSERT_EQ(len, MSG_LEN);
    memcpy(&s->from, data, sizeof(s->from));
    s->got++;
}

static void client_rx(void *arg, uint8_t id, const void *data, size_t len)
{
    (void)data;
    (void)len;
    if (id == AM_ANSWER)
        (*(unsigned *)arg)++;
}

/* A client: say hello (with our address) through the outbox, wait for the answer, leave. */
static void client(int rfd, int wfd, void *arg)
{
    (void)wfd;
    const taddr_t *srv = arg;
    unsigned answered = 0;
    tproc_t p;
    tp_open(&p, client_rx, &answered);
    taddr_t me = tp_addr(&p);
    fy_tl_ep_t *ep = tp_ep(&p, srv);
    static char msg[MSG_LEN];
    memcpy(msg, &me, sizeof(me));
    tcomp_t c;
    tcomp_init(&c);
    ferry_status_t st = tp_send(&p, ep, AM_HELLO, msg, sizeof(msg), 1, &c.super, NULL);
    FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
    uint64_t deadline = now_ms() + 30000;
    while ((answered == 0 || (st == FERRY_INPROGRESS && c.done == 0)) && now_ms() < deadline)
        tp_progress(&p);
    FY_ASSERT_EQ(answered, 1);
    if (rfd >= 0) { /* wait to be killed */
        char b;
        tc_read(rfd, &b, 1);
    }
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

static void client_fn(int rfd, int wfd, void *arg)
{
    (void)rfd;
    client(-1, wfd, arg);
}

static void victim_fn(int rfd, int wfd, void *arg)
{
    client(rfd, wfd, arg);
}

/* Serve one client: its hello, then an answer over an ep created and destroyed for it. */
static void serve_one(tproc_t *p, server_t *s, unsigned want)
{
    uint64_t deadline = now_ms() + 30000;
    while (s->got < want && now_ms() < deadline)
        tp_progress(p);
    FY_ASSERT_EQ(s->got, want);
    fy_tl_ep_t *back = tp_ep(p, &s->from);
    uint64_t token = want;
    struct iovec v = {&token, sizeof(token)};
    ferry_status_t st;
    while ((st = p->ops->am_short(back, AM_ANSWER, &v, 1)) == FERRY_ERR_NO_RESOURCE)
        tp_progress(p);
    FY_ASSERT_OK(st);
    p->ops->ep_destroy(back);
}

static void churn(void)
{
    server_t s = {0};
    tproc_t p;
    tp_open(&p, server_rx, &s);
    taddr_t a = tp_addr(&p);
    int fds0 = count_fds(), maps0 = count_memfd_maps();
    int fds_max = fds0, maps_max = maps0;
    for (unsigned i = 0; i < NCLIENTS; i++) {
        tchild_t c = tc_spawn(client_fn, &a);
        serve_one(&p, &s, i + 1);
        tc_join(&c);
        for (int k = 0; k < 1000; k++)
            tp_progress(&p);
        int f = count_fds(), m = count_memfd_maps();
        fds_max = f > fds_max ? f : fds_max;
        maps_max = m > maps_max ? m : maps_max;
    }
    /* the last departures are noticed within FERRY_SHM_LIVENESS_INTERVAL */
    uint64_t deadline = now_ms() + 5000;
    while ((count_fds() > fds0 || count_memfd_maps() > maps0) && now_ms() < deadline)
        for (int k = 0; k < 1000; k++)
            tp_progress(&p);
    int fds1 = count_fds(), maps1 = count_memfd_maps();
    printf("%u short-lived clients: server fds %d -> %d (at most %d), memfd mappings %d -> %d "
           "(at most %d), %zu peers kept\n",
           NCLIENTS, fds0, fds1, fds_max, maps0, maps1, maps_max,
           fy_hash_count(&tp_shm(&p)->peers));
    fflush(stdout);
    FY_ASSERT_LE(fds1, fds0);
    FY_ASSERT_LE(maps1, maps0);
    FY_ASSERT_LE(fds_max, fds0 + 8);
    FY_ASSERT_LE(maps_max, maps0 + 8);
    tp_close(&p);
}

static void flush_dead_peer(void)
{
    server_t s = {0};
    tproc_t p;
    tp_open(&p, server_rx, &s);
    taddr_t a = tp_addr(&p);
    tchild_t c = tc_spawn(victim_fn, &a);
    serve_one(&p, &s, 1);
    fy_tl_ep_t *ep = tp_ep(&p, &s.from);
    kill(c.pid, SIGKILL);
    int st;
    FY_ASSERT(waitpid(c.pid, &st, 0) == c.pid);
    close(c.rfd);
    close(c.wfd);
    uint64_t token = 7;
    struct iovec v = {&token, sizeof(token)};
    ferry_status_t sst = p.ops->am_short(ep, AM_ANSWER, &v, 1); /* may still fit the ring */
    tcomp_t fc;
    tcomp_init(&fc);
    ferry_status_t fst = p.ops->ep_flush(ep, &fc.super);
    if (fst == FERRY_INPROGRESS) {
        uint64_t deadline = now_ms() + 10000;
        while (fc.done == 0 && now_ms() < deadline)
            tp_progress(&p);
        FY_ASSERT_EQ(fc.done, 1);
        fst = fc.status;
    }
    printf("send to a killed peer: %s; flush: %s\n", ferry_status_string(sst),
           ferry_status_string(fst));
    fflush(stdout);
    FY_ASSERT_MSG(fst < 0, "flush to a killed peer said %s", ferry_status_string(fst));
    /* and every later flush says so too */
    FY_ASSERT(p.ops->ep_flush(ep, &fc.super) < 0);
    p.ops->ep_destroy(ep);
    tp_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(churn), FYTEST_CASE(flush_dead_peer))
