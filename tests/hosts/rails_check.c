/*
 * rails_check.c - the multi-rail correctness check of the testbed (test_hosts.sh rails): two
 * ranks send each other a stream of active messages whose sizes mix striped ones (above
 * FERRY_RAILS_THRESH: spread over the rails) with small ones (on the AM lane alone), and
 * check that every message arrives once, whole, byte for byte, and in the order it was sent:
 * striping must not reorder an endpoint's messages.
 *
 *   ferryrun --hosts tbA:1,tbB:1 --agent tb-agent rails_check [ROUNDS [lossy]]
 *
 * Every payload byte is a function of the sender, the message number and the offset.  Exit
 * status 0 only when both ranks saw every message in order with no error.  With "lossy" (a
 * rail is taken away during the run: test_hosts.sh rail_fails) striped messages may be lost
 * and their sends fail, but what arrives must still be whole and in order, the last message
 * (small: on the AM lane) must arrive, and every send must complete: no hang.
 */
#include <ferry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AM_DATA 11
#define LIMIT_S 60.0

static const size_t sizes[] = {(1u << 20) + 13, 100, 700 * 1024, 0, 3u << 20, 8, 300 * 1024, 64};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

typedef struct hdr {
    uint32_t src, seq;
    uint64_t size;
} hdr_t;

typedef struct state {
    int rank;
    uint32_t next; /* the message number expected next */
    unsigned errors;
    int lossy;     /* messages may be missing (not out of order) */
    unsigned lost; /* messages that never came */
} state_t;

static uint8_t pattern(uint32_t src, uint32_t seq, size_t i)
{
    return (uint8_t)(src * 97u + seq * 13u + (uint32_t)i * 7u + (uint32_t)(i >> 9));
}

static unsigned done, failed; /* sends completed, of which with an error */

static void done_cb(ferry_request_t *req, ferry_status_t st)
{
    if (st != FERRY_OK && failed++ < 4)
        fprintf(stderr, "a send completed with %s\n", ferry_status_string(st));
    (*(unsigned *)req->user_data)++;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static ferry_status_t on_data(void *arg, const void *header, size_t header_len, const void *data,
                              size_t len, ferry_ep_t *ep)
{
    (void)ep;
    state_t *s = arg;
    hdr_t h;
    if (header_len != sizeof(h)) {
        fprintf(stderr, "rank %d: a header of %zu bytes\n", s->rank, header_len);
        s->errors++;
        return FERRY_OK;
    }
    memcpy(&h, header, sizeof(h));
    if (s->lossy && h.seq > s->next) {
        s->lost += h.seq - s->next;
        s->next = h.seq;
    }
    if (h.seq != s->next || h.size != len || h.size != sizes[h.seq % NSIZES]) {
        fprintf(stderr, "rank %d: message %u (%llu B, %zu B of data) arrived, expected %u\n",
                s->rank, h.seq, (unsigned long long)h.size, len, s->next);
        s->errors++;
    }
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(h.src, h.seq, i)) {
            fprintf(stderr, "rank %d: message %u: byte %zu is 0x%02x, expected 0x%02x\n", s->rank,
                    h.seq, i, p[i], pattern(h.src, h.seq, i));
            s->errors++;
            break;
        }
    s->next = h.seq + 1;
    return FERRY_OK;
}

int main(int argc, char **argv)
{
    unsigned rounds = argc > 1 ? (unsigned)atoi(argv[1]) : 3;
    int lossy = argc > 2 && strcmp(argv[2], "lossy") == 0;
    ferry_context_t *ctx = NULL;
    ferry_worker_t *worker = NULL;
    ferry_world_t *world = NULL;
    state_t s = {0, 0, 0, 0, 0};
    uint8_t *bufs[NSIZES] = {0};
    ferry_request_t *reqs = NULL;
    unsigned total = rounds * (unsigned)NSIZES;
    int ok = 0;
    ferry_context_params_t cp = {.field_mask = FERRY_CONTEXT_FIELD_FEATURES,
                                 .features = FERRY_FEATURE_AM};
    ferry_status_t st = ferry_context_create(&cp, &ctx);
    if (st == FERRY_OK)
        st = ferry_worker_create(ctx, NULL, &worker);
    if (st == FERRY_OK)
        st = ferry_world_create(worker, &world);
    if (st != FERRY_OK || ferry_world_size(world) != 2) {
        fprintf(stderr, "rails_check: setup failed (%s), or not 2 ranks\n",
                ferry_status_string(st));
        goto out;
    }
    s.rank = ferry_world_rank(world);
    s.lossy = lossy;
    ferry_worker_set_am_handler(worker, AM_DATA, on_data, &s);
    reqs = calloc(total, sizeof(*reqs));
    if (reqs == NULL)
        goto out;
    st = ferry_world_barrier(world);
    ferry_ep_t *ep;
    if (st == FERRY_OK)
        st = ferry_world_ep(world, 1 - s.rank, &ep);
    /* every message has its own buffer and request: many striped ones in flight at once */
    for (unsigned k = 0; k < NSIZES && st == FERRY_OK; k++)
        if ((bufs[k] = malloc(sizes[k] * rounds + 1)) == NULL)
            st = FERRY_ERR_NO_MEMORY;
    double limit = now_s() + LIMIT_S;
    for (uint32_t seq = 0; seq < total && st == FERRY_OK; seq++) {
        size_t size = sizes[seq % NSIZES];
        uint8_t *b = bufs[seq % NSIZES] + size * (seq / NSIZES);
        for (size_t i = 0; i < size; i++)
            b[i] = pattern((uint32_t)s.rank, seq, i);
        hdr_t h = {(uint32_t)s.rank, seq, size};
        reqs[seq].cb = done_cb;
        reqs[seq].user_data = &done;
        do {
            st = ferry_am_send(ep, AM_DATA, &h, sizeof(h), b, size, &reqs[seq]);
            if (st == FERRY_ERR_NO_RESOURCE)
                ferry_worker_progress(worker);
        } while (st == FERRY_ERR_NO_RESOURCE && now_s() < limit);
        if (st == FERRY_OK) {
            done++;
        } else if (st == FERRY_INPROGRESS) {
            st = FERRY_OK;
        } else if (lossy && st != FERRY_ERR_NO_RESOURCE) { /* refused at once: as failed */
            fprintf(stderr, "rank %d: send %u failed at once: %s\n", s.rank, seq,
                    ferry_status_string(st));
            done++;
            failed++;
            st = FERRY_OK;
        }
    }
    if (st != FERRY_OK)
        fprintf(stderr, "rank %d: send failed: %s\n", s.rank, ferry_status_string(st));
    while (st == FERRY_OK && s.next < total && now_s() < limit)
        ferry_worker_progress(worker);
    while (st == FERRY_OK && done < total && now_s() < limit)
        ferry_worker_progress(worker);
    if (done != total)
        fprintf(stderr, "rank %d: %u of %u sends completed\n", s.rank, done, total);
    if (s.next != total)
        fprintf(stderr, "rank %d: %u of %u messages arrived\n", s.rank, s.next, total);
    ferry_status_t bst = ferry_world_barrier(world);
    ok = st == FERRY_OK && bst == FERRY_OK && s.errors == 0 && s.next == total && done == total &&
         (lossy || (s.lost == 0 && failed == 0));
    printf("rails_check: rank %d: %u messages received in order (%u lost), %u errors, %u sends "
           "failed: %s\n",
           s.rank, s.next - s.lost, s.lost, s.errors, failed, ok ? "ok" : "FAILED");
out:
    for (unsigned k = 0; k < NSIZES; k++)
        free(bufs[k]);
    ferry_world_destroy(world);
    ferry_worker_destroy(worker);
    ferry_context_destroy(ctx);
    free(reqs);
    return ok ? 0 : 1;
}
