/*
 * Probes for calibrating a cost model, before the object's first step: one timed copy in
 * the device backend's memory, or one RDMA write or read between this rank and a peer on
 * another node, through the MoE object's own buffers: the peer's returned-terms area (no
 * step has used it yet, and no other rank probes this peer: see sched_probe_peer), and this
 * rank's area of terms being returned.
 */
#include "sched_internal.h"

/* The most both areas hold. */
static size_t sched_probe_block(const sched_moe_t *moe)
{
    const sched_net_offsets_t *l = &moe->net.offsets;

    return UTIL_MIN(l->ret_in_bytes, l->ret_out_bytes);
}

/* Half the experts' input rows: the copy goes from one half to the other. */
static size_t sched_probe_copy_max(const sched_moe_t *moe)
{
    return (size_t)moe->geo.experts_per_rank * (size_t)moe->geo.capacity * moe->geo.row_bytes / 2;
}

size_t sched_moe_probe_max(const sched_moe_t *moe, sched_probe_t kind)
{
    switch (kind) {
    case SCHED_PROBE_COPY:
        return sched_probe_copy_max(moe);
    case SCHED_PROBE_WRITE:
        return moe->geo.num_peers > 0 ? sched_probe_block(moe) : 0;
    case SCHED_PROBE_READ:
        return moe->geo.num_peers > 0 && moe->pull_read ? sched_probe_block(moe) : 0;
    }
    return 0;
}

/* The rank with this local index on the next node: every rank probes one peer and is
 * probed by one. */
static int sched_probe_peer(const sched_moe_t *moe)
{
    const sched_geometry_t *geo = &moe->geo;
    int next = (geo->node + 1) % geo->num_nodes;

    for (int p = 0; p < geo->num_peers; ++p) {
        int r = geo->peers[p];

        if (geo->rank_node[r] == next && geo->rank_local[r] == geo->rank_local[geo->rank]) {
            return r;
        }
    }
    return geo->peers[0];
}

static strata_status_t sched_probe_net(sched_moe_t *moe, bool read, size_t bytes)
{
    int peer = sched_probe_peer(moe);
    size_t local = moe->net.mr_offset + moe->net.offsets.ret_out;
    uint64_t deadline = util_clock_now_ns() + moe->timeout_ns;
    inter_request_t *req;
    strata_status_t status;

    for (;;) {
        if (read) {
            status = inter_engine_read(moe->world.engine, sched_engine_rank(moe, peer),
                                       moe->net.mr, local,
                                       &moe->net.desc[peer], moe->net.offsets.ret_in, bytes,
                                       &req);
        } else {
            status = inter_engine_write(moe->world.engine, sched_engine_rank(moe, peer),
                                        moe->net.mr, local,
                                        &moe->net.desc[peer], moe->net.offsets.ret_in, bytes,
                                        false, 0, &req);
        }
        if (status != STRATA_ERR_BUSY || util_clock_now_ns() > deadline) {
            break;
        }
        /* The engine's requests are all in flight (the caller's own transfers on the
         * communicator): they complete and come back, with progress (ours, where waiting
         * threads drive it). */
        if (inter_engine_progress(moe->world.engine) == 0) {
            util_sleep_ns(10 * UTIL_NSEC_PER_USEC);
        }
    }
    if (status != STRATA_OK) {
        return status;
    }
    status = inter_request_wait(req, moe->timeout_ns);
    inter_request_free(req); /* the engine keeps it while it runs */
    return status;
}

strata_status_t sched_moe_probe(sched_moe_t *moe, sched_probe_t kind, size_t bytes,
                                uint64_t *ns_p)
{
    intra_moe_recv_t buffers;
    uint64_t start;
    strata_status_t status;

    if (moe->cur.state != SCHED_STEP_IDLE || moe->cur.step != 0 || bytes == 0 ||
        bytes > sched_moe_probe_max(moe, kind)) {
        UTIL_LOG_ERROR("moe: a probe of %zu bytes (at most %zu) before the first step only",
                       bytes, sched_moe_probe_max(moe, kind));
        return STRATA_ERR_INVALID;
    }
    start = util_clock_now_ns();
    if (kind == SCHED_PROBE_COPY) {
        intra_moe_buffers(moe->intra, &buffers);
        status = moe->world.device->mem_copy(buffers.x, (char *)buffers.x + bytes, bytes);
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
