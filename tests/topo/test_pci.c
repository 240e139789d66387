/*
 * PCI facts: bus ids, cpumasks, device roles, NIC kinds, PCIe bandwidth.
 */
#include "topo/topo_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static void test_busid(void **state)
{
    char out[TOPO_BUSID_LEN];

    (void)state;
    assert_true(topo_busid_normalize("0000:10:1C.0", out));
    assert_string_equal(out, "0000:10:1c.0");
    assert_true(topo_busid_normalize("3b:00.0", out));
    assert_string_equal(out, "0000:3b:00.0");
    assert_true(topo_busid_normalize("0103:00:00.0", out));
    assert_string_equal(out, "0103:00:00.0");
    assert_true(topo_busid_normalize("ffff:ff:01.0", out));
    assert_false(topo_busid_normalize("fffffff:ffff:ff", out)); /* NCCL's virtual NVSwitch */
    assert_false(topo_busid_normalize("0000:100:00.0", out));
    assert_false(topo_busid_normalize("0000:10:20.0", out));
    assert_false(topo_busid_normalize("0000:10:1c.8", out));
    assert_false(topo_busid_normalize("0000:10:1c.0 ", out));
    assert_false(topo_busid_normalize("gpu0", out));
    assert_false(topo_busid_normalize("", out));
    assert_false(topo_busid_normalize(NULL, out));
}

static void test_cpumask(void **state)
{
    char list[TOPO_CPUS_LEN];

    (void)state;
    assert_true(topo_cpumask_to_list("00000000,00ffffff", list, sizeof(list)));
    assert_string_equal(list, "0-23");
    assert_true(topo_cpumask_to_list("000000ff,ffff0000,00ffffff", list, sizeof(list)));
    assert_string_equal(list, "0-23,48-71");
    assert_true(topo_cpumask_to_list("ffffff00,00000000,00000000", list, sizeof(list)));
    assert_string_equal(list, "72-95");
    assert_true(topo_cpumask_to_list("3", list, sizeof(list)));
    assert_string_equal(list, "0-1");
    assert_false(topo_cpumask_to_list("00ff,zz", list, sizeof(list)));
    assert_false(topo_cpumask_to_list("0,,1", list, sizeof(list)));
    assert_false(topo_cpumask_to_list("123456789", list, sizeof(list)));
    assert_false(topo_cpumask_to_list("", list, sizeof(list)));
}

static void test_classify(void **state)
{
    (void)state;
    assert_int_equal(topo_pci_classify(0x0302, 0x10de, 0x2330, false), TOPO_PCI_GPU);
    assert_int_equal(topo_pci_classify(0x0300, 0x10de, 0x2684, false), TOPO_PCI_GPU);
    assert_int_equal(topo_pci_classify(0x0380, 0x1002, 0x740c, false), TOPO_PCI_GPU);
    assert_int_equal(topo_pci_classify(0x1200, 0x1002, 0x74a1, false), TOPO_PCI_GPU);
    /* A Radeon display adapter is a GPU only when ROCm drives it; a BMC's VGA never. */
    assert_int_equal(topo_pci_classify(0x0300, 0x1002, 0x6798, false), TOPO_PCI_OTHER);
    assert_int_equal(topo_pci_classify(0x0300, 0x1002, 0x744c, true), TOPO_PCI_GPU);
    assert_int_equal(topo_pci_classify(0x0300, 0x102b, 0x0532, false), TOPO_PCI_OTHER);
    assert_int_equal(topo_pci_classify(0x0680, 0x10de, 0x1ac2, false), TOPO_PCI_NVSWITCH);
    assert_int_equal(topo_pci_classify(0x0604, 0x10b5, 0x9781, false), TOPO_PCI_BRIDGE);
    assert_int_equal(topo_pci_classify(0x0207, 0x15b3, 0x101b, false), TOPO_PCI_NIC);
    assert_int_equal(topo_pci_classify(0x0200, 0x1d0f, 0xefa1, false), TOPO_PCI_NIC);
    assert_int_equal(topo_pci_classify(0x0c06, 0x15b3, 0x1003, false), TOPO_PCI_NIC);
    assert_int_equal(topo_pci_classify(0x0106, 0x8086, 0x1d02, false), TOPO_PCI_OTHER);
}

static void test_nic_kind(void **state)
{
    (void)state;
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x1d0f, 0xefa0, "", false), TOPO_NIC_EFA);
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x1d0f, 0xec20, "ens5", false),
                     TOPO_NIC_ETHERNET); /* Amazon ENA: plain Ethernet */
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x1d0f, 0xefa1, "rdmap16s27", true),
                     TOPO_NIC_EFA);
    assert_int_equal(topo_nic_kind_guess(0x0207, 0x15b3, 0x101b, "mlx5_0", true), TOPO_NIC_VERBS);
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x15b3, 0x101d, "", false), TOPO_NIC_VERBS);
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x17db, 0x0501, "cxi0", false),
                     TOPO_NIC_SLINGSHOT);
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x14e4, 0x1750, "bnxt_re0", true),
                     TOPO_NIC_VERBS);
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x14e4, 0x1760, "bnxt_re3", false),
                     TOPO_NIC_VERBS); /* RoCE named in an NCCL file */
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x8086, 0x1592, "irdma1", false), TOPO_NIC_VERBS);
    assert_int_equal(topo_nic_kind_guess(0x0200, 0x1af4, 0x1000, "eth0", false),
                     TOPO_NIC_ETHERNET);
}

static void test_pcie_bandwidth(void **state)
{
    (void)state;
    assert_float_equal(topo_pcie_gbps(16.0, 16), 31.5077, 0.001);  /* Gen4 x16 */
    assert_float_equal(topo_pcie_gbps(32.0, 16), 63.0154, 0.001);  /* Gen5 x16 */
    assert_float_equal(topo_pcie_gbps(5.0, 8), 4.0, 0.001);        /* Gen2 x8, 8b/10b */
    assert_float_equal(topo_pcie_gbps(0.0, 16), 0.0, 0.0);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(topo_path_name(TOPO_PATH_PIX), "PIX");
    assert_string_equal(topo_path_name(TOPO_PATH_SYS), "SYS");
    assert_string_equal(topo_path_name((topo_path_t)42), "?");
    assert_string_equal(topo_nic_kind_name(TOPO_NIC_EFA), "efa");
    assert_string_equal(topo_gpu_model_name(0x10de, 0x2330), "H100-SXM5-80GB");
    assert_string_equal(topo_gpu_model_name(0x10de, 0x0001), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_busid),
        cmocka_unit_test(test_cpumask),
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_nic_kind),
        cmocka_unit_test(test_pcie_bandwidth),
        cmocka_unit_test(test_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
