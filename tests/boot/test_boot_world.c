/*
 * test_boot_world.c - ferry_world_* as N ranks (under ferryrun, or alone as a singleton): rank and
 * size as the launcher says, endpoints made once per rank, and the barrier's one promise: no
 * rank leaves barrier k before every rank has entered it.
 *
 * That promise is checked with messages: on leaving barrier k a rank tells every other rank
 * "I left k"; a rank that receives it must have entered barrier k itself.  Between barriers
 * each rank progresses for a rank-dependent, varying while, so ranks drift apart: some are a
 * whole barrier ahead of others (their next barrier's messages arrive early), some progress
 * outside any barrier while "left" messages fly.  A barrier that let a rank through early would
 * be caught by a rank still progressing before it.
 */
#include "fytest.h"

#define AM_LEFT  11
#define BARRIERS 300

typedef struct job {
    ferry_context_t *ctx;
    ferry_worker_t *worker;
    ferry_world_t *world;
    unsigned entered;    /* barriers this rank has entered */
    unsigned *left_from; /* per rank: "left" messages received */
    unsigned violations;
} job_t;

static job_t job;

static ferry_status_t on_left(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_ep_t *reply_ep)
{
    uint32_t h[2]; /* sender, barrier it left */
    FY_ASSERT_EQ(header_len, sizeof(h));
    memcpy(h, header, sizeof(h));
    FY_ASSERT_LT(h[0], (uint32_t)ferry_world_size(job.world));
    if (job.entered < h[1] + 1) {
        fprintf(stderr, "rank %d: rank %u left barrier %u, but this rank entered only %u\n",
                ferry_world_rank(job.world), h[0], h[1], job.entered);
        job.violations++;
    }
    job.left_from[h[0]]++;
    return FERRY_OK;
}

static void job_start(void)
{
    memset(&job, 0, sizeof(job));
    FY_ASSERT_OK(ferry_context_create(NULL, &job.ctx));
    FY_ASSERT_OK(ferry_worker_create(job.ctx, NULL, &job.worker));
    FY_ASSERT_OK(ferry_world_create(job.worker, &job.world));
    job.left_from = calloc((size_t)ferry_world_size(job.world), sizeof(unsigned));
    FY_ASSERT(job.left_from != NULL);
}

static void job_end(void)
{
    ferry_world_destroy(job.world);
    ferry_worker_destroy(job.worker);
    ferry_context_destroy(job.ctx);
    free(job.left_from);
}

static void world_identity(void)
{
    job_start();
    int rank = ferry_world_rank(job.world), size = ferry_world_size(job.world);
    const char *r = getenv("FERRY_RANK"), *n = getenv("FERRY_SIZE");
    if (getenv("FERRY_BOOT_ADDR") != NULL) {
        FY_ASSERT_STR_EQ(ferry_world_backend(job.world), "builtin");
        FY_ASSERT_EQ(rank, atoi(r));
        FY_ASSERT_EQ(size, atoi(n));
        FY_ASSERT_EQ(ferry_world_local_rank(job.world), rank);
        FY_ASSERT_EQ(ferry_world_local_size(job.world), size);
    } else {
        FY_ASSERT_STR_EQ(ferry_world_backend(job.world), "singleton");
        FY_ASSERT_EQ(rank, 0);
        FY_ASSERT_EQ(size, 1);
    }
    /* one endpoint per rank, itself included, made once */
    for (int k = 0; k < size; k++) {
        ferry_ep_t *a = NULL, *b = NULL;
        FY_ASSERT_OK(ferry_world_ep(job.world, (rank + k) % size, &a));
        FY_ASSERT_OK(ferry_world_ep(job.world, (rank + k) % size, &b));
        FY_ASSERT(a != NULL && a == b);
    }
    ferry_ep_t *ep;
    FY_ASSERT_STATUS(ferry_world_ep(job.world, size, &ep), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_world_ep(job.world, -1, &ep), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_OK(ferry_world_barrier(job.world));
    job_end();
}

static void barrier_order(void)
{
    job_start();
    int rank = ferry_world_rank(job.world), size = ferry_world_size(job.world);
    FY_ASSERT_OK(ferry_worker_set_am_handler(job.worker, AM_LEFT, on_left, NULL));
    FY_ASSERT_OK(ferry_world_barrier(job.world)); /* handlers everywhere */
    ferry_ep_t **eps = calloc((size_t)size, sizeof(*eps));
    FY_ASSERT(eps != NULL);
    for (int k = 0; k < size; k++)
        FY_ASSERT_OK(ferry_world_ep(job.world, k, &eps[k]));
    unsigned seed = 12345u + (unsigned)rank * 7919u;
    for (unsigned b = 0; b < BARRIERS; b++) {
        /* drift: progress for 0..~2 ms, differently on every rank and every round */
        seed = seed * 1103515245u + 12345u;
        unsigned spins = (seed >> 16) % 64;
        if ((b + (unsigned)rank) % 7 == 0)
            spins *= 8;
        for (unsigned s = 0; s < spins; s++) {
            ferry_worker_progress(job.worker);
            if (s % 16 == 15)
                ferry_worker_wait(job.worker, 0);
        }
        job.entered++;
        FY_ASSERT_OK(ferry_world_barrier(job.world));
        uint32_t h[2] = {(uint32_t)rank, b};
        for (int k = 0; k < size; k++) {
            if (k == rank)
                continue;
            ferry_status_t st;
            while ((st = ferry_am_send(eps[k], AM_LEFT, h, sizeof(h), NULL, 0, NULL)) ==
                   FERRY_ERR_NO_RESOURCE)
                ferry_worker_progress(job.worker);
            FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
        }
    }
    /* every "left" message arrives (the last ones after the final barrier) */
    FY_ASSERT_OK(ferry_world_barrier(job.world));
    for (int k = 0; k < size; k++) {
        if (k == rank)
            continue;
        for (int spins = 0; job.left_from[k] < BARRIERS && spins < 60000; spins++)
            ferry_worker_wait(job.worker, 1);
        FY_ASSERT_EQ(job.left_from[k], BARRIERS);
    }
    FY_ASSERT_EQ(job.violations, 0);
    ferry_worker_set_am_handler(job.worker, AM_LEFT, NULL, NULL);
    free(eps);
    job_end();
}

/* A second world in the same process: the bootstrap connects again (builtin) or reuses its
 * connection (pmi1); barriers work in it. */
static void world_again(void)
{
    for (int i = 0; i < 2; i++) {
        job_start();
        for (int b = 0; b < 5; b++)
            FY_ASSERT_OK(ferry_world_barrier(job.world));
        job_end();
    }
}

FYTEST_MAIN_INPROC(FYTEST_CASE(world_identity), FYTEST_CASE(barrier_order),
                   FYTEST_CASE(world_again))
