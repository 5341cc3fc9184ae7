/*
 * swmd.h - the software memory domain of transports that check remote access in software at
 * the target (tcp, udp): registration enters the range into the md's region table
 * (util/region.h), and a remote key is the region's (id, 64 random bits), so a key carries no
 * address a peer could abuse and a wrong or stale key is refused.
 *
 * A transport's md embeds fy_swmd_t as its first member (named super) and points its ops
 * table's mem_reg, mem_dereg, rkey_pack, rkey_unpack and rkey_release at the functions below;
 * its component takes FY_SWMD_COMPONENT_SIZES.  Its target checks a request with
 * fy_region_check(&md->super.regions, id, key, ...).
 *
 * The packed key, the same for every such transport (16 bytes, little-endian):
 *
 *   0                               63
 *   +-------------------------------+
 *   | region id                     |
 *   | key                           |
 *   +-------------------------------+
 */
#ifndef FY_TL_SWMD_H
#define FY_TL_SWMD_H

#include "tl/tl.h"
#include "util/region.h"

typedef struct fy_swmd {
    fy_tl_md_t super;
    fy_region_table_t regions;
} fy_swmd_t;

/* The memory handle and the unpacked remote key: both are (region id, key). */
typedef struct fy_swmd_key {
    uint64_t id;
    uint64_t key;
} fy_swmd_key_t;

#define FY_SWMD_KEY_PACKED_SIZE 16

#define FY_SWMD_COMPONENT_SIZES                                                                    \
    .memh_size = sizeof(fy_swmd_key_t), .rkey_packed_size = FY_SWMD_KEY_PACKED_SIZE,               \
    .rkey_size = sizeof(fy_swmd_key_t)

/* Set up / tear down the md's base (the transport's md_open / md_close). */
ferry_status_t fy_swmd_init(fy_swmd_t *md, const fy_tl_component_t *tl);
void fy_swmd_cleanup(fy_swmd_t *md);

/* The ops (fy_tl_ops_t's contracts, src/tl/tl.h). */
ferry_status_t fy_swmd_mem_reg(fy_tl_md_t *md, void *addr, size_t len, unsigned access, void *memh);
void fy_swmd_mem_dereg(fy_tl_md_t *md, void *memh);
ferry_status_t fy_swmd_rkey_pack(fy_tl_md_t *md, const void *memh, void *buf);
ferry_status_t fy_swmd_rkey_unpack(fy_tl_md_t *md, const void *buf, void *rkey);
void fy_swmd_rkey_release(fy_tl_md_t *md, void *rkey);

#endif
