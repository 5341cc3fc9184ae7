/*
 * The AM calls a runtime builds on, through the public API: 16-bit AM ids, rendezvous
 * handlers (a large message announced before its data, placed where the handler says, kept
 * for later, dropped, or refused into a small buffer), and the endpoint and worker queries
 * (peer, lanes, AM sizes, counters).  CTest runs it over self, shm, tcp and udp with
 * FERRY_AM_EAGER_MAX (or the transport's own maximum) small, so a 1 MiB message is many
 * fragments; the query's am_eager_max says whether a message must arrive announced, and the
 * test checks that it did.
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "common.h"

#define DEADLINE_MS 30000
#define BIG         ((1u << 20) + 3)

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

#define PROGRESS_UNTIL(p, cond)                                                                    \
    do {                                                                                           \
        int64_t end_ = now_ms() + DEADLINE_MS;                                                     \
        while (!(cond)) {                                                                          \
            FY_ASSERT_MSG(now_ms() < end_, "waited too long for: %s", #cond);                      \
            pair_progress(p);                                                                      \
        }                                                                                          \
    } while (0)

/* Close the endpoints one after the other, each flush progressing both workers (closing both
 * at once over udp makes one side's close look like a reset to the other), then the rest. */
static void pair_end(pair_t *p)
{
    for (int i = 0; i < 2; i++) {
        done_t d = {0};
        ferry_request_t req = {.cb = req_cb, .user_data = &d};
        ferry_status_t st = ferry_ep_close(p->ep[i], FERRY_EP_CLOSE_FLUSH, &req);
        if (st == FERRY_INPROGRESS) {
            PROGRESS_UNTIL(p, d.calls == 1);
            st = d.st;
        }
        /* the second may have heard of the first's close already (one connection per pair) */
        if (!(i == 1 && st == FERRY_ERR_CONNECTION_RESET))
            FY_ASSERT_OK(st);
        p->ep[i] = NULL;
    }
    pair_close(p);
}

/* ---- 16-bit ids ---------------------------------------------------------------------------- */

typedef struct id_rx {
    unsigned count;
    unsigned last_seen;
} id_rx_t;

static ferry_status_t on_id(void *arg, const void *header, size_t header_len, const void *data,
                            size_t data_len, ferry_ep_t *reply_ep)
{
    (void)reply_ep, (void)data, (void)data_len;
    id_rx_t *rx = arg;
    unsigned v;
    FY_ASSERT_EQ(header_len, sizeof(v));
    memcpy(&v, header, sizeof(v));
    rx->last_seen = v;
    rx->count++;
    return FERRY_OK;
}

static void am_ids_16bit(void)
{
    pair_t p;
    pair_open(&p);
    const unsigned ids[] = {0, 255, 256, 40000, FERRY_AM_ID_MAX};
    const unsigned n = sizeof(ids) / sizeof(ids[0]);
    id_rx_t rx[5];
    memset(rx, 0, sizeof(rx));
    FY_ASSERT_EQ(FERRY_AM_ID_MAX, 65535);
    for (unsigned i = 0; i < n; i++)
        FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], ids[i], on_id, &rx[i]));
    FY_ASSERT_STATUS(ferry_worker_set_am_handler(p.w[1], FERRY_AM_ID_MAX + 1, on_id, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_am_send(p.ep[0], FERRY_AM_ID_MAX + 1, NULL, 0, NULL, 0, NULL),
                     FERRY_ERR_INVALID_PARAM);
    /* each id reaches its own handler, with a small message and a fragmented one */
    char *big = malloc(BIG);
    FY_ASSERT(big != NULL);
    fill_pattern(big, BIG, 1);
    for (unsigned i = 0; i < n; i++) {
        unsigned v = ids[i] ^ 0x5a5a;
        FY_ASSERT_OK(ferry_am_send(p.ep[0], ids[i], &v, sizeof(v), NULL, 0, NULL));
        FY_ASSERT_OK(ferry_am_send(p.ep[0], ids[i], &v, sizeof(v), big, BIG, NULL));
    }
    /* an id nobody registered, far above the others: dropped and counted, nothing else */
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 50000, NULL, 0, NULL, 0, NULL));
    for (unsigned i = 0; i < n; i++) {
        PROGRESS_UNTIL(&p, rx[i].count == 2);
        FY_ASSERT_EQ(rx[i].last_seen, ids[i] ^ 0x5a5a);
    }
    ferry_worker_attr_t wa = {.field_mask = FERRY_WORKER_ATTR_FIELD_COUNTERS |
                                            FERRY_WORKER_ATTR_FIELD_AM_SIZES};
    int64_t end = now_ms() + DEADLINE_MS;
    for (;;) {
        FY_ASSERT_OK(ferry_worker_query(p.w[1], &wa));
        if (wa.drops_no_handler == 1)
            break;
        FY_ASSERT_MSG(now_ms() < end, "the message to id 50000 was not counted as dropped");
        pair_progress(&p);
    }
    FY_ASSERT_EQ(wa.am_id_max, 65535u);
    FY_ASSERT_EQ(wa.am_rx_max, (size_t)BIG);
    /* removing one handler leaves the others */
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 40000, NULL, NULL));
    unsigned v = 65535 ^ 0x5a5a;
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 40000, &v, sizeof(v), NULL, 0, NULL));
    FY_ASSERT_OK(ferry_am_send(p.ep[0], FERRY_AM_ID_MAX, &v, sizeof(v), NULL, 0, NULL));
    PROGRESS_UNTIL(&p, rx[4].count == 3);
    FY_ASSERT_EQ(rx[3].count, 2u);
    free(big);
    pair_end(&p);
}

/* ---- rendezvous handlers -------------------------------------------------------------------- */

typedef struct rndv_rx {
    ferry_worker_t *w;
    int mode; /* what the handler does with a descriptor (MODE_*) */
    unsigned calls, announced, whole, bad;
    size_t data_len;
    char *buf; /* MODE_RECV: where the data goes */
    size_t buf_len;
    ferry_request_t req;
    done_t done;
    ferry_am_desc_t *kept;
    ferry_status_t recv_st;
} rndv_rx_t;

enum { MODE_RECV, MODE_KEEP, MODE_RELEASE };

static ferry_status_t on_rndv(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_am_desc_t *desc, ferry_ep_t *reply_ep)
{
    (void)reply_ep;
    rndv_rx_t *rx = arg;
    rx->calls++;
    rx->data_len = data_len;
    unsigned seed;
    FY_ASSERT_EQ(header_len, sizeof(seed));
    memcpy(&seed, header, sizeof(seed));
    if (desc == NULL) { /* whole: as an ordinary handler */
        FY_ASSERT(data != NULL || data_len == 0);
        rx->whole++;
        if (!check_pattern(data, data_len, seed))
            rx->bad++;
        return FERRY_OK;
    }
    FY_ASSERT(data == NULL);
    rx->announced++;
    switch (rx->mode) {
    case MODE_RECV:
        /* a buffer too small is refused and the descriptor stays good */
        FY_ASSERT_STATUS(ferry_am_recv_data(rx->w, desc, rx->buf, data_len - 1, &rx->req),
                         FERRY_ERR_MESSAGE_TRUNCATED);
        /* no request inside a handler: it would block in progress */
        FY_ASSERT_STATUS(ferry_am_recv_data(rx->w, desc, rx->buf, rx->buf_len, NULL),
                         FERRY_ERR_INVALID_PARAM);
        memset(&rx->done, 0, sizeof(rx->done));
        rx->req.cb = req_cb;
        rx->req.user_data = &rx->done;
        rx->recv_st = ferry_am_recv_data(rx->w, desc, rx->buf, rx->buf_len, &rx->req);
        break;
    case MODE_KEEP:
        rx->kept = desc;
        break;
    default:
        FY_ASSERT_OK(ferry_am_data_release(rx->w, desc));
        break;
    }
    return FERRY_OK;
}

/* The sender's ep: does a message of header_len + len go as fragments (announced)? */
static int is_announced(pair_t *p, size_t header_len, size_t len)
{
    ferry_ep_attr_t a = {.field_mask = FERRY_EP_ATTR_FIELD_AM_SIZES};
    FY_ASSERT_OK(ferry_ep_query(p->ep[0], &a));
    FY_ASSERT(a.am_eager_max > 0);
    FY_ASSERT_EQ(a.am_max, SIZE_MAX);
    FY_ASSERT_EQ(a.am_header_max, (size_t)FERRY_AM_HEADER_MAX);
    return 16 + header_len + len > a.am_eager_max;
}

/* Connect the pair (one small message each way through a plain handler). */
static void pair_connect(pair_t *p)
{
    id_rx_t rx[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_worker_set_am_handler(p->w[i], 1, on_id, &rx[i]));
    unsigned v = 1;
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_am_send(p->ep[i], 1, &v, sizeof(v), NULL, 0, NULL));
    PROGRESS_UNTIL(p, rx[0].count == 1 && rx[1].count == 1);
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_worker_set_am_handler(p->w[i], 1, NULL, NULL));
}

static void send_seeded(pair_t *p, unsigned id, unsigned seed, size_t len, int with_req)
{
    char *b = malloc(len + 1);
    FY_ASSERT(b != NULL);
    fill_pattern(b, len, seed);
    if (with_req) {
        done_t d = {0};
        ferry_request_t req = {.cb = req_cb, .user_data = &d};
        ferry_status_t st = ferry_am_send(p->ep[0], id, &seed, sizeof(seed), b, len, &req);
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
        PROGRESS_UNTIL(p, st == FERRY_OK || d.calls == 1);
        FY_ASSERT_OK(st == FERRY_OK ? st : d.st);
    } else {
        FY_ASSERT_OK(ferry_am_send(p->ep[0], id, &seed, sizeof(seed), b, len, NULL));
    }
    free(b);
}

/* The handler places the data in its buffer at once; the request completes once, with the
 * length; a small message to the same handler comes whole. */
static void am_rndv_recv(void)
{
    pair_t p;
    pair_open(&p);
    pair_connect(&p);
    rndv_rx_t rx = {.w = p.w[1], .mode = MODE_RECV};
    rx.buf_len = BIG + 100;
    rx.buf = malloc(rx.buf_len);
    FY_ASSERT(rx.buf != NULL);
    FY_ASSERT_OK(ferry_worker_set_am_handler_rndv(p.w[1], 7, on_rndv, &rx));
    int announced = is_announced(&p, sizeof(unsigned), BIG);
    send_seeded(&p, 7, 3, BIG, 1);
    PROGRESS_UNTIL(&p, rx.calls == 1);
    FY_ASSERT_EQ(rx.data_len, (size_t)BIG);
    FY_ASSERT_EQ(rx.announced, (unsigned)announced);
    if (announced) {
        FY_ASSERT(rx.recv_st == FERRY_OK || rx.recv_st == FERRY_INPROGRESS);
        PROGRESS_UNTIL(&p, rx.recv_st == FERRY_OK || rx.done.calls == 1);
        for (int i = 0; i < 50; i++)
            pair_progress(&p);
        FY_ASSERT_EQ(rx.done.calls, rx.recv_st == FERRY_INPROGRESS ? 1 : 0);
        FY_ASSERT_OK(rx.req.status);
        FY_ASSERT_EQ(rx.req.length, (size_t)BIG);
        FY_ASSERT_MSG(check_pattern(rx.buf, BIG, 3), "the data did not land whole in the buffer");
    } else {
        FY_ASSERT_EQ(rx.whole, 1u);
    }
    /* small: whole, no descriptor */
    send_seeded(&p, 7, 4, 100, 0);
    PROGRESS_UNTIL(&p, rx.calls == 2);
    FY_ASSERT_EQ(rx.announced, (unsigned)announced);
    FY_ASSERT_EQ(rx.bad, 0u);
    /* a plain handler on another id still gets the large message whole */
    id_rx_t plain = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 9, on_id, &plain));
    send_seeded(&p, 9, 0x1234, BIG, 0);
    PROGRESS_UNTIL(&p, plain.count == 1);
    FY_ASSERT_EQ(plain.last_seen, 0x1234u);
    free(rx.buf);
    pair_end(&p);
}

/* The handler keeps the descriptor; the data is asked for later (blocking: every fragment has
 * come, since a message sent after it on the same lane has); then a released message, whose
 * fragments are dropped, does not disturb the next one. */
static void am_rndv_keep_release(void)
{
    pair_t p;
    pair_open(&p);
    pair_connect(&p);
    rndv_rx_t rx = {.w = p.w[1], .mode = MODE_KEEP};
    FY_ASSERT_OK(ferry_worker_set_am_handler_rndv(p.w[1], 7, on_rndv, &rx));
    id_rx_t marker = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 8, on_id, &marker));
    if (!is_announced(&p, sizeof(unsigned), BIG)) {
        printf("SKIP: a message of %u bytes is not fragmented here\n", BIG);
        pair_end(&p);
        return;
    }
    send_seeded(&p, 7, 5, BIG, 0);
    unsigned v = 77;
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 8, &v, sizeof(v), NULL, 0, NULL));
    PROGRESS_UNTIL(&p, marker.count == 1);
    FY_ASSERT_EQ(rx.announced, 1u);
    FY_ASSERT(rx.kept != NULL);
    char *buf = malloc(BIG);
    FY_ASSERT(buf != NULL);
    FY_ASSERT_STATUS(ferry_am_recv_data(p.w[1], rx.kept, buf, 10, NULL),
                     FERRY_ERR_MESSAGE_TRUNCATED);
    FY_ASSERT_OK(ferry_am_recv_data(p.w[1], rx.kept, buf, BIG, NULL));
    FY_ASSERT_MSG(check_pattern(buf, BIG, 5), "kept data did not come whole");
    /* released in the handler while its fragments still come; then one placed */
    rx.mode = MODE_RELEASE;
    send_seeded(&p, 7, 6, BIG, 0);
    PROGRESS_UNTIL(&p, rx.calls == 2);
    rx.mode = MODE_RECV;
    rx.buf = buf;
    rx.buf_len = BIG;
    memset(buf, 0, BIG);
    send_seeded(&p, 7, 8, BIG, 1);
    PROGRESS_UNTIL(&p, rx.calls == 3);
    PROGRESS_UNTIL(&p, rx.recv_st == FERRY_OK || rx.done.calls == 1);
    FY_ASSERT_OK(rx.req.status);
    FY_ASSERT_MSG(check_pattern(buf, BIG, 8), "the message after a released one was wrong");
    ferry_worker_attr_t wa = {.field_mask = FERRY_WORKER_ATTR_FIELD_COUNTERS};
    FY_ASSERT_OK(ferry_worker_query(p.w[1], &wa));
    FY_ASSERT_EQ(wa.drops_malformed, 0u);
    /* one more kept and never answered: the worker frees it (the leak check would say) */
    rx.mode = MODE_KEEP;
    rx.kept = NULL;
    send_seeded(&p, 7, 9, BIG, 0);
    PROGRESS_UNTIL(&p, rx.kept != NULL);
    free(buf);
    pair_end(&p);
}

/* ---- queries -------------------------------------------------------------------------------- */

static void ep_worker_query(void)
{
    pair_t p;
    pair_open(&p);
    ferry_ep_attr_t a = {.field_mask = 1u << 20};
    FY_ASSERT_STATUS(ferry_ep_query(p.ep[0], &a), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_ep_query(NULL, &a), FERRY_ERR_INVALID_PARAM);
    ferry_worker_attr_t wa = {.field_mask = 1u << 20};
    FY_ASSERT_STATUS(ferry_worker_query(p.w[0], &wa), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_query(NULL, &wa), FERRY_ERR_INVALID_PARAM);
    pair_connect(&p);
    /* messages out: the sender's counters and the receiver's */
    id_rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 5, on_id, &rx));
    ferry_ep_attr_t before = {.field_mask = FERRY_EP_ATTR_FIELD_STATS};
    FY_ASSERT_OK(ferry_ep_query(p.ep[0], &before));
    unsigned v = 5;
    for (int i = 0; i < 10; i++)
        FY_ASSERT_OK(ferry_am_send(p.ep[0], 5, &v, sizeof(v), NULL, 0, NULL));
    PROGRESS_UNTIL(&p, rx.count == 10);

    ferry_worker_attr_t w1 = {
        .field_mask = FERRY_WORKER_ATTR_FIELD_NAME | FERRY_WORKER_ATTR_FIELD_IFACES |
                      FERRY_WORKER_ATTR_FIELD_COUNTERS | FERRY_WORKER_ATTR_FIELD_AM_SIZES};
    FY_ASSERT_OK(ferry_worker_query(p.w[1], &w1));
    char hex[32];
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)w1.uuid);
    FY_ASSERT_MSG(strstr(w1.name, hex) != NULL, "worker name '%s' lacks its uuid %s", w1.name, hex);
    FY_ASSERT(w1.nifaces >= 1);
    const char *tls = getenv("FERRY_TLS");
    int found = 0;
    for (unsigned i = 0; i < w1.nifaces; i++) {
        FY_ASSERT(w1.ifaces[i].transport != NULL && w1.ifaces[i].device != NULL);
        found |= tls != NULL && strcmp(w1.ifaces[i].transport, tls) == 0;
    }
    FY_ASSERT_MSG(tls == NULL || found, "no interface of %s listed", tls);
    FY_ASSERT(w1.neps >= 1);
    FY_ASSERT(w1.rx_msgs >= 10);
    FY_ASSERT_EQ(w1.am_header_max, (size_t)FERRY_AM_HEADER_MAX);

    a.field_mask = FERRY_EP_ATTR_FIELD_PEER_NAME | FERRY_EP_ATTR_FIELD_LANES |
                   FERRY_EP_ATTR_FIELD_AM_SIZES | FERRY_EP_ATTR_FIELD_STATS |
                   FERRY_EP_ATTR_FIELD_STATE;
    FY_ASSERT_OK(ferry_ep_query(p.ep[0], &a));
    FY_ASSERT_EQ(a.peer_uuid, w1.uuid);
    FY_ASSERT_MSG(strstr(a.peer_name, hex) != NULL, "peer name '%s' lacks %s", a.peer_name, hex);
    FY_ASSERT(a.nlanes >= 3 && a.nlanes <= FERRY_EP_MAX_LANES);
    FY_ASSERT_STR_EQ(a.lanes[0].op_class, "am");
    FY_ASSERT_STR_EQ(a.lanes[1].op_class, "rma");
    FY_ASSERT_STR_EQ(a.lanes[2].op_class, "amo");
    if (tls != NULL)
        FY_ASSERT_STR_EQ(a.lanes[0].transport, tls);
    FY_ASSERT(a.lanes[0].device != NULL);
    FY_ASSERT(a.am_eager_max > 0);
    const char *cap = getenv("FERRY_AM_EAGER_MAX");
    if (cap != NULL && strcmp(cap, "64k") == 0)
        FY_ASSERT(a.am_eager_max <= 65536);
    FY_ASSERT(a.stats.tx_msgs >= before.stats.tx_msgs + 10);
    FY_ASSERT(a.stats.tx_bytes >= before.stats.tx_bytes + 10 * sizeof(v));
    FY_ASSERT_EQ(a.stats.errors, 0u);
    FY_ASSERT_OK(a.state);
    /* get_stats agrees with the query */
    ferry_ep_stats_t s;
    FY_ASSERT_OK(ferry_ep_get_stats(p.ep[0], &s));
    FY_ASSERT_EQ(s.tx_msgs, a.stats.tx_msgs);
    FY_ASSERT_EQ(s.retransmits, a.stats.retransmits);
    pair_end(&p);
}

FYTEST_MAIN(FYTEST_CASE(am_ids_16bit), FYTEST_CASE(am_rndv_recv), FYTEST_CASE(am_rndv_keep_release),
            FYTEST_CASE(ep_worker_query))
