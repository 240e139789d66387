/*
 * The network kernels' dispatch half (net_kernels.h): NET_SEND packs and posts each peer's
 * entries, NET_RECV exchanges headers and round two and waits for the data, NET_INDEX
 * checks every received record and tells the node's kernels where each token is.
 */
#ifndef STRATA_INTRA_NET_DISPATCH_H
#define STRATA_INTRA_NET_DISPATCH_H

#include "net_common.h"
#include "net_wire.h"

/* --- NET_SEND ------------------------------------------------------------------------- */

/* Whether every expert an entry has at the peer's node moves in Pull form. */
KERNEL_FN int net_entry_pulls(const intra_moe_args_t *a, int node, const int32_t *experts)
{
    const intra_net_args_t *n = &a->net;
    int any = 0;

    for (int k = 0; k < a->topk; ++k) {
        int j = experts[k];

        if (j >= 0) {
            int owner = n->node_ranks[node * n->local_size + j / n->experts_per_rank];
            int global = owner * n->experts_per_rank + j % n->experts_per_rank;

            if (!((n->mask[global >> 6] >> (global & 63)) & 1u)) {
                return 0;
            }
            any = 1;
        }
    }
    return any;
}

/* Node-reduce: the partial row of entry e comes back at row; its token's first slot on
 * that node points at it, the token's other slots there at nothing. */
KERNEL_FN void net_partial_src(const intra_moe_args_t *a, int e, const char *row)
{
    const intra_net_args_t *n = &a->net;
    const int32_t *experts = &n->experts[(size_t)e * (size_t)a->topk];
    uint64_t *src = &n->term_src[(size_t)n->tokens[e] * (size_t)a->topk];
    int first = 1;

    for (int k = 0; k < a->topk; ++k) {
        if (experts[k] >= 0) {
            src[k] = first ? (uint64_t)(uintptr_t)row : 0;
            first  = 0;
        }
    }
}

/*
 * One thread: the peer's entries of this round in staging order (Push ones first, then
 * Pull), and where each of their terms will come back: the peer returns them in that order,
 * packed, into our ret_in block for it (in rounds, in the round's buffer of ret_in).
 */
KERNEL_FN void net_order_peer(const intra_moe_args_t *a, int p, uint64_t step)
{
    const intra_net_args_t *n = &a->net;
    intra_net_peer_t *peer = &n->peers[p];
    char *back = n->area + n->ret_in + net_ret_buffer(n, step) * n->ret_in_bytes +
                 net_ret_at(a, p);
    int begin, end, slot = 0, count[2] = {0, 0}, spec, term = 0;

    net_round_entries(n, p, &begin, &end);
    for (int pass = 0; pass < 2; ++pass) {
        for (int e = begin; e < end; ++e) {
            const int32_t *experts = &n->experts[(size_t)e * (size_t)a->topk];

            if (net_entry_pulls(a, peer->node, experts) != pass) {
                continue;
            }
            n->slot_of[e] = slot++;
            count[pass] += 1;
            if (n->node_reduce) { /* one partial row per entry, in staging order */
                net_partial_src(a, e, back + (size_t)(slot - 1) * (size_t)a->y_row_bytes);
                continue;
            }
            for (int k = 0; k < a->topk; ++k) {
                if (experts[k] >= 0) {
                    n->term_src[(size_t)n->tokens[e] * (size_t)a->topk + (size_t)k] =
                        (uint64_t)(uintptr_t)(back + (size_t)term++ * (size_t)a->y_row_bytes);
                }
            }
        }
    }
    spec             = count[0] < n->spec_tokens ? count[0] : n->spec_tokens;
    peer->send_push  = count[0];
    peer->send_pull  = count[1];
    peer->step_sent  = (n->round > 0 ? peer->step_sent : 0) + count[0] + count[1];
    peer->step_later = (n->round > 0 ? peer->step_later : 0) + count[0] - spec +
                       (n->pull_read ? 0 : count[1]);
}

/* The whole block: the peer's entries of this round, [record][row][scales], into its
 * staging. */
KERNEL_FN void net_pack_peer(const intra_moe_args_t *a, int p, char *staging, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    int begin, end;

    net_round_entries(n, p, &begin, &end);
    for (int e = begin; e < end; ++e) {
        char *entry = staging + (size_t)n->slot_of[e] * (size_t)n->entry_bytes;
        int32_t *record = (int32_t *)entry;
        int token = n->tokens[e];

        for (int k = (int)g.thread; k <= a->topk; k += (int)g.num_threads) {
            record[k] = k == 0 ? token : n->experts[(size_t)e * (size_t)a->topk + (size_t)(k - 1)];
        }
        moe_copy_token(a, entry + n->record_bytes,
                       (float *)(entry + n->record_bytes + a->row_bytes),
                       (const char *)n->x + (size_t)token * (size_t)a->row_bytes,
                       a->scale_count > 0 ? n->x_scales + (size_t)token * (size_t)a->scale_count
                                          : 0,
                       g);
    }
}

/* One thread: the header: the round's counts, our modes, where our tokens' terms return;
 * in a step's first round in rounds, the step's counts. */
KERNEL_FN int net_send_header(const intra_moe_args_t *a, int p, uint64_t step)
{
    const intra_net_args_t *n = &a->net;
    const intra_net_peer_t *peer = &n->peers[p];
    uint64_t out = n->out_headers + (uint64_t)peer->rank * (uint64_t)n->header_bytes;
    intra_net_header_t *h = (intra_net_header_t *)(n->area + out);
    uint64_t *next = (uint64_t *)(h + 1);

    h->magic       = INTRA_NET_HEADER_MAGIC;
    h->pad         = 0;
    h->step        = step;
    h->num_push    = peer->send_push;
    h->num_pull    = peer->send_pull;
    h->mask_digest = n->digest;
    h->ret_at      = (int64_t)net_ret_at(a, p);
    for (int w = 0; w < n->own_words; ++w) {
        next[w] = n->next[w];
    }
    if (n->header_counts > 0 && n->round == 0) { /* the layout's counts for p's node */
        int32_t *counts = (int32_t *)(next + n->own_words);

        for (int e = 0; e < n->header_counts; ++e) {
            counts[e] = n->plan_counts[(size_t)p * (size_t)n->header_counts + (size_t)e];
        }
    }
    if (!net_post(a, UTIL_WORK_WRITE_IMM, peer->rank, out,
                  n->headers + ((uint64_t)n->rank * 2 + (step & 1)) * (uint64_t)n->header_bytes,
                  (uint64_t)n->header_bytes,
                  n->imm_base + net_imm_index(n, INTRA_NET_IMM_HEADER, n->rank),
                  INTRA_NET_COUNTER_SEND)) {
        return 0;
    }
    net_count_posted(a, 1);
    return 1;
}

/* One thread: round one, the first Push entries, into our private slot at the peer. */
KERNEL_FN int net_send_spec(const intra_moe_args_t *a, int p, uint64_t step)
{
    const intra_net_args_t *n = &a->net;
    const intra_net_peer_t *peer = &n->peers[p];
    int first = peer->send_push < n->spec_tokens ? peer->send_push : n->spec_tokens;
    int64_t spec;

    if (first == 0) {
        return 1;
    }
    spec = net_post_chunks(a, UTIL_WORK_WRITE_IMM, peer->rank, net_staging_at(n, step, p),
                           n->spec + (uint64_t)peer->index_there *
                                         (uint64_t)n->spec_tokens * (uint64_t)n->entry_bytes,
                           (uint64_t)first * (uint64_t)n->entry_bytes,
                           n->imm_base + net_imm_index(n, INTRA_NET_IMM_SPEC, n->rank),
                           INTRA_NET_COUNTER_SEND);
    if (spec < 0) {
        return 0;
    }
    net_count_posted(a, spec);
    return 1;
}

/* Own tokens' terms computed on this node: where reduce finds them (in rounds, found by
 * NET_RETURN once their rows are known). Those on other nodes are set by net_order_peer;
 * slots routed nowhere have none. Every round's own tokens at once, in the step's first. */
KERNEL_FN void net_local_terms(const intra_moe_args_t *a, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    size_t slots = (size_t)n->num_own * (size_t)a->topk;

    for (size_t i = g.block * g.num_threads + g.thread; i < slots;
         i += (size_t)g.num_blocks * g.num_threads) {
        if (n->node_idx[i] >= 0) {
            n->term_src[i] = n->rounds > 1 ? 0
                                           : (uint64_t)(uintptr_t)(a->heap[a->rank] + n->terms +
                                                                   i * (size_t)a->y_row_bytes);
        } else if (n->clean_idx[i] < 0) {
            n->term_src[i] = 0;
        }
    }
}

/* The whole block: the peer's entries ordered and packed into its staging, then (thread 0)
 * the header; round one too unless the block must wait for the peer's credit first. */
KERNEL_FN int net_send_peer(const intra_moe_args_t *a, int p, uint64_t step, int with_spec,
                            kernel_grid_t g)
{
    KERNEL_SHARED int ok;

    if (KERNEL_LEADER(g)) {
        net_order_peer(a, p, step);
    }
    kernel_block_sync();
    net_pack_peer(a, p, a->net.area + net_staging_at(&a->net, step, p), g);
    kernel_fence_system(); /* each thread's part of the entries, before the posts */
    kernel_block_sync();
    if (KERNEL_LEADER(g)) {
        ok = net_send_header(a, p, step) && (!with_spec || net_send_spec(a, p, step));
    }
    kernel_block_sync();
    return ok;
}

/*
 * One thread, before a later round of a step's dispatch is packed: our transfers so far are
 * done, so staging may be written again. Our spec and overflow areas are free too: only our
 * own dispatch of the round before read them (it copies each row on, to its owner or to the
 * rows it publishes for Pull), and it ran before this launch; so the header we send each
 * peer next is its credit to write them again.
 */
KERNEL_FN int net_round_ready(const intra_moe_args_t *a)
{
    const intra_net_args_t *n = &a->net;

    return net_wait(a, &n->counters[INTRA_NET_COUNTER_SEND],
                    kernel_load_relaxed_u64(&n->state->posted), -1, INTRA_NET_WAIT_SENDS);
}

/* One thread, in a later round: the peer's header of this round, its credit, before round
 * one goes into its slot for us. */
KERNEL_FN int net_send_credited_spec(const intra_moe_args_t *a, int p, uint64_t step)
{
    const intra_net_args_t *n = &a->net;
    const intra_net_peer_t *peer = &n->peers[p];

    if (peer->send_push == 0 || n->spec_tokens == 0) {
        return 1;
    }
    return net_wait(a, &n->imms[net_imm_index(n, INTRA_NET_IMM_HEADER, peer->rank)], step,
                    peer->rank, INTRA_NET_WAIT_ROUND) &&
           net_send_spec(a, p, step);
}

/*
 * A step's first round: per peer, order, pack, header and round one. A later round first
 * waits for net_round_ready, then sends every header of the block's peers before it waits
 * for any peer's (each rank's headers go out without waiting on another rank, so no two
 * ranks wait on each other), and writes each peer's round one once its header came.
 */
KERNEL_FN void intra_net_send_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    uint64_t step = net_step(a, g);
    int later = n->round > 0;
    KERNEL_SHARED int ok;

    if (net_block_stopped(a, g)) {
        return;
    }
    if (!later) {
        net_local_terms(a, g);
    } else {
        if (KERNEL_LEADER(g)) {
            ok = net_round_ready(a);
        }
        kernel_block_sync();
        if (!ok) {
            return;
        }
    }
    for (int p = (int)g.block; p < n->num_peers; p += (int)g.num_blocks) {
        if (!net_send_peer(a, p, step, !later, g)) {
            return;
        }
    }
    for (int p = (int)g.block; later && KERNEL_LEADER(g) && p < n->num_peers;
         p += (int)g.num_blocks) {
        if (!net_send_credited_spec(a, p, step)) {
            return;
        }
    }
}

/* --- NET_RECV ------------------------------------------------------------------------- */

KERNEL_FN void net_protocol_error(const intra_moe_args_t *a, int peer, int what, uint64_t step)
{
    moe_report(net_status(a), INTRA_MOE_KERNEL_NET_PROTOCOL, peer, what, -1, (int64_t)step);
}

/* The most entries a peer sends us in this round: its own tokens of the round, at most. */
KERNEL_FN int32_t net_round_limit(const intra_net_args_t *n)
{
    int64_t left = (int64_t)n->max_tokens - (int64_t)n->round * n->window_tokens;

    return left < n->window_tokens ? (int32_t)left : n->window_tokens;
}

/* One thread, in a step's first round in rounds: our own tokens' rows into our node over
 * the whole step, per expert of the node (the layout's), which the peers' header counts then
 * add to. */
KERNEL_FN void net_own_step_counts(const intra_net_args_t *n)
{
    const int32_t *own = n->plan_counts + (size_t)n->num_peers * (size_t)n->header_counts;

    for (int e = 0; e < n->header_counts; ++e) {
        n->step_counts[e] = own[e];
    }
}

/* Every peer's header for this wire step (a round, in rounds): its counts, checked against
 * the round's tokens (so a step's entries never pass max_tokens), and its modes agreeing;
 * in a step's first round in rounds, its step counts, summed into step_counts. */
KERNEL_FN int net_read_headers(const intra_moe_args_t *a, uint64_t step)
{
    const intra_net_args_t *n = &a->net;
    int step_counts = n->header_counts > 0 && n->round == 0;

    if (step_counts) {
        net_own_step_counts(n);
    }
    for (int p = 0; p < n->num_peers; ++p) {
        intra_net_peer_t *peer = &n->peers[p];
        const volatile intra_net_header_t *wire = (const volatile intra_net_header_t *)(
            n->area + n->headers + ((uint64_t)peer->rank * 2 + (step & 1)) *
                                       (uint64_t)n->header_bytes);
        intra_net_header_t h;
        int verdict;

        if (!net_wait(a, &n->imms[net_imm_index(n, INTRA_NET_IMM_HEADER, peer->rank)], step,
                      peer->rank, INTRA_NET_WAIT_HEADER)) {
            return 0;
        }
        h       = net_header_read(wire);
        verdict = net_header_check(&h, step, net_round_limit(n), n->digest);
        if (verdict == NET_WIRE_BAD) {
            net_protocol_error(a, peer->rank, INTRA_NET_WAIT_HEADER, h.step);
            return 0;
        }
        if (verdict == NET_WIRE_OTHER_MODES) {
            moe_report(net_status(a), INTRA_MOE_KERNEL_MODES, peer->rank, -1, -1, 0);
            return 0;
        }
        if (step_counts &&
            !net_header_counts_add((const volatile int32_t *)((const volatile uint64_t *)(
                                       wire + 1) + n->own_words),
                                   n->header_counts,
                                   (int64_t)n->max_tokens * (int64_t)n->entry_terms,
                                   n->step_counts)) {
            net_protocol_error(a, peer->rank, INTRA_NET_BAD_COUNTS, h.step);
            return 0;
        }
        peer->recv_push = h.num_push;
        peer->recv_pull = h.num_pull;
        peer->ret_at    = h.ret_at; /* checked against what we return, once indexed */
    }
    return 1;
}

/* The step's index of this round's first token: after the earlier rounds' tokens. */
KERNEL_FN int net_round_aug_base(const intra_net_args_t *n)
{
    return n->round == 0 ? 0 : n->num_aug[1] + n->num_aug[0];
}

/* Places in our overflow area; grants where the source writes, reads where we fetch. Each
 * source's rest lands contiguously: its round-two Push entries, then the Pull ones. The
 * round's tokens: our own, then each peer's entries, numbered over the step from base. */
KERNEL_FN int net_grant_round_two(const intra_moe_args_t *a, uint64_t step)
{
    const intra_net_args_t *n = &a->net;
    int64_t cursor = 0, posted = 0, reads = 0;
    int base = net_round_aug_base(n), aug = net_own_end(n) - net_own_first(n);

    for (int p = 0; p < n->num_peers; ++p) {
        intra_net_peer_t *peer = &n->peers[p];
        int first = peer->recv_push < n->spec_tokens ? peer->recv_push : n->spec_tokens;
        int rest = peer->recv_push - first;

        peer->recv_offset = cursor;
        peer->granted     = rest + (n->pull_read ? 0 : peer->recv_pull);
        peer->aug_first   = base + aug;
        if (n->rounds > 1) {
            int64_t *seg = net_round_seg(n, n->round, p);

            seg[0] = peer->aug_first;
            seg[1] = peer->recv_push + peer->recv_pull;
            seg[2] = peer->ret_at;
        }
        cursor += rest + peer->recv_pull;
        aug    += peer->recv_push + peer->recv_pull;
        if (peer->granted > 0) {
            uint64_t out = n->out_grants + (uint64_t)peer->rank * INTRA_NET_CTRL_BYTES;
            intra_net_grant_t *grant = (intra_net_grant_t *)(n->area + out);

            grant->magic  = INTRA_NET_GRANT_MAGIC;
            grant->pad    = 0;
            grant->step   = step;
            grant->offset = peer->recv_offset;
            grant->first  = first;
            grant->count  = peer->granted;
            if (!net_post(a, UTIL_WORK_WRITE_IMM, peer->rank, out,
                          n->grants + (uint64_t)n->rank * INTRA_NET_CTRL_BYTES, sizeof(*grant),
                          n->imm_base + net_imm_index(n, INTRA_NET_IMM_GRANT, n->rank),
                          INTRA_NET_COUNTER_SEND)) {
                return 0;
            }
            posted += 1;
        }
        if (n->pull_read && peer->recv_pull > 0) {
            int64_t c = net_post_chunks(
                a, UTIL_WORK_READ, peer->rank,
                n->overflow + (uint64_t)(peer->recv_offset + rest) * (uint64_t)n->entry_bytes,
                net_staging_at(n, step, peer->index_there) +
                    (uint64_t)peer->recv_push * (uint64_t)n->entry_bytes,
                (uint64_t)peer->recv_pull * (uint64_t)n->entry_bytes, 0, INTRA_NET_COUNTER_READ);

            if (c < 0) {
                return 0;
            }
            reads += c;
        }
    }
    n->num_aug[0] = aug;
    n->num_aug[1] = base;
    if (n->rounds > 1) {
        int64_t *own = net_round_seg(n, n->round, n->num_peers);

        own[0] = base;
        own[1] = net_own_end(n) - net_own_first(n);
        own[2] = 0;
    }
    net_count_posted(a, posted);
    n->state->reads += (uint64_t)reads;
    return 1;
}

/* As a source: for each peer that needs round two from us, its grant, then the write. */
KERNEL_FN int net_send_round_two(const intra_moe_args_t *a, uint64_t step)
{
    const intra_net_args_t *n = &a->net;

    for (int p = 0; p < n->num_peers; ++p) {
        intra_net_peer_t *peer = &n->peers[p];
        int first = peer->send_push < n->spec_tokens ? peer->send_push : n->spec_tokens;
        const volatile intra_net_grant_t *wire = (const volatile intra_net_grant_t *)(
            n->area + n->grants + (uint64_t)peer->rank * INTRA_NET_CTRL_BYTES);
        intra_net_grant_t grant;
        int64_t posted;

        if (peer->send_push == first && (n->pull_read || peer->send_pull == 0)) {
            continue;
        }
        peer->grant_seen += 1;
        if (!net_wait(a, &n->imms[net_imm_index(n, INTRA_NET_IMM_GRANT, peer->rank)],
                      peer->grant_seen, peer->rank, INTRA_NET_WAIT_GRANT)) {
            return 0;
        }
        grant = net_grant_read(wire);
        if (!net_grant_check(&grant, step, first, peer->send_push + peer->send_pull,
                             (int64_t)n->num_peers * (int64_t)n->window_tokens)) {
            net_protocol_error(a, peer->rank, INTRA_NET_WAIT_GRANT, grant.step);
            return 0;
        }
        posted = net_post_chunks(
            a, UTIL_WORK_WRITE_IMM, peer->rank,
            net_staging_at(n, step, p) + (uint64_t)first * (uint64_t)n->entry_bytes,
            n->overflow + (uint64_t)grant.offset * (uint64_t)n->entry_bytes,
            (uint64_t)grant.count * (uint64_t)n->entry_bytes,
            n->imm_base + net_imm_index(n, INTRA_NET_IMM_OVERFLOW, n->rank),
            INTRA_NET_COUNTER_SEND);
        if (posted < 0) {
            return 0;
        }
        net_count_posted(a, posted);
    }
    return 1;
}

/* Round one's and round two's data from every peer, and our reads. */
KERNEL_FN int net_wait_entries(const intra_moe_args_t *a)
{
    const intra_net_args_t *n = &a->net;

    for (int p = 0; p < n->num_peers; ++p) {
        intra_net_peer_t *peer = &n->peers[p];
        int first = peer->recv_push < n->spec_tokens ? peer->recv_push : n->spec_tokens;

        if (first > 0) {
            peer->spec_seen += net_chunks(n, (uint64_t)first * (uint64_t)n->entry_bytes);
            if (!net_wait(a, &n->imms[net_imm_index(n, INTRA_NET_IMM_SPEC, peer->rank)],
                          peer->spec_seen, peer->rank, INTRA_NET_WAIT_ROUND_ONE)) {
                return 0;
            }
        }
        if (peer->granted > 0) {
            peer->overflow_seen += net_chunks(n, (uint64_t)peer->granted *
                                                     (uint64_t)n->entry_bytes);
            if (!net_wait(a, &n->imms[net_imm_index(n, INTRA_NET_IMM_OVERFLOW, peer->rank)],
                          peer->overflow_seen, peer->rank, INTRA_NET_WAIT_ROUND_TWO)) {
                return 0;
            }
        }
    }
    return net_wait(a, &n->counters[INTRA_NET_COUNTER_READ], n->state->reads, -1,
                    INTRA_NET_WAIT_READS);
}

KERNEL_FN void intra_net_recv_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    uint64_t step = net_step(a, g);

    if (g.block != 0 || !KERNEL_LEADER(g) || net_stopped(a)) {
        return; /* one thread runs the exchange; it moves no payload */
    }
    if (net_read_headers(a, step) && net_grant_round_two(a, step) &&
        net_send_round_two(a, step)) {
        net_wait_entries(a);
    }
}

/* --- NET_INDEX ------------------------------------------------------------------------ */

/* Whether the node's owners write the step's terms where term_dst says: in one round, and
 * receiving exactly in rounds (each round's, into areas that hold one round's). */
KERNEL_FN int net_terms_placed(const intra_moe_args_t *a)
{
    return a->net.rounds == 1 || moe_exact_rounds(a);
}

/* Whether what we return to the peer lies inside its ret_in where its header put it. */
KERNEL_FN int net_returns_fit(const intra_moe_args_t *a, const intra_net_peer_t *peer)
{
    uint64_t rows = a->net.node_reduce ? (uint64_t)(peer->recv_push + peer->recv_pull)
                                       : (uint64_t)peer->num_terms;

    return net_ret_at_check(peer->ret_at, rows, (uint64_t)a->y_row_bytes, a->net.ret_in_bytes);
}

/* Where the node's owners write the terms returned to peer p (net_terms_placed): its
 * block of the stage in the heap; in rounds, where the area is in the heap, its block of
 * the round's ret_out buffer itself (the round's wire step is the same in dispatch and in
 * combine), else its block of the stage, which holds one round's. */
KERNEL_FN int64_t net_stage_block(const intra_net_args_t *n, int p, uint64_t step)
{
    uint64_t buffer = n->rounds > 1 && !n->bounce ? net_ret_buffer(n, step) : 0;

    return n->ret_stage +
           (int64_t)((buffer * (uint64_t)n->num_peers + (uint64_t)p) * n->ret_out_block);
}

/* One thread: the peer's received entries checked and indexed for the node's kernels. In
 * rounds no term has a destination (combine gathers them where their owners publish them)
 * unless the object receives exactly: its owners write each round's terms. */
KERNEL_FN int net_index_peer(const intra_moe_args_t *a, int p, uint64_t step)
{
    const intra_net_args_t *n = &a->net;
    intra_net_peer_t *peer = &n->peers[p];
    int first = peer->recv_push < n->spec_tokens ? peer->recv_push : n->spec_tokens;
    int64_t stage = net_stage_block(n, p, step);
    int terms = 0;

    for (int q = 0; q < peer->recv_push + peer->recv_pull; ++q) {
        uint64_t at = q < first ? n->spec + ((uint64_t)p * (uint64_t)n->spec_tokens +
                                             (uint64_t)q) * (uint64_t)n->entry_bytes
                                : n->overflow + (uint64_t)(peer->recv_offset + q - first) *
                                                    (uint64_t)n->entry_bytes;
        const int32_t *record = (const int32_t *)(n->area + at);
        size_t aug = (size_t)(peer->aug_first + q);
        int64_t *experts = &n->aug_topk[aug * (size_t)a->topk];
        int32_t token;

        if (net_record_check(record, a->topk, n->max_tokens, n->experts_per_node,
                             n->entry_terms, &token, experts) < 0) {
            net_protocol_error(a, peer->rank, INTRA_NET_BAD_ENTRY, step);
            return 0;
        }
        n->aug_entry[aug]      = (int64_t)at;
        n->origin[2 * aug]     = peer->rank;
        n->origin[2 * aug + 1] = token;
        for (int k = 0; k < a->topk; ++k) {
            n->term_dst[aug * (size_t)a->topk + (size_t)k] =
                experts[k] < 0 || !net_terms_placed(a) ? -1
                                                       : stage + (int64_t)terms * a->y_row_bytes;
            terms += experts[k] >= 0;
        }
    }
    /* the step's, over the rounds (statistics) */
    peer->num_terms = (n->rounds > 1 && n->round > 0 ? peer->num_terms : 0) + terms;
    peer->step_recv = (n->rounds > 1 && n->round > 0 ? peer->step_recv : 0) +
                      peer->recv_push + peer->recv_pull;
    if (n->rounds > 1 ? !net_ret_at_check(peer->ret_at, (uint64_t)terms,
                                          (uint64_t)a->y_row_bytes, n->ret_in_bytes)
                      : !net_returns_fit(a, peer)) { /* in rounds: the round's, in a buffer */
        net_protocol_error(a, peer->rank, INTRA_NET_BAD_ENTRY, step);
        return 0;
    }
    return 1;
}

/* Own tokens' terms computed on this node go to the terms area (in rounds, which holds a
 * round's: from the round's first slot), their index there is the slot's. */
KERNEL_FN void intra_net_index_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const intra_net_args_t *n = &a->net;
    uint64_t step = net_step(a, g);
    size_t first = (size_t)net_own_first(n) * (size_t)a->topk;
    size_t own = (size_t)net_own_end(n) * (size_t)a->topk - first;
    size_t base = (size_t)n->num_aug[1] * (size_t)a->topk; /* the round's own tokens */
    size_t from = n->rounds > 1 ? first : 0;

    if (net_stopped(a)) {
        return;
    }
    for (size_t i = g.block * g.num_threads + g.thread; i < own;
         i += (size_t)g.num_blocks * g.num_threads) {
        n->term_dst[base + i] = n->node_idx[first + i] >= 0 && net_terms_placed(a)
                                    ? n->terms + (int64_t)(first + i - from) * a->y_row_bytes
                                    : -1;
    }
    for (int p = (int)g.block; KERNEL_LEADER(g) && p < n->num_peers; p += (int)g.num_blocks) {
        if (!net_index_peer(a, p, step)) {
            return;
        }
    }
}

#endif
