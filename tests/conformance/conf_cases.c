/*
 * conf_cases.c - the transport conformance suite: one set of cases, linked with one short
 * file per transport (conf_<tl>.c), run over self, shm, udp and tcp alike.  Each case checks
 * one clause of the contract written in src/tl/tl.h, through the transport's ops table:
 *
 *   am_sizes        every AM class (short, bcopy, zcopy) from its smallest to its maximum
 *   am_beyond_max   one byte / one iov entry / one id beyond a maximum: refused, nothing sent
 *   am_iov          gathers of max_iov entries, empty entries included
 *   am_order        a mixed stream arrives whole and in order
 *   rma_edges       put / get / atomics at the first and last bytes of a region
 *   rma_refused     out of bounds, no rights, deregistered key: refused, nothing touched,
 *                   the error reported (by the op, and by the flush that covers it)
 *   flush           flush = every earlier operation remotely complete; NULL comp never waits
 *   close_flush / close_force      ep_destroy after a flush, and with work outstanding
 *   iface_close_open_eps           iface_close with an ep and work still outstanding
 *   destroy_in_cb   ep_destroy from inside a completion, a flush completion and a receive
 *   back_pressure   a receiver that does not progress: NO_RESOURCE, then everything arrives
 *   peer_death_*    a real peer process killed before connect, mid-transfer, during a
 *                   flush, while idle: an error (err_cb / completion / NOT_CONNECTED), never
 *                   a hang
 *   api_*           through the public API (FERRY_TLS=<tl>): an AM and a put larger than the
 *                   transport's maximum succeed (proto splits them); a put out of bounds
 *                   is reported by the flush that covers it; ferry_ep_close in FLUSH and
 *                   FORCE modes with requests outstanding; ferry_worker_flush with a
 *                   request; back-pressure (FERRY_MAX_QUEUED) to the application
 *
 * Cases that fail only because of defects being fixed elsewhere run when FYCONF_PENDING=1;
 * otherwise they print the defect and pass without checking that clause (see conf_pending).
 */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "fytest.h"
#include "fytest_proc.h"

#define CONF_BIG      (8u << 20) /* largest message the suite sends */
#define CONF_DEADLINE 30000      /* ms: an error must come within this, or it is a hang */
/* peer_death: an am_zcopy that stays in flight where the transport reports no max_zcopy_local
 * (more than a kernel's socket buffers take at once) */
#define CONF_INFLIGHT (65u << 20)

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A clause that a known defect breaks: check it only with FYCONF_PENDING=1. */
static int conf_pending(const char *defect)
{
    const char *e = getenv("FYCONF_PENDING");
    if (e != NULL && *e == '1')
        return 1;
    printf("  [pending] %s: not checked here (FYCONF_PENDING=1 checks it)\n", defect);
    return 0;
}

/* ---- a pair of nodes in this process: A sends to B ---- */

typedef struct pair {
    conf_node_t a, b;
    fy_tl_ep_t *ab, *ba;
} pair_t;

static void pair_open(pair_t *p)
{
    conf_addr_t aa, ba;
    conf_open(&p->a);
    conf_open(&p->b);
    conf_addr(&p->a, &aa);
    conf_addr(&p->b, &ba);
    p->ab = conf_connect(&p->a, &ba);
    p->ba = conf_connect(&p->b, &aa);
}

static void pair_close(pair_t *p)
{
    if (p->ab != NULL)
        p->a.ops->ep_destroy(p->ab);
    if (p->ba != NULL)
        p->b.ops->ep_destroy(p->ba);
    conf_close(&p->a);
    conf_close(&p->b);
}

static unsigned pump(pair_t *p)
{
    return conf_progress(&p->a) + conf_progress(&p->b);
}

/* Progress both until cond holds; fail with what after CONF_DEADLINE. */
#define PUMP_UNTIL(p, cond, what)                                                                  \
    do {                                                                                           \
        int64_t end_ = now_ms() + CONF_DEADLINE;                                                   \
        while (!(cond)) {                                                                          \
            FY_ASSERT_MSG(now_ms() < end_, "%s: not done after %d ms (%s)", conf_tl.name,          \
                          CONF_DEADLINE, what);                                                    \
            pump(p);                                                                               \
        }                                                                                          \
    } while (0)

static int is_error(ferry_status_t st)
{
    return st < 0 && st != FERRY_ERR_NO_RESOURCE;
}

/* AM classes */
enum { AM_SHORT, AM_BCOPY, AM_ZCOPY };

/* Send one AM of class cls from buf (zcopy: hdr_len bytes as the header, the rest in two iov
 * entries), retrying on NO_RESOURCE with both nodes progressing.  Returns the status. */
static ferry_status_t send_am(pair_t *p, fy_tl_ep_t *ep, int cls, uint8_t id, const void *buf,
                              size_t len, size_t hdr_len, conf_comp_t *c)
{
    const char *b = buf;
    int64_t end = now_ms() + CONF_DEADLINE;
    for (;;) {
        ferry_status_t st;
        if (cls == AM_SHORT) {
            /* two pieces, to exercise the gather, where the transport takes two */
            size_t first = p->a.attr.max_iov >= 2 ? len / 2 : len;
            struct iovec v[2] = {{(void *)b, first}, {(void *)(b + first), len - first}};
            CONF_CALL(st, p->a.ops->am_short(ep, id, v, p->a.attr.max_iov >= 2 ? 2 : 1));
        } else if (cls == AM_BCOPY) {
            struct iovec v[1] = {{(void *)b, len}};
            CONF_CALL(st, p->a.ops->am_bcopy(ep, id, v, 1));
        } else {
            size_t rest = len - hdr_len, half = rest / 2;
            struct iovec v[2] = {{(void *)(b + hdr_len), half},
                                 {(void *)(b + hdr_len + half), rest - half}};
            CONF_CALL(st, p->a.ops->am_zcopy(ep, id, b, hdr_len, v, 2, &c->super));
        }
        if (st != FERRY_ERR_NO_RESOURCE)
            return st;
        FY_ASSERT_MSG(now_ms() < end, "%s: NO_RESOURCE for %d ms", conf_tl.name, CONF_DEADLINE);
        pump(p);
    }
}

static size_t zhdr(const conf_node_t *n, size_t len)
{
    size_t h = n->attr.max_zcopy_hdr < 16 ? n->attr.max_zcopy_hdr : 16;
    return h < len ? h : len;
}

/* Send message seq of len bytes by class and wait until B has it (and a zcopy completed). */
static void send_checked(pair_t *p, int cls, size_t len, uint32_t seq)
{
    char *buf = malloc(len);
    FY_ASSERT(buf != NULL);
    conf_msg_fill(buf, len, seq);
    conf_comp_t c;
    conf_comp_init(&c);
    ferry_status_t st = send_am(p, p->ab, cls, 1, buf, len, zhdr(&p->a, len), &c);
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "%s: class %d, %zu bytes: %s",
                  conf_tl.name, cls, len, ferry_status_string(st));
    PUMP_UNTIL(p, p->b.rx_expect > seq || p->b.rx_bad, "message delivery");
    FY_ASSERT_MSG(!p->b.rx_bad, "%s: class %d, %zu bytes: %s", conf_tl.name, cls, len, p->b.rx_why);
    if (st == FERRY_INPROGRESS) {
        PUMP_UNTIL(p, c.calls == 1, "zcopy completion");
        FY_ASSERT_OK(c.st);
    } else {
        FY_ASSERT_EQ(c.calls, 0); /* OK means no callback */
    }
    free(buf);
}

/* ---- AM ---- */

static void am_sizes(void)
{
    pair_t p;
    pair_open(&p);
    const fy_tl_iface_attr_t *at = &p.a.attr;
    FY_ASSERT(at->caps & FY_TL_CAP_AM_SHORT);
    FY_ASSERT(at->max_short >= CONF_MSG_HDR);
    FY_ASSERT(at->max_bcopy >= at->max_short);
    FY_ASSERT(at->max_zcopy >= at->max_bcopy);
    FY_ASSERT(at->max_iov >= 1);
    size_t zmax = at->max_zcopy < CONF_BIG ? at->max_zcopy : CONF_BIG;
    struct {
        int cls;
        size_t len;
    } sizes[] = {
        {AM_SHORT, CONF_MSG_HDR},
        {AM_SHORT, at->max_short / 2 + 1},
        {AM_SHORT, at->max_short},
        {AM_BCOPY, CONF_MSG_HDR},
        {AM_BCOPY, at->max_short + 1},
        {AM_BCOPY, at->max_bcopy},
        {AM_ZCOPY, CONF_MSG_HDR},
        {AM_ZCOPY, at->max_bcopy + 1},
        {AM_ZCOPY, 3 * at->max_bcopy + 5},
        {AM_ZCOPY, zmax - 1},
        {AM_ZCOPY, zmax},
    };
    uint32_t seq = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (sizes[i].len > (sizes[i].cls == AM_SHORT   ? at->max_short
                            : sizes[i].cls == AM_BCOPY ? at->max_bcopy
                                                       : at->max_zcopy))
            continue;
        send_checked(&p, sizes[i].cls, sizes[i].len, seq++);
    }
    /* the largest header a zcopy takes, and nothing after it */
    if (at->max_zcopy_hdr >= CONF_MSG_HDR) {
        char *buf = malloc(at->max_zcopy_hdr);
        conf_msg_fill(buf, at->max_zcopy_hdr, seq);
        conf_comp_t c;
        conf_comp_init(&c);
        ferry_status_t st =
            send_am(&p, p.ab, AM_ZCOPY, 1, buf, at->max_zcopy_hdr, at->max_zcopy_hdr, &c);
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
        PUMP_UNTIL(&p, p.b.rx_expect > seq && (st == FERRY_OK || c.calls == 1), "zcopy hdr only");
        FY_ASSERT_MSG(!p.b.rx_bad, "%s", p.b.rx_why);
        free(buf);
    }
    pair_close(&p);
}

/* A receive handler that counts and remembers the last message. */
static uint8_t last_id;
static size_t last_len;
static void count_am(conf_node_t *n, uint8_t id, const void *data, size_t len)
{
    (void)n, (void)data;
    last_id = id;
    last_len = len;
}

static void am_beyond_max(void)
{
    pair_t p;
    pair_open(&p);
    const fy_tl_iface_attr_t *at = &p.a.attr;
    p.b.on_am = count_am;
    size_t big = at->max_bcopy + 1;
    if (at->max_zcopy <= (1u << 26) && at->max_zcopy + 1 > big)
        big = at->max_zcopy + 1;
    char *buf = calloc(1, big);
    FY_ASSERT(buf != NULL);
    conf_comp_t c;
    conf_comp_init(&c);
    struct iovec v1 = {buf, at->max_short + 1};
    FY_ASSERT_STATUS(p.a.ops->am_short(p.ab, 1, &v1, 1), FERRY_ERR_INVALID_PARAM);
    v1.iov_len = at->max_bcopy + 1;
    FY_ASSERT_STATUS(p.a.ops->am_bcopy(p.ab, 1, &v1, 1), FERRY_ERR_INVALID_PARAM);
    v1.iov_len = 8;
    FY_ASSERT_STATUS(p.a.ops->am_zcopy(p.ab, 1, buf, at->max_zcopy_hdr + 1, &v1, 1, &c.super),
                     FERRY_ERR_INVALID_PARAM);
    if (at->max_zcopy <= (1u << 26)) {
        v1.iov_len = at->max_zcopy + 1 - 8;
        FY_ASSERT_STATUS(p.a.ops->am_zcopy(p.ab, 1, buf, 8, &v1, 1, &c.super),
                         FERRY_ERR_INVALID_PARAM);
    } else {
        printf("  max_zcopy %zu: beyond it not tried (too large to allocate)\n", at->max_zcopy);
    }
    /* one iov entry too many, each of one byte */
    size_t nv = at->max_iov + 1;
    struct iovec *vv = calloc(nv, sizeof(*vv));
    for (size_t i = 0; i < nv; i++)
        vv[i] = (struct iovec){buf + i, 1};
    FY_ASSERT_STATUS(p.a.ops->am_short(p.ab, 1, vv, nv), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(p.a.ops->am_bcopy(p.ab, 1, vv, nv), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(p.a.ops->am_zcopy(p.ab, 1, buf, 8, vv, nv, &c.super), FERRY_ERR_INVALID_PARAM);
    /* an id beyond FY_TL_AM_ID_MAX */
    v1.iov_len = 8;
    FY_ASSERT_STATUS(p.a.ops->am_short(p.ab, FY_TL_AM_ID_MAX + 1, &v1, 1), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(p.a.ops->am_bcopy(p.ab, FY_TL_AM_ID_MAX + 1, &v1, 1), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_EQ(c.calls, 0);
    /* nothing of the above went out: the next message is the first B sees */
    v1.iov_len = 5;
    FY_ASSERT_OK(send_am(&p, p.ab, AM_SHORT, 7, buf, 5, 0, &c));
    PUMP_UNTIL(&p, p.b.rx_msgs >= 1, "the valid message");
    for (int i = 0; i < 1000; i++)
        pump(&p);
    FY_ASSERT_EQ(p.b.rx_msgs, 1);
    FY_ASSERT_EQ(last_id, 7);
    FY_ASSERT_EQ(last_len, 5);
    free(vv);
    free(buf);
    pair_close(&p);
}

/* An AM whose data came as max_iov entries (some empty) arrives contiguous and whole. */
static void am_iov(void)
{
    pair_t p;
    pair_open(&p);
    const fy_tl_iface_attr_t *at = &p.a.attr;
    size_t nv = at->max_iov;
    uint32_t seq = 0;
    size_t lens[3] = {at->max_short, at->max_bcopy, 3 * at->max_bcopy + 17};
    for (int cls = AM_SHORT; cls <= AM_ZCOPY; cls++) {
        size_t len = lens[cls];
        char *buf = malloc(len);
        conf_msg_fill(buf, len, seq);
        struct iovec *vv = calloc(nv, sizeof(*vv));
        size_t hdr = cls == AM_ZCOPY ? zhdr(&p.a, len) : 0, off = hdr;
        /* entry i gets a share; every third entry (after the first) is empty */
        for (size_t i = 0; i < nv; i++) {
            size_t share = (i % 3 == 2) ? 0 : (len - hdr) / nv + (i & 1);
            if (i == nv - 1 || off + share > len)
                share = len - off;
            vv[i] = (struct iovec){buf + off, share};
            off += share;
        }
        conf_comp_t c;
        conf_comp_init(&c);
        ferry_status_t st;
        int64_t end = now_ms() + CONF_DEADLINE;
        do {
            if (cls == AM_SHORT)
                st = p.a.ops->am_short(p.ab, 1, vv, nv);
            else if (cls == AM_BCOPY)
                st = p.a.ops->am_bcopy(p.ab, 1, vv, nv);
            else
                st = p.a.ops->am_zcopy(p.ab, 1, buf, hdr, vv, nv, &c.super);
            if (st == FERRY_ERR_NO_RESOURCE)
                pump(&p);
            FY_ASSERT(now_ms() < end);
        } while (st == FERRY_ERR_NO_RESOURCE);
        FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "class %d, %zu entries: %s", cls,
                      nv, ferry_status_string(st));
        PUMP_UNTIL(&p, p.b.rx_expect > seq && (st == FERRY_OK || c.calls == 1), "iov message");
        FY_ASSERT_MSG(!p.b.rx_bad, "class %d, %zu entries: %s", cls, nv, p.b.rx_why);
        seq++;
        free(vv);
        free(buf);
    }
    /* an AM with no data at all */
    p.b.on_am = count_am;
    FY_ASSERT_OK(p.a.ops->am_short(p.ab, 3, NULL, 0));
    PUMP_UNTIL(&p, p.b.rx_msgs == seq + 1, "empty AM");
    FY_ASSERT_EQ(last_id, 3);
    FY_ASSERT_EQ(last_len, 0);
    pair_close(&p);
}

/* zcopy buffers live until their completion */
typedef struct zbuf {
    conf_comp_t c;
    char *buf;
    unsigned *outstanding;
} zbuf_t;

static void zbuf_done(conf_comp_t *c)
{
    zbuf_t *z = (zbuf_t *)c;
    FY_ASSERT_MSG(c->st == FERRY_OK, "zcopy completed with %s", ferry_status_string(c->st));
    free(z->buf);
    (*z->outstanding)--;
    free(z);
}

static void am_order(void)
{
    pair_t p;
    pair_open(&p);
    const fy_tl_iface_attr_t *at = &p.a.attr;
    FY_ASSERT(at->caps & FY_TL_CAP_AM_ORDERED);
    const unsigned n = 3000;
    unsigned outstanding = 0;
    size_t bmax = at->max_bcopy < 65536 ? at->max_bcopy : 65536;
    size_t zlen = 2 * bmax + 3;
    char *sbuf = malloc(bmax);
    for (uint32_t i = 0; i < n; i++) {
        int cls = (int)(i % 7 == 6 ? AM_ZCOPY : i % 2 ? AM_BCOPY : AM_SHORT);
        size_t len = cls == AM_SHORT   ? CONF_MSG_HDR + i % (at->max_short - CONF_MSG_HDR + 1)
                     : cls == AM_BCOPY ? CONF_MSG_HDR + (i * 131) % (bmax - 7)
                                       : zlen - i % 100;
        if (cls == AM_ZCOPY) {
            zbuf_t *z = malloc(sizeof(*z));
            conf_comp_init(&z->c);
            z->c.then = zbuf_done;
            z->buf = malloc(len);
            z->outstanding = &outstanding;
            conf_msg_fill(z->buf, len, i);
            ferry_status_t st = send_am(&p, p.ab, cls, 1, z->buf, len, zhdr(&p.a, len), &z->c);
            FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "%s", ferry_status_string(st));
            if (st == FERRY_OK) {
                free(z->buf);
                free(z);
            } else {
                outstanding++;
            }
            while (outstanding > 32)
                pump(&p);
        } else {
            conf_msg_fill(sbuf, len, i);
            FY_ASSERT_OK(send_am(&p, p.ab, cls, 1, sbuf, len, 0, NULL));
        }
        if (i % 16 == 0)
            pump(&p);
        FY_ASSERT_MSG(!p.b.rx_bad, "%s", p.b.rx_why);
    }
    PUMP_UNTIL(&p, p.b.rx_expect == n || p.b.rx_bad, "the stream");
    FY_ASSERT_MSG(!p.b.rx_bad, "%s", p.b.rx_why);
    PUMP_UNTIL(&p, outstanding == 0, "zcopy completions");
    free(sbuf);
    pair_close(&p);
}

/* ---- RMA ---- */

#define PAGE 4096
typedef struct region {
    char *mem;  /* 3 pages: guard, region, guard */
    char *base; /* mem + PAGE */
    uint8_t memh[512];
    uint8_t packed[512];
    uint8_t rkey[512];
    int registered;
} region_t;

static void region_open(pair_t *p, region_t *r, unsigned access)
{
    FY_ASSERT(p->b.tl->memh_size <= sizeof(r->memh));
    FY_ASSERT(p->b.tl->rkey_packed_size <= sizeof(r->packed));
    FY_ASSERT(p->b.tl->rkey_size <= sizeof(r->rkey));
    r->mem = aligned_alloc(PAGE, 3 * PAGE);
    FY_ASSERT(r->mem != NULL);
    conf_fill(r->mem, 3 * PAGE, 77);
    r->base = r->mem + PAGE;
    FY_ASSERT_OK(p->b.ops->mem_reg(p->b.md, r->base, PAGE, access, r->memh));
    FY_ASSERT_OK(p->b.ops->rkey_pack(p->b.md, r->memh, r->packed));
    FY_ASSERT_OK(p->a.ops->rkey_unpack(p->a.md, r->packed, r->rkey));
    r->registered = 1;
}

static void region_close(pair_t *p, region_t *r)
{
    if (p->a.ops->rkey_release != NULL)
        p->a.ops->rkey_release(p->a.md, r->rkey);
    if (r->registered)
        p->b.ops->mem_dereg(p->b.md, r->memh);
    free(r->mem);
}

static uint64_t raddr(const region_t *r, long off)
{
    return (uint64_t)(uintptr_t)(r->base + off);
}

/* put len bytes of src at region offset off: put_short when it fits, else put_zcopy (in two
 * iov entries).  Returns the call's status; *c gets the completion. */
static ferry_status_t do_put(pair_t *p, const region_t *r, const void *src, size_t len, long off,
                             conf_comp_t *c, int force_zcopy)
{
    int64_t end = now_ms() + CONF_DEADLINE;
    for (;;) {
        ferry_status_t st;
        if (!force_zcopy && p->a.ops->put_short != NULL && len <= p->a.attr.max_put_short) {
            CONF_CALL(st, p->a.ops->put_short(p->ab, src, len, raddr(r, off), r->rkey));
        } else {
            struct iovec v[2] = {{(void *)src, len / 2},
                                 {(char *)(uintptr_t)src + len / 2, len - len / 2}};
            CONF_CALL(st, p->a.ops->put_zcopy(p->ab, v, 2, raddr(r, off), r->rkey, &c->super));
        }
        if (st != FERRY_ERR_NO_RESOURCE)
            return st;
        FY_ASSERT(now_ms() < end);
        pump(p);
    }
}

static ferry_status_t do_get(pair_t *p, const region_t *r, void *dst, size_t len, long off,
                             conf_comp_t *c)
{
    int64_t end = now_ms() + CONF_DEADLINE;
    for (;;) {
        struct iovec v[2] = {{dst, len / 3}, {(char *)dst + len / 3, len - len / 3}};
        ferry_status_t st;
        CONF_CALL(st, p->a.ops->get_zcopy(p->ab, v, 2, raddr(r, off), r->rkey, &c->super));
        if (st != FERRY_ERR_NO_RESOURCE)
            return st;
        FY_ASSERT(now_ms() < end);
        pump(p);
    }
}

/* Flush A->B and wait; returns the flush's final status. */
static ferry_status_t flush_wait(pair_t *p, fy_tl_ep_t *ep)
{
    conf_comp_t c;
    conf_comp_init(&c);
    ferry_status_t st;
    int64_t end = now_ms() + CONF_DEADLINE;
    for (;;) {
        CONF_CALL(st, p->a.ops->ep_flush(ep, &c.super));
        if (st != FERRY_ERR_NO_RESOURCE)
            break;
        FY_ASSERT(now_ms() < end);
        pump(p);
    }
    if (st != FERRY_INPROGRESS) {
        FY_ASSERT_EQ(c.calls, 0);
        return st;
    }
    PUMP_UNTIL(p, c.calls == 1, "flush");
    return c.st;
}

/* Run an RMA op to completion; returns its status (the call's error, or the completion's). */
static ferry_status_t finish(pair_t *p, ferry_status_t st, conf_comp_t *c)
{
    if (st != FERRY_INPROGRESS) {
        FY_ASSERT_EQ(c->calls, 0);
        return st;
    }
    PUMP_UNTIL(p, c->calls == 1, "rma completion");
    return c->st;
}

static int has_rma(const conf_node_t *n)
{
    uint64_t need = FY_TL_CAP_PUT | FY_TL_CAP_GET;
    if ((n->attr.caps & need) != need) {
        printf("  %s: no put/get here (caps 0x%" PRIx64 ")\n", conf_tl.name, n->attr.caps);
        return 0;
    }
    return 1;
}

static void rma_edges(void)
{
    pair_t p;
    pair_open(&p);
    if (!has_rma(&p.a)) {
        pair_close(&p);
        return;
    }
    region_t r;
    region_open(&p, &r, FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC);
    char *expect = malloc(3 * PAGE), *src = malloc(PAGE), *dst = malloc(PAGE);
    memcpy(expect, r.mem, 3 * PAGE);
    conf_fill(src, PAGE, 5);
    struct {
        long off;
        size_t len;
        int zc;
    } puts[] = {{0, 1, 0}, {PAGE - 1, 1, 0}, {PAGE - 8, 8, 1}, {0, PAGE, 1}, {100, 1000, 0}};
    for (size_t i = 0; i < sizeof(puts) / sizeof(puts[0]); i++) {
        conf_comp_t c;
        conf_comp_init(&c);
        conf_fill(src, puts[i].len, 100 + i);
        ferry_status_t st = do_put(&p, &r, src, puts[i].len, puts[i].off, &c, puts[i].zc);
        FY_ASSERT_MSG(finish(&p, st, &c) == FERRY_OK, "put %zu bytes at %ld: %s", puts[i].len,
                      puts[i].off, ferry_status_string(st));
        memcpy(expect + PAGE + puts[i].off, src, puts[i].len);
    }
    FY_ASSERT_OK(flush_wait(&p, p.ab));
    FY_ASSERT_MEM_EQ(r.mem, expect, 3 * PAGE);
    /* gets at the edges */
    long goff[] = {0, PAGE - 1, PAGE - 8, 0};
    size_t glen[] = {1, 1, 8, PAGE};
    for (size_t i = 0; i < 4; i++) {
        conf_comp_t c;
        conf_comp_init(&c);
        memset(dst, 0xee, PAGE);
        ferry_status_t st = do_get(&p, &r, dst, glen[i], goff[i], &c);
        FY_ASSERT_MSG(finish(&p, st, &c) == FERRY_OK, "get %zu at %ld", glen[i], goff[i]);
        FY_ASSERT_MEM_EQ(dst, expect + PAGE + goff[i], glen[i]);
    }
    /* atomics on the first and last words */
    unsigned ops64 = p.a.ops->atomic != NULL ? fy_tl_amo_ops(&p.a.attr, 8) : 0;
    unsigned want64 = 1u << FERRY_ATOMIC_ADD | 1u << FERRY_ATOMIC_CSWAP;
    if ((ops64 & want64) == want64) {
        uint64_t first, last, res = 0;
        memcpy(&first, r.base, 8);
        memcpy(&last, r.base + PAGE - 8, 8);
        conf_comp_t c;
        conf_comp_init(&c);
        ferry_status_t st =
            p.a.ops->atomic(p.ab, FERRY_ATOMIC_ADD, 8, 5, 0, &res, raddr(&r, 0), r.rkey, &c.super);
        FY_ASSERT_OK(finish(&p, st, &c));
        FY_ASSERT_U64_EQ(res, first);
        conf_comp_init(&c);
        st = p.a.ops->atomic(p.ab, FERRY_ATOMIC_CSWAP, 8, 42, last, &res, raddr(&r, PAGE - 8),
                             r.rkey, &c.super);
        FY_ASSERT_OK(finish(&p, st, &c));
        FY_ASSERT_U64_EQ(res, last);
        FY_ASSERT_OK(flush_wait(&p, p.ab));
        uint64_t v;
        memcpy(&v, r.base, 8);
        FY_ASSERT_U64_EQ(v, first + 5);
        memcpy(&v, r.base + PAGE - 8, 8);
        FY_ASSERT_U64_EQ(v, 42);
        if (fy_tl_amo_ops(&p.a.attr, 4) & (1u << FERRY_ATOMIC_XOR)) {
            uint32_t old32, res32 = 0;
            memcpy(&old32, r.base + PAGE - 4, 4);
            conf_comp_init(&c);
            st = p.a.ops->atomic(p.ab, FERRY_ATOMIC_XOR, 4, 0xffffffffu, 0, &res32,
                                 raddr(&r, PAGE - 4), r.rkey, &c.super);
            FY_ASSERT_OK(finish(&p, st, &c));
            FY_ASSERT_U64_EQ(res32, old32);
        }
        memcpy(expect + PAGE, r.base, PAGE); /* what the atomics made of the region */
    } else {
        printf("  %s: no native atomics (proto emulates them)\n", conf_tl.name);
    }
    /* the guards never moved */
    FY_ASSERT_MEM_EQ(r.mem, expect, PAGE);
    FY_ASSERT_MEM_EQ(r.mem + 2 * PAGE, expect + 2 * PAGE, PAGE);
    free(expect);
    free(src);
    free(dst);
    region_close(&p, &r);
    pair_close(&p);
}

/* One refused operation: it must not touch the target, must report an error (at once, in its
 * completion, or through the flush that covers it), and must leave the ep usable. */
static void expect_refused(pair_t *p, region_t *r, const char *what, int kind, long off, size_t len)
{
    char before[3 * PAGE], src[2 * PAGE], dst[2 * PAGE]; /* a request may exceed the region */
    memcpy(before, r->mem, 3 * PAGE);
    conf_fill(src, sizeof(src), 999);
    memset(dst, 0x5a, sizeof(dst));
    conf_comp_t c;
    conf_comp_init(&c);
    ferry_status_t st;
    uint64_t res = 0x5a5a5a5a5a5a5a5aull;
    if (kind == 0)
        st = do_put(p, r, src, len, off, &c, 0);
    else if (kind == 1)
        st = do_put(p, r, src, len, off, &c, 1);
    else if (kind == 2)
        st = do_get(p, r, dst, len, off, &c);
    else
        st = p->a.ops->atomic(p->ab, FERRY_ATOMIC_ADD, 8, 1, 0, &res, raddr(r, off), r->rkey,
                              &c.super);
    unsigned nerr = p->a.nerr;
    ferry_status_t op_st = finish(p, st, &c);
    ferry_status_t fl = flush_wait(p, p->ab);
    int dirty = memcmp(before, r->mem, 3 * PAGE) != 0;
    FY_ASSERT_MSG(!dirty, "%s: %s touched the target", conf_tl.name, what);
    if (kind == 2) /* a refused get leaves the destination alone */
        for (size_t i = 0; i < len && i < sizeof(dst); i++)
            FY_ASSERT_MSG((unsigned char)dst[i] == 0x5a, "%s: %s wrote the destination",
                          conf_tl.name, what);
    FY_ASSERT_MSG(is_error(op_st) || is_error(fl), "%s: %s: op %s, flush %s: no error reported",
                  conf_tl.name, what, ferry_status_string(op_st), ferry_status_string(fl));
    /* When the op itself said OK (no completion to carry its error), the flush must. */
    if (!is_error(op_st))
        FY_ASSERT_MSG(is_error(fl), "%s: %s: accepted, and the covering flush said %s",
                      conf_tl.name, what, ferry_status_string(fl));
    /* (an op whose own call or completion carried the error has reported it; the flush
     * need not repeat it at this level: proto's flush reports it to the application,
     * api_put_refused checks that) */
    printf("  %-28s op %-22s flush %s\n", what, ferry_status_string(op_st),
           ferry_status_string(fl));
    if (p->a.nerr != nerr) { /* the ep failed for it: allowed where the conf file says so */
        FY_ASSERT_MSG(conf_tl.rma_dereg_fails_ep, "%s: %s failed the ep (err_cb)", conf_tl.name,
                      what);
        return;
    }
    /* the error is reported once: the next flush is clean, and the ep still works */
    FY_ASSERT_OK(flush_wait(p, p->ab));
    uint64_t before_rx = p->b.rx_msgs;
    char m[CONF_MSG_HDR];
    FY_ASSERT_OK(send_am(p, p->ab, AM_SHORT, 9, m, sizeof(m), 0, NULL));
    PUMP_UNTIL(p, p->b.rx_msgs > before_rx, "an AM after a refused op");
}

/* An access with a deregistered key where it may fail the ep (rma_dereg_fails_ep): on a pair
 * of its own, so the next clause has a working ep. */
static void dereg_refused_alone(const char *what, int kind)
{
    pair_t p;
    pair_open(&p);
    p.b.on_am = count_am;
    region_t gone;
    region_open(&p, &gone, FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE);
    p.b.ops->mem_dereg(p.b.md, gone.memh);
    gone.registered = 0;
    expect_refused(&p, &gone, what, kind, 0, 64);
    /* then a new ep to the peer carries an AM, fails (err_cb), or is refused at once: never
     * a hang */
    conf_addr_t ba;
    conf_addr(&p.b, &ba);
    fy_tl_ep_t *ep2 = NULL;
    ferry_status_t st = p.a.ops->ep_create(p.a.iface, ba.bytes, ba.bytes + ba.dlen, &ep2);
    const char *then = ferry_status_string(st);
    if (st == FERRY_OK) {
        uint64_t before_rx = p.b.rx_msgs;
        unsigned nerr = p.a.nerr;
        char m[CONF_MSG_HDR] = {0};
        st = send_am(&p, ep2, AM_SHORT, 9, m, sizeof(m), 0, NULL);
        if (st == FERRY_OK)
            PUMP_UNTIL(&p, p.b.rx_msgs > before_rx || p.a.nerr > nerr,
                       "an AM on a new ep after the failed one");
        then = st != FERRY_OK            ? ferry_status_string(st)
               : p.b.rx_msgs > before_rx ? "carries an AM"
                                         : ferry_status_string(p.a.err_st);
        p.a.ops->ep_destroy(ep2);
    }
    printf("  then a new ep to the peer: %s\n", then);
    region_close(&p, &gone);
    pair_close(&p);
}

static void rma_refused(void)
{
    pair_t p;
    pair_open(&p);
    if (!has_rma(&p.a)) {
        pair_close(&p);
        return;
    }
    p.b.on_am = count_am;
    region_t r, ro, gone;
    region_open(&p, &r, FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC);
    region_open(&p, &ro, FERRY_MEM_REMOTE_READ);
    region_open(&p, &gone, FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE);
    int amo = p.a.ops->atomic != NULL && (fy_tl_amo_ops(&p.a.attr, 8) & (1u << FERRY_ATOMIC_ADD));
    expect_refused(&p, &r, "put_short past the end", 0, PAGE - 4, 8);
    expect_refused(&p, &r, "put_zcopy past the end", 1, PAGE - 100, 200);
    expect_refused(&p, &r, "put_zcopy before the start", 1, -1, 16);
    expect_refused(&p, &r, "put_zcopy of the whole+1", 1, 0, PAGE + 1);
    expect_refused(&p, &r, "get past the end", 2, PAGE - 4, 8);
    expect_refused(&p, &r, "get before the start", 2, -8, 16);
    if (amo) {
        expect_refused(&p, &r, "atomic past the end", 3, PAGE, 8);
        expect_refused(&p, &r, "atomic before the start", 3, -8, 8);
    }
    expect_refused(&p, &ro, "put to a read-only region", 1, 0, 64);
    if (amo)
        expect_refused(&p, &ro, "atomic to a read-only region", 3, 0, 8);
    /* a key whose region was deregistered */
    p.b.ops->mem_dereg(p.b.md, gone.memh);
    gone.registered = 0;
    if (conf_tl.rma_dereg_fails_ep) {
        if (!conf_tl.rma_unchecked_dereg)
            dereg_refused_alone("put with a deregistered key", 1);
        else
            printf("  %s: puts bypass the target; a deregistered key is not checked\n",
                   conf_tl.name);
        dereg_refused_alone("get with a deregistered key", 2);
    } else if (!conf_tl.rma_unchecked_dereg) {
        expect_refused(&p, &gone, "put with a deregistered key", 1, 0, 64);
        expect_refused(&p, &gone, "get with a deregistered key", 2, 0, 64);
    } else {
        printf("  %s: puts bypass the target; a deregistered key is not checked\n", conf_tl.name);
    }
    region_close(&p, &gone);
    region_close(&p, &ro);
    region_close(&p, &r);
    pair_close(&p);
}

/* ---- flush ---- */

typedef struct flush_check {
    pair_t *p;
    conf_comp_t *ops;
    unsigned nops;
    region_t *r;
    const char *src;
    int checked;
} flush_check_t;

static void flush_then(conf_comp_t *c)
{
    flush_check_t *f = c->user;
    FY_ASSERT_OK(c->st);
    for (unsigned i = 0; i < f->nops; i++)
        FY_ASSERT_MSG(f->ops[i].calls == 1, "flush completed before operation %u", i);
    if (f->r != NULL)
        FY_ASSERT_MSG(memcmp(f->r->base, f->src, PAGE) == 0,
                      "flush completed before the put's data was in the target");
    /* AMs are remotely complete when the target holds them in order (they reach the
     * handler when it progresses, ep or no ep): close_flush checks they all arrive */
    f->checked = 1;
}

/* The second of two flushes: the first must have completed already. */
static void after_first(conf_comp_t *c)
{
    conf_comp_t *first = c->user;
    FY_ASSERT_MSG(first->calls == 1, "flushes completed out of order");
}

static void flush(void)
{
    pair_t p;
    pair_open(&p);
    p.b.on_am = count_am;
    /* idle: done at once (or soon), and a NULL completion never means "later" */
    FY_ASSERT_OK(flush_wait(&p, p.ab));
    ferry_status_t st = p.a.ops->ep_flush(p.ab, NULL);
    FY_ASSERT_MSG(st == FERRY_OK, "idle flush with no completion: %s", ferry_status_string(st));
    FY_ASSERT_OK(p.a.ops->ep_flush(p.ab, NULL)); /* and again */
    /* zcopy AMs and puts, then a flush: it completes after all of them */
    enum { N = 8 };
    conf_comp_t ops[2 * N];
    unsigned nops = 0;
    size_t len = 4 * p.a.attr.max_bcopy;
    if (len > (1u << 20))
        len = 1u << 20;
    char *big = malloc(len);
    conf_fill(big, len, 3);
    region_t r;
    int rma = (p.a.attr.caps & (FY_TL_CAP_PUT | FY_TL_CAP_GET)) != 0;
    char src[PAGE];
    if (rma)
        region_open(&p, &r, FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_READ);
    for (unsigned i = 0; i < N; i++) {
        conf_comp_init(&ops[nops]);
        st = send_am(&p, p.ab, AM_ZCOPY, 2, big, len, 8, &ops[nops]);
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
        if (st == FERRY_OK)
            ops[nops].calls = 1;
        nops++;
        if (rma) {
            conf_fill(src, PAGE, 40 + i);
            conf_comp_init(&ops[nops]);
            st = do_put(&p, &r, src, PAGE, 0, &ops[nops], 1);
            FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
            if (st == FERRY_OK)
                ops[nops].calls = 1;
            nops++;
        }
    }
    /* a NULL completion with work outstanding: "not yet" (NO_RESOURCE) or done (OK) */
    st = p.a.ops->ep_flush(p.ab, NULL);
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_ERR_NO_RESOURCE, "flush(NULL) answered %s",
                  ferry_status_string(st));
    flush_check_t f = {&p, ops, nops, rma ? &r : NULL, src, 0};
    conf_comp_t fc, fc2;
    conf_comp_init(&fc);
    fc.then = flush_then;
    fc.user = &f;
    conf_comp_init(&fc2);
    fc2.then = after_first;
    fc2.user = &fc;
    int64_t end = now_ms() + CONF_DEADLINE;
    while ((st = p.a.ops->ep_flush(p.ab, &fc.super)) == FERRY_ERR_NO_RESOURCE) {
        FY_ASSERT(now_ms() < end);
        pump(&p);
    }
    if (st == FERRY_OK) {
        fc.st = FERRY_OK;
        flush_then(&fc);
    } else {
        FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
        /* a second flush right behind it completes after it */
        ferry_status_t st2 = p.a.ops->ep_flush(p.ab, &fc2.super);
        FY_ASSERT(st2 == FERRY_OK || st2 == FERRY_INPROGRESS || st2 == FERRY_ERR_NO_RESOURCE);
        if (st2 == FERRY_OK)
            FY_ASSERT_MSG(0, "a flush behind an unfinished one said OK at once");
        PUMP_UNTIL(&p, fc.calls == 1, "flush");
        if (st2 == FERRY_INPROGRESS) {
            PUMP_UNTIL(&p, fc2.calls == 1, "second flush"); /* after_first: not before fc */
            FY_ASSERT_OK(fc2.st);
        }
    }
    FY_ASSERT(f.checked);
    if (rma)
        region_close(&p, &r);
    free(big);
    pair_close(&p);
}

/* ---- close ---- */

static void close_flush(void)
{
    pair_t p;
    pair_open(&p);
    p.b.on_am = count_am;
    size_t len = 2 * p.a.attr.max_bcopy + 1;
    char *big = calloc(1, len);
    conf_comp_t c[4];
    for (int i = 0; i < 4; i++) {
        conf_comp_init(&c[i]);
        ferry_status_t st = send_am(&p, p.ab, AM_ZCOPY, 4, big, len, 8, &c[i]);
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
        if (st == FERRY_OK)
            c[i].calls = 1, c[i].st = FERRY_OK;
    }
    FY_ASSERT_OK(flush_wait(&p, p.ab));
    for (int i = 0; i < 4; i++) {
        FY_ASSERT_EQ(c[i].calls, 1);
        FY_ASSERT_OK(c[i].st);
    }
    p.a.ops->ep_destroy(p.ab);
    p.ab = NULL;
    PUMP_UNTIL(&p, p.b.rx_msgs == 4, "messages flushed before the close");
    for (int i = 0; i < 4; i++)
        FY_ASSERT_EQ(c[i].calls, 1);
    free(big);
    pair_close(&p);
}

/* Counts id-4 AMs whose data is not all zero: read from a buffer after the user reused it. */
static unsigned late_reads;
static void zero_check_am(conf_node_t *n, uint8_t id, const void *data, size_t len)
{
    count_am(n, id, data, len);
    const unsigned char *d = data;
    if (id == 4)
        for (size_t i = 0; i < len; i++)
            if (d[i] != 0) {
                late_reads++;
                break;
            }
}

static void close_force(void)
{
    pair_t p;
    pair_open(&p);
    p.b.on_am = zero_check_am;
    late_reads = 0;
    /* large enough to need the peer (shm copies up to 2 MiB into its outbox at once) */
    size_t len = 3u << 20;
    if (len > p.a.attr.max_zcopy)
        len = p.a.attr.max_zcopy;
    char *big = calloc(1, len);
    enum { N = 6 };
    conf_comp_t c[N + 1];
    int pending[N + 1];
    for (int i = 0; i < N; i++) {
        conf_comp_init(&c[i]);
        struct iovec v = {big + 8, len - 8};
        ferry_status_t st = p.a.ops->am_zcopy(p.ab, 4, big, 8, &v, 1, &c[i].super);
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS || st == FERRY_ERR_NO_RESOURCE);
        pending[i] = st == FERRY_INPROGRESS;
    }
    conf_comp_init(&c[N]);
    ferry_status_t st = p.a.ops->ep_flush(p.ab, &c[N].super);
    pending[N] = st == FERRY_INPROGRESS;
    /* destroy with all of it outstanding: every completion runs once, before destroy returns
     * (the caller may free the buffers right after), with OK or CANCELED */
    p.a.ops->ep_destroy(p.ab);
    p.ab = NULL;
    for (int i = 0; i <= N; i++) {
        FY_ASSERT_MSG(c[i].calls == pending[i], "%s: op %d: %d calls by the end of ep_destroy",
                      conf_tl.name, i, c[i].calls);
        if (pending[i])
            FY_ASSERT_MSG(c[i].st == FERRY_OK || c[i].st == FERRY_ERR_CANCELED, "op %d: %s", i,
                          ferry_status_string(c[i].st));
    }
    memset(big, 0xdd, len); /* the user may reuse its memory now (B checks it never sees this) */
    for (int i = 0; i < 2000; i++)
        pump(&p);
    for (int i = 0; i <= N; i++)
        FY_ASSERT_EQ(c[i].calls, pending[i]);
    /* a message cancelled by the destroy is delivered whole or not at all: never read from
     * the buffer after ep_destroy returned */
    if (late_reads > 0)
        FYTEST_FAIL("%s: %u messages read after ep_destroy returned", conf_tl.name, late_reads);
    /* the iface still works: a new ep to the same peer carries a message */
    conf_addr_t ba;
    conf_addr(&p.b, &ba);
    p.ab = conf_connect(&p.a, &ba);
    uint64_t before = p.b.rx_msgs;
    last_id = 0;
    FY_ASSERT_OK(send_am(&p, p.ab, AM_SHORT, 11, big, 8, 0, NULL));
    PUMP_UNTIL(&p, p.b.rx_msgs > before && last_id == 11, "a message on a new ep");
    free(big);
    pair_close(&p);
}

/* iface_close with an ep still open and work outstanding: every completion runs once before
 * it returns, no err_cb, and the peer's iface goes on working. */
static void iface_close_open_eps(void)
{
    pair_t p;
    pair_open(&p);
    p.b.on_am = zero_check_am;
    late_reads = 0;
    size_t len = 3u << 20;
    if (len > p.a.attr.max_zcopy)
        len = p.a.attr.max_zcopy;
    char *big = calloc(1, len);
    conf_comp_t c[3];
    int pending[3];
    for (int i = 0; i < 2; i++) {
        conf_comp_init(&c[i]);
        struct iovec v = {big + 8, len - 8};
        ferry_status_t st = p.a.ops->am_zcopy(p.ab, 4, big, 8, &v, 1, &c[i].super);
        FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS || st == FERRY_ERR_NO_RESOURCE);
        pending[i] = st == FERRY_INPROGRESS;
    }
    conf_comp_init(&c[2]);
    pending[2] = p.a.ops->ep_flush(p.ab, &c[2].super) == FERRY_INPROGRESS;
    p.ab = NULL; /* closed with its iface */
    conf_close(&p.a);
    for (int i = 0; i < 3; i++)
        FY_ASSERT_MSG(c[i].calls == pending[i], "%s: op %d: %d calls by the end of iface_close",
                      conf_tl.name, i, c[i].calls);
    FY_ASSERT_EQ(p.a.nerr, 0);
    memset(big, 0xdd, len); /* reused (freed only at the end: see the check below) */
    /* B still works: a new node talks to it */
    conf_node_t a2;
    conf_open(&a2);
    conf_addr_t ba;
    conf_addr(&p.b, &ba);
    fy_tl_ep_t *ep = conf_connect(&a2, &ba);
    char m[8] = {0};
    struct iovec v = {m, sizeof(m)};
    last_id = 0;
    ferry_status_t st;
    int64_t end = now_ms() + CONF_DEADLINE;
    while ((st = a2.ops->am_short(ep, 21, &v, 1)) == FERRY_ERR_NO_RESOURCE) {
        FY_ASSERT(now_ms() < end);
        conf_progress(&a2);
        conf_progress(&p.b);
    }
    FY_ASSERT_OK(st);
    while (last_id != 21) {
        FY_ASSERT_MSG(now_ms() < end, "%s: B stopped working after its peer closed", conf_tl.name);
        conf_progress(&a2);
        conf_progress(&p.b);
    }
    if (late_reads > 0)
        FYTEST_FAIL("%s: %u messages read after iface_close returned", conf_tl.name, late_reads);
    free(big);
    a2.ops->ep_destroy(ep);
    conf_close(&a2);
    if (p.ba != NULL)
        p.b.ops->ep_destroy(p.ba);
    conf_close(&p.b);
}

/* ---- destroy from inside callbacks ---- */

static void destroy_in_comp_then(conf_comp_t *c)
{
    pair_t *p = c->user;
    if (p->ab != NULL) {
        p->a.ops->ep_destroy(p->ab);
        p->ab = NULL;
    }
}

static pair_t *am_destroy_pair;
static void destroy_in_am(conf_node_t *n, uint8_t id, const void *data, size_t len)
{
    (void)data, (void)len;
    last_id = id;
    if (id == 12 && am_destroy_pair->ba != NULL) {
        n->ops->ep_destroy(am_destroy_pair->ba);
        am_destroy_pair->ba = NULL;
    }
}

static void destroy_in_cb(void)
{
    /* 1: inside the completion of a zcopy, with more work queued behind it */
    pair_t p;
    pair_open(&p);
    p.b.on_am = count_am;
    size_t len = 4 * p.a.attr.max_bcopy + 1;
    char *big = calloc(1, len);
    conf_comp_t c[3];
    for (int i = 0; i < 3; i++) {
        conf_comp_init(&c[i]);
        c[i].user = &p;
    }
    c[0].then = destroy_in_comp_then;
    ferry_status_t st = send_am(&p, p.ab, AM_ZCOPY, 4, big, len, 8, &c[0]);
    if (st == FERRY_OK) { /* done at once: destroy here, as the callback would have */
        destroy_in_comp_then(&c[0]);
        c[0].calls = 1;
    }
    ferry_status_t st1 = FERRY_ERR_CANCELED, st2 = FERRY_ERR_CANCELED;
    if (p.ab != NULL) {
        struct iovec v = {big + 8, len - 8};
        st1 = p.a.ops->am_zcopy(p.ab, 4, big, 8, &v, 1, &c[1].super);
        if (p.ab != NULL)
            st2 = p.a.ops->ep_flush(p.ab, &c[2].super);
    }
    PUMP_UNTIL(&p, c[0].calls == 1, "the zcopy that destroys");
    FY_ASSERT(p.ab == NULL);
    FY_ASSERT_EQ(c[1].calls, st1 == FERRY_INPROGRESS);
    FY_ASSERT_EQ(c[2].calls, st2 == FERRY_INPROGRESS);
    for (int i = 0; i < 1000; i++)
        pump(&p);
    FY_ASSERT_EQ(c[1].calls, st1 == FERRY_INPROGRESS);
    pair_close(&p);

    /* 2: inside a flush completion */
    pair_open(&p);
    p.b.on_am = count_am;
    conf_comp_init(&c[0]);
    c[0].user = &p;
    st = send_am(&p, p.ab, AM_ZCOPY, 4, big, len, 8, &c[0]);
    FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
    conf_comp_init(&c[1]);
    c[1].user = &p;
    c[1].then = destroy_in_comp_then;
    st = p.a.ops->ep_flush(p.ab, &c[1].super);
    if (st == FERRY_OK)
        destroy_in_comp_then(&c[1]);
    else
        PUMP_UNTIL(&p, c[1].calls == 1, "the flush that destroys");
    FY_ASSERT(p.ab == NULL);
    if (st == FERRY_INPROGRESS)
        FY_ASSERT_EQ(c[0].calls, 1); /* the zcopy completed before the flush that covers it */
    pair_close(&p);

    /* 3: the receiver destroys its ep to the sender inside the receive handler, then makes
     * a new one and answers on it */
    pair_open(&p);
    am_destroy_pair = &p;
    p.b.on_am = destroy_in_am;
    FY_ASSERT_OK(send_am(&p, p.ab, AM_SHORT, 12, big, 8, 0, NULL));
    PUMP_UNTIL(&p, p.b.rx_msgs == 1, "the AM that destroys");
    FY_ASSERT(p.ba == NULL);
    FY_ASSERT_EQ(last_id, 12);
    for (int i = 0; i < 1000; i++)
        pump(&p);
    conf_addr_t aa;
    conf_addr(&p.a, &aa);
    p.ba = conf_connect(&p.b, &aa);
    p.a.on_am = count_am;
    last_id = 0;
    struct iovec v = {big, 8};
    int64_t end = now_ms() + CONF_DEADLINE;
    while ((st = p.b.ops->am_short(p.ba, 20, &v, 1)) == FERRY_ERR_NO_RESOURCE) {
        FY_ASSERT(now_ms() < end);
        pump(&p);
    }
    FY_ASSERT_OK(st);
    PUMP_UNTIL(&p, last_id == 20, "the answer on a new ep");
    pair_close(&p);
    free(big);
}

/* ---- back-pressure ---- */

static void back_pressure(void)
{
    pair_t p;
    pair_open(&p);
    size_t len = p.a.attr.max_bcopy < 8192 ? p.a.attr.max_bcopy : 8192;
    char *buf = malloc(len);
    const uint64_t limit = 512u << 20; /* bytes: well above any sane send queue */
    uint32_t seq = 0;
    ferry_status_t st = FERRY_OK;
    /* B does not progress: A must be told to wait */
    for (uint64_t sent = 0; sent < limit; sent += len) {
        conf_msg_fill(buf, len, seq);
        struct iovec v = {buf, len};
        st = p.a.ops->am_bcopy(p.ab, 1, &v, 1);
        if (st == FERRY_ERR_NO_RESOURCE)
            break;
        FY_ASSERT_OK(st);
        seq++;
        if (seq % 64 == 0)
            conf_progress(&p.a); /* the sender may progress; the receiver does not */
    }
    if (st != FERRY_ERR_NO_RESOURCE) {
        FYTEST_FAIL("%s: %u messages (%" PRIu64 " MiB) queued, never NO_RESOURCE", conf_tl.name,
                    seq, (uint64_t)seq * len >> 20);
    } else {
        printf("  NO_RESOURCE after %u messages of %zu bytes\n", seq, len);
    }
    /* the receiver resumes: everything arrives, in order, and sending works again */
    PUMP_UNTIL(&p, p.b.rx_expect == seq || p.b.rx_bad, "the queued messages");
    FY_ASSERT_MSG(!p.b.rx_bad, "%s", p.b.rx_why);
    conf_msg_fill(buf, len, seq);
    FY_ASSERT_OK(send_am(&p, p.ab, AM_BCOPY, 1, buf, len, 0, NULL));
    PUMP_UNTIL(&p, p.b.rx_expect == seq + 1 || p.b.rx_bad, "the message after");
    FY_ASSERT_MSG(!p.b.rx_bad, "%s", p.b.rx_why);
    free(buf);
    pair_close(&p);
}

/* ---- a peer in another process ---- */

/* The peer role: open a node, give the parent its address, take the parent's, connect back,
 * then progress, telling the parent "r" once it has received 10 messages, until the parent
 * closes the pipe (or kills it). */
static int peer_role(int rfd, int wfd, int argc, char **argv)
{
    (void)argc, (void)argv;
    conf_node_t n;
    conf_open(&n);
    n.on_am = count_am;
    conf_addr_t mine, theirs;
    conf_addr(&n, &mine);
    if (fyproc_send(wfd, &mine, sizeof(mine)) != 0 ||
        fyproc_recv(rfd, &theirs, sizeof(theirs), CONF_DEADLINE) != 0)
        return 3;
    fy_tl_ep_t *ep = NULL;
    if (n.ops->ep_create(n.iface, theirs.bytes, theirs.bytes + theirs.dlen, &ep) != FERRY_OK)
        return 4;
    if (fyproc_send(wfd, "c", 1) != 0)
        return 5;
    int told = 0;
    for (unsigned i = 0;; i++) {
        conf_progress(&n);
        if (!told && n.rx_msgs >= 10) {
            told = 1;
            if (fyproc_send(wfd, "r", 1) != 0)
                return 6;
        }
        if ((i & 63) == 0 && fyproc_readable(rfd)) {
            char ch;
            if (read(rfd, &ch, 1) <= 0 || ch != 'p')
                break;
            /* parked: out of every transport call until killed (or the pipe closes) */
            if (fyproc_send(wfd, "p", 1) != 0 || read(rfd, &ch, 1) <= 0)
                break;
        }
    }
    n.ops->ep_destroy(ep);
    conf_close(&n);
    return 0;
}

static const fyproc_role_t roles[] = {{"peer", peer_role}};

enum { DIE_BEFORE_CONNECT, DIE_MID_TRANSFER, DIE_DURING_FLUSH };

static conf_node_t *death_node;
static void destroy_in_err(conf_node_t *n, fy_tl_ep_t *ep, ferry_status_t st)
{
    (void)st;
    n->ops->ep_destroy(ep);
    n->user = NULL; /* the ep is gone */
}

/* conf_tl.peer_dies_parked: take the peer out of its progress loop before it is killed or
 * left stopped; told: it has said "r" (10 messages received), which is read first. */
static void park_peer(fyproc_t *child, int told)
{
    char ch;
    if (told)
        FY_ASSERT_MSG(fyproc_recv(child->rfd, &ch, 1, CONF_DEADLINE) == 0 && ch == 'r',
                      "the peer did not say it had messages");
    FY_ASSERT_EQ(fyproc_send(child->wfd, "p", 1), 0);
    FY_ASSERT_MSG(fyproc_recv(child->rfd, &ch, 1, CONF_DEADLINE) == 0 && ch == 'p',
                  "the peer did not park");
}

static void peer_death(int stage)
{
    if (!conf_tl.cross_process) {
        printf("  %s: peers are in one process only\n", conf_tl.name);
        return;
    }
    conf_node_t n;
    conf_open(&n);
    death_node = &n;
    n.on_am = count_am;
    fyproc_t child;
    FY_ASSERT_EQ(fyproc_spawn(&child, "peer", NULL, 120), 0);
    conf_addr_t mine, theirs;
    conf_addr(&n, &mine);
    FY_ASSERT_MSG(fyproc_recv(child.rfd, &theirs, sizeof(theirs), CONF_DEADLINE) == 0,
                  "the peer gave no address");
    if (stage == DIE_BEFORE_CONNECT) {
        fyproc_kill(&child, SIGKILL);
    } else {
        FY_ASSERT_EQ(fyproc_send(child.wfd, &mine, sizeof(mine)), 0);
        char ch;
        FY_ASSERT_MSG(fyproc_recv(child.rfd, &ch, 1, CONF_DEADLINE) == 0, "peer did not connect");
    }
    fy_tl_ep_t *ep = NULL;
    ferry_status_t st = n.ops->ep_create(n.iface, theirs.bytes, theirs.bytes + theirs.dlen, &ep);
    if (st != FERRY_OK) {
        /* refusing to connect to a dead peer is a fine answer */
        FY_ASSERT_MSG(stage == DIE_BEFORE_CONNECT, "ep_create: %s", ferry_status_string(st));
        printf("  ep_create to the dead peer: %s\n", ferry_status_string(st));
        fyproc_release(&child);
        conf_close(&n);
        return;
    }
    n.user = ep;
    n.on_err = destroy_in_err; /* the contract allows ep_destroy inside err_cb */
    /* large enough to need the peer: past what the transport completes by copying it (shm's
     * outbox), or where it copies none, past what kernel socket buffers take at once */
    size_t zlen = n.attr.max_zcopy_local != 0 ? n.attr.max_zcopy_local + 1 : CONF_INFLIGHT;
    if (zlen > n.attr.max_zcopy)
        zlen = n.attr.max_zcopy;
    char *big = calloc(1, zlen);
    enum { NZ = 4 };
    conf_comp_t zc[NZ], fc;
    int zpending[NZ] = {0}, fpending = 0;
    for (int i = 0; i < NZ; i++)
        conf_comp_init(&zc[i]);
    conf_comp_init(&fc);
    int64_t end = now_ms() + CONF_DEADLINE;
    if (stage == DIE_MID_TRANSFER) {
        /* small messages until the peer has some, then it dies, then keep sending */
        char m[64] = {0};
        struct iovec v = {m, sizeof(m)};
        while (!fyproc_readable(child.rfd)) {
            FY_ASSERT(now_ms() < end);
            st = n.ops->am_short(ep, 1, &v, 1);
            FY_ASSERT(st == FERRY_OK || st == FERRY_ERR_NO_RESOURCE);
            conf_progress(&n);
        }
        if (conf_tl.peer_dies_parked)
            park_peer(&child, 1);
        fyproc_kill(&child, SIGKILL);
    } else if (stage == DIE_DURING_FLUSH) {
        /* the peer stops; work and a flush that cannot finish; then the peer dies */
        if (conf_tl.peer_dies_parked)
            park_peer(&child, 0);
        else
            fyproc_kill(&child, SIGSTOP);
    }
    /* work on the ep */
    int failed_now = 0;
    for (int i = 0; i < NZ && n.user != NULL; i++) {
        struct iovec v = {big + 8, zlen - 8};
        st = n.ops->am_zcopy(ep, 1, big, 8, &v, 1, &zc[i].super);
        zpending[i] = st == FERRY_INPROGRESS;
        failed_now |= is_error(st);
        conf_progress(&n);
    }
    if (n.user != NULL) {
        st = n.ops->ep_flush(ep, &fc.super);
        fpending = st == FERRY_INPROGRESS;
        failed_now |= is_error(st);
        if (stage == DIE_DURING_FLUSH)
            FY_ASSERT_MSG(st == FERRY_INPROGRESS || is_error(st),
                          "flush to a stopped peer with work outstanding: %s",
                          ferry_status_string(st));
        else if (st == FERRY_OK && conf_pending("defect 5: a flush to a dead shm peer returns OK"))
            FY_ASSERT_MSG(0, "flush to a dead peer said OK");
    }
    if (stage == DIE_DURING_FLUSH) {
        for (int i = 0; i < 100; i++)
            conf_progress(&n);
        fyproc_kill(&child, SIGKILL);
    }
    /* now an error must come: err_cb, the flush's completion, or a failing send */
    int sends_fail = 0;
    while (!(n.nerr > 0 && (!fpending || fc.calls == 1))) {
        if (now_ms() > end) {
            if (stage == DIE_DURING_FLUSH && fpending && fc.calls == 0 && n.nerr == 0 &&
                !conf_pending("defect 5: a flush to a dead shm peer never ends in an error"))
                break;
            FYTEST_FAIL("%s: peer dead for %d ms: err_cb %u, flush %s", conf_tl.name, CONF_DEADLINE,
                        n.nerr,
                        fpending ? (fc.calls ? ferry_status_string(fc.st) : "pending") : "-");
        }
        conf_progress(&n);
        if (n.user != NULL && !sends_fail) {
            char m[8] = {0};
            struct iovec v = {m, sizeof(m)};
            st = n.ops->am_short(ep, 1, &v, 1);
            if (is_error(st)) {
                sends_fail = 1;
                if (!fpending && n.nerr == 0 && failed_now)
                    break; /* refused at once: the error is reported */
            }
        }
        if (sends_fail && n.nerr == 0 && !fpending)
            break;
    }
    if (fpending && fc.calls == 1)
        FY_ASSERT_MSG(is_error(fc.st), "%s: flush to a dead peer completed with %s", conf_tl.name,
                      ferry_status_string(fc.st));
    for (int i = 0; i < NZ; i++)
        if (zpending[i] && n.nerr > 0)
            FY_ASSERT_MSG(zc[i].calls == 1, "zcopy %d never completed after the peer failed", i);
    printf("  err_cb %u (%s), flush %s, sends fail %d\n", n.nerr,
           n.nerr ? ferry_status_string(n.err_st) : "-",
           fpending ? (fc.calls ? ferry_status_string(fc.st) : "pending") : "-", sends_fail);
    if (n.user != NULL) /* not destroyed by err_cb */
        n.ops->ep_destroy(ep);
    fyproc_release(&child);
    free(big);
    conf_close(&n);
}

/* The peer dies while the ep is idle: a flush then must not keep saying OK as if the peer
 * were there; within the deadline it (or err_cb) reports the death. */
static void peer_death_idle_flush(void)
{
    if (!conf_tl.cross_process) {
        printf("  %s: peers are in one process only\n", conf_tl.name);
        return;
    }
    conf_node_t n;
    conf_open(&n);
    n.on_am = count_am;
    fyproc_t child;
    FY_ASSERT_EQ(fyproc_spawn(&child, "peer", NULL, 120), 0);
    conf_addr_t mine, theirs;
    conf_addr(&n, &mine);
    FY_ASSERT(fyproc_recv(child.rfd, &theirs, sizeof(theirs), CONF_DEADLINE) == 0);
    FY_ASSERT_EQ(fyproc_send(child.wfd, &mine, sizeof(mine)), 0);
    char ch;
    FY_ASSERT(fyproc_recv(child.rfd, &ch, 1, CONF_DEADLINE) == 0);
    fy_tl_ep_t *ep = NULL;
    FY_ASSERT_OK(n.ops->ep_create(n.iface, theirs.bytes, theirs.bytes + theirs.dlen, &ep));
    char m[64] = {0};
    struct iovec v = {m, sizeof(m)};
    int64_t end = now_ms() + CONF_DEADLINE;
    while (!fyproc_readable(child.rfd)) { /* the peer has 10 messages */
        FY_ASSERT(now_ms() < end);
        ferry_status_t st = n.ops->am_short(ep, 1, &v, 1);
        FY_ASSERT(st == FERRY_OK || st == FERRY_ERR_NO_RESOURCE);
        conf_progress(&n);
    }
    conf_comp_t fc;
    conf_comp_init(&fc);
    ferry_status_t st = n.ops->ep_flush(ep, &fc.super);
    if (st == FERRY_INPROGRESS)
        while (fc.calls == 0) {
            FY_ASSERT(now_ms() < end);
            conf_progress(&n);
        }
    if (conf_tl.peer_dies_parked)
        park_peer(&child, 1);
    fyproc_kill(&child, SIGKILL);
    /* idle now, and the peer is gone: a transport that watches its peers (tcp: the socket,
     * shm: the process) says so within a moment; udp learns it from traffic only */
    end = now_ms() + 3000;
    ferry_status_t fl = FERRY_OK;
    while (n.nerr == 0 && !is_error(fl) && now_ms() < end) {
        conf_progress(&n);
        fl = n.ops->ep_flush(ep, NULL);
        FY_ASSERT_MSG(fl != FERRY_INPROGRESS, "flush(NULL) said INPROGRESS");
    }
    printf("  idle: err_cb %u, flush %s\n", n.nerr, ferry_status_string(fl));
    if (n.nerr == 0 && !is_error(fl)) {
        /* not noticed while idle: the next operation and its flush must fail */
        ferry_status_t st1 = n.ops->am_short(ep, 1, &v, 1);
        conf_comp_init(&fc);
        st = is_error(st1) ? st1 : n.ops->ep_flush(ep, &fc.super);
        FY_ASSERT_MSG(st != FERRY_OK, "%s: flush after a send to a dead peer said OK",
                      conf_tl.name);
        end = now_ms() + CONF_DEADLINE;
        while (st == FERRY_INPROGRESS && fc.calls == 0) {
            FY_ASSERT_MSG(now_ms() < end, "%s: flush to a dead peer pending for %d ms",
                          conf_tl.name, CONF_DEADLINE);
            conf_progress(&n);
        }
        FY_ASSERT_MSG(st != FERRY_INPROGRESS || is_error(fc.st),
                      "%s: flush to a dead peer completed with %s", conf_tl.name,
                      ferry_status_string(fc.st));
        printf("  after a send: err_cb %u, flush %s\n", n.nerr,
               ferry_status_string(st == FERRY_INPROGRESS ? fc.st : st));
    }
    if (n.nerr > 0) { /* after err_cb, the ep reports its failure */
        fl = n.ops->ep_flush(ep, NULL);
        FY_ASSERT_MSG(is_error(fl), "%s: flush on a failed ep said %s", conf_tl.name,
                      ferry_status_string(fl));
        FY_ASSERT_MSG(is_error(n.ops->am_short(ep, 1, &v, 1)), "a send on a failed ep");
    }
    n.ops->ep_destroy(ep);
    fyproc_release(&child);
    conf_close(&n);
}

static void peer_death_before_connect(void)
{
    peer_death(DIE_BEFORE_CONNECT);
}
static void peer_death_mid_transfer(void)
{
    peer_death(DIE_MID_TRANSFER);
}
static void peer_death_during_flush(void)
{
    peer_death(DIE_DURING_FLUSH);
}

/* ---- through the public API: proto splits what the transport cannot take at once ---- */

static size_t api_got;
static ferry_status_t api_am_recv(void *arg, const void *header, size_t header_len,
                                  const void *data, size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)reply_ep;
    FY_ASSERT_MSG(conf_diff(data, len, 9) < 0, "the big AM arrived changed");
    api_got = len;
    return FERRY_OK;
}

typedef struct api {
    ferry_context_t *ctx;
    ferry_worker_t *w[2];
    ferry_ep_t *ep[2];
    size_t max_zcopy, max_rma;
} api_t;

/* A context with FERRY_TLS naming this transport alone, two workers, eps both ways. */
static void api_open(api_t *a)
{
    setenv("FERRY_TLS", conf_tl.name, 1);
    conf_env();
    conf_node_t n;
    conf_open(&n); /* for the transport's maxima */
    a->max_zcopy = n.attr.max_zcopy;
    a->max_rma = n.attr.max_rma;
    conf_close(&n);
    FY_ASSERT_OK(ferry_context_create(NULL, &a->ctx));
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_worker_create(a->ctx, NULL, &a->w[i]));
    for (int i = 0; i < 2; i++) {
        char addr[4096];
        size_t alen = sizeof(addr);
        FY_ASSERT_OK(ferry_worker_get_address(a->w[1 - i], addr, &alen));
        ferry_ep_params_t epp = {
            .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
        FY_ASSERT_OK(ferry_ep_create(a->w[i], &epp, &a->ep[i]));
    }
}

static void api_close(api_t *a)
{
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_ep_close(a->ep[i], FERRY_EP_CLOSE_FORCE, NULL));
    for (int i = 0; i < 2; i++)
        ferry_worker_destroy(a->w[i]);
    ferry_context_destroy(a->ctx);
}

/* Run a request to its end (progressing both workers); returns its final status. */
static ferry_status_t api_run(api_t *a, ferry_request_t *req, ferry_status_t st)
{
    if (st != FERRY_INPROGRESS)
        return st;
    int64_t end = now_ms() + 4 * CONF_DEADLINE;
    while (req->status == FERRY_INPROGRESS) {
        FY_ASSERT_MSG(now_ms() < end, "%s: a request did not complete", conf_tl.name);
        ferry_worker_progress(a->w[0]);
        ferry_worker_progress(a->w[1]);
    }
    return req->status;
}

static ferry_request_t *api_req(ferry_request_t *r)
{
    memset(r, 0, sizeof(*r));
    r->status = FERRY_INPROGRESS;
    return r;
}

/* A region of w[1]'s memory and its key on ep[0]. */
typedef struct api_region {
    char *buf;
    ferry_mem_t *mem;
    ferry_rkey_t *rkey;
} api_region_t;

static void api_region_open(api_t *a, api_region_t *r, size_t len)
{
    r->buf = calloc(1, len);
    FY_ASSERT(r->buf != NULL);
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_ADDRESS | FERRY_MEM_FIELD_LENGTH,
                             .address = r->buf,
                             .length = len};
    FY_ASSERT_OK(ferry_mem_map(a->ctx, &mp, &r->mem));
    char rk[1024];
    size_t rklen = sizeof(rk);
    FY_ASSERT_OK(ferry_rkey_pack(a->ctx, r->mem, rk, &rklen));
    FY_ASSERT_OK(ferry_rkey_unpack(a->ep[0], rk, rklen, &r->rkey));
}

static void api_region_close(api_t *a, api_region_t *r)
{
    ferry_rkey_destroy(r->rkey);
    FY_ASSERT_OK(ferry_mem_unmap(a->ctx, r->mem));
    free(r->buf);
}

/* An AM larger than the transport's max_zcopy, through the API: proto splits it. */
static void api_am_beyond_max(void)
{
    api_t a;
    api_open(&a);
    size_t len = CONF_BIG + 12345;
    if (len <= a.max_zcopy)
        printf("  %s: max_zcopy %zu is above the %zu bytes sent\n", conf_tl.name, a.max_zcopy, len);
    FY_ASSERT_OK(ferry_worker_set_am_handler(a.w[1], 5, api_am_recv, NULL));
    char *buf = malloc(len);
    conf_fill(buf, len, 9);
    ferry_request_t req;
    api_got = 0;
    ferry_status_t st = ferry_am_send(a.ep[0], 5, "h", 1, buf, len, api_req(&req));
    FY_ASSERT_MSG(api_run(&a, &req, st) == FERRY_OK, "%s: am_send of %zu bytes: %s", conf_tl.name,
                  len, ferry_status_string(st));
    int64_t end = now_ms() + 4 * CONF_DEADLINE;
    while (api_got != len) {
        FY_ASSERT_MSG(now_ms() < end, "%s: the big AM did not arrive", conf_tl.name);
        ferry_worker_progress(a.w[0]);
        ferry_worker_progress(a.w[1]);
    }
    free(buf);
    api_close(&a);
}

/* A put larger than the transport's one-call maximum (when it is small enough to try), and
 * larger than its zcopy AM maximum (emulated RMA rides on AMs), then a flush. */
static void api_put_beyond_max(void)
{
    api_t a;
    api_open(&a);
    size_t len = CONF_BIG + 12345;
    if (a.max_rma < len - 1)
        len = a.max_rma + 4097;
    printf("  %s: max_zcopy %zu, max_rma %zu; a put of %zu bytes\n", conf_tl.name, a.max_zcopy,
           a.max_rma, len);
    char *buf = malloc(len);
    conf_fill(buf, len, 9);
    api_region_t r;
    api_region_open(&a, &r, len);
    ferry_request_t req;
    ferry_status_t st =
        ferry_put(a.ep[0], buf, len, (uint64_t)(uintptr_t)r.buf, r.rkey, api_req(&req));
    FY_ASSERT_MSG(api_run(&a, &req, st) == FERRY_OK, "%s: put of %zu bytes: %s", conf_tl.name, len,
                  ferry_status_string(req.status));
    st = ferry_ep_flush(a.ep[0], api_req(&req));
    FY_ASSERT_OK(api_run(&a, &req, st));
    long d = conf_diff(r.buf, len, 9);
    FY_ASSERT_MSG(d < 0, "%s: the big put landed changed at byte %ld", conf_tl.name, d);
    api_region_close(&a, &r);
    free(buf);
    api_close(&a);
}

/* Through the API, puts the target must refuse: out of bounds (proto may refuse it at once,
 * from the key's bounds), and into a region the target unmapped (only the target knows).
 * Nothing is touched, and an error reaches the application: at once, or from the flush that
 * covers the put (issue 14, defect 1). */
static void api_put_refused(void)
{
    api_t a;
    api_open(&a);
    for (int unmapped = 0; unmapped < 2; unmapped++) {
        api_region_t r;
        api_region_open(&a, &r, PAGE);
        char before[PAGE], src[64];
        memcpy(before, r.buf, PAGE);
        conf_fill(src, sizeof(src), 4);
        uint64_t at = (uint64_t)(uintptr_t)(r.buf + (unmapped ? 0 : PAGE - 16));
        if (unmapped) {
            if (conf_tl.rma_unchecked_dereg) {
                printf("  %s: puts bypass the target; unmapped region not tried\n", conf_tl.name);
                api_region_close(&a, &r);
                break;
            }
            FY_ASSERT_OK(ferry_mem_unmap(a.ctx, r.mem));
        }
        ferry_request_t req, freq;
        ferry_status_t st = ferry_put(a.ep[0], src, sizeof(src), at, r.rkey, api_req(&req));
        ferry_status_t put_st = api_run(&a, &req, st);
        ferry_status_t fl = ferry_ep_flush(a.ep[0], api_req(&freq));
        fl = api_run(&a, &freq, fl);
        const char *what = unmapped ? "put into an unmapped region" : "put past the end";
        printf("  %s: put %s (%s), flush %s\n", what, ferry_status_string(put_st),
               st == FERRY_INPROGRESS ? "later" : "at once", ferry_status_string(fl));
        FY_ASSERT_MSG(memcmp(before, r.buf, PAGE) == 0, "%s: %s touched the region", conf_tl.name,
                      what);
        FY_ASSERT_MSG(is_error(put_st) || is_error(fl), "%s: %s: no error at all", conf_tl.name,
                      what);
        if (!is_error(st) && !is_error(fl))
            FYTEST_FAIL("%s: %s refused (%s) but the covering flush said %s", conf_tl.name, what,
                        ferry_status_string(put_st), ferry_status_string(fl));
        if (unmapped) {
            ferry_rkey_destroy(r.rkey);
            free(r.buf);
        } else {
            api_region_close(&a, &r);
        }
    }
    api_close(&a);
}

/* ferry_ep_close through the API in both modes, with AMs outstanding: FLUSH completes them
 * all (and they arrive), FORCE completes each once (OK or CANCELED) and the worker goes on. */
static unsigned api_count;
static ferry_status_t api_count_recv(void *arg, const void *header, size_t header_len,
                                     const void *data, size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)data, (void)len, (void)reply_ep;
    api_count++;
    return FERRY_OK;
}

static unsigned api_done_count;
static void api_done_cb(ferry_request_t *req, ferry_status_t st)
{
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_ERR_CANCELED, "%s: a request ended with %s",
                  conf_tl.name, ferry_status_string(st));
    FY_ASSERT_MSG(req->user_data == NULL, "a request completed twice");
    req->user_data = req; /* marks it done */
    api_done_count++;
}

static void api_close_modes(void)
{
    api_t a;
    api_open(&a);
    FY_ASSERT_OK(ferry_worker_set_am_handler(a.w[1], 6, api_count_recv, NULL));
    enum { N = 16 };
    size_t len = 1u << 20;
    char *buf = calloc(1, len);
    ferry_request_t reqs[N], creq;
    int pend[N];
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 1) { /* a fresh ep from w[0] to w[1] */
            char addr[4096];
            size_t alen = sizeof(addr);
            FY_ASSERT_OK(ferry_worker_get_address(a.w[1], addr, &alen));
            ferry_ep_params_t epp = {
                .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = alen};
            FY_ASSERT_OK(ferry_ep_create(a.w[0], &epp, &a.ep[0]));
        }
        api_count = 0;
        api_done_count = 0;
        unsigned started = 0;
        for (int i = 0; i < N; i++) {
            api_req(&reqs[i]);
            reqs[i].cb = api_done_cb;
            ferry_status_t st = ferry_am_send(a.ep[0], 6, NULL, 0, buf, len, &reqs[i]);
            FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "am_send: %s",
                          ferry_status_string(st));
            pend[i] = st == FERRY_INPROGRESS;
            started += pend[i];
        }
        unsigned mode_flag = mode == 0 ? FERRY_EP_CLOSE_FLUSH : FERRY_EP_CLOSE_FORCE;
        ferry_status_t st = ferry_ep_close(a.ep[0], mode_flag, api_req(&creq));
        FY_ASSERT_MSG(api_run(&a, &creq, st) == FERRY_OK, "%s: ferry_ep_close(%s): %s",
                      conf_tl.name, mode ? "FORCE" : "FLUSH", ferry_status_string(creq.status));
        a.ep[0] = NULL;
        int64_t end = now_ms() + 4 * CONF_DEADLINE;
        while (api_done_count < started || (mode == 0 && api_count < N)) {
            FY_ASSERT_MSG(now_ms() < end, "%s: close %s: %u of %u requests, %u of %d AMs",
                          conf_tl.name, mode ? "FORCE" : "FLUSH", api_done_count, started,
                          api_count, N);
            ferry_worker_progress(a.w[0]);
            ferry_worker_progress(a.w[1]);
        }
        if (mode == 0)
            for (int i = 0; i < N; i++)
                FY_ASSERT_MSG(!pend[i] || reqs[i].status == FERRY_OK, "FLUSH close: request %d: %s",
                              i, ferry_status_string(reqs[i].status));
        for (int i = 0; i < 1000; i++) { /* nothing completes twice (api_done_cb checks) */
            ferry_worker_progress(a.w[0]);
            ferry_worker_progress(a.w[1]);
        }
        FY_ASSERT_EQ(api_done_count, started);
        printf("  close %s: %u of %d requests were pending; %u AMs arrived\n",
               mode ? "FORCE" : "FLUSH", started, N, api_count);
    }
    free(buf);
    FY_ASSERT_OK(ferry_ep_close(a.ep[1], FERRY_EP_CLOSE_FORCE, NULL));
    for (int i = 0; i < 2; i++)
        ferry_worker_destroy(a.w[i]);
    ferry_context_destroy(a.ctx);
}

/* ferry_worker_flush with a request returns at once (OK or INPROGRESS) and completes the
 * request from progress, even while the peer is not progressing (issue 14, defect 2: it
 * ignored req and spun). */
static void api_worker_flush_req(void)
{
    api_t a;
    api_open(&a);
    FY_ASSERT_OK(ferry_worker_set_am_handler(a.w[1], 6, api_count_recv, NULL));
    api_count = 0;
    size_t len = 1u << 20;
    char *buf = calloc(1, len);
    for (int i = 0; i < 4; i++)
        FY_ASSERT(ferry_am_send(a.ep[0], 6, NULL, 0, buf, len, NULL) == FERRY_OK);
    ferry_request_t req;
    /* w[1] is not progressed: the flush cannot finish now, and must not wait for it */
    ferry_status_t st = ferry_worker_flush(a.w[0], api_req(&req));
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_INPROGRESS, "worker_flush: %s",
                  ferry_status_string(st));
    FY_ASSERT_OK(api_run(&a, &req, st));
    int64_t end = now_ms() + CONF_DEADLINE;
    while (api_count < 4) {
        FY_ASSERT(now_ms() < end);
        ferry_worker_progress(a.w[1]);
    }
    free(buf);
    api_close(&a);
}

/* A receiver that stops progressing: the sender's queue stays under FERRY_MAX_QUEUED and the
 * application is told FERRY_ERR_NO_RESOURCE; when the receiver resumes, everything accepted
 * arrives (issue 14, defect 4: without a limit that counts what the transport carries too,
 * the sender would queue the whole 256 MiB). */
static void api_back_pressure(void)
{
    setenv("FERRY_MAX_QUEUED", "8m", 1);
    api_t a;
    api_open(&a);
    FY_ASSERT_OK(ferry_worker_set_am_handler(a.w[1], 6, api_count_recv, NULL));
    api_count = 0;
    size_t len = 64u << 10;
    char *buf = calloc(1, len);
    unsigned sent = 0;
    ferry_status_t st = FERRY_OK;
    for (uint64_t total = 0; total < (256u << 20); total += len) {
        st = ferry_am_send(a.ep[0], 6, NULL, 0, buf, len, NULL);
        if (st != FERRY_OK)
            break;
        sent++;
        ferry_worker_progress(a.w[0]); /* the sender progresses; the receiver does not */
    }
    printf("  %s: %u messages of %zu bytes accepted, then %s\n", conf_tl.name, sent, len,
           ferry_status_string(st));
    FY_ASSERT_MSG(st == FERRY_ERR_NO_RESOURCE, "%s: 256 MiB queued, never NO_RESOURCE (%s)",
                  conf_tl.name, ferry_status_string(st));
    int64_t end = now_ms() + 4 * CONF_DEADLINE;
    while (api_count < sent) {
        FY_ASSERT_MSG(now_ms() < end, "%s: %u of %u messages arrived", conf_tl.name, api_count,
                      sent);
        ferry_worker_progress(a.w[0]);
        ferry_worker_progress(a.w[1]);
    }
    free(buf);
    api_close(&a);
}

FYTEST_MAIN_ROLES(roles, FYTEST_CASE(am_sizes), FYTEST_CASE(am_beyond_max), FYTEST_CASE(am_iov),
                  FYTEST_CASE(am_order), FYTEST_CASE(rma_edges), FYTEST_CASE(rma_refused),
                  FYTEST_CASE(flush), FYTEST_CASE(close_flush), FYTEST_CASE(close_force),
                  FYTEST_CASE(iface_close_open_eps), FYTEST_CASE(destroy_in_cb),
                  FYTEST_CASE(back_pressure), FYTEST_CASE(peer_death_before_connect),
                  FYTEST_CASE(peer_death_mid_transfer), FYTEST_CASE(peer_death_during_flush),
                  FYTEST_CASE(peer_death_idle_flush), FYTEST_CASE(api_am_beyond_max),
                  FYTEST_CASE(api_put_beyond_max), FYTEST_CASE(api_put_refused),
                  FYTEST_CASE(api_close_modes), FYTEST_CASE(api_worker_flush_req),
                  FYTEST_CASE(api_back_pressure))
