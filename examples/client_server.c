/*
 * client_server.c - a client and a server that find each other by ip:port, with no launcher:
 * the server listens (ferry_listener_create) and accepts each connection request by making an
 * endpoint from it; the client makes its endpoint from the server's ip:port.  The client sends
 * a few messages, the server echoes each back on the endpoint it accepted, and the client
 * checks them.  Uses only the public API.
 *
 *     ./client_server server [ip] [port]        (port 0 or absent: any; printed)
 *     ./client_server client ip port [count]
 */
#include <ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <time.h>

enum { AM_ECHO = 1, AM_ECHOED = 2 };

typedef struct server {
    ferry_worker_t *w;
    ferry_listener_t *l;
    ferry_ep_t *client; /* the endpoint made from the latest accepted request */
} server_t;

static void on_conn(ferry_conn_request_t *req, void *arg)
{
    server_t *s = arg;
    char peer[64] = "?";
    ferry_conn_request_peer(req, peer, sizeof(peer));
    if (s->client != NULL) { /* one client at a time in this example */
        printf("server: rejecting %s (busy)\n", peer);
        ferry_listener_reject(s->l, req);
        return;
    }
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_CONN_REQUEST, .conn_request = req};
    ferry_status_t st = ferry_ep_create(s->w, &p, &s->client);
    printf("server: connection from %s: %s\n", peer, ferry_status_string(st));
}

static ferry_status_t on_echo(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                              ferry_ep_t *reply)
{
    server_t *s = arg;
    (void)reply;
    if (s->client == NULL)
        return FERRY_OK;
    if (hl == 0) { /* an empty header says goodbye */
        ferry_ep_close(s->client, FERRY_EP_CLOSE_FORCE, NULL);
        s->client = NULL;
        return FERRY_OK;
    }
    return ferry_am_send(s->client, AM_ECHOED, h, hl, d, dl, NULL);
}

static int run_server(const char *ip, unsigned port)
{
    ferry_context_t *ctx;
    server_t s = {0};
    if (ferry_context_create(NULL, &ctx) != FERRY_OK ||
        ferry_worker_create(ctx, NULL, &s.w) != FERRY_OK)
        return 1;
    ferry_worker_set_am_handler(s.w, AM_ECHO, on_echo, &s);
    ferry_listener_params_t lp = {.field_mask = FERRY_LISTENER_FIELD_SOCKADDR |
                                                FERRY_LISTENER_FIELD_CONN_HANDLER,
                                  .ip = ip,
                                  .port = (uint16_t)port,
                                  .conn_cb = on_conn,
                                  .conn_arg = &s};
    ferry_status_t st = ferry_listener_create(s.w, &lp, &s.l);
    if (st != FERRY_OK) {
        fprintf(stderr, "server: cannot listen: %s\n", ferry_status_string(st));
        return 1;
    }
    ferry_listener_attr_t attr;
    ferry_listener_query(s.l, &attr);
    printf("server: listening on %s:%u\n", ip != NULL ? ip : "*", (unsigned)attr.port);
    fflush(stdout);
    for (;;) /* serve until killed */
        ferry_worker_wait(s.w, -1);
}

typedef struct client {
    unsigned got;
    int bad;
} client_t;

static ferry_status_t on_echoed(void *arg, const void *h, size_t hl, const void *d, size_t dl,
                                ferry_ep_t *reply)
{
    client_t *c = arg;
    (void)reply;
    unsigned seq;
    if (hl != sizeof(seq) || dl != 4096)
        c->bad = 1;
    memcpy(&seq, h, sizeof(seq));
    for (size_t i = 0; i < dl; i++)
        if (((const unsigned char *)d)[i] != (unsigned char)(seq + i))
            c->bad = 1;
    c->got++;
    return FERRY_OK;
}

static int run_client(const char *ip, unsigned port, unsigned count)
{
    ferry_context_t *ctx;
    ferry_worker_t *w;
    client_t c = {0};
    if (ferry_context_create(NULL, &ctx) != FERRY_OK ||
        ferry_worker_create(ctx, NULL, &w) != FERRY_OK)
        return 1;
    ferry_worker_set_am_handler(w, AM_ECHOED, on_echoed, &c);
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_SOCKADDR, .sockaddr_ip = ip, .sockaddr_port = (uint16_t)port};
    ferry_ep_t *ep;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ferry_status_t st = ferry_ep_create(w, &p, &ep);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != FERRY_OK) {
        fprintf(stderr, "client: cannot connect to %s:%u: %s\n", ip, port, ferry_status_string(st));
        return 1;
    }
    printf("client: endpoint to %s:%u in %.0f us\n", ip, port,
           (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3);
    unsigned char buf[4096];
    for (unsigned seq = 0; seq < count; seq++) {
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = (unsigned char)(seq + i);
        ferry_am_send(ep, AM_ECHO, &seq, sizeof(seq), buf, sizeof(buf), NULL);
    }
    while (c.got < count && ferry_worker_wait(w, 10000) == FERRY_OK) {
    }
    ferry_am_send(ep, AM_ECHO, NULL, 0, NULL, 0, NULL); /* goodbye */
    ferry_ep_flush(ep, NULL);
    printf("client: %u of %u echoes back, %s\n", c.got, count, c.bad ? "CORRUPT" : "intact");
    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    return c.got == count && !c.bad ? 0 : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "server") == 0)
        return run_server(argc > 2 ? argv[2] : NULL, argc > 3 ? (unsigned)atoi(argv[3]) : 0);
    if (argc >= 4 && strcmp(argv[1], "client") == 0)
        return run_client(argv[2], (unsigned)atoi(argv[3]),
                          argc > 4 ? (unsigned)atoi(argv[4]) : 100);
    fprintf(stderr, "usage: %s server [ip] [port] | client ip port [count]\n", argv[0]);
    return 2;
}
