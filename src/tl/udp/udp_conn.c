/*
 * udp_conn.c - the connection table and a connection's end: connections are the udp
 * transport's endpoints; here are their ids, the two ways to find one (by our id, which every
 * datagram names, and by the peer's uuid and id, which a CONN_REQ names), their creation, failure
 * and teardown, flush and statistics.
 *
 * A connection is bidirectional, so ACKs of one direction ride on the data of the other.
 * Each end has a 32-bit id (slot index | generation << 16); every datagram names the
 * receiver's id and the sender's, and a datagram naming an unknown id is dropped.  The
 * generation makes an id from before a slot was reused name nothing.
 *
 * How a connection opens is udp_handshake.c; how a close keeps it for the peer and how an
 * unused passive one is reclaimed, udp_close.c.  A failed connection becomes a zombie, freed
 * outside progress so a completion called from inside a loop over it finds it whole.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"

static uint64_t peer_key(uint64_t uuid, uint32_t id)
{
    return fy_hash_mix64(uuid) ^ id;
}

fy_udp_conn_t *fy_udp_conn_lookup(fy_udp_iface_t *iface, uint32_t id)
{
    uint32_t idx = id & 0xffff;
    fy_udp_conn_t *c;
    if (idx >= iface->conn_cap)
        return NULL;
    c = iface->conns[idx];
    return c != NULL && c->id == id ? c : NULL;
}

fy_udp_conn_t *fy_udp_peer_lookup(fy_udp_iface_t *iface, uint64_t uuid, uint32_t id)
{
    fy_udp_conn_t *c = fy_hash_get(&iface->by_peer, peer_key(uuid, id));
    return c != NULL && c->peer_uuid == uuid && c->peer_id == id ? c : NULL;
}

void fy_udp_bind_peer(fy_udp_conn_t *c, uint32_t peer_id)
{
    c->peer_id = peer_id;
    fy_hash_put(&c->iface->by_peer, peer_key(c->peer_uuid, peer_id), c);
}

void fy_udp_unbind_peer(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    if (c->peer_id != 0 && fy_hash_get(&iface->by_peer, peer_key(c->peer_uuid, c->peer_id)) == c)
        fy_hash_del(&iface->by_peer, peer_key(c->peer_uuid, c->peer_id));
    c->peer_id = 0;
}

static ferry_status_t slot_alloc(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    uint32_t i;
    for (i = 1; i < iface->conn_cap; i++)
        if (iface->conns[i] == NULL)
            break;
    if (i >= iface->conn_cap) {
        uint32_t ncap = iface->conn_cap ? iface->conn_cap * 2 : 64;
        if (ncap > 65536)
            return FERRY_ERR_NO_RESOURCE;
        fy_udp_conn_t **nc = realloc(iface->conns, ncap * sizeof(*nc));
        if (nc == NULL)
            return FERRY_ERR_NO_MEMORY;
        iface->conns = nc;
        uint16_t *ng = realloc(iface->conn_gen, ncap * sizeof(*ng));
        if (ng == NULL)
            return FERRY_ERR_NO_MEMORY;
        iface->conn_gen = ng;
        for (uint32_t j = iface->conn_cap; j < ncap; j++) {
            nc[j] = NULL;
            ng[j] = 0;
        }
        i = iface->conn_cap ? iface->conn_cap : 1;
        iface->conn_cap = ncap;
    }
    if (++iface->conn_gen[i] == 0)
        iface->conn_gen[i] = 1;
    c->id = ((uint32_t)iface->conn_gen[i] << 16) | i;
    iface->conns[i] = c;
    iface->nconns++;
    return FERRY_OK;
}

void fy_udp_conn_set_addrs(fy_udp_conn_t *c, const fy_netif_addr_t *ip, uint16_t prio_port,
                           uint16_t data_port)
{
    fy_netif_addr_t a = *ip;
    a.port_be = htons(prio_port);
    c->addrlen = fy_netif_addr_to_sockaddr(&a, &c->addr[FY_UDP_CH_PRIO]);
    a.port_be = htons(data_port);
    fy_netif_addr_to_sockaddr(&a, &c->addr[FY_UDP_CH_DATA]);
    c->peer_addr = a;
    c->peer_addr.port_be = htons(prio_port);
    /* The model and pacing (udp_cc.c) are for a path with a wire: not for a peer at our
     * own address (loopback, another process on this interface). */
    c->local =
        c->iface->is_loopback || (ip->family == c->iface->addr.family &&
                                  memcmp(ip->addr, c->iface->addr.addr, sizeof(ip->addr)) == 0);
    c->pace_ok = c->iface->opts->pacing && !c->local;
}

fy_udp_conn_t *fy_udp_conn_new(fy_udp_iface_t *iface, uint64_t peer_uuid)
{
    fy_udp_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    if (slot_alloc(iface, c) != FERRY_OK) { /* the window array comes with the first send */
        free(c);
        return NULL;
    }
    c->super.iface = &iface->super;
    c->iface = iface;
    c->peer_uuid = peer_uuid;
    c->wnd = (uint32_t)iface->opts->window;
    c->cwnd = FY_UDP_CWND_INIT;
    c->snd_high = (uint32_t)-1; /* nothing received yet: seq 0 is above it */
    c->credit = iface->opts->credit;
    c->seg_size = iface->seg_size;
    c->prio_mtu = (uint32_t)iface->opts->prio_mtu;
    c->rto = iface->opts->rto_init;
    c->next_op_id = 1;
    c->conn_start = c->last_rx_ns = fy_time_ns();
    fy_list_init(&c->sendq);
    fy_list_init(&c->ready_link);
    fy_list_init(&c->flushq);
    fy_list_init(&c->rma_fifo);
    fy_list_init(&c->ack_link);
    fy_list_init(&c->zombie_link);
    fy_list_init(&c->hs_link);
    fy_hotel_room_init(&c->conn_timer.room);
    c->conn_timer.kind = FY_UDP_TIMER_CONN;
    fy_hotel_room_init(&c->live_timer.room);
    c->live_timer.kind = FY_UDP_TIMER_LIVE;
    fy_hotel_room_init(&c->rack_timer.room);
    c->rack_timer.kind = FY_UDP_TIMER_RACK;
    fy_udp_cc_init(c);
    return c;
}

void fy_udp_passive_count(fy_udp_conn_t *c, int counted)
{
    if (c->passive_counted == counted)
        return;
    c->passive_counted = (uint8_t)counted;
    if (counted)
        c->iface->npassive++;
    else
        c->iface->npassive--;
}

void fy_udp_conn_schedule_fail(fy_udp_conn_t *c, ferry_status_t status)
{
    if (c->in_fail_list || c->state == FY_UDP_CONN_FAILED || c->state == FY_UDP_CONN_CLOSED)
        return;
    c->in_fail_list = 1;
    c->fail_status = status;
    fy_list_add_tail(&c->iface->faillist, &c->zombie_link);
}

void fy_udp_conn_run_failures(fy_udp_iface_t *iface)
{
    fy_list_t *e;
    while ((e = fy_list_pop_head(&iface->faillist)) != NULL) {
        fy_udp_conn_t *c = fy_container_of(e, fy_udp_conn_t, zombie_link);
        ferry_status_t st = c->fail_status;
        uint64_t uuid = c->peer_uuid;
        c->in_fail_list = 0;
        fy_udp_conn_fail(c, st, 1);
        if (st != FERRY_ERR_ENDPOINT_TIMEOUT)
            continue;
        /* The peer is gone: so is every other connection to it (the reply connection, or
         * an endpoint of ours that is idle and would learn it only at its next send). */
        iface->peers_dead++;
        for (uint32_t i = 1; i < iface->conn_cap; i++) {
            fy_udp_conn_t *x = iface->conns[i];
            if (x != NULL && x->peer_uuid == uuid && fy_udp_conn_alive(x))
                fy_udp_conn_schedule_fail(x, st);
        }
    }
}

void fy_udp_conn_zombie(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    if (iface->dack_conn == c)
        iface->dack_conn = NULL; /* (its window is gone) */
    c->state = FY_UDP_CONN_CLOSED;
    if (c->in_fail_list) {
        fy_list_del(&c->zombie_link);
        c->in_fail_list = 0;
    }
    iface->conns[c->id & 0xffff] = NULL;
    iface->nconns--;
    fy_udp_passive_count(c, 0);
    if (iface->hotel.slots != NULL) {
        fy_hotel_checkout(&iface->hotel, &c->pace_timer.room);
        fy_hotel_checkout(&iface->hotel, &c->rack_timer.room);
    }
    if (iface->live_hotel.slots != NULL)
        fy_hotel_checkout(&iface->live_hotel, &c->live_timer.room);
    if (c->peer_id != 0 && fy_hash_get(&iface->by_peer, peer_key(c->peer_uuid, c->peer_id)) == c)
        fy_hash_del(&iface->by_peer, peer_key(c->peer_uuid, c->peer_id));
    fy_list_add_tail(&iface->zombies, &c->zombie_link);
    if (iface->in_progress == 0)
        fy_udp_conn_free_zombies(iface);
}

/* Forget every segment in the send window (the stream they belong to is over). */
void fy_udp_drop_window(fy_udp_conn_t *c, ferry_status_t status)
{
    fy_udp_iface_t *iface = c->iface;
    for (uint32_t s = c->snd_una; s != c->snd_nxt; s++) {
        fy_udp_seg_t *seg = c->win[s & (iface->wsize - 1)];
        c->win[s & (iface->wsize - 1)] = NULL;
        if (seg == NULL)
            continue;
        fy_hotel_checkout(&iface->hotel, &seg->timer.room);
        fy_list_del(&seg->rlink);
        if (seg->frag != NULL) {
            seg->frag->result = status;
            fy_udp_frag_release_seg(iface, seg->frag);
        }
        fy_udp_seg_free(iface, seg);
    }
    c->snd_una = c->snd_nxt;
    c->inflight = 0;
    c->nsacked = 0;
    c->sacked_bytes = 0;
}

/* Fail every operation of the connection with status; the peer is gone (or we close). */
void fy_udp_conn_fail(fy_udp_conn_t *c, ferry_status_t status, int notify)
{
    fy_udp_iface_t *iface = c->iface;
    fy_list_t *e;

    if (c->state == FY_UDP_CONN_FAILED || c->state == FY_UDP_CONN_CLOSED)
        return;
    if (iface->dack_conn == c)
        iface->dack_conn = NULL; /* (its window is dropped below) */
    c->state = FY_UDP_CONN_FAILED;
    fy_udp_hs_end(c);
    fy_hotel_checkout(&iface->hotel, &c->pace_timer.room);
    fy_hotel_checkout(&iface->hotel, &c->rack_timer.room);
    c->pace_wait = 0;
    if (iface->live_hotel.slots != NULL)
        fy_hotel_checkout(&iface->live_hotel, &c->live_timer.room);
    fy_list_del(&c->ready_link);
    fy_list_del(&c->ack_link);
    c->ack_pending = 0;
    /* Queued items first (they may be fragments with segments in the window). */
    while ((e = fy_list_pop_head(&c->sendq)) != NULL) {
        fy_udp_pend_t *p = fy_container_of(e, fy_udp_pend_t, link);
        if (p->kind == FY_UDP_PEND_SEG) {
            fy_udp_seg_free(iface, (fy_udp_seg_t *)p);
        } else if (p->kind == FY_UDP_PEND_FRAG) {
            fy_udp_frag_t *f = (fy_udp_frag_t *)p;
            f->queued = 0;
            f->result = status;
            fy_udp_frag_finish(iface, f);
        } else {
            fy_udp_flush_t *fl = (fy_udp_flush_t *)p;
            fl->comp->cb(fl->comp, status);
            fy_mpool_put(&iface->flush_pool, fl);
        }
    }
    fy_udp_drop_window(c, status);
    /* (the window array stays until the conn is freed: a completion called from an ACK's
     * loop over the window may have failed the connection) */
    while ((e = fy_list_pop_head(&c->flushq)) != NULL) {
        fy_udp_flush_t *fl = fy_container_of(e, fy_udp_flush_t, pend.link);
        fl->comp->cb(fl->comp, status);
        fy_mpool_put(&iface->flush_pool, fl);
    }
    fy_udp_rma_fail_all(c, status);
    fy_udp_stash_clear(c);
    c->rx_active = 0;
    if (notify && c->owned && iface->super.params.err_cb != NULL) {
        char buf[FY_NETIF_ADDR_STRLEN];
        fy_info("udp: ep %08x to %s failed: %s", c->id,
                fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)), ferry_status_string(status));
        iface->super.params.err_cb(iface->super.params.err_arg, &c->super, status);
    }
    if (!c->owned && c->state == FY_UDP_CONN_FAILED)
        fy_udp_conn_zombie(iface, c);
}

void fy_udp_conn_free_zombies(fy_udp_iface_t *iface)
{
    fy_list_t *e;
    while ((e = fy_list_pop_head(&iface->zombies)) != NULL) {
        fy_udp_conn_t *c = fy_container_of(e, fy_udp_conn_t, zombie_link);
        fy_udp_rx_unplace(iface, c);
        free(c->stash);
        free(c->rx_bufs[0]);
        free(c->rx_bufs[1]);
        free(c->win);
        free(c);
    }
}

void fy_udp_conn_destroy_all(fy_udp_iface_t *iface)
{
    iface->in_progress++;
    for (uint32_t i = 1; i < iface->conn_cap; i++) {
        fy_udp_conn_t *c = iface->conns[i];
        if (c == NULL)
            continue;
        c->owned = 0;
        fy_udp_conn_fail(c, FERRY_ERR_CANCELED, 0);
        if (c->state != FY_UDP_CONN_CLOSED)
            fy_udp_conn_zombie(iface, c);
    }
    iface->in_progress--;
    fy_udp_conn_free_zombies(iface);
}

/* Complete the flushes whose barrier has been reached. */
void fy_udp_flush_check(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    while (!fy_list_is_empty(&c->flushq)) {
        fy_udp_flush_t *fl = fy_container_of(c->flushq.next, fy_udp_flush_t, pend.link);
        if (fy_udp_seq_diff(c->snd_una, fl->seq) < 0)
            return;
        if (!fy_list_is_empty(&c->rma_fifo)) {
            fy_udp_rma_op_t *op = fy_container_of(c->rma_fifo.next, fy_udp_rma_op_t, link);
            if ((uint64_t)op->op_id < fl->rma)
                return;
        }
        fy_list_del(&fl->pend.link);
        ferry_status_t st = c->sticky;
        c->sticky = FERRY_OK;
        fl->comp->cb(fl->comp, st);
        fy_mpool_put(&iface->flush_pool, fl);
        iface->events++;
    }
}

ferry_status_t fy_udp_ep_flush(fy_tl_ep_t *ep, fy_tl_comp_t *comp)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    fy_udp_flush_t *fl;

    if (c->state == FY_UDP_CONN_FAILED || c->state == FY_UDP_CONN_CLOSED)
        return FERRY_ERR_NOT_CONNECTED;
    fy_udp_ack_settle(c->iface);
    if (fy_list_is_empty(&c->sendq) && c->snd_una == c->snd_nxt && fy_list_is_empty(&c->rma_fifo) &&
        fy_list_is_empty(&c->flushq)) {
        ferry_status_t st = c->sticky;
        c->sticky = FERRY_OK;
        return st;
    }
    if (comp == NULL)
        return FERRY_ERR_NO_RESOURCE;
    fl = fy_mpool_get(&c->iface->flush_pool);
    if (fl == NULL)
        return FERRY_ERR_NO_MEMORY;
    fl->pend.kind = FY_UDP_PEND_FLUSH;
    fl->comp = comp;
    fl->rma = c->next_op_id; /* every op numbered below must be complete */
    fl->seq = c->snd_nxt;
    if (fy_list_is_empty(&c->sendq)) {
        fy_list_add_tail(&c->flushq, &fl->pend.link);
    } else {
        fy_udp_enqueue(c, &fl->pend);
    }
    return FERRY_INPROGRESS;
}

ferry_status_t fy_udp_ep_get_stats(fy_tl_ep_t *ep, ferry_ep_stats_t *stats)
{
    fy_udp_conn_t *c = fy_udp_conn(ep);
    fy_udp_iface_t *iface = c->iface;
    fy_udp_ack_settle(iface);
    *stats = c->stats;
    /* Drops that cannot be charged to an ep are the interface's. */
    stats->drops_bad_key = iface->drops_bad_key;
    stats->drops_malformed = iface->drops_malformed + iface->drops_csum + iface->drops_trunc;
    stats->drops_unknown_ep = iface->drops_unknown_ep;
    stats->rtt_ns = (uint64_t)c->srtt;
    stats->rto_ns = c->rto;
    stats->window_used = c->snd_nxt - c->snd_una;
    stats->window_max = c->wnd;
    return FERRY_OK;
}
