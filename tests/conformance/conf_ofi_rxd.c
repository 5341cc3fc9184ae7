/*
 * conf_ofi_rxd.c - the conformance suite over the ofi transport with libfabric's
 * `udp;ofi_rxd` provider (reliable datagrams over the udp provider), bound to 127.0.0.1.
 *
 * libfabric 1.17's rxd neither completes nor fails a put or get with a key the target
 * deregistered: it retries it, and delivers nothing to that peer behind it (ofi_floor
 * "udp;ofi_rxd" dereg 64 1).  ferry's deadline for RMA ops (FERRY_OFI_RMA_TIMEOUT, here 2 s
 * instead of 30 s so the case stays short; the suite's largest put, 8 MiB, takes well under
 * 1 s under ASan) fails the ep with ENDPOINT_TIMEOUT: the op and its flush end with that
 * error, no hang, so rma_refused's deregistered-key clauses run, each on a pair of its own,
 * and a new ep to that peer is refused (rma_dereg_fails_ep; docs/ofi.md, "What the
 * conformance suite runs"); api_put_refused's unmapped region runs too.
 * Bounds and rights are refused at once by the initiator.  Every case runs.
 */
#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=udp;ofi_rxd", "FERRY_OFI_RMA_TIMEOUT=2s",
                                  NULL};
const conf_tl_t conf_tl = {
    .name = "ofi", .device = "rxd", .cross_process = 1, .rma_dereg_fails_ep = 1, .env = env};
