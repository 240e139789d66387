/*
 * The node's MoE dispatch, and the sources of the rows it delivered: every rank plays both
 * roles at once, source of its tokens and owner of its experts. Push: the source claims a
 * slot at the owner and writes the row; Pull: the source publishes, the owner loads.
 */
#ifndef STRATA_INTRA_MOE_DISPATCH_H
#define STRATA_INTRA_MOE_DISPATCH_H

#include "moe_common.h"

/* Push one (token, k) row into the owner's next free slot, or report the overflow. */
KERNEL_FN void moe_push_row(const intra_moe_args_t *a, int token, int k, int expert,
                            kernel_grid_t g)
{
    KERNEL_SHARED int32_t row;
    int owner = expert / a->experts_per_rank, local = expert % a->experts_per_rank;
    int32_t *row_slot = MOE_AT(a, a->rank, row_slot, int32_t);
    size_t index = (size_t)local * (size_t)a->capacity;

    if (KERNEL_LEADER(g)) {
        uint32_t claimed = kernel_atomic_add_u32(MOE_AT(a, owner, counter, uint32_t) + local, 1);

        row = claimed < (uint32_t)a->capacity ? (int32_t)claimed : -1;
        row_slot[token * a->topk + k] = row;
        if (row < 0) {
            moe_report(&moe_control(a, a->rank)->dispatch_status, INTRA_MOE_KERNEL_CAPACITY,
                       expert, token, k, (int64_t)claimed + 1);
        } else {
            intra_moe_source_t src = {a->rank, token, k};
            MOE_AT(a, owner, recv_src, intra_moe_source_t)[index + (size_t)row] = src;
        }
    }
    kernel_block_sync();
    if (row >= 0) {
        index += (size_t)row;
        moe_copy_token(a, MOE_AT(a, owner, recv_x, char) + index * (size_t)a->row_bytes,
                       moe_scales_at(a, MOE_AT(a, owner, recv_scales, char), index,
                                     (size_t)a->scale_stride),
                       moe_token_row(a, token), moe_token_scales(a, token), g);
        kernel_fence_system(); /* this thread's part of the row, before it counts as landed */
    }
    kernel_block_sync(); /* row is reused by the next call */
    if (row >= 0 && KERNEL_LEADER(g)) {
        kernel_atomic_add_u32(MOE_AT(a, owner, landed, uint32_t) + local, 1);
    }
}

/* Validate (token, k)'s expert id and record it in route; -1 for none or invalid. */
KERNEL_FN int moe_route(const intra_moe_args_t *a, int token, int k, kernel_grid_t g)
{
    int64_t expert = moe_token_expert(a, token, k);

    if (expert < -1 || expert >= a->num_experts) {
        if (KERNEL_LEADER(g)) {
            moe_report(&moe_control(a, a->rank)->dispatch_status, INTRA_MOE_KERNEL_BAD_EXPERT,
                       (int32_t)(expert < INT32_MIN ? INT32_MIN : expert > INT32_MAX ? INT32_MAX
                                                                                     : expert),
                       token, k, 0);
        }
        expert = -1;
    }
    if (KERNEL_LEADER(g)) {
        MOE_AT(a, a->rank, route, int32_t)[token * a->topk + k] = (int32_t)expert;
        if (expert < 0) {
            MOE_AT(a, a->rank, row_slot, int32_t)[token * a->topk + k] = -1;
        }
    }
    return (int)expert;
}

/* Passes of the source's sends: Push rows go out by the owners' local expert index, the
 * first experts of every owner first, so that they complete early (moe_watch_experts). */
#define INTRA_MOE_SEND_PASSES 8

KERNEL_FN int moe_send_passes(const intra_moe_args_t *a)
{
    return a->experts_per_rank < INTRA_MOE_SEND_PASSES ? a->experts_per_rank
                                                       : INTRA_MOE_SEND_PASSES;
}

KERNEL_FN int moe_send_pass(const intra_moe_args_t *a, int expert, int passes)
{
    return expert % a->experts_per_rank * passes / a->experts_per_rank;
}

/* Source role, one pass over the tokens: push the rows of Push experts whose local index
 * falls in this pass; the first pass also validates and records every expert id and
 * publishes the rows Pull experts need. Block 0 meanwhile marks this rank's experts that
 * are complete. */
KERNEL_FN void moe_dispatch_pass(const intra_moe_args_t *a, int num_tokens, int pass,
                                 uint64_t step, kernel_grid_t g)
{
    const int32_t *route = MOE_AT(a, a->rank, route, int32_t);
    int passes = moe_send_passes(a), base = moe_aug_base(a);

    for (int i = (int)g.block; i < num_tokens; i += (int)g.num_blocks) {
        int t = base + i, published = 0; /* numbered over the step */

        for (int k = 0; k < a->topk; ++k) {
            int expert = pass == 0 ? moe_route(a, t, k, g) : route[t * a->topk + k];

            if (expert < 0) {
                continue;
            }
            if (!moe_is_pull(a, expert)) {
                if (moe_send_pass(a, expert, passes) == pass) {
                    moe_push_row(a, t, k, expert, g);
                }
            } else if (pass == 0 && !published) {
                size_t row = (size_t)i; /* the round's own place for it */
                moe_copy_token(a, MOE_AT(a, a->rank, send_x, char) + row * (size_t)a->row_bytes,
                               moe_scales_at(a, MOE_AT(a, a->rank, send_scales, char), row,
                                             (size_t)a->scale_stride),
                               moe_token_row(a, t), moe_token_scales(a, t), g);
                published = 1;
            }
        }
        if (g.block == 0 && KERNEL_LEADER(g)) {
            moe_watch_experts(a, step);
        }
    }
    kernel_block_sync(); /* the first pass's route entries, for the block's next ones */
}

/* Source role, one thread: how many rows each expert of the node gets from this rank in
 * this round, and the CSR of (token, k) entries per Pull expert, for the owners (tokens
 * numbered over the step: entry token * topk + k). The round's lists lie from the place
 * of its first entry on, so that each round's stay until the step ends; the exact receive
 * in rounds keeps each round's offsets too, for its combine. */
KERNEL_FN void moe_build_pull_lists(const intra_moe_args_t *a, int num_tokens)
{
    int32_t *offset = MOE_AT(a, a->rank, pull_offset, int32_t);
    int32_t *cursor = MOE_AT(a, a->rank, pull_cursor, int32_t);
    int32_t *entry  = MOE_AT(a, a->rank, pull_entry, int32_t);
    int32_t *sent   = MOE_AT(a, a->rank, sent_count, int32_t);
    int entries = num_tokens * a->topk, first = moe_aug_base(a) * a->topk;

    offset[0] = first;
    for (int e = 0; e < a->num_experts; ++e) {
        offset[e + 1] = 0;
        sent[e]       = 0;
    }
    for (int i = first; i < first + entries; ++i) {
        int64_t e = moe_token_expert(a, i / a->topk, i % a->topk);
        if (e >= 0 && e < a->num_experts) {
            ++sent[e];
            offset[e + 1] += moe_is_pull(a, (int)e);
        }
    }
    for (int e = 0; e < a->num_experts; ++e) {
        offset[e + 1] += offset[e];
        cursor[e] = offset[e];
    }
    for (int i = first; i < first + entries; ++i) {
        int64_t e = moe_token_expert(a, i / a->topk, i % a->topk);
        if (e >= 0 && e < a->num_experts && moe_is_pull(a, (int)e)) {
            entry[cursor[e]++] = i;
        }
    }
    if (a->round < a->exact_rounds) {
        int32_t *kept = moe_round_offsets(a, a->rank, a->round);

        for (int e = 0; e <= a->num_experts; ++e) {
            kept[e] = offset[e];
        }
    }
}

/* Rows source published for local expert `local` (read after its flag). */
KERNEL_FN int moe_pull_count(const intra_moe_args_t *a, int source, int local)
{
    const int32_t *offset = MOE_AT(a, source, pull_offset, int32_t);
    int expert = a->rank * a->experts_per_rank + local;

    return offset[expert + 1] - offset[expert];
}

/* Source role, one thread, in a step's first round across nodes in rounds: the rows this
 * rank sends each expert of the node over the step, published with the round's counts. */
KERNEL_FN void moe_publish_step_counts(const intra_moe_args_t *a)
{
    int32_t *step_sent = MOE_AT(a, a->rank, step_sent, int32_t);

    if (a->step_counts == 0 || a->later_round || !a->more_rounds) {
        return;
    }
    for (int e = 0; e < a->num_experts; ++e) {
        step_sent[e] = a->step_counts[e];
    }
}

/* Source role, one thread: the counts out to every owner, before any row. */
KERNEL_FN void moe_publish_counts(const intra_moe_args_t *a, uint64_t step)
{
    kernel_fence_system(); /* the counts, before the flags that announce them */
    for (int owner = 0; owner < a->num_ranks; ++owner) {
        kernel_store_release_u64(&moe_control(a, owner)->counts_flag[a->rank], step);
    }
}

/* Owner role, after its block loaded a row of Pull expert `local`: count it as landed
 * (block 0 marks the expert complete, moe_watch_experts). */
KERNEL_FN void moe_pull_landed(const intra_moe_args_t *a, int local, uint64_t step,
                               kernel_grid_t g)
{
    kernel_fence_system(); /* this thread's part of the row */
    kernel_block_sync();
    if (KERNEL_LEADER(g)) {
        kernel_atomic_add_u32(MOE_AT(a, a->rank, landed, uint32_t) + local, 1);
        if (g.block == 0) {
            moe_watch_experts(a, step);
        }
    }
}

/* Owner role: copy the row (and scales) source published for its token `token` to dst;
 * source_base: the source's aug_base this round (where its send_x rows start). */
KERNEL_FN void moe_load_published(const intra_moe_args_t *a, int source, int64_t source_base,
                                  int token, char *dst, float *dst_scales, kernel_grid_t g)
{
    size_t at = (size_t)(token - source_base);

    moe_copy_token(a, dst, dst_scales,
                   MOE_AT(a, source, send_x, char) + at * (size_t)a->row_bytes,
                   moe_scales_at(a, MOE_AT(a, source, send_scales, char), at,
                                 (size_t)a->scale_stride),
                   g);
}

/* Owner role: load one published row into slot `row`, or tell the source it was dropped;
 * source_base: the source's aug_base this round (where its send_x rows start). */
KERNEL_FN void moe_pull_row(const intra_moe_args_t *a, int source, int64_t source_base,
                            int local, int index, int row, uint64_t step, kernel_grid_t g)
{
    int expert = a->rank * a->experts_per_rank + local;
    int32_t entry = MOE_AT(a, source, pull_entry, int32_t)
                        [MOE_AT(a, source, pull_offset, int32_t)[expert] + index];
    int token = entry / a->topk, k = entry % a->topk;
    size_t slot = (size_t)local * (size_t)a->capacity + (size_t)row;

    if (KERNEL_LEADER(g)) {
        MOE_AT(a, source, row_slot, int32_t)[entry] = row < a->capacity ? row : -1;
    }
    if (row >= a->capacity) {
        return; /* reported once per expert by the last block */
    }
    if (KERNEL_LEADER(g)) {
        intra_moe_source_t src = {source, token, k};
        MOE_AT(a, a->rank, recv_src, intra_moe_source_t)[slot] = src;
    }
    moe_load_published(a, source, source_base, token,
                       MOE_AT(a, a->rank, recv_x, char) + slot * (size_t)a->row_bytes,
                       moe_scales_at(a, MOE_AT(a, a->rank, recv_scales, char), slot,
                                     (size_t)a->scale_stride),
                       g);
    moe_pull_landed(a, local, step, g);
}

/* Every thread of the block: a word of this rank's control block reached the step (0, and
 * a report, if it never does); `who`: the rank it stands for. */
KERNEL_FN int moe_block_wait(const intra_moe_args_t *a, const uint64_t *word, uint64_t step,
                             int who, kernel_grid_t g)
{
    KERNEL_SHARED int ok;

    if (KERNEL_LEADER(g)) {
        ok = moe_wait_word(a, word, step, who, &moe_control(a, a->rank)->dispatch_status, 0,
                           kernel_timer());
        kernel_fence_acquire();
    }
    kernel_block_sync();
    return ok;
}

/*
 * Owner role: load the rows of Pull experts, sources in rank order, spread over blocks,
 * after the rows the expert got in the step's earlier rounds. A source's pull lists are
 * read once its counts are in, and its rows once it published them (right after its first
 * pass); a source without rows for the expert is not waited for. So a Pull expert waits
 * neither for any source's Push rows nor for a source that sends it nothing.
 */
KERNEL_FN void moe_dispatch_pull(const intra_moe_args_t *a, uint64_t step, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    const int32_t *round_base = MOE_AT(a, a->rank, round_base, int32_t);
    uint64_t seen = 0; /* rows before the current list, over all lists */

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int row = round_base[local];

        if (!moe_is_pull(a, a->rank * a->experts_per_rank + local)) {
            continue;
        }
        for (int source = 0; source < a->num_ranks; ++source) {
            int n, first = (int)((g.block + g.num_blocks - seen % g.num_blocks) % g.num_blocks);
            int64_t base;

            if (!moe_block_wait(a, &control->counts_flag[source], step, source, g)) {
                return;
            }
            n = moe_pull_count(a, source, local);
            if (n > 0 && !moe_block_wait(a, &control->pull_flag[source], step, source, g)) {
                return;
            }
            base = n > 0 ? moe_control(a, source)->aug_base : 0; /* its rows' first token */
            for (int i = first; i < n; i += (int)g.num_blocks) {
                moe_pull_row(a, source, base, local, i, row + i, step, g);
            }
            row += n;
            seen += (uint64_t)n;
        }
    }
}

/* Whether a dispatch status leaves the rows in place: the input's errors do, a failed
 * wait does not. */
KERNEL_FN int moe_rows_in_place(int32_t code)
{
    return code == INTRA_MOE_KERNEL_OK || code == INTRA_MOE_KERNEL_BAD_EXPERT ||
           code == INTRA_MOE_KERNEL_CAPACITY || code == INTRA_MOE_KERNEL_MODES;
}

/* Owner role, last block of a round: per-expert counts so far, capacity check. After the
 * step's last round, push and landed counters and round bases back to zero, and every
 * expert marked complete, those that were not yet too (where the ranks' modes disagreed,
 * their rows never added up; the step reports it), unless a wait of this step gave up:
 * its rows may be missing. After an earlier round they carry on: the next round's rows
 * follow these. */
KERNEL_FN void moe_dispatch_finish(const intra_moe_args_t *a, uint64_t step)
{
    int32_t *count = MOE_AT(a, a->rank, recv_count, int32_t);
    uint32_t *counter = MOE_AT(a, a->rank, counter, uint32_t);
    uint32_t *landed = MOE_AT(a, a->rank, landed, uint32_t);
    int32_t *round_base = MOE_AT(a, a->rank, round_base, int32_t);
    intra_moe_control_t *control = moe_control(a, a->rank);
    int in_place, last = !a->more_rounds;

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int expert = a->rank * a->experts_per_rank + local;
        int64_t requested = round_base[local]; /* rows of the step so far, capacity aside */

        if (moe_is_pull(a, expert)) {
            for (int source = 0; source < a->num_ranks; ++source) {
                requested += moe_pull_count(a, source, local);
            }
        } else {
            requested = counter[local]; /* claims go on from the earlier rounds' */
        }
        count[local] = (int32_t)(requested < a->capacity || a->exact ? requested : a->capacity);
        /* every claim and row of this round happened before its flags */
        counter[local]    = last ? 0 : (uint32_t)requested;
        round_base[local] = last ? 0 : (int32_t)requested;
        if (last && !a->exact) { /* exact: PULL_INTO's rows land after this */
            landed[local] = 0;
        }
        if (requested > a->capacity && !a->exact) {
            moe_report(&control->dispatch_status, INTRA_MOE_KERNEL_CAPACITY, expert, -1, -1,
                       requested);
        }
    }
    if (!last || a->exact) {
        return;
    }
    in_place = moe_rows_in_place(kernel_load_i32(&control->dispatch_status.code)) &&
               kernel_load_relaxed_u64(&control->failed_step) < step;
    for (int local = 0; local < a->experts_per_rank && in_place; ++local) {
        if (!moe_marked(a, local, step)) {
            moe_mark_ready(a, local, count[local], step);
        }
    }
}

/* Own tokens' origins, for the owners' sources kernel: (this rank, the token's row). */
KERNEL_FN void moe_write_origins(const intra_moe_args_t *a, kernel_grid_t g)
{
    int32_t *origin = (int32_t *)(a->heap[a->rank] + a->origin_offset);
    int own = a->aug_entry != 0 ? a->num_own : a->num_tokens, base = moe_aug_base(a);

    for (int i = (int)(g.block * g.num_threads + g.thread); i < own;
         i += (int)(g.num_blocks * g.num_threads)) {
        int t = base + i;

        origin[2 * t]     = a->origin_rank;
        origin[2 * t + 1] = (int32_t)moe_own_row(a, t);
    }
}

/* Owner role, after every source's flag: every local rank moves the step in our modes. */
KERNEL_FN void moe_check_digests(const intra_moe_args_t *a)
{
    for (int source = 0; source < a->num_ranks; ++source) {
        if (kernel_load_acquire_u64(&moe_control(a, source)->digest) != a->digest) {
            moe_report(&moe_control(a, a->rank)->dispatch_status, INTRA_MOE_KERNEL_MODES,
                       source, -1, -1, 0);
        }
    }
}

/*
 * Every thread of the block, in a later dispatch round of a step: every local rank has
 * finished the round before (its last block released dispatched), which read the sources'
 * counts and pull lists and set the owners' counters; receiving exactly, it has also
 * loaded the round's rows (pulled_into), which read the sources' published rows. A step's
 * first round needs no such wait: the step before ended with a combine, which every rank
 * entered after its dispatch.
 */
KERNEL_FN int moe_round_barrier(const intra_moe_args_t *a, uint64_t step, kernel_grid_t g)
{
    KERNEL_SHARED int ok;

    if (KERNEL_LEADER(g)) {
        uint64_t start = kernel_timer();

        ok = 1;
        for (int r = 0; r < a->num_ranks && ok; ++r) {
            const intra_moe_control_t *peer = moe_control(a, r);

            ok = moe_wait_word(a, moe_exact_rounds(a) ? &peer->pulled_into : &peer->dispatched,
                               step - 1, r, &moe_control(a, a->rank)->dispatch_status, 0, start);
        }
        kernel_fence_acquire();
    }
    kernel_block_sync();
    return ok;
}

/*
 * One thread, in a later dispatch round of a step (numbered `step`, the round before it
 * step - 1): where the round before gave up, the step's rows are not all in, whatever this
 * round does, so this round is marked as having given up too. The mark goes on from round
 * to round, so that the combine, numbered as the last round, reads it there and withholds.
 * A former step's failure (step - 2 or earlier) is not carried.
 */
KERNEL_FN void moe_round_carry_failure(intra_moe_control_t *control, uint64_t step)
{
    if (kernel_load_relaxed_u64(&control->failed_step) + 1 >= step) {
        kernel_store_release_u64(&control->failed_step, step);
    }
}

KERNEL_FN void intra_moe_dispatch_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    uint64_t step = moe_step(a, 1, g);
    int num_tokens = moe_num_tokens(a);

    if (moe_net_failed(a)) {
        if (g.block == 0 && KERNEL_LEADER(g)) { /* for the waits on other streams */
            kernel_store_release_u64(&control->failed_step, step);
        }
        return;
    }
    if (a->later_round && g.block == 0 && KERNEL_LEADER(g)) {
        moe_round_carry_failure(control, step);
    }
    if (a->later_round && !moe_round_barrier(a, step, g)) {
        return;
    }
    if (g.block == 0 && KERNEL_LEADER(g)) {
        control->digest   = a->digest;   /* published by the fence before our flags */
        control->aug_base = moe_aug_base(a); /* and where this round's Pull rows start */
        moe_build_pull_lists(a, num_tokens);
        moe_publish_step_counts(a);
        moe_publish_counts(a, step);
    }
    if (a->origin_offset >= 0) {
        moe_write_origins(a, g);
    }
    moe_dispatch_pass(a, num_tokens, 0, step, g);
    if (moe_last_block(&control->pull_published_done, step, g)) {
        for (int owner = 0; owner < a->num_ranks; ++owner) {
            /* release: the rows published for Pull experts, to the owner */
            kernel_store_release_u64(&moe_control(a, owner)->pull_flag[a->rank], step);
        }
    }
    if (!a->exact) {
        moe_dispatch_pull(a, step, g);
    }
    for (int pass = 1; pass < moe_send_passes(a); ++pass) {
        moe_dispatch_pass(a, num_tokens, pass, step, g);
    }
    if (moe_last_block(&control->dispatch_send_done, step, g)) {
        for (int owner = 0; owner < a->num_ranks; ++owner) {
            /* release: our pushed rows, published rows, pull lists and digest, to the owner */
            kernel_store_release_u64(&moe_control(a, owner)->dispatch_flag[a->rank], step);
        }
    }
    if (moe_wait_flags(a, control->dispatch_flag, step, &control->dispatch_status,
                       g.block == 0, g)) {
        if (g.block == 0 && KERNEL_LEADER(g)) {
            moe_check_digests(a);
            moe_watch_experts(a, step); /* every Push row is in: the rest of those experts */
        }
    }
    if (moe_last_block(&control->dispatch_recv_done, step, g)) {
        moe_dispatch_finish(a, step);
        kernel_store_release_u64(&control->dispatched, step);
    }
}

/*
 * Owner role, after dispatch: each received row's source as the API names it (global rank,
 * token index there, slot), from the origin tables of the node's ranks, and the counts.
 */
KERNEL_FN void intra_moe_sources_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const int32_t *count = MOE_AT(a, a->rank, recv_count, int32_t);
    const intra_moe_source_t *src = MOE_AT(a, a->rank, recv_src, intra_moe_source_t);
    size_t rows = (size_t)a->experts_per_rank * (size_t)a->capacity;

    if (moe_net_failed(a)) {
        return;
    }
    for (size_t i = g.block * g.num_threads + g.thread; i < rows && !a->exact;
         i += (size_t)g.num_blocks * g.num_threads) {
        int e = (int)(i / (size_t)a->capacity), row = (int)(i % (size_t)a->capacity);

        if (row < count[e]) {
            const int32_t *origin = (const int32_t *)(a->heap[src[i].rank] + a->origin_offset);
            intra_moe_source_t s;

            s.rank  = origin[2 * src[i].token];
            s.token = origin[2 * src[i].token + 1];
            s.slot  = src[i].slot;
            a->public_src[i] = s;
        }
    }
    for (int e = (int)(g.block * g.num_threads + g.thread); e < a->experts_per_rank;
         e += (int)(g.num_blocks * g.num_threads)) {
        a->public_count[e] = count[e];
    }
}

/* --- Exact receive ---------------------------------------------------------------------- */

/* The row (token, k) of entry index of source's list for local expert `local`: its place
 * in the caller's packed buffer is at, its place among the expert's rows row. The source's
 * row_slot says where it went (-1: dropped, where the caller gave no buffer). */
KERNEL_FN void moe_pull_into_row(const intra_moe_args_t *a, int source, int64_t source_base,
                                 int local, int index, int64_t at, int row, uint64_t step,
                                 kernel_grid_t g)
{
    int expert = a->rank * a->experts_per_rank + local;
    int32_t entry = MOE_AT(a, source, pull_entry, int32_t)
                        [MOE_AT(a, source, pull_offset, int32_t)[expert] + index];
    int token = entry / a->topk, k = entry % a->topk;

    if (KERNEL_LEADER(g)) {
        MOE_AT(a, source, row_slot, int32_t)[entry] = a->into_x != 0 ? row : -1;
    }
    if (a->into_x == 0) {
        return;
    }
    if (KERNEL_LEADER(g)) {
        const int32_t *origin = (const int32_t *)(a->heap[source] + a->origin_offset);
        intra_moe_source_t src;

        src.rank  = origin[2 * token];
        src.token = origin[2 * token + 1];
        src.slot  = k;
        a->into_src[at] = src;
    }
    moe_load_published(a, source, source_base, token,
                       (char *)a->into_x + (size_t)at * (size_t)a->row_bytes,
                       a->scale_count > 0 ? a->into_scales + (size_t)at * (size_t)a->scale_count
                                          : 0,
                       g);
    moe_pull_landed(a, local, step, g);
}

/* Owner role, exact receive: the rows local expert `local` has before this launch's (in
 * rounds, those of the step's earlier rounds: its count so far, less this round's). */
KERNEL_FN int moe_rows_before_round(const intra_moe_args_t *a, int local)
{
    int rows = MOE_AT(a, a->rank, recv_count, int32_t)[local];

    if (!moe_exact_rounds(a)) {
        return 0;
    }
    for (int source = 0; source < a->num_ranks; ++source) {
        rows -= moe_pull_count(a, source, local);
    }
    return rows;
}

/* Owner role, exact receive: local expert `local`'s rows over the step (in rounds, as the
 * step's first round announced them; its last round checked them). */
KERNEL_FN int moe_step_rows(const intra_moe_args_t *a, int local)
{
    return moe_exact_rounds(a) ? MOE_AT(a, a->rank, announced, int32_t)[local]
                               : MOE_AT(a, a->rank, recv_count, int32_t)[local];
}

/* Owner role, exact receive in rounds, one thread: a row past those the step's first
 * round announced for its expert (a source sent other rows than it counted) has no place
 * in the caller's buffers: it is dropped. The last round's check of the counts fails the
 * step (moe_check_announced: the rows sent over the step exceed the announced ones). */
KERNEL_FN void moe_pull_into_excess(const intra_moe_args_t *a, int source, int local,
                                    int index)
{
    int expert = a->rank * a->experts_per_rank + local;
    int32_t entry = MOE_AT(a, source, pull_entry, int32_t)
                        [MOE_AT(a, source, pull_offset, int32_t)[expert] + index];

    MOE_AT(a, source, row_slot, int32_t)[entry] = -1;
}

/*
 * Owner role, exact receive, the last block of a load: each expert whose rows of the step
 * are all in the caller's buffers is marked complete (in rounds, as of the step's last
 * round, whose number the marks carry: an expert may complete before it), unless the step
 * failed or nothing was loaded; after the step's last round the rest are marked (their
 * rows are all in) and the landed counts set back for the next step. In rounds, the
 * next round's barrier learns that this rank's loads are done.
 */
KERNEL_FN void moe_pull_into_finish(const intra_moe_args_t *a, uint64_t step, int failed)
{
    uint32_t *landed = MOE_AT(a, a->rank, landed, uint32_t);
    int last = !a->more_rounds;
    uint64_t step_end = moe_exact_rounds(a) ? step + (uint64_t)(a->exact_rounds - 1 - a->round)
                                            : step;

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int32_t rows = moe_step_rows(a, local);

        if ((a->into_x != 0 || rows == 0) && !failed && !moe_marked(a, local, step_end) &&
            (last || kernel_load_relaxed_u32(&landed[local]) == (uint32_t)rows)) {
            moe_mark_ready(a, local, rows, step_end);
        }
        if (last) {
            landed[local] = 0;
        }
    }
    if (moe_exact_rounds(a)) {
        kernel_store_release_u64(&moe_control(a, a->rank)->pulled_into, step);
    }
}

/*
 * Owner role, exact receive, after the step's dispatch (in rounds: after each round's) on
 * the same queue (every source's rows and lists are in: the dispatch waited for their
 * flags): every row sent to the local experts, packed expert after expert and, within an
 * expert, by round, then sources in rank order, in their list order. Experts are marked
 * complete as their rows land (moe_pull_into_finish).
 */
KERNEL_FN void intra_moe_pull_into_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    uint64_t step = moe_step(a, 0, g), seen = 0;
    int64_t offset = 0; /* the expert's first row in the caller's buffer */
    /* the step failed: nothing to load (its combine withholds), the blocks still counted */
    int failed = moe_net_failed(a) || kernel_load_relaxed_u64(&control->failed_step) >= step;

    for (int local = 0; local < a->experts_per_rank && !failed; ++local) {
        int row = moe_rows_before_round(a, local);

        for (int source = 0; source < a->num_ranks; ++source) {
            int n = moe_pull_count(a, source, local);
            int first = (int)((g.block + g.num_blocks - seen % g.num_blocks) % g.num_blocks);
            int64_t base = n > 0 ? moe_control(a, source)->aug_base : 0;

            for (int i = first; i < n; i += (int)g.num_blocks) {
                if (row + i < moe_step_rows(a, local)) {
                    moe_pull_into_row(a, source, base, local, i, offset + row + i, row + i,
                                      step, g);
                } else if (KERNEL_LEADER(g)) {
                    moe_pull_into_excess(a, source, local, i);
                }
            }
            row  += n;
            seen += (uint64_t)n;
        }
        offset += moe_step_rows(a, local);
    }
    if (moe_last_block(&control->pull_into_done, step, g)) {
        moe_pull_into_finish(a, step, failed);
    }
}

#endif
