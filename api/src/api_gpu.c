/*
 * A rank's device backend and GPU. The GPU is chosen among those the runtime shows this
 * process, not by the topology's numbering: CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES may
 * narrow and reorder them (one GPU per process under many launchers), and the runtimes
 * number GPUs in their own order. The PCI address ties the two together.
 */
#include "api_gpu.h"
#include "util/util.h"

#include <stdio.h>

/* The backend that drives a vendor's GPUs, by name. */
static const char *api_gpu_backend_name(topo_vendor_t vendor)
{
    switch (vendor) {
    case TOPO_VENDOR_NVIDIA: return "cuda";
    case TOPO_VENDOR_AMD:    return "hip";
    default:                 return NULL;
    }
}

const intra_device_ops_t *api_gpu_backend_explain(const topo_t *topo, char *why)
{
    const intra_device_ops_t *host = intra_device_find("host"), *gpu;
    const char *vendor, *name;
    char reason[UTIL_REASON_LEN];

    if (topo_num_gpus(topo) == 0) {
        util_reason(why, "the topology has no GPU");
        return host;
    }
    vendor = topo_vendor_name(topo_gpu(topo, 0)->vendor);
    name   = api_gpu_backend_name(topo_gpu(topo, 0)->vendor);
    if (name == NULL) {
        util_reason(why, "the topology gives its GPUs no vendor strata drives "
                    "(PCI vendor 0x%04x)", topo_gpu(topo, 0)->vendor_id);
        return host;
    }
    gpu = intra_device_find(name);
    if (gpu == NULL) {
        util_reason(why, "the topology's GPUs are %s, but this build has no %s "
                    "backend", vendor, name);
        return host;
    }
    if (gpu->probe(reason) != STRATA_OK) {
        util_reason(why, "the topology's GPUs are %s, but the %s backend cannot "
                    "run here: %.160s", vendor, name, reason);
        return host;
    }
    util_reason(why, "the topology's GPUs are %s and the %s runtime found a "
                "device", vendor, name);
    return gpu;
}

const intra_device_ops_t *api_gpu_backend(const topo_t *topo)
{
    char why[UTIL_REASON_LEN];
    const intra_device_ops_t *ops = api_gpu_backend_explain(topo, why);

    if (ops->memory == INTRA_MEMORY_HOST && topo_num_gpus(topo) > 0) {
        UTIL_LOG_INFO("comm: using the host backend: %s", why);
    }
    return ops;
}

/* The GPU ordinal of a local rank among num_devices > 0: ranks take them in turn. */
static int api_gpu_ordinal(int local_rank, int num_devices)
{
    return local_rank % num_devices;
}

strata_status_t api_gpu_select(const intra_device_ops_t *ops, const topo_t *topo, int local_rank,
                               int *topo_gpu_p, char *reason)
{
    char bus_id[INTRA_BUS_ID_LEN] = "";
    int count = 0, ordinal, index;
    strata_status_t status = ops->device_count(&count);

    if (status != STRATA_OK || count <= 0) {
        util_reason(reason, "the %s runtime shows this process no GPU", ops->name);
        return status != STRATA_OK ? status : STRATA_ERR_UNSUPPORTED;
    }
    ordinal = api_gpu_ordinal(local_rank, count);
    status  = ops->device_select(ordinal, reason);
    if (status != STRATA_OK) {
        return status;
    }
    status = ops->device_bus_id(bus_id);
    if (status != STRATA_OK) {
        util_reason(reason, "no PCI address for %s GPU %d", ops->name, ordinal);
        return status;
    }
    index = topo_gpu_find(topo, bus_id);
    if (index < 0) {
        UTIL_LOG_WARN("comm: %s GPU %d (%s) is not in the topology: its rails are those of "
                      "topology GPU %d", ops->name, ordinal, bus_id, *topo_gpu_p);
        return STRATA_OK;
    }
    UTIL_LOG_DEBUG("comm: local rank %d drives %s GPU %d of %d (%s), topology GPU %d",
                   local_rank, ops->name, ordinal, count, bus_id, index);
    *topo_gpu_p = index;
    return STRATA_OK;
}

strata_status_t api_gpu_pick(const intra_device_ops_t *ops, const topo_t *topo, int local_rank,
                             int *topo_gpu_p, char *reason)
{
    int num_gpus = topo_num_gpus(topo);
    int gpu      = (num_gpus > 0) ? local_rank % num_gpus : -1;
    strata_status_t status = STRATA_OK;

    if (ops->device_select != NULL) {
        status = api_gpu_select(ops, topo, local_rank, &gpu, reason);
    }
    if (status == STRATA_OK) {
        *topo_gpu_p = gpu;
    }
    return status;
}

void api_gpu_engine_params(const intra_device_ops_t *ops, const topo_t *topo,
                           const topo_rail_plan_t *plan, int gpu, inter_engine_params_t *params)
{
    const topo_rail_t *rail = (gpu >= 0) ? &plan->rails[gpu] : NULL;

    params->device_memory = ops->memory == INTRA_MEMORY_CUDA  ? INTER_MEM_CUDA
                            : ops->memory == INTRA_MEMORY_HIP ? INTER_MEM_ROCM
                                                              : INTER_MEM_HOST;
    if (params->num_rails == 0) {
        params->num_rails = rail ? UTIL_MAX(1, UTIL_MIN(rail->num_rails, INTER_MAX_RAILS)) : 1;
    }
    for (int r = 0; rail != NULL && r < rail->num_rails && r < INTER_MAX_RAILS; ++r) {
        snprintf(params->rail_devices[r], sizeof(params->rail_devices[r]), "%s",
                 topo_nic(topo, rail->nics[r])->name);
    }
}
