/*
 * Per-expert routing statistics: exponentially weighted mean and variance (the incremental
 * form: diff = x - mean, mean += alpha diff, var = (1 - alpha)(var + alpha diff^2)).
 */
#include "adapt.h"
#include "util/util.h"

#include <stdlib.h>

struct adapt_stats {
    int                   num_experts;
    double                alpha;
    adapt_expert_stats_t *experts;
};

strata_status_t adapt_stats_create(int num_experts, double alpha, adapt_stats_t **stats_p)
{
    adapt_stats_t *stats;

    if (num_experts <= 0 || !(alpha > 0.0 && alpha <= 1.0)) {
        UTIL_LOG_ERROR("adaptive: invalid statistics parameters: %d experts, alpha %g "
                       "(need experts > 0 and 0 < alpha <= 1)", num_experts, alpha);
        return STRATA_ERR_INVALID;
    }
    stats = calloc(1, sizeof(*stats));
    if (stats == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    stats->experts = calloc((size_t)num_experts, sizeof(*stats->experts));
    if (stats->experts == NULL) {
        free(stats);
        return STRATA_ERR_NO_MEMORY;
    }
    stats->num_experts = num_experts;
    stats->alpha       = alpha;
    *stats_p           = stats;
    return STRATA_OK;
}

void adapt_stats_destroy(adapt_stats_t *stats)
{
    if (stats == NULL) {
        return;
    }
    free(stats->experts);
    free(stats);
}

void adapt_stats_update(adapt_stats_t *stats, const int32_t *tokens_per_expert)
{
    for (int e = 0; e < stats->num_experts; ++e) {
        adapt_expert_stats_t *s = &stats->experts[e];
        double x = (double)tokens_per_expert[e];
        double diff;

        if (s->steps++ == 0) {
            s->mean = x; /* the first step is the best estimate there is */
            s->var  = 0.0;
            continue;
        }
        diff = x - s->mean;
        s->mean += stats->alpha * diff;
        s->var = (1.0 - stats->alpha) * (s->var + stats->alpha * diff * diff);
    }
}

const adapt_expert_stats_t *adapt_stats_expert(const adapt_stats_t *stats, int expert)
{
    return (expert >= 0 && expert < stats->num_experts) ? &stats->experts[expert] : NULL;
}
