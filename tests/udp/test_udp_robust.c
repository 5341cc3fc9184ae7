/*
 * test_udp_robust.c - what the udp transport must survive:
 *
 *   flood        a third process throws random datagrams at both of the receiver's ports
 *                (random bytes, wrong job keys, truncated and oversized headers, lengths that
 *                do not add up, unknown types and endpoint ids; data segments with the likely
 *                endpoint id and a random token, or cut short of the headers their flags and
 *                type announce) while a checked stream runs:
 *                the stream arrives intact and the drops are counted by reason;
 *   peer_death   the peer is killed mid-conversation: err_cb fires with
 *                FERRY_ERR_ENDPOINT_TIMEOUT within the configured (short) timeout, the
 *                pending operations complete with that error, later sends are refused.
 * Closing one end of the connection a pair of eps shares (two ifaces in this process):
 *   close_keeps      b closes its ep (by force, its AMs still unACKed) while a's flush waits
 *                    for b's ACKs: a's flush completes OK, no err_cb, b's AMs all arrive (the
 *                    connection stays, passive, at b)
 *   readopt_alive    b takes the kept connection up again: it asks a, a's end answers, the
 *                    stream goes on under the same ids
 *   readopt_failed   a's end failed (its owner has not closed it): b's new ep is answered
 *                    with a RESET and connects afresh under a new id; its AM arrives
 *   readopt_gone     a's end is gone (closed): b's new ep gets a COOKIE, a new end is made,
 *                    the stream starts again from 0; its AM arrives
 * What every transport owes (sizes, order, refusals, flush, close, a peer dead before it
 * answered) is checked by tests/conformance over udp too.
 */
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include "fytest.h"
#include "tl/udp/udp.h"
#include "udp_test.h"

typedef struct state {
    ut_rx_t rx;
    volatile int got;
} state_t;

static void am_cb(void *arg, uint8_t id, const void *data, size_t len)
{
    state_t *s = arg;
    if (id == 1)
        ut_rx_check(&s->rx, data, len);
    else
        s->got++;
}

typedef struct comp {
    fy_tl_comp_t comp;
    volatile int done;
    ferry_status_t st;
} comp_t;

static void comp_cb(fy_tl_comp_t *c, ferry_status_t st)
{
    ((comp_t *)c)->st = st;
    ((comp_t *)c)->done = 1;
}

static pid_t spawn_peer(int (*fn)(int rfd, int wfd, void *arg), void *arg, int *rfd, int *wfd)
{
    fyproc_t p;
    pid_t pid = ut_spawn(&p, fn, arg);
    FY_ASSERT(pid > 0);
    *rfd = p.rfd;
    *wfd = p.wfd;
    return pid;
}

/* ---- flood ----------------------------------------------------------------------------- */

#define NMSG 3000

static int stream_sender(int rfd, int wfd, void *arg)
{
    state_t s;
    ut_node_t n;
    ut_addr_t mine, theirs;
    static uint8_t buf[UT_META + 200000];
    memset(&s, 0, sizeof(s));
    if (ut_open(&n, "lo", am_cb, &s) != 0)
        return 10;
    ut_get_addr(&n, &mine);
    if (ut_write_all(wfd, &mine, sizeof(mine)) || ut_read_all(rfd, &theirs, sizeof(theirs)) ||
        ut_connect(&n, &theirs) != FERRY_OK)
        return 11;
    for (uint32_t i = 0; i < NMSG; i++) {
        size_t size = (i % 50 == 49) ? 150000 : (i * 37) % 3000;
        uint32_t meta[3] = {i, (uint32_t)size, 0};
        ut_pattern(buf + UT_META, size, i);
        meta[2] = fy_udp_crc32c(0, buf + UT_META, size);
        memcpy(buf, meta, UT_META);
        struct iovec iov = {buf, UT_META + size};
        ferry_status_t st;
        if (UT_META + size <= n.attr.max_bcopy) {
            while ((st = n.ops->am_bcopy(n.ep, 1, &iov, 1)) == FERRY_ERR_NO_RESOURCE)
                ut_progress(&n, 1);
            if (st != FERRY_OK)
                return 12;
        } else {
            comp_t c = {{.cb = comp_cb}, 0, FERRY_OK};
            struct iovec d = {buf + UT_META, size};
            st = n.ops->am_zcopy(n.ep, 1, buf, UT_META, &d, 1, &c.comp);
            if (st != FERRY_INPROGRESS || !ut_wait_flag(&n, &c.done, 30000) || c.st != FERRY_OK)
                return 13;
        }
        ut_progress(&n, 1);
    }
    while (!s.got)
        ut_progress(&n, 10);
    ut_close(&n);
    return 0;
}

/* Throws junk at the two ports of the address it reads from its pipe, until the pipe closes. */
static int flooder(int rfd, int wfd, void *arg)
{
    ut_addr_t addr;
    const ut_addr_t *target = &addr;
    (void)arg;
    if (ut_read_all(rfd, &addr, sizeof(addr)) != 0)
        return 10;
    fy_udp_dev_addr_t d;
    fy_udp_iface_addr_t a;
    struct sockaddr_in to[2];
    uint64_t rng = 12345;
    static uint8_t pkt[70000];
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    memcpy(&d, target->bytes, sizeof(d));
    memcpy(&a, target->bytes + target->dlen, sizeof(a));
    for (int c = 0; c < 2; c++) {
        memset(&to[c], 0, sizeof(to[c]));
        to[c].sin_family = AF_INET;
        memcpy(&to[c].sin_addr, d.ip.addr, 4);
        to[c].sin_port = htons(c ? a.data_port : a.prio_port);
    }
    for (unsigned round = 0;; round++) {
        struct pollfd pfd = {rfd, POLLIN, 0};
        if (poll(&pfd, 1, 0) > 0)
            break;
        for (int k = 0; k < 32; k++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            size_t len = rng % 1500;
            fy_udp_hdr_t h;
            for (size_t i = 0; i < sizeof(pkt) / 8 && i * 8 < len + 64; i++)
                memcpy(pkt + i * 8, &(uint64_t){rng * (i + 1)}, 8);
            memset(&h, 0, sizeof(h));
            h.job_key = a.key; /* the target's, from its address */
            h.version = FY_UDP_VERSION;
            h.type = (uint8_t)(FY_UDP_T_CONN_REQ + rng % (FY_UDP_T_FIRST_SEQ - 1));
            h.dst_id = (uint32_t)(rng >> 32);
            h.src_id = (uint32_t)rng;
            h.seq = (uint32_t)(rng >> 16);
            fy_udp_dhdr_t dh = {.type = (uint8_t)(FY_UDP_T_AM + rng % 6),
                                .flags = (uint8_t)(rng >> 24),
                                .aux = (uint16_t)(rng >> 40),
                                .dst_id = (k & 16) ? 0x00010001u : (uint32_t)(rng >> 32),
                                .check = (uint32_t)(rng >> 8),
                                .seq = (uint32_t)(rng >> 16)};
            switch (k % 10) {
            case 0: /* random bytes */
                break;
            case 1: /* wrong key */
                h.job_key ^= 1;
                h.len = (uint32_t)len;
                memcpy(pkt, &h, sizeof(h));
                len += sizeof(h);
                break;
            case 2: /* truncated header */
                memcpy(pkt, &h, sizeof(h));
                len = rng % sizeof(h);
                break;
            case 3: /* length does not add up */
                h.len = (uint32_t)(len + 1 + rng % 100);
                memcpy(pkt, &h, sizeof(h));
                len += sizeof(h);
                break;
            case 4: /* unknown type */
                h.type = (uint8_t)(FY_UDP_T_MAX + rng % 200);
                h.len = (uint32_t)len;
                memcpy(pkt, &h, sizeof(h));
                len += sizeof(h);
                break;
            case 5: /* plausible but unknown endpoint, or the likely one with a bad source */
                h.dst_id = (k & 16) ? 0x00010001u : h.dst_id;
                h.len = (uint32_t)len;
                memcpy(pkt, &h, sizeof(h));
                len += sizeof(h);
                break;
            case 6: /* oversized: larger than the priority channel accepts */
                len = 2000 + rng % 60000;
                h.len = (uint32_t)(len - sizeof(h));
                memcpy(pkt, &h, sizeof(h));
                break;
            case 7: /* handshake types with junk */
                h.type = (uint8_t)(FY_UDP_T_CONN_REQ + rng % 4);
                h.len = (uint32_t)len;
                memcpy(pkt, &h, sizeof(h));
                len += sizeof(h);
                break;
            case 8: /* a data segment: the likely endpoint, a random token (or checksum) */
                memcpy(pkt, &dh, sizeof(dh));
                len += sizeof(dh);
                break;
            case 9: /* a data segment cut short of its ACK block or its type header */
                dh.flags |= FY_UDP_F_ACK;
                memcpy(pkt, &dh, sizeof(dh));
                len = sizeof(dh) + rng % (FY_UDP_DACK_LEN + FY_UDP_AMFIRST_LEN);
                break;
            }
            sendto(fd, pkt, len, 0, (struct sockaddr *)&to[(rng >> 8) & 1], sizeof(to[0]));
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL); /* pace the flood: two cores are shared by three processes */
    }
    close(fd);
    return 0;
}

static void flood(void)
{
    state_t s;
    ut_node_t n;
    ut_addr_t mine, theirs;
    int srfd, swfd, frfd, fwfd, st;

    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    memset(&s, 0, sizeof(s));
    s.rx.count = NMSG;
    /* Both peers are forked before this process opens its iface: once it has, it has the udp
     * liveness thread, and a child forked from a process with threads may inherit a lock
     * (the sanitizers' allocator's) held by a thread it does not have. */
    pid_t fpid = spawn_peer(flooder, NULL, &frfd, &fwfd);
    pid_t spid = spawn_peer(stream_sender, NULL, &srfd, &swfd);
    FY_ASSERT_EQ(ut_open(&n, "lo", am_cb, &s), 0);
    ut_get_addr(&n, &mine);
    FY_ASSERT_EQ(ut_write_all(fwfd, &mine, sizeof(mine)), 0);
    FY_ASSERT_EQ(ut_read_all(srfd, &theirs, sizeof(theirs)), 0);
    FY_ASSERT_EQ(ut_write_all(swfd, &mine, sizeof(mine)), 0);
    FY_ASSERT_OK(ut_connect(&n, &theirs));
    ut_wait_flag(&n, &s.rx.done, 100000);
    FY_ASSERT_MSG(!s.rx.bad, "receiver: %s", s.rx.why);
    FY_ASSERT_MSG(s.rx.done, "got %u of %u messages", s.rx.expect, s.rx.count);
    close(fwfd);
    struct iovec iov = {"x", 1};
    FY_ASSERT_OK(n.ops->am_short(n.ep, 2, &iov, 1));
    int exited = 0;
    uint64_t end = fy_time_ns() + 20 * FY_NSEC_PER_SEC;
    while (!exited && fy_time_ns() < end) {
        ut_progress(&n, 1);
        exited = waitpid(spid, &st, WNOHANG) == spid;
    }
    FY_ASSERT(exited && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    FY_ASSERT_EQ(waitpid(fpid, &st, 0), fpid);
    ferry_ep_stats_t es;
    FY_ASSERT_OK(n.ops->ep_get_stats(n.ep, &es));
    printf("  dropped: bad key %llu, malformed %llu, unknown ep %llu\n",
           (unsigned long long)es.drops_bad_key, (unsigned long long)es.drops_malformed,
           (unsigned long long)es.drops_unknown_ep);
    FY_ASSERT_GT(es.drops_bad_key, 0);
    FY_ASSERT_GT(es.drops_malformed, 0);
    FY_ASSERT_GT(es.drops_unknown_ep, 0);
    ut_close(&n);
}

/* ---- peer death ----------------------------------------------------------------------- */

static int doomed_peer(int rfd, int wfd, void *arg)
{
    state_t s;
    ut_node_t n;
    ut_addr_t mine, theirs;
    memset(&s, 0, sizeof(s));
    if (ut_open(&n, "lo", am_cb, &s) != 0)
        return 10;
    ut_get_addr(&n, &mine);
    if (ut_write_all(wfd, &mine, sizeof(mine)) || ut_read_all(rfd, &theirs, sizeof(theirs)) ||
        ut_connect(&n, &theirs) != FERRY_OK)
        return 11;
    ut_wait_flag(&n, &s.got, 30000);
    struct iovec iov = {"ready", 5};
    n.ops->am_short(n.ep, 2, &iov, 1);
    for (;;)
        n.ops->iface_progress(n.iface); /* until killed */
}

static void peer_death(void)
{
    state_t s;
    ut_node_t n;
    ut_addr_t mine, theirs;
    int rfd, wfd, st;
    static uint8_t big[4 << 20];

    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_PEER_TIMEOUT", "300ms", 1);
    memset(&s, 0, sizeof(s));
    FY_ASSERT_EQ(ut_open(&n, "lo", am_cb, &s), 0);
    ut_get_addr(&n, &mine);
    pid_t pid = spawn_peer(doomed_peer, NULL, &rfd, &wfd);
    FY_ASSERT_EQ(ut_read_all(rfd, &theirs, sizeof(theirs)), 0);
    FY_ASSERT_EQ(ut_write_all(wfd, &mine, sizeof(mine)), 0);
    FY_ASSERT_OK(ut_connect(&n, &theirs));
    struct iovec iov = {"hi", 2};
    FY_ASSERT_OK(n.ops->am_short(n.ep, 2, &iov, 1));
    FY_ASSERT(ut_wait_flag(&n, &s.got, 30000));
    kill(pid, SIGKILL);
    FY_ASSERT_EQ(waitpid(pid, &st, 0), pid);

    uint64_t t0 = fy_time_ns();
    comp_t c = {{.cb = comp_cb}, 0, FERRY_OK};
    struct iovec d = {big, sizeof(big)};
    FY_ASSERT_STATUS(n.ops->am_zcopy(n.ep, 2, "h", 1, &d, 1, &c.comp), FERRY_INPROGRESS);
    FY_ASSERT(ut_wait_flag(&n, &n.failed, 10000));
    double secs = (double)(n.fail_ns - t0) / 1e9;
    printf("  peer death detected after %.3f s\n", secs);
    FY_ASSERT_STATUS(n.fail_status, FERRY_ERR_ENDPOINT_TIMEOUT);
    FY_ASSERT_LT(secs * 1000, 2000);
    FY_ASSERT(c.done);
    FY_ASSERT_STATUS(c.st, FERRY_ERR_ENDPOINT_TIMEOUT);
    FY_ASSERT_STATUS(n.ops->am_short(n.ep, 2, &iov, 1), FERRY_ERR_NOT_CONNECTED);
    ut_close(&n);
}

/* ---- closing one end of a shared connection ------------------------------------------- */

static const fy_tl_ops_t *ops;
static fy_tl_md_t *kmd;
static ut_side_t sa, sb;

/* Progress both until *flag reaches want (10 s at most). */
static void both_until(volatile int *flag, int want)
{
    FY_ASSERT_MSG(ut_sides_until(ops, &sa, &sb, flag, want, 10000) == 0,
                  "no progress in 10 s (%d of %d)", *flag, want);
}

static void send_short(ut_side_t *s)
{
    struct iovec iov = {"x", 1};
    FY_ASSERT_OK(ops->am_short(s->ep, 2, &iov, 1));
}

/* a and b, an ep each way on one connection, one AM each way. */
static void keep_open(void)
{
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_UDP_AF", "inet", 1);
    const fy_tl_component_t *tl = fy_tl_find("udp");
    FY_ASSERT(tl != NULL);
    ops = tl->ops;
    FY_ASSERT_OK(ops->md_open(tl, &kmd));
    memset(&sa, 0, sizeof(sa));
    memset(&sb, 0, sizeof(sb));
    FY_ASSERT_OK(ut_side_open(ops, &sa, kmd, 11));
    FY_ASSERT_OK(ut_side_open(ops, &sb, kmd, 12));
    FY_ASSERT_OK(ops->ep_create(sb.iface, sa.dev, sa.ifa, &sb.ep));
    send_short(&sb);
    both_until(&sa.ams, 1);
    FY_ASSERT_OK(ops->ep_create(sa.iface, sb.dev, sb.ifa, &sa.ep)); /* adopts b's */
    FY_ASSERT_EQ(fy_udp_conn(sa.ep)->peer_id, fy_udp_conn(sb.ep)->id);
    send_short(&sa);
    both_until(&sb.ams, 1);
}

static void keep_close(void)
{
    if (sa.ep != NULL)
        ops->ep_destroy(sa.ep);
    if (sb.ep != NULL)
        ops->ep_destroy(sb.ep);
    ops->iface_close(sb.iface);
    ops->iface_close(sa.iface);
    ops->md_close(kmd);
}

/* b closes by force with its AMs unACKed, while a flushes what it sent b. */
static fy_udp_conn_t *b_closes(void)
{
    fy_udp_conn_t *bc = fy_udp_conn(sb.ep);
    for (int i = 0; i < 20; i++) {
        send_short(&sa);
        send_short(&sb);
    }
    comp_t c = {{.cb = comp_cb}, 0, FERRY_OK};
    ferry_status_t st = ops->ep_flush(sa.ep, &c.comp);
    FY_ASSERT_STATUS(st, FERRY_INPROGRESS);
    ops->ep_destroy(sb.ep);
    sb.ep = NULL;
    FY_ASSERT_EQ(bc->state, FY_UDP_CONN_CONNECTED); /* kept, passive */
    FY_ASSERT_EQ(bc->owned, 0);
    FY_ASSERT_EQ(fy_udp_iface(sb.iface)->npassive, 1);
    both_until(&c.done, 1);
    FY_ASSERT_OK(c.st);
    both_until(&sa.ams, 21);
    both_until(&sb.ams, 21);
    FY_ASSERT_EQ(sa.errs, 0);
    FY_ASSERT_EQ(sb.errs, 0);
    return bc;
}

static void close_keeps(void)
{
    keep_open();
    b_closes();
    keep_close();
}

/* b creates an ep to a again: it takes up the kept connection, which must reach a. */
static fy_udp_conn_t *b_readopts(fy_udp_conn_t *kept)
{
    uint32_t old_id = kept->id;
    int before = sa.ams;
    FY_ASSERT_OK(ops->ep_create(sb.iface, sa.dev, sa.ifa, &sb.ep));
    fy_udp_conn_t *bc = fy_udp_conn(sb.ep);
    FY_ASSERT(bc == kept);
    FY_ASSERT_EQ(bc->state, FY_UDP_CONN_CONNECTING); /* asking a first */
    send_short(&sb);
    both_until(&sa.ams, before + 1);
    FY_ASSERT_EQ(bc->state, FY_UDP_CONN_CONNECTED);
    FY_ASSERT_EQ(sb.errs, 0);
    printf("  connection %08x -> %08x, peer end %08x\n", old_id, bc->id, bc->peer_id);
    return bc;
}

static void readopt_alive(void)
{
    keep_open();
    uint32_t peer = fy_udp_conn(sb.ep)->peer_id;
    fy_udp_conn_t *bc = b_readopts(b_closes());
    FY_ASSERT_EQ(bc->peer_id, peer); /* a's end lived: the same stream */
    FY_ASSERT_EQ(fy_udp_conn(sa.ep)->peer_id, bc->id);
    keep_close();
}

static void readopt_failed(void)
{
    keep_open();
    fy_udp_conn_t *kept = b_closes();
    uint32_t old_id = kept->id;
    fy_udp_conn_fail(fy_udp_conn(sa.ep), FERRY_ERR_CANCELED, 0); /* a's end: failed, still owned */
    fy_udp_conn_t *bc = b_readopts(kept);
    FY_ASSERT(bc->id != old_id); /* refused: connected afresh */
    FY_ASSERT(fy_udp_iface(sb.iface)->resets_rx >= 1);
    keep_close();
}

static void readopt_gone(void)
{
    keep_open();
    fy_udp_conn_t *kept = b_closes();
    uint32_t old_peer = kept->peer_id;
    fy_udp_conn_fail(fy_udp_conn(sa.ep), FERRY_ERR_CANCELED, 0);
    ops->ep_destroy(sa.ep); /* a's end gone */
    sa.ep = NULL;
    fy_udp_conn_t *bc = b_readopts(kept);
    FY_ASSERT(bc->peer_id != old_peer); /* a new end at a */
    FY_ASSERT(fy_udp_iface(sb.iface)->cookies_sent + fy_udp_iface(sa.iface)->cookies_sent >= 1);
    keep_close();
}

FYTEST_MAIN(FYTEST_CASE(flood), FYTEST_CASE(peer_death), FYTEST_CASE(close_keeps),
            FYTEST_CASE(readopt_alive), FYTEST_CASE(readopt_failed), FYTEST_CASE(readopt_gone), )
