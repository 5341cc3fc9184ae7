/*
 * boot_int.h - what the bootstrap backends share inside boot/: the backend operations table,
 * the handle every backend fills, and small helpers (strict environment parsing, a local
 * key-value table, the blob encoding used by text protocols).
 *
 * The public-to-ferry interface is boot.h; boot.c checks arguments once (key syntax, rank
 * range, length pointers) so that a backend's operations only do their protocol's work.
 */
#ifndef FY_BOOT_INT_H
#define FY_BOOT_INT_H

#include <stdint.h>

#include "boot/boot.h"
#include "ferry_build.h"

/*
 * One backend.  Every operation blocks; fence and barrier give up at boot->deadline_ns
 * (computed by boot.c from FERRY_BOOT_TIMEOUT) with FERRY_ERR_TIMED_OUT.
 *
 *   init      read the launcher's environment, connect, fill boot->info; on failure log
 *             what is wrong (naming the variable) and release whatever it set up
 *   put       key has been checked; value may be NULL when len == 0
 *   fence     commit puts and wait for every rank
 *   get       rank and key have been checked; *len in/out as in boot.h
 *   barrier   wait for every rank, no data
 *   finalize  leave the job and free boot->priv (boot itself is freed by boot.c)
 */
typedef struct fy_boot_ops {
    const char *name;
    ferry_status_t (*init)(fy_boot_t *boot);
    ferry_status_t (*put)(fy_boot_t *boot, const char *key, const void *value, size_t len);
    ferry_status_t (*fence)(fy_boot_t *boot);
    ferry_status_t (*get)(fy_boot_t *boot, int rank, const char *key, void *buf, size_t *len);
    ferry_status_t (*barrier)(fy_boot_t *boot);
    void (*finalize)(fy_boot_t *boot);
} fy_boot_ops_t;

struct fy_boot {
    const fy_boot_ops_t *ops;
    fy_boot_info_t info;
    uint64_t timeout_ns; /* FERRY_BOOT_TIMEOUT */
    size_t value_limit;  /* largest value stored under one launcher key (0 = none) */
    void *priv;          /* the backend's state */
};

extern const fy_boot_ops_t fy_boot_singleton_ops;
extern const fy_boot_ops_t fy_boot_builtin_ops;
extern const fy_boot_ops_t fy_boot_pmi1_ops;
/* Send cmd=finalize and close the process's PMI-1 connection (run at exit; the fuzz target of
 * tests/fuzz calls it to start each input on a connection of its own). */
void fy_boot_pmi1_close(void);
/* The PMI-1 kvs name (the launcher's name of the job) into buf, opening the process's
 * connection if no init did yet: init, limits and name only, nothing collective. */
ferry_status_t fy_boot_pmi1_kvsname(fy_boot_t *boot, char *buf, size_t len);
#ifdef FERRY_HAVE_PMIX
extern const fy_boot_ops_t fy_boot_pmix_ops;
#endif

/*
 * Read an integer environment variable strictly (the whole value, decimal, within
 * [min, max]).  Unset: FERRY_ERR_NO_ELEM, silently.  Garbled or out of range:
 * FERRY_ERR_BOOTSTRAP and an error naming the variable, its value and the range; `who` says
 * who sets it ("ferryrun", "mpiexec.hydra") for the message.
 */
ferry_status_t fy_boot_env_int(const char *name, long min, long max, const char *who, long *out);
/* The same for a variable that must be set. */
ferry_status_t fy_boot_env_int_required(const char *name, long min, long max, const char *who,
                                        long *out);

/* The host name, short form (up to the first dot), into info->host. */
void fy_boot_fill_host(fy_boot_info_t *info);

/* Milliseconds left until deadline_ns (0 if past, capped at INT32_MAX). */
int fy_boot_ms_left(uint64_t deadline_ns);

/*
 * A local key-value table: (rank, key) -> blob.  Used by the singleton backend and as a
 * cache.  Replacing a key keeps one entry.
 */
typedef struct fy_boot_kv_entry {
    int rank;
    char key[64];
    void *value;
    size_t len;
} fy_boot_kv_entry_t;

typedef struct fy_boot_kv {
    fy_boot_kv_entry_t *entries;
    size_t count, cap;
} fy_boot_kv_t;

ferry_status_t fy_boot_kv_put(fy_boot_kv_t *kv, int rank, const char *key, const void *value,
                              size_t len);
const fy_boot_kv_entry_t *fy_boot_kv_find(const fy_boot_kv_t *kv, int rank, const char *key);
void fy_boot_kv_release(fy_boot_kv_t *kv);
/* Copy an entry's value out with the TRUNCATED convention of fy_boot_get(). */
ferry_status_t fy_boot_kv_copy_out(const fy_boot_kv_entry_t *e, void *buf, size_t *len);

/*
 * Base64 with the URL alphabet (A-Z a-z 0-9 - _) and no padding: every character is safe in
 * a PMI-1 "key=value" token (no space, no '=').  n input bytes take fy_b64_len(n) chars.
 */
static inline size_t fy_b64_len(size_t n)
{
    return (n / 3) * 4 + (n % 3 ? n % 3 + 1 : 0);
}
/* Encode n bytes to out (fy_b64_len(n) chars, no terminator). */
void fy_b64_encode(const void *in, size_t n, char *out);
/* Decode n chars; returns the byte count, or -1 on a character outside the alphabet or a
 * length that no encoding produces. */
long fy_b64_decode(const char *in, size_t n, void *out);

/* FNV-1a, 64 bit: names long keys compactly where a launcher limits key length. */
uint64_t fy_boot_fnv1a(const char *s);

#endif
