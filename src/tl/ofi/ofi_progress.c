/*
 * ofi_progress.c - the ofi interface's progress: receive buffers, the completion queue,
 * liveness of the peers, and sleeping on the wake-up fd.
 *
 * PROGRESS reads the CQ (which also drives the providers' manual progress) and routes each
 * completion by its context: a receive hands the AM to am_cb and posts the buffer again, any
 * other completion finishes its op (ofi_op.c).  An error entry becomes the op's status,
 * logged with fi_strerror and the provider's fi_cq_strerror text; a failed send fails its ep
 * (err_cb), a refused RMA fails only itself.  Posts that libfabric answers with -FI_EAGAIN
 * from inside progress (a receive buffer, a flush's read) are kept and retried on the next
 * pass, never dropped.
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

/* ---- receive ------------------------------------------------------------------------------ */

int fy_ofi_rx_post(fy_ofi_iface_t *iface, fy_ofi_rx_t *rx)
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
        ret = fi_recvmsg(fy_ofi_rx_ep(iface), &m, FI_MULTI_RECV);
    } else {
        ret = fi_recv(fy_ofi_rx_ep(iface), rx->buf, rx->len, desc, FI_ADDR_UNSPEC, &rx->op.ctx);
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
            fy_ofi_rx_post(iface, rx);
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

unsigned fy_ofi_read_cq(fy_ofi_iface_t *iface)
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
            fy_ofi_rx_post(iface, &iface->rx[i]);
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

/* FERRY_OFI_RMA_TIMEOUT: a put, get, atomic or flush read the provider has held that long
 * fails its ep with ENDPOINT_TIMEOUT (every op of the ep ends with it, then err_cb), as a
 * peer that stopped answering.  udp;ofi_rxd neither completes nor fails an access with a key
 * the target closed (it retries it, and delivers nothing to that peer after it: a stuck
 * stream), and the target's ferry never sees a one-sided access, so only the initiator's
 * clock can end it.  No clock read per op: an op is stamped by the first check that finds it
 * posted, so the deadline is RMA_TIMEOUT plus up to one PEER_CHECK.  1: it failed one. */
static const char *const rma_what[] = {[FY_OFI_OP_WRITE] = "put",
                                       [FY_OFI_OP_READ] = "get",
                                       [FY_OFI_OP_AMO] = "atomic",
                                       [FY_OFI_OP_FLUSH] = "flush read"};

static int ep_deadline(fy_ofi_iface_t *iface, fy_ofi_ep_t *ep, uint64_t now)
{
    fy_list_t *e;
    fy_list_for_each(e, &ep->ops)
    {
        fy_ofi_op_t *op = fy_container_of(e, fy_ofi_op_t, elem);
        if (!op->posted || op->kind < FY_OFI_OP_WRITE || op->kind > FY_OFI_OP_FLUSH)
            continue;
        if (op->seen_ns == 0) {
            op->seen_ns = now;
            continue;
        }
        if (now - op->seen_ns < iface->md->cfg.rma_timeout)
            continue;
        iface->rma_timeouts++;
        fy_error("ofi: a %s to peer process %d (%s) had no completion for %.1f s: its endpoint "
                 "fails with ENDPOINT_TIMEOUT (FERRY_OFI_RMA_TIMEOUT; the provider neither "
                 "completed nor refused it: a key the target closed, or a peer that does not "
                 "progress)",
                 rma_what[op->kind], (int)ep->pid, iface->info->fabric_attr->prov_name,
                 (double)(now - op->seen_ns) / 1e9);
        /* libfabric 1.17's shm completes an endpoint's operations in order: nothing after a
         * stuck one completes (an AM on another ep to that peer never arrived), so the whole
         * interface fails, as after a read from a dead process (ofi_rndv.c) */
        if (strcmp(iface->info->fabric_attr->prov_name, "shm") == 0 && !iface->wedged) {
            fy_error("ofi: shm completes in order, so nothing after that %s will: this "
                     "interface's endpoints fail (FERRY_ERR_IO) and it takes no new ones",
                     rma_what[op->kind]);
            iface->wedged = 1;
        }
        fy_ofi_ep_fail(ep, FERRY_ERR_ENDPOINT_TIMEOUT);
        return 1;
    }
    return 0;
}

static void check_deadlines(fy_ofi_iface_t *iface, uint64_t now)
{
    for (int again = 1; again;) {
        again = 0;
        fy_list_t *e;
        fy_list_for_each(e, &iface->eps)
        {
            fy_ofi_ep_t *ep = fy_container_of(e, fy_ofi_ep_t, elem);
            if (ep->failed == FERRY_OK && ep_deadline(iface, ep, now)) {
                again = 1; /* callbacks may have changed the lists: walk again */
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
    unsigned events = fy_ofi_read_cq(iface);
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
        if (iface->md->cfg.rma_timeout != 0)
            check_deadlines(iface, now);
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

int fy_ofi_open_event_fd(fy_ofi_iface_t *iface)
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
