/*
 * What every MoE kernel body uses: the heap parts' buffers, status reports, the counting of
 * finished blocks, waits on peers' flags, the step read from device memory, and where a
 * token's row, scales and expert ids are.
 */
#ifndef STRATA_INTRA_MOE_COMMON_H
#define STRATA_INTRA_MOE_COMMON_H

#include "kernel_port.h"
#include "moe_format.h"

#define MOE_AT(a, rank, field, type) ((type *)((a)->heap[rank] + (a)->heap_offsets.field))

KERNEL_FN intra_moe_control_t *moe_control(const intra_moe_args_t *a, int rank)
{
    return MOE_AT(a, rank, control, intra_moe_control_t);
}

/* Exact receive in rounds: rank's pull offsets of round r of the current step. */
KERNEL_FN int32_t *moe_round_offsets(const intra_moe_args_t *a, int rank, int r)
{
    return MOE_AT(a, rank, round_offset, int32_t) + (size_t)r * (size_t)(a->num_experts + 1);
}

/* Whether the object receives exactly in rounds across nodes (each round loaded after it,
 * each round's terms returned in its own combine round; its dispatches come with the
 * step's counts, moe_round_valid). */
KERNEL_FN int moe_exact_rounds(const intra_moe_args_t *a)
{
    return a->exact_rounds > 1;
}

KERNEL_FN int moe_is_pull(const intra_moe_args_t *a, int expert)
{
    return (int)((a->pull_mask[expert >> 6] >> (expert & 63)) & 1u);
}

/* Whether a kernel's code is one the object survives (the step's input: an input error, a
 * capacity, an abort), rather than a failure of the step. */
KERNEL_FN int moe_code_soft(int32_t code)
{
    return code == INTRA_MOE_KERNEL_BAD_EXPERT || code == INTRA_MOE_KERNEL_CAPACITY ||
           code == INTRA_MOE_KERNEL_DROPPED || code == INTRA_MOE_KERNEL_TERMS_DROPPED ||
           code == INTRA_MOE_KERNEL_WITHHELD || code == INTRA_MOE_KERNEL_TERMS_WITHHELD;
}

/* The first error wins, but a failure replaces a soft code (moe_code_soft), so that the
 * object fails whatever was found first: claim the status, then fill it in (where a failure
 * replaced a soft code as it was being filled in, the fields may mix; the code holds). The
 * host reads it after the launch. */
KERNEL_FN void moe_report(intra_moe_status_t *status, int32_t code, int32_t value,
                          int32_t token, int32_t slot, int64_t count)
{
    int32_t seen = INTRA_MOE_KERNEL_OK;

    for (;;) {
        int32_t was = kernel_atomic_cas_i32(&status->code, seen, code);

        if (was == seen) {
            break;
        }
        if (!moe_code_soft(was) || moe_code_soft(code)) {
            return; /* a failure is there already, or this is no worse than what is */
        }
        seen = was;
    }
    status->value = value;
    status->token = token;
    status->slot  = slot;
    status->count = count;
}

/*
 * Count this block as done with a phase (summed over steps, never reset); return nonzero
 * in thread 0 of the last block of the step, which then sees every block's stores.
 */
KERNEL_FN int moe_last_block(uint64_t *done, uint64_t step, kernel_grid_t g)
{
    KERNEL_SHARED int last;

    kernel_fence_system(); /* this thread's stores, before the block's count */
    kernel_block_sync();
    if (KERNEL_LEADER(g)) {
        last = kernel_atomic_add_u64(done, 1) + 1 == step * g.num_blocks;
        if (last) {
            kernel_fence_system(); /* acquire: every other block's stores */
        }
    }
    kernel_block_sync();
    return last && KERNEL_LEADER(g);
}

/* --- Per-expert completion ----------------------------------------------------------- */

/* Owner: local expert l's rows of this step are all in its block: their count, then the
 * step, into the mapped words the host and other streams read. */
KERNEL_FN void moe_mark_ready(const intra_moe_args_t *a, int local, int32_t rows, uint64_t step)
{
    MOE_AT(a, a->rank, marked, uint64_t)[local] = step; /* the kernels' copy, device memory */
    a->marks.ready_rows[local] = rows;
    kernel_store_release_u64(&a->marks.ready[local], step);
}

/* Whether local expert l is marked for the step (block 0 and the last block read it). */
KERNEL_FN int moe_marked(const intra_moe_args_t *a, int local, uint64_t step)
{
    return MOE_AT(a, a->rank, marked, uint64_t)[local] >= step;
}

/*
 * One thread of the owner, in the first dispatch round of a step across nodes in rounds:
 * once every source's counts are in (not waited for: the caller tries again later), the
 * rows each local expert gets over the whole step, from the step counts the sources
 * published with them, for the host before any round's rows are in (the last round checks
 * them, moe_check_announced). Marks nothing.
 */
KERNEL_FN void moe_announce_counts(const intra_moe_args_t *a, uint64_t step)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    int32_t *announced = MOE_AT(a, a->rank, announced, int32_t);

    if (a->step_counts == 0 || a->later_round || !a->more_rounds ||
        kernel_load_relaxed_u64(&control->announced_step) == step) {
        return;
    }
    for (int source = 0; source < a->num_ranks; ++source) {
        if (kernel_load_relaxed_u64(&control->counts_flag[source]) < step) {
            return;
        }
    }
    kernel_fence_acquire(); /* the step counts, released before the flags */
    for (int l = 0; l < a->experts_per_rank; ++l) {
        int64_t rows = 0;

        for (int source = 0; source < a->num_ranks; ++source) {
            rows += MOE_AT(a, source, step_sent, int32_t)[a->rank * a->experts_per_rank + l];
        }
        announced[l]        = (int32_t)(rows < INT32_MAX ? rows : INT32_MAX);
        a->marks.routed[l]  = announced[l];
    }
    kernel_store_release_u64(a->marks.counts_step, step); /* the counts, to the host */
    control->announced_step = step; /* read by this thread alone */
}

/*
 * One thread of the owner, in the last round of a step: whether its first round announced
 * the counts (the host may be reading them: they are not written again). If so, whether
 * local expert l was sent the rows announced (rows: the step's); where not (a rank changed
 * its routing during the step, or a peer's header counted other rows than it sent), the
 * step fails: the host was told other counts.
 */
KERNEL_FN int moe_check_announced(const intra_moe_args_t *a, int l, int64_t rows, uint64_t step)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    const int32_t *announced = MOE_AT(a, a->rank, announced, int32_t);

    if (a->step_counts == 0 || !a->later_round ||
        kernel_load_relaxed_u64(&control->announced_step) != step - (uint64_t)a->round) {
        return 0; /* none announced in this step (its first round gave up before) */
    }
    if (rows != announced[l]) {
        moe_report(&control->dispatch_status, INTRA_MOE_KERNEL_COUNTS, l, announced[l], -1,
                   rows);
    }
    return 1;
}

/*
 * One thread of the owner, in the last dispatch round of a step: once every source's
 * counts are in (not waited for: the caller tries again later), the rows each local expert
 * has when complete (earlier rounds' and this one's, at most its capacity unless the
 * object receives exactly), and for the
 * host the rows sent to it (moe_watch_experts then marks each expert whose rows are all
 * in). Whether they are settled for this step; never in an earlier round.
 */
KERNEL_FN int moe_settle_expected(const intra_moe_args_t *a, uint64_t step)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    int32_t *expected = MOE_AT(a, a->rank, expected, int32_t);
    const int32_t *round_base = MOE_AT(a, a->rank, round_base, int32_t);

    if (a->more_rounds) {
        return 0;
    }
    if (kernel_load_relaxed_u64(&control->expected_step) == step) {
        return 1;
    }
    for (int source = 0; source < a->num_ranks; ++source) {
        if (kernel_load_relaxed_u64(&control->counts_flag[source]) < step) {
            return 0;
        }
    }
    kernel_fence_acquire(); /* the counts, released before their flags */
    for (int l = 0; l < a->experts_per_rank; ++l) {
        int64_t rows = round_base[l];

        for (int source = 0; source < a->num_ranks; ++source) {
            rows += MOE_AT(a, source, sent_count, int32_t)[a->rank * a->experts_per_rank + l];
        }
        expected[l] = (int32_t)(rows < a->capacity || a->exact ? rows : a->capacity);
        if (!moe_check_announced(a, l, rows, step)) {
            a->marks.routed[l] = (int32_t)rows;
        }
    }
    kernel_store_release_u64(a->marks.counts_step, step); /* the counts, to the host */
    control->expected_step = step; /* read by this thread alone */
    return 1;
}

/*
 * One thread of the owner, in a dispatch round before the step's last across nodes, once
 * the step's first round announced its counts (the exact receive marks its experts as it
 * loads them): each local expert whose rows of the whole step have all landed already (at
 * most its capacity; one that gets none at once) is marked complete, with the number of
 * the step's last round, which the host and the waits on streams look for. No later round
 * writes into its block: its sources have no more rows for it, or it is full.
 */
KERNEL_FN void moe_watch_early(const intra_moe_args_t *a, uint64_t step)
{
    const intra_moe_control_t *control = moe_control(a, a->rank);
    const int32_t *announced = MOE_AT(a, a->rank, announced, int32_t);
    const uint32_t *landed = MOE_AT(a, a->rank, landed, uint32_t);
    uint64_t last;

    if (!a->more_rounds || a->step_counts == 0 || a->exact ||
        kernel_load_relaxed_u64(&control->announced_step) != step - (uint64_t)a->round ||
        kernel_load_relaxed_u64(&control->failed_step) >= step) {
        return;
    }
    last = step + (uint64_t)(a->net.rounds - 1 - a->round);
    for (int l = 0; l < a->experts_per_rank; ++l) {
        int32_t rows = announced[l] < a->capacity ? announced[l] : a->capacity;

        if (!moe_marked(a, l, last) && kernel_load_relaxed_u32(&landed[l]) == (uint32_t)rows) {
            kernel_fence_acquire(); /* the rows, written before they were counted */
            moe_mark_ready(a, l, rows, last);
        }
    }
}

/*
 * One thread of the owner (block 0's): mark each local expert whose landed rows reached
 * what it expects. Push sources and the owner's Pull loads count a row as landed once it
 * is written; the count runs over the step's dispatch rounds. Nothing before every
 * source's counts are in; before the last round only experts whose rows of the whole step
 * are in (moe_watch_early).
 */
KERNEL_FN void moe_watch_experts(const intra_moe_args_t *a, uint64_t step)
{
    const uint32_t *landed = MOE_AT(a, a->rank, landed, uint32_t);
    const int32_t *expected = MOE_AT(a, a->rank, expected, int32_t);

    moe_announce_counts(a, step);
    moe_watch_early(a, step);
    if (!moe_settle_expected(a, step) ||
        kernel_load_relaxed_u64(&moe_control(a, a->rank)->failed_step) >= step) {
        return; /* no expert of a step whose waits gave up (an earlier round's, carried) */
    }
    for (int l = 0; l < a->experts_per_rank; ++l) {
        if (moe_marked(a, l, step)) {
            continue;
        }
        if (kernel_load_relaxed_u32(&landed[l]) == (uint32_t)expected[l]) {
            kernel_fence_acquire(); /* the rows, written before they were counted */
            moe_mark_ready(a, l, expected[l], step);
        }
    }
}

/* One thread: wait until *word reaches the step, from start (kernel_timer); 0, and a
 * report naming `who`, if it never does (the bound for a live peer) or the engine announces
 * a failed rank (a dead one). watch: meanwhile mark the experts whose rows are in
 * (moe_watch_experts). No acquire: the caller's. */
KERNEL_FN int moe_wait_word(const intra_moe_args_t *a, const uint64_t *word, uint64_t step,
                            int who, intra_moe_status_t *status, int watch, uint64_t start)
{
    uint32_t spins = 0;

    while (kernel_load_relaxed_u64(word) < step) {
        int failed = spins % KERNEL_FAILURE_EVERY == 0 && a->failure != 0 &&
                     kernel_load_i32(a->failure) != 0;

        if (failed || kernel_timer() - start > a->timeout_ticks) {
            moe_report(status, failed ? INTRA_MOE_KERNEL_PEER_FAILED : INTRA_MOE_KERNEL_TIMEOUT,
                       who, -1, -1, 0);
            /* recorded apart from the status, which an input error may hold already; a
             * combine's own waits apart from the dispatch's: failed_step says that the
             * step's rows are not all in, which every block of the combine reads to decide
             * alike to withhold; combine_failed_step, that the owners' results are not */
            if (status != &moe_control(a, a->rank)->combine_status) {
                kernel_store_release_u64(&moe_control(a, a->rank)->failed_step, step);
            } else {
                kernel_store_release_u64(&moe_control(a, a->rank)->combine_failed_step, step);
            }
            return 0;
        }
        if (watch) {
            moe_watch_experts(a, step);
        }
        kernel_spin_pause(spins++);
    }
    return 1;
}

/* One thread: every rank's flag reaches this step (moe_wait_word, one bound for all). */
KERNEL_FN int moe_wait_words(const intra_moe_args_t *a, const uint64_t *flags, uint64_t step,
                             intra_moe_status_t *status, int watch)
{
    uint64_t start = kernel_timer();

    for (int r = 0; r < a->num_ranks; ++r) {
        if (!moe_wait_word(a, &flags[r], step, r, status, watch, start)) {
            return 0;
        }
    }
    /* acquire: pairs with the release in each peer's last block, seen above */
    kernel_fence_acquire();
    return 1;
}

/* Every thread of the block: moe_wait_words by thread 0, its answer shared. */
KERNEL_FN int moe_wait_flags(const intra_moe_args_t *a, const uint64_t *flags, uint64_t step,
                             intra_moe_status_t *status, int watch, kernel_grid_t g)
{
    KERNEL_SHARED int ok;

    if (KERNEL_LEADER(g)) {
        ok = moe_wait_words(a, flags, step, status, watch);
    }
    kernel_block_sync();
    return ok;
}

/*
 * The step: dispatch runs the one after the last completed dispatch, combine the current
 * one. Read once by thread 0 and shared with the block.
 */
KERNEL_FN uint64_t moe_step(const intra_moe_args_t *a, int dispatch, kernel_grid_t g)
{
    KERNEL_SHARED uint64_t step;

    if (KERNEL_LEADER(g)) {
        step = kernel_load_acquire_u64(&moe_control(a, a->rank)->dispatched) + (dispatch ? 1 : 0);
    }
    kernel_block_sync();
    return step;
}

/* Whether the step across nodes already failed here: the node's kernels then stand down. */
KERNEL_FN int moe_net_failed(const intra_moe_args_t *a)
{
    return a->net.ring != 0 && kernel_load_i32(&moe_control(a, a->rank)->net_status.code) != 0;
}

/* Tokens of this launch: the caller's count, or the device's for a step across nodes. */
KERNEL_FN int moe_num_tokens(const intra_moe_args_t *a)
{
    return a->num_tokens_dev != 0 ? kernel_load_i32(a->num_tokens_dev) : a->num_tokens;
}

/* The step's index of this round's first token: the host's, or across nodes in rounds
 * the device's (only the network kernels know how many tokens earlier rounds brought). */
KERNEL_FN int moe_aug_base(const intra_moe_args_t *a)
{
    return a->aug_base_dev != 0 ? kernel_load_i32(a->aug_base_dev) : a->aug_base;
}

/* Tokens below are numbered over the step (the round's aug_base + t, moe_format.h). */
KERNEL_FN int moe_received(const intra_moe_args_t *a, int token)
{
    return a->aug_entry != 0 && token >= moe_aug_base(a) + a->num_own;
}

/* An own token's row in x and topk_idx. */
KERNEL_FN size_t moe_own_row(const intra_moe_args_t *a, int token)
{
    return (size_t)(a->own_base + (token - moe_aug_base(a)));
}

/* Token t's row and scales: the caller's x, or where the network put its entry. */
KERNEL_FN const char *moe_token_row(const intra_moe_args_t *a, int token)
{
    if (moe_received(a, token)) {
        return a->entry_base + a->aug_entry[token] + a->record_bytes;
    }
    return (const char *)a->x + moe_own_row(a, token) * (size_t)a->row_bytes;
}

KERNEL_FN const float *moe_token_scales(const intra_moe_args_t *a, int token)
{
    if (a->scale_count == 0) {
        return 0;
    }
    if (moe_received(a, token)) {
        return (const float *)(moe_token_row(a, token) + a->row_bytes);
    }
    return a->x_scales + moe_own_row(a, token) * (size_t)a->scale_count;
}

KERNEL_FN int64_t moe_token_expert(const intra_moe_args_t *a, int token, int k)
{
    if (moe_received(a, token)) {
        return a->aug_topk[(size_t)token * (size_t)a->topk + (size_t)k];
    }
    return a->topk_idx[moe_own_row(a, token) * (size_t)a->topk + (size_t)k];
}

KERNEL_FN int moe_copy_scales(float *dst, const float *src, int count, kernel_grid_t g)
{
    for (int i = (int)g.thread; i < count; i += (int)g.num_threads) {
        dst[i] = src[i];
    }
    return count;
}

/* The scales of row `index` of a [rows][stride-byte] array, NULL without scales. */
KERNEL_FN float *moe_scales_at(const intra_moe_args_t *a, const void *base, size_t index,
                               size_t stride)
{
    return a->scale_count > 0 ? (float *)((const char *)base + index * stride) : NULL;
}

/* Copy one token row (and its scales) with the whole block. */
KERNEL_FN void moe_copy_token(const intra_moe_args_t *a, char *dst, float *dst_scales,
                              const char *src, const float *src_scales, kernel_grid_t g)
{
    kernel_copy_block(dst, src, (size_t)a->row_bytes, g);
    if (a->scale_count > 0) {
        moe_copy_scales(dst_scales, src_scales, a->scale_count, g);
    }
}

/*
 * A wait on another stream until local expert args->wait_expert of step args->wait_step is
 * complete (strata_moe_expert_wait_stream): work enqueued after it there sees its rows. One
 * thread. It ends, without the mark, where the step failed (this rank's dispatch recorded
 * it in failed_step, or the engine announced a failed rank: the step's kernels report
 * that), or at the object's bound, counted from the moment this rank's
 * dispatch started; then it counts itself in the mapped words' expired count, which
 * strata_moe_synchronize reports.
 */
KERNEL_FN void intra_moe_expert_wait_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    uint64_t start = kernel_timer(), step = a->wait_step;
    uint32_t spins = 0;
    int started = 0;

    if (g.block != 0 || !KERNEL_LEADER(g)) {
        return;
    }
    while (kernel_load_relaxed_u64(&a->marks.ready[a->wait_expert]) < step) {
        if (!started && kernel_load_relaxed_u64(&control->counts_flag[a->rank]) >= step) {
            started = 1; /* the dispatch runs: its own bounds hold from here */
            start   = kernel_timer();
        }
        /* not the statuses: the object's stream resets them, unordered with this one */
        if (kernel_load_relaxed_u64(&control->failed_step) >= step ||
            (spins % KERNEL_FAILURE_EVERY == 0 && a->failure != 0 &&
             kernel_load_i32(a->failure) != 0)) {
            return;
        }
        if (kernel_timer() - start > a->timeout_ticks) {
            kernel_atomic_add_u64(a->marks.waits_expired, 1);
            return;
        }
        kernel_spin_pause(spins++);
    }
    kernel_fence_acquire(); /* the rows, released before the mark */
}

#endif
