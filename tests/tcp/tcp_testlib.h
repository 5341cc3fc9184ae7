/*
 * tcp_testlib.h - helpers for the tl-level tcp tests: a node (md + iface driven through the
 * transport's ops table directly), peers in forked processes talking to the test over pipes
 * (addresses, readiness, results: never a sleep), waits that sleep on the iface's event fd,
 * and data patterns with checksums.
 */
#ifndef TCP_TESTLIB_H
#define TCP_TESTLIB_H

#include <stdint.h>
#include <sys/types.h>

#include "fytest_proc.h"
#include "tl/tl.h"

typedef struct tt_node tt_node_t;
typedef void (*tt_am_fn_t)(tt_node_t *n, uint8_t id, const void *data, size_t len);

struct tt_node {
    const fy_tl_component_t *tl;
    const fy_tl_ops_t *ops;
    fy_tl_md_t *md;
    fy_tl_iface_t *iface;
    fy_tl_iface_attr_t attr;
    fy_tl_device_t dev;
    tt_am_fn_t on_am;
    void *user;
    unsigned nerr; /* err_cb calls */
    fy_tl_ep_t *err_ep[16];
    ferry_status_t err_st[16];
};

/* A node's address as it travels over a pipe. */
typedef struct tt_addr {
    uint8_t dev[64];
    uint8_t iface[64];
} tt_addr_t;

/* A completion that records its status. */
typedef struct tt_comp {
    fy_tl_comp_t super;
    int done;
    ferry_status_t status;
} tt_comp_t;

/* A peer process, started by the tree's one helper (fytest_proc.h). */
typedef fyproc_t tt_proc_t;

#define TT_JOB_KEY 0x7465737431323334ull

/* Open the tcp md and an iface on its first device (asserts on failure). */
void tt_open(tt_node_t *n, uint64_t job_key, tt_am_fn_t on_am, void *user);
void tt_close(tt_node_t *n);
void tt_get_addr(tt_node_t *n, tt_addr_t *a);
fy_tl_ep_t *tt_ep(tt_node_t *n, const tt_addr_t *a);
/* One progress call. */
unsigned tt_progress(tt_node_t *n);
/* Progress; if there was nothing to do, sleep on the event fd (and extra_fd if >= 0) for up
 * to ms milliseconds.  Returns 1 if extra_fd became readable. */
int tt_wait(tt_node_t *n, int extra_fd, int ms);
void tt_comp_init(tt_comp_t *c);
/* Progress until the completion ran. */
void tt_comp_wait(tt_node_t *n, tt_comp_t *c);
/* st = expr, retried while it answers NO_RESOURCE, progressing in between. */
#define TT_RETRY(n, st, expr)                                                                      \
    do {                                                                                           \
        while (((st) = (expr)) == FERRY_ERR_NO_RESOURCE)                                           \
            tt_wait((n), -1, 100);                                                                 \
    } while (0)

/* Fork a peer running fn(rfd, wfd, arg) then fytest_exit(0) (leak-checked under ASan); the
 * parent gets the pipe ends. */
void tt_fork(tt_proc_t *p, void (*fn)(int rfd, int wfd, void *arg), void *arg);
/* Wait for a peer to exit with status 0 (asserts). */
void tt_join(tt_proc_t *p);
void tt_write(int fd, const void *buf, size_t len);
void tt_read(int fd, void *buf, size_t len);
int tt_readable(int fd);

/* Deterministic data and a checksum of it. */
void tt_fill(void *p, size_t len, uint64_t seed);
uint64_t tt_sum(const void *p, size_t len);

#endif
