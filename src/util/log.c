/*
 * log.c - leveled logging to stderr or FERRY_LOG_FILE.
 *
 * Each line: "[ferry host:pid rank] LEVEL file:line message".  A line is formatted into one
 * buffer and written with one write(2), so lines of concurrent processes never interleave
 * mid-line.  The level lives in a plain int read by the fy_log() macro before formatting.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/log.h"

int fy_log_level_current = FY_LOG_WARN;
static int log_fd = 2;
static int log_rank = -1;
static char log_host[64];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = {"none", "error", "warn", "info", "debug", "trace"};

int fy_log_level_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    if (strcasecmp(name, "warning") == 0)
        return FY_LOG_WARN;
    return -1;
}

static void log_init_once(void)
{
    gethostname(log_host, sizeof(log_host) - 1);
    char *dot = strchr(log_host, '.');
    if (dot != NULL)
        *dot = '\0';
    const char *lvl = getenv("FERRY_LOG_LEVEL");
    if (lvl != NULL && *lvl != '\0') {
        int l = fy_log_level_parse(lvl);
        if (l < 0)
            fprintf(stderr,
                    "[ferry] FERRY_LOG_LEVEL=%s is not a level: use none, error, warn, info, "
                    "debug or trace (keeping warn)\n",
                    lvl);
        else
            fy_log_level_current = l;
    }
    const char *file = getenv("FERRY_LOG_FILE");
    if (file != NULL && *file != '\0') {
        char path[4096];
        size_t o = 0;
        for (const char *p = file; *p != '\0' && o < sizeof(path) - 24; p++) {
            if (p[0] == '%' && p[1] == 'p') {
                o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
                p++;
            } else {
                path[o++] = *p;
            }
        }
        path[o] = '\0';
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            fprintf(stderr, "[ferry] FERRY_LOG_FILE=%s cannot be opened: %m (logging to stderr)\n",
                    path);
        else
            log_fd = fd;
    }
}

void fy_log_init(void)
{
    pthread_once(&log_once, log_init_once);
}

void fy_log_set_rank(int rank)
{
    log_rank = rank;
}

void fy_log_emit(fy_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    fy_log_init();
    char buf[2048];
    const char *base = strrchr(file, '/');
    base = base != NULL ? base + 1 : file;
    int n;
    if (log_rank >= 0)
        n = snprintf(buf, sizeof(buf), "[ferry %s:%d r%d] %s %s:%d ", log_host, (int)getpid(),
                     log_rank, level_names[level], base, line);
    else
        n = snprintf(buf, sizeof(buf), "[ferry %s:%d] %s %s:%d ", log_host, (int)getpid(),
                     level_names[level], base, line);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(buf) - 2)
        len = sizeof(buf) - 2;
    buf[len++] = '\n';
    ssize_t w = write(log_fd, buf, len);
    (void)w;
}
