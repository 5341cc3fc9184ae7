/*
 * conf_ofi_shm.c - the conformance suite over the ofi transport with libfabric's `shm`
 * provider (shared-memory rings and cross-memory attach between processes of this host).
 */
#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=shm", NULL};
const conf_tl_t conf_tl = {
    .name = "ofi", .device = "shm", .cross_process = 1, .rma_unchecked_dereg = 1, .env = env};
