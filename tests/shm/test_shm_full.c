/*
 * test_shm_full.c - shared memory that is not there: a full /dev/shm, and memory the kernel
 * refuses to reserve.
 *
 * devshm_full: in a mount namespace of its own (the real /dev/shm is never touched), a child
 * mounts a 256 KiB tmpfs over /dev/shm and fills it.  `ferry_info --health` must then end
 * with an error that names /dev/shm, not die of SIGBUS; and the shm transport, whose
 * segments are memfds that /dev/shm does not hold, must still open.
 *
 * reserve_refused: a seccomp filter makes fallocate(2) fail with ENOSPC, as a kernel does when
 * the memory cannot be had.  Opening an shm iface must fail with FERRY_ERR_NO_MEMORY and a
 * message naming the size, having touched nothing.
 */
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "fytest.h"
#include "shm_test.h"

#ifndef FERRY_INFO_BIN
#error "FERRY_INFO_BIN must be defined by the build"
#endif

/* Run ferry_info --health; its output into out, its wait status returned. */
static int run_health(char *out, size_t cap)
{
    int p[2];
    FY_ASSERT(pipe(p) == 0);
    fflush(NULL);
    pid_t pid = fork();
    FY_ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        execl(FERRY_INFO_BIN, FERRY_INFO_BIN, "--health", (char *)NULL);
        _exit(126);
    }
    close(p[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(p[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(p[0]);
    int st;
    FY_ASSERT(waitpid(pid, &st, 0) == pid);
    return st;
}

static void devshm_full(void)
{
    /* this process (the case's own child) gets the namespace; the parent never sees it */
    FY_ASSERT_MSG(unshare(CLONE_NEWNS) == 0, "unshare(CLONE_NEWNS): %s (needs root)",
                  strerror(errno));
    FY_ASSERT(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
    FY_ASSERT_MSG(mount("ferrytest", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=256k") == 0,
                  "mount: %s", strerror(errno));
    int fd = open("/dev/shm/filler", O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    FY_ASSERT(fd >= 0);
    static char block[16384];
    ssize_t w;
    size_t filled = 0;
    while ((w = write(fd, block, sizeof(block))) > 0)
        filled += (size_t)w;
    FY_ASSERT_MSG(errno == ENOSPC, "filling /dev/shm: %s", strerror(errno));
    close(fd);

    static char out[65536];
    int st = run_health(out, sizeof(out));
    printf("/dev/shm full (%zu bytes): ferry_info --health %s %d\n", filled,
           WIFEXITED(st) ? "exited with" : "was killed by signal",
           WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    fflush(stdout);
    FY_ASSERT_MSG(WIFEXITED(st), "ferry_info --health was killed by signal %d:\n%s",
                  WIFSIGNALED(st) ? WTERMSIG(st) : 0, out);
    FY_ASSERT_EQ(WEXITSTATUS(st), 1);
    FY_ASSERT_MSG(strstr(out, "[FAIL] shared memory") != NULL && strstr(out, "/dev/shm") != NULL,
                  "no failed shared memory check naming /dev/shm:\n%s", out);

    /* the transport does not live in /dev/shm: it still works */
    tproc_t p;
    tp_open(&p, NULL, NULL);
    tp_close(&p);
}

static void reserve_refused(void)
{
    char logpath[64];
    snprintf(logpath, sizeof(logpath), "/tmp/ferry_shm_full_%d.log", (int)getpid());
    unlink(logpath);
    setenv("FERRY_LOG_FILE", logpath, 1);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fallocate, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSPC & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
    FY_ASSERT(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    FY_ASSERT(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);

    const fy_tl_component_t *tl = fy_tl_find("shm");
    FY_ASSERT(tl != NULL);
    fy_tl_md_t *md;
    FY_ASSERT_OK(tl->ops->md_open(tl, &md));
    fy_tl_iface_params_t params = {.device = "memory"};
    fy_tl_iface_t *iface = NULL;
    ferry_status_t st = tl->ops->iface_open(md, &params, &iface);
    tl->ops->md_close(md);

    char log[4096] = "";
    FILE *lf = fopen(logpath, "r");
    if (lf != NULL) {
        size_t n = fread(log, 1, sizeof(log) - 1, lf);
        log[n] = '\0';
        fclose(lf);
    }
    unlink(logpath);
    printf("fallocate refused: iface_open says %s; log: %s", ferry_status_string(st), log);
    fflush(stdout);
    FY_ASSERT_STATUS(st, FERRY_ERR_NO_MEMORY);
    FY_ASSERT(iface == NULL);
    FY_ASSERT_MSG(strstr(log, "cannot reserve") != NULL && strstr(log, " bytes of shared memory"),
                  "no message naming the size: %s", log);
}

FYTEST_MAIN(FYTEST_CASE(devshm_full), FYTEST_CASE(reserve_refused))
