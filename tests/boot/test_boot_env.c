/*
 * test_boot_env.c - the bootstrap inside one process: backend selection, a missing or garbled
 * launcher environment (each must fail with a message naming the variable, never hang), the
 * singleton backend, the blob encoding, and the pmi1 backend against a small fake PMI-1
 * server (a thread on a socketpair) whose limits are tiny, so that values are split over many
 * keys, and whose barrier can be made to never answer; and the job key a context takes from
 * that server's kvs name.
 *
 * Each case runs in its own child (fytest), so it may change the environment freely; it first
 * removes every launcher variable it inherited.  Messages are caught by pointing fd 2 at a
 * pipe around the call.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "boot/boot_int.h"
#include "fytest.h"
#include "fytest_util.h"
#include "proto/proto.h"
#include "proto/proto_int.h"

extern char **environ;

static void clean_env(void)
{
    static const char *const prefixes[] = {"FERRY_", "PMI_", "PMIX_", "MPI_LOCAL"};
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; *e != NULL && !again; e++) {
            for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
                if (strncmp(*e, prefixes[i], strlen(prefixes[i])) == 0) {
                    char name[256];
                    snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
                    unsetenv(name);
                    again = 1;
                    break;
                }
            }
        }
    }
}

/* fy_boot_init with stderr captured into msg. */
static ferry_status_t init_capture(fy_boot_t **b, char *msg, size_t n)
{
    int p[2];
    FY_ASSERT(pipe(p) == 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(p[1], 2);
    ferry_status_t st = fy_boot_init(b);
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    ssize_t k = read(p[0], msg, n - 1);
    msg[k > 0 ? k : 0] = '\0';
    close(p[0]);
    return st;
}

#define EXPECT_INIT_FAILS(status, needle)                                                          \
    do {                                                                                           \
        fy_boot_t *b_ = NULL;                                                                      \
        char msg_[4096];                                                                           \
        FY_ASSERT_STATUS(init_capture(&b_, msg_, sizeof(msg_)), (status));                         \
        FY_ASSERT(b_ == NULL);                                                                     \
        FY_ASSERT_MSG(strstr(msg_, (needle)) != NULL, "\"%s\" not in the message: %s", (needle),   \
                      msg_);                                                                       \
    } while (0)

static void builtin_rank_garbled(void)
{
    clean_env();
    setenv("FERRY_BOOT_ADDR", "127.0.0.1:5", 1);
    setenv("FERRY_SIZE", "4", 1);
    setenv("FERRY_RANK", "abc", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_RANK=\"abc\" is not an integer");
    setenv("FERRY_RANK", "7", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_RANK=7 is out of range: expected 0..3");
    setenv("FERRY_RANK", "1x", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_RANK=\"1x\"");
    unsetenv("FERRY_RANK");
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_RANK is not set");
}

static void builtin_size_garbled(void)
{
    clean_env();
    setenv("FERRY_BOOT_ADDR", "127.0.0.1:5", 1);
    setenv("FERRY_RANK", "0", 1);
    setenv("FERRY_SIZE", "0", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_SIZE=0 is out of range");
    setenv("FERRY_SIZE", "", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_SIZE=\"\" is not an integer");
    setenv("FERRY_SIZE", "4", 1);
    setenv("FERRY_LOCAL_SIZE", "-2", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_LOCAL_SIZE=-2 is out of range");
}

static void builtin_addr_garbled(void)
{
    clean_env();
    setenv("FERRY_RANK", "0", 1);
    setenv("FERRY_SIZE", "2", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_BOOT_ADDR is not set");
    setenv("FERRY_BOOT_ADDR", "nonsense", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_BOOT_ADDR=\"nonsense\" is not host:port");
    setenv("FERRY_BOOT_ADDR", "127.0.0.1:99999", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "is not host:port");
    /* a port nobody listens on: bind one, note it, close it */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sin);
    FY_ASSERT(bind(s, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    FY_ASSERT(getsockname(s, (struct sockaddr *)&sin, &sl) == 0);
    close(s);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sin.sin_port));
    setenv("FERRY_BOOT_ADDR", addr, 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "cannot connect to ferryrun at 127.0.0.1:");
}

static void forced_backend_missing_env(void)
{
    clean_env();
    setenv("FERRY_BOOT", "builtin", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "FERRY_BOOT_ADDR is not set");
    setenv("FERRY_BOOT", "pmi1", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "PMI_FD is not set");
    setenv("FERRY_BOOT", "pmix", 1);
#ifdef FERRY_HAVE_PMIX
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "PMIX_NAMESPACE is not set");
#else
    EXPECT_INIT_FAILS(FERRY_ERR_UNSUPPORTED, "built without PMIx support");
#endif
    setenv("FERRY_BOOT", "carrier-pigeon", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BAD_CONFIG, "FERRY_BOOT=carrier-pigeon is not a bootstrap");
    setenv("FERRY_BOOT", "singleton", 1);
    setenv("FERRY_BOOT_TIMEOUT", "soon", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BAD_CONFIG, "FERRY_BOOT_TIMEOUT=soon is not a time");
}

static void pmi1_env_garbled(void)
{
    clean_env();
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "1", 1);
    setenv("PMI_FD", "abc", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "PMI_FD=\"abc\" is not an integer");
    int p[2];
    FY_ASSERT(pipe(p) == 0);
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", p[0]);
    setenv("PMI_FD", fd, 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "is not a socket");
    setenv("PMI_FD", "987", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "PMI_FD=987 is not an open file descriptor");
    int sv[2];
    FY_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    snprintf(fd, sizeof(fd), "%d", sv[0]);
    setenv("PMI_FD", fd, 1);
    setenv("PMI_RANK", "one", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "PMI_RANK=\"one\" is not an integer");
    setenv("PMI_RANK", "1", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "PMI_RANK=1 is out of range");
    unsetenv("PMI_FD");
    setenv("PMI_PORT", "localhost:1234", 1);
    EXPECT_INIT_FAILS(FERRY_ERR_BOOTSTRAP, "PMI_PORT is set but PMI_FD is not");
}

static void singleton_backend(void)
{
    clean_env();
    fy_boot_t *b;
    char msg[1024];
    FY_ASSERT_OK(init_capture(&b, msg, sizeof(msg)));
    const fy_boot_info_t *i = fy_boot_info(b);
    FY_ASSERT_STR_EQ(i->backend, "singleton");
    FY_ASSERT_EQ(i->rank, 0);
    FY_ASSERT_EQ(i->size, 1);
    FY_ASSERT_EQ(i->local_rank, 0);
    FY_ASSERT_EQ(i->local_size, 1);
    unsigned char v[300], w[300];
    for (int k = 0; k < 300; k++)
        v[k] = (unsigned char)(k * 7);
    FY_ASSERT_OK(fy_boot_put(b, "blob", v, sizeof(v)));
    FY_ASSERT_OK(fy_boot_put(b, "blob", v, 100)); /* replaced */
    FY_ASSERT_OK(fy_boot_fence(b));
    size_t len = sizeof(w);
    FY_ASSERT_OK(fy_boot_get(b, 0, "blob", w, &len));
    FY_ASSERT_EQ(len, 100);
    FY_ASSERT_MEM_EQ(v, w, 100);
    len = 5;
    FY_ASSERT_STATUS(fy_boot_get(b, 0, "blob", w, &len), FERRY_ERR_TRUNCATED);
    FY_ASSERT_EQ(len, 100);
    len = sizeof(w);
    FY_ASSERT_STATUS(fy_boot_get(b, 0, "nothing", w, &len), FERRY_ERR_NO_ELEM);
    FY_ASSERT_STATUS(fy_boot_get(b, 1, "blob", w, &len), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_boot_put(b, "", v, 1), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_boot_put(b, "a b", v, 1), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_OK(fy_boot_barrier(b));
    fy_boot_finalize(b);
    /* forced, even with another launcher's marks around */
    setenv("FERRY_BOOT", "singleton", 1);
    setenv("FERRY_RANK", "3", 1);
    FY_ASSERT_OK(init_capture(&b, msg, sizeof(msg)));
    FY_ASSERT_STR_EQ(fy_boot_info(b)->backend, "singleton");
    fy_boot_finalize(b);
}

static void base64_round_trip(void)
{
    unsigned char in[300], out[300];
    char enc[500];
    for (int i = 0; i < 300; i++)
        in[i] = (unsigned char)(i * 151 + 7);
    for (size_t n = 0; n <= sizeof(in); n++) {
        fy_b64_encode(in, n, enc);
        size_t e = fy_b64_len(n);
        for (size_t k = 0; k < e; k++)
            FY_ASSERT_MSG(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
                                 enc[k]) != NULL,
                          "character %zu of %zu", k, n);
        memset(out, 0, sizeof(out));
        FY_ASSERT_EQ(fy_b64_decode(enc, e, out), (long)n);
        FY_ASSERT_MEM_EQ(in, out, n);
    }
    FY_ASSERT_EQ(fy_b64_decode("ab=c", 4, out), -1);
    FY_ASSERT_EQ(fy_b64_decode("abcde", 5, out), -1);
}

/* ---- a fake PMI-1 server -------------------------------------------------------------------- */

#define FAKE_VALLEN 64
#define FAKE_KEYLEN 48

typedef struct fake {
    int fd;
    int hang_barrier;
    int close_after_init; /* close the socket after get_my_kvsname */
    const char *kvs;      /* the job's kvs name (NULL: "fakekvs") */
    int inits;            /* cmd=init requests seen */
    const char *mapping;  /* PMI_process_mapping, or NULL */
    pthread_t thread;
    /* what it saw */
    int puts, longest_value, longest_key;
    int nkv;
    char keys[4096][FAKE_KEYLEN];
    char vals[4096][FAKE_VALLEN];
} fake_t;

static void fake_reply(fake_t *f, const char *line)
{
    ssize_t w = write(f->fd, line, strlen(line));
    (void)w;
}

static const char *fake_field(const char *line, const char *name, char *out, size_t n)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s=", name);
    const char *p = strstr(line, pat);
    if (p == NULL)
        return NULL;
    p += strlen(pat);
    size_t k = strcspn(p, " \n");
    snprintf(out, n, "%.*s", (int)k, p);
    return out;
}

/* strcpy that cuts at n - 1 characters, as a PMI server with fixed buffers does */
static void copy_cut(char *dst, size_t n, const char *src)
{
    size_t k = strlen(src);
    if (k > n - 1)
        k = n - 1;
    memcpy(dst, src, k);
    dst[k] = '\0';
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    char buf[8192];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(f->fd, buf + len, sizeof(buf) - 1 - len);
        if (r <= 0)
            return NULL;
        len += (size_t)r;
        buf[len] = '\0';
        char *nl;
        while ((nl = strchr(buf, '\n')) != NULL) {
            /* one request, with a space in front so that every field is " name=" */
            char line[8200], key[256], val[4096], out[8192];
            *nl = '\0';
            snprintf(line, sizeof(line), " %s", buf);
            size_t used = (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, len - used + 1);
            len -= used;
            if (strstr(line, " cmd=init ") != NULL) {
                f->inits++;
                fake_reply(f, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
            } else if (strstr(line, " cmd=get_maxes") != NULL) {
                snprintf(out, sizeof(out),
                         "cmd=maxes kvsname_max=256 keylen_max=%d vallen_max=%d\n", FAKE_KEYLEN,
                         FAKE_VALLEN);
                fake_reply(f, out);
            } else if (strstr(line, " cmd=get_my_kvsname") != NULL) {
                snprintf(out, sizeof(out), "cmd=my_kvsname kvsname=%s\n",
                         f->kvs != NULL ? f->kvs : "fakekvs");
                fake_reply(f, out);
                if (f->close_after_init) {
                    close(f->fd);
                    return NULL;
                }
            } else if (strstr(line, " cmd=put ") != NULL) {
                fake_field(line, "key", key, sizeof(key));
                fake_field(line, "value", val, sizeof(val));
                f->puts++;
                if ((int)strlen(val) > f->longest_value)
                    f->longest_value = (int)strlen(val);
                if ((int)strlen(key) > f->longest_key)
                    f->longest_key = (int)strlen(key);
                if (strlen(key) >= FAKE_KEYLEN || f->nkv == 4096) {
                    fake_reply(f, f->nkv == 4096 ? "cmd=put_result rc=-1 msg=table_full\n"
                                                 : "cmd=put_result rc=-1 msg=key_too_long\n");
                    continue;
                }
                /* like hydra: a long value is silently cut */
                copy_cut(f->keys[f->nkv], FAKE_KEYLEN, key);
                copy_cut(f->vals[f->nkv], FAKE_VALLEN, val);
                f->nkv++;
                fake_reply(f, "cmd=put_result rc=0 msg=success\n");
            } else if (strstr(line, " cmd=get ") != NULL) {
                fake_field(line, "key", key, sizeof(key));
                const char *v = NULL;
                if (strcmp(key, "PMI_process_mapping") == 0)
                    v = f->mapping;
                for (int i = f->nkv - 1; i >= 0 && v == NULL; i--)
                    if (strcmp(f->keys[i], key) == 0)
                        v = f->vals[i];
                if (v != NULL)
                    snprintf(out, sizeof(out), "cmd=get_result rc=0 msg=success value=%s\n", v);
                else
                    snprintf(out, sizeof(out),
                             "cmd=get_result rc=-1 msg=key_%s_not_found value=unknown\n", key);
                fake_reply(f, out);
            } else if (strstr(line, " cmd=barrier_in") != NULL) {
                if (!f->hang_barrier)
                    fake_reply(f, "cmd=barrier_out\n");
            } else if (strstr(line, " cmd=finalize") != NULL) {
                fake_reply(f, "cmd=finalize_ack\n");
            } else {
                fake_reply(f, "cmd=unknown rc=-1\n");
            }
        }
    }
}

static void fake_start(fake_t *f, int rank, int size)
{
    clean_env();
    int sv[2];
    FY_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    f->fd = sv[1];
    char v[16];
    snprintf(v, sizeof(v), "%d", sv[0]);
    setenv("PMI_FD", v, 1);
    snprintf(v, sizeof(v), "%d", rank);
    setenv("PMI_RANK", v, 1);
    snprintf(v, sizeof(v), "%d", size);
    setenv("PMI_SIZE", v, 1);
    FY_ASSERT(pthread_create(&f->thread, NULL, fake_main, f) == 0);
}

static fake_t the_fake;

static void pmi1_split_values(void)
{
    fake_t *f = &the_fake;
    f->mapping = "(vector,(0,1,1))";
    fake_start(f, 0, 1);
    fy_boot_t *b;
    char msg[4096];
    FY_ASSERT_OK(init_capture(&b, msg, sizeof(msg)));
    FY_ASSERT_STR_EQ(fy_boot_info(b)->backend, "pmi1");
    FY_ASSERT_EQ(fy_boot_value_limit(b), FAKE_VALLEN - 1);
    unsigned char v[1000], w[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (unsigned char)(i * 29 + 3);
    /* every size from 0 to 200 (all chunk boundaries), then a big one */
    char key[64];
    for (int n = 0; n <= 200; n++) {
        snprintf(key, sizeof(key), "v%d", n);
        FY_ASSERT_OK(fy_boot_put(b, key, v, (size_t)n));
    }
    FY_ASSERT_OK(fy_boot_put(b, "big", v, sizeof(v)));
    const char *longkey = "k123456789.123456789-123456789_123456789.123456789.123456789.12";
    FY_ASSERT_OK(fy_boot_put(b, longkey, v, 100));
    int puts_before_fence = f->puts;
    FY_ASSERT_OK(fy_boot_fence(b));
    for (int n = 0; n <= 200; n++) {
        snprintf(key, sizeof(key), "v%d", n);
        size_t len = sizeof(w);
        FY_ASSERT_OK(fy_boot_get(b, 0, key, w, &len));
        FY_ASSERT_EQ(len, n);
        FY_ASSERT_MEM_EQ(v, w, (size_t)n);
    }
    size_t len = sizeof(w);
    FY_ASSERT_OK(fy_boot_get(b, 0, "big", w, &len));
    FY_ASSERT_EQ(len, sizeof(v));
    FY_ASSERT_MEM_EQ(v, w, sizeof(v));
    len = sizeof(w);
    FY_ASSERT_OK(fy_boot_get(b, 0, longkey, w, &len));
    FY_ASSERT_EQ(len, 100);
    FY_ASSERT_MEM_EQ(v, w, 100);
    len = 999;
    FY_ASSERT_STATUS(fy_boot_get(b, 0, "big", w, &len), FERRY_ERR_TRUNCATED);
    FY_ASSERT_EQ(len, 1000);
    len = sizeof(w);
    FY_ASSERT_STATUS(fy_boot_get(b, 0, "v201", w, &len), FERRY_ERR_NO_ELEM);
    /* the server never saw a value or key over its limits, and "big" took many keys */
    FY_ASSERT_LE(f->longest_value, FAKE_VALLEN - 1);
    FY_ASSERT_LE(f->longest_key, FAKE_KEYLEN - 1);
    FY_ASSERT_GE(puts_before_fence, 201 + 1334 / 63 + 2);
    fy_boot_finalize(b);
}

/* Local rank and size of PMI_RANK=rank of size, from the fake's map (and environment). */
static void check_local(const char *mapping, int rank, int size, int lrank, int lsize)
{
    fake_t *f = &the_fake;
    f->mapping = mapping;
    fake_start(f, rank, size);
    fy_boot_t *b;
    char msg[4096];
    FY_ASSERT_MSG(init_capture(&b, msg, sizeof(msg)) == FERRY_OK, "init: %s", msg);
    FY_ASSERT_EQ(fy_boot_info(b)->local_rank, lrank);
    FY_ASSERT_EQ(fy_boot_info(b)->local_size, lsize);
    fy_boot_finalize(b);
}

/* ranks 0,1 on node 0; 2,3 on node 1 */
static void pmi1_local_ranks_block(void)
{
    check_local("(vector,(0,2,2))", 3, 4, 1, 2);
}

/* round robin over 2 nodes, repeated: 5 ranks, 0 2 4 | 1 3 */
static void pmi1_local_ranks_cyclic(void)
{
    check_local("(vector,(0,2,1))", 4, 5, 2, 3);
}

/* hydra's own variables win over the map */
static void pmi1_local_ranks_env(void)
{
    setenv("MPI_LOCALRANKID", "0", 1);
    setenv("MPI_LOCALNRANKS", "1", 1);
    the_fake.mapping = "(vector,(0,2,1))";
    fake_start(&the_fake, 4, 5); /* cleans the environment: set the variables again */
    setenv("MPI_LOCALRANKID", "0", 1);
    setenv("MPI_LOCALNRANKS", "1", 1);
    fy_boot_t *b;
    char msg[4096];
    FY_ASSERT_MSG(init_capture(&b, msg, sizeof(msg)) == FERRY_OK, "init: %s", msg);
    FY_ASSERT_EQ(fy_boot_info(b)->local_rank, 0);
    FY_ASSERT_EQ(fy_boot_info(b)->local_size, 1);
    fy_boot_finalize(b);
}

/* A second init in the process (a world created again) reuses the one PMI-1 connection. */
static void pmi1_init_twice(void)
{
    the_fake.mapping = "(vector,(0,1,1))";
    fake_start(&the_fake, 0, 1);
    fy_boot_t *b, *c;
    char msg[4096];
    FY_ASSERT_OK(init_capture(&b, msg, sizeof(msg)));
    int x = 5;
    FY_ASSERT_OK(fy_boot_put(b, "x", &x, sizeof(x)));
    FY_ASSERT_OK(fy_boot_fence(b));
    fy_boot_finalize(b);
    FY_ASSERT_OK(init_capture(&c, msg, sizeof(msg)));
    FY_ASSERT_STR_EQ(fy_boot_info(c)->backend, "pmi1");
    x = 6;
    FY_ASSERT_OK(fy_boot_put(c, "x", &x, sizeof(x)));
    FY_ASSERT_OK(fy_boot_fence(c));
    size_t len = sizeof(x);
    FY_ASSERT_OK(fy_boot_get(c, 0, "x", &x, &len));
    FY_ASSERT_EQ(x, 6);
    fy_boot_finalize(c);
}

static void pmi1_fence_timeout(void)
{
    fake_t *f = &the_fake;
    f->mapping = "(vector,(0,1,2))";
    f->hang_barrier = 1;
    fake_start(f, 0, 2);
    setenv("FERRY_BOOT_TIMEOUT", "300ms", 1);
    fy_boot_t *b;
    char msg[4096];
    FY_ASSERT_OK(init_capture(&b, msg, sizeof(msg)));
    int p[2];
    FY_ASSERT(pipe(p) == 0);
    int saved = dup(2);
    dup2(p[1], 2);
    ferry_status_t st = fy_boot_fence(b);
    ferry_status_t st2 = fy_boot_fence(b);
    dup2(saved, 2);
    close(p[1]);
    ssize_t k = read(p[0], msg, sizeof(msg) - 1);
    msg[k > 0 ? k : 0] = '\0';
    FY_ASSERT_STATUS(st, FERRY_ERR_TIMED_OUT);
    FY_ASSERT_STATUS(st2, FERRY_ERR_BOOTSTRAP); /* out of step: refused, no second hang */
    FY_ASSERT_MSG(strstr(msg, "bootstrap fence timed out after 0.3 s (FERRY_BOOT_TIMEOUT)") != NULL,
                  "message: %s", msg);
    fy_boot_finalize(b);
}

static void pmi1_server_goes_away(void)
{
    fake_t *f = &the_fake;
    f->close_after_init = 1;
    fake_start(f, 0, 1);
    setenv("MPI_LOCALRANKID", "0", 1);
    setenv("MPI_LOCALNRANKS", "1", 1);
    fy_boot_t *b;
    char msg[4096];
    FY_ASSERT_OK(init_capture(&b, msg, sizeof(msg)));
    pthread_join(f->thread, NULL);
    int p[2];
    FY_ASSERT(pipe(p) == 0);
    int saved = dup(2);
    dup2(p[1], 2);
    size_t len = 8;
    ferry_status_t st = fy_boot_get(b, 0, "x", msg, &len);
    dup2(saved, 2);
    close(p[1]);
    ssize_t k = read(p[0], msg, sizeof(msg) - 1);
    msg[k > 0 ? k : 0] = '\0';
    FY_ASSERT_STATUS(st, FERRY_ERR_BOOTSTRAP);
    FY_ASSERT_MSG(strstr(msg, "the PMI-1 server closed PMI_FD") != NULL, "message: %s", msg);
    fy_boot_finalize(b);
}

/* A context's job key (tcp, ofi, the listener) under a PMI-1 launcher: its kvs name's, asked
 * over the connection the bootstrap then keeps (one init); a context made with the launcher
 * gone, or told FERRY_BOOT=singleton, gets the unlaunched default and no error. */

static void pmi1_job_key(void)
{
    fake_t *f = &the_fake;
    f->kvs = "kvs_4242_0";
    f->mapping = "(vector,(0,1,1))";
    fake_start(f, 0, 1);
    setenv("FERRY_TLS", "self", 1);
    uint64_t k = fytest_context_job_key();
    FY_ASSERT(k != FY_JOB_KEY_DEFAULT);
    FY_ASSERT_U64_EQ(fytest_context_job_key(), k);
    fy_boot_t *b;
    char msg[4096];
    FY_ASSERT_OK(init_capture(&b, msg, sizeof(msg)));
    FY_ASSERT_STR_EQ(fy_boot_info(b)->backend, "pmi1");
    FY_ASSERT_OK(fy_boot_barrier(b));
    fy_boot_finalize(b);
    FY_ASSERT_EQ(f->inits, 1); /* the contexts and the bootstrap shared one connection */
    /* the name is what counts: FERRY_JOB_KEY=pmi1:<name> is the same key, another name not */
    setenv("FERRY_JOB_KEY", "pmi1:kvs_4242_0", 1);
    FY_ASSERT_U64_EQ(fytest_context_job_key(), k);
    setenv("FERRY_JOB_KEY", "pmi1:kvs_4243_0", 1);
    FY_ASSERT(fytest_context_job_key() != k);
    unsetenv("FERRY_JOB_KEY");
    setenv("FERRY_BOOT", "singleton", 1);
    FY_ASSERT_U64_EQ(fytest_context_job_key(), FY_JOB_KEY_DEFAULT);
}

static void pmi1_job_key_no_server(void)
{
    clean_env();
    setenv("FERRY_TLS", "self", 1);
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "1", 1);
    setenv("PMI_FD", "987", 1); /* not open */
    FY_ASSERT_U64_EQ(fytest_context_job_key(), FY_JOB_KEY_DEFAULT);
    int sv[2];
    FY_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    close(sv[1]); /* a launcher gone before it answered */
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", sv[0]);
    setenv("PMI_FD", fd, 1);
    FY_ASSERT_U64_EQ(fytest_context_job_key(), FY_JOB_KEY_DEFAULT);
    close(sv[0]);
}

FYTEST_MAIN(FYTEST_CASE(builtin_rank_garbled), FYTEST_CASE(builtin_size_garbled),
            FYTEST_CASE(builtin_addr_garbled), FYTEST_CASE(forced_backend_missing_env),
            FYTEST_CASE(pmi1_env_garbled), FYTEST_CASE(singleton_backend),
            FYTEST_CASE(base64_round_trip), FYTEST_CASE(pmi1_split_values),
            FYTEST_CASE(pmi1_local_ranks_block), FYTEST_CASE(pmi1_local_ranks_cyclic),
            FYTEST_CASE(pmi1_local_ranks_env), FYTEST_CASE(pmi1_init_twice),
            FYTEST_CASE(pmi1_fence_timeout), FYTEST_CASE(pmi1_server_goes_away),
            FYTEST_CASE(pmi1_job_key), FYTEST_CASE(pmi1_job_key_no_server))
