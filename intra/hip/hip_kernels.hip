/*
 * The MoE kernels compiled by hipcc: the single-source bodies of moe_kernels.h under global entry points, launched on the queue's stream.
 */
#include <hip/hip_runtime.h>

#include "intra/kernels/kernel_ids.h"
#include "intra/kernels/moe_kernels.h"

#define HIP_MOE_THREADS 256

/* One global entry point per kernel body, each a block of 256 threads. */
#define HIP_MOE_ENTRY(name, body) \
    __global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_##name(intra_moe_args_t args) \
    { \
        body(&args, kernel_grid_here()); \
    }

HIP_MOE_ENTRY(dispatch, intra_moe_dispatch_body)
HIP_MOE_ENTRY(combine, intra_moe_combine_body)
HIP_MOE_ENTRY(reduce, intra_moe_reduce_body)
HIP_MOE_ENTRY(sources, intra_moe_sources_body)
HIP_MOE_ENTRY(pull_into, intra_moe_pull_into_body)
HIP_MOE_ENTRY(combine_round, intra_moe_combine_round_body)
HIP_MOE_ENTRY(net_send, intra_net_send_body)
HIP_MOE_ENTRY(net_recv, intra_net_recv_body)
HIP_MOE_ENTRY(net_index, intra_net_index_body)
HIP_MOE_ENTRY(net_return, intra_net_return_body)
HIP_MOE_ENTRY(net_terms, intra_net_terms_body)
HIP_MOE_ENTRY(expert_wait, intra_moe_expert_wait_body)

/* The entry point of a kernel id; NULL for an id that names none. */
static void (*hip_moe_entry(int kernel))(intra_moe_args_t)
{
    switch (kernel) {
    case INTRA_MOE_KERNEL_DISPATCH:
        return hip_moe_dispatch;
    case INTRA_MOE_KERNEL_COMBINE:
        return hip_moe_combine;
    case INTRA_MOE_KERNEL_REDUCE:
        return hip_moe_reduce;
    case INTRA_MOE_KERNEL_SOURCES:
        return hip_moe_sources;
    case INTRA_MOE_KERNEL_PULL_INTO:
        return hip_moe_pull_into;
    case INTRA_MOE_KERNEL_COMBINE_ROUND:
        return hip_moe_combine_round;
    case INTRA_MOE_KERNEL_NET_SEND:
        return hip_moe_net_send;
    case INTRA_MOE_KERNEL_NET_RECV:
        return hip_moe_net_recv;
    case INTRA_MOE_KERNEL_NET_INDEX:
        return hip_moe_net_index;
    case INTRA_MOE_KERNEL_NET_RETURN:
        return hip_moe_net_return;
    case INTRA_MOE_KERNEL_NET_TERMS:
        return hip_moe_net_terms;
    case INTRA_MOE_KERNEL_EXPERT_WAIT:
        return hip_moe_expert_wait;
    default:
        return NULL;
    }
}

/*
 * Blocks of one grid spin on flags that other blocks of the same grid set, so all of them
 * must be resident at once, whatever else the GPU runs: a cooperative launch guarantees it,
 * or fails (hipErrorCooperativeLaunchTooLarge) instead of hanging. One block needs none.
 */
extern "C" hipError_t hip_moe_launch(hipStream_t stream, int kernel,
                                     const struct intra_moe_args *args, unsigned num_blocks)
{
    void (*entry)(intra_moe_args_t) = hip_moe_entry(kernel);
    intra_moe_args_t copy = *args;
    void *params[] = {&copy};

    if (entry == NULL) {
        return hipErrorInvalidValue;
    }
    if (num_blocks == 1) {
        hipLaunchKernelGGL(entry, dim3(1), dim3(HIP_MOE_THREADS), 0, stream, copy);
        return hipGetLastError();
    }
    return hipLaunchCooperativeKernel((const void *)entry, dim3(num_blocks),
                                      dim3(HIP_MOE_THREADS), params, 0, stream);
}

/*
 * Blocks of the kernels the current GPU holds at once: the fewest any kernel fits on a
 * multiprocessor, times the multiprocessors (a MIG slice reports its own). The occupancy
 * query fails where the library carries no code for this GPU.
 */
extern "C" hipError_t hip_moe_resident_blocks(unsigned *blocks_p)
{
    int device = 0, processors = 0, fewest = 0;
    hipError_t error = hipGetDevice(&device);

    if (error == hipSuccess) {
        error = hipDeviceGetAttribute(&processors, hipDeviceAttributeMultiprocessorCount, device);
    }
    for (int kernel = 0; kernel < INTRA_MOE_KERNELS && error == hipSuccess; ++kernel) {
        int per_processor = 0;

        error = hipOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_processor, hip_moe_entry(kernel), HIP_MOE_THREADS, 0);
        if (error == hipSuccess && (kernel == 0 || per_processor < fewest)) {
            fewest = per_processor;
        }
    }
    if (error == hipSuccess) {
        *blocks_p = (unsigned)fewest * (unsigned)processors;
    }
    return error;
}
