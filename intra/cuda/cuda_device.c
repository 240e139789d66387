/*
 * CUDA device backend: the GPU backend body (intra/gpu/gpu_device.h) over the CUDA runtime.
 * Heap regions are cudaMalloc'd and shared by cudaIpc handles; kernels are cuda_kernels.cu.
 */
#include "cuda_device.h"

#include <cuda_runtime_api.h>

#define GPU_NAME                      "cuda"
#define GPU_OPS                       cuda_device_ops
#define GPU_MOE_LAUNCH                cuda_moe_launch
#define GPU_TIMER_TICKS_PER_US        1000 /* %globaltimer counts nanoseconds */
#define GPU_MEMORY                    INTRA_MEMORY_CUDA
#define GPU_HOST_ALLOC_FLAGS          (cudaHostAllocMapped | cudaHostAllocPortable)
#define gpuError_t                    cudaError_t
#define gpuSuccess                    cudaSuccess
#define gpuErrorMemoryAllocation      cudaErrorMemoryAllocation
#define gpuErrorInvalidValue          cudaErrorInvalidValue
#define gpuGetErrorName               cudaGetErrorName
#define gpuGetErrorString             cudaGetErrorString
#define gpuGetDeviceCount             cudaGetDeviceCount
#define gpuMalloc                     cudaMalloc
#define gpuFree                       cudaFree
#define gpuMemcpy                     cudaMemcpy
#define gpuMemcpyDefault              cudaMemcpyDefault
#define gpuMemset                     cudaMemset
#define gpuDeviceSynchronize          cudaDeviceSynchronize
#define gpuIpcMemHandle_t             cudaIpcMemHandle_t
#define gpuIpcGetMemHandle            cudaIpcGetMemHandle
#define gpuIpcOpenMemHandle           cudaIpcOpenMemHandle
#define gpuIpcCloseMemHandle          cudaIpcCloseMemHandle
#define gpuIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess
#define gpuGetDevice                  cudaGetDevice
#define gpuSetDevice                  cudaSetDevice
/* NIC writes into device memory, made visible to the device's kernels (CUDA 11.3 on). */
#define GPU_FLUSH_REMOTE_WRITES() \
    cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice, \
                                       cudaFlushGPUDirectRDMAWritesToOwner)
#define gpuHostAlloc                  cudaHostAlloc
#define gpuHostGetDevicePointer       cudaHostGetDevicePointer
#define gpuFreeHost                   cudaFreeHost
#define gpuStream_t                   cudaStream_t
#define gpuStreamCreate               cudaStreamCreate
#define gpuStreamDestroy              cudaStreamDestroy
#define gpuStreamSynchronize          cudaStreamSynchronize

#define GPU_REGION_MALLOC(ptr_p, size) cudaMalloc(ptr_p, size)
#define GPU_MOE_RESIDENT_BLOCKS       cuda_moe_resident_blocks
#define GPU_ARCH_FORMAT               "sm_%d%d"
#define GPU_ARCH_ARGS(prop)           (prop).major, (prop).minor
#define gpuDeviceProp_t               struct cudaDeviceProp
#define gpuGetDeviceProperties        cudaGetDeviceProperties
#define gpuDeviceGetPCIBusId          cudaDeviceGetPCIBusId
#define gpuDeviceGetByPCIBusId        cudaDeviceGetByPCIBusId
#define gpuDeviceGetP2PAttribute      cudaDeviceGetP2PAttribute
#define gpuDevP2PAttrAccessSupported  cudaDevP2PAttrAccessSupported
#define gpuDevP2PAttrNativeAtomicSupported cudaDevP2PAttrNativeAtomicSupported

#include "intra/gpu/gpu_device.h"
