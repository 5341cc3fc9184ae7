/*
 * conf_ofi_shm.c - the conformance suite over the ofi transport with libfabric's `shm`
 * provider (shared-memory rings and cross-memory attach between processes of this host).
 *
 * libfabric 1.17's shm cannot keep one clause here (docs/ofi.md, "What the conformance suite
 * runs", and the reproduction with libfabric alone, bench/ofi_floor.c): a put with a key the
 * target deregistered is not refused: it completes without an error and is dropped (ofi_floor
 * shm dereg 64 1), so the initiator's op cannot report it (rma_unchecked_dereg, as ferry's own
 * shm).  A get with such a key never completes (dereg-read): ferry's deadline for RMA ops
 * (FERRY_OFI_RMA_TIMEOUT, here 2 s instead of 30 s) fails it with ENDPOINT_TIMEOUT, and since
 * shm completes in order the whole interface fails (FERRY_ERR_IO), so that clause runs on a
 * pair of its own (rma_dereg_fails_ep).  Every case runs.  iface_close_open_eps runs since
 * ferry parks the endpoint of an shm interface that an endpoint of its own process reached
 * until the process's last shm interface closes (src/tl/ofi/ofi_park.c): shm crashed an
 * endpoint that progressed after such a peer closed (ofi_floor shm close-inflight 64 1;
 * close-park survives).
 *
 * A peer is killed only while parked outside its progress call (peer_dies_parked): 1.17's shm
 * holds the receiving endpoint's region spin lock (in the shared region) through each progress
 * pass, and a sender takes it with pthread_spin_lock; a peer killed holding it leaves every
 * sender to it spinning inside fi_send for ever, where ferry cannot reach (docs/ofi.md).
 */
#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=shm", "FERRY_OFI_RMA_TIMEOUT=2s", NULL};
const conf_tl_t conf_tl = {.name = "ofi",
                           .device = "shm",
                           .cross_process = 1,
                           .rma_unchecked_dereg = 1,
                           .rma_dereg_fails_ep = 1,
                           .peer_dies_parked = 1,
                           .env = env};
