/*
 * cm_world.c - a launched job's endpoints and the connection manager that connected them:
 * run under ferryrun, every rank makes its endpoint to every other rank (ferry_world_ep, a
 * peer known only by rank), sends each a checked message, waits for every rank's, and checks
 * that each endpoint's lanes were connected by the manager named in argv[1] (ferry_ep_query):
 * "oob" when FERRY_CM keeps it (the worker address fetched from the bootstrap store, with or
 * without direct), "direct" when FERRY_CM excludes oob.  Prints one line per rank; exits 1 on
 * the first mismatch.
 *
 *   ferryrun -n 3 cm_world oob          FERRY_CM=^direct ferryrun -n 2 cm_world oob
 *   FERRY_CM=^oob ferryrun -n 2 cm_world direct
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

#define AM_ID 11

typedef struct got {
    int count, bad;
    int rank;
} got_t;

static ferry_status_t on_msg(void *arg, const void *hdr, size_t hdr_len, const void *data,
                             size_t len, ferry_ep_t *ep)
{
    (void)ep;
    got_t *g = arg;
    int from = -1;
    if (hdr_len == sizeof(from))
        memcpy(&from, hdr, sizeof(from));
    char want[64];
    snprintf(want, sizeof(want), "from %d to %d", from, g->rank);
    if (len != strlen(want) + 1 || memcmp(data, want, len) != 0)
        g->bad++;
    g->count++;
    return FERRY_OK;
}

#define CHECK(st, what)                                                                            \
    do {                                                                                           \
        ferry_status_t st_ = (st);                                                                 \
        if (st_ != FERRY_OK && st_ != FERRY_INPROGRESS) {                                          \
            fprintf(stderr, "cm_world: %s: %s\n", what, ferry_status_string(st_));                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cm_world EXPECTED-CM\n");
        return 2;
    }
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_world_t *world;
    CHECK(ferry_context_create(NULL, &ctx), "context");
    CHECK(ferry_worker_create(ctx, NULL, &w), "worker");
    got_t g = {0, 0, -1};
    CHECK(ferry_worker_set_am_handler(w, AM_ID, on_msg, &g), "handler");
    CHECK(ferry_world_create(w, &world), "world");
    int rank = ferry_world_rank(world), size = ferry_world_size(world);
    g.rank = rank;
    /* every endpoint before any progress: each pairs with the peer's own (no reply ones) */
    ferry_ep_t *eps[64] = {0};
    if (size > 64)
        return 2;
    for (int r = 0; r < size; r++)
        if (r != rank)
            CHECK(ferry_world_ep(world, r, &eps[r]), "world ep");
    for (int r = 0; r < size; r++) {
        if (r == rank)
            continue;
        char msg[64];
        snprintf(msg, sizeof(msg), "from %d to %d", rank, r);
        CHECK(ferry_am_send(eps[r], AM_ID, &rank, sizeof(rank), msg, strlen(msg) + 1, NULL),
              "am send");
    }
    while (g.count < size - 1)
        ferry_worker_progress(w);
    CHECK(ferry_world_barrier(world), "barrier");
    int rc = g.bad != 0;
    if (g.bad != 0)
        fprintf(stderr, "cm_world: rank %d: %d message(s) with wrong bytes\n", rank, g.bad);
    for (int r = 0; r < size; r++) {
        if (r == rank)
            continue;
        ferry_ep_attr_t a = {.field_mask = FERRY_EP_ATTR_FIELD_LANES};
        CHECK(ferry_ep_query(eps[r], &a), "ep query");
        for (unsigned l = 0; l < a.nlanes; l++) {
            const char *cm = a.lanes[l].cm != NULL ? a.lanes[l].cm : "(none)";
            if (strcmp(cm, argv[1]) != 0) {
                fprintf(stderr,
                        "cm_world: rank %d to %d: lane %s over %s connected by %s, not %s\n", rank,
                        r, a.lanes[l].op_class, a.lanes[l].transport, cm, argv[1]);
                rc = 1;
            }
        }
        printf("rank %d to %d: %s over %s, cm %s\n", rank, r, a.lanes[0].op_class,
               a.lanes[0].transport, a.lanes[0].cm != NULL ? a.lanes[0].cm : "(none)");
    }
    if (rc == 0)
        printf("cm_world: rank %d of %d: every lane by %s, messages checked\n", rank, size,
               argv[1]);
    ferry_world_destroy(world);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    return rc;
}
