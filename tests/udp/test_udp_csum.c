/*
 * test_udp_csum.c - the CRC32C of udp datagrams (src/tl/udp/udp_csum.c): the fast path (three
 * crc32 lanes joined by table shifts, on x86-64 with SSE4.2) must give exactly what the
 * byte-at-a-time table gives, for every length, alignment and split of the input.
 *
 *   vectors    the standard check value ("123456789") and the iSCSI test patterns (RFC 3720
 *              B.4), through both paths; 0 for no bytes
 *   random     random data at random lengths (up to 200 KiB, each lane-block edge and its
 *              neighbours included) and every alignment 0..15: fast == portable
 *   chained    a buffer checksummed in random pieces (as the receiver does around the csum
 *              field) equals the whole, both paths
 *   speed      prints both paths' rate over 1 MiB (no assertion beyond fast >= portable / 2:
 *              the figure is for bench/RESULTS.md)
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "fytest.h"
#include "fytest_util.h"
#include "tl/udp/udp_proto.h"
#include "util/status.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rng(void)
{
    return fy_xorshift64(&rng_state);
}

static void fill(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng() >> 56);
}

static void both(const void *p, size_t n, uint32_t want)
{
    FY_ASSERT_MSG(fy_udp_crc32c(0, p, n) == want, "fast: %08x, want %08x (%zu bytes)",
                  fy_udp_crc32c(0, p, n), want, n);
    FY_ASSERT_MSG(fy_udp_crc32c_sw(0, p, n) == want, "portable: %08x, want %08x (%zu bytes)",
                  fy_udp_crc32c_sw(0, p, n), want, n);
}

static void vectors(void)
{
    uint8_t b[32];
    both("123456789", 9, 0xe3069283u);
    both(b, 0, 0);
    memset(b, 0, sizeof(b));
    both(b, 32, 0x8a9136aau);
    memset(b, 0xff, sizeof(b));
    both(b, 32, 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    both(b, 32, 0x46dd794eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    both(b, 32, 0x113fdb5cu);
}

static void random_data(void)
{
    const size_t max = 200 * 1024;
    uint8_t *buf = malloc(max + 16);
    FY_ASSERT(buf != NULL);
    fill(buf, max + 16);
    /* Every edge of the lane blocks (3 x 4096, 3 x 256, 8) and its neighbours. */
    static const size_t edges[] = {0,     1,     7,     8,     9,     767,   768,   769,
                                   1535,  1536,  1537,  12287, 12288, 12289, 13055, 13056,
                                   24575, 24576, 24577, 65507, 65536, 100000};
    for (size_t e = 0; e < FY_ARRAY_SIZE(edges); e++)
        for (size_t a = 0; a < 16; a++)
            FY_ASSERT_MSG(fy_udp_crc32c(0, buf + a, edges[e]) ==
                              fy_udp_crc32c_sw(0, buf + a, edges[e]),
                          "length %zu at alignment %zu", edges[e], a);
    for (int i = 0; i < 2000; i++) {
        size_t n = (size_t)(rng() % (i < 1000 ? 4096 : max));
        size_t a = (size_t)(rng() % 16);
        uint32_t seed = (uint32_t)rng();
        FY_ASSERT_MSG(fy_udp_crc32c(seed, buf + a, n) == fy_udp_crc32c_sw(seed, buf + a, n),
                      "length %zu at alignment %zu, from %08x", n, a, seed);
    }
    free(buf);
}

static void chained(void)
{
    const size_t n = 70000;
    uint8_t *buf = malloc(n);
    FY_ASSERT(buf != NULL);
    fill(buf, n);
    uint32_t whole = fy_udp_crc32c_sw(0, buf, n);
    for (int i = 0; i < 200; i++) {
        uint32_t f = 0, s = 0;
        size_t at = 0;
        while (at < n) {
            size_t piece = (size_t)(rng() % 30000);
            piece = FY_MIN(piece, n - at);
            f = fy_udp_crc32c(f, buf + at, piece);
            s = fy_udp_crc32c_sw(s, buf + at, piece);
            at += piece;
        }
        FY_ASSERT(f == whole && s == whole);
    }
    free(buf);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double rate(uint32_t (*fn)(uint32_t, const void *, size_t), const uint8_t *p, size_t n)
{
    double best = 0;
    volatile uint32_t sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (int k = 0; k < 8; k++)
            sink ^= fn(sink, p, n);
        double gbs = 8.0 * (double)n / (now() - t0) / 1e9;
        if (gbs > best)
            best = gbs;
    }
    return best;
}

static void speed(void)
{
    const size_t n = 1 << 20;
    uint8_t *buf = malloc(n);
    FY_ASSERT(buf != NULL);
    fill(buf, n);
    double fast = rate(fy_udp_crc32c, buf, n), sw = rate(fy_udp_crc32c_sw, buf, n);
    printf("speed: CRC32C over 1 MiB, best of 5: %.2f GB/s (this CPU's path), %.2f GB/s "
           "(portable table)\n",
           fast, sw);
    FY_ASSERT(fast >= sw / 2);
    free(buf);
}

FYTEST_MAIN(FYTEST_CASE(vectors), FYTEST_CASE(random_data), FYTEST_CASE(chained),
            FYTEST_CASE(speed))
