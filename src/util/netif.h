/*
 * netif.h - network interfaces for the IP transports (tcp, udp): which addresses this host
 * has, which of them the user selected, and whether a remote address is reachable.
 *
 * The unit is one *address* of an interface (fy_netif_t): eth0 with an IPv4 and an IPv6
 * address is two entries with the same name.  Typical use by a transport:
 *
 *     fy_netif_t *all, *sel;
 *     unsigned nall, nsel;
 *     fy_netif_filter_t inc, exc;
 *     fy_netif_filter_parse(getenv_or_config("..._IF_INCLUDE"), &inc);   (NULL or "" = empty)
 *     fy_netif_filter_parse(getenv_or_config("..._IF_EXCLUDE"), &exc);
 *     fy_netif_list(0, &all, &nall);
 *     fy_netif_select(all, nall, &inc, &exc, FY_NETIF_SELECT_DEFAULT, &sel, &nsel);
 *     ... one device per distinct sel[i].name ...
 *     fy_netif_list_free(all); fy_netif_list_free(sel); fy_netif_filter_release(&inc); ...
 *
 * FILTERS.  A filter is a comma-separated list of items; each item is
 *     an interface name, optionally a glob:  eth0, ib*, enp?s0
 *     an address with a prefix (CIDR):       10.0.0.0/8, fd00::/16
 *     an address alone (that one address):   192.0.2.7, ::1
 * CIDR items "wide match": 10.0.0.0/8 matches an interface address 10.20.3.4 whose own
 * subnet is 10.20.0.0/16 -- an item matches every address that lies inside it, whatever the
 * interface's own prefix.
 *
 * SELECTION (fy_netif_select).  With an include filter, exactly the addresses it matches
 * (loopback too, if named: "lo", "127.0.0.0/8", "::1").  Without one, every non-loopback
 * address; loopback addresses only if nothing else is left, so two processes on one host can
 * always talk.  The exclude filter then removes what it matches.  Down interfaces and IPv6
 * link-local addresses (fe80::/10, which need a scope id) are never listed unless asked for.
 *
 * REACHABILITY (fy_netif_addr_reachable).  Two addresses reach each other when they are in
 * the same host-and-network-namespace (fy_netif_host_id: the kernel routes local addresses
 * internally), or, for addresses of different hosts, when neither is loopback and both lie in
 * one subnet (compared under the shorter of the two prefixes).  Routed paths through a
 * gateway are not assumed.
 *
 * fy_netif_addr_t is a fixed-size, byte-order-defined form of an address (with a port), meant
 * to be copied into wire addresses as is.  Nothing here keeps global state; every function is
 * thread-safe.
 */
#ifndef FY_UTIL_NETIF_H
#define FY_UTIL_NETIF_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ferry.h"

#define FY_NETIF_NAME_MAX    16 /* IFNAMSIZ */
#define FY_NETIF_ADDR_STRLEN 64 /* "[ffff:...:ffff]:65535" fits */

/* A network address in a fixed 20-byte form that can travel on the wire.
 *
 *   0       1       2       3
 *  +-------+-------+-------+-------+
 *  |family |prefix |  port (BE)    |    family: 4 or 6 (not AF_*: those differ by OS)
 *  +-------+-------+-------+-------+    prefix: subnet prefix length, 0..32 / 0..128
 *  |   address, 16 bytes, network  |    port:   big endian, 0 when not meaningful
 *  |   order; IPv4 uses the first  |
 *  |   4 bytes, the rest is zero   |
 *  +-------------------------------+
 */
typedef struct fy_netif_addr {
    uint8_t family;
    uint8_t prefix_len;
    uint16_t port_be;
    uint8_t addr[16];
} fy_netif_addr_t;

/* One address of one interface. */
typedef struct fy_netif {
    char name[FY_NETIF_NAME_MAX]; /* "eth0", "lo" */
    unsigned index;               /* interface index (if_nametoindex) */
    unsigned flags;               /* IFF_* of the interface */
    int is_loopback;              /* IFF_LOOPBACK, or a loopback address */
    fy_netif_addr_t addr;         /* port 0 */
} fy_netif_t;

enum fy_netif_list_flag {
    FY_NETIF_LIST_DOWN = 1u << 0,      /* also interfaces that are down or not running */
    FY_NETIF_LIST_LINKLOCAL = 1u << 1, /* also IPv6 link-local addresses */
    FY_NETIF_LIST_NO_IPV4 = 1u << 2,
    FY_NETIF_LIST_NO_IPV6 = 1u << 3,
};

/* Every address of every interface (getifaddrs), IPv4 before IPv6 within an interface, in
 * the kernel's interface order.  *list_p is NULL when *count_p is 0.  Free with
 * fy_netif_list_free().  FERRY_ERR_IO if getifaddrs fails (logged with errno). */
ferry_status_t fy_netif_list(unsigned flags, fy_netif_t **list_p, unsigned *count_p);
void fy_netif_list_free(fy_netif_t *list);

/* ---- filters ---------------------------------------------------------------------------- */

typedef struct fy_netif_filter_item {
    int is_addr;                  /* 1: CIDR / address item, 0: name (glob) item */
    char name[FY_NETIF_NAME_MAX]; /* is_addr == 0 */
    fy_netif_addr_t net;          /* is_addr == 1: network (host bits cleared), prefix_len */
} fy_netif_filter_item_t;

typedef struct fy_netif_filter {
    fy_netif_filter_item_t *items;
    unsigned count; /* 0 = empty filter (matches nothing) */
} fy_netif_filter_t;

/* Parse "eth0,10.0.0.0/8,fd00::/16".  NULL or "" gives an empty filter.  Spaces around
 * items are ignored.  FERRY_ERR_BAD_CONFIG (logged, naming the item) for a bad address,
 * prefix or a name longer than an interface name can be. */
ferry_status_t fy_netif_filter_parse(const char *spec, fy_netif_filter_t *f);
/* The same from items already split (e.g. a fy_config_list_t's names). */
ferry_status_t fy_netif_filter_from_items(const char *const *items, unsigned count,
                                          fy_netif_filter_t *f);
void fy_netif_filter_release(fy_netif_filter_t *f);
/* Does any item match this address?  (name glob, or the address lies inside a CIDR item) */
int fy_netif_filter_match(const fy_netif_filter_t *f, const fy_netif_t *nif);

enum fy_netif_select_flag {
    FY_NETIF_SELECT_DEFAULT = 0,
    FY_NETIF_SELECT_NO_LOOPBACK = 1u << 0, /* never select loopback, even as a last resort */
};

/* Apply include / exclude (either may be NULL or empty) and the loopback policy described
 * at the top.  *out_p is a new array (free with fy_netif_list_free), NULL if *count_p = 0. */
ferry_status_t fy_netif_select(const fy_netif_t *all, unsigned n, const fy_netif_filter_t *include,
                               const fy_netif_filter_t *exclude, unsigned flags, fy_netif_t **out_p,
                               unsigned *count_p);

/* ---- addresses -------------------------------------------------------------------------- */

/* Convert from / to a sockaddr (AF_INET or AF_INET6).  from: FERRY_ERR_INVALID_ADDR for
 * another family; prefix_len is set to the full length (32 / 128).  to: returns the length
 * of the sockaddr written into *ss, 0 for a bad family. */
ferry_status_t fy_netif_addr_from_sockaddr(const struct sockaddr *sa, fy_netif_addr_t *a);
socklen_t fy_netif_addr_to_sockaddr(const fy_netif_addr_t *a, struct sockaddr_storage *ss);
/* Parse a literal IPv4 / IPv6 address (no port, no prefix).  FERRY_ERR_INVALID_ADDR. */
ferry_status_t fy_netif_addr_parse(const char *s, fy_netif_addr_t *a);

/* Is the address inside net/prefix_len (net's prefix_len)?  Different families: no. */
int fy_netif_addr_in_subnet(const fy_netif_addr_t *addr, const fy_netif_addr_t *net);
/* Same subnet under the shorter of the two prefixes. */
int fy_netif_addr_same_subnet(const fy_netif_addr_t *a, const fy_netif_addr_t *b);
/* 127.0.0.0/8, ::1, or an IPv4-mapped loopback. */
int fy_netif_addr_is_loopback(const fy_netif_addr_t *a);
/* Reachability as described at the top: local/remote address with their hosts' ids. */
int fy_netif_addr_reachable(const fy_netif_addr_t *local, uint64_t local_host,
                            const fy_netif_addr_t *remote, uint64_t remote_host);

/* "192.0.2.7:4000", "[fd00::2]:4000" (no port part when the port is 0), "/24" appended
 * when with_prefix.  Returns buf. */
/* Why fy_netif_addr_reachable said no, in a line ("another host, another subnet: ..."). */
void fy_netif_unreachable_why(const fy_netif_addr_t *local, uint64_t local_host,
                              const fy_netif_addr_t *remote, uint64_t remote_host, char *buf,
                              size_t len);

const char *fy_netif_addr_str(const fy_netif_addr_t *a, int with_prefix, char *buf, size_t len);

/* An id of this host *and* network namespace: equal for two processes exactly when they
 * share the kernel's network stack (boot id, hostname and the netns inode mixed).  Never 0. */
uint64_t fy_netif_host_id(void);

/* Link speed of an interface in bytes per second from sysfs, 0 if unknown: loopback and
 * virtual devices (veth, bridges, tunnels) have none that means anything (a veth says 10 Gb/s
 * and moves what the CPU copies). */
double fy_netif_speed(const char *name);
/* 1: a virtual device (under /sys/devices/virtual: lo, veth, bridge, tun...), 0: hardware,
 * -1: unknown (no such name in this sysfs view). */
int fy_netif_is_virtual(const char *name);

#endif
