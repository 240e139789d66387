/*
 * A small Mixture-of-Experts layer over strata, run by every rank of a job:
 *
 *     router:   logits = x W_router, softmax, top-k, weights renormalised over the k
 *     dispatch: each token to the ranks owning its k experts (strata_moe_dispatch)
 *     experts:  y = relu(x W_e) for every row expert e received
 *     combine:  out = sum over k of weight_k * y_k (strata_moe_combine)
 *
 * Every rank then computes the whole layer alone, for every rank's tokens (all inputs are
 * functions of a seed), and checks its own rows against that. Run it with a launcher, e.g.
 *
 *     build/tools/strata-run -n 4 --nodes 2 -- build/examples/moe_layer
 *
 * Exit status 0 when every rank's output matches.
 */
#include <strata/strata.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIDDEN       128
#define TOPK         2
#define TOKENS       32 /* per rank */
#define EXPERTS_PER_RANK 2
#define STEPS        3  /* forward passes, each a new batch */
#define TOLERANCE    1e-5f

/* Deterministic values in [-0.5, 0.5): the same on every rank. */
static float value(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = (a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full) ^ (c + 0x165667b1);

    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (float)(x % 1000000) / 1000000.0f - 0.5f;
}

typedef struct layer {
    int    num_experts;
    float *router;  /* [HIDDEN][num_experts] */
    float *experts; /* [num_experts][HIDDEN][HIDDEN] */
} layer_t;

static void token_input(int step, int rank, int t, float *x)
{
    for (int h = 0; h < HIDDEN; ++h) {
        x[h] = value(1000 + (uint64_t)step, ((uint64_t)rank << 20) | (uint64_t)t, (uint64_t)h);
    }
}

/* Router: the k largest softmax probabilities, renormalised to sum to 1. */
static void route(const layer_t *l, const float *x, int64_t *idx, float *weights)
{
    float logits[256], max = -INFINITY, sum = 0.0f;

    for (int e = 0; e < l->num_experts; ++e) {
        logits[e] = 0.0f;
        for (int h = 0; h < HIDDEN; ++h) {
            logits[e] += x[h] * l->router[(size_t)h * (size_t)l->num_experts + (size_t)e];
        }
        max = fmaxf(max, logits[e]);
    }
    for (int k = 0; k < TOPK; ++k) {
        int best = -1;

        for (int e = 0; e < l->num_experts; ++e) {
            int taken = 0;

            for (int j = 0; j < k; ++j) {
                taken |= idx[j] == e;
            }
            if (!taken && (best < 0 || logits[e] > logits[best])) {
                best = e;
            }
        }
        idx[k]     = best;
        weights[k] = expf(logits[best] - max);
        sum       += weights[k];
    }
    for (int k = 0; k < TOPK; ++k) {
        weights[k] /= sum;
    }
}

/* One expert on one row: y = relu(x W_e). */
static void expert_forward(const layer_t *l, int e, const float *x, float *y)
{
    const float *w = l->experts + (size_t)e * HIDDEN * HIDDEN;

    for (int j = 0; j < HIDDEN; ++j) {
        float acc = 0.0f;

        for (int h = 0; h < HIDDEN; ++h) {
            acc += x[h] * w[(size_t)h * HIDDEN + (size_t)j];
        }
        y[j] = acc > 0.0f ? acc : 0.0f;
    }
}

/* The layer for one token on one rank, the reference: the same arithmetic, no network. */
static void reference_token(const layer_t *l, const float *x, float *out)
{
    int64_t idx[TOPK];
    float weights[TOPK], y[HIDDEN];

    route(l, x, idx, weights);
    memset(out, 0, sizeof(float) * HIDDEN);
    for (int k = 0; k < TOPK; ++k) {
        expert_forward(l, (int)idx[k], x, y);
        for (int h = 0; h < HIDDEN; ++h) {
            out[h] += weights[k] * y[h];
        }
    }
}

static int make_layer(layer_t *l, int num_experts)
{
    l->num_experts = num_experts;
    l->router  = malloc(sizeof(float) * HIDDEN * (size_t)num_experts);
    l->experts = malloc(sizeof(float) * HIDDEN * HIDDEN * (size_t)num_experts);
    if (l->router == NULL || l->experts == NULL) {
        return -1;
    }
    for (size_t i = 0; i < (size_t)HIDDEN * (size_t)num_experts; ++i) {
        l->router[i] = value(1, i, 0);
    }
    for (size_t i = 0; i < (size_t)HIDDEN * HIDDEN * (size_t)num_experts; ++i) {
        l->experts[i] = value(2, i, 0) * 0.25f;
    }
    return 0;
}

/* Run the received rows through their experts, into recv->expert_y. */
static void run_experts(const layer_t *l, const strata_moe_recv_t *recv)
{
    for (int e = 0; e < recv->num_local_experts; ++e) {
        for (int row = 0; row < recv->count[e]; ++row) {
            size_t at = (size_t)e * (size_t)recv->capacity + (size_t)row;

            expert_forward(l, recv->first_expert + e,
                           (const float *)((const char *)recv->x + at * recv->row_bytes),
                           (float *)((char *)recv->expert_y + at * recv->y_row_bytes));
        }
    }
}

static int forward_and_check(strata_moe_t *moe, const layer_t *l, int step, int rank)
{
    static float x[TOKENS][HIDDEN] __attribute__((aligned(64)));
    static float out[TOKENS][HIDDEN] __attribute__((aligned(64)));
    float weights[TOKENS][TOPK], ref[HIDDEN];
    int64_t idx[TOKENS][TOPK];
    strata_moe_recv_t recv;
    strata_status_t status;
    float worst = 0.0f;

    for (int t = 0; t < TOKENS; ++t) {
        token_input(step, rank, t, x[t]);
        route(l, x[t], idx[t], weights[t]);
    }
    status = strata_moe_dispatch(moe, x, NULL, &idx[0][0], TOKENS, &recv);
    if (status == STRATA_OK) {
        run_experts(l, &recv);
        status = strata_moe_combine(moe, NULL, &weights[0][0], out);
    }
    if (status != STRATA_OK) {
        fprintf(stderr, "rank %d: step %d: %s\n", rank, step, strata_status_string(status));
        return -1;
    }
    for (int t = 0; t < TOKENS; ++t) {
        reference_token(l, x[t], ref);
        for (int h = 0; h < HIDDEN; ++h) {
            float err = fabsf(out[t][h] - ref[h]) / fmaxf(1.0f, fabsf(ref[h]));

            worst = fmaxf(worst, err);
        }
    }
    if (worst > TOLERANCE) {
        fprintf(stderr, "rank %d: step %d: output differs from the one-rank layer by %g\n",
                rank, step, (double)worst);
        return -1;
    }
    return 0;
}

int main(void)
{
    strata_bootstrap_t *bootstrap;
    strata_comm_t *comm;
    strata_moe_t *moe = NULL;
    layer_t layer;
    strata_status_t status;
    int rank, failed = 0;

    status = strata_bootstrap_from_env(&bootstrap);
    if (status == STRATA_OK) {
        status = strata_comm_create(NULL, bootstrap, &comm);
    }
    if (status != STRATA_OK) {
        fprintf(stderr, "moe_layer: %s\n", strata_status_string(status));
        return 1;
    }
    rank = strata_comm_rank(comm);
    if (make_layer(&layer, EXPERTS_PER_RANK * strata_comm_size(comm)) != 0) {
        return 1;
    }
    {
        strata_moe_params_t params = {.num_experts   = layer.num_experts,
                                      .topk          = TOPK,
                                      .hidden        = HIDDEN,
                                      .dtype         = STRATA_DTYPE_FP32,
                                      .combine_dtype = STRATA_DTYPE_FP32,
                                      .max_tokens    = TOKENS};

        status = strata_moe_create(comm, &params, &moe);
    }
    for (int step = 0; status == STRATA_OK && step < STEPS && !failed; ++step) {
        failed = forward_and_check(moe, &layer, step, rank) != 0;
    }
    if (status != STRATA_OK) {
        fprintf(stderr, "moe_layer: strata_moe_create: %s\n", strata_status_string(status));
        failed = 1;
    } else if (!failed) {
        printf("rank %d of %d (node %d): %d forward passes of a %d-expert top-%d layer match "
               "the one-rank layer\n", rank, strata_comm_size(comm), strata_comm_node(comm),
               STEPS, layer.num_experts, TOPK);
    }
    strata_moe_destroy(moe);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bootstrap);
    free(layer.router);
    free(layer.experts);
    return failed;
}
