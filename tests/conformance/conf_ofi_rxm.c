/*
 * conf_ofi_rxm.c - the conformance suite over the ofi transport with libfabric's
 * `tcp;ofi_rxm` provider (RDM over the tcp provider's connections), bound to 127.0.0.1.
 *
 * A put with a key the target deregistered completes without an error and is dropped, then
 * the tcp provider drops the connection (later ops on that ep end CANCELED) instead of
 * refusing that one put (ofi_floor "tcp;ofi_rxm" dereg 64 1 shows the first part with
 * libfabric alone; docs/ofi.md), so that check is skipped (rma_unchecked_dereg); bounds and
 * rights are refused by the initiator.  Every case runs.
 */
#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=tcp;ofi_rxm", NULL};
const conf_tl_t conf_tl = {
    .name = "ofi", .device = "rxm", .cross_process = 1, .rma_unchecked_dereg = 1, .env = env};
