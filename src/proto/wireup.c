/*
 * wireup.c - connecting an endpoint: its lanes, the WIREUP exchange, falling back to the next
 * lane when one does not connect, and one endpoint per pair of workers (the maps from a peer to
 * its endpoints: wireup_peers.c).
 *
 * Creating an endpoint parses the peer's address (wireup_addr.c), scores the candidates
 * (lanes.c), creates the transport endpoints of the chosen lanes (wireup_lanes.c) and sends
 * WIREUP_REQ on the AM lane: "I am worker U, endpoint E; here is my address".  The peer pairs
 * it with its own endpoint to us if it has one still waiting for an answer (both sides
 * connecting at once end in one endpoint each, paired with each other), or makes a reply
 * endpoint, which its application later gets from ferry_ep_create (the same object, so a
 * handler's endpoint is the application's, with its user data).  It answers WIREUP_REP with
 * its endpoint id, after which our messages name it directly; until then they name their
 * sender (FY_AM_F_SRC).
 *
 * Fallback.  A lane may not connect: refused, filtered, silent.  When the endpoint has another
 * usable candidate on a network device, everything after the WIREUP_REQ waits behind a hold
 * operation at the head of the endpoint's pending queue until the answer comes, so nothing
 * is lost with a lane that never worked.  If the transport reports the lane failed, or no
 * answer came within FERRY_WIREUP_TIMEOUT, the candidate is marked with the reason, the
 * endpoint's transport endpoints are made again on the next best candidate, WIREUP_REQ goes
 * out there, and the held operations follow it in order once it answers.  The peer answers on
 * the interface the request came in on, moving every lane off the candidates ranked before it
 * (it tried them), and its answer goes ahead of what it queued itself: when both sides connect
 * at once and the peer's own request was lost on a lane that never connected, the answer is
 * how we learn the id its held messages name.  When every candidate failed, the endpoint fails with
 * FERRY_ERR_UNREACHABLE and an error naming each candidate and why.  On loopback devices and
 * shared memory, where the peer is checked to be reachable and a connect fails only when it
 * is gone, nothing is held: the first message costs no round trip there.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"
#include "util/clock.h"

/* A peer's address as given, shared by the endpoints created to it one after another. */
typedef struct fy_peer_blob {
    unsigned refs;
    size_t len;
    uint8_t bytes[];
} fy_peer_blob_t;

/*
 * The last address this worker connected to, parsed and planned (without failures): an
 * application creating endpoints to the same worker again and again (or a peer connecting to
 * us again and again) parses and scores its address once.  The plan depends only on the two
 * addresses and this worker's interfaces, which do not change; a choice that must depend on
 * anything else (load, the number of endpoints on a rail) calls fy_wireup_cache_free first.
 */
struct fy_wireup_cache {
    fy_peer_blob_t *blob; /* one reference; NULL: empty */
    fy_remote_addr_t ra;  /* parsed over blob->bytes */
    fy_lane_plan_t plan;  /* no failures, any local interface */
};

static void blob_put(fy_peer_blob_t *b)
{
    if (b != NULL && --b->refs == 0)
        free(b);
}

void fy_wireup_cache_free(ferry_worker_t *w)
{
    if (w->wu_cache == NULL)
        return;
    blob_put(w->wu_cache->blob);
    free(w->wu_cache);
    w->wu_cache = NULL;
}

/*
 * What an endpoint keeps to fall back on another candidate, while it waits for its answer.  It
 * is small (a reference to the peer's address and a few words): the parsed address and the
 * list of failed candidates, which are large, are made only when a lane fails, so an endpoint
 * that never falls back pays for neither (100,000 endpoints to a worker offering every
 * transport).
 */
typedef struct fy_wireup_state {
    fy_peer_blob_t *blob;  /* the peer's address (one reference) */
    fy_remote_addr_t *ra;  /* blob parsed: made at the first failure */
    fy_lane_fail_t *fails; /* FY_WIREUP_MAX_FAILS of them, made at the first failure */
    unsigned nfails;
    int lane_bit[FY_LANE_COUNT]; /* the (local, remote) pair of each lane */
    int hold;                    /* a hold op is in the pending queue */
    int switch_pending;          /* a lane failed: choose again at the next check */
    uint64_t deadline;           /* no answer by then: the AM lane failed */
    fy_op_t *req_op;             /* a WIREUP_REQ the transport has not taken yet */
} fy_wireup_state_t;

/* The parsed address and the failure list, made when first needed; 0 when out of memory. */
static int wu_grow(fy_wireup_state_t *wu)
{
    if (wu->fails == NULL && (wu->fails = calloc(FY_WIREUP_MAX_FAILS, sizeof(*wu->fails))) == NULL)
        return 0;
    if (wu->ra == NULL) {
        fy_remote_addr_t *ra = malloc(sizeof(*ra));
        if (ra == NULL)
            return 0;
        if (fy_address_unpack(wu->blob->bytes, wu->blob->len, ra) != FERRY_OK) {
            free(ra); /* parsed once already: cannot happen */
            return 0;
        }
        wu->ra = ra;
    }
    return 1;
}

/* Mark the candidate failed in the endpoint's state (out of memory: switch_lane fails it). */
static void wu_fail(fy_wireup_state_t *wu, unsigned bit, const char *why)
{
    if (wu_grow(wu))
        fy_wireup_add_fail(wu->fails, &wu->nfails, bit, why);
}

/* The cache holding addr (parsed and planned), made anew when addr is another address. */
static ferry_status_t cache_get(ferry_worker_t *w, const void *addr, size_t len,
                                struct fy_wireup_cache **cache_p)
{
    struct fy_wireup_cache *c = w->wu_cache;
    if (c != NULL && c->blob != NULL && c->blob->len == len &&
        memcmp(c->blob->bytes, addr, len) == 0) {
        *cache_p = c;
        return FERRY_OK;
    }
    if (c == NULL && (c = w->wu_cache = calloc(1, sizeof(*c))) == NULL)
        return FERRY_ERR_NO_MEMORY;
    blob_put(c->blob);
    c->blob = malloc(sizeof(*c->blob) + len);
    if (c->blob == NULL)
        return FERRY_ERR_NO_MEMORY;
    c->blob->refs = 1;
    c->blob->len = len;
    memcpy(c->blob->bytes, addr, len);
    ferry_status_t st = fy_address_unpack(c->blob->bytes, len, &c->ra);
    if (st != FERRY_OK) {
        blob_put(c->blob);
        c->blob = NULL;
        return st;
    }
    fy_lanes_plan(w, &c->ra, NULL, 0, -1, &c->plan);
    *cache_p = c;
    return FERRY_OK;
}

ferry_status_t fy_ep_connect(ferry_ep_t *ep, const void *addr, size_t len)
{
    ferry_worker_t *w = ep->worker;
    fy_lane_fail_t fails[FY_WIREUP_MAX_FAILS];
    unsigned nfails = 0;
    int lane_bit[FY_LANE_COUNT];
    struct fy_wireup_cache *c = NULL;
    ferry_status_t st =
        addr != NULL && len != 0 ? cache_get(w, addr, len, &c) : FERRY_ERR_INVALID_PARAM;
    if (st == FERRY_ERR_NO_MEMORY)
        return st;
    if (st != FERRY_OK) {
        fy_error("ferry_ep_create: the worker address (%zu bytes) is malformed", len);
        return st;
    }
    const fy_remote_addr_t *ra = &c->ra;
    fy_lane_plan_t *plan = &c->plan;
    fy_peer_blob_t *blob = c->blob;
    blob->refs++; /* ours until the end, whatever the cache becomes */
    ep->remote_uuid = ra->uuid;
    st = fy_wireup_choose(ep, ra, fails, &nfails, -1, plan, lane_bit, 1);
    if (nfails != 0)
        c->blob = NULL; /* choose planned again with failures: the plan is not the cached one */
    if (st != FERRY_OK) {
        char why[1024];
        fy_wireup_plan_why(w, ra, plan, why, sizeof(why));
        fy_error("ferry_ep_create: no transport reaches worker %016llx (it offers %u "
                 "interface(s)): %s",
                 (unsigned long long)ra->uuid, ra->niface, why[0] != '\0' ? why : "no candidate");
        goto out;
    }
    fy_wireup_log_plan(ep, ra, plan);
    if (!ep->is_reply) {
        unsigned others = 0;
        for (unsigned k = 0; k < plan->ncand; k++)
            others += plan->cand[k].usable && (int)k != plan->am;
        /* Fallback state only where there is something to fall back to: with one candidate
         * a failed lane fails the endpoint.  The state is small and shares the address. */
        if (others != 0) {
            fy_wireup_state_t *wu = calloc(1, sizeof(*wu));
            if (wu == NULL) {
                st = FERRY_ERR_NO_MEMORY;
                goto out;
            }
            wu->blob = blob;
            blob->refs++;
            memcpy(wu->lane_bit, lane_bit, sizeof(lane_bit));
            wu->hold = !fy_wireup_is_loopback(ep->lanes[FY_LANE_AM].iface);
            /* candidates whose transport endpoint could not be made stay failed */
            if (nfails != 0 && wu_grow(wu))
                for (unsigned k = 0; k < nfails; k++)
                    wu->fails[wu->nfails++] = fails[k];
            ep->wu = wu;
        }
    }
out:
    blob->refs -= nfails != 0; /* the cache's reference, given up above */
    blob_put(blob);
    return st;
}

/* ---- the exchange --------------------------------------------------------------------- */

static fy_op_t *req_op_new(ferry_ep_t *ep)
{
    ferry_worker_t *w = ep->worker;
    fy_op_t *op = fy_op_get(w, ep, FY_OP_AM, NULL);
    size_t need = sizeof(fy_wireup_msg_t) + w->address_len;
    if (op == NULL || (op->copy = malloc(need)) == NULL) {
        if (op != NULL)
            fy_op_put(op);
        return NULL;
    }
    fy_wireup_msg_t m = {w->uuid, ep->remote_uuid, ep->id, 0, (uint32_t)w->address_len, 0};
    memcpy(op->copy, &m, sizeof(m));
    memcpy((uint8_t *)op->copy + sizeof(m), w->address, w->address_len);
    op->am_id = FY_TLAM_WIREUP_REQ;
    op->hdr_len = 0;
    op->iov[0].iov_base = op->copy;
    op->iov[0].iov_len = need;
    op->iovcnt = 1;
    return op;
}

static void count_op(fy_op_t *op)
{
    if (!op->counted) {
        op->counted = 1;
        op->ep->outstanding++;
    }
}

ferry_status_t fy_wireup_start(ferry_ep_t *ep)
{
    fy_wireup_peer_note(ep, 0);
    fy_op_t *op = req_op_new(ep);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_status_t st = fy_ep_submit(ep, op);
    if (st < 0)
        return st;
    fy_wireup_state_t *wu = ep->wu;
    if (wu != NULL && wu->hold) {
        fy_op_t *h = fy_op_get(ep->worker, ep, FY_OP_WIREUP_HOLD, NULL);
        if (h == NULL)
            return FERRY_ERR_NO_MEMORY;
        wu->deadline = fy_time_ns() + ep->worker->ctx->opts.wireup_timeout_ns;
        st = fy_ep_submit(ep, h);
    }
    return st < 0 ? st : FERRY_OK;
}

static void wireup_done(ferry_ep_t *ep)
{
    fy_wireup_state_t *wu = ep->wu;
    if (wu == NULL)
        return;
    if (wu->req_op != NULL)
        fy_op_put(wu->req_op);
    blob_put(wu->blob);
    free(wu->ra);
    free(wu->fails);
    free(wu);
    ep->wu = NULL;
}

/* The peer's endpoint id is known: messages name it from now on. */
static ferry_status_t connected(ferry_ep_t *ep, uint32_t remote_id)
{
    ferry_worker_t *w = ep->worker;
    ep->remote_id = remote_id;
    ep->state = FY_EP_CONNECTED;
    wireup_done(ep);
    if (ep->is_reply)
        fy_wireup_peer_note(ep, 1);
    return fy_wireup_src_note(w, ep);
}

/* Send WIREUP_REQ on the (new) AM lane, ahead of the held operations. */
static void send_req_now(ferry_ep_t *ep, fy_op_t *op)
{
    fy_wireup_state_t *wu = ep->wu;
    ferry_status_t st = fy_op_start(op);
    wu->req_op = NULL;
    if (st == FERRY_INPROGRESS) {
        count_op(op);
    } else if (st == FERRY_OK) {
        fy_op_put(op);
    } else if (st == FERRY_ERR_NO_RESOURCE) {
        wu->req_op = op; /* retried by the hold */
    } else {
        fy_op_put(op);
        wu_fail(wu, (unsigned)wu->lane_bit[FY_LANE_AM], ferry_status_string(st));
        wu->switch_pending = 1;
    }
}

static void fail_all(ferry_ep_t *ep)
{
    fy_wireup_state_t *wu = ep->wu;
    char list[1024];
    size_t o = 0;
    list[0] = '\0';
    for (unsigned k = 0; k < wu->nfails && o < sizeof(list); k++) {
        char name[160];
        fy_wireup_cand_label(ep->worker, wu->ra, wu->fails[k].bit, name, sizeof(name));
        int n = snprintf(list + o, sizeof(list) - o, "%s%s: %s", k != 0 ? "; " : "", name,
                         wu->fails[k].why);
        o += n > 0 ? (size_t)n : 0;
    }
    fy_error("endpoint %u to worker %016llx: no lane connects: %s", ep->id,
             (unsigned long long)ep->remote_uuid, list);
    fy_ep_fail(ep, FERRY_ERR_UNREACHABLE);
}

/* The AM lane failed: move every lane to the next best candidate, or fail the endpoint. */
static void switch_lane(ferry_ep_t *ep)
{
    fy_wireup_state_t *wu = ep->wu;
    if (wu->req_op != NULL) {
        fy_op_put(wu->req_op);
        wu->req_op = NULL;
    }
    if (!wu_grow(wu)) {
        fy_ep_fail(ep, FERRY_ERR_NO_MEMORY);
        return;
    }
    fy_lane_plan_t *plan = malloc(sizeof(*plan));
    ferry_status_t st = plan != NULL ? fy_wireup_choose(ep, wu->ra, wu->fails, &wu->nfails, -1,
                                                        plan, wu->lane_bit, 0)
                                     : FERRY_ERR_NO_MEMORY;
    if (st != FERRY_OK) {
        free(plan);
        fail_all(ep);
        return;
    }
    char name[160], old[160] = "a lane";
    fy_wireup_cand_label(ep->worker, wu->ra, (unsigned)wu->lane_bit[FY_LANE_AM], name,
                         sizeof(name));
    if (wu->nfails != 0)
        fy_wireup_cand_label(ep->worker, wu->ra, wu->fails[wu->nfails - 1].bit, old, sizeof(old));
    fy_info("endpoint %u to worker %016llx: %s failed (%s); trying %s", ep->id,
            (unsigned long long)ep->remote_uuid, old,
            wu->nfails != 0 ? wu->fails[wu->nfails - 1].why : "", name);
    fy_wireup_log_plan(ep, wu->ra, plan);
    free(plan);
    fy_tag_ep_init(ep);
    wu->deadline = fy_time_ns() + ep->worker->ctx->opts.wireup_timeout_ns;
    fy_op_t *op = req_op_new(ep);
    if (op == NULL) {
        fy_ep_fail(ep, FERRY_ERR_NO_MEMORY);
        return;
    }
    send_req_now(ep, op);
}

ferry_status_t fy_wireup_hold(fy_op_t *op)
{
    ferry_ep_t *ep = op->ep;
    fy_wireup_state_t *wu = ep->wu;
    if (ep->state != FY_EP_WIREUP || wu == NULL)
        return FERRY_OK;
    if (!wu->switch_pending && fy_time_ns() >= wu->deadline) {
        char why[48];
        snprintf(why, sizeof(why), "no answer in %.1f s",
                 (double)ep->worker->ctx->opts.wireup_timeout_ns / 1e9);
        wu_fail(wu, (unsigned)wu->lane_bit[FY_LANE_AM], why);
        wu->switch_pending = 1;
    }
    for (int tries = 0; wu->switch_pending && tries < FY_WIREUP_MAX_FAILS; tries++) {
        wu->switch_pending = 0;
        switch_lane(ep);
        if (ep->state != FY_EP_WIREUP || ep->wu == NULL)
            return FERRY_ERR_NO_RESOURCE; /* failed: the queue is emptied */
    }
    if (wu->req_op != NULL)
        send_req_now(ep, wu->req_op);
    return FERRY_ERR_NO_RESOURCE;
}

int fy_wireup_tl_failed(ferry_ep_t *ep, fy_tl_ep_t *tl_ep, ferry_status_t st)
{
    fy_wireup_state_t *wu = ep->wu;
    if (ep->state != FY_EP_WIREUP || wu == NULL)
        return 0;
    int l;
    for (l = 0; l < FY_LANE_COUNT; l++)
        if (ep->lanes[l].tl_ep == tl_ep)
            break;
    if (l == FY_LANE_COUNT)
        return 1; /* an endpoint of a lane given up already */
    wu_fail(wu, (unsigned)wu->lane_bit[l], ferry_status_string(st));
    wu->switch_pending = 1;
    /* The switch happens from the pending queue, outside the transport's callback. */
    if (!wu->hold) {
        fy_op_t *h = fy_op_get(ep->worker, ep, FY_OP_WIREUP_HOLD, NULL);
        if (h == NULL)
            return 0;
        count_op(h);
        fy_queue_push_head(&ep->pending, &h->q);
        if (!fy_list_is_linked(&ep->pending_link))
            fy_list_add_tail(&ep->worker->pending_eps, &ep->pending_link);
        wu->hold = 1;
    }
    return 1;
}

void fy_wireup_forget(ferry_ep_t *ep)
{
    fy_wireup_peer_drop(ep);
    wireup_done(ep);
    if (ep->state != FY_EP_WIREUP)
        fy_wireup_src_drop(ep);
}

/* The request came in on fi: answer on a lane from fi, the path the peer found working. */
static void follow_iface(ferry_ep_t *ep, fy_iface_t *fi, const void *addr, size_t len)
{
    if (ep->lanes[FY_LANE_AM].iface == fi)
        return;
    fy_remote_addr_t *ra = malloc(sizeof(*ra));
    fy_lane_plan_t *plan = malloc(sizeof(*plan));
    fy_lane_fail_t fails[FY_WIREUP_MAX_FAILS];
    unsigned nfails = 0;
    int lane_bit[FY_LANE_COUNT];
    if (ra != NULL && plan != NULL && fy_address_unpack(addr, len, ra) == FERRY_OK) {
        /* Both ends rank the candidates alike, so the peer tried every one ranked before the
         * one it came in on and found it failing: those are failed here too, for every lane
         * (an RMA lane left on one of them would never connect).  Not on loopback, where
         * nothing is held and nothing falls back. */
        while (!fy_wireup_is_loopback(fi)) {
            fy_lanes_plan(ep->worker, ra, fails, nfails, -1, plan);
            if (plan->am < 0 || plan->cand[plan->am].local == (int)fi->index ||
                nfails == FY_WIREUP_MAX_FAILS)
                break;
            const fy_lane_cand_t *c = &plan->cand[plan->am];
            fy_wireup_add_fail(fails, &nfails, fy_lane_pair_bit(c->local, c->remote),
                               "the peer came in on another lane");
        }
        if (fy_wireup_choose(ep, ra, fails, &nfails, (int)fi->index, plan, lane_bit, 0) ==
            FERRY_OK) {
            fy_info("endpoint %u to worker %016llx: the peer came in on %s %s; answering there",
                    ep->id, (unsigned long long)ep->remote_uuid, fi->tl->name,
                    fi->tl_iface->dev_name);
            fy_tag_ep_init(ep);
        } else {
            fy_ep_fail(ep, FERRY_ERR_UNREACHABLE);
        }
    }
    free(plan);
    free(ra);
}

/*
 * Send op ahead of everything the endpoint has queued.  A WIREUP_REP must: operations held
 * while our own WIREUP_REQ was unanswered name us by our endpoint id (FY_AM_F_SRC), and when
 * that request went out on a lane that never connected, the answer is the peer's only way to
 * learn the id before they arrive.
 */
static void send_first(ferry_ep_t *ep, fy_op_t *op)
{
    if (fy_queue_is_empty(&ep->pending)) {
        fy_ep_submit(ep, op);
        return;
    }
    ferry_status_t st = fy_op_start(op);
    if (st == FERRY_INPROGRESS) {
        count_op(op);
    } else if (st == FERRY_ERR_NO_RESOURCE) {
        count_op(op);
        fy_queue_push_head(&ep->pending, &op->q);
        if (!fy_list_is_linked(&ep->pending_link))
            fy_list_add_tail(&ep->worker->pending_eps, &ep->pending_link);
    } else {
        fy_op_put(op);
    }
}

static ferry_status_t reply_connect(void *arg, const void *addr, size_t len, void **ep_p)
{
    ferry_ep_t *ep;
    ferry_status_t st = fy_ep_create_internal(arg, addr, len, &fy_cm_am, &ep);
    if (st == FERRY_OK)
        *ep_p = ep;
    return st;
}

/* The endpoint answering a peer's WIREUP_REQ: its worker address came by AM over the lane
 * the request arrived on, so the am connection manager makes it (and connects its lanes). */
static ferry_status_t reply_ep_create(ferry_worker_t *w, const void *addr, size_t len,
                                      ferry_ep_t **ep_p)
{
    const fy_cm_component_t *am = fy_cm_find(&w->ctx->cms, "am");
    if (am == NULL)
        return FERRY_ERR_UNSUPPORTED; /* FERRY_CM excludes am: said by the caller */
    fy_cm_host_t host = {.arg = w, .connect_address = reply_connect};
    fy_cm_target_t t = {.address = addr, .address_len = len};
    void *ep = NULL;
    ferry_status_t st = am->ops->start_connect(&host, &t, &ep);
    if (st == FERRY_OK)
        *ep_p = ep;
    return st;
}

static void wireup_req(fy_iface_t *fi, const fy_wireup_msg_t *m, const void *addr)
{
    ferry_worker_t *w = fi->worker;
    ferry_ep_t *ep = fy_wireup_find_src(w, m->src_uuid, m->src_ep_id);
    int fresh = ep == NULL;
    if (ep == NULL && (ep = fy_wireup_find_unpaired(w, m->src_uuid)) != NULL) {
        /* both sides connected at once: pair the two endpoints */
        if (connected(ep, m->src_ep_id) != FERRY_OK) {
            fy_ep_fail(ep, FERRY_ERR_NO_MEMORY);
            return;
        }
    } else if (ep == NULL) {
        ferry_status_t st = reply_ep_create(w, addr, m->addr_len, &ep);
        if (st != FERRY_OK) {
            fy_warn("wireup from %016llx ep %u: cannot reach it back: %s",
                    (unsigned long long)m->src_uuid, m->src_ep_id,
                    fy_cm_find(&w->ctx->cms, "am") == NULL
                        ? "FERRY_CM excludes am, the manager of endpoints made from a peer's wireup"
                        : ferry_status_string(st));
            return;
        }
        if (connected(ep, m->src_ep_id) != FERRY_OK) {
            fy_ep_fail(ep, FERRY_ERR_NO_MEMORY);
            return;
        }
    }
    if (fresh || ep->is_reply || ep->outstanding == 0)
        follow_iface(ep, fi, addr, m->addr_len);
    if (ep->state != FY_EP_CONNECTED)
        return;
    fy_wireup_msg_t rep = {w->uuid, m->src_uuid, ep->id, m->src_ep_id, 0, 0};
    fy_op_t *op = fy_op_get(w, ep, FY_OP_AM, NULL);
    if (op == NULL)
        return;
    op->am_id = FY_TLAM_WIREUP_REP;
    memcpy(op->hdr, &rep, sizeof(rep));
    op->hdr_len = sizeof(rep);
    op->iovcnt = 0;
    send_first(ep, op);
}

static void wireup_rep(fy_iface_t *fi, const fy_wireup_msg_t *m)
{
    ferry_worker_t *w = fi->worker;
    ferry_ep_t *ep = fy_worker_ep_lookup(w, m->dst_ep_id);
    if (ep == NULL || m->dst_uuid != w->uuid || ep->remote_uuid != m->src_uuid) {
        w->drops_unknown_ep++;
        return;
    }
    if (ep->state == FY_EP_WIREUP && connected(ep, m->src_ep_id) != FERRY_OK)
        fy_ep_fail(ep, FERRY_ERR_NO_MEMORY);
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
