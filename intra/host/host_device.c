/*
 * Host device backend: aligned host allocations, synchronous copies, memfd regions for the
 * symmetric heap, and queues that run each kernel block on a worker thread.
 */
#include "host_device.h"
#include "util/util.h"
#include "util/util_numa.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static strata_status_t host_probe(char *reason)
{
    (void)reason;
    return STRATA_OK; /* every machine has host memory and threads */
}

static strata_status_t host_mem_alloc(size_t size, void **ptr_p)
{
    void *ptr;

    if (size == 0 || ptr_p == NULL) {
        UTIL_LOG_ERROR("host device: cannot allocate %zu bytes", size);
        return STRATA_ERR_INVALID;
    }
    if (posix_memalign(&ptr, INTRA_DEVICE_ALIGNMENT, size) != 0) {
        UTIL_LOG_ERROR("host device: out of memory allocating %zu bytes", size);
        return STRATA_ERR_NO_MEMORY;
    }
    *ptr_p = ptr;
    return STRATA_OK;
}

/* As cudaFree, after the device's work: a copy still queued on a stream may write here. */
static void host_mem_free(void *ptr)
{
    if (ptr != NULL) {
        host_streams_free(ptr);
    }
}

static strata_status_t host_mem_copy(void *dst, const void *src, size_t size)
{
    if (size > 0 && (dst == NULL || src == NULL)) {
        return STRATA_ERR_INVALID;
    }
    if (size > 0) {
        memmove(dst, src, size);
    }
    return STRATA_OK;
}

static strata_status_t host_mem_set(void *dst, int value, size_t size)
{
    if (size > 0 && dst == NULL) {
        return STRATA_ERR_INVALID;
    }
    if (size > 0) {
        memset(dst, value, size);
    }
    return STRATA_OK;
}

static strata_status_t host_synchronize(void)
{
    /* the copies and sets above complete before they return; the streams' work may not */
    return host_streams_synchronize();
}

static strata_status_t host_current_device(int *device_p)
{
    *device_p = 0;
    return STRATA_OK;
}

/* The host backend drives no GPU. */
static strata_status_t host_device_count(int *count_p)
{
    *count_p = 0;
    return STRATA_OK;
}

/* "Device" memory is host memory: the same allocation on both sides. */
static strata_status_t host_host_alloc(size_t size, int numa_node, void **host_p,
                                       void **device_p)
{
    void *ptr = size > 0 ? util_numa_alloc(size, numa_node) : NULL;

    if (ptr == NULL) {
        UTIL_LOG_ERROR("host device: cannot allocate %zu bytes of host memory", size);
        return size > 0 ? STRATA_ERR_NO_MEMORY : STRATA_ERR_INVALID;
    }
    *host_p = *device_p = ptr;
    return STRATA_OK;
}

static void host_host_free(void *host)
{
    util_numa_free(host);
}

/* A memfd leaves nothing in the file system, whatever way the process ends. */
static strata_status_t host_region_create(size_t size, intra_region_t *region_p)
{
    intra_region_t region = {.size = size, .fd = memfd_create("strata-heap", MFD_CLOEXEC)};

    if (region.fd < 0 || ftruncate(region.fd, (off_t)size) != 0) {
        UTIL_LOG_ERROR("host device: cannot create a %zu-byte shared region: %s", size,
                       strerror(errno));
        goto err_close;
    }
    region.base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd, 0);
    if (region.base == MAP_FAILED) {
        UTIL_LOG_ERROR("host device: cannot map a %zu-byte shared region: %s", size,
                       strerror(errno));
        goto err_close;
    }
    *region_p = region;
    return STRATA_OK;

err_close:
    if (region.fd >= 0) {
        close(region.fd);
    }
    return STRATA_ERR_NO_MEMORY;
}

static strata_status_t host_region_open(const intra_region_t *peer, void **base_p)
{
    void *base;

    if (peer->fd < 0) {
        UTIL_LOG_ERROR("host device: a peer's region came without its memfd");
        return STRATA_ERR_INVALID;
    }
    base = mmap(NULL, peer->size, PROT_READ | PROT_WRITE, MAP_SHARED, peer->fd, 0);
    if (base == MAP_FAILED) {
        UTIL_LOG_ERROR("host device: cannot map a peer's %zu-byte region: %s", peer->size,
                       strerror(errno));
        return STRATA_ERR_NO_MEMORY;
    }
    *base_p = base;
    return STRATA_OK;
}

static void host_region_close(void *base, size_t size)
{
    if (base != NULL) {
        munmap(base, size);
    }
}

static void host_region_destroy(intra_region_t *region)
{
    if (region->base != NULL) {
        munmap(region->base, region->size);
        region->base = NULL;
    }
    if (region->fd >= 0) {
        close(region->fd);
        region->fd = -1;
    }
}

const intra_device_ops_t host_device_ops = {
    .name               = "host",
    .memory             = INTRA_MEMORY_HOST,
    .probe              = host_probe,
    .mem_alloc          = host_mem_alloc,
    .mem_free           = host_mem_free,
    .mem_copy           = host_mem_copy,
    .mem_set            = host_mem_set,
    .synchronize        = host_synchronize,
    .current_device     = host_current_device,
    .device_count       = host_device_count,
    .host_alloc         = host_host_alloc,
    .host_free          = host_host_free,
    .region_create      = host_region_create,
    .region_open        = host_region_open,
    .region_close       = host_region_close,
    .region_destroy     = host_region_destroy,
    .stream_create      = host_stream_create,
    .stream_destroy     = host_stream_destroy,
    .stream_synchronize = host_stream_synchronize,
    .stream_capturing   = host_stream_capturing,
    .queue_create       = host_queue_create,
    .queue_destroy      = host_queue_destroy,
    .queue_set_stream   = host_queue_set_stream,
    .queue_write        = host_queue_write,
    .queue_read         = host_queue_read,
    .queue_fill         = host_queue_fill,
    .queue_capturing    = host_queue_capturing,
    .moe_launch         = host_moe_launch,
    .queue_synchronize  = host_queue_synchronize,
    .default_blocks     = 0, /* the rank's share of its cores (intra_moe_create) */
    .timer_ticks_per_us = 1000, /* CLOCK_MONOTONIC nanoseconds */
};
