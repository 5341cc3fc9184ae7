/*
 * udp_rx.c - the receive path: every datagram is checked before anything in it is trusted,
 * then sequenced segments are processed strictly in sequence order.
 *
 * Checks, in order, each failure counted and the datagram dropped.  A control message (the
 * long header): not truncated, at least a header, the job key, the version, a length field
 * that adds up to the datagram's size, a known type, the checksum (when checksums are on),
 * for an ACK a destination id that names one of our connections and a source id that is
 * that connection's peer.  A data segment (the compact header): not truncated, a known type,
 * the headers its flags and type announce fit, a destination id that names one of our live
 * connections, then the check: the connection's token, or with checksums the CRC32C keyed
 * with our iface key and that token - the proof that the sender is this connection's peer
 * (a stale datagram of an earlier connection in the same slot has another id or token).
 *
 * Ordering: a segment with the expected sequence number is processed at once; one held
 * already is a duplicate (a resend: its ACK was lost, ACK at once; a copy of a first send
 * the network made asks nothing); a newer one within the window is kept in the connection's
 * stash - the receive buffer itself, no copy - and ACKed with the SACK bits, which tells the
 * sender about the hole (at once when it opens one; udp_ack.c, fy_udp_ack_ooo, says when
 * else; one that came early, having overtaken the ones before it, not at all: udp_sack.c).
 * Each ACK echoes the send time (tsval) of the segment it answers, never of a duplicate; a
 * resend held already sets F_DSACK on the next ACK.  When the hole is filled the stash
 * drains in order.  Because processing is in order, the chunks of one fragment arrive one
 * after the other, so reassembly is a single running buffer per connection and every offset
 * is checked against what came before.
 *
 * The fast receive path of the notes: an in-order AM is handed to the handler before the
 * ACK it carries is processed; that bookkeeping (freeing ACKed segments, timers) runs at the
 * start of the next pass (fy_udp_ack_settle_now), after the application's answer.  ACKs of
 * received data are delayed (udp_ack.c: fy_udp_send_acks) so they can ride on the reply.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"

static fy_udp_rxbuf_t *rxbuf_get(fy_udp_chan_t *ch, uint8_t chan)
{
    fy_udp_rxbuf_t *b = fy_mpool_get(&ch->rxpool);
    if (b != NULL)
        b->chan = chan;
    return b;
}

/* The headers before a placed chunk's data: a later chunk's, and a fragment's first one's
 * (neither with an ACK block: a chunk that carries one is not the predicted datagram). */
#define PLACE_HDR       (FY_UDP_DHDR_LEN + FY_UDP_AMCHUNK_LEN)
#define PLACE_HDR0      (FY_UDP_DHDR_LEN + FY_UDP_AMFIRST_LEN)
#define NOT_PLACED      UINT64_MAX
#define PLACE_MIN_BATCH (FY_UDP_BATCH / 2) /* fewer placed slots: the batch takes all */

/* Read a data segment's header into its decoded form (udp_proto.h: src_id = aux, csum =
 * check, len = the bytes from the type header on).  Returns the offset of the type header,
 * or 0 when the datagram is too short for the headers its flags and type announce. */
static inline __attribute__((always_inline)) size_t dseg_decode(const uint8_t *d, size_t len,
                                                                fy_udp_hdr_t *h)
{
    fy_udp_dhdr_t dh;
    size_t off = FY_UDP_DHDR_LEN, xl;
    int first = 0;
    if (len < FY_UDP_DHDR_LEN)
        return 0;
    memcpy(&dh, d, sizeof(dh));
    memset(h, 0, sizeof(*h));
    h->type = dh.type;
    h->flags = dh.flags;
    h->src_id = dh.aux;
    h->dst_id = dh.dst_id;
    h->csum = dh.check;
    h->seq = dh.seq;
    h->tsval = dh.tsval;
    if (dh.flags & FY_UDP_F_ACK) {
        fy_udp_dack_t a;
        if (len < off + sizeof(a))
            return 0;
        memcpy(&a, d + off, sizeof(a));
        h->ack = a.ack;
        h->sack = a.sack;
        h->tsecr = a.tsecr;
        off += sizeof(a);
    }
    if (dh.type == FY_UDP_T_AM_CHUNK) {
        uint32_t o;
        if (len < off + sizeof(o))
            return 0;
        memcpy(&o, d + off, sizeof(o));
        first = o == 0;
    }
    xl = fy_udp_xhdr_len(dh.type, first);
    if (len < off + xl)
        return 0;
    if (dh.type == FY_UDP_T_AM)
        h->am_id = d[off + offsetof(fy_udp_am_t, am_id)];
    else if (first)
        h->am_id = d[off + offsetof(fy_udp_amfirst_t, am_id)];
    h->len = (uint32_t)(len - off);
    return off;
}

/* An AM_CHUNK's type header in the common chunk form; *xl: its length.  A later chunk
 * carries no size: the fragment's, as its first chunk gave it. */
static void amchunk_read(const fy_udp_conn_t *c, const fy_udp_hdr_t *h, const uint8_t *p,
                         fy_udp_chunk_t *ch, size_t *xl)
{
    uint32_t off, total;
    memcpy(&off, p, sizeof(off));
    memset(ch, 0, sizeof(*ch));
    ch->op_id = h->src_id;
    ch->offset = off;
    if (off == 0) {
        memcpy(&total, p + offsetof(fy_udp_amfirst_t, total), sizeof(total));
        ch->total = total;
        *xl = FY_UDP_AMFIRST_LEN;
    } else {
        ch->total = c->rx_total;
        *xl = FY_UDP_AMCHUNK_LEN;
    }
}

static void post(fy_udp_chan_t *ch, unsigned i)
{
    ch->riov[i][0].iov_base = ch->posted[i]->data;
    ch->riov[i][0].iov_len = ch->mtu;
    ch->place_off[i] = NOT_PLACED;
    memset(&ch->rmsg[i].msg_hdr, 0, sizeof(ch->rmsg[i].msg_hdr));
    ch->rmsg[i].msg_hdr.msg_iov = ch->riov[i];
    ch->rmsg[i].msg_hdr.msg_iovlen = 1;
    ch->rmsg[i].msg_hdr.msg_name = &ch->rname[i];
    ch->rmsg[i].msg_hdr.msg_namelen = sizeof(ch->rname[i]);
    ch->rmsg[i].msg_hdr.msg_control = ch->rcbuf[i];
    ch->rmsg[i].msg_hdr.msg_controllen = sizeof(ch->rcbuf[i]);
}

/* A slot that receives the next chunk of a large AM straight into its reassembly buffer:
 * the headers land in the slot's buffer, the data at dst, anything longer (another
 * datagram than predicted) after the headers in the slot's buffer. */
static void post_placed(fy_udp_chan_t *ch, unsigned i, uint8_t *dst, uint64_t off, uint32_t len,
                        uint32_t frag, uint64_t max)
{
    uint16_t hl = off == 0 ? PLACE_HDR0 : PLACE_HDR;
    post(ch, i);
    ch->riov[i][0].iov_len = hl;
    ch->riov[i][1].iov_base = dst;
    ch->riov[i][1].iov_len = len;
    ch->riov[i][2].iov_base = ch->posted[i]->data + hl + len;
    ch->riov[i][2].iov_len = ch->mtu - hl - len;
    ch->rmsg[i].msg_hdr.msg_iovlen = 3;
    ch->place_off[i] = off;
    ch->place_len[i] = len;
    ch->place_frag_of[i] = frag & 0xffff;
    ch->place_max[i] = max;
    ch->place_hlen[i] = hl;
}

/* Lay out every slot of the data channel: placed for the conn whose large AMs are arriving
 * (a bulk transfer: one copy less) - the rest of the current one into its buffer, then the
 * next one into the other buffer, as far as that buffer goes - and plain otherwise. */
static void repost_all(fy_udp_iface_t *iface, fy_udp_chan_t *ch)
{
    fy_udp_conn_t *c = ch->place_hint;
    unsigned i = 0;

    ch->place_conn = NULL;
    if (c != NULL && iface->opts->place && fy_udp_conn_alive(c) && c->rx_chunk != 0 &&
        c->rx_chunk0 != 0 && PLACE_HDR0 + c->rx_chunk <= ch->mtu) {
        uint64_t C = c->rx_chunk, off, l;
        for (off = c->rx_got; c->rx_active && i < FY_UDP_BATCH && off < c->rx_total; i++, off += C)
            post_placed(ch, i, c->rx_buf + off, off, (uint32_t)FY_MIN(C, c->rx_total - off),
                        c->rx_frag_id, UINT64_MAX);
        uint8_t *nb = c->rx_bufs[c->rx_cur ^ 1];
        uint64_t cap = c->rx_caps[c->rx_cur ^ 1];
        /* (the next fragment's first chunk has the longer header, so less data) */
        for (off = 0; nb != NULL && i < FY_UDP_BATCH && off < cap; i++, off += l) {
            l = off == 0 ? c->rx_chunk0 : C;
            post_placed(ch, i, nb + off, off, (uint32_t)FY_MIN(l, cap - off), c->rx_frag_id + 1,
                        cap);
        }
        if (i != 0)
            ch->place_conn = c;
    }
    /* A batch takes only the placed slots when there are enough of them: a datagram of a
     * third AM (after the rest of the current one and the whole next one) would land in a
     * plain slot and cost a copy more - 13-18% of a 1 MiB AM stream's chunks whenever
     * the receiver had a backlog, which is when it can least afford one. */
    ch->rx_vlen = i >= PLACE_MIN_BATCH ? i : FY_UDP_BATCH;
    for (; i < FY_UDP_BATCH; i++)
        post(ch, i);
}

void fy_udp_rx_unplace(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    fy_udp_chan_t *ch = &iface->ch[FY_UDP_CH_DATA];
    if (ch->place_hint == c)
        ch->place_hint = NULL;
    if (ch->place_conn == c)
        repost_all(iface, ch);
}

/* After a receive into placed slots: is slot i the predicted chunk (its data is in place)?
 * If not, move the part that went to the reassembly buffer back into the slot's buffer, so
 * the datagram is whole there and goes the ordinary way.  Only a fragment's first chunk
 * says its size: a later chunk of the next fragment is taken in place only after that
 * fragment's first chunk was, in this batch (*first_ok), and fitted the buffer. */
static int placed_check(fy_udp_chan_t *ch, unsigned i, size_t len, int mflags, int *first_ok)
{
    const uint8_t *d = ch->posted[i]->data;
    size_t hl = ch->place_hlen[i];
    if (len == hl + ch->place_len[i] && !(mflags & MSG_TRUNC)) {
        fy_udp_dhdr_t h;
        fy_udp_amfirst_t k = {0};
        memcpy(&h, d, sizeof(h));
        memcpy(&k, d + FY_UDP_DHDR_LEN, hl - FY_UDP_DHDR_LEN);
        if (h.type == FY_UDP_T_AM_CHUNK && !(h.flags & FY_UDP_F_ACK) &&
            h.dst_id == ch->place_conn->id && h.aux == ch->place_frag_of[i] &&
            k.offset == ch->place_off[i] && (k.offset == 0) == (hl == PLACE_HDR0) &&
            (k.offset == 0 ? k.total <= ch->place_max[i]
                           : ch->place_max[i] == UINT64_MAX || *first_ok)) {
            if (k.offset == 0)
                *first_ok = 1;
            return 1;
        }
    }
    if (len > hl)
        memcpy(ch->posted[i]->data + hl, ch->riov[i][1].iov_base,
               FY_MIN(len - hl, (size_t)ch->place_len[i]));
    return 0;
}

ferry_status_t fy_udp_chan_rx_init(fy_udp_iface_t *iface, uint8_t chan)
{
    fy_udp_chan_t *ch = &iface->ch[chan];
    size_t stash = chan == FY_UDP_CH_DATA
                       ? FY_MIN((size_t)iface->wsize, FY_MAX((size_t)64, (32u << 20) / ch->mtu))
                       : (size_t)iface->wsize;
    ferry_status_t st;

    /* The kernel then tells with each datagram how many its socket dropped (full). */
    int one = 1;
    setsockopt(ch->fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
    ch->ovfl_seen = 0;
    ch->rx_vlen = FY_UDP_BATCH;
    ch->rxpool_max = FY_UDP_BATCH + stash;
    st = fy_mpool_init(&ch->rxpool, chan ? "udp data rx" : "udp prio rx",
                       sizeof(fy_udp_rxbuf_t) + ch->mtu, 64, FY_UDP_BATCH, ch->rxpool_max);
    if (st != FERRY_OK)
        return st;
    for (unsigned i = 0; i < FY_UDP_BATCH; i++) {
        ch->posted[i] = rxbuf_get(ch, chan);
        if (ch->posted[i] == NULL)
            return FERRY_ERR_NO_MEMORY;
        post(ch, i);
    }
    return FERRY_OK;
}

void fy_udp_chan_rx_fini(fy_udp_iface_t *iface, uint8_t chan)
{
    fy_udp_chan_t *ch = &iface->ch[chan];
    if (ch->rxpool.elem_size == 0)
        return;
    for (unsigned i = 0; i < FY_UDP_BATCH; i++)
        if (ch->posted[i] != NULL)
            fy_mpool_put(&ch->rxpool, ch->posted[i]);
    fy_mpool_destroy(&ch->rxpool);
}

/* ---- processing of one in-order segment ------------------------------------------------ */

/* Structural checks that need the connection's state; nothing is changed. */
static int valid_in_order(fy_udp_conn_t *c, const fy_udp_hdr_t *h, const uint8_t *p, size_t plen)
{
    fy_udp_chunk_t ch;
    size_t xl = fy_udp_xhdr_len(h->type, 1), dlen = plen - xl;

    switch (h->type) {
    case FY_UDP_T_AM:
        return h->am_id <= FY_TL_AM_ID_MAX;
    case FY_UDP_T_AM_CHUNK:
        amchunk_read(c, h, p, &ch, &xl);
        dlen = plen - xl;
        if (ch.total > c->iface->opts->max_zcopy || ch.offset > ch.total ||
            dlen > ch.total - ch.offset || (dlen == 0 && ch.total != 0))
            return 0;
        if (ch.offset == 0)
            return h->am_id <= FY_TL_AM_ID_MAX && !c->rx_active;
        return c->rx_active && ch.op_id == c->rx_frag_id && ch.offset == c->rx_got;
    case FY_UDP_T_PUT:
        memcpy(&ch, p, sizeof(ch));
        return ch.offset <= ch.total && dlen <= ch.total - ch.offset &&
               (dlen != 0 || ch.total == 0);
    case FY_UDP_T_GET_REQ:
    case FY_UDP_T_RMA_DONE:
        return 1;
    case FY_UDP_T_GET_RESP:
        memcpy(&ch, p, sizeof(ch));
        return ch.offset <= ch.total && dlen <= ch.total - ch.offset &&
               (dlen != 0 || ch.total == 0);
    default:
        return 0;
    }
}

/* Reassembly of a large AM: returns 1 when complete. */
static int rx_chunk(fy_udp_conn_t *c, const fy_udp_hdr_t *h, const uint8_t *p, size_t plen,
                    int placed)
{
    fy_udp_chunk_t ch;
    fy_udp_chan_t *data = &c->iface->ch[FY_UDP_CH_DATA];
    size_t xl, dlen;
    amchunk_read(c, h, p, &ch, &xl);
    dlen = plen - xl;
    if (ch.offset == 0) {
        unsigned idx = c->rx_cur ^ 1u;
        if (ch.total > c->rx_caps[idx]) {
            /* (a chunk placed into this buffer had total <= its size: none is lost here;
             * the slots are laid out anew below or at the end of the data batch) */
            uint8_t *nb = malloc(ch.total ? ch.total : 1);
            if (nb == NULL)
                return -1;
            free(c->rx_bufs[idx]);
            c->rx_bufs[idx] = nb;
            c->rx_caps[idx] = ch.total;
        }
        c->rx_cur = (uint8_t)idx;
        c->rx_buf = c->rx_bufs[idx];
        c->rx_active = 1;
        c->rx_frag_id = ch.op_id;
        c->rx_total = ch.total;
        c->rx_got = 0;
        c->rx_am_id = h->am_id;
        c->rx_chunk0 = (uint32_t)dlen;
    } else if (c->rx_got + dlen < c->rx_total) {
        c->rx_chunk = (uint32_t)dlen; /* (a later chunk but the last: the full size) */
    }
    if (dlen != 0 && !placed) {
        memcpy(c->rx_buf + c->rx_got, p + xl, dlen);
        c->rx_copied++;
    }
    c->rx_got += dlen;
    /* Posted slots may point only at space not yet filled.  Within a data batch the
     * slots are laid out anew at its end; a chunk taken elsewhere (the stash drained by a
     * priority-channel arrival) must do it now, or the next receive could land on it. */
    if (data->place_conn == c && !c->iface->in_data_rx) {
        data->place_hint = c;
        repost_all(c->iface, data);
    }
    if (c->rx_got < c->rx_total) {
        data->place_hint = c;
        return 0;
    }
    c->rx_active = 0; /* (the hint stays: the next AM may come in place) */
    return 1;
}

/* Process the in-order segment h (seq == rcv_nxt).  Returns 0 when it was malformed (and
 * dropped without consuming its sequence number). */
static int process(fy_udp_iface_t *iface, fy_udp_conn_t *c, const fy_udp_hdr_t *h, const uint8_t *p,
                   size_t plen, int placed)
{
    fy_tl_iface_params_t *prm = &iface->super.params;
    size_t xl = fy_udp_xhdr_len(h->type, 1);
    ferry_status_t st = FERRY_OK;

    if (!valid_in_order(c, h, p, plen))
        return 0;
    switch (h->type) {
    case FY_UDP_T_AM:
        /* Fast path: the handler runs before the carried ACK is processed. */
        c->rcv_nxt++;
        fy_udp_ack_schedule(c, 0, plen);
        c->stats.rx_msgs++;
        c->stats.rx_bytes += plen - xl;
        iface->events++;
        prm->am_cb(prm->am_arg, h->am_id, p + xl, plen - xl);
        return 1;
    case FY_UDP_T_AM_CHUNK: {
        int done = rx_chunk(c, h, p, plen, placed);
        if (done < 0)
            return 0; /* no memory for reassembly: the sender will resend */
        c->rcv_nxt++;
        fy_udp_ack_schedule(c, 0, plen);
        if (done) {
            c->stats.rx_msgs++;
            c->stats.rx_bytes += c->rx_total;
            iface->events++;
            prm->am_cb(prm->am_arg, c->rx_am_id, c->rx_buf, c->rx_total);
        }
        return 1;
    }
    default:
        break;
    }
    c->rcv_nxt++;
    fy_udp_ack_schedule(c, 0, plen);
    switch (h->type) {
    case FY_UDP_T_PUT: {
        fy_udp_chunk_t ch;
        fy_udp_rma_t rma;
        memcpy(&ch, p, sizeof(ch));
        memcpy(&rma, p + sizeof(ch), sizeof(rma));
        st = fy_udp_rx_put(c, &ch, &rma, p + xl, plen - xl);
        break;
    }
    case FY_UDP_T_GET_REQ: {
        fy_udp_get_req_t g;
        memcpy(&g, p, sizeof(g));
        st = fy_udp_rx_get_req(c, &g);
        break;
    }
    case FY_UDP_T_GET_RESP: {
        fy_udp_chunk_t ch;
        memcpy(&ch, p, sizeof(ch));
        st = fy_udp_rx_get_resp(c, &ch, p + xl, plen - xl);
        break;
    }
    case FY_UDP_T_RMA_DONE: {
        fy_udp_rma_done_t d;
        memcpy(&d, p, sizeof(d));
        st = fy_udp_rx_rma_done(c, &d);
        break;
    }
    }
    if (st == FERRY_ERR_PROTOCOL)
        iface->drops_malformed++;
    return 1;
}

/* Drain the stash after rcv_nxt moved. */
static void drain(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    uint32_t mask = iface->wsize - 1;
    int drained = 0;
    while (c->nstash != 0 && fy_udp_conn_alive(c)) {
        fy_udp_rxbuf_t *b = c->stash[c->rcv_nxt & mask];
        fy_udp_hdr_t h;
        size_t off;
        if (b == NULL)
            break;
        drained |= !b->early; /* (one that overtook a queue filled no hole the peer knows) */
        fy_udp_early_unlink(c, c->rcv_nxt);
        c->stash[c->rcv_nxt & mask] = NULL;
        c->nstash--;
        off = dseg_decode(b->data, b->len, &h);
        if (off == 0 || h.seq != c->rcv_nxt || !process(iface, c, &h, b->data + off, h.len, 0)) {
            iface->drops_malformed++;
            fy_mpool_put(&iface->ch[b->chan].rxpool, b);
            break;
        }
        fy_mpool_put(&iface->ch[b->chan].rxpool, b);
    }
    if (drained)
        fy_udp_ack_schedule(c, 1, 0);
}

/* A control message (the long header).  Returns 0: its buffer is never kept. */
static int rx_ctrl(fy_udp_iface_t *iface, uint8_t chan, fy_udp_rxbuf_t *b, size_t len,
                   const struct sockaddr_storage *from)
{
    fy_udp_hdr_t h;
    const uint8_t *p = b->data + FY_UDP_HDR_LEN;

    if (len < FY_UDP_HDR_LEN) {
        iface->drops_malformed++;
        return 0;
    }
    memcpy(&h, b->data, sizeof(h));
    if (h.job_key != iface->super.params.job_key &&
        !fy_udp_reply_key_ok(iface, &h, p, len - FY_UDP_HDR_LEN)) {
        iface->drops_bad_key++;
        return 0;
    }
    if (h.version != FY_UDP_VERSION || h.len != len - FY_UDP_HDR_LEN || h.type == 0 ||
        h.type >= FY_UDP_T_FIRST_SEQ) {
        iface->drops_malformed++;
        return 0;
    }
    if ((iface->csum || (h.flags & FY_UDP_F_CSUM)) &&
        (!(h.flags & FY_UDP_F_CSUM) ||
         fy_udp_dgram_crc(0, FY_UDP_CSUM_OFFSET, b->data, NULL, len, len) != h.csum)) {
        iface->drops_csum++;
        return 0;
    }
    if (h.type != FY_UDP_T_ACK) {
        fy_udp_conn_rx_ctrl(iface, &h, p, h.len, from, chan);
        return 0;
    }
    return fy_udp_rx_ack(iface, &h, p);
}

/* Check and process one datagram.  Returns 1 when the buffer was kept (stashed).  placed:
 * where a chunk's data went (its headers, `split` bytes, are in the buffer), or NULL. */
static int rx_dgram(fy_udp_iface_t *iface, uint8_t chan, fy_udp_rxbuf_t *b, size_t len,
                    const struct sockaddr_storage *from, int mflags, const uint8_t *placed,
                    size_t split)
{
    fy_udp_hdr_t h;
    fy_udp_conn_t *c;
    const uint8_t *p;
    size_t off;

    iface->rx_dgrams++;
    fy_udp_ack_settle(iface); /* (ACKs in order) */
    if (mflags & MSG_TRUNC) {
        iface->drops_trunc++;
        return 0;
    }
    if (len == 0 || b->data[0] >= FY_UDP_T_MAX) {
        iface->drops_malformed++;
        return 0;
    }
    if (b->data[0] < FY_UDP_T_FIRST_SEQ)
        return rx_ctrl(iface, chan, b, len, from);
    off = dseg_decode(b->data, len, &h);
    if (off == 0) {
        iface->drops_malformed++;
        return 0;
    }
    c = fy_udp_conn_lookup(iface, h.dst_id);
    if (c == NULL || c->peer_id == 0 || !fy_udp_conn_alive(c)) {
        iface->drops_unknown_ep++;
        fy_udp_conn_rx_unknown(iface, &h, from); /* udp_live.c: RESET a gone connection */
        return 0;
    }
    /* The proof that the peer sent it: the token, or the checksum keyed with it. */
    if (iface->csum || (h.flags & FY_UDP_F_CSUM)) {
        if (!(h.flags & FY_UDP_F_CSUM) ||
            fy_udp_dgram_crc(fy_udp_check_seed(iface->super.params.job_key, c->token),
                             FY_UDP_D_CHECK, b->data, placed, split, len) != h.csum) {
            iface->drops_csum++; /* (a placed chunk's data is checked where it landed) */
            return 0;
        }
    } else if (h.csum != c->token) {
        iface->drops_bad_key++;
        return 0;
    }
    p = b->data + off;
    c->last_rx_ns = c->last_seg_ns = iface->now;

    int32_t d = fy_udp_seq_diff(h.seq, c->rcv_nxt);
    /* (the priority channel's small datagrams queue behind nothing of ours) */
    int sooner = chan == FY_UDP_CH_DATA &&
                 fy_udp_arrival_sooner(&c->arr, h.seq, fy_udp_ts(iface->now) - h.tsval);
    if (!sooner && c->nearly != 0)
        fy_udp_early_passed(c, h.tsval, h.seq);
    /* The echo for the RTT and RACK: the first segment since our last ACK (a delayed ACK
     * then covers the wait it caused), or one out of order that makes the ACK go at once -
     * never a duplicate (a needless resend's fresh stamp would make the sender take every
     * segment sent before it for lost). */
    if (d == 0 && !c->ack_pending) {
        c->ts_echo = h.tsval;
        c->ts_echo_chan = chan;
    }
    if (placed != NULL && (d != 0 || c != iface->ch[chan].place_conn)) {
        /* the predicted chunk, but not in order after all (one before it was lost): make
         * it whole in its own buffer for the stash */
        memcpy(b->data + split, placed, len - split);
        placed = NULL;
    }
    if (d == 0) {
        if (!process(iface, c, &h, p, h.len, placed != NULL)) {
            iface->drops_malformed++;
            return 0;
        }
        /* Deferred bookkeeping: the ACK this segment carried, then the stash.  An AM's
         * ACK waits for the next pass (fy_udp_ack_settle_now). */
        if ((h.flags & FY_UDP_F_ACK) && fy_udp_conn_alive(c)) {
            if (h.type == FY_UDP_T_AM && c->nstash == 0) {
                iface->dack_conn = c;
                iface->dack_hdr = h;
                iface->dack_ns = iface->now;
            } else {
                fy_udp_process_ack(c, &h, 0, NULL);
            }
        }
        if (c->nstash != 0)
            drain(iface, c);
        return 0;
    }
    if (h.flags & FY_UDP_F_ACK)
        fy_udp_process_ack(c, &h, 0, NULL);
    if (!fy_udp_conn_alive(c))
        return 0;
    uint32_t slot = h.seq & (iface->wsize - 1);
    if (d < 0 || ((uint32_t)d < iface->wsize && c->stash != NULL && c->stash[slot] != NULL)) {
        /* Held already: our ACK was lost, or the resend was needless (DSACK: only a copy
         * marked as a resend says so - a network duplicate of a first send is no news
         * about the sender's reorder window).  A resend is ACKed again at once; a network
         * duplicate of a first send asks nothing (with 5% duplicates through the impaired
         * link these immediate ACKs were a sixth of all ACKs, and the link carries them). */
        int resent = (h.flags & FY_UDP_F_RESENT) != 0;
        c->stats.drops_duplicate++;
        c->dsack_pending |= resent;
        if (resent)
            fy_udp_ack_schedule(c, 1, 0);
        return 0;
    }
    /* Early: out of order and sooner than the flow (arrival_sooner) - it overtook a queue
     * the segments sent before it are still waiting in, so the hole below it is no sign of
     * loss.  Its send time is not echoed (RACK would take everything sent before it for
     * lost: resends of what is queued, whose DSACKs then grow the reorder window to its
     * cap), and no ACK leaves for it at once. */
    int early = sooner && (uint32_t)d < iface->wsize;
    fy_udp_ack_ooo(c, &h, (uint32_t)d, early);
    if ((uint32_t)d >= iface->wsize) {
        iface->drops_window++;
        return 0;
    }
    if (c->stash == NULL) {
        c->stash = calloc(iface->wsize, sizeof(*c->stash));
        if (c->stash == NULL)
            return 0;
    }
    fy_udp_chan_t *ch = &iface->ch[chan];
    /* Keep a batch of buffers for receiving whatever the stash holds. */
    if (ch->rxpool.in_use + FY_UDP_BATCH >= ch->rxpool_max) {
        iface->drops_stash++;
        return 0;
    }
    b->len = (uint32_t)len;
    b->early = 0;
    c->stash[slot] = b;
    if (early)
        fy_udp_early_add(c, b, h.seq);
    if (!early) {
        c->ts_echo = h.tsval;
        c->ts_echo_chan = chan;
    }
    if (c->nstash++ == 0 || fy_udp_seq_diff(h.seq, c->stash_top) > 0)
        c->stash_top = h.seq;
    return 1;
}

/* Receiver-driven flow control.  Our socket dropped datagrams: its buffer was full - a
 * receiver that did not read in time (the application did not call progress, too many
 * peers at once; the kernel charges a small datagram more than the credits count).  Those
 * datagrams come back as resends; so that the next ones are not dropped too, the window
 * we advertise to our peers (explicit ACKs, F_RWND) is halved - at most once per
 * RWND_STEP, down to credit / 64 - and grows back by an eighth per RWND_CALM without a
 * drop (a receiver's pace is a property of the application, not a passing queue: it comes
 * back slowly).  Socket drops cannot be charged to one peer: every peer gets the same. */
#define RWND_STEP (2 * FY_NSEC_PER_MSEC)
#define RWND_CALM (250 * FY_NSEC_PER_MSEC)

static void rx_socket_drops(fy_udp_iface_t *iface, fy_udp_chan_t *ch, const struct msghdr *mh)
{
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL;
         cm = CMSG_NXTHDR((struct msghdr *)mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SO_RXQ_OVFL ||
            cm->cmsg_len < CMSG_LEN(sizeof(uint32_t)))
            continue;
        uint32_t v, d;
        memcpy(&v, CMSG_DATA(cm), sizeof(v));
        d = v - ch->ovfl_seen; /* the kernel's count is cumulative (and wraps) */
        ch->ovfl_seen = v;
        if (d == 0 || d > INT32_MAX)
            continue;
        iface->drops_sock += d;
        if (iface->rwnd == 0 || iface->now - iface->rwnd_ns >= RWND_STEP) {
            uint64_t w = iface->rwnd != 0 ? iface->rwnd : iface->credit;
            iface->rwnd = FY_MAX(w / 4, iface->credit / 64);
            iface->rwnd_ns = iface->now;
        }
    }
}

uint32_t fy_udp_rwnd_kib(fy_udp_iface_t *iface)
{
    if (iface->rwnd == 0)
        return 0;
    if (iface->now - iface->rwnd_ns >= RWND_CALM) {
        iface->rwnd += iface->rwnd / 8;
        iface->rwnd_ns = iface->now;
        if (iface->rwnd >= iface->credit) {
            iface->rwnd = 0;
            return 0;
        }
    }
    return (uint32_t)FY_MAX(FY_MIN(iface->rwnd >> 10, (uint64_t)UINT32_MAX), (uint64_t)1);
}

/* One datagram or none, into slot 0 (a plain slot): the poll of a latency-bound exchange,
 * which a busy-polling worker makes once per progress pass, found empty most times.
 * recvfrom skips what recvmsg costs the kernel on every call, found or not - copying in the
 * message header and importing its iovec: an empty poll ~0.9 -> ~0.7 us on this project's
 * VM.  It brings no control message, so the socket's drop count (SO_RXQ_OVFL) is read by the
 * batch receive; a socket drops only when a backlog fills it, and a backlog switches to the
 * batch receive within two polls (last_batch).  MSG_TRUNC returns a longer datagram's real
 * length, so a truncation is seen as with recvmsg. */
static int rx_one(fy_udp_chan_t *ch)
{
    struct msghdr *mh = &ch->rmsg[0].msg_hdr;
    socklen_t nl = sizeof(ch->rname[0]);
    ssize_t r = recvfrom(ch->fd, ch->posted[0]->data, ch->mtu, MSG_DONTWAIT | MSG_TRUNC,
                         (struct sockaddr *)&ch->rname[0], &nl);
    if (r < 0)
        return -1;
    ch->rmsg[0].msg_len = (unsigned)FY_MIN((size_t)r, (size_t)ch->mtu);
    mh->msg_flags = (size_t)r > ch->mtu ? MSG_TRUNC : 0;
    mh->msg_namelen = nl;
    mh->msg_controllen = 0; /* (post() gives the slot its control buffer back) */
    return 1;
}

static unsigned rx_batch(fy_udp_iface_t *iface, uint8_t chan, int n);

unsigned fy_udp_rx_progress(fy_udp_iface_t *iface, uint8_t chan)
{
    fy_udp_chan_t *ch = &iface->ch[chan];
    int n;

    /* recvmmsg costs more than recvmsg when a single datagram (or none) is waiting, as in
     * a ping-pong: batch only while the last poll found more than one. */
    ch->rx_full = 0;
    if (ch->last_batch > 1) {
        n = recvmmsg(ch->fd, ch->rmsg, ch->rx_vlen, MSG_DONTWAIT, NULL);
        ch->rx_full = n == (int)ch->rx_vlen;
    } else if (ch->place_off[0] == NOT_PLACED) {
        n = rx_one(ch);
    } else {
        ssize_t r = recvmsg(ch->fd, &ch->rmsg[0].msg_hdr, MSG_DONTWAIT);
        n = r < 0 ? -1 : 1;
        if (r >= 0)
            ch->rmsg[0].msg_len = (unsigned)r;
        else if (errno != EAGAIN && errno != EWOULDBLOCK)
            n = -1;
    }
    if (n <= 0) {
        ch->idle++;
        ch->last_batch = 0;
        return 0;
    }
    return rx_batch(iface, chan, n);
}

/* What a poll found: n datagrams in the first slots.  Apart from the poll, so that an empty
 * poll - what a busy-polling worker mostly makes - does not pay for this one's frame. */
static __attribute__((noinline)) unsigned rx_batch(fy_udp_iface_t *iface, uint8_t chan, int n)
{
    fy_udp_chan_t *ch = &iface->ch[chan];
    /* A single recvmsg that found one datagram: maybe a burst is waiting. */
    ch->last_batch = n > 1 || ch->last_batch == 1 ? (unsigned)n + (n == 1) : 1;
    ch->idle = 0;
    /* The pass's clock, read just before this poll, when nothing ran since: one clock read
     * less between a datagram's arrival and its answer. */
    if (!iface->now_fresh)
        iface->now = fy_time_ns();
    iface->now_fresh = 0;
    unsigned lens[FY_UDP_BATCH];
    int flags[FY_UDP_BATCH];
    const uint8_t *placed[FY_UDP_BATCH];
    size_t split[FY_UDP_BATCH];
    int first_ok = 0;
    int was_placed = ch->place_conn != NULL;
    if (ch->rmsg[n - 1].msg_hdr.msg_controllen != 0) /* (only once the socket dropped) */
        rx_socket_drops(iface, ch, &ch->rmsg[n - 1].msg_hdr);
    for (int i = 0; i < n; i++) {
        lens[i] = ch->rmsg[i].msg_len;
        flags[i] = ch->rmsg[i].msg_hdr.msg_flags;
        placed[i] = NULL;
        split[i] = 0;
        if (ch->place_off[i] != NOT_PLACED &&
            placed_check(ch, (unsigned)i, lens[i], flags[i], &first_ok)) {
            placed[i] = ch->riov[i][1].iov_base;
            split[i] = ch->place_hlen[i];
        }
    }
    iface->in_data_rx = chan == FY_UDP_CH_DATA;
    for (int i = 0; i < n; i++) {
        if (rx_dgram(iface, chan, ch->posted[i], lens[i], &ch->rname[i], flags[i], placed[i],
                     split[i])) {
            fy_udp_rxbuf_t *nb = rxbuf_get(ch, chan);
            /* The stash keeps a reserve free, so this does not fail but for memory. */
            if (nb == NULL) {
                fy_udp_conn_t *c = NULL;
                fy_udp_hdr_t h = {0};
                dseg_decode(ch->posted[i]->data, lens[i], &h); /* (checked: it was stashed) */
                c = fy_udp_conn_lookup(iface, h.dst_id);
                if (c != NULL && c->stash != NULL) {
                    fy_udp_early_unlink(c, h.seq);
                    c->stash[h.seq & (iface->wsize - 1)] = NULL;
                    c->nstash--;
                }
            } else {
                ch->posted[i] = nb;
            }
        }
        if (!was_placed)
            post(ch, i);
    }
    iface->in_data_rx = 0;
    if (chan == FY_UDP_CH_DATA && (was_placed || ch->place_hint != NULL))
        repost_all(iface, ch);
    return (unsigned)n;
}
