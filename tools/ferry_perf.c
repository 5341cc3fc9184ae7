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
 * Whatever the way, the session that follows is the same (ferry_perf_session.c): the
 * responder needs no options, it learns every test from the initiator, so a server serves
 * any test.  This file holds the test table, the options and the plan, and the three ways.
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
    [PERF_PUT_BW] = {"put_bw", "put bandwidth: a window of puts, then a flush", PERF_KIND_BW, 1, 0,
                     1, 0},
    [PERF_GET_LAT] = {"get_lat", "get latency: one complete get (a round trip)",
                      PERF_KIND_ROUNDTRIP, 1, 0, 1, 0},
    [PERF_GET_BW] = {"get_bw", "get bandwidth: a window of outstanding gets", PERF_KIND_BW, 1, 0, 1,
                     0},
    [PERF_AMO_LAT] = {"amo_lat", "64-bit fetch-add latency: one complete operation (a round trip)",
                      PERF_KIND_ROUNDTRIP, 1, 0, 8, 8},
    [PERF_TAG_LAT] = {"tag_lat", "tagged message ping-pong; latency = round trip / 2",
                      PERF_KIND_PINGPONG, 0, 1, 0, 0},
    [PERF_TAG_BW] = {"tag_bw", "tagged message bandwidth: windows of sends, acknowledged",
                     PERF_KIND_BW, 0, 1, 0, 0},
    [PERF_TAG_STREAM] = {"tag_stream",
                         "tagged message stream as ucx_perftest's tag_bw counts it: up to W "
                         "receives posted, one acknowledgement at the end",
                         PERF_KIND_BW, 0, 1, 0, 0},
};

#define PERF_DEFAULT_PORT     13340
#define PERF_DEFAULT_WINDOW   64
#define PERF_CLAMP(x, lo, hi) ((x) < (lo) ? (lo) : (x) > (hi) ? (hi) : (x))

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
    fprintf(
        f,
        "  -s SIZES       message size in bytes: 8, 4k, 1m; a list 8,64,1k; a sweep of powers\n"
        "                 of two 1:4m (default 8; atomics are always 8)\n"
        "  -n N           measured iterations per size (default: by size and test)\n"
        "  -w N           warm-up iterations (default n/10, at least 10)\n"
        "  -W N           window: operations in flight in bandwidth/rate tests (default %d)\n"
        "  -f FORMAT      table (default), csv or json\n"
        "  -c, --check    check: verify every payload (slower; exit 1 on any error)\n"
        "  -l             server mode;  -p PORT  its TCP port (default %d, 0 = any)\n"
        "  -a HEX         client mode, with the server's worker address\n"
        "  -C CPUS        pin: rank i takes the i-th cpu of the list (server/client: the first)\n"
        "  -T SECONDS     give up when the peer is silent this long (default 60, 0 = never)\n"
        "  -M MEMORY      send and receive buffers: malloc (default), or alloc: memory ferry\n"
        "                 allocates (FERRY_MEM_ALLOCATE), which shm peers read in place\n"
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
        {"check", no_argument, NULL, 'c'},
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
    while ((c = getopt_long(argc, argv, ":t:s:n:w:W:f:clp:a:C:T:M:vh", longopts, NULL)) != -1) {
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
        case 'M':
            if (strcmp(optarg, "alloc") == 0)
                o->mem_alloc = 1;
            else if (strcmp(optarg, "malloc") != 0)
                return bad_usage("unknown memory -M '%s' (malloc or alloc)", optarg);
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
void perf_plan_counts(const perf_opts_t *o, const perf_item_t *it, perf_params_t *prm)
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

/* ---- the three ways to find the peer -----------------------------------------------------------
 */

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
        rc = perf_session_initiator(p, o, out);
    } else {
        rc = perf_ctrl_expect(p, PERF_CTRL_HELLO, &hello) == FERRY_OK
                 ? perf_session_responder(p, &hello)
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
    if (perf_worker_address(p, &addr, &alen) != FERRY_OK)
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
    if (perf_ctrl_expect(p, PERF_CTRL_HELLO, &hello) == FERRY_OK)
        rc = perf_session_responder(p, &hello);
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
    ep.err_cb = perf_ep_err_cb;
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
    rc = perf_session_initiator(p, o, out);
    return rc;
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
        (st = ferry_worker_set_am_handler(p->worker, PERF_AM_CTRL, perf_ctrl_cb, p)) != FERRY_OK ||
        (st = ferry_worker_set_am_handler(p->worker, PERF_AM_DATA, perf_data_cb, p)) != FERRY_OK ||
        (st = ferry_worker_set_am_handler(p->worker, PERF_AM_ACK, perf_ack_cb, p)) != FERRY_OK) {
        fprintf(stderr, "ferry_perf: cannot set up a worker: %s\n", ferry_status_string(st));
        perf_cleanup(p);
        return 1;
    }
    if (opts.server)
        rc = run_server(p, &opts);
    else if (opts.host != NULL || opts.hexaddr != NULL)
        rc = run_client(p, &opts, &out);
    else
        rc = run_world(p, &opts, &out);
    perf_cleanup(p);
    return rc;
}
