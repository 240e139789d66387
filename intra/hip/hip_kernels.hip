/*
 * The MoE kernels compiled by hipcc: the single-source bodies of moe_kernels.h and
 * net_kernels.h under global entry points, launched on the queue's stream.
 */
#include <hip/hip_runtime.h>

#include "intra/kernels/kernel_ids.h"
#include "intra/kernels/net_kernels.h"

#define HIP_MOE_THREADS 256

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_dispatch(intra_moe_args_t args)
{
    intra_moe_dispatch_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_combine(intra_moe_args_t args)
{
    intra_moe_combine_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_reduce(intra_moe_args_t args)
{
    intra_moe_reduce_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_sources(intra_moe_args_t args)
{
    intra_moe_sources_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_net_send(intra_moe_args_t args)
{
    intra_net_send_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_net_recv(intra_moe_args_t args)
{
    intra_net_recv_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_net_index(intra_moe_args_t args)
{
    intra_net_index_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_net_return(intra_moe_args_t args)
{
    intra_net_return_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(HIP_MOE_THREADS) hip_moe_net_terms(intra_moe_args_t args)
{
    intra_net_terms_body(&args, kernel_grid_here());
}

/* Kernel enum value -> entry point, in intra_moe_kernel_t's order. */
typedef void (*hip_moe_entry_t)(intra_moe_args_t);

static const hip_moe_entry_t hip_moe_entries[INTRA_MOE_KERNELS] = {
    hip_moe_dispatch,
    hip_moe_combine,
    hip_moe_reduce,
    hip_moe_sources,
    hip_moe_net_send,
    hip_moe_net_recv,
    hip_moe_net_index,
    hip_moe_net_return,
    hip_moe_net_terms,
};

extern "C" hipError_t hip_moe_launch(hipStream_t stream, int kernel,
                                     const struct intra_moe_args *args, unsigned num_blocks)
{
    if (kernel < 0 || kernel >= INTRA_MOE_KERNELS) {
        return hipErrorInvalidValue;
    }
    hipLaunchKernelGGL(hip_moe_entries[kernel], dim3(num_blocks), dim3(HIP_MOE_THREADS), 0,
                       stream, *args);
    return hipGetLastError();
}
