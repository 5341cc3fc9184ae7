/*
 * test_udp_forged.c - connection requests from nobody who can answer, and junk, do not cost
 * the transport memory, and a real connection beside them keeps working.  Two udp ifaces in
 * this process (tl level); a third, plain socket plays the attacker, who has the attacked
 * iface's address and so its key (it would be refused at the first check without it):
 *
 *   forged_requests  100,000 CONN_REQs (random uuids and connection ids, never echoing a
 *                    cookie) and 20,000 random datagrams at the priority and data ports,
 *                    interleaved with a checked stream of AMs between the two ifaces: every
 *                    AM arrives intact, the attacked iface holds no connection but the real
 *                    one, its counters show a cookie per request, and its heap grows by less
 *                    than 1 MiB (printed: the "memory stays bounded" figure)
 *   idle_cost        1,000 idle connections: heap per connection end <= 4 kB, printed
 *                    (bench/RESULTS.md); no window array once the data is ACKed
 *   cookie_replayed  a cookie sent to one requester does not open a connection for another
 *                    uuid or connection id
 *   old_key_refused  each iface has its own random key (not the job key it was given, not the
 *                    fixed key unlaunched processes once shared); a CONN_REQ with that old
 *                    constant or the job key is dropped unanswered (counted as bad key), the
 *                    same request with the iface's key gets its COOKIE, keyed for the requester
 *   reset_echoed     a RESET for a connection that is gone carries the key it was sent (the
 *                    responder knows no other) and is still taken by the connection it names:
 *                    the sender's ep fails with CONNECTION_RESET instead of resending forever
 *   data_forged      data segments (the compact header carries no iface key) that name the
 *                    live connection and its next sequence number, but with a wrong token, or a
 *                    checksum not keyed with the iface key and token, are all dropped and
 *                    counted, nothing delivered; the same segment with the token, or keyed
 *                    right, is taken (the forgeries reached the check)
 */
#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fytest.h"
#include "tl/tl.h"
#include "tl/udp/udp.h"
#include "util/clock.h"

#define JOB_KEY    0x5eedf00dcafe0003ull
#define OLD_KEY    0x66657272794b3031ull /* every unlaunched process's job key before */
#define FORGER_KEY 0x0f0f0f0f12345678ull /* the key the forger claims for its answers */

static const fy_tl_component_t *tl;
static fy_tl_md_t *md;
static fy_tl_iface_t *ifa, *ifb;
static fy_tl_ep_t *ep;
static struct sockaddr_in to[2];
static int sock;
static uint64_t akey; /* the attacked iface's key, from its address */
static uint64_t got, bad;

static void am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    (void)arg;
    (void)id;
    uint64_t v[64];
    if (len != sizeof(v)) {
        bad++;
        return;
    }
    memcpy(v, data, sizeof(v));
    for (int i = 0; i < 64; i++)
        if (v[i] != got * 64 + (uint64_t)i)
            bad++;
    got++;
}

static int expect_err;
static ferry_status_t got_err;

static void err_cb(void *arg, fy_tl_ep_t *e, ferry_status_t status)
{
    (void)arg;
    (void)e;
    if (expect_err) {
        got_err = status;
        return;
    }
    FYTEST_FAIL("the real connection failed: %s", ferry_status_string(status));
}

static void progress(void)
{
    tl->ops->iface_progress(ifa);
    tl->ops->iface_progress(ifb);
}

static void open_pair(void)
{
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_AF", "inet", 1);
    tl = fy_tl_find("udp");
    FY_ASSERT(tl != NULL);
    FY_ASSERT_OK(tl->ops->md_open(tl, &md));
    fy_tl_iface_params_t p = {
        .device = "lo", .am_cb = am_cb, .err_cb = err_cb, .job_key = JOB_KEY, .worker_uuid = 1};
    FY_ASSERT_OK(tl->ops->iface_open(md, &p, &ifa));
    p.worker_uuid = 2;
    FY_ASSERT_OK(tl->ops->iface_open(md, &p, &ifb));
    uint8_t a_dev[64], a_if[64];
    FY_ASSERT_OK(tl->ops->iface_get_address(ifa, a_dev, a_if));
    fy_udp_dev_addr_t da;
    fy_udp_iface_addr_t ia;
    memcpy(&da, a_dev, sizeof(da));
    memcpy(&ia, a_if, sizeof(ia));
    akey = ia.key;
    for (int c = 0; c < 2; c++) {
        to[c].sin_family = AF_INET;
        memcpy(&to[c].sin_addr, da.ip.addr, 4);
        to[c].sin_port = htons(c ? ia.data_port : ia.prio_port);
    }
    sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    FY_ASSERT(sock >= 0);
    FY_ASSERT_OK(tl->ops->ep_create(ifb, a_dev, a_if, &ep));
}

static void close_pair(void)
{
    tl->ops->ep_destroy(ep);
    tl->ops->iface_close(ifb);
    tl->ops->iface_close(ifa);
    tl->ops->md_close(md);
    close(sock);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void forge_req_key(uint64_t key, uint64_t uuid, uint32_t src_id, uint64_t cookie)
{
    uint8_t buf[FY_UDP_HDR_LEN + sizeof(fy_udp_conn_msg_t)];
    fy_udp_hdr_t h;
    fy_udp_conn_msg_t m;
    memset(&h, 0, sizeof(h));
    memset(&m, 0, sizeof(m));
    h.job_key = key;
    h.src_id = src_id;
    h.type = FY_UDP_T_CONN_REQ;
    h.version = FY_UDP_VERSION;
    h.len = sizeof(m);
    m.uuid = uuid;
    m.prio_port = 9;
    m.data_port = 9;
    m.window = 64;
    m.seg_size = 1472;
    m.prio_mtu = 768;
    m.credit = 1 << 20;
    m.live_port = 9;
    m.cookie = cookie;
    m.key = FORGER_KEY;
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), &m, sizeof(m));
    while (sendto(sock, buf, sizeof(buf), 0, (struct sockaddr *)&to[0], sizeof(to[0])) < 0)
        tl->ops->iface_progress(ifa); /* our socket buffer is full: let the target read */
}

static void forge_req(uint64_t uuid, uint32_t src_id, uint64_t cookie)
{
    forge_req_key(akey, uuid, src_id, cookie);
}

static void forge_junk(void)
{
    uint8_t buf[1400];
    size_t len = 1 + rnd() % sizeof(buf);
    for (size_t i = 0; i < len; i += 8) {
        uint64_t r = rnd();
        memcpy(buf + i, &r, FY_MIN((size_t)8, len - i));
    }
    if (rnd() % 2) { /* a valid key and version, so it gets past the first checks */
        uint64_t k = akey;
        if (len >= FY_UDP_HDR_LEN) {
            memcpy(buf, &k, 8);
            buf[offsetof(fy_udp_hdr_t, version)] = FY_UDP_VERSION;
        }
    }
    int c = (int)(rnd() % 2);
    while (sendto(sock, buf, len, 0, (struct sockaddr *)&to[c], sizeof(to[c])) < 0)
        tl->ops->iface_progress(ifa);
}

static void send_am(uint64_t n)
{
    uint64_t v[64];
    for (int i = 0; i < 64; i++)
        v[i] = n * 64 + (uint64_t)i;
    struct iovec iov = {v, sizeof(v)};
    while (tl->ops->am_bcopy(ep, 1, &iov, 1) == FERRY_ERR_NO_RESOURCE)
        progress();
}

static void forged_requests(void)
{
    open_pair();
    fy_udp_iface_t *a = (fy_udp_iface_t *)ifa;
    send_am(0);
    while (got < 1)
        progress();
    struct mallinfo2 mi0 = mallinfo2();
    const unsigned nreq = 100000, njunk = 20000, nam = 2000;
    uint64_t sent = 1;
    for (unsigned i = 0; i < nreq; i++) {
        forge_req(rnd() | 1, (uint32_t)rnd() | 1, i % 3 == 0 ? 0 : rnd());
        if (i % 5 == 0)
            forge_junk();
        if (i % (nreq / nam) == 0)
            send_am(sent++);
        if (i % 16 == 0)
            progress();
    }
    for (unsigned i = 0;
         i < 100000 && (got < sent || fy_udp_conn(ep)->snd_una != fy_udp_conn(ep)->snd_nxt); i++)
        progress();
    for (unsigned i = 0; i < 1000; i++)
        progress(); /* what is still in the socket */
    struct mallinfo2 mi1 = mallinfo2();
    long grew = (long)mi1.uordblks - (long)mi0.uordblks;
    printf("forged_requests: %u forged requests + %u junk datagrams: heap %+ld bytes, "
           "connections %u (passive %u), cookies sent %llu, refused %llu, dropped: bad key "
           "%llu malformed %llu unknown ep %llu; %llu/%llu AMs intact\n",
           nreq, njunk, grew, a->nconns, a->npassive, (unsigned long long)a->cookies_sent,
           (unsigned long long)a->half_open_refused, (unsigned long long)a->drops_bad_key,
           (unsigned long long)a->drops_malformed, (unsigned long long)a->drops_unknown_ep,
           (unsigned long long)got, (unsigned long long)sent);
    FY_ASSERT_EQ(bad, 0);
    FY_ASSERT_EQ(got, sent);
    FY_ASSERT_EQ(a->nconns, 1); /* the real one */
    FY_ASSERT_EQ(a->npassive, 1);
    FY_ASSERT_GE(a->cookies_sent, nreq / 2); /* most arrived (the socket may drop a few) */
    FY_ASSERT_LT(grew, 1 << 20);
    close_pair();
}

static void cookie_replayed(void)
{
    open_pair();
    fy_udp_iface_t *a = (fy_udp_iface_t *)ifa;
    send_am(0);
    while (got < 1)
        progress();
    /* Ask as (uuid 77, connection 5) and take the cookie from the COOKIE answer. */
    forge_req(77, 5, 0);
    uint8_t buf[256];
    ssize_t n = -1;
    for (int i = 0; i < 100000 && n < 0; i++) {
        progress();
        n = recv(sock, buf, sizeof(buf), 0);
    }
    FY_ASSERT_EQ(n, FY_UDP_HDR_LEN + sizeof(fy_udp_cookie_t));
    fy_udp_hdr_t h;
    fy_udp_cookie_t c;
    memcpy(&h, buf, sizeof(h));
    memcpy(&c, buf + FY_UDP_HDR_LEN, sizeof(c));
    FY_ASSERT_EQ(h.type, FY_UDP_T_COOKIE);
    FY_ASSERT_EQ(h.dst_id, 5);
    FY_ASSERT_U64_EQ(h.job_key, FORGER_KEY); /* keyed for the requester, as its conn msg says */
    FY_ASSERT_EQ(a->nconns, 1);              /* the request cost nothing */
    uint64_t ck = c.cookie;
    forge_req(78, 5, ck); /* another uuid */
    forge_req(77, 6, ck); /* another connection id */
    for (int i = 0; i < 200; i++)
        progress();
    FY_ASSERT_EQ(a->nconns, 1);
    forge_req(77, 5, ck); /* the one it was made for: opens a (passive) connection */
    for (int i = 0; i < 200 && a->nconns == 1; i++)
        progress();
    FY_ASSERT_EQ(a->nconns, 2);
    FY_ASSERT_EQ(a->npassive, 2);
    close_pair();
}

/* What an idle connection costs: n connections from b to a (n passive ones at a), all
 * handshaken, one AM each, then idle; heap per connection end (bench/RESULTS.md). */
static void idle_cost(void)
{
    open_pair();
    fy_udp_iface_t *a = (fy_udp_iface_t *)ifa, *b = (fy_udp_iface_t *)ifb;
    send_am(0);
    while (got < 1)
        progress();
    /* The window array lives only while segments are in flight: once the AM is ACKed, the
     * connection holds none. */
    for (unsigned k = 0; k < 200000 && fy_udp_conn(ep)->win != NULL; k++)
        progress();
    FY_ASSERT(fy_udp_conn(ep)->win == NULL);
    const unsigned n = 1000;
    static fy_tl_ep_t *eps[1000];
    uint8_t a_dev[64], a_if[64];
    FY_ASSERT_OK(tl->ops->iface_get_address(ifa, a_dev, a_if));
    struct mallinfo2 mi0 = mallinfo2();
    for (unsigned i = 0; i < n; i++)
        FY_ASSERT_OK(tl->ops->ep_create(ifb, a_dev, a_if, &eps[i]));
    unsigned connected = 0;
    for (unsigned k = 0; k < 200000 && connected < n; k++) {
        progress();
        connected = 0;
        for (unsigned i = 0; i < n; i++)
            connected += fy_udp_conn(eps[i])->state == FY_UDP_CONN_CONNECTED;
    }
    FY_ASSERT_EQ(connected, n);
    FY_ASSERT_EQ(a->nconns, n + 1);
    struct mallinfo2 mi1 = mallinfo2();
    double per = ((double)mi1.uordblks - (double)mi0.uordblks) / (2.0 * n);
    printf("idle_cost: %u connections (both ends in this process): %.0f bytes of heap per "
           "connection end (fy_udp_conn_t %zu; window array of %zu B only while data is in "
           "flight)\n",
           n, per, sizeof(fy_udp_conn_t), (size_t)a->wsize * sizeof(void *));
    FY_ASSERT(per <= 4096); /* issue 13: idle cost <= 4 kB per peer */
    for (unsigned i = 0; i < n; i++)
        tl->ops->ep_destroy(eps[i]);
    (void)b;
    close_pair();
}

static void old_key_refused(void)
{
    open_pair();
    fy_udp_iface_t *a = (fy_udp_iface_t *)ifa, *b = (fy_udp_iface_t *)ifb;
    send_am(0); /* the two ifaces talk, each with its own key */
    while (got < 1)
        progress();
    uint64_t ka = a->super.params.job_key, kb = b->super.params.job_key;
    printf("old_key_refused: iface keys %016llx and %016llx (job key given: %016llx)\n",
           (unsigned long long)ka, (unsigned long long)kb, (unsigned long long)JOB_KEY);
    FY_ASSERT(ka == akey && ka != 0 && kb != 0 && ka != kb);
    FY_ASSERT(ka != JOB_KEY && ka != OLD_KEY && kb != JOB_KEY && kb != OLD_KEY);
    uint64_t bad0 = a->drops_bad_key, cookies0 = a->cookies_sent;
    const unsigned n = 50;
    for (unsigned i = 0; i < n; i++) {
        forge_req_key(i % 2 ? OLD_KEY : JOB_KEY, 77 + i, 5 + i, 0);
        forge_req_key(i % 2 ? OLD_KEY : JOB_KEY, 77 + i, 5 + i, 12345); /* with a "cookie" */
    }
    uint8_t buf[256];
    ssize_t r = -1;
    for (unsigned k = 0; k < 2000 && a->drops_bad_key - bad0 < 2 * n; k++)
        progress();
    for (unsigned k = 0; k < 200; k++) {
        progress();
        r = recv(sock, buf, sizeof(buf), 0);
        FY_ASSERT_MSG(r < 0, "a request with a wrong key was answered (%zd bytes)", r);
    }
    FY_ASSERT_EQ(a->drops_bad_key - bad0, 2 * n);
    FY_ASSERT_EQ(a->cookies_sent, cookies0);
    FY_ASSERT_EQ(a->nconns, 1);
    /* The same request with the key from the address is answered. */
    forge_req(77, 5, 0);
    for (int i = 0; i < 100000 && r < 0; i++) {
        progress();
        r = recv(sock, buf, sizeof(buf), 0);
    }
    FY_ASSERT_EQ(r, FY_UDP_HDR_LEN + sizeof(fy_udp_cookie_t));
    FY_ASSERT_EQ(buf[offsetof(fy_udp_hdr_t, type)], FY_UDP_T_COOKIE);
    FY_ASSERT_EQ(a->cookies_sent, cookies0 + 1);
    close_pair();
}

static void reset_echoed(void)
{
    open_pair();
    fy_udp_iface_t *a = (fy_udp_iface_t *)ifa, *b = (fy_udp_iface_t *)ifb;
    send_am(0);
    while (got < 1)
        progress();
    /* a forgets its end (as when reclaimed idle): b's next AM names a connection a has not */
    for (uint32_t i = 1; i < a->conn_cap; i++)
        if (a->conns[i] != NULL)
            fy_udp_conn_reclaim(a->conns[i]);
    FY_ASSERT_EQ(a->nconns, 0);
    expect_err = 1;
    got_err = FERRY_OK;
    send_am(1);
    for (unsigned k = 0; k < 200000 && got_err == FERRY_OK; k++)
        progress();
    FY_ASSERT_EQ(got_err, FERRY_ERR_CONNECTION_RESET);
    FY_ASSERT(a->resets_sent >= 1 && b->resets_rx >= 1);
    FY_ASSERT_EQ(b->drops_bad_key, 0);
    expect_err = 0;
    close_pair();
}

/* An AM data segment as the peer would send it: check is the token, or with csum the CRC32C
 * continued from seed. */
static void forge_data(uint32_t dst, uint32_t check, uint32_t seq, int csum, uint32_t seed,
                       uint64_t n)
{
    uint8_t buf[FY_UDP_DHDR_LEN + FY_UDP_AM_XLEN + 64 * 8];
    fy_udp_dhdr_t h = {.type = FY_UDP_T_AM,
                       .flags = csum ? FY_UDP_F_CSUM : 0,
                       .dst_id = dst,
                       .check = csum ? 0 : check,
                       .seq = seq,
                       .tsval = 1};
    fy_udp_am_t am = {.am_id = 1};
    uint64_t v[64];
    for (int i = 0; i < 64; i++)
        v[i] = n * 64 + (uint64_t)i;
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), &am, sizeof(am));
    memcpy(buf + sizeof(h) + sizeof(am), v, sizeof(v));
    if (csum) {
        uint32_t crc = fy_udp_crc32c(seed, buf, sizeof(buf));
        memcpy(buf + FY_UDP_D_CHECK, &crc, 4);
    }
    while (sendto(sock, buf, sizeof(buf), 0, (struct sockaddr *)&to[1], sizeof(to[1])) < 0)
        tl->ops->iface_progress(ifa);
}

static void data_forged(void)
{
    enum { N = 1000 };
    open_pair();
    fy_udp_iface_t *a = (fy_udp_iface_t *)ifa;
    got = bad = 0;
    send_am(0);
    while (got < 1)
        progress();
    for (unsigned k = 0; k < 100000; k++) /* every ACK in: b sends nothing more */
        progress();
    fy_udp_conn_t *c = NULL;
    for (uint32_t i = 1; i < a->conn_cap && c == NULL; i++)
        if (a->conns[i] != NULL && fy_udp_conn_alive(a->conns[i]))
            c = a->conns[i];
    FY_ASSERT(c != NULL);
    uint32_t seq = c->rcv_nxt;
    uint64_t bk0 = a->drops_bad_key, cs0 = a->drops_csum;
    for (unsigned i = 0; i < N; i++) {
        uint32_t t = (uint32_t)rnd();
        forge_data(c->id, t != c->token ? t : t + 1, seq, 0, 0, 1);
        /* a checksum anyone can compute (unkeyed), or keyed with the token and a wrong key */
        forge_data(c->id, 0, seq, 1, i % 2 ? 0 : fy_udp_check_seed(akey ^ (rnd() | 1), c->token),
                   1);
        if (i % 16 == 15)
            for (int k = 0; k < 4; k++)
                tl->ops->iface_progress(ifa);
    }
    uint64_t t0 = fy_time_ns();
    while ((a->drops_bad_key - bk0 < N || a->drops_csum - cs0 < N) &&
           fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC)
        progress();
    printf("  %llu forged tokens, %llu forged checksums dropped\n",
           (unsigned long long)(a->drops_bad_key - bk0), (unsigned long long)(a->drops_csum - cs0));
    FY_ASSERT_EQ(a->drops_bad_key - bk0, N);
    FY_ASSERT_EQ(a->drops_csum - cs0, N);
    FY_ASSERT_EQ(got, 1);
    FY_ASSERT_EQ(c->rcv_nxt, seq);
    /* the control: with the token, then keyed right, the next AMs are taken */
    forge_data(c->id, c->token, seq, 0, 0, 1);
    forge_data(c->id, 0, seq + 1, 1, fy_udp_check_seed(akey, c->token), 2);
    t0 = fy_time_ns();
    while (got < 3 && fy_time_ns() - t0 < 10 * FY_NSEC_PER_SEC)
        progress();
    FY_ASSERT_EQ(got, 3);
    FY_ASSERT_EQ(bad, 0);
    close_pair();
}

FYTEST_MAIN(FYTEST_CASE(forged_requests), FYTEST_CASE(cookie_replayed), FYTEST_CASE(idle_cost),
            FYTEST_CASE(old_key_refused), FYTEST_CASE(reset_echoed), FYTEST_CASE(data_forged))
