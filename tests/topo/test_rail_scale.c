/*
 * Rail plans of large machines, written here as NCCL topology files: 2048 GPUs and 2048
 * NICs, each pair under its own PCIe switch, and the same flat under the CPUs. Every GPU
 * takes one rail, its own switch's NIC where there is one, every NIC serves exactly one GPU,
 * and every GPU lists every other NIC as a fallback, closest first. Planning them was
 * cubic in the machine's size (minutes at this size); the test's time limit catches that.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "topo_test.h"

#define PAIRS 2048

/* PAIRS GPUs and NICs over two CPUs; under_switch: each pair behind its own switch. */
static char *machine_text(bool under_switch, size_t *len_p)
{
    size_t cap = (size_t)PAIRS * 700 + 4096, len = 0;
    char *text = malloc(cap);

    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "<system version=\"1\">\n");
    for (int c = 0; c < 2; ++c) {
        len += (size_t)snprintf(text + len, cap - len, "<cpu numaid=\"%d\" affinity=\"ff\" "
                                "arch=\"x86_64\" vendor=\"GenuineIntel\">\n", c);
        for (int i = c * PAIRS / 2; i < (c + 1) * PAIRS / 2; ++i) {
            int bus = i % 256, domain = i / 256;

            if (under_switch) {
                len += (size_t)snprintf(text + len, cap - len, "<pci busid=\"%04x:%02x:00.0\" "
                                        "class=\"0x060400\" vendor=\"0x1000\" "
                                        "device=\"0xc030\">\n", domain, bus);
            }
            len += (size_t)snprintf(text + len, cap - len,
                                    "<pci busid=\"%04x:%02x:01.0\" class=\"0x030200\" "
                                    "vendor=\"0x10de\" device=\"0x2330\"><gpu dev=\"%d\" "
                                    "sm=\"90\" rank=\"%d\" gdr=\"1\"/></pci>\n"
                                    "<pci busid=\"%04x:%02x:02.0\" class=\"0x020700\" "
                                    "vendor=\"0x15b3\" device=\"0x1021\"><nic><net "
                                    "name=\"mlx5_%d\" dev=\"%d\" speed=\"400000\" port=\"1\" "
                                    "gdr=\"1\"/></nic></pci>\n%s",
                                    domain, bus, i, i, domain, bus, i, i,
                                    under_switch ? "</pci>\n" : "");
        }
        len += (size_t)snprintf(text + len, cap - len, "</cpu>\n");
    }
    len += (size_t)snprintf(text + len, cap - len, "</system>\n");
    assert_true(len < cap);
    *len_p = len;
    return text;
}

static void check_machine(bool under_switch)
{
    char err[UTIL_REASON_LEN];
    topo_rail_plan_t *plan = NULL;
    topo_t *topo = NULL;
    size_t len;
    char *text = machine_text(under_switch, &len);
    int *served = calloc(PAIRS, sizeof(int));

    assert_non_null(served);
    if (topo_load_buffer("big.nccl.xml", text, len, &topo, err) != STRATA_OK) {
        fail_msg("%s", err);
    }
    assert_int_equal(topo_num_gpus(topo), PAIRS);
    assert_int_equal(topo_num_nics(topo), PAIRS);
    assert_int_equal(topo_rail_plan_create(topo, &plan), STRATA_OK);
    for (int g = 0; g < PAIRS; ++g) {
        const topo_rail_t *rail = &plan->rails[g];

        assert_int_equal(rail->num_rails, 1);
        assert_int_equal(rail->num_nics, PAIRS); /* its rail, then every other NIC */
        served[rail->nics[0]]++;
        if (under_switch) {
            /* the NIC beside it: the same domain and bus ("dddd:bb") */
            assert_int_equal(strncmp(topo_nic(topo, rail->nics[0])->busid,
                                     topo_gpu(topo, g)->busid, 7), 0);
            assert_int_equal(topo_gpu_nic_path(topo, g, rail->nics[0]), TOPO_PATH_PIX);
            assert_true(topo_gpu_nic_path(topo, g, rail->nics[1]) > TOPO_PATH_PIX);
        }
        for (int i = 2; i < rail->num_nics; ++i) { /* fallbacks closest first */
            assert_true(topo_gpu_nic_path(topo, g, rail->nics[i - 1]) <=
                        topo_gpu_nic_path(topo, g, rail->nics[i]));
        }
    }
    for (int n = 0; n < PAIRS; ++n) {
        assert_int_equal(served[n], 1);
    }
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
    free(served);
    free(text);
}

static void test_pairs_under_switches(void **state)
{
    (void)state;
    check_machine(true);
}

static void test_flat_under_cpus(void **state)
{
    (void)state;
    check_machine(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_under_switches),
        cmocka_unit_test(test_flat_under_cpus),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
