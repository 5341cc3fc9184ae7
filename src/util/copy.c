/*
 * copy.c - what fy_copy_rx may use on this processor (copy.h).
 */
#include <stdint.h>

#include "util/copy.h"

#ifdef FY_COPY_MOVSB
#include <cpuid.h>
#endif

size_t fy_copy_rx_movsb_auto(void)
{
#ifdef FY_COPY_MOVSB
    unsigned a, b, c, d;
    /* leaf 7: EBX bit 9 enhanced rep movsb (ERMS), EDX bit 4 fast short rep mov (FSRM) */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 9)) && (d & (1u << 4)))
        return FY_COPY_RX_MOVSB_AUTO;
#endif
    return SIZE_MAX;
}
