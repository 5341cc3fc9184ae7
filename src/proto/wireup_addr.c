/*
 * wireup_addr.c - the worker address blob: packing this worker's interfaces, and parsing a
 * peer's.
 *
 * The address lists, per open interface: transport name, device, the transport's device and
 * interface addresses, and the figures lane selection scores (latency, bandwidth, per-message
 * overhead, capabilities).  Both ends of a pair score it from the two addresses alone, so
 * each needs the other's figures: that is what makes their choices agree.  An address comes
 * from outside (a file, a key-value store, a wireup message), so the parser checks every
 * length against the blob's end and trusts nothing else in it either.
 *
 * Format (host byte order; peers run one build on hosts of one byte order), version 2:
 *   u32 magic "FYWA" | u8 version | u8 niface | u16 0 | u64 worker uuid |
 *   niface x { u8 tl_len | tl name | u8 dev_len | dev name | u16 dev_addr_len | dev_addr |
 *              u16 iface_addr_len | iface_addr | f32 latency ns | f32 bandwidth MB/s |
 *              f32 overhead ns | u32 caps }
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

#define FIGURES_LEN 16 /* latency, bandwidth, overhead, caps */

ferry_status_t fy_address_pack(ferry_worker_t *w)
{
    size_t need = 16;
    for (unsigned i = 0; i < w->nifaces; i++) {
        fy_iface_t *fi = &w->ifaces[i];
        need += 1 + strlen(fi->tl->name) + 1 + strlen(fi->tl_iface->dev_name) + 2 +
                fi->attr.device_addr_len + 2 + fi->attr.iface_addr_len + FIGURES_LEN;
    }
    uint8_t *buf = calloc(1, need);
    if (buf == NULL)
        return FERRY_ERR_NO_MEMORY;
    uint8_t *p = buf;
    uint32_t magic = FY_ADDR_MAGIC;
    memcpy(p, &magic, 4);
    p[4] = FY_ADDR_VERSION;
    p[5] = (uint8_t)w->nifaces;
    memcpy(p + 8, &w->uuid, 8);
    p += 16;
    for (unsigned i = 0; i < w->nifaces; i++) {
        fy_iface_t *fi = &w->ifaces[i];
        size_t l = strlen(fi->tl->name);
        *p++ = (uint8_t)l;
        memcpy(p, fi->tl->name, l);
        p += l;
        l = strlen(fi->tl_iface->dev_name);
        *p++ = (uint8_t)l;
        memcpy(p, fi->tl_iface->dev_name, l);
        p += l;
        uint16_t dl = (uint16_t)fi->attr.device_addr_len, il = (uint16_t)fi->attr.iface_addr_len;
        uint8_t *dev = p + 2, *ifa = p + 2 + dl + 2;
        memcpy(p, &dl, 2);
        memcpy(p + 2 + dl, &il, 2);
        ferry_status_t st = fi->tl->ops->iface_get_address(fi->tl_iface, dev, ifa);
        if (st != FERRY_OK) {
            free(buf);
            return st;
        }
        p += 2 + dl + 2 + il;
        float lat = (float)fi->attr.latency_ns, bw = (float)(fi->attr.bandwidth / 1e6),
              ovh = (float)fi->attr.overhead_ns;
        uint32_t caps = (uint32_t)fi->attr.caps;
        memcpy(p, &lat, 4);
        memcpy(p + 4, &bw, 4);
        memcpy(p + 8, &ovh, 4);
        memcpy(p + 12, &caps, 4);
        p += FIGURES_LEN;
    }
    free(w->address);
    w->address = buf;
    w->address_len = (size_t)(p - buf);
    return FERRY_OK;
}

/* A figure from outside: finite and not negative, or 0 (unknown). */
static float sane(float v)
{
    return v == v && v >= 0 && v < 1e30f ? v : 0;
}

ferry_status_t fy_address_unpack(const void *addr, size_t len, fy_remote_addr_t *ra)
{
    const uint8_t *p = addr, *end;
    uint32_t magic;
    if (addr == NULL || len < 16)
        return FERRY_ERR_INVALID_ADDR;
    end = p + len;
    memcpy(&magic, p, 4);
    if (magic != FY_ADDR_MAGIC || p[4] != FY_ADDR_VERSION || p[5] > FY_ADDR_MAX_IFACES)
        return FERRY_ERR_INVALID_ADDR;
    ra->niface = p[5];
    memcpy(&ra->uuid, p + 8, 8);
    p += 16;
    for (unsigned i = 0; i < ra->niface; i++) {
        fy_remote_iface_t *ri = &ra->ifaces[i];
        if (p >= end || *p >= sizeof(ri->tl) || p + 1 + *p >= end)
            return FERRY_ERR_INVALID_ADDR;
        memcpy(ri->tl, p + 1, *p);
        ri->tl[*p] = '\0';
        p += 1 + *p;
        if (*p >= sizeof(ri->dev) || p + 1 + *p + 2 > end)
            return FERRY_ERR_INVALID_ADDR;
        memcpy(ri->dev, p + 1, *p);
        ri->dev[*p] = '\0';
        p += 1 + *p;
        memcpy(&ri->dev_addr_len, p, 2);
        p += 2;
        if (p + ri->dev_addr_len + 2 > end)
            return FERRY_ERR_INVALID_ADDR;
        ri->dev_addr = p;
        p += ri->dev_addr_len;
        memcpy(&ri->iface_addr_len, p, 2);
        p += 2;
        if (p + ri->iface_addr_len + FIGURES_LEN > end)
            return FERRY_ERR_INVALID_ADDR;
        ri->iface_addr = p;
        p += ri->iface_addr_len;
        memcpy(&ri->latency_ns, p, 4);
        memcpy(&ri->bandwidth_mbs, p + 4, 4);
        memcpy(&ri->overhead_ns, p + 8, 4);
        memcpy(&ri->caps, p + 12, 4);
        ri->latency_ns = sane(ri->latency_ns);
        ri->bandwidth_mbs = sane(ri->bandwidth_mbs);
        ri->overhead_ns = sane(ri->overhead_ns);
        p += FIGURES_LEN;
    }
    return p == end ? FERRY_OK : FERRY_ERR_INVALID_ADDR;
}
