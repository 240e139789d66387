/*
 * Dispatch: the host's part is to check the call, settle the step's modes and launch the
 * kernels; they move every row and post every transfer (intra/kernels/net_kernels.h).
 * Across nodes, in two rounds: round one sends each peer a header with the counts and, into
 * a private slot, up to spec_tokens Push entries, so that a step whose counts fit needs no
 * round trip; in round two the receiver, knowing every count, hands each source a place in
 * its overflow area (a grant) or fetches Pull entries itself by RDMA read. Then the node's
 * dispatch takes this rank's tokens and the received ones, read where the network put
 * them, to their experts' ranks. With the streamed exchange (geo.rounds > 1) all of that
 * runs once per round, each with a slice of every rank's tokens, through areas sized for a
 * round (docs/moe.md "The streamed exchange").
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <string.h>

/* Why this rank's input cannot go out; NULL when it can. */
static const char *sched_send_problem(const sched_moe_t *moe, const sched_plan_t *plan,
                                      const void *x, const float *x_scales)
{
    if (plan == NULL || plan->moe != moe || plan->moe_serial != moe->serial) {
        return "needs a layout made by this object";
    }
    if (plan->num_tokens > 0 && (x == NULL || ((uintptr_t)x & 15u) != 0)) {
        return "needs x, 16-byte aligned";
    }
    if (plan->num_tokens > 0 && (moe->geo.scale_count > 0) != (x_scales != NULL)) {
        return "needs x_scales for fp8 tokens, and only for them";
    }
    return NULL;
}

/*
 * Inside a stream capture nothing may wait on the host, and nothing may be copied from the
 * host that a replay would need again: refuse what would, before the step starts, so that
 * the object stays usable once the capture ends.
 */
static strata_status_t sched_capture_check(sched_moe_t *moe)
{
    const sched_modes_t *m = &moe->modes;

    if (moe->stream == NULL || !intra_moe_capturing(moe->intra)) {
        return STRATA_OK;
    }
    if (moe->geo.exact) {
        UTIL_LOG_ERROR("moe: dispatch_send inside a stream capture: an object that receives "
                       "exactly waits on the host for each step's counts, which a graph "
                       "cannot replay");
        return STRATA_ERR_UNSUPPORTED;
    }
    if (m->decider != NULL) {
        UTIL_LOG_ERROR("moe: dispatch_send inside a stream capture: in adaptive mode the "
                       "owners decide each step's modes on the host, which a graph cannot "
                       "replay; use fixed modes (STRATA_MOE_MODE or pull masks) to capture");
        return STRATA_ERR_UNSUPPORTED;
    }
    if (moe->geo.num_peers > 0 &&
        (!m->uploaded_valid || memcmp(m->uploaded, m->dispatch_mask, sched_mask_bytes(moe)))) {
        UTIL_LOG_ERROR("moe: dispatch_send inside a stream capture with pull masks that "
                       "changed since the last step: their copy to the device cannot be "
                       "captured; run one step with them before capturing");
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

/* The step begins: its modes, and round one of the exchange between nodes. */
static strata_status_t sched_start_step(sched_moe_t *moe, const sched_plan_t *plan,
                                        const void *x, const float *x_scales)
{
    strata_status_t status;

    moe->cur.step     += 1;
    intra_moe_name_step(moe->intra, moe->cur.step); /* one numbering in every message */
    moe->cur.start_ns  = util_clock_now_ns();
    moe->cur.mark_ns   = moe->cur.start_ns;
    moe->cur.plan      = plan;
    moe->cur.x         = x;
    moe->cur.x_scales  = x_scales;
    moe->cur.status    = plan->had_bad_ids ? STRATA_ERR_INVALID : STRATA_OK;
    moe->cur.received_into = false;
    moe->cur.into_rows     = 0;
    memset(moe->stats.phase_ns, 0, sizeof(moe->stats.phase_ns));
    status = sched_modes_begin_step(moe);
    if (status != STRATA_OK) {
        return sched_fail(moe, status, "reading the step's modes");
    }
    if (moe->geo.num_peers > 0) {
        moe->net.args.round = 0;
        status = sched_net_prepare(moe);
        if (status == STRATA_OK) {
            status = intra_moe_enqueue_net(moe->intra, INTRA_MOE_KERNEL_NET_SEND, &moe->net.args);
        }
        if (status != STRATA_OK) {
            return sched_fail(moe, status, "sending round one");
        }
    }
    sched_phase_end(moe, STRATA_MOE_PHASE_PACK);
    moe->cur.state = SCHED_STEP_DISPATCH_SENT;
    return STRATA_OK;
}

bool sched_moe_idle(const sched_moe_t *moe)
{
    return moe->cur.state == SCHED_STEP_IDLE;
}

bool sched_moe_dispatch_pending(const sched_moe_t *moe)
{
    return moe->cur.state == SCHED_STEP_DISPATCH_SENT;
}

/*
 * The other ranks are in this step already and wait for this one: an input that cannot go
 * out makes this rank take part with no tokens (the object's own plan, emptied), so that no
 * rank ever pairs its step with another's next one.
 */
static strata_status_t sched_send_nothing(sched_moe_t *moe, const sched_plan_t **plan_p,
                                          const char *problem)
{
    strata_status_t status;

    UTIL_LOG_ERROR("moe: dispatch_send %s: this rank takes part in step %" PRIu64 " without "
                   "tokens", problem, moe->cur.step + 1);
    status = sched_plan_refill(moe, NULL, 0, plan_p);
    return status == STRATA_OK ? STRATA_OK
                               : sched_fail(moe, status, "emptying the refused step's layout");
}

strata_status_t sched_moe_dispatch_send(sched_moe_t *moe, const sched_plan_t *plan,
                                        const void *x, const float *x_scales)
{
    const char *problem;
    strata_status_t status;

    if (moe->cur.state != SCHED_STEP_IDLE) {
        return sched_refuse_mid_step(moe, "dispatch_send");
    }
    status = sched_capture_check(moe);
    if (status != STRATA_OK) {
        return status;
    }
    problem = sched_send_problem(moe, plan, x, x_scales);
    if (problem != NULL) {
        status = sched_send_nothing(moe, &plan, problem);
        if (status != STRATA_OK) {
            return status;
        }
        x        = NULL;
        x_scales = NULL;
    }
    status = sched_start_step(moe, plan, x, x_scales);
    if (status != STRATA_OK || problem == NULL) {
        return status;
    }
    moe->cur.status = STRATA_ERR_INVALID; /* combine_recv says it again */
    return STRATA_ERR_INVALID;
}

/* Across nodes: headers, grants, round two and the data; then where each entry is. */
static strata_status_t sched_exchange(sched_moe_t *moe)
{
    const char *what = "exchanging tokens between nodes";
    strata_status_t status;

    status = intra_moe_enqueue_net(moe->intra, INTRA_MOE_KERNEL_NET_RECV, &moe->net.args);
    if (status == STRATA_OK) {
        status = intra_moe_enqueue_net(moe->intra, INTRA_MOE_KERNEL_NET_INDEX, &moe->net.args);
    }
    return sched_settle(moe, status, what);
}

/* The node's dispatch of this step's tokens and those the network brought. */
static intra_moe_step_t sched_node_step(sched_moe_t *moe, const uint64_t *node_mask)
{
    const sched_plan_t *plan = moe->cur.plan;
    bool across = moe->geo.num_peers > 0;

    return (intra_moe_step_t){
        .x              = moe->cur.x,
        .x_scales       = moe->cur.x_scales,
        .topk_idx       = plan->d_node_idx,
        .num_own        = plan->num_tokens,
        .num_tokens_dev = across ? moe->net.num_aug : NULL,
        .entry_base     = across ? moe->net.area : NULL,
        .aug_entry      = across ? moe->net.aug_entry : NULL,
        .aug_topk       = across ? moe->net.aug_topk : NULL,
        .record_bytes   = (int)moe->geo.record_bytes,
        .pull_mask      = node_mask,
        .digest         = moe->modes.digest,
    };
}

/* Through the intra tier to the experts' ranks on this node, then the rows' sources. */
static strata_status_t sched_dispatch_node(sched_moe_t *moe)
{
    uint64_t node_mask[SCHED_MASK_WORDS];
    intra_moe_step_t step;
    strata_status_t status;

    sched_node_mask(moe, moe->modes.step_mask, node_mask);
    step   = sched_node_step(moe, node_mask);
    status = intra_moe_enqueue_dispatch(moe->intra, &step);
    if (status == STRATA_OK) {
        status = intra_moe_enqueue_sources(moe->intra);
    }
    /* Arguments were checked at dispatch_send: any refusal here ends the step. */
    return sched_settle(moe, status, "inside the node");
}

/* One round of a streamed dispatch: the network's (round 0's NET_SEND went out with
 * dispatch_send), then the node's, for the round's slice of every rank's tokens. */
static strata_status_t sched_dispatch_round(sched_moe_t *moe, int round,
                                            const intra_moe_step_t *whole)
{
    intra_moe_step_t step = *whole;
    strata_status_t status = STRATA_OK;

    moe->net.args.round = round;
    if (round > 0) {
        status = intra_moe_enqueue_net(moe->intra, INTRA_MOE_KERNEL_NET_SEND, &moe->net.args);
    }
    if (status == STRATA_OK) {
        status = intra_moe_enqueue_net(moe->intra, INTRA_MOE_KERNEL_NET_RECV, &moe->net.args);
    }
    if (status == STRATA_OK) {
        status = intra_moe_enqueue_net(moe->intra, INTRA_MOE_KERNEL_NET_INDEX, &moe->net.args);
    }
    sched_round_tokens(&moe->geo, round, moe->cur.plan->num_tokens, &step.own_base,
                       &step.num_own);
    step.aug_base_dev = moe->net.num_aug + 1; /* NET_RECV's count of the earlier rounds */
    step.more_rounds  = round + 1 < moe->geo.rounds;
    step.round        = round;
    step.step_counts  = moe->net.step_counts; /* NET_RECV's sum in the step's first round */
    if (status == STRATA_OK) {
        status = intra_moe_enqueue_dispatch(moe->intra, &step);
    }
    return status;
}

/* The caller's buffers of the exact receive (x NULL: the rows are dropped). */
typedef struct sched_into {
    void                *x;
    float               *x_scales;
    intra_moe_source_t  *src;
} sched_into_t;

/* Rounds [from, to) of a streamed dispatch, through the network and the node; receiving
 * exactly (into), each round's rows loaded into the caller's buffers after it, before the
 * next round's sources publish theirs. */
static strata_status_t sched_dispatch_rounds(sched_moe_t *moe, int from, int to,
                                             const sched_into_t *into)
{
    uint64_t node_mask[SCHED_MASK_WORDS];
    intra_moe_step_t whole;
    strata_status_t status = STRATA_OK;

    sched_node_mask(moe, moe->modes.step_mask, node_mask);
    whole = sched_node_step(moe, node_mask);
    for (int round = from; round < to && status == STRATA_OK; ++round) {
        status = sched_dispatch_round(moe, round, &whole);
        if (status == STRATA_OK && into != NULL) {
            status = intra_moe_enqueue_pull_into(moe->intra, into->x, into->x_scales,
                                                 into->src);
        }
    }
    return status;
}

/* The streamed exchange: every round through the network and the node, then the sources;
 * nothing waits between rounds but the kernels. Receiving exactly, the first round alone:
 * its counts size the caller's buffers, and the later rounds come with their loads
 * (sched_exact_rounds). */
static strata_status_t sched_dispatch_streamed(sched_moe_t *moe)
{
    strata_status_t status;

    status = sched_dispatch_rounds(moe, 0, moe->geo.exact ? 1 : moe->geo.rounds, NULL);
    if (status == STRATA_OK && !moe->geo.exact) {
        status = intra_moe_enqueue_sources(moe->intra);
    }
    return sched_settle(moe, status, "dispatching in rounds");
}

/* Whether the step is received exactly in rounds (its later rounds follow the counts). */
static bool sched_exact_rounds(const sched_moe_t *moe)
{
    return moe->geo.exact && moe->geo.rounds > 1;
}

/* The exact receive keeps no blocks: its recv has the counts (without a stream) alone. */
static void sched_fill_recv(sched_moe_t *moe)
{
    intra_moe_recv_t ir;

    intra_moe_buffers(moe->intra, &ir);
    if (moe->geo.exact) {
        ir.capacity = 0;
        ir.x        = NULL;
        ir.scales   = NULL;
        ir.expert_y = NULL;
    }
    moe->recv = (strata_moe_recv_t){
        .num_local_experts = ir.experts_per_rank,
        .first_expert      = sched_moe_first_expert(moe),
        .capacity          = ir.capacity,
        .row_bytes         = ir.row_bytes,
        .y_row_bytes       = moe->geo.y_row_bytes,
        .count             = moe->public_count,
        .x                 = ir.x,
        .x_scales          = ir.scales,
        .scale_stride      = ir.scale_stride,
        .src               = moe->geo.exact ? NULL : moe->public_src,
        .expert_y          = ir.expert_y,
    };
    moe->stats.tokens_per_expert = moe->public_count;
}

/* Rows sent to other nodes in the step, in round two, and the payload bytes with the terms
 * returned in combine: the kernels' per-peer counts. */
static strata_status_t sched_dispatch_stats(sched_moe_t *moe)
{
    int peers = moe->geo.num_peers;
    intra_net_peer_t ps[64];
    uint64_t rows = 0, second = 0, terms = 0, weights = 0;

    for (int first = 0; first < peers; first += 64) {
        int n = UTIL_MIN(64, peers - first);
        strata_status_t status = intra_moe_read(moe->intra, ps, moe->net.peers + first,
                                                (size_t)n * sizeof(ps[0]));

        if (status != STRATA_OK) {
            return status;
        }
        for (int i = 0; i < n; ++i) {
            rows   += (uint64_t)ps[i].step_sent;
            /* node-reduce: one partial row per token received, and our tokens' weights
             * (over the rounds: the step's counts) */
            terms  += moe->geo.node_reduce ? (uint64_t)ps[i].step_recv
                                           : (uint64_t)ps[i].num_terms;
            weights += moe->geo.node_reduce ? (uint64_t)ps[i].step_sent *
                                                  (uint64_t)moe->geo.topk * sizeof(float)
                                            : 0;
            second += (uint64_t)ps[i].step_later;
        }
    }
    moe->stats.tokens_to_nodes  = rows;
    moe->stats.tokens_round_two = second;
    moe->stats.bytes_to_nodes   = rows * moe->geo.entry_bytes + terms * moe->geo.y_row_bytes +
                                  weights;
    return STRATA_OK;
}

strata_status_t sched_moe_dispatch_recv(sched_moe_t *moe, strata_moe_recv_t *recv_p)
{
    strata_status_t status;

    if (recv_p == NULL) {
        UTIL_LOG_ERROR("moe: dispatch_recv without a result");
        return STRATA_ERR_INVALID;
    }
    if (moe->cur.state != SCHED_STEP_DISPATCH_SENT) {
        return sched_refuse_mid_step(moe, "dispatch_recv");
    }
    if (moe->geo.rounds > 1) {
        /* the rounds interleave the two phases: they count as the network's wait */
        if ((status = sched_dispatch_streamed(moe)) != STRATA_OK) {
            return status;
        }
        sched_phase_end(moe, STRATA_MOE_PHASE_DISPATCH_WAIT);
    } else {
        if (moe->geo.num_peers > 0 && (status = sched_exchange(moe)) != STRATA_OK) {
            return status;
        }
        sched_phase_end(moe, STRATA_MOE_PHASE_DISPATCH_WAIT);
        if ((status = sched_dispatch_node(moe)) != STRATA_OK) {
            return status;
        }
        sched_phase_end(moe, STRATA_MOE_PHASE_INTRA_DISPATCH);
    }
    if (moe->stream == NULL || moe->modes.decider != NULL) {
        if ((status = sched_modes_publish(moe)) != STRATA_OK) {
            return sched_fail(moe, status, "publishing the owners' modes");
        }
        sched_modes_decide(moe);
        /* in rounds, receiving exactly: after its last round (sched_rest_of_rounds) */
        if (moe->geo.num_peers > 0 && !sched_exact_rounds(moe) &&
            (status = sched_dispatch_stats(moe)) != STRATA_OK) {
            return sched_fail(moe, status, "reading the step's counts");
        }
    }
    sched_fill_recv(moe);
    moe->stats.dispatch_ns = util_clock_now_ns() - moe->cur.start_ns;
    moe->cur.state = SCHED_STEP_DISPATCHED;
    /* in rounds, receiving exactly: the counts the first round announced (the sources
     * kernel writes them after the last round) */
    if (sched_exact_rounds(moe) && moe->stream == NULL &&
        (status = sched_moe_dispatch_counts(moe, -1, moe->public_count)) != STRATA_OK) {
        return sched_fail(moe, status, "reading the step's counts");
    }
    *recv_p = moe->recv;
    status = moe->cur.status;
    if (status == STRATA_ERR_CAPACITY) {
        /* rows this rank's experts dropped (or, for other nodes' tokens, it could not
         * place) are said here; combine_recv says CAPACITY only where its own tokens'
         * results lack terms, which it finds itself */
        moe->cur.status = STRATA_OK;
    }
    return status;
}

_Static_assert(sizeof(strata_moe_source_t) == sizeof(intra_moe_source_t) &&
                   offsetof(strata_moe_source_t, slot) == offsetof(intra_moe_source_t, slot),
               "the kernels write the API's sources as their own");

/* Why the exact receive's buffers cannot take the step's rows; NULL where they can. */
static const char *sched_into_problem(const sched_moe_t *moe, const void *x,
                                      const float *x_scales, const strata_moe_source_t *src,
                                      int64_t rows, int64_t total)
{
    if (rows < total) {
        return "buffers of fewer rows than the step's counts add up to";
    }
    if (total > 0 && (x == NULL || ((uintptr_t)x & 15u) != 0 || src == NULL)) {
        return "needs x, 16-byte aligned, and src";
    }
    if (total > 0 && (moe->geo.scale_count > 0) != (x_scales != NULL)) {
        return "needs x_scales for fp8 tokens, and only for them";
    }
    return NULL;
}

/* The step's counts, summed; waits for them as dispatch_counts does. */
static strata_status_t sched_step_rows(sched_moe_t *moe, int64_t *total_p)
{
    strata_status_t status = sched_moe_dispatch_counts(moe, -1, moe->step_counts);

    *total_p = 0;
    for (int e = 0; e < moe->geo.experts_per_rank; ++e) {
        *total_p += moe->step_counts[e];
    }
    return status;
}

static strata_status_t sched_rest_of_rounds(sched_moe_t *moe, const sched_into_t *into,
                                            uint64_t start_ns);

strata_status_t sched_moe_dispatch_recv_into(sched_moe_t *moe, void *x, float *x_scales,
                                             strata_moe_source_t *src, int64_t rows)
{
    uint64_t start_ns = util_clock_now_ns();
    const char *problem;
    sched_into_t into;
    int64_t total;
    strata_status_t status;

    if (!moe->geo.exact) {
        UTIL_LOG_ERROR("moe: dispatch_recv_into needs an object that receives exactly "
                       "(params.receive); this one fills its experts' blocks");
        return STRATA_ERR_INVALID;
    }
    if (moe->cur.state != SCHED_STEP_DISPATCHED || moe->cur.received_into) {
        return sched_refuse_mid_step(moe, "dispatch_recv_into (once, after dispatch_recv)");
    }
    if (moe->stream != NULL && intra_moe_capturing(moe->intra)) {
        UTIL_LOG_ERROR("moe: dispatch_recv_into inside a stream capture: the host waits for "
                       "the step's counts, which a graph cannot replay");
        return STRATA_ERR_UNSUPPORTED;
    }
    status = sched_step_rows(moe, &total);
    if (status != STRATA_OK) {
        return status; /* TIMEOUT: the step goes on, the call may be made again */
    }
    problem = sched_into_problem(moe, x, x_scales, src, rows, total);
    if (problem != NULL) {
        /* nothing started: the rows stay published until this rank's combine */
        UTIL_LOG_ERROR("moe: dispatch_recv_into of %" PRId64 " rows into %" PRId64 ": %s",
                       total, rows, problem);
        return STRATA_ERR_INVALID;
    }
    into = (sched_into_t){total > 0 ? x : NULL, total > 0 ? x_scales : NULL,
                          (intra_moe_source_t *)src};
    status = intra_moe_enqueue_pull_into(moe->intra, into.x, into.x_scales, into.src);
    if (status == STRATA_ERR_INVALID) {
        return status; /* refused before anything started: the call may be made again */
    }
    moe->cur.received_into = status == STRATA_OK;
    moe->cur.into_rows     = status == STRATA_OK ? total : 0;
    if (status == STRATA_OK && sched_exact_rounds(moe)) {
        return sched_rest_of_rounds(moe, &into, start_ns);
    }
    return sched_settle(moe, status, "receiving the step's rows");
}

/*
 * Receiving exactly in rounds, once the first round's rows were loaded (or dropped): the
 * later rounds, each loaded into the same buffers after it (into NULL: dropped), then the
 * counts for the API, and (where dispatch_recv would) the step's statistics. The time
 * from start_ns counts in the dispatch's, as the network's wait (the rounds interleave
 * the two phases, as in dispatch_recv).
 */
static strata_status_t sched_rest_of_rounds(sched_moe_t *moe, const sched_into_t *into,
                                            uint64_t start_ns)
{
    strata_status_t status = sched_dispatch_rounds(moe, 1, moe->geo.rounds, into);
    uint64_t spent_ns;

    if (status == STRATA_OK) {
        status = intra_moe_enqueue_sources(moe->intra);
    }
    status   = sched_settle(moe, status, "receiving the step's rows in rounds");
    spent_ns = util_clock_now_ns() - start_ns;
    moe->stats.dispatch_ns += spent_ns;
    moe->stats.phase_ns[STRATA_MOE_PHASE_DISPATCH_WAIT] += spent_ns;
    if (status == STRATA_OK && (moe->stream == NULL || moe->modes.decider != NULL) &&
        (status = sched_dispatch_stats(moe)) != STRATA_OK) {
        return sched_fail(moe, status, "reading the step's counts");
    }
    return status;
}

strata_status_t sched_drop_exact_rows(sched_moe_t *moe)
{
    static const sched_into_t none = {NULL, NULL, NULL};
    strata_status_t status;

    if (!sched_exact_rounds(moe) || moe->cur.received_into) {
        return STRATA_OK; /* in one round the node's combine drops them itself */
    }
    moe->cur.received_into = true;
    UTIL_LOG_ERROR("moe: step %" PRIu64 " goes on without dispatch_recv_into: this rank's "
                   "experts drop its rows", moe->cur.step);
    status = intra_moe_enqueue_pull_into(moe->intra, NULL, NULL, NULL);
    return status == STRATA_OK ? sched_rest_of_rounds(moe, &none, util_clock_now_ns())
                               : sched_fail(moe, status, "dropping the step's rows");
}
