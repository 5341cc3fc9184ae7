/*
 * ferry_perf.h - what the files of ferry_perf share: the test table, the session state of one
 * process (initiator or responder), the control protocol between the two, and the output.
 *
 *   ferry_perf.c          options, and the three ways to find the peer (world, server, client)
 *   ferry_perf_session.c  the session: control messages, buffers and keys, the plan's run
 *   ferry_perf_tests.c    the measurement loops, initiator and responder side of each test
 *   ferry_perf_out.c    statistics and output as a table, CSV or JSON
 *   ferry_perf_oob.c    the out-of-band address exchange of server mode (TCP), hex coding
 *
 * The tool uses only the public API (ferry.h): it is also an example of how to drive ferry
 * for speed (caller-owned requests, busy polling, zero-copy sends from a reused buffer).
 */
#ifndef FERRY_PERF_H
#define FERRY_PERF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry.h"

/* ---- tests ------------------------------------------------------------------------------- */

typedef enum perf_test_id {
    PERF_AM_LAT,
    PERF_AM_BW,
    PERF_AM_RATE,
    PERF_PUT_LAT,
    PERF_PUT_BW,
    PERF_GET_LAT,
    PERF_GET_BW,
    PERF_AMO_LAT,
    PERF_TAG_LAT,
    PERF_TAG_BW,
    PERF_TAG_STREAM,
    PERF_NUM_TESTS
} perf_test_id_t;

typedef enum perf_kind {
    PERF_KIND_PINGPONG,  /* latency = round trip / 2 (one-way) */
    PERF_KIND_ROUNDTRIP, /* latency = one complete operation (get, fetching atomic) */
    PERF_KIND_BW,        /* bandwidth and message rate over a window of operations */
} perf_kind_t;

typedef struct perf_test_desc {
    const char *name;
    const char *doc;
    perf_kind_t kind;
    int rma;           /* needs registered memory and remote keys */
    int tag;           /* needs ferry_tag_* */
    size_t min_size;   /* smallest size the test accepts */
    size_t fixed_size; /* !0: the only size (atomics) */
} perf_test_desc_t;

extern const perf_test_desc_t perf_tests[PERF_NUM_TESTS];

/* ---- the control protocol ---------------------------------------------------------------- */

/* Active message ids used by ferry_perf (any user ids would do). */
#define PERF_AM_CTRL 200 /* perf_ctrl_t header, optional data */
#define PERF_AM_DATA 201 /* payload only: the measured messages */
#define PERF_AM_ACK  202 /* empty: end of a window */

#define PERF_MAGIC         0x66506572u /* "fPer" */
#define PERF_PROTO_VERSION 2

typedef enum perf_ctrl_type {
    PERF_CTRL_HELLO = 1, /* I->R: session; data = initiator address + rkey */
    PERF_CTRL_HELLO_ACK, /* R->I: status in arg0; data = responder rkey */
    PERF_CTRL_START,     /* I->R: one test at one size */
    PERF_CTRL_START_ACK, /* R->I: ready (status in arg0) */
    PERF_CTRL_END,       /* I->R: measurement over; arg0 = operations issued */
    PERF_CTRL_END_ACK,   /* R->I: arg0 = verification errors seen at the responder */
    PERF_CTRL_BYE,       /* I->R: session over */
    PERF_CTRL_BYE_ACK,   /* R->I: everything the initiator sent is handled */
    PERF_CTRL_BYE_DONE,  /* I->R: BYE_ACK arrived; the initiator leaves, nothing outstanding */
} perf_ctrl_type_t;

enum perf_flag {
    PERF_FLAG_CHECK = 1u << 0, /* verify every payload */
    PERF_FLAG_RMA = 1u << 1,   /* (HELLO) register memory and exchange keys */
    PERF_FLAG_ALLOC = 1u << 2, /* (HELLO) send and receive buffers from FERRY_MEM_ALLOCATE */
};

/*
 * The header of every control message, in host byte order (both ends run the same
 * ferry_perf; HELLO carries a version to make sure):
 *
 *   0        4        8        12       16
 *   | magic  | type   | test   | flags  |
 *   | size            | warmup          |   START: message size and counts;
 *   | iters           | window          |   HELLO: buffer length (size), slots (window)
 *   | arg0            | arg1            |   arg0: HELLO version, *_ACK status, END count;
 *                                           arg1: HELLO / HELLO_ACK region address
 */
typedef struct perf_ctrl {
    uint32_t magic, type, test, flags;
    uint64_t size;
    uint64_t warmup, iters;
    uint64_t window;
    int64_t arg0;
    uint64_t arg1;
} perf_ctrl_t;

/* A control message as received (copied out of the handler). */
typedef struct perf_msg {
    perf_ctrl_t hdr;
    void *data;
    size_t data_len;
} perf_msg_t;

#define PERF_INBOX 16

/* ---- one process's session ------------------------------------------------------------- */

typedef enum perf_format { PERF_FMT_TABLE, PERF_FMT_CSV, PERF_FMT_JSON } perf_format_t;

/* A request in a ring of outstanding operations. */
typedef struct perf_slot {
    ferry_request_t req; /* first: the callback gets &req */
    struct perf *perf;
    int busy;   /* INPROGRESS and not yet called back */
    int is_get; /* check the buffer when it completes */
    uint64_t seq;
} perf_slot_t;

/* What one measurement is about (sent in START). */
typedef struct perf_params {
    perf_test_id_t test;
    size_t size;
    uint64_t warmup, iters;
    unsigned window;
    unsigned flags;
} perf_params_t;

typedef struct perf {
    ferry_context_t *context;
    ferry_worker_t *worker;
    ferry_world_t *world;
    ferry_ep_t *ep;   /* to the peer */
    int own_ep;       /* ep created here (server/client), closed here */
    int initiator;    /* 1: measures and prints; 0: responds */
    int ep_failed;    /* the ep error handler fired */
    int session_over; /* BYE answered / BYE_ACK had: the peer's going is no error, the close is
                         forced */
    unsigned verbose;
    uint64_t timeout_ns; /* a wait for the peer longer than this fails */

    /* control messages received, in order */
    perf_msg_t inbox[PERF_INBOX];
    unsigned inbox_head, inbox_count;

    /* counters updated by the data/ack handlers */
    uint64_t recv_count, ack_count;
    uint64_t errors;          /* verification errors seen here */
    ferry_status_t op_status; /* the first operation that completed with an error */
    perf_params_t cur;

    /* buffers: send and receive, each buf_len bytes (per-slot in check mode) */
    uint8_t *sbuf, *rbuf;
    ferry_mem_t *smem, *rmem; /* -M alloc: what sbuf and rbuf are */
    size_t buf_len;
    perf_slot_t *slots;
    unsigned nslots_max;
    perf_slot_t aux; /* flushes, receives and one-off operations */

    /* RMA: our registered region and the peer's */
    ferry_mem_t *mem;
    uint8_t *region;
    size_t region_len;
    ferry_rkey_t *rkey;
    uint64_t remote_addr;
} perf_t;

/* ---- results and output ----------------------------------------------------------------- */

typedef struct perf_result {
    perf_test_id_t test;
    size_t size;
    uint64_t iters;
    unsigned window;
    int has_lat, has_bw;
    double lat_avg, lat_p50, lat_p90, lat_p99, lat_min, lat_max; /* microseconds */
    double bw_mbs;                                               /* 10^6 bytes per second */
    double rate;                                                 /* operations per second */
} perf_result_t;

typedef struct perf_out {
    perf_format_t fmt;
    FILE *f;
    int last_test; /* the table block being printed (-1: none) */
    unsigned nresults;
    const char *mode, *tls;
    int check;
    int demo; /* a few words for newcomers around the table */
} perf_out_t;

void perf_out_begin(perf_out_t *o);
void perf_out_result(perf_out_t *o, const perf_result_t *r);
void perf_out_unavailable(perf_out_t *o, perf_test_id_t test, const char *why);
void perf_out_end(perf_out_t *o, int errors);

/* Fill r's latency figures from per-operation tick counts (sorted in place). */
void perf_stats_latency(perf_result_t *r, uint64_t *ticks, uint64_t n, double divisor);

/* ---- options and the plan (ferry_perf.c) ------------------------------------------------ */

#define PERF_MAX_SIZE  (1ull << 30)
#define PERF_CHECK_MEM (16u << 20) /* per-slot buffers in check mode, at most this much */
#define PERF_MAX_PLAN  512
#define PERF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PERF_MIN(a, b) ((a) < (b) ? (a) : (b))

typedef struct perf_item {
    perf_test_id_t test;
    size_t size;
} perf_item_t;

typedef struct perf_opts {
    perf_item_t plan[PERF_MAX_PLAN];
    unsigned nplan;
    uint64_t iters, warmup; /* 0: by size */
    int warmup_set;
    unsigned window;
    int check, server, demo;
    int mem_alloc; /* -M alloc */
    unsigned verbose;
    perf_format_t fmt;
    unsigned short port;
    const char *host, *hexaddr, *cpus;
    double timeout_s;
} perf_opts_t;

/* The parameters of one plan item: iterations by size unless -n/-w, whole windows. */
void perf_plan_counts(const perf_opts_t *o, const perf_item_t *it, perf_params_t *prm);

/* ---- time -------------------------------------------------------------------------------- */

/* A cheap cycle counter where the TSC is invariant, else CLOCK_MONOTONIC nanoseconds. */
void perf_clock_init(void);
uint64_t perf_ticks(void);
double perf_ticks_to_ns(uint64_t ticks);

/* ---- the session, both sides (ferry_perf.c / ferry_perf_tests.c) ------------------------ */

/* The session (ferry_perf_session.c).  p->ep must be set, except on a server, whose
 * responder creates it from the address in HELLO.  Return an exit status (0, 1). */
int perf_session_initiator(perf_t *p, const perf_opts_t *o, perf_out_t *out);
int perf_session_responder(perf_t *p, perf_msg_t *hello);
void perf_cleanup(perf_t *p);
/* The handler of PERF_AM_CTRL (arg: the perf_t); the error handler of endpoints made here. */
ferry_status_t perf_ctrl_cb(void *arg, const void *header, size_t header_len, const void *data,
                            size_t data_len, ferry_ep_t *reply_ep);
void perf_ep_err_cb(void *arg, ferry_ep_t *ep, ferry_status_t status);
/* Receive the next control message, which must be of the given type. */
ferry_status_t perf_ctrl_expect(perf_t *p, perf_ctrl_type_t type, perf_msg_t *msg);
/* The worker's address blob (malloc'd). */
ferry_status_t perf_worker_address(perf_t *p, void **buf, size_t *len);

/* Progress until a control message is in the inbox (waiting, not spinning). */
ferry_status_t perf_ctrl_recv(perf_t *p, perf_msg_t *msg);
ferry_status_t perf_ctrl_send(perf_t *p, perf_ctrl_type_t type, const perf_params_t *prm,
                              int64_t arg0, uint64_t arg1, const void *data, size_t len);
void perf_msg_release(perf_msg_t *msg);

/* Prepare buffers for a size (both sides), run one measurement (initiator), answer one
 * measurement (responder). */
ferry_status_t perf_run_initiator(perf_t *p, const perf_params_t *prm, perf_result_t *res);
ferry_status_t perf_run_responder(perf_t *p, const perf_params_t *prm);
/* Is ferry_tag_* implemented?  (probe returns something other than UNSUPPORTED) */
int perf_tag_available(perf_t *p);
/* Slots usable at a size: the window, capped by per-slot buffer space in check mode. */
unsigned perf_nslots(const perf_t *p, const perf_params_t *prm);

/* The handlers of PERF_AM_DATA and PERF_AM_ACK (arg: the perf_t). */
ferry_status_t perf_data_cb(void *arg, const void *header, size_t header_len, const void *data,
                            size_t data_len, ferry_ep_t *reply_ep);
ferry_status_t perf_ack_cb(void *arg, const void *header, size_t header_len, const void *data,
                           size_t data_len, ferry_ep_t *reply_ep);
/* Checks the responder makes when a measurement ends (END carries the operation count). */
void perf_end_checks(perf_t *p, uint64_t ops);

/* The verification pattern: a function of (sequence number, direction, offset). */
void perf_pattern_fill(void *buf, size_t len, uint64_t seq, unsigned dir);
int perf_pattern_check(const void *buf, size_t len, uint64_t seq, unsigned dir);
#define PERF_DIR_I2R    1u
#define PERF_DIR_R2I    2u
#define PERF_DIR_REGION 3u

/* ---- out of band (ferry_perf_oob.c) ------------------------------------------------------ */

char *perf_hex_encode(const void *buf, size_t len);                       /* malloc'd */
ferry_status_t perf_hex_decode(const char *hex, void **buf, size_t *len); /* malloc'd */
/* Server: listen on port (0 = any); *port_p gets the real one. Returns the fd or -1. */
int perf_oob_listen(unsigned short port, unsigned short *port_p);
/* Server: accept one client if one is waiting (nonblocking) and send it the address. */
int perf_oob_serve(int lfd, const void *addr, size_t len);
/* Client: fetch the server's worker address from host:port. */
ferry_status_t perf_oob_fetch(const char *host, unsigned short port, void **addr, size_t *len);

#endif
