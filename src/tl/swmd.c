/*
 * swmd.c - the software memory domain shared by tcp and udp (swmd.h): one region table per
 * md, one key layout, one byte order, written once.
 */
#include <endian.h>
#include <string.h>

#include "tl/swmd.h"

ferry_status_t fy_swmd_init(fy_swmd_t *md, const fy_tl_component_t *tl)
{
    md->super.component = tl;
    return fy_region_table_init(&md->regions);
}

void fy_swmd_cleanup(fy_swmd_t *md)
{
    fy_region_table_destroy(&md->regions);
}

ferry_status_t fy_swmd_mem_reg(fy_tl_md_t *super, void *addr, size_t len, unsigned access,
                               void *memh)
{
    fy_swmd_t *md = (fy_swmd_t *)super;
    fy_region_t r;
    ferry_status_t st = fy_region_add(&md->regions, addr, len, access, &r);
    if (st != FERRY_OK)
        return st;
    fy_swmd_key_t k = {r.id, r.key};
    memcpy(memh, &k, sizeof(k));
    return FERRY_OK;
}

void fy_swmd_mem_dereg(fy_tl_md_t *super, void *memh)
{
    fy_swmd_t *md = (fy_swmd_t *)super;
    fy_swmd_key_t k;
    if (memh == NULL)
        return;
    memcpy(&k, memh, sizeof(k));
    if (k.id != 0)
        fy_region_remove(&md->regions, k.id);
}

ferry_status_t fy_swmd_rkey_pack(fy_tl_md_t *md, const void *memh, void *buf)
{
    (void)md;
    fy_swmd_key_t k;
    memcpy(&k, memh, sizeof(k));
    uint64_t v[2] = {htole64(k.id), htole64(k.key)};
    memcpy(buf, v, sizeof(v));
    return FERRY_OK;
}

ferry_status_t fy_swmd_rkey_unpack(fy_tl_md_t *md, const void *buf, void *rkey)
{
    (void)md;
    uint64_t v[2];
    memcpy(v, buf, sizeof(v));
    fy_swmd_key_t k = {le64toh(v[0]), le64toh(v[1])};
    memcpy(rkey, &k, sizeof(k));
    return FERRY_OK;
}

void fy_swmd_rkey_release(fy_tl_md_t *md, void *rkey)
{
    (void)md;
    (void)rkey; /* nothing is held: the key is two numbers */
}
