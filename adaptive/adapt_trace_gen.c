/*
 * Synthetic routing traces: Zipf popularity over a ranking of the experts that drifts, bursts
 * on random experts, a per-node perturbation; seeded with its own generator (xoshiro256**
 * seeded by splitmix64) so a seed gives the same trace everywhere.
 */
#include "adaptive/adapt_trace.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEN_MAX_ZIPF         16.0
#define GEN_MAX_BURST_FACTOR 1e6
#define GEN_MAX_NODE_JITTER  4.0
#define GEN_REJECT_TRIES     32 /* draws from all experts before drawing from the rest */

typedef struct gen_rng {
    uint64_t s[4];
} gen_rng_t;

typedef struct gen_state {
    const adapt_trace_gen_params_t *params;
    gen_rng_t rng;
    int      *ranking;     /* [experts]: the expert at each popularity rank */
    double   *rank_weight; /* [experts]: 1 / (rank + 1)^s */
    double   *node_factor; /* [nodes][experts]: the node's fixed perturbation */
    double   *burst;       /* [experts]: this step's multiplier */
    double   *weight;      /* [experts]: one node's weights in this step */
    double   *prob;        /* [experts]: alias table of weight: keep column i with prob[i], */
    int      *alias;       /* [experts]: else take alias[i] (Vose's method) */
    int      *work;        /* [experts] scratch: the columns below and above the mean */
    uint64_t *taken;       /* [experts]: serial of the last token that picked the expert */
    uint64_t  token;       /* serial of the token being routed */
} gen_state_t;

static uint64_t gen_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void gen_rng_seed(gen_rng_t *rng, uint64_t seed)
{
    for (int i = 0; i < 4; ++i) {
        rng->s[i] = gen_splitmix64(&seed);
    }
}

static uint64_t gen_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static uint64_t gen_rng_next(gen_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = gen_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = gen_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static double gen_uniform(gen_rng_t *rng)
{
    return (double)(gen_rng_next(rng) >> 11) * 0x1.0p-53;
}

/* Uniform in 0..n-1 (n >= 1). */
static int gen_below(gen_rng_t *rng, int n)
{
    int value = (int)(gen_uniform(rng) * n);

    return (value < n) ? value : n - 1;
}

/* Standard normal (Box-Muller). */
static double gen_normal(gen_rng_t *rng)
{
    double u = 1.0 - gen_uniform(rng); /* (0, 1]: log is finite */

    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * gen_uniform(rng));
}

static strata_status_t gen_check(const adapt_trace_gen_params_t *p, char *err)
{
    if (!(p->zipf_s >= 0.0 && p->zipf_s <= GEN_MAX_ZIPF)) {
        util_reason(err, "zipf exponent %g out of range (0..%g)", p->zipf_s, GEN_MAX_ZIPF);
    } else if (p->drift_period < 0) {
        util_reason(err, "drift period %d is negative (0: no drift)", p->drift_period);
    } else if (!(p->drift_fraction >= 0.0 && p->drift_fraction <= 1.0)) {
        util_reason(err, "drift fraction %g out of range (0..1)", p->drift_fraction);
    } else if (!(p->burst_prob >= 0.0 && p->burst_prob <= 1.0)) {
        util_reason(err, "burst probability %g out of range (0..1)", p->burst_prob);
    } else if (p->burst_experts < 0 || p->burst_experts > p->shape.experts) {
        util_reason(err, "burst experts %d out of range (0..%d)", p->burst_experts,
                    p->shape.experts);
    } else if (!(p->burst_factor >= 1.0 && p->burst_factor <= GEN_MAX_BURST_FACTOR)) {
        util_reason(err, "burst factor %g out of range (1..%g)", p->burst_factor,
                    GEN_MAX_BURST_FACTOR);
    } else if (!(p->node_jitter >= 0.0 && p->node_jitter <= GEN_MAX_NODE_JITTER)) {
        util_reason(err, "node jitter %g out of range (0..%g)", p->node_jitter,
                    GEN_MAX_NODE_JITTER);
    } else {
        return STRATA_OK;
    }
    return STRATA_ERR_INVALID;
}

void adapt_trace_gen_defaults(adapt_trace_gen_params_t *params)
{
    *params = (adapt_trace_gen_params_t){
        .shape          = {.experts        = 64,
                           .ranks          = 32,
                           .ranks_per_node = 8,
                           .tokens         = 128,
                           .topk           = 8,
                           .row_bytes      = 7168 * 2},
        .steps          = 400,
        .zipf_s         = 1.2,
        .drift_period   = 50,
        .drift_fraction = 0.25,
        .burst_prob     = 0.05,
        .burst_experts  = 4,
        .burst_factor   = 8.0,
        .node_jitter    = 0.2,
        .seed           = 1,
    };
}

static void gen_state_free(gen_state_t *g)
{
    free(g->ranking);
    free(g->rank_weight);
    free(g->node_factor);
    free(g->burst);
    free(g->weight);
    free(g->prob);
    free(g->alias);
    free(g->work);
    free(g->taken);
}

/* Arrays, a random first ranking, the Zipf weights and each node's perturbation. */
static strata_status_t gen_state_init(gen_state_t *g, const adapt_trace_gen_params_t *params)
{
    int experts = params->shape.experts;
    int nodes = params->shape.ranks / params->shape.ranks_per_node;
    size_t n = (size_t)experts;

    *g = (gen_state_t){.params = params};
    g->ranking     = malloc(n * sizeof(*g->ranking));
    g->rank_weight = malloc(n * sizeof(*g->rank_weight));
    g->node_factor = malloc((size_t)nodes * n * sizeof(*g->node_factor));
    g->burst       = malloc(n * sizeof(*g->burst));
    g->weight      = malloc(n * sizeof(*g->weight));
    g->prob        = malloc(n * sizeof(*g->prob));
    g->alias       = malloc(n * sizeof(*g->alias));
    g->work        = malloc(n * sizeof(*g->work));
    g->taken       = calloc(n, sizeof(*g->taken));
    if (!g->ranking || !g->rank_weight || !g->node_factor || !g->burst || !g->weight ||
        !g->prob || !g->alias || !g->work || !g->taken) {
        gen_state_free(g);
        return STRATA_ERR_NO_MEMORY;
    }
    gen_rng_seed(&g->rng, params->seed);
    for (int i = 0; i < experts; ++i) {
        int j = gen_below(&g->rng, i + 1); /* Fisher-Yates, inside out */

        if (j != i) {
            g->ranking[i] = g->ranking[j];
        }
        g->ranking[j] = i;
        g->rank_weight[i] = pow(i + 1.0, -params->zipf_s);
    }
    for (size_t i = 0; i < (size_t)nodes * n; ++i) {
        g->node_factor[i] = exp(params->node_jitter * gen_normal(&g->rng));
    }
    return STRATA_OK;
}

/* Every drift_period steps, swap experts of the hotter half of the ranking with any. */
static void gen_drift(gen_state_t *g, int step)
{
    const adapt_trace_gen_params_t *p = g->params;
    int experts = p->shape.experts;
    long swaps = lround(p->drift_fraction * experts / 2.0);

    if (p->drift_period == 0 || step == 0 || step % p->drift_period != 0) {
        return;
    }
    if (swaps == 0 && p->drift_fraction > 0.0) {
        swaps = 1;
    }
    for (long k = 0; k < swaps; ++k) {
        int i = gen_below(&g->rng, experts > 1 ? experts / 2 : 1);
        int j = gen_below(&g->rng, experts);
        int tmp = g->ranking[i];

        g->ranking[i] = g->ranking[j];
        g->ranking[j] = tmp;
    }
}

static void gen_burst(gen_state_t *g)
{
    const adapt_trace_gen_params_t *p = g->params;

    for (int e = 0; e < p->shape.experts; ++e) {
        g->burst[e] = 1.0;
    }
    if (gen_uniform(&g->rng) < p->burst_prob) {
        for (int b = 0; b < p->burst_experts; ++b) {
            g->burst[gen_below(&g->rng, p->shape.experts)] = p->burst_factor;
        }
    }
}

/*
 * Vose's alias table of g->weight: column i keeps i with chance prob[i] and gives alias[i]
 * otherwise, each column carrying 1/experts of the mass. Columns below the mean are filled
 * up from those above (work holds the former from the front, the latter from the back).
 */
static void gen_alias_build(gen_state_t *g, double sum)
{
    int experts = g->params->shape.experts;
    int small = 0, large = experts;

    for (int e = 0; e < experts; ++e) {
        g->prob[e]  = g->weight[e] * experts / sum;
        g->alias[e] = e;
        if (g->prob[e] < 1.0) {
            g->work[small++] = e;
        } else {
            g->work[--large] = e;
        }
    }
    while (small > 0 && large < experts) {
        int lo = g->work[--small], hi = g->work[large];

        g->alias[lo] = hi;
        g->prob[hi] -= 1.0 - g->prob[lo];
        if (g->prob[hi] < 1.0) {
            large++;
            g->work[small++] = hi;
        }
    }
    while (large < experts) {
        g->prob[g->work[large++]] = 1.0; /* rounding left these a hair off 1 */
    }
    while (small > 0) {
        g->prob[g->work[--small]] = 1.0;
    }
}

/* This step's weights as seen from one node, and their alias table. */
static void gen_weights(gen_state_t *g, int node)
{
    int experts = g->params->shape.experts;
    const double *factor = g->node_factor + (size_t)node * (size_t)experts;
    double sum = 0.0;

    for (int i = 0; i < experts; ++i) {
        int e = g->ranking[i];

        g->weight[e] = g->rank_weight[i] * factor[e] * g->burst[e];
        sum += g->weight[e];
    }
    gen_alias_build(g, sum);
}

/* An expert by weight among all, from the alias table. */
static int gen_draw_any(gen_state_t *g)
{
    int experts = g->params->shape.experts;
    double u = gen_uniform(&g->rng) * experts;
    int column = (int)u;

    if (column >= experts) {
        column = experts - 1;
    }
    return (u - column < g->prob[column]) ? column : g->alias[column];
}

/* An expert by weight among those this token has not taken (at least one is left). */
static int gen_draw_rest(gen_state_t *g)
{
    int experts = g->params->shape.experts;
    double rest = 0.0, u;
    int last = -1;

    for (int e = 0; e < experts; ++e) {
        rest += (g->taken[e] == g->token) ? 0.0 : g->weight[e];
    }
    u = gen_uniform(&g->rng) * rest;
    for (int e = 0; e < experts; ++e) {
        if (g->taken[e] == g->token) {
            continue;
        }
        last = e;
        u -= g->weight[e];
        if (u < 0.0) {
            return e;
        }
    }
    return last; /* rounding left u at or above zero */
}

/*
 * The next expert of this token, by weight without replacement: draws from all experts
 * until one not yet taken comes up (cheap while the taken ones weigh little), then from
 * the rest directly. Either way the draw follows the weights of the experts not taken.
 */
static int gen_draw(gen_state_t *g)
{
    for (int tries = 0; tries < GEN_REJECT_TRIES; ++tries) {
        int e = gen_draw_any(g);

        if (g->taken[e] != g->token) {
            return e;
        }
    }
    return gen_draw_rest(g);
}

static void gen_rank_step(gen_state_t *g, int32_t *counts)
{
    const adapt_trace_shape_t *shape = &g->params->shape;

    for (int t = 0; t < shape->tokens; ++t) {
        g->token++;
        for (int k = 0; k < shape->topk; ++k) {
            int e = gen_draw(g);

            g->taken[e] = g->token;
            counts[e]++;
        }
    }
}

strata_status_t adapt_trace_generate(const adapt_trace_gen_params_t *params,
                                     adapt_trace_t **trace_p, char *err)
{
    const adapt_trace_shape_t *shape = &params->shape;
    adapt_trace_t *trace;
    strata_status_t status;
    gen_state_t g;

    if ((status = gen_check(params, err)) != STRATA_OK ||
        (status = adapt_trace_create(shape, params->steps, &trace, err)) != STRATA_OK) {
        return status;
    }
    if (gen_state_init(&g, params) != STRATA_OK) {
        adapt_trace_destroy(trace);
        util_reason(err, "out of memory generating a trace");
        return STRATA_ERR_NO_MEMORY;
    }
    for (int t = 0; t < params->steps; ++t) {
        gen_drift(&g, t);
        gen_burst(&g);
        for (int r = 0; r < shape->ranks; ++r) {
            if (r % shape->ranks_per_node == 0) {
                gen_weights(&g, r / shape->ranks_per_node);
            }
            gen_rank_step(&g, adapt_trace_counts(trace, t, r));
        }
    }
    gen_state_free(&g);
    *trace_p = trace;
    return STRATA_OK;
}
