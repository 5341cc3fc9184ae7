/*
 * conf_ofi_rxm.c - the conformance suite over the ofi transport with libfabric's
 * `tcp;ofi_rxm` provider (RDM over the tcp provider's connections), bound to 127.0.0.1.
 *
 * A put with a key the target deregistered completes without an error and is dropped, then
 * the tcp provider drops the connection (ofi_floor "tcp;ofi_rxm" dereg 64 1 shows the first
 * part with libfabric alone; docs/ofi.md): the flush after it ends with CONNECTION_RESET and
 * the ep fails; a get with such a key fails the same way.  So rma_refused's deregistered-key
 * clauses run, each on a pair of its own (rma_dereg_fails_ep); bounds and rights are refused
 * by the initiator.  Every case runs.
 */
#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=tcp;ofi_rxm", NULL};
const conf_tl_t conf_tl = {
    .name = "ofi", .device = "rxm", .cross_process = 1, .rma_dereg_fails_ep = 1, .env = env};
