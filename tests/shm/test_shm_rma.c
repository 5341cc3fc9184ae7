/*
 * test_shm_rma.c - put, get and atomics of the shm transport, verified at the target: into
 * ferry-allocated shared memory (mapped by the initiator) and into plain memory (cross-memory
 * attach; atomics served by the target's progress), every atomic op at 32 and 64 bits,
 * fetching or not, N processes fetch-adding one counter (exactly N x iters), and the refusals:
 * out of bounds, missing rights, a wrong key, a key of another process.
 */
#include "shm_test.h"

enum { REG_SHARED, REG_PLAIN, NREG };
#define REG_LEN ((1 << 20) + 4096)

typedef struct target_info {
    uint64_t addr[NREG];
    char rkey[NREG][128];
} target_info_t;

typedef struct target_args {
    unsigned access;
    int sleepy;
} target_args_t;

enum { CMD_QUIT, CMD_FILL, CMD_CHECK, CMD_READ64, CMD_ZERO };
typedef struct cmd {
    uint64_t op, reg, off, len, seed;
} cmd_t;

static void noop_cb(void *arg, uint8_t id, const void *data, size_t len) {}

/* The target: two regions (shared, plain) registered with args->access; obeys commands. */
static void target_main(int rfd, int wfd, void *arg)
{
    const target_args_t *a = arg;
    tproc_t p;
    tp_open(&p, noop_cb, NULL);
    p.sleepy = a->sleepy;
    char *mem[NREG];
    FY_ASSERT_OK(fy_shmem_alloc(REG_LEN, "test", (void **)&mem[REG_SHARED]));
    FY_ASSERT(posix_memalign((void **)&mem[REG_PLAIN], 4096, REG_LEN) == 0);
    memset(mem[REG_PLAIN], 0, REG_LEN);
    char memh[NREG][256];
    target_info_t info;
    FY_ASSERT(p.tl->memh_size <= sizeof(memh[0]) && p.tl->rkey_packed_size <= 128);
    for (int r = 0; r < NREG; r++) {
        FY_ASSERT_OK(p.ops->mem_reg(p.md, mem[r], REG_LEN, a->access, memh[r]));
        FY_ASSERT_OK(p.ops->rkey_pack(p.md, memh[r], info.rkey[r]));
        info.addr[r] = (uint64_t)(uintptr_t)mem[r];
    }
    taddr_t addr = tp_addr(&p);
    tc_write(wfd, &addr, sizeof(addr));
    tc_write(wfd, &info, sizeof(info));
    for (;;) {
        tp_wait_fd(&p, rfd); /* serves atomic requests meanwhile */
        cmd_t c;
        tc_read(rfd, &c, sizeof(c));
        if (c.op == CMD_QUIT)
            break;
        char *m = mem[c.reg] + c.off;
        uint64_t v = 0;
        if (c.op == CMD_FILL)
            pat_fill(m, c.len, c.seed);
        else if (c.op == CMD_ZERO)
            memset(m, 0, c.len);
        else if (c.op == CMD_CHECK)
            v = (uint64_t)pat_check(m, c.len, c.seed);
        else if (c.op == CMD_READ64)
            memcpy(&v, m, 8);
        tc_put_u64(wfd, v);
    }
    for (int r = 0; r < NREG; r++)
        p.ops->mem_dereg(p.md, memh[r]);
    tp_close(&p);
    fy_shmem_free(mem[REG_SHARED]);
    free(mem[REG_PLAIN]);
}

typedef struct initiator {
    tproc_t p;
    tchild_t c;
    fy_tl_ep_t *ep;
    taddr_t taddr; /* the target's */
    target_info_t info;
    shm_rkey_t rk[NREG];
} initiator_t;

static void init_start(initiator_t *in, target_args_t *ta)
{
    in->c = tc_spawn(target_main, ta);
    tp_open(&in->p, noop_cb, NULL);
    tc_read(in->c.rfd, &in->taddr, sizeof(in->taddr));
    tc_read(in->c.rfd, &in->info, sizeof(in->info));
    in->ep = tp_ep(&in->p, &in->taddr);
    FY_ASSERT(in->p.tl->rkey_size <= sizeof(shm_rkey_t));
    for (int r = 0; r < NREG; r++)
        FY_ASSERT_OK(in->p.ops->rkey_unpack(in->p.md, in->info.rkey[r], &in->rk[r]));
    FY_ASSERT(in->rk[REG_SHARED].mapped != NULL); /* put/get/atomics without system calls */
    FY_ASSERT(in->rk[REG_PLAIN].mapped == NULL);
}

static uint64_t init_cmd(initiator_t *in, uint64_t op, uint64_t reg, uint64_t off, uint64_t len,
                         uint64_t seed)
{
    cmd_t c = {op, reg, off, len, seed};
    tc_write(in->c.wfd, &c, sizeof(c));
    /* the target may need our progress (answers to our atomics) */
    tp_wait_fd(&in->p, in->c.rfd);
    return tc_get_u64(in->c.rfd);
}

static void init_stop(initiator_t *in)
{
    for (int r = 0; r < NREG; r++)
        in->p.ops->rkey_release(in->p.md, &in->rk[r]);
    cmd_t c = {CMD_QUIT, 0, 0, 0, 0};
    tc_write(in->c.wfd, &c, sizeof(c));
    tc_join(&in->c);
    in->p.ops->ep_destroy(in->ep);
    tp_close(&in->p);
}

static uint64_t raddr(initiator_t *in, int r, uint64_t off)
{
    return in->info.addr[r] + off;
}

static void flush(initiator_t *in)
{
    tcomp_t c;
    tcomp_init(&c);
    ferry_status_t st = in->p.ops->ep_flush(in->ep, &c.super);
    while (st == FERRY_INPROGRESS && c.done == 0)
        tp_progress(&in->p);
    FY_ASSERT(st == FERRY_OK || c.status == FERRY_OK);
}

/* Put and get of several sizes and offsets, checked at the target / here. */
static void put_get(void)
{
    target_args_t ta = {FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC,
                        0};
    initiator_t in;
    init_start(&in, &ta);
    FY_ASSERT(in.p.attr.caps & FY_TL_CAP_PUT);
    FY_ASSERT(in.p.attr.caps & FY_TL_CAP_GET);
    static char buf[REG_LEN];
    static const size_t sizes[] = {1, 8, 100, 4096, 65537, 1 << 20};
    static const size_t offs[] = {0, 3, 4096, 0, 17, 4096};
    for (int r = 0; r < NREG; r++) {
        for (size_t i = 0; i < FY_ARRAY_SIZE(sizes); i++) {
            uint64_t seed = (uint64_t)r * 100 + i;
            pat_fill(buf, sizes[i], seed);
            if (sizes[i] <= in.p.attr.max_put_short)
                FY_ASSERT_OK(
                    in.p.ops->put_short(in.ep, buf, sizes[i], raddr(&in, r, offs[i]), &in.rk[r]));
            else {
                struct iovec v[2] = {{buf, sizes[i] / 3},
                                     {buf + sizes[i] / 3, sizes[i] - sizes[i] / 3}};
                FY_ASSERT_OK(
                    in.p.ops->put_zcopy(in.ep, v, 2, raddr(&in, r, offs[i]), &in.rk[r], NULL));
            }
            flush(&in);
            FY_ASSERT_EQ((long)init_cmd(&in, CMD_CHECK, (uint64_t)r, offs[i], sizes[i], seed), -1);

            seed += 1000;
            init_cmd(&in, CMD_FILL, (uint64_t)r, offs[i], sizes[i], seed);
            memset(buf, 0, sizes[i]);
            struct iovec v[2] = {{buf, sizes[i] / 2},
                                 {buf + sizes[i] / 2, sizes[i] - sizes[i] / 2}};
            tcomp_t c;
            tcomp_init(&c);
            ferry_status_t st =
                in.p.ops->get_zcopy(in.ep, v, 2, raddr(&in, r, offs[i]), &in.rk[r], &c.super);
            while (st == FERRY_INPROGRESS && c.done == 0)
                tp_progress(&in.p);
            FY_ASSERT(st == FERRY_OK || c.status == FERRY_OK);
            FY_ASSERT_EQ(pat_check(buf, sizes[i], seed), -1);
        }
    }
    init_stop(&in);
}

/* Run one atomic and wait for it; returns the old value (fetching) or 0. */
static uint64_t amo(initiator_t *in, int r, ferry_atomic_op_t op, size_t size, uint64_t operand,
                    uint64_t compare, int fetch, uint64_t off)
{
    uint64_t old = 0xdeadbeefdeadbeefull;
    tcomp_t c;
    tcomp_init(&c);
    ferry_status_t st = in->p.ops->atomic(in->ep, op, size, operand, compare, fetch ? &old : NULL,
                                          raddr(in, r, off), &in->rk[r], &c.super);
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "atomic: %s", ferry_status_string(st));
    while (st == FERRY_INPROGRESS && c.done == 0)
        tp_progress(&in->p);
    FY_ASSERT(st == FERRY_OK || c.status == FERRY_OK);
    if (!fetch)
        return 0;
    return size == 4 ? (old & 0xffffffffull) : old;
}

/* Every op at 32 and 64 bits, fetching and not, against a shadow value. */
static void atomics_all(void)
{
    target_args_t ta = {FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC,
                        1};
    initiator_t in;
    init_start(&in, &ta);
    FY_ASSERT(in.p.attr.caps & FY_TL_CAP_AMO32);
    FY_ASSERT(in.p.attr.caps & FY_TL_CAP_AMO64);
    static const ferry_atomic_op_t ops[] = {
        FERRY_ATOMIC_ADD,  FERRY_ATOMIC_AND,   FERRY_ATOMIC_OR,   FERRY_ATOMIC_XOR,
        FERRY_ATOMIC_SWAP, FERRY_ATOMIC_CSWAP, FERRY_ATOMIC_CSWAP};
    for (int r = 0; r < NREG; r++) {
        for (size_t size = 4; size <= 8; size += 4) {
            uint64_t mask = size == 4 ? 0xffffffffull : ~0ull, off = 64 + size;
            init_cmd(&in, CMD_ZERO, (uint64_t)r, off, 8, 0);
            uint64_t shadow = 0, seed = 7;
            for (int round = 0; round < 40; round++) {
                for (size_t k = 0; k < FY_ARRAY_SIZE(ops); k++) {
                    int fetch = round & 1 || ops[k] == FERRY_ATOMIC_CSWAP;
                    uint64_t v = pat_next(&seed) & mask;
                    /* the second CSWAP matches, the first (usually) does not */
                    uint64_t cmp = k == FY_ARRAY_SIZE(ops) - 1 ? shadow : (shadow ^ 1);
                    uint64_t old = amo(&in, r, ops[k], size, v, cmp, fetch, off);
                    if (fetch)
                        FY_ASSERT_U64_EQ(old, shadow);
                    switch (ops[k]) {
                    case FERRY_ATOMIC_ADD:
                        shadow = (shadow + v) & mask;
                        break;
                    case FERRY_ATOMIC_AND:
                        shadow &= v;
                        break;
                    case FERRY_ATOMIC_OR:
                        shadow |= v;
                        break;
                    case FERRY_ATOMIC_XOR:
                        shadow ^= v;
                        break;
                    case FERRY_ATOMIC_SWAP:
                        shadow = v;
                        break;
                    case FERRY_ATOMIC_CSWAP:
                        shadow = shadow == cmp ? v : shadow;
                        break;
                    }
                }
            }
            flush(&in);
            uint64_t at_target = init_cmd(&in, CMD_READ64, (uint64_t)r, off, 8, 0);
            FY_ASSERT_U64_EQ(at_target & mask, shadow);
            FY_ASSERT_U64_EQ(at_target & ~mask, 0); /* a 32-bit op touched only 4 bytes */
        }
    }
    init_stop(&in);
}

/* N processes fetch-add one 64-bit and one 32-bit counter: exactly N x iters each. */
enum { NADDERS = 3, ITERS = 5000 };

typedef struct adder_args {
    taddr_t addr;
    target_info_t info;
} adder_args_t;

static void adder_main(int rfd, int wfd, void *arg)
{
    adder_args_t *a = arg;
    initiator_t in;
    tp_open(&in.p, noop_cb, NULL);
    in.p.sleepy = 1;
    in.ep = tp_ep(&in.p, &a->addr);
    for (int r = 0; r < NREG; r++)
        FY_ASSERT_OK(in.p.ops->rkey_unpack(in.p.md, a->info.rkey[r], &in.rk[r]));
    in.info = a->info;
    tc_get_u64(rfd); /* start together */
    uint64_t last[NREG][2] = {{0}};
    for (unsigned i = 0; i < ITERS; i++) {
        for (int r = 0; r < NREG; r++) {
            uint64_t o64 = amo(&in, r, FERRY_ATOMIC_ADD, 8, 1, 0, 1, 0);
            uint64_t o32 = amo(&in, r, FERRY_ATOMIC_ADD, 4, 1, 0, 1, 8);
            FY_ASSERT(i == 0 || o64 > last[r][0]); /* values we see only grow */
            FY_ASSERT(i == 0 || o32 > last[r][1]);
            last[r][0] = o64;
            last[r][1] = o32;
        }
    }
    flush(&in);
    tc_put_u64(wfd, 1);
    tc_get_u64(rfd);
    for (int r = 0; r < NREG; r++)
        in.p.ops->rkey_release(in.p.md, &in.rk[r]);
    in.p.ops->ep_destroy(in.ep);
    tp_close(&in.p);
}

static void counter_many(void)
{
    target_args_t ta = {FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC,
                        1};
    initiator_t in;
    init_start(&in, &ta);
    static adder_args_t aa;
    aa.addr = in.taddr;
    aa.info = in.info;
    tchild_t c[NADDERS];
    for (int i = 0; i < NADDERS; i++)
        c[i] = tc_spawn(adder_main, &aa);
    for (int i = 0; i < NADDERS; i++)
        tc_put_u64(c[i].wfd, 1);
    for (int i = 0; i < NADDERS; i++)
        tc_get_u64(c[i].rfd);
    for (int r = 0; r < NREG; r++) {
        FY_ASSERT_EQ(init_cmd(&in, CMD_READ64, (uint64_t)r, 0, 8, 0), NADDERS * ITERS);
        FY_ASSERT_EQ(init_cmd(&in, CMD_READ64, (uint64_t)r, 8, 8, 0), NADDERS * ITERS);
    }
    for (int i = 0; i < NADDERS; i++) {
        tc_put_u64(c[i].wfd, 1);
        tc_join(&c[i]);
    }
    init_stop(&in);
}

/* Refusals: bounds, rights, keys.  Nothing is touched. */
static void access_checks(void)
{
    target_args_t ta = {FERRY_MEM_REMOTE_READ, 1}; /* read-only regions */
    initiator_t in;
    init_start(&in, &ta);
    const fy_tl_ops_t *o = in.p.ops;
    uint64_t v = 0x1122334455667788ull, got = 0;
    struct iovec iov = {&got, 8};
    for (int r = 0; r < NREG; r++) {
        init_cmd(&in, CMD_FILL, (uint64_t)r, 0, REG_LEN, 99);
        /* no write right: put refused; no atomic right: atomics refused */
        FY_ASSERT_STATUS(o->put_short(in.ep, &v, 8, raddr(&in, r, 0), &in.rk[r]),
                         FERRY_ERR_ACCESS_DENIED);
        FY_ASSERT_STATUS(
            o->atomic(in.ep, FERRY_ATOMIC_ADD, 8, 1, 0, NULL, raddr(&in, r, 0), &in.rk[r], NULL),
            FERRY_ERR_ACCESS_DENIED);
        /* reads inside are fine; past either end they are refused */
        FY_ASSERT_OK(o->get_zcopy(in.ep, &iov, 1, raddr(&in, r, REG_LEN - 8), &in.rk[r], NULL));
        FY_ASSERT_STATUS(o->get_zcopy(in.ep, &iov, 1, raddr(&in, r, REG_LEN - 4), &in.rk[r], NULL),
                         FERRY_ERR_ACCESS_DENIED);
        FY_ASSERT_STATUS(o->get_zcopy(in.ep, &iov, 1, raddr(&in, r, 0) - 8, &in.rk[r], NULL),
                         FERRY_ERR_ACCESS_DENIED);
        FY_ASSERT_STATUS(o->get_zcopy(in.ep, &iov, 1, UINT64_MAX - 3, &in.rk[r], NULL),
                         FERRY_ERR_ACCESS_DENIED);
        FY_ASSERT_EQ(init_cmd(&in, CMD_CHECK, (uint64_t)r, 0, REG_LEN, 99), -1); /* untouched */
    }
    init_stop(&in);

    /* Rights granted, but a key forged or of another process, and misaligned atomics. */
    ta.access = FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC;
    init_start(&in, &ta);
    FY_ASSERT_STATUS(
        o->atomic(in.ep, FERRY_ATOMIC_ADD, 8, 1, 0, NULL, raddr(&in, 0, 4), &in.rk[0], NULL),
        FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(
        o->atomic(in.ep, FERRY_ATOMIC_ADD, 2, 1, 0, NULL, raddr(&in, 0, 0), &in.rk[0], NULL),
        FERRY_ERR_INVALID_PARAM);
    shm_rkey_t forged = in.rk[REG_PLAIN];
    forged.p.region_key ^= 1; /* the target checks the key of an atomic it performs */
    uint64_t old;
    tcomp_t c;
    tcomp_init(&c);
    ferry_status_t st = o->atomic(in.ep, FERRY_ATOMIC_ADD, 8, 5, 0, &old, raddr(&in, REG_PLAIN, 0),
                                  &forged, &c.super);
    FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
    while (c.done == 0)
        tp_progress(&in.p);
    FY_ASSERT_STATUS(c.status, FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_EQ(init_cmd(&in, CMD_READ64, REG_PLAIN, 0, 8, 0), 0);
    /* our own region's key on an ep to another process */
    char mine[64], memh[256], packed[128];
    shm_rkey_t own;
    FY_ASSERT_OK(o->mem_reg(in.p.md, mine, sizeof(mine), 7, memh));
    FY_ASSERT_OK(o->rkey_pack(in.p.md, memh, packed));
    FY_ASSERT_OK(o->rkey_unpack(in.p.md, packed, &own));
    FY_ASSERT_STATUS(o->put_short(in.ep, &v, 8, (uint64_t)(uintptr_t)mine, &own),
                     FERRY_ERR_ACCESS_DENIED);
    o->rkey_release(in.p.md, &own);
    o->mem_dereg(in.p.md, memh);
    init_stop(&in);
}

/* FERRY_SHM_CMA=n: put/get only into shared memory (and the caps say so); atomics still work
 * everywhere. */
static void no_cma(void)
{
    setenv("FERRY_SHM_CMA", "n", 1);
    target_args_t ta = {FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC,
                        1};
    initiator_t in;
    init_start(&in, &ta);
    FY_ASSERT(!(in.p.attr.caps & FY_TL_CAP_PUT));
    FY_ASSERT(!(in.p.attr.caps & FY_TL_CAP_GET));
    uint64_t v = 77;
    FY_ASSERT_OK(in.p.ops->put_short(in.ep, &v, 8, raddr(&in, REG_SHARED, 0), &in.rk[REG_SHARED]));
    FY_ASSERT_STATUS(in.p.ops->put_short(in.ep, &v, 8, raddr(&in, REG_PLAIN, 0), &in.rk[REG_PLAIN]),
                     FERRY_ERR_UNSUPPORTED);
    FY_ASSERT_EQ(amo(&in, REG_PLAIN, FERRY_ATOMIC_ADD, 8, 3, 0, 1, 0), 0);
    FY_ASSERT_EQ(init_cmd(&in, CMD_READ64, REG_PLAIN, 0, 8, 0), 3);
    FY_ASSERT_EQ(init_cmd(&in, CMD_READ64, REG_SHARED, 0, 8, 0), 77);
    init_stop(&in);
}

FYTEST_MAIN(FYTEST_CASE(put_get), FYTEST_CASE(atomics_all), FYTEST_CASE(counter_many),
            FYTEST_CASE(access_checks), FYTEST_CASE(no_cma))
