/*
 * CUDA device backend: the GPU backend body (intra/gpu/gpu_device.h) over the CUDA runtime.
 * Heap regions are cudaMalloc'd and shared by cudaIpc handles; kernels are cuda_kernels.cu.
 */
#include "cuda_device.h"

#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdbool.h>

/*
 * Whether a CUDA context is current on this thread: from CUDA 12 on, cudaSetDevice makes
 * the device's primary context current, so the caller chose a GPU; a thread that chose none
 * has none. The driver's cuCtxGetCurrent, found through the runtime so that libstrata does
 * not link libcuda (which machines without a driver lack).
 */
typedef int (*cu_ctx_get_current_fn_t)(void **ctx_p);

static cu_ctx_get_current_fn_t cuda_ctx_get_current;

static void cuda_find_ctx_get_current(void)
{
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    void *fn = NULL;
    cudaError_t error;

#if CUDART_VERSION >= 12050
    error = cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault,
                                             &found);
#else
    error = cudaGetDriverEntryPoint("cuCtxGetCurrent", &fn, cudaEnableDefault, &found);
#endif
    if (error == cudaSuccess && found == cudaDriverEntryPointSuccess) {
        cuda_ctx_get_current = (cu_ctx_get_current_fn_t)fn;
    }
}

static bool cuda_thread_chose_device(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    void *ctx = NULL;

    pthread_once(&once, cuda_find_ctx_get_current);
    return cuda_ctx_get_current != NULL && cuda_ctx_get_current(&ctx) == 0 && ctx != NULL;
}
#define GPU_THREAD_CHOSE_DEVICE cuda_thread_chose_device

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
#define gpuMemcpyDefault              cudaMemcpyDefault
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
/* Whether GPU device orders GPUDirect RDMA writes for its own kernels (no flush needed), and
 * whether it can flush them (cudaDeviceFlushGPUDirectRDMAWrites). */
static int cuda_device_attribute(enum cudaDeviceAttr attr, int device)
{
    int value = 0;

    return cudaDeviceGetAttribute(&value, attr, device) == cudaSuccess ? value : 0;
}
#define GPU_REMOTE_WRITES_ORDERED(device) \
    (cuda_device_attribute(cudaDevAttrGPUDirectRDMAWritesOrdering, device) >= \
     cudaGPUDirectRDMAWritesOrderingOwner)
#define GPU_REMOTE_WRITES_FLUSHED(device) \
    ((cuda_device_attribute(cudaDevAttrGPUDirectRDMAFlushWritesOptions, device) & \
      cudaFlushGPUDirectRDMAWritesOptionHost) != 0)
#define gpuHostAlloc                  cudaHostAlloc
#define gpuHostGetDevicePointer       cudaHostGetDevicePointer
#define gpuFreeHost                   cudaFreeHost
#define gpuStream_t                   cudaStream_t
#define gpuStreamCreateWithFlags      cudaStreamCreateWithFlags
#define gpuStreamNonBlocking          cudaStreamNonBlocking
#define gpuStreamIsCapturing          cudaStreamIsCapturing
#define gpuStreamCaptureStatus        enum cudaStreamCaptureStatus
#define gpuStreamCaptureStatusNone    cudaStreamCaptureStatusNone
#define gpuStreamWaitEvent            cudaStreamWaitEvent
#define gpuEvent_t                    cudaEvent_t
#define gpuEventCreateWithFlags       cudaEventCreateWithFlags
#define gpuEventDisableTiming         cudaEventDisableTiming
#define gpuEventRecord                cudaEventRecord
#define gpuEventSynchronize           cudaEventSynchronize
#define gpuEventDestroy               cudaEventDestroy
#define gpuMemcpyAsync                cudaMemcpyAsync
#define gpuMemsetAsync                cudaMemsetAsync
#define gpuMemcpyHostToDevice         cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost         cudaMemcpyDeviceToHost
#define gpuStreamDestroy              cudaStreamDestroy
#define gpuStreamSynchronize          cudaStreamSynchronize

/* The GPU a stream belongs to (CUDA 12.8 on; older runtimes leave it unchecked). */
#if CUDART_VERSION >= 12080
#define GPU_STREAM_DEVICE(stream, device_p) cudaStreamGetDevice(stream, device_p)
#endif

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
