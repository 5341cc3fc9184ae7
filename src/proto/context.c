/*
 * context.c - the context: one per process.  It reads the FERRY_* configuration, opens a
 * memory domain of every selected transport and lists its devices, and owns memory
 * registration and remote keys.
 *
 * Registration is done twice on purpose: once in the context's own region table (so RMA
 * emulated over active messages is checked at the target exactly like a native transport's
 * would be), and once per transport that registers memory itself (shm, tcp, udp, ofi).  A
 * packed remote key carries both: the proto part and one part per transport, so a peer
 * whose endpoint uses any transport finds its piece.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include "proto/proto_int.h"

static const char *const wait_modes[] = {"spin", "adaptive", "block", NULL};
static const char *const rndv_schemes[] = {"auto", "get", "am", NULL}; /* FY_TAG_SCHEME_* */

static const fy_config_field_t ctx_fields[] = {
    FY_CONFIG_FIELD("TLS", "all",
                    "Transports to use, comma-separated, in preference order (self, shm, udp, "
                    "tcp, ofi), or 'all'; a leading ^ excludes the listed ones instead.",
                    FY_CFG_LIST, fy_ctx_opts_t, tls),
    FY_CONFIG_ENUM_FIELD("WAIT", "adaptive",
                         "How an idle worker waits in ferry_worker_wait: spin (lowest latency, "
                         "burns a core), adaptive (spin, then yield, then sleep), block (sleep "
                         "at once).",
                         fy_ctx_opts_t, wait_mode, wait_modes),
    FY_CONFIG_FIELD("WAIT_SPIN", "20us", "Adaptive wait: how long to spin before yielding.",
                    FY_CFG_TIME, fy_ctx_opts_t, spin_ns),
    FY_CONFIG_FIELD("WAIT_YIELD", "100us",
                    "Adaptive wait: how long to yield the core before sleeping on the event fd.",
                    FY_CFG_TIME, fy_ctx_opts_t, yield_ns),
    FY_CONFIG_FIELD("STATS", "n", "Print per-endpoint statistics when an endpoint closes.",
                    FY_CFG_BOOL, fy_ctx_opts_t, stats),
    FY_CONFIG_FIELD("RMA_EMULATE", "n",
                    "Emulate put, get and atomics over active messages even where a transport "
                    "does them natively (for testing and comparison).",
                    FY_CFG_BOOL, fy_ctx_opts_t, rma_emulate),
    FY_CONFIG_FIELD("TAG_RNDV_THRESH", "auto",
                    "Tagged messages larger than this use rendezvous (the data moves only once "
                    "the receiver has matched it); smaller ones go eager.  auto: per endpoint, "
                    "the largest message its lane sends in one buffered copy (at most 64k) "
                    "where the rendezvous reads by get at memory speed (shm: 8k), 64k elsewhere.",
                    FY_CFG_STRING, fy_ctx_opts_t, tag_rndv_thresh_str),
    FY_CONFIG_ENUM_FIELD("TAG_RNDV_SCHEME", "auto",
                         "How a rendezvous moves the data: get (the receiver reads the sender's "
                         "memory straight into its buffer, where the transport can), am (the "
                         "sender sends it as a message after the receiver's CTS), or auto (get, "
                         "and am to a peer that once could not read us).",
                         fy_ctx_opts_t, tag_rndv_scheme, rndv_schemes),
    FY_CONFIG_FIELD("MAX_QUEUED", "64m",
                    "Bytes an endpoint may hold queued (copies and operations waiting for a "
                    "peer that does not keep up) before sends, tagged sends and puts on it "
                    "return FERRY_ERR_NO_RESOURCE, taking nothing, until progress drains it.",
                    FY_CFG_SIZE, fy_ctx_opts_t, max_queued),
    FY_CONFIG_FIELD("JOB_KEY", "",
                    "A job key carried by network transports; datagrams and connections with "
                    "another key are refused.  Set by the launcher; empty = a fixed default.",
                    FY_CFG_STRING, fy_ctx_opts_t, job_key),
    FY_CONFIG_FIELD("WIREUP_TIMEOUT", "2s",
                    "A new endpoint's lane that has not answered its wireup by then is given "
                    "up and the next best lane tried (only where there is another one, on a "
                    "network device); the endpoint fails when every lane did.",
                    FY_CFG_TIME, fy_ctx_opts_t, wireup_timeout_ns),
    FY_CONFIG_FIELD("CM", "all",
                    "Connection managers to use, comma-separated (direct, am, oob, sockaddr), or "
                    "'all'; a leading ^ excludes the listed ones instead.  Without sockaddr, "
                    "listeners and endpoints by ip:port are refused.",
                    FY_CFG_LIST, fy_ctx_opts_t, cms),
    FY_CONFIG_FIELD("CM_TIMEOUT", "10s",
                    "sockaddr: how long a client waits for a listener's answer, and how long a "
                    "listener keeps an accepted connection that has not sent its request.",
                    FY_CFG_TIME, fy_ctx_opts_t, cm_timeout_ns),
};

const fy_config_table_t fy_ctx_config_table = {"context", "", ctx_fields,
                                               sizeof(ctx_fields) / sizeof(ctx_fields[0])};

/* Variables read outside any table (logging, bootstrap, launcher, tests). */
static const char *const extra_names[] = {
    "FERRY_LOG_LEVEL",
    "FERRY_LOG_FILE",
    "FERRY_BOOT",
    "FERRY_BOOT_ADDR",
    "FERRY_BOOT_TIMEOUT",
    "FERRY_RANK",
    "FERRY_SIZE",
    "FERRY_LOCAL_RANK",
    "FERRY_LOCAL_SIZE",
    "FERRY_BOOT_ID",
    "FERRY_HOSTNAME",
    "FERRY_BOOT_SECRET",
    NULL,
};

static uint64_t hash_string(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return fy_hash_mix64(h);
}

static ferry_status_t check_tls(const fy_config_list_t *l)
{
    for (unsigned i = 0; i < l->count; i++) {
        if (strcasecmp(l->names[i], "all") == 0 && !l->exclude)
            continue;
        int known = 0;
        static const char *const all[] = {"self", "shm", "udp", "tcp", "ofi"};
        for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
            known |= strcmp(all[k], l->names[i]) == 0;
        if (!known) {
            fy_error("FERRY_TLS: '%s' is not a transport; accepted: self, shm, udp, tcp, ofi, "
                     "all (a leading ^ excludes)",
                     l->names[i]);
            return FERRY_ERR_BAD_CONFIG;
        }
        if (fy_tl_find(l->names[i]) == NULL)
            fy_warn("FERRY_TLS: transport '%s' is not built into this library", l->names[i]);
    }
    return FERRY_OK;
}

static int tl_selected(const fy_config_list_t *l, const char *name)
{
    if (l->exclude)
        return fy_config_list_selects(l, name);
    for (unsigned i = 0; i < l->count; i++)
        if (strcasecmp(l->names[i], "all") == 0 || strcmp(l->names[i], name) == 0)
            return 1;
    return 0;
}

ferry_status_t ferry_context_create(const ferry_context_params_t *params,
                                    ferry_context_t **context_p)
{
    fy_log_init();
    if (context_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    *context_p = NULL;
    uint64_t known = FERRY_CONTEXT_FIELD_FEATURES | FERRY_CONTEXT_FIELD_NAME;
    if (params != NULL && (params->field_mask & ~known) != 0) {
        fy_error("ferry_context_create: unknown field_mask bits 0x%llx",
                 (unsigned long long)(params->field_mask & ~known));
        return FERRY_ERR_INVALID_PARAM;
    }
    ferry_context_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return FERRY_ERR_NO_MEMORY;
    ctx->features = FERRY_FEATURE_AM | FERRY_FEATURE_TAG | FERRY_FEATURE_RMA | FERRY_FEATURE_AMO;
    if (params != NULL && (params->field_mask & FERRY_CONTEXT_FIELD_FEATURES))
        ctx->features = params->features;
    snprintf(ctx->name, sizeof(ctx->name), "%s",
             params != NULL && (params->field_mask & FERRY_CONTEXT_FIELD_NAME) && params->name
                 ? params->name
                 : "ferry");
    pthread_mutex_init(&ctx->lock, NULL);

    ferry_status_t st = fy_config_read(&fy_ctx_config_table, &ctx->opts);
    if (st != FERRY_OK)
        goto err_free;
    st = check_tls(&ctx->opts.tls);
    if (st != FERRY_OK)
        goto err_opts;
    st = fy_cm_set_init(&ctx->cms, &ctx->opts.cms);
    if (st != FERRY_OK)
        goto err_opts;
    ctx->opts.tag_rndv_thresh = FY_TAG_THRESH_AUTO;
    if (strcasecmp(ctx->opts.tag_rndv_thresh_str, "auto") != 0 &&
        fy_config_parse_size(ctx->opts.tag_rndv_thresh_str, &ctx->opts.tag_rndv_thresh) !=
            FERRY_OK) {
        fy_error("FERRY_TAG_RNDV_THRESH=%s: use auto or a size (64k, 1m, inf)",
                 ctx->opts.tag_rndv_thresh_str);
        st = FERRY_ERR_BAD_CONFIG;
        goto err_opts;
    }
    ctx->job_key = (ctx->opts.job_key != NULL && ctx->opts.job_key[0] != '\0')
                       ? hash_string(ctx->opts.job_key)
                       : 0x66657272794b3031ull;
    st = fy_region_table_init(&ctx->regions);
    if (st != FERRY_OK)
        goto err_opts;

    /* Open every selected transport, in the order of FERRY_TLS when it lists them. */
    const fy_config_table_t *tables[FY_MAX_TLS + 1];
    size_t ntables = 0;
    tables[ntables++] = &fy_ctx_config_table;
    for (size_t i = 0; i < fy_tl_num_components && ctx->ntls < FY_MAX_TLS; i++) {
        const fy_tl_component_t *tl = fy_tl_components[i];
        if (tl->config != NULL && ntables < FY_MAX_TLS + 1)
            tables[ntables++] = tl->config;
        if (!tl_selected(&ctx->opts.tls, tl->name))
            continue;
        fy_ctx_tl_t *ctl = &ctx->tls[ctx->ntls];
        ctl->tl = tl;
        st = tl->ops->md_open(tl, &ctl->md);
        if (st == FERRY_ERR_BAD_CONFIG)
            goto err_mds;
        if (st != FERRY_OK) {
            fy_info("transport %s unavailable: %s", tl->name, ferry_status_string(st));
            continue;
        }
        st = tl->ops->query_devices(ctl->md, ctl->devs, FY_MAX_DEVS, &ctl->ndevs);
        if (st != FERRY_OK || ctl->ndevs == 0) {
            fy_info("transport %s has no usable device (%s)", tl->name, ferry_status_string(st));
            tl->ops->md_close(ctl->md);
            continue;
        }
        ctl->index = ctx->ntls++;
    }
    fy_config_warn_unused(tables, ntables, extra_names);
    if (ctx->ntls == 0) {
        fy_error("no transport is usable (FERRY_TLS selects none that works here)");
        st = FERRY_ERR_NO_DEVICE;
        goto err_mds;
    }
    *context_p = ctx;
    return FERRY_OK;

err_mds:
    for (unsigned i = 0; i < ctx->ntls; i++)
        ctx->tls[i].tl->ops->md_close(ctx->tls[i].md);
    fy_region_table_destroy(&ctx->regions);
err_opts:
    fy_cm_set_finalize(&ctx->cms);
    fy_config_release(&fy_ctx_config_table, &ctx->opts);
err_free:
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return st;
}

void ferry_context_destroy(ferry_context_t *ctx)
{
    if (ctx == NULL)
        return;
    if (ctx->nworkers != 0)
        fy_warn("ferry_context_destroy: %u worker(s) still exist", ctx->nworkers);
    for (unsigned i = 0; i < ctx->ntls; i++)
        ctx->tls[i].tl->ops->md_close(ctx->tls[i].md);
    fy_region_table_destroy(&ctx->regions);
    fy_cm_set_finalize(&ctx->cms);
    fy_config_release(&fy_ctx_config_table, &ctx->opts);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

void ferry_config_print(const ferry_context_t *ctx, void *file)
{
    FILE *f = file != NULL ? file : stdout;
    if (ctx == NULL)
        return;
    fy_config_print(&fy_ctx_config_table, &ctx->opts, f);
    for (size_t i = 0; i < fy_config_num_global_tables; i++) {
        const fy_config_table_t *t = fy_config_global_tables[i];
        fprintf(f, "\n# %s\n", t->component);
        for (size_t k = 0; k < t->nfields; k++)
            fprintf(f, "FERRY_%s%s (default %s)\n    %s\n", t->prefix, t->fields[k].name,
                    t->fields[k].dflt, t->fields[k].doc);
    }
    for (size_t i = 0; i < fy_tl_num_components; i++)
        if (fy_tl_components[i]->config != NULL) {
            /* A transport's options live in its md; print the defaults of unopened ones. */
            fprintf(f, "\n# transport %s\n", fy_tl_components[i]->name);
            const fy_config_table_t *t = fy_tl_components[i]->config;
            for (size_t k = 0; k < t->nfields; k++)
                fprintf(f, "FERRY_%s%s (default %s)\n    %s\n", t->prefix, t->fields[k].name,
                        t->fields[k].dflt, t->fields[k].doc);
        }
}

uint64_t fy_context_job_key(const ferry_context_t *ctx)
{
    return ctx->job_key;
}

const char *ferry_version(void)
{
    return "0.1.0";
}

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                       */
/* ------------------------------------------------------------------------------------------ */

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
        mem->address = fy_mem_alloc_shared(params->length);
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
        fy_mem_free_shared(mem->address, mem->length);
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
        fy_mem_free_shared(mem->address, mem->length);
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
