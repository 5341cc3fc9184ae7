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

FYTEST_MAIN(FYTEST_CASE(clean), FYTEST_CASE(many_small), FYTEST_CASE(loss1), FYTEST_CASE(loss5),
            FYTEST_CASE(loss20), FYTEST_CASE(loss20_small), FYTEST_CASE(sleepy_loss5),
            FYTEST_CASE(mtu_mismatch))
