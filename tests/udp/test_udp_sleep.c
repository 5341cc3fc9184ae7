/*
 * test_udp_sleep.c - the udp interface's event fd while a worker polls and when it sleeps.
 * A socket in an epoll set costs every datagram the kernel's wake-up chain, so the sockets
 * are in the event fd's set only from an arm until EV_SOCKS_KEEP_NS (10 ms) of progress
 * without one (udp_iface.c, ev_socks).  Two ifaces in this process on the loopback; the
 * set's members are read from the kernel (/proc/self/fdinfo of the event fd):
 *
 *   poll_leaves_set   a connection used by polling alone: only the timerfd is in the set;
 *                     an arm puts both sockets in; polling 30 ms without an arm takes them
 *                     out again and fires the timerfd (a thread asleep on the fd wakes and
 *                     arms again), and the next arm clears that
 *   woken_by_arrival  after polling without an arm, an arm and a sleep on the fd: a message
 *                     sent to the sleeper wakes it (poll returns well before its 5 s)
 *   pending_at_arm    a message arrives while the sockets are out of the set and nobody
 *                     polls; the arm that follows finds the fd readable at once
 */
#include <poll.h>
#include <stdio.h>
#include <sys/epoll.h>

#include "fytest.h"
#include "tl/udp/udp.h"
#include "udp_test.h"

static const fy_tl_ops_t *ops;
static ut_side_t sa, sb;

static void side_close(ut_side_t *s)
{
    ut_lo_close(ops, s);
}

static void send_short(ut_side_t *s)
{
    struct iovec iov = {"ping", 4};
    FY_ASSERT_OK(ops->am_short(s->ep, 2, &iov, 1));
}

/* Open a and b with one connection, an ep on each side, one short AM each way (polling). */
static void pair_connect(uint64_t uuid_a, uint64_t uuid_b)
{
    FY_ASSERT_EQ(ut_lo_pair(&ops, &sa, &sb, uuid_a, uuid_b), 0);
}

/* The descriptors in s's event fd's epoll set, as the kernel lists them; *socks: how many of
 * them are s's two sockets. */
static int set_members(ut_side_t *s, int *socks)
{
    fy_udp_iface_t *iface = fy_udp_iface(s->iface);
    char path[64], line[256];
    int n = 0, fd;
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", ops->iface_event_fd(s->iface));
    FILE *f = fopen(path, "r");
    FY_ASSERT(f != NULL);
    *socks = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "tfd: %d", &fd) != 1)
            continue;
        n++;
        *socks += fd == iface->ch[FY_UDP_CH_PRIO].fd || fd == iface->ch[FY_UDP_CH_DATA].fd;
    }
    fclose(f);
    return n;
}

static int fd_readable(ut_side_t *s, int ms)
{
    struct pollfd p = {.fd = ops->iface_event_fd(s->iface), .events = POLLIN};
    return poll(&p, 1, ms);
}

/* Which of the set's members are ready: bit c for channel c's socket, bit FY_UDP_NCH for
 * the timerfd (the data each was added with: udp_iface.c). */
static unsigned ready_members(ut_side_t *s)
{
    struct epoll_event ev[4];
    unsigned m = 0;
    int n = epoll_wait(ops->iface_event_fd(s->iface), ev, 4, 0);
    for (int i = 0; i < n; i++)
        m |= 1u << ev[i].data.u32;
    return m;
}

/* Ping-pong by polling alone (no arm) for ms milliseconds. */
static void pingpong_for(int ms)
{
    uint64_t end = fy_time_ns() + (uint64_t)ms * FY_NSEC_PER_MSEC;
    while (fy_time_ns() < end) {
        int a = sa.ams;
        send_short(&sb);
        FY_ASSERT_EQ(ut_sides_until(ops, &sa, &sb, &sa.ams, a + 1, 10000), 0);
        int b = sb.ams;
        send_short(&sa);
        FY_ASSERT_EQ(ut_sides_until(ops, &sa, &sb, &sb.ams, b + 1, 10000), 0);
    }
}

/* Progress both until neither has a segment unACKed nor an ACK owed: an arm then sets no
 * timer that is due soon (a retransmission timer's 200 us passes quickly under the
 * sanitizers), so the fd is readable only for what the case looks at. */
static void quiesce(void)
{
    fy_udp_conn_t *ca = fy_udp_conn(sa.ep), *cb = fy_udp_conn(sb.ep);
    uint64_t t0 = fy_time_ns();
    while (ca->snd_una != ca->snd_nxt || cb->snd_una != cb->snd_nxt || ca->ack_pending ||
           cb->ack_pending) {
        ops->iface_progress(sa.iface);
        ops->iface_progress(sb.iface);
        FY_ASSERT_LT(fy_time_ns() - t0, 10 * FY_NSEC_PER_SEC);
    }
}

/* Arm a (progressing only a while it says work is pending). */
static void arm_a(void)
{
    int tries = 0;
    while (ops->iface_event_arm(sa.iface) == FERRY_ERR_BUSY) {
        ops->iface_progress(sa.iface);
        FY_ASSERT_LT(++tries, 100000);
    }
}

/* Quiet both, then arm a until its fd is not readable after the arm: a datagram may still
 * come after the quiet (a resend the timer sent while its ACK was on the way, and the ACK of
 * that duplicate: seen under the sanitizers), and an arm must clear the timerfd a removal
 * fired - if it did not, the fd would stay readable through every try. */
static void arm_quiet(void)
{
    for (int tries = 0;; tries++) {
        FY_ASSERT_LT(tries, 100);
        quiesce();
        arm_a();
        if (fd_readable(&sa, 0) == 0)
            return;
        ops->iface_progress(sa.iface); /* (take what came) */
        ops->iface_progress(sb.iface);
    }
}

static void poll_leaves_set(void)
{
    int socks;
    pair_connect(11, 12);
    pingpong_for(30);
    FY_ASSERT_EQ(set_members(&sa, &socks), 1); /* the timerfd */
    FY_ASSERT_EQ(socks, 0);
    arm_quiet();
    FY_ASSERT_EQ(set_members(&sa, &socks), 3);
    FY_ASSERT_EQ(socks, 2);
    /* polled, not armed: the sockets leave, and the timerfd fires for a sleeper */
    pingpong_for(30);
    FY_ASSERT_EQ(set_members(&sa, &socks), 1);
    FY_ASSERT_EQ(ready_members(&sa), 1u << FY_UDP_NCH);
    quiesce();
    FY_ASSERT_EQ(fd_readable(&sa, 0), 1); /* (until an arm sets the timer anew) */
    arm_quiet();
    FY_ASSERT_EQ(set_members(&sa, &socks), 3);
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

static void woken_by_arrival(void)
{
    int socks;
    pair_connect(21, 22);
    arm_a(); /* in, then out again after polling */
    pingpong_for(30);
    FY_ASSERT_EQ(set_members(&sa, &socks), 1);
    arm_quiet();
    int a = sa.ams;
    send_short(&sb);
    uint64_t t0 = fy_time_ns();
    FY_ASSERT_EQ(fd_readable(&sa, 5000), 1);
    FY_ASSERT_LT(fy_time_ns() - t0, 4 * FY_NSEC_PER_SEC);
    FY_ASSERT_EQ(ut_sides_until(ops, &sa, &sb, &sa.ams, a + 1, 10000), 0);
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

static void pending_at_arm(void)
{
    int socks;
    pair_connect(31, 32);
    pingpong_for(30);
    FY_ASSERT_EQ(set_members(&sa, &socks), 1);
    /* b's message waits in a's socket, which no set holds */
    int a = sa.ams;
    send_short(&sb);
    FY_ASSERT_OK(ops->iface_event_arm(sa.iface)); /* (no progress of a before it) */
    FY_ASSERT_EQ(set_members(&sa, &socks), 3);
    FY_ASSERT_EQ(fd_readable(&sa, 0), 1);
    FY_ASSERT(ready_members(&sa) & (1u << FY_UDP_CH_PRIO)); /* (a short AM's channel) */
    FY_ASSERT_EQ(sa.ams, a);                                /* (not taken by the arm) */
    FY_ASSERT_EQ(ut_sides_until(ops, &sa, &sb, &sa.ams, a + 1, 10000), 0);
    FY_ASSERT_EQ(sa.errs + sb.errs, 0);
    side_close(&sa);
    side_close(&sb);
}

FYTEST_MAIN(FYTEST_CASE(poll_leaves_set), FYTEST_CASE(woken_by_arrival),
            FYTEST_CASE(pending_at_arm), )
