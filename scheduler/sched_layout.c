/*
 * Dispatch layout counts.
 */
#include "sched.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

static strata_status_t sched_layout_check_params(const sched_layout_params_t *p)
{
    if (p == NULL || p->world_size <= 0 || p->ranks_per_node <= 0 || p->num_experts <= 0 ||
        p->topk <= 0 || p->topk > p->num_experts || p->world_size % p->ranks_per_node != 0 ||
        p->num_experts % p->world_size != 0) {
        UTIL_LOG_ERROR("layout: invalid parameters: experts %d, topk %d, world %d, "
                       "ranks per node %d (experts must split evenly over ranks, ranks over "
                       "nodes, and 1 <= topk <= experts)",
                       p ? p->num_experts : 0, p ? p->topk : 0, p ? p->world_size : 0,
                       p ? p->ranks_per_node : 0);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

strata_status_t sched_layout_create(const sched_layout_params_t *params, sched_layout_t **layout_p)
{
    sched_layout_t *layout;
    strata_status_t status = sched_layout_check_params(params);

    if (status != STRATA_OK) {
        return status;
    }
    layout = calloc(1, sizeof(*layout));
    if (layout == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    layout->params            = *params;
    layout->tokens_per_expert = calloc((size_t)params->num_experts, sizeof(int32_t));
    layout->tokens_per_rank   = calloc((size_t)params->world_size, sizeof(int32_t));
    layout->tokens_per_node   = calloc((size_t)(params->world_size / params->ranks_per_node),
                                       sizeof(int32_t));
    if (!layout->tokens_per_expert || !layout->tokens_per_rank || !layout->tokens_per_node) {
        sched_layout_destroy(layout);
        return STRATA_ERR_NO_MEMORY;
    }
    *layout_p = layout;
    return STRATA_OK;
}

void sched_layout_destroy(sched_layout_t *layout)
{
    if (layout == NULL) {
        return;
    }
    free(layout->tokens_per_expert);
    free(layout->tokens_per_rank);
    free(layout->tokens_per_node);
    free(layout);
}

static void sched_layout_zero(sched_layout_t *layout)
{
    const sched_layout_params_t *p = &layout->params;

    memset(layout->tokens_per_expert, 0, (size_t)p->num_experts * sizeof(int32_t));
    memset(layout->tokens_per_rank, 0, (size_t)p->world_size * sizeof(int32_t));
    memset(layout->tokens_per_node, 0, (size_t)(p->world_size / p->ranks_per_node) *
                                            sizeof(int32_t));
}

/* Why slot k of a token is bad: 0 fine, 1 not an expert, 2 the expert of slot *dup_p too. */
static int sched_slot_problem(const sched_layout_params_t *p, const int64_t *experts, int k,
                              int *dup_p)
{
    if (experts[k] < -1 || experts[k] >= p->num_experts) {
        return 1;
    }
    for (int j = 0; j < k && experts[k] >= 0; ++j) {
        if (experts[j] == experts[k]) {
            *dup_p = j;
            return 2;
        }
    }
    return 0;
}

static void sched_slot_log(const sched_layout_params_t *p, const int64_t *experts, int token,
                           int k, int problem, int dup)
{
    if (problem == 1) {
        UTIL_LOG_ERROR("layout: topk_idx[%d][%d] = %lld is not an expert (0..%d, or -1)", token,
                       k, (long long)experts[k], p->num_experts - 1);
    } else {
        UTIL_LOG_ERROR("layout: token %d routes to expert %lld twice (slots %d and %d)", token,
                       (long long)experts[k], dup, k);
    }
}

strata_status_t sched_layout_check_token(const sched_layout_params_t *p,
                                         const int64_t *experts, int token)
{
    int dup = 0, problem;

    for (int k = 0; k < p->topk; ++k) {
        if ((problem = sched_slot_problem(p, experts, k, &dup)) != 0) {
            sched_slot_log(p, experts, token, k, problem, dup);
            return STRATA_ERR_INVALID;
        }
    }
    return STRATA_OK;
}

strata_status_t sched_layout_clean_token(const sched_layout_params_t *p, int64_t *experts,
                                         int token)
{
    strata_status_t status = STRATA_OK;
    int dup = 0, problem;

    for (int k = 0; k < p->topk; ++k) {
        if ((problem = sched_slot_problem(p, experts, k, &dup)) != 0) {
            if (status == STRATA_OK) {
                sched_slot_log(p, experts, token, k, problem, dup);
            }
            experts[k] = -1;
            status     = STRATA_ERR_INVALID;
        }
    }
    return status;
}

/* Add token's counts; a rank or node seen in an earlier slot of this token is not recounted. */
static void sched_layout_add_token(sched_layout_t *layout, const int64_t *experts)
{
    const sched_layout_params_t *p = &layout->params;
    int rank, node;
    bool seen_rank, seen_node;

    for (int k = 0; k < p->topk; ++k) {
        if (experts[k] < 0) {
            continue;
        }
        rank      = sched_expert_rank(p, (int)experts[k]);
        node      = rank / p->ranks_per_node;
        seen_rank = seen_node = false;
        for (int j = 0; j < k; ++j) {
            int other = (experts[j] >= 0) ? sched_expert_rank(p, (int)experts[j]) : -1;
            seen_rank = seen_rank || other == rank;
            seen_node = seen_node || (other >= 0 && other / p->ranks_per_node == node);
        }
        layout->tokens_per_expert[experts[k]]++;
        layout->tokens_per_rank[rank] += !seen_rank;
        layout->tokens_per_node[node] += !seen_node;
    }
}

strata_status_t sched_layout_count(sched_layout_t *layout, const int64_t *topk_idx,
                                   int num_tokens)
{
    const sched_layout_params_t *p;
    strata_status_t status;

    if (layout == NULL || num_tokens < 0 || (num_tokens > 0 && topk_idx == NULL)) {
        UTIL_LOG_ERROR("layout: invalid arguments (%d tokens, topk_idx %p)", num_tokens,
                       (const void *)topk_idx);
        return STRATA_ERR_INVALID;
    }
    p = &layout->params;
    for (int t = 0; t < num_tokens; ++t) {
        status = sched_layout_check_token(p, &topk_idx[(size_t)t * (size_t)p->topk], t);
        if (status != STRATA_OK) {
            sched_layout_zero(layout);
            return status;
        }
    }
    sched_layout_zero(layout);
    for (int t = 0; t < num_tokens; ++t) {
        sched_layout_add_token(layout, &topk_idx[(size_t)t * (size_t)p->topk]);
    }
    return STRATA_OK;
}
