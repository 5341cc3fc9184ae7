/*
 * udp_proto.h - the wire format of the udp transport: two headers - a compact one on every
 * data segment, a longer one on control messages - a few type-specific headers after them,
 * and the packet types, listed once.
 *
 * Every field is little endian (the transport runs between hosts of one byte order; a peer
 * of the other order fails the key check and is dropped).  Every header is read with memcpy
 * from the receive buffer, never through a cast pointer, so alignment never matters.  Byte 0
 * of every datagram is its type: types from FY_UDP_T_AM on are data segments (the compact
 * header), the others control messages (the long header).
 *
 * The data segment header, 20 bytes, then the ACK block when F_ACK is set:
 *
 *    0               4               8
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   | type  | flags |      aux      |            dst_id             |  0
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |             check             |              seq              |  8
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |             tsval             |  (F_ACK:) ack                 | 16
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |     (F_ACK:) sack             |  (F_ACK:) tsecr               | 24
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |     (F_ACK:) reserved (0)     |  type header, data ...           32
 *   +-------+-------+-------+-------+
 *
 *   aux      AM_CHUNK: the fragment id (mod 2^16); 0 otherwise.
 *   dst_id   the receiver's connection id (slot and generation).
 *   check    without F_CSUM: the receiver's connection token (32 random bits it drew for
 *            this connection and gave the peer in the handshake); with F_CSUM: the CRC32C of
 *            the receiver's iface key, that token and the whole datagram with this field
 *            zero - a checksum only a holder of key and token can make.
 *   seq      the segment's sequence number.
 *   tsval    the sender's clock (microseconds, mod 2^32) when the datagram left.
 *   ack      every seq before this one has been received and processed.
 *   sack     bit i set = seq ack+1+i has been received out of order.
 *   tsecr    the tsval of the segment whose arrival this ACK answers (the first one since
 *            the last ACK, or the out-of-order / duplicate one that made it go at once);
 *            0 = none.  Every ACK is thus an unambiguous RTT sample, resends included.
 *   The length is the datagram's: the data runs to its end.
 *
 * The control header, 48 bytes (handshake, COOKIE, HB, RESET, PROBE, explicit ACK):
 *
 *    0               4               8
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   | type  | flags | (0)   |version|              len              |  0
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |                         job_key                               |  8
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |            dst_id             |            src_id             | 16
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |              seq              |              ack              | 24
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |             csum              |             sack              | 32
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |             tsval             |             tsecr             | 40
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *
 *   job_key  the receiver's iface key (random per iface, in its address: udp_handshake.c);
 *            a datagram with another key is dropped.
 *   dst_id   the receiver's connection id (0 in CONN_REQ and PROBE, which create/find one,
 *            and in a RESET answering a data segment, which names the peer by src_id).
 *   src_id   the sender's connection id; must be the peer id the receiver recorded.
 *   len      bytes after the header; must equal the datagram length - 48.
 *   version  FY_UDP_VERSION.
 *   csum     with F_CSUM: CRC32C of the whole datagram computed with this field zero.
 *   seq, ack, sack, tsval, tsecr: as in the data header (explicit ACK: seq is the receive
 *            window with F_RWND).
 */
#ifndef FY_TL_UDP_PROTO_H
#define FY_TL_UDP_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FY_UDP_VERSION                                                                             \
    4 /* 2: timestamps and whole-window SACK; cookie handshake, heartbeats, reset; 3: the          \
         receiver's per-iface key in every datagram, the sender's in the conn msg; 4: the          \
         compact data segment header (connection token or keyed checksum) */
#define FY_UDP_HDR_LEN  48 /* the control header */
#define FY_UDP_DHDR_LEN 20 /* the data segment header */
#define FY_UDP_DACK_LEN 16 /* its ACK block (F_ACK) */

/* Packet types.  Those from FY_UDP_T_AM on carry a sequence number and are reliable. */
enum fy_udp_type {
    FY_UDP_T_CONN_REQ = 1, /* prio: open a connection (fy_udp_conn_msg_t) */
    FY_UDP_T_CONN_ACK,     /* prio: the answer, with the responder's conn id */
    FY_UDP_T_PROBE,        /* data: full-size datagram, checks the path MTU */
    FY_UDP_T_PROBE_ACK,    /* prio: the probe arrived (fy_udp_probe_ack_t) */
    FY_UDP_T_ACK,          /* prio: an explicit (delayed or immediate) ACK, header only */
    /* connection management (udp_handshake.c, udp_live.c), unsequenced */
    FY_UDP_T_COOKIE,   /* prio: answer to a CONN_REQ without a valid cookie (fy_udp_cookie_t) */
    FY_UDP_T_HB,       /* prio -> peer's liveness port: are you alive? (fy_udp_hb_t) */
    FY_UDP_T_HB_ACK,   /* liveness port -> prio: yes (the HB's payload echoed) */
    FY_UDP_T_RESET,    /* prio: the connection dst_id (or src_id) names does not exist */
    FY_UDP_T_AM,       /* a whole fragment: an AM (fy_udp_am_t + data) */
    FY_UDP_T_AM_CHUNK, /* a chunk of a large AM (fy_udp_amchunk_t [+ fy_udp_amfirst_t] + data) */
    FY_UDP_T_PUT,      /* a chunk of a put (fy_udp_chunk_t + fy_udp_rma_t + data) */
    FY_UDP_T_GET_REQ,  /* a get request (fy_udp_get_req_t) */
    FY_UDP_T_GET_RESP, /* a chunk of a get's data (fy_udp_chunk_t + data) */
    FY_UDP_T_RMA_DONE, /* a put's (or refused put_short's) outcome (fy_udp_rma_done_t) */
    FY_UDP_T_MAX
};
#define FY_UDP_T_FIRST_SEQ FY_UDP_T_AM

enum fy_udp_flag {
    FY_UDP_F_ACK = 1u << 0,       /* ack and sack are valid (data: the ACK block follows) */
    FY_UDP_F_CSUM = 1u << 1,      /* csum is valid (data: check is the keyed checksum) */
    FY_UDP_F_DSACK = 1u << 2,     /* this ACK answers a resend (F_RESENT) of a segment already
                                   * held - a needless resend: the sender's reorder window grows */
    FY_UDP_F_ECHO_DATA = 1u << 3, /* the segment tsecr echoes came on the data channel */
    FY_UDP_F_RWND = 1u << 4,      /* (ACK type only) seq is the receiver's window: the bytes,
                                   * in KiB, it can take in flight now (its socket dropped) */
    FY_UDP_F_RESENT = 1u << 5,    /* (sequenced types) a retransmission: a copy the receiver
                                   * already holds proves it needless (DSACK); a network
                                   * duplicate of a first send does not */
};

/* The control header; also the decoded form of a data segment's header (udp_rx.c), where
 * src_id holds aux, len the bytes from the type header on, and job_key / csum are unused. */
typedef struct fy_udp_hdr {
    uint8_t type;
    uint8_t flags;
    uint8_t am_id;
    uint8_t version;
    uint32_t len;
    uint64_t job_key;
    uint32_t dst_id;
    uint32_t src_id;
    uint32_t seq;
    uint32_t ack;
    uint32_t csum;
    uint32_t sack;
    uint32_t tsval;
    uint32_t tsecr;
} fy_udp_hdr_t;
_Static_assert(sizeof(fy_udp_hdr_t) == FY_UDP_HDR_LEN, "udp control header is 48 bytes");
#define FY_UDP_CSUM_OFFSET offsetof(fy_udp_hdr_t, csum)

/* The data segment header as it is on the wire (20 bytes) and its ACK block (16). */
typedef struct fy_udp_dhdr {
    uint8_t type;
    uint8_t flags;
    uint16_t aux;
    uint32_t dst_id;
    uint32_t check;
    uint32_t seq;
    uint32_t tsval;
} fy_udp_dhdr_t;
_Static_assert(sizeof(fy_udp_dhdr_t) == FY_UDP_DHDR_LEN, "udp data header is 20 bytes");
#define FY_UDP_D_DST   offsetof(fy_udp_dhdr_t, dst_id)
#define FY_UDP_D_CHECK offsetof(fy_udp_dhdr_t, check)
#define FY_UDP_D_SEQ   offsetof(fy_udp_dhdr_t, seq)
#define FY_UDP_D_TSVAL offsetof(fy_udp_dhdr_t, tsval)

typedef struct fy_udp_dack {
    uint32_t ack;
    uint32_t sack;
    uint32_t tsecr;
    uint32_t reserved;
} fy_udp_dack_t;
_Static_assert(sizeof(fy_udp_dack_t) == FY_UDP_DACK_LEN, "udp ACK block is 16 bytes");

/*
 * CONN_REQ / CONN_ACK / PROBE payload, 40 bytes (PROBE pads it to the probed size):
 *
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |                       uuid (sender iface)                     |  0
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |   prio_port   |   data_port   |            window             |  8
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |           seg_size            |           prio_mtu            | 16
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |                credit (bytes the sender may have in flight)   | 24
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |                        probe_size                             | 32
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |   live_port   |      pad      |            token              | 40
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |                        cookie                                 | 48
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *
 *   seg_size   largest data-channel datagram the sender will send / accept
 *   window     segments the sender accepts out of order (its receive window)
 *   probe_size PROBE only: the datagram's own size, echoed in PROBE_ACK
 *   live_port  the sender's liveness port (heartbeats are answered there)
 *   cookie     CONN_REQ: the cookie from the responder's COOKIE (0 in the first request)
 *   token      the sender's connection token: the check of every data segment to it
 *   key        the sender's iface key: what the receiver puts in every datagram back
 */
typedef struct fy_udp_conn_msg {
    uint64_t uuid;
    uint16_t prio_port;
    uint16_t data_port;
    uint32_t window;
    uint32_t seg_size;
    uint32_t prio_mtu;
    uint64_t credit;
    uint64_t probe_size;
    uint16_t live_port;
    uint16_t pad;
    uint32_t token;
    uint64_t cookie;
    uint64_t key;
} fy_udp_conn_msg_t;
_Static_assert(sizeof(fy_udp_conn_msg_t) == 64, "conn msg is 64 bytes");

/*
 * COOKIE payload, 16 bytes: the responder's uuid and the cookie the requester must echo in
 * its next CONN_REQ.  The cookie is a keyed hash of the requester's address, uuid and
 * connection id and a coarse clock: the responder keeps no state until it comes back.
 */
typedef struct fy_udp_cookie {
    uint64_t uuid;
    uint64_t cookie;
} fy_udp_cookie_t;

/*
 * HB / HB_ACK payload, 16 bytes: the uuid of the iface the heartbeat is for (its responder
 * answers only for its own iface) and the sender's clock, echoed.  The HB's dst_id / src_id
 * are the connection's ids; the HB_ACK swaps them.
 */
typedef struct fy_udp_hb {
    uint64_t uuid;
    uint64_t tx_ns;
} fy_udp_hb_t;

/* PROBE_ACK payload: the probe size that arrived. */
typedef struct fy_udp_probe_ack {
    uint64_t probe_size;
} fy_udp_probe_ack_t;

/*
 * AM header (AM), 4 bytes: the AM id; the data follows (at byte 24, or 40 with an ACK).
 *
 * AM chunk header (AM_CHUNK), 4 bytes: where this chunk's data lies in the fragment (a
 * 32-bit offset: an AM is at most FERRY_UDP_MAX_ZCOPY < 4 GiB); the fragment's first chunk
 * (offset 0) adds 8 bytes: the fragment's size and its AM id.  A later chunk of a
 * 1500-byte link thus carries 1472 - 24 = 1448 data bytes, as many as a TCP segment with
 * timestamps.  The fragment id is the data header's aux.
 *
 *   +-------+-------+-------+-------+
 *   |            offset             |  0
 *   +-------+-------+-------+-------+
 *   |  (offset 0:) total            |  4
 *   +-------+-------+-------+-------+
 *   |am_id  |  pad                  |  8   (offset 0)
 *   +-------+-------+-------+-------+
 */
typedef struct fy_udp_am {
    uint8_t am_id;
    uint8_t pad[3];
} fy_udp_am_t;
typedef struct fy_udp_amfirst {
    uint32_t offset; /* 0 */
    uint32_t total;
    uint8_t am_id;
    uint8_t pad[3];
} fy_udp_amfirst_t;
#define FY_UDP_AMCHUNK_LEN 4
#define FY_UDP_AMFIRST_LEN 12
#define FY_UDP_AM_XLEN     4
/* An AM's headers with an ACK riding: what max_short / max_bcopy leave room for. */
#define FY_UDP_AM_HDR_MAX (FY_UDP_DHDR_LEN + FY_UDP_DACK_LEN + FY_UDP_AM_XLEN)
/* The largest data header an AM (or a chunk) carries: header, ACK block, first-chunk header. */
#define FY_UDP_DHDR_MAX (FY_UDP_DHDR_LEN + FY_UDP_DACK_LEN + FY_UDP_AMFIRST_LEN)

/*
 * Chunk header (PUT, GET_RESP), 24 bytes: 64-bit offsets (an RMA operation may exceed
 * 4 GiB).
 *
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |             op_id             |status | pad                   |  0
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |                         offset                                |  8
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |                         total                                 | 16
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *
 *   op_id   the initiator's operation id (0 in a PUT: answered only when refused)
 *   status  GET_RESP: 0, or a negative ferry_status_t (the get was refused; total = 0)
 *   offset  where this chunk's data lies in the operation; total: the operation's size
 *   (the receiver also reads an AM_CHUNK into this form: op_id = the fragment id)
 */
typedef struct fy_udp_chunk {
    uint32_t op_id;
    int8_t status;
    uint8_t pad[3];
    uint64_t offset;
    uint64_t total;
} fy_udp_chunk_t;
_Static_assert(sizeof(fy_udp_chunk_t) == 24, "chunk header is 24 bytes");

/*
 * RMA target header (PUT, after the chunk header), 24 bytes: the region (id and key from
 * the rkey) and the target address of the put's byte 0.  The target checks the whole put
 * [addr, addr+total) at offset 0 and every chunk again against the region table.
 *
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 *   |                         region_id                             |  0
 *   |                         key                                   |  8
 *   |                         addr                                  | 16
 *   +-------+-------+-------+-------+-------+-------+-------+-------+
 */
typedef struct fy_udp_rma {
    uint64_t region_id;
    uint64_t key;
    uint64_t addr;
} fy_udp_rma_t;

/* GET_REQ payload, 40 bytes: the operation id, the region and the range to read. */
typedef struct fy_udp_get_req {
    uint32_t op_id;
    uint32_t pad;
    uint64_t region_id;
    uint64_t key;
    uint64_t addr;
    uint64_t len;
} fy_udp_get_req_t;

/* RMA_DONE payload, 8 bytes: a put finished at the target with this status. */
typedef struct fy_udp_rma_done {
    uint32_t op_id;
    int32_t status;
} fy_udp_rma_done_t;

/*
 * ACK payload (optional): an extended SACK bitmap for when more than the header's 32 bits
 * are out of order (small segments, heavy loss).  It reaches the highest segment the
 * receiver holds, so it covers the whole window (up to 16384 segments); an ACK whose bitmap
 * does not fit the priority channel goes on the data channel.
 *
 *   +-------+-------+-------+-------+
 *   |            nbits              |   bits that follow (a multiple of 8, <= 16384)
 *   +-------+-------+-------+-------+
 *   |  bit i of byte i/8 set: seq ack+1+i was received out of order ...
 *   +-------------------------------+
 */
#define FY_UDP_SACK_EXT_BITS 16384
typedef struct fy_udp_sack_ext {
    uint32_t nbits;
    uint8_t bits[FY_UDP_SACK_EXT_BITS / 8];
} fy_udp_sack_ext_t;

/* Bytes of type-specific header before the data of each sequenced type (an AM_CHUNK's
 * first chunk: `first`). */
static inline size_t fy_udp_xhdr_len(uint8_t type, int first)
{
    switch (type) {
    case FY_UDP_T_AM:
        return FY_UDP_AM_XLEN;
    case FY_UDP_T_AM_CHUNK:
        return first ? FY_UDP_AMFIRST_LEN : FY_UDP_AMCHUNK_LEN;
    case FY_UDP_T_GET_RESP:
        return sizeof(fy_udp_chunk_t);
    case FY_UDP_T_PUT:
        return sizeof(fy_udp_chunk_t) + sizeof(fy_udp_rma_t);
    case FY_UDP_T_GET_REQ:
        return sizeof(fy_udp_get_req_t);
    case FY_UDP_T_RMA_DONE:
        return sizeof(fy_udp_rma_done_t);
    default:
        return 0;
    }
}

/* Sequence arithmetic, modulo 2^32. */
static inline int32_t fy_udp_seq_diff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}

/* CRC32C (Castagnoli), hardware-assisted where the CPU has it (udp_csum.c). */
uint32_t fy_udp_crc32c(uint32_t crc, const void *buf, size_t len);
/* The same, a byte at a time whatever the CPU (the portable path; the tests' reference). */
uint32_t fy_udp_crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* What a datagram's checksum field (at `at`: FY_UDP_CSUM_OFFSET, or FY_UDP_D_CHECK) must
 * hold: the CRC32C, continued from `seed`, of its len bytes with that field zero.  Bytes
 * from `split` on are at `rest` when it is not NULL (a chunk received straight into its
 * place), else they follow in `dgram`. */
uint32_t fy_udp_dgram_crc(uint32_t seed, size_t at, const uint8_t *dgram, const uint8_t *rest,
                          size_t split, size_t len);
/* The seed of a data segment's keyed checksum: the CRC32C of the receiver's iface key and
 * its connection token. */
static inline uint32_t fy_udp_check_seed(uint64_t key, uint32_t token)
{
    uint8_t b[12];
    memcpy(b, &key, 8);
    memcpy(b + 8, &token, 4);
    return fy_udp_crc32c(0, b, sizeof(b));
}

#endif
