/*
 * tag_eager.c - the eager protocol of tagged messages: the message travels whole, as one AM
 * (id FY_AM_ID_TAG) whose header is the 8-byte tag alone, so a small message stays in one
 * cache line.  Used for messages up to the endpoint's rendezvous threshold and for every send
 * given no request (the data is copied at once, so the call can return).  An eager message
 * that finds no posted receive is copied once into the unexpected queue (tag.c).
 *
 * A message of several pieces (ferry_tag_sendv) goes as the same AM with the pieces handed to
 * the transport as they are: it gathers them into its buffer (short, bcopy) or sends from them
 * (zcopy), with no copy of ours.  Only when the lane takes fewer pieces in one operation than
 * the message has (max_iov, less the two headers) are they gathered here first.
 *
 * A synchronous send (ferry_tag_ssend) of an eager size carries the sender's wait id after the
 * tag (a 16-byte header): the receiver answers ATS when a receive matches it (or mprobe takes
 * it), and the send completes then.  Its data is copied before the call returns, as for a send
 * given no request: only the completion waits for the receiver.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/tag_int.h"

int fy_tag_lane_takes(const ferry_ep_t *ep, size_t n)
{
    const fy_iface_t *fi = ep->lanes[FY_LANE_AM].iface;
    return n <= 1 || fi == NULL || n + 2 <= fi->attr.max_iov;
}

ferry_status_t fy_tag_eager_sendv(ferry_ep_t *ep, const uint64_t *hdr, size_t hdr_len,
                                  const struct iovec *iov, size_t iovcnt, ferry_request_t *req)
{
    if (FY_LIKELY(fy_tag_lane_takes(ep, iovcnt)))
        return fy_am_send(ep, FY_AM_ID_TAG, hdr, hdr_len, iov, iovcnt, req);
    size_t len = fy_iov_total(iov, iovcnt);
    void *tmp = malloc(len);
    if (tmp == NULL)
        return FERRY_ERR_NO_MEMORY;
    fy_iov_gather(tmp, iov, iovcnt);
    struct iovec one = {tmp, len};
    /* given no request, the AM takes a copy of what it cannot send now: done when it returns */
    ferry_status_t st = fy_am_send(ep, FY_AM_ID_TAG, hdr, hdr_len, &one, 1, NULL);
    free(tmp);
    return st;
}

static ferry_status_t tag_eager_handler(void *arg, const void *header, size_t header_len,
                                        const void *data, size_t len, ferry_ep_t *ep)
{
    ferry_worker_t *w = arg;
    if (FY_LIKELY(header_len == sizeof(uint64_t))) { /* the tag alone: a plain send */
        uint64_t tag;
        memcpy(&tag, header, sizeof(tag));
        fy_tag_eager_arrived(w, tag, data, len, ep);
        return FERRY_OK;
    }
    fy_tag_msg_t m = {.type = TAG_EAGER};
    if (header_len != sizeof(m.tag) && header_len != sizeof(m.tag) + sizeof(m.wait_id)) {
        w->drops_malformed++;
        return FERRY_OK;
    }
    memcpy(&m.tag, header, sizeof(m.tag));
    if (header_len != sizeof(m.tag)) { /* synchronous: answer at match */
        memcpy(&m.wait_id, (const uint8_t *)header + sizeof(m.tag), sizeof(m.wait_id));
        m.flags = TAG_F_SYNC;
    }
    fy_tag_match_or_queue(w, &m, data, len, ep);
    return FERRY_OK;
}

void fy_tag_eager_init_worker(ferry_worker_t *w)
{
    fy_am_set_handler(w, FY_AM_ID_TAG, tag_eager_handler, w);
}
