/*
 * test_swmd.c - the software memory domain tcp and udp share: a registration admits its range
 * with its rights at the target and nothing else, the packed key is (region id, key) in
 * little-endian order whatever the host, unpack inverts pack, a deregistered key is refused,
 * and both transports (where built) use these very functions and sizes.
 */
#include <stdint.h>
#include <string.h>

#include "fytest.h"
#include "tl/swmd.h"

static void reg_pack_unpack(void)
{
    static char buf[256];
    fy_swmd_t md;
    memset(&md, 0, sizeof(md));
    FY_ASSERT_OK(fy_swmd_init(&md, NULL));
    fy_swmd_key_t memh, rkey;
    FY_ASSERT_OK(fy_swmd_mem_reg(&md.super, buf, sizeof(buf), FERRY_MEM_REMOTE_READ, &memh));
    FY_ASSERT_NE(memh.id, 0);

    uint8_t packed[FY_SWMD_KEY_PACKED_SIZE];
    FY_ASSERT_OK(fy_swmd_rkey_pack(&md.super, &memh, packed));
    for (int i = 0; i < 8; i++) { /* little endian, id then key */
        FY_ASSERT_EQ(packed[i], (uint8_t)(memh.id >> (8 * i)));
        FY_ASSERT_EQ(packed[8 + i], (uint8_t)(memh.key >> (8 * i)));
    }
    FY_ASSERT_OK(fy_swmd_rkey_unpack(&md.super, packed, &rkey));
    FY_ASSERT_U64_EQ(rkey.id, memh.id);
    FY_ASSERT_U64_EQ(rkey.key, memh.key);
    fy_swmd_rkey_release(&md.super, &rkey);

    uint64_t base = (uint64_t)(uintptr_t)buf;
    void *local = NULL;
    FY_ASSERT_OK(fy_region_check(&md.regions, rkey.id, rkey.key, base + 8, 8, FERRY_MEM_REMOTE_READ,
                                 &local));
    FY_ASSERT(local == buf + 8);
    FY_ASSERT_NE(
        fy_region_check(&md.regions, rkey.id, rkey.key, base, 8, FERRY_MEM_REMOTE_WRITE, &local),
        FERRY_OK);
    FY_ASSERT_NE(
        fy_region_check(&md.regions, rkey.id, rkey.key ^ 1, base, 8, FERRY_MEM_REMOTE_READ, &local),
        FERRY_OK);
    fy_swmd_mem_dereg(&md.super, &memh);
    FY_ASSERT_NE(
        fy_region_check(&md.regions, rkey.id, rkey.key, base, 8, FERRY_MEM_REMOTE_READ, &local),
        FERRY_OK);
    fy_swmd_cleanup(&md);
}

static void transports_share_it(void)
{
    const char *names[] = {"tcp", "udp"};
    unsigned found = 0;
    for (size_t i = 0; i < 2; i++) {
        const fy_tl_component_t *tl = fy_tl_find(names[i]);
        if (tl == NULL)
            continue; /* not built in */
        found++;
        FY_ASSERT(tl->ops->mem_reg == fy_swmd_mem_reg);
        FY_ASSERT(tl->ops->mem_dereg == fy_swmd_mem_dereg);
        FY_ASSERT(tl->ops->rkey_pack == fy_swmd_rkey_pack);
        FY_ASSERT(tl->ops->rkey_unpack == fy_swmd_rkey_unpack);
        FY_ASSERT_EQ(tl->rkey_packed_size, FY_SWMD_KEY_PACKED_SIZE);
        FY_ASSERT_EQ(tl->memh_size, sizeof(fy_swmd_key_t));
        FY_ASSERT_EQ(tl->rkey_size, sizeof(fy_swmd_key_t));
    }
    printf("%u software-md transport(s) built in\n", found);
}

FYTEST_MAIN(FYTEST_CASE(reg_pack_unpack), FYTEST_CASE(transports_share_it))
