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
 * RETURN CONVENTION of every send/RMA operation:
 *   FERRY_OK              done: the source buffer may be reused at once; no completion.
 *   FERRY_INPROGRESS      started; comp->cb is called exactly once, from iface_progress,
 *                         when the source buffer may be reused (sends, put) or the
 *                         destination is filled (get, fetching atomics), or with an error.
 *   FERRY_ERR_NO_RESOURCE out of credits / window / socket space: nothing was sent; retry
 *                         after progress (proto keeps a pending queue).  Never blocks.
 *   other negative        failed now (e.g. FERRY_ERR_NOT_CONNECTED on a failed ep).
 *
 * ORDER: a transport delivers the AMs of one ep in the order they were sent, and reports
 * FY_TL_CAP_AM_ORDERED; puts are remotely complete after a successful ep_flush.
 *
 * RECEIVE: a received AM is handed to params->am_cb from iface_progress (never from a send
 * call), with its id, and its data valid only during the call.
 *
 * FAILURE: when the transport decides a peer is gone (reset, keepalive, retransmission
 * limit), it calls params->err_cb once for the ep, completes the ep's outstanding operations
 * with an error, and from then on returns FERRY_ERR_NOT_CONNECTED on that ep.
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

/* A completion: cb is called once with the final status. */
typedef void (*fy_tl_comp_cb_t)(fy_tl_comp_t *comp, ferry_status_t status);
struct fy_tl_comp {
    fy_tl_comp_cb_t cb;
};

/* Receive callback: one AM with its transport-level id (0..FY_TL_AM_ID_MAX). */
#define FY_TL_AM_ID_MAX 31
typedef void (*fy_tl_am_cb_t)(void *arg, uint8_t am_id, const void *data, size_t len);
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
    size_t max_put_short;   /* put_short */
    size_t max_get_short;   /* get_short */
    size_t max_rma;         /* put_zcopy / get_zcopy, one call */
    size_t max_iov;         /* entries in an iov */
    size_t device_addr_len; /* bytes of iface_get_address's dev_addr */
    size_t iface_addr_len;  /* bytes of iface_get_address's iface_addr */
    int priority;           /* tie-breaker in lane selection, higher wins */
} fy_tl_iface_attr_t;

typedef struct fy_tl_device {
    char name[32];   /* "memory", "eth0", "lo", ... */
    int is_loopback; /* reaches only this host */
} fy_tl_device_t;

typedef struct fy_tl_iface_params {
    const char *device; /* a name from query_devices */
    fy_tl_am_cb_t am_cb;
    void *am_arg;
    fy_tl_err_cb_t err_cb;
    void *err_arg;
    uint64_t job_key;     /* carried by network transports; foreign keys are dropped */
    uint64_t worker_uuid; /* unique per worker in the job */
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
    /* Destroy at once: outstanding operations complete with FERRY_ERR_CANCELED. */
    void (*ep_destroy)(fy_tl_ep_t *ep);
    /* All earlier operations remotely complete: OK now, or INPROGRESS + comp later. */
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
