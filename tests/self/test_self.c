/*
 * test_self.c - the self transport at the tl level: interfaces of one process driven through
 * the ops table (fy_tl_find("self")->ops), by one thread or by two.
 *
 *   two_threads_stream   each thread drives one interface and streams to the other, both
 *                        ways at once, every path mixed (inline, multi-cell, bcopy buffer,
 *                        zcopy); first each fills the other's ring until it pushes back.
 *                        Every message is checked for order and content; nothing is lost.
 *   zcopy_sizes          0 B .. 64 MiB zero-copy messages, in place and gathered: intact,
 *                        delivered once, completed once and only after delivery
 *   sender_closes_first  a sender's interface closes while its bcopy buffers and zcopies sit
 *                        in the receiver's ring: buffers still delivered, zcopies not
 *   close_while_sending  an interface closes while another thread sends to it: the sender
 *                        gets FERRY_ERR_NOT_CONNECTED, every zcopy completes once
 *   sleep_and_wake       a worker that armed and sleeps on its event fd is woken by a send
 *                        from another thread, and by the completion of its own zcopy
 *   to_itself            an interface sending to itself, ring full included
 *   state_word_lookalike data that looks like the state word its cell will carry a lap
 *                        later is never taken for a message (white-box: uses self.h)
 *
 * Under ASan (the sanitizer build) the close and cancel cases also check that nobody touches
 * freed memory.
 */
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "fytest.h"
#include "fytest_util.h"
#include "tl/self/self.h"
#include "tl/tl.h"

#define WAIT_MS 20000 /* a poll that should be woken long before this */

/* ---- an interface and its counters ---- */

typedef struct node node_t;
typedef void (*node_rx_t)(node_t *n, uint8_t id, const void *data, size_t len);

struct node {
    const fy_tl_component_t *tl;
    const fy_tl_ops_t *ops;
    fy_tl_md_t *md;
    fy_tl_iface_t *iface;
    fy_tl_iface_attr_t attr;
    uint64_t dev, addr;
    node_rx_t rx;
    void *arg;
    /* stream checking */
    uint64_t rx_next; /* the sequence number expected next */
    uint64_t rx_count;
    const void *last_data; /* where the last message was handed to us */
    size_t last_len;
};

static void node_am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    node_t *n = arg;
    n->last_data = data;
    n->last_len = len;
    n->rx(n, id, data, len);
}

static void node_open(node_t *n, node_rx_t rx, void *arg)
{
    memset(n, 0, sizeof(*n));
    n->tl = fy_tl_find("self");
    FY_ASSERT(n->tl != NULL);
    n->ops = n->tl->ops;
    n->rx = rx;
    n->arg = arg;
    FY_ASSERT_OK(n->ops->md_open(n->tl, &n->md));
    fy_tl_iface_params_t params = {.device = "process", .am_cb = node_am_cb, .am_arg = n};
    FY_ASSERT_OK(n->ops->iface_open(n->md, &params, &n->iface));
    n->ops->iface_query(n->iface, &n->attr);
    FY_ASSERT_EQ(n->attr.device_addr_len, 8);
    FY_ASSERT_EQ(n->attr.iface_addr_len, 8);
    FY_ASSERT(n->attr.caps & FY_TL_CAP_AM_ORDERED);
    FY_ASSERT_OK(n->ops->iface_get_address(n->iface, &n->dev, &n->addr));
}

static fy_tl_ep_t *node_ep(node_t *from, const node_t *to)
{
    fy_tl_ep_t *ep = NULL;
    FY_ASSERT_OK(from->ops->ep_create(from->iface, &to->dev, &to->addr, &ep));
    return ep;
}

static void node_close(node_t *n)
{
    n->ops->iface_close(n->iface);
    n->ops->md_close(n->md);
}

static unsigned node_progress(node_t *n)
{
    return n->ops->iface_progress(n->iface);
}

/* ---- messages: [seq (8) | len (8) | pattern of seq] ---- */

typedef struct msg_hdr {
    uint64_t seq;
    uint64_t len; /* the whole message */
} msg_hdr_t;

static void msg_fill(void *buf, uint64_t seq, size_t len)
{
    msg_hdr_t h = {seq, len};
    memcpy(buf, &h, sizeof(h));
    fy_pattern((char *)buf + sizeof(h), len - sizeof(h), (unsigned)seq);
}

/* A received message: in order, the length it says, the pattern of its number. */
static void msg_check(node_t *n, const void *data, size_t len)
{
    msg_hdr_t h;
    FY_ASSERT_GE(len, sizeof(h));
    memcpy(&h, data, sizeof(h));
    FY_ASSERT_U64_EQ(h.seq, n->rx_next);
    FY_ASSERT_U64_EQ(h.len, len);
    FY_ASSERT_MSG(fy_pattern_ok((const char *)data + sizeof(h), len - sizeof(h), (unsigned)h.seq),
                  "message %llu of %zu bytes arrived damaged", (unsigned long long)h.seq, len);
    n->rx_next++;
    n->rx_count++;
}

static void rx_check(node_t *n, uint8_t id, const void *data, size_t len)
{
    FY_ASSERT_EQ(id, 3);
    msg_check(n, data, len);
}

/* A zcopy in flight: its memory is the sender's until comp, which must come exactly once. */
typedef struct zsend {
    fy_tl_comp_t comp;
    unsigned calls;
    ferry_status_t status;
    unsigned *outstanding; /* decremented by the first call */
    char *buf;
    int free_on_comp;
} zsend_t;

static void zsend_cb(fy_tl_comp_t *c, ferry_status_t st)
{
    zsend_t *z = (zsend_t *)c;
    z->calls++;
    z->status = st;
    FY_ASSERT_MSG(z->calls == 1, "a zcopy completed %u times", z->calls);
    if (z->outstanding != NULL)
        (*z->outstanding)--;
    if (z->free_on_comp) {
        free(z->buf);
        free(z);
    }
}

/* Send message seq of len bytes by the path `how` (0 short/bcopy by size, 1 zcopy): returns
 * the transport's status (NO_RESOURCE: nothing sent). */
static ferry_status_t msg_send(node_t *n, fy_tl_ep_t *ep, uint64_t seq, size_t len, int zcopy,
                               unsigned *outstanding)
{
    if (!zcopy) {
        char stackbuf[512];
        char *buf = len <= sizeof(stackbuf) ? stackbuf : malloc(len);
        FY_ASSERT(buf != NULL);
        msg_fill(buf, seq, len);
        /* three pieces, to exercise the gather */
        size_t a = len / 3, b = len / 3;
        struct iovec v[3] = {{buf, a}, {buf + a, b}, {buf + a + b, len - a - b}};
        ferry_status_t st = len <= n->attr.max_short ? n->ops->am_short(ep, 3, v, 3)
                                                     : n->ops->am_bcopy(ep, 3, v, 3);
        memset(buf, 0xee, len); /* the transport had to copy it */
        if (buf != stackbuf)
            free(buf);
        return st;
    }
    zsend_t *z = calloc(1, sizeof(*z));
    FY_ASSERT(z != NULL);
    z->buf = malloc(len);
    FY_ASSERT(z->buf != NULL);
    msg_fill(z->buf, seq, len);
    z->comp.cb = zsend_cb;
    z->outstanding = outstanding;
    z->free_on_comp = 1;
    size_t h = len < 16 ? len : 16, rest = len - h, third = rest / 3;
    struct iovec v[3] = {{z->buf + h, third},
                         {z->buf + h + third, third},
                         {z->buf + h + 2 * third, rest - 2 * third}};
    ferry_status_t st = n->ops->am_zcopy(ep, 3, z->buf, h, v, 3, &z->comp);
    if (st == FERRY_INPROGRESS) {
        if (outstanding != NULL)
            (*outstanding)++;
        return st;
    }
    FY_ASSERT_EQ(z->calls, 0);
    free(z->buf);
    free(z);
    return st;
}

/* Message sizes for a stream: mostly small, sometimes many cells, a bcopy buffer or a zcopy. */
static size_t stream_size(uint64_t seq, int *zcopy)
{
    uint64_t x = seq * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    unsigned r = (unsigned)(x % 100);
    *zcopy = 0;
    if (r < 70)
        return 16 + (size_t)(x >> 40) % 200;
    if (r < 90)
        return 16 + (size_t)(x >> 40) % 8200; /* up to and past the inline limit */
    if (r < 97)
        return 8192 + (size_t)(x >> 40) % (64 << 10);
    *zcopy = 1;
    return 16 + (size_t)(x >> 40) % (256 << 10);
}

/* ---- two threads, both ways ---- */

#define STREAM_N 20000

typedef struct side {
    node_t node;
    fy_tl_ep_t *ep;
    struct side *peer;
    uint64_t filled; /* messages sent before the first push-back */
    int full;        /* our ring to the peer pushed back (set once) */
    unsigned long nores;
    unsigned zc_out;
} side_t;

static void *stream_thread(void *arg)
{
    side_t *s = arg;
    node_t *n = &s->node;
    uint64_t seq = 0;
    /* 1: fill the peer's ring (it does not progress yet) until it pushes back */
    for (;;) {
        ferry_status_t st = msg_send(n, s->ep, seq, 100, 0, NULL);
        if (st == FERRY_ERR_NO_RESOURCE)
            break;
        FY_ASSERT_OK(st);
        seq++;
    }
    s->filled = seq;
    __atomic_store_n(&s->full, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&s->peer->full, __ATOMIC_ACQUIRE))
        sched_yield();
    /* 2: stream, receiving all the while */
    while (seq < STREAM_N || n->rx_count < STREAM_N || s->zc_out != 0) {
        if (seq < STREAM_N) {
            int zc;
            size_t len = stream_size(seq, &zc);
            ferry_status_t st = msg_send(n, s->ep, seq, len, zc, &s->zc_out);
            if (st == FERRY_ERR_NO_RESOURCE)
                s->nores++;
            else {
                FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
                seq++;
            }
        }
        node_progress(n);
    }
    return NULL;
}

static void two_threads_stream(void)
{
    side_t s[2];
    for (int i = 0; i < 2; i++)
        node_open(&s[i].node, rx_check, NULL);
    for (int i = 0; i < 2; i++) {
        s[i].ep = node_ep(&s[i].node, &s[1 - i].node);
        s[i].peer = &s[1 - i];
        s[i].full = 0;
        s[i].nores = 0;
        s[i].zc_out = 0;
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        FY_ASSERT_EQ(pthread_create(&th[i], NULL, stream_thread, &s[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        /* a ring of 100-byte messages (two cells each) holds a few thousand */
        FY_ASSERT_GT(s[i].filled, 1000);
        FY_ASSERT_U64_EQ(s[i].node.rx_count, STREAM_N);
        FY_ASSERT_U64_EQ(s[i].node.rx_next, STREAM_N);
        FY_ASSERT_EQ(s[i].zc_out, 0);
        printf("  side %d: ring full after %llu messages; %lu push-backs while streaming\n", i,
               (unsigned long long)s[i].filled, s[i].nores);
    }
    for (int i = 0; i < 2; i++)
        s[i].node.ops->ep_destroy(s[i].ep);
    for (int i = 0; i < 2; i++)
        node_close(&s[i].node);
}

/* ---- zero-copy sizes, one thread ---- */

static void rx_count_only(node_t *n, uint8_t id, const void *data, size_t len)
{
    (void)id, (void)data, (void)len;
    n->rx_count++;
}

static void zcopy_sizes(void)
{
    node_t a, b;
    node_open(&a, rx_count_only, NULL);
    node_open(&b, rx_count_only, NULL);
    fy_tl_ep_t *ep = node_ep(&a, &b);
    static const size_t sizes[] = {0, 1, 7, 64, 4095, 65536, (1 << 20) + 3, 8 << 20, 64 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t len = sizes[i];
        char *buf = malloc(len + 64);
        FY_ASSERT(buf != NULL);
        fy_pattern(buf, len + 64, (unsigned)i);
        for (int how = 0; how < 3; how++) {
            /* 0: no header, one piece (handed over in place); 1: header + three pieces
             * (gathered); 2: the header alone */
            if (how == 2 && len > 64)
                continue;
            struct iovec v[3];
            size_t iovcnt, hdr_len = 0;
            if (how == 0) {
                v[0] = (struct iovec){buf, len};
                iovcnt = 1;
            } else if (how == 1) {
                hdr_len = len < 16 ? len : 16;
                size_t rest = len - hdr_len, third = rest / 3;
                v[0] = (struct iovec){buf + hdr_len, third};
                v[1] = (struct iovec){buf + hdr_len + third, third};
                v[2] = (struct iovec){buf + hdr_len + 2 * third, rest - 2 * third};
                iovcnt = 3;
            } else {
                hdr_len = len;
                iovcnt = 0;
            }
            zsend_t z;
            memset(&z, 0, sizeof(z));
            z.comp.cb = zsend_cb;
            b.rx_count = 0;
            FY_ASSERT_STATUS(a.ops->am_zcopy(ep, 3, buf, hdr_len, v, iovcnt, &z.comp),
                             FERRY_INPROGRESS);
            for (int k = 0; k < 10; k++)
                node_progress(&a);
            FY_ASSERT_EQ(z.calls, 0); /* nobody has read it yet */
            while (b.rx_count == 0)
                node_progress(&b);
            FY_ASSERT_EQ(b.rx_count, 1);
            FY_ASSERT_EQ(b.last_len, len);
            /* the data, as the handler saw it, is gone from view after the callback; check
             * the pointer and the sender's buffer, and the content in a receiving copy */
            if (how == 0)
                FY_ASSERT_MSG(b.last_data == buf, "a contiguous zcopy was copied");
            for (int k = 0; k < 10 && z.calls == 0; k++)
                node_progress(&a);
            FY_ASSERT_EQ(z.calls, 1);
            FY_ASSERT_OK(z.status);
            for (int k = 0; k < 10; k++)
                node_progress(&a), node_progress(&b);
            FY_ASSERT_EQ(z.calls, 1);
            FY_ASSERT_EQ(b.rx_count, 1);
        }
        free(buf);
    }
    a.ops->ep_destroy(ep);
    node_close(&a);
    node_close(&b);
}

/* The content of zcopies as the handler sees it, in place and gathered, against the
 * pattern (zcopy_sizes checks pointers and counts; this one every byte). */
static void rx_zcopy_content(node_t *n, uint8_t id, const void *data, size_t len)
{
    (void)id;
    FY_ASSERT_MSG(fy_pattern_ok(data, len, (unsigned)len), "a zcopy of %zu bytes arrived damaged",
                  len);
    n->rx_count++;
}

static void zcopy_content(void)
{
    node_t a, b;
    node_open(&a, rx_count_only, NULL);
    node_open(&b, rx_zcopy_content, NULL);
    fy_tl_ep_t *ep = node_ep(&a, &b);
    static const size_t sizes[] = {0, 1, 7, 64, 4095, 65536, (1 << 20) + 3, 8 << 20, 64 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t len = sizes[i];
        char *buf = malloc(len + 1);
        FY_ASSERT(buf != NULL);
        fy_pattern(buf, len, (unsigned)len);
        for (int how = 0; how < 2; how++) {
            /* 0: one piece, no header (in place); 1: a header and two pieces (gathered) */
            size_t hdr_len = how == 0 ? 0 : (len < 64 ? len : 64);
            size_t rest = len - hdr_len, half = rest / 2;
            struct iovec v[2] = {{buf + hdr_len, half}, {buf + hdr_len + half, rest - half}};
            if (how == 0)
                v[0].iov_len = rest;
            zsend_t z;
            memset(&z, 0, sizeof(z));
            z.comp.cb = zsend_cb;
            b.rx_count = 0;
            FY_ASSERT_STATUS(a.ops->am_zcopy(ep, 3, buf, hdr_len, v, how == 0 ? 1 : 2, &z.comp),
                             FERRY_INPROGRESS);
            while (b.rx_count == 0)
                node_progress(&b);
            while (z.calls == 0)
                node_progress(&a);
            FY_ASSERT_OK(z.status);
        }
        free(buf);
    }
    a.ops->ep_destroy(ep);
    node_close(&a);
    node_close(&b);
}

/* (cancel and flush: tests/conformance, flush and close_force) */

/* ---- the sender's interface closes first ---- */

static void sender_closes_first(void)
{
    node_t a, b;
    node_open(&a, rx_check, NULL);
    node_open(&b, rx_check, NULL);
    fy_tl_ep_t *ep = node_ep(&a, &b);
    /* bcopy buffers (large, from a's pool) with a zcopy among them */
    zsend_t z;
    memset(&z, 0, sizeof(z));
    z.comp.cb = zsend_cb;
    char zbuf[64];
    struct iovec zv = {zbuf, sizeof(zbuf)};
    for (uint64_t seq = 0; seq < 20; seq++) {
        if (seq == 10)
            FY_ASSERT_STATUS(a.ops->am_zcopy(ep, 4, NULL, 0, &zv, 1, &z.comp), FERRY_INPROGRESS);
        FY_ASSERT_OK(msg_send(&a, ep, seq, 100000 + seq, 0, NULL));
    }
    a.ops->ep_destroy(ep);
    FY_ASSERT_EQ(z.calls, 1);
    FY_ASSERT_STATUS(z.status, FERRY_ERR_CANCELED);
    node_close(&a);
    /* b still has the buffers: every message arrives intact, and the zcopy (id 4) not at all */
    while (b.rx_count < 20)
        node_progress(&b);
    for (int k = 0; k < 100; k++)
        node_progress(&b);
    FY_ASSERT_U64_EQ(b.rx_count, 20);
    node_close(&b);
}

/* ---- the receiver closes while another thread sends ---- */

typedef struct closer {
    node_t a, b;
    fy_tl_ep_t *ep;
    unsigned zc_out;
    unsigned long sent_after;    /* sends that still went through after close began */
    int closed;                  /* b is closed */
    ferry_status_t final_status; /* what the last send said */
} closer_t;

static void *close_sender(void *arg)
{
    closer_t *c = arg;
    uint64_t seq = 0;
    for (;;) {
        int zc;
        size_t len = stream_size(seq, &zc);
        int closed = __atomic_load_n(&c->closed, __ATOMIC_ACQUIRE);
        ferry_status_t st = msg_send(&c->a, c->ep, seq, len, zc, &c->zc_out);
        node_progress(&c->a);
        if (st == FERRY_OK || st == FERRY_INPROGRESS) {
            seq++;
            /* a send that began after the close returned must fail */
            FY_ASSERT_MSG(!closed, "a send to a closed interface was accepted");
            continue;
        }
        if (st == FERRY_ERR_NO_RESOURCE)
            continue;
        c->final_status = st;
        break;
    }
    /* every zcopy completes, once, whatever became of it */
    while (c->zc_out != 0)
        node_progress(&c->a);
    /* the interface is gone for new endpoints too */
    fy_tl_ep_t *ep2 = NULL;
    FY_ASSERT_STATUS(c->a.ops->ep_create(c->a.iface, &c->b.dev, &c->b.addr, &ep2),
                     FERRY_ERR_UNREACHABLE);
    return NULL;
}

static void close_while_sending(void)
{
    for (int round = 0; round < 3; round++) {
        closer_t *c = calloc(1, sizeof(*c));
        FY_ASSERT(c != NULL);
        node_open(&c->a, rx_check, NULL);
        node_open(&c->b, rx_check, NULL);
        c->ep = node_ep(&c->a, &c->b);
        pthread_t th;
        FY_ASSERT_EQ(pthread_create(&th, NULL, close_sender, c), 0);
        /* receive a while (more each round), then close in the middle of the stream */
        while (c->b.rx_count < 500u << round)
            node_progress(&c->b);
        node_close(&c->b);
        __atomic_store_n(&c->closed, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        FY_ASSERT_STATUS(c->final_status, FERRY_ERR_NOT_CONNECTED);
        FY_ASSERT_EQ(c->zc_out, 0);
        c->a.ops->ep_destroy(c->ep); /* the last reference to b's port */
        node_close(&c->a);
        free(c);
    }
}

/* ---- sleeping ---- */

typedef struct sleeper {
    node_t a, b;
    fy_tl_ep_t *ep;
    unsigned armed;  /* b armed this many times and is about to poll */
    unsigned woken;  /* polls that returned with the fd readable */
    unsigned target; /* messages to wait for */
} sleeper_t;

/* b's thread: progress; when idle, arm and sleep on the event fd. */
static void *sleeper_thread(void *arg)
{
    sleeper_t *s = arg;
    unsigned armed = 0;
    while (s->b.rx_count < s->target) {
        if (node_progress(&s->b) != 0)
            continue;
        ferry_status_t st = s->b.ops->iface_event_arm(s->b.iface);
        if (st == FERRY_ERR_BUSY)
            continue;
        FY_ASSERT_OK(st);
        __atomic_store_n(&s->armed, ++armed, __ATOMIC_RELEASE);
        struct pollfd pf = {s->b.ops->iface_event_fd(s->b.iface), POLLIN, 0};
        int r = poll(&pf, 1, WAIT_MS);
        FY_ASSERT_MSG(r == 1, "an armed worker was not woken by a send (poll returned %d)", r);
        s->woken++;
    }
    return NULL;
}

static void rx_plain(node_t *n, uint8_t id, const void *data, size_t len)
{
    (void)id, (void)data, (void)len;
    __atomic_add_fetch(&n->rx_count, 1, __ATOMIC_RELEASE);
}

static void sleep_and_wake(void)
{
    sleeper_t s;
    memset(&s, 0, sizeof(s));
    node_open(&s.a, rx_plain, NULL);
    node_open(&s.b, rx_plain, NULL);
    s.ep = node_ep(&s.a, &s.b);
    s.target = 20;
    pthread_t th;
    FY_ASSERT_EQ(pthread_create(&th, NULL, sleeper_thread, &s), 0);
    for (unsigned i = 1; i <= s.target; i++) {
        /* b has armed for the i-th time: it sleeps, or is about to */
        while (__atomic_load_n(&s.armed, __ATOMIC_ACQUIRE) < i)
            sched_yield();
        uint64_t x = i;
        struct iovec v = {&x, sizeof(x)};
        FY_ASSERT_OK(s.a.ops->am_short(s.ep, 1, &v, 1));
        while (__atomic_load_n(&s.b.rx_count, __ATOMIC_ACQUIRE) < i)
            sched_yield();
    }
    pthread_join(th, NULL);
    FY_ASSERT_EQ(s.woken, s.target);

    /* the other way round: a sleeps waiting for its zcopy's completion, which b's thread
     * causes by receiving it */
    zsend_t z;
    memset(&z, 0, sizeof(z));
    z.comp.cb = zsend_cb;
    static char big[1 << 16];
    struct iovec v = {big, sizeof(big)};
    FY_ASSERT_STATUS(s.a.ops->am_zcopy(s.ep, 1, "h", 1, &v, 1, &z.comp), FERRY_INPROGRESS);
    FY_ASSERT_OK(s.a.ops->iface_event_arm(s.a.iface));
    s.target = 21;
    s.armed = 0;
    FY_ASSERT_EQ(pthread_create(&th, NULL, sleeper_thread, &s), 0);
    struct pollfd pf = {s.a.ops->iface_event_fd(s.a.iface), POLLIN, 0};
    FY_ASSERT_MSG(poll(&pf, 1, WAIT_MS) == 1, "a zcopy's completion did not wake its sender");
    while (z.calls == 0)
        node_progress(&s.a);
    FY_ASSERT_OK(z.status);
    pthread_join(th, NULL);
    s.a.ops->ep_destroy(s.ep);
    node_close(&s.a);
    node_close(&s.b);
}

/* ---- to itself ---- */

static void to_itself(void)
{
    node_t a;
    node_open(&a, rx_check, NULL);
    fy_tl_ep_t *ep = node_ep(&a, &a);
    uint64_t seq = 0;
    unsigned long nores = 0;
    unsigned zc_out = 0;
    while (a.rx_count < 5000) {
        if (seq < 5000) {
            int zc;
            size_t len = stream_size(seq, &zc);
            ferry_status_t st = msg_send(&a, ep, seq, len, zc, &zc_out);
            if (st == FERRY_ERR_NO_RESOURCE) {
                nores++;
                node_progress(&a);
            } else {
                FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
                seq++;
            }
        } else {
            node_progress(&a);
        }
    }
    while (zc_out != 0)
        node_progress(&a);
    FY_ASSERT_GT(nores, 0); /* nobody received until the ring was full */
    FY_ASSERT_U64_EQ(a.rx_next, 5000);
    a.ops->ep_destroy(ep);
    node_close(&a);
}

/* ---- data that looks like a state word ---- */

static void rx_seq(node_t *n, uint8_t id, const void *data, size_t len)
{
    (void)id;
    uint64_t seq;
    FY_ASSERT_GE(len, sizeof(seq));
    memcpy(&seq, data, sizeof(seq));
    FY_ASSERT_U64_EQ(seq, n->rx_next);
    n->rx_next++;
    n->rx_count++;
}

/* Message 0 spans three cells; where cells 1 and 2 would have their state words, its data
 * holds exactly what those words will say when tickets RING + 1 and RING + 2 are published
 * there, a lap later.  The ring then goes round with one-cell messages; when the consumer
 * reaches ticket RING + 1 before anyone sent it, it must see nothing. */
static void state_word_lookalike(void)
{
    node_t a, b;
    node_open(&a, rx_count_only, NULL);
    node_open(&b, rx_seq, NULL);
    fy_tl_ep_t *ep = node_ep(&a, &b);
    uint8_t m0[150];
    memset(m0, 0, sizeof(m0));
    FY_ASSERT_EQ(self_cells_for(sizeof(m0)), 3);
    for (unsigned j = 1; j < 3; j++) {
        size_t off = (size_t)j * SELF_CELL_SIZE - SELF_CELL_HDR; /* cell j's first word */
        uint64_t fake = SELF_STATE(SELF_RING_CELLS + j, SELF_CELL_SHORT);
        uint32_t fake_len = 8;
        memcpy(m0 + off, &fake, 8);
        memcpy(m0 + off + 8, &fake_len, 4);
    }
    struct iovec v = {m0, sizeof(m0)};
    FY_ASSERT_OK(a.ops->am_short(ep, 3, &v, 1)); /* tickets 0..2; its seq (first word) is 0 */
    uint64_t seq = 1;
    for (uint64_t t = 3; t <= SELF_RING_CELLS; t++, seq++) { /* one cell each */
        v = (struct iovec){&seq, sizeof(seq)};
        ferry_status_t st;
        while ((st = a.ops->am_short(ep, 3, &v, 1)) == FERRY_ERR_NO_RESOURCE)
            node_progress(&b);
        FY_ASSERT_OK(st);
    }
    while (b.rx_next < seq)
        node_progress(&b);
    /* head is at ticket RING + 1 now: nothing was sent there */
    for (int k = 0; k < 100; k++)
        node_progress(&b);
    FY_ASSERT_U64_EQ(b.rx_count, seq);
    v = (struct iovec){&seq, sizeof(seq)};
    FY_ASSERT_OK(a.ops->am_short(ep, 3, &v, 1));
    while (b.rx_count == seq)
        node_progress(&b);
    FY_ASSERT_U64_EQ(b.rx_count, seq + 1);
    a.ops->ep_destroy(ep);
    node_close(&a);
    node_close(&b);
}

FYTEST_MAIN(FYTEST_CASE(two_threads_stream), FYTEST_CASE(zcopy_sizes), FYTEST_CASE(zcopy_content),
            FYTEST_CASE(sender_closes_first), FYTEST_CASE(close_while_sending),
            FYTEST_CASE(sleep_and_wake), FYTEST_CASE(to_itself), FYTEST_CASE(state_word_lookalike))
