/*
 * proto_int.h - the private structures of proto/: context, worker, endpoint, operations, and
 * the wire header ferry puts in front of every active message.  Shared by the files of proto/
 * only.
 */
#ifndef FY_PROTO_INT_H
#define FY_PROTO_INT_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

#define FY_MAX_TLS         8
#define FY_MAX_DEVS        8
#define FY_JOB_KEY_DEFAULT 0x66657272794b3031ull /* an unlaunched process's job key */
#define FY_MAX_IFACES      16
#define FY_MAX_IOV         16
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
 *   0               16          27  28  29  32                              63
 *   +---------------+-----------+---+---+---+-------------------------------+
 *   | AM id         | hdr_len   |SRC|INT| 0 |  ep id (receiver's, or the    |
 *   | (16 bits)     | (11 bits) |   |   |   |  sender's with FY_AM_F_SRC)   |
 *   +---------------+-----------+---+---+---+-------------------------------+
 *   [ src worker uuid: 8 bytes, only with FY_AM_F_SRC ]
 *   user header (hdr_len bytes) | data
 *
 * The AM id is a user's (0..FERRY_AM_ID_MAX), or with FY_AM_F_INT one of ferry's own
 * protocols (FY_AM_ID_INTERNAL_BASE + id).  Before the receiver's answer to wireup arrives,
 * the sender does not know its ep id there; it then names itself (uuid, its own ep id) and
 * the receiver finds the ep in a hash map.
 */
typedef struct fy_am_hdr {
    uint16_t id;
    uint16_t len_flags; /* header_len | FY_AM_F_* */
    uint32_t ep_id;
} fy_am_hdr_t;

#define FY_AM_HLEN_MASK 0x7ffu
#define FY_AM_F_SRC     (1u << 11)
#define FY_AM_F_INT     (1u << 12)

/*
 * An AM larger than its lane carries in one transport operation, or above
 * FERRY_RAILS_THRESH to a peer with several rails, goes as fragments, each an AM with id
 * FY_AM_ID_FRAG and this header as its user header (am.c, rails.c).  The fragments may travel
 * on different lanes (rails) and arrive in any order: each carries its offset and its
 * message's number on the ep; the one at offset 0 (the anchor, flag FY_AM_FRAG_ANCHOR) goes
 * on the AM lane and gives the message its place in the ep's order.  The receiver gathers
 * them into one buffer and runs the message's handler once, in order, with the whole header
 * and data.
 *
 *   0                               63
 *   +-------------------------------+
 *   | total: user header + data     |
 *   +-------------------------------+
 *   | offset of this fragment's     |
 *   | data in (user header + data)  |
 *   +-------------------------------+---------------+---------------+
 *   | id (ferry's numbering: user   | user hdr len  | 0             |
 *   | ids, then internal ones)      |               |               |
 *   +-------------------------------+---------------+---------------+
 *   | anchor:1 rail:3 message:28    | 0                             |
 *   +-------------------------------+-------------------------------+
 *   fragment bytes (the first fragment starts with the user header)
 *
 * rail: the sender's rail the fragment went on (rail 0: the AM lane).  With id FY_AM_ID_FRAG
 * itself (never a message's id) the header is an abort, sent on the AM lane when that rail
 * failed at the sender (rails.c): message `message`'s share on `rail` is `total` bytes, and
 * those not arrived yet never will; no bytes follow.
 */
#define FY_AM_ID_FRAG (FY_AM_ID_INTERNAL_BASE + 4)
typedef struct fy_am_frag_hdr {
    uint64_t total;
    uint64_t offset;
    uint32_t id;
    uint16_t user_hdr_len;
    uint16_t reserved;
    uint32_t seq; /* the message's number on the ep, | rail, | FY_AM_FRAG_ANCHOR at offset 0 */
    uint32_t reserved2;
} fy_am_frag_hdr_t;
#define FY_AM_FRAG_ANCHOR     0x80000000u
#define FY_AM_FRAG_RAIL_SHIFT 28
#define FY_AM_FRAG_RAIL_MASK  0x70000000u
#define FY_AM_FRAG_SEQ_MASK   0x0fffffffu

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
#define FY_TAG_THRESH_AUTO    (SIZE_MAX - 1)
#define FY_TAG_STAGED_AUTO    ULONG_MAX /* FERRY_TAG_STAGED_RATE=auto */
#define FY_TAG_STAGED_BUCKETS 10 /* message sizes the staged judge tells apart (tag_rndv.c) */

/* Context configuration (FERRY_*). */
typedef struct fy_ctx_opts {
    fy_config_list_t tls;
    int wait_mode;     /* index into spin, adaptive, block */
    uint64_t spin_ns;  /* adaptive: spin this long, */
    uint64_t yield_ns; /* then yield this long, then sleep */
    int stats;
    int rma_emulate;
    unsigned long amo_native_ops;  /* FERRY_AMO_NATIVE_OPS: bits 0-5 32-bit, 8-13 64-bit */
    char *tag_rndv_thresh_str;     /* "auto" or a size */
    size_t tag_rndv_thresh;        /* parsed; FY_TAG_THRESH_AUTO: per endpoint (tag.c) */
    int tag_rndv_scheme;           /* index into auto, get, am (FY_TAG_SCHEME_*) */
    char *tag_staged_rate_str;     /* FERRY_TAG_STAGED_RATE: "auto" or bytes per ns */
    unsigned long tag_staged_rate; /* parsed; FY_TAG_STAGED_AUTO: against the get (tag_rndv.c) */
    char *rx_copy_movsb_str;       /* FERRY_RX_COPY_MOVSB: "auto" or a size */
    size_t rx_copy_movsb;          /* parsed: fy_copy_rx's movsb_min (util/copy.h) */
    char *job_key;
    size_t max_queued;          /* FERRY_MAX_QUEUED: bytes an ep may hold, queued or in flight */
    uint64_t wireup_timeout_ns; /* a lane that has not answered by then: try the next one */
    fy_config_list_t cms;       /* FERRY_CM */
    uint64_t cm_timeout_ns;     /* FERRY_CM_TIMEOUT */
    unsigned long max_rails;    /* FERRY_MAX_RAILS: lanes bulk AM data is striped over */
    size_t rails_thresh;        /* FERRY_RAILS_THRESH: AMs above it are striped */
    int progress_thread;        /* FERRY_PROGRESS_THREAD: FY_PT_OFF, FY_PT_ON, FY_PT_AUTO */
    uint64_t pt_interval_ns;    /* FERRY_PROGRESS_THREAD_INTERVAL: its longest sleep */
    int thread_multi;           /* FERRY_WORKER_THREAD_MULTI: every worker multi-threaded */
    size_t am_eager_max;        /* FERRY_AM_EAGER_MAX: larger AMs go as fragments (0: lane's) */
    size_t am_recv_max;         /* FERRY_AM_RECV_MAX: largest fragmented AM gathered */
    int am_lane_mode;           /* FERRY_AM_LANE: FY_AM_LANE_* (lanes.c) */
} fy_ctx_opts_t;
enum { FY_AM_LANE_BLEND, FY_AM_LANE_LATENCY };

/* FERRY_PROGRESS_THREAD (index into off, on, auto) */
enum { FY_PT_OFF, FY_PT_ON, FY_PT_AUTO };

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
    uint64_t job_key;          /* FERRY_JOB_KEY, the launcher's job name, or FY_JOB_KEY_DEFAULT */
    fy_region_table_t regions; /* for RMA emulated over AM */
    fy_cm_set_t cms;           /* connection managers FERRY_CM selected */
    pthread_mutex_t lock;
    unsigned nworkers;
};

/* One open interface of a worker. */
typedef struct fy_iface {
    fy_tl_iface_t *tl_iface;
    unsigned (*progress)(fy_tl_iface_t *iface); /* tl->ops->iface_progress, one load away */
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
    uint8_t tl_ep_cm[FY_MAX_IFACES];    /* each one's connection manager (index in ctx->cms) */
    const fy_cm_component_t *via;       /* how the peer's address came: NULL = the application */
    unsigned ntl_eps;
    int rma_native;
    /* ferry_put's short path (rma.c): the RMA lane's put_short and the largest put it takes
     * (0: no native lane with one); set with the lanes (wireup.c) */
    size_t put_short_max;
    ferry_status_t (*put_short)(fy_tl_ep_t *tl_ep, const void *buf, size_t len,
                                uint64_t remote_addr, const void *rkey);
    int amo_native;         /* widths done natively: bit 0 32-bit, bit 1 64-bit (fy_amo_widths) */
    int tag_no_get;         /* the peer cannot read our memory: offer it no get rendezvous */
    size_t tag_rndv_thresh; /* tagged messages above this size use rendezvous */
    /* ... except those up to tag_staged_max, which go eager while the lane stages them (shm's
     * outbox; tag_rndv.c): after one that did not complete at once, or a run of slow copies
     * (tag_staged_slow; judged once tag_staged_warm bytes went, a lasting run backed off
     * tag_staged_backoff times), tag_staged_skip more go by rendezvous.  With the rate auto
     * a copy is judged against what a get of its size class took (tag_get_ns, ns per KiB; 0:
     * not measured yet), and a few of a class go by get now and then to measure it (the last
     * run's start in tag_explore_ns; tag_explore_run more to go). */
    size_t tag_staged_max, tag_staged_warm;
    unsigned tag_staged_skip, tag_staged_slow, tag_staged_backoff;
    int tag_staged_gets;      /* its rendezvous would read by get (the judge can time one) */
    int tag_staged_prev_get;  /* the last staged-size message went by get */
    unsigned tag_explore_run; /* more to send by get in this run of them */
    uint32_t tag_get_ns[FY_TAG_STAGED_BUCKETS];
    uint64_t tag_explore_ns[FY_TAG_STAGED_BUCKETS];
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
    /* fragmented AMs being received, and messages waiting behind them (rails.c) */
    struct fy_rails_rx *frag_rx;
    struct fy_rails_tx *frag_tx; /* the last striped messages sent, per rail (rails.c) */
    uint32_t frag_seq;           /* the next fragmented message's number */
    /* multi-rail (rails.c): rails[0] is the AM lane; weights by bandwidth (MB/s) */
    unsigned nrails;
    fy_lane_t rails[FY_MAX_RAILS];
    uint32_t rail_weight[FY_MAX_RAILS];
};

/* An AM id's handler: cb (the whole message), or rndv_cb (told when the data of a message
 * that came in fragments is still on its way: ferry_worker_set_am_handler_rndv). */
typedef struct fy_am_entry {
    ferry_am_cb_t cb;
    ferry_am_rndv_cb_t rndv_cb;
    void *arg;
} fy_am_entry_t;

/*
 * The worker lock (worker.c).  A worker used by one thread with no progress thread takes no
 * lock: every public entry tests w->mt (one load, one predicted branch).  A multi-threaded
 * worker (FERRY_THREAD_MODE_MULTI) or one with a progress thread serializes every public
 * entry on this lock, which is recursive (a handler that runs under progress may send, a
 * blocking call progresses) and is released whole while ferry_worker_wait sleeps.
 */
typedef struct fy_worker_lock {
    pthread_mutex_t mutex;
    uintptr_t owner; /* &fy_thread_tag of the holder, 0: free (atomic loads/stores) */
    unsigned depth;
} fy_worker_lock_t;

struct ferry_worker {
    ferry_context_t *ctx;
    size_t rx_copy_movsb; /* ctx->opts.rx_copy_movsb, one load from a received message's copy */
    int mt; /* the lock is taken (multi-threaded, or a progress thread); fixed at creation */
    uint64_t uuid;
    int wait_mode;
    void *user_data;
    fy_iface_t ifaces[FY_MAX_IFACES];
    unsigned nifaces;
    int epfd;
    int sigfd;
    int can_sleep; /* every iface has an event fd */
    /* AM handlers: ferry's own ids in a fixed table, the user's in one grown on demand up to
     * the highest id registered (am.c): 16-bit ids cost nothing until used. */
    fy_am_entry_t am_int[FY_AM_ID_INTERNAL_N];
    fy_am_entry_t *am_user;
    unsigned am_user_cap;
    struct ferry_am_desc *am_descs; /* messages handed to rndv handlers, data due (rails.c) */
    unsigned am_in_rndv_cb;         /* inside a rndv handler: no blocking recv_data */
    size_t am_rx_max;               /* the largest AM received (header + data) */
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
    uint64_t amo_emulated; /* atomics sent to the AM emulation (rma.c), for tests and stats */
    int closing;           /* being destroyed: arriving messages are dropped */
    /* Progress (worker.c).  A plain pass polls poll_one, the only interface with endpoints,
     * and nothing else: set while the worker takes no lock and has no listener.  Every
     * FY_IDLE_POLL-th pass, and the next one after a wake-up (idle_left 0), polls every
     * interface instead. */
    fy_iface_t *poll_one;
    unsigned idle_left; /* plain passes before the next full one */
    uint8_t *address;
    size_t address_len;
    /* ops waiting for a reply (emulated get/amo, flush round trips), by id */
    fy_hash_t waiting;
    uint64_t next_wait_id;
    fy_list_t tag_posted; /* posted receives, in order (op->wait_link) */
    fy_list_t tag_unexp;  /* unexpected messages, in arrival order */
    /* messages ferry_tag_mprobe took, waiting for their ferry_tag_mrecv */
    fy_list_t tag_mprobed;
    /* sockaddr listeners (listener.c), polled by progress */
    struct ferry_listener *listeners;
    /* threads (worker.c): the lock, and the progress thread when there is one */
    int thread_mode;       /* FERRY_THREAD_MODE_SINGLE / MULTI, as resolved at creation */
    fy_worker_lock_t lock; /* initialized only when mt */
    int progressing;       /* inside a progress pass: the lock must not be let go */
    int pt_running;        /* a progress thread drives this worker */
    int pt_stop;           /* asks it to end (under the lock) */
    uint64_t pt_events;    /* its passes that did something; ferry_worker_wait watches it */
    pthread_t pt;
    pthread_cond_t pt_cond; /* with lock.mutex: broadcast when pt_events moves */
};

/* Worker lock, for every public call that touches a worker or its endpoints (worker.c).
 * Apply to a new public call as its first line (NULL is accepted: no lock):
 *
 *     FY_WORKER_GUARD(worker);   or   FY_EP_GUARD(ep);
 *
 * held until the function returns, whatever the return; or, for a part of a function,
 * FY_WORKER_LOCK(w); ... FY_WORKER_UNLOCK(w); on every path (w not NULL).  Each costs one
 * load and a predicted branch on a single-threaded worker. */
extern _Thread_local char fy_thread_tag; /* its address names the calling thread */
/* Whether the worker takes its lock: constant 0 in a build without it (cmake
 * -DFERRY_WORKER_LOCK=OFF, which measures what the lock's tests cost; such a build refuses
 * FERRY_THREAD_MODE_MULTI and the progress thread). */
#ifdef FERRY_NO_WORKER_LOCK
#define FY_WORKER_MT(w) ((void)(w), 0)
#else
#define FY_WORKER_MT(w) ((w)->mt)
#endif
void fy_worker_lock_slow(ferry_worker_t *w);
void fy_worker_unlock_slow(ferry_worker_t *w);
static inline ferry_worker_t *fy_worker_lock(ferry_worker_t *w)
{
    if (FY_LIKELY(w == NULL || !FY_WORKER_MT(w)))
        return NULL;
    fy_worker_lock_slow(w);
    return w;
}
static inline void fy_worker_unlock(ferry_worker_t *w)
{
    if (FY_UNLIKELY(FY_WORKER_MT(w)))
        fy_worker_unlock_slow(w);
}
static inline void fy_worker_guard_end(ferry_worker_t **held)
{
    if (FY_UNLIKELY(*held != NULL))
        fy_worker_unlock_slow(*held);
}
#define FY_WORKER_LOCK(w)   ((void)fy_worker_lock(w))
#define FY_WORKER_UNLOCK(w) fy_worker_unlock(w)
#define FY_WORKER_GUARD(w)                                                                         \
    ferry_worker_t *fy_worker_held_ __attribute__((cleanup(fy_worker_guard_end), unused)) =        \
        fy_worker_lock(w)
#define FY_EP_GUARD(ep) FY_WORKER_GUARD((ep) != NULL ? (ep)->worker : NULL)

/*
 * An operation in flight.  Allocated from worker->ops; the user's request points to it.
 *
 * Each type carries its own behaviour in op.c's const table (fy_op_ops_t): how it starts (or
 * is retried from the pending queue) and what it releases when it ends, so nothing switches
 * on the type to find out.  A receive changes type as its protocol moves on (posted, reading
 * by get, waiting for DATA); its per-type part stays the same struct.
 */
typedef enum fy_op_type {
    FY_OP_AM,          /* an AM (or wireup message), or the parent of a fragmented one */
    FY_OP_PUT,         /* a native put, or the parent of one split by max_rma */
    FY_OP_GET,         /* a native get, or the parent of one split by max_rma */
    FY_OP_AMO,         /* a native atomic */
    FY_OP_FLUSH,       /* an endpoint's flush, or a worker flush (the parent of those) */
    FY_OP_CLOSE,       /* the flush of a close: closes the endpoint when it completes */
    FY_OP_GET_EMU,     /* a get emulated over AM, waiting for its reply (rma_emu.c) */
    FY_OP_AMO_EMU,     /* an atomic emulated over AM, waiting for its reply (rma_emu.c) */
    FY_OP_TAG_SEND,    /* a rendezvous send waiting for the receiver's CTS or ATS */
    FY_OP_TAG_RECV,    /* a posted receive, or one waiting for rendezvous DATA */
    FY_OP_TAG_GET,     /* a matched receive reading a rendezvous message from the sender */
    FY_OP_WIREUP_HOLD, /* holds the ep's later ops until its lane answers (wireup.c) */
    FY_OP_TYPE_COUNT
} fy_op_type_t;

typedef struct fy_op fy_op_t;

/*
 * What an operation type does (op.c), from start to end:
 *   start:   begin (or retry, from the pending queue) on its lane: OK (done, no callback),
 *            INPROGRESS (its completion comes later), NO_RESOURCE (queue it), or an error.
 *   data:    the caller's bytes it carries, counted against FERRY_MAX_QUEUED; NULL: none.
 *   finish:  what its end does besides the common steps of fy_op_finish, before the user's
 *            callback (a close's flush closes the endpoint and sets op->ep NULL); NULL: none.
 *   fail:    how it ends when its endpoint fails while it waits for the peer's answer; NULL:
 *            it completes with the endpoint's error from progress.
 *   release: drop what the op holds (a registration, an unpacked key) before it is recycled;
 *            NULL if it holds nothing of its own.
 *   flags:   FY_OP_F_*.
 */
typedef struct fy_op_ops {
    const char *name;
    ferry_status_t (*start)(fy_op_t *op);
    void (*release)(fy_op_t *op);
    size_t (*data)(const fy_op_t *op);
    void (*finish)(fy_op_t *op);
    void (*fail)(fy_op_t *op, ferry_status_t st);
    unsigned flags;
} fy_op_ops_t;
#define FY_OP_F_UNCOUNTED 1u /* not among its ep's outstanding ops (a flush waits for those) */
#define FY_OP_F_FLUSH_ERR 2u /* its failure is the next flush's news too, even with a request */
#define FY_OP_F_UNQUEUE   4u /* cancel drops it while it waits on its ep's queue (not started) */
#define FY_OP_F_ONE_MESSAGE                                                                        \
    8u /* as a parent: its pieces make one message, a cancelled one fails it */

/* FY_OP_PUT, FY_OP_GET, FY_OP_GET_EMU: local buffer and remote range */
typedef struct fy_op_rma {
    ferry_rkey_t *rkey;
    uint64_t remote_addr;
    void *buf;
    size_t len;
} fy_op_rma_t;

/* FY_OP_AMO, FY_OP_AMO_EMU */
typedef struct fy_op_amo {
    ferry_rkey_t *rkey;
    uint64_t remote_addr;
    ferry_atomic_op_t op;
    size_t size; /* 4 or 8 */
    uint64_t operand, compare;
    void *result; /* the old value, or NULL */
} fy_op_amo_t;

/* FY_OP_TAG_SEND: a rendezvous send, holding the caller's buffer (and its registration with
 * the AM lane's transport when it offered the get scheme) until the receiver is done. */
typedef struct fy_op_tag_send {
    const void *buf;
    size_t len;
    uint64_t tag;
    void *memh;          /* registration of buf, or NULL */
    fy_ctx_tl_t *reg_tl; /* the transport memh belongs to */
    size_t iovcnt;       /* several pieces (sendv): buf is their iovec array, in op->copy */
    uint64_t t0;         /* a send of a staged size that went by get: when (the staged judge) */
} fy_op_tag_send_t;

/* FY_OP_TAG_RECV, FY_OP_TAG_GET: a receive, posted (tag, tag_mask) and then matched (the
 * message's tag, length and the sender's wait id); reading by get, the sender's buffer and
 * the unpacked key of the AM lane's transport. */
typedef struct fy_op_tag_recv {
    void *buf;
    size_t len;
    uint64_t tag, tag_mask; /* posted */
    uint64_t msg_tag;       /* matched */
    size_t msg_len;
    uint64_t peer_wait_id;
    uint64_t remote_addr; /* get: the sender's buffer, */
    size_t offset;        /* bytes asked for so far, */
    void *rkey;           /* its key unpacked by key_tl, or NULL */
    fy_ctx_tl_t *key_tl;
    /* several pieces (recvv): buf is their iovec array (in op->copy), len their total */
    size_t iovcnt;
} fy_op_tag_recv_t;

struct fy_op {
    fy_qelem_t q;
    fy_tl_comp_t comp;
    fy_list_t wait_link;
    ferry_request_t *req;
    ferry_ep_t *ep;
    ferry_worker_t *worker;
    fy_op_type_t type;
    ferry_status_t status;
    int counted;      /* in ep->outstanding */
    int nsub;         /* sub-operations still running (pieces, flush of several lanes, reads) */
    fy_op_t *parent;  /* the op this one is a piece of (split send, worker flush) */
    size_t qcost;     /* counted in ep->queued_bytes from submission to completion */
    uint64_t wait_id; /* in worker->waiting while an answer is due */
    void *copy;       /* owned copy of the data (AM, put) when the caller gave no request */
    fy_lane_t *rail;  /* an AM fragment's or RMA piece's rail (rails.c); NULL: the ep's lane */
    union {
        fy_op_rma_t rma;
        fy_op_amo_t amo;
        fy_op_tag_send_t tag_send;
        fy_op_tag_recv_t tag_recv;
        /* FY_OP_AM: what to hand the transport, kept for a retry after NO_RESOURCE.
         * fy_op_get() clears everything before iov; iov[0..iovcnt) and hdr[0..hdr_len) are
         * written before use. */
        struct {
            unsigned am_id;
            size_t iovcnt;
            size_t hdr_len;   /* proto header + user header */
            size_t proto_len; /* proto header alone */
            struct iovec iov[FY_MAX_IOV + 2];
            uint8_t hdr[16 + FERRY_AM_HEADER_MAX]; /* proto header + user header (or frag) */
        };
    };
};

/* The bytes fy_op_get() clears: the common part and every per-type struct but the AM's
 * buffers. */
#define FY_OP_MAX2(a, b) ((a) > (b) ? (a) : (b))
#define FY_OP_CLEAR_LEN                                                                            \
    (offsetof(fy_op_t, rma) +                                                                      \
     FY_OP_MAX2(FY_OP_MAX2(sizeof(fy_op_rma_t), sizeof(fy_op_amo_t)),                              \
                FY_OP_MAX2(FY_OP_MAX2(sizeof(fy_op_tag_send_t), sizeof(fy_op_tag_recv_t)),         \
                           offsetof(fy_op_t, iov) - offsetof(fy_op_t, rma))))

/* Clear those bytes in 16-byte stores.  A memset of this size compiles (gcc -O3, generic
 * x86-64) to `rep stosq`, whose start-up cost here (AMD EPYC) is ~150 cycles against ~25
 * for the stores: one per operation, so one per posted tagged receive.  The empty asm keeps
 * the compiler from turning the loop back into that memset. */
static inline void fy_op_clear(fy_op_t *op)
{
    typedef uint64_t fy_op_v2_t __attribute__((vector_size(16), aligned(8), may_alias));
    fy_op_v2_t *q = (fy_op_v2_t *)(void *)op;
    for (size_t i = 0; i < FY_OP_CLEAR_LEN / 16; i++) {
        q[i] = (fy_op_v2_t){0, 0};
        __asm__("" : : "r"(q + i));
    }
    if (FY_OP_CLEAR_LEN % 16 != 0)
        memset((char *)op + FY_OP_CLEAR_LEN / 16 * 16, 0, FY_OP_CLEAR_LEN % 16);
}

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

/* context.c */
extern const fy_config_table_t fy_ctx_config_table;
/* worker.c */
ferry_status_t fy_worker_ep_alloc(ferry_worker_t *w, ferry_ep_t **ep_p);
void fy_worker_ep_free(ferry_worker_t *w, ferry_ep_t *ep);
ferry_ep_t *fy_worker_ep_lookup(ferry_worker_t *w, uint32_t id);
/* The same, inline for the receive fast path (am.c) */
static inline ferry_ep_t *fy_worker_ep_at(const ferry_worker_t *w, uint32_t id)
{
    return FY_LIKELY(id < w->eps_cap) ? w->eps[id] : NULL;
}
void fy_worker_complete_later(ferry_worker_t *w, fy_op_t *op, ferry_status_t st);
/* Choose again what a plain progress pass polls (w->poll_one), after an interface gained or
 * lost its first or last endpoint, or a listener came or went (worker.c). */
void fy_worker_poll_plan(ferry_worker_t *w);
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
/* wireup_lanes.c: an endpoint's lanes made from a plan (wireup.c connects and falls back). */
#define FY_WIREUP_MAX_FAILS 16 /* failed candidates remembered per endpoint */
/* Choose the lanes without the failed candidates and make their transport endpoints (planned:
 * *plan is made already); a candidate whose endpoint cannot be made joins fails.  FERRY_OK,
 * FERRY_ERR_UNREACHABLE when no candidate is left, or FERRY_ERR_NO_MEMORY. */
ferry_status_t fy_wireup_choose(ferry_ep_t *ep, const fy_remote_addr_t *ra, fy_lane_fail_t *fails,
                                unsigned *nfails, int only_local, fy_lane_plan_t *plan,
                                int *lane_bit, int planned);
void fy_wireup_destroy_tl_eps(ferry_ep_t *ep);
void fy_wireup_add_fail(fy_lane_fail_t *fails, unsigned *nfails, unsigned bit, const char *why);
/* A candidate (fy_lane_pair_bit) named for messages: "tcp <address> (eth0->eth0)". */
void fy_wireup_cand_label(ferry_worker_t *w, const fy_remote_addr_t *ra, unsigned bit, char *buf,
                          size_t len);
/* Every rejected candidate of the plan and why, "; "-separated. */
void fy_wireup_plan_why(ferry_worker_t *w, const fy_remote_addr_t *ra, const fy_lane_plan_t *plan,
                        char *buf, size_t len);
void fy_wireup_log_plan(ferry_ep_t *ep, const fy_remote_addr_t *ra, const fy_lane_plan_t *plan);
int fy_wireup_is_loopback(const fy_iface_t *fi); /* the interface's device is a loopback one */
/* wireup_peers.c: the endpoint for messages from (uuid, ep id), and the one per peer to adopt
 * (a reply endpoint) or to pair with (ours, still waiting for its answer) */
ferry_ep_t *fy_wireup_find_src(ferry_worker_t *w, uint64_t uuid, uint32_t ep_id);
ferry_status_t fy_wireup_src_note(ferry_worker_t *w, ferry_ep_t *ep);
void fy_wireup_src_drop(ferry_ep_t *ep);
void fy_wireup_peer_note(ferry_ep_t *ep, int reply);
void fy_wireup_peer_drop(ferry_ep_t *ep);
ferry_ep_t *fy_wireup_find_unpaired(ferry_worker_t *w, uint64_t uuid);
void fy_wireup_forget(ferry_ep_t *ep);
void fy_wireup_cache_free(ferry_worker_t *w);
/* Destroy the endpoint's i-th transport endpoint through the manager that connected it. */
void fy_wireup_tl_ep_destroy(ferry_ep_t *ep, unsigned i);
/* The name of the manager that connected a transport endpoint of ep, or NULL. */
const char *fy_wireup_tl_ep_cm(const ferry_ep_t *ep, const fy_tl_ep_t *tl_ep);
/* ep.c.  via: the connection manager the peer's address came through (NULL: the application
 * gave it; fy_cm_am: a peer's wireup, which makes a reply endpoint). */
ferry_status_t fy_ep_create_internal(ferry_worker_t *w, const void *addr, size_t len,
                                     const fy_cm_component_t *via, ferry_ep_t **ep_p);
/* ferry_ep_create for an address that came through via (world.c: oob). */
ferry_status_t fy_ep_create_via(ferry_worker_t *w, const ferry_ep_params_t *params,
                                const fy_cm_component_t *via, ferry_ep_t **ep_p);
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
void fy_ep_close_finish(fy_op_t *op); /* finish of an FY_OP_CLOSE: closes its endpoint */
/* am.c */
static inline fy_am_entry_t *fy_am_entry(ferry_worker_t *w, unsigned id)
{
    if (FY_LIKELY(id < w->am_user_cap))
        return &w->am_user[id];
    if (id - FY_AM_ID_INTERNAL_BASE < FY_AM_ID_INTERNAL_N)
        return &w->am_int[id - FY_AM_ID_INTERNAL_BASE];
    return NULL; /* a user id never registered */
}
void fy_am_cleanup_worker(ferry_worker_t *w); /* the handler table and unclaimed descriptors */
size_t fy_am_eager_max(const ferry_ep_t *ep); /* the most one AM operation carries on ep */
void fy_am_recv_cb(void *arg, uint8_t am_id, const void *data, size_t len);
void fy_am_recv_split_cb(void *arg, uint8_t am_id, const void *head, size_t head_len,
                         const void *data, size_t data_len);
ferry_status_t fy_am_op_start(fy_op_t *op); /* start of an FY_OP_AM */
size_t fy_am_op_data(const fy_op_t *op);    /* data of an FY_OP_AM: headers + payload */
unsigned fy_worker_progress_pending(ferry_worker_t *w);
/* op.c: the table of operation types */
extern const fy_op_ops_t *const fy_op_ops[FY_OP_TYPE_COUNT];
static inline ferry_status_t fy_op_start(fy_op_t *op)
{
    return fy_op_ops[op->type]->start(op);
}
static inline unsigned fy_op_flags(const fy_op_t *op)
{
    return fy_op_ops[op->type]->flags;
}
static inline void fy_op_release(fy_op_t *op) /* drop what the op holds; it lives on */
{
    if (fy_op_ops[op->type]->release != NULL)
        fy_op_ops[op->type]->release(op);
}

/* listener.c: sockaddr listeners of a worker, and endpoints by ip:port or a conn request. */
unsigned fy_listener_progress(ferry_worker_t *w, int poll_all);
void fy_listener_destroy_all(ferry_worker_t *w);
ferry_status_t fy_listener_ep_create(ferry_worker_t *w, const ferry_ep_params_t *params,
                                     ferry_ep_t **ep_p);
ferry_status_t fy_ep_submit(ferry_ep_t *ep, fy_op_t *op);
/* tag*.c (tag_int.h holds what the tag files share) */
/* An iovec call's pieces checked (NULL, more than FY_MAX_IOV: -1, logged naming the call) and
 * the non-empty ones copied to v[FY_MAX_IOV]: their count. */
long fy_iov_take(const char *call, const struct iovec *iov, size_t iovcnt, struct iovec *v);
void fy_tag_init_worker(ferry_worker_t *w);
void fy_tag_cleanup_worker(ferry_worker_t *w);
void fy_tag_ep_init(ferry_ep_t *ep);    /* its lanes are chosen: pick its rendezvous threshold */
void fy_tag_ep_closing(ferry_ep_t *ep); /* closed here: tell the peer of cancelled sends */
/* rails.c: multi-rail fragments.  A fragmented AM: fy_rails_begin numbers it and spreads its
 * bytes over the rails, fy_rails_next gives each fragment (0 when done); the receiver passes
 * each fragment to fy_rails_frag_recv, and every other message of an ep with frag_rx to
 * fy_rails_hold (1: held behind an incomplete message, delivered later in order). */
typedef struct fy_rails_rx fy_rails_rx_t;
typedef struct fy_rails_cursor {
    unsigned n, turn;
    uint32_t seq;
    size_t pos[FY_MAX_RAILS], end[FY_MAX_RAILS], room[FY_MAX_RAILS];
    unsigned rail[FY_MAX_RAILS];
    fy_lane_t *lane[FY_MAX_RAILS]; /* RMA: the lane of each slot (NULL: the ep's RMA lane) */
} fy_rails_cursor_t;
int fy_rails_stripe(const ferry_ep_t *ep, size_t total);
void fy_rails_begin(ferry_ep_t *ep, size_t total, size_t room, fy_rails_cursor_t *c);
size_t fy_rails_next(ferry_ep_t *ep, fy_rails_cursor_t *c, size_t *off, fy_lane_t **lane,
                     uint32_t *tag);
/* RMA: a put/get of len bytes goes over several lanes; its pieces (fy_rails_next gives each,
 * with the lane: NULL is the RMA lane) */
int fy_rails_stripe_rma(ferry_ep_t *ep, const ferry_rkey_t *rkey, size_t len);
void fy_rails_begin_rma(ferry_ep_t *ep, const ferry_rkey_t *rkey, size_t len, size_t max,
                        fy_rails_cursor_t *c);
void fy_rails_frag_recv(ferry_worker_t *w, ferry_ep_t *ep, const uint8_t *hdr, size_t hdr_len,
                        const uint8_t *data, size_t len);
int fy_rails_hold(ferry_worker_t *w, ferry_ep_t *ep, unsigned id, const uint8_t *hdr,
                  size_t hdr_len, const uint8_t *data, size_t len);
void fy_rails_rx_free(ferry_ep_t *ep);
/* AM rendezvous: ep failed or is going away: requests placing its messages' data complete
 * with st, kept descriptors report it */
void fy_rails_rndv_ep_gone(ferry_ep_t *ep, ferry_status_t st);
void fy_rails_rndv_free_all(ferry_worker_t *w);
/* wireup: the plan's extra rails got the lanes lanes[0..n) (rails 1..n) */
void fy_rails_set(ferry_ep_t *ep, const fy_lane_plan_t *plan, const fy_lane_t *lanes, unsigned n);
int fy_rails_tl_failed(ferry_ep_t *ep, fy_tl_ep_t *tl_ep); /* 1: a rail alone, dropped */
extern const fy_op_ops_t fy_tag_send_op_ops, fy_tag_get_op_ops;
/* rma.c: native put, get, atomics */
unsigned fy_amo_widths(const ferry_worker_t *w, const fy_tl_iface_attr_t *attr,
                       uint64_t pair_caps); /* widths native on a lane: bit 0 32, bit 1 64 */
extern const fy_op_ops_t fy_rma_put_op_ops, fy_rma_get_op_ops, fy_rma_amo_op_ops;
/* rma_emu.c: put, get and atomics emulated over AM, and the flush's PING */
void fy_rma_init_worker(ferry_worker_t *w); /* the emulation's AM handler */
ferry_status_t fy_rma_emu_put(ferry_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                              ferry_rkey_t *rkey, ferry_request_t *req);
/* the same from several pieces (one AM, gathered by the transport) */
ferry_status_t fy_rma_emu_putv(ferry_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                               uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req);
ferry_status_t
fy_rma_emu_start(fy_op_t *op); /* an FY_OP_GET_EMU / AMO_EMU, op is released on error */
ferry_status_t fy_rma_flush_ping(fy_op_t *flush_op);
extern const fy_op_ops_t fy_rma_get_emu_op_ops, fy_rma_amo_emu_op_ops;

static inline fy_op_t *fy_op_of_req(ferry_request_t *req)
{
    return (fy_op_t *)req->priv[0];
}

/* A request of the library's own, on the stack of a blocking call: the fields the library
 * reads or the caller would set, cleared one by one (a memset of the whole request, priv
 * words included, is `rep stosq`: ~150 cycles here, more than a small get or receive). */
static inline void fy_request_local_init(ferry_request_t *r)
{
    r->cb = NULL;
    r->user_data = NULL;
    r->status = FERRY_OK;
    r->tag = 0;
    r->length = 0;
    r->priv[0] = 0;
}

#endif
