/*
 * tag_rndv.c - the rendezvous protocol of tagged messages: the send, the handler of its
 * messages (AM id FY_AM_ID_TAG_RNDV, header fy_tag_msg_t in tag_int.h), cancellation, and the
 * threshold above which an endpoint uses it.
 *
 * A message above the threshold stays in the caller's memory until a receive has matched its
 * RTS.  The data then moves by one of two schemes:
 *
 *   get  (tag_rndv_get.c) RTS_GET -> the receiver reads -> ATS, when the AM lane's transport
 *        can read remote memory: one copy, and no round trip before the data moves.
 *   am   (tag_rndv_am.c) RTS -> CTS -> DATA: the receiver answers CTS, the sender sends the
 *        data as an AM from the caller's memory.
 *
 * The sender chooses per message (FERRY_TAG_RNDV_SCHEME, the lane's caps, whether
 * registration and packing worked).  The receiver may turn an RTS_GET into the am scheme by
 * answering CTS instead (with TAG_F_NO_GET, after which a sender in `auto` offers that
 * endpoint no more gets).
 *
 * Lifetimes.  The sender's op (FY_OP_TAG_SEND) waits in the worker's wait table, counted on
 * its endpoint, and holds the registration until CTS or ATS comes or the endpoint fails: an
 * RTS_GET matched late still names valid memory.  fy_op_put() releases whatever an op holds
 * (the type's release in op.c's table), on every path.  A sender that closes its endpoint by
 * force sends ABORT for each rendezvous still waiting (best effort): the receiver drops the
 * unmatched RTS, or fails the receive waiting for DATA, rather than read a buffer the sender
 * has been given back, or wait forever.  (A receive that matches before the ABORT has arrived
 * still reads: one-sided reads cannot be revoked.)
 *
 * Synchronous eager sends (ferry_tag_ssend of an eager size) share the sender's side: their op
 * is an FY_OP_TAG_SEND in the wait table too, completed by the receiver's ATS at match.
 *
 * Cancel (ferry_request_cancel): a send whose first message (RTS, RTS_GET, or the synchronous
 * eager message) still waits on the endpoint's pending queue has told the peer nothing: that
 * message is taken off the queue and both complete CANCELED.  Once it has left, the send
 * completes on its own.
 *
 * Wait ids are looked up in a hash, never trusted as pointers.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/tag_int.h"
#include "util/clock.h"
#include "util/shmem.h"

static void staged_note_get(ferry_ep_t *ep, size_t len, uint64_t ns);

ferry_status_t fy_tag_rndv_ctl(ferry_ep_t *ep, fy_tag_msg_t *m)
{
    return fy_am_send(ep, FY_AM_ID_TAG_RNDV, m, sizeof(*m), NULL, 0, NULL);
}

/* The send op's registration of its buffer (the get scheme), if it has one. */
static void tag_send_release(fy_op_t *op)
{
    fy_op_tag_send_t *s = &op->tag_send;
    if (s->memh == NULL)
        return;
    s->reg_tl->tl->ops->mem_dereg(s->reg_tl->md, s->memh);
    free(s->memh);
    s->memh = NULL;
    s->reg_tl = NULL;
}

static ferry_status_t tag_send_no_start(fy_op_t *op)
{
    (void)op;
    fy_error("internal: a rendezvous send was started from a queue");
    return FERRY_ERR_INVALID_PARAM;
}

const fy_op_ops_t fy_tag_send_op_ops = {
    .name = "tag-rndv-send", .start = tag_send_no_start, .release = tag_send_release};

/* A send op waiting for the receiver (a rendezvous, or a synchronous eager send): in the wait
 * table, counted on its endpoint.  OK, or an error (the op released). */
static ferry_status_t send_op_new(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                  size_t iovcnt, ferry_request_t *req, fy_op_t **op_p)
{
    ferry_worker_t *w = ep->worker;
    if (ep->state == FY_EP_FAILED)
        return ep->failure;
    if (ep->state == FY_EP_CLOSED)
        return FERRY_ERR_NOT_CONNECTED;
    fy_op_t *op = fy_op_get(w, ep, FY_OP_TAG_SEND, req);
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->tag_send.tag = tag;
    op->tag_send.len = fy_iov_total(iov, iovcnt);
    if (iovcnt <= 1) {
        op->tag_send.buf = iovcnt != 0 ? iov[0].iov_base : NULL;
    } else { /* several pieces: their array, kept until the data has gone */
        op->copy = malloc(iovcnt * sizeof(*iov));
        if (op->copy == NULL) {
            fy_op_put(op);
            return FERRY_ERR_NO_MEMORY;
        }
        memcpy(op->copy, iov, iovcnt * sizeof(*iov));
        op->tag_send.buf = op->copy;
        op->tag_send.iovcnt = iovcnt;
    }
    op->wait_id = ++w->next_wait_id;
    ferry_status_t st = fy_hash_put(&w->waiting, op->wait_id, op);
    if (st != FERRY_OK) {
        op->wait_id = 0;
        fy_op_put(op);
        return st;
    }
    *op_p = op;
    return FERRY_OK;
}

/* Its first message went (or was queued): the op waits, counted; or it failed: released. */
static ferry_status_t send_op_sent(fy_op_t *op, ferry_status_t st)
{
    if (st < 0) {
        fy_hash_del(&op->worker->waiting, op->wait_id);
        op->wait_id = 0;
        fy_op_put(op); /* deregisters */
        return st;
    }
    op->counted = 1;
    op->ep->outstanding++;
    return FERRY_INPROGRESS;
}

/* t0: the time of a send the staged judge will hear of (its ATS), or 0. */
static ferry_status_t rndv_send(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                size_t iovcnt, ferry_request_t *req, uint64_t t0)
{
    fy_op_t *op = NULL;
    ferry_status_t st = send_op_new(ep, tag, iov, iovcnt, req, &op);
    if (st != FERRY_OK)
        return st;
    op->tag_send.t0 = t0;
    fy_tag_msg_t m = {.type = TAG_RTS, .tag = tag, .len = op->tag_send.len, .wait_id = op->wait_id};
    uint8_t key[TAG_KEY_MAX];
    struct iovec kiov = {key, fy_tag_offer_get(ep, op, &m, key)};
    st = fy_am_send(ep, FY_AM_ID_TAG_RNDV, &m, sizeof(m), &kiov, kiov.iov_len != 0, NULL);
    return send_op_sent(op, st);
}

ferry_status_t fy_tag_rndv_send(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                size_t iovcnt, ferry_request_t *req)
{
    return rndv_send(ep, tag, iov, iovcnt, req, 0);
}

ferry_status_t fy_tag_ssend_eager(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                  size_t iovcnt, ferry_request_t *req)
{
    fy_op_t *op = NULL;
    ferry_status_t st = send_op_new(ep, tag, iov, iovcnt, req, &op);
    if (st != FERRY_OK)
        return st;
    /* The data is copied (no request to the AM): only the completion waits for the ATS. */
    uint64_t hdr[2] = {tag, op->wait_id};
    st = fy_tag_eager_sendv(ep, hdr, sizeof(hdr), iov, iovcnt, NULL);
    return send_op_sent(op, st);
}

/* The first message of the send op (its RTS, or its synchronous eager message) if it still
 * waits on the endpoint's pending queue: taken off it. */
static fy_op_t *unqueue_first_msg(fy_op_t *sop)
{
    for (fy_qelem_t *e = sop->ep->pending.head; e != NULL; e = e->next) {
        fy_op_t *op = fy_container_of(e, fy_op_t, q);
        if (op->type != FY_OP_AM || op->parent != NULL || op->hdr_len < op->proto_len ||
            op->proto_len < sizeof(fy_am_hdr_t))
            continue;
        fy_am_hdr_t h;
        memcpy(&h, op->hdr, sizeof(h));
        unsigned id = h.id + (h.len_flags & FY_AM_F_INT ? FY_AM_ID_INTERNAL_BASE : 0u);
        const uint8_t *uh = op->hdr + op->proto_len;
        size_t ulen = op->hdr_len - op->proto_len;
        uint64_t wait_id = 0;
        if (id == FY_AM_ID_TAG_RNDV && ulen == sizeof(fy_tag_msg_t)) {
            fy_tag_msg_t m;
            memcpy(&m, uh, sizeof(m));
            if (m.type == TAG_RTS || m.type == TAG_RTS_GET)
                wait_id = m.wait_id;
        } else if (id == FY_AM_ID_TAG && ulen == 2 * sizeof(uint64_t)) {
            memcpy(&wait_id, uh + sizeof(uint64_t), sizeof(wait_id));
        }
        if (wait_id == sop->wait_id && fy_tag_unqueue(sop->ep, op))
            return op;
    }
    return NULL;
}

int fy_tag_send_cancel(fy_op_t *op)
{
    if (op->wait_id == 0 || op->ep == NULL || !fy_tag_ep_usable(op->ep))
        return 0;
    fy_op_t *msg = unqueue_first_msg(op);
    if (msg == NULL)
        return 0; /* the receiver may have it: it completes on its own */
    ferry_worker_t *w = op->worker;
    fy_worker_complete_later(w, msg, FERRY_ERR_CANCELED); /* the copy it held goes with it */
    fy_hash_del(&w->waiting, op->wait_id);
    op->wait_id = 0;
    fy_worker_complete_later(w, op, FERRY_ERR_CANCELED);
    return 1;
}

/* The sender's op named by an answer (CTS, ATS) from ep, taken off the wait table. */
static fy_op_t *take_send_op(ferry_worker_t *w, uint64_t wait_id, ferry_ep_t *ep)
{
    fy_op_t *op = fy_hash_get(&w->waiting, wait_id);
    if (op == NULL || op->type != FY_OP_TAG_SEND || op->ep != ep) {
        w->drops_unknown_ep++;
        return NULL;
    }
    fy_hash_del(&w->waiting, wait_id);
    op->wait_id = 0;
    return op;
}

/* The sender cancelled a rendezvous (it closed its endpoint): forget its RTS if no receive has
 * taken it, fail the receive that waits for its DATA.  A read already under way needs nothing:
 * it has finished (shm, self) or fails at the target's key check (tcp, udp). */
typedef struct recv_key {
    ferry_ep_t *ep;
    uint64_t sender_wait_id;
    fy_op_t *found;
} recv_key_t;

static void find_recv(uint64_t key, void *value, void *arg)
{
    (void)key;
    fy_op_t *op = value;
    recv_key_t *k = arg;
    if (op->type == FY_OP_TAG_RECV && op->ep == k->ep &&
        op->tag_recv.peer_wait_id == k->sender_wait_id)
        k->found = op;
}

static void recv_abort(ferry_worker_t *w, ferry_ep_t *ep, uint64_t sender_wait_id)
{
    fy_list_t *pos;
    fy_list_for_each(pos, &w->tag_unexp)
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if (u->ep == ep && u->m.type != TAG_EAGER && u->m.wait_id == sender_wait_id) {
            fy_list_del(&u->link);
            free(u);
            return;
        }
    }
    fy_list_for_each(pos, &w->tag_mprobed) /* the receiver's mrecv will hear it is gone */
    {
        fy_tag_unexp_t *u = fy_container_of(pos, fy_tag_unexp_t, link);
        if (u->ep == ep && u->m.type != TAG_EAGER && u->m.wait_id == sender_wait_id) {
            u->m.flags |= TAG_F_GONE;
            return;
        }
    }
    recv_key_t k = {ep, sender_wait_id, NULL};
    fy_hash_foreach(&w->waiting, find_recv, &k);
    if (k.found != NULL)
        fy_op_finish(k.found, FERRY_ERR_CANCELED);
}

static ferry_status_t tag_rndv_handler(void *arg, const void *header, size_t header_len,
                                       const void *data, size_t len, ferry_ep_t *ep)
{
    ferry_worker_t *w = arg;
    fy_tag_msg_t m;
    if (header_len != sizeof(m)) {
        w->drops_malformed++;
        return FERRY_OK;
    }
    memcpy(&m, header, sizeof(m));
    switch (m.type) {
    case TAG_RTS:
        fy_tag_match_or_queue(w, &m, NULL, 0, ep);
        return FERRY_OK;
    case TAG_RTS_GET:
        if (m.tl_len == 0 || m.tl_len >= len || len > TAG_KEY_MAX) {
            w->drops_malformed++;
            return FERRY_OK;
        }
        fy_tag_match_or_queue(w, &m, data, len, ep);
        return FERRY_OK;
    case TAG_CTS: {
        fy_op_t *op = take_send_op(w, m.wait_id, ep);
        if (op == NULL)
            return FERRY_OK;
        if ((m.flags & TAG_F_NO_GET) && !ep->tag_no_get) {
            ep->tag_no_get = 1;
            fy_tag_ep_init(ep); /* in auto, back to the threshold for the am scheme */
        }
        fy_tag_send_data(op, m.arg);
        return FERRY_OK;
    }
    case TAG_ATS: {
        fy_op_t *op = take_send_op(w, m.wait_id, ep);
        if (op == NULL)
            return FERRY_OK;
        if (op->tag_send.t0 != 0 && m.status == FERRY_OK)
            staged_note_get(ep, op->tag_send.len, fy_time_ns() - op->tag_send.t0);
        fy_op_finish(op, m.status <= 0 && m.status > FERRY_ERR_LAST ? (ferry_status_t)m.status
                                                                    : FERRY_ERR_PROTOCOL);
        return FERRY_OK;
    }
    case TAG_ABORT:
        recv_abort(w, ep, m.wait_id);
        return FERRY_OK;
    case TAG_DATA:
        fy_tag_recv_data(w, &m, data, len);
        return FERRY_OK;
    default:
        w->drops_malformed++;
    }
    return FERRY_OK;
}

static void abort_send(uint64_t key, void *value, void *arg)
{
    fy_op_t *op = value;
    ferry_ep_t *ep = arg;
    if (op->type != FY_OP_TAG_SEND || op->ep != ep)
        return;
    fy_tag_msg_t m = {
        .type = TAG_ABORT, .tag = op->tag_send.tag, .len = op->tag_send.len, .wait_id = key};
    /* a synchronous eager send's message is whole at the receiver: nothing to take back */
    (void)fy_tag_rndv_ctl(ep, &m); /* best effort: the endpoint is going away */
}

/*
 * FERRY_TAG_RNDV_THRESH=auto, measured with ferry_perf tag_lat/tag_bw on the reference 2-core
 * box.  Over shm an eager message above one cell buffer goes through the sender's outbox (one
 * copy in, one copy out at the receiver) and beats a get rendezvous up to about 32k, where the
 * two meet (2026-11-28, Release build, load ~1: 8114 B 1.53 vs 2.87 us one-way and 9.5 vs 3.5
 * GB/s streamed; 16k 2.6-2.9 vs 3.4 us; 32k 4.8 vs 5.1 us; 48k 5.5-7.0 vs 5.4 us).  A lane
 * whose cell buffers hold more (the self transport) keeps eager up to the general 64k.  Over tcp
 * and udp a rendezvous costs round trips of several microseconds, and eager stays ahead up to
 * 256k and beyond, so 64k stays.  The sign that reads are memory copies, not requests over a
 * network, is the lane's latency.
 *
 * A memory lane that stages large messages (attr.max_zcopy_local: shm's outbox, where the sender
 * copies the message once into shared memory and the receiver copies it out) sends eager up to
 * 16 MiB (tag_staged_max) while the outbox has room: a message the transport could not stage
 * (it answered INPROGRESS: pulled, or queued) makes the next TAG_STAGED_SKIP above the
 * threshold go by rendezvous, so a stream that outruns its receiver reads by get, one copy,
 * rather than pull each message into a receive buffer and copy it again.  A synchronous send
 * keeps the threshold.  Once the outbox stopped reusing the slot its receiver had just read
 * (shm_obox.c),
 * the two copies beat the get at every size measured (2026-12-02, load ~2, one-way p50 us,
 * eager vs get: 48k 2.7 vs 5.4, 64k 3.5 vs 6.5, 1m 45-50 vs 80-87, 4m 347 vs 428, 16m 2501 vs
 * 2898; 32m and 64m no clear winner under load).
 *
 * ... as long as moving cache lines between the two cores is cheap. Staging hands every line
 * over twice: the receiver reads lines the sender's core holds dirty, and the sender's next
 * copy rewrites lines the receiver's core holds. On the reference box (a 2-vCPU VM) that cost
 * changes for minutes at a time, whatever ferry does: a plain two-thread program copying 1 MiB
 * back and forth through a buffer the same way took 24 us per copy in one state and 380-970 us
 * in the other, when a single cache line took 35-100 ns from core to core and 350 ns. In the
 * slow state the outbox's copy in ran at 1.5-2 GB/s (1.3-1.9 M cycles for 1 MiB, 57-73 k
 * before), the copy out at 3-10, and tag_lat went 4 -> 22 us at 64k and 50 -> 500-590 us at 1m,
 * where the get (which reads the sender's buffer once, dirty lines handed over once, none
 * rewritten) held 7-9 and 80-140. So the sender times each staged send that completed at once
 * (the copy in, two clock reads on a message above 32k): one slower than FERRY_TAG_STAGED_RATE (8)
 * bytes per ns, 128 ns per KiB, is slow and one above twice that rate fast (between: neither) (the
 * fast state: 64k mostly below 64 ns per KiB, 1m below 32, a few in a hundred above 128; the
 * slow state: 480-700 at 1m, 64k 60-85% above 128 and the rest 64-128, the slots of the
 * rotation in turn; the first rounds of the outbox, into cold or unmapped pages, 64-250 and
 * above, are not judged: TAG_STAGED_WARM), and TAG_STAGED_SLOW more slow copies than fast ones
 * send the next TAG_STAGED_SKIP by rendezvous, then one staged again to look: each look that is
 * still slow doubles the skip (up to TAG_STAGED_SKIP << TAG_STAGED_BACKOFF), and only as many
 * fast ones as there were slow end it (a look into a cold slot may pass). 6 interleaved runs
 * each of the old rule, this one and main, 03:48, load ~3 (tag_lat 64k/1m p50 us): fast state
 * 3.6-4.5/46-55 old, 3.6-4.9/45-54 now, main 6.5-8.8/80-96; slow state old 18-30/480-530, now
 * 7.3-10.6/80-93, main 7.0-8.6/81-89.
 *
 * A fixed rate cannot place the middle: there were minutes when the copy in ran at 64-128 ns per
 * KiB, neither slow nor fast, messages stayed staged at 1m 110-180 us one-way, and the get took
 * 55-70.  So with FERRY_TAG_STAGED_RATE=auto (the default) the judge compares the copy with the
 * get itself, per size class (32k .. 16m by powers of two): the sender times each of its gets
 * of a staged size from the RTS to the receiver's ATS, in ns per KiB, and a copy in slower than
 * that (the copy in alone costing more than the whole get) is slow, one under half of it fast.
 * To know what a get costs while everything is staged, the first staged-size message of a
 * class once the copies are judged, and then one every TAG_STAGED_EXPLORE_NS, starts a run of
 * TAG_STAGED_RUN that go by get.  The first get after staged ones is not timed: isolated, a 1m
 * read took 190-620 us here where one of a run of them took 40-100 (64k: ~20 against 6-7), and
 * timed it made every get look three times dearer than it is.  It is also why the runs are
 * timed, not counted: a run every 256 messages put 64k's p99 at 20-28 us (4.4-4.9 without)
 * and its mean up by 0.3-1.0 us; once in 100 ms costs a 1m stream (~2000 messages) well under
 * 1%.  The estimate follows a faster get at once and a
 * slower one by a quarter at most per sample, so that a read stalled for milliseconds (one in a
 * few hundred) does not hide the rest.  Until a class has a get timed, the fixed 8 applies.
 */
#define TAG_THRESH_DEFAULT    (64 * 1024)
#define TAG_THRESH_MEMORY     (32 * 1024) /* the least for a memory lane (above) */
#define TAG_MEMORY_LATENCY    1000.0      /* ns: below this, the lane is a memory transport */
#define TAG_THRESH_STAGED     ((size_t)16 << 20) /* the most sent eager through a staging area */
#define TAG_STAGED_SKIP       16 /* after one not staged, so many go by rendezvous (a stream) */
#define TAG_STAGED_SLOW       4  /* slow copies, net of fast ones, that turn to rendezvous */
#define TAG_STAGED_BACKOFF    6  /* a slow state that lasts: up to TAG_STAGED_SKIP << 6 skipped */
#define TAG_STAGED_WARM       ((size_t)4 << 20) /* bytes staged before the copies are judged */
#define TAG_STAGED_RATE       8 /* bytes per ns: rate auto before a get of the size was timed */
#define TAG_STAGED_EXPLORE_NS 100000000ull /* rate auto: once in so long per size class ... */
#define TAG_STAGED_RUN        4            /* ... so many go by get, all but the first timed */

void fy_tag_ep_init(ferry_ep_t *ep)
{
    const fy_ctx_opts_t *o = &ep->worker->ctx->opts;
    const fy_iface_t *fi = ep->lanes[FY_LANE_AM].iface;
    ep->tag_rndv_thresh = o->tag_rndv_thresh;
    ep->tag_staged_max = 0;
    ep->tag_staged_warm = 0;
    ep->tag_staged_skip = ep->tag_staged_slow = ep->tag_staged_backoff = 0;
    ep->tag_staged_gets = ep->tag_staged_prev_get = 0;
    ep->tag_explore_run = 0;
    memset(ep->tag_get_ns, 0, sizeof(ep->tag_get_ns));
    memset(ep->tag_explore_ns, 0, sizeof(ep->tag_explore_ns));
    if (o->tag_rndv_thresh != FY_TAG_THRESH_AUTO)
        return;
    ep->tag_rndv_thresh = TAG_THRESH_DEFAULT;
    size_t hdr = sizeof(fy_am_hdr_t) + sizeof(uint64_t); /* an eager message's headers */
    int by_get = o->tag_rndv_scheme == FY_TAG_SCHEME_GET ||
                 (o->tag_rndv_scheme == FY_TAG_SCHEME_AUTO && !ep->tag_no_get);
    if (by_get && (fi->attr.caps & FY_TL_CAP_GET) && fi->attr.latency_ns < TAG_MEMORY_LATENCY &&
        fi->attr.max_bcopy > hdr)
        ep->tag_rndv_thresh = FY_MIN(FY_MAX(fi->attr.max_bcopy - hdr, (size_t)TAG_THRESH_MEMORY),
                                     (size_t)TAG_THRESH_DEFAULT);
    size_t staged = fi->attr.max_zcopy_local > hdr ? fi->attr.max_zcopy_local - hdr : 0;
    if (fi->attr.latency_ns < TAG_MEMORY_LATENCY && staged > ep->tag_rndv_thresh) {
        ep->tag_staged_max = FY_MIN(staged, (size_t)TAG_THRESH_STAGED);
        ep->tag_staged_gets = by_get && (fi->attr.caps & FY_TL_CAP_GET);
    }
}

/* The size class of a staged message: 32 KiB .. 16 MiB by powers of two (smaller ones in the
 * first, larger in the last). */
static unsigned staged_bucket(size_t len)
{
    unsigned lg = 63u - (unsigned)__builtin_clzll((unsigned long long)len | 1);
    unsigned b = lg > 15 ? lg - 15 : 0;
    return b < FY_TAG_STAGED_BUCKETS ? b : FY_TAG_STAGED_BUCKETS - 1;
}

/* A send of a staged size (above the threshold: never 0 bytes) went by get and took `ns` from
 * its RTS to the receiver's ATS: what the judge compares copies with (rate auto), per size
 * class, in ns per KiB. */
static void staged_note_get(ferry_ep_t *ep, size_t len, uint64_t ns)
{
    uint64_t per_kib = FY_MIN(ns * 1024 / len, (uint64_t)UINT32_MAX);
    uint32_t *g = &ep->tag_get_ns[staged_bucket(len)];
    /* Down at once (3/4 of the way), up by at most a quarter a sample: a read stalled for
     * milliseconds (one in a few hundred here) must not hide the gets that follow it. */
    if (*g == 0)
        *g = (uint32_t)FY_MAX(per_kib, 1);
    else if (per_kib < *g)
        *g = (uint32_t)((*g + 3 * per_kib + 3) / 4);
    else
        *g = (uint32_t)((3ull * *g + FY_MIN(per_kib, 2ull * *g) + 3) / 4);
}

/* A staged send that completed at once took `ns` for its `len` bytes: judge its copy. */
static void staged_judge(ferry_ep_t *ep, size_t len, uint64_t ns)
{
    if (ep->tag_staged_warm < TAG_STAGED_WARM) { /* the first rounds copy into cold memory */
        ep->tag_staged_warm += len;
        return;
    }
    unsigned long rate = ep->worker->ctx->opts.tag_staged_rate;
    uint32_t get = rate == FY_TAG_STAGED_AUTO ? ep->tag_get_ns[staged_bucket(len)] : 0;
    int slow, fast;
    if (get != 0) { /* against the get: slow above its ns per KiB, fast below half */
        uint64_t copy = ns * 1024 / len;
        slow = copy > get;
        fast = 2 * copy <= get;
    } else { /* bytes per ns (8 until a get of this size has been timed) */
        uint64_t r = rate == FY_TAG_STAGED_AUTO ? TAG_STAGED_RATE : FY_MIN(rate, 1ul << 20);
        slow = ns * r > len;
        fast = ns * r * 2 <= len;
    }
    if (fast) { /* the backoff ends with the run of slow */
        if (ep->tag_staged_slow != 0 && --ep->tag_staged_slow == 0)
            ep->tag_staged_backoff = 0;
        return;
    }
    if (!slow)
        return; /* neither */
    if (ep->tag_staged_slow < TAG_STAGED_SLOW)
        ep->tag_staged_slow++;
    if (ep->tag_staged_slow < TAG_STAGED_SLOW)
        return;
    ep->tag_staged_skip = TAG_STAGED_SKIP << ep->tag_staged_backoff;
    if (ep->tag_staged_backoff < TAG_STAGED_BACKOFF)
        ep->tag_staged_backoff++;
}

/* Rate auto, once the copies are judged: the first staged-size message of a class, and then
 * the first after TAG_STAGED_EXPLORE_NS, starts a run of TAG_STAGED_RUN that go by get, so the
 * judge knows what a get costs now. */
static int staged_explore(ferry_ep_t *ep, size_t len, uint64_t now)
{
    if (ep->worker->ctx->opts.tag_staged_rate != FY_TAG_STAGED_AUTO || !ep->tag_staged_gets ||
        ep->tag_staged_warm < TAG_STAGED_WARM)
        return 0;
    if (ep->tag_explore_run != 0) {
        ep->tag_explore_run--;
        return 1;
    }
    uint64_t *last = &ep->tag_explore_ns[staged_bucket(len)];
    if (*last != 0 && now - *last < TAG_STAGED_EXPLORE_NS)
        return 0;
    *last = now | 1;
    ep->tag_explore_run = TAG_STAGED_RUN - 1;
    return 1;
}

/* Is the data in memory of FERRY_MEM_ALLOCATE?  shm then lets the receiver read it in place
 * (shm_mapped.c): INPROGRESS until its copy out is done, one copy in all, better than a get. */
static int in_allocated(const struct iovec *iov, size_t iovcnt)
{
    fy_shmem_ref_t ref;
    size_t off;
    return iovcnt != 0 && fy_shmem_allocated() != 0 &&
           fy_shmem_find(iov[iovcnt - 1].iov_base, iov[iovcnt - 1].iov_len, &ref, &off);
}

ferry_status_t fy_tag_staged_send(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                  size_t iovcnt, ferry_request_t *req)
{
    uint64_t t0 = fy_time_ns();
    size_t len = fy_iov_total(iov, iovcnt);
    int by_get = ep->tag_staged_skip != 0;
    if (by_get)
        ep->tag_staged_skip--;
    else
        by_get = staged_explore(ep, len, t0);
    if (by_get) { /* timed unless the first after staged ones (the comment above the judge) */
        uint64_t timed = ep->tag_staged_prev_get ? t0 : 0;
        ep->tag_staged_prev_get = 1;
        return rndv_send(ep, tag, iov, iovcnt, req, timed);
    }
    ep->tag_staged_prev_get = 0;
    ferry_status_t st = fy_tag_eager_sendv(ep, &tag, sizeof(tag), iov, iovcnt, req);
    if (st == FERRY_OK)
        staged_judge(ep, len, fy_time_ns() - t0);
    else if (st == FERRY_INPROGRESS && !in_allocated(iov, iovcnt))
        ep->tag_staged_skip = TAG_STAGED_SKIP; /* not staged (the outbox was full): pulled or
                                                  queued */
    return st;
}

void fy_tag_ep_closing(ferry_ep_t *ep)
{
    if (fy_tag_ep_usable(ep))
        fy_hash_foreach(&ep->worker->waiting, abort_send, ep);
}

void fy_tag_rndv_init_worker(ferry_worker_t *w)
{
    fy_am_set_handler(w, FY_AM_ID_TAG_RNDV, tag_rndv_handler, w);
}
