/*
 * mem.c - memory registration and remote keys: ferry_mem_map / unmap / query, ferry_rkey_pack
 * / unpack / destroy, and the memory ferry allocates for the caller (FERRY_MEM_ALLOCATE).
 *
 * Registration is done twice on purpose: once in the context's own region table (so RMA
 * emulated over active messages is checked at the target exactly like a native transport's
 * would be), and once per transport that registers memory itself (shm, tcp, udp, ofi).  A
 * packed remote key carries both: the proto part and one part per transport, so a peer
 * whose endpoint uses any transport finds its piece.
 *
 * Memory ferry allocates is a memfd-backed shareable segment (util/shmem), so that the
 * shared-memory transport can let local peers map it and reach it with plain loads, stores
 * and atomics instead of system calls.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"
#include "util/shmem.h"

static void *mem_alloc_shared(size_t len)
{
    void *p = NULL;
    return fy_shmem_alloc(len, "ferry-mem", &p) == FERRY_OK ? p : NULL;
}

static void mem_free_shared(void *addr, size_t len)
{
    (void)len;
    fy_shmem_free(addr);
}

ferry_status_t ferry_mem_map(ferry_context_t *ctx, const ferry_mem_params_t *params,
                             ferry_mem_t **mem_p)
{
    if (ctx == NULL || params == NULL || mem_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    uint64_t known = FERRY_MEM_FIELD_ADDRESS | FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_ACCESS |
                     FERRY_MEM_FIELD_FLAGS;
    if ((params->field_mask & ~known) != 0 || !(params->field_mask & FERRY_MEM_FIELD_LENGTH) ||
        params->length == 0)
        return FERRY_ERR_INVALID_PARAM;
    unsigned flags = (params->field_mask & FERRY_MEM_FIELD_FLAGS) ? params->flags : 0;
    if (flags & ~(unsigned)FERRY_MEM_ALLOCATE)
        return FERRY_ERR_INVALID_PARAM;
    int alloc = (flags & FERRY_MEM_ALLOCATE) != 0;
    if (!alloc && (!(params->field_mask & FERRY_MEM_FIELD_ADDRESS) || params->address == NULL))
        return FERRY_ERR_INVALID_PARAM;
    unsigned access =
        (params->field_mask & FERRY_MEM_FIELD_ACCESS)
            ? params->access
            : (FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC);
    if (access &
        ~(unsigned)(FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC))
        return FERRY_ERR_INVALID_PARAM;

    ferry_mem_t *mem = calloc(1, sizeof(*mem));
    if (mem == NULL)
        return FERRY_ERR_NO_MEMORY;
    mem->length = params->length;
    mem->access = access;
    ferry_status_t st;
    if (alloc) {
        mem->address = mem_alloc_shared(params->length);
        if (mem->address == NULL) {
            st = FERRY_ERR_NO_MEMORY;
            goto err_free;
        }
        mem->allocated = 1;
    } else {
        mem->address = params->address;
    }
    st = fy_region_add(&ctx->regions, mem->address, mem->length, access, &mem->region);
    if (st != FERRY_OK)
        goto err_alloc;
    for (unsigned i = 0; i < ctx->ntls; i++) {
        const fy_tl_component_t *tl = ctx->tls[i].tl;
        if (tl->ops->mem_reg == NULL || tl->memh_size == 0)
            continue;
        mem->memh[i] = calloc(1, tl->memh_size);
        if (mem->memh[i] == NULL) {
            st = FERRY_ERR_NO_MEMORY;
            goto err_reg;
        }
        st = tl->ops->mem_reg(ctx->tls[i].md, mem->address, mem->length, access, mem->memh[i]);
        if (st != FERRY_OK) {
            fy_warn("transport %s could not register %zu bytes at %p: %s (emulated RMA only)",
                    tl->name, mem->length, mem->address, ferry_status_string(st));
            free(mem->memh[i]);
            mem->memh[i] = NULL;
        }
    }
    *mem_p = mem;
    return FERRY_OK;

err_reg:
    for (unsigned i = 0; i < ctx->ntls; i++)
        if (mem->memh[i] != NULL) {
            ctx->tls[i].tl->ops->mem_dereg(ctx->tls[i].md, mem->memh[i]);
            free(mem->memh[i]);
        }
    fy_region_remove(&ctx->regions, mem->region.id);
err_alloc:
    if (mem->allocated)
        mem_free_shared(mem->address, mem->length);
err_free:
    free(mem);
    return st;
}

ferry_status_t ferry_mem_unmap(ferry_context_t *ctx, ferry_mem_t *mem)
{
    if (ctx == NULL || mem == NULL)
        return FERRY_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < ctx->ntls; i++)
        if (mem->memh[i] != NULL) {
            ctx->tls[i].tl->ops->mem_dereg(ctx->tls[i].md, mem->memh[i]);
            free(mem->memh[i]);
        }
    fy_region_remove(&ctx->regions, mem->region.id);
    if (mem->allocated)
        mem_free_shared(mem->address, mem->length);
    free(mem);
    return FERRY_OK;
}

ferry_status_t ferry_mem_query(const ferry_mem_t *mem, void **address_p, size_t *length_p)
{
    if (mem == NULL)
        return FERRY_ERR_INVALID_PARAM;
    if (address_p != NULL)
        *address_p = mem->address;
    if (length_p != NULL)
        *length_p = mem->length;
    return FERRY_OK;
}

/*
 * Packed remote key:
 *   u32 magic | u32 access | u64 region id | u64 key | u64 base | u64 length | u8 ntl |
 *   ntl x { u8 name_len | name | u16 len | transport's packed rkey }
 */
typedef struct __attribute__((packed)) fy_rkey_wire {
    uint32_t magic;
    uint32_t access;
    uint64_t region_id, key, base, length;
    uint8_t ntl;
} fy_rkey_wire_t;

ferry_status_t ferry_rkey_pack(ferry_context_t *ctx, const ferry_mem_t *mem, void *buf, size_t *len)
{
    if (ctx == NULL || mem == NULL || len == NULL)
        return FERRY_ERR_INVALID_PARAM;
    size_t need = sizeof(fy_rkey_wire_t);
    unsigned ntl = 0;
    for (unsigned i = 0; i < ctx->ntls; i++)
        if (mem->memh[i] != NULL && ctx->tls[i].tl->ops->rkey_pack != NULL) {
            need += 1 + strlen(ctx->tls[i].tl->name) + 2 + ctx->tls[i].tl->rkey_packed_size;
            ntl++;
        }
    if (buf == NULL || *len < need) {
        *len = need;
        return FERRY_ERR_TRUNCATED;
    }
    fy_rkey_wire_t w = {FY_RKEY_MAGIC,
                        mem->access,
                        mem->region.id,
                        mem->region.key,
                        (uint64_t)(uintptr_t)mem->address,
                        mem->length,
                        (uint8_t)ntl};
    uint8_t *p = buf;
    memcpy(p, &w, sizeof(w));
    p += sizeof(w);
    for (unsigned i = 0; i < ctx->ntls; i++) {
        const fy_tl_component_t *tl = ctx->tls[i].tl;
        if (mem->memh[i] == NULL || tl->ops->rkey_pack == NULL)
            continue;
        uint8_t nl = (uint8_t)strlen(tl->name);
        *p++ = nl;
        memcpy(p, tl->name, nl);
        p += nl;
        uint16_t sz = (uint16_t)tl->rkey_packed_size;
        memcpy(p, &sz, 2);
        p += 2;
        ferry_status_t st = tl->ops->rkey_pack(ctx->tls[i].md, mem->memh[i], p);
        if (st != FERRY_OK)
            return st;
        p += sz;
    }
    *len = (size_t)(p - (uint8_t *)buf);
    return FERRY_OK;
}

ferry_status_t ferry_rkey_unpack(ferry_ep_t *ep, const void *buf, size_t len, ferry_rkey_t **rkey_p)
{
    FY_EP_GUARD(ep);
    if (ep == NULL || buf == NULL || rkey_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_rkey_wire_t w;
    if (len < sizeof(w))
        return FERRY_ERR_INVALID_PARAM;
    memcpy(&w, buf, sizeof(w));
    if (w.magic != FY_RKEY_MAGIC)
        return FERRY_ERR_INVALID_PARAM;
    ferry_rkey_t *rk = calloc(1, sizeof(*rk));
    if (rk == NULL)
        return FERRY_ERR_NO_MEMORY;
    rk->ep = ep;
    rk->region_id = w.region_id;
    rk->key = w.key;
    rk->base = w.base;
    rk->length = w.length;
    rk->access = w.access;
    const uint8_t *p = (const uint8_t *)buf + sizeof(w), *end = (const uint8_t *)buf + len;
    fy_lane_t *lane = &ep->lanes[FY_LANE_RMA];
    for (unsigned i = 0; i < w.ntl; i++) {
        if (p >= end || p + 1 + *p + 2 > end)
            goto bad;
        uint8_t nl = *p++;
        char name[32];
        if (nl >= sizeof(name))
            goto bad;
        memcpy(name, p, nl);
        name[nl] = '\0';
        p += nl;
        uint16_t sz;
        memcpy(&sz, p, 2);
        p += 2;
        if (p + sz > end)
            goto bad;
        if (rk->tl == NULL && lane->iface != NULL && strcmp(lane->iface->tl->name, name) == 0 &&
            sz == lane->iface->tl->rkey_packed_size && lane->iface->tl->rkey_size != 0) {
            const fy_tl_component_t *tl = lane->iface->tl;
            rk->tl_rkey = calloc(1, tl->rkey_size);
            if (rk->tl_rkey == NULL) {
                free(rk);
                return FERRY_ERR_NO_MEMORY;
            }
            if (tl->ops->rkey_unpack(lane->iface->ctl->md, p, rk->tl_rkey) == FERRY_OK) {
                rk->tl = tl;
                rk->md = lane->iface->ctl->md;
            } else {
                free(rk->tl_rkey);
                rk->tl_rkey = NULL;
            }
        }
        p += sz;
    }
    *rkey_p = rk;
    return FERRY_OK;
bad:
    ferry_rkey_destroy(rk); /* the transport may have no rkey_release (self) */
    return FERRY_ERR_INVALID_PARAM;
}

void ferry_rkey_destroy(ferry_rkey_t *rk)
{
    if (rk == NULL)
        return;
    if (rk->tl_rkey != NULL) {
        if (rk->tl->ops->rkey_release != NULL)
            rk->tl->ops->rkey_release(rk->md, rk->tl_rkey);
        free(rk->tl_rkey);
    }
    free(rk);
}
