/*
 * Live sources read from sysfs, pointed at a tree the test builds: AMD KFD topology
 * (GPU nodes and XGMI io_links) and NIC port state and speed.
 */
#include "topo/topo_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

static char root[256];

static void put(const char *rel, const char *content)
{
    char path[512], cmd[600];
    FILE *file;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
    assert_int_equal(system(cmd), 0);
    file = fopen(path, "w");
    assert_non_null(file);
    fputs(content, file);
    fclose(file);
}

#define KFD "sys/class/kfd/kfd/topology/nodes"

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/strata-test-sysfs-XXXXXX");
    if (mkdtemp(root) == NULL) {
        return -1;
    }
    /* Node 0: the CPU. Nodes 1 and 2: GPUs at c1:00.0 and c2:00.0, XGMI to each other. */
    put(KFD "/0/properties", "cpu_cores_count 64\nsimd_count 0\nlocation_id 0\n");
    put(KFD "/1/properties", "simd_count 440\nlocation_id 49408\ndomain 0\n");
    put(KFD "/1/io_links/0/properties", "type 2\nnode_from 1\nnode_to 0\nweight 20\n");
    put(KFD "/1/io_links/1/properties",
        "type 11\nnode_from 1\nnode_to 2\nweight 15\nmin_bandwidth 64000\nmax_bandwidth 64000\n");
    put(KFD "/2/properties", "simd_count 440\nlocation_id 49664\ndomain 0\n");
    put(KFD "/2/io_links/0/properties",
        "type 11\nnode_from 2\nnode_to 1\nweight 15\nmax_bandwidth 64000\n");
    /* Node 3, c3:00.0, is in the hive but two hops away: listed, with no bandwidth. */
    put(KFD "/2/io_links/1/properties",
        "type 11\nnode_from 2\nnode_to 3\nweight 30\nmax_bandwidth 0\n");
    put(KFD "/3/properties", "simd_count 440\nlocation_id 49920\ndomain 0\n");
    put("sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
    put("sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
    put("sys/class/net/eth7/operstate", "down\n");
    put("sys/class/net/eth7/speed", "25000\n");
    put("sys/class/net/eth8/operstate", "up\n");
    put("sys/class/net/eth8/speed", "-1\n");
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd);
}

static void test_kfd_xgmi(void **state)
{
    static const char xml[] =
        "<system version=\"1\"><cpu numaid=\"0\" affinity=\"ff\">"
        "<pci busid=\"0000:c1:00.0\" class=\"0x038000\" vendor=\"0x1002\" device=\"0x74a1\"/>"
        "<pci busid=\"0000:c2:00.0\" class=\"0x038000\" vendor=\"0x1002\" device=\"0x74a1\"/>"
        "<pci busid=\"0000:c3:00.0\" class=\"0x038000\" vendor=\"0x1002\" device=\"0x74a1\"/>"
        "</cpu></system>";
    char err[UTIL_REASON_LEN];
    topo_t *topo;

    (void)state;
    assert_true(topo_kfd_has_gpu(root, "0000:c1:00.0"));
    assert_true(topo_kfd_has_gpu(root, "0000:c2:00.0"));
    assert_true(topo_kfd_has_gpu(root, "0000:c3:00.0"));
    assert_false(topo_kfd_has_gpu(root, "0000:c4:00.0"));
    assert_false(topo_kfd_has_gpu("/nonexistent-root", "0000:c1:00.0"));

    assert_int_equal(topo_load_buffer("mi300", xml, sizeof(xml) - 1, &topo, err), STRATA_OK);
    assert_int_equal(topo_num_gpus(topo), 3);
    assert_string_equal(topo_gpu(topo, 0)->model, "Instinct MI300X");
    assert_int_equal(topo_gpu_link(topo, 0, 1)->kind, TOPO_LINK_NONE);
    topo_kfd_add_links(topo, root);
    assert_int_equal(topo_gpu_link(topo, 0, 1)->kind, TOPO_LINK_XGMI);
    assert_int_equal(topo_gpu_link(topo, 1, 0)->kind, TOPO_LINK_XGMI);
    assert_float_equal(topo_gpu_link(topo, 0, 1)->gbps, 64.0, 1e-9);
    assert_int_equal(topo_gpu_link(topo, 1, 2)->kind, TOPO_LINK_NONE); /* not a neighbour */
    assert_int_equal(topo_gpu_link(topo, 0, 2)->kind, TOPO_LINK_NONE); /* no io_link */
    topo_kfd_add_links(topo, "/nonexistent-root"); /* nothing there: nothing changes */
    assert_int_equal(topo_gpu_link(topo, 0, 1)->kind, TOPO_LINK_XGMI);
    topo_destroy(topo);
}

static void test_nic_ports(void **state)
{
    topo_nic_t ib = {.name = "mlx5_0", .kind = TOPO_NIC_VERBS};
    topo_nic_t down = {.name = "eth7", .kind = TOPO_NIC_ETHERNET};
    topo_nic_t unknown_speed = {.name = "eth8", .kind = TOPO_NIC_ETHERNET};
    topo_nic_t missing = {.name = "eth9", .kind = TOPO_NIC_ETHERNET};
    topo_nic_t unnamed = {.name = "", .kind = TOPO_NIC_VERBS};

    (void)state;
    topo_sysfs_read_nic_port(&ib, root);
    assert_int_equal(ib.port_state, TOPO_PORT_ACTIVE);
    assert_int_equal(ib.speed_mbps, 200000);
    topo_sysfs_read_nic_port(&down, root);
    assert_int_equal(down.port_state, TOPO_PORT_DOWN);
    assert_int_equal(down.speed_mbps, 25000);
    topo_sysfs_read_nic_port(&unknown_speed, root);
    assert_int_equal(unknown_speed.port_state, TOPO_PORT_ACTIVE);
    assert_int_equal(unknown_speed.speed_mbps, 0);
    topo_sysfs_read_nic_port(&missing, root);
    assert_int_equal(missing.port_state, TOPO_PORT_UNKNOWN);
    topo_sysfs_read_nic_port(&unnamed, root);
    assert_int_equal(unnamed.port_state, TOPO_PORT_UNKNOWN);
}

/* A port known to be down is a rail only when nothing else is left. */
static void test_down_port_avoided(void **state)
{
    static const char xml[] =
        "<system version=\"1\"><cpu numaid=\"0\" affinity=\"ff\">"
        "<pci busid=\"0000:10:00.0\" class=\"0x060400\">"
        "<pci busid=\"0000:11:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2330\"/>"
        "<pci busid=\"0000:12:00.0\" class=\"0x020700\" vendor=\"0x15b3\" device=\"0x1021\"/>"
        "</pci>"
        "<pci busid=\"0000:20:00.0\" class=\"0x020700\" vendor=\"0x15b3\" device=\"0x1021\"/>"
        "</cpu></system>";
    char err[UTIL_REASON_LEN];
    topo_rail_plan_t *plan;
    topo_t *topo;

    (void)state;
    assert_int_equal(topo_load_buffer("down", xml, sizeof(xml) - 1, &topo, err), STRATA_OK);
    assert_int_equal(topo_rail_plan_create(topo, &plan), STRATA_OK);
    assert_int_equal(plan->rails[0].nics[0], 0); /* the PIX NIC */
    topo_rail_plan_destroy(plan);

    topo->nics[0].port_state = TOPO_PORT_DOWN;
    assert_int_equal(topo_rail_plan_create(topo, &plan), STRATA_OK);
    assert_int_equal(plan->rails[0].num_rails, 1);
    assert_int_equal(plan->rails[0].nics[0], 1);
    assert_int_equal(plan->rails[0].num_nics, 1);
    topo_rail_plan_destroy(plan);

    topo->nics[1].port_state = TOPO_PORT_DOWN;
    assert_int_equal(topo_rail_plan_create(topo, &plan), STRATA_OK);
    assert_int_equal(plan->rails[0].nics[0], 0); /* all down: closest again */
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

/* Where NUMA affinity is unknown, the PCIe tree still decides (VMs report numa_node -1). */
static void test_unknown_numa(void **state)
{
    char path[512], err[UTIL_REASON_LEN];
    topo_t *topo;

    (void)state;
    snprintf(path, sizeof(path), "%s/nvswitch-8gpu-8nic.nccl.xml", STRATA_TEST_FIXTURES);
    assert_int_equal(topo_load_file(path, &topo, err), STRATA_OK);
    topo->gpus[0].numa = -1;
    topo->nics[0].numa = -1;
    assert_int_equal(topo_gpu_nic_path(topo, 0, 0), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 1), TOPO_PATH_PXB);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 2), TOPO_PATH_SYS); /* no shared switch */
    topo_destroy(topo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kfd_xgmi),
        cmocka_unit_test(test_nic_ports),
        cmocka_unit_test(test_down_port_avoided),
        cmocka_unit_test(test_unknown_numa),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
