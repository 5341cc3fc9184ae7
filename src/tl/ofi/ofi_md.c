/*
 * ofi_md.c - the ofi transport's component: its FERRY_OFI_* configuration, the choice of
 * provider, the memory domain (registration and remote keys) and the ops table.
 *
 * PROVIDER.  fi_getinfo lists the FI_EP_RDM providers with FI_MSG and FI_RMA; FERRY_OFI_PROVIDER
 * (an include list, or ^exclude) filters them by full name ("tcp;ofi_rxm") or short name
 * ("rxm", "rxd", "shm"), and the first in preference order is used: native providers (a NIC's
 * own) first, then shm, then layered software ones (core;ofi_util), the sockets
 * proof-of-concept last.  One provider per md, as btl/ofi does.  FI_ATOMIC is asked for when
 * the provider has it; a provider bound by IP address is bound to 127.0.0.1 (FI_SOURCE) so
 * ferry's ofi traffic stays on this host, which is all this transport claims to reach.
 *
 * FLUSH.  Where the provider orders a read after earlier sends and writes (FI_ORDER_RAW |
 * FI_ORDER_RAS: rxm, rxd), a flush reads 8 bytes from the peer and its completion proves the
 * peer took everything before it; rxm completes an eager send with FI_DELIVERY_COMPLETE before
 * the peer's process has seen it, so the read is preferred.  Elsewhere (shm) every operation
 * is posted with FI_DELIVERY_COMPLETE, where offered.
 *
 * MEMORY.  The hints accept FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_MR_LOCAL
 * (descriptors for every local buffer, ofi_iface.c) and FI_MR_ENDPOINT (one context, whose
 * endpoint every registration binds to); FERRY_OFI_MR_FORCE acts on them unasked: without
 * VIRT_ADDR a remote address is an offset from the registration's base; without PROV_KEY
 * ferry requests its own keys (a counter per domain).  The rkey carries base, length, key and
 * rights, so the initiator refuses an access outside the region or without the right at once
 * (ACCESS_DENIED); a key the target no longer has is refused by the target's provider.
 */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tl/ofi/ofi.h"
#include "util/log.h"
#include "util/netif.h"
#include "util/status.h"

#define FY_OFI_API FI_VERSION(1, 14)

static const fy_config_field_t ofi_config_fields[] = {
    FY_CONFIG_FIELD("PROVIDER", "",
                    "libfabric providers to use: comma-separated full names (tcp;ofi_rxm) or "
                    "short names (rxm, rxd, shm); a leading ^ excludes them instead (order: "
                    "native first, then shm, then layered software ones).  Empty: native (NIC) "
                    "providers only, and libfabric is not loaded on a host with no NIC device; the "
                    "software ones are used when named.",
                    FY_CFG_STRING, fy_ofi_config_t, provider),
    FY_CONFIG_FIELD("TX_OPS", "256",
                    "Operations an interface may have in flight before sends return "
                    "NO_RESOURCE.",
                    FY_CFG_UINT, fy_ofi_config_t, tx_ops),
    FY_CONFIG_FIELD("PEER_CHECK", "50ms",
                    "How often each endpoint's peer process is checked for liveness (the "
                    "transport reaches this host only).",
                    FY_CFG_TIME, fy_ofi_config_t, peer_check),
    FY_CONFIG_FIELD("RMA_TIMEOUT", "30s",
                    "A put, get, atomic or flush read the provider has neither completed nor "
                    "failed after this long fails with TIMED_OUT (udp;ofi_rxd retries an access "
                    "with a key the target closed for ever).  0: wait for ever.",
                    FY_CFG_TIME, fy_ofi_config_t, rma_timeout),
    FY_CONFIG_FIELD("MULTI_RECV", "y", "Receive into FI_MULTI_RECV buffers where offered.",
                    FY_CFG_BOOL, fy_ofi_config_t, multi_recv),
    FY_CONFIG_FIELD("DELIVERY_COMPLETE", "y",
                    "Where the provider does not order reads after sends and writes (for the "
                    "flush's read), ask for FI_DELIVERY_COMPLETE if it offers it.",
                    FY_CFG_BOOL, fy_ofi_config_t, delivery),
    FY_CONFIG_FIELD("ATOMICS", "y",
                    "Use the provider's atomics where fi_atomicvalid says so; n: proto "
                    "emulates every atomic over active messages.",
                    FY_CFG_BOOL, fy_ofi_config_t, atomics),
    FY_CONFIG_FIELD("CONTEXTS", "16",
                    "Contexts of the provider's domain, one per worker that uses ofi (each its "
                    "own endpoint, or a scalable endpoint's transmit and receive context (see "
                    "SEP), and completion queue, so the workers of one process run in "
                    "parallel); a worker past them gets no ofi interface.  Above 1 the domain "
                    "is FI_THREAD_SAFE.",
                    FY_CFG_UINT, fy_ofi_config_t, contexts),
    FY_CONFIG_FIELD("WAIT_FD", "y",
                    "Give the completion queue a wait fd (FI_WAIT_FD) so a worker can sleep "
                    "until the provider has work; n, or a provider without one: sleep in "
                    "naps of FERRY_OFI_WAIT_POLL.",
                    FY_CFG_BOOL, fy_ofi_config_t, wait_fd),
    FY_CONFIG_FIELD("WAIT_POLL", "1ms",
                    "Where the provider gives no wait fd: how long a sleeping worker sleeps "
                    "before it progresses again (the latency a sleeper may add).",
                    FY_CFG_TIME, fy_ofi_config_t, wait_poll),
    FY_CONFIG_FIELD("MR_FORCE", "",
                    "Memory registration modes to act on even where the provider does not ask "
                    "for them (local: descriptors for every local buffer; endpoint: "
                    "registrations bound to the endpoint; allocated): for tests.",
                    FY_CFG_STRING, fy_ofi_config_t, mr_force),
    FY_CONFIG_FIELD("RNDV_THRESH", "0",
                    "Active messages above this size (header included; never above the eager "
                    "size, 64 KiB, 16 KiB over rxm) go by rendezvous: the receiver fi_reads the "
                    "sender's buffer.  inf: never (proto sends larger AMs as fragments).  0: "
                    "the provider's default, 64 KiB, and never over rxd (its reads are slower "
                    "than its messages) nor sockets (its thread serves reads after a forced "
                    "close).",
                    FY_CFG_SIZE, fy_ofi_config_t, rndv_thresh),
    FY_CONFIG_ENUM_FIELD("SEP", "auto",
                         "Several contexts on one scalable endpoint (fi_scalable_ep, a transmit "
                         "and a receive context per worker) where the provider offers them: auto "
                         "(with more than one context), on (also for one; a warning where not "
                         "offered), off (each worker its own endpoint).",
                         fy_ofi_config_t, sep, fy_ofi_sep_modes),
    FY_CONFIG_FIELD("LATENCY", "0",
                    "One-way latency in ns reported to lane selection; 0 = built-in estimate.",
                    FY_CFG_DOUBLE, fy_ofi_config_t, latency_ns),
    FY_CONFIG_FIELD("BANDWIDTH", "0",
                    "Bandwidth in bytes/s reported to lane selection; 0 = built-in estimate.",
                    FY_CFG_DOUBLE, fy_ofi_config_t, bandwidth),
};

const fy_config_table_t fy_ofi_config_table = {
    .component = "ofi",
    .prefix = "OFI_",
    .fields = ofi_config_fields,
    .nfields = FY_ARRAY_SIZE(ofi_config_fields),
};

ferry_status_t fy_ofi_status(int e)
{
    if (e < 0)
        e = -e;
    switch (e) {
    case 0:
        return FERRY_OK;
    case FI_EAGAIN:
        return FERRY_ERR_NO_RESOURCE;
    case FI_EACCES:
    case FI_EPERM:
    case FI_EKEYREJECTED:
    case FI_EFAULT:
        return FERRY_ERR_ACCESS_DENIED;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case EPIPE:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
        return FERRY_ERR_CONNECTION_RESET;
    case FI_ETIMEDOUT:
        return FERRY_ERR_ENDPOINT_TIMEOUT;
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_EADDRNOTAVAIL:
        return FERRY_ERR_UNREACHABLE;
    case FI_ECANCELED:
        return FERRY_ERR_CANCELED;
    case FI_ENOMEM:
        return FERRY_ERR_NO_MEMORY;
    case FI_EINVAL:
        return FERRY_ERR_INVALID_PARAM;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
    case FI_ENODATA:
        return FERRY_ERR_UNSUPPORTED;
    case FI_ETRUNC:
    case FI_EMSGSIZE:
        return FERRY_ERR_MESSAGE_TRUNCATED;
    default:
        return FERRY_ERR_IO;
    }
}

int fy_ofi_virt(const fy_ofi_md_t *md)
{
    return md->mrdom.mode.virt_addr;
}

/* "tcp;ofi_rxm" -> "rxm", "shm" -> "shm" */
static void short_name(const char *prov, char *out, size_t len)
{
    const char *p = strrchr(prov, ';');
    p = p != NULL ? p + 1 : prov;
    if (strncmp(p, "ofi_", 4) == 0)
        p += 4;
    size_t n = strnlen(p, len - 1); /* a longer name is cut, as a display name may be */
    memcpy(out, p, n);
    out[n] = '\0';
}

static int prov_rank(const char *prov)
{
    if (strcmp(prov, "sockets") == 0 || strcmp(prov, "net") == 0)
        return 3;
    if (strchr(prov, ';') != NULL)
        return 2;
    if (strcmp(prov, "shm") == 0)
        return 1;
    return 0;
}

static struct fi_info *base_hints(const char *prov, uint64_t caps, int delivery, int raw,
                                  enum fi_threading threading)
{
    struct fi_info *h = fi_allocinfo();
    if (h == NULL)
        return NULL;
    h->caps = caps;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->ep_attr->type = FI_EP_RDM;
    /* the modes ofi_mr serves, FI_MR_LOCAL and FI_MR_ENDPOINT included: the data path passes
     * descriptors for local buffers and binds registrations to the (one) endpoint */
    h->domain_attr->mr_mode = fy_ofi_mr_mode_hints();
    h->domain_attr->threading = threading;
    uint64_t order = FI_ORDER_SAS | (raw ? FI_ORDER_RAW | FI_ORDER_RAS : 0);
    h->tx_attr->msg_order = order;
    h->rx_attr->msg_order = order;
    if (delivery)
        h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    if (prov != NULL)
        h->fabric_attr->prov_name = strdup(prov);
    return h;
}

/* The fi_info for one provider, bound to 127.0.0.1 where it takes an IP address. */
static struct fi_info *provider_info(const char *prov, uint64_t caps, int delivery, int raw,
                                     enum fi_threading threading)
{
    struct fi_info *h = base_hints(prov, caps, delivery, raw, threading), *info = NULL;
    if (h == NULL)
        return NULL;
    int ret = fi_getinfo(FY_OFI_API, NULL, NULL, 0, h, &info);
    if (ret == 0 && (info->addr_format == FI_SOCKADDR_IN || info->addr_format == FI_SOCKADDR)) {
        struct fi_info *lo = NULL;
        h->addr_format = FI_SOCKADDR_IN;
        if (fi_getinfo(FY_OFI_API, "127.0.0.1", NULL, FI_SOURCE, h, &lo) == 0) {
            fi_freeinfo(info);
            info = lo;
        }
    }
    fi_freeinfo(h);
    if (ret != 0)
        return NULL;
    /* the first entry of this provider only */
    struct fi_info *one = fi_dupinfo(info);
    fi_freeinfo(info);
    return one;
}

/* Every RDM provider with FI_MSG | FI_RMA that the filter admits, in preference order. */
typedef struct prov_cand {
    char name[64];
    int rank;
} prov_cand_t;

static unsigned list_providers(const char *filter, prov_cand_t *out, unsigned max)
{
    fy_config_list_t list, *lp = NULL;
    if (filter != NULL && filter[0] != '\0') {
        if (fy_config_parse_list(filter, &list) != FERRY_OK)
            return 0;
        lp = &list;
    }
    struct fi_info *h = base_hints(NULL, FI_MSG | FI_RMA, 0, 0, FI_THREAD_DOMAIN), *info = NULL;
    unsigned n = 0;
    if (h != NULL && fi_getinfo(FY_OFI_API, NULL, NULL, 0, h, &info) == 0) {
        for (struct fi_info *i = info; i != NULL; i = i->next) {
            const char *p = i->fabric_attr->prov_name;
            char sn[32];
            short_name(p, sn, sizeof(sn));
            if (lp != NULL) {
                int in = fy_config_list_index(lp, p) >= 0 || fy_config_list_index(lp, sn) >= 0;
                int sel = lp->exclude
                              ? fy_config_list_selects(lp, p) && fy_config_list_selects(lp, sn)
                              : in;
                if (!sel)
                    continue;
            }
            int dup = 0;
            for (unsigned k = 0; k < n; k++)
                dup |= strcmp(out[k].name, p) == 0;
            if (dup || n == max)
                continue;
            snprintf(out[n].name, sizeof(out[n].name), "%s", p);
            out[n].rank = prov_rank(p);
            /* an explicit include list keeps its own order */
            if (lp != NULL && !lp->exclude) {
                int a = fy_config_list_index(lp, p), b = fy_config_list_index(lp, sn);
                out[n].rank = a >= 0 ? a : b;
            }
            n++;
        }
        fi_freeinfo(info);
    }
    fi_freeinfo(h);
    if (lp != NULL)
        fy_config_list_release(lp);
    for (unsigned i = 1; i < n; i++) /* stable insertion sort by rank */
        for (unsigned j = i; j > 0 && out[j].rank < out[j - 1].rank; j--) {
            prov_cand_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

/* The best info for one provider: reads ordered after sends and writes (the flush's read)
 * first, else delivery completion; atomics where it has them with that. */
static struct fi_info *best_info(const char *prov, int want_delivery, int *delivery,
                                 enum fi_threading threading)
{
    static const uint64_t caps[] = {FI_MSG | FI_RMA | FI_ATOMIC, FI_MSG | FI_RMA};
    for (int raw = 1; raw >= 0; raw--)
        for (size_t c = 0; c < 2; c++)
            for (int d = want_delivery && !raw ? 1 : 0; d >= 0; d--) {
                struct fi_info *i = provider_info(prov, caps[c], d, raw, threading);
                uint64_t ras = FI_ORDER_RAW | FI_ORDER_RAS;
                if (i != NULL && raw && (i->tx_attr->msg_order & ras) != ras) {
                    fi_freeinfo(i); /* it did not promise the order asked for */
                    i = NULL;
                }
                if (i != NULL) {
                    *delivery = d;
                    return i;
                }
            }
    return NULL;
}

/* Is there a device a native (NIC) provider could drive?  Without FERRY_OFI_PROVIDER (and
 * without libfabric's own FI_PROVIDER) only those are used, and a host with none is not worth
 * libfabric's start: its first fi_getinfo initialises every provider it has, which here costs
 * 0.3 s of each process's start (mostly its verbs/efa probes reading /proc/kallsyms twice).
 * The devices: RDMA devices (verbs, efa, usnic, psm3, ucx) in /sys/class/infiniband, Omni-Path
 * and TrueScale (psm2, opx, psm) as /dev/hfi1_* and /dev/ipath*, Slingshot (cxi) as /dev/cxi*,
 * Aries (gni) as /dev/kgni*. */
static int nic_device_present(void)
{
    static const char *const dev_prefix[] = {"hfi1_", "ipath", "cxi", "kgni"};
    int found = 0;
    DIR *d = opendir("/sys/class/infiniband");
    if (d != NULL) {
        for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
            found = e->d_name[0] != '.';
        closedir(d);
    }
    if (!found && (d = opendir("/dev")) != NULL) {
        for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
            for (size_t i = 0; i < sizeof(dev_prefix) / sizeof(dev_prefix[0]); i++)
                found |= strncmp(e->d_name, dev_prefix[i], strlen(dev_prefix[i])) == 0;
        closedir(d);
    }
    return found;
}

/* Does a worker skip libfabric altogether?  Yes when neither FERRY_OFI_PROVIDER (`provider`)
 * nor FI_PROVIDER names a provider and the host has no NIC device. */
static int probe_skipped(const char *provider)
{
    const char *fi = getenv("FI_PROVIDER");
    return (provider == NULL || provider[0] == '\0') && (fi == NULL || fi[0] == '\0') &&
           !nic_device_present();
}

/* For ferry_info: every RDM provider found, with what ferry would use of it (declared in
 * tools/ferry_info.c, which includes no libfabric header). */
void fy_ofi_print_providers(FILE *f);
void fy_ofi_print_providers(FILE *f)
{
    prov_cand_t c[16];
    unsigned n = list_providers(NULL, c, 16);
    fprintf(f, "  libfabric %u.%u: %u RDM provider%s with FI_MSG and FI_RMA (preference order)\n",
            FI_MAJOR(fi_version()), FI_MINOR(fi_version()), n, n == 1 ? "" : "s");
    if (!nic_device_present())
        fprintf(f, "  no NIC device on this host: a worker opens the software providers below "
                   "only when FERRY_OFI_PROVIDER names them, and without it does not load "
                   "libfabric\n");
    for (unsigned i = 0; i < n; i++) {
        int d = 0;
        struct fi_info *info = best_info(c[i].name, 1, &d, FI_THREAD_DOMAIN);
        char sn[32], mb[160];
        short_name(c[i].name, sn, sizeof(sn));
        if (info == NULL) {
            fprintf(f, "    %-14s (%s) no usable endpoint\n", c[i].name, sn);
            continue;
        }
        fy_ofi_mr_mode_t mode;
        char why[160] = "";
        int ok = fy_ofi_mr_mode_init(info, &mode, why, sizeof(why)) == FERRY_OK;
        uint64_t ras = FI_ORDER_RAW | FI_ORDER_RAS;
        fprintf(f,
                "    %-14s device %-8s %s%s, inject %zu B, max msg %s, iov %zu, domain %s\n"
                "                   mr_mode %s%s%s; flush by %s\n",
                c[i].name, sn, (info->caps & FI_ATOMIC) ? "atomics" : "no atomics",
                (info->caps & FI_MULTI_RECV) ? ", multi-recv" : "", info->tx_attr->inject_size,
                info->ep_attr->max_msg_size >= (1ull << 40) ? "unlimited" : "limited",
                info->tx_attr->iov_limit, info->domain_attr->name,
                fy_ofi_mr_mode_str(info->domain_attr->mr_mode, mb, sizeof(mb)),
                ok ? "" : " REFUSED: ", ok ? "" : why,
                (info->tx_attr->msg_order & ras) == ras ? "a read after writes (FI_ORDER_RAW|RAS)"
                : d                                     ? "FI_DELIVERY_COMPLETE"
                                                        : "local completion only");
        fy_ofi_sep_print_provider(f, info); /* SEP hook */
        fi_freeinfo(info);
    }
}

static ferry_status_t ofi_md_open(const fy_tl_component_t *tl, fy_tl_md_t **md_p)
{
    fy_ofi_md_t *md = calloc(1, sizeof(*md));
    if (md == NULL)
        return FERRY_ERR_NO_MEMORY;
    md->super.component = tl;
    pthread_mutex_init(&md->rc_lock, NULL);
    ferry_status_t st = fy_config_read(&fy_ofi_config_table, &md->cfg);
    if (st != FERRY_OK)
        goto err_free;
    if (md->cfg.wait_poll < 1000 || md->cfg.wait_poll > 10 * 1000000000ull) {
        fy_error("FERRY_OFI_WAIT_POLL is out of range: use 1us to 10s");
        st = FERRY_ERR_BAD_CONFIG;
        goto err_cfg;
    }
    if (md->cfg.contexts < 1 || md->cfg.contexts > 1024) {
        fy_error("FERRY_OFI_CONTEXTS=%lu is out of range: use 1 to 1024", md->cfg.contexts);
        st = FERRY_ERR_BAD_CONFIG;
        goto err_cfg;
    }
    if (md->cfg.tx_ops < 4 || md->cfg.tx_ops > 65536) {
        fy_error("FERRY_OFI_TX_OPS=%lu is out of range: use 4 to 65536", md->cfg.tx_ops);
        st = FERRY_ERR_BAD_CONFIG;
        goto err_cfg;
    }
    if (md->cfg.provider != NULL && md->cfg.provider[0] != '\0') {
        fy_config_list_t l;
        if (fy_config_parse_list(md->cfg.provider, &l) != FERRY_OK) {
            fy_error("FERRY_OFI_PROVIDER=%s is not a list of provider names", md->cfg.provider);
            st = FERRY_ERR_BAD_CONFIG;
            goto err_cfg;
        }
        fy_config_list_release(&l);
    }
    /* No NIC device and nothing named: the md opens with no device, like tcp with no
     * interface, and libfabric is not loaded */
    if (probe_skipped(md->cfg.provider)) {
        fy_debug("ofi: no NIC device on this host, and FERRY_OFI_PROVIDER names no software "
                 "provider: libfabric is not opened");
        md->ncontexts = 1;
        if ((md->ctx_busy = calloc(1, 1)) == NULL) {
            st = FERRY_ERR_NO_MEMORY;
            goto err_cfg;
        }
        *md_p = &md->super;
        return FERRY_OK;
    }
    if (fy_ofi_dl_load() != 0) {
        fy_debug("ofi: %s", fy_ofi_dl_error());
        st = FERRY_ERR_UNSUPPORTED;
        goto err_cfg;
    }
    md->host_id = fy_netif_host_id();
    prov_cand_t c[16];
    unsigned n = list_providers(md->cfg.provider, c, 16);
    /* Without FERRY_OFI_PROVIDER only native (NIC) providers are opened: the software ones
     * (shm, rxm, rxd, sockets) never beat ferry's own transports on one host, and an iface
     * costs a receive pool and has no wakeup fd (ferry_worker_get_fd needs every iface's). */
    int named = md->cfg.provider != NULL && md->cfg.provider[0] != '\0';
    /* Several contexts (FERRY_OFI_CONTEXTS > 1) are several workers' endpoints on one domain,
     * driven from their own threads, and the registration cache registers from any thread:
     * FI_THREAD_SAFE.  A provider that cannot: FI_THREAD_DOMAIN and one context. */
    for (unsigned i = 0; i < n && md->info == NULL; i++) {
        if (!named && c[i].rank != 0)
            continue;
        md->thread_safe = md->cfg.contexts > 1;
        if (md->thread_safe)
            md->info = best_info(c[i].name, md->cfg.delivery, &md->delivery, FI_THREAD_SAFE);
        if (md->info == NULL) {
            md->thread_safe = 0;
            md->info = best_info(c[i].name, md->cfg.delivery, &md->delivery, FI_THREAD_DOMAIN);
            if (md->info != NULL && md->cfg.contexts > 1)
                fy_info("ofi: %s: no FI_THREAD_SAFE domain: one context (one worker) only",
                        c[i].name);
        }
    }
    md->ncontexts = md->thread_safe ? (unsigned)md->cfg.contexts : 1;
    md->ctx_busy = calloc(md->ncontexts, 1);
    if (md->ctx_busy == NULL) {
        st = FERRY_ERR_NO_MEMORY;
        if (md->info != NULL)
            fi_freeinfo(md->info);
        goto err_cfg;
    }
    if (md->info == NULL) {
        /* no device: the md opens with none, like tcp with no interface */
        fy_debug("ofi: no usable provider (FERRY_OFI_PROVIDER='%s')",
                 md->cfg.provider ? md->cfg.provider : "");
        *md_p = &md->super;
        return FERRY_OK;
    }
    int ret = fi_fabric(md->info->fabric_attr, &md->fabric, NULL);
    if (ret == 0)
        ret = fi_domain(md->fabric, md->info, &md->domain, NULL);
    if (ret != 0) {
        fy_warn("ofi: %s: opening the domain failed: %s", md->info->fabric_attr->prov_name,
                fi_strerror(-ret));
        if (md->fabric != NULL)
            fi_close(&md->fabric->fid);
        md->fabric = NULL;
        fi_freeinfo(md->info);
        md->info = NULL;
        *md_p = &md->super;
        return FERRY_OK;
    }
    char why[200];
    fy_ofi_mr_mode_t mode;
    if (fy_ofi_mr_mode_init(md->info, &mode, why, sizeof(why)) != FERRY_OK) {
        fy_warn("ofi: %s: %s", md->info->fabric_attr->prov_name, why);
        fi_close(&md->domain->fid);
        fi_close(&md->fabric->fid);
        md->domain = NULL;
        md->fabric = NULL;
        fi_freeinfo(md->info);
        md->info = NULL;
        *md_p = &md->super;
        return FERRY_OK;
    }
    if (md->cfg.mr_force != NULL && md->cfg.mr_force[0] != '\0') {
        fy_config_list_t l;
        if (fy_config_parse_list(md->cfg.mr_force, &l) == FERRY_OK) {
            int ok = 1;
            for (unsigned i = 0; i < l.count; i++) {
                const char *b = l.names[i];
                if (strcmp(b, "local") == 0)
                    mode.local = 1;
                else if (strcmp(b, "endpoint") == 0)
                    mode.endpoint = 1;
                else if (strcmp(b, "allocated") == 0)
                    mode.allocated = 1;
                else
                    ok = 0;
            }
            fy_config_list_release(&l);
            if (!ok)
                fy_warn("FERRY_OFI_MR_FORCE=%s: only local, endpoint and allocated are known",
                        md->cfg.mr_force);
        }
    }
    /* FI_MR_ENDPOINT binds each registration to one endpoint, and a key is the md's: one
     * context, whose endpoint every registration binds to (iface_open sets mrdom.ep) */
    if (mode.endpoint && md->ncontexts > 1) {
        fy_info("ofi: FI_MR_ENDPOINT: one context (one worker) only");
        md->ncontexts = 1;
    }
    fy_ofi_mr_dom_init(&md->mrdom, md->domain, &mode);
    md->mr_mode = mode.mr_mode;
    md->multi_recv = md->cfg.multi_recv && (md->info->caps & FI_MULTI_RECV) != 0;
    short_name(md->info->fabric_attr->prov_name, md->dev_name, sizeof(md->dev_name));
    md->prov_hash = 14695981039346656037ull; /* FNV-1a of the provider's name */
    for (const char *ch = md->info->fabric_attr->prov_name; *ch; ch++)
        md->prov_hash = (md->prov_hash ^ (uint8_t)*ch) * 1099511628211ull;
    fy_ofi_sep_open(md); /* SEP hook: one scalable endpoint for the contexts, where offered */
    fy_debug("ofi: provider %s, domain %s, mr_mode 0x%llx, delivery complete %s, %u context%s",
             md->info->fabric_attr->prov_name, md->info->domain_attr->name,
             (unsigned long long)md->mr_mode, md->delivery ? "yes" : "no", md->ncontexts,
             md->ncontexts == 1 ? "" : "s");
    *md_p = &md->super;
    return FERRY_OK;

err_cfg:
    fy_config_release(&fy_ofi_config_table, &md->cfg);
err_free:
    pthread_mutex_destroy(&md->rc_lock);
    free(md);
    return st;
}

static void ofi_md_close(fy_tl_md_t *super)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super;
    if (md == NULL)
        return;
    fy_rcache_destroy(md->rcache); /* registrations first: they belong to the domain */
    pthread_mutex_destroy(&md->rc_lock);
    free(md->ctx_busy);
    fy_ofi_sep_close(md);                             /* SEP hook */
    if (md->domain != NULL && fy_ofi_park_domain(md)) /* parked endpoints hold it: later */
        md->domain = NULL, md->fabric = NULL, md->info = NULL;
    if (md->domain != NULL)
        fi_close(&md->domain->fid);
    if (md->fabric != NULL)
        fi_close(&md->fabric->fid);
    if (md->info != NULL)
        fi_freeinfo(md->info);
    fy_config_release(&fy_ofi_config_table, &md->cfg);
    free(md);
}

static ferry_status_t ofi_query_devices(fy_tl_md_t *super, fy_tl_device_t *devs, unsigned max,
                                        unsigned *count)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super;
    *count = 0;
    if (md->domain == NULL || max == 0)
        return FERRY_OK;
    memset(&devs[0], 0, sizeof(devs[0]));
    snprintf(devs[0].name, sizeof(devs[0].name), "%s", md->dev_name);
    devs[0].is_loopback = 1; /* bound to this host */
    *count = 1;
    return FERRY_OK;
}

static ferry_status_t ofi_mem_reg(fy_tl_md_t *super, void *addr, size_t len, unsigned access,
                                  void *memh)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super;
    fy_ofi_mr_t *mr = memh;
    memset(mr, 0, sizeof(*mr));
    if (md->domain == NULL)
        return FERRY_ERR_NO_DEVICE;
    return fy_ofi_mr_reg(&md->mrdom, NULL, addr, len, access, 0, mr);
}

/* The md's registration cache, created on first use (a memory monitor subscription: no
 * process that never sends a rendezvous pays for it).  NULL when it cannot be made. */
fy_rcache_t *fy_ofi_md_rcache(fy_ofi_md_t *md)
{
    pthread_mutex_lock(&md->rc_lock);
    if (md->rcache == NULL && !md->rc_failed) {
        fy_rcache_params_t p = {.name = "ofi",
                                .memh_size = sizeof(fy_ofi_mr_t),
                                .reg = fy_ofi_mr_rcache_reg,
                                .dereg = fy_ofi_mr_rcache_dereg,
                                .arg = &md->mrdom,
                                .opts = NULL};
        ferry_status_t st = fy_rcache_create(&p, &md->rcache);
        if (st != FERRY_OK) {
            fy_warn("ofi: no registration cache (%s): every rendezvous registers its buffer",
                    ferry_status_string(st));
            md->rc_failed = 1;
            md->rcache = NULL;
        }
    }
    fy_rcache_t *rc = md->rcache;
    pthread_mutex_unlock(&md->rc_lock);
    return rc;
}

/* A rendezvous buffer: through the registration cache, so a buffer sent again and again is
 * registered once (FERRY_RCACHE=n: the cache registers and deregisters every time).  memh
 * is a copy of the cached registration (whole pages, registered for local use too) that
 * remembers its region; ofi_mem_dereg gives the region back to the cache. */
static ferry_status_t ofi_mem_reg_cached(fy_tl_md_t *super, void *addr, size_t len, unsigned access,
                                         void *memh)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super;
    fy_ofi_mr_t *mr = memh;
    memset(mr, 0, sizeof(*mr));
    if (md->domain == NULL)
        return FERRY_ERR_NO_DEVICE;
    fy_rcache_t *rc = len > 0 ? fy_ofi_md_rcache(md) : NULL;
    if (rc == NULL)
        return fy_ofi_mr_reg(&md->mrdom, NULL, addr, len, access, 0, mr);
    fy_rcache_region_t *region;
    ferry_status_t st = fy_rcache_get(rc, addr, len, access, &region);
    if (st != FERRY_OK)
        return st;
    *mr = *(const fy_ofi_mr_t *)fy_rcache_region_memh(region);
    mr->cached = region;
    return FERRY_OK;
}

static void ofi_mem_dereg(fy_tl_md_t *super, void *memh)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super;
    fy_ofi_mr_t *mr = memh;
    if (mr->cached != NULL) {
        fy_rcache_put(md->rcache, mr->cached);
        memset(mr, 0, sizeof(*mr));
        return;
    }
    fy_ofi_mr_dereg(mr);
}

static ferry_status_t ofi_rkey_pack(fy_tl_md_t *super, const void *memh, void *buf)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super;
    const fy_ofi_mr_t *mr = memh;
    if (mr->mr == NULL)
        return FERRY_ERR_INVALID_PARAM;
    fy_ofi_rkey_pack(&md->mrdom, mr, buf);
    return FERRY_OK;
}

static ferry_status_t ofi_rkey_unpack(fy_tl_md_t *super, const void *buf, void *rkey)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super;
    return fy_ofi_rkey_unpack(md->domain != NULL ? &md->mrdom.mode : NULL, buf,
                              FY_OFI_RKEY_PACKED_SIZE, rkey);
}

static void ofi_rkey_release(fy_tl_md_t *md, void *rkey)
{
    (void)md, (void)rkey;
}

static const fy_tl_ops_t ofi_ops = {
    .md_open = ofi_md_open,
    .md_close = ofi_md_close,
    .query_devices = ofi_query_devices,
    .mem_reg = ofi_mem_reg,
    .mem_dereg = ofi_mem_dereg,
    .mem_reg_cached = ofi_mem_reg_cached,
    .rkey_pack = ofi_rkey_pack,
    .rkey_unpack = ofi_rkey_unpack,
    .rkey_release = ofi_rkey_release,
    .iface_open = fy_ofi_iface_open,
    .iface_close = fy_ofi_iface_close,
    .iface_query = fy_ofi_iface_query,
    .iface_get_address = fy_ofi_iface_get_address,
    .iface_is_reachable = fy_ofi_iface_is_reachable,
    .iface_unreachable_why = fy_ofi_iface_unreachable_why,
    .iface_progress = fy_ofi_iface_progress,
    .iface_event_fd = fy_ofi_iface_event_fd,
    .iface_event_arm = fy_ofi_iface_event_arm,
    .iface_print = fy_ofi_iface_print,
    .ep_create = fy_ofi_ep_create,
    .ep_destroy = fy_ofi_ep_destroy,
    .ep_flush = fy_ofi_ep_flush,
    .ep_get_stats = fy_ofi_ep_get_stats,
    .am_short = fy_ofi_am_short,
    .am_bcopy = fy_ofi_am_bcopy,
    .am_zcopy = fy_ofi_am_zcopy,
    .put_short = NULL,
    .put_zcopy = fy_ofi_put_zcopy,
    .get_zcopy = fy_ofi_get_zcopy,
    .atomic = fy_ofi_atomic,
};

const fy_tl_component_t fy_tl_ofi_component = {
    .name = "ofi",
    .description = "libfabric RDM endpoints (tcp;ofi_rxm, udp;ofi_rxd, shm, NIC providers), "
                   "bound to this host",
    .ops = &ofi_ops,
    .config = &fy_ofi_config_table,
    .memh_size = sizeof(fy_ofi_mr_t),
    .rkey_packed_size = FY_OFI_RKEY_PACKED_SIZE,
    .rkey_size = sizeof(fy_ofi_mr_rkey_t),
};
