/*
 * udp_component.c - the udp transport as a component: its FERRY_UDP_* configuration table
 * (the one place each variable, default and meaning is written), the memory domain with its
 * region table, remote keys, and the const ops table registered in tl/registry.c.
 *
 * The transport has no hardware to register memory with: its md is the software memory
 * domain it shares with tcp (tl/swmd.h), whose region table the target checks every put and
 * get against, so a peer can reach only what was registered, with the rights it was
 * registered with.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/udp/udp.h"
#include "util/log.h"

/* auto/ipv4/ipv6 as FERRY_TCP_AF spells them; any/inet/inet6 (the old spelling) accepted too */
static const char *const af_choices[] = {"auto|any", "ipv4|inet", "ipv6|inet6", NULL};

#define F(n, d, doc, t, m) FY_CONFIG_FIELD(n, d, doc, t, fy_udp_opts_t, m)
static const fy_config_field_t udp_fields[] = {
    F("IF_INCLUDE", "",
      "Interfaces to use: names (globs) or CIDR masks with wide match "
      "(10.0.0.0/8 matches 10.20.0.0/16), comma separated.  Empty: every non-loopback one, "
      "loopback only when nothing else is up.",
      FY_CFG_STRING, if_include),
    F("IF_EXCLUDE", "", "Interfaces not to use, in the same syntax as IF_INCLUDE.", FY_CFG_STRING,
      if_exclude),
    FY_CONFIG_ENUM_FIELD("AF", "auto",
                         "Address family of the interface address: auto (IPv4 "
                         "first), ipv4 or ipv6 (also spelled any, inet, inet6).",
                         fy_udp_opts_t, af, af_choices),
    F("MTU", "0",
      "Largest data-channel datagram (IP packet) size; 0 takes the interface "
      "MTU.  Segments are sized from it (up to 64 KiB).",
      FY_CFG_SIZE, mtu),
    F("PRIO_MTU", "768",
      "Largest datagram of the priority channel (ACKs and tiny "
      "fragments); also the limit of am_short.",
      FY_CFG_SIZE, prio_mtu),
    F("WINDOW", "4096", "Send window, in segments: how many may be unacknowledged per ep.",
      FY_CFG_UINT, window),
    F("CREDIT", "8m",
      "Send credits: bytes in flight per ep (further bounded by half the "
      "peer's receive buffer).",
      FY_CFG_SIZE, credit),
    F("RCVBUF", "16m", "Socket receive buffer of the data channel (forced as root).", FY_CFG_SIZE,
      rcvbuf),
    F("SNDBUF", "4m", "Socket send buffer of the data channel.", FY_CFG_SIZE, sndbuf),
    F("ACK_PASSES", "4", "Delayed ACK: progress passes an ACK may wait for data to ride on.",
      FY_CFG_UINT, ack_passes),
    F("ACK_DELAY", "1ms", "Delayed ACK backstop: longest an ACK waits.", FY_CFG_TIME, ack_delay),
    F("ACK_EVERY", "64", "Send an ACK at least every this many received segments.", FY_CFG_UINT,
      ack_every),
    F("ACK_BYTES", "256k", "Send an ACK at least every this many received bytes.", FY_CFG_SIZE,
      ack_bytes),
    F("RTO_INIT", "10ms", "Retransmission timeout before the first RTT sample.", FY_CFG_TIME,
      rto_init),
    F("RTO_MIN", "200us",
      "Floor of the RTT-adaptive retransmission timeout (raised per "
      "connection by spurious timeouts, decaying).",
      FY_CFG_TIME, rto_min),
    F("RTO_MAX", "200ms", "Ceiling of the retransmission timeout (after backoff).", FY_CFG_TIME,
      rto_max),
    F("PEER_TIMEOUT", "10s",
      "A peer silent this long whose liveness responder does not answer heartbeats either "
      "(or one that never answers the handshake) is declared dead: err_cb, every pending "
      "operation of every endpoint to it fails.",
      FY_CFG_TIME, peer_timeout),
    F("KEEPALIVE", "0",
      "Silence from a peer after which heartbeats ask its liveness responder whether it "
      "lives (answered even while it computes without progress); 0 = PEER_TIMEOUT / 4.",
      FY_CFG_TIME, keepalive),
    F("MAX_PASSIVE", "4096",
      "Connections peers opened (each after proving its address with a cookie) that this "
      "process has not taken up yet; more requests are refused until some are adopted or "
      "reclaimed.",
      FY_CFG_UINT, max_passive),
    F("PASSIVE_IDLE", "60s",
      "A connection a peer opened that this process never took up, idle this long, is "
      "reclaimed (its peer gets a RESET if it ever uses it again).",
      FY_CFG_TIME, passive_idle),
    F("MAX_ZCOPY", "256m", "Largest am_zcopy message (the receiver reassembles it).", FY_CFG_SIZE,
      max_zcopy),
    F("TX_BUDGET", "64", "Segments one progress pass may send before it polls again.", FY_CFG_UINT,
      tx_budget),
    F("CHECKSUM", "n",
      "Carry and require a CRC32C of every datagram (for paths that can "
      "corrupt beyond the UDP checksum); on by itself when FAULT_CORRUPT is set.  Off by "
      "default: measured 2026-11-28 it cost ~11% or more of 1 MiB bandwidth on loopback "
      "(a whole extra pass over data no other user-space code touches), above the 3% that "
      "would make it the default (docs/udp.md).",
      FY_CFG_BOOL, checksum),
    F("PACING", "n",
      "Congestion control by a model of the path (bottleneck bandwidth and min RTT, "
      "random loss not read as congestion) with paced sends; never for a peer at the "
      "iface's own address (loopback).  Off by default for now: it lets a TCP flow on the "
      "same link keep its share, but on lossy links it is slower than the plain window "
      "(docs/udp.md).  n: the plain window.",
      FY_CFG_BOOL, pacing),
    F("PACE_MAX", "4g", "No pacing while the model's rate is above this (bytes per second).",
      FY_CFG_SIZE, pace_max),
    F("GSO", "y", "Use UDP segmentation offload (UDP_SEGMENT) where the kernel has it.",
      FY_CFG_BOOL, gso),
    F("PLACE", "y",
      "Receive the chunks of a large AM straight into its reassembly buffer "
      "(one copy less).",
      FY_CFG_BOOL, place),
    F("STATS", "n",
      "Print interface and per-ep statistics when an interface closes "
      "(FERRY_STATS=1 does the same for every transport).",
      FY_CFG_BOOL, stats),
    F("FAULT_SEED", "1", "Fault injector: seed of its random generator.", FY_CFG_UINT, fault_seed),
    F("FAULT_DROP", "0", "Fault injector: percent of datagrams dropped.", FY_CFG_DOUBLE,
      fault_drop),
    F("FAULT_DUP", "0", "Fault injector: percent of datagrams sent twice.", FY_CFG_DOUBLE,
      fault_dup),
    F("FAULT_REORDER", "0",
      "Fault injector: percent of datagrams held back behind the next "
      "one.",
      FY_CFG_DOUBLE, fault_reorder),
    F("FAULT_DELAY", "0", "Fault injector: percent of datagrams delayed by FAULT_DELAY_TIME.",
      FY_CFG_DOUBLE, fault_delay),
    F("FAULT_DELAY_TIME", "500us", "Fault injector: how long a delayed datagram is held.",
      FY_CFG_TIME, fault_delay_time),
    F("FAULT_CORRUPT", "0", "Fault injector: percent of datagrams with a byte flipped.",
      FY_CFG_DOUBLE, fault_corrupt),
    F("FAULT_CHANNELS", "prio,data", "Fault injector: channels it acts on (prio, data).",
      FY_CFG_STRING, fault_channels),
    F("FAULT_MAX_DGRAM", "0",
      "Fault injector: drop datagrams larger than this (a path MTU "
      "smaller than the interfaces'); 0 = off.",
      FY_CFG_SIZE, fault_max_dgram),
};
#undef F

const fy_config_table_t fy_udp_config_table = {
    "udp",
    "UDP_",
    udp_fields,
    sizeof(udp_fields) / sizeof(udp_fields[0]),
};

static ferry_status_t udp_md_open(const fy_tl_component_t *tl, fy_tl_md_t **md_p)
{
    fy_udp_md_t *md = calloc(1, sizeof(*md));
    ferry_status_t st;

    if (md == NULL)
        return FERRY_ERR_NO_MEMORY;
    st = fy_config_read(&fy_udp_config_table, &md->opts);
    if (st != FERRY_OK)
        goto err_free;
    if (md->opts.window == 0 || md->opts.window > (1u << 20)) {
        fy_error("FERRY_UDP_WINDOW=%lu: the window must be 1 .. 1048576 segments", md->opts.window);
        st = FERRY_ERR_BAD_CONFIG;
        goto err_cfg;
    }
    if (md->opts.prio_mtu < 128 || md->opts.prio_mtu > 65000) {
        fy_error("FERRY_UDP_PRIO_MTU=%zu: must be 128 .. 65000 bytes", md->opts.prio_mtu);
        st = FERRY_ERR_BAD_CONFIG;
        goto err_cfg;
    }
    if (md->opts.rto_min == 0 || md->opts.rto_min > md->opts.rto_max) {
        fy_error("FERRY_UDP_RTO_MIN must be > 0 and <= FERRY_UDP_RTO_MAX");
        st = FERRY_ERR_BAD_CONFIG;
        goto err_cfg;
    }
    st = fy_swmd_init(&md->super, tl);
    if (st != FERRY_OK)
        goto err_cfg;
    *md_p = &md->super.super;
    return FERRY_OK;

err_cfg:
    fy_config_release(&fy_udp_config_table, &md->opts);
err_free:
    free(md);
    return st;
}

static void udp_md_close(fy_tl_md_t *tl_md)
{
    fy_udp_md_t *md = (fy_udp_md_t *)tl_md;
    if (md == NULL)
        return;
    fy_swmd_cleanup(&md->super);
    fy_config_release(&fy_udp_config_table, &md->opts);
    free(md);
}

static const fy_tl_ops_t udp_ops = {
    .md_open = udp_md_open,
    .md_close = udp_md_close,
    .query_devices = fy_udp_query_devices,
    .mem_reg = fy_swmd_mem_reg,
    .mem_dereg = fy_swmd_mem_dereg,
    .rkey_pack = fy_swmd_rkey_pack,
    .rkey_unpack = fy_swmd_rkey_unpack,
    .rkey_release = fy_swmd_rkey_release,
    .iface_open = fy_udp_iface_open,
    .iface_close = fy_udp_iface_close,
    .iface_query = fy_udp_iface_query,
    .iface_get_address = fy_udp_iface_get_address,
    .iface_is_reachable = fy_udp_iface_is_reachable,
    .iface_unreachable_why = fy_udp_iface_unreachable_why,
    .addr_str = fy_udp_addr_str,
    .iface_progress = fy_udp_iface_progress,
    .iface_event_fd = fy_udp_iface_event_fd,
    .iface_event_arm = fy_udp_iface_event_arm,
    .iface_print = fy_udp_iface_print,
    .ep_create = fy_udp_ep_create,
    .ep_destroy = fy_udp_ep_destroy,
    .ep_flush = fy_udp_ep_flush,
    .ep_get_stats = fy_udp_ep_get_stats,
    .am_short = fy_udp_am_short,
    .am_bcopy = fy_udp_am_bcopy,
    .am_zcopy = fy_udp_am_zcopy,
    .put_short = fy_udp_put_short,
    .put_zcopy = fy_udp_put_zcopy,
    .get_zcopy = fy_udp_get_zcopy,
    .atomic = NULL,
};

const fy_tl_component_t fy_tl_udp_component = {
    .name = "udp",
    .description = "reliable datagrams over UDP sockets (the usnic design)",
    .ops = &udp_ops,
    .config = &fy_udp_config_table,
    FY_SWMD_COMPONENT_SIZES,
};
