/*
 * inplace.c - large active messages from memory ferry allocates: over shared memory the
 * receiver's handler reads the data where the sender wrote it, and nothing is copied.
 *
 * Each rank sends its right neighbour ROUNDS messages of MSG_SIZE bytes, first from an
 * ordinary malloc'd buffer (the data is copied once into shared memory on the way), then from
 * a buffer of ferry_mem_map(FERRY_MEM_ALLOCATE) (the receiver maps it and reads it in place;
 * the send completes once the receiver's handler has returned, so the buffer is written again
 * only after that).  The handler sums every message's bytes; each rank checks the sums and
 * prints the time per message of both ways.
 *
 *   ferryrun -n 2 ./inplace
 *
 * Exit status 0 when every sum checked out.  Only ferry.h is used.
 */
#include <ferry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AM_DATA  22
#define MSG_SIZE (16u << 20)
#define ROUNDS   32

typedef struct rx {
    unsigned count;
    uint64_t sum[2]; /* per way (the header says which: a neighbour may be a way ahead) */
} rx_t;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Reads the message where it lies: in the sender's memory when it came from allocated memory,
 * in the transport's shared buffer otherwise.  Valid only during the call. */
static ferry_status_t on_data(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *reply_ep)
{
    (void)reply_ep;
    rx_t *rx = arg;
    if (header_len != 1)
        return FERRY_OK;
    const char *d = data; /* (no alignment is promised: read words with memcpy) */
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        uint64_t v;
        memcpy(&v, d + i, 8);
        s += v;
    }
    rx->sum[*(const uint8_t *)header & 1] += s;
    rx->count++;
    return FERRY_OK;
}

static void req_done(ferry_request_t *req, ferry_status_t status)
{
    (void)req, (void)status;
}

/* ROUNDS messages from buf to ep, each waited for; the seconds it took. */
static double send_rounds(ferry_worker_t *w, ferry_ep_t *ep, uint64_t *buf, uint8_t way, rx_t *rx,
                          unsigned expect, int *ok)
{
    double t0 = now_s();
    for (unsigned r = 0; r < ROUNDS; r++) {
        for (size_t i = 0; i < MSG_SIZE / 8; i += 512) /* what changes between messages */
            buf[i] = r;
        ferry_request_t req;
        memset(&req, 0, sizeof(req));
        req.cb = req_done;
        ferry_status_t st = ferry_am_send(ep, AM_DATA, &way, 1, buf, MSG_SIZE, &req);
        while (st == FERRY_INPROGRESS && req.status == FERRY_INPROGRESS)
            ferry_worker_progress(w); /* (the buffer is ours again once this ends) */
        if (st == FERRY_INPROGRESS)
            st = req.status;
        if (st != FERRY_OK) {
            fprintf(stderr, "send: %s\n", ferry_status_string(st));
            *ok = 0;
            return 0;
        }
    }
    while (rx->count < expect) /* the left neighbour's messages */
        ferry_worker_progress(w);
    return now_s() - t0;
}

int main(void)
{
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_world_t *world;
    if (ferry_context_create(NULL, &ctx) != FERRY_OK || ferry_worker_create(ctx, NULL, &w) ||
        ferry_world_create(w, &world) != FERRY_OK) {
        fprintf(stderr, "inplace: start ferry under ferryrun (ferryrun -n 2 ./inplace)\n");
        return 2;
    }
    int rank = ferry_world_rank(world), size = ferry_world_size(world);
    rx_t rx = {0, {0, 0}};
    ferry_worker_set_am_handler(w, AM_DATA, on_data, &rx);
    ferry_ep_t *right;
    ferry_world_ep(world, (rank + 1) % size, &right);

    uint64_t *heap = calloc(MSG_SIZE / 8, 8);
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                             .length = MSG_SIZE,
                             .flags = FERRY_MEM_ALLOCATE};
    ferry_mem_t *mem;
    void *shared = NULL;
    size_t len = 0;
    int ok = heap != NULL && ferry_mem_map(ctx, &mp, &mem) == FERRY_OK &&
             ferry_mem_query(mem, &shared, &len) == FERRY_OK;
    if (!ok) {
        fprintf(stderr, "inplace: no memory for two %u-byte buffers\n", MSG_SIZE);
        return 1;
    }
    for (size_t i = 0; i < MSG_SIZE / 8; i++)
        heap[i] = ((uint64_t *)shared)[i] = i;
    /* message r: word i holds i, but every 512th holds r */
    const uint64_t n = MSG_SIZE / 8, k = n / 512;
    uint64_t want = 0;
    for (unsigned r = 0; r < ROUNDS; r++)
        want += n * (n - 1) / 2 - 512 * (k * (k - 1) / 2) + (uint64_t)r * k;

    ferry_world_barrier(world);
    double t_heap = send_rounds(w, right, heap, 0, &rx, ROUNDS, &ok);
    ferry_world_barrier(world);
    double t_shared = send_rounds(w, right, shared, 1, &rx, 2 * ROUNDS, &ok);
    int heap_ok = ok && rx.sum[0] == want, shared_ok = ok && rx.sum[1] == want;
    ferry_world_barrier(world);

    printf("rank %d: %u messages of %u MiB from malloc'd memory: %.1f us each (sums %s); from "
           "ferry-allocated memory: %.1f us each (sums %s)\n",
           rank, ROUNDS, MSG_SIZE >> 20, t_heap / ROUNDS * 1e6, heap_ok ? "ok" : "WRONG",
           t_shared / ROUNDS * 1e6, shared_ok ? "ok" : "WRONG");
    ferry_mem_unmap(ctx, mem);
    free(heap);
    ferry_world_destroy(world);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    return heap_ok && shared_ok ? 0 : 1;
}
