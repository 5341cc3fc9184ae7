/*
 * conf_shm.c - the conformance suite over the shm transport: processes of one host, through
 * the "memory" device.  Put and get go straight to the target's memory (cross-memory attach),
 * so a key the target deregistered is not refused.
 */
#include "conf.h"

const conf_tl_t conf_tl = {
    .name = "shm", .device = "memory", .cross_process = 1, .rma_unchecked_dereg = 1};
