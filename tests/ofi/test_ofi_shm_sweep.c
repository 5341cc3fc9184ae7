/*
 * The regions that killed processes leave in /dev/shm are removed (src/tl/ofi/ofi_shm_name.c).
 * CTest sets FERRY_TLS=ofi and FERRY_OFI_PROVIDER=shm.
 *
 * Two children each open a worker (an ofi shm interface, so a region /dev/shm/fyofi_<pid
 * namespace>_<pid>_...) and park.  One is SIGKILLed: its region stays, since nothing of it ran
 * to remove it.  Then this process opens its first worker: the dead child's region is gone,
 * the live child's and this process's own are there.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry.h"
#include "fytest.h"
#include "fytest_proc.h"

/* How many shm regions of process pid (of our pid namespace) /dev/shm holds. */
static int regions_of(pid_t pid)
{
    struct stat sb;
    FY_ASSERT_EQ(stat("/proc/self/ns/pid", &sb), 0);
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "fyofi_%llx_%d_", (unsigned long long)sb.st_ino, (int)pid);
    DIR *d = opendir("/dev/shm");
    FY_ASSERT(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static int parked(int rfd, int wfd, int argc, char **argv)
{
    (void)argc, (void)argv;
    ferry_context_t *ctx;
    ferry_worker_t *w;
    if (ferry_context_create(NULL, &ctx) != FERRY_OK ||
        ferry_worker_create(ctx, NULL, &w) != FERRY_OK)
        return 3;
    char ch;
    if (fyproc_send(wfd, "r", 1) != 0)
        return 4;
    (void)fyproc_recv(rfd, &ch, 1, -1); /* until killed, or the pipe closes */
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    return 0;
}

static const fyproc_role_t roles[] = {{"parked", parked}};

static void killed_regions_swept(void)
{
    fyproc_t dead, live;
    char ch;
    FY_ASSERT_EQ(fyproc_spawn(&dead, "parked", NULL, 60), 0);
    FY_ASSERT_EQ(fyproc_spawn(&live, "parked", NULL, 60), 0);
    FY_ASSERT_EQ(fyproc_recv(dead.rfd, &ch, 1, 20000), 0);
    FY_ASSERT_EQ(fyproc_recv(live.rfd, &ch, 1, 20000), 0);
    FY_ASSERT_GE(regions_of(dead.pid), 1);
    FY_ASSERT_GE(regions_of(live.pid), 1);
    pid_t dead_pid = dead.pid;
    fyproc_kill(&dead, SIGKILL);
    FY_ASSERT_GE(regions_of(dead_pid), 1); /* left behind */

    ferry_context_t *ctx;
    ferry_worker_t *w;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    FY_ASSERT_EQ(regions_of(dead_pid), 0);
    FY_ASSERT_GE(regions_of(live.pid), 1);
    FY_ASSERT_GE(regions_of(getpid()), 1);

    FY_ASSERT_EQ(fyproc_send(live.wfd, "x", 1), 0);
    FY_ASSERT_EQ(fyproc_wait(&live, 20000), 0);
    FY_ASSERT_EQ(regions_of(live.pid), 0); /* a clean exit removes its own */
    fyproc_release(&live);
    fyproc_release(&dead);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    FY_ASSERT_EQ(regions_of(getpid()), 0);
}

FYTEST_MAIN_ROLES(roles, FYTEST_CASE(killed_regions_swept))
