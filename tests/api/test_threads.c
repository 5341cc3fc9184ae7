/*
 * Threads and workers: a multi-threaded worker (FERRY_THREAD_MODE_MULTI) used by several
 * threads at once, and the async progress thread (FERRY_PROGRESS_THREAD).
 *
 *   mt_many_threads      four threads send AMs, tagged messages (eager and rendezvous) and puts
 *                        on one endpoint of a multi-threaded worker while four others post the
 *                        receives and progress the receiving worker; every byte, every count
 *                        and each sender's AM order are checked
 *   mt_env_override      FERRY_WORKER_THREAD_MULTI=y makes a worker created with no parameters
 *                        multi-threaded (two threads progress and send on it at once)
 *   pt_serves_while_computing
 *                        the server's thread computes (no ferry call) while a peer does a
 *                        rendezvous tag send, an AM, and put / get / atomics emulated over AM
 *                        against it: all complete before the compute phase ends, and the
 *                        server's handlers and callbacks ran on another thread
 *   pt_off_caller_thread FERRY_PROGRESS_THREAD=off: handlers and callbacks run on the thread
 *                        that calls progress, and a server that does not progress does not
 *                        serve a rendezvous
 *   ctx_shared_by_threads
 *                        two threads, each with its own single-threaded workers of one context,
 *                        map, pack, unpack, put, atomic, get and unmap memory at once (the
 *                        context's region table and the transports' memory domains are shared)
 *   bad_thread_mode      an unknown thread mode is refused
 *
 * Flags shared between threads are atomics: that is what a real application must do too, since
 * with a progress thread its callbacks run on another thread.  Built for the thread sanitizer
 * (label threads).
 */
#include <pthread.h>

#include "common.h"

#define NT 4 /* sender threads, and as many receiver threads */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

#define DEADLINE_NS (30ull * 1000000000ull)

static int aload(const int *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static void astore(int *p, int v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------------------------------- */
/* Several threads on one multi-threaded worker                                               */
/* ---------------------------------------------------------------------------------------- */

#define MT_NAM     300
#define MT_NTAG    40
#define MT_SLICE   (64u << 10)
#define MT_PUTCHK  4096u
#define MT_RNDV_SZ (200u << 10) /* above every transport's rendezvous threshold */

typedef struct mt_hdr {
    uint32_t thread, seq;
} mt_hdr_t;

typedef struct mt_state {
    pair_t p;
    ferry_rkey_t *rkey;
    uint64_t base;
    int am_next[NT];  /* the next AM seq expected from each sender (under the worker's lock) */
    int am_bad;       /* AMs out of order or with wrong bytes */
    int am_total;     /* AMs received */
    int senders_done; /* sender threads finished */
} mt_state_t;

static mt_state_t mt;

static size_t mt_am_len(unsigned t, unsigned seq)
{
    return 8 + (t * 131 + seq * 17) % 1500;
}

static size_t mt_tag_len(unsigned t, unsigned seq)
{
    return seq % 8 == 0 ? MT_RNDV_SZ + t * 64 : 1 + (t * 7 + seq * 97) % 3000;
}

static ferry_status_t mt_on_am(void *arg, const void *header, size_t header_len, const void *data,
                               size_t data_len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)reply_ep;
    mt_hdr_t h;
    int bad = header_len != sizeof(h);
    if (!bad) {
        memcpy(&h, header, sizeof(h));
        bad = h.thread >= NT || data_len != mt_am_len(h.thread, h.seq) ||
              !check_pattern(data, data_len, h.thread * 1000 + h.seq);
    }
    /* handlers run under the worker's lock: these plain updates are serialized */
    if (!bad && (int)h.seq != mt.am_next[h.thread])
        bad = 1;
    if (!bad)
        mt.am_next[h.thread]++;
    mt.am_bad += bad;
    __atomic_add_fetch(&mt.am_total, 1, __ATOMIC_RELEASE);
    return FERRY_OK;
}

static void flag_cb(ferry_request_t *req, ferry_status_t st)
{
    int *flag = req->user_data;
    astore(flag, st == FERRY_OK ? 1 : -1);
}

/* Send with retry: NO_RESOURCE asks the caller to progress and send again. */
static void mt_retry(ferry_status_t st_first, ferry_status_t (*again)(void *), void *arg)
{
    ferry_status_t st = st_first;
    uint64_t deadline = now_ns() + DEADLINE_NS;
    while (st == FERRY_ERR_NO_RESOURCE) {
        ferry_worker_progress(mt.p.w[0]);
        FY_ASSERT_MSG(now_ns() < deadline, "a send stayed refused for 30 s");
        st = again(arg);
    }
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "send: %s", ferry_status_string(st));
}

typedef struct mt_send {
    unsigned t, seq;
    const void *buf;
    size_t len;
    ferry_request_t *req;
    uint64_t remote;
} mt_send_t;

static ferry_status_t mt_am_again(void *arg)
{
    mt_send_t *s = arg;
    mt_hdr_t h = {s->t, s->seq};
    return ferry_am_send(mt.p.ep[0], 7, &h, sizeof(h), s->buf, s->len, NULL);
}

static ferry_status_t mt_tag_again(void *arg)
{
    mt_send_t *s = arg;
    return ferry_tag_send(mt.p.ep[0], ((uint64_t)s->t << 32) | s->seq, s->buf, s->len, s->req);
}

static ferry_status_t mt_put_again(void *arg)
{
    mt_send_t *s = arg;
    return ferry_put(mt.p.ep[0], s->buf, s->len, s->remote, mt.rkey, NULL);
}

static void *mt_sender(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    size_t maxlen = MT_RNDV_SZ + NT * 64;
    char *buf = malloc(maxlen);
    /* tag sends use requests (rendezvous ones must): buffers kept until they complete */
    char **tbuf = calloc(MT_NTAG, sizeof(*tbuf));
    ferry_request_t *treq = calloc(MT_NTAG, sizeof(*treq));
    int *tdone = calloc(MT_NTAG, sizeof(*tdone));
    for (unsigned seq = 0; seq < MT_NAM || seq < MT_NTAG; seq++) {
        if (seq < MT_NAM) {
            mt_send_t s = {t, seq, buf, mt_am_len(t, seq), NULL, 0};
            fill_pattern(buf, s.len, t * 1000 + seq);
            mt_retry(mt_am_again(&s), mt_am_again, &s);
        }
        if (seq < MT_NTAG) {
            size_t len = mt_tag_len(t, seq);
            tbuf[seq] = malloc(len);
            fill_pattern(tbuf[seq], len, t * 1000 + seq + 500);
            treq[seq] = (ferry_request_t){.cb = flag_cb, .user_data = &tdone[seq]};
            mt_send_t s = {t, seq, tbuf[seq], len, &treq[seq], 0};
            ferry_status_t st = mt_tag_again(&s);
            mt_retry(st, mt_tag_again, &s);
            if (st == FERRY_OK)
                astore(&tdone[seq], 1);
        }
        ferry_worker_progress(mt.p.w[0]);
    }
    /* this thread's slice of the target region, in chunks */
    char *slice = malloc(MT_SLICE);
    fill_pattern(slice, MT_SLICE, 77 + t);
    for (unsigned off = 0; off < MT_SLICE; off += MT_PUTCHK) {
        mt_send_t s = {t, 0, slice + off, MT_PUTCHK, NULL, mt.base + t * MT_SLICE + off};
        mt_retry(mt_put_again(&s), mt_put_again, &s);
    }
    /* a blocking flush from every thread at once: each waits for its own, the lock let go */
    FY_ASSERT_OK(ferry_ep_flush(mt.p.ep[0], NULL));
    uint64_t deadline = now_ns() + DEADLINE_NS;
    for (unsigned seq = 0; seq < MT_NTAG; seq++) {
        while (aload(&tdone[seq]) == 0) {
            ferry_worker_progress(mt.p.w[0]);
            FY_ASSERT_MSG(now_ns() < deadline, "thread %u: tag send %u never completed", t, seq);
        }
        FY_ASSERT_EQ(aload(&tdone[seq]), 1);
        free(tbuf[seq]);
    }
    free(slice);
    free(tbuf);
    free(treq);
    free(tdone);
    free(buf);
    __atomic_add_fetch(&mt.senders_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Receiver thread t: the tag receives of sender t, all posted first (expected or not), then
 * progress until each completed with its bytes. */
static void *mt_receiver(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    char **rbuf = calloc(MT_NTAG, sizeof(*rbuf));
    ferry_request_t *rreq = calloc(MT_NTAG, sizeof(*rreq));
    int *rdone = calloc(MT_NTAG, sizeof(*rdone));
    for (unsigned seq = 0; seq < MT_NTAG; seq++) {
        size_t len = mt_tag_len(t, seq);
        rbuf[seq] = malloc(len);
        rreq[seq] = (ferry_request_t){.cb = flag_cb, .user_data = &rdone[seq]};
        ferry_status_t st =
            ferry_tag_recv(mt.p.w[1], rbuf[seq], len, ((uint64_t)t << 32) | seq, ~0ull, &rreq[seq]);
        FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "recv: %s",
                      ferry_status_string(st));
        if (st == FERRY_OK)
            astore(&rdone[seq], 1);
        ferry_worker_progress(mt.p.w[1]);
    }
    uint64_t deadline = now_ns() + DEADLINE_NS;
    for (unsigned seq = 0; seq < MT_NTAG; seq++) {
        while (aload(&rdone[seq]) == 0) {
            ferry_worker_progress(mt.p.w[1]);
            FY_ASSERT_MSG(now_ns() < deadline, "thread %u: tag receive %u never completed", t, seq);
        }
        FY_ASSERT_EQ(aload(&rdone[seq]), 1);
        FY_ASSERT_MSG(check_pattern(rbuf[seq], mt_tag_len(t, seq), t * 1000 + seq + 500),
                      "thread %u: tag message %u has wrong bytes", t, seq);
        free(rbuf[seq]);
    }
    free(rbuf);
    free(rreq);
    free(rdone);
    return NULL;
}

static void mt_many_threads(void)
{
    ferry_worker_params_t wp = {.field_mask = FERRY_WORKER_FIELD_THREAD_MODE,
                                .thread_mode = FERRY_THREAD_MODE_MULTI};
    pair_open_params(&mt.p, &wp);
    FY_ASSERT_OK(ferry_worker_set_am_handler(mt.p.w[1], 7, mt_on_am, NULL));
    ferry_mem_t *mem;
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                             .length = NT * MT_SLICE,
                             .flags = FERRY_MEM_ALLOCATE};
    FY_ASSERT_OK(ferry_mem_map(mt.p.ctx, &mp, &mem));
    void *region;
    FY_ASSERT_OK(ferry_mem_query(mem, &region, NULL));
    memset(region, 0, NT * MT_SLICE);
    mt.base = (uint64_t)(uintptr_t)region;
    size_t klen = 0;
    FY_ASSERT_STATUS(ferry_rkey_pack(mt.p.ctx, mem, NULL, &klen), FERRY_ERR_TRUNCATED);
    void *key = malloc(klen);
    FY_ASSERT_OK(ferry_rkey_pack(mt.p.ctx, mem, key, &klen));
    FY_ASSERT_OK(ferry_rkey_unpack(mt.p.ep[0], key, klen, &mt.rkey));
    free(key);

    pthread_t snd[NT], rcv[NT];
    for (unsigned t = 0; t < NT; t++) {
        FY_ASSERT_EQ(pthread_create(&rcv[t], NULL, mt_receiver, (void *)(uintptr_t)t), 0);
        FY_ASSERT_EQ(pthread_create(&snd[t], NULL, mt_sender, (void *)(uintptr_t)t), 0);
    }
    /* this thread progresses the receiving worker too, until every AM is in and every sender
     * is done (a sender's flush needs the receiver's answer on tcp) */
    uint64_t deadline = now_ns() + DEADLINE_NS;
    while (__atomic_load_n(&mt.am_total, __ATOMIC_ACQUIRE) < NT * MT_NAM ||
           __atomic_load_n(&mt.senders_done, __ATOMIC_ACQUIRE) < NT) {
        ferry_worker_progress(mt.p.w[1]);
        FY_ASSERT_MSG(now_ns() < deadline, "%d of %d AMs arrived, %d of %d senders done in 30 s",
                      __atomic_load_n(&mt.am_total, __ATOMIC_ACQUIRE), NT * MT_NAM,
                      __atomic_load_n(&mt.senders_done, __ATOMIC_ACQUIRE), NT);
    }
    for (unsigned t = 0; t < NT; t++) {
        pthread_join(snd[t], NULL);
        pthread_join(rcv[t], NULL);
    }
    FY_ASSERT_EQ(mt.senders_done, NT);
    FY_ASSERT_EQ(mt.am_bad, 0);
    FY_ASSERT_EQ(mt.am_total, NT * MT_NAM);
    for (unsigned t = 0; t < NT; t++)
        FY_ASSERT_EQ(mt.am_next[t], MT_NAM);
    /* the puts were flushed by each sender: the region holds every slice */
    for (unsigned t = 0; t < NT; t++)
        FY_ASSERT_MSG(check_pattern((char *)region + t * MT_SLICE, MT_SLICE, 77 + t),
                      "the slice put by thread %u has wrong bytes", t);
    ferry_rkey_destroy(mt.rkey);
    FY_ASSERT_OK(ferry_mem_unmap(mt.p.ctx, mem));
    pair_close(&mt.p);
}

/* ---------------------------------------------------------------------------------------- */
/* FERRY_WORKER_THREAD_MULTI                                                                  */
/* ---------------------------------------------------------------------------------------- */

static int env_got;

static ferry_status_t env_on_am(void *arg, const void *header, size_t header_len, const void *data,
                                size_t data_len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)reply_ep;
    if (data_len == 8 && check_pattern(data, 8, 3))
        __atomic_add_fetch(&env_got, 1, __ATOMIC_RELEASE);
    return FERRY_OK;
}

static pair_t env_p;

static void *env_thread(void *arg)
{
    (void)arg;
    char b[8];
    fill_pattern(b, 8, 3);
    for (int i = 0; i < 500; i++) {
        ferry_status_t st;
        while ((st = ferry_am_send(env_p.ep[0], 9, NULL, 0, b, 8, NULL)) == FERRY_ERR_NO_RESOURCE)
            ferry_worker_progress(env_p.w[0]);
        FY_ASSERT_OK(st);
        ferry_worker_progress(env_p.w[0]);
        ferry_worker_progress(env_p.w[1]);
    }
    return NULL;
}

static void mt_env_override(void)
{
    setenv("FERRY_WORKER_THREAD_MULTI", "y", 1);
    pair_open(&env_p); /* NULL params: single-threaded but for the variable */
    FY_ASSERT_OK(ferry_worker_set_am_handler(env_p.w[1], 9, env_on_am, NULL));
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        FY_ASSERT_EQ(pthread_create(&th[i], NULL, env_thread, NULL), 0);
    uint64_t deadline = now_ns() + DEADLINE_NS;
    while (__atomic_load_n(&env_got, __ATOMIC_ACQUIRE) < 1000) {
        ferry_worker_progress(env_p.w[1]);
        FY_ASSERT_MSG(now_ns() < deadline, "%d of 1000 AMs in 30 s", env_got);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    FY_ASSERT_EQ(__atomic_load_n(&env_got, __ATOMIC_ACQUIRE), 1000);
    pair_close(&env_p);
    unsetenv("FERRY_WORKER_THREAD_MULTI");
}

/* ---------------------------------------------------------------------------------------- */
/* The progress thread serves a peer while the application computes                           */
/* ---------------------------------------------------------------------------------------- */

#define PT_TAG_LEN (1u << 20) /* rendezvous on every transport */
#define PT_MEM_LEN (64u << 10)

typedef struct pt_state {
    pair_t p;
    void *key;
    size_t klen;
    uint64_t base;
    pthread_t main_thread;
    int recv_done;           /* the server's tag receive completed (1 ok, -1 error) */
    int recv_cb_other;       /* ... and its callback ran on another thread than main's */
    int am_got;              /* the server's AM handler ran, */
    int am_other;            /* on another thread than main's */
    int client_done;         /* the client finished everything (1 ok) */
    uint64_t client_done_ns; /* when */
    uint64_t atomic_old, cswap_old;
} pt_state_t;

static pt_state_t pt;

static void pt_recv_cb(ferry_request_t *req, ferry_status_t st)
{
    (void)req;
    astore(&pt.recv_cb_other, !pthread_equal(pthread_self(), pt.main_thread));
    astore(&pt.recv_done, st == FERRY_OK ? 1 : -1);
}

static ferry_status_t pt_on_am(void *arg, const void *header, size_t header_len, const void *data,
                               size_t data_len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)data, (void)data_len, (void)reply_ep;
    astore(&pt.am_other, !pthread_equal(pthread_self(), pt.main_thread));
    astore(&pt.am_got, 1);
    return FERRY_OK;
}

/* The client: every call blocks (its own worker has a progress thread as well). */
static void *pt_client(void *arg)
{
    (void)arg;
    ferry_ep_t *ep = pt.p.ep[0];
    ferry_rkey_t *rkey;
    FY_ASSERT_OK(ferry_rkey_unpack(ep, pt.key, pt.klen, &rkey));
    char *src = malloc(PT_TAG_LEN);
    fill_pattern(src, PT_TAG_LEN, 11);
    int sdone = 0;
    ferry_request_t sreq = {.cb = flag_cb, .user_data = &sdone};
    ferry_status_t st = ferry_tag_send(ep, 42, src, PT_TAG_LEN, &sreq);
    FY_ASSERT_STATUS(st, FERRY_INPROGRESS); /* rendezvous: the server must answer */
    FY_ASSERT_OK(ferry_am_send(ep, 3, NULL, 0, "ping", 4, NULL));
    /* put, then read it back: emulated (FERRY_RMA_EMULATE), served by the server's handler */
    char pbuf[4096], gbuf[4096];
    fill_pattern(pbuf, sizeof(pbuf), 12);
    FY_ASSERT_OK(ferry_put(ep, pbuf, sizeof(pbuf), pt.base + 1024, rkey, NULL));
    FY_ASSERT_OK(ferry_ep_flush(ep, NULL));
    FY_ASSERT_OK(ferry_get(ep, gbuf, sizeof(gbuf), pt.base + 1024, rkey, NULL));
    FY_ASSERT_MEM_EQ(gbuf, pbuf, sizeof(pbuf));
    uint64_t old = 0;
    FY_ASSERT_OK(ferry_atomic(ep, FERRY_ATOMIC_ADD, 8, 5, 0, &old, pt.base, rkey, NULL));
    pt.atomic_old = old;
    FY_ASSERT_OK(ferry_atomic(ep, FERRY_ATOMIC_CSWAP, 8, 100, 1005, &old, pt.base, rkey, NULL));
    pt.cswap_old = old;
    uint64_t deadline = now_ns() + DEADLINE_NS;
    while (aload(&sdone) == 0) {
        FY_ASSERT_MSG(now_ns() < deadline, "the rendezvous send never completed");
        ferry_worker_wait(pt.p.w[0], 100); /* sleeps: the progress thread completes it */
    }
    FY_ASSERT_EQ(aload(&sdone), 1);
    ferry_rkey_destroy(rkey);
    free(src);
    pt.client_done_ns = now_ns();
    astore(&pt.client_done, 1);
    return NULL;
}

static volatile uint64_t pt_sink;

static void pt_serves_while_computing(void)
{
    setenv("FERRY_PROGRESS_THREAD", "on", 1);
    setenv("FERRY_RMA_EMULATE", "y", 1);
    pt.main_thread = pthread_self();
    pair_open(&pt.p);
    ferry_worker_t *server = pt.p.w[1];
    FY_ASSERT_OK(ferry_worker_set_am_handler(server, 3, pt_on_am, NULL));
    ferry_mem_t *mem;
    ferry_mem_params_t mp = {
        .field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
        .length = PT_MEM_LEN,
        .flags = FERRY_MEM_ALLOCATE,
    };
    FY_ASSERT_OK(ferry_mem_map(pt.p.ctx, &mp, &mem));
    void *region;
    FY_ASSERT_OK(ferry_mem_query(mem, &region, NULL));
    memset(region, 0, PT_MEM_LEN);
    *(uint64_t *)region = 1000;
    pt.base = (uint64_t)(uintptr_t)region;
    FY_ASSERT_STATUS(ferry_rkey_pack(pt.p.ctx, mem, NULL, &pt.klen), FERRY_ERR_TRUNCATED);
    pt.key = malloc(pt.klen);
    FY_ASSERT_OK(ferry_rkey_pack(pt.p.ctx, mem, pt.key, &pt.klen));
    char *dst = calloc(1, PT_TAG_LEN);
    ferry_request_t rreq = {.cb = pt_recv_cb};
    FY_ASSERT_STATUS(ferry_tag_recv(server, dst, PT_TAG_LEN, 42, ~0ull, &rreq), FERRY_INPROGRESS);

    /* Compute: no ferry call on this thread until the client is done or 20 s passed. */
    pthread_t cl;
    FY_ASSERT_EQ(pthread_create(&cl, NULL, pt_client, NULL), 0);
    uint64_t t0 = now_ns(), end = t0 + 20ull * 1000000000ull, x = 1;
    while (!(aload(&pt.client_done) && aload(&pt.recv_done)) && now_ns() < end)
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t t1 = now_ns();
    pt_sink = x;
    FY_ASSERT_MSG(aload(&pt.client_done) == 1,
                  "the client did not finish while the server computed for %.1f s",
                  (double)(t1 - t0) / 1e9);
    FY_ASSERT_EQ(aload(&pt.recv_done), 1);
    FY_ASSERT_EQ(aload(&pt.recv_cb_other), 1);
    FY_ASSERT_EQ(aload(&pt.am_got), 1);
    FY_ASSERT_EQ(aload(&pt.am_other), 1);
    pthread_join(cl, NULL);
    FY_ASSERT(pt.client_done_ns <= t1);
    FY_ASSERT(check_pattern(dst, PT_TAG_LEN, 11));
    FY_ASSERT_U64_EQ(pt.atomic_old, 1000);
    FY_ASSERT_U64_EQ(pt.cswap_old, 1005);
    FY_ASSERT_U64_EQ(*(uint64_t *)region, 100);
    char expect[4096];
    fill_pattern(expect, sizeof(expect), 12);
    FY_ASSERT_MEM_EQ((char *)region + 1024, expect, sizeof(expect));
    free(dst);
    free(pt.key);
    FY_ASSERT_OK(ferry_mem_unmap(pt.p.ctx, mem));
    pair_close(&pt.p);
    unsetenv("FERRY_PROGRESS_THREAD");
    unsetenv("FERRY_RMA_EMULATE");
}

/* ---------------------------------------------------------------------------------------- */
/* Off: everything on the caller's thread                                                     */
/* ---------------------------------------------------------------------------------------- */

static int off_am_same, off_cb_same, off_recv_done;

static ferry_status_t off_on_am(void *arg, const void *header, size_t header_len, const void *data,
                                size_t data_len, ferry_ep_t *reply_ep)
{
    (void)header, (void)header_len, (void)data, (void)data_len, (void)reply_ep;
    astore(&off_am_same, pthread_equal(pthread_self(), *(pthread_t *)arg) ? 1 : -1);
    return FERRY_OK;
}

static void off_recv_cb(ferry_request_t *req, ferry_status_t st)
{
    astore(&off_cb_same, pthread_equal(pthread_self(), *(pthread_t *)req->user_data) ? 1 : -1);
    astore(&off_recv_done, st == FERRY_OK ? 1 : -1);
}

static void pt_off_caller_thread(void)
{
    setenv("FERRY_PROGRESS_THREAD", "off", 1);
    pair_t p;
    pair_open(&p);
    pthread_t me = pthread_self();
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 4, off_on_am, &me));
    char *src = malloc(PT_TAG_LEN), *dst = calloc(1, PT_TAG_LEN);
    fill_pattern(src, PT_TAG_LEN, 21);
    ferry_request_t rreq = {.cb = off_recv_cb, .user_data = &me};
    FY_ASSERT_STATUS(ferry_tag_recv(p.w[1], dst, PT_TAG_LEN, 5, ~0ull, &rreq), FERRY_INPROGRESS);
    int sdone = 0;
    ferry_request_t sreq = {.cb = flag_cb, .user_data = &sdone};
    FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], 5, src, PT_TAG_LEN, &sreq), FERRY_INPROGRESS);
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 4, NULL, 0, "x", 1, NULL));
    /* the sender alone progresses: the receiver, not progressed, answers nothing */
    for (int i = 0; i < 20000; i++)
        ferry_worker_progress(p.w[0]);
    FY_ASSERT_EQ(aload(&sdone), 0);
    FY_ASSERT_EQ(aload(&off_am_same), 0);
    FY_ASSERT_EQ(aload(&off_recv_done), 0);
    uint64_t deadline = now_ns() + DEADLINE_NS;
    while (!(aload(&sdone) && aload(&off_recv_done))) {
        pair_progress(&p);
        FY_ASSERT_MSG(now_ns() < deadline, "the rendezvous did not complete in 30 s");
    }
    FY_ASSERT_EQ(aload(&sdone), 1);
    FY_ASSERT_EQ(aload(&off_recv_done), 1);
    FY_ASSERT_EQ(aload(&off_cb_same), 1);
    FY_ASSERT_EQ(aload(&off_am_same), 1);
    FY_ASSERT(check_pattern(dst, PT_TAG_LEN, 21));
    free(src);
    free(dst);
    pair_close(&p);
    unsetenv("FERRY_PROGRESS_THREAD");
}

/* ---------------------------------------------------------------------------------------- */
/* Context state shared by workers on different threads                                       */
/* ---------------------------------------------------------------------------------------- */

typedef struct ctx_pair {
    ferry_context_t *ctx;
    ferry_worker_t *w[2];
    ferry_ep_t *ep;
    unsigned seed;
} ctx_pair_t;

/* One thread, its own two single-threaded workers of the shared context: map, pack, unpack,
 * put, atomic, get, unmap, over and over, while the other thread does the same. */
static void *ctx_thread(void *arg)
{
    ctx_pair_t *cp = arg;
    char src[8192], dst[8192];
    for (unsigned it = 0; it < 40; it++) {
        ferry_mem_t *mem;
        ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                                 .length = sizeof(src) + 64,
                                 .flags = FERRY_MEM_ALLOCATE};
        FY_ASSERT_OK(ferry_mem_map(cp->ctx, &mp, &mem));
        void *region;
        FY_ASSERT_OK(ferry_mem_query(mem, &region, NULL));
        memset(region, 0, sizeof(src) + 64);
        char key[512];
        size_t klen = sizeof(key);
        FY_ASSERT_OK(ferry_rkey_pack(cp->ctx, mem, key, &klen));
        ferry_rkey_t *rkey;
        FY_ASSERT_OK(ferry_rkey_unpack(cp->ep, key, klen, &rkey));
        fill_pattern(src, sizeof(src), cp->seed + it);
        uint64_t base = (uint64_t)(uintptr_t)region;
        int done = 0;
        ferry_request_t req = {.cb = flag_cb, .user_data = &done};
        ferry_status_t st = ferry_put(cp->ep, src, sizeof(src), base + 64, rkey, NULL);
        FY_ASSERT_OK(st);
        st = ferry_ep_flush(cp->ep, &req);
        uint64_t deadline = now_ns() + DEADLINE_NS;
        while (st == FERRY_INPROGRESS && aload(&done) == 0) {
            ferry_worker_progress(cp->w[0]);
            ferry_worker_progress(cp->w[1]);
            FY_ASSERT_MSG(now_ns() < deadline, "a flush did not complete in 30 s");
        }
        FY_ASSERT_MEM_EQ((char *)region + 64, src, sizeof(src));
        uint64_t old = 1;
        done = 0;
        req = (ferry_request_t){.cb = flag_cb, .user_data = &done};
        st = ferry_atomic(cp->ep, FERRY_ATOMIC_ADD, 8, it + 1, 0, &old, base, rkey, &req);
        while (st == FERRY_INPROGRESS && aload(&done) == 0) {
            ferry_worker_progress(cp->w[0]);
            ferry_worker_progress(cp->w[1]);
            FY_ASSERT_MSG(now_ns() < deadline, "an atomic did not complete in 30 s");
        }
        FY_ASSERT_MSG(st == FERRY_OK || aload(&done) == 1, "atomic: %s", ferry_status_string(st));
        FY_ASSERT_U64_EQ(old, 0);
        FY_ASSERT_U64_EQ(*(uint64_t *)region, it + 1);
        done = 0;
        req = (ferry_request_t){.cb = flag_cb, .user_data = &done};
        st = ferry_get(cp->ep, dst, sizeof(dst), base + 64, rkey, &req);
        while (st == FERRY_INPROGRESS && aload(&done) == 0) {
            ferry_worker_progress(cp->w[0]);
            ferry_worker_progress(cp->w[1]);
            FY_ASSERT_MSG(now_ns() < deadline, "a get did not complete in 30 s");
        }
        FY_ASSERT_MEM_EQ(dst, src, sizeof(src));
        ferry_rkey_destroy(rkey);
        FY_ASSERT_OK(ferry_mem_unmap(cp->ctx, mem));
    }
    return NULL;
}

static void ctx_shared_by_threads(void)
{
    ferry_context_t *ctx;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    ctx_pair_t cp[2];
    for (int k = 0; k < 2; k++) {
        cp[k] = (ctx_pair_t){.ctx = ctx, .seed = 100u * (unsigned)k};
        for (int i = 0; i < 2; i++)
            FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &cp[k].w[i]));
        char addr[4096];
        size_t len = sizeof(addr);
        FY_ASSERT_OK(ferry_worker_get_address(cp[k].w[1], addr, &len));
        ferry_ep_params_t ep = {
            .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
        FY_ASSERT_OK(ferry_ep_create(cp[k].w[0], &ep, &cp[k].ep));
    }
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        FY_ASSERT_EQ(pthread_create(&th[k], NULL, ctx_thread, &cp[k]), 0);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        FY_ASSERT_OK(ferry_ep_close(cp[k].ep, FERRY_EP_CLOSE_FORCE, NULL));
        for (int i = 0; i < 2; i++)
            ferry_worker_destroy(cp[k].w[i]);
    }
    ferry_context_destroy(ctx);
}

static void bad_thread_mode(void)
{
    ferry_context_t *ctx;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    ferry_worker_t *w = NULL;
    ferry_worker_params_t wp = {.field_mask = FERRY_WORKER_FIELD_THREAD_MODE,
                                .thread_mode = (ferry_thread_mode_t)7};
    FY_ASSERT_STATUS(ferry_worker_create(ctx, &wp, &w), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT(w == NULL);
    wp.thread_mode = FERRY_THREAD_MODE_SINGLE;
    FY_ASSERT_OK(ferry_worker_create(ctx, &wp, &w));
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
}

FYTEST_MAIN(FYTEST_CASE(mt_many_threads), FYTEST_CASE(mt_env_override),
            FYTEST_CASE(pt_serves_while_computing), FYTEST_CASE(pt_off_caller_thread),
            FYTEST_CASE(ctx_shared_by_threads), FYTEST_CASE(bad_thread_mode))
