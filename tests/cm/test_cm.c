/*
 * test_cm.c - connection managers: the registry and FERRY_CM, and the sockaddr manager end to
 * end between real processes.  Each case forks a server process that listens on 127.0.0.1
 * port 0 and tells the client (the case's own process) the bound port over a pipe; the two
 * then exchange active messages both ways with checked data.  Negative cases: a rejected
 * request, a port with no listener (a clear error, no hang), garbage, foreign and silent
 * clients on the listener port (each dropped, the listener keeps serving), FERRY_CM narrowing.
 * The server waits in FERRY_WAIT_BLOCK mode with no timeout, so it only ever wakes through
 * its event fd: that proves the listener and its connections are part of it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "cm/cm.h"
#include "fytest.h"
#include "proto/proto.h"
#include "tl/tl.h"

#define AM_DATA  7
#define AM_REPLY 8
#define AM_BYE   9
#define DATA_LEN 100000

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)((i * 31u + seed * 7u + (i >> 8)) & 0xff);
}

static int check(const uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (uint8_t)((i * 31u + seed * 7u + (i >> 8)) & 0xff))
            return 0;
    return 1;
}

/* Were all of ep's lanes connected by the manager called name (ferry_ep_query)? */
static int lanes_by(const ferry_ep_t *ep, const char *name)
{
    ferry_ep_attr_t a = {.field_mask = FERRY_EP_ATTR_FIELD_LANES};
    if (ferry_ep_query(ep, &a) != FERRY_OK || a.nlanes == 0)
        return 0;
    for (unsigned l = 0; l < a.nlanes; l++)
        if (a.lanes[l].cm == NULL || strcmp(a.lanes[l].cm, name) != 0)
            return 0;
    return 1;
}

/* ---- the server process ---------------------------------------------------------------- */

typedef struct server {
    ferry_worker_t *w;
    ferry_listener_t *l;
    ferry_ep_t *ep; /* the endpoint made from the accepted request */
    int reject_first;
    int nrequests;
    int got_data, got_bye;
    int bad;
} server_t;

static void server_conn(ferry_conn_request_t *req, void *arg)
{
    server_t *s = arg;
    char peer[64];
    if (ferry_conn_request_peer(req, peer, sizeof(peer)) != FERRY_OK ||
        strncmp(peer, "127.0.0.1:", 10) != 0)
        s->bad = 1;
    if (s->nrequests++ == 0 && s->reject_first) {
        if (ferry_listener_reject(s->l, req) != FERRY_OK)
            s->bad = 1;
        return;
    }
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_CONN_REQUEST | FERRY_EP_FIELD_USER_DATA,
                           .conn_request = req,
                           .user_data = s};
    if (ferry_ep_create(s->w, &p, &s->ep) != FERRY_OK)
        s->bad = 1;
}

static ferry_status_t server_am(void *arg, const void *hdr, size_t hlen, const void *data,
                                size_t len, ferry_ep_t *reply_ep)
{
    server_t *s = arg;
    (void)hdr;
    (void)hlen;
    (void)reply_ep;
    if (len != DATA_LEN || !check(data, len, 1))
        s->bad = 1;
    s->got_data++;
    return FERRY_OK;
}

static ferry_status_t server_bye(void *arg, const void *hdr, size_t hlen, const void *data,
                                 size_t len, ferry_ep_t *reply_ep)
{
    (void)hdr, (void)hlen, (void)data, (void)len, (void)reply_ep;
    ((server_t *)arg)->got_bye = 1;
    return FERRY_OK;
}

/* Serve one client's data and answer it on the accepted endpoint; exit 0 when all was right. */
static void server_main(int wfd, int reject_first)
{
    alarm(30);
    server_t s = {.reject_first = reject_first};
    ferry_context_t *ctx;
    if (ferry_context_create(NULL, &ctx) != FERRY_OK)
        _exit(10);
    ferry_worker_params_t wp = {.field_mask = FERRY_WORKER_FIELD_WAIT_MODE,
                                .wait_mode = FERRY_WAIT_BLOCK};
    if (ferry_worker_create(ctx, &wp, &s.w) != FERRY_OK)
        _exit(11);
    ferry_worker_set_am_handler(s.w, AM_DATA, server_am, &s);
    ferry_worker_set_am_handler(s.w, AM_BYE, server_bye, &s);
    ferry_listener_params_t lp = {.field_mask = FERRY_LISTENER_FIELD_SOCKADDR |
                                                FERRY_LISTENER_FIELD_CONN_HANDLER,
                                  .ip = "127.0.0.1",
                                  .port = 0,
                                  .conn_cb = server_conn,
                                  .conn_arg = &s};
    if (ferry_listener_create(s.w, &lp, &s.l) != FERRY_OK)
        _exit(12);
    ferry_listener_attr_t attr;
    if (ferry_listener_query(s.l, &attr) != FERRY_OK || attr.port == 0)
        _exit(13);
    if (write(wfd, &attr.port, sizeof(attr.port)) != sizeof(attr.port))
        _exit(14);
    close(wfd);
    while (!s.got_data)
        ferry_worker_wait(s.w, -1);
    if (s.ep == NULL || ferry_ep_get_user_data(s.ep) != &s)
        _exit(15);
    int by_sockaddr = lanes_by(s.ep, "sockaddr"); /* made from the listener's request */
    uint8_t *buf = malloc(DATA_LEN);
    fill(buf, DATA_LEN, 2);
    if (ferry_am_send(s.ep, AM_REPLY, "r", 1, buf, DATA_LEN, NULL) != FERRY_OK)
        _exit(16);
    free(buf);
    while (!s.got_bye)
        ferry_worker_wait(s.w, -1);
    ferry_ep_close(s.ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_listener_destroy(s.l);
    ferry_worker_destroy(s.w);
    ferry_context_destroy(ctx);
    _exit(s.bad ? 17 : !by_sockaddr ? 19 : s.nrequests == 1 + reject_first ? 0 : 18);
}

static pid_t start_server(int reject_first, uint16_t *port_p)
{
    int p[2];
    FY_ASSERT_EQ(pipe(p), 0);
    pid_t pid = fork();
    FY_ASSERT_GE(pid, 0);
    if (pid == 0) {
        close(p[0]);
        server_main(p[1], reject_first);
    }
    close(p[1]);
    FY_ASSERT_EQ(read(p[0], port_p, sizeof(*port_p)), (ssize_t)sizeof(*port_p));
    close(p[0]);
    return pid;
}

/* Wait for the server's exit, progressing the client (the bye may still be on its way). */
static void expect_server_ok(ferry_worker_t *w, pid_t pid)
{
    int st = 0;
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0)
        ferry_worker_wait(w, 10);
    FY_ASSERT_EQ(r, pid);
    FY_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "server: status 0x%x (exit %d)", st,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* ---- the client ------------------------------------------------------------------------ */

typedef struct client {
    ferry_context_t *ctx;
    ferry_worker_t *w;
    int got_reply;
    int bad;
} client_t;

static ferry_status_t client_reply(void *arg, const void *hdr, size_t hlen, const void *data,
                                   size_t len, ferry_ep_t *reply_ep)
{
    client_t *c = arg;
    (void)hdr, (void)hlen, (void)reply_ep;
    if (len != DATA_LEN || !check(data, len, 2))
        c->bad = 1;
    c->got_reply++;
    return FERRY_OK;
}

static void client_open(client_t *c)
{
    memset(c, 0, sizeof(*c));
    FY_ASSERT_OK(ferry_context_create(NULL, &c->ctx));
    FY_ASSERT_OK(ferry_worker_create(c->ctx, NULL, &c->w));
    FY_ASSERT_OK(ferry_worker_set_am_handler(c->w, AM_REPLY, client_reply, c));
}

static void client_close(client_t *c)
{
    ferry_worker_destroy(c->w);
    ferry_context_destroy(c->ctx);
}

static ferry_status_t connect_to(client_t *c, uint16_t port, ferry_ep_t **ep_p)
{
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_SOCKADDR, .sockaddr_ip = "127.0.0.1", .sockaddr_port = port};
    return ferry_ep_create(c->w, &p, ep_p);
}

/* Data to the server, its answer on the endpoint it made from our request, then bye. */
static void round_trip(client_t *c, ferry_ep_t *ep)
{
    uint8_t *buf = malloc(DATA_LEN);
    fill(buf, DATA_LEN, 1);
    FY_ASSERT_OK(ferry_am_send(ep, AM_DATA, "d", 1, buf, DATA_LEN, NULL));
    free(buf);
    while (c->got_reply == 0)
        FY_ASSERT_OK(ferry_worker_wait(c->w, 20000));
    FY_ASSERT_EQ(c->bad, 0);
    FY_ASSERT_OK(ferry_am_send(ep, AM_BYE, NULL, 0, NULL, 0, NULL));
}

static void connect_and_exchange(void)
{
    uint16_t port;
    pid_t pid = start_server(0, &port);
    client_t c;
    client_open(&c);
    ferry_ep_t *ep = NULL;
    FY_ASSERT_OK(connect_to(&c, port, &ep));
    FY_ASSERT(ep != NULL);
    FY_ASSERT(lanes_by(ep, "sockaddr")); /* its lanes too, not only the address exchange */
    round_trip(&c, ep);
    expect_server_ok(c.w, pid);
    FY_ASSERT_OK(ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL));
    client_close(&c);
}

static void rejected_then_accepted(void)
{
    uint16_t port;
    pid_t pid = start_server(1, &port);
    client_t c;
    client_open(&c);
    ferry_ep_t *ep = NULL;
    FY_ASSERT_STATUS(connect_to(&c, port, &ep), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT(ep == NULL);
    FY_ASSERT_OK(connect_to(&c, port, &ep)); /* the listener still serves */
    round_trip(&c, ep);
    expect_server_ok(c.w, pid);
    FY_ASSERT_OK(ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL));
    client_close(&c);
}

/* A port nobody listens on: refused at once, not a wait for FERRY_CM_TIMEOUT. */
static void no_listener(void)
{
    setenv("FERRY_CM_TIMEOUT", "120s", 1); /* longer than this case's own timeout */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(a);
    FY_ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sl), 0);
    FY_ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    close(fd); /* bound, never listened: the port is free and refuses */
    client_t c;
    client_open(&c);
    ferry_ep_t *ep = NULL;
    FY_ASSERT_STATUS(connect_to(&c, ntohs(a.sin_port), &ep), FERRY_ERR_UNREACHABLE);
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_SOCKADDR, .sockaddr_ip = "no.such.ip", .sockaddr_port = 1};
    FY_ASSERT_STATUS(ferry_ep_create(c.w, &p, &ep), FERRY_ERR_INVALID_ADDR);
    client_close(&c);
}

static int raw_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(port)};
    FY_ASSERT_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* The server closes a bad client's connection: we read EOF (or a reset) within the bound. */
static void expect_dropped(int fd, const char *what)
{
    struct pollfd p = {fd, POLLIN, 0};
    FY_ASSERT_MSG(poll(&p, 1, 20000) == 1, "%s: not dropped in 20 s", what);
    char b[64];
    ssize_t r = read(fd, b, sizeof(b));
    FY_ASSERT_MSG(r <= 0, "%s: the server answered (%zd bytes) instead of dropping it", what, r);
    close(fd);
}

static void bad_clients(void)
{
    setenv("FERRY_CM_TIMEOUT", "300ms", 1); /* the server's bound for a silent client */
    uint16_t port;
    pid_t pid = start_server(0, &port);
    setenv("FERRY_CM_TIMEOUT", "20s", 1); /* the client's, for its answer */
    int silent = raw_connect(port);
    int garbage = raw_connect(port);
    char junk[200];
    memset(junk, 0x5a, sizeof(junk));
    FY_ASSERT_EQ(write(garbage, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    int foreign = raw_connect(port); /* well formed, another job key */
    fy_cm_msg_hdr_t h = {FY_CM_MAGIC, FY_CM_VERSION, FY_CM_HELLO, 12345, 4, 0};
    FY_ASSERT_EQ(write(foreign, &h, sizeof(h)), (ssize_t)sizeof(h));
    int huge = raw_connect(port); /* the right key, an address of 1 GiB announced */
    client_t c;
    client_open(&c);
    uint64_t key = fy_context_job_key(c.ctx); /* the default one, as the server's */
    fy_cm_msg_hdr_t hh = {FY_CM_MAGIC, FY_CM_VERSION, FY_CM_HELLO, key, 1u << 30, 0};
    FY_ASSERT_EQ(write(huge, &hh, sizeof(hh)), (ssize_t)sizeof(hh));
    expect_dropped(garbage, "garbage");
    expect_dropped(foreign, "foreign job key");
    expect_dropped(huge, "huge address");
    expect_dropped(silent, "silent");
    ferry_ep_t *ep = NULL;
    FY_ASSERT_OK(connect_to(&c, port, &ep)); /* and a good client is still served */
    round_trip(&c, ep);
    expect_server_ok(c.w, pid);
    FY_ASSERT_OK(ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL));
    client_close(&c);
}

static void bad_params(void)
{
    client_t c;
    client_open(&c);
    ferry_listener_t *l = NULL;
    ferry_listener_params_t lp = {.field_mask = FERRY_LISTENER_FIELD_SOCKADDR, .ip = "127.0.0.1"};
    FY_ASSERT_STATUS(ferry_listener_create(c.w, &lp, &l), FERRY_ERR_INVALID_PARAM); /* no cb */
    lp.field_mask |= FERRY_LISTENER_FIELD_CONN_HANDLER;
    lp.conn_cb = (ferry_listener_conn_cb_t)server_conn;
    lp.ip = "300.1.1.1";
    FY_ASSERT_STATUS(ferry_listener_create(c.w, &lp, &l), FERRY_ERR_INVALID_PARAM);
    lp.ip = "127.0.0.1";
    lp.field_mask |= 1u << 7;
    FY_ASSERT_STATUS(ferry_listener_create(c.w, &lp, &l), FERRY_ERR_INVALID_PARAM);
    lp.field_mask &= ~(uint64_t)(1u << 7);
    FY_ASSERT_OK(ferry_listener_create(c.w, &lp, &l));
    ferry_listener_attr_t attr;
    FY_ASSERT_OK(ferry_listener_query(l, &attr));
    FY_ASSERT_NE(attr.port, 0);
    ferry_listener_t *l2 = NULL;
    lp.port = attr.port;
    FY_ASSERT_STATUS(ferry_listener_create(c.w, &lp, &l2), FERRY_ERR_BUSY); /* port taken */
    FY_ASSERT_STATUS(ferry_listener_query(NULL, &attr), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_listener_reject(l, NULL), FERRY_ERR_INVALID_PARAM);
    ferry_ep_t *ep = NULL;
    uint8_t addr[8] = {0};
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_SOCKADDR | FERRY_EP_FIELD_ADDRESS,
                           .address = addr,
                           .address_len = sizeof(addr),
                           .sockaddr_ip = "127.0.0.1",
                           .sockaddr_port = attr.port};
    FY_ASSERT_STATUS(ferry_ep_create(c.w, &p, &ep), FERRY_ERR_INVALID_PARAM); /* two peers */
    p.field_mask = FERRY_EP_FIELD_CONN_REQUEST;
    p.conn_request = NULL;
    FY_ASSERT_STATUS(ferry_ep_create(c.w, &p, &ep), FERRY_ERR_INVALID_PARAM);
    ferry_listener_destroy(l);
    ferry_listener_destroy(NULL);
    client_close(&c);
}

/* FERRY_CM narrows the managers: without sockaddr, no listener and no ep by ip:port. */
static void cm_narrowing(void)
{
    ferry_context_t *ctx = NULL;
    setenv("FERRY_CM", "direct,bogus", 1);
    FY_ASSERT_STATUS(ferry_context_create(NULL, &ctx), FERRY_ERR_BAD_CONFIG);
    setenv("FERRY_CM", "^sockaddr", 1);
    client_t c;
    client_open(&c);
    ferry_listener_t *l = NULL;
    ferry_listener_params_t lp = {.field_mask = FERRY_LISTENER_FIELD_CONN_HANDLER,
                                  .conn_cb = (ferry_listener_conn_cb_t)server_conn};
    FY_ASSERT_STATUS(ferry_listener_create(c.w, &lp, &l), FERRY_ERR_UNSUPPORTED);
    ferry_ep_t *ep = NULL;
    FY_ASSERT_STATUS(connect_to(&c, 9, &ep), FERRY_ERR_UNSUPPORTED);
    client_close(&c);
    setenv("FERRY_CM", "sockaddr", 1);
    client_open(&c);
    FY_ASSERT_OK(ferry_listener_create(c.w, &lp, &l));
    ferry_listener_destroy(l);
    client_close(&c);
}

/* The registry: selection by FERRY_CM's list and by priority per interface. */
static void registry_priorities(void)
{
    fy_config_list_t all = {0};
    FY_ASSERT_OK(fy_config_parse_list("all", &all));
    fy_cm_set_t set;
    FY_ASSERT_OK(fy_cm_set_init(&set, &all));
    FY_ASSERT_EQ(set.n, 4);
    fy_cm_iface_info_t tcp = {"tcp", "lo", FY_TL_CAP_CONNECT_TO_IFACE | FY_TL_CAP_AM_BCOPY};
    fy_cm_iface_info_t ep_only = {"ofi", "x", FY_TL_CAP_AM_BCOPY};
    int prio = -1;
    FY_ASSERT_STR_EQ(fy_cm_select_for_iface(&set, &tcp, &prio)->name, "direct");
    FY_ASSERT_EQ(prio, 50);
    FY_ASSERT_STR_EQ(fy_cm_select_for_iface(&set, &ep_only, &prio)->name, "am");
    FY_ASSERT_EQ(prio, 40);
    fy_cm_set_finalize(&set);
    fy_config_list_release(&all);

    fy_config_list_t some = {0};
    FY_ASSERT_OK(fy_config_parse_list("^direct,am", &some));
    FY_ASSERT_OK(fy_cm_set_init(&set, &some));
    FY_ASSERT_EQ(set.n, 2);
    FY_ASSERT(fy_cm_find(&set, "direct") == NULL);
    FY_ASSERT(fy_cm_find(&set, "sockaddr") != NULL);
    FY_ASSERT_STR_EQ(fy_cm_select_for_iface(&set, &tcp, &prio)->name, "oob");
    FY_ASSERT_EQ(prio, 30);
    fy_cm_set_finalize(&set);
    fy_config_list_release(&some);

    fy_config_list_t bad = {0};
    FY_ASSERT_OK(fy_config_parse_list("direct,carrier-pigeon", &bad));
    FY_ASSERT_STATUS(fy_cm_set_init(&set, &bad), FERRY_ERR_BAD_CONFIG);
    fy_config_list_release(&bad);
}

/* A worker destroyed with its listener still open and a request half read: all closed (the
 * sanitizer build checks nothing leaks), and the client sees its connection end. */
static void destroy_with_open_listener(void)
{
    client_t c;
    client_open(&c);
    ferry_listener_t *l = NULL;
    ferry_listener_params_t lp = {.field_mask = FERRY_LISTENER_FIELD_SOCKADDR |
                                                FERRY_LISTENER_FIELD_CONN_HANDLER,
                                  .ip = "127.0.0.1",
                                  .conn_cb = (ferry_listener_conn_cb_t)server_conn};
    FY_ASSERT_OK(ferry_listener_create(c.w, &lp, &l));
    ferry_listener_attr_t attr;
    FY_ASSERT_OK(ferry_listener_query(l, &attr));
    int fd = raw_connect(attr.port);
    FY_ASSERT_EQ(write(fd, "FYCM", 4), 4);
    for (int i = 0; i < 2100; i++) /* past two FY_IDLE_POLL rounds: it was accepted */
        ferry_worker_progress(c.w);
    client_close(&c);
    expect_dropped(fd, "half a request at worker destroy");
}

/* The request parser on hostile bytes: random headers (with valid magic and version more
 * often than chance) through a socket pair.  It must never accept what is not a whole valid
 * message, and never read past what it was told. */
static void rx_hostile_bytes(void)
{
    uint64_t key = 0x1234;
    unsigned seed = 12345;
    for (int iter = 0; iter < 3000; iter++) {
        int sv[2];
        FY_ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
        uint8_t msg[64];
        for (size_t i = 0; i < sizeof(msg); i++) {
            seed = seed * 1103515245u + 12345u;
            msg[i] = (uint8_t)(seed >> 16);
        }
        fy_cm_msg_hdr_t h;
        memcpy(&h, msg, sizeof(h));
        if (iter % 2 == 0) {
            h.magic = FY_CM_MAGIC;
            h.version = FY_CM_VERSION;
        }
        if (iter % 4 == 0)
            h.job_key = key;
        if (iter % 8 == 0)
            h.addr_len %= 48;
        memcpy(msg, &h, sizeof(h));
        size_t n = (size_t)(seed % (sizeof(msg) + 1));
        FY_ASSERT_EQ(write(sv[1], msg, n), (ssize_t)n);
        if (iter % 3 == 0)
            close(sv[1]); /* the peer leaves after what it sent */
        fy_cm_rx_t rx = {0};
        ferry_status_t st = fy_cm_rx_progress(&rx, sv[0], key);
        int valid = n >= sizeof(h) && h.magic == FY_CM_MAGIC && h.version == FY_CM_VERSION &&
                    h.type >= FY_CM_HELLO && h.type <= FY_CM_REJECT && h.job_key == key &&
                    h.addr_len <= FY_CM_ADDR_MAX && (h.addr_len > 0 || h.type == FY_CM_REJECT) &&
                    n >= sizeof(h) + h.addr_len;
        if (st == FERRY_OK)
            FY_ASSERT_MSG(valid, "iteration %d: accepted an invalid or partial message", iter);
        else if (valid)
            FY_ASSERT_MSG(0, "iteration %d: refused a valid message: %s", iter,
                          ferry_status_string(st));
        fy_cm_rx_release(&rx);
        close(sv[0]);
        if (iter % 3 != 0)
            close(sv[1]);
    }
}

FYTEST_MAIN(FYTEST_CASE(destroy_with_open_listener), FYTEST_CASE(rx_hostile_bytes),
            FYTEST_CASE(connect_and_exchange), FYTEST_CASE(rejected_then_accepted),
            FYTEST_CASE(no_listener), FYTEST_CASE(bad_clients), FYTEST_CASE(bad_params),
            FYTEST_CASE(cm_narrowing), FYTEST_CASE(registry_priorities))
