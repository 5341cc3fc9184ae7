/*
 * worker.c - the worker: a progress engine with its own interfaces (one per transport device),
 * endpoint table, active message handlers and completion queue.
 *
 * Progress polls every interface (the transports deliver received messages and completions
 * from there), retries operations that waited for resources, then runs the callbacks of
 * operations completed outside a transport's progress.  The pass a polling loop runs most is
 * kept short: with one interface carrying endpoints, no lock and no listener, it calls that
 * interface and tests two queues (w->poll_one, chosen again when endpoints or listeners come
 * and go); every FY_IDLE_POLL-th pass polls the idle interfaces too.  Waiting without burning a
 * core: every interface that can wake a sleeper gives an event fd; the worker gathers them in one
 * epoll set, which is also the fd it gives to event loops.  FERRY_WAIT=adaptive spins for a few
 * microseconds (the latency of an answer that is already on its way), then yields the core
 * (cheap when another process on the same core is about to answer), then sleeps on the fd.
 *
 * Threads.  A worker driven by one thread takes no lock: each public call tests w->mt once.
 * A multi-threaded worker (FERRY_THREAD_MODE_MULTI, FERRY_WORKER_THREAD_MULTI) or one with a
 * progress thread (FERRY_PROGRESS_THREAD) takes a recursive lock in every public call, so a
 * handler may send and a blocking call may progress; ferry_worker_wait lets it go while it
 * sleeps.  The progress thread sleeps on the worker's epoll set (waking at least every
 * FERRY_PROGRESS_THREAD_INTERVAL for timers) and runs progress passes under the lock; a thread
 * blocked in ferry_worker_wait then sleeps on a condition variable that every progress pass
 * with work broadcasts, since the progress thread, not it, consumes the fd's events.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "proto/proto_int.h"
#include "util/clock.h"

static ferry_status_t eps_grow(ferry_worker_t *w, uint32_t ncap);
static ferry_status_t threads_start(ferry_worker_t *w);
static void threads_stop(ferry_worker_t *w);

static ferry_status_t open_ifaces(ferry_worker_t *w)
{
    ferry_context_t *ctx = w->ctx;
    w->can_sleep = 1;
    for (unsigned t = 0; t < ctx->ntls; t++) {
        fy_ctx_tl_t *ctl = &ctx->tls[t];
        for (unsigned d = 0; d < ctl->ndevs && w->nifaces < FY_MAX_IFACES; d++) {
            fy_iface_t *fi = &w->ifaces[w->nifaces];
            fy_tl_iface_params_t p = {
                .device = ctl->devs[d].name,
                .am_cb = fy_am_recv_cb,
                .am_split_cb = fy_am_recv_split_cb,
                .am_arg = fi,
                .err_cb = fy_ep_tl_err_cb,
                .err_arg = fi,
                .job_key = ctx->job_key,
                .worker_uuid = w->uuid,
                .tx_copy_max = ctx->opts.max_queued / 16,
            };
            ferry_status_t st = ctl->tl->ops->iface_open(ctl->md, &p, &fi->tl_iface);
            if (st != FERRY_OK) {
                fy_warn("cannot open %s/%s: %s", ctl->tl->name, ctl->devs[d].name,
                        ferry_status_string(st));
                continue;
            }
            fi->tl = ctl->tl;
            fi->progress = ctl->tl->ops->iface_progress;
            fi->ctl = ctl;
            fi->worker = w;
            fi->index = w->nifaces;
            memset(&fi->attr, 0, sizeof(fi->attr));
            ctl->tl->ops->iface_query(fi->tl_iface, &fi->attr);
            fi->fd = ctl->tl->ops->iface_event_fd != NULL
                         ? ctl->tl->ops->iface_event_fd(fi->tl_iface)
                         : -1;
            if (fi->fd >= 0) {
                struct epoll_event ev = {.events = EPOLLIN, .data.u32 = fi->index};
                if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fi->fd, &ev) != 0) {
                    fy_warn("epoll_ctl(%s): %m", ctl->tl->name);
                    w->can_sleep = 0;
                }
            } else {
                w->can_sleep = 0;
            }
            fy_debug("worker %016llx: opened %s/%s (latency %.0f ns, bw %.1f GB/s)",
                     (unsigned long long)w->uuid, ctl->tl->name, ctl->devs[d].name,
                     fi->attr.latency_ns, fi->attr.bandwidth / 1e9);
            w->nifaces++;
        }
    }
    return w->nifaces > 0 ? FERRY_OK : FERRY_ERR_NO_DEVICE;
}

ferry_status_t ferry_worker_create(ferry_context_t *ctx, const ferry_worker_params_t *params,
                                   ferry_worker_t **worker_p)
{
    if (ctx == NULL || worker_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    *worker_p = NULL;
    uint64_t known = FERRY_WORKER_FIELD_WAIT_MODE | FERRY_WORKER_FIELD_USER_DATA |
                     FERRY_WORKER_FIELD_THREAD_MODE;
    if (params != NULL && (params->field_mask & ~known) != 0) {
        fy_error("ferry_worker_create: unknown field_mask bits 0x%llx",
                 (unsigned long long)(params->field_mask & ~known));
        return FERRY_ERR_INVALID_PARAM;
    }
    ferry_worker_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return FERRY_ERR_NO_MEMORY;
    w->ctx = ctx;
    w->rx_copy_movsb = ctx->opts.rx_copy_movsb;
    w->uuid = fy_random64();
    w->wait_mode = FERRY_WAIT_SPIN + ctx->opts.wait_mode;
    if (params != NULL && (params->field_mask & FERRY_WORKER_FIELD_WAIT_MODE) &&
        params->wait_mode != FERRY_WAIT_DEFAULT) {
        if (params->wait_mode < FERRY_WAIT_SPIN || params->wait_mode > FERRY_WAIT_BLOCK) {
            free(w);
            return FERRY_ERR_INVALID_PARAM;
        }
        w->wait_mode = params->wait_mode;
    }
    if (params != NULL && (params->field_mask & FERRY_WORKER_FIELD_USER_DATA))
        w->user_data = params->user_data;
    w->thread_mode = ctx->opts.thread_multi ? FERRY_THREAD_MODE_MULTI : FERRY_THREAD_MODE_SINGLE;
    if (params != NULL && (params->field_mask & FERRY_WORKER_FIELD_THREAD_MODE)) {
        if (params->thread_mode != FERRY_THREAD_MODE_SINGLE &&
            params->thread_mode != FERRY_THREAD_MODE_MULTI) {
            fy_error("ferry_worker_create: thread_mode %d is neither SINGLE nor MULTI",
                     (int)params->thread_mode);
            free(w);
            return FERRY_ERR_INVALID_PARAM;
        }
        if (params->thread_mode == FERRY_THREAD_MODE_MULTI)
            w->thread_mode = FERRY_THREAD_MODE_MULTI;
    }
    fy_list_init(&w->pending_eps);
    fy_queue_init(&w->completed);
    ferry_status_t st = FERRY_ERR_IO;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0)
        goto err_free;
    w->sigfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->sigfd < 0)
        goto err_epfd;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->sigfd, &ev) != 0)
        goto err_sigfd;
    if ((st = fy_hash_init(&w->by_src, 64)) != FERRY_OK)
        goto err_sigfd;
    if ((st = fy_hash_init(&w->by_peer, 64)) != FERRY_OK)
        goto err_hash1;
    if ((st = fy_hash_init(&w->waiting, 64)) != FERRY_OK)
        goto err_hash_peer;
    if ((st = fy_mpool_init(&w->ops, "ops", sizeof(fy_op_t), 64, 64, 0)) != FERRY_OK)
        goto err_hash2;
    if ((st = eps_grow(w, 64)) != FERRY_OK)
        goto err_eps;
    fy_rma_init_worker(w);
    fy_tag_init_worker(w);
    if ((st = open_ifaces(w)) != FERRY_OK)
        goto err_ifaces;
    if ((st = fy_address_pack(w)) != FERRY_OK)
        goto err_ifaces;
    if ((st = threads_start(w)) != FERRY_OK)
        goto err_ifaces;
    pthread_mutex_lock(&ctx->lock);
    ctx->nworkers++;
    pthread_mutex_unlock(&ctx->lock);
    *worker_p = w;
    return FERRY_OK;

err_ifaces:
    for (unsigned i = 0; i < w->nifaces; i++)
        w->ifaces[i].tl->ops->iface_close(w->ifaces[i].tl_iface);
    free(w->address);
err_eps:
    free(w->eps);
    free(w->free_ids);
    fy_mpool_destroy(&w->ops);
err_hash2:
    fy_hash_destroy(&w->waiting);
err_hash_peer:
    fy_hash_destroy(&w->by_peer);
err_hash1:
    fy_hash_destroy(&w->by_src);
err_sigfd:
    close(w->sigfd);
err_epfd:
    close(w->epfd);
err_free:
    free(w);
    return st;
}

void ferry_worker_destroy(ferry_worker_t *w)
{
    if (w == NULL)
        return;
    threads_stop(w);
    w->closing = 1;
    fy_listener_destroy_all(w);
    /* Close every endpoint by force: their operations complete with CANCELED. */
    for (uint32_t i = 0; i < w->eps_cap; i++)
        if (w->eps[i] != NULL)
            fy_ep_fail(w->eps[i], FERRY_ERR_CANCELED);
    fy_tag_cleanup_worker(w);
    for (int pass = 0; pass < 4; pass++)
        ferry_worker_progress(w);
    for (uint32_t i = 0; i < w->eps_cap; i++)
        if (w->eps[i] != NULL)
            fy_ep_destroy_now(w->eps[i]);
    for (unsigned i = 0; i < w->nifaces; i++)
        w->ifaces[i].tl->ops->iface_close(w->ifaces[i].tl_iface);
    /* Callbacks of operations the transports completed while closing. */
    fy_qelem_t *e;
    while ((e = fy_queue_pop(&w->completed)) != NULL) {
        fy_op_t *op = fy_container_of(e, fy_op_t, q);
        fy_op_finish(op, op->status);
    }
    fy_am_cleanup_worker(w); /* AM handlers, descriptors nobody answered */
    pthread_mutex_lock(&w->ctx->lock);
    w->ctx->nworkers--;
    pthread_mutex_unlock(&w->ctx->lock);
    free(w->eps);
    free(w->free_ids);
    free(w->address);
    fy_wireup_cache_free(w);
    fy_mpool_destroy(&w->ops);
    fy_hash_destroy(&w->waiting);
    fy_hash_destroy(&w->by_peer);
    fy_hash_destroy(&w->by_src);
    close(w->sigfd);
    close(w->epfd);
    if (w->mt) {
        pthread_cond_destroy(&w->pt_cond);
        pthread_mutex_destroy(&w->lock.mutex);
    }
    free(w);
}

/* ------------------------------------------------------------------------------------------ */
/* Endpoint table and operation objects                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Grow the endpoint table (and its free-slot stack) to ncap slots; the new ids go on the
 * stack so the lowest is taken first. */
static ferry_status_t eps_grow(ferry_worker_t *w, uint32_t ncap)
{
    ferry_ep_t **n = realloc(w->eps, ncap * sizeof(*n));
    if (n == NULL)
        return FERRY_ERR_NO_MEMORY;
    w->eps = n;
    uint32_t *f = realloc(w->free_ids, ncap * sizeof(*f));
    if (f == NULL)
        return FERRY_ERR_NO_MEMORY;
    w->free_ids = f;
    memset(n + w->eps_cap, 0, (ncap - w->eps_cap) * sizeof(*n));
    for (uint32_t id = ncap; id-- > w->eps_cap;)
        w->free_ids[w->nfree++] = id;
    w->eps_cap = ncap;
    return FERRY_OK;
}

/* A slot from the free stack: O(1), whatever the number of endpoints. */
ferry_status_t fy_worker_ep_alloc(ferry_worker_t *w, ferry_ep_t **ep_p)
{
    if (w->nfree == 0) {
        ferry_status_t st = eps_grow(w, w->eps_cap * 2);
        if (st != FERRY_OK)
            return st;
    }
    ferry_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return FERRY_ERR_NO_MEMORY;
    uint32_t id = w->free_ids[--w->nfree];
    ep->worker = w;
    ep->id = id;
    fy_queue_init(&ep->pending);
    fy_list_init(&ep->pending_link);
    fy_list_init(&ep->close_waiters);
    w->eps[id] = ep;
    *ep_p = ep;
    return FERRY_OK;
}

void fy_worker_ep_free(ferry_worker_t *w, ferry_ep_t *ep)
{
    w->eps[ep->id] = NULL;
    w->free_ids[w->nfree++] = ep->id;
    free(ep);
}

ferry_ep_t *fy_worker_ep_lookup(ferry_worker_t *w, uint32_t id)
{
    return id < w->eps_cap ? w->eps[id] : NULL;
}

fy_op_t *fy_op_get(ferry_worker_t *w, ferry_ep_t *ep, fy_op_type_t type, ferry_request_t *req)
{
    fy_op_t *op = fy_mpool_get(&w->ops);
    if (op == NULL)
        return NULL;
    fy_op_clear(op);
    op->worker = w;
    op->ep = ep;
    op->type = type;
    op->req = req;
    fy_list_init(&op->wait_link);
    if (req != NULL) {
        req->status = FERRY_INPROGRESS;
        req->priv[0] = (uint64_t)(uintptr_t)op;
    }
    return op;
}

void fy_op_put(fy_op_t *op)
{
    if (op->req != NULL)
        op->req->priv[0] = 0;
    fy_op_release(op);
    free(op->copy);
    fy_mpool_put(&op->worker->ops, op);
}

/* Complete an op now: count it off its endpoint, call the user's callback, recycle it. */
void fy_op_finish(fy_op_t *op, ferry_status_t st)
{
    ferry_request_t *req = op->req;
    ferry_ep_t *ep = op->ep;
    if (op->wait_id != 0)
        fy_hash_del(&op->worker->waiting, op->wait_id);
    fy_list_del(&op->wait_link);
    int counted = op->counted;
    const fy_op_ops_t *ops = fy_op_ops[op->type];
    fy_op_uncount_bytes(op);
    if (ops->finish != NULL && ep != NULL) {
        ops->finish(op);
        ep = op->ep;
    }
    /* A refused put, or a failed operation nobody waits for: the flush covering it reports it
     * (noted before the count drops, which may complete that flush). */
    if (ep != NULL && st < 0 && st != FERRY_ERR_CANCELED)
        ep->stats.errors++; /* ferry_ep_get_stats */
    if (counted && ep != NULL && st < 0 && (req == NULL || (ops->flags & FY_OP_F_FLUSH_ERR)))
        fy_ep_note_error(ep, st);
    if (FY_UNLIKELY(op->parent != NULL))
        fy_op_child_done(op, st);
    op->req = NULL;
    fy_op_put(op);
    if (req != NULL) {
        req->status = st;
        req->priv[0] = 0;
        if (req->cb != NULL)
            req->cb(req, st);
    } else if (st != FERRY_OK && st != FERRY_ERR_CANCELED && ep != NULL && ep->err_cb != NULL &&
               ep->state != FY_EP_FAILED) {
        fy_warn("operation without request failed on ep %u: %s", ep->id, ferry_status_string(st));
    }
    if (counted && ep != NULL)
        fy_ep_op_done(ep);
}

void fy_worker_complete_later(ferry_worker_t *w, fy_op_t *op, ferry_status_t st)
{
    op->status = st;
    fy_queue_push(&w->completed, &op->q);
}

/* ------------------------------------------------------------------------------------------ */
/* Progress and waiting                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* What a plain pass polls: the one interface with endpoints, if there is just one, on a worker
 * that takes no lock and has no listener; otherwise NULL, and every pass is a full one. */
void fy_worker_poll_plan(ferry_worker_t *w)
{
    fy_iface_t *one = NULL;
    /* (a locked worker's poll_one stays NULL and is never written: an unlocked thread reads
     * it in ferry_worker_progress) */
    if (FY_WORKER_MT(w) || w->listeners != NULL) {
        if (w->poll_one != NULL)
            w->poll_one = NULL;
        return;
    }
    for (unsigned i = 0; i < w->nifaces; i++) {
        if (w->ifaces[i].neps == 0)
            continue;
        if (one != NULL) {
            one = NULL; /* two or more: every pass is a full one */
            break;
        }
        one = &w->ifaces[i];
    }
    w->poll_one = one;
}

/* What follows the interfaces in every pass: retry what waited for resources, run deferred
 * callbacks. */
static __attribute__((noinline)) unsigned progress_after(ferry_worker_t *w)
{
    unsigned n = 0;
    if (!fy_list_is_empty(&w->pending_eps))
        n += fy_worker_progress_pending(w);
    if (!fy_queue_is_empty(&w->completed)) {
        /* Take the queue as it is: callbacks may complete more ops (they run next time). */
        fy_queue_t q = w->completed;
        if (q.head == NULL)
            q.ptail = &q.head;
        fy_queue_init(&w->completed);
        fy_qelem_t *e;
        while ((e = fy_queue_pop(&q)) != NULL) {
            fy_op_t *op = fy_container_of(e, fy_op_t, q);
            fy_op_finish(op, op->status);
            n++;
        }
    }
    return n;
}

static inline int progress_after_due(const ferry_worker_t *w)
{
    return !fy_list_is_empty(&w->pending_eps) || !fy_queue_is_empty(&w->completed);
}

/* A full pass: poll the interfaces with endpoints (every one, the FY_IDLE_POLL-th time or
 * after a wake-up) and the listeners, then what follows. */
static unsigned progress_body(ferry_worker_t *w)
{
    unsigned n = 0;
    int all = w->idle_left <= 1;
    w->idle_left = all ? FY_IDLE_POLL : w->idle_left - 1;
    for (unsigned i = 0; i < w->nifaces; i++)
        if (w->ifaces[i].neps != 0 || all)
            n += w->ifaces[i].progress(w->ifaces[i].tl_iface);
    if (FY_UNLIKELY(w->listeners != NULL))
        n += fy_listener_progress(w, all);
    if (FY_UNLIKELY(progress_after_due(w)))
        n += progress_after(w);
    return n;
}

/* A pass of a locked worker (the caller holds the lock): a pass with work wakes the threads
 * blocked in ferry_worker_wait on a worker with a progress thread. */
static unsigned progress_locked(ferry_worker_t *w)
{
    int was = w->progressing;
    w->progressing = 1;
    unsigned n = progress_body(w);
    w->progressing = was;
    if (n != 0) {
        w->pt_events++;
        if (w->pt_running)
            pthread_cond_broadcast(&w->pt_cond);
    }
    return n;
}

static __attribute__((noinline)) unsigned progress_full(ferry_worker_t *w)
{
    if (FY_LIKELY(!FY_WORKER_MT(w)))
        return progress_body(w);
    fy_worker_lock_slow(w);
    unsigned n = progress_locked(w);
    fy_worker_unlock_slow(w);
    return n;
}

/* The pass a polling loop runs most: one interface, nothing else due (poll_one is NULL on a
 * worker that takes a lock, so a multi-threaded worker or one with a progress thread costs
 * this path nothing). */
unsigned ferry_worker_progress(ferry_worker_t *w)
{
    if (FY_UNLIKELY(w == NULL))
        return 0;
    fy_iface_t *fi = w->poll_one;
    if (FY_LIKELY(fi != NULL && w->idle_left > 1)) {
        w->idle_left--;
        unsigned n = fi->progress(fi->tl_iface);
        if (FY_LIKELY(!progress_after_due(w)))
            return n;
        return n + progress_after(w);
    }
    return progress_full(w);
}

ferry_status_t ferry_worker_get_fd(ferry_worker_t *w, int *fd_p)
{
    if (w == NULL || fd_p == NULL)
        return FERRY_ERR_INVALID_PARAM;
    if (!w->can_sleep)
        return FERRY_ERR_UNSUPPORTED;
    *fd_p = w->epfd;
    return FERRY_OK;
}

static void drain_sigfd(ferry_worker_t *w)
{
    uint64_t v;
    while (read(w->sigfd, &v, sizeof(v)) == sizeof(v)) {
    }
}

static ferry_status_t arm_body(ferry_worker_t *w)
{
    if (!fy_queue_is_empty(&w->completed) || !fy_list_is_empty(&w->pending_eps))
        return FERRY_ERR_BUSY;
    for (unsigned i = 0; i < w->nifaces; i++) {
        fy_iface_t *fi = &w->ifaces[i];
        if (fi->tl->ops->iface_event_arm != NULL &&
            fi->tl->ops->iface_event_arm(fi->tl_iface) != FERRY_OK)
            return FERRY_ERR_BUSY;
    }
    return FERRY_OK;
}

ferry_status_t ferry_worker_arm(ferry_worker_t *w)
{
    if (w == NULL)
        return FERRY_ERR_INVALID_PARAM;
    if (!w->can_sleep)
        return FERRY_ERR_UNSUPPORTED;
    FY_WORKER_GUARD(w);
    return arm_body(w);
}

ferry_status_t ferry_worker_signal(ferry_worker_t *w)
{
    if (w == NULL)
        return FERRY_ERR_INVALID_PARAM;
    if (w->pt_running) { /* a waiter sleeps on the condition, not on the fd */
        fy_worker_lock_slow(w);
        w->pt_events++;
        pthread_cond_broadcast(&w->pt_cond);
        fy_worker_unlock_slow(w);
    }
    uint64_t one = 1;
    if (write(w->sigfd, &one, sizeof(one)) != sizeof(one) && errno != EAGAIN)
        return FERRY_ERR_IO;
    return FERRY_OK;
}

/* Sleep on the epoll set until something is ready or timeout_ms passes (no lock held). */
static void sleep_on_fd(ferry_worker_t *w, int timeout_ms)
{
    struct epoll_event evs[8];
    int n = epoll_wait(w->epfd, evs, 8, timeout_ms);
    for (int i = 0; i < n; i++)
        if (evs[i].data.u32 == UINT32_MAX)
            drain_sigfd(w);
}

/* Poll every interface at the next progress (after a sleep), under the lock if there is one. */
static void set_poll_all(ferry_worker_t *w)
{
    FY_WORKER_GUARD(w);
    w->idle_left = 0;
}

/* A worker with a progress thread: the thread consumes the fd's events, so a waiter sleeps on
 * pt_cond until a progress pass did something (or ferry_worker_signal), or timeout. */
static ferry_status_t wait_on_thread(ferry_worker_t *w, uint64_t deadline)
{
    ferry_status_t st = FERRY_ERR_TIMED_OUT;
    fy_worker_lock_slow(w);
    for (;;) {
        uint64_t seq = w->pt_events;
        if (progress_locked(w) != 0) {
            st = FERRY_OK;
            break;
        }
        uint64_t now = fy_time_ns();
        if (now >= deadline)
            break;
        if (w->progressing) /* called from a handler: the lock cannot be let go */
            continue;
        /* Let the lock go whole (a blocking call holds it) while sleeping on the condition. */
        unsigned depth = w->lock.depth;
        w->lock.depth = 0;
        __atomic_store_n(&w->lock.owner, 0, __ATOMIC_RELAXED);
        uint64_t until = deadline - now > FY_NSEC_PER_SEC ? now + FY_NSEC_PER_SEC : deadline;
        struct timespec ts = {(time_t)(until / FY_NSEC_PER_SEC), (long)(until % FY_NSEC_PER_SEC)};
        int rc = 0;
        while (w->pt_events == seq && rc == 0)
            rc = pthread_cond_timedwait(&w->pt_cond, &w->lock.mutex, &ts);
        __atomic_store_n(&w->lock.owner, (uintptr_t)&fy_thread_tag, __ATOMIC_RELAXED);
        w->lock.depth = depth;
        if (w->pt_events != seq) {
            st = FERRY_OK;
            break;
        }
    }
    fy_worker_unlock_slow(w);
    return st;
}

/* The calling thread lets go of the worker's lock whole, if it holds it, before it sleeps
 * (a blocking call waits inside its public entry); 0: it did not hold it. */
static unsigned lock_suspend(ferry_worker_t *w)
{
    if (FY_LIKELY(!FY_WORKER_MT(w)) ||
        __atomic_load_n(&w->lock.owner, __ATOMIC_RELAXED) != (uintptr_t)&fy_thread_tag ||
        w->progressing)
        return 0;
    unsigned depth = w->lock.depth;
    w->lock.depth = 0;
    __atomic_store_n(&w->lock.owner, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&w->lock.mutex);
    return depth;
}

static void lock_resume(ferry_worker_t *w, unsigned depth)
{
    if (depth == 0)
        return;
    pthread_mutex_lock(&w->lock.mutex);
    __atomic_store_n(&w->lock.owner, (uintptr_t)&fy_thread_tag, __ATOMIC_RELAXED);
    w->lock.depth = depth;
}

ferry_status_t ferry_worker_wait(ferry_worker_t *w, int timeout_ms)
{
    if (w == NULL)
        return FERRY_ERR_INVALID_PARAM;
    uint64_t start = fy_time_ns();
    uint64_t deadline =
        timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * FY_NSEC_PER_MSEC;
    if (FY_UNLIKELY(w->pt_running))
        return wait_on_thread(w, deadline);
    uint64_t spin_until = start + w->ctx->opts.spin_ns;
    uint64_t yield_until = spin_until + w->ctx->opts.yield_ns;
    int mode = w->wait_mode;
    if (mode == FERRY_WAIT_BLOCK)
        spin_until = yield_until = start;
    for (;;) {
        if (ferry_worker_progress(w) != 0)
            return FERRY_OK;
        uint64_t now = fy_time_ns();
        if (now >= deadline)
            return FERRY_ERR_TIMED_OUT;
        if (mode == FERRY_WAIT_SPIN || now < spin_until)
            continue;
        unsigned held;
        if (now < yield_until) {
            held = lock_suspend(w);
            sched_yield();
            lock_resume(w, held);
            continue;
        }
        if (!w->can_sleep) {
            /* Some interface cannot wake us: nap briefly instead of spinning. */
            struct timespec ts = {0, 50000};
            held = lock_suspend(w);
            nanosleep(&ts, NULL);
            lock_resume(w, held);
            continue;
        }
        ferry_status_t st = ferry_worker_arm(w);
        if (st == FERRY_ERR_BUSY) {
            set_poll_all(w);
            continue;
        }
        int ms;
        if (deadline == UINT64_MAX)
            ms = -1;
        else
            ms = (int)((deadline - now + FY_NSEC_PER_MSEC - 1) / FY_NSEC_PER_MSEC);
        /* Several threads on one worker: another may progress (and take our event) while we
         * sleep; wake now and then to look. */
        if (w->mt && (ms < 0 || ms > 1))
            ms = 1;
        held = lock_suspend(w);
        sleep_on_fd(w, ms);
        lock_resume(w, held);
        set_poll_all(w);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The lock and the progress thread                                                            */
/* ------------------------------------------------------------------------------------------ */

_Thread_local char fy_thread_tag;

void fy_worker_lock_slow(ferry_worker_t *w)
{
    uintptr_t me = (uintptr_t)&fy_thread_tag;
    if (__atomic_load_n(&w->lock.owner, __ATOMIC_RELAXED) == me) {
        w->lock.depth++;
        return;
    }
    pthread_mutex_lock(&w->lock.mutex);
    __atomic_store_n(&w->lock.owner, me, __ATOMIC_RELAXED);
    w->lock.depth = 1;
}

void fy_worker_unlock_slow(ferry_worker_t *w)
{
    if (--w->lock.depth != 0)
        return;
    __atomic_store_n(&w->lock.owner, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&w->lock.mutex);
}

/* The progress thread: progress passes under the lock while there is work; when there is
 * none, arm and sleep on the epoll set (at most FERRY_PROGRESS_THREAD_INTERVAL, for timers),
 * or nap that long where an interface cannot wake it.  Between passes it lets the lock go, so
 * the application's calls get their turn. */
static void *progress_thread(void *arg)
{
    ferry_worker_t *w = arg;
    uint64_t ns = w->ctx->opts.pt_interval_ns;
    int ms = (int)((ns + FY_NSEC_PER_MSEC - 1) / FY_NSEC_PER_MSEC);
    if (ms < 1)
        ms = 1;
    struct timespec nap = {(time_t)(ns / FY_NSEC_PER_SEC), (long)(ns % FY_NSEC_PER_SEC)};
    int woke = 0;
    fy_worker_lock_slow(w);
    while (!w->pt_stop) {
        if (woke)
            w->idle_left = 0;
        woke = 0;
        if (progress_locked(w) != 0) {
            fy_worker_unlock_slow(w);
            fy_worker_lock_slow(w);
            continue;
        }
        int armed = w->can_sleep && arm_body(w) == FERRY_OK;
        fy_worker_unlock_slow(w);
        if (armed)
            sleep_on_fd(w, ms);
        else if (!w->can_sleep)
            nanosleep(&nap, NULL);
        woke = 1;
        fy_worker_lock_slow(w);
    }
    fy_worker_unlock_slow(w);
    return NULL;
}

/* At creation: the lock when the worker is multi-threaded or gets a progress thread, and the
 * thread (FERRY_PROGRESS_THREAD: on, or auto and an interface asks for it). */
static ferry_status_t threads_start(ferry_worker_t *w)
{
    int pt = w->ctx->opts.progress_thread == FY_PT_ON;
    if (w->ctx->opts.progress_thread == FY_PT_AUTO)
        for (unsigned i = 0; i < w->nifaces; i++)
            if (w->ifaces[i].attr.caps & FY_TL_CAP_NEEDS_PROGRESS) {
                fy_debug("worker %016llx: %s needs a progress thread", (unsigned long long)w->uuid,
                         w->ifaces[i].tl->name);
                pt = 1;
            }
    if (!pt && w->thread_mode != FERRY_THREAD_MODE_MULTI)
        return FERRY_OK;
#ifdef FERRY_NO_WORKER_LOCK
    fy_error("worker: %s asked for, but this build has no worker lock (FERRY_WORKER_LOCK=OFF)",
             pt ? "a progress thread" : "the multi-threaded mode");
    return FERRY_ERR_UNSUPPORTED;
#endif
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* fy_time_ns's clock */
    if (pthread_mutex_init(&w->lock.mutex, NULL) != 0)
        return FERRY_ERR_NO_RESOURCE;
    if (pthread_cond_init(&w->pt_cond, &ca) != 0) {
        pthread_mutex_destroy(&w->lock.mutex);
        return FERRY_ERR_NO_RESOURCE;
    }
    pthread_condattr_destroy(&ca);
    w->mt = 1;
    if (!pt)
        return FERRY_OK;
    w->pt_running = 1;
    int rc = pthread_create(&w->pt, NULL, progress_thread, w);
    if (rc != 0) {
        fy_error("worker %016llx: cannot start its progress thread: %s",
                 (unsigned long long)w->uuid, strerror(rc));
        w->pt_running = 0;
        w->mt = 0;
        pthread_cond_destroy(&w->pt_cond);
        pthread_mutex_destroy(&w->lock.mutex);
        return FERRY_ERR_NO_RESOURCE;
    }
    fy_debug("worker %016llx: progress thread started", (unsigned long long)w->uuid);
    return FERRY_OK;
}

/* First thing of ferry_worker_destroy: the progress thread ends (the lock stays, unused). */
static void threads_stop(ferry_worker_t *w)
{
    if (!w->pt_running)
        return;
    fy_worker_lock_slow(w);
    w->pt_stop = 1;
    fy_worker_unlock_slow(w);
    uint64_t one = 1;
    if (write(w->sigfd, &one, sizeof(one)) != sizeof(one)) {
        /* full counter: the thread wakes anyway */
    }
    pthread_join(w->pt, NULL);
    w->pt_running = 0;
}
