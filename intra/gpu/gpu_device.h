/*
 * The body of a GPU device backend, written once for the CUDA and HIP runtimes, whose APIs
 * match name for name. The including file maps the gpu* names below onto cuda* or hip*,
 * names its ops table (GPU_OPS), its kernel launcher (GPU_MOE_LAUNCH, in the .cu/.hip file),
 * its pointer query (GPU_MEM_LOCATE) and its timer rate, then includes this file once.
 */
#ifndef GPU_OPS
#error "define the gpu* runtime names and GPU_OPS before including gpu_device.h"
#endif
#ifndef GPU_MEM_LOCATE
#error "define GPU_MEM_LOCATE (where a pointer is: intra_device_ops_t.mem_locate)"
#endif

#include "util/util.h"
#include "util/util_numa.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Uploads (queue_write) copy from pinned staging memory, so that they are asynchronous and
 * their source may change once queue_write returns. The staging area has two halves used in
 * turn: entering a half waits for the copies that last read it, enqueued a whole half ago,
 * which have long run in practice. An upload larger than a half grows both.
 */
typedef struct gpu_staging {
    char      *half[2];
    size_t     half_size;
    size_t     used;         /* of the current half */
    int        current;
    gpuEvent_t done[2];      /* recorded after the last copy from each half */
    bool       recorded[2];
} gpu_staging_t;

#define GPU_STAGING_HALF (256 * 1024)

struct intra_queue {
    gpuStream_t   own;    /* created with the queue, non-blocking */
    gpuStream_t   stream; /* where launches go: own, or the caller's */
    gpuEvent_t    order;  /* the old stream's work, which a new stream waits for */
    int           device; /* the GPU the queue was made on */
    unsigned      num_blocks;
    gpu_staging_t staging;
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
 * The backend's own copies (made at creation and by tools, off the step path) run on a
 * non-blocking stream of its own per GPU, never the legacy stream, which would wait for a
 * framework's work there (and it for them); each is waited for, so it is complete on return
 * and kernels launched afterwards on any stream see it.
 */
#define GPU_MAX_DEVICES 64

static pthread_mutex_t gpu_copy_lock = PTHREAD_MUTEX_INITIALIZER;
static gpuStream_t     gpu_copy_streams[GPU_MAX_DEVICES];

static strata_status_t gpu_copy_stream(gpuStream_t *stream_p)
{
    int device = 0;
    strata_status_t status = gpu_status(gpuGetDevice(&device), "get device");

    if (status != STRATA_OK) {
        return status;
    }
    if (device < 0 || device >= GPU_MAX_DEVICES) {
        UTIL_LOG_ERROR("%s device: GPU %d is past the %d this backend serves", GPU_NAME, device,
                       GPU_MAX_DEVICES);
        return STRATA_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(&gpu_copy_lock);
    if (gpu_copy_streams[device] == NULL) {
        status = gpu_status(gpuStreamCreateWithFlags(&gpu_copy_streams[device],
                                                     gpuStreamNonBlocking), "stream create");
    }
    *stream_p = gpu_copy_streams[device];
    pthread_mutex_unlock(&gpu_copy_lock);
    return status;
}

static strata_status_t gpu_mem_copy(void *dst, const void *src, size_t size)
{
    gpuStream_t stream;
    strata_status_t status;

    if (size > 0 && (dst == NULL || src == NULL)) {
        return STRATA_ERR_INVALID;
    }
    if (size == 0) {
        return STRATA_OK;
    }
    status = gpu_copy_stream(&stream);
    if (status == STRATA_OK) {
        status = gpu_status(gpuMemcpyAsync(dst, src, size, gpuMemcpyDefault, stream), "memcpy");
    }
    return status == STRATA_OK ? gpu_status(gpuStreamSynchronize(stream), "memcpy wait")
                               : status;
}

static strata_status_t gpu_mem_set(void *dst, int value, size_t size)
{
    gpuStream_t stream;
    strata_status_t status;

    if (size > 0 && dst == NULL) {
        return STRATA_ERR_INVALID;
    }
    if (size == 0) {
        return STRATA_OK;
    }
    status = gpu_copy_stream(&stream);
    if (status == STRATA_OK) {
        status = gpu_status(gpuMemsetAsync(dst, value, size, stream), "memset");
    }
    return status == STRATA_OK ? gpu_status(gpuStreamSynchronize(stream), "memset wait")
                               : status;
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

static strata_status_t gpu_device_chosen(int *ordinal_p, bool *chosen_p)
{
    *chosen_p = false;
#ifdef GPU_THREAD_CHOSE_DEVICE
    if (GPU_THREAD_CHOSE_DEVICE()) {
        strata_status_t status = gpu_current_device(ordinal_p);

        *chosen_p = status == STRATA_OK;
        return status;
    }
#else
    (void)ordinal_p;
#endif
    return STRATA_OK;
}

/* A thread that chose no GPU (no context current on CUDA) gets -1 as previous: setting
 * "its" device back would open a context on a GPU it never used. */
static strata_status_t gpu_device_use(int ordinal, int *previous_p)
{
    int previous = -1;
    strata_status_t status = STRATA_OK;

#ifdef GPU_THREAD_CHOSE_DEVICE
    if (GPU_THREAD_CHOSE_DEVICE()) {
        status = gpu_current_device(&previous);
    }
#else
    status = gpu_current_device(&previous);
#endif
    if (status == STRATA_OK && previous != ordinal) {
        status = gpu_status(gpuSetDevice(ordinal), "set device");
    }
    if (status == STRATA_OK) {
        *previous_p = previous;
    }
    return status;
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
 * host and the kernels both touch. Its pages are placed (on numa_node where asked) before
 * they are pinned: pinned pages never move. */
static strata_status_t gpu_host_alloc(size_t size, int numa_node, void **host_p,
                                      void **device_p)
{
    void *host, *device = NULL;
    strata_status_t status;

    if (size == 0) {
        return STRATA_ERR_INVALID;
    }
    if ((host = util_numa_alloc(size, numa_node)) == NULL) {
        UTIL_LOG_ERROR("%s: no host memory for %zu bytes", GPU_NAME, size);
        return STRATA_ERR_NO_MEMORY;
    }
    status = gpu_status(gpuHostRegister(host, size, GPU_HOST_REGISTER_FLAGS),
                        "pinning host memory");
    if (status != STRATA_OK) {
        util_numa_free(host);
        return status;
    }
    status = gpu_status(gpuHostGetDevicePointer(&device, host, 0), "device address of host "
                        "memory");
    if (status != STRATA_OK) {
        gpu_status(gpuHostUnregister(host), "unpin host memory");
        util_numa_free(host);
        return status;
    }
    *host_p   = host;
    *device_p = device;
    return STRATA_OK;
}

static void gpu_host_free(void *host)
{
    if (host != NULL) {
        gpu_status(gpuHostUnregister(host), "unpin host memory");
        util_numa_free(host);
    }
}

/* NIC writes into this GPU's memory, visible before its kernels hear of them: ordered by the
 * GPU for its own kernels, or flushed (GPU_REMOTE_WRITES_ORDERED and _FLUSHED, in the
 * backend's file). A backend with neither cannot promise it. */
static strata_status_t gpu_remote_writes_visible(char *reason)
{
    int device = 0;
    strata_status_t status = gpu_current_device(&device);

    if (status != STRATA_OK) {
        util_reason(reason, "no current GPU");
        return status;
    }
#if defined(GPU_REMOTE_WRITES_ORDERED) && defined(GPU_REMOTE_WRITES_FLUSHED)
    if (GPU_REMOTE_WRITES_ORDERED(device) || GPU_REMOTE_WRITES_FLUSHED(device)) {
        return STRATA_OK;
    }
    util_reason(reason, "%s GPU %d neither orders GPUDirect RDMA writes for its kernels nor "
                "can flush them", GPU_NAME, device);
#else
    util_reason(reason, "the %s backend has no flush of its own for GPUDirect RDMA writes "
                "into GPU %d", GPU_NAME, device);
#endif
    return STRATA_ERR_UNSUPPORTED;
}

#ifdef GPU_FLUSH_REMOTE_WRITES
/* Called by whichever thread progresses the engine (its proxy, or a waiting caller's
 * thread): on the heap's GPU, and the thread's own GPU given back after. */
static void gpu_flush_remote_writes(int device)
{
    int previous = -1;

    if (gpu_device_use(device, &previous) != STRATA_OK) {
        return;
    }
    gpu_status(GPU_FLUSH_REMOTE_WRITES(), "flush of GPUDirect RDMA writes");
    if (previous >= 0 && previous != device) {
        gpu_status(gpuSetDevice(previous), "give the thread's GPU back");
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
    status = gpu_mem_set(region.base, 0, size); /* complete before a peer opens it */
    if (status == STRATA_OK) {
        status = gpu_status(gpuIpcGetMemHandle(&handle, region.base), "IPC handle");
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

/* Queues and streams: the staging of uploads, launches, capture. */
#include "intra/gpu/gpu_queue.h"

const intra_device_ops_t GPU_OPS = {
    .name               = GPU_NAME,
    .memory             = GPU_MEMORY,
    .probe              = gpu_probe,
    .mem_alloc          = gpu_mem_alloc,
    .mem_free           = gpu_mem_free,
#ifdef GPU_MEM_EXPORT_DMABUF
    .mem_export_dmabuf  = GPU_MEM_EXPORT_DMABUF,
#endif
    .mem_locate         = GPU_MEM_LOCATE,
    .mem_copy           = gpu_mem_copy,
    .mem_set            = gpu_mem_set,
    .synchronize        = gpu_synchronize,
    .current_device     = gpu_current_device,
    .device_count       = gpu_device_count,
    .device_select      = gpu_device_select,
    .device_chosen      = gpu_device_chosen,
    .device_use         = gpu_device_use,
    .device_bus_id      = gpu_device_bus_id,
    .peer_atomics       = gpu_peer_atomics,
    .resident_blocks    = gpu_resident_blocks,
    .host_alloc         = gpu_host_alloc,
    .host_free          = gpu_host_free,
#ifdef GPU_FLUSH_REMOTE_WRITES
    .flush_remote_writes = gpu_flush_remote_writes,
#endif
    .remote_writes_visible = gpu_remote_writes_visible,
    .region_create      = gpu_region_create,
    .region_open        = gpu_region_open,
    .region_close       = gpu_region_close,
    .region_destroy     = gpu_region_destroy,
    .stream_create      = gpu_stream_create,
    .stream_destroy     = gpu_stream_destroy,
    .stream_synchronize = gpu_stream_synchronize,
    .stream_capturing   = gpu_stream_capturing,
    .queue_create       = gpu_queue_create,
    .queue_destroy      = gpu_queue_destroy,
    .queue_set_stream   = gpu_queue_set_stream,
    .queue_write        = gpu_queue_write,
    .queue_read         = gpu_queue_read,
    .queue_fill         = gpu_queue_fill,
    .queue_capturing    = gpu_queue_capturing,
    .moe_launch         = gpu_moe_launch,
    .queue_synchronize  = gpu_queue_synchronize,
    .default_blocks     = 32,
    .timer_ticks_per_us = GPU_TIMER_TICKS_PER_US,
};
