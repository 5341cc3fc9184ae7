/*
 * ferryrun.h - what ferryrun.c (processes, output, signals) and ferryrun_server.c (the
 * key-value server of the builtin bootstrap) share: one epoll set, whose events carry a
 * kind and an index in their 64-bit user data.
 */
#ifndef FERRYRUN_H
#define FERRYRUN_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

enum fy_run_ev_kind {
    FY_RUN_EV_SIGNAL = 1, /* the signalfd */
    FY_RUN_EV_STDOUT,     /* index: rank */
    FY_RUN_EV_STDERR,     /* index: rank */
    FY_RUN_EV_LISTEN,     /* the server's listening socket */
    FY_RUN_EV_CONN,       /* index: a server connection slot */
};

#define FY_RUN_EV(kind, idx) (((uint64_t)(kind) << 32) | (uint32_t)(idx))
#define FY_RUN_EV_KIND(u)    ((unsigned)((u) >> 32))
#define FY_RUN_EV_IDX(u)     ((uint32_t)(u))

typedef struct fy_run_server fy_run_server_t;

/* Where the next fy_run_server_create listens: an IPv4 address the hosts of the job reach, and a
 * port (0: ephemeral).  Without this call: 127.0.0.1. */
void fy_run_server_listen_on(struct in_addr ip, unsigned port);
/*
 * Listen on 127.0.0.1 (an ephemeral port; see fy_run_server_listen_on) for the `size` ranks of a
 * job with this key, and register with epfd.  Writes "ip:port" to addr.  Returns 0, or -1 with a
 * message printed.
 */
int fy_run_server_create(int size, const char *job_key, int epfd, char *addr, size_t addrlen,
                         fy_run_server_t **srv_p);
/* Handle an epoll event whose kind is FY_RUN_EV_LISTEN or FY_RUN_EV_CONN. */
void fy_run_server_event(fy_run_server_t *srv, uint64_t data, uint32_t events);
/* A rank's process ended (`how` e.g. "exited with status 1"): fences it has not joined fail
 * at once instead of waiting for it. */
void fy_run_server_rank_exited(fy_run_server_t *srv, int rank, const char *how);
void fy_run_server_destroy(fy_run_server_t *srv);

#endif
