/*
 * The node's MoE combine (results back to their tokens, summed in fp32 in k order, or each
 * term written where its holder wants it) and the reduce of terms gathered from anywhere.
 */
#ifndef STRATA_INTRA_MOE_COMBINE_H
#define STRATA_INTRA_MOE_COMBINE_H

#include "moe_common.h"
#include "moe_dispatch.h" /* the sources' lists, which the exact receive's combine reads */

/* Columns each thread sums at a time: a 16-byte vector on GPUs, a cache-friendly run on
 * the host's single thread. */
#if KERNEL_GPU
#define MOE_COMBINE_TILE 8
#else
#define MOE_COMBINE_TILE 512
#endif

/* acc[j] += w * y[h0 + j], one rounding per multiply and per add; the type switch is
 * outside the loop so that the loop vectorises. */
KERNEL_FN void moe_accumulate(float *acc, const void *row, int h0, int len, float w, int elem)
{
    const uint16_t *half = (const uint16_t *)row + h0;
    const float *single = (const float *)row + h0;

    switch (elem) {
    case INTRA_MOE_ELEM_BF16:
        for (int j = 0; j < len; ++j) {
            acc[j] = kernel_add_f32(acc[j], kernel_mul_f32(w, kernel_bf16_to_f32(half[j])));
        }
        break;
    case INTRA_MOE_ELEM_FP16:
        for (int j = 0; j < len; ++j) {
            acc[j] = kernel_add_f32(acc[j], kernel_mul_f32(w, kernel_fp16_to_f32(half[j])));
        }
        break;
    default:
        for (int j = 0; j < len; ++j) {
            acc[j] = kernel_add_f32(acc[j], kernel_mul_f32(w, single[j]));
        }
        break;
    }
}

KERNEL_FN void moe_store_tile(void *row, int h0, int len, int elem, const float *acc)
{
    uint16_t *half = (uint16_t *)row + h0;
    float *single = (float *)row + h0;

    for (int j = 0; j < len; ++j) {
        if (elem == INTRA_MOE_ELEM_BF16) {
            half[j] = kernel_f32_to_bf16(acc[j]);
        } else if (elem == INTRA_MOE_ELEM_FP16) {
            half[j] = kernel_f32_to_fp16(acc[j]);
        } else {
            single[j] = acc[j];
        }
    }
}

/* Owner role: push result rows back into their sources, publish those of Pull experts. */
KERNEL_FN void moe_combine_send(const intra_moe_args_t *a, kernel_grid_t g)
{
    const int32_t *count = MOE_AT(a, a->rank, recv_count, int32_t);
    char *published = MOE_AT(a, a->rank, expert_y, char);
    uint64_t seen = 0;

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int pull = moe_is_pull(a, a->rank * a->experts_per_rank + local);
        int first = (int)((g.block + g.num_blocks - seen % g.num_blocks) % g.num_blocks);

        for (int row = first; row < count[local]; row += (int)g.num_blocks) {
            size_t slot = (size_t)local * (size_t)a->capacity + (size_t)row;
            const char *y = (const char *)a->expert_y + slot * (size_t)a->y_row_bytes;
            intra_moe_source_t src = MOE_AT(a, a->rank, recv_src, intra_moe_source_t)[slot];
            size_t entry = (size_t)src.token * (size_t)a->topk + (size_t)src.slot;

            if (!pull && a->term_dst_offset >= 0) {
                /* straight to where the term's holder wants it (its network area, or its
                 * own tokens' terms) */
                int64_t at = ((const int64_t *)(a->heap[src.rank] + a->term_dst_offset))[entry];

                if (at >= 0) {
                    kernel_copy_block(a->heap[src.rank] + at, y, (size_t)a->y_row_bytes, g);
                }
            } else if (!pull) {
                kernel_copy_block(MOE_AT(a, src.rank, combine_recv, char) +
                                      entry * (size_t)a->y_row_bytes,
                                  y, (size_t)a->y_row_bytes, g);
            } else if (y != published + slot * (size_t)a->y_row_bytes) {
                kernel_copy_block(published + slot * (size_t)a->y_row_bytes, y,
                                  (size_t)a->y_row_bytes, g);
            }
        }
        seen += (uint64_t)count[local];
    }
}

/* Owner role, exact receive: the outputs lie packed as PULL_INTO loaded the rows (expert
 * after expert, sources in rank order, each in its list order); push each back to its
 * source, but for rows that were dropped. */
KERNEL_FN void moe_combine_send_packed(const intra_moe_args_t *a, kernel_grid_t g)
{
    uint64_t seen = 0;
    int64_t at = 0; /* the packed row of the current list's first entry */

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int expert = a->rank * a->experts_per_rank + local;

        for (int source = 0; source < a->num_ranks; ++source) {
            int n = moe_pull_count(a, source, local);
            int first = (int)((g.block + g.num_blocks - seen % g.num_blocks) % g.num_blocks);
            const int32_t *entries = MOE_AT(a, source, pull_entry, int32_t) +
                                     MOE_AT(a, source, pull_offset, int32_t)[expert];
            const int32_t *row_slot = MOE_AT(a, source, row_slot, int32_t);

            for (int i = first; i < n; i += (int)g.num_blocks) {
                size_t entry = (size_t)entries[i];
                const char *y = (const char *)a->expert_y +
                                (size_t)(at + i) * (size_t)a->y_row_bytes;

                if (row_slot[entry] < 0) {
                    continue;
                }
                if (a->term_dst_offset >= 0) { /* where the term's holder wants it */
                    int64_t dst = ((const int64_t *)(a->heap[source] +
                                                     a->term_dst_offset))[entry];

                    if (dst >= 0) {
                        kernel_copy_block(a->heap[source] + dst, y, (size_t)a->y_row_bytes, g);
                    }
                } else {
                    kernel_copy_block(MOE_AT(a, source, combine_recv, char) +
                                          entry * (size_t)a->y_row_bytes,
                                      y, (size_t)a->y_row_bytes, g);
                }
            }
            at   += n;
            seen += (uint64_t)n;
        }
    }
}

/* Source role, once the owners' combine flags are seen: bit r set where the control word
 * at `field` of local rank r names the current step. */
KERNEL_FN uint32_t moe_ranks_marked(const intra_moe_args_t *a, size_t field)
{
    uint64_t step = kernel_load_relaxed_u64(&moe_control(a, a->rank)->dispatched);
    uint32_t marked = 0;

    for (int r = 0; r < a->num_ranks; ++r) {
        const uint64_t *word = (const uint64_t *)((const char *)moe_control(a, r) + field);

        marked |= (uint32_t)(kernel_load_relaxed_u64(word) == step) << r;
    }
    return marked;
}

/* A held mask's bits (moe_withheld_ranks): bit r, local rank r's results of the step are
 * missing here; bit MOE_HELD_GAVE_UP + r, because it gave up (or this rank gave up
 * waiting for them), rather than aborted. */
#define MOE_HELD_GAVE_UP INTRA_MOE_MAX_RANKS
#if 2 * INTRA_MOE_MAX_RANKS > 32
#error "a held mask (32 bits) holds two bits per local rank"
#endif

/* The local ranks whose results of the current step are missing here: those that aborted
 * it and withheld them (strata_moe_abort_step), and those that withheld because a wait of
 * their dispatch gave up; the latter also as given up. Every rank's, as given up, where
 * this rank gave up in the step: its combine waiting for the owners' results
 * (combine_failed_step: which of them its blocks gathered before they stopped is not known
 * here, and an owner that never released its results left a former step's), or its own
 * dispatch (failed_step: rows it received from other nodes may never have reached their
 * owners, and its tables of a round that stopped early are a former step's). One snapshot,
 * read once per launch: a load of every owner's control block per term would cross the
 * node's links on every term of a combine, and the codes a launch reports must agree with
 * the terms it left out. */
KERNEL_FN uint32_t moe_withheld_ranks(const intra_moe_args_t *a)
{
    const intra_moe_control_t *control = moe_control(a, a->rank);
    uint64_t step = kernel_load_relaxed_u64(&control->dispatched);
    uint32_t gave_up;

    if (kernel_load_relaxed_u64(&control->combine_failed_step) == step ||
        kernel_load_relaxed_u64(&control->failed_step) >= step) {
        uint32_t all = (uint32_t)((1ull << a->num_ranks) - 1);

        return all | (all << MOE_HELD_GAVE_UP);
    }
    gave_up = moe_ranks_marked(a, offsetof(intra_moe_control_t, gave_up));
    return moe_ranks_marked(a, offsetof(intra_moe_control_t, withheld)) |
           (gave_up << MOE_HELD_GAVE_UP);
}

/* Whether expert's owner is among the ranks whose results are missing (held:
 * moe_withheld_ranks). */
KERNEL_FN int moe_withheld(const intra_moe_args_t *a, uint32_t held, int expert)
{
    return (int)((held >> (expert / a->experts_per_rank)) & 1u);
}

/* Whether expert's owner gave up (or this rank gave up waiting for it), of those missing. */
KERNEL_FN int moe_held_gave_up(const intra_moe_args_t *a, uint32_t held, int expert)
{
    return (int)((held >> (MOE_HELD_GAVE_UP + expert / a->experts_per_rank)) & 1u);
}

/* Whether any owner in held gave up (or this rank gave up waiting for it). */
KERNEL_FN int moe_held_any_gave_up(uint32_t held)
{
    return (held >> MOE_HELD_GAVE_UP) != 0;
}

/* Source role: (token, k) routed to expert has no row: dropped for capacity, or withheld
 * (an abort, or an owner that gave up, or this rank gave up waiting: moe_withheld_ranks). */
KERNEL_FN void moe_report_missing(const intra_moe_args_t *a, uint32_t held, int expert,
                                  int token, int k)
{
    int code = INTRA_MOE_KERNEL_DROPPED;

    if (moe_withheld(a, held, expert)) {
        code = moe_held_gave_up(a, held, expert) ? INTRA_MOE_KERNEL_GAVE_UP
                                                 : INTRA_MOE_KERNEL_WITHHELD;
    }
    moe_report(&moe_control(a, a->rank)->combine_status, code, expert, token, k, 0);
}

/* Source role: the row that (token, k)'s owner produced, or NULL if it was dropped or
 * withheld (held: moe_withheld_ranks). */
KERNEL_FN const char *moe_result_row(const intra_moe_args_t *a, uint32_t held, int token, int k)
{
    size_t entry = (size_t)token * (size_t)a->topk + (size_t)k;
    int expert = MOE_AT(a, a->rank, route, int32_t)[entry];
    int row = MOE_AT(a, a->rank, row_slot, int32_t)[entry];
    int owner, local;

    if (expert < 0 || row < 0 || moe_withheld(a, held, expert)) {
        return NULL;
    }
    if (moe_exact_rounds(a)) { /* its owner wrote it where our term_dst says (COMBINE_ROUND) */
        int64_t at = ((const int64_t *)(a->heap[a->rank] + a->term_dst_offset))[entry];

        return at >= 0 ? a->heap[a->rank] + at : NULL;
    }
    if (!moe_is_pull(a, expert)) {
        return MOE_AT(a, a->rank, combine_recv, char) + entry * (size_t)a->y_row_bytes;
    }
    owner = expert / a->experts_per_rank;
    local = expert % a->experts_per_rank;
    return MOE_AT(a, owner, expert_y, char) +
           ((size_t)local * (size_t)a->capacity + (size_t)row) * (size_t)a->y_row_bytes;
}

/* out = sum over the n rows of weights[i] * rows[i], in fp32, i in order: the
 * reference's rounding order. */
KERNEL_FN void moe_sum_rows(const intra_moe_args_t *a, const char *const *rows,
                            const float *weights, int n, char *out, kernel_grid_t g)
{
    for (int h0 = (int)g.thread * MOE_COMBINE_TILE; h0 < a->hidden;
         h0 += (int)g.num_threads * MOE_COMBINE_TILE) {
        int len = a->hidden - h0 < MOE_COMBINE_TILE ? a->hidden - h0 : MOE_COMBINE_TILE;
        float acc[MOE_COMBINE_TILE];

        for (int j = 0; j < len; ++j) {
            acc[j] = 0.0f;
        }
        for (int i = 0; i < n; ++i) {
            moe_accumulate(acc, rows[i], h0, len, weights[i], a->y_elem);
        }
        moe_store_tile(out, h0, len, a->y_elem, acc);
    }
}

/* Source role: out[t] = sum over k of topk_weights[t][k] * y, in fp32, k in order. */
KERNEL_FN void moe_combine_reduce(const intra_moe_args_t *a, kernel_grid_t g)
{
    uint32_t held = moe_withheld_ranks(a);
    const char *rows[INTRA_MOE_MAX_TOPK];
    float weights[INTRA_MOE_MAX_TOPK];

    for (int t = (int)g.block; t < a->num_tokens; t += (int)g.num_blocks) {
        int n = 0;

        for (int k = 0; k < a->topk; ++k) {
            size_t entry = (size_t)t * (size_t)a->topk + (size_t)k;
            int expert = MOE_AT(a, a->rank, route, int32_t)[entry];

            rows[n] = moe_result_row(a, held, t, k);
            weights[n] = a->topk_weights[entry];
            if (rows[n] != NULL) {
                ++n;
            } else if (expert >= 0 && KERNEL_LEADER(g)) {
                moe_report_missing(a, held, expert, t, k);
            }
        }
        moe_sum_rows(a, rows, weights, n, (char *)a->out + (size_t)t * (size_t)a->y_row_bytes,
                     g);
    }
}

/* Source role, direct form: Push terms are already where term_dst says (their owners put
 * them there); Pull terms are fetched there; a dropped term becomes zeros, so that a later
 * sum lacks it, and is reported here if the token is this rank's own (another node's
 * token's missing terms go back counted with its terms, to be reported at its rank). Slots
 * routed nowhere on this node are left alone. */
KERNEL_FN void moe_combine_direct(const intra_moe_args_t *a, int num_tokens, kernel_grid_t g)
{
    const int64_t *term_dst = (const int64_t *)(a->heap[a->rank] + a->term_dst_offset);
    uint32_t held = moe_withheld_ranks(a);

    for (int t = (int)g.block; t < num_tokens; t += (int)g.num_blocks) {
        for (int k = 0; k < a->topk; ++k) {
            size_t entry = (size_t)t * (size_t)a->topk + (size_t)k;
            int expert = MOE_AT(a, a->rank, route, int32_t)[entry];
            const char *row = moe_result_row(a, held, t, k);
            char *out = a->heap[a->rank] + term_dst[entry];

            if (expert < 0 || term_dst[entry] < 0 || (row != NULL && !moe_is_pull(a, expert))) {
                continue;
            }
            if (row != NULL) {
                kernel_copy_block(out, row, (size_t)a->y_row_bytes, g);
            } else {
                for (int j = (int)g.thread; j < a->y_row_bytes; j += (int)g.num_threads) {
                    out[j] = 0;
                }
                if (KERNEL_LEADER(g) && !moe_received(a, t)) {
                    moe_report_missing(a, held, expert, t, k);
                }
            }
        }
    }
}

/* This launch's number among the object's launches of its kind: one past the count of
 * them done (a word of this rank's control block), read once by thread 0 and shared. */
KERNEL_FN uint64_t moe_next_ordinal(const uint64_t *done, kernel_grid_t g)
{
    KERNEL_SHARED uint64_t ordinal;

    if (KERNEL_LEADER(g)) {
        ordinal = kernel_load_relaxed_u64(done) + 1;
    }
    kernel_block_sync();
    return ordinal;
}

KERNEL_FN void intra_moe_combine_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    uint64_t step = moe_step(a, 0, g), ordinal = moe_next_ordinal(&control->combined, g);

    /* after a dispatch whose wait gave up (on a stream the host has not learnt it yet) the
     * blocks may lack rows a late source still sends, and the sources' row_slot entries
     * for them are a former step's (the exact receive loaded nothing): withhold, so that
     * no source sums a term that was never computed on its row */
    int gave_up  = kernel_load_relaxed_u64(&control->failed_step) >= step;
    int withhold = a->withhold || gave_up;

    if (moe_net_failed(a)) {
        return;
    }
    if (withhold && g.block == 0 && KERNEL_LEADER(g)) {
        /* seen by the sources through the release of our flag below */
        if (gave_up) {
            control->gave_up = step;
        }
        kernel_store_release_u64(&control->withheld, step);
    } else if (!withhold && !a->exact) {
        moe_combine_send(a, g);
    } else if (!withhold && !moe_exact_rounds(a)) {
        moe_combine_send_packed(a, g);
    } /* exact in rounds: each round's terms go in its own combine round (COMBINE_ROUND) */
    if (moe_last_block(&control->combine_send_done, ordinal, g)) {
        control->combined = ordinal; /* for the next combine, after this one on the queue */
        for (int source = 0; source < a->num_ranks; ++source) {
            /* release: our pushed and published result rows, to the source */
            kernel_store_release_u64(&moe_control(a, source)->combine_flag[a->rank], step);
        }
    }
    if (!moe_wait_flags(a, control->combine_flag, step, &control->combine_status, 0, g)) {
        return;
    }
    if (a->term_dst_offset >= 0 && a->net.rounds > 1) {
        return; /* the streamed exchange: the network kernels gather the terms, by round */
    }
    if (a->term_dst_offset >= 0) {
        moe_combine_direct(a, moe_num_tokens(a), g);
    } else if (a->out != NULL) {
        moe_combine_reduce(a, g);
    }
}

/* --- Exact receive in rounds: each round's terms in its own launch ---------------------- */

/* Rows local expert `local` was sent in this round: the sum of the sources' kept lists. */
KERNEL_FN int moe_round_rows(const intra_moe_args_t *a, int local)
{
    int expert = a->rank * a->experts_per_rank + local, rows = 0;

    for (int source = 0; source < a->num_ranks; ++source) {
        const int32_t *kept = moe_round_offsets(a, source, a->round);

        rows += kept[expert + 1] - kept[expert];
    }
    return rows;
}

/*
 * Owner role: the outputs of the rows the local experts got in this round, read from the
 * caller's packed buffer where PULL_INTO loaded their rows (expert after expert, each
 * from its rows of the earlier rounds on, round_base; sources in rank order, in their
 * kept list order), each written where its gathering rank's term_dst says; none for a row
 * that was dropped.
 */
KERNEL_FN void moe_push_round(const intra_moe_args_t *a, kernel_grid_t g)
{
    const int32_t *before = MOE_AT(a, a->rank, round_base, int32_t);
    size_t y = (size_t)a->y_row_bytes;
    uint64_t seen = 0;
    int64_t offset = 0; /* the expert's first row in the caller's buffer */

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int expert = a->rank * a->experts_per_rank + local;
        int64_t at = offset + before[local];

        for (int source = 0; source < a->num_ranks; ++source) {
            const int32_t *kept = moe_round_offsets(a, source, a->round);
            const int32_t *entries = MOE_AT(a, source, pull_entry, int32_t) + kept[expert];
            const int32_t *row_slot = MOE_AT(a, source, row_slot, int32_t);
            const int64_t *term_dst = (const int64_t *)(a->heap[source] + a->term_dst_offset);
            int n = kept[expert + 1] - kept[expert];
            int first = (int)((g.block + g.num_blocks - seen % g.num_blocks) % g.num_blocks);

            for (int i = first; i < n; i += (int)g.num_blocks) {
                size_t entry = (size_t)entries[i];
                int64_t dst = term_dst[entry];

                if (row_slot[entry] >= 0 && dst >= 0) {
                    kernel_copy_block(a->heap[source] + dst,
                                      (const char *)a->expert_y + (size_t)(at + i) * y, y, g);
                }
            }
            at   += n;
            seen += (uint64_t)n;
        }
        offset += moe_step_rows(a, local);
    }
}

/* Every thread of the block: the word of every local rank reaches this combine round
 * (ready: each rank's round_ready, its places free for the round's terms; else this
 * rank's round_flag of each owner, its terms written here). Where one never does, this
 * rank's combine of the step gives up (combine_failed_step), as its combine's waits do:
 * what it returns lacks the terms. A rank that gave up in the step waits for none. */
KERNEL_FN int moe_wait_round(const intra_moe_args_t *a, int ready, uint64_t ordinal,
                             uint64_t step, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    KERNEL_SHARED int ok;

    if (KERNEL_LEADER(g)) {
        uint64_t start = kernel_timer();

        ok = kernel_load_relaxed_u64(&control->combine_failed_step) != step;
        for (int r = 0; r < a->num_ranks && ok; ++r) {
            const uint64_t *word = ready ? &moe_control(a, r)->round_ready
                                         : &control->round_flag[r];

            ok = moe_wait_word(a, word, ordinal, r, &control->combine_status, 0, start);
        }
        if (!ok) { /* moe_wait_word recorded the round's number: the step's, for the rest */
            kernel_store_release_u64(&control->combine_failed_step, step);
        }
        kernel_fence_acquire();
    }
    kernel_block_sync();
    return ok;
}

/*
 * Exact receive in rounds, after combine (its round 0) or the round before's reduce on the
 * same queue: this rank's places for the round's terms are free (the round before's were
 * read), which every owner waits for; then each owner writes the round's terms there
 * (none where it withheld the step) and says so, and each rank waits for every owner
 * before its network kernels gather them (moe_result_row). An owner that gave up waiting
 * does not say so: the ranks that wait for it give up in turn, rather than read terms it
 * may not have written, and a rank that gave up in the step waits for none in its later
 * rounds (it returns none of their terms). The last block carries the experts' rows over
 * to the next round (round_base; back to 0 after the step's last).
 */
KERNEL_FN void intra_moe_combine_round_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    uint64_t step = moe_step(a, 0, g), ordinal = moe_next_ordinal(&control->combine_rounds, g);
    int withhold = kernel_load_relaxed_u64(&control->withheld) == step;

    if (moe_net_failed(a)) {
        return;
    }
    if (g.block == 0 && KERNEL_LEADER(g)) {
        kernel_store_release_u64(&control->round_ready, ordinal);
    }
    if (moe_wait_round(a, 1, ordinal, step, g) && !withhold) {
        moe_push_round(a, g);
    }
    if (moe_last_block(&control->round_push_done, ordinal, g)) {
        int32_t *before = MOE_AT(a, a->rank, round_base, int32_t);

        for (int local = 0; local < a->experts_per_rank; ++local) {
            before[local] = a->more_rounds ? before[local] + moe_round_rows(a, local) : 0;
        }
        control->combine_rounds = ordinal; /* for the next round, after this one */
        if (kernel_load_relaxed_u64(&control->combine_failed_step) != step) {
            for (int r = 0; r < a->num_ranks; ++r) {
                /* release: the terms written there */
                kernel_store_release_u64(&moe_control(a, r)->round_flag[a->rank], ordinal);
            }
        }
    }
    moe_wait_round(a, 0, ordinal, step, g);
}

/*
 * Node-reduce: out[t] = sum over the nodes in order of each node's partial, in fp32,
 * rounded once. This node's partial is the sum over its slots k, in order, of
 * topk_weights[t][k] * y(t, k) in fp32; another node's is the row it returned (summed
 * there the same way, then rounded to the combine dtype), at term_src of the token's first
 * slot on that node (its other slots there: 0).
 */
KERNEL_FN void moe_reduce_nodes(const intra_moe_args_t *a, int t, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    size_t base = (size_t)t * (size_t)a->topk;
    char *out = (char *)a->out + (size_t)t * (size_t)a->y_row_bytes;

    for (int h0 = (int)g.thread * MOE_COMBINE_TILE; h0 < a->hidden;
         h0 += (int)g.num_threads * MOE_COMBINE_TILE) {
        int len = a->hidden - h0 < MOE_COMBINE_TILE ? a->hidden - h0 : MOE_COMBINE_TILE;
        float acc[MOE_COMBINE_TILE], part[MOE_COMBINE_TILE];

        for (int j = 0; j < len; ++j) {
            acc[j]  = 0.0f;
            part[j] = 0.0f;
        }
        for (int node = 0; node < n->num_nodes; ++node) {
            for (int k = 0; k < a->topk; ++k) {
                const char *row = (const char *)(uintptr_t)a->term_src[base + (size_t)k];
                int64_t expert = n->clean_idx[base + (size_t)k];

                if (row == 0 || expert < 0 ||
                    n->rank_node[expert / n->experts_per_rank] != node) {
                    continue;
                }
                if (node == n->node) {
                    moe_accumulate(part, row, h0, len, a->topk_weights[base + (size_t)k],
                                   a->y_elem);
                } else {
                    moe_accumulate(acc, row, h0, len, 1.0f, a->y_elem); /* 1 x row: exact */
                }
            }
            for (int j = 0; node == n->node && j < len; ++j) {
                acc[j] = kernel_add_f32(acc[j], part[j]);
            }
        }
        moe_store_tile(out, h0, len, a->y_elem, acc);
    }
}

/* out[t] = sum over k of topk_weights[t][k] * y(t, k), with y(t, k) at term_src[t][k] (0:
 * no term), in fp32, k in order: the last stage of a combine whose terms came from several
 * places, read where they landed. Node-reduce: moe_reduce_nodes. */
KERNEL_FN void intra_moe_reduce_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const char *rows[INTRA_MOE_MAX_TOPK];
    float weights[INTRA_MOE_MAX_TOPK];

    if (moe_net_failed(a)) {
        return;
    }
    for (int t = (int)g.block; a->net.node_reduce && t < a->num_tokens; t += (int)g.num_blocks) {
        moe_reduce_nodes(a, t, g);
    }
    for (int t = (int)g.block; !a->net.node_reduce && t < a->num_tokens;
         t += (int)g.num_blocks) {
        int n = 0;

        for (int k = 0; k < a->topk; ++k) {
            size_t entry = (size_t)t * (size_t)a->topk + (size_t)k;

            if (a->term_src[entry] != 0) {
                rows[n] = (const char *)(uintptr_t)a->term_src[entry];
                weights[n++] = a->topk_weights[entry];
            }
        }
        moe_sum_rows(a, rows, weights, n, (char *)a->out + (size_t)t * (size_t)a->y_row_bytes,
                     g);
    }
}

#endif
