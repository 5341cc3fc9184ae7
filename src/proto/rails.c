/*
 * rails.c - multi-rail: an active message too large for one transport operation, or larger
 * than FERRY_RAILS_THRESH to a peer with several good paths, goes as fragments spread over
 * the endpoint's rails; the receiver gathers them and keeps the endpoint's order.
 *
 * Sending.  Wireup (lanes.c, wireup.c) gives the endpoint its rails: the AM lane as rail 0
 * and up to FERRY_MAX_RAILS - 1 more lanes on separate devices, each weighted by its
 * bandwidth; or, where the AM lane (chosen for latency) has a bulk lane beside it, rail 0
 * with weight 0 (it carries each message's one-byte anchor) and up to FERRY_MAX_RAILS lanes
 * from the bulk lane on.  Only rails whose connection is up (tl ep_ready) get a share.  A striped
 * message gives each rail a contiguous share of its bytes in proportion to the weights (rail 0's
 * share starts at offset 0) and submits the pieces round-robin over the rails, each piece at most
 * what its rail carries in one operation.  A message that is only too large for one operation (or
 * below the threshold, or to an endpoint still in wireup) uses rail 0 alone.  Every fragment names
 * its message by a per-endpoint number; the one at offset 0, sent on the AM lane in order with the
 * endpoint's other messages, is the message's anchor.
 *
 * Receiving.  The endpoint is found by the id in the proto header whatever connection a
 * fragment arrived on (every lane of a peer names the same endpoint).  Fragments land at
 * their offset in the message's buffer, in any order.  The AM lane's order is the
 * endpoint's order: an anchor takes the message's place in it, and while the message at the
 * head of that order is incomplete, every later message of the endpoint (a whole one, or
 * another anchor) waits behind it (a whole one is copied).  So handlers run in the order the
 * messages were sent, as with one lane, and an endpoint that never stripes never holds
 * anything: its fragments arrive in order on one lane.  Fragments whose anchor has not come
 * yet wait aside; at most FY_RAILS_MAX_MSGS messages per endpoint are gathered or held at a
 * time (more is a peer's error: dropped and counted as malformed).
 *
 * RMA: a native put or get above the threshold is split into pieces over the RMA lane and
 * the rails of its transport (fy_rails_begin_rma).  Nothing is striped while the endpoint is
 * in wireup.
 *
 * A rail that fails.  It is dropped from the rails with a warning; the pieces in flight on it
 * fail with its error (so does the request of their message).  The pieces it carried cannot
 * be sent again: the transport may have taken and lost them after the request completed and
 * the caller reused its buffer.  So the receiver is told instead, so that no message waits
 * for them forever: the sender remembers, for its last FY_RAILS_TX_KEEP striped messages, the
 * rail each share went on and its size, and for each that had a share on the failed rail it
 * sends an abort on the AM lane (in order behind the message's anchor, so the message is known
 * there when it comes).  Every fragment names the rail it went on, and the receiver counts the
 * bytes of each message per rail: a message still missing bytes of that share when the abort
 * comes is dropped with a warning, and what waited behind it in the endpoint's order is
 * delivered; fragments of it arriving later are dropped.  A message whose share on that rail
 * had all arrived is left to complete (its other shares are on working rails).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"

#define FY_RAILS_MAX_MSGS 64
#define FY_RAILS_TX_KEEP  64 /* striped messages remembered for a rail's failure */
#define FY_RAILS_ABORTED  16 /* messages dropped on an abort, remembered for late fragments */

/* A message being gathered or held; for a rendezvous handler's id, also the descriptor the
 * handler is given (ferry_am_desc_t) once the header is in, until its data is placed. */
typedef struct ferry_am_desc fy_rails_msg_t;
struct ferry_am_desc {
    fy_rails_msg_t *next;
    int held;     /* a whole message waiting for its turn (a copy), else a reassembly */
    int anchored; /* has its place in the endpoint's order */
    uint32_t seq;
    unsigned id, hdr_len;
    uint64_t total, got;
    uint8_t *buf; /* header + data; with rndv, the header alone */
    /* rendezvous: the id had a rendezvous handler when the first fragment came */
    int rndv;
    int released;                    /* ferry_am_data_release: later fragments are dropped */
    unsigned hdr_got;                /* header bytes arrived */
    uint8_t *stage;                  /* data that came before the handler gave a buffer */
    uint8_t *ubuf;                   /* the handler's buffer (ferry_am_recv_data) */
    fy_op_t *op;                     /* recv_data's request, completed when the last byte is in */
    ferry_ep_t *ep;                  /* announced: its endpoint (NULL once it failed) */
    ferry_status_t failure;          /* why the data will not come */
    uint64_t got_rail[FY_MAX_RAILS]; /* bytes arrived per sender's rail */
};

struct fy_rails_rx {
    fy_rails_msg_t *head, *tail; /* the endpoint's order: anchored and held messages */
    fy_rails_msg_t *loose;       /* reassemblies whose anchor has not arrived */
    unsigned count;
    uint32_t aborted[FY_RAILS_ABORTED]; /* messages dropped on an abort (seq + 1; 0: none) */
    unsigned naborted;
};

/* What a sender keeps of one striped message: each share on a rail other than the AM lane. */
typedef struct fy_rails_sent {
    uint32_t seq;
    uint8_t n;
    uint8_t rail[FY_MAX_RAILS];      /* the rail's index when it was sent (in the fragments) */
    fy_tl_ep_t *tl_ep[FY_MAX_RAILS]; /* the rail's transport endpoint */
    uint64_t len[FY_MAX_RAILS];      /* the share's bytes */
} fy_rails_sent_t;

typedef struct fy_rails_tx fy_rails_tx_t;
struct fy_rails_tx {
    unsigned next; /* ring */
    fy_rails_sent_t sent[FY_RAILS_TX_KEEP];
};

/* ---- sending ------------------------------------------------------------------------------ */

/* The most one AM on a lane carries, proto header included (at most FERRY_AM_EAGER_MAX). */
static size_t lane_max(const ferry_ep_t *ep, const fy_lane_t *lane)
{
    const fy_tl_iface_attr_t *attr = &lane->iface->attr;
    size_t m = (attr->caps & FY_TL_CAP_AM_ZCOPY) ? attr->max_zcopy : 0;
    if ((attr->caps & FY_TL_CAP_AM_BCOPY) && attr->max_bcopy > m)
        m = attr->max_bcopy;
    size_t cap = ep->worker->ctx->opts.am_eager_max;
    return m < cap ? m : cap;
}

/* Is a rail's connection up (tl.h ep_ready)?  Bulk data goes only onto rails that are, so a
 * lane still connecting (or never connecting: filtered) holds nothing back. */
static int rail_ready(const fy_lane_t *l)
{
    const fy_tl_ops_t *ops = l->iface->tl->ops;
    return ops->ep_ready == NULL || ops->ep_ready(l->tl_ep);
}

int fy_rails_stripe(const ferry_ep_t *ep, size_t total)
{
    if (ep->nrails < 2 || total <= ep->worker->ctx->opts.rails_thresh ||
        ep->state != FY_EP_CONNECTED)
        return 0;
    for (unsigned r = 1; r < ep->nrails; r++)
        if (rail_ready(&ep->rails[r]))
            return 1;
    return 0;
}

void fy_rails_begin(ferry_ep_t *ep, size_t total, size_t room, fy_rails_cursor_t *c)
{
    memset(c, 0, sizeof(*c));
    c->seq = ep->frag_seq++ & FY_AM_FRAG_SEQ_MASK;
    c->n = 1;
    c->end[0] = total;
    c->room[0] = room;
    if (!fy_rails_stripe(ep, total))
        return;
    uint64_t sum = 0;
    int ready[FY_MAX_RAILS];
    for (unsigned r = 0; r < ep->nrails; r++) {
        ready[r] = r == 0 || rail_ready(&ep->rails[r]);
        if (ready[r])
            sum += ep->rail_weight[r];
    }
    /* rail 0 of weight 0 (the AM lane beside a bulk lane, lanes.c): the anchor alone */
    int anchor_only = ep->rail_weight[0] == 0;
    size_t start = 0;
    for (unsigned r = 0; r < ep->nrails && sum != 0; r++) {
        size_t m = r == 0 ? room + 16 + sizeof(fy_am_frag_hdr_t) : lane_max(ep, &ep->rails[r]);
        if (!ready[r] || m <= 16 + 2 * sizeof(fy_am_frag_hdr_t))
            continue;
        size_t share = r == 0 && anchor_only
                           ? 1
                           : (size_t)((double)total * (double)ep->rail_weight[r] / (double)sum);
        if (share > total - start)
            share = total - start;
        unsigned slot = r == 0 ? 0 : c->n; /* rail 0 is slot 0 */
        c->pos[slot] = start;
        c->end[slot] = start + share;
        c->room[slot] = m - 16 - sizeof(fy_am_frag_hdr_t);
        c->rail[slot] = r;
        if (r != 0)
            c->n++;
        start += share;
    }
    if (start < total) /* rails skipped: rail 0 takes the rest after the others */
        c->end[c->n - 1] = total;
    if (c->n < 2)
        return;
    /* remembered, in case one of its rails fails (the top of this file) */
    if (ep->frag_tx == NULL && (ep->frag_tx = calloc(1, sizeof(*ep->frag_tx))) == NULL)
        return; /* out of memory: a failure of its rail is not announced for this message */
    fy_rails_sent_t *e = &ep->frag_tx->sent[ep->frag_tx->next++ % FY_RAILS_TX_KEEP];
    e->seq = c->seq;
    e->n = 0;
    for (unsigned k = 0; k < c->n; k++) {
        if (c->rail[k] == 0 || c->end[k] <= c->pos[k])
            continue;
        e->rail[e->n] = (uint8_t)c->rail[k];
        e->tl_ep[e->n] = ep->rails[c->rail[k]].tl_ep;
        e->len[e->n++] = c->end[k] - c->pos[k];
    }
}

size_t fy_rails_next(ferry_ep_t *ep, fy_rails_cursor_t *c, size_t *off, fy_lane_t **lane,
                     uint32_t *tag)
{
    for (unsigned k = 0; k < c->n; k++) {
        unsigned s = (c->turn + k) % c->n;
        if (c->pos[s] >= c->end[s])
            continue;
        size_t len = c->end[s] - c->pos[s];
        if (len > c->room[s])
            len = c->room[s];
        *off = c->pos[s];
        c->pos[s] += len;
        c->turn = s + 1;
        *lane = c->lane[s] != NULL ? c->lane[s] : c->rail[s] == 0 ? NULL : &ep->rails[c->rail[s]];
        *tag = c->seq | (*off == 0 ? FY_AM_FRAG_ANCHOR : 0) |
               ((uint32_t)c->rail[s] << FY_AM_FRAG_RAIL_SHIFT & FY_AM_FRAG_RAIL_MASK);
        return len;
    }
    return 0;
}

/*
 * RMA: a native put or get above the threshold (or above the RMA lane's max_rma) is split into
 * pieces spread over the RMA lane and the rails of the same transport that do put and get (the
 * key was unpacked by that transport, and every interface of it honours it).  The remote
 * memory is addressed by offset, so the pieces need no order; a flush covers every lane.
 */
static unsigned rma_rails(ferry_ep_t *ep, const ferry_rkey_t *rkey, fy_lane_t **out)
{
    fy_lane_t *rl = &ep->lanes[FY_LANE_RMA];
    unsigned n = 0;
    out[n++] = rl;
    if (ep->nrails < 2 || ep->state != FY_EP_CONNECTED || rkey->tl != rl->iface->tl)
        return n;
    for (unsigned r = 0; r < ep->nrails; r++) {
        fy_lane_t *l = &ep->rails[r];
        uint64_t both = FY_TL_CAP_PUT | FY_TL_CAP_GET;
        if (l->tl_ep != rl->tl_ep && l->iface->tl == rl->iface->tl &&
            (l->iface->attr.caps & both) == both)
            out[n++] = l;
    }
    return n;
}

int fy_rails_stripe_rma(ferry_ep_t *ep, const ferry_rkey_t *rkey, size_t len)
{
    fy_lane_t *l[FY_MAX_RAILS];
    return len > ep->worker->ctx->opts.rails_thresh && rma_rails(ep, rkey, l) > 1;
}

void fy_rails_begin_rma(ferry_ep_t *ep, const ferry_rkey_t *rkey, size_t len, size_t max,
                        fy_rails_cursor_t *c)
{
    fy_lane_t *l[FY_MAX_RAILS];
    memset(c, 0, sizeof(*c));
    c->n = len > ep->worker->ctx->opts.rails_thresh ? rma_rails(ep, rkey, l) : 1;
    size_t start = 0;
    for (unsigned s = 0; s < c->n; s++) {
        /* equal shares: the rails of one transport advertise alike */
        size_t share = s + 1 == c->n ? len - start : len / c->n;
        size_t m = l[s]->iface->attr.max_rma;
        c->pos[s] = start;
        c->end[s] = start + share;
        c->room[s] = s == 0 ? max : m != 0 ? m : max;
        c->lane[s] = s == 0 ? NULL : l[s];
        start += share;
    }
    if (c->n == 1) {
        c->end[0] = len;
        c->room[0] = max;
    }
}

/* ---- receiving ---------------------------------------------------------------------------- */

static void msg_free(fy_rails_msg_t *m)
{
    free(m->buf);
    free(m->stage);
    free(m);
}

void fy_rails_rx_free(ferry_ep_t *ep)
{
    free(ep->frag_tx);
    ep->frag_tx = NULL;
    fy_rails_rx_t *rx = ep->frag_rx;
    if (rx == NULL)
        return;
    for (fy_rails_msg_t *lists[2] = {rx->head, rx->loose}, **l = lists; l < lists + 2; l++)
        while (*l != NULL) {
            fy_rails_msg_t *m = *l;
            *l = m->next;
            msg_free(m);
        }
    free(rx);
    ep->frag_rx = NULL;
}

static fy_rails_rx_t *rx_of(ferry_ep_t *ep)
{
    if (ep->frag_rx == NULL)
        ep->frag_rx = calloc(1, sizeof(fy_rails_rx_t));
    return ep->frag_rx;
}

static void append(fy_rails_rx_t *rx, fy_rails_msg_t *m)
{
    m->next = NULL;
    m->anchored = 1;
    if (rx->tail != NULL)
        rx->tail->next = m;
    else
        rx->head = m;
    rx->tail = m;
}

/* ---- rendezvous: messages announced to a rendezvous handler -------------------------------- */

static void desc_unlink(ferry_worker_t *w, fy_rails_msg_t *m)
{
    for (fy_rails_msg_t **l = &w->am_descs; *l != NULL; l = &(*l)->next)
        if (*l == m) {
            *l = m->next;
            return;
        }
}

/* An announced message is done (its data placed, dropped, or never to come): answer whoever
 * waits for it and free it. */
static void desc_done(ferry_worker_t *w, fy_rails_msg_t *m, ferry_status_t st)
{
    desc_unlink(w, m);
    if (m->op != NULL) {
        if (m->op->req != NULL)
            m->op->req->length = st == FERRY_OK ? m->total - m->hdr_len : 0;
        fy_worker_complete_later(w, m->op, st);
    }
    msg_free(m);
}

/* Bytes [off, off + len) of a message's header + data arrived on the sender's rail: put them
 * where they belong. */
static void place(fy_rails_msg_t *m, unsigned rail, uint64_t off, const uint8_t *data, size_t len)
{
    m->got += len;
    m->got_rail[rail] += len;
    if (!m->rndv) {
        memcpy(m->buf + off, data, len);
        return;
    }
    if (off < m->hdr_len) {
        size_t h = m->hdr_len - off < len ? m->hdr_len - off : len;
        memcpy(m->buf + off, data, h);
        m->hdr_got += (unsigned)h;
        off += h;
        data += h;
        len -= h;
    }
    if (len == 0)
        return;
    size_t doff = off - m->hdr_len;
    if (m->ubuf != NULL) {
        memcpy(m->ubuf + doff, data, len);
    } else if (!m->released && m->failure == FERRY_OK) {
        if (m->stage == NULL && (m->stage = malloc(m->total - m->hdr_len)) == NULL) {
            fy_warn("an active message of %llu bytes: no memory to keep its data",
                    (unsigned long long)m->total);
            m->failure = FERRY_ERR_NO_MEMORY;
            return;
        }
        memcpy(m->stage + doff, data, len);
    }
}

/* Run a message's handler.  Returns 1 when a rendezvous handler was given the message as a
 * descriptor (it now lives on the worker's list), 0 when the caller frees it. */
static int deliver(ferry_worker_t *w, ferry_ep_t *ep, fy_rails_msg_t *m)
{
    fy_am_entry_t *e = fy_am_entry(w, m->id);
    size_t dlen = m->total - m->hdr_len;
    if (dlen > w->am_rx_max)
        w->am_rx_max = dlen;
    if (e != NULL && m->rndv && e->rndv_cb == NULL)
        e = NULL; /* its handler changed while it arrived: no whole copy to give the new one */
    if (e == NULL || (e->cb == NULL && e->rndv_cb == NULL)) {
        if (w->drops_no_handler++ < 8)
            fy_warn("dropping an active message with id %u: no handler is registered", m->id);
        return 0;
    }
    if (!m->rndv) {
        if (e->cb != NULL)
            e->cb(e->arg, m->buf, m->hdr_len, m->buf + m->hdr_len, dlen, ep);
        else
            e->rndv_cb(e->arg, m->buf, m->hdr_len, m->buf + m->hdr_len, dlen, NULL, ep);
        return 0;
    }
    if (m->got == m->total && m->failure == FERRY_OK) { /* all here before its turn */
        e->rndv_cb(e->arg, m->buf, m->hdr_len, m->stage, dlen, NULL, ep);
        return 0;
    }
    m->ep = ep;
    m->next = w->am_descs;
    w->am_descs = m;
    w->am_in_rndv_cb++;
    e->rndv_cb(e->arg, m->buf, m->hdr_len, NULL, dlen, m, ep);
    w->am_in_rndv_cb--;
    return 1;
}

ferry_status_t ferry_am_recv_data(ferry_worker_t *w, ferry_am_desc_t *m, void *buf, size_t len,
                                  ferry_request_t *req)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || m == NULL || m->ubuf != NULL || m->released)
        return FERRY_ERR_INVALID_PARAM;
    size_t dlen = m->total - m->hdr_len;
    if (buf == NULL && len != 0)
        return FERRY_ERR_INVALID_PARAM;
    if (len < dlen) {
        fy_error("ferry_am_recv_data: a buffer of %zu bytes for %zu bytes of data", len, dlen);
        return FERRY_ERR_MESSAGE_TRUNCATED;
    }
    if (req == NULL && w->am_in_rndv_cb != 0 && m->got < m->total && m->ep != NULL) {
        fy_error("ferry_am_recv_data: a blocking call (no request) inside an AM handler");
        return FERRY_ERR_INVALID_PARAM;
    }
    ferry_status_t st = m->failure; /* every byte here: the endpoint may be gone, no matter */
    if (st == FERRY_OK && m->ep == NULL && m->got < m->total)
        st = FERRY_ERR_NOT_CONNECTED;
    if (st != FERRY_OK || m->got == m->total) {
        if (st == FERRY_OK && dlen != 0)
            memcpy(buf, m->stage, dlen);
        if (req != NULL) {
            req->status = st;
            req->length = st == FERRY_OK ? dlen : 0;
        }
        desc_done(w, m, st);
        return st;
    }
    if (m->stage != NULL) { /* what came before: the rest goes straight to buf */
        memcpy(buf, m->stage, dlen);
        free(m->stage);
        m->stage = NULL;
    }
    ferry_request_t own; /* no request: block on one of our own */
    memset(&own, 0, sizeof(own));
    m->op = fy_op_get(w, NULL, FY_OP_AM, req != NULL ? req : &own);
    if (m->op == NULL)
        return FERRY_ERR_NO_MEMORY;
    m->ubuf = buf;
    if (req != NULL)
        return FERRY_INPROGRESS;
    while (own.status == FERRY_INPROGRESS) /* desc_done completes it */
        if (ferry_worker_progress(w) == 0)
            ferry_worker_wait(w, 100);
    return own.status;
}

ferry_status_t ferry_am_data_release(ferry_worker_t *w, ferry_am_desc_t *m)
{
    FY_WORKER_GUARD(w);
    if (w == NULL || m == NULL || m->ubuf != NULL || m->released)
        return FERRY_ERR_INVALID_PARAM;
    if (m->ep == NULL || m->got == m->total) {
        desc_done(w, m, FERRY_OK);
        return FERRY_OK;
    }
    m->released = 1; /* freed when its last fragment has come (or its endpoint goes) */
    free(m->stage);
    m->stage = NULL;
    return FERRY_OK;
}

void fy_rails_rndv_ep_gone(ferry_ep_t *ep, ferry_status_t st)
{
    ferry_worker_t *w = ep->worker;
    fy_rails_msg_t *m = w->am_descs, *next;
    for (; m != NULL; m = next) {
        next = m->next;
        if (m->ep != ep)
            continue;
        if (m->op != NULL || m->released) {
            desc_done(w, m, st);
        } else { /* kept: recv_data will say so, unless every byte had come */
            m->ep = NULL;
            if (m->got < m->total)
                m->failure = st;
        }
    }
}

void fy_rails_rndv_free_all(ferry_worker_t *w)
{
    while (w->am_descs != NULL) {
        fy_rails_msg_t *m = w->am_descs;
        w->am_descs = m->next;
        if (m->op != NULL)
            fy_op_put(m->op);
        msg_free(m);
    }
}

/* ---- gathering ---------------------------------------------------------------------------- */

/* Is the message at the head of the order ready for its handler? */
static int ready(const fy_rails_msg_t *m)
{
    return m->held || (m->rndv ? m->hdr_got == m->hdr_len : m->got >= m->total);
}

/* Run the handlers of the complete messages at the head of the endpoint's order. */
static void drain(ferry_worker_t *w, ferry_ep_t *ep)
{
    uint32_t id = ep->id;
    for (;;) {
        fy_rails_rx_t *rx = ep->frag_rx;
        if (rx == NULL || rx->head == NULL)
            return;
        fy_rails_msg_t *m = rx->head;
        if (!ready(m))
            return;
        rx->head = m->next;
        if (rx->head == NULL)
            rx->tail = NULL;
        rx->count--;
        if (!deliver(w, ep, m))
            msg_free(m);
        /* the handler may have closed the endpoint */
        if (fy_worker_ep_lookup(w, id) != ep || ep->state == FY_EP_CLOSED)
            return;
    }
}

int fy_rails_hold(ferry_worker_t *w, ferry_ep_t *ep, unsigned id, const uint8_t *hdr,
                  size_t hdr_len, const uint8_t *data, size_t len)
{
    fy_rails_rx_t *rx = ep->frag_rx;
    if (rx == NULL || rx->head == NULL)
        return 0;
    fy_rails_msg_t *m = calloc(1, sizeof(*m));
    if (m != NULL && (m->buf = malloc(hdr_len + len + 1)) == NULL) {
        free(m);
        m = NULL;
    }
    if (m == NULL || rx->count >= FY_RAILS_MAX_MSGS) {
        if (m != NULL)
            msg_free(m);
        if (w->drops_malformed++ == 0)
            fy_warn("dropping an active message held behind a striped one: %s",
                    m == NULL ? "out of memory" : "too many waiting");
        return 1;
    }
    memcpy(m->buf, hdr, hdr_len);
    if (len != 0)
        memcpy(m->buf + hdr_len, data, len);
    m->held = 1;
    m->id = id;
    m->hdr_len = (unsigned)hdr_len;
    m->total = m->got = hdr_len + len;
    rx->count++;
    append(rx, m);
    return 1;
}

static fy_rails_msg_t *find(fy_rails_msg_t *l, uint32_t seq, fy_rails_msg_t **prev)
{
    *prev = NULL;
    for (; l != NULL; *prev = l, l = l->next)
        if (!l->held && l->seq == seq)
            return l;
    return NULL;
}

/* Was message seq dropped on an abort?  (Its fragments still on their way are dropped too.) */
static int was_aborted(const fy_rails_rx_t *rx, uint32_t seq)
{
    for (unsigned k = 0; rx != NULL && k < FY_RAILS_ABORTED; k++)
        if (rx->aborted[k] == seq + 1)
            return 1;
    return 0;
}

/* Unlink m from the list *l (prev its predecessor or NULL); tail fixed when l is the order. */
static void unlink_msg(fy_rails_rx_t *rx, fy_rails_msg_t **l, fy_rails_msg_t *prev,
                       fy_rails_msg_t *m)
{
    if (prev != NULL)
        prev->next = m->next;
    else
        *l = m->next;
    if (l == &rx->head && rx->tail == m)
        rx->tail = prev;
    rx->count--;
}

/* The sender's rail failed: message seq's share of len bytes on it will not come in whole. */
static void rails_abort(ferry_worker_t *w, ferry_ep_t *ep, uint32_t seq, unsigned rail,
                        uint64_t len)
{
    fy_rails_msg_t *m, *prev;
    for (m = w->am_descs; m != NULL; m = m->next) /* announced to a rendezvous handler */
        if (m->ep == ep && m->seq == seq)
            break;
    fy_rails_rx_t *rx = ep->frag_rx;
    fy_rails_msg_t **l = NULL;
    if (m == NULL && rx != NULL) {
        if ((m = find(rx->head, seq, &prev)) != NULL)
            l = &rx->head;
        else if ((m = find(rx->loose, seq, &prev)) != NULL)
            l = &rx->loose;
    }
    int in_order = rx != NULL && l == &rx->head;
    if (m == NULL || m->got_rail[rail] >= len || (in_order && ready(m)))
        return; /* delivered, or its share on that rail is all here: it completes */
    fy_warn("endpoint %u: an active message of %llu bytes (id %u) dropped: %llu of its bytes "
            "were on the sender's rail %u, which failed",
            ep->id, (unsigned long long)m->total, m->id,
            (unsigned long long)(len - m->got_rail[rail]), rail);
    w->drops_malformed++;
    fy_rails_rx_t *arx = rx_of(ep); /* NULL (out of memory): late fragments make a loose one */
    if (arx != NULL)
        arx->aborted[arx->naborted++ % FY_RAILS_ABORTED] = seq + 1;
    if (l == NULL) { /* announced: the receive of its data fails (now, or when it is asked) */
        if (m->op != NULL || m->released) {
            desc_done(w, m, FERRY_ERR_CONNECTION_RESET);
        } else {
            m->ep = NULL; /* no more fragments are placed; recv_data gets the failure */
            m->failure = FERRY_ERR_CONNECTION_RESET;
        }
        return;
    }
    unlink_msg(rx, l, prev, m);
    msg_free(m);
    drain(w, ep); /* what waited behind it */
}

void fy_rails_frag_recv(ferry_worker_t *w, ferry_ep_t *ep, const uint8_t *hdr, size_t hdr_len,
                        const uint8_t *data, size_t len)
{
    fy_am_frag_hdr_t fh;
    const char *why = "malformed";
    if (hdr_len != sizeof(fh))
        goto drop;
    memcpy(&fh, hdr, sizeof(fh));
    uint32_t seq = fh.seq & FY_AM_FRAG_SEQ_MASK;
    unsigned rail = (fh.seq & FY_AM_FRAG_RAIL_MASK) >> FY_AM_FRAG_RAIL_SHIFT;
    int anchor = (fh.seq & FY_AM_FRAG_ANCHOR) != 0;
    if (rail >= FY_MAX_RAILS)
        goto drop;
    if (fh.id == FY_AM_ID_FRAG) { /* an abort: the sender's rail failed */
        if (len != 0 || anchor || rail == 0)
            goto drop;
        rails_abort(w, ep, seq, rail, fh.total);
        return;
    }
    if (fh.id >= FY_AM_ID_TOTAL || fh.user_hdr_len > FERRY_AM_HEADER_MAX ||
        fh.user_hdr_len > fh.total || fh.offset > fh.total || len > fh.total - fh.offset ||
        fh.total >= SIZE_MAX)
        goto drop;
    if (anchor && fh.offset != 0)
        goto drop;
    if (FY_UNLIKELY(was_aborted(ep->frag_rx, seq)))
        return; /* the rest of a message dropped on an abort (counted then) */
    fy_rails_msg_t *prev, *m;
    for (m = w->am_descs; m != NULL; m = m->next) /* announced to a rendezvous handler */
        if (m->ep == ep && m->seq == seq)
            break;
    if (m != NULL) {
        if (anchor || m->total != fh.total || m->id != fh.id || m->hdr_len != fh.user_hdr_len ||
            m->got + len > m->total)
            goto drop;
        place(m, rail, fh.offset, data, len);
        if (m->got == m->total && (m->ubuf != NULL || m->released))
            desc_done(w, m, FERRY_OK);
        return;
    }
    fy_rails_rx_t *rx = rx_of(ep);
    if (rx == NULL) {
        why = "out of memory";
        goto drop;
    }
    m = find(rx->head, seq, &prev);
    if (m == NULL && (m = find(rx->loose, seq, &prev)) != NULL && anchor) {
        /* its anchor: the message takes its place in the endpoint's order */
        if (prev != NULL)
            prev->next = m->next;
        else
            rx->loose = m->next;
        append(rx, m);
    }
    if (m == NULL) {
        if (rx->count >= FY_RAILS_MAX_MSGS) {
            why = "too many messages gathered at once";
            goto drop;
        }
        fy_am_entry_t *e = fy_am_entry(w, fh.id);
        int rndv = e != NULL && e->rndv_cb != NULL; /* gather the header alone */
        if (fh.total > w->ctx->opts.am_recv_max) {  /* plain: gathered; rndv: staged first */
            fy_warn("dropping an active message of %llu bytes (id %u): above "
                    "FERRY_AM_RECV_MAX (%zu)",
                    (unsigned long long)fh.total, (unsigned)fh.id, w->ctx->opts.am_recv_max);
            w->drops_malformed++;
            rx->aborted[rx->naborted++ % FY_RAILS_ABORTED] = seq + 1; /* and its other pieces */
            return;
        }
        m = calloc(1, sizeof(*m));
        if (m == NULL || (m->buf = malloc(rndv            ? fh.user_hdr_len + 1u
                                          : fh.total != 0 ? fh.total
                                                          : 1)) == NULL) {
            free(m);
            fy_warn("dropping an active message of %llu bytes: out of memory",
                    (unsigned long long)fh.total);
            w->drops_malformed++;
            return;
        }
        m->seq = seq;
        m->rndv = rndv;
        m->id = fh.id;
        m->hdr_len = fh.user_hdr_len;
        m->total = fh.total;
        rx->count++;
        if (anchor) {
            append(rx, m);
        } else {
            m->next = rx->loose;
            rx->loose = m;
        }
    } else if (m->total != fh.total || m->id != fh.id || m->hdr_len != fh.user_hdr_len ||
               m->got + len > m->total) {
        goto drop;
    }
    if (len != 0)
        place(m, rail, fh.offset, data, len);
    drain(w, ep);
    return;
drop:
    if (w->drops_malformed++ == 0)
        fy_warn("dropping a fragment of an active message: %s", why);
}

/* ---- wireup ------------------------------------------------------------------------------- */

void fy_rails_set(ferry_ep_t *ep, const fy_lane_plan_t *plan, const fy_lane_t *lanes, unsigned n)
{
    ep->nrails = 1;
    ep->rails[0] = ep->lanes[FY_LANE_AM];
    ep->rail_weight[0] = 1;
    if (n == 0 || plan->nrails < 2)
        return;
    for (unsigned r = 0; r < plan->nrails && r < FY_MAX_RAILS; r++) {
        double mbs = plan->rail_bw[r] / 1e6;
        ep->rail_weight[r] = plan->rail_bw[r] == 0 ? 0 /* anchors only */
                             : mbs < 1             ? 1
                             : mbs > 4e9           ? 4000000000u
                                                   : (uint32_t)mbs;
        if (r != 0)
            ep->rails[r] = lanes[r - 1];
    }
    ep->nrails = plan->nrails < n + 1 ? plan->nrails : n + 1;
}

/* Tell the peer which striped messages had a share on the failed transport endpoint (the top
 * of this file); those shares are forgotten here. */
static void announce_failed(ferry_ep_t *ep, const fy_tl_ep_t *tl_ep)
{
    fy_rails_tx_t *tx = ep->frag_tx;
    unsigned n = 0;
    for (unsigned k = 0; tx != NULL && k < FY_RAILS_TX_KEEP; k++) {
        fy_rails_sent_t *e = &tx->sent[k];
        for (unsigned i = 0; i < e->n; i++) {
            if (e->tl_ep[i] != tl_ep)
                continue;
            fy_am_frag_hdr_t fh = {.total = e->len[i],
                                   .id = FY_AM_ID_FRAG,
                                   .seq = e->seq | ((uint32_t)e->rail[i] << FY_AM_FRAG_RAIL_SHIFT)};
            ferry_status_t st = fy_am_send(ep, FY_AM_ID_FRAG, &fh, sizeof(fh), NULL, 0, NULL);
            if (st < 0)
                fy_warn("endpoint %u: cannot tell the peer of a message on the failed rail: %s",
                        ep->id, ferry_status_string(st));
            e->tl_ep[i] = NULL;
            n++;
        }
    }
    if (n != 0)
        fy_info("endpoint %u: %u striped message(s) had a share on the failed rail: the peer is "
                "told, it drops those missing bytes",
                ep->id, n);
}

int fy_rails_tl_failed(ferry_ep_t *ep, fy_tl_ep_t *tl_ep)
{
    for (unsigned r = 1; r < ep->nrails; r++) {
        if (ep->rails[r].tl_ep != tl_ep)
            continue;
        if (ep->lanes[FY_LANE_AM].tl_ep == tl_ep || ep->lanes[FY_LANE_RMA].tl_ep == tl_ep ||
            ep->lanes[FY_LANE_AMO].tl_ep == tl_ep)
            return 0;
        fy_warn("endpoint %u: the rail %s %s failed: bulk messages go on the other rail(s)", ep->id,
                ep->rails[r].iface->tl->name, ep->rails[r].iface->tl_iface->dev_name);
        announce_failed(ep, tl_ep);
        for (unsigned k = r; k + 1 < ep->nrails; k++) {
            ep->rails[k] = ep->rails[k + 1];
            ep->rail_weight[k] = ep->rail_weight[k + 1];
        }
        ep->nrails--;
        return 1;
    }
    return 0;
}
