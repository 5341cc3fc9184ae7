/*
 * tl.h - the transport interface: what every transport (self, shm, udp, tcp, ofi) offers the
 * protocol layer, and the contract of each operation.  This is the only header proto/ uses
 * to reach a transport; a transport includes nothing from proto/, cm/ or boot/.
 *
 * A transport is a component: a const descriptor (fy_tl_component_t) with a const ops table,
 * registered explicitly in tl/registry.c.  Its objects are:
 *
 *   md     memory domain: one per context per transport; memory registration, remote keys,
 *          and any process-wide state (region tables).  Created by md_open.
 *   iface  an interface on one device, owned by one worker (one thread).  It has an address
 *          (device address + interface address) that goes into the worker address blob.
 *   ep     a connection from an iface to a remote iface, created from its addresses.
 *
 * Each transport allocates its private objects embedding the base struct as the first
 * member, named `super`.
 *
 * THE CONTRACT.  Every clause below is checked over every transport by tests/conformance
 * (the case that checks it is named in brackets); a transport that cannot keep a clause says
 * so here.
 *
 * RETURN CONVENTION of every send, RMA, atomic and flush operation:
 *   FERRY_OK              done: the source buffer may be reused at once; no completion.
 *   FERRY_INPROGRESS      started; comp->cb is called exactly once, from iface_progress (or
 *                         from ep_destroy / iface_close, below), when the source buffer may
 *                         be reused (sends, put) or the destination is filled (get, fetching
 *                         atomics), or with the operation's error.  Never with INPROGRESS.
 *   FERRY_ERR_NO_RESOURCE out of credits / window / ring / socket space: nothing was sent,
 *                         nothing will be called; retry after progress (proto keeps a pending
 *                         queue).  Never blocks.  [back_pressure]
 *   other negative        failed now, nothing sent, no completion (FERRY_ERR_INVALID_PARAM
 *                         for a request beyond the limits below, FERRY_ERR_NOT_CONNECTED or
 *                         the failure's status on a failed ep, FERRY_ERR_ACCESS_DENIED for an
 *                         RMA the transport can refuse locally).
 *
 * NULL COMPLETION.  comp may be NULL only where the operation can finish in the call: the
 * operation then returns OK (done) or an error, never INPROGRESS.  am_zcopy, put_zcopy,
 * get_zcopy and fetching atomics may refuse a NULL comp with FERRY_ERR_INVALID_PARAM; proto
 * always passes one.  ep_flush(ep, NULL) asks without waiting: FERRY_OK when everything
 * earlier is remotely complete, FERRY_ERR_NO_RESOURCE ("not yet": progress and ask again),
 * or the ep's error; nothing is queued.  A non-fetching atomic with NULL comp reports its
 * error through the next flush.  [flush]
 *
 * WHO CALLS BACK, AND RE-ENTRY.  Callbacks (params->am_cb, params->err_cb, comp->cb) run only
 * inside iface_progress, and comp->cb also inside ep_destroy and iface_close (CANCELED).  No
 * send, RMA, atomic, flush or ep_create call ever runs a callback: an error found inside
 * such a call is its return value, and the failure it reveals (err_cb, completions of other
 * operations) follows from the next progress [sends, RMA, flushes in every case].  Inside
 * any callback the owner may: send, put, get, flush on any ep of the iface (a handler answers on
 * the spot); ep_create; and ep_destroy on any ep, including the one the callback is about
 * [destroy_in_cb, peer_death_*: ep_destroy inside comp->cb, a flush's comp->cb, am_cb and err_cb].
 * It may not call iface_progress (progress does not nest) nor iface_close / md_close of the iface
 * that is calling back.  One thread drives an iface; the transport takes no lock for that.
 *
 * LIMITS.  iface_query's attributes are hard limits, per operation:
 *   am_short    total iov bytes <= max_short          am_bcopy  total <= max_bcopy
 *   am_zcopy    hdr_len <= max_zcopy_hdr, hdr_len + data <= max_zcopy
 *   put_short   len <= max_put_short (0: use put_zcopy)   get_short  len <= max_get_short
 *   put_zcopy / get_zcopy   total <= max_rma           every iov: iovcnt <= max_iov
 *   every AM    id <= FY_TL_AM_ID_MAX                   atomics: size 4 or 8, aligned
 * A request beyond a limit returns FERRY_ERR_INVALID_PARAM and sends nothing, even when the
 * transport could have carried it [am_beyond_max]; every size up to the limit works
 * [am_sizes, am_iov].  A transport never splits an operation for its caller: proto splits
 * anything above a transport's maximum (an AM above max_zcopy, a put or get above max_rma),
 * so every size works through the public API [api_am_beyond_max, api_put_beyond_max]: an AM
 * as fragments gathered at the receiver, a put or get as pieces of at most max_rma.
 * Empty iov entries are allowed anywhere; an AM may have no data at all.
 * max_zcopy_local is the largest am_zcopy (header + data) that may complete at once (FERRY_OK)
 * because the transport copied it whole into memory of its own before the peer has any of it
 * (shm: its outbox, up to FERRY_SHM_OUTBOX_MAX): such a completion says nothing of the peer;
 * a larger one waits for it [peer_death_*].  0: none does (kernel socket buffers aside).
 *
 * ORDER.  The AMs of one ep, whatever their classes, reach am_cb at the target in the order
 * they were sent, each exactly once, with its id, contiguous (a zcopy's hdr then its data),
 * valid only during the call; every transport reports FY_TL_CAP_AM_ORDERED [am_order].
 * An owner that also sets params->am_split_cb may be handed a zcopy AM in two pieces instead
 * (its hdr and the pieces of its iov that precede the last one, then the last piece where it
 * lies): shm does so for data in memory the peer maps (FERRY_MEM_ALLOCATE), which it then
 * reads in place; am_cb gets every other AM, and all of them when am_split_cb is NULL.
 * Nothing is ordered across eps, nor between AMs and RMA: use flush.  A received AM is handed
 * to am_cb from iface_progress only; reception needs no ep back to the sender.
 *
 * RMA.  remote_addr is in the target's address space; the target (or, where the target is
 * not involved, the initiator from the key) admits an access only when [remote_addr, +len)
 * lies inside the key's region with the right registered (REMOTE_READ / WRITE / ATOMIC).
 * Anything else is refused with FERRY_ERR_ACCESS_DENIED and touches nothing at the target
 * nor the get's destination [rma_edges, rma_refused].  The error is reported by the
 * operation itself (its return value, or its completion) or, when it had nothing to report
 * it through (put_short / a NULL-comp atomic that returned OK before the target answered),
 * by the next ep_flush covering it; either way it is reported once and the ep stays usable.
 * A refused RMA is not a peer failure (no err_cb).  A key whose region was deregistered is
 * refused by self, udp and tcp (they check a region table); shm puts and gets reach the
 * target's memory by cross-memory attach without the target, so a deregistered key is the
 * application's error there (as in MPI one-sided), not detected.
 *
 * FLUSH.  ep_flush completes (OK now, or INPROGRESS then comp) only when every operation
 * issued on the ep before it is remotely complete or has failed: each of their completions
 * has run before the flush's [flush]; put data is in the target's memory; AMs are held by the
 * target in order and reach its am_cb when the target progresses, even if the sender's ep is
 * destroyed right after [close_flush].  Flushes complete in the order they were issued.  The
 * flush's status is OK, or an error from an operation covered by it that had no completion
 * of its own to carry it (above), or the ep's failure.  A flush on a failed ep, or one
 * outstanding when the peer fails, ends with an error: never OK, never a hang [peer_death_*].
 *
 * DESTROY.  ep_destroy takes effect at once: every outstanding operation of the ep (sends,
 * RMA, flushes) completes before ep_destroy returns, with OK if it had finished or
 * FERRY_ERR_CANCELED, and nothing of the ep is called afterwards; the caller may free every
 * buffer it gave [close_force].  A cancelled send was delivered whole or not at all.  Known
 * gap: shm's receiver may still pull a cancelled zero-copy AM from the sender's memory after
 * ep_destroy returned (it reads the buffer by cross-memory attach when it gets to the
 * descriptor), so it can deliver what the user wrote there since [close_force, pending].
 * It does not wait for the peer and tells it nothing that it must act on: a transport whose
 * connection serves both directions (udp) may let the peer's ep to us fail later.
 * iface_close destroys the eps still open the same way (no err_cb); no callback runs after
 * it returns [iface_close_open_eps].
 *
 * FAILURE.  A peer is dead when the transport knows it: tcp from its socket (reset, close,
 * keepalive), shm from its process being gone (a liveness check), udp from silence
 * (FERRY_UDP_PEER_TIMEOUT) with heartbeats to the peer's liveness responder unanswered, idle
 * or not (docs/udp.md, Liveness).  Then, from progress:
 * params->err_cb once for each ep to it (UNREACHABLE when it never answered,
 * CONNECTION_RESET, ENDPOINT_TIMEOUT), the ep's outstanding operations and flushes complete
 * with an error, and from then on operations and flushes on that ep return an error
 * (FERRY_ERR_NOT_CONNECTED or the failure's status) at once; the owner destroys the ep (in
 * err_cb or later).  Before connecting, ep_create may already refuse a dead peer (shm:
 * FERRY_ERR_UNREACHABLE) or succeed and fail as above.  At every stage (before connect,
 * mid-transfer, during a flush, idle) the owner gets an error within the transport's timeout,
 * never a hang and never a flush that says OK for work the peer did not take
 * [peer_death_before_connect, _mid_transfer, _during_flush, _idle_flush].
 */
#ifndef FY_TL_H
#define FY_TL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

#include "ferry.h"
#include "util/config.h"

typedef struct fy_tl_component fy_tl_component_t;
typedef struct fy_tl_md fy_tl_md_t;
typedef struct fy_tl_iface fy_tl_iface_t;
typedef struct fy_tl_ep fy_tl_ep_t;
typedef struct fy_tl_comp fy_tl_comp_t;

/* A completion: cb is called once with the final status.  flags: hints about the operation
 * (FY_TL_COMP_F_*), which a transport may ignore. */
typedef void (*fy_tl_comp_cb_t)(fy_tl_comp_t *comp, ferry_status_t status);
struct fy_tl_comp {
    fy_tl_comp_cb_t cb;
    unsigned flags;
};
/* am_zcopy: the receiver copies the data out (a tagged message), so it holds the data's cache
 * lines afterwards (shm places the next such message elsewhere, shm_obox.c). */
#define FY_TL_COMP_F_RX_COPIES 1u

/* Receive callback: one AM with its transport-level id (0..FY_TL_AM_ID_MAX). */
#define FY_TL_AM_ID_MAX 31
typedef void (*fy_tl_am_cb_t)(void *arg, uint8_t am_id, const void *data, size_t len);
/* The same AM in two pieces, head then data, each valid only during the call (ORDER). */
typedef void (*fy_tl_am_split_cb_t)(void *arg, uint8_t am_id, const void *head, size_t head_len,
                                    const void *data, size_t data_len);
/* A peer failed: ep is the transport's ep to it. */
typedef void (*fy_tl_err_cb_t)(void *arg, fy_tl_ep_t *ep, ferry_status_t status);

enum fy_tl_cap {
    FY_TL_CAP_AM_SHORT = 1u << 0,
    FY_TL_CAP_AM_BCOPY = 1u << 1,
    FY_TL_CAP_AM_ZCOPY = 1u << 2,
    FY_TL_CAP_PUT = 1u << 3,
    FY_TL_CAP_GET = 1u << 4,
    FY_TL_CAP_AMO32 = 1u << 5,
    FY_TL_CAP_AMO64 = 1u << 6,
    FY_TL_CAP_AM_ORDERED = 1u << 7,
    FY_TL_CAP_EVENT_FD = 1u << 8, /* the iface can wake a sleeping worker */
    FY_TL_CAP_CONNECT_TO_IFACE = 1u << 9,
    /* The iface's peers depend on this side progressing while its owner computes (RMA or
     * atomics done in software at the target, a rendezvous the target must drive): with
     * FERRY_PROGRESS_THREAD=auto (the default) proto starts a progress thread for a worker
     * that has such an iface.  No transport sets it yet. */
    FY_TL_CAP_NEEDS_PROGRESS = 1u << 10,
};

typedef struct fy_tl_iface_attr {
    uint64_t caps;          /* fy_tl_cap bits */
    double latency_ns;      /* one-way, small message */
    double bandwidth;       /* bytes per second, large messages */
    double overhead_ns;     /* CPU time per send */
    size_t max_short;       /* am_short: iov total, including proto's header */
    size_t max_bcopy;       /* am_bcopy */
    size_t max_zcopy;       /* am_zcopy: header + data */
    size_t max_zcopy_hdr;   /* am_zcopy header */
    size_t max_zcopy_local; /* am_zcopy: largest that may complete locally (LIMITS), or 0 */
    size_t max_put_short;   /* put_short */
    size_t max_get_short;   /* get_short */
    size_t max_rma;         /* put_zcopy / get_zcopy, one call */
    size_t max_iov;         /* entries in an iov */
    size_t device_addr_len; /* bytes of iface_get_address's dev_addr */
    size_t iface_addr_len;  /* bytes of iface_get_address's iface_addr */
    int priority;           /* tie-breaker in lane selection, higher wins */
    /* Native atomics per width ([0]: 32-bit, [1]: 64-bit): a bit per ferry_atomic_op_t
     * (1u << FERRY_ATOMIC_ADD ...), each in its fetching and non-fetching forms.  Read only
     * where FY_TL_CAP_AMO32 / AMO64 is set (set it when any op of the width is native); 0
     * there means all six, so a transport that does every op leaves it 0.  Proto uses a
     * width natively only when all six are native and emulates the whole width otherwise
     * (rma.c: every atomic on a word takes one path). */
    unsigned amo_ops[2];
} fy_tl_iface_attr_t;

typedef struct fy_tl_device {
    char name[32];   /* "memory", "eth0", "lo", ... */
    int is_loopback; /* reaches only this host */
} fy_tl_device_t;

typedef struct fy_tl_iface_params {
    const char *device; /* a name from query_devices */
    fy_tl_am_cb_t am_cb;
    fy_tl_am_split_cb_t am_split_cb; /* optional (ORDER); am_arg is its argument too */
    void *am_arg;
    fy_tl_err_cb_t err_cb;
    void *err_arg;
    uint64_t job_key;     /* carried by network transports; foreign keys are dropped */
    uint64_t worker_uuid; /* unique per worker in the job */
    /* Bytes of copies the iface may hold for sends it completed (returned OK) and no peer
     * has read yet, when they would grow with a peer that stops reading (a buffer pool): past
     * it such sends return FERRY_ERR_NO_RESOURCE, except one alone.  Proto counts everything
     * else it gave the transport (FERRY_MAX_QUEUED), and passes FERRY_MAX_QUEUED / 16 here.
     * Buffers of a fixed size reserved at iface_open (rings, an outbox) are not counted: their
     * size is the transport's configuration, documented with it.  0: the transport's own
     * bound.  [back_pressure] */
    size_t tx_copy_max;
} fy_tl_iface_params_t;

/* The bases each transport embeds as `super`. */
struct fy_tl_md {
    const fy_tl_component_t *component;
};

struct fy_tl_iface {
    const fy_tl_component_t *component;
    fy_tl_md_t *md;
    fy_tl_iface_params_t params; /* a copy; params.device points into dev_name */
    char dev_name[32];
};

struct fy_tl_ep {
    fy_tl_iface_t *iface;
    void *owner; /* proto's object for this ep (set by proto after ep_create) */
};

/*
 * The operations.  A NULL entry means "not supported" (with the matching cap bit clear).
 * Sizes: iface_get_address writes attr.device_addr_len + attr.iface_addr_len bytes.
 * Remote keys: md_rkey_pack writes rkey_packed_size bytes; md_rkey_unpack fills an rkey of
 * rkey_size bytes that put/get/atomic take as `const void *rkey`.
 */
typedef struct fy_tl_ops {
    /* memory domain */
    ferry_status_t (*md_open)(const fy_tl_component_t *tl, fy_tl_md_t **md_p);
    void (*md_close)(fy_tl_md_t *md);
    ferry_status_t (*query_devices)(fy_tl_md_t *md, fy_tl_device_t *devs, unsigned max,
                                    unsigned *count);
    /* memh is memh_size bytes of caller storage */
    ferry_status_t (*mem_reg)(fy_tl_md_t *md, void *addr, size_t len, unsigned access, void *memh);
    void (*mem_dereg)(fy_tl_md_t *md, void *memh);
    ferry_status_t (*rkey_pack)(fy_tl_md_t *md, const void *memh, void *buf);
    ferry_status_t (*rkey_unpack)(fy_tl_md_t *md, const void *buf, void *rkey);
    void (*rkey_release)(fy_tl_md_t *md, void *rkey);

    /* interface */
    ferry_status_t (*iface_open)(fy_tl_md_t *md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p);
    void (*iface_close)(fy_tl_iface_t *iface);
    void (*iface_query)(fy_tl_iface_t *iface, fy_tl_iface_attr_t *attr);
    ferry_status_t (*iface_get_address)(fy_tl_iface_t *iface, void *dev_addr, void *iface_addr);
    int (*iface_is_reachable)(fy_tl_iface_t *iface, const void *dev_addr, const void *iface_addr);
    /* Poll: deliver received AMs, complete operations, run timers.  Returns events done. */
    unsigned (*iface_progress)(fy_tl_iface_t *iface);
    /* A file descriptor that becomes readable when progress has work; -1 if none. */
    int (*iface_event_fd)(fy_tl_iface_t *iface);
    /* Ready to sleep?  FERRY_OK: the fd will signal new work.  FERRY_ERR_BUSY: work is
     * pending now (progress first). */
    ferry_status_t (*iface_event_arm)(fy_tl_iface_t *iface);
    /* Print interface and per-ep statistics. */
    void (*iface_print)(fy_tl_iface_t *iface, FILE *f);

    /* endpoint */
    ferry_status_t (*ep_create)(fy_tl_iface_t *iface, const void *dev_addr, const void *iface_addr,
                                fy_tl_ep_t **ep_p);
    /* Destroy at once: outstanding operations complete (FERRY_ERR_CANCELED) before it
     * returns; allowed inside callbacks (see DESTROY). */
    void (*ep_destroy)(fy_tl_ep_t *ep);
    /* All earlier operations remotely complete: OK now, or INPROGRESS + comp later; comp
     * NULL: OK or FERRY_ERR_NO_RESOURCE (see FLUSH, NULL COMPLETION). */
    ferry_status_t (*ep_flush)(fy_tl_ep_t *ep, fy_tl_comp_t *comp);
    ferry_status_t (*ep_get_stats)(fy_tl_ep_t *ep, ferry_ep_stats_t *stats);

    /* active messages; iov gathers proto's header + user header + data */
    ferry_status_t (*am_short)(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
    ferry_status_t (*am_bcopy)(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
    /* hdr (<= max_zcopy_hdr) is copied; iov is sent from user memory, which stays
     * untouched until comp. The receiver sees hdr followed by the data, contiguous. */
    ferry_status_t (*am_zcopy)(fy_tl_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp);

    /* RMA (remote_addr is in the target's address space, inside the rkey's region) */
    ferry_status_t (*put_short)(fy_tl_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                                const void *rkey);
    ferry_status_t (*put_zcopy)(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
    ferry_status_t (*get_zcopy)(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
    /* size 4 or 8; result NULL = non-fetching */
    ferry_status_t (*atomic)(fy_tl_ep_t *ep, ferry_atomic_op_t op, size_t size, uint64_t operand,
                             uint64_t compare, void *result, uint64_t remote_addr, const void *rkey,
                             fy_tl_comp_t *comp);
    /* optional: a small get that completes in the call (memory the transport can read at
     * once), or FERRY_ERR_NO_RESOURCE when it cannot, and proto takes the get_zcopy path */
    ferry_status_t (*get_short)(fy_tl_ep_t *ep, void *buf, size_t len, uint64_t remote_addr,
                                const void *rkey);
    /* optional: why iface_is_reachable says no to this remote iface, one short line for the
     * logs and `ferry_info --lanes` ("another host: boot ids differ") */
    void (*iface_unreachable_why)(fy_tl_iface_t *iface, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len);
    /* optional: a remote interface's address for people ("10.0.0.2:41000") */
    void (*addr_str)(const void *dev_addr, const void *iface_addr, char *buf, size_t len);
    /* optional: mem_reg for one transfer of a buffer the caller may send again (a rendezvous
     * send): the transport may serve it from a registration cache, so the registration (and
     * the key packed from it) may cover the whole pages around the buffer and outlive
     * mem_dereg until the memory is unmapped.  Released with mem_dereg.  NULL: mem_reg. */
    ferry_status_t (*mem_reg_cached)(fy_tl_md_t *md, void *addr, size_t len, unsigned access,
                                     void *memh);
    /* optional: 1 when the ep's connection is known to be up (what is sent now leaves at
     * once), 0 while it is still being set up (or failed).  NULL: always 1.  Proto stripes
     * bulk data only onto extra lanes that are up (rails.c), so a lane that never connects
     * holds nothing back. */
    int (*ep_ready)(fy_tl_ep_t *ep);
} fy_tl_ops_t;

struct fy_tl_component {
    const char *name; /* "self", "shm", "udp", "tcp", "ofi" */
    const char *description;
    const fy_tl_ops_t *ops;
    const fy_config_table_t *config; /* may be NULL */
    size_t memh_size;                /* 0 if no RMA */
    size_t rkey_packed_size;
    size_t rkey_size;
};

/* The registry (tl/registry.c): every compiled-in transport, in default preference order. */
extern const fy_tl_component_t *const fy_tl_components[];
extern const size_t fy_tl_num_components;
const fy_tl_component_t *fy_tl_find(const char *name);

/* Helper for transports: fill the common base of an iface. */
void fy_tl_iface_base_init(fy_tl_iface_t *iface, const fy_tl_component_t *tl, fy_tl_md_t *md,
                           const fy_tl_iface_params_t *params);

/* The native atomic ops of a width (size 4 or 8) as a bit per ferry_atomic_op_t: none
 * without the width's cap, all six where the transport left amo_ops 0. */
static inline unsigned fy_tl_amo_ops(const fy_tl_iface_attr_t *attr, size_t size)
{
    int w = size == 8;
    if (!(attr->caps & (w ? FY_TL_CAP_AMO64 : FY_TL_CAP_AMO32)))
        return 0;
    return attr->amo_ops[w] != 0 ? attr->amo_ops[w] & 0x3fu : 0x3fu;
}

/* Total length of an iov. */
static inline size_t fy_iov_total(const struct iovec *iov, size_t iovcnt)
{
    size_t n = 0;
    for (size_t i = 0; i < iovcnt; i++)
        n += iov[i].iov_len;
    return n;
}
/* Gather an iov into dst; returns bytes copied. */
size_t fy_iov_gather(void *dst, const struct iovec *iov, size_t iovcnt);
/* Scatter src into an iov starting at byte offset; returns bytes copied. */
size_t fy_iov_scatter(const struct iovec *iov, size_t iovcnt, size_t offset, const void *src,
                      size_t len);

#endif
