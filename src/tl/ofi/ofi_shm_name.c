/*
 * ofi_shm_name.c - the name of an shm interface's region, and the sweep of the regions that
 * killed processes left in /dev/shm.
 *
 * libfabric's shm keeps each endpoint's region in a file /dev/shm/<name> and removes it when
 * the endpoint closes, or from its handlers of catchable signals.  A process killed with
 * SIGKILL (or that exits without closing) leaves the file, 16 MiB of memory each, until the
 * machine reboots: a test suite that kills peers on purpose left thousands here.  So ferry
 * names every shm region after its maker, fyofi_<pid namespace>_<pid>_<seq>_<time>, and the
 * first shm interface a process opens removes every region of a process of its own pid
 * namespace that no longer exists.  A region of another pid namespace, or of a name not
 * ferry's, is never touched: a pid means nothing there.  (A dead process whose pid was taken
 * again keeps its file until that process ends too.)
 *
 * The name also keeps 1.17 from a crash: shm names an endpoint after its process and a
 * per-process index, and an endpoint that closed and a new one that took its name while a
 * peer still mapped the old one broke that peer; every shm iface gets a name of its own.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tl/ofi/ofi.h"
#include "util/clock.h"
#include "util/log.h"

static unsigned long long pidns_ino(void)
{
    struct stat sb;
    return stat("/proc/self/ns/pid", &sb) == 0 ? (unsigned long long)sb.st_ino : 0;
}

static void sweep_dead_regions(void)
{
    unsigned long long ns = pidns_ino();
    DIR *d = ns != 0 ? opendir("/dev/shm") : NULL;
    if (d == NULL)
        return;
    unsigned swept = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long long their_ns, stamp;
        int pid;
        unsigned seq;
        char end;
        if (sscanf(e->d_name, "fyofi_%llx_%d_%u_%llx%c", &their_ns, &pid, &seq, &stamp, &end) !=
                4 ||
            their_ns != ns || pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        swept += unlink(path) == 0;
    }
    closedir(d);
    if (swept > 0)
        fy_info("ofi shm: removed %u regions of killed processes from /dev/shm", swept);
}

static pthread_once_t sweep_once = PTHREAD_ONCE_INIT;

char *fy_ofi_shm_name(void)
{
    static unsigned seq;
    pthread_once(&sweep_once, sweep_dead_regions);
    char nm[80];
    snprintf(nm, sizeof(nm), "fyofi_%llx_%d_%u_%llx", pidns_ino(), (int)getpid(),
             __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED),
             (unsigned long long)(fy_time_ns() & 0xffffffffull));
    return strdup(nm);
}
