/*
 * ferry_perf_tests.c - the measurement loops of ferry_perf: for every test, what the
 * initiator does (and times) and what the responder does.
 *
 * Policy, shared by every loop:
 *  - Busy polling: a loop waits by calling ferry_worker_progress() until a counter moves; it
 *    never sleeps (two processes on two cores).  A watchdog reads the clock only every 64k
 *    idle polls, so the fast path costs one increment; it turns a lost message into an error
 *    naming what was awaited instead of a hang.
 *  - Requests are caller-owned slots in a ring, one per operation that may be in flight.  An
 *    operation that completes at once (FERRY_OK) costs nothing more; INPROGRESS marks the
 *    slot busy until its callback.  Sends go from one reused buffer (zero-copy friendly);
 *    in check mode (-c) each slot has its own buffer and every payload carries a pattern
 *    that is a function of its sequence number, verified at the receiver.
 *  - Latency: one clock read per iteration; ping-pong tests halve the round trip.  Get and
 *    fetching atomics report the time of one complete operation (a round trip, not halved),
 *    as ucx_perftest does.  Bandwidth: the time from the end of warm-up to the last
 *    acknowledgement (AM/tag) or remote completion (put: flush; get: local completion).
 *  - Windows (bandwidth tests): the sender issues W messages and waits for the receiver's
 *    acknowledgement of the window, as osu_bw does; so a rate test includes one round trip
 *    per W messages, the same for ferry and for the MPI reference in bench/.  tag_stream
 *    counts as ucx_perftest's tag_bw does, for the comparison with it: the receiver keeps W
 *    receives posted, the sender streams (at most W sends outstanding) and only the end is
 *    acknowledged, so no round trip per window.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry_perf.h"
#include "util/status.h"

#define PERF_SPIN_CHECK 0xffffu

static ferry_status_t perf_watchdog(perf_t *p, uint64_t *t0, const char *what, uint64_t seq,
                                    int bounded)
{
    if (p->ep_failed) {
        fprintf(stderr, "ferry_perf: the connection to the peer failed while waiting for %s\n",
                what);
        return FERRY_ERR_NOT_CONNECTED;
    }
    if (p->op_status < 0) {
        fprintf(stderr, "ferry_perf: an operation failed (%s) while waiting for %s\n",
                ferry_status_string(p->op_status), what);
        return p->op_status;
    }
    if (!p->initiator && p->inbox_count > 0)
        return FERRY_ERR_CANCELED; /* the initiator ended the measurement (it failed) */
    uint64_t now = (uint64_t)perf_ticks_to_ns(perf_ticks());
    if (*t0 == 0) {
        *t0 = now;
    } else if (bounded && p->timeout_ns && now - *t0 > p->timeout_ns) {
        fprintf(stderr,
                "ferry_perf: timed out after %.0f s waiting for %s (%s, %zu B, operation %llu;"
                " %llu messages and %llu acks received)\n",
                (double)p->timeout_ns / 1e9, what, perf_tests[p->cur.test].name, p->cur.size,
                (unsigned long long)seq, (unsigned long long)p->recv_count,
                (unsigned long long)p->ack_count);
        return FERRY_ERR_TIMED_OUT;
    }
    return FERRY_OK;
}

/* Progress until cond holds.  Returns from the calling function on failure or timeout. */
#define PERF_WAIT_(p, cond, what, seq, bounded)                                                    \
    do {                                                                                           \
        uint64_t spins_ = 0, t0_ = 0;                                                              \
        while (!(cond)) {                                                                          \
            ferry_worker_progress((p)->worker);                                                    \
            if (__builtin_expect((++spins_ & PERF_SPIN_CHECK) == 0, 0)) {                          \
                ferry_status_t wst_ = perf_watchdog((p), &t0_, (what), (seq), (bounded));          \
                if (wst_ != FERRY_OK)                                                              \
                    return wst_;                                                                   \
            }                                                                                      \
        }                                                                                          \
    } while (0)
#define PERF_WAIT(p, cond, what, seq) PERF_WAIT_(p, cond, what, seq, 1)

/* Issue an operation, retrying on back-pressure; a slot (may be NULL) becomes busy on
 * INPROGRESS.  Returns from the calling function on failure. */
#define PERF_POST(p, s, call, what)                                                                \
    do {                                                                                           \
        ferry_status_t pst_;                                                                       \
        uint64_t pspins_ = 0, pt0_ = 0;                                                            \
        while ((pst_ = (call)) == FERRY_ERR_NO_RESOURCE) {                                         \
            ferry_worker_progress((p)->worker);                                                    \
            if ((++pspins_ & 0xfffu) == 0) {                                                       \
                ferry_status_t wst_ = perf_watchdog((p), &pt0_, "resources for " what, 0, 1);      \
                if (wst_ != FERRY_OK)                                                              \
                    return wst_;                                                                   \
            }                                                                                      \
        }                                                                                          \
        if (pst_ == FERRY_INPROGRESS) {                                                            \
            perf_slot_t *ps_ = (s);                                                                \
            if (ps_ != NULL)                                                                       \
                ps_->busy = 1;                                                                     \
        } else if (pst_ != FERRY_OK) {                                                             \
            if (pst_ != FERRY_ERR_UNSUPPORTED)                                                     \
                fprintf(stderr, "ferry_perf: %s failed: %s\n", what, ferry_status_string(pst_));   \
            return pst_;                                                                           \
        }                                                                                          \
    } while (0)

static void slot_cb(ferry_request_t *req, ferry_status_t status)
{
    perf_slot_t *s = (perf_slot_t *)req;
    s->busy = 0;
    if (status < 0 && s->perf->op_status == FERRY_OK)
        s->perf->op_status = status;
}

/* Take a slot for a new operation (it must be idle). */
static ferry_request_t *slot_req(perf_slot_t *s)
{
    s->req.cb = slot_cb;
    s->req.user_data = s;
    return &s->req;
}

static void verify_error(perf_t *p, const char *what, uint64_t seq, size_t len)
{
    if (p->errors++ < 10)
        fprintf(stderr, "ferry_perf: verification error: %s %llu (%zu B) of %s, size %zu\n", what,
                (unsigned long long)seq, len, perf_tests[p->cur.test].name, p->cur.size);
}

/* ---- the pattern -------------------------------------------------------------------------- */

static inline uint64_t pattern_word(uint64_t seq, unsigned dir, uint64_t k)
{
    uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)dir << 56) ^ (k * 0x100000001b3ull);
    x ^= x >> 31;
    return x * 0xbf58476d1ce4e5b9ull;
}

void perf_pattern_fill(void *buf, size_t len, uint64_t seq, unsigned dir)
{
    uint8_t *b = buf;
    size_t k = 0;
    for (; (k + 1) * 8 <= len; k++) {
        uint64_t w = pattern_word(seq, dir, k);
        memcpy(b + k * 8, &w, 8);
    }
    if (k * 8 < len) {
        uint64_t w = pattern_word(seq, dir, k);
        memcpy(b + k * 8, &w, len - k * 8);
    }
}

int perf_pattern_check(const void *buf, size_t len, uint64_t seq, unsigned dir)
{
    const uint8_t *b = buf;
    size_t k = 0;
    for (; (k + 1) * 8 <= len; k++) {
        uint64_t w = pattern_word(seq, dir, k);
        if (memcmp(b + k * 8, &w, 8) != 0)
            return 0;
    }
    if (k * 8 < len) {
        uint64_t w = pattern_word(seq, dir, k);
        if (memcmp(b + k * 8, &w, len - k * 8) != 0)
            return 0;
    }
    return 1;
}

/* ---- handlers ----------------------------------------------------------------------------- */

ferry_status_t perf_data_cb(void *arg, const void *header, size_t header_len, const void *data,
                            size_t data_len, ferry_ep_t *reply_ep)
{
    perf_t *p = arg;
    if (p->cur.flags & PERF_FLAG_CHECK) {
        unsigned dir = p->initiator ? PERF_DIR_R2I : PERF_DIR_I2R;
        if (data_len != p->cur.size || !perf_pattern_check(data, data_len, p->recv_count, dir))
            verify_error(p, "active message", p->recv_count, data_len);
    }
    p->recv_count++;
    return FERRY_OK;
}

ferry_status_t perf_ack_cb(void *arg, const void *header, size_t header_len, const void *data,
                           size_t data_len, ferry_ep_t *reply_ep)
{
    perf_t *p = arg;
    p->ack_count++;
    return FERRY_OK;
}

unsigned perf_nslots(const perf_t *p, const perf_params_t *prm)
{
    if (perf_tests[prm->test].kind != PERF_KIND_BW)
        return 1;
    unsigned n = prm->window;
    if (n > p->nslots_max)
        n = p->nslots_max;
    if ((prm->flags & PERF_FLAG_CHECK) && prm->size > 0 && p->buf_len / prm->size < n)
        n = (unsigned)(p->buf_len / prm->size);
    return n ? n : 1;
}

static uint8_t *slot_buf(uint8_t *base, const perf_params_t *prm, unsigned k)
{
    return (prm->flags & PERF_FLAG_CHECK) ? base + (size_t)k * prm->size : base;
}

static ferry_status_t wait_idle(perf_t *p, unsigned n)
{
    for (unsigned k = 0; k < n; k++)
        PERF_WAIT(p, !p->slots[k].busy, "outstanding operations to complete", k);
    return p->op_status;
}

static ferry_status_t flush_ep(perf_t *p)
{
    perf_slot_t *s = &p->aux;
    PERF_POST(p, s, ferry_ep_flush(p->ep, slot_req(s)), "ferry_ep_flush");
    PERF_WAIT(p, !s->busy, "a flush", 0);
    return p->op_status;
}

static ferry_status_t send_ack(perf_t *p)
{
    static const uint8_t none;
    PERF_POST(p, (perf_slot_t *)NULL, ferry_am_send(p->ep, PERF_AM_ACK, NULL, 0, &none, 0, NULL),
              "ferry_am_send (ack)");
    return FERRY_OK;
}

/* ---- active messages and tags: ping-pong ----------------------------------------------------- */

static ferry_status_t send_data(perf_t *p, perf_slot_t *s, const uint8_t *buf, size_t size)
{
    PERF_POST(p, s, ferry_am_send(p->ep, PERF_AM_DATA, NULL, 0, buf, size, slot_req(s)),
              "ferry_am_send");
    return FERRY_OK;
}

static ferry_status_t send_tag(perf_t *p, perf_slot_t *s, uint64_t tag, const uint8_t *buf,
                               size_t size)
{
    PERF_POST(p, s, ferry_tag_send(p->ep, tag, buf, size, slot_req(s)), "ferry_tag_send");
    return FERRY_OK;
}

/* Post a tag receive into buf on slot s: the slot is busy until the message is there. */
static ferry_status_t recv_tag(perf_t *p, perf_slot_t *s, uint64_t tag, uint8_t *buf, size_t size)
{
    PERF_POST(p, s, ferry_tag_recv(p->worker, buf, size, tag, ~0ull, slot_req(s)),
              "ferry_tag_recv");
    return FERRY_OK;
}

static void check_tag_recv(perf_t *p, perf_slot_t *s, const uint8_t *buf, uint64_t seq,
                           unsigned dir)
{
    if ((p->cur.flags & PERF_FLAG_CHECK) &&
        (s->req.length != p->cur.size || !perf_pattern_check(buf, p->cur.size, seq, dir)))
        verify_error(p, "tagged message", seq, s->req.length);
}

#define PERF_TAG_PING 0x7065726600000001ull
#define PERF_TAG_PONG 0x7065726600000002ull

static ferry_status_t pingpong_initiator(perf_t *p, const perf_params_t *prm, uint64_t *ticks)
{
    int check = prm->flags & PERF_FLAG_CHECK, tag = perf_tests[prm->test].tag;
    perf_slot_t *s = &p->slots[0], *r = &p->aux;
    uint64_t total = prm->warmup + prm->iters, t_prev = perf_ticks();
    ferry_status_t st;

    for (uint64_t i = 0; i < total; i++) {
        PERF_WAIT(p, !s->busy, "the previous send to complete", i);
        if (check)
            perf_pattern_fill(p->sbuf, prm->size, i, PERF_DIR_I2R);
        if (tag) {
            if ((st = recv_tag(p, r, PERF_TAG_PONG, p->rbuf, prm->size)) != FERRY_OK ||
                (st = send_tag(p, s, PERF_TAG_PING, p->sbuf, prm->size)) != FERRY_OK)
                return st;
            PERF_WAIT(p, !r->busy, "the reply", i);
            check_tag_recv(p, r, p->rbuf, i, PERF_DIR_R2I);
        } else {
            if ((st = send_data(p, s, p->sbuf, prm->size)) != FERRY_OK)
                return st;
            PERF_WAIT(p, p->recv_count > i, "the reply", i);
        }
        uint64_t t = perf_ticks();
        if (i >= prm->warmup)
            ticks[i - prm->warmup] = t - t_prev;
        t_prev = t;
    }
    return wait_idle(p, 1);
}

static ferry_status_t pingpong_responder(perf_t *p, const perf_params_t *prm)
{
    int check = prm->flags & PERF_FLAG_CHECK, tag = perf_tests[prm->test].tag;
    perf_slot_t *s = &p->slots[0], *r = &p->aux;
    uint64_t total = prm->warmup + prm->iters;
    ferry_status_t st;

    for (uint64_t i = 0; i < total; i++) {
        if (tag) {
            if ((st = recv_tag(p, r, PERF_TAG_PING, p->rbuf, prm->size)) != FERRY_OK)
                return st;
            PERF_WAIT(p, !r->busy, "a message", i);
            check_tag_recv(p, r, p->rbuf, i, PERF_DIR_I2R);
        } else {
            PERF_WAIT(p, p->recv_count > i, "a message", i);
        }
        PERF_WAIT(p, !s->busy, "the previous send to complete", i);
        if (check)
            perf_pattern_fill(p->sbuf, prm->size, i, PERF_DIR_R2I);
        st = tag ? send_tag(p, s, PERF_TAG_PONG, p->sbuf, prm->size)
                 : send_data(p, s, p->sbuf, prm->size);
        if (st != FERRY_OK)
            return st;
    }
    return wait_idle(p, 1);
}

/* ---- active messages and tags: windows --------------------------------------------------------
 */

static ferry_status_t window_initiator(perf_t *p, const perf_params_t *prm, uint64_t *elapsed)
{
    int check = prm->flags & PERF_FLAG_CHECK, tag = perf_tests[prm->test].tag;
    int stream = prm->test == PERF_TAG_STREAM; /* one acknowledgement, at the end */
    unsigned w = prm->window, ns = perf_nslots(p, prm);
    uint64_t total = prm->warmup + prm->iters, t0 = perf_ticks();
    ferry_status_t st;

    for (uint64_t win = 0; win * w < total; win++) {
        if (win * w == prm->warmup)
            t0 = perf_ticks();
        for (unsigned j = 0; j < w; j++) {
            uint64_t i = win * w + j;
            unsigned k = (unsigned)(i % ns);
            perf_slot_t *s = &p->slots[k];
            uint8_t *buf = slot_buf(p->sbuf, prm, k);
            PERF_WAIT(p, !s->busy, "a send slot", i);
            if (check)
                perf_pattern_fill(buf, prm->size, i, PERF_DIR_I2R);
            st = tag ? send_tag(p, s, PERF_TAG_PING, buf, prm->size)
                     : send_data(p, s, buf, prm->size);
            if (st != FERRY_OK)
                return st;
        }
        if (!stream || (win + 1) * w >= total)
            PERF_WAIT(p, p->ack_count > (stream ? 0 : win), "the acknowledgement of a window",
                      win * w);
    }
    *elapsed = perf_ticks() - t0;
    return wait_idle(p, ns);
}

static ferry_status_t window_responder(perf_t *p, const perf_params_t *prm)
{
    uint64_t total = prm->warmup + prm->iters;
    ferry_status_t st;

    if (!perf_tests[prm->test].tag) {
        for (uint64_t next = prm->window; next <= total; next += prm->window) {
            PERF_WAIT(p, p->recv_count >= next, "a window of messages", p->recv_count);
            if ((st = send_ack(p)) != FERRY_OK)
                return st;
        }
        return FERRY_OK;
    }

    /* Tags: keep up to ns receives posted; message i lands in slot i % ns (receives match in
     * the order posted, messages arrive in the order sent). */
    unsigned ns = perf_nslots(p, prm);
    uint64_t posted = 0, done = 0;
    uint64_t next_ack = prm->test == PERF_TAG_STREAM ? total : prm->window;
    for (; posted < total && posted < ns; posted++)
        if ((st = recv_tag(p, &p->slots[posted], PERF_TAG_PING,
                           slot_buf(p->rbuf, prm, (unsigned)posted), prm->size)) != FERRY_OK)
            return st;
    while (done < total) {
        unsigned k = (unsigned)(done % ns);
        perf_slot_t *s = &p->slots[k];
        PERF_WAIT(p, !s->busy, "a tagged message", done);
        check_tag_recv(p, s, slot_buf(p->rbuf, prm, k), done, PERF_DIR_I2R);
        done++;
        if (posted < total) {
            if ((st = recv_tag(p, s, PERF_TAG_PING, slot_buf(p->rbuf, prm, k), prm->size)) !=
                FERRY_OK)
                return st;
            posted++;
        }
        if (done == next_ack) {
            if ((st = send_ack(p)) != FERRY_OK)
                return st;
            next_ack += prm->window;
        }
    }
    return FERRY_OK;
}

/* ---- RMA: put ping-pong --------------------------------------------------------------------- */

static inline uint8_t put_flag(uint64_t i)
{
    return (uint8_t)(i % 255 + 1);
}

/* Put size bytes with the flag in the last byte.  In check mode the body and the flag go as
 * two puts ordered by a fence, so a receiver that sees the flag may check the body (a single
 * copy may store its bytes in any order); timed mode uses one put, as ucx_perftest does. */
static ferry_status_t put_flagged(perf_t *p, perf_slot_t *s, size_t size, uint64_t i, unsigned dir)
{
    uint8_t *buf = p->sbuf;
    ferry_status_t st;
    PERF_WAIT(p, !s->busy, "the previous put to complete", i);
    if (!(p->cur.flags & PERF_FLAG_CHECK)) {
        buf[size - 1] = put_flag(i);
        PERF_POST(p, s, ferry_put(p->ep, buf, size, p->remote_addr, p->rkey, slot_req(s)),
                  "ferry_put");
        return FERRY_OK;
    }
    perf_pattern_fill(buf, size - 1, i, dir);
    buf[size - 1] = put_flag(i);
    if (size > 1) {
        PERF_POST(p, (perf_slot_t *)NULL,
                  ferry_put(p->ep, buf, size - 1, p->remote_addr, p->rkey, NULL), "ferry_put");
        if ((st = ferry_ep_fence(p->ep)) != FERRY_OK) {
            fprintf(stderr, "ferry_perf: ferry_ep_fence failed: %s\n", ferry_status_string(st));
            return st;
        }
    }
    PERF_POST(p, (perf_slot_t *)NULL,
              ferry_put(p->ep, buf + size - 1, 1, p->remote_addr + size - 1, p->rkey, NULL),
              "ferry_put");
    return FERRY_OK;
}

/* Has the flag come?  If not, one spin-wait pause before the next progress pass: ferry's idle
 * pass is short, and reads of the flag's line back to back keep taking it from the peer's
 * store.  put_lat, 14 interleaved runs of each (2026-12-02 06:20), p50 median without -> with:
 * 8 B 0.063 -> 0.055 us, 64 B 0.060 -> 0.058.  ucx_perftest's poll runs a longer progress pass
 * between its reads of the flag. */
static inline int flag_seen(const uint8_t *flag, uint8_t want)
{
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == want)
        return 1;
    fy_cpu_relax();
    return 0;
}

static ferry_status_t wait_flag(perf_t *p, size_t size, uint64_t i, unsigned dir)
{
    const uint8_t *flag = p->region + size - 1, want = put_flag(i);
    PERF_WAIT(p, flag_seen(flag, want), "the peer's put", i);
    if ((p->cur.flags & PERF_FLAG_CHECK) && !perf_pattern_check(p->region, size - 1, i, dir))
        verify_error(p, "put", i, size);
    return FERRY_OK;
}

static ferry_status_t put_lat_initiator(perf_t *p, const perf_params_t *prm, uint64_t *ticks)
{
    perf_slot_t *s = &p->slots[0];
    uint64_t total = prm->warmup + prm->iters, t_prev = perf_ticks();
    ferry_status_t st;
    for (uint64_t i = 0; i < total; i++) {
        if ((st = put_flagged(p, s, prm->size, i, PERF_DIR_I2R)) != FERRY_OK ||
            (st = wait_flag(p, prm->size, i, PERF_DIR_R2I)) != FERRY_OK)
            return st;
        uint64_t t = perf_ticks();
        if (i >= prm->warmup)
            ticks[i - prm->warmup] = t - t_prev;
        t_prev = t;
    }
    return wait_idle(p, 1);
}

static ferry_status_t put_lat_responder(perf_t *p, const perf_params_t *prm)
{
    perf_slot_t *s = &p->slots[0];
    uint64_t total = prm->warmup + prm->iters;
    ferry_status_t st;
    for (uint64_t i = 0; i < total; i++)
        if ((st = wait_flag(p, prm->size, i, PERF_DIR_I2R)) != FERRY_OK ||
            (st = put_flagged(p, s, prm->size, i, PERF_DIR_R2I)) != FERRY_OK)
            return st;
    return wait_idle(p, 1);
}

/* ---- RMA: put and get bandwidth, get and atomic latency ----------------------------------- */

static ferry_status_t put_bw_initiator(perf_t *p, const perf_params_t *prm, uint64_t *elapsed)
{
    int check = prm->flags & PERF_FLAG_CHECK;
    unsigned ns = perf_nslots(p, prm);
    uint64_t total = prm->warmup + prm->iters, t0 = perf_ticks();
    ferry_status_t st;

    for (uint64_t i = 0; i < total; i++) {
        if (i == prm->warmup) {
            if ((st = wait_idle(p, ns)) != FERRY_OK || (i > 0 && (st = flush_ep(p)) != FERRY_OK))
                return st;
            t0 = perf_ticks();
        }
        unsigned k = (unsigned)(i % ns);
        perf_slot_t *s = &p->slots[k];
        uint8_t *buf = slot_buf(p->sbuf, prm, k);
        PERF_WAIT(p, !s->busy, "a put slot", i);
        /* Check mode: slot k writes offset k*size; a flush after every ns puts makes the final
         * content of each offset known, so the target can verify it at the end. */
        if (check && k == 0 && i > 0 && (st = flush_ep(p)) != FERRY_OK)
            return st;
        if (check)
            perf_pattern_fill(buf, prm->size, i, PERF_DIR_I2R);
        uint64_t raddr = p->remote_addr + (check ? (uint64_t)k * prm->size : 0);
        PERF_POST(p, s, ferry_put(p->ep, buf, prm->size, raddr, p->rkey, slot_req(s)), "ferry_put");
    }
    if ((st = wait_idle(p, ns)) != FERRY_OK || (st = flush_ep(p)) != FERRY_OK)
        return st;
    *elapsed = perf_ticks() - t0;
    return FERRY_OK;
}

static void check_get(perf_t *p, perf_slot_t *s, const uint8_t *buf)
{
    if ((p->cur.flags & PERF_FLAG_CHECK) && s->is_get &&
        !perf_pattern_check(buf, p->cur.size, 0, PERF_DIR_REGION))
        verify_error(p, "get", s->seq, p->cur.size);
    s->is_get = 0;
}

static ferry_status_t get_bw_initiator(perf_t *p, const perf_params_t *prm, uint64_t *elapsed)
{
    unsigned ns = perf_nslots(p, prm);
    uint64_t total = prm->warmup + prm->iters, t0 = perf_ticks();
    ferry_status_t st;

    for (uint64_t i = 0; i < total; i++) {
        if (i == prm->warmup) {
            if ((st = wait_idle(p, ns)) != FERRY_OK)
                return st;
            t0 = perf_ticks();
        }
        unsigned k = (unsigned)(i % ns);
        perf_slot_t *s = &p->slots[k];
        uint8_t *buf = slot_buf(p->rbuf, prm, k);
        PERF_WAIT(p, !s->busy, "a get slot", i);
        check_get(p, s, buf);
        s->is_get = 1;
        s->seq = i;
        PERF_POST(p, s, ferry_get(p->ep, buf, prm->size, p->remote_addr, p->rkey, slot_req(s)),
                  "ferry_get");
        if (!s->busy)
            check_get(p, s, buf);
    }
    if ((st = wait_idle(p, ns)) != FERRY_OK)
        return st;
    *elapsed = perf_ticks() - t0;
    for (unsigned k = 0; k < ns; k++)
        check_get(p, &p->slots[k], slot_buf(p->rbuf, prm, k));
    return FERRY_OK;
}

static ferry_status_t roundtrip_initiator(perf_t *p, const perf_params_t *prm, uint64_t *ticks)
{
    int amo = prm->test == PERF_AMO_LAT;
    perf_slot_t *s = &p->slots[0];
    uint64_t total = prm->warmup + prm->iters, t_prev = perf_ticks();

    for (uint64_t i = 0; i < total; i++) {
        uint64_t result = ~0ull;
        s->is_get = !amo;
        s->seq = i;
        if (amo)
            PERF_POST(p, s,
                      ferry_atomic(p->ep, FERRY_ATOMIC_ADD, 8, 1, 0, &result, p->remote_addr,
                                   p->rkey, slot_req(s)),
                      "ferry_atomic (fetch-add)");
        else
            PERF_POST(p, s,
                      ferry_get(p->ep, p->rbuf, prm->size, p->remote_addr, p->rkey, slot_req(s)),
                      "ferry_get");
        PERF_WAIT(p, !s->busy, amo ? "a fetch-add" : "a get", i);
        uint64_t t = perf_ticks();
        if (i >= prm->warmup)
            ticks[i - prm->warmup] = t - t_prev;
        t_prev = t;
        if (p->op_status < 0)
            return p->op_status;
        if (amo && (prm->flags & PERF_FLAG_CHECK) && result != i)
            verify_error(p, "fetch-add result", i, 8);
        else if (!amo)
            check_get(p, s, p->rbuf);
    }
    return FERRY_OK;
}

/* The target of one-sided tests only progresses (emulated RMA runs in its progress) until
 * the initiator says the measurement is over. */
static ferry_status_t passive_responder(perf_t *p)
{
    PERF_WAIT_(p, p->inbox_count > 0, "the end of the measurement", 0, 0);
    return FERRY_OK;
}

void perf_end_checks(perf_t *p, uint64_t ops)
{
    const perf_params_t *prm = &p->cur;
    if (!(prm->flags & PERF_FLAG_CHECK))
        return;
    if (prm->test == PERF_AMO_LAT) {
        uint64_t v;
        memcpy(&v, p->region, 8);
        if (v != ops) {
            fprintf(stderr,
                    "ferry_perf: verification error: counter is %llu after %llu fetch-adds\n",
                    (unsigned long long)v, (unsigned long long)ops);
            p->errors++;
        }
    } else if (prm->test == PERF_PUT_BW) {
        unsigned ns = perf_nslots(p, prm);
        for (unsigned k = 0; k < ns && k < ops; k++) {
            uint64_t last = k + (ops - 1 - k) / ns * ns; /* the last put to offset k */
            if (!perf_pattern_check(p->region + (size_t)k * prm->size, prm->size, last,
                                    PERF_DIR_I2R))
                verify_error(p, "put", last, prm->size);
        }
    }
}

/* ---- entry points -----------------------------------------------------------------------------
 */

ferry_status_t perf_run_initiator(perf_t *p, const perf_params_t *prm, perf_result_t *res)
{
    const perf_test_desc_t *d = &perf_tests[prm->test];
    uint64_t elapsed = 0, *ticks = NULL;
    ferry_status_t st;

    memset(res, 0, sizeof(*res));
    res->test = prm->test;
    res->size = prm->size;
    res->iters = prm->iters;
    res->window = d->kind == PERF_KIND_BW ? prm->window : 1;
    if (d->kind != PERF_KIND_BW && (ticks = calloc(prm->iters ? prm->iters : 1, 8)) == NULL)
        return FERRY_ERR_NO_MEMORY;

    switch (prm->test) {
    case PERF_AM_LAT:
    case PERF_TAG_LAT:
        st = pingpong_initiator(p, prm, ticks);
        break;
    case PERF_AM_BW:
    case PERF_AM_RATE:
    case PERF_TAG_BW:
    case PERF_TAG_STREAM:
        st = window_initiator(p, prm, &elapsed);
        break;
    case PERF_PUT_LAT:
        st = put_lat_initiator(p, prm, ticks);
        break;
    case PERF_PUT_BW:
        st = put_bw_initiator(p, prm, &elapsed);
        break;
    case PERF_GET_BW:
        st = get_bw_initiator(p, prm, &elapsed);
        break;
    case PERF_GET_LAT:
    case PERF_AMO_LAT:
        st = roundtrip_initiator(p, prm, ticks);
        break;
    default:
        st = FERRY_ERR_INVALID_PARAM;
    }
    if (st == FERRY_OK && d->kind == PERF_KIND_BW) {
        double sec = perf_ticks_to_ns(elapsed) / 1e9;
        res->has_bw = 1;
        res->bw_mbs = sec > 0 ? (double)prm->size * (double)prm->iters / sec / 1e6 : 0;
        res->rate = sec > 0 ? (double)prm->iters / sec : 0;
    } else if (st == FERRY_OK) {
        perf_stats_latency(res, ticks, prm->iters, d->kind == PERF_KIND_PINGPONG ? 2.0 : 1.0);
    }
    free(ticks);
    return st;
}

ferry_status_t perf_run_responder(perf_t *p, const perf_params_t *prm)
{
    switch (prm->test) {
    case PERF_AM_LAT:
    case PERF_TAG_LAT:
        return pingpong_responder(p, prm);
    case PERF_AM_BW:
    case PERF_AM_RATE:
    case PERF_TAG_BW:
    case PERF_TAG_STREAM:
        return window_responder(p, prm);
    case PERF_PUT_LAT:
        return put_lat_responder(p, prm);
    case PERF_PUT_BW:
    case PERF_GET_LAT:
    case PERF_GET_BW:
    case PERF_AMO_LAT:
        return passive_responder(p);
    default:
        return FERRY_ERR_INVALID_PARAM;
    }
}

int perf_tag_available(perf_t *p)
{
    ferry_tag_info_t info;
    return ferry_tag_probe(p->worker, 0, 0, &info) != FERRY_ERR_UNSUPPORTED;
}
