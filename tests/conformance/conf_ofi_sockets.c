/*
 * conf_ofi_sockets.c - the conformance suite over the ofi transport with libfabric's `sockets`
 * provider, bound to 127.0.0.1: the one provider here that offers scalable endpoints, so every
 * iface of the suite is a transmit and receive context of the md's one fi_scalable_ep
 * (FERRY_OFI_SEP=on, src/tl/ofi/ofi_sep.c), addressed with fi_rx_addr.
 *
 * close_force and api_close_modes run: sockets' progress thread sends from the caller's memory
 * whenever the socket takes it and serves a peer's read whenever it comes, also after a forced
 * close, so over sockets an eager am_zcopy is copied and the AM rendezvous is off by default
 * (docs/ofi.md, "Completions, errors and dead peers"); with the rendezvous on, close_force saw
 * reads after ep_destroy (16 runs of 30 on separate endpoints) and api_close_modes had the
 * thread read freed memory (ASan: 8 runs of 12 on the scalable endpoint).
 * Two cases are not run.  back_pressure (a receiver that does not progress while 512 MiB are
 * offered, then resumes) did not see every queued message within 30 s once, in the ASan build
 * of a clean-clone CI run (2026-11-28).  Slow, not lost: sockets' progress thread reads every
 * peer's stream into buffers of its own whether or not the receiver progresses, so the
 * sender's sends keep completing and NO_RESOURCE comes only when the sender outpaces that
 * thread: after 256-2327 messages of 8 KiB in 20 runs of the whole suite under ASan at load
 * 6.4-10.6 (each drained in 14-689 ms), but after 56173 (438 MiB) when the sender paces itself
 * (200 us per message), which then took 6 s to drain in the gcc build, every message there and
 * in order; several times slower under ASan and load, that can pass 30 s (the ASan drain
 * of such a backlog not measured).  Bounding sockets' buffer (rx_attr's
 * total_buffered_recv, 4 MiB) did not bound it: its thread said "Exceeded buffered recv limit"
 * thousands of times and the paced sender still reached 64 MiB.  A bound needs flow control of
 * ferry's own over sockets (credits the receiver returns as it takes messages): not done.
 * am_order (3000 AMs of the three kinds, every seventh a zcopy, at most 32 zcopies
 * outstanding) stalled in 1 of 60 runs of the case alone in the gcc build and 1 of 12 to 1 of
 * 51 under ASan (2026-12-02; it failed one clean-clone CI run): the sender waited for zcopy
 * completions that never came, while one of sockets' progress threads looped peeking a
 * 24-byte message header (recv(fd, 24, MSG_PEEK)) that it never took off the socket: gdb
 * caught it inside that recv, /proc showed it running, not asleep in a system call
 * (2026-12-02, fifth session).  It happens over separate endpoints too (FERRY_OFI_SEP=off: 3
 * stalls in 86 runs; 0 in 150 on the scalable endpoint in the same minutes), and sockets logs
 * no warning (FI_LOG_LEVEL=warn).  Its receive progress leaves a header on the stream when
 * the context polling cannot take it (libfabric issues #3886 and #4166 have that shape); what
 * holds it here is not established.  The thread is libfabric's, so ferry cannot move it; over
 * rxm, rxd and shm the case runs.
 * FYCONF_UNSUPPORTED: back_pressure am_order
 */
#include <stdio.h>

#include "conf.h"

static const char *const env[] = {"FERRY_OFI_PROVIDER=sockets", "FERRY_OFI_SEP=on", NULL};
const conf_tl_t conf_tl = {.name = "ofi", .device = "sockets", .cross_process = 1, .env = env};

__attribute__((constructor)) static void say_unsupported(void)
{
    printf("  ofi/sockets: back_pressure not run: sockets buffers a non-progressing receiver's "
           "messages without a bound, and draining hundreds of MiB can pass 30 s under ASan\n");
    printf("  ofi/sockets: am_order not run: sockets' progress thread can loop on a message "
           "header it never takes, and the stream's zcopy completions never come (about 1 run "
           "in 50)\n");
}
