/*
 * What the network kernels share (net_kernels.h): the step and stop words, waits bounded by
 * the engine's counters and the peer's failure word, posting commands into the work ring,
 * and where each peer's returns land in ret_in.
 */
#ifndef STRATA_INTRA_NET_COMMON_H
#define STRATA_INTRA_NET_COMMON_H

#include "moe_common.h"

KERNEL_FN intra_moe_status_t *net_status(const intra_moe_args_t *a)
{
    return &moe_control(a, a->rank)->net_status;
}

/* The step is over for this rank: an earlier kernel reported a failure. */
KERNEL_FN int net_stopped(const intra_moe_args_t *a)
{
    return kernel_load_i32(&net_status(a)->code) != 0;
}

/* The wire protocol's step: one per round of a step's dispatch (net_format.h). */
KERNEL_FN uint64_t net_step(const intra_moe_args_t *a, kernel_grid_t g)
{
    KERNEL_SHARED uint64_t step;

    if (KERNEL_LEADER(g)) {
        step = kernel_load_acquire_u64(&a->net.state->step) * (uint64_t)a->net.rounds +
               (uint64_t)a->net.round + 1;
    }
    kernel_block_sync();
    return step;
}

/* The first of the step's own tokens that round r takes (r = rounds: the end). */
KERNEL_FN int net_round_token(const intra_net_args_t *n, int r)
{
    int64_t first = (int64_t)r * n->window_tokens;

    return first < n->num_own ? (int)first : n->num_own;
}

/* This round's own tokens: [net_own_first, net_own_end) of the step's. */
KERNEL_FN int net_own_first(const intra_net_args_t *n)
{
    return net_round_token(n, n->round);
}

KERNEL_FN int net_own_end(const intra_net_args_t *n)
{
    return net_round_token(n, n->round + 1);
}

/* The first of peer p's entries (in token order) whose token is at least token. */
KERNEL_FN int net_entry_from(const intra_net_args_t *n, int p, int token)
{
    int lo = n->peer_first[p], hi = n->peer_first[p + 1];

    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;

        if (n->tokens[mid] < token) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* Peer p's entries of round r: [*begin_p, *end_p). */
KERNEL_FN void net_entries_of_round(const intra_net_args_t *n, int p, int r, int *begin_p,
                                    int *end_p)
{
    if (n->rounds == 1) {
        *begin_p = n->peer_first[p];
        *end_p   = n->peer_first[p + 1];
        return;
    }
    *begin_p = net_entry_from(n, p, net_round_token(n, r));
    *end_p   = net_entry_from(n, p, net_round_token(n, r + 1));
}

/* Peer p's entries of this round: [*begin_p, *end_p). */
KERNEL_FN void net_round_entries(const intra_net_args_t *n, int p, int *begin_p, int *end_p)
{
    net_entries_of_round(n, p, n->round, begin_p, end_p);
}

/* Offset of peer p's block of our staging area in the wire step's round (by parity). */
KERNEL_FN uint64_t net_staging_at(const intra_net_args_t *n, uint64_t step, int p)
{
    uint64_t buffer = n->rounds > 1 ? (step & 1u) : 0;

    return n->staging + (buffer * (uint64_t)n->num_peers + (uint64_t)p) *
                            (uint64_t)n->window_tokens * (uint64_t)n->entry_bytes;
}

/* net_stopped as the whole block sees it: another block may report a failure at any time,
 * and the threads of one block must agree before they meet at a barrier. */
KERNEL_FN int net_block_stopped(const intra_moe_args_t *a, kernel_grid_t g)
{
    KERNEL_SHARED int stopped;

    if (KERNEL_LEADER(g)) {
        stopped = net_stopped(a);
    }
    kernel_block_sync();
    return stopped;
}

KERNEL_FN uint32_t net_imm_index(const intra_net_args_t *n, int kind, int rank)
{
    return (uint32_t)kind * (uint32_t)n->world + (uint32_t)rank;
}

KERNEL_FN uint64_t net_chunks(const intra_net_args_t *n, uint64_t bytes)
{
    return (bytes + n->chunk_bytes - 1) / n->chunk_bytes;
}

/* One thread: wait until *word reaches want, and *seen_p the value it had then; 0 (and the
 * status reported) if the ring failed or the bound passed first. */
KERNEL_FN int net_wait_seen(const intra_moe_args_t *a, uint64_t *word, uint64_t want,
                            int peer, int what, uint64_t *seen_p)
{
    uint64_t seen;
    uint64_t start = kernel_timer();
    uint32_t spins = 0;

    while ((seen = kernel_load_relaxed_u64(word)) < want) {
        int64_t failure = spins % KERNEL_FAILURE_EVERY != 0 ? 0 :
                          (int64_t)kernel_load_relaxed_u64((uint64_t *)&a->net.ring->failure);

        if (failure != 0) {
            moe_report(net_status(a), INTRA_MOE_KERNEL_NET_FAILED, peer, what, -1, failure);
            return 0;
        }
        if (kernel_timer() - start > a->net.timeout_ticks) {
            moe_report(net_status(a), INTRA_MOE_KERNEL_NET_TIMEOUT, peer, what, -1,
                       (int64_t)want);
            return 0;
        }
        kernel_spin_pause(spins++);
    }
    /* acquire: pairs with the proxy's release of a count after the data it stands for */
    kernel_fence_acquire();
    *seen_p = seen;
    return 1;
}

/* One thread: net_wait_seen's wait, without the value. */
KERNEL_FN int net_wait(const intra_moe_args_t *a, uint64_t *word, uint64_t want, int peer,
                       int what)
{
    uint64_t seen;

    return net_wait_seen(a, word, want, peer, what, &seen);
}

/*
 * One thread: one command into the work ring, once it has credit. The credit is read across
 * PCIe only when the ticket is past what this block saw last time. The command goes in
 * 16-byte stores, op and peer next, the sequence last (release).
 */
KERNEL_FN int net_post(const intra_moe_args_t *a, uint32_t op, int peer, uint64_t offset,
                       uint64_t remote_offset, uint64_t length, uint32_t imm, uint32_t counter)
{
    const intra_net_args_t *n = &a->net;
    uint64_t ticket = kernel_atomic_add_u64(n->ticket, 1);
    uint64_t *seen = &n->state->credit_seen[kernel_block_index()];
    util_work_cmd_t *cmd = &n->cmds[ticket & (uint64_t)(n->slots - 1)];
    util_work_cmd_t c = {.seq = 0, .op = op, .peer = peer, .region = 0, .imm = imm,
                         .counter = counter, .reserved = 0, .offset = offset,
                         .remote_offset = remote_offset, .length = length,
                         .stamp = n->host_stamps ? kernel_timer() : 0};

    if (ticket + 1 > *seen &&
        !net_wait_seen(a, &n->ring->credit, ticket + 1, peer, INTRA_NET_WAIT_CREDIT, seen)) {
        return 0;
    }
    kernel_store_16((char *)cmd + 16, (const char *)&c + 16); /* region .. reserved */
    kernel_store_16((char *)cmd + 32, (const char *)&c + 32); /* offset, remote_offset */
    kernel_store_16((char *)cmd + 48, (const char *)&c + 48); /* length, stamp */
    cmd->op   = op;
    cmd->peer = peer;
    /* release: the command (and the data it sends) before its sequence; the proxy acquires */
    kernel_store_release_u64(&cmd->seq, ticket + 1);
    return 1;
}

/* One thread: a transfer cut into commands of at most chunk_bytes, each counted by the
 * target (WRITE_IMM) and by our counter; how many, or -1 after a failure. */
KERNEL_FN int64_t net_post_chunks(const intra_moe_args_t *a, uint32_t op, int peer,
                                  uint64_t offset, uint64_t remote_offset, uint64_t length,
                                  uint32_t imm, uint32_t counter)
{
    const intra_net_args_t *n = &a->net;
    int64_t posted = 0;

    for (uint64_t at = 0; at < length; at += n->chunk_bytes, ++posted) {
        uint64_t piece = length - at < n->chunk_bytes ? length - at : n->chunk_bytes;

        if (!net_post(a, op, peer, offset + at, remote_offset + at, piece, imm, counter)) {
            return -1;
        }
    }
    return posted;
}

KERNEL_FN void net_count_posted(const intra_moe_args_t *a, int64_t commands)
{
    kernel_atomic_add_u64(&a->net.state->posted, (uint64_t)commands);
}

/* Every thread of the block: once what each thread wrote into the area is visible, thread 0
 * posts length bytes at offset to remote_offset at peer in one write (cut into chunks), each
 * chunk with our immediate of kind imm_kind, and counts it; whether it could. */
KERNEL_FN int net_post_block(const intra_moe_args_t *a, kernel_grid_t g, int peer,
                             uint64_t offset, uint64_t remote_offset, uint64_t length,
                             int imm_kind)
{
    const intra_net_args_t *n = &a->net;
    KERNEL_SHARED int ok;

    kernel_fence_system();
    kernel_block_sync();
    if (KERNEL_LEADER(g)) {
        int64_t posted = net_post_chunks(a, UTIL_WORK_WRITE_IMM, peer, offset, remote_offset,
                                         length, n->imm_base + net_imm_index(n, imm_kind, n->rank),
                                         INTRA_NET_COUNTER_SEND);

        ok = posted >= 0;
        if (ok) {
            net_count_posted(a, posted);
        }
    }
    kernel_block_sync();
    return ok;
}

/* The terms of our entries for peer p in this dispatch round. */
KERNEL_FN uint64_t net_round_terms(const intra_moe_args_t *a, int p)
{
    const intra_net_args_t *n = &a->net;
    uint64_t terms = 0;
    int begin, end;

    net_round_entries(n, p, &begin, &end);
    for (size_t i = (size_t)begin * (size_t)a->topk; i < (size_t)end * (size_t)a->topk; ++i) {
        terms += n->experts[i] >= 0;
    }
    return terms;
}

/* Rows peer p returns for our tokens (in rounds, for this round's entries): their terms
 * there, or with node-reduce, one partial row per entry. */
KERNEL_FN uint64_t net_ret_rows(const intra_moe_args_t *a, int p)
{
    const intra_net_args_t *n = &a->net;
    int begin, end;

    if (n->node_reduce) {
        net_round_entries(n, p, &begin, &end);
        return (uint64_t)(end - begin);
    }
    return n->rounds > 1 ? net_round_terms(a, p) : (uint64_t)n->peer_terms[p];
}

/* Where peer p's returns start in our ret_in (one buffer of it, in rounds): after the
 * blocks of the peers before it, each its rows and the count of drops (every row and count
 * 16-byte aligned). */
KERNEL_FN uint64_t net_ret_at(const intra_moe_args_t *a, int p)
{
    uint64_t at = 0;

    for (int q = 0; q < p; ++q) {
        at += net_ret_rows(a, q) * (uint64_t)a->y_row_bytes + INTRA_NET_DROPS_BYTES;
    }
    return at;
}

/* In rounds: which of the two ret_out and ret_in buffers the wire step's round uses. */
KERNEL_FN uint64_t net_ret_buffer(const intra_net_args_t *n, uint64_t step)
{
    return n->rounds > 1 ? (step & 1u) : 0;
}

/* The immediate kind of a transfer of returns (COMBINE) or weights (WEIGHTS) into the wire
 * step's buffer. In rounds a peer may have a transfer into each of the two buffers in
 * flight at once (never two into one: the credits say so); each buffer's arrivals are
 * counted apart, so that on a fabric that delivers out of order the chunks of one cannot
 * make up the count of the other. */
KERNEL_FN int net_buffer_imm(const intra_net_args_t *n, int kind, uint64_t step)
{
    if (net_ret_buffer(n, step) == 0) {
        return kind;
    }
    return kind == INTRA_NET_IMM_COMBINE ? INTRA_NET_IMM_COMBINE_ODD : INTRA_NET_IMM_WEIGHTS_ODD;
}

/* In rounds: round r's record of peer p (p = num_peers: our own tokens), net_format.h. */
KERNEL_FN int64_t *net_round_seg(const intra_net_args_t *n, int r, int p)
{
    return &n->round_seg[((size_t)r * ((size_t)n->num_peers + 1) + (size_t)p) * 3];
}

#endif
