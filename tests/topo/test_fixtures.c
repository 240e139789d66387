/*
 * Topology facts on strata's own fixtures, checked against values worked out by hand:
 * an 8-GPU NVSwitch machine, 8 GPUs sharing 4 NICs, an AMD XGMI machine, a machine
 * with no GPU and no NIC (as CI machines are), a PCIe tree where switch depth decides the
 * rails, an IBM POWER9 with NVLink between GPUs and CPUs, and an NCCL topology overlay
 * applied onto a cloud VM's flat PCIe.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "topo_test.h"

static topo_t *load(const char *file)
{
    char path[1024], err[UTIL_REASON_LEN];
    topo_t *topo = NULL;

    snprintf(path, sizeof(path), "%s/%s", STRATA_TEST_FIXTURES, file);
    if (topo_load_file(path, &topo, err) != STRATA_OK) {
        fail_msg("%s", err);
    }
    return topo;
}

static topo_rail_plan_t *plan_of(const topo_t *topo)
{
    topo_rail_plan_t *plan = NULL;

    assert_int_equal(topo_rail_plan_create(topo, &plan), STRATA_OK);
    assert_int_equal(plan->num_gpus, topo_num_gpus(topo));
    return plan;
}

static void test_nvswitch_8gpu(void **state)
{
    static const int rails[8][TOPO_TEST_MAX_RAILS] = {{0, -1}, {1, -1}, {2, -1}, {3, -1},
                                    {4, -1}, {5, -1}, {6, -1}, {7, -1}};
    topo_t *topo = load("nvswitch-8gpu-8nic.nccl.xml");
    topo_rail_plan_t *plan;

    (void)state;
    assert_int_equal(topo_source(topo), TOPO_SOURCE_NCCL_XML);
    assert_int_equal(topo_num_gpus(topo), 8);
    assert_int_equal(topo_num_nics(topo), 8);
    assert_int_equal(topo_num_numa(topo), 2);
    assert_int_equal(topo_num_nvswitches(topo), 1); /* one virtual switch target */
    assert_string_equal(topo_numa(topo, 1)->cpus, "32-63");

    const topo_gpu_t *gpu0 = topo_gpu(topo, 0);
    assert_string_equal(gpu0->busid, "0000:18:00.0");
    assert_int_equal(gpu0->vendor, TOPO_VENDOR_NVIDIA);
    assert_string_equal(gpu0->model, "H100-SXM5-80GB");
    assert_int_equal(gpu0->cuda_index, 0);
    assert_float_equal(gpu0->pcie_gbps, 63.015, 0.01);
    assert_int_equal(topo_gpu(topo, 7)->cuda_index, 7);

    const topo_nic_t *nic5 = topo_nic(topo, 5);
    assert_string_equal(nic5->name, "mlx5_5");
    assert_int_equal(nic5->kind, TOPO_NIC_VERBS);
    assert_int_equal(nic5->speed_mbps, 400000);

    /* Every pair: 18 NVLink4 lanes through the switch, 450 GB/s. */
    for (int a = 0; a < 8; ++a) {
        for (int b = 0; b < 8; ++b) {
            const topo_gpu_link_t *link = topo_gpu_link(topo, a, b);
            if (a == b) {
                assert_int_equal(link->kind, TOPO_LINK_NONE);
                continue;
            }
            assert_int_equal(link->kind, TOPO_LINK_NVLINK);
            assert_int_equal(link->count, 18);
            assert_true(link->via_switch);
            assert_float_equal(link->gbps, 450.0, 1e-9);
        }
    }
    /* GPUn/NICn share a leaf switch; leaves pair under root switches; two roots per socket. */
    assert_int_equal(topo_gpu_nic_path(topo, 0, 0), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 1), TOPO_PATH_PXB);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 2), TOPO_PATH_NODE);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 4), TOPO_PATH_SYS);
    assert_int_equal(topo_gpu_nic_path(topo, 7, 6), TOPO_PATH_PXB);
    assert_int_equal(topo_gpu_gpu_path(topo, 2, 3), TOPO_PATH_PXB);
    assert_int_equal(topo_gpu_gpu_path(topo, 4, 4), TOPO_PATH_SELF);

    plan = plan_of(topo);
    topo_test_assert_rails(plan, 8, rails);
    /* GPU0's fallbacks: its root switch's other NIC, then the socket's NODE NICs. */
    assert_int_equal(plan->rails[0].num_nics, 8);
    assert_int_equal(plan->rails[0].nics[1], 1);
    assert_int_equal(topo_gpu_nic_path(topo, 0, plan->rails[0].nics[2]), TOPO_PATH_NODE);
    assert_int_equal(topo_gpu_nic_path(topo, 0, plan->rails[0].nics[7]), TOPO_PATH_SYS);
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

static void test_shared_4nic_8gpu(void **state)
{
    /* Each socket's four GPUs reach its two NICs through the host bridge: two GPUs per NIC. */
    static const int rails[8][TOPO_TEST_MAX_RAILS] = {{0, -1}, {1, -1}, {0, -1}, {1, -1},
                                    {2, -1}, {3, -1}, {2, -1}, {3, -1}};
    topo_t *topo = load("shared-4nic-8gpu.hwloc.xml");
    topo_rail_plan_t *plan;
    int load[4] = {0};

    (void)state;
    assert_int_equal(topo_source(topo), TOPO_SOURCE_HWLOC_XML);
    assert_int_equal(topo_num_gpus(topo), 8);
    assert_int_equal(topo_num_nics(topo), 4);
    assert_int_equal(topo_num_numa(topo), 2);
    assert_string_equal(topo_gpu(topo, 0)->busid, "0000:03:00.0");
    assert_string_equal(topo_gpu(topo, 4)->busid, "0000:83:00.0");
    assert_int_equal(topo_gpu(topo, 5)->numa, 1);
    assert_string_equal(topo_nic(topo, 2)->name, "mlx5_2");
    assert_int_equal(topo_nic(topo, 2)->port_state, TOPO_PORT_ACTIVE);
    assert_int_equal(topo_nic(topo, 2)->kind, TOPO_NIC_VERBS);

    /* Two GPUs on one switch (its downstream ports fold into one node): PIX. */
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 1), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 2), TOPO_PATH_PHB);
    assert_int_equal(topo_gpu_gpu_path(topo, 3, 4), TOPO_PATH_SYS);
    assert_int_equal(topo_gpu_link(topo, 0, 1)->kind, TOPO_LINK_NONE);
    for (int g = 0; g < 8; ++g) {
        for (int n = 0; n < 4; ++n) {
            topo_path_t want = ((g < 4) == (n < 2)) ? TOPO_PATH_PHB : TOPO_PATH_SYS;
            assert_int_equal(topo_gpu_nic_path(topo, g, n), want);
        }
    }
    plan = plan_of(topo);
    topo_test_assert_rails(plan, 8, rails);
    for (int g = 0; g < 8; ++g) {
        load[plan->rails[g].nics[0]]++;
    }
    for (int n = 0; n < 4; ++n) {
        assert_int_equal(load[n], 2); /* no NIC overloaded */
    }
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

static void test_amd_xgmi(void **state)
{
    static const int rails[4][TOPO_TEST_MAX_RAILS] = {{0, -1}, {0, -1}, {1, -1}, {1, -1}};
    topo_t *topo = load("amd-xgmi-4gpu.hwloc.xml");
    topo_rail_plan_t *plan;

    (void)state;
    assert_int_equal(topo_num_gpus(topo), 4);
    assert_int_equal(topo_num_nics(topo), 2);
    for (int g = 0; g < 4; ++g) {
        assert_int_equal(topo_gpu(topo, g)->vendor, TOPO_VENDOR_AMD);
        assert_int_equal(topo_gpu(topo, g)->hip_index, g);
        assert_int_equal(topo_gpu(topo, g)->cuda_index, -1);
    }
    assert_string_equal(topo_gpu(topo, 2)->model, "AMD Instinct MI250X/MI250");
    for (int a = 0; a < 4; ++a) {
        for (int b = 0; b < 4; ++b) {
            const topo_gpu_link_t *link = topo_gpu_link(topo, a, b);
            double want = ((a == 0 && b == 1) || (a == 1 && b == 0)) ? 200.0 : 50.0;

            if (a == b) {
                continue;
            }
            assert_int_equal(link->kind, TOPO_LINK_XGMI);
            assert_false(link->via_switch);
            assert_float_equal(link->gbps, want, 1e-9);
        }
    }
    assert_int_equal(topo_gpu_nic_path(topo, 0, 0), TOPO_PATH_PIX);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 1), TOPO_PATH_PHB);
    assert_int_equal(topo_gpu_gpu_path(topo, 2, 3), TOPO_PATH_PIX);
    plan = plan_of(topo);
    topo_test_assert_rails(plan, 4, rails);
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

static void test_no_gpu_no_nic(void **state)
{
    topo_t *topo = load("no-gpu-no-nic.hwloc.xml");
    topo_rail_plan_t *plan;

    (void)state;
    assert_int_equal(topo_num_gpus(topo), 0);
    assert_int_equal(topo_num_nics(topo), 0);
    assert_int_equal(topo_num_numa(topo), 1);
    assert_string_equal(topo_numa(topo, 0)->cpus, "0-1");
    assert_int_equal(topo_numa(topo, 0)->memory_bytes, 24ull << 30);
    assert_null(topo_gpu(topo, 0));
    assert_null(topo_nic(topo, -1));
    assert_int_equal(topo_gpu_link(topo, 0, 1)->kind, TOPO_LINK_NONE);
    plan = plan_of(topo);
    assert_int_equal(plan->num_gpus, 0);
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

/* More NICs than GPUs (AWS p5: four EFA per GPU): each GPU drives all of its own. */
static void test_several_rails_per_gpu(void **state)
{
    static const char xml[] =
        "<system version=\"1\"><cpu numaid=\"0\" affinity=\"0000ffff\">"
        "<pci busid=\"0000:10:00.0\" class=\"0x060400\">"
        "  <pci busid=\"0000:11:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2330\"/>"
        "  <pci busid=\"0000:12:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa1\"/>"
        "  <pci busid=\"0000:13:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa1\"/>"
        "  <pci busid=\"0000:14:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa1\"/>"
        "  <pci busid=\"0000:15:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa1\"/>"
        "</pci>"
        "<pci busid=\"0000:20:00.0\" class=\"0x060400\">"
        "  <pci busid=\"0000:21:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2330\"/>"
        "  <pci busid=\"0000:22:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa1\"/>"
        "  <pci busid=\"0000:23:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa1\"/>"
        "  <pci busid=\"0000:24:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa1\"/>"
        "  <pci busid=\"0000:25:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa1\"/>"
        "  <pci busid=\"0000:26:00.0\" class=\"0x020000\" vendor=\"0x8086\" device=\"0x1572\"/>"
        "</pci></cpu></system>";
    static const int rails[2][TOPO_TEST_MAX_RAILS] = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    char err[UTIL_REASON_LEN];
    topo_rail_plan_t *plan;
    topo_t *topo;

    (void)state;
    assert_int_equal(topo_load_buffer("p5-like", xml, sizeof(xml) - 1, &topo, err), STRATA_OK);
    assert_int_equal(topo_num_nics(topo), 9);
    assert_int_equal(topo_nic(topo, 0)->kind, TOPO_NIC_EFA);
    assert_int_equal(topo_nic(topo, 8)->kind, TOPO_NIC_ETHERNET);
    plan = plan_of(topo);
    topo_test_assert_rails(plan, 2, rails);
    assert_int_equal(plan->rails[0].num_nics, 8); /* Ethernet is never a rail next to RDMA */
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

/*
 * Every GPU-NIC pair is PXB, so path class cannot choose. GPU1 shares switch 20:00.0 with
 * NIC0 (3 hops); GPU0 is 4 hops from both NICs. Taken in index order GPU0 would grab NIC0
 * and leave GPU1 the NIC 5 hops away; by distance GPU1 gets NIC0 and GPU0 NIC1.
 */
static void test_pxb_depth_nearer_gpu_wins(void **state)
{
    static const int rails[2][TOPO_TEST_MAX_RAILS] = {{1, -1}, {0, -1}};
    topo_t *topo = load("pxb-depth-2gpu-2nic.nccl.xml");
    topo_rail_plan_t *plan;

    (void)state;
    assert_int_equal(topo_num_gpus(topo), 2);
    assert_int_equal(topo_num_nics(topo), 2);
    assert_string_equal(topo_nic(topo, 0)->busid, "0000:28:00.0");
    for (int g = 0; g < 2; ++g) {
        for (int n = 0; n < 2; ++n) {
            assert_int_equal(topo_gpu_nic_path(topo, g, n), TOPO_PATH_PXB);
        }
    }
    /* Up to the common switch and down: GPU0 via 11:00.0 to 10:00.0 and down via 20:00.0
     * or 30:00.0; GPU1 via 21:00.0 to 20:00.0, which holds NIC0 itself. */
    assert_int_equal(topo_gpu_nic_hops(topo, 0, 0), 4);
    assert_int_equal(topo_gpu_nic_hops(topo, 0, 1), 4);
    assert_int_equal(topo_gpu_nic_hops(topo, 1, 0), 3);
    assert_int_equal(topo_gpu_nic_hops(topo, 1, 1), 5);
    assert_int_equal(topo_nic_nic_path(topo, 0, 1), TOPO_PATH_PXB);
    assert_int_equal(topo_nic_nic_path(topo, 1, 1), TOPO_PATH_SELF);
    plan = plan_of(topo);
    topo_test_assert_rails(plan, 2, rails);
    assert_int_equal(plan->rails[1].nics[1], 1); /* GPU1 falls back to the farther NIC */
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

/* One GPU, two PXB NICs: the rail through the deeper shared switch comes first, though its
 * index is higher. */
static void test_rails_ordered_by_hops(void **state)
{
    static const char xml[] =
        "<system version=\"1\"><cpu numaid=\"0\" affinity=\"000000ff\">"
        "<pci busid=\"0000:10:00.0\" class=\"0x060400\">"
        "  <pci busid=\"0000:11:00.0\" class=\"0x060400\">"
        "    <pci busid=\"0000:12:00.0\" class=\"0x060400\">"
        "      <pci busid=\"0000:13:00.0\" class=\"0x020700\" vendor=\"0x15b3\"/>"
        "    </pci>"
        "  </pci>"
        "  <pci busid=\"0000:20:00.0\" class=\"0x060400\">"
        "    <pci busid=\"0000:21:00.0\" class=\"0x060400\">"
        "      <pci busid=\"0000:22:00.0\" class=\"0x030200\" vendor=\"0x10de\"/>"
        "    </pci>"
        "    <pci busid=\"0000:28:00.0\" class=\"0x020700\" vendor=\"0x15b3\"/>"
        "  </pci>"
        "</pci></cpu></system>";
    static const int rails[1][TOPO_TEST_MAX_RAILS] = {{1, 0, -1}};
    char err[UTIL_REASON_LEN];
    topo_rail_plan_t *plan;
    topo_t *topo;

    (void)state;
    assert_int_equal(topo_load_buffer("hops", xml, sizeof(xml) - 1, &topo, err), STRATA_OK);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 0), TOPO_PATH_PXB);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 1), TOPO_PATH_PXB);
    assert_int_equal(topo_gpu_nic_hops(topo, 0, 0), 6);
    assert_int_equal(topo_gpu_nic_hops(topo, 0, 1), 3);
    plan = plan_of(topo);
    topo_test_assert_rails(plan, 1, rails);
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
}

/* IBM POWER9: hwloc's NVLinkBandwidth matrix names two Packages beside the GPUs. */
static void test_power9_cpu_nvlink(void **state)
{
    static const int numa_os[] = {0, 0, 8, 8};
    topo_t *topo = load("power9-nvlink-cpu.hwloc.xml");

    (void)state;
    assert_int_equal(topo_num_gpus(topo), 4);
    assert_int_equal(topo_num_nics(topo), 2);
    assert_int_equal(topo_num_numa(topo), 2);
    for (int g = 0; g < 4; ++g) {
        const topo_gpu_t *gpu = topo_gpu(topo, g);

        assert_int_equal(gpu->cpu_link.kind, TOPO_LINK_NVLINK);
        assert_int_equal(gpu->cpu_link.count, 3);
        assert_float_equal(gpu->cpu_link.gbps, 75.0, 1e-9);
        assert_int_equal(topo_numa(topo, gpu->cpu_link_numa)->os_index, numa_os[g]);
        assert_int_equal(gpu->cpu_link_numa, gpu->numa);
    }
    assert_int_equal(topo_gpu_link(topo, 0, 1)->kind, TOPO_LINK_NVLINK);
    assert_int_equal(topo_gpu_link(topo, 0, 1)->count, 3);
    assert_false(topo_gpu_link(topo, 0, 1)->via_switch);
    assert_int_equal(topo_gpu_link(topo, 1, 2)->kind, TOPO_LINK_NONE);
    assert_int_equal(topo_num_nvswitches(topo), 0); /* the CPU ends are no switch */
    assert_int_equal(topo_gpu_gpu_path(topo, 1, 2), TOPO_PATH_SYS);
    assert_int_equal(topo_nic_nic_path(topo, 0, 1), TOPO_PATH_SYS);
    topo_destroy(topo);
}

/* NCCL marks an NVLink to an IBM NPU with tclass 0x068001 and ends it at the GPU's CPU. */
static void test_nccl_cpu_nvlink(void **state)
{
    static const char xml[] =
        "<system version=\"1\"><cpu numaid=\"8\" affinity=\"000000ff\">"
        "<pci busid=\"0035:03:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x1db1\">"
        "  <gpu dev=\"0\" sm=\"70\">"
        "    <nvlink target=\"0035:00:00.0\" count=\"3\" tclass=\"0x068001\"/>"
        "  </gpu>"
        "</pci></cpu></system>";
    char err[UTIL_REASON_LEN];
    const topo_gpu_t *gpu;
    topo_t *topo;

    (void)state;
    assert_int_equal(topo_load_buffer("npu", xml, sizeof(xml) - 1, &topo, err), STRATA_OK);
    gpu = topo_gpu(topo, 0);
    assert_int_equal(gpu->cpu_link.kind, TOPO_LINK_NVLINK);
    assert_int_equal(gpu->cpu_link.count, 3);
    assert_float_equal(gpu->cpu_link.gbps, 75.0, 1e-9);
    assert_int_equal(topo_numa(topo, gpu->cpu_link_numa)->os_index, 8);
    assert_int_equal(topo_num_nvswitches(topo), 0);
    topo_destroy(topo);
}

/* Alone, an overlay is no machine: strata says what it is instead of showing nothing. */
static void test_overlay_file_recognised(void **state)
{
    topo_t *topo = load("overlay/p5-style.nccl.xml");

    (void)state;
    assert_true(topo_is_overlay(topo));
    assert_int_equal(topo_num_gpus(topo), 0);
    assert_int_equal(topo_num_unclassified_pci(topo), 5); /* 4f, 50, 51, 52, 60 */
    assert_null(topo_overlay(topo));
    topo_destroy(topo);

    topo = load("nvswitch-8gpu-8nic.nccl.xml"); /* every device has its class */
    assert_false(topo_is_overlay(topo));
    assert_int_equal(topo_num_unclassified_pci(topo), 0);
    topo_destroy(topo);
}

/*
 * A VM's flat PCIe (every pair PHB) with the overlay's switches applied: each GPU is PIX to
 * the two NICs on its switch and NODE to the others; link speeds and NIC names follow.
 */
static void test_overlay_merge(void **state)
{
    topo_t *topo = load("vm-2gpu-4efa.hwloc.xml");
    const topo_overlay_report_t *report;
    char path[1024], err[UTIL_REASON_LEN];

    (void)state;
    assert_int_equal(topo_gpu_nic_path(topo, 0, 0), TOPO_PATH_PHB);
    assert_int_equal(topo_gpu_nic_path(topo, 0, 2), TOPO_PATH_PHB);
    assert_float_equal(topo_gpu(topo, 0)->pcie_gbps, 0.0, 1e-9);
    snprintf(path, sizeof(path), "%s/overlay/p5-style.nccl.xml", STRATA_TEST_FIXTURES);
    if (topo_overlay_apply(topo, path, err) != STRATA_OK) {
        fail_msg("%s", err);
    }
    report = topo_overlay(topo);
    assert_non_null(report);
    assert_int_equal(report->unclassified, 5);
    assert_int_equal(report->matched_gpus, 2);
    assert_int_equal(report->matched_nics, 4);
    assert_int_equal(report->unmatched, 1);
    assert_string_equal(report->first_unmatched, "0000:52:00.0");
    assert_non_null(strstr(topo_description(topo), " + overlay "));
    for (int g = 0; g < 2; ++g) {
        for (int n = 0; n < 4; ++n) {
            topo_path_t want = (g == n / 2) ? TOPO_PATH_PIX : TOPO_PATH_NODE;

            assert_int_equal(topo_gpu_nic_path(topo, g, n), want);
        }
        assert_float_equal(topo_gpu(topo, g)->pcie_gbps, 63.015, 0.01); /* 32 GT/s x16 */
        assert_int_equal(topo_numa(topo, topo_gpu(topo, g)->numa)->os_index, 0);
    }
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 1), TOPO_PATH_NODE);
    assert_int_equal(topo_nic_nic_path(topo, 2, 3), TOPO_PATH_PIX);
    assert_string_equal(topo_nic(topo, 0)->name, "rdmap80s0"); /* the overlay names none */
    assert_int_equal(topo_nic(topo, 0)->speed_mbps, 0);
    assert_string_equal(topo_nic(topo, 2)->name, "efa_2");
    assert_int_equal(topo_nic(topo, 2)->speed_mbps, 100000);
    assert_int_equal(topo_nic(topo, 2)->kind, TOPO_NIC_EFA); /* discovery's word stands */
    topo_destroy(topo);
}

/* text in a new temporary file, its name in path (the caller unlinks it) */
static void write_overlay(const char *text, char path[32])
{
    FILE *file;
    int fd;

    snprintf(path, 32, "/tmp/strata-test-overlay-XXXXXX");
    fd = mkstemp(path);
    assert_true(fd >= 0);
    file = fdopen(fd, "w");
    assert_non_null(file);
    fputs(text, file);
    fclose(file);
}

/* A <cpu> adds its NUMA node only when a device of the machine sits below it. */
static void test_overlay_numa(void **state)
{
    char path[32], err[UTIL_REASON_LEN];
    topo_t *topo = load("vm-2gpu-4efa.hwloc.xml");

    (void)state;
    write_overlay("<system><cpu numaid=\"1\"><pci busid=\"0000:99:00.0\"/></cpu></system>",
                  path);
    assert_int_equal(topo_overlay_apply(topo, path, err), STRATA_OK);
    unlink(path);
    assert_int_equal(topo_num_numa(topo), 1);
    assert_int_equal(topo_overlay(topo)->unmatched, 1);
    write_overlay("<system><cpu numaid=\"1\"><pci busid=\"0000:60:00.0\"/></cpu></system>",
                  path);
    assert_int_equal(topo_overlay_apply(topo, path, err), STRATA_OK);
    unlink(path);
    assert_int_equal(topo_num_numa(topo), 2);
    assert_int_equal(topo_numa(topo, topo_gpu(topo, 1)->numa)->os_index, 1);
    assert_int_equal(topo_gpu_gpu_path(topo, 0, 1), TOPO_PATH_SYS);
    topo_destroy(topo);
}

static void expect_overlay_error(const char *overlay_text, strata_status_t want,
                                 const char *message)
{
    char path[32], err[UTIL_REASON_LEN] = "";
    topo_t *topo = load("vm-2gpu-4efa.hwloc.xml");

    write_overlay(overlay_text, path);
    assert_int_equal(topo_overlay_apply(topo, path, err), want);
    if (strstr(err, message) == NULL || strstr(err, path) == NULL) {
        fail_msg("error '%s' lacks '%s' or the file name", err, message);
    }
    assert_null(topo_overlay(topo));
    unlink(path);
    topo_destroy(topo);
}

static void test_overlay_errors(void **state)
{
    char path[1024], err[UTIL_REASON_LEN];
    topo_t *topo = load("vm-2gpu-4efa.hwloc.xml");

    (void)state;
    snprintf(path, sizeof(path), "%s/no-gpu-no-nic.hwloc.xml", STRATA_TEST_FIXTURES);
    assert_int_equal(topo_overlay_apply(topo, path, err), STRATA_ERR_PARSE);
    assert_non_null(strstr(err, "not an NCCL topology overlay: root element is <topology>"));
    assert_int_equal(topo_overlay_apply(topo, "/nonexistent/overlay.xml", err),
                     STRATA_ERR_NOT_FOUND);
    topo_destroy(topo);
    expect_overlay_error("<system><cpu numaid=\"0\"><pci busid=\"zz\"/></cpu></system>",
                         STRATA_ERR_PARSE, ":1: <pci> has no busid or one that is not a PCI");
    expect_overlay_error("<system><cpu><pci busid=\"0000:4f:00.0\"/></cpu></system>",
                         STRATA_ERR_PARSE, "<cpu> has no numaid");
    expect_overlay_error("<system><cpu numaid=\"0\"><pci busid=\"0000:61:00.0\"><nic>"
                         "<net speed=\"fast\"/></nic></pci></cpu></system>",
                         STRATA_ERR_PARSE, "<net> has a malformed speed 'fast'");
    /* strtoul alone would take " -1" as 2^64 - 1 and "0x10" as 16 */
    expect_overlay_error("<system><cpu numaid=\"0\"><pci busid=\"0000:61:00.0\"><nic>"
                         "<net speed=\" -1\"/></nic></pci></cpu></system>",
                         STRATA_ERR_PARSE, "<net> has a malformed speed ' -1'");
    expect_overlay_error("<system><cpu numaid=\"0x1\"><pci busid=\"0000:4f:00.0\"/></cpu>"
                         "</system>", STRATA_ERR_PARSE, "<cpu> has a malformed numaid '0x1'");
    expect_overlay_error("<system><cpu", STRATA_ERR_PARSE, "malformed or truncated XML");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvswitch_8gpu),
        cmocka_unit_test(test_shared_4nic_8gpu),
        cmocka_unit_test(test_amd_xgmi),
        cmocka_unit_test(test_no_gpu_no_nic),
        cmocka_unit_test(test_several_rails_per_gpu),
        cmocka_unit_test(test_pxb_depth_nearer_gpu_wins),
        cmocka_unit_test(test_rails_ordered_by_hops),
        cmocka_unit_test(test_power9_cpu_nvlink),
        cmocka_unit_test(test_nccl_cpu_nvlink),
        cmocka_unit_test(test_overlay_file_recognised),
        cmocka_unit_test(test_overlay_merge),
        cmocka_unit_test(test_overlay_numa),
        cmocka_unit_test(test_overlay_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
