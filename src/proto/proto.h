/*
 * proto.h - what proto/ exposes to the rest of ferry that is not public: internal active
 * message ids for ferry's own protocols (world barrier, RMA/AMO emulation, tags, wireup) and
 * access to context-wide services.  Users have ids 0..FERRY_AM_ID_MAX; ferry's own protocols
 * use FY_AM_ID_INTERNAL_BASE and up.
 */
#ifndef FY_PROTO_H
#define FY_PROTO_H

#include "ferry.h"

#define FY_AM_ID_INTERNAL_BASE (FERRY_AM_ID_MAX + 1)        /* 65536 */
#define FY_AM_ID_WORLD         (FY_AM_ID_INTERNAL_BASE + 0) /* world barrier */
#define FY_AM_ID_RMA           (FY_AM_ID_INTERNAL_BASE + 1) /* emulated put/get/atomics */
#define FY_AM_ID_TAG           (FY_AM_ID_INTERNAL_BASE + 2) /* tagged messages, eager */
#define FY_AM_ID_TAG_RNDV      (FY_AM_ID_INTERNAL_BASE + 3) /* tagged messages, rendezvous */
#define FY_AM_ID_WORLD_AG      (FY_AM_ID_INTERNAL_BASE + 5) /* world allgather */
#define FY_AM_ID_USER_INTERNAL (FY_AM_ID_INTERNAL_BASE + 8) /* free for tools/tests */
#define FY_AM_ID_INTERNAL_N    16 /* internal ids: FY_AM_ID_INTERNAL_BASE + 0..15 */
#define FY_AM_ID_TOTAL         (FY_AM_ID_INTERNAL_BASE + FY_AM_ID_INTERNAL_N)

/* Like ferry_worker_set_am_handler / ferry_am_send, for any id below FY_AM_ID_TOTAL. */
ferry_status_t fy_am_set_handler(ferry_worker_t *worker, unsigned id, ferry_am_cb_t cb, void *arg);
ferry_status_t fy_am_send(ferry_ep_t *ep, unsigned id, const void *header, size_t header_len,
                          const struct iovec *iov, size_t iovcnt, ferry_request_t *req);
/* The same for an 8-byte user header (a word, host order) and one piece of data: the fast
 * path of small messages with a fixed header (the eager tagged message). */
ferry_status_t fy_am_send_word(ferry_ep_t *ep, unsigned id, uint64_t word, const void *data,
                               size_t len, ferry_request_t *req);

/* The context of a worker; the job key every network datagram carries. */
ferry_context_t *fy_worker_context(ferry_worker_t *worker);
uint64_t fy_context_job_key(const ferry_context_t *context);

#endif
