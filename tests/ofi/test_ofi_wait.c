/*
 * Sleeping on an ofi interface: ferry_worker_get_fd / ferry_worker_arm and ferry_worker_wait
 * when ofi is the only transport (CTest sets FERRY_TLS=ofi and the provider).  The iface's
 * event fd holds the completion queue's wait fd (FI_WAIT_FD, fi_trywait before sleeping); its
 * fallback timer is set to 10 s here (FERRY_OFI_WAIT_POLL, FERRY_OFI_PEER_CHECK), so only the
 * wait fd can wake a sleeper within the 5 s these cases allow.
 *
 *   fd_wakes    one thread: the receiver's worker armed, its fd not readable; an AM sent and
 *               progressed by the sender's worker alone makes it readable.
 *   wait_wakes  a thread blocked in ferry_worker_wait (FERRY_WAIT=block) returns for each of
 *               5 AMs sent by another thread's worker.  The two workers belong to two contexts
 *               (two libfabric domains: each thread touches only its own).
 * FYTEST_OFI_POLLS=1 (a provider without a wait fd) expects the timer instead: both cases then
 * run with FERRY_OFI_WAIT_POLL=1ms and check the print says so.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>

#include "common.h"
#include "ofi_test.h"

static int got;

static ferry_status_t on_msg(void *arg, const void *header, size_t header_len, const void *data,
                             size_t data_len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)data, (void)data_len, (void)reply_ep;
    __atomic_add_fetch(&got, 1, __ATOMIC_SEQ_CST);
    return FERRY_OK;
}

static int polls(void)
{
    const char *e = getenv("FYTEST_OFI_POLLS");
    return e != NULL && e[0] == '1';
}

static void set_env(void)
{
    setenv("FERRY_OFI_WAIT_POLL", polls() ? "1ms" : "10s", 1);
    setenv("FERRY_OFI_PEER_CHECK", "10s", 1);
}

/* The worker sleeps on what ofi_iface_print says. */
static void check_sleeps_on(ferry_worker_t *w)
{
    char *text = worker_info(w);
    const char *want = polls() ? "sleeps on a timer" : "sleeps on the completion queue's wait fd";
    FY_ASSERT_MSG(strstr(text, want) != NULL, "expected \"%s\" in:\n%s", want, text);
    free(text);
}

/* Send one AM from ep and progress both workers until it arrived (connects the pair). */
static void warm_up(pair_t *p)
{
    int want = __atomic_load_n(&got, __ATOMIC_SEQ_CST) + 1;
    FY_ASSERT_OK(ferry_am_send(p->ep[0], 5, NULL, 0, "x", 1, NULL));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (__atomic_load_n(&got, __ATOMIC_SEQ_CST) < want) {
        pair_progress(p);
        FY_ASSERT_MSG(ms_since(&t0) < 10000, "the first AM did not arrive in 10 s");
    }
}

static void fd_wakes(void)
{
    set_env();
    pair_t p;
    pair_open(&p);
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 5, on_msg, NULL));
    got = 0;
    warm_up(&p);
    check_sleeps_on(p.w[1]);
    int fd;
    FY_ASSERT_OK(ferry_worker_get_fd(p.w[1], &fd));
    struct pollfd pfd = {fd, POLLIN, 0};
    /* Arm until nothing is pending, then the fd is quiet.  A provider with a progress thread
     * of its own (sockets) may still signal its wait fd once after the arm for work it did
     * there (a wake with nothing to read: harmless); what must not happen is an fd that stays
     * readable while nothing comes, so a sleeping application would spin.  So: quiet within
     * a few arms. */
    ferry_status_t st = FERRY_ERR_BUSY;
    int quiet = 0;
    for (int round = 0; round < 20 && !quiet; round++) {
        st = FERRY_ERR_BUSY;
        for (int i = 0; i < 10000 && st == FERRY_ERR_BUSY; i++) {
            ferry_worker_progress(p.w[1]);
            st = ferry_worker_arm(p.w[1]);
        }
        FY_ASSERT_OK(st);
        quiet = polls() || poll(&pfd, 1, 0) == 0;
    }
    FY_ASSERT_MSG(quiet, "the worker's fd stayed readable after 20 arms with nothing arriving");
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 5, NULL, 0, "y", 1, NULL));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = 0;
    while (r == 0 && ms_since(&t0) < 5000) {
        ferry_worker_progress(p.w[0]); /* the sender's side only */
        r = poll(&pfd, 1, 10);
    }
    FY_ASSERT_MSG(r == 1, "the worker's fd did not become readable in %.0f ms", ms_since(&t0));
    while (__atomic_load_n(&got, __ATOMIC_SEQ_CST) < 2) {
        ferry_worker_progress(p.w[1]);
        FY_ASSERT_MSG(ms_since(&t0) < 10000, "the AM did not arrive");
    }
    pair_close(&p);
}

/* Two workers of two contexts, endpoints both ways (pair_t's layout; ctx2 is w[1]'s). */
static ferry_context_t *pair_open2(pair_t *p)
{
    memset(p, 0, sizeof(*p));
    ferry_context_t *ctx2;
    FY_ASSERT_OK(ferry_context_create(NULL, &p->ctx));
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx2));
    FY_ASSERT_OK(ferry_worker_create(p->ctx, NULL, &p->w[0]));
    FY_ASSERT_OK(ferry_worker_create(ctx2, NULL, &p->w[1]));
    for (int i = 0; i < 2; i++) {
        size_t len = 0;
        FY_ASSERT_STATUS(ferry_worker_get_address(p->w[1 - i], NULL, &len), FERRY_ERR_TRUNCATED);
        void *addr = malloc(len);
        FY_ASSERT_OK(ferry_worker_get_address(p->w[1 - i], addr, &len));
        ferry_ep_params_t ep = {
            .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
        FY_ASSERT_OK(ferry_ep_create(p->w[i], &ep, &p->ep[i]));
        free(addr);
    }
    return ctx2;
}

typedef struct thr {
    pair_t *p;
    int n;
    int waiting; /* the receiver is about to wait for AM number `waiting` */
} thr_t;

static void *sender(void *arg)
{
    thr_t *t = arg;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; i <= t->n; i++) {
        while (__atomic_load_n(&t->waiting, __ATOMIC_SEQ_CST) < i) {
            ferry_worker_progress(t->p->w[0]);
            if (ms_since(&t0) > 20000)
                return NULL; /* the receiver failed: its assertion says why */
        }
        struct timespec ts = {0, 5000000}; /* let the receiver fall asleep (the case to test) */
        nanosleep(&ts, NULL);
        FY_ASSERT_OK(ferry_am_send(t->p->ep[0], 5, NULL, 0, "z", 1, NULL));
        for (int k = 0; k < 100; k++)
            ferry_worker_progress(t->p->w[0]);
    }
    return NULL;
}

static void wait_wakes(void)
{
    set_env();
    setenv("FERRY_WAIT", "block", 1);
    pair_t p;
    ferry_context_t *ctx2 = pair_open2(&p);
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 5, on_msg, NULL));
    got = 0;
    warm_up(&p);
    check_sleeps_on(p.w[1]);
    thr_t t = {&p, 5, 0};
    pthread_t th;
    FY_ASSERT_EQ(pthread_create(&th, NULL, sender, &t), 0);
    for (int i = 1; i <= t.n; i++) {
        __atomic_store_n(&t.waiting, i, __ATOMIC_SEQ_CST);
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (__atomic_load_n(&got, __ATOMIC_SEQ_CST) < i + 1) {
            ferry_status_t st = ferry_worker_wait(p.w[1], 5000);
            FY_ASSERT_MSG(st == FERRY_OK, "AM %d: ferry_worker_wait: %s after %.0f ms", i,
                          ferry_status_string(st), ms_since(&t0));
        }
    }
    pthread_join(th, NULL);
    FY_ASSERT_EQ(got, t.n + 1);
    unsetenv("FERRY_WAIT");
    pair_close(&p); /* destroys w[0], w[1] and p.ctx */
    ferry_context_destroy(ctx2);
}

FYTEST_MAIN(FYTEST_CASE(fd_wakes), FYTEST_CASE(wait_wakes))
