/*
 * shm_rx.c - what the receive ring delivers: the dispatch of each cell type to the AM
 * callback or to the transport's own handlers.
 *
 * Short and buffered AMs are handed to am_cb straight from the cell or its buffer (valid
 * until the cell is freed, after the callback).  A PULL descriptor is served at once: the data
 * is pulled with process_vm_readv into a receive buffer kept for reuse (page faults would
 * otherwise cost more than the copy), the sender is answered, then am_cb sees header and data
 * contiguous.  The sender's memory is read only while we hold the descriptor's pull slot in the
 * sender's segment (shm.h, PULL SLOTS): a pull the sender cancelled is dropped unread.
 * Pushed chunks are reassembled per sending ep.  Everything read from a cell is
 * copied out and bounds-checked first: a peer's bytes are not trusted.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "tl/shm/shm.h"
#include "util/clock.h"
#include "util/log.h"

/* Buffers for large messages come from mmap with transparent huge pages asked for: faulting
 * in 4 KiB pages costs more than the copy itself (a 1 GiB pull takes 262144 faults). */
#define RX_HUGE ((size_t)2 << 20)

static char *big_alloc(size_t len)
{
    if (len < RX_HUGE)
        return malloc(len ? len : 1);
    size_t sz = FY_ALIGN_UP(len, RX_HUGE);
    void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    (void)madvise(p, sz, MADV_HUGEPAGE);
    return p;
}

static void big_free(char *p, size_t len)
{
    if (p == NULL)
        return;
    if (len < RX_HUGE)
        free(p);
    else
        munmap(p, FY_ALIGN_UP(len, RX_HUGE));
}

void fy_shm_rx_free(shm_iface_t *iface)
{
    big_free(iface->rxbuf, iface->rxbuf_size);
    iface->rxbuf = NULL;
    iface->rxbuf_size = 0;
}

void fy_shm_frag_free(shm_frag_rx_t *f)
{
    big_free(f->buf, f->total);
    free(f);
}

/*
 * The receive buffer of pulls is kept for the next one: a fresh buffer costs its page faults
 * and the kernel's zeroing of every page, a pass over memory as long as the copy (64 MiB + 1 B
 * pulled at 1.7 GB/s into fresh 4 KiB pages, 4 into fresh huge pages, 5.5 into a kept buffer:
 * docs/shm.md).  One buffer, grown to the largest message up to RX_CACHE; beyond the outbox's
 * base (8 MiB) it is given back once no pull has used it for OUTBOX_IDLE (fy_shm_rx_idle), as
 * the outbox gives back its own room.  Larger messages get a buffer of their own.
 */
static char *rx_buffer(shm_iface_t *iface, size_t len)
{
    if (iface->rxbuf != NULL && len <= iface->rxbuf_size)
        return iface->rxbuf;
    if (len > iface->md->opts.rx_keep + SHM_MAX_ZCOPY_HDR + SHM_PAD_MASK) /* (data: rx_keep) */
        return big_alloc(len);
    fy_shm_rx_free(iface); /* first: the old and the new buffer are never both held */
    char *b = big_alloc(len);
    if (b == NULL)
        return NULL;
    iface->rxbuf = b;
    iface->rxbuf_size = len;
    return b;
}

uint64_t fy_shm_rx_idle(shm_iface_t *iface, uint64_t now)
{
    if (FY_LIKELY(iface->rxbuf_size <= SHM_OBOX_BASE))
        return UINT64_MAX;
    uint64_t idle = iface->md->opts.obox_idle_ns;
    if (idle == UINT64_MAX)
        return UINT64_MAX;
    uint64_t due = iface->rxbuf_used_ns + idle;
    if (now < due)
        return due;
    fy_shm_rx_free(iface);
    iface->stats.rx_shrunk++;
    return UINT64_MAX;
}

static void rx_buffer_done(shm_iface_t *iface, char *b, size_t len)
{
    if (b != iface->rxbuf)
        big_free(b, len);
    else
        iface->rxbuf_used_ns = fy_time_ns(); /* (idle from the end of its use) */
}

/*
 * Copy `len` bytes from the sender's pieces `iov` (its memory, guarded by its pull slot `slot`
 * of generation `gen`) to dst with cross-memory attach.  0 or an errno; -1 when the sender
 * revoked the slot (it cancelled the send: nothing was read, nobody waits for an answer).
 */
static int pull_guarded(shm_iface_t *iface, shm_peer_t *peer, uint32_t slot, uint64_t gen,
                        char *dst, size_t len, const shm_remote_iov_t *iov, uint32_t iovcnt)
{
    uint64_t *w = &peer->pulls[slot];
    if (!fy_shm_pull_take(w, gen)) {
        iface->stats.drops_revoked++;
        return -1;
    }
    /* Even from our own pid, through the kernel: any process can write our pid into a
     * descriptor, and a plain memcpy from its addresses would crash us on a bad one. */
    struct iovec l = {dst, len}, r[SHM_MAX_IOV];
    for (uint32_t i = 0; i < iovcnt; i++)
        r[i] = (struct iovec){(void *)(uintptr_t)iov[i].addr, iov[i].len};
    int err = fy_shm_cma_copy(peer->addr.pid, &l, 1, r, iovcnt, 0);
    /* Let go of the slot before answering: the sender may reuse it once it has the answer. */
    fy_shm_pull_let_go(w, gen);
    return err;
}

static void rx_pull(shm_iface_t *iface, uint8_t am_id, const char *buf, uint32_t len)
{
    shm_pull_desc_t d;
    if (len < sizeof(d)) {
        iface->stats.drops_malformed++;
        return;
    }
    memcpy(&d, buf, sizeof(d));
    uint64_t sum = 0;
    for (uint32_t i = 0; i < d.iovcnt && i < SHM_MAX_IOV; i++)
        sum += d.iov[i].len;
    if (d.iovcnt > SHM_MAX_IOV || d.hdr_len > SHM_MAX_ZCOPY_HDR || sizeof(d) + d.hdr_len > len ||
        sum != d.data_len || d.data_len > SIZE_MAX / 2 || d.slot >= SHM_PULL_SLOTS ||
        d.gen >= (1ull << 62)) {
        iface->stats.drops_malformed++;
        return;
    }
    iface->stats.rx_pull++;
    if (!iface->cma_ok && d.reply.pid != iface->addr.pid) {
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, SHM_STATUS_NEED_PUSH, 0);
        return;
    }
    size_t total = d.hdr_len + (size_t)d.data_len;
    /* the data at the sender's offset within a cache line: copy alignment (shm.h) */
    char *rb = rx_buffer(iface, total + SHM_PAD_MASK);
    if (rb == NULL) {
        fy_error("no memory for a %zu-byte message from process %d", total, (int)d.reply.pid);
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, FERRY_ERR_NO_MEMORY, 0);
        return;
    }
    char *dst = rb;
    if (d.iovcnt != 0)
        dst += (d.iov[0].addr - (uintptr_t)(rb + d.hdr_len)) & SHM_PAD_MASK;
    /* Take the pull slot: the sender may have cancelled the send (and reused the memory). */
    shm_peer_t *peer;
    if (fy_shm_peer_get(iface, &d.reply, &peer) != FERRY_OK) {
        iface->stats.drops_dead++; /* cannot see its slots: the sender is gone */
        rx_buffer_done(iface, rb, total + SHM_PAD_MASK);
        return;
    }
    memcpy(dst, buf + sizeof(d), d.hdr_len);
    int err = pull_guarded(iface, peer, d.slot, d.gen, dst + d.hdr_len, (size_t)d.data_len, d.iov,
                           d.iovcnt);
    if (err < 0) {
        rx_buffer_done(iface, rb, total + SHM_PAD_MASK);
        return;
    }
    if (err == 0) {
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, FERRY_OK, 0);
        iface->stats.rx_msgs++;
        iface->stats.rx_bytes += total;
        iface->super.params.am_cb(iface->super.params.am_arg, am_id, dst, total);
    } else if (err == EPERM || err == ENOSYS || err == EACCES) {
        fy_info("cross-memory attach to process %d refused (%s): asking it to push",
                (int)d.reply.pid, strerror(err));
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, SHM_STATUS_NEED_PUSH, 0);
    } else if (err == ESRCH) {
        iface->stats.drops_dead++; /* the sender is gone */
    } else {
        fy_warn("pulling %zu bytes from process %d failed: %s", (size_t)d.data_len,
                (int)d.reply.pid, strerror(err));
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, FERRY_ERR_IO, 0);
    }
    rx_buffer_done(iface, rb, total + SHM_PAD_MASK);
}

/* The sender of a split message copies its part inside its send call: wait until it says
 * the part is there (1), or it dies (0). */
static int split_wait_ready(const shm_obox_slot_t *slot, uint64_t gen, pid_t pid)
{
    uint64_t next = 0;
    for (unsigned i = 1; __atomic_load_n(&slot->ready, __ATOMIC_ACQUIRE) != gen; i++) {
        if (i < 4096) {
            fy_cpu_relax();
            continue;
        }
        sched_yield(); /* a host with more runnable processes than cores: let it run */
        uint64_t now = fy_time_ns();
        if (now < next)
            continue;
        next = now + 1000000;
        if (pid != getpid() && fy_shm_pid_is_dead(pid))
            return 0;
    }
    return 1;
}

/* Our part of a split message (shm.h, shm_obox_split_t): pull the rest of the message behind
 * the sender's part in the slot, answer, and wait for the sender's part.  1 when the whole
 * message is in the slot. */
static int rx_split(shm_iface_t *iface, shm_peer_t *peer, const shm_obox_desc_t *d, const char *buf,
                    uint32_t len, char *msg, const shm_obox_slot_t *slot)
{
    shm_obox_split_t sp;
    if (len != sizeof(*d) + sizeof(sp)) {
        iface->stats.drops_malformed++;
        return 0;
    }
    memcpy(&sp, buf + sizeof(*d), sizeof(sp));
    uint64_t sum = 0;
    for (uint32_t i = 0; i < sp.iovcnt && i < SHM_MAX_IOV; i++)
        sum += sp.iov[i].len;
    if (sp.iovcnt > SHM_MAX_IOV || sp.cut > d->len || sum != d->len - sp.cut ||
        sp.slot >= SHM_PULL_SLOTS || sp.gen >= (1ull << 62)) {
        iface->stats.drops_malformed++;
        return 0;
    }
    iface->stats.rx_split++;
    int err = EPERM;
    if (iface->cma_ok || peer->addr.pid == iface->addr.pid)
        err = pull_guarded(iface, peer, sp.slot, sp.gen, msg + sp.cut, (size_t)(d->len - sp.cut),
                           sp.iov, sp.iovcnt);
    if (err < 0)
        return 0; /* revoked: nobody waits for an answer */
    if (err == ESRCH) {
        iface->stats.drops_dead++;
        return 0;
    }
    if (err != 0)
        fy_warn("pulling %llu bytes of a split message from process %d failed: %s: dropped",
                (unsigned long long)(d->len - sp.cut), (int)peer->addr.pid, strerror(err));
    fy_shm_reply(iface, &d->from, SHM_CELL_ZDONE, sp.cookie, err == 0 ? FERRY_OK : FERRY_ERR_IO, 0);
    if (err != 0)
        return 0;
    if (!split_wait_ready(slot, d->gen, (pid_t)peer->addr.pid)) {
        iface->stats.drops_dead++;
        return 0;
    }
    return 1;
}

/* A message in the sender's outbox: handed over in place (a split one once both parts are
 * there), then its slot given back. */
static void rx_outbox(shm_iface_t *iface, uint8_t am_id, const char *buf, uint32_t len,
                      unsigned flags)
{
    shm_obox_desc_t d;
    unsigned pad = flags & SHM_PAD_MASK;
    memcpy(&d, buf, sizeof(d));
    shm_peer_t *peer;
    uint64_t start = d.off - pad; /* the slot's data area (64-aligned): pad bytes, then data */
    if (fy_shm_peer_get(iface, &d.from, &peer) != FERRY_OK || d.off < pad || start % 64 != 0 ||
        start < peer->obox_lo + SHM_OBOX_SLOT_HDR || d.off > peer->obox_hi ||
        d.len > peer->obox_hi - d.off) {
        iface->stats.drops_malformed++;
        return;
    }
    char *base = (char *)peer->hdr;
    shm_obox_slot_t *slot = (shm_obox_slot_t *)(base + start - SHM_OBOX_SLOT_HDR);
    if ((flags & SHM_OBOX_F_SPLIT) && !rx_split(iface, peer, &d, buf, len, base + d.off, slot)) {
        __atomic_store_n(&slot->done, d.gen, __ATOMIC_RELEASE);
        return;
    }
    iface->stats.rx_obox++;
    iface->stats.rx_msgs++;
    iface->stats.rx_bytes += d.len;
    iface->super.params.am_cb(iface->super.params.am_arg, am_id, base + d.off, (size_t)d.len);
    __atomic_store_n(&slot->done, d.gen, __ATOMIC_RELEASE);
}

static void rx_frag(shm_iface_t *iface, const shm_cell_t *c, uint8_t am_id, const char *chunk,
                    uint32_t len)
{
    shm_frag_hdr_t fh;
    memcpy(&fh, c->data, sizeof(fh));
    shm_frag_rx_t *f = fy_hash_get(&iface->frags, fh.token);
    iface->stats.rx_frag++;
    if (c->flags & SHM_FRAG_ABORT) { /* the sender's ep was destroyed mid-message */
        if (f != NULL) {
            fy_hash_del(&iface->frags, fh.token);
            fy_shm_frag_free(f);
        }
        return;
    }
    if (fh.offset == 0) {
        if (f != NULL) { /* a sender restarted a message: drop the old one */
            fy_hash_del(&iface->frags, fh.token);
            fy_shm_frag_free(f);
        }
        if (fh.total > SIZE_MAX / 2 || (f = calloc(1, sizeof(*f))) == NULL)
            goto drop;
        f->total = (size_t)fh.total;
        f->buf = big_alloc(f->total);
        if (f->buf == NULL || fy_hash_put(&iface->frags, fh.token, f) != FERRY_OK) {
            fy_error("no memory for a %llu-byte pushed message: dropped",
                     (unsigned long long)fh.total);
            fy_shm_frag_free(f);
            goto drop;
        }
        f->token = fh.token;
        f->am_id = am_id;
    } else if (f == NULL || fh.offset != f->got || fh.total != f->total) {
        goto drop;
    }
    if (len > f->total - f->got)
        goto drop;
    memcpy(f->buf + f->got, chunk, len);
    f->got += len;
    if (f->got == f->total) {
        fy_hash_del(&iface->frags, fh.token);
        iface->stats.rx_msgs++;
        iface->stats.rx_bytes += f->total;
        iface->super.params.am_cb(iface->super.params.am_arg, f->am_id, f->buf, f->total);
        fy_shm_frag_free(f);
    }
    return;
drop:
    iface->stats.drops_malformed++;
}

void fy_shm_dispatch(shm_iface_t *iface, shm_cell_t *c, uint32_t ticket)
{
    uint32_t len = c->len;
    uint8_t am_id = c->am_id;
    const char *buf = iface->bufs + (size_t)(ticket & iface->mask) * iface->bcopy_size;
    size_t inline_max = iface->md->opts.cell_size - SHM_CELL_HDR;
    switch (c->type) {
    case SHM_CELL_SHORT:
        if (len > inline_max || am_id > FY_TL_AM_ID_MAX)
            break;
        iface->stats.rx_msgs++;
        iface->stats.rx_bytes += len;
        iface->super.params.am_cb(iface->super.params.am_arg, am_id, c->data, len);
        return;
    case SHM_CELL_BCOPY: {
        unsigned pad = c->flags & SHM_PAD_MASK; /* copy alignment (shm.h) */
        if (len > iface->bcopy_size - pad || am_id > FY_TL_AM_ID_MAX)
            break;
        iface->stats.rx_msgs++;
        iface->stats.rx_bytes += len;
        iface->super.params.am_cb(iface->super.params.am_arg, am_id, buf + pad, len);
        return;
    }
    case SHM_CELL_PULL:
        if (len > iface->bcopy_size || am_id > FY_TL_AM_ID_MAX)
            break;
        rx_pull(iface, am_id, buf, len);
        return;
    case SHM_CELL_MAPPED:
        if (len > iface->bcopy_size || am_id > FY_TL_AM_ID_MAX)
            break;
        fy_shm_rx_mapped(iface, am_id, buf, len);
        return;
    case SHM_CELL_OUTBOX:
        if (len != (c->flags & SHM_OBOX_F_SPLIT ? sizeof(shm_obox_desc_t) + sizeof(shm_obox_split_t)
                                                : sizeof(shm_obox_desc_t)) ||
            am_id > FY_TL_AM_ID_MAX)
            break;
        rx_outbox(iface, am_id, buf, len, c->flags);
        return;
    case SHM_CELL_FRAG:
        if (len > iface->bcopy_size || am_id > FY_TL_AM_ID_MAX ||
            inline_max < sizeof(shm_frag_hdr_t))
            break;
        rx_frag(iface, c, am_id, buf, len);
        return;
    case SHM_CELL_ZDONE:
    case SHM_CELL_AMO_REP: {
        shm_reply_t r;
        if (len != sizeof(r))
            break;
        memcpy(&r, c->data, sizeof(r));
        if (c->type == SHM_CELL_ZDONE)
            fy_shm_zdone(iface, &r);
        else
            fy_shm_amo_reply(iface, &r);
        return;
    }
    case SHM_CELL_AMO_REQ: {
        shm_amo_req_t q;
        if (len != sizeof(q))
            break;
        memcpy(&q, buf, sizeof(q));
        iface->stats.rx_amo++;
        fy_shm_amo_serve(iface, &q);
        return;
    }
    default:
        break;
    }
    iface->stats.drops_malformed++;
}
