/*
 * test_copy.c - fy_copy and fy_copy_rx move exactly the bytes asked for, at every size and
 * alignment around their switches (16 bytes; the string copy's threshold), and nothing either
 * side; and what FERRY_RX_COPY_MOVSB=auto picks is what the processor offers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fytest.h"
#include "util/copy.h"

#ifdef FY_COPY_MOVSB
#include <cpuid.h>
#endif

#define GUARD 64
#define MAXN  5000

static uint8_t src_buf[MAXN + 2 * GUARD], dst_buf[MAXN + 2 * GUARD];

/* Copy n bytes from src_buf + GUARD + so to dst_buf + GUARD + dof (fy_copy_rx with movsb_min,
 * or fy_copy), then check the copy and that every byte around it kept its fill. */
static void check_one(size_t n, size_t so, size_t dof, size_t movsb_min, int rx)
{
    for (size_t i = 0; i < sizeof(src_buf); i++)
        src_buf[i] = (uint8_t)(i * 7 + n);
    memset(dst_buf, 0xa5, sizeof(dst_buf));
    uint8_t *d = dst_buf + GUARD + dof;
    const uint8_t *s = src_buf + GUARD + so;
    if (rx)
        fy_copy_rx(d, s, n, movsb_min);
    else
        fy_copy(d, s, n);
    FY_ASSERT_MSG(memcmp(d, s, n) == 0, "size %zu, offsets %zu/%zu, movsb from %zu: bytes differ",
                  n, so, dof, movsb_min);
    for (uint8_t *p = dst_buf; p < d; p++)
        FY_ASSERT_MSG(*p == 0xa5, "size %zu: byte %td before the copy written", n, d - p);
    for (uint8_t *p = d + n; p < dst_buf + sizeof(dst_buf); p++)
        FY_ASSERT_MSG(*p == 0xa5, "size %zu: byte %td after the copy written", n, p - (d + n));
}

static void sizes_and_alignments(void)
{
    static const size_t sizes[] = {0,    1,    2,    3,    4,    7,    8,    9,    15,  16,  17,
                                   31,   32,   63,   64,   65,   127,  128,  575,  576, 577, 1023,
                                   1024, 1025, 2111, 2112, 2113, 4095, 4096, 4097, MAXN};
    static const size_t mins[] = {0, 1, FY_COPY_RX_MOVSB_AUTO, 4096, SIZE_MAX};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t so = 0; so < 3; so++)
            for (size_t dof = 0; dof < 3; dof++) {
                check_one(sizes[i], so * 13, dof * 29, 0, 0);
                for (size_t m = 0; m < sizeof(mins) / sizeof(mins[0]); m++)
                    check_one(sizes[i], so * 13, dof * 29, mins[m], 1);
            }
}

/* auto is the documented size where the processor has ERMS and FSRM, never elsewhere; a
 * sanitizer build never uses the string copy (its checks see only memcpy). */
static void auto_choice(void)
{
    size_t a = fy_copy_rx_movsb_auto();
#ifdef FY_COPY_MOVSB
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    int has =
        __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & (1u << 9)) && (edx & (1u << 4));
    FY_ASSERT_EQ(a, has ? (size_t)FY_COPY_RX_MOVSB_AUTO : SIZE_MAX);
#else
    FY_ASSERT_EQ(a, SIZE_MAX);
#endif
}

FYTEST_MAIN(FYTEST_CASE(sizes_and_alignments), FYTEST_CASE(auto_choice))
