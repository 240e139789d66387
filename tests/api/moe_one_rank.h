/*
 * The one-rank MoE object the API tests share (test_moe_calls.c, test_moe_exact.c): a
 * communicator of one rank over tcp on loopback, an object of 8 fp32 experts in Push form
 * (state: the fixture), inputs whose results identity experts make plain, and their check.
 */
#ifndef STRATA_TESTS_API_MOE_ONE_RANK_H
#define STRATA_TESTS_API_MOE_ONE_RANK_H

#include <strata/strata.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/one_rank.h"

#define EXPERTS 8
#define HIDDEN  64
#define TOKENS  16
#define TOPK    2

typedef struct fixture {
    strata_comm_t *comm;
    strata_moe_t  *moe;
    float          x[TOKENS * HIDDEN], out[TOKENS * HIDDEN], w[TOKENS * TOPK];
    int64_t        idx[TOKENS * TOPK];
} fixture_t;

static int setup(void **state)
{
    static fixture_t f;
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_FP32, .combine_dtype = STRATA_DTYPE_FP32,
                             .max_tokens = TOKENS, .mode = STRATA_MOE_MODE_PUSH};

    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    if (strata_comm_create(NULL, &one_rank, &f.comm) != STRATA_OK ||
        strata_moe_create(f.comm, &p, &f.moe) != STRATA_OK) {
        return -1;
    }
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    strata_moe_destroy(f->moe);
    strata_comm_destroy(f->comm);
    return 0;
}

/* n tokens, expert (t + k * 3) % EXPERTS for slot k; weights 1/2; x[t][h] = t + h/64. */
static void fill(fixture_t *f, int n)
{
    for (int t = 0; t < n; ++t) {
        for (int k = 0; k < TOPK; ++k) {
            f->idx[t * TOPK + k] = (t + k * 3) % EXPERTS;
            f->w[t * TOPK + k]   = 0.5f;
        }
        for (int h = 0; h < HIDDEN; ++h) {
            f->x[t * HIDDEN + h] = (float)t + (float)h / 64.0f;
        }
    }
}

static void check(const fixture_t *f, int n)
{
    for (int t = 0; t < n; ++t) {
        float routed = 0.0f;

        for (int k = 0; k < TOPK; ++k) {
            routed += f->idx[t * TOPK + k] >= 0 ? 0.5f : 0.0f;
        }
        for (int h = 0; h < HIDDEN; ++h) {
            assert_true(f->out[t * HIDDEN + h] == routed * f->x[t * HIDDEN + h]);
        }
    }
}

#endif
