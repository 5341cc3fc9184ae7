/*
 * ferryrun_hosts.c - what ferryrun needs to start a job across hosts: the host list (--hosts,
 * --hostfile), the address its bootstrap server listens on (--boot-addr, or a guess), and
 * the command line an ssh-like agent runs on a host.
 *
 * The agent is given one string, run there by sh -c (as ssh does), so every word is single-
 * quoted; the rank's environment travels inside it, through env(1), because an agent such as
 * ssh passes none of ours.  All but the job's secret: a command line is visible to every user
 * of the host (ps), so the secret is the first line of the agent's stdin, which ssh carries to
 * the remote command, and the remote shell reads it into the rank's environment.  The bootstrap
 * address must be one the hosts can reach: the local end of the route to the first remote host is
 * what they will see when they connect back, so it is the first guess; host names that do not
 * resolve here (the testbed's) leave the first interface that is up and not loopback.  Errors are
 * printed here, one line each, as ferryrun prints its own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferryrun.h"

extern char **environ;

/* "ferryrun: ..." on stderr in one write(2), so that it does not mix with rank output. */
void fy_run_say(const char *fmt, ...)
{
    char line[2048];
    int n = snprintf(line, sizeof(line), "ferryrun: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}

/* ---- the host list ----------------------------------------------------------------------- */

/* One host entry "name[:slots]" (or, from a hostfile, "name slots=N"); `where` for errors. */
static int add_host(fy_run_hosts_t *hs, const char *spec, const char *where, int max_slots)
{
    char name[256];
    long slots = 1;
    const char *sep = strpbrk(spec, ": \t");
    size_t nl = sep ? (size_t)(sep - spec) : strlen(spec);
    if (nl == 0 || nl >= sizeof(name)) {
        fy_run_say("%s: \"%s\": expected host[:slots]", where, spec);
        return -1;
    }
    memcpy(name, spec, nl);
    name[nl] = '\0';
    for (size_t i = 0; i < nl; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (!(ch == '.' || ch == '-' || ch == '_' || ch == '@' || (ch >= '0' && ch <= '9') ||
              (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))) {
            fy_run_say("%s: host name \"%s\": only letters, digits and . - _ @ are allowed", where,
                       name);
            return -1;
        }
    }
    if (sep != NULL) {
        const char *num = sep + 1;
        if (*sep != ':') {
            num += strspn(num, " \t");
            if (strncmp(num, "slots=", 6) != 0) {
                fy_run_say("%s: \"%s\": expected host[:slots] or \"host slots=N\"", where, spec);
                return -1;
            }
            num += 6;
        }
        char *end;
        errno = 0;
        slots = strtol(num, &end, 10);
        end += strspn(end, " \t\r");
        if (*num == '\0' || *end != '\0' || errno != 0 || slots < 1 || slots > max_slots) {
            fy_run_say("%s: \"%s\": the slots must be an integer from 1 to %d", where, spec,
                       max_slots);
            return -1;
        }
    }
    fy_run_host_t *h = realloc(hs->v, (size_t)(hs->n + 1) * sizeof(*h));
    if (h == NULL) {
        fy_run_say("out of memory");
        return -1;
    }
    hs->v = h;
    h[hs->n] = (fy_run_host_t){.name = strdup(name), .slots = (int)slots};
    if (h[hs->n].name == NULL) {
        fy_run_say("out of memory");
        return -1;
    }
    hs->n++;
    return 0;
}

int fy_run_hosts_parse(fy_run_hosts_t *hs, const char *list, int max_slots)
{
    char *copy = strdup(list), *save = NULL;
    if (copy == NULL)
        return -1;
    int rc = 0, any = 0;
    for (char *t = strtok_r(copy, ",", &save); t != NULL && rc == 0;
         t = strtok_r(NULL, ",", &save)) {
        rc = add_host(hs, t, "--hosts", max_slots);
        any = 1;
    }
    free(copy);
    if (rc == 0 && !any) {
        fy_run_say("--hosts \"%s\": no host in it", list);
        rc = -1;
    }
    return rc;
}

int fy_run_hosts_read(fy_run_hosts_t *hs, const char *path, int max_slots)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fy_run_say("--hostfile %s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024], where[1100];
    int rc = 0, lineno = 0, before = hs->n;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        char *b = line + strspn(line, " \t");
        size_t l = strlen(b);
        while (l > 0 &&
               (b[l - 1] == '\n' || b[l - 1] == '\r' || b[l - 1] == ' ' || b[l - 1] == '\t'))
            b[--l] = '\0';
        if (l == 0)
            continue;
        snprintf(where, sizeof(where), "%s:%d", path, lineno);
        rc = add_host(hs, b, where, max_slots);
    }
    fclose(f);
    if (rc == 0 && hs->n == before) {
        fy_run_say("--hostfile %s: no host in it", path);
        rc = -1;
    }
    return rc;
}

void fy_run_hosts_free(fy_run_hosts_t *hs)
{
    for (int i = 0; i < hs->n; i++)
        free(hs->v[i].name);
    free(hs->v);
    hs->v = NULL;
    hs->n = 0;
}

/* ---- the bootstrap's address ------------------------------------------------------------- */

/* The IPv4 address of interface `name` (NULL: the first that is up and not loopback); the
 * names of the interfaces with one go to `names`. */
static int iface_addr(const char *name, struct in_addr *ip, char *names, size_t nn)
{
    struct ifaddrs *ifa = NULL;
    int found = 0;
    size_t o = 0;
    if (getifaddrs(&ifa) != 0)
        return 0;
    for (struct ifaddrs *i = ifa; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
            continue;
        if (names != NULL && o + strlen(i->ifa_name) + 2 < nn)
            o += (size_t)snprintf(names + o, nn - o, "%s%s", o ? " " : "", i->ifa_name);
        int pick = name != NULL ? strcmp(i->ifa_name, name) == 0
                                : (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK);
        if (pick && !found) {
            *ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
            found = 1;
        }
    }
    freeifaddrs(ifa);
    return found;
}

/* The local address a packet to `host` leaves from (no packet is sent); 0 if none. */
static int route_source(const char *host, struct in_addr *ip)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
    if (getaddrinfo(host, "9", &hints, &ai) != 0 || ai == NULL)
        return 0;
    int ok = 0, fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&sin, &sl) == 0 && sin.sin_addr.s_addr != 0 &&
        (ntohl(sin.sin_addr.s_addr) >> 24) != 127) {
        *ip = sin.sin_addr;
        ok = 1;
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return ok;
}

/*
 * Where the bootstrap server listens.  --boot-addr is an IPv4 address or an interface name,
 * optionally with :PORT.  Without it, a job with remote hosts listens on the local address
 * that routes to the first remote host that resolves, else on the first interface that is up
 * and not loopback; a job on this machine alone stays on 127.0.0.1.
 */
int fy_run_boot_addr(const char *spec, const fy_run_hosts_t *hs, struct in_addr *ip_p,
                     unsigned *port_p)
{
    struct in_addr ip = {.s_addr = 0};
    unsigned port = 0;
    int any_remote = 0;
    for (int i = 0; i < hs->n; i++)
        any_remote |= hs->v[i].used > 0 && !hs->v[i].local;
    if (spec != NULL) {
        char head[128];
        const char *colon = strrchr(spec, ':');
        size_t hl = colon ? (size_t)(colon - spec) : strlen(spec);
        if (colon != NULL) {
            char *end;
            errno = 0;
            long p = strtol(colon + 1, &end, 10);
            if (colon[1] == '\0' || *end != '\0' || errno != 0 || p < 0 || p > 65535) {
                fy_run_say("--boot-addr %s: the port must be an integer from 0 to 65535", spec);
                return -1;
            }
            port = (unsigned)p;
        }
        if (hl == 0 || hl >= sizeof(head)) {
            fy_run_say("--boot-addr %s: expected an IPv4 address or an interface name, and :PORT",
                       spec);
            return -1;
        }
        memcpy(head, spec, hl);
        head[hl] = '\0';
        char names[512] = "";
        if (inet_pton(AF_INET, head, &ip) != 1 && !iface_addr(head, &ip, names, sizeof(names))) {
            fy_run_say(
                "--boot-addr %s: \"%s\" is neither an IPv4 address nor an interface with one "
                "(interfaces with IPv4 here: %s)",
                spec, head, names[0] ? names : "none");
            return -1;
        }
        if (ip.s_addr == 0) {
            fy_run_say("--boot-addr %s: the ranks connect to this address: give one they can reach",
                       spec);
            return -1;
        }
    } else if (any_remote) {
        int found = 0;
        for (int i = 0; i < hs->n && !found; i++)
            if (!hs->v[i].local && hs->v[i].used > 0)
                found = route_source(hs->v[i].name, &ip);
        if (!found && !iface_addr(NULL, &ip, NULL, 0)) {
            fy_run_say(
                "no interface here but loopback: the hosts cannot reach the bootstrap server; "
                "give --boot-addr");
            return -1;
        }
    }
    *ip_p = ip;
    *port_p = port;
    return 0;
}

/* ---- the agent's command line ----------------------------------------------------------- */

/* Append s to *buf in single quotes, for the remote shell. */
static int append_quoted(char **buf, size_t *len, size_t *cap, const char *s, int quote)
{
    size_t need = *len + 4 * strlen(s) + 4;
    if (need > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < need)
            nc *= 2;
        char *b = realloc(*buf, nc);
        if (b == NULL)
            return -1;
        *buf = b;
        *cap = nc;
    }
    char *o = *buf + *len;
    if (*len > 0)
        *o++ = ' ';
    if (quote)
        *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'' && quote) {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    if (quote)
        *o++ = '\'';
    *o = '\0';
    *len = (size_t)(o - *buf);
    return 0;
}

/* The job's secret never goes on the command line (any user of the host sees it in ps): it
 * is the first line of the agent's stdin, read there by the shell into the environment. */
static int is_secret(const char *kv)
{
    return strncmp(kv, FY_RUN_SECRET_VAR "=", sizeof(FY_RUN_SECRET_VAR)) == 0;
}

char *fy_run_remote_command(const fy_run_remote_t *r)
{
    char *b = NULL, cwd[4096];
    size_t len = 0, cap = 0;
    int rc = 0;
    rc |= append_quoted(&b, &len, &cap,
                        "IFS= read -r " FY_RUN_SECRET_VAR " && export " FY_RUN_SECRET_VAR ";", 0);
    if (getcwd(cwd, sizeof(cwd)) != NULL) {
        rc |= append_quoted(&b, &len, &cap, "cd", 0);
        rc |= append_quoted(&b, &len, &cap, cwd, 1);
        rc |= append_quoted(&b, &len, &cap, "2>/dev/null;", 0);
    }
    rc |= append_quoted(&b, &len, &cap, "exec env", 0);
    for (size_t i = 0; environ[i] != NULL; i++)
        if (strncmp(environ[i], "FERRY_", 6) == 0 && strchr(environ[i], '=') != NULL &&
            !is_secret(environ[i]))
            rc |= append_quoted(&b, &len, &cap, environ[i], 1);
    for (size_t i = 0; i < r->nx; i++) {
        const char *x = r->xnames[i], *v = getenv(x);
        if (strchr(x, '=') != NULL) {
            if (!is_secret(x))
                rc |= append_quoted(&b, &len, &cap, x, 1);
            continue;
        }
        if (v == NULL || strcmp(x, FY_RUN_SECRET_VAR) == 0)
            continue; /* not set here: not set there; the secret: on stdin */
        char *kv = malloc(strlen(x) + strlen(v) + 2);
        if (kv == NULL) {
            rc = -1;
            break;
        }
        sprintf(kv, "%s=%s", x, v);
        rc |= append_quoted(&b, &len, &cap, kv, 1);
        free(kv);
    }
    for (size_t i = 0; i < r->nvars; i++)
        if (!is_secret(r->vars[i]))
            rc |= append_quoted(&b, &len, &cap, r->vars[i], 1);
    for (size_t i = 0; i < r->nenvs; i++)
        if (!is_secret(r->envs[i]))
            rc |= append_quoted(&b, &len, &cap, r->envs[i], 1);
    for (char **a = r->argv; *a != NULL; a++)
        rc |= append_quoted(&b, &len, &cap, *a, 1);
    if (rc != 0) {
        free(b);
        return NULL;
    }
    return b;
}

char **fy_run_agent_argv(const char *agent, const char *host, char *command, char **words_p)
{
    size_t nw = 0, cap = 8;
    char **v = malloc(cap * sizeof(*v));
    char *copy = strdup(agent), *save = NULL;
    if (v == NULL || copy == NULL)
        goto oom;
    for (char *t = strtok_r(copy, " \t", &save); t != NULL; t = strtok_r(NULL, " \t", &save)) {
        if (nw + 4 > cap) {
            char **n = realloc(v, (cap *= 2) * sizeof(*v));
            if (n == NULL)
                goto oom;
            v = n;
        }
        v[nw++] = t;
    }
    v[nw++] = (char *)host;
    v[nw++] = command;
    v[nw] = NULL;
    *words_p = copy; /* the words of v point into it */
    return v;
oom:
    free(v);
    free(copy);
    return NULL;
}
