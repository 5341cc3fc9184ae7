/*
 * test_lanes_info.c - `ferry_info --lanes PEER` end to end: a live worker here writes its
 * address to a file (raw, and hex as `ferry_info -a` prints it), the real ferry_info binary
 * explains the lanes it would use to it, and the output is checked: shared memory chosen for
 * a process of this host (its /dev/shm probe proved), per class a line with a score, the
 * candidates it passed over or rejected with the reason, the connection manager of each lane,
 * FERRY_TLS and FERRY_CM narrowing named, a worker
 * that is gone refused shared memory, and bad input a clear error with exit status 2.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fytest.h"

typedef struct peer {
    ferry_context_t *ctx;
    ferry_worker_t *w;
    char raw[64], hex[64];
} peer_t;

static void peer_open(peer_t *p)
{
    memset(p, 0, sizeof(*p));
    FY_ASSERT_OK(ferry_context_create(NULL, &p->ctx));
    FY_ASSERT_OK(ferry_worker_create(p->ctx, NULL, &p->w));
    size_t len = 0;
    FY_ASSERT_STATUS(ferry_worker_get_address(p->w, NULL, &len), FERRY_ERR_TRUNCATED);
    unsigned char *a = malloc(len);
    FY_ASSERT(a != NULL);
    FY_ASSERT_OK(ferry_worker_get_address(p->w, a, &len));
    snprintf(p->raw, sizeof(p->raw), "/tmp/ferry-lanes-raw-%d", (int)getpid());
    snprintf(p->hex, sizeof(p->hex), "/tmp/ferry-lanes-hex-%d", (int)getpid());
    FILE *f = fopen(p->raw, "wb");
    FY_ASSERT(f != NULL && fwrite(a, 1, len, f) == len);
    fclose(f);
    f = fopen(p->hex, "w");
    FY_ASSERT(f != NULL);
    fprintf(f, "address (%zu bytes): ", len);
    for (size_t i = 0; i < len; i++)
        fprintf(f, "%02x", a[i]);
    fprintf(f, "\n");
    fclose(f);
    free(a);
}

static void peer_close(peer_t *p)
{
    ferry_worker_destroy(p->w);
    ferry_context_destroy(p->ctx);
    p->w = NULL;
    p->ctx = NULL;
}

static void peer_unlink(peer_t *p)
{
    unlink(p->raw);
    unlink(p->hex);
}

/* Run ferry_info with env and args; its output (stdout + stderr) and exit status. */
static char *run(const char *env, const char *args, int *status)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "env %s %s %s 2>&1", env, FERRY_INFO_BIN, args);
    FILE *f = popen(cmd, "r");
    FY_ASSERT(f != NULL);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap + 1);
    FY_ASSERT(out != NULL);
    size_t got;
    while ((got = fread(out + n, 1, cap - n, f)) > 0)
        n += got;
    out[n] = '\0';
    int st = pclose(f);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static void expect(const char *out, const char *needle)
{
    FY_ASSERT_MSG(strstr(out, needle) != NULL, "no \"%s\" in:\n%s", needle, out);
}

static void shm_for_a_local_process(void)
{
    peer_t p;
    peer_open(&p);
    char args[128];
    int st;
    snprintf(args, sizeof(args), "--lanes %s", p.raw);
    char *out = run("FERRY_TLS=all", args, &st);
    FY_ASSERT_EQ(st, 0);
    expect(out, "lanes to worker ");
    static const char *const classes[] = {"am short", "am bulk", "tag eager",
                                          "tag rndv", "rma",     "atomics"};
    for (size_t k = 0; k < sizeof(classes) / sizeof(classes[0]); k++) {
        char line[64];
        snprintf(line, sizeof(line), "  %-9s shm memory->memory", classes[k]);
        expect(out, line);
    }
    expect(out, " score ");
    expect(out, " ns, cm direct"); /* the connection manager of each lane */
    expect(out, "rejected  self process->process        another process");
    /* network lanes on this host are passed over for their higher score */
    expect(out, "passed    ");
    free(out);
    /* the same address in hex */
    snprintf(args, sizeof(args), "--lanes %s", p.hex);
    out = run("FERRY_TLS=all", args, &st);
    FY_ASSERT_EQ(st, 0);
    expect(out, "  am short  shm memory->memory");
    free(out);
    peer_close(&p);
    peer_unlink(&p);
}

static void tls_narrowing_named(void)
{
    peer_t p;
    peer_open(&p);
    char args[128];
    int st;
    snprintf(args, sizeof(args), "--lanes %s", p.raw);
    char *out = run("FERRY_TLS=tcp", args, &st);
    FY_ASSERT_EQ(st, 0);
    expect(out, "  am short  tcp ");
    expect(out, "of self, shm, udp: not running here (FERRY_TLS or no device)");
    free(out);
    out = run("FERRY_TLS=^self,shm", args, &st);
    FY_ASSERT_EQ(st, 0);
    expect(out, "  am bulk   udp ");
    free(out);
    /* FERRY_CM narrowing named too: without direct, oob is the manager asked first */
    out = run("FERRY_TLS=tcp FERRY_CM=^direct", args, &st);
    FY_ASSERT_EQ(st, 0);
    expect(out, " ns, cm oob");
    free(out);
    peer_close(&p);
    peer_unlink(&p);
}

/* The worker is gone with its context: its /dev/shm probe with it, so no shared memory. */
static void gone_peer_refused_shm(void)
{
    peer_t p;
    peer_open(&p);
    peer_close(&p);
    char args[128];
    int st;
    snprintf(args, sizeof(args), "--lanes %s", p.raw);
    char *out = run("FERRY_TLS=shm,tcp", args, &st);
    FY_ASSERT_EQ(st, 0);
    expect(out, "rejected  shm memory->memory");
    expect(out, "no shared /dev/shm: its probe /dev/shm/ferry-probe-");
    expect(out, "  am short  tcp ");
    free(out);
    peer_unlink(&p);
}

static void bad_input(void)
{
    int st;
    char *out = run("", "--lanes 0011zz", &st);
    FY_ASSERT_EQ(st, 2);
    expect(out, "not a worker address");
    free(out);
    out = run("", "--lanes 4659574102", &st);
    FY_ASSERT_EQ(st, 2);
    expect(out, "malformed");
    free(out);
    out = run("", "--lanes", &st);
    FY_ASSERT_EQ(st, 2);
    expect(out, "needs a value");
    free(out);
}

FYTEST_MAIN(FYTEST_CASE(shm_for_a_local_process), FYTEST_CASE(tls_narrowing_named),
            FYTEST_CASE(gone_peer_refused_shm), FYTEST_CASE(bad_input))
