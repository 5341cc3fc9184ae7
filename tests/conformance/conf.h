/*
 * conf.h - the transport conformance suite: what a transport states about itself (one short
 * file per transport, conf_<tl>.c), and the node every case drives through the transport's
 * ops table (fy_tl_find(name)->ops, no proto), checking the contract written in src/tl/tl.h.
 *
 * Most cases open two interfaces in this one process (A sends, B receives) and progress both
 * from one thread, so a case can look at the target's memory at the very moment a
 * completion runs.  Cases about a peer's death use a real peer process (fytest_proc.h).
 */
#ifndef FY_CONF_H
#define FY_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "tl/tl.h"

/* What a transport's file says: its name, the device to open (NULL: the first that
 * query_devices reports), whether its peers may live in other processes (the peer-death
 * cases need that), and environment settings made before the md opens ("NAME=value",
 * NULL-terminated), e.g. a smaller maximum so that "beyond the maximum" stays cheap. */
typedef struct conf_tl {
    const char *name;
    const char *device;
    int cross_process;
    /* put/get reach the target's memory without the target (cross-memory attach): a key
     * whose region the target deregistered cannot be refused (tl.h, RMA) */
    int rma_unchecked_dereg;
    /* an access with a key the target deregistered may fail the ep (err_cb) instead of only
     * itself: the provider's stream to the peer is stuck behind it or dropped (ofi over rxd,
     * rxm: docs/ofi.md); the error must still come, without a hang, each on a pair of its own
     * (with rma_unchecked_dereg too: the get only) */
    int rma_dereg_fails_ep;
    /* the peer-death cases kill the peer only while it is parked outside the transport's
     * progress call (it has stopped consuming, with messages in flight to it): the provider
     * keeps a lock in shared memory across its progress that no one can take back from a
     * process killed holding it (ofi over libfabric 1.17's shm: docs/ofi.md) */
    int peer_dies_parked;
    const char *const *env;
} conf_tl_t;

extern const conf_tl_t conf_tl;

/* ---- a node: md + iface + what it received ---- */

#define CONF_ADDR_MAX 256
typedef struct conf_addr {
    uint32_t dlen, ilen;
    uint8_t bytes[CONF_ADDR_MAX];
} conf_addr_t;

typedef struct conf_node conf_node_t;
typedef void (*conf_am_fn_t)(conf_node_t *n, uint8_t id, const void *data, size_t len);
typedef void (*conf_err_fn_t)(conf_node_t *n, fy_tl_ep_t *ep, ferry_status_t st);

struct conf_node {
    const fy_tl_component_t *tl;
    const fy_tl_ops_t *ops;
    fy_tl_md_t *md;
    fy_tl_iface_t *iface;
    fy_tl_iface_attr_t attr;
    /* received AMs: the default handler checks the stream (conf_msg_*) */
    conf_am_fn_t on_am;
    conf_err_fn_t on_err;
    void *user;
    uint64_t rx_msgs, rx_bytes, rx_expect;
    int rx_bad;
    char rx_why[200];
    /* err_cb */
    unsigned nerr;
    fy_tl_ep_t *err_ep;
    ferry_status_t err_st;
};

/* Set while the suite is inside a send / RMA / flush call: a callback then is a breach of
 * the contract (tl.h: WHO CALLS BACK). */
extern int conf_in_call;
#define CONF_CALL(st, expr)                                                                        \
    do {                                                                                           \
        conf_in_call = 1;                                                                          \
        (st) = (expr);                                                                             \
        conf_in_call = 0;                                                                          \
    } while (0)

void conf_env(void);
void conf_open(conf_node_t *n);
void conf_close(conf_node_t *n);
void conf_addr(conf_node_t *n, conf_addr_t *a);
fy_tl_ep_t *conf_connect(conf_node_t *n, const conf_addr_t *a);
unsigned conf_progress(conf_node_t *n);

/* A completion that records its status and asserts it runs once. */
typedef struct conf_comp {
    fy_tl_comp_t super;
    int calls;
    ferry_status_t st;
    void (*then)(struct conf_comp *c); /* run inside the callback, may be NULL */
    void *user;
} conf_comp_t;
void conf_comp_init(conf_comp_t *c);

/* Messages of a checked stream: [u32 seq][u32 len][pattern(seq)], len >= CONF_MSG_HDR. */
#define CONF_MSG_HDR 8
void conf_msg_fill(void *buf, size_t len, uint32_t seq);
/* The default receive handler: checks order, length and content. */
void conf_msg_check(conf_node_t *n, uint8_t id, const void *data, size_t len);

void conf_fill(void *buf, size_t len, uint64_t seed);
long conf_diff(const void *buf, size_t len, uint64_t seed); /* first differing byte or -1 */

#endif
