/*
 * tag.c - tagged messages: not yet available.  The calls are declared in ferry.h so that
 * programs can be written against the whole API; each returns FERRY_ERR_UNSUPPORTED until
 * tag matching (eager and rendezvous over the AM lanes) lands.
 */
#include "proto/proto_int.h"

ferry_status_t ferry_tag_send(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                              ferry_request_t *req)
{
    (void)tag, (void)buf, (void)len, (void)req;
    return ep == NULL ? FERRY_ERR_INVALID_PARAM : FERRY_ERR_UNSUPPORTED;
}

ferry_status_t ferry_tag_recv(ferry_worker_t *worker, void *buf, size_t len, uint64_t tag,
                              uint64_t tag_mask, ferry_request_t *req)
{
    (void)buf, (void)len, (void)tag, (void)tag_mask, (void)req;
    return worker == NULL ? FERRY_ERR_INVALID_PARAM : FERRY_ERR_UNSUPPORTED;
}

ferry_status_t ferry_tag_probe(ferry_worker_t *worker, uint64_t tag, uint64_t tag_mask,
                               ferry_tag_info_t *info)
{
    (void)tag, (void)tag_mask, (void)info;
    return worker == NULL ? FERRY_ERR_INVALID_PARAM : FERRY_ERR_UNSUPPORTED;
}

ferry_status_t ferry_request_cancel(ferry_worker_t *worker, ferry_request_t *req)
{
    (void)req;
    return worker == NULL ? FERRY_ERR_INVALID_PARAM : FERRY_ERR_UNSUPPORTED;
}
