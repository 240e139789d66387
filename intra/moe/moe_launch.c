/*
 * Launches of the intra-node MoE object: arguments checked, the launch made without
 * waiting (enqueue), and the synchronous calls of one node's step built on them.
 */
#include "moe_internal.h"

#include <inttypes.h>
#include <string.h>

static bool moe_misaligned(const void *ptr)
{
    return ((uintptr_t)ptr & 15u) != 0;
}

static strata_status_t moe_check_state(const intra_moe_t *moe, moe_state_t expected,
                                       const char *call)
{
    if (moe->state == MOE_FAILED) {
        UTIL_LOG_ERROR("intra moe: %s after a failed step; destroy the object", call);
        return STRATA_ERR_TIMEOUT;
    }
    if (moe->state != expected) {
        UTIL_LOG_ERROR("intra moe: %s out of order: every step is one dispatch, then one "
                       "combine", call);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

static strata_status_t moe_check_dispatch(const intra_moe_t *moe, const void *x,
                                          const float *x_scales, const int64_t *topk_idx,
                                          int num_tokens)
{
    const intra_moe_args_t *a = &moe->args;

    if (num_tokens < 0 || num_tokens > moe->max_tokens) {
        UTIL_LOG_ERROR("intra moe: num_tokens %d outside 0..%d", num_tokens, moe->max_tokens);
    } else if (num_tokens > 0 && (x == NULL || topk_idx == NULL)) {
        UTIL_LOG_ERROR("intra moe: dispatch of %d tokens without x or topk_idx", num_tokens);
    } else if (num_tokens > 0 && moe_misaligned(x)) {
        UTIL_LOG_ERROR("intra moe: x at %p is not 16-byte aligned", x);
    } else if (num_tokens > 0 && (a->scale_count > 0) != (x_scales != NULL)) {
        UTIL_LOG_ERROR("intra moe: x_scales must be given for fp8 tokens, and only for them");
    } else {
        return STRATA_OK;
    }
    return STRATA_ERR_INVALID;
}

static strata_status_t moe_launch(intra_moe_t *moe, intra_moe_kernel_t kernel,
                                  const intra_moe_args_t *args)
{
    strata_status_t status;

    if (moe->state == MOE_FAILED) {
        UTIL_LOG_ERROR("intra moe: a launch after a failed step; destroy the object");
        return STRATA_ERR_INTERNAL;
    }
    status = moe->device->moe_launch(moe->queue, kernel, args);

    if (status != STRATA_OK) {
        moe->state = MOE_FAILED;
    }
    return status;
}

/* all: every expert in Pull form, whatever pull_mask says (the exact receive's dispatch). */
static void moe_set_mask(intra_moe_args_t *a, const uint64_t *pull_mask, bool all)
{
    int words = (a->num_experts + 63) / 64;

    memset(a->pull_mask, all ? 0xff : 0, sizeof(a->pull_mask));
    if (pull_mask != NULL && !all) {
        memcpy(a->pull_mask, pull_mask, sizeof(uint64_t) * (size_t)words);
    }
    if (a->num_experts % 64 != 0) {
        a->pull_mask[words - 1] &= (UINT64_C(1) << (a->num_experts % 64)) - 1;
    }
    for (int w = words; w < INTRA_MOE_MASK_WORDS; ++w) {
        a->pull_mask[w] = 0;
    }
}

/* Receiving exactly: one round a step, or in rounds across nodes exactly exact_rounds,
 * each with the step's counts and each after the round before's pull_into. */
static bool moe_exact_round_valid(const intra_moe_t *moe, const intra_moe_step_t *s)
{
    int rounds = moe->args.exact_rounds;

    if (!moe->args.exact) {
        return true;
    }
    if (rounds <= 1 && (s->more_rounds || moe->rounds_open)) {
        UTIL_LOG_ERROR("intra moe: an object that receives exactly, made for one dispatch "
                       "round a step, was given round %d", s->round);
        return false;
    }
    if (rounds > 1 && (s->step_counts == NULL || s->round >= rounds ||
                       s->more_rounds != (s->round + 1 < rounds))) {
        UTIL_LOG_ERROR("intra moe: an object that receives exactly in %d rounds takes each "
                       "step in %d rounds, each with the step's counts: not round %d%s%s",
                       rounds, rounds, s->round, s->more_rounds ? " with more to come" : "",
                       s->step_counts == NULL ? " without counts" : "");
        return false;
    }
    if (moe->rounds_open && !moe->pulled_into) {
        UTIL_LOG_ERROR("intra moe: dispatch round %d before the rows of the round before were "
                       "loaded (intra_moe_enqueue_pull_into)", s->round);
        return false;
    }
    return true;
}

/* A round's place in its step: the first starts at token 0, and its own tokens and its
 * tokens numbered over the step fit the object. */
static bool moe_round_valid(const intra_moe_t *moe, const intra_moe_step_t *s)
{
    if (s->own_base < 0 || s->aug_base < 0 || s->own_base > moe->max_tokens - s->num_own ||
        s->aug_base > moe->max_tokens - s->num_own) {
        UTIL_LOG_ERROR("intra moe: a dispatch round of %d tokens from row %d (step token %d) "
                       "does not fit %d tokens", s->num_own, s->own_base, s->aug_base,
                       moe->max_tokens);
        return false;
    }
    if (!moe_exact_round_valid(moe, s)) {
        return false;
    }
    if (s->num_own > moe->args.round_tokens) {
        UTIL_LOG_ERROR("intra moe: a dispatch round of %d tokens; a round holds at most %d",
                       s->num_own, moe->args.round_tokens);
        return false;
    }
    if ((s->round > 0) != moe->rounds_open) {
        UTIL_LOG_ERROR("intra moe: dispatch round %d of a step %s", s->round,
                       moe->rounds_open ? "whose rounds are under way: not its first"
                                        : "not yet begun: its first is round 0");
        return false;
    }
    if (s->step_counts != NULL && s->aug_entry == NULL) {
        UTIL_LOG_ERROR("intra moe: a step's counts come from the network: a dispatch with "
                       "step counts needs received tokens");
        return false;
    }
    if (!moe->rounds_open && (s->own_base != 0 || s->aug_base != 0)) {
        UTIL_LOG_ERROR("intra moe: a step's first dispatch round starts at token 0, not at "
                       "row %d (step token %d)", s->own_base, s->aug_base);
        return false;
    }
    return true;
}

static bool moe_step_valid(const intra_moe_t *moe, const intra_moe_step_t *s)
{
    if (!moe_round_valid(moe, s)) {
        return false;
    }
    if (s->aug_entry == NULL) {
        return true;
    }
    if (s->num_tokens_dev == NULL || s->entry_base == NULL || s->aug_topk == NULL ||
        s->record_bytes <= 0 || s->record_bytes % 16 != 0) {
        UTIL_LOG_ERROR("intra moe: received tokens need their count, entries, expert ids and "
                       "a record size of whole 16-byte units");
        return false;
    }
    return true;
}

strata_status_t intra_moe_enqueue_dispatch(intra_moe_t *moe, const intra_moe_step_t *s)
{
    intra_moe_args_t *a = &moe->args;
    strata_status_t status;
    bool captured;

    if (moe == NULL || s == NULL) {
        UTIL_LOG_ERROR("intra moe: dispatch without an object or a step");
        return STRATA_ERR_INVALID;
    }
    status = moe_check_state(moe, MOE_EXPECT_DISPATCH, "dispatch");
    if (status == STRATA_OK) {
        status = moe_check_dispatch(moe, s->x, s->x_scales, s->topk_idx, s->num_own);
    }
    if (status == STRATA_OK && !moe_step_valid(moe, s)) {
        status = STRATA_ERR_INVALID;
    }
    if (status != STRATA_OK) {
        return status;
    }
    moe_set_mask(a, s->pull_mask, a->exact != 0);
    a->num_tokens     = s->num_own;
    a->num_own        = s->num_own;
    a->aug_base       = s->aug_base;
    a->own_base       = s->own_base;
    a->more_rounds    = s->more_rounds;
    a->later_round    = moe->rounds_open;
    a->round          = s->round;
    a->step_counts    = s->step_counts;
    a->x              = s->x;
    a->x_scales       = s->x_scales;
    a->topk_idx       = s->topk_idx;
    a->num_tokens_dev = s->num_tokens_dev;
    a->aug_base_dev   = s->aug_base_dev;
    a->entry_base     = s->entry_base;
    a->aug_entry      = s->aug_entry;
    a->aug_topk       = s->aug_topk;
    a->record_bytes   = s->record_bytes;
    /* ranks of a node that receive differently fail the step (moe_check_digests) */
    a->digest         = s->digest ^ (a->exact ? UINT64_C(0x6578616374) : 0);
    moe->num_tokens   = s->own_base + s->num_own;
    moe->step        += moe->named || moe->rounds_open ? 0 : 1;
    captured = intra_moe_capturing(moe);
    status   = moe_launch(moe, INTRA_MOE_KERNEL_DISPATCH, a);
    if (status == STRATA_OK) {
        moe->dispatches += captured ? 0 : 1; /* the kernels' count grows with each replay */
        moe->step_dispatch = moe->rounds_open ? moe->step_dispatch : moe->dispatches;
        moe->captured    = moe->captured || captured;
        moe->rounds_open = s->more_rounds;
        moe->pulled_into = false;
        moe->combined    = false;
        /* the step goes on even if this rank saw an error */
        moe->state = s->more_rounds ? MOE_EXPECT_DISPATCH : MOE_EXPECT_COMBINE;
    }
    return status;
}

strata_status_t intra_moe_enqueue_sources(intra_moe_t *moe)
{
    if (moe->args.public_src == NULL || moe->state != MOE_EXPECT_COMBINE) {
        UTIL_LOG_ERROR("intra moe: sources need the tables and a dispatch before them");
        return STRATA_ERR_INVALID;
    }
    return moe_launch(moe, INTRA_MOE_KERNEL_SOURCES, &moe->args);
}

/* The load of the round just dispatched (more_rounds and round are that round's). */
static strata_status_t moe_launch_pull_into(intra_moe_t *moe, void *x, float *x_scales,
                                            intra_moe_source_t *src)
{
    strata_status_t status;

    moe->args.into_x      = x;
    moe->args.into_scales = x_scales;
    moe->args.into_src    = src;
    status = moe_launch(moe, INTRA_MOE_KERNEL_PULL_INTO, &moe->args);
    moe->args.into_x      = NULL;
    moe->args.into_scales = NULL;
    moe->args.into_src    = NULL;
    moe->pulled_into      = status == STRATA_OK;
    return status;
}

strata_status_t intra_moe_enqueue_pull_into(intra_moe_t *moe, void *x, float *x_scales,
                                            intra_moe_source_t *src)
{
    strata_status_t status;

    if (moe == NULL || !moe->args.exact) {
        UTIL_LOG_ERROR("intra moe: pull_into needs an object that receives exactly");
        return STRATA_ERR_INVALID;
    }
    /* in rounds, after each: the dispatch expects the next round then */
    status = moe_check_state(moe, moe->rounds_open ? MOE_EXPECT_DISPATCH : MOE_EXPECT_COMBINE,
                             "pull_into");
    if (status != STRATA_OK) {
        return status;
    }
    if (moe->pulled_into || moe->dispatches == 0) {
        UTIL_LOG_ERROR("intra moe: pull_into %s", moe->pulled_into
                                                      ? "twice after one dispatch round"
                                                      : "before any dispatch");
        return STRATA_ERR_INVALID;
    }
    if (x != NULL && (moe_misaligned(x) || src == NULL || moe->args.origin_offset < 0 ||
                      (moe->args.scale_count > 0) != (x_scales != NULL))) {
        UTIL_LOG_ERROR("intra moe: pull_into needs x 16-byte aligned, src, x_scales for fp8 "
                       "tokens only, and the origins table (intra_moe_set_tables) that src "
                       "is read from");
        return STRATA_ERR_INVALID;
    }
    return moe_launch_pull_into(moe, x, x_scales, src);
}

/* The combine launch once its arguments are checked; the object expects a dispatch next.
 * Exact receive: rows nobody loaded are dropped first, so that their sources' combines
 * do not read a former step's places. */
static strata_status_t moe_launch_combine(intra_moe_t *moe, const void *expert_y,
                                          const float *topk_weights, const uint64_t *pull_mask,
                                          void *out, bool withhold)
{
    strata_status_t status = STRATA_OK;

    if (moe->args.exact && !moe->pulled_into) {
        UTIL_LOG_ERROR("intra moe: a combine with no pull_into in step %" PRIu64 ": this "
                       "rank's experts drop the step's rows", moe->step);
        status = moe_launch_pull_into(moe, NULL, NULL, NULL);
        if (status != STRATA_OK) {
            return status;
        }
    }
    moe_set_mask(&moe->args, moe->args.exact ? NULL : pull_mask, false);
    moe->args.num_tokens   = moe->num_tokens; /* every round's own tokens */
    moe->args.aug_base     = 0;
    moe->args.own_base     = 0;
    moe->args.more_rounds  = 0;
    moe->args.later_round  = 0;
    moe->args.expert_y     = expert_y;
    moe->args.topk_weights = topk_weights;
    moe->args.out          = out;
    moe->args.withhold     = withhold;
    status = moe_launch(moe, INTRA_MOE_KERNEL_COMBINE, &moe->args);
    moe->args.withhold = 0;
    if (moe->state != MOE_FAILED) {
        moe->state         = MOE_EXPECT_DISPATCH;
        moe->combined      = status == STRATA_OK;
        moe->combine_round = 0;
    }
    return status;
}

/* Whether a combine may start: a dispatch came before it, and the tables it needs are set. */
static strata_status_t moe_check_combine(intra_moe_t *moe, const char *call)
{
    strata_status_t status;

    if (moe == NULL) {
        UTIL_LOG_ERROR("intra moe: %s without an object", call);
        return STRATA_ERR_INVALID;
    }
    status = moe_check_state(moe, MOE_EXPECT_COMBINE, call);
    if (status == STRATA_OK && moe->terms_direct && moe->args.term_dst_offset < 0) {
        UTIL_LOG_ERROR("intra moe: %s of an object made for direct terms needs its "
                       "term_dst table (intra_moe_set_tables)", call);
        return STRATA_ERR_INVALID;
    }
    return status;
}

strata_status_t intra_moe_enqueue_combine(intra_moe_t *moe, const void *expert_y,
                                          const float *topk_weights, const uint64_t *pull_mask,
                                          void *out)
{
    strata_status_t status = moe_check_combine(moe, "combine");

    if (status != STRATA_OK) {
        return status;
    }
    if (expert_y == NULL || moe_misaligned(expert_y) ||
        (moe->args.term_dst_offset < 0 && moe->num_tokens > 0 &&
         (topk_weights == NULL || out == NULL || moe_misaligned(out)))) {
        /* Refused before this rank enters the combine: the state stays, so the caller can
         * retry with valid arguments while the peers wait (up to their timeout). */
        UTIL_LOG_ERROR("intra moe: combine needs expert_y, and for %d tokens topk_weights and "
                       "out, with expert_y and out 16-byte aligned", moe->num_tokens);
        return STRATA_ERR_INVALID;
    }
    return moe_launch_combine(moe, expert_y, topk_weights, pull_mask, out, false);
}

strata_status_t intra_moe_enqueue_combine_round(intra_moe_t *moe, int round)
{
    int rounds = moe == NULL ? 0 : moe->args.exact_rounds;

    strata_status_t status;

    if (rounds <= 1 || moe->state != MOE_EXPECT_DISPATCH || !moe->combined ||
        round != moe->combine_round || moe->args.term_dst_offset < 0) {
        UTIL_LOG_ERROR("intra moe: combine round %d needs an object that receives exactly in "
                       "rounds (%d), its term_dst table, its combine or abort before, and "
                       "the rounds in order (round %d next)", round, rounds,
                       moe == NULL ? 0 : moe->combine_round);
        return STRATA_ERR_INVALID;
    }
    moe->args.round       = round;
    moe->args.more_rounds = round + 1 < rounds;
    status = moe_launch(moe, INTRA_MOE_KERNEL_COMBINE_ROUND, &moe->args);
    moe->combine_round += status == STRATA_OK ? 1 : 0;
    return status;
}

strata_status_t intra_moe_enqueue_abort(intra_moe_t *moe, const void *expert_y,
                                        const uint64_t *pull_mask)
{
    strata_status_t status = moe_check_combine(moe, "abort");

    if (status != STRATA_OK) {
        return status;
    }
    if (expert_y != NULL && moe_misaligned(expert_y)) {
        UTIL_LOG_ERROR("intra moe: abort with expert_y at %p, not 16-byte aligned", expert_y);
        return STRATA_ERR_INVALID;
    }
    return moe_launch_combine(moe, expert_y, NULL, pull_mask, NULL, expert_y == NULL);
}

strata_status_t intra_moe_enqueue_reduce(intra_moe_t *moe, const uint64_t *term_src,
                                         const float *topk_weights, int first_token,
                                         int num_tokens, void *out)
{
    intra_moe_args_t args;

    if (moe == NULL || num_tokens < 0 || first_token < 0 ||
        (num_tokens > 0 && (term_src == NULL || topk_weights == NULL || out == NULL ||
                            moe_misaligned(out)))) {
        UTIL_LOG_ERROR("intra moe: reduce of %d tokens needs term addresses, topk_weights and "
                       "out, 16-byte aligned", num_tokens);
        return STRATA_ERR_INVALID;
    }
    if (num_tokens == 0) {
        return STRATA_OK;
    }
    args              = moe->args; /* shape only; the kernel reads no peer */
    args.num_tokens   = num_tokens;
    args.term_src     = term_src;
    args.topk_weights = topk_weights;
    args.out          = out;
    if (args.net.clean_idx != NULL) {
        args.net.clean_idx += (size_t)first_token * (size_t)args.topk;
    }
    return moe_launch(moe, INTRA_MOE_KERNEL_REDUCE, &args);
}

strata_status_t intra_moe_enqueue_net(intra_moe_t *moe, intra_moe_kernel_t kernel,
                                      const intra_net_args_t *net)
{
    if (kernel < INTRA_MOE_KERNEL_NET_SEND || net == NULL || net->ring == NULL) {
        UTIL_LOG_ERROR("intra moe: kernel %d is not a network kernel, or has no work ring",
                       (int)kernel);
        return STRATA_ERR_INVALID;
    }
    moe->args.net = *net; /* the node's kernels of the step see it too (moe_net_failed) */
    return moe_launch(moe, kernel, &moe->args);
}

/* --- The synchronous calls of one node's step ------------------------------------------------ */

/* The rounds of a dispatch, launched one after the other: only the first may be refused
 * (the arguments are those of the whole dispatch); a later one that cannot be launched
 * fails the object. */
static strata_status_t moe_launch_rounds(intra_moe_t *moe, intra_moe_step_t *step,
                                         int num_tokens, int rounds)
{
    strata_status_t status = STRATA_OK;

    for (int r = 0; r < rounds && status == STRATA_OK; ++r) {
        int first = (int)((int64_t)num_tokens * r / rounds);

        step->own_base    = first;
        step->aug_base    = first;
        step->num_own     = (int)((int64_t)num_tokens * (r + 1) / rounds) - first;
        step->more_rounds = r + 1 < rounds;
        step->round       = r;
        status = intra_moe_enqueue_dispatch(moe, step);
    }
    return status;
}

strata_status_t intra_moe_dispatch_rounds(intra_moe_t *moe, const void *x,
                                          const float *x_scales, const int64_t *topk_idx,
                                          int num_tokens, int rounds,
                                          const uint64_t *pull_mask, intra_moe_recv_t *recv_p)
{
    intra_moe_step_t step = {.x = x, .x_scales = x_scales, .topk_idx = topk_idx,
                             .pull_mask = pull_mask};
    strata_status_t status, copied;

    if (moe == NULL || recv_p == NULL) {
        UTIL_LOG_ERROR("intra moe: dispatch without an object or a result");
        return STRATA_ERR_INVALID;
    }
    if (rounds < 1 || rounds > moe->max_tokens) {
        UTIL_LOG_ERROR("intra moe: a dispatch in %d rounds; 1 to %d", rounds, moe->max_tokens);
        return STRATA_ERR_INVALID;
    }
    status = moe_check_dispatch(moe, x, x_scales, topk_idx, num_tokens);
    if (status == STRATA_OK && (num_tokens + rounds - 1) / rounds > moe->args.round_tokens) {
        /* the largest slice, checked before the first launch: a later round refused would
         * leave the step open */
        UTIL_LOG_ERROR("intra moe: a dispatch of %d tokens in %d round(s) has one of %d "
                       "tokens; a round holds at most %d", num_tokens, rounds,
                       (num_tokens + rounds - 1) / rounds, moe->args.round_tokens);
        status = STRATA_ERR_INVALID;
    }
    if (status == STRATA_OK) {
        status = moe_launch_rounds(moe, &step, num_tokens, rounds);
    }
    if (status != STRATA_OK) {
        return status;
    }
    status = intra_moe_synchronize(moe);
    if (moe->state == MOE_FAILED) {
        return status;
    }
    copied = moe->device->queue_read(
        moe->queue, moe->counts, moe->args.heap[moe->args.rank] + moe->args.heap_offsets.recv_count,
        sizeof(int32_t) * (size_t)moe->args.experts_per_rank);
    if (copied != STRATA_OK) {
        return copied;
    }
    *recv_p = moe->recv;
    return status;
}

strata_status_t intra_moe_dispatch(intra_moe_t *moe, const void *x, const float *x_scales,
                                   const int64_t *topk_idx, int num_tokens,
                                   const uint64_t *pull_mask, intra_moe_recv_t *recv_p)
{
    return intra_moe_dispatch_rounds(moe, x, x_scales, topk_idx, num_tokens, 1, pull_mask,
                                     recv_p);
}

strata_status_t intra_moe_combine(intra_moe_t *moe, const void *expert_y,
                                  const float *topk_weights, const uint64_t *pull_mask,
                                  void *out)
{
    strata_status_t status = intra_moe_enqueue_combine(moe, expert_y, topk_weights, pull_mask,
                                                       out);

    return status == STRATA_OK ? intra_moe_synchronize(moe) : status;
}

/* The expert-wait queue bound to stream: found, or made in a free slot (or the oldest one's,
 * whose stream is waited for first). */
static strata_status_t moe_wait_queue(intra_moe_t *moe, void *stream, intra_queue_t **queue_p)
{
    unsigned slot = MOE_WAIT_QUEUES;
    strata_status_t status;

    for (unsigned i = 0; i < MOE_WAIT_QUEUES; ++i) {
        if (moe->waits[i].queue != NULL && moe->waits[i].stream == stream) {
            *queue_p = moe->waits[i].queue;
            return STRATA_OK;
        }
        if (moe->waits[i].queue == NULL && slot == MOE_WAIT_QUEUES) {
            slot = i;
        }
    }
    if (slot == MOE_WAIT_QUEUES) {
        slot = moe->next_wait++ % MOE_WAIT_QUEUES;
        moe->device->queue_destroy(moe->waits[slot].queue);
        moe->waits[slot].queue = NULL;
    }
    status = moe->device->queue_create(1, &moe->waits[slot].queue);
    if (status == STRATA_OK) {
        status = moe->device->queue_set_stream(moe->waits[slot].queue, stream);
        if (status != STRATA_OK) {
            moe->device->queue_destroy(moe->waits[slot].queue);
            moe->waits[slot].queue = NULL;
        }
    }
    moe->waits[slot].stream = stream;
    *queue_p = moe->waits[slot].queue;
    return status;
}

strata_status_t moe_refuse_captured(void)
{
    UTIL_LOG_ERROR("moe: an expert wait on an object whose dispatch was captured in a graph: "
                   "the host cannot tell which step a replay is in; wait for the stream");
    return STRATA_ERR_UNSUPPORTED;
}

strata_status_t intra_moe_enqueue_expert_wait(intra_moe_t *moe, int e, void *stream)
{
    intra_moe_args_t a = moe->args;
    intra_queue_t *queue;
    bool capturing = false;
    strata_status_t status;

    if (e < 0 || e >= moe->args.experts_per_rank || stream == NULL || moe->dispatches == 0) {
        UTIL_LOG_ERROR("moe: a wait for local expert %d (of %d) on stream %p after %" PRIu64
                       " dispatches: it needs one of this rank's experts, a stream and a "
                       "dispatch launched", e, moe->args.experts_per_rank, stream,
                       moe->dispatches);
        return STRATA_ERR_INVALID;
    }
    if (moe->captured) {
        return moe_refuse_captured();
    }
    /* before the stream is bound to a queue, which would add a wait to a capture */
    status = moe->device->stream_capturing(stream, &capturing);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("moe: %p is no stream of the %s backend", stream, moe->device->name);
        return STRATA_ERR_INVALID;
    }
    if (capturing) {
        UTIL_LOG_ERROR("moe: an expert wait inside a stream capture: a replay would wait for "
                       "the step it was captured in");
        return STRATA_ERR_UNSUPPORTED;
    }
    status = moe_wait_queue(moe, stream, &queue);
    if (status != STRATA_OK) {
        return status;
    }
    a.wait_expert = e;
    a.wait_step   = moe->dispatches;
    return moe->device->moe_launch(queue, INTRA_MOE_KERNEL_EXPERT_WAIT, &a);
}

void intra_moe_release_waits(intra_moe_t *moe)
{
    for (unsigned i = 0; i < MOE_WAIT_QUEUES; ++i) {
        if (moe->waits[i].queue != NULL) {
            moe->device->queue_destroy(moe->waits[i].queue);
            moe->waits[i].queue = NULL;
        }
    }
}
