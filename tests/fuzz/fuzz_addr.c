/*
 * fuzz_addr.c - libFuzzer target for worker addresses: the blob a peer sends (out of band or
 * through the bootstrap) and ferry_ep_create unpacks (src/proto/wireup.c), with each
 * transport's device and interface addresses inside it.  The input is the address itself,
 * given to ferry_ep_create on a worker with every transport open; an endpoint that is
 * created is closed again at once (the connection is lazy, so nothing is sent).  A malformed
 * address must give FERRY_ERR_INVALID_ADDR or FERRY_ERR_UNREACHABLE, never a crash or a leak.
 */
#include "fuzz_common.h"

static ferry_context_t *ctx;
static ferry_worker_t *worker;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    fz_worker(&ctx, &worker);
    /* seeds: this worker's address, and a second worker's (another process's look-alike) */
    uint8_t buf[4096];
    size_t len = sizeof(buf);
    FZ_CHECK(ferry_worker_get_address(worker, buf, &len) == FERRY_OK);
    fz_seed("own_address", NULL, 0, buf, len);
    ferry_worker_t *other;
    FZ_CHECK(ferry_worker_create(ctx, NULL, &other) == FERRY_OK);
    len = sizeof(buf);
    FZ_CHECK(ferry_worker_get_address(other, buf, &len) == FERRY_OK);
    fz_seed("other_address", NULL, 0, buf, len);
    ferry_worker_destroy(other);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ferry_ep_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = FERRY_EP_FIELD_ADDRESS;
    p.address = data;
    p.address_len = size;
    ferry_ep_t *ep = NULL;
    if (ferry_ep_create(worker, &p, &ep) == FERRY_OK) {
        ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
        ferry_worker_progress(worker);
    }
    return 0;
}
