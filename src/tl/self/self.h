/*
 * self.h - internals of the self transport (workers of one process, and a worker to itself):
 * the ring and its cells, the port, and the objects a sender lends a receiver.  There is no
 * lock, no allocation and no system call on the path of a message.
 *
 * A message is copied into the target interface's ring and delivered from the target
 * worker's progress, never from the sender's call: a handler always runs on the thread that
 * drives its worker.  The two workers may be driven by two threads or by one.
 *
 * THE PORT.  Each interface owns a port: its receive ring, its event fd and the counters
 * other threads touch.  Ports are found by id in a process-wide table (a mutex, taken only by
 * iface_open, iface_close and ep_create); an ep holds a counted reference to its target's
 * port, so a port outlives its interface while anyone can still write to it, and a message
 * to an interface that has closed fails with FERRY_ERR_NOT_CONNECTED instead of touching
 * freed memory.  References are held by the interface, by every ep that targets it, and by
 * every zero-copy send of its interface still out; the last one frees the ring and closes
 * the event fd.
 *
 * THE RING.  A multi-producer, single-consumer ring of SELF_RING_CELLS cells of 64 bytes.  A
 * message takes one or more consecutive cells: a 16-byte header (state word, length, AM id)
 * and then its data, contiguous, so the handler reads it in place.  The ring's tail word
 * holds the next free ticket and two flags:
 *
 *     63      62       61                                 0
 *    +-------+--------+------------------------------------+
 *    | SLEEP | CLOSED | next ticket                        |
 *    +-------+--------+------------------------------------+
 *
 * A producer claims tickets [t, t + n) with one compare-and-swap on tail, once it knows they
 * are free: the consumer stores how far it has consumed in `released` (its own cache line),
 * and an ep caches released + ring size as `limit`, reloading it only when about to run past
 * it.  A full ring is FERRY_ERR_NO_RESOURCE, never a wait.  A message that would cross the
 * ring's end is preceded by a PAD over the rest of the lap.  The producer writes the message,
 * then publishes it with one release store of the first cell's state word:
 *
 *     63                                           8 7        0
 *    +----------------------------------------------+----------+
 *    | ticket (low 56 bits)                         | type     |
 *    +----------------------------------------------+----------+
 *
 * The consumer looks at the state word of cell `head` and nothing else (one load when idle);
 * a word left from an older lap names an older ticket and cannot match.  Continuation cells
 * carry data where a state word would be, so the consumer zeroes those words after the
 * handler returns: the first word of every cell is then zero or an old state word, whatever
 * the data was.  Tickets are claimed in order, so the messages of one ep are delivered in the
 * order they were sent (FY_TL_CAP_AM_ORDERED), whatever path each took.
 *
 * SLEEPING.  event_arm sets SLEEP in tail with a compare-and-swap that succeeds only if tail
 * equals head (nothing claimed); a producer's claim then fails once, sees SLEEP, claims with
 * it cleared, and writes the event fd after publishing.  Whichever comes first in tail's
 * order wins, so no message slips between "nothing to do" and "going to sleep", and a
 * producer that finds no SLEEP pays nothing.  iface_close sets CLOSED the same way: from then
 * on a claim fails with FERRY_ERR_NOT_CONNECTED, so nothing enters a ring its owner drained.
 *
 * CELL TYPES.  SHORT: up to SELF_MAX_SHORT bytes inline.  BUF (bcopy, up to SELF_MAX_BCOPY):
 * the sender copies into a buffer of its own pool and the cell carries a pointer; the handler
 * reads the buffer in place.  ZCOPY: the cell points at a descriptor of the sender (a copy of
 * the header, the caller's iov, comp).  The receiver hands one contiguous piece (no header,
 * one iov) to the handler where it lies, without any copy, or gathers header and pieces into
 * a buffer it keeps (the handler must see them contiguous).  Either way the sender's comp is
 * called from the sender's progress once the receiver no longer reads the caller's memory.
 *
 * HANDING BACK.  A buffer or descriptor (a tx) has one atomic state word: PENDING in a ring,
 * READING (a receiver reads the caller's memory of a zcopy), CANCELED (the sender withdrew a
 * zcopy nobody had read), DONE (the receiver has let go).  The sender reuses a tx only once
 * it is DONE: buffers are reaped from a FIFO when the next one is needed, descriptors when
 * the port's zc_done counter moves (receivers bump it and write the sender's event fd if it
 * armed zsleep).  When the sender's interface closes it sets ORPHAN on every tx still out and
 * whichever side comes second frees it; a zcopy another thread is reading is waited for,
 * since the caller's buffer is about to be handed back.  ep_destroy settles its ep's zcopies
 * at once (CANCELED if unread, the real status if read), as the transport contract asks.
 *
 * Files: self.c (memory domain, interface, receiving, endpoints, RMA), self_tx.c (sending:
 * the ring claim, the buffer pool, zero-copy descriptors and their completion).
 */
#ifndef FY_TL_SELF_H
#define FY_TL_SELF_H

#include <stdint.h>
#include <string.h>

#include "tl/tl.h"
#include "util/list.h"
#include "util/status.h"

/* ---- sizes ---- */
#define SELF_CELL_SHIFT    6
#define SELF_CELL_SIZE     (1u << SELF_CELL_SHIFT)
#define SELF_RING_CELLS    4096u /* 256 KiB per interface: 31 messages of SELF_MAX_SHORT */
#define SELF_CELL_HDR      16u
#define SELF_MAX_SHORT     (8192u - SELF_CELL_HDR) /* inline: 128 cells at most */
#define SELF_MAX_BCOPY     (4u << 20)
#define SELF_MAX_IOV       32
#define SELF_MAX_ZCOPY_HDR 64
#define SELF_RX_BATCH      64 /* messages delivered per progress call */

/* Buffers of the bcopy pool come in classes of 2^k + SELF_BUF_SLACK bytes (the slack takes
 * proto's header, so a 1 MiB message fits the 1 MiB class).  The pool keeps what a burst
 * needed, so a stream runs on warm, already faulted buffers; above SELF_BUF_IDLE_KEEP, idle
 * buffers are freed once the pool has gone SELF_BUF_TRIM_NS without use. */
#define SELF_BUF_MIN_SHIFT  13
#define SELF_BUF_MAX_SHIFT  22
#define SELF_BUF_CLASSES    (SELF_BUF_MAX_SHIFT - SELF_BUF_MIN_SHIFT + 1)
#define SELF_BUF_SLACK      256u
#define SELF_BUF_HDR        64u         /* the buffer's header; data starts a cache line in */
#define SELF_BUF_FLIGHT_MAX (64u << 20) /* buffer bytes out at once per interface, at most */
#define SELF_BUF_IDLE_KEEP  (8u << 20)
#define SELF_BUF_TRIM_NS    200000000ull
#define SELF_ZC_FLIGHT_MAX  1024       /* zcopies out at once per interface */
#define SELF_ZC_IDLE_MAX    64         /* descriptors kept for reuse */
#define SELF_RXBUF_KEEP     (8u << 20) /* a larger gather buffer is freed after use */

_Static_assert(SELF_MAX_BCOPY <= (1u << SELF_BUF_MAX_SHIFT) + SELF_BUF_SLACK,
               "the largest bcopy must fit the largest buffer class");
_Static_assert(SELF_MAX_SHORT < (1u << SELF_BUF_MIN_SHIFT) + SELF_BUF_SLACK,
               "every bcopy above SELF_MAX_SHORT must fit a buffer class");

/* ---- the tail word and the cell state word ---- */
#define SELF_TAIL_SLEEP   (1ull << 63)
#define SELF_TAIL_CLOSED  (1ull << 62)
#define SELF_TICKET_MASK  (SELF_TAIL_CLOSED - 1)
#define SELF_STATE(t, ty) (((uint64_t)(t) << 8) | (ty))

enum self_cell_type { SELF_CELL_SHORT = 1, SELF_CELL_BUF, SELF_CELL_ZCOPY, SELF_CELL_PAD };

/* A cell.  SHORT: len bytes of data follow (over as many cells as needed).  BUF / ZCOPY: data
 * holds a pointer to the tx, len the bytes it carries.  PAD: len is the number of cells
 * skipped. */
typedef struct self_cell {
    uint64_t state;
    uint32_t len;
    uint8_t am_id;
    uint8_t pad[3];
    uint8_t data[];
} self_cell_t;
_Static_assert(sizeof(self_cell_t) == SELF_CELL_HDR, "cell header");

/* ---- what a sender lends a receiver: the state word of a tx ---- */
#define TX_PENDING  0u
#define TX_READING  1u
#define TX_CANCELED 2u
#define TX_DONE     3u
#define TX_ORPHAN   4u /* the sender's interface closed: whoever comes second frees */

enum self_tx_kind { SELF_TX_BUF = 1, SELF_TX_ZCOPY };

typedef struct self_tx {
    uint32_t state;
    int32_t status; /* the receiver's verdict, read once DONE */
    uint8_t kind;
} self_tx_t;

typedef struct self_port self_port_t;
typedef struct self_ep self_ep_t;

/* A bcopy buffer: SELF_BUF_HDR bytes of header, then its data. */
typedef struct self_buf {
    self_tx_t tx; /* first: an orphan is freed through it */
    uint8_t cls;
    size_t cap;
    fy_list_t link;        /* iface->buf_flight while out */
    struct self_buf *next; /* iface->buf_idle[cls] while idle */
} self_buf_t;
_Static_assert(sizeof(self_buf_t) <= SELF_BUF_HDR, "buffer header");
#define SELF_BUF_DATA(b) ((uint8_t *)(b) + SELF_BUF_HDR)

/* A zcopy descriptor: what the receiver needs to read the caller's memory. */
typedef struct self_zc {
    self_tx_t tx;      /* first: an orphan is freed through it */
    int comp_done;     /* comp has been called */
    self_port_t *from; /* the sender's port: counted, woken and released by the receiver */
    fy_tl_comp_t *comp;
    self_ep_t *ep;        /* NULL once its ep settled it */
    fy_list_t link;       /* iface->zc_flight (or a local list while completing) */
    fy_list_t ep_link;    /* ep->zcs while comp is owed */
    struct self_zc *next; /* iface->zc_idle */
    size_t len;           /* bytes in iov */
    uint32_t hdr_len;
    uint32_t iovcnt;
    struct iovec iov[SELF_MAX_IOV];
    uint8_t hdr[SELF_MAX_ZCOPY_HDR];
} self_zc_t;

/* An ep_flush waiting for the ep's zcopies issued before it. */
typedef struct self_flush {
    fy_list_t link;
    fy_tl_comp_t *comp;
    uint64_t need; /* ep->zc_completed must reach this */
} self_flush_t;

/* 128-byte alignment keeps each group of fields off its neighbours' cache lines, adjacent-line
 * prefetch included. */
struct self_port {
    /* read-mostly: what a sender needs, set at open */
    char *cells;
    uint64_t id;
    int efd;
    fy_list_t link; /* in the process-wide table (under its mutex) */
    /* producers */
    _Alignas(128) uint64_t tail;
    /* the consumer */
    _Alignas(128) uint64_t released;
    /* receivers of this interface's zcopies, and the references */
    _Alignas(128) uint64_t zc_done;
    uint32_t zsleep; /* the owner armed: wake it when zc_done moves */
    uint32_t refs;
};

typedef struct self_iface {
    fy_tl_iface_t super;
    self_port_t *port;
    char *cells;
    uint64_t head;    /* next ticket to consume */
    int in_progress;  /* a handler called progress again: do not recurse */
    uint64_t zc_seen; /* port->zc_done when we last reaped */
    /* sender side */
    fy_list_t zc_flight; /* self_zc_t out, in issue order */
    unsigned nzc, nzc_idle;
    self_zc_t *zc_idle;
    fy_list_t buf_flight; /* self_buf_t out, in issue order */
    self_buf_t *buf_idle[SELF_BUF_CLASSES];
    size_t flight_bytes, idle_bytes;
    size_t flight_max;   /* params.tx_copy_max, or SELF_BUF_FLIGHT_MAX */
    uint64_t buf_gets;   /* buffers taken from the pool so far */
    uint64_t trim_gets;  /* buf_gets when the trim clock started */
    uint64_t trim_since; /* when it started (ns), 0: not started */
    unsigned trim_polls;
    fy_list_t eps; /* self_ep_t: iface_close destroys those still open */
    /* receive side: where a zcopy is gathered */
    uint8_t *rxbuf;
    size_t rxbuf_size;
    struct {
        uint64_t rx_msgs, rx_bytes, rx_buf, rx_zcopy_inplace, rx_zcopy_gather, rx_drops;
        uint64_t tx_full, tx_pool_empty, bufs_allocated, wakeups_sent;
    } stats;
} self_iface_t;

struct self_ep {
    fy_tl_ep_t super;
    self_port_t *peer; /* counted */
    char *cells;       /* peer->cells */
    uint64_t limit;    /* tickets below this were free when we last read peer->released */
    self_iface_t *iface;
    fy_list_t zcs; /* self_zc_t whose comp is owed, in issue order */
    uint64_t zc_issued, zc_completed;
    fy_list_t flushes; /* self_flush_t */
    fy_list_t link;    /* iface->eps */
};

/* ---- the ring, inline for both sides ---- */

static inline self_cell_t *self_cell_at(char *cells, uint64_t ticket)
{
    return (self_cell_t *)(cells + ((size_t)(ticket & (SELF_RING_CELLS - 1)) << SELF_CELL_SHIFT));
}

/* The type of the message published at ticket t in cell c, or 0 if there is none yet. */
static inline unsigned self_cell_ready(const self_cell_t *c, uint64_t t)
{
    uint64_t st = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    return (st >> 8) == (t & (UINT64_MAX >> 8)) ? (unsigned)(st & 0xff) : 0;
}

static inline unsigned self_cells_for(size_t len)
{
    return (unsigned)((SELF_CELL_HDR + len + SELF_CELL_SIZE - 1) >> SELF_CELL_SHIFT);
}

static inline void *self_cell_ptr(const self_cell_t *c)
{
    void *p;
    memcpy(&p, c->data, sizeof(p));
    return p;
}

/* ---- between the files ---- */

/* self.c: the port's event fd, and its references */
void fy_self_port_wake(self_port_t *p);
void fy_self_port_unref(self_port_t *p);
/* The zcopy this thread is handing to a handler in place: a close or ep_destroy called from
 * inside that handler must not wait for it. */
extern _Thread_local self_zc_t *fy_self_reading;

/* self_tx.c: sending */
ferry_status_t fy_self_am_short(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_self_am_bcopy(fy_tl_ep_t *ep, uint8_t id, const struct iovec *iov, size_t iovcnt);
ferry_status_t fy_self_am_zcopy(fy_tl_ep_t *ep, uint8_t id, const void *hdr, size_t hdr_len,
                                const struct iovec *iov, size_t iovcnt, fy_tl_comp_t *comp);
/* Receiver side: done with a tx (status: what became of it); it may be reused at once. */
void fy_self_tx_release(self_tx_t *tx, ferry_status_t status);
/* Call the comps of zcopies receivers are done with (and the flushes they held back). */
unsigned fy_self_zc_reap(self_iface_t *si);
/* ep_destroy: make sure nobody reads z's memory from now on; the status its comp gets. */
ferry_status_t fy_self_zc_settle(self_zc_t *z);
/* Free idle bcopy buffers above SELF_BUF_IDLE_KEEP if the pool is unused for a while. */
void fy_self_buf_trim(self_iface_t *si);
/* iface_close: hand over, settle or free everything the interface lent or keeps. */
void fy_self_tx_cleanup(self_iface_t *si);

#endif
