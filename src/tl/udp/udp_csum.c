/*
 * udp_csum.c - CRC32C (Castagnoli) of datagrams, for paths that corrupt what the UDP
 * checksum lets through (or where it is off) and for the fault injector's corruption.
 *
 * On x86-64 with SSE4.2 the crc32 instruction does 8 bytes per step; elsewhere a 256-entry
 * table.  The choice is made once, at the first call.
 */
#include <stdint.h>
#include <string.h>

#include "tl/udp/udp_proto.h"

#define POLY 0x82f63b78u /* reflected Castagnoli */

static uint32_t table[256];
static int table_ready;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
    table_ready = 1;
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    if (!table_ready)
        table_init();
    while (len--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t len)
{
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

uint32_t fy_udp_crc32c(uint32_t crc, const void *buf, size_t len)
{
    static int hw = -1;
    crc = ~crc;
#if defined(__x86_64__)
    if (hw < 0) {
        __builtin_cpu_init();
        hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    if (hw)
        return ~crc_hw(crc, buf, len);
#else
    (void)hw;
#endif
    return ~crc_sw(crc, buf, len);
}
