/*
 * Active messages by rendezvous over ofi (src/tl/ofi/ofi_rndv.c): above FERRY_OFI_RNDV_THRESH
 * the receiver fi_reads the sender's buffer instead of proto sending fragments.  CTest runs it
 * with FERRY_TLS=ofi over rxm, rxd and shm (and with FI_MR_LOCAL forced).
 *
 *   sizes       AMs of 1 MiB, odd sizes around the eager limits and 3 MiB + 7, each with a
 *               user header, sent from one buffer and from an iovec of three pieces,
 *               interleaved with small AMs: every byte checked, in order; the iface's counters
 *               (ferry_worker_print_info) show that they went by rendezvous, not as fragments.
 *   close_force a 4 MiB AM and the sender's ep closed at once (FERRY_EP_CLOSE_FORCE): its
 *               request completes once (CANCELED, or OK if it was done), the receiver gets
 *               the message whole or not at all, and an AM on a new ep still arrives.
 *   killed      a sender process killed while the receiver reads its 8 MiB AM (the sender
 *               stops progressing first, so the read is in flight): the AMs of another sender
 *               behind it arrive within seconds (the dead one's receive is dropped, never half
 *               delivered), and a flush of the receiver's ep to the live sender ends (over shm
 *               with FERRY_ERR_IO: the read that never completes holds that endpoint's
 *               completions, so the transport fails its eps), no hang.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"
#include "ofi_test.h"
#include "fytest_proc.h"

#define AM_ID    7
#define KILL_LEN (8u << 20)

typedef struct rx {
    unsigned got, bad;
    unsigned next_seq; /* the sequence number expected next */
    int any_order;     /* across eps or after a kill: no order to check */
    uint64_t seen;     /* sequence numbers below 64 that arrived */
    size_t len_of[64];
    char why[160];
} rx_t;

/* header: seq (4) + seed (4); data: the pattern of that seed */
static ferry_status_t on_am(void *arg, const void *header, size_t header_len, const void *data,
                            size_t len, ferry_ep_t *reply_ep)
{
    (void)reply_ep;
    rx_t *r = arg;
    uint32_t h[2] = {0, 0};
    if (header_len != sizeof(h)) {
        if (!r->bad++)
            snprintf(r->why, sizeof(r->why), "header of %zu bytes", header_len);
        return FERRY_OK;
    }
    memcpy(h, header, sizeof(h));
    if (!r->any_order && h[0] != r->next_seq && !r->bad++)
        snprintf(r->why, sizeof(r->why), "message %u arrived when %u was expected", h[0],
                 r->next_seq);
    if (!check_pattern(data, len, h[1]) && !r->bad++)
        snprintf(r->why, sizeof(r->why), "message %u (%zu bytes): data changed", h[0], len);
    r->next_seq = h[0] + 1;
    if (h[0] < 64) {
        r->seen |= 1ull << h[0];
        r->len_of[h[0]] = len;
    }
    r->got++;
    return FERRY_OK;
}

/* The receiving iface's "AM rendezvous ... received N" count. */
static unsigned long long rndv_received(ferry_worker_t *w)
{
    char *text = worker_info(w);
    unsigned long long sent = 0, recv = 0;
    const char *r = strstr(text, "AM rendezvous above ");
    FY_ASSERT_MSG(r != NULL, "no rendezvous counters in:\n%s", text);
    FY_ASSERT_EQ(sscanf(r, "AM rendezvous above %*u bytes: sent %llu, received %llu", &sent, &recv),
                 2);
    free(text);
    return recv;
}

static void run_until(pair_t *p, const unsigned *counter, unsigned want, const char *what)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (*counter < want) {
        pair_progress(p);
        FY_ASSERT_MSG(ms_since(&t0) < 30000, "%s: %u of %u after 30 s", what, *counter, want);
    }
}

static void sizes(void)
{
    pair_t p;
    pair_open(&p);
    rx_t r;
    memset(&r, 0, sizeof(r));
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], AM_ID, on_am, &r));
    static const size_t lens[] = {1u << 20,        (1u << 20) + 13, 16384 + 1, 65536 + 1,
                                  65536 - 100 + 7, (3u << 20) + 7,  100000,    1u << 20};
    enum { N = sizeof(lens) / sizeof(lens[0]) };
    char *buf[N];
    unsigned seq = 0;
    unsigned long long before = rndv_received(p.w[1]);
    for (int round = 0; round < 2; round++) {
        done_t d[2 * N];
        ferry_request_t req[2 * N];
        unsigned nreq = 0;
        for (unsigned i = 0; i < N; i++) {
            buf[i] = malloc(lens[i]);
            fill_pattern(buf[i], lens[i], seq + 100);
            uint32_t h[2] = {seq, seq + 100};
            seq++;
            memset(&d[nreq], 0, sizeof(d[nreq]));
            req[nreq] = (ferry_request_t){.cb = req_cb, .user_data = &d[nreq]};
            ferry_status_t st;
            if (round == 0) {
                st = ferry_am_send(p.ep[0], AM_ID, h, sizeof(h), buf[i], lens[i], &req[nreq]);
            } else { /* three pieces: a small one, the bulk, an odd tail */
                size_t a = 100 < lens[i] ? 100 : lens[i], c = (lens[i] - a) % 1000;
                struct iovec v[3] = {
                    {buf[i], a}, {buf[i] + a, lens[i] - a - c}, {buf[i] + lens[i] - c, c}};
                /* three pieces at every size: above the lane's iov limit with the headers
                 * (3 on shm) proto gathers them into one copy; by rendezvous each is read */
                st = ferry_am_sendv(p.ep[0], AM_ID, h, sizeof(h), v, 3, &req[nreq]);
            }
            FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "send %u: %s", i,
                          ferry_status_string(st));
            if (st == FERRY_OK)
                d[nreq].calls = 1;
            nreq++;
            /* a small one between the big ones: the order holds across both paths */
            uint32_t hs[2] = {seq, seq + 100};
            char small[40];
            fill_pattern(small, sizeof(small), seq + 100);
            seq++;
            FY_ASSERT_OK(ferry_am_send(p.ep[0], AM_ID, hs, sizeof(hs), small, sizeof(small), NULL));
        }
        run_until(&p, &r.got, seq, "AMs by rendezvous");
        FY_ASSERT_MSG(!r.bad, "%s", r.why);
        for (unsigned i = 0; i < nreq; i++) {
            while (d[i].calls == 0)
                pair_progress(&p);
            FY_ASSERT_EQ(d[i].calls, 1);
            FY_ASSERT_OK(d[i].st);
        }
        for (unsigned i = 0; i < N; i++)
            free(buf[i]);
    }
    unsigned long long n = rndv_received(p.w[1]) - before;
    printf("%u AMs, %llu of them by rendezvous\n", seq, n);
    /* every large one (all but the ones at most the eager size, which depends on the provider) */
    FY_ASSERT_MSG(n >= 2 * 5, "only %llu AMs went by rendezvous", n);
    pair_close(&p);
}

static void close_force(void)
{
    pair_t p;
    pair_open(&p);
    rx_t r;
    memset(&r, 0, sizeof(r));
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], AM_ID, on_am, &r));
    size_t len = 4u << 20;
    char *buf = malloc(len);
    fill_pattern(buf, len, 100);
    uint32_t h[2] = {0, 100};
    done_t d = {0, 0};
    ferry_request_t req = {.cb = req_cb, .user_data = &d};
    ferry_status_t st = ferry_am_send(p.ep[0], AM_ID, h, sizeof(h), buf, len, &req);
    FY_ASSERT_MSG(st == FERRY_INPROGRESS || st == FERRY_OK, "%s", ferry_status_string(st));
    ferry_worker_progress(p.w[0]);
    ferry_worker_progress(p.w[1]);
    done_t dc = {0, 0};
    ferry_request_t creq = {.cb = req_cb, .user_data = &dc};
    st = ferry_ep_close(p.ep[0], FERRY_EP_CLOSE_FORCE, &creq);
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "%s", ferry_status_string(st));
    p.ep[0] = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (d.calls == 0 || (st == FERRY_INPROGRESS && dc.calls == 0)) {
        pair_progress(&p);
        FY_ASSERT_MSG(ms_since(&t0) < 15000, "the forced close or its send never completed");
    }
    FY_ASSERT_EQ(d.calls, 1);
    FY_ASSERT_MSG(d.st == FERRY_OK || d.st == FERRY_ERR_CANCELED, "%s", ferry_status_string(d.st));
    /* a while for a read in flight to land: whole or nothing */
    for (int i = 0; i < 2000; i++)
        pair_progress(&p);
    FY_ASSERT_MSG(!r.bad, "%s", r.why);
    FY_ASSERT(r.got == 0 || (r.got == 1 && r.len_of[0] == len));
    printf("send: %s; the receiver got %u\n", ferry_status_string(d.st), r.got);
    r.any_order = 1; /* a late cancelled one would be on another ep */
    /* buf stays mapped: the receiver may still read it (docs/ofi.md, AM rendezvous: over
     * shm the sender's own provider copies from it for the reader, checking no key) */
    /* a new ep: AMs flow again (nothing is stuck behind the cancelled one) */
    size_t alen = 0;
    FY_ASSERT_STATUS(ferry_worker_get_address(p.w[1], NULL, &alen), FERRY_ERR_TRUNCATED);
    void *addr = malloc(alen);
    FY_ASSERT_OK(ferry_worker_get_address(p.w[1], addr, &alen));
    ferry_ep_params_t epp = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
    FY_ASSERT_OK(ferry_ep_create(p.w[0], &epp, &p.ep[0]));
    free(addr);
    char *b2 = malloc(len);
    fill_pattern(b2, len, 101);
    uint32_t h2[2] = {1, 101};
    FY_ASSERT_OK(ferry_am_send(p.ep[0], AM_ID, h2, sizeof(h2), b2, len, NULL));
    free(b2);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!(r.seen & 2)) {
        pair_progress(&p);
        FY_ASSERT_MSG(ms_since(&t0) < 30000, "no AM after the forced close in 30 s");
    }
    FY_ASSERT_MSG(!r.bad, "%s", r.why);
    FY_ASSERT_EQ(r.len_of[1], len);
    FY_ASSERT(!(r.seen & 1) || r.len_of[0] == len);
    pair_close(&p);
    free(buf);
}

/* ---- a sender killed mid-read ---- */

static int sender(int rfd, int wfd, int argc, char **argv)
{
    (void)wfd, (void)argc, (void)argv;
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_ep_t *ep;
    int ret = child_connect(rfd, &ctx, &w, &ep);
    if (ret != 0)
        return ret;
    char *buf = malloc(KILL_LEN);
    fill_pattern(buf, KILL_LEN, 100);
    uint32_t h[2] = {0, 100};
    ferry_request_t rs = {.cb = NULL};
    /* until the receiver saw the descriptor, then silent */
    return child_send_then_silent(rfd, w,
                                  ferry_am_send(ep, AM_ID, h, sizeof(h), buf, KILL_LEN, &rs));
}

static const fyproc_role_t roles[] = {{"sender", sender}};

static void killed(void)
{
    pair_t p; /* w[1] receives from the child and from w[0] */
    pair_open(&p);
    rx_t r;
    memset(&r, 0, sizeof(r));
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], AM_ID, on_am, &r));
    fyproc_t c;
    spawn_with_address(&c, "sender", p.w[1]);
    unsigned long long before = rndv_received(p.w[1]);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (rndv_received(p.w[1]) == before && r.got == 0) {
        ferry_worker_progress(p.w[1]);
        FY_ASSERT_MSG(!fyproc_exited(&c), "the sender exited early (status %d)", c.status);
        FY_ASSERT_MSG(ms_since(&t0) < 20000, "no rendezvous descriptor in 20 s");
    }
    FY_ASSERT_EQ(fyproc_send(c.wfd, "s", 1), 0); /* the sender stops progressing */
    for (int i = 0; i < 200; i++)
        ferry_worker_progress(p.w[1]);
    fyproc_kill(&c, SIGKILL);
    /* another sender's AM, behind the dead one's at the receiver */
    char small[64];
    fill_pattern(small, sizeof(small), 101);
    uint32_t h[2] = {1, 101};
    r.any_order = 1; /* two senders */
    FY_ASSERT_OK(ferry_am_send(p.ep[0], AM_ID, h, sizeof(h), small, sizeof(small), NULL));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!(r.seen & 2)) {
        pair_progress(&p);
        FY_ASSERT_MSG(ms_since(&t0) < 15000, "AMs behind a killed sender's rendezvous hang");
    }
    double ms = ms_since(&t0);
    for (int i = 0; i < 1000; i++)
        pair_progress(&p);
    FY_ASSERT_MSG(!r.bad, "%s", r.why);
    FY_ASSERT(!(r.seen & 1) || r.len_of[0] == KILL_LEN); /* whole, or not at all */
    printf("the killed sender's AM %s; the next AM after %.0f ms\n",
           (r.seen & 1) ? "arrived whole" : "was dropped", ms);
    fyproc_release(&c);
    /* the receiver's ep to the live sender: a flush ends (over shm with an error: libfabric
     * 1.17's shm completes in order, and the read from the dead process never completes, so
     * the transport fails that interface's endpoints rather than let them hang) */
    const char *prov = getenv("FERRY_OFI_PROVIDER");
    int shm = prov != NULL && strcmp(prov, "shm") == 0;
    done_t df = {0, 0};
    ferry_request_t fr = {.cb = req_cb, .user_data = &df};
    ferry_status_t fs = ferry_ep_flush(p.ep[1], &fr);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (fs == FERRY_INPROGRESS && df.calls == 0) {
        pair_progress(&p);
        FY_ASSERT_MSG(ms_since(&t0) < 15000, "a flush after the killed sender hangs");
    }
    if (fs == FERRY_INPROGRESS)
        fs = df.st;
    printf("flush of the receiver's ep to the live sender: %s\n", ferry_status_string(fs));
    if (shm) {
        FY_ASSERT_MSG(fs == FERRY_OK || fs == FERRY_ERR_IO, "%s", ferry_status_string(fs));
    } else {
        FY_ASSERT_OK(fs);
    }
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_ep_close(p.ep[i], FERRY_EP_CLOSE_FORCE, NULL));
    for (int i = 0; i < 2; i++)
        ferry_worker_destroy(p.w[i]);
    ferry_context_destroy(p.ctx);
}

FYTEST_MAIN_ROLES(roles, FYTEST_CASE(sizes), FYTEST_CASE(close_force), FYTEST_CASE(killed))
