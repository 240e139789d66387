/*
 * CUDA device backend: the GPU backend body (intra/gpu/gpu_device.h) over the CUDA runtime.
 * Heap regions are cudaMalloc'd and shared by cudaIpc handles; kernels are cuda_kernels.cu.
 * What the runtime lacks (the current context, dma-buf export) comes from the driver API,
 * found through the runtime.
 */
#include "cuda_device.h"
#include "util/util_reason.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

/*
 * Whether a CUDA context is current on this thread: from CUDA 12 on, cudaSetDevice makes
 * the device's primary context current, so the caller chose a GPU; a thread that chose none
 * has none. The driver's cuCtxGetCurrent, found through the runtime so that libstrata does
 * not link libcuda (which machines without a driver lack).
 */
/* A CUDA driver function found through the runtime, so that libstrata does not link
 * libcuda (which machines without a driver lack); NULL if the driver has none. */
static void *cuda_driver_fn(const char *name)
{
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    void *fn = NULL;
    cudaError_t error;

#if CUDART_VERSION >= 12050
    error = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
#else
    error = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
#endif
    return error == cudaSuccess && found == cudaDriverEntryPointSuccess ? fn : NULL;
}

typedef int (*cu_ctx_get_current_fn_t)(void **ctx_p);

static cu_ctx_get_current_fn_t cuda_ctx_get_current;

static void cuda_find_ctx_get_current(void)
{
    *(void **)&cuda_ctx_get_current = cuda_driver_fn("cuCtxGetCurrent");
}

/*
 * Whether a CUDA context is current on this thread: from CUDA 12 on, cudaSetDevice makes
 * the device's primary context current, so the caller chose a GPU; a thread that chose none
 * has none.
 */
static bool cuda_thread_chose_device(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    void *ctx = NULL;

    pthread_once(&once, cuda_find_ctx_get_current);
    return cuda_ctx_get_current != NULL && cuda_ctx_get_current(&ctx) == 0 && ctx != NULL;
}

/* cuMemGetAddressRange and cuMemGetHandleForAddressRange (CUDA 11.7), by the driver API's
 * own types: CUdeviceptr is an unsigned long long. */
typedef int (*cu_mem_range_fn_t)(unsigned long long *base, size_t *size, unsigned long long ptr);
typedef int (*cu_mem_handle_fn_t)(void *handle, unsigned long long ptr, size_t size, int type,
                                  unsigned long long flags);
#define CUDA_DMA_BUF_FD 1 /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */

/* The whole allocation holding ptr, page-aligned, as one dma-buf (as NCCL exports it). */
static strata_status_t cuda_mem_export_dmabuf(void *ptr, size_t size, int *fd_p,
                                              uint64_t *offset_p, char *reason)
{
    cu_mem_range_fn_t range;
    cu_mem_handle_fn_t handle;
    unsigned long long base = 0;
    size_t alloc = 0, page = (size_t)sysconf(_SC_PAGESIZE);
    int fd = -1, rc;

    *(void **)&range  = cuda_driver_fn("cuMemGetAddressRange");
    *(void **)&handle = cuda_driver_fn("cuMemGetHandleForAddressRange");
    if (range == NULL || handle == NULL) {
        util_reason(reason, "the CUDA driver exports no dma-buf (it needs 515 or newer)");
        return STRATA_ERR_UNSUPPORTED;
    }
    rc = range(&base, &alloc, (unsigned long long)(uintptr_t)ptr);
    if (rc != 0 || (uintptr_t)ptr + size > base + alloc) {
        util_reason(reason, "%p is not in one CUDA allocation (CUresult %d)", ptr, rc);
        return STRATA_ERR_INVALID;
    }
    rc = handle(&fd, base, (alloc + page - 1) / page * page, CUDA_DMA_BUF_FD, 0);
    if (rc != 0 || fd < 0) {
        util_reason(reason, "the CUDA driver refused a dma-buf of %zu bytes (CUresult %d; "
                    "open kernel modules on a kernel with dma-buf are needed)", alloc, rc);
        return STRATA_ERR_UNSUPPORTED;
    }
    *fd_p     = fd;
    *offset_p = (uint64_t)((uintptr_t)ptr - base);
    return STRATA_OK;
}
#define GPU_MEM_EXPORT_DMABUF cuda_mem_export_dmabuf

/*
 * Where ptr is: device memory by the runtime's pointer attributes, its allocation by the
 * driver's cuMemGetAddressRange; memory the runtime does not know (pageable, or pinned by
 * another runtime) is host memory.
 */
static strata_status_t cuda_mem_locate(const void *ptr, int *device_p, uintptr_t *base_p,
                                       size_t *size_p, char *reason)
{
    struct cudaPointerAttributes attr;
    cudaError_t error = cudaPointerGetAttributes(&attr, ptr);
    cu_mem_range_fn_t range;
    unsigned long long base = 0;
    size_t size = 0;
    int rc;

    if (error != cudaSuccess) {
        util_reason(reason, "cudaPointerGetAttributes: %s", cudaGetErrorName(error));
        (void)cudaGetLastError(); /* not sticky: the next call must not see it */
        return STRATA_ERR_UNSUPPORTED;
    }
    if (attr.type == cudaMemoryTypeManaged) {
        util_reason(reason, "%p is managed memory (cudaMallocManaged), which migrates "
                    "between host and GPU", ptr);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (attr.type != cudaMemoryTypeDevice) {
        *device_p = -1;
        return STRATA_OK;
    }
    *(void **)&range = cuda_driver_fn("cuMemGetAddressRange");
    rc = range != NULL ? range(&base, &size, (unsigned long long)(uintptr_t)ptr) : -1;
    if (rc != 0) {
        util_reason(reason, "the CUDA driver gives no allocation for %p (CUresult %d)", ptr, rc);
        return STRATA_ERR_UNSUPPORTED;
    }
    *device_p = attr.device;
    *base_p   = (uintptr_t)base;
    *size_p   = size;
    return STRATA_OK;
}
#define GPU_MEM_LOCATE cuda_mem_locate

#define GPU_THREAD_CHOSE_DEVICE cuda_thread_chose_device

#define GPU_NAME                      "cuda"
#define GPU_OPS                       cuda_device_ops
#define GPU_MOE_LAUNCH                cuda_moe_launch
#define GPU_TIMER_TICKS_PER_US        1000 /* %globaltimer counts nanoseconds */
#define GPU_MEMORY                    INTRA_MEMORY_CUDA
#define GPU_HOST_REGISTER_FLAGS       (cudaHostRegisterMapped | cudaHostRegisterPortable)
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
#define gpuHostRegister               cudaHostRegister
#define gpuHostUnregister             cudaHostUnregister
#define gpuHostGetDevicePointer       cudaHostGetDevicePointer
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
