/*
 * Routing traces (adaptive/adapt_trace.h): the top-k routing a rank's counts stand for, a
 * write/read round trip, and the generator's bounds and determinism.
 */
#include "adaptive/adapt_trace.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#define TEST_SEED 20240611u

static adapt_trace_t *test_generate(int experts, int ranks, int per_node, int tokens, int topk,
                                    int steps, uint64_t seed)
{
    char err[UTIL_REASON_LEN];
    adapt_trace_gen_params_t p;
    adapt_trace_t *trace = NULL;

    adapt_trace_gen_defaults(&p);
    p.shape = (adapt_trace_shape_t){experts, ranks, per_node, tokens, topk, 512.0};
    p.steps = steps;
    p.drift_period = 3;
    p.burst_experts = 2;
    p.seed = seed;
    if (adapt_trace_generate(&p, &trace, err) != STRATA_OK) {
        fail_msg("generate (seed %llu): %s", (unsigned long long)seed, err);
    }
    return trace;
}

/* counts {e0: 3, e2: 2} over 3 tokens of top-2: e0 e0 e0 e2 e2 laid out token-major. */
static void test_topk_idx_by_hand(void **state)
{
    const adapt_trace_shape_t shape = {4, 1, 1, 3, 2, 64.0};
    const int64_t expected[3][2] = {{0, 2}, {0, 2}, {0, -1}};
    char err[UTIL_REASON_LEN];
    adapt_trace_t *trace;
    int64_t idx[3][2];

    (void)state;
    assert_int_equal(adapt_trace_create(&shape, 1, &trace, err), STRATA_OK);
    adapt_trace_counts(trace, 0, 0)[0] = 3;
    adapt_trace_counts(trace, 0, 0)[2] = 2;
    assert_int_equal(adapt_trace_topk_idx(trace, 0, 0, &idx[0][0]), STRATA_OK);
    assert_memory_equal(idx, expected, sizeof(idx));
    assert_int_equal(adapt_trace_topk_idx(trace, 1, 0, &idx[0][0]), STRATA_ERR_INVALID);
    assert_int_equal(adapt_trace_topk_idx(trace, 0, 1, &idx[0][0]), STRATA_ERR_INVALID);
    adapt_trace_counts(trace, 0, 0)[1] = 4; /* above tokens */
    assert_int_equal(adapt_trace_topk_idx(trace, 0, 0, &idx[0][0]), STRATA_ERR_INVALID);
    adapt_trace_destroy(trace);
}

/* Every step and rank of a generated trace: each token's experts distinct and in range,
 * their counts the trace's. */
static void test_topk_idx_generated(void **state)
{
    adapt_trace_t *trace = test_generate(16, 4, 2, 8, 4, 10, TEST_SEED);
    int64_t idx[8 * 4];
    int32_t seen[16];

    (void)state;
    for (int t = 0; t < trace->steps; ++t) {
        for (int r = 0; r < 4; ++r) {
            assert_int_equal(adapt_trace_topk_idx(trace, t, r, idx), STRATA_OK);
            memset(seen, 0, sizeof(seen));
            for (int tok = 0; tok < 8; ++tok) {
                for (int k = 0; k < 4; ++k) {
                    int64_t e = idx[tok * 4 + k];

                    assert_true(e >= 0 && e < 16); /* the generator fills every slot */
                    for (int j = 0; j < k; ++j) {
                        assert_true(idx[tok * 4 + j] != e);
                    }
                    seen[e]++;
                }
            }
            assert_memory_equal(seen, adapt_trace_counts(trace, t, r), sizeof(seen));
        }
    }
    adapt_trace_destroy(trace);
}

static void test_round_trip(void **state)
{
    adapt_trace_t *trace = test_generate(32, 8, 4, 16, 2, 7, TEST_SEED + 1), *back;
    char path[] = "/tmp/strata-test-trace-XXXXXX", err[UTIL_REASON_LEN];
    int fd = mkstemp(path);

    (void)state;
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(adapt_trace_write(trace, path, err), STRATA_OK);
    if (adapt_trace_read(path, &back, err) != STRATA_OK) {
        unlink(path);
        fail_msg("read back: %s", err);
    }
    unlink(path);
    assert_int_equal(back->shape.experts, 32);
    assert_int_equal(back->shape.ranks, 8);
    assert_int_equal(back->shape.ranks_per_node, 4);
    assert_int_equal(back->shape.tokens, 16);
    assert_int_equal(back->shape.topk, 2);
    assert_true(back->shape.row_bytes == 512.0);
    assert_int_equal(back->steps, trace->steps);
    assert_memory_equal(back->counts, trace->counts, 7 * 8 * 32 * sizeof(int32_t));
    adapt_trace_destroy(back);
    adapt_trace_destroy(trace);
}

/* The same seed gives the same counts; each rank routes tokens * topk, no count above tokens. */
static void test_generator(void **state)
{
    adapt_trace_t *a = test_generate(8, 2, 1, 16, 3, 20, TEST_SEED + 2);
    adapt_trace_t *b = test_generate(8, 2, 1, 16, 3, 20, TEST_SEED + 2);
    adapt_trace_t *c = test_generate(8, 2, 1, 16, 3, 20, TEST_SEED + 3);
    adapt_trace_t *all = test_generate(8, 2, 1, 16, 8, 5, TEST_SEED + 4);
    char err[UTIL_REASON_LEN];
    adapt_trace_gen_params_t p;
    adapt_trace_t *none = NULL;

    (void)state;
    assert_memory_equal(a->counts, b->counts, 20 * 2 * 8 * sizeof(int32_t));
    assert_memory_not_equal(a->counts, c->counts, 20 * 2 * 8 * sizeof(int32_t));
    for (int t = 0; t < 20; ++t) {
        for (int r = 0; r < 2; ++r) {
            int sum = 0;

            for (int e = 0; e < 8; ++e) {
                int32_t n = adapt_trace_counts(a, t, r)[e];

                assert_true(n >= 0 && n <= 16);
                sum += n;
            }
            assert_int_equal(sum, 16 * 3);
        }
    }
    for (int i = 0; i < 5 * 2 * 8; ++i) {
        assert_int_equal(all->counts[i], 16); /* topk = experts: every token takes them all */
    }
    adapt_trace_gen_defaults(&p);
    p.shape.ranks = 5; /* 64 experts are not a multiple of 5 ranks */
    assert_int_equal(adapt_trace_generate(&p, &none, err), STRATA_ERR_INVALID);
    assert_null(none);
    assert_non_null(strstr(err, "ranks 5"));
    adapt_trace_destroy(all);
    adapt_trace_destroy(a);
    adapt_trace_destroy(b);
    adapt_trace_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_idx_by_hand),
        cmocka_unit_test(test_topk_idx_generated),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_generator),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
