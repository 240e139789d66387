/*
 * A neighbour for moe_graph_check: a kernel that holds most of the GPU's multiprocessors,
 * spinning until the host sets a flag in mapped memory, as a framework's GEMM or NCCL
 * kernel would occupy them beside strata's.
 */
#include <cuda_runtime.h>

#define BUSY_THREADS 1024

__global__ void __launch_bounds__(BUSY_THREADS) moe_graph_busy_spin(const volatile int *flag)
{
    while (*flag == 0) {
        __nanosleep(1000);
    }
}

/* Start blocks of the spinning kernel on stream; *blocks_p: how many, leaving spare
 * multiprocessors free. flag: device address of mapped host memory. */
extern "C" cudaError_t moe_graph_busy_start(cudaStream_t stream, const int *flag, int spare,
                                            int *blocks_p)
{
    int device = 0, processors = 0, per_processor = 0;
    cudaError_t error = cudaGetDevice(&device);

    if (error == cudaSuccess) {
        error = cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device);
    }
    if (error == cudaSuccess) {
        error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_processor,
                                                              moe_graph_busy_spin,
                                                              BUSY_THREADS, 0);
    }
    if (error != cudaSuccess) {
        return error;
    }
    *blocks_p = (processors > spare ? processors - spare : 1) * per_processor;
    moe_graph_busy_spin<<<*blocks_p, BUSY_THREADS, 0, stream>>>(flag);
    return cudaGetLastError();
}
