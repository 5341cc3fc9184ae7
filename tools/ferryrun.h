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
    FY_RUN_EV_TIMER,      /* the server's timer (HELLO timeouts, accept back-off) */
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
 * job with this key, and register with epfd.  Only connections that prove `secret`
 * (FERRY_BOOT_SECRET) in their HELLO are served.  Writes "ip:port" to addr.  Returns 0, or -1
 * with a message printed.
 */
int fy_run_server_create(int size, const char *job_key, const char *secret, int epfd, char *addr,
                         size_t addrlen, fy_run_server_t **srv_p);
/* Handle an epoll event whose kind is FY_RUN_EV_LISTEN, FY_RUN_EV_CONN or FY_RUN_EV_TIMER. */
void fy_run_server_event(fy_run_server_t *srv, uint64_t data, uint32_t events);
/* A rank's process ended (`how` e.g. "exited with status 1"): fences it has not joined fail
 * at once instead of waiting for it. */
void fy_run_server_rank_exited(fy_run_server_t *srv, int rank, const char *how);
void fy_run_server_destroy(fy_run_server_t *srv);

/* ---- hosts (ferryrun_hosts.c) ------------------------------------------------------------ */

typedef struct fy_run_host {
    char *name;
    int slots;
    int used;  /* ranks placed on it */
    int local; /* this machine: started directly, not through the agent */
} fy_run_host_t;

typedef struct fy_run_hosts {
    fy_run_host_t *v;
    int n;
} fy_run_hosts_t;

/* Append the hosts of "h1:2,h2" (--hosts) or of a hostfile (a host a line, "host[:n]" or
 * "host slots=n", # comments); slots 1..max_slots, default 1.  0, or -1 with a message. */
int fy_run_hosts_parse(fy_run_hosts_t *hs, const char *list, int max_slots);
int fy_run_hosts_read(fy_run_hosts_t *hs, const char *path, int max_slots);
void fy_run_hosts_free(fy_run_hosts_t *hs);

/*
 * Where the bootstrap server listens, from --boot-addr (`spec`: an IPv4 address or an
 * interface name, optionally ":PORT"; NULL = guess).  With remote hosts in use (used > 0, not
 * local), the guess is the local end of the route to the first one that resolves, else the
 * first interface that is up and not loopback.  *ip = 0.0.0.0 means 127.0.0.1 (no remote
 * host, nothing given).  0, or -1 with a message.
 */
int fy_run_boot_addr(const char *spec, const fy_run_hosts_t *hs, struct in_addr *ip,
                     unsigned *port);

/* What a remote rank's command line carries, in this order (env(1) lets a later one win):
 * every FERRY_* variable of our environment, the -x names (NAME: our value, skipped when
 * unset; NAME=VALUE), vars (ferryrun's own), envs (--env), then the program and its args. */
typedef struct fy_run_remote {
    char **vars;
    size_t nvars;
    char **envs;
    size_t nenvs;
    char **xnames;
    size_t nx;
    char **argv;
} fy_run_remote_t;

/* The bootstrap's secret: never on a remote rank's command line, always on its stdin. */
#define FY_RUN_SECRET_VAR "FERRY_BOOT_SECRET"

/* "IFS= read -r FERRY_BOOT_SECRET && export FERRY_BOOT_SECRET; cd 'CWD' 2>/dev/null; exec env
 * 'K=V'... 'prog' 'args'...", quoted for sh, without any FERRY_BOOT_SECRET=...: the agent's
 * stdin carries the secret and a newline.  NULL if out of memory.  The caller frees it. */
char *fy_run_remote_command(const fy_run_remote_t *r);
/* argv of the agent: the words of `agent` (split at blanks), the host, the command.  Free the
 * array and *words_p (which the words point into). */
char **fy_run_agent_argv(const char *agent, const char *host, char *command, char **words_p);

/* "ferryrun: ..." and a newline on stderr in one write(2), so it does not mix with rank
 * output (ferryrun_hosts.c). */
void fy_run_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
