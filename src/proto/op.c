/*
 * op.c - the table of operation types: what each one does when it starts (or is retried from
 * its endpoint's pending queue), what it counts against its endpoint, how it ends (normally,
 * or when its endpoint fails under it) and what it releases.
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

static const fy_op_ops_t am_ops = {.name = "am",
                                   .start = fy_am_op_start,
                                   .data = fy_am_op_data,
                                   .flags = FY_OP_F_UNQUEUE | FY_OP_F_ONE_MESSAGE};
/* A flush (or a close's) answers to its parent flush when its endpoint fails. */
static const fy_op_ops_t flush_ops = {.name = "flush",
                                      .start = fy_ep_flush_start,
                                      .fail = fy_ep_flush_sub_done,
                                      .flags = FY_OP_F_UNCOUNTED};
static const fy_op_ops_t close_ops = {.name = "close",
                                      .start = fy_ep_flush_start,
                                      .finish = fy_ep_close_finish,
                                      .fail = fy_ep_flush_sub_done,
                                      .flags = FY_OP_F_UNCOUNTED};
static const fy_op_ops_t wireup_hold_ops = {.name = "wireup-hold", .start = fy_wireup_hold};
static const fy_op_ops_t tag_recv_ops = {.name = "tag-recv", .start = op_no_start};

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
