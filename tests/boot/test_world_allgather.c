/*
 * test_world_allgather.c - ferry_world_allgather as N ranks under ferryrun: every rank's blob,
 * in rank order, for blobs of a few bytes to a few KiB (longer than some launchers store under
 * one key), many calls in a row (each numbered alike on every rank), a rank giving another
 * length (every rank that sees it fails, none hangs), and bad arguments.  Then a runtime's use:
 * each rank gathers every rank's worker uuid (ferry_worker_query) and checks it against what
 * ferry_ep_query says of its endpoint to that rank.
 */
#include <stdio.h>

#include "fytest.h"

static void fill(uint8_t *b, size_t len, int rank, unsigned call)
{
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)(rank * 31 + (int)call * 7 + (int)i);
}

static void allgather(void)
{
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_world_t *world;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    FY_ASSERT_OK(ferry_world_create(w, &world));
    int rank = ferry_world_rank(world), size = ferry_world_size(world);
    const size_t lens[] = {1, 3, 8, 100, 5000};
    unsigned call = 0;
    for (unsigned round = 0; round < 4; round++) {
        for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++, call++) {
            size_t len = lens[k];
            uint8_t *in = malloc(len), *out = malloc(len * (size_t)size), *want = malloc(len);
            FY_ASSERT(in != NULL && out != NULL && want != NULL);
            fill(in, len, rank, call);
            memset(out, 0xee, len * (size_t)size);
            FY_ASSERT_OK(ferry_world_allgather(world, in, len, out));
            for (int r = 0; r < size; r++) {
                fill(want, len, r, call);
                FY_ASSERT_MSG(memcmp(out + (size_t)r * len, want, len) == 0,
                              "call %u: rank %d's blob of %zu bytes is wrong", call, r, len);
            }
            free(in);
            free(out);
            free(want);
        }
    }
    /* len 0 everywhere: nothing to do */
    FY_ASSERT_OK(ferry_world_allgather(world, NULL, 0, NULL));
    FY_ASSERT_STATUS(ferry_world_allgather(NULL, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    uint64_t x = 0;
    FY_ASSERT_STATUS(ferry_world_allgather(world, &x, sizeof(x), NULL), FERRY_ERR_INVALID_PARAM);

    /* rank 1 gives 16 bytes, the others 8: every rank fails (each sees a length not its own) */
    if (size > 1) {
        uint64_t in[2] = {1, 2}, out[64];
        FY_ASSERT(size <= 32);
        size_t len = rank == 1 ? 16 : 8;
        FY_ASSERT_STATUS(ferry_world_allgather(world, in, len, out), FERRY_ERR_MESSAGE_TRUNCATED);
        FY_ASSERT_OK(ferry_world_barrier(world));
    }

    /* the runtime's use: a table of every rank's worker uuid, checked against the endpoints */
    ferry_worker_attr_t wa = {.field_mask = FERRY_WORKER_ATTR_FIELD_NAME};
    FY_ASSERT_OK(ferry_worker_query(w, &wa));
    uint64_t *uuids = calloc((size_t)size, sizeof(*uuids));
    FY_ASSERT(uuids != NULL);
    FY_ASSERT_OK(ferry_world_allgather(world, &wa.uuid, sizeof(wa.uuid), uuids));
    FY_ASSERT_EQ(uuids[rank], wa.uuid);
    for (int r = 0; r < size; r++) {
        ferry_ep_t *ep;
        FY_ASSERT_OK(ferry_world_ep(world, r, &ep));
        ferry_ep_attr_t a = {.field_mask = FERRY_EP_ATTR_FIELD_PEER_NAME};
        FY_ASSERT_OK(ferry_ep_query(ep, &a));
        FY_ASSERT_EQ(a.peer_uuid, uuids[r]);
    }
    free(uuids);
    FY_ASSERT_OK(ferry_world_barrier(world));
    ferry_world_destroy(world);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
}

FYTEST_MAIN(FYTEST_CASE(allgather))
