/*
 * fuzz_common.h - what the libFuzzer targets of tests/fuzz share: the two entry points
 * libFuzzer calls, a quiet log (a parser that rejects input logs why, and a million log lines
 * would slow the fuzzer down and fill the disk), a context and worker for the targets that go
 * through the public API, and seeds: run a target with FERRY_FUZZ_SEED_DIR=dir and no input
 * and it writes the genuine messages it knows (its worker's address, a packed rkey...) there.
 */
#ifndef FY_FUZZ_COMMON_H
#define FY_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static inline void fz_quiet(void)
{
    if (getenv("FERRY_FUZZ_VERBOSE") == NULL)
        setenv("FERRY_LOG_LEVEL", "none", 1);
}

/* Setup that must work, or the target is meaningless: stop with the reason. */
#define FZ_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: setup failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Write one seed (prefix bytes, then data) as FERRY_FUZZ_SEED_DIR/<name>, if that is set. */
static inline void fz_seed(const char *name, const void *prefix, size_t plen, const void *data,
                           size_t len)
{
    const char *dir = getenv("FERRY_FUZZ_SEED_DIR");
    if (dir == NULL)
        return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    FZ_CHECK(f != NULL);
    if (plen != 0)
        fwrite(prefix, 1, plen, f);
    if (len != 0)
        fwrite(data, 1, len, f);
    fclose(f);
}

static inline void fz_worker(ferry_context_t **ctx, ferry_worker_t **w)
{
    FZ_CHECK(ferry_context_create(NULL, ctx) == FERRY_OK);
    FZ_CHECK(ferry_worker_create(*ctx, NULL, w) == FERRY_OK);
}

#endif
