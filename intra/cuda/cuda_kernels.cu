/*
 * The MoE kernels compiled by nvcc: the single-source bodies of moe_kernels.h under global entry points, launched on the queue's stream.
 */
#include "intra/kernels/kernel_ids.h"
#include "intra/kernels/moe_kernels.h"

#include <cuda_runtime.h>

#define CUDA_MOE_THREADS 256

/* One global entry point per kernel body, each a block of 256 threads. */
#define CUDA_MOE_ENTRY(name, body) \
    __global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_##name(intra_moe_args_t args) \
    { \
        body(&args, kernel_grid_here()); \
    }

CUDA_MOE_ENTRY(dispatch, intra_moe_dispatch_body)
CUDA_MOE_ENTRY(combine, intra_moe_combine_body)
CUDA_MOE_ENTRY(reduce, intra_moe_reduce_body)
CUDA_MOE_ENTRY(sources, intra_moe_sources_body)
CUDA_MOE_ENTRY(pull_into, intra_moe_pull_into_body)
CUDA_MOE_ENTRY(combine_round, intra_moe_combine_round_body)
CUDA_MOE_ENTRY(net_send, intra_net_send_body)
CUDA_MOE_ENTRY(net_recv, intra_net_recv_body)
CUDA_MOE_ENTRY(net_index, intra_net_index_body)
CUDA_MOE_ENTRY(net_return, intra_net_return_body)
CUDA_MOE_ENTRY(net_terms, intra_net_terms_body)
CUDA_MOE_ENTRY(expert_wait, intra_moe_expert_wait_body)

/* The entry point of a kernel id; NULL for an id that names none. */
static void (*cuda_moe_entry(int kernel))(intra_moe_args_t)
{
    switch (kernel) {
    case INTRA_MOE_KERNEL_DISPATCH:
        return cuda_moe_dispatch;
    case INTRA_MOE_KERNEL_COMBINE:
        return cuda_moe_combine;
    case INTRA_MOE_KERNEL_REDUCE:
        return cuda_moe_reduce;
    case INTRA_MOE_KERNEL_SOURCES:
        return cuda_moe_sources;
    case INTRA_MOE_KERNEL_PULL_INTO:
        return cuda_moe_pull_into;
    case INTRA_MOE_KERNEL_COMBINE_ROUND:
        return cuda_moe_combine_round;
    case INTRA_MOE_KERNEL_NET_SEND:
        return cuda_moe_net_send;
    case INTRA_MOE_KERNEL_NET_RECV:
        return cuda_moe_net_recv;
    case INTRA_MOE_KERNEL_NET_INDEX:
        return cuda_moe_net_index;
    case INTRA_MOE_KERNEL_NET_RETURN:
        return cuda_moe_net_return;
    case INTRA_MOE_KERNEL_NET_TERMS:
        return cuda_moe_net_terms;
    case INTRA_MOE_KERNEL_EXPERT_WAIT:
        return cuda_moe_expert_wait;
    default:
        return NULL;
    }
}

/*
 * Blocks of one grid spin on flags that other blocks of the same grid set, so all of them
 * must be resident at once, whatever else the GPU runs (a framework's GEMMs, NCCL, another
 * object): a cooperative launch guarantees it, or fails (cudaErrorCooperativeLaunchTooLarge)
 * instead of hanging. A one-block launch needs no guarantee.
 */
extern "C" cudaError_t cuda_moe_launch(cudaStream_t stream, int kernel,
                                       const struct intra_moe_args *args, unsigned num_blocks)
{
    void (*entry)(intra_moe_args_t) = cuda_moe_entry(kernel);
    cudaLaunchAttribute cooperative;
    cudaLaunchConfig_t config = {};

    if (entry == NULL) {
        return cudaErrorInvalidValue;
    }
    cooperative.id              = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    config.gridDim              = dim3(num_blocks);
    config.blockDim             = dim3(CUDA_MOE_THREADS);
    config.stream               = stream;
    config.attrs                = &cooperative;
    config.numAttrs             = num_blocks > 1 ? 1 : 0;
    return cudaLaunchKernelEx(&config, entry, *args);
}

/*
 * Blocks of the kernels the current GPU holds at once: the fewest any kernel fits on a
 * multiprocessor, times the multiprocessors (a MIG slice reports its own). The occupancy
 * query fails where the library carries no code for this GPU.
 */
extern "C" cudaError_t cuda_moe_resident_blocks(unsigned *blocks_p)
{
    int device = 0, processors = 0, fewest = 0;
    cudaError_t error = cudaGetDevice(&device);

    if (error == cudaSuccess) {
        error = cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device);
    }
    for (int kernel = 0; kernel < INTRA_MOE_KERNELS && error == cudaSuccess; ++kernel) {
        int per_processor = 0;

        error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_processor, cuda_moe_entry(kernel), CUDA_MOE_THREADS, 0);
        if (error == cudaSuccess && (kernel == 0 || per_processor < fewest)) {
            fewest = per_processor;
        }
    }
    if (error == cudaSuccess) {
        *blocks_p = (unsigned)fewest * (unsigned)processors;
    }
    return error;
}
