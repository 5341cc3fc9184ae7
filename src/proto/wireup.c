/*
 * wireup.c - the worker address blob, lane selection, and the wireup exchange.
 *
 * The address lists, per open interface: transport name, device, device and interface
 * addresses, latency, bandwidth and capabilities (the UCX address blob).  Creating an
 * endpoint scores every pair of a local interface and a reachable remote one for each
 * operation class -- AM, RMA, atomics -- and takes the best (the UCP wireup of the seed notes).
 * RMA and atomics prefer a transport that does them natively; without one they are emulated
 * over the AM lane.
 *
 * Then the endpoint sends WIREUP_REQ on its AM lane: "I am worker U, endpoint E; here is my
 * address".  The peer makes (or finds) its reply endpoint to us and answers WIREUP_REP with its
 * own endpoint id, after which our messages name it directly.  Messages sent before the
 * answer name their sender instead (FY_AM_F_SRC), so the first message costs no round trip.
 *
 * Address wire format (host byte order):
 *   u32 magic "FYWA" | u8 version | u8 niface | u16 0 | u64 worker uuid |
 *   niface x { u8 tl_len | tl name | u8 dev_len | dev name | u16 dev_addr_len | dev_addr |
 *              u16 iface_addr_len | iface_addr | f32 latency ns | f32 bandwidth MB/s |
 *              u32 caps }
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

typedef struct fy_remote_iface {
    char tl[16];
    char dev[32];
    const uint8_t *dev_addr, *iface_addr;
    uint16_t dev_addr_len, iface_addr_len;
    float latency_ns, bandwidth_mbs;
    uint32_t caps;
} fy_remote_iface_t;

typedef struct fy_remote_addr {
    uint64_t uuid;
    unsigned niface;
    fy_remote_iface_t ifaces[FY_MAX_IFACES];
} fy_remote_addr_t;

ferry_status_t fy_address_pack(ferry_worker_t *w)
{
    size_t need = 16;
    for (unsigned i = 0; i < w->nifaces; i++) {
        fy_iface_t *fi = &w->ifaces[i];
        need += 1 + strlen(fi->tl->name) + 1 + strlen(fi->tl_iface->dev_name) + 2 +
                fi->attr.device_addr_len + 2 + fi->attr.iface_addr_len + 12;
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
        float lat = (float)fi->attr.latency_ns, bw = (float)(fi->attr.bandwidth / 1e6);
        uint32_t caps = (uint32_t)fi->attr.caps;
        memcpy(p, &lat, 4);
        memcpy(p + 4, &bw, 4);
        memcpy(p + 8, &caps, 4);
        p += 12;
    }
    free(w->address);
    w->address = buf;
    w->address_len = (size_t)(p - buf);
    return FERRY_OK;
}

/* Parse and check every length against the blob's end: an address comes from outside. */
static ferry_status_t address_unpack(const void *addr, size_t len, fy_remote_addr_t *ra)
{
    const uint8_t *p = addr, *end = p + len;
    uint32_t magic;
    if (addr == NULL || len < 16)
        return FERRY_ERR_INVALID_ADDR;
    memcpy(&magic, p, 4);
    if (magic != FY_ADDR_MAGIC || p[4] != FY_ADDR_VERSION || p[5] > FY_MAX_IFACES)
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
        if (p + ri->iface_addr_len + 12 > end)
            return FERRY_ERR_INVALID_ADDR;
        ri->iface_addr = p;
        p += ri->iface_addr_len;
        memcpy(&ri->latency_ns, p, 4);
        memcpy(&ri->bandwidth_mbs, p + 4, 4);
        memcpy(&ri->caps, p + 8, 4);
        p += 12;
    }
    return p == end ? FERRY_OK : FERRY_ERR_INVALID_ADDR;
}

/* Cost of a pair for a class, in ns for a typical operation (lower is better); <0: unusable. */
static double lane_cost(int cls, const fy_iface_t *fi, const fy_remote_iface_t *ri)
{
    double lat = fi->attr.latency_ns > ri->latency_ns ? fi->attr.latency_ns : ri->latency_ns;
    double bw = fi->attr.bandwidth;
    double rbw = (double)ri->bandwidth_mbs * 1e6;
    if (rbw > 0 && rbw < bw)
        bw = rbw;
    if (bw <= 0)
        bw = 1e8;
    uint64_t caps = fi->attr.caps & ri->caps;
    switch (cls) {
    case FY_LANE_AM:
        if (!(caps & (FY_TL_CAP_AM_SHORT | FY_TL_CAP_AM_BCOPY)))
            return -1;
        return lat + fi->attr.overhead_ns + 8192.0 / bw * 1e9 - fi->attr.priority;
    case FY_LANE_RMA:
        if ((caps & (FY_TL_CAP_PUT | FY_TL_CAP_GET)) != (FY_TL_CAP_PUT | FY_TL_CAP_GET))
            return -1;
        return lat + 1048576.0 / bw * 1e9 - fi->attr.priority;
    case FY_LANE_AMO:
        if ((caps & (FY_TL_CAP_AMO32 | FY_TL_CAP_AMO64)) != (FY_TL_CAP_AMO32 | FY_TL_CAP_AMO64))
            return -1;
        return lat - fi->attr.priority;
    }
    return -1;
}

static ferry_status_t lane_ep(ferry_ep_t *ep, fy_iface_t *fi, const fy_remote_iface_t *ri,
                              fy_lane_t *lane, int *pair_ep_idx, unsigned pair)
{
    if (pair_ep_idx[pair] < 0) {
        fy_tl_ep_t *tl_ep;
        ferry_status_t st =
            fi->tl->ops->ep_create(fi->tl_iface, ri->dev_addr, ri->iface_addr, &tl_ep);
        if (st != FERRY_OK)
            return st;
        tl_ep->owner = ep;
        fi->neps++;
        pair_ep_idx[pair] = (int)ep->ntl_eps;
        ep->tl_eps[ep->ntl_eps++] = tl_ep;
    }
    lane->iface = fi;
    lane->tl_ep = ep->tl_eps[pair_ep_idx[pair]];
    return FERRY_OK;
}

/* Choose lanes and create the transport endpoints. */
ferry_status_t fy_ep_connect(ferry_ep_t *ep, const void *addr, size_t len)
{
    ferry_worker_t *w = ep->worker;
    fy_remote_addr_t *ra = malloc(sizeof(*ra));
    if (ra == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_status_t st = address_unpack(addr, len, ra);
    if (st != FERRY_OK) {
        fy_error("ferry_ep_create: the worker address (%zu bytes) is malformed", len);
        goto out;
    }
    ep->remote_uuid = ra->uuid;
    /* reachable[i][j]: local iface i reaches remote iface j */
    int best[FY_LANE_COUNT][2];
    double best_cost[FY_LANE_COUNT];
    for (int c = 0; c < FY_LANE_COUNT; c++) {
        best[c][0] = best[c][1] = -1;
        best_cost[c] = 0;
    }
    for (unsigned i = 0; i < w->nifaces; i++) {
        fy_iface_t *fi = &w->ifaces[i];
        for (unsigned j = 0; j < ra->niface; j++) {
            fy_remote_iface_t *ri = &ra->ifaces[j];
            if (strcmp(ri->tl, fi->tl->name) != 0 || ri->dev_addr_len != fi->attr.device_addr_len ||
                ri->iface_addr_len != fi->attr.iface_addr_len ||
                !fi->tl->ops->iface_is_reachable(fi->tl_iface, ri->dev_addr, ri->iface_addr))
                continue;
            for (int c = 0; c < FY_LANE_COUNT; c++) {
                if (c != FY_LANE_AM && w->ctx->opts.rma_emulate)
                    continue;
                double cost = lane_cost(c, fi, ri);
                if (cost >= 0 && (best[c][0] < 0 || cost < best_cost[c])) {
                    best[c][0] = (int)i;
                    best[c][1] = (int)j;
                    best_cost[c] = cost;
                }
            }
        }
    }
    if (best[FY_LANE_AM][0] < 0) {
        fy_error("ferry_ep_create: no transport reaches worker %016llx (it offers %u "
                 "interface(s); FERRY_TLS may exclude the ones it shares with us)",
                 (unsigned long long)ra->uuid, ra->niface);
        st = FERRY_ERR_UNREACHABLE;
        goto out;
    }
    int pair_ep_idx[FY_MAX_IFACES * FY_MAX_IFACES];
    for (size_t k = 0; k < sizeof(pair_ep_idx) / sizeof(pair_ep_idx[0]); k++)
        pair_ep_idx[k] = -1;
    for (int c = 0; c < FY_LANE_COUNT; c++) {
        int i = best[c][0], j = best[c][1];
        if (i < 0) { /* emulated over the AM lane */
            ep->lanes[c] = ep->lanes[FY_LANE_AM];
            continue;
        }
        st = lane_ep(ep, &w->ifaces[i], &ra->ifaces[j], &ep->lanes[c], pair_ep_idx,
                     (unsigned)(i * FY_MAX_IFACES + j));
        if (st != FERRY_OK) {
            fy_error("ferry_ep_create: %s endpoint to %016llx failed: %s", w->ifaces[i].tl->name,
                     (unsigned long long)ra->uuid, ferry_status_string(st));
            goto out;
        }
        if (c == FY_LANE_RMA)
            ep->rma_native = 1;
        if (c == FY_LANE_AMO)
            ep->amo_native = 1;
    }
    fy_debug("ep %u -> %016llx: am %s, rma %s%s, amo %s%s", ep->id, (unsigned long long)ra->uuid,
             ep->lanes[FY_LANE_AM].iface->tl->name, ep->lanes[FY_LANE_RMA].iface->tl->name,
             ep->rma_native ? "" : " (emulated)", ep->lanes[FY_LANE_AMO].iface->tl->name,
             ep->amo_native ? "" : " (emulated)");
out:
    free(ra);
    return st;
}

static uint64_t src_key(uint64_t uuid, uint32_t ep_id)
{
    return fy_hash_mix64(uuid ^ ((uint64_t)ep_id * 0x9e3779b97f4a7c15ull));
}

/* Find the reply endpoint for messages from (uuid, ep id). */
ferry_ep_t *fy_wireup_find_src(ferry_worker_t *w, uint64_t uuid, uint32_t ep_id)
{
    ferry_ep_t *ep = fy_hash_get(&w->by_src, src_key(uuid, ep_id));
    if (ep != NULL && ep->remote_uuid == uuid && ep->remote_id == ep_id)
        return ep;
    return NULL;
}

void fy_wireup_forget(ferry_ep_t *ep)
{
    if (ep->is_reply) {
        uint64_t k = src_key(ep->remote_uuid, ep->remote_id);
        if (fy_hash_get(&ep->worker->by_src, k) == ep)
            fy_hash_del(&ep->worker->by_src, k);
    }
}

static void wireup_req(fy_iface_t *fi, const fy_wireup_msg_t *m, const void *addr)
{
    ferry_worker_t *w = fi->worker;
    ferry_ep_t *ep = fy_wireup_find_src(w, m->src_uuid, m->src_ep_id);
    if (ep == NULL) {
        ferry_status_t st = fy_ep_create_internal(w, addr, m->addr_len, 1, &ep);
        if (st != FERRY_OK) {
            fy_warn("wireup from %016llx ep %u: cannot reach it back: %s",
                    (unsigned long long)m->src_uuid, m->src_ep_id, ferry_status_string(st));
            return;
        }
        ep->remote_id = m->src_ep_id;
        ep->state = FY_EP_CONNECTED;
        if (fy_hash_put(&w->by_src, src_key(m->src_uuid, m->src_ep_id), ep) != FERRY_OK) {
            fy_ep_fail(ep, FERRY_ERR_NO_MEMORY);
            return;
        }
    }
    fy_wireup_msg_t rep = {w->uuid, m->src_uuid, ep->id, m->src_ep_id, 0, 0};
    fy_op_t *op = fy_op_get(w, ep, FY_OP_AM, NULL);
    if (op == NULL)
        return;
    op->am_id = FY_TLAM_WIREUP_REP;
    memcpy(op->hdr, &rep, sizeof(rep));
    op->hdr_len = sizeof(rep);
    op->iovcnt = 0;
    fy_ep_submit(ep, op);
}

static void wireup_rep(fy_iface_t *fi, const fy_wireup_msg_t *m)
{
    ferry_worker_t *w = fi->worker;
    ferry_ep_t *ep = fy_worker_ep_lookup(w, m->dst_ep_id);
    if (ep == NULL || m->dst_uuid != w->uuid || ep->remote_uuid != m->src_uuid) {
        w->drops_unknown_ep++;
        return;
    }
    if (ep->state == FY_EP_WIREUP) {
        ep->remote_id = m->src_ep_id;
        ep->state = FY_EP_CONNECTED;
    }
}

void fy_wireup_am_cb(void *arg, uint8_t am_id, const void *data, size_t len)
{
    fy_iface_t *fi = arg;
    fy_wireup_msg_t m;
    if (len < sizeof(m)) {
        fi->worker->drops_malformed++;
        return;
    }
    memcpy(&m, data, sizeof(m));
    if (am_id == FY_TLAM_WIREUP_REQ) {
        if (m.addr_len != len - sizeof(m) || m.dst_uuid != fi->worker->uuid) {
            fi->worker->drops_malformed++;
            return;
        }
        wireup_req(fi, &m, (const uint8_t *)data + sizeof(m));
    } else {
        wireup_rep(fi, &m);
    }
}
