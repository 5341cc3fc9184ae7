/*
 * shm_pingpong.c - a tl-level benchmark of the shm transport between two processes (a forked
 * pair, pinned to different cores when there are two), for tuning the transport without the
 * layers above it.  It prints:
 *
 *   am 8 B latency     one-way, half the round trip of am_short ping-pong (median of runs)
 *   am 8 B rate        am_short streamed, messages/s
 *   am_zcopy bw        1 MiB zero-copy messages, window of 16, MB/s
 *   put / get bw       1 MiB into ferry-allocated shared memory (mapped: memcpy) and into
 *                      plain memory (process_vm_writev/readv), MB/s
 *   atomic latency     fetch-add on mapped memory, and emulated by the target's progress
 *
 * Usage: shm_pingpong [-n latency iterations] [-b bandwidth iterations] [-s bytes]
 * It is not a correctness test (the full tool is ferry_perf), but checks every status.
 */
#include <sched.h>
#include <stdlib.h>

#include "shm_test.h"
#include "util/clock.h"

#define CHECK(st)                                                                                  \
    do {                                                                                           \
        ferry_status_t s_ = (st);                                                                  \
        if (s_ != FERRY_OK && s_ != FERRY_INPROGRESS) {                                            \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #st, ferry_status_string(s_));   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static struct {
    tproc_t p;
    fy_tl_ep_t *ep;
    unsigned long rx;
    int echo; /* answer every id-1 message with an id-1 message */
} g;

static void bench_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    g.rx++;
    if (g.echo && id == 1) {
        struct iovec v = {(void *)data, len};
        CHECK(g.p.ops->am_short(g.ep, 1, &v, 1));
    }
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2)
        (void)sched_setaffinity(0, sizeof(s), &s);
}

static void wait_rx(unsigned long n)
{
    while (g.rx < n)
        g.p.ops->iface_progress(g.p.iface);
}

static void send_short(uint8_t id, const void *buf, size_t len)
{
    struct iovec v = {(void *)buf, len};
    ferry_status_t st;
    while ((st = g.p.ops->am_short(g.ep, id, &v, 1)) == FERRY_ERR_NO_RESOURCE)
        g.p.ops->iface_progress(g.p.iface);
    CHECK(st);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct regions {
    char rkey_shared[128], rkey_plain[128];
    uint64_t addr_shared, addr_plain;
} regions_t;

int main(int argc, char **argv)
{
    (void)fytest_main;
    unsigned long n = 200000, nb = 2000;
    size_t size = 1 << 20;
    int opt;
    while ((opt = getopt(argc, argv, "n:b:s:")) != -1) {
        if (opt == 'n')
            n = strtoul(optarg, NULL, 0);
        else if (opt == 'b')
            nb = strtoul(optarg, NULL, 0);
        else if (opt == 's')
            size = strtoul(optarg, NULL, 0);
        else {
            fprintf(stderr, "usage: %s [-n iters] [-b bw iters] [-s bytes]\n", argv[0]);
            return 2;
        }
    }
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0)
        return 1;
    pid_t child = fork();
    int server = child == 0;
    int rfd = server ? down[0] : up[0], wfd = server ? up[1] : down[1];
    if (server)
        alarm(300);
    pin(server ? 1 : 0);
    tp_open(&g.p, bench_cb, NULL);
    taddr_t mine = tp_addr(&g.p), peer;
    tc_write(wfd, &mine, sizeof(mine));
    tc_read(rfd, &peer, sizeof(peer));
    g.ep = tp_ep(&g.p, &peer);
    const fy_tl_ops_t *ops = g.p.ops;
    char *buf = malloc(size);
    memset(buf, 1, size);
    uint64_t v8 = 0;

    /* 1. latency: runs of n/10 round trips, median */
    enum { RUNS = 10 };
    double lat[RUNS];
    unsigned long per = n / RUNS ? n / RUNS : 1;
    g.echo = server;
    for (int r = 0; r < RUNS + 1; r++) { /* run 0 warms up */
        tc_put_u64(wfd, 0);
        tc_get_u64(rfd);
        unsigned long base = g.rx;
        uint64_t t0 = fy_time_ns();
        if (server) {
            wait_rx(base + per);
        } else {
            for (unsigned long i = 1; i <= per; i++) {
                send_short(1, &v8, 8);
                wait_rx(base + i);
            }
        }
        if (r > 0)
            lat[r - 1] = (double)(fy_time_ns() - t0) / (double)per / 2.0;
    }
    g.echo = 0;
    qsort(lat, RUNS, sizeof(double), cmp_double);

    /* 2. message rate: n am_short streamed, one ack at the end */
    tc_put_u64(wfd, 0);
    tc_get_u64(rfd);
    unsigned long base = g.rx;
    uint64_t t0 = fy_time_ns();
    if (server) {
        wait_rx(base + n);
        send_short(2, &v8, 8);
    } else {
        for (unsigned long i = 0; i < n; i++)
            send_short(1, &v8, 8);
        wait_rx(base + 1);
    }
    double rate = (double)n / ((double)(fy_time_ns() - t0) / 1e9);

    /* 3. am_zcopy bandwidth, window of 16 */
    enum { W = 16 };
    tcomp_t comps[W];
    tc_put_u64(wfd, 0);
    tc_get_u64(rfd);
    base = g.rx;
    t0 = fy_time_ns();
    if (server) {
        wait_rx(base + nb);
        send_short(2, &v8, 8);
    } else {
        unsigned long posted = 0;
        for (int w = 0; w < W; w++)
            comps[w].done = 1;
        while (posted < nb) {
            tcomp_t *c = &comps[posted % W];
            if (!c->done) {
                ops->iface_progress(g.p.iface);
                continue;
            }
            tcomp_init(c);
            struct iovec v = {buf + 64, size - 64};
            ferry_status_t st = ops->am_zcopy(g.ep, 3, buf, 64, &v, 1, &c->super);
            if (st == FERRY_ERR_NO_RESOURCE) {
                c->done = 1;
                ops->iface_progress(g.p.iface);
                continue;
            }
            CHECK(st);
            if (st == FERRY_OK)
                c->done = 1;
            posted++;
        }
        wait_rx(base + 1);
    }
    double zbw = (double)nb * (double)size / ((double)(fy_time_ns() - t0) / 1e9) / 1e6;

    /* 4. put / get into shared and plain memory of the server */
    regions_t reg;
    char *shared = NULL, *plain = NULL;
    char memh_s[256], memh_p[256];
    if (server) {
        CHECK(fy_shmem_alloc(size, "bench", (void **)&shared));
        plain = malloc(size);
        memset(plain, 0, size);
        CHECK(ops->mem_reg(g.p.md, shared, size, 7, memh_s));
        CHECK(ops->mem_reg(g.p.md, plain, size, 7, memh_p));
        CHECK(ops->rkey_pack(g.p.md, memh_s, reg.rkey_shared));
        CHECK(ops->rkey_pack(g.p.md, memh_p, reg.rkey_plain));
        reg.addr_shared = (uint64_t)(uintptr_t)shared;
        reg.addr_plain = (uint64_t)(uintptr_t)plain;
        tc_write(wfd, &reg, sizeof(reg));
    } else {
        tc_read(rfd, &reg, sizeof(reg));
    }
    double rma_bw[4] = {0}, amo_lat[2] = {0};
    if (!server) {
        shm_rkey_t rk[2];
        CHECK(ops->rkey_unpack(g.p.md, reg.rkey_shared, &rk[0]));
        CHECK(ops->rkey_unpack(g.p.md, reg.rkey_plain, &rk[1]));
        uint64_t addr[2] = {reg.addr_shared, reg.addr_plain};
        for (int k = 0; k < 4; k++) {
            int which = k & 1, get = k >> 1;
            if (which == 1 && !(g.p.attr.caps & FY_TL_CAP_PUT))
                continue; /* FERRY_SHM_CMA=n: only shared memory is reachable */
            struct iovec v = {buf, size};
            for (unsigned long i = 0; i < nb / 10 + 1; i++) /* warm-up */
                CHECK(get ? ops->get_zcopy(g.ep, &v, 1, addr[which], &rk[which], NULL)
                          : ops->put_zcopy(g.ep, &v, 1, addr[which], &rk[which], NULL));
            t0 = fy_time_ns();
            for (unsigned long i = 0; i < nb; i++)
                CHECK(get ? ops->get_zcopy(g.ep, &v, 1, addr[which], &rk[which], NULL)
                          : ops->put_zcopy(g.ep, &v, 1, addr[which], &rk[which], NULL));
            rma_bw[k] = (double)nb * (double)size / ((double)(fy_time_ns() - t0) / 1e9) / 1e6;
        }
        /* atomics: fetch-add on the mapped region, and on plain memory (target's progress) */
        for (int which = 0; which < 2; which++) {
            unsigned long na = which ? n / 10 : n;
            t0 = fy_time_ns();
            for (unsigned long i = 0; i < na; i++) {
                uint64_t old;
                tcomp_t c;
                tcomp_init(&c);
                ferry_status_t st = ops->atomic(g.ep, FERRY_ATOMIC_ADD, 8, 1, 0, &old, addr[which],
                                                &rk[which], &c.super);
                CHECK(st);
                while (st == FERRY_INPROGRESS && c.done == 0)
                    ops->iface_progress(g.p.iface);
            }
            amo_lat[which] = (double)(fy_time_ns() - t0) / (double)na;
        }
        ops->rkey_release(g.p.md, &rk[0]);
        ops->rkey_release(g.p.md, &rk[1]);
        send_short(2, &v8, 8);
    } else {
        wait_rx(g.rx + 1); /* (progress serves the emulated atomics) */
        ops->mem_dereg(g.p.md, memh_s);
        ops->mem_dereg(g.p.md, memh_p);
    }
    tc_put_u64(wfd, 0);
    tc_get_u64(rfd);
    ops->ep_destroy(g.ep);
    tp_close(&g.p);
    if (server) {
        fy_shmem_free(shared);
        free(plain);
        free(buf);
        return 0;
    }
    int st = 0;
    waitpid(child, &st, 0);
    printf("shm tl, %zu-byte transfers, %lu latency / %lu bandwidth iterations\n", size, n, nb);
    printf("  am 8 B latency     %8.3f us one-way (median of %d runs; min %.3f, max %.3f)\n",
           lat[RUNS / 2] / 1e3, RUNS, lat[0] / 1e3, lat[RUNS - 1] / 1e3);
    printf("  am 8 B rate        %8.2f M msg/s\n", rate / 1e6);
    printf("  am_zcopy bw        %8.0f MB/s (%s)\n", zbw,
           (g.p.attr.caps & FY_TL_CAP_PUT) ? "pulled with CMA" : "pushed through the ring");
    printf("  put bw   shared    %8.0f MB/s   plain (CMA) %8.0f MB/s (0: CMA off)\n", rma_bw[0],
           rma_bw[1]);
    printf("  get bw   shared    %8.0f MB/s   plain (CMA) %8.0f MB/s\n", rma_bw[2], rma_bw[3]);
    printf("  fetch-add latency  %8.3f us mapped, %.3f us served by the target\n", amo_lat[0] / 1e3,
           amo_lat[1] / 1e3);
    free(buf);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
