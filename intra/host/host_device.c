/*
 * Host device backend: aligned host allocations and synchronous copies.
 */
#include "host_device.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

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

static void host_mem_free(void *ptr)
{
    free(ptr);
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
    return STRATA_OK; /* every host operation completes before it returns */
}

const intra_device_ops_t host_device_ops = {
    .name        = "host",
    .probe       = host_probe,
    .mem_alloc   = host_mem_alloc,
    .mem_free    = host_mem_free,
    .mem_copy    = host_mem_copy,
    .mem_set     = host_mem_set,
    .synchronize = host_synchronize,
};
