/*
 * ofi_rndv.c - active messages by rendezvous: the receiver reads the sender's buffer.
 *
 * Why.  An AM larger than a receive slot would otherwise go as proto's 64 KiB fragments, one
 * copy in and one copy out each, and (over tcp;ofi_rxm) through rxm's own eager buffers: a
 * 1 MiB ping-pong ran at 0.6-0.7 x fi_pingpong.  Above FERRY_OFI_RNDV_THRESH (never above the
 * eager limit) am_zcopy instead registers the caller's buffers through the md's registration
 * cache and sends a small descriptor, the RTS; the receiver fi_reads the data straight into a
 * buffer of its own, answers with an ATS (the sender's op completes and the regions go back to
 * the cache), and hands the AM to am_cb from that buffer, header then data, as the transport
 * contract wants.  Small iov entries (a user header) travel inside the RTS.
 *
 * ORDER.  AMs of one ep reach am_cb in order.  The receiver does not know which sender an
 * eager AM came from, so while any rendezvous is being read every AM behind it (from any
 * sender) is copied into the iface's receive queue (rxq) and delivered in arrival order once
 * the reads before it are done; with no read outstanding an AM is delivered straight from the
 * receive buffer, as before.
 *
 * FAILURE.  The RTS carries the sender's pid: the liveness check (FERRY_OFI_PEER_CHECK) drops
 * the receive of a sender that died (rxd retries a read to a dead peer for ever; shm's may
 * never answer), so the queue behind it moves on within that period.  A failed read is never
 * delivered; the ATS tells the sender the error, whose ep then fails (an AM lost mid-stream
 * breaks the order).  A failed receive whose reads libfabric still holds waits in rr_dead with
 * its buffer until they come back, or until the iface closes its endpoint.  On the sender, an
 * ep that fails or is destroyed completes its rendezvous ops at once (CANCELED or the error):
 * its regions go back to the cache, which keeps them registered unless FERRY_RCACHE=n, so a
 * receiver still reading gets either the bytes or an error, never another process's memory.
 *
 * WIRE (after fy_ofi_hdr_t, little endian):
 *
 *   RTS   0        8         16    20       22    23        24            80
 *        +--------+---------+-----+--------+-----+---------+-------------+--------+------+
 *        | cookie | data    | pid | hdr    |nseg | name    | name (56)   | hdr    | segs |
 *        |  u64   | len u64 | u32 | len u16| u8  | len u8  | sender's ep | bytes  |      |
 *        +--------+---------+-----+--------+-----+---------+-------------+--------+------+
 *         seg: len u32, flags u32 (bit 0: inline); inline: len bytes; else va u64 and the
 *         32-byte packed rkey (ofi_mr.h) of a region holding [va, va + len)
 *   ATS   cookie u64, status i32 (0, or the ferry status of the failed read)
 */
#include <endian.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "tl/ofi/ofi.h"
#include "util/log.h"
#include "util/status.h"

#define RTS_FIXED   80
#define RTS_SEG     FY_OFI_RNDV_IOV
#define RTS_INLINE  256 /* an iov entry up to this size travels in the RTS */
#define RTS_INL_MAX 512 /* ... up to this much in all */
#define ATS_LEN     12
#define SPARE_MAX   (16u << 20) /* the largest receive buffer kept for the next one */
#define BUF_PAD     64          /* a receive buffer starts up to this far into its allocation */

typedef struct fy_ofi_rseg {
    size_t off, len; /* in rr->buf */
    uint64_t addr;   /* the provider's address at the sender */
    uint64_t key;
} fy_ofi_rseg_t;

struct fy_ofi_rr {
    fy_list_t elem; /* iface->rxq, or iface->rr_dead */
    uint8_t am_id;
    uint8_t rndv;  /* 0: an eager AM held behind a rendezvous */
    uint8_t acked; /* the ATS went (or the sender is dead: none goes) */
    uint8_t dead;  /* in rr_dead: dropped, waiting for libfabric to give its reads back */
    ferry_status_t status;
    unsigned reads;     /* posted, not yet completed */
    unsigned next_post; /* the next of the nremote segments to post */
    unsigned nremote;
    uint8_t *buf;
    uint8_t *base; /* what was allocated, BUF_PAD more than len (NULL: buf is in rr) */
    size_t len;
    void *region; /* FI_MR_LOCAL: buf's cache region */
    fi_addr_t src;
    pid_t pid;
    uint64_t cookie;
    fy_ofi_rseg_t seg[RTS_SEG];
};

struct fy_ofi_peer {
    uint8_t name[FY_OFI_NAME_MAX];
    size_t len;
    fi_addr_t addr;
};

struct fy_ofi_ack {
    fi_addr_t dst;
    uint64_t cookie;
    int32_t status;
};

void fy_ofi_rndv_init(fy_ofi_iface_t *iface)
{
    fy_list_init(&iface->rxq);
    fy_list_init(&iface->rr_dead);
    size_t eager = iface->msg_max - sizeof(fy_ofi_hdr_t);
    size_t cfg = iface->md->cfg.rndv_thresh;
    /* the default: never over rxd, whose reads run at half its messages' speed
     * (bench/RESULTS.md), nor over sockets, whose progress thread serves a peer's read from
     * the sender's buffer whenever it comes, also after a forced close (docs/ofi.md) */
    const char *prov = iface->info->fabric_attr->prov_name;
    if (cfg == 0)
        cfg = strstr(prov, "ofi_rxd") != NULL || strcmp(prov, "sockets") == 0 ? SIZE_MAX : 65536;
    iface->rndv_thresh = cfg == SIZE_MAX ? SIZE_MAX : (cfg < eager ? cfg : eager);
    size_t max = iface->max_msg < (256u << 20) ? iface->max_msg : (256u << 20);
    iface->rndv_max = max > iface->msg_max ? max : iface->msg_max;
}

/* ---- sender ---------------------------------------------------------------------------------- */

static void wr16(uint8_t *p, uint16_t v)
{
    v = htole16(v);
    memcpy(p, &v, 2);
}
static void wr32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}
static void wr64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}
static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return le16toh(v);
}
static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}
static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

ferry_status_t fy_ofi_rndv_send(fy_ofi_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                                const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp)
{
    fy_ofi_iface_t *iface = (fy_ofi_iface_t *)ep->super.iface;
    fy_ofi_md_t *md = iface->md;
    /* shm: a peer killed inside the provider keeps its queue's lock (in shared memory), and a
     * send to it spins in fi_sendmsg for ever (libfabric 1.17: conformance_ofi_shm
     * peer_death_mid_transfer hung 1 run in ~25, the stack in smr's spin lock).  A rendezvous
     * first asks whether the process lives - one system call per large message; the next
     * progress pass fails the ep (check_peers), as for any dead peer.  A peer that dies
     * holding the lock after this look is not caught: small sends do not look (their cost). */
    if (iface->parkable && ep->pid > 0 && kill(ep->pid, 0) != 0 && errno == ESRCH) {
        iface->next_check_ns = 0;
        return FERRY_ERR_CONNECTION_RESET;
    }
    fy_rcache_t *rc = fy_ofi_md_rcache(md);
    if (rc == NULL)
        return FERRY_ERR_NO_MEMORY;
    fy_ofi_op_t *op = fy_ofi_op_get(iface, ep, FY_OFI_OP_RNDV, comp);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    if (!fy_ofi_op_bbuf(iface, op)) {
        fy_ofi_op_put(iface, op);
        return FERRY_ERR_NO_MEMORY;
    }
    uint8_t *b = op->bbuf;
    fy_ofi_put_hdr(iface, b, FY_OFI_RTS, id);
    uint8_t *p = b + sizeof(fy_ofi_hdr_t);
    memset(p, 0, RTS_FIXED);
    wr32(p + 16, (uint32_t)getpid());
    wr16(p + 20, (uint16_t)hdr_len);
    p[23] = (uint8_t)iface->name_len;
    memcpy(p + 24, iface->name, iface->name_len);
    uint8_t *q = p + RTS_FIXED;
    if (hdr_len > 0)
        memcpy(q, hdr, hdr_len);
    q += hdr_len;
    size_t total = 0, inl = 0;
    unsigned nseg = 0;
    for (size_t i = 0; i < iovcnt; i++) {
        size_t l = iov[i].iov_len;
        if (l == 0)
            continue;
        total += l;
        nseg++;
        if (l <= RTS_INLINE && inl + l <= RTS_INL_MAX) {
            wr32(q, (uint32_t)l);
            wr32(q + 4, 1);
            memcpy(q + 8, iov[i].iov_base, l);
            q += 8 + l;
            inl += l;
            continue;
        }
        fy_rcache_region_t *r;
        ferry_status_t st = fy_rcache_get(rc, iov[i].iov_base, l, FERRY_MEM_REMOTE_READ, &r);
        if (st != FERRY_OK) {
            fy_ofi_op_put(iface, op); /* gives back the regions taken so far */
            return st;
        }
        op->regions[op->nregions++] = r;
        wr32(q, (uint32_t)l);
        wr32(q + 4, 0);
        wr64(q + 8, (uint64_t)(uintptr_t)iov[i].iov_base);
        fy_ofi_rkey_pack(&md->mrdom, fy_rcache_region_memh(r), q + 16);
        q += 16 + FY_OFI_RKEY_PACKED_SIZE;
    }
    p[22] = (uint8_t)nseg;
    wr64(p + 8, total);
    op->cookie = ((uint64_t)++iface->cookie_gen << 32) | op->index;
    wr64(p, op->cookie);
    struct iovec v = {b, (size_t)(q - b)};
    ferry_status_t st = fy_ofi_send_iov(ep, op, &v, 1);
    if (st != FERRY_OK)
        return st; /* the op went back to the pool */
    iface->rndv_tx++;
    ep->tx_msgs++;
    ep->tx_bytes += hdr_len + total;
    return FERRY_INPROGRESS;
}

/* The op is done when both its RTS completed and the ATS came. */
static void rndv_finish(fy_ofi_iface_t *iface, fy_ofi_op_t *op)
{
    if (op->ack_st == FERRY_OK)
        fy_ofi_op_done(iface, op, FERRY_OK);
    else /* the AM was not delivered: the ep's AM stream has a hole */
        fy_ofi_ep_fail(op->ep, op->ack_st);
}

void fy_ofi_rndv_sent(fy_ofi_iface_t *iface, fy_ofi_op_t *op)
{
    if (op->acked)
        rndv_finish(iface, op);
}

static void ats_rx(fy_ofi_iface_t *iface, const uint8_t *p, size_t len)
{
    if (len < ATS_LEN) {
        iface->rx_dropped++;
        return;
    }
    uint64_t cookie = rd64(p);
    int32_t s = (int32_t)rd32(p + 8);
    uint32_t idx = (uint32_t)cookie;
    if (cookie == 0 || idx >= iface->nops || s > 0 || s <= FERRY_ERR_LAST) {
        iface->rx_dropped++;
        return;
    }
    fy_ofi_op_t *op = iface->all_ops[idx];
    if (op->kind != FY_OFI_OP_RNDV || op->cookie != cookie || op->ep == NULL || op->queued)
        return; /* stale: its ep was destroyed or failed meanwhile */
    op->cookie = 0;
    op->acked = 1;
    op->ack_st = (ferry_status_t)s;
    if (!op->posted)
        rndv_finish(iface, op);
}

/* ---- receiver ---------------------------------------------------------------------------------
 */

static fi_addr_t peer_addr(fy_ofi_iface_t *iface, const uint8_t *name, size_t len)
{
    for (unsigned i = 0; i < iface->npeers; i++)
        if (iface->peers[i].len == len && memcmp(iface->peers[i].name, name, len) == 0)
            return iface->peers[i].addr;
    if (iface->npeers == iface->peers_cap) {
        unsigned cap = iface->peers_cap ? 2 * iface->peers_cap : 8;
        struct fy_ofi_peer *n = realloc(iface->peers, cap * sizeof(*n));
        if (n == NULL)
            return FI_ADDR_NOTAVAIL;
        iface->peers = n;
        iface->peers_cap = cap;
    }
    uint8_t nm[FY_OFI_NAME_MAX] = {0};
    memcpy(nm, name, len);
    fi_addr_t a;
    int ret = fy_ofi_av_insert(iface, nm, len, &a); /* SEP hook */
    if (ret != 1) {
        fy_debug("ofi: a rendezvous' sender: fi_av_insert: %s",
                 fi_strerror(ret < 0 ? -ret : FI_EINVAL));
        return FI_ADDR_NOTAVAIL;
    }
    struct fy_ofi_peer *pe = &iface->peers[iface->npeers++];
    memcpy(pe->name, nm, sizeof(nm));
    pe->len = len;
    pe->addr = a;
    return a;
}

static void send_ack(fy_ofi_iface_t *iface, fi_addr_t dst, uint64_t cookie, ferry_status_t st,
                     int queue_only)
{
    uint8_t m[sizeof(fy_ofi_hdr_t) + ATS_LEN];
    fy_ofi_put_hdr(iface, m, FY_OFI_ATS, 0);
    wr64(m + sizeof(fy_ofi_hdr_t), cookie);
    wr32(m + sizeof(fy_ofi_hdr_t) + 8, (uint32_t)(int32_t)st);
    ssize_t ret = -FI_EAGAIN;
    if (!queue_only && iface->nacks == 0) {
        if (iface->inject_size >= sizeof(m) && !iface->no_inject) {
            ret = fi_inject(iface->ep, m, sizeof(m), dst);
        } else {
            fy_ofi_op_t *op = fy_ofi_op_get(iface, NULL, FY_OFI_OP_SEND, NULL);
            if (op != NULL && fy_ofi_op_bbuf(iface, op)) {
                memcpy(op->bbuf, m, sizeof(m));
                ret = fi_send(iface->ep, op->bbuf, sizeof(m), op->desc[0], dst, &op->ctx);
                if (ret == 0) { /* an orphan: back to the pool when libfabric gives it back */
                    op->posted = 1;
                    fy_list_add_tail(&iface->orphans, &op->elem);
                }
            }
            if (op != NULL && ret != 0)
                fy_ofi_op_put(iface, op);
        }
    }
    if (ret == 0)
        return;
    if (ret != -FI_EAGAIN) {
        fy_debug("ofi: a rendezvous' answer: %s", fi_strerror((int)-ret));
        return; /* the sender is gone: nobody waits for it */
    }
    if (iface->nacks == iface->acks_cap) {
        unsigned cap = iface->acks_cap ? 2 * iface->acks_cap : 16;
        struct fy_ofi_ack *n = realloc(iface->acks, cap * sizeof(*n));
        if (n == NULL) {
            fy_error("ofi: no memory to keep a rendezvous' answer: its sender waits until "
                     "its ep is closed");
            return;
        }
        iface->acks = n;
        iface->acks_cap = cap;
    }
    iface->acks[iface->nacks++] = (struct fy_ofi_ack){dst, cookie, (int32_t)st};
    iface->eagain = 1;
}

static void rr_free(fy_ofi_iface_t *iface, fy_ofi_rr_t *rr)
{
    if (rr->reads > 0) { /* libfabric still writes into buf: keep it until it gives them back */
        rr->dead = 1;
        fy_list_add_tail(&iface->rr_dead, &rr->elem);
        return;
    }
    if (rr->region != NULL)
        fy_rcache_put(iface->md->rcache, rr->region);
    if (rr->base != NULL && rr->len <= SPARE_MAX && rr->len + BUF_PAD > iface->spare_len) {
        free(iface->spare);
        iface->spare = rr->base;
        iface->spare_len = rr->len + BUF_PAD;
    } else {
        free(rr->base);
    }
    free(rr);
}

/* Hand what is ready at the head of the receive queue to am_cb, in order; a failed
 * rendezvous is dropped (never delivered). */
static void deliver_ready(fy_ofi_iface_t *iface)
{
    if (iface->delivering)
        return;
    iface->delivering = 1;
    while (!fy_list_is_empty(&iface->rxq)) {
        fy_ofi_rr_t *rr = fy_container_of(iface->rxq.next, fy_ofi_rr_t, elem);
        if (rr->status == FERRY_OK && (rr->reads > 0 || rr->next_post < rr->nremote))
            break;
        fy_list_del(&rr->elem);
        if (rr->status == FERRY_OK && !iface->closing)
            iface->super.params.am_cb(iface->super.params.am_arg, rr->am_id, rr->buf, rr->len);
        else
            iface->rndv_failed++;
        rr_free(iface, rr);
    }
    iface->delivering = 0;
}

void fy_ofi_rndv_deliver(fy_ofi_iface_t *iface, uint8_t id, const void *data, size_t len)
{
    if (fy_list_is_empty(&iface->rxq)) {
        iface->super.params.am_cb(iface->super.params.am_arg, id, data, len);
        return;
    }
    /* behind a rendezvous being read: a copy waits its turn */
    fy_ofi_rr_t *rr = calloc(1, sizeof(*rr) + len);
    if (rr == NULL) {
        fy_error("ofi: no memory to hold an AM of %zu bytes behind a rendezvous: dropped", len);
        iface->rx_dropped++;
        return;
    }
    rr->am_id = id;
    rr->buf = (uint8_t *)(rr + 1);
    rr->len = len;
    if (len > 0)
        memcpy(rr->buf, data, len);
    fy_list_add_tail(&iface->rxq, &rr->elem);
}

/* All reads done (or failed): answer the sender once. */
static void rr_check(fy_ofi_iface_t *iface, fy_ofi_rr_t *rr)
{
    if (rr->status == FERRY_OK && (rr->reads > 0 || rr->next_post < rr->nremote))
        return;
    if (!rr->acked && rr->reads == 0) {
        rr->acked = 1;
        send_ack(iface, rr->src, rr->cookie, rr->status, 0);
    }
}

/* Post the reads not posted yet; -FI_EAGAIN (or no op free) leaves them for progress. */
static void post_reads(fy_ofi_iface_t *iface, fy_ofi_rr_t *rr)
{
    void *desc = rr->region != NULL ? fy_ofi_mr_desc(fy_rcache_region_memh(rr->region)) : NULL;
    while (rr->status == FERRY_OK && rr->next_post < rr->nremote) {
        fy_ofi_rseg_t *s = &rr->seg[rr->next_post];
        fy_ofi_op_t *op = fy_ofi_op_get(iface, NULL, FY_OFI_OP_RREAD, NULL);
        if (op == NULL) {
            iface->eagain = 1;
            return;
        }
        op->rr = rr;
        ssize_t ret =
            fi_read(iface->ep, rr->buf + s->off, s->len, desc, rr->src, s->addr, s->key, &op->ctx);
        if (ret != 0) {
            fy_ofi_op_put(iface, op);
            if (ret == -FI_EAGAIN) {
                iface->eagain = 1;
                return;
            }
            fy_debug("ofi: a rendezvous' fi_read: %s", fi_strerror((int)-ret));
            rr->status = fy_ofi_status((int)ret);
            break;
        }
        op->posted = 1;
        fy_list_add_tail(&iface->orphans, &op->elem); /* closing the iface frees it */
        rr->reads++;
        rr->next_post++;
    }
    rr_check(iface, rr);
}

/* A receive buffer of len bytes (BUF_PAD more allocated, 64-byte aligned): the spare one when
 * it is large enough. */
static uint8_t *rbuf_get(fy_ofi_iface_t *iface, size_t len)
{
    if (iface->spare != NULL && iface->spare_len >= len + BUF_PAD) {
        void *b = iface->spare;
        iface->spare = NULL;
        iface->spare_len = 0;
        return b;
    }
    void *b = NULL;
    return posix_memalign(&b, 64, len + BUF_PAD) == 0 ? b : NULL;
}

/* Where in its allocation the message starts, so that the first piece read lands at the
 * same position within a cache line as it sits at the sender: a copy whose destination is a
 * few bytes past its source modulo 4 KiB (malloc's 16-byte offset against a page-aligned
 * send buffer) runs several times slower with rep movsb, the copy glibc and the kernel use
 * at these sizes (docs/shm.md, "Copy alignment").  Pieces are 8-byte length and flags, then
 * the bytes inline (flag 1) or the address and packed key. */
static size_t rbuf_shift(const uint8_t *q, const uint8_t *end, size_t nseg, size_t off)
{
    for (size_t i = 0; i < nseg && end - q >= 8; i++) {
        size_t l = rd32(q);
        uint32_t fl = rd32(q + 4);
        q += 8;
        if (!(fl & 1))
            return end - q >= 8 ? (size_t)((rd64(q) - off) & (BUF_PAD - 1)) : 0;
        if ((size_t)(end - q) < l)
            return 0;
        q += l;
        off += l;
    }
    return 0;
}

static void rts_rx(fy_ofi_iface_t *iface, uint8_t id, const uint8_t *p, size_t len)
{
    if (len < RTS_FIXED)
        goto bad;
    uint64_t cookie = rd64(p), total = rd64(p + 8);
    uint32_t pid = rd32(p + 16);
    size_t hdr_len = rd16(p + 20), nseg = p[22], nlen = p[23];
    if (nlen == 0 || nlen >= FY_OFI_NAME_MAX || nseg > RTS_SEG || hdr_len > 256 ||
        total > iface->rndv_max || len < RTS_FIXED + hdr_len)
        goto bad;
    fi_addr_t src = peer_addr(iface, p + 24, nlen);
    if (src == FI_ADDR_NOTAVAIL)
        return; /* nobody to read from or answer: logged */
    fy_ofi_rr_t *rr = calloc(1, sizeof(*rr));
    if (rr == NULL) {
        send_ack(iface, src, cookie, FERRY_ERR_NO_MEMORY, 0);
        return;
    }
    rr->am_id = id;
    rr->rndv = 1;
    rr->src = src;
    rr->pid = (pid_t)pid;
    rr->cookie = cookie;
    rr->len = hdr_len + total;
    rr->base = rbuf_get(iface, rr->len);
    if (rr->base == NULL) {
        free(rr);
        fy_error("ofi: no memory for an AM of %zu bytes by rendezvous", (size_t)(hdr_len + total));
        send_ack(iface, src, cookie, FERRY_ERR_NO_MEMORY, 0);
        return;
    }
    const uint8_t *q = p + RTS_FIXED + hdr_len, *end = p + len;
    rr->buf = rr->base + rbuf_shift(q, end, nseg, hdr_len);
    memcpy(rr->buf, p + RTS_FIXED, hdr_len);
    size_t off = hdr_len;
    ferry_status_t st = FERRY_OK;
    for (size_t i = 0; i < nseg && st == FERRY_OK; i++) {
        if (end - q < 8) {
            st = FERRY_ERR_PROTOCOL;
            break;
        }
        size_t l = rd32(q);
        uint32_t fl = rd32(q + 4);
        q += 8;
        if (l > rr->len - off) {
            st = FERRY_ERR_PROTOCOL;
        } else if (fl & 1) {
            if ((size_t)(end - q) < l) {
                st = FERRY_ERR_PROTOCOL;
            } else {
                memcpy(rr->buf + off, q, l);
                q += l;
            }
        } else if (end - q < 8 + FY_OFI_RKEY_PACKED_SIZE) {
            st = FERRY_ERR_PROTOCOL;
        } else {
            fy_ofi_mr_rkey_t k;
            fy_ofi_rseg_t *s = &rr->seg[rr->nremote];
            if (fy_ofi_rkey_unpack(&iface->md->mrdom.mode, q + 8, FY_OFI_RKEY_PACKED_SIZE, &k) !=
                    FERRY_OK ||
                fy_ofi_rkey_addr(&k, rd64(q), l, FERRY_MEM_REMOTE_READ, &s->addr) != FERRY_OK) {
                st = FERRY_ERR_ACCESS_DENIED;
            } else {
                s->off = off;
                s->len = l;
                s->key = k.key;
                rr->nremote++;
            }
            q += 8 + FY_OFI_RKEY_PACKED_SIZE;
        }
        off += l;
    }
    if (st == FERRY_OK && off != rr->len)
        st = FERRY_ERR_PROTOCOL;
    if (pid == (uint32_t)getpid()) { /* shm: a sender of this process (ofi_park.c) */
        iface->same_process = 1;
        if (st == FERRY_OK && fy_ofi_park_has(p + 24, nlen))
            st = FERRY_ERR_CONNECTION_RESET; /* it closed: nobody serves the read */
    }
    if (st == FERRY_OK && iface->md->mrdom.mode.local && rr->len > 0) {
        fy_rcache_t *rc = fy_ofi_md_rcache(iface->md);
        st = rc != NULL ? fy_rcache_get(rc, rr->buf, rr->len, 0, (fy_rcache_region_t **)&rr->region)
                        : FERRY_ERR_NO_MEMORY;
    }
    iface->rndv_rx++;
    if (st != FERRY_OK) {
        fy_warn("ofi: a rendezvous of %zu bytes from process %u refused: %s", (size_t)total, pid,
                ferry_status_string(st));
        rr->status = st;
        rr->acked = 1;
        send_ack(iface, src, cookie, st, 0);
        rr_free(iface, rr);
        return;
    }
    fy_list_add_tail(&iface->rxq, &rr->elem);
    post_reads(iface, rr);
    deliver_ready(iface);
    return;
bad:
    fy_debug("ofi: a malformed rendezvous descriptor (%zu bytes): dropped", len);
    iface->rx_dropped++;
}

void fy_ofi_rndv_rx(fy_ofi_iface_t *iface, uint8_t type, uint8_t id, const uint8_t *p, size_t len)
{
    if (type == FY_OFI_RTS)
        rts_rx(iface, id, p, len);
    else
        ats_rx(iface, p, len);
}

void fy_ofi_rndv_read_done(fy_ofi_iface_t *iface, fy_ofi_op_t *op, ferry_status_t st)
{
    fy_ofi_rr_t *rr = op->rr;
    fy_ofi_op_put(iface, op);
    rr->reads--;
    if (st != FERRY_OK && rr->status == FERRY_OK) {
        fy_debug("ofi: a rendezvous' read failed: %s", ferry_status_string(st));
        rr->status = st;
    }
    if (rr->dead) { /* dropped from the queue already */
        if (rr->reads == 0) {
            rr_check(iface, rr);
            fy_list_del(&rr->elem);
            rr->dead = 0;
            rr_free(iface, rr);
        }
        return;
    }
    rr_check(iface, rr);
    deliver_ready(iface);
}

/* From progress: reads and answers that found libfabric busy. */
void fy_ofi_rndv_retry(fy_ofi_iface_t *iface)
{
    fy_list_t *e;
    fy_list_for_each(e, &iface->rxq)
    {
        fy_ofi_rr_t *rr = fy_container_of(e, fy_ofi_rr_t, elem);
        if (rr->status == FERRY_OK && rr->next_post < rr->nremote)
            post_reads(iface, rr);
    }
    unsigned n = iface->nacks, i;
    iface->nacks = 0;
    for (i = 0; i < n && iface->nacks == 0; i++)
        send_ack(iface, iface->acks[i].dst, iface->acks[i].cookie, iface->acks[i].status, 0);
    for (; i < n; i++) /* behind one refused again: in order, later */
        send_ack(iface, iface->acks[i].dst, iface->acks[i].cookie, iface->acks[i].status, 1);
    deliver_ready(iface);
}

/* From the liveness check: a receive whose sender died is dropped, so the AMs behind it move
 * on (its reads may never come back: rxd retries for ever). */
void fy_ofi_rndv_check_peers(fy_ofi_iface_t *iface)
{
    fy_list_t *e;
    int any = 0;
    fy_list_for_each(e, &iface->rxq)
    {
        fy_ofi_rr_t *rr = fy_container_of(e, fy_ofi_rr_t, elem);
        if (rr->rndv && rr->status == FERRY_OK && rr->pid > 0 && kill(rr->pid, 0) != 0 &&
            errno == ESRCH) {
            fy_debug("ofi: the sender of a rendezvous (process %d) is gone: dropped", (int)rr->pid);
            rr->status = FERRY_ERR_CONNECTION_RESET;
            rr->acked = 1;
            any = 1;
            /* libfabric 1.17's shm completes an endpoint's operations in order, and a read
             * from a dead process never completes: nothing after it will.  Fail everything
             * with an error rather than let it hang (ofi_progress.c fails the eps). */
            if (rr->reads > 0 && strcmp(iface->info->fabric_attr->prov_name, "shm") == 0 &&
                !iface->wedged) {
                fy_error("ofi: shm: a read from process %d, which died, never completes; "
                         "libfabric's shm completes in order, so this interface's endpoints "
                         "fail (FERRY_ERR_IO) and it takes no new ones",
                         (int)rr->pid);
                iface->wedged = 1;
            }
        }
    }
    if (any)
        deliver_ready(iface);
}

/* Closing: the cache regions of the receive buffers go back while the cache exists. */
void fy_ofi_rndv_release(fy_ofi_iface_t *iface)
{
    fy_list_t *heads[2] = {&iface->rxq, &iface->rr_dead}, *e;
    for (int h = 0; h < 2 && iface->rxq.next != NULL; h++)
        fy_list_for_each(e, heads[h])
        {
            fy_ofi_rr_t *rr = fy_container_of(e, fy_ofi_rr_t, elem);
            if (rr->region != NULL)
                fy_rcache_put(iface->md->rcache, rr->region);
            rr->region = NULL;
        }
}

/* Closed: libfabric holds nothing any more. */
void fy_ofi_rndv_free(fy_ofi_iface_t *iface)
{
    fy_list_t *heads[2] = {&iface->rxq, &iface->rr_dead};
    for (int h = 0; h < 2; h++)
        while (heads[h]->next != NULL && !fy_list_is_empty(heads[h])) {
            fy_ofi_rr_t *rr = fy_container_of(fy_list_pop_head(heads[h]), fy_ofi_rr_t, elem);
            rr->reads = 0;
            rr_free(iface, rr);
        }
    free(iface->spare);
    free(iface->peers);
    free(iface->acks);
    free(iface->all_ops);
}
