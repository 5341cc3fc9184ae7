/*
 * boot_pmi1.c - the PMI-1 wire protocol, spoken directly over PMI_FD (no libpmi): the text
 * protocol MPICH's mpiexec.hydra serves to each process it starts (Slurm's pmi2 plugin
 * serves it too).
 *
 * Each request is one line of space-separated key=value tokens, answered by one line:
 *
 *   cmd=init pmi_version=1 pmi_subversion=1   -> cmd=response_to_init ... rc=0
 *   cmd=get_maxes                             -> cmd=maxes kvsname_max= keylen_max= vallen_max=
 *   cmd=get_my_kvsname                        -> cmd=my_kvsname kvsname=
 *   cmd=put kvsname= key= value=              -> cmd=put_result rc=0
 *   cmd=barrier_in                            -> cmd=barrier_out      (after every rank's)
 *   cmd=get kvsname= key=                     -> cmd=get_result rc=0 value=   (rc=-1: none)
 *   cmd=finalize                              -> cmd=finalize_ack
 *
 * Values must be text without spaces or '=', and the server limits their length (hydra says
 * vallen_max=1024 and silently cuts longer values to 1023 characters), so a blob is encoded
 * with URL-safe base64 and split into chunks of vallen_max-1 characters:
 *
 *   key "fy:<rank>:<key>"     value "<bytes>.<chunks>.<first part of the encoding>"
 *   key "fy:<rank>:<key>:<i>" value the i-th further part, i = 1 .. chunks-1
 *
 * A get reads the head, learns the size and the number of chunks, and fetches the rest; a
 * value is never truncated.  A key longer than the server's keylen_max is replaced by
 * "#<FNV-1a hash>".  Local rank and size come from hydra's MPI_LOCALRANKID/MPI_LOCALNRANKS,
 * else from the PMI_process_mapping key, else from an exchange of host names.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "boot/boot_int.h"
#include "util/clock.h"
#include "util/log.h"

#define WHO              "the PMI-1 launcher (mpiexec.hydra)"
#define MIN_KEYLEN       40 /* "fy:" + rank + ":#" + 16 hex digits + ":" + chunk, with room */
#define MIN_VALLEN       64
#define MAX_VALUE        (256u << 20)
#define FINALIZE_WAIT_NS (5 * FY_NSEC_PER_SEC)

typedef struct pmi1 {
    int fd;
    int broken;
    size_t keylen_max, vallen_max, kvsname_max;
    char kvs[256];
    char *out; /* the request being sent */
    size_t out_cap;
    char *in; /* received bytes; a line is returned NUL-terminated in place */
    size_t in_len, in_cap, in_done;
} pmi1_t;

static ferry_status_t command(pmi1_t *p, uint64_t deadline, const char *reply, char **line,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/*
 * PMI-1 allows one init and one finalize per process (hydra closes the connection at
 * finalize), and hydra calls a process that exits without finalize a bad termination.  So the
 * connection belongs to the process: a second fy_boot_init (a world created again) reuses it,
 * fy_boot_finalize only drops a user, and cmd=finalize is sent at exit.
 */
static pmi1_t *process_conn;
static fy_boot_info_t process_info;
static int process_users;
static int process_local_known; /* process_info's local rank and size are filled */
static int atexit_registered;

/* Write the request formatted in p->out (n characters). */
static ferry_status_t send_out(pmi1_t *p, uint64_t deadline, size_t n)
{
    const char *s = p->out;
    size_t left = n;
    while (left > 0) {
        ssize_t w = send(p->fd, s, left, MSG_NOSIGNAL); /* a closed server: EPIPE, no signal */
        if (w > 0) {
            s += w;
            left -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = p->fd, .events = POLLOUT};
            int ms = fy_boot_ms_left(deadline);
            if (ms == 0 || poll(&pfd, 1, ms) == 0) {
                p->broken = 1;
                fy_error("writing to the PMI-1 server timed out");
                return FERRY_ERR_TIMED_OUT;
            }
            continue;
        }
        p->broken = 1;
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
            fy_error("the PMI-1 server closed PMI_FD=%d (did the launcher exit?)", p->fd);
        else
            fy_error("writing to the PMI-1 server (PMI_FD=%d) failed: %s", p->fd,
                     w < 0 ? strerror(errno) : "short write");
        return FERRY_ERR_BOOTSTRAP;
    }
    return FERRY_OK;
}

/* The next line from the server, without its newline, NUL-terminated (valid until the next
 * call).  FERRY_ERR_TIMED_OUT at the deadline. */
static ferry_status_t read_line(pmi1_t *p, uint64_t deadline, char **line)
{
    if (p->in_done > 0) {
        memmove(p->in, p->in + p->in_done, p->in_len - p->in_done);
        p->in_len -= p->in_done;
        p->in_done = 0;
    }
    for (;;) {
        char *nl = p->in_len > 0 ? memchr(p->in, '\n', p->in_len) : NULL;
        if (nl != NULL) {
            *nl = '\0';
            *line = p->in;
            p->in_done = (size_t)(nl - p->in) + 1;
            return FERRY_OK;
        }
        if (p->in_cap - p->in_len < 1024) {
            size_t cap = p->in_cap ? p->in_cap * 2 : 4096;
            char *n = realloc(p->in, cap);
            if (n == NULL)
                return FERRY_ERR_NO_MEMORY;
            p->in = n;
            p->in_cap = cap;
        }
        struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
        int ms = fy_boot_ms_left(deadline);
        int r = ms > 0 ? poll(&pfd, 1, ms) : 0;
        if (r == 0)
            return FERRY_ERR_TIMED_OUT;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            p->broken = 1;
            fy_error("poll on PMI_FD failed: %s", strerror(errno));
            return FERRY_ERR_BOOTSTRAP;
        }
        ssize_t n = read(p->fd, p->in + p->in_len, p->in_cap - p->in_len - 1);
        if (n > 0) {
            p->in_len += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        p->broken = 1;
        fy_error("the PMI-1 server closed PMI_FD=%d%s%s (did the launcher exit?)", p->fd,
                 n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
        return FERRY_ERR_BOOTSTRAP;
    }
}

/* The value of `name` in a reply line, as a pointer into the line and a length; NULL if
 * absent.  Tokens are separated by spaces; a value ends at the next space. */
static const char *field(const char *line, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    const char *s = line;
    while (*s != '\0') {
        while (*s == ' ')
            s++;
        const char *e = s;
        while (*e != '\0' && *e != ' ')
            e++;
        if ((size_t)(e - s) > nl && strncmp(s, name, nl) == 0 && s[nl] == '=') {
            *len = (size_t)(e - s) - nl - 1;
            return s + nl + 1;
        }
        s = e;
    }
    return NULL;
}

static int field_is(const char *line, const char *name, const char *want)
{
    size_t n;
    const char *v = field(line, name, &n);
    return v != NULL && n == strlen(want) && strncmp(v, want, n) == 0;
}

static long field_long(const char *line, const char *name, long dflt)
{
    size_t n;
    const char *v = field(line, name, &n);
    if (v == NULL || n == 0 || n > 20)
        return dflt;
    char tmp[24];
    memcpy(tmp, v, n);
    tmp[n] = '\0';
    char *end;
    long x = strtol(tmp, &end, 10);
    return *end == '\0' ? x : dflt;
}

/* Send one request and read its answer, which must be `cmd=<reply>`. */
static ferry_status_t command(pmi1_t *p, uint64_t deadline, const char *reply, char **line,
                              const char *fmt, ...)
{
    if (p->broken) {
        fy_error("the PMI-1 connection is out of step after an earlier error");
        return FERRY_ERR_BOOTSTRAP;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->out, p->out_cap, fmt, ap);
    va_end(ap);
    if (n < 0)
        return FERRY_ERR_INVALID_PARAM;
    if ((size_t)n + 1 > p->out_cap) {
        char *o = realloc(p->out, (size_t)n + 1);
        if (o == NULL)
            return FERRY_ERR_NO_MEMORY;
        p->out = o;
        p->out_cap = (size_t)n + 1;
        va_start(ap, fmt);
        vsnprintf(p->out, p->out_cap, fmt, ap);
        va_end(ap);
    }
    char req[64]; /* the command's name, for messages */
    snprintf(req, sizeof(req), "%.*s", (int)strcspn(p->out, " \n"), p->out);
    ferry_status_t st = send_out(p, deadline, (size_t)n);
    if (st != FERRY_OK)
        return st;
    st = read_line(p, deadline, line);
    if (st == FERRY_ERR_TIMED_OUT) {
        p->broken = 1;
        if (strcmp(reply, "barrier_out") != 0) /* the barrier says more itself */
            fy_error("the PMI-1 server did not answer %s within FERRY_BOOT_TIMEOUT", req);
        return st;
    }
    if (st != FERRY_OK)
        return st;
    if (!field_is(*line, "cmd", reply)) {
        fy_error("the PMI-1 server answered \"%.200s\" to %s (expected cmd=%s)", *line, req, reply);
        p->broken = 1;
        return FERRY_ERR_PROTOCOL;
    }
    return FERRY_OK;
}

static uint64_t deadline_of(const fy_boot_t *boot)
{
    uint64_t d = fy_time_ns() + boot->timeout_ns;
    return d < boot->timeout_ns ? UINT64_MAX : d;
}

/* The launcher key of chunk `chunk` of (rank, key). */
static void make_key(const pmi1_t *p, int rank, const char *key, unsigned chunk, char *out,
                     size_t outsz)
{
    char part[32] = "";
    if (chunk > 0)
        snprintf(part, sizeof(part), ":%u", chunk);
    int n = snprintf(out, outsz, "fy:%d:%s%s", rank, key, part);
    if (n < 0 || (size_t)n + 1 > p->keylen_max || (size_t)n + 1 > outsz)
        snprintf(out, outsz, "fy:%d:#%016llx%s", rank, (unsigned long long)fy_boot_fnv1a(key),
                 part);
}

static ferry_status_t put_raw(fy_boot_t *boot, pmi1_t *p, const char *lkey, const char *val,
                              size_t vlen)
{
    char *line;
    ferry_status_t st =
        command(p, deadline_of(boot), "put_result", &line, "cmd=put kvsname=%s key=%s value=%.*s\n",
                p->kvs, lkey, (int)vlen, val);
    if (st != FERRY_OK)
        return st;
    if (!field_is(line, "rc", "0")) {
        size_t n = 0;
        const char *msg = field(line, "msg", &n);
        fy_error("the PMI-1 server refused to store key %s: %.*s", lkey, (int)n,
                 msg != NULL ? msg : "(no reason given)");
        return FERRY_ERR_BOOTSTRAP;
    }
    return FERRY_OK;
}

/* rc=0: FERRY_OK with the value (pointer, length); other rc: FERRY_ERR_NO_ELEM. */
static ferry_status_t get_raw(fy_boot_t *boot, pmi1_t *p, const char *lkey, const char **val,
                              size_t *vlen)
{
    char *line;
    ferry_status_t st = command(p, deadline_of(boot), "get_result", &line,
                                "cmd=get kvsname=%s key=%s\n", p->kvs, lkey);
    if (st != FERRY_OK)
        return st;
    if (!field_is(line, "rc", "0"))
        return FERRY_ERR_NO_ELEM;
    *val = field(line, "value", vlen);
    if (*val == NULL) {
        fy_error("the PMI-1 server's answer to get %s has no value", lkey);
        p->broken = 1;
        return FERRY_ERR_PROTOCOL;
    }
    return FERRY_OK;
}

static ferry_status_t pmi1_put(fy_boot_t *boot, const char *key, const void *value, size_t len)
{
    pmi1_t *p = boot->priv;
    if (len > MAX_VALUE) {
        fy_error("bootstrap put \"%s\": %zu bytes is more than the pmi1 backend stores", key, len);
        return FERRY_ERR_INVALID_PARAM;
    }
    size_t cap = p->vallen_max - 1; /* characters per launcher value */
    size_t enc = fy_b64_len(len);
    char head[48];
    unsigned chunks = 1;
    size_t first;
    for (;;) {
        int h = snprintf(head, sizeof(head), "%zu.%u.", len, chunks);
        first = cap - (size_t)h;
        if (enc <= first + (size_t)(chunks - 1) * cap)
            break;
        chunks = 1 + (unsigned)((enc - first + cap - 1) / cap);
    }
    char *text = malloc(enc + sizeof(head));
    if (text == NULL)
        return FERRY_ERR_NO_MEMORY;
    size_t hl = strlen(head);
    memcpy(text, head, hl);
    fy_b64_encode(value, len, text + hl);
    ferry_status_t st = FERRY_OK;
    size_t total = hl + enc, off = 0;
    for (unsigned i = 0; i < chunks && st == FERRY_OK; i++) {
        size_t n = total - off < cap ? total - off : cap;
        char lkey[128];
        make_key(p, boot->info.rank, key, i, lkey, sizeof(lkey));
        st = put_raw(boot, p, lkey, text + off, n);
        off += n;
    }
    free(text);
    if (st == FERRY_OK && chunks > 1)
        fy_debug("pmi1: \"%s\" (%zu bytes) stored as %u keys of up to %zu characters", key, len,
                 chunks, cap);
    return st;
}

static ferry_status_t pmi1_get(fy_boot_t *boot, int rank, const char *key, void *buf, size_t *len)
{
    pmi1_t *p = boot->priv;
    char lkey[128];
    make_key(p, rank, key, 0, lkey, sizeof(lkey));
    const char *v;
    size_t vlen;
    ferry_status_t st = get_raw(boot, p, lkey, &v, &vlen);
    if (st != FERRY_OK)
        return st;
    /* head: "<bytes>.<chunks>.<data>" */
    char num[48];
    size_t hl = 0;
    unsigned long long bytes = 0, chunks = 0;
    int dots = 0;
    while (hl < vlen && dots < 2 && hl < sizeof(num) - 1)
        if ((num[hl] = v[hl]) == '.')
            hl++, dots++;
        else
            hl++;
    num[hl] = '\0';
    if (dots != 2 || sscanf(num, "%llu.%llu.", &bytes, &chunks) != 2 || chunks == 0 ||
        bytes > MAX_VALUE || chunks > MAX_VALUE) {
        fy_error("pmi1: the value of key %s is not in ferry's format (\"%.40s\")", lkey, v);
        return FERRY_ERR_PROTOCOL;
    }
    size_t room = *len;
    *len = (size_t)bytes;
    if (room < bytes)
        return FERRY_ERR_TRUNCATED;
    size_t enc = fy_b64_len((size_t)bytes);
    char *text = malloc(enc + 1);
    if (text == NULL)
        return FERRY_ERR_NO_MEMORY;
    size_t got = vlen - hl;
    if (got > enc)
        goto bad;
    memcpy(text, v + hl, got);
    for (unsigned long long i = 1; i < chunks; i++) {
        make_key(p, rank, key, (unsigned)i, lkey, sizeof(lkey));
        st = get_raw(boot, p, lkey, &v, &vlen);
        if (st == FERRY_ERR_NO_ELEM) {
            fy_error("pmi1: part %llu of %llu of rank %d's \"%s\" is missing (key %s)", i, chunks,
                     rank, key, lkey);
            st = FERRY_ERR_PROTOCOL;
        }
        if (st != FERRY_OK) {
            free(text);
            return st;
        }
        if (got + vlen > enc)
            goto bad;
        memcpy(text + got, v, vlen);
        got += vlen;
    }
    if (got != enc || fy_b64_decode(text, enc, buf) != (long)bytes)
        goto bad;
    free(text);
    return FERRY_OK;
bad:
    fy_error("pmi1: rank %d's \"%s\" does not reassemble to %llu bytes (was it cut by the "
             "server?)",
             rank, key, bytes);
    free(text);
    return FERRY_ERR_PROTOCOL;
}

static ferry_status_t pmi1_barrier(fy_boot_t *boot)
{
    pmi1_t *p = boot->priv;
    char *line;
    ferry_status_t st = command(p, deadline_of(boot), "barrier_out", &line, "cmd=barrier_in\n");
    if (st == FERRY_ERR_TIMED_OUT)
        fy_error("bootstrap fence timed out after %.3g s (FERRY_BOOT_TIMEOUT); the PMI-1 server "
                 "does not say which ranks did not arrive",
                 (double)boot->timeout_ns / 1e9);
    return st;
}

/* Node of every rank from PMI_process_mapping "(vector,(node,nodes,ranks_per_node),...)": the
 * blocks describe ranks in order, and repeat if they describe fewer than size ranks. */
static int parse_mapping(const char *v, size_t vlen, int size, int *node_of)
{
    char s[1024];
    if (vlen >= sizeof(s))
        return -1;
    memcpy(s, v, vlen);
    s[vlen] = '\0';
    const char *q = strstr(s, "(vector");
    if (q == NULL)
        return -1;
    q += 7;
    struct {
        int node, nodes, per;
    } blk[64];
    int nb = 0;
    long long described = 0; /* nodes * ranks_per_node overflows an int for a hostile map */
    while (nb < 64) {
        q = strchr(q, '(');
        if (q == NULL)
            break;
        if (sscanf(q, "(%d,%d,%d)", &blk[nb].node, &blk[nb].nodes, &blk[nb].per) != 3 ||
            blk[nb].nodes <= 0 || blk[nb].per <= 0 || blk[nb].node < 0 ||
            blk[nb].node > INT_MAX - size)
            return -1;
        described += (long long)blk[nb].nodes * blk[nb].per;
        nb++;
        q++;
    }
    if (nb == 0 || described <= 0)
        return -1;
    int r = 0;
    while (r < size)
        for (int b = 0; b < nb && r < size; b++)
            for (int n = 0; n < blk[b].nodes && r < size; n++)
                for (int k = 0; k < blk[b].per && r < size; k++)
                    node_of[r++] = blk[b].node + n;
    return 0;
}

static ferry_status_t find_local(fy_boot_t *boot, pmi1_t *p)
{
    fy_boot_info_t *info = &boot->info;
    long lr, ls;
    const char *who = "mpiexec.hydra";
    if (fy_boot_env_int("MPI_LOCALNRANKS", 1, info->size, who, &ls) == FERRY_OK &&
        fy_boot_env_int("MPI_LOCALRANKID", 0, ls - 1, who, &lr) == FERRY_OK) {
        info->local_rank = (int)lr;
        info->local_size = (int)ls;
        return FERRY_OK;
    }
    int *node = calloc((size_t)info->size, sizeof(int));
    if (node == NULL)
        return FERRY_ERR_NO_MEMORY;
    const char *v;
    size_t vlen;
    ferry_status_t st = get_raw(boot, p, "PMI_process_mapping", &v, &vlen);
    if (st == FERRY_OK && parse_mapping(v, vlen, info->size, node) == 0) {
        fy_debug("pmi1: local ranks from PMI_process_mapping=%.*s", (int)vlen, v);
    } else {
        if (st != FERRY_OK && st != FERRY_ERR_NO_ELEM)
            goto out;
        /* no map: exchange host names (one put, a barrier, size gets) */
        fy_debug("pmi1: no usable PMI_process_mapping: exchanging host names");
        fy_boot_fill_host(info);
        st = pmi1_put(boot, "fy.host", info->host, strlen(info->host));
        if (st == FERRY_OK)
            st = pmi1_barrier(boot);
        char mine[64], other[64];
        snprintf(mine, sizeof(mine), "%s", info->host);
        for (int r = 0; r < info->size && st == FERRY_OK; r++) {
            size_t n = sizeof(other) - 1;
            st = pmi1_get(boot, r, "fy.host", other, &n);
            if (st == FERRY_OK) {
                other[n] = '\0';
                node[r] = strcmp(other, mine) == 0 ? 0 : 1; /* same host as me or not */
            }
        }
        if (st != FERRY_OK)
            goto out;
        node[info->rank] = 0;
    }
    info->local_rank = 0;
    info->local_size = 0;
    for (int r = 0; r < info->size; r++) {
        if (node[r] != node[info->rank])
            continue;
        if (r < info->rank)
            info->local_rank++;
        info->local_size++;
    }
    st = FERRY_OK;
out:
    free(node);
    return st;
}

static void pmi1_free(pmi1_t *p)
{
    if (p == NULL)
        return;
    free(p->out);
    free(p->in);
    free(p);
}

/* The process's connection: the environment, init, the server's limits and the kvs name.
 * Nothing collective happens here (the local ranks are for pmi1_init), so the context may
 * open it for the job key (fy_boot_pmi1_kvsname) in a process that never makes a world. */
static ferry_status_t pmi1_open(fy_boot_t *boot)
{
    fy_boot_info_t *info = &boot->info;
    long fd, size, rank;
    ferry_status_t st = fy_boot_env_int("PMI_FD", 0, INT_MAX, WHO, &fd);
    if (st == FERRY_ERR_NO_ELEM) {
        if (getenv("PMI_PORT") != NULL)
            fy_error("PMI_PORT is set but PMI_FD is not: the pmi1 bootstrap speaks PMI-1 over an "
                     "inherited PMI_FD only (as mpiexec.hydra and srun --mpi=pmi2 provide)");
        else
            fy_error("PMI_FD is not set: the pmi1 bootstrap serves programs started by a PMI-1 "
                     "launcher (mpiexec.hydra -np N program)");
        return FERRY_ERR_BOOTSTRAP;
    }
    if (st != FERRY_OK)
        return st;
    struct stat sb;
    if (fstat((int)fd, &sb) != 0) {
        fy_error("PMI_FD=%ld is not an open file descriptor (%s); it is set by %s", fd,
                 strerror(errno), WHO);
        return FERRY_ERR_BOOTSTRAP;
    }
    if (!S_ISSOCK(sb.st_mode)) {
        fy_error("PMI_FD=%ld is not a socket; it is set by %s", fd, WHO);
        return FERRY_ERR_BOOTSTRAP;
    }
    st = fy_boot_env_int_required("PMI_SIZE", 1, INT_MAX, WHO, &size);
    if (st == FERRY_OK)
        st = fy_boot_env_int_required("PMI_RANK", 0, size - 1, WHO, &rank);
    if (st != FERRY_OK)
        return st;

    pmi1_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return FERRY_ERR_NO_MEMORY;
    p->fd = (int)fd;
    p->out_cap = 1024;
    p->out = malloc(p->out_cap);
    if (p->out == NULL) {
        pmi1_free(p);
        return FERRY_ERR_NO_MEMORY;
    }
    boot->priv = p;
    info->rank = (int)rank;
    info->size = (int)size;
    uint64_t deadline = deadline_of(boot);
    char *line;
    st = command(p, deadline, "response_to_init", &line,
                 "cmd=init pmi_version=1 pmi_subversion=1\n");
    if (st == FERRY_OK && !field_is(line, "rc", "0")) {
        fy_error("the PMI-1 server refused init: \"%.200s\"", line);
        st = FERRY_ERR_BOOTSTRAP;
    }
    if (st == FERRY_OK)
        st = command(p, deadline, "maxes", &line, "cmd=get_maxes\n");
    if (st == FERRY_OK) {
        long k = field_long(line, "keylen_max", 64), v = field_long(line, "vallen_max", 1024);
        long n = field_long(line, "kvsname_max", 256);
        if (k < MIN_KEYLEN || v < MIN_VALLEN || n < 2) {
            fy_error("the PMI-1 server's limits are too small: keylen_max=%ld (need %d), "
                     "vallen_max=%ld (need %d)",
                     k, MIN_KEYLEN, v, MIN_VALLEN);
            st = FERRY_ERR_BOOTSTRAP;
        }
        p->keylen_max = (size_t)k;
        p->vallen_max = (size_t)v;
        p->kvsname_max = (size_t)n;
    }
    if (st == FERRY_OK)
        st = command(p, deadline, "my_kvsname", &line, "cmd=get_my_kvsname\n");
    if (st == FERRY_OK) {
        size_t n;
        const char *kvs = field(line, "kvsname", &n);
        if (kvs == NULL || n == 0 || n >= sizeof(p->kvs)) {
            fy_error("the PMI-1 server sent no usable kvsname: \"%.200s\"", line);
            st = FERRY_ERR_PROTOCOL;
        } else {
            memcpy(p->kvs, kvs, n);
            p->kvs[n] = '\0';
        }
    }
    if (st != FERRY_OK) {
        if (st == FERRY_ERR_TIMED_OUT)
            fy_error("the PMI-1 server did not answer during init (FERRY_BOOT_TIMEOUT)");
        pmi1_free(p);
        boot->priv = NULL;
        return st;
    }
    fy_debug("pmi1: kvs %s, keylen_max %zu, vallen_max %zu", p->kvs, p->keylen_max, p->vallen_max);
    process_conn = p;
    process_info = *info;
    process_local_known = 0;
    process_users = 0;
    if (!atexit_registered && atexit(fy_boot_pmi1_close) == 0)
        atexit_registered = 1;
    return FERRY_OK;
}

static ferry_status_t pmi1_init(fy_boot_t *boot)
{
    ferry_status_t st;
    if (process_conn == NULL) {
        st = pmi1_open(boot);
        if (st != FERRY_OK)
            return st;
    }
    if (process_conn->broken) {
        fy_error("the PMI-1 connection of this process failed earlier: it cannot be used "
                 "again");
        return FERRY_ERR_BOOTSTRAP;
    }
    boot->info = process_info;
    boot->priv = process_conn;
    boot->value_limit = process_conn->vallen_max - 1;
    if (!process_local_known) {
        st = find_local(boot, process_conn);
        if (st != FERRY_OK) {
            if (st == FERRY_ERR_TIMED_OUT)
                fy_error("the PMI-1 server did not answer during init (FERRY_BOOT_TIMEOUT)");
            pmi1_free(process_conn);
            process_conn = NULL;
            boot->priv = NULL;
            return st;
        }
        process_info = boot->info;
        process_local_known = 1;
    }
    process_users++;
    return FERRY_OK;
}

ferry_status_t fy_boot_pmi1_kvsname(fy_boot_t *boot, char *buf, size_t len)
{
    if (process_conn == NULL) {
        ferry_status_t st = pmi1_open(boot);
        if (st != FERRY_OK)
            return st;
    }
    if (strlen(process_conn->kvs) >= len)
        return FERRY_ERR_TRUNCATED;
    strcpy(buf, process_conn->kvs);
    return FERRY_OK;
}

void fy_boot_pmi1_close(void)
{
    pmi1_t *p = process_conn;
    if (p == NULL)
        return;
    if (!p->broken) {
        char *line;
        command(p, fy_time_ns() + FINALIZE_WAIT_NS, "finalize_ack", &line, "cmd=finalize\n");
    }
    close(p->fd);
    pmi1_free(p);
    process_conn = NULL;
}

static void pmi1_finalize(fy_boot_t *boot)
{
    /* the connection stays for a later init; fy_boot_pmi1_close() ends it */
    if (boot->priv != NULL && process_users > 0)
        process_users--;
    boot->priv = NULL;
}

const fy_boot_ops_t fy_boot_pmi1_ops = {
    .name = "pmi1",
    .init = pmi1_init,
    .put = pmi1_put,
    .fence = pmi1_barrier,
    .get = pmi1_get,
    .barrier = pmi1_barrier,
    .finalize = pmi1_finalize,
};
