/*
 * A world barrier with a rank gone: the barrier fails with the endpoint's error and logs one
 * error line, and leaving the world afterwards adds a warning but no second error (it used to
 * run its own barrier, which failed again and logged "sending to rank 1 failed").  Run as two
 * ranks: rank 1 leaves without a word after the first barrier; rank 0 sends its own stderr to
 * a file for the rest and counts the error lines.
 */
#include <fcntl.h>

#include "fytest.h"

static void barrier_after_death(void)
{
    ferry_context_t *ctx;
    ferry_worker_t *w;
    ferry_world_t *world;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    FY_ASSERT_OK(ferry_world_create(w, &world));
    FY_ASSERT_EQ(ferry_world_size(world), 2);
    FY_ASSERT_OK(ferry_world_barrier(world));
    if (ferry_world_rank(world) == 1)
        _exit(0); /* gone: no goodbye, no flush */
    char path[] = "/tmp/fytest_wdead_XXXXXX";
    int fd = mkstemp(path);
    FY_ASSERT(fd >= 0);
    unlink(path);
    int saved = dup(2);
    FY_ASSERT(saved >= 0 && dup2(fd, 2) == 2);
    ferry_status_t st = ferry_world_barrier(world);
    ferry_world_destroy(world);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    dup2(saved, 2);
    close(saved);
    static char log[16384];
    ssize_t n = pread(fd, log, sizeof(log) - 1, 0);
    close(fd);
    FY_ASSERT(n >= 0);
    log[n] = '\0';
    FY_ASSERT_MSG(st != FERRY_OK, "the barrier passed with rank 1 gone");
    int errors = 0;
    for (const char *p = log; (p = strstr(p, "] error ")) != NULL; p++)
        errors++;
    FY_ASSERT_MSG(errors == 1, "%d error lines, expected one:\n%s", errors, log);
    FY_ASSERT_MSG(strstr(log, "leaving without every rank") != NULL, "log:\n%s", log);
}

FYTEST_MAIN_INPROC(FYTEST_CASE(barrier_after_death))
