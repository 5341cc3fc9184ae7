/*
 * The tagged-message calls for runtimes beyond send and receive: iovec sends and receives
 * (eager and rendezvous, pieces that straddle fragments, zero-length pieces, the count
 * limit), synchronous sends (eager sizes wait for the receiver's match, rendezvous ones too),
 * matched probe + receive (the message is the caller's: no receive steals it), and cancel of a
 * send still queued on its endpoint (CANCELED, nothing arrives) against one already on the
 * wire (BUSY, completes normally).  One thread drives both workers: every call takes a request
 * and both are progressed until it completes.  CTest runs the file over self, shm, tcp and udp
 * (loopback), with the am rendezvous scheme, and with small transport maxima (fragments).
 */
#include <pthread.h>

#include "common.h"

static ferry_status_t finish(pair_t *p, ferry_status_t st, ferry_request_t *req, done_t *d)
{
    if (st != FERRY_INPROGRESS) {
        FY_ASSERT_EQ(d->calls, 0);
        return st;
    }
    for (long i = 0; i < 20000000 && d->calls == 0; i++)
        pair_progress(p);
    FY_ASSERT_EQ(d->calls, 1);
    FY_ASSERT_EQ(req->status, d->st);
    return d->st;
}

/* Self or shm (FERRY_TLS unset or shm): a message sent is at the peer at once. */
static int same_host_memory(void)
{
    const char *t = getenv("FERRY_TLS");
    return t == NULL || strcmp(t, "shm") == 0 || strcmp(t, "self") == 0;
}

static int is_udp(void)
{
    const char *t = getenv("FERRY_TLS");
    return t != NULL && strcmp(t, "udp") == 0;
}

/* Close the pair.  Over udp, the end closed first resets the other's connection while that
 * one's flush is under way (the same in every api test: common.h's pair_close is not used over
 * udp); every operation here has completed, so a close by force loses nothing. */
static void close_pair(pair_t *p)
{
    if (!is_udp()) {
        pair_close(p);
        return;
    }
    for (int i = 0; i < 2; i++)
        if (p->ep[i] != NULL)
            FY_ASSERT_OK(ferry_ep_close(p->ep[i], FERRY_EP_CLOSE_FORCE, NULL));
    for (int i = 0; i < 2; i++)
        ferry_worker_destroy(p->w[i]);
    ferry_context_destroy(p->ctx);
}

/* Progress both workers a while: what can arrive has arrived (a bound, not a sleep). */
static void settle(pair_t *p)
{
    for (int i = 0; i < 3000; i++)
        pair_progress(p);
}

/* Split [buf, +len) into pieces of the given sizes (the last takes the rest); zero-length
 * pieces interleaved when `zeros`.  Returns the count. */
static size_t split(char *buf, size_t len, const size_t *sizes, size_t nsizes, int zeros,
                    struct iovec *iov)
{
    size_t n = 0, off = 0;
    for (size_t i = 0; i < nsizes && off < len; i++) {
        if (zeros) {
            iov[n].iov_base = i % 2 ? NULL : buf;
            iov[n++].iov_len = 0;
        }
        size_t k = len - off;
        if (i + 1 < nsizes && sizes[i] < k)
            k = sizes[i];
        iov[n].iov_base = buf + off;
        iov[n++].iov_len = k;
        off += k;
    }
    return n;
}

/* One message: sent from pieces (or whole), received into pieces (or whole), expected or not. */
static void iov_roundtrip(pair_t *pp, size_t len, int send_v, int recv_v, int recv_first, int zeros)
{
    static const size_t ssz[] = {1, 7, 4093, 65536, 100000, 1 << 20};
    static const size_t rsz[] = {3, 8192, 1, 77777, 1 << 19};
    pair_t p = *pp;
    char *src = malloc(len + 1), *dst = malloc(len + 16);
    fill_pattern(src, len, (unsigned)len + 1);
    memset(dst, 0xee, len + 16);
    struct iovec siov[16], riov[16];
    size_t sn = split(src, len, ssz, zeros ? 6 : 5, zeros, siov);
    size_t rn = split(dst, len, rsz, zeros ? 5 : 4, zeros, riov);
    done_t ds = {0, 0}, dr = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds}, rr = {.cb = req_cb, .user_data = &dr};
    ferry_status_t str = FERRY_INPROGRESS, sts;
#define RECV()                                                                                     \
    (recv_v ? ferry_tag_recvv(p.w[1], riov, rn, 0x55, ~0ull, &rr)                                  \
            : ferry_tag_recv(p.w[1], dst, len, 0x55, ~0ull, &rr))
    if (recv_first)
        str = RECV();
    sts = send_v ? ferry_tag_sendv(p.ep[0], 0x55, siov, sn, &rs)
                 : ferry_tag_send(p.ep[0], 0x55, src, len, &rs);
    FY_ASSERT(sts == FERRY_OK || sts == FERRY_INPROGRESS);
    if (!recv_first) {
        ferry_tag_info_t info;
        for (long i = 0; i < 1000000 && ferry_tag_probe(p.w[1], 0x55, ~0ull, &info) != FERRY_OK;
             i++)
            pair_progress(&p);
        FY_ASSERT_OK(ferry_tag_probe(p.w[1], 0x55, ~0ull, &info));
        FY_ASSERT_EQ(info.length, len);
        str = RECV();
    }
#undef RECV
    FY_ASSERT_OK(finish(&p, str, &rr, &dr));
    FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
    FY_ASSERT_EQ(rr.length, len);
    FY_ASSERT_U64_EQ(rr.tag, 0x55);
    FY_ASSERT(check_pattern(dst, len, (unsigned)len + 1));
    FY_ASSERT_EQ((unsigned char)dst[len], 0xee);
    free(src);
    free(dst);
}

/* Eager sizes (one piece to several), around the thresholds, and rendezvous sizes whose pieces
 * straddle every transport fragment (64k maxima in the tcp_frag/udp_frag runs). */
static void iov_sizes(void)
{
    static const size_t sizes[] = {0, 5, 1000, 8190, 70000, 300001, (3 << 20) + 5};
    pair_t p;
    pair_open(&p);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (int mode = 1; mode < 4; mode++) /* sendv only, recvv only, both */
            for (int first = 0; first < 2; first++)
                iov_roundtrip(&p, sizes[i], mode & 1, (mode & 2) != 0, first, i % 2);
    close_pair(&p);
}

/* FERRY_IOV_MAX pieces (more than a lane gathers in one operation with the headers: ferry
 * gathers them itself), eager and rendezvous, one byte short of a piece boundary in the
 * receive; and the limits: FERRY_IOV_MAX + 1, a NULL iov, a NULL piece with bytes. */
static void iov_max_and_limits(void)
{
    static const size_t lens[] = {160, 48000, 2000000};
    for (size_t k = 0; k < 3; k++) {
        size_t len = lens[k];
        pair_t p;
        pair_open(&p);
        char *src = malloc(len), *dst = calloc(1, len);
        fill_pattern(src, len, 77);
        struct iovec siov[FERRY_IOV_MAX], riov[FERRY_IOV_MAX];
        size_t piece = len / FERRY_IOV_MAX;
        for (int i = 0; i < FERRY_IOV_MAX; i++) {
            siov[i].iov_base = src + i * piece;
            siov[i].iov_len = i == FERRY_IOV_MAX - 1 ? len - i * piece : piece;
            riov[i].iov_base = dst + i * (piece - 1);
            riov[i].iov_len = i == FERRY_IOV_MAX - 1 ? len - i * (piece - 1) : piece - 1;
        }
        done_t ds = {0, 0}, dr = {0, 0};
        ferry_request_t rs = {.cb = req_cb, .user_data = &ds},
                        rr = {.cb = req_cb, .user_data = &dr};
        ferry_status_t str = ferry_tag_recvv(p.w[1], riov, FERRY_IOV_MAX, 1, ~0ull, &rr);
        ferry_status_t sts = ferry_tag_sendv(p.ep[0], 1, siov, FERRY_IOV_MAX, &rs);
        FY_ASSERT_OK(finish(&p, str, &rr, &dr));
        FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
        FY_ASSERT_EQ(rr.length, len);
        FY_ASSERT(check_pattern(dst, len, 77));
        /* without a request: copied at once, the pieces are free at return */
        FY_ASSERT_OK(ferry_tag_sendv(p.ep[0], 2, siov, FERRY_IOV_MAX, NULL));
        memset(src, 0, len);
        memset(dst, 0, len);
        dr = (done_t){0, 0};
        str = ferry_tag_recv(p.w[1], dst, len, 2, ~0ull, &rr);
        FY_ASSERT_OK(finish(&p, str, &rr, &dr));
        FY_ASSERT(check_pattern(dst, len, 77));
        free(src);
        free(dst);
        close_pair(&p);
    }
    pair_t p;
    pair_open(&p);
    char b[64];
    struct iovec many[FERRY_IOV_MAX + 1];
    for (int i = 0; i <= FERRY_IOV_MAX; i++)
        many[i] = (struct iovec){b, 1};
    ferry_request_t r = {0};
    ferry_tag_message_t *msg = NULL;
    FY_ASSERT_STATUS(ferry_tag_sendv(p.ep[0], 1, many, FERRY_IOV_MAX + 1, &r),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_ssendv(p.ep[0], 1, many, FERRY_IOV_MAX + 1, &r),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_recvv(p.w[1], many, FERRY_IOV_MAX + 1, 1, ~0ull, &r),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_sendv(p.ep[0], 1, NULL, 2, &r), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_recvv(p.w[1], NULL, 1, 1, ~0ull, &r), FERRY_ERR_INVALID_PARAM);
    struct iovec bad[2] = {{b, 4}, {NULL, 4}};
    FY_ASSERT_STATUS(ferry_tag_sendv(p.ep[0], 1, bad, 2, &r), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_recvv(p.w[1], bad, 2, 1, ~0ull, &r), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_sendv(NULL, 1, many, 1, &r), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_ssend(NULL, 1, b, 1, &r), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_mprobe(p.w[1], 0, 0, NULL, &msg), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_mrecv(p.w[1], NULL, b, 1, &r), FERRY_ERR_INVALID_PARAM);
    /* a handle mprobe never gave */
    FY_ASSERT_STATUS(ferry_tag_mrecv(p.w[1], (ferry_tag_message_t *)b, b, 1, &r),
                     FERRY_ERR_INVALID_PARAM);
    /* the receiver's pieces of zero length only: an empty message fits, a byte truncates */
    struct iovec empty[3] = {{NULL, 0}, {b, 0}, {NULL, 0}};
    done_t d = {0, 0};
    ferry_request_t rr = {.cb = req_cb, .user_data = &d};
    FY_ASSERT_OK(ferry_tag_sendv(p.ep[0], 3, empty, 3, NULL));
    FY_ASSERT_OK(ferry_tag_send(p.ep[0], 4, b, 1, NULL));
    FY_ASSERT_OK(finish(&p, ferry_tag_recvv(p.w[1], empty, 3, 3, ~0ull, &rr), &rr, &d));
    FY_ASSERT_EQ(rr.length, 0);
    d = (done_t){0, 0};
    FY_ASSERT_STATUS(finish(&p, ferry_tag_recvv(p.w[1], empty, 3, 4, ~0ull, &rr), &rr, &d),
                     FERRY_ERR_MESSAGE_TRUNCATED);
    close_pair(&p);
}

/* A message longer than the receiver's pieces fills them all and says TRUNCATED. */
static void iov_truncation(void)
{
    static const size_t lens[] = {3000, 1 << 20};
    for (int k = 0; k < 2; k++)
        for (int first = 0; first < 2; first++) {
            size_t len = lens[k];
            pair_t p;
            pair_open(&p);
            char *src = malloc(len), *dst = malloc(len);
            fill_pattern(src, len, 21);
            memset(dst, 0xee, len);
            struct iovec riov[3] = {{dst, 100}, {dst + 100, 0}, {dst + 100, len / 2 - 100}};
            done_t ds = {0, 0}, dr = {0, 0};
            ferry_request_t rs = {.cb = req_cb, .user_data = &ds},
                            rr = {.cb = req_cb, .user_data = &dr};
            ferry_status_t str = FERRY_INPROGRESS;
            if (first)
                str = ferry_tag_recvv(p.w[1], riov, 3, 6, ~0ull, &rr);
            ferry_status_t sts = ferry_tag_send(p.ep[0], 6, src, len, &rs);
            if (!first) {
                settle(&p);
                str = ferry_tag_recvv(p.w[1], riov, 3, 6, ~0ull, &rr);
            }
            FY_ASSERT_STATUS(finish(&p, str, &rr, &dr), FERRY_ERR_MESSAGE_TRUNCATED);
            FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
            FY_ASSERT_EQ(rr.length, len / 2);
            FY_ASSERT_MEM_EQ(dst, src, len / 2);
            FY_ASSERT_EQ((unsigned char)dst[len / 2], 0xee);
            free(src);
            free(dst);
            close_pair(&p);
        }
}

/* A synchronous send stays incomplete while its message waits unexpected, and completes when a
 * receive (or an mprobe) takes it; expected, it completes after the match.  Eager and
 * rendezvous sizes, contiguous and from pieces. */
static void ssend_waits_for_match(void)
{
    static const size_t lens[] = {0, 100, 20000, 1 << 20};
    pair_t p;
    pair_open(&p);
    for (size_t k = 0; k < 4; k++)
        for (int how = 0; how < 3; how++) { /* recv late, mprobe late, recv first */
            size_t len = lens[k];
            char *src = malloc(len + 1), *dst = calloc(1, len + 1);
            fill_pattern(src, len, 31);
            done_t ds = {0, 0}, dr = {0, 0};
            ferry_request_t rs = {.cb = req_cb, .user_data = &ds},
                            rr = {.cb = req_cb, .user_data = &dr};
            ferry_status_t str = FERRY_INPROGRESS, sts;
            if (how == 2)
                str = ferry_tag_recv(p.w[1], dst, len, 8, ~0ull, &rr);
            if (k % 2) {
                struct iovec v[2] = {{src, len / 3}, {src + len / 3, len - len / 3}};
                sts = ferry_tag_ssendv(p.ep[0], 8, v, 2, &rs);
            } else {
                sts = ferry_tag_ssend(p.ep[0], 8, src, len, &rs);
            }
            FY_ASSERT_STATUS(sts, FERRY_INPROGRESS);
            if (how != 2) {
                settle(&p);
                FY_ASSERT_EQ(ds.calls, 0); /* unexpected at the receiver: not matched yet */
                ferry_tag_info_t info;
                FY_ASSERT_OK(ferry_tag_probe(p.w[1], 8, ~0ull, &info));
                settle(&p);
                FY_ASSERT_EQ(ds.calls, 0); /* a probe is no match */
                if (how == 0) {
                    str = ferry_tag_recv(p.w[1], dst, len, 8, ~0ull, &rr);
                } else {
                    ferry_tag_message_t *msg;
                    FY_ASSERT_OK(ferry_tag_mprobe(p.w[1], 8, ~0ull, &info, &msg));
                    if (len < 4096) { /* eager: the mprobe is the match */
                        FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
                    }
                    str = ferry_tag_mrecv(p.w[1], msg, dst, len, &rr);
                }
            }
            FY_ASSERT_OK(finish(&p, str, &rr, &dr));
            if (ds.calls == 0)
                FY_ASSERT_OK(finish(&p, sts, &rs, &ds));
            FY_ASSERT_OK(ds.st);
            FY_ASSERT_EQ(rr.length, len);
            FY_ASSERT(check_pattern(dst, len, 31));
            free(src);
            free(dst);
        }
    close_pair(&p);
}

typedef struct recv_side {
    ferry_worker_t *w;
    ferry_request_t req;
    int stop;
} recv_side_t;

static void *recv_side_run(void *arg)
{
    recv_side_t *r = arg;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE))
        ferry_worker_progress(r->w);
    return NULL;
}

/* Given no request, ferry_tag_ssend blocks until matched: the receiver is another thread
 * driving its worker (a receive posted late, so the message first waits unexpected). */
static void ssend_blocking(void)
{
    static const size_t lens[] = {16, 1 << 20};
    for (int k = 0; k < 2; k++) {
        size_t len = lens[k];
        pair_t p;
        pair_open(&p);
        char *src = malloc(len), *dst = calloc(1, len);
        fill_pattern(src, len, 61);
        recv_side_t r = {.w = p.w[1]};
        FY_ASSERT_STATUS(ferry_tag_recv(p.w[1], dst, len, 5, ~0ull, &r.req), FERRY_INPROGRESS);
        pthread_t th;
        FY_ASSERT_EQ(pthread_create(&th, NULL, recv_side_run, &r), 0);
        FY_ASSERT_OK(ferry_tag_ssend(p.ep[0], 5, src, len, NULL));
        /* matched: the receive has taken the message (its data may still be moving) */
        for (long i = 0;
             i < 100000000 && __atomic_load_n(&r.req.status, __ATOMIC_ACQUIRE) == FERRY_INPROGRESS;
             i++)
            ferry_worker_progress(p.w[0]);
        __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
        FY_ASSERT_EQ(pthread_join(th, NULL), 0);
        FY_ASSERT_OK(r.req.status);
        FY_ASSERT(check_pattern(dst, len, 61));
        free(src);
        free(dst);
        close_pair(&p);
    }
}

/* mprobe takes the message: probe and receives no longer see it, a later message of the same
 * tag goes to the posted receive; mrecv gets exactly the probed one (eager and rendezvous,
 * contiguous and into pieces); a handle is good for one mrecv. */
static void mprobe_mrecv(void)
{
    static const size_t lens[] = {64, 1 << 20};
    for (int k = 0; k < 2; k++)
        for (int vec = 0; vec < 2; vec++) {
            size_t len = lens[k];
            pair_t p;
            pair_open(&p);
            char *a = malloc(len), *b = malloc(len), *da = calloc(1, len), *db = calloc(1, len);
            fill_pattern(a, len, 41);
            fill_pattern(b, len, 42);
            done_t sa = {0, 0}, sb = {0, 0}, rb = {0, 0}, ra = {0, 0};
            ferry_request_t rsa = {.cb = req_cb, .user_data = &sa},
                            rsb = {.cb = req_cb, .user_data = &sb},
                            rrb = {.cb = req_cb, .user_data = &rb},
                            rra = {.cb = req_cb, .user_data = &ra};
            ferry_status_t st_a = ferry_tag_send(p.ep[0], 0x900, a, len, &rsa);
            ferry_tag_info_t info;
            ferry_tag_message_t *msg = NULL;
            for (long i = 0;
                 i < 1000000 && ferry_tag_mprobe(p.w[1], 0x900, ~0ull, &info, &msg) != FERRY_OK;
                 i++)
                pair_progress(&p);
            FY_ASSERT(msg != NULL);
            FY_ASSERT_U64_EQ(info.tag, 0x900);
            FY_ASSERT_EQ(info.length, len);
            FY_ASSERT_STATUS(ferry_tag_probe(p.w[1], 0x900, ~0ull, &info), FERRY_ERR_NO_MESSAGE);
            ferry_tag_message_t *again;
            FY_ASSERT_STATUS(ferry_tag_mprobe(p.w[1], 0, 0, &info, &again), FERRY_ERR_NO_MESSAGE);
            /* a wildcard receive does not steal it: it takes the next message */
            ferry_status_t st_rb = ferry_tag_recv(p.w[1], db, len, 0, 0, &rrb);
            FY_ASSERT_STATUS(st_rb, FERRY_INPROGRESS);
            settle(&p);
            FY_ASSERT_EQ(rb.calls, 0);
            ferry_status_t st_b = ferry_tag_send(p.ep[0], 0x900, b, len, &rsb);
            FY_ASSERT_OK(finish(&p, st_rb, &rrb, &rb));
            FY_ASSERT(check_pattern(db, len, 42));
            ferry_status_t st_ra;
            if (vec) {
                struct iovec v[3] = {{da, 10}, {da + 10, 0}, {da + 10, len - 10}};
                st_ra = ferry_tag_mrecvv(p.w[1], msg, v, 3, &rra);
            } else {
                st_ra = ferry_tag_mrecv(p.w[1], msg, da, len, &rra);
            }
            FY_ASSERT_OK(finish(&p, st_ra, &rra, &ra));
            FY_ASSERT_EQ(rra.length, len);
            FY_ASSERT_U64_EQ(rra.tag, 0x900);
            FY_ASSERT(check_pattern(da, len, 41));
            FY_ASSERT_OK(finish(&p, st_a, &rsa, &sa));
            FY_ASSERT_OK(finish(&p, st_b, &rsb, &sb));
            /* received: the handle is spent */
            FY_ASSERT_STATUS(ferry_tag_mrecv(p.w[1], msg, da, len, &rra), FERRY_ERR_INVALID_PARAM);
            free(a);
            free(b);
            free(da);
            free(db);
            close_pair(&p);
        }
}

/* A handle never received is freed with its worker (the sanitizer build checks no leak), an
 * mprobed rendezvous included (its sender's close by force completes the send CANCELED). */
static void mprobe_unreceived(void)
{
    pair_t p;
    pair_open(&p);
    char small[32] = {1}, *big = malloc(1 << 20);
    done_t ds = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds};
    FY_ASSERT_OK(ferry_tag_send(p.ep[0], 1, small, sizeof(small), NULL));
    FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], 2, big, 1 << 20, &rs), FERRY_INPROGRESS);
    ferry_tag_info_t info;
    ferry_tag_message_t *m1 = NULL, *m2 = NULL;
    for (long i = 0; i < 1000000 && ferry_tag_mprobe(p.w[1], 1, ~0ull, &info, &m1) != FERRY_OK; i++)
        pair_progress(&p);
    for (long i = 0; i < 1000000 && ferry_tag_mprobe(p.w[1], 2, ~0ull, &info, &m2) != FERRY_OK; i++)
        pair_progress(&p);
    FY_ASSERT(m1 != NULL && m2 != NULL);
    done_t dr = {0, 0};
    ferry_request_t rr = {.cb = req_cb, .user_data = &dr};
    char *dst = malloc(1 << 20);
    if (!same_host_memory()) {
        /* over a network the ABORT of a close by force is best effort: receive it instead */
        FY_ASSERT_OK(finish(&p, ferry_tag_mrecv(p.w[1], m2, dst, 1 << 20, &rr), &rr, &dr));
        FY_ASSERT_OK(finish(&p, FERRY_INPROGRESS, &rs, &ds));
        free(dst);
        free(big);
        close_pair(&p); /* m1 is freed with w[1] */
        return;
    }
    FY_ASSERT_OK(ferry_ep_close(p.ep[0], FERRY_EP_CLOSE_FORCE, NULL));
    p.ep[0] = NULL;
    FY_ASSERT_STATUS(finish(&p, FERRY_INPROGRESS, &rs, &ds), FERRY_ERR_CANCELED);
    /* the receiver hears the rendezvous is gone: mrecv says so instead of reading */
    settle(&p);
    FY_ASSERT_STATUS(finish(&p, ferry_tag_mrecv(p.w[1], m2, dst, 1 << 20, &rr), &rr, &dr),
                     FERRY_ERR_CANCELED);
    free(dst);
    free(big);
    close_pair(&p); /* m1 is freed with w[1] */
}

/* Fill the endpoint until a small send (which never goes zero-copy) is queued: it returns
 * INPROGRESS only when the transport refused it.  Returns the number of messages sent (tags
 * 0..n-1, all started), the queued one being tag n with request *rq. */
static long flood_until_queued(pair_t *p, char *msg, size_t len, ferry_request_t *rq, done_t *d)
{
    for (long n = 0; n < 400000; n++) {
        *d = (done_t){0, 0};
        ferry_status_t st = ferry_tag_send(p->ep[0], (uint64_t)n, msg, len, rq);
        if (st == FERRY_INPROGRESS)
            return n;
        FY_ASSERT_OK(st);
        if (n % 64 == 0)
            ferry_worker_progress(p->w[0]); /* the sender only: the receiver is stalled */
    }
    FY_ASSERT_MSG(0, "400000 small sends were all taken at once: nothing got queued");
    return -1;
}

/* Sends still queued on their endpoint (behind a full transport) are cancelled: they complete
 * CANCELED and never arrive, and what was queued after them still does, in order.  A send
 * already on the wire answers BUSY and completes normally. */
static void cancel_queued_send(void)
{
    pair_t p;
    pair_open(&p);
    char msg[256];
    memset(msg, 0x3c, sizeof(msg));
    ferry_request_t rq[4];
    done_t d[4];
    for (int i = 0; i < 4; i++)
        rq[i] = (ferry_request_t){.cb = req_cb, .user_data = &d[i]};
    size_t big = 1 << 20;
    char *src, *dst = calloc(1, big), got[256];
    done_t dr = {0, 0};
    ferry_request_t rr = {.cb = req_cb, .user_data = &dr};
    ferry_tag_info_t info;
    ferry_status_t sts;
    if (is_udp())
        goto on_the_wire; /* udp takes every send into its own queue behind the window */
    /* a put queued behind the flood too: the target must never see it */
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                             .length = 4096,
                             .flags = FERRY_MEM_ALLOCATE};
    ferry_mem_t *mem;
    FY_ASSERT_OK(ferry_mem_map(p.ctx, &mp, &mem));
    void *tbuf;
    size_t tlen;
    FY_ASSERT_OK(ferry_mem_query(mem, &tbuf, &tlen));
    memset(tbuf, 0, tlen);
    char rkb[1024];
    size_t rkl = sizeof(rkb);
    ferry_rkey_t *rk;
    FY_ASSERT_OK(ferry_rkey_pack(p.ctx, mem, rkb, &rkl));
    FY_ASSERT_OK(ferry_rkey_unpack(p.ep[0], rkb, rkl, &rk));
    done_t dput = {0, 0};
    ferry_request_t rput = {.cb = req_cb, .user_data = &dput};
    long n = flood_until_queued(&p, msg, sizeof(msg), &rq[0], &d[0]);
    FY_ASSERT_STATUS(ferry_put(p.ep[0], msg, 64, (uint64_t)(uintptr_t)tbuf, rk, &rput),
                     FERRY_INPROGRESS);
    FY_ASSERT_OK(ferry_request_cancel(p.w[0], &rput));
    /* behind it: a rendezvous (its RTS queued), a synchronous eager send, one to keep */
    src = malloc(big);
    fill_pattern(src, big, 51);
    FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], 1000001, src, big, &rq[1]), FERRY_INPROGRESS);
    d[1] = d[2] = d[3] = (done_t){0, 0};
    FY_ASSERT_STATUS(ferry_tag_ssend(p.ep[0], 1000002, msg, 100, &rq[2]), FERRY_INPROGRESS);
    FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], 1000003, msg, 200, &rq[3]), FERRY_INPROGRESS);
    FY_ASSERT_OK(ferry_request_cancel(p.w[0], &rq[0]));
    FY_ASSERT_OK(ferry_request_cancel(p.w[0], &rq[1]));
    FY_ASSERT_OK(ferry_request_cancel(p.w[0], &rq[2]));
    for (int i = 0; i < 3; i++)
        FY_ASSERT_STATUS(finish(&p, FERRY_INPROGRESS, &rq[i], &d[i]), FERRY_ERR_CANCELED);
    FY_ASSERT_STATUS(ferry_request_cancel(p.w[0], &rq[0]), FERRY_ERR_NO_ELEM); /* completed */
    free(src); /* the receiver must never read it (the sanitizer build would see it) */
    /* everything started arrives, in order; the cancelled ones never */
    for (long i = 0; i < n; i++) {
        dr = (done_t){0, 0};
        ferry_status_t st = ferry_tag_recv(p.w[1], got, sizeof(got), 0, 0, &rr);
        FY_ASSERT_OK(finish(&p, st, &rr, &dr));
        FY_ASSERT_U64_EQ(rr.tag, (uint64_t)i);
    }
    dr = (done_t){0, 0};
    FY_ASSERT_OK(finish(&p, ferry_tag_recv(p.w[1], got, sizeof(got), 0, 0, &rr), &rr, &dr));
    FY_ASSERT_U64_EQ(rr.tag, 1000003);
    FY_ASSERT_EQ(rr.length, 200);
    FY_ASSERT_OK(finish(&p, FERRY_INPROGRESS, &rq[3], &d[3]));
    FY_ASSERT_STATUS(finish(&p, FERRY_INPROGRESS, &rput, &dput), FERRY_ERR_CANCELED);
    done_t df = {0, 0};
    ferry_request_t rf = {.cb = req_cb, .user_data = &df};
    FY_ASSERT_OK(finish(&p, ferry_ep_flush(p.ep[0], &rf), &rf, &df));
    for (size_t i = 0; i < 64; i++)
        FY_ASSERT_EQ(((unsigned char *)tbuf)[i], 0);
    ferry_rkey_destroy(rk);
    FY_ASSERT_OK(ferry_mem_unmap(p.ctx, mem));
    settle(&p);
    FY_ASSERT_STATUS(ferry_tag_probe(p.w[1], 0, 0, &info), FERRY_ERR_NO_MESSAGE);
on_the_wire:
    /* on the wire: a rendezvous whose RTS left is no longer cancellable */
    src = malloc(big);
    fill_pattern(src, big, 52);
    d[1] = (done_t){0, 0};
    sts = ferry_tag_send(p.ep[0], 7, src, big, &rq[1]);
    FY_ASSERT_STATUS(sts, FERRY_INPROGRESS);
    settle(&p);
    FY_ASSERT_STATUS(ferry_request_cancel(p.w[0], &rq[1]), FERRY_ERR_BUSY);
    dr = (done_t){0, 0};
    FY_ASSERT_OK(finish(&p, ferry_tag_recv(p.w[1], dst, big, 7, ~0ull, &rr), &rr, &dr));
    FY_ASSERT_OK(finish(&p, sts, &rq[1], &d[1]));
    FY_ASSERT(check_pattern(dst, big, 52));
    /* and a synchronous send on the wire, waiting for its match */
    d[2] = (done_t){0, 0};
    sts = ferry_tag_ssend(p.ep[0], 9, msg, 10, &rq[2]);
    FY_ASSERT_STATUS(sts, FERRY_INPROGRESS);
    settle(&p);
    FY_ASSERT_STATUS(ferry_request_cancel(p.w[0], &rq[2]), FERRY_ERR_BUSY);
    dr = (done_t){0, 0};
    FY_ASSERT_OK(finish(&p, ferry_tag_recv(p.w[1], got, sizeof(got), 9, ~0ull, &rr), &rr, &dr));
    FY_ASSERT_OK(finish(&p, sts, &rq[2], &d[2]));
    free(src);
    free(dst);
    close_pair(&p);
}

FYTEST_MAIN(FYTEST_CASE(iov_sizes), FYTEST_CASE(iov_max_and_limits), FYTEST_CASE(iov_truncation),
            FYTEST_CASE(ssend_waits_for_match), FYTEST_CASE(ssend_blocking),
            FYTEST_CASE(mprobe_mrecv), FYTEST_CASE(mprobe_unreceived),
            FYTEST_CASE(cancel_queued_send))
