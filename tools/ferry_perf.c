/*
 * ferry_perf.c - latency, bandwidth and message rate of ferry between two processes, in the
 * spirit of ucx_perftest: the options, the setup and the session.
 *
 * Two processes take part: an initiator, which parses the plan, measures and prints, and a
 * responder, which answers.  They are found in one of three ways:
 *
 *   ferryrun -n 2 ferry_perf [options]     the world layer: rank 0 initiates, rank 1 responds
 *   ferry_perf -l [-p port]                a server: prints its worker address (hex) and
 *                                          hands it to clients that connect to the TCP port
 *   ferry_perf [options] host[:port]       a client of that server (or -a <hex address>)
 *
 * Whatever the way, the session is the same, in control active messages over the one
 * endpoint: HELLO (the initiator's address, its remote key, buffer sizes) and HELLO_ACK (the
 * responder's key), then per test and size START / START_ACK, the measurement, END / END_ACK
 * (with the responder's verification errors), and at last BYE / BYE_ACK.  So the responder
 * needs no options: it learns everything from the initiator, and a server serves any test.
 *
 * Setup and teardown wait with ferry_worker_wait() (they may sleep); measurements busy-poll
 * (ferry_perf_tests.c).  The exit status is 0 on success, 1 on a failure or a verification
 * error (-c), 2 on a usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry_perf.h"
#include "util/config.h"

const perf_test_desc_t perf_tests[PERF_NUM_TESTS] = {
    [PERF_AM_LAT] = {"am_lat", "active message ping-pong; latency = round trip / 2",
                     PERF_KIND_PINGPONG, 0, 0, 0, 0},
    [PERF_AM_BW] = {"am_bw", "active message bandwidth: windows of sends, acknowledged",
                    PERF_KIND_BW, 0, 0, 0, 0},
    [PERF_AM_RATE] = {"am_rate", "active message rate: windows of small sends, acknowledged",
                      PERF_KIND_BW, 0, 0, 0, 0},
    [PERF_PUT_LAT] = {"put_lat", "put ping-pong: each side polls the last byte of its region",
                      PERF_KIND_PINGPONG, 1, 0, 1, 0},
    [PERF_PUT_BW] = {"put_bw", "put bandwidth: a window of puts, then a flush",
                     PERF_KIND_BW, 1, 0, 1, 0},
    [PERF_GET_LAT] = {"get_lat", "get latency: one complete get (a round trip)",
                      PERF_KIND_ROUNDTRIP, 1, 0, 1, 0},
    [PERF_GET_BW] = {"get_bw", "get bandwidth: a window of outstanding gets",
                     PERF_KIND_BW, 1, 0, 1, 0},
    [PERF_AMO_LAT] = {"amo_lat", "64-bit fetch-add latency: one complete operation (a round trip)",
                      PERF_KIND_ROUNDTRIP, 1, 0, 8, 8},
    [PERF_TAG_LAT] = {"tag_lat", "tagged message ping-pong; latency = round trip / 2",
                      PERF_KIND_PINGPONG, 0, 1, 0, 0},
    [PERF_TAG_BW] = {"tag_bw", "tagged message bandwidth: windows of sends, acknowledged",
                     PERF_KIND_BW, 0, 1, 0, 0},
};

#define PERF_DEFAULT_PORT 13340
#define PERF_DEFAULT_WINDOW 64
#define PERF_MAX_SIZE (1ull << 30)
#define PERF_CHECK_MEM (16u << 20) /* per-slot buffers in check mode, at most this much */
#define PERF_MAX_PLAN 512
#define PERF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PERF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PERF_CLAMP(x, lo, hi) ((x) < (lo) ? (lo) : (x) > (hi) ? (hi) : (x))

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
    unsigned verbose;
    perf_format_t fmt;
    unsigned short port;
    const char *host, *hexaddr, *cpus;
    double timeout_s;
} perf_opts_t;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ferryrun -n 2 ferry_perf [options]      two ranks of a launched job\n"
        "       ferry_perf -l [-p port] [-C cpu]        a server (prints its address)\n"
        "       ferry_perf [options] host[:port]        a client of that server\n"
        "       ferry_perf [options] -a <hex address>   a client, given the server's address\n"
        "\n"
        "Measures ferry between two processes; the first rank (or the client) prints.\n"
        "\n"
        "  -t TEST[,TEST...]  what to measure (default am_lat; \"all\" for every test):\n");
    for (int t = 0; t < PERF_NUM_TESTS; t++)
        fprintf(f, "       %-8s %s\n", perf_tests[t].name, perf_tests[t].doc);
    fprintf(f,
        "  -s SIZES       message size in bytes: 8, 4k, 1m; a list 8,64,1k; a sweep of powers\n"
        "                 of two 1:4m (default 8; atomics are always 8)\n"
        "  -n N           measured iterations per size (default: by size and test)\n"
        "  -w N           warm-up iterations (default n/10, at least 10)\n"
        "  -W N           window: operations in flight in bandwidth/rate tests (default %d)\n"
        "  -f FORMAT      table (default), csv or json\n"
        "  -c             check: verify every payload (slower; exit 1 on any error)\n"
        "  -l             server mode;  -p PORT  its TCP port (default %d, 0 = any)\n"
        "  -a HEX         client mode, with the server's worker address\n"
        "  -C CPUS        pin: rank i takes the i-th cpu of the list (server/client: the first)\n"
        "  -T SECONDS     give up when the peer is silent this long (default 60, 0 = never)\n"
        "  -v             print the worker's interfaces and lanes once connected (stderr)\n"
        "  --demo         a short tour for newcomers: am_lat 8 B..64 KiB, am_bw 8 B..4 MiB\n"
        "  -h, --help     this help\n"
        "\n"
        "Latency is one-way (round trip / 2) for ping-pong tests, the whole operation for get\n"
        "and atomics; in microseconds: median, p90, p99, min, average.  Bandwidth in MB/s\n"
        "(10^6 bytes/s), rate in operations/s.  Transports: FERRY_TLS=shm|tcp|udp|... in the\n"
        "environment (ferry_info lists them).\n",
        PERF_DEFAULT_WINDOW, PERF_DEFAULT_PORT);
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "ferry_perf: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(ferry_perf -h for help)\n");
    return 2;
}

/* ---- options -------------------------------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || *s == '-')
        return -1;
    *out = v;
    return 0;
}

static int parse_size(const char *s, size_t *out)
{
    if (fy_config_parse_size(s, out) != FERRY_OK || *out > PERF_MAX_SIZE)
        return -1;
    return 0;
}

/* "8", "8,64,1k", "1:4m" (powers of two from 1 to 4 MiB; 0:... starts with 0). */
static int parse_sizes(char *arg, size_t *sizes, unsigned max, unsigned *n)
{
    *n = 0;
    for (char *tok = strtok(arg, ","); tok != NULL; tok = strtok(NULL, ",")) {
        char *colon = strchr(tok, ':');
        size_t lo, hi;
        if (colon == NULL) {
            if (parse_size(tok, &lo) != 0 || *n >= max)
                return -1;
            sizes[(*n)++] = lo;
            continue;
        }
        *colon = '\0';
        if (parse_size(tok, &lo) != 0 || parse_size(colon + 1, &hi) != 0 || lo > hi)
            return -1;
        if (lo == 0) {
            if (*n >= max)
                return -1;
            sizes[(*n)++] = 0;
            lo = 1;
        }
        size_t s = 1;
        while (s < lo)
            s <<= 1;
        for (; s <= hi; s <<= 1) {
            if (*n >= max)
                return -1;
            sizes[(*n)++] = s;
        }
    }
    return *n ? 0 : -1;
}

static int parse_tests(char *arg, int *tests, unsigned *n)
{
    *n = 0;
    for (char *tok = strtok(arg, ","); tok != NULL; tok = strtok(NULL, ",")) {
        if (strcmp(tok, "all") == 0) {
            for (int t = 0; t < PERF_NUM_TESTS; t++)
                tests[(*n)++] = t;
            continue;
        }
        int t = 0;
        while (t < PERF_NUM_TESTS && strcmp(perf_tests[t].name, tok) != 0)
            t++;
        if (t == PERF_NUM_TESTS || *n >= 2 * PERF_NUM_TESTS)
            return -1;
        tests[(*n)++] = t;
    }
    return *n ? 0 : -1;
}

static void plan_add(perf_opts_t *o, perf_test_id_t t, const size_t *sizes, unsigned nsizes)
{
    const perf_test_desc_t *d = &perf_tests[t];
    if (d->fixed_size) {
        if (o->nplan < PERF_MAX_PLAN)
            o->plan[o->nplan++] = (perf_item_t){t, d->fixed_size};
        return;
    }
    for (unsigned i = 0; i < nsizes; i++)
        if (sizes[i] >= d->min_size && o->nplan < PERF_MAX_PLAN)
            o->plan[o->nplan++] = (perf_item_t){t, sizes[i]};
}

static int parse_options(int argc, char **argv, perf_opts_t *o)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"demo", no_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    static size_t sizes[PERF_MAX_PLAN];
    int tests[2 * PERF_NUM_TESTS] = {PERF_AM_LAT};
    unsigned ntests = 1, nsizes = 0;
    uint64_t v;
    int c;

    memset(o, 0, sizeof(*o));
    o->window = PERF_DEFAULT_WINDOW;
    o->port = PERF_DEFAULT_PORT;
    o->timeout_s = 60;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":t:s:n:w:W:f:clp:a:C:T:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (parse_tests(optarg, tests, &ntests) != 0)
                return bad_usage("unknown test in -t '%s'", optarg);
            break;
        case 's':
            if (parse_sizes(optarg, sizes, PERF_MAX_PLAN, &nsizes) != 0)
                return bad_usage("bad size list -s '%s' (examples: 8, 8,64,1k, 1:4m; at most 1g)",
                                 optarg);
            break;
        case 'n':
            if (parse_u64(optarg, &o->iters) != 0 || o->iters == 0)
                return bad_usage("bad iteration count -n '%s' (a positive integer)", optarg);
            break;
        case 'w':
            if (parse_u64(optarg, &o->warmup) != 0)
                return bad_usage("bad warm-up count -w '%s' (an integer >= 0)", optarg);
            o->warmup_set = 1;
            break;
        case 'W':
            if (parse_u64(optarg, &v) != 0 || v == 0 || v > 65536)
                return bad_usage("bad window -W '%s' (1..65536)", optarg);
            o->window = (unsigned)v;
            break;
        case 'f':
            if (strcmp(optarg, "table") == 0)
                o->fmt = PERF_FMT_TABLE;
            else if (strcmp(optarg, "csv") == 0)
                o->fmt = PERF_FMT_CSV;
            else if (strcmp(optarg, "json") == 0)
                o->fmt = PERF_FMT_JSON;
            else
                return bad_usage("unknown format -f '%s' (table, csv or json)", optarg);
            break;
        case 'c':
            o->check = 1;
            break;
        case 'l':
            o->server = 1;
            break;
        case 'p':
            if (parse_u64(optarg, &v) != 0 || v > 65535)
                return bad_usage("bad port -p '%s'", optarg);
            o->port = (unsigned short)v;
            break;
        case 'a':
            o->hexaddr = optarg;
            break;
        case 'C':
            o->cpus = optarg;
            break;
        case 'T':
            if (parse_u64(optarg, &v) != 0)
                return bad_usage("bad timeout -T '%s' (seconds, 0 = never)", optarg);
            o->timeout_s = (double)v;
            break;
        case 'v':
            o->verbose++;
            break;
        case 'D':
            o->demo = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case ':':
            return bad_usage("option -%s needs a value", (char[]){(char)optopt, 0});
        default:
            if (optopt)
                return bad_usage("unknown option -%s", (char[]){(char)optopt, 0});
            return bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc - 1)
        return bad_usage("unexpected argument '%s'", argv[optind + 1]);
    if (optind == argc - 1)
        o->host = argv[optind];
    if (o->server && (o->host || o->hexaddr))
        return bad_usage("%s", "-l (server) takes no server address");
    if (o->host && o->hexaddr)
        return bad_usage("%s", "give the server as host[:port] or as -a, not both");

    if (o->demo) {
        static const size_t lat[] = {8, 64, 512, 4096, 32768, 65536};
        static const size_t bw[] = {8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20};
        plan_add(o, PERF_AM_LAT, lat, 6);
        plan_add(o, PERF_AM_BW, bw, 8);
        return 0;
    }
    if (nsizes == 0)
        sizes[nsizes++] = 8;
    for (unsigned i = 0; i < ntests; i++)
        plan_add(o, (perf_test_id_t)tests[i], sizes, nsizes);
    if (o->nplan == 0)
        return bad_usage("%s", "no size in -s suits the chosen tests (put/get need >= 1 byte)");
    return 0;
}

/* Iterations by size: small messages many times, large ones enough to move ~1 GiB (bandwidth)
 * or ~256 MiB (latency), within bounds so that a sweep takes seconds. */
static void plan_counts(const perf_opts_t *o, const perf_item_t *it, perf_params_t *prm)
{
    const perf_test_desc_t *d = &perf_tests[it->test];
    uint64_t sz = it->size ? it->size : 1, n;
    if (d->kind == PERF_KIND_BW)
        n = PERF_CLAMP((1ull << 30) / sz, 100, 1000000);
    else
        n = PERF_CLAMP((256ull << 20) / sz, 100, 100000);
    if (o->demo)
        n = PERF_MAX(n / 10, 50);
    prm->test = it->test;
    prm->size = it->size;
    prm->iters = o->iters ? o->iters : n;
    prm->warmup = o->warmup_set ? o->warmup : PERF_MAX(prm->iters / 10, 10);
    prm->window = d->kind == PERF_KIND_BW ? o->window : 1;
    prm->flags = o->check ? PERF_FLAG_CHECK : 0;
    if (d->kind == PERF_KIND_BW) { /* whole windows */
        prm->iters = (prm->iters + prm->window - 1) / prm->window * prm->window;
        prm->warmup = (prm->warmup + prm->window - 1) / prm->window * prm->window;
    }
}

/* ---- control messages ---------------------------------------------------------------------- */

static ferry_status_t ctrl_cb(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_ep_t *reply_ep)
{
    perf_t *p = arg;
    perf_ctrl_t h;
    if (header_len != sizeof(h)) {
        fprintf(stderr, "ferry_perf: ignored a control message with a %zu-byte header\n",
                header_len);
        return FERRY_OK;
    }
    memcpy(&h, header, sizeof(h));
    if (h.magic != PERF_MAGIC || p->inbox_count == PERF_INBOX) {
        fprintf(stderr, "ferry_perf: ignored a control message (%s)\n",
                h.magic != PERF_MAGIC ? "bad magic" : "inbox full");
        return FERRY_OK;
    }
    perf_msg_t *m = &p->inbox[(p->inbox_head + p->inbox_count) % PERF_INBOX];
    m->hdr = h;
    m->data = NULL;
    m->data_len = 0;
    if (data_len > 0) {
        if ((m->data = malloc(data_len)) == NULL)
            return FERRY_ERR_NO_MEMORY;
        memcpy(m->data, data, data_len);
        m->data_len = data_len;
    }
    p->inbox_count++;
    return FERRY_OK;
}

void perf_msg_release(perf_msg_t *msg)
{
    free(msg->data);
    msg->data = NULL;
    msg->data_len = 0;
}

ferry_status_t perf_ctrl_send(perf_t *p, perf_ctrl_type_t type, const perf_params_t *prm,
                              int64_t arg0, uint64_t arg1, const void *data, size_t len)
{
    perf_ctrl_t h;
    ferry_status_t st;
    memset(&h, 0, sizeof(h));
    h.magic = PERF_MAGIC;
    h.type = type;
    if (prm != NULL) {
        h.test = prm->test;
        h.flags = prm->flags;
        h.size = prm->size;
        h.warmup = prm->warmup;
        h.iters = prm->iters;
        h.window = prm->window;
    }
    h.arg0 = arg0;
    h.arg1 = arg1;
    /* no request: ferry copies header and data before returning */
    while ((st = ferry_am_send(p->ep, PERF_AM_CTRL, &h, sizeof(h), len ? data : (const void *)&h,
                               len, NULL)) == FERRY_ERR_NO_RESOURCE)
        ferry_worker_progress(p->worker);
    if (st < 0)
        fprintf(stderr, "ferry_perf: sending a control message failed: %s\n",
                ferry_status_string(st));
    return st < 0 ? st : FERRY_OK;
}

ferry_status_t perf_ctrl_recv(perf_t *p, perf_msg_t *msg)
{
    double t0 = perf_ticks_to_ns(perf_ticks());
    while (p->inbox_count == 0) {
        if (p->ep_failed)
            return FERRY_ERR_NOT_CONNECTED;
        ferry_status_t st = ferry_worker_wait(p->worker, 100);
        if (st != FERRY_OK && st != FERRY_ERR_TIMED_OUT)
            ferry_worker_progress(p->worker);
        if (p->timeout_ns && perf_ticks_to_ns(perf_ticks()) - t0 > (double)p->timeout_ns) {
            fprintf(stderr, "ferry_perf: the peer sent nothing for %.0f s\n",
                    (double)p->timeout_ns / 1e9);
            return FERRY_ERR_TIMED_OUT;
        }
    }
    *msg = p->inbox[p->inbox_head];
    p->inbox_head = (p->inbox_head + 1) % PERF_INBOX;
    p->inbox_count--;
    return FERRY_OK;
}

static const char *ctrl_name(uint32_t type)
{
    static const char *const names[] = {"?", "HELLO", "HELLO_ACK", "START", "START_ACK",
                                        "END", "END_ACK", "BYE", "BYE_ACK"};
    return type < sizeof(names) / sizeof(names[0]) ? names[type] : "?";
}

/* Receive the next control message, which must be of the given type. */
static ferry_status_t ctrl_expect(perf_t *p, perf_ctrl_type_t type, perf_msg_t *msg)
{
    ferry_status_t st = perf_ctrl_recv(p, msg);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry_perf: no %s from the peer: %s\n", ctrl_name(type),
                ferry_status_string(st));
        return st;
    }
    if (msg->hdr.type != type) {
        fprintf(stderr, "ferry_perf: expected %s from the peer, got %s\n", ctrl_name(type),
                ctrl_name(msg->hdr.type));
        perf_msg_release(msg);
        return FERRY_ERR_PROTOCOL;
    }
    return FERRY_OK;
}

/* ---- setup pieces -------------------------------------------------------------------------- */

static void ep_err_cb(void *arg, ferry_ep_t *ep, ferry_status_t status)
{
    perf_t *p = arg;
    p->ep_failed = 1;
    fprintf(stderr, "ferry_perf: the connection to the peer failed: %s\n",
            ferry_status_string(status));
}

static ferry_status_t wait_req(perf_t *p, perf_slot_t *s, ferry_status_t st, const char *what)
{
    if (st == FERRY_INPROGRESS) {
        while (s->busy && !p->ep_failed)
            if (ferry_worker_wait(p->worker, 100) != FERRY_OK)
                ferry_worker_progress(p->worker);
        st = s->req.status;
    }
    if (st < 0)
        fprintf(stderr, "ferry_perf: %s failed: %s\n", what, ferry_status_string(st));
    return st;
}

static void aux_cb(ferry_request_t *req, ferry_status_t status) { ((perf_slot_t *)req)->busy = 0; }

static ferry_request_t *aux_req(perf_t *p)
{
    memset(&p->aux.req, 0, sizeof(p->aux.req));
    p->aux.req.cb = aux_cb;
    p->aux.perf = p;
    p->aux.busy = 1;
    return &p->aux.req;
}

/* Buffers and, for RMA, a registered region, all of buf_len bytes, touched once so that no
 * page fault lands in a measurement. */
static ferry_status_t setup_buffers(perf_t *p, size_t buf_len, unsigned nslots, int rma)
{
    size_t alloc = (buf_len + 4095) / 4096 * 4096;
    p->buf_len = buf_len;
    p->nslots_max = nslots;
    p->sbuf = aligned_alloc(4096, alloc);
    p->rbuf = aligned_alloc(4096, alloc);
    p->slots = calloc(nslots, sizeof(*p->slots));
    if (p->sbuf == NULL || p->rbuf == NULL || p->slots == NULL) {
        fprintf(stderr, "ferry_perf: cannot allocate %zu bytes of buffers\n", 2 * alloc);
        return FERRY_ERR_NO_MEMORY;
    }
    memset(p->sbuf, 0, alloc);
    memset(p->rbuf, 0, alloc);
    for (unsigned k = 0; k < nslots; k++)
        p->slots[k].perf = p;
    p->aux.perf = p;
    if (!rma)
        return FERRY_OK;

    ferry_mem_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS;
    mp.length = buf_len;
    mp.flags = FERRY_MEM_ALLOCATE;
    ferry_status_t st = ferry_mem_map(p->context, &mp, &p->mem);
    void *addr = NULL;
    size_t len = 0;
    if (st == FERRY_OK)
        st = ferry_mem_query(p->mem, &addr, &len);
    if (st != FERRY_OK || len < buf_len) {
        fprintf(stderr, "ferry_perf: cannot register %zu bytes for RMA: %s\n", buf_len,
                ferry_status_string(st));
        return st != FERRY_OK ? st : FERRY_ERR_NO_MEMORY;
    }
    p->region = addr;
    p->region_len = len;
    memset(p->region, 0, buf_len);
    return FERRY_OK;
}

/* A packed rkey of our region (malloc'd), or NULL/0 without RMA. */
static ferry_status_t pack_rkey(perf_t *p, void **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    if (p->mem == NULL)
        return FERRY_OK;
    ferry_status_t st = ferry_rkey_pack(p->context, p->mem, NULL, len);
    if (st != FERRY_ERR_TRUNCATED && st != FERRY_OK)
        goto fail;
    if ((*buf = malloc(*len ? *len : 1)) == NULL)
        return FERRY_ERR_NO_MEMORY;
    if ((st = ferry_rkey_pack(p->context, p->mem, *buf, len)) == FERRY_OK)
        return FERRY_OK;
    free(*buf);
    *buf = NULL;
fail:
    fprintf(stderr, "ferry_perf: ferry_rkey_pack failed: %s\n", ferry_status_string(st));
    return st;
}

static ferry_status_t unpack_rkey(perf_t *p, const void *buf, size_t len, uint64_t addr)
{
    if (len == 0)
        return FERRY_OK;
    ferry_status_t st = ferry_rkey_unpack(p->ep, buf, len, &p->rkey);
    if (st != FERRY_OK)
        fprintf(stderr, "ferry_perf: ferry_rkey_unpack failed: %s\n", ferry_status_string(st));
    p->remote_addr = addr;
    return st;
}

static ferry_status_t worker_address(perf_t *p, void **buf, size_t *len)
{
    ferry_status_t st;
    *len = 0;
    *buf = NULL;
    st = ferry_worker_get_address(p->worker, NULL, len);
    if (st != FERRY_ERR_TRUNCATED && st != FERRY_OK)
        goto fail;
    if ((*buf = malloc(*len)) == NULL)
        return FERRY_ERR_NO_MEMORY;
    if ((st = ferry_worker_get_address(p->worker, *buf, len)) == FERRY_OK)
        return FERRY_OK;
    free(*buf);
    *buf = NULL;
fail:
    fprintf(stderr, "ferry_perf: ferry_worker_get_address failed: %s\n", ferry_status_string(st));
    return st;
}

/* HELLO's data: | addr_len (u32) | rkey_len (u32) | worker address | packed rkey | */
static void *hello_pack(const void *addr, uint32_t alen, const void *rkey, uint32_t rlen,
                        size_t *len)
{
    uint8_t *b = malloc(8 + (size_t)alen + rlen);
    if (b == NULL)
        return NULL;
    memcpy(b, &alen, 4);
    memcpy(b + 4, &rlen, 4);
    memcpy(b + 8, addr, alen);
    if (rlen)
        memcpy(b + 8 + alen, rkey, rlen);
    *len = 8 + (size_t)alen + rlen;
    return b;
}

static int hello_unpack(const perf_msg_t *m, const uint8_t **addr, uint32_t *alen,
                        const uint8_t **rkey, uint32_t *rlen)
{
    const uint8_t *b = m->data;
    if (m->data_len < 8)
        return -1;
    memcpy(alen, b, 4);
    memcpy(rlen, b + 4, 4);
    if ((uint64_t)8 + *alen + *rlen != m->data_len)
        return -1;
    *addr = b + 8;
    *rkey = b + 8 + *alen;
    return 0;
}

static int pin_cpu(const char *list, int index)
{
    int cpus[256], n = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && n < 256; t = strtok_r(NULL, ",", &save))
        cpus[n++] = atoi(t);
    free(copy);
    if (n == 0)
        return -1;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[index % n], &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        fprintf(stderr, "ferry_perf: cannot pin to cpu %d: %s\n", cpus[index % n], strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the initiator's session ------------------------------------------------------------------ */

static ferry_status_t initiator_hello(perf_t *p, const perf_opts_t *o)
{
    size_t max_size = 64, buf_len, dlen = 0, alen, rlen;
    void *addr = NULL, *rkey = NULL, *data = NULL;
    int rma = 0;
    perf_msg_t m;
    ferry_status_t st;

    for (unsigned i = 0; i < o->nplan; i++) {
        max_size = PERF_MAX(max_size, o->plan[i].size);
        rma |= perf_tests[o->plan[i].test].rma;
    }
    buf_len = max_size;
    if (o->check) /* a buffer per slot, within reason */
        buf_len = PERF_MAX(max_size, PERF_MIN((size_t)o->window * max_size, (size_t)PERF_CHECK_MEM));
    if ((st = setup_buffers(p, buf_len, o->window, rma)) != FERRY_OK ||
        (st = worker_address(p, &addr, &alen)) != FERRY_OK ||
        (st = pack_rkey(p, &rkey, &rlen)) != FERRY_OK)
        goto out;
    if ((data = hello_pack(addr, (uint32_t)alen, rkey, (uint32_t)rlen, &dlen)) == NULL) {
        st = FERRY_ERR_NO_MEMORY;
        goto out;
    }
    perf_params_t hp = {.size = buf_len, .window = o->window,
                        .flags = (rma ? PERF_FLAG_RMA : 0) | (o->check ? PERF_FLAG_CHECK : 0)};
    if ((st = perf_ctrl_send(p, PERF_CTRL_HELLO, &hp, 0, (uint64_t)(uintptr_t)p->region, data,
                             dlen)) != FERRY_OK ||
        (st = ctrl_expect(p, PERF_CTRL_HELLO_ACK, &m)) != FERRY_OK)
        goto out;
    if (m.hdr.arg0 < 0) {
        st = (ferry_status_t)m.hdr.arg0;
        fprintf(stderr, "ferry_perf: the responder could not prepare: %s\n",
                ferry_status_string(st));
    } else if (rma) {
        st = unpack_rkey(p, m.data, m.data_len, m.hdr.arg1);
    }
    perf_msg_release(&m);
out:
    free(addr);
    free(rkey);
    free(data);
    return st;
}

/* One test at one size: START, measure, END; errors found at either end are counted. */
static ferry_status_t initiator_measure(perf_t *p, const perf_params_t *prm, perf_result_t *res,
                                        uint64_t *errors)
{
    perf_msg_t m;
    ferry_status_t st, run;

    p->cur = *prm;
    p->recv_count = p->ack_count = 0;
    p->errors = 0;
    if (p->region != NULL)
        memset(p->region, 0, prm->size);
    if ((st = perf_ctrl_send(p, PERF_CTRL_START, prm, 0, 0, NULL, 0)) != FERRY_OK ||
        (st = ctrl_expect(p, PERF_CTRL_START_ACK, &m)) != FERRY_OK)
        return st;
    perf_msg_release(&m);
    if (m.hdr.arg0 < 0) {
        fprintf(stderr, "ferry_perf: the responder refused %s at %zu B: %s\n",
                perf_tests[prm->test].name, prm->size, ferry_status_string((ferry_status_t)m.hdr.arg0));
        return (ferry_status_t)m.hdr.arg0;
    }
    run = perf_run_initiator(p, prm, res);
    if ((st = perf_ctrl_send(p, PERF_CTRL_END, prm, run == FERRY_OK ? (int64_t)(prm->warmup + prm->iters) : -1,
                             0, NULL, 0)) != FERRY_OK ||
        (st = ctrl_expect(p, PERF_CTRL_END_ACK, &m)) != FERRY_OK)
        return st;
    perf_msg_release(&m);
    *errors += p->errors + (uint64_t)(m.hdr.arg0 > 0 ? m.hdr.arg0 : 0);
    if (m.hdr.arg0 > 0)
        fprintf(stderr, "ferry_perf: the responder found %lld verification errors in %s, %zu B\n",
                (long long)m.hdr.arg0, perf_tests[prm->test].name, prm->size);
    return run;
}

static int session_initiator(perf_t *p, const perf_opts_t *o, perf_out_t *out)
{
    int unsupported[PERF_NUM_TESTS] = {0}, tag_ok, rc = 0;
    uint64_t errors = 0;
    perf_msg_t m;
    ferry_status_t st;

    if ((st = initiator_hello(p, o)) != FERRY_OK)
        return 1;
    if (p->verbose)
        ferry_worker_print_info(p->worker, stderr);
    tag_ok = perf_tag_available(p);
    perf_out_begin(out);
    for (unsigned i = 0; i < o->nplan; i++) {
        const perf_item_t *it = &o->plan[i];
        perf_params_t prm;
        perf_result_t res;
        if (unsupported[it->test])
            continue;
        if (perf_tests[it->test].tag && !tag_ok) {
            perf_out_unavailable(out, it->test, "ferry_tag_* returns FERRY_ERR_UNSUPPORTED");
            unsupported[it->test] = 1;
            continue;
        }
        plan_counts(o, it, &prm);
        st = initiator_measure(p, &prm, &res, &errors);
        if (st == FERRY_ERR_UNSUPPORTED) {
            perf_out_unavailable(out, it->test, "ferry returns FERRY_ERR_UNSUPPORTED for it");
            unsupported[it->test] = 1;
            continue;
        }
        if (st != FERRY_OK) {
            fprintf(stderr, "ferry_perf: %s at %zu B failed: %s\n", perf_tests[it->test].name,
                    it->size, ferry_status_string(st));
            rc = 1;
            break;
        }
        perf_out_result(out, &res);
    }
    perf_out_end(out, (int)errors);
    if (errors) {
        fprintf(stderr, "ferry_perf: %llu verification errors\n", (unsigned long long)errors);
        rc = 1;
    }
    if (perf_ctrl_send(p, PERF_CTRL_BYE, NULL, 0, 0, NULL, 0) != FERRY_OK ||
        ctrl_expect(p, PERF_CTRL_BYE_ACK, &m) != FERRY_OK)
        return 1;
    perf_msg_release(&m);
    return rc;
}

/* ---- the responder's session ------------------------------------------------------------------ */

static ferry_status_t responder_hello(perf_t *p, perf_msg_t *hello)
{
    const uint8_t *addr, *rkey;
    uint32_t alen, rlen;
    void *mykey = NULL;
    size_t mylen = 0;
    ferry_status_t st;
    const perf_ctrl_t *h = &hello->hdr;

    if (hello_unpack(hello, &addr, &alen, &rkey, &rlen) != 0 || h->size == 0 ||
        h->size > PERF_MAX_SIZE || h->window == 0 || h->window > 65536) {
        fprintf(stderr, "ferry_perf: malformed HELLO from the initiator\n");
        return FERRY_ERR_PROTOCOL;
    }
    if (p->ep == NULL) { /* server: an endpoint back to the client */
        ferry_ep_params_t ep;
        memset(&ep, 0, sizeof(ep));
        ep.field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER;
        ep.address = addr;
        ep.address_len = alen;
        ep.err_cb = ep_err_cb;
        ep.err_arg = p;
        if ((st = ferry_ep_create(p->worker, &ep, &p->ep)) != FERRY_OK) {
            fprintf(stderr, "ferry_perf: cannot reach the client: %s\n", ferry_status_string(st));
            return st;
        }
        p->own_ep = 1;
    }
    st = setup_buffers(p, h->size, (unsigned)h->window, (h->flags & PERF_FLAG_RMA) != 0);
    if (st == FERRY_OK && (h->flags & PERF_FLAG_RMA))
        st = unpack_rkey(p, rkey, rlen, h->arg1);
    if (st == FERRY_OK)
        st = pack_rkey(p, &mykey, &mylen);
    ferry_status_t sst = perf_ctrl_send(p, PERF_CTRL_HELLO_ACK, NULL, st,
                                        (uint64_t)(uintptr_t)p->region, mykey, mylen);
    free(mykey);
    return st != FERRY_OK ? st : sst;
}

/* Check a START and prepare the region for it. */
static ferry_status_t responder_prepare(perf_t *p, const perf_ctrl_t *h, perf_params_t *prm)
{
    if (h->test >= PERF_NUM_TESTS || h->size > p->buf_len || h->window == 0 ||
        h->window > p->nslots_max || (perf_tests[h->test].rma && p->region == NULL))
        return FERRY_ERR_INVALID_PARAM;
    prm->test = (perf_test_id_t)h->test;
    prm->size = h->size;
    prm->warmup = h->warmup;
    prm->iters = h->iters;
    prm->window = (unsigned)h->window;
    prm->flags = h->flags;
    p->cur = *prm;
    p->recv_count = p->ack_count = 0;
    p->errors = 0;
    if (prm->test == PERF_GET_LAT || prm->test == PERF_GET_BW)
        perf_pattern_fill(p->region, prm->size, 0, PERF_DIR_REGION);
    else if (p->region != NULL)
        memset(p->region, 0, prm->size);
    return FERRY_OK;
}

static int session_responder(perf_t *p, perf_msg_t *hello)
{
    perf_msg_t m;
    ferry_status_t st;

    st = responder_hello(p, hello);
    perf_msg_release(hello);
    if (st != FERRY_OK)
        return 1;
    for (;;) {
        if (perf_ctrl_recv(p, &m) != FERRY_OK)
            return 1;
        perf_msg_release(&m);
        if (m.hdr.type == PERF_CTRL_BYE)
            return perf_ctrl_send(p, PERF_CTRL_BYE_ACK, NULL, 0, 0, NULL, 0) == FERRY_OK ? 0 : 1;
        if (m.hdr.type != PERF_CTRL_START) {
            fprintf(stderr, "ferry_perf: unexpected %s from the initiator\n", ctrl_name(m.hdr.type));
            return 1;
        }
        perf_params_t prm;
        st = responder_prepare(p, &m.hdr, &prm);
        if (perf_ctrl_send(p, PERF_CTRL_START_ACK, NULL, st, 0, NULL, 0) != FERRY_OK)
            return 1;
        if (st != FERRY_OK)
            continue;
        /* CANCELED: the initiator ended the measurement early (it failed; it says why) */
        st = perf_run_responder(p, &prm);
        if (st != FERRY_OK && st != FERRY_ERR_CANCELED && st != FERRY_ERR_UNSUPPORTED)
            return 1;
        if (ctrl_expect(p, PERF_CTRL_END, &m) != FERRY_OK)
            return 1;
        perf_msg_release(&m);
        if (m.hdr.arg0 >= 0)
            perf_end_checks(p, (uint64_t)m.hdr.arg0);
        if (perf_ctrl_send(p, PERF_CTRL_END_ACK, NULL, (int64_t)p->errors, 0, NULL, 0) != FERRY_OK)
            return 1;
    }
}

/* ---- the three ways to find the peer ----------------------------------------------------------- */

static int run_world(perf_t *p, const perf_opts_t *o, perf_out_t *out)
{
    ferry_status_t st = ferry_world_create(p->worker, &p->world);
    char mode[96];
    perf_msg_t hello;
    int rank, rc;

    if (st != FERRY_OK) {
        fprintf(stderr, "ferry_perf: cannot join the job: %s\n", ferry_status_string(st));
        return 1;
    }
    rank = ferry_world_rank(p->world);
    if (ferry_world_size(p->world) != 2) {
        if (rank == 0)
            fprintf(stderr,
                    "ferry_perf: needs exactly 2 processes, found %d.  Run it as\n"
                    "  ferryrun -n 2 ferry_perf [options]\n"
                    "or start a server with `ferry_perf -l` and a client with "
                    "`ferry_perf [options] <host>`.\n",
                    ferry_world_size(p->world));
        return 2;
    }
    if (o->cpus != NULL)
        pin_cpu(o->cpus, rank);
    if ((st = ferry_world_ep(p->world, 1 - rank, &p->ep)) != FERRY_OK) {
        fprintf(stderr, "ferry_perf: no endpoint to rank %d: %s\n", 1 - rank,
                ferry_status_string(st));
        return 1;
    }
    p->initiator = rank == 0;
    if (p->initiator) {
        snprintf(mode, sizeof(mode), "2 ranks (%s)", ferry_world_backend(p->world));
        out->mode = mode;
        rc = session_initiator(p, o, out);
    } else {
        rc = ctrl_expect(p, PERF_CTRL_HELLO, &hello) == FERRY_OK ? session_responder(p, &hello)
                                                                   : 1;
    }
    if ((st = ferry_world_barrier(p->world)) != FERRY_OK && rc == 0) {
        fprintf(stderr, "ferry_perf: final barrier failed: %s\n", ferry_status_string(st));
        rc = 1;
    }
    return rc;
}

static int run_server(perf_t *p, const perf_opts_t *o)
{
    unsigned short port = 0;
    void *addr = NULL;
    size_t alen;
    perf_msg_t hello;
    int lfd, rc = 1;

    if (o->cpus != NULL)
        pin_cpu(o->cpus, 0);
    if (worker_address(p, &addr, &alen) != FERRY_OK)
        return 1;
    if ((lfd = perf_oob_listen(o->port, &port)) < 0) {
        fprintf(stderr, "ferry_perf: cannot listen on port %u: %s\n", o->port, strerror(errno));
        free(addr);
        return 1;
    }
    char *hex = perf_hex_encode(addr, alen);
    printf("ferry_perf: server address %s\n", hex ? hex : "?");
    printf("ferry_perf: listening on port %u\n", port);
    fflush(stdout);
    free(hex);
    /* Hand the address to whoever connects until a client says HELLO over ferry. */
    while (p->inbox_count == 0) {
        if (ferry_worker_wait(p->worker, 20) != FERRY_OK)
            ferry_worker_progress(p->worker);
        if (perf_oob_serve(lfd, addr, alen) < 0)
            fprintf(stderr, "ferry_perf: a client left before it had the address\n");
    }
    close(lfd);
    free(addr);
    p->initiator = 0;
    if (ctrl_expect(p, PERF_CTRL_HELLO, &hello) == FERRY_OK)
        rc = session_responder(p, &hello);
    fprintf(stderr, "ferry_perf: server done (%s)\n", rc ? "failed" : "ok");
    return rc;
}

static int run_client(perf_t *p, const perf_opts_t *o, perf_out_t *out)
{
    void *addr = NULL;
    size_t alen = 0;
    char host[256], mode[320];
    unsigned short port = PERF_DEFAULT_PORT;
    ferry_status_t st;
    int rc;

    if (o->cpus != NULL)
        pin_cpu(o->cpus, 0);
    if (o->hexaddr != NULL) {
        if (perf_hex_decode(o->hexaddr, &addr, &alen) != FERRY_OK) {
            fprintf(stderr, "ferry_perf: -a wants the hex address the server printed\n");
            return 2;
        }
        snprintf(mode, sizeof(mode), "client (address given)");
    } else {
        /* host, host:port, [v6addr]:port */
        const char *h = o->host, *colon;
        size_t hl;
        if (h[0] == '[' && (colon = strchr(h, ']')) != NULL) {
            hl = (size_t)(colon - h - 1);
            h++;
            colon = colon[1] == ':' ? colon + 1 : NULL;
        } else {
            colon = strchr(h, ':');
            if (colon != NULL && strchr(colon + 1, ':') != NULL)
                colon = NULL; /* a bare IPv6 address */
            hl = colon ? (size_t)(colon - h) : strlen(h);
        }
        if (hl == 0 || hl >= sizeof(host)) {
            fprintf(stderr, "ferry_perf: bad server '%s'\n", o->host);
            return 2;
        }
        memcpy(host, h, hl);
        host[hl] = '\0';
        if (colon != NULL) {
            uint64_t v;
            if (parse_u64(colon + 1, &v) != 0 || v == 0 || v > 65535) {
                fprintf(stderr, "ferry_perf: bad port in '%s'\n", o->host);
                return 2;
            }
            port = (unsigned short)v;
        }
        if (perf_oob_fetch(host, port, &addr, &alen) != FERRY_OK)
            return 1;
        snprintf(mode, sizeof(mode), "client of %s:%u", host, port);
    }
    ferry_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER;
    ep.address = addr;
    ep.address_len = alen;
    ep.err_cb = ep_err_cb;
    ep.err_arg = p;
    st = ferry_ep_create(p->worker, &ep, &p->ep);
    free(addr);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry_perf: cannot reach the server: %s\n", ferry_status_string(st));
        return 1;
    }
    p->own_ep = 1;
    p->initiator = 1;
    out->mode = mode;
    rc = session_initiator(p, o, out);
    return rc;
}

static void cleanup(perf_t *p)
{
    if (p->rkey != NULL)
        ferry_rkey_destroy(p->rkey);
    if (p->own_ep && p->ep != NULL && !p->ep_failed)
        wait_req(p, &p->aux, ferry_ep_close(p->ep, FERRY_EP_CLOSE_FLUSH, aux_req(p)),
                 "closing the endpoint");
    else if (p->own_ep && p->ep != NULL)
        wait_req(p, &p->aux, ferry_ep_close(p->ep, FERRY_EP_CLOSE_FORCE, aux_req(p)),
                 "closing the endpoint");
    if (p->mem != NULL)
        ferry_mem_unmap(p->context, p->mem);
    ferry_world_destroy(p->world);
    ferry_worker_destroy(p->worker);
    ferry_context_destroy(p->context);
    for (unsigned i = 0; i < p->inbox_count; i++)
        perf_msg_release(&p->inbox[(p->inbox_head + i) % PERF_INBOX]);
    free(p->sbuf);
    free(p->rbuf);
    free(p->slots);
}

int main(int argc, char **argv)
{
    static perf_opts_t opts;
    static perf_t perf;
    perf_t *p = &perf;
    perf_out_t out;
    ferry_status_t st;
    int rc = parse_options(argc, argv, &opts);
    if (rc != 0)
        return rc;

    perf_clock_init();
    p->timeout_ns = (uint64_t)(opts.timeout_s * 1e9);
    p->verbose = opts.verbose;
    memset(&out, 0, sizeof(out));
    out.fmt = opts.fmt;
    out.f = stdout;
    out.check = opts.check;
    out.demo = opts.demo;
    out.tls = getenv("FERRY_TLS") ? getenv("FERRY_TLS") : "(default)";
    out.mode = "";

    if ((st = ferry_context_create(NULL, &p->context)) != FERRY_OK) {
        fprintf(stderr, "ferry_perf: cannot create a ferry context: %s\n", ferry_status_string(st));
        return 1;
    }
    if ((st = ferry_worker_create(p->context, NULL, &p->worker)) != FERRY_OK ||
        (st = ferry_worker_set_am_handler(p->worker, PERF_AM_CTRL, ctrl_cb, p)) != FERRY_OK ||
        (st = ferry_worker_set_am_handler(p->worker, PERF_AM_DATA, perf_data_cb, p)) != FERRY_OK ||
        (st = ferry_worker_set_am_handler(p->worker, PERF_AM_ACK, perf_ack_cb, p)) != FERRY_OK) {
        fprintf(stderr, "ferry_perf: cannot set up a worker: %s\n", ferry_status_string(st));
        cleanup(p);
        return 1;
    }
    if (opts.server)
        rc = run_server(p, &opts);
    else if (opts.host != NULL || opts.hexaddr != NULL)
        rc = run_client(p, &opts, &out);
    else
        rc = run_world(p, &opts, &out);
    cleanup(p);
    return rc;
}
