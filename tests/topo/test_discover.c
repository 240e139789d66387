/*
 * Live discovery on whatever machine runs the tests: it succeeds without GPUs, NICs, NVML
 * or ROCm, and what it reports is self-consistent. STRATA_TOPO_FILE switches to a file.
 */
#include "topo/topo.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void test_discover_this_machine(void **state)
{
    char err[UTIL_REASON_LEN];
    topo_rail_plan_t *plan;
    topo_t *topo;

    (void)state;
    assert_int_equal(topo_discover(NULL, &topo, err), STRATA_OK);
    assert_int_equal(topo_source(topo), TOPO_SOURCE_DISCOVERY);
    assert_true(topo_num_numa(topo) >= 1);
    assert_true(strlen(topo_numa(topo, 0)->cpus) > 0);
    for (int g = 0; g < topo_num_gpus(topo); ++g) {
        assert_int_equal(topo_gpu_find(topo, topo_gpu(topo, g)->busid), g);
    }
    for (int n = 0; n < topo_num_nics(topo); ++n) {
        assert_true(strlen(topo_nic(topo, n)->busid) > 0);
    }
    assert_int_equal(topo_rail_plan_create(topo, &plan), STRATA_OK);
    for (int g = 0; g < plan->num_gpus; ++g) {
        for (int i = 0; i < plan->rails[g].num_nics; ++i) {
            assert_true(plan->rails[g].nics[i] >= 0 &&
                        plan->rails[g].nics[i] < topo_num_nics(topo));
        }
    }
    print_message("this machine: %d GPUs, %d NICs, %d NUMA nodes\n", topo_num_gpus(topo),
                  topo_num_nics(topo), topo_num_numa(topo));
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

static void test_env_file_override(void **state)
{
    char path[1024], err[UTIL_REASON_LEN];
    topo_t *topo;

    (void)state;
    snprintf(path, sizeof(path), "%s/nvswitch-8gpu-8nic.nccl.xml", STRATA_TEST_FIXTURES);
    setenv("STRATA_TOPO_FILE", path, 1);
    assert_int_equal(topo_open(NULL, &topo, err), STRATA_OK);
    assert_int_equal(topo_source(topo), TOPO_SOURCE_NCCL_XML);
    assert_int_equal(topo_num_gpus(topo), 8);
    topo_destroy(topo);

    setenv("STRATA_TOPO_FILE", "/nonexistent/topology.xml", 1);
    assert_int_equal(topo_create(&topo), STRATA_ERR_NOT_FOUND);
    assert_int_equal(topo_open(NULL, &topo, err), STRATA_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "/nonexistent/topology.xml"));
    unsetenv("STRATA_TOPO_FILE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discover_this_machine),
        cmocka_unit_test(test_env_file_override),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
