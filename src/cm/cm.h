/*
 * cm.h - connection managers: the ways an endpoint learns where its peer is and gets wired
 * up (the role of Open MPI openib's connect pseudo-components).
 *
 * A manager is a const ops table and one line in the registry of cm.c.  Its life:
 *
 *   reg()           once per context: may only look at configuration.  May be NULL.
 *   init()          once per context, when FERRY_CM selects it: FERRY_ERR_UNSUPPORTED
 *                   takes it quietly out of consideration; any other error fails the context.
 *   query(iface)    per interface: the manager's priority (0-100) on it, or -1 ("I cannot
 *                   connect on this one").  Among those that answer, the highest wins.
 *   start_connect() two forms, by the target given.  An endpoint: a peer described by what
 *                   this manager knows (an ip:port, a rank in the bootstrap store, a worker
 *                   address): the manager resolves it to the peer's worker address and hands
 *                   that to the host's connect function (proto's endpoint path), noting that
 *                   the address came through it.  A lane (t->tl_iface set, host NULL): make
 *                   the transport endpoint (*ep_p, a fy_tl_ep_t) to one interface of a
 *                   worker address in hand, as wireup connects each lane it chose.  A
 *                   manager connects only the lanes of endpoints whose address it vouches
 *                   for (t->via): direct any address in hand, oob one from the bootstrap
 *                   store, sockaddr one from its own exchange, am one that came by a peer's
 *                   wireup message; otherwise FERRY_ERR_UNSUPPORTED, and wireup asks the
 *                   next manager.
 *   ep_finalize()   a lane connected through this manager is being destroyed.  May be NULL.
 *   finalize()      once per context, the end.  May be NULL.
 *
 * cm/ sits between proto/ and tl/: it never sees a proto object.  What it needs of proto
 * (make an endpoint from a worker address, read the bootstrap store) comes through
 * fy_cm_host_t, a small table of functions proto fills in.
 *
 * The sockaddr manager also exposes its side channel (below): a TCP listener and the one
 * exchange of worker addresses that happens on each accepted connection.
 */
#ifndef FY_CM_H
#define FY_CM_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "util/config.h"

/* What a manager may know of an interface when asked whether it can connect on it. */
typedef struct fy_cm_iface_info {
    const char *tl_name; /* "tcp", "udp", "shm", ... */
    const char *device;
    uint64_t tl_caps; /* fy_tl_cap bits */
} fy_cm_iface_info_t;

/* What proto lends to the managers. */
typedef struct fy_cm_host {
    void *arg;
    uint64_t job_key;
    const void *address; /* this worker's address */
    size_t address_len;
    int timeout_ms; /* FERRY_CM_TIMEOUT */
    /* Create (lazily connected) an endpoint to the worker whose address is given. */
    ferry_status_t (*connect_address)(void *arg, const void *addr, size_t len, void **ep_p);
    /* Fetch the worker address rank published under key in the bootstrap store (oob);
     * FERRY_ERR_TRUNCATED with *len the size needed when buf is too small. */
    ferry_status_t (*kv_get)(void *arg, int rank, const char *key, void *buf, size_t *len);
} fy_cm_host_t;

struct fy_tl_iface;
struct fy_cm_component;

/* A peer as a manager knows it: exactly one of the forms is set. */
typedef struct fy_cm_target {
    const void *address; /* direct: the peer's worker address */
    size_t address_len;
    const char *kv_key; /* oob: a key in the bootstrap store, published by rank */
    int rank;
    const char *ip; /* sockaddr: the peer's listener */
    uint16_t port;
    /* a lane: this interface to the remote one at dev_addr/iface_addr, for an endpoint whose
     * worker address came through via (NULL: the application gave it) */
    struct fy_tl_iface *tl_iface;
    const void *dev_addr, *iface_addr;
    const struct fy_cm_component *via;
} fy_cm_target_t;

typedef struct fy_cm_ops {
    void (*reg)(void);
    ferry_status_t (*init)(void);
    int (*query)(const fy_cm_iface_info_t *iface);
    ferry_status_t (*start_connect)(const fy_cm_host_t *host, const fy_cm_target_t *t, void **ep_p);
    void (*ep_finalize)(void *ep);
    void (*finalize)(void);
} fy_cm_ops_t;

typedef struct fy_cm_component {
    const char *name;
    const char *doc;
    const fy_cm_ops_t *ops;
} fy_cm_component_t;

/* The lane form of start_connect, shared by the managers: the transport endpoint to the
 * interface address in the target (what every manager does once it has a worker address). */
ferry_status_t fy_cm_lane_connect(const fy_cm_target_t *t, void **ep_p);

extern const fy_cm_component_t fy_cm_direct, fy_cm_oob, fy_cm_sockaddr, fy_cm_am;

/* Names accepted by FERRY_CM, for messages: "direct, am, oob, sockaddr". */
extern const char fy_cm_names[];

/* A context's selection: which managers FERRY_CM kept and their init said yes to. */
#define FY_CM_MAX 8
typedef struct fy_cm_set {
    const fy_cm_component_t *cms[FY_CM_MAX];
    unsigned n;
} fy_cm_set_t;

/* Check the FERRY_CM list (an unknown name is FERRY_ERR_BAD_CONFIG), register and init the
 * selected managers into *set. */
ferry_status_t fy_cm_set_init(fy_cm_set_t *set, const fy_config_list_t *sel);
void fy_cm_set_finalize(fy_cm_set_t *set);
/* The selected manager called name, or NULL. */
const fy_cm_component_t *fy_cm_find(const fy_cm_set_t *set, const char *name);
/* The best selected manager for an interface (highest query answer), or NULL. */
const fy_cm_component_t *fy_cm_select_for_iface(const fy_cm_set_t *set,
                                                const fy_cm_iface_info_t *iface, int *prio_p);
/* Connect a lane (t in the lane form) through the selected managers that answer for its
 * interface, best first, until one takes it: *ep_p the transport endpoint, *cm_p the manager
 * (for its ep_finalize).  When none does, why says what each answered. */
ferry_status_t fy_cm_connect_lane(const fy_cm_set_t *set, const fy_cm_iface_info_t *iface,
                                  const fy_cm_target_t *t, void **ep_p,
                                  const fy_cm_component_t **cm_p, char *why, size_t why_len);
/* The lane's manager is told its lane goes, then the transport endpoint is destroyed. */
void fy_cm_lane_finalize(const fy_cm_component_t *cm, void *tl_ep);

/* ------------------------------------------------------------------------------------------ */
/* The sockaddr side channel                                                                   */
/* ------------------------------------------------------------------------------------------ */

/*
 * One message each way on a fresh TCP connection, then the connection is closed:
 *
 *   0               32              48              64
 *   +---------------+---------------+---------------+
 *   | magic "FYCM"  | version       | type          |
 *   +---------------+---------------+---------------+
 *   | job key (64)                                  |
 *   +-----------------------------------------------+
 *   | addr_len (32) | reserved (32)                 |
 *   +-----------------------------------------------+
 *   worker address (addr_len bytes, at most FY_CM_ADDR_MAX)
 *
 * Client -> server: HELLO with the client's worker address.  Server -> client: ACCEPT with
 * the server's worker address, or REJECT with none.  Host byte order (peers run one build).
 */
#define FY_CM_MAGIC    0x4d435946u /* "FYCM" */
#define FY_CM_VERSION  1
#define FY_CM_ADDR_MAX 8192
enum { FY_CM_HELLO = 1, FY_CM_ACCEPT = 2, FY_CM_REJECT = 3 };

typedef struct fy_cm_msg_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint64_t job_key;
    uint32_t addr_len;
    uint32_t reserved;
} fy_cm_msg_hdr_t;

/* An incoming message being read without blocking. */
typedef struct fy_cm_rx {
    uint8_t *buf;
    size_t have, need; /* need grows from the header to header + address */
} fy_cm_rx_t;

/* Read what is there: FERRY_OK when the message is whole (checked: magic, version, job key,
 * size), FERRY_ERR_NO_RESOURCE when more is needed, an error when the peer is bad or gone. */
ferry_status_t fy_cm_rx_progress(fy_cm_rx_t *rx, int fd, uint64_t job_key);
void fy_cm_rx_release(fy_cm_rx_t *rx);

/* Listen on ip:port (ip NULL or "" = every address; port 0 = any): nonblocking fd. */
ferry_status_t fy_cm_listen(const char *ip, uint16_t port, int *fd_p, uint16_t *port_p);
/* Send one message (blocking, bounded by timeout_ms: the payload is small). */
ferry_status_t fy_cm_send_msg(int fd, unsigned type, uint64_t job_key, const void *addr, size_t len,
                              int timeout_ms);
/* The client's whole exchange: connect, HELLO, wait for the answer (at most timeout_ms).
 * On ACCEPT, *peer_p (malloc'd) holds the server's worker address. */
ferry_status_t fy_cm_client_exchange(const char *ip, uint16_t port, uint64_t job_key,
                                     const void *addr, size_t len, int timeout_ms, void **peer_p,
                                     size_t *peer_len_p);
/* "ip:port" of a connected socket's peer, for logs. */
void fy_cm_peer_name(int fd, char *buf, size_t len);

#endif /* FY_CM_H */
