/*
 * udp.h - the udp transport's internal objects, shared by its files:
 *
 *   udp_component.c  config table, memory domain, rkeys, the ops table
 *   udp_iface.c      interface selection, sockets, addresses, event fd, statistics
 *   udp_conn.c       connections (the tl ep): ids, table, failure, flush
 *   udp_handshake.c  opening one: handshake, cookie round, MTU probe
 *   udp_close.c      close keeping the connection; passive reclaim
 *   udp_tx.c         send path: fragments to segments, window, credits, ready queue, batching
 *   udp_rx.c         receive path: validation, ordering, stash, delivery, reassembly, RMA target
 *   udp_retx.c       ACKs, RTT estimate, the hotel and retransmissions
 *   udp_rma.c        put / get initiator side
 *   udp_fault.c      the deterministic fault injector
 *   udp_csum.c       CRC32C
 *   udp_live.c       liveness: the per-process heartbeat responder, keepalives, cookies
 *
 * Names follow the usnic notes: a fragment is what proto asks to send, a segment one
 * datagram, a chunk the piece of a fragment that fits in one segment.  The tl ep is a
 * connection (fy_udp_conn_t); connections are bidirectional, so ACKs ride on data both ways.
 */
#ifndef FY_TL_UDP_H
#define FY_TL_UDP_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tl/swmd.h"
#include "tl/tl.h"
#include "tl/udp/udp_proto.h"
#include "util/hash.h"
#include "util/hotel.h"
#include "util/list.h"
#include "util/mpool.h"
#include "util/netif.h"
#include "util/region.h"
#include "util/status.h"

#define FY_UDP_MAX_IOV  16
#define FY_UDP_MAX_ZHDR 256 /* am_zcopy header */
#define FY_UDP_BATCH    32  /* datagrams per recvmmsg / sendmmsg */
/* A segment's header space: the data header, room for the ACK block a transmission may
 * carry, then the type header (udp_tx.c) */
#define FY_UDP_SEG_XHDR    (FY_UDP_DHDR_LEN + FY_UDP_DACK_LEN)
#define FY_UDP_SEG_HDR_MAX (FY_UDP_SEG_XHDR + 48)
#define FY_UDP_CWND_INIT   64 /* segments a new ep may have in flight before its first ACK */
#define FY_UDP_CWND_MIN    32
/* Timer resends by kind: a hole sent once, a lost resend, above all the peer holds, the peer
 * silent. */
enum { FY_UDP_TO_HOLE, FY_UDP_TO_RESENT, FY_UDP_TO_ABOVE, FY_UDP_TO_SILENT };
#define FY_UDP_ACK_MID     8 /* mid-message, an ACK waits for this many segments (udp_tx.c) */
#define FY_UDP_QUEUE_NS    (20 * 1000 * 1000ll)   /* queueing delay tolerated above 4x min RTT */
#define FY_UDP_RWND_LAPSE  (200 * 1000 * 1000ull) /* an advertised window without news */
#define FY_UDP_TX_BYTES    (1u << 20)             /* bytes of new segments one ep sends per pass */
#define FY_UDP_GSO_MAX     64    /* segments per GSO send (the kernel's UDP_MAX_SEGMENTS) */
#define FY_UDP_GSO_BYTES   65000 /* payload of one GSO send */
#define FY_UDP_WIN_SPARE   4     /* empty window arrays an iface keeps for reuse */
#define FY_UDP_BW_SLOTS    12    /* sample periods the bandwidth filter remembers */
#define FY_UDP_CC_PERIOD   (10ull * 1000 * 1000) /* shortest sample period (or the min RTT), ns */
#define FY_UDP_MIN_RTT_WIN (10ull * 1000 * 1000 * 1000) /* the min RTT filter's window, ns */
enum { FY_UDP_CC_STARTUP = 0, FY_UDP_CC_DRAIN, FY_UDP_CC_PROBE_BW };

/* ---- configuration (FERRY_UDP_*) ------------------------------------------------------ */
typedef struct fy_udp_opts {
    char *if_include;
    char *if_exclude;
    int af;     /* 0 any, 1 inet, 2 inet6 */
    size_t mtu; /* 0: the interface's */
    size_t prio_mtu;
    unsigned long window;
    size_t credit; /* bytes in flight per ep (also bounded by the peer's buffer) */
    size_t rcvbuf, sndbuf;
    unsigned long ack_passes;
    uint64_t ack_delay;
    unsigned long ack_every;
    size_t ack_bytes;
    uint64_t rto_init, rto_min, rto_max;
    uint64_t peer_timeout;
    size_t max_zcopy;
    unsigned long tx_budget;
    int checksum;
    int pacing;
    size_t pace_max; /* no pacing above this rate (B/s) */
    int gso;
    int place;
    int stats;
    /* connection management (udp_conn.c, udp_live.c) */
    uint64_t keepalive;        /* silence before the first heartbeat; 0 = PEER_TIMEOUT / 4 */
    unsigned long max_passive; /* connections peers opened that proto has not adopted */
    uint64_t passive_idle;     /* an idle unadopted passive connection is reclaimed after this */
    /* fault injector */
    unsigned long fault_seed;
    double fault_drop, fault_dup, fault_reorder, fault_delay, fault_corrupt;
    uint64_t fault_delay_time;
    char *fault_channels;
    size_t fault_max_dgram;
} fy_udp_opts_t;

extern const fy_config_table_t fy_udp_config_table;

typedef struct fy_udp_md {
    fy_swmd_t super; /* the region table remote access is checked against (tl/swmd.h) */
    fy_udp_opts_t opts;
} fy_udp_md_t;

/* memh and rkey: the software md's (region id, key) */
typedef fy_swmd_key_t fy_udp_key_t;

enum { FY_UDP_CH_PRIO = 0, FY_UDP_CH_DATA = 1, FY_UDP_NCH = 2 };

/* ---- timers in the hotel: segments and connection handshakes ---------------------------- */
enum {
    FY_UDP_TIMER_SEG = 1,
    FY_UDP_TIMER_CONN = 2,
    FY_UDP_TIMER_LIVE = 3,
    FY_UDP_TIMER_PACE = 4,
    FY_UDP_TIMER_RACK = 5
};
typedef struct fy_udp_timer {
    fy_hotel_room_t room;
    uint8_t kind;
} fy_udp_timer_t;

/* ---- send side ------------------------------------------------------------------------ */
/* What waits on an ep's send queue: a formed segment, a fragment to chunk, or a flush. */
enum { FY_UDP_PEND_SEG = 1, FY_UDP_PEND_FRAG, FY_UDP_PEND_FLUSH };
typedef struct fy_udp_pend {
    fy_list_t link;
    uint8_t kind;
} fy_udp_pend_t;

struct fy_udp_conn;
struct fy_udp_rma_op;

/* A large fragment: its message is iov[0..iovcnt) (an AM's header is iov[0], copied into
 * hdr), sent in chunks straight from the caller's memory. */
typedef struct fy_udp_frag {
    fy_udp_pend_t pend;
    uint8_t type; /* FY_UDP_T_AM (fits one segment), _AM_CHUNK, _PUT, _GET_RESP */
    uint8_t am_id;
    int8_t status;  /* GET_RESP */
    uint8_t queued; /* still on the send queue (not every chunk made yet) */
    uint32_t op_id;
    uint64_t total;
    uint64_t next_off;    /* bytes made into segments */
    uint32_t outstanding; /* segments sent and not yet ACKed */
    ferry_status_t result;
    fy_tl_comp_t *comp; /* am_zcopy: the caller's completion */
    struct fy_udp_conn *conn;
    struct fy_udp_seg *bounce; /* a copied message this fragment owns (am_bcopy) */
    struct fy_udp_rma_op *op;  /* put: its operation */
    fy_udp_rma_t rma;          /* put */
    size_t iovcnt;
    struct iovec iov[FY_UDP_MAX_IOV + 1];
    uint8_t hdr[FY_UDP_MAX_ZHDR];
} fy_udp_frag_t;

/* One datagram of the reliable stream, from its first send until ACKed. */
typedef struct fy_udp_seg {
    fy_udp_pend_t pend;   /* send queue (kind SEG) */
    fy_udp_timer_t timer; /* the hotel */
    fy_list_t rlink;      /* the iface's resend queue */
    struct fy_udp_conn *conn;
    fy_udp_frag_t *frag; /* chunk source, or NULL: the data is inline below */
    uint64_t off;        /* offset of this chunk in frag's message */
    uint64_t tx_ns;      /* last transmission */
    uint32_t seq;
    uint32_t dlen; /* data bytes (after hdr) */
    uint16_t hlen; /* data header + type header, as sent without an ACK block */
    uint8_t tries;
    uint8_t sacked; /* the receiver holds it (out of order): never time it out */
    uint8_t pool;   /* which mpool it came from */
    uint8_t chan;   /* channel of its last transmission (RACK compares within one) */
    uint8_t hdr[FY_UDP_SEG_HDR_MAX] __attribute__((aligned(8)));
    uint8_t data[]; /* inline data (bcopy) */
} fy_udp_seg_t;

enum { FY_UDP_POOL_SMALL, FY_UDP_POOL_LARGE, FY_UDP_POOL_DESC, FY_UDP_NPOOL };

typedef struct fy_udp_flush {
    fy_udp_pend_t pend;
    fy_tl_comp_t *comp;
    uint32_t seq; /* every seq before it must be ACKed */
    uint64_t rma; /* ... and every RMA op numbered below it complete */
} fy_udp_flush_t;

typedef struct fy_udp_rma_op {
    fy_list_t link; /* conn->rma_fifo */
    uint32_t op_id;
    uint8_t is_get;
    uint8_t responded; /* its answer (RMA_DONE, last GET_RESP) arrived */
    int pending;       /* put: RMA_DONE + source ACKed; get: the last GET_RESP */
    ferry_status_t status;
    fy_tl_comp_t *comp;
    uint64_t total, got;
    size_t iovcnt;
    struct iovec iov[FY_UDP_MAX_IOV];
} fy_udp_rma_op_t;

/* ---- receive side --------------------------------------------------------------------- */
typedef struct fy_udp_rxbuf {
    uint32_t len;
    uint8_t chan;
    uint8_t early; /* stashed: it overtook the segments before it (udp_sack.c) */
    uint8_t pad[2];
    uint32_t early_next; /* early: the seq of the next early one (the conn's list) */
    uint8_t pad2[4];
    uint8_t data[]; /* 16-byte aligned */
} fy_udp_rxbuf_t;

/* What the receiver knows of the arrivals on the data channel, to tell a segment that overtook
 * a queue from one whose predecessors were lost (udp_rx.c).  Delays are our clock minus the
 * sender's (us, mod 2^32): only their differences count. */
typedef struct fy_udp_arrival {
    uint32_t ref;        /* the delay of the flow: the last arrival that was not sooner */
    uint32_t prev;       /* the last arrival's delay */
    uint32_t prev_seq;   /* ... and sequence number */
    uint32_t top;        /* the highest sequence number of the flow */
    uint8_t prev_sooner; /* ... and whether it was sooner than the flow */
} fy_udp_arrival_t;

/* ---- connection (the tl ep) ----------------------------------------------------------- */
enum { FY_UDP_CONN_CONNECTING = 1, FY_UDP_CONN_CONNECTED, FY_UDP_CONN_FAILED, FY_UDP_CONN_CLOSED };

typedef struct fy_udp_conn {
    fy_tl_ep_t super;
    struct fy_udp_iface *iface;
    uint32_t id, peer_id;
    uint64_t peer_uuid;
    uint64_t peer_key; /* the peer iface's key: every datagram to it carries it (udp_handshake.c) */
    uint32_t token;    /* ours, drawn per connection: the check of every data segment to us */
    uint32_t peer_token; /* the peer's, from its handshake: the check of every one we send */
    uint8_t state;
    uint8_t owned; /* proto holds it (ep_create); else a passive peer connection */
    uint8_t got_conn_ack, got_probe_ack;
    uint8_t in_fail_list;
    ferry_status_t fail_status;
    struct sockaddr_storage addr[FY_UDP_NCH];
    socklen_t addrlen;
    fy_netif_addr_t peer_addr;
    uint32_t seg_size;   /* data-channel datagram size on this path */
    uint32_t prio_mtu;   /* priority-channel datagram size (min of both ends) */
    uint32_t probe_size; /* being probed */
    uint32_t conn_tries;
    uint64_t conn_start;
    fy_udp_timer_t conn_timer;

    /* send */
    uint32_t snd_nxt, snd_una, wnd;
    uint32_t cwnd;        /* congestion window, segments (<= wnd) */
    int64_t min_rtt;      /* smallest RTT sample: the path without queues */
    uint64_t rack_tx;     /* send time of the newest segment known delivered (RACK) */
    uint64_t cwnd_cut_ns; /* last time queueing delay shrank cwnd */
    fy_udp_seg_t **win;   /* wsize slots while segments are in flight, else NULL (idle) */
    uint64_t inflight, credit;
    fy_list_t sendq;
    fy_list_t ready_link;
    fy_list_t flushq;
    fy_list_t rma_fifo;
    uint32_t next_frag_id, next_op_id;
    uint64_t rma_issued, rma_completed;
    ferry_status_t sticky; /* a refused put_short, reported by the next flush */
    int64_t srtt, rttvar;  /* ns; srtt 0 = no sample yet */
    uint64_t rto;
    uint64_t last_rx_ns;  /* anything from the peer, its liveness answers included */
    uint64_t last_seg_ns; /* a datagram of the connection itself (not a liveness answer) */
    uint64_t last_ack_ns; /* snd_una last moved (or the window went from empty) */
    uint32_t snd_high;    /* highest seq the peer said it holds (ack - 1 or SACKed) */

    /* receive */
    uint32_t rcv_nxt;
    fy_udp_rxbuf_t **stash; /* out-of-order segments, by seq & (wsize-1) */
    uint32_t nstash;
    uint32_t nearly;      /* ... of which overtook a queue (early: no hole reported) */
    uint32_t early_head;  /* the seq of the first of them (a list through the buffers) */
    uint64_t rx_early;    /* segments that came early, ever (statistics) */
    uint32_t stash_top;   /* highest seq in the stash (valid when nstash) */
    fy_udp_arrival_t arr; /* the flow of arrivals on the data channel (udp_rx.c) */
    uint8_t ack_pending, ack_now;
    uint32_t ack_passes, ack_unsent;
    uint64_t ack_unsent_bytes;
    uint64_t ack_since;
    fy_list_t ack_link;
    /* reassembly of a large AM (chunks of one fragment arrive in sequence order) */
    uint8_t rx_active, rx_am_id;
    uint32_t rx_frag_id;
    uint64_t rx_total, rx_got;
    uint8_t *rx_buf;     /* the buffer of the fragment being (or last) reassembled */
    uint8_t *rx_bufs[2]; /* two, alternating, so the next AM can be received in place
                          * while the last one is still being delivered */
    size_t rx_caps[2];
    uint8_t rx_cur;     /* index of rx_buf in rx_bufs */
    uint32_t rx_chunk;  /* data bytes per later chunk of the fragment being reassembled */
    uint32_t rx_chunk0; /* ... and in its first chunk (a longer header: fewer) */
    /* the put being received */
    uint32_t rx_put_op;
    ferry_status_t rx_put_status;

    fy_list_t zombie_link;
    ferry_ep_stats_t stats;

    /* ---- loss recovery and congestion (udp_retx.c; wire: tsval/tsecr, F_DSACK) ---- */
    uint32_t ts_echo;      /* receive: tsval to echo in our next ACK (0: none) */
    uint32_t last_tsecr;   /* send: the echo the last RTT sample came from */
    uint8_t dsack_pending; /* receive: a segment arrived twice; say so in the next ACK */
    uint32_t nsacked;      /* send: segments in the window the peer holds (out of the pipe) */
    uint64_t sacked_bytes; /* ... and their credit cost */
    uint32_t reo_quarters; /* RACK reorder window, in quarters of the minimum RTT (1..1024) */
    uint32_t reo_calm;     /* recoveries since the reorder window last grew */
    uint64_t resent_at;    /* send: time of the last resend (a DSACK after it is ours) */
    uint64_t dsacks;       /* DSACKs received: resends that were needless (or net dups) */
    uint64_t rack_ch[FY_UDP_NCH]; /* send time of the newest segment known delivered, per
                                   * channel (the two channels overtake each other) */
    uint8_t ts_echo_chan;         /* receive: the channel ts_echo's segment came on */
    uint64_t una_moved_ns;        /* send: snd_una last moved */
    uint64_t peer_rwnd;           /* send: the peer's advertised window, bytes (0: none) */
    uint64_t peer_rwnd_ns;        /* ... when it came (it lapses after FY_UDP_RWND_LAPSE) */
    uint32_t ssthresh;            /* send, plain window: above it cwnd grows additively
                                   * (0: never cut, it doubles per round trip) */
    uint32_t cwnd_acc;            /* ... segments ACKed towards the next increment */
    int64_t last_rtt;             /* the latest RTT sample, ns */
    uint8_t rto_probing;          /* send: a timeout fired with the peer silent, and no ACK
                                   * brought news since: only the oldest segment is resent
                                   * (backed off) */
    fy_udp_timer_t rack_timer;    /* send: the earliest hole RACK will call lost, if no ACK
                                   * comes first (udp_retx.c) */
    uint64_t rack_due;            /* ... when it is due */
    uint32_t to_kind[4];          /* send: timer resends by kind (FY_UDP_TO_*, FERRY_STATS) */
    uint32_t fast_again;          /* send: RACK resends of a segment resent already */
    /* Spurious timeouts (udp_retx.c): a timer resend whose original arrived after all. */
    uint32_t rto_seq;       /* send: the highest seq the timer resent in this episode */
    uint64_t rto_at;        /* ... the episode's first timer resend (0: none out) */
    uint64_t rto_orig_ns;   /* ... when the first one's original had left */
    uint64_t rto_floor;     /* the RTO's floor, raised above RTO_MIN by spurious timeouts */
    uint64_t rto_floor_ns;  /* ... last raised or halved */
    uint32_t spurious_rtos; /* timeouts found needless (FERRY_STATS) */
    /* ---- connection management (udp_conn.c, udp_live.c) ---- */
    uint64_t cookie;           /* the responder's cookie, echoed in our CONN_REQ */
    uint64_t conn_last_tx;     /* last handshake send (a gap: we did not progress) */
    uint32_t small_acks;       /* CONN_ACKs to the small requests sent beside this probe size */
    uint32_t probe_max;        /* the first (largest) size probed */
    uint16_t peer_live_port;   /* the peer's liveness port (0: not known yet) */
    uint8_t passive_counted;   /* counted in iface->npassive */
    uint8_t released;          /* kept passive at its owner's close (udp_conn.c, Close) */
    uint8_t verifying;         /* adopted, asking the peer whether its end still lives */
    uint8_t hs_slot;           /* its handshake is one of the iface's hs_active */
    fy_list_t hs_link;         /* in iface->hs_wait: its handshake waits for a slot */
    uint32_t hb_sent;          /* heartbeats unanswered since hb_first */
    uint64_t hb_first;         /* when the first unanswered heartbeat left (0: none) */
    fy_udp_timer_t live_timer; /* in iface->live_hotel */
    /* ---- congestion control and pacing (udp_cc.c) ---- */
    uint8_t pace_ok;        /* the model and pacing apply (not a peer at our own address) */
    uint8_t local;          /* a peer at our own address: no wire, only its socket between */
    uint8_t pace_wait;      /* waiting for its next send time (pace_timer checked in) */
    uint8_t cc_state;       /* FY_UDP_CC_STARTUP, _DRAIN, _PROBE_BW */
    uint8_t cc_cycle;       /* PROBE_BW gain phase */
    uint8_t full_bw_cnt;    /* sample periods without 25% growth in STARTUP */
    uint8_t ck_app;         /* the application ran dry during this sample period */
    uint8_t ck_paced;       /* ... or waited for its pacing time */
    uint32_t acked_segs;    /* segments delivered by the ACK being processed */
    uint64_t delivered;     /* bytes the peer acknowledged or SACKed, ever */
    uint64_t ck_dlv, ck_ns; /* the sample period's start: delivered then, and when */
    uint64_t ck_sent;       /* bytes sent (first sends and resends) in the period */
    uint64_t dlv_tx, ck_tx; /* send time of the newest segment delivered: now, at the start */
    uint64_t period;        /* sample periods so far */
    uint64_t bw_slot[FY_UDP_BW_SLOTS]; /* delivery rate of each recent period, B/s */
    uint64_t bw;                       /* their max: the bottleneck bandwidth, B/s */
    uint64_t bw_lo;                    /* cut on loss with a queue (0: none), B/s */
    uint64_t full_bw;
    int64_t cc_min_rtt;        /* windowed min RTT (FY_UDP_MIN_RTT_WIN) */
    uint64_t cc_min_rtt_ns;    /* when it was taken */
    int64_t per_min_rtt;       /* smallest RTT sample of this period */
    uint32_t per_lost;         /* segments declared lost this period */
    uint32_t queued_periods;   /* periods in a row whose every RTT sample waited in a queue */
    uint64_t cycle_ns;         /* PROBE_BW phase start */
    uint64_t pace_rate;        /* B/s; 0: not paced (no model yet, or pacing off) */
    uint64_t next_tx_ns;       /* earliest time of the next send under pacing */
    uint64_t paced_waits;      /* times a send waited for its pacing time */
    uint64_t cong_cuts;        /* periods that cut bw_lo */
    uint64_t cwnd_cuts;        /* plain window cuts by queueing delay (udp_retx.c) */
    uint64_t rx_copied;        /* large-AM chunks copied in, not placed (udp_rx.c) */
    fy_udp_timer_t pace_timer; /* in iface->hotel while pace_wait */
} fy_udp_conn_t;

/* ---- the fault injector -------------------------------------------------------------- */
typedef struct fy_udp_fault {
    int enabled;
    unsigned chan_mask;
    double drop, dup, reorder, delay, corrupt;
    uint64_t delay_ns;
    size_t max_dgram;
    uint64_t rng[FY_UDP_NCH];
    fy_list_t held; /* delayed / reordered datagrams, by release time */
    uint64_t n_drop, n_dup, n_reorder, n_delay, n_corrupt, n_oversize;
} fy_udp_fault_t;

/* ---- the interface -------------------------------------------------------------------- */
typedef struct fy_udp_chan {
    int fd;
    uint16_t port;
    uint32_t mtu; /* largest datagram accepted on this channel */
    fy_mpool_t rxpool;
    size_t rxpool_max;
    fy_udp_rxbuf_t *posted[FY_UDP_BATCH];
    struct mmsghdr rmsg[FY_UDP_BATCH];
    struct iovec riov[FY_UDP_BATCH][3];
    /* direct placement: a slot posted as [header | reassembly buffer at place_off | rest] */
    uint64_t place_off[FY_UDP_BATCH]; /* UINT64_MAX: a plain slot */
    uint32_t place_len[FY_UDP_BATCH];
    uint32_t place_frag_of[FY_UDP_BATCH]; /* the fragment id expected in the slot */
    uint64_t place_max[FY_UDP_BATCH];     /* largest fragment that may use the buffer */
    uint16_t place_hlen[FY_UDP_BATCH];    /* the headers expected before the data */
    struct fy_udp_conn *place_conn;       /* whose buffer the slots point into */
    struct fy_udp_conn *place_hint;       /* the conn whose large AM is arriving */
    struct sockaddr_storage rname[FY_UDP_BATCH];
    /* transmit batch */
    unsigned ntx, ntxiov;
    struct mmsghdr tmsg[FY_UDP_BATCH];
    struct iovec tiov[FY_UDP_BATCH * (FY_UDP_MAX_IOV + 4)];
    /* segments of each message (several when GSO merged them), for a refused send */
    fy_udp_seg_t *bseg[FY_UDP_BATCH * FY_UDP_GSO_MAX];
    unsigned nbseg;
    uint16_t mseg_first[FY_UDP_BATCH], mseg_n[FY_UDP_BATCH];
    uint32_t mgso[FY_UDP_BATCH]; /* datagram size of a GSO message, 0 = plain */
    uint32_t mbytes[FY_UDP_BATCH];
    uint8_t mopen[FY_UDP_BATCH]; /* every datagram so far full-size: more may join */
    uint8_t cbuf[FY_UDP_BATCH][CMSG_SPACE(sizeof(uint16_t))] __attribute__((aligned(8)));
    /* receive: each slot's control buffer, for the socket's drop count (SO_RXQ_OVFL) */
    uint8_t rcbuf[FY_UDP_BATCH][CMSG_SPACE(sizeof(uint32_t))] __attribute__((aligned(8)));
    uint32_t ovfl_seen; /* the socket's drop count when last read */
    /* unsequenced messages (handshake, explicit ACKs with their SACK bitmap) */
    uint8_t thdr[FY_UDP_BATCH][FY_UDP_HDR_LEN + sizeof(fy_udp_sack_ext_t)];
    unsigned idle;       /* empty polls in a row */
    unsigned last_batch; /* datagrams the last poll found (0, 1, or more) */
    unsigned rx_vlen;    /* slots a batch receive fills: FY_UDP_BATCH, or the placed ones */
    uint8_t rx_full;     /* the last poll filled them all: more is waiting */
} fy_udp_chan_t;

typedef struct fy_udp_iface {
    fy_tl_iface_t super;
    fy_udp_md_t *md;
    const fy_udp_opts_t *opts;
    uint64_t uuid, host_id;
    fy_netif_addr_t addr;
    int is_loopback;
    uint32_t if_mtu;
    uint32_t seg_size; /* our largest data datagram */
    uint32_t wsize;    /* window array size, a power of two >= opts->window */
    uint64_t credit;   /* what we let a peer have in flight towards us */
    int csum;          /* compute and require checksums */
    int gso;           /* merge data segments with UDP_SEGMENT */
    fy_udp_chan_t ch[FY_UDP_NCH];
    int epfd, tfd, ev_socks; /* ev_socks: the sockets are in epfd (armed_ns: udp_iface.c) */
    uint64_t rx_at_arm;      /* rx_dgrams at the last arm (udp_iface.c: event_arm) */
    fy_hotel_t hotel;
    fy_mpool_t seg_pool[FY_UDP_NPOOL];
    size_t seg_pool_size[FY_UDP_NPOOL];
    fy_mpool_t frag_pool, op_pool, flush_pool;
    fy_udp_conn_t **conns; /* by id & 0xffff */
    uint16_t *conn_gen;
    uint32_t conn_cap;
    uint32_t nconns;
    fy_hash_t by_peer;  /* (peer uuid, peer conn id) -> conn */
    fy_list_t ready;    /* conns with data, window and credit */
    fy_list_t resendq;  /* segments to retransmit */
    fy_list_t acklist;  /* conns owing an ACK */
    fy_list_t faillist; /* conns to fail after the hotel ran */
    fy_list_t zombies;  /* conns to free at the end of progress */
    unsigned in_progress;
    int in_data_rx;  /* processing a batch of the data channel */
    unsigned events; /* counted by this progress call */
    uint64_t now;    /* clock of the current progress pass */
    uint64_t pass;
    /* The last pass delivered from the priority channel and was not counted (udp_iface.c). */
    int pass_uncounted;
    int now_fresh; /* now was read at the top of this pass, nothing ran since */
    /* A hotel runs only once its tick is over (the start of the next one): a busy-polling
     * pass finds nothing due nearly every time, and a run costs ~80 instructions. */
    uint64_t hotel_gate, live_gate, armed_ns;
    /* The ACK an in-order AM carried, processed at the start of the next pass or before
     * anything else reads the send window (fy_udp_ack_settle: udp_rx.c). */
    struct fy_udp_conn *dack_conn;
    fy_udp_hdr_t dack_hdr;
    uint64_t dack_ns; /* when it arrived: its RTT sample's time, not the settling's */
    fy_udp_fault_t fault;
    /* counters of what cannot be charged to an ep */
    uint64_t drops_bad_key, drops_malformed, drops_unknown_ep, drops_csum, drops_trunc;
    uint64_t drops_window, drops_stash, tx_errors, rx_dgrams, tx_dgrams;
    int warned_emsgsize;

    /* ---- connection management (udp_conn.c, udp_live.c) ---- */
    struct fy_udp_live *live; /* this iface's socket at the liveness responder */
    uint16_t live_port;
    fy_hotel_t live_hotel; /* keepalive timers, coarse ticks */
    uint64_t cookie_secret[2];
    uint32_t npassive; /* passive connections proto has not adopted */
    /* Handshakes under way (udp_handshake.c): at most FY_UDP_HS_WINDOW at once; the others
     * wait their turn, first come first served. */
    uint32_t hs_active;
    fy_list_t hs_wait;
    uint64_t hs_waited; /* handshakes that had to wait for a slot */
    uint64_t hs_time;   /* recent handshakes' time, admission to connected (average) */
    uint64_t cookies_sent, half_open_refused, passive_reclaimed, resets_sent, resets_rx;
    uint64_t hb_sent, hb_acked, peers_dead;
    uint64_t pace_due; /* earliest pace timer checked in (0: none), for event_arm */
    /* ---- receiver-driven flow control (udp_rx.c, udp_tx.c) ---- */
    uint64_t drops_sock; /* datagrams our sockets dropped (full receive buffer) */
    uint64_t rwnd;       /* the window we advertise, bytes (0: none, the credit holds) */
    uint64_t rwnd_ns;    /* its last change */

    /* empty (all NULL) window arrays, so a connection that goes idle and busy again in
     * turn does not allocate and clear wsize slots each time */
    void *win_spare[FY_UDP_WIN_SPARE];
    unsigned nwin_spare;
} fy_udp_iface_t;

/* ---- addresses ------------------------------------------------------------------------ */
/* Device address: the interface's IP address (20 bytes), its MTU and host id: 32 bytes. */
typedef struct fy_udp_dev_addr {
    fy_netif_addr_t ip;
    uint32_t mtu;
    uint64_t host_id;
} fy_udp_dev_addr_t;
_Static_assert(sizeof(fy_udp_dev_addr_t) == 32, "udp device address is 32 bytes");
/* Interface address: the two ports, the segment size, the iface's uuid and its key (every
 * datagram to the iface must carry it: whoever has the address may connect). */
typedef struct fy_udp_iface_addr {
    uint16_t prio_port;
    uint16_t data_port;
    uint32_t seg_size;
    uint64_t uuid;
    uint64_t key;
} fy_udp_iface_addr_t;
_Static_assert(sizeof(fy_udp_iface_addr_t) == 24, "udp interface address is 24 bytes");

/* ---- shared functions ----------------------------------------------------------------- */
extern const fy_tl_component_t fy_tl_udp_component;

/* udp_iface.c */
ferry_status_t fy_udp_query_devices(fy_tl_md_t *md, fy_tl_device_t *devs, unsigned max,
                                    unsigned *count);
ferry_status_t fy_udp_iface_open(fy_tl_md_t *md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p);
void fy_udp_iface_close(fy_tl_iface_t *tl_iface);
void fy_udp_iface_query(fy_tl_iface_t *tl_iface, fy_tl_iface_attr_t *attr);
ferry_status_t fy_udp_iface_get_address(fy_tl_iface_t *tl_iface, void *dev_addr, void *iface_addr);
void fy_udp_addr_str(const void *dev_addr, const void *iface_addr, char *buf, size_t len);
void fy_udp_iface_unreachable_why(fy_tl_iface_t *tl_iface, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len);
int fy_udp_iface_is_reachable(fy_tl_iface_t *tl_iface, const void *dev_addr,
                              const void *iface_addr);
unsigned fy_udp_iface_progress(fy_tl_iface_t *tl_iface);
int fy_udp_iface_event_fd(fy_tl_iface_t *tl_iface);
ferry_status_t fy_udp_iface_event_arm(fy_tl_iface_t *tl_iface);
void fy_udp_iface_print(fy_tl_iface_t *tl_iface, FILE *f);
void fy_udp_conn_print(const fy_udp_conn_t *conn, FILE *f);
int fy_udp_stats_wanted(const fy_udp_iface_t *iface);

/* udp_conn.c: the connection table, failure, teardown, flush */
ferry_status_t fy_udp_ep_flush(fy_tl_ep_t *ep, fy_tl_comp_t *comp);
ferry_status_t fy_udp_ep_get_stats(fy_tl_ep_t *ep, ferry_ep_stats_t *stats);
fy_udp_conn_t *fy_udp_conn_lookup(fy_udp_iface_t *iface, uint32_t id);
/* The connection the peer (uuid, its id) opened to us, if any. */
fy_udp_conn_t *fy_udp_peer_lookup(fy_udp_iface_t *iface, uint64_t uuid, uint32_t id);
void fy_udp_bind_peer(fy_udp_conn_t *conn, uint32_t peer_id);
void fy_udp_unbind_peer(fy_udp_conn_t *conn);
fy_udp_conn_t *fy_udp_conn_new(fy_udp_iface_t *iface, uint64_t peer_uuid);
void fy_udp_conn_set_addrs(fy_udp_conn_t *conn, const fy_netif_addr_t *ip, uint16_t prio_port,
                           uint16_t data_port);
/* Count the connection among the passive ones (not taken up by an ep), or not. */
void fy_udp_passive_count(fy_udp_conn_t *conn, int counted);
/* Forget every segment in the send window (the stream they belong to is over). */
void fy_udp_drop_window(fy_udp_conn_t *conn, ferry_status_t status);
void fy_udp_conn_zombie(fy_udp_iface_t *iface, fy_udp_conn_t *conn);
void fy_udp_conn_schedule_fail(fy_udp_conn_t *conn, ferry_status_t status);
void fy_udp_conn_run_failures(fy_udp_iface_t *iface);
void fy_udp_conn_fail(fy_udp_conn_t *conn, ferry_status_t status, int notify);
void fy_udp_flush_check(fy_udp_conn_t *conn);
void fy_udp_conn_free_zombies(fy_udp_iface_t *iface);
void fy_udp_conn_destroy_all(fy_udp_iface_t *iface);

/* udp_handshake.c: opening a connection, the path check, asking whether a far end lives */
ferry_status_t fy_udp_ep_create(fy_tl_iface_t *tl_iface, const void *dev_addr,
                                const void *iface_addr, fy_tl_ep_t **ep_p);
void fy_udp_conn_rx_ctrl(fy_udp_iface_t *iface, const fy_udp_hdr_t *h, const uint8_t *payload,
                         size_t plen, const struct sockaddr_storage *from, uint8_t chan);
void fy_udp_conn_timer_expired(fy_udp_iface_t *iface, fy_udp_conn_t *conn);
/* At most this many handshakes of one iface are under way at once (their datagrams and
 * retries in flight); the rest wait, their deadline not yet running. */
#define FY_UDP_HS_WINDOW 128
/* The connection's handshake is over (connected, failed, released): its timer and its slot
 * or its place in the queue go.  Safe for a connection that has none. */
void fy_udp_hs_end(fy_udp_conn_t *conn);
/* Start waiting handshakes while slots are free (from progress: it sends). */
void fy_udp_hs_admit(fy_udp_iface_t *iface);
static inline int fy_udp_hs_admissible(const fy_udp_iface_t *iface)
{
    return !fy_list_is_empty(&iface->hs_wait) && iface->hs_active < FY_UDP_HS_WINDOW;
}
/* A datagram with a key not ours: a RESET or HB_ACK from a stateless responder of a peer
 * carries the key we sent it (the peer's own), and is taken when the connection it names
 * has that peer key. */
int fy_udp_reply_key_ok(fy_udp_iface_t *iface, const fy_udp_hdr_t *h, const uint8_t *payload,
                        size_t plen);
/* A RESET answering a data segment names our connection by the peer id it sent to (src_id)
 * and the peer by its uuid (payload): the connection it means, or NULL. */
fy_udp_conn_t *fy_udp_reset_target(fy_udp_iface_t *iface, const fy_udp_hdr_t *h,
                                   const uint8_t *payload, size_t plen);

/* udp_close.c: close keeping the connection for the peer; reclaiming passive ones */
void fy_udp_ep_destroy(fy_tl_ep_t *ep);
void fy_udp_conn_reclaim(fy_udp_conn_t *conn);

/* udp_live.c */
ferry_status_t fy_udp_live_open(fy_udp_iface_t *iface);
void fy_udp_live_close(fy_udp_iface_t *iface);
/* Start (or restart) a connection's keepalive timer. */
void fy_udp_live_watch(fy_udp_conn_t *conn);
void fy_udp_live_progress(fy_udp_iface_t *iface);
/* Deadline (absolute ns, 0: none) by which a sleeping worker must run progress for liveness. */
uint64_t fy_udp_live_deadline(fy_udp_iface_t *iface, uint64_t now);
/* Is the peer of conn silent for PEER_TIMEOUT *and* unanswered heartbeats say it is gone?
 * (A peer that only sleeps between progress calls answers heartbeats.) */
int fy_udp_conn_presumed_dead(const fy_udp_conn_t *conn);
void fy_udp_live_rx_hb_ack(fy_udp_iface_t *iface, const fy_udp_hdr_t *h, const uint8_t *payload,
                           size_t plen);
uint64_t fy_udp_cookie(const fy_udp_iface_t *iface, const struct sockaddr_storage *from,
                       uint64_t uuid, uint32_t src_id, uint64_t epoch);
/* A conn-less datagram (COOKIE, RESET) straight to `to`, with h's key (0: ours). */
void fy_udp_send_raw(fy_udp_iface_t *iface, uint8_t chan, const fy_udp_hdr_t *h,
                     const void *payload, size_t plen, const struct sockaddr_storage *to);
/* A sequenced or ACK datagram named a connection we do not have: tell the sender (RESET). */
void fy_udp_conn_rx_unknown(fy_udp_iface_t *iface, const fy_udp_hdr_t *h,
                            const struct sockaddr_storage *from);

/* udp_tx.c */
ferry_status_t fy_udp_am_short(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_udp_am_bcopy(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_udp_am_zcopy(fy_tl_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp);
fy_udp_seg_t *fy_udp_seg_alloc(fy_udp_iface_t *iface, size_t inline_len);
void fy_udp_seg_free(fy_udp_iface_t *iface, fy_udp_seg_t *seg);
void fy_udp_seg_init_hdr(fy_udp_conn_t *conn, fy_udp_seg_t *seg, uint8_t type, uint8_t am_id,
                         size_t xhdr_len, size_t dlen);
ferry_status_t fy_udp_send_inline(fy_udp_conn_t *conn, fy_udp_seg_t *seg);
void fy_udp_enqueue(fy_udp_conn_t *conn, fy_udp_pend_t *pend);
fy_udp_frag_t *fy_udp_frag_alloc(fy_udp_iface_t *iface);
void fy_udp_frag_release_seg(fy_udp_iface_t *iface, fy_udp_frag_t *frag);
void fy_udp_frag_finish(fy_udp_iface_t *iface, fy_udp_frag_t *frag);
void fy_udp_frag_submit(fy_udp_conn_t *conn, fy_udp_frag_t *frag);
void fy_udp_ready_add(fy_udp_conn_t *conn);
unsigned fy_udp_tx_progress(fy_udp_iface_t *iface);
/* A control header from conn to its peer: the peer's key, both ids, the type, the version. */
void fy_udp_ctrl_hdr(const fy_udp_conn_t *conn, uint8_t type, fy_udp_hdr_t *h);
void fy_udp_tx_ctrl(fy_udp_iface_t *iface, fy_udp_conn_t *conn, uint8_t chan, uint8_t type,
                    const void *payload, size_t plen, size_t pad_to,
                    const struct sockaddr_storage *to, socklen_t tolen);
void fy_udp_tx_flush(fy_udp_iface_t *iface, uint8_t chan);
void fy_udp_tx_flush_all(fy_udp_iface_t *iface);
/* udp_ack.c */
uint64_t fy_udp_send_acks(fy_udp_iface_t *iface, int force);
/* Only the ACKs that must go at once, and flush them (between two batches of a pass). */
void fy_udp_send_acks_due(fy_udp_iface_t *iface);
void fy_udp_ack_schedule(fy_udp_conn_t *conn, int now, size_t bytes);
/* Schedule the ACK for an out-of-order arrival d segments above rcv_nxt (early: it overtook
 * a queue): at once if it is news for the sender's loss detection. */
void fy_udp_ack_ooo(fy_udp_conn_t *conn, const fy_udp_hdr_t *h, uint32_t d, int early);
/* An explicit ACK whose control header checked out; p: its payload.  Returns 0. */
int fy_udp_rx_ack(fy_udp_iface_t *iface, const fy_udp_hdr_t *h, const uint8_t *p);
void fy_udp_ack_settle_now(fy_udp_iface_t *iface);
size_t fy_udp_chunk_payload(const fy_udp_conn_t *conn, uint8_t type, int first);
/* Where a segment's type header goes in its header space. */
static inline uint8_t *fy_udp_seg_xhdr(struct fy_udp_seg *seg)
{
    return seg->hdr + FY_UDP_SEG_XHDR;
}
/* The send window array exists only while segments are in flight: the send path attaches
 * it before a segment takes a sequence number; it goes back when the last one is ACKed
 * and nothing is queued (or the connection fails). */
int fy_udp_win_attach(fy_udp_conn_t *conn);
void fy_udp_win_release(fy_udp_conn_t *conn);
void fy_udp_win_spare_free(fy_udp_iface_t *iface);
static inline int fy_udp_win_ready(fy_udp_conn_t *conn)
{
    return __builtin_expect(conn->win != NULL, 1) || fy_udp_win_attach(conn);
}

/* udp_rx.c */
unsigned fy_udp_rx_progress(fy_udp_iface_t *iface, uint8_t chan);
/* Process the ACK an in-order AM carried if it still waits: before anything reads or changes
 * the send window outside the receive path (flush, close, failure, sleep, statistics). */
static inline void fy_udp_ack_settle(fy_udp_iface_t *iface)
{
    if (__builtin_expect(iface->dack_conn != NULL, 0))
        fy_udp_ack_settle_now(iface);
}
ferry_status_t fy_udp_chan_rx_init(fy_udp_iface_t *iface, uint8_t chan);
void fy_udp_chan_rx_fini(fy_udp_iface_t *iface, uint8_t chan);
/* Stop receiving into conn's reassembly buffer (it is about to go). */
void fy_udp_rx_unplace(fy_udp_iface_t *iface, fy_udp_conn_t *conn);
/* The receive window we advertise now, KiB (0: none - our sockets do not drop). */
uint32_t fy_udp_rwnd_kib(fy_udp_iface_t *iface);

/* udp_sack.c */
void fy_udp_stash_clear(fy_udp_conn_t *conn);
/* The SACK bits of a data header: seq rcv_nxt+1 .. +32 held (and not early). */
uint32_t fy_udp_sack_bits(const fy_udp_conn_t *conn);
/* Fill an extended SACK bitmap; returns its size in bytes (0: nothing beyond 32 bits). */
size_t fy_udp_sack_ext(const fy_udp_conn_t *conn, fy_udp_sack_ext_t *ext);
/* A data-channel arrival of seq with delay owd (our clock - its tsval, us): did it come
 * sooner than the flow before it (it overtook a queue)?  Updates the flow. */
int fy_udp_arrival_sooner(fy_udp_arrival_t *a, uint32_t seq, uint32_t owd);
/* b, stashed as seq, came early. */
void fy_udp_early_add(fy_udp_conn_t *conn, fy_udp_rxbuf_t *b, uint32_t seq);
/* The early one stashed as seq leaves the stash. */
void fy_udp_early_unlink(fy_udp_conn_t *conn, uint32_t seq);
/* A segment of the flow (seq, sent at tsval) arrived: the early ones whose originals were
 * sent before it are held like any other from now on (their originals were lost). */
void fy_udp_early_passed(fy_udp_conn_t *conn, uint32_t tsval, uint32_t seq);

/* udp_retx.c */
void fy_udp_process_ack(fy_udp_conn_t *conn, const fy_udp_hdr_t *h, int pure,
                        const fy_udp_sack_ext_t *ext);
/* The microsecond clock of tsval. */
static inline uint32_t fy_udp_ts(uint64_t now_ns)
{
    uint32_t t = (uint32_t)(now_ns / 1000);
    return t ? t : 1; /* 0 means "no echo" */
}
void fy_udp_hotel_expired(fy_hotel_t *hotel, fy_hotel_room_t *room, void *arg);
uint64_t fy_udp_seg_stay(const fy_udp_conn_t *conn, const fy_udp_seg_t *seg);
void fy_udp_seg_sent(fy_udp_conn_t *conn, fy_udp_seg_t *seg);
void fy_udp_seg_unsent(fy_udp_iface_t *iface, fy_udp_seg_t *seg);
void fy_udp_resend_push(fy_udp_iface_t *iface, fy_udp_seg_t *seg);

/* udp_cc.c */
void fy_udp_cc_init(fy_udp_conn_t *conn);
/* A segment leaves (first send or resend): its delivery state, the pacing clock. */
void fy_udp_cc_sent(fy_udp_conn_t *conn, fy_udp_seg_t *seg);
/* A segment reached the peer (ACKed, or SACKed the first time). */
void fy_udp_cc_delivered(fy_udp_conn_t *conn, const fy_udp_seg_t *seg);
/* The end of an ACK's processing: the rate sample, the model, cwnd and pacing rate. */
void fy_udp_cc_ack(fy_udp_conn_t *conn);
void fy_udp_cc_rtt(fy_udp_conn_t *conn, int64_t rtt);
void fy_udp_cc_lost(fy_udp_conn_t *conn);
/* The send queue ran dry with room in the window: what is in flight is app-limited. */
void fy_udp_cc_app_limited(fy_udp_conn_t *conn);
/* Pacing lets the next segment leave now; else the connection waits for its pace timer. */
int fy_udp_cc_pace_block(fy_udp_conn_t *conn);
void fy_udp_cc_pace_expired(fy_udp_iface_t *iface, fy_udp_conn_t *conn);
static inline int fy_udp_cc_can_tx(fy_udp_conn_t *conn)
{
    return conn->pace_rate == 0 || !fy_udp_cc_pace_block(conn);
}

/* udp_rma.c */
ferry_status_t fy_udp_put_short(fy_tl_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                                const void *rkey);
ferry_status_t fy_udp_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
ferry_status_t fy_udp_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
void fy_udp_rma_op_done(fy_udp_conn_t *conn, fy_udp_rma_op_t *op);
void fy_udp_rma_fail_all(fy_udp_conn_t *conn, ferry_status_t status);
/* target side, called by udp_rx.c in sequence order */
ferry_status_t fy_udp_rx_put(fy_udp_conn_t *conn, const fy_udp_chunk_t *ch, const fy_udp_rma_t *rma,
                             const uint8_t *data, size_t dlen);
ferry_status_t fy_udp_rx_get_req(fy_udp_conn_t *conn, const fy_udp_get_req_t *req);
ferry_status_t fy_udp_rx_get_resp(fy_udp_conn_t *conn, const fy_udp_chunk_t *ch,
                                  const uint8_t *data, size_t dlen);
ferry_status_t fy_udp_rx_rma_done(fy_udp_conn_t *conn, const fy_udp_rma_done_t *d);

/* udp_fault.c */
ferry_status_t fy_udp_fault_init(fy_udp_iface_t *iface);
void fy_udp_fault_fini(fy_udp_iface_t *iface);
/* Send one datagram through the injector (it may drop, hold, copy or repeat it). */
void fy_udp_fault_send(fy_udp_iface_t *iface, uint8_t chan, struct msghdr *msg);
/* Release held datagrams that are due; returns the earliest pending release (0: none). */
uint64_t fy_udp_fault_poll(fy_udp_iface_t *iface, uint64_t now);

static inline fy_udp_iface_t *fy_udp_iface(fy_tl_iface_t *i)
{
    return (fy_udp_iface_t *)i;
}
static inline fy_udp_conn_t *fy_udp_conn(fy_tl_ep_t *ep)
{
    return (fy_udp_conn_t *)ep;
}

static inline int fy_udp_conn_alive(const fy_udp_conn_t *c)
{
    return c->state == FY_UDP_CONN_CONNECTING || c->state == FY_UDP_CONN_CONNECTED;
}

/* Bytes a segment is charged against the credit: its size plus the kernel's overhead. */
static inline uint64_t fy_udp_seg_cost(const fy_udp_seg_t *seg)
{
    return (uint64_t)seg->hlen + seg->dlen + 512;
}

#endif
