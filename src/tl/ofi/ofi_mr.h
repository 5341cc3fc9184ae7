/*
 * ofi_mr.h - memory registration for the ofi transport: what ferry does for each of the
 * provider's MR mode bits, registration wrappers over fi_mr_regattr, the packed remote key and
 * the address an fi_read / fi_write / fi_atomic takes.
 *
 * THE MODE.  fy_ofi_mr_mode_init() reads fi_info->domain_attr (mr_mode, mr_key_size,
 * mr_iov_limit) once per domain and decides, bit by bit:
 *
 *   FI_MR_VIRT_ADDR  present: a remote address is the target's virtual address.  Absent: it is
 *                    the offset from the start of the registration; the packed rkey carries the
 *                    base, and fy_ofi_rkey_addr() subtracts it.
 *   FI_MR_PROV_KEY   present: the key is the provider's, read with fi_mr_key() after
 *                    registering.  Absent: ferry requests a key, unique in the domain (a counter
 *                    within mr_key_size bytes; -FI_ENOKEY makes it try the next one).
 *   FI_MR_ALLOCATED  only mapped memory may be registered: fy_ofi_mr_reg() checks the range is
 *                    mapped (mincore) and refuses it with a clear error otherwise; ferry never
 *                    extends a registration past the pages of the buffer.
 *   FI_MR_ENDPOINT   a registration is bound to one endpoint (fi_mr_bind, then fi_mr_enable):
 *                    fy_ofi_mr_reg() takes the endpoint; NULL is then refused.
 *   FI_MR_LOCAL      local buffers given to the provider need a descriptor: the transport
 *                    registers them (FI_SEND / FI_RECV / FI_READ / FI_WRITE access) and passes
 *                    fy_ofi_mr_desc(); without the bit fy_ofi_mr_desc() is NULL.
 *   FI_MR_BASIC / FI_MR_SCALABLE (the old enum values 1 and 2): read as PROV_KEY | ALLOCATED |
 *                    VIRT_ADDR and as no bit.
 *   FI_MR_HMEM       accepted and ignored: ferry registers host memory only.
 *   FI_MR_RAW, FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT, FI_MR_COLLECTIVE and any unknown bit, or an
 *                    mr_key_size above 8: refused (FERRY_ERR_UNSUPPORTED) with a message naming
 *                    the mode.  fy_ofi_mr_mode_hints() gives the bits to put in the hints of
 *                    fi_getinfo so such providers are not offered in the first place.
 *
 * THE PACKED RKEY (fy_ofi_rkey_pack / fy_ofi_rkey_unpack), FY_OFI_RKEY_PACKED_SIZE bytes, every
 * multi-byte field little-endian whatever the host:
 *
 *    0        1        2        3        4                 8
 *   +--------+--------+--------+--------+--------+--------+
 *   | magic  |version | flags  |keysize | access (u32)    |
 *   +--------+--------+--------+--------+-----------------+
 *   | key (u64)                                           |  8
 *   +-----------------------------------------------------+
 *   | base (u64): target virtual address of the region    | 16
 *   +-----------------------------------------------------+
 *   | len (u64): bytes in the region                      | 24
 *   +-----------------------------------------------------+ 32
 *
 *   magic 0xF7; version 1; flags FY_OFI_RKEY_F_*; keysize 1..8 (the target's mr_key_size: the
 *   key has no bit above it); access FERRY_MEM_REMOTE_* bits the region was registered with.
 *   Unpack checks each field (magic, version, known flags only, key within keysize, access
 *   within the known bits, len > 0, base + len without overflow, the addressing flag equal to
 *   the local domain's) and returns FERRY_ERR_INVALID_PARAM for anything else.
 *
 * THREADS.  A fy_ofi_mr_dom_t may be used from several threads: the key counter is atomic and
 * the rest is read-only after init.  Registering and deregistering follow the domain's libfabric
 * threading model (the transport serialises when the domain asks it to).
 */
#ifndef FY_TL_OFI_MR_H
#define FY_TL_OFI_MR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tl/ofi/ofi_fabric.h"

#include "ferry.h"

/* What ferry does, decided once per domain from the provider's mode bits. */
typedef struct fy_ofi_mr_mode {
    uint64_t mr_mode; /* the provider's bits, FI_MR_BASIC/SCALABLE expanded */
    size_t key_size;  /* mr_key_size: 1..8 bytes */
    size_t iov_limit; /* mr_iov_limit (ferry registers one iov per region) */
    int virt_addr;    /* 1: remote addresses are virtual; 0: offsets from the base */
    int prov_key;     /* 1: fi_mr_key after registration; 0: ferry requests keys */
    int allocated;    /* 1: the range must be mapped when registered */
    int endpoint;     /* 1: bind each registration to an endpoint and enable it */
    int local;        /* 1: local buffers need fi_mr_desc */
} fy_ofi_mr_mode_t;

/* Per-domain registration state. */
typedef struct fy_ofi_mr_dom {
    struct fid_domain *domain;
    fy_ofi_mr_mode_t mode;
    _Atomic uint64_t next_key; /* the next requested key (no FI_MR_PROV_KEY) */
    struct fid_ep *ep;         /* FI_MR_ENDPOINT: the ep the rcache callbacks bind to */
    int ep_shared;             /* ep is a scalable endpoint: every registration binds to it,
                                * whichever of its contexts asks (ofi_sep.c) */
    _Atomic uint64_t nregs;    /* registrations made (fi_mr_regattr that succeeded), ever */
} fy_ofi_mr_dom_t;

/* One registration.  Fits in the transport's memh (caller storage, no allocation). */
typedef struct fy_ofi_mr {
    struct fid_mr *mr; /* NULL: not registered */
    void *desc;        /* fi_mr_desc when FI_MR_LOCAL, else NULL */
    uint64_t key;      /* the provider's or the requested key */
    uint64_t base;     /* the registered address */
    uint64_t len;      /* the registered length */
    unsigned access;   /* FERRY_MEM_REMOTE_* bits (0 for a local-only buffer) */
    unsigned flags;    /* FY_OFI_RKEY_F_* of the domain when registered */
    void *cached;      /* the registration cache's region this is a copy of, or NULL */
} fy_ofi_mr_t;

/* An unpacked remote key (what put/get/atomic take as `const void *rkey`). */
typedef struct fy_ofi_mr_rkey {
    uint64_t key;
    uint64_t base;
    uint64_t len;
    uint32_t access; /* FERRY_MEM_REMOTE_* */
    uint32_t flags;  /* FY_OFI_RKEY_F_* */
} fy_ofi_mr_rkey_t;

enum {
    FY_OFI_RKEY_F_VIRT_ADDR = 1u << 0, /* addresses are virtual; else offsets from base */
};

#define FY_OFI_RKEY_MAGIC       0xF7
#define FY_OFI_RKEY_VERSION     1
#define FY_OFI_RKEY_PACKED_SIZE 32

/* The mode bits ferry can serve: put them in hints->domain_attr->mr_mode. */
uint64_t fy_ofi_mr_mode_hints(void);

/* Decide what to do for info's domain_attr.  FERRY_ERR_UNSUPPORTED (with an error line naming
 * the provider and the mode bits) for a mode ferry cannot serve; errbuf, when not NULL, gets the
 * same text (for ferry_info). */
ferry_status_t fy_ofi_mr_mode_init(const struct fi_info *info, fy_ofi_mr_mode_t *mode, char *errbuf,
                                   size_t errlen);

/* Names of the bits in mr_mode ("FI_MR_VIRT_ADDR|FI_MR_PROV_KEY", "none"), for logs and
 * ferry_info.  Returns buf. */
const char *fy_ofi_mr_mode_str(uint64_t mr_mode, char *buf, size_t len);

/* Start per-domain state on an open domain (the mode from fy_ofi_mr_mode_init). */
void fy_ofi_mr_dom_init(fy_ofi_mr_dom_t *dom, struct fid_domain *domain,
                        const fy_ofi_mr_mode_t *mode);

/* The libfabric access flags for FERRY_MEM_REMOTE_* bits (plus, when local is set and the
 * domain has FI_MR_LOCAL, FI_SEND | FI_RECV | FI_READ | FI_WRITE for local use). */
uint64_t fy_ofi_mr_access(const fy_ofi_mr_dom_t *dom, unsigned ferry_access, int local);

/* Register [addr, addr + len) with ferry_access (FERRY_MEM_REMOTE_* bits) and, when local is
 * set, for use as a local buffer.  ep: the endpoint to bind to under FI_MR_ENDPOINT (NULL takes
 * dom->ep, as does any ep when dom->ep_shared; none at all is FERRY_ERR_INVALID_PARAM), ignored
 * otherwise.  On failure mr is left
 * unregistered (mr->mr == NULL) and the reason is logged with fi_strerror. */
ferry_status_t fy_ofi_mr_reg(fy_ofi_mr_dom_t *dom, struct fid_ep *ep, void *addr, size_t len,
                             unsigned ferry_access, int local, fy_ofi_mr_t *mr);
/* Close the registration; accepts an unregistered mr. */
void fy_ofi_mr_dereg(fy_ofi_mr_t *mr);
/* The descriptor for a local buffer inside mr (FI_MR_LOCAL), else NULL. */
static inline void *fy_ofi_mr_desc(const fy_ofi_mr_t *mr)
{
    return mr != NULL ? mr->desc : NULL;
}

/* Pack mr's remote key into buf (FY_OFI_RKEY_PACKED_SIZE bytes). */
void fy_ofi_rkey_pack(const fy_ofi_mr_dom_t *dom, const fy_ofi_mr_t *mr, void *buf);
/* Unpack and validate len bytes from a peer (see THE PACKED RKEY).  mode: the local domain's,
 * whose addressing must match; NULL skips that check (tools, fuzzing). */
ferry_status_t fy_ofi_rkey_unpack(const fy_ofi_mr_mode_t *mode, const void *buf, size_t len,
                                  fy_ofi_mr_rkey_t *rkey);

/* The `addr` argument of fi_read / fi_write / fi_atomic for [va, va + len) at the target, va in
 * the target's address space.  FERRY_ERR_ACCESS_DENIED when the range is not inside the key's
 * region or the region lacks need (FERRY_MEM_REMOTE_* bits; 0 checks only the range). */
ferry_status_t fy_ofi_rkey_addr(const fy_ofi_mr_rkey_t *rkey, uint64_t va, size_t len,
                                unsigned need, uint64_t *addr_p);

/* rcache callbacks (util/rcache.h) registering through a domain: arg is the fy_ofi_mr_dom_t,
 * the memh an fy_ofi_mr_t, access FERRY_MEM_REMOTE_* bits (registered for local use too); under
 * FI_MR_ENDPOINT they bind to dom->ep. */
ferry_status_t fy_ofi_mr_rcache_reg(void *arg, void *addr, size_t len, unsigned access, void *memh);
void fy_ofi_mr_rcache_dereg(void *arg, void *memh);

#endif
