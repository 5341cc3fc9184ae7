/*
 * Several contexts (FERRY_OFI_CONTEXTS): the workers of one process each get their own ofi
 * context (endpoint, completion queue, address vector) on one FI_THREAD_SAFE domain, so they
 * run in parallel from their own threads.  CTest sets FERRY_TLS=ofi and the provider.
 *
 *   parallel  two threads, each driving a worker and its peer (four workers, one context, four
 *             ofi contexts, checked distinct in ferry_worker_print_info), exchange tagged
 *             messages of 8 B, 60 KiB and 1 MiB (rendezvous by fi_read) both ways at the same
 *             time; every byte is checked.
 *   limit     FERRY_OFI_CONTEXTS=2: a third worker gets no ofi interface (NO_DEVICE, ofi being
 *             the only transport), and gets one once a worker is destroyed.
 *   cross     between processes whose FERRY_OFI_CONTEXTS differ (16 here, 3 in the child), on
 *             contexts other than the first on both sides (here 2, there 1): the child sends 8 B
 *             and 1 MiB tagged messages (the larger read back by this side's context, the
 *             rendezvous' answer going to the child's context 1); every byte checked, and the
 *             child's sends complete only if the answers reach its context.
 *
 * FYTEST_OFI_SEP=1 (sockets, which offers scalable endpoints): every worker's context must be a
 * transmit and receive context of the md's one scalable endpoint ("scalable endpoint, tx/rx
 * context k of N", k its context), and after the exchange the shared address vector must hold
 * one peer endpoint (this process'); FYTEST_OFI_SEP=0 (FERRY_OFI_SEP=off, or a provider
 * without them): a separate endpoint each.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "ofi_test.h"

/* The ofi context a worker's iface holds, from "context N of M" in its print. */
static int context_of(ferry_worker_t *w, unsigned *of)
{
    char *text = worker_info(w);
    const char *c = strstr(text, "context ");
    FY_ASSERT_MSG(c != NULL, "no ofi context in:\n%s", text);
    int idx = -1;
    FY_ASSERT_EQ(sscanf(c, "context %d of %u", &idx, of), 2);
    FY_ASSERT_MSG(strstr(text, "FI_THREAD_SAFE") != NULL, "the domain is not thread-safe:\n%s",
                  text);
    const char *want = getenv("FYTEST_OFI_SEP");
    if (want != NULL) {
        const char *kind = atoi(want) ? "scalable endpoint, tx/rx context " : "separate endpoint ";
        const char *k = strstr(text, kind);
        FY_ASSERT_MSG(k != NULL, "not on a %s:\n%s", kind, text);
        int sidx = -1;
        unsigned sof = 0;
        FY_ASSERT_EQ(sscanf(k + strlen(kind), "%d of %u", &sidx, &sof), 2);
        FY_ASSERT_EQ(sidx, idx); /* the context it holds is the endpoint's context of that index */
        FY_ASSERT_EQ(sof, *of);
    }
    free(text);
    return idx;
}

static ferry_ep_t *connect_to(ferry_worker_t *from, ferry_worker_t *to)
{
    size_t len = 0;
    FY_ASSERT_STATUS(ferry_worker_get_address(to, NULL, &len), FERRY_ERR_TRUNCATED);
    void *addr = malloc(len);
    FY_ASSERT_OK(ferry_worker_get_address(to, addr, &len));
    ferry_ep_params_t ep = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
    ferry_ep_t *e;
    FY_ASSERT_OK(ferry_ep_create(from, &ep, &e));
    free(addr);
    return e;
}

typedef struct lane {
    ferry_worker_t *w[2]; /* a talker and its peer, driven by one thread */
    ferry_ep_t *ep[2];    /* ep[i]: w[i] -> w[1 - i] */
    unsigned seed;
    int ok;
} lane_t;

static void progress2(lane_t *l)
{
    ferry_worker_progress(l->w[0]);
    ferry_worker_progress(l->w[1]);
}

/* One message each way at once, then both checked. */
static void exchange(lane_t *l, size_t len, unsigned seed)
{
    char *src[2], *dst[2];
    done_t ds[2] = {{0, 0}, {0, 0}}, dr[2] = {{0, 0}, {0, 0}};
    ferry_request_t rs[2], rr[2];
    ferry_status_t sts[2], str[2];
    for (int i = 0; i < 2; i++) {
        src[i] = malloc(len);
        dst[i] = calloc(1, len);
        fill_pattern(src[i], len, seed + (unsigned)i);
        rr[i] = (ferry_request_t){.cb = req_cb, .user_data = &dr[i]};
        rs[i] = (ferry_request_t){.cb = req_cb, .user_data = &ds[i]};
        str[i] = ferry_tag_recv(l->w[i], dst[i], len, 7, ~0ull, &rr[i]);
        FY_ASSERT(str[i] == FERRY_OK || str[i] == FERRY_INPROGRESS);
    }
    for (int i = 0; i < 2; i++) {
        sts[i] = ferry_tag_send(l->ep[i], 7, src[i], len, &rs[i]);
        FY_ASSERT(sts[i] == FERRY_OK || sts[i] == FERRY_INPROGRESS);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int pending = 0;
        for (int i = 0; i < 2; i++)
            pending += (str[i] == FERRY_INPROGRESS && dr[i].calls == 0) +
                       (sts[i] == FERRY_INPROGRESS && ds[i].calls == 0);
        if (pending == 0)
            break;
        progress2(l);
        FY_ASSERT_MSG(ms_since(&t0) < 20000, "a %zu-byte exchange did not end in 20 s", len);
    }
    for (int i = 0; i < 2; i++) {
        if (str[i] == FERRY_INPROGRESS)
            FY_ASSERT_OK(rr[i].status);
        if (sts[i] == FERRY_INPROGRESS)
            FY_ASSERT_OK(rs[i].status);
        FY_ASSERT_EQ(rr[i].length, len);
        /* w[i] received what w[1 - i] sent */
        FY_ASSERT_MSG(check_pattern(dst[i], len, seed + (unsigned)(1 - i)),
                      "%zu bytes arrived wrong", len);
        free(src[i]);
        free(dst[i]);
    }
}

static void *run_lane(void *arg)
{
    lane_t *l = arg;
    static const size_t sizes[] = {8, 60 << 10, 1 << 20};
    for (unsigned round = 0; round < 10; round++)
        for (size_t s = 0; s < 3; s++)
            exchange(l, sizes[s], l->seed + round * 10 + (unsigned)s);
    l->ok = 1;
    return NULL;
}

static void parallel(void)
{
    ferry_context_t *ctx;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    lane_t lanes[2];
    memset(lanes, 0, sizeof(lanes));
    unsigned of = 0, seen = 0;
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < 2; i++) {
            FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &lanes[l].w[i]));
            int c = context_of(lanes[l].w[i], &of);
            FY_ASSERT(c >= 0 && c < 32);
            FY_ASSERT_MSG(!(seen & (1u << c)), "two workers share ofi context %d", c);
            seen |= 1u << c;
        }
        lanes[l].seed = 1000u * (unsigned)(l + 1);
    }
    FY_ASSERT_GE(of, 4);
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 2; i++)
            lanes[l].ep[i] = connect_to(lanes[l].w[i], lanes[l].w[1 - i]);
    pthread_t th[2];
    for (int l = 0; l < 2; l++)
        FY_ASSERT_EQ(pthread_create(&th[l], NULL, run_lane, &lanes[l]), 0);
    for (int l = 0; l < 2; l++)
        pthread_join(th[l], NULL);
    const char *sep = getenv("FYTEST_OFI_SEP");
    if (sep != NULL && atoi(sep)) {
        /* the four workers' peers are contexts of this process' one scalable endpoint: its
         * name went into the shared address vector once, however many eps and rendezvous */
        char *text = worker_info(lanes[1].w[1]);
        FY_ASSERT_MSG(strstr(text, "one address vector for all: 1 peer endpoint)") != NULL,
                      "the shared address vector holds other than one peer:\n%s", text);
        free(text);
    }
    for (int l = 0; l < 2; l++) {
        FY_ASSERT(lanes[l].ok);
        lane_t *p = &lanes[l]; /* closed with a flush, both workers progressed */
        ferry_request_t req[2];
        int done[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            req[i] = (ferry_request_t){.cb = pair_close_cb, .user_data = &done[i]};
            ferry_status_t st = ferry_ep_close(p->ep[i], FERRY_EP_CLOSE_FLUSH, &req[i]);
            if (st != FERRY_INPROGRESS) {
                FY_ASSERT_OK(st);
                done[i] = 1;
            }
        }
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (!(done[0] && done[1])) {
            progress2(p);
            FY_ASSERT_MSG(ms_since(&t0) < 30000, "closing did not end in 30 s");
        }
        ferry_worker_destroy(p->w[0]);
        ferry_worker_destroy(p->w[1]);
    }
    ferry_context_destroy(ctx);
}

static void limit(void)
{
    setenv("FERRY_OFI_CONTEXTS", "2", 1);
    ferry_context_t *ctx;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    ferry_worker_t *w[3] = {NULL, NULL, NULL};
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w[0]));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w[1]));
    unsigned of = 0;
    FY_ASSERT_NE(context_of(w[0], &of), context_of(w[1], &of));
    FY_ASSERT_EQ(of, 2);
    FY_ASSERT_STATUS(ferry_worker_create(ctx, NULL, &w[2]), FERRY_ERR_NO_DEVICE);
    ferry_worker_destroy(w[0]);
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w[2])); /* the context came back */
    ferry_worker_destroy(w[1]);
    ferry_worker_destroy(w[2]);
    ferry_context_destroy(ctx);
    unsetenv("FERRY_OFI_CONTEXTS");
}

#define CROSS_LEN (1u << 20)

/* Progress the three workers until both requests (st[i]: what the call returned) ended, for at
 * most 20 s or until the child (when given) exits: FERRY_OK, or what went wrong. */
static ferry_status_t finish_two(ferry_worker_t *const *w, const ferry_status_t *st,
                                 const done_t *d, fyproc_t *child)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 2; i++) {
        while (st[i] == FERRY_INPROGRESS && d[i].calls == 0) {
            for (int k = 0; k < 3; k++)
                ferry_worker_progress(w[k]);
            if ((child != NULL && fyproc_exited(child)) || ms_since(&t0) > 20000)
                return FERRY_ERR_TIMED_OUT;
        }
        ferry_status_t r = st[i] == FERRY_INPROGRESS ? d[i].st : st[i];
        if (r != FERRY_OK)
            return r;
    }
    return FERRY_OK;
}

/* The child of `cross`: three workers (contexts 0, 1, 2 of 3); the second sends to the parent. */
static int cross_peer(int rfd, int wfd, int argc, char **argv)
{
    (void)argc, (void)argv;
    setenv("FERRY_OFI_CONTEXTS", "3", 1);
    uint32_t len;
    char addr[4096];
    if (fyproc_recv(rfd, &len, sizeof(len), 20000) != 0 || len == 0 || len > sizeof(addr) ||
        fyproc_recv(rfd, addr, len, 20000) != 0)
        return 2;
    ferry_context_t *ctx;
    ferry_worker_t *w[3];
    if (ferry_context_create(NULL, &ctx) != FERRY_OK)
        return 3;
    for (int i = 0; i < 3; i++)
        if (ferry_worker_create(ctx, NULL, &w[i]) != FERRY_OK)
            return 4;
    ferry_ep_params_t ep_params = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
    ferry_ep_t *ep;
    if (ferry_ep_create(w[1], &ep_params, &ep) != FERRY_OK)
        return 5;
    char small[8];
    char *big = malloc(CROSS_LEN);
    fill_pattern(small, sizeof(small), 71);
    fill_pattern(big, CROSS_LEN, 72);
    done_t d[2] = {{0, 0}, {0, 0}};
    ferry_request_t rq[2] = {{.cb = req_cb, .user_data = &d[0]},
                             {.cb = req_cb, .user_data = &d[1]}};
    ferry_status_t st[2] = {ferry_tag_send(ep, 1, small, sizeof(small), &rq[0]),
                            ferry_tag_send(ep, 2, big, CROSS_LEN, &rq[1])};
    if (finish_two(w, st, d, NULL) != FERRY_OK)
        return 6;
    char c = 'd';
    fyproc_send(wfd, &c, 1);
    fyproc_recv(rfd, &c, 1, 20000); /* the parent has both: the ep may go */
    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    for (int k = 0; k < 3; k++)
        ferry_worker_destroy(w[k]);
    ferry_context_destroy(ctx);
    free(big);
    return 0;
}

static const fyproc_role_t roles[] = {{"cross_peer", cross_peer}};

static void cross(void)
{
    ferry_context_t *ctx;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    ferry_worker_t *w[3];
    unsigned of = 0;
    for (int i = 0; i < 3; i++) {
        FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w[i]));
        FY_ASSERT_EQ(context_of(w[i], &of), i);
    }
    char small[8] = {0};
    char *big = calloc(1, CROSS_LEN);
    done_t d[2] = {{0, 0}, {0, 0}};
    ferry_request_t rq[2] = {{.cb = req_cb, .user_data = &d[0]},
                             {.cb = req_cb, .user_data = &d[1]}};
    ferry_status_t st[2] = {ferry_tag_recv(w[2], small, sizeof(small), 1, ~0ull, &rq[0]),
                            ferry_tag_recv(w[2], big, CROSS_LEN, 2, ~0ull, &rq[1])};
    fyproc_t c;
    spawn_with_address(&c, "cross_peer", w[2]);
    ferry_status_t got = finish_two(w, st, d, &c);
    FY_ASSERT_MSG(got == FERRY_OK, "the child's messages: %s (child %s, status %d)",
                  ferry_status_string(got), fyproc_exited(&c) ? "exited" : "runs", c.status);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    FY_ASSERT(check_pattern(small, sizeof(small), 71));
    FY_ASSERT_MSG(check_pattern(big, CROSS_LEN, 72), "the 1 MiB message arrived wrong");
    char ch = 0; /* the child's sends completed: the rendezvous' answer reached its context */
    while (!fyproc_readable(c.rfd)) {
        for (int k = 0; k < 3; k++)
            ferry_worker_progress(w[k]);
        FY_ASSERT_MSG(ms_since(&t0) < 30000, "the child's sends did not complete");
    }
    FY_ASSERT_MSG(fyproc_recv(c.rfd, &ch, 1, 1000) == 0 && ch == 'd',
                  "the child's sends failed (its status %d)", fyproc_wait(&c, 5000));
    FY_ASSERT_EQ(fyproc_send(c.wfd, "q", 1), 0);
    while (!fyproc_exited(&c)) {
        for (int k = 0; k < 3; k++)
            ferry_worker_progress(w[k]);
        FY_ASSERT_MSG(ms_since(&t0) < 40000, "the child did not exit");
    }
    FY_ASSERT_EQ(c.status, 0);
    fyproc_release(&c);
    free(big);
    for (int i = 0; i < 3; i++)
        ferry_worker_destroy(w[i]);
    ferry_context_destroy(ctx);
}

FYTEST_MAIN_ROLES(roles, FYTEST_CASE(parallel), FYTEST_CASE(limit), FYTEST_CASE(cross))
