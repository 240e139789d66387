/*
 * The public MoE object: the communicator's view of the ranks handed to the scheduler,
 * which runs every step. Arguments are checked here, before any rank takes part.
 */
#include "api/api.h"
#include "api_comm.h"
#include "api_gpu.h"
#include "adaptive/adapt_moe.h"
#include "scheduler/sched.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The object's GPU current for an entry's GPU calls; the caller's again at api_gpu_leave. */
static void api_moe_enter(const strata_moe_t *moe, api_gpu_scope_t *scope)
{
    api_gpu_enter(moe->comm->device, moe->comm->gpu_ordinal, scope);
}

/*
 * The body of an entry that takes the object: NULL refused, naming the entry; the call made
 * with the object's GPU current, and the caller's restored after it.
 */
#define API_MOE_CALL(moe, call) \
    do { \
        api_gpu_scope_t scope_; \
        strata_status_t status_; \
        if ((moe) == NULL) { \
            UTIL_LOG_ERROR("%s: NULL object", __func__); \
            return STRATA_ERR_INVALID; \
        } \
        api_moe_enter((moe), &scope_); \
        status_ = (call); \
        api_gpu_leave(&scope_); \
        return status_; \
    } while (0)

/* What each rank gives to the object's first collective. */
typedef struct api_moe_hello {
    uint64_t      pid;   /* with the clock and a count: the object's key, from rank 0's */
    uint64_t      clock;
    uint64_t      count; /* objects its process made before */
    unsigned char heap_secret[INTRA_HEAP_SECRET_LEN]; /* drawn by each node's local rank 0 */
} api_moe_hello_t;

/*
 * The object's key, unique per object and the same on every rank: rank 0's process, clock
 * and count of the objects it made (rank 0's: a process that joined the job later, or one
 * left out of a split, has made fewer than the others). And its node's heap secret, drawn by
 * local rank 0 and taken from it by the node's other ranks in the same collective.
 */
static strata_status_t api_moe_job_key(strata_comm_t *comm, char *key, size_t size,
                                       unsigned char secret[INTRA_HEAP_SECRET_LEN])
{
    static atomic_uint created;
    api_moe_hello_t mine = {.pid = (uint64_t)getpid(), .clock = util_clock_now_ns(),
                            .count = atomic_fetch_add(&created, 1u)}, *all;
    int node = comm->rank_node[comm->rank];
    strata_status_t status = STRATA_OK;

    all = calloc((size_t)comm->size, sizeof(*all));
    if (all == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    if (comm->rank_local[comm->rank] == 0) {
        status = util_random_bytes(mine.heap_secret, sizeof(mine.heap_secret));
    }
    if (status == STRATA_OK) {
        status = api_comm_allgather(comm, &mine, all, sizeof(mine));
    }
    if (status == STRATA_OK) {
        snprintf(key, size, "strata-moe-%llu-%llx-%llu", (unsigned long long)all[0].pid,
                 (unsigned long long)all[0].clock, (unsigned long long)all[0].count);
        for (int r = 0; r < comm->size; ++r) {
            if (comm->rank_node[r] == node && comm->rank_local[r] == 0) {
                memcpy(secret, all[r].heap_secret, INTRA_HEAP_SECRET_LEN);
            }
        }
    }
    util_crypto_wipe(&mine, sizeof(mine));
    util_crypto_wipe(all, (size_t)comm->size * sizeof(*all));
    free(all);
    return status;
}

/* Each rank a node of its own, for an object whose communicator's nodes hold unequal
 * numbers of ranks: [0] rank_node, [1] rank_local. */
static strata_status_t api_moe_ranks_apart(const strata_comm_t *comm, int *layout[2])
{
    layout[0] = malloc(sizeof(int) * (size_t)comm->size);
    layout[1] = calloc((size_t)comm->size, sizeof(int));
    if (layout[0] == NULL || layout[1] == NULL) {
        free(layout[0]);
        free(layout[1]);
        return STRATA_ERR_NO_MEMORY;
    }
    for (int r = 0; r < comm->size; ++r) {
        layout[0][r] = r;
    }
    return STRATA_OK;
}

strata_status_t api_moe_create(strata_comm_t *comm, const strata_moe_params_t *params,
                               bool ranks_apart, unsigned number, strata_moe_t **moe_p)
{
    unsigned char heap_secret[INTRA_HEAP_SECRET_LEN];
    char key[96];
    unsigned slots;
    sched_moe_world_t world;
    api_gpu_scope_t scope;
    strata_status_t status;
    strata_moe_t *moe;
    int *apart[2] = {NULL, NULL};

    if (comm == NULL || params == NULL || moe_p == NULL) {
        UTIL_LOG_ERROR("strata_moe_create: NULL communicator, parameters or result");
        return STRATA_ERR_INVALID;
    }
    status = api_moe_job_key(comm, key, sizeof(key), heap_secret);
    if (status == STRATA_OK && ranks_apart) {
        status = api_moe_ranks_apart(comm, apart);
    }
    if (status != STRATA_OK) {
        util_crypto_wipe(heap_secret, sizeof(heap_secret));
        return status;
    }
    /* Each object counts its own range of immediates, taken in turn by its number: the
     * same on every rank (api_moe_number). */
    slots = (INTER_IMM_MAX - comm->moe_imm_base) / sched_moe_imm_count(comm->size);
    world = (sched_moe_world_t){
        .imm_base        = comm->moe_imm_base + (slots > 0 ? number % slots : 0) *
                                                    sched_moe_imm_count(comm->size),
        .rank            = comm->rank,
        .world_size      = comm->size,
        .num_nodes       = ranks_apart ? comm->size : comm->num_nodes,
        .rank_node       = ranks_apart ? apart[0] : comm->rank_node,
        .rank_local      = ranks_apart ? apart[1] : comm->rank_local,
        .engine          = comm->engine,
        .engine_ranks    = comm->engine_ranks,
        .device          = comm->device,
        .job_key         = key,
        .heap_secret     = heap_secret,
        .peer_timeout_ns = inter_engine_peer_timeout_ns(comm->engine),
        .allgather       = api_comm_allgather_fn, /* gives up once a rank has failed */
        .allgather_ctx   = comm,
    };
    moe = calloc(1, sizeof(*moe));
    if (moe == NULL) {
        util_crypto_wipe(heap_secret, sizeof(heap_secret));
        free(apart[0]);
        free(apart[1]);
        return STRATA_ERR_NO_MEMORY;
    }
    moe->comm = comm;
    api_moe_enter(moe, &scope);
    status = sched_moe_create(params, &world, &moe->sched); /* copies the layout */
    util_crypto_wipe(heap_secret, sizeof(heap_secret));
    free(apart[0]);
    free(apart[1]);
    if (status == STRATA_OK) {
        /* A mode or policy file can be missing on one node only. */
        status = api_comm_agree(comm, adapt_moe_start(moe->sched, params->num_experts),
                                "strata_moe_create");
    }
    if (status != STRATA_OK) {
        sched_moe_destroy(moe->sched);
    }
    api_gpu_leave(&scope);
    if (status != STRATA_OK) {
        free(moe);
        return status;
    }
    api_comm_hold(comm);
    *moe_p = moe;
    return STRATA_OK;
}

unsigned api_moe_number(strata_comm_t *comm)
{
    return comm != NULL ? comm->moe_created++ : 0;
}

STRATA_API strata_status_t strata_moe_create(strata_comm_t *comm, const strata_moe_params_t *params,
                                             strata_moe_t **moe_p)
{
    return api_moe_create(comm, params, false, api_moe_number(comm), moe_p);
}

STRATA_API void strata_moe_destroy(strata_moe_t *moe)
{
    api_gpu_scope_t scope;

    if (moe == NULL) {
        return;
    }
    api_moe_enter(moe, &scope);
    sched_moe_destroy(moe->sched);
    api_gpu_leave(&scope);
    api_comm_release(moe->comm); /* the last one out tears a destroyed communicator down */
    free(moe);
}

STRATA_API strata_status_t strata_moe_layout_create(strata_moe_t *moe, const int64_t *topk_idx,
                                                    int num_tokens,
                                                    strata_moe_layout_t **layout_p)
{
    api_gpu_scope_t scope;
    strata_status_t status;

    if (moe == NULL || layout_p == NULL) {
        UTIL_LOG_ERROR("strata_moe_layout_create: NULL object or result");
        return STRATA_ERR_INVALID;
    }
    api_moe_enter(moe, &scope);
    status = sched_plan_create(moe->sched, topk_idx, num_tokens, false, layout_p);
    api_gpu_leave(&scope);
    return status;
}

STRATA_API void strata_moe_layout_destroy(strata_moe_layout_t *layout)
{
    sched_plan_destroy(layout);
}

STRATA_API strata_status_t strata_moe_set_pull_mask(strata_moe_t *moe,
                                                    const uint64_t *dispatch_mask,
                                                    const uint64_t *combine_mask)
{
    if (moe == NULL) {
        UTIL_LOG_ERROR("strata_moe_set_pull_mask: NULL object");
        return STRATA_ERR_INVALID;
    }
    return sched_moe_set_pull_mask(moe->sched, dispatch_mask, combine_mask);
}

STRATA_API strata_status_t strata_moe_dispatch_send(strata_moe_t *moe,
                                                    const strata_moe_layout_t *layout,
                                                    const void *x, const float *x_scales)
{
    API_MOE_CALL(moe, sched_moe_dispatch_send(moe->sched, layout, x, x_scales));
}

STRATA_API strata_status_t strata_moe_dispatch_recv(strata_moe_t *moe, strata_moe_recv_t *recv_p)
{
    API_MOE_CALL(moe, sched_moe_dispatch_recv(moe->sched, recv_p));
}

STRATA_API strata_status_t strata_moe_dispatch_recv_into(strata_moe_t *moe, void *x,
                                                        float *x_scales,
                                                        strata_moe_source_t *src,
                                                        int64_t rows)
{
    API_MOE_CALL(moe, sched_moe_dispatch_recv_into(moe->sched, x, x_scales, src, rows));
}

/* Both halves of a dispatch with a layout made for this call. */
static strata_status_t api_moe_dispatch(strata_moe_t *moe, const void *x, const float *x_scales,
                                        const int64_t *topk_idx, int num_tokens,
                                        strata_moe_recv_t *recv_p)
{
    const strata_moe_layout_t *layout = NULL;
    strata_status_t status, sent;

    /* Bad ids are skipped, not refused: the other ranks are already in the step. A count
     * out of range leaves no layout: dispatch_send then takes part without tokens. */
    status = sched_plan_refill(moe->sched, topk_idx, num_tokens, &layout);
    if (status != STRATA_OK && !(status == STRATA_ERR_INVALID && sched_moe_idle(moe->sched))) {
        return status;
    }
    sent = sched_moe_dispatch_send(moe->sched, layout, x, x_scales);
    if (!sched_moe_dispatch_pending(moe->sched)) {
        return sent; /* out of order, or the step failed: nothing to receive */
    }
    status = sched_moe_dispatch_recv(moe->sched, recv_p);
    return status == STRATA_OK || status == STRATA_ERR_INVALID ? sent == STRATA_OK ? status : sent
                                                                : status;
}

STRATA_API strata_status_t strata_moe_dispatch(strata_moe_t *moe, const void *x,
                                               const float *x_scales, const int64_t *topk_idx,
                                               int num_tokens, strata_moe_recv_t *recv_p)
{
    api_gpu_scope_t scope;
    strata_status_t status;

    if (moe == NULL || recv_p == NULL) {
        UTIL_LOG_ERROR("strata_moe_dispatch: NULL object or result");
        return STRATA_ERR_INVALID;
    }
    api_moe_enter(moe, &scope);
    status = api_moe_dispatch(moe, x, x_scales, topk_idx, num_tokens, recv_p);
    api_gpu_leave(&scope);
    return status;
}

STRATA_API strata_status_t strata_moe_combine_send(strata_moe_t *moe, const void *expert_y)
{
    API_MOE_CALL(moe, sched_moe_combine_send(moe->sched, expert_y));
}

STRATA_API strata_status_t strata_moe_combine_recv(strata_moe_t *moe, const float *topk_weights,
                                                   void *out)
{
    API_MOE_CALL(moe, sched_moe_combine_recv(moe->sched, topk_weights, out));
}

STRATA_API strata_status_t strata_moe_combine(strata_moe_t *moe, const void *expert_y,
                                              const float *topk_weights, void *out)
{
    strata_status_t status = strata_moe_combine_send(moe, expert_y);

    return status == STRATA_OK ? strata_moe_combine_recv(moe, topk_weights, out) : status;
}

STRATA_API strata_status_t strata_moe_abort_step(strata_moe_t *moe)
{
    API_MOE_CALL(moe, sched_moe_abort_step(moe->sched));
}

STRATA_API strata_status_t strata_moe_expert_wait(strata_moe_t *moe, int local_expert,
                                                  int64_t timeout_ns, int32_t *rows_p)
{
    /* the wait reads mapped host memory; after a failure it waits for the kernels */
    API_MOE_CALL(moe, sched_moe_expert_wait(moe->sched, local_expert, timeout_ns, rows_p));
}

STRATA_API strata_status_t strata_moe_expert_wait_stream(strata_moe_t *moe, int local_expert,
                                                         void *stream)
{
    API_MOE_CALL(moe, sched_moe_expert_wait_stream(moe->sched, local_expert, stream));
}

STRATA_API strata_status_t strata_moe_dispatch_counts(strata_moe_t *moe, int64_t timeout_ns,
                                                      int32_t *counts)
{
    API_MOE_CALL(moe, sched_moe_dispatch_counts(moe->sched, timeout_ns, counts));
}

STRATA_API strata_status_t strata_moe_set_stream(strata_moe_t *moe, void *stream)
{
    API_MOE_CALL(moe, sched_moe_set_stream(moe->sched, stream));
}

STRATA_API strata_status_t strata_moe_synchronize(strata_moe_t *moe)
{
    API_MOE_CALL(moe, sched_moe_synchronize(moe->sched));
}

STRATA_API strata_status_t strata_moe_memory_estimate(const strata_moe_params_t *params,
                                                      int world_size, int num_nodes,
                                                      strata_moe_memory_t *memory_p)
{
    return sched_moe_estimate(params, world_size, num_nodes, memory_p);
}

STRATA_API strata_status_t strata_moe_load_capacity(const strata_moe_params_t *params,
                                                    int world_size, double factor,
                                                    int *capacity_p)
{
    return sched_load_capacity(params, world_size, factor, capacity_p);
}

STRATA_API strata_status_t strata_moe_get_stats(const strata_moe_t *moe,
                                                strata_moe_stats_t *stats_p)
{
    if (moe == NULL || stats_p == NULL) {
        UTIL_LOG_ERROR("strata_moe_get_stats: NULL object or result");
        return STRATA_ERR_INVALID;
    }
    sched_moe_stats(moe->sched, stats_p);
    return STRATA_OK;
}
