/*
 * rndv_table.c - what a runtime does at start-up and for bulk data, with the calls made for
 * it: each rank publishes a small blob (here a registered buffer's size and a tag) with
 * ferry_world_allgather and builds a table of every rank's; then each rank sends its right
 * neighbour a large active message, and the receiver's rendezvous handler places the data
 * straight into a buffer of its choosing (ferry_am_recv_data) instead of getting a copy in a
 * library buffer.  At the end each rank prints what ferry_ep_query says of its endpoint to
 * the neighbour: the peer, the lanes, the AM sizes and the counters.
 *
 *   ferryrun -n 4 ./rndv_table
 *   FERRY_AM_EAGER_MAX=64k ferryrun -n 2 ./rndv_table   (the message travels announced
 *                                                       even over shared memory)
 *
 * Exit status 0 when every rank's table and message checked out.  Only ferry.h is used.
 */
#include <ferry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AM_BULK   21
#define BULK_SIZE (4u << 20)
#define LIMIT_S   60.0

typedef struct entry { /* what each rank publishes */
    uint32_t rank;
    uint32_t magic;
    uint64_t buffer_size;
} entry_t;

typedef struct bulk_rx {
    ferry_worker_t *worker;
    char *buf;
    ferry_request_t req;
    int announced, done;
    ferry_status_t status;
    size_t len;
} bulk_rx_t;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void recv_done(ferry_request_t *req, ferry_status_t status)
{
    bulk_rx_t *rx = req->user_data;
    rx->status = status;
    rx->len = req->length;
    rx->done = 1;
}

/* A large message is announced (desc != NULL) before its data: put it in our own buffer.  A
 * small or already complete one comes with its data, like an ordinary handler's. */
static ferry_status_t on_bulk(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_am_desc_t *desc, ferry_ep_t *reply_ep)
{
    (void)header, (void)header_len, (void)reply_ep;
    bulk_rx_t *rx = arg;
    if (data_len > BULK_SIZE) {
        if (desc != NULL)
            ferry_am_data_release(rx->worker, desc);
        return FERRY_OK;
    }
    if (desc == NULL) {
        memcpy(rx->buf, data, data_len);
        rx->len = data_len;
        rx->status = FERRY_OK;
        rx->done = 1;
        return FERRY_OK;
    }
    rx->announced = 1;
    rx->req.cb = recv_done;
    rx->req.user_data = rx;
    ferry_status_t st = ferry_am_recv_data(rx->worker, desc, rx->buf, BULK_SIZE, &rx->req);
    if (st != FERRY_INPROGRESS) /* done now (or failed now): no callback */
        recv_done(&rx->req, st);
    return FERRY_OK;
}

int main(void)
{
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_world_t *world;
    if (ferry_context_create(NULL, &ctx) != FERRY_OK || ferry_worker_create(ctx, NULL, &w) != 0 ||
        ferry_world_create(w, &world) != FERRY_OK) {
        fprintf(stderr, "rndv_table: cannot start\n");
        return 1;
    }
    int rank = ferry_world_rank(world), size = ferry_world_size(world), errors = 0;

    /* 1. the table */
    entry_t mine = {(uint32_t)rank, 0xfe770000u + (uint32_t)rank, BULK_SIZE}, *table;
    table = calloc((size_t)size, sizeof(*table));
    if (table == NULL || ferry_world_allgather(world, &mine, sizeof(mine), table) != FERRY_OK)
        errors++;
    for (int r = 0; table != NULL && r < size; r++)
        if (table[r].rank != (uint32_t)r || table[r].magic != 0xfe770000u + (uint32_t)r)
            errors++;

    /* 2. a large message to the right neighbour, placed by the receiver's handler */
    bulk_rx_t rx = {.worker = w, .buf = malloc(BULK_SIZE)};
    char *out = malloc(BULK_SIZE);
    if (rx.buf == NULL || out == NULL)
        return 1;
    for (size_t i = 0; i < BULK_SIZE; i++)
        out[i] = (char)(i * 7 + (size_t)rank);
    ferry_worker_set_am_handler_rndv(w, AM_BULK, on_bulk, &rx);
    ferry_world_barrier(world); /* every handler is in place */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    ferry_ep_t *ep = NULL;
    ferry_status_t st = ferry_world_ep(world, right, &ep);
    if (st == FERRY_OK)
        st = ferry_am_send(ep, AM_BULK, &rank, sizeof(rank), out, BULK_SIZE, NULL);
    if (st != FERRY_OK) {
        fprintf(stderr, "rank %d: send: %s\n", rank, ferry_status_string(st));
        errors++;
    }
    double end = now_s() + LIMIT_S;
    while (!rx.done && now_s() < end)
        ferry_worker_wait(w, 100);
    if (!rx.done || rx.status != FERRY_OK || rx.len != BULK_SIZE) {
        fprintf(stderr, "rank %d: the message from rank %d: %s\n", rank, left,
                rx.done ? ferry_status_string(rx.status) : "never came");
        errors++;
    } else {
        for (size_t i = 0; i < BULK_SIZE; i++)
            if (rx.buf[i] != (char)(i * 7 + (size_t)left)) {
                errors++;
                break;
            }
    }

    /* 3. what the endpoint says of itself */
    ferry_ep_attr_t a = {.field_mask = FERRY_EP_ATTR_FIELD_PEER_NAME | FERRY_EP_ATTR_FIELD_LANES |
                                       FERRY_EP_ATTR_FIELD_AM_SIZES | FERRY_EP_ATTR_FIELD_STATS};
    if (ep != NULL && ferry_ep_query(ep, &a) == FERRY_OK) {
        printf("rank %d -> rank %d (%s): am lane %s/%s, eager max %zu, %llu msgs %llu bytes "
               "out, %llu resends, %llu errors; the message came %s\n",
               rank, right, a.peer_name, a.nlanes ? a.lanes[0].transport : "-",
               a.nlanes ? a.lanes[0].device : "-", a.am_eager_max,
               (unsigned long long)a.stats.tx_msgs, (unsigned long long)a.stats.tx_bytes,
               (unsigned long long)a.stats.retransmits, (unsigned long long)a.stats.errors,
               rx.announced ? "announced, placed by the handler" : "whole");
    }
    int all_errors = 0; /* everyone's verdict, through the same allgather */
    int *verdicts = calloc((size_t)size, sizeof(int));
    if (verdicts != NULL && ferry_world_allgather(world, &errors, sizeof(errors), verdicts) == 0)
        for (int r = 0; r < size; r++)
            all_errors += verdicts[r];
    else
        all_errors = 1;
    if (rank == 0)
        printf("rndv_table: %d ranks: %s\n", size, all_errors == 0 ? "all verified" : "FAILED");
    ferry_world_destroy(world);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    free(verdicts);
    free(table);
    free(rx.buf);
    free(out);
    return all_errors == 0 ? 0 : 1;
}
