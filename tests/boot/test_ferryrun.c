/*
 * test_ferryrun.c - ferryrun as its users see it: exit statuses, messages, output forwarding,
 * signals, timeouts, and the builtin bootstrap's failure reports.  Each case starts ferryrun
 * (fork/exec, stdout and stderr on pipes) with boot_helper as the program, reads everything it
 * prints, and checks status and text.  Readiness is read from the ranks' output, never waited
 * for with sleep; every ferryrun gets a --timeout below the case's own.
 */
#include <fcntl.h>
#include <poll.h>
#include <regex.h>

#include "fytest.h"

#ifndef FERRYRUN_PATH
#error "FERRYRUN_PATH must be defined by the build"
#endif
#ifndef BOOT_HELPER_PATH
#error "BOOT_HELPER_PATH must be defined by the build"
#endif

typedef struct run {
    pid_t pid;
    int out_fd, err_fd;
    char *out, *err;
    size_t out_len, err_len;
    int status; /* ferryrun's exit status (128+sig if killed) */
    double secs;
} run_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Start ferryrun with argv (NULL-terminated, ferryrun's own arguments first); env entries
 * "K=V" are added to its environment. */
static void run_start(run_t *r, const char *const *args, const char *const *env)
{
    memset(r, 0, sizeof(*r));
    int po[2], pe[2];
    FY_ASSERT(pipe(po) == 0 && pipe(pe) == 0);
    fflush(NULL);
    r->pid = fork();
    FY_ASSERT(r->pid >= 0);
    if (r->pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(pe[0]);
        for (const char *const *e = env; e != NULL && *e != NULL; e++)
            putenv((char *)*e);
        const char *argv[64];
        int n = 0;
        argv[n++] = FERRYRUN_PATH;
        for (const char *const *a = args; *a != NULL && n < 63; a++)
            argv[n++] = strcmp(*a, "HELPER") == 0 ? BOOT_HELPER_PATH : *a;
        argv[n] = NULL;
        execv(FERRYRUN_PATH, (char **)argv);
        _exit(126);
    }
    close(po[1]);
    close(pe[1]);
    r->out_fd = po[0];
    r->err_fd = pe[0];
    r->secs = now_s();
}

/* Read whatever is available (waiting up to ms); returns 0 once both pipes are at EOF. */
static int run_pump(run_t *r, int ms)
{
    struct pollfd p[2] = {{.fd = r->out_fd, .events = POLLIN}, {.fd = r->err_fd, .events = POLLIN}};
    int open_fds = (r->out_fd >= 0) + (r->err_fd >= 0);
    if (open_fds == 0)
        return 0;
    if (poll(p, 2, ms) <= 0)
        return 1;
    for (int i = 0; i < 2; i++) {
        if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        char **buf = i == 0 ? &r->out : &r->err;
        size_t *len = i == 0 ? &r->out_len : &r->err_len;
        char tmp[65536];
        ssize_t n = read(p[i].fd, tmp, sizeof(tmp));
        if (n <= 0) {
            close(p[i].fd);
            if (i == 0)
                r->out_fd = -1;
            else
                r->err_fd = -1;
            continue;
        }
        *buf = realloc(*buf, *len + (size_t)n + 1);
        FY_ASSERT(*buf != NULL);
        memcpy(*buf + *len, tmp, (size_t)n);
        *len += (size_t)n;
        (*buf)[*len] = '\0';
    }
    return (r->out_fd >= 0) || (r->err_fd >= 0);
}

static void run_finish(run_t *r)
{
    while (run_pump(r, 1000)) {
    }
    int st;
    FY_ASSERT(waitpid(r->pid, &st, 0) == r->pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r->secs = now_s() - r->secs;
    if (r->out == NULL)
        r->out = strdup("");
    if (r->err == NULL)
        r->err = strdup("");
    if (getenv("FYTEST_VERBOSE"))
        fprintf(stderr, "--- status %d after %.2f s\n--- stdout:\n%s--- stderr:\n%s---\n",
                r->status, r->secs, r->out, r->err);
}

static void run_free(run_t *r)
{
    free(r->out);
    free(r->err);
}

static void run(run_t *r, const char *const *args, const char *const *env)
{
    run_start(r, args, env);
    run_finish(r);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

#define ASSERT_HAS(text, needle)                                                                   \
    FY_ASSERT_MSG(strstr((text), (needle)) != NULL, "\"%s\" not found in:\n%s", (needle), (text))

/* The process has ended: no such pid, or a zombie waiting for a parent that does not reap
 * (init in some containers).  It was signalled already; give the kernel up to 2 s to deliver. */
static int process_gone(pid_t pid)
{
    for (int i = 0; i < 200; i++) {
        if (kill(pid, 0) != 0 && errno == ESRCH)
            return 1;
        char path[64], stat[256];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            size_t n = fread(stat, 1, sizeof(stat) - 1, f);
            fclose(f);
            stat[n] = '\0';
            const char *rp = strrchr(stat, ')');
            if (rp != NULL && rp[1] == ' ' && rp[2] == 'Z')
                return 1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Every "pid R P" and "grandchild P" printed by the helper is gone. */
static void assert_all_gone(const char *out, int expect)
{
    int seen = 0;
    for (const char *p = out; *p != '\0';) {
        int r, pid;
        if (sscanf(p, "pid %d %d", &r, &pid) == 2 || sscanf(p, "grandchild %d", &pid) == 1) {
            seen++;
            FY_ASSERT_MSG(process_gone(pid), "process %d is still alive", pid);
        }
        const char *nl = strchr(p, '\n');
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    FY_ASSERT_EQ(seen, expect);
}

static void normal_run(void)
{
    run_t r;
    const char *args[] = {"-n",
                          "4",
                          "--timeout",
                          "50",
                          "HELPER",
                          "kv",
                          "--expect-backend",
                          "builtin",
                          "--expect-size",
                          "4",
                          NULL};
    run(&r, args, NULL);
    FY_ASSERT_MSG(r.status == 0, "status %d, stderr:\n%s", r.status, r.err);
    for (int k = 0; k < 4; k++) {
        char want[64];
        snprintf(want, sizeof(want), "kv ok rank %d of 4 (builtin, local %d of 4", k, k);
        ASSERT_HAS(r.out, want);
    }
    FY_ASSERT(strstr(r.err, "ferryrun:") == NULL);
    run_free(&r);
}

static void many_ranks(void)
{
    run_t r;
    const char *args[] = {"-n", "64", "--timeout", "100", "HELPER", "kv", "--big", "3000", NULL};
    run(&r, args, NULL);
    FY_ASSERT_MSG(r.status == 0, "status %d, stderr:\n%s", r.status, r.err);
    FY_ASSERT_EQ(count_of(r.out, "kv ok rank"), 64);
    run_free(&r);
}

static void early_exit(void)
{
    run_t r;
    const char *args[] = {"-n", "4", "--timeout", "100", "HELPER", "fail", "2", "exit:3", NULL};
    run(&r, args, NULL);
    FY_ASSERT_EQ(r.status, 3);
    ASSERT_HAS(r.err, "ferryrun: rank 2 (pid ");
    ASSERT_HAS(r.err, "exited with status 3; ending the other 3 ranks");
    /* the others pause forever: only ferryrun could have ended them, not the --timeout */
    FY_ASSERT(strstr(r.err, "timed out") == NULL);
    assert_all_gone(r.out, 5); /* 4 ranks + the grandchild in rank 2's process group */
    printf("    (ended the job %.2f s after start)\n", r.secs);
    run_free(&r);
}

static void crash_segv(void)
{
    run_t r;
    const char *args[] = {"-n", "4", "--timeout", "100", "HELPER", "fail", "1", "segv", NULL};
    run(&r, args, NULL);
    FY_ASSERT_EQ(r.status, 128 + SIGSEGV);
    ASSERT_HAS(r.err, "ferryrun: rank 1 (pid ");
    ASSERT_HAS(r.err, "was killed by signal 11 (SIGSEGV)");
    FY_ASSERT(strstr(r.err, "timed out") == NULL);
    assert_all_gone(r.out, 5);
    run_free(&r);
}

static void crash_sigkill(void)
{
    run_t r;
    const char *args[] = {"-n", "4", "--timeout", "100", "HELPER", "fail", "3", "kill", NULL};
    run(&r, args, NULL);
    FY_ASSERT_EQ(r.status, 128 + SIGKILL);
    ASSERT_HAS(r.err, "ferryrun: rank 3 (pid ");
    ASSERT_HAS(r.err, "was killed by signal 9 (SIGKILL)");
    FY_ASSERT(strstr(r.err, "timed out") == NULL);
    assert_all_gone(r.out, 5);
    run_free(&r);
}

static void job_timeout(void)
{
    run_t r;
    const char *args[] = {"-n", "3", "--timeout", "1", "HELPER", "hang", NULL};
    run(&r, args, NULL);
    FY_ASSERT_EQ(r.status, 124);
    ASSERT_HAS(r.err, "ferryrun: timed out after 1 s (--timeout): ending the job; ranks still "
                      "running: 0-2");
    run_free(&r);
}

/* Check that out holds exactly `lines` intact lines per rank of "rank R line I xxx..". */
static void check_lines(const char *out, int nranks, int lines, int prefix)
{
    int *next = calloc((size_t)nranks, sizeof(int));
    FY_ASSERT(next != NULL);
    int total = 0;
    for (const char *p = out; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        FY_ASSERT_MSG(nl != NULL, "unterminated last line: %s", p);
        int pr = -1, r = -1, i = -1, off = 0, off2 = 0;
        if (prefix)
            FY_ASSERT_MSG(sscanf(p, "[%d] %n", &pr, &off) == 1 && off > 0, "no prefix: %.80s", p);
        FY_ASSERT_MSG(sscanf(p + off, "rank %d line %d %n", &r, &i, &off2) == 2 && off2 > 0,
                      "mixed line: %.*s", (int)(nl - p), p);
        FY_ASSERT_MSG(r >= 0 && r < nranks && (!prefix || pr == r), "bad rank in: %.*s",
                      (int)(nl - p), p);
        FY_ASSERT_MSG(i == next[r], "rank %d: line %d where %d was due", r, i, next[r]);
        next[r]++;
        /* the filler: 199 - i % 100 x's up to the newline */
        const char *f = p + off + off2;
        size_t want = 199 - (size_t)(i % 100);
        FY_ASSERT_MSG((size_t)(nl - f) == want && strspn(f, "x") == want,
                      "rank %d line %d: filler broken: %.*s", r, i, (int)(nl - p), p);
        total++;
        p = nl + 1;
    }
    FY_ASSERT_EQ(total, nranks * lines);
    free(next);
}

static void output_prefix(void)
{
    run_t r;
    const char *args[] = {"-n", "4", "--prefix", "--timeout", "50", "HELPER", "print", "300", NULL};
    run(&r, args, NULL);
    FY_ASSERT_EQ(r.status, 0);
    check_lines(r.out, 4, 300, 1);
    for (int k = 0; k < 4; k++) {
        char want[32];
        snprintf(want, sizeof(want), "[%d] rank %d done\n", k, k);
        ASSERT_HAS(r.err, want);
    }
    run_free(&r);
}

static void output_lines_whole(void)
{
    run_t r;
    const char *args[] = {"-n", "4", "--timeout", "50", "HELPER", "print", "300", NULL};
    run(&r, args, NULL);
    FY_ASSERT_EQ(r.status, 0);
    check_lines(r.out, 4, 300, 0);
    run_free(&r);
}

static void env_option(void)
{
    run_t r;
    const char *args[] = {"-n", "2",      "--env", "FYTEST_COLOR=blue", "--timeout",
                          "50", "HELPER", "env",   "FYTEST_COLOR",      NULL};
    const char *env[] = {"FYTEST_COLOR=red", NULL};
    run(&r, args, env);
    FY_ASSERT_EQ(r.status, 0);
    FY_ASSERT_EQ(count_of(r.out, "env FYTEST_COLOR=blue\n"), 2);
    run_free(&r);
    const char *args2[] = {"-n", "3", "HELPER", "env", "FERRY_SIZE", NULL};
    run(&r, args2, NULL);
    FY_ASSERT_EQ(count_of(r.out, "env FERRY_SIZE=3\n"), 3);
    run_free(&r);
}

static void signal_forwarded(void)
{
    run_t r;
    const char *args[] = {"-n", "3", "--timeout", "50", "HELPER", "hang", NULL};
    run_start(&r, args, NULL);
    /* ready = every rank said so */
    while ((r.out == NULL || count_of(r.out, "ready ") < 3) && run_pump(&r, 1000)) {
    }
    FY_ASSERT(r.out != NULL && count_of(r.out, "ready ") == 3);
    kill(r.pid, SIGTERM);
    run_finish(&r);
    FY_ASSERT_EQ(r.status, 128 + SIGTERM);
    ASSERT_HAS(r.err, "ferryrun: got SIGTERM: passing it on to 3 running ranks");
    FY_ASSERT(strstr(r.err, "timed out") == NULL);
    run_free(&r);
}

static void missing_program(void)
{
    run_t r;
    const char *args[] = {"-n", "2", "/nonexistent/ferry-program", NULL};
    run(&r, args, NULL);
    FY_ASSERT_EQ(r.status, 127);
    ASSERT_HAS(r.err, "cannot start /nonexistent/ferry-program (rank 0): No such file");
    run_free(&r);
}

static void bad_arguments(void)
{
    run_t r;
    const char *a1[] = {"-n", "0", "HELPER", NULL};
    run(&r, a1, NULL);
    FY_ASSERT_EQ(r.status, 2);
    ASSERT_HAS(r.err, "the number of ranks must be");
    run_free(&r);
    const char *a2[] = {"HELPER", NULL};
    run(&r, a2, NULL);
    FY_ASSERT_EQ(r.status, 2);
    ASSERT_HAS(r.err, "the number of ranks is missing");
    run_free(&r);
    const char *a3[] = {"-n", "2", NULL};
    run(&r, a3, NULL);
    FY_ASSERT_EQ(r.status, 2);
    ASSERT_HAS(r.err, "the program to run is missing");
    run_free(&r);
    const char *a4[] = {"-n", "2", "--timeout", "soon", "HELPER", NULL};
    run(&r, a4, NULL);
    FY_ASSERT_EQ(r.status, 2);
    ASSERT_HAS(r.err, "--timeout soon");
    run_free(&r);
}

/* One rank never reaches the fence: the others time out and name it. */
static void fence_timeout_names_rank(void)
{
    run_t r;
    const char *args[] = {"-n", "3", "--timeout", "50", "HELPER", "fencehang", "2", NULL};
    const char *env[] = {"FERRY_BOOT_TIMEOUT=1", NULL};
    run(&r, args, env);
    FY_ASSERT_EQ(r.status, 3);
    /* the first to time out ends the job: the other may be stopped before it reports */
    FY_ASSERT_GE(count_of(r.out, "fence status TIMED_OUT"), 1);
    ASSERT_HAS(r.err, "bootstrap fence 0 timed out after 1 s (FERRY_BOOT_TIMEOUT): 1 of 3 ranks "
                      "did not arrive: rank 2 (connected but not in the fence)");
    run_free(&r);
}

/* A rank that ends without joining a fence makes it fail at once for the others. */
static void fence_fails_when_rank_exits(void)
{
    run_t r;
    const char *args2[] = {"-n", "3", "--timeout", "50", "HELPER", "fencehang", "1", "exit", NULL};
    const char *env[] = {"FERRY_BOOT_TIMEOUT=40", NULL};
    run(&r, args2, env);
    FY_ASSERT_EQ(r.status, 3);
    ASSERT_HAS(r.err, "bootstrap fence failed: fence 0 cannot complete: rank 1 ");
    FY_ASSERT(strstr(r.err, "timed out") == NULL);
    printf("    (the fence failed %.2f s after start, FERRY_BOOT_TIMEOUT=40)\n", r.secs);
    run_free(&r);
}

static void wrong_job_key(void)
{
    run_t r;
    const char *args[] = {"-n",        "2",  "--env",  "FERRY_JOB_KEY=not-this-job",
                          "--timeout", "50", "HELPER", "init",
                          NULL};
    run(&r, args, NULL);
    FY_ASSERT_EQ(r.status, 4);
    ASSERT_HAS(r.err, "presented the wrong FERRY_JOB_KEY");
    run_free(&r);
}

FYTEST_MAIN(FYTEST_CASE(normal_run), FYTEST_CASE(many_ranks), FYTEST_CASE(early_exit),
            FYTEST_CASE(crash_segv), FYTEST_CASE(crash_sigkill), FYTEST_CASE(job_timeout),
            FYTEST_CASE(output_prefix), FYTEST_CASE(output_lines_whole), FYTEST_CASE(env_option),
            FYTEST_CASE(signal_forwarded), FYTEST_CASE(missing_program), FYTEST_CASE(bad_arguments),
            FYTEST_CASE(fence_timeout_names_rank), FYTEST_CASE(fence_fails_when_rank_exits),
            FYTEST_CASE(wrong_job_key))
