/*
 * A peer killed in the middle of a rendezvous over ofi: the receive ends with an error, never a
 * hang.  (The transport-level cases - before connect, mid-transfer, during a flush, idle - are
 * the conformance suite's peer_death_* over each provider; this one goes through proto's
 * rendezvous by fi_read.)  CTest sets FERRY_TLS=ofi and a provider (rxm, rxd, sockets).
 *
 * The sender (a child process) sends 8 MiB tagged and progresses until the receiver has seen the
 * RTS.  The receiver then stops it (SIGSTOP: a sender that only stopped calling progress would
 * still have its read served by the sockets provider's own thread, and the receive would rightly
 * end OK), posts the receive (its fi_read waits on the stopped sender), kills it and progresses:
 * the receive must complete once, with an error, within 15 s.
 */
#include <signal.h>
#include <stdint.h>

#include "common.h"
#include "ofi_test.h"
#include "fytest_proc.h"

#define LEN (8u << 20)
#define TAG 0x77

static int sender(int rfd, int wfd, int argc, char **argv)
{
    (void)wfd, (void)argc, (void)argv;
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_ep_t *ep;
    int ret = child_connect(rfd, &ctx, &w, &ep);
    if (ret != 0)
        return ret;
    char *buf = malloc(LEN);
    fill_pattern(buf, LEN, 5);
    ferry_request_t rs = {.cb = NULL};
    /* until the receiver saw the RTS, then silent */
    return child_send_then_silent(rfd, w, ferry_tag_send(ep, TAG, buf, LEN, &rs));
}

static const fyproc_role_t roles[] = {{"sender", sender}};

static void rndv_sender_killed(void)
{
    ferry_context_t *ctx;
    ferry_worker_t *w;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    fyproc_t p;
    spawn_with_address(&p, "sender", w);

    /* the RTS arrives (the message waits unexpected) */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ferry_tag_info_t info;
    while (ferry_tag_probe(w, TAG, ~0ull, &info) != FERRY_OK) {
        ferry_worker_progress(w);
        FY_ASSERT_MSG(!fyproc_exited(&p), "the sender exited early (status %d)", p.status);
        FY_ASSERT_MSG(ms_since(&t0) < 20000, "no RTS in 20 s");
    }
    FY_ASSERT_EQ(info.length, LEN);
    /* Stopped, not only silent: the sockets provider's own thread would serve the read of a
     * sender that merely stops calling progress, and the receive could then rightly end OK. */
    FY_ASSERT_EQ(fyproc_stop(&p), 0);

    char *dst = calloc(1, LEN);
    done_t dr = {0, 0};
    ferry_request_t rr = {.cb = req_cb, .user_data = &dr};
    ferry_status_t st = ferry_tag_recv(w, dst, LEN, TAG, ~0ull, &rr);
    FY_ASSERT_STATUS(st, FERRY_INPROGRESS); /* reading from a sender that does not answer */
    for (int i = 0; i < 200; i++)
        ferry_worker_progress(w);
    FY_ASSERT_MSG(dr.calls == 0, "the receive ended before the sender died: %s",
                  ferry_status_string(rr.status));
    fyproc_kill(&p, SIGKILL);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (dr.calls == 0) {
        ferry_worker_progress(w);
        FY_ASSERT_MSG(ms_since(&t0) < 15000, "the receive from a killed sender hangs");
    }
    FY_ASSERT_EQ(dr.calls, 1);
    FY_ASSERT_MSG(rr.status != FERRY_OK, "a receive from a killed sender completed OK");
    printf("receive from the killed sender: %s after %.0f ms\n", ferry_status_string(rr.status),
           ms_since(&t0));
    fyproc_release(&p);
    free(dst);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
}

FYTEST_MAIN_ROLES(roles, FYTEST_CASE(rndv_sender_killed))
