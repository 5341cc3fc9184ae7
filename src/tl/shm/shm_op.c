/*
 * shm_op.c - the operations an shm endpoint has outstanding (pulls, pushes, atomics answered
 * by the target, flushes), their completion, and the pull slots that make a cancelled pull
 * safe.
 *
 * Operations that complete later sit on the ep's list in issue order, so a flush completes
 * when it reaches the head; a failed or destroyed ep detaches the whole list and completes it
 * with one status.
 *
 * A pull that is cancelled (ep_destroy, iface_close, a failed peer) must not be read after
 * its completion runs: the caller owns its buffer again.  Each published pull holds a slot
 * word in our segment (shm.h, PULL SLOTS) that the receiver takes before it copies; a cancel
 * revokes the word, waiting for a copy already under way to end, before it completes.  These
 * live apart from shm_ep.c, which sends, because every path that ends an operation (an
 * answer, a cancel, a peer's death) comes through here.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "tl/shm/shm.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- operations --------------------------------------------------------------------------- */

shm_op_t *fy_shm_op_new(shm_ep_t *ep, uint8_t type, fy_tl_comp_t *comp)
{
    shm_iface_t *iface = ep->iface;
    shm_op_t *op = fy_mpool_get(&iface->op_mp);
    if (op == NULL)
        return NULL;
    op->cookie = ++iface->next_cookie;
    if (type != SHM_OP_FLUSH && fy_hash_put(&iface->ops, op->cookie, op) != FERRY_OK) {
        fy_mpool_put(&iface->op_mp, op);
        return NULL;
    }
    op->ep = ep;
    op->comp = comp;
    op->type = type;
    op->probe = 0;
    op->pull_slot = SHM_PULL_NONE;
    op->result = NULL;
    op->offset = 0;
    fy_list_add_tail(&ep->ops, &op->link);
    return op;
}

/* ---- pull slots (shm.h) ------------------------------------------------------------------- */

/* How long a cancel waits for a receiver in the middle of copying (a 1 GiB pull takes about
 * 0.1 s here); past it the slot is abandoned, with an error, rather than hang the caller. */
#define SHM_REVOKE_WAIT_NS (10ull * 1000000000ull)

/* Take a free pull slot for op and open it under a new generation: 0 when none is free. */
int fy_shm_pull_slot_get(shm_iface_t *iface, shm_op_t *op)
{
    if (FY_UNLIKELY(iface->pull_nfree == 0))
        return 0;
    op->pull_slot = iface->pull_free[--iface->pull_nfree];
    op->pull_gen = ++iface->pull_gen;
    /* relaxed: the cell's release store publishes it with the descriptor */
    __atomic_store_n(&iface->pulls[op->pull_slot], SHM_PULL_WORD(op->pull_gen, SHM_PULL_OPEN),
                     __ATOMIC_RELAXED);
    return 1;
}

/* The reader's side (another process's slot word w): take it to read (OPEN -> READING; 0 when
 * the sender revoked it: drop the message unread), let it go after the last read. */
int fy_shm_pull_take(uint64_t *w, uint64_t gen)
{
    uint64_t expect = SHM_PULL_WORD(gen, SHM_PULL_OPEN);
    return __atomic_compare_exchange_n(w, &expect, SHM_PULL_WORD(gen, SHM_PULL_READING), 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void fy_shm_pull_let_go(uint64_t *w, uint64_t gen)
{
    uint64_t expect = SHM_PULL_WORD(gen, SHM_PULL_READING);
    __atomic_compare_exchange_n(w, &expect, SHM_PULL_WORD(gen, SHM_PULL_CLOSED), 0,
                                __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

/* The receiver is done with op's slot (it answered, or the slot was never published). */
void fy_shm_pull_slot_put(shm_iface_t *iface, shm_op_t *op)
{
    if (op->pull_slot == SHM_PULL_NONE)
        return;
    iface->pull_free[iface->pull_nfree++] = (uint16_t)op->pull_slot;
    op->pull_slot = SHM_PULL_NONE;
}

/* A receiver holds the slot (READING): wait until it lets go, it dies, or the bound passes.
 * 1 when the slot is free for reuse. */
static int pull_wait_reader(shm_iface_t *iface, const shm_op_t *op, uint64_t *w)
{
    const uint64_t reading = SHM_PULL_WORD(op->pull_gen, SHM_PULL_READING);
    pid_t pid = (pid_t)op->ep->peer->addr.pid;
    iface->stats.revoke_waits++;
    uint64_t t0 = fy_time_ns(), next = t0 + 1000000;
    for (unsigned i = 1; __atomic_load_n(w, __ATOMIC_ACQUIRE) == reading; i++) {
        if (i < 4096) {
            fy_cpu_relax();
            continue;
        }
        sched_yield();
        uint64_t now = fy_time_ns();
        if (now < next)
            continue;
        next = now + 1000000;
        if (pid != getpid() && fy_shm_pid_is_dead(pid))
            return 1; /* nobody will read it any more */
        if (now - t0 > SHM_REVOKE_WAIT_NS) {
            fy_error("process %d has been copying a cancelled %zu-byte message for %llu s: "
                     "giving up the wait (its buffer may still be read)",
                     (int)pid, op->total, (unsigned long long)((now - t0) / 1000000000ull));
            return 0;
        }
    }
    return 1;
}

/* Revoke op's pull slot before a cancel completes it: from then on the receiver never reads
 * its data (it finds the slot closed and drops the message). */
static void pull_revoke(shm_iface_t *iface, shm_op_t *op)
{
    if (op->pull_slot == SHM_PULL_NONE)
        return;
    uint64_t *w = &iface->pulls[op->pull_slot];
    uint64_t expect = SHM_PULL_WORD(op->pull_gen, SHM_PULL_OPEN);
    if (!__atomic_compare_exchange_n(w, &expect, SHM_PULL_WORD(op->pull_gen, SHM_PULL_CLOSED), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
        expect == SHM_PULL_WORD(op->pull_gen, SHM_PULL_READING) &&
        !pull_wait_reader(iface, op, w)) {
        op->pull_slot = SHM_PULL_NONE; /* abandoned: never reused */
        return;
    }
    fy_shm_pull_slot_put(iface, op);
}

/* Unlink an op from its ep and the cookie table (no callback). */
static void op_unlink(shm_op_t *op)
{
    fy_list_del(&op->link);
    if (op->type != SHM_OP_FLUSH)
        fy_hash_del(&op->ep->iface->ops, op->cookie);
}

void fy_shm_op_drop(shm_op_t *op)
{
    op_unlink(op);
    fy_mpool_put(&op->ep->iface->op_mp, op);
}

void fy_shm_op_complete(shm_op_t *op, ferry_status_t status)
{
    shm_ep_t *ep = op->ep;
    shm_iface_t *iface = ep->iface;
    op_unlink(op);
    /* Flushes now at the head are complete too; take them off before any callback runs
     * (a callback may destroy the ep). */
    fy_list_t flushes;
    fy_list_init(&flushes);
    while (!fy_list_is_empty(&ep->ops)) {
        shm_op_t *f = fy_container_of(ep->ops.next, shm_op_t, link);
        if (f->type != SHM_OP_FLUSH)
            break;
        fy_list_del(&f->link);
        fy_list_add_tail(&flushes, &f->link);
    }
    fy_tl_comp_t *comp = op->comp;
    fy_mpool_put(&iface->op_mp, op);
    if (comp != NULL)
        comp->cb(comp, status);
    fy_list_t *pos;
    while ((pos = fy_list_pop_head(&flushes)) != NULL) {
        shm_op_t *f = fy_container_of(pos, shm_op_t, link);
        comp = f->comp;
        fy_mpool_put(&iface->op_mp, f);
        comp->cb(comp, FERRY_OK);
    }
}

/* Complete a list of detached ops with one status. */
void fy_shm_ops_complete_detached(shm_iface_t *iface, fy_list_t *ops, ferry_status_t status)
{
    fy_list_t *pos;
    while ((pos = fy_list_pop_head(ops)) != NULL) {
        shm_op_t *op = fy_container_of(pos, shm_op_t, link);
        fy_tl_comp_t *comp = op->comp;
        fy_mpool_put(&iface->op_mp, op);
        if (comp != NULL)
            comp->cb(comp, status);
    }
}

/* Move every op of an ep to a local list (out of the cookie table). */
void fy_shm_ep_detach_ops(shm_ep_t *ep, fy_list_t *out)
{
    fy_list_init(out);
    fy_list_t *pos;
    while ((pos = fy_list_pop_head(&ep->ops)) != NULL) {
        shm_op_t *op = fy_container_of(pos, shm_op_t, link);
        if (op->type != SHM_OP_FLUSH)
            fy_hash_del(&ep->iface->ops, op->cookie);
        pull_revoke(ep->iface, op); /* before anyone may reuse its buffer */
        fy_list_add_tail(out, &op->link);
    }
    if (ep->push_op != NULL) {
        fy_list_del(&ep->push_link);
        ep->push_op = NULL;
    }
}

void fy_shm_ep_fail(shm_ep_t *ep, ferry_status_t status)
{
    shm_iface_t *iface = ep->iface;
    fy_list_t ops;
    ep->notified = 1;
    ep->status = FERRY_ERR_NOT_CONNECTED;
    ep->blocked = SHM_EP_FAILED;
    fy_shm_ep_detach_ops(ep, &ops);
    fy_debug("shm ep to process %d failed: %s", (int)ep->peer->addr.pid,
             ferry_status_string(status));
    if (iface->super.params.err_cb != NULL)
        iface->super.params.err_cb(iface->super.params.err_arg, &ep->super, status);
    fy_shm_ops_complete_detached(iface, &ops, status);
}
