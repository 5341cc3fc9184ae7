/*
 * conf_ofi_shm.c - the conformance suite over the ofi transport with libfabric's `shm`
 * provider (shared-memory rings and cross-memory attach between processes of this host).
 *
 * libfabric 1.17's shm cannot keep two clauses here (docs/ofi.md, "What the conformance suite
 * runs", and the reproduction with libfabric alone, bench/ofi_floor.c):
 *  - a key the target deregistered is not refused: the put completes without an error and
 *    is dropped (ofi_floor shm dereg 64 1), so the initiator's op cannot report it
 *    (rma_unchecked_dereg, as ferry's own shm);
 *  - iface_close_open_eps: an endpoint that progresses after another endpoint of the same
 *    process tried to reach it and closed crashes inside fi_cq_read (ofi_floor shm
 *    close-inflight 64 1); the suite's two nodes share a process, peers in separate
 *    processes are not affected.
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
           "of an endpoint whose same-process peer endpoint closed after first contact "
           "(bench/ofi_floor shm close-inflight 64 1)\n");
}
