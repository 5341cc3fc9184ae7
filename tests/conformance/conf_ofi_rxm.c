/*
 * conf_ofi_rxm.c - the conformance suite over the ofi transport with libfabric's
 * `tcp;ofi_rxm` provider (RDM over the tcp provider's connections), bound to 127.0.0.1.
 */
#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=tcp;ofi_rxm", NULL};
const conf_tl_t conf_tl = {
    .name = "ofi", .device = "rxm", .cross_process = 1, .rma_unchecked_dereg = 1, .env = env};
