/*
 * ofi_park.c - shm endpoints whose close waits for the process's last shm interface.
 *
 * libfabric 1.17's shm crashes (SIGSEGV in fi_cq_read) an endpoint that progresses after
 * another endpoint of the same process made first contact with it and closed before it had
 * progressed: the contact names a region that is gone (`ofi_floor shm close-inflight 64 1`;
 * with `close-park`, the first endpoint closed only after the second, both survive).  So an
 * shm interface that reached an endpoint of its own process, or was reached by one
 * (ep_create or a rendezvous from this pid: `iface->same_process`), does not close its
 * endpoint, address vector and completion queue while another shm interface of the process
 * is open: they are parked, and closed when the process's last shm interface closes (with the
 * domain and fabric of an md that closed meanwhile: an endpoint holds its domain open).
 *
 * A parked endpoint is never called again.  shm progresses only inside calls on it (its CQ
 * read), so it touches no memory of ferry's: the receive buffers, ops and flush word of the
 * closed interface are freed as usual, and what a peer sends to it stays in shm's own region.
 * A rendezvous from a parked endpoint would never be read (its sender serves reads in its
 * progress): the receiver asks fy_ofi_park_has and refuses it at once instead.  The cost is
 * the parked endpoint's memory (its region) until the last shm interface of the process
 * closes; an interface whose peers were all in other processes closes at once as before.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tl/ofi/ofi.h"
#include "util/log.h"

/* One thing to close later: an endpoint with its AV and CQ (and its name, for
 * fy_ofi_park_has), or an md's domain and fabric (name_len 0). */
typedef struct parked {
    struct parked *next;
    struct fid *fids[3]; /* closed in this order; NULL entries skipped */
    struct fi_info *info;
    struct fid_domain *domain; /* of the endpoint: its md's close asks */
    uint8_t name[FY_OFI_NAME_MAX];
    size_t name_len;
} parked_t;

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned park_open; /* shm interfaces open in this process */
static parked_t *park_head, **park_tail = &park_head;

static int is_shm(const fy_ofi_md_t *md)
{
    return strcmp(md->info->fabric_attr->prov_name, "shm") == 0;
}

void fy_ofi_park_open(fy_ofi_iface_t *iface)
{
    if (!is_shm(iface->md))
        return;
    iface->parkable = 1;
    pthread_mutex_lock(&park_lock);
    park_open++;
    pthread_mutex_unlock(&park_lock);
}

static void add(parked_t *p)
{
    p->next = NULL;
    *park_tail = p;
    park_tail = &p->next;
}

/* Close everything parked, in the order it was parked (endpoints before their domain). */
static void close_all(parked_t *list)
{
    while (list != NULL) {
        parked_t *p = list;
        list = p->next;
        for (int i = 0; i < 3; i++)
            if (p->fids[i] != NULL)
                fi_close(p->fids[i]);
        if (p->info != NULL)
            fi_freeinfo(p->info);
        free(p);
    }
}

int fy_ofi_park_iface(fy_ofi_iface_t *iface)
{
    if (!iface->parkable)
        return 0;
    parked_t *p = iface->same_process ? calloc(1, sizeof(*p)) : NULL;
    parked_t *flush = NULL;
    int parked = 0;
    pthread_mutex_lock(&park_lock);
    park_open--;
    if (p != NULL && park_open > 0) {
        p->fids[0] = &iface->ep->fid;
        p->fids[1] = &iface->av->fid;
        p->fids[2] = &iface->cq->fid;
        p->domain = iface->md->domain;
        memcpy(p->name, iface->name, iface->name_len);
        p->name_len = iface->name_len;
        add(p);
        p = NULL;
        parked = 1;
        iface->ep = NULL;
        iface->av = NULL;
        iface->cq = NULL;
    } else if (park_open == 0) { /* the last: nothing can progress into a parked one now */
        flush = park_head;
        park_head = NULL;
        park_tail = &park_head;
    }
    pthread_mutex_unlock(&park_lock);
    free(p);
    if (parked)
        fy_debug("ofi: shm: the endpoint of a closed interface is kept until the process's last "
                 "shm interface closes (an endpoint of this process reached it)");
    close_all(flush);
    return parked;
}

int fy_ofi_park_domain(fy_ofi_md_t *md)
{
    if (md->info == NULL || !is_shm(md))
        return 0;
    int keep = 0;
    pthread_mutex_lock(&park_lock);
    for (parked_t *p = park_head; p != NULL && !keep; p = p->next)
        keep = p->domain == md->domain;
    parked_t *d = keep ? calloc(1, sizeof(*d)) : NULL;
    if (d != NULL) {
        d->fids[0] = &md->domain->fid;
        d->fids[1] = &md->fabric->fid;
        d->info = md->info;
        add(d);
    }
    pthread_mutex_unlock(&park_lock);
    if (keep && d == NULL) /* no memory: the domain stays open, as the endpoints need */
        fy_warn("ofi: shm: no memory to keep a domain for a parked endpoint: it is leaked");
    return keep;
}

int fy_ofi_park_has(const uint8_t *name, size_t len)
{
    int found = 0;
    pthread_mutex_lock(&park_lock);
    for (parked_t *p = park_head; p != NULL && !found; p = p->next)
        found = p->name_len == len && len > 0 && memcmp(p->name, name, len) == 0;
    pthread_mutex_unlock(&park_lock);
    return found;
}
