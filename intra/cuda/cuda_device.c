/*
 * CUDA device backend: cudaMalloc'd memory, copies and fills on the default stream.
 * CUDA errors are translated into strata statuses with the CUDA name in the log line.
 */
#include "cuda_device.h"
#include "util/util.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

static strata_status_t cuda_status(cudaError_t error, const char *what)
{
    switch (error) {
    case cudaSuccess:
        return STRATA_OK;
    case cudaErrorMemoryAllocation:
        UTIL_LOG_ERROR("cuda device: %s: %s", what, cudaGetErrorName(error));
        return STRATA_ERR_NO_MEMORY;
    case cudaErrorInvalidValue:
        UTIL_LOG_ERROR("cuda device: %s: %s", what, cudaGetErrorName(error));
        return STRATA_ERR_INVALID;
    default:
        UTIL_LOG_ERROR("cuda device: %s: %s (%s)", what, cudaGetErrorName(error),
                       cudaGetErrorString(error));
        return STRATA_ERR_UNSUPPORTED;
    }
}

static strata_status_t cuda_probe(char *reason)
{
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);

    if (error != cudaSuccess) {
        snprintf(reason, INTRA_REASON_LEN, "%s", cudaGetErrorName(error));
        return STRATA_ERR_UNSUPPORTED;
    }
    if (count == 0) {
        snprintf(reason, INTRA_REASON_LEN, "no CUDA device");
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

static strata_status_t cuda_mem_alloc(size_t size, void **ptr_p)
{
    void *ptr = NULL;
    strata_status_t status;

    if (size == 0 || ptr_p == NULL) {
        UTIL_LOG_ERROR("cuda device: cannot allocate %zu bytes", size);
        return STRATA_ERR_INVALID;
    }
    /* cudaMalloc aligns to at least 256 bytes, INTRA_DEVICE_ALIGNMENT. */
    status = cuda_status(cudaMalloc(&ptr, size), "cudaMalloc");
    if (status == STRATA_OK) {
        *ptr_p = ptr;
    }
    return status;
}

static void cuda_mem_free(void *ptr)
{
    if (ptr != NULL) {
        cuda_status(cudaFree(ptr), "cudaFree");
    }
}

static strata_status_t cuda_mem_copy(void *dst, const void *src, size_t size)
{
    if (size > 0 && (dst == NULL || src == NULL)) {
        return STRATA_ERR_INVALID;
    }
    return cuda_status(cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault, 0), "cudaMemcpyAsync");
}

static strata_status_t cuda_mem_set(void *dst, int value, size_t size)
{
    if (size > 0 && dst == NULL) {
        return STRATA_ERR_INVALID;
    }
    return cuda_status(cudaMemsetAsync(dst, value, size, 0), "cudaMemsetAsync");
}

static strata_status_t cuda_synchronize(void)
{
    return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

const intra_device_ops_t cuda_device_ops = {
    .name        = "cuda",
    .probe       = cuda_probe,
    .mem_alloc   = cuda_mem_alloc,
    .mem_free    = cuda_mem_free,
    .mem_copy    = cuda_mem_copy,
    .mem_set     = cuda_mem_set,
    .synchronize = cuda_synchronize,
};
