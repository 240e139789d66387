/*
 * The network kernels' combine half (net_kernels.h): NET_RETURN posts each peer's terms
 * back (or, with node-reduce, weights and then one weighted partial row per token), and
 * NET_TERMS waits for our tokens' terms and our own transfers.
 */
#ifndef STRATA_INTRA_NET_COMBINE_H
#define STRATA_INTRA_NET_COMBINE_H

#include "net_common.h"

/* --- NET_RETURN and NET_TERMS --------------------------------------------------------- */

/* The withheld count of a block's drops words: flagged where an owner here gave up, or
 * this rank gave up waiting for the owners' results (held, moe_withheld_ranks). */
KERNEL_FN int64_t net_withheld_word(uint32_t held, int64_t withheld)
{
    return withheld > 0 && moe_held_any_gave_up(held)
               ? (int64_t)((uint64_t)withheld | INTRA_NET_DROPS_GAVE_UP)
               : withheld;
}

/* Of the terms this node returns to peer p, those it has no row for (the node's combine
 * put zeros in their place), in the block's drops words: [0] dropped for capacity here,
 * [1] withheld by an owner here that aborted the step (or gave up: net_withheld_word). */
KERNEL_FN void net_missing_terms(const intra_moe_args_t *a, const intra_net_peer_t *peer,
                                 int64_t *drops)
{
    const int32_t *route = MOE_AT(a, a->rank, route, int32_t);
    uint32_t held = moe_withheld_ranks(a);
    int64_t dropped = 0, withheld = 0;

    for (int q = 0; q < peer->recv_push + peer->recv_pull; ++q) {
        int t = peer->aug_first + q;

        for (int k = 0; k < a->topk; ++k) {
            int expert = route[(size_t)t * (size_t)a->topk + (size_t)k];

            if (expert >= 0 && moe_result_row(a, held, t, k) == 0) {
                int by_owner = moe_withheld(a, held, expert);

                withheld += by_owner;
                dropped += !by_owner;
            }
        }
    }
    drops[0] = dropped;
    drops[1] = net_withheld_word(held, withheld);
}

/* --- The streamed exchange's combine (NET_RETURN once per round) ------------------------ */

/* In rounds: our ret_out block for peer p in the wire step's round (one of two buffers). */
KERNEL_FN uint64_t net_round_out(const intra_net_args_t *n, uint64_t step, int p)
{
    return n->ret_out + (net_ret_buffer(n, step) * (uint64_t)n->num_peers + (uint64_t)p) *
                            n->ret_out_block;
}

/* The whole block: the round's block for peer p, its rows written, then the counts of the
 * terms missing here after them, posted to where p's header of the round said. */
KERNEL_FN int net_post_round(const intra_moe_args_t *a, int p, uint64_t step, uint64_t rows,
                             const int64_t *missing, uint32_t held, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    uint64_t out = net_round_out(n, step, p), y = (uint64_t)a->y_row_bytes;

    if (KERNEL_LEADER(g)) {
        ((int64_t *)(n->area + out + rows * y))[0] = missing[0];
        ((int64_t *)(n->area + out + rows * y))[1] = net_withheld_word(held, missing[1]);
    }
    return net_post_block(a, g, n->peers[p].rank, out,
                          n->ret_in + net_ret_buffer(n, step) * n->ret_in_bytes +
                              (uint64_t)net_round_seg(n, n->round, p)[2],
                          rows * y + INTRA_NET_DROPS_BYTES,
                          net_buffer_imm(n, INTRA_NET_IMM_COMBINE, step));
}

/*
 * The whole block, round r: the terms of the entries peer p sent us in dispatch round r,
 * gathered where their owners published them (every expert combines in Pull form), zeros
 * for those missing, then the counts of those, into our ret_out buffer for p, posted to
 * where p's header of the round said. The slots with a term are those of the records
 * NET_INDEX checked against p's block (aug_topk), whatever the node's tables hold if its
 * dispatch failed. Every round and peer, even with no terms: the transfer is also p's
 * credit for the buffer of the round after next (it waits for it in NET_TERMS before it
 * sends again).
 */
KERNEL_FN int net_return_round(const intra_moe_args_t *a, int p, uint64_t step, uint32_t held,
                               kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    const int64_t *seg = net_round_seg(n, n->round, p);
    size_t y = (size_t)a->y_row_bytes, term = 0;
    char *out = n->area + net_round_out(n, step, p);
    int64_t missing[2] = {0, 0};

    for (int64_t t = seg[0]; t < seg[0] + seg[1]; ++t) {
        for (int k = 0; k < a->topk; ++k) {
            int64_t expert = n->aug_topk[(size_t)t * (size_t)a->topk + (size_t)k];
            const char *row = expert >= 0 ? moe_result_row(a, held, (int)t, k) : 0;
            char *dst = out + term * y;

            if (expert < 0) {
                continue;
            }
            term += 1;
            if (row != 0) {
                if (row != dst) { /* the exact receive's owners may have written it here */
                    kernel_copy_block(dst, row, y, g);
                }
                continue;
            }
            for (size_t j = g.thread; j < y; j += g.num_threads) {
                dst[j] = 0;
            }
            missing[moe_withheld(a, held, (int)expert)] += 1;
        }
    }
    return net_post_round(a, p, step, term, missing, held, g);
}

/* Every thread: where reduce finds this round's own tokens' terms computed on this node:
 * the rows their owners published; none for those missing, reported (the step's input). */
KERNEL_FN void net_local_round_terms(const intra_moe_args_t *a, uint32_t held, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    const int64_t *own = net_round_seg(n, n->round, n->num_peers);
    const int32_t *route = MOE_AT(a, a->rank, route, int32_t);
    size_t first = (size_t)net_own_first(n) * (size_t)a->topk;
    size_t slots = (size_t)own[1] * (size_t)a->topk, base = (size_t)own[0] * (size_t)a->topk;

    for (size_t i = g.block * g.num_threads + g.thread; i < slots;
         i += (size_t)g.num_blocks * g.num_threads) {
        int token = (int)((first + i) / (size_t)a->topk), k = (int)((first + i) % (size_t)a->topk);
        const char *row;

        if (n->node_idx[first + i] < 0) {
            continue; /* another node's, or none */
        }
        row = moe_result_row(a, held, (int)((base + i) / (size_t)a->topk), k);
        n->term_src[first + i] = (uint64_t)(uintptr_t)row;
        if (row == 0) {
            moe_report_missing(a, held, route[base + i], token, k);
        }
    }
}

/* --- Node-reduce combine (NET_RETURN launched from combine_recv) ----------------------- */

/* Node-reduce: one block of w_out or w_in, a peer's weights: of the step's entries, or in
 * rounds of one round's (then two buffers of blocks, by the parity of the round's wire
 * step, as ret_in). */
KERNEL_FN size_t net_weights_block(const intra_moe_args_t *a)
{
    const intra_net_args_t *n = &a->net;

    return (size_t)(n->rounds > 1 ? n->window_tokens : n->max_tokens) * (size_t)a->topk *
           sizeof(float);
}

/* Where the block of peer index p is in w_out or w_in for the wire step's round. */
KERNEL_FN uint64_t net_weights_at(const intra_moe_args_t *a, uint64_t step, int p)
{
    const intra_net_args_t *n = &a->net;

    return (net_ret_buffer(n, step) * (uint64_t)n->num_peers + (uint64_t)p) *
           (uint64_t)net_weights_block(a);
}

/* The whole block: the weights of the tokens we sent peer p (in rounds, in dispatch round
 * r, whose wire step is step), in its staging order, to the node that holds their terms. */
KERNEL_FN int net_send_weights(const intra_moe_args_t *a, int p, int r, uint64_t step,
                               kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    const intra_net_peer_t *peer = &n->peers[p];
    size_t topk = (size_t)a->topk;
    float *out = (float *)(n->area + n->w_out + net_weights_at(a, step, p));
    int begin, end;

    net_entries_of_round(n, p, r, &begin, &end);
    if (begin == end) {
        return 1;
    }
    for (int e = begin + (int)g.thread; e < end; e += (int)g.num_threads) {
        for (size_t k = 0; k < topk; ++k) { /* none: this rank aborted the step */
            out[(size_t)n->slot_of[e] * topk + k] =
                n->topk_weights != NULL ? n->topk_weights[(size_t)n->tokens[e] * topk + k]
                                        : 0.0f;
        }
    }
    return net_post_block(a, g, peer->rank, n->w_out + net_weights_at(a, step, p),
                          n->w_in + net_weights_at(a, step, peer->index_there),
                          (uint64_t)(end - begin) * topk * sizeof(float),
                          net_buffer_imm(n, INTRA_NET_IMM_WEIGHTS, step));
}

/* One thread: peer p's weights for the tokens it sent us (in the wire step's round) have
 * landed. */
KERNEL_FN int net_wait_weights(const intra_moe_args_t *a, int p, int entries, uint64_t step)
{
    const intra_net_args_t *n = &a->net;
    intra_net_peer_t *peer = &n->peers[p];
    uint64_t *seen = &peer->weights_seen[net_ret_buffer(n, step)];

    *seen += net_chunks(n, (uint64_t)entries * (uint64_t)a->topk * sizeof(float));
    return net_wait(a,
                    &n->imms[net_imm_index(n, net_buffer_imm(n, INTRA_NET_IMM_WEIGHTS, step),
                                           peer->rank)],
                    *seen, peer->rank, INTRA_NET_WAIT_WEIGHTS);
}

/*
 * The whole block: for each token peer p sent us, in that order, the sum over its terms on
 * this node of weight x term in fp32 in k order, as one row in the combine dtype; then the
 * counts of terms missing here; all in one transfer. In the heap the partial rows overwrite
 * the terms they come from, safely: entry q's terms start at row q or later, so row q is
 * read only by entries up to q, and each thread writes only the columns it reads.
 */
KERNEL_FN int net_send_partials(const intra_moe_args_t *a, int p, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    intra_net_peer_t *peer = &n->peers[p];
    size_t topk = (size_t)a->topk, y = (size_t)a->y_row_bytes;
    size_t block = (size_t)n->ret_out_block;
    const char *terms = a->heap[a->rank] + n->ret_stage + (size_t)p * block;
    char *out = n->area + n->ret_out + (size_t)p * block;
    const float *w = (const float *)(n->area + n->w_in + net_weights_at(a, 0, p));
    int entries = peer->recv_push + peer->recv_pull, term = 0;
    KERNEL_SHARED int ok;

    if (entries == 0) {
        return 1;
    }
    if (KERNEL_LEADER(g)) {
        ok = net_wait_weights(a, p, entries, 0);
    }
    kernel_block_sync();
    if (!ok) {
        return 0;
    }
    for (int q = 0; q < entries; ++q) {
        const int64_t *experts = &n->aug_topk[(size_t)(peer->aug_first + q) * topk];
        const char *rows[INTRA_MOE_MAX_TOPK];
        float weights[INTRA_MOE_MAX_TOPK];
        int m = 0;

        for (size_t k = 0; k < topk; ++k) {
            if (experts[k] >= 0) {
                rows[m]      = terms + (size_t)term++ * y;
                weights[m++] = w[(size_t)q * topk + k];
            }
        }
        moe_sum_rows(a, rows, weights, m, out + (size_t)q * y, g);
    }
    kernel_block_sync(); /* every partial is out before the count lands past them */
    if (KERNEL_LEADER(g)) {
        net_missing_terms(a, peer, (int64_t *)(out + (size_t)entries * y));
    }
    return net_post_block(a, g, peer->rank, n->ret_out + (uint64_t)p * block,
                          n->ret_in + (uint64_t)peer->ret_at,
                          (uint64_t)entries * y + INTRA_NET_DROPS_BYTES, INTRA_NET_IMM_COMBINE);
}

/* Every peer's weights go out before any block waits for one, so no rank waits on a rank
 * that waits on it; then each peer's partial rows, once its weights are in. */
KERNEL_FN void net_node_reduce(const intra_moe_args_t *a, kernel_grid_t g)
{
    for (int p = (int)g.block; p < a->net.num_peers; p += (int)g.num_blocks) {
        if (!net_send_weights(a, p, 0, 0, g)) {
            return;
        }
    }
    for (int p = (int)g.block; p < a->net.num_peers; p += (int)g.num_blocks) {
        if (!net_send_partials(a, p, g)) {
            return;
        }
    }
}

/*
 * Node-reduce, round r, the whole block: for each entry peer p sent us in dispatch round r,
 * once p's weights of the round are in, the sum over its terms here of weight x term, in
 * fp32 in k order, gathered where their owners published them (a term missing here adds
 * nothing and is counted), as one row in the combine dtype; then the counts; into our
 * ret_out buffer for p, posted where p's header of the round said. Every round and peer,
 * even with no entries: the credit net_return_round's block is.
 */
KERNEL_FN int net_partials_round(const intra_moe_args_t *a, int p, uint64_t step, uint32_t held,
                                 kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    const int64_t *seg = net_round_seg(n, n->round, p);
    const float *w = (const float *)(n->area + n->w_in + net_weights_at(a, step, p));
    size_t topk = (size_t)a->topk, y = (size_t)a->y_row_bytes;
    char *out = n->area + net_round_out(n, step, p);
    int64_t missing[2] = {0, 0};
    KERNEL_SHARED int ok;

    if (KERNEL_LEADER(g)) {
        ok = seg[1] == 0 || net_wait_weights(a, p, (int)seg[1], step);
    }
    kernel_block_sync();
    if (!ok) {
        return 0;
    }
    for (int64_t q = 0; q < seg[1]; ++q) {
        const int64_t *experts = &n->aug_topk[(size_t)(seg[0] + q) * topk];
        const char *rows[INTRA_MOE_MAX_TOPK];
        float weights[INTRA_MOE_MAX_TOPK];
        int m = 0;

        for (size_t k = 0; k < topk; ++k) {
            const char *row = experts[k] >= 0
                                  ? moe_result_row(a, held, (int)(seg[0] + q), (int)k)
                                  : 0;

            if (row != 0) {
                rows[m]      = row;
                weights[m++] = w[(size_t)q * topk + k];
            } else if (experts[k] >= 0) {
                missing[moe_withheld(a, held, (int)experts[k])] += 1;
            }
        }
        moe_sum_rows(a, rows, weights, m, out + (size_t)q * y, g);
    }
    return net_post_round(a, p, step, (uint64_t)seg[1], missing, held, g);
}

/* Node-reduce in rounds, the whole block: our weights for peer p go out a round ahead (the
 * first round sends those of the first two), so that a block waits only in round 0 for
 * weights posted in the same launch. The buffer of w_in that round r+1's weights fill was
 * last read for round r-1, by the peer's launch that sent its block of round r-1, which our
 * NET_TERMS waited for before this launch; so was our w_out buffer's last transfer of it. */
KERNEL_FN int net_send_weights_ahead(const intra_moe_args_t *a, int p, uint64_t step,
                                     kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;

    return (n->round > 0 || net_send_weights(a, p, 0, step, g)) &&
           (n->round + 1 == n->rounds || net_send_weights(a, p, n->round + 1, step + 1, g));
}

/*
 * In rounds: this round's own tokens' terms found here, and each peer's block of the round
 * (with node-reduce, every peer's weights first, then its partial rows). The ret_out buffer
 * was last sent from two rounds ago, and that block has arrived: the peer waited for it
 * (NET_TERMS) before it sent its block of the round before this one, which our NET_TERMS
 * waited for before this launch.
 */
KERNEL_FN void net_return_rounds(const intra_moe_args_t *a, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    uint64_t step = net_step(a, g);
    uint32_t held = moe_withheld_ranks(a);

    net_local_round_terms(a, held, g);
    for (int p = (int)g.block; n->node_reduce && p < n->num_peers; p += (int)g.num_blocks) {
        if (!net_send_weights_ahead(a, p, step, g)) {
            return;
        }
    }
    for (int p = (int)g.block; p < n->num_peers; p += (int)g.num_blocks) {
        if (!(n->node_reduce ? net_partials_round(a, p, step, held, g)
                             : net_return_round(a, p, step, held, g))) {
            return;
        }
    }
}

/* Each peer's terms, with the counts of those missing here after them, in one transfer. */
KERNEL_FN void intra_net_return_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    size_t block = (size_t)n->ret_out_block;

    if (net_block_stopped(a, g)) {
        return;
    }
    if (n->rounds > 1) {
        net_return_rounds(a, g);
        return;
    }
    if (n->node_reduce) {
        net_node_reduce(a, g);
        return;
    }
    for (int p = (int)g.block; p < n->num_peers; p += (int)g.num_blocks) {
        const intra_net_peer_t *peer = &n->peers[p];
        size_t terms = (size_t)peer->num_terms * (size_t)a->y_row_bytes;
        char *stage = a->heap[a->rank] + n->ret_stage + (size_t)p * block;

        if (terms == 0) {
            continue;
        }
        if (KERNEL_LEADER(g)) {
            net_missing_terms(a, peer, (int64_t *)(stage + terms));
        }
        kernel_block_sync(); /* the count is in before the bounce copies it */
        if (n->bounce) { /* the owners wrote them in the heap; they leave from the area */
            kernel_copy_block(n->area + n->ret_out + (size_t)p * block, stage,
                              terms + INTRA_NET_DROPS_BYTES, g);
        }
        if (!net_post_block(a, g, peer->rank, n->ret_out + (uint64_t)p * block,
                            n->ret_in + (uint64_t)peer->ret_at, terms + INTRA_NET_DROPS_BYTES,
                            INTRA_NET_IMM_COMBINE)) {
            return;
        }
    }
}

/* Our tokens' terms from every peer (in rounds, the round's), and after the last round
 * every transfer of ours done: the step is over here, and its areas may be written again. */
KERNEL_FN void intra_net_terms_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    uint64_t step = net_step(a, g);
    const char *ret_in = n->area + n->ret_in + net_ret_buffer(n, step) * n->ret_in_bytes;

    if (g.block != 0 || !KERNEL_LEADER(g) || net_stopped(a)) {
        return;
    }
    /* at: where peer p's block starts in ret_in (net_ret_at, kept as the loop goes); in
     * rounds every peer sends a block, even without terms */
    for (uint64_t p = 0, at = 0, terms = 0; p < (uint64_t)n->num_peers;
         ++p, at += terms + INTRA_NET_DROPS_BYTES) {
        intra_net_peer_t *peer = &n->peers[p];
        const uint64_t *drops;
        uint64_t *seen;

        terms = net_ret_rows(a, (int)p) * (uint64_t)a->y_row_bytes;
        if (terms == 0 && n->rounds == 1) {
            continue;
        }
        seen = &peer->combine_seen[net_ret_buffer(n, step)];
        *seen += net_chunks(n, terms + INTRA_NET_DROPS_BYTES);
        if (!net_wait(a,
                      &n->imms[net_imm_index(n, net_buffer_imm(n, INTRA_NET_IMM_COMBINE, step),
                                             peer->rank)],
                      *seen, peer->rank, INTRA_NET_WAIT_TERMS)) {
            return;
        }
        drops = (const uint64_t *)(ret_in + at + terms);
        for (int why = 0; why < 2; ++why) { /* reported, not waited on */
            uint64_t missing = kernel_load_acquire_u64(&drops[why]);
            int code = why == 0 ? INTRA_MOE_KERNEL_TERMS_DROPPED
                                : INTRA_MOE_KERNEL_TERMS_WITHHELD;

            if (why == 1 && (missing & INTRA_NET_DROPS_GAVE_UP) != 0) {
                code     = INTRA_MOE_KERNEL_TERMS_GAVE_UP;
                missing &= ~INTRA_NET_DROPS_GAVE_UP;
            }
            if (missing > 0) {
                moe_report(&moe_control(a, a->rank)->combine_status, code, peer->rank, -1,
                           -1, (int64_t)missing);
            }
        }
    }
    if (n->round + 1 < n->rounds) {
        return; /* the step goes on: its next combine round */
    }
    if (net_wait(a, &n->counters[INTRA_NET_COUNTER_SEND], n->state->posted, -1,
                 INTRA_NET_WAIT_SENDS) &&
        net_wait(a, &n->counters[INTRA_NET_COUNTER_READ], n->state->reads, -1,
                 INTRA_NET_WAIT_READS)) {
        /* the steps completed: the wire protocol's count goes on from there (net_step) */
        kernel_store_release_u64(&n->state->step, kernel_load_relaxed_u64(&n->state->step) + 1);
    }
}

#endif
