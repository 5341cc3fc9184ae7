/*
 * rcache.c - the registration cache (first step: a pass-through, every get registers and every
 * put deregisters; the cache itself follows).
 */
#include <stdlib.h>
#include <string.h>

#include "util/rcache.h"

struct fy_rcache_region {
    uintptr_t start, end;
    unsigned access;
    _Alignas(16) unsigned char memh[];
};

struct fy_rcache {
    fy_rcache_params_t p;
    fy_rcache_opts_t opts;
    fy_rcache_stats_t st;
};

static const fy_config_field_t rcache_fields[] = {
    FY_CONFIG_FIELD("RCACHE", "y",
                    "Keep memory registrations for reuse (ofi rendezvous and RMA buffers); n: "
                    "register at every use and deregister after it.",
                    FY_CFG_BOOL, fy_rcache_opts_t, enable),
    FY_CONFIG_FIELD("RCACHE_MAX_BYTES", "1g",
                    "Bytes of registered memory a registration cache keeps; unused "
                    "registrations above it are released, least recently used first.",
                    FY_CFG_SIZE, fy_rcache_opts_t, max_bytes),
    FY_CONFIG_FIELD("RCACHE_MAX_ENTRIES", "4096",
                    "Registrations a registration cache keeps; unused ones above it are "
                    "released, least recently used first.",
                    FY_CFG_SIZE, fy_rcache_opts_t, max_entries),
};

const fy_config_table_t fy_rcache_config_table = {"rcache", "", rcache_fields,
                                                  sizeof(rcache_fields) / sizeof(rcache_fields[0])};

ferry_status_t fy_rcache_create(const fy_rcache_params_t *params, fy_rcache_t **rcache_p)
{
    if (params == NULL || rcache_p == NULL || params->reg == NULL || params->dereg == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_rcache_t *rc = calloc(1, sizeof(*rc));
    if (rc == NULL)
        return FERRY_ERR_NO_MEMORY;
    rc->p = *params;
    if (params->opts != NULL) {
        rc->opts = *params->opts;
    } else {
        ferry_status_t st = fy_config_read(&fy_rcache_config_table, &rc->opts);
        if (st != FERRY_OK) {
            free(rc);
            return st;
        }
    }
    *rcache_p = rc;
    return FERRY_OK;
}

void fy_rcache_destroy(fy_rcache_t *rcache)
{
    free(rcache);
}

ferry_status_t fy_rcache_get(fy_rcache_t *rc, void *addr, size_t len, unsigned access,
                             fy_rcache_region_t **region_p)
{
    if (rc == NULL || addr == NULL || len == 0 || region_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_rcache_region_t *r = calloc(1, sizeof(*r) + rc->p.memh_size);
    if (r == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_status_t st = rc->p.reg(rc->p.arg, addr, len, access, r->memh);
    if (st != FERRY_OK) {
        free(r);
        return st;
    }
    r->start = (uintptr_t)addr;
    r->end = r->start + len;
    r->access = access;
    rc->st.misses++;
    rc->st.regs++;
    *region_p = r;
    return FERRY_OK;
}

void fy_rcache_put(fy_rcache_t *rc, fy_rcache_region_t *r)
{
    rc->p.dereg(rc->p.arg, r->memh);
    rc->st.deregs++;
    free(r);
}

void *fy_rcache_region_memh(fy_rcache_region_t *region)
{
    return region->memh;
}

void fy_rcache_region_range(const fy_rcache_region_t *region, void **addr_p, size_t *len_p)
{
    *addr_p = (void *)region->start;
    *len_p = region->end - region->start;
}

int fy_rcache_is_caching(const fy_rcache_t *rcache)
{
    (void)rcache;
    return 0;
}

void fy_rcache_get_stats(fy_rcache_t *rcache, fy_rcache_stats_t *stats)
{
    *stats = rcache->st;
}

void fy_rcache_print(fy_rcache_t *rc, FILE *f)
{
    fprintf(f, "rcache %s: off\n", rc->p.name != NULL ? rc->p.name : "");
}
