/*
 * test_udp_rma.c - put and get over udp, checked at the target against the region table:
 * in-bounds puts and gets move the right bytes (large ones in chunks straight into place);
 * a put or get outside the registered region, with a wrong key, an unknown region or
 * without the right completes with FERRY_ERR_ACCESS_DENIED at the initiator (a refused
 * put_short is reported by the next flush); and nothing outside the region is touched: the
 * target checks its guard areas and the region against the initiator's model at the end.
 * Run clean and under the fault injector.
 */
#include "fytest.h"
#include "udp_test.h"

#define GUARD  (1u << 20)
#define REGION (1u << 20)
#define RO_LEN 65536

typedef struct target_info {
    uint64_t base, ro_base;
    uint8_t rkey[64], ro_rkey[64];
    ut_addr_t addr;
} target_info_t;

typedef struct state {
    volatile int check_req, check_result_ready;
    uint32_t want_crc;
    int32_t result;
} state_t;

static void am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    state_t *s = arg;
    if (id == 3 && len == 4) {
        memcpy(&s->want_crc, data, 4);
        s->check_req = 1;
    } else if (id == 4 && len == 4) {
        memcpy(&s->result, data, 4);
        s->check_result_ready = 1;
    }
}

typedef struct comp {
    fy_tl_comp_t comp;
    volatile int done;
    ferry_status_t st;
} comp_t;

static void comp_cb(fy_tl_comp_t *c, ferry_status_t st)
{
    ((comp_t *)c)->st = st;
    ((comp_t *)c)->done = 1;
}

/* The target (child): register, publish, wait for the check, check, answer. */
static int target(int rfd, int wfd)
{
    state_t s;
    ut_node_t n;
    target_info_t ti;
    ut_addr_t theirs;
    uint8_t *mem = malloc(2 * GUARD + REGION), *ro = malloc(RO_LEN);
    uint8_t memh[64], ro_memh[64];

    memset(&s, 0, sizeof(s));
    memset(&ti, 0, sizeof(ti));
    if (mem == NULL || ro == NULL || ut_open(&n, "lo", am_cb, &s) != 0)
        return 10;
    ut_pattern(mem, 2 * GUARD + REGION, 77);
    ut_pattern(ro, RO_LEN, 78);
    if (n.ops->mem_reg(n.md, mem + GUARD, REGION, FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE,
                       memh) != FERRY_OK ||
        n.ops->mem_reg(n.md, ro, RO_LEN, FERRY_MEM_REMOTE_READ, ro_memh) != FERRY_OK)
        return 11;
    n.ops->rkey_pack(n.md, memh, ti.rkey);
    n.ops->rkey_pack(n.md, ro_memh, ti.ro_rkey);
    ti.base = (uint64_t)(uintptr_t)(mem + GUARD);
    ti.ro_base = (uint64_t)(uintptr_t)ro;
    ut_get_addr(&n, &ti.addr);
    if (ut_write_all(wfd, &ti, sizeof(ti)) || ut_read_all(rfd, &theirs, sizeof(theirs)))
        return 12;
    if (ut_connect(&n, &theirs) != FERRY_OK)
        return 13;
    if (!ut_wait_flag(&n, &s.check_req, 60000))
        return 14;
    /* Guards untouched, region as the initiator's model says, read-only region intact. */
    uint8_t *ref = malloc(2 * GUARD + REGION);
    ut_pattern(ref, 2 * GUARD + REGION, 77);
    int32_t result = 0;
    if (memcmp(mem, ref, GUARD) != 0)
        result |= 1;
    if (memcmp(mem + GUARD + REGION, ref + GUARD + REGION, GUARD) != 0)
        result |= 2;
    if (fy_udp_crc32c(0, mem + GUARD, REGION) != s.want_crc)
        result |= 4;
    ut_pattern(ref, RO_LEN, 78);
    if (memcmp(ro, ref, RO_LEN) != 0)
        result |= 8;
    struct iovec iov = {&result, 4};
    while (n.ops->am_short(n.ep, 4, &iov, 1) == FERRY_ERR_NO_RESOURCE)
        n.ops->iface_progress(n.iface);
    /* Stay until the initiator has it (it closes the pipe when done). */
    for (;;) {
        struct pollfd pfd = {rfd, POLLIN, 0};
        n.ops->iface_progress(n.iface);
        if (poll(&pfd, 1, 0) > 0)
            break;
    }
    n.ops->mem_dereg(n.md, memh);
    n.ops->mem_dereg(n.md, ro_memh);
    ut_close(&n);
    free(ref);
    free(mem);
    free(ro);
    return 0;
}

static ferry_status_t wait_comp(ut_node_t *n, comp_t *c, ferry_status_t st)
{
    if (st != FERRY_INPROGRESS)
        return st;
    ut_wait_flag(n, &c->done, 30000);
    FY_ASSERT_MSG(c->done, "operation did not complete");
    return c->st;
}

static ferry_status_t put(ut_node_t *n, const void *buf, size_t len, uint64_t addr,
                          const void *rkey)
{
    comp_t c = {{.cb = comp_cb}, 0, FERRY_OK};
    struct iovec iov[2] = {{(void *)buf, len / 2}, {(char *)buf + len / 2, len - len / 2}};
    return wait_comp(n, &c, n->ops->put_zcopy(n->ep, iov, 2, addr, rkey, &c.comp));
}

static ferry_status_t get(ut_node_t *n, void *buf, size_t len, uint64_t addr, const void *rkey)
{
    comp_t c = {{.cb = comp_cb}, 0, FERRY_OK};
    struct iovec iov = {buf, len};
    return wait_comp(n, &c, n->ops->get_zcopy(n->ep, &iov, 1, addr, rkey, &c.comp));
}

static ferry_status_t flush(ut_node_t *n)
{
    comp_t c = {{.cb = comp_cb}, 0, FERRY_OK};
    return wait_comp(n, &c, n->ops->ep_flush(n->ep, &c.comp));
}

static int target_body(int rfd, int wfd, void *arg)
{
    (void)arg;
    return target(rfd, wfd);
}

static void run(void)
{
    int st = 0;
    state_t s;
    ut_node_t n;
    target_info_t ti;
    ut_addr_t mine;
    pid_t pid;

    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    fyproc_t peer;
    pid = ut_spawn(&peer, target_body, NULL);
    FY_ASSERT(pid > 0);
    memset(&s, 0, sizeof(s));
    FY_ASSERT_EQ(ut_open(&n, "lo", am_cb, &s), 0);
    ut_get_addr(&n, &mine);
    FY_ASSERT_EQ(ut_read_all(peer.rfd, &ti, sizeof(ti)), 0);
    FY_ASSERT_EQ(ut_write_all(peer.wfd, &mine, sizeof(mine)), 0);
    FY_ASSERT_OK(ut_connect(&n, &ti.addr));

    uint8_t *model = malloc(REGION), *buf = malloc(REGION), *back = malloc(REGION);
    uint8_t *ref = malloc(2 * GUARD + REGION);
    ut_pattern(ref, 2 * GUARD + REGION, 77);
    memcpy(model, ref + GUARD, REGION);
    uint8_t badkey[64];
    memcpy(badkey, ti.rkey, sizeof(badkey));
    badkey[8] ^= 1; /* the key half of (id, key) */
    uint8_t badid[64];
    memcpy(badid, ti.rkey, sizeof(badid));
    badid[0] ^= 0x55;

    /* In bounds: a large put (chunks straight into place) and reading it back. */
    ut_pattern(buf, 300000, 5);
    FY_ASSERT_OK(put(&n, buf, 300000, ti.base + 1000, ti.rkey));
    memcpy(model + 1000, buf, 300000);
    FY_ASSERT_OK(get(&n, back, 300000, ti.base + 1000, ti.rkey));
    FY_ASSERT_MEM_EQ(back, buf, 300000);
    /* Up to the last byte of the region, and empty operations. */
    ut_pattern(buf, 4096, 6);
    FY_ASSERT_OK(put(&n, buf, 4096, ti.base + REGION - 4096, ti.rkey));
    memcpy(model + REGION - 4096, buf, 4096);
    FY_ASSERT_OK(put(&n, buf, 0, ti.base, ti.rkey));
    FY_ASSERT_OK(get(&n, back, 0, ti.base, ti.rkey));

    /* Refused: past the end, before the start, wrong key, unknown region, no write right. */
    FY_ASSERT_STATUS(put(&n, buf, 1000, ti.base + REGION - 100, ti.rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(put(&n, buf, 200000, ti.base - 10, ti.rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(put(&n, buf, 100, ti.base, badkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(put(&n, buf, 100, ti.base, badid), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(put(&n, buf, 100, ti.ro_base, ti.ro_rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(get(&n, back, 100, ti.base - 50, ti.rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(get(&n, back, 2 * REGION, ti.base, ti.rkey), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(get(&n, back, 100, ti.base, badkey), FERRY_ERR_ACCESS_DENIED);
    /* A read-only region can be read. */
    FY_ASSERT_OK(get(&n, back, RO_LEN, ti.ro_base, ti.ro_rkey));
    ut_pattern(buf, RO_LEN, 78);
    FY_ASSERT_MEM_EQ(back, buf, RO_LEN);

    /* put_short: fine, then refused (seen by the flush), then fine again. */
    ut_pattern(buf, 64, 7);
    FY_ASSERT_OK(n.ops->put_short(n.ep, buf, 64, ti.base + 5, ti.rkey));
    memcpy(model + 5, buf, 64);
    FY_ASSERT_OK(flush(&n));
    FY_ASSERT_OK(n.ops->put_short(n.ep, buf, 64, ti.base + REGION - 10, ti.rkey));
    FY_ASSERT_STATUS(flush(&n), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_OK(n.ops->put_short(n.ep, buf, 64, ti.base + 100, badkey));
    FY_ASSERT_STATUS(flush(&n), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_OK(flush(&n));

    /* Several operations in flight, then the whole region read back. */
    comp_t cs[8];
    for (int i = 0; i < 8; i++) {
        struct iovec iov = {buf + i * 100000, 100000};
        ut_pattern(buf + i * 100000, 100000, 100 + (uint32_t)i);
        cs[i] = (comp_t){{.cb = comp_cb}, 0, FERRY_OK};
        FY_ASSERT_STATUS(
            n.ops->put_zcopy(n.ep, &iov, 1, ti.base + (uint64_t)i * 120000, ti.rkey, &cs[i].comp),
            FERRY_INPROGRESS);
        memcpy(model + i * 120000, buf + i * 100000, 100000);
    }
    FY_ASSERT_OK(flush(&n));
    for (int i = 0; i < 8; i++) {
        FY_ASSERT(cs[i].done);
        FY_ASSERT_OK(cs[i].st);
    }
    FY_ASSERT_OK(get(&n, back, REGION, ti.base, ti.rkey));
    FY_ASSERT_MEM_EQ(back, model, REGION);

    /* The target checks its guards and the region against our model. */
    uint32_t crc = fy_udp_crc32c(0, model, REGION);
    struct iovec iov = {&crc, 4};
    FY_ASSERT_OK(n.ops->am_short(n.ep, 3, &iov, 1));
    FY_ASSERT(ut_wait_flag(&n, &s.check_result_ready, 30000));
    FY_ASSERT_MSG(s.result == 0, "target found: %s%s%s%s", s.result & 1 ? "low guard touched " : "",
                  s.result & 2 ? "high guard touched " : "",
                  s.result & 4 ? "region differs from the model " : "",
                  s.result & 8 ? "read-only region written" : "");
    FY_ASSERT_OK(flush(&n));
    close(peer.wfd);
    peer.wfd = -1;
    uint64_t end = fy_time_ns() + 20 * FY_NSEC_PER_SEC;
    int exited = 0;
    while (!exited && fy_time_ns() < end) {
        ut_progress(&n, 1);
        exited = waitpid(pid, &st, WNOHANG) == pid;
    }
    FY_ASSERT(exited);
    FY_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "target failed: status 0x%x", st);
    peer.reaped = 1;
    fyproc_release(&peer);
    ut_close(&n);
    free(model);
    free(buf);
    free(back);
    free(ref);
}

static void rma_clean(void)
{
    run();
}

static void rma_loss5(void)
{
    setenv("FERRY_UDP_FAULT_SEED", "31", 1);
    setenv("FERRY_UDP_FAULT_DROP", "5", 1);
    setenv("FERRY_UDP_FAULT_DUP", "2", 1);
    setenv("FERRY_UDP_FAULT_REORDER", "2", 1);
    setenv("FERRY_UDP_FAULT_CORRUPT", "1", 1);
    run();
}

static void rma_small_mtu(void)
{
    /* 1500-byte segments: every large put and get is hundreds of chunks. */
    setenv("FERRY_UDP_MTU", "1500", 1);
    run();
}

FYTEST_MAIN(FYTEST_CASE(rma_clean), FYTEST_CASE(rma_loss5), FYTEST_CASE(rma_small_mtu))
