/*
 * What the host learns of a dispatch before it ends: each local expert's completion (its
 * rows all landed) and the step's counts (the rows each local expert was sent), both marked
 * by the node's dispatch kernels in mapped host memory (intra/moe). The host waits by
 * polling those marks, bounded, and watching the engine's failure word meanwhile.
 */
#include "sched_internal.h"

/* What a wait polls for: local expert `expert`'s mark (its row count into out[0]), or the
 * step's counts (into out[0..experts_per_rank)). */
typedef struct sched_mark {
    bool     counts;
    int      expert;
    int32_t *out;
} sched_mark_t;

static strata_status_t sched_mark_ready(const sched_moe_t *moe, const sched_mark_t *mark,
                                        bool *ready_p)
{
    return mark->counts ? intra_moe_counts_ready(moe->intra, ready_p, mark->out)
                        : intra_moe_expert_ready(moe->intra, mark->expert, ready_p, mark->out);
}

/* Whether a step's node dispatch was launched whose marks can be waited for. */
static strata_status_t sched_mark_wait_check(const sched_moe_t *moe, const char *call)
{
    if (moe->cur.state == SCHED_STEP_FAILED) {
        return sched_refuse_mid_step(moe, call);
    }
    if (moe->cur.state == SCHED_STEP_DISPATCH_SENT ||
        intra_moe_dispatches(moe->intra) == 0) {
        UTIL_LOG_ERROR("moe: %s before dispatch_recv: it launches the node's dispatch (on "
                       "a stream it returns without waiting); call it first", call);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

/* A rank failed during the wait: the kernels end within their bounds and say how; where
 * they marked what was waited for first, it stands all the same. */
static strata_status_t sched_mark_after_failure(sched_moe_t *moe, const sched_mark_t *mark,
                                                const char *what)
{
    strata_status_t status = sched_drain(moe, what);
    bool ready = false;

    if (status == STRATA_OK) {
        status = sched_mark_ready(moe, mark, &ready);
    }
    if (status == STRATA_OK && !ready) {
        status = sched_fail(moe, STRATA_ERR_PEER_FAILED, what);
    }
    return status;
}

/* Poll the mark until it is set, the bound passes (TIMEOUT: the step goes on), or a rank
 * fails. */
static strata_status_t sched_wait_mark(sched_moe_t *moe, const sched_mark_t *mark,
                                       int64_t timeout_ns, const char *call, const char *what)
{
    uint64_t bound = timeout_ns < 0 ? moe->timeout_ns : (uint64_t)timeout_ns;
    uint64_t start = util_clock_now_ns();
    strata_status_t status = sched_mark_wait_check(moe, call);

    for (uint32_t polls = 0; status == STRATA_OK; ++polls) {
        bool ready;

        status = sched_mark_ready(moe, mark, &ready);
        if (status != STRATA_OK || ready) {
            return status;
        }
        if (sched_any_rank_failed(moe)) {
            return sched_mark_after_failure(moe, mark, what);
        }
        if (util_clock_now_ns() - start >= bound) {
            return STRATA_ERR_TIMEOUT;
        }
        util_sleep_ns(polls < 1000 ? 0 : UTIL_NSEC_PER_USEC * 20);
    }
    return status;
}

strata_status_t sched_moe_expert_wait(sched_moe_t *moe, int expert, int64_t timeout_ns,
                                      int32_t *rows_p)
{
    sched_mark_t mark = {.expert = expert, .out = rows_p};

    if (rows_p == NULL) {
        UTIL_LOG_ERROR("moe: expert_wait without a place for the row count");
        return STRATA_ERR_INVALID;
    }
    *rows_p = 0;
    return sched_wait_mark(moe, &mark, timeout_ns, "expert_wait",
                           "waiting for an expert's rows");
}

strata_status_t sched_moe_expert_wait_stream(sched_moe_t *moe, int expert, void *stream)
{
    strata_status_t status = sched_mark_wait_check(moe, "expert_wait_stream");

    if (status == STRATA_OK) {
        status = intra_moe_enqueue_expert_wait(moe->intra, expert, stream);
    }
    return status;
}

strata_status_t sched_moe_dispatch_counts(sched_moe_t *moe, int64_t timeout_ns,
                                          int32_t *counts)
{
    sched_mark_t mark = {.counts = true, .out = counts};

    if (counts == NULL) {
        UTIL_LOG_ERROR("moe: dispatch_counts without a place for the counts");
        return STRATA_ERR_INVALID;
    }
    for (int e = 0; e < moe->geo.experts_per_rank; ++e) {
        counts[e] = 0;
    }
    return sched_wait_mark(moe, &mark, timeout_ns, "dispatch_counts",
                           "waiting for the step's counts");
}
