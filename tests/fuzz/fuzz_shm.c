/*
 * fuzz_shm.c - libFuzzer target for the messages a local peer writes into an shm ring
 * (src/tl/shm/shm_rx.c and the control cells of shm_ep.c / shm_rma.c): any cell type, AM id,
 * flags and length, inline bytes, the bytes of the cell's buffer (PULL, OUTBOX and AMO_REQ
 * descriptors, FRAG chunks).  A peer shares the ring, so it can write anything there; the
 * receiver must drop what is malformed and never read or write outside what it owns.
 *
 * The input is a list of cells, each: type, am_id, flags (2), len (4), a byte `fix`, then a
 * byte n and n inline bytes, then two bytes m and m buffer bytes.  With fix bit 0 set, the
 * sender address inside a PULL/OUTBOX/AMO_REQ descriptor is replaced by this iface's own, so
 * the checks behind the address check are reached too.  Each cell is written into the ring
 * of one iface through an ep to itself (as a crafted-cell test does), then progress runs.
 */
#include "fuzz_common.h"
#include "tl/shm/shm.h"
#include "tl/tl.h"

static const fy_tl_component_t *tl;
static fy_tl_md_t *md;
static fy_tl_iface_t *iface;
static shm_ep_t *ep;
static unsigned long delivered;

static void am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    const volatile uint8_t *p = data;
    if (len > 0) /* touch both ends: ASan checks the bounds handed to the handler */
        delivered += p[0] + p[len - 1];
}

static void err_cb(void *arg, fy_tl_ep_t *e, ferry_status_t status) {}

static void progress(void)
{
    for (int i = 0, idle = 0; i < 64 && idle < 2; i++)
        idle = tl->ops->iface_progress(iface) == 0 ? idle + 1 : 0;
}

static void seed(const char *name, uint8_t type, uint8_t id, uint32_t len, uint8_t fix,
                 const void *in, uint8_t nin, const void *buf, uint16_t nbuf)
{
    uint8_t s[8192];
    size_t o = 0;
    s[o++] = type;
    s[o++] = id;
    s[o++] = 0;
    s[o++] = 0;
    memcpy(s + o, &len, 4);
    o += 4;
    s[o++] = fix;
    s[o++] = nin;
    if (nin != 0)
        memcpy(s + o, in, nin);
    o += nin;
    memcpy(s + o, &nbuf, 2);
    o += 2;
    if (nbuf != 0)
        memcpy(s + o, buf, nbuf);
    o += nbuf;
    fz_seed(name, NULL, 0, s, o);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    tl = fy_tl_find("shm");
    FZ_CHECK(tl != NULL && tl->ops->md_open(tl, &md) == FERRY_OK);
    fy_tl_iface_params_t params = {
        .device = "memory", .am_cb = am_cb, .err_cb = err_cb, .job_key = 0x5eed};
    FZ_CHECK(tl->ops->iface_open(md, &params, &iface) == FERRY_OK);
    fy_tl_iface_attr_t attr;
    tl->ops->iface_query(iface, &attr);
    uint8_t dev[256], ifa[256];
    FZ_CHECK(attr.device_addr_len <= sizeof(dev) && attr.iface_addr_len <= sizeof(ifa));
    FZ_CHECK(tl->ops->iface_get_address(iface, dev, ifa) == FERRY_OK);
    fy_tl_ep_t *e;
    FZ_CHECK(tl->ops->ep_create(iface, dev, ifa, &e) == FERRY_OK);
    ep = (shm_ep_t *)e;

    /* seeds: one well-formed cell of each kind a peer sends unprompted */
    shm_iface_t *si = (shm_iface_t *)iface;
    uint8_t b[4096];
    memset(b, 0x5a, sizeof(b));
    seed("short", SHM_CELL_SHORT, 3, 24, 0, b, 24, NULL, 0);
    seed("bcopy", SHM_CELL_BCOPY, 3, 1000, 0, NULL, 0, b, 1000);
    shm_frag_hdr_t fh = {.token = 77, .total = 6000, .offset = 0};
    seed("frag0", SHM_CELL_FRAG, 3, 3000, 0, &fh, sizeof(fh), b, 3000);
    shm_obox_desc_t od = {.from = si->addr, .off = si->obox_off + 128, .len = 100, .gen = 1};
    seed("outbox", SHM_CELL_OUTBOX, 3, sizeof(od), 1, NULL, 0, &od, sizeof(od));
    shm_pull_desc_t pd;
    memset(&pd, 0, sizeof(pd));
    pd.cookie = 1;
    pd.data_len = 64;
    pd.hdr_len = 8;
    pd.iovcnt = 1;
    pd.reply = si->addr;
    pd.iov[0].addr = (uint64_t)(uintptr_t)b;
    pd.iov[0].len = 64;
    uint8_t pull[sizeof(pd) + 8];
    memcpy(pull, &pd, sizeof(pd));
    memset(pull + sizeof(pd), 7, 8); /* the AM header */
    seed("pull", SHM_CELL_PULL, 3, sizeof(pull), 1, NULL, 0, pull, sizeof(pull));
    shm_amo_req_t ar;
    memset(&ar, 0, sizeof(ar));
    ar.reply = si->addr;
    ar.size = 8;
    seed("amo", SHM_CELL_AMO_REQ, 0, sizeof(ar), 1, NULL, 0, &ar, sizeof(ar));
    shm_reply_t rp = {.cookie = 1};
    seed("zdone", SHM_CELL_ZDONE, 0, sizeof(rp), 0, &rp, sizeof(rp), NULL, 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shm_iface_t *si = (shm_iface_t *)iface;
    size_t inline_cap = ((size_t)1 << ep->cell_shift) - SHM_CELL_HDR;
    while (size >= 9) {
        uint8_t type = data[0], id = data[1], fix = data[8];
        uint16_t flags;
        uint32_t len;
        memcpy(&flags, data + 2, 2);
        memcpy(&len, data + 4, 4);
        data += 9, size -= 9;
        size_t nin = size > 0 ? data[0] : 0;
        data += size > 0, size -= size > 0;
        nin = nin < size ? nin : size;
        const uint8_t *in = data;
        data += nin, size -= nin;
        size_t nbuf = 0;
        if (size >= 2) {
            nbuf = (size_t)data[0] | (size_t)data[1] << 8;
            data += 2, size -= 2;
        }
        nbuf = nbuf < size ? nbuf : size;
        const uint8_t *buf = data;
        data += nbuf, size -= nbuf;

        uint32_t t;
        int wake = 0;
        shm_cell_t *c =
            shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
        if (c == NULL) { /* full: let the receiver consume, then try once more */
            progress();
            c = shm_ring_claim(ep->cells, ep->tail, ep->mask, ep->cell_shift, ep->owner, &t, &wake);
            if (c == NULL)
                break;
        }
        shm_cell_hdr(c, type, id, flags, len);
        memcpy(c->data, in, nin < inline_cap ? nin : inline_cap);
        char *slot = ep->bufs + (size_t)(t & ep->mask) * ep->bcopy_size;
        size_t nb = nbuf < ep->bcopy_size ? nbuf : ep->bcopy_size;
        memcpy(slot, buf, nb);
        if (fix & 1) {
            if (type == SHM_CELL_OUTBOX && nb >= sizeof(shm_iface_addr_t))
                memcpy(slot + offsetof(shm_obox_desc_t, from), &si->addr, sizeof(si->addr));
            if (type == SHM_CELL_PULL && nb >= sizeof(shm_pull_desc_t))
                memcpy(slot + offsetof(shm_pull_desc_t, reply), &si->addr, sizeof(si->addr));
            if (type == SHM_CELL_AMO_REQ && nb >= sizeof(shm_amo_req_t))
                memcpy(slot + offsetof(shm_amo_req_t, reply), &si->addr, sizeof(si->addr));
        }
        shm_ring_publish(c, ep->owner, t);
        progress();
    }
    progress();
    return 0;
}
