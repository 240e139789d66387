/*
 * Combine across nodes: the mirror of dispatch. Every rank gathers, through the intra
 * tier, each term y(t, k) its node computed for the tokens it holds (its own and those it
 * received), and writes each received token's terms back to the token's rank, one page per
 * term, straight into that rank's term array at [t][k]. Each rank then sums its tokens'
 * terms in fp32 in k order, so the result does not depend on the route. Within one node the
 * intra tier's combine does all of it in one pass. The inter-node leg is always written by
 * the rank holding the terms: it alone knows where they go, and a read would first need
 * that list.
 */
#include "sched_internal.h"

#include <string.h>

static strata_status_t sched_check_combine(const sched_moe_t *moe, sched_state_t expected,
                                           const char *call)
{
    if (moe->state == expected) {
        return STRATA_OK;
    }
    if (moe->state == SCHED_STEP_FAILED) {
        UTIL_LOG_ERROR("moe: %s after a failed step; destroy the object", call);
        return STRATA_ERR_PEER_FAILED;
    }
    UTIL_LOG_ERROR("moe: %s out of order: a step is dispatch_send, dispatch_recv, "
                   "combine_send, combine_recv", call);
    return STRATA_ERR_INVALID;
}

/* Where, in the ret_in area of peer, the terms this rank returns to it land: peers are
 * kept in rank order, so this rank's index among the peer's peers. */
size_t sched_ret_in_at(const sched_moe_t *moe, int peer)
{
    const sched_moe_world_t *w = &moe->world;
    size_t index = 0;

    for (int r = 0; r < w->rank; ++r) {
        index += w->rank_node[r] != w->rank_node[peer] &&
                 (moe->route == STRATA_MOE_ROUTE_FLAT || w->rank_local[r] == w->rank_local[peer]);
    }
    return moe->net_layout.ret_in +
           index * (size_t)moe->params.max_tokens * (size_t)moe->params.topk * moe->y_row_bytes;
}

/* Every received token's terms back to its rank: packed in the order the rank sent the
 * tokens, one write per peer. */
static strata_status_t sched_return_terms(sched_moe_t *moe)
{
    const char *terms = sched_net(moe, moe->net_layout.terms);
    int me = moe->world.rank;

    for (int p = 0; p < moe->num_peers; ++p) {
        const sched_peer_step_t *ps = &moe->peer_step[p];
        size_t out = moe->net_layout.ret_out + (size_t)ps->terms_first * moe->y_row_bytes;
        int dest = moe->peers[p];
        inter_request_t *req;
        strata_status_t status;

        if (ps->num_terms == 0) {
            continue;
        }
        for (int j = 0; j < ps->num_terms; ++j) {
            memcpy(sched_net(moe, out + (size_t)j * moe->y_row_bytes),
                   terms + (size_t)moe->src_pages[ps->terms_first + j] * moe->y_row_bytes,
                   moe->y_row_bytes);
        }
        status = inter_engine_write(moe->world.engine, dest, moe->net_mr, out,
                                    &moe->net_desc[dest], sched_ret_in_at(moe, dest),
                                    (size_t)ps->num_terms * moe->y_row_bytes, true,
                                    sched_imm(moe, SCHED_IMM_COMBINE, me), &req);
        if (status != STRATA_OK) {
            return status;
        }
        sched_keep_request(moe, req);
        moe->stats.bytes_to_nodes += (uint64_t)ps->num_terms * moe->y_row_bytes;
    }
    return STRATA_OK;
}

strata_status_t sched_moe_combine_send(sched_moe_t *moe, const void *expert_y)
{
    uint64_t node_mask[SCHED_MASK_WORDS];
    strata_status_t status = sched_check_combine(moe, SCHED_STEP_DISPATCHED, "combine_send");

    if (status != STRATA_OK) {
        return status;
    }
    moe->expert_y      = expert_y ? expert_y : moe->recv.expert_y;
    moe->step_start_ns = util_clock_now_ns();
    if (moe->num_peers == 0) {
        moe->state = SCHED_STEP_COMBINE_SENT; /* one node: combine_recv does it in one pass */
        return STRATA_OK;
    }
    sched_node_mask(moe, moe->combine_mask, node_mask);
    status = intra_moe_combine_terms(moe->intra, moe->expert_y, node_mask,
                                     sched_net(moe, moe->net_layout.terms));
    if (status == STRATA_ERR_CAPACITY) {
        moe->step_status = status;
    } else if (status != STRATA_OK) {
        return sched_fail(moe, sched_intra_failure(moe, status), "gathering terms in the node");
    }
    status = sched_return_terms(moe);
    if (status != STRATA_OK) {
        return sched_fail(moe, status, "returning terms to other nodes");
    }
    moe->state = SCHED_STEP_COMBINE_SENT;
    return STRATA_OK;
}

/* The terms of this rank's tokens from every peer, then the sums. */
static strata_status_t sched_reduce_terms(sched_moe_t *moe, const float *topk_weights, void *out)
{
    const sched_plan_t *plan = moe->plan;
    char *terms = sched_net(moe, moe->net_layout.terms);
    strata_status_t status = STRATA_OK;

    for (int p = 0; p < moe->num_peers && status == STRATA_OK; ++p) {
        size_t block = (size_t)moe->params.max_tokens * (size_t)moe->params.topk;
        const char *in = sched_net(moe, moe->net_layout.ret_in + (size_t)p * block *
                                                                     moe->y_row_bytes);
        const int32_t *map = moe->ret_map + (size_t)p * block;
        size_t bytes = (size_t)plan->peer_terms[p] * moe->y_row_bytes;

        if (bytes == 0) {
            continue;
        }
        status = sched_wait_imm(moe, SCHED_IMM_COMBINE, moe->peers[p],
                                inter_engine_write_chunks(moe->world.engine, moe->peers[p], bytes),
                                "combine terms");
        for (int64_t j = 0; status == STRATA_OK && j < plan->peer_terms[p]; ++j) {
            memcpy(terms + (size_t)map[j] * moe->y_row_bytes,
                   in + (size_t)j * moe->y_row_bytes, moe->y_row_bytes);
        }
    }
    if (status == STRATA_OK) {
        status = sched_finish_requests(moe);
    }
    if (status != STRATA_OK) {
        return sched_fail(moe, status, "returning terms between nodes");
    }
    status = intra_moe_reduce(moe->intra, terms, plan->clean_idx,
                              topk_weights, plan->num_tokens, out);
    return status == STRATA_OK ? STRATA_OK : sched_fail(moe, status, "summing terms");
}

strata_status_t sched_moe_combine_recv(sched_moe_t *moe, const float *topk_weights, void *out)
{
    uint64_t node_mask[SCHED_MASK_WORDS];
    int n = moe->plan ? moe->plan->num_tokens : 0;
    strata_status_t status = sched_check_combine(moe, SCHED_STEP_COMBINE_SENT, "combine_recv");

    if (status != STRATA_OK) {
        return status;
    }
    if (n > 0 && (topk_weights == NULL || out == NULL || ((uintptr_t)out & 15u) != 0)) {
        /* Refused before this rank takes part: it may retry while the peers wait. */
        UTIL_LOG_ERROR("moe: combine_recv of %d tokens needs topk_weights and out, 16-byte "
                       "aligned", n);
        return STRATA_ERR_INVALID;
    }
    if (moe->num_peers == 0) {
        sched_node_mask(moe, moe->combine_mask, node_mask);
        status = intra_moe_combine(moe->intra, moe->expert_y, topk_weights, node_mask, out);
        if (status == STRATA_ERR_CAPACITY) {
            moe->step_status = status;
        } else if (status != STRATA_OK) {
            return sched_fail(moe, sched_intra_failure(moe, status), "combining in the node");
        }
    } else {
        status = sched_reduce_terms(moe, topk_weights, out);
        if (status != STRATA_OK) {
            return status;
        }
    }
    moe->stats.combine_ns = util_clock_now_ns() - moe->step_start_ns;
    moe->stats.steps     += 1;
    memcpy(moe->stats_mask, moe->step_dispatch_mask, sched_mask_bytes(moe));
    moe->stats.pull_mask  = moe->stats_mask;
    moe->state            = SCHED_STEP_IDLE;
    return moe->step_status;
}
