/*
 * fytest_proc.h - the one way ferry's tests start a peer process: re-execute the test binary
 * with a role name, talk to it over two pipes, never sleep to wait for it, and never let it
 * outlive its time.
 *
 *   parent                                    child (the same binary, re-executed)
 *   fyproc_spawn(&p, "peer", args, 60)  -->   main() -> fyproc_child_main(): finds "peer" in
 *                                              the role table, runs fn(rfd, wfd, argc, argv)
 *   fyproc_send / fyproc_recv(p.rfd...) <->   fyproc_send / fyproc_recv
 *   fyproc_wait(&p, ms) or fyproc_kill(&p)     exit status collected by the parent
 *
 * The child runs in a process group of its own (so a kill reaches anything it started), has
 * a hard timeout (alarm, which survives exec) and dies with its parent (PR_SET_PDEATHSIG), so
 * a crashed or hung test never leaves processes behind.  A role returns its exit status;
 * the child leaves through exit(), so LeakSanitizer sees it.  Reads take a deadline: a peer
 * that hangs fails the case instead of hanging it.
 *
 * A test file with roles ends with FYTEST_MAIN_ROLES(roles, cases...) instead of FYTEST_MAIN.
 */
#ifndef FYTEST_PROC_H
#define FYTEST_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct fyproc {
    pid_t pid;  /* also the process group id */
    int rfd;    /* what the child writes */
    int wfd;    /* what the child reads */
    int status; /* wait status, once collected */
    int reaped;
} fyproc_t;

/* A role: runs in the child with its end of the pipes and the extra arguments given to
 * fyproc_spawn; returns the child's exit status. */
typedef int (*fyproc_fn_t)(int rfd, int wfd, int argc, char **argv);
typedef struct fyproc_role {
    const char *name;
    fyproc_fn_t fn;
} fyproc_role_t;

/* Start the test binary again as role `role` with the NULL-terminated extra arguments args
 * (may be NULL), killed after timeout_s seconds.  0 on success, -1 (with a message). */
int fyproc_spawn(fyproc_t *p, const char *role, const char *const *args, unsigned timeout_s);

/* The same child set-up (own process group, dies with the parent, hard timeout, pipes) for
 * a peer that needs the parent's memory as it was: fork without exec and run fn(rfd, wfd,
 * arg) in the child, which then leaves through exit(0) (fn may exit with another status).
 * For the transport tests' older peers; new tests prefer roles (fyproc_spawn). */
typedef void (*fyproc_body_t)(int rfd, int wfd, void *arg);
int fyproc_fork(fyproc_t *p, fyproc_body_t fn, void *arg, unsigned timeout_s);

/* Wait up to timeout_ms for the child to exit; on timeout kill its process group.  Returns
 * the exit status (0..255), 128 + signal when it was killed by one, -1 on timeout. */
int fyproc_wait(fyproc_t *p, int timeout_ms);
/* Kill the child's process group with sig (SIGKILL: also reaps it). */
void fyproc_kill(fyproc_t *p, int sig);
/* Stop the child (SIGSTOP: every thread, a provider's own progress thread included) and wait
 * until it is stopped.  0, or -1 when it had exited. */
int fyproc_stop(fyproc_t *p);
/* Has the child exited?  (Non-blocking; collects the status.) */
int fyproc_exited(fyproc_t *p);
/* Close the pipes; kill and reap the child if it still runs. */
void fyproc_release(fyproc_t *p);

/* Pipe messages.  fyproc_send: 0 or -1.  fyproc_recv: 0, or -1 when the other side closed
 * or timeout_ms passed (timeout_ms < 0: no deadline). */
int fyproc_send(int fd, const void *buf, size_t len);
int fyproc_recv(int fd, void *buf, size_t len, int timeout_ms);
/* Is fd readable now (data or EOF)? */
int fyproc_readable(int fd);

/* In main(), before anything else: if argv names a role, run it and return its exit status
 * through *status (1); otherwise 0. */
int fyproc_child_main(int argc, char **argv, const fyproc_role_t *roles, size_t nroles,
                      int *status);

#define FYTEST_MAIN_ROLES(roles, ...)                                                              \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        int fy_st_;                                                                                \
        if (fyproc_child_main(argc, argv, roles, sizeof(roles) / sizeof(roles[0]), &fy_st_))       \
            return fy_st_;                                                                         \
        static const fytest_case_t cases[] = {__VA_ARGS__};                                        \
        return fytest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 0);                \
    }

#endif
