/*
 * The engine's side of rate control: an estimator per peer (inter_rate.c) that the proxy
 * feeds as it posts and completes operations, the figures it publishes after each change,
 * and inter_engine_peer_rate, which reads them from any thread.
 */
#include "inter_internal.h"

#include <stdlib.h>
#include <string.h>

strata_status_t inter_pace_create(inter_engine_t *engine)
{
    engine->pace = calloc((size_t)engine->params.world_size, sizeof(*engine->pace));
    if (engine->pace == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int p = 0; p < engine->params.world_size; ++p) {
        inter_pace_reset(engine, p);
    }
    return STRATA_OK;
}

void inter_pace_destroy(inter_engine_t *engine)
{
    free(engine->pace);
    engine->pace = NULL;
}

/* Bytes an operation moves between this rank and its peer, as rate control counts them. */
static uint64_t inter_op_bytes(const inter_op_t *op)
{
    return op->kind == INTER_OP_SEND ? sizeof(inter_msg_header_t) + op->len : op->len;
}

/* After the proxy changed peer's estimator. */
static void inter_pace_publish(inter_engine_t *engine, int peer)
{
    inter_peer_pace_t *pace = &engine->pace[peer];
    uint64_t bits;

    memcpy(&bits, &pace->rate.rate_Bps, sizeof(bits));
    /* Relaxed: each figure stands alone, and nothing else is published through them. */
    atomic_store_explicit(&pace->rate_bits, bits, memory_order_relaxed);
    atomic_store_explicit(&pace->rtt_ns, pace->rate.min_rtt_ns, memory_order_relaxed);
    atomic_store_explicit(&pace->window, pace->rate.window, memory_order_relaxed);
    atomic_store_explicit(&pace->in_flight, pace->rate.in_flight, memory_order_relaxed);
    atomic_store_explicit(&pace->paced, pace->rate.paced, memory_order_relaxed);
}

/* The floor is one chunk per rail of the pair: however low the estimate, a striped write
 * keeps every rail busy, and any operation goes once nothing else is in flight. Before
 * connect the pair's rails are not known: this rank's. */
void inter_pace_reset(inter_engine_t *engine, int peer)
{
    inter_stripe_params_t stripe;
    inter_rate_params_t params;

    inter_engine_stripe(engine, peer, &stripe);
    if (stripe.num_rails == 0) {
        stripe.num_rails = (uint32_t)engine->num_rails;
    }
    params = (inter_rate_params_t){
        .pace        = engine->params.rate_control,
        .floor_bytes = UTIL_MAX(stripe.num_rails, 1u) * inter_engine_chunk_bytes(engine),
    };
    inter_rate_init(&engine->pace[peer].rate, &params);
    inter_pace_publish(engine, peer);
}

bool inter_pace_admits(const inter_engine_t *engine, int peer, uint64_t bytes_ahead)
{
    return inter_rate_admits(&engine->pace[peer].rate, bytes_ahead);
}

void inter_pace_hold(inter_engine_t *engine, inter_op_t *op)
{
    if (!op->paced) {
        op->paced = true;
        inter_rate_held(&engine->pace[op->peer].rate);
        inter_pace_publish(engine, op->peer);
    }
}

void inter_pace_posted(inter_engine_t *engine, inter_op_t *op, bool more_queued, uint64_t now)
{
    inter_rate_posted(&engine->pace[op->peer].rate, inter_op_bytes(op), now, more_queued,
                      &op->stamp);
    inter_pace_publish(engine, op->peer);
}

void inter_pace_completed(inter_engine_t *engine, const inter_op_t *op, strata_status_t status,
                          uint64_t now)
{
    inter_rate_completed(&engine->pace[op->peer].rate, inter_op_bytes(op), &op->stamp,
                         status == STRATA_OK, now);
    inter_pace_publish(engine, op->peer);
}

strata_status_t inter_engine_peer_rate(inter_engine_t *engine, int peer, inter_peer_rate_t *rate_p)
{
    const inter_peer_pace_t *pace;
    uint64_t bits;
    double rate;

    if (engine == NULL || rate_p == NULL || peer < 0 || peer >= engine->params.world_size) {
        UTIL_LOG_ERROR("engine: rate of peer %d asked (ranks are 0..%d)%s", peer,
                       engine ? engine->params.world_size - 1 : -1,
                       rate_p == NULL ? ", with nowhere to put it" : "");
        return STRATA_ERR_INVALID;
    }
    pace = &engine->pace[peer];
    bits = atomic_load_explicit(&pace->rate_bits, memory_order_relaxed);
    memcpy(&rate, &bits, sizeof(rate));
    *rate_p = (inter_peer_rate_t){
        .rate_Bps        = rate,
        .rtt_ns          = atomic_load_explicit(&pace->rtt_ns, memory_order_relaxed),
        .window_bytes    = atomic_load_explicit(&pace->window, memory_order_relaxed),
        .in_flight_bytes = atomic_load_explicit(&pace->in_flight, memory_order_relaxed),
        .paced           = atomic_load_explicit(&pace->paced, memory_order_relaxed),
    };
    return STRATA_OK;
}
