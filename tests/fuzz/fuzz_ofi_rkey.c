/*
 * fuzz_ofi_rkey.c - libFuzzer target for the ofi transport's packed remote key (ofi_mr.h): the
 * 32 bytes a peer sends so that this process may read, write and do atomics on its memory.  A
 * malformed key must be refused; a key that is accepted must pack back to the same bytes and
 * must admit exactly its own region through fy_ofi_rkey_addr (one byte before or after it is
 * refused).  Input: a byte choosing the local domain's mode (addressing, key size, or no mode
 * check), then the packed key.
 */
#include "fuzz_common.h"
#include "tl/ofi/ofi_mr.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    /* seeds: a genuine key of each addressing mode */
    fy_ofi_mr_mode_t mode = {.key_size = 8, .virt_addr = 1};
    fy_ofi_mr_dom_t dom;
    fy_ofi_mr_dom_init(&dom, NULL, &mode);
    fy_ofi_mr_t mr = {.key = 42,
                      .base = 0x7f1234560000ull,
                      .len = 65536,
                      .access = FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE,
                      .flags = FY_OFI_RKEY_F_VIRT_ADDR};
    uint8_t packed[FY_OFI_RKEY_PACKED_SIZE];
    fy_ofi_rkey_pack(&dom, &mr, packed);
    uint8_t sel = (8 << 1) | 1; /* virtual, 8-byte keys */
    fz_seed("virt", &sel, 1, packed, sizeof(packed));
    mode.virt_addr = 0;
    mode.key_size = 4;
    fy_ofi_mr_dom_init(&dom, NULL, &mode);
    mr.flags = 0;
    mr.key = 0xabcd;
    fy_ofi_rkey_pack(&dom, &mr, packed);
    sel = 4 << 1; /* offsets, 4-byte keys */
    fz_seed("offset", &sel, 1, packed, sizeof(packed));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    fy_ofi_mr_mode_t mode = {.key_size = (size_t)((sel >> 1) & 0x0f), .virt_addr = sel & 1};
    const fy_ofi_mr_mode_t *m = (sel & 0x80) ? NULL : &mode;
    fy_ofi_mr_rkey_t rk;
    if (fy_ofi_rkey_unpack(m, data + 1, size - 1, &rk) != FERRY_OK)
        return 0;
    /* accepted: it packs back to the same bytes */
    fy_ofi_mr_mode_t pm = {.key_size = data[1 + 3]};
    fy_ofi_mr_dom_t dom;
    fy_ofi_mr_dom_init(&dom, NULL, &pm);
    fy_ofi_mr_t mr = {
        .key = rk.key, .base = rk.base, .len = rk.len, .access = rk.access, .flags = rk.flags};
    uint8_t again[FY_OFI_RKEY_PACKED_SIZE];
    fy_ofi_rkey_pack(&dom, &mr, again);
    if (memcmp(again, data + 1, sizeof(again)) != 0)
        abort();
    /* and admits exactly its region */
    uint64_t a;
    if (fy_ofi_rkey_addr(&rk, rk.base, rk.len, rk.access, &a) != FERRY_OK)
        abort();
    if (a != ((rk.flags & FY_OFI_RKEY_F_VIRT_ADDR) ? rk.base : 0))
        abort();
    if (rk.base > 0 && fy_ofi_rkey_addr(&rk, rk.base - 1, 1, 0, &a) != FERRY_ERR_ACCESS_DENIED)
        abort();
    if (fy_ofi_rkey_addr(&rk, rk.base + rk.len - 1, 2, 0, &a) != FERRY_ERR_ACCESS_DENIED)
        abort();
    return 0;
}
