/* Helpers the ofi tests share: elapsed time, a worker's printed info, a child process's
 * context, worker and ep to the parent whose address it reads from a pipe, and the tail of a
 * sender child that is killed mid-transfer. */
#ifndef FY_OFI_TEST_H
#define FY_OFI_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "common.h"
#include "fytest_proc.h"

__attribute__((unused)) static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* What ferry_worker_print_info prints (the caller frees it). */
__attribute__((noinline, unused)) static char *worker_info(ferry_worker_t *w)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FY_ASSERT(f != NULL);
    ferry_worker_print_info(w, f);
    fclose(f);
    return text;
}

/* In a child: the parent's worker address (length, then bytes) from rfd, and an ep to it.
 * Returns 0, or the child's exit status for what failed. */
__attribute__((unused)) static int child_connect(int rfd, ferry_context_t **ctx, ferry_worker_t **w,
                                                 ferry_ep_t **ep)
{
    uint32_t len;
    if (fyproc_recv(rfd, &len, sizeof(len), 20000) != 0 || len == 0 || len > 4096)
        return 2;
    char addr[4096];
    if (fyproc_recv(rfd, addr, len, 20000) != 0)
        return 3;
    if (ferry_context_create(NULL, ctx) != FERRY_OK ||
        ferry_worker_create(*ctx, NULL, w) != FERRY_OK)
        return 4;
    ferry_ep_params_t ep_params = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
    if (ferry_ep_create(*w, &ep_params, ep) != FERRY_OK)
        return 5;
    return 0;
}

/* In a killed-sender child whose send has started (st, the send's return): progress until the
 * receiver says, one byte on rfd, that it has seen the send, then stay silent (no progress,
 * so the receiver's read of it waits) until the parent kills this process.  Returns the
 * child's exit status: 6 when the send did not start. */
__attribute__((unused)) static int child_send_then_silent(int rfd, ferry_worker_t *w,
                                                          ferry_status_t st)
{
    if (st != FERRY_INPROGRESS)
        return 6;
    while (!fyproc_readable(rfd))
        ferry_worker_progress(w);
    char c;
    fyproc_recv(rfd, &c, 1, 1000);
    fyproc_recv(rfd, &c, 1, -1); /* silent from here: killed while waiting */
    return 0;
}

/* In the parent: start the child role and give it w's worker address (child_connect reads it). */
__attribute__((unused)) static void spawn_with_address(fyproc_t *p, const char *role,
                                                       ferry_worker_t *w)
{
    size_t alen = 0;
    FY_ASSERT_STATUS(ferry_worker_get_address(w, NULL, &alen), FERRY_ERR_TRUNCATED);
    char *addr = malloc(alen);
    FY_ASSERT_OK(ferry_worker_get_address(w, addr, &alen));
    FY_ASSERT_EQ(fyproc_spawn(p, role, NULL, 60), 0);
    uint32_t len = (uint32_t)alen;
    FY_ASSERT_EQ(fyproc_send(p->wfd, &len, sizeof(len)), 0);
    FY_ASSERT_EQ(fyproc_send(p->wfd, addr, alen), 0);
    free(addr);
}

#endif
