/*
 * Which device backend and which GPU a rank uses: the backend of the topology's GPU vendor,
 * and among the GPUs this process sees, the local rank's turn; its PCI address then names
 * the GPU in the topology, whose rails it drives.
 */
#ifndef STRATA_API_GPU_H
#define STRATA_API_GPU_H

#include "intra/intra.h"
#include "topo/topo.h"

/** cuda for NVIDIA GPUs, hip for AMD ones, when compiled in and runnable; else host. */
const intra_device_ops_t *api_gpu_backend(const topo_t *topo);

/** The GPU ordinal of a local rank among num_devices > 0: ranks take them in turn. */
int api_gpu_ordinal(int local_rank, int num_devices);

/**
 * Make the local rank's GPU current on ops (which selects devices) and find it in the
 * topology: *topo_gpu_p becomes its index there, or stays as it was, with a warning, when the
 * topology does not list it. On failure reason (INTRA_REASON_LEN) says why.
 */
strata_status_t api_gpu_select(const intra_device_ops_t *ops, const topo_t *topo, int local_rank,
                               int *topo_gpu_p, char *reason);

#endif
