/*
 * test_netif.c - util/netif: filter parsing, wide CIDR match, the selection and loopback
 * policy (on synthetic interface lists, so the result does not depend on this host), subnet
 * reachability, address conversions, and the real interface listing.
 */
#include <arpa/inet.h>
#include <net/if.h>

#include "fytest.h"
#include "util/netif.h"

static fy_netif_t mk(const char *name, const char *ip, unsigned prefix, int loop)
{
    fy_netif_t e;
    memset(&e, 0, sizeof(e));
    snprintf(e.name, sizeof(e.name), "%s", name);
    FY_ASSERT_OK(fy_netif_addr_parse(ip, &e.addr));
    e.addr.prefix_len = (uint8_t)prefix;
    e.is_loopback = loop;
    e.flags = IFF_UP | IFF_RUNNING | (loop ? IFF_LOOPBACK : 0);
    return e;
}

static void parse_items(void)
{
    fy_netif_filter_t f;
    FY_ASSERT_OK(fy_netif_filter_parse(" eth0 , 10.0.0.0/8,fd00::/16, 192.0.2.7 ,ib*", &f));
    FY_ASSERT_EQ(f.count, 5);
    FY_ASSERT_EQ(f.items[0].is_addr, 0);
    FY_ASSERT_STR_EQ(f.items[0].name, "eth0");
    FY_ASSERT_EQ(f.items[1].is_addr, 1);
    FY_ASSERT_EQ(f.items[1].net.family, 4);
    FY_ASSERT_EQ(f.items[1].net.prefix_len, 8);
    FY_ASSERT_EQ(f.items[2].net.family, 6);
    FY_ASSERT_EQ(f.items[2].net.prefix_len, 16);
    FY_ASSERT_EQ(f.items[3].net.prefix_len, 32); /* a bare address is that one address */
    FY_ASSERT_STR_EQ(f.items[4].name, "ib*");
    fy_netif_filter_release(&f);

    FY_ASSERT_OK(fy_netif_filter_parse(NULL, &f));
    FY_ASSERT_EQ(f.count, 0);
    FY_ASSERT_OK(fy_netif_filter_parse("", &f));
    FY_ASSERT_EQ(f.count, 0);
    /* host bits are cleared: 10.1.2.3/8 means 10.0.0.0/8 */
    FY_ASSERT_OK(fy_netif_filter_parse("10.1.2.3/8", &f));
    FY_ASSERT_EQ(f.items[0].net.addr[1], 0);
    fy_netif_filter_release(&f);
}

static void parse_errors(void)
{
    fy_netif_filter_t f;
    FY_ASSERT_STATUS(fy_netif_filter_parse("10.0.0.0/33", &f), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_STATUS(fy_netif_filter_parse("fd00::/129", &f), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_STATUS(fy_netif_filter_parse("10.0.0.0/", &f), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_STATUS(fy_netif_filter_parse("10.0.0.0/x", &f), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_STATUS(fy_netif_filter_parse("eth0/8", &f), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_STATUS(fy_netif_filter_parse("averyveryverylonginterfacename", &f),
                     FERRY_ERR_BAD_CONFIG);
    FY_ASSERT(f.items == NULL && f.count == 0);
}

static void wide_match(void)
{
    fy_netif_filter_t f;
    FY_ASSERT_OK(fy_netif_filter_parse("10.0.0.0/8", &f));
    fy_netif_t a = mk("eth1", "10.20.3.4", 16, 0); /* interface on 10.20.0.0/16 */
    fy_netif_t b = mk("eth2", "11.20.3.4", 16, 0);
    fy_netif_t c = mk("eth3", "10.255.255.1", 8, 0);
    FY_ASSERT(fy_netif_filter_match(&f, &a));
    FY_ASSERT(!fy_netif_filter_match(&f, &b));
    FY_ASSERT(fy_netif_filter_match(&f, &c));
    fy_netif_filter_release(&f);

    /* a narrower item matches the addresses inside it only */
    FY_ASSERT_OK(fy_netif_filter_parse("10.20.3.0/24", &f));
    FY_ASSERT(fy_netif_filter_match(&f, &a));
    FY_ASSERT(!fy_netif_filter_match(&f, &c));
    fy_netif_filter_release(&f);

    /* IPv6, non-byte-aligned prefix */
    FY_ASSERT_OK(fy_netif_filter_parse("fd00::/12", &f));
    fy_netif_t v6a = mk("eth0", "fd0f::1", 64, 0);
    fy_netif_t v6b = mk("eth0", "fd10::1", 64, 0);
    FY_ASSERT(fy_netif_filter_match(&f, &v6a));
    FY_ASSERT(!fy_netif_filter_match(&f, &v6b));
    FY_ASSERT(!fy_netif_filter_match(&f, &a)); /* other family */
    fy_netif_filter_release(&f);

    /* names and globs */
    FY_ASSERT_OK(fy_netif_filter_parse("eth*", &f));
    FY_ASSERT(fy_netif_filter_match(&f, &a));
    fy_netif_t lo = mk("lo", "127.0.0.1", 8, 1);
    FY_ASSERT(!fy_netif_filter_match(&f, &lo));
    fy_netif_filter_release(&f);
    FY_ASSERT(!fy_netif_filter_match(NULL, &a));
}

static unsigned select_names(const fy_netif_t *all, unsigned n, const char *inc, const char *exc,
                             char *out, size_t outlen)
{
    fy_netif_filter_t fi, fe;
    FY_ASSERT_OK(fy_netif_filter_parse(inc, &fi));
    FY_ASSERT_OK(fy_netif_filter_parse(exc, &fe));
    fy_netif_t *sel;
    unsigned k;
    FY_ASSERT_OK(fy_netif_select(all, n, &fi, &fe, 0, &sel, &k));
    out[0] = '\0';
    for (unsigned i = 0; i < k; i++) {
        char a[FY_NETIF_ADDR_STRLEN];
        size_t o = strlen(out);
        snprintf(out + o, outlen - o, "%s%s=%s", i ? "," : "", sel[i].name,
                 fy_netif_addr_str(&sel[i].addr, 0, a, sizeof(a)));
    }
    fy_netif_list_free(sel);
    fy_netif_filter_release(&fi);
    fy_netif_filter_release(&fe);
    return k;
}

static void select_policy(void)
{
    fy_netif_t all[] = {
        mk("lo", "127.0.0.1", 8, 1),    mk("lo", "::1", 128, 1),
        mk("eth0", "192.0.2.2", 24, 0), mk("eth0", "fd00::2", 64, 0),
        mk("eth1", "10.20.0.5", 16, 0),
    };
    char s[512];
    /* default: everything but loopback */
    FY_ASSERT_EQ(select_names(all, 5, NULL, NULL, s, sizeof(s)), 3);
    FY_ASSERT_STR_EQ(s, "eth0=192.0.2.2,eth0=fd00::2,eth1=10.20.0.5");
    /* exclude by name and by CIDR */
    FY_ASSERT_EQ(select_names(all, 5, NULL, "eth1,fd00::/8", s, sizeof(s)), 1);
    FY_ASSERT_STR_EQ(s, "eth0=192.0.2.2");
    /* include by wide CIDR */
    FY_ASSERT_EQ(select_names(all, 5, "10.0.0.0/8", NULL, s, sizeof(s)), 1);
    FY_ASSERT_STR_EQ(s, "eth1=10.20.0.5");
    /* loopback when explicitly included, by name or by address */
    FY_ASSERT_EQ(select_names(all, 5, "lo", NULL, s, sizeof(s)), 2);
    FY_ASSERT_STR_EQ(s, "lo=127.0.0.1,lo=::1");
    FY_ASSERT_EQ(select_names(all, 5, "127.0.0.0/8,eth1", NULL, s, sizeof(s)), 2);
    FY_ASSERT_STR_EQ(s, "lo=127.0.0.1,eth1=10.20.0.5");
    /* an include that matches nothing selects nothing (no loopback fallback) */
    FY_ASSERT_EQ(select_names(all, 5, "ib0", NULL, s, sizeof(s)), 0);
    /* excluding every non-loopback address falls back to loopback */
    FY_ASSERT_EQ(select_names(all, 5, NULL, "eth*", s, sizeof(s)), 2);
    FY_ASSERT_STR_EQ(s, "lo=127.0.0.1,lo=::1");
    /* only loopback present: loopback */
    FY_ASSERT_EQ(select_names(all, 2, NULL, NULL, s, sizeof(s)), 2);
    /* ... unless the caller forbids it */
    fy_netif_t *sel;
    unsigned k;
    FY_ASSERT_OK(fy_netif_select(all, 2, NULL, NULL, FY_NETIF_SELECT_NO_LOOPBACK, &sel, &k));
    FY_ASSERT_EQ(k, 0);
    FY_ASSERT(sel == NULL);
}

static void reachability(void)
{
    fy_netif_t a = mk("eth0", "192.0.2.2", 24, 0);
    fy_netif_t b = mk("eth0", "192.0.2.77", 24, 0);
    fy_netif_t c = mk("eth0", "192.0.3.1", 24, 0);
    fy_netif_t w = mk("eth0", "192.0.3.1", 16, 0); /* wider prefix: same /16 as a */
    fy_netif_t l = mk("lo", "127.0.0.1", 8, 1);
    fy_netif_t l2 = mk("lo", "127.0.0.1", 8, 1);
    fy_netif_t v6 = mk("eth0", "fd00::2", 64, 0);
    FY_ASSERT(fy_netif_addr_reachable(&a.addr, 1, &b.addr, 2));
    FY_ASSERT(!fy_netif_addr_reachable(&a.addr, 1, &c.addr, 2));
    FY_ASSERT(fy_netif_addr_reachable(&a.addr, 1, &w.addr, 2) ==
              fy_netif_addr_same_subnet(&a.addr, &w.addr));
    FY_ASSERT(fy_netif_addr_same_subnet(&a.addr, &w.addr)); /* compared under the /16 */
    /* loopback: same host only */
    FY_ASSERT(fy_netif_addr_reachable(&l.addr, 7, &l2.addr, 7));
    FY_ASSERT(!fy_netif_addr_reachable(&l.addr, 7, &l2.addr, 8));
    FY_ASSERT(!fy_netif_addr_reachable(&a.addr, 7, &l.addr, 8));
    /* one host: any local address reaches any other of its family */
    FY_ASSERT(fy_netif_addr_reachable(&a.addr, 7, &c.addr, 7));
    FY_ASSERT(!fy_netif_addr_reachable(&a.addr, 7, &v6.addr, 7));
}

static void addresses(void)
{
    fy_netif_addr_t a;
    struct sockaddr_storage ss;
    char buf[FY_NETIF_ADDR_STRLEN];
    FY_ASSERT_OK(fy_netif_addr_parse("192.0.2.9", &a));
    a.port_be = htons(4242);
    FY_ASSERT_EQ(fy_netif_addr_to_sockaddr(&a, &ss), sizeof(struct sockaddr_in));
    FY_ASSERT_EQ(ntohs(((struct sockaddr_in *)&ss)->sin_port), 4242);
    fy_netif_addr_t back;
    FY_ASSERT_OK(fy_netif_addr_from_sockaddr((struct sockaddr *)&ss, &back));
    FY_ASSERT_MEM_EQ(&back, &a, sizeof(a));
    FY_ASSERT_STR_EQ(fy_netif_addr_str(&a, 0, buf, sizeof(buf)), "192.0.2.9:4242");
    a.prefix_len = 24;
    FY_ASSERT_STR_EQ(fy_netif_addr_str(&a, 1, buf, sizeof(buf)), "192.0.2.9/24:4242");

    FY_ASSERT_OK(fy_netif_addr_parse("fd00::2", &a));
    a.port_be = htons(7);
    FY_ASSERT_EQ(fy_netif_addr_to_sockaddr(&a, &ss), sizeof(struct sockaddr_in6));
    FY_ASSERT_STR_EQ(fy_netif_addr_str(&a, 0, buf, sizeof(buf)), "[fd00::2]:7");
    a.port_be = 0;
    FY_ASSERT_STR_EQ(fy_netif_addr_str(&a, 0, buf, sizeof(buf)), "fd00::2");

    FY_ASSERT_STATUS(fy_netif_addr_parse("not-an-ip", &a), FERRY_ERR_INVALID_ADDR);
    FY_ASSERT_OK(fy_netif_addr_parse("::1", &a));
    FY_ASSERT(fy_netif_addr_is_loopback(&a));
    FY_ASSERT_OK(fy_netif_addr_parse("::ffff:127.0.0.2", &a));
    FY_ASSERT(fy_netif_addr_is_loopback(&a));
    FY_ASSERT_OK(fy_netif_addr_parse("128.0.0.1", &a));
    FY_ASSERT(!fy_netif_addr_is_loopback(&a));
    a.family = 9;
    FY_ASSERT_EQ(fy_netif_addr_to_sockaddr(&a, &ss), 0);
}

static void real_listing(void)
{
    fy_netif_t *all;
    unsigned n;
    FY_ASSERT_OK(fy_netif_list(0, &all, &n));
    int have_lo = 0;
    for (unsigned i = 0; i < n; i++) {
        FY_ASSERT(all[i].addr.family == 4 || all[i].addr.family == 6);
        FY_ASSERT(all[i].addr.prefix_len > 0);
        FY_ASSERT(all[i].flags & IFF_UP);
        /* no link-local IPv6 by default */
        FY_ASSERT(!(all[i].addr.family == 6 && all[i].addr.addr[0] == 0xfe &&
                    (all[i].addr.addr[1] & 0xc0) == 0x80));
        have_lo |= all[i].is_loopback;
        if (i > 0 && all[i].index == all[i - 1].index)
            FY_ASSERT(all[i].addr.family >= all[i - 1].addr.family);
    }
    FY_ASSERT_MSG(have_lo, "no loopback address among %u addresses", n);
    /* the default selection is never empty on a host with loopback */
    fy_netif_t *sel;
    unsigned k;
    FY_ASSERT_OK(fy_netif_select(all, n, NULL, NULL, 0, &sel, &k));
    FY_ASSERT_GT(k, 0);
    fy_netif_list_free(sel);
    fy_netif_list_free(all);
    FY_ASSERT_OK(fy_netif_list(FY_NETIF_LIST_NO_IPV4 | FY_NETIF_LIST_NO_IPV6, &all, &n));
    FY_ASSERT_EQ(n, 0);

    uint64_t h = fy_netif_host_id();
    FY_ASSERT(h != 0);
    FY_ASSERT_U64_EQ(h, fy_netif_host_id());
}

FYTEST_MAIN(FYTEST_CASE(parse_items), FYTEST_CASE(parse_errors), FYTEST_CASE(wide_match),
            FYTEST_CASE(select_policy), FYTEST_CASE(reachability), FYTEST_CASE(addresses),
            FYTEST_CASE(real_listing))
