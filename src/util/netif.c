/*
 * netif.c - network interfaces: listing (getifaddrs), include/exclude filters with "wide
 * match" of CIDR items, selection with the loopback policy, and subnet reachability.
 *
 * Addresses are handled in one byte-oriented form (fy_netif_addr_t: family + 16 bytes in
 * network order) so that prefix comparison is the same short loop for IPv4 and IPv6 and the
 * form can be copied into wire addresses as is.  The policy (which addresses a transport
 * uses by default, when loopback is acceptable, what "reachable" means) lives here once so
 * that tcp and udp agree; it is described in netif.h.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/hash.h"
#include "util/log.h"
#include "util/netif.h"

/* ---- addresses ------------------------------------------------------------------------- */

static unsigned addr_bits(const fy_netif_addr_t *a)
{
    return a->family == 4 ? 32u : 128u;
}

ferry_status_t fy_netif_addr_from_sockaddr(const struct sockaddr *sa, fy_netif_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    if (sa == NULL)
        return FERRY_ERR_INVALID_ADDR;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        a->family = 4;
        a->prefix_len = 32;
        a->port_be = in->sin_port;
        memcpy(a->addr, &in->sin_addr, 4);
        return FERRY_OK;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        a->family = 6;
        a->prefix_len = 128;
        a->port_be = in6->sin6_port;
        memcpy(a->addr, &in6->sin6_addr, 16);
        return FERRY_OK;
    }
    return FERRY_ERR_INVALID_ADDR;
}

socklen_t fy_netif_addr_to_sockaddr(const fy_netif_addr_t *a, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (a->family == 4) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        in->sin_port = a->port_be;
        memcpy(&in->sin_addr, a->addr, 4);
        return sizeof(*in);
    }
    if (a->family == 6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = a->port_be;
        memcpy(&in6->sin6_addr, a->addr, 16);
        return sizeof(*in6);
    }
    return 0;
}

ferry_status_t fy_netif_addr_parse(const char *s, fy_netif_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    if (s == NULL)
        return FERRY_ERR_INVALID_ADDR;
    if (inet_pton(AF_INET, s, a->addr) == 1) {
        a->family = 4;
        a->prefix_len = 32;
        return FERRY_OK;
    }
    if (inet_pton(AF_INET6, s, a->addr) == 1) {
        a->family = 6;
        a->prefix_len = 128;
        return FERRY_OK;
    }
    return FERRY_ERR_INVALID_ADDR;
}

/* Do the first `bits` bits of two 16-byte addresses agree? */
static int prefix_equal(const uint8_t *x, const uint8_t *y, unsigned bits)
{
    unsigned full = bits / 8, rest = bits % 8;
    if (memcmp(x, y, full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (x[full] & mask) == (y[full] & mask);
}

static void clear_host_bits(fy_netif_addr_t *a)
{
    unsigned bits = a->prefix_len;
    for (unsigned i = 0; i < 16; i++) {
        if (bits >= 8) {
            bits -= 8;
            continue;
        }
        a->addr[i] &= (uint8_t)(0xffu << (8 - bits));
        bits = 0;
    }
}

int fy_netif_addr_in_subnet(const fy_netif_addr_t *addr, const fy_netif_addr_t *net)
{
    if (addr->family != net->family)
        return 0;
    unsigned bits = net->prefix_len;
    if (bits > addr_bits(net))
        bits = addr_bits(net);
    return prefix_equal(addr->addr, net->addr, bits);
}

int fy_netif_addr_same_subnet(const fy_netif_addr_t *a, const fy_netif_addr_t *b)
{
    if (a->family != b->family)
        return 0;
    unsigned bits = a->prefix_len < b->prefix_len ? a->prefix_len : b->prefix_len;
    if (bits > addr_bits(a))
        bits = addr_bits(a);
    return prefix_equal(a->addr, b->addr, bits);
}

int fy_netif_addr_is_loopback(const fy_netif_addr_t *a)
{
    static const uint8_t v6_loop[16] = {[15] = 1};
    static const uint8_t v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
    if (a->family == 4)
        return a->addr[0] == 127;
    if (a->family == 6)
        return memcmp(a->addr, v6_loop, 16) == 0 ||
               (memcmp(a->addr, v4_mapped, 12) == 0 && a->addr[12] == 127);
    return 0;
}

int fy_netif_addr_reachable(const fy_netif_addr_t *local, uint64_t local_host,
                            const fy_netif_addr_t *remote, uint64_t remote_host)
{
    if (local->family != remote->family)
        return 0;
    if (local_host == remote_host)
        return 1; /* one network stack: local addresses are routed internally */
    if (fy_netif_addr_is_loopback(local) || fy_netif_addr_is_loopback(remote))
        return 0;
    return fy_netif_addr_same_subnet(local, remote);
}

void fy_netif_unreachable_why(const fy_netif_addr_t *local, uint64_t local_host,
                              const fy_netif_addr_t *remote, uint64_t remote_host, char *buf,
                              size_t len)
{
    char l[64], r[64];
    fy_netif_addr_str(local, 1, l, sizeof(l));
    fy_netif_addr_str(remote, 1, r, sizeof(r));
    if (local->family != remote->family)
        snprintf(buf, len, "IPv%u here, IPv%u there", local->family, remote->family);
    else if (local_host == remote_host)
        snprintf(buf, len, "reachable");
    else if (fy_netif_addr_is_loopback(local) || fy_netif_addr_is_loopback(remote))
        snprintf(buf, len, "another host or network namespace, and %s is loopback",
                 fy_netif_addr_is_loopback(remote) ? r : l);
    else
        snprintf(buf, len, "another host or network namespace on another subnet (%s vs %s)", l, r);
}

const char *fy_netif_addr_str(const fy_netif_addr_t *a, int with_prefix, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int af = a->family == 4 ? AF_INET : a->family == 6 ? AF_INET6 : -1;
    if (af < 0 || inet_ntop(af, a->addr, ip, sizeof(ip)) == NULL)
        snprintf(ip, sizeof(ip), "?(family %u)", a->family);
    size_t o = 0;
    int n;
    if (a->port_be != 0 && af == AF_INET6)
        n = snprintf(buf, len, "[%s]", ip);
    else
        n = snprintf(buf, len, "%s", ip);
    if (n > 0)
        o = (size_t)n < len ? (size_t)n : len;
    if (with_prefix && o < len) {
        n = snprintf(buf + o, len - o, "/%u", a->prefix_len);
        if (n > 0)
            o += (size_t)n < len - o ? (size_t)n : len - o;
    }
    if (a->port_be != 0 && o < len)
        snprintf(buf + o, len - o, ":%u", (unsigned)ntohs(a->port_be));
    return buf;
}

/* ---- listing ---------------------------------------------------------------------------- */

static unsigned mask_to_prefix(const struct sockaddr *mask)
{
    fy_netif_addr_t m;
    if (mask == NULL || fy_netif_addr_from_sockaddr(mask, &m) != FERRY_OK)
        return 0;
    unsigned bits = 0;
    for (unsigned i = 0; i < 16; i++)
        bits += (unsigned)__builtin_popcount(m.addr[i]);
    return bits;
}

static int is_linklocal6(const fy_netif_addr_t *a)
{
    return a->family == 6 && a->addr[0] == 0xfe && (a->addr[1] & 0xc0) == 0x80;
}

static int cmp_family(const void *x, const void *y)
{
    const fy_netif_t *a = x, *b = y;
    if (a->index != b->index)
        return a->index < b->index ? -1 : 1;
    if (a->addr.family != b->addr.family)
        return a->addr.family < b->addr.family ? -1 : 1;
    return 0;
}

ferry_status_t fy_netif_list(unsigned flags, fy_netif_t **list_p, unsigned *count_p)
{
    struct ifaddrs *ifa_list = NULL;
    *list_p = NULL;
    *count_p = 0;
    if (getifaddrs(&ifa_list) != 0) {
        fy_error("getifaddrs failed: %s", strerror(errno));
        return FERRY_ERR_IO;
    }
    unsigned cap = 0;
    for (struct ifaddrs *i = ifa_list; i != NULL; i = i->ifa_next)
        cap++;
    fy_netif_t *list = cap != 0 ? calloc(cap, sizeof(*list)) : NULL;
    if (cap != 0 && list == NULL) {
        freeifaddrs(ifa_list);
        return FERRY_ERR_NO_MEMORY;
    }
    unsigned n = 0;
    for (struct ifaddrs *i = ifa_list; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_name == NULL)
            continue;
        int fam = i->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6)
            continue;
        if ((fam == AF_INET && (flags & FY_NETIF_LIST_NO_IPV4)) ||
            (fam == AF_INET6 && (flags & FY_NETIF_LIST_NO_IPV6)))
            continue;
        if (!(flags & FY_NETIF_LIST_DOWN) &&
            (!(i->ifa_flags & IFF_UP) || !(i->ifa_flags & IFF_RUNNING)))
            continue;
        if (strlen(i->ifa_name) >= FY_NETIF_NAME_MAX)
            continue;
        fy_netif_t *e = &list[n];
        if (fy_netif_addr_from_sockaddr(i->ifa_addr, &e->addr) != FERRY_OK)
            continue;
        if (!(flags & FY_NETIF_LIST_LINKLOCAL) && is_linklocal6(&e->addr))
            continue;
        e->addr.port_be = 0;
        e->addr.prefix_len = (uint8_t)mask_to_prefix(i->ifa_netmask);
        if (e->addr.prefix_len == 0 || e->addr.prefix_len > addr_bits(&e->addr))
            e->addr.prefix_len = (uint8_t)addr_bits(&e->addr);
        snprintf(e->name, sizeof(e->name), "%s", i->ifa_name);
        e->index = if_nametoindex(i->ifa_name);
        e->flags = i->ifa_flags;
        e->is_loopback = (i->ifa_flags & IFF_LOOPBACK) || fy_netif_addr_is_loopback(&e->addr);
        n++;
    }
    freeifaddrs(ifa_list);
    if (n == 0) {
        free(list);
        return FERRY_OK;
    }
    /* By interface index, IPv4 before IPv6 within an interface.  (qsort is not stable: two
     * addresses of one family on one interface may swap, which no caller depends on.) */
    qsort(list, n, sizeof(*list), cmp_family);
    *list_p = list;
    *count_p = n;
    return FERRY_OK;
}

void fy_netif_list_free(fy_netif_t *list)
{
    free(list);
}

/* ---- filters ---------------------------------------------------------------------------- */

static ferry_status_t parse_item(const char *s, size_t len, fy_netif_filter_item_t *it)
{
    char buf[128];
    memset(it, 0, sizeof(*it));
    if (len == 0 || len >= sizeof(buf))
        goto bad;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *slash = strchr(buf, '/');
    if (slash != NULL)
        *slash = '\0';
    fy_netif_addr_t a;
    if (fy_netif_addr_parse(buf, &a) == FERRY_OK) {
        if (slash != NULL) {
            char *end = NULL;
            errno = 0;
            unsigned long p = strtoul(slash + 1, &end, 10);
            if (errno != 0 || end == slash + 1 || *end != '\0' || p > addr_bits(&a))
                goto bad;
            a.prefix_len = (uint8_t)p;
        }
        clear_host_bits(&a);
        it->is_addr = 1;
        it->net = a;
        return FERRY_OK;
    }
    if (slash != NULL || len >= FY_NETIF_NAME_MAX)
        goto bad;
    for (size_t i = 0; i < len; i++)
        if (isspace((unsigned char)buf[i]) || buf[i] == ',')
            goto bad;
    memcpy(it->name, buf, len + 1); /* len < FY_NETIF_NAME_MAX: checked above */
    return FERRY_OK;
bad:
    fy_error("network interface filter item '%.*s' is neither an interface name (at most %d "
             "characters, globs allowed) nor an address or CIDR such as 10.0.0.0/8 or "
             "fd00::/16",
             (int)len, s, FY_NETIF_NAME_MAX - 1);
    return FERRY_ERR_BAD_CONFIG;
}

ferry_status_t fy_netif_filter_from_items(const char *const *items, unsigned count,
                                          fy_netif_filter_t *f)
{
    f->items = NULL;
    f->count = 0;
    if (count == 0)
        return FERRY_OK;
    f->items = calloc(count, sizeof(*f->items));
    if (f->items == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (unsigned i = 0; i < count; i++) {
        const char *s = items[i];
        while (isspace((unsigned char)*s))
            s++;
        size_t len = strlen(s);
        while (len > 0 && isspace((unsigned char)s[len - 1]))
            len--;
        if (len == 0)
            continue;
        ferry_status_t st = parse_item(s, len, &f->items[f->count]);
        if (st != FERRY_OK) {
            fy_netif_filter_release(f);
            return st;
        }
        f->count++;
    }
    return FERRY_OK;
}

ferry_status_t fy_netif_filter_parse(const char *spec, fy_netif_filter_t *f)
{
    f->items = NULL;
    f->count = 0;
    if (spec == NULL || *spec == '\0')
        return FERRY_OK;
    char *copy = strdup(spec);
    if (copy == NULL)
        return FERRY_ERR_NO_MEMORY;
    unsigned n = 1;
    for (const char *p = copy; *p != '\0'; p++)
        n += *p == ',';
    const char **items = calloc(n, sizeof(*items));
    if (items == NULL) {
        free(copy);
        return FERRY_ERR_NO_MEMORY;
    }
    unsigned k = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
        items[k++] = tok;
    ferry_status_t st = fy_netif_filter_from_items(items, k, f);
    free(items);
    free(copy);
    return st;
}

void fy_netif_filter_release(fy_netif_filter_t *f)
{
    if (f == NULL)
        return;
    free(f->items);
    f->items = NULL;
    f->count = 0;
}

int fy_netif_filter_match(const fy_netif_filter_t *f, const fy_netif_t *nif)
{
    if (f == NULL)
        return 0;
    for (unsigned i = 0; i < f->count; i++) {
        const fy_netif_filter_item_t *it = &f->items[i];
        if (it->is_addr) {
            /* wide match: the address lies inside the item's network, whatever the
             * interface's own (narrower or wider) prefix */
            if (fy_netif_addr_in_subnet(&nif->addr, &it->net))
                return 1;
        } else if (fnmatch(it->name, nif->name, 0) == 0) {
            return 1;
        }
    }
    return 0;
}

ferry_status_t fy_netif_select(const fy_netif_t *all, unsigned n, const fy_netif_filter_t *include,
                               const fy_netif_filter_t *exclude, unsigned flags, fy_netif_t **out_p,
                               unsigned *count_p)
{
    *out_p = NULL;
    *count_p = 0;
    if (n == 0)
        return FERRY_OK;
    fy_netif_t *out = calloc(n, sizeof(*out));
    if (out == NULL)
        return FERRY_ERR_NO_MEMORY;
    int have_include = include != NULL && include->count != 0;
    unsigned k = 0;
    for (int pass = 0; pass < 2 && k == 0; pass++) {
        /* pass 0: explicit includes, or every non-loopback address; pass 1 (only without
         * an include list, and only if pass 0 found nothing): loopback as a last resort */
        if (pass == 1 && (have_include || (flags & FY_NETIF_SELECT_NO_LOOPBACK)))
            break;
        for (unsigned i = 0; i < n; i++) {
            const fy_netif_t *e = &all[i];
            if (have_include) {
                if (!fy_netif_filter_match(include, e))
                    continue;
                if (e->is_loopback && (flags & FY_NETIF_SELECT_NO_LOOPBACK))
                    continue;
            } else if (e->is_loopback != (pass == 1)) {
                continue;
            }
            if (fy_netif_filter_match(exclude, e))
                continue;
            out[k++] = *e;
        }
    }
    if (k == 0) {
        free(out);
        return FERRY_OK;
    }
    *out_p = out;
    *count_p = k;
    return FERRY_OK;
}

/* ---- host identity ---------------------------------------------------------------------- */

static uint64_t hash_bytes(uint64_t h, const void *p, size_t len)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < len; i++)
        h = (h ^ c[i]) * 0x100000001b3ull; /* FNV-1a step */
    return h;
}

uint64_t fy_netif_host_id(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    char buf[256];
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        h = hash_bytes(h, buf, n);
    }
    if (gethostname(buf, sizeof(buf)) == 0) {
        buf[sizeof(buf) - 1] = '\0';
        h = hash_bytes(h, buf, strlen(buf));
    }
    struct stat st;
    if (stat("/proc/self/ns/net", &st) == 0) {
        uint64_t ino = (uint64_t)st.st_ino, dev = (uint64_t)st.st_dev;
        h = hash_bytes(h, &ino, sizeof(ino));
        h = hash_bytes(h, &dev, sizeof(dev));
    }
    h = fy_hash_mix64(h);
    return h != 0 ? h : 1;
}

int fy_netif_is_virtual(const char *name)
{
    char path[128], real[PATH_MAX];
    if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL)
        return -1;
    snprintf(path, sizeof(path), "/sys/class/net/%s", name);
    if (realpath(path, real) == NULL)
        return -1;
    return strncmp(real, "/sys/devices/virtual/", 21) == 0;
}

double fy_netif_speed(const char *name)
{
    char path[128];
    if (name == NULL || strchr(name, '/') != NULL || fy_netif_is_virtual(name) != 0)
        return 0;
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    long mbps = -1;
    if (fscanf(f, "%ld", &mbps) != 1)
        mbps = -1;
    fclose(f);
    if (mbps <= 0)
        return 0;
    return (double)mbps * 1e6 / 8.0;
}
