/*
 * peer_death.c - a peer that dies, as the testbed sees it (test_hosts.sh peer_death): two
 * ranks, rank 1 dies (_exit: the kernel closes its sockets, as after kill -9, and it never
 * answers again) and rank 0 must learn it through its endpoint's error handler within
 * seconds, never hang.
 *
 *   peer_death connect   rank 1 dies right after publishing its address: rank 0's endpoint
 *                        to it is created and used while it connects (every candidate fails)
 *   peer_death after     rank 1 dies once the two have exchanged a message (connected);
 *                        rank 0 keeps sending
 *
 * Rank 0 prints "peer_death: rank 0: the endpoint failed (STATUS) after S s" and exits 0, or
 * says why and exits 1 (no error in 30 s, or one before the peer was gone).  Rank 1 exits 0
 * (so that ferryrun does not end the job for it).
 */
#include <ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> /* _exit */

#define AM_PING 13
#define LIMIT_S 30.0

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct state {
    int pings;
} state_t;

static ferry_status_t on_ping(void *arg, const void *hdr, size_t hdr_len, const void *data,
                              size_t len, ferry_ep_t *ep)
{
    (void)hdr, (void)hdr_len, (void)data, (void)len, (void)ep;
    ((state_t *)arg)->pings++;
    return FERRY_OK;
}

int main(int argc, char **argv)
{
    int after = argc > 1 && strcmp(argv[1], "after") == 0;
    if (argc != 2 || (!after && strcmp(argv[1], "connect") != 0)) {
        fprintf(stderr, "usage: peer_death connect|after\n");
        return 2;
    }
    state_t s = {0};
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_world_t *world;
    if (ferry_context_create(NULL, &ctx) != FERRY_OK ||
        ferry_worker_create(ctx, NULL, &w) != FERRY_OK ||
        ferry_worker_set_am_handler(w, AM_PING, on_ping, &s) != FERRY_OK ||
        ferry_world_create(w, &world) != FERRY_OK || ferry_world_size(world) != 2) {
        fprintf(stderr, "peer_death: setup failed (2 ranks needed)\n");
        return 1;
    }
    int rank = ferry_world_rank(world);
    if (rank == 1 && !after)
        _exit(0);          /* dead before anyone connects */
    ferry_ep_t *ep = NULL; /* made from the address in the bootstrap store (oob) */
    if (rank == 1) {
        /* after: answer rank 0's first message, then die */
        double end = now_s() + LIMIT_S;
        while (s.pings == 0 && now_s() < end)
            ferry_worker_progress(w);
        if (ferry_world_ep(world, 0, &ep) == FERRY_OK)
            ferry_am_send(ep, AM_PING, NULL, 0, "!", 1, NULL);
        ferry_ep_flush(ep, NULL);
        _exit(0);
    }
    if (ferry_world_ep(world, 1, &ep) != FERRY_OK) {
        fprintf(stderr, "peer_death: rank 0: no endpoint to rank 1\n");
        return 1;
    }
    ferry_status_t st = ferry_am_send(ep, AM_PING, NULL, 0, "?", 1, NULL);
    double t0 = now_s();
    if (after) {
        while (s.pings == 0 && now_s() < t0 + LIMIT_S)
            ferry_worker_progress(w);
        if (s.pings == 0) {
            fprintf(stderr, "peer_death: rank 0: no answer from rank 1\n");
            return 1;
        }
        t0 = now_s(); /* connected: from here rank 1 is dying */
    }
    /* keep sending (the endpoint's state says when it failed: the world's error handler has
     * it), waiting a millisecond at a time for events between the sends */
    ferry_ep_attr_t a = {.field_mask = FERRY_EP_ATTR_FIELD_STATE};
    while (now_s() < t0 + LIMIT_S) {
        if (st == FERRY_OK || st == FERRY_INPROGRESS || st == FERRY_ERR_NO_RESOURCE)
            st = ferry_am_send(ep, AM_PING, NULL, 0, "?", 1, NULL);
        ferry_worker_wait(w, 1);
        if (ferry_ep_query(ep, &a) == FERRY_OK && a.state != FERRY_OK)
            break;
    }
    double dt = now_s() - t0;
    if (a.state == FERRY_OK) {
        fprintf(stderr, "peer_death: rank 0: no error %.0f s after rank 1 died\n", dt);
        return 1;
    }
    printf("peer_death: rank 0: the endpoint failed (%s) after %.1f s\n",
           ferry_status_string(a.state), dt);
    fflush(stdout);
    _exit(0); /* no collective leave: the peer is gone */
}
