/*
 * Bad input to every public call returns a specific error and never crashes: NULL handles,
 * unknown field_mask bits, unknown or out-of-range AM ids, oversized headers, malformed
 * addresses, bad memory parameters, remote access outside a key's region; the job key and
 * udp's per-iface keys.
 */
#include <stdio.h>

#include "common.h"
#include "fytest_util.h"
#include "proto/lanes.h"
#include "proto/proto_int.h"
#include "tl/udp/udp.h"

static void null_handles(void)
{
    FY_ASSERT_STATUS(ferry_context_create(NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_create(NULL, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_ep_create(NULL, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_am_send(NULL, 0, NULL, 0, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_am_sendv(NULL, 0, NULL, 0, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_set_am_handler(NULL, 0, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_ep_close(NULL, FERRY_EP_CLOSE_FLUSH, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_ep_flush(NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_ep_fence(NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_flush(NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_wait(NULL, 0), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_arm(NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_signal(NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_get_fd(NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_get_address(NULL, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_mem_map(NULL, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_mem_unmap(NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_rkey_pack(NULL, NULL, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_rkey_unpack(NULL, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_put(NULL, NULL, 0, 0, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_get(NULL, NULL, 0, 0, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_atomic(NULL, FERRY_ATOMIC_ADD, 8, 1, 0, NULL, 0, NULL, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_ep_get_stats(NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_send(NULL, 0, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_recv(NULL, NULL, 0, 0, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_sendv(NULL, 0, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_ssend(NULL, 0, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_ssendv(NULL, 0, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_recvv(NULL, NULL, 0, 0, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_mprobe(NULL, 0, 0, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_mrecv(NULL, NULL, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_mrecvv(NULL, NULL, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_putv(NULL, NULL, 0, 0, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_getv(NULL, NULL, 0, 0, NULL, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_EQ(ferry_worker_progress(NULL), 0);
    /* destructors accept NULL */
    ferry_worker_destroy(NULL);
    ferry_context_destroy(NULL);
    ferry_rkey_destroy(NULL);
}

static void bad_masks(void)
{
    ferry_context_t *ctx;
    ferry_context_params_t cp = {.field_mask = 1ull << 40};
    FY_ASSERT_STATUS(ferry_context_create(&cp, &ctx), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    ferry_worker_t *w;
    ferry_worker_params_t wp = {.field_mask = 1ull << 33};
    FY_ASSERT_STATUS(ferry_worker_create(ctx, &wp, &w), FERRY_ERR_INVALID_PARAM);
    wp.field_mask = FERRY_WORKER_FIELD_WAIT_MODE;
    wp.wait_mode = (ferry_wait_mode_t)42;
    FY_ASSERT_STATUS(ferry_worker_create(ctx, &wp, &w), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    ferry_ep_t *ep;
    ferry_ep_params_t ep_p = {.field_mask = 1ull << 20};
    FY_ASSERT_STATUS(ferry_ep_create(w, &ep_p, &ep), FERRY_ERR_INVALID_PARAM);
    ep_p.field_mask = 0; /* no address */
    FY_ASSERT_STATUS(ferry_ep_create(w, &ep_p, &ep), FERRY_ERR_INVALID_PARAM);
    ferry_mem_params_t mp = {.field_mask = 1ull << 30};
    ferry_mem_t *mem;
    FY_ASSERT_STATUS(ferry_mem_map(ctx, &mp, &mem), FERRY_ERR_INVALID_PARAM);
    mp.field_mask = FERRY_MEM_FIELD_LENGTH; /* no address, not allocating */
    mp.length = 64;
    FY_ASSERT_STATUS(ferry_mem_map(ctx, &mp, &mem), FERRY_ERR_INVALID_PARAM);
    mp.field_mask = FERRY_MEM_FIELD_LENGTH | FERRY_MEM_FIELD_FLAGS;
    mp.flags = 0x80;
    FY_ASSERT_STATUS(ferry_mem_map(ctx, &mp, &mem), FERRY_ERR_INVALID_PARAM);
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
}

static void bad_addresses(void)
{
    ferry_context_t *ctx;
    ferry_worker_t *w;
    FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
    FY_ASSERT_OK(ferry_worker_create(ctx, NULL, &w));
    char addr[4096];
    size_t len = 4; /* too small */
    FY_ASSERT_STATUS(ferry_worker_get_address(w, addr, &len), FERRY_ERR_TRUNCATED);
    FY_ASSERT_GT(len, 4);
    FY_ASSERT_OK(ferry_worker_get_address(w, addr, &len));
    ferry_ep_t *ep;
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr};
    /* every truncation of a valid address is refused, never read past its end */
    for (size_t l = 1; l < len; l++) {
        char *copy = malloc(l);
        memcpy(copy, addr, l);
        p.address = copy;
        p.address_len = l;
        FY_ASSERT_STATUS(ferry_ep_create(w, &p, &ep), FERRY_ERR_INVALID_ADDR);
        free(copy);
    }
    /* garbage */
    char junk[256];
    fill_pattern(junk, sizeof(junk), 5);
    p.address = junk;
    p.address_len = sizeof(junk);
    FY_ASSERT_STATUS(ferry_ep_create(w, &p, &ep), FERRY_ERR_INVALID_ADDR);
    /* a flipped byte in every position: refused or unreachable, never a crash */
    for (size_t i = 0; i < len; i++) {
        char copy[4096];
        memcpy(copy, addr, len);
        copy[i] ^= 0x5a;
        p.address = copy;
        p.address_len = len;
        ferry_status_t st = ferry_ep_create(w, &p, &ep);
        if (st == FERRY_OK)
            FY_ASSERT_OK(ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL));
        else
            FY_ASSERT_MSG(st == FERRY_ERR_INVALID_ADDR || st == FERRY_ERR_UNREACHABLE,
                          "byte %zu flipped: %s", i, ferry_status_string(st));
    }
    ferry_worker_destroy(w);
    ferry_context_destroy(ctx);
}

static void bad_am_args(void)
{
    pair_t p;
    pair_open(&p);
    char big[FERRY_AM_HEADER_MAX + 1];
    memset(big, 0, sizeof(big));
    FY_ASSERT_STATUS(ferry_am_send(p.ep[0], 0, big, sizeof(big), NULL, 0, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_am_send(p.ep[0], FERRY_AM_ID_MAX + 1, NULL, 0, NULL, 0, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_worker_set_am_handler(p.w[0], FERRY_AM_ID_MAX + 1, NULL, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_am_send(p.ep[0], 0, NULL, 4, NULL, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_am_send(p.ep[0], 0, NULL, 0, NULL, 4, NULL), FERRY_ERR_INVALID_PARAM);
    struct iovec iov[64];
    memset(iov, 0, sizeof(iov));
    FY_ASSERT_STATUS(ferry_am_sendv(p.ep[0], 0, NULL, 0, iov, 64, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_am_sendv(p.ep[0], 0, NULL, 0, NULL, 2, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_ep_close(p.ep[0], 7, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_send(p.ep[0], 1, NULL, 1, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_recv(p.w[0], NULL, 1, 0, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_probe(p.w[0], 0, 0, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_sendv(p.ep[0], 0, iov, 64, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_ssendv(p.ep[0], 0, NULL, 2, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_recvv(p.w[0], iov, 64, 0, 0, NULL), FERRY_ERR_INVALID_PARAM);
    ferry_tag_info_t info;
    ferry_tag_message_t *msg;
    FY_ASSERT_STATUS(ferry_tag_mprobe(p.w[0], 0, 0, &info, NULL), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_tag_mprobe(p.w[0], 0, 0, &info, &msg), FERRY_ERR_NO_MESSAGE);
    FY_ASSERT_STATUS(ferry_tag_mrecv(p.w[0], (ferry_tag_message_t *)iov, NULL, 0, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_request_cancel(p.w[0], NULL), FERRY_ERR_INVALID_PARAM);
    pair_close(&p);
}

static void bad_rma_args(void)
{
    pair_t p;
    pair_open(&p);
    uint64_t target[8] = {0};
    ferry_mem_params_t mp = {.field_mask = FERRY_MEM_FIELD_ADDRESS | FERRY_MEM_FIELD_LENGTH |
                                           FERRY_MEM_FIELD_ACCESS,
                             .address = target,
                             .length = sizeof(target),
                             .access = FERRY_MEM_REMOTE_READ};
    ferry_mem_t *mem;
    FY_ASSERT_OK(ferry_mem_map(p.ctx, &mp, &mem));
    char rkbuf[512];
    size_t rklen = 1;
    FY_ASSERT_STATUS(ferry_rkey_pack(p.ctx, mem, rkbuf, &rklen), FERRY_ERR_TRUNCATED);
    FY_ASSERT_OK(ferry_rkey_pack(p.ctx, mem, rkbuf, &rklen));
    ferry_rkey_t *rk;
    FY_ASSERT_STATUS(ferry_rkey_unpack(p.ep[0], rkbuf, 3, &rk), FERRY_ERR_INVALID_PARAM);
    char junk[64];
    fill_pattern(junk, sizeof(junk), 1);
    FY_ASSERT_STATUS(ferry_rkey_unpack(p.ep[0], junk, sizeof(junk), &rk), FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_OK(ferry_rkey_unpack(p.ep[0], rkbuf, rklen, &rk));
    uint64_t v = 1, base = (uint64_t)(uintptr_t)target;
    /* read-only region: write and atomic refused */
    FY_ASSERT_STATUS(ferry_put(p.ep[0], &v, 8, base, rk, NULL), FERRY_ERR_ACCESS_DENIED);
    struct iovec two[2] = {{&v, 4}, {&v, 4}};
    FY_ASSERT_STATUS(ferry_putv(p.ep[0], two, 2, base, rk, NULL), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(ferry_getv(p.ep[0], two, 2, base + sizeof(target) - 4, rk, NULL),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(ferry_atomic(p.ep[0], FERRY_ATOMIC_ADD, 8, 1, 0, NULL, base, rk, NULL),
                     FERRY_ERR_ACCESS_DENIED);
    /* out of bounds, straddling, wrapping */
    FY_ASSERT_STATUS(ferry_get(p.ep[0], &v, 8, base + sizeof(target), rk, NULL),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(ferry_get(p.ep[0], &v, 8, base + sizeof(target) - 4, rk, NULL),
                     FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(ferry_get(p.ep[0], &v, 8, base - 8, rk, NULL), FERRY_ERR_ACCESS_DENIED);
    FY_ASSERT_STATUS(ferry_get(p.ep[0], &v, SIZE_MAX - 4, base + 8, rk, NULL),
                     FERRY_ERR_ACCESS_DENIED);
    /* atomic: bad size, misaligned, cswap without result */
    FY_ASSERT_STATUS(ferry_atomic(p.ep[0], FERRY_ATOMIC_ADD, 2, 1, 0, NULL, base, rk, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_atomic(p.ep[0], FERRY_ATOMIC_ADD, 8, 1, 0, NULL, base + 4, rk, NULL),
                     FERRY_ERR_INVALID_PARAM);
    FY_ASSERT_STATUS(ferry_atomic(p.ep[0], FERRY_ATOMIC_CSWAP, 8, 1, 0, NULL, base, rk, NULL),
                     FERRY_ERR_INVALID_PARAM);
    /* an rkey unpacked on another endpoint */
    FY_ASSERT_STATUS(ferry_get(p.ep[1], &v, 8, base, rk, NULL), FERRY_ERR_INVALID_PARAM);
    /* a valid read still works */
    target[2] = 0x1234;
    FY_ASSERT_OK(ferry_get(p.ep[0], &v, 8, base + 16, rk, NULL));
    FY_ASSERT_U64_EQ(v, 0x1234);
    ferry_rkey_destroy(rk);
    FY_ASSERT_OK(ferry_mem_unmap(p.ctx, mem));
    pair_close(&p);
}

static void bad_config(void)
{
    /* A bad value fails context creation with a message naming the variable and value. */
    char path[] = "/tmp/ferry-badcfg-XXXXXX";
    int fd = mkstemp(path);
    FY_ASSERT(fd >= 0);
    close(fd);
    setenv("FERRY_LOG_FILE", path, 1);
    setenv("FERRY_WAIT", "sometimes", 1);
    ferry_context_t *ctx;
    FY_ASSERT_STATUS(ferry_context_create(NULL, &ctx), FERRY_ERR_BAD_CONFIG);
    unsetenv("FERRY_WAIT");
    setenv("FERRY_TLS", "shm,carrier-pigeon", 1);
    FY_ASSERT_STATUS(ferry_context_create(NULL, &ctx), FERRY_ERR_BAD_CONFIG);
    unsetenv("FERRY_TLS");
    setenv("FERRY_TAG_STAGED_RATE", "fast", 1);
    FY_ASSERT_STATUS(ferry_context_create(NULL, &ctx), FERRY_ERR_BAD_CONFIG);
    unsetenv("FERRY_TAG_STAGED_RATE");
    setenv("FERRY_RX_COPY_MOVSB", "sometimes", 1);
    FY_ASSERT_STATUS(ferry_context_create(NULL, &ctx), FERRY_ERR_BAD_CONFIG);
    unsetenv("FERRY_RX_COPY_MOVSB");
    FILE *f = fopen(path, "r");
    FY_ASSERT(f != NULL);
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(path);
    FY_ASSERT_MSG(strstr(text, "FERRY_WAIT") && strstr(text, "sometimes"), "log: %s", text);
    FY_ASSERT_MSG(strstr(text, "carrier-pigeon"), "log: %s", text);
    FY_ASSERT_MSG(strstr(text, "FERRY_TAG_STAGED_RATE") && strstr(text, "fast"), "log: %s", text);
    FY_ASSERT_MSG(strstr(text, "FERRY_RX_COPY_MOVSB=sometimes"), "log: %s", text);
}

/* The job key tcp, ofi and the sockaddr listener carry: FERRY_JOB_KEY first, else the launcher's
 * job name (the PMIx namespace, else Slurm's job and step), else the fixed default; two jobs of
 * one launcher get different keys, two ranks of one job the same.  udp does not use it: each
 * udp iface draws its own random key and publishes it in the worker's address (udp_keys). */

static void job_keys(void)
{
    setenv("FERRY_TLS", "self", 1);
    unsetenv("FERRY_JOB_KEY");
    unsetenv("PMIX_NAMESPACE");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    uint64_t none = fytest_context_job_key();
    FY_ASSERT_U64_EQ(none, FY_JOB_KEY_DEFAULT);
    setenv("PMIX_NAMESPACE", "871890945", 1);
    uint64_t a = fytest_context_job_key();
    FY_ASSERT_U64_EQ(fytest_context_job_key(), a);
    setenv("PMIX_NAMESPACE", "871890946", 1);
    uint64_t b = fytest_context_job_key();
    FY_ASSERT(a != none && b != none && a != b);
    setenv("FERRY_JOB_KEY", "0123456789abcdef", 1); /* ferryrun's wins */
    uint64_t f = fytest_context_job_key();
    FY_ASSERT(f != a && f != b && f != none);
    unsetenv("FERRY_JOB_KEY");
    unsetenv("PMIX_NAMESPACE");
    setenv("SLURM_JOB_ID", "42", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    uint64_t s0 = fytest_context_job_key();
    setenv("SLURM_STEP_ID", "1", 1);
    uint64_t s1 = fytest_context_job_key();
    FY_ASSERT(s0 != none && s1 != none && s0 != s1 && s0 != a);
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    unsetenv("FERRY_TLS");
}

/* The udp key in a worker's address (0: the address has no udp iface). */
static uint64_t udp_key(ferry_worker_t *w)
{
    char addr[4096];
    size_t len = sizeof(addr);
    fy_remote_addr_t ra;
    FY_ASSERT_OK(ferry_worker_get_address(w, addr, &len));
    FY_ASSERT_OK(fy_address_unpack(addr, len, &ra));
    for (unsigned i = 0; i < ra.niface; i++) {
        fy_udp_iface_addr_t ia;
        if (strcmp(ra.ifaces[i].tl, "udp") != 0 || ra.ifaces[i].iface_addr_len != sizeof(ia))
            continue;
        memcpy(&ia, ra.ifaces[i].iface_addr, sizeof(ia));
        return ia.key;
    }
    return 0;
}

/* udp keys are per iface, random, whatever the job key: two workers of one context, and two
 * contexts under one FERRY_JOB_KEY, each get their own, never the job key nor the old fixed
 * default (an unlaunched process's key once, shared by every such process). */
static void udp_keys(void)
{
    ferry_context_t *c1, *c2;
    ferry_worker_t *w1, *w2, *w3;
    if (fy_tl_find("udp") == NULL)
        return; /* a build without udp */
    setenv("FERRY_TLS", "udp", 1);
    setenv("FERRY_UDP_IF_INCLUDE", "lo", 1);
    setenv("FERRY_JOB_KEY", "0123456789abcdef", 1);
    FY_ASSERT_OK(ferry_context_create(NULL, &c1));
    FY_ASSERT_OK(ferry_context_create(NULL, &c2));
    FY_ASSERT_OK(ferry_worker_create(c1, NULL, &w1));
    FY_ASSERT_OK(ferry_worker_create(c1, NULL, &w2));
    FY_ASSERT_OK(ferry_worker_create(c2, NULL, &w3));
    uint64_t k1 = udp_key(w1), k2 = udp_key(w2), k3 = udp_key(w3);
    uint64_t job = fy_context_job_key(c1);
    FY_ASSERT_U64_EQ(fy_context_job_key(c2), job);
    FY_ASSERT(k1 != 0 && k2 != 0 && k3 != 0);
    FY_ASSERT(k1 != k2 && k1 != k3 && k2 != k3);
    FY_ASSERT(k1 != job && k2 != job && k3 != job);
    FY_ASSERT(k1 != FY_JOB_KEY_DEFAULT && k2 != FY_JOB_KEY_DEFAULT && k3 != FY_JOB_KEY_DEFAULT);
    ferry_worker_destroy(w3);
    ferry_worker_destroy(w2);
    ferry_worker_destroy(w1);
    ferry_context_destroy(c2);
    ferry_context_destroy(c1);
    unsetenv("FERRY_JOB_KEY");
    unsetenv("FERRY_UDP_IF_INCLUDE");
    unsetenv("FERRY_TLS");
}

FYTEST_MAIN(FYTEST_CASE(null_handles), FYTEST_CASE(bad_masks), FYTEST_CASE(bad_addresses),
            FYTEST_CASE(bad_am_args), FYTEST_CASE(bad_rma_args), FYTEST_CASE(bad_config),
            FYTEST_CASE(job_keys), FYTEST_CASE(udp_keys))
