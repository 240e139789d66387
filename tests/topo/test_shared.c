/*
 * Every topology file of real machines in $STRATA_TEST_TOPOLOGY_DIR loads, and the facts
 * read off each file by hand hold; an NCCL file without GPUs is recognised as an overlay.
 * Skipped when the folder is absent.
 */

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "topo_test.h"

typedef void (*check_fn_t)(const topo_t *topo, const topo_rail_plan_t *plan);

/* Azure NDv4: 4 NUMA nodes, each a PCIe switch with 2 A100 and 2 HDR InfiniBand NICs. */
static void check_azure_ndv4(const topo_t *topo, const topo_rail_plan_t *plan)
{
    static const char *const gpu_bus[] = {"0001:00:00.0", "0002:00:00.0", "0003:00:00.0",
                                          "0004:00:00.0", "000b:00:00.0", "000c:00:00.0",
                                          "000d:00:00.0", "000e:00:00.0"};
    static const int gpu_numa_os[] = {1, 1, 0, 0, 3, 3, 2, 2};
    static const int rails[8][TOPO_TEST_MAX_RAILS] = {{0, -1}, {1, -1}, {2, -1}, {3, -1},
                                                        {4, -1}, {5, -1}, {6, -1}, {7, -1}};

    assert_int_equal(topo_source(topo), TOPO_SOURCE_NCCL_XML);
    assert_int_equal(topo_num_gpus(topo), 8);
    assert_int_equal(topo_num_nics(topo), 8);
    assert_int_equal(topo_num_numa(topo), 4);
    assert_string_equal(topo_numa(topo, 0)->cpus, "0-23");
    assert_string_equal(topo_numa(topo, 3)->cpus, "72-95");
    for (int g = 0; g < 8; ++g) {
        assert_string_equal(topo_gpu(topo, g)->busid, gpu_bus[g]);
        assert_int_equal(topo_numa(topo, topo_gpu(topo, g)->numa)->os_index, gpu_numa_os[g]);
    }
    for (int n = 0; n < 8; ++n) {
        assert_int_equal(topo_nic(topo, n)->kind, TOPO_NIC_VERBS); /* class 0x0207 */
    }
    assert_string_equal(topo_nic(topo, 0)->busid, "0101:00:00.0");
    /* GPU 0001 shares switch ffff:ff:02.0 with NICs 0101 and 0102. */
    assert_int_equal(topo_gpu_nic_path(topo, 0, 0), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 1), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 2), TOPO_PATH_SYS);
    assert_int_equal(topo_gpu_gpu_path(topo, 2, 3), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 7), TOPO_PATH_SYS);
    assert_int_equal(topo_gpu_link(topo, 0, 1)->kind, TOPO_LINK_NONE); /* file has no <nvlink> */
    topo_test_assert_rails(plan, 8, rails);
}

/* AWS p4d.24xlarge: per socket two PCIe switches, each with 2 A100 and 1 EFA. */
static void check_aws_p4d(const topo_t *topo, const topo_rail_plan_t *plan)
{
    static const int rails[8][TOPO_TEST_MAX_RAILS] = {{0, -1}, {0, -1}, {1, -1}, {1, -1},
                                                        {2, -1}, {2, -1}, {3, -1}, {3, -1}};

    assert_int_equal(topo_num_gpus(topo), 8);
    assert_int_equal(topo_num_nics(topo), 4);
    assert_int_equal(topo_num_numa(topo), 2);
    assert_string_equal(topo_numa(topo, 0)->cpus, "0-23,48-71");
    assert_string_equal(topo_numa(topo, 1)->cpus, "24-47,72-95");
    assert_string_equal(topo_gpu(topo, 0)->busid, "0000:10:1c.0");
    assert_string_equal(topo_gpu(topo, 0)->model, "A100-SXM4-40GB");
    assert_int_equal(topo_gpu(topo, 0)->vendor, TOPO_VENDOR_NVIDIA);
    for (int n = 0; n < 4; ++n) {
        assert_int_equal(topo_nic(topo, n)->kind, TOPO_NIC_EFA); /* 1d0f:efa0 */
    }
    assert_string_equal(topo_nic(topo, 3)->busid, "0000:a0:1b.0");
    assert_int_equal(topo_gpu_nic_path(topo, 0, 0), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 1), TOPO_PATH_NODE);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 2), TOPO_PATH_SYS);
    assert_int_equal(topo_gpu_gpu_path(topo, 6, 7), TOPO_PATH_PIX);
    topo_test_assert_rails(plan, 8, rails);
}

/* DGX-2H: 16 V100 on 12 NVSwitches (6 links each), two sockets, no NIC in the dump. */
static void check_dgx2(const topo_t *topo, const topo_rail_plan_t *plan)
{
    assert_int_equal(topo_source(topo), TOPO_SOURCE_HWLOC_XML);
    assert_int_equal(topo_num_gpus(topo), 16);
    assert_int_equal(topo_num_nics(topo), 0);
    assert_int_equal(topo_num_numa(topo), 2);
    assert_int_equal(topo_num_nvswitches(topo), 12);
    assert_string_equal(topo_gpu(topo, 0)->busid, "0000:34:00.0");
    assert_string_equal(topo_gpu(topo, 15)->busid, "0000:e7:00.0");
    assert_string_equal(topo_gpu(topo, 3)->model, "Tesla V100-SXM3-32GB-H");
    for (int a = 0; a < 16; ++a) {
        for (int b = 0; b < 16; ++b) {
            const topo_gpu_link_t *link = topo_gpu_link(topo, a, b);

            if (a != b) {
                assert_int_equal(link->kind, TOPO_LINK_NVLINK);
                assert_true(link->via_switch);
                assert_int_equal(link->count, 6);
                assert_float_equal(link->gbps, 150.0, 1e-9);
            }
        }
    }
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 1), TOPO_PATH_PIX);  /* 34, 36: one switch */
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 2), TOPO_PATH_PXB);  /* 34, 39: two switches */
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 4), TOPO_PATH_NODE); /* other host bridge */
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 8), TOPO_PATH_SYS);
    assert_int_equal(plan->num_gpus, 16);
    assert_int_equal(plan->rails[0].num_nics, 0);
}

/* Dual Xeon E5 with three Tesla (one K40m seen by CUDA), a ConnectX-4 and two I350 ports. */
static void check_xeon_2s(const topo_t *topo, const topo_rail_plan_t *plan)
{
    static const int rails[3][TOPO_TEST_MAX_RAILS] = {{0, -1}, {0, -1}, {0, -1}};

    assert_int_equal(topo_num_gpus(topo), 3); /* the Radeon at 84:00.1 has no ROCm device */
    assert_int_equal(topo_num_nics(topo), 3);
    assert_string_equal(topo_gpu(topo, 0)->busid, "0000:03:00.0");
    assert_string_equal(topo_gpu(topo, 2)->busid, "0000:84:00.0");
    assert_string_equal(topo_gpu(topo, 2)->model, "Tesla K40m");
    assert_int_equal(topo_gpu(topo, 2)->cuda_index, 0);
    assert_int_equal(topo_gpu(topo, 0)->cuda_index, -1);
    assert_string_equal(topo_nic(topo, 0)->name, "mlx5_0");
    assert_int_equal(topo_nic(topo, 0)->kind, TOPO_NIC_VERBS);
    assert_int_equal(topo_nic(topo, 0)->port_state, TOPO_PORT_ACTIVE);
    assert_string_equal(topo_nic(topo, 1)->name, "eth0");
    assert_int_equal(topo_nic(topo, 1)->kind, TOPO_NIC_ETHERNET);
    assert_int_equal(topo_gpu_nic_path(topo, 2, 0), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_nic_path(topo, 1, 0), TOPO_PATH_PHB);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 0), TOPO_PATH_SYS);
    assert_int_equal(topo_gpu_gpu_path(topo, 1, 2), TOPO_PATH_PHB);
    topo_test_assert_rails(plan, 3, rails);
    assert_int_equal(plan->rails[0].num_nics, 1); /* the Ethernet ports are not rails */
}

static const struct {
    const char *file;
    check_fn_t  check;
} known_files[] = {
    {"azure-ndv4.nccl.xml", check_azure_ndv4},
    {"aws-p4d.24xlarge.nccl.xml", check_aws_p4d},
    {"nvidia-dgx2.hwloc.xml", check_dgx2},
    {"xeon-2s-3gpu-mlx5.hwloc.xml", check_xeon_2s},
};

static check_fn_t find_check(const char *file)
{
    for (size_t i = 0; i < sizeof(known_files) / sizeof(known_files[0]); ++i) {
        if (strcmp(known_files[i].file, file) == 0) {
            return known_files[i].check;
        }
    }
    return NULL;
}

static void test_shared_topologies(void **state)
{
    const char *dir = getenv("STRATA_TEST_TOPOLOGY_DIR");
    char path[1024], err[UTIL_REASON_LEN];
    topo_rail_plan_t *plan;
    struct dirent *entry;
    int loaded = 0, checked = 0;
    topo_t *topo;
    DIR *d;

    (void)state;
    if (dir == NULL || (d = opendir(dir)) == NULL) {
        print_message("shared topologies not found (STRATA_TEST_TOPOLOGY_DIR=%s)\n",
                      dir ? dir : "unset");
        skip();
        return;
    }
    while ((entry = readdir(d)) != NULL) {
        if (entry->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name);
        if (topo_load_file(path, &topo, err) != STRATA_OK) {
            fail_msg("%s", err);
        }
        assert_int_equal(topo_rail_plan_create(topo, &plan), STRATA_OK);
        /* An NCCL file without GPUs is an overlay, and must be recognised as one rather
         * than read as an empty machine. */
        if (topo_source(topo) == TOPO_SOURCE_NCCL_XML && topo_num_gpus(topo) == 0) {
            assert_true(topo_is_overlay(topo));
            print_message("%s: an overlay, %d PCI devices without a class\n", entry->d_name,
                          topo_num_unclassified_pci(topo));
        }
        if (find_check(entry->d_name) != NULL) {
            assert_false(topo_is_overlay(topo)); /* the recorded machines are machines */
            find_check(entry->d_name)(topo, plan);
            ++checked;
        } else {
            print_message("%s: loaded (%d GPUs, %d NICs); no facts recorded for it yet\n",
                          entry->d_name, topo_num_gpus(topo), topo_num_nics(topo));
        }
        ++loaded;
        topo_rail_plan_destroy(plan);
        topo_destroy(topo);
    }
    closedir(d);
    print_message("%d files loaded, %d checked against recorded facts\n", loaded, checked);
    assert_true(loaded > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_topologies),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
