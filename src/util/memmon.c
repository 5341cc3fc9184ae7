/*
 * memmon.c - the memory monitor (stub: no monitor yet, so every registration cache is a
 * pass-through).
 */
#include "util/memmon.h"

ferry_status_t fy_memmon_subscribe(fy_memmon_cb_t cb, void *arg, fy_memmon_sub_t **sub_p,
                                   const char **why_p)
{
    (void)cb;
    (void)arg;
    *sub_p = NULL;
    if (why_p != NULL)
        *why_p = "not implemented";
    return FERRY_ERR_UNSUPPORTED;
}

void fy_memmon_unsubscribe(fy_memmon_sub_t *sub)
{
    (void)sub;
}

ferry_status_t fy_memmon_watch(void *addr, size_t len)
{
    (void)addr;
    (void)len;
    return FERRY_ERR_UNSUPPORTED;
}

void fy_memmon_sync_begin(void) {}

void fy_memmon_sync_end(void) {}

void fy_memmon_test_disable(int disable)
{
    (void)disable;
}
