/*
 * cm.c - the registry of connection managers, their selection by FERRY_CM, and the three
 * small managers that wrap what proto already does: direct, oob and am.
 *
 * The registry is a plain array (no constructors: static archives drop them).  FERRY_CM is a
 * list like FERRY_TLS: names to keep, or with a leading ^ names to drop; an unknown name is a
 * configuration error that names the accepted ones.  Among the selected managers that answer
 * for an interface, the highest priority wins (0-100, as in the design).
 *
 *   direct   the worker address names each interface's own address: connect to it.
 *   oob      the peer published its worker address in the bootstrap key-value store (a
 *            launched job): fetch it, then connect as direct does.
 *   am       exchange endpoint addresses by active messages over a lane already connected
 *            (for connect-to-endpoint transports).  The exchange itself is proto's wireup
 *            (WIREUP_REQ / WIREUP_REP); this entry gives it a name, a priority and a place
 *            in FERRY_CM.
 *   sockaddr see sockaddr.c.
 */
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

/* --- direct ------------------------------------------------------------------------------- */

static int direct_query(const fy_cm_iface_info_t *iface)
{
    return (iface->tl_caps & FY_TL_CAP_CONNECT_TO_IFACE) ? 50 : -1;
}

static ferry_status_t direct_start_connect(const fy_cm_host_t *host, const fy_cm_target_t *t,
                                           void **ep_p)
{
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
    if (t->kv_key == NULL || host->kv_get == NULL)
        return FERRY_ERR_INVALID_PARAM;
    uint8_t buf[FY_CM_ADDR_MAX];
    size_t len = sizeof(buf);
    ferry_status_t st = host->kv_get(host->arg, t->kv_key, buf, &len);
    if (st != FERRY_OK)
        return st;
    return host->connect_address(host->arg, buf, len, ep_p);
}

static const fy_cm_ops_t oob_ops = {.query = oob_query, .start_connect = oob_start_connect};
const fy_cm_component_t fy_cm_oob = {
    "oob", "worker addresses through the bootstrap's key-value store (a launched job)", &oob_ops};

/* --- am ----------------------------------------------------------------------------------- */

static int am_query(const fy_cm_iface_info_t *iface)
{
    /* For transports whose endpoints need the peer endpoint's address: it travels by AM
     * over a lane that is already up. */
    return (iface->tl_caps & FY_TL_CAP_CONNECT_TO_IFACE) ? -1 : 40;
}

static ferry_status_t am_start_connect(const fy_cm_host_t *host, const fy_cm_target_t *t,
                                       void **ep_p)
{
    (void)host;
    (void)t;
    (void)ep_p;
    return FERRY_ERR_UNSUPPORTED; /* driven by proto's wireup, not started from here */
}

static const fy_cm_ops_t am_ops = {.query = am_query, .start_connect = am_start_connect};
const fy_cm_component_t fy_cm_am = {
    "am", "endpoint addresses exchanged by active messages over a connected lane", &am_ops};
