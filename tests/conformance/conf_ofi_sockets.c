/*
 * conf_ofi_sockets.c - the conformance suite over the ofi transport with libfabric's `sockets`
 * provider, bound to 127.0.0.1: the one provider here that offers scalable endpoints, so every
 * iface of the suite is a transmit and receive context of the md's one fi_scalable_ep
 * (FERRY_OFI_SEP=on, src/tl/ofi/ofi_sep.c), addressed with fi_rx_addr.
 *
 * libfabric 1.17's sockets cannot keep two clauses here, for one reason: its progress thread
 * serves a peer's fi_read of an AM rendezvous straight from the sender's memory, so after a
 * forced close with rendezvous in flight the receiver may still read the buffer (the zero-copy
 * gap of docs/ofi.md, "Completions, errors and dead peers"), on either kind of endpoint:
 *  - close_force: its check that nothing is read after ep_destroy returned fails (run alone 30
 *    times: never on the scalable endpoint, 16 times on separate endpoints; about one run of
 *    the whole suite in 15 on the scalable endpoint);
 *  - api_close_modes: the case frees the buffer after FORCE, and the provider's thread send()s
 *    from the freed memory (ASan: heap-use-after-free; run alone 12 times: 8 failures on the
 *    scalable endpoint, 2 on separate endpoints).
 * And one not yet understood: back_pressure (a receiver that does not progress while 512 MiB
 * are offered, then resumes) did not see every queued message within 30 s once, in the ASan
 * build of a clean-clone CI run (2026-11-28; it passed in the same run's gcc build and in every
 * earlier run): either sockets loses a message a receiver took too long to take, or it is slow
 * there.  Not run over sockets until that is known.
 * FYCONF_UNSUPPORTED: close_force api_close_modes back_pressure
 */
#include <stdio.h>

#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=sockets", "FERRY_OFI_SEP=on", NULL};
const conf_tl_t conf_tl = {.name = "ofi", .device = "sockets", .cross_process = 1, .env = env};

__attribute__((constructor)) static void say_unsupported(void)
{
    printf("  ofi/sockets: close_force and api_close_modes not run: libfabric 1.17 sockets serves "
           "a peer's read of a rendezvous from the sender's buffer after a forced close; "
           "back_pressure not run: it lost or delayed queued messages once (under ASan)\n");
}
