/*
 * fuzz_rkey.c - libFuzzer target for packed remote keys: the bytes a peer sends so that this
 * process may put to, get from and do atomics on its memory.  Two levels: each transport's
 * own rkey_unpack (through fy_tl_find(name)->ops, with the transport's md open), and
 * ferry_rkey_unpack, which splits the blob into the transports' keys for an endpoint (here an
 * endpoint to this worker itself).  A malformed key must be refused, never a crash or a leak.
 * Input: a byte choosing the level and transport, then the packed key.
 */
#include "fuzz_common.h"
#include "tl/tl.h"

static ferry_context_t *ctx;
static ferry_worker_t *worker;
static ferry_ep_t *self_ep;
static fy_tl_md_t *mds[8];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    fz_worker(&ctx, &worker);
    FZ_CHECK(fy_tl_num_components <= 8);
    for (size_t i = 0; i < fy_tl_num_components; i++) {
        const fy_tl_component_t *tl = fy_tl_find(fy_tl_components[i]->name);
        FZ_CHECK(tl != NULL && tl->ops->md_open(tl, &mds[i]) == FERRY_OK);
    }
    uint8_t addr[4096];
    size_t alen = sizeof(addr);
    FZ_CHECK(ferry_worker_get_address(worker, addr, &alen) == FERRY_OK);
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
    FZ_CHECK(ferry_ep_create(worker, &p, &self_ep) == FERRY_OK);

    /* seeds: a genuine packed key at each level */
    static uint64_t region[512];
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_ADDRESS | FERRY_MEM_FIELD_LENGTH,
                             .address = region,
                             .length = sizeof(region)};
    ferry_mem_t *mem;
    FZ_CHECK(ferry_mem_map(ctx, &mp, &mem) == FERRY_OK);
    uint8_t packed[4096];
    size_t plen = sizeof(packed);
    FZ_CHECK(ferry_rkey_pack(ctx, mem, packed, &plen) == FERRY_OK);
    uint8_t sel = 0xff;
    fz_seed("proto_rkey", &sel, 1, packed, plen);
    for (size_t i = 0; i < fy_tl_num_components; i++) {
        const fy_tl_component_t *tl = fy_tl_components[i];
        if (tl->rkey_packed_size == 0 || tl->ops->mem_reg == NULL)
            continue;
        uint8_t memh[256], key[256];
        FZ_CHECK(tl->memh_size <= sizeof(memh) && tl->rkey_packed_size <= sizeof(key));
        if (tl->ops->mem_reg(mds[i], region, sizeof(region),
                             FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE |
                                 FERRY_MEM_REMOTE_ATOMIC,
                             memh) != FERRY_OK)
            continue;
        FZ_CHECK(tl->ops->rkey_pack(mds[i], memh, key) == FERRY_OK);
        char name[64];
        snprintf(name, sizeof(name), "%s_rkey", tl->name);
        sel = (uint8_t)i;
        fz_seed(name, &sel, 1, key, tl->rkey_packed_size);
        tl->ops->mem_dereg(mds[i], memh);
    }
    FZ_CHECK(ferry_mem_unmap(ctx, mem) == FERRY_OK);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned sel = data[0];
    data++, size--;
    if (sel >= 0x80) {
        ferry_rkey_t *rkey = NULL;
        if (ferry_rkey_unpack(self_ep, data, size, &rkey) == FERRY_OK)
            ferry_rkey_destroy(rkey);
        return 0;
    }
    size_t i = sel % fy_tl_num_components;
    const fy_tl_component_t *tl = fy_tl_components[i];
    if (tl->ops->rkey_unpack == NULL || size < tl->rkey_packed_size)
        return 0;
    /* exactly rkey_packed_size bytes, in a buffer of their own (ASan sees any overread) */
    uint8_t *packed = malloc(tl->rkey_packed_size + 1);
    uint8_t *rkey = malloc(tl->rkey_size + 1);
    if (packed != NULL && rkey != NULL) {
        memcpy(packed, data, tl->rkey_packed_size);
        if (tl->ops->rkey_unpack(mds[i], packed, rkey) == FERRY_OK && tl->ops->rkey_release)
            tl->ops->rkey_release(mds[i], rkey);
    }
    free(packed);
    free(rkey);
    return 0;
}
