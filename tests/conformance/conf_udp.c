/*
 * conf_udp.c - the conformance suite over the udp transport, on loopback.  The largest
 * zero-copy AM is lowered to 4 MiB so that the cases reach and pass it cheaply, and a dead
 * peer is declared after 1 s of silence instead of 3.
 */
#include "conf.h"

static const char *const env[] = {"FERRY_UDP_IF_INCLUDE=lo", "FERRY_UDP_MAX_ZCOPY=4m",
                                  "FERRY_UDP_PEER_TIMEOUT=1s", NULL};
const conf_tl_t conf_tl = {.name = "udp", .device = "lo", .cross_process = 1, .env = env};
