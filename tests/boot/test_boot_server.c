/*
 * test_boot_server.c - ferryrun's bootstrap server against strangers and starvation.
 *
 * The test starts ferryrun with this same program as its one rank ("rank FIFO" mode): the
 * rank prints FERRY_BOOT_ADDR, then blocks on a FIFO until the test has finished attacking
 * the server, then joins the job (put, fence, get) and prints "rank ok".  Meanwhile the test
 * connects to the server as a stranger would: a HELLO with a wrong job secret, messages
 * announcing 32 MiB before any HELLO, silence, more silent connections than the server takes
 * at once; and, with a low limit of open files, more connections than it has fds for.  Each
 * must be refused or bounded (the server's memory, fds, CPU and log lines are read from
 * /proc), and the job must still complete.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "boot/boot.h"
#include "boot/builtin_wire.h"
#include "fytest.h"

#ifndef FERRYRUN_PATH
#error "FERRYRUN_PATH must be defined by the build"
#endif

#define FY_MIN_(a, b) ((a) < (b) ? (a) : (b))
#define FY_MAX_(a, b) ((a) > (b) ? (a) : (b))

/* ---- the rank --------------------------------------------------------------------------- */

static int rank_main(const char *fifo)
{
    const char *addr = getenv("FERRY_BOOT_ADDR");
    const char *secret = getenv("FERRY_BOOT_SECRET");
    printf("addr %s secret %zu\n", addr ? addr : "-", secret ? strlen(secret) : 0);
    fflush(stdout);
    int fd = open(fifo, O_RDONLY);
    char go;
    if (fd < 0 || read(fd, &go, 1) != 1)
        return 5;
    close(fd);
    fy_boot_t *b;
    if (fy_boot_init(&b) != FERRY_OK)
        return 6;
    uint64_t x = 0x5345525645520000ull, y = 0;
    size_t len = sizeof(y);
    if (fy_boot_put(b, "x", &x, sizeof(x)) != FERRY_OK || fy_boot_fence(b) != FERRY_OK ||
        fy_boot_get(b, 0, "x", &y, &len) != FERRY_OK || y != x)
        return 7;
    fy_boot_finalize(b);
    printf("rank ok\n");
    return 0;
}

/* ---- ferryrun under test ------------------------------------------------------------------ */

typedef struct job {
    pid_t pid;
    int out_fd, err_fd;
    char out[4096], err[1 << 16];
    size_t out_len, err_len;
    uint64_t err_lines;
    char fifo[64];
    struct sockaddr_in addr;
} job_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Read what ferryrun printed (up to ms); stderr lines are counted, the first 64 KiB kept. */
static void job_pump(job_t *j, int ms)
{
    struct pollfd p[2] = {{.fd = j->out_fd, .events = POLLIN}, {.fd = j->err_fd, .events = POLLIN}};
    if (poll(p, 2, ms) <= 0)
        return;
    char tmp[65536];
    for (int i = 0; i < 2; i++) {
        if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t n = read(p[i].fd, tmp, sizeof(tmp));
        if (n <= 0) {
            close(p[i].fd);
            *(i == 0 ? &j->out_fd : &j->err_fd) = -1;
            continue;
        }
        char *buf = i == 0 ? j->out : j->err;
        size_t *len = i == 0 ? &j->out_len : &j->err_len;
        size_t cap = i == 0 ? sizeof(j->out) : sizeof(j->err);
        size_t take = FY_MIN_((size_t)n, cap - 1 - *len);
        memcpy(buf + *len, tmp, take);
        *len += take;
        buf[*len] = '\0';
        if (i == 1)
            for (ssize_t k = 0; k < n; k++)
                j->err_lines += tmp[k] == '\n';
    }
}

static void job_start(job_t *j, const char *self, rlim_t nofile)
{
    memset(j, 0, sizeof(*j));
    snprintf(j->fifo, sizeof(j->fifo), "/tmp/ferry_bootsrv_%d", (int)getpid());
    unlink(j->fifo);
    FY_ASSERT(mkfifo(j->fifo, 0600) == 0);
    int po[2], pe[2];
    FY_ASSERT(pipe(po) == 0 && pipe(pe) == 0);
    fflush(NULL);
    j->pid = fork();
    FY_ASSERT(j->pid >= 0);
    if (j->pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        for (int fd = 3; fd < 64; fd++)
            close(fd);
        if (nofile != 0) {
            struct rlimit rl = {nofile, nofile};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                _exit(125);
        }
        execl(FERRYRUN_PATH, FERRYRUN_PATH, "-n", "1", "--timeout", "50", self, "rank", j->fifo,
              (char *)NULL);
        _exit(126);
    }
    close(po[1]);
    close(pe[1]);
    j->out_fd = po[0];
    j->err_fd = pe[0];
    uint64_t deadline = now_ms() + 20000;
    char *line;
    while ((line = strstr(j->out, "addr ")) == NULL || strchr(line, '\n') == NULL) {
        FY_ASSERT_MSG(now_ms() < deadline && j->out_fd >= 0, "no address from the rank: %s%s",
                      j->out, j->err);
        job_pump(j, 100);
    }
    char host[64];
    unsigned port = 0, seclen = 0;
    FY_ASSERT(sscanf(line, "addr %63[^:]:%u secret %u", host, &port, &seclen) == 3);
    FY_ASSERT_GE(seclen, 32); /* ferryrun gave the rank a secret */
    j->addr.sin_family = AF_INET;
    j->addr.sin_port = htons((uint16_t)port);
    FY_ASSERT(inet_pton(AF_INET, host, &j->addr.sin_addr) == 1);
}

/* Let the rank join; the job must end well. */
static void job_finish(job_t *j)
{
    int fd = open(j->fifo, O_WRONLY);
    FY_ASSERT(fd >= 0);
    FY_ASSERT(write(fd, "g", 1) == 1);
    close(fd);
    uint64_t deadline = now_ms() + 30000;
    while ((j->out_fd >= 0 || j->err_fd >= 0) && now_ms() < deadline)
        job_pump(j, 100);
    int st;
    FY_ASSERT(waitpid(j->pid, &st, 0) == j->pid);
    unlink(j->fifo);
    FY_ASSERT_MSG(strstr(j->out, "rank ok") != NULL && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the job did not complete (status 0x%x):\n%s%s", st, j->out, j->err);
}

static long proc_status_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    FY_ASSERT(f != NULL);
    long v = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, strlen(field)) == 0)
            v = atol(line + strlen(field) + 1);
    fclose(f);
    return v;
}

static int proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    FY_ASSERT(d != NULL);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 2;
}

/* utime + stime of a process, in ms */
static uint64_t proc_cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    FY_ASSERT(f != NULL);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    FY_ASSERT(p != NULL);
    unsigned long long ut = 0, st = 0;
    /* fields after the name: state(3) ... utime(14) stime(15) */
    FY_ASSERT(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) ==
              2);
    return (ut + st) * 1000 / (uint64_t)sysconf(_SC_CLK_TCK);
}

static int connect_to(const job_t *j)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FY_ASSERT(fd >= 0);
    FY_ASSERT_MSG(connect(fd, (const struct sockaddr *)&j->addr, sizeof(j->addr)) == 0,
                  "connect: %s", strerror(errno));
    return fd;
}

/* Wait (up to ms) for the server to close fd; returns the bytes it sent first (into buf). */
static ssize_t until_closed(int fd, uint8_t *buf, size_t cap, int ms, job_t *j)
{
    uint64_t deadline = now_ms() + (uint64_t)ms;
    size_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(deadline - now_ms());
        FY_ASSERT_MSG(now_ms() < deadline, "the server did not close a stranger's connection");
        job_pump(j, 0);
        if (poll(&p, 1, left < 100 ? left : 100) <= 0)
            continue;
        uint8_t tmp[4096];
        ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
        if (n <= 0)
            return (ssize_t)got;
        size_t take = FY_MIN_((size_t)n, cap - got);
        memcpy(buf + got, tmp, take);
        got += take;
    }
}

static void send_hello(int fd, const char *secret)
{
    fy_wire_buf_t m = {0};
    fy_wire_begin(&m, FY_WIRE_HELLO);
    fy_wire_u32(&m, FY_WIRE_VERSION);
    fy_wire_u32(&m, 0);
    fy_wire_u32(&m, 1);
    fy_wire_u32(&m, (uint32_t)getpid());
    fy_wire_u16(&m, 0);
    fy_wire_u16(&m, (uint16_t)strlen(secret));
    fy_wire_bytes(&m, secret, strlen(secret));
    fy_wire_end(&m);
    FY_ASSERT(send(fd, m.data, m.len, MSG_NOSIGNAL) == (ssize_t)m.len);
    fy_wire_buf_free(&m);
}

static char self_path[4096];

/* ---- cases ---------------------------------------------------------------------------------- */

static void strangers(void)
{
    job_t j;
    job_start(&j, self_path, 0);
    long rss0 = proc_status_kb(j.pid, "VmRSS:");
    int fds0 = proc_fds(j.pid);

    /* a wrong secret: an ERROR saying so, then closed */
    int fd = connect_to(&j);
    send_hello(fd, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    uint8_t buf[512];
    ssize_t n = until_closed(fd, buf, sizeof(buf), 10000, &j);
    close(fd);
    FY_ASSERT_GE(n, FY_WIRE_HDR_LEN + 4);
    uint32_t len;
    unsigned type;
    fy_wire_parse_hdr(buf, &len, &type);
    FY_ASSERT_EQ(type, FY_WIRE_ERROR);
    fy_wire_rd_t rd = {.p = buf + FY_WIRE_HDR_LEN, .left = (size_t)n - FY_WIRE_HDR_LEN};
    FY_ASSERT_STATUS((ferry_status_t)(int32_t)fy_wire_rd_u32(&rd), FERRY_ERR_ACCESS_DENIED);

    /* strangers announcing 32 MiB and sending it: refused at the header, nothing buffered */
    enum { NBIG = 4 };
    static uint8_t junk[1 << 20];
    int big[NBIG];
    for (int i = 0; i < NBIG; i++) {
        big[i] = connect_to(&j);
        uint8_t h[FY_WIRE_HDR_LEN] = {0x02, 0, 0, 0, 0, FY_WIRE_HELLO, 0, 0}; /* 32 MiB */
        FY_ASSERT(send(big[i], h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
    }
    for (int k = 0; k < 32; k++)
        for (int i = 0; i < NBIG; i++)
            if (big[i] >= 0 && send(big[i], junk, sizeof(junk), MSG_NOSIGNAL) < 0) {
                close(big[i]); /* the server closed it */
                big[i] = -1;
            }
    job_pump(&j, 0);
    long rss1 = proc_status_kb(j.pid, "VmRSS:");
    for (int i = 0; i < NBIG; i++)
        if (big[i] >= 0) {
            until_closed(big[i], buf, sizeof(buf), 10000, &j);
            close(big[i]);
        }

    /* silent strangers: at most 64 are taken at once, each closed after the HELLO timeout */
    enum { NSILENT = 80 };
    int quiet[NSILENT];
    for (int i = 0; i < NSILENT; i++)
        quiet[i] = connect_to(&j);
    uint64_t t0 = now_ms();
    int fds1 = 0;
    for (int k = 0; k < 20; k++) { /* let the server accept what it will */
        job_pump(&j, 50);
        fds1 = FY_MAX_(fds1, proc_fds(j.pid));
    }
    until_closed(quiet[0], buf, sizeof(buf), FY_WIRE_HELLO_TIMEOUT_MS + 5000, &j);
    uint64_t waited = now_ms() - t0;
    for (int i = 0; i < NSILENT; i++)
        close(quiet[i]);

    job_finish(&j);
    printf("server: VmRSS %ld -> %ld kB with %d strangers sending 32 MiB each; fds %d -> %d "
           "with %d silent ones (closed after %.1f s); %llu lines on stderr\n",
           rss0, rss1, NBIG, fds0, fds1, NSILENT, (double)waited / 1e3,
           (unsigned long long)j.err_lines);
    fflush(stdout);
    FY_ASSERT_LT(rss1 - rss0, 16 * 1024);
    FY_ASSERT_LE(fds1, fds0 + 64);
    FY_ASSERT_GE(waited, FY_WIRE_HELLO_TIMEOUT_MS - 1000);
    FY_ASSERT_MSG(strstr(j.err, "wrong job secret") != NULL, "no word of the refusal:\n%s", j.err);
    FY_ASSERT_LE(j.err_lines, 12); /* rate-limited: a few lines, not one per stranger */
}

static void emfile(void)
{
    job_t j;
    job_start(&j, self_path, 24);
    int fds0 = proc_fds(j.pid);
    FY_ASSERT_LT(fds0, 24);
    /* more connections than the server has fds left: accept() fails with EMFILE */
    enum { NCONN = 40 };
    int c[NCONN];
    for (int i = 0; i < NCONN; i++)
        c[i] = connect_to(&j);
    for (int k = 0; k < 5; k++)
        job_pump(&j, 20);
    uint64_t cpu0 = proc_cpu_ms(j.pid), t0 = now_ms(), lines0 = j.err_lines;
    while (now_ms() - t0 < 1000)
        job_pump(&j, 50);
    uint64_t cpu = proc_cpu_ms(j.pid) - cpu0, lines = j.err_lines - lines0;
    int fds1 = proc_fds(j.pid);
    for (int i = 0; i < NCONN; i++)
        close(c[i]);
    job_finish(&j); /* fds came back: the rank was served */
    printf("ferryrun with %d fds: %d open, %llu ms of CPU in 1 s of EMFILE, %llu stderr lines\n",
           24, fds1, (unsigned long long)cpu, (unsigned long long)lines);
    fflush(stdout);
    FY_ASSERT_GE(fds1, 23); /* the table really was full */
    FY_ASSERT_LT(cpu,
                 100); /* before the back-off: 250 ms and 70,000 lines, held back by the pipe */
    FY_ASSERT_LE(lines, 2);
    FY_ASSERT_MSG(strstr(j.err, "accept failed") != NULL, "no word of the failure:\n%s", j.err);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "rank") == 0)
        return rank_main(argv[2]);
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
    if (n <= 0)
        return 1;
    self_path[n] = '\0';
    static const fytest_case_t cases[] = {FYTEST_CASE(strangers), FYTEST_CASE(emfile)};
    return fytest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 0);
}
