/*
 * test_lanes.c - lane choice inside one process: the lane each operation class gets for each
 * mix of transports (FERRY_TLS narrowing), that tcp wins bulk where it is faster (the figures
 * of a veth between namespaces) and shared memory wins on one host, that both ends of a pair
 * choose alike, the reasons given for rejected candidates (no shared /dev/shm, another host,
 * duplicates), and one endpoint per pair: crossing connects end paired, and the endpoint a
 * handler gets is the application's, with its user data.
 *
 * It reaches below the API (proto/proto_int.h) to read the plan wireup made; each case runs
 * in a child of its own, so FERRY_TLS is set per case.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fytest.h"
#include "proto/proto_int.h"
#include "util/clock.h"

typedef struct two {
    ferry_context_t *ctx;
    ferry_worker_t *w[2];
    uint8_t *addr[2];
    size_t len[2];
} two_t;

static void two_open(two_t *t, const char *tls)
{
    memset(t, 0, sizeof(*t));
    if (tls != NULL)
        setenv("FERRY_TLS", tls, 1);
    FY_ASSERT_OK(ferry_context_create(NULL, &t->ctx));
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_worker_create(t->ctx, NULL, &t->w[i]));
}

static void two_addrs(two_t *t)
{
    for (int i = 0; i < 2; i++) {
        free(t->addr[i]);
        t->len[i] = t->w[i]->address_len;
        t->addr[i] = malloc(t->len[i]);
        FY_ASSERT(t->addr[i] != NULL);
        memcpy(t->addr[i], t->w[i]->address, t->len[i]);
    }
}

static void two_close(two_t *t)
{
    for (int i = 0; i < 2; i++) {
        if (t->w[i] != NULL)
            ferry_worker_destroy(t->w[i]);
        free(t->addr[i]);
    }
    ferry_context_destroy(t->ctx);
}

/* The plan worker `from` makes to address (addr, len). */
static void plan_to(ferry_worker_t *from, const void *addr, size_t len, fy_remote_addr_t *ra,
                    fy_lane_plan_t *plan)
{
    FY_ASSERT_OK(fy_address_unpack(addr, len, ra));
    fy_lanes_plan(from, ra, NULL, 0, -1, plan);
}

static const char *am_tl(ferry_worker_t *w, const fy_lane_plan_t *plan)
{
    return plan->am < 0 ? "(none)" : w->ifaces[plan->cand[plan->am].local].tl->name;
}

static void expect_am(const char *tls, const char *expected)
{
    two_t t;
    fy_remote_addr_t ra;
    fy_lane_plan_t plan;
    two_open(&t, tls);
    two_addrs(&t);
    plan_to(t.w[0], t.addr[1], t.len[1], &ra, &plan);
    FY_ASSERT_MSG(strcmp(am_tl(t.w[0], &plan), expected) == 0, "FERRY_TLS=%s: am lane %s, not %s",
                  tls, am_tl(t.w[0], &plan), expected);
    two_close(&t);
}

/* Two workers of one process: self; without self, shared memory; each transport alone. */
static void tls_narrowing(void)
{
    expect_am("all", "self");
    expect_am("^self", "shm");
    expect_am("shm,udp,tcp", "shm");
    expect_am("tcp", "tcp");
    expect_am("udp", "udp");
    expect_am("udp,tcp", "udp"); /* on one host: loopback's 64 KiB datagrams, lower latency */
}

static void ifaces_of(ferry_worker_t *w, const char *tl, void (*fn)(fy_iface_t *))
{
    for (unsigned i = 0; i < w->nifaces; i++)
        if (strcmp(w->ifaces[i].tl->name, tl) == 0)
            fn(&w->ifaces[i]);
}
/* The figures the transports give a veth between two network namespaces (MTU 1500). */
static void veth_udp(fy_iface_t *fi)
{
    fi->attr.latency_ns = 3200;
    fi->attr.bandwidth = 1.11e9;
}
static void veth_tcp(fy_iface_t *fi)
{
    fi->attr.latency_ns = 4000;
    fi->attr.bandwidth = 7e9;
}

/* Between hosts over a veth, udp's 1500-byte datagrams move ~1 GB/s and tcp's stream ~7:
 * tcp carries the AM lane (and RMA), on both ends. */
static void tcp_wins_bulk_between_hosts(void)
{
    two_t t;
    fy_remote_addr_t ra;
    fy_lane_plan_t plan;
    two_open(&t, "udp,tcp");
    for (int i = 0; i < 2; i++) {
        ifaces_of(t.w[i], "udp", veth_udp);
        ifaces_of(t.w[i], "tcp", veth_tcp);
        FY_ASSERT_OK(fy_address_pack(t.w[i]));
    }
    two_addrs(&t);
    for (int i = 0; i < 2; i++) {
        plan_to(t.w[i], t.addr[1 - i], t.len[1 - i], &ra, &plan);
        FY_ASSERT_STR_EQ(am_tl(t.w[i], &plan), "tcp");
        FY_ASSERT_EQ(plan.bulk, -1); /* FERRY_AM_LANE=blend: the AM lane is the bulk lane */
        FY_ASSERT(plan.rma >= 0);
        FY_ASSERT_STR_EQ(t.w[i]->ifaces[plan.cand[plan.rma].local].tl->name, "tcp");
        /* the short-message class alone would go to udp: it is listed as passed */
        const fy_lane_cand_t *am = &plan.cand[plan.am];
        int udp_cheaper_short = 0;
        for (unsigned k = 0; k < plan.ncand; k++)
            if (plan.cand[k].usable &&
                strcmp(t.w[i]->ifaces[plan.cand[k].local].tl->name, "udp") == 0)
                udp_cheaper_short |=
                    plan.cand[k].cost[FY_CLS_AM_SHORT] < am->cost[FY_CLS_AM_SHORT] &&
                    plan.cand[k].cost[FY_CLS_AM_BULK] > 3 * am->cost[FY_CLS_AM_BULK];
        FY_ASSERT(udp_cheaper_short);
    }
    two_close(&t);
}

/* FERRY_AM_LANE=latency, between hosts over a veth: udp's one way is ~0.8 us shorter, so udp
 * carries the AM lane (short messages, the endpoint's order), and tcp, ~7x faster for bulk
 * data, is the bulk lane (rail 1, behind rail 0's anchors) and the RMA lane, on both ends. */
static void latency_mode_short_udp_bulk_tcp(void)
{
    setenv("FERRY_AM_LANE", "latency", 1);
    two_t t;
    fy_remote_addr_t ra;
    fy_lane_plan_t plan;
    two_open(&t, "udp,tcp");
    for (int i = 0; i < 2; i++) {
        ifaces_of(t.w[i], "udp", veth_udp);
        ifaces_of(t.w[i], "tcp", veth_tcp);
        FY_ASSERT_OK(fy_address_pack(t.w[i]));
    }
    two_addrs(&t);
    for (int i = 0; i < 2; i++) {
        plan_to(t.w[i], t.addr[1 - i], t.len[1 - i], &ra, &plan);
        FY_ASSERT_STR_EQ(am_tl(t.w[i], &plan), "udp");
        FY_ASSERT(plan.bulk >= 0);
        FY_ASSERT_STR_EQ(t.w[i]->ifaces[plan.cand[plan.bulk].local].tl->name, "tcp");
        FY_ASSERT(plan.rma >= 0);
        FY_ASSERT_STR_EQ(t.w[i]->ifaces[plan.cand[plan.rma].local].tl->name, "tcp");
        FY_ASSERT(plan.nrails >= 2 && plan.rails[0] == plan.am && plan.rails[1] == plan.bulk);
        FY_ASSERT(plan.rail_bw[0] == 0 && plan.rail_bw[1] > 0);
        const fy_lane_cand_t *am = &plan.cand[plan.am], *bulk = &plan.cand[plan.bulk];
        FY_ASSERT(am->cost[FY_CLS_AM_SHORT] < bulk->cost[FY_CLS_AM_SHORT]);
        FY_ASSERT(bulk->cost[FY_CLS_AM_BULK] * 3 < am->cost[FY_CLS_AM_BULK]);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        FY_ASSERT(f != NULL);
        fy_lanes_print(t.w[i], &ra, &plan, f);
        fclose(f);
        FY_ASSERT_MSG(strstr(text, "(the bulk lane") != NULL, "no bulk lane in:\n%s", text);
        free(text);
    }
    /* with the two figures alike no bulk lane is split off */
    for (int i = 0; i < 2; i++) {
        ifaces_of(t.w[i], "udp", veth_tcp);
        FY_ASSERT_OK(fy_address_pack(t.w[i]));
    }
    two_addrs(&t);
    plan_to(t.w[0], t.addr[1], t.len[1], &ra, &plan);
    FY_ASSERT_EQ(plan.bulk, -1);
    two_close(&t);
}

/* FERRY_CM narrows the lanes: with every manager excluded no candidate has one, each says why,
 * and there is no lane; otherwise each candidate names the manager wireup asks first (whether
 * it takes an endpoint's lanes depends on how the address came: tests/cm/test_cm_lanes). */
static void cm_narrowing(void)
{
    setenv("FERRY_CM", "^direct,am,oob,sockaddr", 1);
    two_t t;
    fy_remote_addr_t ra;
    fy_lane_plan_t plan;
    two_open(&t, "udp");
    two_addrs(&t);
    plan_to(t.w[0], t.addr[1], t.len[1], &ra, &plan);
    FY_ASSERT(plan.ncand > 0);
    FY_ASSERT_EQ(plan.am, -1);
    for (unsigned k = 0; k < plan.ncand; k++)
        FY_ASSERT_MSG(!plan.cand[k].usable && strstr(plan.cand[k].why, "FERRY_CM") != NULL,
                      "candidate %u: %s", k, plan.cand[k].why);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FY_ASSERT(f != NULL);
    fy_lanes_print(t.w[0], &ra, &plan, f);
    fclose(f);
    FY_ASSERT_MSG(strstr(text, "no lane") != NULL &&
                      strstr(text, "no connection manager in FERRY_CM connects on it") != NULL,
                  "%s", text);
    free(text);
    two_close(&t);
    /* each candidate names the manager asked first to connect it: the best that answers */
    const char *const cms[][2] = {
        {"all", "direct"}, {"^direct", "oob"}, {"am", "am"}, {"sockaddr", "sockaddr"}};
    for (size_t k = 0; k < sizeof(cms) / sizeof(cms[0]); k++) {
        setenv("FERRY_CM", cms[k][0], 1);
        two_open(&t, "udp");
        two_addrs(&t);
        plan_to(t.w[0], t.addr[1], t.len[1], &ra, &plan);
        FY_ASSERT(plan.am >= 0);
        FY_ASSERT_MSG(strcmp(plan.cand[plan.am].cm, cms[k][1]) == 0, "FERRY_CM=%s: cm %s, not %s",
                      cms[k][0], plan.cand[plan.am].cm, cms[k][1]);
        two_close(&t);
    }
}

/* Random figures for every interface of both workers: the two ends always choose the same
 * transport and the same pair of devices (mirrored). */
static void both_ends_agree(void)
{
    two_t t;
    two_open(&t, "udp,tcp");
    srand(7);
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 2; i++) {
            for (unsigned k = 0; k < t.w[i]->nifaces; k++) {
                fy_tl_iface_attr_t *a = &t.w[i]->ifaces[k].attr;
                a->latency_ns = 1000 + rand() % 10000;
                a->bandwidth = (rand() % 4 == 0) ? 5e9 : 1e8 * (1 + rand() % 100);
                a->overhead_ns = 500 + rand() % 2;
            }
            FY_ASSERT_OK(fy_address_pack(t.w[i]));
        }
        two_addrs(&t);
        fy_remote_addr_t ra[2];
        fy_lane_plan_t plan[2];
        for (int i = 0; i < 2; i++)
            plan_to(t.w[i], t.addr[1 - i], t.len[1 - i], &ra[i], &plan[i]);
        FY_ASSERT(plan[0].am >= 0 && plan[1].am >= 0);
        const fy_lane_cand_t *c0 = &plan[0].cand[plan[0].am], *c1 = &plan[1].cand[plan[1].am];
        FY_ASSERT_STR_EQ(am_tl(t.w[0], &plan[0]), am_tl(t.w[1], &plan[1]));
        FY_ASSERT_STR_EQ(t.w[0]->ifaces[c0->local].tl_iface->dev_name,
                         ra[1].ifaces[c1->remote].dev);
        FY_ASSERT_STR_EQ(t.w[1]->ifaces[c1->local].tl_iface->dev_name,
                         ra[0].ifaces[c0->remote].dev);
        FY_ASSERT(c0->am_cost == c1->am_cost);
    }
    two_close(&t);
}

static void rma_emulate(void)
{
    setenv("FERRY_RMA_EMULATE", "y", 1);
    two_t t;
    fy_remote_addr_t ra;
    fy_lane_plan_t plan;
    two_open(&t, "^self");
    two_addrs(&t);
    plan_to(t.w[0], t.addr[1], t.len[1], &ra, &plan);
    FY_ASSERT(plan.am >= 0);
    FY_ASSERT_EQ(plan.rma, -1);
    FY_ASSERT_EQ(plan.amo, -1);
    two_close(&t);
}

/* The explanation of a plan, as ferry_info --lanes prints it. */
static char *explain(ferry_worker_t *w, const void *addr, size_t len)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    FY_ASSERT(f != NULL);
    FY_ASSERT_OK(fy_lanes_explain(w, addr, len, f));
    fclose(f);
    return text;
}

/* The address of interface j of a parsed address, as a writable pointer into buf. */
static uint8_t *dev_addr_of(uint8_t *buf, const fy_remote_addr_t *ra, const char *tl)
{
    for (unsigned j = 0; j < ra->niface; j++)
        if (strcmp(ra->ifaces[j].tl, tl) == 0)
            return buf + (ra->ifaces[j].dev_addr - buf);
    FYTEST_FAIL("no %s interface in the address", tl);
    return NULL;
}

/* shm only where /dev/shm is proved shared: a probe that is not here, another kernel. */
static void shm_reasons(void)
{
    two_t t;
    fy_remote_addr_t ra;
    fy_lane_plan_t plan;
    two_open(&t, "shm,tcp");
    two_addrs(&t);
    FY_ASSERT_OK(fy_address_unpack(t.addr[1], t.len[1], &ra));
    uint8_t *dev = dev_addr_of(t.addr[1], &ra, "shm");
    uint64_t probe;
    memcpy(&probe, dev + 16, 8);
    probe ^= 0x5a5a;
    memcpy(dev + 16, &probe, 8);
    plan_to(t.w[0], t.addr[1], t.len[1], &ra, &plan);
    FY_ASSERT_STR_EQ(am_tl(t.w[0], &plan), "tcp");
    char *text = explain(t.w[0], t.addr[1], t.len[1]);
    FY_ASSERT_MSG(strstr(text, "rejected  shm memory->memory") != NULL &&
                      strstr(text, "no shared /dev/shm") != NULL,
                  "%s", text);
    free(text);
    dev[0] ^= 1; /* another boot id: another host */
    text = explain(t.w[0], t.addr[1], t.len[1]);
    FY_ASSERT_MSG(strstr(text, "another host") != NULL, "%s", text);
    free(text);
    two_close(&t);
}

/* The same device address offered twice counts once. */
static void duplicates_once(void)
{
    two_t t;
    fy_remote_addr_t ra;
    fy_lane_plan_t plan;
    two_open(&t, "udp");
    two_addrs(&t);
    FY_ASSERT_OK(fy_address_unpack(t.addr[1], t.len[1], &ra));
    /* append a copy of the first interface's entry */
    size_t start = 16,
           end = (size_t)(ra.ifaces[0].iface_addr - t.addr[1]) + ra.ifaces[0].iface_addr_len + 16;
    uint8_t *b = malloc(t.len[1] + end - start);
    FY_ASSERT(b != NULL);
    memcpy(b, t.addr[1], t.len[1]);
    memcpy(b + t.len[1], t.addr[1] + start, end - start);
    b[5]++;
    plan_to(t.w[0], b, t.len[1] + end - start, &ra, &plan);
    FY_ASSERT_EQ(ra.niface, t.w[1]->nifaces + 1);
    unsigned dups = 0;
    for (unsigned k = 0; k < plan.ncand; k++)
        dups += !plan.cand[k].usable && strstr(plan.cand[k].why, "counted once") != NULL;
    FY_ASSERT_EQ(dups, t.w[0]->nifaces);
    free(b);
    two_close(&t);
}

/* ---- one endpoint per pair --------------------------------------------------------------- */

typedef struct seen {
    ferry_ep_t *ep;
    void *user_data;
    int count;
} seen_t;

static ferry_status_t on_msg(void *arg, const void *hdr, size_t hdr_len, const void *data,
                             size_t len, ferry_ep_t *ep)
{
    (void)hdr, (void)hdr_len, (void)data, (void)len;
    seen_t *s = arg;
    s->ep = ep;
    s->user_data = ferry_ep_get_user_data(ep);
    s->count++;
    return FERRY_OK;
}

static unsigned live_eps(ferry_worker_t *w)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < w->eps_cap; i++)
        n += w->eps[i] != NULL;
    return n;
}

static ferry_ep_t *ep_to(two_t *t, int i, void *user_data)
{
    ferry_ep_t *ep;
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_USER_DATA,
                           .address = t->addr[1 - i],
                           .address_len = t->len[1 - i],
                           .user_data = user_data};
    FY_ASSERT_OK(ferry_ep_create(t->w[i], &p, &ep));
    return ep;
}

static void wait_count(two_t *t, seen_t *s, int n)
{
    for (int spin = 0; spin < 2000000 && s->count < n; spin++) {
        ferry_worker_progress(t->w[0]);
        ferry_worker_progress(t->w[1]);
    }
    FY_ASSERT_EQ(s->count, n);
}

static void crossing(const char *tls)
{
    two_t t;
    seen_t s[2] = {{0}};
    int tag[2];
    two_open(&t, tls);
    two_addrs(&t);
    ferry_ep_t *ep[2];
    for (int i = 0; i < 2; i++) /* both connect before either progresses */
        ep[i] = ep_to(&t, i, &tag[i]);
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_worker_set_am_handler(t.w[i], 3, on_msg, &s[i]));
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_am_send(ep[i], 3, NULL, 0, "x", 1, NULL));
    wait_count(&t, &s[0], 1);
    wait_count(&t, &s[1], 1);
    for (int i = 0; i < 2; i++) {
        FY_ASSERT_MSG(s[i].ep == ep[i], "FERRY_TLS=%s: worker %d's handler got another endpoint",
                      tls, i);
        FY_ASSERT(s[i].user_data == &tag[i]);
        FY_ASSERT_EQ(live_eps(t.w[i]), 1u);
        FY_ASSERT_EQ(ep[i]->state, FY_EP_CONNECTED);
        FY_ASSERT_EQ(ep[i]->remote_id, ep[1 - i]->id);
    }
    /* (force: one thread cannot flush a network lane whose peer it does not progress) */
    for (int i = 0; i < 2; i++)
        FY_ASSERT_OK(ferry_ep_close(ep[i], FERRY_EP_CLOSE_FORCE, NULL));
    two_close(&t);
}

static void simultaneous_connect(void)
{
    crossing("all");
    crossing("shm");
    crossing("udp");
    crossing("tcp");
}

/* A peer connected first: the application's later ferry_ep_create returns the endpoint the
 * handler already had, and from then on the handler sees the application's user data. */
static void reply_ep_adopted(void)
{
    two_t t;
    seen_t s = {0};
    int tag;
    two_open(&t, "^self");
    two_addrs(&t);
    FY_ASSERT_OK(ferry_worker_set_am_handler(t.w[1], 3, on_msg, &s));
    ferry_ep_t *a = ep_to(&t, 0, NULL);
    FY_ASSERT_OK(ferry_am_send(a, 3, NULL, 0, "x", 1, NULL));
    wait_count(&t, &s, 1);
    FY_ASSERT(s.ep != NULL && s.user_data == NULL);
    ferry_ep_t *b = ep_to(&t, 1, &tag);
    FY_ASSERT(b == s.ep);
    FY_ASSERT_EQ(live_eps(t.w[1]), 1u);
    FY_ASSERT_OK(ferry_am_send(a, 3, NULL, 0, "y", 1, NULL));
    wait_count(&t, &s, 2);
    FY_ASSERT(s.ep == b && s.user_data == &tag);
    FY_ASSERT_OK(ferry_ep_close(a, FERRY_EP_CLOSE_FLUSH, NULL));
    FY_ASSERT_OK(ferry_ep_close(b, FERRY_EP_CLOSE_FLUSH, NULL));
    two_close(&t);
}

/* Nothing reaches: the error is FERRY_ERR_UNREACHABLE, not a crash or a hang. */
static void unreachable(void)
{
    two_t t;
    two_open(&t, "shm");
    two_addrs(&t);
    fy_remote_addr_t ra;
    FY_ASSERT_OK(fy_address_unpack(t.addr[1], t.len[1], &ra));
    dev_addr_of(t.addr[1], &ra, "shm")[0] ^= 1;
    ferry_ep_t *ep;
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = t.addr[1], .address_len = t.len[1]};
    FY_ASSERT_STATUS(ferry_ep_create(t.w[0], &p, &ep), FERRY_ERR_UNREACHABLE);
    two_close(&t);
}

static void on_err(void *arg, ferry_ep_t *ep, ferry_status_t st)
{
    (void)ep;
    *(ferry_status_t *)arg = st;
}

/* The peer is gone: each lane fails in its own way (udp: silence; tcp: refused), the endpoint
 * moves from one to the next and fails when none is left, naming each and why. */
static void dead_peer_lists_each(void)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/fylanes-log-%d", (int)getpid());
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FY_ASSERT(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    close(fd);
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1); /* one device each: the listing stays short */
    setenv("FERRY_TCP_IF_INCLUDE", "lo", 1);
    two_t t;
    two_open(&t, "udp,tcp");
    two_addrs(&t);
    ferry_worker_destroy(t.w[1]);
    t.w[1] = NULL;
    ferry_status_t err = FERRY_OK;
    ferry_ep_t *ep;
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_ADDRESS | FERRY_EP_FIELD_ERR_HANDLER,
                           .address = t.addr[1],
                           .address_len = t.len[1],
                           .err_cb = on_err,
                           .err_arg = &err};
    FY_ASSERT_OK(ferry_ep_create(t.w[0], &p, &ep));
    ferry_am_send(ep, 3, NULL, 0, "x", 1, NULL);
    uint64_t deadline = fy_time_ns() + 30 * FY_NSEC_PER_SEC;
    while (err == FERRY_OK && fy_time_ns() < deadline)
        ferry_worker_progress(t.w[0]);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(log, "r");
    FY_ASSERT(f != NULL);
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(log);
    FY_ASSERT_MSG(err == FERRY_ERR_UNREACHABLE, "error %d; log:\n%s", err, text);
    const char *e = strstr(text, "no lane connects: ");
    FY_ASSERT_MSG(e != NULL && strstr(e, "udp 127.0.0.1:") != NULL &&
                      strstr(e, "tcp 127.0.0.1:") != NULL,
                  "log:\n%s", text);
    printf("  %.*s\n", (int)strcspn(e, "\n"), e);
    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    two_close(&t);
}

FYTEST_MAIN(FYTEST_CASE(tls_narrowing), FYTEST_CASE(tcp_wins_bulk_between_hosts),
            FYTEST_CASE(latency_mode_short_udp_bulk_tcp), FYTEST_CASE(both_ends_agree),
            FYTEST_CASE(rma_emulate), FYTEST_CASE(shm_reasons), FYTEST_CASE(duplicates_once),
            FYTEST_CASE(simultaneous_connect), FYTEST_CASE(reply_ep_adopted),
            FYTEST_CASE(unreachable), FYTEST_CASE(dead_peer_lists_each), FYTEST_CASE(cm_narrowing))
