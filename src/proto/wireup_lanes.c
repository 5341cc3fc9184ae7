/*
 * wireup_lanes.c - making an endpoint's lanes: the transport endpoints of a lane plan (lanes.c
 * scores the candidates, cm.c's connection managers make each endpoint), the candidates that
 * failed and why, and what the plan and its failures look like in a log or an error message.
 *
 * wireup.c calls fy_wireup_choose when an endpoint connects and again when a lane fails and it
 * falls back on the next candidate: the transport endpoints the new plan still uses are kept
 * (one may be delivering the message that made us choose again), the others destroyed, and a
 * candidate whose endpoint cannot even be made joins the failed ones before the plan is made
 * again.  The interfaces' endpoint counts kept here decide what a plain progress pass polls
 * (fy_worker_poll_plan).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

void fy_wireup_tl_ep_destroy(ferry_ep_t *ep, unsigned i)
{
    fy_tl_ep_t *te = ep->tl_eps[i];
    fy_iface_t *fi = te->iface->params.am_arg;
    if (fi->neps > 0 && --fi->neps == 0)
        fy_worker_poll_plan(ep->worker);
    const fy_cm_set_t *cms = &ep->worker->ctx->cms;
    fy_cm_lane_finalize(ep->tl_ep_cm[i] < cms->n ? cms->cms[ep->tl_ep_cm[i]] : NULL, te);
}

const char *fy_wireup_tl_ep_cm(const ferry_ep_t *ep, const fy_tl_ep_t *tl_ep)
{
    const fy_cm_set_t *cms = &ep->worker->ctx->cms;
    for (unsigned i = 0; i < ep->ntl_eps && tl_ep != NULL; i++)
        if (ep->tl_eps[i] == tl_ep)
            return ep->tl_ep_cm[i] < cms->n ? cms->cms[ep->tl_ep_cm[i]]->name : NULL;
    return NULL;
}

/* Make the transport endpoint of a lane through the connection managers (cm.c): the best
 * that answers for the interface and vouches for how the peer's address came (ep->via). */
static ferry_status_t lane_connect(ferry_ep_t *ep, fy_iface_t *fi, const fy_remote_iface_t *ri,
                                   fy_tl_ep_t **tl_ep_p, uint8_t *cm_p, char *why, size_t len)
{
    const fy_cm_set_t *cms = &ep->worker->ctx->cms;
    fy_cm_iface_info_t info = {fi->tl->name, fi->tl_iface->dev_name, fi->attr.caps};
    fy_cm_target_t t = {.tl_iface = fi->tl_iface,
                        .dev_addr = ri->dev_addr,
                        .iface_addr = ri->iface_addr,
                        .via = ep->via};
    const fy_cm_component_t *cm = NULL;
    void *te = NULL;
    ferry_status_t st = fy_cm_connect_lane(cms, &info, &t, &te, &cm, why, len);
    if (st != FERRY_OK)
        return st;
    unsigned k = 0;
    while (k < cms->n && cms->cms[k] != cm)
        k++;
    *cm_p = (uint8_t)k;
    *tl_ep_p = te;
    return FERRY_OK;
}

void fy_wireup_destroy_tl_eps(ferry_ep_t *ep)
{
    for (unsigned i = 0; i < ep->ntl_eps; i++)
        fy_wireup_tl_ep_destroy(ep, i);
    ep->ntl_eps = 0;
    memset(ep->lanes, 0, sizeof(ep->lanes));
    ep->nrails = 0;
    ep->rma_native = ep->amo_native = 0;
    ep->put_short_max = 0;
}

void fy_wireup_cand_label(ferry_worker_t *w, const fy_remote_addr_t *ra, unsigned bit, char *buf,
                          size_t len)
{
    int i = (int)(bit / FY_ADDR_MAX_IFACES), j = (int)(bit % FY_ADDR_MAX_IFACES);
    const fy_tl_ops_t *ops = w->ifaces[i].tl->ops;
    char where[64];
    if (ops->addr_str != NULL) {
        ops->addr_str(ra->ifaces[j].dev_addr, ra->ifaces[j].iface_addr, where, sizeof(where));
        snprintf(buf, len, "%s %s (%s->%s)", w->ifaces[i].tl->name, where,
                 w->ifaces[i].tl_iface->dev_name, ra->ifaces[j].dev);
    } else {
        snprintf(buf, len, "%s %s->%s", w->ifaces[i].tl->name, w->ifaces[i].tl_iface->dev_name,
                 ra->ifaces[j].dev);
    }
}

void fy_wireup_add_fail(fy_lane_fail_t *fails, unsigned *nfails, unsigned bit, const char *why)
{
    for (unsigned k = 0; k < *nfails; k++)
        if (fails[k].bit == bit)
            return;
    if (*nfails == FY_WIREUP_MAX_FAILS)
        return;
    fails[*nfails].bit = bit;
    snprintf(fails[*nfails].why, sizeof(fails[*nfails].why), "%s", why);
    (*nfails)++;
}

/* Every rejected candidate and why, "; "-separated, for an error message. */
void fy_wireup_plan_why(ferry_worker_t *w, const fy_remote_addr_t *ra, const fy_lane_plan_t *plan,
                        char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (unsigned k = 0; k < plan->ncand && o < len; k++) {
        const fy_lane_cand_t *c = &plan->cand[k];
        if (c->usable)
            continue;
        char name[160];
        fy_wireup_cand_label(w, ra, fy_lane_pair_bit(c->local, c->remote), name, sizeof(name));
        int n = snprintf(buf + o, len - o, "%s%s: %s", o != 0 ? "; " : "", name, c->why);
        o += n > 0 ? (size_t)n : 0;
    }
    if (plan->nremote_only != 0 && o < len)
        snprintf(buf + o, len - o, "%s%s: not running here (FERRY_TLS or no device)",
                 o != 0 ? "; " : "", plan->remote_only);
}

void fy_wireup_log_plan(ferry_ep_t *ep, const fy_remote_addr_t *ra, const fy_lane_plan_t *plan)
{
    if (fy_log_level_current < (int)FY_LOG_INFO)
        return;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return;
    fy_lanes_print(ep->worker, ra, plan, f);
    /* the plan names the manager asked first; the one that connected may be another (the
     * one the peer's address came through) */
    static const char *const cls[FY_LANE_COUNT] = {"am", "rma", "amo"};
    fprintf(f, "  connected by");
    for (int l = 0; l < FY_LANE_COUNT; l++) {
        const char *cm = fy_wireup_tl_ep_cm(ep, ep->lanes[l].tl_ep);
        if (cm != NULL)
            fprintf(f, " %s=%s", cls[l], cm);
    }
    fprintf(f, "\n");
    fclose(f);
    if (len > 0 && text[len - 1] == '\n')
        text[len - 1] = '\0';
    fy_info("endpoint %u: %s", ep->id, text);
    free(text);
}

/*
 * Choose the lanes (without the failed candidates) and make their transport endpoints.  An
 * endpoint the new lanes still use is kept (it may be the one delivering the message that
 * made us choose again); the others are destroyed.  A candidate whose endpoint cannot even be
 * made joins the failed ones and the choice is made again.  On success *plan is the plan
 * used and lane_bit the pair of each lane; FERRY_ERR_UNREACHABLE when no candidate is left.
 */
ferry_status_t fy_wireup_choose(ferry_ep_t *ep, const fy_remote_addr_t *ra, fy_lane_fail_t *fails,
                                unsigned *nfails, int only_local, fy_lane_plan_t *plan,
                                int *lane_bit, int planned)
{
    ferry_worker_t *w = ep->worker;
    for (;; planned = 0) {
        if (!planned)
            fy_lanes_plan(w, ra, fails, *nfails, only_local, plan);
        if (plan->am < 0)
            return FERRY_ERR_UNREACHABLE;
        /* the lanes, then the extra rails (multi-rail, rails.c) */
        enum { NWANT = FY_LANE_COUNT + FY_MAX_RAILS - 1 };
        int which[NWANT] = {plan->am, plan->rma, plan->amo};
        int nwant = FY_LANE_COUNT;
        for (unsigned r = 1; r < plan->nrails; r++)
            which[nwant++] = plan->rails[r];
        unsigned want[NWANT];
        fy_lane_t rails[FY_MAX_RAILS];
        for (int l = 0; l < nwant; l++) {
            const fy_lane_cand_t *c = &plan->cand[which[l] >= 0 ? which[l] : plan->am];
            want[l] = fy_lane_pair_bit(c->local, c->remote);
        }
        /* keep the endpoints of pairs still wanted, destroy the rest */
        unsigned n = 0;
        for (unsigned i = 0; i < ep->ntl_eps; i++) {
            int keep = 0;
            for (int l = 0; l < nwant; l++)
                keep |= ep->tl_ep_pair[i] == want[l];
            if (keep) {
                ep->tl_eps[n] = ep->tl_eps[i];
                ep->tl_ep_cm[n] = ep->tl_ep_cm[i];
                ep->tl_ep_pair[n++] = ep->tl_ep_pair[i];
            } else {
                fy_wireup_tl_ep_destroy(ep, i);
            }
        }
        ep->ntl_eps = n;
        memset(ep->lanes, 0, sizeof(ep->lanes));
        ep->put_short_max = 0;
        ferry_status_t st = FERRY_OK;
        char why[FY_LANE_WHY_LEN];
        int l;
        for (l = 0; l < nwant; l++) {
            unsigned i;
            for (i = 0; i < ep->ntl_eps && ep->tl_ep_pair[i] != want[l]; i++)
                ;
            const fy_lane_cand_t *c = &plan->cand[which[l] >= 0 ? which[l] : plan->am];
            fy_iface_t *fi = &w->ifaces[c->local];
            if (i == ep->ntl_eps) {
                const fy_remote_iface_t *ri = &ra->ifaces[c->remote];
                fy_tl_ep_t *tl_ep;
                st = lane_connect(ep, fi, ri, &tl_ep, &ep->tl_ep_cm[i], why, sizeof(why));
                if (st != FERRY_OK)
                    break;
                tl_ep->owner = ep;
                if (fi->neps++ == 0)
                    fy_worker_poll_plan(w);
                ep->tl_ep_pair[i] = (uint16_t)want[l];
                ep->tl_eps[ep->ntl_eps++] = tl_ep;
            }
            fy_lane_t *lane = l < FY_LANE_COUNT ? &ep->lanes[l] : &rails[l - FY_LANE_COUNT];
            lane->iface = fi;
            lane->tl_ep = ep->tl_eps[i];
            if (l < FY_LANE_COUNT)
                lane_bit[l] = (int)want[l];
        }
        if (st == FERRY_OK) {
            ep->rma_native = plan->rma >= 0;
            const fy_iface_t *rfi = ep->lanes[FY_LANE_RMA].iface;
            if (ep->rma_native && rfi->tl->ops->put_short != NULL) {
                ep->put_short = rfi->tl->ops->put_short;
                ep->put_short_max = rfi->attr.max_put_short;
            }
            ep->amo_native = 0;
            if (plan->amo >= 0) { /* the widths the amo lane does with every op (rma.c) */
                const fy_lane_cand_t *c = &plan->cand[plan->amo];
                const fy_iface_t *fi = &w->ifaces[c->local];
                ep->amo_native =
                    (int)fy_amo_widths(w, &fi->attr, fi->attr.caps & ra->ifaces[c->remote].caps);
            }
            fy_rails_set(ep, plan, rails, (unsigned)(nwant - FY_LANE_COUNT));
            return FERRY_OK;
        }
        fy_wireup_add_fail(fails, nfails, want[l], why);
        if (st == FERRY_ERR_NO_MEMORY) {
            fy_wireup_destroy_tl_eps(ep);
            return st;
        }
    }
}

int fy_wireup_is_loopback(const fy_iface_t *fi)
{
    for (unsigned d = 0; d < fi->ctl->ndevs; d++)
        if (strcmp(fi->ctl->devs[d].name, fi->tl_iface->dev_name) == 0)
            return fi->ctl->devs[d].is_loopback;
    return 0;
}
