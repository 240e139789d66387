/*
 * Point-to-point API: the transfer engine behind the communicator. Public handles are the
 * engine's objects under opaque names; descriptors are the engine's, in public-sized bytes.
 */
#include "api/api.h"
#include "api_comm.h"
#include "api_gpu.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(inter_rdesc_t) <= STRATA_MEM_DESC_SIZE,
               "strata_mem_desc_t must hold the engine's remote descriptor");

static inter_mr_t *api_mr(const strata_mem_t *mem)
{
    return (inter_mr_t *)(uintptr_t)mem;
}

static inter_request_t *api_req(const strata_request_t *req)
{
    return (inter_request_t *)(uintptr_t)req;
}

static const inter_rdesc_t *api_rdesc(const strata_mem_desc_t *desc, inter_rdesc_t *copy)
{
    if (desc == NULL) {
        return NULL;
    }
    memcpy(copy, desc->bytes, sizeof(*copy)); /* the bytes may sit anywhere the peer put them */
    return copy;
}

/* The public entry points' own argument check: one log line naming the call. */
static bool api_args_ok(const char *call, const void *comm, const void *out)
{
    if (comm == NULL || out == NULL) {
        UTIL_LOG_ERROR("%s: NULL %s", call, comm == NULL ? "communicator" : "output argument");
        return false;
    }
    return true;
}

static uint64_t api_ms_to_ns(uint64_t ms)
{
    return (ms > UINT64_MAX / UTIL_NSEC_PER_MSEC) ? UINT64_MAX / 2 : ms * UTIL_NSEC_PER_MSEC;
}

STRATA_API strata_status_t strata_mem_register(strata_comm_t *comm, void *addr, size_t len,
                                               strata_mem_t **mem_p)
{
    api_gpu_memory_t memory = {.kind = INTER_MEM_HOST};
    api_gpu_scope_t scope;
    inter_mr_t *mr;
    strata_status_t status;

    if (!api_args_ok("strata_mem_register", comm, mem_p)) {
        return STRATA_ERR_INVALID;
    }
    api_gpu_enter(comm->device, comm->gpu_ordinal, &scope); /* the runtime's calls, on our GPU */
    status = api_gpu_mem_place(comm->device, addr, len, "strata_mem_register", &memory);
    if (status == STRATA_OK) {
        status = inter_engine_mem_register_kind(comm->engine, addr, len, memory.kind,
                                                memory.device, &mr);
    }
    api_gpu_leave(&scope);
    if (status == STRATA_ERR_UNSUPPORTED && memory.kind != INTER_MEM_HOST) {
        UTIL_LOG_ERROR("strata_mem_register: %zu bytes of %s GPU %d memory: a rail of this "
                       "communicator cannot register device memory (its provider lacks "
                       "FI_HMEM, or neither a peer-memory module nor a dma-buf of it is "
                       "there); strata does not stage these transfers through host memory: "
                       "register a pinned host buffer and copy through it", len,
                       comm->device->name, memory.device);
    }
    if (status == STRATA_OK) {
        *mem_p = (strata_mem_t *)(void *)mr;
    }
    return status;
}

STRATA_API void strata_mem_deregister(strata_comm_t *comm, strata_mem_t *mem)
{
    if (comm != NULL) {
        inter_engine_mem_deregister(comm->engine, api_mr(mem));
    }
}

STRATA_API void strata_mem_descriptor(const strata_mem_t *mem, strata_mem_desc_t *desc_p)
{
    inter_rdesc_t rdesc;

    if (mem == NULL || desc_p == NULL) {
        UTIL_LOG_ERROR("strata_mem_descriptor: NULL %s", mem == NULL ? "memory" : "descriptor");
        return;
    }
    memset(desc_p, 0, sizeof(*desc_p));
    inter_engine_mem_descriptor(api_mr(mem), &rdesc);
    memcpy(desc_p->bytes, &rdesc, sizeof(rdesc));
}

STRATA_API strata_status_t strata_write(strata_comm_t *comm, int peer, const strata_mem_t *src,
                                        size_t src_offset, const strata_mem_desc_t *dst,
                                        size_t dst_offset, size_t len, unsigned flags,
                                        uint32_t imm, strata_request_t **req_p)
{
    inter_rdesc_t rdesc;
    inter_request_t *req;
    strata_status_t status;

    if (!api_args_ok("strata_write", comm, req_p)) {
        return STRATA_ERR_INVALID;
    }
    if ((flags & ~STRATA_WRITE_IMM) != 0) {
        UTIL_LOG_ERROR("strata_write: unknown flags 0x%x", flags);
        return STRATA_ERR_INVALID;
    }
    if (!api_engine_peer(comm, "strata_write", peer, false, &peer)) {
        return STRATA_ERR_INVALID;
    }
    status = inter_engine_write(comm->engine, peer, api_mr(src), src_offset, api_rdesc(dst, &rdesc),
                                dst_offset, len, (flags & STRATA_WRITE_IMM) != 0, imm, &req);
    if (status == STRATA_OK) {
        *req_p = (strata_request_t *)(void *)req;
    }
    return status;
}

STRATA_API strata_status_t strata_read(strata_comm_t *comm, int peer, const strata_mem_t *dst,
                                       size_t dst_offset, const strata_mem_desc_t *src,
                                       size_t src_offset, size_t len, strata_request_t **req_p)
{
    inter_rdesc_t rdesc;
    inter_request_t *req;
    strata_status_t status;

    if (!api_args_ok("strata_read", comm, req_p) ||
        !api_engine_peer(comm, "strata_read", peer, false, &peer)) {
        return STRATA_ERR_INVALID;
    }
    status = inter_engine_read(comm->engine, peer, api_mr(dst), dst_offset, api_rdesc(src, &rdesc),
                               src_offset, len, &req);
    if (status == STRATA_OK) {
        *req_p = (strata_request_t *)(void *)req;
    }
    return status;
}

STRATA_API strata_status_t strata_send(strata_comm_t *comm, int peer, const void *buf,
                                       size_t len, strata_request_t **req_p)
{
    inter_request_t *req;
    strata_status_t status;

    if (!api_args_ok("strata_send", comm, req_p) ||
        !api_engine_peer(comm, "strata_send", peer, false, &peer)) {
        return STRATA_ERR_INVALID;
    }
    status = inter_engine_send_on(comm->engine, comm->user_channel, peer, buf, len, &req);
    if (status == STRATA_OK) {
        *req_p = (strata_request_t *)(void *)req;
    }
    return status;
}

STRATA_API strata_status_t strata_recv(strata_comm_t *comm, int peer, void *buf, size_t cap,
                                       strata_request_t **req_p)
{
    inter_request_t *req;
    strata_status_t status;

    if (!api_args_ok("strata_recv", comm, req_p) ||
        !api_engine_peer(comm, "strata_recv", peer, true, &peer)) {
        return STRATA_ERR_INVALID;
    }
    status = inter_engine_recv_on(comm->engine, comm->user_channel, peer, buf, cap, &req);
    if (status == STRATA_OK) {
        inter_request_report_source(req, comm->rank_of_engine); /* NULL: the engine's own */
        *req_p = (strata_request_t *)(void *)req;
    }
    return status;
}

STRATA_API strata_status_t strata_request_test(const strata_request_t *req)
{
    return req ? inter_request_test(api_req(req)) : STRATA_ERR_INVALID;
}

STRATA_API strata_status_t strata_request_wait(const strata_request_t *req, uint64_t timeout_ms)
{
    return req ? inter_request_wait(api_req(req), api_ms_to_ns(timeout_ms)) : STRATA_ERR_INVALID;
}

STRATA_API size_t strata_request_length(const strata_request_t *req)
{
    return req ? inter_request_length(api_req(req)) : 0;
}

STRATA_API int strata_request_source(const strata_request_t *req)
{
    return req ? inter_request_source(api_req(req)) : -1;
}

STRATA_API void strata_request_cancel(strata_request_t *req)
{
    inter_request_cancel(api_req(req));
}

STRATA_API void strata_request_free(strata_request_t *req)
{
    inter_request_free(api_req(req));
}

STRATA_API uint32_t strata_write_imm_count(const strata_comm_t *comm, int peer, size_t len)
{
    int engine_peer;

    if (comm == NULL || !api_engine_peer(comm, "strata_write_imm_count", peer, false,
                                         &engine_peer)) {
        return 0;
    }
    return inter_engine_write_chunks(comm->engine, engine_peer, len);
}

STRATA_API strata_status_t strata_imm_wait(strata_comm_t *comm, uint32_t imm, uint64_t count,
                                           int from_peer, uint64_t timeout_ms)
{
    if (!api_args_ok("strata_imm_wait", comm, comm)) {
        return STRATA_ERR_INVALID;
    }
    return api_imm_wait(comm, imm, count, from_peer, api_ms_to_ns(timeout_ms));
}

STRATA_API strata_status_t strata_barrier(strata_comm_t *comm, uint64_t timeout_ms)
{
    if (!api_args_ok("strata_barrier", comm, comm)) {
        return STRATA_ERR_INVALID;
    }
    return inter_engine_barrier(comm->engine, comm->all_ranks, comm->size,
                                api_ms_to_ns(timeout_ms));
}
