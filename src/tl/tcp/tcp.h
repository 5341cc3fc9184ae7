/*
 * tcp.h - internals of the tcp transport: wire formats, objects, and the functions the
 * tcp_*.c files share.  Nothing outside src/tl/tcp includes this file.
 *
 * Objects:
 *   md     config (FERRY_TCP_*), the selected interfaces, the region table for RMA.
 *   iface  one listening socket on one interface address, one epoll set (the event fd),
 *          the peers, handshakes in progress.
 *   peer   the connection to one remote iface: `nlinks` TCP sockets (links).  Link 0 carries
 *          every frame in order; links 1.. carry only CHUNKs of large striped frames.  A peer
 *          is shared by the local eps to that remote iface and outlives them: it is created
 *          by ep_create or by accepting the remote's connection, and ends when the iface
 *          closes, the remote closes, or the connection fails.
 *   ep     a handle on a peer (proto's view); what it sends goes on the peer's links.
 *   tx     one frame (or one piece of a striped frame) waiting in a link's send queue.
 *   op     an RMA or flush request waiting for the peer's answer (FIFO: answers come in
 *          request order, because the target handles link 0 in order).
 */
#ifndef FY_TL_TCP_H
#define FY_TL_TCP_H

#include <stdint.h>
#include <sys/uio.h>

#include "tl/swmd.h"
#include "tl/tl.h"
#include "util/list.h"
#include "util/hash.h"
#include "util/mpool.h"
#include "util/netif.h"
#include "util/region.h"

#define FY_TCP_MAX_LINKS  8
#define FY_TCP_MAX_IOV    16          /* payload iov entries of one operation */
#define FY_TCP_HDR_MAX    48          /* base + largest extension + stripe extension */
#define FY_TCP_SHORT_COPY 4096        /* queued copies up to this size come from a pool */
#define FY_TCP_MAX_BCOPY  (64 * 1024) /* am_bcopy: one copy, written at once or queued */
#define FY_TCP_MAGIC      0x43545946u /* "FYTC" in little-endian memory order */
#define FY_TCP_VERSION    1

/* Accept back-off (see fy_tcp_iface_t.accept_resume_ns). */
#define FY_TCP_ACCEPT_BACKOFF_MIN_NS (1000ull * 1000)             /* 1 ms */
#define FY_TCP_ACCEPT_BACKOFF_MAX_NS (100ull * 1000 * 1000)       /* 100 ms */
#define FY_TCP_ACCEPT_LOG_NS         (10ull * 1000 * 1000 * 1000) /* one warning per 10 s */

/* ---- handshake ------------------------------------------------------------------------ *
 * The first bytes on every new link, in both directions (88 bytes, little endian):
 *
 *  0               4       6   7   8   9                 16
 * +---------------+-------+---+---+---+-----------------+
 * | magic "FYTC"  |version|knd|lnk|nlk|  reserved (7)   |   kind: HELLO (connector),
 * +---------------+-------+---+---+---+-----------------+         ACCEPT / REJECT (answer)
 * | job_key (8)                       | src_iface (8)   |   src_iface: sender's iface id
 * +-----------------------------------+-----------------+   dst_iface: the id expected at
 * | dst_iface (8)                     | conn_id (8)     |              the other end
 * +-----------------------------------+-----------------+   conn_id: nonce of one connect
 * | worker_uuid (8)                   | src_addr (20)   |            attempt (all links)
 * +-----------------------------------+-----------------+   src_addr: sender's listening
 * | reserved (4)  | host_id (8)       |                           address (fy_netif_addr_t)
 * +---------------+-------------------+                     host_id: fy_netif_host_id() of
 *                                                                     the sender
 * A connector sends HELLO and sends nothing else until ACCEPT; the acceptor may send frames
 * right after its ACCEPT.  Anything else (wrong magic, version, job key or iface id) closes
 * the socket and is counted.
 */
enum { FY_TCP_HELLO = 1, FY_TCP_ACCEPT = 2, FY_TCP_REJECT = 3 };

typedef struct fy_tcp_hello {
    uint32_t magic;
    uint16_t version;
    uint8_t kind;
    uint8_t link;
    uint8_t nlinks;
    uint8_t rsvd[7];
    uint64_t job_key;
    uint64_t src_iface;
    uint64_t dst_iface;
    uint64_t conn_id;
    uint64_t worker_uuid;
    fy_netif_addr_t src_addr;
    uint32_t rsvd2;
    uint64_t host_id;
} fy_tcp_hello_t;

/* ---- frames ----------------------------------------------------------------------------- *
 * Every frame starts with an 8-byte header, then a fixed extension chosen by the type (and
 * the STRIPED flag), then `length` payload bytes for the types that carry data:
 *
 *  0       1       2       3       4                               8
 * +-------+-------+-------+-------+-------------------------------+
 * | type  | am_id | flags | rsvd  | length (u32, little endian)   |
 * +-------+-------+-------+-------+-------------------------------+
 *
 *  type      ext  payload   meaning
 *  AM          0  length    active message am_id (<= FY_TL_AM_ID_MAX)
 *  PUT        32  length    write payload at remote_addr (rma ext)
 *  GET_REQ    32  none      read `length` bytes at remote_addr (rma ext)
 *  GET_RESP   16  length    answer to a GET_REQ (ack ext: status, then the data if OK)
 *  ACK        16  none      answer to a PUT or FLUSH (ack ext: status)
 *  FLUSH      16  none      answered by ACK once every earlier frame is handled
 *  CHUNK      16  length    a piece of a striped frame, on links 1.. only (chunk ext)
 *  CLOSE       0  none      the sender's iface is closing: no more frames
 *
 *  rma ext:  op_id u64 | remote_addr u64 | region_id u64 | key u64
 *  ack ext:  op_id u64 | status i32 | reserved u32
 *  chunk ext: seq u32 | reserved u32 | offset u64
 *  stripe ext (8 more bytes after the type's ext when flags & STRIPED; AM, PUT, GET_RESP):
 *            seq u32 | len0 u32     -- len0 payload bytes follow here on link 0, the rest
 *                                      arrives as CHUNKs of the same seq on the other links
 * op_id is the initiator's request number; answers come back in request order and must
 * carry the id expected next.  A malformed header drops the connection (FERRY_ERR_PROTOCOL
 * to its eps); other connections are not affected.
 */
enum fy_tcp_type {
    FY_TCP_AM = 1,
    FY_TCP_PUT,
    FY_TCP_GET_REQ,
    FY_TCP_GET_RESP,
    FY_TCP_ACK,
    FY_TCP_FLUSH,
    FY_TCP_CHUNK,
    FY_TCP_CLOSE,
    FY_TCP_TYPE_MAX
};
#define FY_TCP_F_STRIPED 0x01

typedef struct fy_tcp_hdr {
    uint8_t type;
    uint8_t am_id;
    uint8_t flags;
    uint8_t rsvd;
    uint32_t length;
} fy_tcp_hdr_t;

typedef struct fy_tcp_rma_ext {
    uint64_t op_id;
    uint64_t remote_addr;
    uint64_t region_id;
    uint64_t key;
} fy_tcp_rma_ext_t;

typedef struct fy_tcp_ack_ext {
    uint64_t op_id;
    int32_t status;
    uint32_t rsvd;
} fy_tcp_ack_ext_t;

typedef struct fy_tcp_chunk_ext {
    uint32_t seq;
    uint32_t rsvd;
    uint64_t offset;
} fy_tcp_chunk_ext_t;

typedef struct fy_tcp_stripe_ext {
    uint32_t seq;
    uint32_t len0;
} fy_tcp_stripe_ext_t;

/* ---- addresses -------------------------------------------------------------------------- */

/* device address: which host (and network namespace) and which interface address */
typedef struct fy_tcp_dev_addr {
    uint64_t host_id;
    fy_netif_addr_t addr; /* port 0 */
    uint32_t rsvd;
} fy_tcp_dev_addr_t;

/* iface address: the listening port and the iface's random id */
typedef struct fy_tcp_iface_addr {
    uint64_t iface_id;
    uint16_t port_be;
    uint16_t rsvd[3];
} fy_tcp_iface_addr_t;

/* ---- configuration (FERRY_TCP_*) -------------------------------------------------------- */

typedef struct fy_tcp_config {
    char *if_include;
    char *if_exclude;
    int af;              /* 0 auto (IPv4 first), 1 ipv4, 2 ipv6 */
    unsigned long links; /* 0 = auto: 1 to a peer on this host, 3 to another host */
    size_t stripe_min;
    size_t sndbuf, rcvbuf; /* 0 = kernel autotuning */
    size_t rx_buf;
    size_t tx_queue; /* copied bytes queued per peer before NO_RESOURCE */
    unsigned long tx_queue_ops;
    size_t max_msg; /* largest AM payload */
    uint64_t keepidle, keepintvl;
    unsigned long keepcnt;
    uint64_t user_timeout; /* TCP_USER_TIMEOUT; 0 = the kernel's */
    uint64_t conn_timeout;
    int nodelay;
    int direct_poll;   /* read a hot peer's links directly (see tcp_iface.c) */
    char *congestion;  /* TCP_CONGESTION: "auto", "system" or an algorithm */
    double latency_ns; /* reported latency; 0 = built-in estimate */
    double bandwidth;  /* reported bandwidth in bytes/s; 0 = built-in estimate */
} fy_tcp_config_t;

extern const fy_config_table_t fy_tcp_config_table;

typedef struct fy_tcp_md {
    fy_swmd_t super; /* the region table remote access is checked against (tl/swmd.h) */
    fy_tcp_config_t cfg;
    fy_netif_t *devs; /* one address per device, the device's name */
    unsigned ndevs;
    uint64_t host_id;
} fy_tcp_md_t;

/* ---- objects ---------------------------------------------------------------------------- */

enum { FY_TCP_OBJ_LISTEN = 1, FY_TCP_OBJ_ACCEPT, FY_TCP_OBJ_LINK, FY_TCP_OBJ_TIMER };
/* in an object's `ev`: the fd is in the epoll set (see fy_tcp_epoll_set) */
#define FY_TCP_EV_REG (1u << 27)

typedef struct fy_tcp_iface fy_tcp_iface_t;
typedef struct fy_tcp_peer fy_tcp_peer_t;
typedef struct fy_tcp_ep fy_tcp_ep_t;

typedef struct fy_tcp_op {
    fy_list_t elem; /* in peer->ops */
    uint64_t id;
    uint8_t kind;    /* FY_TCP_PUT, FY_TCP_GET_REQ, FY_TCP_FLUSH */
    fy_tcp_ep_t *ep; /* NULL once orphaned (ep destroyed): the answer is consumed, unused */
    fy_tl_comp_t *comp;
    size_t length; /* GET: bytes expected */
    unsigned iovcnt;
    struct iovec iov[FY_TCP_MAX_IOV];
} fy_tcp_op_t;

typedef struct fy_tcp_tx {
    fy_list_t elem;           /* in a link's txq or the peer's preq */
    fy_tcp_ep_t *ep;          /* sender (NULL: an answer, or orphaned) */
    fy_tl_comp_t *comp;       /* zcopy AM: called once every piece is written */
    struct fy_tcp_tx *leader; /* pieces of a striped frame point to piece 0 */
    unsigned pieces;          /* leader: pieces (itself included) not yet written */
    size_t left;              /* bytes of this piece still to write */
    size_t copied;            /* bytes counted in peer->q_bytes */
    unsigned iovcnt, iovidx;
    ferry_status_t status; /* leader: the first error of any piece */
    char *owned;           /* orphaned zcopy: our copy of the rest (freed with the tx) */
    uint8_t pool;          /* 0 malloc, 1 desc pool, 2 copy pool */
    uint8_t queued;        /* in a queue (counted in q_ops / q_bytes) */
    uint8_t started;       /* some bytes written */
    uint8_t zc;            /* iov points into the caller's memory */
    uint8_t hdr[FY_TCP_HDR_MAX];
    struct iovec iov[FY_TCP_MAX_IOV + 2]; /* header, copy part, caller's iov */
    char data[];                          /* copies */
} fy_tcp_tx_t;

/* Where the payload of a frame goes: a buffer of ours (AM), a registered region (PUT), the
 * iov of a GET (GET_RESP), or nowhere (refused PUT, orphaned GET). */
typedef struct fy_tcp_dest {
    uint8_t type, am_id;
    size_t total; /* payload bytes of the whole frame */
    size_t got;   /* striped: bytes received so far over all links */
    char *base;   /* contiguous destination, or NULL */
    char *owned;  /* AM: our buffer (base == owned) */
    size_t owned_cap;
    fy_tcp_op_t *op; /* GET_RESP: the request (scatter into op->iov) */
    int discard;
    ferry_status_t status; /* PUT: the answer to send */
    uint64_t op_id;        /* PUT: the initiator's id, for the ACK */
} fy_tcp_dest_t;

enum { FY_TCP_LINK_CONNECTING = 1, FY_TCP_LINK_HELLO_SENT, FY_TCP_LINK_UP, FY_TCP_LINK_CLOSED };
enum { FY_TCP_STALL_STRIPE = 1, FY_TCP_STALL_CHUNK = 2 };

typedef struct fy_tcp_link {
    int kind; /* FY_TCP_OBJ_LINK: first, for the epoll dispatch */
    int fd;
    fy_tcp_peer_t *peer;
    unsigned index;
    int state;
    unsigned stall; /* FY_TCP_STALL_* bits: do not parse or read */
    uint32_t ev;    /* current epoll interest */
    fy_list_t txq;
    fy_list_t ready_elem; /* in iface->ready: buffered bytes to parse */
    /* receive */
    char *rxbuf;
    size_t rx_size, rx_head, rx_tail;
    fy_tcp_dest_t *rx_dest; /* reading a payload straight into a destination */
    size_t rx_off, rx_left; /* where in rx_dest, and how much of this piece is left */
    size_t rx_piece;        /* the length of this piece */
    fy_tcp_dest_t frame;    /* the destination of a non-striped frame */
} fy_tcp_link_t;

enum { FY_TCP_PEER_IDLE = 1, FY_TCP_PEER_CONNECTING, FY_TCP_PEER_UP, FY_TCP_PEER_FAILED };

struct fy_tcp_peer {
    fy_tcp_iface_t *iface;
    uint64_t remote_id;
    uint64_t remote_host;  /* the remote's host id (0 = not known yet) */
    fy_netif_addr_t raddr; /* remote listening address (have_raddr) */
    int have_raddr;
    int in_table; /* in iface->peers_by_id */
    int state;
    int outgoing;      /* we connect conn_id */
    int remote_closed; /* a CLOSE frame arrived */
    int notify;        /* in iface->notify: failure to report from progress */
    ferry_status_t fail_status;
    uint64_t conn_id;
    uint64_t conn_start_ns;
    unsigned nlinks, nup;
    fy_tcp_link_t *links[FY_TCP_MAX_LINKS];
    fy_list_t eps;
    fy_list_t preq; /* frames sent before the connection is up */
    size_t q_bytes; /* copied bytes queued (bounded by cfg.tx_queue) */
    unsigned q_ops; /* queued descriptors (bounded by cfg.tx_queue_ops) */
    fy_list_t ops;  /* requests awaiting an answer, in order */
    uint64_t next_op_id, next_ans_id;
    uint32_t tx_seq;      /* striped frames sent */
    uint32_t rx_seq;      /* striped frames expected next */
    int rx_active;        /* a striped frame is being received */
    fy_tcp_dest_t stripe; /* ... and where it goes */
    uint64_t unflushed;   /* frames sent since the last FLUSH */
    fy_list_t elem;       /* iface->peers, then iface->dead */
    /* counters */
    uint64_t tx_msgs, tx_bytes, rx_msgs, rx_bytes;
};

struct fy_tcp_ep {
    fy_tl_ep_t super;
    fy_tcp_peer_t *peer;
    fy_list_t elem; /* in peer->eps */
    int failed;     /* err_cb called: NOT_CONNECTED from now on */
    uint64_t tx_msgs, tx_bytes;
};

typedef struct fy_tcp_accept {
    int kind; /* FY_TCP_OBJ_ACCEPT */
    int fd;
    uint32_t ev;
    int parked; /* waiting for the peer's previous connection to end */
    uint64_t start_ns;
    size_t got;
    fy_tcp_hello_t hello;
    fy_netif_addr_t from;
    fy_list_t elem;
} fy_tcp_accept_t;

struct fy_tcp_iface {
    fy_tl_iface_t super;
    fy_tcp_md_t *md;
    const fy_tcp_config_t *cfg;
    int epfd;
    int listen_kind; /* FY_TCP_OBJ_LISTEN: the epoll data of the listening socket */
    int listen_fd;
    int timer_kind; /* FY_TCP_OBJ_TIMER: the epoll data of timer_fd */
    int timer_fd;   /* handshake and connect timeouts; armed while any is pending */
    int timer_armed;
    uint64_t id;
    fy_netif_addr_t addr; /* listening address, with port */
    int is_loopback;
    fy_hash_t peers_by_id;
    fy_list_t peers;     /* every live peer (in the table or not) */
    fy_list_t accepting; /* fy_tcp_accept_t */
    fy_list_t ready;     /* links with unparsed buffered bytes */
    fy_list_t notify;    /* failed peers whose eps and ops must hear of it */
    fy_list_t dead;      /* peers to free at the end of progress */
    fy_list_t dead_accepts;
    fy_list_t dead_links;
    int in_progress;
    /* The peer whose links bring everything lately (a ping-pong partner, a stream): its
     * links are read directly, and epoll_wait runs only every FY_TCP_HOT_EPOLL-th pass. */
    fy_tcp_peer_t *hot;
    unsigned hot_mask; /* which of its links */
    unsigned hot_pass, hot_idle;
    fy_mpool_t tx_pool, copy_pool, op_pool;
    char *sink; /* discarded payload lands here */
    size_t sink_size;
    struct {
        char *p;
        size_t cap;
    } cache[4]; /* large AM receive buffers for reuse */
    /* Accept back-off: when accept() fails for want of a resource (EMFILE, ENFILE, ENOBUFS,
     * ENOMEM) the listener leaves the epoll set until accept_resume_ns (the timer brings it
     * back), the pause doubling from 1 ms up to 100 ms while the failures last; one warning
     * per FY_TCP_ACCEPT_LOG_NS says so, counting the failures in between. */
    uint64_t accept_resume_ns; /* 0: listening */
    uint64_t accept_backoff_ns;
    uint64_t accept_log_ns; /* when the last warning was written (0: never) */
    uint64_t accept_fails, accept_fails_logged;
    /* counters */
    uint64_t accepted, drops_bad_key, drops_malformed, drops_unknown, drops_timeout;
    uint64_t protocol_errors;
};

/* ---- shared functions ------------------------------------------------------------------- */

/* test hook: when non-zero, each socket read and write moves at most this many bytes */
extern size_t fy_tcp_test_io_limit;

/* tcp_sock.c: sockets and I/O */
int fy_tcp_socket(int family, const fy_tcp_config_t *cfg);
void fy_tcp_sock_tune(int fd, const fy_tcp_config_t *cfg);
/* Congestion control of a connection to a peer on this host (local) or another one. */
void fy_tcp_sock_congestion(int fd, const fy_tcp_config_t *cfg, int local);
ssize_t fy_tcp_sendv(int fd, const struct iovec *iov, size_t iovcnt);
ssize_t fy_tcp_recvv(int fd, const struct iovec *iov, size_t iovcnt);
int fy_tcp_epoll_set(fy_tcp_iface_t *iface, int fd, void *obj, uint32_t *cur, uint32_t want);
size_t fy_tcp_iov_slice(const struct iovec *src, size_t cnt, size_t off, size_t len,
                        struct iovec *dst, size_t max);
char *fy_tcp_buf_get(fy_tcp_iface_t *iface, size_t len, size_t *cap);
void fy_tcp_buf_put(fy_tcp_iface_t *iface, char *p, size_t cap);
void fy_tcp_cache_release(fy_tcp_iface_t *iface);

/* tcp_conn.c: peers, links, the connector's handshake, failures, timers, teardown */
fy_tcp_peer_t *fy_tcp_peer_get(fy_tcp_iface_t *iface, uint64_t remote_id, int create);
ferry_status_t fy_tcp_peer_connect(fy_tcp_peer_t *peer);
void fy_tcp_peer_fail(fy_tcp_peer_t *peer, ferry_status_t status, const char *why);
void fy_tcp_peer_closed(fy_tcp_peer_t *peer);
void fy_tcp_peer_maybe_free(fy_tcp_peer_t *peer);
void fy_tcp_peer_notify(fy_tcp_iface_t *iface);
void fy_tcp_link_connected(fy_tcp_link_t *link);
int fy_tcp_link_hello_answer(fy_tcp_link_t *link);
void fy_tcp_timers(fy_tcp_iface_t *iface, uint64_t now);
void fy_tcp_peer_destroy_all(fy_tcp_iface_t *iface);
void fy_tcp_free_dead(fy_tcp_iface_t *iface);
/* shared by tcp_conn.c and tcp_accept.c (the handshake's two sides) */
fy_tcp_peer_t *fy_tcp_peer_new(fy_tcp_iface_t *iface, uint64_t remote_id);
void fy_tcp_peer_up(fy_tcp_peer_t *peer);
void fy_tcp_conn_reset_seq(fy_tcp_peer_t *peer);
fy_tcp_link_t *fy_tcp_link_new(fy_tcp_peer_t *peer, unsigned index, int fd);
void fy_tcp_link_free(fy_tcp_iface_t *iface, fy_tcp_link_t *link);
int fy_tcp_send_hello(int fd, const fy_tcp_hello_t *h);
void fy_tcp_fill_hello(fy_tcp_iface_t *iface, fy_tcp_hello_t *h, uint8_t kind, unsigned link,
                       unsigned nlinks, uint64_t dst, uint64_t conn_id);
void fy_tcp_timer_arm(fy_tcp_iface_t *iface);
void fy_tcp_timer_arm_first(fy_tcp_iface_t *iface, uint64_t first);
/* tcp_accept.c: the listener, accepted sockets and their HELLO */
void fy_tcp_accept_new(fy_tcp_iface_t *iface);
void fy_tcp_accept_read(fy_tcp_iface_t *iface, fy_tcp_accept_t *a, uint32_t events);
void fy_tcp_accept_drop(fy_tcp_iface_t *iface, fy_tcp_accept_t *a);
int fy_tcp_accept_resume(fy_tcp_iface_t *iface, uint64_t now);
void fy_tcp_accept_retry(fy_tcp_iface_t *iface, uint64_t remote_id);

/* tcp_tx.c: sending.  A frame to send: its header, a part copied if the frame has to wait
 * (AM data of am_short, proto's header of am_zcopy) and a part sent from the caller's memory
 * (zero copy: referenced until written).  Only the zero-copy part of a frame that allows it
 * is striped. */
typedef struct fy_tcp_msg {
    const void *hdr;
    size_t hdr_len; /* frame header + extension (no stripe ext: added here) */
    const struct iovec *copy;
    size_t copy_cnt, copy_len;
    const struct iovec *zc;
    size_t zc_cnt, zc_len;
    fy_tl_comp_t *comp; /* called when zc is written, if it was not at once */
    int stripe;         /* the frame type allows striping */
} fy_tcp_msg_t;

ferry_status_t fy_tcp_send(fy_tcp_peer_t *peer, fy_tcp_ep_t *ep, const fy_tcp_msg_t *m);
void fy_tcp_link_write(fy_tcp_link_t *link);
void fy_tcp_tx_done(fy_tcp_peer_t *peer, fy_tcp_tx_t *tx, ferry_status_t status);
void fy_tcp_peer_up_flush(fy_tcp_peer_t *peer);
fy_tcp_op_t *fy_tcp_op_new(fy_tcp_peer_t *peer, fy_tcp_ep_t *ep, uint8_t kind, fy_tl_comp_t *comp);
void fy_tcp_op_free(fy_tcp_iface_t *iface, fy_tcp_op_t *op);
void fy_tcp_ep_orphan(fy_tcp_ep_t *ep);
int fy_tcp_over_bound(const fy_tcp_peer_t *peer);

/* tcp_rx.c: receiving */
/* Read (and handle) what the link has; the bytes read. */
size_t fy_tcp_link_read(fy_tcp_link_t *link);
void fy_tcp_link_parse(fy_tcp_link_t *link);
void fy_tcp_link_unstall(fy_tcp_link_t *link, unsigned bits);
void fy_tcp_link_stall(fy_tcp_link_t *link, unsigned bits);
void fy_tcp_dest_release(fy_tcp_iface_t *iface, fy_tcp_dest_t *d);
/* A payload that will never arrive: release its buffer, fail its request (if a get). */
void fy_tcp_dest_abort(fy_tcp_iface_t *iface, fy_tcp_dest_t *d, ferry_status_t status);

/* the wire formats are exactly what their diagrams say: no padding */
_Static_assert(sizeof(fy_tcp_hello_t) == 88, "handshake size");
_Static_assert(sizeof(fy_tcp_hdr_t) == 8, "frame header size");
_Static_assert(sizeof(fy_tcp_rma_ext_t) == 32 && sizeof(fy_tcp_ack_ext_t) == 16 &&
                   sizeof(fy_tcp_chunk_ext_t) == 16 && sizeof(fy_tcp_stripe_ext_t) == 8,
               "frame extension sizes");
_Static_assert(FY_TCP_HDR_MAX >=
                   sizeof(fy_tcp_hdr_t) + sizeof(fy_tcp_rma_ext_t) + sizeof(fy_tcp_stripe_ext_t),
               "largest frame header");
_Static_assert(sizeof(fy_netif_addr_t) == 20, "address size");

/* the ops (tcp_iface.c, tcp_ep.c), put in the table by tcp_md.c */
ferry_status_t fy_tcp_iface_open(fy_tl_md_t *md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p);
void fy_tcp_iface_close(fy_tl_iface_t *iface);
void fy_tcp_iface_query(fy_tl_iface_t *iface, fy_tl_iface_attr_t *attr);
ferry_status_t fy_tcp_iface_get_address(fy_tl_iface_t *iface, void *dev_addr, void *iface_addr);
int fy_tcp_iface_is_reachable(fy_tl_iface_t *iface, const void *dev_addr, const void *iface_addr);
void fy_tcp_addr_str(const void *dev_addr, const void *iface_addr, char *buf, size_t len);
void fy_tcp_iface_unreachable_why(fy_tl_iface_t *iface, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len);
unsigned fy_tcp_iface_progress(fy_tl_iface_t *iface);
int fy_tcp_iface_event_fd(fy_tl_iface_t *iface);
ferry_status_t fy_tcp_iface_event_arm(fy_tl_iface_t *iface);
void fy_tcp_iface_print(fy_tl_iface_t *iface, FILE *f);
ferry_status_t fy_tcp_ep_create(fy_tl_iface_t *iface, const void *dev_addr, const void *iface_addr,
                                fy_tl_ep_t **ep_p);
void fy_tcp_ep_destroy(fy_tl_ep_t *ep);
ferry_status_t fy_tcp_ep_flush(fy_tl_ep_t *ep, fy_tl_comp_t *comp);
ferry_status_t fy_tcp_ep_get_stats(fy_tl_ep_t *ep, ferry_ep_stats_t *stats);
int fy_tcp_ep_ready(fy_tl_ep_t *ep);
ferry_status_t fy_tcp_am_short(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_tcp_am_bcopy(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_tcp_am_zcopy(fy_tl_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp);
ferry_status_t fy_tcp_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
ferry_status_t fy_tcp_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);

static inline fy_tcp_iface_t *fy_tcp_iface(fy_tl_iface_t *i)
{
    return (fy_tcp_iface_t *)i;
}
static inline fy_tcp_ep_t *fy_tcp_ep(fy_tl_ep_t *e)
{
    return (fy_tcp_ep_t *)e;
}

#endif
