/*
 * Active messages through the whole stack: two workers of one process, handlers run from the
 * receiver's progress with the sender's endpoint, replies, iovec sends, every size class
 * (short, bcopy, zcopy) with and without a request, order per endpoint.
 */
#include "common.h"

typedef struct rx {
    unsigned count;
    unsigned bad;
    size_t last_len;
    unsigned next_seq;
    ferry_ep_t *reply_ep;
    int replies;
} rx_t;

static ferry_status_t on_msg(void *arg, const void *header, size_t header_len, const void *data,
                             size_t data_len, ferry_ep_t *reply_ep)
{
    rx_t *rx = arg;
    unsigned seq;
    if (header_len != sizeof(seq)) {
        rx->bad++;
        return FERRY_OK;
    }
    memcpy(&seq, header, sizeof(seq));
    if (seq != rx->next_seq || !check_pattern(data, data_len, seq))
        rx->bad++;
    rx->next_seq = seq + 1;
    rx->count++;
    rx->last_len = data_len;
    rx->reply_ep = reply_ep;
    return FERRY_OK;
}

static ferry_status_t on_ping(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_ep_t *reply_ep)
{
    (void)arg;
    /* Answer with the same payload on the sender's endpoint. */
    return ferry_am_send(reply_ep, 2, header, header_len, data, data_len, NULL);
}

static ferry_status_t on_pong(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_ep_t *reply_ep)
{
    (void)header, (void)header_len, (void)reply_ep;
    rx_t *rx = arg;
    if (!check_pattern(data, data_len, 99))
        rx->bad++;
    rx->replies++;
    return FERRY_OK;
}

static void sizes_in_order(void)
{
    pair_t p;
    pair_open(&p);
    rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 7, on_msg, &rx));
    static const size_t sizes[] = {0, 1, 8, 100, 4096, 8192, 65536, 1 << 20, 4 << 20};
    unsigned n = sizeof(sizes) / sizeof(sizes[0]);
    for (unsigned i = 0; i < n; i++) {
        void *buf = malloc(sizes[i] + 1);
        fill_pattern(buf, sizes[i], i);
        FY_ASSERT_OK(ferry_am_send(p.ep[0], 7, &i, sizeof(i), buf, sizes[i], NULL));
        free(buf); /* no request: the data was copied */
    }
    for (int spin = 0; spin < 100000 && rx.count < n; spin++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.count, n);
    FY_ASSERT_EQ(rx.bad, 0);
    FY_ASSERT_EQ(rx.last_len, 4 << 20);
    FY_ASSERT(rx.reply_ep != NULL);
    pair_close(&p);
}

static void with_request(void)
{
    pair_t p;
    pair_open(&p);
    rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 7, on_msg, &rx));
    size_t len = 8 << 20; /* zcopy on every transport */
    char *buf = malloc(len);
    unsigned seq = 0;
    fill_pattern(buf, len, seq);
    done_t d = {0, FERRY_INPROGRESS};
    ferry_request_t req = {.cb = req_cb, .user_data = &d};
    ferry_status_t st = ferry_am_send(p.ep[0], 7, &seq, sizeof(seq), buf, len, &req);
    FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
    for (int spin = 0; spin < 100000 && (rx.count < 1 || (st == FERRY_INPROGRESS && d.calls == 0));
         spin++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.count, 1);
    FY_ASSERT_EQ(rx.bad, 0);
    /* The contract: OK = no callback; INPROGRESS = exactly one. */
    FY_ASSERT_EQ(d.calls, st == FERRY_OK ? 0 : 1);
    if (st == FERRY_INPROGRESS)
        FY_ASSERT_OK(d.st);
    free(buf);
    pair_close(&p);
}

static void iovec_send(void)
{
    pair_t p;
    pair_open(&p);
    rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 9, on_msg, &rx));
    static const size_t lens[] = {10, 0, 3000, 70000};
    for (unsigned seq = 0; seq < 2; seq++) {
        size_t total = 0;
        for (int i = 0; i < 4; i++)
            total += lens[i];
        char *whole = malloc(total);
        fill_pattern(whole, total, seq);
        struct iovec iov[4];
        size_t off = 0;
        for (int i = 0; i < 4; i++) {
            iov[i].iov_base = whole + off;
            iov[i].iov_len = lens[i];
            off += lens[i];
        }
        FY_ASSERT_OK(ferry_am_sendv(p.ep[0], 9, &seq, sizeof(seq), iov, 4, NULL));
        free(whole);
    }
    for (int spin = 0; spin < 10000 && rx.count < 2; spin++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.count, 2);
    FY_ASSERT_EQ(rx.bad, 0);
    pair_close(&p);
}

static void reply_on_sender_ep(void)
{
    pair_t p;
    pair_open(&p);
    rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 1, on_ping, NULL));
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[0], 2, on_pong, &rx));
    char payload[300];
    fill_pattern(payload, sizeof(payload), 99);
    for (int i = 0; i < 50; i++)
        FY_ASSERT_OK(ferry_am_send(p.ep[0], 1, NULL, 0, payload, sizeof(payload), NULL));
    for (int spin = 0; spin < 10000 && rx.replies < 50; spin++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.replies, 50);
    FY_ASSERT_EQ(rx.bad, 0);
    pair_close(&p);
}

static void many_in_order(void)
{
    pair_t p;
    pair_open(&p);
    rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 7, on_msg, &rx));
    char buf[64];
    for (unsigned i = 0; i < 20000; i++) {
        fill_pattern(buf, sizeof(buf), i);
        FY_ASSERT_OK(ferry_am_send(p.ep[0], 7, &i, sizeof(i), buf, sizeof(buf), NULL));
        if (i % 64 == 0)
            pair_progress(&p);
    }
    for (int spin = 0; spin < 100000 && rx.count < 20000; spin++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.count, 20000);
    FY_ASSERT_EQ(rx.bad, 0);
    pair_close(&p);
}

static void unregistered_handler_dropped(void)
{
    pair_t p;
    pair_open(&p);
    rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 7, on_msg, &rx));
    unsigned seq = 0;
    /* id 8 has no handler: dropped at the receiver, the next message still arrives */
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 8, &seq, sizeof(seq), NULL, 0, NULL));
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 7, &seq, sizeof(seq), NULL, 0, NULL));
    for (int spin = 0; spin < 1000 && rx.count < 1; spin++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.count, 1);
    /* removing a handler */
    FY_ASSERT_OK(ferry_worker_set_am_handler(p.w[1], 7, NULL, NULL));
    seq = 1;
    FY_ASSERT_OK(ferry_am_send(p.ep[0], 7, &seq, sizeof(seq), NULL, 0, NULL));
    for (int spin = 0; spin < 1000; spin++)
        pair_progress(&p);
    FY_ASSERT_EQ(rx.count, 1);
    pair_close(&p);
}

static void worker_to_itself(void)
{
    ferry_context_t *ctx;
    ferry_worker_t *w;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    char addr[4096];
    size_t len = sizeof(addr);
    FY_ASSERT_OK(ferry_worker_get_address(w, addr, &len));
    ferry_ep_params_t ep = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
    ferry_ep_t *e;
    FY_ASSERT_OK(ferry_ep_create(w, &ep, &e));
    rx_t rx = {0};
    FY_ASSERT_OK(ferry_worker_set_am_handler(w, 3, on_msg, &rx));
    unsigned seq = 0;
    char data[32];
    fill_pattern(data, sizeof(data), 0);
    FY_ASSERT_OK(ferry_am_send(e, 3, &seq, sizeof(seq), data, sizeof(data), NULL));
    for (int spin = 0; spin < 1000 && rx.count < 1; spin++)
        ferry_worker_progress(w);
    FY_ASSERT_EQ(rx.count, 1);
    FY_ASSERT_EQ(rx.bad, 0);
    FY_ASSERT_OK(ferry_ep_close(e, FERRY_EP_CLOSE_FORCE, NULL));
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
}

FYTEST_MAIN(FYTEST_CASE(sizes_in_order), FYTEST_CASE(with_request), FYTEST_CASE(iovec_send),
            FYTEST_CASE(reply_on_sender_ep), FYTEST_CASE(many_in_order),
            FYTEST_CASE(unregistered_handler_dropped), FYTEST_CASE(worker_to_itself))
