/*
 * What every half of a step uses: the stream, waiting for the kernels and sorting what they
 * found (an input error the step survives, or a failure of the object), phase times, and
 * failure.
 */
#include "sched_internal.h"

#include <inttypes.h>

strata_status_t sched_refuse_mid_step(const sched_moe_t *moe, const char *call)
{
    static const char *const finish[] = {
        [SCHED_STEP_DISPATCH_SENT] = "dispatch_send: finish it with dispatch_recv, then "
                                     "combine (or combine_send and combine_recv)",
        [SCHED_STEP_DISPATCHED]    = "dispatch_recv: finish it with combine (or "
                                     "combine_send and combine_recv)",
        [SCHED_STEP_COMBINE_SENT]  = "combine_send: finish it with combine_recv",
    };

    if (moe->cur.state == SCHED_STEP_FAILED) {
        UTIL_LOG_ERROR("moe: %s after a failed step; destroy the object", call);
        return STRATA_ERR_PEER_FAILED;
    }
    if (moe->cur.state == SCHED_STEP_IDLE) {
        UTIL_LOG_ERROR("moe: %s out of order: no step is in progress (a step is "
                       "dispatch_send, dispatch_recv, combine_send, combine_recv)", call);
    } else {
        UTIL_LOG_ERROR("moe: %s refused: step %" PRIu64 " is in progress after its %s, or "
                       "end it without results with abort_step", call, moe->cur.step,
                       finish[moe->cur.state]);
    }
    return STRATA_ERR_INVALID;
}

strata_status_t sched_moe_set_stream(sched_moe_t *moe, void *stream)
{
    strata_status_t status;

    if (moe->cur.state != SCHED_STEP_IDLE) {
        return sched_refuse_mid_step(moe, "set_stream (the stream changes between steps)");
    }
    status = intra_moe_set_stream(moe->intra, stream);
    if (status == STRATA_OK) {
        moe->stream = stream;
    }
    return status;
}

strata_status_t sched_drain(sched_moe_t *moe, const char *what)
{
    strata_status_t status = intra_moe_synchronize(moe->intra);

    if (intra_moe_status_soft(status)) {
        moe->deferred = moe->deferred != STRATA_OK ? moe->deferred : status;
        return STRATA_OK;
    }
    return status == STRATA_OK ? STRATA_OK
                               : sched_fail(moe, sched_intra_failure(moe, status), what);
}

/* Expert waits on streams that ended at their bound since the last synchronize: what was
 * queued behind them may have read incomplete rows (the step itself went on). */
static strata_status_t sched_expired_waits(sched_moe_t *moe)
{
    uint64_t expired = intra_moe_waits_expired(moe->intra);

    if (expired == moe->waits_expired) {
        return STRATA_OK;
    }
    UTIL_LOG_ERROR("moe: %" PRIu64 " expert waits on streams (strata_moe_expert_wait_stream) "
                   "ended at their bound before their expert was complete: the work queued "
                   "behind them may have read incomplete rows", expired - moe->waits_expired);
    moe->waits_expired = expired;
    return STRATA_ERR_TIMEOUT;
}

strata_status_t sched_moe_synchronize(sched_moe_t *moe)
{
    strata_status_t status;

    if (moe->cur.state == SCHED_STEP_FAILED) {
        return STRATA_ERR_PEER_FAILED;
    }
    if (intra_moe_capturing(moe->intra)) {
        UTIL_LOG_ERROR("moe: synchronize while the object's stream is being captured: "
                       "nothing can wait for a capture; end it first");
        return STRATA_ERR_UNSUPPORTED;
    }
    status = sched_drain(moe, "in the device's work");
    if (status == STRATA_OK) {
        status        = moe->deferred;
        moe->deferred = STRATA_OK;
    }
    return status == STRATA_OK ? sched_expired_waits(moe) : status;
}

strata_status_t sched_launched(sched_moe_t *moe, strata_status_t status, const char *what)
{
    return status == STRATA_OK || status == STRATA_ERR_INVALID ? status
                                                               : sched_fail(moe, status, what);
}

strata_status_t sched_synchronize(sched_moe_t *moe, const char *what)
{
    strata_status_t status;

    if (moe->stream != NULL && moe->modes.decider == NULL) {
        return STRATA_OK; /* stream-ordered: errors surface at strata_moe_synchronize */
    }
    status = intra_moe_synchronize(moe->intra);
    if (intra_moe_status_soft(status)) {
        if (moe->cur.status == STRATA_OK) {
            moe->cur.status = status;
        }
        return STRATA_OK;
    }
    return status == STRATA_OK ? STRATA_OK
                               : sched_fail(moe, sched_intra_failure(moe, status), what);
}

void sched_phase_end(sched_moe_t *moe, strata_moe_phase_t phase)
{
    uint64_t now = util_clock_now_ns();

    moe->stats.phase_ns[phase] = now - moe->cur.mark_ns;
    moe->cur.mark_ns = now;
}

/* The global rank of local rank `local` of this rank's node, -1 if none. */
static int sched_rank_of_local(const sched_moe_t *moe, int local)
{
    const sched_geometry_t *geo = &moe->geo;

    for (int r = 0; r < geo->world_size; ++r) {
        if (geo->rank_node[r] == geo->node && geo->rank_local[r] == local) {
            return r;
        }
    }
    return -1;
}

/* " while waiting for rank R (node N)" where the kernels say whom a failed wait was for. */
static void sched_waited_for(const sched_moe_t *moe, char *text, size_t len)
{
    bool local = false;
    int rank = moe->intra != NULL ? intra_moe_waited_for(moe->intra, &local) : -1;

    if (rank >= 0 && local) {
        rank = sched_rank_of_local(moe, rank);
    }
    text[0] = '\0';
    if (rank >= 0 && rank < moe->geo.world_size) {
        snprintf(text, len, " while waiting for rank %d (node %d)", rank,
                 moe->geo.rank_node[rank]);
    }
}

/* " (failed: rank R of node N, ...)": the ranks the engine holds failed, "" if none; the
 * first few, since survivors that leave early show up too. */
static void sched_failed_ranks(const sched_moe_t *moe, char *text, size_t len)
{
    size_t used = 0;
    int listed = 0, more = 0;

    text[0] = '\0';
    for (int r = 0; r < moe->geo.world_size; ++r) {
        if (!sched_peer_failed(moe, r)) {
            continue;
        }
        if (listed == 4 || used >= len) {
            more++;
            continue;
        }
        used += (size_t)snprintf(text + used, len - used, "%s rank %d of node %d",
                                 listed++ == 0 ? " (failed:" : ",", r, moe->geo.rank_node[r]);
    }
    if (listed > 0 && used < len) {
        snprintf(text + used, len - used, more > 0 ? " and %d more)" : ")", more);
    }
}

strata_status_t sched_fail(sched_moe_t *moe, strata_status_t status, const char *what)
{
    char waited[64], failed[160];

    sched_waited_for(moe, waited, sizeof(waited));
    sched_failed_ranks(moe, failed, sizeof(failed));
    UTIL_LOG_ERROR("moe: step %" PRIu64 " failed %s%s: %s%s; the object can only be destroyed",
                   moe->cur.step, what, waited, strata_status_string(status), failed);
    moe->cur.state = SCHED_STEP_FAILED;
    return status;
}

strata_status_t sched_intra_failure(sched_moe_t *moe, strata_status_t status)
{
    uint64_t deadline = util_clock_now_ns() + moe->world.peer_timeout_ns;

    if (status != STRATA_ERR_TIMEOUT) {
        return status;
    }
    do {
        for (int r = 0; r < moe->world.world_size; ++r) {
            if (sched_peer_failed(moe, r)) {
                UTIL_LOG_ERROR("moe: rank %d failed during step %" PRIu64, r, moe->cur.step);
                return STRATA_ERR_PEER_FAILED;
            }
        }
        util_sleep_ns(UTIL_NSEC_PER_MSEC * 10);
    } while (util_clock_now_ns() < deadline);
    return status;
}

strata_status_t sched_settle(sched_moe_t *moe, strata_status_t launched, const char *what)
{
    return launched == STRATA_OK ? sched_synchronize(moe, what)
                                 : sched_fail(moe, launched, what);
}
