/*
 * Per-expert EWMA statistics: exact on constant input, geometric convergence after a shift,
 * the known variance of an alternating signal.
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
    int32_t counts[2] = {40, 0};
    adapt_stats_t *stats;

    (void)state;
    assert_int_equal(adapt_stats_create(2, alpha, &stats), STRATA_OK);
    for (int i = 0; i < 50; ++i) {
        adapt_stats_update(stats, counts);
    }
    assert_float_equal(adapt_stats_expert(stats, 0)->mean, 40.0, 1e-12);
    assert_float_equal(adapt_stats_expert(stats, 0)->var, 0.0, 1e-12);
    assert_int_equal(adapt_stats_expert(stats, 1)->steps, 50);

    counts[0] = 200; /* the expert turns hot: mean = 200 - 160 (1 - alpha)^n */
    for (int n = 1; n <= 10; ++n) {
        adapt_stats_update(stats, counts);
        assert_float_equal(adapt_stats_expert(stats, 0)->mean, 200.0 - 160.0 * pow(1 - alpha, n),
                           1e-9);
    }
    assert_null(adapt_stats_expert(stats, 2));
    assert_null(adapt_stats_expert(stats, -1));
    adapt_stats_destroy(stats);
}

static void test_alternating_variance(void **state)
{
    /* x alternates a+d, a-d: the weighted variance settles near d^2 (within alpha). */
    const double alpha = 0.05;
    adapt_stats_t *stats;
    int32_t counts[1];

    (void)state;
    assert_int_equal(adapt_stats_create(1, alpha, &stats), STRATA_OK);
    for (int i = 0; i < 2000; ++i) {
        counts[0] = (i % 2) ? 90 : 110;
        adapt_stats_update(stats, counts);
    }
    assert_float_equal(adapt_stats_expert(stats, 0)->mean, 100.0, 10.0 * alpha * 2);
    assert_float_equal(adapt_stats_expert(stats, 0)->var, 100.0, 100.0 * alpha * 2);
    adapt_stats_destroy(stats);
}

static void test_bad_parameters(void **state)
{
    adapt_stats_t *stats = NULL;

    (void)state;
    assert_int_equal(adapt_stats_create(0, 0.5, &stats), STRATA_ERR_INVALID);
    assert_int_equal(adapt_stats_create(4, 0.0, &stats), STRATA_ERR_INVALID);
    assert_int_equal(adapt_stats_create(4, 1.5, &stats), STRATA_ERR_INVALID);
    assert_int_equal(adapt_stats_create(4, NAN, &stats), STRATA_ERR_INVALID);
    assert_null(stats);
    adapt_stats_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant_and_shift),
        cmocka_unit_test(test_alternating_variance),
        cmocka_unit_test(test_bad_parameters),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
