/*
 * boot.c - the bootstrap front end: picks a backend from the environment, checks every
 * argument once, and holds the helpers the backends share (strict environment parsing, a
 * local key-value table, URL-safe base64).
 *
 * Selection.  FERRY_BOOT=builtin|pmix|pmi1|singleton forces a backend; a forced backend whose
 * launcher environment is missing fails with an error that says which variable is absent.
 * Otherwise the first launcher whose marks are present wins: ferryrun's (FERRY_BOOT_ADDR,
 * FERRY_RANK or FERRY_SIZE), then PMIx (PMIX_NAMESPACE or PMIX_RANK), then PMI-1 (PMI_FD,
 * PMI_PORT or PMI_RANK), and with none of them the process is a singleton.  A PMIx launcher
 * seen by a ferry built without PMIx is an error rather than a silent singleton: N processes
 * that each believe they are alone would hang or, worse, compute the wrong thing.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "boot/boot_int.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

#define BOOT_DEFAULT_TIMEOUT_NS (60 * FY_NSEC_PER_SEC)

static const fy_boot_ops_t *const backends[] = {
    &fy_boot_builtin_ops,
#ifdef FERRY_HAVE_PMIX
    &fy_boot_pmix_ops,
#endif
    &fy_boot_pmi1_ops,
    &fy_boot_singleton_ops,
};

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL;
}

static ferry_status_t choose_backend(const fy_boot_ops_t **ops_p)
{
    const char *forced = getenv("FERRY_BOOT");
    if (forced != NULL && *forced != '\0' && strcasecmp(forced, "auto") != 0) {
        for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
            if (strcasecmp(forced, backends[i]->name) == 0) {
                *ops_p = backends[i];
                return FERRY_OK;
            }
        }
        if (strcasecmp(forced, "pmix") == 0) {
            fy_error("FERRY_BOOT=pmix, but this ferry was built without PMIx support "
                     "(pkg-config did not find pmix at build time)");
            return FERRY_ERR_UNSUPPORTED;
        }
        fy_error("FERRY_BOOT=%s is not a bootstrap: use builtin, pmix, pmi1, singleton or auto",
                 forced);
        return FERRY_ERR_BAD_CONFIG;
    }
    if (env_set("FERRY_BOOT_ADDR") || env_set("FERRY_RANK") || env_set("FERRY_SIZE")) {
        *ops_p = &fy_boot_builtin_ops;
        return FERRY_OK;
    }
    if (env_set("PMIX_NAMESPACE") || env_set("PMIX_RANK")) {
#ifdef FERRY_HAVE_PMIX
        *ops_p = &fy_boot_pmix_ops;
        return FERRY_OK;
#else
        if (!env_set("PMI_FD")) {
            fy_error("this process was started by a PMIx launcher (PMIX_NAMESPACE is set), but "
                     "this ferry was built without PMIx support; rebuild with libpmix-dev, or "
                     "set FERRY_BOOT=singleton to run it alone");
            return FERRY_ERR_UNSUPPORTED;
        }
#endif
    }
    if (env_set("PMI_FD") || env_set("PMI_PORT") || env_set("PMI_RANK")) {
        *ops_p = &fy_boot_pmi1_ops;
        return FERRY_OK;
    }
    *ops_p = &fy_boot_singleton_ops;
    return FERRY_OK;
}

static ferry_status_t read_timeout(uint64_t *ns)
{
    const char *v = getenv("FERRY_BOOT_TIMEOUT");
    *ns = BOOT_DEFAULT_TIMEOUT_NS;
    if (v == NULL || *v == '\0')
        return FERRY_OK;
    if (fy_config_parse_time(v, ns) != FERRY_OK || *ns == 0) {
        fy_error("FERRY_BOOT_TIMEOUT=%s is not a time: use e.g. 60, 90s, 500ms, 2m or inf", v);
        return FERRY_ERR_BAD_CONFIG;
    }
    return FERRY_OK;
}

ferry_status_t fy_boot_init(fy_boot_t **boot_p)
{
    if (boot_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    *boot_p = NULL;
    fy_log_init();
    const fy_boot_ops_t *ops;
    ferry_status_t st = choose_backend(&ops);
    if (st != FERRY_OK)
        return st;
    fy_boot_t *boot = calloc(1, sizeof(*boot));
    if (boot == NULL)
        return FERRY_ERR_NO_MEMORY;
    boot->ops = ops;
    boot->info.backend = ops->name;
    st = read_timeout(&boot->timeout_ns);
    if (st == FERRY_OK)
        st = ops->init(boot);
    if (st != FERRY_OK) {
        free(boot);
        return st;
    }
    if (boot->info.host[0] == '\0')
        fy_boot_fill_host(&boot->info);
    fy_log_set_rank(boot->info.rank);
    fy_debug("bootstrap %s: rank %d of %d, local %d of %d on %s", ops->name, boot->info.rank,
             boot->info.size, boot->info.local_rank, boot->info.local_size, boot->info.host);
    *boot_p = boot;
    return FERRY_OK;
}

/* Only a PMI-1 launcher is asked: the others name the job in the environment, where the
 * context reads it without a connection (docs/configuration.md: FERRY_JOB_KEY). */
ferry_status_t fy_boot_job_name(char *buf, size_t len)
{
    const char *forced = getenv("FERRY_BOOT");
    if (!env_set("PMI_FD")) /* (a forced pmi1 without it fails, and says so, at the world) */
        return FERRY_ERR_NO_ELEM;
    if (forced != NULL && *forced != '\0' && strcasecmp(forced, "auto") != 0) {
        if (strcasecmp(forced, "pmi1") != 0)
            return FERRY_ERR_NO_ELEM;
    } else if (env_set("FERRY_BOOT_ADDR") || env_set("FERRY_RANK") || env_set("FERRY_SIZE") ||
               env_set("PMIX_NAMESPACE") || env_set("PMIX_RANK")) {
        return FERRY_ERR_NO_ELEM;
    }
    fy_boot_t boot = {.ops = &fy_boot_pmi1_ops, .info.backend = "pmi1"};
    ferry_status_t st = read_timeout(&boot.timeout_ns);
    if (st == FERRY_OK)
        st = fy_boot_pmi1_kvsname(&boot, buf, len);
    return st;
}

const fy_boot_info_t *fy_boot_info(const fy_boot_t *boot)
{
    return &boot->info;
}

size_t fy_boot_value_limit(const fy_boot_t *boot)
{
    return boot->value_limit;
}

uint64_t fy_boot_timeout_ns(const fy_boot_t *boot)
{
    return boot->timeout_ns;
}

static int key_ok(const char *key)
{
    if (key == NULL || key[0] == '\0')
        return 0;
    size_t n = 0;
    for (const char *p = key; *p != '\0'; p++, n++) {
        unsigned char c = (unsigned char)*p;
        if (n >= 63 || !(isalnum(c) || c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

ferry_status_t fy_boot_put(fy_boot_t *boot, const char *key, const void *value, size_t len)
{
    if (boot == NULL || (value == NULL && len > 0))
        return FERRY_ERR_INVALID_PARAM;
    if (!key_ok(key)) {
        fy_error("bootstrap key \"%s\" is not 1-63 characters of [A-Za-z0-9_.-]",
                 key != NULL ? key : "(null)");
        return FERRY_ERR_INVALID_PARAM;
    }
    return boot->ops->put(boot, key, value, len);
}

ferry_status_t fy_boot_fence(fy_boot_t *boot)
{
    if (boot == NULL)
        return FERRY_ERR_INVALID_PARAM;
    return boot->ops->fence(boot);
}

ferry_status_t fy_boot_get(fy_boot_t *boot, int rank, const char *key, void *buf, size_t *len)
{
    if (boot == NULL || len == NULL || (buf == NULL && *len > 0))
        return FERRY_ERR_INVALID_PARAM;
    if (rank < 0 || rank >= boot->info.size) {
        fy_error("bootstrap get: rank %d is outside the job (size %d)", rank, boot->info.size);
        return FERRY_ERR_INVALID_PARAM;
    }
    if (!key_ok(key)) {
        fy_error("bootstrap key \"%s\" is not 1-63 characters of [A-Za-z0-9_.-]",
                 key != NULL ? key : "(null)");
        return FERRY_ERR_INVALID_PARAM;
    }
    return boot->ops->get(boot, rank, key, buf, len);
}

ferry_status_t fy_boot_barrier(fy_boot_t *boot)
{
    if (boot == NULL)
        return FERRY_ERR_INVALID_PARAM;
    return boot->ops->barrier(boot);
}

void fy_boot_finalize(fy_boot_t *boot)
{
    if (boot == NULL)
        return;
    boot->ops->finalize(boot);
    free(boot);
}

/* ---------------------------------------------------------------------------------------- */
/* Helpers shared by the backends                                                             */
/* ---------------------------------------------------------------------------------------- */

ferry_status_t fy_boot_env_int(const char *name, long min, long max, const char *who, long *out)
{
    const char *v = getenv(name);
    if (v == NULL)
        return FERRY_ERR_NO_ELEM;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || isspace((unsigned char)*v) || errno != 0 || end == NULL || *end != '\0') {
        fy_error("%s=\"%s\" is not an integer (it is set by %s)", name, v, who);
        return FERRY_ERR_BOOTSTRAP;
    }
    if (x < min || x > max) {
        fy_error("%s=%ld is out of range: expected %ld..%ld (it is set by %s)", name, x, min, max,
                 who);
        return FERRY_ERR_BOOTSTRAP;
    }
    *out = x;
    return FERRY_OK;
}

ferry_status_t fy_boot_env_int_required(const char *name, long min, long max, const char *who,
                                        long *out)
{
    ferry_status_t st = fy_boot_env_int(name, min, max, who, out);
    if (st == FERRY_ERR_NO_ELEM) {
        fy_error("%s is not set (it is set by %s)", name, who);
        return FERRY_ERR_BOOTSTRAP;
    }
    return st;
}

void fy_boot_fill_host(fy_boot_info_t *info)
{
    if (gethostname(info->host, sizeof(info->host) - 1) != 0)
        strcpy(info->host, "localhost");
    info->host[sizeof(info->host) - 1] = '\0';
    char *dot = strchr(info->host, '.');
    if (dot != NULL)
        *dot = '\0';
}

int fy_boot_ms_left(uint64_t deadline_ns)
{
    uint64_t now = fy_time_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + FY_NSEC_PER_MSEC - 1) / FY_NSEC_PER_MSEC;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

ferry_status_t fy_boot_kv_put(fy_boot_kv_t *kv, int rank, const char *key, const void *value,
                              size_t len)
{
    void *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        return FERRY_ERR_NO_MEMORY;
    if (len > 0)
        memcpy(copy, value, len);
    fy_boot_kv_entry_t *e = (fy_boot_kv_entry_t *)fy_boot_kv_find(kv, rank, key);
    if (e != NULL) {
        free(e->value);
        e->value = copy;
        e->len = len;
        return FERRY_OK;
    }
    if (kv->count == kv->cap) {
        size_t cap = kv->cap ? kv->cap * 2 : 8;
        fy_boot_kv_entry_t *n = realloc(kv->entries, cap * sizeof(*n));
        if (n == NULL) {
            free(copy);
            return FERRY_ERR_NO_MEMORY;
        }
        kv->entries = n;
        kv->cap = cap;
    }
    e = &kv->entries[kv->count++];
    e->rank = rank;
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->value = copy;
    e->len = len;
    return FERRY_OK;
}

const fy_boot_kv_entry_t *fy_boot_kv_find(const fy_boot_kv_t *kv, int rank, const char *key)
{
    for (size_t i = 0; i < kv->count; i++)
        if (kv->entries[i].rank == rank && strcmp(kv->entries[i].key, key) == 0)
            return &kv->entries[i];
    return NULL;
}

void fy_boot_kv_release(fy_boot_kv_t *kv)
{
    for (size_t i = 0; i < kv->count; i++)
        free(kv->entries[i].value);
    free(kv->entries);
    memset(kv, 0, sizeof(*kv));
}

ferry_status_t fy_boot_kv_copy_out(const fy_boot_kv_entry_t *e, void *buf, size_t *len)
{
    size_t room = *len;
    *len = e->len;
    if (room < e->len)
        return FERRY_ERR_TRUNCATED;
    if (e->len > 0)
        memcpy(buf, e->value, e->len);
    return FERRY_OK;
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void fy_b64_encode(const void *in, size_t n, char *out)
{
    const unsigned char *p = in;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *out++ = b64_alphabet[v >> 18];
        *out++ = b64_alphabet[(v >> 12) & 63];
        *out++ = b64_alphabet[(v >> 6) & 63];
        *out++ = b64_alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *out++ = b64_alphabet[v >> 18];
        *out++ = b64_alphabet[(v >> 12) & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *out++ = b64_alphabet[v >> 18];
        *out++ = b64_alphabet[(v >> 12) & 63];
        *out++ = b64_alphabet[(v >> 6) & 63];
    }
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

long fy_b64_decode(const char *in, size_t n, void *out)
{
    unsigned char *o = out;
    if (n % 4 == 1)
        return -1;
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value(in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[w++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (long)w;
}

uint64_t fy_boot_fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}
