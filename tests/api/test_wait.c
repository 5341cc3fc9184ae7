/*
 * Waiting without burning a core: ferry_worker_wait returns when a message arrives (sent from
 * another thread's worker) and times out when nothing comes; the worker's fd becomes readable
 * after arm when work arrives; ferry_worker_signal wakes a sleeper.
 */
#include <poll.h>
#include <pthread.h>

#include "common.h"

static int got;

static ferry_status_t on_msg(void *arg, const void *header, size_t header_len, const void *data,
                             size_t data_len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)data, (void)data_len, (void)reply_ep;
    __atomic_add_fetch(&got, 1, __ATOMIC_SEQ_CST);
    return FERRY_OK;
}

static void timeout_when_idle(void)
{
    const char *modes[] = {"spin", "adaptive", "block"};
    for (int m = 0; m < 3; m++) {
        setenv("FERRY_WAIT", modes[m], 1);
        pair_t p;
        pair_open(&p);
        /* let wireup settle */
        for (int i = 0; i < 100; i++)
            pair_progress(&p);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ferry_status_t st = ferry_worker_wait(p.w[1], 50);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        FY_ASSERT_STATUS(st, FERRY_ERR_TIMED_OUT);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        FY_ASSERT_MSG(ms >= 45, "wait(%s) returned after %.1f ms, before its timeout", modes[m],
                      ms);
        pair_close(&p);
    }
    unsetenv("FERRY_WAIT");
}

typedef struct thr {
    pair_t *p;
    int n;
} thr_t;

static void *sender(void *arg)
{
    thr_t *t = arg;
    for (int i = 0; i < t->n; i++) {
        struct timespec ts = {0, 2000000}; /* the receiver must be asleep when it arrives */
        nanosleep(&ts, NULL);
        ferry_am_send(t->p->ep[0], 5, NULL, 0, "x", 1, NULL);
        ferry_worker_progress(t->p->w[0]);
    }
    return NULL;
}

static void wakes_on_message(void)
{
    setenv("FERRY_WAIT", "block", 1);
    pair_t p;
    pair_open(&p);
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 5, on_msg, NULL));
    for (int i = 0; i < 100; i++)
        pair_progress(&p);
    got = 0;
    thr_t t = {&p, 20};
    pthread_t th;
    pthread_create(&th, NULL, sender, &t);
    while (__atomic_load_n(&got, __ATOMIC_SEQ_CST) < 20)
        FY_ASSERT_OK(ferry_worker_wait(p.w[1], 5000));
    pthread_join(th, NULL);
    FY_ASSERT_EQ(got, 20);
    pair_close(&p);
    unsetenv("FERRY_WAIT");
}

static void fd_and_signal(void)
{
    pair_t p;
    pair_open(&p);
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 5, on_msg, NULL));
    for (int i = 0; i < 100; i++)
        pair_progress(&p);
    int fd;
    FY_ASSERT_OK(ferry_worker_get_fd(p.w[1], &fd));
    FY_ASSERT_OK(ferry_worker_arm(p.w[1]));
    struct pollfd pfd = {fd, POLLIN, 0};
    FY_ASSERT_EQ(poll(&pfd, 1, 0), 0); /* nothing yet */
    got = 0;
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 5, NULL, 0, "x", 1, NULL));
    ferry_worker_progress(p.w[0]);
    FY_ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    while (got == 0)
        ferry_worker_progress(p.w[1]);
    /* pending work: arm says busy */
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 5, NULL, 0, "x", 1, NULL));
    FY_ASSERT_STATUS(ferry_worker_arm(p.w[1]), FERRY_ERR_BUSY);
    while (got < 2)
        ferry_worker_progress(p.w[1]);
    /* signal wakes a waiter */
    FY_ASSERT_OK(ferry_worker_signal(p.w[1]));
    FY_ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    pair_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(timeout_when_idle), FYTEST_CASE(wakes_on_message),
            FYTEST_CASE(fd_and_signal))
