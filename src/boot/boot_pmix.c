/*
 * boot_pmix.c - the bootstrap of jobs started by a PMIx launcher: Open MPI's mpirun (ORTE or
 * PRRTE), Slurm's srun --mpi=pmix.
 *
 * libpmix is opened with dlopen("libpmix.so.2") at run time, never linked: the types and
 * constants come from <pmix.h> at build time (this file is compiled only when pkg-config
 * finds pmix), the functions from dlsym.  A ferry program therefore starts on a machine
 * without libpmix and only this backend fails, with a message, if it is asked for.  The
 * header's macros that call into the library (PMIX_INFO_LOAD, PMIX_VALUE_RELEASE, ...) are
 * not used for the same reason: info structs are filled by hand.
 *
 * Mapping: put = PMIx_Put(GLOBAL, "fy.<key>", byte object); fence = PMIx_Commit +
 * PMIx_Fence(all, COLLECT_DATA, TIMEOUT), so gets afterwards are served from the local cache;
 * get = PMIx_Get(OPTIONAL: do not wait for a key that was never put); barrier = PMIx_Fence
 * without data.  Rank from PMIx_Init; size, local rank and local size from the job's data
 * (PMIX_JOB_SIZE, PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE).
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wshadow"
#include <pmix.h>
#pragma GCC diagnostic pop

#include "boot/boot_int.h"
#include "util/log.h"

typedef pmix_status_t (*init_fn)(pmix_proc_t *, pmix_info_t[], size_t);
typedef pmix_status_t (*finalize_fn)(const pmix_info_t[], size_t);
typedef pmix_status_t (*put_fn)(pmix_scope_t, const char[], pmix_value_t *);
typedef pmix_status_t (*commit_fn)(void);
typedef pmix_status_t (*fence_fn)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t);
typedef pmix_status_t (*get_fn)(const pmix_proc_t *, const char[], const pmix_info_t[], size_t,
                                pmix_value_t **);
typedef const char *(*error_string_fn)(pmix_status_t);
typedef void (*value_destruct_fn)(pmix_value_t *);

/* The library, opened once per process and never closed: libpmix keeps threads running. */
static struct {
    void *dl;
    init_fn init;
    finalize_fn finalize;
    put_fn put;
    commit_fn commit;
    fence_fn fence;
    get_fn get;
    error_string_fn error_string;
    value_destruct_fn value_destruct;
} px;

typedef struct pmix_boot {
    pmix_proc_t me;
} pmix_boot_t;

static const char *const libnames[] = {"libpmix.so.2", "libpmix.so"};

static ferry_status_t load_library(void)
{
    if (px.dl != NULL)
        return FERRY_OK;
    void *dl = NULL;
    const char *why = "";
    for (size_t i = 0; i < sizeof(libnames) / sizeof(libnames[0]) && dl == NULL; i++) {
        /* GLOBAL: libpmix's own plugins, if any are loaded, resolve symbols against it */
        dl = dlopen(libnames[i], RTLD_NOW | RTLD_GLOBAL);
        if (dl == NULL && i == 0) {
            const char *e = dlerror();
            why = e != NULL ? e : "";
        }
    }
    if (dl == NULL) {
        fy_error("the pmix bootstrap needs libpmix.so.2, which cannot be loaded: %s (install "
                 "libpmix2, or set FERRY_BOOT to another bootstrap)",
                 why);
        return FERRY_ERR_BOOTSTRAP;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"PMIx_Init", (void **)&px.init},
        {"PMIx_Finalize", (void **)&px.finalize},
        {"PMIx_Put", (void **)&px.put},
        {"PMIx_Commit", (void **)&px.commit},
        {"PMIx_Fence", (void **)&px.fence},
        {"PMIx_Get", (void **)&px.get},
        {"PMIx_Error_string", (void **)&px.error_string},
        {"PMIx_Value_destruct", (void **)&px.value_destruct},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(dl, syms[i].name);
        if (f == NULL && strcmp(syms[i].name, "PMIx_Value_destruct") != 0) {
            fy_error("libpmix has no %s: too old a PMIx (ferry needs PMIx v3 or later)",
                     syms[i].name);
            dlclose(dl);
            memset(&px, 0, sizeof(px));
            return FERRY_ERR_BOOTSTRAP;
        }
        *syms[i].slot = f;
    }
    px.dl = dl;
    return FERRY_OK;
}

static const char *pxerr(pmix_status_t rc)
{
    const char *s = px.error_string != NULL ? px.error_string(rc) : NULL;
    return s != NULL ? s : "unknown PMIx error";
}

static void release_value(pmix_value_t *v)
{
    if (v == NULL)
        return;
    if (px.value_destruct != NULL)
        px.value_destruct(v);
    else if (v->type == PMIX_BYTE_OBJECT)
        free(v->data.bo.bytes);
    else if (v->type == PMIX_STRING)
        free(v->data.string);
    free(v);
}

static void info_bool(pmix_info_t *i, const char *key, bool flag)
{
    memset(i, 0, sizeof(*i));
    snprintf(i->key, sizeof(i->key), "%s", key);
    i->value.type = PMIX_BOOL;
    i->value.data.flag = flag;
}

static void info_int(pmix_info_t *i, const char *key, int x)
{
    memset(i, 0, sizeof(*i));
    snprintf(i->key, sizeof(i->key), "%s", key);
    i->value.type = PMIX_INT;
    i->value.data.integer = x;
}

static int timeout_secs(const fy_boot_t *boot)
{
    uint64_t s = (boot->timeout_ns + 999999999ull) / 1000000000ull;
    return s > 86400 * 365 ? 0 /* infinite */ : (int)(s > 0 ? s : 1);
}

/* An integer attribute of any integer type. */
static int value_to_long(const pmix_value_t *v, long *out)
{
    switch (v->type) {
    case PMIX_UINT8:
        *out = v->data.uint8;
        return 0;
    case PMIX_UINT16:
        *out = v->data.uint16;
        return 0;
    case PMIX_UINT32:
        *out = (long)v->data.uint32;
        return 0;
    case PMIX_UINT64:
        *out = (long)v->data.uint64;
        return 0;
    case PMIX_INT:
        *out = v->data.integer;
        return 0;
    case PMIX_INT8:
        *out = v->data.int8;
        return 0;
    case PMIX_INT16:
        *out = v->data.int16;
        return 0;
    case PMIX_INT32:
        *out = v->data.int32;
        return 0;
    case PMIX_INT64:
        *out = (long)v->data.int64;
        return 0;
    case PMIX_SIZE:
        *out = (long)v->data.size;
        return 0;
    default:
        return -1;
    }
}

static ferry_status_t get_long(pmix_boot_t *p, pmix_rank_t rank, const char *key, long *out)
{
    pmix_proc_t proc = p->me;
    proc.rank = rank;
    pmix_value_t *v = NULL;
    pmix_status_t rc = px.get(&proc, key, NULL, 0, &v);
    if (rc != PMIX_SUCCESS || v == NULL) {
        fy_error("PMIx_Get(%s) failed: %s", key, pxerr(rc));
        return FERRY_ERR_BOOTSTRAP;
    }
    int bad = value_to_long(v, out);
    if (bad)
        fy_error("PMIx_Get(%s) returned a value of type %d, not an integer", key, (int)v->type);
    release_value(v);
    return bad ? FERRY_ERR_BOOTSTRAP : FERRY_OK;
}

static ferry_status_t pmix_boot_init(fy_boot_t *boot)
{
    if (getenv("PMIX_NAMESPACE") == NULL && getenv("PMIX_RANK") == NULL &&
        getenv("PMIX_SERVER_URI4") == NULL && getenv("PMIX_SERVER_URI41") == NULL &&
        getenv("PMIX_SERVER_URI3") == NULL && getenv("PMIX_SERVER_URI2") == NULL) {
        fy_error("PMIX_NAMESPACE is not set: the pmix bootstrap serves programs started by a "
                 "PMIx launcher (mpirun of Open MPI, prterun, srun --mpi=pmix)");
        return FERRY_ERR_BOOTSTRAP;
    }
    long envrank;
    ferry_status_t st = fy_boot_env_int("PMIX_RANK", 0, 0x7fffffff, "the PMIx launcher", &envrank);
    if (st != FERRY_OK && st != FERRY_ERR_NO_ELEM)
        return st;
    st = load_library();
    if (st != FERRY_OK)
        return st;
    pmix_boot_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return FERRY_ERR_NO_MEMORY;
    pmix_status_t rc = px.init(&p->me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fy_error("PMIx_Init failed: %s (is the PMIx server of the launcher reachable?)", pxerr(rc));
        free(p);
        return FERRY_ERR_BOOTSTRAP;
    }
    long size, lrank, lsize;
    st = get_long(p, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE, &size);
    if (st == FERRY_OK)
        st = get_long(p, p->me.rank, PMIX_LOCAL_RANK, &lrank);
    if (st == FERRY_OK)
        st = get_long(p, PMIX_RANK_WILDCARD, PMIX_LOCAL_SIZE, &lsize);
    if (st == FERRY_OK &&
        (size < 1 || (long)p->me.rank >= size || lsize < 1 || lrank < 0 || lrank >= lsize)) {
        fy_error("PMIx gave an inconsistent job: rank %u, size %ld, local rank %ld of %ld",
                 p->me.rank, size, lrank, lsize);
        st = FERRY_ERR_BOOTSTRAP;
    }
    if (st != FERRY_OK) {
        px.finalize(NULL, 0);
        free(p);
        return st;
    }
    boot->info.rank = (int)p->me.rank;
    boot->info.size = (int)size;
    boot->info.local_rank = (int)lrank;
    boot->info.local_size = (int)lsize;
    boot->priv = p;
    fy_debug("pmix: namespace %s rank %u of %ld", p->me.nspace, p->me.rank, size);
    return FERRY_OK;
}

static void make_key(const char *key, char *out, size_t n)
{
    snprintf(out, n, "fy.%s", key);
}

static ferry_status_t pmix_boot_put(fy_boot_t *boot, const char *key, const void *value, size_t len)
{
    char k[80];
    make_key(key, k, sizeof(k));
    pmix_value_t v;
    memset(&v, 0, sizeof(v));
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)(uintptr_t)value; /* PMIx_Put copies it */
    v.data.bo.size = len;
    pmix_status_t rc = px.put(PMIX_GLOBAL, k, &v);
    if (rc != PMIX_SUCCESS) {
        fy_error("PMIx_Put(%s, %zu bytes) failed: %s", k, len, pxerr(rc));
        return FERRY_ERR_BOOTSTRAP;
    }
    return FERRY_OK;
}

static ferry_status_t fence(fy_boot_t *boot, bool collect)
{
    pmix_info_t info[2];
    info_bool(&info[0], PMIX_COLLECT_DATA, collect);
    info_int(&info[1], PMIX_TIMEOUT, timeout_secs(boot));
    pmix_status_t rc = px.fence(NULL, 0, info, 2);
    if (rc == PMIX_ERR_TIMEOUT) {
        fy_error("bootstrap %s timed out after %d s (FERRY_BOOT_TIMEOUT); PMIx does not say "
                 "which ranks did not arrive",
                 collect ? "fence" : "barrier", timeout_secs(boot));
        return FERRY_ERR_TIMED_OUT;
    }
    if (rc != PMIX_SUCCESS) {
        fy_error("PMIx_Fence failed: %s", pxerr(rc));
        return FERRY_ERR_BOOTSTRAP;
    }
    return FERRY_OK;
}

static ferry_status_t pmix_boot_fence(fy_boot_t *boot)
{
    pmix_status_t rc = px.commit();
    if (rc != PMIX_SUCCESS) {
        fy_error("PMIx_Commit failed: %s", pxerr(rc));
        return FERRY_ERR_BOOTSTRAP;
    }
    return fence(boot, true);
}

static ferry_status_t pmix_boot_barrier(fy_boot_t *boot)
{
    return fence(boot, false);
}

static ferry_status_t pmix_boot_get(fy_boot_t *boot, int rank, const char *key, void *buf,
                                    size_t *len)
{
    pmix_boot_t *p = boot->priv;
    char k[80];
    make_key(key, k, sizeof(k));
    pmix_proc_t proc = p->me;
    proc.rank = (pmix_rank_t)rank;
    pmix_info_t info[1];
    info_bool(&info[0], PMIX_OPTIONAL, true); /* fenced data is local: never wait for a key */
    pmix_value_t *v = NULL;
    pmix_status_t rc = px.get(&proc, k, info, 1, &v);
    if (rc == PMIX_ERR_NOT_FOUND)
        return FERRY_ERR_NO_ELEM;
    if (rc != PMIX_SUCCESS || v == NULL) {
        fy_error("PMIx_Get(rank %d, %s) failed: %s", rank, k, pxerr(rc));
        return FERRY_ERR_BOOTSTRAP;
    }
    ferry_status_t st = FERRY_OK;
    if (v->type != PMIX_BYTE_OBJECT) {
        fy_error("PMIx_Get(rank %d, %s) returned a value of type %d, not bytes", rank, k,
                 (int)v->type);
        st = FERRY_ERR_PROTOCOL;
    } else {
        size_t room = *len;
        *len = v->data.bo.size;
        if (room < v->data.bo.size)
            st = FERRY_ERR_TRUNCATED;
        else if (v->data.bo.size > 0)
            memcpy(buf, v->data.bo.bytes, v->data.bo.size);
    }
    release_value(v);
    return st;
}

static void pmix_boot_finalize(fy_boot_t *boot)
{
    pmix_boot_t *p = boot->priv;
    if (p == NULL)
        return;
    pmix_status_t rc = px.finalize(NULL, 0);
    if (rc != PMIX_SUCCESS)
        fy_warn("PMIx_Finalize failed: %s", pxerr(rc));
    free(p);
    boot->priv = NULL;
}

const fy_boot_ops_t fy_boot_pmix_ops = {
    .name = "pmix",
    .init = pmix_boot_init,
    .put = pmix_boot_put,
    .fence = pmix_boot_fence,
    .get = pmix_boot_get,
    .barrier = pmix_boot_barrier,
    .finalize = pmix_boot_finalize,
};
