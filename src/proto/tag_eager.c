/*
 * tag_eager.c - the eager protocol of tagged messages: the message travels whole, as one AM
 * (id FY_AM_ID_TAG) whose header is the 8-byte tag alone, so a small message stays in one
 * cache line.  Used for messages up to the endpoint's rendezvous threshold and for every send
 * given no request (the data is copied at once, so the call can return).  An eager message
 * that finds no posted receive is copied once into the unexpected queue (tag.c).
 */
#include <string.h>

#include "proto/tag_int.h"

ferry_status_t fy_tag_eager_send(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                                 ferry_request_t *req)
{
    struct iovec iov = {(void *)buf, len};
    return fy_am_send(ep, FY_AM_ID_TAG, &tag, sizeof(tag), &iov, len != 0, req);
}

static ferry_status_t tag_eager_handler(void *arg, const void *header, size_t header_len,
                                        const void *data, size_t len, ferry_ep_t *ep)
{
    ferry_worker_t *w = arg;
    fy_tag_msg_t m = {.type = TAG_EAGER};
    if (header_len != sizeof(m.tag)) {
        w->drops_malformed++;
        return FERRY_OK;
    }
    memcpy(&m.tag, header, sizeof(m.tag));
    fy_tag_match_or_queue(w, &m, data, len, ep);
    return FERRY_OK;
}

void fy_tag_eager_init_worker(ferry_worker_t *w)
{
    fy_am_set_handler(w, FY_AM_ID_TAG, tag_eager_handler, w);
}
