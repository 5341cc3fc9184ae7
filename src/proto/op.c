/*
 * op.c - the table of operation types: what each one does when it starts (or is retried from
 * its endpoint's pending queue) and what it releases when it ends.
 *
 * Every operation object names its type once, when it is made (fy_op_get), and the code that
 * moves it along calls through this table: the endpoint's queue, the worker's progress and
 * wireup never ask what an operation is.  The behaviour lives with its mechanism (am.c, rma.c,
 * rma_emu.c, tag_rndv_*.c, ep.c, wireup.c); this file only lists it, so the layer reads top
 * down: API call -> mechanism -> endpoint queue -> transport, and no mechanism calls back up
 * into a dispatcher.
 */
#include "proto/proto_int.h"

/* Types that only ever wait for an answer (the waiting table, the match lists) and are never
 * handed to a lane: reaching start() is a defect, reported rather than run. */
static ferry_status_t op_no_start(fy_op_t *op)
{
    fy_error("internal: an operation of type %d was started", (int)op->type);
    return FERRY_ERR_INVALID_PARAM;
}

static const fy_op_ops_t am_ops = {"am", fy_am_op_start, NULL};
static const fy_op_ops_t flush_ops = {"flush", fy_ep_flush_start, NULL};
static const fy_op_ops_t close_ops = {"close", fy_ep_flush_start, NULL};
static const fy_op_ops_t wireup_hold_ops = {"wireup-hold", fy_wireup_hold, NULL};
static const fy_op_ops_t tag_recv_ops = {"tag-recv", op_no_start, NULL};

const fy_op_ops_t *const fy_op_ops[FY_OP_TYPE_COUNT] = {
    [FY_OP_AM] = &am_ops,
    [FY_OP_PUT] = &fy_rma_put_op_ops,
    [FY_OP_GET] = &fy_rma_get_op_ops,
    [FY_OP_AMO] = &fy_rma_amo_op_ops,
    [FY_OP_FLUSH] = &flush_ops,
    [FY_OP_CLOSE] = &close_ops,
    [FY_OP_GET_EMU] = &fy_rma_get_emu_op_ops,
    [FY_OP_AMO_EMU] = &fy_rma_amo_emu_op_ops,
    [FY_OP_TAG_SEND] = &fy_tag_send_op_ops,
    [FY_OP_TAG_RECV] = &tag_recv_ops,
    [FY_OP_TAG_GET] = &fy_tag_get_op_ops,
    [FY_OP_WIREUP_HOLD] = &wireup_hold_ops,
};
