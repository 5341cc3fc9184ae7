/*
 * lanes.c - lane selection: score every pair of a local interface and a remote one for each
 * operation class, choose, and say why.
 *
 * A pair is a candidate when both run the transport, their addresses have the sizes this
 * build expects, the remote interface is not a duplicate of one already listed (the same
 * device address under two names counts once), the transport says it reaches the peer, and a
 * connection manager FERRY_CM selected answers for the local interface (cm/cm.h: direct for
 * transports that connect to an interface address, am for those that need the peer
 * endpoint's; oob and sockaddr answer for any).
 * Each candidate gets a cost per class in nanoseconds for the class's typical operation,
 * computed from the two interfaces' advertised figures only -- the slower latency, the
 * smaller bandwidth, the larger per-message overhead, the capabilities both have -- so the
 * two ends of a pair, each scoring from the same two addresses, compute the same numbers.
 * Ties go to the transport name, then to the device names ordered by worker uuid: again the
 * same on both ends.  The transports derive their figures from what the host tells (link
 * speed from sysfs where the device is real hardware, MTU, loopback or not); see each
 * transport's iface_query.
 *
 * AM short, AM bulk, tag eager and tag rendezvous ride one lane (the AM lane), because the
 * messages of an endpoint are delivered in order.  FERRY_AM_LANE says how it is chosen:
 *   blend (default)  the lowest cost of one short plus one 64 KiB message: the faster stream
 *                    between hosts, the faster small messages where bandwidths are alike;
 *   latency          the lowest cost of one short message; where another candidate moves
 *                    bulk data much faster (between hosts: udp's 1500-byte datagrams against
 *                    tcp's stream) it becomes the bulk lane, and AMs above FERRY_RAILS_THRESH
 *                    go over it as fragments (rails.c), each anchored in the AM lane's order
 *                    by a one-byte first fragment, so the endpoint's order holds.
 * (Measured on the testbed under load, bench/RESULTS.md: latency mode's udp AM lane gives
 * the bulk stream stalls -- udp's acknowledgements run in user space and a loaded machine
 * delays them past the retransmission timeout -- so blend stays the default.)  Both ends
 * compute the same lanes from the same two addresses.  RMA and atomics get the cheapest
 * candidate that does them natively, or are emulated over the AM lane.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

const char *const fy_lane_class_names[FY_CLS_COUNT] = {
    "am short", "am bulk", "tag eager", "tag rndv", "rma", "atomics",
};

/* The typical operation of each class, in bytes. */
#define SHORT_BYTES 8.0
#define EAGER_BYTES 8192.0
#define BULK_BYTES  1048576.0
#define BLEND_BYTES 65536.0
/* A bulk lane apart from the AM lane only where it is this much cheaper for bulk data. */
#define BULK_GAIN 0.8

static double fmax_(double a, double b)
{
    return a > b ? a : b;
}
static double fmin_(double a, double b)
{
    return a < b ? a : b;
}
static double fabs_(double a)
{
    return a < 0 ? -a : a;
}

typedef struct figures {
    double lat, bw, ovh;
    uint32_t caps;
} figures_t;

/* The pair's figures: symmetric in its two ends.  Local figures are rounded to float as the
 * address carries them, so both ends start from the same bits. */
static figures_t pair_figures(const fy_iface_t *fi, const fy_remote_iface_t *ri)
{
    figures_t f;
    double llat = (float)fi->attr.latency_ns, lbw = (float)(fi->attr.bandwidth / 1e6);
    double lovh = (float)fi->attr.overhead_ns;
    f.lat = fmax_(llat, ri->latency_ns);
    f.ovh = fmax_(lovh, ri->overhead_ns);
    double bw_mbs = lbw > 0 && ri->bandwidth_mbs > 0 ? fmin_(lbw, ri->bandwidth_mbs)
                                                     : fmax_(lbw, ri->bandwidth_mbs);
    f.bw = bw_mbs > 0 ? bw_mbs * 1e6 : 1e8;
    f.caps = (uint32_t)fi->attr.caps & ri->caps;
    return f;
}

static void score(ferry_worker_t *w, const fy_iface_t *fi, const fy_remote_iface_t *ri,
                  int rma_emulate, fy_lane_cand_t *c)
{
    figures_t f = pair_figures(fi, ri);
    double prio = fi->attr.priority; /* the same transport on both ends: symmetric */
    double xfer = 1e9 / f.bw;        /* ns per byte */
    int am = (f.caps & (FY_TL_CAP_AM_SHORT | FY_TL_CAP_AM_BCOPY)) != 0;
    int rma = (f.caps & (FY_TL_CAP_PUT | FY_TL_CAP_GET)) == (FY_TL_CAP_PUT | FY_TL_CAP_GET);
    int amo = fy_amo_widths(w, &fi->attr, f.caps) != 0; /* a width with every op (rma.c) */
    for (int k = 0; k < FY_CLS_COUNT; k++)
        c->cost[k] = -1;
    c->am_cost = -1;
    if (am) {
        c->cost[FY_CLS_AM_SHORT] = f.lat + f.ovh + SHORT_BYTES * xfer - prio;
        c->cost[FY_CLS_AM_BULK] = f.lat + f.ovh + BULK_BYTES * xfer - prio;
        c->cost[FY_CLS_TAG_EAGER] = f.lat + f.ovh + EAGER_BYTES * xfer - prio;
        /* RTS, then the receiver reads (or CTS and DATA where it cannot) */
        c->cost[FY_CLS_TAG_RNDV] =
            (f.caps & FY_TL_CAP_GET ? 2 * f.lat : 3 * f.lat) + 2 * f.ovh + BULK_BYTES * xfer - prio;
        c->am_cost = w->ctx->opts.am_lane_mode == FY_AM_LANE_LATENCY
                         ? c->cost[FY_CLS_AM_SHORT]
                         : 2 * (f.lat + f.ovh) + (SHORT_BYTES + BLEND_BYTES) * xfer - prio;
    }
    if (rma && !rma_emulate)
        c->cost[FY_CLS_RMA] = f.lat + BULK_BYTES * xfer - prio;
    if (amo && !rma_emulate)
        c->cost[FY_CLS_AMO] = f.lat - prio;
}

/* Is candidate a better than b for a cost (equal costs: the symmetric tie-break)? */
static int better(ferry_worker_t *w, const fy_remote_addr_t *ra, const fy_lane_cand_t *a, double ca,
                  const fy_lane_cand_t *b, double cb)
{
    if (b == NULL)
        return 1;
    double tol = 1e-9 * fmax_(fabs_(ca), fabs_(cb));
    if (ca < cb - tol)
        return 1;
    if (ca > cb + tol)
        return 0;
    const fy_iface_t *la = &w->ifaces[a->local], *lb = &w->ifaces[b->local];
    int r = strcmp(la->tl->name, lb->tl->name);
    if (r != 0)
        return r < 0;
    const char *da = la->tl_iface->dev_name, *db = lb->tl_iface->dev_name;
    const char *ra_dev = ra->ifaces[a->remote].dev, *rb_dev = ra->ifaces[b->remote].dev;
    int lower = w->uuid < ra->uuid;
    r = strcmp(lower ? da : ra_dev, lower ? db : rb_dev);
    if (r == 0)
        r = strcmp(lower ? ra_dev : da, lower ? rb_dev : db);
    return r < 0;
}

static void choose_rails(ferry_worker_t *w, const fy_remote_addr_t *ra, fy_lane_plan_t *plan);
static void choose_bulk(ferry_worker_t *w, const fy_remote_addr_t *ra, fy_lane_plan_t *plan);

static const fy_lane_fail_t *find_fail(const fy_lane_fail_t *fails, unsigned n, unsigned bit)
{
    for (unsigned k = 0; k < n; k++)
        if (fails[k].bit == bit)
            return &fails[k];
    return NULL;
}

static const fy_iface_t *find_local_tl(ferry_worker_t *w, const char *tl)
{
    for (unsigned i = 0; i < w->nifaces; i++)
        if (strcmp(w->ifaces[i].tl->name, tl) == 0)
            return &w->ifaces[i];
    return NULL;
}

/* The best connection manager FERRY_CM selected that answers for this interface (cm.h
 * query), or NULL.  Wireup asks it first to connect the lane (fy_cm_connect_lane). */
static const fy_cm_component_t *cm_connects(ferry_worker_t *w, const fy_iface_t *fi)
{
    fy_cm_iface_info_t info = {fi->tl->name, fi->tl_iface->dev_name, fi->attr.caps};
    return fy_cm_select_for_iface(&w->ctx->cms, &info, NULL);
}

void fy_lanes_plan(ferry_worker_t *w, const fy_remote_addr_t *ra, const fy_lane_fail_t *fails,
                   unsigned nfails, int only_local, fy_lane_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    plan->am = plan->bulk = plan->rma = plan->amo = -1;
    int rma_emulate = w->ctx->opts.rma_emulate;
    for (unsigned j = 0; j < ra->niface; j++) {
        const fy_remote_iface_t *ri = &ra->ifaces[j];
        if (find_local_tl(w, ri->tl) == NULL) {
            /* a transport we do not run (FERRY_TLS, or no device here): named once */
            if (strstr(plan->remote_only, ri->tl) == NULL) {
                size_t o = strlen(plan->remote_only);
                snprintf(plan->remote_only + o, sizeof(plan->remote_only) - o, "%s%s",
                         o != 0 ? ", " : "", ri->tl);
            }
            plan->nremote_only++;
            continue;
        }
        int dup_of = -1;
        for (unsigned k = 0; k < j && dup_of < 0; k++) {
            const fy_remote_iface_t *rk = &ra->ifaces[k];
            if (strcmp(rk->tl, ri->tl) == 0 && rk->dev_addr_len == ri->dev_addr_len &&
                ri->dev_addr_len != 0 && memcmp(rk->dev_addr, ri->dev_addr, ri->dev_addr_len) == 0)
                dup_of = (int)k;
        }
        for (unsigned i = 0; i < w->nifaces && plan->ncand < FY_LANE_MAX_CAND; i++) {
            fy_iface_t *fi = &w->ifaces[i];
            if (strcmp(fi->tl->name, ri->tl) != 0)
                continue;
            fy_lane_cand_t *c = &plan->cand[plan->ncand++];
            c->local = (int)i;
            c->remote = (int)j;
            score(w, fi, ri, rma_emulate, c);
            unsigned bit = fy_lane_pair_bit((int)i, (int)j);
            const fy_lane_fail_t *f;
            const fy_cm_component_t *cm = cm_connects(w, fi);
            c->cm = cm != NULL ? cm->name : "none";
            if (ri->dev_addr_len != fi->attr.device_addr_len ||
                ri->iface_addr_len != fi->attr.iface_addr_len) {
                snprintf(c->why, sizeof(c->why),
                         "address sizes differ (%u+%u bytes, expected %zu+%zu): another build?",
                         ri->dev_addr_len, ri->iface_addr_len, fi->attr.device_addr_len,
                         fi->attr.iface_addr_len);
            } else if (dup_of >= 0) {
                snprintf(c->why, sizeof(c->why), "the same device address as its %s: counted once",
                         ra->ifaces[dup_of].dev);
            } else if (!fi->tl->ops->iface_is_reachable(fi->tl_iface, ri->dev_addr,
                                                        ri->iface_addr)) {
                if (fi->tl->ops->iface_unreachable_why != NULL)
                    fi->tl->ops->iface_unreachable_why(fi->tl_iface, ri->dev_addr, ri->iface_addr,
                                                       c->why, sizeof(c->why));
                if (c->why[0] == '\0')
                    snprintf(c->why, sizeof(c->why), "not reachable");
            } else if (cm == NULL) {
                snprintf(
                    c->why, sizeof(c->why), "no connection manager in FERRY_CM connects on it (%s)",
                    (fi->attr.caps & FY_TL_CAP_CONNECT_TO_IFACE) ? "direct, oob, am or sockaddr"
                                                                 : "am");
            } else if ((f = find_fail(fails, nfails, bit)) != NULL) {
                snprintf(c->why, sizeof(c->why), "failed: %.80s", f->why);
            } else if (c->am_cost < 0) {
                snprintf(c->why, sizeof(c->why), "carries no active messages");
            } else {
                c->usable = 1;
            }
        }
    }
    const fy_lane_cand_t *best_am = NULL, *best_rma = NULL, *best_amo = NULL;
    for (unsigned k = 0; k < plan->ncand; k++) {
        const fy_lane_cand_t *c = &plan->cand[k];
        if (!c->usable)
            continue;
        if ((only_local < 0 || c->local == only_local) &&
            better(w, ra, c, c->am_cost, best_am, best_am ? best_am->am_cost : 0)) {
            best_am = c;
            plan->am = (int)k;
        }
        if (c->cost[FY_CLS_RMA] >= 0 && better(w, ra, c, c->cost[FY_CLS_RMA], best_rma,
                                               best_rma ? best_rma->cost[FY_CLS_RMA] : 0)) {
            best_rma = c;
            plan->rma = (int)k;
        }
        if (c->cost[FY_CLS_AMO] >= 0 && better(w, ra, c, c->cost[FY_CLS_AMO], best_amo,
                                               best_amo ? best_amo->cost[FY_CLS_AMO] : 0)) {
            best_amo = c;
            plan->amo = (int)k;
        }
    }
    choose_bulk(w, ra, plan);
    choose_rails(w, ra, plan);
}

static int local_is_loopback(ferry_worker_t *w, int local)
{
    const fy_iface_t *fi = &w->ifaces[local];
    for (unsigned d = 0; d < fi->ctl->ndevs; d++)
        if (strcmp(fi->ctl->devs[d].name, fi->tl_iface->dev_name) == 0)
            return fi->ctl->devs[d].is_loopback;
    return 1; /* unknown: not a network path */
}

/*
 * Multi-rail: besides the AM lane (rail 0), up to FERRY_MAX_RAILS - 1 more candidates for
 * striping bulk data (rails.c), cheapest bulk cost first.  A rail must be a path of its own:
 * a local device and a remote device no chosen rail uses (tcp and udp over one wire share its
 * bandwidth), on a network device (shared memory and loopback are one memory bus), carrying
 * active messages, and good: at least a quarter of the AM lane's bandwidth.  Both ends compute
 * the same set from the same two addresses (symmetric figures and tie-break).
 */
/*
 * The bulk lane: the candidate with the cheapest bulk cost, where it is not the AM lane and is
 * at least 1 / BULK_GAIN times cheaper for bulk data than the AM lane (the AM lane picked for
 * latency may move bulk data poorly).  Only on network devices: within a host the AM lane
 * (shared memory, loopback) moves bulk data well.
 */
static void choose_bulk(ferry_worker_t *w, const fy_remote_addr_t *ra, fy_lane_plan_t *plan)
{
    if (plan->am < 0 || w->ctx->opts.am_lane_mode != FY_AM_LANE_LATENCY ||
        local_is_loopback(w, plan->cand[plan->am].local))
        return;
    const fy_lane_cand_t *am = &plan->cand[plan->am], *best = NULL;
    int best_k = -1;
    for (unsigned k = 0; k < plan->ncand; k++) {
        const fy_lane_cand_t *c = &plan->cand[k];
        if (!c->usable || c->cost[FY_CLS_AM_BULK] < 0 || local_is_loopback(w, c->local))
            continue;
        if (better(w, ra, c, c->cost[FY_CLS_AM_BULK], best,
                   best ? best->cost[FY_CLS_AM_BULK] : 0)) {
            best = c;
            best_k = (int)k;
        }
    }
    if (best != NULL && best_k != plan->am &&
        best->cost[FY_CLS_AM_BULK] < BULK_GAIN * am->cost[FY_CLS_AM_BULK])
        plan->bulk = best_k;
}

static void choose_rails(ferry_worker_t *w, const fy_remote_addr_t *ra, fy_lane_plan_t *plan)
{
    unsigned long max = w->ctx->opts.max_rails;
    if (max > FY_MAX_RAILS)
        max = FY_MAX_RAILS;
    plan->nrails = 0;
    if (plan->am < 0)
        return;
    const fy_lane_cand_t *am = &plan->cand[plan->am];
    plan->rails[0] = plan->am;
    plan->rail_bw[0] = pair_figures(&w->ifaces[am->local], &ra->ifaces[am->remote]).bw;
    plan->nrails = 1;
    /* the first rail that carries bandwidth: the AM lane, or the bulk lane after it */
    unsigned first = 0;
    if (plan->bulk >= 0) {
        const fy_lane_cand_t *b = &plan->cand[plan->bulk];
        plan->rail_bw[0] = 0; /* the anchors only */
        plan->rails[1] = plan->bulk;
        plan->rail_bw[1] = pair_figures(&w->ifaces[b->local], &ra->ifaces[b->remote]).bw;
        plan->nrails = 2;
        first = 1;
    }
    if (max <= 1 || local_is_loopback(w, am->local))
        return;
    while (plan->nrails - first < max && plan->nrails < FY_MAX_RAILS) {
        const fy_lane_cand_t *best = NULL;
        int best_k = -1;
        for (unsigned k = 0; k < plan->ncand; k++) {
            const fy_lane_cand_t *c = &plan->cand[k];
            if (!c->usable || c->cost[FY_CLS_AM_BULK] < 0 || local_is_loopback(w, c->local))
                continue;
            int clash = (int)k == plan->am;
            for (unsigned r = first; r < plan->nrails && !clash; r++) {
                const fy_lane_cand_t *o = &plan->cand[plan->rails[r]];
                clash = strcmp(w->ifaces[o->local].tl_iface->dev_name,
                               w->ifaces[c->local].tl_iface->dev_name) == 0 ||
                        strcmp(ra->ifaces[o->remote].dev, ra->ifaces[c->remote].dev) == 0;
            }
            double bw = pair_figures(&w->ifaces[c->local], &ra->ifaces[c->remote]).bw;
            if (clash || bw < plan->rail_bw[first] / 4)
                continue;
            if (better(w, ra, c, c->cost[FY_CLS_AM_BULK], best,
                       best ? best->cost[FY_CLS_AM_BULK] : 0)) {
                best = c;
                best_k = (int)k;
            }
        }
        if (best == NULL)
            break;
        plan->rails[plan->nrails] = best_k;
        plan->rail_bw[plan->nrails++] =
            pair_figures(&w->ifaces[best->local], &ra->ifaces[best->remote]).bw;
    }
}

static void cand_name(ferry_worker_t *w, const fy_remote_addr_t *ra, const fy_lane_cand_t *c,
                      char *buf, size_t len)
{
    snprintf(buf, len, "%s %s->%s", w->ifaces[c->local].tl->name,
             w->ifaces[c->local].tl_iface->dev_name, ra->ifaces[c->remote].dev);
}

void fy_lanes_print(ferry_worker_t *w, const fy_remote_addr_t *ra, const fy_lane_plan_t *plan,
                    FILE *f)
{
    char name[96];
    fprintf(f, "lanes to worker %016llx (%u interface(s)):\n", (unsigned long long)ra->uuid,
            ra->niface);
    if (plan->am < 0) {
        fprintf(f, "  no lane: no transport reaches it\n");
    } else {
        for (int k = 0; k < FY_CLS_COUNT; k++) {
            int chosen = k == FY_CLS_RMA ? plan->rma : k == FY_CLS_AMO ? plan->amo : plan->am;
            const char *note = "";
            if (k == FY_CLS_AM_BULK && plan->bulk >= 0) {
                chosen = plan->bulk;
                note = " (the bulk lane: above FERRY_RAILS_THRESH, anchored in the am lane)";
            } else if (chosen < 0) {
                chosen = plan->am;
                note = " (emulated over the am lane)";
            } else if (k <= FY_CLS_TAG_RNDV) {
                note = " (the am lane: one lane keeps the endpoint's order)";
            }
            const fy_lane_cand_t *c = &plan->cand[chosen];
            cand_name(w, ra, c, name, sizeof(name));
            double s = c->cost[k] >= 0   ? c->cost[k]
                       : k == FY_CLS_AMO ? c->cost[FY_CLS_AM_SHORT] + c->cost[FY_CLS_AM_SHORT]
                                         : c->cost[FY_CLS_AM_BULK];
            fprintf(f, "  %-9s %-28s score %10.1f ns, cm %s%s\n", fy_lane_class_names[k], name, s,
                    c->cm, note);
        }
    }
    if (plan->nrails > 1) {
        double sum = 0;
        for (unsigned r = 0; r < plan->nrails; r++)
            sum += plan->rail_bw[r];
        fprintf(f, "  rails     %u, am messages above %zu B striped by bandwidth:", plan->nrails,
                w->ctx->opts.rails_thresh);
        for (unsigned r = 0; r < plan->nrails; r++) {
            cand_name(w, ra, &plan->cand[plan->rails[r]], name, sizeof(name));
            fprintf(f, "%s %s (%.0f%%)", r != 0 ? "," : "", name, 100.0 * plan->rail_bw[r] / sum);
        }
        fprintf(f, "\n");
    } else if (plan->am >= 0) {
        fprintf(f, "  rails     1 (the am lane alone: %s)\n",
                w->ctx->opts.max_rails <= 1 ? "FERRY_MAX_RAILS=1"
                                            : "no other good path on separate devices");
    }
    for (unsigned k = 0; k < plan->ncand; k++) {
        const fy_lane_cand_t *c = &plan->cand[k];
        cand_name(w, ra, c, name, sizeof(name));
        int is_rail = 0;
        for (unsigned r = 1; r < plan->nrails; r++)
            is_rail |= plan->rails[r] == (int)k;
        if (is_rail)
            continue;
        if (!c->usable) {
            fprintf(f, "  rejected  %-28s %s\n", name, c->why);
        } else if ((int)k != plan->am && (int)k != plan->rma && (int)k != plan->amo &&
                   (int)k != plan->bulk) {
            fprintf(f, "  passed    %-28s am score %.1f ns > %.1f ns of the chosen\n", name,
                    c->am_cost, plan->cand[plan->am].am_cost);
        }
    }
    if (plan->nremote_only != 0)
        fprintf(f, "  rejected  %u interface(s) of %s: not running here (FERRY_TLS or no device)\n",
                plan->nremote_only, plan->remote_only);
}

ferry_status_t fy_lanes_explain(ferry_worker_t *w, const void *addr, size_t len, FILE *f)
{
    fy_remote_addr_t *ra = malloc(sizeof(*ra));
    fy_lane_plan_t *plan = malloc(sizeof(*plan));
    ferry_status_t st = FERRY_ERR_NO_MEMORY;
    if (ra != NULL && plan != NULL) {
        st = fy_address_unpack(addr, len, ra);
        if (st == FERRY_OK) {
            fy_lanes_plan(w, ra, NULL, 0, -1, plan);
            fy_lanes_print(w, ra, plan, f);
        }
    }
    free(plan);
    free(ra);
    return st;
}
