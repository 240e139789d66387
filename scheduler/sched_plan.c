/*
 * A rank's plan for one routing: its tokens' ids checked, the slots served on its own
 * node, and per peer the tokens that cross the network to it (each token once per peer,
 * whatever the number of its experts there) with the node-local expert ids it carries.
 */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

/* The peer that takes global expert e's tokens from this rank, or -1 on this node. */
static int sched_expert_peer(const sched_moe_t *moe, int expert)
{
    int owner = expert / moe->experts_per_rank;
    int node  = moe->world.rank_node[owner];

    if (node == moe->world.rank_node[moe->world.rank]) {
        return -1;
    }
    if (moe->route == STRATA_MOE_ROUTE_HIERARCHICAL) {
        owner = moe->node_ranks[node * moe->local_size + moe->world.rank_local[moe->world.rank]];
    }
    return moe->peer_index[owner];
}

/* Check every token; a bad one is refused, or with skip_bad has its bad slots cleared. */
static strata_status_t sched_plan_clean(sched_plan_t *plan, const int64_t *topk_idx,
                                        bool skip_bad)
{
    const sched_moe_t *moe = plan->moe;
    int topk = moe->params.topk;
    sched_layout_params_t lp = {.num_experts    = moe->params.num_experts,
                                .topk           = topk,
                                .world_size     = moe->world.world_size,
                                .ranks_per_node = moe->local_size};
    strata_status_t status = STRATA_OK;

    memcpy(plan->clean_idx, topk_idx, sizeof(int64_t) * (size_t)plan->num_tokens * (size_t)topk);
    for (int t = 0; t < plan->num_tokens; ++t) {
        int64_t *ids = &plan->clean_idx[(size_t)t * (size_t)topk];

        if (!skip_bad) {
            status = sched_layout_check_token(&lp, ids, t);
            if (status != STRATA_OK) {
                return status;
            }
        } else if (sched_layout_clean_token(&lp, ids, t) != STRATA_OK) {
            plan->had_bad_ids = true;
            status            = STRATA_ERR_INVALID;
        }
    }
    return status;
}

/* Per peer: how many tokens, then their lists in token order. */
static strata_status_t sched_plan_fill(sched_plan_t *plan)
{
    const sched_moe_t *moe = plan->moe;
    int topk = moe->params.topk, num_peers = moe->num_peers;
    int *cursor = calloc((size_t)num_peers + 1, sizeof(int));
    int *seen   = calloc((size_t)num_peers + 1, sizeof(int));

    if (cursor == NULL || seen == NULL) {
        free(cursor);
        free(seen);
        return STRATA_ERR_NO_MEMORY;
    }
    for (int pass = 0; pass < 2; ++pass) {
        for (int p = 0; pass == 1 && p < num_peers; ++p) {
            cursor[p] = plan->peer_first[p];
        }
        for (int t = 0; t < plan->num_tokens; ++t) {
            const int64_t *ids = &plan->clean_idx[(size_t)t * (size_t)topk];

            for (int k = 0; k < topk; ++k) {
                int peer = ids[k] >= 0 ? sched_expert_peer(moe, (int)ids[k]) : -1;
                int entry;

                if (pass == 0) {
                    plan->node_idx[(size_t)t * (size_t)topk + (size_t)k] =
                        (ids[k] >= 0 && peer < 0) ? sched_local_expert(moe, (int)ids[k]) : -1;
                }
                if (peer < 0) {
                    continue;
                }
                if (seen[peer] != t + 1) { /* the token's first slot for this peer */
                    seen[peer] = t + 1;
                    if (pass == 0) {
                        plan->peer_first[peer + 1]++;
                    } else {
                        entry = cursor[peer]++;
                        plan->tokens[entry] = t;
                        for (int j = 0; j < topk; ++j) {
                            plan->experts[(size_t)entry * (size_t)topk + (size_t)j] = -1;
                        }
                    }
                }
                if (pass == 1) {
                    entry = cursor[peer] - 1;
                    plan->experts[(size_t)entry * (size_t)topk + (size_t)k] =
                        sched_local_expert(moe, (int)ids[k]);
                } else {
                    plan->peer_terms[peer]++;
                }
            }
        }
        for (int p = 0; pass == 0 && p < num_peers; ++p) {
            plan->peer_first[p + 1] += plan->peer_first[p];
            seen[p] = 0;
        }
    }
    free(cursor);
    free(seen);
    return STRATA_OK;
}

strata_status_t sched_plan_create(const sched_moe_t *moe, const int64_t *topk_idx, int num_tokens,
                                  bool skip_bad, sched_plan_t **plan_p)
{
    size_t entries, peers;
    strata_status_t status;
    sched_plan_t *plan;

    if (moe == NULL || plan_p == NULL || num_tokens < 0 ||
        num_tokens > moe->params.max_tokens || (num_tokens > 0 && topk_idx == NULL)) {
        UTIL_LOG_ERROR("moe: layout of %d tokens (0..%d) needs an object and topk_idx",
                       num_tokens, moe ? moe->params.max_tokens : 0);
        return STRATA_ERR_INVALID;
    }
    entries = (size_t)UTIL_MAX(num_tokens, 1) * (size_t)moe->params.topk;
    peers   = (size_t)moe->num_peers + 1;
    plan    = calloc(1, sizeof(*plan));
    if (plan == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    plan->moe        = moe;
    plan->num_tokens = num_tokens;
    plan->clean_idx  = malloc(sizeof(int64_t) * entries);
    plan->node_idx   = malloc(sizeof(int64_t) * entries);
    plan->peer_first = calloc(peers, sizeof(int32_t));
    plan->peer_terms = calloc(peers, sizeof(int64_t));
    /* A token goes at most once to each peer: entries bounded by tokens times peers. */
    plan->tokens     = malloc(sizeof(int32_t) * (size_t)UTIL_MAX(num_tokens, 1) * peers);
    plan->experts    = malloc(sizeof(int32_t) * entries * peers);
    if (!plan->clean_idx || !plan->node_idx || !plan->peer_first || !plan->peer_terms ||
        !plan->tokens || !plan->experts) {
        sched_plan_destroy(plan);
        return STRATA_ERR_NO_MEMORY;
    }
    status = sched_plan_clean(plan, topk_idx, skip_bad);
    if (status != STRATA_OK && !skip_bad) {
        sched_plan_destroy(plan);
        return status;
    }
    if (sched_plan_fill(plan) != STRATA_OK) {
        sched_plan_destroy(plan);
        return STRATA_ERR_NO_MEMORY;
    }
    *plan_p = plan;
    return status;
}

void sched_plan_destroy(sched_plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    free(plan->clean_idx);
    free(plan->node_idx);
    free(plan->peer_first);
    free(plan->peer_terms);
    free(plan->tokens);
    free(plan->experts);
    free(plan);
}
