/*
 * test_lanes_fallback.c - falling back to the next lane when one does not connect, between
 * two "hosts": network namespaces joined by a veth pair, with iptables dropping udp, tcp or
 * both on the way in to the receiver.
 *
 * A sender in one namespace creates an endpoint to a receiver in the other (FERRY_TLS=udp,tcp)
 * and at once sends numbered messages, some large; the receiver checks they arrive complete
 * and in order and answers when it has them all.  Cases: nothing dropped (tcp carries the AM
 * lane between hosts, by its bandwidth); the same with FERRY_AM_LANE=latency (udp carries the
 * AM lane by its latency, tcp the messages above FERRY_RAILS_THRESH); udp dropped with udp made the
 * first choice (tcp reported slow) -> tcp, answered within 3 s; tcp dropped -> udp within 3 s; both
 * dropped -> the endpoint fails with FERRY_ERR_UNREACHABLE and an error naming each lane and why.
 *
 * Needs root (ip netns, iptables); otherwise exits 77 (skipped).  Each case makes its own
 * namespaces, named with the test's pid, and removes them whatever happens to the case's
 * processes (they run in a child of their own).
 */
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <sys/stat.h>

#include "fytest.h"
#include "fytest_util.h"
#include "proto/proto_int.h"
#include "util/clock.h"

#define SKIP     77
#define NMSG     64
#define AM_DATA  5
#define AM_DONE  6
#define BIG_SIZE (1u << 20)

static char ns_a[32], ns_b[32];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int r = system(cmd);
    if (r != 0 && getenv("FYTEST_VERBOSE"))
        fprintf(stderr, "command failed (%d): %s\n", r, cmd);
    return r;
}

static void teardown(void)
{
    sh("ip netns del %s 2>/dev/null", ns_a);
    sh("ip netns del %s 2>/dev/null", ns_b);
}

/* Two namespaces, a veth between them (10.77.0.1 and .2), loopback up in each. */
static int setup(void)
{
    int pid = (int)getpid();
    snprintf(ns_a, sizeof(ns_a), "fylanes-%d-a", pid);
    snprintf(ns_b, sizeof(ns_b), "fylanes-%d-b", pid);
    if (sh("ip netns add %s 2>/dev/null", ns_a) != 0 || sh("ip netns add %s", ns_b) != 0)
        return -1;
    if (sh("ip link add fyl%da netns %s type veth peer name fyl%db netns %s", pid, ns_a, pid,
           ns_b) != 0 ||
        sh("ip -n %s addr add 10.77.0.1/24 dev fyl%da && ip -n %s link set fyl%da up && "
           "ip -n %s link set lo up",
           ns_a, pid, ns_a, pid, ns_a) != 0 ||
        sh("ip -n %s addr add 10.77.0.2/24 dev fyl%db && ip -n %s link set fyl%db up && "
           "ip -n %s link set lo up",
           ns_b, pid, ns_b, pid, ns_b) != 0) {
        teardown();
        return -1;
    }
    /* The veth's carrier comes up a moment after both ends are (the kernel's link watch):
     * until then the interface is not running and ferry does not use it. */
    for (int i = 0; i < 500; i++) {
        if (sh("ip -n %s -br link show dev fyl%da | grep -q ' UP ' && "
               "ip -n %s -br link show dev fyl%db | grep -q ' UP '",
               ns_a, pid, ns_b, pid) == 0)
            return 0;
        usleep(10000);
    }
    teardown();
    return -1;
}

static void enter_ns(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "/var/run/netns/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    FY_ASSERT_MSG(fd >= 0, "open %s: %s", path, strerror(errno));
    FY_ASSERT_MSG(setns(fd, CLONE_NEWNET) == 0, "setns %s: %s", name, strerror(errno));
    close(fd);
}

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        FY_ASSERT_MSG(n > 0 || errno == EINTR, "write: %s", strerror(errno));
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        }
    }
}

static void read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        FY_ASSERT_MSG(n > 0 || (n < 0 && errno == EINTR), "read: %s",
                      n == 0 ? "end of file" : strerror(errno));
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        }
    }
}

static ferry_worker_t *open_worker(ferry_context_t **ctx)
{
    ferry_worker_t *w;
    setenv("FERRY_TLS", "udp,tcp", 1);
    FY_ASSERT_OK(ferry_context_create(NULL, ctx));
    FY_ASSERT_OK(ferry_worker_create(*ctx, NULL, &w));
    return w;
}

static void send_addr(ferry_worker_t *w, int fd)
{
    uint32_t len = (uint32_t)w->address_len;
    write_all(fd, &len, 4);
    write_all(fd, w->address, len);
}

static void *recv_addr(int fd, size_t *len)
{
    uint32_t n;
    read_all(fd, &n, 4);
    FY_ASSERT(n > 0 && n < 65536);
    void *a = malloc(n);
    FY_ASSERT(a != NULL);
    read_all(fd, a, n);
    *len = n;
    return a;
}

/* ---- the receiver ---- */

typedef struct rx_state {
    unsigned next; /* the number of the next message expected */
    int bad;
} rx_state_t;

static size_t msg_size(unsigned i)
{
    return i % 8 == 7 ? BIG_SIZE : 16 + i * 100;
}

static ferry_status_t on_data(void *arg, const void *hdr, size_t hdr_len, const void *data,
                              size_t len, ferry_ep_t *ep)
{
    rx_state_t *s = arg;
    uint32_t i;
    if (hdr_len != 4) {
        s->bad = 1;
        return FERRY_OK;
    }
    memcpy(&i, hdr, 4);
    if (i != s->next || len != msg_size(i) || !fy_pattern_ok(data, len, i))
        s->bad = 1;
    s->next++;
    if (s->next == NMSG) {
        int32_t verdict = s->bad ? -1 : 0;
        ferry_am_send(ep, AM_DONE, &verdict, 4, NULL, 0, NULL);
    }
    return FERRY_OK;
}

static void receiver(int addr_out, int addr_in, int quit)
{
    enter_ns(ns_b);
    ferry_context_t *ctx;
    ferry_worker_t *w = open_worker(&ctx);
    rx_state_t s = {0, 0};
    if (getenv("FYTEST_VERBOSE"))
        ferry_worker_print_info(w, stderr);
    FY_ASSERT_OK(ferry_worker_set_am_handler(w, AM_DATA, on_data, &s));
    send_addr(w, addr_out);
    size_t len;
    free(recv_addr(addr_in, &len)); /* (the sender's: not needed, it connects to us) */
    struct pollfd pfd = {quit, POLLIN, 0};
    for (unsigned spin = 0;; spin++) {
        ferry_worker_progress(w);
        if ((spin & 255) == 0 && poll(&pfd, 1, 0) > 0)
            break;
    }
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
}

/* ---- the sender ---- */

typedef struct tx_result {
    int32_t verdict; /* 0: all arrived in order; -1 bad; -2 no answer; -3 ep failed */
    int32_t ep_status;
    char lane[16];
    char bulk[16];    /* the bulk lane (rail 1 behind an anchor-only rail 0), or "" */
    double seconds;   /* ep creation to the answer to every message */
    double connected; /* ep creation to the peer's wireup answer (on the lane that worked) */
} tx_result_t;

static ferry_status_t on_done(void *arg, const void *hdr, size_t hdr_len, const void *data,
                              size_t len, ferry_ep_t *ep)
{
    (void)data, (void)len, (void)ep;
    int32_t *v = arg;
    if (hdr_len == 4)
        memcpy(v, hdr, 4);
    return FERRY_OK;
}

static void on_ep_err(void *arg, ferry_ep_t *ep, ferry_status_t st)
{
    (void)ep;
    *(ferry_status_t *)arg = st;
}

static void sender(int addr_out, int addr_in, int result, const char *log_path)
{
    enter_ns(ns_a);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FY_ASSERT(fd >= 0);
    dup2(fd, 2);
    close(fd);
    ferry_context_t *ctx;
    ferry_worker_t *w = open_worker(&ctx);
    int32_t verdict = -2;
    ferry_status_t ep_st = FERRY_OK;
    FY_ASSERT_OK(ferry_worker_set_am_handler(w, AM_DONE, on_done, &verdict));
    send_addr(w, addr_out);
    size_t len;
    void *peer = recv_addr(addr_in, &len);
    char *buf = malloc(BIG_SIZE);
    FY_ASSERT(buf != NULL);
    double t0 = fy_time_sec();
    ferry_ep_t *ep;
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER,
                           .address = peer,
                           .address_len = len,
                           .err_cb = on_ep_err,
                           .err_arg = &ep_st};
    FY_ASSERT_OK(ferry_ep_create(w, &p, &ep));
    /* everything sent before the lane answers: it must go out on the lane that works */
    for (uint32_t i = 0; i < NMSG && ep_st == FERRY_OK; i++) {
        fy_pattern(buf, msg_size(i), i);
        ferry_status_t st = ferry_am_send(ep, AM_DATA, &i, 4, buf, msg_size(i), NULL);
        if (st < 0) {
            ep_st = st;
            break;
        }
    }
    double connected = -1;
    while (verdict == -2 && ep_st == FERRY_OK && fy_time_sec() - t0 < 20) {
        ferry_worker_progress(w);
        if (connected < 0 && ep->state == FY_EP_CONNECTED)
            connected = fy_time_sec() - t0;
    }
    tx_result_t r;
    memset(&r, 0, sizeof(r));
    r.verdict = ep_st != FERRY_OK ? -3 : verdict;
    r.ep_status = ep_st;
    r.seconds = fy_time_sec() - t0;
    r.connected = connected;
    if (ep->lanes[FY_LANE_AM].iface != NULL)
        snprintf(r.lane, sizeof(r.lane), "%s", ep->lanes[FY_LANE_AM].iface->tl->name);
    if (ep->nrails > 1 && ep->rail_weight[0] == 0)
        snprintf(r.bulk, sizeof(r.bulk), "%s", ep->rails[1].iface->tl->name);
    write_all(result, &r, sizeof(r));
    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    free(buf);
    free(peer);
}

/* ---- a case ---- */

typedef struct scenario {
    const char *drop; /* iptables protocol dropped on the receiver's way in, or NULL */
    const char *drop2;
    const char *env; /* extra NAME=VALUE for both ends, or NULL */
} scenario_t;

static void put_env(const char *env)
{
    if (env != NULL) {
        char *e = strdup(env);
        FY_ASSERT(e != NULL);
        putenv(e);
    }
}

/* Run the pair; the sender's result and its log (stderr) in log_path. */
static tx_result_t run(const scenario_t *sc, char *log_path, size_t log_len)
{
    FY_ASSERT_MSG(setup() == 0, "cannot make the network namespaces");
    if (sc->drop != NULL)
        FY_ASSERT(sh("ip netns exec %s iptables -A INPUT -p %s -i fyl%db -j DROP", ns_b, sc->drop,
                     (int)getpid()) == 0);
    if (sc->drop2 != NULL)
        FY_ASSERT(sh("ip netns exec %s iptables -A INPUT -p %s -i fyl%db -j DROP", ns_b, sc->drop2,
                     (int)getpid()) == 0);
    snprintf(log_path, log_len, "/tmp/fylanes-%d.log", (int)getpid());
    int a2b[2], b2a[2], res[2], quit[2];
    FY_ASSERT(pipe(a2b) == 0 && pipe(b2a) == 0 && pipe(res) == 0 && pipe(quit) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t rx = fork();
    FY_ASSERT(rx >= 0);
    if (rx == 0) {
        close(res[0]);
        close(res[1]);
        close(quit[1]);
        put_env(sc->env);
        receiver(b2a[1], a2b[0], quit[0]);
        _exit(0);
    }
    pid_t tx = fork();
    FY_ASSERT(tx >= 0);
    if (tx == 0) {
        close(res[0]);
        close(quit[0]);
        close(quit[1]);
        put_env(sc->env);
        sender(a2b[1], b2a[0], res[1], log_path);
        _exit(0);
    }
    close(res[1]);
    tx_result_t r;
    memset(&r, 0, sizeof(r));
    ssize_t n = read(res[0], &r, sizeof(r));
    write_all(quit[1], "q", 1);
    int st_tx, st_rx;
    waitpid(tx, &st_tx, 0);
    waitpid(rx, &st_rx, 0);
    teardown();
    FY_ASSERT_MSG(n == (ssize_t)sizeof(r), "the sender died (status 0x%x)", st_tx);
    FY_ASSERT_MSG(WIFEXITED(st_rx) && WEXITSTATUS(st_rx) == 0, "the receiver died (status 0x%x)",
                  st_rx);
    return r;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    FY_ASSERT(f != NULL);
    char *s = calloc(1, 1 << 16);
    FY_ASSERT(s != NULL);
    size_t n = fread(s, 1, (1 << 16) - 1, f);
    s[n] = '\0';
    fclose(f);
    unlink(path);
    return s;
}

static void open_path_uses_tcp(void)
{
    scenario_t sc = {NULL, NULL, NULL};
    char log[64];
    tx_result_t r = run(&sc, log, sizeof(log));
    char *text = slurp(log);
    FY_ASSERT_MSG(r.verdict == 0, "verdict %d, log:\n%s", r.verdict, text);
    FY_ASSERT_STR_EQ(r.lane, "tcp");
    free(text);
}

static void latency_mode_udp_and_tcp(void)
{
    /* nothing is dropped here: a udp lane slow to answer on a loaded machine (sanitizers) must
     * not be given up for tcp */
    setenv("FERRY_WIREUP_TIMEOUT", "30s", 1);
    scenario_t sc = {NULL, NULL, "FERRY_AM_LANE=latency"};
    char log[64];
    tx_result_t r = run(&sc, log, sizeof(log));
    char *text = slurp(log);
    FY_ASSERT_MSG(r.verdict == 0, "verdict %d, log:\n%s", r.verdict, text);
    FY_ASSERT_STR_EQ(r.lane, "udp");
    FY_ASSERT_STR_EQ(r.bulk, "tcp");
    free(text);
}

static void udp_dropped_falls_back_to_tcp(void)
{
    /* tcp reported slow, so udp is the first choice, and the one dropped */
    scenario_t sc = {"udp", NULL, "FERRY_TCP_BANDWIDTH=50000000"};
    char log[64];
    tx_result_t r = run(&sc, log, sizeof(log));
    char *text = slurp(log);
    FY_ASSERT_MSG(r.verdict == 0, "verdict %d, log:\n%s", r.verdict, text);
    FY_ASSERT_STR_EQ(r.lane, "tcp");
    FY_ASSERT_MSG(r.connected >= 0 && r.connected < 3.0, "connected after %.2f s", r.connected);
    printf("  udp dropped: on tcp, connected after %.2f s, all answered after %.2f s\n",
           r.connected, r.seconds);
    free(text);
}

static void tcp_dropped_falls_back_to_udp(void)
{
    scenario_t sc = {"tcp", NULL, NULL};
    char log[64];
    tx_result_t r = run(&sc, log, sizeof(log));
    char *text = slurp(log);
    FY_ASSERT_MSG(r.verdict == 0, "verdict %d, log:\n%s", r.verdict, text);
    FY_ASSERT_STR_EQ(r.lane, "udp");
    FY_ASSERT_MSG(r.connected >= 0 && r.connected < 3.0, "connected after %.2f s", r.connected);
    printf("  tcp dropped: on udp, connected after %.2f s, all answered after %.2f s\n",
           r.connected, r.seconds);
    free(text);
}

static void both_dropped_lists_each(void)
{
    scenario_t sc = {"tcp", "udp", NULL};
    char log[64];
    tx_result_t r = run(&sc, log, sizeof(log));
    char *text = slurp(log);
    FY_ASSERT_MSG(r.verdict == -3 && r.ep_status == FERRY_ERR_UNREACHABLE,
                  "verdict %d, status %d, log:\n%s", r.verdict, r.ep_status, text);
    const char *e = strstr(text, "no lane connects: ");
    FY_ASSERT_MSG(e != NULL, "no listing error in:\n%s", text);
    FY_ASSERT_MSG(strstr(e, "tcp ") != NULL && strstr(e, "udp ") != NULL &&
                      strstr(e, "no answer in 2.0 s") != NULL,
                  "the error does not name each lane and why:\n%s", e);
    FY_ASSERT_MSG(r.seconds < 10.0, "failed after %.2f s", r.seconds);
    printf("  both dropped: failed after %.2f s: %.*s\n", r.seconds, (int)strcspn(e, "\n"), e);
    free(text);
}

/* Namespaces left by a run that died before its teardown: their pid is gone. */
static void sweep_stale(void)
{
    char line[64];
    FILE *f = popen("ip netns list 2>/dev/null", "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        int pid;
        char side;
        if (sscanf(line, "fylanes-%d-%c", &pid, &side) == 2 && kill(pid, 0) != 0 && errno == ESRCH)
            sh("ip netns del fylanes-%d-%c 2>/dev/null", pid, side);
    }
    pclose(f);
}

int main(int argc, char **argv)
{
    static const fytest_case_t cases[] = {
        FYTEST_CASE(open_path_uses_tcp), FYTEST_CASE(latency_mode_udp_and_tcp),
        FYTEST_CASE(udp_dropped_falls_back_to_tcp), FYTEST_CASE(tcp_dropped_falls_back_to_udp),
        FYTEST_CASE(both_dropped_lists_each)};
    if (geteuid() != 0 || sh("ip netns list >/dev/null 2>&1") != 0 ||
        sh("iptables --version >/dev/null 2>&1") != 0) {
        printf("skipped: needs root, ip netns and iptables\n");
        return SKIP;
    }
    sweep_stale();
    return fytest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 0);
}
