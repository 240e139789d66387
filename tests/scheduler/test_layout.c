/*
 * Dispatch layout counts against a brute-force reference on seeded random routing, and
 * bad input rejected with the counts left zeroed.
 */
#include "scheduler/sched.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define MAX_TOKENS 512

/* Reference: mark each (token, rank) and (token, node) pair, then count the marks. */
static void reference(const sched_layout_params_t *p, const int64_t *idx, int num_tokens,
                      int32_t *per_expert, int32_t *per_rank, int32_t *per_node)
{
    int experts_per_rank = p->num_experts / p->world_size;
    int num_nodes = p->world_size / p->ranks_per_node;

    memset(per_expert, 0, (size_t)p->num_experts * sizeof(int32_t));
    memset(per_rank, 0, (size_t)p->world_size * sizeof(int32_t));
    memset(per_node, 0, (size_t)num_nodes * sizeof(int32_t));
    for (int t = 0; t < num_tokens; ++t) {
        for (int r = 0; r < p->world_size; ++r) {
            bool hit = false;
            for (int k = 0; k < p->topk; ++k) {
                int64_t e = idx[t * p->topk + k];
                hit = hit || (e >= 0 && e / experts_per_rank == r);
            }
            per_rank[r] += hit;
        }
        for (int n = 0; n < num_nodes; ++n) {
            bool hit = false;
            for (int k = 0; k < p->topk; ++k) {
                int64_t e = idx[t * p->topk + k];
                hit = hit || (e >= 0 && e / experts_per_rank / p->ranks_per_node == n);
            }
            per_node[n] += hit;
        }
        for (int k = 0; k < p->topk; ++k) {
            if (idx[t * p->topk + k] >= 0) {
                per_expert[idx[t * p->topk + k]]++;
            }
        }
    }
}

/* Distinct experts per token; skewed routing favours low ids; some slots -1. */
static void random_routing(const sched_layout_params_t *p, int64_t *idx, int num_tokens,
                           bool skewed)
{
    for (int t = 0; t < num_tokens; ++t) {
        for (int k = 0; k < p->topk; ++k) {
            int64_t e;
            bool dup;
            do {
                /* Skewed: half the picks land on the lowest quarter of the experts. */
                int hot = p->num_experts / 4 > 0 ? p->num_experts / 4 : 1;
                e = (skewed && rand() % 2) ? rand() % hot : rand() % p->num_experts;
                dup = false;
                for (int j = 0; j < k; ++j) {
                    dup = dup || idx[t * p->topk + j] == e;
                }
            } while (dup);
            idx[t * p->topk + k] = (rand() % 10 == 0) ? -1 : e;
        }
    }
}

static void test_random_against_reference(void **state)
{
    static int64_t idx[MAX_TOKENS * 8];
    int32_t want_e[256], want_r[32], want_n[32];

    (void)state;
    for (unsigned seed = 1; seed <= 200; ++seed) {
        sched_layout_params_t p;
        sched_layout_t *layout;
        int num_tokens;

        srand(seed);
        p.ranks_per_node = 1 + rand() % 4;
        p.world_size     = p.ranks_per_node * (1 + rand() % 4);
        p.num_experts    = p.world_size * (1 + rand() % 8);
        p.topk           = 1 + rand() % (p.num_experts < 8 ? p.num_experts : 8);
        num_tokens       = rand() % MAX_TOKENS;
        random_routing(&p, idx, num_tokens, seed % 2 == 0);
        reference(&p, idx, num_tokens, want_e, want_r, want_n);

        assert_int_equal(sched_layout_create(&p, &layout), STRATA_OK);
        assert_int_equal(sched_layout_count(layout, idx, num_tokens), STRATA_OK);
        if (memcmp(layout->tokens_per_expert, want_e, (size_t)p.num_experts * 4) != 0 ||
            memcmp(layout->tokens_per_rank, want_r, (size_t)p.world_size * 4) != 0 ||
            memcmp(layout->tokens_per_node, want_n,
                   (size_t)(p.world_size / p.ranks_per_node) * 4) != 0) {
            fail_msg("seed %u: layout differs from the reference", seed);
        }
        sched_layout_destroy(layout);
    }
}

static void test_dedup_example(void **state)
{
    /* 4 ranks on 2 nodes, 2 experts per rank: token 0 -> experts 0,1 (rank 0 twice), 2. */
    sched_layout_params_t p = {.num_experts = 8, .topk = 3, .world_size = 4, .ranks_per_node = 2};
    const int64_t idx[] = {0, 1, 2, /* */ 7, -1, 4};
    sched_layout_t *layout;

    (void)state;
    assert_int_equal(sched_layout_create(&p, &layout), STRATA_OK);
    assert_int_equal(sched_layout_count(layout, idx, 2), STRATA_OK);
    assert_int_equal(layout->tokens_per_rank[0], 1);
    assert_int_equal(layout->tokens_per_rank[1], 1);
    assert_int_equal(layout->tokens_per_rank[2], 1);
    assert_int_equal(layout->tokens_per_rank[3], 1);
    assert_int_equal(layout->tokens_per_node[0], 1);
    assert_int_equal(layout->tokens_per_node[1], 1);
    assert_int_equal(layout->tokens_per_expert[7], 1);
    assert_int_equal(sched_expert_rank(&p, 7), 3);
    sched_layout_destroy(layout);
}

static void test_bad_input(void **state)
{
    sched_layout_params_t p = {.num_experts = 8, .topk = 2, .world_size = 4, .ranks_per_node = 2};
    sched_layout_params_t bad;
    const int64_t good[] = {0, 1};
    const int64_t out_of_range[] = {0, 1, 8, 2};
    const int64_t negative[] = {-2, 1};
    const int64_t repeated[] = {3, 3};
    sched_layout_t *layout;

    (void)state;
    assert_int_equal(sched_layout_create(&p, &layout), STRATA_OK);
    assert_int_equal(sched_layout_count(layout, good, 1), STRATA_OK);
    assert_int_equal(sched_layout_count(layout, out_of_range, 2), STRATA_ERR_INVALID);
    assert_int_equal(layout->tokens_per_expert[0], 0); /* zeroed, not half-counted */
    assert_int_equal(sched_layout_count(layout, negative, 1), STRATA_ERR_INVALID);
    assert_int_equal(sched_layout_count(layout, repeated, 1), STRATA_ERR_INVALID);
    assert_int_equal(sched_layout_count(layout, NULL, 1), STRATA_ERR_INVALID);
    assert_int_equal(sched_layout_count(layout, good, -1), STRATA_ERR_INVALID);
    assert_int_equal(sched_layout_count(layout, NULL, 0), STRATA_OK);
    sched_layout_destroy(layout);

    bad = p, bad.topk = 9;          /* topk > experts */
    assert_int_equal(sched_layout_create(&bad, &layout), STRATA_ERR_INVALID);
    bad = p, bad.num_experts = 6;   /* not a multiple of world */
    assert_int_equal(sched_layout_create(&bad, &layout), STRATA_ERR_INVALID);
    bad = p, bad.ranks_per_node = 3;
    assert_int_equal(sched_layout_create(&bad, &layout), STRATA_ERR_INVALID);
    assert_int_equal(sched_layout_create(NULL, &layout), STRATA_ERR_INVALID);
}

/* Bad slots become -1, good ones stay; a clean token is left as it is. */
static void test_clean_token(void **state)
{
    sched_layout_params_t p = {.num_experts = 8, .topk = 5, .world_size = 4, .ranks_per_node = 2};
    int64_t bad[5]  = {3, 8, 3, -2, 5};
    int64_t want[5] = {3, -1, -1, -1, 5};
    int64_t good[5] = {0, -1, 7, 2, 1};
    int64_t same[5] = {0, -1, 7, 2, 1};

    (void)state;
    assert_int_equal(sched_layout_clean_token(&p, bad, 0), STRATA_ERR_INVALID);
    assert_memory_equal(bad, want, sizeof(want));
    assert_int_equal(sched_layout_check_token(&p, bad, 0), STRATA_OK);
    assert_int_equal(sched_layout_clean_token(&p, good, 1), STRATA_OK);
    assert_memory_equal(good, same, sizeof(same));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test(test_dedup_example),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_clean_token),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
