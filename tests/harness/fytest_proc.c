/*
 * fytest_proc.c - the peer-process helper of ferry's tests (see fytest_proc.h): fork, then
 * exec this same binary from /proc/self/exe with "--fyproc <role> <rfd> <wfd> args...", so
 * the child starts from a clean process image (no inherited transport state, no copied heap
 * that a leak checker would count twice) and runs only its role.
 *
 * Before exec the child joins a process group of its own, asks to die with its parent, and
 * arms its hard timeout: alarm() survives exec, so even a role that never returns is killed.
 * fyproc_fork is the same without the exec, for peers that need the parent's memory.
 * The parent never sleeps a fixed time: reads poll with a deadline, and the wait polls
 * waitpid with a deadline, killing the whole group when it passes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fytest_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FYPROC_FLAG    "--fyproc"
#define FYPROC_MAXARGS 16

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Pipes for a child: down = parent -> child, up = child -> parent, all close-on-exec. */
static int make_pipes(int down[2], int up[2])
{
    if (pipe2(down, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(up, O_CLOEXEC) != 0) {
        close(down[0]);
        close(down[1]);
        return -1;
    }
    return 0;
}

static void close_pipes(int down[2], int up[2])
{
    close(down[0]);
    close(down[1]);
    close(up[0]);
    close(up[1]);
}

/* In the child, right after fork: its own group, death with the parent, the hard timeout. */
static void child_setup(pid_t parent, unsigned timeout_s)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127); /* the parent died before the line above */
    alarm(timeout_s);
}

static void parent_setup(fyproc_t *p, pid_t pid, int down[2], int up[2])
{
    setpgid(pid, pid); /* also here: whichever runs first */
    close(down[0]);
    close(up[1]);
    p->pid = pid;
    p->rfd = up[0];
    p->wfd = down[1];
}

static void init(fyproc_t *p)
{
    memset(p, 0, sizeof(*p));
    p->pid = -1;
    p->rfd = p->wfd = -1;
}

int fyproc_spawn(fyproc_t *p, const char *role, const char *const *args, unsigned timeout_s)
{
    int down[2], up[2];
    init(p);
    if (make_pipes(down, up) != 0)
        return -1;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        fprintf(stderr, "fyproc: /proc/self/exe: %s\n", strerror(errno));
        close_pipes(down, up);
        return -1;
    }
    exe[n] = '\0';
    char rs[16], ws[16];
    snprintf(rs, sizeof(rs), "%d", down[0]);
    snprintf(ws, sizeof(ws), "%d", up[1]);
    char *argv[FYPROC_MAXARGS + 6];
    size_t a = 0;
    argv[a++] = exe;
    argv[a++] = (char *)FYPROC_FLAG;
    argv[a++] = (char *)role;
    argv[a++] = rs;
    argv[a++] = ws;
    for (size_t i = 0; args != NULL && args[i] != NULL && i < FYPROC_MAXARGS; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "fyproc: fork: %s\n", strerror(errno));
        close_pipes(down, up);
        return -1;
    }
    if (pid == 0) {
        child_setup(parent, timeout_s); /* alarm() survives exec */
        /* the child's ends survive exec; the parent's ends do not (O_CLOEXEC) */
        if (fcntl(down[0], F_SETFD, 0) != 0 || fcntl(up[1], F_SETFD, 0) != 0)
            _exit(127);
        execv(exe, argv);
        fprintf(stderr, "fyproc: exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    parent_setup(p, pid, down, up);
    return 0;
}

int fyproc_fork(fyproc_t *p, fyproc_body_t fn, void *arg, unsigned timeout_s)
{
    int down[2], up[2];
    init(p);
    if (make_pipes(down, up) != 0)
        return -1;
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "fyproc: fork: %s\n", strerror(errno));
        close_pipes(down, up);
        return -1;
    }
    if (pid == 0) {
        child_setup(parent, timeout_s);
        close(down[1]);
        close(up[0]);
        fn(down[0], up[1], arg);
        fflush(stdout);
        fflush(stderr);
        exit(0);
    }
    parent_setup(p, pid, down, up);
    return 0;
}

static int decode(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

int fyproc_exited(fyproc_t *p)
{
    if (p->reaped)
        return 1;
    if (p->pid <= 0)
        return 1;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
        p->status = st;
        p->reaped = 1;
        kill(-p->pid, SIGKILL); /* anything it left in its group */
        return 1;
    }
    return 0;
}

int fyproc_wait(fyproc_t *p, int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    while (!fyproc_exited(p)) {
        if (now_ms() >= end) {
            fprintf(stderr, "fyproc: child %d still running after %d ms: killed\n", (int)p->pid,
                    timeout_ms);
            fyproc_kill(p, SIGKILL);
            return -1;
        }
        /* wait on the pipe (EOF when the child exits) rather than sleeping blind */
        struct pollfd pf = {.fd = p->rfd, .events = POLLIN};
        if (p->rfd < 0 || poll(&pf, 1, 10) > 0) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL); /* the pipe is at EOF or has data we do not read here */
        }
    }
    return decode(p->status);
}

void fyproc_kill(fyproc_t *p, int sig)
{
    if (p->pid <= 0 || p->reaped)
        return;
    kill(-p->pid, sig);
    kill(p->pid, sig);
    if (sig == SIGKILL) {
        int st;
        while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
        }
        p->status = st;
        p->reaped = 1;
    }
}

int fyproc_stop(fyproc_t *p)
{
    if (p->pid <= 0 || p->reaped)
        return -1;
    kill(p->pid, SIGSTOP);
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WUNTRACED);
        if (r < 0 && errno == EINTR)
            continue;
        if (r != p->pid)
            return -1;
        if (WIFSTOPPED(st))
            return 0;
        p->status = st; /* it exited before the stop reached it */
        p->reaped = 1;
        return -1;
    }
}

void fyproc_release(fyproc_t *p)
{
    if (!fyproc_exited(p))
        fyproc_kill(p, SIGKILL);
    if (p->rfd >= 0)
        close(p->rfd);
    if (p->wfd >= 0)
        close(p->wfd);
    p->rfd = p->wfd = -1;
}

int fyproc_send(int fd, const void *buf, size_t len)
{
    const char *c = buf;
    while (len > 0) {
        ssize_t n = write(fd, c, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

int fyproc_recv(int fd, void *buf, size_t len, int timeout_ms)
{
    char *c = buf;
    int64_t end = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    while (len > 0) {
        int wait = -1;
        if (end >= 0) {
            int64_t left = end - now_ms();
            if (left <= 0)
                return -1;
            wait = (int)left;
        }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, wait);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t n = read(fd, c, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

int fyproc_readable(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, 0) > 0;
}

int fyproc_child_main(int argc, char **argv, const fyproc_role_t *roles, size_t nroles, int *status)
{
    if (argc < 5 || strcmp(argv[1], FYPROC_FLAG) != 0)
        return 0;
    int rfd = atoi(argv[3]), wfd = atoi(argv[4]);
    for (size_t i = 0; i < nroles; i++) {
        if (strcmp(roles[i].name, argv[2]) == 0) {
            int st = roles[i].fn(rfd, wfd, argc - 5, argv + 5);
            fflush(stdout);
            fflush(stderr);
            close(wfd);
            *status = st;
            return 1;
        }
    }
    fprintf(stderr, "fyproc: no role named %s\n", argv[2]);
    *status = 126;
    return 1;
}
