/*
 * boot_builtin.c - the bootstrap client of ferryrun's key-value server.
 *
 * ferryrun gives each rank FERRY_BOOT_ADDR (host:port of its server), FERRY_RANK, FERRY_SIZE,
 * FERRY_LOCAL_RANK, FERRY_LOCAL_SIZE, FERRY_JOB_KEY and FERRY_BOOT_SECRET.  The rank opens one
 * TCP connection, says HELLO (proving it knows the job's secret), and from then on speaks
 * request/answer over it (builtin_wire.h has the format).  Puts are sent at once without an answer:
 * the kernel buffers them, the server orders them before the FENCE that follows on the same stream,
 * so a fence costs one round trip whatever the number of puts.
 *
 * The socket is non-blocking and every wait is a poll() bounded by a deadline, so a fence
 * that cannot complete ends with FERRY_ERR_TIMED_OUT after FERRY_BOOT_TIMEOUT; the client then
 * asks the server who is missing and names those ranks.  After a timeout or a server error
 * the stream may hold answers to requests nobody waits for, so the handle refuses further
 * use (FERRY_ERR_BOOTSTRAP) rather than mistake one answer for another.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot/boot_int.h"
#include "boot/builtin_wire.h"
#include "util/clock.h"
#include "util/log.h"

#define WHO            "ferryrun"
#define STATUS_WAIT_NS (2 * FY_NSEC_PER_SEC) /* how long to wait for the list of missing ranks */
#define MAX_SIZE       (1L << 24)

typedef struct builtin {
    int fd;
    int broken;               /* the stream is out of step: refuse further requests */
    uint32_t epoch;           /* the number of the next fence */
    char addr[128];           /* FERRY_BOOT_ADDR, for messages */
    uint8_t *rbuf;            /* received bytes */
    size_t rlen, rcap, rdone; /* bytes held, capacity, bytes of messages already consumed */
} builtin_t;

/* One received message: points into rbuf until the next receive. */
typedef struct msg {
    unsigned type;
    fy_wire_rd_t body;
} msg_t;

static ferry_status_t send_all(builtin_t *b, const uint8_t *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(b->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = b->fd, .events = POLLOUT};
            int ms = fy_boot_ms_left(deadline);
            int r = ms > 0 ? poll(&pfd, 1, ms) : 0;
            if (r == 0) {
                fy_error("sending to ferryrun at %s timed out", b->addr);
                b->broken = 1;
                return FERRY_ERR_TIMED_OUT;
            }
            continue;
        }
        fy_error("sending to ferryrun at %s failed: %s (did ferryrun exit?)", b->addr,
                 strerror(errno));
        b->broken = 1;
        return FERRY_ERR_BOOTSTRAP;
    }
    return FERRY_OK;
}

static ferry_status_t send_msg(builtin_t *b, fy_wire_buf_t *m, uint64_t deadline)
{
    if (m->oom) {
        fy_wire_buf_free(m);
        return FERRY_ERR_NO_MEMORY;
    }
    ferry_status_t st = send_all(b, m->data, m->len, deadline);
    fy_wire_buf_free(m);
    return st;
}

/*
 * Receive the next whole message (waiting until deadline).  FERRY_ERR_TIMED_OUT leaves the
 * stream intact: a later call returns the message when it arrives.
 */
static ferry_status_t recv_msg(builtin_t *b, uint64_t deadline, msg_t *m)
{
    /* drop the message returned last time */
    if (b->rdone > 0) {
        memmove(b->rbuf, b->rbuf + b->rdone, b->rlen - b->rdone);
        b->rlen -= b->rdone;
        b->rdone = 0;
    }
    for (;;) {
        if (b->rlen >= FY_WIRE_HDR_LEN) {
            uint32_t len;
            unsigned type;
            fy_wire_parse_hdr(b->rbuf, &len, &type);
            if (len > FY_WIRE_MAX_BODY) {
                fy_error("ferryrun at %s sent a message of %u bytes: not a ferryrun server?",
                         b->addr, len);
                b->broken = 1;
                return FERRY_ERR_PROTOCOL;
            }
            if (b->rlen >= FY_WIRE_HDR_LEN + (size_t)len) {
                m->type = type;
                m->body.p = b->rbuf + FY_WIRE_HDR_LEN;
                m->body.left = len;
                m->body.bad = 0;
                b->rdone = FY_WIRE_HDR_LEN + (size_t)len;
                return FERRY_OK;
            }
            if (b->rcap < FY_WIRE_HDR_LEN + (size_t)len) {
                uint8_t *n = realloc(b->rbuf, FY_WIRE_HDR_LEN + (size_t)len);
                if (n == NULL)
                    return FERRY_ERR_NO_MEMORY;
                b->rbuf = n;
                b->rcap = FY_WIRE_HDR_LEN + (size_t)len;
            }
        }
        if (b->rcap - b->rlen < 4096) {
            size_t cap = b->rcap ? b->rcap * 2 : 8192;
            uint8_t *n = realloc(b->rbuf, cap);
            if (n == NULL)
                return FERRY_ERR_NO_MEMORY;
            b->rbuf = n;
            b->rcap = cap;
        }
        ssize_t r = recv(b->fd, b->rbuf + b->rlen, b->rcap - b->rlen, 0);
        if (r > 0) {
            b->rlen += (size_t)r;
            continue;
        }
        if (r == 0) {
            fy_error("ferryrun at %s closed the connection (did ferryrun exit?)", b->addr);
            b->broken = 1;
            return FERRY_ERR_BOOTSTRAP;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            fy_error("receiving from ferryrun at %s failed: %s", b->addr, strerror(errno));
            b->broken = 1;
            return FERRY_ERR_BOOTSTRAP;
        }
        struct pollfd pfd = {.fd = b->fd, .events = POLLIN};
        int ms = fy_boot_ms_left(deadline);
        int pr = ms > 0 ? poll(&pfd, 1, ms) : 0;
        if (pr == 0)
            return FERRY_ERR_TIMED_OUT;
        if (pr < 0 && errno != EINTR) {
            fy_error("poll on the ferryrun connection failed: %s", strerror(errno));
            b->broken = 1;
            return FERRY_ERR_BOOTSTRAP;
        }
    }
}

/* An ERROR message from the server: log its text, return its status. */
static ferry_status_t server_error(builtin_t *b, msg_t *m, const char *what)
{
    int32_t st = (int32_t)fy_wire_rd_u32(&m->body);
    uint16_t n = fy_wire_rd_u16(&m->body);
    const uint8_t *text = fy_wire_rd_bytes(&m->body, n);
    if (m->body.bad) {
        fy_error("%s: ferryrun at %s sent a malformed error", what, b->addr);
        return FERRY_ERR_PROTOCOL;
    }
    fy_error("%s: %.*s", what, (int)n, (const char *)text);
    if (st >= 0 || st <= FERRY_ERR_LAST)
        st = FERRY_ERR_BOOTSTRAP;
    return (ferry_status_t)st;
}

static ferry_status_t unexpected(builtin_t *b, msg_t *m, const char *what)
{
    fy_error("%s: unexpected message type %u from ferryrun at %s", what, m->type, b->addr);
    b->broken = 1;
    return FERRY_ERR_PROTOCOL;
}

static ferry_status_t parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sl)
{
    char host[128];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof(host) ||
        colon[1] == '\0')
        goto bad;
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || errno != 0 || port <= 0 || port > 65535)
        goto bad;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [v6]:port */
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0 || ai == NULL) {
        fy_error("FERRY_BOOT_ADDR=\"%s\": cannot resolve host \"%s\": %s (it is set by "
                 "ferryrun)",
                 addr, host, gai_strerror(rc));
        return FERRY_ERR_BOOTSTRAP;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *sl = ai->ai_addrlen;
    freeaddrinfo(ai);
    return FERRY_OK;
bad:
    fy_error("FERRY_BOOT_ADDR=\"%s\" is not host:port (it is set by ferryrun)", addr);
    return FERRY_ERR_BOOTSTRAP;
}

static ferry_status_t connect_server(builtin_t *b, uint64_t deadline)
{
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    ferry_status_t st = parse_addr(b->addr, &ss, &sl);
    if (st != FERRY_OK)
        return st;
    b->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (b->fd < 0) {
        fy_error("socket() for the ferryrun connection: %s", strerror(errno));
        return FERRY_ERR_IO;
    }
    int one = 1;
    setsockopt(b->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(b->fd, (struct sockaddr *)&ss, sl) == 0)
        return FERRY_OK;
    if (errno != EINPROGRESS) {
        fy_error("cannot connect to ferryrun at %s (FERRY_BOOT_ADDR): %s; is ferryrun still "
                 "running?",
                 b->addr, strerror(errno));
        return FERRY_ERR_BOOTSTRAP;
    }
    struct pollfd pfd = {.fd = b->fd, .events = POLLOUT};
    int r;
    do {
        int ms = fy_boot_ms_left(deadline);
        r = ms > 0 ? poll(&pfd, 1, ms) : 0;
    } while (r < 0 && errno == EINTR);
    int err = 0;
    socklen_t el = sizeof(err);
    if (r == 0)
        err = ETIMEDOUT;
    else if (getsockopt(b->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
        err = errno;
    if (err != 0) {
        fy_error("cannot connect to ferryrun at %s (FERRY_BOOT_ADDR): %s; is ferryrun still "
                 "running?",
                 b->addr, strerror(err));
        return r == 0 ? FERRY_ERR_TIMED_OUT : FERRY_ERR_BOOTSTRAP;
    }
    return FERRY_OK;
}

static void builtin_free(builtin_t *b)
{
    if (b == NULL)
        return;
    if (b->fd >= 0)
        close(b->fd);
    free(b->rbuf);
    free(b);
}

static ferry_status_t builtin_init(fy_boot_t *boot)
{
    fy_boot_info_t *info = &boot->info;
    const char *addr = getenv("FERRY_BOOT_ADDR");
    if (addr == NULL || *addr == '\0') {
        fy_error("FERRY_BOOT_ADDR is not set: the builtin bootstrap serves programs started by "
                 "ferryrun (ferryrun -n N program ...)");
        return FERRY_ERR_BOOTSTRAP;
    }
    long size, rank, lrank, lsize;
    ferry_status_t st = fy_boot_env_int_required("FERRY_SIZE", 1, MAX_SIZE, WHO, &size);
    if (st == FERRY_OK)
        st = fy_boot_env_int_required("FERRY_RANK", 0, size - 1, WHO, &rank);
    if (st != FERRY_OK)
        return st;
    st = fy_boot_env_int("FERRY_LOCAL_SIZE", 1, size, WHO, &lsize);
    if (st == FERRY_ERR_NO_ELEM) {
        lsize = size;
        st = FERRY_OK;
    }
    if (st == FERRY_OK)
        st = fy_boot_env_int("FERRY_LOCAL_RANK", 0, lsize - 1, WHO, &lrank);
    if (st == FERRY_ERR_NO_ELEM) {
        lrank = rank < lsize ? rank : 0;
        st = FERRY_OK;
    }
    if (st != FERRY_OK)
        return st;
    const char *key = getenv("FERRY_JOB_KEY");
    if (key == NULL)
        key = "";
    size_t keylen = strlen(key);
    if (keylen > FY_WIRE_JOB_KEY_MAX) {
        fy_error("FERRY_JOB_KEY is %zu characters long: at most %d (it is set by ferryrun)", keylen,
                 FY_WIRE_JOB_KEY_MAX);
        return FERRY_ERR_BOOTSTRAP;
    }
    /* unset: the server refuses us, and its error names the variable */
    const char *secret = getenv("FERRY_BOOT_SECRET");
    if (secret == NULL)
        secret = "";
    size_t secretlen = strlen(secret);
    if (secretlen > FY_WIRE_SECRET_MAX) {
        fy_error("FERRY_BOOT_SECRET is %zu characters long: at most %d (it is set by ferryrun)",
                 secretlen, FY_WIRE_SECRET_MAX);
        return FERRY_ERR_BOOTSTRAP;
    }

    builtin_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return FERRY_ERR_NO_MEMORY;
    b->fd = -1;
    snprintf(b->addr, sizeof(b->addr), "%s", addr);
    uint64_t deadline = fy_time_ns() + boot->timeout_ns;
    if (deadline < boot->timeout_ns)
        deadline = UINT64_MAX;
    st = connect_server(b, deadline);
    if (st != FERRY_OK)
        goto fail;

    fy_wire_buf_t m = {0};
    fy_wire_begin(&m, FY_WIRE_HELLO);
    fy_wire_u32(&m, FY_WIRE_VERSION);
    fy_wire_u32(&m, (uint32_t)rank);
    fy_wire_u32(&m, (uint32_t)size);
    fy_wire_u32(&m, (uint32_t)getpid());
    fy_wire_u16(&m, (uint16_t)keylen);
    fy_wire_bytes(&m, key, keylen);
    fy_wire_u16(&m, (uint16_t)secretlen);
    fy_wire_bytes(&m, secret, secretlen);
    fy_wire_end(&m);
    st = send_msg(b, &m, deadline);
    if (st != FERRY_OK)
        goto fail;
    msg_t r;
    st = recv_msg(b, deadline, &r);
    if (st == FERRY_ERR_TIMED_OUT)
        fy_error("ferryrun at %s did not answer within FERRY_BOOT_TIMEOUT", b->addr);
    if (st != FERRY_OK)
        goto fail;
    if (r.type == FY_WIRE_ERROR) {
        st = server_error(b, &r, "ferryrun refused this rank");
        goto fail;
    }
    if (r.type != FY_WIRE_WELCOME) {
        st = unexpected(b, &r, "joining the job");
        goto fail;
    }
    uint32_t version = fy_wire_rd_u32(&r.body);
    uint32_t ssize = fy_wire_rd_u32(&r.body);
    b->epoch = fy_wire_rd_u32(&r.body);
    if (r.body.bad || version != FY_WIRE_VERSION || ssize != (uint32_t)size) {
        fy_error("ferryrun at %s answered with version %u and job size %u; expected version %u "
                 "and size %ld",
                 b->addr, version, ssize, FY_WIRE_VERSION, size);
        st = FERRY_ERR_PROTOCOL;
        goto fail;
    }
    info->rank = (int)rank;
    info->size = (int)size;
    info->local_rank = (int)lrank;
    info->local_size = (int)lsize;
    boot->priv = b;
    return FERRY_OK;
fail:
    builtin_free(b);
    return st;
}

static ferry_status_t check_usable(builtin_t *b)
{
    if (b->broken) {
        fy_error("the connection to ferryrun is out of step after an earlier error");
        return FERRY_ERR_BOOTSTRAP;
    }
    return FERRY_OK;
}

static ferry_status_t builtin_put(fy_boot_t *boot, const char *key, const void *value, size_t len)
{
    builtin_t *b = boot->priv;
    ferry_status_t st = check_usable(b);
    if (st != FERRY_OK)
        return st;
    if (len > FY_WIRE_MAX_VALUE) {
        fy_error("bootstrap put \"%s\": %zu bytes is more than ferryrun stores under one key (%u)",
                 key, len, FY_WIRE_MAX_VALUE);
        return FERRY_ERR_INVALID_PARAM;
    }
    fy_wire_buf_t m = {0};
    fy_wire_begin(&m, FY_WIRE_PUT);
    fy_wire_u16(&m, (uint16_t)strlen(key));
    fy_wire_bytes(&m, key, strlen(key));
    fy_wire_u32(&m, (uint32_t)len);
    fy_wire_bytes(&m, value, len);
    fy_wire_end(&m);
    return send_msg(b, &m, fy_time_ns() + boot->timeout_ns);
}

/* After a fence timed out: ask who is missing and say so.  Returns OK if the fence completed
 * after all while we asked. */
static ferry_status_t report_missing(fy_boot_t *boot, builtin_t *b, uint32_t epoch)
{
    double secs = (double)boot->timeout_ns / 1e9;
    fy_wire_buf_t q = {0};
    fy_wire_begin(&q, FY_WIRE_STATUS);
    fy_wire_end(&q);
    uint64_t deadline = fy_time_ns() + STATUS_WAIT_NS;
    if (send_msg(b, &q, deadline) != FERRY_OK)
        goto unknown;
    for (;;) {
        msg_t m;
        if (recv_msg(b, deadline, &m) != FERRY_OK)
            goto unknown;
        if (m.type == FY_WIRE_FENCE_DONE && fy_wire_rd_u32(&m.body) == epoch) {
            /* the fence completed while we asked: the STATUS answer still comes, consume it */
            b->epoch = epoch + 1;
            msg_t s;
            if (recv_msg(b, deadline, &s) != FERRY_OK || s.type != FY_WIRE_STATUS_REPLY)
                b->broken = 1;
            return FERRY_OK;
        }
        if (m.type == FY_WIRE_ERROR) {
            b->broken = 1;
            return server_error(b, &m, "bootstrap fence failed");
        }
        if (m.type != FY_WIRE_STATUS_REPLY)
            goto unknown;
        uint32_t sepoch = fy_wire_rd_u32(&m.body);
        uint32_t size = fy_wire_rd_u32(&m.body);
        uint32_t k = fy_wire_rd_u32(&m.body);
        char list[1024];
        size_t o = 0;
        list[0] = '\0';
        uint32_t shown = 0;
        for (uint32_t i = 0; i < k && !m.body.bad; i++) {
            uint32_t rank = fy_wire_rd_u32(&m.body);
            unsigned state = fy_wire_rd_u8(&m.body);
            if (m.body.bad)
                break;
            if (shown < 16 && o < sizeof(list) - 100) {
                o += (size_t)snprintf(list + o, sizeof(list) - o, "%srank %u (%s)",
                                      shown ? ", " : "", rank, fy_wire_rank_state_name(state));
                shown++;
            }
        }
        if (k > shown && o < sizeof(list) - 40)
            snprintf(list + o, sizeof(list) - o, " and %u more", k - shown);
        fy_error("bootstrap fence %u timed out after %.3g s (FERRY_BOOT_TIMEOUT): %u of %u ranks "
                 "did not arrive: %s",
                 sepoch, secs, k, size, list);
        b->broken = 1;
        return FERRY_ERR_TIMED_OUT;
    }
unknown:
    fy_error("bootstrap fence %u timed out after %.3g s (FERRY_BOOT_TIMEOUT), and ferryrun did "
             "not say which ranks are missing",
             epoch, secs);
    b->broken = 1;
    return FERRY_ERR_TIMED_OUT;
}

static ferry_status_t builtin_fence(fy_boot_t *boot)
{
    builtin_t *b = boot->priv;
    ferry_status_t st = check_usable(b);
    if (st != FERRY_OK)
        return st;
    uint32_t epoch = b->epoch;
    uint64_t deadline = fy_time_ns() + boot->timeout_ns;
    if (deadline < boot->timeout_ns)
        deadline = UINT64_MAX;
    fy_wire_buf_t m = {0};
    fy_wire_begin(&m, FY_WIRE_FENCE);
    fy_wire_u32(&m, epoch);
    fy_wire_end(&m);
    st = send_msg(b, &m, deadline);
    if (st != FERRY_OK)
        return st;
    msg_t r;
    st = recv_msg(b, deadline, &r);
    if (st == FERRY_ERR_TIMED_OUT)
        return report_missing(boot, b, epoch);
    if (st != FERRY_OK)
        return st;
    if (r.type == FY_WIRE_ERROR) {
        b->broken = 1;
        return server_error(b, &r, "bootstrap fence failed");
    }
    if (r.type != FY_WIRE_FENCE_DONE || fy_wire_rd_u32(&r.body) != epoch)
        return unexpected(b, &r, "waiting for the fence");
    b->epoch = epoch + 1;
    return FERRY_OK;
}

static ferry_status_t builtin_get(fy_boot_t *boot, int rank, const char *key, void *buf,
                                  size_t *len)
{
    builtin_t *b = boot->priv;
    ferry_status_t st = check_usable(b);
    if (st != FERRY_OK)
        return st;
    uint64_t deadline = fy_time_ns() + boot->timeout_ns;
    if (deadline < boot->timeout_ns)
        deadline = UINT64_MAX;
    fy_wire_buf_t m = {0};
    fy_wire_begin(&m, FY_WIRE_GET);
    fy_wire_u32(&m, (uint32_t)rank);
    fy_wire_u16(&m, (uint16_t)strlen(key));
    fy_wire_bytes(&m, key, strlen(key));
    fy_wire_end(&m);
    st = send_msg(b, &m, deadline);
    if (st != FERRY_OK)
        return st;
    msg_t r;
    st = recv_msg(b, deadline, &r);
    if (st == FERRY_ERR_TIMED_OUT) {
        fy_error("bootstrap get of rank %d's \"%s\": ferryrun did not answer within "
                 "FERRY_BOOT_TIMEOUT",
                 rank, key);
        b->broken = 1;
    }
    if (st != FERRY_OK)
        return st;
    if (r.type == FY_WIRE_ERROR) {
        b->broken = 1;
        return server_error(b, &r, "bootstrap get failed");
    }
    if (r.type != FY_WIRE_GET_REPLY)
        return unexpected(b, &r, "waiting for a get");
    int32_t status = (int32_t)fy_wire_rd_u32(&r.body);
    uint32_t vlen = fy_wire_rd_u32(&r.body);
    const uint8_t *value = fy_wire_rd_bytes(&r.body, vlen);
    if (r.body.bad) {
        fy_error("ferryrun sent a malformed answer to a get");
        b->broken = 1;
        return FERRY_ERR_PROTOCOL;
    }
    if (status != FERRY_OK)
        return status == FERRY_ERR_NO_ELEM ? FERRY_ERR_NO_ELEM : FERRY_ERR_BOOTSTRAP;
    size_t room = *len;
    *len = vlen;
    if (room < vlen)
        return FERRY_ERR_TRUNCATED;
    if (vlen > 0)
        memcpy(buf, value, vlen);
    return FERRY_OK;
}

static void builtin_finalize(fy_boot_t *boot)
{
    builtin_t *b = boot->priv;
    if (b == NULL)
        return;
    if (!b->broken) {
        fy_wire_buf_t m = {0};
        fy_wire_begin(&m, FY_WIRE_FINALIZE);
        fy_wire_end(&m);
        send_msg(b, &m, fy_time_ns() + FY_NSEC_PER_SEC);
    }
    builtin_free(b);
    boot->priv = NULL;
}

const fy_boot_ops_t fy_boot_builtin_ops = {
    .name = "builtin",
    .init = builtin_init,
    .put = builtin_put,
    .fence = builtin_fence,
    .get = builtin_get,
    .barrier = builtin_fence,
    .finalize = builtin_finalize,
};
