/*
 * test_rails.c - multi-rail below the API (proto/rails.c), inside one process: how a striped
 * message is cut (each rail's share in proportion to its weight, pieces no larger than the
 * rail carries, the bytes covered once, one anchor at offset 0 on the AM lane), the anchor-only
 * AM lane beside a bulk lane (FERRY_AM_LANE=latency), rails whose connection is not up left
 * out, and reassembly: fragments in any order, a whole message held behind a striped one,
 * handlers run in the order sent; a rail that fails: the sender's abort for each message with
 * a share on it, the receiver dropping a message missing bytes of that share (and only such a
 * message) and running what waited behind it.
 *
 * The endpoint is a real one (FERRY_TLS=self, to this worker's own address); its rails are
 * set by hand to several copies of its AM lane, some behind a fake transport table whose
 * ep_ready says "not up".  Nothing is sent: the cursor is read, and fragments are handed to
 * the receive side directly.
 */
#include <stdlib.h>
#include <string.h>

#include "fytest.h"
#include "proto/proto_int.h"
#include "util/clock.h"

#define ROOM0 (48u * 1024) /* what rail 0 carries per fragment in these cases */

typedef struct frag {
    size_t off, len;
    fy_lane_t *lane;
    uint32_t tag;
} frag_t;

typedef struct setup {
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_ep_t *ep;
} setup_t;

static void open_self(setup_t *s)
{
    setenv("FERRY_TLS", "self", 1);
    FY_ASSERT_OK(ferry_context_create(NULL, &s->ctx));
    FY_ASSERT_OK(ferry_worker_create(s->ctx, NULL, &s->w));
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_ADDRESS,
                           .address = s->w->address,
                           .address_len = s->w->address_len};
    FY_ASSERT_OK(ferry_ep_create(s->w, &p, &s->ep));
    double t0 = fy_time_sec();
    while (s->ep->state != FY_EP_CONNECTED) {
        FY_ASSERT_MSG(fy_time_sec() - t0 < 10, "the endpoint to ourselves did not connect");
        ferry_worker_progress(s->w);
    }
}

static void close_self(setup_t *s)
{
    s->ep->nrails = 1; /* the hand-made rails point into this test's memory */
    s->ep->rails[0] = s->ep->lanes[FY_LANE_AM];
    ferry_ep_close(s->ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(s->w);
    ferry_context_destroy(s->ctx);
}

/* n rails, all copies of the AM lane, with these weights. */
static void set_rails(ferry_ep_t *ep, unsigned n, const uint32_t *weights)
{
    ep->nrails = n;
    for (unsigned r = 0; r < n; r++) {
        ep->rails[r] = ep->lanes[FY_LANE_AM];
        ep->rail_weight[r] = weights[r];
    }
}

/* The most a fragment on rail r > 0 carries (rails.c: the lane's largest AM, less headers). */
static size_t rail_room(const fy_lane_t *l)
{
    const fy_tl_iface_attr_t *a = &l->iface->attr;
    size_t m = (a->caps & FY_TL_CAP_AM_ZCOPY) ? a->max_zcopy : 0;
    if ((a->caps & FY_TL_CAP_AM_BCOPY) && a->max_bcopy > m)
        m = a->max_bcopy;
    return m - 16 - sizeof(fy_am_frag_hdr_t);
}

/* Cut a message of total bytes; the fragments in the order given, their count. */
static unsigned cut(ferry_ep_t *ep, size_t total, frag_t *f, unsigned max)
{
    fy_rails_cursor_t c;
    fy_rails_begin(ep, total, ROOM0, &c);
    unsigned n = 0;
    size_t off, len;
    fy_lane_t *lane;
    uint32_t tag;
    while ((len = fy_rails_next(ep, &c, &off, &lane, &tag)) != 0) {
        FY_ASSERT(n < max);
        f[n++] = (frag_t){off, len, lane, tag};
    }
    return n;
}

/* Which rail a fragment went on: 0 for the AM lane (lane NULL), else its index. */
static unsigned rail_of(const ferry_ep_t *ep, const frag_t *f)
{
    if (f->lane == NULL)
        return 0;
    FY_ASSERT(f->lane >= &ep->rails[1] && f->lane < &ep->rails[ep->nrails]);
    return (unsigned)(f->lane - ep->rails);
}

/* Every byte once, one anchor (offset 0, rail 0), one message number; bytes per rail. */
static void check_cover(const ferry_ep_t *ep, const frag_t *f, unsigned n, size_t total,
                        size_t *per_rail)
{
    uint8_t *seen = calloc(1, total);
    FY_ASSERT(seen != NULL);
    unsigned anchors = 0;
    memset(per_rail, 0, sizeof(size_t) * FY_MAX_RAILS);
    for (unsigned i = 0; i < n; i++) {
        FY_ASSERT(f[i].len > 0 && f[i].off + f[i].len <= total);
        unsigned r = rail_of(ep, &f[i]);
        FY_ASSERT_MSG(f[i].len <= (r == 0 ? ROOM0 : rail_room(&ep->rails[r])),
                      "a fragment of %zu bytes on rail %u", f[i].len, r);
        per_rail[r] += f[i].len;
        FY_ASSERT_EQ(f[i].tag & FY_AM_FRAG_SEQ_MASK, f[0].tag & FY_AM_FRAG_SEQ_MASK);
        if (f[i].tag & FY_AM_FRAG_ANCHOR) {
            anchors++;
            FY_ASSERT_EQ(f[i].off, 0);
            FY_ASSERT_EQ(r, 0);
        }
        for (size_t b = f[i].off; b < f[i].off + f[i].len; b++) {
            FY_ASSERT_MSG(!seen[b], "byte %zu sent twice", b);
            seen[b] = 1;
        }
    }
    for (size_t b = 0; b < total; b++)
        FY_ASSERT_MSG(seen[b], "byte %zu never sent", b);
    FY_ASSERT_EQ(anchors, 1);
    free(seen);
}

static size_t absdiff(size_t a, size_t b)
{
    return a > b ? a - b : b - a;
}

/* Weights 1:2:1 over three rails: shares of 1/4, 1/2, 1/4; fragments round-robin. */
static void shares_by_weight(void)
{
    setup_t s;
    open_self(&s);
    static frag_t f[4096];
    const uint32_t w[3] = {1000, 2000, 1000};
    set_rails(s.ep, 3, w);
    size_t total = (3u << 20) + 123, per[FY_MAX_RAILS];
    FY_ASSERT(fy_rails_stripe(s.ep, total));
    FY_ASSERT(!fy_rails_stripe(s.ep, s.w->ctx->opts.rails_thresh)); /* not above it */
    unsigned n = cut(s.ep, total, f, 4096);
    check_cover(s.ep, f, n, total, per);
    FY_ASSERT_MSG(absdiff(per[0], total / 4) <= 2 && absdiff(per[1], total / 2) <= 2 &&
                      absdiff(per[2], total / 4) <= 2,
                  "shares %zu %zu %zu of %zu", per[0], per[1], per[2], total);
    /* the first fragments go to every rail in turn */
    FY_ASSERT(n >= 3 && rail_of(s.ep, &f[0]) != rail_of(s.ep, &f[1]) &&
              rail_of(s.ep, &f[1]) != rail_of(s.ep, &f[2]) &&
              rail_of(s.ep, &f[0]) != rail_of(s.ep, &f[2]));
    /* the next message has the next number */
    frag_t g[4096];
    cut(s.ep, total, g, 4096);
    FY_ASSERT_EQ(g[0].tag & FY_AM_FRAG_SEQ_MASK, ((f[0].tag & FY_AM_FRAG_SEQ_MASK) + 1));
    close_self(&s);
}

/* A bulk lane beside the AM lane: rail 0 (weight 0) carries the one-byte anchor only. */
static void anchor_only_rail0(void)
{
    setup_t s;
    open_self(&s);
    static frag_t f[4096];
    const uint32_t w[3] = {0, 7000, 7000};
    set_rails(s.ep, 3, w);
    size_t total = (1u << 20) + 7, per[FY_MAX_RAILS];
    unsigned n = cut(s.ep, total, f, 4096);
    check_cover(s.ep, f, n, total, per);
    FY_ASSERT_EQ(per[0], 1);
    FY_ASSERT(absdiff(per[1], per[2]) <= 2);
    close_self(&s);
}

static int never_ready(fy_tl_ep_t *ep)
{
    (void)ep;
    return 0;
}

static int always_ready(fy_tl_ep_t *ep)
{
    (void)ep;
    return 1;
}

/* An interface like the AM lane's whose transport's ep_ready is the one given. */
typedef struct fake_iface {
    fy_tl_ops_t ops;
    fy_tl_component_t tl;
    fy_iface_t fi;
} fake_iface_t;

static fy_iface_t *fake_iface(fake_iface_t *f, const fy_lane_t *like, int (*ready)(fy_tl_ep_t *))
{
    f->ops = *like->iface->tl->ops;
    f->ops.ep_ready = ready;
    f->tl = *like->iface->tl;
    f->tl.ops = &f->ops;
    f->fi = *like->iface;
    f->fi.tl = &f->tl;
    return &f->fi;
}

/* A rail whose connection is not up (ep_ready 0) gets no share; none up: nothing striped. */
static void unready_rails_left_out(void)
{
    setup_t s;
    open_self(&s);
    static frag_t f[4096];
    const uint32_t w[3] = {1000, 1000, 1000};
    set_rails(s.ep, 3, w);
    fake_iface_t fake;
    s.ep->rails[2].iface = fake_iface(&fake, &s.ep->rails[2], never_ready);
    size_t total = (2u << 20) + 5, per[FY_MAX_RAILS];
    unsigned n = cut(s.ep, total, f, 4096);
    check_cover(s.ep, f, n, total, per);
    FY_ASSERT_EQ(per[2], 0);
    FY_ASSERT(absdiff(per[0], per[1]) <= 2);
    s.ep->rails[1].iface = &fake.fi; /* neither extra rail up */
    FY_ASSERT(!fy_rails_stripe(s.ep, total));
    close_self(&s);
}

/* ---- reassembly ---------------------------------------------------------------------------- */

#define AM_T 5

typedef struct got {
    unsigned n;
    size_t len[4];
    uint64_t hdr[4];
    int data_ok[4];
} got_t;

static uint8_t byte_at(size_t i)
{
    return (uint8_t)(i * 31u + 7u);
}

static ferry_status_t on_t(void *arg, const void *hdr, size_t hdr_len, const void *data, size_t len,
                           ferry_ep_t *ep)
{
    (void)ep;
    got_t *g = arg;
    FY_ASSERT(g->n < 4 && hdr_len == 8);
    memcpy(&g->hdr[g->n], hdr, 8);
    g->len[g->n] = len;
    int ok = 1;
    for (size_t i = 0; i < len && g->hdr[g->n] == 1; i++)
        ok &= ((const uint8_t *)data)[i] == byte_at(8 + i);
    g->data_ok[g->n++] = ok;
    return FERRY_OK;
}

/* The endpoint to ourselves, its AM_T messages recorded in g. */
static void open_receiving(setup_t *s, got_t *g)
{
    open_self(s);
    memset(g, 0, sizeof(*g));
    FY_ASSERT_OK(ferry_worker_set_am_handler(s->w, AM_T, on_t, g));
}

/* A fragment as the sender's cursor tagged it (message number, rail, anchor). */
static void frag_tagged(setup_t *s, const uint8_t *msg, size_t total, size_t off, size_t len,
                        uint32_t tag)
{
    fy_am_frag_hdr_t fh = {
        .total = total, .offset = off, .id = AM_T, .user_hdr_len = 8, .seq = tag};
    fy_rails_frag_recv(s->w, s->ep, (const uint8_t *)&fh, sizeof(fh), msg + off, len);
}

static void frag_in(setup_t *s, const uint8_t *msg, size_t total, size_t off, size_t len,
                    uint32_t seq, int anchor)
{
    frag_tagged(s, msg, total, off, len, seq | (anchor ? FY_AM_FRAG_ANCHOR : 0));
}

static uint32_t on_rail(uint32_t seq, unsigned rail)
{
    return seq | (uint32_t)rail << FY_AM_FRAG_RAIL_SHIFT;
}

/* The sender's rail failed: its abort for message seq, whose share there is len bytes. */
static void abort_in(setup_t *s, uint32_t seq, unsigned rail, size_t len)
{
    fy_am_frag_hdr_t fh = {.total = len, .id = FY_AM_ID_FRAG, .seq = on_rail(seq, rail)};
    fy_rails_frag_recv(s->w, s->ep, (const uint8_t *)&fh, sizeof(fh), NULL, 0);
}

static void message(uint8_t *msg, size_t total, uint64_t hdr)
{
    memcpy(msg, &hdr, 8);
    for (size_t i = 8; i < total; i++)
        msg[i] = byte_at(i);
}

/* Fragments of message 1 out of order (the last first, the anchor second), a whole message 2
 * arriving before message 1 is complete: handlers run 1 then 2, message 1 whole. */
static void reassembly_order(void)
{
    setup_t s;
    got_t g;
    open_receiving(&s, &g);
    enum { TOTAL = 1000 };
    uint8_t msg[TOTAL];
    uint64_t two = 2;
    message(msg, TOTAL, 1);
    frag_in(&s, msg, TOTAL, 700, 300, 9, 0); /* before its anchor: waits aside */
    FY_ASSERT_EQ(g.n, 0);
    frag_in(&s, msg, TOTAL, 0, 300, 9, 1); /* the anchor: its place in the order */
    FY_ASSERT_EQ(g.n, 0);
    uint8_t small[3] = {1, 2, 3};
    FY_ASSERT_EQ(fy_rails_hold(s.w, s.ep, AM_T, (const uint8_t *)&two, 8, small, 3), 1);
    FY_ASSERT_EQ(g.n, 0);
    frag_in(&s, msg, TOTAL, 300, 400, 9, 0); /* complete: both run, in order */
    FY_ASSERT_EQ(g.n, 2);
    FY_ASSERT_U64_EQ(g.hdr[0], 1);
    FY_ASSERT_EQ(g.len[0], TOTAL - 8);
    FY_ASSERT(g.data_ok[0]);
    FY_ASSERT_U64_EQ(g.hdr[1], 2);
    FY_ASSERT_EQ(g.len[1], 3);
    /* nothing is held now: a whole message runs at once */
    FY_ASSERT_EQ(fy_rails_hold(s.w, s.ep, AM_T, (const uint8_t *)&two, 8, small, 3), 0);
    /* a fragment that overflows its message is dropped, counted */
    uint64_t drops = s.w->drops_malformed;
    frag_in(&s, msg, 100, 90, 20, 10, 0);
    FY_ASSERT_EQ(s.w->drops_malformed, drops + 1);
    close_self(&s);
}

/* The receiver of an abort: message 9 (anchor on rail 0, 400 bytes on rail 1, 300 on rail 2)
 * has rail 2's share whole and half of rail 1's, a whole message 2 waits behind it.  An abort
 * for rail 2 changes nothing (its share is here); one for rail 1 drops message 9 (warned,
 * counted) and message 2 runs; the rest of message 9 arriving later is dropped; message 10
 * then goes through as usual. */
static void abort_releases_order(void)
{
    setup_t s;
    got_t g;
    open_receiving(&s, &g);
    enum { TOTAL = 1000 };
    uint8_t msg[TOTAL];
    message(msg, TOTAL, 1);
    uint64_t drops = s.w->drops_malformed;
    frag_tagged(&s, msg, TOTAL, 0, 300, on_rail(9, 0) | FY_AM_FRAG_ANCHOR);
    frag_tagged(&s, msg, TOTAL, 700, 300, on_rail(9, 2));
    frag_tagged(&s, msg, TOTAL, 300, 200, on_rail(9, 1));
    uint64_t two = 2;
    uint8_t small[3] = {1, 2, 3};
    FY_ASSERT_EQ(fy_rails_hold(s.w, s.ep, AM_T, (const uint8_t *)&two, 8, small, 3), 1);
    abort_in(&s, 9, 2, 300);
    FY_ASSERT_EQ(g.n, 0);
    FY_ASSERT_U64_EQ(s.w->drops_malformed, drops);
    abort_in(&s, 9, 1, 400);
    FY_ASSERT_EQ(g.n, 1);
    FY_ASSERT_U64_EQ(g.hdr[0], 2);
    FY_ASSERT_EQ(g.len[0], 3);
    FY_ASSERT_U64_EQ(s.w->drops_malformed, drops + 1);
    frag_tagged(&s, msg, TOTAL, 500, 200, on_rail(9, 1)); /* late: dropped, not gathered */
    FY_ASSERT_EQ(g.n, 1);
    /* nothing waits in front of a whole message: not held (its caller runs it) */
    FY_ASSERT_EQ(fy_rails_hold(s.w, s.ep, AM_T, (const uint8_t *)&two, 8, small, 3), 0);
    frag_tagged(&s, msg, TOTAL, 0, 600, on_rail(10, 0) | FY_AM_FRAG_ANCHOR);
    frag_tagged(&s, msg, TOTAL, 600, 400, on_rail(10, 1));
    FY_ASSERT_EQ(g.n, 2);
    FY_ASSERT_U64_EQ(g.hdr[1], 1);
    FY_ASSERT(g.data_ok[1]);
    /* a malformed abort (data after it, or for rail 0) is dropped as such */
    fy_am_frag_hdr_t fh = {.total = 1, .id = FY_AM_ID_FRAG, .seq = on_rail(11, 0)};
    fy_rails_frag_recv(s.w, s.ep, (const uint8_t *)&fh, sizeof(fh), NULL, 0);
    FY_ASSERT_U64_EQ(s.w->drops_malformed, drops + 2);
    close_self(&s);
}

/* The sender: a message striped over three rails, of which rail 1's transport endpoint fails
 * with part of its share undelivered.  The rail is dropped, the peer (this same endpoint, over
 * the self transport) gets the abort on the AM lane, drops the message and runs the one that
 * waited behind it; a message of another rail's failure is not touched. */
static void failed_rail_announced(void)
{
    setup_t s;
    got_t g;
    open_receiving(&s, &g);
    static frag_t f[4096];
    const uint32_t wts[3] = {1000, 1000, 1000};
    set_rails(s.ep, 3, wts);
    /* rails 1 and 2: transport endpoints of their own (fakes: nothing is sent on them) */
    fake_iface_t fake;
    fy_iface_t *fi = fake_iface(&fake, &s.ep->rails[1], always_ready);
    fy_tl_ep_t te[2] = {{.iface = s.ep->rails[1].tl_ep->iface},
                        {.iface = s.ep->rails[1].tl_ep->iface}};
    for (int r = 1; r <= 2; r++) {
        s.ep->rails[r].iface = fi;
        s.ep->rails[r].tl_ep = &te[r - 1];
    }
    size_t total = (1u << 20) + 8, per[FY_MAX_RAILS];
    uint8_t *msg = malloc(total);
    FY_ASSERT(msg != NULL);
    message(msg, total, 1);
    unsigned n = cut(s.ep, total, f, 4096);
    check_cover(s.ep, f, n, total, per);
    FY_ASSERT(per[1] > 0 && per[2] > 0);
    /* the receiver gets all but the last fragment of rail 1 (its tag names the rail) */
    int last1 = -1;
    for (unsigned i = 0; i < n; i++)
        if (rail_of(s.ep, &f[i]) == 1)
            last1 = (int)i;
    for (unsigned i = 0; i < n; i++) {
        FY_ASSERT_EQ((f[i].tag & FY_AM_FRAG_RAIL_MASK) >> FY_AM_FRAG_RAIL_SHIFT,
                     rail_of(s.ep, &f[i]));
        if ((int)i != last1)
            frag_tagged(&s, msg, total, f[i].off, f[i].len, f[i].tag);
    }
    uint64_t two = 2;
    uint8_t small[3] = {1, 2, 3};
    FY_ASSERT_EQ(fy_rails_hold(s.w, s.ep, AM_T, (const uint8_t *)&two, 8, small, 3), 1);
    FY_ASSERT_EQ(g.n, 0);
    uint64_t drops = s.w->drops_malformed;
    FY_ASSERT_EQ(fy_rails_tl_failed(s.ep, &te[0]), 1);
    FY_ASSERT_EQ(s.ep->nrails, 2u);
    FY_ASSERT(s.ep->rails[1].tl_ep == &te[1]); /* rail 2 moved down */
    uint64_t deadline = fy_time_ns() + 10 * FY_NSEC_PER_SEC;
    while (g.n == 0 && fy_time_ns() < deadline)
        ferry_worker_progress(s.w);
    FY_ASSERT_EQ(g.n, 1); /* the message behind it ran; the striped one was dropped */
    FY_ASSERT_U64_EQ(g.hdr[0], 2);
    FY_ASSERT_U64_EQ(s.w->drops_malformed, drops + 1);
    /* the other rail failing now: no message of it is missing bytes, nothing else happens */
    FY_ASSERT_EQ(fy_rails_tl_failed(s.ep, &te[1]), 1);
    for (int i = 0; i < 1000; i++)
        ferry_worker_progress(s.w);
    FY_ASSERT_EQ(g.n, 1);
    FY_ASSERT_U64_EQ(s.w->drops_malformed, drops + 1);
    free(msg);
    close_self(&s);
}

FYTEST_MAIN(FYTEST_CASE(shares_by_weight), FYTEST_CASE(anchor_only_rail0),
            FYTEST_CASE(unready_rails_left_out), FYTEST_CASE(reassembly_order),
            FYTEST_CASE(abort_releases_order), FYTEST_CASE(failed_rail_announced))
