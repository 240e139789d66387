/*
 * scheduler: MoE step planning and execution. Today: the dispatch layout — from topk_idx,
 * how many tokens go to each expert, each rank and each node, with a token counted once per
 * destination rank and once per destination node (the de-duplication the routes rely on).
 * Other layers include only this header.
 */
#ifndef STRATA_SCHEDULER_SCHED_H
#define STRATA_SCHEDULER_SCHED_H

#include <strata/strata.h>

#include <stdint.h>

typedef struct sched_layout_params {
    int num_experts;    /**< global expert count, a multiple of world_size */
    int topk;           /**< experts per token, 1..num_experts */
    int world_size;     /**< ranks */
    int ranks_per_node; /**< ranks of one node; world_size is a multiple of it */
} sched_layout_params_t;

/** Counts for one step; arrays sized by the params, owned by the layout. */
typedef struct sched_layout {
    sched_layout_params_t params;
    int32_t *tokens_per_expert; /**< [num_experts] (token, expert) pairs */
    int32_t *tokens_per_rank;   /**< [world_size] tokens, each counted once per rank */
    int32_t *tokens_per_node;   /**< [world_size / ranks_per_node] tokens, once per node */
} sched_layout_t;

strata_status_t sched_layout_create(const sched_layout_params_t *params, sched_layout_t **layout_p);
void            sched_layout_destroy(sched_layout_t *layout);

/**
 * Count one step. topk_idx is [num_tokens][topk] expert ids; -1 means "no expert" for that
 * slot. An id out of range or repeated within a token gives STRATA_ERR_INVALID naming the
 * token and slot, and leaves the counts zeroed.
 */
strata_status_t sched_layout_count(sched_layout_t *layout, const int64_t *topk_idx,
                                   int num_tokens);

/** The rank that owns expert (experts are split into equal contiguous blocks). */
static inline int sched_expert_rank(const sched_layout_params_t *params, int expert)
{
    return expert / (params->num_experts / params->world_size);
}

#endif
