/*
 * The cost model against hand-computed figures, and the policy's hysteresis: hot experts
 * stay in Push and cold ones go to Pull; stationary noise near the break-even point does
 * not make an expert flap (while a policy without hysteresis does, on the same input); a
 * real shift is followed within the dwell bound.
 */
#include "adaptive/adapt.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#define NODES 4
#define ROW   14336.0 /* 7168 bf16 columns */

static adapt_model_t test_model(void)
{
    adapt_model_t m;

    adapt_model_default(&m);
    return m;
}

static void test_model_costs(void **state)
{
    adapt_model_t m = test_model();
    int32_t cold[NODES] = {0, 2, 0, 0}, hot[NODES] = {50, 50, 50, 50};
    double push, pull;

    (void)state;
    /* Push waits on all four nodes; Pull fetches once, from node 1, a round trip more. */
    push = 3e-6 + 3 * 5e-6 + 2 * ROW / 45e9;
    pull = 4e-6 + 6e-6 + 2 * ROW / 40e9;
    assert_float_equal(adapt_model_step_cost(&m, ADAPT_MODE_PUSH, 0, NODES, cold, ROW), push,
                       1e-15);
    assert_float_equal(adapt_model_step_cost(&m, ADAPT_MODE_PULL, 0, NODES, cold, ROW), pull,
                       1e-15);
    push = 3e-6 + 50 * ROW / 150e9 + 3 * (5e-6 + 50 * ROW / 45e9);
    pull = 3e-6 + 50 * ROW / 120e9 + 3 * (10e-6 + 50 * ROW / 40e9);
    assert_float_equal(adapt_model_step_cost(&m, ADAPT_MODE_PUSH, 0, NODES, hot, ROW), push,
                       1e-15);
    assert_float_equal(adapt_model_step_cost(&m, ADAPT_MODE_PULL, 0, NODES, hot, ROW), pull,
                       1e-15);
    {
        /* Expected costs: Pull pays a fetch only as often as the node sends. */
        double tokens[NODES] = {0, 1, 0, 0}, busy[NODES] = {0, 0.5, 0, 0};

        assert_float_equal(adapt_model_cost(&m, ADAPT_MODE_PULL, 0, NODES, tokens, busy, ROW),
                           0.5 * 10e-6 + ROW / 40e9, 1e-15);
    }
}

static void test_fit_beta(void **state)
{
    double beta = -1.0;

    (void)state;
    /* 1 MiB in 300 us against 64 bytes in 8 us: (1 MiB - 64) / 292 us. */
    assert_true(adapt_link_fit_beta(64, 8e-6, 1 << 20, 300e-6, &beta));
    assert_float_equal(beta, (double)((1 << 20) - 64) / 292e-6, 1.0);
    /* A busy machine: both took about a scheduling delay (measured once: 556 GB/s over
     * loopback tcp). Refused, and nothing set. */
    beta = -1.0;
    assert_false(adapt_link_fit_beta(64, 335e-6, 1 << 20, 337e-6, &beta));
    assert_false(adapt_link_fit_beta(64, 300e-6, 1 << 20, 200e-6, &beta));
    assert_false(adapt_link_fit_beta(64, 8e-6, 64, 300e-6, &beta));
    assert_false(adapt_link_fit_beta(64, 8e-6, 1 << 20, NAN, &beta));
    assert_float_equal(beta, -1.0, 0.0);
    /* Just past the share: accepted. */
    assert_true(adapt_link_fit_beta(64, 90e-6, 1000064, 100.001e-6, &beta));
}

static adapt_policy_t *test_policy(const adapt_policy_params_t *p, int experts)
{
    int owners[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    adapt_policy_t *policy = NULL;

    assert_int_equal(adapt_policy_create(p, experts, NODES, owners, ROW, &policy), STRATA_OK);
    return policy;
}

static void test_hot_and_cold(void **state)
{
    /* Expert 0 hot, expert 1 cold: the cold one goes to Pull at step dwell exactly. */
    int32_t tokens[2][NODES] = {{50, 50, 50, 50}, {0, 2, 0, 0}};
    adapt_policy_params_t p;
    adapt_policy_t *policy;

    (void)state;
    adapt_policy_defaults(&p);
    policy = test_policy(&p, 2);
    for (int step = 1; step <= 50; ++step) {
        adapt_policy_step(policy, &tokens[0][0]);
        assert_int_equal(adapt_policy_mode(policy, 0), ADAPT_MODE_PUSH);
        assert_int_equal(adapt_policy_mode(policy, 1),
                         step >= p.dwell ? ADAPT_MODE_PULL : ADAPT_MODE_PUSH);
    }
    assert_int_equal(adapt_policy_switches(policy), 1);
    adapt_policy_destroy(policy);
}

static uint64_t test_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Each node sends 1..3 tokens with probability q: near q = 0.55 the two modes cost the
 * same on average, and every step's best mode is a coin toss. */
static uint64_t test_noisy_switches(const adapt_policy_params_t *p, double q, uint64_t seed,
                                    int steps)
{
    adapt_policy_t *policy = test_policy(p, 1);
    int32_t tokens[NODES];
    uint64_t switches;

    for (int step = 0; step < steps; ++step) {
        for (int j = 0; j < NODES; ++j) {
            bool sends = (double)(test_next(&seed) >> 11) * 0x1p-53 < q;

            tokens[j] = sends ? 1 + (int32_t)(test_next(&seed) % 3) : 0;
        }
        adapt_policy_step(policy, tokens);
    }
    switches = adapt_policy_switches(policy);
    adapt_policy_destroy(policy);
    return switches;
}

static void test_no_flapping(void **state)
{
    const uint64_t seed = 20261202;
    adapt_policy_params_t p, bare;
    uint64_t calm, flapping;

    (void)state;
    adapt_policy_defaults(&p);
    bare = p;
    bare.alpha   = 1.0; /* the last step only, no margin, no dwell */
    bare.margin  = 0.0;
    bare.noise_k = 0.0;
    bare.dwell   = 1;
    for (double q = 0.45; q <= 0.651; q += 0.05) {
        calm     = test_noisy_switches(&p, q, seed, 2000);
        flapping = test_noisy_switches(&bare, q, seed, 2000);
        if (calm > 2 || flapping < 100) {
            print_error("seed %llu, q %.2f: %llu switches with hysteresis, %llu without\n",
                        (unsigned long long)seed, q, (unsigned long long)calm,
                        (unsigned long long)flapping);
            fail();
        }
    }
}

static void test_shift_followed(void **state)
{
    /* Hot on every node for 100 steps, then cold: Pull within dwell + 10 steps (the time
     * the averages take to cross the threshold with alpha 0.3), and never before. */
    int32_t hot[NODES] = {50, 50, 50, 50}, cold[NODES] = {0, 2, 0, 0};
    adapt_policy_params_t p;
    adapt_policy_t *policy;
    int switched_at = -1;

    (void)state;
    adapt_policy_defaults(&p);
    policy = test_policy(&p, 1);
    for (int step = 0; step < 200 && switched_at < 0; ++step) {
        adapt_policy_step(policy, step < 100 ? hot : cold);
        if (adapt_policy_mode(policy, 0) == ADAPT_MODE_PULL) {
            switched_at = step;
        }
    }
    assert_true(switched_at >= 100);
    assert_true(switched_at <= 100 + p.dwell + 10);
    /* ... and back to Push once it is hot again. */
    for (int step = 0; step < p.dwell + 10; ++step) {
        adapt_policy_step(policy, hot);
    }
    assert_int_equal(adapt_policy_mode(policy, 0), ADAPT_MODE_PUSH);
    assert_int_equal(adapt_policy_switches(policy), 2);
    adapt_policy_destroy(policy);
}

static void test_bad_params(void **state)
{
    adapt_policy_params_t p;
    adapt_policy_t *policy = NULL;
    int owners[1] = {4};

    (void)state;
    adapt_policy_defaults(&p);
    assert_int_equal(adapt_policy_create(&p, 1, NODES, owners, ROW, &policy),
                     STRATA_ERR_INVALID); /* node 4 of 4 */
    p.dwell = 0;
    assert_int_equal(adapt_policy_check(&p, "test"), STRATA_ERR_INVALID);
    adapt_policy_defaults(&p);
    p.model.link[ADAPT_TIER_INTER][ADAPT_MODE_PULL].beta_Bps = 0.0;
    assert_int_equal(adapt_policy_check(&p, "test"), STRATA_ERR_INVALID);
    adapt_policy_defaults(&p);
    p.margin = NAN;
    assert_int_equal(adapt_policy_check(&p, "test"), STRATA_ERR_INVALID);
    assert_null(policy);
    adapt_policy_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_costs),
        cmocka_unit_test(test_fit_beta),
        cmocka_unit_test(test_hot_and_cold),
        cmocka_unit_test(test_no_flapping),
        cmocka_unit_test(test_shift_followed),
        cmocka_unit_test(test_bad_params),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
