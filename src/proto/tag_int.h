/*
 * tag_int.h - what the files of tagged messaging share: the rendezvous wire header, the
 * unexpected queue's entries, and the calls between matching (tag.c), eager (tag_eager.c) and
 * rendezvous (tag_rndv.c, by get in tag_rndv_get.c, by RTS/CTS/DATA in tag_rndv_am.c).
 *
 * The calls go one way: tag.c matches and hands a matched message to its protocol's file; the
 * protocols complete the receive and never call back into matching.
 */
#ifndef FY_TAG_INT_H
#define FY_TAG_INT_H

#include "proto/proto_int.h"

enum { TAG_EAGER, TAG_RTS, TAG_CTS, TAG_DATA, TAG_RTS_GET, TAG_ATS, TAG_ABORT };

#define TAG_F_NO_GET 1u  /* CTS: the receiver cannot read the sender's memory */
#define TAG_F_SYNC   2u  /* an eager message of a synchronous send: ATS at match (wait_id) */
#define TAG_F_GONE   4u  /* an unexpected rendezvous whose sender cancelled it (ABORT) */
#define TAG_KEY_MAX  512 /* an RTS_GET's data: transport name + that transport's packed key */

/*
 * The rendezvous header (40 bytes, host order), the user header of FY_AM_ID_TAG_RNDV:
 *
 *   0        8        16               32                               63
 *   +--------+--------+----------------+--------------------------------+
 *   | type   | flags  | tl_len         | status                         |
 *   +--------+--------+----------------+--------------------------------+
 *   | tag                                                               |
 *   | len      RTS, RTS_GET: the message's length                       |
 *   | wait_id  RTS, RTS_GET, ABORT: the sender's; CTS, ATS: the sender's |
 *   |          (echoed); DATA: the receiver's                           |
 *   | arg      RTS_GET: address of the sender's buffer;                 |
 *   |          CTS: the receiver's wait id                              |
 *   +-------------------------------------------------------------------+
 *   RTS_GET data: transport name (tl_len bytes) | that transport's packed key
 *   DATA data:    the message
 */
typedef struct fy_tag_msg {
    uint8_t type;
    uint8_t flags;   /* CTS: TAG_F_NO_GET */
    uint16_t tl_len; /* RTS_GET: bytes of transport name at the start of the data */
    int32_t status;  /* ATS: FERRY_OK, or why the receiver gave up reading */
    uint64_t tag;
    uint64_t len;
    uint64_t wait_id;
    uint64_t arg;
} fy_tag_msg_t;

/* An unexpected message: eager data, or a rendezvous descriptor (with the key of an RTS_GET).
 * Taken by ferry_tag_mprobe, it moves to the worker's tag_mprobed list and is the user's
 * ferry_tag_message_t until ferry_tag_mrecv. */
typedef struct fy_tag_unexp {
    fy_list_t link;
    ferry_ep_t *ep;
    uint32_t ep_id;
    fy_tag_msg_t m; /* type TAG_EAGER (m.tag only), TAG_RTS or TAG_RTS_GET */
    size_t len;     /* bytes of data[]: the eager payload, or the RTS_GET's key */
    uint8_t data[];
} fy_tag_unexp_t;

static inline int fy_tag_ep_usable(const ferry_ep_t *ep)
{
    return ep->state == FY_EP_CONNECTED || ep->state == FY_EP_WIREUP;
}

/* tag.c: matching.  An eager message, an RTS or an RTS_GET arrived: the first posted receive
 * that matches takes it (through its protocol's file); otherwise it waits, unexpected. */
void fy_tag_match_or_queue(ferry_worker_t *w, const fy_tag_msg_t *m, const void *data, size_t len,
                           ferry_ep_t *ep);
/* The same for a plain eager message (no synchronous send behind it): the fast path. */
void fy_tag_eager_arrived(ferry_worker_t *w, uint64_t tag, const void *data, size_t len,
                          ferry_ep_t *ep);
/* Complete a receive with data in hand: copy, truncate if need be, complete now. */
void fy_tag_recv_deliver(fy_op_t *op, uint64_t tag, const void *data, size_t len);
/* The receive buffer's contiguous piece at byte off, at most n bytes (its pieces, if recvv). */
struct iovec fy_tag_recv_piece(const fy_op_t *op, size_t off, size_t n);
/* Take op off its endpoint's pending queue: 1 if it was there (so not started). */
int fy_tag_unqueue(ferry_ep_t *ep, fy_op_t *op);
/* Answer a synchronous eager message matched here (ATS to its sender). */
void fy_tag_sync_ack(ferry_ep_t *ep, const fy_tag_msg_t *m);

/* tag_eager.c.  sendv: the header (the tag, or tag + wait id of a synchronous send) and the
 * pieces (no zero-length one), gathered by the transport when the lane takes that many. */
static inline ferry_status_t fy_tag_eager_send(ferry_ep_t *ep, uint64_t tag, const void *buf,
                                               size_t len, ferry_request_t *req)
{
    return fy_am_send_word(ep, FY_AM_ID_TAG, tag, buf, len, req); /* (inline: no call layer) */
}
ferry_status_t fy_tag_eager_sendv(ferry_ep_t *ep, const uint64_t *hdr, size_t hdr_len,
                                  const struct iovec *iov, size_t iovcnt, ferry_request_t *req);
/* A lane takes the proto header, one user header and n pieces in one operation. */
int fy_tag_lane_takes(const ferry_ep_t *ep, size_t n);
void fy_tag_eager_init_worker(ferry_worker_t *w);

/* tag_rndv.c: the rendezvous send and the FY_AM_ID_TAG_RNDV handler */
ferry_status_t fy_tag_rndv_send(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                size_t iovcnt, ferry_request_t *req);
/* A message above the threshold and up to ep->tag_staged_max: eager while the lane stages
 * such messages at once, by rendezvous for a while after one it did not. */
ferry_status_t fy_tag_staged_send(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                  size_t iovcnt, ferry_request_t *req);
/* A synchronous eager send: the message, then the op waits for the receiver's ATS. */
ferry_status_t fy_tag_ssend_eager(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                  size_t iovcnt, ferry_request_t *req);
/* Cancel a send (rendezvous or synchronous) whose first message has not left: 1 if done. */
int fy_tag_send_cancel(fy_op_t *op);
ferry_status_t fy_tag_rndv_ctl(ferry_ep_t *ep, fy_tag_msg_t *m); /* a header-only message */
void fy_tag_rndv_init_worker(ferry_worker_t *w);

/* tag_rndv_am.c: RTS -> CTS -> DATA */
ferry_status_t fy_tag_recv_rts(fy_op_t *op, ferry_ep_t *ep, uint64_t tag, size_t len,
                               uint64_t sender_wait_id, unsigned flags);
void fy_tag_send_data(fy_op_t *op, uint64_t recv_wait_id); /* the sender, at CTS */
void fy_tag_recv_data(ferry_worker_t *w, const fy_tag_msg_t *m, const void *data, size_t len);

/* tag_rndv_get.c: RTS_GET -> the receiver reads -> ATS */
size_t fy_tag_offer_get(ferry_ep_t *ep, fy_op_t *op, fy_tag_msg_t *m, uint8_t *key);
ferry_status_t fy_tag_recv_rts_get(fy_op_t *op, ferry_ep_t *ep, const fy_tag_msg_t *m,
                                   const uint8_t *key, size_t key_len);

#endif
