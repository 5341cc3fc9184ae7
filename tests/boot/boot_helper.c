/*
 * boot_helper.c - the program the bootstrap tests start as ranks (under ferryrun, hydra or
 * mpirun): one mode per behaviour a test needs, chosen by argv[1].  It talks to the launcher
 * only through boot/boot.h.
 *
 *   kv [--expect-backend B] [--expect-size N] [--big BYTES]
 *           put/fence/get of binary blobs (0 B, small, every byte value, BYTES large), keys
 *           missing, buffers too small, several fences, overwrites; prints "kv ok" per rank
 *   print LINES     every rank prints LINES lines "rank R line I <filler>", flushing each
 *   env NAME        print "env NAME=<value>" (or "env NAME unset")
 *   fail RANK HOW   all ranks print "pid R P" and meet in a barrier; then rank RANK ends
 *                   (HOW: exit:CODE, segv, kill) and the others wait forever (pause), so
 *                   only ferryrun can end them; RANK also starts a grandchild that pauses
 *                   and prints "grandchild P"
 *   hang            print "ready R" and wait forever
 *   fencehang RANK [exit]
 *                   RANK prints "ready" and never fences (with "exit": it exits 0 at once,
 *                   without finalizing); the others fence, which must fail: they print
 *                   "fence status <name>" and exit 3
 *   init            fy_boot_init only: prints the status name and exits 0 if OK, 4 if not
 *   jobkey          a context's job key (tcp, ofi, the listener) before the bootstrap is
 *                   opened: every rank's is the same, and not the unlaunched default; prints
 *                   "jobkey ok rank R of N (backend)"
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/boot.h"
#include "proto/proto.h"
#include "proto/proto_int.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "boot_helper rank %d: check failed at line %d: %s: ", my_rank,         \
                    __LINE__, #cond);                                                              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CHECK_OK(st) CHECK((st) == FERRY_OK, "%s", ferry_status_string(st))

static int my_rank = -1;

static fy_boot_t *boot_or_die(void)
{
    fy_boot_t *b;
    ferry_status_t st = fy_boot_init(&b);
    if (st != FERRY_OK) {
        fprintf(stderr, "boot_helper: fy_boot_init: %s\n", ferry_status_string(st));
        exit(4);
    }
    my_rank = fy_boot_info(b)->rank;
    return b;
}

static unsigned char blob_byte(int rank, const char *key, size_t i)
{
    return (unsigned char)(rank * 37 + (unsigned char)key[0] * 11 + i * 13 + (i >> 9));
}

static void fill_blob(unsigned char *p, size_t n, int rank, const char *key)
{
    for (size_t i = 0; i < n; i++)
        p[i] = blob_byte(rank, key, i);
}

static void check_blob(fy_boot_t *b, int rank, const char *key, size_t n)
{
    unsigned char *buf = malloc(n + 16);
    CHECK(buf != NULL, "malloc");
    size_t len = n + 16;
    ferry_status_t st = fy_boot_get(b, rank, key, buf, &len);
    CHECK(st == FERRY_OK, "get rank %d %s: %s", rank, key, ferry_status_string(st));
    CHECK(len == n, "get rank %d %s: %zu bytes, expected %zu", rank, key, len, n);
    for (size_t i = 0; i < n; i++)
        CHECK(buf[i] == blob_byte(rank, key, i), "rank %d %s byte %zu: 0x%02x, expected 0x%02x",
              rank, key, i, buf[i], blob_byte(rank, key, i));
    free(buf);
}

static int mode_kv(int argc, char **argv)
{
    const char *expect_backend = NULL;
    long expect_size = -1;
    size_t big = 5000;
    for (int i = 0; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--expect-backend") == 0)
            expect_backend = argv[i + 1];
        else if (strcmp(argv[i], "--expect-size") == 0)
            expect_size = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--big") == 0)
            big = (size_t)atol(argv[i + 1]);
    }
    fy_boot_t *b = boot_or_die();
    const fy_boot_info_t *info = fy_boot_info(b);
    if (expect_backend != NULL)
        CHECK(strcmp(info->backend, expect_backend) == 0, "backend %s, expected %s", info->backend,
              expect_backend);
    if (expect_size >= 0)
        CHECK(info->size == expect_size, "size %d, expected %ld", info->size, expect_size);
    CHECK(info->rank >= 0 && info->rank < info->size, "rank %d size %d", info->rank, info->size);
    CHECK(info->local_rank >= 0 && info->local_rank < info->local_size &&
              info->local_size <= info->size,
          "local %d of %d", info->local_rank, info->local_size);
    CHECK(info->host[0] != '\0', "no host name");
    int r = info->rank, n = info->size;

    /* a value over the launcher's per-key limit must be split and come back whole */
    size_t limit = fy_boot_value_limit(b);
    if (limit > 0)
        CHECK(big > limit, "--big %zu is not over the launcher's value limit %zu", big, limit);
    unsigned char *v = malloc(big);
    CHECK(v != NULL, "malloc");
    fill_blob(v, big, r, "big");
    CHECK_OK(fy_boot_put(b, "big", v, big));
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)(i + r);
    CHECK_OK(fy_boot_put(b, "bytes", all, sizeof(all)));
    CHECK_OK(fy_boot_put(b, "empty", NULL, 0));
    fill_blob(v, 17, r, "small");
    CHECK_OK(fy_boot_put(b, "small", v, 17));
    /* a key of the maximum length (63) */
    const char *longkey = "k123456789.123456789-123456789_123456789.123456789.123456789.12";
    CHECK(strlen(longkey) == 63, "long key length %zu", strlen(longkey));
    CHECK_OK(fy_boot_put(b, longkey, &r, sizeof(r)));
    CHECK(fy_boot_put(b, "bad key", &r, sizeof(r)) == FERRY_ERR_INVALID_PARAM, "bad key taken");
    CHECK_OK(fy_boot_fence(b));

    for (int p = 0; p < n; p++) {
        int q = (r + p) % n;
        check_blob(b, q, "big", big);
        check_blob(b, q, "small", 17);
        unsigned char got[300];
        size_t len = sizeof(got);
        CHECK_OK(fy_boot_get(b, q, "bytes", got, &len));
        CHECK(len == 256, "bytes: %zu", len);
        for (int i = 0; i < 256; i++)
            CHECK(got[i] == (unsigned char)(i + q), "bytes[%d] of rank %d", i, q);
        len = sizeof(got);
        CHECK_OK(fy_boot_get(b, q, "empty", got, &len));
        CHECK(len == 0, "empty: %zu bytes", len);
        int x = -1;
        len = sizeof(x);
        CHECK_OK(fy_boot_get(b, q, longkey, &x, &len));
        CHECK(len == sizeof(x) && x == q, "long key of rank %d: %d", q, x);
        /* too small a buffer: TRUNCATED and the size needed */
        len = 10;
        CHECK(fy_boot_get(b, q, "big", got, &len) == FERRY_ERR_TRUNCATED && len == big,
              "truncated get: len %zu", len);
        len = sizeof(got);
        ferry_status_t st = fy_boot_get(b, q, "never-put", got, &len);
        CHECK(st == FERRY_ERR_NO_ELEM, "missing key: %s", ferry_status_string(st));
    }
    CHECK(fy_boot_get(b, n, "small", v, &big) == FERRY_ERR_INVALID_PARAM, "rank out of range");

    /* a second round: new keys after more fences, and barriers */
    CHECK_OK(fy_boot_barrier(b));
    char key[32];
    snprintf(key, sizeof(key), "round2");
    int val = 1000 + r;
    CHECK_OK(fy_boot_put(b, key, &val, sizeof(val)));
    CHECK_OK(fy_boot_fence(b));
    for (int q = 0; q < n; q++) {
        int x;
        size_t len = sizeof(x);
        CHECK_OK(fy_boot_get(b, q, key, &x, &len));
        CHECK(x == 1000 + q, "round2 of rank %d: %d", q, x);
    }
    CHECK_OK(fy_boot_barrier(b));
    printf("kv ok rank %d of %d (%s, local %d of %d, value limit %zu, big %zu)\n", r, n,
           info->backend, info->local_rank, info->local_size, limit, big);
    fflush(stdout);
    free(v);
    fy_boot_finalize(b);
    return 0;
}

static int mode_print(int argc, char **argv)
{
    int lines = argc > 0 ? atoi(argv[0]) : 10;
    const char *r = getenv("FERRY_RANK");
    char filler[200];
    memset(filler, 'x', sizeof(filler) - 1);
    filler[sizeof(filler) - 1] = '\0';
    for (int i = 0; i < lines; i++) {
        /* two writes per line: a launcher that forwards bytes as they come would mix ranks */
        printf("rank %s line %d ", r ? r : "?", i);
        fflush(stdout);
        printf("%s\n", filler + (i % 100));
        fflush(stdout);
    }
    fprintf(stderr, "rank %s done\n", r ? r : "?");
    return 0;
}

static int mode_fail(int argc, char **argv)
{
    CHECK(argc >= 2, "fail RANK HOW");
    int victim = atoi(argv[0]);
    const char *how = argv[1];
    fy_boot_t *b = boot_or_die();
    if (my_rank == victim) {
        /* a grandchild in the victim's process group; it tells its pid when it runs */
        int p[2];
        CHECK(pipe(p) == 0, "pipe");
        pid_t g = fork();
        if (g == 0) {
            int me = (int)getpid();
            ssize_t w = write(p[1], &me, sizeof(me));
            (void)w;
            for (;;)
                pause();
        }
        int gpid = 0;
        CHECK(read(p[0], &gpid, sizeof(gpid)) == (ssize_t)sizeof(gpid), "grandchild pid");
        printf("grandchild %d\n", gpid);
        close(p[0]);
        close(p[1]);
    }
    printf("pid %d %d\n", my_rank, (int)getpid());
    fflush(stdout);
    CHECK_OK(fy_boot_barrier(b));
    if (my_rank != victim) {
        for (;;)
            pause();
    }
    if (strncmp(how, "exit:", 5) == 0)
        _exit(atoi(how + 5));
    int sig = strcmp(how, "segv") == 0 ? SIGSEGV : SIGKILL;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigaction(sig, &sa, NULL);
    kill(getpid(), sig);
    return 99;
}

static int mode_fencehang(int argc, char **argv)
{
    CHECK(argc >= 1, "fencehang RANK");
    int stray = atoi(argv[0]);
    fy_boot_t *b = boot_or_die();
    int x = my_rank;
    CHECK_OK(fy_boot_put(b, "x", &x, sizeof(x)));
    if (my_rank == stray) {
        printf("ready\n");
        fflush(stdout);
        if (argc >= 2 && strcmp(argv[1], "exit") == 0)
            _exit(0);
        for (;;)
            pause();
    }
    ferry_status_t st = fy_boot_fence(b);
    printf("fence status %s\n", st == FERRY_ERR_TIMED_OUT ? "TIMED_OUT" : ferry_status_string(st));
    fflush(stdout);
    fy_boot_finalize(b);
    return 3;
}

static int mode_jobkey(void)
{
    ferry_context_t *ctx;
    setenv("FERRY_TLS", "self", 0);
    CHECK_OK(ferry_context_create(NULL, &ctx));
    uint64_t k = fy_context_job_key(ctx), other;
    ferry_context_destroy(ctx);
    fy_boot_t *b = boot_or_die();
    const fy_boot_info_t *i = fy_boot_info(b);
    CHECK(k != FY_JOB_KEY_DEFAULT, "the job key is the unlaunched default under %s", i->backend);
    CHECK_OK(fy_boot_put(b, "jobkey", &k, sizeof(k)));
    CHECK_OK(fy_boot_fence(b));
    for (int r = 0; r < i->size; r++) {
        size_t len = sizeof(other);
        CHECK_OK(fy_boot_get(b, r, "jobkey", &other, &len));
        CHECK(len == sizeof(other) && other == k, "rank %d's job key %016llx, mine %016llx", r,
              (unsigned long long)other, (unsigned long long)k);
    }
    printf("jobkey ok rank %d of %d (%s)\n", i->rank, i->size, i->backend);
    fy_boot_finalize(b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: boot_helper kv|print|env|fail|hang|fencehang|init|jobkey ...\n");
        return 2;
    }
    const char *mode = argv[1];
    if (strcmp(mode, "kv") == 0)
        return mode_kv(argc - 2, argv + 2);
    if (strcmp(mode, "print") == 0)
        return mode_print(argc - 2, argv + 2);
    if (strcmp(mode, "env") == 0 && argc > 2) {
        const char *v = getenv(argv[2]);
        printf(v ? "env %s=%s\n" : "env %s unset\n", argv[2], v ? v : "");
        return 0;
    }
    if (strcmp(mode, "fail") == 0)
        return mode_fail(argc - 2, argv + 2);
    if (strcmp(mode, "hang") == 0) {
        printf("ready %s\n", getenv("FERRY_RANK") ? getenv("FERRY_RANK") : "?");
        fflush(stdout);
        for (;;)
            pause();
    }
    if (strcmp(mode, "fencehang") == 0)
        return mode_fencehang(argc - 2, argv + 2);
    if (strcmp(mode, "jobkey") == 0)
        return mode_jobkey();
    if (strcmp(mode, "init") == 0) {
        fy_boot_t *b;
        ferry_status_t st = fy_boot_init(&b);
        printf("init %s\n", st == FERRY_OK ? "ok" : ferry_status_string(st));
        if (st == FERRY_OK)
            fy_boot_finalize(b);
        return st == FERRY_OK ? 0 : 4;
    }
    fprintf(stderr, "boot_helper: unknown mode %s\n", mode);
    return 2;
}
