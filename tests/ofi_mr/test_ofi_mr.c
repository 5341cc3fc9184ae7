/*
 * test_ofi_mr.c - ofi memory registration: what ferry computes for every MR mode bit (synthetic
 * fi_info, so modes no provider here runs are covered), registration through a fake provider
 * (a domain whose ops table records what ferry calls: FI_MR_PROV_KEY, requested keys and
 * -FI_ENOKEY, FI_MR_ENDPOINT's bind and enable, FI_MR_LOCAL's descriptors, FI_MR_ALLOCATED), the
 * packed rkey (round trip, each malformed field refused), the fi_read / fi_write address with and
 * without FI_MR_VIRT_ADDR, and real transfers over the providers Debian ships (tcp;ofi_rxm and
 * udp;ofi_rxd in offset mode, shm in both modes, loopback), the registration cache included:
 * memory unmapped and mapped again at the same address is read through a new registration and
 * the stale key is refused by the provider.
 */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fytest.h"
#include "tl/ofi/ofi_mr.h"
#include "util/rcache.h"

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

/* ---- the packed key ------------------------------------------------------------------------ */

static void rkey_roundtrip(void)
{
    fy_ofi_mr_dom_t dom;
    fy_ofi_mr_mode_t mode = {.key_size = 4, .virt_addr = 0};
    fy_ofi_mr_dom_init(&dom, NULL, &mode);
    fy_ofi_mr_t mr = {
        .key = 0x89abcdef, .base = 0x7f0000001000ull, .len = 8192, .access = RD | WR, .flags = 0};
    uint8_t buf[FY_OFI_RKEY_PACKED_SIZE + 4];
    fy_ofi_rkey_pack(&dom, &mr, buf);
    /* fixed little-endian layout */
    FY_ASSERT_EQ(buf[0], FY_OFI_RKEY_MAGIC);
    FY_ASSERT_EQ(buf[1], FY_OFI_RKEY_VERSION);
    FY_ASSERT_EQ(buf[3], 4);
    FY_ASSERT_EQ(buf[8], 0xef);
    FY_ASSERT_EQ(buf[11], 0x89);
    FY_ASSERT_EQ(buf[17], 0x10);
    fy_ofi_mr_rkey_t rk;
    FY_ASSERT_OK(fy_ofi_rkey_unpack(&mode, buf, FY_OFI_RKEY_PACKED_SIZE, &rk));
    FY_ASSERT_U64_EQ(rk.key, mr.key);
    FY_ASSERT_U64_EQ(rk.base, mr.base);
    FY_ASSERT_U64_EQ(rk.len, mr.len);
    FY_ASSERT_EQ(rk.access, RD | WR);
    FY_ASSERT_EQ(rk.flags, 0);
    FY_ASSERT_OK(fy_ofi_rkey_unpack(NULL, buf, sizeof(buf), &rk)); /* longer is fine */

    /* each malformed field */
    struct {
        size_t off;
        uint8_t val;
    } bad[] = {
        {0, 0xF6}, /* magic */
        {1, 2},    /* version */
        {2, 0x02}, /* unknown flag */
        {3, 0},    /* key size 0 */
        {3, 9},    /* key size 9 */
        {3, 2},    /* key 0x89abcdef does not fit 2 bytes */
        {4, 0x08}, /* unknown access bit */
        {7, 0x80}, /* unknown access bit, high byte */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t b2[FY_OFI_RKEY_PACKED_SIZE];
        memcpy(b2, buf, sizeof(b2));
        b2[bad[i].off] = bad[i].val;
        FY_ASSERT_MSG(fy_ofi_rkey_unpack(NULL, b2, sizeof(b2), &rk) == FERRY_ERR_INVALID_PARAM,
                      "byte %zu = 0x%02x accepted", bad[i].off, bad[i].val);
    }
    uint8_t z[FY_OFI_RKEY_PACKED_SIZE];
    memcpy(z, buf, sizeof(z));
    memset(z + 24, 0xff, 8); /* base + len wraps around */
    FY_ASSERT_STATUS(fy_ofi_rkey_unpack(NULL, z, sizeof(z), &rk), FERRY_ERR_INVALID_PARAM);
    memset(z + 24, 0, 8); /* empty region */
    FY_ASSERT_STATUS(fy_ofi_rkey_unpack(NULL, z, sizeof(z), &rk), FERRY_ERR_INVALID_PARAM);
    for (size_t n = 0; n < FY_OFI_RKEY_PACKED_SIZE; n++) /* truncated */
        FY_ASSERT_STATUS(fy_ofi_rkey_unpack(NULL, buf, n, &rk), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_ofi_rkey_unpack(NULL, NULL, 32, &rk), FERRY_ERR_INVALID_PARAM);
    /* a key from a domain addressed otherwise, or with longer keys, is refused */
    fy_ofi_mr_mode_t virt = {.key_size = 8, .virt_addr = 1};
    FY_ASSERT_STATUS(fy_ofi_rkey_unpack(&virt, buf, sizeof(buf), &rk), FERRY_ERR_INVALID_PARAM);
    fy_ofi_mr_mode_t small = {.key_size = 2, .virt_addr = 0};
    FY_ASSERT_STATUS(fy_ofi_rkey_unpack(&small, buf, sizeof(buf), &rk), FERRY_ERR_INVALID_PARAM);
    /* 8-byte keys use every bit */
    mode.key_size = 8;
    fy_ofi_mr_dom_init(&dom, NULL, &mode);
    mr.key = UINT64_MAX;
    fy_ofi_rkey_pack(&dom, &mr, buf);
    FY_ASSERT_OK(fy_ofi_rkey_unpack(&mode, buf, sizeof(buf), &rk));
    FY_ASSERT_U64_EQ(rk.key, UINT64_MAX);
}

static void rkey_addr(void)
{
    fy_ofi_mr_rkey_t off = {.key = 1, .base = 0x10000, .len = 4096, .access = RD, .flags = 0};
    fy_ofi_mr_rkey_t virt = off;
    virt.flags = FY_OFI_RKEY_F_VIRT_ADDR;
    uint64_t a = 0;
    FY_ASSERT_OK(fy_ofi_rkey_addr(&off, 0x10000, 4096, RD, &a));
    FY_ASSERT_U64_EQ(a, 0);
    FY_ASSERT_OK(fy_ofi_rkey_addr(&off, 0x10100, 16, RD, &a));
    FY_ASSERT_U64_EQ(a, 0x100);
    FY_ASSERT_OK(fy_ofi_rkey_addr(&virt, 0x10100, 16, RD, &a));
    FY_ASSERT_U64_EQ(a, 0x10100);
    FY_ASSERT_OK(fy_ofi_rkey_addr(&virt, 0x11000, 0, 0, &a)); /* empty, at the end */
    /* outside, straddling, wrapping, missing access */
    FY_ASSERT_STATUS(fy_ofi_rkey_addr(&off, 0xffff, 1, RD, &a), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_ofi_rkey_addr(&off, 0xffff, 2, RD, &a), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_ofi_rkey_addr(&off, 0x10fff, 2, RD, &a), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_ofi_rkey_addr(&off, 0x11000, 1, RD, &a), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_ofi_rkey_addr(&off, 0x10010, SIZE_MAX, RD, &a), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_ofi_rkey_addr(&off, UINT64_MAX, 2, RD, &a), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_ofi_rkey_addr(&off, 0x10000, 8, WR, &a), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(fy_ofi_rkey_addr(&virt, 0x10000, 8, RD | AT, &a), FERRY_ERR_ACCESS_DENIED);
}

/* ---- a fake provider: a domain whose ops record what ferry calls ---------------------------- */

typedef struct fake_prov {
    struct fid_domain dom;
    struct fi_ops_mr mr_ops;
    int prov_key; /* give keys of our own */
    int enokey;   /* refuse this many requests with -FI_ENOKEY */
    int bind_fails;
    uint64_t last_requested; /* the last requested key */
    uint64_t last_access;
    struct fid *bound; /* what the last mr was bound to */
    int enabled, closed, open;
    int order_ok; /* enable came after bind */
} fake_prov_t;

typedef struct fake_mr {
    struct fid_mr mr;
    fake_prov_t *prov;
    int bound;
} fake_mr_t;

static int fmr_close(struct fid *fid)
{
    fake_mr_t *m = (fake_mr_t *)fid;
    m->prov->closed++;
    m->prov->open--;
    free(m);
    return 0;
}

static int fmr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    (void)flags;
    fake_mr_t *m = (fake_mr_t *)fid;
    if (m->prov->bind_fails)
        return -FI_EINVAL;
    m->prov->bound = bfid;
    m->bound = 1;
    return 0;
}

static int fmr_control(struct fid *fid, int command, void *arg)
{
    (void)arg;
    fake_mr_t *m = (fake_mr_t *)fid;
    if (command != FI_ENABLE)
        return -FI_ENOSYS;
    m->prov->enabled++;
    m->prov->order_ok = m->bound;
    return 0;
}

static struct fi_ops fmr_ops = {
    .size = sizeof(struct fi_ops), .close = fmr_close, .bind = fmr_bind, .control = fmr_control};

static int fake_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags,
                        struct fid_mr **mr)
{
    (void)flags;
    fake_prov_t *p = (fake_prov_t *)fid;
    p->last_requested = attr->requested_key;
    p->last_access = attr->access;
    if (attr->iov_count != 1 || attr->offset != 0)
        return -FI_EINVAL;
    if (p->enokey > 0) {
        p->enokey--;
        return -FI_ENOKEY;
    }
    fake_mr_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -FI_ENOMEM;
    m->prov = p;
    m->mr.fid.fclass = FI_CLASS_MR;
    m->mr.fid.ops = &fmr_ops;
    m->mr.key = p->prov_key ? 0xfeed0000u + (uint64_t)p->open : attr->requested_key;
    m->mr.mem_desc = m;
    p->open++;
    *mr = &m->mr;
    return 0;
}

static void fake_prov_init(fake_prov_t *p)
{
    memset(p, 0, sizeof(*p));
    p->mr_ops.size = sizeof(p->mr_ops);
    p->mr_ops.regattr = fake_regattr;
    p->dom.fid.fclass = FI_CLASS_DOMAIN;
    p->dom.mr = &p->mr_ops;
}

static void init_dom(fy_ofi_mr_dom_t *dom, fake_prov_t *p, uint64_t mr_mode, size_t key_size)
{
    fake_info_t f;
    fy_ofi_mr_mode_t m;
    FY_ASSERT_OK(fy_ofi_mr_mode_init(fake(&f, mr_mode, key_size), &m, NULL, 0));
    fake_prov_init(p);
    fy_ofi_mr_dom_init(dom, &p->dom, &m);
}

static void fake_prov_key(void)
{
    static char buf[256];
    fake_prov_t p;
    fy_ofi_mr_dom_t dom;
    fy_ofi_mr_t a, b;
    /* FI_MR_PROV_KEY: no key requested, the provider's is used */
    init_dom(&dom, &p, FI_MR_PROV_KEY | FI_MR_VIRT_ADDR, 8);
    p.prov_key = 1;
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, NULL, buf, sizeof(buf), RD, 0, &a));
    FY_ASSERT_U64_EQ(p.last_requested, 0);
    FY_ASSERT_U64_EQ(a.key, 0xfeed0000u);
    FY_ASSERT_EQ(a.flags, FY_OFI_RKEY_F_VIRT_ADDR);
    FY_ASSERT(fy_ofi_mr_desc(&a) == NULL); /* no FI_MR_LOCAL */
    FY_ASSERT_U64_EQ(p.last_access, FI_REMOTE_READ);
    fy_ofi_mr_dereg(&a);
    FY_ASSERT_EQ(p.open, 0);
    FY_ASSERT(a.mr == NULL);
    fy_ofi_mr_dereg(&a); /* twice is harmless */
    FY_ASSERT_EQ(p.closed, 1);

    /* no FI_MR_PROV_KEY: ferry requests distinct keys within mr_key_size */
    init_dom(&dom, &p, 0, 1);
    uint64_t seen[300] = {0};
    for (int i = 0; i < 300; i++) {
        FY_ASSERT_OK(fy_ofi_mr_reg(&dom, NULL, buf, 16, WR | AT, 0, &a));
        FY_ASSERT_U64_EQ(a.key, p.last_requested);
        FY_ASSERT(a.key >= 1 && a.key <= 255);
        seen[i] = a.key;
        if (i > 0 && i < 255)
            FY_ASSERT_NE(seen[i], seen[i - 1]);
        FY_ASSERT_EQ(a.flags, 0); /* offsets */
        FY_ASSERT_U64_EQ(p.last_access, FI_REMOTE_READ | FI_REMOTE_WRITE);
        fy_ofi_mr_dereg(&a);
    }
    /* a key the provider says is taken: the next one */
    p.enokey = 3;
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, NULL, buf, 16, RD, 0, &a));
    FY_ASSERT_EQ(p.enokey, 0);
    FY_ASSERT_U64_EQ(a.key, p.last_requested);
    fy_ofi_mr_dereg(&a);
    p.enokey = 100; /* taken for good: an error, nothing left open */
    FY_ASSERT_STATUS(fy_ofi_mr_reg(&dom, NULL, buf, 16, RD, 0, &a), FERRY_ERR_IO);
    FY_ASSERT(a.mr == NULL);
    FY_ASSERT_EQ(p.open, 0);
    /* bad arguments */
    p.enokey = 0;
    FY_ASSERT_STATUS(fy_ofi_mr_reg(&dom, NULL, buf, 0, RD, 0, &b), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_ofi_mr_reg(&dom, NULL, NULL, 8, RD, 0, &b), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_ofi_mr_reg(&dom, NULL, buf, 8, 0x80, 0, &b), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(fy_ofi_mr_reg(&dom, NULL, buf, 8, 0, 0, &b), FERRY_ERR_INVALID_PARAM);
}

static void fake_endpoint(void)
{
    static char buf[64];
    fake_prov_t p;
    fy_ofi_mr_dom_t dom;
    fy_ofi_mr_t a;
    struct fid_ep ep1, ep2;
    memset(&ep1, 0, sizeof(ep1));
    memset(&ep2, 0, sizeof(ep2));
    init_dom(&dom, &p, FI_MR_ENDPOINT | FI_MR_PROV_KEY, 8);
    p.prov_key = 1;
    /* no endpoint at all: refused before anything is registered */
    FY_ASSERT_STATUS(fy_ofi_mr_reg(&dom, NULL, buf, 8, RD, 0, &a), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_EQ(p.open, 0);
    /* the given one, bound then enabled */
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, &ep1, buf, 8, RD, 0, &a));
    FY_ASSERT(p.bound == &ep1.fid);
    FY_ASSERT_EQ(p.enabled, 1);
    FY_ASSERT(p.order_ok);
    fy_ofi_mr_dereg(&a);
    /* the domain's, for the rcache callbacks */
    dom.ep = &ep2;
    FY_ASSERT_OK(fy_ofi_mr_rcache_reg(&dom, buf, 8, RD, &a));
    FY_ASSERT(p.bound == &ep2.fid);
    FY_ASSERT_EQ(p.enabled, 2);
    fy_ofi_mr_rcache_dereg(&dom, &a);
    /* a scalable endpoint (ofi_sep.c): the registration binds to it, not to the context that
     * asks (ep1 stands for an iface's transmit context) */
    dom.ep_shared = 1;
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, &ep1, buf, 8, RD, 0, &a));
    FY_ASSERT(p.bound == &ep2.fid);
    FY_ASSERT_EQ(p.enabled, 3);
    fy_ofi_mr_dereg(&a);
    dom.ep_shared = 0;
    /* a bind that fails closes the registration */
    p.bind_fails = 1;
    FY_ASSERT_STATUS(fy_ofi_mr_reg(&dom, &ep1, buf, 8, RD, 0, &a), FERRY_ERR_IO);
    FY_ASSERT_EQ(p.open, 0);
    FY_ASSERT(a.mr == NULL);
    /* without FI_MR_ENDPOINT, nothing is bound */
    init_dom(&dom, &p, FI_MR_PROV_KEY, 8);
    p.prov_key = 1;
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, &ep1, buf, 8, RD, 0, &a));
    FY_ASSERT(p.bound == NULL);
    FY_ASSERT_EQ(p.enabled, 0);
    fy_ofi_mr_dereg(&a);
}

static void fake_local_allocated(void)
{
    fake_prov_t p;
    fy_ofi_mr_dom_t dom;
    fy_ofi_mr_t a;
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    /* FI_MR_LOCAL: a descriptor, local access bits when asked */
    init_dom(&dom, &p, FI_MR_LOCAL, 8);
    static char buf[64];
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, NULL, buf, 8, 0, 1, &a));
    FY_ASSERT(fy_ofi_mr_desc(&a) != NULL);
    FY_ASSERT(fy_ofi_mr_desc(&a) == a.mr->mem_desc);
    FY_ASSERT_U64_EQ(p.last_access, FI_SEND | FI_RECV | FI_READ | FI_WRITE);
    fy_ofi_mr_dereg(&a);
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, NULL, buf, 8, RD, 1, &a));
    FY_ASSERT_U64_EQ(p.last_access, FI_REMOTE_READ | FI_SEND | FI_RECV | FI_READ | FI_WRITE);
    fy_ofi_mr_dereg(&a);
    FY_ASSERT_U64_EQ(fy_ofi_mr_access(&dom, RD, 0), FI_REMOTE_READ);

    /* FI_MR_ALLOCATED: a range with a hole is refused before the provider sees it */
    init_dom(&dom, &p, FI_MR_ALLOCATED, 8);
    unsigned char *m =
        mmap(NULL, 3 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FY_ASSERT(m != MAP_FAILED);
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, NULL, m, 3 * ps, RD, 0, &a));
    fy_ofi_mr_dereg(&a);
    FY_ASSERT_EQ(munmap(m + ps, ps), 0);
    p.last_requested = 0;
    FY_ASSERT_STATUS(fy_ofi_mr_reg(&dom, NULL, m, 3 * ps, RD, 0, &a), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_U64_EQ(p.last_requested, 0);
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, NULL, m + 2 * ps + 5, 10, RD, 0, &a));
    fy_ofi_mr_dereg(&a);
    /* without the bit, the provider decides */
    init_dom(&dom, &p, 0, 8);
    FY_ASSERT_OK(fy_ofi_mr_reg(&dom, NULL, m, 3 * ps, RD, 0, &a));
    fy_ofi_mr_dereg(&a);
    munmap(m, ps);
    munmap(m + 2 * ps, ps);
}

/* ---- real providers over loopback ---------------------------------------------------------- */

typedef struct rail {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    fi_addr_t self;
    fy_ofi_mr_dom_t mrd;
} rail_t;

/* Open prov with the MR mode bits it returns for hints mr_mode; 0 when the provider is not
 * here. */
static int rail_open(rail_t *r, const char *prov, uint64_t mr_mode)
{
    memset(r, 0, sizeof(*r));
    struct fi_info *h = fi_allocinfo();
    FY_ASSERT(h != NULL);
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_MSG | FI_RMA;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode = (int)mr_mode;
    h->fabric_attr->prov_name = strdup(prov);
    int net = strcmp(prov, "shm") != 0;
    int rc = fi_getinfo(FI_VERSION(1, 17), net ? "127.0.0.1" : NULL, NULL, net ? FI_SOURCE : 0, h,
                        &r->info);
    fi_freeinfo(h);
    if (rc != 0) {
        printf("provider %s not here (%s): skipped\n", prov, fi_strerror(-rc));
        return 0;
    }
    fy_ofi_mr_mode_t m;
    FY_ASSERT_OK(fy_ofi_mr_mode_init(r->info, &m, NULL, 0));
    FY_ASSERT_EQ(fi_fabric(r->info->fabric_attr, &r->fabric, NULL), 0);
    FY_ASSERT_EQ(fi_domain(r->fabric, r->info, &r->domain, NULL), 0);
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64};
    FY_ASSERT_EQ(fi_cq_open(r->domain, &cqa, &r->cq, NULL), 0);
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    FY_ASSERT_EQ(fi_av_open(r->domain, &ava, &r->av, NULL), 0);
    FY_ASSERT_EQ(fi_endpoint(r->domain, r->info, &r->ep, NULL), 0);
    FY_ASSERT_EQ(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV), 0);
    FY_ASSERT_EQ(fi_ep_bind(r->ep, &r->av->fid, 0), 0);
    FY_ASSERT_EQ(fi_enable(r->ep), 0);
    char name[256];
    size_t nlen = sizeof(name);
    FY_ASSERT_EQ(fi_getname(&r->ep->fid, name, &nlen), 0);
    FY_ASSERT_EQ(fi_av_insert(r->av, name, 1, &r->self, 0, NULL), 1);
    fy_ofi_mr_dom_init(&r->mrd, r->domain, &m);
    r->mrd.ep = r->ep;
    return 1;
}

static void rail_close(rail_t *r)
{
    fi_close(&r->ep->fid);
    fi_close(&r->av->fid);
    fi_close(&r->cq->fid);
    fi_close(&r->domain->fid);
    fi_close(&r->fabric->fid);
    fi_freeinfo(r->info);
}

/* Wait for one completion (progress by polling the CQ); its status, within 10 s. */
static int rail_wait(rail_t *r)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct fi_cq_entry e;
        ssize_t n = fi_cq_read(r->cq, &e, 1);
        if (n == 1)
            return 0;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof(err));
            fi_cq_readerr(r->cq, &err, 0);
            return -(int)err.err;
        }
        FY_ASSERT_MSG(n == -FI_EAGAIN, "fi_cq_read: %s", fi_strerror((int)-n));
        clock_gettime(CLOCK_MONOTONIC, &t);
        FY_ASSERT_MSG(t.tv_sec - t0.tv_sec < 10, "no completion in 10 s");
    }
}

/* An RMA through a packed and unpacked key, as a peer would do it: 0 or the error. */
static int rail_rma(rail_t *r, int write, void *local, size_t len, const fy_ofi_mr_t *lmr,
                    const fy_ofi_mr_t *tmr, uint64_t target_va)
{
    uint8_t packed[FY_OFI_RKEY_PACKED_SIZE];
    fy_ofi_mr_rkey_t rk;
    uint64_t addr;
    fy_ofi_rkey_pack(&r->mrd, tmr, packed);
    FY_ASSERT_OK(fy_ofi_rkey_unpack(&r->mrd.mode, packed, sizeof(packed), &rk));
    FY_ASSERT_OK(fy_ofi_rkey_addr(&rk, target_va, len, write ? WR : RD, &addr));
    struct fi_context2 ctx;
    ssize_t rc;
    do {
        rc = write ? fi_write(r->ep, local, len, fy_ofi_mr_desc(lmr), r->self, addr, rk.key, &ctx)
                   : fi_read(r->ep, local, len, fy_ofi_mr_desc(lmr), r->self, addr, rk.key, &ctx);
        if (rc == -FI_EAGAIN) {
            struct fi_cq_entry e;
            fi_cq_read(r->cq, &e, 0);
        }
    } while (rc == -FI_EAGAIN);
    if (rc != 0)
        return (int)rc;
    return rail_wait(r);
}

/* Write into the middle of a target region and read it back, through the packed key. */
static void transfer(const char *prov, uint64_t hints, int force_local_allocated)
{
    rail_t r;
    if (!rail_open(&r, prov, hints))
        return;
    if (force_local_allocated) {
        /* modes the providers here do not ask for, forced on: ferry's handling still works */
        r.mrd.mode.local = r.mrd.mode.allocated = 1;
    }
    printf("%s: MR mode %s%s\n", prov, r.mrd.mode.virt_addr ? "FI_MR_VIRT_ADDR" : "offsets",
           force_local_allocated ? " + forced FI_MR_LOCAL|FI_MR_ALLOCATED" : "");
    size_t len = 3 * 4096;
    unsigned char *target = malloc(len), *src = malloc(64), *dst = malloc(64);
    memset(target, 't', len);
    memset(src, 's', 64);
    memset(dst, 0, 64);
    fy_ofi_mr_t tmr, smr, dmr;
    FY_ASSERT_OK(fy_ofi_mr_reg(&r.mrd, NULL, target, len, RD | WR, 0, &tmr));
    FY_ASSERT_OK(fy_ofi_mr_reg(&r.mrd, NULL, src, 64, 0, 1, &smr));
    FY_ASSERT_OK(fy_ofi_mr_reg(&r.mrd, NULL, dst, 64, 0, 1, &dmr));
    FY_ASSERT_EQ(fy_ofi_mr_desc(&smr) != NULL, r.mrd.mode.local);
    uint64_t va = (uint64_t)(uintptr_t)(target + 5000);
    FY_ASSERT_EQ(rail_rma(&r, 1, src, 64, &smr, &tmr, va), 0);
    FY_ASSERT_MEM_EQ(target + 5000, src, 64);
    FY_ASSERT_EQ(target[4999], 't');
    FY_ASSERT_EQ(target[5064], 't');
    target[5000] = 'X';
    FY_ASSERT_EQ(rail_rma(&r, 0, dst, 64, &dmr, &tmr, va), 0);
    FY_ASSERT_EQ(dst[0], 'X');
    FY_ASSERT_MEM_EQ(dst + 1, src + 1, 63);
    /* the provider addresses the way the mode says: a virtual address taken as an offset is
     * out of bounds.  Only tcp;ofi_rxm completes such a read with an error; udp;ofi_rxd and shm
     * never complete it (so ferry checks bounds from the key before posting). */
    if (!r.mrd.mode.virt_addr && strcmp(prov, "tcp;ofi_rxm") == 0) {
        struct fi_context2 ctx;
        ssize_t rc = fi_read(r.ep, dst, 8, fy_ofi_mr_desc(&dmr), r.self, va, tmr.key, &ctx);
        if (rc == 0)
            FY_ASSERT_NE(rail_wait(&r), 0); /* a virtual address as an offset: out of bounds */
    }
    fy_ofi_mr_dereg(&tmr);
    fy_ofi_mr_dereg(&smr);
    fy_ofi_mr_dereg(&dmr);
    rail_close(&r);
    free(target);
    free(src);
    free(dst);
}

static void tcp_rxm(void)
{
    transfer("tcp;ofi_rxm", fy_ofi_mr_mode_hints(), 0);
    transfer("tcp;ofi_rxm", fy_ofi_mr_mode_hints(), 1);
}

static void udp_rxd(void)
{
    transfer("udp;ofi_rxd", fy_ofi_mr_mode_hints(), 0);
    transfer("udp;ofi_rxd", fy_ofi_mr_mode_hints(), 1);
}

static void shm_modes(void)
{
    transfer("shm", fy_ofi_mr_mode_hints(), 0);                              /* FI_MR_VIRT_ADDR */
    transfer("shm", fy_ofi_mr_mode_hints() & ~(uint64_t)FI_MR_VIRT_ADDR, 0); /* offsets */
    transfer("shm", fy_ofi_mr_mode_hints(), 1);
}

/* The case over a real provider: a buffer registered through the cache, unmapped, and
 * mapped again at the same address with new contents is read through a new registration; the
 * stale key is refused by the provider, so it was deregistered. */
static void rcache_remap(void)
{
    rail_t r;
    FY_ASSERT(rail_open(&r, "tcp;ofi_rxm", fy_ofi_mr_mode_hints()));
    fy_rcache_opts_t o = {.enable = 1, .max_bytes = SIZE_MAX, .max_entries = 100};
    fy_rcache_params_t p = {.name = "ofi",
                            .memh_size = sizeof(fy_ofi_mr_t),
                            .reg = fy_ofi_mr_rcache_reg,
                            .dereg = fy_ofi_mr_rcache_dereg,
                            .arg = &r.mrd,
                            .opts = &o};
    fy_rcache_t *rc;
    FY_ASSERT_OK(fy_rcache_create(&p, &rc));
    FY_ASSERT(fy_rcache_is_caching(rc));
    size_t len = 2 * 4096;
    unsigned char dst[64];
    fy_ofi_mr_t dmr;
    FY_ASSERT_OK(fy_ofi_mr_reg(&r.mrd, NULL, dst, sizeof(dst), 0, 1, &dmr));
    unsigned char *b = NULL, *n = NULL;
    fy_ofi_mr_t old;
    for (int attempt = 0; n == NULL; attempt++) {
        FY_ASSERT_LT(attempt, 20);
        b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        FY_ASSERT(b != MAP_FAILED);
        memset(b, 'A', len);
        fy_rcache_region_t *reg;
        FY_ASSERT_OK(fy_rcache_get(rc, b + 100, 64, RD, &reg));
        old = *(fy_ofi_mr_t *)fy_rcache_region_memh(reg);
        FY_ASSERT_EQ(rail_rma(&r, 0, dst, 64, &dmr, &old, (uint64_t)(uintptr_t)(b + 100)), 0);
        FY_ASSERT_EQ(dst[0], 'A');
        fy_rcache_put(rc, reg);
        FY_ASSERT_EQ(munmap(b, len), 0);
        n = mmap(b, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                 -1, 0);
        if (n != b) {
            if (n != MAP_FAILED)
                munmap(n, len);
            n = NULL;
        }
    }
    memset(n, 'B', len);
    fy_rcache_region_t *reg;
    FY_ASSERT_OK(fy_rcache_get(rc, n + 100, 64, RD, &reg));
    fy_ofi_mr_t *cur = fy_rcache_region_memh(reg);
    FY_ASSERT(cur->mr != old.mr || cur->key != old.key);
    FY_ASSERT_U64_EQ(cur->base, (uint64_t)(uintptr_t)n);
    FY_ASSERT_EQ(rail_rma(&r, 0, dst, 64, &dmr, cur, (uint64_t)(uintptr_t)(n + 100)), 0);
    FY_ASSERT_EQ(dst[0], 'B');
    /* the stale registration is closed: its key is refused */
    if (old.key != cur->key) {
        struct fi_context2 ctx;
        ssize_t rc2 = fi_read(r.ep, dst, 8, NULL, r.self, 100, old.key, &ctx);
        if (rc2 == 0)
            FY_ASSERT_NE(rail_wait(&r), 0);
    }
    fy_rcache_stats_t s;
    fy_rcache_get_stats(rc, &s);
    FY_ASSERT_GE(s.invalidations, 1);
    FY_ASSERT_EQ(s.regs, s.invalidations + 1); /* one per mapping (retries included) */
    fy_rcache_put(rc, reg);
    fy_rcache_destroy(rc);
    fy_ofi_mr_dereg(&dmr);
    munmap(n, len);
    rail_close(&r);
}

FYTEST_MAIN(FYTEST_CASE(mode_bits), FYTEST_CASE(mode_refused), FYTEST_CASE(mode_names),
            FYTEST_CASE(rkey_roundtrip), FYTEST_CASE(rkey_addr), FYTEST_CASE(fake_prov_key),
            FYTEST_CASE(fake_endpoint), FYTEST_CASE(fake_local_allocated), FYTEST_CASE(tcp_rxm),
            FYTEST_CASE(udp_rxd), FYTEST_CASE(shm_modes), FYTEST_CASE(rcache_remap))
