/*
 * wireup_peers.c - the worker's two maps from a peer to its endpoints, which let wireup pair
 * a peer's WIREUP_REQ with the right endpoint without scanning them all.
 *
 * by_src: (peer uuid, peer endpoint id) -> our endpoint.  A message sent before the peer
 * learned our endpoint id names its sender instead (FY_AM_F_SRC); this map finds the endpoint
 * it belongs to, and finds the endpoint a repeated WIREUP_REQ was already answered by.
 *
 * by_peer: peer uuid -> one endpoint of each kind wireup looks for: a reply endpoint the
 * application may adopt (ferry_ep_create to a worker that connected to us first returns it,
 * with the messages that already came), and an application endpoint still waiting for its
 * answer (a connect from both sides pairs with it, so the two sides end with one endpoint
 * each).  A lookup checks what it finds, so an entry that no longer qualifies is harmless; an
 * endpoint leaves both maps when it is destroyed (fy_wireup_forget).
 */
#include <string.h>

#include "proto/proto_int.h"

static uint64_t src_key(uint64_t uuid, uint32_t ep_id)
{
    return fy_hash_mix64(uuid ^ ((uint64_t)ep_id * 0x9e3779b97f4a7c15ull));
}

ferry_ep_t *fy_wireup_find_src(ferry_worker_t *w, uint64_t uuid, uint32_t ep_id)
{
    ferry_ep_t *ep = fy_hash_get(&w->by_src, src_key(uuid, ep_id));
    if (ep != NULL && ep->remote_uuid == uuid && ep->remote_id == ep_id)
        return ep;
    return NULL;
}

ferry_status_t fy_wireup_src_note(ferry_worker_t *w, ferry_ep_t *ep)
{
    uint64_t k = src_key(ep->remote_uuid, ep->remote_id);
    if (fy_hash_get(&w->by_src, k) == NULL)
        return fy_hash_put(&w->by_src, k, ep);
    return FERRY_OK;
}

void fy_wireup_src_drop(ferry_ep_t *ep)
{
    uint64_t k = src_key(ep->remote_uuid, ep->remote_id);
    if (fy_hash_get(&ep->worker->by_src, k) == ep)
        fy_hash_del(&ep->worker->by_src, k);
}

static uint64_t peer_key(uint64_t uuid, int reply)
{
    return fy_hash_mix64(uuid ^ (reply ? 0x2545f4914f6cdd1dull : 0x9e3779b97f4a7c15ull));
}

static int is_adoptable(const ferry_ep_t *ep, uint64_t uuid)
{
    return ep->is_reply && ep->remote_uuid == uuid && ep->state == FY_EP_CONNECTED;
}

static int is_unpaired(const ferry_ep_t *ep, uint64_t uuid)
{
    return !ep->is_reply && ep->remote_uuid == uuid && ep->state == FY_EP_WIREUP;
}

void fy_wireup_peer_note(ferry_ep_t *ep, int reply)
{
    fy_hash_t *h = &ep->worker->by_peer;
    uint64_t k = peer_key(ep->remote_uuid, reply);
    ferry_ep_t *cur = fy_hash_get(h, k);
    if (cur == NULL ||
        !(reply ? is_adoptable(cur, ep->remote_uuid) : is_unpaired(cur, ep->remote_uuid)))
        (void)fy_hash_put(h, k, ep); /* out of memory: only adoption or pairing is missed */
}

void fy_wireup_peer_drop(ferry_ep_t *ep)
{
    fy_hash_t *h = &ep->worker->by_peer;
    for (int reply = 0; reply < 2; reply++) {
        uint64_t k = peer_key(ep->remote_uuid, reply);
        if (fy_hash_get(h, k) == ep)
            fy_hash_del(h, k);
    }
}

ferry_ep_t *fy_wireup_adopt(ferry_worker_t *w, const void *addr, size_t len)
{
    uint32_t magic;
    uint64_t uuid;
    if (addr == NULL || len < 16)
        return NULL;
    memcpy(&magic, addr, 4);
    memcpy(&uuid, (const uint8_t *)addr + 8, 8);
    if (magic != FY_ADDR_MAGIC)
        return NULL;
    ferry_ep_t *ep = fy_hash_get(&w->by_peer, peer_key(uuid, 1));
    if (ep == NULL || !is_adoptable(ep, uuid))
        return NULL;
    fy_hash_del(&w->by_peer, peer_key(uuid, 1));
    ep->is_reply = 0;
    return ep;
}

ferry_ep_t *fy_wireup_find_unpaired(ferry_worker_t *w, uint64_t uuid)
{
    ferry_ep_t *ep = fy_hash_get(&w->by_peer, peer_key(uuid, 0));
    return ep != NULL && is_unpaired(ep, uuid) ? ep : NULL;
}
