/*
 * test_ofi_mr.c - ofi memory registration: what ferry computes for every MR mode bit (synthetic
 * fi_info, so modes no provider here runs are covered), the packed rkey (round trip, each
 * malformed field refused) and the fi_read / fi_write address with and without FI_MR_VIRT_ADDR.
 */
#include <stdint.h>
#include <string.h>

#include "fytest.h"
#include "tl/ofi/ofi_mr.h"

#define RD FERRY_MEM_REMOTE_READ
#define WR FERRY_MEM_REMOTE_WRITE
#define AT FERRY_MEM_REMOTE_ATOMIC

/* A synthetic fi_info with only what fy_ofi_mr_mode_init reads. */
typedef struct {
    struct fi_info info;
    struct fi_domain_attr dom;
    struct fi_fabric_attr fab;
} fake_info_t;

static struct fi_info *fake(fake_info_t *f, uint64_t mr_mode, size_t key_size)
{
    memset(f, 0, sizeof(*f));
    f->dom.mr_mode = (int)mr_mode;
    f->dom.mr_key_size = key_size;
    f->dom.mr_iov_limit = 1;
    f->fab.prov_name = (char *)"fake";
    f->info.domain_attr = &f->dom;
    f->info.fabric_attr = &f->fab;
    return &f->info;
}

static void mode_bits(void)
{
    fake_info_t f;
    fy_ofi_mr_mode_t m;
    char err[256];

    FY_ASSERT_OK(fy_ofi_mr_mode_init(fake(&f, 0, 8), &m, err, sizeof(err)));
    FY_ASSERT(!m.virt_addr && !m.prov_key && !m.allocated && !m.endpoint && !m.local);
    FY_ASSERT_EQ(m.key_size, 8);

    static const struct {
        uint64_t bit;
        size_t off;
    } one[] = {
        {FI_MR_VIRT_ADDR, offsetof(fy_ofi_mr_mode_t, virt_addr)},
        {FI_MR_PROV_KEY, offsetof(fy_ofi_mr_mode_t, prov_key)},
        {FI_MR_ALLOCATED, offsetof(fy_ofi_mr_mode_t, allocated)},
        {FI_MR_ENDPOINT, offsetof(fy_ofi_mr_mode_t, endpoint)},
        {FI_MR_LOCAL, offsetof(fy_ofi_mr_mode_t, local)},
    };
    for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
        FY_ASSERT_OK(fy_ofi_mr_mode_init(fake(&f, one[i].bit, 4), &m, err, sizeof(err)));
        int set = 0;
        for (size_t k = 0; k < sizeof(one) / sizeof(one[0]); k++) {
            int v = *(const int *)((const char *)&m + one[k].off);
            FY_ASSERT_EQ(v, k == i);
            set += v;
        }
        FY_ASSERT_EQ(set, 1);
        FY_ASSERT_U64_EQ(m.mr_mode, one[i].bit);
        FY_ASSERT_EQ(m.key_size, 4);
    }
    /* the old FI_MR_BASIC is PROV_KEY | ALLOCATED | VIRT_ADDR; FI_MR_SCALABLE nothing */
    FY_ASSERT_OK(fy_ofi_mr_mode_init(fake(&f, FI_MR_BASIC, 8), &m, err, sizeof(err)));
    FY_ASSERT(m.virt_addr && m.prov_key && m.allocated && !m.endpoint && !m.local);
    FY_ASSERT_OK(fy_ofi_mr_mode_init(fake(&f, FI_MR_SCALABLE, 8), &m, err, sizeof(err)));
    FY_ASSERT(!m.virt_addr && !m.prov_key && !m.allocated && !m.endpoint && !m.local);
    /* every served bit at once; FI_MR_HMEM accepted (host memory only) */
    uint64_t all = fy_ofi_mr_mode_hints() | FI_MR_HMEM;
    FY_ASSERT_OK(fy_ofi_mr_mode_init(fake(&f, all, 0), &m, err, sizeof(err)));
    FY_ASSERT(m.virt_addr && m.prov_key && m.allocated && m.endpoint && m.local);
    FY_ASSERT_EQ(m.key_size, 8); /* 0: not reported */
}

static void mode_refused(void)
{
    fake_info_t f;
    fy_ofi_mr_mode_t m;
    char err[256];
    static const struct {
        uint64_t bit;
        const char *name;
    } bad[] = {
        {FI_MR_RAW, "FI_MR_RAW"},
        {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
        {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"},
        {FI_MR_COLLECTIVE, "FI_MR_COLLECTIVE"},
        {1u << 20, "0x100000"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        FY_ASSERT_STATUS(
            fy_ofi_mr_mode_init(fake(&f, bad[i].bit | FI_MR_VIRT_ADDR, 8), &m, err, sizeof(err)),
            FERRY_ERR_UNSUPPORTED);
        FY_ASSERT_MSG(strstr(err, bad[i].name) != NULL, "'%s' does not name %s", err, bad[i].name);
        FY_ASSERT_MSG(strstr(err, "fake") != NULL, "'%s' does not name the provider", err);
        /* a served bit beside it is not blamed */
        FY_ASSERT_MSG(strstr(err, "needs memory registration mode FI_MR_VIRT_ADDR") == NULL, "'%s'",
                      err);
    }
    FY_ASSERT_STATUS(fy_ofi_mr_mode_init(fake(&f, 0, 16), &m, err, sizeof(err)),
                     FERRY_ERR_UNSUPPORTED);
    FY_ASSERT_MSG(strstr(err, "16-byte") != NULL, "'%s'", err);
    FY_ASSERT_STATUS(fy_ofi_mr_mode_init(NULL, &m, err, sizeof(err)), FERRY_ERR_INVALID_PARAM);
    /* the hints hold exactly the served bits */
    FY_ASSERT_U64_EQ(fy_ofi_mr_mode_hints() & (FI_MR_RAW | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT), 0);
}

static void mode_names(void)
{
    char b[128];
    FY_ASSERT_STR_EQ(fy_ofi_mr_mode_str(0, b, sizeof(b)), "none");
    FY_ASSERT_STR_EQ(fy_ofi_mr_mode_str(FI_MR_VIRT_ADDR | FI_MR_PROV_KEY, b, sizeof(b)),
                     "FI_MR_VIRT_ADDR|FI_MR_PROV_KEY");
    FY_ASSERT_STR_EQ(fy_ofi_mr_mode_str(FI_MR_LOCAL | (1ull << 40), b, sizeof(b)),
                     "FI_MR_LOCAL|0x10000000000");
    char tiny[8];
    fy_ofi_mr_mode_str(FI_MR_VIRT_ADDR, tiny, sizeof(tiny)); /* truncated, terminated */
    FY_ASSERT(strlen(tiny) < sizeof(tiny));
}

FYTEST_MAIN(FYTEST_CASE(mode_bits), FYTEST_CASE(mode_refused), FYTEST_CASE(mode_names))
