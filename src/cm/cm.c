/*
 * cm.c - the registry of connection managers, their selection by FERRY_CM, the lane connect
 * that wireup goes through, and the three small managers direct, oob and am.
 *
 * The registry is a plain array (no constructors: static archives drop them).  FERRY_CM is a
 * list like FERRY_TLS: names to keep, or with a leading ^ names to drop; an unknown name is a
 * configuration error that names the accepted ones.  Among the selected managers that answer
 * for an interface, the highest priority wins (0-100, as in the design).
 *
 * Wireup connects every lane it chose through fy_cm_connect_lane: the managers that answer
 * for the lane's interface are asked, the one the endpoint's address came through first, then
 * the others best first; the first that takes the lane makes its transport endpoint and is
 * told (ep_finalize) when it goes.  A manager takes only the lanes
 * of endpoints whose worker address it can vouch for, so FERRY_CM decides how endpoints
 * connect and not only what ferry_info prints:
 *
 *   direct   the worker address in hand names each interface's own address: connect to it.
 *            Any address the application (or a peer's wireup) gave.
 *   oob      a peer known by rank: fetch its worker address from the bootstrap key-value
 *            store (a launched job), make the endpoint, and connect the lanes of endpoints
 *            made that way.  With direct excluded, a launched job connects through it.
 *   am       endpoint addresses exchanged by active messages over a lane already connected:
 *            proto's WIREUP_REQ carries the peer's worker address and endpoint id, and the
 *            endpoint made from it (the reply endpoint, wireup.c) is connected through am.
 *   sockaddr see sockaddr.c: endpoints from ip:port and from a listener's requests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm/cm.h"
#include "tl/tl.h"
#include "util/log.h"

static const fy_cm_component_t *const registry[] = {&fy_cm_direct, &fy_cm_am, &fy_cm_oob,
                                                    &fy_cm_sockaddr};
#define NREG (sizeof(registry) / sizeof(registry[0]))

const char fy_cm_names[] = "direct, am, oob, sockaddr";

ferry_status_t fy_cm_set_init(fy_cm_set_t *set, const fy_config_list_t *sel)
{
    memset(set, 0, sizeof(*set));
    for (unsigned i = 0; i < sel->count; i++) {
        int known = 0;
        for (size_t r = 0; r < NREG; r++)
            known |= strcmp(sel->names[i], registry[r]->name) == 0;
        if (!known && strcmp(sel->names[i], "all") != 0) {
            fy_error("FERRY_CM: '%s' is not a connection manager; accepted: %s, or all, or a "
                     "list after ^ to exclude",
                     sel->names[i], fy_cm_names);
            return FERRY_ERR_BAD_CONFIG;
        }
    }
    for (size_t r = 0; r < NREG && set->n < FY_CM_MAX; r++) {
        const fy_cm_component_t *c = registry[r];
        if (!fy_config_list_selects(sel, c->name))
            continue;
        if (c->ops->reg != NULL)
            c->ops->reg();
        ferry_status_t st = c->ops->init != NULL ? c->ops->init() : FERRY_OK;
        if (st == FERRY_ERR_UNSUPPORTED)
            continue;
        if (st != FERRY_OK) {
            fy_cm_set_finalize(set);
            return st;
        }
        set->cms[set->n++] = c;
    }
    return FERRY_OK;
}

void fy_cm_set_finalize(fy_cm_set_t *set)
{
    for (unsigned i = 0; i < set->n; i++)
        if (set->cms[i]->ops->finalize != NULL)
            set->cms[i]->ops->finalize();
    set->n = 0;
}

const fy_cm_component_t *fy_cm_find(const fy_cm_set_t *set, const char *name)
{
    for (unsigned i = 0; i < set->n; i++)
        if (strcmp(set->cms[i]->name, name) == 0)
            return set->cms[i];
    return NULL;
}

const fy_cm_component_t *fy_cm_select_for_iface(const fy_cm_set_t *set,
                                                const fy_cm_iface_info_t *iface, int *prio_p)
{
    const fy_cm_component_t *best = NULL;
    int best_prio = -1;
    for (unsigned i = 0; i < set->n; i++) {
        int p = set->cms[i]->ops->query(iface);
        if (p > 100)
            p = 100;
        if (p > best_prio) {
            best_prio = p;
            best = set->cms[i];
        }
    }
    if (prio_p != NULL)
        *prio_p = best_prio;
    return best;
}

ferry_status_t fy_cm_lane_connect(const fy_cm_target_t *t, void **ep_p)
{
    fy_tl_iface_t *ti = t->tl_iface;
    fy_tl_ep_t *te = NULL;
    ferry_status_t st = ti->component->ops->ep_create(ti, t->dev_addr, t->iface_addr, &te);
    if (st == FERRY_OK)
        *ep_p = te;
    return st;
}

ferry_status_t fy_cm_connect_lane(const fy_cm_set_t *set, const fy_cm_iface_info_t *iface,
                                  const fy_cm_target_t *t, void **ep_p,
                                  const fy_cm_component_t **cm_p, char *why, size_t why_len)
{
    /* The common case first, without asking every manager: the one the address came through
     * (direct for an address the application gave), where it is selected and answers. */
    const fy_cm_component_t *first = t->via != NULL ? t->via : &fy_cm_direct;
    int first_at = -1;
    for (unsigned i = 0; i < set->n && first_at < 0; i++)
        if (set->cms[i] == first)
            first_at = (int)i;
    if (first_at >= 0 && first->ops->query(iface) >= 0) {
        ferry_status_t st = first->ops->start_connect(NULL, t, ep_p);
        if (st == FERRY_OK) {
            *cm_p = first;
            return FERRY_OK;
        }
        if (st != FERRY_ERR_UNSUPPORTED) { /* the transport refused: so would it for others */
            snprintf(why, why_len, "%s: %s", first->name, ferry_status_string(st));
            return st;
        }
    }
    int prio[FY_CM_MAX];
    for (unsigned i = 0; i < set->n; i++)
        prio[i] = (int)i == first_at ? 1000 : set->cms[i]->ops->query(iface);
    size_t o = 0;
    why[0] = '\0';
    ferry_status_t st = FERRY_ERR_UNSUPPORTED;
    for (;;) {
        int best = -1;
        for (unsigned i = 0; i < set->n; i++)
            if (prio[i] >= 0 && (best < 0 || prio[i] > prio[best]))
                best = (int)i;
        if (best < 0)
            break;
        prio[best] = -1;
        const fy_cm_component_t *cm = set->cms[best];
        st = cm->ops->start_connect(NULL, t, ep_p);
        if (st == FERRY_OK) {
            *cm_p = cm;
            return FERRY_OK;
        }
        if (st != FERRY_ERR_UNSUPPORTED) { /* the transport refused: so would it for others */
            snprintf(why, why_len, "%s: %s", cm->name, ferry_status_string(st));
            return st;
        }
        if (o < why_len) { /* the managers that do not vouch for the address, listed */
            int n = snprintf(why + o, why_len - o, "%s%s", o != 0 ? ", " : "", cm->name);
            o += n > 0 ? (size_t)n : 0;
        }
    }
    if (o != 0 && o < why_len)
        snprintf(why + o, why_len - o, ": not how its address came (FERRY_CM)");
    else if (o == 0)
        snprintf(why, why_len, "no connection manager in FERRY_CM connects on it");
    return st;
}

void fy_cm_lane_finalize(const fy_cm_component_t *cm, void *tl_ep)
{
    if (cm != NULL && cm->ops->ep_finalize != NULL)
        cm->ops->ep_finalize(tl_ep);
    fy_tl_ep_t *te = tl_ep;
    te->iface->component->ops->ep_destroy(te);
}

/* --- direct ------------------------------------------------------------------------------- */

static int direct_query(const fy_cm_iface_info_t *iface)
{
    return (iface->tl_caps & FY_TL_CAP_CONNECT_TO_IFACE) ? 50 : -1;
}

static ferry_status_t direct_start_connect(const fy_cm_host_t *host, const fy_cm_target_t *t,
                                           void **ep_p)
{
    if (t->tl_iface != NULL)
        return fy_cm_lane_connect(t, ep_p); /* any worker address in hand */
    if (t->address == NULL || t->address_len == 0)
        return FERRY_ERR_INVALID_PARAM;
    return host->connect_address(host->arg, t->address, t->address_len, ep_p);
}

static const fy_cm_ops_t direct_ops = {.query = direct_query,
                                       .start_connect = direct_start_connect};
const fy_cm_component_t fy_cm_direct = {
    "direct", "connect to the interface address carried in the peer's worker address", &direct_ops};

/* --- oob ---------------------------------------------------------------------------------- */

static int oob_query(const fy_cm_iface_info_t *iface)
{
    (void)iface;
    return 30;
}

static ferry_status_t oob_start_connect(const fy_cm_host_t *host, const fy_cm_target_t *t,
                                        void **ep_p)
{
    if (t->tl_iface != NULL) /* a lane: of an endpoint made from the store */
        return t->via == &fy_cm_oob ? fy_cm_lane_connect(t, ep_p) : FERRY_ERR_UNSUPPORTED;
    if (t->kv_key == NULL || host == NULL || host->kv_get == NULL)
        return FERRY_ERR_INVALID_PARAM;
    uint8_t small[512], *buf = small;
    size_t len = sizeof(small);
    ferry_status_t st = host->kv_get(host->arg, t->rank, t->kv_key, buf, &len);
    if (st == FERRY_ERR_TRUNCATED && len <= FY_CM_ADDR_MAX && (buf = malloc(len)) != NULL)
        st = host->kv_get(host->arg, t->rank, t->kv_key, buf, &len);
    else if (st == FERRY_ERR_TRUNCATED)
        st = buf == NULL ? FERRY_ERR_NO_MEMORY : FERRY_ERR_INVALID_PARAM;
    if (st == FERRY_OK)
        st = host->connect_address(host->arg, buf, len, ep_p);
    if (buf != small)
        free(buf);
    return st;
}

static const fy_cm_ops_t oob_ops = {.query = oob_query, .start_connect = oob_start_connect};
const fy_cm_component_t fy_cm_oob = {
    "oob", "worker addresses through the bootstrap's key-value store (a launched job)", &oob_ops};

/* --- am ----------------------------------------------------------------------------------- */

static int am_query(const fy_cm_iface_info_t *iface)
{
    /* First for transports whose endpoints need the peer endpoint's address: it travels by
     * AM over a lane that is already up.  Below oob elsewhere: there it connects only the
     * endpoints made from a peer's wireup message. */
    return (iface->tl_caps & FY_TL_CAP_CONNECT_TO_IFACE) ? 20 : 40;
}

static ferry_status_t am_start_connect(const fy_cm_host_t *host, const fy_cm_target_t *t,
                                       void **ep_p)
{
    if (t->tl_iface != NULL) /* a lane: of an endpoint made from a WIREUP_REQ */
        return t->via == &fy_cm_am ? fy_cm_lane_connect(t, ep_p) : FERRY_ERR_UNSUPPORTED;
    /* an endpoint: the worker address a peer's WIREUP_REQ carried (wireup.c) */
    if (t->address == NULL || t->address_len == 0 || host == NULL)
        return FERRY_ERR_INVALID_PARAM;
    return host->connect_address(host->arg, t->address, t->address_len, ep_p);
}

static const fy_cm_ops_t am_ops = {.query = am_query, .start_connect = am_start_connect};
const fy_cm_component_t fy_cm_am = {
    "am", "endpoint addresses exchanged by active messages over a connected lane", &am_ops};
