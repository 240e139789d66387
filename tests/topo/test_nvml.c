/*
 * NVLink from NVML, read through tests/topo/nvml_fake.c standing in for libnvidia-ml.so.1
 * (an IBM POWER9 with 4 V100): GPU pairs and each GPU's NVLink to its CPU socket.
 */
#include "topo/topo_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/* The machine of power9-nvlink-cpu.hwloc.xml without its NVLink matrix: PCIe only. */
static const char power9_pcie[] =
    "<system version=\"1\">"
    "<cpu numaid=\"0\" affinity=\"00000001\">"
    "  <pci busid=\"0004:04:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x1db1\"/>"
    "  <pci busid=\"0005:04:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x1db1\"/>"
    "</cpu>"
    "<cpu numaid=\"8\" affinity=\"00000002\">"
    "  <pci busid=\"0035:04:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x1db1\"/>"
    "  <pci busid=\"0036:04:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x1db1\"/>"
    "</cpu></system>";

static void test_power9_links(void **state)
{
    static const int numa_os[] = {0, 0, 8, 8};
    char err[UTIL_REASON_LEN];
    topo_t *topo;

    (void)state;
    if (getenv("STRATA_TEST_NVML_FAKE") == NULL) {
        skip(); /* run by CTest, which points LD_LIBRARY_PATH at the fake NVML */
    }
    assert_int_equal(topo_load_buffer("power9", power9_pcie, sizeof(power9_pcie) - 1, &topo,
                                      err), STRATA_OK);
    assert_int_equal(topo_gpu(topo, 0)->cpu_link.kind, TOPO_LINK_NONE);
    topo_nvml_add_links(topo);
    for (int g = 0; g < 4; ++g) {
        const topo_gpu_t *gpu = topo_gpu(topo, g);

        assert_int_equal(gpu->cpu_link.kind, TOPO_LINK_NVLINK);
        assert_int_equal(gpu->cpu_link.count, 3);
        assert_float_equal(gpu->cpu_link.gbps, 75.0, 1e-9);
        assert_int_equal(topo_numa(topo, gpu->cpu_link_numa)->os_index, numa_os[g]);
    }
    assert_int_equal(topo_gpu_link(topo, 0, 1)->kind, TOPO_LINK_NVLINK);
    assert_int_equal(topo_gpu_link(topo, 0, 1)->count, 3);
    assert_float_equal(topo_gpu_link(topo, 2, 3)->gbps, 75.0, 1e-9);
    assert_int_equal(topo_gpu_link(topo, 1, 2)->kind, TOPO_LINK_NONE);
    for (int g = 0; g < 4; ++g) { /* the fake's GPU 2 is in MIG mode */
        assert_int_equal(topo_gpu(topo, g)->mig, g == 2);
    }
    topo_destroy(topo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_power9_links),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
