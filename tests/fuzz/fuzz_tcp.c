/*
 * fuzz_tcp.c - libFuzzer target for what a tcp peer sends (src/tl/tcp): the handshake
 * (tcp_conn.c) and the frames after it (tcp_rx.c): AM, PUT, GET_REQ, GET_RESP, ACK, FLUSH,
 * CHUNK, CLOSE, with their extensions, lengths and flags, cut anywhere.  A real iface listens
 * on loopback; for each input a raw client connects, sends a valid HELLO (or, with bit 0 of
 * the first byte, the input alone, so the handshake parser is fuzzed too), waits for ACCEPT,
 * sends the input, ends its stream, and the iface progresses until it has dropped the
 * client.  With bit 1, the client is a peer of two links and the input is split between
 * them (the second byte says where), so striped frames and their CHUNKs meet.  The iface has a
 * registered region; the placeholders of fuzz_keys.h in the input become its id, key and address.
 * FERRY_TCP_MAX_MSG is 1 MiB, so a length claiming a gigabyte is refused without allocating it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "fuzz_keys.h"
#include "tl/tcp/tcp.h"
#include "tl/tl.h"

#define JOB_KEY 0x5eedf00dull

static const fy_tl_component_t *tl;
static fy_tl_md_t *md;
static fy_tl_iface_t *iface;
static fy_tcp_dev_addr_t dev_addr;
static fy_tcp_iface_addr_t if_addr;
static fz_keys_t keys;
static uint64_t region[1024];
static uint64_t conn_seq;

static void am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    const volatile uint8_t *p = data;
    if (len > 0)
        (void)(p[0] + p[len - 1]); /* ASan checks the bounds handed to the handler */
}

static void err_cb(void *arg, fy_tl_ep_t *e, ferry_status_t status) {}

static int raw_connect(void)
{
    fy_netif_addr_t a = dev_addr.addr;
    a.port_be = if_addr.port_be;
    struct sockaddr_storage ss;
    socklen_t sl = fy_netif_addr_to_sockaddr(&a, &ss);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct linger lg = {1, 0}; /* close with a reset: no TIME_WAIT for a million clients */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    if (connect(fd, (struct sockaddr *)&ss, sl) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void make_hello(fy_tcp_hello_t *h, uint8_t nlinks)
{
    memset(h, 0, sizeof(*h));
    h->magic = FY_TCP_MAGIC;
    h->version = FY_TCP_VERSION;
    h->kind = FY_TCP_HELLO;
    h->nlinks = nlinks;
    h->job_key = JOB_KEY;
    h->src_iface = 0x1000000 + ++conn_seq; /* a new peer each time */
    h->dst_iface = if_addr.iface_id;
    h->conn_id = conn_seq;
    h->worker_uuid = 0xabcdef;
    h->src_addr.family = 4;
}

/* Progress the iface, and read what it sends us, until want(fd state) or a bound.
 * Returns the bytes read into buf (up to cap), or -1 if the iface closed the connection. */
static long pump(int fd, uint8_t *buf, size_t cap, size_t need, int rounds)
{
    size_t got = 0;
    uint8_t sink[4096];
    for (int i = 0; i < rounds; i++) {
        tl->ops->iface_progress(iface);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 0) <= 0)
            continue;
        uint8_t *dst = got < cap ? buf + got : sink;
        size_t room = got < cap ? cap - got : sizeof(sink);
        ssize_t n = recv(fd, dst, room, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return -1;
        if (n > 0 && got < cap)
            got += (size_t)n;
        if (need != 0 && got >= need)
            return (long)got;
    }
    return (long)got;
}

static void write_seed(const char *name, uint8_t mode, const void *frames, size_t len)
{
    fz_seed(name, &mode, 1, frames, len);
}

static void seeds(void)
{
    uint8_t s[512];
    size_t o = 0;
    fy_tcp_hdr_t h = {FY_TCP_AM, 3, 0, 0, 16};
    memcpy(s + o, &h, sizeof(h)), o += sizeof(h);
    memset(s + o, 0x41, 16), o += 16;
    write_seed("am", 0, s, o);

    o = 0; /* a PUT of 32 bytes into the region, then a FLUSH */
    h = (fy_tcp_hdr_t){FY_TCP_PUT, 0, 0, 0, 32};
    fy_tcp_rma_ext_t r = {1, FZ_PH_BASE, FZ_PH_REGION_ID, FZ_PH_KEY};
    memcpy(s + o, &h, sizeof(h)), o += sizeof(h);
    memcpy(s + o, &r, sizeof(r)), o += sizeof(r);
    memset(s + o, 0x42, 32), o += 32;
    h = (fy_tcp_hdr_t){FY_TCP_FLUSH, 0, 0, 0, 0};
    fy_tcp_ack_ext_t a = {2, 0, 0};
    memcpy(s + o, &h, sizeof(h)), o += sizeof(h);
    memcpy(s + o, &a, sizeof(a)), o += sizeof(a);
    write_seed("put_flush", 0, s, o);

    o = 0; /* a GET of 64 bytes */
    h = (fy_tcp_hdr_t){FY_TCP_GET_REQ, 0, 0, 0, 64};
    r.op_id = 1;
    memcpy(s + o, &h, sizeof(h)), o += sizeof(h);
    memcpy(s + o, &r, sizeof(r)), o += sizeof(r);
    write_seed("get", 0, s, o);

    o = 0; /* a striped AM: header and first part on link 0 */
    h = (fy_tcp_hdr_t){FY_TCP_AM, 3, FY_TCP_F_STRIPED, 0, 64};
    fy_tcp_stripe_ext_t st = {0, 16};
    memcpy(s + o, &h, sizeof(h)), o += sizeof(h);
    memcpy(s + o, &st, sizeof(st)), o += sizeof(st);
    memset(s + o, 0x43, 16), o += 16;
    /* ... and its second part as a CHUNK on link 1 */
    uint8_t s2[600];
    s2[0] = (uint8_t)o; /* link 0 gets the first o bytes */
    memcpy(s2 + 1, s, o);
    size_t o2 = 1 + o;
    h = (fy_tcp_hdr_t){FY_TCP_CHUNK, 0, 0, 0, 48};
    fy_tcp_chunk_ext_t ck = {0, 0, 16};
    memcpy(s2 + o2, &h, sizeof(h)), o2 += sizeof(h);
    memcpy(s2 + o2, &ck, sizeof(ck)), o2 += sizeof(ck);
    memset(s2 + o2, 0x44, 48), o2 += 48;
    write_seed("striped", 2, s2, o2);

    o = 0; /* the handshake itself, fuzzed (mode bit 0) */
    fy_tcp_hello_t hello;
    make_hello(&hello, 1);
    memcpy(s + o, &hello, sizeof(hello)), o += sizeof(hello);
    h = (fy_tcp_hdr_t){FY_TCP_CLOSE, 0, 0, 0, 0};
    memcpy(s + o, &h, sizeof(h)), o += sizeof(h);
    write_seed("hello_close", 1, s, o);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    setenv("FERRY_TCP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_TCP_AF", "ipv4", 1);
    setenv("FERRY_TCP_MAX_MSG", "1m", 1);
    tl = fy_tl_find("tcp");
    FZ_CHECK(tl != NULL && tl->ops->md_open(tl, &md) == FERRY_OK);
    fy_tl_device_t dev;
    unsigned count = 0;
    FZ_CHECK(tl->ops->query_devices(md, &dev, 1, &count) == FERRY_OK && count == 1);
    fy_tl_iface_params_t p = {
        .device = dev.name, .am_cb = am_cb, .err_cb = err_cb, .job_key = JOB_KEY, .worker_uuid = 1};
    FZ_CHECK(tl->ops->iface_open(md, &p, &iface) == FERRY_OK);
    fy_tl_iface_attr_t attr;
    tl->ops->iface_query(iface, &attr);
    FZ_CHECK(attr.device_addr_len == sizeof(dev_addr) && attr.iface_addr_len == sizeof(if_addr));
    FZ_CHECK(tl->ops->iface_get_address(iface, &dev_addr, &if_addr) == FERRY_OK);
    fy_swmd_key_t memh;
    FZ_CHECK(tl->memh_size <= sizeof(memh));
    FZ_CHECK(
        tl->ops->mem_reg(md, region, sizeof(region),
                         FERRY_MEM_REMOTE_READ | FERRY_MEM_REMOTE_WRITE | FERRY_MEM_REMOTE_ATOMIC,
                         &memh) == FERRY_OK);
    keys = (fz_keys_t){memh.id, memh.key, (uint64_t)(uintptr_t)region};
    seeds();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    uint8_t *in = malloc(size);
    if (in == NULL)
        return 0;
    memcpy(in, data + 1, size - 1);
    size--;
    fz_keys_apply(&keys, in, size);

    /* mode bit 1: a peer of two links; the byte after the mode says how much of the rest
     * goes to link 0, the remainder goes to link 1 (where CHUNKs travel) */
    int nlinks = (mode & 2) ? 2 : 1;
    size_t split = size;
    const uint8_t *p = in;
    if (nlinks == 2 && size > 0) {
        split = in[0] < size - 1 ? in[0] : size - 1;
        p++, size--;
    }
    int fd[2] = {-1, -1};
    int ok = 1;
    fy_tcp_hello_t h;
    make_hello(&h, (uint8_t)nlinks);
    for (int l = 0; l < nlinks && ok; l++) {
        fd[l] = raw_connect();
        ok = fd[l] >= 0;
        if (ok && !(mode & 1)) {
            fy_tcp_hello_t r;
            h.link = (uint8_t)l;
            ok = send(fd[l], &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h) &&
                 pump(fd[l], (uint8_t *)&r, sizeof(r), sizeof(r), 2000) == (long)sizeof(r) &&
                 r.kind == FY_TCP_ACCEPT;
        }
    }
    for (int l = 0; l < nlinks && ok; l++) {
        const uint8_t *q = l == 0 ? p : p + split;
        size_t n = l == 0 ? split : size - split, off = 0;
        while (off < n) {
            ssize_t w = send(fd[l], q + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                off += (size_t)w;
            else if (pump(fd[l], NULL, 0, 0, 1) < 0)
                break;
        }
    }
    for (int l = 0; l < nlinks && ok; l++)
        shutdown(fd[l], SHUT_WR);
    if (ok)
        pump(fd[0], NULL, 0, 0, 5000); /* until the iface drops us (or the bound) */
    for (int l = 0; l < nlinks; l++)
        if (fd[l] >= 0)
            close(fd[l]);
    for (int i = 0; i < 8; i++)
        tl->ops->iface_progress(iface);
    free(in);
    return 0;
}
