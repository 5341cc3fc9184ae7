/*
 * udp_csum.c - CRC32C (Castagnoli) of datagrams, for paths that corrupt what the UDP
 * checksum lets through (or where it is off) and for the fault injector's corruption.
 *
 * Why it is built this way: a checksum is only worth having on by default if it costs next to
 * nothing beside the copies the kernel makes anyway, and one chain of crc32 instructions does
 * not get there - each step waits for the one before (3 cycles latency, 8 bytes), so a single
 * stream runs at a third of what the unit can do.  On x86-64 with SSE4.2 the data is therefore
 * cut into three lanes that run side by side (independent crc32 chains the CPU overlaps), and
 * the three CRCs are joined at the end of each block by "shifting" the earlier ones past the
 * later bytes: a CRC register is linear, so the register after A||B is (A's register
 * multiplied by x^(8|B|) modulo the polynomial) xor (B's register started from zero).  The
 * multiplication by that fixed power is itself linear in the 32 register bits, so it is four
 * table lookups (tables made once, from the powers computed by carry-less multiplication in
 * software).  Blocks of 3 x 4 KiB, then 3 x 256 bytes, then one lane for the rest.
 *
 * Elsewhere (or without SSE4.2, decided once at the first call) a table does a byte a step.
 * Both give the same answer; the unit test compares them on random data, lengths and
 * alignments, and both against the standard check values.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tl/udp/udp_proto.h"

#define POLY 0x82f63b78u /* reflected Castagnoli */

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
}

/* The byte-at-a-time CRC register update: the portable path, and the reference. */
uint32_t fy_udp_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    pthread_once(&table_once, table_init);
    crc = ~crc;
    while (len--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)
#define LONG_LANE  4096 /* bytes per lane in a long block */
#define SHORT_LANE 256  /* ... in a short block */

/* In the reflected representation bit 31 is x^0. a * b modulo the polynomial. */
static uint32_t gf_mul(uint32_t a, uint32_t b)
{
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) {
        if (a & (0x80000000u >> i))
            r ^= b;
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1; /* b *= x */
    }
    return r;
}

/* x^(8 n) modulo the polynomial. */
static uint32_t x_pow_bytes(size_t n)
{
    uint32_t r = 0x80000000u, x8 = 0x00800000u; /* 1 and x^8 */
    for (size_t i = 0; i < n; i++)
        r = gf_mul(r, x8);
    return r;
}

/* shift[k][b]: the register b << 8k moved past a lane's worth of zero bytes. */
static uint32_t shift_long[4][256], shift_short[4][256];

static void shift_tables(uint32_t t[4][256], size_t n)
{
    uint32_t m = x_pow_bytes(n);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            t[k][b] = gf_mul(b << (8 * k), m);
}

static inline uint32_t shift(const uint32_t t[4][256], uint32_t c)
{
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* One block of three lanes of `lane` bytes each, joined: the register after the block. */
__attribute__((target("sse4.2"), always_inline)) static inline uint64_t
block3(uint64_t c0, const uint8_t *p, size_t lane, const uint32_t t[4][256])
{
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < lane; i += 8) {
        c0 = __builtin_ia32_crc32di(c0, load64(p + i));
        c1 = __builtin_ia32_crc32di(c1, load64(p + lane + i));
        c2 = __builtin_ia32_crc32di(c2, load64(p + 2 * lane + i));
    }
    return shift(t, shift(t, (uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
}

/* The register (not inverted) over len bytes, three lanes at a time. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t len)
{
    uint64_t c0 = crc;
    for (; len >= 3 * LONG_LANE; p += 3 * LONG_LANE, len -= 3 * LONG_LANE)
        c0 = block3(c0, p, LONG_LANE, shift_long);
    for (; len >= 3 * SHORT_LANE; p += 3 * SHORT_LANE, len -= 3 * SHORT_LANE)
        c0 = block3(c0, p, SHORT_LANE, shift_short);
    for (; len >= 8; p += 8, len -= 8)
        c0 = __builtin_ia32_crc32di(c0, load64(p));
    uint32_t c = (uint32_t)c0;
    while (len--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}

static int hw;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void hw_detect(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        shift_tables(shift_long, LONG_LANE);
        shift_tables(shift_short, SHORT_LANE);
        hw = 1;
    }
}

static int hw_usable(void)
{
    pthread_once(&hw_once, hw_detect);
    return hw;
}
#endif

uint32_t fy_udp_crc32c(uint32_t crc, const void *buf, size_t len)
{
#if defined(__x86_64__)
    if (hw_usable())
        return ~crc_hw(~crc, buf, len);
#endif
    return fy_udp_crc32c_sw(crc, buf, len);
}

uint32_t fy_udp_dgram_crc(uint32_t seed, size_t at, const uint8_t *dgram, const uint8_t *rest,
                          size_t split, size_t len)
{
    static const uint8_t zero[4];
    uint32_t crc = fy_udp_crc32c(seed, dgram, at);
    crc = fy_udp_crc32c(crc, zero, 4);
    if (rest == NULL || split >= len)
        return fy_udp_crc32c(crc, dgram + at + 4, len - at - 4);
    crc = fy_udp_crc32c(crc, dgram + at + 4, split - at - 4);
    return fy_udp_crc32c(crc, rest, len - split);
}
