/*
 * ofi_iface.c - the ofi interface: one FI_EP_RDM endpoint with its completion queue and
 * address vector, the receive buffers, the pool of operations, and progress.
 *
 * PROGRESS reads the CQ (which also drives the providers' manual progress) and routes each
 * completion by its context: a receive hands the AM to am_cb and posts the buffer again, any
 * other completion finishes its op (ofi_ep.c keeps the ops of an ep in issue order, and a
 * flush at the head of that list completes right after the op before it).  An error entry
 * becomes the op's status, logged with fi_strerror and the provider's fi_cq_strerror text;
 * a failed send fails its ep (err_cb), a refused RMA fails only itself.  Posts that libfabric
 * answers with -FI_EAGAIN from inside progress (a receive buffer, a flush's read) are kept
 * and retried on the next pass, never dropped.
 *
 * LIVENESS.  libfabric's software providers do not report a dead peer reliably (shm never
 * does; rxd retries for ever).  The transport reaches this host only, so each ep knows its
 * peer's pid and progress checks it every FERRY_OFI_PEER_CHECK: a peer that is gone fails its
 * eps with CONNECTION_RESET (their ops and flushes end with that error, then err_cb).
 */
#include <endian.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "tl/ofi/ofi.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* ---- the op pool ------------------------------------------------------------------------- */

fy_ofi_op_t *fy_ofi_op_get(fy_ofi_iface_t *iface, fy_ofi_ep_t *ep, int kind, fy_tl_comp_t *comp)
{
    int counted = kind != FY_OFI_OP_FLUSH;
    if (counted && iface->inflight >= iface->md->cfg.tx_ops)
        return NULL;
    fy_ofi_op_t *op;
    if (!fy_list_is_empty(&iface->free)) {
        op = fy_container_of(fy_list_pop_head(&iface->free), fy_ofi_op_t, elem);
    } else {
        if (iface->nops == iface->all_cap) {
            unsigned cap = iface->all_cap ? 2 * iface->all_cap : 64;
            fy_ofi_op_t **a = realloc(iface->all_ops, cap * sizeof(*a));
            if (a == NULL)
                return NULL;
            iface->all_ops = a;
            iface->all_cap = cap;
        }
        op = calloc(1, sizeof(*op));
        if (op == NULL)
            return NULL;
        op->index = iface->nops;
        iface->all_ops[iface->nops++] = op;
    }
    uint32_t index = op->index;
    void *bbuf = op->bbuf;
    fy_ofi_mr_t bbuf_mr = op->bbuf_mr, self_mr = op->self_mr;
    memset(op, 0, sizeof(*op));
    op->index = index;
    op->bbuf = bbuf;
    op->bbuf_mr = bbuf_mr;
    op->self_mr = self_mr;
    op->ep = ep;
    op->kind = (uint8_t)kind;
    op->comp = comp;
    op->counted = (uint8_t)counted;
    fy_list_init(&op->elem);
    if (counted)
        iface->inflight++;
    return op;
}

/* FI_MR_LOCAL: the cache regions of the caller's buffers an op held, given back */
static void op_release_regions(fy_ofi_iface_t *iface, fy_ofi_op_t *op)
{
    for (unsigned i = 0; i < op->nregions; i++)
        fy_rcache_put(iface->md->rcache, op->regions[i]);
    op->nregions = 0;
}

/* FI_MR_LOCAL: register [buf, +len) for local use into mr (bound to the iface's endpoint
 * under FI_MR_ENDPOINT), once: an op keeps it across reuse. */
ferry_status_t fy_ofi_op_local_mr(fy_ofi_iface_t *iface, fy_ofi_op_t *op, void *buf, size_t len,
                                  fy_ofi_mr_t *mr)
{
    (void)op;
    if (!iface->md->mrdom.mode.local || mr->mr != NULL)
        return FERRY_OK;
    return fy_ofi_mr_reg(&iface->md->mrdom, iface->ep, buf, len, 0, 1, mr);
}

/* FI_MR_LOCAL: op->desc[first..n) for the caller's buffers v[first..n), from the md's
 * registration cache; the op holds the regions until it goes back to the pool (a buffer sent
 * again is registered once).  Without FI_MR_LOCAL the descriptors stay NULL. */
ferry_status_t fy_ofi_op_descs(fy_ofi_iface_t *iface, fy_ofi_op_t *op, const struct iovec *v,
                               size_t first, size_t n)
{
    if (!iface->md->mrdom.mode.local)
        return FERRY_OK;
    fy_rcache_t *rc = fy_ofi_md_rcache(iface->md);
    if (rc == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (size_t i = first; i < n; i++) {
        fy_rcache_region_t *r;
        ferry_status_t st = fy_rcache_get(rc, v[i].iov_base, v[i].iov_len, 0, &r);
        if (st != FERRY_OK)
            return st; /* the regions taken so far go back with the op */
        op->regions[op->nregions++] = r;
        op->desc[i] = fy_ofi_mr_desc(fy_rcache_region_memh(r));
    }
    return FERRY_OK;
}

void fy_ofi_op_put(fy_ofi_iface_t *iface, fy_ofi_op_t *op)
{
    if (op->nregions > 0)
        op_release_regions(iface, op);
    if (fy_list_is_linked(&op->elem))
        fy_list_del(&op->elem);
    if (op->counted)
        iface->inflight--;
    op->counted = 0;
    op->ep = NULL;
    fy_list_add_head(&iface->free, &op->elem);
}

static void op_free_all(fy_ofi_iface_t *iface, fy_list_t *head)
{
    while (!fy_list_is_empty(head)) {
        fy_ofi_op_t *op = fy_container_of(fy_list_pop_head(head), fy_ofi_op_t, elem);
        op_release_regions(iface, op);
        fy_ofi_mr_dereg(&op->bbuf_mr);
        fy_ofi_mr_dereg(&op->self_mr);
        free(op->bbuf);
        free(op);
    }
}

/* ---- ops finishing ------------------------------------------------------------------------ */

/* The flushes now at the head of ep's list with nothing left to wait for: detached, their
 * completions and statuses returned (the caller calls them after the op before them). */
#define MAX_READY 16
static unsigned take_flushes(fy_ofi_ep_t *ep, fy_tl_comp_t **comps, ferry_status_t *sts)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)ep->super.iface;
    unsigned n = 0;
    while (n < MAX_READY && !fy_list_is_empty(&ep->ops)) {
        fy_ofi_op_t *f = fy_container_of(ep->ops.next, fy_ofi_op_t, elem);
        if (f->kind != FY_OFI_OP_FLUSH || f->posted || f->need_read)
            break;
        ferry_status_t st = f->status;
        if (f->comp == NULL) { /* a marker of flush(NULL): keep its error for the next */
            if (st != FERRY_OK && ep->deferred == FERRY_OK)
                ep->deferred = st;
            fy_ofi_op_put(iface, f);
            continue;
        }
        if (st == FERRY_OK && ep->deferred != FERRY_OK) {
            st = ep->deferred;
            ep->deferred = FERRY_OK;
        }
        comps[n] = f->comp;
        sts[n++] = st;
        fy_ofi_op_put(iface, f);
    }
    return n;
}

void fy_ofi_op_done(fy_ofi_iface_t *iface, fy_ofi_op_t *op, ferry_status_t st)
{
    fy_ofi_ep_t *ep = op->ep;
    fy_tl_comp_t *comp = op->comp;
    if (op->kind == FY_OFI_OP_AMO && op->result_dst != NULL && st == FERRY_OK) {
        if (op->amo_size == 4) {
            uint32_t v = (uint32_t)op->result;
            memcpy(op->result_dst, &v, 4);
        } else {
            memcpy(op->result_dst, &op->result, 8);
        }
    }
    if (op->kind == FY_OFI_OP_FLUSH) { /* its read came back */
        op->posted = 0;
        op->need_read = 0;
        if (st != FERRY_OK && op->status == FERRY_OK)
            op->status = st;
        if (ep == NULL) {
            fy_ofi_op_put(iface, op);
            return;
        }
        fy_tl_comp_t *fc[MAX_READY];
        ferry_status_t fs[MAX_READY];
        unsigned n = take_flushes(ep, fc, fs);
        for (unsigned i = 0; i < n; i++)
            if (fc[i] != NULL)
                fc[i]->cb(fc[i], fs[i]);
        return;
    }
    fy_ofi_op_put(iface, op);
    if (ep == NULL)
        return;
    if (st != FERRY_OK && comp == NULL && ep->deferred == FERRY_OK)
        ep->deferred = st;
    fy_tl_comp_t *fc[MAX_READY];
    ferry_status_t fs[MAX_READY];
    unsigned n = take_flushes(ep, fc, fs);
    if (comp != NULL)
        comp->cb(comp, st);
    for (unsigned i = 0; i < n; i++)
        if (fc[i] != NULL)
            fc[i]->cb(fc[i], fs[i]);
}

/* Take every op off a failing or destroyed ep: posted ones become orphans (libfabric still
 * holds their context), the others go back to the pool; each caller is answered with st. */
static void ep_cancel_all(fy_ofi_ep_t *ep, ferry_status_t st)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)ep->super.iface;
    while (!fy_list_is_empty(&ep->ops)) {
        fy_ofi_op_t *op = fy_container_of(fy_list_pop_head(&ep->ops), fy_ofi_op_t, elem);
        fy_list_init(&op->elem);
        fy_tl_comp_t *comp = op->comp;
        op->comp = NULL;
        op->ep = NULL;
        op->queued = 0;
        op->result_dst = NULL;
        if (op->posted)
            fy_list_add_tail(&iface->orphans, &op->elem);
        else
            fy_ofi_op_put(iface, op);
        ferry_status_t s = st;
        if (s == FERRY_ERR_CANCELED && op->kind == FY_OFI_OP_FLUSH && ep->failed != FERRY_OK)
            s = ep->failed;
        if (comp != NULL)
            comp->cb(comp, s);
    }
}

void fy_ofi_ep_drain(fy_ofi_ep_t *ep)
{
    ep->nqueued = 0;
    ep_cancel_all(ep, FERRY_ERR_CANCELED);
}

void fy_ofi_ep_fail(fy_ofi_ep_t *ep, ferry_status_t st)
{
    if (ep->failed != FERRY_OK)
        return;
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)ep->super.iface;
    ep->failed = st;
    ep->nqueued = 0;
    ep->depth++;
    ep_cancel_all(ep, st);
    if (!ep->err_reported && !ep->destroyed) {
        ep->err_reported = 1;
        if (iface->super.params.err_cb != NULL)
            iface->super.params.err_cb(iface->super.params.err_arg, &ep->super, st);
    }
    if (--ep->depth == 0 && ep->destroyed)
        free(ep);
}

/* ---- receive ------------------------------------------------------------------------------ */

static int rx_post(fy_ofi_iface_t *iface, fy_ofi_rx_t *rx)
{
    ssize_t ret;
    void *desc = fy_ofi_mr_desc(&rx->mr);
    if (iface->multi) {
        struct iovec v = {rx->buf, rx->len};
        struct fi_msg m = {.msg_iov = &v,
                           .desc = &desc,
                           .iov_count = 1,
                           .addr = FI_ADDR_UNSPEC,
                           .context = &rx->op.ctx};
        ret = fi_recvmsg(iface->ep, &m, FI_MULTI_RECV);
    } else {
        ret = fi_recv(iface->ep, rx->buf, rx->len, desc, FI_ADDR_UNSPEC, &rx->op.ctx);
    }
    rx->needs_post = ret != 0;
    if (ret != 0 && ret != -FI_EAGAIN)
        fy_warn("ofi: posting a receive buffer failed: %s", fi_strerror((int)-ret));
    return (int)ret;
}

static void rx_message(fy_ofi_iface_t *iface, const void *data, size_t len)
{
    fy_ofi_hdr_t h;
    if (iface->closing)
        return; /* no callback from iface_close */
    if (len < sizeof(h)) {
        iface->rx_dropped++;
        return;
    }
    memcpy(&h, data, sizeof(h));
    if (le32toh(h.job_tag) != iface->job_tag || h.am_id > FY_TL_AM_ID_MAX) {
        iface->rx_dropped++;
        return;
    }
    const uint8_t *p = (const uint8_t *)data + sizeof(h);
    if (h.type == FY_OFI_AM)
        fy_ofi_rndv_deliver(iface, h.am_id, p, len - sizeof(h)); /* in order (ofi_rndv.c) */
    else if (h.type == FY_OFI_RTS || h.type == FY_OFI_ATS)
        fy_ofi_rndv_rx(iface, h.type, h.am_id, p, len - sizeof(h));
    /* else a flush probe */
}

/* ---- completions -------------------------------------------------------------------------- */

static void handle_entry(fy_ofi_iface_t *iface, void *ctx, uint64_t flags, void *buf, size_t len,
                         ferry_status_t st)
{
    fy_ofi_op_t *op = ctx;
    if (op == NULL)
        return;
    if (op->kind == FY_OFI_OP_RECV) {
        fy_ofi_rx_t *rx = fy_container_of(op, fy_ofi_rx_t, op);
        if (st == FERRY_OK && (flags & FI_RECV) && len > 0)
            rx_message(iface, iface->multi && buf != NULL ? buf : rx->buf, len);
        if (!iface->multi || (flags & FI_MULTI_RECV) || st != FERRY_OK)
            rx_post(iface, rx);
        return;
    }
    op->posted = 0;
    if (op->kind == FY_OFI_OP_RREAD) { /* a rendezvous' read (its receive is the iface's) */
        fy_ofi_rndv_read_done(iface, op, st);
        return;
    }
    fy_ofi_ep_t *ep = op->ep;
    if (ep == NULL) { /* orphan: its caller was answered */
        if (op->kind == FY_OFI_OP_FLUSH)
            op->need_read = 0;
        fy_ofi_op_put(iface, op);
        return;
    }
    if (st != FERRY_OK &&
        (op->kind == FY_OFI_OP_SEND || op->kind == FY_OFI_OP_RNDV || st == FERRY_ERR_CANCELED)) {
        /* a message the provider could not deliver: the peer is unreachable; the op ends
         * with the ep's failure, like the rest of its ops.  Any op the provider cancels
         * (ferry cancels none: a destroyed ep's ops become orphans) means the same: rxm
         * cancels the reads and writes of a connection that broke. */
        fy_ofi_ep_fail(ep, st == FERRY_ERR_CANCELED ? FERRY_ERR_CONNECTION_RESET : st);
        return;
    }
    if (op->kind == FY_OFI_OP_RNDV) { /* the RTS went: done when the ATS came too */
        fy_ofi_rndv_sent(iface, op);
        return;
    }
    fy_ofi_op_done(iface, op, st);
}

static unsigned read_cq(fy_ofi_iface_t *iface)
{
    struct fi_cq_data_entry ent[16];
    unsigned events = 0;
    for (int pass = 0; pass < 4; pass++) {
        ssize_t n = fi_cq_read(iface->cq, ent, 16);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++)
                handle_entry(iface, ent[i].op_context, ent[i].flags, ent[i].buf, ent[i].len,
                             FERRY_OK);
            events += (unsigned)n;
            if (n < 16)
                break;
            continue;
        }
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry e;
            memset(&e, 0, sizeof(e));
            if (fi_cq_readerr(iface->cq, &e, 0) != 1)
                break;
            ferry_status_t st = fy_ofi_status(e.err ? e.err : FI_EIO);
            iface->cq_errors++;
            fy_ofi_op_t *op = e.op_context;
            if (e.err != FI_ECANCELED) {
                char pbuf[256] = "";
                const char *ptxt =
                    fi_cq_strerror(iface->cq, e.prov_errno, e.err_data, pbuf, sizeof(pbuf));
                fy_log(op != NULL && op->kind == FY_OFI_OP_RECV ? FY_LOG_WARN : FY_LOG_DEBUG,
                       "ofi: %s completion error: %s (provider: %s)",
                       op == NULL                    ? "an"
                       : op->kind == FY_OFI_OP_RECV  ? "a receive"
                       : op->kind == FY_OFI_OP_SEND  ? "a send"
                       : op->kind == FY_OFI_OP_WRITE ? "a write"
                       : op->kind == FY_OFI_OP_READ  ? "a read"
                       : op->kind == FY_OFI_OP_AMO   ? "an atomic"
                       : op->kind == FY_OFI_OP_RNDV  ? "a rendezvous' descriptor"
                       : op->kind == FY_OFI_OP_RREAD ? "a rendezvous' read"
                                                     : "a flush read",
                       fi_strerror(e.err), ptxt ? ptxt : "-");
            }
            handle_entry(iface, op, e.flags, NULL, 0, st);
            events++;
            continue;
        }
        if (n != -FI_EAGAIN)
            fy_debug("ofi: fi_cq_read: %s", fi_strerror((int)-n));
        break;
    }
    return events;
}

/* Posts that found the provider busy: receive buffers and flush reads. */
static void retry_posts(fy_ofi_iface_t *iface)
{
    for (unsigned i = 0; i < iface->nrx; i++)
        if (iface->rx[i].needs_post)
            rx_post(iface, &iface->rx[i]);
    fy_ofi_rndv_retry(iface);
    fy_list_t *e;
    fy_list_for_each(e, &iface->eps)
    {
        fy_ofi_ep_t *ep = fy_container_of(e, fy_ofi_ep_t, elem);
        if (ep->failed == FERRY_OK && fy_ofi_ep_retry(ep))
            return; /* callbacks ran: the rest on the next pass */
    }
}

static void check_peers(fy_ofi_iface_t *iface)
{
    fy_list_t *e;
    int any = 0;
    fy_list_for_each(e, &iface->eps)
    {
        fy_ofi_ep_t *ep = fy_container_of(e, fy_ofi_ep_t, elem);
        if (ep->failed == FERRY_OK && ep->pid > 0 && kill(ep->pid, 0) != 0 && errno == ESRCH) {
            ep->pid = -ep->pid; /* marked: fail it below */
            any = 1;
        }
    }
    while (any) {
        any = 0;
        fy_list_for_each(e, &iface->eps)
        {
            fy_ofi_ep_t *ep = fy_container_of(e, fy_ofi_ep_t, elem);
            if (ep->pid < 0 && ep->failed == FERRY_OK) {
                fy_debug("ofi: peer process %d is gone", (int)-ep->pid);
                fy_ofi_ep_fail(ep, FERRY_ERR_CONNECTION_RESET);
                any = 1; /* callbacks may have changed the list: walk it again */
                break;
            }
        }
    }
}

/* The endpoint is stuck (iface->wedged): every ep fails now, none can be made. */
static void fail_all(fy_ofi_iface_t *iface)
{
    for (int again = 1; again;) {
        again = 0;
        fy_list_t *e;
        fy_list_for_each(e, &iface->eps)
        {
            fy_ofi_ep_t *ep = fy_container_of(e, fy_ofi_ep_t, elem);
            if (ep->failed == FERRY_OK) {
                fy_ofi_ep_fail(ep, FERRY_ERR_IO);
                again = 1; /* callbacks may have changed the list: walk it again */
                break;
            }
        }
    }
}

unsigned fy_ofi_iface_progress(fy_tl_iface_t *super)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    unsigned events = read_cq(iface);
    if (iface->eagain) {
        iface->eagain = 0;
        retry_posts(iface);
    }
    uint64_t now = fy_time_ns();
    if (now >= iface->next_check_ns) {
        iface->next_check_ns = now + iface->md->cfg.peer_check;
        for (unsigned i = 0; i < iface->nrx; i++)
            iface->eagain |= iface->rx[i].needs_post;
        check_peers(iface);
        fy_ofi_rndv_check_peers(iface);
        if (iface->wedged)
            fail_all(iface);
    }
    return events;
}

/* ---- sleeping ------------------------------------------------------------------------------ *
 * The iface's event fd is an epoll set of the CQ's wait fd (where the provider gives one) and a
 * one-shot timer.  Before the worker sleeps, arm asks libfabric with fi_trywait whether it may
 * (-FI_EAGAIN: completions are pending, progress first) and sets the timer: without a wait fd
 * to FERRY_OFI_WAIT_POLL (a sleeper naps, then progresses: that much latency, and one wake-up
 * per period); with one, while the iface has endpoints, to FERRY_OFI_PEER_CHECK, so the
 * liveness check (which the providers do not do for us) still runs in a sleeping worker. */

static int open_event_fd(fy_ofi_iface_t *iface)
{
    iface->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    iface->event_fd = epoll_create1(EPOLL_CLOEXEC);
    if (iface->timer_fd < 0 || iface->event_fd < 0)
        return -FI_EMFILE;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
    if (epoll_ctl(iface->event_fd, EPOLL_CTL_ADD, iface->timer_fd, &ev) != 0)
        return -FI_EIO;
    if (iface->wait_fd >= 0 &&
        epoll_ctl(iface->event_fd, EPOLL_CTL_ADD, iface->wait_fd, &ev) != 0) {
        fy_debug("ofi: the completion queue's wait fd cannot be watched (%m): sleepers poll");
        iface->wait_fd = -1;
    }
    return 0;
}

int fy_ofi_iface_event_fd(fy_tl_iface_t *super)
{
    return ((fy_ofi_iface_t *)super)->event_fd;
}

static void set_timer(fy_ofi_iface_t *iface, uint64_t ns)
{
    struct itimerspec t;
    memset(&t, 0, sizeof(t));
    t.it_value.tv_sec = (time_t)(ns / 1000000000ull);
    t.it_value.tv_nsec = (long)(ns % 1000000000ull);
    timerfd_settime(iface->timer_fd, 0, &t, NULL); /* 0: disarmed */
}

ferry_status_t fy_ofi_iface_event_arm(fy_tl_iface_t *super)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    uint64_t expirations;
    while (read(iface->timer_fd, &expirations, sizeof(expirations)) > 0) {
    }
    if (iface->eagain)
        return FERRY_ERR_BUSY; /* posts to retry: progress does them */
    uint64_t period = iface->md->cfg.wait_poll;
    if (iface->wait_fd >= 0) {
        struct fid *f = &iface->cq->fid;
        int ret = fi_trywait(iface->md->fabric, &f, 1);
        if (ret == -FI_EAGAIN)
            return FERRY_ERR_BUSY;
        if (ret == 0)
            period = fy_list_is_empty(&iface->eps) ? 0 : iface->md->cfg.peer_check;
        /* any other answer: nap as without a wait fd */
    }
    set_timer(iface, period);
    return FERRY_OK;
}

/* ---- open / close ------------------------------------------------------------------------- */

static const enum fi_op amo_fi_op[] = {FI_SUM, FI_BAND, FI_BOR, FI_BXOR, FI_ATOMIC_WRITE, FI_CSWAP};

/* Which ferry atomics this endpoint does natively, per width (fi_atomicvalid and its fetch
 * and compare forms: an op counts only when every form ferry may issue is valid). */
static void query_atomics(fy_ofi_iface_t *iface)
{
    fy_ofi_md_t *md = iface->md;
    md->amo_mask[0] = md->amo_mask[1] = 0;
    if (!(iface->info->caps & FI_ATOMIC) || !md->cfg.atomics)
        return;
    /* libfabric 1.17's rxd crashes in its progress on atomics: emulated by proto there */
    if (strstr(iface->info->fabric_attr->prov_name, "ofi_rxd") != NULL)
        return;
    for (int w = 0; w < 2; w++) {
        enum fi_datatype dt = w == 0 ? FI_UINT32 : FI_UINT64;
        for (int o = 0; o < 6; o++) {
            size_t count = 0;
            int ok;
            if (o == FERRY_ATOMIC_CSWAP) {
                ok = fi_compare_atomicvalid(iface->ep, dt, FI_CSWAP, &count) == 0 && count >= 1;
            } else {
                ok = fi_atomicvalid(iface->ep, dt, amo_fi_op[o], &count) == 0 && count >= 1;
                count = 0;
                ok = ok && fi_fetch_atomicvalid(iface->ep, dt, amo_fi_op[o], &count) == 0 &&
                     count >= 1;
            }
            if (ok)
                md->amo_mask[w] |= 1u << o;
        }
    }
}

ferry_status_t fy_ofi_iface_open(fy_tl_md_t *super_md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p)
{
    fy_ofi_md_t *md = (fy_ofi_md_t *)super_md;
    if (md->domain == NULL || params->device == NULL || strcmp(params->device, md->dev_name) != 0)
        return FERRY_ERR_NO_DEVICE;
    /* a context of the md: this worker's own endpoint, CQ and AV */
    int ctx = -1;
    pthread_mutex_lock(&md->rc_lock);
    for (unsigned i = 0; i < md->ncontexts && ctx < 0; i++)
        if (!md->ctx_busy[i]) {
            md->ctx_busy[i] = 1;
            ctx = (int)i;
        }
    pthread_mutex_unlock(&md->rc_lock);
    if (ctx < 0) {
        fy_warn("ofi: all %u contexts are taken by other workers (FERRY_OFI_CONTEXTS%s): this "
                "worker gets no ofi interface",
                md->ncontexts, md->thread_safe ? "" : "; the domain is not thread-safe");
        return FERRY_ERR_NO_DEVICE;
    }
    fy_ofi_iface_t *iface = calloc(1, sizeof(*iface));
    if (iface == NULL) {
        pthread_mutex_lock(&md->rc_lock);
        md->ctx_busy[ctx] = 0;
        pthread_mutex_unlock(&md->rc_lock);
        return FERRY_ERR_NO_MEMORY;
    }
    iface->ctx_index = ctx;
    fy_tl_iface_base_init(&iface->super, md->super.component, &md->super, params);
    iface->md = md;
    iface->info = md->info;
    iface->job_tag = (uint32_t)params->job_key;
    fy_list_init(&iface->eps);
    fy_list_init(&iface->orphans);
    fy_list_init(&iface->free);
    iface->inject_size = md->info->tx_attr->inject_size;
    iface->max_iov = md->info->tx_attr->iov_limit;
    if (md->info->tx_attr->rma_iov_limit < iface->max_iov)
        iface->max_iov = md->info->tx_attr->rma_iov_limit;
    iface->max_msg = md->info->ep_attr->max_msg_size;
    iface->multi = md->multi_recv;
    /* rxm's rendezvous (messages above its 16 KiB eager buffers) stalls when the sender does
     * not progress while the receiver drains: keep ferry's AMs eager there */
    iface->msg_max = FY_OFI_MSG_MAX;
    iface->bcopy_max = FY_OFI_BCOPY;
    if (strstr(md->info->fabric_attr->prov_name, "ofi_rxm") != NULL) {
        iface->msg_max = 16384 - 256;
        iface->bcopy_max = 2048;
    }
    fy_ofi_rndv_init(iface);
    const char *what = "";
    int ret;
    iface->wait_fd = iface->timer_fd = iface->event_fd = -1;
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA,
                             .size = 0,
                             .wait_obj = md->cfg.wait_fd ? FI_WAIT_FD : FI_WAIT_NONE};
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    ret = fi_cq_open(md->domain, &cqa, &iface->cq, NULL);
    if (ret != 0 && cqa.wait_obj != FI_WAIT_NONE) {
        fy_debug("ofi: %s: no completion queue with a wait fd (%s): sleeping workers poll",
                 md->info->fabric_attr->prov_name, fi_strerror(-ret));
        cqa.wait_obj = FI_WAIT_NONE;
        ret = fi_cq_open(md->domain, &cqa, &iface->cq, NULL);
    }
    if (ret != 0) {
        what = "fi_cq_open";
        goto err;
    }
    if (cqa.wait_obj == FI_WAIT_FD) {
        int fd = -1;
        if (fi_control(&iface->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
            iface->wait_fd = fd;
        } else {
            /* a wait object nobody can sleep on would only cost its signalling: without */
            fy_debug("ofi: %s: the completion queue gives no wait fd: sleeping workers poll",
                     md->info->fabric_attr->prov_name);
            fi_close(&iface->cq->fid);
            iface->cq = NULL;
            cqa.wait_obj = FI_WAIT_NONE;
            ret = fi_cq_open(md->domain, &cqa, &iface->cq, NULL);
            if (ret != 0) {
                what = "fi_cq_open";
                goto err;
            }
        }
    }
    ret = open_event_fd(iface);
    if (ret != 0) {
        what = "the event fd";
        goto err;
    }
    ret = fi_av_open(md->domain, &ava, &iface->av, NULL);
    if (ret != 0) {
        what = "fi_av_open";
        goto err;
    }
    /* shm names an endpoint after its process and a per-process index, and 1.17 crashes
     * when an endpoint closes and a new one takes its name while a peer still maps the old:
     * every shm iface gets a name of its own */
    struct fi_info *epi = md->info;
    if (strcmp(md->info->fabric_attr->prov_name, "shm") == 0) {
        static unsigned seq;
        epi = fi_dupinfo(md->info);
        if (epi == NULL) {
            ret = -FI_ENOMEM;
            what = "fi_dupinfo";
            goto err;
        }
        char nm[48];
        snprintf(nm, sizeof(nm), "fyofi_%d_%u_%llx", (int)getpid(), ++seq,
                 (unsigned long long)(fy_time_ns() & 0xffffffffull));
        free(epi->src_addr);
        epi->src_addr = strdup(nm);
        epi->src_addrlen = epi->src_addr != NULL ? strlen(nm) + 1 : 0;
    }
    ret = fi_endpoint(md->domain, epi, &iface->ep, NULL);
    if (epi != md->info)
        fi_freeinfo(epi);
    if (ret != 0) {
        what = "fi_endpoint";
        goto err;
    }
    ret = fi_ep_bind(iface->ep, &iface->av->fid, 0);
    if (ret == 0)
        ret = fi_ep_bind(iface->ep, &iface->cq->fid, FI_TRANSMIT | FI_RECV);
    if (ret != 0) {
        what = "fi_ep_bind";
        goto err;
    }
    /* libfabric 1.17's shm crashes in fi_setopt(FI_OPT_MIN_MULTI_RECV): receive slots there */
    if (strcmp(md->info->fabric_attr->prov_name, "shm") == 0)
        iface->multi = 0;
    if (iface->multi) {
        size_t min = iface->msg_max;
        if (fi_setopt(&iface->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)) !=
            0)
            iface->multi = 0;
    }
    ret = fi_enable(iface->ep);
    if (ret != 0) {
        what = "fi_enable";
        goto err;
    }
    size_t nlen = sizeof(iface->name);
    ret = fi_getname(&iface->ep->fid, iface->name, &nlen);
    if (ret != 0 || nlen >= FY_OFI_NAME_MAX) {
        what = "fi_getname";
        if (ret == 0)
            ret = -FI_ETOOSMALL;
        goto err;
    }
    iface->name_len = nlen;
    /* FI_MR_ENDPOINT (one context): every registration binds to this endpoint */
    if (md->mrdom.mode.endpoint)
        md->mrdom.ep = iface->ep;
    /* the word a flush reads after writes */
    if (fy_ofi_mr_reg(&md->mrdom, iface->ep, &iface->flush_word, sizeof(iface->flush_word),
                      FERRY_MEM_REMOTE_READ, 0, &iface->flush_mr) != FERRY_OK) {
        ret = -FI_EINVAL;
        what = "registering the flush word";
        goto err;
    }
    iface->flush_key = iface->flush_mr.key;
    /* receive buffers */
    iface->nrx = iface->multi ? FY_OFI_NUM_MULTI : FY_OFI_RX_SLOTS;
    iface->rx = calloc(iface->nrx, sizeof(*iface->rx));
    if (iface->rx == NULL) {
        ret = -FI_ENOMEM;
        what = "receive buffers";
        goto err;
    }
    for (unsigned i = 0; i < iface->nrx; i++) {
        fy_ofi_rx_t *rx = &iface->rx[i];
        rx->op.kind = FY_OFI_OP_RECV;
        rx->len = iface->multi ? FY_OFI_MULTI_RX : iface->msg_max;
        rx->buf = malloc(rx->len);
        if (rx->buf == NULL) {
            ret = -FI_ENOMEM;
            what = "receive buffers";
            goto err;
        }
        if (fy_ofi_op_local_mr(iface, &rx->op, rx->buf, rx->len, &rx->mr) != FERRY_OK) {
            ret = -FI_EINVAL;
            what = "registering a receive buffer";
            goto err;
        }
        ret = rx_post(iface, rx);
        if (ret != 0 && ret != -FI_EAGAIN) {
            what = "fi_recv";
            goto err;
        }
        iface->eagain |= ret != 0;
    }
    query_atomics(iface);
    *iface_p = &iface->super;
    return FERRY_OK;

err:
    fy_warn("ofi: %s: %s failed: %s", md->info->fabric_attr->prov_name, what, fi_strerror(-ret));
    fy_ofi_iface_close(&iface->super);
    return fy_ofi_status(ret) == FERRY_ERR_NO_RESOURCE ? FERRY_ERR_NO_DEVICE : fy_ofi_status(ret);
}

/* Before the endpoint closes: let libfabric give back what it still holds (the eps are gone,
 * so these are orphans and receives; nothing is delivered any more), for at most 100 ms.
 * libfabric 1.17's rxm crashes in fi_close of an endpoint with reads outstanding. */
static void drain_before_close(fy_ofi_iface_t *iface)
{
    iface->closing = 1;
    uint64_t end = fy_time_ns() + 100000000ull;
    for (;;) {
        int held = 0;
        fy_list_t *e;
        fy_list_for_each(e, &iface->orphans)
        {
            if (fy_container_of(e, fy_ofi_op_t, elem)->posted) {
                held = 1;
                break;
            }
        }
        if (!held || fy_time_ns() > end)
            return;
        read_cq(iface);
    }
}

void fy_ofi_iface_close(fy_tl_iface_t *super)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    if (iface == NULL)
        return;
    while (!fy_list_is_empty(&iface->eps)) {
        fy_ofi_ep_t *ep = fy_container_of(iface->eps.next, fy_ofi_ep_t, elem);
        fy_ofi_ep_destroy(&ep->super);
    }
    if (iface->cq != NULL && iface->orphans.next != NULL)
        drain_before_close(iface);
    fy_ofi_rndv_release(iface);
    if (iface->md->mrdom.mode.endpoint && iface->ep != NULL) {
        /* the cached registrations are bound to this endpoint: they go with it */
        pthread_mutex_lock(&iface->md->rc_lock);
        fy_rcache_t *rc = iface->md->rcache;
        iface->md->rcache = NULL;
        iface->md->mrdom.ep = NULL;
        pthread_mutex_unlock(&iface->md->rc_lock);
        fy_list_t *e;
        fy_list_for_each(e, &iface->orphans) /* their regions first (pooled ops hold none) */
        {
            fy_ofi_op_t *op = fy_container_of(e, fy_ofi_op_t, elem);
            for (unsigned i = 0; i < op->nregions; i++)
                fy_rcache_put(rc, op->regions[i]);
            op->nregions = 0;
        }
        fy_rcache_destroy(rc);
    }
    if (iface->ep != NULL)
        fi_close(&iface->ep->fid);
    fy_ofi_mr_dereg(&iface->flush_mr);
    if (iface->av != NULL)
        fi_close(&iface->av->fid);
    if (iface->event_fd >= 0)
        close(iface->event_fd);
    if (iface->timer_fd >= 0)
        close(iface->timer_fd);
    if (iface->cq != NULL)
        fi_close(&iface->cq->fid); /* closes wait_fd, the provider's */
    for (unsigned i = 0; iface->rx != NULL && i < iface->nrx; i++) {
        fy_ofi_mr_dereg(&iface->rx[i].mr);
        free(iface->rx[i].buf);
    }
    free(iface->rx);
    fy_ofi_rndv_free(iface);
    op_free_all(iface, &iface->orphans);
    op_free_all(iface, &iface->free);
    pthread_mutex_lock(&iface->md->rc_lock);
    iface->md->ctx_busy[iface->ctx_index] = 0;
    pthread_mutex_unlock(&iface->md->rc_lock);
    free(iface);
}

void fy_ofi_iface_query(fy_tl_iface_t *super, fy_tl_iface_attr_t *attr)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    fy_ofi_md_t *md = iface->md;
    memset(attr, 0, sizeof(*attr));
    attr->caps = FY_TL_CAP_AM_SHORT | FY_TL_CAP_AM_BCOPY | FY_TL_CAP_AM_ZCOPY | FY_TL_CAP_PUT |
                 FY_TL_CAP_GET | FY_TL_CAP_AM_ORDERED | FY_TL_CAP_CONNECT_TO_IFACE |
                 FY_TL_CAP_EVENT_FD;
    /* per op and width, as fi_atomicvalid said (query_atomics); proto emulates a width that
     * lacks any op as a whole (rma.c) */
    if (md->amo_mask[0] != 0)
        attr->caps |= FY_TL_CAP_AMO32;
    if (md->amo_mask[1] != 0)
        attr->caps |= FY_TL_CAP_AMO64;
    attr->amo_ops[0] = md->amo_mask[0];
    attr->amo_ops[1] = md->amo_mask[1];
    /* Honest figures for lane selection, measured here over loopback (bench/RESULTS.md):
     * the software providers are slower than ferry's own shm and tcp; a NIC provider is
     * assumed to be an RDMA NIC. */
    const char *p = md->info->fabric_attr->prov_name;
    double lat, bw;
    if (strcmp(p, "shm") == 0)
        lat = 1500, bw = 5e9;
    else if (strstr(p, "rxm") != NULL)
        lat = 9000, bw = 2.5e9;
    else if (strstr(p, "rxd") != NULL || strcmp(p, "sockets") == 0)
        lat = 20000, bw = 0.8e9;
    else
        lat = 2000, bw = 10e9;
    attr->latency_ns = md->cfg.latency_ns > 0 ? md->cfg.latency_ns : lat;
    attr->bandwidth = md->cfg.bandwidth > 0 ? md->cfg.bandwidth : bw;
    attr->overhead_ns = 1000;
    size_t inj = iface->inject_size > iface->bcopy_max ? iface->bcopy_max : iface->inject_size;
    attr->max_short = inj >= 64 + sizeof(fy_ofi_hdr_t) ? inj - sizeof(fy_ofi_hdr_t) : 64;
    attr->max_bcopy = iface->bcopy_max - sizeof(fy_ofi_hdr_t);
    /* above the eager size (a receive slot) an AM goes by rendezvous, FERRY_OFI_RNDV_THRESH */
    attr->max_zcopy =
        (iface->rndv_thresh != SIZE_MAX ? iface->rndv_max : iface->msg_max) - sizeof(fy_ofi_hdr_t);
    attr->max_zcopy_hdr = 256;
    attr->max_put_short = 0;
    attr->max_rma = iface->max_msg < (1ull << 30) ? iface->max_msg : (1u << 30);
    attr->max_iov = iface->max_iov > 1 ? iface->max_iov - 1 : 1;
    attr->device_addr_len = sizeof(fy_ofi_dev_addr_t);
    attr->iface_addr_len = sizeof(fy_ofi_iface_addr_t);
    attr->priority = 5;
}

ferry_status_t fy_ofi_iface_get_address(fy_tl_iface_t *super, void *dev_addr, void *iface_addr)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    fy_ofi_dev_addr_t d = {.host_id = htole64(iface->md->host_id),
                           .prov_hash = htole64(iface->md->prov_hash)};
    memcpy(dev_addr, &d, sizeof(d));
    fy_ofi_iface_addr_t a;
    memset(&a, 0, sizeof(a));
    a.pid = htole32((uint32_t)getpid());
    a.name_len = htole32((uint32_t)iface->name_len);
    a.flush_addr = htole64(fy_ofi_virt(iface->md) ? (uintptr_t)&iface->flush_word : 0);
    a.flush_key = htole64(iface->flush_key);
    memcpy(a.name, iface->name, iface->name_len);
    memcpy(iface_addr, &a, sizeof(a));
    return FERRY_OK;
}

static const char *unreachable(fy_ofi_iface_t *iface, const void *dev_addr, const void *iface_addr)
{
    fy_ofi_dev_addr_t d;
    fy_ofi_iface_addr_t a;
    memcpy(&d, dev_addr, sizeof(d));
    memcpy(&a, iface_addr, sizeof(a));
    if (iface->wedged)
        return "this interface's shm endpoint waits for ever on a read from a process that died "
               "(libfabric 1.17's shm completes in order): it serves no endpoint any more";
    if (le64toh(d.host_id) != iface->md->host_id)
        return "another host or network namespace: ofi is bound to this host";
    if (le64toh(d.prov_hash) != iface->md->prov_hash)
        return "the peer uses another libfabric provider";
    if (le32toh(a.name_len) == 0 || le32toh(a.name_len) >= FY_OFI_NAME_MAX)
        return "malformed address";
    return NULL;
}

int fy_ofi_iface_is_reachable(fy_tl_iface_t *super, const void *dev_addr, const void *iface_addr)
{
    return unreachable((fy_ofi_iface_t *)super, dev_addr, iface_addr) == NULL;
}

void fy_ofi_iface_unreachable_why(fy_tl_iface_t *super, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len)
{
    const char *why = unreachable((fy_ofi_iface_t *)super, dev_addr, iface_addr);
    snprintf(buf, len, "%s", why ? why : "reachable");
}

void fy_ofi_iface_print(fy_tl_iface_t *super, FILE *f)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)super;
    fy_ofi_md_t *md = iface->md;
    fprintf(f,
            "ofi %s (%s, domain %s): mr_mode 0x%llx, delivery complete %s, multi-recv %s, "
            "atomics 32-bit 0x%x 64-bit 0x%x, sleeps on %s, context %d of %u (%s)\n"
            "  ops %u (in flight %u), receive drops %llu, completion errors %llu\n"
            "  AM rendezvous above %zu bytes: sent %llu, received %llu, failed %llu\n",
            md->dev_name, md->info->fabric_attr->prov_name, md->info->domain_attr->name,
            (unsigned long long)md->mr_mode, md->delivery ? "yes" : "no",
            iface->multi ? "yes" : "no", md->amo_mask[0], md->amo_mask[1],
            iface->wait_fd >= 0 ? "the completion queue's wait fd" : "a timer (polls)",
            iface->ctx_index, md->ncontexts,
            md->thread_safe ? "FI_THREAD_SAFE" : "FI_THREAD_DOMAIN", iface->nops, iface->inflight,
            (unsigned long long)iface->rx_dropped, (unsigned long long)iface->cq_errors,
            iface->rndv_thresh, (unsigned long long)iface->rndv_tx,
            (unsigned long long)iface->rndv_rx, (unsigned long long)iface->rndv_failed);
    /* registrations of the whole md (every worker's): a buffer sent again and again through
     * the cache adds one (tests/ofi/test_ofi_rndv.c counts them here) */
    fprintf(f, "  memory registrations %llu, local descriptors %s, bound to the endpoint %s\n",
            (unsigned long long)atomic_load(&md->mrdom.nregs), md->mrdom.mode.local ? "yes" : "no",
            md->mrdom.mode.endpoint ? "yes" : "no");
    pthread_mutex_lock(&md->rc_lock);
    if (md->rcache != NULL) {
        fprintf(f, "  ");
        fy_rcache_print(md->rcache, f);
    }
    pthread_mutex_unlock(&md->rc_lock);
}
