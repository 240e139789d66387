/*
 * Streams of the communicator's device backend, for callers without one of their own, made
 * on the rank's GPU.
 */
#include "api/api.h"
#include "api_comm.h"
#include "api_gpu.h"

STRATA_API strata_status_t strata_comm_stream_create(strata_comm_t *comm, void **stream_p)
{
    api_gpu_scope_t scope;
    strata_status_t status;

    if (comm == NULL || stream_p == NULL) {
        UTIL_LOG_ERROR("strata_comm_stream_create: NULL communicator or result");
        return STRATA_ERR_INVALID;
    }
    api_gpu_enter(comm->device, comm->gpu_ordinal, &scope);
    status = comm->device->stream_create(stream_p);
    api_gpu_leave(&scope);
    return status;
}

STRATA_API void strata_comm_stream_destroy(strata_comm_t *comm, void *stream)
{
    api_gpu_scope_t scope;

    if (comm == NULL || stream == NULL) {
        return;
    }
    api_gpu_enter(comm->device, comm->gpu_ordinal, &scope);
    comm->device->stream_destroy(stream);
    api_gpu_leave(&scope);
}

STRATA_API strata_status_t strata_comm_stream_synchronize(strata_comm_t *comm, void *stream)
{
    api_gpu_scope_t scope;
    strata_status_t status;

    if (comm == NULL || stream == NULL) {
        UTIL_LOG_ERROR("strata_comm_stream_synchronize: NULL communicator or stream");
        return STRATA_ERR_INVALID;
    }
    api_gpu_enter(comm->device, comm->gpu_ordinal, &scope);
    status = comm->device->stream_synchronize(stream);
    api_gpu_leave(&scope);
    return status;
}
