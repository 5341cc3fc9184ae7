/*
 * test_tcp_conn.c - connections of the tcp transport: two sides connecting at once end with
 * one connection; a peer reset or killed mid-message fails that ep only (err_cb once, its
 * operations complete with an error, other peers carry on); strangers (wrong job key,
 * garbage, silence, malformed frames after a valid handshake) are dropped and counted while
 * a legitimate peer keeps working; a peer closing its iface is no error until we need it;
 * an idle iface sleeps on its event fd and wakes for a message; an ep to ourselves works.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fytest.h"
#include "tcp_testlib.h"
#include "tl/tcp/tcp.h"

#define AM_ID 9
enum { CMD_QUIT = 1, CMD_FREEZE, CMD_SEND, CMD_BIG };
#define BIG ((size_t)32 << 20) /* the large messages and regions (fytest_map) */

typedef struct echo {
    fy_tl_ep_t *ep;
    uint64_t got, last;
} echo_t;

static void echo_rx(tt_node_t *n, uint8_t id, const void *data, size_t len)
{
    echo_t *e = n->user;
    e->got++;
    if (len >= 8)
        memcpy(&e->last, data, 8);
    if (e->ep != NULL && len <= 1024) {
        struct iovec v = {(void *)data, len};
        FY_ASSERT_OK(n->ops->am_short(e->ep, AM_ID, &v, 1));
    }
}

/* A peer that echoes every AM back, and obeys commands from the pipe. */
static void echo_child(int rfd, int wfd, void *arg)
{
    uint64_t key = arg != NULL ? *(uint64_t *)arg : TT_JOB_KEY;
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, key, echo_rx, &e);
    tt_addr_t a, pa;
    tt_get_addr(&n, &a);
    tt_write(wfd, &a, sizeof(a));
    tt_read(rfd, &pa, sizeof(pa));
    e.ep = tt_ep(&n, &pa);
    char *big = fytest_map(BIG);
    for (;;) {
        if (!tt_wait(&n, rfd, 1000))
            continue;
        uint32_t cmd;
        tt_read(rfd, &cmd, sizeof(cmd));
        if (cmd == CMD_QUIT)
            break;
        if (cmd == CMD_FREEZE) {
            tt_read(rfd, &cmd, sizeof(cmd)); /* no progress until then */
        } else if (cmd == CMD_SEND) {
            uint64_t token = 0x5151;
            struct iovec v = {&token, sizeof(token)};
            FY_ASSERT_OK(n.ops->am_short(e.ep, AM_ID, &v, 1));
        } else if (cmd == CMD_BIG) {
            tt_comp_t c;
            tt_comp_init(&c);
            struct iovec v = {big, BIG};
            ferry_status_t st = n.ops->am_zcopy(e.ep, AM_ID, NULL, 0, &v, 1, &c.super);
            FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
            tt_write(wfd, &cmd, sizeof(cmd));
            tt_read(rfd, &cmd, sizeof(cmd)); /* frozen mid-message until killed */
        }
    }
    n.ops->ep_destroy(e.ep);
    tt_close(&n);
    fytest_unmap(big, BIG);
}

static void cmd(tt_proc_t *p, uint32_t c)
{
    tt_write(p->wfd, &c, sizeof(c));
}

/* Start an echo peer and connect both ways. */
static fy_tl_ep_t *start_echo(tt_node_t *n, tt_proc_t *p, uint64_t *key, tt_addr_t *pa)
{
    tt_addr_t a, me;
    tt_fork(p, echo_child, key);
    tt_read(p->rfd, &a, sizeof(a));
    tt_get_addr(n, &me);
    tt_write(p->wfd, &me, sizeof(me));
    if (pa != NULL)
        *pa = a;
    return tt_ep(n, &a);
}

static void round_trip(tt_node_t *n, fy_tl_ep_t *ep)
{
    echo_t *e = n->user;
    static uint64_t token = 1000;
    uint64_t t = ++token, before = e->got;
    struct iovec v = {&t, sizeof(t)};
    ferry_status_t st;
    TT_RETRY(n, st, n->ops->am_short(ep, AM_ID, &v, 1));
    FY_ASSERT_OK(st);
    while (e->got == before || e->last != t)
        tt_wait(n, -1, 1000);
}

static unsigned count_peers(tt_node_t *n)
{
    fy_tcp_iface_t *iface = (fy_tcp_iface_t *)n->iface;
    return (unsigned)fy_list_length(&iface->peers);
}

/* ---- simultaneous connect --------------------------------------------------------------- */

static void simul_side(int rfd, int wfd, uint64_t token)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    tt_addr_t me, other;
    tt_get_addr(&n, &me);
    tt_write(wfd, &me, sizeof(me));
    tt_read(rfd, &other, sizeof(other));
    fy_tl_ep_t *ep = tt_ep(&n, &other); /* both sides at once */
    struct iovec v = {&token, sizeof(token)};
    FY_ASSERT_OK(n.ops->am_short(ep, AM_ID + 1, &v, 1));
    while (e.got == 0)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_EQ(n.nerr, 0);
    fy_tcp_peer_t *p = ((fy_tcp_ep_t *)ep)->peer;
    /* the acceptor may send once it said ACCEPT: we can hold a message before we have read
     * every link's ACCEPT */
    while (p->state == FY_TCP_PEER_CONNECTING)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_EQ(p->state, FY_TCP_PEER_UP);
    FY_ASSERT_EQ(p->nup, p->nlinks);
    FY_ASSERT_EQ(count_peers(&n), 1); /* one connection, shared by our ep and theirs */
    uint64_t conn = p->conn_id, theirs;
    tt_write(wfd, &conn, sizeof(conn));
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, &theirs, sizeof(theirs));
    FY_ASSERT_U64_EQ(conn, theirs); /* ... and the same one on both sides */
    tt_write(wfd, &conn, sizeof(conn));
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, &theirs, sizeof(theirs));
    n.ops->ep_destroy(ep);
    tt_close(&n);
}

static void simul_child(int rfd, int wfd, void *arg)
{
    simul_side(rfd, wfd, 2);
}

static void simultaneous_connect(void)
{
    setenv("FERRY_TCP_LINKS", "2", 1);
    for (int i = 0; i < 25; i++) {
        tt_proc_t p;
        tt_fork(&p, simul_child, NULL);
        simul_side(p.rfd, p.wfd, 1);
        tt_join(&p);
    }
}

/* ---- failures --------------------------------------------------------------------------- */

static void reset_isolated(void)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    tt_proc_t a, b;
    fy_tl_ep_t *ea = start_echo(&n, &a, NULL, NULL), *eb = start_echo(&n, &b, NULL, NULL);
    round_trip(&n, ea);
    round_trip(&n, eb);
    cmd(&a, CMD_FREEZE);
    char *big = fytest_map(BIG);
    tt_comp_t c;
    tt_comp_init(&c);
    struct iovec v = {big, BIG};
    FY_ASSERT_STATUS(n.ops->am_zcopy(ea, AM_ID, NULL, 0, &v, 1, &c.super), FERRY_INPROGRESS);
    for (int i = 0; i < 100; i++)
        tt_progress(&n);
    FY_ASSERT(!c.done); /* a frozen receiver cannot have taken 32 MiB */
    kill(a.pid, SIGKILL);
    waitpid(a.pid, NULL, 0);
    while (!c.done || n.nerr == 0)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_STATUS(c.status, FERRY_ERR_CONNECTION_RESET);
    FY_ASSERT_EQ(n.nerr, 1);
    FY_ASSERT(n.err_ep[0] == ea);
    FY_ASSERT_STATUS(n.err_st[0], FERRY_ERR_CONNECTION_RESET);
    uint64_t t = 1;
    struct iovec s = {&t, sizeof(t)};
    FY_ASSERT_STATUS(n.ops->am_short(ea, AM_ID, &s, 1), FERRY_ERR_NOT_CONNECTED);
    round_trip(&n, eb); /* the other peer did not notice */
    round_trip(&n, eb);
    FY_ASSERT_EQ(n.nerr, 1);
    cmd(&b, CMD_QUIT);
    tt_join(&b);
    n.ops->ep_destroy(ea);
    n.ops->ep_destroy(eb);
    tt_close(&n);
    fytest_unmap(big, BIG);
}

static void killed_mid_message(void)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    tt_proc_t a, b;
    tt_addr_t aa;
    fy_tl_ep_t *ea = start_echo(&n, &a, NULL, &aa), *eb = start_echo(&n, &b, NULL, NULL);
    round_trip(&n, ea);
    round_trip(&n, eb);
    uint64_t got = e.got;
    cmd(&a, CMD_BIG);
    uint32_t ack;
    tt_read(a.rfd, &ack, sizeof(ack)); /* a is now frozen with most of 32 MiB unsent */
    fy_tcp_iface_addr_t ia;
    memcpy(&ia, aa.iface, sizeof(ia));
    fy_tcp_peer_t *p = fy_tcp_peer_get((fy_tcp_iface_t *)n.iface, le64toh(ia.iface_id), 0);
    FY_ASSERT(p != NULL);
    for (;;) { /* read until we are inside the message */
        int inside = p->rx_active;
        for (unsigned i = 0; i < p->nlinks; i++)
            inside |= p->links[i] != NULL && p->links[i]->rx_dest != NULL;
        if (inside)
            break;
        tt_wait(&n, -1, 1000);
    }
    kill(a.pid, SIGKILL);
    waitpid(a.pid, NULL, 0);
    while (n.nerr == 0)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_EQ(n.nerr, 1);
    FY_ASSERT(n.err_ep[0] == ea);
    FY_ASSERT_STATUS(n.err_st[0], FERRY_ERR_CONNECTION_RESET);
    FY_ASSERT_U64_EQ(e.got, got); /* no part of the message was delivered */
    round_trip(&n, eb);
    FY_ASSERT_EQ(n.nerr, 1);
    cmd(&b, CMD_QUIT);
    tt_join(&b);
    n.ops->ep_destroy(ea);
    n.ops->ep_destroy(eb);
    tt_close(&n);
}

/* A target that answers a 32 MiB get and freezes once its answer is queued behind a full
 * socket: the requester is then inside the answer when the target dies. */
static void frozen_target(int rfd, int wfd, void *arg)
{
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    char *mem = fytest_map(BIG);
    void *memh = calloc(1, n.tl->memh_size);
    FY_ASSERT_OK(n.ops->mem_reg(n.md, mem, BIG, FERRY_MEM_REMOTE_READ, memh));
    uint8_t packed[64];
    FY_ASSERT_OK(n.ops->rkey_pack(n.md, memh, packed));
    tt_addr_t a;
    tt_get_addr(&n, &a);
    uint64_t base = (uint64_t)(uintptr_t)mem;
    tt_write(wfd, &a, sizeof(a));
    tt_write(wfd, &base, sizeof(base));
    tt_write(wfd, packed, sizeof(packed));
    fy_tcp_iface_t *iface = (fy_tcp_iface_t *)n.iface;
    for (;;) {
        tt_wait(&n, -1, 1000);
        fy_list_t *e;
        int queued = 0;
        for (e = iface->peers.next; e != &iface->peers; e = e->next)
            queued |= fy_container_of(e, fy_tcp_peer_t, elem)->q_ops != 0;
        if (queued)
            break;
    }
    uint32_t c = 1;
    tt_write(wfd, &c, sizeof(c));
    tt_read(rfd, &c, sizeof(c)); /* frozen until killed */
}

static void killed_mid_get(void)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    tt_proc_t t, b;
    tt_fork(&t, frozen_target, NULL);
    tt_addr_t ta;
    uint64_t base;
    uint8_t packed[64];
    tt_read(t.rfd, &ta, sizeof(ta));
    tt_read(t.rfd, &base, sizeof(base));
    tt_read(t.rfd, packed, sizeof(packed));
    fy_tl_ep_t *et = tt_ep(&n, &ta), *eb = start_echo(&n, &b, NULL, NULL);
    round_trip(&n, eb);
    void *rkey = calloc(1, n.tl->rkey_size);
    FY_ASSERT_OK(n.ops->rkey_unpack(n.md, packed, rkey));
    char *dst = fytest_map(BIG);
    tt_comp_t c;
    tt_comp_init(&c);
    struct iovec v = {dst, BIG};
    FY_ASSERT_STATUS(n.ops->get_zcopy(et, &v, 1, base, rkey, &c.super), FERRY_INPROGRESS);
    uint32_t word;
    while (!tt_wait(&n, t.rfd, 1000)) { /* serve the connection until the answer backs up */
    }
    tt_read(t.rfd, &word, sizeof(word));
    fy_tcp_peer_t *p = ((fy_tcp_ep_t *)et)->peer;
    for (;;) {
        int inside = p->rx_active;
        for (unsigned i = 0; i < p->nlinks; i++)
            inside |= p->links[i] != NULL && p->links[i]->rx_dest != NULL;
        if (inside)
            break;
        tt_wait(&n, -1, 1000);
    }
    kill(t.pid, SIGKILL);
    waitpid(t.pid, NULL, 0);
    while (!c.done)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_STATUS(c.status, FERRY_ERR_CONNECTION_RESET);
    while (n.nerr == 0)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_EQ(n.nerr, 1);
    FY_ASSERT(n.err_ep[0] == et);
    round_trip(&n, eb);
    FY_ASSERT_EQ(n.nerr, 1);
    cmd(&b, CMD_QUIT);
    tt_join(&b);
    n.ops->ep_destroy(et);
    n.ops->ep_destroy(eb);
    tt_close(&n);
    free(rkey);
    fytest_unmap(dst, BIG);
}

/* ---- strangers -------------------------------------------------------------------------- */

static void stranger_child(int rfd, int wfd, void *arg)
{
    tt_node_t n;
    tt_open(&n, 0xbadbadbadull, NULL, NULL);
    tt_addr_t a;
    tt_read(rfd, &a, sizeof(a));
    fy_tl_ep_t *ep = tt_ep(&n, &a);
    uint64_t t = 7;
    struct iovec v = {&t, sizeof(t)};
    FY_ASSERT_OK(n.ops->am_short(ep, AM_ID, &v, 1)); /* queued until connected: never */
    while (n.nerr == 0)
        tt_wait(&n, -1, 1000);
    FY_ASSERT(n.err_ep[0] == ep);
    int32_t st = n.err_st[0];
    tt_write(wfd, &st, sizeof(st));
    n.ops->ep_destroy(ep);
    tt_close(&n);
}

static void stranger_wrong_key(void)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    fy_tcp_iface_t *iface = (fy_tcp_iface_t *)n.iface;
    tt_proc_t b, s;
    fy_tl_ep_t *eb = start_echo(&n, &b, NULL, NULL);
    round_trip(&n, eb);
    uint64_t got = e.got;
    tt_addr_t me;
    tt_get_addr(&n, &me);
    tt_fork(&s, stranger_child, NULL);
    tt_write(s.wfd, &me, sizeof(me));
    int32_t st;
    while (!tt_wait(&n, s.rfd, 1000)) {
    }
    tt_read(s.rfd, &st, sizeof(st));
    FY_ASSERT_STATUS((ferry_status_t)st, FERRY_ERR_UNREACHABLE);
    tt_join(&s);
    FY_ASSERT_GE(iface->drops_bad_key, 1);
    FY_ASSERT_U64_EQ(e.got, got); /* the stranger's message never arrived */
    round_trip(&n, eb);
    FY_ASSERT_EQ(n.nerr, 0);
    cmd(&b, CMD_QUIT);
    tt_join(&b);
    n.ops->ep_destroy(eb);
    tt_close(&n);
}

/* A raw TCP client to the iface (no ferry code on this side). */
static int raw_connect(const tt_addr_t *a)
{
    fy_tcp_dev_addr_t da;
    fy_tcp_iface_addr_t ia;
    memcpy(&da, a->dev, sizeof(da));
    memcpy(&ia, a->iface, sizeof(ia));
    da.addr.port_be = ia.port_be;
    struct sockaddr_storage ss;
    socklen_t sl = fy_netif_addr_to_sockaddr(&da.addr, &ss);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FY_ASSERT(fd >= 0);
    FY_ASSERT_MSG(connect(fd, (struct sockaddr *)&ss, sl) == 0, "connect: %s", strerror(errno));
    return fd;
}

/* A raw client that completes a valid handshake. */
static int raw_hello(tt_node_t *n, const tt_addr_t *a)
{
    fy_tcp_iface_addr_t ia;
    memcpy(&ia, a->iface, sizeof(ia));
    int fd = raw_connect(a);
    fy_tcp_hello_t h;
    memset(&h, 0, sizeof(h));
    h.magic = htole32(FY_TCP_MAGIC);
    h.version = htole16(FY_TCP_VERSION);
    h.kind = FY_TCP_HELLO;
    h.link = 0;
    h.nlinks = 1;
    h.job_key = htole64(TT_JOB_KEY);
    h.src_iface = htole64(0x1234567 + (uint64_t)fd);
    h.dst_iface = ia.iface_id;
    h.conn_id = htole64(99);
    h.src_addr.family = 4;
    FY_ASSERT_EQ(write(fd, &h, sizeof(h)), sizeof(h));
    fy_tcp_hello_t r;
    size_t got = 0;
    while (got < sizeof(r)) {
        tt_wait(n, fd, 1000);
        if (tt_readable(fd)) {
            ssize_t k = read(fd, (char *)&r + got, sizeof(r) - got);
            FY_ASSERT(k > 0);
            got += (size_t)k;
        }
    }
    FY_ASSERT_EQ(r.kind, FY_TCP_ACCEPT);
    return fd;
}

/* Progress until the raw client is disconnected. */
static void expect_dropped(tt_node_t *n, int fd)
{
    char c[256];
    for (;;) {
        tt_wait(n, fd, 1000);
        if (!tt_readable(fd))
            continue;
        ssize_t k = read(fd, c, sizeof(c));
        if (k == 0 || (k < 0 && errno == ECONNRESET))
            break;
    }
    close(fd);
}

static void garbage_and_silence(void)
{
    setenv("FERRY_TCP_CONN_TIMEOUT", "300ms", 1);
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    fy_tcp_iface_t *iface = (fy_tcp_iface_t *)n.iface;
    tt_proc_t b;
    fy_tl_ep_t *eb = start_echo(&n, &b, NULL, NULL);
    round_trip(&n, eb);
    tt_addr_t me;
    tt_get_addr(&n, &me);

    int fd = raw_connect(&me); /* not ferry at all */
    char junk[80];
    memset(junk, 'x', sizeof(junk));
    memcpy(junk, "GET / HTTP/1.1\r\n", 16);
    FY_ASSERT_EQ(write(fd, junk, sizeof(junk)), sizeof(junk));
    expect_dropped(&n, fd);
    FY_ASSERT_EQ(iface->drops_malformed, 1);

    fd = raw_connect(&me); /* silent */
    expect_dropped(&n, fd);
    FY_ASSERT_EQ(iface->drops_timeout, 1);

    struct {
        fy_tcp_hdr_t h;
        char pad[64];
    } f;
    memset(&f, 0, sizeof(f));
    fd = raw_hello(&n, &me); /* valid handshake, then an unknown frame type */
    f.h.type = 99;
    FY_ASSERT_EQ(write(fd, &f, sizeof(f)), sizeof(f));
    expect_dropped(&n, fd);
    FY_ASSERT_EQ(iface->protocol_errors, 1);

    fd = raw_hello(&n, &me); /* an AM of 4 GiB */
    f.h.type = FY_TCP_AM;
    f.h.length = 0xffffffffu;
    FY_ASSERT_EQ(write(fd, &f, sizeof(f)), sizeof(f));
    expect_dropped(&n, fd);
    FY_ASSERT_EQ(iface->protocol_errors, 2);

    fd = raw_hello(&n, &me); /* an answer to a request never made */
    memset(&f, 0, sizeof(f));
    f.h.type = FY_TCP_ACK;
    FY_ASSERT_EQ(write(fd, &f, sizeof(f)), sizeof(f));
    expect_dropped(&n, fd);
    FY_ASSERT_EQ(iface->protocol_errors, 3);

    fd = raw_hello(&n, &me); /* an AM id out of range, cut in two writes */
    f.h.type = FY_TCP_AM;
    f.h.am_id = FY_TL_AM_ID_MAX + 1;
    f.h.length = 4;
    FY_ASSERT_EQ(write(fd, &f, 3), 3);
    tt_wait(&n, -1, 10);
    FY_ASSERT_EQ(write(fd, (char *)&f + 3, 9), 9);
    expect_dropped(&n, fd);
    FY_ASSERT_EQ(iface->protocol_errors, 4);

    round_trip(&n, eb); /* the legitimate peer did not notice any of it */
    FY_ASSERT_EQ(n.nerr, 0);
    FY_ASSERT_EQ(count_peers(&n), 1);
    cmd(&b, CMD_QUIT);
    tt_join(&b);
    n.ops->ep_destroy(eb);
    tt_close(&n);
}

/* ---- lifetime and sleeping -------------------------------------------------------------- */

static void graceful_close(void)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    tt_proc_t b;
    fy_tl_ep_t *eb = start_echo(&n, &b, NULL, NULL);
    round_trip(&n, eb);
    cmd(&b, CMD_QUIT);
    tt_join(&b);
    fy_tcp_peer_t *p = ((fy_tcp_ep_t *)eb)->peer;
    while (p->state != FY_TCP_PEER_IDLE) {
        FY_ASSERT(p->state == FY_TCP_PEER_UP || p->state == FY_TCP_PEER_CONNECTING);
        tt_wait(&n, -1, 1000);
    }
    FY_ASSERT_EQ(n.nerr, 0); /* a peer closing cleanly is no error */
    uint64_t t = 5;
    struct iovec v = {&t, sizeof(t)};
    ferry_status_t st = n.ops->am_short(eb, AM_ID, &v, 1); /* reconnects: nobody listens */
    FY_ASSERT_MSG(st == FERRY_OK || st == FERRY_ERR_UNREACHABLE, "am_short: %s",
                  ferry_status_string(st));
    while (n.nerr == 0)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_STATUS(n.err_st[0], FERRY_ERR_UNREACHABLE);
    FY_ASSERT_STATUS(n.ops->am_short(eb, AM_ID, &v, 1), FERRY_ERR_NOT_CONNECTED);
    n.ops->ep_destroy(eb);
    tt_close(&n);
}

static void sleeps_on_event_fd(void)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    tt_proc_t b;
    fy_tl_ep_t *eb = start_echo(&n, &b, NULL, NULL);
    round_trip(&n, eb);
    int fd = n.ops->iface_event_fd(n.iface);
    FY_ASSERT(fd >= 0);
    while (n.ops->iface_event_arm(n.iface) != FERRY_OK)
        tt_progress(&n);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    FY_ASSERT_EQ(poll(&pf, 1, 100), 0); /* quiet: nothing wakes us */
    uint64_t got = e.got;
    cmd(&b, CMD_SEND);
    FY_ASSERT_EQ(poll(&pf, 1, -1), 1); /* the peer's message does */
    while (e.got == got)
        tt_progress(&n);
    FY_ASSERT_U64_EQ(e.last, 0x5151);
    FILE *f = tmpfile();
    n.ops->iface_print(n.iface, f);
    FY_ASSERT(ftell(f) > 0);
    fclose(f);
    cmd(&b, CMD_QUIT);
    tt_join(&b);
    n.ops->ep_destroy(eb);
    tt_close(&n);
}

static void self_connect(void)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    tt_addr_t me;
    tt_get_addr(&n, &me);
    fy_tl_ep_t *ep = tt_ep(&n, &me);
    uint64_t t = 77;
    struct iovec v = {&t, sizeof(t)};
    FY_ASSERT_OK(n.ops->am_short(ep, AM_ID, &v, 1));
    while (e.got == 0)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_U64_EQ(e.last, 77);
    static char mem[10000], out[10000];
    void *memh = calloc(1, n.tl->memh_size), *rkey = calloc(1, n.tl->rkey_size);
    uint8_t packed[64];
    FY_ASSERT_OK(n.ops->mem_reg(n.md, mem, sizeof(mem), FERRY_MEM_REMOTE_WRITE, memh));
    FY_ASSERT_OK(n.ops->rkey_pack(n.md, memh, packed));
    FY_ASSERT_OK(n.ops->rkey_unpack(n.md, packed, rkey));
    tt_fill(out, sizeof(out), 3);
    tt_comp_t c;
    tt_comp_init(&c);
    struct iovec pv = {out, sizeof(out)};
    FY_ASSERT_STATUS(n.ops->put_zcopy(ep, &pv, 1, (uint64_t)(uintptr_t)mem, rkey, &c.super),
                     FERRY_INPROGRESS);
    tt_comp_wait(&n, &c);
    FY_ASSERT_OK(c.status);
    FY_ASSERT_MEM_EQ(mem, out, sizeof(out));
    FY_ASSERT_EQ(n.nerr, 0);
    n.ops->mem_dereg(n.md, memh);
    n.ops->ep_destroy(ep);
    tt_close(&n);
    free(memh);
    free(rkey);
}

/* The interface and family chosen by configuration: a round trip and a striped message. */
static void round_trip_on(const char *family)
{
    echo_t e = {NULL, 0, 0};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, echo_rx, &e);
    fy_tcp_iface_t *iface = (fy_tcp_iface_t *)n.iface;
    FY_ASSERT_EQ(iface->addr.family, family[0] == '6' ? 6 : 4);
    tt_proc_t b;
    fy_tl_ep_t *eb = start_echo(&n, &b, NULL, NULL);
    round_trip(&n, eb);
    static char big[1 << 20];
    tt_comp_t c;
    tt_comp_init(&c);
    struct iovec v = {big, sizeof(big)};
    ferry_status_t st = n.ops->am_zcopy(eb, AM_ID, NULL, 0, &v, 1, &c.super);
    FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
    if (st == FERRY_INPROGRESS)
        tt_comp_wait(&n, &c);
    round_trip(&n, eb); /* after the large one, in order */
    FY_ASSERT_EQ(n.nerr, 0);
    cmd(&b, CMD_QUIT);
    tt_join(&b);
    n.ops->ep_destroy(eb);
    tt_close(&n);
}

static void ipv6(void)
{
    fy_netif_t *all;
    unsigned cnt, v6 = 0;
    FY_ASSERT_OK(fy_netif_list(FY_NETIF_LIST_NO_IPV4, &all, &cnt));
    for (unsigned i = 0; i < cnt; i++)
        v6 += !all[i].is_loopback;
    fy_netif_list_free(all);
    if (v6 == 0) {
        printf("(no IPv6 address but loopback here: over ::1)\n");
        setenv("FERRY_TCP_IF_INCLUDE", "::1", 1);
    }
    setenv("FERRY_TCP_AF", "ipv6", 1);
    round_trip_on("6");
}

static void loopback_included(void)
{
    setenv("FERRY_TCP_IF_INCLUDE", "lo", 1);
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    FY_ASSERT_STR_EQ(n.dev.name, "lo");
    FY_ASSERT(n.dev.is_loopback);
    tt_close(&n);
    round_trip_on("4");
}

/* ---- the acceptor speaks first ---------------------------------------------------------- */

/* Frames may follow the acceptor's ACCEPT at once (tcp.h), so the connector can read striped
 * frames on its first links before the last link's ACCEPT makes its connection up.  A fake
 * acceptor (raw sockets, three links) orders the bytes so: frame 0's header and piece on link
 * 0 and its chunk on link 1 are consumed, then link 2's ACCEPT (the connection is up), then
 * frame 1's chunk on link 1 before frame 0's last chunk (link 2) and frame 1's header (link
 * 0).  Both frames must arrive whole, in order, without a protocol error. */
#define FAKE_IFACE 0x0fa4e1dull
#define PIECE      4096

typedef struct two_ams {
    unsigned got;
    uint64_t sum[2];
    size_t len[2];
} two_ams_t;

static void two_rx(tt_node_t *n, uint8_t id, const void *data, size_t len)
{
    two_ams_t *t = n->user;
    FY_ASSERT_EQ(id, AM_ID);
    if (t->got < 2) {
        t->sum[t->got] = tt_sum(data, len);
        t->len[t->got] = len;
    }
    t->got++;
}

static void write_all(int fd, const void *buf, size_t len)
{
    FY_ASSERT_EQ(write(fd, buf, len), (ssize_t)len);
}

/* A striped AM's header (seq, total, len0) and its first piece, on link 0. */
static void send_stripe_head(int fd, uint32_t seq, const char *data, size_t total)
{
    struct {
        fy_tcp_hdr_t h;
        fy_tcp_stripe_ext_t se;
    } f;
    memset(&f, 0, sizeof(f));
    f.h.type = FY_TCP_AM;
    f.h.am_id = AM_ID;
    f.h.flags = FY_TCP_F_STRIPED;
    f.h.length = htole32((uint32_t)total);
    f.se.seq = htole32(seq);
    f.se.len0 = htole32(PIECE);
    write_all(fd, &f, sizeof(f));
    write_all(fd, data, PIECE);
}

static void send_chunk(int fd, uint32_t seq, const char *data, size_t off)
{
    struct {
        fy_tcp_hdr_t h;
        fy_tcp_chunk_ext_t c;
    } f;
    memset(&f, 0, sizeof(f));
    f.h.type = FY_TCP_CHUNK;
    f.h.length = htole32(PIECE);
    f.c.seq = htole32(seq);
    f.c.offset = htole64(off);
    write_all(fd, &f, sizeof(f));
    write_all(fd, data + off, PIECE);
}

static fy_tcp_peer_t *find_peer(tt_node_t *n, uint64_t id)
{
    fy_tcp_iface_t *iface = (fy_tcp_iface_t *)n->iface;
    for (fy_list_t *e = iface->peers.next; e != &iface->peers; e = e->next) {
        fy_tcp_peer_t *p = fy_container_of(e, fy_tcp_peer_t, elem);
        if (p->remote_id == id)
            return p;
    }
    return NULL;
}

/* Progress until cond holds (each pass a short sleep on the event fd, never a fixed wait). */
#define PROGRESS_UNTIL(n, cond)                                                                    \
    do {                                                                                           \
        for (int i_ = 0; !(cond); i_++) {                                                          \
            FY_ASSERT_MSG(i_ < 5000, "timed out waiting for " #cond);                              \
            tt_wait((n), -1, 1);                                                                   \
        }                                                                                          \
    } while (0)

static void acceptor_first(void)
{
    setenv("FERRY_TCP_LINKS", "3", 1);
    two_ams_t t = {0, {0, 0}, {0, 0}};
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, two_rx, &t);
    fy_tcp_iface_t *iface = (fy_tcp_iface_t *)n.iface;

    /* the fake acceptor listens on the node's own address */
    tt_addr_t fake;
    tt_get_addr(&n, &fake);
    fy_tcp_dev_addr_t da;
    fy_tcp_iface_addr_t ia;
    memcpy(&da, fake.dev, sizeof(da));
    memcpy(&ia, fake.iface, sizeof(ia));
    struct sockaddr_storage ss;
    fy_netif_addr_t la = da.addr;
    la.port_be = 0;
    socklen_t sl = fy_netif_addr_to_sockaddr(&la, &ss);
    int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FY_ASSERT(lfd >= 0);
    FY_ASSERT_MSG(bind(lfd, (struct sockaddr *)&ss, sl) == 0, "bind: %s", strerror(errno));
    FY_ASSERT(listen(lfd, 8) == 0);
    sl = sizeof(ss);
    FY_ASSERT(getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0);
    fy_netif_addr_t bound;
    fy_netif_addr_from_sockaddr((struct sockaddr *)&ss, &bound);
    ia.port_be = bound.port_be;
    ia.iface_id = htole64(FAKE_IFACE);
    memcpy(fake.iface, &ia, sizeof(ia));

    fy_tl_ep_t *ep = tt_ep(&n, &fake);
    /* the three links: accepted by the kernel, their HELLOs written from progress */
    int fds[3] = {-1, -1, -1};
    fy_tcp_hello_t hello;
    for (unsigned k = 0; k < 3; k++) {
        int fd = accept(lfd, NULL, NULL);
        FY_ASSERT(fd >= 0);
        size_t got = 0;
        while (got < sizeof(hello)) {
            tt_wait(&n, fd, 100);
            if (!tt_readable(fd))
                continue;
            ssize_t r = read(fd, (char *)&hello + got, sizeof(hello) - got);
            FY_ASSERT(r > 0);
            got += (size_t)r;
        }
        FY_ASSERT_EQ(hello.kind, FY_TCP_HELLO);
        FY_ASSERT_EQ(hello.nlinks, 3);
        FY_ASSERT(hello.link < 3 && fds[hello.link] < 0);
        fds[hello.link] = fd;
    }
    fy_tcp_hello_t acc = hello;
    acc.kind = FY_TCP_ACCEPT;
    acc.src_iface = htole64(FAKE_IFACE);
    acc.dst_iface = hello.src_iface;

    static char m0[3 * PIECE], m1[3 * PIECE];
    tt_fill(m0, sizeof(m0), 10);
    tt_fill(m1, sizeof(m1), 11);
    fy_tcp_peer_t *p = find_peer(&n, FAKE_IFACE);
    FY_ASSERT(p != NULL);

    /* links 0 and 1 up; frame 0's header, first piece and second piece consumed */
    acc.link = 0;
    write_all(fds[0], &acc, sizeof(acc));
    send_stripe_head(fds[0], 0, m0, sizeof(m0));
    acc.link = 1;
    write_all(fds[1], &acc, sizeof(acc));
    send_chunk(fds[1], 0, m0, PIECE);
    PROGRESS_UNTIL(&n, p->stripe.got == 2 * PIECE);
    FY_ASSERT_EQ(p->state, FY_TCP_PEER_CONNECTING);

    /* link 2's ACCEPT makes the connection up */
    acc.link = 2;
    write_all(fds[2], &acc, sizeof(acc));
    PROGRESS_UNTIL(&n, p->state == FY_TCP_PEER_UP);
    /* frame 1's chunk on link 1 comes before frame 0 is complete and frame 1's header */
    send_chunk(fds[1], 1, m1, PIECE);
    for (int i = 0; i < 20; i++)
        tt_progress(&n);
    FY_ASSERT_EQ(iface->protocol_errors, 0);
    send_chunk(fds[2], 0, m0, 2 * PIECE); /* frame 0 complete */
    PROGRESS_UNTIL(&n, t.got == 1 || iface->protocol_errors != 0);
    send_stripe_head(fds[0], 1, m1, sizeof(m1));
    send_chunk(fds[2], 1, m1, 2 * PIECE);
    PROGRESS_UNTIL(&n, t.got == 2 || iface->protocol_errors != 0);

    FY_ASSERT_EQ(iface->protocol_errors, 0);
    FY_ASSERT_EQ(n.nerr, 0);
    FY_ASSERT_EQ(t.got, 2);
    FY_ASSERT_EQ(t.len[0], sizeof(m0));
    FY_ASSERT_U64_EQ(t.sum[0], tt_sum(m0, sizeof(m0)));
    FY_ASSERT_EQ(t.len[1], sizeof(m1));
    FY_ASSERT_U64_EQ(t.sum[1], tt_sum(m1, sizeof(m1)));
    n.ops->ep_destroy(ep);
    tt_close(&n);
    for (unsigned k = 0; k < 3; k++)
        close(fds[k]);
    close(lfd);
}

FYTEST_MAIN(FYTEST_CASE(simultaneous_connect), FYTEST_CASE(reset_isolated),
            FYTEST_CASE(killed_mid_message), FYTEST_CASE(killed_mid_get),
            FYTEST_CASE(stranger_wrong_key), FYTEST_CASE(garbage_and_silence),
            FYTEST_CASE(graceful_close), FYTEST_CASE(sleeps_on_event_fd), FYTEST_CASE(self_connect),
            FYTEST_CASE(ipv6), FYTEST_CASE(loopback_included), FYTEST_CASE(acceptor_first))
