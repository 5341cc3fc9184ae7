/*
 * ofi_mr.c - memory registration for the ofi transport: the provider's MR mode read bit by bit
 * into what ferry does (ofi_mr.h lists each bit and its handling), registration over
 * fi_mr_regattr, and the remote key.
 *
 * Why this shape: the mode is decided once per domain into plain flags, so the data path tests
 * a flag instead of re-reading mode bits, and the one function that turns a target address into
 * libfabric's `addr` (virtual or offset from the base) is the only place that knows about
 * FI_MR_VIRT_ADDR.  The packed key carries the target's own addressing flag, base and length, so
 * an initiator refuses an access outside the region before anything is sent (the transport
 * contract lets the initiator check from the key), and a key from a peer whose provider
 * addresses memory differently is refused at unpack instead of reaching a wrong address.
 * Requested keys (no FI_MR_PROV_KEY) come from a per-domain counter kept within mr_key_size
 * bytes; a key the provider says is taken (-FI_ENOKEY) moves to the next one.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tl/ofi/ofi_mr.h"
#include "util/log.h"

/* The bits ferry handles (ofi_mr.h: THE MODE). */
#define MR_SERVED                                                                                  \
    ((uint64_t)(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |                 \
                FI_MR_ENDPOINT | FI_MR_HMEM))

#define ACCESS_KNOWN (FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC)

static const struct {
    uint64_t bit;
    const char *name;
} mr_bit_names[] = {
    {FI_MR_BASIC, "FI_MR_BASIC"},         {FI_MR_SCALABLE, "FI_MR_SCALABLE"},
    {FI_MR_LOCAL, "FI_MR_LOCAL"},         {FI_MR_RAW, "FI_MR_RAW"},
    {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"}, {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
    {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},   {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
    {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"}, {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
    {FI_MR_HMEM, "FI_MR_HMEM"},           {FI_MR_COLLECTIVE, "FI_MR_COLLECTIVE"},
};

const char *fy_ofi_mr_mode_str(uint64_t mr_mode, char *buf, size_t len)
{
    size_t o = 0;
    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(mr_bit_names) / sizeof(mr_bit_names[0]); i++) {
        if ((mr_mode & mr_bit_names[i].bit) == 0)
            continue;
        mr_mode &= ~mr_bit_names[i].bit;
        int w = snprintf(buf + o, len - o, "%s%s", o != 0 ? "|" : "", mr_bit_names[i].name);
        if (w < 0 || (size_t)w >= len - o)
            return buf;
        o += (size_t)w;
    }
    if (mr_mode != 0)
        snprintf(buf + o, len - o, "%s0x%llx", o != 0 ? "|" : "", (unsigned long long)mr_mode);
    else if (o == 0)
        snprintf(buf, len, "none");
    return buf;
}

uint64_t fy_ofi_mr_mode_hints(void)
{
    return FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
}

ferry_status_t fy_ofi_mr_mode_init(const struct fi_info *info, fy_ofi_mr_mode_t *mode, char *errbuf,
                                   size_t errlen)
{
    char tmp[256], names[192];
    const char *prov =
        info != NULL && info->fabric_attr != NULL && info->fabric_attr->prov_name != NULL
            ? info->fabric_attr->prov_name
            : "?";
    if (errbuf == NULL || errlen == 0) {
        errbuf = tmp;
        errlen = sizeof(tmp);
    }
    errbuf[0] = '\0';
    memset(mode, 0, sizeof(*mode));
    if (info == NULL || info->domain_attr == NULL) {
        snprintf(errbuf, errlen, "ofi: no domain attributes to read the MR mode from");
        fy_error("%s", errbuf);
        return FERRY_ERR_INVALID_PARAM;
    }
    const struct fi_domain_attr *da = info->domain_attr;
    uint64_t m = (uint64_t)da->mr_mode;
    /* The old enum values (API < 1.5): BASIC is PROV_KEY | ALLOCATED | VIRT_ADDR, SCALABLE
     * none of them. */
    if (m & FI_MR_BASIC)
        m = (m & ~(uint64_t)FI_MR_BASIC) | FI_MR_PROV_KEY | FI_MR_ALLOCATED | FI_MR_VIRT_ADDR;
    m &= ~(uint64_t)FI_MR_SCALABLE;

    uint64_t refused = m & ~MR_SERVED;
    if (refused != 0) {
        snprintf(errbuf, errlen,
                 "ofi: provider %s needs memory registration mode %s, which ferry does not "
                 "serve (it serves %s)",
                 prov, fy_ofi_mr_mode_str(refused, names, sizeof(names)),
                 "FI_MR_LOCAL|FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY|FI_MR_ENDPOINT");
        fy_error("%s", errbuf);
        return FERRY_ERR_UNSUPPORTED;
    }
    size_t ks = da->mr_key_size;
    if (ks == 0)
        ks = 8; /* not reported: keys are whatever fits a uint64_t */
    if (ks > 8) {
        snprintf(errbuf, errlen,
                 "ofi: provider %s has %zu-byte memory keys (mr_key_size); ferry serves keys of "
                 "up to 8 bytes (raw keys, FI_MR_RAW, are not served)",
                 prov, ks);
        fy_error("%s", errbuf);
        return FERRY_ERR_UNSUPPORTED;
    }
    mode->mr_mode = m;
    mode->key_size = ks;
    mode->iov_limit = da->mr_iov_limit;
    mode->virt_addr = (m & FI_MR_VIRT_ADDR) != 0;
    mode->prov_key = (m & FI_MR_PROV_KEY) != 0;
    mode->allocated = (m & FI_MR_ALLOCATED) != 0;
    mode->endpoint = (m & FI_MR_ENDPOINT) != 0;
    mode->local = (m & FI_MR_LOCAL) != 0;
    fy_debug("ofi: provider %s: MR mode %s, %zu-byte keys", prov,
             fy_ofi_mr_mode_str(m, names, sizeof(names)), ks);
    return FERRY_OK;
}

void fy_ofi_mr_dom_init(fy_ofi_mr_dom_t *dom, struct fid_domain *domain,
                        const fy_ofi_mr_mode_t *mode)
{
    dom->domain = domain;
    dom->mode = *mode;
    atomic_init(&dom->next_key, 1);
    atomic_init(&dom->nregs, 0);
    dom->ep = NULL;
}

uint64_t fy_ofi_mr_access(const fy_ofi_mr_dom_t *dom, unsigned ferry_access, int local)
{
    uint64_t a = 0;
    if (ferry_access & FERRY_MEM_REMOTE_READ)
        a |= FI_REMOTE_READ;
    if (ferry_access & FERRY_MEM_REMOTE_WRITE)
        a |= FI_REMOTE_WRITE;
    if (ferry_access & FERRY_MEM_REMOTE_ATOMIC) /* fetching atomics read too */
        a |= FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (local && dom->mode.local)
        a |= FI_SEND | FI_RECV | FI_READ | FI_WRITE;
    return a;
}

/* A requested key: the next value of the counter that fits key_size bytes (never 0, which
 * some providers treat as "no key"). */
static uint64_t next_key(fy_ofi_mr_dom_t *dom)
{
    uint64_t mask = dom->mode.key_size >= 8 ? UINT64_MAX : (1ull << (8 * dom->mode.key_size)) - 1;
    for (;;) {
        uint64_t k = atomic_fetch_add(&dom->next_key, 1) & mask;
        if (k != 0)
            return k;
    }
}

/* FI_MR_ALLOCATED: is every page of [addr, addr + len) mapped?  mincore fails with ENOMEM on
 * a hole; the vector is only a scratch buffer, read a chunk of pages at a time. */
static int range_mapped(const void *addr, size_t len)
{
    long psz = sysconf(_SC_PAGESIZE);
    uintptr_t pg = (uintptr_t)psz;
    uintptr_t s = (uintptr_t)addr & ~(pg - 1);
    uintptr_t e = ((uintptr_t)addr + len + pg - 1) & ~(pg - 1);
    unsigned char vec[256];
    while (s < e) {
        size_t n = (e - s) / pg;
        if (n > sizeof(vec))
            n = sizeof(vec);
        if (mincore((void *)s, n * pg, vec) != 0)
            return 0;
        s += n * pg;
    }
    return 1;
}

ferry_status_t fy_ofi_mr_reg(fy_ofi_mr_dom_t *dom, struct fid_ep *ep, void *addr, size_t len,
                             unsigned ferry_access, int local, fy_ofi_mr_t *mr)
{
    memset(mr, 0, sizeof(*mr));
    if (dom == NULL || dom->domain == NULL || addr == NULL || len == 0 ||
        (ferry_access & ~ACCESS_KNOWN) != 0 || (uintptr_t)addr + len < (uintptr_t)addr)
        return FERRY_ERR_INVALID_PARAM;
    if (ferry_access == 0 && !local)
        return FERRY_ERR_INVALID_PARAM;
    const fy_ofi_mr_mode_t *mode = &dom->mode;
    if (mode->endpoint) {
        if (ep == NULL || dom->ep_shared)
            ep = dom->ep;
        if (ep == NULL) {
            fy_error("ofi: FI_MR_ENDPOINT: a registration needs an endpoint to bind to");
            return FERRY_ERR_INVALID_PARAM;
        }
    }
    if (mode->allocated && !range_mapped(addr, len)) {
        fy_error("ofi: FI_MR_ALLOCATED: [%p, +%zu) is not mapped memory; not registered", addr,
                 len);
        return FERRY_ERR_INVALID_PARAM;
    }
    uint64_t access = fy_ofi_mr_access(dom, ferry_access, local);
    if (access == 0)
        access = FI_SEND | FI_RECV; /* local-only without FI_MR_LOCAL: providers want a bit */
    struct iovec iov = {.iov_base = addr, .iov_len = len};
    struct fi_mr_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = access;
    attr.offset = 0; /* without FI_MR_VIRT_ADDR, remote addresses start at 0 in the region */
    attr.iface = FI_HMEM_SYSTEM;

    struct fid_mr *fmr = NULL;
    int rc = 0;
    /* A requested key may be taken by a registration of another library in the domain. */
    for (int tries = 0; tries < 16; tries++) {
        attr.requested_key = mode->prov_key ? 0 : next_key(dom);
        rc = fi_mr_regattr(dom->domain, &attr, 0, &fmr);
        if (rc != -FI_ENOKEY)
            break;
    }
    if (rc != 0) {
        fy_error("ofi: fi_mr_regattr(%p, %zu bytes): %s", addr, len, fi_strerror(-rc));
        return rc == -FI_ENOMEM ? FERRY_ERR_NO_MEMORY : FERRY_ERR_IO;
    }
    if (mode->endpoint) {
        rc = fi_mr_bind(fmr, &ep->fid, 0);
        if (rc == 0)
            rc = fi_mr_enable(fmr);
        if (rc != 0) {
            fy_error("ofi: FI_MR_ENDPOINT: binding the registration to the endpoint: %s",
                     fi_strerror(-rc));
            fi_close(&fmr->fid);
            return FERRY_ERR_IO;
        }
    }
    mr->mr = fmr;
    mr->key = mode->prov_key ? fi_mr_key(fmr) : attr.requested_key;
    if (mr->key == FI_KEY_NOTAVAIL) {
        fy_error("ofi: the provider gave no key for the registration of %p", addr);
        fi_close(&fmr->fid);
        memset(mr, 0, sizeof(*mr));
        return FERRY_ERR_IO;
    }
    mr->desc = mode->local ? fi_mr_desc(fmr) : NULL;
    mr->base = (uint64_t)(uintptr_t)addr;
    mr->len = len;
    mr->access = ferry_access;
    mr->flags = mode->virt_addr ? FY_OFI_RKEY_F_VIRT_ADDR : 0;
    atomic_fetch_add(&dom->nregs, 1);
    return FERRY_OK;
}

void fy_ofi_mr_dereg(fy_ofi_mr_t *mr)
{
    if (mr == NULL || mr->mr == NULL)
        return;
    int rc = fi_close(&mr->mr->fid);
    if (rc != 0)
        fy_warn("ofi: closing a memory registration: %s", fi_strerror(-rc));
    memset(mr, 0, sizeof(*mr));
}

/* ---- the packed key ------------------------------------------------------------------------- */

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_le32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void fy_ofi_rkey_pack(const fy_ofi_mr_dom_t *dom, const fy_ofi_mr_t *mr, void *buf)
{
    uint8_t *p = buf;
    p[0] = FY_OFI_RKEY_MAGIC;
    p[1] = FY_OFI_RKEY_VERSION;
    p[2] = (uint8_t)mr->flags;
    p[3] = (uint8_t)dom->mode.key_size;
    put_le32(p + 4, mr->access);
    put_le64(p + 8, mr->key);
    put_le64(p + 16, mr->base);
    put_le64(p + 24, mr->len);
}

ferry_status_t fy_ofi_rkey_unpack(const fy_ofi_mr_mode_t *mode, const void *buf, size_t len,
                                  fy_ofi_mr_rkey_t *rkey)
{
    const uint8_t *p = buf;
    memset(rkey, 0, sizeof(*rkey));
    if (buf == NULL || len < FY_OFI_RKEY_PACKED_SIZE) {
        fy_debug("ofi: remote key of %zu bytes, %d expected", len, FY_OFI_RKEY_PACKED_SIZE);
        return FERRY_ERR_INVALID_PARAM;
    }
    if (p[0] != FY_OFI_RKEY_MAGIC || p[1] != FY_OFI_RKEY_VERSION) {
        fy_debug("ofi: remote key with magic 0x%02x version %u (0x%02x %u expected)", p[0], p[1],
                 FY_OFI_RKEY_MAGIC, FY_OFI_RKEY_VERSION);
        return FERRY_ERR_INVALID_PARAM;
    }
    uint32_t flags = p[2], ks = p[3], access = get_le32(p + 4);
    uint64_t key = get_le64(p + 8), base = get_le64(p + 16), rlen = get_le64(p + 24);
    if ((flags & ~(uint32_t)FY_OFI_RKEY_F_VIRT_ADDR) != 0 || ks == 0 || ks > 8 ||
        (ks < 8 && (key >> (8 * ks)) != 0) || (access & ~(uint32_t)ACCESS_KNOWN) != 0 ||
        rlen == 0 || base + rlen < base) {
        fy_debug("ofi: malformed remote key (flags 0x%x, key size %u, access 0x%x, len %llu)",
                 flags, ks, access, (unsigned long long)rlen);
        return FERRY_ERR_INVALID_PARAM;
    }
    if (mode != NULL) {
        uint32_t local = mode->virt_addr ? FY_OFI_RKEY_F_VIRT_ADDR : 0;
        if ((flags & FY_OFI_RKEY_F_VIRT_ADDR) != local || ks > mode->key_size) {
            fy_debug("ofi: remote key from a domain addressed %s with %u-byte keys; this one is "
                     "%s with %zu-byte keys",
                     (flags & FY_OFI_RKEY_F_VIRT_ADDR) ? "virtually" : "by offset", ks,
                     local ? "virtual" : "by offset", mode->key_size);
            return FERRY_ERR_INVALID_PARAM;
        }
    }
    rkey->key = key;
    rkey->base = base;
    rkey->len = rlen;
    rkey->access = access;
    rkey->flags = flags;
    return FERRY_OK;
}

ferry_status_t fy_ofi_rkey_addr(const fy_ofi_mr_rkey_t *rkey, uint64_t va, size_t len,
                                unsigned need, uint64_t *addr_p)
{
    /* inside [base, base + len) without overflowing: va >= base, va - base + len <= rkey len */
    if (va < rkey->base || va - rkey->base > rkey->len || len > rkey->len - (va - rkey->base) ||
        (need & ~rkey->access) != 0)
        return FERRY_ERR_ACCESS_DENIED;
    *addr_p = (rkey->flags & FY_OFI_RKEY_F_VIRT_ADDR) ? va : va - rkey->base;
    return FERRY_OK;
}

/* ---- rcache callbacks ------------------------------------------------------------------------ */

ferry_status_t fy_ofi_mr_rcache_reg(void *arg, void *addr, size_t len, unsigned access, void *memh)
{
    fy_ofi_mr_dom_t *dom = arg;
    return fy_ofi_mr_reg(dom, dom->ep, addr, len, access, 1, memh);
}

void fy_ofi_mr_rcache_dereg(void *arg, void *memh)
{
    (void)arg;
    fy_ofi_mr_dereg(memh);
}
