/*
 * Probes for calibrating a cost model, before the object's first step: one timed copy in
 * the device backend's memory, or one RDMA write or read between this rank and a peer on
 * another node, through the MoE object's own buffers (this rank's returned-terms block at
 * the peer, which only this rank writes, and this rank's outgoing terms area).
 */
#include "sched_internal.h"

static size_t sched_probe_block(const sched_moe_t *moe)
{
    return (size_t)moe->params.max_tokens * (size_t)moe->params.topk * moe->y_row_bytes;
}

size_t sched_moe_probe_max(const sched_moe_t *moe, sched_probe_t kind)
{
    switch (kind) {
    case SCHED_PROBE_COPY:
        return (size_t)moe->max_aug * moe->row_bytes / 2;
    case SCHED_PROBE_WRITE:
        return moe->num_peers > 0 ? sched_probe_block(moe) : 0;
    case SCHED_PROBE_READ:
        return moe->num_peers > 0 && moe->pull_read ? sched_probe_block(moe) : 0;
    }
    return 0;
}

/* The rank with this local index on the next node, so that no rank is probed by all. */
static int sched_probe_peer(const sched_moe_t *moe)
{
    const sched_moe_world_t *w = &moe->world;
    int next = (w->rank_node[w->rank] + 1) % w->num_nodes;

    for (int p = 0; p < moe->num_peers; ++p) {
        int r = moe->peers[p];

        if (w->rank_node[r] == next && w->rank_local[r] == w->rank_local[w->rank]) {
            return r;
        }
    }
    return moe->peers[0];
}

static strata_status_t sched_probe_net(sched_moe_t *moe, bool read, size_t bytes)
{
    int peer = sched_probe_peer(moe);
    inter_request_t *req;
    strata_status_t status;

    if (read) {
        status = inter_engine_read(moe->world.engine, peer, moe->net_mr, moe->net_layout.ret_out,
                                   &moe->net_desc[peer], sched_ret_in_at(moe, peer), bytes, &req);
    } else {
        status = inter_engine_write(moe->world.engine, peer, moe->net_mr,
                                    moe->net_layout.ret_out, &moe->net_desc[peer],
                                    sched_ret_in_at(moe, peer), bytes, false, 0, &req);
    }
    if (status != STRATA_OK) {
        return status;
    }
    status = inter_request_wait(req, moe->timeout_ns);
    if (status != STRATA_ERR_TIMEOUT) {
        inter_request_free(req);
    } else {
        sched_keep_request(moe, req); /* still running: the object's destroy waits for it */
    }
    return status;
}

strata_status_t sched_moe_probe(sched_moe_t *moe, sched_probe_t kind, size_t bytes,
                                uint64_t *ns_p)
{
    uint64_t start;
    strata_status_t status;

    if (moe->state != SCHED_STEP_IDLE || moe->step != 0 || bytes == 0 ||
        bytes > sched_moe_probe_max(moe, kind)) {
        UTIL_LOG_ERROR("moe: a probe of %zu bytes (at most %zu) before the first step only",
                       bytes, sched_moe_probe_max(moe, kind));
        return STRATA_ERR_INVALID;
    }
    start = util_clock_now_ns();
    if (kind == SCHED_PROBE_COPY) {
        status = moe->world.device->mem_copy(moe->aug_x, moe->aug_x + bytes, bytes);
    } else {
        status = sched_probe_net(moe, kind == SCHED_PROBE_READ, bytes);
    }
    if (status != STRATA_OK) {
        /* An operation may still be in flight: the buffers go only when it cannot be. */
        return sched_fail(moe, status, "probing the network for calibration");
    }
    *ns_p = util_clock_now_ns() - start;
    return STRATA_OK;
}
