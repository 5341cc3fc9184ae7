/*
 * udp_tx.c - the send path: fragments become segments, segments get sequence numbers and a
 * place in the window, and leave in batches.
 *
 * A send either goes out at once (the fast path: the ep is connected, its queue is empty,
 * its window open and its credits left) or waits on the ep's send queue, and the ep waits
 * on the iface's ready queue, which progress walks round-robin after the resend queue
 * (tx_progress).  Small fragments are copied into a segment of their own at the call, so
 * the caller's buffer is free at once (am_short, am_bcopy, put_short: FERRY_OK).  Large
 * fragments (am_zcopy, put_zcopy, a get's answer) stay in the caller's memory and are cut
 * into chunks only when the window lets a chunk leave; their completion comes when the last
 * chunk is ACKed.
 *
 * A segment's header is the compact data header (udp_proto.h): its header space holds that
 * header, room for the ACK block, then the type header; a transmission sends the ACK block
 * only when an ACK is owed and it fits the datagram (a chunk fills the path's MTU without
 * one: the ACK then goes on its own).  Every transmission (first or resend) picks up the ACK
 * owed to the peer when it can (piggy-backing), takes a fresh timestamp for the RTT estimate and
 * checks the segment into the hotel.  The datagrams of one pass go to the kernel with one sendmmsg
 * per channel; a datagram the kernel refuses for lack of buffer goes to the front of the resend
 * queue.  Segments that fit the priority MTU go on the priority channel, the rest (every resend,
 * and a fragment's chunks after the first) on the data channel.
 */
#include <errno.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"

/* The window bounds the sequence span (the receiver's stash); the congestion window and
 * the credits bound only what is in flight: segments the receiver holds out of order have
 * left the pipe, so new data flows while holes are repaired. */
static inline int can_send(const fy_udp_conn_t *c)
{
    uint32_t span = c->snd_nxt - c->snd_una;
    uint64_t out = c->inflight - c->sacked_bytes;
    return span < c->wnd && span - c->nsacked < c->cwnd &&
           ((out < c->credit && (c->peer_rwnd == 0 || out < c->peer_rwnd)) || span == 0);
}

void fy_udp_ready_add(fy_udp_conn_t *c)
{
    if (c->state != FY_UDP_CONN_CONNECTED || fy_list_is_empty(&c->sendq) ||
        fy_list_is_linked(&c->ready_link))
        return;
    fy_list_add_tail(&c->iface->ready, &c->ready_link);
}

void fy_udp_enqueue(fy_udp_conn_t *c, fy_udp_pend_t *p)
{
    fy_list_add_tail(&c->sendq, &p->link);
    fy_udp_ready_add(c);
}

/* ---- the transmit batch ---------------------------------------------------------------- */

/* A control message's csum, or a data segment's keyed check (seeded with the receiver's key
 * and token). */
static void batch_csum(struct iovec *iov, unsigned n, const fy_udp_conn_t *c)
{
    uint8_t *h = iov[0].iov_base;
    int data = h[0] >= FY_UDP_T_FIRST_SEQ;
    size_t at = data ? FY_UDP_D_CHECK : FY_UDP_CSUM_OFFSET;
    uint32_t crc = data ? fy_udp_check_seed(c->peer_key, c->peer_token) : 0;
    h[offsetof(fy_udp_hdr_t, flags)] |= FY_UDP_F_CSUM;
    memset(h + at, 0, 4);
    for (unsigned i = 0; i < n; i++)
        crc = fy_udp_crc32c(crc, iov[i].iov_base, iov[i].iov_len);
    memcpy(h + at, &crc, 4);
}

/* A lone datagram.  A small one (an AM of a ping-pong, an ACK) is gathered into one buffer
 * and goes by sendto, which spares the kernel recvmsg's twin costs: copying in the message
 * header and importing the iovec (header and payload are two pieces).  Copying a few hundred
 * bytes costs less than that; a larger or GSO one goes by sendmsg as it is. */
#define SEND_GATHER_MAX 1024

static ssize_t send_one(int fd, const struct msghdr *mh)
{
    size_t len = fy_iov_total(mh->msg_iov, mh->msg_iovlen);
    if (mh->msg_controllen != 0 || len > SEND_GATHER_MAX)
        return sendmsg(fd, mh, 0);
    uint8_t buf[SEND_GATHER_MAX] __attribute__((aligned(8)));
    fy_iov_gather(buf, mh->msg_iov, mh->msg_iovlen);
    return sendto(fd, buf, len, 0, (const struct sockaddr *)mh->msg_name, mh->msg_namelen);
}

void fy_udp_tx_flush(fy_udp_iface_t *iface, uint8_t chan)
{
    fy_udp_chan_t *ch = &iface->ch[chan];
    unsigned sent = 0, n = ch->ntx;

    if (n == 0)
        return;
    for (unsigned i = 0; i < n; i++) {
        struct msghdr *mh = &ch->tmsg[i].msg_hdr;
        if (ch->mseg_n[i] > 1) {
            struct cmsghdr *cm = (struct cmsghdr *)ch->cbuf[i];
            uint16_t gso = (uint16_t)ch->mgso[i];
            mh->msg_control = ch->cbuf[i];
            mh->msg_controllen = sizeof(ch->cbuf[i]);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(gso));
            memcpy(CMSG_DATA(cm), &gso, sizeof(gso));
        }
    }
    /* RACK compares send times: stamp a batch when it really leaves (the priority
     * channel's batch goes first, so a data segment stamped before a later-numbered tiny
     * one may still leave after it).  With checksums the header is sealed already. */
    if (n > 1 || ch->nbseg > 1 || (chan == FY_UDP_CH_DATA && !iface->csum)) {
        if (!iface->csum) {
            uint64_t t = fy_time_ns();
            uint32_t ts = fy_udp_ts(t);
            for (unsigned k = 0; k < ch->nbseg; k++) {
                ch->bseg[k]->tx_ns = t;
                memcpy(ch->bseg[k]->hdr + FY_UDP_D_TSVAL, &ts, sizeof(ts));
            }
        }
    }
    if (iface->fault.enabled && (iface->fault.chan_mask & (1u << chan))) {
        for (unsigned i = 0; i < n; i++)
            fy_udp_fault_send(iface, chan, &ch->tmsg[i].msg_hdr);
        sent = n;
    } else {
        while (sent < n) {
            int r = n - sent == 1 ? (send_one(ch->fd, &ch->tmsg[sent].msg_hdr) >= 0 ? 1 : -1)
                                  : sendmmsg(ch->fd, ch->tmsg + sent, n - sent, 0);
            if (r > 0) {
                sent += (unsigned)r;
                continue;
            }
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
                break;
            if (ch->mseg_n[sent] > 1 && (errno == EIO || errno == EINVAL)) {
                /* The device cannot segment for us: plain datagrams from now on. */
                fy_info("udp: UDP segmentation offload refused (%s): off", strerror(errno));
                iface->gso = 0;
                break;
            }
            if (errno == EMSGSIZE && !iface->warned_emsgsize) {
                iface->warned_emsgsize = 1;
                fy_warn(
                    "udp: a %zu-byte datagram does not fit the interface MTU %u "
                    "(FERRY_UDP_MTU too large?)",
                    fy_iov_total(ch->tmsg[sent].msg_hdr.msg_iov, ch->tmsg[sent].msg_hdr.msg_iovlen),
                    iface->if_mtu);
            }
            iface->tx_errors++;
            sent++; /* drop it: a segment is resent by its timer */
        }
    }
    for (unsigned i = 0; i < sent; i++)
        iface->tx_dgrams += ch->mseg_n[i] ? ch->mseg_n[i] : 1;
    for (unsigned i = sent; i < n; i++)
        for (unsigned k = 0; k < ch->mseg_n[i]; k++)
            fy_udp_seg_unsent(iface, ch->bseg[ch->mseg_first[i] + k]);
    ch->ntx = ch->ntxiov = ch->nbseg = 0;
}

void fy_udp_tx_flush_all(fy_udp_iface_t *iface)
{
    fy_udp_tx_flush(iface, FY_UDP_CH_PRIO);
    fy_udp_tx_flush(iface, FY_UDP_CH_DATA);
}

/* Room for one message of up to niov iovecs in the channel's batch. */
static struct mmsghdr *batch_slot(fy_udp_iface_t *iface, uint8_t chan, unsigned niov,
                                  struct iovec **iov)
{
    fy_udp_chan_t *ch = &iface->ch[chan];
    if (ch->ntx == FY_UDP_BATCH || ch->ntxiov + niov > FY_ARRAY_SIZE(ch->tiov) ||
        ch->nbseg == FY_ARRAY_SIZE(ch->bseg))
        fy_udp_tx_flush(iface, chan);
    *iov = &ch->tiov[ch->ntxiov];
    return &ch->tmsg[ch->ntx];
}

static void batch_commit(fy_udp_iface_t *iface, uint8_t chan, struct mmsghdr *m, struct iovec *iov,
                         unsigned n, const struct sockaddr_storage *to, socklen_t tolen,
                         fy_udp_seg_t *seg, const fy_udp_conn_t *c)
{
    fy_udp_chan_t *ch = &iface->ch[chan];
    uint32_t bytes = (uint32_t)fy_iov_total(iov, n);
    if (iface->csum)
        batch_csum(iov, n, c);
    /* GSO: a segment to the same peer right after full-size ones joins their message; its
     * iovecs already follow the previous message's in tiov. */
    if (seg != NULL && iface->gso && ch->ntx > 0) {
        unsigned i = ch->ntx - 1;
        struct msghdr *prev = &ch->tmsg[i].msg_hdr;
        uint32_t gso = ch->mgso[i] ? ch->mgso[i] : ch->mbytes[i];
        if (ch->mopen[i] && ch->mseg_n[i] > 0 && prev->msg_name == (void *)to && bytes <= gso &&
            ch->mbytes[i] + bytes <= FY_UDP_GSO_BYTES && ch->mseg_n[i] < FY_UDP_GSO_MAX) {
            ch->mgso[i] = gso;
            ch->mbytes[i] += bytes;
            ch->mopen[i] = bytes == gso;
            prev->msg_iovlen += n;
            ch->ntxiov += n;
            ch->bseg[ch->nbseg++] = seg;
            ch->mseg_n[i]++;
            return;
        }
    }
    memset(&m->msg_hdr, 0, sizeof(m->msg_hdr));
    m->msg_hdr.msg_name = (void *)to;
    m->msg_hdr.msg_namelen = tolen;
    m->msg_hdr.msg_iov = iov;
    m->msg_hdr.msg_iovlen = n;
    ch->mgso[ch->ntx] = 0;
    ch->mbytes[ch->ntx] = bytes;
    ch->mopen[ch->ntx] = 1;
    ch->mseg_first[ch->ntx] = (uint16_t)ch->nbseg;
    ch->mseg_n[ch->ntx] = seg != NULL;
    if (seg != NULL)
        ch->bseg[ch->nbseg++] = seg;
    ch->ntx++;
    ch->ntxiov += n;
}

/* The iovecs of bytes [off, off+len) of a fragment's message. */
static unsigned iov_slice(const struct iovec *src, size_t cnt, uint64_t off, uint64_t len,
                          struct iovec *out, unsigned max)
{
    unsigned n = 0;
    for (size_t i = 0; i < cnt && len > 0 && n < max; i++) {
        if (off >= src[i].iov_len) {
            off -= src[i].iov_len;
            continue;
        }
        size_t take = FY_MIN(src[i].iov_len - off, len);
        out[n].iov_base = (char *)src[i].iov_base + off;
        out[n].iov_len = take;
        n++;
        len -= take;
        off = 0;
    }
    return n;
}

/* Put the ACK owed to the peer into a segment's header space (its ACK block). */
static void piggyback(fy_udp_conn_t *c, uint8_t *hdr)
{
    fy_udp_dack_t a = {
        .ack = c->rcv_nxt, .sack = c->nstash ? fy_udp_sack_bits(c) : 0, .tsecr = c->ts_echo};
    hdr[offsetof(fy_udp_dhdr_t, flags)] |=
        FY_UDP_F_ACK | (c->dsack_pending ? FY_UDP_F_DSACK : 0) |
        (c->ts_echo_chan == FY_UDP_CH_DATA ? FY_UDP_F_ECHO_DATA : 0);
    memcpy(hdr + FY_UDP_DHDR_LEN, &a, sizeof(a));
    c->ts_echo = 0; /* each echo once: a later ACK must not repeat a stale one */
    c->dsack_pending = 0;
    if (c->ack_pending) {
        c->ack_pending = 0;
        c->ack_now = 0;
        c->ack_unsent = 0;
        c->ack_unsent_bytes = 0;
        fy_list_del(&c->ack_link);
    }
}

/* A segment leaves now: the peer's id and token as they are now (a resend after the peer drew
 * a new token), the ACK owed when the datagram has room for it (returns whether it rides), the
 * timestamp, the count of tries, the controller's and the timer's share. */
static inline int seg_stamp_hdr(fy_udp_iface_t *iface, fy_udp_conn_t *c, fy_udp_seg_t *seg,
                                uint8_t chan)
{
    uint32_t ts;
    seg->hdr[offsetof(fy_udp_dhdr_t, flags)] = seg->tries != 0 ? FY_UDP_F_RESENT : 0;
    /* the peer's id and token as they are now (a resend after the peer drew a new token) */
    memcpy(seg->hdr + FY_UDP_D_DST, &c->peer_id, 4);
    memcpy(seg->hdr + FY_UDP_D_CHECK, &c->peer_token, 4); /* (or the checksum, below) */
    /* The ACK rides when one is owed and the datagram has room for it. */
    int ack = (c->ack_pending || c->dsack_pending) &&
              seg->hlen + FY_UDP_DACK_LEN + seg->dlen <=
                  (chan == FY_UDP_CH_PRIO ? c->prio_mtu : c->seg_size);
    if (ack)
        piggyback(c, seg->hdr);
    seg->tx_ns = iface->now;
    seg->chan = chan;
    ts = fy_udp_ts(iface->now);
    memcpy(seg->hdr + FY_UDP_D_TSVAL, &ts, sizeof(ts));
    return ack;
}

/* (what seg_stamp does once the header is written: nothing of it goes into the datagram) */
static inline void seg_stamp_books(fy_udp_iface_t *iface, fy_udp_conn_t *c, fy_udp_seg_t *seg)
{
    uint64_t stay;
    seg->tries++;
    fy_udp_cc_sent(c, seg);
    if (FY_LIKELY(seg->tries == 1)) { /* fy_udp_seg_stay without the backoff shift */
        uint64_t max = iface->opts->rto_max;
        stay = c->rto > max ? max : c->rto;
    } else {
        c->stats.retransmits++;
        c->resent_at = iface->now;
        stay = fy_udp_seg_stay(c, seg);
    }
    fy_hotel_checkin(&iface->hotel, &seg->timer.room, stay, iface->now);
}

static int seg_stamp(fy_udp_iface_t *iface, fy_udp_conn_t *c, fy_udp_seg_t *seg, uint8_t chan)
{
    int ack = seg_stamp_hdr(iface, c, seg, chan);
    seg_stamp_books(iface, c, seg);
    return ack;
}

/* Transmit (or retransmit) a segment that has its sequence number. */
static void seg_xmit(fy_udp_iface_t *iface, fy_udp_conn_t *c, fy_udp_seg_t *seg, uint8_t chan)
{
    struct iovec *iov;
    struct mmsghdr *m = batch_slot(iface, chan, FY_UDP_MAX_IOV + 4, &iov);
    size_t xl = seg->hlen - FY_UDP_DHDR_LEN;
    unsigned n;

    /* A batch may carry megabytes: stamp each later segment with its own time, or its
     * timer would start early.  (The first of a batch uses the caller's fresh time.) */
    if (iface->ch[chan].ntx != 0)
        iface->now = fy_time_ns();
    int ack = seg_stamp(iface, c, seg, chan);
    /* [data header (+ ACK block)] [type header] [data ...] */
    iov[0].iov_base = seg->hdr;
    if (ack) {
        iov[0].iov_len = FY_UDP_SEG_XHDR + xl;
        n = 1;
    } else {
        iov[0].iov_len = FY_UDP_DHDR_LEN;
        iov[1].iov_base = fy_udp_seg_xhdr(seg);
        iov[1].iov_len = xl;
        n = xl != 0 ? 2 : 1;
    }
    if (seg->frag != NULL)
        n += iov_slice(seg->frag->iov, seg->frag->iovcnt, seg->off, seg->dlen, iov + n,
                       FY_UDP_MAX_IOV + 2);
    else if (seg->dlen != 0) {
        iov[n].iov_base = seg->data;
        iov[n].iov_len = seg->dlen;
        n++;
    }
    batch_commit(iface, chan, m, iov, n, &c->addr[chan], c->addrlen, seg, c);
}

static void seg_assign(fy_udp_conn_t *c, fy_udp_seg_t *seg)
{
    if (c->snd_una == c->snd_nxt) {
        /* the peer-timeout and retransmission clocks start */
        c->last_rx_ns = FY_MAX(c->last_rx_ns, c->iface->now);
        c->last_seg_ns = FY_MAX(c->last_seg_ns, c->iface->now);
        c->last_ack_ns = c->iface->now;
    }
    seg->conn = c;
    seg->seq = c->snd_nxt++;
    memcpy(seg->hdr + FY_UDP_D_SEQ, &seg->seq, 4);
    c->win[seg->seq & (c->iface->wsize - 1)] = seg;
    c->inflight += fy_udp_seg_cost(seg);
    if (seg->frag != NULL)
        seg->frag->outstanding++;
}

/* A chunk after the first of its fragment follows the one before it on the data channel,
 * whatever its size: on the priority channel a fragment's small tail overtook its
 * predecessor, so the receiver stashed it and ACKed the hole at once, and the sender's timer
 * (RACK judges nothing across channels) resent it needlessly - a 64 KiB AM on the loopback
 * is a 65,408-byte chunk and a 128-byte one. */
static inline uint8_t chan_for(const fy_udp_conn_t *c, const fy_udp_seg_t *seg)
{
    return seg->hlen + seg->dlen <= c->prio_mtu && (seg->frag == NULL || seg->off == 0)
               ? FY_UDP_CH_PRIO
               : FY_UDP_CH_DATA;
}

void fy_udp_seg_sent(fy_udp_conn_t *c, fy_udp_seg_t *seg)
{
    seg_assign(c, seg);
    seg_xmit(c->iface, c, seg, chan_for(c, seg));
}

size_t fy_udp_chunk_payload(const fy_udp_conn_t *c, uint8_t type, int first)
{
    size_t room = c->seg_size - FY_UDP_DHDR_LEN - fy_udp_xhdr_len(type, first);
    return room > 4096 ? room & ~(size_t)63 : room; /* keep large chunks cache-line sized */
}

/* Make the next chunk of a fragment; NULL when out of descriptors. */
static fy_udp_seg_t *make_chunk(fy_udp_conn_t *c, fy_udp_frag_t *f)
{
    fy_udp_seg_t *seg = fy_udp_seg_alloc(c->iface, 0);
    size_t xl, dlen;
    if (seg == NULL)
        return NULL;
    /* An AM whose whole message fits one segment travels as a plain AM. */
    if (f->type == FY_UDP_T_AM_CHUNK && f->next_off == 0 &&
        f->total <= c->seg_size - FY_UDP_DHDR_LEN - FY_UDP_AM_XLEN)
        f->type = FY_UDP_T_AM;
    xl = fy_udp_xhdr_len(f->type, f->next_off == 0);
    dlen = f->type == FY_UDP_T_AM
               ? f->total
               : FY_MIN(fy_udp_chunk_payload(c, f->type, f->next_off == 0), f->total - f->next_off);
    fy_udp_seg_init_hdr(c, seg, f->type, f->am_id, xl, dlen);
    if (f->type == FY_UDP_T_AM_CHUNK) {
        /* the fragment id in aux; the offset, and in the first chunk the size and AM id */
        fy_udp_amfirst_t a = {
            .offset = (uint32_t)f->next_off, .total = (uint32_t)f->total, .am_id = f->am_id};
        uint16_t id = (uint16_t)f->op_id;
        memcpy(seg->hdr + offsetof(fy_udp_dhdr_t, aux), &id, sizeof(id));
        memcpy(fy_udp_seg_xhdr(seg), &a, xl);
    } else if (f->type != FY_UDP_T_AM) {
        fy_udp_chunk_t ch = {
            .op_id = f->op_id, .status = f->status, .offset = f->next_off, .total = f->total};
        memcpy(fy_udp_seg_xhdr(seg), &ch, sizeof(ch));
        if (f->type == FY_UDP_T_PUT)
            memcpy(fy_udp_seg_xhdr(seg) + sizeof(ch), &f->rma, sizeof(f->rma));
    }
    seg->frag = f;
    seg->off = f->next_off;
    f->next_off += dlen;
    return seg;
}

/* Send what the ep's window and credits allow, up to budget segments. */
static unsigned conn_push(fy_udp_conn_t *c, unsigned budget)
{
    unsigned sent = 0;
    uint64_t bytes = 0;
    while (sent < budget && bytes < FY_UDP_TX_BYTES && !fy_list_is_empty(&c->sendq)) {
        fy_udp_pend_t *p = fy_container_of(c->sendq.next, fy_udp_pend_t, link);
        if (p->kind == FY_UDP_PEND_FLUSH) {
            fy_udp_flush_t *fl = (fy_udp_flush_t *)p;
            fy_list_del(&p->link);
            fl->seq = c->snd_nxt;
            fy_list_add_tail(&c->flushq, &p->link);
            fy_udp_flush_check(c);
            continue;
        }
        if (!can_send(c) || !fy_udp_cc_can_tx(c) || !fy_udp_win_ready(c))
            break;
        if (p->kind == FY_UDP_PEND_SEG) {
            fy_udp_seg_t *seg = (fy_udp_seg_t *)p;
            fy_list_del(&p->link);
            if (seg->hlen + seg->dlen > c->seg_size) {
                /* Copied before the path check shrank the segments: chunk it instead. */
                fy_udp_frag_t *f = fy_udp_frag_alloc(c->iface);
                if (f == NULL) {
                    fy_list_add_head(&c->sendq, &p->link);
                    break;
                }
                f->type = FY_UDP_T_AM_CHUNK;
                f->am_id = fy_udp_seg_xhdr(seg)[offsetof(fy_udp_am_t, am_id)];
                f->op_id = c->next_frag_id++;
                f->total = seg->dlen;
                f->iovcnt = 1;
                f->iov[0].iov_base = seg->data;
                f->iov[0].iov_len = seg->dlen;
                f->bounce = seg;
                f->conn = c;
                f->queued = 1;
                fy_list_add_head(&c->sendq, &f->pend.link);
                continue;
            }
            fy_udp_seg_sent(c, seg);
        } else {
            fy_udp_frag_t *f = (fy_udp_frag_t *)p;
            fy_udp_seg_t *seg = make_chunk(c, f);
            if (seg == NULL)
                break;
            if (f->next_off >= f->total) {
                fy_list_del(&p->link);
                f->queued = 0;
            }
            fy_udp_seg_sent(c, seg);
            bytes += seg->dlen;
        }
        sent++;
    }
    if (fy_list_is_empty(&c->sendq) && can_send(c))
        fy_udp_cc_app_limited(c);
    return sent;
}

unsigned fy_udp_tx_progress(fy_udp_iface_t *iface)
{
    unsigned budget = (unsigned)iface->opts->tx_budget, n = 0;
    fy_list_t *e;

    if (fy_list_is_empty(&iface->resendq) && fy_list_is_empty(&iface->ready))
        return 0;
    iface->now = fy_time_ns();

    while (n < budget && (e = fy_list_pop_head(&iface->resendq)) != NULL) {
        fy_udp_seg_t *seg = fy_container_of(e, fy_udp_seg_t, rlink);
        seg_xmit(iface, seg->conn, seg, FY_UDP_CH_DATA);
        n++;
    }
    /* Round robin over the ready eps: each gets a share, then goes to the back. */
    while (n < budget && !fy_list_is_empty(&iface->ready)) {
        fy_udp_conn_t *c = fy_container_of(iface->ready.next, fy_udp_conn_t, ready_link);
        unsigned share = FY_MAX(budget / 4, 1u);
        unsigned k;
        fy_list_del(&c->ready_link);
        k = conn_push(c, FY_MIN(share, budget - n));
        n += k;
        /* Window or credits closed: an ACK puts it back.  Still able but nothing sent:
         * out of descriptors, try again next pass. */
        if (!fy_list_is_empty(&c->sendq) && can_send(c) && !c->pace_wait &&
            c->state == FY_UDP_CONN_CONNECTED) {
            fy_list_add_tail(&iface->ready, &c->ready_link);
            if (k == 0)
                break;
        }
    }
    return n;
}

/* ---- fragments from the caller -------------------------------------------------------- */

static ferry_status_t conn_usable(const fy_udp_conn_t *c)
{
    return c->state == FY_UDP_CONN_FAILED || c->state == FY_UDP_CONN_CLOSED
               ? FERRY_ERR_NOT_CONNECTED
               : FERRY_OK;
}

/* A lone small segment, first transmission, nothing batched before it on its channel, no
 * checksum and no fault injector there: it goes at once by one sendto from a buffer on the
 * stack - what seg_xmit, batch_commit and fy_udp_tx_flush do for it, without the batch
 * (~250 of the ~930 instructions of an 8 B am_short, callgrind).  It leaves right after its
 * stamp, so no later stamp is needed (RACK's order within a channel holds: nothing of this
 * channel waits in a batch). */
static inline int send_now_ok(const fy_udp_iface_t *iface, const fy_udp_seg_t *seg, uint8_t chan)
{
    return iface->ch[chan].ntx == 0 && !iface->csum && seg->frag == NULL && seg->tries == 0 &&
           seg->hlen + FY_UDP_DACK_LEN + seg->dlen <= SEND_GATHER_MAX &&
           !(iface->fault.enabled && (iface->fault.chan_mask & (1u << chan)));
}

/* memcpy of n bytes where the small sizes of the latency path (8-16: an AM's proto header,
 * a word of data) are two fixed 8-byte moves, overlapping, instead of a call. */
static inline void copy_small(uint8_t *d, const void *src, size_t n)
{
    const uint8_t *s = src;
    if (n >= 8 && n <= 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n != 0) {
        memcpy(d, s, n);
    }
}

static void seg_send_now(fy_udp_iface_t *iface, fy_udp_conn_t *c, fy_udp_seg_t *seg, uint8_t chan)
{
    uint8_t buf[SEND_GATHER_MAX] __attribute__((aligned(8)));
    size_t xl = seg->hlen - FY_UDP_DHDR_LEN;
    ssize_t r;

    size_t hl = seg_stamp_hdr(iface, c, seg, chan) ? FY_UDP_SEG_XHDR : FY_UDP_DHDR_LEN;
    /* [data header (+ ACK block)] [type header] [data] */
    memcpy(buf, seg->hdr, FY_UDP_SEG_XHDR);
    memcpy(buf + hl, fy_udp_seg_xhdr(seg), FY_UDP_SEG_HDR_MAX - FY_UDP_SEG_XHDR);
    copy_small(buf + hl + xl, seg->data, seg->dlen);
    do
        r = sendto(iface->ch[chan].fd, buf, hl + xl + seg->dlen, 0,
                   (const struct sockaddr *)&c->addr[chan], c->addrlen);
    while (r < 0 && errno == EINTR);
    /* The timer and the controller's share after the datagram left, not before: off the
     * path of a ping-pong's answer (the stamp's time is the one read before the send). */
    int err = r < 0 ? errno : 0;
    seg_stamp_books(iface, c, seg);
    if (r >= 0) {
        iface->tx_dgrams++;
    } else if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) {
        fy_udp_seg_unsent(iface, seg); /* first in line for the next pass */
    } else {
        iface->tx_errors++; /* dropped: its timer resends it */
    }
}

/* Send a formed segment now (fast path) or queue it; the data is already copied. */
ferry_status_t fy_udp_send_inline(fy_udp_conn_t *c, fy_udp_seg_t *seg)
{
    fy_udp_iface_t *iface = c->iface;
    seg->conn = c;
    if (c->state == FY_UDP_CONN_CONNECTED && fy_list_is_empty(&c->sendq) && can_send(c) &&
        (c->pace_rate == 0 || (iface->now = fy_time_ns(), fy_udp_cc_can_tx(c))) &&
        fy_udp_win_ready(c)) {
        uint8_t chan = chan_for(c, seg);
        iface->now = fy_time_ns();
        seg_assign(c, seg);
        if (send_now_ok(iface, seg, chan)) {
            seg_send_now(iface, c, seg, chan);
            return FERRY_OK;
        }
        seg_xmit(iface, c, seg, chan);
        fy_udp_tx_flush(iface, chan);
        return FERRY_OK;
    }
    fy_udp_enqueue(c, &seg->pend);
    return FERRY_OK;
}

static ferry_status_t am_copy(fy_udp_conn_t *c, uint8_t id, const struct iovec *iov, size_t iovcnt,
                              size_t max)
{
    fy_udp_iface_t *iface = c->iface;
    size_t len = fy_iov_total(iov, iovcnt);
    fy_udp_seg_t *seg;
    ferry_status_t st = conn_usable(c);

    if (st != FERRY_OK)
        return st;
    if (len > max || iovcnt > FY_UDP_MAX_IOV || id > FY_TL_AM_ID_MAX)
        return FERRY_ERR_INVALID_PARAM;
    seg = fy_udp_seg_alloc(iface, len ? len : 1);
    if (seg == NULL)
        return FERRY_ERR_NO_RESOURCE;
    /* (the gather written out here: the pieces are few and small, a call per message less) */
    uint8_t *p = seg->data;
    for (size_t i = 0; i < iovcnt; i++) {
        copy_small(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    c->stats.tx_msgs++;
    c->stats.tx_bytes += len;
    if (FY_LIKELY(FY_UDP_DHDR_LEN + FY_UDP_AM_XLEN + len <= c->seg_size)) {
        /* fy_udp_seg_init_hdr for an AM, in place: a zero data header of this type, the
         * AM's type header; the rest is written when it takes its number and leaves */
        fy_udp_dhdr_t h;
        fy_udp_am_t a = {.am_id = id};
        memset(&h, 0, sizeof(h));
        h.type = FY_UDP_T_AM;
        memcpy(seg->hdr, &h, sizeof(h));
        memcpy(fy_udp_seg_xhdr(seg), &a, sizeof(a));
        seg->hlen = FY_UDP_DHDR_LEN + FY_UDP_AM_XLEN;
        seg->dlen = (uint32_t)len;
        return fy_udp_send_inline(c, seg);
    }
    /* The path's segments are smaller than this iface's (an MTU fallback, or a peer with a
     * smaller MTU): send the copy as a chunked fragment that owns it. */
    fy_udp_frag_t *f = fy_udp_frag_alloc(iface);
    if (f == NULL) {
        fy_udp_seg_free(iface, seg);
        return FERRY_ERR_NO_RESOURCE;
    }
    f->type = FY_UDP_T_AM_CHUNK;
    f->am_id = id;
    f->op_id = c->next_frag_id++;
    f->total = len;
    f->iovcnt = 1;
    f->iov[0].iov_base = seg->data;
    f->iov[0].iov_len = len;
    f->bounce = seg;
    fy_udp_frag_submit(c, f);
    return FERRY_OK;
}

ferry_status_t fy_udp_am_short(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    return am_copy(c, id, iov, iovcnt, c->iface->opts->prio_mtu - FY_UDP_AM_HDR_MAX);
}

ferry_status_t fy_udp_am_bcopy(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    return am_copy(c, id, iov, iovcnt, c->iface->seg_size - FY_UDP_AM_HDR_MAX);
}

/* Queue a fragment and send what fits now. */
void fy_udp_frag_submit(fy_udp_conn_t *c, fy_udp_frag_t *f)
{
    fy_udp_iface_t *iface = c->iface;
    f->conn = c;
    f->queued = 1;
    fy_udp_enqueue(c, &f->pend);
    if (c->state == FY_UDP_CONN_CONNECTED && fy_list_is_linked(&c->ready_link) &&
        c->sendq.next == &f->pend.link) {
        iface->now = fy_time_ns();
        conn_push(c, (unsigned)iface->opts->tx_budget);
        if (fy_list_is_empty(&c->sendq) || !can_send(c) || c->pace_wait)
            fy_list_del(&c->ready_link);
        fy_udp_tx_flush_all(iface);
    }
}

ferry_status_t fy_udp_am_zcopy(fy_tl_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    fy_udp_iface_t *iface = c->iface;
    ferry_status_t st = conn_usable(c);
    fy_udp_frag_t *f;
    size_t total;

    if (st != FERRY_OK)
        return st;
    if (hdr_len > FY_UDP_MAX_ZHDR || iovcnt > FY_UDP_MAX_IOV || id > FY_TL_AM_ID_MAX ||
        comp == NULL)
        return FERRY_ERR_INVALID_PARAM;
    total = hdr_len + fy_iov_total(iov, iovcnt);
    if (total > iface->opts->max_zcopy || total > UINT32_MAX) /* (32-bit chunk offsets) */
        return FERRY_ERR_INVALID_PARAM;
    f = fy_udp_frag_alloc(iface);
    if (f == NULL)
        return FERRY_ERR_NO_RESOURCE;
    f->type = FY_UDP_T_AM_CHUNK;
    f->am_id = id;
    f->op_id = c->next_frag_id++;
    f->total = total;
    f->comp = comp;
    if (hdr_len != 0) /* (hdr may be NULL then) */
        memcpy(f->hdr, hdr, hdr_len);
    f->iov[0].iov_base = f->hdr;
    f->iov[0].iov_len = hdr_len;
    memcpy(&f->iov[1], iov, iovcnt * sizeof(*iov));
    f->iovcnt = iovcnt + 1;
    c->stats.tx_msgs++;
    c->stats.tx_bytes += total;
    fy_udp_frag_submit(c, f);
    return FERRY_INPROGRESS;
}

/* ---- unsequenced datagrams: handshake, probes, explicit ACKs --------------------------- */

static const uint8_t zeros[65536];

void fy_udp_ctrl_hdr(const fy_udp_conn_t *c, uint8_t type, fy_udp_hdr_t *h)
{
    memset(h, 0, sizeof(*h));
    h->job_key = c->peer_key;
    h->dst_id = c->peer_id;
    h->src_id = c->id;
    h->type = type;
    h->version = FY_UDP_VERSION;
}

void fy_udp_tx_ctrl(fy_udp_iface_t *iface, fy_udp_conn_t *c, uint8_t chan, uint8_t type,
                    const void *payload, size_t plen, size_t pad_to,
                    const struct sockaddr_storage *to, socklen_t tolen)
{
    fy_udp_chan_t *ch;
    struct iovec *iov;
    struct mmsghdr *m = batch_slot(iface, chan, 2, &iov);
    fy_udp_hdr_t h;
    unsigned n = 1;

    ch = &iface->ch[chan];
    fy_udp_ctrl_hdr(c, type, &h);
    h.seq = c->snd_nxt;
    if (pad_to < FY_UDP_HDR_LEN + plen)
        pad_to = FY_UDP_HDR_LEN + plen;
    h.len = (uint32_t)(pad_to - FY_UDP_HDR_LEN);
    h.tsval = fy_udp_ts(iface->now);
    if (type == FY_UDP_T_ACK) {
        h.flags = FY_UDP_F_ACK | (c->dsack_pending ? FY_UDP_F_DSACK : 0) |
                  (c->ts_echo_chan == FY_UDP_CH_DATA ? FY_UDP_F_ECHO_DATA : 0);
        h.ack = c->rcv_nxt;
        h.sack = c->nstash ? fy_udp_sack_bits(c) : 0;
        h.tsecr = c->ts_echo;
        c->ts_echo = 0;
        c->dsack_pending = 0;
        uint32_t rwnd = fy_udp_rwnd_kib(iface);
        if (rwnd != 0) { /* our socket dropped: the peer must slow down (udp_rx.c) */
            h.flags |= FY_UDP_F_RWND;
            h.seq = rwnd;
        }
    }
    uint8_t *buf = ch->thdr[ch->ntx];
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + FY_UDP_HDR_LEN, payload, plen);
    iov[0].iov_base = buf;
    iov[0].iov_len = FY_UDP_HDR_LEN + plen;
    if (pad_to > FY_UDP_HDR_LEN + plen) {
        iov[1].iov_base = (void *)zeros;
        iov[1].iov_len = pad_to - FY_UDP_HDR_LEN - plen;
        n = 2;
    }
    batch_commit(iface, chan, m, iov, n, to, tolen, NULL, c);
}
