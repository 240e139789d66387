/*
 * The MoE kernels compiled by hipcc: the single-source bodies of moe_kernels.h under
 * __global__ entry points, launched on the queue's stream.
 */
#include <hip/hip_runtime.h>

#include "intra/kernels/moe_kernels.h"

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

extern "C" hipError_t hip_moe_launch(hipStream_t stream, int kernel,
                                     const struct intra_moe_args *args, unsigned num_blocks)
{
    if (kernel == 0) {
        hipLaunchKernelGGL(hip_moe_dispatch, dim3(num_blocks), dim3(HIP_MOE_THREADS), 0, stream,
                           *args);
    } else if (kernel == 1) {
        hipLaunchKernelGGL(hip_moe_combine, dim3(num_blocks), dim3(HIP_MOE_THREADS), 0, stream,
                           *args);
    } else {
        hipLaunchKernelGGL(hip_moe_reduce, dim3(num_blocks), dim3(HIP_MOE_THREADS), 0, stream,
                           *args);
    }
    return hipGetLastError();
}
