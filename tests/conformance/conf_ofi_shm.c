/*
 * conf_ofi_shm.c - the conformance suite over the ofi transport with libfabric's `shm`
 * provider (shared-memory rings and cross-memory attach between processes of this host).
 *
 * libfabric 1.17's shm cannot keep two clauses here:
 *  - puts and gets are done by cross-memory attach, so a key the target deregistered is not
 *    refused (rma_unchecked_dereg, as ferry's own shm);
 *  - iface_close_open_eps: when one endpoint of a process closes, a surviving endpoint of the
 *    same process that talked to it crashes inside fi_cq_read (the suite's two nodes share a
 *    process; peers in separate processes are not affected).
 * FYCONF_UNSUPPORTED: iface_close_open_eps
 */
#include <stdio.h>

#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=shm", NULL};
const conf_tl_t conf_tl = {
    .name = "ofi", .device = "shm", .cross_process = 1, .rma_unchecked_dereg = 1, .env = env};

__attribute__((constructor)) static void say_unsupported(void)
{
    printf("  ofi/shm: iface_close_open_eps not run: libfabric 1.17 shm crashes in fi_cq_read "
           "of an endpoint whose same-process peer endpoint closed\n");
}
