/*
 * ferryrun.c - start N processes of a program, on this machine or across hosts, as one ferry
 * job.
 *
 *   ferryrun -n N [--timeout S] [--prefix] [--env K=V]... [--] program [args...]
 *   ferryrun --hosts h1:2,h2:2 | --hostfile F [--agent PROG] [--boot-addr A] [-x NAME]... ...
 *
 * ferryrun runs the builtin bootstrap's key-value server (ferryrun_server.c) on 127.0.0.1
 * (or, for a job across hosts, on an address the hosts reach) and gives every rank
 * FERRY_BOOT_ADDR, FERRY_RANK, FERRY_SIZE, FERRY_LOCAL_RANK, FERRY_LOCAL_SIZE (per host) and
 * FERRY_JOB_KEY.  A rank on another host (ferryrun_hosts.c) is one agent process here ("PROG HOST
 * command", ssh by default): its command line carries the environment (every FERRY_* variable of
 * ours, the -x names, --env), the agent's output and exit status stand for the rank's, and ending
 * the agent ends the rank (as far as the agent passes that on: tests/hosts/tb-agent becomes
 * the rank itself; ssh closes the connection).  Everything is one epoll loop in one thread: the
 * server's sockets, a pipe per rank for stdout and one for stderr, and a signalfd for SIGCHLD and
 * the signals to pass on.  Nothing ever waits with sleep: a rank is ready when it connects, done
 * when SIGCHLD says so.
 *
 * Policy:
 *   - each rank runs in its own process group, so a rank and whatever it started can be
 *     signalled together, and dies with ferryrun (PR_SET_PDEATHSIG); stdin is /dev/null;
 *   - output is forwarded whole lines at a time (a line never mixes two ranks), with
 *     "[rank] " in front of each line under --prefix;
 *   - the first rank that exits non-zero or dies by a signal is reported (rank, pid, exit
 *     status or signal name), every other rank gets SIGTERM, and SIGKILL 0.5 s later;
 *     ferryrun's status is that first failure (128+signal for a signal), else 0;
 *   - SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to ferryrun go to every rank (a second one, or
 *     0.5 s without effect, brings SIGKILL); ferryrun then returns 128+signal;
 *   - --timeout S ends a job that runs longer, with a message listing the ranks still running,
 *     and status 124 (as timeout(1) does).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferry.h"
#include "ferryrun.h"

#define MAX_RANKS      65536
#define KILL_GRACE_MS  500         /* SIGTERM, then SIGKILL this much later */
#define LINE_MAX_HELD  (64 * 1024) /* a longer "line" is forwarded in pieces */
#define STATUS_TIMEOUT 124

extern char **environ;

typedef struct stream {
    int fd;   /* read end of the rank's pipe, -1 once closed */
    int dest; /* 1 or 2 */
    int at_line_start;
    char *buf;
    size_t len;
} stream_t;

typedef struct rank_proc {
    pid_t pid;
    int alive;
    int host;                   /* index in opt.hosts, -1 without --hosts */
    int local_rank, local_size; /* on its host */
    stream_t out, err;
} rank_proc_t;

typedef struct opts {
    int n;
    double timeout_s;
    int prefix;
    char **envs;
    size_t nenvs;
    char **argv;           /* program and its arguments */
    fy_run_hosts_t hosts;  /* --hosts, --hostfile */
    const char *agent;     /* --agent, "ssh" by default */
    const char *boot_addr; /* --boot-addr */
    char **xnames;         /* -x NAME or NAME=VALUE */
    size_t nx;
} opts_t;

static opts_t opt;
static rank_proc_t *ranks;
static int nalive;
static int epfd = -1;
static int exit_status;     /* the first failure's status; 0 while all is well */
static int aborting;        /* ending the job: no more failure reports */
static uint64_t kill_at_ns; /* when to send SIGKILL (0 = not planned) */
static char *scratch;       /* output assembly */
static size_t scratch_cap;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ferryrun -n N [options] [--] program [args...]\n"
            "       ferryrun --hosts h1:2,h2:2 [options] [--] program [args...]\n"
            "Start N processes of program as one ferry job (builtin bootstrap), on this\n"
            "machine or on the hosts given, through an ssh-like agent.\n"
            "\n"
            "  -n, -np N          number of ranks (1..%d; with hosts: at most their slots,\n"
            "                     default all of them)\n"
            "  --timeout S        end the job after S seconds (status %d)\n"
            "  --prefix           prefix every output line with \"[rank] \"\n"
            "  --env K=V          set K=V in every rank's environment (repeatable)\n"
            "  --hosts LIST       host[:slots],... (slots default 1); ranks fill hosts in order\n"
            "  --hostfile FILE    the same, one host per line: \"host[:slots]\" or\n"
            "                     \"host slots=N\"; # starts a comment\n"
            "  --agent PROG       run \"PROG HOST command\" to start a rank on HOST (default\n"
            "                     ssh; PROG may carry options: \"ssh -o BatchMode=yes\");\n"
            "                     \"localhost\" and this machine's name are started directly\n"
            "  --boot-addr A      the bootstrap server listens on A: an IPv4 address or an\n"
            "                     interface name, optionally :PORT (default with remote hosts:\n"
            "                     the local address that routes to the first of them, else the\n"
            "                     first interface that is up and not loopback)\n"
            "  -x NAME[=VALUE]    pass NAME (with our value, or VALUE) to remote ranks too;\n"
            "                     every FERRY_* variable of ours is passed anyway\n"
            "  -h, --help         this text\n"
            "\n"
            "The ranks get FERRY_BOOT_ADDR, FERRY_RANK, FERRY_SIZE, FERRY_LOCAL_RANK,\n"
            "FERRY_LOCAL_SIZE (per host) and FERRY_JOB_KEY.  If a rank fails, the others are\n"
            "ended and ferryrun returns the failed rank's status (128+signal if it was\n"
            "killed; a remote rank's status is its agent's).\n",
            MAX_RANKS, STATUS_TIMEOUT);
}

static int push_ptr(char ***arr, size_t *n, char *p)
{
    char **a = realloc(*arr, (*n + 1) * sizeof(*a));
    if (a == NULL) {
        fy_run_say("out of memory");
        return -1;
    }
    *arr = a;
    a[(*n)++] = p;
    return 0;
}

static int parse_args(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"np", required_argument, NULL, 'n'},    {"timeout", required_argument, NULL, 't'},
        {"prefix", no_argument, NULL, 'p'},      {"env", required_argument, NULL, 'e'},
        {"hosts", required_argument, NULL, 'H'}, {"hostfile", required_argument, NULL, 'F'},
        {"agent", required_argument, NULL, 'a'}, {"boot-addr", required_argument, NULL, 'b'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    opt.n = 0;
    opt.agent = "ssh";
    int c;
    /* "+": stop at the first non-option, which is the program */
    while ((c = getopt_long_only(argc, argv, "+n:x:h", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'n': {
            errno = 0;
            long n = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || errno != 0 || n < 1 || n > MAX_RANKS) {
                fy_run_say("-n %s: the number of ranks must be an integer from 1 to %d", optarg,
                           MAX_RANKS);
                return -1;
            }
            opt.n = (int)n;
            break;
        }
        case 't': {
            errno = 0;
            double t = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || errno != 0 || !(t > 0) || t > 1e9) {
                fy_run_say("--timeout %s: expected a positive number of seconds", optarg);
                return -1;
            }
            opt.timeout_s = t;
            break;
        }
        case 'p':
            opt.prefix = 1;
            break;
        case 'e': {
            const char *eq = strchr(optarg, '=');
            if (eq == NULL || eq == optarg) {
                fy_run_say("--env %s: expected NAME=VALUE", optarg);
                return -1;
            }
            if (push_ptr(&opt.envs, &opt.nenvs, optarg) != 0)
                return -1;
            break;
        }
        case 'x': {
            size_t nl = strcspn(optarg, "=");
            if (nl == 0 ||
                optarg[strspn(optarg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                      "0123456789_")] != optarg[nl] ||
                (optarg[0] >= '0' && optarg[0] <= '9')) {
                fy_run_say("-x %s: expected a variable NAME or NAME=VALUE", optarg);
                return -1;
            }
            if (push_ptr(&opt.xnames, &opt.nx, optarg) != 0)
                return -1;
            break;
        }
        case 'H':
            if (fy_run_hosts_parse(&opt.hosts, optarg, MAX_RANKS) != 0)
                return -1;
            break;
        case 'F':
            if (fy_run_hosts_read(&opt.hosts, optarg, MAX_RANKS) != 0)
                return -1;
            break;
        case 'a':
            if (optarg[strspn(optarg, " \t")] == '\0') {
                fy_run_say("--agent: empty");
                return -1;
            }
            opt.agent = optarg;
            break;
        case 'b':
            opt.boot_addr = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (opt.hosts.n > 0) {
        long total = 0;
        for (int i = 0; i < opt.hosts.n; i++)
            total += opt.hosts.v[i].slots;
        if (total > MAX_RANKS)
            total = MAX_RANKS;
        if (opt.n == 0)
            opt.n = (int)total;
        if (opt.n > total) {
            fy_run_say("-n %d: the hosts have %ld slot%s (--hosts/--hostfile host:slots)", opt.n,
                       total, total == 1 ? "" : "s");
            return -1;
        }
    }
    if (opt.n == 0) {
        fy_run_say("the number of ranks is missing: ferryrun -n N program ...");
        return -1;
    }
    if (optind >= argc) {
        fy_run_say("the program to run is missing: ferryrun -n N program ...");
        return -1;
    }
    opt.argv = argv + optind;
    return 0;
}

static const char *signame(int sig, char *buf, size_t n)
{
    const char *a = sigabbrev_np(sig);
    if (a != NULL)
        snprintf(buf, n, "SIG%s", a);
    else
        snprintf(buf, n, "signal %d", sig);
    return buf;
}

/* "exited with status 3", "was killed by signal 11 (SIGSEGV)" */
static void describe_status(int st, char *buf, size_t n)
{
    char sn[32];
    if (WIFEXITED(st))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, n, "was killed by signal %d (%s)%s", WTERMSIG(st),
                 signame(WTERMSIG(st), sn, sizeof(sn)), WCOREDUMP(st) ? ", core dumped" : "");
    else
        snprintf(buf, n, "ended with wait status 0x%x", st);
}

/* "0-3, 5, 7" of the ranks still alive (cut short if long). */
static void alive_list(char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int r = 0; r < opt.n && o + 24 < n; r++) {
        if (!ranks[r].alive)
            continue;
        int e = r;
        while (e + 1 < opt.n && ranks[e + 1].alive)
            e++;
        o += (size_t)snprintf(buf + o, n - o, "%s%d", o ? ", " : "", r);
        if (e > r)
            o += (size_t)snprintf(buf + o, n - o, "-%d", e);
        r = e;
    }
}

static void signal_all(int sig)
{
    for (int r = 0; r < opt.n; r++) {
        if (ranks[r].pid <= 0)
            continue;
        /* the group takes what the rank started too; it may outlive the rank itself */
        if (kill(-ranks[r].pid, sig) != 0 && ranks[r].alive)
            kill(ranks[r].pid, sig);
    }
}

static void end_job(void)
{
    aborting = 1;
    signal_all(SIGTERM);
    if (kill_at_ns == 0)
        kill_at_ns = now_ns() + KILL_GRACE_MS * 1000000ull;
}

/* ---- output ------------------------------------------------------------------------------ */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, 1000);
        } else {
            return; /* EPIPE and friends: nobody reads our output any more */
        }
    }
}

static char *scratch_reserve(size_t n)
{
    if (n > scratch_cap) {
        char *s = realloc(scratch, n);
        if (s == NULL) {
            fy_run_say("out of memory");
            exit(1);
        }
        scratch = s;
        scratch_cap = n;
    }
    return scratch;
}

/* Forward n bytes of rank r's stream, prefixing each line start if asked. */
static void emit(int rank, stream_t *s, const char *p, size_t n)
{
    if (n == 0)
        return;
    if (!opt.prefix) {
        write_all(s->dest, p, n);
        s->at_line_start = p[n - 1] == '\n';
        return;
    }
    char pre[24];
    int pl = snprintf(pre, sizeof(pre), "[%d] ", rank);
    size_t lines = 1;
    for (size_t i = 0; i < n; i++)
        lines += p[i] == '\n';
    char *o = scratch_reserve(n + lines * (size_t)pl);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (s->at_line_start) {
            memcpy(o + w, pre, (size_t)pl);
            w += (size_t)pl;
        }
        o[w++] = p[i];
        s->at_line_start = p[i] == '\n';
    }
    write_all(s->dest, o, w);
}

static void stream_close(int rank, stream_t *s)
{
    if (s->len > 0) {
        emit(rank, s, s->buf, s->len);
        s->len = 0;
        if (opt.prefix && !s->at_line_start)
            emit(rank, s, "\n", 1);
    }
    if (s->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, s->fd, NULL);
        close(s->fd);
        s->fd = -1;
    }
    free(s->buf);
    s->buf = NULL;
}

/* Read what is there (until the pipe is empty); forward whole lines, keep a partial one. */
static void stream_read(int rank, stream_t *s)
{
    if (s->fd < 0)
        return;
    if (s->buf == NULL) {
        s->buf = malloc(LINE_MAX_HELD);
        if (s->buf == NULL) {
            fy_run_say("out of memory");
            exit(1);
        }
    }
    for (;;) {
        ssize_t r = read(s->fd, s->buf + s->len, LINE_MAX_HELD - s->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0) {
            stream_close(rank, s);
            return;
        }
        s->len += (size_t)r;
        char *nl = memrchr(s->buf, '\n', s->len);
        if (nl != NULL) {
            size_t k = (size_t)(nl - s->buf) + 1;
            emit(rank, s, s->buf, k);
            memmove(s->buf, s->buf + k, s->len - k);
            s->len -= k;
        } else if (s->len == LINE_MAX_HELD) {
            emit(rank, s, s->buf, s->len); /* a very long line: pass it on in pieces */
            s->len = 0;
        }
    }
}

/* ---- processes --------------------------------------------------------------------------- */

static int env_name_eq(const char *entry, const char *name_eq)
{
    size_t n = (size_t)(strchr(name_eq, '=') - name_eq) + 1;
    return strncmp(entry, name_eq, n) == 0;
}

/* The environment of a rank: ours, then --env, over the inherited one (names unique). */
static char **build_env(char **ours, size_t nours)
{
    size_t ne = 0;
    while (environ[ne] != NULL)
        ne++;
    char **env = calloc(ne + nours + opt.nenvs + 1, sizeof(*env));
    if (env == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < ne; i++) {
        int shadowed = strchr(environ[i], '=') == NULL;
        for (size_t j = 0; j < nours && !shadowed; j++)
            shadowed = env_name_eq(environ[i], ours[j]);
        for (size_t j = 0; j < opt.nenvs && !shadowed; j++)
            shadowed = env_name_eq(environ[i], opt.envs[j]);
        if (!shadowed)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < nours; j++) {
        int shadowed = 0;
        for (size_t u = 0; u < opt.nenvs && !shadowed; u++)
            shadowed = env_name_eq(ours[j], opt.envs[u]);
        if (!shadowed)
            env[k++] = ours[j];
    }
    for (size_t j = 0; j < opt.nenvs; j++)
        env[k++] = opt.envs[j];
    env[k] = NULL;
    return env;
}

static int add_stream(int rank, stream_t *s, int fd, int dest, unsigned kind)
{
    s->fd = fd;
    s->dest = dest;
    s->at_line_start = 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = FY_RUN_EV(kind, rank)};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        fy_run_say("epoll_ctl: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * In the child, between fork and exec: its own process group, death with ferryrun (a
 * ferryrun killed by SIGKILL leaves no orphans), default signal dispositions and an empty
 * mask, stdin from /dev/null, stdout and stderr to the pipes.  An exec failure is reported
 * through errfd (close-on-exec, so the parent reads end of file when exec succeeds).
 */
/* in_r: the child's stdin (a remote rank's agent reads the job secret from it), or -1 for
 * /dev/null. */
static void child_exec(int in_r, int out_w, int err_w, int errfd, pid_t parent, char **argv,
                       char **env)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127); /* ferryrun died before prctl took effect */
    sigset_t none;
    sigemptyset(&none);
    int defaulted[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD};
    for (size_t i = 0; i < sizeof(defaulted) / sizeof(defaulted[0]); i++)
        signal(defaulted[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int devnull = in_r >= 0 ? in_r : open("/dev/null", O_RDONLY);
    if (devnull >= 0 && devnull != 0)
        dup2(devnull, 0); /* dup2 clears close-on-exec on fd 0; the original closes at exec */
    if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) {
        int e = errno;
        ssize_t w = write(errfd, &e, sizeof(e));
        (void)w;
        _exit(127);
    }
    execvpe(argv[0], argv, env);
    int e = errno;
    ssize_t w = write(errfd, &e, sizeof(e));
    (void)w;
    _exit(127);
}

/* ---- hosts ------------------------------------------------------------------------------- */

/* Ranks fill the hosts in order, each up to its slots; local rank and size count per host. */
static void place_ranks(void)
{
    if (opt.hosts.n == 0) {
        for (int r = 0; r < opt.n; r++) {
            ranks[r].host = -1;
            ranks[r].local_rank = r;
            ranks[r].local_size = opt.n;
        }
        return;
    }
    char me[256] = "";
    gethostname(me, sizeof(me) - 1);
    for (int i = 0; i < opt.hosts.n; i++)
        opt.hosts.v[i].local =
            strcmp(opt.hosts.v[i].name, "localhost") == 0 || strcmp(opt.hosts.v[i].name, me) == 0;
    int h = 0;
    for (int r = 0; r < opt.n; r++) {
        while (opt.hosts.v[h].used == opt.hosts.v[h].slots)
            h++;
        ranks[r].host = h;
        ranks[r].local_rank = opt.hosts.v[h].used++;
    }
    for (int r = 0; r < opt.n; r++)
        ranks[r].local_size = opt.hosts.v[ranks[r].host].used;
}

/* Where the bootstrap server listens (see fy_run_boot_addr). */
static int choose_boot_addr(void)
{
    struct in_addr ip = {.s_addr = 0};
    unsigned port = 0;
    if (fy_run_boot_addr(opt.boot_addr, &opt.hosts, &ip, &port) != 0)
        return -1;
    if (ip.s_addr != 0 || port != 0)
        fy_run_server_listen_on(ip, port);
    return 0;
}

/* A remote rank's agent gets the secret as the first line of its stdin (never in its argv,
 * which ps shows to every user of the host): written whole into the pipe before the agent
 * starts (65 bytes: the pipe holds them), the write end closed so the rank then sees EOF. */
static int send_secret(int pi[2], const char *secret)
{
    char line[128]; /* the secret is 64 hex digits (make_job_key) */
    int n = snprintf(line, sizeof(line), "%s\n", secret);
    ssize_t w = n > 0 && (size_t)n < sizeof(line) ? write(pi[1], line, (size_t)n) : -1;
    int e = errno;
    close(pi[1]);
    pi[1] = -1;
    if (w != n) {
        close(pi[0]);
        errno = w < 0 ? e : EPIPE;
        return -1;
    }
    return 0;
}

static int spawn_ranks(const char *addr, const char *job_key, const char *secret)
{
    char e_addr[160], e_size[48], e_lsize[48], e_key[80], e_rank[48], e_lrank[48], e_sec[112];
    snprintf(e_addr, sizeof(e_addr), "FERRY_BOOT_ADDR=%s", addr);
    snprintf(e_size, sizeof(e_size), "FERRY_SIZE=%d", opt.n);
    snprintf(e_lsize, sizeof(e_lsize), "FERRY_LOCAL_SIZE=%d", opt.n);
    snprintf(e_key, sizeof(e_key), "FERRY_JOB_KEY=%s", job_key);
    snprintf(e_sec, sizeof(e_sec), "FERRY_BOOT_SECRET=%s", secret);
    snprintf(e_rank, sizeof(e_rank), "FERRY_RANK=0");
    snprintf(e_lrank, sizeof(e_lrank), "FERRY_LOCAL_RANK=0");
    char *ours[] = {e_addr, e_size, e_lsize, e_key, e_sec, e_rank, e_lrank};
    char **env = build_env(ours, sizeof(ours) / sizeof(ours[0]));
    if (env == NULL) {
        fy_run_say("out of memory");
        return -1;
    }
    pid_t self = getpid();
    int rc = 0;
    for (int r = 0; r < opt.n && rc == 0; r++) {
        /* env[] holds these strings by pointer: rewrite them in place for each rank */
        snprintf(e_rank, sizeof(e_rank), "FERRY_RANK=%d", r);
        snprintf(e_lrank, sizeof(e_lrank), "FERRY_LOCAL_RANK=%d", ranks[r].local_rank);
        snprintf(e_lsize, sizeof(e_lsize), "FERRY_LOCAL_SIZE=%d", ranks[r].local_size);
        const fy_run_host_t *host = ranks[r].host >= 0 ? &opt.hosts.v[ranks[r].host] : NULL;
        char **argv = opt.argv, **cenv = env, *cmd = NULL, *words = NULL;
        if (host != NULL && !host->local) {
            fy_run_remote_t rc_in = {.vars = ours,
                                     .nvars = sizeof(ours) / sizeof(ours[0]),
                                     .envs = opt.envs,
                                     .nenvs = opt.nenvs,
                                     .xnames = opt.xnames,
                                     .nx = opt.nx,
                                     .argv = opt.argv};
            cmd = fy_run_remote_command(&rc_in);
            argv = cmd ? fy_run_agent_argv(opt.agent, host->name, cmd, &words) : NULL;
            cenv = environ;
            if (argv == NULL) {
                fy_run_say("out of memory");
                free(cmd);
                rc = -1;
                break;
            }
        }
        int po[2], pe[2], px[2], pi[2] = {-1, -1};
        if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0 || pipe2(px, O_CLOEXEC) != 0 ||
            (cmd != NULL && pipe2(pi, O_CLOEXEC) != 0)) {
            fy_run_say("cannot create pipes for rank %d: %s (raise the limit of open files?)", r,
                       strerror(errno));
            rc = -1;
        } else if (cmd != NULL && send_secret(pi, secret) != 0) {
            fy_run_say("cannot pass the job secret to rank %d's agent: %s", r, strerror(errno));
            int fds[] = {po[0], po[1], pe[0], pe[1], px[0], px[1]};
            for (size_t k = 0; k < sizeof(fds) / sizeof(fds[0]); k++)
                close(fds[k]);
            rc = -1;
        }
        if (rc != 0) {
            if (cmd != NULL) {
                free(words);
                free(argv);
                free(cmd);
            }
            break;
        }
        fflush(NULL);
        pid_t pid = fork();
        int err = pid < 0 ? errno : 0;
        if (pid == 0)
            child_exec(pi[0], po[1], pe[1], px[1], self, argv, cenv);
        if (pi[0] >= 0)
            close(pi[0]);
        close(po[1]);
        close(pe[1]);
        close(px[1]);
        if (pid > 0) {
            /* end of file: exec succeeded; an int: why it did not */
            ssize_t n;
            do
                n = read(px[0], &err, sizeof(err));
            while (n < 0 && errno == EINTR);
            if (n != (ssize_t)sizeof(err))
                err = 0;
        }
        close(px[0]);
        fcntl(po[0], F_SETFL, O_NONBLOCK);
        fcntl(pe[0], F_SETFL, O_NONBLOCK);
        if (pid > 0) {
            setpgid(pid, pid); /* the child did it too: whoever runs first */
            ranks[r].pid = pid;
            ranks[r].alive = 1;
            nalive++;
        }
        if (err != 0) {
            if (cmd != NULL)
                fy_run_say("cannot start the agent %s for rank %d on %s: %s", argv[0], r,
                           host->name, strerror(err));
            else
                fy_run_say("cannot start %s (rank %d): %s", opt.argv[0], r, strerror(err));
            close(po[0]);
            close(pe[0]);
            exit_status = err == ENOENT ? 127 : 126;
            rc = -1;
        }
        if (cmd != NULL) {
            free(words);
            free(argv);
            free(cmd);
        }
        if (rc != 0)
            break;
        if (add_stream(r, &ranks[r].out, po[0], 1, FY_RUN_EV_STDOUT) != 0 ||
            add_stream(r, &ranks[r].err, pe[0], 2, FY_RUN_EV_STDERR) != 0)
            rc = -1;
    }
    free(env);
    return rc;
}

static int rank_of_pid(pid_t pid)
{
    for (int r = 0; r < opt.n; r++)
        if (ranks[r].pid == pid)
            return r;
    return -1;
}

static void reap(fy_run_server_t *srv)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            return;
        int r = rank_of_pid(pid);
        if (r < 0 || !ranks[r].alive)
            continue;
        ranks[r].alive = 0;
        nalive--;
        /* what it wrote before dying is in the pipes already: forward it first */
        stream_read(r, &ranks[r].out);
        stream_read(r, &ranks[r].err);
        char how[128];
        describe_status(st, how, sizeof(how));
        fy_run_server_rank_exited(srv, r, how);
        int failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (!failed || aborting)
            continue;
        exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        char where[300] = "";
        if (ranks[r].host >= 0 && !opt.hosts.v[ranks[r].host].local)
            snprintf(where, sizeof(where), " on %s (agent pid %d)", opt.hosts.v[ranks[r].host].name,
                     (int)pid);
        else
            snprintf(where, sizeof(where), " (pid %d)", (int)pid);
        if (nalive > 0) {
            fy_run_say("rank %d%s %s; ending the other %d rank%s", r, where, how, nalive,
                       nalive == 1 ? "" : "s");
            end_job();
        } else {
            fy_run_say("rank %d%s %s", r, where, how);
            aborting = 1;
        }
    }
}

static void on_signal(int sfd, fy_run_server_t *srv)
{
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) {
            reap(srv);
            continue;
        }
        char sn[32];
        if (kill_at_ns != 0 && aborting) {
            fy_run_say("got %s again: killing every rank", signame(sig, sn, sizeof(sn)));
            signal_all(SIGKILL);
            continue;
        }
        fy_run_say("got %s: passing it on to %d running rank%s", signame(sig, sn, sizeof(sn)),
                   nalive, nalive == 1 ? "" : "s");
        if (exit_status == 0)
            exit_status = 128 + sig;
        aborting = 1;
        signal_all(sig);
        kill_at_ns = now_ns() + KILL_GRACE_MS * 1000000ull;
    }
}

static void make_job_key(char *buf, size_t n)
{
    uint64_t k[2] = {0, 0};
    if (getrandom(k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k)) {
        k[0] = now_ns() ^ ((uint64_t)getpid() << 32);
        k[1] = (uint64_t)(uintptr_t)&k ^ now_ns();
    }
    snprintf(buf, n, "%016llx%016llx", (unsigned long long)k[0], (unsigned long long)k[1]);
}

static void raise_fd_limit(int n)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)n * 4 + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0)
        return 2;
    raise_fd_limit(opt.n);
    ranks = calloc((size_t)opt.n, sizeof(*ranks));
    if (ranks == NULL) {
        fy_run_say("out of memory");
        return 1;
    }
    for (int r = 0; r < opt.n; r++)
        ranks[r].out.fd = ranks[r].err.fd = -1;
    place_ranks();
    if (choose_boot_addr() != 0)
        return 2;

    /* signals arrive through a signalfd; block them before any child exists */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* orphans of the job (a rank's children whose rank died) come to us to be reaped, rather
     * than to an init that may not reap them */
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    epfd = epoll_create1(EPOLL_CLOEXEC);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (epfd < 0 || sfd < 0) {
        fy_run_say("epoll/signalfd: %s", strerror(errno));
        return 1;
    }
    struct epoll_event sev = {.events = EPOLLIN, .data.u64 = FY_RUN_EV(FY_RUN_EV_SIGNAL, 0)};
    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &sev);

    char job_key[40], secret[72], addr[64];
    make_job_key(job_key, sizeof(job_key));
    make_job_key(secret, 33);      /* the bootstrap server's secret: another 128 random bits, */
    make_job_key(secret + 32, 33); /* and 128 more */
    fy_run_server_t *srv;
    if (fy_run_server_create(opt.n, job_key, secret, epfd, addr, sizeof(addr), &srv) != 0)
        return 1;

    uint64_t deadline = opt.timeout_s > 0 ? now_ns() + (uint64_t)(opt.timeout_s * 1e9) : 0;
    if (spawn_ranks(addr, job_key, secret) != 0) {
        if (exit_status == 0)
            exit_status = 1;
        end_job();
    }

    struct epoll_event evs[64];
    while (nalive > 0) {
        uint64_t now = now_ns(), next = 0;
        if (deadline != 0 && !aborting)
            next = deadline;
        if (kill_at_ns != 0 && (next == 0 || kill_at_ns < next))
            next = kill_at_ns;
        int ms = -1;
        if (next != 0)
            ms = next <= now ? 0 : (int)((next - now + 999999) / 1000000);
        int n = epoll_wait(epfd, evs, 64, ms);
        if (n < 0 && errno != EINTR) {
            fy_run_say("epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            uint64_t d = evs[i].data.u64;
            uint32_t idx = FY_RUN_EV_IDX(d);
            switch (FY_RUN_EV_KIND(d)) {
            case FY_RUN_EV_SIGNAL:
                on_signal(sfd, srv);
                break;
            case FY_RUN_EV_STDOUT:
                stream_read((int)idx, &ranks[idx].out);
                break;
            case FY_RUN_EV_STDERR:
                stream_read((int)idx, &ranks[idx].err);
                break;
            default:
                fy_run_server_event(srv, d, evs[i].events);
                break;
            }
        }
        now = now_ns();
        if (deadline != 0 && !aborting && now >= deadline && nalive > 0) {
            char list[512];
            alive_list(list, sizeof(list));
            fy_run_say("timed out after %g s (--timeout): ending the job; ranks still running: %s",
                       opt.timeout_s, list);
            exit_status = STATUS_TIMEOUT;
            end_job();
        }
        if (kill_at_ns != 0 && now >= kill_at_ns && nalive > 0) {
            char list[512];
            alive_list(list, sizeof(list));
            fy_run_say("rank%s %s still running %d ms after SIGTERM: sending SIGKILL",
                       strchr(list, ',') || strchr(list, '-') ? "s" : "", list, KILL_GRACE_MS);
            signal_all(SIGKILL);
            kill_at_ns = 0;
        }
    }
    /* every rank is gone: forward what is left in the pipes (a rank's own children may hold
     * them open, so read what is there rather than wait for end of file) */
    for (int r = 0; r < opt.n; r++) {
        stream_read(r, &ranks[r].out);
        stream_close(r, &ranks[r].out);
        stream_read(r, &ranks[r].err);
        stream_close(r, &ranks[r].err);
    }
    fy_run_server_destroy(srv);
    free(scratch);
    free(ranks);
    free(opt.envs);
    free(opt.xnames);
    fy_run_hosts_free(&opt.hosts);
    close(sfd);
    close(epfd);
    return exit_status;
}
