/*
 * world.c - the processes of a launched job, addressed by rank: ferry_world_*.
 *
 * This is the "oob" connection manager of DESIGN.md seen from the application: each worker
 * publishes its address once through the bootstrap (boot/, whichever launcher it is), and an
 * endpoint to a rank is created from that rank's address the first time it is asked for.  A
 * job of N ranks where each talks to a few others therefore costs N puts, one fence, and a
 * get per peer actually used, never N^2 connections up front.
 *
 * The barrier is a dissemination barrier over active messages (FY_AM_ID_WORLD): in round k
 * every rank signals rank+2^k and waits for rank-2^k, so ceil(log2 N) rounds and N messages
 * per round, no root.  Each message carries the barrier's epoch and round.  A rank can be at
 * most one barrier ahead of another (leaving barrier e takes every rank having entered it), so
 * arrivals are counted per (epoch parity, round), and a message for the next barrier that
 * lands while this one is still running is kept for it.  While it waits, the barrier
 * progresses the worker through ferry_worker_wait(), which sleeps on the worker's event fd
 * when idle: on an oversubscribed machine a waiting rank gives its core to the rank it waits
 * for instead of spinning against it.  When the endpoint to the rank it signals or the one it
 * waits for fails (the peer died, or no lane reaches it), the barrier returns that error at
 * once instead of waiting for FERRY_BOOT_TIMEOUT.
 *
 * The allgather of small blobs goes over the world's endpoints (FY_AM_ID_WORLD_AG): each
 * rank sends its blob to every other rank and progresses, like the barrier, until it has
 * every other rank's.  Not through the bootstrap: its fence blocks without progressing, so a
 * rank inside it would stop moving the data a peer still waits for before it can join.  Each
 * message names its call (every rank numbers its calls alike, the call being collective).  A
 * rank can be at most one call ahead of another (finishing call k takes every rank's blob of
 * k, sent when it entered k, after finishing k - 1), so a blob of a later call that lands
 * while this one runs is kept for it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "boot/boot.h"
#include "ferry.h"
#include "proto/proto.h"
#include "proto/proto_int.h" /* the worker lock */
#include "util/clock.h"
#include "util/log.h"

#define WORLD_ADDR_KEY      "fy.world.addr"
#define WORLD_MAX_ROUNDS    32
#define WORLD_WAIT_SLICE_MS 100 /* re-check the deadline this often while asleep */

/*
 * The barrier message: the AM header, nothing else (host order: a job runs one build on hosts
 * of one byte order, as the proto header assumes).
 *
 *   0               4       6       8               12
 *   +---------------+-------+-------+---------------+
 *   | epoch         | round | 0     | sender rank   |
 *   +---------------+-------+-------+---------------+
 */
typedef struct world_msg {
    uint32_t epoch;
    uint16_t round;
    uint16_t reserved;
    uint32_t src;
} world_msg_t;

struct ferry_world {
    ferry_worker_t *worker;
    fy_boot_t *boot;
    fy_boot_info_t info;
    ferry_ep_t **eps;                      /* per rank, created on first use */
    ferry_status_t *ep_failed;             /* per rank: why its endpoint failed, or OK */
    unsigned rounds;                       /* ceil(log2(size)) */
    uint32_t epoch;                        /* barriers completed */
    uint32_t arrived[2][WORLD_MAX_ROUNDS]; /* messages received, per epoch parity and round */
    /* allgather: the call running (ag_active) or the next one; blobs of that call
     * arrived (ag_seen per rank); blobs of a later call, kept for it */
    uint32_t ag_call;
    int ag_active;
    uint8_t *ag_out;
    size_t ag_len;
    int ag_got;
    uint8_t *ag_seen;
    ferry_status_t ag_err;
    struct world_ag_early *ag_early;
};

/*
 * The allgather message: this header, then the blob.
 *
 *   0               4               8
 *   +---------------+---------------+
 *   | call          | sender rank   |
 *   +---------------+---------------+
 */
typedef struct world_ag_msg {
    uint32_t call;
    uint32_t src;
} world_ag_msg_t;

typedef struct world_ag_early {
    struct world_ag_early *next;
    world_ag_msg_t m;
    size_t len;
    uint8_t data[];
} world_ag_early_t;

static ferry_status_t world_am_handler(void *arg, const void *header, size_t header_len,
                                       const void *data, size_t data_len, ferry_ep_t *reply_ep)
{
    ferry_world_t *w = arg;
    world_msg_t m;
    if (header_len != sizeof(m)) {
        fy_warn("world barrier: dropped a message with a %zu-byte header (expected %zu)",
                header_len, sizeof(m));
        return FERRY_OK;
    }
    memcpy(&m, header, sizeof(m));
    if (m.round >= w->rounds || m.src >= (uint32_t)w->info.size ||
        (m.epoch != w->epoch && m.epoch != w->epoch + 1)) {
        fy_warn("world barrier: dropped a message from rank %u for barrier %u round %u (this "
                "rank is at barrier %u of %u rounds)",
                m.src, m.epoch, m.round, w->epoch, w->rounds);
        return FERRY_OK;
    }
    w->arrived[m.epoch & 1][m.round]++;
    return FERRY_OK;
}

/* One rank's blob of the running call: into its place in out. */
static void ag_take(ferry_world_t *w, uint32_t src, const void *data, size_t len)
{
    if (w->ag_seen[src]) {
        fy_warn("world allgather %u: a second blob from rank %u dropped", w->ag_call, src);
        return;
    }
    w->ag_seen[src] = 1;
    w->ag_got++;
    if (len != w->ag_len) {
        fy_error("world allgather %u: rank %u gave %zu bytes, this rank %zu (every rank must "
                 "give the same length)",
                 w->ag_call, src, len, w->ag_len);
        w->ag_err = FERRY_ERR_MESSAGE_TRUNCATED;
        return;
    }
    if (len != 0) /* len 0: out may be NULL */
        memcpy(w->ag_out + (size_t)src * len, data, len);
}

static ferry_status_t world_ag_handler(void *arg, const void *header, size_t header_len,
                                       const void *data, size_t data_len, ferry_ep_t *reply_ep)
{
    (void)reply_ep;
    ferry_world_t *w = arg;
    world_ag_msg_t m;
    if (header_len != sizeof(m)) {
        fy_warn("world allgather: dropped a message with a %zu-byte header", header_len);
        return FERRY_OK;
    }
    memcpy(&m, header, sizeof(m));
    if (m.src >= (uint32_t)w->info.size || m.src == (uint32_t)w->info.rank) {
        fy_warn("world allgather: dropped a message from rank %u", m.src);
        return FERRY_OK;
    }
    if (w->ag_active && m.call == w->ag_call) {
        ag_take(w, m.src, data, data_len);
        return FERRY_OK;
    }
    /* a later call than the running one, or the next one when none runs: keep it */
    uint32_t ahead = m.call - w->ag_call;
    if (ahead > 1 || (ahead == 0 && w->ag_active) || (ahead == 1 && !w->ag_active)) {
        fy_warn("world allgather: dropped rank %u's blob of call %u (this rank is at %u)", m.src,
                m.call, w->ag_call);
        return FERRY_OK;
    }
    world_ag_early_t *e = malloc(sizeof(*e) + data_len);
    if (e == NULL) {
        fy_error("world allgather: no memory to keep rank %u's blob of %zu bytes", m.src, data_len);
        return FERRY_OK;
    }
    e->m = m;
    e->len = data_len;
    if (data_len != 0)
        memcpy(e->data, data, data_len);
    e->next = w->ag_early;
    w->ag_early = e;
    return FERRY_OK;
}

static void world_ep_error(void *arg, ferry_ep_t *ep, ferry_status_t status)
{
    ferry_world_t *w = arg;
    int rank = -1;
    for (int r = 0; r < w->info.size && rank < 0; r++)
        if (w->eps[r] == ep)
            rank = r;
    if (rank >= 0)
        w->ep_failed[rank] = status;
    /* A peer that finished and left is normal at the end of a job: say it quietly.  The
     * operation that needed it reports the error itself. */
    fy_info("world: the endpoint to rank %d failed: %s", rank, ferry_status_string(status));
}

ferry_status_t ferry_world_create(ferry_worker_t *worker, ferry_world_t **world_p)
{
    FY_WORKER_GUARD(worker);
    if (worker == NULL || world_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    *world_p = NULL;
    ferry_world_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return FERRY_ERR_NO_MEMORY;
    w->worker = worker;
    void *addr = NULL;
    ferry_status_t st = fy_boot_init(&w->boot);
    if (st != FERRY_OK)
        goto fail;
    w->info = *fy_boot_info(w->boot);
    fy_log_set_rank(w->info.rank);
    while ((1u << w->rounds) < (unsigned)w->info.size)
        w->rounds++;
    w->eps = calloc((size_t)w->info.size, sizeof(*w->eps));
    w->ep_failed = calloc((size_t)w->info.size, sizeof(*w->ep_failed));
    w->ag_seen = calloc((size_t)w->info.size, 1);
    if (w->eps == NULL || w->ep_failed == NULL || w->ag_seen == NULL) {
        st = FERRY_ERR_NO_MEMORY;
        goto fail;
    }

    size_t len = 0;
    st = ferry_worker_get_address(worker, NULL, &len);
    if (st != FERRY_ERR_TRUNCATED && st != FERRY_OK)
        goto fail;
    addr = malloc(len > 0 ? len : 1);
    if (addr == NULL) {
        st = FERRY_ERR_NO_MEMORY;
        goto fail;
    }
    st = ferry_worker_get_address(worker, addr, &len);
    if (st != FERRY_OK)
        goto fail;
    /* the handler is in place before the fence: no peer sends before its fence completes */
    st = fy_am_set_handler(worker, FY_AM_ID_WORLD, world_am_handler, w);
    if (st == FERRY_OK)
        st = fy_am_set_handler(worker, FY_AM_ID_WORLD_AG, world_ag_handler, w);
    if (st != FERRY_OK)
        goto fail;
    st = fy_boot_put(w->boot, WORLD_ADDR_KEY, addr, len);
    if (st == FERRY_OK)
        st = fy_boot_fence(w->boot);
    if (st != FERRY_OK) {
        fy_am_set_handler(worker, FY_AM_ID_WORLD, NULL, NULL);
        fy_am_set_handler(worker, FY_AM_ID_WORLD_AG, NULL, NULL);
        goto fail;
    }
    free(addr);
    fy_debug("world: rank %d of %d (%s), worker address %zu bytes", w->info.rank, w->info.size,
             w->info.backend, len);
    *world_p = w;
    return FERRY_OK;
fail:
    free(addr);
    free(w->eps);
    free(w->ep_failed);
    free(w->ag_seen);
    fy_boot_finalize(w->boot);
    free(w);
    return st;
}

/*
 * Leaving is collective, in three steps, so that no rank sees another vanish while it still
 * progresses (a peer's exit looks like a failure to a transport that is polling it):
 *   1. flush every endpoint of the world: what this rank sent has arrived;
 *   2. a world barrier (progressing): every rank has done 1;
 *   3. a bootstrap barrier (not progressing): every rank has left 2, so none is polling any
 *      more when the first one goes.
 * Then the endpoints are closed without any further exchange.  If a peer is dead already the
 * barriers fail and destroy goes on alone.
 */
void ferry_world_destroy(ferry_world_t *w)
{
    FY_WORKER_GUARD(w != NULL ? w->worker : NULL);
    if (w == NULL)
        return;
    for (int r = 0; r < w->info.size; r++) {
        if (w->eps[r] == NULL)
            continue;
        ferry_status_t st = ferry_ep_flush(w->eps[r], NULL);
        if (st != FERRY_OK)
            fy_debug("world: flushing the endpoint to rank %d: %s", r, ferry_status_string(st));
    }
    /* A rank whose endpoint failed cannot take part: the barrier that found it said so (one
     * error); leaving says it once more as a warning, without a barrier bound to fail. */
    int dead = -1;
    for (int r = 0; r < w->info.size && dead < 0; r++)
        if (w->ep_failed[r] != FERRY_OK)
            dead = r;
    if (dead >= 0) {
        fy_warn("world: leaving without every rank (the endpoint to rank %d failed: %s)", dead,
                ferry_status_string(w->ep_failed[dead]));
    } else if (w->info.size > 1) {
        ferry_status_t st = ferry_world_barrier(w);
        if (st == FERRY_OK)
            st = fy_boot_barrier(w->boot);
        if (st != FERRY_OK)
            fy_warn("world: leaving without every rank (%s)", ferry_status_string(st));
    }
    for (int r = 0; r < w->info.size; r++)
        if (w->eps[r] != NULL)
            ferry_ep_close(w->eps[r], FERRY_EP_CLOSE_FORCE, NULL);
    fy_am_set_handler(w->worker, FY_AM_ID_WORLD, NULL, NULL);
    fy_am_set_handler(w->worker, FY_AM_ID_WORLD_AG, NULL, NULL);
    while (w->ag_early != NULL) {
        world_ag_early_t *e = w->ag_early;
        w->ag_early = e->next;
        free(e);
    }
    free(w->ag_seen);
    free(w->eps);
    free(w->ep_failed);
    fy_boot_finalize(w->boot);
    free(w);
}

int ferry_world_rank(const ferry_world_t *w)
{
    return w != NULL ? w->info.rank : -1;
}
int ferry_world_size(const ferry_world_t *w)
{
    return w != NULL ? w->info.size : -1;
}
int ferry_world_local_rank(const ferry_world_t *w)
{
    return w != NULL ? w->info.local_rank : -1;
}
int ferry_world_local_size(const ferry_world_t *w)
{
    return w != NULL ? w->info.local_size : -1;
}

const char *ferry_world_backend(const ferry_world_t *w)
{
    return w != NULL ? w->info.backend : "none";
}

/* A rank's endpoint through the oob connection manager (cm/cm.c): it fetches the rank's
 * worker address from the bootstrap store and makes the endpoint, whose lanes it connects. */
typedef struct world_oob {
    ferry_world_t *w;
    int rank;
} world_oob_t;

static ferry_status_t oob_kv_get(void *arg, int rank, const char *key, void *buf, size_t *len)
{
    world_oob_t *o = arg;
    ferry_status_t st = fy_boot_get(o->w->boot, rank, key, buf, len);
    if (st == FERRY_ERR_NO_ELEM)
        fy_error("rank %d published no worker address: did it call ferry_world_create?", rank);
    return st;
}

static ferry_status_t oob_connect(void *arg, const void *addr, size_t len, void **ep_p)
{
    world_oob_t *o = arg;
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER,
        .address = addr,
        .address_len = len,
        .err_cb = world_ep_error,
        .err_arg = o->w,
    };
    ferry_ep_t *ep = NULL;
    ferry_status_t st = fy_ep_create_via(o->w->worker, &p, &fy_cm_oob, &ep);
    if (st == FERRY_OK)
        *ep_p = ep;
    return st;
}

static ferry_status_t world_ep_oob(ferry_world_t *w, int rank)
{
    ferry_context_t *ctx = fy_worker_context(w->worker);
    const fy_cm_component_t *oob = fy_cm_find(&ctx->cms, "oob");
    if (oob == NULL)
        return FERRY_ERR_UNSUPPORTED;
    world_oob_t o = {w, rank};
    fy_cm_host_t host = {.arg = &o, .connect_address = oob_connect, .kv_get = oob_kv_get};
    fy_cm_target_t t = {.kv_key = WORLD_ADDR_KEY, .rank = rank};
    void *ep = NULL;
    ferry_status_t st = oob->ops->start_connect(&host, &t, &ep);
    if (st == FERRY_ERR_UNSUPPORTED)
        st = FERRY_ERR_UNREACHABLE; /* not "try without oob": it answered */
    if (st != FERRY_OK) {
        fy_error("cannot create an endpoint to rank %d: %s", rank, ferry_status_string(st));
        return st;
    }
    w->eps[rank] = ep;
    return FERRY_OK;
}

ferry_status_t ferry_world_ep(ferry_world_t *w, int rank, ferry_ep_t **ep_p)
{
    FY_WORKER_GUARD(w != NULL ? w->worker : NULL);
    if (w == NULL || ep_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    if (rank < 0 || rank >= w->info.size) {
        fy_error("ferry_world_ep: rank %d is outside the job (size %d)", rank, w->info.size);
        return FERRY_ERR_INVALID_PARAM;
    }
    if (w->eps[rank] != NULL) {
        *ep_p = w->eps[rank];
        return FERRY_OK;
    }
    ferry_status_t st = world_ep_oob(w, rank);
    if (st != FERRY_ERR_UNSUPPORTED) {
        if (st == FERRY_OK)
            *ep_p = w->eps[rank];
        return st;
    }
    /* FERRY_CM excludes oob: the address from the store, connected as any other (direct) */
    uint8_t small[512];
    void *addr = small;
    size_t len = sizeof(small);
    st = fy_boot_get(w->boot, rank, WORLD_ADDR_KEY, addr, &len);
    if (st == FERRY_ERR_TRUNCATED) {
        addr = malloc(len);
        if (addr == NULL)
            return FERRY_ERR_NO_MEMORY;
        st = fy_boot_get(w->boot, rank, WORLD_ADDR_KEY, addr, &len);
    }
    if (st == FERRY_ERR_NO_ELEM)
        fy_error("rank %d published no worker address: did it call ferry_world_create?", rank);
    if (st == FERRY_OK) {
        ferry_ep_params_t p = {
            .field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER,
            .address = addr,
            .address_len = len,
            .err_cb = world_ep_error,
            .err_arg = w,
        };
        st = ferry_ep_create(w->worker, &p, &w->eps[rank]);
        if (st != FERRY_OK)
            fy_error("cannot create an endpoint to rank %d: %s", rank, ferry_status_string(st));
    }
    if (addr != small)
        free(addr);
    if (st != FERRY_OK)
        return st;
    *ep_p = w->eps[rank];
    return FERRY_OK;
}

/* Send this rank's round-k message to `to`, retrying while the transport pushes back. */
static ferry_status_t barrier_send(ferry_world_t *w, int to, unsigned round, uint64_t deadline)
{
    ferry_ep_t *ep;
    ferry_status_t st = ferry_world_ep(w, to, &ep);
    if (st != FERRY_OK)
        return st;
    world_msg_t m = {
        .epoch = w->epoch, .round = (uint16_t)round, .reserved = 0, .src = (uint32_t)w->info.rank};
    for (;;) {
        st = fy_am_send(ep, FY_AM_ID_WORLD, &m, sizeof(m), NULL, 0, NULL);
        if (st != FERRY_ERR_NO_RESOURCE)
            break;
        if (fy_time_ns() >= deadline)
            return FERRY_ERR_TIMED_OUT;
        ferry_worker_wait(w->worker, 1);
    }
    if (st != FERRY_OK && st != FERRY_INPROGRESS) {
        fy_error("world barrier %u: sending to rank %d failed: %s", w->epoch, to,
                 ferry_status_string(st));
        return st;
    }
    return FERRY_OK;
}

ferry_status_t ferry_world_barrier(ferry_world_t *w)
{
    FY_WORKER_GUARD(w != NULL ? w->worker : NULL);
    if (w == NULL)
        return FERRY_ERR_INVALID_PARAM;
    uint64_t timeout = fy_boot_timeout_ns(w->boot);
    uint64_t deadline = fy_time_ns() + timeout;
    if (deadline < timeout)
        deadline = UINT64_MAX;
    const int size = w->info.size, rank = w->info.rank;
    unsigned parity = w->epoch & 1;
    for (unsigned k = 0; k < w->rounds; k++) {
        int dist = 1 << k;
        int to = (rank + dist) % size, from = (rank - dist % size + size) % size;
        ferry_status_t st = barrier_send(w, to, k, deadline);
        if (st != FERRY_OK)
            return st;
        while (w->arrived[parity][k] == 0) {
            if (ferry_worker_progress(w->worker) != 0)
                continue;
            /* our signal, or the one we wait for, cannot come: fail now, not at the deadline */
            int dead = w->ep_failed[to] != FERRY_OK     ? to
                       : w->ep_failed[from] != FERRY_OK ? from
                                                        : -1;
            if (dead >= 0) {
                fy_error("world barrier %u, round %u of %u: the endpoint to rank %d failed (%s)",
                         w->epoch, k + 1, w->rounds, dead, ferry_status_string(w->ep_failed[dead]));
                return w->ep_failed[dead];
            }
            uint64_t now = fy_time_ns();
            if (now >= deadline) {
                fy_error("world barrier %u timed out after %.3g s (FERRY_BOOT_TIMEOUT) in round "
                         "%u of %u: rank %d never signalled this rank %d",
                         w->epoch, (double)timeout / 1e9, k + 1, w->rounds, from, rank);
                return FERRY_ERR_TIMED_OUT;
            }
            uint64_t left_ms = (deadline - now) / FY_NSEC_PER_MSEC + 1;
            ferry_worker_wait(w->worker,
                              left_ms < WORLD_WAIT_SLICE_MS ? (int)left_ms : WORLD_WAIT_SLICE_MS);
        }
        w->arrived[parity][k]--;
    }
    w->epoch++;
    return FERRY_OK;
}

/* Send this rank's blob of the running call to `to`, retrying while the transport pushes back. */
static ferry_status_t ag_send(ferry_world_t *w, int to, const void *in, size_t len,
                              uint64_t deadline)
{
    ferry_ep_t *ep;
    ferry_status_t st = ferry_world_ep(w, to, &ep);
    if (st != FERRY_OK)
        return st;
    world_ag_msg_t m = {.call = w->ag_call, .src = (uint32_t)w->info.rank};
    struct iovec iov = {(void *)in, len};
    while ((st = fy_am_send(ep, FY_AM_ID_WORLD_AG, &m, sizeof(m), &iov, len != 0, NULL)) ==
           FERRY_ERR_NO_RESOURCE) {
        if (fy_time_ns() >= deadline)
            return FERRY_ERR_TIMED_OUT;
        ferry_worker_wait(w->worker, 1);
    }
    if (st != FERRY_OK && st != FERRY_INPROGRESS) {
        fy_error("world allgather %u: sending to rank %d failed: %s", w->ag_call, to,
                 ferry_status_string(st));
        return st;
    }
    return FERRY_OK;
}

ferry_status_t ferry_world_allgather(ferry_world_t *w, const void *in, size_t len, void *out)
{
    FY_WORKER_GUARD(w != NULL ? w->worker : NULL);
    if (w == NULL || ((in == NULL || out == NULL) && len != 0) || w->ag_active) {
        if (w != NULL)
            fy_error("ferry_world_allgather: %s", w->ag_active ? "called from a handler "
                                                                 "during an allgather"
                                                               : "a NULL buffer");
        return FERRY_ERR_INVALID_PARAM;
    }
    const int size = w->info.size, rank = w->info.rank;
    if (len != 0)
        memcpy((uint8_t *)out + (size_t)rank * len, in, len);
    if (size == 1)
        return FERRY_OK;
    uint64_t timeout = fy_boot_timeout_ns(w->boot);
    uint64_t deadline = fy_time_ns() + timeout;
    if (deadline < timeout)
        deadline = UINT64_MAX;
    /* the call starts: blobs that came early for it first */
    w->ag_active = 1;
    w->ag_out = out;
    w->ag_len = len;
    w->ag_got = 0;
    w->ag_err = FERRY_OK;
    memset(w->ag_seen, 0, (size_t)size);
    for (world_ag_early_t **p = &w->ag_early; *p != NULL;) {
        world_ag_early_t *e = *p;
        if (e->m.call != w->ag_call) {
            p = &e->next;
            continue;
        }
        *p = e->next;
        ag_take(w, e->m.src, e->data, e->len);
        free(e);
    }
    ferry_status_t st = FERRY_OK;
    for (int k = 1; k < size && st == FERRY_OK; k++)
        st = ag_send(w, (rank + k) % size, in, len, deadline);
    while (st == FERRY_OK && w->ag_got < size - 1) {
        if (ferry_worker_progress(w->worker) != 0)
            continue;
        for (int r = 0; r < size; r++)
            if (!w->ag_seen[r] && r != rank && w->ep_failed[r] != FERRY_OK) {
                fy_error("world allgather %u: the endpoint to rank %d failed (%s)", w->ag_call, r,
                         ferry_status_string(w->ep_failed[r]));
                st = w->ep_failed[r];
                break;
            }
        uint64_t now = fy_time_ns();
        if (st == FERRY_OK && now >= deadline) {
            fy_error("world allgather %u timed out after %.3g s (FERRY_BOOT_TIMEOUT): %d of %d "
                     "ranks' blobs came",
                     w->ag_call, (double)timeout / 1e9, w->ag_got + 1, size);
            st = FERRY_ERR_TIMED_OUT;
        }
        if (st == FERRY_OK) {
            uint64_t left_ms = (deadline - now) / FY_NSEC_PER_MSEC + 1;
            ferry_worker_wait(w->worker,
                              left_ms < WORLD_WAIT_SLICE_MS ? (int)left_ms : WORLD_WAIT_SLICE_MS);
        }
    }
    if (st == FERRY_OK)
        st = w->ag_err;
    w->ag_active = 0;
    w->ag_out = NULL;
    w->ag_call++;
    return st;
}
