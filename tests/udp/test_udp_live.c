/*
 * test_udp_live.c - udp liveness through the public API, two processes (the peer is this
 * binary re-executed as a role, tests/harness/fytest_proc.h), FERRY_TLS=udp and a short
 * FERRY_UDP_PEER_TIMEOUT so each case takes a few seconds:
 *
 *   sleeping_peer   the peer calls progress, then sleeps (computes) for 3x PEER_TIMEOUT while
 *                   our eager and rendezvous sends wait for it: it is not declared dead (its
 *                   liveness responder answers our heartbeats) and everything completes OK
 *                   when it wakes
 *   killed_receiver the peer is SIGKILLed while it reads our large rendezvous send: the send
 *                   completes with an error within PEER_TIMEOUT + 1 s
 *   killed_sender   the peer is SIGKILLed while we read its large rendezvous send: the
 *                   receive completes with an error within PEER_TIMEOUT + 1 s
 *   idle_peer_dies  a connected, idle endpoint learns of its peer's death by keepalive: err_cb
 *                   within PEER_TIMEOUT + 1 s, with nothing sent
 *   unlaunched_keys two processes without any launcher (no FERRY_JOB_KEY, PMIx or Slurm job):
 *                   each udp iface drew its own random key, published in its address, the two
 *                   differ, and the processes still talk (a hello each way, then a 1 MiB
 *                   rendezvous checked byte for byte)
 *
 * FYTEST_LIVE_LEN sets the rendezvous size (default 64 MiB; the 256 MiB case is
 * `FYTEST_LIVE_LEN=256m build/tests/udp/test_udp_live killed_receiver`), FYTEST_LIVE_SLEEP
 * the sleep in seconds (default 3; the 30 s case: FYTEST_LIVE_SLEEP=30
 * FERRY_UDP_PEER_TIMEOUT=10s ... sleeping_peer).
 */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fytest.h"
#include "fytest_proc.h"
#include "fytest_util.h"
#include "proto/lanes.h"
#include "tl/udp/udp.h"

#define TAG_HELLO 0xfeedull
#define TAG_SMALL 1
#define TAG_BIG   2
#define TAG_REPLY 3

typedef struct end {
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_ep_t *ep;
    int rfd, wfd;
    int errs;
    ferry_status_t err;
} end_t;

typedef struct done {
    int calls;
    ferry_status_t st;
} done_t;

static void req_cb(ferry_request_t *req, ferry_status_t st)
{
    done_t *d = req->user_data;
    d->calls++;
    d->st = st;
}

static void ep_err(void *arg, ferry_ep_t *ep, ferry_status_t st)
{
    (void)ep;
    end_t *e = arg;
    e->errs++;
    e->err = st;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* FERRY_UDP_PEER_TIMEOUT (1s unless set): "<n>s" or "<n>ms". */
static double peer_timeout_s(void)
{
    const char *s = getenv("FERRY_UDP_PEER_TIMEOUT");
    char *end;
    double v = s != NULL ? strtod(s, &end) : 1.0;
    if (s != NULL && strncmp(end, "ms", 2) == 0)
        v /= 1000.0;
    return v;
}

static size_t live_len(void)
{
    const char *s = getenv("FYTEST_LIVE_LEN");
    size_t n = 64u << 20;
    if (s != NULL && *s != '\0') {
        char *end;
        n = strtoull(s, &end, 0);
        if (*end == 'm' || *end == 'M')
            n <<= 20;
        else if (*end == 'k' || *end == 'K')
            n <<= 10;
    }
    return n;
}

static unsigned sleep_s(void)
{
    const char *s = getenv("FYTEST_LIVE_SLEEP");
    return s != NULL && atoi(s) > 0 ? (unsigned)atoi(s) : 3;
}

/* Read len bytes from the pipe, progressing while nothing is there. */
static void pipe_read(end_t *e, void *buf, size_t len)
{
    while (e->w != NULL && !fyproc_readable(e->rfd))
        ferry_worker_wait(e->w, 1);
    FY_ASSERT_MSG(fyproc_recv(e->rfd, buf, len, 60000) == 0, "the other process went away");
}

static void tell(end_t *e, char c)
{
    FY_ASSERT(fyproc_send(e->wfd, &c, 1) == 0);
}

static void await(end_t *e, char want)
{
    char c = 0;
    pipe_read(e, &c, 1);
    FY_ASSERT_EQ(c, want);
}

static void wait_done(end_t *e, done_t *d, double limit_s)
{
    double t0 = now_s();
    while (d->calls == 0) {
        ferry_worker_wait(e->w, 10);
        FY_ASSERT_MSG(now_s() - t0 < limit_s, "no completion within %.1f s", limit_s);
    }
    FY_ASSERT_EQ(d->calls, 1);
}

/* Context, worker, addresses over the pipes, an ep, a hello each way. */
static void end_open(end_t *e, int parent)
{
    FY_ASSERT_OK(ferry_context_create(NULL, &e->ctx));
    FY_ASSERT_OK(ferry_worker_create(e->ctx, NULL, &e->w));
    char addr[4096];
    size_t len = sizeof(addr);
    FY_ASSERT_OK(ferry_worker_get_address(e->w, addr, &len));
    uint64_t n = len;
    FY_ASSERT(fyproc_send(e->wfd, &n, sizeof(n)) == 0 && fyproc_send(e->wfd, addr, len) == 0);
    pipe_read(e, &n, sizeof(n));
    FY_ASSERT(n > 0 && n <= sizeof(addr));
    pipe_read(e, addr, n);
    ferry_ep_params_t ep = {.field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER,
                            .address = addr,
                            .address_len = n,
                            .err_cb = ep_err,
                            .err_arg = e};
    FY_ASSERT_OK(ferry_ep_create(e->w, &ep, &e->ep));
    uint64_t hello = 0x1234;
    done_t ds = {0, 0}, dr = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds}, rr = {.cb = req_cb, .user_data = &dr};
    ferry_status_t st = ferry_tag_send(e->ep, TAG_HELLO, &hello, sizeof(hello), &rs);
    if (st != FERRY_INPROGRESS) {
        FY_ASSERT_OK(st);
        ds.calls = 1;
    }
    uint64_t got = 0;
    st = ferry_tag_recv(e->w, &got, sizeof(got), TAG_HELLO, ~0ull, &rr);
    if (st != FERRY_INPROGRESS) {
        FY_ASSERT_OK(st);
        dr.calls = 1;
    }
    wait_done(e, &ds, 30);
    wait_done(e, &dr, 30);
    FY_ASSERT_EQ(got, 0x1234);
    (void)parent;
}

static void end_close(end_t *e)
{
    if (e->ep != NULL)
        ferry_ep_close(e->ep, FERRY_EP_CLOSE_FORCE, NULL);
    e->ep = NULL;
    ferry_worker_destroy(e->w);
    ferry_context_destroy(e->ctx);
    e->w = NULL;
}

/* The key of the worker's udp iface, as its address publishes it (0: none). */
static uint64_t udp_key_of(ferry_worker_t *w)
{
    char addr[4096];
    size_t len = sizeof(addr);
    fy_remote_addr_t ra;
    fy_udp_iface_addr_t ia;
    FY_ASSERT_OK(ferry_worker_get_address(w, addr, &len));
    FY_ASSERT_OK(fy_address_unpack(addr, len, &ra));
    for (unsigned i = 0; i < ra.niface; i++) {
        if (strcmp(ra.ifaces[i].tl, "udp") != 0)
            continue;
        FY_ASSERT_EQ(ra.ifaces[i].iface_addr_len, sizeof(ia));
        memcpy(&ia, ra.ifaces[i].iface_addr, sizeof(ia));
        return ia.key;
    }
    return 0;
}

/* ---- the peer ------------------------------------------------------------------------- */

static int peer_role(int rfd, int wfd, int argc, char **argv)
{
    end_t e = {.rfd = rfd, .wfd = wfd};
    FY_ASSERT(argc >= 1);
    const char *mode = argv[0];
    size_t len = live_len();
    /* The killed cases' peer stops at 'm' (below): no progress thread of its own may go on
     * moving the transfer while the test kills it. */
    if (strcmp(mode, "recv") == 0 || strcmp(mode, "send") == 0 || strcmp(mode, "idle") == 0)
        FY_ASSERT(setenv("FERRY_PROGRESS_THREAD", "off", 1) == 0);
    end_open(&e, 0);
    if (strcmp(mode, "keys") == 0) {
        uint64_t k = udp_key_of(e.w);
        char *big = malloc(1 << 20);
        done_t d = {0, 0};
        ferry_request_t r = {.cb = req_cb, .user_data = &d};
        FY_ASSERT(big != NULL);
        FY_ASSERT(fyproc_send(e.wfd, &k, sizeof(k)) == 0);
        fy_pattern(big, 1 << 20, 5);
        ferry_status_t st = ferry_tag_send(e.ep, TAG_BIG, big, 1 << 20, &r);
        if (st != FERRY_INPROGRESS)
            d = (done_t){1, st};
        wait_done(&e, &d, 30);
        FY_ASSERT_OK(d.st);
        await(&e, 'z');
        free(big);
        end_close(&e);
        return 0;
    }
    if (strcmp(mode, "sleep") == 0) {
        static char small[4096], reply[4096];
        char *big = malloc(1 << 20);
        FY_ASSERT(big != NULL);
        for (int i = 0; i < 10; i++)
            ferry_worker_progress(e.w);
        tell(&e, 's');
        /* Our own work: no progress for a long while. */
        struct timespec ts = {(time_t)sleep_s(), 0};
        while (nanosleep(&ts, &ts) != 0) {
        }
        done_t d1 = {0, 0}, d2 = {0, 0}, d3 = {0, 0};
        ferry_request_t r1 = {.cb = req_cb, .user_data = &d1},
                        r2 = {.cb = req_cb, .user_data = &d2},
                        r3 = {.cb = req_cb, .user_data = &d3};
        ferry_status_t st = ferry_tag_recv(e.w, small, sizeof(small), TAG_SMALL, ~0ull, &r1);
        if (st != FERRY_INPROGRESS)
            d1 = (done_t){1, st};
        st = ferry_tag_recv(e.w, big, 1 << 20, TAG_BIG, ~0ull, &r2);
        if (st != FERRY_INPROGRESS)
            d2 = (done_t){1, st};
        wait_done(&e, &d1, 30);
        wait_done(&e, &d2, 30);
        FY_ASSERT_OK(d1.st);
        FY_ASSERT_OK(d2.st);
        FY_ASSERT(fy_pattern_ok(small, sizeof(small), 1));
        FY_ASSERT(fy_pattern_ok(big, 1 << 20, 2));
        fy_pattern(reply, sizeof(reply), 3);
        st = ferry_tag_send(e.ep, TAG_REPLY, reply, sizeof(reply), &r3);
        if (st != FERRY_INPROGRESS)
            d3 = (done_t){1, st};
        wait_done(&e, &d3, 30);
        FY_ASSERT_OK(d3.st);
        FY_ASSERT_EQ(e.errs, 0);
        await(&e, 'z');
        free(big);
        end_close(&e);
        return 0;
    }
    char *buf = malloc(len);
    FY_ASSERT(buf != NULL);
    done_t d = {0, 0};
    ferry_request_t r = {.cb = req_cb, .user_data = &d};
    if (strcmp(mode, "recv") == 0) {
        ferry_tag_info_t info;
        while (ferry_tag_probe(e.w, TAG_BIG, ~0ull, &info) != FERRY_OK)
            ferry_worker_wait(e.w, 10);
        FY_ASSERT_EQ(ferry_tag_recv(e.w, buf, len, TAG_BIG, ~0ull, &r), FERRY_INPROGRESS);
    } else if (strcmp(mode, "send") == 0) {
        fy_pattern(buf, len, 4);
        FY_ASSERT_EQ(ferry_tag_send(e.ep, TAG_BIG, buf, len, &r), FERRY_INPROGRESS);
    }
    /* Mid-transfer (or idle): tell, then stop until killed.  A peer that went on progressing
     * could finish the transfer between 'm' and the kill (64 MiB over the loopback takes
     * ~15 ms, and the test's own progress thread serves it while the test waits on the
     * pipe): the request then rightly ends in success, and the case tests nothing.  Two passes
     * only: twenty let a receiver drain the whole 64 MiB as it came in (the sender's request
     * ended in success, once in a clean-clone ASan run on a slower host, 2026-12-02). */
    for (int i = 0; i < 2; i++)
        ferry_worker_progress(e.w);
    tell(&e, 'm');
    for (;;)
        pause();
    return 1;
}

static const fyproc_role_t roles[] = {{"peer", peer_role}};

static void start(fyproc_t *p, end_t *e, const char *mode)
{
    const char *args[] = {mode, NULL};
    FY_ASSERT(fyproc_spawn(p, "peer", args, 120) == 0);
    e->rfd = p->rfd;
    e->wfd = p->wfd;
    end_open(e, 1);
}

/* ---- the cases ------------------------------------------------------------------------ */

static void sleeping_peer(void)
{
    fyproc_t p;
    end_t e = {0};
    static char small[4096], reply[4096];
    char *big = malloc(1 << 20);
    FY_ASSERT(big != NULL);
    fy_pattern(small, sizeof(small), 1);
    fy_pattern(big, 1 << 20, 2);
    start(&p, &e, "sleep");
    await(&e, 's'); /* it sleeps now */
    double t0 = now_s();
    done_t d1 = {0, 0}, d2 = {0, 0}, d3 = {0, 0};
    ferry_request_t r1 = {.cb = req_cb, .user_data = &d1}, r2 = {.cb = req_cb, .user_data = &d2},
                    r3 = {.cb = req_cb, .user_data = &d3};
    ferry_status_t st = ferry_tag_recv(e.w, reply, sizeof(reply), TAG_REPLY, ~0ull, &r3);
    FY_ASSERT_EQ(st, FERRY_INPROGRESS);
    st = ferry_tag_send(e.ep, TAG_SMALL, small, sizeof(small), &r1);
    if (st != FERRY_INPROGRESS)
        d1 = (done_t){1, st};
    st = ferry_tag_send(e.ep, TAG_BIG, big, 1 << 20, &r2);
    if (st != FERRY_INPROGRESS)
        d2 = (done_t){1, st};
    double limit = sleep_s() + 30.0;
    wait_done(&e, &d3, limit);
    wait_done(&e, &d1, limit);
    wait_done(&e, &d2, limit);
    double took = now_s() - t0;
    FY_ASSERT_MSG(e.errs == 0, "the sleeping peer was declared dead: %s",
                  ferry_status_string(e.err));
    FY_ASSERT_OK(d1.st);
    FY_ASSERT_OK(d2.st);
    FY_ASSERT_OK(d3.st);
    FY_ASSERT(fy_pattern_ok(reply, sizeof(reply), 3));
    FY_ASSERT_MSG(took >= sleep_s() - 0.5, "the peer did not sleep (%.2f s)", took);
    printf("sleeping_peer: the peer slept %u s (PEER_TIMEOUT %.1f s); answered after %.2f s\n",
           sleep_s(), peer_timeout_s(), took);
    tell(&e, 'z');
    FY_ASSERT_EQ(fyproc_wait(&p, 30000), 0);
    end_close(&e);
    fyproc_release(&p);
    free(big);
}

/* Kill the peer; the request must complete with an error within PEER_TIMEOUT + 1 s. */
static void killed(const char *mode)
{
    fyproc_t p;
    end_t e = {0};
    size_t len = live_len();
    char *buf = malloc(len);
    FY_ASSERT(buf != NULL);
    done_t d = {0, 0};
    ferry_request_t r = {.cb = req_cb, .user_data = &d};
    start(&p, &e, mode);
    if (strcmp(mode, "recv") == 0) {
        fy_pattern(buf, len, 5);
        FY_ASSERT_EQ(ferry_tag_send(e.ep, TAG_BIG, buf, len, &r), FERRY_INPROGRESS);
        await(&e, 'm'); /* it is reading */
    } else if (strcmp(mode, "send") == 0) {
        await(&e, 'm');
        ferry_tag_info_t info;
        while (ferry_tag_probe(e.w, TAG_BIG, ~0ull, &info) != FERRY_OK)
            ferry_worker_wait(e.w, 10);
        FY_ASSERT_EQ(ferry_tag_recv(e.w, buf, len, TAG_BIG, ~0ull, &r), FERRY_INPROGRESS);
        for (int i = 0; i < 20; i++)
            ferry_worker_progress(e.w);
    } else {
        await(&e, 'm'); /* idle */
    }
    fyproc_kill(&p, SIGKILL);
    double t0 = now_s(), limit = peer_timeout_s() + 1.0;
    if (strcmp(mode, "idle") == 0) {
        while (e.errs == 0) {
            ferry_worker_wait(e.w, 10);
            FY_ASSERT_MSG(now_s() - t0 < 30, "the idle peer's death went unnoticed");
        }
    } else {
        while (d.calls == 0) {
            ferry_worker_wait(e.w, 10);
            FY_ASSERT_MSG(now_s() - t0 < 30, "the request to the dead peer never completed");
        }
        FY_ASSERT_MSG(d.st < 0, "the request to the dead peer ended with %s",
                      ferry_status_string(d.st));
    }
    double took = now_s() - t0;
    printf("%s: peer killed, %s after %.2f s (PEER_TIMEOUT %.1f s): %s\n", mode,
           strcmp(mode, "idle") == 0 ? "err_cb" : "request failed", took, peer_timeout_s(),
           ferry_status_string(strcmp(mode, "idle") == 0 ? e.err : d.st));
    FY_ASSERT_MSG(took <= limit, "took %.2f s, more than PEER_TIMEOUT + 1 s", took);
    FY_ASSERT_GE(e.errs, 1);
    end_close(&e);
    fyproc_release(&p);
    free(buf);
}

static void killed_receiver(void)
{
    killed("recv");
}

static void killed_sender(void)
{
    killed("send");
}

static void idle_peer_dies(void)
{
    killed("idle");
}

static void unlaunched_keys(void)
{
    fyproc_t p;
    end_t e = {0};
    uint64_t theirs = 0;
    char *big = malloc(1 << 20);
    done_t d = {0, 0};
    ferry_request_t r = {.cb = req_cb, .user_data = &d};
    FY_ASSERT(big != NULL);
    unsetenv("FERRY_JOB_KEY");
    unsetenv("PMIX_NAMESPACE");
    unsetenv("SLURM_JOB_ID");
    start(&p, &e, "keys"); /* a hello each way already went */
    uint64_t ours = udp_key_of(e.w);
    pipe_read(&e, &theirs, sizeof(theirs));
    printf("unlaunched_keys: our udp key %016llx, the peer's %016llx\n", (unsigned long long)ours,
           (unsigned long long)theirs);
    FY_ASSERT(ours != 0 && theirs != 0);
    FY_ASSERT_MSG(ours != theirs, "two unlaunched processes share the key %016llx",
                  (unsigned long long)ours);
    ferry_status_t st = ferry_tag_recv(e.w, big, 1 << 20, TAG_BIG, ~0ull, &r);
    if (st != FERRY_INPROGRESS)
        d = (done_t){1, st};
    wait_done(&e, &d, 30);
    FY_ASSERT_OK(d.st);
    FY_ASSERT(fy_pattern_ok(big, 1 << 20, 5));
    FY_ASSERT_EQ(e.errs, 0);
    tell(&e, 'z');
    FY_ASSERT_EQ(fyproc_wait(&p, 30000), 0);
    end_close(&e);
    fyproc_release(&p);
    free(big);
}

static void setup_env(void)
{
    setenv("FERRY_TLS", "udp", 0);
    setenv("FERRY_UDP_PEER_TIMEOUT", "1s", 0);
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 0);
}

int main(int argc, char **argv)
{
    static const fytest_case_t cases[] = {FYTEST_CASE(sleeping_peer), FYTEST_CASE(killed_receiver),
                                          FYTEST_CASE(killed_sender), FYTEST_CASE(idle_peer_dies),
                                          FYTEST_CASE(unlaunched_keys)};
    int st;
    setup_env();
    if (fyproc_child_main(argc, argv, roles, 1, &st))
        return st;
    return fytest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 0);
}
