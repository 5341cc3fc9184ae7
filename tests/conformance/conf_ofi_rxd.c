/*
 * conf_ofi_rxd.c - the conformance suite over the ofi transport with libfabric's
 * `udp;ofi_rxd` provider (reliable datagrams over the udp provider), bound to 127.0.0.1.
 *
 * What libfabric 1.17's rxd cannot do here: a put with a key the target deregistered never
 * completes (no error comes back, rxd retries it: ofi_floor "udp;ofi_rxd" dereg 64 1), so
 * that check is skipped (rma_unchecked_dereg; docs/ofi.md, "What the conformance suite
 * runs"); bounds and rights are refused at once by the initiator.  Every case runs.
 */
#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=udp;ofi_rxd", NULL};
const conf_tl_t conf_tl = {
    .name = "ofi", .device = "rxd", .cross_process = 1, .rma_unchecked_dereg = 1, .env = env};
