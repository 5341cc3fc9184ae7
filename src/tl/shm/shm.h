/*
 * shm.h - internals of the shared-memory transport: the segment and cell layout (the wire
 * format between processes), the lock-free ring, and the md / iface / ep / op objects.
 *
 * THE RING.  Every iface owns one segment (util/shmem.h) holding a multi-producer,
 * single-consumer ring of `ring_size` cells of `cell_size` bytes (a power of two, 128 by
 * default: two cache lines, so the adjacent-line prefetcher never couples neighbours), and
 * one buffer of `bcopy_size` bytes per cell.  Each cell begins with a 64-bit state word:
 *
 *    63            35 34 33  32 31                    0
 *   +----------------+--+------+-----------------------+
 *   | owner pid      |S | phase| ticket                |
 *   +----------------+--+------+-----------------------+
 *   phase: FREE (may be claimed for `ticket`), CLAIMED (a producer is writing `ticket`),
 *          READY (ticket is published); S: the consumer sleeps, wake it (FREE only)
 *
 * A producer reads the ring's tail (a hint on its own cache line), claims the cell with one
 * compare-and-swap FREE|t -> CLAIMED|t|pid, advances the tail, writes the message and
 * publishes with one release store READY|t|pid.  Tickets are claimed strictly in order
 * (the tail moves only by CAS from the claimed ticket, and anyone who finds the cell at the
 * tail taken helps it along), so the consumer needs no tail: it checks the one state word of
 * cell `head` and nothing else — one load when idle, no system call, no lock.  A cell still
 * holding the previous lap's message makes the CAS fail with an older ticket: the ring is
 * full and the producer returns FERRY_ERR_NO_RESOURCE, so nothing is ever overwritten.  The
 * consumer frees cells (FREE|t+ring_size) in batches, off the critical path of a ping-pong.
 * Because a claim names its owner, a producer killed between claim and publish is detected
 * (the owner is dead) and its cell skipped instead of blocking the ring forever.  Order per
 * ep follows from the ticket order.  Sleeping: the consumer arms by CAS FREE|head ->
 * FREE|head|S on the cell the next message must take; the producer's claim CAS sees S
 * atomically, so only a producer that finds S sends a wake-up datagram.
 *
 * CELL TYPES.  SHORT: data inline after the 16-byte header.  BCOPY: data in the cell's
 * buffer.  OUTBOX: a descriptor in the buffer naming a slot of the sender's outbox (below)
 * that holds header and data.  PULL: a zcopy descriptor in the buffer (sender pid, iov, reply
 * address, header); the receiver pulls the data with process_vm_readv and answers ZDONE
 * through the sender's ring.  FRAG: one chunk of a zcopy message pushed through the ring
 * where cross-memory attach is denied.  AMO_REQ / AMO_REP: an atomic on memory the initiator
 * cannot map, performed by the target's progress.
 *
 * THE OUTBOX.  Behind its ring and cell buffers every segment has an outbox of
 * FERRY_SHM_OUTBOX_SIZE bytes that only its owner allocates from and writes.  A zero-copy AM
 * of medium size (above the cell buffer, data up to FERRY_SHM_OUTBOX_MAX) is copied once by the
 * sender into a slot of its own outbox and announced by an OUTBOX cell; the receiver, which
 * maps the sender's segment anyway (answers go through it), hands the slot to the AM callback
 * in place and then stores the slot's generation into the slot header's `done` word.  The send
 * is complete when the copy is: no answer, no round trip, no system call on either side, and
 * the copy runs at memcpy speed instead of process_vm_readv's.  Slots are taken in FIFO order
 * from a byte ring; the sender reclaims a slot once `done` matches (or its receiver is dead)
 * and restarts at offset 0 whenever all slots are back, so a stream of messages keeps writing
 * the same cache-warm bytes.  Only its first 8 MiB are reserved at open; the rest (up to 160
 * MiB, for messages up to 64 MiB) is reserved as large messages need it and given back after
 * FERRY_SHM_OUTBOX_IDLE without them.  When the outbox is full, or the message is larger, the
 * send falls back to PULL.  A receiver trusts nothing in a descriptor: the slot must lie inside the
 * outbox of the mapped segment.
 *
 * PULL SLOTS (revocation).  A PULL names the sender's memory, which belongs to the sender's
 * application again as soon as the operation completes — also when ep_destroy or iface_close
 * completes it with FERRY_ERR_CANCELED.  So every published PULL owns one word of a table in
 * the sender's segment, `gen << 2 | state`, and the descriptor carries its index and
 * generation.  The receiver reads the sender's memory only while it holds the word: CAS
 * gen|OPEN -> gen|READING before the copy, store gen|CLOSED after it (before it answers).
 * A sender that cancels a PULL revokes its word: CAS gen|OPEN -> gen|CLOSED; if it finds
 * gen|READING it waits, before completing the operation, until the receiver stores CLOSED
 * (a copy takes micro- to milliseconds; the wait ends early if the receiver dies).  A
 * receiver whose CAS fails drops the message unread and unanswered.  Hence: once a cancel
 * has completed, nobody reads the buffer again.  The cost is one uncontended CAS and one
 * store per pulled message (the outbox and the small paths never pull).
 */
#ifndef FY_TL_SHM_H
#define FY_TL_SHM_H

#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "tl/tl.h"
#include "util/copy.h"
#include "util/hash.h"
#include "util/list.h"
#include "util/mpool.h"
#include "util/region.h"
#include "util/shmem.h"
#include "util/status.h"

/* Address versions: 2, the /dev/shm probe in the device address; 3, pull slots; 4, copy
 * alignment in BCOPY and OUTBOX cell flags; 5, split outbox messages (a peer of another
 * version is refused, saying so); 6, MAPPED cells. */
#define SHM_SEG_MAGIC    0x316d737972726566ull /* "ferrysm1" */
#define SHM_ADDR_VERSION 6
#define SHM_RKEY_MAGIC   0x6b72736du /* "msrk" */

#define SHM_MAX_IOV       16
#define SHM_MAX_ZCOPY_HDR 2048
#define SHM_MAX_WAITERS   16   /* senders that may sleep waiting for room in one ring */
#define SHM_CTL_MAX       24   /* inline bytes of a control message */
#define SHM_RX_BATCH      32   /* cells handled per progress call */
#define SHM_RELEASE_BATCH 16   /* consumed cells freed together */
#define SHM_PULL_SLOTS    1024 /* pull descriptors an iface may have published at once */

/* ---- the cell state word ---- */
#define SHM_PHASE_FREE           0ull
#define SHM_PHASE_CLAIMED        1ull
#define SHM_PHASE_READY          2ull
#define SHM_SLEEP_BIT            (1ull << 34)
#define SHM_OWNER_SHIFT          35
#define SHM_KEY_MASK             0x3ffffffffull /* phase + ticket */
#define SHM_STATE(phase, ticket) (((phase) << 32) | (uint64_t)(uint32_t)(ticket))

enum shm_cell_type {
    SHM_CELL_SHORT = 1,
    SHM_CELL_BCOPY,
    SHM_CELL_PULL,
    SHM_CELL_FRAG,
    SHM_CELL_ZDONE,
    SHM_CELL_AMO_REQ,
    SHM_CELL_AMO_REP,
    SHM_CELL_OUTBOX,
    SHM_CELL_MAPPED,
};

/* A cell: 16-byte header, then inline data up to cell_size. */
typedef struct shm_cell {
    uint64_t state;
    uint8_t type;
    uint8_t am_id;
    uint16_t flags;
    uint32_t len; /* bytes of data (inline or in the buffer) */
    uint8_t data[];
} shm_cell_t;
#define SHM_CELL_HDR sizeof(shm_cell_t)

/* The head of a segment.  Read-mostly fields first; the producers' tail and the waiter
 * slots on cache lines of their own (128-byte apart: adjacent-line prefetch). */
typedef struct shm_seg_hdr {
    uint64_t magic;
    uint64_t id;   /* random; names the iface (and its wake-up socket) */
    uint64_t base; /* where the owner mapped the segment (a CMA probe reads it) */
    uint32_t pid;
    uint32_t ring_size;
    uint32_t cell_size;
    uint32_t bcopy_size;
    uint64_t cells_off, bufs_off, seg_size;
    uint64_t obox_off, obox_size;      /* the outbox: [obox_off, obox_off + obox_size) */
    uint64_t pulls_off;                /* SHM_PULL_SLOTS words: the pull slots (above) */
    uint32_t closed;                   /* the owner closed the iface: its eps fail */
    _Alignas(128) uint32_t tail;       /* producers only */
    _Alignas(128) uint32_t nwaiters;   /* a hint: some slot is taken */
    uint64_t waiters[SHM_MAX_WAITERS]; /* ids of senders waiting for room */
} shm_seg_hdr_t;

/*
 * Device address (48 bytes): the kernel (boot id), and the probe that proves a shared
 * /dev/shm: the md creates /dev/shm/ferry-probe-<probe, 16 hex digits> holding the 8 bytes
 * of `probe` (random); a peer that opens that file and reads the same bytes shares our
 * /dev/shm.  Namespace ids prove nothing either way: two `ip netns exec` shells share it
 * with different mount namespaces, and private mounts hide it in the same ipc namespace.
 */
typedef struct shm_dev_addr {
    uint8_t boot_id[16];
    uint64_t probe;
    uint64_t reserved[3];
} shm_dev_addr_t;

/*
 * Interface address (40 bytes):
 *   | id (8) | seg ino (8) | seg size (8) | pid (4) | seg fd (4) | version (2) | flags (2) |
 *   | bcopy_size (4) |
 */
typedef struct shm_iface_addr {
    uint64_t id;
    uint64_t ino;
    uint64_t size;
    int32_t pid;
    int32_t fd;
    uint16_t version;
    uint16_t flags; /* SHM_ADDR_F_* */
    uint32_t bcopy_size;
} shm_iface_addr_t;
#define SHM_ADDR_F_NO_CMA    1u /* this iface does not pull with cross-memory attach */
#define SHM_ADDR_F_WAKE_PATH 2u /* its wake-up socket is /dev/shm/ferry-wake-<id>, not abstract */

/* A piece of the sender's memory, named in a descriptor. */
typedef struct shm_remote_iov {
    uint64_t addr, len;
} shm_remote_iov_t;

/* A zcopy descriptor (PULL), in the cell's buffer, followed by the AM header. */
typedef struct shm_pull_desc {
    uint64_t cookie;
    uint64_t data_len;
    uint32_t hdr_len;
    uint32_t iovcnt;
    uint32_t slot; /* the sender's pull slot guarding the data, and its generation */
    uint32_t pad;
    uint64_t gen;
    shm_iface_addr_t reply; /* the sender: where ZDONE goes */
    shm_remote_iov_t iov[SHM_MAX_IOV];
} shm_pull_desc_t;

/* An OUTBOX descriptor, in the cell's buffer: header + data are at segment offset `off` of
 * the sender `from`, `len` bytes; the slot header is the 64 bytes before `off - pad` (the
 * cell's flags hold pad: copy alignment, below). */
typedef struct shm_obox_desc {
    shm_iface_addr_t from;
    uint64_t off;
    uint64_t len;
    uint64_t gen;
} shm_obox_desc_t;

/* The header of an outbox slot (64 bytes before its data): the receiver stores the slot's
 * generation into `done` when it no longer reads the slot; the sender of a split message
 * stores it into `ready` when its part is copied. */
#define SHM_OBOX_SLOT_HDR 64u /* then `pad` bytes (cell flags, SHM_PAD_MASK), then the data */
typedef struct shm_obox_slot {
    uint64_t done;
    uint64_t ready;
} shm_obox_slot_t;

/*
 * A split message (cell flag SHM_OBOX_F_SPLIT; this follows the OUTBOX descriptor): both
 * cores copy it into the slot at once.  The sender publishes the cell first, then copies the
 * message's first `cut` bytes (headers included) and stores `ready`; the receiver meanwhile
 * pulls the rest from the sender's memory (`iov`, under a pull slot as a PULL is) into the
 * slot behind them, answers ZDONE (the send completes then), waits for `ready`, and hands
 * the whole slot to am_cb.  One core's copy out of memory runs at about half the rate of a
 * cached one here; two at once make up the difference (bench/RESULTS.md).
 */
#define SHM_OBOX_F_SPLIT 0x100u
typedef struct shm_obox_split {
    uint64_t cookie; /* the sender's operation (ZDONE) */
    uint64_t cut;    /* bytes the sender copies; the receiver pulls [cut, len) */
    uint32_t slot;   /* the sender's pull slot guarding iov, and its generation */
    uint32_t iovcnt;
    uint64_t gen;
    shm_remote_iov_t iov[SHM_MAX_IOV];
} shm_obox_split_t;

/* A MAPPED descriptor (shm_mapped.c), in the cell's buffer, followed by head_len bytes of head
 * (the zcopy header, then the iov's pieces before the last): the data is in the sender's
 * segment `seg`, read in place by the receiver. */
typedef struct shm_mapped_desc {
    uint64_t cookie; /* the sender's operation (ZDONE) */
    uint32_t slot;   /* the sender's pull slot guarding the data, and its generation */
    uint32_t head_len;
    uint64_t gen;
    shm_iface_addr_t reply; /* the sender */
    fy_shmem_ref_t seg;     /* the segment holding the data */
    uint64_t seg_off, data_len;
} shm_mapped_desc_t;
#define SHM_MAPPED_HEAD_MAX 2048 /* more head than this goes by the outbox */

/* A pushed chunk (FRAG): inline; the chunk itself is in the buffer.  cell flags: */
#define SHM_FRAG_ABORT 1u /* the rest will never come: drop what arrived */
typedef struct shm_frag_hdr {
    uint64_t token;  /* sender pid << 32 | sender ep token */
    uint64_t total;  /* header + data of the whole message */
    uint64_t offset; /* of this chunk */
} shm_frag_hdr_t;

/* ZDONE and AMO_REP: inline. */
typedef struct shm_reply {
    uint64_t cookie;
    int32_t status;
    uint32_t pad;
    uint64_t value; /* AMO_REP: the old value */
} shm_reply_t;

/* AMO_REQ: in the buffer. */
typedef struct shm_amo_req {
    uint64_t cookie;
    shm_iface_addr_t reply;
    uint64_t region_id, region_key;
    uint64_t addr, operand, compare;
    uint8_t op, size, fetch, pad[5];
} shm_amo_req_t;

_Static_assert(sizeof(shm_reply_t) <= SHM_CTL_MAX && sizeof(shm_frag_hdr_t) <= SHM_CTL_MAX &&
                   SHM_CELL_HDR + SHM_CTL_MAX <= 64,
               "control messages must fit inline in the smallest cell");
_Static_assert(sizeof(shm_pull_desc_t) + SHM_MAX_ZCOPY_HDR <= 4096 &&
                   sizeof(shm_amo_req_t) <= 4096 &&
                   sizeof(shm_obox_desc_t) + sizeof(shm_obox_split_t) <= 4096,
               "requests must fit the smallest cell buffer");

/* A pull slot word: generation << 2 | state. */
#define SHM_PULL_CLOSED        0ull /* read and done with, revoked, or never used */
#define SHM_PULL_OPEN          1ull /* published: the receiver may take it */
#define SHM_PULL_READING       2ull /* the receiver copies the sender's memory now */
#define SHM_PULL_WORD(gen, st) (((uint64_t)(gen) << 2) | (st))

/* Status in a ZDONE that asks the sender to push the data through the ring instead. */
#define SHM_STATUS_NEED_PUSH 1000

/* ---- memory keys ---- */
typedef struct shm_rkey_packed {
    uint32_t magic;
    uint32_t access;
    uint64_t base, length;
    uint64_t region_id, region_key;
    fy_shmem_ref_t shm; /* shm.pid is always the owner; shm.fd < 0: not shared memory */
    uint64_t shm_offset;
} shm_rkey_packed_t;

typedef struct shm_rkey {
    shm_rkey_packed_t p;
    char *mapped; /* where base is in this process, or NULL */
    void *attach; /* fy_shmem_attach()ed segment, or NULL */
} shm_rkey_t;

typedef struct shm_memh {
    fy_region_t region;
    fy_shmem_ref_t shm;
    uint64_t shm_offset;
} shm_memh_t;

/* ---- configuration (FERRY_SHM_*) ---- */
typedef struct shm_opts {
    unsigned long ring_size;
    size_t cell_size;
    size_t bcopy_size;
    size_t zcopy_thresh;
    int cma;
    uint64_t liveness_ns;
    size_t rx_keep;
    size_t obox_size;
    size_t obox_max;
    size_t obox_split;
    uint64_t obox_idle_ns;
    size_t mapped_thresh;
} shm_opts_t;

typedef struct shm_md {
    fy_tl_md_t super;
    shm_opts_t opts;
    shm_dev_addr_t dev_addr;
    char probe_path[64]; /* our /dev/shm probe file, removed at md_close ("" if none) */
    int32_t probe_pid;   /* who made it */
} shm_md_t;

/* A peer iface this iface sends to or answers: its mapped segment and liveness. */
typedef struct shm_peer {
    uint64_t id;
    shm_iface_addr_t addr;
    shm_seg_hdr_t *hdr;
    char *cells, *bufs;
    uint32_t mask;
    unsigned cell_shift;
    uint32_t bcopy_size;
    uint64_t obox_lo, obox_hi; /* its outbox, as segment offsets (checked when mapped) */
    uint64_t *pulls;           /* its pull slots (SHM_PULL_SLOTS words) */
    int pidfd;
    unsigned refs;         /* eps and outbox slots that point here */
    ferry_status_t status; /* FERRY_OK while alive */
    int full;              /* a send found the ring full since the last arm */
    struct sockaddr_un sun;
    socklen_t sunlen;
    fy_list_t replies;   /* shm_pending_ctl_t waiting for room */
    fy_list_t link;      /* iface->peers */
    fy_list_t full_link; /* iface->full_peers */
} shm_peer_t;

/* A control message (an answer, an abort) that found the peer's ring full. */
typedef struct shm_pending_ctl {
    fy_list_t link;
    uint8_t type;
    uint16_t flags;
    uint32_t len;
    uint8_t data[SHM_CTL_MAX];
} shm_pending_ctl_t;

#define SHM_PULL_NONE UINT32_MAX

enum shm_op_type { SHM_OP_PULL, SHM_OP_PUSH, SHM_OP_AMO, SHM_OP_FLUSH };

typedef struct shm_ep shm_ep_t;

typedef struct shm_op {
    fy_list_t link; /* ep->ops, in issue order */
    uint64_t cookie;
    shm_ep_t *ep;
    fy_tl_comp_t *comp; /* NULL: no completion owed (non-fetching AMO) */
    uint8_t type;
    uint8_t am_id;
    uint8_t probe;      /* a PULL that tests whether the peer can pull from us */
    uint32_t pull_slot; /* PULL: our pull slot guarding its data, or SHM_PULL_NONE */
    uint64_t pull_gen;
    void *result; /* AMO: where the old value goes */
    size_t amo_size;
    /* PULL (kept for a fallback to PUSH) and PUSH: the message */
    size_t hdr_len, total, offset;
    size_t iovcnt;
    struct iovec iov[SHM_MAX_IOV];
    char hdr[SHM_MAX_ZCOPY_HDR];
} shm_op_t;

enum shm_zc_mode { SHM_ZC_UNKNOWN, SHM_ZC_PULL, SHM_ZC_PUSH };
/* ep->blocked bits: any of them makes a send take the slow path */
#define SHM_EP_FAILED  1u
#define SHM_EP_PROBING 2u
#define SHM_EP_PUSHING 4u

typedef struct shm_iface shm_iface_t;

struct shm_ep {
    fy_tl_ep_t super;
    /* the fast path: the peer's ring */
    char *cells;
    uint32_t *tail;
    uint32_t mask;
    unsigned cell_shift;
    uint32_t inline_max;
    uint32_t bcopy_size;
    uint32_t short_max; /* am_short takes up to this inline: min(inline_max, our max_short) */
    uint32_t bcopy_max; /* am_bcopy refuses more: min(bcopy_size, our max_bcopy) */
    char *bufs;
    uint64_t owner; /* our pid, shifted into a state word */
    unsigned blocked;
    uint64_t last_rx; /* iface rx count at our last send: unchanged means streaming */
    /* the rest */
    shm_iface_t *iface;
    shm_peer_t *peer;
    uint32_t token;
    ferry_status_t status;
    int zc_mode;
    int cma_ok; /* we can read/write the peer with process_vm_*v */
    int notified;
    shm_op_t *push_op;
    fy_list_t ops;
    fy_list_t link;      /* iface->eps */
    fy_list_t push_link; /* iface->push_eps */
    uint64_t flush_mark; /* tx_msgs + tx_bytes when a flush last found the peer alive */
    ferry_ep_stats_t stats;
};

/* A slot of our outbox not yet given back (sender side).  Up to SHM_OBOX_QMAX of them: more
 * than a window of 64 messages and its acknowledgement, so a stream of medium messages never
 * finds the queue full and falls back to a pull. */
#define SHM_OBOX_QMAX     256
#define SHM_OBOX_WAIT_MIN (32u << 10) /* smaller messages never wait for a slot */
/* The outbox's base: its first SHM_OBOX_BASE bytes are reserved when the iface opens, and
 * slots of up to SHM_OBOX_SMALL bytes (messages up to 2 MiB) stay inside it, so the common
 * sizes use and hold no more memory than an 8 MiB outbox.  Larger messages may use the whole
 * outbox, whose pages beyond the base are reserved when a slot first reaches them. */
#define SHM_OBOX_BASE    (8u << 20)
#define SHM_OBOX_SMALL   ((2u << 20) + 4096u)
#define SHM_OBOX_RESERVE (2u << 20) /* reserved at a time beyond the base */
/* Slots of messages up to 16 MiB stay in the outbox's first SHM_OBOX_MID_END bytes (what the
 * whole outbox was before it grew for larger messages), so that a stream of them keeps
 * rewriting the same memory; only larger ones spread over the rest (shm_obox.c). */
#define SHM_OBOX_MID     ((16u << 20) + 8192u)
#define SHM_OBOX_MID_END (40u << 20)
/* Slots of up to this size for a message the receiver copies out (FY_TL_COMP_F_RX_COPIES:
 * tagged messages), taken when nothing is out, move on through the outbox's first
 * SHM_OBOX_ROTATE bytes instead of starting over at 0 (shm_obox.c).  A slot above half of
 * SHM_OBOX_ROTATE finds no room to move on and starts over at 0 anyway. */
#define SHM_OBOX_ROTATE_MAX ((1u << 20) + 4096u)
#define SHM_OBOX_ROTATE     (2u << 20)

/* The most of a ring (its header, cells and buffers) an iface maps and touches when it opens,
 * and a sender when it attaches (fy_shmem_populate): all of it with the defaults (256 cells of
 * 128 B, 8 KiB buffers: 2.1 MiB); a ring configured larger maps the rest as it is first used
 * (RING_SIZE 65536 with 1 MiB buffers would otherwise be 64 GiB at every attach). */
#define SHM_POPULATE_MAX ((size_t)16 << 20)

typedef struct shm_obox_entry {
    uint64_t off, size, gen; /* off: from the outbox start; size: header + data, aligned */
    shm_peer_t *peer;        /* the receiver (its death frees the slot) */
} shm_obox_entry_t;

typedef struct shm_frag_rx {
    uint64_t token;
    char *buf;
    size_t total, got;
    uint8_t am_id;
} shm_frag_rx_t;

struct shm_iface {
    fy_tl_iface_t super;
    /* the receive ring (hot) */
    char *cells;
    char *bufs;
    uint32_t head;     /* next ticket to consume */
    uint32_t released; /* tickets below this are FREE again */
    uint32_t mask;
    unsigned cell_shift;
    uint32_t bcopy_size;
    int in_progress;
    uint64_t owner;
    uint64_t polls;
    /* slow-path work pending: pushes, replies, failed peers */
    fy_list_t push_eps;
    unsigned nreplies;
    int pending_fail;
    int pending_reap; /* failed peers may have lost their last reference */
    /* the rest */
    shm_md_t *md;
    shm_seg_hdr_t *hdr;
    void *seg;
    uint64_t id;
    shm_iface_addr_t addr;
    int sock;        /* bound wake-up socket */
    int txsock;      /* to send wake-ups */
    int epfd;        /* the event fd: sock + peer pidfds */
    int cma_ok;      /* we pull with process_vm_readv (FERRY_SHM_CMA) */
    fy_hash_t peers; /* id -> shm_peer_t */
    fy_list_t peer_list;
    fy_list_t full_peers;
    fy_list_t eps;
    fy_hash_t ops; /* cookie -> shm_op_t */
    uint64_t next_cookie;
    fy_mpool_t op_mp;
    fy_hash_t frags; /* token -> shm_frag_rx_t */
    /* the outbox (sender side): slots in FIFO order */
    char *obox;
    uint64_t obox_off, obox_size, obox_max, obox_gen;
    uint64_t obox_base;     /* min(obox_size, SHM_OBOX_BASE): where small slots stay */
    uint64_t obox_reserved; /* bytes of the outbox reserved so far (posix_fallocate) */
    uint64_t obox_next;     /* where the last slot taken ends (shm_obox.c: rotation) */
    uint64_t obox_big_ns;   /* when a slot last reached beyond the base (giving memory back) */
    int obox_timer;         /* a timerfd in the event fd's set: a sleeper wakes to give it back */
    unsigned obox_first, obox_count, obox_nowait;
    shm_obox_entry_t obox_q[SHM_OBOX_QMAX];
    /* pull slots (sender side): the table in our segment, the free ones */
    uint64_t *pulls;
    uint64_t pull_gen;
    unsigned pull_nfree;
    uint16_t pull_free[SHM_PULL_SLOTS];
    char *rxbuf; /* the kept receive buffer of pulls (shm_rx.c) */
    size_t rxbuf_size;
    uint64_t rxbuf_used_ns; /* when a pull last used it (giving a large one back) */
    uint64_t next_check_ns;
    uint32_t stuck_ticket;
    int stuck_seen;
    uint64_t probe_seen, wake_seen; /* the last peer probe / wake-up socket found reachable */
    char
        wake_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* our wake-up socket's file in
                                                                   /dev/shm ("": an abstract one) */
    int32_t wake_pid; /* who bound it (a forked child leaves it to its parent) */
    struct {
        uint64_t rx_msgs, rx_bytes, rx_pull, rx_frag, rx_amo, rx_obox, drops_malformed, drops_dead;
        uint64_t drops_revoked, revoke_waits;
        uint64_t tx_obox, obox_full, tx_split, rx_split, obox_shrunk, rx_shrunk;
        uint64_t tx_mapped, rx_mapped;
        uint64_t wakeups_sent, full, skipped_dead;
    } stats;
};

/* ---- the ring, inline for the fast paths ---- */

/* The buffer that goes with the cell of `ticket` in ep's peer ring. */
static inline char *shm_cell_buf(const shm_ep_t *ep, uint32_t ticket)
{
    return ep->bufs + (size_t)(ticket & ep->mask) * ep->bcopy_size;
}

static inline shm_cell_t *shm_cell_at(char *cells, unsigned shift, uint32_t mask, uint32_t t)
{
    return (shm_cell_t *)(cells + ((size_t)(t & mask) << shift));
}

static inline void shm_prefetchw(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 1, 3);
#endif
}

/*
 * Claim the next cell of a ring.  Returns the cell and its ticket, or NULL when the ring is
 * full.  *wake is set when the consumer armed itself to sleep on this cell.
 */
static inline shm_cell_t *shm_ring_claim(char *cells, uint32_t *tailp, uint32_t mask,
                                         unsigned shift, uint64_t owner, uint32_t *ticket_p,
                                         int *wake)
{
    uint32_t pos = __atomic_load_n(tailp, __ATOMIC_RELAXED);
    for (;;) {
        shm_cell_t *c = shm_cell_at(cells, shift, mask, pos);
        uint64_t expect = SHM_STATE(SHM_PHASE_FREE, pos);
        uint64_t claim = owner | SHM_STATE(SHM_PHASE_CLAIMED, pos);
        int ok = __atomic_compare_exchange_n(&c->state, &expect, claim, 0, __ATOMIC_ACQUIRE,
                                             __ATOMIC_RELAXED);
        if (FY_UNLIKELY(!ok) && expect == (SHM_STATE(SHM_PHASE_FREE, pos) | SHM_SLEEP_BIT)) {
            ok = __atomic_compare_exchange_n(&c->state, &expect, claim, 0, __ATOMIC_ACQUIRE,
                                             __ATOMIC_RELAXED);
            *wake = ok;
        }
        uint32_t p = pos;
        if (FY_LIKELY(ok)) {
            __atomic_compare_exchange_n(tailp, &p, pos + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
            *ticket_p = pos;
            return c;
        }
        if ((int32_t)((uint32_t)expect - pos) < 0)
            return NULL; /* the previous lap's message is still there: full */
        /* Ticket pos is taken (or long done): move the tail past it, then retry there. */
        if (__atomic_compare_exchange_n(tailp, &p, pos + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            pos = pos + 1;
        else
            pos = p;
    }
}

/* Fill a claimed cell's header (every field: cells are reused). */
static inline void shm_cell_hdr(shm_cell_t *c, unsigned type, unsigned am_id, unsigned flags,
                                size_t len)
{
    c->type = (uint8_t)type;
    c->am_id = (uint8_t)am_id;
    c->flags = (uint16_t)flags;
    c->len = (uint32_t)len;
}

static inline void shm_ring_publish(shm_cell_t *c, uint64_t owner, uint32_t ticket)
{
    __atomic_store_n(&c->state, owner | SHM_STATE(SHM_PHASE_READY, ticket), __ATOMIC_RELEASE);
}

/*
 * Copy alignment.  A copy of a few KiB or more is `rep movsb` (in glibc's memcpy and in the
 * kernel's CMA), and on some cores (AMD Zen 3 measured here) it runs 5-20x slower when the
 * destination sits a few bytes past the source modulo 4 KiB: 4 KiB from page-aligned memory to
 * 8 bytes into a buffer took 1.6-2.4 us instead of 0.1.  A message copied through shared memory
 * starts with headers of 8 or 16 bytes, so its payload landed exactly there.  So a copied
 * message of SHM_PAD_MIN bytes or more starts `pad` (0..63) bytes into its buffer, chosen so
 * that its last piece (the payload) is at the same offset within a cache line as the sender's
 * source; BCOPY and OUTBOX cells carry `pad` in their flags, and a pulling receiver places the
 * data the same way in its receive buffer.
 */
#define SHM_PAD_MASK 63u
#define SHM_PAD_MIN  2048u
static inline unsigned shm_copy_pad(uintptr_t dst, const struct iovec *iov, size_t iovcnt,
                                    size_t total)
{
    if (total < SHM_PAD_MIN || iovcnt == 0)
        return 0;
    const struct iovec *last = &iov[iovcnt - 1];
    size_t before = total - last->iov_len;
    return (unsigned)(((uintptr_t)last->iov_base - dst - before) & SHM_PAD_MASK);
}

static inline void shm_iov_gather(void *dst, const struct iovec *iov, size_t iovcnt)
{
    char *p = dst;
    for (size_t i = 0; i < iovcnt; i++) {
        fy_copy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
}

/* ---- between the files ---- */
extern const fy_tl_component_t fy_tl_shm_component;
extern const fy_config_table_t fy_shm_config_table;

/* shm_md.c */
ferry_status_t fy_shm_region_check(uint64_t id, uint64_t key, uint64_t addr, size_t len,
                                   unsigned access, void **local);

/* shm_iface.c */
ferry_status_t fy_shm_iface_open(fy_tl_md_t *md, const fy_tl_iface_params_t *params,
                                 fy_tl_iface_t **iface_p);
void fy_shm_iface_close(fy_tl_iface_t *iface);
void fy_shm_iface_query(fy_tl_iface_t *iface, fy_tl_iface_attr_t *attr);
ferry_status_t fy_shm_iface_get_address(fy_tl_iface_t *iface, void *dev_addr, void *iface_addr);
int fy_shm_iface_is_reachable(fy_tl_iface_t *iface, const void *dev_addr, const void *iface_addr);
void fy_shm_iface_unreachable_why(fy_tl_iface_t *iface, const void *dev_addr,
                                  const void *iface_addr, char *buf, size_t len);
unsigned fy_shm_iface_progress(fy_tl_iface_t *iface);
int fy_shm_iface_event_fd(fy_tl_iface_t *iface);
ferry_status_t fy_shm_iface_event_arm(fy_tl_iface_t *iface);
void fy_shm_iface_print(fy_tl_iface_t *iface, FILE *f);
/* The head cell stays claimed by a process that died: skip it. */
void fy_shm_check_stuck(shm_iface_t *iface);

/* shm_rx.c: handle one published cell of our ring (ticket says which buffer is its). */
void fy_shm_dispatch(shm_iface_t *iface, shm_cell_t *c, uint32_t ticket);
/* Free the kept receive buffer / a half-received pushed message. */
void fy_shm_rx_free(shm_iface_t *iface);
/* Give the kept receive buffer back when it is large and no pull used it for OUTBOX_IDLE;
 * when it will be due (UINT64_MAX: never). */
uint64_t fy_shm_rx_idle(shm_iface_t *iface, uint64_t now);
void fy_shm_frag_free(shm_frag_rx_t *f);

/* shm_peer.c */
/* The wake-up socket of iface id: the file /dev/shm/ferry-wake-<id> (path != 0: seen by every
 * process that shares this /dev/shm, whatever its network namespace), or the abstract name
 * "\0ferry-shm-<id>" (one network namespace) where /dev/shm could not hold a socket. */
void fy_shm_sock_name(uint64_t id, int path, struct sockaddr_un *sun, socklen_t *len);
/* Wake the iface id that left itself in one of our waiter slots. */
void fy_shm_wake_id(shm_iface_t *iface, uint64_t id);
int fy_shm_pid_is_dead(pid_t pid); /* exited, even if not yet reaped */
/* The peer iface at addr, mapped on first use and kept until the iface closes. */
ferry_status_t fy_shm_peer_get(shm_iface_t *iface, const shm_iface_addr_t *addr,
                               shm_peer_t **peer_p);
void fy_shm_send_wake(shm_iface_t *iface, const struct sockaddr_un *sun, socklen_t len);
void fy_shm_peer_wake(shm_iface_t *iface, shm_peer_t *peer);
/* A send found the peer's ring full (remembered for arm; notices a closed peer). */
void fy_shm_peer_full(shm_iface_t *iface, shm_peer_t *peer);
/* Free failed peers nothing points to any more (their fd and mapping); from progress only. */
void fy_shm_peers_reap(shm_iface_t *iface);
/* Is the peer alive now (a fresh look)?  If not it is failed, as fy_shm_peer_fail does. */
int fy_shm_peer_check(shm_iface_t *iface, shm_peer_t *peer);
/* Give back outbox slots their receivers are done with (shm_obox.c). */
void fy_shm_obox_reclaim(shm_iface_t *iface);
/* Give the memory of the outbox beyond its base back to the system once nothing has used it
 * for FERRY_SHM_OUTBOX_IDLE (from the liveness check). */
void fy_shm_obox_idle(shm_iface_t *iface, uint64_t now);
/* Before the worker sleeps: have the event fd wake it when the grown outbox is due back. */
void fy_shm_obox_arm(shm_iface_t *iface);
/* shm_obox.c: a slot of `need` bytes (header included, a multiple of 64) for a message to
 * peer, NULL when the outbox is full; the message's pieces gathered into it */
shm_obox_entry_t *fy_shm_obox_alloc(shm_iface_t *iface, uint64_t need, shm_peer_t *peer,
                                    int rotate);
void fy_shm_obox_gather(char *dst, const struct iovec *iov, size_t iovcnt, size_t total);
/* The peer is gone: its eps fail from the next progress. */
void fy_shm_peer_fail(shm_iface_t *iface, shm_peer_t *peer, ferry_status_t status);
int fy_shm_peer_has_room(const shm_peer_t *peer);
/* Ask the peer to wake us when it frees cells; 0 if all its waiter slots are taken. */
int fy_shm_peer_add_waiter(shm_iface_t *iface, shm_peer_t *peer);
/* Send an inline control cell to a peer (len bytes of data, <= SHM_CTL_MAX; the cell's len
 * field says len_field), queued in order if its ring is full. */
void fy_shm_send_ctl(shm_iface_t *iface, shm_peer_t *peer, uint8_t type, uint16_t flags,
                     const void *data, uint32_t len, uint32_t len_field);
/* Answer a request (ZDONE, AMO_REP) to the iface at `to`. */
void fy_shm_reply(shm_iface_t *iface, const shm_iface_addr_t *to, uint8_t type, uint64_t cookie,
                  ferry_status_t status, uint64_t value);
/* Retry queued control messages; returns how many went out. */
unsigned fy_shm_flush_ctl(shm_iface_t *iface);
/* Dead or closed peers, dead claims in our ring, orphaned pushed messages. */
void fy_shm_check_liveness(shm_iface_t *iface);

/* shm_ep.c */
ferry_status_t fy_shm_ep_create(fy_tl_iface_t *iface, const void *dev_addr, const void *iface_addr,
                                fy_tl_ep_t **ep_p);
void fy_shm_ep_destroy(fy_tl_ep_t *ep);
ferry_status_t fy_shm_ep_flush(fy_tl_ep_t *ep, fy_tl_comp_t *comp);
ferry_status_t fy_shm_ep_get_stats(fy_tl_ep_t *ep, ferry_ep_stats_t *stats);
ferry_status_t fy_shm_am_short(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_shm_am_bcopy(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
/* The peer's ring was full: remember it (arm), and the status a send returns for it. */
ferry_status_t fy_shm_ep_full(shm_ep_t *ep);
ferry_status_t fy_shm_am_zcopy(fy_tl_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                               const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp);
void fy_shm_zdone(shm_iface_t *iface, const shm_reply_t *r);
unsigned fy_shm_push_progress(shm_iface_t *iface);

/* shm_mapped.c: zcopy data in FERRY_MEM_ALLOCATE memory, read by the receiver in place.  Send:
 * 1 when it went (or failed: *st), 0 when not for this path. */
int fy_shm_mapped_send(shm_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                       const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp,
                       ferry_status_t *st);
void fy_shm_rx_mapped(shm_iface_t *iface, uint8_t am_id, const char *buf, uint32_t len);

/* shm_op.c: outstanding operations, their completion, pull slots */
shm_op_t *fy_shm_op_new(shm_ep_t *ep, uint8_t type, fy_tl_comp_t *comp);
void fy_shm_op_complete(shm_op_t *op, ferry_status_t status);
void fy_shm_op_drop(shm_op_t *op);
void fy_shm_ep_fail(shm_ep_t *ep, ferry_status_t status);
/* The reader takes a peer's pull slot word (0: revoked, drop unread) and lets it go. */
int fy_shm_pull_take(uint64_t *w, uint64_t gen);
void fy_shm_pull_let_go(uint64_t *w, uint64_t gen);
/* Take a free pull slot for op under a new generation (0: none free); give it back. */
int fy_shm_pull_slot_get(shm_iface_t *iface, shm_op_t *op);
void fy_shm_pull_slot_put(shm_iface_t *iface, shm_op_t *op);
/* Move ep's outstanding operations to out, revoking their pulls first; then complete them
 * all with one status. */
void fy_shm_ep_detach_ops(shm_ep_t *ep, fy_list_t *out);
void fy_shm_ops_complete_detached(shm_iface_t *iface, fy_list_t *ops, ferry_status_t status);

/* shm_rma.c */
ferry_status_t fy_shm_put_short(fy_tl_ep_t *ep, const void *buf, size_t len, uint64_t remote_addr,
                                const void *rkey);
ferry_status_t fy_shm_put_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
ferry_status_t fy_shm_get_short(fy_tl_ep_t *ep, void *buf, size_t len, uint64_t remote_addr,
                                const void *rkey);
ferry_status_t fy_shm_get_zcopy(fy_tl_ep_t *ep, const struct iovec *iov, size_t iovcnt,
                                uint64_t remote_addr, const void *rkey, fy_tl_comp_t *comp);
ferry_status_t fy_shm_atomic(fy_tl_ep_t *ep, ferry_atomic_op_t op, size_t size, uint64_t operand,
                             uint64_t compare, void *result, uint64_t remote_addr, const void *rkey,
                             fy_tl_comp_t *comp);
/* Copy between local and remote iov lists with process_vm_readv (write = 0) or
 * process_vm_writev, across partial transfers; the lists are consumed.  0 or an errno. */
int fy_shm_cma_copy(pid_t pid, struct iovec *l, size_t lcnt, struct iovec *r, size_t rcnt,
                    int write);
void fy_shm_amo_serve(shm_iface_t *iface, const shm_amo_req_t *req);
void fy_shm_amo_reply(shm_iface_t *iface, const shm_reply_t *r);

#endif
