/*
 * udp_handshake.c - how a connection opens: the handshake, the path check before first use,
 * and asking whether the far end of a connection taken up again still lives.
 *
 * Handshake (lazy: ep_create returns at once, sends queue until it completes):
 *   initiator                                 responder
 *   CONN_REQ (prio) ------------------------> find (uuid, src id) or adopt a connection of
 *                                              its own to that uuid still unanswered, or
 *                                              create a passive one
 *            <------------------------------- CONN_ACK (its id, window, credit, sizes)
 *   PROBE (data, full segment size) --------> known sender?
 *            <------------------------------- PROBE_ACK (the size that arrived)
 * Both are resent on a hotel timer until answered (first after 1.5 x the iface's recent
 * handshake time, 5-100 ms, then doubling).  When CONN_ACK comes back but the full-
 * size PROBE never does, small datagrams pass and large ones die: an MTU mismatch on the
 * path.  That is logged as such and the probe falls back to smaller sizes (9000-, 1500-
 *
 * byte paths, then 576), so the connection works at a size the path carries.  No answer at
 * all within FERRY_UDP_PEER_TIMEOUT: the ep fails (err_cb, FERRY_ERR_UNREACHABLE).
 *
 * Only a requester that echoes our cookie (udp_live.c: a keyed hash of its address, uuid
 * and id) creates state here, as SYN cookies do, and at most FERRY_UDP_MAX_PASSIVE passive
 * connections wait to be taken up: forged requests cost a COOKIE each and nothing kept.
 *
 *
 * When proto creates an ep to a remote iface that already opened a connection to us (a
 * Taking up a connection whose far end may have gone meanwhile (one we kept, or a passive one
 * long silent) first asks the peer under the connection's own ids: its end answers (go on),
 * or the peer has none (COOKIE: the stream starts again) or a failed one (RESET: a new id,
 * connect afresh).  docs/udp.md, Connection set-up and Close.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"

#define CONN_RETRY_NS     (5 * FY_NSEC_PER_MSEC)
#define CONN_RETRY_MAX_NS (100 * FY_NSEC_PER_MSEC)
#define PROBE_TRIES       8
#define COOKIE_EPOCH_NS   (16 * FY_NSEC_PER_SEC)
/* A passive connection that heard from its peer this recently is taken up without asking
 * whether the peer's end lives (the usual case: the reply ep made for the peer's first AM). */
#define ADOPT_FRESH_NS (100 * FY_NSEC_PER_MSEC)

/* A fresh connection token: every data segment to this end must carry it (or a checksum
 * keyed with it), so a datagram of an earlier connection in the same slot, or of the
 * peer's end before it restarted, is refused.  Drawn again whenever the stream may start
 * anew (a new connection, a renewed id, a verification); the peer takes it from our next
 * CONN_REQ / CONN_ACK, and the check is written at each transmission. */
static void new_token(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    uint32_t t = 0;
    if (getrandom(&t, sizeof(t), GRND_NONBLOCK) != sizeof(t))
        t = (uint32_t)fy_udp_cookie(iface, &c->addr[FY_UDP_CH_PRIO], c->peer_uuid, c->id,
                                    fy_time_ns()); /* (keyed: as unguessable) */
    c->token = t;
}

static void conn_msg_fill(fy_udp_iface_t *iface, fy_udp_conn_t *c, fy_udp_conn_msg_t *m,
                          uint32_t probe_size)
{
    memset(m, 0, sizeof(*m));
    m->uuid = iface->uuid;
    m->prio_port = iface->ch[FY_UDP_CH_PRIO].port;
    m->data_port = iface->ch[FY_UDP_CH_DATA].port;
    m->window = (uint32_t)iface->opts->window;
    m->seg_size = c->seg_size;
    m->prio_mtu = (uint32_t)iface->opts->prio_mtu;
    m->credit = iface->credit;
    m->probe_size = probe_size;
    m->live_port = iface->live_port;
    m->cookie = c->cookie;
    m->key = iface->super.params.job_key;
    m->token = c->token;
}

static void apply_peer(fy_udp_conn_t *c, const fy_udp_conn_msg_t *m)
{
    const fy_udp_opts_t *o = c->iface->opts;
    c->wnd = (uint32_t)FY_MIN((unsigned long)m->window, o->window);
    if (c->wnd == 0)
        c->wnd = 1;
    c->credit = FY_MIN((uint64_t)o->credit, m->credit);
    c->peer_token = m->token;
    c->prio_mtu = (uint32_t)FY_MIN((size_t)m->prio_mtu, o->prio_mtu);
    if (m->seg_size >= 576 && m->seg_size < c->seg_size)
        c->seg_size = m->seg_size;
    c->peer_live_port = m->live_port;
}
static void send_handshake(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    fy_udp_conn_msg_t m;
    /* Beside every probe a small request: its answer, coming back while the probe's does
     * not, is what tells an MTU mismatch from a peer that is only slow to answer (a
     * priority channel backed up behind data). */
    if (!c->got_conn_ack || !c->got_probe_ack) {
        conn_msg_fill(iface, c, &m, 0);
        fy_udp_tx_ctrl(iface, c, FY_UDP_CH_PRIO, FY_UDP_T_CONN_REQ, &m, sizeof(m), 0,
                       &c->addr[FY_UDP_CH_PRIO], c->addrlen);
    }
    if (!c->got_probe_ack) {
        conn_msg_fill(iface, c, &m, c->probe_size);
        fy_udp_tx_ctrl(iface, c, FY_UDP_CH_DATA, FY_UDP_T_PROBE, &m, sizeof(m), c->probe_size,
                       &c->addr[FY_UDP_CH_DATA], c->addrlen);
    }
    fy_udp_tx_flush_all(iface);
    c->conn_last_tx = fy_time_ns();
    /* The first retry waits half as long again as this iface's recent handshakes took (5 ms
     * at least, 100 ms at most), then twice as long each time, up to 100 ms: a peer that
     * answers only slowly (busy: 512 handshakes under way at once in
     * tests/udp/test_udp_scale.c took ~250 ms each on a loaded machine) is not asked 6-7
     * times over for each, every question costing it a wake-up and two answers; and not
     * just when its answer is due.  A quiet link keeps 5 ms. */
    uint64_t base = FY_MIN(FY_MAX((uint64_t)CONN_RETRY_NS, iface->hs_time + iface->hs_time / 2),
                           (uint64_t)CONN_RETRY_MAX_NS);
    uint64_t stay = base << FY_MIN(c->conn_tries, 5u);
    fy_hotel_checkin(&iface->hotel, &c->conn_timer.room, FY_MIN(stay, CONN_RETRY_MAX_NS),
                     c->conn_last_tx);
}

/* Handshakes are paced per iface: at most FY_UDP_HS_WINDOW under way, the rest queued in
 * order.  A process that opens thousands of connections at once (10,000 endpoints in one
 * process, tests/udp/test_udp_scale.c) otherwise sends a request and a full-size probe to
 * every peer together, and every answer comes back together: on a loaded machine the
 * priority socket overflowed (hundreds of thousands of drops), each lost answer brought its
 * retry, and the retries starved the receive that would have read the answers - handshakes
 * and heartbeats (whose answers were dropped too) failed after PEER_TIMEOUT.  A queued
 * handshake's deadline starts when it does. */
static void hs_begin(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    if (!c->hs_slot) {
        if (iface->hs_active >= FY_UDP_HS_WINDOW || !fy_list_is_empty(&iface->hs_wait)) {
            if (!fy_list_is_linked(&c->hs_link)) {
                fy_list_add_tail(&iface->hs_wait, &c->hs_link);
                iface->hs_waited++;
            }
            return;
        }
        c->hs_slot = 1;
        iface->hs_active++;
    }
    send_handshake(iface, c);
}

void fy_udp_hs_end(fy_udp_conn_t *c)
{
    fy_hotel_checkout(&c->iface->hotel, &c->conn_timer.room);
    fy_list_del(&c->hs_link);
    if (c->hs_slot) {
        c->hs_slot = 0;
        c->iface->hs_active--;
    }
}

void fy_udp_hs_admit(fy_udp_iface_t *iface)
{
    fy_list_t *e;
    while (iface->hs_active < FY_UDP_HS_WINDOW && (e = fy_list_pop_head(&iface->hs_wait)) != NULL) {
        fy_udp_conn_t *c = fy_container_of(e, fy_udp_conn_t, hs_link);
        c->hs_slot = 1;
        iface->hs_active++;
        c->conn_start = fy_time_ns(); /* (its wait was no silence of the peer's) */
        c->conn_tries = 0;
        send_handshake(iface, c);
    }
}

/* An adopted connection whose peer end is not known to live: its sends wait (state
 * CONNECTING) while a CONN_REQ under the connection's own ids asks the peer.  The peer's end
 * answers CONN_ACK (it lives: go on where the stream is); a peer without that end answers
 * COOKIE, then makes a new end (stream_restart), or RESET (conn_renew). */
static void verify_start(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    c->state = FY_UDP_CONN_CONNECTING;
    c->verifying = 1;
    c->got_conn_ack = 0;
    c->got_probe_ack = 1; /* the path was probed when the connection opened */
    c->probe_size = c->probe_max = c->seg_size;
    c->conn_tries = 0;
    c->small_acks = 0;
    c->conn_start = fy_time_ns();
    fy_list_del(&c->ready_link);
    new_token(iface, c);
    hs_begin(iface, c);
}

/* The peer's end of the stream is gone: what was in flight in either direction is void.
 * Queued sends (never numbered) stay and go on the new stream from sequence 0; a chunked
 * message that was part-way through starts again from its first chunk (only messages with a
 * copy of their own are ever kept across a close, see keepable()). */
static void stream_restart(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    fy_list_t *e;
    fy_udp_drop_window(c, FERRY_ERR_CONNECTION_RESET);
    fy_list_for_each(e, &c->sendq)
    {
        fy_udp_pend_t *p = fy_container_of(e, fy_udp_pend_t, link);
        if (p->kind == FY_UDP_PEND_FRAG)
            ((fy_udp_frag_t *)p)->next_off = 0;
    }
    c->snd_una = c->snd_nxt = 0;
    c->snd_high = (uint32_t)-1;
    c->cwnd = FY_UDP_CWND_INIT;
    c->rack_tx = 0;
    memset(c->rack_ch, 0, sizeof(c->rack_ch));
    c->last_tsecr = 0;
    c->resent_at = 0;
    c->rto_at = 0;
    fy_udp_cc_init(c);
    fy_udp_rx_unplace(iface, c);
    fy_udp_stash_clear(c);
    c->rx_active = 0;
    c->rcv_nxt = 0;
    c->ts_echo = 0;
    c->dsack_pending = 0;
    fy_list_del(&c->ack_link);
    c->ack_pending = c->ack_now = 0;
    c->ack_unsent = 0;
    c->ack_unsent_bytes = 0;
    c->verifying = 0;
}

/* The peer refused the adopted connection (RESET: its end failed or is gone): open a fresh
 * one in its place, under a new id so nothing of the old stream is taken for the new. */
static void conn_renew(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    uint32_t idx = c->id & 0xffff;
    char buf[FY_NETIF_ADDR_STRLEN];
    fy_debug("udp: peer %s no longer has its end of connection %08x: connecting afresh",
             fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)), c->id);
    stream_restart(c);
    fy_udp_unbind_peer(c);
    if (++iface->conn_gen[idx] == 0)
        iface->conn_gen[idx] = 1;
    c->id = ((uint32_t)iface->conn_gen[idx] << 16) | idx;
    new_token(iface, c);
    c->cookie = 0;
    c->got_conn_ack = 0;
    c->conn_tries = 0;
    c->conn_start = fy_time_ns();
    send_handshake(iface, c);
}

ferry_status_t fy_udp_ep_create(fy_tl_iface_t *tl_iface, const void *dev_addr,
                                const void *iface_addr, fy_tl_ep_t **ep_p)
{
    fy_udp_iface_t *iface = fy_udp_iface(tl_iface);
    fy_udp_dev_addr_t d;
    fy_udp_iface_addr_t a;
    fy_udp_conn_t *c;

    memcpy(&d, dev_addr, sizeof(d));
    memcpy(&a, iface_addr, sizeof(a));
    if (d.ip.family != iface->addr.family || a.uuid == 0 || a.key == 0)
        return FERRY_ERR_INVALID_ADDR;
    /* The peer connected to us first, or an ep of ours to it was closed and its connection
     * kept: take it over (asking the peer first whether its end still lives, see Close). */
    for (uint32_t i = 1; i < iface->conn_cap; i++) {
        c = iface->conns[i];
        if (c != NULL && !c->owned && c->peer_uuid == a.uuid && c->peer_key == a.key &&
            c->state == FY_UDP_CONN_CONNECTED && !c->in_fail_list) {
            c->owned = 1;
            fy_udp_passive_count(c, 0);
            if (c->released || fy_time_ns() - c->last_rx_ns > ADOPT_FRESH_NS)
                verify_start(iface, c);
            *ep_p = &c->super;
            return FERRY_OK;
        }
    }
    c = fy_udp_conn_new(iface, a.uuid);
    if (c == NULL)
        return FERRY_ERR_NO_MEMORY;
    c->owned = 1;
    c->peer_key = a.key;
    new_token(iface, c);
    c->state = FY_UDP_CONN_CONNECTING;
    fy_udp_conn_set_addrs(c, &d.ip, a.prio_port, a.data_port);
    if (a.seg_size >= 576 && a.seg_size < c->seg_size)
        c->seg_size = a.seg_size;
    c->probe_size = c->probe_max = c->seg_size;
    hs_begin(iface, c);
    *ep_p = &c->super;
    return FERRY_OK;
}

static void maybe_connected(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    if (c->state != FY_UDP_CONN_CONNECTING || !c->got_conn_ack || !c->got_probe_ack)
        return;
    /* No RTT sample yet: the handshake's time (two or three round trips, retries and a
     * peer's scheduling delay included) bounds the first data's timeout from below, as
     * TCP's first RTO comes from its SYN.  A peer that took a second to answer on a loaded
     * machine had each of its first AMs resent ~7 times, at 10, 20, ... 200 ms; each
     * duplicate asked an ACK of a peer that had no time for it. */
    if (c->srtt == 0)
        c->rto = FY_MIN(FY_MAX(c->rto, iface->now - c->conn_start), iface->opts->rto_max);
    /* (a path that needed a smaller probe took its fallback's retries: not a peer's pace) */
    if (c->probe_size == c->probe_max) {
        uint64_t t = iface->now - c->conn_start;
        iface->hs_time = iface->hs_time == 0 ? t : (7 * iface->hs_time + t) / 8;
    }
    c->state = FY_UDP_CONN_CONNECTED;
    c->verifying = 0;
    c->seg_size = c->probe_size;
    c->last_rx_ns = iface->now;
    fy_udp_hs_end(c);
    fy_udp_live_watch(c);
    fy_udp_ready_add(c);
}

/* CONN_REQ, CONN_ACK, PROBE, PROBE_ACK: the datagram's header is valid (key, length). */
void fy_udp_conn_rx_ctrl(fy_udp_iface_t *iface, const fy_udp_hdr_t *h, const uint8_t *payload,
                         size_t plen, const struct sockaddr_storage *from, uint8_t chan)
{
    fy_udp_conn_msg_t m;
    fy_udp_conn_t *c;

    switch (h->type) {
    case FY_UDP_T_CONN_REQ: {
        fy_netif_addr_t ip;
        if (plen < sizeof(m) || chan != FY_UDP_CH_PRIO || h->src_id == 0)
            goto malformed;
        memcpy(&m, payload, sizeof(m));
        if (m.uuid == 0 || m.key == 0 ||
            fy_netif_addr_from_sockaddr((const struct sockaddr *)from, &ip) != FERRY_OK)
            goto malformed;
        c = fy_udp_peer_lookup(iface, m.uuid, h->src_id);
        if (c != NULL && c->peer_key != m.key)
            goto unknown; /* another iface claiming that one's uuid and id */
        if (c == NULL) {
            /* No state for it: only a requester that proved it receives at its address
             * (it echoes our cookie) may create some. */
            uint64_t epoch = iface->now / COOKIE_EPOCH_NS;
            if (m.cookie == 0 ||
                (m.cookie != fy_udp_cookie(iface, from, m.uuid, h->src_id, epoch) &&
                 m.cookie != fy_udp_cookie(iface, from, m.uuid, h->src_id, epoch - 1))) {
                fy_udp_hdr_t r;
                fy_udp_cookie_t ck = {.uuid = iface->uuid,
                                      .cookie =
                                          fy_udp_cookie(iface, from, m.uuid, h->src_id, epoch)};
                memset(&r, 0, sizeof(r));
                r.job_key = m.key;
                r.type = FY_UDP_T_COOKIE;
                r.dst_id = h->src_id;
                iface->cookies_sent++;
                fy_udp_send_raw(iface, FY_UDP_CH_PRIO, &r, &ck, sizeof(ck), from);
                return;
            }
            for (uint32_t i = 1; i < iface->conn_cap && c == NULL; i++) {
                fy_udp_conn_t *x = iface->conns[i];
                if (x != NULL && x->peer_uuid == m.uuid && x->peer_key == m.key &&
                    x->peer_id == 0 && x->state == FY_UDP_CONN_CONNECTING)
                    c = x;
            }
            if (c == NULL) {
                if (iface->npassive >= iface->opts->max_passive) {
                    /* Full of connections nobody adopted: refuse; a real peer asks again
                     * and gets in when one is adopted or reclaimed. */
                    iface->half_open_refused++;
                    return;
                }
                c = fy_udp_conn_new(iface, m.uuid);
                if (c == NULL)
                    return; /* no memory: the peer will ask again */
                c->state = FY_UDP_CONN_CONNECTED;
                c->peer_key = m.key;
                new_token(iface, c);
                fy_udp_conn_set_addrs(c, &ip, ntohs(ip.port_be), m.data_port);
                fy_udp_passive_count(c, 1);
                c->last_rx_ns = iface->now;
                fy_udp_live_watch(c);
            }
            fy_udp_bind_peer(c, h->src_id);
            apply_peer(c, &m);
        }
        if (c->state == FY_UDP_CONN_FAILED || c->state == FY_UDP_CONN_CLOSED) {
            /* Our end failed (and its owner has not closed it yet): the requester, asking
             * whether this end lives, must connect afresh. */
            fy_udp_hdr_t r;
            fy_udp_ctrl_hdr(c, FY_UDP_T_RESET, &r); /* (c->peer_id is h->src_id) */
            iface->resets_sent++;
            fy_udp_send_raw(iface, FY_UDP_CH_PRIO, &r, NULL, 0, from);
            return;
        }
        c->last_rx_ns = iface->now;
        c->peer_token = m.token; /* (the peer drew a new one when it came to verify) */
        conn_msg_fill(iface, c, &m, 0);
        fy_udp_tx_ctrl(iface, c, FY_UDP_CH_PRIO, FY_UDP_T_CONN_ACK, &m, sizeof(m), 0,
                       &c->addr[FY_UDP_CH_PRIO], c->addrlen);
        return;
    }
    case FY_UDP_T_CONN_ACK:
        if (plen < sizeof(m))
            goto malformed;
        memcpy(&m, payload, sizeof(m));
        c = fy_udp_conn_lookup(iface, h->dst_id);
        if (c == NULL || m.uuid != c->peer_uuid || m.key != c->peer_key || h->src_id == 0)
            goto unknown;
        if (c->peer_id == 0) {
            fy_udp_bind_peer(c, h->src_id);
        } else if (c->peer_id != h->src_id) {
            if (c->state != FY_UDP_CONN_CONNECTING)
                goto unknown;
            /* We had adopted the peer's connection from its CONN_REQ, and that connection
             * went away before the handshake finished (its ep destroyed); the peer answered
             * our own CONN_REQ with a new one: follow it, or both ends wait forever. */
            /* Or we asked whether the peer's end of an adopted connection lives, and the
             * peer made a new end instead (after a COOKIE): a new stream. */
            if (c->verifying)
                stream_restart(c);
            fy_udp_unbind_peer(c);
            fy_udp_bind_peer(c, h->src_id);
        }
        if (c->state != FY_UDP_CONN_CONNECTING)
            return;
        {
            uint32_t seg = c->seg_size;
            apply_peer(c, &m);
            c->seg_size = seg; /* decided by the probe */
        }
        if (c->got_conn_ack) {
            c->small_acks++; /* an answer to a small request sent beside a probe */
            return;
        }
        c->got_conn_ack = 1;
        c->conn_tries = 0;
        maybe_connected(iface, c);
        return;
    case FY_UDP_T_PROBE: {
        fy_udp_probe_ack_t pa;
        fy_udp_hdr_t r;
        struct sockaddr_storage to = *from;
        if (plen < sizeof(m) || chan != FY_UDP_CH_DATA || h->src_id == 0)
            goto malformed;
        memcpy(&m, payload, sizeof(m));
        if (m.probe_size != plen + FY_UDP_HDR_LEN || m.prio_port == 0 || m.key == 0)
            goto malformed;
        /* Answered statelessly (to the sender's priority port, 8 bytes for a full-size
         * datagram: no amplification), so the probe need not wait for the handshake. */
        if (to.ss_family == AF_INET)
            ((struct sockaddr_in *)&to)->sin_port = htons(m.prio_port);
        else
            ((struct sockaddr_in6 *)&to)->sin6_port = htons(m.prio_port);
        c = fy_udp_peer_lookup(iface, m.uuid, h->src_id);
        if (c != NULL && c->peer_key != m.key)
            c = NULL;
        memset(&r, 0, sizeof(r));
        r.job_key = m.key;
        r.type = FY_UDP_T_PROBE_ACK;
        r.dst_id = h->src_id;
        r.src_id = c != NULL ? c->id : 0;
        pa.probe_size = m.probe_size;
        fy_udp_send_raw(iface, FY_UDP_CH_PRIO, &r, &pa, sizeof(pa), &to);
        return;
    }
    case FY_UDP_T_COOKIE: {
        fy_udp_cookie_t ck;
        if (plen != sizeof(ck))
            goto malformed;
        memcpy(&ck, payload, sizeof(ck));
        c = fy_udp_conn_lookup(iface, h->dst_id);
        if (c == NULL || ck.uuid != c->peer_uuid)
            goto unknown;
        if (c->state != FY_UDP_CONN_CONNECTING || c->got_conn_ack || ck.cookie == 0 ||
            ck.cookie == c->cookie)
            return;
        c->cookie = ck.cookie;
        conn_msg_fill(iface, c, &m, 0);
        fy_udp_tx_ctrl(iface, c, FY_UDP_CH_PRIO, FY_UDP_T_CONN_REQ, &m, sizeof(m), 0,
                       &c->addr[FY_UDP_CH_PRIO], c->addrlen);
        return;
    }
    case FY_UDP_T_HB_ACK:
        fy_udp_live_rx_hb_ack(iface, h, payload, plen);
        return;
    case FY_UDP_T_RESET:
        c = h->dst_id != 0 ? fy_udp_conn_lookup(iface, h->dst_id)
                           : fy_udp_reset_target(iface, h, payload, plen);
        if (c == NULL || c->peer_id == 0 || c->peer_id != h->src_id || !fy_udp_conn_alive(c))
            goto unknown;
        iface->resets_rx++;
        if (c->verifying) {
            conn_renew(iface, c);
            return;
        }
        {
            /* With nothing in flight this is an ordinary close at the other end: news. */
            char buf[FY_NETIF_ADDR_STRLEN];
            int busy = !fy_list_is_empty(&c->sendq) || c->snd_una != c->snd_nxt ||
                       !fy_list_is_empty(&c->rma_fifo);
            fy_log(busy ? FY_LOG_WARN : FY_LOG_INFO,
                   "udp: peer %s reset connection %08x (it no longer has its end: closed, "
                   "reclaimed as idle, or restarted)%s",
                   fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)), c->id,
                   busy ? "; its pending operations fail" : "");
        }
        fy_udp_conn_schedule_fail(c, FERRY_ERR_CONNECTION_RESET);
        return;
    case FY_UDP_T_PROBE_ACK: {
        fy_udp_probe_ack_t pa;
        if (plen < sizeof(pa))
            goto malformed;
        memcpy(&pa, payload, sizeof(pa));
        c = fy_udp_conn_lookup(iface, h->dst_id);
        if (c == NULL || (c->peer_id != 0 && h->src_id != 0 && c->peer_id != h->src_id))
            goto unknown;
        if (c->state != FY_UDP_CONN_CONNECTING)
            return;
        if (pa.probe_size != c->probe_size) {
            /* A larger size we gave up on got through after all (its answer was only slow,
             * behind a busy peer's queue): the path carries it. */
            if (pa.probe_size < c->probe_size || pa.probe_size > c->probe_max)
                return;
            c->probe_size = (uint32_t)pa.probe_size;
        }
        c->got_probe_ack = 1;
        maybe_connected(iface, c);
        return;
    }
    default:
        goto malformed;
    }
malformed:
    iface->drops_malformed++;
    return;
unknown:
    iface->drops_unknown_ep++;
}

fy_udp_conn_t *fy_udp_reset_target(fy_udp_iface_t *iface, const fy_udp_hdr_t *h,
                                   const uint8_t *payload, size_t plen)
{
    uint64_t uuid;
    if (h->type != FY_UDP_T_RESET || h->dst_id != 0 || plen != sizeof(uuid))
        return NULL;
    memcpy(&uuid, payload, sizeof(uuid));
    return fy_udp_peer_lookup(iface, uuid, h->src_id);
}

int fy_udp_reply_key_ok(fy_udp_iface_t *iface, const fy_udp_hdr_t *h, const uint8_t *payload,
                        size_t plen)
{
    fy_udp_conn_t *c;
    if (h->type != FY_UDP_T_RESET && h->type != FY_UDP_T_HB_ACK)
        return 0;
    c = h->dst_id != 0 ? fy_udp_conn_lookup(iface, h->dst_id)
                       : fy_udp_reset_target(iface, h, payload, plen);
    return c != NULL && c->peer_key == h->job_key;
}

/* Next smaller size to probe after a size that small datagrams got through and this did not. */
static uint32_t probe_fallback(const fy_udp_conn_t *c)
{
    uint32_t ipudp = c->iface->addr.family == 4 ? 28 : 48;
    static const uint32_t mtus[] = {9000, 1500, 576};
    for (unsigned i = 0; i < FY_ARRAY_SIZE(mtus); i++)
        if (mtus[i] - ipudp < c->probe_size)
            return mtus[i] - ipudp;
    return 0;
}

void fy_udp_conn_timer_expired(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    char buf[FY_NETIF_ADDR_STRLEN];
    if (c->state != FY_UDP_CONN_CONNECTING)
        return;
    c->conn_tries++;
    /* Time we spent without progress (computing, asleep) is not the peer's silence: only
     * time in which we asked counts. */
    if (iface->now - c->conn_last_tx > 2 * CONN_RETRY_MAX_NS)
        c->conn_start += iface->now - c->conn_last_tx - CONN_RETRY_MAX_NS;
    if (iface->now - c->conn_start > iface->opts->peer_timeout) {
        fy_error("udp: no answer from %s within %.1f s (%s): is the peer running, and is "
                 "the address reachable?",
                 fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)),
                 (double)iface->opts->peer_timeout / 1e9,
                 c->got_conn_ack ? "handshake answered, path probe not" : "no handshake");
        fy_udp_conn_schedule_fail(c, FERRY_ERR_UNREACHABLE);
        return;
    }
    if (c->got_conn_ack && !c->got_probe_ack && c->conn_tries >= PROBE_TRIES &&
        c->small_acks >= PROBE_TRIES / 2) {
        uint32_t next = probe_fallback(c);
        fy_warn("udp: MTU mismatch on the path to %s: %u-byte datagrams get through but "
                "%u-byte ones do not (local interface MTU %u); %s",
                fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)), (unsigned)c->prio_mtu,
                c->probe_size, iface->if_mtu,
                next ? "falling back to smaller segments; set FERRY_UDP_MTU to the path's MTU"
                     : "giving up");
        if (next == 0) {
            fy_udp_conn_schedule_fail(c, FERRY_ERR_UNREACHABLE);
            return;
        }
        c->probe_size = next;
        c->conn_tries = 0;
        c->small_acks = 0;
    }
    send_handshake(iface, c);
}
