/*
 * context.c - the context: one per process.  It reads the FERRY_* configuration, opens a
 * memory domain of every selected transport and lists its devices.  Memory registration
 * and remote keys, which use those memory domains, are in mem.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include "boot/boot.h"
#include "proto/proto_int.h"
#include "util/copy.h"

static const char *const wait_modes[] = {"spin", "adaptive", "block", NULL};
static const char *const rndv_schemes[] = {"auto", "get", "am", NULL}; /* FY_TAG_SCHEME_* */
static const char *const pt_modes[] = {"off", "on", "auto", NULL};     /* FY_PT_* */
static const char *const am_lane_modes[] = {"blend", "latency", NULL}; /* FY_AM_LANE_* */

static const fy_config_field_t ctx_fields[] = {
    FY_CONFIG_FIELD("TLS", "all",
                    "Transports to use, comma-separated, in preference order (self, shm, udp, "
                    "tcp, ofi), or 'all'; a leading ^ excludes the listed ones instead.",
                    FY_CFG_LIST, fy_ctx_opts_t, tls),
    FY_CONFIG_ENUM_FIELD("WAIT", "adaptive",
                         "How an idle worker waits in ferry_worker_wait: spin (lowest latency, "
                         "burns a core), adaptive (spin, then yield, then sleep), block (sleep "
                         "at once).",
                         fy_ctx_opts_t, wait_mode, wait_modes),
    FY_CONFIG_FIELD("WAIT_SPIN", "20us", "Adaptive wait: how long to spin before yielding.",
                    FY_CFG_TIME, fy_ctx_opts_t, spin_ns),
    FY_CONFIG_FIELD("WAIT_YIELD", "100us",
                    "Adaptive wait: how long to yield the core before sleeping on the event fd.",
                    FY_CFG_TIME, fy_ctx_opts_t, yield_ns),
    FY_CONFIG_FIELD("STATS", "n", "Print per-endpoint statistics when an endpoint closes.",
                    FY_CFG_BOOL, fy_ctx_opts_t, stats),
    FY_CONFIG_FIELD("RMA_EMULATE", "n",
                    "Emulate put, get and atomics over active messages even where a transport "
                    "does them natively (for testing and comparison).",
                    FY_CFG_BOOL, fy_ctx_opts_t, rma_emulate),
    FY_CONFIG_FIELD("AMO_NATIVE_OPS", "0x3f3f",
                    "Atomics a transport may do natively, a bit per op (add, and, or, xor, swap, "
                    "cswap) in bits 0-5 for 32-bit and 8-13 for 64-bit; a width with any op "
                    "cleared, or that the transport lacks, is emulated over active messages "
                    "as a whole (testing).",
                    FY_CFG_UINT, fy_ctx_opts_t, amo_native_ops),
    FY_CONFIG_FIELD("TAG_RNDV_THRESH", "auto",
                    "Tagged messages larger than this use rendezvous (the data moves only once "
                    "the receiver has matched it); smaller ones go eager.  auto: per endpoint, "
                    "where the rendezvous reads by get at memory speed the larger of 32k and "
                    "the lane's largest buffered message, at most 64k (shm: 32k); 64k "
                    "elsewhere; and where the lane stages messages in shared memory (shm's "
                    "outbox) plain sends up to 16m go eager while it has room "
                    "and copies into it run at memory speed.",
                    FY_CFG_STRING, fy_ctx_opts_t, tag_rndv_thresh_str),
    FY_CONFIG_ENUM_FIELD("TAG_RNDV_SCHEME", "auto",
                         "How a rendezvous moves the data: get (the receiver reads the sender's "
                         "memory straight into its buffer, where the transport can), am (the "
                         "sender sends it as a message after the receiver's CTS), or auto (get, "
                         "and am to a peer that once could not read us).",
                         fy_ctx_opts_t, tag_rndv_scheme, rndv_schemes),
    FY_CONFIG_FIELD("TAG_STAGED_RATE", "auto",
                    "Where tagged messages above the threshold go eager through the lane's "
                    "staging area (shm's outbox): when a copy into it is slow.  auto: slower "
                    "than what a get of the same size class took (4 messages of a class go by "
                    "get every 100 ms to time it; 8 GB/s until one has); a number: "
                    "slower than that many bytes per ns (GB/s).  A copy faster than twice that "
                    "is fast.  Once 4 MiB went, 4 more slow copies than fast send the next 16 "
                    "messages by rendezvous, doubling up to 1024 while the copies stay slow.  "
                    "0: never.",
                    FY_CFG_STRING, fy_ctx_opts_t, tag_staged_rate_str),
    FY_CONFIG_FIELD("RX_COPY_MOVSB", "auto",
                    "A received tagged message of at least this size is copied out of the "
                    "transport's buffer with one rep movsb (x86-64): a stream of mid-size "
                    "messages reads the sender's lines faster that way than with the vector "
                    "loop of memcpy.  auto: 576 where the processor has fast string moves "
                    "(ERMS and FSRM), never elsewhere; inf: never.",
                    FY_CFG_STRING, fy_ctx_opts_t, rx_copy_movsb_str),
    FY_CONFIG_FIELD("MAX_QUEUED", "64m",
                    "Bytes an endpoint may hold queued (copies and operations waiting for a "
                    "peer that does not keep up) before sends, tagged sends and puts on it "
                    "return FERRY_ERR_NO_RESOURCE, taking nothing, until progress drains it.",
                    FY_CFG_SIZE, fy_ctx_opts_t, max_queued),
    FY_CONFIG_FIELD("JOB_KEY", "",
                    "A job key carried by tcp, ofi and the sockaddr listener; connections and "
                    "messages with another key are refused.  Set by ferryrun; empty: the PMIx "
                    "namespace (PMIX_NAMESPACE: mpirun, srun --mpi=pmix), else Slurm's job and "
                    "step ids, else the PMI-1 kvs name (mpiexec.hydra), else a fixed default "
                    "shared by every unlaunched process (set it alike at both ends to keep "
                    "client/server programs apart).  udp uses a random key per iface instead, "
                    "published in the worker's address.",
                    FY_CFG_STRING, fy_ctx_opts_t, job_key),
    FY_CONFIG_FIELD("WIREUP_TIMEOUT", "2s",
                    "A new endpoint's lane that has not answered its wireup by then is given "
                    "up and the next best lane tried (only where there is another one, on a "
                    "network device); the endpoint fails when every lane did.",
                    FY_CFG_TIME, fy_ctx_opts_t, wireup_timeout_ns),
    FY_CONFIG_FIELD("CM", "all",
                    "Connection managers to use, comma-separated (direct, am, oob, sockaddr), or "
                    "'all'; a leading ^ excludes the listed ones instead.  Without sockaddr, "
                    "listeners and endpoints by ip:port are refused.",
                    FY_CFG_LIST, fy_ctx_opts_t, cms),
    FY_CONFIG_FIELD("CM_TIMEOUT", "10s",
                    "sockaddr: how long a client waits for a listener's answer, and how long a "
                    "listener keeps an accepted connection that has not sent its request.",
                    FY_CFG_TIME, fy_ctx_opts_t, cm_timeout_ns),
    FY_CONFIG_FIELD("MAX_RAILS", "2",
                    "Multi-rail: an active message above FERRY_RAILS_THRESH to a peer reached "
                    "by several good network paths (separate devices at both ends) is striped "
                    "over up to this many of them, by bandwidth; 1 turns striping off (at most "
                    "4).",
                    FY_CFG_UINT, fy_ctx_opts_t, max_rails),
    FY_CONFIG_ENUM_FIELD("AM_LANE", "blend",
                         "How the am lane (short messages, tag eager, the endpoint's order) is "
                         "chosen: blend (the lowest cost of one short plus one 64 KiB message) or "
                         "latency (the lowest cost of one short message; where another lane moves "
                         "bulk data much faster, AMs above FERRY_RAILS_THRESH go over it, "
                         "anchored in the am lane's order).  Both ends must use the same value.",
                         fy_ctx_opts_t, am_lane_mode, am_lane_modes),
    FY_CONFIG_FIELD("RAILS_THRESH", "256k",
                    "Multi-rail: active messages larger than this (header and data) are "
                    "striped over the rails; smaller ones stay on the am lane alone.",
                    FY_CFG_SIZE, fy_ctx_opts_t, rails_thresh),
    FY_CONFIG_ENUM_FIELD("PROGRESS_THREAD", "auto",
                         "A thread per worker that progresses it while the application "
                         "computes (liveness, rendezvous, emulated RMA and atomics at the target, "
                         "AM handlers, which then run on that thread with the worker's lock "
                         "held): off, on, or auto (on only where a transport says its peers "
                         "need this side to progress; no transport does today).  On makes every "
                         "call on the worker take its lock (docs/architecture.md, Threads).",
                         fy_ctx_opts_t, progress_thread, pt_modes),
    FY_CONFIG_FIELD("PROGRESS_THREAD_INTERVAL", "1ms",
                    "The progress thread's longest sleep: it wakes on the worker's event fd when "
                    "a message arrives, and at least this often for timers (retransmission, "
                    "liveness) and interfaces that cannot wake it.",
                    FY_CFG_TIME, fy_ctx_opts_t, pt_interval_ns),
    FY_CONFIG_FIELD("WORKER_THREAD_MULTI", "n",
                    "Make every worker multi-threaded (FERRY_THREAD_MODE_MULTI), whatever its "
                    "parameters say: several threads may then call on one worker at once, each "
                    "call under the worker's lock.",
                    FY_CFG_BOOL, fy_ctx_opts_t, thread_multi),
    FY_CONFIG_FIELD("AM_EAGER_MAX", "inf",
                    "Active messages larger than this (proto header, header and data) go as "
                    "fragments even where the lane carries them in one operation, so a "
                    "rendezvous handler is told of them before their data arrives; inf: the "
                    "lane's own maximum.  At least 4k (smaller values count as 4k).",
                    FY_CFG_SIZE, fy_ctx_opts_t, am_eager_max),
    FY_CONFIG_FIELD("AM_RECV_MAX", "inf",
                    "The largest fragmented active message gathered for a plain handler (one "
                    "buffer of its whole size, which the receiver allocates when its first "
                    "fragment arrives): a larger one is dropped with a warning naming its size, "
                    "so a peer cannot make this process allocate what it has not got.  inf: "
                    "half of this machine's physical memory.  A rendezvous handler's message "
                    "is bound too: its first data arrives before the handler gives its buffer "
                    "and is staged in one of the whole size.",
                    FY_CFG_SIZE, fy_ctx_opts_t, am_recv_max),
};

const fy_config_table_t fy_ctx_config_table = {"context", "", ctx_fields,
                                               sizeof(ctx_fields) / sizeof(ctx_fields[0])};

static uint64_t hash_string(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return fy_hash_mix64(h);
}

/* The job key of network transports.  FERRY_JOB_KEY first (ferryrun sets 32 random hex digits);
 * else the job's name as its launcher gives it, so two jobs of one machine or cluster keep
 * apart even where the launcher is not ferry's: the PMIx namespace (Open MPI's mpirun, Slurm's
 * srun --mpi=pmix, PRRTE) or Slurm's job and step ids from the environment, else the kvs name
 * MPICH's hydra tells over its PMI-1 socket (PMI_FD; the bootstrap's connection, opened here
 * and kept for the world).
 *
 * Else - a singleton, client/server by ip:port - a fixed constant.  Not a random one: the key
 * must be the same at both ends of a tcp connection, an ofi message and a listener's hello, and
 * two unlaunched processes share nothing from which to agree on one but what the user gives
 * them (FERRY_JOB_KEY, set alike on both sides).  The constant keeps ferry's traffic apart
 * from other programs', not one unlaunched ferry program from another; where nothing else must
 * agree, keys are random already: each udp iface draws its own and publishes it in the
 * worker's address (docs/udp.md). */
static uint64_t default_job_key(const char *configured)
{
    char buf[512];
    const char *ns = getenv("PMIX_NAMESPACE");
    const char *sj = getenv("SLURM_JOB_ID");
    if (configured != NULL && configured[0] != '\0')
        return hash_string(configured);
    if (ns != NULL && ns[0] != '\0') {
        snprintf(buf, sizeof(buf), "pmix:%s", ns);
        return hash_string(buf);
    }
    if (sj != NULL && sj[0] != '\0') {
        const char *step = getenv("SLURM_STEP_ID");
        snprintf(buf, sizeof(buf), "slurm:%s.%s", sj, step != NULL ? step : "");
        return hash_string(buf);
    }
    char kvs[256];
    ferry_status_t st = fy_boot_job_name(kvs, sizeof(kvs));
    if (st == FERRY_OK) {
        snprintf(buf, sizeof(buf), "pmi1:%s", kvs);
        return hash_string(buf);
    }
    if (st != FERRY_ERR_NO_ELEM)
        fy_warn("the PMI-1 launcher did not name the job (%s): tcp, ofi and the listener use "
                "the unlaunched processes' fixed job key",
                ferry_status_string(st));
    return FY_JOB_KEY_DEFAULT;
}

static ferry_status_t check_tls(const fy_config_list_t *l)
{
    for (unsigned i = 0; i < l->count; i++) {
        if (strcasecmp(l->names[i], "all") == 0 && !l->exclude)
            continue;
        int known = 0;
        static const char *const all[] = {"self", "shm", "udp", "tcp", "ofi"};
        for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
            known |= strcmp(all[k], l->names[i]) == 0;
        if (!known) {
            fy_error("FERRY_TLS: '%s' is not a transport; accepted: self, shm, udp, tcp, ofi, "
                     "all (a leading ^ excludes)",
                     l->names[i]);
            return FERRY_ERR_BAD_CONFIG;
        }
        if (fy_tl_find(l->names[i]) == NULL)
            fy_warn("FERRY_TLS: transport '%s' is not built into this library", l->names[i]);
    }
    return FERRY_OK;
}

static int tl_selected(const fy_config_list_t *l, const char *name)
{
    if (l->exclude)
        return fy_config_list_selects(l, name);
    for (unsigned i = 0; i < l->count; i++)
        if (strcasecmp(l->names[i], "all") == 0 || strcmp(l->names[i], name) == 0)
            return 1;
    return 0;
}

ferry_status_t ferry_context_create(const ferry_context_params_t *params,
                                    ferry_context_t **context_p)
{
    fy_log_init();
    if (context_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    *context_p = NULL;
    uint64_t known = FERRY_CONTEXT_FIELD_FEATURES | FERRY_CONTEXT_FIELD_NAME;
    if (params != NULL && (params->field_mask & ~known) != 0) {
        fy_error("ferry_context_create: unknown field_mask bits 0x%llx",
                 (unsigned long long)(params->field_mask & ~known));
        return FERRY_ERR_INVALID_PARAM;
    }
    ferry_context_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return FERRY_ERR_NO_MEMORY;
    ctx->features = FERRY_FEATURE_AM | FERRY_FEATURE_TAG | FERRY_FEATURE_RMA | FERRY_FEATURE_AMO;
    if (params != NULL && (params->field_mask & FERRY_CONTEXT_FIELD_FEATURES))
        ctx->features = params->features;
    snprintf(ctx->name, sizeof(ctx->name), "%s",
             params != NULL && (params->field_mask & FERRY_CONTEXT_FIELD_NAME) && params->name
                 ? params->name
                 : "ferry");
    pthread_mutex_init(&ctx->lock, NULL);

    ferry_status_t st = fy_config_read(&fy_ctx_config_table, &ctx->opts);
    if (st != FERRY_OK)
        goto err_free;
    st = check_tls(&ctx->opts.tls);
    if (st != FERRY_OK)
        goto err_opts;
    st = fy_cm_set_init(&ctx->cms, &ctx->opts.cms);
    if (st != FERRY_OK)
        goto err_opts;
    if (ctx->opts.am_eager_max < 4096)
        ctx->opts.am_eager_max = 4096;       /* a fragment must hold a whole user header */
    if (ctx->opts.am_recv_max == SIZE_MAX) { /* inf: half the machine */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0)
            ctx->opts.am_recv_max = (size_t)pages / 2 * (size_t)psz;
    }
    ctx->opts.tag_rndv_thresh = FY_TAG_THRESH_AUTO;
    if (strcasecmp(ctx->opts.tag_rndv_thresh_str, "auto") != 0 &&
        fy_config_parse_size(ctx->opts.tag_rndv_thresh_str, &ctx->opts.tag_rndv_thresh) !=
            FERRY_OK) {
        fy_error("FERRY_TAG_RNDV_THRESH=%s: use auto or a size (64k, 1m, inf)",
                 ctx->opts.tag_rndv_thresh_str);
        st = FERRY_ERR_BAD_CONFIG;
        goto err_opts;
    }
    ctx->opts.tag_staged_rate = FY_TAG_STAGED_AUTO;
    if (strcasecmp(ctx->opts.tag_staged_rate_str, "auto") != 0) {
        const char *r = ctx->opts.tag_staged_rate_str;
        char *end = NULL;
        errno = 0;
        unsigned long v = strtoul(r, &end, 10);
        if (*r < '0' || *r > '9' || *end != '\0' || errno != 0 || v >= FY_TAG_STAGED_AUTO) {
            fy_error("FERRY_TAG_STAGED_RATE=%s: use auto or a number of bytes per ns (8, 0)", r);
            st = FERRY_ERR_BAD_CONFIG;
            goto err_opts;
        }
        ctx->opts.tag_staged_rate = v;
    }
    ctx->opts.rx_copy_movsb = fy_copy_rx_movsb_auto();
    if (strcasecmp(ctx->opts.rx_copy_movsb_str, "auto") != 0 &&
        fy_config_parse_size(ctx->opts.rx_copy_movsb_str, &ctx->opts.rx_copy_movsb) != FERRY_OK) {
        fy_error("FERRY_RX_COPY_MOVSB=%s: use auto, a size (576, 1k) or inf",
                 ctx->opts.rx_copy_movsb_str);
        st = FERRY_ERR_BAD_CONFIG;
        goto err_opts;
    }
    ctx->job_key = default_job_key(ctx->opts.job_key);
    st = fy_region_table_init(&ctx->regions);
    if (st != FERRY_OK)
        goto err_opts;

    /* Open every selected transport, in the order of FERRY_TLS when it lists them. */
    const fy_config_table_t *tables[FY_MAX_TLS + 1];
    size_t ntables = 0;
    tables[ntables++] = &fy_ctx_config_table;
    for (size_t i = 0; i < fy_tl_num_components && ctx->ntls < FY_MAX_TLS; i++) {
        const fy_tl_component_t *tl = fy_tl_components[i];
        if (tl->config != NULL && ntables < FY_MAX_TLS + 1)
            tables[ntables++] = tl->config;
        if (!tl_selected(&ctx->opts.tls, tl->name))
            continue;
        fy_ctx_tl_t *ctl = &ctx->tls[ctx->ntls];
        ctl->tl = tl;
        st = tl->ops->md_open(tl, &ctl->md);
        if (st == FERRY_ERR_BAD_CONFIG)
            goto err_mds;
        if (st != FERRY_OK) {
            fy_info("transport %s unavailable: %s", tl->name, ferry_status_string(st));
            continue;
        }
        st = tl->ops->query_devices(ctl->md, ctl->devs, FY_MAX_DEVS, &ctl->ndevs);
        if (st != FERRY_OK || ctl->ndevs == 0) {
            fy_info("transport %s has no usable device (%s)", tl->name, ferry_status_string(st));
            tl->ops->md_close(ctl->md);
            continue;
        }
        ctl->index = ctx->ntls++;
    }
    fy_config_warn_unused(tables, ntables, NULL);
    if (ctx->ntls == 0) {
        fy_error("no transport is usable (FERRY_TLS selects none that works here)");
        st = FERRY_ERR_NO_DEVICE;
        goto err_mds;
    }
    *context_p = ctx;
    return FERRY_OK;

err_mds:
    for (unsigned i = 0; i < ctx->ntls; i++)
        ctx->tls[i].tl->ops->md_close(ctx->tls[i].md);
    fy_region_table_destroy(&ctx->regions);
err_opts:
    fy_cm_set_finalize(&ctx->cms);
    fy_config_release(&fy_ctx_config_table, &ctx->opts);
err_free:
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return st;
}

void ferry_context_destroy(ferry_context_t *ctx)
{
    if (ctx == NULL)
        return;
    if (ctx->nworkers != 0)
        fy_warn("ferry_context_destroy: %u worker(s) still exist", ctx->nworkers);
    for (unsigned i = 0; i < ctx->ntls; i++)
        ctx->tls[i].tl->ops->md_close(ctx->tls[i].md);
    fy_region_table_destroy(&ctx->regions);
    fy_cm_set_finalize(&ctx->cms);
    fy_config_release(&fy_ctx_config_table, &ctx->opts);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

void ferry_config_print(const ferry_context_t *ctx, void *file)
{
    FILE *f = file != NULL ? file : stdout;
    if (ctx == NULL)
        return;
    fy_config_print(&fy_ctx_config_table, &ctx->opts, f);
    for (size_t i = 0; i < fy_config_num_global_tables; i++) {
        const fy_config_table_t *t = fy_config_global_tables[i];
        fprintf(f, "\n# %s\n", t->component);
        for (size_t k = 0; k < t->nfields; k++)
            fprintf(f, "FERRY_%s%s (default %s)\n    %s\n", t->prefix, t->fields[k].name,
                    t->fields[k].dflt, t->fields[k].doc);
    }
    fprintf(f, "#\n# read directly (logging, bootstrap, launcher, tools)\n#\n");
    fy_config_print_direct(f);
    for (size_t i = 0; i < fy_tl_num_components; i++)
        if (fy_tl_components[i]->config != NULL) {
            /* A transport's options live in its md; print the defaults of unopened ones. */
            fprintf(f, "\n# transport %s\n", fy_tl_components[i]->name);
            const fy_config_table_t *t = fy_tl_components[i]->config;
            for (size_t k = 0; k < t->nfields; k++)
                fprintf(f, "FERRY_%s%s (default %s)\n    %s\n", t->prefix, t->fields[k].name,
                        t->fields[k].dflt, t->fields[k].doc);
        }
}

uint64_t fy_context_job_key(const ferry_context_t *ctx)
{
    return ctx->job_key;
}

const char *ferry_version(void)
{
    return "0.1.0";
}
