/*
 * ofi_iface.c - the ofi interface: opening one FI_EP_RDM endpoint (a context of the md's
 * domain) with its completion queue, address vector, receive buffers and wake-up fd; closing
 * it after libfabric gave back what it held; and what the iface tells the rest of ferry: its
 * attributes (sizes from the provider, atomics per op and width from fi_atomicvalid, the lane
 * figures), its address (the endpoint name, the peer-check pid, the flush word) and whether a
 * peer is reachable.  The data path is elsewhere: ofi_ep.c posts, ofi_progress.c completes,
 * ofi_op.c finishes ops, ofi_rndv.c runs the AM rendezvous.
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tl/ofi/ofi.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* ---- open / close ------------------------------------------------------------------------- */

static const enum fi_op amo_fi_op[] = {FI_SUM, FI_BAND, FI_BOR, FI_BXOR, FI_ATOMIC_WRITE, FI_CSWAP};

/* Which ferry atomics this endpoint does natively, per width (fi_atomicvalid and its fetch
 * and compare forms: an op counts only when every form ferry may issue is valid). */
static void query_atomics(fy_ofi_iface_t *iface)
{
    fy_ofi_md_t *md = iface->md;
    md->amo_mask[0] = md->amo_mask[1] = 0;
    if (!(iface->info->caps & FI_ATOMIC) || !md->cfg.atomics)
        return;
    /* libfabric 1.17's rxd crashes in its progress on atomics: emulated by proto there */
    if (strstr(iface->info->fabric_attr->prov_name, "ofi_rxd") != NULL)
        return;
    for (int w = 0; w < 2; w++) {
        enum fi_datatype dt = w == 0 ? FI_UINT32 : FI_UINT64;
        for (int o = 0; o < 6; o++) {
            size_t count = 0;
            int ok;
            if (o == FERRY_ATOMIC_CSWAP) {
                ok = fi_compare_atomicvalid(iface->ep, dt, FI_CSWAP, &count) == 0 && count >= 1;
            } else {
                ok = fi_atomicvalid(iface->ep, dt, amo_fi_op[o], &count) == 0 && count >= 1;
                count = 0;
                ok = ok && fi_fetch_atomicvalid(iface->ep, dt, amo_fi_op[o], &count) == 0 &&
                     count >= 1;
            }
            if (ok)
                md->amo_mask[w] |= 1u << o;
        }
    }
}

ferry_status_t fy_ofi_iface_open(fy_tl_md_t *super_md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super_md;
    if (md->domain == NULL || params->device == NULL || strcmp(params->device, md->dev_name) != 0)
        return FERRY_ERR_NO_DEVICE;
    /* a context of the md: this worker's own endpoint, CQ and AV */
    int ctx = -1;
    pthread_mutex_lock(&md->rc_lock);
    for (unsigned i = 0; i < md->ncontexts && ctx < 0; i++)
        if (!md->ctx_busy[i]) {
            md->ctx_busy[i] = 1;
            ctx = (int)i;
        }
    pthread_mutex_unlock(&md->rc_lock);
    if (ctx < 0) {
        fy_warn("ofi: all %u contexts are taken by other workers (FERRY_OFI_CONTEXTS%s): this "
                "worker gets no ofi interface",
                md->ncontexts, md->thread_safe ? "" : "; the domain is not thread-safe");
        return FERRY_ERR_NO_DEVICE;
    }
    fy_ofi_iface_t *iface = calloc(1, sizeof(*iface));
    if (iface == NULL) {
        pthread_mutex_lock(&md->rc_lock);
        md->ctx_busy[ctx] = 0;
        pthread_mutex_unlock(&md->rc_lock);
        return FERRY_ERR_NO_MEMORY;
    }
    iface->ctx_index = ctx;
    fy_tl_iface_base_init(&iface->super, md->super.component, &md->super, params);
    iface->md = md;
    iface->info = md->info;
    iface->job_tag = (uint32_t)params->job_key;
    fy_list_init(&iface->eps);
    fy_list_init(&iface->orphans);
    fy_list_init(&iface->free);
    iface->inject_size = md->info->tx_attr->inject_size;
    iface->max_iov = md->info->tx_attr->iov_limit;
    if (md->info->tx_attr->rma_iov_limit < iface->max_iov)
        iface->max_iov = md->info->tx_attr->rma_iov_limit;
    iface->max_msg = md->info->ep_attr->max_msg_size;
    iface->multi = md->multi_recv;
    /* rxm's rendezvous (messages above its 16 KiB eager buffers) stalls when the sender does
     * not progress while the receiver drains: keep ferry's AMs eager there */
    iface->msg_max = FY_OFI_MSG_MAX;
    iface->bcopy_max = FY_OFI_BCOPY;
    if (strstr(md->info->fabric_attr->prov_name, "ofi_rxm") != NULL) {
        iface->msg_max = 16384 - 256;
        iface->bcopy_max = 2048;
    }
    /* libfabric 1.17's rxd loses messages when fi_send is posted while its injected messages
     * fill its transmit queue (an inject refused with -FI_EAGAIN, then the send: the peer
     * receives 1024 and nothing after; `ofi_floor "udp;ofi_rxd" inject` reproduces it, and
     * docs/ofi.md tells it).  So over rxd every message is an fi_send with a completion,
     * bounded by FERRY_OFI_TX_OPS like any op, and never more than half rxd's transmit queue
     * (its sends alone are lost the same way past it); am_short keeps its size. */
    iface->no_inject = strstr(md->info->fabric_attr->prov_name, "ofi_rxd") != NULL;
    iface->tx_ops = md->cfg.tx_ops;
    if (iface->no_inject && md->info->tx_attr->size >= 8 &&
        iface->tx_ops > md->info->tx_attr->size / 2)
        iface->tx_ops = md->info->tx_attr->size / 2;
    /* rxd resends a message from the caller's buffer until the peer acknowledges it, also
     * after ep_destroy returned (nothing in libfabric takes a posted send back), so a forced
     * close there would let the peer see memory the caller reused: over rxd an eager am_zcopy
     * is copied into its op's buffer (64 KiB; rxd moves ~0.3 GB/s, the copy ~10 GB/s). */
    /* sockets' progress thread sends a message from the caller's buffer whenever the socket
     * takes it, also after ep_destroy returned: copied there too (and no AM rendezvous by
     * default: ofi_rndv.c) */
    iface->zcopy_copies =
        iface->no_inject || strcmp(md->info->fabric_attr->prov_name, "sockets") == 0;
    iface->bbuf_size = iface->zcopy_copies ? iface->msg_max + 256 : FY_OFI_BBUF;
    fy_ofi_rndv_init(iface);
    const char *what = "";
    int ret;
    iface->wait_fd = iface->timer_fd = iface->event_fd = -1;
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA,
                             .size = 0,
                             .wait_obj = md->cfg.wait_fd ? FI_WAIT_FD : FI_WAIT_NONE};
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    ret = fi_cq_open(md->domain, &cqa, &iface->cq, NULL);
    if (ret != 0 && cqa.wait_obj != FI_WAIT_NONE) {
        fy_debug("ofi: %s: no completion queue with a wait fd (%s): sleeping workers poll",
                 md->info->fabric_attr->prov_name, fi_strerror(-ret));
        cqa.wait_obj = FI_WAIT_NONE;
        ret = fi_cq_open(md->domain, &cqa, &iface->cq, NULL);
    }
    if (ret != 0) {
        what = "fi_cq_open";
        goto err;
    }
    if (cqa.wait_obj == FI_WAIT_FD) {
        int fd = -1;
        if (fi_control(&iface->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
            iface->wait_fd = fd;
        } else {
            /* a wait object nobody can sleep on would only cost its signalling: without */
            fy_debug("ofi: %s: the completion queue gives no wait fd: sleeping workers poll",
                     md->info->fabric_attr->prov_name);
            fi_close(&iface->cq->fid);
            iface->cq = NULL;
            cqa.wait_obj = FI_WAIT_NONE;
            ret = fi_cq_open(md->domain, &cqa, &iface->cq, NULL);
            if (ret != 0) {
                what = "fi_cq_open";
                goto err;
            }
        }
    }
    ret = fy_ofi_open_event_fd(iface);
    if (ret != 0) {
        what = "the event fd";
        goto err;
    }
    /* SEP hook: a scalable endpoint's contexts instead of an endpoint and AV (ofi_sep.c) */
    if (md->sep != NULL) {
        ret = fy_ofi_sep_iface_open(iface, &what);
        if (ret != 0)
            goto err;
        goto sep_opened;
    }
    ret = fi_av_open(md->domain, &ava, &iface->av, NULL);
    if (ret != 0) {
        what = "fi_av_open";
        goto err;
    }
    /* every shm iface's region gets a name of its own, which says whose it is
     * (ofi_shm_name.c) */
    struct fi_info *epi = md->info;
    if (strcmp(md->info->fabric_attr->prov_name, "shm") == 0) {
        epi = fi_dupinfo(md->info);
        if (epi == NULL) {
            ret = -FI_ENOMEM;
            what = "fi_dupinfo";
            goto err;
        }
        free(epi->src_addr);
        epi->src_addr = fy_ofi_shm_name();
        epi->src_addrlen = epi->src_addr != NULL ? strlen(epi->src_addr) + 1 : 0;
    }
    ret = fi_endpoint(md->domain, epi, &iface->ep, NULL);
    if (epi != md->info)
        fi_freeinfo(epi);
    if (ret != 0) {
        what = "fi_endpoint";
        goto err;
    }
    ret = fi_ep_bind(iface->ep, &iface->av->fid, 0);
    if (ret == 0)
        ret = fi_ep_bind(iface->ep, &iface->cq->fid, FI_TRANSMIT | FI_RECV);
    if (ret != 0) {
        what = "fi_ep_bind";
        goto err;
    }
    /* libfabric 1.17's shm crashes in fi_setopt(FI_OPT_MIN_MULTI_RECV): receive slots there */
    if (strcmp(md->info->fabric_attr->prov_name, "shm") == 0)
        iface->multi = 0;
    if (iface->multi) {
        size_t min = iface->msg_max;
        if (fi_setopt(&iface->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)) !=
            0)
            iface->multi = 0;
    }
    ret = fi_enable(iface->ep);
    if (ret != 0) {
        what = "fi_enable";
        goto err;
    }
    size_t nlen = sizeof(iface->name);
    ret = fi_getname(&iface->ep->fid, iface->name, &nlen);
    if (ret != 0 || nlen >= FY_OFI_NAME_MAX) {
        what = "fi_getname";
        if (ret == 0)
            ret = -FI_ETOOSMALL;
        goto err;
    }
    iface->name_len = nlen;
    /* FI_MR_ENDPOINT (one context): every registration binds to this endpoint */
    if (md->mrdom.mode.endpoint)
        md->mrdom.ep = iface->ep;
sep_opened: /* (a scalable endpoint: registrations bind to it, ofi_sep.c) */
    /* the word a flush reads after writes */
    if (fy_ofi_mr_reg(&md->mrdom, iface->ep, &iface->flush_word, sizeof(iface->flush_word),
                      FERRY_MEM_REMOTE_READ, 0, &iface->flush_mr) != FERRY_OK) {
        ret = -FI_EINVAL;
        what = "registering the flush word";
        goto err;
    }
    iface->flush_key = iface->flush_mr.key;
    /* receive buffers */
    iface->nrx = iface->multi ? FY_OFI_NUM_MULTI : FY_OFI_RX_SLOTS;
    iface->rx = calloc(iface->nrx, sizeof(*iface->rx));
    if (iface->rx == NULL) {
        ret = -FI_ENOMEM;
        what = "receive buffers";
        goto err;
    }
    for (unsigned i = 0; i < iface->nrx; i++) {
        fy_ofi_rx_t *rx = &iface->rx[i];
        rx->op.kind = FY_OFI_OP_RECV;
        rx->len = iface->multi ? FY_OFI_MULTI_RX : iface->msg_max;
        rx->buf = malloc(rx->len);
        if (rx->buf == NULL) {
            ret = -FI_ENOMEM;
            what = "receive buffers";
            goto err;
        }
        if (fy_ofi_op_local_mr(iface, &rx->op, rx->buf, rx->len, &rx->mr) != FERRY_OK) {
            ret = -FI_EINVAL;
            what = "registering a receive buffer";
            goto err;
        }
        ret = fy_ofi_rx_post(iface, rx);
        if (ret != 0 && ret != -FI_EAGAIN) {
            what = "fi_recv";
            goto err;
        }
        iface->eagain |= ret != 0;
    }
    query_atomics(iface);
    fy_ofi_park_open(iface);
    *iface_p = &iface->super;
    return FERRY_OK;

err:
    fy_warn("ofi: %s: %s failed: %s", md->info->fabric_attr->prov_name, what, fi_strerror(-ret));
    fy_ofi_iface_close(&iface->super);
    return fy_ofi_status(ret) == FERRY_ERR_NO_RESOURCE ? FERRY_ERR_NO_DEVICE : fy_ofi_status(ret);
}

/* Before the endpoint closes: let libfabric give back what it still holds (the eps are gone,
 * so these are orphans and receives; nothing is delivered any more), for at most 100 ms.
 * libfabric 1.17's rxm crashes in fi_close of an endpoint with reads outstanding. */
static void drain_before_close(fy_ofi_iface_t *iface)
{
    iface->closing = 1;
    uint64_t end = fy_time_ns() + 100000000ull;
    for (;;) {
        int held = 0;
        fy_list_t *e;
        fy_list_for_each(e, &iface->orphans)
        {
            if (fy_container_of(e, fy_ofi_op_t, elem)->posted) {
                held = 1;
                break;
            }
        }
        if (!held || fy_time_ns() > end)
            return;
        fy_ofi_read_cq(iface);
    }
}

void fy_ofi_iface_close(fy_tl_iface_t *super)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    if (iface == NULL)
        return;
    while (!fy_list_is_empty(&iface->eps)) {
        fy_ofi_ep_t *ep = fy_container_of(iface->eps.next, fy_ofi_ep_t, elem);
        fy_ofi_ep_destroy(&ep->super);
    }
    if (iface->cq != NULL && iface->orphans.next != NULL)
        drain_before_close(iface);
    fy_ofi_rndv_release(iface);
    /* SEP hook: its contexts closed (ep NULL, so the registrations, bound to the scalable
     * endpoint, stay), the shared AV kept */
    fy_ofi_sep_iface_close(iface);
    if (iface->md->mrdom.mode.endpoint && iface->ep != NULL) {
        /* the cached registrations are bound to this endpoint: they go with it */
        pthread_mutex_lock(&iface->md->rc_lock);
        fy_rcache_t *rc = iface->md->rcache;
        iface->md->rcache = NULL;
        iface->md->mrdom.ep = NULL;
        pthread_mutex_unlock(&iface->md->rc_lock);
        fy_list_t *e;
        fy_list_for_each(e, &iface->orphans) /* their regions first (pooled ops hold none) */
        {
            fy_ofi_op_t *op = fy_container_of(e, fy_ofi_op_t, elem);
            for (unsigned i = 0; i < op->nregions; i++)
                fy_rcache_put(rc, op->regions[i]);
            op->nregions = 0;
        }
        fy_rcache_destroy(rc);
    }
    fy_ofi_park_iface(iface); /* shm: ep, av and cq kept for later, or not (ofi_park.c) */
    if (iface->ep != NULL)
        fi_close(&iface->ep->fid);
    fy_ofi_mr_dereg(&iface->flush_mr);
    if (iface->av != NULL)
        fi_close(&iface->av->fid);
    if (iface->event_fd >= 0)
        close(iface->event_fd);
    if (iface->timer_fd >= 0)
        close(iface->timer_fd);
    if (iface->cq != NULL)
        fi_close(&iface->cq->fid); /* closes wait_fd, the provider's */
    for (unsigned i = 0; iface->rx != NULL && i < iface->nrx; i++) {
        fy_ofi_mr_dereg(&iface->rx[i].mr);
        free(iface->rx[i].buf);
    }
    free(iface->rx);
    fy_ofi_rndv_free(iface);
    fy_ofi_op_free_all(iface, &iface->orphans);
    fy_ofi_op_free_all(iface, &iface->free);
    free(iface->broken);
    pthread_mutex_lock(&iface->md->rc_lock);
    iface->md->ctx_busy[iface->ctx_index] = 0;
    pthread_mutex_unlock(&iface->md->rc_lock);
    free(iface);
}

void fy_ofi_iface_query(fy_tl_iface_t *super, fy_tl_iface_attr_t *attr)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    fy_ofi_md_t *md = iface->md;
    memset(attr, 0, sizeof(*attr));
    attr->caps = FY_TL_CAP_AM_SHORT | FY_TL_CAP_AM_BCOPY | FY_TL_CAP_AM_ZCOPY | FY_TL_CAP_PUT |
                 FY_TL_CAP_GET | FY_TL_CAP_AM_ORDERED | FY_TL_CAP_CONNECT_TO_IFACE |
                 FY_TL_CAP_EVENT_FD;
    /* per op and width, as fi_atomicvalid said (query_atomics); proto emulates a width that
     * lacks any op as a whole (rma.c) */
    if (md->amo_mask[0] != 0)
        attr->caps |= FY_TL_CAP_AMO32;
    if (md->amo_mask[1] != 0)
        attr->caps |= FY_TL_CAP_AMO64;
    attr->amo_ops[0] = md->amo_mask[0];
    attr->amo_ops[1] = md->amo_mask[1];
    /* Honest figures for lane selection, measured here over loopback (bench/RESULTS.md):
     * the software providers are slower than ferry's own shm and tcp; a NIC provider is
     * assumed to be an RDMA NIC. */
    const char *p = md->info->fabric_attr->prov_name;
    double lat, bw;
    if (strcmp(p, "shm") == 0)
        lat = 1500, bw = 5e9;
    else if (strstr(p, "rxm") != NULL)
        lat = 9000, bw = 2.5e9;
    else if (strstr(p, "rxd") != NULL || strcmp(p, "sockets") == 0)
        lat = 20000, bw = 0.8e9;
    else
        lat = 2000, bw = 10e9;
    attr->latency_ns = md->cfg.latency_ns > 0 ? md->cfg.latency_ns : lat;
    attr->bandwidth = md->cfg.bandwidth > 0 ? md->cfg.bandwidth : bw;
    attr->overhead_ns = 1000;
    size_t inj = iface->inject_size > iface->bcopy_max ? iface->bcopy_max : iface->inject_size;
    attr->max_short = inj >= 64 + sizeof(fy_ofi_hdr_t) ? inj - sizeof(fy_ofi_hdr_t) : 64;
    attr->max_bcopy = iface->bcopy_max - sizeof(fy_ofi_hdr_t);
    /* above the eager size (a receive slot) an AM goes by rendezvous, FERRY_OFI_RNDV_THRESH */
    attr->max_zcopy =
        (iface->rndv_thresh != SIZE_MAX ? iface->rndv_max : iface->msg_max) - sizeof(fy_ofi_hdr_t);
    attr->max_zcopy_hdr = 256;
    attr->max_put_short = 0;
    attr->max_rma = iface->max_msg < (1ull << 30) ? iface->max_msg : (1u << 30);
    attr->max_iov = iface->max_iov > 1 ? iface->max_iov - 1 : 1;
    attr->device_addr_len = sizeof(fy_ofi_dev_addr_t);
    attr->iface_addr_len = sizeof(fy_ofi_iface_addr_t);
    attr->priority = 5;
}

ferry_status_t fy_ofi_iface_get_address(fy_tl_iface_t *super, void *dev_addr, void *iface_addr)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    fy_ofi_dev_addr_t d = {.host_id = htole64(iface->md->host_id),
                           .prov_hash = htole64(iface->md->prov_hash)};
    memcpy(dev_addr, &d, sizeof(d));
    fy_ofi_iface_addr_t a;
    memset(&a, 0, sizeof(a));
    a.pid = htole32((uint32_t)getpid());
    a.name_len = htole32((uint32_t)iface->name_len);
    a.flush_addr = htole64(fy_ofi_virt(iface->md) ? (uintptr_t)&iface->flush_word : 0);
    a.flush_key = htole64(iface->flush_key);
    memcpy(a.name, iface->name, iface->name_len);
    memcpy(iface_addr, &a, sizeof(a));
    return FERRY_OK;
}

/* A peer whose path from this interface the provider broke: rxd's stream to it stuck behind
 * an access it neither completes nor fails (FERRY_OFI_RMA_TIMEOUT), rxm's connection dropped
 * by the tcp provider (after a write with a key the target closed).  A new ep to it on this
 * interface would lose its messages without an error (rxd, rxm: the conformance suite's
 * rma_refused), so it is refused; a new interface reaches the peer. */
struct fy_ofi_broken {
    uint8_t name[FY_OFI_NAME_MAX];
    size_t len;
};

#define FY_OFI_BROKEN_MAX 64 /* remembered per interface; the oldest is forgotten past it */

static int peer_broken(const fy_ofi_iface_t *iface, const uint8_t *name, size_t len)
{
    for (unsigned i = 0; i < iface->nbroken; i++)
        if (iface->broken[i].len == len && memcmp(iface->broken[i].name, name, len) == 0)
            return 1;
    return 0;
}

void fy_ofi_iface_break_peer(fy_ofi_iface_t *iface, const fy_ofi_ep_t *ep)
{
    if (ep->name_len == 0 || peer_broken(iface, ep->name, ep->name_len))
        return;
    if (iface->broken == NULL) {
        iface->broken = calloc(FY_OFI_BROKEN_MAX, sizeof(*iface->broken));
        if (iface->broken == NULL)
            return;
    }
    if (iface->nbroken == FY_OFI_BROKEN_MAX) { /* the oldest goes */
        memmove(&iface->broken[0], &iface->broken[1],
                (FY_OFI_BROKEN_MAX - 1) * sizeof(*iface->broken));
        iface->nbroken--;
    }
    unsigned i = iface->nbroken++;
    memcpy(iface->broken[i].name, ep->name, ep->name_len);
    iface->broken[i].len = ep->name_len;
}

static const char *unreachable(fy_ofi_iface_t *iface, const void *dev_addr, const void *iface_addr)
{
    fy_ofi_dev_addr_t d;
    fy_ofi_iface_addr_t a;
    memcpy(&d, dev_addr, sizeof(d));
    memcpy(&a, iface_addr, sizeof(a));
    if (iface->wedged)
        return "this interface's shm endpoint waits for ever on a read that never completes (from "
               "a process that died, or past FERRY_OFI_RMA_TIMEOUT; libfabric 1.17's shm "
               "completes in order): it serves no endpoint any more";
    if (le64toh(d.host_id) != iface->md->host_id)
        return "another host or network namespace: ofi is bound to this host";
    if (le64toh(d.prov_hash) != iface->md->prov_hash)
        return "the peer uses another libfabric provider";
    if (le32toh(a.name_len) == 0 || le32toh(a.name_len) >= FY_OFI_NAME_MAX)
        return "malformed address";
    if (peer_broken(iface, a.name, le32toh(a.name_len)))
        return "the provider broke this interface's path to that peer (an operation stuck past "
               "FERRY_OFI_RMA_TIMEOUT, or its connection dropped): a new interface reaches it";
    return NULL;
}

int fy_ofi_iface_is_reachable(fy_tl_iface_t *super, const void *dev_addr, const void *iface_addr)
{
    return unreachable((fy_ofi_iface_t *)super, dev_addr, iface_addr) == NULL;
}

void fy_ofi_iface_unreachable_why(fy_tl_iface_t *super, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len)
{
    const char *why = unreachable((fy_ofi_iface_t *)super, dev_addr, iface_addr);
    snprintf(buf, len, "%s", why ? why : "reachable");
}

void fy_ofi_iface_print(fy_tl_iface_t *super, FILE *f)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    fy_ofi_md_t *md = iface->md;
    fprintf(f,
            "ofi %s (%s, domain %s): mr_mode 0x%llx, delivery complete %s, multi-recv %s, "
            "atomics 32-bit 0x%x 64-bit 0x%x, sleeps on %s, context %d of %u (%s)\n"
            "  ops %u (in flight %u), receive drops %llu, completion errors %llu, RMA timeouts "
            "%llu\n"
            "  AM rendezvous above %zu bytes: sent %llu, received %llu, failed %llu\n",
            md->dev_name, md->info->fabric_attr->prov_name, md->info->domain_attr->name,
            (unsigned long long)md->mr_mode, md->delivery ? "yes" : "no",
            iface->multi ? "yes" : "no", md->amo_mask[0], md->amo_mask[1],
            iface->wait_fd >= 0 ? "the completion queue's wait fd" : "a timer (polls)",
            iface->ctx_index, md->ncontexts,
            md->thread_safe ? "FI_THREAD_SAFE" : "FI_THREAD_DOMAIN", iface->nops, iface->inflight,
            (unsigned long long)iface->rx_dropped, (unsigned long long)iface->cq_errors,
            (unsigned long long)iface->rma_timeouts, iface->rndv_thresh,
            (unsigned long long)iface->rndv_tx, (unsigned long long)iface->rndv_rx,
            (unsigned long long)iface->rndv_failed);
    fy_ofi_sep_print(iface, f); /* SEP hook: which kind of context */
    /* registrations of the whole md (every worker's): a buffer sent again and again through
     * the cache adds one (tests/ofi/test_ofi_rndv.c counts them here) */
    fprintf(f, "  memory registrations %llu, local descriptors %s, bound to the endpoint %s\n",
            (unsigned long long)atomic_load(&md->mrdom.nregs), md->mrdom.mode.local ? "yes" : "no",
            md->mrdom.mode.endpoint ? "yes" : "no");
    pthread_mutex_lock(&md->rc_lock);
    if (md->rcache != NULL) {
        fprintf(f, "  ");
        fy_rcache_print(md->rcache, f);
    }
    pthread_mutex_unlock(&md->rc_lock);
}
