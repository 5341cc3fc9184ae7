/*
 * test_tcp_keepalive.c - keepalive notices a peer that has silently vanished.  The test runs
 * in a network namespace of its own (nothing outside it is touched): two nodes connect over
 * its loopback, then an nft rule drops every packet, as if the peer's host had lost power.
 * With FERRY_TCP_KEEPIDLE=1s, KEEPINTVL=1s, KEEPCNT=2 the ep must fail with
 * FERRY_ERR_ENDPOINT_TIMEOUT within a few seconds; with data in flight (no keepalive then),
 * FERRY_TCP_USER_TIMEOUT does the same, and the pending flush fails with it.
 *
 * Without the privilege to create a namespace, or without nft, the test is skipped (exit
 * code 77, which CTest reports as skipped).
 */
#include <net/if.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fytest.h"
#include "tcp_testlib.h"
#include "util/status.h"

#define SKIP 77

static void peer(int rfd, int wfd, void *arg)
{
    tt_node_t n;
    tt_open(&n, TT_JOB_KEY, NULL, NULL);
    tt_addr_t a;
    tt_get_addr(&n, &a);
    tt_write(wfd, &a, sizeof(a));
    uint32_t c;
    while (!tt_wait(&n, rfd, 1000)) {
    }
    tt_read(rfd, &c, sizeof(c)); /* then sits still; the test kills it */
    tt_read(rfd, &c, sizeof(c));
}

static int lo_up(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    int ok = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
    ifr.ifr_flags |= IFF_UP;
    ok = ok && ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A namespace of our own, its loopback up: 1, or 0 if not allowed here. */
static int private_net(void)
{
    return unshare(CLONE_NEWNET) == 0 && lo_up();
}

static void drop_everything(void)
{
    FY_ASSERT_MSG(system("nft add table ip fytest && nft add chain ip fytest in "
                         "'{ type filter hook input priority 0; }' && "
                         "nft add rule ip fytest in drop") == 0,
                  "nft failed");
}

/* Connect to a forked peer and make one round trip. */
static fy_tl_ep_t *connect_peer(tt_node_t *n, tt_proc_t *p)
{
    FY_ASSERT(private_net());
    setenv("FERRY_TCP_KEEPIDLE", "1s", 1);
    setenv("FERRY_TCP_KEEPINTVL", "1s", 1);
    setenv("FERRY_TCP_KEEPCNT", "2", 1);
    tt_fork(p, peer, NULL);
    tt_open(n, TT_JOB_KEY, NULL, NULL);
    tt_addr_t a;
    tt_read(p->rfd, &a, sizeof(a));
    fy_tl_ep_t *ep = tt_ep(n, &a);
    uint64_t t = 1;
    struct iovec v = {&t, sizeof(t)};
    FY_ASSERT_OK(n->ops->am_short(ep, 1, &v, 1));
    tt_comp_t c;
    tt_comp_init(&c);
    FY_ASSERT_STATUS(n->ops->ep_flush(ep, &c.super), FERRY_INPROGRESS);
    tt_comp_wait(n, &c); /* a round trip: the connection is up */
    FY_ASSERT_OK(c.status);
    return ep;
}

static void expect_timeout(tt_node_t *n, fy_tl_ep_t *ep)
{
    FY_ASSERT_EQ(n->nerr, 1);
    FY_ASSERT(n->err_ep[0] == ep);
    FY_ASSERT_STATUS(n->err_st[0], FERRY_ERR_ENDPOINT_TIMEOUT);
    uint64_t t = 2;
    struct iovec v = {&t, sizeof(t)};
    FY_ASSERT_STATUS(n->ops->am_short(ep, 1, &v, 1), FERRY_ERR_NOT_CONNECTED);
}

/* Idle connection, peer gone: keepalive probes go unanswered. */
static void idle_dead_peer(void)
{
    tt_proc_t p;
    tt_node_t n;
    fy_tl_ep_t *ep = connect_peer(&n, &p);
    drop_everything();
    while (n.nerr == 0)
        tt_wait(&n, -1, 1000);
    expect_timeout(&n, ep);
    kill(p.pid, SIGKILL);
    n.ops->ep_destroy(ep);
    tt_close(&n);
}

/* Data waiting for acknowledgement (no keepalive then): TCP_USER_TIMEOUT bounds it. */
static void busy_dead_peer(void)
{
    setenv("FERRY_TCP_USER_TIMEOUT", "2s", 1);
    tt_proc_t p;
    tt_node_t n;
    fy_tl_ep_t *ep = connect_peer(&n, &p);
    drop_everything();
    uint64_t t = 3;
    struct iovec v = {&t, sizeof(t)};
    FY_ASSERT_OK(n.ops->am_short(ep, 1, &v, 1));
    tt_comp_t c;
    tt_comp_init(&c);
    FY_ASSERT_STATUS(n.ops->ep_flush(ep, &c.super), FERRY_INPROGRESS); /* never answered */
    while (n.nerr == 0 || !c.done)
        tt_wait(&n, -1, 1000);
    FY_ASSERT_STATUS(c.status, FERRY_ERR_ENDPOINT_TIMEOUT);
    expect_timeout(&n, ep);
    kill(p.pid, SIGKILL);
    n.ops->ep_destroy(ep);
    tt_close(&n);
}

/* Can this host run the cases?  (in a child: the namespace must not stick to us) */
static void probe_support(int rfd, int wfd, void *arg)
{
    (void)rfd, (void)wfd, (void)arg;
    exit(private_net() && system("nft list tables >/dev/null 2>&1") == 0 ? 0 : 1);
}

static int supported(void)
{
    tt_proc_t p;
    FY_ASSERT(fyproc_fork(&p, probe_support, NULL, 60) == 0);
    int st = fyproc_wait(&p, 60000);
    fyproc_release(&p);
    return st == 0;
}

int main(int argc, char **argv)
{
    if (!supported()) {
        printf("skipped: no private network namespace or no nft here\n");
        return SKIP;
    }
    static const fytest_case_t cases[] = {FYTEST_CASE(idle_dead_peer), FYTEST_CASE(busy_dead_peer)};
    return fytest_main(argc, argv, cases, FY_ARRAY_SIZE(cases), 0);
}
