/*
 * tcp_md.c - the tcp transport's component: its FERRY_TCP_* configuration, the memory
 * domain (interface selection, memory registration and remote keys), and the ops table.
 *
 * Devices are network interfaces chosen once per context by util/netif (include / exclude
 * lists with wide CIDR match; loopback only when named or when nothing else is left), one
 * address per interface (IPv4 first unless FERRY_TCP_AF says otherwise).  Remote access is
 * checked at the target against the md's region table: the md is the software memory domain
 * tcp shares with udp (tl/swmd.h), whose key is (region id, 64 random bits).
 */
#include <stdlib.h>
#include <string.h>

#include "tl/tcp/tcp.h"
#include "util/log.h"
#include "util/status.h"

/* ---- configuration ---------------------------------------------------------------------- */

/* ipv4/ipv6 as documented; inet/inet6 (FERRY_UDP_AF's old spelling) and any accepted too */
static const char *const af_choices[] = {"auto|any", "ipv4|inet", "ipv6|inet6", NULL};

static const fy_config_field_t tcp_config_fields[] = {
    FY_CONFIG_FIELD("IF_INCLUDE", "",
                    "Interfaces to use: comma-separated names (globs allowed), addresses or "
                    "CIDR subnets; 10.0.0.0/8 also matches an interface on 10.20.0.0/16. "
                    "Empty: every interface but loopback, or loopback if nothing else is up.",
                    FY_CFG_STRING, fy_tcp_config_t, if_include),
    FY_CONFIG_FIELD("IF_EXCLUDE", "", "Interfaces not to use, in the syntax of IF_INCLUDE.",
                    FY_CFG_STRING, fy_tcp_config_t, if_exclude),
    FY_CONFIG_ENUM_FIELD(
        "AF", "auto",
        "Address family of an interface that has both: auto (IPv4 first), "
        "ipv4 or ipv6 (the other family is then not used at all; also spelled any, inet, "
        "inet6).",
        fy_tcp_config_t, af, af_choices),
    FY_CONFIG_FIELD("LINKS", "0",
                    "TCP connections per peer (1-8); 0 = auto: 1 to a peer on this host (one "
                    "unpaced stream is fastest), 3 to another host (measured on the namespace "
                    "testbed, bench/RESULTS.md).  Frames of STRIPE_MIN bytes "
                    "or more are striped over all of them; everything else goes on the first.",
                    FY_CFG_UINT, fy_tcp_config_t, links),
    FY_CONFIG_FIELD("STRIPE_MIN", "128k",
                    "Smallest zero-copy payload (AM, put, get answer) striped over LINKS.",
                    FY_CFG_SIZE, fy_tcp_config_t, stripe_min),
    FY_CONFIG_FIELD("SNDBUF", "0", "Socket send buffer size; 0 keeps the kernel's autotuning.",
                    FY_CFG_SIZE, fy_tcp_config_t, sndbuf),
    FY_CONFIG_FIELD("RCVBUF", "0", "Socket receive buffer size; 0 keeps the kernel's autotuning.",
                    FY_CFG_SIZE, fy_tcp_config_t, rcvbuf),
    FY_CONFIG_FIELD("RX_BUF", "64k",
                    "Receive buffer per connection: smaller messages are read in batches and "
                    "handed over in place, larger ones straight into a buffer of their own.",
                    FY_CFG_SIZE, fy_tcp_config_t, rx_buf),
    FY_CONFIG_FIELD("TX_QUEUE", "1m",
                    "Bytes of copied sends a peer may have queued behind a full socket before "
                    "sends return NO_RESOURCE.",
                    FY_CFG_SIZE, fy_tcp_config_t, tx_queue),
    FY_CONFIG_FIELD("TX_QUEUE_OPS", "512",
                    "Sends a peer may have queued behind a full socket before NO_RESOURCE.",
                    FY_CFG_UINT, fy_tcp_config_t, tx_queue_ops),
    FY_CONFIG_FIELD("MAX_MSG", "1g",
                    "Largest active message (proto's header, user header and data), up to 3g; "
                    "a peer announcing a larger one is disconnected.",
                    FY_CFG_SIZE, fy_tcp_config_t, max_msg),
    FY_CONFIG_FIELD("KEEPIDLE", "10s",
                    "Idle time before keepalive probes find out whether the peer is still "
                    "there; inf turns keepalive off.",
                    FY_CFG_TIME, fy_tcp_config_t, keepidle),
    FY_CONFIG_FIELD("KEEPINTVL", "2s", "Time between keepalive probes.", FY_CFG_TIME,
                    fy_tcp_config_t, keepintvl),
    FY_CONFIG_FIELD("KEEPCNT", "5", "Unanswered keepalive probes before the peer is dead.",
                    FY_CFG_UINT, fy_tcp_config_t, keepcnt),
    FY_CONFIG_FIELD("USER_TIMEOUT", "0",
                    "TCP_USER_TIMEOUT: a peer that acknowledges nothing for this long is dead, "
                    "even with data outstanding.  Current kernels also count a full receive "
                    "window, so a peer that stops reading that long is cut off: 0 (off) "
                    "unless every worker progresses often.",
                    FY_CFG_TIME, fy_tcp_config_t, user_timeout),
    FY_CONFIG_FIELD("CONN_TIMEOUT", "10s",
                    "Time allowed to set up a connection, and for a connecting stranger to "
                    "complete its handshake.",
                    FY_CFG_TIME, fy_tcp_config_t, conn_timeout),
    FY_CONFIG_FIELD("NODELAY", "y", "Set TCP_NODELAY (no Nagle delay on small messages).",
                    FY_CFG_BOOL, fy_tcp_config_t, nodelay),
    FY_CONFIG_FIELD("CONGESTION", "auto",
                    "TCP congestion control: auto (reno within this host, where pacing only "
                    "slows a memory copy; the system's default to other hosts), system (never "
                    "set), or an algorithm the kernel offers (reno, cubic, bbr, ...) for all.",
                    FY_CFG_STRING, fy_tcp_config_t, congestion),
    FY_CONFIG_FIELD("DIRECT_POLL", "y",
                    "When one peer brings all recent traffic, read its sockets directly and "
                    "call epoll_wait only every 8th progress (one system call less per message).",
                    FY_CFG_BOOL, fy_tcp_config_t, direct_poll),
    FY_CONFIG_FIELD("LATENCY", "0",
                    "One-way latency in ns reported to lane selection; 0 = built-in estimate.",
                    FY_CFG_DOUBLE, fy_tcp_config_t, latency_ns),
    FY_CONFIG_FIELD("BANDWIDTH", "0",
                    "Bandwidth in bytes/s reported to lane selection; 0 = built-in estimate.",
                    FY_CFG_DOUBLE, fy_tcp_config_t, bandwidth),
};

const fy_config_table_t fy_tcp_config_table = {
    .component = "tcp",
    .prefix = "TCP_",
    .fields = tcp_config_fields,
    .nfields = FY_ARRAY_SIZE(tcp_config_fields),
};

static ferry_status_t check_config(const fy_tcp_config_t *c)
{
    const char *var = NULL, *want = NULL;
    if (c->links > FY_TCP_MAX_LINKS)
        var = "FERRY_TCP_LINKS", want = "0 (auto) to 8";
    else if (c->rx_buf < 4096 || c->rx_buf > (64u << 20))
        var = "FERRY_TCP_RX_BUF", want = "4k to 64m";
    else if (c->max_msg < 4096 || c->max_msg > (3ull << 30))
        var = "FERRY_TCP_MAX_MSG", want = "4k to 3g";
    else if (c->stripe_min < 4096)
        var = "FERRY_TCP_STRIPE_MIN", want = "at least 4k";
    else if (c->tx_queue_ops < 1)
        var = "FERRY_TCP_TX_QUEUE_OPS", want = "at least 1";
    if (var == NULL)
        return FERRY_OK;
    fy_error("%s is out of range: use %s", var, want);
    return FERRY_ERR_BAD_CONFIG;
}

/* ---- memory domain ---------------------------------------------------------------------- */

static ferry_status_t select_devices(fy_tcp_md_t *md)
{
    fy_netif_filter_t inc, exc;
    fy_netif_t *all = NULL, *sel = NULL;
    unsigned nall = 0, nsel = 0;
    ferry_status_t st = fy_netif_filter_parse(md->cfg.if_include, &inc);
    if (st != FERRY_OK) {
        fy_error("FERRY_TCP_IF_INCLUDE=%s is not accepted", md->cfg.if_include);
        return st;
    }
    st = fy_netif_filter_parse(md->cfg.if_exclude, &exc);
    if (st != FERRY_OK) {
        fy_error("FERRY_TCP_IF_EXCLUDE=%s is not accepted", md->cfg.if_exclude);
        goto out_inc;
    }
    unsigned flags = md->cfg.af == 1   ? FY_NETIF_LIST_NO_IPV6
                     : md->cfg.af == 2 ? FY_NETIF_LIST_NO_IPV4
                                       : 0;
    st = fy_netif_list(flags, &all, &nall);
    if (st != FERRY_OK)
        goto out_exc;
    st = fy_netif_select(all, nall, &inc, &exc, 0, &sel, &nsel);
    if (st != FERRY_OK)
        goto out_all;
    md->devs = calloc(nsel ? nsel : 1, sizeof(*md->devs));
    if (md->devs == NULL) {
        st = FERRY_ERR_NO_MEMORY;
        goto out_sel;
    }
    /* one device per interface name: its first selected address (IPv4 sorts first) */
    for (unsigned i = 0; i < nsel; i++) {
        int dup = 0;
        for (unsigned j = 0; j < md->ndevs; j++)
            dup |= strcmp(md->devs[j].name, sel[i].name) == 0;
        if (!dup)
            md->devs[md->ndevs++] = sel[i];
    }
    for (unsigned i = 0; i < md->ndevs; i++) {
        char a[FY_NETIF_ADDR_STRLEN];
        fy_debug("tcp: device %s address %s%s", md->devs[i].name,
                 fy_netif_addr_str(&md->devs[i].addr, 1, a, sizeof(a)),
                 md->devs[i].is_loopback ? " (loopback)" : "");
    }
    if (md->ndevs == 0)
        fy_info("tcp: no interface selected (FERRY_TCP_IF_INCLUDE='%s', IF_EXCLUDE='%s')",
                md->cfg.if_include ? md->cfg.if_include : "",
                md->cfg.if_exclude ? md->cfg.if_exclude : "");
out_sel:
    fy_netif_list_free(sel);
out_all:
    fy_netif_list_free(all);
out_exc:
    fy_netif_filter_release(&exc);
out_inc:
    fy_netif_filter_release(&inc);
    return st;
}

static ferry_status_t tcp_md_open(const fy_tl_component_t *tl, fy_tl_md_t **md_p)
{
    fy_tcp_md_t *md = calloc(1, sizeof(*md));
    if (md == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_status_t st = fy_config_read(&fy_tcp_config_table, &md->cfg);
    if (st != FERRY_OK)
        goto err_free;
    st = check_config(&md->cfg);
    if (st != FERRY_OK)
        goto err_cfg;
    st = select_devices(md);
    if (st != FERRY_OK)
        goto err_cfg;
    st = fy_swmd_init(&md->super, tl);
    if (st != FERRY_OK)
        goto err_devs;
    md->host_id = fy_netif_host_id();
    *md_p = &md->super.super;
    return FERRY_OK;

err_devs:
    free(md->devs);
err_cfg:
    fy_config_release(&fy_tcp_config_table, &md->cfg);
err_free:
    free(md);
    return st;
}

static void tcp_md_close(fy_tl_md_t *super)
{
    fy_tcp_md_t *md = (fy_tcp_md_t *)super;
    if (md == NULL)
        return;
    fy_swmd_cleanup(&md->super);
    free(md->devs);
    fy_config_release(&fy_tcp_config_table, &md->cfg);
    free(md);
}

static ferry_status_t tcp_query_devices(fy_tl_md_t *super, fy_tl_device_t *devs, unsigned max,
                                        unsigned *count)
{
    fy_tcp_md_t *md = (fy_tcp_md_t *)super;
    unsigned n = 0;
    for (unsigned i = 0; i < md->ndevs && n < max; i++, n++) {
        memset(&devs[n], 0, sizeof(devs[n]));
        snprintf(devs[n].name, sizeof(devs[n].name), "%s", md->devs[i].name);
        devs[n].is_loopback = md->devs[i].is_loopback;
    }
    *count = n;
    return FERRY_OK;
}

static const fy_tl_ops_t tcp_ops = {
    .md_open = tcp_md_open,
    .md_close = tcp_md_close,
    .query_devices = tcp_query_devices,
    .mem_reg = fy_swmd_mem_reg,
    .mem_dereg = fy_swmd_mem_dereg,
    .rkey_pack = fy_swmd_rkey_pack,
    .rkey_unpack = fy_swmd_rkey_unpack,
    .rkey_release = fy_swmd_rkey_release,
    .iface_open = fy_tcp_iface_open,
    .iface_close = fy_tcp_iface_close,
    .iface_query = fy_tcp_iface_query,
    .iface_get_address = fy_tcp_iface_get_address,
    .iface_is_reachable = fy_tcp_iface_is_reachable,
    .iface_unreachable_why = fy_tcp_iface_unreachable_why,
    .addr_str = fy_tcp_addr_str,
    .iface_progress = fy_tcp_iface_progress,
    .iface_event_fd = fy_tcp_iface_event_fd,
    .iface_event_arm = fy_tcp_iface_event_arm,
    .iface_print = fy_tcp_iface_print,
    .ep_create = fy_tcp_ep_create,
    .ep_destroy = fy_tcp_ep_destroy,
    .ep_flush = fy_tcp_ep_flush,
    .ep_get_stats = fy_tcp_ep_get_stats,
    .ep_ready = fy_tcp_ep_ready,
    .am_short = fy_tcp_am_short,
    .am_bcopy = fy_tcp_am_bcopy,
    .am_zcopy = fy_tcp_am_zcopy,
    .put_short = NULL,
    .put_zcopy = fy_tcp_put_zcopy,
    .get_zcopy = fy_tcp_get_zcopy,
    .atomic = NULL, /* emulated by proto */
};

const fy_tl_component_t fy_tl_tcp_component = {
    .name = "tcp",
    .description = "TCP stream sockets: any IP network, the safe default between hosts",
    .ops = &tcp_ops,
    .config = &fy_tcp_config_table,
    FY_SWMD_COMPONENT_SIZES,
};
