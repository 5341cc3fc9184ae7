/*
 * boot.h - the bootstrap: a small key-value exchange among the processes of a job, served by
 * whatever launcher started it.  Nothing outside boot/ knows which launcher that was.
 *
 * Backends, chosen from the environment (FERRY_BOOT=builtin|pmix|pmi1|singleton forces one):
 *   builtin    ferryrun's own server on loopback (FERRY_BOOT_ADDR, FERRY_RANK, FERRY_SIZE...)
 *   pmix       libpmix, loaded with dlopen (Open MPI's mpirun, PRRTE, srun --mpi=pmix)
 *   pmi1       the PMI-1 text wire protocol over PMI_FD (MPICH's hydra, Slurm's pmi2 plugin)
 *   singleton  no launcher: rank 0 of 1
 *
 * Use: init, put (any binary blob), fence (collective: after it, every rank's puts before it
 * are visible), get, barrier, finalize.  Calls block; fence and barrier give up after
 * FERRY_BOOT_TIMEOUT (default 60s) with FERRY_ERR_TIMED_OUT and a message naming the ranks
 * that did not arrive, when the backend can tell.
 */
#ifndef FY_BOOT_H
#define FY_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

typedef struct fy_boot fy_boot_t;

typedef struct fy_boot_info {
    int rank, size;
    int local_rank, local_size;
    char host[64];
    const char *backend; /* "builtin", "pmix", "pmi1", "singleton" */
} fy_boot_info_t;

ferry_status_t fy_boot_init(fy_boot_t **boot_p);
/* The job's name as a launcher that tells it only over its connection gives it: MPICH's
 * hydra (PMI-1, the kvs name).  FERRY_ERR_NO_ELEM when this process was not started by one
 * (or FERRY_BOOT names another backend); another error (logged) when the launcher is there
 * but does not answer.  The connection stays open for a later fy_boot_init. */
ferry_status_t fy_boot_job_name(char *buf, size_t len);
const fy_boot_info_t *fy_boot_info(const fy_boot_t *boot);
/* Publish a blob under key (keys: up to 63 chars of [A-Za-z0-9_.-]). */
ferry_status_t fy_boot_put(fy_boot_t *boot, const char *key, const void *value, size_t len);
/* Commit puts and wait for every rank. */
ferry_status_t fy_boot_fence(fy_boot_t *boot);
/* A rank's blob.  *len: in, size of buf; out, size of the value.  TRUNCATED if too small;
 * NO_ELEM if the rank did not put the key. */
ferry_status_t fy_boot_get(fy_boot_t *boot, int rank, const char *key, void *buf, size_t *len);
ferry_status_t fy_boot_barrier(fy_boot_t *boot);
void fy_boot_finalize(fy_boot_t *boot);

/* The largest value the launcher stores under one of its keys (0 = no limit).  Longer values
 * are split over several launcher keys and reassembled by fy_boot_get (tests, logs). */
size_t fy_boot_value_limit(const fy_boot_t *boot);
/* FERRY_BOOT_TIMEOUT in nanoseconds: how long fence and barrier wait (default 60 s). */
uint64_t fy_boot_timeout_ns(const fy_boot_t *boot);

#endif
