/*
 * test_tools.c - the measuring tools work and say so clearly: ferry_perf under ferryrun
 * (table, CSV, JSON, checked payloads, every test), ferry_perf as server and client,
 * ferry_perf's --demo preset, ferry_info's listings and health check, and bad options on both.
 *
 * Each case runs the real binaries (paths compiled in by CMake) in a child process of the
 * harness, with stdout and stderr captured, and parses what they print: a figure must be a
 * number above zero, CSV must have the documented header and one row per measurement, JSON
 * must parse.  No case asserts a speed: only that the output is sane.
 */
#include <ctype.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fytest.h"

#define JOB "--timeout 50 "

typedef struct run {
    int status; /* exit status, or 128 + signal */
    char *out, *err;
} run_t;

static void append(char **buf, size_t *len, const char *data, size_t n)
{
    *buf = realloc(*buf, *len + n + 1);
    FY_ASSERT(*buf != NULL);
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
}

/* Run a shell command; capture both streams. */
static run_t run(const char *cmd)
{
    int po[2], pe[2];
    run_t r = {0, NULL, NULL};
    size_t lo = 0, le = 0;
    FY_ASSERT(pipe(po) == 0 && pipe(pe) == 0);
    pid_t pid = fork();
    FY_ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(pe[0]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    append(&r.out, &lo, "", 0);
    append(&r.err, &le, "", 0);
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        FY_ASSERT(poll(fds, 2, -1) > 0);
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[4096];
            ssize_t n = read(fds[i].fd, buf, sizeof(buf));
            if (n <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (i == 0) {
                append(&r.out, &lo, buf, (size_t)n);
            } else {
                append(&r.err, &le, buf, (size_t)n);
            }
        }
    }
    int st = 0;
    waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return r;
}

static run_t runf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static run_t runf(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return run(cmd);
}

static void run_free(run_t *r)
{
    free(r->out);
    free(r->err);
}

#define ASSERT_EXIT(r, code)                                                                       \
    FY_ASSERT_MSG((r).status == (code),                                                            \
                  "exit status %d, expected %d\n--- stdout:\n%s--- stderr:\n%s", (r).status,       \
                  (code), (r).out, (r).err)

/* The data rows of a table (lines not starting with '#'), field n (0-based) as a number. */
static int table_rows(const char *out, double fields[][8], int max)
{
    int n = 0;
    for (const char *l = out; *l && n < max;
         l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        if (*l == '#' || *l == '\n')
            continue;
        char line[512];
        size_t len = strcspn(l, "\n");
        if (len >= sizeof(line))
            len = sizeof(line) - 1;
        memcpy(line, l, len);
        line[len] = '\0';
        char *save = NULL;
        int k = 0;
        for (char *t = strtok_r(line, " \t", &save); t && k < 8; t = strtok_r(NULL, " \t", &save))
            fields[n][k++] = strtod(t, NULL) * (strchr(t, 'K')   ? 1024
                                                : strchr(t, 'M') ? 1 << 20
                                                                 : 1);
        if (k >= 3)
            n++;
    }
    return n;
}

/* ---- a small JSON validator: enough to say "this parses" ------------------------------------ */

static const char *json_value(const char *s);

static const char *ws(const char *s)
{
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
        s++;
    return s;
}

static const char *json_string(const char *s)
{
    if (*s != '"')
        return NULL;
    for (s++; *s && *s != '"'; s++) {
        if ((unsigned char)*s < 0x20)
            return NULL;
        if (*s == '\\' && *++s == '\0')
            return NULL;
    }
    return *s == '"' ? s + 1 : NULL;
}

static const char *json_value(const char *s)
{
    s = ws(s);
    if (*s == '{' || *s == '[') {
        char close = *s == '{' ? '}' : ']';
        s = ws(s + 1);
        if (*s == close)
            return s + 1;
        for (;;) {
            if (close == '}') {
                if ((s = json_string(ws(s))) == NULL || *(s = ws(s)) != ':')
                    return NULL;
                s++;
            }
            if ((s = json_value(s)) == NULL)
                return NULL;
            s = ws(s);
            if (*s == close)
                return s + 1;
            if (*s != ',')
                return NULL;
            s++;
        }
    }
    if (*s == '"')
        return json_string(s);
    if (strncmp(s, "true", 4) == 0 || strncmp(s, "null", 4) == 0)
        return s + 4;
    if (strncmp(s, "false", 5) == 0)
        return s + 5;
    char *end;
    strtod(s, &end);
    return end != s ? end : NULL;
}

static int json_valid(const char *s)
{
    const char *e = json_value(s);
    return e != NULL && *ws(e) == '\0';
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* ---- ferry_perf -------------------------------------------------------------------------------
 */

static void perf_am_lat_table(void)
{
    run_t r =
        runf("%s -n 2 " JOB "%s -t am_lat -s 8,1k -n 200 -w 10 -c", FERRYRUN_BIN, FERRY_PERF_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT_MSG(strstr(r.out, "am_lat") && strstr(r.out, "median"), "no am_lat table:\n%s",
                  r.out);
    FY_ASSERT_MSG(strstr(r.out, "verification: passed"), "no verification verdict:\n%s", r.out);
    double f[8][8];
    int n = table_rows(r.out, f, 8);
    FY_ASSERT_EQ(n, 2);
    FY_ASSERT_EQ(f[0][0], 8);
    FY_ASSERT_EQ(f[1][0], 1024);
    for (int i = 0; i < n; i++) {
        FY_ASSERT_EQ(f[i][1], 200);                       /* iterations */
        FY_ASSERT_MSG(f[i][2] > 0, "median %g", f[i][2]); /* latency > 0 */
        FY_ASSERT_MSG(f[i][5] > 0 && f[i][5] <= f[i][2], "min %g median %g", f[i][5], f[i][2]);
        FY_ASSERT_MSG(f[i][2] <= f[i][3] && f[i][3] <= f[i][4], "percentiles out of order");
    }
    run_free(&r);
}

static void perf_am_bw_csv(void)
{
    run_t r = runf("%s -n 2 " JOB "%s -t am_bw -s 64,64k -n 64 -w 16 -W 16 -c -f csv", FERRYRUN_BIN,
                   FERRY_PERF_BIN);
    ASSERT_EXIT(r, 0);
    const char *hdr = "test,size,iters,window,lat_kind,lat_avg_us,lat_p50_us,lat_p90_us,"
                      "lat_p99_us,lat_min_us,lat_max_us,bw_MBps,rate_per_s\n";
    FY_ASSERT_MSG(strncmp(r.out, hdr, strlen(hdr)) == 0, "bad CSV header:\n%s", r.out);
    FY_ASSERT_EQ(count(r.out, "\n"), 3);
    const char *row = strchr(r.out, '\n') + 1;
    for (int i = 0; i < 2; i++) {
        char test[32];
        unsigned long size, iters, window;
        double bw = 0, rate = 0;
        FY_ASSERT_MSG(sscanf(row, "%31[^,],%lu,%lu,%lu,,,,,,,,%lf,%lf", test, &size, &iters,
                             &window, &bw, &rate) == 6,
                      "bad CSV row: %s", row);
        FY_ASSERT_STR_EQ(test, "am_bw");
        FY_ASSERT_EQ(size, i == 0 ? 64 : 65536);
        FY_ASSERT_EQ(iters, 64);
        FY_ASSERT_EQ(window, 16);
        FY_ASSERT_MSG(bw > 0 && rate > 0, "bw %g rate %g", bw, rate);
        row = strchr(row, '\n') + 1;
    }
    run_free(&r);
}

static void perf_json(void)
{
    run_t r = runf("%s -n 2 " JOB "%s -t am_lat,am_rate,tag_lat -s 8 -n 100 -w 5 --check -f json",
                   FERRYRUN_BIN, FERRY_PERF_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT_MSG(json_valid(r.out), "not JSON:\n%s", r.out);
    FY_ASSERT(strstr(r.out, "\"tool\":\"ferry_perf\"") != NULL);
    FY_ASSERT(strstr(r.out, "\"test\":\"am_lat\",\"available\":true,\"size\":8") != NULL);
    FY_ASSERT(strstr(r.out, "\"test\":\"am_rate\",\"available\":true,\"size\":8") != NULL);
    FY_ASSERT(strstr(r.out, "\"lat_kind\":\"one-way\"") != NULL);
    FY_ASSERT(strstr(r.out, "\"rate_per_s\":") != NULL);
    /* tags: measured, or said to be unavailable, never silently missing */
    FY_ASSERT(strstr(r.out, "\"test\":\"tag_lat\"") != NULL);
    FY_ASSERT(strstr(r.out, "\"check\":true") != NULL); /* --check, the long -c */
    FY_ASSERT(strstr(r.out, "\"verification_errors\":0}") != NULL);
    run_free(&r);
}

/* Every test, checked, at two sizes: each one either has its rows or says why not. */
static void perf_every_test_checked(void)
{
    run_t r = runf("%s -n 2 " JOB "%s -t all -s 8,8k -n 40 -w 4 -W 8 -c -f csv", FERRYRUN_BIN,
                   FERRY_PERF_BIN);
    ASSERT_EXIT(r, 0);
    static const char *const always[] = {"am_lat,", "am_bw,",   "am_rate,", "put_lat,",
                                         "put_bw,", "get_lat,", "get_bw,",  "amo_lat,"};
    for (size_t i = 0; i < sizeof(always) / sizeof(always[0]); i++) {
        char line[64];
        snprintf(line, sizeof(line), "\n%s", always[i]);
        FY_ASSERT_MSG(count(r.out, line) == (strcmp(always[i], "amo_lat,") == 0 ? 1 : 2),
                      "%s rows missing:\n%s\n%s", always[i], r.out, r.err);
    }
    int tag_rows =
        count(r.out, "\ntag_lat,") + count(r.out, "\ntag_bw,") + count(r.out, "\ntag_stream,");
    FY_ASSERT_MSG(tag_rows == 6 || count(r.err, "not available") == 3,
                  "tag tests neither measured nor reported unavailable:\n%s\n%s", r.out, r.err);
    run_free(&r);
}

static void perf_server_client(void)
{
    /* The server prints its port; the client connects to it.  One shell runs both. */
    run_t r =
        runf("exec 3>&1; tmp=$(mktemp); "
             "%s -l -p 0 -T 40 > $tmp & srv=$!; "
             "for i in $(seq 100); do grep -q 'listening on port' $tmp && break; sleep 0.1; done; "
             "port=$(sed -n 's/.*listening on port //p' $tmp); "
             "%s -T 40 -t am_lat,put_lat -s 64 -n 100 -c -f csv 127.0.0.1:$port; rc=$?; "
             "wait $srv; src=$?; grep -q 'server address [0-9a-f]' $tmp || src=99; rm -f $tmp; "
             "echo \"client=$rc server=$src\"; exit $rc",
             FERRY_PERF_BIN, FERRY_PERF_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT_MSG(strstr(r.out, "client=0 server=0") != NULL, "%s\n%s", r.out, r.err);
    FY_ASSERT_EQ(count(r.out, "\nam_lat,64,100,1,one-way,"), 1);
    FY_ASSERT_EQ(count(r.out, "\nput_lat,64,100,1,one-way,"), 1);
    run_free(&r);
}

/* The same over tcp and udp, the network transports a client and server really use: the
 * session ends cleanly on both sides (the server's endpoint used to fail with a reset on tcp,
 * and wait out udp's peer timeout, once the client left with its answer). */
static void perf_server_client_net(void)
{
    static const char *const tls[] = {"tcp", "udp"};
    for (int i = 0; i < 2; i++) {
        run_t r = runf(
            "exec 3>&1; export FERRY_TLS=%s; tmp=$(mktemp); "
            "%s -l -p 0 -T 40 > $tmp & srv=$!; "
            "for i in $(seq 100); do grep -q 'listening on port' $tmp && break; sleep 0.1; done; "
            "port=$(sed -n 's/.*listening on port //p' $tmp); "
            "%s -T 40 -t am_lat -s 8 -n 200 -f csv 127.0.0.1:$port; rc=$?; "
            "wait $srv; src=$?; rm -f $tmp; echo \"client=$rc server=$src\"; exit $rc",
            tls[i], FERRY_PERF_BIN, FERRY_PERF_BIN);
        ASSERT_EXIT(r, 0);
        FY_ASSERT_MSG(strstr(r.out, "client=0 server=0") != NULL, "%s: %s\n%s", tls[i], r.out,
                      r.err);
        FY_ASSERT_MSG(count(r.out, "\nam_lat,8,200,1,one-way,") == 1, "%s: %s", tls[i], r.out);
        FY_ASSERT_MSG(strstr(r.err, "server done (ok)") != NULL &&
                          strstr(r.err, "failed") == NULL && strstr(r.err, "reset") == NULL,
                      "%s: stderr:\n%s", tls[i], r.err);
        run_free(&r);
    }
}

static void perf_demo(void)
{
    /* the whole demo table, busy-polling: under the sanitizers on a loaded 2-core machine it
     * needs more than JOB's 50 s (the case's own limit is FYTEST_TIMEOUT, 120 s) */
    run_t r = runf("%s -n 2 --timeout 110 %s --demo", FERRYRUN_BIN, FERRY_PERF_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT(strstr(r.out, "# am_lat:") != NULL);
    FY_ASSERT(strstr(r.out, "# am_bw:") != NULL);
    double f[32][8];
    FY_ASSERT_EQ(table_rows(r.out, f, 32), 6 + 8);
    FY_ASSERT_EQ(f[13][0], 4 << 20);
    FY_ASSERT_MSG(f[13][3] > 0, "4 MiB bandwidth %g", f[13][3]);
    run_free(&r);
}

static void perf_bad_options(void)
{
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"-x", "unknown option -x"},     {"--bogus", "unknown option '--bogus'"},
        {"-t nosuch", "unknown test"},   {"-s 1:x", "bad size list"},
        {"-s 2g", "bad size list"},      {"-n 0", "bad iteration count"},
        {"-W -3", "bad window"},         {"-f xml", "unknown format"},
        {"-n", "needs a value"},         {"-l localhost", "takes no server address"},
        {"-t put_lat -s 0", "no size"},  {"-p 70000", "bad port"},
        {"-a 00 localhost", "not both"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_t r = runf("%s %s", FERRY_PERF_BIN, bad[i].args);
        ASSERT_EXIT(r, 2);
        FY_ASSERT_MSG(strstr(r.err, bad[i].says) != NULL, "'%s': expected \"%s\" in:\n%s",
                      bad[i].args, bad[i].says, r.err);
        FY_ASSERT_MSG(strstr(r.err, "ferry_perf -h") != NULL, "no hint to -h in:\n%s", r.err);
        FY_ASSERT_STR_EQ(r.out, "");
        run_free(&r);
    }
    run_t h = runf("%s -h", FERRY_PERF_BIN);
    ASSERT_EXIT(h, 0);
    FY_ASSERT(strstr(h.out, "am_lat") && strstr(h.out, "amo_lat") &&
              strstr(h.out, "ferryrun -n 2"));
    run_free(&h);
    /* alone, without a launcher or a server: a clear word, not a hang */
    run_t a = runf("%s -T 10 -t am_lat < /dev/null", FERRY_PERF_BIN);
    ASSERT_EXIT(a, 2);
    FY_ASSERT_MSG(strstr(a.err, "needs exactly 2 processes"), "%s", a.err);
    run_free(&a);
    /* a server address that is not one */
    run_t x = runf("%s -T 10 -a zz", FERRY_PERF_BIN);
    ASSERT_EXIT(x, 2);
    FY_ASSERT_MSG(strstr(x.err, "-a wants the hex address"), "%s", x.err);
    run_free(&x);
    x = runf("%s -T 10 127.0.0.1:99999", FERRY_PERF_BIN);
    ASSERT_EXIT(x, 2);
    FY_ASSERT_MSG(strstr(x.err, "bad port"), "%s", x.err);
    run_free(&x);
    /* a client with nobody listening */
    run_t c = runf("%s -T 10 127.0.0.1:1", FERRY_PERF_BIN);
    ASSERT_EXIT(c, 1);
    FY_ASSERT_MSG(strstr(c.err, "cannot connect"), "%s", c.err);
    run_free(&c);
}

/* ---- ferry_info --------------------------------------------------------------------------------
 */

static void info_lists_self(void)
{
    run_t r = runf("%s", FERRY_INFO_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT_MSG(strstr(r.out, "transports compiled in:") != NULL, "%s", r.out);
    FY_ASSERT_MSG(strstr(r.out, "\ntransport self:") != NULL, "%s", r.out);
    FY_ASSERT_MSG(strstr(r.out, "latency") && strstr(r.out, "bandwidth") &&
                      strstr(r.out, "capabilities"),
                  "%s", r.out);
    run_free(&r);
    r = runf("%s -t self", FERRY_INFO_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT_EQ(count(r.out, "\ntransport "), 1);
    run_free(&r);
}

static void info_config(void)
{
    run_t r = runf("%s -c", FERRY_INFO_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT_MSG(strstr(r.out, "FERRY_TLS") != NULL, "%s", r.out);
    FY_ASSERT_MSG(strstr(r.out, "FERRY_WAIT") != NULL, "%s", r.out);
    run_free(&r);
    /* a bad value is refused with the variable's name */
    r = runf("FERRY_TLS=nosuch %s -c", FERRY_INFO_BIN);
    ASSERT_EXIT(r, 1);
    FY_ASSERT_MSG(strstr(r.err, "FERRY_TLS") != NULL, "%s", r.err);
    run_free(&r);
}

static void info_address(void)
{
    run_t r = runf("FERRY_TLS=self %s -a", FERRY_INFO_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT_MSG(strstr(r.out, "address (") != NULL && strstr(r.out, "worker ") != NULL, "%s",
                  r.out);
    /* decoded: the worker's uuid, its one interface with transport, device and figures */
    FY_ASSERT_MSG(strstr(r.out, "1 interface(s)") != NULL && strstr(r.out, "  [0] self ") != NULL &&
                      strstr(r.out, "latency ") != NULL,
                  "%s", r.out);
    run_free(&r);
    r = runf("%s -n 2 " JOB "%s -a", FERRYRUN_BIN, FERRY_INFO_BIN);
    ASSERT_EXIT(r, 0);
    FY_ASSERT_MSG(strstr(r.out, "=== rank 0 of 2") && strstr(r.out, "=== rank 1 of 2"), "%s",
                  r.out);
    run_free(&r);
}

static void info_health(void)
{
    run_t r = runf("%s --health", FERRY_INFO_BIN);
    FY_ASSERT_MSG(r.status == 0 || r.status == 1, "status %d", r.status);
    static const char *const checks[] = {"shared memory", "cross-memory attach", "loopback",
                                         "clock", "cpus"};
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
        FY_ASSERT_MSG(strstr(r.out, checks[i]) != NULL, "no %s check:\n%s", checks[i], r.out);
    int fails = count(r.out, "[FAIL]");
    FY_ASSERT_EQ(r.status, fails ? 1 : 0);
    FY_ASSERT(strstr(r.out, " failed, ") != NULL);
    run_free(&r);
}

static void info_bad_options(void)
{
    static const char *const bad[] = {"--bogus", "-x", "-t", "extra"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_t r = runf("%s %s", FERRY_INFO_BIN, bad[i]);
        ASSERT_EXIT(r, 2);
        FY_ASSERT_MSG(strstr(r.err, "ferry_info") && strstr(r.err, "-h for help"), "'%s': %s",
                      bad[i], r.err);
        run_free(&r);
    }
    run_t r = runf("%s -t nosuch", FERRY_INFO_BIN);
    ASSERT_EXIT(r, 2);
    FY_ASSERT_MSG(strstr(r.err, "no compiled transport matches"), "%s", r.err);
    run_free(&r);
}

FYTEST_MAIN(FYTEST_CASE(perf_am_lat_table), FYTEST_CASE(perf_am_bw_csv), FYTEST_CASE(perf_json),
            FYTEST_CASE(perf_every_test_checked), FYTEST_CASE(perf_server_client),
            FYTEST_CASE(perf_server_client_net), FYTEST_CASE(perf_demo),
            FYTEST_CASE(perf_bad_options), FYTEST_CASE(info_lists_self), FYTEST_CASE(info_config),
            FYTEST_CASE(info_address), FYTEST_CASE(info_health), FYTEST_CASE(info_bad_options))
