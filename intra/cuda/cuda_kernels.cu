/*
 * The MoE kernels compiled by nvcc: the single-source bodies of moe_kernels.h under
 * __global__ entry points, launched on the queue's stream.
 */
#include "intra/kernels/moe_kernels.h"

#include <cuda_runtime.h>

#define CUDA_MOE_THREADS 256

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_dispatch(intra_moe_args_t args)
{
    intra_moe_dispatch_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_combine(intra_moe_args_t args)
{
    intra_moe_combine_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_reduce(intra_moe_args_t args)
{
    intra_moe_reduce_body(&args, kernel_grid_here());
}

extern "C" cudaError_t cuda_moe_launch(cudaStream_t stream, int kernel,
                                       const struct intra_moe_args *args, unsigned num_blocks)
{
    if (kernel == 0) {
        cuda_moe_dispatch<<<num_blocks, CUDA_MOE_THREADS, 0, stream>>>(*args);
    } else if (kernel == 1) {
        cuda_moe_combine<<<num_blocks, CUDA_MOE_THREADS, 0, stream>>>(*args);
    } else {
        cuda_moe_reduce<<<num_blocks, CUDA_MOE_THREADS, 0, stream>>>(*args);
    }
    return cudaGetLastError();
}
