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

/** What picks a rank's GPU: the GPU asked for, else the calling thread's, else the turn. */
typedef struct api_gpu_request {
    int local_rank; /**< the launcher's, or the node grouping's */
    int ordinal;    /**< asked for (config.gpu, STRATA_GPU) among the runtime's; -1: none */
} api_gpu_request_t;

/** A rank's GPU. */
typedef struct api_gpu {
    int topo_gpu; /**< its index in the topology; -1: none */
    int ordinal;  /**< its index among the GPUs the runtime shows; -1: no GPU backend */
} api_gpu_t;

/**
 * Make the rank's GPU current on ops (which selects devices): the one the request asks for,
 * else the one current on the calling thread (device_chosen), else the local rank's turn;
 * and find it in the topology: gpu_p->ordinal becomes its runtime index, gpu_p->topo_gpu its
 * index there, or stays as it was, with a warning, when the topology does not list it. On
 * failure reason (UTIL_REASON_LEN) says why.
 */
strata_status_t api_gpu_select(const intra_device_ops_t *ops, const topo_t *topo,
                               const api_gpu_request_t *request, api_gpu_t *gpu_p, char *reason);

/**
 * The GPU a rank drives on ops: api_gpu_select's where ops selects devices, else the
 * topology's GPUs in turn by local rank (topo_gpu -1 when it has none, then the rails come
 * from no GPU; ordinal -1). On failure reason (UTIL_REASON_LEN) says why and *gpu_p is
 * untouched.
 */
strata_status_t api_gpu_pick(const intra_device_ops_t *ops, const topo_t *topo,
                             const api_gpu_request_t *request, api_gpu_t *gpu_p, char *reason);

/**
 * An API entry's GPU calls run on the communicator's GPU, and the caller's current GPU is
 * back when it returns, as NCCL does: enter before the first GPU call, leave before
 * returning. Nothing is given back to a thread that had chosen no GPU (that would open a
 * context on a GPU it never used). No-ops on the host backend and for ordinal -1.
 */
typedef struct api_gpu_scope {
    const intra_device_ops_t *ops;
    int                       ordinal;
    int                       previous;
} api_gpu_scope_t;

void api_gpu_enter(const intra_device_ops_t *ops, int ordinal, api_gpu_scope_t *scope);
void api_gpu_leave(const api_gpu_scope_t *scope);

/** Where memory handed to strata_mem_register lies, for the engine. */
typedef struct api_gpu_memory {
    inter_mem_kind_t kind;   /**< host, or the backend's device memory */
    int              device; /**< the GPU holding it (0 for host memory) */
} api_gpu_memory_t;

/**
 * Whether [addr, addr + len) is host memory or device memory of ops (mem_locate), and on
 * which GPU. STRATA_ERR_INVALID, logged, for a device range that runs past the end of its
 * allocation (peers may write anywhere in a registered range); STRATA_ERR_UNSUPPORTED,
 * logged, for memory the network can register as neither (managed memory). what names the
 * caller in the log.
 */
strata_status_t api_gpu_mem_place(const intra_device_ops_t *ops, const void *addr, size_t len,
                                  const char *what, api_gpu_memory_t *memory_p);

/**
 * What a rank's GPU gives its engine: the device memory of ops to register, and the rails
 * of the plan's NICs for gpu (-1: none), each naming its NIC as preferred device; where
 * params->num_rails is 0 (STRATA_INTER_RAILS unset), one rail per NIC, 1..INTER_MAX_RAILS;
 * and the CPUs of the first NIC's NUMA node (else the GPU's) for the proxy.
 */
void api_gpu_engine_params(const intra_device_ops_t *ops, const topo_t *topo,
                           const topo_rail_plan_t *plan, int gpu, inter_engine_params_t *params);

#endif
