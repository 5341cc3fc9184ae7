/*
 * alltoall_rounds.c - rounds of all-to-all exchange among the ranks of a job: in each round
 * every rank sends one small active message to every other rank and waits until it has one
 * from each.  Prints the time per round and per message (rank 0).  With more ranks than cores,
 * this is where an idle policy shows: busy-polling ranks steal the core from the rank that
 * would answer, and each step can cost a scheduler tick; FERRY_WAIT=adaptive yields, then
 * sleeps on the worker's event fd.
 *
 *   ferryrun -n 4 bench/alltoall_rounds [rounds]
 */
#include <ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned *got; /* per round, messages received */
static unsigned nrounds;

static ferry_status_t on_msg(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                             ferry_ep_t *reply)
{
    (void)arg, (void)d, (void)dl, (void)reply;
    unsigned r;
    if (hl == sizeof(r)) {
        __builtin_memcpy(&r, h, sizeof(r));
        if (r < nrounds)
            got[r]++;
    }
    return FERRY_OK;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    nrounds = argc > 1 ? (unsigned)atoi(argv[1]) : 2000;
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_world_t *world;
    if (ferry_context_create(NULL, &ctx) || ferry_worker_create(ctx, NULL, &w) ||
        ferry_world_create(w, &world)) {
        fprintf(stderr, "alltoall_rounds: cannot start\n");
        return 1;
    }
    int rank = ferry_world_rank(world), size = ferry_world_size(world);
    got = calloc(nrounds, sizeof(*got));
    ferry_worker_set_am_handler(w, 1, on_msg, NULL);
    ferry_world_barrier(world);
    double t0 = now();
    for (unsigned r = 0; r < nrounds; r++) {
        for (int k = 1; k < size; k++) {
            ferry_ep_t *ep;
            ferry_world_ep(world, (rank + k) % size, &ep);
            while (ferry_am_send(ep, 1, &r, sizeof(r), NULL, 0, NULL) == FERRY_ERR_NO_RESOURCE)
                ferry_worker_progress(w);
        }
        while (got[r] < (unsigned)(size - 1))
            ferry_worker_wait(w, 1000);
    }
    double dt = now() - t0;
    ferry_world_barrier(world);
    if (rank == 0)
        printf("alltoall_rounds: %d ranks, %u rounds: %.2f us per round, %.2f us per message "
               "(FERRY_WAIT=%s)\n",
               size, nrounds, dt / nrounds * 1e6, dt / nrounds / (size - 1) * 1e6,
               getenv("FERRY_WAIT") ? getenv("FERRY_WAIT") : "adaptive");
    ferry_world_destroy(world);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    free(got);
    return 0;
}
