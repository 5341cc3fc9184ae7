/*
 * boot_singleton.c - the bootstrap of a process started without a launcher: rank 0 of 1.
 *
 * The key-value store is a local table, fence and barrier return at once.  This is what lets
 * the same program run from a shell as well as under ferryrun, mpirun or srun.
 */
#include <stdlib.h>

#include "boot/boot_int.h"

static ferry_status_t singleton_init(fy_boot_t *boot)
{
    fy_boot_kv_t *kv = calloc(1, sizeof(*kv));
    if (kv == NULL)
        return FERRY_ERR_NO_MEMORY;
    boot->priv = kv;
    boot->info.rank = 0;
    boot->info.size = 1;
    boot->info.local_rank = 0;
    boot->info.local_size = 1;
    return FERRY_OK;
}

static ferry_status_t singleton_put(fy_boot_t *boot, const char *key, const void *value, size_t len)
{
    return fy_boot_kv_put(boot->priv, 0, key, value, len);
}

static ferry_status_t singleton_fence(fy_boot_t *boot)
{
    return FERRY_OK;
}

static ferry_status_t singleton_get(fy_boot_t *boot, int rank, const char *key, void *buf,
                                    size_t *len)
{
    const fy_boot_kv_entry_t *e = fy_boot_kv_find(boot->priv, rank, key);
    if (e == NULL)
        return FERRY_ERR_NO_ELEM;
    return fy_boot_kv_copy_out(e, buf, len);
}

static void singleton_finalize(fy_boot_t *boot)
{
    fy_boot_kv_release(boot->priv);
    free(boot->priv);
    boot->priv = NULL;
}

const fy_boot_ops_t fy_boot_singleton_ops = {
    .name = "singleton",
    .init = singleton_init,
    .put = singleton_put,
    .fence = singleton_fence,
    .get = singleton_get,
    .barrier = singleton_fence,
    .finalize = singleton_finalize,
};
