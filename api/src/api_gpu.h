/*
 * Which device backend and which GPU a rank uses: the backend of the topology's GPU vendor,
 * and among the GPUs this process sees, the local rank's turn; its PCI address then names
 * the GPU in the topology, whose rails it drives.
 */
#ifndef STRATA_API_GPU_H
#define STRATA_API_GPU_H

#include "inter/engine.h"
#include "intra/intra.h"
#include "topo/topo.h"

/** cuda for NVIDIA GPUs, hip for AMD ones, when compiled in and runnable; else host. */
const intra_device_ops_t *api_gpu_backend(const topo_t *topo);

/** The same choice, logging nothing; why (UTIL_REASON_LEN) says what decided it. */
const intra_device_ops_t *api_gpu_backend_explain(const topo_t *topo, char *why);

/**
 * Make the local rank's GPU current on ops (which selects devices) and find it in the
 * topology: *topo_gpu_p becomes its index there, or stays as it was, with a warning, when the
 * topology does not list it. On failure reason (UTIL_REASON_LEN) says why.
 */
strata_status_t api_gpu_select(const intra_device_ops_t *ops, const topo_t *topo, int local_rank,
                               int *topo_gpu_p, char *reason);

/**
 * The topology GPU a local rank drives on ops: api_gpu_select's where ops selects devices,
 * else the topology's GPUs in turn (-1 when it has none, then the rails come from no GPU).
 * On failure reason (UTIL_REASON_LEN) says why and *topo_gpu_p is untouched.
 */
strata_status_t api_gpu_pick(const intra_device_ops_t *ops, const topo_t *topo, int local_rank,
                             int *topo_gpu_p, char *reason);

/**
 * What a rank's GPU gives its engine: the device memory of ops to register, and the rails
 * of the plan's NICs for gpu (-1: none), each naming its NIC as preferred device; where
 * params->num_rails is 0 (STRATA_INTER_RAILS unset), one rail per NIC, 1..INTER_MAX_RAILS.
 */
void api_gpu_engine_params(const intra_device_ops_t *ops, const topo_t *topo,
                           const topo_rail_plan_t *plan, int gpu, inter_engine_params_t *params);

#endif
