/*
 * ferry_info.c - what ferry finds on this host: transports, devices and their attributes,
 * configuration, a worker's address and lanes, and a health check of the host.
 *
 *   ferry_info                 transports compiled in; per transport its devices, and per
 *                              device the interface attributes proto's wireup scores
 *                              (latency, bandwidth, overhead, maximum sizes, capabilities)
 *   ferry_info -t shm,udp      only these transports
 *   ferry_info -c              every configuration variable: value, default, meaning
 *   ferry_info -a              a worker's address and interfaces; under a launcher
 *                              (ferryrun -n 2 ferry_info -a) also the lanes to every rank
 *   ferry_info --lanes PEER    the lanes a worker here would use to the peer whose address
 *                              is PEER (a file holding it, raw or in hex, or the hex itself):
 *                              per operation class the chosen lane and its score, and every
 *                              rejected candidate with the reason
 *   ferry_info --health        is this host fit for ferry: shared memory, cross-memory
 *                              attach, loopback, clock, cpus (exit 1 if a check fails)
 *
 * The transport listing goes below the public API on purpose: it opens each transport's
 * memory domain and interfaces directly (src/tl/tl.h), so it shows what a transport offers
 * whether or not FERRY_TLS would select it, and works even if proto cannot start.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferry.h"
#include "ferry_build.h"
#include "tl/tl.h"
#include "util/clock.h"
#include "util/config.h"
#include "proto/lanes.h"

#define INFO_AM_PING 255

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ferry_info [-t TL[,TL...]] [-c] [-a] [--health] [-h]\n"
            "\n"
            "  (no option)   transports compiled in, their devices and interface attributes\n"
            "  -t LIST       only these transports (names as in FERRY_TLS)\n"
            "  -c            every configuration variable with its value, default and meaning\n"
            "  -a            a worker's address and interfaces; run under a launcher\n"
            "                (ferryrun -n 2 ferry_info -a) it also shows the lanes to each rank\n"
            "  --lanes PEER  the lanes to the worker whose address is PEER (a file holding it,\n"
            "                raw or hex as -a prints it, or the hex itself): per class the\n"
            "                chosen lane and score, every rejected candidate and why\n"
            "  --health      check this host: shared memory, cross-memory attach, loopback,\n"
            "                clock, cpus; exit status 1 if a check fails\n"
            "  -h, --help    this help\n");
}

/* ---- transports ----------------------------------------------------------------------------- */

static void print_size(const char *name, size_t v)
{
    if (v >= ((size_t)1 << 40)) /* a transport's "no limit" (SIZE_MAX, SSIZE_MAX, 1 TiB) */
        printf("    %-16s unlimited\n", name);
    else if (v >= (1u << 20) && v % 1024 == 0)
        printf("    %-16s %zu (%.1f MiB)\n", name, v, (double)v / (1u << 20));
    else if (v >= 4096 && v % 1024 == 0)
        printf("    %-16s %zu (%zu KiB)\n", name, v, v >> 10);
    else
        printf("    %-16s %zu\n", name, v);
}

static void print_caps(uint64_t caps)
{
    static const char *const names[] = {"am_short", "am_bcopy",        "am_zcopy", "put",
                                        "get",      "amo32",           "amo64",    "am_ordered",
                                        "event_fd", "connect_to_iface"};
    printf("    %-16s", "capabilities");
    for (unsigned b = 0; b < 64; b++) {
        if (!(caps & (1ull << b)))
            continue;
        if (b < sizeof(names) / sizeof(names[0]))
            printf(" %s", names[b]);
        else
            printf(" bit%u", b);
    }
    printf("\n");
}

static void dummy_am_cb(void *arg, uint8_t am_id, const void *data, size_t len) {}
static void dummy_err_cb(void *arg, fy_tl_ep_t *ep, ferry_status_t status) {}

static void print_iface(const fy_tl_component_t *tl, fy_tl_md_t *md, const fy_tl_device_t *dev)
{
    fy_tl_iface_params_t params;
    fy_tl_iface_t *iface = NULL;
    fy_tl_iface_attr_t attr;

    printf("  device %s%s\n", dev->name, dev->is_loopback ? " (reaches this host only)" : "");
    memset(&params, 0, sizeof(params));
    params.device = dev->name;
    params.am_cb = dummy_am_cb;
    params.err_cb = dummy_err_cb;
    params.job_key = 0x66657272795f696eull;
    params.worker_uuid = ((uint64_t)getpid() << 20) ^ fy_time_ns();
    ferry_status_t st = tl->ops->iface_open(md, &params, &iface);
    if (st != FERRY_OK) {
        printf("    cannot open an interface: %s\n", ferry_status_string(st));
        return;
    }
    memset(&attr, 0, sizeof(attr));
    tl->ops->iface_query(iface, &attr);
    printf("    %-16s %.0f ns (one-way, small message)\n", "latency", attr.latency_ns);
    printf("    %-16s %.1f MB/s\n", "bandwidth", attr.bandwidth / 1e6);
    printf("    %-16s %.0f ns per send\n", "overhead", attr.overhead_ns);
    print_size("max short", attr.max_short);
    print_size("max bcopy", attr.max_bcopy);
    print_size("max zcopy", attr.max_zcopy);
    print_size("max zcopy hdr", attr.max_zcopy_hdr);
    if (attr.max_zcopy_local != 0)
        print_size("max zcopy local", attr.max_zcopy_local);
    print_size("max put short", attr.max_put_short);
    print_size("max rma", attr.max_rma);
    print_size("max iov", attr.max_iov);
    printf("    %-16s device %zu B + interface %zu B\n", "address", attr.device_addr_len,
           attr.iface_addr_len);
    printf("    %-16s %d\n", "priority", attr.priority);
    print_caps(attr.caps);
    if (tl->ops->iface_event_fd != NULL)
        printf("    %-16s %s\n", "wakeup fd",
               tl->ops->iface_event_fd(iface) >= 0 ? "yes (can sleep)" : "no (poll only)");
    tl->ops->iface_close(iface);
}

#ifdef FERRY_TL_OFI
void fy_ofi_print_providers(FILE *f); /* tl/ofi: the libfabric providers found */
#endif

static int list_transports(const char *only)
{
    fy_config_list_t sel = {0}, only_list = {0};
    const char *tls = getenv("FERRY_TLS");
    int have_sel = tls != NULL && fy_config_parse_list(tls, &sel) == FERRY_OK;
    int rc = 0, shown = 0;

    if (only != NULL && fy_config_parse_list(only, &only_list) != FERRY_OK) {
        fprintf(stderr, "ferry_info: bad transport list -t '%s'\n", only);
        return 2;
    }
    printf("# ferry %s\n# transports compiled in:", ferry_version());
    for (size_t i = 0; i < fy_tl_num_components; i++)
        printf(" %s", fy_tl_components[i]->name);
    printf("\n");
    if (tls != NULL)
        printf("# FERRY_TLS=%s\n", tls);

    for (size_t i = 0; i < fy_tl_num_components; i++) {
        const fy_tl_component_t *tl = fy_tl_components[i];
        fy_tl_md_t *md = NULL;
        fy_tl_device_t devs[64];
        unsigned ndev = 0;
        if (only != NULL && !fy_config_list_selects(&only_list, tl->name))
            continue;
        shown++;
        printf("\ntransport %s: %s%s\n", tl->name, tl->description ? tl->description : "",
               have_sel && !fy_config_list_selects(&sel, tl->name)
                   ? "   [not selected by FERRY_TLS]"
                   : "");
        if (tl->memh_size)
            printf("  memory registration: yes (remote key %zu B packed)\n", tl->rkey_packed_size);
        else
            printf("  memory registration: no (RMA emulated over active messages)\n");
        ferry_status_t st = tl->ops->md_open(tl, &md);
        if (st != FERRY_OK) {
            printf("  cannot open: %s\n", ferry_status_string(st));
            rc = 1;
            continue;
        }
        st = tl->ops->query_devices(md, devs, 64, &ndev);
        if (st != FERRY_OK || ndev == 0)
            printf("  no usable device%s%s\n", st != FERRY_OK ? ": " : "",
                   st != FERRY_OK ? ferry_status_string(st) : "");
        for (unsigned d = 0; d < ndev && d < 64; d++)
            print_iface(tl, md, &devs[d]);
#ifdef FERRY_TL_OFI
        if (strcmp(tl->name, "ofi") == 0)
            fy_ofi_print_providers(stdout);
#endif
        tl->ops->md_close(md);
    }
    if (only != NULL && shown == 0) {
        fprintf(stderr, "ferry_info: no compiled transport matches -t '%s'\n", only);
        rc = 2;
    }
    fy_config_list_release(&sel);
    fy_config_list_release(&only_list);
    return rc;
}

/* ---- configuration, address, lanes ---------------------------------------------------------- */

static int print_config(void)
{
    ferry_context_t *ctx = NULL;
    ferry_status_t st = ferry_context_create(NULL, &ctx);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry_info: cannot create a context: %s (check the FERRY_* variables)\n",
                ferry_status_string(st));
        return 1;
    }
    printf("# ferry %s configuration: FERRY_<name>, current value, default, meaning\n",
           ferry_version());
    ferry_config_print(ctx, stdout);
    ferry_context_destroy(ctx);
    return 0;
}

static ferry_status_t ping_cb(void *arg, const void *header, size_t header_len, const void *data,
                              size_t data_len, ferry_ep_t *reply_ep)
{
    return FERRY_OK;
}

static void print_hex(const uint8_t *b, size_t len)
{
    for (size_t i = 0; i < len; i++)
        printf("%02x", b[i]);
}

/* The worker address decoded (the blob's own parser, as a peer reads it), then the raw bytes
 * in hex, which --lanes PEER accepts. */
static void print_address(ferry_worker_t *w)
{
    size_t len = 0;
    if (ferry_worker_get_address(w, NULL, &len) != FERRY_ERR_TRUNCATED || len == 0)
        return;
    unsigned char *b = malloc(len);
    fy_remote_addr_t *ra = malloc(sizeof(*ra));
    if (b != NULL && ra != NULL && ferry_worker_get_address(w, b, &len) == FERRY_OK) {
        if (fy_address_unpack(b, len, ra) == FERRY_OK) {
            printf("address: %zu bytes, worker %016llx, %u interface(s)\n", len,
                   (unsigned long long)ra->uuid, ra->niface);
            for (unsigned i = 0; i < ra->niface; i++) {
                const fy_remote_iface_t *ri = &ra->ifaces[i];
                const fy_tl_component_t *tl = fy_tl_find(ri->tl);
                char where[160];
                if (tl != NULL && tl->ops->addr_str != NULL) {
                    tl->ops->addr_str(ri->dev_addr, ri->iface_addr, where, sizeof(where));
                } else { /* no printer: the two addresses in hex */
                    size_t o = (size_t)snprintf(where, sizeof(where), "dev ");
                    for (unsigned k = 0; k < ri->dev_addr_len && o + 3 < 80; k++)
                        o +=
                            (size_t)snprintf(where + o, sizeof(where) - o, "%02x", ri->dev_addr[k]);
                    o += (size_t)snprintf(where + o, sizeof(where) - o, " iface ");
                    for (unsigned k = 0; k < ri->iface_addr_len && o + 3 < sizeof(where); k++)
                        o += (size_t)snprintf(where + o, sizeof(where) - o, "%02x",
                                              ri->iface_addr[k]);
                }
                printf("  [%u] %-5s %-10s %s  latency %.0f ns  bandwidth %.0f MB/s  overhead %.0f "
                       "ns  caps 0x%x\n",
                       i, ri->tl, ri->dev, where, ri->latency_ns, ri->bandwidth_mbs,
                       ri->overhead_ns, ri->caps);
            }
        } else {
            printf("address: %zu bytes, which this build cannot parse\n", len);
        }
        printf("address (%zu bytes, hex, for --lanes): ", len);
        print_hex(b, len);
        printf("\n");
    }
    free(ra);
    free(b);
}

/* Connect to every other rank (a ping and a flush make the lanes), then print rank by rank. */
static void world_lanes(ferry_worker_t *w, ferry_world_t *world)
{
    int rank = ferry_world_rank(world), size = ferry_world_size(world);
    static const char none;
    for (int r = 0; r < size; r++) {
        ferry_ep_t *ep;
        if (r == rank || ferry_world_ep(world, r, &ep) != FERRY_OK)
            continue;
        ferry_status_t st = ferry_am_send(ep, INFO_AM_PING, NULL, 0, &none, 0, NULL);
        if (st < 0)
            printf("rank %d: cannot reach rank %d: %s\n", rank, r, ferry_status_string(st));
        ferry_ep_flush(ep, NULL);
    }
    ferry_world_barrier(world);
    for (int r = 0; r < size; r++) {
        if (r == rank) {
            printf("=== rank %d of %d (bootstrap %s)\n", rank, size, ferry_world_backend(world));
            print_address(w);
            ferry_worker_print_info(w, stdout);
            fflush(stdout);
        }
        ferry_world_barrier(world);
    }
}

static int print_worker(void)
{
    ferry_context_t *ctx = NULL;
    ferry_worker_t *w = NULL;
    ferry_world_t *world = NULL;
    ferry_status_t st;
    int rc = 1;

    if ((st = ferry_context_create(NULL, &ctx)) != FERRY_OK ||
        (st = ferry_worker_create(ctx, NULL, &w)) != FERRY_OK ||
        (st = ferry_worker_set_am_handler(w, INFO_AM_PING, ping_cb, NULL)) != FERRY_OK) {
        fprintf(stderr, "ferry_info: cannot create a worker: %s\n", ferry_status_string(st));
        goto out;
    }
    /* Under a launcher: the lanes to every rank; alone, the worker's own interfaces. */
    if (ferry_world_create(w, &world) == FERRY_OK && ferry_world_size(world) > 1) {
        world_lanes(w, world);
    } else {
        print_address(w);
        ferry_worker_print_info(w, stdout);
    }
    rc = 0;
out:
    ferry_world_destroy(world);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    return rc;
}

/* The address in s: hex digits, perhaps after "address (N bytes): " as -a prints it. */
static unsigned char *parse_hex(const char *s, size_t *len)
{
    const char *colon = strrchr(s, ':');
    if (colon != NULL)
        s = colon + 1;
    size_t n = 0, cap = strlen(s) / 2 + 1;
    unsigned char *b = malloc(cap);
    int half = -1;
    for (; b != NULL && *s != '\0'; s++) {
        int v;
        if (*s >= '0' && *s <= '9')
            v = *s - '0';
        else if (*s >= 'a' && *s <= 'f')
            v = *s - 'a' + 10;
        else if (*s >= 'A' && *s <= 'F')
            v = *s - 'A' + 10;
        else if (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
            continue;
        else
            break;
        if (half < 0) {
            half = v;
        } else {
            b[n++] = (unsigned char)(half << 4 | v);
            half = -1;
        }
    }
    if (b == NULL || *s != '\0' || half >= 0 || n == 0) {
        free(b);
        return NULL;
    }
    *len = n;
    return b;
}

/* PEER: a file (raw address, or hex) or hex on the command line. */
static unsigned char *read_peer(const char *peer, size_t *len)
{
    FILE *f = fopen(peer, "rb");
    if (f == NULL)
        return parse_hex(peer, len);
    size_t cap = 1 << 16, n;
    unsigned char *b = malloc(cap + 1);
    n = b != NULL ? fread(b, 1, cap, f) : 0;
    fclose(f);
    if (b == NULL || n == 0) {
        free(b);
        return NULL;
    }
    if (n >= 4 && memcmp(b, "FYWA", 4) == 0) { /* the raw blob ("FYWA" in host order) */
        *len = n;
        return b;
    }
    b[n] = '\0';
    unsigned char *h = parse_hex((const char *)b, len);
    free(b);
    return h;
}

static int print_lanes(const char *peer)
{
    size_t len = 0;
    unsigned char *addr = read_peer(peer, &len);
    if (addr == NULL) {
        fprintf(stderr,
                "ferry_info: --lanes %s: not a worker address (a file holding one, raw or in "
                "hex, or the hex itself)\n",
                peer);
        return 2;
    }
    ferry_context_t *ctx = NULL;
    ferry_worker_t *w = NULL;
    ferry_status_t st;
    int rc = 1;
    if ((st = ferry_context_create(NULL, &ctx)) != FERRY_OK ||
        (st = ferry_worker_create(ctx, NULL, &w)) != FERRY_OK) {
        fprintf(stderr, "ferry_info: cannot create a worker: %s\n", ferry_status_string(st));
        goto out;
    }
    st = fy_lanes_explain(w, addr, len, stdout);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry_info: --lanes: the address (%zu bytes) is malformed: %s\n", len,
                ferry_status_string(st));
        rc = 2;
        goto out;
    }
    rc = 0;
out:
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    free(addr);
    return rc;
}

/* ---- health -------------------------------------------------------------------------------------
 */

static int nfail, nwarn;

static void verdict(int level, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void verdict(int level, const char *what, const char *fmt, ...)
{
    static const char *const tags[] = {"[ ok ]", "[warn]", "[FAIL]"};
    va_list ap;
    printf("%s %-18s ", tags[level], what);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    nwarn += level == 1;
    nfail += level == 2;
}

static void check_shm(void)
{
    char name[64];
    struct statvfs sv;
    size_t len = 1u << 20;
    snprintf(name, sizeof(name), "/ferry_info_%d", (int)getpid());
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        verdict(2, "shared memory", "shm_open failed: %s (is /dev/shm mounted and writable?)",
                strerror(errno));
        return;
    }
    shm_unlink(name);
    if (ftruncate(fd, (off_t)len) != 0) {
        verdict(2, "shared memory", "cannot size a segment in /dev/shm: %s", strerror(errno));
        close(fd);
        return;
    }
    /* Reserve the pages before touching them: a full /dev/shm would make the touch SIGBUS. */
    int err = posix_fallocate(fd, 0, (off_t)len);
    if (err != 0) {
        verdict(2, "shared memory",
                "cannot reserve %zu bytes in /dev/shm: %s (full? docker: --shm-size; or remount "
                "it larger)",
                len, strerror(err));
        close(fd);
        return;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        verdict(2, "shared memory", "cannot map a segment: %s", strerror(errno));
        close(fd);
        return;
    }
    memset(p, 0x5a, len); /* reserved above: touching cannot fault */
    munmap(p, len);
    close(fd);
    if (statvfs("/dev/shm", &sv) != 0) {
        verdict(1, "shared memory", "segments work, but /dev/shm cannot be inspected: %s",
                strerror(errno));
        return;
    }
    double free_mb = (double)sv.f_bavail * (double)sv.f_frsize / 1e6;
    verdict(free_mb < 256 ? 1 : 0, "shared memory",
            "create, map and touch work; /dev/shm has %.0f MB free%s", free_mb,
            free_mb < 256 ? " (little: large transfers may fail; docker: --shm-size)" : "");
}

static void check_cma(void)
{
    char buf[32] = "";
    int scope = -1;
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL)
            scope = atoi(buf);
        fclose(f);
    }
    /* The real question: may one process read a sibling's memory, as two ranks started by
     * the same launcher do?  Two forked children share the parent's layout, so the reader
     * knows where the marker lies in the other. */
    static volatile uint64_t marker = 0x6665727279636d61ull;
    pid_t holder = fork();
    if (holder == 0) {
        pause();
        _exit(0);
    }
    int err = -1;
    pid_t reader = holder > 0 ? fork() : -1;
    if (reader == 0) {
        uint64_t got = 0;
        struct iovec l = {&got, sizeof(got)}, r = {(void *)&marker, sizeof(marker)};
        ssize_t n = process_vm_readv(holder, &l, 1, &r, 1, 0);
        _exit(n == (ssize_t)sizeof(got) && got == marker ? 0 : n < 0 ? (errno & 0x7f) : 126);
    }
    if (reader > 0) {
        int st = 0;
        waitpid(reader, &st, 0);
        err = WIFEXITED(st) ? WEXITSTATUS(st) : 127;
    }
    if (holder > 0) {
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
    }
    char why[96];
    if (scope >= 0)
        snprintf(why, sizeof(why), "Yama ptrace_scope=%d", scope);
    else
        snprintf(why, sizeof(why), "no Yama ptrace_scope on this kernel");
    if (err == 0)
        verdict(0, "cross-memory attach",
                "process_vm_readv between sibling processes works (%s):"
                " shm does large transfers in a single copy",
                why);
    else if (err == -1 || err == 126 || err == 127)
        verdict(1, "cross-memory attach", "could not run the check (%s)", why);
    else
        verdict(1, "cross-memory attach",
                "process_vm_readv between siblings fails: %s (%s%s); shm falls back to copying "
                "through shared memory",
                strerror(err), why,
                scope >= 1 ? "; echo 0 > /proc/sys/kernel/yama/ptrace_scope allows it"
                           : "; a container may need --cap-add SYS_PTRACE");
}

static void check_loopback(void)
{
    struct ifaddrs *ifa = NULL;
    char name[IF_NAMESIZE + 1] = "";
    int up = 0;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i != NULL; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_LOOPBACK) &&
                (i->ifa_flags & IFF_UP)) {
                up = 1;
                snprintf(name, sizeof(name), "%s", i->ifa_name);
                break;
            }
        freeifaddrs(ifa);
    }
    if (!up) {
        verdict(2, "loopback",
                "no loopback interface with an IPv4 address is up (ip link set lo up)");
        return;
    }
    /* A datagram to ourselves through 127.0.0.1, as the udp and tcp transports and the
     * launcher's bootstrap need. */
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char out[] = "ferry", in[8] = "";
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
             getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 &&
             sendto(fd, out, sizeof(out), 0, (struct sockaddr *)&sa, sizeof(sa)) == sizeof(out);
    if (ok) {
        struct timeval tv = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ok = recv(fd, in, sizeof(in), 0) == sizeof(out) && memcmp(in, out, sizeof(out)) == 0;
    }
    if (fd >= 0)
        close(fd);
    verdict(ok ? 0 : 2, "loopback", "%s is up%s", name,
            ok ? "; a UDP datagram to 127.0.0.1 comes back"
               : ", but a datagram to 127.0.0.1 was lost");
}

static void check_clock(void)
{
    char src[64] = "unknown";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f != NULL) {
        if (fgets(src, sizeof(src), f) != NULL)
            src[strcspn(src, "\n")] = '\0';
        fclose(f);
    }
    struct timespec res;
    clock_getres(CLOCK_MONOTONIC, &res);
    const int n = 200000;
    uint64_t t0 = fy_time_ns(), prev = t0, backwards = 0;
    for (int i = 0; i < n; i++) {
        uint64_t t = fy_time_ns();
        backwards += t < prev;
        prev = t;
    }
    double cost = (double)(fy_time_ns() - t0) / n;
    int level = backwards ? 2 : cost > 200 ? 1 : 0;
    verdict(level, "clock", "CLOCK_MONOTONIC: source %s, resolution %ld ns, %.0f ns per read%s%s",
            src, (long)res.tv_nsec, cost,
            cost > 200 ? " (slow: timers and adaptive waits cost more)" : "",
            backwards ? "; it went BACKWARDS" : "");
}

static void check_cpus(void)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    verdict(n < 2 ? 1 : 0, "cpus", "%d usable of %ld online%s", n, online,
            n < 2 ? ": two busy-polling processes share one cpu (FERRY_WAIT=adaptive helps)" : "");
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            verdict(0, "locked memory", "unlimited");
        else
            verdict(rl.rlim_cur < (64u << 20) ? 1 : 0, "locked memory", "%llu KiB%s",
                    (unsigned long long)rl.rlim_cur / 1024,
                    rl.rlim_cur < (64u << 20) ? " (low for RDMA providers through ofi)" : "");
    }
}

static int health(void)
{
    printf("# ferry %s health check of this host\n", ferry_version());
    check_shm();
    check_cma();
    check_loopback();
    check_clock();
    check_cpus();
    printf("# %d failed, %d warnings\n", nfail, nwarn);
    return nfail ? 1 : 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"health", no_argument, NULL, 'H'},      {"help", no_argument, NULL, 'h'},
        {"config", no_argument, NULL, 'c'},      {"address", no_argument, NULL, 'a'},
        {"lanes", required_argument, NULL, 'L'}, {NULL, 0, NULL, 0},
    };
    const char *only = NULL, *lanes_peer = NULL;
    int c, config = 0, address = 0, check = 0, rc = 0;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":t:cah", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            only = optarg;
            break;
        case 'c':
            config = 1;
            break;
        case 'a':
            address = 1;
            break;
        case 'H':
            check = 1;
            break;
        case 'L':
            lanes_peer = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "ferry_info: option -%c needs a value\n(ferry_info -h for help)\n",
                    optopt);
            return 2;
        default:
            if (optopt)
                fprintf(stderr, "ferry_info: unknown option -%c\n", optopt);
            else
                fprintf(stderr, "ferry_info: unknown option '%s'\n", argv[optind - 1]);
            fprintf(stderr, "(ferry_info -h for help)\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ferry_info: unexpected argument '%s'\n(ferry_info -h for help)\n",
                argv[optind]);
        return 2;
    }
    if (check)
        rc |= health();
    if (config)
        rc |= print_config();
    if (address)
        rc |= print_worker();
    if (lanes_peer != NULL)
        rc |= print_lanes(lanes_peer);
    if (!check && !config && !address && lanes_peer == NULL)
        rc = list_transports(only);
    return rc;
}
