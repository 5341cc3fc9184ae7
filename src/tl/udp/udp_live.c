/*
 * udp_live.c - liveness and the stateless parts of connection management: the heartbeat
 * responder, keepalives, the connection cookie, RESET for connections that are gone.
 *
 * Why a responder: reliability lives in user space, so a peer that computes for a long
 * stretch without calling progress sends no ACKs and, seen from the network, looks exactly
 * like a dead one.  To tell the two apart every process runs one small background thread
 * (started with its first udp iface, stopped with its last) that owns one extra socket per
 * iface - the liveness port, advertised in the handshake - and answers heartbeats (HB) with
 * HB_ACK, statelessly, whatever the application is doing.  A process that lives answers; a
 * killed one stops at once (its sockets close with it); a hung one still answers, as TCP's
 * keepalive does for a process that stopped reading.  The thread touches no transport state:
 * it reads only its own sockets and each iface's immutable uuid and job key.
 *
 * Keepalive (progress side): every connection has a timer in the iface's coarse live hotel.
 * When nothing has come from the peer for FERRY_UDP_KEEPALIVE (default PEER_TIMEOUT / 4), a
 * heartbeat goes to the peer's liveness port, then one every PEER_TIMEOUT / 8.  Any datagram
 * from the peer (an HB_ACK included) counts as life.  The peer is declared dead when it has
 * been silent for PEER_TIMEOUT *and* our heartbeats have gone unanswered for at least half of
 * it (three or more): so a process that wakes from a long sleep first asks, and does not
 * condemn peers it simply did not listen to.  Death fails every connection to that peer on
 * the iface (the reply connection and the application's alike), with every pending
 * operation, so an idle endpoint learns it too.
 *
 * RESET: a sequenced datagram naming a connection we do not have (closed, reclaimed, or from
 * before a restart) is answered with a RESET (rate-limited), and the sender fails that
 * connection with FERRY_ERR_CONNECTION_RESET instead of resending into the void while our
 * responder keeps saying we are alive.
 *
 * Cookies: a CONN_REQ that does not create state is answered with a COOKIE, a keyed hash
 * (SipHash-2-4, with a random per-iface secret) of the requester's address, uuid and
 * connection id and a 16-second epoch.  Only a CONN_REQ echoing a valid cookie (this epoch or
 * the last) creates a passive connection, as SYN cookies do: a requester must be able to
 * receive at the address it claims.
 *
 * Cost: one thread per process (64 KiB stack), one socket per iface; an idle connection
 * costs one heartbeat and its answer (56 bytes each way) per KEEPALIVE when the peer has
 * been silent that long, nothing while traffic flows; a sleeping worker wakes for its
 * connections only when a keepalive timer is due and when the answer comes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "tl/udp/udp.h"
#include "util/clock.h"
#include "util/log.h"

#define LIVE_TICK_NS  (1 * FY_NSEC_PER_MSEC)
#define LIVE_SLOTS    1024
#define LIVE_BATCH    16
#define RESET_PER_SEC 1000

/* ---- the responder ---------------------------------------------------------------------- */

typedef struct fy_udp_live {
    int fd;
    int csum;
    uint64_t uuid, key;
} fy_udp_live_t;

static struct {
    pthread_mutex_t life; /* start/stop, register/unregister */
    pthread_mutex_t lock; /* the thread's use of registered sockets vs unregister */
    pthread_t thread;
    int running, stop;
    int epfd, evfd;
    unsigned users;
    unsigned long closes; /* unregistrations so far: a batch of events read before one is void */
    pid_t pid;            /* the process that started it (a forked child starts its own) */
} R = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, -1, -1, 0, 0, 0};

static void live_answer(fy_udp_live_t *l)
{
    uint8_t buf[LIVE_BATCH][FY_UDP_HDR_LEN + sizeof(fy_udp_hb_t) + 8];
    struct sockaddr_storage from[LIVE_BATCH];
    struct iovec iov[LIVE_BATCH];
    struct mmsghdr m[LIVE_BATCH];
    memset(m, 0, sizeof(m));
    for (int i = 0; i < LIVE_BATCH; i++) {
        iov[i].iov_base = buf[i];
        iov[i].iov_len = sizeof(buf[i]);
        m[i].msg_hdr.msg_iov = &iov[i];
        m[i].msg_hdr.msg_iovlen = 1;
        m[i].msg_hdr.msg_name = &from[i];
        m[i].msg_hdr.msg_namelen = sizeof(from[i]);
    }
    int n = recvmmsg(l->fd, m, LIVE_BATCH, MSG_DONTWAIT, NULL);
    for (int i = 0; i < n; i++) {
        fy_udp_hdr_t h;
        fy_udp_hb_t hb;
        size_t len = m[i].msg_len;
        if (len != FY_UDP_HDR_LEN + sizeof(hb) || (m[i].msg_hdr.msg_flags & MSG_TRUNC))
            continue;
        memcpy(&h, buf[i], sizeof(h));
        memcpy(&hb, buf[i] + FY_UDP_HDR_LEN, sizeof(hb));
        if (h.job_key != l->key || h.version != FY_UDP_VERSION || h.type != FY_UDP_T_HB ||
            h.len != sizeof(hb) || hb.uuid != l->uuid)
            continue;
        if (l->csum) {
            if (!(h.flags & FY_UDP_F_CSUM) ||
                fy_udp_dgram_crc(0, FY_UDP_CSUM_OFFSET, buf[i], NULL, len, len) != h.csum)
                continue;
        }
        uint32_t d = h.dst_id;
        h.dst_id = h.src_id;
        h.src_id = d;
        h.type = FY_UDP_T_HB_ACK;
        h.flags = l->csum ? FY_UDP_F_CSUM : 0;
        h.csum = 0;
        memcpy(buf[i], &h, sizeof(h));
        if (l->csum) {
            uint32_t crc = fy_udp_crc32c(0, buf[i], len);
            memcpy(buf[i] + FY_UDP_CSUM_OFFSET, &crc, 4);
        }
        (void)sendto(l->fd, buf[i], len, MSG_DONTWAIT, (struct sockaddr *)&from[i],
                     m[i].msg_hdr.msg_namelen);
    }
}

static void *live_thread(void *arg)
{
    (void)arg;
    for (;;) {
        struct epoll_event ev[LIVE_BATCH];
        unsigned long closes;
        pthread_mutex_lock(&R.lock);
        closes = R.closes;
        pthread_mutex_unlock(&R.lock);
        int n = epoll_wait(R.epfd, ev, LIVE_BATCH, -1);
        if (n < 0 && errno != EINTR)
            break;
        pthread_mutex_lock(&R.lock);
        if (R.stop) {
            pthread_mutex_unlock(&R.lock);
            break;
        }
        /* A socket unregistered since epoll_wait may be freed: read the events again. */
        if (R.closes == closes)
            for (int i = 0; i < n; i++)
                if (ev[i].data.ptr != NULL)
                    live_answer(ev[i].data.ptr);
        pthread_mutex_unlock(&R.lock);
    }
    return NULL;
}

/* A forked child has the parent's state but not its thread, and may have inherited a lock
 * the thread held: start afresh (the epoll set is the parent's; close our copies only). */
static void responder_child_reset(void)
{
    if (R.epfd >= 0)
        close(R.epfd);
    if (R.evfd >= 0)
        close(R.evfd);
    pthread_mutex_init(&R.life, NULL);
    pthread_mutex_init(&R.lock, NULL);
    R.running = 0;
    R.users = 0;
    R.epfd = R.evfd = -1;
    R.pid = getpid();
}

static void responder_atfork(void)
{
    pthread_atfork(NULL, NULL, responder_child_reset);
}

static ferry_status_t responder_start(void)
{
    pthread_attr_t attr;
    if (R.pid != getpid()) { /* first use in this process */
        R.running = 0;
        R.users = 0;
        R.pid = getpid();
    }
    if (R.running)
        return FERRY_OK;
    R.stop = 0;
    R.epfd = epoll_create1(EPOLL_CLOEXEC);
    R.evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (R.epfd < 0 || R.evfd < 0)
        goto err;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(R.epfd, EPOLL_CTL_ADD, R.evfd, &ev) != 0)
        goto err;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int rc = pthread_create(&R.thread, &attr, live_thread, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        goto err;
    }
    R.running = 1;
    return FERRY_OK;
err:
    fy_error("udp: cannot start the liveness responder: %s", strerror(errno));
    if (R.epfd >= 0)
        close(R.epfd);
    if (R.evfd >= 0)
        close(R.evfd);
    R.epfd = R.evfd = -1;
    return FERRY_ERR_NO_RESOURCE;
}

static void responder_stop(void)
{
    uint64_t one = 1;
    pthread_mutex_lock(&R.lock);
    R.stop = 1;
    pthread_mutex_unlock(&R.lock);
    (void)!write(R.evfd, &one, sizeof(one));
    pthread_join(R.thread, NULL);
    close(R.epfd);
    close(R.evfd);
    R.epfd = R.evfd = -1;
    R.running = 0;
}

static void live_expired(fy_hotel_t *hotel, fy_hotel_room_t *room, void *arg);

ferry_status_t fy_udp_live_open(fy_udp_iface_t *iface)
{
    struct sockaddr_storage ss;
    socklen_t sl = fy_netif_addr_to_sockaddr(&iface->addr, &ss);
    fy_udp_live_t *l = calloc(1, sizeof(*l));
    ferry_status_t st;
    if (l == NULL)
        return FERRY_ERR_NO_MEMORY;
    l->uuid = iface->uuid;
    l->key = iface->super.params.job_key;
    l->csum = iface->csum;
    l->fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&ss, sl) != 0) {
        fy_error("udp: liveness socket: %s", strerror(errno));
        st = fy_status_from_errno(errno);
        goto err;
    }
    sl = sizeof(ss);
    getsockname(l->fd, (struct sockaddr *)&ss, &sl);
    iface->live_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                     : ((struct sockaddr_in6 *)&ss)->sin6_port);
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, responder_atfork);
    pthread_mutex_lock(&R.life);
    st = responder_start();
    if (st == FERRY_OK) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
        if (epoll_ctl(R.epfd, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
            st = fy_status_from_errno(errno);
            if (R.users == 0)
                responder_stop();
        } else {
            R.users++;
        }
    }
    pthread_mutex_unlock(&R.life);
    if (st != FERRY_OK)
        goto err;
    iface->live = l;
    if (getrandom(iface->cookie_secret, sizeof(iface->cookie_secret), 0) !=
        sizeof(iface->cookie_secret)) {
        iface->cookie_secret[0] = fy_hash_mix64(fy_time_ns() ^ iface->uuid);
        iface->cookie_secret[1] = fy_hash_mix64(iface->cookie_secret[0] ^ (uint64_t)getpid());
    }
    return fy_hotel_init(&iface->live_hotel, LIVE_TICK_NS, LIVE_SLOTS, live_expired, iface,
                         fy_time_ns());
err:
    if (l->fd >= 0)
        close(l->fd);
    free(l);
    return st;
}

void fy_udp_live_close(fy_udp_iface_t *iface)
{
    if (iface->live_hotel.slots != NULL)
        fy_hotel_destroy(&iface->live_hotel);
    fy_udp_live_t *l = iface->live;
    if (l == NULL)
        return;
    pthread_mutex_lock(&R.life);
    pthread_mutex_lock(&R.lock);
    epoll_ctl(R.epfd, EPOLL_CTL_DEL, l->fd, NULL);
    R.closes++;
    pthread_mutex_unlock(&R.lock);
    if (--R.users == 0)
        responder_stop();
    pthread_mutex_unlock(&R.life);
    close(l->fd);
    free(l);
    iface->live = NULL;
}

/* ---- keepalive ------------------------------------------------------------------------- */

static uint64_t ka_interval(const fy_udp_iface_t *iface)
{
    uint64_t ka = iface->opts->keepalive ? iface->opts->keepalive : iface->opts->peer_timeout / 4;
    return FY_MAX(ka, (uint64_t)LIVE_TICK_NS);
}

static uint64_t hb_interval(const fy_udp_iface_t *iface)
{
    return FY_MAX(iface->opts->peer_timeout / 8, (uint64_t)LIVE_TICK_NS);
}

void fy_udp_live_watch(fy_udp_conn_t *c)
{
    fy_udp_iface_t *iface = c->iface;
    if (iface->live_hotel.slots == NULL)
        return;
    c->live_timer.kind = FY_UDP_TIMER_LIVE;
    fy_hotel_checkin(&iface->live_hotel, &c->live_timer.room, ka_interval(iface), fy_time_ns());
}

int fy_udp_conn_presumed_dead(const fy_udp_conn_t *c)
{
    const fy_udp_iface_t *iface = c->iface;
    uint64_t T = iface->opts->peer_timeout;
    if (iface->now - c->last_rx_ns <= T)
        return 0;
    if (c->peer_live_port == 0)
        return 1; /* no way to ask: silence decides, as before heartbeats */
    return c->hb_first != 0 && c->hb_sent >= 3 && iface->now - c->hb_first >= T / 2;
}

static int conn_idle(const fy_udp_conn_t *c)
{
    return fy_list_is_empty(&c->sendq) && c->snd_una == c->snd_nxt &&
           fy_list_is_empty(&c->rma_fifo) && fy_list_is_empty(&c->flushq) && !c->rx_active &&
           c->nstash == 0;
}

static void send_hb(fy_udp_iface_t *iface, fy_udp_conn_t *c)
{
    struct sockaddr_storage to = c->addr[FY_UDP_CH_PRIO];
    fy_udp_hb_t hb = {.uuid = c->peer_uuid, .tx_ns = iface->now};
    if (to.ss_family == AF_INET)
        ((struct sockaddr_in *)&to)->sin_port = htons(c->peer_live_port);
    else
        ((struct sockaddr_in6 *)&to)->sin6_port = htons(c->peer_live_port);
    fy_udp_hdr_t h;
    fy_udp_ctrl_hdr(c, FY_UDP_T_HB, &h);
    /* Sent at once, not batched: a batched datagram keeps a pointer to its address, and this
     * one (the peer's liveness port) lives on our stack; batched, every heartbeat of a pass
     * went to the last peer's port, and the others were taken for dead. */
    fy_udp_send_raw(iface, FY_UDP_CH_PRIO, &h, &hb, sizeof(hb), &to);
    if (c->hb_first == 0)
        c->hb_first = iface->now;
    c->hb_sent++;
    iface->hb_sent++;
}

static void live_expired(fy_hotel_t *hotel, fy_hotel_room_t *room, void *arg)
{
    fy_udp_iface_t *iface = arg;
    fy_udp_conn_t *c = fy_container_of(room, fy_udp_conn_t, live_timer.room);
    uint64_t ka = ka_interval(iface), silent;
    char buf[FY_NETIF_ADDR_STRLEN];

    if (!fy_udp_conn_alive(c) || c->in_fail_list)
        return;
    if (c->state == FY_UDP_CONN_CONNECTING || c->peer_id == 0) {
        fy_hotel_checkin(hotel, room, ka, iface->now); /* the handshake has its own timer */
        return;
    }
    silent = iface->now > c->last_rx_ns ? iface->now - c->last_rx_ns : 0;
    if (silent < ka) {
        c->hb_first = 0;
        c->hb_sent = 0;
        fy_hotel_checkin(hotel, room, ka - silent, iface->now);
        return;
    }
    if (!c->owned && silent >= iface->opts->passive_idle && conn_idle(c)) {
        fy_debug("udp: reclaiming idle passive connection %08x from %s (silent %.1f s)", c->id,
                 fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)), (double)silent / 1e9);
        iface->passive_reclaimed++;
        fy_udp_conn_reclaim(c);
        return;
    }
    if (fy_udp_conn_presumed_dead(c)) {
        fy_warn("udp: peer %s (iface %016llx) is gone: silent for %.1f s, %u heartbeats to its "
                "liveness port unanswered%s",
                fy_netif_addr_str(&c->peer_addr, 0, buf, sizeof(buf)),
                (unsigned long long)c->peer_uuid, (double)silent / 1e9, c->hb_sent,
                conn_idle(c) ? "" : "; its pending operations fail");
        fy_udp_conn_schedule_fail(c, FERRY_ERR_ENDPOINT_TIMEOUT);
        return;
    }
    if (c->peer_live_port != 0)
        send_hb(iface, c);
    fy_hotel_checkin(hotel, room, hb_interval(iface), iface->now);
}

void fy_udp_live_progress(fy_udp_iface_t *iface)
{
    /* (called once the live hotel's tick is over: udp_iface.c) */
    iface->live_gate = (iface->now / LIVE_TICK_NS + 1) * LIVE_TICK_NS;
    if (fy_hotel_occupancy(&iface->live_hotel) == 0)
        return;
    fy_hotel_run(&iface->live_hotel, iface->now);
}

uint64_t fy_udp_live_deadline(fy_udp_iface_t *iface, uint64_t now)
{
    if (iface->live_hotel.slots == NULL || fy_hotel_occupancy(&iface->live_hotel) == 0)
        return 0;
    /* The first connection's keepalive timer: every probe, every judgement of death and
     * every reclaim of an idle passive connection happens in its timer's expiry, so a worker
     * whose peers are idle sleeps until one is due (it used to wake at least every 250 ms
     * as well, for nothing: thousands of idle workers made a steady load). */
    uint64_t t = fy_hotel_next_run(&iface->live_hotel, now);
    if (t == UINT64_MAX)
        return 0;
    /* Woken for each connection's timer exactly, a worker with a few connections woke once
     * per connection per interval, where the cap had gathered their work into its 4 wake-ups
     * a second.  Rounded up to a grid of a sixteenth of the shorter interval, the timers due
     * within one grid step share a wake-up (a probe or a verdict at most that much late). */
    uint64_t g =
        FY_MAX(FY_MIN(ka_interval(iface), hb_interval(iface)) / 16, (uint64_t)LIVE_TICK_NS);
    return t > UINT64_MAX - g ? t : (t + g - 1) / g * g;
}

void fy_udp_live_rx_hb_ack(fy_udp_iface_t *iface, const fy_udp_hdr_t *h, const uint8_t *payload,
                           size_t plen)
{
    fy_udp_hb_t hb;
    fy_udp_conn_t *c = fy_udp_conn_lookup(iface, h->dst_id);
    if (plen != sizeof(hb)) {
        iface->drops_malformed++;
        return;
    }
    memcpy(&hb, payload, sizeof(hb));
    if (c == NULL || c->peer_id != h->src_id || c->peer_uuid != hb.uuid || !fy_udp_conn_alive(c)) {
        iface->drops_unknown_ep++;
        return;
    }
    iface->hb_acked++;
    c->last_rx_ns = iface->now;
    c->hb_first = 0;
    c->hb_sent = 0;
}

/* ---- cookies --------------------------------------------------------------------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

/* SipHash-2-4 over whole 64-bit words. */
static uint64_t siphash_words(const uint64_t k[2], const uint64_t *m, size_t n)
{
    uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
    for (size_t i = 0; i < n; i++) {
        v3 ^= m[i];
        SIPROUND;
        SIPROUND;
        v0 ^= m[i];
    }
    uint64_t b = (uint64_t)(n * 8) << 56;
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t fy_udp_cookie(const fy_udp_iface_t *iface, const struct sockaddr_storage *from,
                       uint64_t uuid, uint32_t src_id, uint64_t epoch)
{
    fy_netif_addr_t a;
    uint64_t m[5] = {0, 0, 0, uuid, ((uint64_t)src_id << 32) ^ epoch};
    memset(&a, 0, sizeof(a));
    fy_netif_addr_from_sockaddr((const struct sockaddr *)from, &a);
    memcpy(&m[0], a.addr, 16);
    m[2] = ((uint64_t)a.family << 16) | a.port_be;
    uint64_t c = siphash_words(iface->cookie_secret, m, 5);
    return c != 0 ? c : 1;
}

/* ---- conn-less datagrams --------------------------------------------------------------- */

void fy_udp_send_raw(fy_udp_iface_t *iface, uint8_t chan, const fy_udp_hdr_t *hin,
                     const void *payload, size_t plen, const struct sockaddr_storage *to)
{
    uint8_t buf[FY_UDP_HDR_LEN + 64];
    fy_udp_hdr_t h = *hin;
    if (plen > sizeof(buf) - FY_UDP_HDR_LEN)
        return;
    if (h.job_key == 0) /* a RESET to a datagram naming nothing of ours echoes our key */
        h.job_key = iface->super.params.job_key;
    h.version = FY_UDP_VERSION;
    h.len = (uint32_t)plen;
    h.flags = iface->csum ? FY_UDP_F_CSUM : 0;
    h.csum = 0;
    memcpy(buf, &h, sizeof(h));
    if (plen != 0)
        memcpy(buf + FY_UDP_HDR_LEN, payload, plen);
    if (iface->csum) {
        uint32_t crc = fy_udp_crc32c(0, buf, FY_UDP_HDR_LEN + plen);
        memcpy(buf + FY_UDP_CSUM_OFFSET, &crc, 4);
    }
    socklen_t tl =
        to->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (sendto(iface->ch[chan].fd, buf, FY_UDP_HDR_LEN + plen, MSG_DONTWAIT,
               (const struct sockaddr *)to, tl) < 0)
        iface->tx_errors++;
    else
        iface->tx_dgrams++;
}

void fy_udp_conn_rx_unknown(fy_udp_iface_t *iface, const fy_udp_hdr_t *h,
                            const struct sockaddr_storage *from)
{
    static __thread uint64_t window_start, in_window;
    fy_udp_conn_t *c;
    if (h->type < FY_UDP_T_FIRST_SEQ)
        return; /* only data naming a connection that is gone */
    c = fy_udp_conn_lookup(iface, h->dst_id);
    if (c != NULL && fy_udp_conn_alive(c))
        return; /* ours, from another peer id: not for us to judge */
    if (iface->now - window_start > FY_NSEC_PER_SEC) {
        window_start = iface->now;
        in_window = 0;
    }
    if (++in_window > RESET_PER_SEC)
        return;
    /* A data segment names only our end: the RESET names the sender's connection by the
     * peer id it sent to (src_id) and us by our uuid (udp_handshake.c: fy_udp_reset_target). */
    fy_udp_hdr_t r;
    memset(&r, 0, sizeof(r));
    r.type = FY_UDP_T_RESET;
    r.src_id = h->dst_id;
    struct sockaddr_storage to = *from;
    iface->resets_sent++;
    fy_udp_send_raw(iface, FY_UDP_CH_PRIO, &r, &iface->uuid, sizeof(iface->uuid), &to);
}
