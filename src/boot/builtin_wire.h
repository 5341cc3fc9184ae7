/*
 * builtin_wire.h - the wire protocol between a rank (boot_builtin.c) and ferryrun's key-value
 * server (tools/ferryrun_server.c), over one TCP connection to 127.0.0.1 per rank.  Both
 * sides include this file; docs/bootstrap.md describes the same protocol for people.
 *
 * Every message, both ways: an 8-byte header, then `len` bytes of body.  Integers are in
 * network byte order (big-endian); strings are not NUL-terminated (their length precedes).
 *
 *   0               4       6       8
 *   +---------------+-------+-------+---------- ... ----------+
 *   | len (u32)     | type  | 0     |  body (len bytes)       |
 *   +---------------+-------+-------+---------- ... ----------+
 *
 *   type           dir    body
 *   1 HELLO        c->s   u32 version | u32 rank | u32 size | u32 pid | u16 n | job key (n) |
 *                         u16 s | job secret (s)
 *   2 WELCOME      s->c   u32 version | u32 size | u32 fence epoch (the next fence's number)
 *   3 PUT          c->s   u16 n | key (n) | u32 m | value (m)            (no reply)
 *   4 FENCE        c->s   u32 epoch
 *   5 FENCE_DONE   s->c   u32 epoch
 *   6 GET          c->s   u32 rank | u16 n | key (n)
 *   7 GET_REPLY    s->c   i32 status (0 or FERRY_ERR_NO_ELEM) | u32 m | value (m)
 *   8 STATUS       c->s   (empty): who is missing from the fence under way?
 *   9 STATUS_REPLY s->c   u32 epoch | u32 size | u32 k | k x (u32 rank | u8 state)
 *   10 FINALIZE    c->s   (empty; no reply; the client closes)
 *   11 ERROR       s->c   i32 status | u16 n | message (n): the request failed (a HELLO
 *                         error is followed by the server closing the connection)
 *
 * Flow: HELLO/WELCOME first.  The HELLO proves the job secret (FERRY_BOOT_SECRET, random,
 * made by ferryrun for this job): a connection with a wrong secret, a message before HELLO, a
 * HELLO body over FY_WIRE_MAX_HELLO or no HELLO within FY_WIRE_HELLO_TIMEOUT_MS is closed.
 * After HELLO a request body may be up to FY_WIRE_MAX_REQUEST bytes (a value up to
 * FY_WIRE_MAX_VALUE: longer ones are split by boot.c); answers may be longer (FY_WIRE_MAX_BODY).
 * Then PUTs, then PUTs, and FENCEs numbered from the WELCOME's epoch up.  A
 * fence completes when every rank of the job sent FENCE for that epoch; it fails (ERROR) as
 * soon as a rank that has not joined it exits or drops its connection.  A client whose fence
 * times out sends STATUS and names the ranks in STATUS_REPLY (with their state) in its error.
 */
#ifndef FY_BOOT_BUILTIN_WIRE_H
#define FY_BOOT_BUILTIN_WIRE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FY_WIRE_VERSION          2 /* 2: HELLO carries the job secret */
#define FY_WIRE_HDR_LEN          8
#define FY_WIRE_MAX_BODY         (64u << 20) /* 64 MiB: the longest answer (STATUS of a huge job) */
#define FY_WIRE_MAX_VALUE        (1u << 20)  /* the longest value stored under one key */
#define FY_WIRE_MAX_REQUEST      (FY_WIRE_MAX_VALUE + 256) /* a PUT of the longest value, and more */
#define FY_WIRE_MAX_HELLO        2560 /* 16 + 2 + job key (<= 1024) + 2 + secret (<= 1024) */
#define FY_WIRE_KEY_MAX          63
#define FY_WIRE_JOB_KEY_MAX      1024
#define FY_WIRE_SECRET_MAX       1024
#define FY_WIRE_HELLO_TIMEOUT_MS 5000 /* a connection silent this long before HELLO is closed */

enum fy_wire_type {
    FY_WIRE_HELLO = 1,
    FY_WIRE_WELCOME = 2,
    FY_WIRE_PUT = 3,
    FY_WIRE_FENCE = 4,
    FY_WIRE_FENCE_DONE = 5,
    FY_WIRE_GET = 6,
    FY_WIRE_GET_REPLY = 7,
    FY_WIRE_STATUS = 8,
    FY_WIRE_STATUS_REPLY = 9,
    FY_WIRE_FINALIZE = 10,
    FY_WIRE_ERROR = 11,
};

/* A rank's state in STATUS_REPLY. */
enum fy_wire_rank_state {
    FY_WIRE_RANK_NOT_CONNECTED = 0, /* has not connected to ferryrun yet */
    FY_WIRE_RANK_CONNECTED = 1,     /* connected, has not reached the fence */
    FY_WIRE_RANK_FINALIZED = 2,     /* left the bootstrap (finalized) */
    FY_WIRE_RANK_GONE = 3,          /* exited, or dropped its connection */
};

static inline const char *fy_wire_rank_state_name(unsigned state)
{
    switch (state) {
    case FY_WIRE_RANK_NOT_CONNECTED:
        return "never connected to ferryrun";
    case FY_WIRE_RANK_CONNECTED:
        return "connected but not in the fence";
    case FY_WIRE_RANK_FINALIZED:
        return "finalized";
    case FY_WIRE_RANK_GONE:
        return "exited";
    default:
        return "unknown state";
    }
}

/* ---- building a message: a growable buffer, header first ---------------------------------- */

typedef struct fy_wire_buf {
    uint8_t *data;
    size_t len, cap;
    size_t start; /* where the message being built begins */
    int oom;      /* an allocation failed: the buffer is unusable */
} fy_wire_buf_t;

static inline void fy_wire_reserve(fy_wire_buf_t *b, size_t more)
{
    if (b->oom || b->len + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *n = (uint8_t *)realloc(b->data, cap);
    if (n == NULL) {
        b->oom = 1;
        return;
    }
    b->data = n;
    b->cap = cap;
}

static inline void fy_wire_bytes(fy_wire_buf_t *b, const void *p, size_t n)
{
    fy_wire_reserve(b, n);
    if (b->oom)
        return;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

static inline void fy_wire_u8(fy_wire_buf_t *b, uint8_t v)
{
    fy_wire_bytes(b, &v, 1);
}

static inline void fy_wire_u16(fy_wire_buf_t *b, uint16_t v)
{
    uint8_t x[2] = {(uint8_t)(v >> 8), (uint8_t)v};
    fy_wire_bytes(b, x, 2);
}

static inline void fy_wire_u32(fy_wire_buf_t *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    fy_wire_bytes(b, x, 4);
}

/* Start a message of the given type (appended to what the buffer holds). */
static inline void fy_wire_begin(fy_wire_buf_t *b, unsigned type)
{
    b->start = b->len;
    fy_wire_u32(b, 0);
    fy_wire_u16(b, (uint16_t)type);
    fy_wire_u16(b, 0);
}

/* Finish the message: write its body length into the header. */
static inline void fy_wire_end(fy_wire_buf_t *b)
{
    if (b->oom)
        return;
    uint32_t body = (uint32_t)(b->len - b->start - FY_WIRE_HDR_LEN);
    uint8_t *h = b->data + b->start;
    h[0] = (uint8_t)(body >> 24);
    h[1] = (uint8_t)(body >> 16);
    h[2] = (uint8_t)(body >> 8);
    h[3] = (uint8_t)body;
}

static inline void fy_wire_buf_free(fy_wire_buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

/* ---- reading a message body ---------------------------------------------------------------- */

typedef struct fy_wire_rd {
    const uint8_t *p;
    size_t left;
    int bad; /* read past the end: the message is malformed */
} fy_wire_rd_t;

static inline const uint8_t *fy_wire_rd_bytes(fy_wire_rd_t *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static inline uint8_t fy_wire_rd_u8(fy_wire_rd_t *r)
{
    const uint8_t *p = fy_wire_rd_bytes(r, 1);
    return p ? p[0] : 0;
}

static inline uint16_t fy_wire_rd_u16(fy_wire_rd_t *r)
{
    const uint8_t *p = fy_wire_rd_bytes(r, 2);
    return p ? (uint16_t)(p[0] << 8 | p[1]) : 0;
}

static inline uint32_t fy_wire_rd_u32(fy_wire_rd_t *r)
{
    const uint8_t *p = fy_wire_rd_bytes(r, 4);
    return p ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3] : 0;
}

/* Compare two secrets in time that depends on their lengths only, not on where they differ. */
static inline int fy_wire_secret_equal(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    size_t n = alen > blen ? alen : blen;
    unsigned diff = alen != blen;
    for (size_t i = 0; i < n; i++) {
        uint8_t x = i < alen ? a[i] : 0, y = i < blen ? b[i] : 0;
        diff |= (unsigned)(x ^ y);
    }
    return diff == 0;
}

/* Parse a header: body length and type. */
static inline void fy_wire_parse_hdr(const uint8_t *h, uint32_t *len, unsigned *type)
{
    *len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    *type = (unsigned)(h[4] << 8 | h[5]);
}

#endif
