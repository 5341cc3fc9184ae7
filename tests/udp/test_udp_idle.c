/*
 * test_udp_idle.c - what an idle udp connection costs a sleeping worker in wake-ups, through
 * the public API (FERRY_TLS=udp on loopback, a peer worker in a process of its own):
 *
 *   idle_wakeups  one AM each way, then the worker sleeps as ferry's own waits do
 *                 (ferry_worker_arm, then poll on ferry_worker_get_fd; progress when it
 *                 wakes) for IDLE_MS, with FERRY_UDP_KEEPALIVE 1.5 s and PEER_TIMEOUT 10 s
 *                 (a heartbeat every 1.25 s after the first).  In that time each connection's
 *                 keepalive timer is due once (at 1.5 s of silence: a heartbeat goes out) and
 *                 its answer comes once; its next check (1.5 + 1.25 s) is past the window.  So
 *                 the worker may wake at most twice per connection, plus twice for what the
 *                 AM round left (the ping's ACK after its answer, a delayed ACK's timer): the
 *                 test asserts that bound, and that every
 *                 connection did send its heartbeat (keepalives still go out within their
 *                 interval while the worker only sleeps on its fd).  A worker that woke every
 *                 250 ms whatever its timers (the old cap) woke 8 times or more.
 *
 * The heartbeat counts come from ferry_worker_print_info (the udp iface's "heartbeats sent N
 * answered M"), the connections from its udp "ep" lines (the ping and its answer share one).
 * FYTEST_IDLE_INFO=1 prints the time of each wake-up and the worker's info.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fytest.h"
#include "fytest_proc.h"

#define AM_PING  1
#define AM_PONG  2
#define ADDR_MAX 512
#define IDLE_MS  2000

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the peer: answers a ping on the reply endpoint, sleeping on its fd ------------------ */

static ferry_status_t on_ping(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len;
    FY_ASSERT_OK(ferry_am_send(reply_ep, AM_PONG, NULL, 0, data, len, NULL));
    return FERRY_OK;
}

static int peer_role(int rfd, int wfd, int argc, char **argv)
{
    (void)argc, (void)argv;
    ferry_context_t *ctx;
    ferry_worker_t *w;
    char addr[ADDR_MAX];
    size_t len = sizeof(addr);
    int fd;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    FY_ASSERT_OK(ferry_worker_set_am_handler(w, AM_PING, on_ping, NULL));
    FY_ASSERT_OK(ferry_worker_get_address(w, addr, &len));
    uint32_t l = (uint32_t)len;
    FY_ASSERT(fyproc_send(wfd, &l, sizeof(l)) == 0 && fyproc_send(wfd, addr, len) == 0);
    FY_ASSERT_OK(ferry_worker_get_fd(w, &fd));
    /* Serve until the pipe says stop: sleep on the worker's fd and the pipe at once. */
    for (;;) {
        while (ferry_worker_arm(w) == FERRY_ERR_BUSY)
            ferry_worker_progress(w);
        struct pollfd p[2] = {{fd, POLLIN, 0}, {rfd, POLLIN, 0}};
        FY_ASSERT(poll(p, 2, -1) >= 0);
        if (p[1].revents != 0)
            break;
        ferry_worker_progress(w);
    }
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    return 0;
}

static const fyproc_role_t roles[] = {{"peer", peer_role}};

/* ---- the sleeper ------------------------------------------------------------------------ */

static int pongs;

static ferry_status_t on_pong(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)data, (void)len, (void)reply_ep;
    pongs++;
    return FERRY_OK;
}

static int errs;

static void on_err(void *arg, ferry_ep_t *ep, ferry_status_t st)
{
    (void)arg, (void)ep;
    errs++;
    fprintf(stderr, "endpoint failed: %s\n", ferry_status_string(st));
}

/* The udp iface's heartbeat counts and connection count, from the worker's info. */
static void udp_counts(ferry_worker_t *w, unsigned long long *sent, unsigned long long *acked,
                       unsigned *nconn)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    FY_ASSERT(f != NULL);
    ferry_worker_print_info(w, f);
    fclose(f);
    const char *hb = strstr(buf, "heartbeats sent ");
    FY_ASSERT_MSG(hb != NULL, "no udp iface in the worker's info:\n%s", buf);
    FY_ASSERT(sscanf(hb, "heartbeats sent %llu answered %llu", sent, acked) == 2);
    *nconn = 0; /* udp's lines "  ep ID -> ADDR peer ID ..." (proto's have no "peer") */
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n"))
        *nconn += strncmp(line, "  ep ", 5) == 0 && strstr(line, " peer ") != NULL;
    free(buf);
}

static void idle_wakeups(void)
{
    fyproc_t peer;
    uint32_t alen;
    char addr[ADDR_MAX];
    FY_ASSERT(fyproc_spawn(&peer, "peer", NULL, 60) == 0);
    FY_ASSERT(fyproc_recv(peer.rfd, &alen, sizeof(alen), 30000) == 0);
    FY_ASSERT(alen > 0 && alen <= ADDR_MAX);
    FY_ASSERT(fyproc_recv(peer.rfd, addr, alen, 30000) == 0);

    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_ep_t *ep;
    int fd;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    FY_ASSERT_OK(ferry_worker_set_am_handler(w, AM_PONG, on_pong, NULL));
    FY_ASSERT_OK(ferry_worker_get_fd(w, &fd));
    ferry_ep_params_t ep_params = {.field_mask =
                                       FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER,
                                   .address = addr,
                                   .address_len = alen,
                                   .err_cb = on_err};
    FY_ASSERT_OK(ferry_ep_create(w, &ep_params, &ep));
    uint32_t ping = 7;
    FY_ASSERT_OK(ferry_am_send(ep, AM_PING, NULL, 0, &ping, sizeof(ping), NULL));
    uint64_t t0 = now_ms();
    while (pongs == 0) {
        FY_ASSERT_MSG(now_ms() - t0 < 20000, "no answer in 20 s");
        ferry_worker_wait(w, 100);
    }

    /* Sleep on the fd for IDLE_MS, counting the wake-ups. */
    unsigned long long sent0, acked0, sent1, acked1;
    unsigned nconn;
    udp_counts(w, &sent0, &acked0, &nconn);
    unsigned wakeups = 0;
    t0 = now_ms();
    for (;;) {
        while (ferry_worker_arm(w) == FERRY_ERR_BUSY)
            ferry_worker_progress(w);
        uint64_t t = now_ms();
        if (t - t0 >= IDLE_MS)
            break;
        struct pollfd p = {fd, POLLIN, 0};
        int rc = poll(&p, 1, (int)(IDLE_MS - (t - t0)));
        FY_ASSERT(rc >= 0);
        if (rc > 0) {
            if (getenv("FYTEST_IDLE_INFO") != NULL)
                fprintf(stderr, "  wake-up at %llu ms\n", (unsigned long long)(now_ms() - t0));
            wakeups++;
            ferry_worker_progress(w);
        }
    }
    udp_counts(w, &sent1, &acked1, &nconn);
    printf("  %u connection(s) idle for %d ms (keepalive 1.5 s): %u wake-ups, %llu heartbeats "
           "sent, %llu answered\n",
           nconn, IDLE_MS, wakeups, sent1 - sent0, acked1 - acked0);
    fflush(stdout);
    if (getenv("FYTEST_IDLE_INFO") != NULL)
        ferry_worker_print_info(w, stderr);
    FY_ASSERT_GE(nconn, 1);
    FY_ASSERT_LE(wakeups, 2 * nconn + 2);
    FY_ASSERT_GE(sent1 - sent0, nconn); /* every connection probed, on time */
    FY_ASSERT_EQ(errs, 0);

    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    FY_ASSERT(fyproc_send(peer.wfd, "x", 1) == 0);
    FY_ASSERT_EQ(fyproc_wait(&peer, 30000), 0);
    fyproc_release(&peer);
}

int main(int argc, char **argv)
{
    static const fytest_case_t cases[] = {FYTEST_CASE(idle_wakeups)};
    int st;
    setenv("FERRY_TLS", "udp", 1);
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_KEEPALIVE", "1500ms", 1);
    setenv("FERRY_UDP_PEER_TIMEOUT", "10s", 1);
    if (fyproc_child_main(argc, argv, roles, 1, &st))
        return st;
    return fytest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 0);
}
