/*
 * proto_int.h - the private structures of proto/: context, worker, endpoint, operations, and
 * the wire header ferry puts in front of every active message.  Shared by the files of proto/
 * only.
 */
#ifndef FY_PROTO_INT_H
#define FY_PROTO_INT_H

#include <pthread.h>
#include <stdint.h>

#include "ferry.h"
#include "proto/lanes.h"
#include "cm/cm.h"
#include "proto/proto.h"
#include "tl/tl.h"
#include "util/config.h"
#include "util/hash.h"
#include "util/list.h"
#include "util/log.h"
#include "util/mpool.h"
#include "util/region.h"
#include "util/status.h"

#define FY_MAX_TLS    8
#define FY_MAX_DEVS   8
#define FY_MAX_IFACES 16
#define FY_MAX_IOV    16
/* An interface with no endpoint (it can only receive a newcomer's wireup) is polled every
 * FY_IDLE_POLL-th progress call: a socket poll is a system call, which the shared-memory
 * fast path must not pay on every pass. */
#define FY_IDLE_POLL    1024
#define FY_ADDR_MAGIC   0x41575946u /* "FYWA" */
#define FY_RKEY_MAGIC   0x4b525946u /* "FYRK" */
#define FY_ADDR_VERSION 2           /* 2: per-interface overhead (docs/wire-formats.md) */

/* Transport-level AM ids ferry uses (tl ids are 0..FY_TL_AM_ID_MAX). */
enum {
    FY_TLAM_MSG = 0,        /* an AM with the proto header below */
    FY_TLAM_WIREUP_REQ = 1, /* "I am (uuid, ep id), here is my address" */
    FY_TLAM_WIREUP_REP = 2, /* "your ep id X is my ep id Y" */
};

/*
 * The proto header, in front of every FY_TLAM_MSG (8 bytes, host order: peers run the same
 * build on hosts of one byte order):
 *
 *   0               16              32                              63
 *   +---------------+---------------+-------------------------------+
 *   | id:9 flags:7  | header_len    |  ep id (receiver's, or the    |
 *   |               |               |  sender's with FY_AM_F_SRC)   |
 *   +---------------+---------------+-------------------------------+
 *   [ src worker uuid: 8 bytes, only with FY_AM_F_SRC ]
 *   user header (header_len bytes) | data
 *
 * Before the receiver's answer to wireup arrives, the sender does not know its ep id there;
 * it then names itself (uuid, its own ep id) and the receiver finds the ep in a hash map.
 */
typedef struct fy_am_hdr {
    uint16_t id_flags;
    uint16_t header_len;
    uint32_t ep_id;
} fy_am_hdr_t;

#define FY_AM_ID_MASK 0x1ffu
#define FY_AM_F_SRC   (1u << 9)

/*
 * An AM larger than its lane carries in one transport operation goes as fragments, each an
 * AM with id FY_AM_ID_FRAG and this header as its user header (am.c).  The fragments of one
 * message follow each other on the ep (AMs of an ep are ordered); the receiver gathers them
 * into one buffer and runs the message's handler once, with the whole header and data.
 *
 *   0                               63
 *   +-------------------------------+
 *   | total: user header + data     |
 *   +-------------------------------+
 *   | offset of this fragment's     |
 *   | data in (user header + data)  |
 *   +---------------+---------------+-------------------------------+
 *   | id            | user hdr len  |  reserved (0)                 |
 *   +---------------+---------------+-------------------------------+
 *   fragment bytes (the first fragment starts with the user header)
 */
#define FY_AM_ID_FRAG (FY_AM_ID_INTERNAL_BASE + 4)
typedef struct fy_am_frag_hdr {
    uint64_t total;
    uint64_t offset;
    uint16_t id;
    uint16_t user_hdr_len;
    uint32_t reserved;
} fy_am_frag_hdr_t;

typedef struct fy_wireup_msg {
    uint64_t src_uuid;
    uint64_t dst_uuid;
    uint32_t src_ep_id;
    uint32_t dst_ep_id; /* REP: the requester's ep id */
    uint32_t addr_len;  /* REQ: the requester's worker address follows */
    uint32_t reserved;
} fy_wireup_msg_t;

/* FERRY_TAG_RNDV_SCHEME: how a rendezvous moves the data (tag.c). */
enum { FY_TAG_SCHEME_AUTO, FY_TAG_SCHEME_GET, FY_TAG_SCHEME_AM };
#define FY_TAG_THRESH_AUTO (SIZE_MAX - 1)

/* Context configuration (FERRY_*). */
typedef struct fy_ctx_opts {
    fy_config_list_t tls;
    int wait_mode;     /* index into spin, adaptive, block */
    uint64_t spin_ns;  /* adaptive: spin this long, */
    uint64_t yield_ns; /* then yield this long, then sleep */
    int stats;
    int rma_emulate;
    char *tag_rndv_thresh_str; /* "auto" or a size */
    size_t tag_rndv_thresh;    /* parsed; FY_TAG_THRESH_AUTO: per endpoint (tag.c) */
    int tag_rndv_scheme;       /* index into auto, get, am (FY_TAG_SCHEME_*) */
    char *job_key;
    size_t max_queued;          /* FERRY_MAX_QUEUED: bytes an ep may hold, queued or in flight */
    uint64_t wireup_timeout_ns; /* a lane that has not answered by then: try the next one */
    fy_config_list_t cms;       /* FERRY_CM */
    uint64_t cm_timeout_ns;     /* FERRY_CM_TIMEOUT */
} fy_ctx_opts_t;

typedef struct fy_ctx_tl {
    const fy_tl_component_t *tl;
    fy_tl_md_t *md;
    fy_tl_device_t devs[FY_MAX_DEVS];
    unsigned ndevs;
    unsigned index; /* in context->tls */
} fy_ctx_tl_t;

struct ferry_context {
    fy_ctx_opts_t opts;
    uint64_t features;
    char name[32];
    fy_ctx_tl_t tls[FY_MAX_TLS];
    unsigned ntls;
    uint64_t job_key;
    fy_region_table_t regions; /* for RMA emulated over AM */
    fy_cm_set_t cms;           /* connection managers FERRY_CM selected */
    pthread_mutex_t lock;
    unsigned nworkers;
};

/* One open interface of a worker. */
typedef struct fy_iface {
    fy_tl_iface_t *tl_iface;
    const fy_tl_component_t *tl;
    fy_ctx_tl_t *ctl;
    fy_tl_iface_attr_t attr;
    int fd;
    unsigned index;
    unsigned neps; /* transport endpoints open on it: 0 = polled only now and then */
    ferry_worker_t *worker;
} fy_iface_t;

typedef struct fy_lane {
    fy_iface_t *iface;
    fy_tl_ep_t *tl_ep;
} fy_lane_t;

enum fy_ep_state {
    FY_EP_WIREUP, /* sending with FY_AM_F_SRC until the peer's ep id is known */
    FY_EP_CONNECTED,
    FY_EP_FAILED,
    FY_EP_CLOSED,
};

/* Operation classes a lane is chosen for. */
enum { FY_LANE_AM, FY_LANE_RMA, FY_LANE_AMO, FY_LANE_COUNT };

struct ferry_ep {
    ferry_worker_t *worker;
    uint32_t id;        /* index in worker->eps */
    uint32_t remote_id; /* valid when CONNECTED */
    uint64_t remote_uuid;
    int state;
    int is_reply; /* created by the library on a peer's wireup */
    ferry_status_t failure;
    fy_lane_t lanes[FY_LANE_COUNT];     /* lanes may share an iface/tl ep */
    fy_tl_ep_t *tl_eps[FY_MAX_IFACES];  /* distinct tl eps, for flush/destroy */
    uint16_t tl_ep_pair[FY_MAX_IFACES]; /* each one's (local, remote) pair (lanes.h) */
    unsigned ntl_eps;
    int rma_native, amo_native;
    int tag_no_get;         /* the peer cannot read our memory: offer it no get rendezvous */
    size_t tag_rndv_thresh; /* tagged messages above this size use rendezvous */
    fy_queue_t pending;     /* ops waiting for resources, in order */
    size_t queued_bytes;    /* ops pending or in flight, and their data (FERRY_MAX_QUEUED) */
    fy_list_t pending_link; /* on worker->pending_eps when pending is not empty */
    uint64_t outstanding;   /* ops started and not completed (for flush/close) */
    uint64_t emulated_since_flush;
    /* The first error of a refused put (or of an operation without a request) since a flush
     * last reported one: the flush that covers it completes with it (fy_ep_note_error). */
    ferry_status_t op_error;
    ferry_ep_err_cb_t err_cb;
    void *err_arg;
    void *user_data;
    ferry_ep_stats_t stats;
    fy_list_t close_waiters;    /* flush/close ops waiting for outstanding == 0 */
    struct fy_wireup_state *wu; /* while WIREUP: the peer's address and the lanes tried */
    /* a fragmented AM being received (am.c): its buffer, size, bytes so far, id, header */
    uint8_t *frag_buf;
    uint64_t frag_total, frag_got;
    unsigned frag_id, frag_hdr_len;
};

typedef struct fy_am_entry {
    ferry_am_cb_t cb;
    void *arg;
} fy_am_entry_t;

struct ferry_worker {
    ferry_context_t *ctx;
    uint64_t uuid;
    int wait_mode;
    void *user_data;
    fy_iface_t ifaces[FY_MAX_IFACES];
    unsigned nifaces;
    int epfd;
    int sigfd;
    int can_sleep; /* every iface has an event fd */
    fy_am_entry_t am[FY_AM_ID_TOTAL];
    ferry_ep_t **eps;
    uint32_t eps_cap;
    uint32_t *free_ids; /* stack of free slots of eps (nfree of them) */
    uint32_t nfree;
    fy_hash_t by_src;  /* (peer uuid, peer ep id) -> ep, for FY_AM_F_SRC messages */
    fy_hash_t by_peer; /* peer uuid -> an ep to adopt or to pair (wireup.c), so neither scans */
    struct fy_wireup_cache *wu_cache; /* the last address connected to, planned (wireup.c) */
    fy_list_t pending_eps;
    fy_queue_t completed; /* ops whose callback runs at the next progress */
    fy_mpool_t ops;
    uint64_t drops_no_handler, drops_unknown_ep, drops_malformed;
    int closing;         /* being destroyed: arriving messages are dropped */
    unsigned poll_count; /* progress calls, to poll idle interfaces every FY_IDLE_POLL */
    int poll_all;        /* poll every interface at the next progress (after a wake-up) */
    uint8_t *address;
    size_t address_len;
    /* ops waiting for a reply (emulated get/amo, flush round trips), by id */
    fy_hash_t waiting;
    uint64_t next_wait_id;
    fy_list_t tag_posted; /* posted receives, in order (op->wait_link) */
    fy_list_t tag_unexp;  /* unexpected messages, in arrival order */
    /* sockaddr listeners (listener.c), polled by progress */
    struct ferry_listener *listeners;
};

/* An operation in flight.  Allocated from worker->ops; the user's request points to it. */
typedef enum fy_op_type {
    FY_OP_AM,
    FY_OP_PUT,
    FY_OP_GET,
    FY_OP_AMO,
    FY_OP_FLUSH,
    FY_OP_CLOSE,
    FY_OP_RMA_EMU,     /* an emulated RMA/AMO waiting for its reply */
    FY_OP_TAG_SEND,    /* a rendezvous send waiting for the receiver's CTS */
    FY_OP_TAG_RECV,    /* a posted receive, or one waiting for rendezvous DATA */
    FY_OP_TAG_GET,     /* a matched receive reading a rendezvous message from the sender */
    FY_OP_WIREUP_HOLD, /* holds the ep's later ops until its lane answers (wireup.c) */
} fy_op_type_t;

typedef struct fy_op fy_op_t;
struct fy_op {
    fy_qelem_t q;
    fy_tl_comp_t comp;
    fy_list_t wait_link;
    ferry_request_t *req;
    ferry_ep_t *ep;
    ferry_worker_t *worker;
    fy_op_type_t type;
    ferry_status_t status;
    int counted;     /* in ep->outstanding */
    int nsub;        /* sub-operations still running (flush of several lanes) */
    fy_op_t *parent; /* a worker flush this endpoint flush is part of */
    size_t qcost;    /* counted in ep->queued_bytes from submission to completion */
    /* arguments, kept for a retry after NO_RESOURCE */
    unsigned am_id;
    void *copy; /* owned copy of header+data when the caller gave no request */
    size_t iovcnt;
    size_t hdr_len;   /* proto header + user header */
    size_t proto_len; /* proto header alone */
    /* rma */
    uint64_t remote_addr;
    ferry_rkey_t *rkey;
    ferry_atomic_op_t amo_op;
    size_t amo_size;
    uint64_t operand, compare;
    void *result;
    void *buf;
    size_t len;
    uint64_t wait_id;
    unsigned mode; /* close mode */
    /* tag rendezvous by get: the sender's wait id, the message's length, bytes asked so far;
     * the transport whose registration (sender) or unpacked key (receiver) `copy` holds */
    uint64_t peer_wait_id;
    size_t msg_len, offset;
    fy_ctx_tl_t *reg_tl;
    void (*release)(fy_op_t *op); /* called by fy_op_put before `copy` is freed */
    /* fy_op_get() clears everything before iov; iov[0..iovcnt) and hdr[0..hdr_len) are
     * written before use */
    struct iovec iov[FY_MAX_IOV + 2];
    uint8_t hdr[16 + FERRY_AM_HEADER_MAX]; /* proto header + user header (or frag header) */
};

struct ferry_mem {
    void *address;
    size_t length;
    unsigned access;
    int allocated;
    fy_region_t region;
    void *memh[FY_MAX_TLS]; /* per transport, NULL if it does not register */
};

struct ferry_rkey {
    ferry_ep_t *ep;
    uint64_t region_id, key, base, length;
    unsigned access;
    const fy_tl_component_t *tl; /* of the ep's RMA lane, if it unpacked natively */
    fy_tl_md_t *md;
    void *tl_rkey;
};

/* mem.c: shared memory for FERRY_MEM_ALLOCATE */
void *fy_mem_alloc_shared(size_t len);
void fy_mem_free_shared(void *addr, size_t len);
/* context.c */
extern const fy_config_table_t fy_ctx_config_table;
/* worker.c */
ferry_status_t fy_worker_ep_alloc(ferry_worker_t *w, ferry_ep_t **ep_p);
void fy_worker_ep_free(ferry_worker_t *w, ferry_ep_t *ep);
ferry_ep_t *fy_worker_ep_lookup(ferry_worker_t *w, uint32_t id);
void fy_worker_complete_later(ferry_worker_t *w, fy_op_t *op, ferry_status_t st);
fy_op_t *fy_op_get(ferry_worker_t *w, ferry_ep_t *ep, fy_op_type_t type, ferry_request_t *req);
void fy_op_put(fy_op_t *op);
void fy_op_finish(fy_op_t *op, ferry_status_t st); /* complete: callback now (from progress) */
/* wireup.c (address: wireup_addr.c, scoring: lanes.c) */
ferry_status_t fy_ep_connect(ferry_ep_t *ep, const void *addr, size_t len);
ferry_status_t fy_wireup_start(ferry_ep_t *ep); /* send WIREUP_REQ (and hold what follows) */
ferry_status_t fy_wireup_hold(fy_op_t *op);     /* fy_op_start of an FY_OP_WIREUP_HOLD */
int fy_wireup_tl_failed(ferry_ep_t *ep, fy_tl_ep_t *tl_ep, ferry_status_t st); /* 1: handled */
ferry_ep_t *fy_wireup_adopt(ferry_worker_t *w, const void *addr, size_t len);
void fy_wireup_am_cb(void *arg, uint8_t am_id, const void *data, size_t len);
ferry_ep_t *fy_wireup_find_src(ferry_worker_t *w, uint64_t uuid, uint32_t ep_id);
void fy_wireup_forget(ferry_ep_t *ep);
void fy_wireup_cache_free(ferry_worker_t *w);
/* ep.c */
ferry_status_t fy_ep_create_internal(ferry_worker_t *w, const void *addr, size_t len, int is_reply,
                                     ferry_ep_t **ep_p);
void fy_ep_fail(ferry_ep_t *ep, ferry_status_t st);
void fy_ep_add_pending(ferry_ep_t *ep, fy_op_t *op); /* retried by fy_op_start from progress */
fy_op_t *fy_ep_pop_pending(ferry_ep_t *ep);
void fy_op_count(fy_op_t *op);         /* in ep->outstanding (and its bytes in queued_bytes) */
void fy_op_uncount_bytes(fy_op_t *op); /* completed: its bytes leave ep->queued_bytes */
/* An operation in pieces (ep.c): init the parent, submit each piece (INPROGRESS, OK or an
 * error; NO_RESOURCE queues it), then end with the first error or OK: returns the call's
 * result (an error only when no piece went out; the parent is then released). */
void fy_op_parent_init(fy_op_t *parent);
ferry_status_t fy_ep_submit_child(ferry_ep_t *ep, fy_op_t *parent, fy_op_t *op);
ferry_status_t fy_op_parent_end(fy_op_t *parent, ferry_status_t st);
/* A user's send of len bytes would pass FERRY_MAX_QUEUED: refuse it (NO_RESOURCE). */
static inline int fy_ep_queue_full(const ferry_ep_t *ep, size_t len)
{
    return FY_UNLIKELY(ep->queued_bytes != 0 &&
                       ep->queued_bytes + sizeof(fy_op_t) + len > ep->worker->ctx->opts.max_queued);
}
void fy_ep_op_done(ferry_ep_t *ep);
void fy_ep_note_error(ferry_ep_t *ep, ferry_status_t st);
void fy_ep_tl_err_cb(void *arg, fy_tl_ep_t *tl_ep, ferry_status_t status);
void fy_ep_destroy_now(ferry_ep_t *ep);
void fy_ep_close_now(ferry_ep_t *ep);
ferry_status_t fy_ep_flush_start(fy_op_t *op);
void fy_op_child_done(fy_op_t *op, ferry_status_t st); /* op->parent learns op's outcome */
void fy_ep_flush_sub_done(fy_op_t *op, ferry_status_t st);
/* am.c */
void fy_am_recv_cb(void *arg, uint8_t am_id, const void *data, size_t len);
ferry_status_t fy_op_start(fy_op_t *op);
unsigned fy_worker_progress_pending(ferry_worker_t *w);

/* listener.c: sockaddr listeners of a worker, and endpoints by ip:port or a conn request. */
unsigned fy_listener_progress(ferry_worker_t *w, int poll_all);
void fy_listener_destroy_all(ferry_worker_t *w);
ferry_status_t fy_listener_ep_create(ferry_worker_t *w, const ferry_ep_params_t *params,
                                     ferry_ep_t **ep_p);
ferry_status_t fy_ep_submit(ferry_ep_t *ep, fy_op_t *op);
/* tag.c */
void fy_tag_init_worker(ferry_worker_t *w);
void fy_tag_cleanup_worker(ferry_worker_t *w);
ferry_status_t fy_tag_get_retry(fy_op_t *op); /* fy_op_start of an FY_OP_TAG_GET */
void fy_tag_ep_init(ferry_ep_t *ep);    /* its lanes are chosen: pick its rendezvous threshold */
void fy_tag_ep_closing(ferry_ep_t *ep); /* closed here: tell the peer of cancelled sends */
/* rma.c */
void fy_rma_init_worker(ferry_worker_t *w);
ferry_status_t fy_rma_start(fy_op_t *op);
ferry_status_t fy_rma_flush_ping(fy_op_t *flush_op);

static inline fy_op_t *fy_op_of_req(ferry_request_t *req)
{
    return (fy_op_t *)req->priv[0];
}

#endif
