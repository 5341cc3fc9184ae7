/*
 * shm_mapped.c - zero-copy messages whose data lies in memory the receiver can map.
 *
 * Memory allocated with FERRY_MEM_ALLOCATE is a memfd segment (util/shmem.h) that a peer maps
 * as it maps our ring.  A zcopy AM whose last piece (its data) lies in such a segment is not
 * copied at all: the sender publishes a MAPPED descriptor naming the segment, the offset and
 * the length, with the headers inline; the receiver maps the segment (once: the mapping is
 * kept, below), hands the data to am_split_cb where it lies, and answers ZDONE after the
 * callback, which completes the send.  No byte of the data is
 * copied by either side, so the rate of a stream no longer depends on its size (a 16 MiB
 * message costs what a 64 KiB one does); the outbox, the path of any other memory, costs one
 * copy of memory bandwidth per byte.
 *
 * The data is read under the sender's pull slot, as a pull's is (shm.h, PULL SLOTS): a send
 * cancelled before the receiver took the slot is dropped unread, and a cancel that finds the
 * receiver inside its handler waits for the handler to return.  A message to our own
 * process never takes this path (a handler cancelling the send it is reading would wait on
 * itself).
 *
 * The receiver attaches the segment for each message; util/shmem.c keeps it mapped after
 * its last attachment (parked, up to 16), so only the first message from a segment pays
 * the mmap and the page faults.  The liveness check unmaps those no message has used for
 * FERRY_SHM_OUTBOX_IDLE, or whose process died: a mapping keeps the segment's memory alive
 * after its owner freed it, for that long at most.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/shm/shm.h"
#include "util/log.h"

/* ---- sender -------------------------------------------------------------------------------- */

int fy_shm_mapped_send(shm_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                       const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp,
                       ferry_status_t *st)
{
    shm_iface_t *iface = ep->iface;
    if (comp == NULL || iovcnt == 0)
        return 0;
    const struct iovec *last = &iov[iovcnt - 1];
    size_t head = hdr_len + fy_iov_total(iov, iovcnt - 1);
    if (last->iov_len < iface->md->opts.mapped_thresh || fy_shmem_allocated() == 0 ||
        head > SHM_MAPPED_HEAD_MAX || sizeof(shm_mapped_desc_t) + head > ep->bcopy_size ||
        ep->peer->addr.pid == iface->addr.pid)
        return 0; /* (the first two spare every other large message the lookup's lock) */
    fy_shmem_ref_t ref;
    size_t off;
    if (!fy_shmem_find(last->iov_base, last->iov_len, &ref, &off))
        return 0;

    shm_op_t *op = fy_shm_op_new(ep, SHM_OP_PULL, comp);
    if (op == NULL) {
        *st = FERRY_ERR_NO_RESOURCE;
        return 1;
    }
    if (!fy_shm_pull_slot_get(iface, op)) {
        fy_shm_op_drop(op); /* SHM_PULL_SLOTS reads out: wait for answers */
        *st = FERRY_ERR_NO_RESOURCE;
        return 1;
    }
    op->total = head + last->iov_len;
    uint32_t t;
    int wake = 0;
    shm_cell_t *c =
        shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
    if (c == NULL) {
        fy_shm_pull_slot_put(iface, op); /* never published */
        fy_shm_op_drop(op);
        *st = fy_shm_ep_full(ep);
        return 1;
    }
    char *b = shm_cell_buf(ep, t);
    shm_mapped_desc_t *d = (shm_mapped_desc_t *)b;
    d->cookie = op->cookie;
    d->slot = op->pull_slot;
    d->head_len = (uint32_t)head;
    d->gen = op->pull_gen;
    d->reply = iface->addr;
    d->seg = ref;
    d->seg_off = off;
    d->data_len = last->iov_len;
    char *h = b + sizeof(*d);
    if (hdr_len != 0)
        memcpy(h, hdr, hdr_len);
    fy_iov_gather(h + hdr_len, iov, iovcnt - 1);
    shm_cell_hdr(c, SHM_CELL_MAPPED, id, 0, (uint32_t)(sizeof(*d) + head));
    shm_ring_publish(c, ep->owner, t);
    if (wake)
        fy_shm_peer_wake(iface, ep->peer);
    iface->stats.tx_mapped++;
    ep->stats.tx_msgs++;
    ep->stats.tx_bytes += op->total;
    *st = FERRY_INPROGRESS;
    return 1;
}

/* ---- receiver: a message ------------------------------------------------------------------- */

static ferry_status_t deliver(shm_iface_t *iface, uint8_t am_id, const char *head, size_t head_len,
                              const char *data, size_t data_len)
{
    const fy_tl_iface_params_t *p = &iface->super.params;
    if (p->am_split_cb != NULL) {
        p->am_split_cb(p->am_arg, am_id, head, head_len, data, data_len);
        return FERRY_OK;
    }
    char *m = malloc(head_len + data_len); /* an owner that wants it contiguous */
    if (m == NULL) {
        fy_error("no memory for a %zu-byte message: dropped", head_len + data_len);
        return FERRY_ERR_NO_MEMORY;
    }
    memcpy(m, head, head_len);
    memcpy(m + head_len, data, data_len);
    p->am_cb(p->am_arg, am_id, m, head_len + data_len);
    free(m);
    return FERRY_OK;
}

void fy_shm_rx_mapped(shm_iface_t *iface, uint8_t am_id, const char *buf, uint32_t len)
{
    shm_mapped_desc_t d;
    if (len < sizeof(d)) {
        iface->stats.drops_malformed++;
        return;
    }
    memcpy(&d, buf, sizeof(d));
    if (d.head_len > SHM_MAPPED_HEAD_MAX || sizeof(d) + d.head_len > len ||
        d.slot >= SHM_PULL_SLOTS || d.gen >= (1ull << 62) || d.seg.pid != d.reply.pid ||
        d.seg.size == 0 || d.seg_off > d.seg.size || d.data_len > d.seg.size - d.seg_off) {
        iface->stats.drops_malformed++;
        return;
    }
    shm_peer_t *peer;
    if (fy_shm_peer_get(iface, &d.reply, &peer) != FERRY_OK) {
        iface->stats.drops_dead++; /* cannot see its slots: the sender is gone */
        return;
    }
    void *base;
    ferry_status_t st = fy_shmem_attach(&d.seg, &base);
    if (st != FERRY_OK) {
        fy_warn("cannot map the %llu-byte segment of process %d holding a message (%s): dropped",
                (unsigned long long)d.seg.size, (int)d.seg.pid, ferry_status_string(st));
        fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, FERRY_ERR_IO, 0);
        return;
    }
    /* Take the pull slot: the sender may have cancelled the send (and reused the memory). */
    uint64_t *w = &peer->pulls[d.slot];
    if (!fy_shm_pull_take(w, d.gen)) {
        iface->stats.drops_revoked++;
        fy_shmem_detach_park(base);
        return;
    }
    iface->stats.rx_mapped++;
    iface->stats.rx_msgs++;
    iface->stats.rx_bytes += d.head_len + d.data_len;
    st = deliver(iface, am_id, buf + sizeof(d), d.head_len, (char *)base + d.seg_off,
                 (size_t)d.data_len);
    fy_shmem_detach_park(base);
    /* Let go of the slot before answering: the sender may reuse it once it has the answer. */
    fy_shm_pull_let_go(w, d.gen);
    fy_shm_reply(iface, &d.reply, SHM_CELL_ZDONE, d.cookie, st, 0);
}
