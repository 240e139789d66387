/*
 * strata-tune internals: a routing trace replayed through the adaptive layer's cost model
 * for each strategy (strata_tune_replay.c), the sweep of policy parameters, and the SVG
 * picture of one replay (strata_tune_svg.c).
 */
#ifndef STRATA_TOOLS_STRATA_TUNE_H
#define STRATA_TOOLS_STRATA_TUNE_H

#include "adaptive/adapt_trace.h"
#include "tool_cli.h"
#include "adaptive/adapt.h"

#include <stdbool.h>
#include <stdint.h>

#define TUNE_NAME_LEN 160
/* A step's statistics steer the modes of the step after next: the scheduler publishes the
 * owners' decisions with a step's counts, so they take effect one step later. */
#define TUNE_LAG 2

typedef enum tune_strategy {
    TUNE_PUSH,     /* every expert Push */
    TUNE_PULL,     /* every expert Pull */
    TUNE_ADAPTIVE, /* adapt_policy_t, with the lag */
    TUNE_ORACLE,   /* each expert each step the cheaper mode, known in hindsight */
    TUNE_STRATEGIES
} tune_strategy_t;

extern const char *const tune_strategy_names[TUNE_STRATEGIES];

/** A trace reduced to what the model needs, and the results of replaying it. */
typedef struct tune_case {
    char     name[TUNE_NAME_LEN];
    int      experts;
    int      nodes;
    int      steps;
    int      owners;                   /* owner ranks: the trace's ranks */
    int      experts_per_owner;
    double   row_bytes;
    int     *owner_node;               /* [experts] */
    int32_t *tokens;                   /* [steps][experts][nodes]: tokens from each node */
    double  *cost[ADAPT_MODES];        /* [steps][experts]: modelled seconds in each mode */
    double  *latency[TUNE_STRATEGIES]; /* [steps]: modelled seconds of the slowest owner */
    double   p50[TUNE_STRATEGIES];     /* seconds, nearest rank */
    double   p99[TUNE_STRATEGIES];
    uint64_t switches;                 /* adaptive's mode changes between applied steps */
    uint8_t *modes;                    /* [steps][experts] adaptive's applied modes, or NULL */
    uint8_t *ring;                     /* [TUNE_LAG][experts] scratch: modes decided ahead */
    double  *sorted;                   /* [steps] scratch for percentiles */
} tune_case_t;

/**
 * Aggregate the trace per source node and price every expert's every step in both modes
 * with model; push, pull and oracle are replayed here (they do not depend on the policy).
 * name is copied. The trace may be destroyed afterwards.
 */
strata_status_t tune_case_create(const adapt_trace_t *trace, const char *name,
                                 const adapt_model_t *model, tune_case_t **case_p);
void            tune_case_destroy(tune_case_t *tc);

/**
 * Replay the adaptive strategy with params (whose model should be the one the case was
 * priced with); keep_modes records the mode timeline in tc->modes. STRATA_ERR_INVALID for
 * params adapt_policy_check refuses, STRATA_ERR_NO_MEMORY.
 */
strata_status_t tune_case_replay(tune_case_t *tc, const adapt_policy_params_t *params,
                                 bool keep_modes);

/** value / reference; 1 when both are 0, infinity when only reference is. */
double tune_ratio(double value, double reference);

#define TUNE_CHECK_ORACLE 1.10 /* adaptive may be this much slower than the oracle */

/**
 * The check's measure after tune_case_replay: the worst, over p50 and p99, of adaptive over
 * the better of all-push and all-pull and of adaptive over TUNE_CHECK_ORACLE times the
 * oracle. At most 1 where the case passes the check.
 */
double tune_case_score(const tune_case_t *tc);

/** The candidate values of each swept parameter. */
typedef struct tune_grid {
    const double *alpha;
    int           num_alpha;
    const double *margin;
    int           num_margin;
    const double *noise_k;
    int           num_noise_k;
    const int    *dwell;
    int           num_dwell;
} tune_grid_t;

/** alpha {0.1,0.2,0.3,0.5,0.7} x margin {0,0.05,0.1,0.2,0.4} x noise_k {0,0.5,1,2,3,4,5}
 *  x dwell {1,2,3,5,8}. */
extern const tune_grid_t tune_grid_full;
/** A 16-point subset of the full grid, for quick tests. */
extern const tune_grid_t tune_grid_small;

/**
 * Try every point of grid over params' other fields (model, initial mode); the winner has
 * the least worst-case tune_case_score over the cases (ties: the earlier point) and goes to
 * *params, its objective to *objective_p. The cases are left replayed with some candidate:
 * replay them again with the winner. Each point tried updates progress (the caller ends it).
 */
strata_status_t tune_sweep(tune_case_t *const *cases, int num_cases, const tune_grid_t *grid,
                           tool_progress_t *progress, adapt_policy_params_t *params,
                           double *objective_p);

/**
 * Draw the replay of tc (replayed with keep_modes) as an SVG file: step latencies of the four
 * strategies, and adaptive's mode of each expert at each step. STRATA_ERR_IO on a write
 * failure (errno says why).
 */
strata_status_t tune_svg_write(const tune_case_t *tc, const char *path);

#endif
