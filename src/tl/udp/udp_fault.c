/*
 * udp_fault.c - a deterministic fault injector inside the transport, for tests: every
 * datagram sent on a chosen channel may be dropped, duplicated, held back behind the next
 * one (reordered), delayed, or sent with one byte flipped (corrupted), each with its own
 * probability (FERRY_UDP_FAULT_*), drawn from a generator seeded by FERRY_UDP_FAULT_SEED
 * with one stream per channel, so a failing run can be replayed.  It can also act as a path
 * whose MTU is smaller than the interfaces' (FAULT_MAX_DGRAM) to exercise the MTU check.
 *
 * It is off unless configured; when on, the channel's batch goes through it one datagram
 * at a time (the loss of sendmmsg batching does not matter in a test).  Held datagrams are
 * private copies, released by progress (fy_udp_fault_poll) or, for a reordered one, right
 * after the next datagram of its channel.  Corruption turns on checksums (udp_iface.c), so
 * the receiver sees a corrupted datagram as the bad-checksum drop it is.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"

typedef struct held {
    fy_list_t link;
    uint64_t release;
    uint8_t chan;
    uint8_t after_next; /* reordered: goes right after the next datagram */
    socklen_t namelen;
    struct sockaddr_storage name;
    size_t len;
    uint8_t data[];
} held_t;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform draw in [0, 100). */
static double pct(fy_udp_fault_t *f, uint8_t chan)
{
    return (double)(splitmix(&f->rng[chan]) >> 11) * (100.0 / 9007199254740992.0);
}

ferry_status_t fy_udp_fault_init(fy_udp_iface_t *iface)
{
    const fy_udp_opts_t *o = iface->opts;
    fy_udp_fault_t *f = &iface->fault;
    fy_list_init(&f->held);
    f->drop = o->fault_drop;
    f->dup = o->fault_dup;
    f->reorder = o->fault_reorder;
    f->delay = o->fault_delay;
    f->corrupt = o->fault_corrupt;
    f->delay_ns = o->fault_delay_time;
    f->max_dgram = o->fault_max_dgram;
    f->enabled = f->drop > 0 || f->dup > 0 || f->reorder > 0 || f->delay > 0 || f->corrupt > 0 ||
                 f->max_dgram > 0;
    if (!f->enabled)
        return FERRY_OK;
    const char *s = o->fault_channels ? o->fault_channels : "prio,data";
    f->chan_mask = 0;
    if (strstr(s, "prio") != NULL)
        f->chan_mask |= 1u << FY_UDP_CH_PRIO;
    if (strstr(s, "data") != NULL)
        f->chan_mask |= 1u << FY_UDP_CH_DATA;
    if (strcasecmp(s, "all") == 0 || strcasecmp(s, "both") == 0)
        f->chan_mask = 3;
    if (f->chan_mask == 0) {
        fy_error("FERRY_UDP_FAULT_CHANNELS=%s: expected prio, data or both", s);
        return FERRY_ERR_BAD_CONFIG;
    }
    for (int c = 0; c < FY_UDP_NCH; c++)
        f->rng[c] = (uint64_t)o->fault_seed * 0x100000001b3ull + (uint64_t)c * 0x51ed27;
    fy_info("udp: fault injector on (seed %lu): drop %.2f%% dup %.2f%% reorder %.2f%% "
            "delay %.2f%% corrupt %.2f%% max datagram %zu",
            o->fault_seed, f->drop, f->dup, f->reorder, f->delay, f->corrupt, f->max_dgram);
    return FERRY_OK;
}

void fy_udp_fault_fini(fy_udp_iface_t *iface)
{
    fy_list_t *e;
    if (iface->fault.held.next == NULL)
        return;
    while ((e = fy_list_pop_head(&iface->fault.held)) != NULL)
        free(fy_container_of(e, held_t, link));
}

static void raw_send(fy_udp_iface_t *iface, uint8_t chan, const struct msghdr *msg)
{
    while (sendmsg(iface->ch[chan].fd, msg, 0) < 0 && errno == EINTR) {
    }
}

static void send_held(fy_udp_iface_t *iface, held_t *h)
{
    struct iovec iov = {h->data, h->len};
    struct msghdr m = {
        .msg_name = &h->name, .msg_namelen = h->namelen, .msg_iov = &iov, .msg_iovlen = 1};
    raw_send(iface, h->chan, &m);
    fy_list_del(&h->link);
    free(h);
}

/* A datagram of chan went out: the reordered ones waiting for it follow. */
static void release_after_next(fy_udp_iface_t *iface, uint8_t chan)
{
    fy_list_t *e, *tmp;
    fy_list_for_each_safe(e, tmp, &iface->fault.held)
    {
        held_t *h = fy_container_of(e, held_t, link);
        if (h->after_next && h->chan == chan)
            send_held(iface, h);
    }
}

void fy_udp_fault_send(fy_udp_iface_t *iface, uint8_t chan, struct msghdr *msg)
{
    fy_udp_fault_t *f = &iface->fault;
    size_t len = fy_iov_total(msg->msg_iov, msg->msg_iovlen);
    int corrupt, reorder, delay, dup;

    if (f->max_dgram != 0 && len > f->max_dgram) {
        f->n_oversize++;
        return;
    }
    if (f->drop > 0 && pct(f, chan) < f->drop) {
        f->n_drop++;
        return;
    }
    dup = f->dup > 0 && pct(f, chan) < f->dup;
    corrupt = f->corrupt > 0 && pct(f, chan) < f->corrupt;
    reorder = f->reorder > 0 && pct(f, chan) < f->reorder;
    delay = !reorder && f->delay > 0 && pct(f, chan) < f->delay;
    if (!corrupt && !reorder && !delay) {
        raw_send(iface, chan, msg);
        if (dup) {
            f->n_dup++;
            raw_send(iface, chan, msg);
        }
        release_after_next(iface, chan);
        return;
    }
    held_t *h = malloc(sizeof(*h) + len);
    if (h == NULL)
        return; /* a drop */
    fy_iov_gather(h->data, msg->msg_iov, msg->msg_iovlen);
    h->len = len;
    h->chan = chan;
    h->namelen = msg->msg_namelen;
    memcpy(&h->name, msg->msg_name, msg->msg_namelen);
    fy_list_init(&h->link);
    if (corrupt && len > 0) {
        size_t pos = (size_t)(splitmix(&f->rng[chan]) % len);
        h->data[pos] ^= (uint8_t)(1u + splitmix(&f->rng[chan]) % 255u);
        f->n_corrupt++;
    }
    if (dup) {
        f->n_dup++;
        raw_send(iface, chan, msg); /* the intact copy goes now */
    }
    if (!reorder && !delay) {
        fy_list_add_tail(&f->held, &h->link);
        send_held(iface, h);
        release_after_next(iface, chan);
        return;
    }
    h->after_next = (uint8_t)reorder;
    h->release = fy_time_ns() + f->delay_ns;
    if (reorder)
        f->n_reorder++;
    else
        f->n_delay++;
    release_after_next(iface, chan);
    fy_list_add_tail(&f->held, &h->link);
}

uint64_t fy_udp_fault_poll(fy_udp_iface_t *iface, uint64_t now)
{
    fy_list_t *e, *tmp;
    uint64_t next = 0;
    fy_list_for_each_safe(e, tmp, &iface->fault.held)
    {
        held_t *h = fy_container_of(e, held_t, link);
        if (h->release <= now)
            send_held(iface, h);
        else if (next == 0 || h->release < next)
            next = h->release;
    }
    return next;
}
