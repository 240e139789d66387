/*
 * Assertions shared by the topology tests.
 */
#ifndef STRATA_TESTS_TOPO_TEST_H
#define STRATA_TESTS_TOPO_TEST_H

#include "topo/topo.h"

#define TOPO_TEST_MAX_RAILS 4

/* Each GPU's rails, expected[gpu][i] with -1 ending a row (cmocka must be included first). */
static inline void topo_test_assert_rails(const topo_rail_plan_t *plan, int num_gpus,
                                          const int expected[][TOPO_TEST_MAX_RAILS])
{
    assert_int_equal(plan->num_gpus, num_gpus);
    for (int g = 0; g < num_gpus; ++g) {
        int n = 0;

        while (n < TOPO_TEST_MAX_RAILS && expected[g][n] >= 0) {
            assert_true(n < plan->rails[g].num_rails);
            if (plan->rails[g].nics[n] != expected[g][n]) {
                fail_msg("GPU%d rail %d: NIC%d, expected NIC%d", g, n, plan->rails[g].nics[n],
                         expected[g][n]);
            }
            ++n;
        }
        assert_int_equal(plan->rails[g].num_rails, n);
    }
}

#endif
