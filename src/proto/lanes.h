/*
 * lanes.h - the pieces of wireup shared by its three files: the parsed worker address
 * (wireup_addr.c), the scored candidates per operation class (lanes.c), and what the exchange
 * (wireup.c) keeps per endpoint to fall back on the next candidate.  Private to proto/.
 */
#ifndef FY_PROTO_LANES_H
#define FY_PROTO_LANES_H

#include <stdint.h>
#include <stdio.h>

#include "ferry.h"

/* One interface of a remote worker, as its address describes it (pointers into the blob). */
typedef struct fy_remote_iface {
    char tl[16];
    char dev[32];
    const uint8_t *dev_addr, *iface_addr;
    uint16_t dev_addr_len, iface_addr_len;
    float latency_ns, bandwidth_mbs, overhead_ns;
    uint32_t caps;
} fy_remote_iface_t;

#define FY_ADDR_MAX_IFACES 16

typedef struct fy_remote_addr {
    uint64_t uuid;
    unsigned niface;
    fy_remote_iface_t ifaces[FY_ADDR_MAX_IFACES];
} fy_remote_addr_t;

/* wireup_addr.c: the worker address blob (docs/wire-formats.md, "Worker address"). */
ferry_status_t fy_address_pack(ferry_worker_t *w);
ferry_status_t fy_address_unpack(const void *addr, size_t len, fy_remote_addr_t *ra);

/*
 * The classes the explanation scores.  AM short, AM bulk and tag eager travel on one lane
 * (the AM lane: they must stay in order with each other), and a tag rendezvous reads over
 * it too, so those four share a choice made on their blended cost; RMA and atomics have lanes
 * of their own where a transport does them natively.
 */
enum {
    FY_CLS_AM_SHORT,
    FY_CLS_AM_BULK,
    FY_CLS_TAG_EAGER,
    FY_CLS_TAG_RNDV,
    FY_CLS_RMA,
    FY_CLS_AMO,
    FY_CLS_COUNT
};
extern const char *const fy_lane_class_names[FY_CLS_COUNT];

#define FY_LANE_MAX_CAND 32
/* At most this many rails (FERRY_MAX_RAILS is capped to it); the AM lane is rail 0. */
#define FY_MAX_RAILS    4
#define FY_LANE_WHY_LEN 96

/* A pair (local iface, remote iface) of one transport, with its costs or why it is out. */
typedef struct fy_lane_cand {
    int local, remote;         /* indexes in worker->ifaces and remote_addr.ifaces */
    int usable;                /* reachable and not failed */
    double cost[FY_CLS_COUNT]; /* ns for the class's typical operation; <0: cannot */
    double am_cost;            /* the cost that picks the AM lane (FERRY_AM_LANE) */
    char why[FY_LANE_WHY_LEN]; /* when not usable: the reason */
    const char *cm;            /* the connection manager asked first to connect it */
} fy_lane_cand_t;

typedef struct fy_lane_plan {
    unsigned ncand;
    fy_lane_cand_t cand[FY_LANE_MAX_CAND];
    int am;       /* index in cand of the AM lane (the lowest latency), -1: none */
    int bulk;     /* index in cand of the bulk lane where it is not the AM lane, else -1 */
    int rma, amo; /* index in cand, -1: emulated over the AM lane */
    /* Multi-rail (rails.c): the lanes bulk AM data is striped over, rail 0 the AM lane, each
     * with its weight (the pair's bandwidth, bytes/s); nrails 1: no striping.  With a bulk
     * lane, rail 0 (the AM lane) has weight 0: it carries only each message's anchor, and
     * rail 1 is the bulk lane. */
    unsigned nrails;
    int rails[FY_MAX_RAILS];
    double rail_bw[FY_MAX_RAILS];
    unsigned nremote_only; /* remote interfaces of transports we do not run */
    char remote_only[160]; /* their names, for the explanation */
} fy_lane_plan_t;

/* A candidate that failed to connect, and why ("connection refused", "no answer in 2 s"). */
typedef struct fy_lane_fail {
    unsigned bit; /* fy_lane_pair_bit(local, remote) */
    char why[FY_LANE_WHY_LEN];
} fy_lane_fail_t;

/* lanes.c: score every pair and choose; the candidates in fails are listed as failed.
 * only_local >= 0: the AM lane must start from that local interface (the one a peer's
 * wireup came in on, so both ends use the path that works). */
void fy_lanes_plan(ferry_worker_t *w, const fy_remote_addr_t *ra, const fy_lane_fail_t *fails,
                   unsigned nfails, int only_local, fy_lane_plan_t *plan);
/* Print the plan: per class the chosen lane and its score, then every rejected candidate. */
void fy_lanes_print(ferry_worker_t *w, const fy_remote_addr_t *ra, const fy_lane_plan_t *plan,
                    FILE *f);
/* For ferry_info --lanes: parse a peer's address and print the plan this worker would make. */
ferry_status_t fy_lanes_explain(ferry_worker_t *w, const void *addr, size_t len, FILE *f);

/* A (local, remote) pair as one number. */
static inline unsigned fy_lane_pair_bit(int local, int remote)
{
    return (unsigned)(local * FY_ADDR_MAX_IFACES + remote);
}

#endif
