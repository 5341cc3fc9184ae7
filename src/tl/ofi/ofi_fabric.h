/*
 * ofi_fabric.h - the one way ferry's ofi code includes libfabric's headers.
 *
 * libfabric is opened with dlopen the first time the ofi transport is asked for, never linked
 * into libferry: linking it would load its whole dependency tree (verbs, psm, psm2 and their
 * libraries) into every program that uses ferry, and some of those install signal handlers at
 * load time, which take over the crash reports of programs that never touch a fabric.  The
 * API is nearly all inline calls through the objects' operation tables; only the handful of
 * functions renamed below are real symbols.  The renaming reaches the inline functions of the
 * headers too (fi_allocinfo calls fi_dupinfo), so no reference to a libfabric symbol is left
 * in the library.  The wrappers (ofi_dl.c) load libfabric on first use; when it cannot be
 * loaded they fail as libfabric fails (-FI_ENOSYS, NULL) and fy_ofi_dl_error() says why.
 */
#ifndef FERRY_TL_OFI_FABRIC_H
#define FERRY_TL_OFI_FABRIC_H

#define fi_getinfo  fy_ofi_getinfo
#define fi_freeinfo fy_ofi_freeinfo
#define fi_dupinfo  fy_ofi_dupinfo
#define fi_fabric   fy_ofi_fabric
#define fi_strerror fy_ofi_strerror
#define fi_version  fy_ofi_version

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

/* Load libfabric (once; thread-safe).  0 when its functions are there, -1 otherwise. */
int fy_ofi_dl_load(void);
/* Why the load failed (NULL when it did not). */
const char *fy_ofi_dl_error(void);

#endif
