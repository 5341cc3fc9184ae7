/*
 * shm_md.c - the shared-memory transport's component: its configuration (FERRY_SHM_*), its
 * memory domain, memory registration and remote keys, and the ops table.
 *
 * A registered region is entered in one process-wide region table (every shm md of the
 * process shares it), because a peer's atomic request may arrive on any iface of this
 * process and must be checked against the region it names.  When the region lies in a
 * ferry-allocated shared segment (util/shmem.h), the packed key also says how to map that
 * segment, and rkey_unpack maps it: put, get and atomics then become memcpy and __atomic on
 * the mapping.  Otherwise the key carries the owner's pid and the initiator uses
 * cross-memory attach (process_vm_writev/readv), or an atomic request served by the target.
 * Either way the initiator checks bounds and rights against the key before touching anything.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tl/shm/shm.h"
#include "util/log.h"

const fy_config_table_t fy_shm_config_table = {
    "shm",
    "SHM_",
    (const fy_config_field_t[]){
        FY_CONFIG_FIELD("RING_SIZE", "256",
                        "Cells in each interface's receive ring (a power of two, 8..65536): how "
                        "many messages senders may queue before they see back-pressure.",
                        FY_CFG_UINT, shm_opts_t, ring_size),
        FY_CONFIG_FIELD("CELL_SIZE", "128",
                        "Bytes per ring cell (a power of two, 64..4096); a short message of up "
                        "to CELL_SIZE-16 bytes travels inline in its cell.",
                        FY_CFG_SIZE, shm_opts_t, cell_size),
        FY_CONFIG_FIELD("BCOPY_SIZE", "8k",
                        "Bytes of the buffer that goes with each cell (4k..1m, a multiple of "
                        "64): the largest buffered message, and the chunk of a pushed one.",
                        FY_CFG_SIZE, shm_opts_t, bcopy_size),
        FY_CONFIG_FIELD("ZCOPY_THRESH", "8k",
                        "A zero-copy message up to this size (header included) is copied "
                        "through a cell buffer instead, which is faster for small sizes.",
                        FY_CFG_SIZE, shm_opts_t, zcopy_thresh),
        FY_CONFIG_FIELD("CMA", "y",
                        "Use cross-memory attach (process_vm_readv/writev) for single-copy "
                        "zero-copy messages, put and get.  n: copy zero-copy messages through "
                        "the ring, and offer put/get only on ferry-allocated shared memory.",
                        FY_CFG_BOOL, shm_opts_t, cma),
        FY_CONFIG_FIELD("LIVENESS_INTERVAL", "10ms",
                        "How often progress checks whether peer processes are still alive (a "
                        "peer killed mid-transfer fails its endpoints within about this time).",
                        FY_CFG_TIME, shm_opts_t, liveness_ns),
        FY_CONFIG_FIELD("RX_CACHE", "1g",
                        "A receive buffer for pulled zero-copy messages with up to this much "
                        "data is kept for reuse (larger ones are freed after delivery); beyond "
                        "8 MiB it is given back after OUTBOX_IDLE without a pull.",
                        FY_CFG_SIZE, shm_opts_t, rx_keep),
        FY_CONFIG_FIELD("OUTBOX_SIZE", "160m",
                        "Bytes of each interface's outbox (0: none): zero-copy messages above "
                        "BCOPY_SIZE and up to OUTBOX_MAX are copied once by the sender into it "
                        "and read in place by the receiver, with no round trip.  The first 8 MiB "
                        "are reserved when the interface opens (messages up to 2 MiB stay in "
                        "them, up to 16 MiB in the first 40 MiB); the rest only when a larger "
                        "message needs it, and given back after OUTBOX_IDLE without use.",
                        FY_CFG_SIZE, shm_opts_t, obox_size),
        FY_CONFIG_FIELD("OUTBOX_MAX", "64m",
                        "The largest zero-copy message (its data, headers aside) sent through "
                        "the outbox; larger ones, and any that find the outbox full, are "
                        "pulled by the receiver with cross-memory attach.",
                        FY_CFG_SIZE, shm_opts_t, obox_max),
        FY_CONFIG_FIELD("OUTBOX_IDLE", "1s",
                        "The outbox beyond its 8 MiB base (reserved for messages above 2 MiB), "
                        "and a pull's receive buffer above 8 MiB (RX_CACHE), are given back to "
                        "the system once no message has used them this long.",
                        FY_CFG_TIME, shm_opts_t, obox_idle_ns),
        FY_CONFIG_FIELD("OUTBOX_SPLIT", "inf",
                        "An outbox message with this much data or more is copied by both "
                        "processes at once: the sender copies its first part while the "
                        "receiver pulls the rest with cross-memory attach (inf: never).",
                        FY_CFG_SIZE, shm_opts_t, obox_split),
        FY_CONFIG_FIELD("MAPPED_THRESH", "0",
                        "A zero-copy message (above ZCOPY_THRESH) whose data, this much or more, "
                        "lies in memory allocated by ferry (FERRY_MEM_ALLOCATE) is not copied: "
                        "the receiver maps that memory and reads the data in place (inf: never).",
                        FY_CFG_SIZE, shm_opts_t, mapped_thresh),
    },
    12,
};

/* One region table for every shm md of the process (atomic requests name a region). */
static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;
static fy_region_table_t region_table;
static unsigned region_users;

ferry_status_t fy_shm_region_check(uint64_t id, uint64_t key, uint64_t addr, size_t len,
                                   unsigned access, void **local)
{
    return fy_region_check(&region_table, id, key, addr, len, access, local);
}

static int is_pow2(unsigned long v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

static ferry_status_t check_opts(const shm_opts_t *o)
{
    if (!is_pow2(o->ring_size) || o->ring_size < 8 || o->ring_size > 65536) {
        fy_error("FERRY_SHM_RING_SIZE=%lu: use a power of two from 8 to 65536", o->ring_size);
        return FERRY_ERR_BAD_CONFIG;
    }
    if (!is_pow2(o->cell_size) || o->cell_size < 64 || o->cell_size > 4096) {
        fy_error("FERRY_SHM_CELL_SIZE=%zu: use a power of two from 64 to 4096", o->cell_size);
        return FERRY_ERR_BAD_CONFIG;
    }
    if (o->bcopy_size < 4096 || o->bcopy_size > (1u << 20) || o->bcopy_size % 64 != 0) {
        fy_error("FERRY_SHM_BCOPY_SIZE=%zu: use a multiple of 64 from 4k to 1m", o->bcopy_size);
        return FERRY_ERR_BAD_CONFIG;
    }
    if (o->obox_size > ((size_t)1 << 34) || o->obox_size % 4096 != 0) {
        fy_error("FERRY_SHM_OUTBOX_SIZE=%zu: use a multiple of 4k up to 16g (0: no outbox)",
                 o->obox_size);
        return FERRY_ERR_BAD_CONFIG;
    }
    if (o->obox_size != 0 &&
        o->obox_max > o->obox_size - SHM_OBOX_SLOT_HDR - SHM_MAX_ZCOPY_HDR - 64) {
        fy_error("FERRY_SHM_OUTBOX_MAX=%zu does not fit FERRY_SHM_OUTBOX_SIZE=%zu with a "
                 "%u-byte slot header and up to %u bytes of message header",
                 o->obox_max, o->obox_size, SHM_OBOX_SLOT_HDR, SHM_MAX_ZCOPY_HDR);
        return FERRY_ERR_BAD_CONFIG;
    }
    return FERRY_OK;
}

static int parse_boot_id(const char *s, uint8_t out[16])
{
    unsigned n = 0;
    for (; *s != '\0' && *s != '\n' && n < 32; s++) {
        int v;
        if (*s == '-')
            continue;
        if (*s >= '0' && *s <= '9')
            v = *s - '0';
        else if (*s >= 'a' && *s <= 'f')
            v = *s - 'a' + 10;
        else if (*s >= 'A' && *s <= 'F')
            v = *s - 'A' + 10;
        else
            return -1;
        out[n / 2] = (uint8_t)((out[n / 2] << 4) | v);
        n++;
    }
    return n == 32 ? 0 : -1;
}

/* What a probe file holds: its value, and who made it (to sweep the probes of the dead). */
typedef struct shm_probe_file {
    uint64_t probe;
    uint64_t pidns; /* inode of the maker's pid namespace */
    int32_t pid;
    uint32_t pad;
} shm_probe_file_t;

static uint64_t pidns_inode(void)
{
    struct stat sb;
    return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

/* Remove the probes of processes of our pid namespace that died without closing (killed). */
static void sweep_probes(uint64_t pidns)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    if (d == NULL || pidns == 0) {
        if (d != NULL)
            closedir(d);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "ferry-probe-", 12) != 0)
            continue;
        char path[300];
        shm_probe_file_t pf;
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, &pf, sizeof(pf));
        close(fd);
        if (n == (ssize_t)sizeof(pf) && pf.pidns == pidns && pf.pid > 0 && kill(pf.pid, 0) != 0 &&
            errno == ESRCH)
            unlink(path);
    }
    closedir(d);
}

/* Create our /dev/shm probe (see shm_dev_addr_t).  Without one, no peer can prove it shares
 * our /dev/shm and shm reaches only this process's own workers.  A process killed before
 * md_close leaves its probe (32 bytes); the next md_open of this pid namespace sweeps it. */
static void make_probe(shm_md_t *md)
{
    shm_probe_file_t pf = {0, pidns_inode(), (int32_t)getpid(), 0};
    sweep_probes(pf.pidns);
    for (int tries = 0; tries < 4; tries++) {
        pf.probe = fy_random64() | 1;
        snprintf(md->probe_path, sizeof(md->probe_path), "/dev/shm/ferry-probe-%016llx",
                 (unsigned long long)pf.probe);
        int fd = open(md->probe_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd >= 0 && write(fd, &pf, sizeof(pf)) == (ssize_t)sizeof(pf)) {
            close(fd);
            md->dev_addr.probe = pf.probe;
            md->probe_pid = pf.pid;
            return;
        }
        int err = errno;
        if (fd >= 0) {
            close(fd);
            unlink(md->probe_path);
        }
        fy_info("shm: cannot create %s (%s): no peer process can prove it shares /dev/shm "
                "with us, so shm reaches only this process",
                md->probe_path, strerror(err));
        break;
    }
    md->probe_path[0] = '\0';
}

static ferry_status_t read_dev_addr(shm_dev_addr_t *d)
{
    memset(d, 0, sizeof(*d));
    char buf[64] = {0};
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f == NULL || fgets(buf, sizeof(buf), f) == NULL || parse_boot_id(buf, d->boot_id) != 0) {
        fy_warn("cannot read the boot id from /proc/sys/kernel/random/boot_id: the shm "
                "transport is off");
        if (f != NULL)
            fclose(f);
        return FERRY_ERR_NO_DEVICE;
    }
    fclose(f);
    return FERRY_OK;
}

static ferry_status_t shm_md_open(const fy_tl_component_t *tl, fy_tl_md_t **md_p)
{
    shm_md_t *md = calloc(1, sizeof(*md));
    if (md == NULL)
        return FERRY_ERR_NO_MEMORY;
    md->super.component = tl;
    ferry_status_t st = fy_config_read(&fy_shm_config_table, &md->opts);
    if (st != FERRY_OK)
        goto err_free;
    if ((st = check_opts(&md->opts)) != FERRY_OK || (st = read_dev_addr(&md->dev_addr)) != FERRY_OK)
        goto err_config;
    make_probe(md);
    pthread_mutex_lock(&region_lock);
    if (region_users == 0)
        st = fy_region_table_init(&region_table);
    if (st == FERRY_OK)
        region_users++;
    pthread_mutex_unlock(&region_lock);
    if (st != FERRY_OK) {
        if (md->probe_path[0] != '\0')
            unlink(md->probe_path);
        goto err_config;
    }
    /* Let any process of ours read us with process_vm_readv under Yama ptrace_scope=1 (a
     * no-op error where Yama is absent). */
    if (md->opts.cma)
        (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    *md_p = &md->super;
    return FERRY_OK;

err_config:
    fy_config_release(&fy_shm_config_table, &md->opts);
err_free:
    free(md);
    return st;
}

static void shm_md_close(fy_tl_md_t *tl_md)
{
    if (tl_md == NULL)
        return;
    shm_md_t *md = (shm_md_t *)tl_md;
    pthread_mutex_lock(&region_lock);
    if (--region_users == 0)
        fy_region_table_destroy(&region_table);
    pthread_mutex_unlock(&region_lock);
    if (md->probe_path[0] != '\0' && md->probe_pid == (int32_t)getpid())
        unlink(md->probe_path); /* (not a forked child's to remove) */
    fy_config_release(&fy_shm_config_table, &md->opts);
    free(md);
}

static ferry_status_t shm_query_devices(fy_tl_md_t *md, fy_tl_device_t *devs, unsigned max,
                                        unsigned *count)
{
    if (max >= 1) {
        memset(&devs[0], 0, sizeof(devs[0]));
        snprintf(devs[0].name, sizeof(devs[0].name), "memory");
        devs[0].is_loopback = 1;
    }
    *count = 1;
    return FERRY_OK;
}

/* getpid() is a system call (glibc caches nothing): remember it, forgotten in a forked
 * child.  Workers of one context register memory from several threads: relaxed atomics (the
 * value is the same whoever writes it). */
static int32_t cached_pid;
static void forget_pid(void)
{
    __atomic_store_n(&cached_pid, 0, __ATOMIC_RELAXED);
}
static void fy_shm_atfork_init(void)
{
    pthread_atfork(NULL, NULL, forget_pid);
}
static int32_t shm_self_pid(void)
{
    int32_t pid = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
    if (FY_UNLIKELY(pid == 0)) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, fy_shm_atfork_init);
        pid = (int32_t)getpid();
        __atomic_store_n(&cached_pid, pid, __ATOMIC_RELAXED);
    }
    return pid;
}

static ferry_status_t shm_mem_reg(fy_tl_md_t *md, void *addr, size_t len, unsigned access,
                                  void *memh_p)
{
    shm_memh_t *memh = memh_p;
    memset(memh, 0, sizeof(*memh));
    if (access & FERRY_MEM_REMOTE_ATOMIC) {
        ferry_status_t st = fy_region_add(&region_table, addr, len, access, &memh->region);
        if (st != FERRY_OK)
            return st;
    } else {
        /* Put and get never ask the target: only atomics it serves need the region table
         * (id 0 names no region, so an atomic through this key is refused there too).  A
         * registration per rendezvous message stays a few stores. */
        uintptr_t base = (uintptr_t)addr;
        if ((addr == NULL && len != 0) || len > UINTPTR_MAX - base)
            return FERRY_ERR_INVALID_PARAM;
        memh->region = (fy_region_t){.base = base, .length = len, .access = access};
    }
    size_t off = 0;
    if (fy_shmem_find(addr, len, &memh->shm, &off))
        memh->shm_offset = off;
    else
        memh->shm.fd = -1;
    memh->shm.pid = shm_self_pid();
    return FERRY_OK;
}

static void shm_mem_dereg(fy_tl_md_t *md, void *memh_p)
{
    shm_memh_t *memh = memh_p;
    if (memh->region.id != 0)
        fy_region_remove(&region_table, memh->region.id);
}

static ferry_status_t shm_rkey_pack(fy_tl_md_t *md, const void *memh_p, void *buf)
{
    const shm_memh_t *memh = memh_p;
    shm_rkey_packed_t p = {
        .magic = SHM_RKEY_MAGIC,
        .access = memh->region.access,
        .base = memh->region.base,
        .length = memh->region.length,
        .region_id = memh->region.id,
        .region_key = memh->region.key,
        .shm = memh->shm,
        .shm_offset = memh->shm_offset,
    };
    memcpy(buf, &p, sizeof(p));
    return FERRY_OK;
}

static ferry_status_t shm_rkey_unpack(fy_tl_md_t *md, const void *buf, void *rkey_p)
{
    shm_rkey_t *rk = rkey_p;
    memset(rk, 0, sizeof(*rk));
    memcpy(&rk->p, buf, sizeof(rk->p));
    if (rk->p.magic != SHM_RKEY_MAGIC || rk->p.base + rk->p.length < rk->p.base ||
        rk->p.shm.pid <= 0)
        return FERRY_ERR_INVALID_PARAM;
    if (rk->p.shm.pid == shm_self_pid()) {
        rk->mapped = (char *)(uintptr_t)rk->p.base; /* our own memory */
        return FERRY_OK;
    }
    if (rk->p.shm.fd < 0)
        return FERRY_OK;
    if (rk->p.shm_offset > rk->p.shm.size || rk->p.length > rk->p.shm.size - rk->p.shm_offset)
        return FERRY_ERR_INVALID_PARAM;
    void *seg;
    ferry_status_t st = fy_shmem_attach(&rk->p.shm, &seg);
    if (st != FERRY_OK) {
        fy_debug("cannot map the shared segment of process %d (%s): using cross-memory attach",
                 (int)rk->p.shm.pid, ferry_status_string(st));
        return FERRY_OK;
    }
    rk->attach = seg;
    rk->mapped = (char *)seg + rk->p.shm_offset;
    return FERRY_OK;
}

static void shm_rkey_release(fy_tl_md_t *md, void *rkey_p)
{
    shm_rkey_t *rk = rkey_p;
    fy_shmem_detach_park(rk->attach); /* the next key to it (a rendezvous each) maps nothing */
    rk->attach = NULL;
    rk->mapped = NULL;
}

static const fy_tl_ops_t shm_ops = {
    .md_open = shm_md_open,
    .md_close = shm_md_close,
    .query_devices = shm_query_devices,
    .mem_reg = shm_mem_reg,
    .mem_dereg = shm_mem_dereg,
    .rkey_pack = shm_rkey_pack,
    .rkey_unpack = shm_rkey_unpack,
    .rkey_release = shm_rkey_release,
    .iface_open = fy_shm_iface_open,
    .iface_close = fy_shm_iface_close,
    .iface_query = fy_shm_iface_query,
    .iface_get_address = fy_shm_iface_get_address,
    .iface_is_reachable = fy_shm_iface_is_reachable,
    .iface_unreachable_why = fy_shm_iface_unreachable_why,
    .iface_progress = fy_shm_iface_progress,
    .iface_event_fd = fy_shm_iface_event_fd,
    .iface_event_arm = fy_shm_iface_event_arm,
    .iface_print = fy_shm_iface_print,
    .ep_create = fy_shm_ep_create,
    .ep_destroy = fy_shm_ep_destroy,
    .ep_flush = fy_shm_ep_flush,
    .ep_get_stats = fy_shm_ep_get_stats,
    .am_short = fy_shm_am_short,
    .am_bcopy = fy_shm_am_bcopy,
    .am_zcopy = fy_shm_am_zcopy,
    .put_short = fy_shm_put_short,
    .get_short = fy_shm_get_short,
    .put_zcopy = fy_shm_put_zcopy,
    .get_zcopy = fy_shm_get_zcopy,
    .atomic = fy_shm_atomic,
};

const fy_tl_component_t fy_tl_shm_component = {
    .name = "shm",
    .description = "processes on one host: lock-free rings in shared memory, single-copy "
                   "large transfers with cross-memory attach",
    .ops = &shm_ops,
    .config = &fy_shm_config_table,
    .memh_size = sizeof(shm_memh_t),
    .rkey_packed_size = sizeof(shm_rkey_packed_t),
    .rkey_size = sizeof(shm_rkey_t),
};
