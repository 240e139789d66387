/*
 * strata-tune's model of a step: each owner rank's time is the sum over its experts of the
 * chosen mode's modelled cost, and the step takes as long as the slowest owner. Replays of
 * the four strategies, their percentiles, and the sweep of policy parameters.
 */
#include "strata_tune.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tune_adaptive_run reads step t - 1's modes from the ring after step t's are in it. */
_Static_assert(TUNE_LAG >= 2, "the ring keeps the previous step's modes");

const char *const tune_strategy_names[TUNE_STRATEGIES] = {
    [TUNE_PUSH]     = "push",
    [TUNE_PULL]     = "pull",
    [TUNE_ADAPTIVE] = "adaptive",
    [TUNE_ORACLE]   = "oracle",
};

static const double tune_full_alpha[]   = {0.1, 0.2, 0.3, 0.5, 0.7};
static const double tune_full_margin[]  = {0.0, 0.05, 0.1, 0.2, 0.4};
static const double tune_full_noise_k[] = {0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0};
static const int    tune_full_dwell[]   = {1, 2, 3, 5, 8};

const tune_grid_t tune_grid_full = {
    .alpha       = tune_full_alpha,
    .num_alpha   = UTIL_ARRAY_SIZE(tune_full_alpha),
    .margin      = tune_full_margin,
    .num_margin  = UTIL_ARRAY_SIZE(tune_full_margin),
    .noise_k     = tune_full_noise_k,
    .num_noise_k = UTIL_ARRAY_SIZE(tune_full_noise_k),
    .dwell       = tune_full_dwell,
    .num_dwell   = UTIL_ARRAY_SIZE(tune_full_dwell),
};

static const double tune_small_alpha[]   = {0.3, 0.5};
static const double tune_small_margin[]  = {0.05, 0.1};
static const double tune_small_noise_k[] = {0.5, 1.0};
static const int    tune_small_dwell[]   = {2, 3};

const tune_grid_t tune_grid_small = {
    .alpha       = tune_small_alpha,
    .num_alpha   = UTIL_ARRAY_SIZE(tune_small_alpha),
    .margin      = tune_small_margin,
    .num_margin  = UTIL_ARRAY_SIZE(tune_small_margin),
    .noise_k     = tune_small_noise_k,
    .num_noise_k = UTIL_ARRAY_SIZE(tune_small_noise_k),
    .dwell       = tune_small_dwell,
    .num_dwell   = UTIL_ARRAY_SIZE(tune_small_dwell),
};

void tune_case_destroy(tune_case_t *tc)
{
    if (tc == NULL) {
        return;
    }
    free(tc->owner_node);
    free(tc->tokens);
    for (int m = 0; m < ADAPT_MODES; ++m) {
        free(tc->cost[m]);
    }
    for (int s = 0; s < TUNE_STRATEGIES; ++s) {
        free(tc->latency[s]);
    }
    free(tc->modes);
    free(tc->ring);
    free(tc->sorted);
    free(tc);
}

static strata_status_t tune_case_alloc(tune_case_t *tc)
{
    size_t steps = (size_t)tc->steps, experts = (size_t)tc->experts;
    bool ok;

    tc->owner_node = calloc(experts, sizeof(*tc->owner_node));
    tc->tokens     = calloc(steps * experts * (size_t)tc->nodes, sizeof(*tc->tokens));
    tc->ring       = calloc(TUNE_LAG * experts, sizeof(*tc->ring));
    tc->sorted     = calloc(steps, sizeof(*tc->sorted));
    ok = tc->owner_node && tc->tokens && tc->ring && tc->sorted;
    for (int m = 0; m < ADAPT_MODES; ++m) {
        ok = (tc->cost[m] = calloc(steps * experts, sizeof(double))) != NULL && ok;
    }
    for (int s = 0; s < TUNE_STRATEGIES; ++s) {
        ok = (tc->latency[s] = calloc(steps, sizeof(double))) != NULL && ok;
    }
    return ok ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

/* tokens[t][e][node] from the per-rank counts, and each mode's cost of each. */
static void tune_case_price(tune_case_t *tc, const adapt_trace_t *trace,
                            const adapt_model_t *model)
{
    int rpn = trace->shape.ranks_per_node;

    for (int t = 0; t < tc->steps; ++t) {
        int32_t *step_tokens = tc->tokens + (size_t)t * (size_t)tc->experts * (size_t)tc->nodes;

        for (int r = 0; r < trace->shape.ranks; ++r) {
            const int32_t *counts = adapt_trace_counts(trace, t, r);

            for (int e = 0; e < tc->experts; ++e) {
                step_tokens[e * tc->nodes + r / rpn] += counts[e];
            }
        }
        for (int e = 0; e < tc->experts; ++e) {
            for (int m = 0; m < ADAPT_MODES; ++m) {
                tc->cost[m][(size_t)t * (size_t)tc->experts + (size_t)e] =
                    adapt_model_step_cost(model, (adapt_mode_t)m, tc->owner_node[e], tc->nodes,
                                          step_tokens + e * tc->nodes, tc->row_bytes);
            }
        }
    }
}

/* One expert's cost in one step under a strategy; modes only for adaptive. */
static double tune_expert_cost(const tune_case_t *tc, tune_strategy_t strategy, size_t cell,
                               const uint8_t *modes, int expert)
{
    double push = tc->cost[ADAPT_MODE_PUSH][cell], pull = tc->cost[ADAPT_MODE_PULL][cell];

    switch (strategy) {
    case TUNE_PUSH:     return push;
    case TUNE_PULL:     return pull;
    case TUNE_ADAPTIVE: return modes[expert] == ADAPT_MODE_PUSH ? push : pull;
    default:            return push < pull ? push : pull;
    }
}

/* The slowest owner's sum over its experts. */
static double tune_step_latency(const tune_case_t *tc, int step, tune_strategy_t strategy,
                                const uint8_t *modes)
{
    double slowest = 0.0;

    for (int o = 0; o < tc->owners; ++o) {
        double sum = 0.0;

        for (int i = 0; i < tc->experts_per_owner; ++i) {
            int e = o * tc->experts_per_owner + i;

            sum += tune_expert_cost(tc, strategy, (size_t)step * (size_t)tc->experts + (size_t)e,
                                    modes, e);
        }
        slowest = sum > slowest ? sum : slowest;
    }
    return slowest;
}

static int tune_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* p50 and p99 of one strategy's latencies, by nearest rank. */
static void tune_case_percentiles(tune_case_t *tc, tune_strategy_t strategy)
{
    size_t n = (size_t)tc->steps;

    memcpy(tc->sorted, tc->latency[strategy], n * sizeof(double));
    qsort(tc->sorted, n, sizeof(double), tune_cmp_double);
    tc->p50[strategy] = tc->sorted[(size_t)ceil(0.50 * (double)n) - 1];
    tc->p99[strategy] = tc->sorted[(size_t)ceil(0.99 * (double)n) - 1];
}

strata_status_t tune_case_create(const adapt_trace_t *trace, const char *name,
                                 const adapt_model_t *model, tune_case_t **case_p)
{
    static const tune_strategy_t fixed[] = {TUNE_PUSH, TUNE_PULL, TUNE_ORACLE};
    tune_case_t *tc = calloc(1, sizeof(*tc));

    if (tc == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    snprintf(tc->name, sizeof(tc->name), "%s", name);
    tc->experts           = trace->shape.experts;
    tc->nodes             = trace->shape.ranks / trace->shape.ranks_per_node;
    tc->steps             = trace->steps;
    tc->owners            = trace->shape.ranks;
    tc->experts_per_owner = trace->shape.experts / trace->shape.ranks;
    tc->row_bytes         = trace->shape.row_bytes;
    if (tune_case_alloc(tc) != STRATA_OK) {
        tune_case_destroy(tc);
        return STRATA_ERR_NO_MEMORY;
    }
    for (int e = 0; e < tc->experts; ++e) {
        tc->owner_node[e] = e / tc->experts_per_owner / trace->shape.ranks_per_node;
    }
    tune_case_price(tc, trace, model);
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); ++i) {
        for (int t = 0; t < tc->steps; ++t) {
            tc->latency[fixed[i]][t] = tune_step_latency(tc, t, fixed[i], NULL);
        }
        tune_case_percentiles(tc, fixed[i]);
    }
    *case_p = tc;
    return STRATA_OK;
}

/*
 * Step t's modes are in ring slot t % TUNE_LAG; after step t that slot takes the modes of step
 * t + LAG, and slot (t + LAG - 1) % LAG holds those of the step before it. Steps 0..LAG-1 run
 * in the initial mode. Switches are counted between applied steps only.
 */
static void tune_adaptive_run(tune_case_t *tc, adapt_policy_t *policy, adapt_mode_t initial)
{
    size_t experts = (size_t)tc->experts;

    memset(tc->ring, (int)initial, TUNE_LAG * experts);
    tc->switches = 0;
    for (int t = 0; t < tc->steps; ++t) {
        uint8_t *modes = tc->ring + (size_t)(t % TUNE_LAG) * experts;
        const uint8_t *before = tc->ring + (size_t)((t + TUNE_LAG - 1) % TUNE_LAG) * experts;

        tc->latency[TUNE_ADAPTIVE][t] = tune_step_latency(tc, t, TUNE_ADAPTIVE, modes);
        if (tc->modes != NULL) {
            memcpy(tc->modes + (size_t)t * experts, modes, experts);
        }
        adapt_policy_step(policy, tc->tokens + (size_t)t * experts * (size_t)tc->nodes);
        for (size_t e = 0; e < experts; ++e) {
            modes[e] = (uint8_t)adapt_policy_mode(policy, (int)e);
            tc->switches += (t + TUNE_LAG < tc->steps && modes[e] != before[e]);
        }
    }
}

strata_status_t tune_case_replay(tune_case_t *tc, const adapt_policy_params_t *params,
                                 bool keep_modes)
{
    adapt_policy_t *policy;
    strata_status_t status;

    if (keep_modes && tc->modes == NULL) {
        tc->modes = malloc((size_t)tc->steps * (size_t)tc->experts);
        if (tc->modes == NULL) {
            return STRATA_ERR_NO_MEMORY;
        }
    } else if (!keep_modes) {
        free(tc->modes);
        tc->modes = NULL;
    }
    status = adapt_policy_create(params, tc->experts, tc->nodes, tc->owner_node, tc->row_bytes,
                                 &policy);
    if (status != STRATA_OK) {
        return status;
    }
    tune_adaptive_run(tc, policy, params->initial);
    adapt_policy_destroy(policy);
    tune_case_percentiles(tc, TUNE_ADAPTIVE);
    return STRATA_OK;
}

double tune_ratio(double value, double reference)
{
    if (reference > 0.0) {
        return value / reference;
    }
    return value > 0.0 ? INFINITY : 1.0;
}

/* The worse of adaptive over the better static mode and over the oracle's bound. */
static double tune_score_at(double adaptive, double push, double pull, double oracle)
{
    double statics = tune_ratio(adaptive, push < pull ? push : pull);
    double to_oracle = tune_ratio(adaptive, TUNE_CHECK_ORACLE * oracle);

    return statics > to_oracle ? statics : to_oracle;
}

double tune_case_score(const tune_case_t *tc)
{
    double p50 = tune_score_at(tc->p50[TUNE_ADAPTIVE], tc->p50[TUNE_PUSH], tc->p50[TUNE_PULL],
                               tc->p50[TUNE_ORACLE]);
    double p99 = tune_score_at(tc->p99[TUNE_ADAPTIVE], tc->p99[TUNE_PUSH], tc->p99[TUNE_PULL],
                               tc->p99[TUNE_ORACLE]);

    return p50 > p99 ? p50 : p99;
}

/*
 * The worst score over the cases, stopping early once it reaches bound (the candidate then
 * cannot win; ties go to the earlier point).
 */
static strata_status_t tune_worst_score(tune_case_t *const *cases, int num_cases,
                                        const adapt_policy_params_t *params, double bound,
                                        double *worst_p)
{
    double worst = 0.0;

    for (int i = 0; i < num_cases && worst < bound; ++i) {
        strata_status_t status = tune_case_replay(cases[i], params, false);
        double ratio;

        if (status != STRATA_OK) {
            return status;
        }
        ratio = tune_case_score(cases[i]);
        worst = ratio > worst ? ratio : worst;
    }
    *worst_p = worst;
    return STRATA_OK;
}

strata_status_t tune_sweep(tune_case_t *const *cases, int num_cases, const tune_grid_t *grid,
                           tool_progress_t *progress, adapt_policy_params_t *params,
                           double *objective_p)
{
    adapt_policy_params_t best = *params, candidate = *params;
    double best_objective = INFINITY, objective;
    int total = grid->num_alpha * grid->num_margin * grid->num_noise_k * grid->num_dwell;
    int done = 0;
    strata_status_t status;

    for (int a = 0; a < grid->num_alpha; ++a) {
        for (int m = 0; m < grid->num_margin; ++m) {
            for (int k = 0; k < grid->num_noise_k; ++k) {
                for (int d = 0; d < grid->num_dwell; ++d) {
                    candidate.alpha   = grid->alpha[a];
                    candidate.margin  = grid->margin[m];
                    candidate.noise_k = grid->noise_k[k];
                    candidate.dwell   = grid->dwell[d];
                    tool_progress_update(progress, "sweep %d/%d configs", done++, total);
                    status = tune_worst_score(cases, num_cases, &candidate, best_objective,
                                              &objective);
                    if (status != STRATA_OK) {
                        return status;
                    }
                    if (objective < best_objective) {
                        best_objective = objective;
                        best           = candidate;
                    }
                }
            }
        }
    }
    *params      = best;
    *objective_p = best_objective;
    return STRATA_OK;
}
