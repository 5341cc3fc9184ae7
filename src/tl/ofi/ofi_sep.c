/*
 * ofi_sep.c - several contexts on one scalable endpoint (fi_scalable_ep), where the provider
 * offers more than one transmit and receive context per endpoint.
 *
 * Without it (the regular path, ofi_iface.c) each worker's iface opens its own FI_EP_RDM
 * endpoint and address vector on the md's domain.  With it the md opens ONE scalable endpoint
 * with N transmit and N receive contexts (N = FERRY_OFI_CONTEXTS, at most what the provider
 * offers) and one address vector bound to it, with rx_ctx_bits room for the receive context
 * index in every fi_addr_t; each iface then takes transmit and receive context k (its md
 * context index) and binds its own completion queue to both, so the workers, each driven by
 * its own thread, progress in parallel as before: the data path does not know which it runs
 * on (iface->ep is the transmit context, iface->rx_ep the receive context).
 *
 * ADDRESSING.  An iface's name is the scalable endpoint's name followed by its receive context
 * index (2 bytes, little endian).  fy_ofi_av_insert, the one place a peer's name becomes an
 * fi_addr_t (an ep's peer, a rendezvous' sender), inserts the endpoint's name into the shared
 * address vector and folds the index in with fi_rx_addr once, so every send, read and atomic
 * targets the peer's own context with no work on the fast path.  The address vector lives as
 * long as the md, so each peer's endpoint is inserted once (a map of names to their entry,
 * under a lock): workers that come and go, and eps made again and again to the same peers, do
 * not grow it.  rx_ctx_bits comes from the
 * provider's maximum, not from N, so two processes with different FERRY_OFI_CONTEXTS agree on
 * it.  A scalable and a regular endpoint do not talk to each other (the device address's
 * provider hash differs): a regular endpoint cannot name a receive context.
 *
 * THREADS.  Inserting into the shared address vector from several workers' threads, and the
 * contexts themselves, are covered by the domain's FI_THREAD_SAFE, which the md asks for with
 * more than one context (ofi_md.c); one context needs no more than FI_THREAD_DOMAIN.
 *
 * FI_MR_ENDPOINT.  Every registration binds to the scalable endpoint (mrdom.ep, ep_shared), which
 * outlives the ifaces: the md's registration cache stays when a worker goes, and the mode no
 * longer limits the md to one context as it does with regular endpoints.
 *
 * WHEN.  FERRY_OFI_SEP: auto (more than one context and the provider offers it), on (also for
 * one context; a warning where not offered), off (regular endpoints).
 */
#include <endian.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tl/ofi/ofi.h"
#include "util/hash.h"
#include "util/log.h"

#define SEP_API FI_VERSION(1, 14) /* as ofi_md.c asks */

enum { SEP_AUTO = 0, SEP_ON = 1, SEP_OFF = 2 }; /* FERRY_OFI_SEP, in fy_ofi_sep_modes' order */
const char *const fy_ofi_sep_modes[] = {"auto", "on", "off", NULL};

struct fy_ofi_sep {
    struct fid_ep *ep;
    struct fid_av *av; /* shared by every context; rx_ctx_bits wide */
    int rx_ctx_bits;
    unsigned nctx;
    uint8_t name[FY_OFI_NAME_MAX];
    size_t name_len;
    pthread_mutex_t lock; /* peers (the AV itself is FI_THREAD_SAFE's) */
    fy_hash_t peers;      /* hash of a peer endpoint's name -> sep_peer_t */
    unsigned npeers;
};

/* A peer's scalable endpoint, inserted into the AV once. */
typedef struct sep_peer {
    size_t len;
    uint8_t name[FY_OFI_NAME_MAX];
    fi_addr_t base; /* its entry; fi_rx_addr adds the receive context */
} sep_peer_t;

static uint64_t name_hash(const uint8_t *name, size_t len)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ name[i]) * 1099511628211ull;
    return fy_hash_mix64(h);
}

/* The contexts the provider offers per endpoint: the smaller of transmit and receive. */
static size_t offered(const struct fi_info *info)
{
    size_t tx = info->domain_attr->max_ep_tx_ctx, rx = info->domain_attr->max_ep_rx_ctx;
    return tx < rx ? tx : rx;
}

static int ctx_bits(size_t n)
{
    int b = 1;
    while (b < 16 && ((size_t)1 << b) < n)
        b++;
    return b;
}

/* The md's info again, asking for FI_NAMED_RX_CTX (an initiator names the receive context it
 * targets): NULL when the provider cannot.  The caller frees it. */
static struct fi_info *named_info(const fy_ofi_md_t *md)
{
    struct fi_info *h = fi_dupinfo(md->info), *info = NULL;
    if (h == NULL)
        return NULL;
    h->caps |= FI_NAMED_RX_CTX;
    int ret = fi_getinfo(SEP_API, NULL, NULL, 0, h, &info);
    fi_freeinfo(h);
    if (ret != 0 || info == NULL || !(info->caps & FI_NAMED_RX_CTX)) {
        if (info != NULL)
            fi_freeinfo(info);
        return NULL;
    }
    struct fi_info *one = fi_dupinfo(info);
    fi_freeinfo(info);
    return one;
}

static void free_peer(uint64_t key, void *value, void *arg)
{
    (void)key, (void)arg;
    free(value);
}

static void sep_free(fy_ofi_sep_t *sep)
{
    if (sep == NULL)
        return;
    fy_hash_foreach(&sep->peers, free_peer, NULL);
    fy_hash_destroy(&sep->peers);
    pthread_mutex_destroy(&sep->lock);
    if (sep->ep != NULL)
        fi_close(&sep->ep->fid);
    if (sep->av != NULL)
        fi_close(&sep->av->fid);
    free(sep);
}

/* The contexts the md was opened for (ctx_busy's size), before FI_MR_ENDPOINT's limit to one. */
static unsigned wanted(const fy_ofi_md_t *md)
{
    return md->thread_safe ? (unsigned)md->cfg.contexts : 1;
}

/* Why the scalable endpoint is not used for this md, or NULL when it is to be. */
static const char *not_used(const fy_ofi_md_t *md, int mode)
{
    if (offered(md->info) < 2)
        return "the provider offers one context per endpoint";
    if (md->cfg.contexts > 1 && !md->thread_safe)
        return "the domain is not FI_THREAD_SAFE";
    if (wanted(md) < 2 && mode == SEP_AUTO)
        return "one context (FERRY_OFI_CONTEXTS=1)";
    return NULL;
}

void fy_ofi_sep_open(fy_ofi_md_t *md)
{
    int mode = md->cfg.sep;
    const char *prov = md->info->fabric_attr->prov_name;
    if (mode == SEP_OFF)
        return;
    const char *why = not_used(md, mode);
    if (why != NULL) {
        if (mode == SEP_ON)
            fy_warn("ofi: %s: FERRY_OFI_SEP=on, but %s: separate endpoints", prov, why);
        return;
    }
    size_t max = offered(md->info);
    unsigned want = wanted(md), n = want < max ? want : (unsigned)max;
    fy_ofi_sep_t *sep = calloc(1, sizeof(*sep));
    if (sep == NULL || fy_hash_init(&sep->peers, 16) != FERRY_OK) {
        fy_warn("ofi: %s: no memory for a scalable endpoint: separate endpoints", prov);
        free(sep);
        return;
    }
    pthread_mutex_init(&sep->lock, NULL);
    struct fi_info *info = named_info(md);
    const char *what = "FI_NAMED_RX_CTX";
    int ret = -FI_ENODATA;
    if (info == NULL)
        goto err;
    info->ep_attr->tx_ctx_cnt = n;
    info->ep_attr->rx_ctx_cnt = n;
    sep->nctx = n;
    sep->rx_ctx_bits = ctx_bits(max);
    struct fi_av_attr ava = {.type = FI_AV_TABLE, .rx_ctx_bits = sep->rx_ctx_bits};
    what = "fi_scalable_ep";
    ret = fi_scalable_ep(md->domain, info, &sep->ep, NULL);
    if (ret == 0) {
        what = "fi_av_open";
        ret = fi_av_open(md->domain, &ava, &sep->av, NULL);
    }
    if (ret == 0) {
        what = "fi_scalable_ep_bind";
        ret = fi_scalable_ep_bind(sep->ep, &sep->av->fid, 0);
    }
    if (ret == 0) {
        what = "fi_enable";
        ret = fi_enable(sep->ep);
    }
    if (ret == 0) {
        what = "fi_getname";
        size_t len = sizeof(sep->name);
        ret = fi_getname(&sep->ep->fid, sep->name, &len);
        if (ret == 0 && len + 2 >= FY_OFI_NAME_MAX)
            ret = -FI_ETOOSMALL;
        sep->name_len = len;
    }
    if (ret != 0)
        goto err;
    fi_freeinfo(info);
    if (n < want)
        fy_info("ofi: %s: a scalable endpoint has at most %zu contexts: FERRY_OFI_CONTEXTS %u "
                "-> %u",
                prov, max, want, n);
    md->ncontexts = n; /* never more than wanted(): ctx_busy has room */
    md->sep = sep;
    if (md->mrdom.mode.endpoint) {
        md->mrdom.ep = sep->ep;
        md->mrdom.ep_shared = 1;
    }
    /* a regular endpoint cannot name a receive context: make the two kinds unreachable */
    for (const char *ch = "/scalable"; *ch; ch++)
        md->prov_hash = (md->prov_hash ^ (uint8_t)*ch) * 1099511628211ull;
    fy_debug("ofi: %s: one scalable endpoint, %u transmit and receive contexts, rx_ctx_bits %d",
             prov, n, sep->rx_ctx_bits);
    return;

err:
    fy_log(mode == SEP_ON ? FY_LOG_WARN : FY_LOG_INFO,
           "ofi: %s: no scalable endpoint (%s: %s): separate endpoints", prov, what,
           fi_strerror(ret < 0 ? -ret : ret));
    if (info != NULL)
        fi_freeinfo(info);
    sep_free(sep);
}

void fy_ofi_sep_close(fy_ofi_md_t *md)
{
    sep_free(md->sep);
    md->sep = NULL;
}

int fy_ofi_sep_iface_open(fy_ofi_iface_t *iface, const char **what)
{
    fy_ofi_sep_t *sep = iface->md->sep;
    int k = iface->ctx_index, ret;
    *what = "fi_tx_context";
    ret = fi_tx_context(sep->ep, k, NULL, &iface->ep, NULL);
    if (ret != 0)
        return ret;
    *what = "fi_rx_context";
    ret = fi_rx_context(sep->ep, k, NULL, &iface->rx_ep, NULL);
    if (ret != 0)
        return ret;
    *what = "fi_ep_bind";
    ret = fi_ep_bind(iface->ep, &iface->cq->fid, FI_TRANSMIT);
    if (ret == 0)
        ret = fi_ep_bind(iface->rx_ep, &iface->cq->fid, FI_RECV);
    if (ret != 0)
        return ret;
    /* a context may not take the option: receive slots then */
    if (iface->multi) {
        size_t min = iface->msg_max;
        if (fi_setopt(&iface->rx_ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min,
                      sizeof(min)) != 0)
            iface->multi = 0;
    }
    *what = "fi_enable";
    ret = fi_enable(iface->ep);
    if (ret == 0)
        ret = fi_enable(iface->rx_ep);
    if (ret != 0)
        return ret;
    iface->av = sep->av; /* shared: fy_ofi_sep_iface_close leaves it open */
    memcpy(iface->name, sep->name, sep->name_len);
    iface->name[sep->name_len] = (uint8_t)(k & 0xff);
    iface->name[sep->name_len + 1] = (uint8_t)(k >> 8);
    iface->name_len = sep->name_len + 2;
    return 0;
}

void fy_ofi_sep_iface_close(fy_ofi_iface_t *iface)
{
    if (iface->md->sep == NULL)
        return;
    if (iface->ep != NULL)
        fi_close(&iface->ep->fid);
    if (iface->rx_ep != NULL)
        fi_close(&iface->rx_ep->fid);
    iface->ep = iface->rx_ep = NULL;
    iface->av = NULL; /* the md's */
}

int fy_ofi_av_insert(fy_ofi_iface_t *iface, const uint8_t *name, size_t len, fi_addr_t *addr)
{
    fy_ofi_sep_t *sep = iface->md->sep;
    if (sep == NULL)
        return fi_av_insert(iface->av, name, 1, addr, 0, NULL);
    /* the peer's endpoint name (the provider's length: ours), then its receive context */
    if (len != sep->name_len + 2)
        return -FI_EINVAL;
    unsigned k = name[len - 2] | (unsigned)name[len - 1] << 8;
    if (k >= (1u << sep->rx_ctx_bits))
        return -FI_EINVAL;
    size_t nlen = len - 2;
    uint64_t key = name_hash(name, nlen);
    int ret = 1;
    pthread_mutex_lock(&sep->lock);
    sep_peer_t *pe = fy_hash_get(&sep->peers, key);
    if (pe == NULL || pe->len != nlen || memcmp(pe->name, name, nlen) != 0) {
        fi_addr_t base;
        ret = fi_av_insert(sep->av, name, 1, &base, 0, NULL);
        sep_peer_t *n = ret == 1 && pe == NULL ? calloc(1, sizeof(*n)) : NULL;
        if (n != NULL) { /* (a hash collision, or no memory: inserted, not remembered) */
            n->len = nlen;
            memcpy(n->name, name, nlen);
            n->base = base;
            if (fy_hash_put(&sep->peers, key, n) == FERRY_OK)
                sep->npeers++;
            else
                free(n);
        }
        if (ret == 1)
            *addr = fi_rx_addr(base, (int)k, sep->rx_ctx_bits);
    } else {
        *addr = fi_rx_addr(pe->base, (int)k, sep->rx_ctx_bits);
    }
    pthread_mutex_unlock(&sep->lock);
    return ret;
}

void fy_ofi_sep_print(fy_ofi_iface_t *iface, FILE *f)
{
    fy_ofi_md_t *md = iface->md;
    if (md->sep != NULL) {
        pthread_mutex_lock(&md->sep->lock);
        unsigned npeers = md->sep->npeers;
        pthread_mutex_unlock(&md->sep->lock);
        fprintf(f,
                "  scalable endpoint, tx/rx context %d of %u (rx_ctx_bits %d; one address vector "
                "for all: %u peer endpoint%s)\n",
                iface->ctx_index, md->sep->nctx, md->sep->rx_ctx_bits, npeers,
                npeers == 1 ? "" : "s");
    } else
        fprintf(f, "  separate endpoint %d of %u (its own address vector; FERRY_OFI_SEP=%s)\n",
                iface->ctx_index, md->ncontexts, fy_ofi_sep_modes[md->cfg.sep]);
}

void fy_ofi_sep_print_provider(FILE *f, const struct fi_info *info)
{
    fy_ofi_config_t cfg;
    size_t n = offered(info);
    const char *path;
    if (fy_config_read(&fy_ofi_config_table, &cfg) != FERRY_OK) {
        path = "(FERRY_OFI_* unreadable)";
    } else {
        path = cfg.sep == SEP_OFF                        ? "separate endpoints (FERRY_OFI_SEP=off)"
               : n < 2                                   ? "separate endpoints"
               : cfg.contexts < 2 && cfg.sep == SEP_AUTO ? "one endpoint (FERRY_OFI_CONTEXTS=1)"
                                                         : "one scalable endpoint";
        fy_config_release(&fy_ofi_config_table, &cfg);
    }
    if (n < 2)
        fprintf(f, "                   contexts: no scalable endpoints; workers use %s\n", path);
    else
        fprintf(f,
                "                   contexts: scalable endpoints of %zu tx / %zu rx contexts; "
                "workers use %s\n",
                (size_t)info->domain_attr->max_ep_tx_ctx, (size_t)info->domain_attr->max_ep_rx_ctx,
                path);
}
