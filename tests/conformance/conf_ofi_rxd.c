/*
 * conf_ofi_rxd.c - the conformance suite over the ofi transport with libfabric's
 * `udp;ofi_rxd` provider (reliable datagrams over the udp provider), bound to 127.0.0.1.
 */
#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=udp;ofi_rxd", NULL};
const conf_tl_t conf_tl = {.name = "ofi", .device = "rxd", .cross_process = 1, .env = env};
