/*
 * tcp_rx.c - the receive side of the tcp transport: read, frame, check, deliver, and serve
 * RMA at the target.
 *
 * Each link reads into its own buffer (RX_BUF).  A frame that fits the buffer is handed to
 * am_cb in place, many per read.  A larger payload is read straight where it belongs: into a
 * buffer of its own (a large AM, delivered whole), into the registered region (a PUT, after
 * the region check), into the requester's iov (a GET answer); one readv fills the rest of the
 * payload and, behind it, the link buffer with whatever follows.  A refused PUT, or the
 * answer of a GET whose ep is gone, is read into a sink and dropped: the stream stays in step
 * and nothing outside a registered region is ever written.
 *
 * Every header is checked before anything is taken on trust: the type, the AM id, the length
 * against MAX_MSG / max_rma, flags only where they mean something, answers only in request
 * order, chunks only on chunk links and within their frame.  A bad header fails that peer
 * (FERRY_ERR_PROTOCOL, logged with the reason) and nothing else.
 *
 * Parsing never assumes a header arrived in one piece: a partial header stays in the buffer
 * until the rest comes (the buffer is compacted when needed), and a payload resumes at the
 * byte it stopped at, so a read of any size, at any byte boundary, yields the same frames.
 *
 * A striped frame is reassembled per peer: its header on link 0 starts it (seq must be the
 * next one), chunks on the other links fill it, and link 0 reads nothing more until it is
 * complete, so it is delivered in its place among the frames of link 0.  A chunk that comes
 * before its frame's header stalls its link until link 0 gets there.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "tl/tcp/tcp.h"
#include "util/log.h"
#include "util/status.h"

#define MAX_RMA (1ull << 30)

static void proto_error(fy_tcp_link_t *link, const char *fmt, unsigned long long v)
{
    fy_tcp_peer_t *p = link->peer;
    char why[160];
    snprintf(why, sizeof(why), fmt, v);
    p->iface->protocol_errors++;
    p->iface->drops_malformed++;
    fy_error("tcp: malformed frame on link %u: %s: dropping the connection", link->index, why);
    fy_tcp_peer_fail(p, FERRY_ERR_PROTOCOL, why);
}

void fy_tcp_dest_release(fy_tcp_iface_t *iface, fy_tcp_dest_t *d)
{
    if (d->owned != NULL)
        fy_tcp_buf_put(iface, d->owned, d->owned_cap);
    memset(d, 0, sizeof(*d));
}

void fy_tcp_dest_abort(fy_tcp_iface_t *iface, fy_tcp_dest_t *d, ferry_status_t status)
{
    fy_tcp_op_t *op = d->op;
    fy_tcp_dest_release(iface, d);
    if (op != NULL) { /* a get whose answer was arriving */
        if (op->comp != NULL)
            op->comp->cb(op->comp, status);
        fy_tcp_op_free(iface, op);
    }
}

void fy_tcp_link_stall(fy_tcp_link_t *link, unsigned bits)
{
    link->stall |= bits;
}

void fy_tcp_link_unstall(fy_tcp_link_t *link, unsigned bits)
{
    if (!(link->stall & bits))
        return;
    link->stall &= ~bits;
    if (link->stall != 0 || link->state != FY_TCP_LINK_UP)
        return;
    fy_tcp_iface_t *iface = link->peer->iface;
    if (!(link->ev & EPOLLIN))
        fy_tcp_epoll_set(iface, link->fd, link, &link->ev, (link->ev & ~FY_TCP_EV_REG) | EPOLLIN);
    if (link->rx_tail > link->rx_head && !fy_list_is_linked(&link->ready_elem))
        fy_list_add_tail(&iface->ready, &link->ready_elem);
}

/* ---- destinations ----------------------------------------------------------------------- */

static void dest_copy(fy_tcp_dest_t *d, size_t off, const char *src, size_t n)
{
    if (d->discard || n == 0)
        return;
    if (d->base != NULL)
        memcpy(d->base + off, src, n);
    else if (d->op != NULL)
        fy_iov_scatter(d->op->iov, d->op->iovcnt, off, src, n);
}

/* An iov for reading up to n bytes of d at off; *covered: how many it takes. */
static size_t dest_iov(fy_tcp_iface_t *iface, fy_tcp_dest_t *d, size_t off, size_t n,
                       struct iovec *v, size_t max, size_t *covered)
{
    if (d->discard) {
        v[0].iov_base = iface->sink;
        v[0].iov_len = FY_MIN(n, iface->sink_size);
        *covered = v[0].iov_len;
        return 1;
    }
    if (d->base != NULL) {
        v[0].iov_base = d->base + off;
        v[0].iov_len = n;
        *covered = n;
        return 1;
    }
    size_t cnt = fy_tcp_iov_slice(d->op->iov, d->op->iovcnt, off, n, v, max);
    size_t c = 0;
    for (size_t i = 0; i < cnt; i++)
        c += v[i].iov_len;
    *covered = c;
    return cnt;
}

static void send_ack(fy_tcp_peer_t *p, uint8_t type, uint64_t op_id, ferry_status_t st)
{
    struct {
        fy_tcp_hdr_t h;
        fy_tcp_ack_ext_t a;
    } f;
    memset(&f, 0, sizeof(f));
    f.h.type = type;
    f.a.op_id = htole64(op_id);
    f.a.status = (int32_t)htole32((uint32_t)st);
    fy_tcp_msg_t m = {.hdr = &f, .hdr_len = sizeof(f)};
    if (fy_tcp_send(p, NULL, &m) == FERRY_ERR_NO_MEMORY)
        fy_tcp_peer_fail(p, FERRY_ERR_NO_MEMORY, "out of memory for an answer");
}

/* A frame's payload has fully arrived: deliver it, answer it, or complete its request. */
static void dest_finish(fy_tcp_peer_t *p, fy_tcp_dest_t *d)
{
    fy_tcp_iface_t *iface = p->iface;
    p->rx_msgs++;
    p->rx_bytes += d->total;
    switch (d->type) {
    case FY_TCP_AM:
        iface->super.params.am_cb(iface->super.params.am_arg, d->am_id, d->base, d->total);
        break;
    case FY_TCP_PUT:
        send_ack(p, FY_TCP_ACK, d->op_id, d->status);
        break;
    case FY_TCP_GET_RESP:
        if (d->op->comp != NULL)
            d->op->comp->cb(d->op->comp, FERRY_OK);
        fy_tcp_op_free(iface, d->op);
        break;
    }
    fy_tcp_dest_release(iface, d);
}

/* The piece a link was reading is complete. */
static void piece_done(fy_tcp_link_t *link)
{
    fy_tcp_peer_t *p = link->peer;
    fy_tcp_dest_t *d = link->rx_dest;
    link->rx_dest = NULL;
    if (d == &link->frame) {
        dest_finish(p, d);
        return;
    }
    d->got += link->rx_piece;
    if (d->got < d->total) {
        if (link->index == 0)
            fy_tcp_link_stall(link, FY_TCP_STALL_STRIPE); /* wait for the chunks */
        return;
    }
    p->rx_active = 0;
    dest_finish(p, d);
    if (p->links[0] != NULL)
        fy_tcp_link_unstall(p->links[0], FY_TCP_STALL_STRIPE);
}

/* Start reading `len` payload bytes of this link into d at off. */
static void begin_payload(fy_tcp_link_t *link, fy_tcp_dest_t *d, size_t off, size_t len)
{
    link->rx_dest = d;
    link->rx_off = off;
    link->rx_left = len;
    link->rx_piece = len;
    if (len == 0)
        piece_done(link);
}

/* A striped frame starts (its header is on link 0): check it, let the chunk links go. */
static int begin_stripe(fy_tcp_link_t *link, uint32_t seq, size_t len0, size_t total)
{
    fy_tcp_peer_t *p = link->peer;
    if (p->nlinks < 2 || link->index != 0 || p->rx_active || seq != p->rx_seq || len0 > total) {
        proto_error(link, "unexpected striped frame (seq %llu)", seq);
        return -1;
    }
    p->rx_active = 1;
    p->rx_seq++;
    for (unsigned i = 1; i < p->nlinks; i++)
        if (p->links[i] != NULL)
            fy_tcp_link_unstall(p->links[i], FY_TCP_STALL_CHUNK);
    return 0;
}

/* ---- frames ----------------------------------------------------------------------------- */

static size_t ext_size(uint8_t type)
{
    switch (type) {
    case FY_TCP_PUT:
    case FY_TCP_GET_REQ:
        return sizeof(fy_tcp_rma_ext_t);
    case FY_TCP_GET_RESP:
    case FY_TCP_ACK:
    case FY_TCP_FLUSH:
        return sizeof(fy_tcp_ack_ext_t);
    case FY_TCP_CHUNK:
        return sizeof(fy_tcp_chunk_ext_t);
    default:
        return 0;
    }
}

/* The request an answer belongs to: the oldest one, with the id the answer names. */
static fy_tcp_op_t *take_op(fy_tcp_link_t *link, uint64_t id, int kind_a, int kind_b)
{
    fy_tcp_peer_t *p = link->peer;
    if (fy_list_is_empty(&p->ops)) {
        proto_error(link, "an answer (id %llu) to no request", id);
        return NULL;
    }
    fy_tcp_op_t *op = fy_container_of(p->ops.next, fy_tcp_op_t, elem);
    if (op->id != id || (op->kind != kind_a && op->kind != kind_b)) {
        proto_error(link, "an answer out of order (id %llu)", id);
        return NULL;
    }
    fy_list_del(&op->elem);
    return op;
}

/* Handle the frame whose header starts at rx_head.  1: consumed, go on; 0: incomplete, wait
 * for bytes; -1: stop (stalled, or the peer failed). */
static int handle_frame(fy_tcp_link_t *link)
{
    fy_tcp_peer_t *p = link->peer;
    fy_tcp_iface_t *iface = p->iface;
    const fy_tcp_config_t *cfg = iface->cfg;
    size_t avail = link->rx_tail - link->rx_head;
    const char *f = link->rxbuf + link->rx_head;
    fy_tcp_hdr_t h;
    memcpy(&h, f, sizeof(h));
    size_t len = le32toh(h.length);
    if (h.type == 0 || h.type >= FY_TCP_TYPE_MAX) {
        proto_error(link, "unknown frame type %llu", h.type);
        return -1;
    }
    if ((h.flags & ~FY_TCP_F_STRIPED) != 0 ||
        ((h.flags & FY_TCP_F_STRIPED) && h.type != FY_TCP_AM && h.type != FY_TCP_PUT &&
         h.type != FY_TCP_GET_RESP)) {
        proto_error(link, "bad flags 0x%llx", h.flags);
        return -1;
    }
    if ((h.type == FY_TCP_CHUNK) != (link->index != 0)) {
        proto_error(link, "frame type %llu on the wrong link", h.type);
        return -1;
    }
    int striped = (h.flags & FY_TCP_F_STRIPED) != 0;
    size_t hl = sizeof(h) + ext_size(h.type) + (striped ? sizeof(fy_tcp_stripe_ext_t) : 0);
    if (avail < hl)
        return 0;
    fy_tcp_stripe_ext_t se = {0, 0};
    if (striped)
        memcpy(&se, f + hl - sizeof(se), sizeof(se));
    uint32_t seq = le32toh(se.seq);
    size_t len0 = le32toh(se.len0);

    switch (h.type) {
    case FY_TCP_AM: {
        if (h.am_id > FY_TL_AM_ID_MAX) {
            proto_error(link, "AM id %llu out of range", h.am_id);
            return -1;
        }
        if (len > cfg->max_msg) {
            proto_error(link, "an AM of %llu bytes, more than FERRY_TCP_MAX_MSG", len);
            return -1;
        }
        if (!striped && hl + len <= link->rx_size) {
            if (avail < hl + len)
                return 0;
            link->rx_head += hl + len;
            p->rx_msgs++;
            p->rx_bytes += len;
            iface->super.params.am_cb(iface->super.params.am_arg, h.am_id, f + hl, len);
            return link->state == FY_TCP_LINK_UP ? 1 : -1;
        }
        if (striped && begin_stripe(link, seq, len0, len) != 0)
            return -1;
        fy_tcp_dest_t *d = striped ? &p->stripe : &link->frame;
        d->type = FY_TCP_AM;
        d->am_id = h.am_id;
        d->total = len;
        d->owned = fy_tcp_buf_get(iface, len, &d->owned_cap);
        if (d->owned == NULL) {
            fy_tcp_peer_fail(p, FERRY_ERR_NO_MEMORY, "no memory for a large message");
            return -1;
        }
        d->base = d->owned;
        link->rx_head += hl;
        begin_payload(link, d, 0, striped ? len0 : len);
        return 1;
    }
    case FY_TCP_PUT:
    case FY_TCP_GET_REQ: {
        fy_tcp_rma_ext_t r;
        memcpy(&r, f + sizeof(h), sizeof(r));
        uint64_t op_id = le64toh(r.op_id), addr = le64toh(r.remote_addr);
        if (len > MAX_RMA) {
            proto_error(link, "an RMA of %llu bytes", len);
            return -1;
        }
        void *local = NULL;
        ferry_status_t st = fy_region_check(
            &iface->md->super.regions, le64toh(r.region_id), le64toh(r.key), addr, len,
            h.type == FY_TCP_PUT ? FERRY_MEM_REMOTE_WRITE : FERRY_MEM_REMOTE_READ, &local);
        if (st != FERRY_OK)
            fy_debug("tcp: refused a %s of %zu bytes at 0x%llx (region %llu): %s",
                     h.type == FY_TCP_PUT ? "put" : "get", len, (unsigned long long)addr,
                     (unsigned long long)le64toh(r.region_id), ferry_status_string(st));
        link->rx_head += hl;
        if (h.type == FY_TCP_GET_REQ) {
            p->rx_msgs++;
            struct {
                fy_tcp_hdr_t h;
                fy_tcp_ack_ext_t a;
            } ans;
            memset(&ans, 0, sizeof(ans));
            ans.h.type = FY_TCP_GET_RESP;
            ans.h.length = htole32(st == FERRY_OK ? (uint32_t)len : 0);
            ans.a.op_id = htole64(op_id);
            ans.a.status = (int32_t)htole32((uint32_t)st);
            struct iovec v = {local, st == FERRY_OK ? len : 0};
            fy_tcp_msg_t m = {.hdr = &ans,
                              .hdr_len = sizeof(ans),
                              .zc = &v,
                              .zc_cnt = v.iov_len != 0,
                              .zc_len = v.iov_len,
                              .stripe = 1};
            /* Answers are queued whatever the bound: refusing them would stop this side
             * reading, and two sides that both stop reading never resume.  Their number is
             * bounded by the requests the requester itself keeps outstanding. */
            if (fy_tcp_send(p, NULL, &m) == FERRY_ERR_NO_MEMORY) {
                fy_tcp_peer_fail(p, FERRY_ERR_NO_MEMORY, "out of memory for an answer");
                return -1;
            }
            return link->state == FY_TCP_LINK_UP ? 1 : -1;
        }
        if (striped && begin_stripe(link, seq, len0, len) != 0)
            return -1;
        fy_tcp_dest_t *d = striped ? &p->stripe : &link->frame;
        d->type = FY_TCP_PUT;
        d->total = len;
        d->base = local;
        d->discard = st != FERRY_OK;
        d->status = st;
        d->op_id = op_id;
        begin_payload(link, d, 0, striped ? len0 : len);
        return link->state == FY_TCP_LINK_UP ? 1 : -1;
    }
    case FY_TCP_GET_RESP:
    case FY_TCP_ACK: {
        fy_tcp_ack_ext_t a;
        memcpy(&a, f + sizeof(h), sizeof(a));
        ferry_status_t st = (ferry_status_t)(int32_t)le32toh((uint32_t)a.status);
        if (st > 0 || st <= FERRY_ERR_LAST) {
            proto_error(link, "an answer with status %lld", (unsigned long long)st);
            return -1;
        }
        fy_tcp_op_t *op =
            take_op(link, le64toh(a.op_id), h.type == FY_TCP_ACK ? FY_TCP_PUT : FY_TCP_GET_REQ,
                    h.type == FY_TCP_ACK ? FY_TCP_FLUSH : FY_TCP_GET_REQ);
        if (op == NULL)
            return -1;
        link->rx_head += hl;
        if (h.type == FY_TCP_ACK || st != FERRY_OK) {
            if (len != 0) {
                fy_tcp_op_free(iface, op);
                proto_error(link, "an answer of %llu bytes where none belong", len);
                return -1;
            }
            p->rx_msgs++;
            if (op->comp != NULL)
                op->comp->cb(op->comp, st);
            fy_tcp_op_free(iface, op);
            return link->state == FY_TCP_LINK_UP ? 1 : -1;
        }
        if (len != op->length) {
            fy_tcp_op_free(iface, op);
            proto_error(link, "a get answer of %llu bytes, not the size asked", len);
            return -1;
        }
        if (striped && begin_stripe(link, seq, len0, len) != 0) {
            fy_tcp_op_free(iface, op);
            return -1;
        }
        fy_tcp_dest_t *d = striped ? &p->stripe : &link->frame;
        d->type = FY_TCP_GET_RESP;
        d->total = len;
        d->op = op;
        d->discard = op->ep == NULL; /* the requester's ep is gone: its memory too */
        begin_payload(link, d, 0, striped ? len0 : len);
        return link->state == FY_TCP_LINK_UP ? 1 : -1;
    }
    case FY_TCP_FLUSH: {
        fy_tcp_ack_ext_t a;
        memcpy(&a, f + sizeof(h), sizeof(a));
        link->rx_head += hl;
        p->rx_msgs++;
        send_ack(p, FY_TCP_ACK, le64toh(a.op_id), FERRY_OK);
        return link->state == FY_TCP_LINK_UP ? 1 : -1;
    }
    case FY_TCP_CHUNK: {
        fy_tcp_chunk_ext_t c;
        memcpy(&c, f + sizeof(h), sizeof(c));
        uint32_t cseq = le32toh(c.seq);
        uint64_t off = le64toh(c.offset);
        if (!p->rx_active || cseq != p->rx_seq - 1) {
            if (cseq == p->rx_seq) { /* its frame's header has not been read yet */
                fy_tcp_link_stall(link, FY_TCP_STALL_CHUNK);
                return -1;
            }
            proto_error(link, "a chunk of no frame (seq %llu)", cseq);
            return -1;
        }
        fy_tcp_dest_t *d = &p->stripe;
        if (off > d->total || len > d->total - off || len > d->total - d->got || len == 0) {
            proto_error(link, "a chunk outside its frame (offset %llu)", (unsigned long long)off);
            return -1;
        }
        link->rx_head += hl;
        begin_payload(link, d, (size_t)off, len);
        return link->state == FY_TCP_LINK_UP ? 1 : -1;
    }
    case FY_TCP_CLOSE:
        link->rx_head += hl;
        p->remote_closed = 1;
        return 1;
    default:
        proto_error(link, "frame type %llu", h.type);
        return -1;
    }
}

void fy_tcp_link_parse(fy_tcp_link_t *link)
{
    if (link->state == FY_TCP_LINK_HELLO_SENT && fy_tcp_link_hello_answer(link) <= 0)
        return;
    while (link->state == FY_TCP_LINK_UP && !link->stall) {
        size_t avail = link->rx_tail - link->rx_head;
        if (link->rx_dest != NULL) {
            if (avail == 0)
                break;
            size_t n = FY_MIN(avail, link->rx_left);
            dest_copy(link->rx_dest, link->rx_off, link->rxbuf + link->rx_head, n);
            link->rx_head += n;
            link->rx_off += n;
            link->rx_left -= n;
            if (link->rx_left != 0)
                break;
            piece_done(link);
            continue;
        }
        if (avail < sizeof(fy_tcp_hdr_t) || handle_frame(link) <= 0)
            break;
    }
    if (link->rx_head == link->rx_tail && link->state != FY_TCP_LINK_CLOSED)
        link->rx_head = link->rx_tail = 0;
}

static void link_eof(fy_tcp_link_t *link, int err)
{
    fy_tcp_peer_t *p = link->peer;
    if (err == 0 && p->remote_closed && link->index == 0) {
        fy_tcp_peer_closed(p);
        return;
    }
    if (err == 0 && link->index != 0 && p->links[0] != NULL &&
        p->links[0]->state == FY_TCP_LINK_UP && !p->rx_active && link->rx_dest == NULL) {
        /* a chunk link ended first: link 0 (CLOSE, or its own end) decides */
        link->state = FY_TCP_LINK_CLOSED;
        epoll_ctl(p->iface->epfd, EPOLL_CTL_DEL, link->fd, NULL);
        return;
    }
    ferry_status_t st = err == ETIMEDOUT ? FERRY_ERR_ENDPOINT_TIMEOUT : FERRY_ERR_CONNECTION_RESET;
    fy_tcp_peer_fail(p, link->state == FY_TCP_LINK_HELLO_SENT ? FERRY_ERR_UNREACHABLE : st,
                     err == 0 ? "connection closed by the peer" : strerror(err));
}

size_t fy_tcp_link_read(fy_tcp_link_t *link)
{
    fy_tcp_iface_t *iface = link->peer->iface;
    size_t total = 0;
    for (int round = 0; round < 8; round++) {
        if (link->state == FY_TCP_LINK_CLOSED || link->stall)
            return total;
        if (link->rx_dest == NULL && link->rx_tail > link->rx_head) {
            /* frames left from before a stall come first (and make room) */
            fy_tcp_link_parse(link);
            if (link->state == FY_TCP_LINK_CLOSED || link->stall)
                return total;
        }
        struct iovec v[FY_TCP_MAX_IOV + 2];
        size_t cnt, want, covered = 0;
        int direct = link->rx_dest != NULL && link->rx_head == link->rx_tail;
        if (direct) {
            /* The payload straight to its place, then what follows into the buffer: only a
             * little of it, since if it is another large frame, what lands in the buffer is
             * copied out again (small frames are fetched by the next read anyway). */
            cnt = dest_iov(iface, link->rx_dest, link->rx_off, link->rx_left, v, FY_TCP_MAX_IOV,
                           &covered);
            link->rx_head = link->rx_tail = 0;
            if (covered == link->rx_left) {
                v[cnt].iov_base = link->rxbuf;
                v[cnt++].iov_len = FY_MIN(link->rx_size, 4096);
            }
        } else {
            if (link->rx_head == link->rx_tail) {
                link->rx_head = link->rx_tail = 0;
            } else if (link->rx_head != 0 &&
                       (link->rx_size - link->rx_tail < 4096 || link->rx_head > link->rx_size / 2 ||
                        link->rx_tail == link->rx_size)) {
                memmove(link->rxbuf, link->rxbuf + link->rx_head, link->rx_tail - link->rx_head);
                link->rx_tail -= link->rx_head;
                link->rx_head = 0;
            }
            if (link->rx_tail == link->rx_size) { /* a frame that fits never fills it */
                proto_error(link, "no frame in %llu buffered bytes", link->rx_size);
                return total;
            }
            v[0].iov_base = link->rxbuf + link->rx_tail;
            v[0].iov_len = link->rx_size - link->rx_tail;
            cnt = 1;
        }
        want = 0;
        for (size_t i = 0; i < cnt; i++)
            want += v[i].iov_len;
        ssize_t n = fy_tcp_recvv(link->fd, v, cnt);
        if (n == 0) {
            link_eof(link, 0);
            return total;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                link_eof(link, errno);
            return total;
        }
        total += (size_t)n;
        if (direct) {
            size_t take = FY_MIN((size_t)n, covered);
            link->rx_off += take;
            link->rx_left -= take;
            link->rx_tail = (size_t)n - take;
            if (link->rx_left == 0)
                piece_done(link);
        } else {
            link->rx_tail += (size_t)n;
        }
        fy_tcp_link_parse(link);
        if ((size_t)n < want)
            return total; /* drained, most likely: epoll says when there is more */
    }
    /* budget used: there may be more, and the fd stays readable (level-triggered) */
    return total;
}
