/*
 * ferry_perf_session.c - one ferry_perf session, from either side: the control messages,
 * the setup (buffers, registered memory, remote keys) and the sequence of measurements.
 *
 * The initiator drives: HELLO carries its worker address (so a server can reach a client it
 * knows nothing of), its remote key and the sizes of the buffers to prepare; the responder
 * answers HELLO_ACK with its own key.  Then, for every test and size of the plan, START makes
 * the responder reset its counters and prepare its region (a pattern for gets, zeros for puts
 * and atomics), the two run their halves of the loop (ferry_perf_tests.c), and END / END_ACK
 * bring the responder's verification errors back.  BYE / BYE_ACK / BYE_DONE end the session
 * (see responder_bye for why three messages).  Control messages
 * are copied out of the handler into a small inbox and read with waiting (not spinning)
 * progress: they are never on the measured path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry_perf.h"

/* ---- control messages ---------------------------------------------------------------------- */

ferry_status_t perf_ctrl_cb(void *arg, const void *header, size_t header_len, const void *data,
                            size_t data_len, ferry_ep_t *reply_ep)
{
    perf_t *p = arg;
    perf_ctrl_t h;
    if (header_len != sizeof(h)) {
        fprintf(stderr, "ferry_perf: ignored a control message with a %zu-byte header\n",
                header_len);
        return FERRY_OK;
    }
    memcpy(&h, header, sizeof(h));
    if (h.magic != PERF_MAGIC || p->inbox_count == PERF_INBOX) {
        fprintf(stderr, "ferry_perf: ignored a control message (%s)\n",
                h.magic != PERF_MAGIC ? "bad magic" : "inbox full");
        return FERRY_OK;
    }
    perf_msg_t *m = &p->inbox[(p->inbox_head + p->inbox_count) % PERF_INBOX];
    m->hdr = h;
    m->data = NULL;
    m->data_len = 0;
    if (data_len > 0) {
        if ((m->data = malloc(data_len)) == NULL)
            return FERRY_ERR_NO_MEMORY;
        memcpy(m->data, data, data_len);
        m->data_len = data_len;
    }
    p->inbox_count++;
    return FERRY_OK;
}

void perf_msg_release(perf_msg_t *msg)
{
    free(msg->data);
    msg->data = NULL;
    msg->data_len = 0;
}

ferry_status_t perf_ctrl_send(perf_t *p, perf_ctrl_type_t type, const perf_params_t *prm,
                              int64_t arg0, uint64_t arg1, const void *data, size_t len)
{
    perf_ctrl_t h;
    ferry_status_t st;
    memset(&h, 0, sizeof(h));
    h.magic = PERF_MAGIC;
    h.type = type;
    if (prm != NULL) {
        h.test = prm->test;
        h.flags = prm->flags;
        h.size = prm->size;
        h.warmup = prm->warmup;
        h.iters = prm->iters;
        h.window = prm->window;
    }
    h.arg0 = arg0;
    h.arg1 = arg1;
    /* no request: ferry copies header and data before returning */
    while ((st = ferry_am_send(p->ep, PERF_AM_CTRL, &h, sizeof(h), len ? data : (const void *)&h,
                               len, NULL)) == FERRY_ERR_NO_RESOURCE)
        ferry_worker_progress(p->worker);
    if (st < 0)
        fprintf(stderr, "ferry_perf: sending a control message failed: %s\n",
                ferry_status_string(st));
    return st < 0 ? st : FERRY_OK;
}

ferry_status_t perf_ctrl_recv(perf_t *p, perf_msg_t *msg)
{
    double t0 = perf_ticks_to_ns(perf_ticks());
    while (p->inbox_count == 0) {
        if (p->ep_failed)
            return FERRY_ERR_NOT_CONNECTED;
        ferry_status_t st = ferry_worker_wait(p->worker, 100);
        if (st != FERRY_OK && st != FERRY_ERR_TIMED_OUT)
            ferry_worker_progress(p->worker);
        if (p->timeout_ns && perf_ticks_to_ns(perf_ticks()) - t0 > (double)p->timeout_ns) {
            fprintf(stderr, "ferry_perf: the peer sent nothing for %.0f s\n",
                    (double)p->timeout_ns / 1e9);
            return FERRY_ERR_TIMED_OUT;
        }
    }
    *msg = p->inbox[p->inbox_head];
    p->inbox_head = (p->inbox_head + 1) % PERF_INBOX;
    p->inbox_count--;
    return FERRY_OK;
}

static const char *ctrl_name(uint32_t type)
{
    static const char *const names[] = {"?",   "HELLO",   "HELLO_ACK", "START",   "START_ACK",
                                        "END", "END_ACK", "BYE",       "BYE_ACK", "BYE_DONE"};
    return type < sizeof(names) / sizeof(names[0]) ? names[type] : "?";
}

/* Receive the next control message, which must be of the given type. */
ferry_status_t perf_ctrl_expect(perf_t *p, perf_ctrl_type_t type, perf_msg_t *msg)
{
    ferry_status_t st = perf_ctrl_recv(p, msg);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry_perf: no %s from the peer: %s\n", ctrl_name(type),
                ferry_status_string(st));
        return st;
    }
    if (msg->hdr.type != type) {
        fprintf(stderr, "ferry_perf: expected %s from the peer, got %s\n", ctrl_name(type),
                ctrl_name(msg->hdr.type));
        perf_msg_release(msg);
        return FERRY_ERR_PROTOCOL;
    }
    return FERRY_OK;
}

/* ---- setup pieces -------------------------------------------------------------------------- */

void perf_ep_err_cb(void *arg, ferry_ep_t *ep, ferry_status_t status)
{
    perf_t *p = arg;
    p->ep_failed = 1;
    if (p->session_over)
        return; /* the client left once it had its answer: expected */
    fprintf(stderr, "ferry_perf: the connection to the peer failed: %s\n",
            ferry_status_string(status));
}

static ferry_status_t wait_req(perf_t *p, perf_slot_t *s, ferry_status_t st, const char *what)
{
    if (st == FERRY_INPROGRESS) {
        while (s->busy && !p->ep_failed)
            if (ferry_worker_wait(p->worker, 100) != FERRY_OK)
                ferry_worker_progress(p->worker);
        st = s->req.status;
    }
    if (st < 0)
        fprintf(stderr, "ferry_perf: %s failed: %s\n", what, ferry_status_string(st));
    return st;
}

static void aux_cb(ferry_request_t *req, ferry_status_t status)
{
    ((perf_slot_t *)req)->busy = 0;
}

static ferry_request_t *aux_req(perf_t *p)
{
    memset(&p->aux.req, 0, sizeof(p->aux.req));
    p->aux.req.cb = aux_cb;
    p->aux.perf = p;
    p->aux.busy = 1;
    return &p->aux.req;
}

/* len bytes of memory ferry allocates (shareable with peers: FERRY_MEM_ALLOCATE), or NULL. */
static uint8_t *alloc_mem(perf_t *p, size_t len, ferry_mem_t **mem)
{
    ferry_mem_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS;
    mp.length = len;
    mp.flags = FERRY_MEM_ALLOCATE;
    void *addr = NULL;
    size_t got = 0;
    if (ferry_mem_map(p->context, &mp, mem) != FERRY_OK)
        return NULL;
    if (ferry_mem_query(*mem, &addr, &got) != FERRY_OK || got < len) {
        ferry_mem_unmap(p->context, *mem);
        *mem = NULL;
        return NULL;
    }
    return addr;
}

/* Buffers (malloc'd, or with -M alloc allocated by ferry) and, for RMA, a registered region,
 * all of buf_len bytes, touched once so that no page fault lands in a measurement. */
static ferry_status_t setup_buffers(perf_t *p, size_t buf_len, unsigned nslots, int rma,
                                    int mem_alloc)
{
    size_t alloc = (buf_len + 4095) / 4096 * 4096;
    p->buf_len = buf_len;
    p->nslots_max = nslots;
    if (mem_alloc) {
        p->sbuf = alloc_mem(p, alloc, &p->smem);
        p->rbuf = alloc_mem(p, alloc, &p->rmem);
    } else {
        p->sbuf = aligned_alloc(4096, alloc);
        p->rbuf = aligned_alloc(4096, alloc);
    }
    p->slots = calloc(nslots, sizeof(*p->slots));
    if (p->sbuf == NULL || p->rbuf == NULL || p->slots == NULL) {
        fprintf(stderr, "ferry_perf: cannot allocate %zu bytes of buffers\n", 2 * alloc);
        return FERRY_ERR_NO_MEMORY;
    }
    memset(p->sbuf, 0, alloc);
    memset(p->rbuf, 0, alloc);
    for (unsigned k = 0; k < nslots; k++)
        p->slots[k].perf = p;
    p->aux.perf = p;
    if (!rma)
        return FERRY_OK;

    if ((p->region = alloc_mem(p, buf_len, &p->mem)) == NULL) {
        fprintf(stderr, "ferry_perf: cannot register %zu bytes for RMA\n", buf_len);
        return FERRY_ERR_NO_MEMORY;
    }
    p->region_len = buf_len;
    memset(p->region, 0, buf_len);
    return FERRY_OK;
}

/* A packed rkey of our region (malloc'd), or NULL/0 without RMA. */
static ferry_status_t pack_rkey(perf_t *p, void **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    if (p->mem == NULL)
        return FERRY_OK;
    ferry_status_t st = ferry_rkey_pack(p->context, p->mem, NULL, len);
    if (st != FERRY_ERR_TRUNCATED && st != FERRY_OK)
        goto fail;
    if ((*buf = malloc(*len ? *len : 1)) == NULL)
        return FERRY_ERR_NO_MEMORY;
    if ((st = ferry_rkey_pack(p->context, p->mem, *buf, len)) == FERRY_OK)
        return FERRY_OK;
    free(*buf);
    *buf = NULL;
fail:
    fprintf(stderr, "ferry_perf: ferry_rkey_pack failed: %s\n", ferry_status_string(st));
    return st;
}

static ferry_status_t unpack_rkey(perf_t *p, const void *buf, size_t len, uint64_t addr)
{
    if (len == 0)
        return FERRY_OK;
    ferry_status_t st = ferry_rkey_unpack(p->ep, buf, len, &p->rkey);
    if (st != FERRY_OK)
        fprintf(stderr, "ferry_perf: ferry_rkey_unpack failed: %s\n", ferry_status_string(st));
    p->remote_addr = addr;
    return st;
}

ferry_status_t perf_worker_address(perf_t *p, void **buf, size_t *len)
{
    ferry_status_t st;
    *len = 0;
    *buf = NULL;
    st = ferry_worker_get_address(p->worker, NULL, len);
    if (st != FERRY_ERR_TRUNCATED && st != FERRY_OK)
        goto fail;
    if ((*buf = malloc(*len)) == NULL)
        return FERRY_ERR_NO_MEMORY;
    if ((st = ferry_worker_get_address(p->worker, *buf, len)) == FERRY_OK)
        return FERRY_OK;
    free(*buf);
    *buf = NULL;
fail:
    fprintf(stderr, "ferry_perf: ferry_worker_get_address failed: %s\n", ferry_status_string(st));
    return st;
}

/* HELLO's data: | addr_len (u32) | rkey_len (u32) | worker address | packed rkey | */
static void *hello_pack(const void *addr, uint32_t alen, const void *rkey, uint32_t rlen,
                        size_t *len)
{
    uint8_t *b = malloc(8 + (size_t)alen + rlen);
    if (b == NULL)
        return NULL;
    memcpy(b, &alen, 4);
    memcpy(b + 4, &rlen, 4);
    memcpy(b + 8, addr, alen);
    if (rlen)
        memcpy(b + 8 + alen, rkey, rlen);
    *len = 8 + (size_t)alen + rlen;
    return b;
}

static int hello_unpack(const perf_msg_t *m, const uint8_t **addr, uint32_t *alen,
                        const uint8_t **rkey, uint32_t *rlen)
{
    const uint8_t *b = m->data;
    if (m->data_len < 8)
        return -1;
    memcpy(alen, b, 4);
    memcpy(rlen, b + 4, 4);
    if ((uint64_t)8 + *alen + *rlen != m->data_len)
        return -1;
    *addr = b + 8;
    *rkey = b + 8 + *alen;
    return 0;
}

/* ---- the initiator's session ------------------------------------------------------------------
 */

static ferry_status_t initiator_hello(perf_t *p, const perf_opts_t *o)
{
    size_t max_size = 64, buf_len, dlen = 0, alen, rlen;
    void *addr = NULL, *rkey = NULL, *data = NULL;
    int rma = 0;
    perf_msg_t m;
    ferry_status_t st;

    for (unsigned i = 0; i < o->nplan; i++) {
        max_size = PERF_MAX(max_size, o->plan[i].size);
        rma |= perf_tests[o->plan[i].test].rma;
    }
    buf_len = max_size;
    if (o->check) /* a buffer per slot, within reason */
        buf_len =
            PERF_MAX(max_size, PERF_MIN((size_t)o->window * max_size, (size_t)PERF_CHECK_MEM));
    if ((st = setup_buffers(p, buf_len, o->window, rma, o->mem_alloc)) != FERRY_OK ||
        (st = perf_worker_address(p, &addr, &alen)) != FERRY_OK ||
        (st = pack_rkey(p, &rkey, &rlen)) != FERRY_OK)
        goto out;
    if ((data = hello_pack(addr, (uint32_t)alen, rkey, (uint32_t)rlen, &dlen)) == NULL) {
        st = FERRY_ERR_NO_MEMORY;
        goto out;
    }
    perf_params_t hp = {.size = buf_len,
                        .window = o->window,
                        .flags = (rma ? PERF_FLAG_RMA : 0) | (o->check ? PERF_FLAG_CHECK : 0) |
                                 (o->mem_alloc ? PERF_FLAG_ALLOC : 0)};
    if ((st = perf_ctrl_send(p, PERF_CTRL_HELLO, &hp, PERF_PROTO_VERSION,
                             (uint64_t)(uintptr_t)p->region, data, dlen)) != FERRY_OK ||
        (st = perf_ctrl_expect(p, PERF_CTRL_HELLO_ACK, &m)) != FERRY_OK)
        goto out;
    if (m.hdr.arg0 < 0) {
        st = (ferry_status_t)m.hdr.arg0;
        fprintf(stderr, "ferry_perf: the responder could not prepare: %s\n",
                ferry_status_string(st));
    } else if (rma) {
        st = unpack_rkey(p, m.data, m.data_len, m.hdr.arg1);
    }
    perf_msg_release(&m);
out:
    free(addr);
    free(rkey);
    free(data);
    return st;
}

/* One test at one size: START, measure, END; errors found at either end are counted. */
static ferry_status_t initiator_measure(perf_t *p, const perf_params_t *prm, perf_result_t *res,
                                        uint64_t *errors)
{
    perf_msg_t m;
    ferry_status_t st, run;

    p->cur = *prm;
    p->recv_count = p->ack_count = 0;
    p->errors = 0;
    if (p->region != NULL)
        memset(p->region, 0, prm->size);
    if ((st = perf_ctrl_send(p, PERF_CTRL_START, prm, 0, 0, NULL, 0)) != FERRY_OK ||
        (st = perf_ctrl_expect(p, PERF_CTRL_START_ACK, &m)) != FERRY_OK)
        return st;
    perf_msg_release(&m);
    if (m.hdr.arg0 < 0) {
        fprintf(stderr, "ferry_perf: the responder refused %s at %zu B: %s\n",
                perf_tests[prm->test].name, prm->size,
                ferry_status_string((ferry_status_t)m.hdr.arg0));
        return (ferry_status_t)m.hdr.arg0;
    }
    run = perf_run_initiator(p, prm, res);
    if ((st = perf_ctrl_send(p, PERF_CTRL_END, prm,
                             run == FERRY_OK ? (int64_t)(prm->warmup + prm->iters) : -1, 0, NULL,
                             0)) != FERRY_OK ||
        (st = perf_ctrl_expect(p, PERF_CTRL_END_ACK, &m)) != FERRY_OK)
        return st;
    perf_msg_release(&m);
    *errors += p->errors + (uint64_t)(m.hdr.arg0 > 0 ? m.hdr.arg0 : 0);
    if (m.hdr.arg0 > 0)
        fprintf(stderr, "ferry_perf: the responder found %lld verification errors in %s, %zu B\n",
                (long long)m.hdr.arg0, perf_tests[prm->test].name, prm->size);
    return run;
}

int perf_session_initiator(perf_t *p, const perf_opts_t *o, perf_out_t *out)
{
    int unsupported[PERF_NUM_TESTS] = {0}, tag_ok, rc = 0;
    uint64_t errors = 0;
    perf_msg_t m;
    ferry_status_t st;

    if ((st = initiator_hello(p, o)) != FERRY_OK)
        return 1;
    if (p->verbose)
        ferry_worker_print_info(p->worker, stderr);
    tag_ok = perf_tag_available(p);
    perf_out_begin(out);
    for (unsigned i = 0; i < o->nplan; i++) {
        const perf_item_t *it = &o->plan[i];
        perf_params_t prm;
        perf_result_t res;
        if (unsupported[it->test])
            continue;
        if (perf_tests[it->test].tag && !tag_ok) {
            perf_out_unavailable(out, it->test, "ferry_tag_* returns FERRY_ERR_UNSUPPORTED");
            unsupported[it->test] = 1;
            continue;
        }
        perf_plan_counts(o, it, &prm);
        st = initiator_measure(p, &prm, &res, &errors);
        if (st == FERRY_ERR_UNSUPPORTED) {
            perf_out_unavailable(out, it->test, "ferry returns FERRY_ERR_UNSUPPORTED for it");
            unsupported[it->test] = 1;
            continue;
        }
        if (st != FERRY_OK) {
            fprintf(stderr, "ferry_perf: %s at %zu B failed: %s\n", perf_tests[it->test].name,
                    it->size, ferry_status_string(st));
            rc = 1;
            break;
        }
        perf_out_result(out, &res);
    }
    perf_out_end(out, (int)errors);
    if (errors) {
        fprintf(stderr, "ferry_perf: %llu verification errors\n", (unsigned long long)errors);
        rc = 1;
    }
    if (perf_ctrl_send(p, PERF_CTRL_BYE, NULL, 0, 0, NULL, 0) != FERRY_OK ||
        perf_ctrl_expect(p, PERF_CTRL_BYE_ACK, &m) != FERRY_OK)
        return 1;
    perf_msg_release(&m);
    /* BYE_ACK answers BYE, so everything sent before is handled: nothing is left to flush, and
     * the endpoint is closed by force once BYE_DONE is out (see responder_bye) */
    p->session_over = 1;
    if (perf_ctrl_send(p, PERF_CTRL_BYE_DONE, NULL, 0, 0, NULL, 0) != FERRY_OK)
        return 1;
    return rc;
}

/* ---- the responder's session ------------------------------------------------------------------
 */

static ferry_status_t responder_hello(perf_t *p, perf_msg_t *hello)
{
    const uint8_t *addr, *rkey;
    uint32_t alen, rlen;
    void *mykey = NULL;
    size_t mylen = 0;
    ferry_status_t st;
    const perf_ctrl_t *h = &hello->hdr;

    if (h->arg0 != PERF_PROTO_VERSION) {
        fprintf(stderr,
                "ferry_perf: the initiator speaks session version %lld, this one %d: "
                "run the same ferry_perf on both sides\n",
                (long long)h->arg0, PERF_PROTO_VERSION);
        return FERRY_ERR_PROTOCOL;
    }
    if (hello_unpack(hello, &addr, &alen, &rkey, &rlen) != 0 || h->size == 0 ||
        h->size > PERF_MAX_SIZE || h->window == 0 || h->window > 65536) {
        fprintf(stderr, "ferry_perf: malformed HELLO from the initiator\n");
        return FERRY_ERR_PROTOCOL;
    }
    if (p->ep == NULL) { /* server: an endpoint back to the client */
        ferry_ep_params_t ep;
        memset(&ep, 0, sizeof(ep));
        ep.field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER;
        ep.address = addr;
        ep.address_len = alen;
        ep.err_cb = perf_ep_err_cb;
        ep.err_arg = p;
        if ((st = ferry_ep_create(p->worker, &ep, &p->ep)) != FERRY_OK) {
            fprintf(stderr, "ferry_perf: cannot reach the client: %s\n", ferry_status_string(st));
            return st;
        }
        p->own_ep = 1;
    }
    st = setup_buffers(p, h->size, (unsigned)h->window, (h->flags & PERF_FLAG_RMA) != 0,
                       (h->flags & PERF_FLAG_ALLOC) != 0);
    if (st == FERRY_OK && (h->flags & PERF_FLAG_RMA))
        st = unpack_rkey(p, rkey, rlen, h->arg1);
    if (st == FERRY_OK)
        st = pack_rkey(p, &mykey, &mylen);
    ferry_status_t sst = perf_ctrl_send(p, PERF_CTRL_HELLO_ACK, NULL, st,
                                        (uint64_t)(uintptr_t)p->region, mykey, mylen);
    free(mykey);
    return st != FERRY_OK ? st : sst;
}

/* Check a START and prepare the region for it. */
static ferry_status_t responder_prepare(perf_t *p, const perf_ctrl_t *h, perf_params_t *prm)
{
    if (h->test >= PERF_NUM_TESTS || h->size > p->buf_len || h->window == 0 ||
        h->window > p->nslots_max || (perf_tests[h->test].rma && p->region == NULL))
        return FERRY_ERR_INVALID_PARAM;
    prm->test = (perf_test_id_t)h->test;
    prm->size = h->size;
    prm->warmup = h->warmup;
    prm->iters = h->iters;
    prm->window = (unsigned)h->window;
    prm->flags = h->flags;
    p->cur = *prm;
    p->recv_count = p->ack_count = 0;
    p->errors = 0;
    if (prm->test == PERF_GET_LAT || prm->test == PERF_GET_BW)
        perf_pattern_fill(p->region, prm->size, 0, PERF_DIR_REGION);
    else if (p->region != NULL)
        memset(p->region, 0, prm->size);
    return FERRY_OK;
}

/*
 * Answer BYE, then wait for the initiator's BYE_DONE (or its going, or a grace of 2 s: a
 * datagram peer that left before its BYE_DONE got out), and close the endpoint by force.
 * Neither side flushes at the end: a flush is a request the other side must answer, and
 * whichever side asked last raced the other's leaving (the server used to flush BYE_ACK, the
 * client then flushed its close; the server, its own flush done, could leave with the client's
 * request unanswered, and the client saw "remote closed with operations pending").  Here
 * BYE_ACK proves the initiator's messages handled, BYE_DONE proves BYE_ACK delivered, and
 * nothing is outstanding on either side when the connection goes.
 */
static int responder_bye(perf_t *p)
{
    if (perf_ctrl_send(p, PERF_CTRL_BYE_ACK, NULL, 0, 0, NULL, 0) != FERRY_OK)
        return 1;
    p->session_over = 1;
    uint64_t t0 = perf_ticks();
    while (p->inbox_count == 0 && !p->ep_failed && perf_ticks_to_ns(perf_ticks() - t0) < 2e9)
        if (ferry_worker_wait(p->worker, 10) != FERRY_OK)
            ferry_worker_progress(p->worker);
    perf_msg_t m;
    if (p->inbox_count > 0 && perf_ctrl_recv(p, &m) == FERRY_OK) {
        perf_msg_release(&m);
        if (m.hdr.type != PERF_CTRL_BYE_DONE)
            fprintf(stderr, "ferry_perf: unexpected %s from the initiator after BYE\n",
                    ctrl_name(m.hdr.type));
    }
    return 0;
}

int perf_session_responder(perf_t *p, perf_msg_t *hello)
{
    perf_msg_t m;
    ferry_status_t st;

    st = responder_hello(p, hello);
    perf_msg_release(hello);
    if (st != FERRY_OK)
        return 1;
    for (;;) {
        if (perf_ctrl_recv(p, &m) != FERRY_OK)
            return 1;
        perf_msg_release(&m);
        if (m.hdr.type == PERF_CTRL_BYE)
            return responder_bye(p);
        if (m.hdr.type != PERF_CTRL_START) {
            fprintf(stderr, "ferry_perf: unexpected %s from the initiator\n",
                    ctrl_name(m.hdr.type));
            return 1;
        }
        perf_params_t prm;
        st = responder_prepare(p, &m.hdr, &prm);
        if (perf_ctrl_send(p, PERF_CTRL_START_ACK, NULL, st, 0, NULL, 0) != FERRY_OK)
            return 1;
        if (st != FERRY_OK)
            continue;
        /* CANCELED: the initiator ended the measurement early (it failed; it says why) */
        st = perf_run_responder(p, &prm);
        if (st != FERRY_OK && st != FERRY_ERR_CANCELED && st != FERRY_ERR_UNSUPPORTED)
            return 1;
        if (perf_ctrl_expect(p, PERF_CTRL_END, &m) != FERRY_OK)
            return 1;
        perf_msg_release(&m);
        if (m.hdr.arg0 >= 0)
            perf_end_checks(p, (uint64_t)m.hdr.arg0);
        if (perf_ctrl_send(p, PERF_CTRL_END_ACK, NULL, (int64_t)p->errors, 0, NULL, 0) != FERRY_OK)
            return 1;
    }
}

void perf_cleanup(perf_t *p)
{
    if (p->rkey != NULL)
        ferry_rkey_destroy(p->rkey);
    if (p->own_ep && p->ep != NULL && !p->ep_failed && !p->session_over)
        wait_req(p, &p->aux, ferry_ep_close(p->ep, FERRY_EP_CLOSE_FLUSH, aux_req(p)),
                 "closing the endpoint");
    else if (p->own_ep && p->ep != NULL)
        wait_req(p, &p->aux, ferry_ep_close(p->ep, FERRY_EP_CLOSE_FORCE, aux_req(p)),
                 "closing the endpoint");
    if (p->mem != NULL)
        ferry_mem_unmap(p->context, p->mem);
    if (p->smem != NULL || p->rmem != NULL) {
        if (p->smem != NULL)
            ferry_mem_unmap(p->context, p->smem);
        if (p->rmem != NULL)
            ferry_mem_unmap(p->context, p->rmem);
        p->sbuf = p->rbuf = NULL;
    }
    ferry_world_destroy(p->world);
    ferry_worker_destroy(p->worker);
    ferry_context_destroy(p->context);
    for (unsigned i = 0; i < p->inbox_count; i++)
        perf_msg_release(&p->inbox[(p->inbox_head + i) % PERF_INBOX]);
    free(p->sbuf);
    free(p->rbuf);
    free(p->slots);
}
