/*
 * adaptive: per-expert Push/Pull decisions from routing statistics. Today: the statistics —
 * an exponentially weighted mean and variance of each expert's tokens per step, updated from
 * the counts every step already exchanges. Other layers include only this header.
 */
#ifndef STRATA_ADAPTIVE_ADAPT_H
#define STRATA_ADAPTIVE_ADAPT_H

#include <strata/strata.h>

#include <stdint.h>

typedef struct adapt_expert_stats {
    double   mean;  /**< EWMA of tokens per step */
    double   var;   /**< exponentially weighted variance of tokens per step */
    uint64_t steps; /**< steps observed */
} adapt_expert_stats_t;

typedef struct adapt_stats adapt_stats_t;

/** alpha in (0, 1]: weight of the newest step (1 keeps only the last step). */
strata_status_t adapt_stats_create(int num_experts, double alpha, adapt_stats_t **stats_p);
void            adapt_stats_destroy(adapt_stats_t *stats);

/** Fold in one step: tokens_per_expert[num_experts]. Not thread-safe. */
void adapt_stats_update(adapt_stats_t *stats, const int32_t *tokens_per_expert);

const adapt_expert_stats_t *adapt_stats_expert(const adapt_stats_t *stats, int expert);

#endif
