/*
 * Topology files (hwloc XML and NCCL topology XML, told apart by the root element) loaded
 * from memory, then every query and the rail plan on what loaded: nothing may crash, leak
 * or read out of bounds, and every index a query returns must be in range.
 */
#include "fuzz_input.h"

#include "topo/topo.h"

static void fuzz_topo_queries(const topo_t *topo)
{
    int gpus = topo_num_gpus(topo), nics = topo_num_nics(topo), numa = topo_num_numa(topo);
    topo_rail_plan_t *plan;

    FUZZ_CHECK(gpus >= 0 && nics >= 0 && numa >= 0 && topo_num_nvswitches(topo) >= 0);
    for (int g = 0; g < gpus; ++g) {
        const topo_gpu_t *gpu = topo_gpu(topo, g);

        FUZZ_CHECK(gpu->numa >= -1 && gpu->numa < numa);
        FUZZ_CHECK(topo_gpu_find(topo, gpu->busid) == g);
        (void)topo_vendor_name(gpu->vendor);
        for (int h = 0; h < gpus; ++h) {
            (void)topo_path_name(topo_gpu_gpu_path(topo, g, h));
            (void)topo_link_kind_name(topo_gpu_link(topo, g, h)->kind);
        }
        FUZZ_CHECK(gpu->cpu_link_numa >= -1 && gpu->cpu_link_numa < numa);
        for (int n = 0; n < nics; ++n) {
            (void)topo_path_name(topo_gpu_nic_path(topo, g, n));
            FUZZ_CHECK(topo_gpu_nic_hops(topo, g, n) >= 2);
        }
    }
    FUZZ_CHECK(topo_num_unclassified_pci(topo) >= 0);
    (void)topo_is_overlay(topo);
    for (int n = 0; n < nics; ++n) {
        const topo_nic_t *nic = topo_nic(topo, n);

        FUZZ_CHECK(nic->numa >= -1 && nic->numa < numa);
        (void)topo_nic_is_rdma(nic);
        (void)topo_nic_kind_name(nic->kind);
        (void)topo_port_state_name(nic->port_state);
        for (int m = 0; m < nics; ++m) {
            FUZZ_CHECK((topo_nic_nic_path(topo, n, m) == TOPO_PATH_SELF) == (n == m));
        }
    }
    if (topo_rail_plan_create(topo, &plan) == STRATA_OK) {
        FUZZ_CHECK(plan->num_gpus == gpus);
        for (int g = 0; g < plan->num_gpus; ++g) {
            const topo_rail_t *rail = &plan->rails[g];

            FUZZ_CHECK(rail->num_rails >= 0 && rail->num_rails <= rail->num_nics);
            FUZZ_CHECK(rail->num_nics <= nics);
            for (int i = 0; i < rail->num_nics; ++i) {
                FUZZ_CHECK(rail->nics[i] >= 0 && rail->nics[i] < nics);
            }
        }
        topo_rail_plan_destroy(plan);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_input_text(data, size), err[UTIL_REASON_LEN];
    topo_t *topo = NULL;

    if (text == NULL) {
        return 0;
    }
    if (topo_load_buffer("fuzz.xml", text, size, &topo, err) == STRATA_OK) {
        fuzz_topo_queries(topo);
        topo_destroy(topo);
    } else {
        FUZZ_CHECK(topo == NULL && strchr(err, '\n') == NULL && err[0] != '\0');
    }
    free(text);
    return 0;
}
