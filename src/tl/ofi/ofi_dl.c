/*
 * ofi_dl.c - libfabric opened at run time (see ofi_fabric.h for why it is not linked).
 *
 * fy_ofi_dl_load() opens libfabric.so.1 once, with RTLD_LOCAL so its symbols stay out of the
 * program's namespace, and looks up the few real functions ferry calls.  The fy_ofi_* wrappers
 * the renaming in ofi_fabric.h points at load on first use, so code (and tests) that call
 * fi_getinfo first need nothing else.  The library stays open until the process exits:
 * providers keep threads and handlers that must not lose their code under them.
 *
 * Before the load IPATH_NO_BACKTRACE is set (unless the program set it): libinfinipath, which
 * libfabric's psm provider brings in, otherwise installs handlers for SIGSEGV, SIGABRT and
 * others when it is loaded, printing its own backtrace and exiting, which takes a crash away
 * from the program's own handler, a debugger's or a sanitizer's.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "tl/ofi/ofi_fabric.h"

static struct {
    pthread_once_t once;
    int ok;
    char error[256];
    __typeof__(fy_ofi_getinfo) *getinfo;
    __typeof__(fy_ofi_freeinfo) *freeinfo;
    __typeof__(fy_ofi_dupinfo) *dupinfo;
    __typeof__(fy_ofi_fabric) *fabric;
    __typeof__(fy_ofi_strerror) *strerror_;
    __typeof__(fy_ofi_version) *version;
} dl = {.once = PTHREAD_ONCE_INIT};

static void *sym(void *h, const char *name, int *missing)
{
    void *p = dlsym(h, name);
    if (p == NULL && !*missing) {
        snprintf(dl.error, sizeof(dl.error), "libfabric.so.1 has no %s", name);
        *missing = 1;
    }
    return p;
}

static void load(void)
{
    setenv("IPATH_NO_BACKTRACE", "1", 0);
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(dl.error, sizeof(dl.error), "cannot load libfabric: %s", e ? e : "unknown");
        return;
    }
    int missing = 0;
    *(void **)&dl.getinfo = sym(h, "fi_getinfo", &missing);
    *(void **)&dl.freeinfo = sym(h, "fi_freeinfo", &missing);
    *(void **)&dl.dupinfo = sym(h, "fi_dupinfo", &missing);
    *(void **)&dl.fabric = sym(h, "fi_fabric", &missing);
    *(void **)&dl.strerror_ = sym(h, "fi_strerror", &missing);
    *(void **)&dl.version = sym(h, "fi_version", &missing);
    if (missing) {
        dlclose(h);
        return;
    }
    dl.ok = 1;
}

int fy_ofi_dl_load(void)
{
    pthread_once(&dl.once, load);
    return dl.ok ? 0 : -1;
}

const char *fy_ofi_dl_error(void)
{
    return fy_ofi_dl_load() == 0 ? NULL : dl.error;
}

int fy_ofi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info)
{
    if (fy_ofi_dl_load() != 0)
        return -FI_ENOSYS;
    return dl.getinfo(version, node, service, flags, hints, info);
}

void fy_ofi_freeinfo(struct fi_info *info)
{
    if (info != NULL && fy_ofi_dl_load() == 0)
        dl.freeinfo(info);
}

struct fi_info *fy_ofi_dupinfo(const struct fi_info *info)
{
    return fy_ofi_dl_load() == 0 ? dl.dupinfo(info) : NULL;
}

int fy_ofi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    if (fy_ofi_dl_load() != 0)
        return -FI_ENOSYS;
    return dl.fabric(attr, fabric, context);
}

const char *fy_ofi_strerror(int errnum)
{
    return fy_ofi_dl_load() == 0 ? dl.strerror_(errnum) : "libfabric is not loaded";
}

uint32_t fy_ofi_version(void)
{
    return fy_ofi_dl_load() == 0 ? dl.version() : 0;
}
