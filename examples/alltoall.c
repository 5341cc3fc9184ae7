/*
 * alltoall.c - every rank sends active messages to every rank (itself included) and checks
 * what it receives: a test of the whole stack that runs unchanged under any launcher.
 *
 *   ferryrun -n 4 ./alltoall
 *   mpiexec.hydra -np 3 ./alltoall
 *   mpirun --oversubscribe -np 4 ./alltoall
 *   ./alltoall                       (a singleton: it talks to itself)
 *   ferryrun -n 64 ./alltoall --join-only   (join the world, one barrier, leave: what
 *                                            bench/launch.sh times)
 *
 * Each message carries a header (sender, receiver, sequence number, size) and a payload whose
 * every byte is a function of those four and its offset, in sizes from 0 B to 64 KiB.  A
 * receiver checks the header, every payload byte, and at the end that it got exactly one
 * message of each sequence number from each rank.  Then each rank reports its verdict to rank
 * 0, which prints one line.  The exit status is 0 only if everything checked out (on rank 0:
 * everywhere).  Only the public API (ferry.h) is used.
 */
#include <ferry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AM_DATA      7
#define AM_VERDICT   8
#define WAIT_LIMIT_S 60.0

static const size_t sizes[] = {0, 1, 8, 100, 1000, 4096, 65536};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

typedef struct msg_hdr {
    uint32_t src, dst, seq, size;
} msg_hdr_t;

typedef struct verdict {
    uint32_t rank, received, errors;
} verdict_t;

typedef struct state {
    int rank, size;
    unsigned *got; /* [src * NSIZES + seq]: how many arrived */
    unsigned received, errors;
    unsigned verdicts, verdict_errors, verdict_ranks_bad;
} state_t;

static uint8_t pattern(uint32_t src, uint32_t dst, uint32_t seq, size_t i)
{
    return (uint8_t)(src * 131u + dst * 31u + seq * 7u + (uint32_t)i * 3u + (uint32_t)(i >> 8));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static ferry_status_t on_data(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_ep_t *reply_ep)
{
    state_t *s = arg;
    msg_hdr_t h;
    s->received++;
    if (header_len != sizeof(h)) {
        fprintf(stderr, "rank %d: a message with a %zu-byte header\n", s->rank, header_len);
        s->errors++;
        return FERRY_OK;
    }
    memcpy(&h, header, sizeof(h));
    if (h.dst != (uint32_t)s->rank || h.src >= (uint32_t)s->size || h.seq >= NSIZES ||
        h.size != sizes[h.seq] || data_len != h.size) {
        fprintf(stderr, "rank %d: bad header: src %u dst %u seq %u size %u, %zu bytes of data\n",
                s->rank, h.src, h.dst, h.seq, h.size, data_len);
        s->errors++;
        return FERRY_OK;
    }
    const uint8_t *p = data;
    for (size_t i = 0; i < data_len; i++) {
        if (p[i] != pattern(h.src, h.dst, h.seq, i)) {
            fprintf(stderr,
                    "rank %d: from rank %u, message %u (%u B): byte %zu is 0x%02x, "
                    "expected 0x%02x\n",
                    s->rank, h.src, h.seq, h.size, i, p[i], pattern(h.src, h.dst, h.seq, i));
            s->errors++;
            return FERRY_OK;
        }
    }
    s->got[h.src * NSIZES + h.seq]++;
    return FERRY_OK;
}

static ferry_status_t on_verdict(void *arg, const void *header, size_t header_len, const void *data,
                                 size_t data_len, ferry_ep_t *reply_ep)
{
    state_t *s = arg;
    verdict_t v;
    s->verdicts++;
    if (header_len != sizeof(v)) {
        s->verdict_ranks_bad++;
        return FERRY_OK;
    }
    memcpy(&v, header, sizeof(v));
    if (v.errors != 0 || v.received != (uint32_t)s->size * NSIZES) {
        fprintf(stderr, "rank %u reports %u errors, %u messages received\n", v.rank, v.errors,
                v.received);
        s->verdict_ranks_bad++;
        s->verdict_errors += v.errors;
    }
    return FERRY_OK;
}

/* Send, progressing while the transport pushes back. */
static ferry_status_t send_am(ferry_worker_t *worker, ferry_ep_t *ep, unsigned id, const void *hdr,
                              size_t hlen, const void *data, size_t len)
{
    for (;;) {
        ferry_status_t st = ferry_am_send(ep, id, hdr, hlen, data, len, NULL);
        if (st == FERRY_OK || st == FERRY_INPROGRESS)
            return FERRY_OK;
        if (st != FERRY_ERR_NO_RESOURCE)
            return st;
        ferry_worker_wait(worker, 1);
    }
}

/* Progress until *counter reaches target or the time limit passes. */
static int wait_for(ferry_worker_t *worker, const unsigned *counter, unsigned target)
{
    double limit = now_s() + WAIT_LIMIT_S;
    while (*counter < target) {
        if (now_s() > limit)
            return -1;
        ferry_worker_wait(worker, 100);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int join_only = argc > 1 && strcmp(argv[1], "--join-only") == 0;
    ferry_context_t *ctx = NULL;
    ferry_worker_t *worker = NULL;
    ferry_world_t *world = NULL;
    uint8_t *buf = NULL;
    state_t s;
    memset(&s, 0, sizeof(s));
    int ok = 0;

    ferry_context_params_t cp = {.field_mask =
                                     FERRY_CONTEXT_FIELD_FEATURES | FERRY_CONTEXT_FIELD_NAME,
                                 .features = FERRY_FEATURE_AM,
                                 .name = "alltoall"};
    ferry_status_t st = ferry_context_create(&cp, &ctx);
    if (st == FERRY_OK)
        st = ferry_worker_create(ctx, NULL, &worker);
    if (st == FERRY_OK)
        st = ferry_world_create(worker, &world);
    if (st != FERRY_OK) {
        fprintf(stderr, "alltoall: setup failed: %s\n", ferry_status_string(st));
        goto out;
    }
    s.rank = ferry_world_rank(world);
    s.size = ferry_world_size(world);
    s.got = calloc((size_t)s.size * NSIZES, sizeof(*s.got));
    buf = malloc(sizes[NSIZES - 1]);
    if (s.got == NULL || buf == NULL) {
        fprintf(stderr, "alltoall: out of memory\n");
        goto out;
    }
    ferry_worker_set_am_handler(worker, AM_DATA, on_data, &s);
    ferry_worker_set_am_handler(worker, AM_VERDICT, on_verdict, &s);
    /* nobody sends before every handler is in place */
    st = ferry_world_barrier(world);
    if (st != FERRY_OK) {
        fprintf(stderr, "rank %d: barrier failed: %s\n", s.rank, ferry_status_string(st));
        goto out;
    }

    if (join_only) {
        if (s.rank == 0)
            printf("alltoall: %d rank%s (%s) joined\n", s.size, s.size == 1 ? "" : "s",
                   ferry_world_backend(world));
        ok = 1;
        goto out;
    }

    /* start with the next rank, so that not everyone hits rank 0 first */
    for (int i = 0; i < s.size && st == FERRY_OK; i++) {
        int dst = (s.rank + 1 + i) % s.size;
        ferry_ep_t *ep;
        st = ferry_world_ep(world, dst, &ep);
        for (uint32_t seq = 0; seq < NSIZES && st == FERRY_OK; seq++) {
            msg_hdr_t h = {(uint32_t)s.rank, (uint32_t)dst, seq, (uint32_t)sizes[seq]};
            for (size_t b = 0; b < sizes[seq]; b++)
                buf[b] = pattern(h.src, h.dst, seq, b);
            st = send_am(worker, ep, AM_DATA, &h, sizeof(h), buf, sizes[seq]);
        }
        if (st != FERRY_OK)
            fprintf(stderr, "rank %d: sending to rank %d failed: %s\n", s.rank, dst,
                    ferry_status_string(st));
    }
    if (st != FERRY_OK)
        goto out;
    unsigned expected = (unsigned)s.size * NSIZES;
    if (wait_for(worker, &s.received, expected) != 0) {
        fprintf(stderr, "rank %d: %u of %u messages arrived within %.0f s\n", s.rank, s.received,
                expected, WAIT_LIMIT_S);
        s.errors++;
    }
    for (int src = 0; src < s.size; src++)
        for (unsigned seq = 0; seq < NSIZES; seq++)
            if (s.got[src * NSIZES + seq] != 1) {
                fprintf(stderr, "rank %d: message %u (%zu B) from rank %d arrived %u times\n",
                        s.rank, seq, sizes[seq], src, s.got[src * NSIZES + seq]);
                s.errors++;
            }

    /* verdicts to rank 0 */
    if (s.rank != 0) {
        verdict_t v = {(uint32_t)s.rank, s.received, s.errors};
        ferry_ep_t *ep;
        st = ferry_world_ep(world, 0, &ep);
        if (st == FERRY_OK)
            st = send_am(worker, ep, AM_VERDICT, &v, sizeof(v), NULL, 0);
        if (st != FERRY_OK)
            fprintf(stderr, "rank %d: cannot report to rank 0: %s\n", s.rank,
                    ferry_status_string(st));
    } else if (wait_for(worker, &s.verdicts, (unsigned)s.size - 1) != 0) {
        fprintf(stderr, "rank 0: %u of %d ranks reported within %.0f s\n", s.verdicts, s.size - 1,
                WAIT_LIMIT_S);
        s.verdict_ranks_bad += (unsigned)s.size - 1 - s.verdicts;
    }
    /* nobody leaves while another still needs it */
    ferry_status_t bst = ferry_world_barrier(world);
    if (bst != FERRY_OK) {
        fprintf(stderr, "rank %d: final barrier failed: %s\n", s.rank, ferry_status_string(bst));
        s.errors++;
    }
    ok = st == FERRY_OK && s.errors == 0 && (s.rank != 0 || s.verdict_ranks_bad == 0);
    if (s.rank == 0)
        printf("alltoall: %d rank%s (%s): %u messages of %zu sizes (0..%zu B) per rank: %s\n",
               s.size, s.size == 1 ? "" : "s", ferry_world_backend(world), expected, NSIZES,
               sizes[NSIZES - 1], ok ? "all verified" : "FAILED");
out:
    free(buf);
    free(s.got);
    ferry_world_destroy(world);
    ferry_worker_destroy(worker);
    ferry_context_destroy(ctx);
    return ok ? 0 : 1;
}
