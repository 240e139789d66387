/*
 * The body of a GPU device backend, written once for the CUDA and HIP runtimes, whose APIs
 * match name for name. The including file maps the gpu* names below onto cuda* or hip*,
 * names its ops table (GPU_OPS), its kernel launcher (GPU_MOE_LAUNCH, in the .cu/.hip file)
 * and its timer rate, then includes this file once.
 */
#ifndef GPU_OPS
#error "define the gpu* runtime names and GPU_OPS before including gpu_device.h"
#endif

#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct intra_queue {
    gpuStream_t own;    /* created with the queue */
    gpuStream_t stream; /* where launches go: own, or the caller's */
    unsigned    num_blocks;
};

/* Launch one MoE kernel on a stream: the .cu/.hip file of the backend. */
gpuError_t GPU_MOE_LAUNCH(gpuStream_t stream, int kernel, const struct intra_moe_args *args,
                          unsigned num_blocks);
/* Blocks of the kernels the current GPU holds at once; fails where the library carries no
 * code for it. The .cu/.hip file of the backend. */
gpuError_t GPU_MOE_RESIDENT_BLOCKS(unsigned *blocks_p);

static strata_status_t gpu_status(gpuError_t error, const char *what)
{
    switch (error) {
    case gpuSuccess:
        return STRATA_OK;
    case gpuErrorMemoryAllocation:
        UTIL_LOG_ERROR("%s device: %s: %s", GPU_NAME, what, gpuGetErrorName(error));
        return STRATA_ERR_NO_MEMORY;
    case gpuErrorInvalidValue:
        UTIL_LOG_ERROR("%s device: %s: %s", GPU_NAME, what, gpuGetErrorName(error));
        return STRATA_ERR_INVALID;
    default:
        UTIL_LOG_ERROR("%s device: %s: %s (%s)", GPU_NAME, what, gpuGetErrorName(error),
                       gpuGetErrorString(error));
        return STRATA_ERR_UNSUPPORTED;
    }
}

static strata_status_t gpu_probe(char *reason)
{
    int count = 0;
    gpuError_t error = gpuGetDeviceCount(&count);

    if (error != gpuSuccess) {
        util_reason(reason, "%s", gpuGetErrorName(error));
        return STRATA_ERR_UNSUPPORTED;
    }
    if (count == 0) {
        util_reason(reason, "no %s device", GPU_NAME);
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

static strata_status_t gpu_mem_alloc(size_t size, void **ptr_p)
{
    void *ptr = NULL;
    strata_status_t status;

    if (size == 0 || ptr_p == NULL) {
        UTIL_LOG_ERROR("%s device: cannot allocate %zu bytes", GPU_NAME, size);
        return STRATA_ERR_INVALID;
    }
    /* The runtimes' allocators align to at least 256 bytes, INTRA_DEVICE_ALIGNMENT. */
    status = gpu_status(gpuMalloc(&ptr, size), "malloc");
    if (status == STRATA_OK) {
        *ptr_p = ptr;
    }
    return status;
}

static void gpu_mem_free(void *ptr)
{
    if (ptr != NULL) {
        gpu_status(gpuFree(ptr), "free");
    }
}

/*
 * Complete on return, in both directions: a copy from pageable host memory may return
 * before its DMA lands, and a memset of device memory runs asynchronously, both on the
 * legacy stream, which does not order work on a caller's non-blocking stream. So each
 * waits for the legacy stream before it returns; kernels launched afterwards on any
 * stream see the result.
 */
static strata_status_t gpu_mem_copy(void *dst, const void *src, size_t size)
{
    strata_status_t status;

    if (size > 0 && (dst == NULL || src == NULL)) {
        return STRATA_ERR_INVALID;
    }
    if (size == 0) {
        return STRATA_OK;
    }
    status = gpu_status(gpuMemcpy(dst, src, size, gpuMemcpyDefault), "memcpy");
    return status == STRATA_OK ? gpu_status(gpuStreamSynchronize(0), "memcpy wait") : status;
}

static strata_status_t gpu_mem_set(void *dst, int value, size_t size)
{
    strata_status_t status;

    if (size > 0 && dst == NULL) {
        return STRATA_ERR_INVALID;
    }
    if (size == 0) {
        return STRATA_OK;
    }
    status = gpu_status(gpuMemset(dst, value, size), "memset");
    return status == STRATA_OK ? gpu_status(gpuStreamSynchronize(0), "memset wait") : status;
}

static strata_status_t gpu_synchronize(void)
{
    return gpu_status(gpuDeviceSynchronize(), "device synchronize");
}

static strata_status_t gpu_current_device(int *device_p)
{
    return gpu_status(gpuGetDevice(device_p), "get device");
}

static strata_status_t gpu_device_count(int *count_p)
{
    return gpu_status(gpuGetDeviceCount(count_p), "device count");
}

/* The GPU's name and architecture, for messages. */
static void gpu_describe(int ordinal, char *text, size_t len)
{
    gpuDeviceProp_t prop;

    if (gpuGetDeviceProperties(&prop, ordinal) != gpuSuccess) {
        snprintf(text, len, "GPU %d", ordinal);
        return;
    }
    snprintf(text, len, "GPU %d (%.40s, " GPU_ARCH_FORMAT ")", ordinal, prop.name,
             GPU_ARCH_ARGS(prop));
}

/* A GPU the kernels were not built for would fail its first launch on every rank, after
 * the peers had started waiting: refuse it here, naming what the library carries. */
static strata_status_t gpu_device_select(int ordinal, char *reason)
{
    char what[96];
    unsigned blocks;
    gpuError_t error = gpuSetDevice(ordinal);

    if (error != gpuSuccess) {
        util_reason(reason, "cannot select GPU %d: %s", ordinal,
                    gpuGetErrorName(error));
        return STRATA_ERR_UNSUPPORTED;
    }
    error = GPU_MOE_RESIDENT_BLOCKS(&blocks);
    if (error != gpuSuccess) {
        gpu_describe(ordinal, what, sizeof(what));
        util_reason(reason, "%s: no kernels for it in this library (built for "
                    "%s): %s", what, STRATA_GPU_TARGETS, gpuGetErrorName(error));
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

static strata_status_t gpu_device_bus_id(char *bus_id)
{
    int device;
    strata_status_t status = gpu_current_device(&device);

    if (status != STRATA_OK) {
        return status;
    }
    return gpu_status(gpuDeviceGetPCIBusId(bus_id, INTRA_BUS_ID_LEN, device), "PCI bus id");
}

/* Push claims slots with system-scope atomics in a peer GPU's memory: over PCIe alone those
 * are not atomic. A peer GPU this process cannot see is taken on trust, with a warning. */
static strata_status_t gpu_peer_atomics(const char *peer_bus_id, char *reason)
{
    int mine, peer, access = 0, atomics = 0;
    strata_status_t status = gpu_current_device(&mine);

    if (status != STRATA_OK) {
        util_reason(reason, "no current GPU");
        return status;
    }
    if (gpuDeviceGetByPCIBusId(&peer, peer_bus_id) != gpuSuccess) {
        UTIL_LOG_WARN("%s device: GPU %s is not visible to this process: its peer atomics with "
                      "GPU %d are not checked", GPU_NAME, peer_bus_id, mine);
        return STRATA_OK;
    }
    if (peer == mine) {
        return STRATA_OK;
    }
    if (gpuDeviceGetP2PAttribute(&access, gpuDevP2PAttrAccessSupported, mine, peer) !=
            gpuSuccess ||
        gpuDeviceGetP2PAttribute(&atomics, gpuDevP2PAttrNativeAtomicSupported, mine, peer) !=
            gpuSuccess || !access || !atomics) {
        util_reason(reason, "GPU %d cannot %s GPU %d (%s)", mine,
                    access ? "use native atomics on the memory of" : "access", peer, peer_bus_id);
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

static strata_status_t gpu_resident_blocks(unsigned *blocks_p)
{
    return gpu_status(GPU_MOE_RESIDENT_BLOCKS(blocks_p), "kernel occupancy");
}

/* Pinned host memory mapped into the device's address space: rings and statuses that the
 * host and the kernels both touch. */
static strata_status_t gpu_host_alloc(size_t size, void **host_p, void **device_p)
{
    void *host = NULL, *device = NULL;
    strata_status_t status;

    if (size == 0) {
        return STRATA_ERR_INVALID;
    }
    status = gpu_status(gpuHostAlloc(&host, size, GPU_HOST_ALLOC_FLAGS), "mapped host alloc");
    if (status != STRATA_OK) {
        return status;
    }
    status = gpu_status(gpuHostGetDevicePointer(&device, host, 0), "device address of host "
                        "memory");
    if (status != STRATA_OK) {
        gpu_status(gpuFreeHost(host), "free host");
        return status;
    }
    memset(host, 0, size);
    *host_p   = host;
    *device_p = device;
    return STRATA_OK;
}

static void gpu_host_free(void *host)
{
    if (host != NULL) {
        gpu_status(gpuFreeHost(host), "free host");
    }
}

#ifdef GPU_FLUSH_REMOTE_WRITES
/* The proxy thread's call: the device first, since the thread may not have chosen one. */
static void gpu_flush_remote_writes(int device)
{
    if (gpuSetDevice(device) == gpuSuccess) {
        gpu_status(GPU_FLUSH_REMOTE_WRITES(), "flush of GPUDirect RDMA writes");
    }
}
#endif

/* A region peers open through an IPC handle; zeroed, as the heap promises. Peer GPUs read
 * its flags and counters while kernels run, so it is memory coherent between GPUs at any
 * time (GPU_REGION_MALLOC: fine-grained on HIP, where plain hipMalloc memory is coherent
 * only at kernel boundaries). */
static strata_status_t gpu_region_create(size_t size, intra_region_t *region_p)
{
    intra_region_t region = {.size = size, .fd = -1};
    gpuIpcMemHandle_t handle;
    strata_status_t status;

    _Static_assert(sizeof(handle) <= INTRA_REGION_HANDLE_LEN, "IPC handle too large");
    status = gpu_status(GPU_REGION_MALLOC(&region.base, size), "region malloc");
    if (status != STRATA_OK) {
        return status;
    }
    status = gpu_status(gpuMemset(region.base, 0, size), "memset");
    if (status == STRATA_OK) {
        status = gpu_status(gpuIpcGetMemHandle(&handle, region.base), "IPC handle");
    }
    if (status == STRATA_OK) {
        status = gpu_synchronize();
    }
    if (status != STRATA_OK) {
        gpu_mem_free(region.base);
        return status;
    }
    memcpy(region.handle, &handle, sizeof(handle));
    *region_p = region;
    return STRATA_OK;
}

static strata_status_t gpu_region_open(const intra_region_t *peer, void **base_p)
{
    gpuIpcMemHandle_t handle;
    void *base = NULL;
    strata_status_t status;

    memcpy(&handle, peer->handle, sizeof(handle));
    status = gpu_status(gpuIpcOpenMemHandle(&base, handle, gpuIpcMemLazyEnablePeerAccess),
                        "open IPC handle");
    if (status == STRATA_OK) {
        *base_p = base;
    }
    return status;
}

static void gpu_region_close(void *base, size_t size)
{
    (void)size;
    if (base != NULL) {
        gpu_status(gpuIpcCloseMemHandle(base), "close IPC handle");
    }
}

static void gpu_region_destroy(intra_region_t *region)
{
    gpu_mem_free(region->base);
    region->base = NULL;
}

static strata_status_t gpu_queue_create(unsigned num_blocks, intra_queue_t **queue_p)
{
    intra_queue_t *queue;
    strata_status_t status;

    if (num_blocks == 0 || num_blocks > 1024) {
        UTIL_LOG_ERROR("%s device: a queue needs 1 to 1024 blocks, not %u", GPU_NAME, num_blocks);
        return STRATA_ERR_INVALID;
    }
    queue = calloc(1, sizeof(*queue));
    if (queue == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    queue->num_blocks = num_blocks;
    status = gpu_status(gpuStreamCreate(&queue->own), "stream create");
    if (status != STRATA_OK) {
        free(queue);
        return status;
    }
    queue->stream = queue->own;
    *queue_p = queue;
    return STRATA_OK;
}

static void gpu_queue_destroy(intra_queue_t *queue)
{
    if (queue != NULL) {
        gpu_status(gpuStreamDestroy(queue->own), "stream destroy");
        free(queue);
    }
}

static strata_status_t gpu_queue_set_stream(intra_queue_t *queue, void *stream)
{
    queue->stream = stream != NULL ? (gpuStream_t)stream : queue->own;
    return STRATA_OK;
}

static strata_status_t gpu_moe_launch(intra_queue_t *queue, intra_moe_kernel_t kernel,
                                      const struct intra_moe_args *args)
{
    unsigned blocks = intra_moe_kernel_one_block(kernel) ? 1 : queue->num_blocks;

    return gpu_status(GPU_MOE_LAUNCH(queue->stream, (int)kernel, args, blocks),
                      "MoE kernel launch");
}

static strata_status_t gpu_queue_synchronize(intra_queue_t *queue)
{
    return gpu_status(gpuStreamSynchronize(queue->stream), "stream synchronize");
}

const intra_device_ops_t GPU_OPS = {
    .name               = GPU_NAME,
    .memory             = GPU_MEMORY,
    .probe              = gpu_probe,
    .mem_alloc          = gpu_mem_alloc,
    .mem_free           = gpu_mem_free,
    .mem_copy           = gpu_mem_copy,
    .mem_set            = gpu_mem_set,
    .synchronize        = gpu_synchronize,
    .current_device     = gpu_current_device,
    .device_count       = gpu_device_count,
    .device_select      = gpu_device_select,
    .device_bus_id      = gpu_device_bus_id,
    .peer_atomics       = gpu_peer_atomics,
    .resident_blocks    = gpu_resident_blocks,
    .host_alloc         = gpu_host_alloc,
    .host_free          = gpu_host_free,
#ifdef GPU_FLUSH_REMOTE_WRITES
    .flush_remote_writes = gpu_flush_remote_writes,
#endif
    .region_create      = gpu_region_create,
    .region_open        = gpu_region_open,
    .region_close       = gpu_region_close,
    .region_destroy     = gpu_region_destroy,
    .queue_create       = gpu_queue_create,
    .queue_destroy      = gpu_queue_destroy,
    .queue_set_stream   = gpu_queue_set_stream,
    .moe_launch         = gpu_moe_launch,
    .queue_synchronize  = gpu_queue_synchronize,
    .default_blocks     = 32,
    .timer_ticks_per_us = GPU_TIMER_TICKS_PER_US,
};
