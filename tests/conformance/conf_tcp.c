/*
 * conf_tcp.c - the conformance suite over the tcp transport, on loopback.  The largest
 * message is lowered from 1 GiB to 4 MiB so that the cases reach and pass the maximum cheaply
 * (and proto's splitting is exercised through the API).
 */
#include "conf.h"

static const char *const env[] = {"FERRY_TCP_IF_INCLUDE=lo", "FERRY_TCP_MAX_MSG=4m", NULL};
const conf_tl_t conf_tl = {.name = "tcp", .device = "lo", .cross_process = 1, .env = env};
