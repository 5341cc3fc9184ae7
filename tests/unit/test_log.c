/*
 * test_log.c - level names, the promise that a disabled level costs a compare (its arguments
 * are not even evaluated), FERRY_LOG_LEVEL, and FERRY_LOG_FILE with %p.  Each case runs in its
 * own child process, so each sees a fresh, not yet initialized logger.
 */
#include <fcntl.h>
#include <stdlib.h>

#include "fytest.h"
#include "util/log.h"

static int side_effects;
static int costly(void)
{
    side_effects++;
    return 7;
}

/* Read a whole (small) file into buf; returns length or -1. */
static ssize_t slurp(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}

static void level_parse(void)
{
    FY_ASSERT_EQ(fy_log_level_parse("none"), FY_LOG_NONE);
    FY_ASSERT_EQ(fy_log_level_parse("error"), FY_LOG_ERROR);
    FY_ASSERT_EQ(fy_log_level_parse("warn"), FY_LOG_WARN);
    FY_ASSERT_EQ(fy_log_level_parse("warning"), FY_LOG_WARN);
    FY_ASSERT_EQ(fy_log_level_parse("INFO"), FY_LOG_INFO);
    FY_ASSERT_EQ(fy_log_level_parse("Debug"), FY_LOG_DEBUG);
    FY_ASSERT_EQ(fy_log_level_parse("trace"), FY_LOG_TRACE);
    FY_ASSERT_EQ(fy_log_level_parse("verbose"), -1);
    FY_ASSERT_EQ(fy_log_level_parse(""), -1);
    FY_ASSERT_EQ(fy_log_level_parse("debugx"), -1);
}

static void disabled_level_is_not_evaluated(void)
{
    char path[] = "/tmp/fytest_log_XXXXXX";
    int fd = mkstemp(path);
    FY_ASSERT(fd >= 0);
    unlink(path);
    unsetenv("FERRY_LOG_FILE");
    unsetenv("FERRY_LOG_LEVEL");
    fy_log_init();
    FY_ASSERT(dup2(fd, 2) == 2);

    fy_log_level_current = FY_LOG_WARN;
    side_effects = 0;
    fy_debug("value %d", costly());
    fy_trace("value %d", costly());
    fy_info("value %d", costly());
    FY_ASSERT_EQ(side_effects, 0);
    FY_ASSERT_EQ(lseek(fd, 0, SEEK_END), 0); /* and nothing was written */

    fy_warn("value %d", costly());
    fy_error("value %d", costly());
    FY_ASSERT_EQ(side_effects, 2);

    fy_log_level_current = FY_LOG_NONE;
    fy_error("value %d", costly());
    FY_ASSERT_EQ(side_effects, 2);

    fy_log_level_current = FY_LOG_TRACE;
    fy_trace("traced %d", costly());
    FY_ASSERT_EQ(side_effects, 3);

    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    FY_ASSERT_GT(n, 0);
    buf[n] = '\0';
    FY_ASSERT_MSG(strstr(buf, "traced 7") != NULL, "log: %s", buf);
    FY_ASSERT_MSG(strstr(buf, "warn") != NULL && strstr(buf, "error") != NULL, "log: %s", buf);
    /* Three lines: warn, error, trace. */
    int lines = 0;
    for (ssize_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    FY_ASSERT_EQ(lines, 3);
    close(fd);
}

static void level_from_environment(void)
{
    setenv("FERRY_LOG_LEVEL", "debug", 1);
    fy_log_init();
    FY_ASSERT_EQ(fy_log_level_current, FY_LOG_DEBUG);
    side_effects = 0;
    fy_log_level_current = FY_LOG_DEBUG;
    fy_trace("x %d", costly());
    FY_ASSERT_EQ(side_effects, 0);
}

static void log_file_with_pid(void)
{
    char dir[] = "/tmp/fytest_logdir_XXXXXX";
    FY_ASSERT(mkdtemp(dir) != NULL);
    char pattern[256], expect[256];
    snprintf(pattern, sizeof(pattern), "%s/ferry.%%p.log", dir);
    snprintf(expect, sizeof(expect), "%s/ferry.%d.log", dir, (int)getpid());
    setenv("FERRY_LOG_FILE", pattern, 1);
    unsetenv("FERRY_LOG_LEVEL");
    fy_log_init();
    fy_log_set_rank(3);
    fy_error("marker %s %d", "abc", 42);

    char buf[4096];
    ssize_t n = slurp(expect, buf, sizeof(buf));
    FY_ASSERT_MSG(n > 0, "nothing in %s (pattern %s)", expect, pattern);
    FY_ASSERT_MSG(strstr(buf, "marker abc 42\n") != NULL, "log: %s", buf);
    FY_ASSERT_MSG(strstr(buf, "r3") != NULL, "no rank in: %s", buf);
    FY_ASSERT_MSG(strstr(buf, "test_log.c") != NULL, "no file name in: %s", buf);
    unlink(expect);
    rmdir(dir);
}

FYTEST_MAIN(FYTEST_CASE(level_parse), FYTEST_CASE(disabled_level_is_not_evaluated),
            FYTEST_CASE(level_from_environment), FYTEST_CASE(log_file_with_pid))
