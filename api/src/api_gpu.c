/*
 * A rank's device backend and GPU. The GPU is chosen among those the runtime shows this
 * process, not by the topology's numbering: CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES may
 * narrow and reorder them (one GPU per process under many launchers), and the runtimes
 * number GPUs in their own order. The PCI address ties the two together.
 */
#include "api_gpu.h"
#include "util/util.h"

#include <stdio.h>

const intra_device_ops_t *api_gpu_backend(const topo_t *topo)
{
    const intra_device_ops_t *host = intra_device_find("host");
    const intra_device_ops_t *gpu  = NULL;
    char reason[INTRA_REASON_LEN];

    if (topo_num_gpus(topo) == 0) {
        return host;
    }
    switch (topo_gpu(topo, 0)->vendor) {
    case TOPO_VENDOR_NVIDIA:
        gpu = intra_device_find("cuda");
        break;
    case TOPO_VENDOR_AMD:
        gpu = intra_device_find("hip");
        break;
    default:
        break;
    }
    if (gpu == NULL) {
        return host;
    }
    if (gpu->probe(reason) != STRATA_OK) {
        UTIL_LOG_INFO("comm: the %s backend cannot run here (%s): using the host backend",
                      gpu->name, reason);
        return host;
    }
    return gpu;
}

int api_gpu_ordinal(int local_rank, int num_devices)
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
        snprintf(reason, INTRA_REASON_LEN, "the %s runtime shows this process no GPU", ops->name);
        return status != STRATA_OK ? status : STRATA_ERR_UNSUPPORTED;
    }
    ordinal = api_gpu_ordinal(local_rank, count);
    status  = ops->device_select(ordinal, reason);
    if (status != STRATA_OK) {
        return status;
    }
    status = ops->device_bus_id(bus_id);
    if (status != STRATA_OK) {
        snprintf(reason, INTRA_REASON_LEN, "no PCI address for %s GPU %d", ops->name, ordinal);
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
