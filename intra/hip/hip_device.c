/*
 * HIP device backend: the GPU backend body (intra/gpu/gpu_device.h) over the HIP runtime.
 * Heap regions are hipMalloc'd and shared by hipIpc handles; kernels are hip_kernels.hip.
 */
#include "hip_device.h"

#include "util/util_reason.h"

#include <hip/hip_runtime_api.h>

#include <dlfcn.h>
#include <stdint.h>

#define GPU_NAME                      "hip"
#define GPU_OPS                       hip_device_ops
#define GPU_MOE_LAUNCH                hip_moe_launch
#define GPU_TIMER_TICKS_PER_US        100  /* s_memrealtime runs at 100 MHz on gfx9 and later */
#define GPU_MEMORY                    INTRA_MEMORY_HIP
#define GPU_HOST_REGISTER_FLAGS       (hipHostRegisterMapped | hipHostRegisterPortable)
#define gpuError_t                    hipError_t
#define gpuSuccess                    hipSuccess
#define gpuErrorMemoryAllocation      hipErrorMemoryAllocation
#define gpuErrorInvalidValue          hipErrorInvalidValue
#define gpuGetErrorName               hipGetErrorName
#define gpuGetErrorString             hipGetErrorString
#define gpuGetDeviceCount             hipGetDeviceCount
#define gpuMalloc                     hipMalloc
#define gpuFree                       hipFree
#define gpuMemcpyDefault              hipMemcpyDefault
#define gpuDeviceSynchronize          hipDeviceSynchronize
#define gpuIpcMemHandle_t             hipIpcMemHandle_t
#define gpuIpcGetMemHandle            hipIpcGetMemHandle
#define gpuIpcOpenMemHandle           hipIpcOpenMemHandle
#define gpuIpcCloseMemHandle          hipIpcCloseMemHandle
#define gpuIpcMemLazyEnablePeerAccess hipIpcMemLazyEnablePeerAccess
#define gpuGetDevice                  hipGetDevice
#define gpuSetDevice                  hipSetDevice
#define gpuHostRegister               hipHostRegister
#define gpuHostUnregister             hipHostUnregister
#define gpuHostGetDevicePointer       hipHostGetDevicePointer
#define gpuStream_t                   hipStream_t
#define gpuStreamCreateWithFlags      hipStreamCreateWithFlags
#define gpuStreamNonBlocking          hipStreamNonBlocking
#define gpuStreamIsCapturing          hipStreamIsCapturing
#define gpuStreamCaptureStatus        hipStreamCaptureStatus
#define gpuStreamCaptureStatusNone    hipStreamCaptureStatusNone
#define gpuStreamWaitEvent            hipStreamWaitEvent
#define gpuEvent_t                    hipEvent_t
#define gpuEventCreateWithFlags       hipEventCreateWithFlags
#define gpuEventDisableTiming         hipEventDisableTiming
#define gpuEventRecord                hipEventRecord
#define gpuEventSynchronize           hipEventSynchronize
#define gpuEventDestroy               hipEventDestroy
#define gpuMemcpyAsync                hipMemcpyAsync
#define gpuMemsetAsync                hipMemsetAsync
#define gpuMemcpyHostToDevice         hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost         hipMemcpyDeviceToHost
#define gpuStreamDestroy              hipStreamDestroy
#define gpuStreamSynchronize          hipStreamSynchronize

/* The GPU a stream belongs to (ROCm 6 on; older runtimes leave it unchecked). */
#if HIP_VERSION >= 60000000
#define GPU_STREAM_DEVICE(stream, device_p) hipStreamGetDevice(stream, device_p)
#endif

/*
 * Device memory as a dma-buf, for NICs whose driver registers it without amdkfd's peer
 * memory: ROCm's hsa_amd_portable_export_dmabuf (ROCm 5.7 on), looked up in the HSA runtime
 * HIP has loaded, so that this builds against older ROCm and runs where it exists.
 */
typedef int (*hsa_export_dmabuf_fn_t)(const void *ptr, size_t size, int *fd_p,
                                      uint64_t *offset_p);

static strata_status_t hip_mem_export_dmabuf(void *ptr, size_t size, int *fd_p,
                                             uint64_t *offset_p, char *reason)
{
    void *hsa = dlopen("libhsa-runtime64.so.1", RTLD_LAZY | RTLD_NOLOAD);
    hsa_export_dmabuf_fn_t export_fn = NULL;
    uint64_t offset = 0;
    int fd = -1, rc;

    if (hsa != NULL) {
        *(void **)&export_fn = dlsym(hsa, "hsa_amd_portable_export_dmabuf");
    }
    if (export_fn == NULL) {
        util_reason(reason, "the ROCm runtime exports no dma-buf (hsa_amd_portable_export_dmabuf "
                    "needs ROCm 5.7 or newer)");
        if (hsa != NULL) {
            dlclose(hsa);
        }
        return STRATA_ERR_UNSUPPORTED;
    }
    rc = export_fn(ptr, size, &fd, &offset);
    dlclose(hsa); /* RTLD_NOLOAD: HIP's own reference keeps it loaded */
    if (rc != 0 || fd < 0) {
        util_reason(reason, "the ROCm runtime refused a dma-buf of %zu bytes at %p (hsa status "
                    "%#x; a kernel with dma-buf support is needed)", size, ptr, (unsigned)rc);
        return STRATA_ERR_UNSUPPORTED;
    }
    *fd_p     = fd;
    *offset_p = offset;
    return STRATA_OK;
}
#define GPU_MEM_EXPORT_DMABUF hip_mem_export_dmabuf

/*
 * Where ptr is: device memory by the runtime's pointer attributes (their type field is
 * memoryType before ROCm 6), its allocation by hipMemGetAddressRange. Runtimes before
 * ROCm 6 answer hipErrorInvalidValue for memory they do not know: host memory.
 */
static strata_status_t hip_mem_locate(const void *ptr, int *device_p, uintptr_t *base_p,
                                      size_t *size_p, char *reason)
{
    hipPointerAttribute_t attr;
    hipError_t error = hipPointerGetAttributes(&attr, ptr);
    hipDeviceptr_t base = NULL;
    size_t size = 0;

    if (error == hipErrorInvalidValue) {
        (void)hipGetLastError(); /* not sticky: the next call must not see it */
        *device_p = -1;
        return STRATA_OK;
    }
    if (error != hipSuccess) {
        util_reason(reason, "hipPointerGetAttributes: %s", hipGetErrorName(error));
        (void)hipGetLastError();
        return STRATA_ERR_UNSUPPORTED;
    }
    if (attr.isManaged) {
        util_reason(reason, "%p is managed memory (hipMallocManaged), which migrates between "
                    "host and GPU", ptr);
        return STRATA_ERR_UNSUPPORTED;
    }
#if HIP_VERSION >= 60000000
    if (attr.type != hipMemoryTypeDevice) {
#else
    if (attr.memoryType != hipMemoryTypeDevice) {
#endif
        *device_p = -1;
        return STRATA_OK;
    }
    error = hipMemGetAddressRange(&base, &size, (hipDeviceptr_t)(uintptr_t)ptr);
    if (error != hipSuccess) {
        util_reason(reason, "hipMemGetAddressRange(%p): %s", ptr, hipGetErrorName(error));
        (void)hipGetLastError();
        return STRATA_ERR_UNSUPPORTED;
    }
    *device_p = attr.device;
    *base_p   = (uintptr_t)base;
    *size_p   = size;
    return STRATA_OK;
}
#define GPU_MEM_LOCATE hip_mem_locate

/* Fine-grained: coherent between GPUs while kernels run (see gpu_region_create). */
#define GPU_REGION_MALLOC(ptr_p, size) hipExtMallocWithFlags(ptr_p, size, hipDeviceMallocFinegrained)
#define GPU_MOE_RESIDENT_BLOCKS       hip_moe_resident_blocks
#define GPU_ARCH_FORMAT               "%.24s"
#define GPU_ARCH_ARGS(prop)           (prop).gcnArchName
#define gpuDeviceProp_t               hipDeviceProp_t
#define gpuGetDeviceProperties        hipGetDeviceProperties
#define gpuDeviceGetPCIBusId          hipDeviceGetPCIBusId
#define gpuDeviceGetByPCIBusId        hipDeviceGetByPCIBusId
#define gpuDeviceGetP2PAttribute      hipDeviceGetP2PAttribute
#define gpuDevP2PAttrAccessSupported  hipDevP2PAttrAccessSupported
#define gpuDevP2PAttrNativeAtomicSupported hipDevP2PAttrNativeAtomicSupported

#include "intra/gpu/gpu_device.h"
