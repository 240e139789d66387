/*
 * Per-expert EWMA statistics: exact on constant input, geometric convergence after a shift,
 * the known variance of an alternating signal, per source node and in total.
 */
#include "adaptive/adapt.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static void test_constant_and_shift(void **state)
{
    const double alpha = 0.25;
    int32_t counts[2] = {40, 0}; /* [expert][one node] */
    adapt_stats_t *stats;

    (void)state;
    assert_int_equal(adapt_stats_create(2, 1, alpha, 100.0, &stats), STRATA_OK);
    for (int i = 0; i < 50; ++i) {
        adapt_stats_update(stats, counts);
    }
    assert_float_equal(adapt_stats_expert(stats, 0)->mean, 40.0, 1e-12);
    assert_float_equal(adapt_stats_expert(stats, 0)->var, 0.0, 1e-12);
    assert_float_equal(adapt_stats_expert(stats, 0)->bytes, 4000.0, 1e-9);
    assert_float_equal(adapt_stats_cell(stats, 0, 0)->busy, 1.0, 1e-12);
    assert_float_equal(adapt_stats_cell(stats, 1, 0)->busy, 0.0, 1e-12);
    assert_int_equal(adapt_stats_expert(stats, 1)->steps, 50);

    counts[0] = 200; /* the expert turns hot: mean = 200 - 160 (1 - alpha)^n */
    for (int n = 1; n <= 10; ++n) {
        adapt_stats_update(stats, counts);
        assert_float_equal(adapt_stats_expert(stats, 0)->mean, 200.0 - 160.0 * pow(1 - alpha, n),
                           1e-9);
    }
    assert_null(adapt_stats_expert(stats, 2));
    assert_null(adapt_stats_expert(stats, -1));
    assert_null(adapt_stats_cell(stats, 0, 1));
    adapt_stats_destroy(stats);
}

static void test_alternating_variance(void **state)
{
    /* x alternates a+d, a-d: the weighted variance settles near d^2 (within alpha). */
    const double alpha = 0.05;
    adapt_stats_t *stats;
    int32_t counts[1];

    (void)state;
    assert_int_equal(adapt_stats_create(1, 1, alpha, 1.0, &stats), STRATA_OK);
    for (int i = 0; i < 2000; ++i) {
        counts[0] = (i % 2) ? 90 : 110;
        adapt_stats_update(stats, counts);
    }
    assert_float_equal(adapt_stats_expert(stats, 0)->mean, 100.0, 10.0 * alpha * 2);
    assert_float_equal(adapt_stats_expert(stats, 0)->var, 100.0, 100.0 * alpha * 2);
    adapt_stats_destroy(stats);
}

static void test_per_node(void **state)
{
    /* Node 0 sends 10 every step, node 1 sends 6 every other step: its busy fraction and
     * mean settle near 1/2 and 3, the total near 13 with variance 9. */
    const double alpha = 0.02;
    adapt_stats_t *stats;
    int32_t counts[2];

    (void)state;
    assert_int_equal(adapt_stats_create(1, 2, alpha, 2.0, &stats), STRATA_OK);
    for (int i = 0; i < 4000; ++i) {
        counts[0] = 10;
        counts[1] = (i % 2) ? 6 : 0;
        adapt_stats_update(stats, counts);
    }
    assert_float_equal(adapt_stats_cell(stats, 0, 0)->mean, 10.0, 1e-9);
    assert_float_equal(adapt_stats_cell(stats, 0, 1)->mean, 3.0, 6.0 * alpha);
    assert_float_equal(adapt_stats_cell(stats, 0, 1)->busy, 0.5, alpha);
    assert_float_equal(adapt_stats_cell(stats, 0, 1)->var, 9.0, 9.0 * alpha * 2);
    assert_float_equal(adapt_stats_expert(stats, 0)->mean, 13.0, 6.0 * alpha);
    assert_float_equal(adapt_stats_expert(stats, 0)->var, 9.0, 9.0 * alpha * 2);
    assert_float_equal(adapt_stats_expert(stats, 0)->bytes, 26.0, 12.0 * alpha);
    adapt_stats_destroy(stats);
}

static void test_bad_parameters(void **state)
{
    adapt_stats_t *stats = NULL;

    (void)state;
    assert_int_equal(adapt_stats_create(0, 1, 0.5, 1.0, &stats), STRATA_ERR_INVALID);
    assert_int_equal(adapt_stats_create(4, 0, 0.5, 1.0, &stats), STRATA_ERR_INVALID);
    assert_int_equal(adapt_stats_create(4, 1, 0.0, 1.0, &stats), STRATA_ERR_INVALID);
    assert_int_equal(adapt_stats_create(4, 1, 1.5, 1.0, &stats), STRATA_ERR_INVALID);
    assert_int_equal(adapt_stats_create(4, 1, NAN, 1.0, &stats), STRATA_ERR_INVALID);
    assert_int_equal(adapt_stats_create(4, 1, 0.5, -1.0, &stats), STRATA_ERR_INVALID);
    assert_null(stats);
    adapt_stats_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant_and_shift),
        cmocka_unit_test(test_alternating_variance),
        cmocka_unit_test(test_per_node),
        cmocka_unit_test(test_bad_parameters),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
