/*
 * fuzz_udp.c - libFuzzer target for udp segments (src/tl/udp/udp_rx.c and the handshake of
 * udp_conn.c, the heartbeat answer and reset of udp_live.c): anything a datagram can hold, sent to
 * a real iface on loopback.  A second iface in the process is a connected peer, so the iface under
 * test has a live connection whose ids, sequence numbers and window the fuzzed segments can hit.
 *
 * Input: a mode byte, then datagrams, each a 2-byte length and its bytes.  Mode bits fix up
 * each datagram's header before it is sent, so that mutations reach past the checks they
 * would otherwise fail: 0 the job key (a control message) or the connection token (a data
 * segment: byte 0 is a sequenced type), 1 the connection ids (our live connection), 2 the
 * length field (control), 3 the sequence number (the expected one plus the low byte of the
 * fuzzed one, signed), 5 the checksum (computed, with its flag; a data segment's keyed).  Bit 4
 * sends to the priority channel instead of the data channel.  The placeholders of fuzz_keys.h
 * become the id, key and address of a registered region.  After each datagram both ifaces progress
 * until the datagram has been received.  If the connection died (a fuzzed segment may close it),
 * the peer connects again.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "fuzz_keys.h"
#include "tl/tl.h"
#include "tl/udp/udp.h"

#define JOB_KEY 0x5eedf00dcafe0002ull

static const fy_tl_component_t *tl;
static fy_tl_md_t *md;
static fy_tl_iface_t *ifa, *ifb; /* a: under test; b: its peer */
static fy_udp_conn_t *bconn;     /* b's connection to a */
static uint8_t a_dev[64], a_if[64];
static struct sockaddr_in to[2]; /* a's priority and data ports */
static int sock;
static uint64_t a_key; /* the attacked iface's key (udp keys are per iface, in the address) */
static fz_keys_t keys;
static uint64_t region[1024];
static volatile int got_am;

static void am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    const volatile uint8_t *p = data;
    if (len > 0)
        (void)(p[0] + p[len - 1]); /* ASan checks the bounds handed to the handler */
    got_am = 1;
}

static void err_cb(void *arg, fy_tl_ep_t *e, ferry_status_t status) {}

static void progress(int n)
{
    for (int i = 0; i < n; i++) {
        tl->ops->iface_progress(ifa);
        tl->ops->iface_progress(ifb);
    }
}

/* (Re)connect b to a and carry one AM across, so the connection is up at both ends. */
static void connect_peer(void)
{
    if (bconn != NULL)
        tl->ops->ep_destroy(&bconn->super);
    fy_tl_ep_t *ep;
    FZ_CHECK(tl->ops->ep_create(ifb, a_dev, a_if, &ep) == FERRY_OK);
    bconn = (fy_udp_conn_t *)ep;
    uint64_t v = 1;
    struct iovec iov = {&v, sizeof(v)};
    got_am = 0;
    ferry_status_t st = FERRY_ERR_NO_RESOURCE;
    for (int i = 0; i < 100000 && st == FERRY_ERR_NO_RESOURCE; i++) {
        st = tl->ops->am_short(ep, 1, &iov, 1);
        progress(1);
    }
    for (int i = 0; i < 100000 && !got_am; i++)
        progress(1);
    FZ_CHECK(got_am);
}

static fy_udp_conn_t *a_conn(void)
{
    fy_udp_conn_t *c = fy_udp_conn_lookup((fy_udp_iface_t *)ifa, bconn->peer_id);
    return c != NULL && fy_udp_conn_alive(c) && fy_udp_conn_alive(bconn) ? c : NULL;
}

/* A data segment's fix-ups (the compact header). */
static void fix_data(unsigned mode, const fy_udp_conn_t *c, uint8_t *d, size_t len)
{
    fy_udp_dhdr_t h;
    memcpy(&h, d, sizeof(h));
    if (mode & 1)
        h.check = c->token;
    if (mode & 2)
        h.dst_id = c->id;
    if (mode & 8)
        h.seq = c->rcv_nxt + (uint32_t)(int32_t)(int8_t)(h.seq & 0xff);
    if (mode & 32) {
        h.flags |= FY_UDP_F_CSUM;
        h.check = 0;
    }
    memcpy(d, &h, sizeof(h));
    if (mode & 32) {
        uint32_t crc = fy_udp_crc32c(fy_udp_check_seed(a_key, c->token), d, len);
        memcpy(d + FY_UDP_D_CHECK, &crc, 4);
    }
}

static void fix_ctrl(unsigned mode, const fy_udp_conn_t *c, uint8_t *d, size_t len)
{
    fy_udp_hdr_t h;
    memcpy(&h, d, sizeof(h));
    if (mode & 1)
        h.job_key = a_key; /* the target iface's, from its address */
    if (mode & 2) {
        h.dst_id = c->id;
        h.src_id = c->peer_id;
    }
    if (mode & 4)
        h.len = (uint32_t)(len - FY_UDP_HDR_LEN);
    if (mode & 8)
        h.seq = c->rcv_nxt + (uint32_t)(int32_t)(int8_t)(h.seq & 0xff);
    if (mode & 32) {
        h.flags |= FY_UDP_F_CSUM;
        h.csum = 0;
    }
    memcpy(d, &h, sizeof(h));
    if (mode & 32) {
        uint32_t crc = fy_udp_crc32c(0, d, len);
        memcpy(d + FY_UDP_CSUM_OFFSET, &crc, 4);
    }
}

static void send_one(unsigned mode, uint8_t *d, size_t len)
{
    fy_udp_conn_t *c = a_conn();
    if (c == NULL) {
        connect_peer();
        c = a_conn();
        FZ_CHECK(c != NULL);
    }
    if (len >= FY_UDP_DHDR_LEN && d[0] >= FY_UDP_T_FIRST_SEQ)
        fix_data(mode, c, d, len);
    else if (len >= FY_UDP_HDR_LEN)
        fix_ctrl(mode, c, d, len);
    fy_udp_iface_t *ia = (fy_udp_iface_t *)ifa;
    uint64_t before = ia->rx_dgrams;
    if (sendto(sock, d, len, 0, (struct sockaddr *)&to[(mode & 16) ? 0 : 1], sizeof(to[0])) < 0)
        return;
    for (int i = 0; i < 1000 && ia->rx_dgrams == before; i++)
        progress(1);
    progress(2);
}

/* A seed datagram: the control header, or for a sequenced type the data header (its
 * type header and data in body). */
static void seed_dgram(uint8_t *s, size_t *o, uint8_t type, const void *body, size_t blen)
{
    uint8_t hb[FY_UDP_HDR_LEN];
    size_t hl;
    if (type >= FY_UDP_T_FIRST_SEQ) {
        fy_udp_dhdr_t h;
        memset(&h, 0, sizeof(h));
        h.type = type;
        h.aux = 7; /* an AM_CHUNK's fragment id */
        hl = sizeof(h);
        memcpy(hb, &h, hl);
    } else {
        fy_udp_hdr_t h;
        memset(&h, 0, sizeof(h));
        h.type = type;
        h.version = FY_UDP_VERSION;
        hl = sizeof(h);
        memcpy(hb, &h, hl);
    }
    uint16_t n = (uint16_t)(hl + blen);
    memcpy(s + *o, &n, 2), *o += 2;
    memcpy(s + *o, hb, hl), *o += hl;
    if (blen != 0)
        memcpy(s + *o, body, blen), *o += blen;
}

static void seeds(void)
{
    uint8_t s[4096], body[1200];
    size_t o;
    uint8_t mode = 1 | 2 | 4 | 8; /* key, ids, length and sequence made right */
    memset(body, 0x61, sizeof(body));
    o = 0;
    s[o++] = mode;
    body[0] = 1; /* the AM id */
    seed_dgram(s, &o, FY_UDP_T_AM, body, 32);
    fz_seed("am", NULL, 0, s, o);

    o = 0; /* a large AM in two chunks: the first (offset 0, size, AM id), then the second */
    s[o++] = mode;
    fy_udp_amfirst_t af = {.offset = 0, .total = 1000, .am_id = 1};
    memcpy(body, &af, sizeof(af));
    seed_dgram(s, &o, FY_UDP_T_AM_CHUNK, body, sizeof(af) + 500);
    uint32_t off2 = 500;
    memcpy(body, &off2, sizeof(off2));
    seed_dgram(s, &o, FY_UDP_T_AM_CHUNK, body, sizeof(off2) + 500);
    fz_seed("am_chunk0", NULL, 0, s, o);

    o = 0; /* a put into the region */
    s[o++] = mode;
    fy_udp_chunk_t ck = {9, 0, {0}, 0, 64};
    fy_udp_rma_t r = {FZ_PH_REGION_ID, FZ_PH_KEY, FZ_PH_BASE};
    memcpy(body, &ck, sizeof(ck));
    memcpy(body + sizeof(ck), &r, sizeof(r));
    memset(body + sizeof(ck) + sizeof(r), 0x62, 64);
    seed_dgram(s, &o, FY_UDP_T_PUT, body, sizeof(ck) + sizeof(r) + 64);
    fz_seed("put", NULL, 0, s, o);

    o = 0; /* a get request: region id, key, address, length */
    s[o++] = mode;
    uint64_t g[5] = {11, FZ_PH_REGION_ID, FZ_PH_KEY, FZ_PH_BASE, 128};
    seed_dgram(s, &o, FY_UDP_T_GET_REQ, g, sizeof(fy_udp_get_req_t));
    fz_seed("get_req", NULL, 0, s, o);

    o = 0; /* an explicit ACK, then a connection request (priority channel) */
    s[o++] = mode | 16;
    seed_dgram(s, &o, FY_UDP_T_ACK, NULL, 0);
    seed_dgram(s, &o, FY_UDP_T_CONN_REQ, body, sizeof(fy_udp_conn_msg_t));
    fz_seed("ack_connreq", NULL, 0, s, o);

    o = 0; /* the connection-management types: cookie, heartbeat answer, reset */
    s[o++] = mode | 16;
    seed_dgram(s, &o, FY_UDP_T_COOKIE, body, sizeof(fy_udp_cookie_t));
    seed_dgram(s, &o, FY_UDP_T_HB_ACK, body, sizeof(fy_udp_hb_t));
    seed_dgram(s, &o, FY_UDP_T_HB, body, sizeof(fy_udp_hb_t));
    seed_dgram(s, &o, FY_UDP_T_CONN_REQ, body, sizeof(fy_udp_conn_msg_t));
    fz_seed("cookie_hb", NULL, 0, s, o);

    o = 0; /* a reset of our live connection (it dies; the peer connects again) */
    s[o++] = mode | 16;
    seed_dgram(s, &o, FY_UDP_T_RESET, NULL, 0);
    fz_seed("reset", NULL, 0, s, o);

    o = 0; /* a reset answering a data segment: our conn by the id its peer sent to (src_id),
            * the peer by its uuid (payload) */
    s[o++] = 1 | 4 | 16;
    uint64_t buuid = ((fy_udp_iface_t *)ifb)->uuid;
    fy_udp_hdr_t rh;
    memset(&rh, 0, sizeof(rh));
    rh.type = FY_UDP_T_RESET;
    rh.version = FY_UDP_VERSION;
    rh.src_id = bconn->id;
    uint16_t rn = (uint16_t)(sizeof(rh) + sizeof(buuid));
    memcpy(s + o, &rn, 2), o += 2;
    memcpy(s + o, &rh, sizeof(rh)), o += sizeof(rh);
    memcpy(s + o, &buuid, sizeof(buuid)), o += sizeof(buuid);
    fz_seed("reset_data", NULL, 0, s, o);

    o = 0; /* an AM with a checksum */
    s[o++] = mode | 32;
    body[0] = 1;
    seed_dgram(s, &o, FY_UDP_T_AM, body, 100);
    fz_seed("am_csum", NULL, 0, s, o);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_AF", "inet", 1);
    tl = fy_tl_find("udp");
    FZ_CHECK(tl != NULL && tl->ops->md_open(tl, &md) == FERRY_OK);
    fy_tl_iface_params_t p = {
        .device = "lo", .am_cb = am_cb, .err_cb = err_cb, .job_key = JOB_KEY, .worker_uuid = 1};
    FZ_CHECK(tl->ops->iface_open(md, &p, &ifa) == FERRY_OK);
    p.worker_uuid = 2;
    FZ_CHECK(tl->ops->iface_open(md, &p, &ifb) == FERRY_OK);
    fy_tl_iface_attr_t attr;
    tl->ops->iface_query(ifa, &attr);
    FZ_CHECK(attr.device_addr_len == sizeof(fy_udp_dev_addr_t) &&
             attr.iface_addr_len == sizeof(fy_udp_iface_addr_t));
    FZ_CHECK(tl->ops->iface_get_address(ifa, a_dev, a_if) == FERRY_OK);
    fy_udp_dev_addr_t da;
    fy_udp_iface_addr_t ia;
    memcpy(&da, a_dev, sizeof(da));
    memcpy(&ia, a_if, sizeof(ia));
    a_key = ia.key;
    for (int c = 0; c < 2; c++) {
        to[c].sin_family = AF_INET;
        memcpy(&to[c].sin_addr, da.ip.addr, 4);
        to[c].sin_port = htons(c ? ia.data_port : ia.prio_port);
    }
    sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    FZ_CHECK(sock >= 0);
    uint8_t memh[64];
    FZ_CHECK(tl->memh_size <= sizeof(memh));
    FZ_CHECK(
        tl->ops->mem_reg(md, region, sizeof(region),
                         FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC,
                         memh) == FERRY_OK);
    uint64_t k[2];
    memcpy(k, memh, sizeof(k)); /* fy_swmd_key_t: region id, key */
    keys = (fz_keys_t){k[0], k[1], (uint64_t)(uintptr_t)region};
    connect_peer();
    seeds();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    data++, size--;
    uint8_t *d = malloc(65536);
    if (d == NULL)
        return 0;
    while (size >= 2) {
        size_t n = (size_t)data[0] | (size_t)data[1] << 8;
        data += 2, size -= 2;
        n = n < size ? n : size;
        memcpy(d, data, n);
        data += n, size -= n;
        fz_keys_apply(&keys, d, n);
        send_one(mode, d, n);
    }
    free(d);
    return 0;
}
