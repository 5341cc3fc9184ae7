/*
 * test_udp_transfer.c - the udp transport delivers every message once, in order and intact,
 * from 0 bytes to 64 MiB, through am_short, am_bcopy and am_zcopy, with and without the
 * in-transport fault injector (fixed seeds: loss 1/5/20% with duplication, reordering,
 * delay and corruption mixed in), with processes that sleep on the event fd, and across a
 * path whose MTU is smaller than the interfaces' (the connectivity check must notice).
 *
 * Each case forks a sender; addresses go over pipes.  The receiver checks message numbers,
 * lengths and CRC32C of every payload (udp_test.h).
 */
#include "fytest.h"
#include "udp_test.h"
#include "udp_stream.h"
#include "tl/udp/udp.h"

static void set_faults(const char *seed, const char *drop, const char *dup, const char *reorder,
                       const char *corrupt)
{
    setenv("FERRY_UDP_FAULT_SEED", seed, 1);
    setenv("FERRY_UDP_FAULT_DROP", drop, 1);
    setenv("FERRY_UDP_FAULT_DUP", dup, 1);
    setenv("FERRY_UDP_FAULT_REORDER", reorder, 1);
    setenv("FERRY_UDP_FAULT_DELAY", reorder, 1);
    setenv("FERRY_UDP_FAULT_CORRUPT", corrupt, 1);
}

static void clean(void)
{
    run_transfer(all_sizes, FY_ARRAY_SIZE(all_sizes), 1, 0);
}

static void many_small(void)
{
    static const size_t sz[] = {8, 0, 64, 700};
    run_transfer(sz, 4, 5000, 0);
}

/* Clean loopback: small segments on the priority channel overtake large ones on the data
 * channel; that reordering must not read as loss (fewer than 1 in 1000 resent needlessly,
 * + 10; on a quiet machine 0-1 of ~9000; before the fix ~1%).  What this case measures is
 * loss detection; a process descheduled past the retransmission timeout on a loaded
 * machine resends by the timer instead (up to 33 of 9000 seen at load 15), so the
 * timeout's floor is raised here (500 ms, below). */
static void clean_needless(void)
{
    static const size_t sz[] = {8, 700, 4096, 20000, 100, 65000};
    /* 500 ms (the ceiling 1 s): a process descheduled past a 100 ms floor under ASan on a slower
     * host resent a window (196 duplicates in ~9000 segments, once in a clean-clone CI run,
     * 2026-12-02). */
    setenv("FERRY_UDP_RTO_MIN", "500ms", 1);
    setenv("FERRY_UDP_RTO_MAX", "1s", 1);
    stream_max_dup_permille = 1;
    run_transfer(sz, FY_ARRAY_SIZE(sz), 1500, 0);
    stream_max_dup_permille = 0;
    unsetenv("FERRY_UDP_RTO_MIN");
    unsetenv("FERRY_UDP_RTO_MAX");
}

/* Issue 13's acceptance: a clean loopback stream of 1 MiB AMs resends fewer than 1 segment
 * in 1000 needlessly, with no slack: 256 MiB at the data channel's 64 KiB segments (~4,100
 * segments), then 48 MiB at 1,500-byte ones (FERRY_UDP_MTU=1500: ~35,000 segments).  The
 * timeout's floor is raised as in clean_needless: this case is about loss detection, not a
 * process descheduled past the timer on a loaded machine. */
static void clean_1m_needless(void)
{
    static const size_t sz[] = {1 << 20};
    setenv("FERRY_UDP_RTO_MIN", "100ms", 1);
    stream_max_dup_permille = 1;
    stream_dup_slack = 0;
    run_transfer(sz, 1, 256, 0);
    setenv("FERRY_UDP_MTU", "1500", 1);
    run_transfer(sz, 1, 48, 0);
    unsetenv("FERRY_UDP_MTU");
    stream_dup_slack = 10;
    stream_max_dup_permille = 0;
    unsetenv("FERRY_UDP_RTO_MIN");
}

/* A receiver whose application stops for 1.5 s in a handler (no progress, no ACKs) while the
 * sender has a full window out: nothing is lost, and the sender does not resend its window
 * over and over into a socket nobody reads - one probe per backed-off timeout (~15 in 1.5 s;
 * a window is up to 128 segments of 64 KiB here). */
static void slow_receiver(void)
{
    static const size_t sz[] = {65000, 1 << 20, 200000, 8};
    stream_stall_at = 9;
    stream_stall_ms = 1500;
    /* ~12 on a quiet machine; under load up to ~55: the segments in flight when the receiver
     * stopped time out while its last ACKs are fresh (less than an RTO old), so they are
     * resent once each before the silence is plain.  The defect was the window again at
     * every timeout: 203. */
    stream_max_resends = 100;
    run_transfer(sz, FY_ARRAY_SIZE(sz), 12, 0);
    stream_stall_at = stream_stall_ms = stream_max_resends = 0;
}

/* A receiver that stops now and then while small messages stream in: each stop lets the
 * window in flight pile up in its socket (on the priority channel, where the kernel charges
 * a small datagram more than the credits count) until the socket drops.  The receiver
 * sees the drops (SO_RXQ_OVFL) and advertises a smaller window; the sender keeps to it, so
 * the later stops drop far fewer - the slow receiver slows the sender instead of making it
 * resend.  Everything arrives, and the sender resends no more than was dropped (plus its
 * timeout probes). */
#define SMALL_STALLS 7
static uint64_t stall_drops[SMALL_STALLS + 1];

static uint64_t sock_drops(ut_node_t *n)
{
    return ((fy_udp_iface_t *)n->iface)->drops_sock;
}

static void on_stall(ut_node_t *n, unsigned k)
{
    if (k < SMALL_STALLS)
        stall_drops[k] = sock_drops(n);
}

static void small_drops_check(ut_node_t *n)
{
    uint64_t first, later;
    stall_drops[SMALL_STALLS] = sock_drops(n);
    printf("  socket drops per stall:");
    for (unsigned k = 0; k < SMALL_STALLS; k++)
        printf(" %llu", (unsigned long long)(stall_drops[k + 1] - stall_drops[k]));
    printf(" (%llu before the first)\n", (unsigned long long)stall_drops[0]);
    first = stall_drops[1] - stall_drops[0];
    later = stall_drops[SMALL_STALLS] - stall_drops[2];
    FY_ASSERT_MSG(later <= first / 2, "stalls 3-%u dropped %llu datagrams, the first %llu",
                  SMALL_STALLS, (unsigned long long)later, (unsigned long long)first);
}

static void slow_receiver_small(void)
{
    static const size_t sz[] = {700};
    stream_stall_at = 3000;
    stream_stall_every = 2500;
    stream_stall_ms = 100;
    stream_max_resends = 4096 + 400; /* what one stop can drop (a window), and the probes */
    stream_on_stall = on_stall;
    stream_rx_after = small_drops_check;
    run_transfer(sz, FY_ARRAY_SIZE(sz), 3000 + 2500 * SMALL_STALLS, 0);
    stream_stall_at = stream_stall_ms = stream_max_resends = stream_stall_every = 0;
    stream_rx_after = NULL;
    stream_on_stall = NULL;
}

static void loss1(void)
{
    set_faults("11", "1", "1", "1", "0.5");
    run_transfer(all_sizes, FY_ARRAY_SIZE(all_sizes), 1, 0);
}

static void loss5(void)
{
    set_faults("55", "5", "2", "2", "1");
    run_transfer(all_sizes, FY_ARRAY_SIZE(all_sizes), 1, 0);
}

static void loss20(void)
{
    set_faults("2020", "20", "5", "5", "2");
    run_transfer(all_sizes, FY_ARRAY_SIZE(all_sizes), 1, 0);
}

static void loss20_small(void)
{
    static const size_t sz[] = {8, 0, 300, 2000};
    set_faults("77", "20", "5", "5", "2");
    run_transfer(sz, 4, 500, 0);
}

static void sleepy_loss5(void)
{
    set_faults("9", "5", "1", "1", "1");
    run_transfer(small_sizes, FY_ARRAY_SIZE(small_sizes), 3, 1);
}

static void mtu_mismatch(void)
{
    /* The interfaces (lo) say 64 KiB, the "path" carries 9000 bytes at most. */
    setenv("FERRY_UDP_FAULT_MAX_DGRAM", "9000", 1);
    run_transfer(small_sizes, FY_ARRAY_SIZE(small_sizes), 1, 0);
}

static void ipv6(void)
{
    setenv("FERRY_UDP_AF", "inet6", 1);
    set_faults("6", "5", "1", "1", "1");
    run_transfer(small_sizes, FY_ARRAY_SIZE(small_sizes), 2, 0);
}

/* Device selection: CIDR with wide match, exclusion, address family. */
static unsigned count_devices(const char *inc, const char *exc, const char *af, int *has_lo)
{
    const fy_tl_component_t *tl = fy_tl_find("udp");
    fy_tl_md_t *md;
    fy_tl_device_t devs[16];
    unsigned n = 0;
    setenv("FERRY_UDP_IF_INCLUDE", inc, 1);
    setenv("FERRY_UDP_IF_EXCLUDE", exc, 1);
    setenv("FERRY_UDP_AF", af, 1);
    FY_ASSERT_OK(tl->ops->md_open(tl, &md));
    FY_ASSERT_OK(tl->ops->query_devices(md, devs, 16, &n));
    *has_lo = 0;
    for (unsigned i = 0; i < n && i < 16; i++)
        *has_lo |= strcmp(devs[i].name, "lo") == 0 && devs[i].is_loopback;
    tl->ops->md_close(md);
    return n;
}

static void devices(void)
{
    int lo;
    /* 127.0.0.0/8 itself, and a wider mask that contains it */
    FY_ASSERT_EQ(count_devices("127.0.0.0/8", "", "any", &lo), 1);
    FY_ASSERT(lo);
    FY_ASSERT_GE(count_devices("120.0.0.0/5", "", "inet", &lo), 1);
    FY_ASSERT(lo);
    FY_ASSERT_EQ(count_devices("lo", "lo", "any", &lo), 0);
    FY_ASSERT_EQ(count_devices("127.0.0.0/8", "", "inet6", &lo), 0);
    FY_ASSERT_EQ(count_devices("::1", "", "inet6", &lo), 1);
    FY_ASSERT(lo);
    /* an interface that does not exist opens nothing */
    ut_node_t n;
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_AF", "any", 1);
    FY_ASSERT_NE(ut_open(&n, "no-such-if0", NULL, NULL), 0);
}

FYTEST_MAIN(FYTEST_CASE(clean), FYTEST_CASE(clean_needless), FYTEST_CASE(clean_1m_needless),
            FYTEST_CASE(many_small), FYTEST_CASE(slow_receiver), FYTEST_CASE(slow_receiver_small),
            FYTEST_CASE(loss1), FYTEST_CASE(loss5), FYTEST_CASE(loss20), FYTEST_CASE(loss20_small),
            FYTEST_CASE(sleepy_loss5), FYTEST_CASE(mtu_mismatch), FYTEST_CASE(ipv6),
            FYTEST_CASE(devices))
