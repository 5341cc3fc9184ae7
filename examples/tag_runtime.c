/*
 * tag_runtime.c - the tagged calls a runtime builds on, between two workers of one process
 * driven by one thread (so every call takes a request and both workers are progressed):
 *
 *   - a message framed from two pieces, a runtime's header and the user's payload, sent with
 *     ferry_tag_sendv: no copy into a staging buffer;
 *   - the receiver learns a message's size with ferry_tag_mprobe, allocates exactly that, and
 *     receives that very message with ferry_tag_mrecvv, scattering the header and the payload
 *     into separate buffers (no other receive can take the message in between);
 *   - a synchronous send (ferry_tag_ssend) that completes only once the receiver has matched
 *     it: the sender knows the receiver got that far.
 *
 * Uses only the public API.
 */
#include <ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct frame { /* the runtime's header in front of each payload */
    uint32_t kind;
    uint32_t seq;
} frame_t;

static ferry_worker_t *w[2];

static void pump(void)
{
    ferry_worker_progress(w[0]);
    ferry_worker_progress(w[1]);
}

/* Progress both workers until the request is done; its status. */
static ferry_status_t finish(ferry_status_t st, ferry_request_t *req)
{
    while (st == FERRY_INPROGRESS && req->status == FERRY_INPROGRESS)
        pump();
    return st == FERRY_INPROGRESS ? req->status : st;
}

static int die(const char *what, ferry_status_t st)
{
    fprintf(stderr, "tag_runtime: %s: %s\n", what, ferry_status_string(st));
    return 1;
}

int main(void)
{
    ferry_context_t *ctx;
    ferry_ep_t *ep;
    ferry_status_t st;
    if ((st = ferry_context_create(NULL, &ctx)) != FERRY_OK)
        return die("context", st);
    for (int i = 0; i < 2; i++)
        if ((st = ferry_worker_create(ctx, NULL, &w[i])) != FERRY_OK)
            return die("worker", st);
    char addr[8192];
    size_t alen = sizeof(addr);
    ferry_worker_get_address(w[1], addr, &alen);
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
    if ((st = ferry_ep_create(w[0], &p, &ep)) != FERRY_OK)
        return die("endpoint", st);

    /* Three framed messages of different sizes, header and payload from separate memory. */
    static const size_t sizes[] = {100, 20000, 3 << 20};
    char *payload = malloc(sizes[2]);
    memset(payload, 'x', sizes[2]);
    ferry_request_t sreq[3];
    ferry_status_t sst[3];
    frame_t hdr[3];
    for (int i = 0; i < 3; i++) {
        hdr[i] = (frame_t){.kind = 7, .seq = (uint32_t)i};
        struct iovec iov[2] = {{&hdr[i], sizeof(hdr[i])}, {payload, sizes[i]}};
        memset(&sreq[i], 0, sizeof(sreq[i]));
        sst[i] = ferry_tag_sendv(ep, 42, iov, 2, &sreq[i]);
        if (sst[i] < 0)
            return die("sendv", sst[i]);
    }

    /* The receiver: probe-and-take each, then receive it into a buffer of its exact size. */
    for (int i = 0; i < 3; i++) {
        ferry_tag_info_t info;
        ferry_tag_message_t *msg;
        while ((st = ferry_tag_mprobe(w[1], 42, ~0ull, &info, &msg)) == FERRY_ERR_NO_MESSAGE)
            pump();
        if (st != FERRY_OK)
            return die("mprobe", st);
        frame_t h;
        size_t plen = info.length - sizeof(h);
        char *data = malloc(plen);
        struct iovec iov[2] = {{&h, sizeof(h)}, {data, plen}};
        ferry_request_t rreq = {0};
        if ((st = finish(ferry_tag_mrecvv(w[1], msg, iov, 2, &rreq), &rreq)) != FERRY_OK)
            return die("mrecvv", st);
        printf("message %u: kind %u, %zu payload bytes%s\n", h.seq, h.kind, plen,
               plen != 0 && data[plen - 1] == 'x' ? ", intact" : ", CORRUPT");
        free(data);
    }
    for (int i = 0; i < 3; i++)
        if ((st = finish(sst[i], &sreq[i])) != FERRY_OK)
            return die("send", st);

    /* A synchronous send: not complete while the receiver has not matched it. */
    ferry_request_t ss = {0}, rr = {0};
    uint64_t token = 99, got = 0;
    ferry_status_t s1 = ferry_tag_ssend(ep, 43, &token, sizeof(token), &ss);
    for (int i = 0; i < 1000; i++)
        pump();
    printf("ssend before the receive: %s\n",
           ss.status == FERRY_INPROGRESS ? "waiting (as it should)" : "complete (wrong)");
    if ((st = finish(ferry_tag_recv(w[1], &got, sizeof(got), 43, ~0ull, &rr), &rr)) != FERRY_OK)
        return die("recv", st);
    if ((st = finish(s1, &ss)) != FERRY_OK)
        return die("ssend", st);
    printf("ssend after the receive: complete, token %llu\n", (unsigned long long)got);

    free(payload);
    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(w[0]);
    ferry_worker_destroy(w[1]);
    ferry_context_destroy(ctx);
    return 0;
}
