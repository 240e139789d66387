/*
 * The MoE kernels compiled by nvcc: the single-source bodies of moe_kernels.h and
 * net_kernels.h under global entry points, launched on the queue's stream.
 */
#include "intra/kernels/kernel_ids.h"
#include "intra/kernels/net_kernels.h"

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

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_sources(intra_moe_args_t args)
{
    intra_moe_sources_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_net_send(intra_moe_args_t args)
{
    intra_net_send_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_net_recv(intra_moe_args_t args)
{
    intra_net_recv_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_net_index(intra_moe_args_t args)
{
    intra_net_index_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_net_return(intra_moe_args_t args)
{
    intra_net_return_body(&args, kernel_grid_here());
}

__global__ void __launch_bounds__(CUDA_MOE_THREADS) cuda_moe_net_terms(intra_moe_args_t args)
{
    intra_net_terms_body(&args, kernel_grid_here());
}

/* Kernel enum value -> entry point, in intra_moe_kernel_t's order. */
typedef void (*cuda_moe_entry_t)(intra_moe_args_t);

static const cuda_moe_entry_t cuda_moe_entries[INTRA_MOE_KERNELS] = {
    cuda_moe_dispatch,
    cuda_moe_combine,
    cuda_moe_reduce,
    cuda_moe_sources,
    cuda_moe_net_send,
    cuda_moe_net_recv,
    cuda_moe_net_index,
    cuda_moe_net_return,
    cuda_moe_net_terms,
};

extern "C" cudaError_t cuda_moe_launch(cudaStream_t stream, int kernel,
                                       const struct intra_moe_args *args, unsigned num_blocks)
{
    if (kernel < 0 || kernel >= INTRA_MOE_KERNELS) {
        return cudaErrorInvalidValue;
    }
    cuda_moe_entries[kernel]<<<num_blocks, CUDA_MOE_THREADS, 0, stream>>>(*args);
    return cudaGetLastError();
}
