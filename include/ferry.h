/*
 * ferry.h - the one public header of ferry, a byte transfer layer for fast point-to-point
 * communication between processes: active messages, tagged messages, RMA and atomics over
 * shared memory, UDP, TCP and libfabric.
 *
 * Objects, from the outside in:
 *
 *   context   one per process: configuration (FERRY_* environment), transports, memory
 *   worker    a progress engine: interfaces, queues, completions; one thread drives one
 *             (or several at once: FERRY_THREAD_MODE_MULTI; or a progress thread of its own)
 *   address   a worker's address blob, to give to a peer (out of band or via the bootstrap)
 *   endpoint  a connection from a worker to a remote worker; connected lazily on first use
 *   mem/rkey  registered memory and its packed remote key
 *   request   caller-owned storage for one nonblocking operation
 *   world     the processes of a launched job, addressed by rank (ferryrun, mpirun, srun...)
 *
 * THE NONBLOCKING CONTRACT (every call that takes a ferry_request_t *):
 *
 *   FERRY_OK          the operation is done now; its callback is NOT called.
 *   FERRY_INPROGRESS  the operation goes on; its callback is called exactly once, later,
 *                     from ferry_worker_progress() (or a call that progresses) on the
 *                     worker's thread -- with FERRY_PROGRESS_THREAD on, possibly on the
 *                     progress thread, with the worker's lock held; the request storage
 *                     must stay valid until then.
 *   negative          the operation failed now; nothing was started, no callback.
 *
 * A request may be NULL.  Sends and puts then copy whatever they need before returning, so
 * the caller's buffers are free at once (a later failure goes to the endpoint's error
 * handler and to the next ferry_ep_flush).  Calls that must wait for an answer -- get,
 * fetching atomics, flush, close -- then block, progressing their own worker, until done.
 * (In one thread driving two workers, use requests: a blocking call progresses only its own
 * worker.)
 *
 * BACK-PRESSURE: what an endpoint holds for a peer that does not keep up is bounded by
 * FERRY_MAX_QUEUED bytes (default 64m).  It counts every operation the endpoint accepted and
 * has not completed: those waiting for the transport and those the transport is carrying
 * (sent from your buffer, or from ferry's copy when you passed no request), each with its
 * data.  Past it, ferry_am_send, ferry_am_sendv, ferry_tag_send and ferry_tag_sendv (eager),
 * ferry_tag_ssend(v) of an eager size, ferry_put and ferry_putv on that endpoint return
 * FERRY_ERR_NO_RESOURCE: nothing was taken, no callback comes; progress the
 * worker (it drains as the peer reads) and send again.  Nothing already accepted is lost.  One
 * operation may pass the bound when the endpoint holds nothing else (a single message larger
 * than FERRY_MAX_QUEUED is accepted alone).  A transport's copies that would grow with a
 * stalled peer (self's buffer pool) are bounded by FERRY_MAX_QUEUED / 16 per interface.
 * Besides, each transport has fixed buffers of its own, reserved when an interface opens and
 * sized by its own variables (self's 256 KiB ring; shm's cell buffers and outbox, 10 MiB by
 * default; FERRY_TCP_TX_QUEUE; udp's window): a stalled peer costs the sender at most
 * FERRY_MAX_QUEUED + 1/16 + those.
 *
 * SIZES: an AM, tagged message, put or get may be of any size, whatever the transport's own
 * limits: above them ferry splits it (an AM into fragments the receiver gathers before the
 * handler runs, once, with the whole message; an RMA into several transport operations) and
 * the caller still sees one operation with one completion.
 *
 * Parameter structs carry a field_mask: only fields whose bit is set are read, so fields can be
 * added in later versions without breaking callers.  An unknown bit is FERRY_ERR_INVALID_PARAM.
 */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(FERRY_STATIC_ONLY)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1
#define FERRY_VERSION_PATCH 0

/* ---------------------------------------------------------------------------------------- */
/* Status                                                                                     */
/* ---------------------------------------------------------------------------------------- */

typedef enum ferry_status {
    FERRY_OK = 0,                      /* done */
    FERRY_INPROGRESS = 1,              /* started; exactly one callback later */
    FERRY_ERR_NO_MESSAGE = -1,         /* nothing matched (probe) */
    FERRY_ERR_NO_RESOURCE = -2,        /* out of resources, or FERRY_MAX_QUEUED: retry later */
    FERRY_ERR_NO_MEMORY = -3,          /* allocation failed */
    FERRY_ERR_INVALID_PARAM = -4,      /* a bad argument: NULL handle, bad mask, bad size */
    FERRY_ERR_UNSUPPORTED = -5,        /* not implemented, or not by the chosen transports */
    FERRY_ERR_UNREACHABLE = -6,        /* no transport reaches the peer */
    FERRY_ERR_INVALID_ADDR = -7,       /* a malformed or foreign worker address */
    FERRY_ERR_TIMED_OUT = -8,          /* a wait or a peer's answer took too long */
    FERRY_ERR_CANCELED = -9,           /* the operation was canceled */
    FERRY_ERR_TRUNCATED = -10,         /* buffer too small; the needed size is reported */
    FERRY_ERR_CONNECTION_RESET = -11,  /* the peer closed or reset the connection */
    FERRY_ERR_ENDPOINT_TIMEOUT = -12,  /* the peer stopped answering: presumed dead */
    FERRY_ERR_ACCESS_DENIED = -13,     /* wrong remote key or outside a registered region */
    FERRY_ERR_IO = -14,                /* an operating system call failed */
    FERRY_ERR_BUSY = -15,              /* there are events pending (arm), or object in use */
    FERRY_ERR_EXISTS = -16,            /* already registered */
    FERRY_ERR_NO_ELEM = -17,           /* no such element (unknown AM id, handler, device) */
    FERRY_ERR_BAD_CONFIG = -18,        /* a FERRY_* variable has a value that is not accepted */
    FERRY_ERR_NO_DEVICE = -19,         /* no usable device or transport */
    FERRY_ERR_PROTOCOL = -20,          /* a peer sent something malformed */
    FERRY_ERR_BOOTSTRAP = -21,         /* the launcher's key-value service failed */
    FERRY_ERR_MESSAGE_TRUNCATED = -22, /* a received message was longer than the buffer */
    FERRY_ERR_NOT_CONNECTED = -23,     /* endpoint closed or failed */
    FERRY_ERR_LAST = -24
} ferry_status_t;

/** A short, human sentence for a status code (never NULL). */
FERRY_API const char *ferry_status_string(ferry_status_t status);

/** The library version as "major.minor.patch". */
FERRY_API const char *ferry_version(void);

/* ---------------------------------------------------------------------------------------- */
/* Handles                                                                                    */
/* ---------------------------------------------------------------------------------------- */

typedef struct ferry_context ferry_context_t;
typedef struct ferry_worker ferry_worker_t;
typedef struct ferry_ep ferry_ep_t;
typedef struct ferry_mem ferry_mem_t;
typedef struct ferry_rkey ferry_rkey_t;
typedef struct ferry_world ferry_world_t;
typedef struct ferry_request ferry_request_t;
typedef struct ferry_listener ferry_listener_t;
typedef struct ferry_conn_request ferry_conn_request_t;

/** Completion callback of a request: called once, from progress, with the final status. */
typedef void (*ferry_request_cb_t)(ferry_request_t *req, ferry_status_t status);

/** Size of the library-private part of a request, in 8-byte words. */
#define FERRY_REQUEST_PRIV_WORDS 24

/**
 * A request: caller-owned storage for one nonblocking operation.  Set `cb` (may be NULL) and
 * `user_data` before the call; the library never allocates or frees requests.  When the call
 * returned FERRY_INPROGRESS, `status` holds the result once the callback runs; when it
 * returned FERRY_OK or an error, that return value is the result and `status` may be left
 * unwritten (a send done at once on the fast path does not touch the request).  A tag receive
 * completed either way fills `status`, `tag` and `length`.  The storage may be reused once
 * the operation completed.
 */
struct ferry_request {
    ferry_request_cb_t cb;
    void *user_data;
    ferry_status_t status; /* set before cb runs */
    uint64_t tag;          /* tag receive: the sender's tag */
    size_t length;         /* tag receive: bytes received; get: bytes read */
    uint64_t priv[FERRY_REQUEST_PRIV_WORDS];
};

/* ---------------------------------------------------------------------------------------- */
/* Context                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/** Features the application intends to use; transports are chosen to serve them. */
enum ferry_feature {
    FERRY_FEATURE_AM = 1u << 0,
    FERRY_FEATURE_TAG = 1u << 1,
    FERRY_FEATURE_RMA = 1u << 2,
    FERRY_FEATURE_AMO = 1u << 3,
};

enum ferry_context_field {
    FERRY_CONTEXT_FIELD_FEATURES = 1u << 0,
    FERRY_CONTEXT_FIELD_NAME = 1u << 1, /* a name used in logs */
};

typedef struct ferry_context_params {
    uint64_t field_mask;
    uint64_t features; /* ferry_feature bits; default: all */
    const char *name;
} ferry_context_params_t;

/**
 * Create a context: reads FERRY_* configuration, finds transports and devices.
 * params may be NULL (all defaults).  A bad FERRY_* value fails with FERRY_ERR_BAD_CONFIG
 * and a log message naming the variable, its value and what is accepted.
 */
FERRY_API ferry_status_t ferry_context_create(const ferry_context_params_t *params,
                                              ferry_context_t **context_p);
/** Destroy a context; every worker and memory handle must be gone.  NULL is accepted. */
FERRY_API void ferry_context_destroy(ferry_context_t *context);

/** Print the configuration (every variable, value, default and meaning) to a stream. */
FERRY_API void ferry_config_print(const ferry_context_t *context, void *file /* FILE * */);

/* ---------------------------------------------------------------------------------------- */
/* Worker                                                                                     */
/* ---------------------------------------------------------------------------------------- */

/** How ferry_worker_wait() idles: also set by FERRY_WAIT=spin|adaptive|block. */
typedef enum ferry_wait_mode {
    FERRY_WAIT_DEFAULT = 0, /* from FERRY_WAIT; default adaptive */
    FERRY_WAIT_SPIN,        /* poll without pause: lowest latency, burns a core */
    FERRY_WAIT_ADAPTIVE,    /* spin briefly, then yield, then sleep on the event fd */
    FERRY_WAIT_BLOCK,       /* sleep on the event fd at once */
} ferry_wait_mode_t;

/**
 * Who may call on a worker.  SINGLE (the default): one thread at a time, and ferry takes no
 * lock.  MULTI: any number of threads at once; every call on the worker (and on its
 * endpoints) takes the worker's lock, and handlers and callbacks run under it, on the thread
 * whose call progressed the worker.  FERRY_WORKER_THREAD_MULTI=y makes every worker MULTI.
 * A worker with a progress thread (FERRY_PROGRESS_THREAD) takes the same lock in either
 * mode.  Workers of one context may run on different threads in either mode.
 */
typedef enum ferry_thread_mode {
    FERRY_THREAD_MODE_SINGLE = 0,
    FERRY_THREAD_MODE_MULTI = 1,
} ferry_thread_mode_t;

enum ferry_worker_field {
    FERRY_WORKER_FIELD_WAIT_MODE = 1u << 0,
    FERRY_WORKER_FIELD_USER_DATA = 1u << 1,
    FERRY_WORKER_FIELD_THREAD_MODE = 1u << 2,
};

typedef struct ferry_worker_params {
    uint64_t field_mask;
    ferry_wait_mode_t wait_mode;
    void *user_data;
    ferry_thread_mode_t thread_mode;
} ferry_worker_params_t;

FERRY_API ferry_status_t ferry_worker_create(ferry_context_t *context,
                                             const ferry_worker_params_t *params,
                                             ferry_worker_t **worker_p);
/** Destroy a worker: endpoints still open are closed by force; its progress thread, if any,
 *  ends first.  No other thread may be calling on it.  NULL is accepted. */
FERRY_API void ferry_worker_destroy(ferry_worker_t *worker);

/**
 * Make progress: poll every interface, run received message handlers and completion
 * callbacks.  Never blocks.  Returns the number of events processed (0 = nothing to do).
 */
FERRY_API unsigned ferry_worker_progress(ferry_worker_t *worker);

/**
 * Progress until at least one event happened or timeout_ms passed (-1 = no limit), idling as
 * the wait mode says.  Returns FERRY_OK when something happened, FERRY_ERR_TIMED_OUT if not.
 */
FERRY_API ferry_status_t ferry_worker_wait(ferry_worker_t *worker, int timeout_ms);

/**
 * The worker's event file descriptor, for event loops: it becomes readable when there may be
 * work.  Before sleeping on it, call ferry_worker_arm(); FERRY_ERR_BUSY means "work is
 * pending already: progress, do not sleep".  A worker with a progress thread
 * (FERRY_PROGRESS_THREAD) consumes its own events: use callbacks or ferry_worker_wait there.
 */
FERRY_API ferry_status_t ferry_worker_get_fd(ferry_worker_t *worker, int *fd_p);
FERRY_API ferry_status_t ferry_worker_arm(ferry_worker_t *worker);

/** Wake a worker sleeping in ferry_worker_wait() from another thread (with a progress
 *  thread, the wait then returns FERRY_OK). */
FERRY_API ferry_status_t ferry_worker_signal(ferry_worker_t *worker);

/**
 * Copy the worker's address blob into buf.  On entry *len is the size of buf; on return, the
 * size of the address.  If buf is NULL or too small, FERRY_ERR_TRUNCATED and *len = needed.
 */
FERRY_API ferry_status_t ferry_worker_get_address(ferry_worker_t *worker, void *buf, size_t *len);

/**
 * Flush: complete every operation of every endpoint of the worker remotely.  Nonblocking like
 * any call given a request (OK now, or INPROGRESS and one callback when the last endpoint's
 * flush is done); with req == NULL it blocks, progressing this worker.  Completes with the
 * first error of an endpoint flush (see ferry_ep_flush: a refused put is reported here).
 */
FERRY_API ferry_status_t ferry_worker_flush(ferry_worker_t *worker, ferry_request_t *req);

/** One interface a worker has open. */
#define FERRY_WORKER_MAX_IFACES 16
typedef struct ferry_worker_iface_attr {
    const char *transport; /* static strings, valid as long as the worker */
    const char *device;
    size_t max_short, max_bcopy, max_zcopy; /* one AM operation, by copy mode */
    double latency_ns, bandwidth;           /* bytes/s */
} ferry_worker_iface_attr_t;

enum ferry_worker_attr_field {
    FERRY_WORKER_ATTR_FIELD_NAME = 1u << 0,     /* name, uuid */
    FERRY_WORKER_ATTR_FIELD_IFACES = 1u << 1,   /* ifaces, nifaces */
    FERRY_WORKER_ATTR_FIELD_COUNTERS = 1u << 2, /* neps .. drops_malformed */
    FERRY_WORKER_ATTR_FIELD_AM_SIZES = 1u << 3, /* am_id_max, am_header_max, am_rx_max */
};

typedef struct ferry_worker_attr {
    uint64_t field_mask; /* in: the fields wanted (ferry_worker_attr_field bits) */
    char name[64];       /* "<context name> worker <uuid in hex>" */
    uint64_t uuid;
    unsigned nifaces;
    ferry_worker_iface_attr_t ifaces[FERRY_WORKER_MAX_IFACES];
    unsigned neps;                                         /* endpoints open */
    uint64_t tx_msgs, tx_bytes, rx_msgs, rx_bytes, errors; /* summed over open endpoints */
    uint64_t drops_no_handler, drops_unknown_ep, drops_malformed;
    unsigned am_id_max;   /* FERRY_AM_ID_MAX */
    size_t am_header_max; /* FERRY_AM_HEADER_MAX */
    size_t am_rx_max;     /* the largest AM data this worker has received */
} ferry_worker_attr_t;

/** Describe a worker: the fields attr->field_mask asks for (unknown bits:
 *  FERRY_ERR_INVALID_PARAM). */
FERRY_API ferry_status_t ferry_worker_query(const ferry_worker_t *worker,
                                            ferry_worker_attr_t *attr);

/** Print a worker's interfaces and per-endpoint lanes and statistics. */
FERRY_API void ferry_worker_print_info(const ferry_worker_t *worker, void *file /* FILE * */);

/* ---------------------------------------------------------------------------------------- */
/* Endpoint                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/** Called (from progress) when an endpoint fails: the peer died, reset, or timed out. */
typedef void (*ferry_ep_err_cb_t)(void *arg, ferry_ep_t *ep, ferry_status_t status);

enum ferry_ep_field {
    FERRY_EP_FIELD_ADDRESS = 1u << 0, /* address + address_len: a peer's worker address */
    FERRY_EP_FIELD_ERR_HANDLER = 1u << 1,
    FERRY_EP_FIELD_USER_DATA = 1u << 2,
    FERRY_EP_FIELD_SOCKADDR = 1u << 3,     /* sockaddr_ip + sockaddr_port: a peer's listener */
    FERRY_EP_FIELD_CONN_REQUEST = 1u << 4, /* conn_request: accept a listener's request */
};

typedef struct ferry_ep_params {
    uint64_t field_mask;
    const void *address;
    size_t address_len;
    ferry_ep_err_cb_t err_cb;
    void *err_arg;
    void *user_data;
    const char *sockaddr_ip; /* "192.0.2.1" or "2001:db8::1" */
    uint16_t sockaddr_port;
    ferry_conn_request_t *conn_request;
} ferry_ep_params_t;

/**
 * Create an endpoint.  Exactly one of three ways to name the peer:
 *
 *   FERRY_EP_FIELD_ADDRESS       the peer's worker address (given to us out of band).  The
 *                                connection is made lazily: sends may be issued at once.
 *   FERRY_EP_FIELD_SOCKADDR      the ip:port of a peer's ferry_listener (no launcher needed).
 *                                The call exchanges worker addresses with the listener over
 *                                a short TCP connection and so BLOCKS until the server has
 *                                accepted or rejected the request, at most FERRY_CM_TIMEOUT
 *                                (default 10 s); the server must be progressing its worker.
 *                                FERRY_ERR_UNREACHABLE: nothing listens there;
 *                                FERRY_ERR_ACCESS_DENIED: the server rejected us (or has
 *                                another FERRY_JOB_KEY); FERRY_ERR_TIMED_OUT: no answer.
 *   FERRY_EP_FIELD_CONN_REQUEST  accept a request a listener's handler received: the endpoint
 *                                is to that client.  Consumes the request (also on failure).
 *
 * FERRY_ERR_INVALID_ADDR for a malformed address, FERRY_ERR_UNREACHABLE when no transport
 * reaches it, FERRY_ERR_UNSUPPORTED for the sockaddr forms when FERRY_CM excludes sockaddr.
 */
FERRY_API ferry_status_t ferry_ep_create(ferry_worker_t *worker, const ferry_ep_params_t *params,
                                         ferry_ep_t **ep_p);

enum ferry_ep_close_mode {
    FERRY_EP_CLOSE_FLUSH = 0, /* complete every pending operation first */
    FERRY_EP_CLOSE_FORCE = 1, /* drop them: they complete with FERRY_ERR_CANCELED */
};

/** Close an endpoint.  The handle is invalid once this returns OK or the request completes. */
FERRY_API ferry_status_t ferry_ep_close(ferry_ep_t *ep, unsigned mode, ferry_request_t *req);

/**
 * Complete every earlier operation on this endpoint remotely.  A put the target refused
 * (outside the key's region, or a key it no longer knows), or a failed operation that had no
 * request, since the last flush that reported one, makes the flush covering it complete
 * with that error (FERRY_ERR_ACCESS_DENIED for a refused put), once, on every transport; the
 * target's memory was not touched.  This holds even when the put's own call or request
 * already said so: an application that checks only its flushes loses nothing silently.
 */
FERRY_API ferry_status_t ferry_ep_flush(ferry_ep_t *ep, ferry_request_t *req);

/** Order: operations issued after the fence are performed after those before it. */
FERRY_API ferry_status_t ferry_ep_fence(ferry_ep_t *ep);

FERRY_API void *ferry_ep_get_user_data(const ferry_ep_t *ep);
FERRY_API ferry_worker_t *ferry_ep_get_worker(const ferry_ep_t *ep);

/**
 * Per-endpoint counters.  Filled on every transport: tx/rx messages and bytes (what proto
 * handed to and received from its lanes: every AM, fragment, tagged or emulated-RMA message,
 * headers included), errors (operations of this endpoint that completed with an error, and
 * the endpoint's failure), resends (the transport's retransmissions; 0 on transports that
 * never resend: self, shm, tcp).  The transport's own counters (udp: dup_acks..window_max)
 * stay 0 where it has none.
 */
typedef struct ferry_ep_stats {
    uint64_t tx_msgs, tx_bytes, rx_msgs, rx_bytes;
    uint64_t retransmits, dup_acks, fast_retransmits, timeouts;
    uint64_t drops_bad_key, drops_malformed, drops_duplicate, drops_unknown_ep;
    uint64_t rtt_ns, rto_ns; /* current estimates (reliable transports) */
    uint64_t window_used, window_max;
    uint64_t errors; /* operations completed with an error, and the endpoint's failure */
} ferry_ep_stats_t;

FERRY_API ferry_status_t ferry_ep_get_stats(const ferry_ep_t *ep, ferry_ep_stats_t *stats);

/** Lanes: which transport and device carry an endpoint's operations of one class. */
#define FERRY_EP_MAX_LANES 8
typedef struct ferry_ep_lane_attr {
    const char *op_class;  /* "am", "rma", "amo", or "rail" (an extra multi-rail lane) */
    const char *transport; /* "shm", "tcp"...; static strings, valid as long as the worker */
    const char *device;
    int emulated;   /* rma/amo: done over AM at the target, not by the transport */
    const char *cm; /* the connection manager that connected it: "direct", "oob", "am" (the
                     * endpoint answers a peer's wireup), "sockaddr"; NULL: none yet */
} ferry_ep_lane_attr_t;

enum ferry_ep_attr_field {
    FERRY_EP_ATTR_FIELD_PEER_NAME = 1u << 0, /* peer_name, peer_uuid */
    FERRY_EP_ATTR_FIELD_LANES = 1u << 1,     /* lanes, nlanes */
    FERRY_EP_ATTR_FIELD_AM_SIZES = 1u << 2,  /* am_header_max, am_eager_max, am_max */
    FERRY_EP_ATTR_FIELD_STATS = 1u << 3,     /* stats (as ferry_ep_get_stats) */
    FERRY_EP_ATTR_FIELD_STATE = 1u << 4,     /* state */
};

typedef struct ferry_ep_attr {
    uint64_t field_mask; /* in: the fields wanted (ferry_ep_attr_field bits) */
    char peer_name[64];  /* the peer worker, "worker <uuid in hex>" */
    uint64_t peer_uuid;
    unsigned nlanes; /* lanes[0..nlanes): am, rma, amo, then the extra rails */
    ferry_ep_lane_attr_t lanes[FERRY_EP_MAX_LANES];
    size_t am_header_max; /* FERRY_AM_HEADER_MAX */
    size_t am_eager_max;  /* the most header + data one AM operation carries on the AM lane;
                           * larger ones go as fragments (a rendezvous handler is told of
                           * them before their data); 0 while the lane is not chosen yet */
    size_t am_max;        /* the largest AM ferry_am_send accepts: SIZE_MAX (fragments; the
                           * receiver's memory is the bound for a handler that is not a
                           * rendezvous one, which gets the whole message in one buffer) */
    ferry_ep_stats_t stats;
    ferry_status_t state; /* FERRY_OK (connected or connecting), or why it failed/closed */
} ferry_ep_attr_t;

/** Describe an endpoint: the fields attr->field_mask asks for (unknown bits:
 *  FERRY_ERR_INVALID_PARAM). */
FERRY_API ferry_status_t ferry_ep_query(const ferry_ep_t *ep, ferry_ep_attr_t *attr);

/* ---------------------------------------------------------------------------------------- */
/* Listener: accept endpoints by ip:port (client/server programs with no launcher)            */
/* ---------------------------------------------------------------------------------------- */

/**
 * A client asked to connect.  Runs from ferry_worker_progress() of the listener's worker.
 * The application answers, in the handler or later from the same thread, with either
 * ferry_ep_create(FERRY_EP_FIELD_CONN_REQUEST) or ferry_listener_reject(); a request
 * answered neither way is rejected when the listener is destroyed.  The handler may answer its
 * own request only, and must not destroy the listener.
 */
typedef void (*ferry_listener_conn_cb_t)(ferry_conn_request_t *conn_request, void *arg);

enum ferry_listener_field {
    FERRY_LISTENER_FIELD_SOCKADDR = 1u << 0,     /* ip + port (ip NULL or "": every address) */
    FERRY_LISTENER_FIELD_CONN_HANDLER = 1u << 1, /* conn_cb + conn_arg (required) */
};

typedef struct ferry_listener_params {
    uint64_t field_mask;
    const char *ip;
    uint16_t port; /* 0: any free port (ferry_listener_query says which) */
    ferry_listener_conn_cb_t conn_cb;
    void *conn_arg;
} ferry_listener_params_t;

/**
 * Listen on ip:port.  The listening socket is polled by the worker's progress and is part of
 * its event fd.  FERRY_ERR_BUSY: the port is taken; FERRY_ERR_INVALID_PARAM: a malformed ip;
 * FERRY_ERR_UNSUPPORTED: FERRY_CM excludes sockaddr.
 */
FERRY_API ferry_status_t ferry_listener_create(ferry_worker_t *worker,
                                               const ferry_listener_params_t *params,
                                               ferry_listener_t **listener_p);
/** Stop listening; requests not yet answered are rejected.  NULL is accepted. */
FERRY_API void ferry_listener_destroy(ferry_listener_t *listener);

typedef struct ferry_listener_attr {
    uint16_t port; /* the bound port (the one chosen when 0 was asked) */
} ferry_listener_attr_t;

FERRY_API ferry_status_t ferry_listener_query(const ferry_listener_t *listener,
                                              ferry_listener_attr_t *attr);

/** Refuse a request: the client's ferry_ep_create fails with FERRY_ERR_ACCESS_DENIED.
 *  Consumes the request. */
FERRY_API ferry_status_t ferry_listener_reject(ferry_listener_t *listener,
                                               ferry_conn_request_t *conn_request);

/** The client's "ip:port" as the listener saw it, for logs and access decisions. */
FERRY_API ferry_status_t ferry_conn_request_peer(const ferry_conn_request_t *conn_request,
                                                 char *buf, size_t len);

/* ---------------------------------------------------------------------------------------- */
/* Active messages                                                                            */
/* ---------------------------------------------------------------------------------------- */

/** Active message ids: 0 .. FERRY_AM_ID_MAX (16 bits on the wire; a worker's handler table
 *  grows to the highest id registered, so large ids cost nothing until used). */
#define FERRY_AM_ID_MAX 65535
/** The largest user header an AM may carry. */
#define FERRY_AM_HEADER_MAX 1024

/**
 * An active message handler.  Runs from ferry_worker_progress() of the receiving worker.
 * header/data are valid only during the call (copy what you keep).  reply_ep is an endpoint
 * to the sender's worker: the handler may send on it (it is owned by the library and lives
 * as long as the worker or until closed).  Return FERRY_OK.
 */
typedef ferry_status_t (*ferry_am_cb_t)(void *arg, const void *header, size_t header_len,
                                        const void *data, size_t data_len, ferry_ep_t *reply_ep);

/** Register (cb != NULL) or remove (cb == NULL) the handler of an AM id. */
FERRY_API ferry_status_t ferry_worker_set_am_handler(ferry_worker_t *worker, unsigned id,
                                                     ferry_am_cb_t cb, void *arg);

/** A large AM whose data has not arrived yet (see ferry_am_rndv_cb_t). */
typedef struct ferry_am_desc ferry_am_desc_t;

/**
 * An AM rendezvous handler: like ferry_am_cb_t, but a message larger than one operation of
 * its lane (ferry_ep_query's am_eager_max: it travels as fragments) is announced as soon as
 * its header has arrived, with desc != NULL, data == NULL and data_len the size of the data
 * still to come.  The handler (or later code on the worker's thread) then chooses one of:
 *
 *   ferry_am_recv_data(worker, desc, buf, len, req)  place the data in buf: the fragments
 *                                                    are written straight into it as they
 *                                                    arrive (no reassembly buffer);
 *   ferry_am_data_release(worker, desc)              drop the data;
 *   nothing yet                                      keep desc and decide later (fragments
 *                                                    arriving meanwhile are kept by ferry).
 *
 * Each desc must get exactly one recv_data or release; an endpoint failing meanwhile does not
 * free it (recv_data then reports the endpoint's error).  A message that arrives whole (one
 * operation, or every fragment before its turn) comes with desc == NULL and its data, as for
 * ferry_am_cb_t.  header is valid only during the call.  Return FERRY_OK.
 */
typedef ferry_status_t (*ferry_am_rndv_cb_t)(void *arg, const void *header, size_t header_len,
                                             const void *data, size_t data_len,
                                             ferry_am_desc_t *desc, ferry_ep_t *reply_ep);

/** Register (cb != NULL) or remove (cb == NULL) a rendezvous handler for an AM id (it replaces
 *  a handler set by ferry_worker_set_am_handler, and the other way round). */
FERRY_API ferry_status_t ferry_worker_set_am_handler_rndv(ferry_worker_t *worker, unsigned id,
                                                          ferry_am_rndv_cb_t cb, void *arg);

/**
 * Place the data of an announced AM in buf (len >= the data_len the handler was given, else
 * FERRY_ERR_MESSAGE_TRUNCATED and desc stays valid).  Nonblocking contract: FERRY_OK when
 * every byte had arrived (copied now); FERRY_INPROGRESS and req's callback once the last
 * fragment is in buf (req->length = data length); an error (the endpoint failed: its status)
 * and desc is consumed.  With req == NULL the call blocks, progressing the worker, until the
 * data is in buf; that is refused (FERRY_ERR_INVALID_PARAM) inside a rendezvous handler.
 * desc is consumed by any answer but MESSAGE_TRUNCATED or INVALID_PARAM.
 */
FERRY_API ferry_status_t ferry_am_recv_data(ferry_worker_t *worker, ferry_am_desc_t *desc,
                                            void *buf, size_t len, ferry_request_t *req);

/** Drop the data of an announced AM: fragments still to come are discarded.  Consumes desc. */
FERRY_API ferry_status_t ferry_am_data_release(ferry_worker_t *worker, ferry_am_desc_t *desc);

/**
 * Send an active message: a header (up to FERRY_AM_HEADER_MAX bytes) and data, contiguous.
 * With req == NULL the data is copied before return.  An id with no handler at the receiver
 * is dropped there and counted (with a warning naming the id).
 */
FERRY_API ferry_status_t ferry_am_send(ferry_ep_t *ep, unsigned id, const void *header,
                                       size_t header_len, const void *data, size_t data_len,
                                       ferry_request_t *req);

/** The same with the data gathered from an iovec. */
FERRY_API ferry_status_t ferry_am_sendv(ferry_ep_t *ep, unsigned id, const void *header,
                                        size_t header_len, const struct iovec *iov, size_t iovcnt,
                                        ferry_request_t *req);

/* ---------------------------------------------------------------------------------------- */
/* Tagged messages                                                                            */
/* ---------------------------------------------------------------------------------------- */

typedef struct ferry_tag_info {
    uint64_t tag;
    size_t length;
} ferry_tag_info_t;

/**
 * The most pieces an iovec call takes (ferry_am_sendv, ferry_tag_sendv, ferry_tag_recvv,
 * ferry_tag_ssendv, ferry_tag_mrecvv, ferry_putv, ferry_getv); more is FERRY_ERR_INVALID_PARAM.
 * Zero-length pieces are allowed (and skipped); a piece of non-zero length at NULL is
 * FERRY_ERR_INVALID_PARAM.  The iovec array itself is read during the call only: the memory it
 * points to must stay valid until the operation completes (for a send given a request).
 */
#define FERRY_IOV_MAX 16

/** A message taken by ferry_tag_mprobe, to be received by ferry_tag_mrecv. */
typedef struct ferry_tag_message ferry_tag_message_t;

/** Send a tagged message; matched at the receiver by tag & mask, in order per sender. */
FERRY_API ferry_status_t ferry_tag_send(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                                        ferry_request_t *req);
/**
 * The same with the data gathered from up to FERRY_IOV_MAX pieces: one message at the
 * receiver, matched and received like any other (by ferry_tag_recv or ferry_tag_recvv).  Up to
 * the rendezvous threshold the transport gathers the pieces itself, with no copy by ferry, as
 * long as it takes that many in one operation (max_iov less two headers: 14 on shm, tcp and
 * udp); beyond, ferry gathers them into one copy first.  Above the threshold the message goes
 * by RTS/CTS/DATA from the pieces (the get rendezvous needs one region); one non-empty piece
 * is an ordinary send.  With req == NULL the data is copied before return, as ferry_tag_send.
 */
FERRY_API ferry_status_t ferry_tag_sendv(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                         size_t iovcnt, ferry_request_t *req);
/**
 * Synchronous send (MPI's ssend): the request completes only when a receive (or
 * ferry_tag_mprobe) at the peer has matched the message -- for any size, eager ones included
 * (the receiver answers at match).  With req == NULL the call blocks, progressing this worker,
 * until matched: use a request when the receiver is driven by the same thread.  The buffer may
 * be reused when the request completes (an eager one's data is copied at once).
 */
FERRY_API ferry_status_t ferry_tag_ssend(ferry_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                                         ferry_request_t *req);
/** ferry_tag_ssend from up to FERRY_IOV_MAX pieces. */
FERRY_API ferry_status_t ferry_tag_ssendv(ferry_ep_t *ep, uint64_t tag, const struct iovec *iov,
                                          size_t iovcnt, ferry_request_t *req);
/** Post a receive; req->tag and req->length say what arrived. */
FERRY_API ferry_status_t ferry_tag_recv(ferry_worker_t *worker, void *buf, size_t len, uint64_t tag,
                                        uint64_t tag_mask, ferry_request_t *req);
/**
 * Post a receive into up to FERRY_IOV_MAX pieces, filled in order: the message is scattered
 * across them (eager and rendezvous alike); its length is the pieces' total, and a longer
 * message fills them all and completes with FERRY_ERR_MESSAGE_TRUNCATED.
 */
FERRY_API ferry_status_t ferry_tag_recvv(ferry_worker_t *worker, const struct iovec *iov,
                                         size_t iovcnt, uint64_t tag, uint64_t tag_mask,
                                         ferry_request_t *req);
/** Is a matching message waiting?  FERRY_OK and *info, or FERRY_ERR_NO_MESSAGE. */
FERRY_API ferry_status_t ferry_tag_probe(ferry_worker_t *worker, uint64_t tag, uint64_t tag_mask,
                                         ferry_tag_info_t *info);
/**
 * Matched probe (MPI's mprobe): like ferry_tag_probe, but the message found is taken off the
 * unexpected queue -- no later receive or probe sees it -- and given to the caller as *msg_p,
 * to receive with ferry_tag_mrecv (exactly once; the handle is freed by it).  A synchronous
 * sender counts this as the match.  FERRY_ERR_NO_MESSAGE if none waits.  Handles not received
 * are freed with the worker.
 */
FERRY_API ferry_status_t ferry_tag_mprobe(ferry_worker_t *worker, uint64_t tag, uint64_t tag_mask,
                                          ferry_tag_info_t *info, ferry_tag_message_t **msg_p);
/**
 * Receive the message of a ferry_tag_mprobe into buf (eager: done now, FERRY_OK; rendezvous:
 * INPROGRESS, or with req == NULL, blocking).  Truncation as ferry_tag_recv.  A handle that is
 * not one mprobe gave on this worker (or already received) is FERRY_ERR_INVALID_PARAM;
 * FERRY_ERR_CANCELED if the sender closed its endpoint by force before the data moved.
 */
FERRY_API ferry_status_t ferry_tag_mrecv(ferry_worker_t *worker, ferry_tag_message_t *msg,
                                         void *buf, size_t len, ferry_request_t *req);
/** ferry_tag_mrecv into up to FERRY_IOV_MAX pieces. */
FERRY_API ferry_status_t ferry_tag_mrecvv(ferry_worker_t *worker, ferry_tag_message_t *msg,
                                          const struct iovec *iov, size_t iovcnt,
                                          ferry_request_t *req);

/**
 * Cancel a pending request.  FERRY_OK: it completes (once, from progress) with
 * FERRY_ERR_CANCELED -- a receive not yet matched, or a send, put or get not yet started (still
 * queued on its endpoint, waiting for the connection or for credits: nothing of it reaches the
 * peer).  FERRY_ERR_BUSY: it has started (a receive matched, a send on the wire) and completes
 * normally.  FERRY_ERR_NO_ELEM: it completed already.
 */
FERRY_API ferry_status_t ferry_request_cancel(ferry_worker_t *worker, ferry_request_t *req);

/* ---------------------------------------------------------------------------------------- */
/* Memory, remote keys, RMA, atomics                                                          */
/* ---------------------------------------------------------------------------------------- */

enum ferry_mem_access {
    FERRY_MEM_REMOTE_READ = 1u << 0,
    FERRY_MEM_REMOTE_WRITE = 1u << 1,
    FERRY_MEM_REMOTE_ATOMIC = 1u << 2,
};

enum ferry_mem_field {
    FERRY_MEM_FIELD_ADDRESS = 1u << 0,
    FERRY_MEM_FIELD_LENGTH = 1u << 1,
    FERRY_MEM_FIELD_ACCESS = 1u << 2,
    FERRY_MEM_FIELD_FLAGS = 1u << 3,
};

enum ferry_mem_flag {
    /* Allocate the memory (shared, so local peers can map it: RMA and atomics then need no
     * system call, and the data of a message sent from it with a request, past 8 KiB over shm, is
     * read by a local receiver in place, never copied by the sender: its send completes once
     * the receiver's handler has returned).  address is ignored; ferry_mem_query() gives
     * where it is. */
    FERRY_MEM_ALLOCATE = 1u << 0,
};

typedef struct ferry_mem_params {
    uint64_t field_mask;
    void *address;
    size_t length;
    unsigned access; /* ferry_mem_access bits; default: all */
    unsigned flags;  /* ferry_mem_flag bits */
} ferry_mem_params_t;

/** Register (or with FERRY_MEM_ALLOCATE, allocate and register) memory for remote access.
 *  Length is required; address too unless allocating. */
FERRY_API ferry_status_t ferry_mem_map(ferry_context_t *context, const ferry_mem_params_t *params,
                                       ferry_mem_t **mem_p);
FERRY_API ferry_status_t ferry_mem_unmap(ferry_context_t *context, ferry_mem_t *mem);
/** Where a registered region is. */
FERRY_API ferry_status_t ferry_mem_query(const ferry_mem_t *mem, void **address_p,
                                         size_t *length_p);

/** Pack a remote key for a peer (same size/TRUNCATED convention as the worker address). */
FERRY_API ferry_status_t ferry_rkey_pack(ferry_context_t *context, const ferry_mem_t *mem,
                                         void *buf, size_t *len);
/** Unpack a peer's remote key for use on an endpoint to that peer. */
FERRY_API ferry_status_t ferry_rkey_unpack(ferry_ep_t *ep, const void *buf, size_t len,
                                           ferry_rkey_t **rkey_p);
FERRY_API void ferry_rkey_destroy(ferry_rkey_t *rkey);

/**
 * Write len bytes to remote_addr inside the region of rkey.  Remote completion: flush, which
 * also reports a put the target refused (FERRY_ERR_ACCESS_DENIED).
 */
FERRY_API ferry_status_t ferry_put(ferry_ep_t *ep, const void *buf, size_t len,
                                   uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req);
/** Read len bytes from remote_addr.  Needs a request unless it completes at once. */
FERRY_API ferry_status_t ferry_get(ferry_ep_t *ep, void *buf, size_t len, uint64_t remote_addr,
                                   ferry_rkey_t *rkey, ferry_request_t *req);
/**
 * Put gathered from up to FERRY_IOV_MAX local pieces to one contiguous remote range starting
 * at remote_addr (of the pieces' total length): one operation, one completion.  Emulated over
 * AM it is one message the transport gathers; natively one transport put per piece (and per
 * max_rma).  With req == NULL the pieces are copied before return, as for ferry_put.
 */
FERRY_API ferry_status_t ferry_putv(ferry_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                    uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req);
/** Get one contiguous remote range scattered into up to FERRY_IOV_MAX local pieces, in order;
 *  req->length is their total.  Needs a request unless it completes at once. */
FERRY_API ferry_status_t ferry_getv(ferry_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                    uint64_t remote_addr, ferry_rkey_t *rkey, ferry_request_t *req);

typedef enum ferry_atomic_op {
    FERRY_ATOMIC_ADD, /* *r += operand */
    FERRY_ATOMIC_AND,
    FERRY_ATOMIC_OR,
    FERRY_ATOMIC_XOR,
    FERRY_ATOMIC_SWAP,  /* *r = operand */
    FERRY_ATOMIC_CSWAP, /* if (*r == compare) *r = operand */
} ferry_atomic_op_t;

/**
 * A 32- or 64-bit atomic (size 4 or 8) at remote_addr, which must be aligned to size.  If
 * result is not NULL the old value is written there (fetching form; needs a request unless
 * it completes at once).  CSWAP always fetches.
 */
FERRY_API ferry_status_t ferry_atomic(ferry_ep_t *ep, ferry_atomic_op_t op, size_t size,
                                      uint64_t operand, uint64_t compare, void *result,
                                      uint64_t remote_addr, ferry_rkey_t *rkey,
                                      ferry_request_t *req);

/* ---------------------------------------------------------------------------------------- */
/* World: the processes of a launched job                                                     */
/* ---------------------------------------------------------------------------------------- */

/**
 * Join the job this process was started in (ferryrun, Open MPI's mpirun, MPICH's hydra,
 * Slurm's srun --mpi=pmix, or none: a singleton of one).  Publishes the worker's address
 * through the launcher's key-value service; endpoints to ranks are created on first use.
 * FERRY_BOOT=builtin|pmix|pmi1|singleton forces a backend.  Collective: every rank calls it.
 */
FERRY_API ferry_status_t ferry_world_create(ferry_worker_t *worker, ferry_world_t **world_p);
/** Leave the job: collective (every rank calls it; it ends with a barrier), so that no rank
 *  sees another's normal exit as a failure.  Closes the world's endpoints.  One world per
 *  worker. */
FERRY_API void ferry_world_destroy(ferry_world_t *world);
FERRY_API int ferry_world_rank(const ferry_world_t *world);
FERRY_API int ferry_world_size(const ferry_world_t *world);
FERRY_API int ferry_world_local_rank(const ferry_world_t *world);
FERRY_API int ferry_world_local_size(const ferry_world_t *world);
/** The endpoint to a rank (created and connected on first use; owned by the world). */
FERRY_API ferry_status_t ferry_world_ep(ferry_world_t *world, int rank, ferry_ep_t **ep_p);
/** Block (progressing the worker) until every rank has called it. */
FERRY_API ferry_status_t ferry_world_barrier(ferry_world_t *world);
/**
 * Allgather small blobs: every rank gives len bytes (the same len on every rank) and gets
 * every rank's, in rank order, in out (size x len bytes; out[rank] is its own in).  For
 * runtimes building their own tables (rkeys, addresses, ids).  Collective and blocking, up
 * to FERRY_BOOT_TIMEOUT, progressing the worker (like ferry_world_barrier: handlers run and
 * earlier sends move meanwhile).  Each rank sends its blob to every other one over the
 * world's endpoints (creating those not made yet), so it suits setup and small blobs, not a
 * hot path.  A rank whose blob has another length makes every rank that receives it fail with
 * FERRY_ERR_MESSAGE_TRUNCATED; a rank whose endpoint fails makes it fail with that error.
 */
FERRY_API ferry_status_t ferry_world_allgather(ferry_world_t *world, const void *in, size_t len,
                                               void *out);
/** The bootstrap backend's name: "builtin", "pmix", "pmi1" or "singleton". */
FERRY_API const char *ferry_world_backend(const ferry_world_t *world);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_H */
