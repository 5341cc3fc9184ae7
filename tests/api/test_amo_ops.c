/*
 * Atomics decided per width from the transport's per-op report: every op at both widths gives
 * the right old value and the right word, with all native (self, shm do all six ops), and with
 * FERRY_AMO_NATIVE_OPS clearing one op of one width, which must send every atomic of that
 * width (and only that width) through the AM emulation, counted by the worker.  FERRY_TLS
 * chooses the transport (CMakeLists.txt runs self and shm).
 */
#include "common.h"
#include "proto/proto_int.h"

static ferry_request_t the_req;

static ferry_request_t *rq(void)
{
    memset(&the_req, 0, sizeof(the_req));
    return &the_req;
}

static ferry_status_t run(pair_t *p, ferry_status_t st)
{
    for (long i = 0; st == FERRY_INPROGRESS && i < 10000000; i++) {
        pair_progress(p);
        if (the_req.status != FERRY_INPROGRESS)
            return the_req.status;
    }
    return st;
}

/* One atomic of size 4 or 8 at the word; checks the old value it fetched (if it fetches) and
 * the word after it against a local computation. */
static void one(pair_t *p, ferry_rkey_t *rk, void *word, ferry_atomic_op_t op, size_t size,
                uint64_t operand, uint64_t compare, int fetch)
{
    uint64_t mask = size == 8 ? ~(uint64_t)0 : 0xffffffffu, before = 0, after = 0, got = 0;
    memcpy(&before, word, size);
    switch (op) {
    case FERRY_ATOMIC_ADD:
        after = before + operand;
        break;
    case FERRY_ATOMIC_AND:
        after = before & operand;
        break;
    case FERRY_ATOMIC_OR:
        after = before | operand;
        break;
    case FERRY_ATOMIC_XOR:
        after = before ^ operand;
        break;
    case FERRY_ATOMIC_SWAP:
        after = operand;
        break;
    default:
        after = before == (compare & mask) ? operand : before;
    }
    after &= mask;
    uint64_t res = 0;
    FY_ASSERT_OK(run(p, ferry_atomic(p->ep[0], op, size, operand, compare, fetch ? &res : NULL,
                                     (uint64_t)(uintptr_t)word, rk, rq())));
    if (fetch) {
        uint64_t old = res;
        if (size == 4) {
            uint32_t v;
            memcpy(&v, &res, 4);
            old = v;
        }
        FY_ASSERT_U64_EQ(old, before);
    }
    FY_ASSERT_OK(run(p, ferry_ep_flush(p->ep[0], rq())));
    memcpy(&got, word, size);
    FY_ASSERT_MSG(got == after, "op %d size %zu fetch %d: word %llx, expected %llx", (int)op, size,
                  fetch, (unsigned long long)got, (unsigned long long)after);
}

/* Every op, fetching and not (cswap always fetches), at one width; returns how many of them
 * went to the emulation. */
static uint64_t all_ops(pair_t *p, ferry_rkey_t *rk, void *word, size_t size)
{
    uint64_t start = p->w[0]->amo_emulated;
    uint64_t init = size == 8 ? 0x0123456789abcdefull : 0x89abcdefu;
    memcpy(word, &init, size);
    for (int fetch = 0; fetch < 2; fetch++) {
        one(p, rk, word, FERRY_ATOMIC_ADD, size, 0x1111, 0, fetch);
        one(p, rk, word, FERRY_ATOMIC_AND, size, 0xff00ff00ff00ff00ull, 0, fetch);
        one(p, rk, word, FERRY_ATOMIC_OR, size, 0x0f0f, 0, fetch);
        one(p, rk, word, FERRY_ATOMIC_XOR, size, 0x5a5a5a5a5a5a5a5aull, 0, fetch);
        one(p, rk, word, FERRY_ATOMIC_SWAP, size, 0x7777, 0, fetch);
    }
    one(p, rk, word, FERRY_ATOMIC_CSWAP, size, 0x42, 0x7777, 1); /* matches */
    one(p, rk, word, FERRY_ATOMIC_CSWAP, size, 0x99, 0x7777, 1); /* does not */
    return p->w[0]->amo_emulated - start;
}

#define OPS_PER_WIDTH 12

/* native: the widths expected native (bit 0: 32-bit, bit 1: 64-bit) */
static void check(const char *mask, int native)
{
    if (mask != NULL)
        setenv("FERRY_AMO_NATIVE_OPS", mask, 1);
    pair_t p;
    pair_open(&p);
    if (mask != NULL)
        unsetenv("FERRY_AMO_NATIVE_OPS");
    ferry_mem_t *mem;
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS,
                             .length = 4096,
                             .flags = FERRY_MEM_ALLOCATE};
    FY_ASSERT_OK(ferry_mem_map(p.ctx, &mp, &mem));
    void *base;
    size_t len;
    FY_ASSERT_OK(ferry_mem_query(mem, &base, &len));
    char rkbuf[1024];
    size_t rklen = sizeof(rkbuf);
    ferry_rkey_t *rk;
    FY_ASSERT_OK(ferry_rkey_pack(p.ctx, mem, rkbuf, &rklen));
    FY_ASSERT_OK(ferry_rkey_unpack(p.ep[0], rkbuf, rklen, &rk));
    FY_ASSERT_EQ(p.ep[0]->amo_native, native);
    uint64_t emu32 = all_ops(&p, rk, (char *)base + 64, 4);
    uint64_t emu64 = all_ops(&p, rk, (char *)base + 128, 8);
    printf("  mask %s: 32-bit %llu of %d emulated, 64-bit %llu of %d\n", mask ? mask : "(default)",
           (unsigned long long)emu32, OPS_PER_WIDTH, (unsigned long long)emu64, OPS_PER_WIDTH);
    FY_ASSERT_U64_EQ(emu32, (native & 1) ? 0 : OPS_PER_WIDTH);
    FY_ASSERT_U64_EQ(emu64, (native & 2) ? 0 : OPS_PER_WIDTH);
    ferry_rkey_destroy(rk);
    FY_ASSERT_OK(ferry_mem_unmap(p.ctx, mem));
    pair_close(&p);
}

static void all_native(void)
{
    check(NULL, 3);
}

static void xor64_emulated(void)
{
    check("0x373f", 1); /* 64-bit xor cleared: every 64-bit op emulated, 32-bit native */
}

static void add32_emulated(void)
{
    check("0x3f3e", 2); /* 32-bit add cleared */
}

static void none_native(void)
{
    check("0", 0);
}

FYTEST_MAIN(FYTEST_CASE(all_native), FYTEST_CASE(xor64_emulated), FYTEST_CASE(add32_emulated),
            FYTEST_CASE(none_native))
