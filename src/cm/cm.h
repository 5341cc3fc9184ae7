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
 *   start_connect() begin a connection to a peer described by what this manager knows (an
 *                   interface address, an ip:port, a rank in the bootstrap store).  The
 *                   manager resolves it to the peer's worker address and hands that to the
 *                   host's connect function (proto's normal endpoint path).
 *   ep_finalize()   an endpoint made through this manager is being destroyed.  May be NULL.
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
    /* Fetch the worker address published under key in the bootstrap store (oob). */
    ferry_status_t (*kv_get)(void *arg, const char *key, void *buf, size_t *len);
} fy_cm_host_t;

/* A peer as a manager knows it: exactly one of the forms is set. */
typedef struct fy_cm_target {
    const void *address; /* direct: the peer's worker address */
    size_t address_len;
    const char *kv_key; /* oob: a key in the bootstrap store */
    const char *ip;     /* sockaddr: the peer's listener */
    uint16_t port;
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
