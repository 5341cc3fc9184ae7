/*
 * world_check.c - the testbed's all-to-all of the three kinds of operation (test_hosts.sh
 * world): every rank sends every other rank an active message, a tagged message above the
 * rendezvous threshold and a put into its registered memory, gets the put back, and checks
 * every byte; then it checks the lane each endpoint got: shared memory to a rank of its own
 * host (the same network namespace, learnt by an allgather), the transport named in argv[1]
 * to a rank of another host.  Every rank connects to every other before progressing, so each
 * pair connects from both sides at once: that must end in one endpoint per peer (no reply
 * endpoint left over), and the endpoint a handler is given must be the application's.
 *
 *   ferryrun --hosts tbA:2,tbB:2 --agent tb-agent world_check tcp
 *
 * Every payload byte is a function of the sender, the receiver, the kind and the offset.  One
 * line per rank; exit status 0 only when every check held.
 */
#include <ferry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define AM_DATA  12
#define AM_LEN   100000
#define TAG_LEN  (300 * 1024) /* above every transport's rendezvous threshold */
#define RMA_SLOT (64 * 1024)
#define MAXR     16
#define BLOB     512
#define LIMIT_S  60.0

enum { KIND_AM = 1, KIND_TAG = 2, KIND_RMA = 3 };

static uint8_t pattern(int src, int dst, int kind, size_t i)
{
    return (uint8_t)(src * 61u + dst * 17u + (unsigned)kind * 5u + (unsigned)i * 7u +
                     (unsigned)(i >> 10));
}

static void fill(uint8_t *b, size_t n, int src, int dst, int kind)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(src, dst, kind, i);
}

static int same(const uint8_t *b, size_t n, int src, int dst, int kind)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(src, dst, kind, i))
            return 0;
    return 1;
}

typedef struct state {
    int rank;
    int am_got[MAXR];
    ferry_ep_t *am_ep[MAXR]; /* the endpoint the handler was given, per sender */
    int errors;
} state_t;

static ferry_status_t on_am(void *arg, const void *hdr, size_t hdr_len, const void *data,
                            size_t len, ferry_ep_t *ep)
{
    state_t *s = arg;
    int src = -1;
    if (hdr_len == sizeof(src))
        memcpy(&src, hdr, sizeof(src));
    if (src < 0 || src >= MAXR || len != AM_LEN || !same(data, len, src, s->rank, KIND_AM)) {
        fprintf(stderr, "world_check: rank %d: a bad active message (from %d, %zu bytes)\n",
                s->rank, src, len);
        s->errors++;
        return FERRY_OK;
    }
    s->am_got[src]++;
    s->am_ep[src] = ep;
    return FERRY_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_done(ferry_request_t *req, ferry_status_t st)
{
    (void)st;
    ++*(int *)req->user_data;
}

/* Progress until *count reaches n (or the time limit): 0, or -1 having said why. */
static int wait_for(ferry_worker_t *w, const int *count, int n, int rank, const char *what)
{
    double end = now_s() + LIMIT_S;
    while (*count < n) {
        if (now_s() > end) {
            fprintf(stderr, "world_check: rank %d: %s: %d of %d after %.0f s\n", rank, what, *count,
                    n, LIMIT_S);
            return -1;
        }
        ferry_worker_progress(w);
    }
    return 0;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ferry_status_t st_ = (call);                                                               \
        if (st_ != FERRY_OK && st_ != FERRY_INPROGRESS) {                                          \
            fprintf(stderr, "world_check: rank %d: %s: %s\n", s.rank, #call,                       \
                    ferry_status_string(st_));                                                     \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    const char *remote_tl = argc > 1 ? argv[1] : "tcp";
    state_t s = {.rank = -1};
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_world_t *world;
    CHECK(ferry_context_create(NULL, &ctx));
    CHECK(ferry_worker_create(ctx, NULL, &w));
    CHECK(ferry_worker_set_am_handler(w, AM_DATA, on_am, &s));
    CHECK(ferry_world_create(w, &world));
    s.rank = ferry_world_rank(world);
    int size = ferry_world_size(world), me = s.rank;
    if (size > MAXR)
        return 2;

    /* this rank's host (its network namespace), its memory and remote key, to everyone */
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                             .length = (size_t)size * RMA_SLOT,
                             .flags = FERRY_MEM_ALLOCATE};
    ferry_mem_t *mem;
    CHECK(ferry_mem_map(ctx, &mp, &mem));
    void *base;
    size_t base_len;
    CHECK(ferry_mem_query(mem, &base, &base_len));
    memset(base, 0, base_len);
    uint8_t blob[BLOB] = {0}, *all = calloc((size_t)size, BLOB);
    if (all == NULL)
        return 2;
    char ns[64] = "";
    ssize_t nl = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
    ns[nl > 0 ? nl : 0] = '\0';
    uint64_t addr = (uint64_t)(uintptr_t)base;
    uint32_t klen = BLOB - 64 - 8 - 4;
    size_t kl = klen;
    CHECK(ferry_rkey_pack(ctx, mem, blob + 76, &kl));
    klen = (uint32_t)kl;
    memcpy(blob, ns, 64);
    memcpy(blob + 64, &addr, 8);
    memcpy(blob + 72, &klen, 4);
    CHECK(ferry_world_allgather(world, blob, BLOB, all));

    ferry_ep_t *eps[MAXR] = {0};
    ferry_rkey_t *rkeys[MAXR] = {0};
    uint8_t *am_buf = malloc(AM_LEN), *tag_out[MAXR] = {0}, *tag_in[MAXR] = {0};
    uint8_t *put_buf[MAXR] = {0}, *get_buf[MAXR] = {0};
    ferry_request_t tag_rreq[MAXR], tag_sreq[MAXR], get_req[MAXR];
    int recvd = 0, sent = 0, got = 0, npeers = size - 1;
    for (int p = 0; p < size; p++) {
        if (p == me)
            continue;
        tag_in[p] = malloc(TAG_LEN);
        tag_rreq[p] = (ferry_request_t){.cb = on_done, .user_data = &recvd};
        if (tag_in[p] == NULL)
            return 2;
        ferry_status_t st = ferry_tag_recv(w, tag_in[p], TAG_LEN,
                                           ((uint64_t)p << 32) | (unsigned)me, ~0ull, &tag_rreq[p]);
        if (st == FERRY_OK)
            recvd++;
        else
            CHECK(st);
    }
    for (int p = 0; p < size; p++) {
        if (p == me)
            continue;
        CHECK(ferry_world_ep(world, p, &eps[p]));
        /* AM */
        fill(am_buf, AM_LEN, me, p, KIND_AM);
        CHECK(ferry_am_send(eps[p], AM_DATA, &me, sizeof(me), am_buf, AM_LEN, NULL));
        /* tag, with a request: the buffer stays until it completes */
        tag_out[p] = malloc(TAG_LEN);
        if (tag_out[p] == NULL)
            return 2;
        fill(tag_out[p], TAG_LEN, me, p, KIND_TAG);
        tag_sreq[p] = (ferry_request_t){.cb = on_done, .user_data = &sent};
        ferry_status_t st = ferry_tag_send(eps[p], ((uint64_t)me << 32) | (unsigned)p, tag_out[p],
                                           TAG_LEN, &tag_sreq[p]);
        if (st == FERRY_OK)
            sent++;
        else
            CHECK(st);
        /* RMA: a put into this rank's slot of p's memory */
        const uint8_t *pb = all + (size_t)p * BLOB;
        uint64_t paddr;
        uint32_t pklen;
        memcpy(&paddr, pb + 64, 8);
        memcpy(&pklen, pb + 72, 4);
        CHECK(ferry_rkey_unpack(eps[p], pb + 76, pklen, &rkeys[p]));
        put_buf[p] = malloc(RMA_SLOT);
        if (put_buf[p] == NULL)
            return 2;
        fill(put_buf[p], RMA_SLOT, me, p, KIND_RMA);
        CHECK(ferry_put(eps[p], put_buf[p], RMA_SLOT, paddr + (uint64_t)me * RMA_SLOT, rkeys[p],
                        NULL));
    }
    if (wait_for(w, &recvd, npeers, me, "tagged messages received") != 0 ||
        wait_for(w, &sent, npeers, me, "tagged messages sent") != 0)
        s.errors++;
    for (int p = 0; p < size; p++) {
        if (p == me)
            continue;
        if (tag_rreq[p].status != FERRY_OK || tag_rreq[p].length != TAG_LEN ||
            !same(tag_in[p], TAG_LEN, p, me, KIND_TAG)) {
            fprintf(stderr, "world_check: rank %d: the tagged message from %d is wrong (%s)\n", me,
                    p, ferry_status_string(tag_rreq[p].status));
            s.errors++;
        }
        CHECK(ferry_ep_flush(eps[p], NULL)); /* the put is in p's memory */
        /* and read back */
        const uint8_t *pb = all + (size_t)p * BLOB;
        uint64_t paddr;
        memcpy(&paddr, pb + 64, 8);
        get_buf[p] = calloc(1, RMA_SLOT);
        if (get_buf[p] == NULL)
            return 2;
        get_req[p] = (ferry_request_t){.cb = on_done, .user_data = &got};
        ferry_status_t st = ferry_get(eps[p], get_buf[p], RMA_SLOT, paddr + (uint64_t)me * RMA_SLOT,
                                      rkeys[p], &get_req[p]);
        if (st == FERRY_OK)
            got++;
        else
            CHECK(st);
    }
    if (wait_for(w, &got, npeers, me, "gets") != 0)
        s.errors++;
    for (int p = 0; p < size; p++) {
        if (p == me)
            continue;
        if (!same(get_buf[p], RMA_SLOT, me, p, KIND_RMA)) {
            fprintf(stderr, "world_check: rank %d: the put to %d did not read back\n", me, p);
            s.errors++;
        }
    }
    int am_total = 0;
    double end = now_s() + LIMIT_S;
    for (;;) {
        am_total = 0;
        for (int p = 0; p < size; p++)
            am_total += s.am_got[p];
        if (am_total >= npeers || now_s() > end)
            break;
        ferry_worker_progress(w);
    }
    CHECK(ferry_world_barrier(world)); /* every put of every rank is flushed */
    for (int p = 0; p < size; p++) {
        if (p == me)
            continue;
        if (s.am_got[p] != 1) {
            fprintf(stderr, "world_check: rank %d: %d active messages from %d\n", me, s.am_got[p],
                    p);
            s.errors++;
        } else if (s.am_ep[p] != eps[p]) {
            fprintf(stderr,
                    "world_check: rank %d: the handler got another endpoint for %d than "
                    "the application's\n",
                    me, p);
            s.errors++;
        }
        if (!same((uint8_t *)base + (size_t)p * RMA_SLOT, RMA_SLOT, p, me, KIND_RMA)) {
            fprintf(stderr, "world_check: rank %d: the put from %d is not in memory\n", me, p);
            s.errors++;
        }
        /* the lane: shm within a host, the named transport between hosts */
        int local = memcmp(all + (size_t)p * BLOB, ns, 64) == 0;
        const char *want = local ? "shm" : remote_tl;
        ferry_ep_attr_t a = {.field_mask = FERRY_EP_ATTR_FIELD_LANES};
        CHECK(ferry_ep_query(eps[p], &a));
        const char *tl = a.nlanes > 0 ? a.lanes[0].transport : "(none)";
        printf("world_check: rank %d -> %d (%s host): am lane %s\n", me, p,
               local ? "same" : "other", tl);
        if (strcmp(tl, want) != 0) {
            fprintf(stderr, "world_check: rank %d -> %d: am lane %s, expected %s\n", me, p, tl,
                    want);
            s.errors++;
        }
    }
    ferry_worker_attr_t wa = {.field_mask = FERRY_WORKER_ATTR_FIELD_COUNTERS};
    CHECK(ferry_worker_query(w, &wa));
    if (wa.neps != (unsigned)npeers) { /* simultaneous connects: one endpoint per peer */
        fprintf(stderr, "world_check: rank %d: %u endpoints open for %d peers\n", me, wa.neps,
                npeers);
        s.errors++;
    }
    if (s.errors == 0)
        printf("world_check: rank %d of %d: am, tag and rma to every rank checked; one endpoint "
               "per peer, the handler's\n",
               me, size);
    for (int p = 0; p < size; p++) {
        if (rkeys[p] != NULL)
            ferry_rkey_destroy(rkeys[p]);
        free(tag_in[p]);
        free(tag_out[p]);
        free(put_buf[p]);
        free(get_buf[p]);
    }
    free(am_buf);
    free(all);
    ferry_world_destroy(world);
    ferry_mem_unmap(ctx, mem);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    return s.errors != 0;
}
