/*
 * query.c - what a runtime may ask of an endpoint or a worker: ferry_ep_query and
 * ferry_worker_query; and the worker's address and its printed state (ferry_worker_get_address,
 * ferry_worker_print_info).
 *
 * A runtime porting onto ferry needs to know, without reading logs, whom an endpoint talks to,
 * which transport carries each class of its operations, how large an active message can be
 * before it travels as fragments (and so before a rendezvous handler is told of it ahead of
 * its data), and what went over it.  Everything here is read from the structures proto keeps
 * anyway (the lanes wireup chose, the counters am.c and ep.c keep, the transport's own
 * counters); nothing is computed on the fast path for it.  Both calls take a field mask, so
 * fields can be added later without breaking callers.
 */
#include <stdio.h>
#include <string.h>

#include "proto/proto_int.h"

static const char *const lane_class[FY_LANE_COUNT] = {"am", "rma", "amo"};

static void lane_attr(const ferry_ep_t *ep, const fy_lane_t *l, const char *cls, int emulated,
                      ferry_ep_lane_attr_t *a)
{
    a->op_class = cls;
    a->transport = l->iface->tl->name;
    a->device = l->iface->tl_iface->dev_name;
    a->emulated = emulated;
    a->cm = fy_wireup_tl_ep_cm(ep, l->tl_ep);
}

ferry_status_t ferry_ep_query(const ferry_ep_t *ep, ferry_ep_attr_t *attr)
{
    FY_EP_GUARD(ep);
    const uint64_t known = FERRY_EP_ATTR_FIELD_PEER_NAME | FERRY_EP_ATTR_FIELD_LANES |
                           FERRY_EP_ATTR_FIELD_AM_SIZES | FERRY_EP_ATTR_FIELD_STATS |
                           FERRY_EP_ATTR_FIELD_STATE;
    if (ep == NULL || attr == NULL)
        return FERRY_ERR_INVALID_PARAM;
    if (attr->field_mask & ~known) {
        fy_error("ferry_ep_query: unknown field_mask bits 0x%llx",
                 (unsigned long long)(attr->field_mask & ~known));
        return FERRY_ERR_INVALID_PARAM;
    }
    uint64_t mask = attr->field_mask;
    if (mask & FERRY_EP_ATTR_FIELD_PEER_NAME) {
        attr->peer_uuid = ep->remote_uuid;
        snprintf(attr->peer_name, sizeof(attr->peer_name), "worker %016llx",
                 (unsigned long long)ep->remote_uuid);
    }
    if (mask & FERRY_EP_ATTR_FIELD_LANES) {
        unsigned n = 0;
        if (ep->state != FY_EP_CLOSED) {
            for (int c = 0; c < FY_LANE_COUNT; c++) {
                if (ep->lanes[c].iface == NULL)
                    continue;
                int emu =
                    (c == FY_LANE_RMA && !ep->rma_native) || (c == FY_LANE_AMO && !ep->amo_native);
                lane_attr(ep, &ep->lanes[c], lane_class[c], emu, &attr->lanes[n++]);
            }
            for (unsigned r = 1; r < ep->nrails && n < FERRY_EP_MAX_LANES; r++)
                lane_attr(ep, &ep->rails[r], "rail", 0, &attr->lanes[n++]);
        }
        attr->nlanes = n;
    }
    if (mask & FERRY_EP_ATTR_FIELD_AM_SIZES) {
        attr->am_header_max = FERRY_AM_HEADER_MAX;
        attr->am_eager_max = ep->state == FY_EP_CLOSED ? 0 : fy_am_eager_max(ep);
        attr->am_max = SIZE_MAX;
    }
    if (mask & FERRY_EP_ATTR_FIELD_STATS) {
        ferry_status_t st = ferry_ep_get_stats(ep, &attr->stats);
        if (st != FERRY_OK)
            return st;
    }
    if (mask & FERRY_EP_ATTR_FIELD_STATE)
        attr->state = ep->state == FY_EP_FAILED   ? ep->failure
                      : ep->state == FY_EP_CLOSED ? FERRY_ERR_NOT_CONNECTED
                                                  : FERRY_OK;
    return FERRY_OK;
}

ferry_status_t ferry_worker_query(const ferry_worker_t *w, ferry_worker_attr_t *attr)
{
    FY_WORKER_GUARD((ferry_worker_t *)w);
    const uint64_t known = FERRY_WORKER_ATTR_FIELD_NAME | FERRY_WORKER_ATTR_FIELD_IFACES |
                           FERRY_WORKER_ATTR_FIELD_COUNTERS | FERRY_WORKER_ATTR_FIELD_AM_SIZES;
    if (w == NULL || attr == NULL)
        return FERRY_ERR_INVALID_PARAM;
    if (attr->field_mask & ~known) {
        fy_error("ferry_worker_query: unknown field_mask bits 0x%llx",
                 (unsigned long long)(attr->field_mask & ~known));
        return FERRY_ERR_INVALID_PARAM;
    }
    uint64_t mask = attr->field_mask;
    if (mask & FERRY_WORKER_ATTR_FIELD_NAME) {
        attr->uuid = w->uuid;
        snprintf(attr->name, sizeof(attr->name), "%s worker %016llx", w->ctx->name,
                 (unsigned long long)w->uuid);
    }
    if (mask & FERRY_WORKER_ATTR_FIELD_IFACES) {
        unsigned n = 0;
        for (unsigned i = 0; i < w->nifaces && n < FERRY_WORKER_MAX_IFACES; i++, n++) {
            const fy_iface_t *fi = &w->ifaces[i];
            ferry_worker_iface_attr_t *a = &attr->ifaces[n];
            a->transport = fi->tl->name;
            a->device = fi->tl_iface->dev_name;
            a->max_short = (fi->attr.caps & FY_TL_CAP_AM_SHORT) ? fi->attr.max_short : 0;
            a->max_bcopy = (fi->attr.caps & FY_TL_CAP_AM_BCOPY) ? fi->attr.max_bcopy : 0;
            a->max_zcopy = (fi->attr.caps & FY_TL_CAP_AM_ZCOPY) ? fi->attr.max_zcopy : 0;
            a->latency_ns = fi->attr.latency_ns;
            a->bandwidth = fi->attr.bandwidth;
        }
        attr->nifaces = n;
    }
    if (mask & FERRY_WORKER_ATTR_FIELD_COUNTERS) {
        attr->neps = 0;
        attr->tx_msgs = attr->tx_bytes = attr->rx_msgs = attr->rx_bytes = attr->errors = 0;
        for (uint32_t i = 0; i < w->eps_cap; i++) {
            const ferry_ep_t *ep = w->eps[i];
            if (ep == NULL)
                continue;
            attr->neps++;
            attr->tx_msgs += ep->stats.tx_msgs;
            attr->tx_bytes += ep->stats.tx_bytes;
            attr->rx_msgs += ep->stats.rx_msgs;
            attr->rx_bytes += ep->stats.rx_bytes;
            attr->errors += ep->stats.errors;
        }
        attr->drops_no_handler = w->drops_no_handler;
        attr->drops_unknown_ep = w->drops_unknown_ep;
        attr->drops_malformed = w->drops_malformed;
    }
    if (mask & FERRY_WORKER_ATTR_FIELD_AM_SIZES) {
        attr->am_id_max = FERRY_AM_ID_MAX;
        attr->am_header_max = FERRY_AM_HEADER_MAX;
        attr->am_rx_max = w->am_rx_max;
    }
    return FERRY_OK;
}

ferry_status_t ferry_worker_get_address(ferry_worker_t *w, void *buf, size_t *len)
{
    if (w == NULL || len == NULL)
        return FERRY_ERR_INVALID_PARAM;
    if (buf == NULL || *len < w->address_len) {
        *len = w->address_len;
        return FERRY_ERR_TRUNCATED;
    }
    memcpy(buf, w->address, w->address_len);
    *len = w->address_len;
    return FERRY_OK;
}

ferry_context_t *fy_worker_context(ferry_worker_t *w)
{
    return w->ctx;
}

void ferry_worker_print_info(const ferry_worker_t *w, void *file)
{
    FILE *f = file != NULL ? file : stdout;
    if (w == NULL)
        return;
    FY_WORKER_GUARD((ferry_worker_t *)w);
    fprintf(f, "worker %016llx: %u interface(s), wait mode %s, %s%s\n", (unsigned long long)w->uuid,
            w->nifaces,
            w->wait_mode == FERRY_WAIT_SPIN       ? "spin"
            : w->wait_mode == FERRY_WAIT_ADAPTIVE ? "adaptive"
                                                  : "block",
            w->thread_mode == FERRY_THREAD_MODE_MULTI ? "multi-threaded" : "single-threaded",
            w->pt_running ? ", progress thread" : "");
    for (unsigned i = 0; i < w->nifaces; i++) {
        const fy_iface_t *fi = &w->ifaces[i];
        fprintf(f,
                "  [%u] %-5s %-10s latency %7.0f ns  bandwidth %7.2f GB/s  short %zu  "
                "bcopy %zu  zcopy %zu  caps 0x%llx\n",
                i, fi->tl->name, fi->tl_iface->dev_name, fi->attr.latency_ns,
                fi->attr.bandwidth / 1e9, fi->attr.max_short, fi->attr.max_bcopy,
                fi->attr.max_zcopy, (unsigned long long)fi->attr.caps);
        if (fi->tl->ops->iface_print != NULL)
            fi->tl->ops->iface_print(fi->tl_iface, f);
    }
    for (uint32_t i = 0; i < w->eps_cap; i++) {
        const ferry_ep_t *ep = w->eps[i];
        if (ep == NULL)
            continue;
        fprintf(f, "  ep %u -> %016llx%s state %d:", ep->id, (unsigned long long)ep->remote_uuid,
                ep->is_reply ? " (reply)" : "", ep->state);
        for (int l = 0; l < FY_LANE_COUNT; l++)
            if (ep->lanes[l].iface != NULL)
                fprintf(f, " %s=%s/%s%s", lane_class[l], ep->lanes[l].iface->tl->name,
                        ep->lanes[l].iface->tl_iface->dev_name,
                        (l == FY_LANE_RMA && !ep->rma_native) ||
                                (l == FY_LANE_AMO && !ep->amo_native)
                            ? "(emulated)"
                            : "");
        const char *cm = fy_wireup_tl_ep_cm(ep, ep->lanes[FY_LANE_AM].tl_ep);
        if (cm != NULL) /* the connection manager of the am lane (cm/cm.c) */
            fprintf(f, " cm=%s", cm);
        for (unsigned r = 0; r < ep->nrails && ep->nrails > 1; r++) /* multi-rail (rails.c) */
            fprintf(f, "%s%s/%s:%u", r == 0 ? " rails=" : "+", ep->rails[r].iface->tl->name,
                    ep->rails[r].iface->tl_iface->dev_name, ep->rail_weight[r]);
        fprintf(f, "  tx %llu msgs rx %llu msgs\n", (unsigned long long)ep->stats.tx_msgs,
                (unsigned long long)ep->stats.rx_msgs);
    }
    if (w->drops_no_handler || w->drops_unknown_ep || w->drops_malformed)
        fprintf(f, "  dropped: %llu without handler, %llu unknown ep, %llu malformed\n",
                (unsigned long long)w->drops_no_handler, (unsigned long long)w->drops_unknown_ep,
                (unsigned long long)w->drops_malformed);
}
