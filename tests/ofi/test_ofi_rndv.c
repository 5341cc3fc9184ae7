/*
 * Tagged rendezvous over ofi (the receiver fi_reads the sender's buffer) through the
 * registration cache: two workers of one process, every peer reached over ofi (CTest sets
 * FERRY_TLS=ofi and the provider).  The registrations are counted where ferry_worker_print_info
 * prints them (the ofi iface's "memory registrations N" line, the md's count).
 *
 *   repeat   one 1 MiB buffer, new contents each time, sent 8 times: registered once when the
 *            cache is on (FERRY_RCACHE=n: 8 times), and every message arrives with the
 *            contents the buffer had when it was sent.
 *   remap    the buffer is sent, unmapped and mapped again at the same address with other
 *            contents (munmap + mmap, then mmap(MAP_FIXED) straight over it): each send after
 *            a remap registers again (the stale registration is never used; the cache counts
 *            the invalidation) and delivers the new contents.
 * Both check that the data went by a read (the sender's endpoint sent no more than the RTS).
 */
#include <stdio.h>
#include <sys/mman.h>

#include "common.h"

#define LEN (1u << 20)
#define TAG 0x5151

static int cache_wanted(void)
{
    const char *e = getenv("FERRY_RCACHE");
    return e == NULL || (e[0] != 'n' && e[0] != 'N' && e[0] != '0');
}

/* The ofi iface's counters as printed: registrations made, and the rcache line's. */
typedef struct counts {
    unsigned long long regs, hits, misses, invalidations;
    int have_cache, cache_on, local;
} counts_t;

static counts_t counts(pair_t *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FY_ASSERT(f != NULL);
    ferry_worker_print_info(p->w[0], f);
    fclose(f);
    counts_t c;
    memset(&c, 0, sizeof(c));
    const char *r = strstr(text, "memory registrations ");
    FY_ASSERT_MSG(r != NULL, "no ofi registration count in:\n%s", text);
    FY_ASSERT_EQ(sscanf(r, "memory registrations %llu", &c.regs), 1);
    c.local = strstr(r, "local descriptors yes") != NULL;
    const char *rc = strstr(text, "rcache ofi: ");
    if (rc != NULL) {
        size_t ent, bytes;
        c.have_cache = 1;
        c.cache_on = strncmp(rc + 12, "on", 2) == 0;
        const char *n = strchr(rc, ',');
        FY_ASSERT(n != NULL);
        FY_ASSERT_EQ(sscanf(n,
                            ", %zu regions / %zu bytes registered, %llu hits, %llu misses, "
                            "%*u evictions, %llu invalidations",
                            &ent, &bytes, &c.hits, &c.misses, &c.invalidations),
                     5);
    }
    free(text);
    return c;
}

static uint64_t tx_bytes(ferry_ep_t *ep)
{
    ferry_ep_stats_t st;
    FY_ASSERT_OK(ferry_ep_get_stats(ep, &st));
    return st.tx_bytes;
}

static void wait_done(pair_t *p, ferry_status_t st, ferry_request_t *req, done_t *d)
{
    if (st != FERRY_INPROGRESS) {
        FY_ASSERT_OK(st);
        return;
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (d->calls == 0) {
        pair_progress(p);
        clock_gettime(CLOCK_MONOTONIC, &t);
        FY_ASSERT_MSG(t.tv_sec - t0.tv_sec < 30, "a rendezvous did not complete in 30 s");
    }
    FY_ASSERT_EQ(d->calls, 1);
    FY_ASSERT_OK(req->status);
}

/* Send buf (LEN bytes holding pattern seed) to w[1] and check what arrived; the data must go
 * by a read, not as active messages from the sender. */
static void send_check(pair_t *p, const void *buf, unsigned seed, char *dst)
{
    memset(dst, 0, LEN);
    uint64_t before = tx_bytes(p->ep[0]);
    done_t ds = {0, 0}, dr = {0, 0};
    ferry_request_t rs = {.cb = req_cb, .user_data = &ds}, rr = {.cb = req_cb, .user_data = &dr};
    ferry_status_t str = ferry_tag_recv(p->w[1], dst, LEN, TAG, ~0ull, &rr);
    ferry_status_t sts = ferry_tag_send(p->ep[0], TAG, buf, LEN, &rs);
    wait_done(p, str, &rr, &dr);
    wait_done(p, sts, &rs, &ds);
    FY_ASSERT_EQ(rr.length, LEN);
    FY_ASSERT_MSG(check_pattern(dst, LEN, seed), "message %u: not the contents sent", seed);
    FY_ASSERT_LT(tx_bytes(p->ep[0]) - before, 4096); /* RTS only: the receiver read it */
}

static void repeat(void)
{
    pair_t p;
    pair_open(&p);
    char *dst = malloc(LEN);
    void *buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FY_ASSERT(buf != MAP_FAILED);
    counts_t c0 = counts(&p);
    const unsigned n = 8;
    for (unsigned i = 0; i < n; i++) {
        fill_pattern(buf, LEN, 100 + i);
        send_check(&p, buf, 100 + i, dst);
    }
    counts_t c1 = counts(&p);
    if (c1.local) {
        /* FERRY_OFI_MR_FORCE=local: every local buffer needs a descriptor too; the receive
         * buffer and the copy buffers of the pooled ops are registered once as well, so the
         * count stays below one registration per message */
        printf("FI_MR_LOCAL forced: %llu registrations for %u messages\n", c1.regs - c0.regs, n);
        FY_ASSERT_LT(c1.regs - c0.regs, n);
    } else if (cache_wanted()) {
        FY_ASSERT_MSG(c1.have_cache && c1.cache_on, "the registration cache is not on");
        FY_ASSERT_EQ(c1.regs - c0.regs, 1);
        FY_ASSERT_EQ(c1.misses, 1);
        FY_ASSERT_EQ(c1.hits, n - 1);
    } else {
        FY_ASSERT_EQ(c1.regs - c0.regs, n);
    }
    munmap(buf, LEN);
    free(dst);
    pair_close(&p);
}

static void remap(void)
{
    if (!cache_wanted())
        return;
    pair_t p;
    pair_open(&p);
    if (counts(&p).local) {
        pair_close(&p); /* local registrations would blur the counts */
        return;
    }
    char *dst = malloc(LEN);
    char *buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FY_ASSERT(buf != MAP_FAILED);
    fill_pattern(buf, LEN, 1);
    send_check(&p, buf, 1, dst);
    send_check(&p, buf, 1, dst);
    counts_t c0 = counts(&p);
    FY_ASSERT(c0.cache_on);

    /* unmapped, then mapped again at the same address with other contents */
    FY_ASSERT_EQ(munmap(buf, LEN), 0);
    char *again = mmap(buf, LEN, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    FY_ASSERT_MSG(again == buf, "could not map the same address again");
    fill_pattern(buf, LEN, 2);
    send_check(&p, buf, 2, dst);
    counts_t c1 = counts(&p);
    FY_ASSERT_EQ(c1.regs - c0.regs, 1); /* a new registration, not the stale one */
    FY_ASSERT_GE(c1.invalidations, c0.invalidations + 1);

    /* mapped straight over (MAP_FIXED, no munmap first) */
    again = mmap(buf, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    FY_ASSERT(again == buf);
    fill_pattern(buf, LEN, 3);
    send_check(&p, buf, 3, dst);
    send_check(&p, buf, 3, dst);
    counts_t c2 = counts(&p);
    FY_ASSERT_EQ(c2.regs - c1.regs, 1); /* once for both sends */
    FY_ASSERT_GE(c2.invalidations, c1.invalidations + 1);

    munmap(buf, LEN);
    free(dst);
    pair_close(&p);
}

FYTEST_MAIN(FYTEST_CASE(repeat), FYTEST_CASE(remap))
