/*
 * fy_impair.c - a network impairer on an iptables NFQUEUE rule (libnetfilter_queue), for the
 * real-network fault tests: every packet the rule queues gets, with the given
 * probabilities (percent) and a seeded generator,
 *
 *   --loss P      dropped (NF_DROP)
 *   --dup P       accepted, and a copy injected through a raw socket (marked so the rule
 *                 does not queue it again)
 *   --reorder P   held until the next packet has been let through
 *   --delay P     held for --delay-us microseconds (the verdict is simply given later)
 *   --corrupt P   one byte of the UDP payload flipped; with --zero-csum the UDP checksum is
 *                 zeroed so the packet reaches the application, whose own check must catch it
 *
 * and, with --rate R (bits per second, k/M/G suffixes), every packet that would be let through
 * (at once, or when its delay or reordering ends) goes through a token bucket of --burst bytes
 * (default 2 ms at the rate, at least 64 KiB) and a FIFO of at most --limit packets (default
 * 2000; beyond it a packet is dropped, as a router's queue would): a link of that speed.  The
 * testbed (tests/hosts) uses it to make links of equal, known rates for multi-rail figures.
 * Corrupted packets and injected duplicates do not pass the bucket.
 *
 * It works in the kernel's real packet path (the test's veth pair between two network
 * namespaces), which the transport's in-process injector does not.  It prints "ready" on
 * stdout once bound to the queue, and a summary on SIGTERM.
 *
 *   fy_impair --queue N [--seed S] [--loss P] [--dup P] [--reorder P] [--delay P]
 *             [--delay-us U] [--corrupt P] [--zero-csum] [--mark M]
 *             [--rate R] [--burst B] [--limit N]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/netfilter.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

#define MAX_HELD  4096
#define RATE_RING 16384

typedef struct held {
    uint32_t id, len;
    uint64_t release; /* ns; 0 = after the next packet */
} held_t;

typedef struct shaped {
    uint32_t id, len;
} shaped_t;

/* The token bucket of --rate: bytes of credit, refilled at the rate, at most the burst. */
static struct {
    double bytes_per_ns, tokens, burst;
    uint64_t last;
    shaped_t ring[RATE_RING];
    unsigned head, n, limit;
    unsigned long n_shaped, n_overflow;
} rate = {.limit = 2000};

static struct {
    double loss, dup, reorder, delay, corrupt;
    uint64_t delay_ns;
    int zero_csum;
    uint32_t mark;
    uint64_t rng;
    int raw;
    struct nfq_q_handle *qh;
    held_t held[MAX_HELD];
    unsigned nheld;
    unsigned long n_pkts, n_loss, n_dup, n_reorder, n_delay, n_corrupt;
} g = {.delay_ns = 500000, .mark = 0x7e57};

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    stop = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t next64(void)
{
    uint64_t z = (g.rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int chance(double pct)
{
    return pct > 0 && (double)(next64() >> 11) * (100.0 / 9007199254740992.0) < pct;
}

static void accept_pkt(uint32_t id)
{
    nfq_set_verdict(g.qh, id, NF_ACCEPT, 0, NULL);
}

/* Let through what the bucket's credit covers, oldest first. */
static void rate_pump(uint64_t now)
{
    if (rate.bytes_per_ns <= 0)
        return;
    rate.tokens += (double)(now - rate.last) * rate.bytes_per_ns;
    if (rate.tokens > rate.burst)
        rate.tokens = rate.burst;
    rate.last = now;
    while (rate.n > 0 && rate.tokens >= rate.ring[rate.head].len) {
        rate.tokens -= rate.ring[rate.head].len;
        accept_pkt(rate.ring[rate.head].id);
        rate.head = (rate.head + 1) % RATE_RING;
        rate.n--;
    }
}

/* ns until the oldest shaped packet has credit (0 when nothing waits). */
static uint64_t rate_wait_ns(void)
{
    if (rate.n == 0)
        return 0;
    double need = rate.ring[rate.head].len - rate.tokens;
    return need <= 0 ? 1 : (uint64_t)(need / rate.bytes_per_ns) + 1;
}

/* A packet to let through: at once, or through the bucket under --rate. */
static void pass(uint32_t id, uint32_t len)
{
    if (rate.bytes_per_ns <= 0) {
        accept_pkt(id);
        return;
    }
    if (rate.n >= rate.limit) {
        rate.n_overflow++;
        nfq_set_verdict(g.qh, id, NF_DROP, 0, NULL);
        return;
    }
    rate.ring[(rate.head + rate.n) % RATE_RING] = (shaped_t){id, len};
    rate.n++;
    rate.n_shaped++;
    rate_pump(now_ns());
}

/* Let through the packets held for "after the next one", or whose time has come. */
static void release(int after_next, uint64_t now)
{
    unsigned k = 0;
    for (unsigned i = 0; i < g.nheld; i++) {
        held_t h = g.held[i];
        if ((h.release == 0 && after_next) || (h.release != 0 && h.release <= now))
            pass(h.id, h.len);
        else
            g.held[k++] = h;
    }
    g.nheld = k;
}

static void inject_copy(const uint8_t *pkt, int len)
{
    struct sockaddr_in to = {.sin_family = AF_INET};
    const struct iphdr *ip = (const struct iphdr *)pkt;
    if (len < (int)sizeof(*ip) || ip->version != 4)
        return;
    to.sin_addr.s_addr = ip->daddr;
    sendto(g.raw, pkt, (size_t)len, 0, (struct sockaddr *)&to, sizeof(to));
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *data)
{
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    uint8_t *pkt = NULL;
    int len = nfq_get_payload(nfa, &pkt);
    uint32_t id = ph ? ntohl(ph->packet_id) : 0;
    uint32_t wire_len = len > 0 ? (uint32_t)len : 0;

    g.n_pkts++;
    if (chance(g.loss)) {
        g.n_loss++;
        nfq_set_verdict(qh, id, NF_DROP, 0, NULL);
        return 0;
    }
    if (chance(g.dup) && len > 0) {
        g.n_dup++;
        inject_copy(pkt, len);
    }
    if (chance(g.corrupt) && len > 0) {
        struct iphdr *ip = (struct iphdr *)pkt;
        int hl = ip->ihl * 4;
        if (ip->version == 4 && ip->protocol == IPPROTO_UDP && len > hl + 8) {
            struct udphdr *u = (struct udphdr *)(pkt + hl);
            int plen = len - hl - 8;
            pkt[hl + 8 + (int)(next64() % (uint64_t)plen)] ^= (uint8_t)(1 + next64() % 255);
            if (g.zero_csum)
                u->check = 0;
            g.n_corrupt++;
            release(1, now_ns());
            nfq_set_verdict(qh, id, NF_ACCEPT, (uint32_t)len, pkt);
            return 0;
        }
    }
    if (g.nheld < MAX_HELD && chance(g.reorder)) {
        g.n_reorder++;
        g.held[g.nheld++] = (held_t){id, wire_len, 0};
        return 0;
    }
    if (g.nheld < MAX_HELD && chance(g.delay)) {
        g.n_delay++;
        g.held[g.nheld++] = (held_t){id, wire_len, now_ns() + g.delay_ns};
        return 0;
    }
    pass(id, wire_len);
    release(1, now_ns());
    return 0;
}

/* "1g", "250M", "2.5e9": bits per second; 0 on a bad value. */
static double parse_rate(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k':
    case 'K':
        v *= 1e3, end++;
        break;
    case 'm':
    case 'M':
        v *= 1e6, end++;
        break;
    case 'g':
    case 'G':
        v *= 1e9, end++;
        break;
    }
    if (end == s || (*end != '\0' && strcmp(end, "bit") != 0) || !(v > 0))
        return 0;
    return v;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"queue", 1, 0, 'q'},     {"seed", 1, 0, 's'},
                                         {"loss", 1, 0, 'l'},      {"dup", 1, 0, 'd'},
                                         {"reorder", 1, 0, 'r'},   {"delay", 1, 0, 'D'},
                                         {"delay-us", 1, 0, 'u'},  {"corrupt", 1, 0, 'c'},
                                         {"zero-csum", 0, 0, 'z'}, {"mark", 1, 0, 'm'},
                                         {"rate", 1, 0, 'R'},      {"burst", 1, 0, 'B'},
                                         {"limit", 1, 0, 'L'},     {0, 0, 0, 0}};
    double rate_bps = 0, burst = 0;
    int opt, queue = -1;
    static char buf[1 << 17];

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'q':
            queue = atoi(optarg);
            break;
        case 's':
            g.rng = strtoull(optarg, NULL, 0);
            break;
        case 'l':
            g.loss = atof(optarg);
            break;
        case 'd':
            g.dup = atof(optarg);
            break;
        case 'r':
            g.reorder = atof(optarg);
            break;
        case 'D':
            g.delay = atof(optarg);
            break;
        case 'u':
            g.delay_ns = strtoull(optarg, NULL, 0) * 1000ull;
            break;
        case 'c':
            g.corrupt = atof(optarg);
            break;
        case 'z':
            g.zero_csum = 1;
            break;
        case 'm':
            g.mark = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'R':
            rate_bps = parse_rate(optarg);
            if (rate_bps <= 0) {
                fprintf(stderr, "fy_impair: --rate %s: expected bits per second (1g, 250M)\n",
                        optarg);
                return 2;
            }
            break;
        case 'B':
            burst = atof(optarg);
            break;
        case 'L': {
            long l = atol(optarg);
            if (l < 1 || l > RATE_RING) {
                fprintf(stderr, "fy_impair: --limit %s: 1 to %d packets\n", optarg, RATE_RING);
                return 2;
            }
            rate.limit = (unsigned)l;
            break;
        }
        default:
            fprintf(stderr, "fy_impair: bad option\n");
            return 2;
        }
    }
    if (queue < 0) {
        fprintf(stderr, "usage: fy_impair --queue N [--seed S] [--loss P] [--dup P] "
                        "[--reorder P] [--delay P] [--delay-us U] [--corrupt P] [--zero-csum] "
                        "[--rate R] [--burst B] [--limit N]\n");
        return 2;
    }
    if (rate_bps > 0) {
        rate.bytes_per_ns = rate_bps / 8e9;
        rate.burst = burst > 0 ? burst : rate.bytes_per_ns * 2e6;
        if (rate.burst < 65536)
            rate.burst = 65536;
        rate.tokens = rate.burst;
        rate.last = now_ns();
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    g.raw = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    if (g.raw >= 0)
        setsockopt(g.raw, SOL_SOCKET, SO_MARK, &g.mark, sizeof(g.mark));
    struct nfq_handle *h = nfq_open();
    if (h == NULL) {
        perror("fy_impair: nfq_open");
        return 1;
    }
    nfq_unbind_pf(h, AF_INET);
    if (nfq_bind_pf(h, AF_INET) < 0) {
        perror("fy_impair: nfq_bind_pf");
        return 1;
    }
    g.qh = nfq_create_queue(h, (uint16_t)queue, on_packet, NULL);
    if (g.qh == NULL) {
        perror("fy_impair: nfq_create_queue");
        return 1;
    }
    if (nfq_set_mode(g.qh, NFQNL_COPY_PACKET, 0xffff) < 0) {
        perror("fy_impair: nfq_set_mode");
        return 1;
    }
    nfq_set_queue_maxlen(g.qh, 16384);
    int fd = nfq_fd(h);
    int rb = 16 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rb, sizeof(rb));
    printf("ready\n");
    fflush(stdout);
    while (!stop) {
        struct pollfd pfd = {fd, POLLIN, 0};
        /* a held packet with a time: sleep until it is due (at most 1 ms); a shaped one:
         * until the bucket covers it (at least 20 us, so a fast rate is served in batches) */
        uint64_t wait = g.nheld ? 1000000 : 100000000, rw = rate_wait_ns();
        if (rw > 0)
            wait = rw < 20000 ? 20000 : rw < wait ? rw : wait;
        struct timespec ts = {(time_t)(wait / 1000000000u), (long)(wait % 1000000000u)};
        if (ppoll(&pfd, 1, &ts, NULL) > 0) {
            ssize_t r = recv(fd, buf, sizeof(buf), 0);
            if (r > 0)
                nfq_handle_packet(h, buf, (int)r);
            else if (r < 0 && errno == ENOBUFS)
                fprintf(stderr, "fy_impair: queue overflow (packets lost in the kernel)\n");
        }
        release(0, now_ns());
        rate_pump(now_ns());
        /* Reordered packets whose successor never comes go out after the delay anyway. */
        if (g.nheld && pfd.revents == 0)
            release(1, now_ns());
    }
    release(1, UINT64_MAX);
    while (rate.n > 0) { /* what the bucket still holds goes out now */
        accept_pkt(rate.ring[rate.head].id);
        rate.head = (rate.head + 1) % RATE_RING;
        rate.n--;
    }
    fprintf(stderr,
            "fy_impair: %lu packets: lost %lu, duplicated %lu, reordered %lu, delayed %lu, "
            "corrupted %lu, rate-limited %lu (dropped at the queue limit %lu)\n",
            g.n_pkts, g.n_loss, g.n_dup, g.n_reorder, g.n_delay, g.n_corrupt, rate.n_shaped,
            rate.n_overflow);
    nfq_destroy_queue(g.qh);
    nfq_close(h);
    return 0;
}
