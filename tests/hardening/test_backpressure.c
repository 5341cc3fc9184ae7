/*
 * Back-pressure (issue 14, defect 4): a peer that stops reading must not let its sender queue
 * without bound.  The receiver is a forked process that stops progressing (it blocks on a
 * pipe) right after giving its address; the sender sends 4 KiB active messages without
 * requests, progressing its own worker, until ferry says FERRY_ERR_NO_RESOURCE (the
 * documented answer past FERRY_MAX_QUEUED bytes queued on the endpoint).  Its resident memory
 * must grow by less than FERRY_MAX_QUEUED + 10% meanwhile.  Then the receiver resumes, the
 * sender sends the rest (retrying on NO_RESOURCE), and every message arrives once, in order,
 * intact.  Run per transport (FERRY_TLS) from CMakeLists.txt.
 *
 * Over self the peer is a second worker of this process that is not progressed
 * (stalled_worker): self's buffer pool must stay within the budget proto gives it
 * (FERRY_MAX_QUEUED / 16), not its own 64 MiB.  FYTEST_BP_MSG sets the message size (shm: 64 KiB
 * goes through the outbox) and FYTEST_BP_FIXED the transport's fixed buffers, reserved at
 * interface open and documented with it (shm: its outbox and cell buffers), which the bound
 * adds to FERRY_MAX_QUEUED + 10%.
 */
#include <fcntl.h>
#include <stdio.h>
#include <time.h>

#include "fytest.h"
#include "fytest_util.h"

#define MAX_QUEUED (32u << 20)

/* The bound on the sender's growth: FERRY_MAX_QUEUED + 10%.  AddressSanitizer adds a shadow
 * byte per 8 and a redzone per allocation (rounded up to its size classes), which the
 * library cannot see: half more there (the plain build checks the real bound). */
#if defined(__SANITIZE_ADDRESS__)
#define FY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FY_ASAN 1
#endif
#endif
#ifdef FY_ASAN
#define GROWTH_MAX ((long)MAX_QUEUED * 11 / 10 + (long)MAX_QUEUED / 2)
#else
#define GROWTH_MAX ((long)MAX_QUEUED * 11 / 10)
#endif
enum { MSG_MAX = 1 << 20, EXTRA = 3000 };
static size_t MSG = 4096;
static long fixed_bytes; /* the transport's fixed buffers, FYTEST_BP_FIXED */

static void read_sizes(void)
{
    const char *e = getenv("FYTEST_BP_MSG");
    if (e != NULL)
        MSG = (size_t)atol(e);
    FY_ASSERT(MSG > 0 && MSG <= MSG_MAX);
    e = getenv("FYTEST_BP_FIXED");
    fixed_bytes = e != NULL ? atol(e) : 0;
}

/* Messages sent after the peer resumes: EXTRA of 4 KiB, as many bytes at other sizes. */
static uint64_t extra_msgs(void)
{
    uint64_t n = (uint64_t)EXTRA * 4096 / MSG;
    return n < 100 ? 100 : n;
}

static int over_self(void)
{
    const char *tls = getenv("FERRY_TLS");
    return tls != NULL && strcmp(tls, "self") == 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    FY_ASSERT(f != NULL);
    long size = 0, rss = 0;
    FY_ASSERT(fscanf(f, "%ld %ld", &size, &rss) == 2);
    fclose(f);
    return rss * sysconf(_SC_PAGESIZE);
}

static void read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        FY_ASSERT_MSG(n > 0, "pipe closed or failed (%zd)", n);
        p += n;
        len -= (size_t)n;
    }
}

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        FY_ASSERT(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* ---- the receiver ---- */

static uint64_t rx_next, rx_bad;

static ferry_status_t on_msg(void *arg, const void *header, size_t header_len, const void *data,
                             size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)reply_ep;
    uint64_t seq;
    if (header_len != sizeof(seq) || len != MSG) {
        rx_bad++;
        return FERRY_OK;
    }
    memcpy(&seq, header, sizeof(seq));
    if (seq != rx_next || !fy_pattern_ok(data, len, (unsigned)seq))
        rx_bad++;
    rx_next = seq + 1;
    return FERRY_OK;
}

static void receiver(int to_parent, int from_parent)
{
    alarm(60);
    ferry_context_t *ctx;
    ferry_worker_t *w;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    FY_ASSERT_OK(ferry_worker_set_am_handler(w, 1, on_msg, NULL));
    char addr[4096];
    size_t alen = sizeof(addr);
    FY_ASSERT_OK(ferry_worker_get_address(w, addr, &alen));
    write_all(to_parent, &alen, sizeof(alen));
    write_all(to_parent, addr, alen);
    /* stalled: no progress until the parent says how many messages to expect */
    uint64_t total;
    read_all(from_parent, &total, sizeof(total));
    double deadline = now_s() + 40;
    while (rx_next < total && rx_bad == 0 && now_s() < deadline)
        ferry_worker_progress(w);
    uint64_t res[2] = {rx_next, rx_bad};
    write_all(to_parent, res, sizeof(res));
    /* keep answering (acknowledgements, flush) until the sender closes its end */
    FY_ASSERT(fcntl(from_parent, F_SETFL, O_NONBLOCK) == 0);
    for (;;) {
        ferry_worker_progress(w);
        char c;
        ssize_t n = read(from_parent, &c, 1);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break;
    }
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    _exit(0);
}

/* ---- the sender ---- */

/* Sends to a peer that does not read until the endpoint refuses (FERRY_MAX_QUEUED), checking
 * the sender's growth all along; then checks that it stays refused and nothing more is taken.
 * Returns the number of messages taken (their sequence numbers are 0..n-1). */
static uint64_t flood_until_refused(ferry_worker_t *w, ferry_ep_t *ep, uint8_t *msg,
                                    const char *what)
{
    long base = rss_bytes(), peak = base;
    uint64_t seq = 0;
    double deadline = now_s() + 20;
    ferry_status_t st = FERRY_OK;
    /* flood until refused; the memory bound is checked all along (a sender without the limit
     * fails here, not by running out of memory) */
    while (now_s() < deadline) {
        fy_pattern(msg, MSG, (unsigned)seq);
        st = ferry_am_send(ep, 1, &seq, sizeof(seq), msg, MSG, NULL);
        ferry_worker_progress(w);
        if (st == FERRY_ERR_NO_RESOURCE)
            break;
        FY_ASSERT_OK(st);
        seq++;
        if (seq % 64 == 0) {
            long r = rss_bytes();
            peak = r > peak ? r : peak;
            FY_ASSERT_MSG(peak - base < GROWTH_MAX + fixed_bytes,
                          "sender grew by %ld bytes with the peer stalled (limit %u)", peak - base,
                          MAX_QUEUED);
        }
    }
    FY_ASSERT_STATUS(st, FERRY_ERR_NO_RESOURCE);
    /* still refused while the peer sleeps, and nothing more is taken */
    uint64_t refused_at = seq;
    for (int i = 0; i < 2000; i++) {
        fy_pattern(msg, MSG, (unsigned)seq);
        st = ferry_am_send(ep, 1, &seq, sizeof(seq), msg, MSG, NULL);
        ferry_worker_progress(w);
        if (st == FERRY_OK)
            seq++;
        else
            FY_ASSERT_STATUS(st, FERRY_ERR_NO_RESOURCE);
    }
    long r = rss_bytes();
    peak = r > peak ? r : peak;
    printf("%s: %llu messages (%.1f MiB) taken before NO_RESOURCE, %llu after; "
           "sender grew %.1f MiB (limit %.1f MiB)\n",
           what, (unsigned long long)refused_at, refused_at * (double)MSG / (1 << 20),
           (unsigned long long)(seq - refused_at), (peak - base) / (double)(1 << 20),
           MAX_QUEUED / (double)(1 << 20));
    FY_ASSERT_LT(seq - refused_at, 64);
    FY_ASSERT_LT(peak - base, GROWTH_MAX + fixed_bytes);
    FY_ASSERT_GT(refused_at * MSG, MAX_QUEUED / 2); /* the limit, not something smaller */
    return seq;
}

static void stalled_peer(void)
{
    if (over_self())
        return; /* a peer in another process: not over self (stalled_worker is) */
    read_sizes();
    char v[32];
    snprintf(v, sizeof(v), "%u", MAX_QUEUED);
    setenv("FERRY_MAX_QUEUED", v, 1);
    int c2p[2], p2c[2];
    FY_ASSERT(pipe(c2p) == 0 && pipe(p2c) == 0);
    fflush(stdout);
    pid_t pid = fork();
    FY_ASSERT(pid >= 0);
    if (pid == 0) {
        close(c2p[0]);
        close(p2c[1]);
        receiver(c2p[1], p2c[0]);
    }
    close(c2p[1]);
    close(p2c[0]);
    size_t alen;
    char addr[4096];
    read_all(c2p[0], &alen, sizeof(alen));
    FY_ASSERT(alen <= sizeof(addr));
    read_all(c2p[0], addr, alen);

    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_ep_t *ep;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    ferry_ep_params_t ep_params = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
    FY_ASSERT_OK(ferry_ep_create(w, &ep_params, &ep));
    for (int i = 0; i < 100; i++)
        ferry_worker_progress(w);

    static uint8_t msg[MSG_MAX];
    uint64_t seq = flood_until_refused(w, ep, msg, "stalled peer");
    double deadline;
    ferry_status_t st;

    /* the peer resumes: the rest goes through, retried on NO_RESOURCE */
    uint64_t total = seq + extra_msgs();
    write_all(p2c[1], &total, sizeof(total));
    deadline = now_s() + 30;
    while (seq < total && now_s() < deadline) {
        fy_pattern(msg, MSG, (unsigned)seq);
        st = ferry_am_send(ep, 1, &seq, sizeof(seq), msg, MSG, NULL);
        ferry_worker_progress(w);
        if (st == FERRY_OK)
            seq++;
        else
            FY_ASSERT_STATUS(st, FERRY_ERR_NO_RESOURCE);
    }
    FY_ASSERT_EQ(seq, total);
    FY_ASSERT_OK(ferry_ep_flush(ep, NULL));
    uint64_t res[2];
    read_all(c2p[0], res, sizeof(res));
    FY_ASSERT_EQ(res[1], 0); /* nothing out of order, malformed or corrupt */
    FY_ASSERT_EQ(res[0], total);
    FY_ASSERT_OK(ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL));
    close(p2c[1]);
    int wst;
    FY_ASSERT(waitpid(pid, &wst, 0) == pid);
    FY_ASSERT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
}

/* ---- over self: the peer is a worker of this process that is not progressed ---- */

static void stalled_worker(void)
{
    if (!over_self())
        return;
    read_sizes();
    char v[32];
    snprintf(v, sizeof(v), "%u", MAX_QUEUED);
    setenv("FERRY_MAX_QUEUED", v, 1);
    ferry_context_t *ctx;
    ferry_worker_t *w, *peer;
    ferry_ep_t *ep;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &peer));
    FY_ASSERT_OK(ferry_worker_set_am_handler(peer, 1, on_msg, NULL));
    char addr[4096];
    size_t alen = sizeof(addr);
    FY_ASSERT_OK(ferry_worker_get_address(peer, addr, &alen));
    ferry_ep_params_t ep_params = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
    FY_ASSERT_OK(ferry_ep_create(w, &ep_params, &ep));
    for (int i = 0; i < 100; i++) {
        ferry_worker_progress(w);
        ferry_worker_progress(peer);
    }

    static uint8_t msg[MSG_MAX];
    uint64_t seq = flood_until_refused(w, ep, msg, "stalled worker");
    double deadline;
    ferry_status_t st;

    /* the peer resumes: the rest goes through, every message once, in order, intact */
    uint64_t total = seq + extra_msgs();
    deadline = now_s() + 30;
    while ((seq < total || rx_next < total) && rx_bad == 0 && now_s() < deadline) {
        if (seq < total) {
            fy_pattern(msg, MSG, (unsigned)seq);
            st = ferry_am_send(ep, 1, &seq, sizeof(seq), msg, MSG, NULL);
            if (st == FERRY_OK)
                seq++;
            else
                FY_ASSERT_STATUS(st, FERRY_ERR_NO_RESOURCE);
        }
        ferry_worker_progress(w);
        ferry_worker_progress(peer);
    }
    FY_ASSERT_EQ(seq, total);
    FY_ASSERT_EQ(rx_bad, 0);
    FY_ASSERT_EQ(rx_next, total);
    FY_ASSERT_OK(ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL));
    ferry_worker_destroy(w);
    ferry_worker_destroy(peer);
    ferry_context_destroy(ctx);
}

FYTEST_MAIN(FYTEST_CASE(stalled_peer), FYTEST_CASE(stalled_worker))
