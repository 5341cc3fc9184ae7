/*
 * fuzz_addr.c - libFuzzer target for worker addresses: the blob a peer sends (out of band or
 * through the bootstrap) and ferry_ep_create unpacks (src/proto/wireup.c), with each
 * transport's device and interface addresses inside it.  The input is the address itself,
 * given to ferry_ep_create on a worker with every transport open; an endpoint that is
 * created is closed again at once (the connection is lazy, so nothing is sent).  A malformed
 * address must give FERRY_ERR_INVALID_ADDR or FERRY_ERR_UNREACHABLE, never a crash or a leak.
 *
 * Input: a mode byte, then bytes.  Mode bit 0 clear: the bytes are the address.  Set: the
 * bytes are XORed onto this worker's own address (a genuine one wherever the fuzzer runs:
 * other namespaces, other hosts), longer input extends it, and with bit 1 the result is cut
 * to the input's length.
 */
#include "fuzz_common.h"

static ferry_context_t *ctx;
static ferry_worker_t *worker;
static uint8_t own[4096];
static size_t own_len;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    fz_worker(&ctx, &worker);
    /* seeds: this worker's address as is, the same through the XOR mode, and a second
     * worker's (another process's look-alike) */
    own_len = sizeof(own);
    FZ_CHECK(ferry_worker_get_address(worker, own, &own_len) == FERRY_OK);
    uint8_t mode = 0;
    fz_seed("own_address", &mode, 1, own, own_len);
    mode = 1;
    fz_seed("own_address_xor", &mode, 1, NULL, 0);
    uint8_t buf[4096];
    size_t len = sizeof(buf);
    ferry_worker_t *other;
    FZ_CHECK(ferry_worker_create(ctx, NULL, &other) == FERRY_OK);
    FZ_CHECK(ferry_worker_get_address(other, buf, &len) == FERRY_OK);
    mode = 0;
    fz_seed("other_address", &mode, 1, buf, len);
    ferry_worker_destroy(other);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    data++, size--;
    size_t n = size;
    if (mode & 1) {
        n = (mode & 2) ? size : (size > own_len ? size : own_len);
    }
    uint8_t *addr = malloc(n + 1); /* exactly n bytes in use: ASan sees an overread */
    if (addr == NULL)
        return 0;
    if (mode & 1) {
        for (size_t i = 0; i < n; i++)
            addr[i] = (uint8_t)((i < own_len ? own[i] : 0) ^ (i < size ? data[i] : 0));
    } else if (n != 0) {
        memcpy(addr, data, n);
    }
    ferry_ep_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = FERRY_EP_FIELD_ADDRESS;
    p.address = addr;
    p.address_len = n;
    ferry_ep_t *ep = NULL;
    if (ferry_ep_create(worker, &p, &ep) == FERRY_OK) {
        ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
        ferry_worker_progress(worker);
    }
    free(addr);
    return 0;
}
