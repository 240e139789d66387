/*
 * The engine's pools: requests, their operations and the copies sends take of the caller's
 * message, sized at creation so that submitting allocates nothing. Any thread takes from
 * lock-free free lists (util_freelist); the proxy gives back as it frees requests.
 */
#include "inter_internal.h"

#include <stdlib.h>
#include <string.h>

/* Send copies: one per request, within this many bytes, yet no fewer than a rail's send
 * buffers (INTER_TX_SLOTS), which they feed. */
#define INTER_COPY_POOL_MAX_BYTES (16u << 20)

_Static_assert(offsetof(inter_request_t, status) > offsetof(inter_request_t, released) &&
                   offsetof(inter_request_t, status) > offsetof(inter_request_t, done) &&
                   offsetof(inter_request_t, status) > offsetof(inter_request_t, cancelled),
               "a request's atomics come before the fields inter_request_take clears");

/* The most operations a write or read to one peer is cut into: one chunk on one rail. */
static uint32_t inter_ops_per_write(const inter_engine_t *engine)
{
    return engine->num_rails > 1 ? engine->params.stripe_max_chunks : 1;
}

strata_status_t inter_pools_create(inter_engine_t *engine)
{
    inter_pools_t *pools = &engine->pools;
    uint64_t requests = engine->params.max_requests;
    uint64_t ops = requests * inter_ops_per_write(engine) + (uint64_t)engine->params.world_size;
    uint64_t copies = UTIL_MIN(requests, UTIL_MAX((uint64_t)INTER_TX_SLOTS,
                                                  INTER_COPY_POOL_MAX_BYTES /
                                                      engine->params.msg_size));

    /* Every request in flight may be a write cut into the most chunks, and a barrier over
     * every rank still finds its operations. */
    if (ops > UTIL_FREELIST_MAX) {
        UTIL_LOG_ERROR("engine: %llu requests of up to %u operations are too many to pool; "
                       "lower STRATA_INTER_REQUESTS or STRATA_INTER_STRIPE_MAX_CHUNKS",
                       (unsigned long long)requests, inter_ops_per_write(engine));
        return STRATA_ERR_INVALID;
    }
    pools->copy_size = UTIL_ALIGN_UP(engine->params.msg_size, 64);
    pools->requests  = calloc(requests, sizeof(*pools->requests));
    pools->ops       = calloc(ops, sizeof(*pools->ops));
    pools->copies    = util_alloc_aligned(64, copies * pools->copy_size);
    if (pools->requests == NULL || pools->ops == NULL || pools->copies == NULL ||
        util_freelist_init(&pools->free_requests, (uint32_t)requests) != STRATA_OK ||
        util_freelist_init(&pools->free_ops, (uint32_t)ops) != STRATA_OK ||
        util_freelist_init(&pools->free_copies, (uint32_t)copies) != STRATA_OK) {
        UTIL_LOG_ERROR("engine: no memory for pools of %llu requests, %llu operations and "
                       "%llu send copies of %zu bytes", (unsigned long long)requests,
                       (unsigned long long)ops, (unsigned long long)copies, pools->copy_size);
        return STRATA_ERR_NO_MEMORY;
    }
    for (uint64_t i = 0; i < requests; ++i) {
        atomic_init(&pools->requests[i].done, 0);
        atomic_init(&pools->requests[i].cancelled, false);
        atomic_init(&pools->requests[i].released, false);
    }
    /* A sweep walks every request the proxy holds: worth it once an eighth can go. */
    pools->sweep_batch = UTIL_MAX(requests / 8, 1);
    pools->swept       = 0;
    atomic_init(&pools->reclaimable, 0);
    atomic_init(&pools->starved, false);
    UTIL_LOG_DEBUG("engine: pools of %llu requests, %llu operations and %llu send copies of "
                   "%zu bytes", (unsigned long long)requests, (unsigned long long)ops,
                   (unsigned long long)copies, pools->copy_size);
    return STRATA_OK;
}

void inter_pools_destroy(inter_engine_t *engine)
{
    inter_pools_t *pools = &engine->pools;

    util_freelist_cleanup(&pools->free_requests);
    util_freelist_cleanup(&pools->free_ops);
    util_freelist_cleanup(&pools->free_copies);
    for (uint32_t i = 0; pools->requests != NULL && i < engine->params.max_requests; ++i) {
        free(pools->requests[i].extents); /* list writes never given back */
    }
    free(pools->requests);
    free(pools->ops);
    free(pools->copies);
    memset(pools, 0, sizeof(*pools));
}

/* A pool ran out: give back what was taken, and have the proxy sweep at once. */
static strata_status_t inter_pools_empty(inter_engine_t *engine, inter_request_t *req)
{
    inter_request_destroy(req);
    /* A hint the proxy reads on its next round; the free lists carry the ordering. */
    atomic_store_explicit(&engine->pools.starved, true, memory_order_relaxed);
    return STRATA_ERR_BUSY;
}

strata_status_t inter_request_take(inter_engine_t *engine, inter_req_type_t type,
                                   uint32_t num_ops, inter_request_t **req_p)
{
    inter_pools_t *pools = &engine->pools;
    inter_request_t *req;
    inter_op_t **link;
    uint32_t slot;

    if (num_ops > pools->free_ops.capacity) {
        UTIL_LOG_ERROR("engine: a request of %u operations, more than the %u the engine "
                       "holds (STRATA_INTER_REQUESTS sizes them): cut it into smaller ones",
                       num_ops, pools->free_ops.capacity);
        return STRATA_ERR_INVALID;
    }
    if (!util_freelist_pop(&pools->free_requests, &slot)) {
        return inter_pools_empty(engine, NULL);
    }
    req = &pools->requests[slot];
    /* Its last holder may still read the atomics (inter_request_free): no plain stores. */
    atomic_store_explicit(&req->done, 0, memory_order_relaxed);
    atomic_store_explicit(&req->cancelled, false, memory_order_relaxed);
    atomic_store_explicit(&req->released, false, memory_order_relaxed);
    memset(&req->status, 0, sizeof(*req) - offsetof(inter_request_t, status));
    req->engine = engine;
    req->type   = type;
    req->peer   = -1;
    req->source = -1;
    for (link = &req->ops; req->num_ops < num_ops; link = &(*link)->sibling) {
        if (!util_freelist_pop(&pools->free_ops, &slot)) {
            return inter_pools_empty(engine, req);
        }
        *link = &pools->ops[slot];
        memset(*link, 0, sizeof(**link));
        req->num_ops++;
    }
    if (type == INTER_REQ_SEND) {
        if (!util_freelist_pop(&pools->free_copies, &slot)) {
            return inter_pools_empty(engine, req);
        }
        req->buf = pools->copies + (size_t)slot * pools->copy_size;
    }
    *req_p = req;
    return STRATA_OK;
}

strata_status_t inter_request_take_wait(inter_engine_t *engine, inter_req_type_t type,
                                        uint32_t num_ops, uint64_t deadline,
                                        inter_request_t **req_p)
{
    strata_status_t status;
    uint64_t spins = 0;
    unsigned seq;

    for (;;) {
        seq    = atomic_load_explicit(&engine->wake_seq, memory_order_acquire);
        status = inter_request_take(engine, type, num_ops, req_p);
        if (status != STRATA_ERR_BUSY || util_clock_now_ns() > deadline) {
            return status;
        }
        inter_engine_idle(engine, &spins, seq); /* until requests complete and are swept */
    }
}

void inter_request_destroy(inter_request_t *req)
{
    inter_pools_t *pools;
    inter_op_t *op, *next;

    if (req == NULL) {
        return;
    }
    pools = &req->engine->pools;
    op    = req->ops;
    for (uint32_t i = 0; i < req->num_ops; ++i, op = next) {
        next = op->sibling; /* read first: once given back, another thread may take it */
        util_freelist_push(&pools->free_ops, (uint32_t)(op - pools->ops));
    }
    free(req->extents); /* a list write's */
    req->extents = NULL;
    if (req->type == INTER_REQ_SEND && req->buf != NULL) {
        util_freelist_push(&pools->free_copies,
                           (uint32_t)(((char *)req->buf - pools->copies) / pools->copy_size));
    }
    util_freelist_push(&pools->free_requests, (uint32_t)(req - pools->requests));
}

void inter_pools_reclaimable(inter_engine_t *engine, bool soon)
{
    atomic_fetch_add_explicit(&engine->pools.reclaimable, 1, memory_order_relaxed);
    if (soon) {
        atomic_store_explicit(&engine->pools.starved, true, memory_order_relaxed);
    }
}

bool inter_pools_sweep_due(const inter_engine_t *engine)
{
    const inter_pools_t *pools = &engine->pools;
    uint64_t ready = atomic_load_explicit(&pools->reclaimable, memory_order_relaxed) -
                     pools->swept;

    return ready >= pools->sweep_batch ||
           (ready > 0 && atomic_load_explicit(&pools->starved, memory_order_relaxed));
}

void inter_pools_sweeping(inter_engine_t *engine)
{
    inter_pools_t *pools = &engine->pools;

    pools->swept = atomic_load_explicit(&pools->reclaimable, memory_order_relaxed);
    atomic_store_explicit(&pools->starved, false, memory_order_relaxed);
}
