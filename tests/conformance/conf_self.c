/*
 * conf_self.c - the conformance suite over the self transport: workers of one process, so
 * the peer-death cases do not apply.
 */
#include "conf.h"

const conf_tl_t conf_tl = {.name = "self", .device = "process", .cross_process = 0, .env = NULL};
