/*
 * ofi.h - internals of the ofi transport (libfabric, FI_EP_RDM): objects, the AM wire header,
 * and the functions the ofi_*.c files share.  Nothing outside src/tl/ofi includes this file.
 *
 * Objects:
 *   md     the provider chosen by FERRY_OFI_PROVIDER (one fi_info), its fabric and domain,
 *          memory registration and remote keys.
 *   iface  one RDM endpoint with its completion queue and address vector, bound to
 *          127.0.0.1 where the provider takes an IP address; pre-posted receive buffers.
 *          Or, where the md opened a scalable endpoint (ofi_sep.c), a transmit and a receive
 *          context of it with the iface's own completion queue and the md's address vector.
 *   ep     one address vector entry (the peer's fi_addr_t) plus the operations outstanding
 *          on it, in issue order (a flush waits until everything before it left the list).
 *   op     one libfabric operation: its fi_context2 is the operation context, so a
 *          completion is routed to its op directly.  An op whose ep was destroyed or failed
 *          is an orphan: its caller was answered, the op waits for libfabric to give it back.
 */
#ifndef FY_TL_OFI_H
#define FY_TL_OFI_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "tl/ofi/ofi_mr.h"
#include "tl/tl.h"
#include "util/list.h"
#include "util/rcache.h"

#define FY_OFI_NAME_MAX  56    /* bytes of an endpoint name carried in the iface address */
#define FY_OFI_MSG_MAX   65536 /* largest AM on the wire, header included (receive slot) */
#define FY_OFI_BCOPY     8192  /* am_bcopy on the wire, header included (the op buffer) */
#define FY_OFI_BBUF      (FY_OFI_BCOPY + 256)
#define FY_OFI_RX_SLOTS  32         /* receive buffers without FI_MULTI_RECV */
#define FY_OFI_MULTI_RX  (1u << 20) /* one FI_MULTI_RECV buffer */
#define FY_OFI_NUM_MULTI 2
#define FY_OFI_RNDV_IOV  8 /* iov entries of an AM by rendezvous (each read on its own) */

/* ---- wire: every message starts with this header (8 bytes, little endian) ---------------- *
 *  0       1       2               4                               8
 * +-------+-------+---------------+-------------------------------+
 * | type  | am_id | reserved      | job tag (low 32 bits of key)  |
 * +-------+-------+---------------+-------------------------------+
 *  type AM: am_cb(am_id, payload); type PROBE: a flush probe, dropped; RTS / ATS: an AM
 *  rendezvous' descriptor and its answer (ofi_rndv.c draws them).  A message with a foreign
 *  job tag or a short length is dropped and counted.
 */
enum { FY_OFI_AM = 1, FY_OFI_PROBE = 2, FY_OFI_RTS = 3, FY_OFI_ATS = 4 };
typedef struct fy_ofi_hdr {
    uint8_t type;
    uint8_t am_id;
    uint16_t rsvd;
    uint32_t job_tag;
} fy_ofi_hdr_t;

/* ---- addresses ---------------------------------------------------------------------------- *
 * device address: host id (8, host and network namespace), provider name hash (8).  iface address:
 * the peer's pid (liveness), its flush word (addr, key) for the read-after-write flush, and its
 * name. */
typedef struct fy_ofi_dev_addr {
    uint64_t host_id;
    uint64_t prov_hash; /* both ends must use the same provider */
} fy_ofi_dev_addr_t;

typedef struct fy_ofi_iface_addr {
    uint32_t pid;
    uint32_t name_len;
    uint64_t flush_addr;
    uint64_t flush_key;
    uint8_t name[FY_OFI_NAME_MAX];
} fy_ofi_iface_addr_t;

/* ---- configuration ---------------------------------------------------------------------- */
typedef struct fy_ofi_config {
    char *provider;         /* FERRY_OFI_PROVIDER: include / exclude list */
    unsigned long tx_ops;   /* operations in flight per iface before NO_RESOURCE */
    unsigned long contexts; /* FERRY_OFI_CONTEXTS: ifaces (workers) the md serves */
    uint64_t peer_check;    /* liveness check period */
    uint64_t rma_timeout; /* FERRY_OFI_RMA_TIMEOUT: an RMA op outstanding longer fails; 0: never */
    int multi_recv;       /* use FI_MULTI_RECV where offered */
    int delivery;         /* use FI_DELIVERY_COMPLETE where offered */
    int atomics;          /* use the provider's atomics where valid */
    int wait_fd;          /* ask the CQ for a wait fd (FI_WAIT_FD) */
    uint64_t wait_poll;   /* no wait fd: how often a sleeping worker wakes to progress */
    char *mr_force;       /* FERRY_OFI_MR_FORCE: MR mode bits acted on though not asked */
    size_t rndv_thresh;   /* FERRY_OFI_RNDV_THRESH: larger AMs go by rendezvous (fi_read) */
    int sep;              /* FERRY_OFI_SEP: auto, on, off (fy_ofi_sep_modes; ofi_sep.c) */
    double latency_ns, bandwidth;
} fy_ofi_config_t;
extern const fy_config_table_t fy_ofi_config_table;

/* ---- memory: registration, the memh (fy_ofi_mr_t) and rkeys are ofi_mr.h's ---------- */

typedef struct fy_ofi_md {
    fy_tl_md_t super;
    fy_ofi_config_t cfg;
    struct fi_info *info; /* the chosen provider (a dup; owned) */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    char dev_name[32];
    uint64_t mr_mode;
    fy_ofi_mr_dom_t mrdom; /* registration state (ofi_mr.c) */
    int delivery;          /* FI_DELIVERY_COMPLETE accepted */
    int multi_recv;
    uint64_t host_id;
    uint64_t prov_hash;
    unsigned amo_mask[2]; /* [0]: 32-bit, [1]: 64-bit; bit per ferry_atomic_op_t */
    /* the registration cache of rendezvous buffers (mem_reg_cached), made on first use;
     * rc_lock guards its creation (workers of several threads share the md) */
    pthread_mutex_t rc_lock;
    fy_rcache_t *rcache;
    int rc_failed; /* creating it failed: register without it */
    /* contexts: one per iface (worker), each its own endpoint, CQ and AV; rc_lock guards
     * ctx_busy too */
    int thread_safe;         /* the domain is FI_THREAD_SAFE */
    unsigned ncontexts;      /* FERRY_OFI_CONTEXTS, or 1 without FI_THREAD_SAFE */
    unsigned char *ctx_busy; /* ncontexts flags */
    struct fy_ofi_sep *sep;  /* the scalable endpoint whose contexts the ifaces take, or NULL:
                              * each iface its own endpoint (ofi_sep.c) */
} fy_ofi_md_t;

/* ---- ops ---------------------------------------------------------------------------------- */
enum fy_ofi_op_kind {
    FY_OFI_OP_SEND = 1,
    FY_OFI_OP_WRITE,
    FY_OFI_OP_READ,
    FY_OFI_OP_AMO,
    FY_OFI_OP_FLUSH,
    FY_OFI_OP_RECV,  /* a receive slot (not from the pool) */
    FY_OFI_OP_RNDV,  /* an AM rendezvous' sender: its RTS, then waiting for the ATS */
    FY_OFI_OP_RREAD, /* an AM rendezvous' receiver: one fi_read of the sender's data */
};

typedef struct fy_ofi_rr fy_ofi_rr_t; /* a rendezvous (or a held AM) being received */

typedef struct fy_ofi_ep fy_ofi_ep_t;
typedef struct fy_ofi_iface fy_ofi_iface_t;

typedef struct fy_ofi_op {
    struct fi_context2 ctx; /* the libfabric operation context: keep first */
    fy_list_t elem;         /* ep->ops, iface->orphans, or iface->free */
    fy_ofi_ep_t *ep;        /* NULL: orphan */
    fy_tl_comp_t *comp;
    uint8_t kind;
    uint8_t posted;    /* libfabric holds it (a completion will come) */
    uint8_t need_read; /* flush: a read-after-write still to post */
    uint8_t counted;   /* holds a slot of iface->inflight */
    uint8_t queued;    /* a send libfabric refused (-FI_EAGAIN): posted later, in order */
    uint8_t niov;
    uint8_t acked;   /* RNDV: the ATS came (before the RTS' own completion) */
    uint32_t index;  /* in iface->all_ops (kept across reuse): an ATS names its op by it */
    uint64_t cookie; /* RNDV: (generation << 32) | index while an ATS may come, else 0 */
    ferry_status_t ack_st;
    fy_ofi_rr_t *rr;     /* RREAD: the receive it reads for */
    struct iovec iov[8]; /* a queued send's gather list */
    ferry_status_t status;
    uint64_t seen_ns; /* RMA, flush read: when the deadline check first saw it posted, or 0 */
    uint64_t operand, compare, result; /* atomics */
    void *result_dst;
    size_t amo_size;
    void *bbuf; /* copy buffer (the iface's bbuf_size), kept with the op across reuse */
    /* FI_MR_LOCAL: registrations kept with the op across reuse (its bbuf; the op itself, for
     * the atomics' operand, compare and result and the flush's read), the descriptors of a
     * send's gather list, and the cache regions of the caller's buffers it holds until it
     * goes back to the pool */
    fy_ofi_mr_t bbuf_mr, self_mr;
    void *desc[8];
    void *regions[8];
    uint8_t nregions;
} fy_ofi_op_t;

struct fy_ofi_ep {
    fy_tl_ep_t super;
    fy_list_t elem; /* iface->eps */
    fi_addr_t addr;
    pid_t pid;
    uint64_t flush_addr, flush_key;
    uint8_t name[FY_OFI_NAME_MAX]; /* the peer's endpoint name (a broken path is remembered) */
    size_t name_len;
    fy_list_t ops;            /* outstanding, issue order */
    ferry_status_t failed;    /* 0, or the failure */
    int err_reported;         /* err_cb ran */
    int depth;                /* inside a walk of its ops that calls back */
    int destroyed;            /* ep_destroy ran during that walk: free it after */
    ferry_status_t deferred;  /* error for the next flush (an op without a completion) */
    unsigned writes, injects; /* since the last flush: what a flush must cover */
    unsigned unflushed;       /* any operation since the last flush (read-after-write) */
    unsigned nqueued;         /* queued sends: later sends queue behind them */
    uint64_t tx_msgs, tx_bytes, rx_msgs;
};

typedef struct fy_ofi_rx {
    fy_ofi_op_t op; /* kind RECV; ctx routes the completion */
    fy_ofi_mr_t mr; /* FI_MR_LOCAL: buf's registration */
    void *buf;
    size_t len;
    int needs_post;
} fy_ofi_rx_t;

struct fy_ofi_iface {
    fy_tl_iface_t super;
    fy_ofi_md_t *md;
    struct fi_info *info;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *rx_ep; /* a scalable endpoint's receive context (ep: its transmit context);
                           * NULL: ep receives too (ofi_sep.c) */
    fy_ofi_mr_t flush_mr;
    uint64_t flush_word;
    uint64_t flush_key;
    uint32_t job_tag;
    uint8_t name[FY_OFI_NAME_MAX];
    size_t name_len;
    size_t inject_size, max_iov, max_msg;
    int no_inject;             /* every message by fi_send (rxd: ofi_iface.c says why) */
    unsigned long tx_ops;      /* FERRY_OFI_TX_OPS, or less where the provider needs it */
    int zcopy_copies;          /* an eager am_zcopy is copied (rxd: ofi_iface.c says why) */
    size_t bbuf_size;          /* each op's copy buffer */
    size_t msg_max, bcopy_max; /* AM sizes on the wire, header included */
    fy_ofi_rx_t *rx;
    unsigned nrx;
    int multi;
    fy_list_t eps;
    fy_list_t orphans;
    fy_list_t free;
    unsigned inflight, nops;
    unsigned in_progress;
    int ctx_index; /* the md's context this iface holds, or -1 */
    int wait_fd;   /* the CQ's wait fd (FI_WAIT_FD, fi_control FI_GETWAIT), or -1 */
    int timer_fd;  /* one-shot timer armed before sleeping (polling, liveness) */
    int event_fd;  /* epoll of both: what the worker sleeps on */
    uint64_t next_check_ns;
    uint64_t rx_dropped, cq_errors, eagain;
    uint64_t rma_timeouts; /* RMA ops and flush reads failed by FERRY_OFI_RMA_TIMEOUT */
    /* AM rendezvous (ofi_rndv.c) */
    size_t rndv_thresh;    /* AMs (header included) above it go by rendezvous; SIZE_MAX: none */
    size_t rndv_max;       /* the largest AM by rendezvous (max_zcopy) */
    fy_ofi_op_t **all_ops; /* every op of the pool, by index */
    unsigned all_cap;
    uint32_t cookie_gen;
    fy_list_t rxq;             /* received AMs in order, held behind a rendezvous being read */
    fy_list_t rr_dead;         /* failed receives whose reads libfabric still holds */
    struct fy_ofi_peer *peers; /* senders of rendezvous: name -> fi_addr (for reads, ATS) */
    unsigned npeers, peers_cap;
    struct fy_ofi_ack *acks; /* ATS libfabric refused with -FI_EAGAIN: sent from progress */
    unsigned nacks, acks_cap;
    void *spare; /* the last receive buffer, kept for the next rendezvous */
    size_t spare_len;
    int delivering;
    int closing; /* iface_close drains the CQ: nothing is delivered */
    int wedged;  /* shm: a read to a dead process holds the endpoint's completions for ever */
    struct fy_ofi_broken *broken; /* peers whose path from here broke: no new eps to them */
    unsigned nbroken;
    int parkable;     /* shm: counted among the process's shm interfaces (ofi_park.c) */
    int same_process; /* an endpoint of this process reached it or was reached: park it */
    uint64_t rndv_tx, rndv_rx, rndv_failed;
};

/* ofi_md.c */
int fy_ofi_virt(const fy_ofi_md_t *md);
fy_rcache_t *fy_ofi_md_rcache(fy_ofi_md_t *md);
ferry_status_t fy_ofi_status(int fi_err);

/* ofi_iface.c */
ferry_status_t fy_ofi_iface_open(fy_tl_md_t *md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p);
void fy_ofi_iface_close(fy_tl_iface_t *iface);
void fy_ofi_iface_query(fy_tl_iface_t *iface, fy_tl_iface_attr_t *attr);
ferry_status_t fy_ofi_iface_get_address(fy_tl_iface_t *iface, void *dev_addr, void *iface_addr);
int fy_ofi_iface_is_reachable(fy_tl_iface_t *iface, const void *dev_addr, const void *iface_addr);
void fy_ofi_iface_unreachable_why(fy_tl_iface_t *iface, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len);
void fy_ofi_iface_print(fy_tl_iface_t *iface, FILE *f);
void fy_ofi_iface_break_peer(fy_ofi_iface_t *iface, const fy_ofi_ep_t *ep);

/* ofi_progress.c */
unsigned fy_ofi_iface_progress(fy_tl_iface_t *iface);
int fy_ofi_iface_event_fd(fy_tl_iface_t *iface);
ferry_status_t fy_ofi_iface_event_arm(fy_tl_iface_t *iface);
int fy_ofi_rx_post(fy_ofi_iface_t *iface, fy_ofi_rx_t *rx);
unsigned fy_ofi_read_cq(fy_ofi_iface_t *iface);
int fy_ofi_open_event_fd(fy_ofi_iface_t *iface); /* at open: the timer and the epoll set */

/* ofi_op.c */
fy_ofi_op_t *fy_ofi_op_get(fy_ofi_iface_t *iface, fy_ofi_ep_t *ep, int kind, fy_tl_comp_t *comp);
void fy_ofi_op_put(fy_ofi_iface_t *iface, fy_ofi_op_t *op);
void fy_ofi_op_done(fy_ofi_iface_t *iface, fy_ofi_op_t *op, ferry_status_t st);
void fy_ofi_op_free_all(fy_ofi_iface_t *iface, fy_list_t *head);
void fy_ofi_ep_fail(fy_ofi_ep_t *ep, ferry_status_t st);
void fy_ofi_ep_drain(fy_ofi_ep_t *ep);
ferry_status_t fy_ofi_op_local_mr(fy_ofi_iface_t *iface, fy_ofi_op_t *op, void *buf, size_t len,
                                  fy_ofi_mr_t *mr);
ferry_status_t fy_ofi_op_descs(fy_ofi_iface_t *iface, fy_ofi_op_t *op, const struct iovec *v,
                               size_t first, size_t n);

/* ofi_rndv.c */
void fy_ofi_rndv_init(fy_ofi_iface_t *iface);
void fy_ofi_rndv_release(fy_ofi_iface_t *iface); /* before the endpoint closes */
void fy_ofi_rndv_free(fy_ofi_iface_t *iface);    /* after it closed */
ferry_status_t fy_ofi_rndv_send(fy_ofi_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                                const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp);
void fy_ofi_rndv_sent(fy_ofi_iface_t *iface, fy_ofi_op_t *op);
void fy_ofi_rndv_read_done(fy_ofi_iface_t *iface, fy_ofi_op_t *op, ferry_status_t st);
void fy_ofi_rndv_rx(fy_ofi_iface_t *iface, uint8_t type, uint8_t id, const uint8_t *p, size_t len);
void fy_ofi_rndv_deliver(fy_ofi_iface_t *iface, uint8_t id, const void *data, size_t len);
void fy_ofi_rndv_retry(fy_ofi_iface_t *iface);
void fy_ofi_rndv_check_peers(fy_ofi_iface_t *iface);

/* ofi_ep.c */
int fy_ofi_post_flush_read(fy_ofi_iface_t *iface, fy_ofi_op_t *op);
int fy_ofi_ep_retry(fy_ofi_ep_t *ep);
void fy_ofi_put_hdr(fy_ofi_iface_t *iface, void *dst, uint8_t type, uint8_t id);
int fy_ofi_op_bbuf(fy_ofi_iface_t *iface, fy_ofi_op_t *op);
ferry_status_t fy_ofi_send_iov(fy_ofi_ep_t *ep, fy_ofi_op_t *op, const struct iovec *v, size_t n);
ferry_status_t fy_ofi_ep_create(fy_tl_iface_t *iface, const void *dev_addr, const void *iface_addr,
                                fy_tl_ep_t **ep_p);
void fy_ofi_ep_destroy(fy_tl_ep_t *ep);
ferry_status_t fy_ofi_ep_flush(fy_tl_ep_t *ep, fy_tl_comp_t *comp);
ferry_status_t fy_ofi_ep_get_stats(fy_tl_ep_t *ep, ferry_ep_stats_t *stats);
ferry_status_t fy_ofi_am_short(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_ofi_am_bcopy(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_ofi_am_zcopy(fy_tl_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp);
ferry_status_t fy_ofi_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
ferry_status_t fy_ofi_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
ferry_status_t fy_ofi_atomic(fy_tl_ep_t *ep, ferry_atomic_op_t op, size_t size, uint64_t operand,
                             uint64_t compare, void *result, uint64_t remote_addr, const void *rkey,
                             fy_tl_comp_t *comp);

/* ofi_shm_name.c: a new name for an shm iface's region (malloc'd; NULL when out of memory);
 * the process's first call removes the regions of its pid namespace's dead processes */
char *fy_ofi_shm_name(void);

/* ofi_park.c: an shm endpoint that an endpoint of its own process reached is closed with the
 * process's last shm interface (libfabric 1.17's shm crashes otherwise) */
void fy_ofi_park_open(fy_ofi_iface_t *iface); /* at the end of a successful iface_open */
int fy_ofi_park_iface(fy_ofi_iface_t *iface); /* iface_close: 1 when ep, av, cq were taken */
int fy_ofi_park_domain(fy_ofi_md_t *md);      /* md_close: 1 when domain, fabric, info were */
int fy_ofi_park_has(const uint8_t *name, size_t len); /* that endpoint is parked */

/* ofi_sep.c: several contexts on one scalable endpoint, where the provider offers it */
typedef struct fy_ofi_sep fy_ofi_sep_t;
extern const char *const fy_ofi_sep_modes[];
void fy_ofi_sep_open(fy_ofi_md_t *md);  /* md_open, the domain open: sets md->sep or not */
void fy_ofi_sep_close(fy_ofi_md_t *md); /* md_close, before the domain closes */
/* iface_open with md->sep: the iface's transmit and receive contexts bound to its CQ, its name;
 * 0 or a -FI_ error, *what naming the call that failed */
int fy_ofi_sep_iface_open(fy_ofi_iface_t *iface, const char **what);
void fy_ofi_sep_iface_close(fy_ofi_iface_t *iface); /* before the CQ closes; no-op without SEP */
/* a peer's name (from its iface address or an RTS) into the AV: 1, or a -FI_ error */
int fy_ofi_av_insert(fy_ofi_iface_t *iface, const uint8_t *name, size_t len, fi_addr_t *addr);
void fy_ofi_sep_print(fy_ofi_iface_t *iface, FILE *f);
void fy_ofi_sep_print_provider(FILE *f, const struct fi_info *info);
static inline struct fid_ep *fy_ofi_rx_ep(const fy_ofi_iface_t *iface)
{
    return iface->rx_ep != NULL ? iface->rx_ep : iface->ep;
}

#endif
