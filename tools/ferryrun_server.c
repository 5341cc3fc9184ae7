/*
 * ferryrun_server.c - the key-value server of the builtin bootstrap, run inside ferryrun.
 *
 * One TCP listener on 127.0.0.1, one connection per rank, all driven by ferryrun's epoll
 * loop: nothing here blocks, so 64 or 1024 ranks cost one event each per message.  Reads
 * are gathered until whole messages (builtin_wire.h) are present; answers go to a per-
 * connection output buffer that is written at once and, if the socket is full, finished on
 * EPOLLOUT.
 *
 * The store is one small table of (key, value) per rank.  Puts are visible as soon as they
 * arrive; a fence is the count of ranks that sent FENCE for the current epoch, and when it
 * reaches the job size every rank gets FENCE_DONE.  The server knows more than a PMI server
 * does, and uses it: a rank that exits or drops its connection without having joined a fence
 * makes that fence fail at once for everyone waiting in it (an ERROR naming the rank and how
 * it ended) rather than leave them to their timeout; and a client whose fence timed out can
 * ask (STATUS) which ranks are missing.
 *
 * The listener is reachable by any local user, so nothing is trusted before a HELLO proves
 * the job's secret (compared in constant time; ferryrun made it and gave it to its ranks
 * only).  Until then a connection may send one HELLO of at most FY_WIRE_MAX_HELLO bytes
 * within FY_WIRE_HELLO_TIMEOUT_MS; at most MAX_UNAUTH such connections exist at once (the
 * listener waits while there are more, and waiting ranks stay in the kernel's backlog).  A
 * rank's requests are bounded by FY_WIRE_MAX_REQUEST, what it stores by STORE_MAX_BYTES and
 * STORE_MAX_KEYS, and a connection whose answers pile up unread (OUT_MAX) is not read until
 * they drain.  accept() failing for want of fds pauses the listener (1 ms doubling to 100 ms)
 * instead of spinning.  Refusals are said on stderr at most once a second, with a count.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "boot/builtin_wire.h"
#include "ferry.h"
#include "ferryrun.h"

#define MAX_UNAUTH      64          /* connections that have not said HELLO yet */
#define OUT_MAX         (4u << 20)  /* unread answers beyond this: stop reading requests */
#define STORE_MAX_BYTES (64u << 20) /* per rank */
#define STORE_MAX_KEYS  4096        /* per rank */
#define TICK_NS         (100ull * 1000 * 1000)
#define BACKOFF_MIN_NS  (1000ull * 1000)
#define BACKOFF_MAX_NS  (100ull * 1000 * 1000)
#define LOG_GAP_NS      (1000ull * 1000 * 1000)

typedef struct conn {
    int fd;
    int authed; /* said a good HELLO */
    uint64_t start_ns;
    int rank;    /* -1 until HELLO */
    int closing; /* close once the output is written */
    int want_out;
    uint8_t *in;
    size_t in_len, in_cap;
    fy_wire_buf_t out;
    size_t out_off;
} conn_t;

typedef struct kv {
    char key[FY_WIRE_KEY_MAX + 1];
    uint8_t *value;
    size_t len;
} kv_t;

typedef struct rank_state {
    int state; /* enum fy_wire_rank_state */
    int conn;  /* slot, or -1 */
    int in_fence;
    int pid;
    char how[128]; /* how it ended, once GONE */
    kv_t *kv;
    size_t nkv, capkv;
    size_t stored; /* bytes of values */
} rank_state_t;

struct fy_run_server {
    int listen_fd, epfd, size;
    char *job_key;
    char *secret;
    int timer_fd, timer_armed;
    int listening;          /* the listener is in the epoll set with EPOLLIN */
    int nunauth;            /* connections before HELLO */
    uint64_t accept_resume; /* accept paused until then (0: not paused) */
    uint64_t backoff;
    uint64_t log_ns;  /* when the last refusal was said */
    uint64_t refused; /* connections refused or failed accepts, in all */
    uint64_t refused_said;
    conn_t **conns;
    size_t nconns;
    rank_state_t *ranks;
    uint32_t epoch;
    int arrived;
};

static void conn_close(fy_run_server_t *s, uint32_t slot);

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One refusal (a stranger, a failed accept): said on stderr at most once per LOG_GAP_NS, with
 * the number of refusals since the last line. */
static void refusal(fy_run_server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refusal(fy_run_server_t *s, const char *fmt, ...)
{
    uint64_t now = mono_ns();
    s->refused++;
    if (s->log_ns != 0 && now - s->log_ns < LOG_GAP_NS)
        return;
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    uint64_t more = s->refused - s->refused_said - 1;
    if (more > 0)
        fprintf(stderr,
                "ferryrun: bootstrap server: %s (and %llu more refusals since the last "
                "message)\n",
                text, (unsigned long long)more);
    else
        fprintf(stderr, "ferryrun: bootstrap server: %s\n", text);
    s->log_ns = now;
    s->refused_said = s->refused;
}

static void timer_set(fy_run_server_t *s, uint64_t first_ns)
{
    struct itimerspec its = {
        .it_interval = {0, (long)TICK_NS},
        .it_value = {(time_t)(first_ns / 1000000000ull), (long)(first_ns % 1000000000ull)}};
    if (timerfd_settime(s->timer_fd, 0, &its, NULL) == 0)
        s->timer_armed = 1;
}

/* The listener is watched unless accept is paused or too many strangers are connected. */
static void listener_update(fy_run_server_t *s)
{
    int want = s->accept_resume == 0 && s->nunauth < MAX_UNAUTH;
    if (want == s->listening)
        return;
    struct epoll_event ev = {.events = want ? EPOLLIN : 0u,
                             .data.u64 = FY_RUN_EV(FY_RUN_EV_LISTEN, 0)};
    if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->listen_fd, &ev) == 0)
        s->listening = want;
}

static void fatal_oom(void)
{
    fprintf(stderr, "ferryrun: out of memory in the bootstrap server\n");
    exit(1);
}

static void conn_update_events(fy_run_server_t *s, uint32_t slot)
{
    conn_t *c = s->conns[slot];
    /* bit 0: answers to write; bit 1: too many of them to take more requests */
    int want = (c->out.len > c->out_off) | (c->out.len - c->out_off > OUT_MAX) << 1;
    if (want == c->want_out)
        return;
    struct epoll_event ev = {.events = ((want & 2) ? 0u : EPOLLIN) | ((want & 1) ? EPOLLOUT : 0u),
                             .data.u64 = FY_RUN_EV(FY_RUN_EV_CONN, slot)};
    epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = want;
}

/* Write what the output buffer holds; returns -1 if the connection died. */
static int conn_flush(fy_run_server_t *s, uint32_t slot)
{
    conn_t *c = s->conns[slot];
    if (c->out.oom)
        fatal_oom();
    while (c->out_off < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        conn_close(s, slot);
        return -1;
    }
    if (c->out_off == c->out.len) {
        c->out.len = 0;
        c->out_off = 0;
        if (c->closing) {
            conn_close(s, slot);
            return -1;
        }
    }
    conn_update_events(s, slot);
    return 0;
}

static void send_error(fy_run_server_t *s, uint32_t slot, ferry_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void send_error(fy_run_server_t *s, uint32_t slot, ferry_status_t st, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(text))
        n = sizeof(text) - 1;
    conn_t *c = s->conns[slot];
    fy_wire_begin(&c->out, FY_WIRE_ERROR);
    fy_wire_u32(&c->out, (uint32_t)(int32_t)st);
    fy_wire_u16(&c->out, (uint16_t)n);
    fy_wire_bytes(&c->out, text, (size_t)n);
    fy_wire_end(&c->out);
}

/* A malformed or out-of-order message: say so, then drop the connection. */
static void protocol_error(fy_run_server_t *s, uint32_t slot, const char *what)
{
    conn_t *c = s->conns[slot];
    send_error(s, slot, FERRY_ERR_PROTOCOL, "ferryrun: protocol error from %s%d: %s",
               c->rank >= 0 ? "rank " : "an unidentified client, fd ",
               c->rank >= 0 ? c->rank : c->fd, what);
    c->closing = 1;
}

static void describe_gone(const rank_state_t *r, int rank, char *out, size_t n)
{
    snprintf(out, n, "rank %d %s", rank, r->how[0] ? r->how : "has left the job");
}

/* The fence under way cannot complete because `culprit` is gone: fail it for every rank in
 * it.  The epoch does not advance: those ranks are told the job is broken. */
static void fail_fence(fy_run_server_t *s, int culprit)
{
    char why[200];
    describe_gone(&s->ranks[culprit], culprit, why, sizeof(why));
    for (int r = 0; r < s->size; r++) {
        rank_state_t *rs = &s->ranks[r];
        if (!rs->in_fence)
            continue;
        rs->in_fence = 0;
        if (rs->conn >= 0) {
            send_error(s, (uint32_t)rs->conn, FERRY_ERR_BOOTSTRAP,
                       "fence %u cannot complete: %s before joining it", s->epoch, why);
            conn_flush(s, (uint32_t)rs->conn);
        }
    }
    s->arrived = 0;
}

static void mark_gone(fy_run_server_t *s, int rank, const char *how)
{
    rank_state_t *r = &s->ranks[rank];
    if (r->state != FY_WIRE_RANK_GONE || r->how[0] == '\0' || strncmp(how, "closed", 6) != 0)
        snprintf(r->how, sizeof(r->how), "%s", how);
    r->state = FY_WIRE_RANK_GONE;
    if (s->arrived > 0 && !r->in_fence)
        fail_fence(s, rank);
}

static void conn_close(fy_run_server_t *s, uint32_t slot)
{
    conn_t *c = s->conns[slot];
    if (c == NULL)
        return;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (!c->authed) {
        s->nunauth--;
        listener_update(s);
    }
    int rank = c->rank;
    free(c->in);
    fy_wire_buf_free(&c->out);
    free(c);
    s->conns[slot] = NULL;
    if (rank >= 0 && s->ranks[rank].conn == (int)slot) {
        s->ranks[rank].conn = -1;
        if (s->ranks[rank].state == FY_WIRE_RANK_CONNECTED)
            mark_gone(s, rank, "closed its connection to ferryrun without finalizing");
    }
}

static void complete_fence(fy_run_server_t *s)
{
    for (int r = 0; r < s->size; r++) {
        rank_state_t *rs = &s->ranks[r];
        rs->in_fence = 0;
        if (rs->conn < 0)
            continue;
        conn_t *c = s->conns[rs->conn];
        fy_wire_begin(&c->out, FY_WIRE_FENCE_DONE);
        fy_wire_u32(&c->out, s->epoch);
        fy_wire_end(&c->out);
        conn_flush(s, (uint32_t)rs->conn);
    }
    s->epoch++;
    s->arrived = 0;
}

static void on_hello(fy_run_server_t *s, uint32_t slot, fy_wire_rd_t *rd)
{
    conn_t *c = s->conns[slot];
    c->closing = 1; /* unless accepted below */
    uint32_t version = fy_wire_rd_u32(rd);
    if (version != FY_WIRE_VERSION) {
        refusal(s, "refused a connection speaking protocol version %u", version);
        send_error(s, slot, FERRY_ERR_BOOTSTRAP,
                   "ferryrun speaks bootstrap protocol version %u, the rank version %u: "
                   "use the ferryrun of the same ferry build",
                   FY_WIRE_VERSION, version);
        return;
    }
    uint32_t rank = fy_wire_rd_u32(rd), size = fy_wire_rd_u32(rd);
    uint32_t pid = fy_wire_rd_u32(rd);
    uint16_t klen = fy_wire_rd_u16(rd);
    const uint8_t *key = fy_wire_rd_bytes(rd, klen);
    uint16_t slen = fy_wire_rd_u16(rd);
    const uint8_t *secret = fy_wire_rd_bytes(rd, slen);
    if (rd->bad) {
        refusal(s, "refused a connection: malformed HELLO");
        protocol_error(s, slot, "malformed HELLO");
        return;
    }
    if (!fy_wire_secret_equal(secret, slen, (const uint8_t *)s->secret, strlen(s->secret))) {
        refusal(s, "refused a connection with a wrong job secret (claiming rank %u, pid %u)", rank,
                pid);
        send_error(s, slot, FERRY_ERR_ACCESS_DENIED,
                   "ferryrun refused the connection: wrong FERRY_BOOT_SECRET (not a rank of "
                   "this job)");
        return;
    }
    if (size != (uint32_t)s->size || rank >= size) {
        send_error(s, slot, FERRY_ERR_BOOTSTRAP,
                   "rank %u of %u does not belong to this job of %d ranks (stale FERRY_RANK or "
                   "FERRY_SIZE?)",
                   rank, size, s->size);
        return;
    }
    if (klen != strlen(s->job_key) || memcmp(key, s->job_key, klen) != 0) {
        send_error(s, slot, FERRY_ERR_BOOTSTRAP,
                   "rank %u presented the wrong FERRY_JOB_KEY: it belongs to another job", rank);
        return;
    }
    rank_state_t *r = &s->ranks[rank];
    if (r->state == FY_WIRE_RANK_CONNECTED) {
        send_error(s, slot, FERRY_ERR_BOOTSTRAP,
                   "rank %u is connected already (pid %d): two processes claim the same rank", rank,
                   r->pid);
        return;
    }
    if (r->state == FY_WIRE_RANK_GONE) {
        send_error(s, slot, FERRY_ERR_BOOTSTRAP, "rank %u %s", rank, r->how);
        return;
    }
    c->closing = 0;
    c->rank = (int)rank;
    c->authed = 1;
    s->nunauth--;
    listener_update(s);
    r->state = FY_WIRE_RANK_CONNECTED;
    r->conn = (int)slot;
    r->pid = (int)pid;
    fy_wire_begin(&c->out, FY_WIRE_WELCOME);
    fy_wire_u32(&c->out, FY_WIRE_VERSION);
    fy_wire_u32(&c->out, (uint32_t)s->size);
    fy_wire_u32(&c->out, s->epoch);
    fy_wire_end(&c->out);
}

static void on_put(fy_run_server_t *s, uint32_t slot, fy_wire_rd_t *rd)
{
    conn_t *c = s->conns[slot];
    uint16_t klen = fy_wire_rd_u16(rd);
    const uint8_t *key = fy_wire_rd_bytes(rd, klen);
    uint32_t vlen = fy_wire_rd_u32(rd);
    const uint8_t *value = fy_wire_rd_bytes(rd, vlen);
    if (rd->bad || klen == 0 || klen > FY_WIRE_KEY_MAX) {
        protocol_error(s, slot, "malformed PUT");
        return;
    }
    rank_state_t *r = &s->ranks[c->rank];
    kv_t *e = NULL;
    for (size_t i = 0; i < r->nkv && e == NULL; i++)
        if (strlen(r->kv[i].key) == klen && memcmp(r->kv[i].key, key, klen) == 0)
            e = &r->kv[i];
    size_t stored = r->stored - (e != NULL ? e->len : 0) + vlen;
    if (vlen > FY_WIRE_MAX_VALUE || stored > STORE_MAX_BYTES ||
        (e == NULL && r->nkv >= STORE_MAX_KEYS)) {
        send_error(s, slot, FERRY_ERR_NO_RESOURCE,
                   "ferryrun stores at most %u keys and %u bytes per rank (values up to %u "
                   "bytes): rank %d's put of %u bytes under \"%.*s\" is refused",
                   STORE_MAX_KEYS, STORE_MAX_BYTES, FY_WIRE_MAX_VALUE, c->rank, vlen, (int)klen,
                   (const char *)key);
        return;
    }
    r->stored = stored;
    if (e == NULL) {
        if (r->nkv == r->capkv) {
            size_t cap = r->capkv ? r->capkv * 2 : 4;
            kv_t *n = realloc(r->kv, cap * sizeof(*n));
            if (n == NULL)
                fatal_oom();
            r->kv = n;
            r->capkv = cap;
        }
        e = &r->kv[r->nkv++];
        memcpy(e->key, key, klen);
        e->key[klen] = '\0';
        e->value = NULL;
    }
    uint8_t *v = malloc(vlen ? vlen : 1);
    if (v == NULL)
        fatal_oom();
    if (vlen)
        memcpy(v, value, vlen);
    free(e->value);
    e->value = v;
    e->len = vlen;
}

static void on_fence(fy_run_server_t *s, uint32_t slot, fy_wire_rd_t *rd)
{
    conn_t *c = s->conns[slot];
    uint32_t epoch = fy_wire_rd_u32(rd);
    if (rd->bad) {
        protocol_error(s, slot, "malformed FENCE");
        return;
    }
    rank_state_t *r = &s->ranks[c->rank];
    if (epoch != s->epoch || r->in_fence) {
        char what[96];
        snprintf(what, sizeof(what), "FENCE for epoch %u while the job is at epoch %u%s", epoch,
                 s->epoch, r->in_fence ? " (and it is in that fence already)" : "");
        protocol_error(s, slot, what);
        return;
    }
    for (int o = 0; o < s->size; o++) {
        if (s->ranks[o].state == FY_WIRE_RANK_GONE && !s->ranks[o].in_fence) {
            char why[200];
            describe_gone(&s->ranks[o], o, why, sizeof(why));
            send_error(s, slot, FERRY_ERR_BOOTSTRAP, "fence %u cannot complete: %s", s->epoch, why);
            return;
        }
    }
    r->in_fence = 1;
    if (++s->arrived == s->size)
        complete_fence(s);
}

static void on_get(fy_run_server_t *s, uint32_t slot, fy_wire_rd_t *rd)
{
    conn_t *c = s->conns[slot];
    uint32_t rank = fy_wire_rd_u32(rd);
    uint16_t klen = fy_wire_rd_u16(rd);
    const uint8_t *key = fy_wire_rd_bytes(rd, klen);
    if (rd->bad) {
        protocol_error(s, slot, "malformed GET");
        return;
    }
    if (rank >= (uint32_t)s->size) {
        send_error(s, slot, FERRY_ERR_INVALID_PARAM, "get: rank %u is outside the job (size %d)",
                   rank, s->size);
        return;
    }
    const rank_state_t *r = &s->ranks[rank];
    const kv_t *e = NULL;
    for (size_t i = 0; i < r->nkv && e == NULL; i++)
        if (strlen(r->kv[i].key) == klen && memcmp(r->kv[i].key, key, klen) == 0)
            e = &r->kv[i];
    fy_wire_begin(&c->out, FY_WIRE_GET_REPLY);
    fy_wire_u32(&c->out, (uint32_t)(int32_t)(e != NULL ? FERRY_OK : FERRY_ERR_NO_ELEM));
    fy_wire_u32(&c->out, e != NULL ? (uint32_t)e->len : 0);
    if (e != NULL)
        fy_wire_bytes(&c->out, e->value, e->len);
    fy_wire_end(&c->out);
}

static void on_status(fy_run_server_t *s, uint32_t slot)
{
    conn_t *c = s->conns[slot];
    uint32_t k = 0;
    for (int r = 0; r < s->size; r++)
        k += !s->ranks[r].in_fence;
    fy_wire_begin(&c->out, FY_WIRE_STATUS_REPLY);
    fy_wire_u32(&c->out, s->epoch);
    fy_wire_u32(&c->out, (uint32_t)s->size);
    fy_wire_u32(&c->out, k);
    for (int r = 0; r < s->size; r++) {
        if (s->ranks[r].in_fence)
            continue;
        fy_wire_u32(&c->out, (uint32_t)r);
        fy_wire_u8(&c->out, (uint8_t)s->ranks[r].state);
    }
    fy_wire_end(&c->out);
}

static void on_finalize(fy_run_server_t *s, uint32_t slot)
{
    conn_t *c = s->conns[slot];
    rank_state_t *r = &s->ranks[c->rank];
    r->state = FY_WIRE_RANK_FINALIZED;
    r->conn = -1;
    c->rank = -1;
    c->closing = 1;
}

/* Handle every whole message in the input buffer.  Returns -1 if the connection closed. */
static int conn_dispatch(fy_run_server_t *s, uint32_t slot)
{
    conn_t *c = s->conns[slot];
    size_t off = 0;
    while (!c->closing && c->in_len - off >= FY_WIRE_HDR_LEN &&
           c->out.len - c->out_off <= OUT_MAX) {
        uint32_t len;
        unsigned type;
        fy_wire_parse_hdr(c->in + off, &len, &type);
        if (len > (c->authed ? FY_WIRE_MAX_REQUEST : FY_WIRE_MAX_HELLO)) {
            if (!c->authed)
                refusal(s, "refused a connection that sent a message of %u bytes before HELLO",
                        len);
            protocol_error(s, slot, "message too long");
            break;
        }
        if (c->in_len - off < FY_WIRE_HDR_LEN + (size_t)len) {
            if (c->in_cap < FY_WIRE_HDR_LEN + (size_t)len) {
                /* make room for the whole message (after moving it to the front) */
                memmove(c->in, c->in + off, c->in_len - off);
                c->in_len -= off;
                off = 0;
                uint8_t *n = realloc(c->in, FY_WIRE_HDR_LEN + (size_t)len);
                if (n == NULL)
                    fatal_oom();
                c->in = n;
                c->in_cap = FY_WIRE_HDR_LEN + (size_t)len;
            }
            break;
        }
        fy_wire_rd_t rd = {.p = c->in + off + FY_WIRE_HDR_LEN, .left = len};
        off += FY_WIRE_HDR_LEN + (size_t)len;
        if (c->rank < 0 && type != FY_WIRE_HELLO) {
            protocol_error(s, slot, "a request before HELLO");
            break;
        }
        switch (type) {
        case FY_WIRE_HELLO:
            if (c->rank >= 0)
                protocol_error(s, slot, "a second HELLO");
            else
                on_hello(s, slot, &rd);
            break;
        case FY_WIRE_PUT:
            on_put(s, slot, &rd);
            break;
        case FY_WIRE_FENCE:
            on_fence(s, slot, &rd);
            break;
        case FY_WIRE_GET:
            on_get(s, slot, &rd);
            break;
        case FY_WIRE_STATUS:
            on_status(s, slot);
            break;
        case FY_WIRE_FINALIZE:
            on_finalize(s, slot);
            break;
        default:
            protocol_error(s, slot, "unknown message type");
            break;
        }
        /* a fence completion may have flushed (and closed) this very connection */
        if (s->conns[slot] == NULL)
            return -1;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    return conn_flush(s, slot);
}

static void conn_readable(fy_run_server_t *s, uint32_t slot)
{
    for (;;) {
        conn_t *c = s->conns[slot];
        if (c->want_out & 2)
            return; /* answers pile up unread: no more requests until they drain */
        if (c->in_cap - c->in_len < 4096) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
            uint8_t *n = realloc(c->in, cap);
            if (n == NULL)
                fatal_oom();
            c->in = n;
            c->in_cap = cap;
        }
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (r > 0) {
            c->in_len += (size_t)r;
            if (conn_dispatch(s, slot) < 0)
                return;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        conn_close(s, slot); /* EOF or error */
        return;
    }
}

/* accept() failed for want of a resource: leave the connection in the backlog and the
 * listener out of the epoll set for a while, rather than retry at once (a busy loop). */
static void accept_pause(fy_run_server_t *s, int err)
{
    uint64_t b = s->backoff * 2;
    s->backoff = b < BACKOFF_MIN_NS ? BACKOFF_MIN_NS : b > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : b;
    refusal(s,
            "accept failed: %s; retrying every %.0f ms at most while it fails (raise the "
            "limit of open files?)",
            strerror(err), (double)BACKOFF_MAX_NS / 1e6);
    s->accept_resume = mono_ns() + s->backoff;
    listener_update(s);
    timer_set(s, s->backoff);
}

static void on_accept(fy_run_server_t *s)
{
    while (s->listening) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                accept_pause(s, errno);
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                fprintf(stderr, "ferryrun: accept on the bootstrap socket: %s\n", strerror(errno));
            return;
        }
        s->backoff = 0;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        size_t slot = 0;
        while (slot < s->nconns && s->conns[slot] != NULL)
            slot++;
        if (slot == s->nconns) {
            size_t n = s->nconns ? s->nconns * 2 : 64;
            conn_t **nc = realloc(s->conns, n * sizeof(*nc));
            if (nc == NULL)
                fatal_oom();
            memset(nc + s->nconns, 0, (n - s->nconns) * sizeof(*nc));
            s->conns = nc;
            s->nconns = n;
        }
        conn_t *c = calloc(1, sizeof(*c));
        if (c == NULL)
            fatal_oom();
        c->fd = fd;
        c->rank = -1;
        c->start_ns = mono_ns();
        s->conns[slot] = c;
        s->nunauth++;
        listener_update(s);
        if (!s->timer_armed)
            timer_set(s, TICK_NS);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = FY_RUN_EV(FY_RUN_EV_CONN, slot)};
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            fprintf(stderr, "ferryrun: epoll_ctl: %s\n", strerror(errno));
            conn_close(s, (uint32_t)slot);
        }
    }
}

/* The timer: strangers silent past the HELLO timeout go, a paused accept resumes. */
static void on_timer(fy_run_server_t *s)
{
    uint64_t ticks, now = mono_ns();
    ssize_t rr = read(s->timer_fd, &ticks, sizeof(ticks));
    (void)rr;
    int pending = 0;
    if (s->accept_resume != 0) {
        if (now >= s->accept_resume) {
            s->accept_resume = 0;
            listener_update(s); /* level-triggered: waiting connections show at once */
        } else {
            pending = 1;
        }
    }
    for (size_t i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        if (c == NULL || c->authed)
            continue;
        if (now - c->start_ns < (uint64_t)FY_WIRE_HELLO_TIMEOUT_MS * 1000000ull) {
            pending = 1;
            continue;
        }
        refusal(s, "closed a connection that sent no HELLO within %d s",
                FY_WIRE_HELLO_TIMEOUT_MS / 1000);
        conn_close(s, (uint32_t)i);
    }
    if (!pending && s->timer_armed) {
        struct itimerspec off;
        memset(&off, 0, sizeof(off));
        timerfd_settime(s->timer_fd, 0, &off, NULL);
        s->timer_armed = 0;
    }
}

void fy_run_server_event(fy_run_server_t *s, uint64_t data, uint32_t events)
{
    if (FY_RUN_EV_KIND(data) == FY_RUN_EV_LISTEN) {
        on_accept(s);
        return;
    }
    if (FY_RUN_EV_KIND(data) == FY_RUN_EV_TIMER) {
        on_timer(s);
        return;
    }
    uint32_t slot = FY_RUN_EV_IDX(data);
    if (slot >= s->nconns || s->conns[slot] == NULL)
        return;
    if (events & EPOLLOUT) {
        if (conn_flush(s, slot) < 0)
            return;
        /* answers drained: requests held back meanwhile may be waiting in the buffer */
        conn_t *c = s->conns[slot];
        if (!(c->want_out & 2) && c->in_len >= FY_WIRE_HDR_LEN && conn_dispatch(s, slot) < 0)
            return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        conn_readable(s, slot);
}

void fy_run_server_rank_exited(fy_run_server_t *s, int rank, const char *how)
{
    if (rank < 0 || rank >= s->size)
        return;
    mark_gone(s, rank, how);
}

/* Where to listen for a job across hosts (ferryrun --boot-addr); 0.0.0.0 stands for 127.0.0.1 */
static struct in_addr listen_ip = {.s_addr = 0};
static unsigned listen_port;

void fy_run_server_listen_on(struct in_addr ip, unsigned port)
{
    listen_ip = ip;
    listen_port = port;
}

int fy_run_server_create(int size, const char *job_key, const char *secret, int epfd, char *addr,
                         size_t addrlen, fy_run_server_t **srv_p)
{
    fy_run_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        fatal_oom();
    s->listen_fd = s->timer_fd = -1;
    s->size = size;
    s->epfd = epfd;
    s->job_key = strdup(job_key);
    s->secret = strdup(secret);
    s->ranks = calloc((size_t)size, sizeof(*s->ranks));
    if (s->job_key == NULL || s->secret == NULL || s->ranks == NULL)
        fatal_oom();
    s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event tev = {.events = EPOLLIN, .data.u64 = FY_RUN_EV(FY_RUN_EV_TIMER, 0)};
    if (s->timer_fd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, s->timer_fd, &tev) != 0) {
        fprintf(stderr, "ferryrun: timerfd: %s\n", strerror(errno));
        goto fail;
    }
    for (int r = 0; r < size; r++)
        s->ranks[r].conn = -1;
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0) {
        fprintf(stderr, "ferryrun: socket: %s\n", strerror(errno));
        goto fail;
    }
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)listen_port)};
    sin.sin_addr.s_addr = listen_ip.s_addr != 0 ? listen_ip.s_addr : htonl(INADDR_LOOPBACK);
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
    socklen_t sl = sizeof(sin);
    if (bind(s->listen_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        listen(s->listen_fd, SOMAXCONN) != 0 ||
        getsockname(s->listen_fd, (struct sockaddr *)&sin, &sl) != 0) {
        fprintf(stderr, "ferryrun: cannot listen on %s:%u for the bootstrap: %s\n", ip, listen_port,
                strerror(errno));
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = FY_RUN_EV(FY_RUN_EV_LISTEN, 0)};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, s->listen_fd, &ev) != 0) {
        fprintf(stderr, "ferryrun: epoll_ctl: %s\n", strerror(errno));
        goto fail;
    }
    s->listening = 1;
    snprintf(addr, addrlen, "%s:%u", ip, (unsigned)ntohs(sin.sin_port));
    *srv_p = s;
    return 0;
fail:
    fy_run_server_destroy(s);
    return -1;
}

void fy_run_server_destroy(fy_run_server_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        if (c == NULL)
            continue;
        close(c->fd);
        free(c->in);
        fy_wire_buf_free(&c->out);
        free(c);
    }
    free(s->conns);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->timer_fd >= 0)
        close(s->timer_fd);
    for (int r = 0; r < s->size && s->ranks != NULL; r++) {
        for (size_t i = 0; i < s->ranks[r].nkv; i++)
            free(s->ranks[r].kv[i].value);
        free(s->ranks[r].kv);
    }
    free(s->ranks);
    free(s->job_key);
    free(s->secret);
    free(s);
}
