/*
 * A rank's device backend and GPU. The GPU is chosen among those the runtime shows this
 * process, not by the topology's numbering: CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES may
 * narrow and reorder them (one GPU per process under many launchers), and the runtimes
 * number GPUs in their own order. The PCI address ties the two together.
 */
#include "api_gpu.h"
#include "util/util.h"

#include <inttypes.h>
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

/*
 * The runtime ordinal of the rank's GPU among count > 0: the one asked for (requested >= 0:
 * config.gpu or STRATA_GPU), else the one the calling thread chose before (a framework
 * owns the device, as NCCL assumes), else the local rank's turn.
 */
static strata_status_t api_gpu_ordinal(const intra_device_ops_t *ops, int local_rank,
                                       int requested, int count, int *ordinal_p, char *reason)
{
    bool chosen = false;
    int current = -1;

    if (requested >= 0) {
        if (requested >= count) {
            util_reason(reason, "GPU %d was asked for (config.gpu or STRATA_GPU), but the %s "
                        "runtime shows this process %d", requested, ops->name, count);
            return STRATA_ERR_INVALID;
        }
        *ordinal_p = requested;
        return STRATA_OK;
    }
    if (ops->device_chosen != NULL && ops->device_chosen(&current, &chosen) == STRATA_OK &&
        chosen && current >= 0 && current < count) {
        UTIL_LOG_DEBUG("comm: adopting %s GPU %d, current on the calling thread", ops->name,
                       current);
        *ordinal_p = current;
        return STRATA_OK;
    }
    *ordinal_p = local_rank % count;
    return STRATA_OK;
}

strata_status_t api_gpu_select(const intra_device_ops_t *ops, const topo_t *topo,
                               const api_gpu_request_t *request, api_gpu_t *gpu_p, char *reason)
{
    char bus_id[INTRA_BUS_ID_LEN] = "";
    int count = 0, ordinal, index;
    strata_status_t status = ops->device_count(&count);

    if (status != STRATA_OK || count <= 0) {
        util_reason(reason, "the %s runtime shows this process no GPU", ops->name);
        return status != STRATA_OK ? status : STRATA_ERR_UNSUPPORTED;
    }
    status = api_gpu_ordinal(ops, request->local_rank, request->ordinal, count, &ordinal, reason);
    if (status == STRATA_OK) {
        status = ops->device_select(ordinal, reason);
    }
    if (status != STRATA_OK) {
        return status;
    }
    gpu_p->ordinal = ordinal;
    status = ops->device_bus_id(bus_id);
    if (status != STRATA_OK) {
        util_reason(reason, "no PCI address for %s GPU %d", ops->name, ordinal);
        return status;
    }
    index = topo_gpu_find(topo, bus_id);
    if (index < 0) {
        UTIL_LOG_WARN("comm: %s GPU %d (%s) is not in the topology: its rails are those of "
                      "topology GPU %d", ops->name, ordinal, bus_id, gpu_p->topo_gpu);
        return STRATA_OK;
    }
    if (topo_gpu(topo, index)->mig) {
        util_reason(reason, "%s GPU %d (%s) runs in MIG mode: its instances share one PCI "
                    "address and cannot open each other's memory by IPC, so strata needs whole "
                    "GPUs (nvidia-smi -mig 0)", ops->name, ordinal, bus_id);
        return STRATA_ERR_UNSUPPORTED;
    }
    UTIL_LOG_DEBUG("comm: local rank %d drives %s GPU %d of %d (%s), topology GPU %d",
                   request->local_rank, ops->name, ordinal, count, bus_id, index);
    gpu_p->topo_gpu = index;
    return STRATA_OK;
}

strata_status_t api_gpu_pick(const intra_device_ops_t *ops, const topo_t *topo,
                             const api_gpu_request_t *request, api_gpu_t *gpu_p, char *reason)
{
    int num_gpus = topo_num_gpus(topo);
    api_gpu_t gpu = {.topo_gpu = (num_gpus > 0) ? request->local_rank % num_gpus : -1,
                     .ordinal  = -1};
    strata_status_t status = STRATA_OK;

    if (ops->device_select != NULL) {
        status = api_gpu_select(ops, topo, request, &gpu, reason);
    }
    if (status == STRATA_OK) {
        *gpu_p = gpu;
    }
    return status;
}

void api_gpu_enter(const intra_device_ops_t *ops, int ordinal, api_gpu_scope_t *scope)
{
    scope->ops      = ops;
    scope->ordinal  = ordinal;
    scope->previous = -1;
    if (ordinal >= 0 && ops != NULL && ops->device_use != NULL &&
        ops->device_use(ordinal, &scope->previous) != STRATA_OK) {
        scope->previous = -1; /* logged by the backend; the calls that follow will fail */
    }
}

void api_gpu_leave(const api_gpu_scope_t *scope)
{
    int ours;

    if (scope->previous >= 0 && scope->previous != scope->ordinal) {
        (void)scope->ops->device_use(scope->previous, &ours);
    }
}

/*
 * The CPUs the proxy runs on, and the NUMA node of the memory it polls: those of the node of
 * the first rail's NIC, which the proxy drives, else of the GPU's node, whose ring it reads;
 * "" and -1 where the topology does not say.
 */
static void api_gpu_proxy_place(const topo_t *topo, const topo_rail_t *rail, int gpu,
                                inter_engine_params_t *params)
{
    int numa = -1;

    if (rail != NULL && rail->num_rails > 0) {
        numa = topo_nic(topo, rail->nics[0])->numa;
    }
    if (numa < 0 && gpu >= 0) {
        numa = topo_gpu(topo, gpu)->numa;
    }
    snprintf(params->proxy_cpus, sizeof(params->proxy_cpus), "%s",
             numa >= 0 ? topo_numa(topo, numa)->cpus : "");
    params->proxy_numa_node = numa >= 0 ? topo_numa(topo, numa)->os_index : -1;
}

/* The engine's name for the memory ops allocates. */
static inter_mem_kind_t api_gpu_mem_kind(const intra_device_ops_t *ops)
{
    return ops->memory == INTRA_MEMORY_CUDA ? INTER_MEM_CUDA
           : ops->memory == INTRA_MEMORY_HIP ? INTER_MEM_ROCM
                                             : INTER_MEM_HOST;
}

strata_status_t api_gpu_mem_place(const intra_device_ops_t *ops, const void *addr, size_t len,
                                  const char *what, api_gpu_memory_t *memory_p)
{
    char reason[UTIL_REASON_LEN] = "";
    uintptr_t base = 0, start = (uintptr_t)addr;
    size_t size = 0;
    int device = -1;
    strata_status_t status;

    *memory_p = (api_gpu_memory_t){.kind = INTER_MEM_HOST, .device = 0};
    if (ops->mem_locate == NULL || addr == NULL) {
        return STRATA_OK; /* all host memory; the engine refuses NULL itself */
    }
    status = ops->mem_locate(addr, &device, &base, &size, reason);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("%s: cannot register %zu bytes at %p: %s (strata registers %s device "
                       "memory and host memory)", what, len, addr, reason, ops->name);
        return status;
    }
    if (device < 0) {
        return STRATA_OK;
    }
    if (start < base || len > size || start - base > size - len) {
        UTIL_LOG_ERROR("%s: cannot register %zu bytes at %p: the range runs past the end of "
                       "its allocation on %s GPU %d (%zu bytes from %#" PRIxPTR ")", what, len,
                       addr, ops->name, device, size, base);
        return STRATA_ERR_INVALID;
    }
    *memory_p = (api_gpu_memory_t){.kind = api_gpu_mem_kind(ops), .device = device};
    return STRATA_OK;
}

void api_gpu_engine_params(const intra_device_ops_t *ops, const topo_t *topo,
                           const topo_rail_plan_t *plan, int gpu, inter_engine_params_t *params)
{
    const topo_rail_t *rail = (gpu >= 0) ? &plan->rails[gpu] : NULL;

    params->device_memory = api_gpu_mem_kind(ops);
    if (params->num_rails == 0) {
        params->num_rails = rail ? UTIL_MAX(1, UTIL_MIN(rail->num_rails, INTER_MAX_RAILS)) : 1;
    }
    for (int r = 0; rail != NULL && r < rail->num_rails && r < INTER_MAX_RAILS; ++r) {
        snprintf(params->rail_devices[r], sizeof(params->rail_devices[r]), "%s",
                 topo_nic(topo, rail->nics[r])->name);
    }
    api_gpu_proxy_place(topo, rail, gpu, params);
}
