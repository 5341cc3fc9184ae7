/*
 * conf_node.c - the conformance suite's node: open the transport named by conf_tl (after its
 * environment settings), an iface on its device, addresses and eps, and the checked message
 * stream the receive cases use.  Everything asserts: a transport that cannot open is a
 * failed case, not a skipped one.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the assertion macros of the harness, without its main */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "conf.h"
#include "fytest.h"

int conf_in_call;

void conf_env(void)
{
    for (size_t i = 0; conf_tl.env != NULL && conf_tl.env[i] != NULL; i++) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", conf_tl.env[i]);
        char *eq = strchr(buf, '=');
        FY_ASSERT(eq != NULL);
        *eq = '\0';
        setenv(buf, eq + 1, 0); /* an explicit setting in the environment wins */
    }
}

static void node_am(void *arg, uint8_t id, const void *data, size_t len)
{
    conf_node_t *n = arg;
    FY_ASSERT_MSG(!conf_in_call, "am_cb ran inside a send, RMA or flush call");
    n->rx_msgs++;
    n->rx_bytes += len;
    if (n->on_am != NULL)
        n->on_am(n, id, data, len);
}

static void node_err(void *arg, fy_tl_ep_t *ep, ferry_status_t st)
{
    conf_node_t *n = arg;
    FY_ASSERT_MSG(!conf_in_call, "err_cb ran inside a send, RMA or flush call");
    n->nerr++;
    n->err_ep = ep;
    n->err_st = st;
    if (n->on_err != NULL)
        n->on_err(n, ep, st);
}

void conf_open(conf_node_t *n)
{
    static uint64_t uuid_seq;
    memset(n, 0, sizeof(*n));
    conf_env();
    n->tl = fy_tl_find(conf_tl.name);
    FY_ASSERT_MSG(n->tl != NULL, "transport %s is not built in", conf_tl.name);
    n->ops = n->tl->ops;
    n->on_am = conf_msg_check;
    FY_ASSERT_OK(n->ops->md_open(n->tl, &n->md));
    fy_tl_device_t devs[8];
    unsigned count = 0;
    FY_ASSERT_OK(n->ops->query_devices(n->md, devs, 8, &count));
    FY_ASSERT_MSG(count > 0, "%s: no device", conf_tl.name);
    const char *dev = conf_tl.device != NULL ? conf_tl.device : devs[0].name;
    fy_tl_iface_params_t p = {
        .device = dev,
        .am_cb = node_am,
        .am_arg = n,
        .err_cb = node_err,
        .err_arg = n,
        .job_key = 0x636f6e666f726d31ull,
        .worker_uuid = ((uint64_t)getpid() << 20) + ++uuid_seq,
    };
    FY_ASSERT_OK(n->ops->iface_open(n->md, &p, &n->iface));
    n->ops->iface_query(n->iface, &n->attr);
    FY_ASSERT(n->attr.device_addr_len + n->attr.iface_addr_len <= CONF_ADDR_MAX);
}

void conf_close(conf_node_t *n)
{
    n->ops->iface_close(n->iface);
    n->ops->md_close(n->md);
}

void conf_addr(conf_node_t *n, conf_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    a->dlen = (uint32_t)n->attr.device_addr_len;
    a->ilen = (uint32_t)n->attr.iface_addr_len;
    FY_ASSERT_OK(n->ops->iface_get_address(n->iface, a->bytes, a->bytes + a->dlen));
}

fy_tl_ep_t *conf_connect(conf_node_t *n, const conf_addr_t *a)
{
    FY_ASSERT(n->ops->iface_is_reachable(n->iface, a->bytes, a->bytes + a->dlen));
    fy_tl_ep_t *ep = NULL;
    FY_ASSERT_OK(n->ops->ep_create(n->iface, a->bytes, a->bytes + a->dlen, &ep));
    FY_ASSERT(ep != NULL);
    return ep;
}

unsigned conf_progress(conf_node_t *n)
{
    return n->ops->iface_progress(n->iface);
}

static void comp_cb(fy_tl_comp_t *c, ferry_status_t st)
{
    conf_comp_t *t = (conf_comp_t *)c;
    FY_ASSERT_MSG(!conf_in_call, "a completion ran inside a send, RMA or flush call");
    FY_ASSERT_MSG(t->calls == 0, "a completion called twice (first %s, then %s)",
                  ferry_status_string(t->st), ferry_status_string(st));
    FY_ASSERT_MSG(st != FERRY_INPROGRESS, "a completion called with FERRY_INPROGRESS");
    t->calls++;
    t->st = st;
    if (t->then != NULL)
        t->then(t);
}

void conf_comp_init(conf_comp_t *c)
{
    memset(c, 0, sizeof(*c));
    c->super.cb = comp_cb;
    c->st = FERRY_INPROGRESS;
}

void conf_fill(void *buf, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (unsigned char)(x >> ((i & 7) * 8));
    }
}

long conf_diff(const void *buf, size_t len, uint64_t seed)
{
    const unsigned char *p = buf;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        if (p[i] != (unsigned char)(x >> ((i & 7) * 8)))
            return (long)i;
    }
    return -1;
}

void conf_msg_fill(void *buf, size_t len, uint32_t seq)
{
    FY_ASSERT(len >= CONF_MSG_HDR);
    uint32_t h[2] = {seq, (uint32_t)len};
    memcpy(buf, h, sizeof(h));
    conf_fill((char *)buf + CONF_MSG_HDR, len - CONF_MSG_HDR, seq);
}

void conf_msg_check(conf_node_t *n, uint8_t id, const void *data, size_t len)
{
    (void)id;
    if (n->rx_bad)
        return;
    uint32_t h[2];
    if (len < CONF_MSG_HDR) {
        n->rx_bad = 1;
        snprintf(n->rx_why, sizeof(n->rx_why), "message %" PRIu64 ": %zu bytes", n->rx_expect, len);
        return;
    }
    memcpy(h, data, sizeof(h));
    if (h[0] != (uint32_t)n->rx_expect || h[1] != len) {
        n->rx_bad = 1;
        snprintf(n->rx_why, sizeof(n->rx_why),
                 "expected message %" PRIu64 ", got %u of %u bytes (%zu arrived)", n->rx_expect,
                 h[0], h[1], len);
        return;
    }
    long d = conf_diff((const char *)data + CONF_MSG_HDR, len - CONF_MSG_HDR, h[0]);
    if (d >= 0) {
        n->rx_bad = 1;
        snprintf(n->rx_why, sizeof(n->rx_why), "message %u (%zu bytes) differs at byte %ld", h[0],
                 len, d + CONF_MSG_HDR);
        return;
    }
    n->rx_expect++;
}
