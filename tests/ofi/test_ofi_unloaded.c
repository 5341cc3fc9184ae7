/*
 * A worker on a host without a NIC device does not load libfabric unless a provider is named
 * (src/tl/ofi/ofi_md.c, nic_device_present): libfabric's first fi_getinfo starts every
 * provider it has, 0.3 s of each process's start on the reference VM.
 *
 * Each case runs in a forked child (libfabric, once loaded, stays for the life of the process),
 * which sets its environment, opens a context and a worker with FERRY_TLS=ofi,self and answers
 * whether libfabric is mapped and whether the worker has an ofi interface:
 *   - nothing named: unloaded, no ofi interface, where this host has no NIC device (this
 *     test's own look at /sys/class/infiniband and /dev); loaded where it has one;
 *   - FERRY_OFI_PROVIDER=shm: loaded, with an ofi interface (libfabric's shm provider);
 *   - FI_PROVIDER=shm, libfabric's own filter: loaded, and still no ofi interface, since a
 *     software provider is opened only when FERRY_OFI_PROVIDER names it.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry.h"
#include "fytest.h"
#include "fytest_proc.h"

static int libfabric_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, "/libfabric.so") != NULL;
    fclose(f);
    return found;
}

/* Any entry of /sys/class/infiniband, or a /dev node of Omni-Path, TrueScale, Slingshot or
 * Aries: what a native provider would drive. */
static int host_has_nic(void)
{
    int found = 0;
    DIR *d = opendir("/sys/class/infiniband");
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            found |= e->d_name[0] != '.';
        closedir(d);
    }
    if ((d = opendir("/dev")) != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            found |= strncmp(e->d_name, "hfi1_", 5) == 0 || strncmp(e->d_name, "ipath", 5) == 0 ||
                     strncmp(e->d_name, "cxi", 3) == 0 || strncmp(e->d_name, "kgni", 4) == 0;
        closedir(d);
    }
    return found;
}

typedef struct {
    const char *ferry_provider, *fi_provider; /* NULL: unset */
} child_env_t;

/* The child: answers two bytes, libfabric mapped (0/1) and ofi interfaces in the worker. */
static void child(int rfd, int wfd, void *arg)
{
    (void)rfd;
    const child_env_t *e = arg;
    setenv("FERRY_TLS", "ofi,self", 1);
    unsetenv("FERRY_OFI_PROVIDER");
    unsetenv("FI_PROVIDER");
    if (e->ferry_provider != NULL)
        setenv("FERRY_OFI_PROVIDER", e->ferry_provider, 1);
    if (e->fi_provider != NULL)
        setenv("FI_PROVIDER", e->fi_provider, 1);
    char out[2] = {(char)libfabric_mapped(), 0}; /* before: nothing loaded it yet */
    if (out[0] != 0)
        _exit(3);
    ferry_context_t *ctx;
    ferry_worker_t *w;
    if (ferry_context_create(NULL, &ctx) != FERRY_OK ||
        ferry_worker_create(ctx, NULL, &w) != FERRY_OK)
        _exit(4);
    out[0] = (char)libfabric_mapped();
    ferry_worker_attr_t attr = {.field_mask = FERRY_WORKER_ATTR_FIELD_IFACES};
    if (ferry_worker_query(w, &attr) != FERRY_OK)
        _exit(5);
    for (unsigned i = 0; i < attr.nifaces; i++)
        out[1] += strcmp(attr.ifaces[i].transport, "ofi") == 0;
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
    _exit(fyproc_send(wfd, out, 2) == 0 ? 0 : 6);
}

static void run(const child_env_t *e, char out[2])
{
    fyproc_t p;
    FY_ASSERT_EQ(fyproc_fork(&p, child, (void *)e, 60), 0);
    FY_ASSERT_EQ(fyproc_recv(p.rfd, out, 2, 30000), 0);
    FY_ASSERT_EQ(fyproc_wait(&p, 30000), 0);
    fyproc_release(&p);
}

static void nothing_named(void)
{
    child_env_t e = {NULL, NULL};
    char out[2];
    run(&e, out);
    int nic = host_has_nic();
    fprintf(stderr, "  host has a NIC device: %s; libfabric loaded: %d, ofi interfaces: %d\n",
            nic ? "yes" : "no", out[0], out[1]);
    FY_ASSERT_EQ(out[0], (char)nic);
    if (!nic)
        FY_ASSERT_EQ(out[1], 0);
}

static void provider_named(void)
{
    child_env_t e = {"shm", NULL};
    char out[2];
    run(&e, out);
    FY_ASSERT_EQ(out[0], 1);
    FY_ASSERT_EQ(out[1], 1);
}

static void fi_provider_set(void)
{
    child_env_t e = {NULL, "shm"};
    char out[2];
    run(&e, out);
    FY_ASSERT_EQ(out[0], 1);
    if (!host_has_nic())
        FY_ASSERT_EQ(out[1], 0);
}

FYTEST_MAIN(FYTEST_CASE(nothing_named), FYTEST_CASE(provider_named), FYTEST_CASE(fi_provider_set))
