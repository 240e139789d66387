/*
 * Per-expert routing statistics, per source node: exponentially weighted mean and variance
 * of tokens (the incremental form: diff = x - mean, mean += alpha diff,
 * var = (1 - alpha)(var + alpha diff^2)) and the weighted chance a node sends any token.
 */
#include "adapt.h"
#include "util/util.h"

#include <stdlib.h>

struct adapt_stats {
    int                   num_experts;
    int                   num_nodes;
    double                alpha;
    double                row_bytes;
    adapt_cell_t         *cells;   /* [num_experts][num_nodes] */
    adapt_expert_stats_t *experts; /* [num_experts] */
};

strata_status_t adapt_stats_create(int num_experts, int num_nodes, double alpha, double row_bytes,
                                   adapt_stats_t **stats_p)
{
    adapt_stats_t *stats;

    if (num_experts <= 0 || num_nodes <= 0 || !(alpha > 0.0 && alpha <= 1.0) ||
        !(row_bytes >= 0.0)) {
        UTIL_LOG_ERROR("adaptive: invalid statistics parameters: %d experts, %d nodes, alpha "
                       "%g, row bytes %g (need experts, nodes > 0, 0 < alpha <= 1, bytes >= 0)",
                       num_experts, num_nodes, alpha, row_bytes);
        return STRATA_ERR_INVALID;
    }
    stats = calloc(1, sizeof(*stats));
    if (stats == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    stats->cells   = calloc((size_t)num_experts * (size_t)num_nodes, sizeof(*stats->cells));
    stats->experts = calloc((size_t)num_experts, sizeof(*stats->experts));
    if (stats->cells == NULL || stats->experts == NULL) {
        adapt_stats_destroy(stats);
        return STRATA_ERR_NO_MEMORY;
    }
    stats->num_experts = num_experts;
    stats->num_nodes   = num_nodes;
    stats->alpha       = alpha;
    stats->row_bytes   = row_bytes;
    *stats_p           = stats;
    return STRATA_OK;
}

void adapt_stats_destroy(adapt_stats_t *stats)
{
    if (stats == NULL) {
        return;
    }
    free(stats->cells);
    free(stats->experts);
    free(stats);
}

/* One weighted mean and variance; the first observation is the best estimate there is. */
static void adapt_ewma(double alpha, bool first, double x, double *mean, double *var)
{
    double diff = x - *mean;

    if (first) {
        *mean = x;
        *var  = 0.0;
        return;
    }
    *mean += alpha * diff;
    *var = (1.0 - alpha) * (*var + alpha * diff * diff);
}

void adapt_stats_update(adapt_stats_t *stats, const int32_t *tokens)
{
    for (int e = 0; e < stats->num_experts; ++e) {
        adapt_expert_stats_t *s = &stats->experts[e];
        bool first = s->steps++ == 0;
        double total = 0.0, unused = 0.0;

        for (int j = 0; j < stats->num_nodes; ++j) {
            adapt_cell_t *c = &stats->cells[(size_t)e * (size_t)stats->num_nodes + (size_t)j];
            double x = (double)tokens[(size_t)e * (size_t)stats->num_nodes + (size_t)j];

            adapt_ewma(stats->alpha, first, x, &c->mean, &c->var);
            adapt_ewma(stats->alpha, first, x > 0.0 ? 1.0 : 0.0, &c->busy, &unused);
            total += x;
        }
        adapt_ewma(stats->alpha, first, total, &s->mean, &s->var);
        s->bytes = s->mean * stats->row_bytes;
    }
}

const adapt_expert_stats_t *adapt_stats_expert(const adapt_stats_t *stats, int expert)
{
    return (expert >= 0 && expert < stats->num_experts) ? &stats->experts[expert] : NULL;
}

const adapt_cell_t *adapt_stats_cell(const adapt_stats_t *stats, int expert, int node)
{
    if (expert < 0 || expert >= stats->num_experts || node < 0 || node >= stats->num_nodes) {
        return NULL;
    }
    return &stats->cells[(size_t)expert * (size_t)stats->num_nodes + (size_t)node];
}
