/*
 * List writes: many extents to one peer in one request. Each extent is cut into chunks
 * striped over the pair's rails as one write is. The request holds a bounded number of
 * operations; the proxy fills each again with the next chunk as it completes, so a list
 * may be longer than the engine's pools and bytes in flight stay bounded (rate control
 * paces them as any write). With an immediate, once every chunk has completed, one 8-byte
 * write per rail of the pair (from this engine's control word to the peer's, as a barrier
 * writes) carries it: the target counts one per rail, each posted on its rail after that
 * rail's data completed here.
 */
#include "inter_internal.h"

#include <stdlib.h>

/* Data operations a list write holds at most at once. */
#define INTER_LIST_OPS 256

/* Fill op with the list's next chunk and move the cursor on; false when none is left. */
static bool inter_list_fill(inter_engine_t *engine, inter_request_t *req, inter_op_t *op)
{
    const inter_extent_t *x;
    inter_stripe_params_t stripe;
    inter_chunk_t chunk;

    if (req->next_extent == req->num_extents) {
        return false;
    }
    x = &req->extents[req->next_extent];
    inter_engine_stripe(engine, req->peer, &stripe);
    inter_stripe_chunk(&stripe, x->len, req->extent_chunks, req->next_chunk, &chunk);
    inter_fill_rma(engine, op, INTER_OP_WRITE, req->peer,
                   inter_rail_for(engine, req->peer, chunk.rail), req->lmr,
                   x->loff + chunk.offset, &req->rdesc, x->roff + chunk.offset, chunk.length,
                   false, 0);
    op->paced = false;
    if (++req->next_chunk == req->extent_chunks) {
        req->next_chunk = 0;
        if (++req->next_extent < req->num_extents) {
            req->extent_chunks = inter_engine_write_chunks(engine, req->peer,
                                                           req->extents[req->next_extent].len);
        }
    }
    return true;
}

/* The operations after the data ones: one immediate per rail of the pair. */
static void inter_list_fill_imms(inter_engine_t *engine, inter_request_t *req, inter_op_t *op,
                                 uint32_t imm)
{
    for (uint32_t r = 0; op != NULL; ++r, op = op->sibling) {
        inter_fill_rma(engine, op, INTER_OP_WRITE, req->peer, inter_rail_for(engine, req->peer, r),
                       engine->ctrl_mr, sizeof(uint64_t), &engine->peer_info[req->peer].ctrl, 0,
                       sizeof(uint64_t), true, imm);
    }
}

uint32_t inter_engine_list_imm_count(const inter_engine_t *engine, int peer)
{
    inter_stripe_params_t stripe;

    if (engine == NULL || peer < 0 || peer >= engine->params.world_size) {
        return 0;
    }
    inter_engine_stripe(engine, peer, &stripe);
    return stripe.num_rails;
}

/* Every extent inside both regions; the total of chunks into *chunks_p. */
static strata_status_t inter_list_check(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                        const inter_rdesc_t *rdesc,
                                        const inter_extent_t *extents, uint32_t num_extents,
                                        uint64_t *chunks_p)
{
    strata_status_t status;

    *chunks_p = 0;
    if (extents == NULL || num_extents == 0) {
        UTIL_LOG_ERROR("engine: list write of %u extents", num_extents);
        return STRATA_ERR_INVALID;
    }
    for (uint32_t i = 0; i < num_extents; ++i) {
        const inter_extent_t *x = &extents[i];

        if ((status = inter_check_length(engine, x->len)) != STRATA_OK ||
            (status = inter_check_local(lmr, x->loff, x->len)) != STRATA_OK ||
            (status = inter_check_remote(engine, peer, rdesc, x->roff, x->len)) != STRATA_OK) {
            UTIL_LOG_ERROR("engine: list write: extent %u of %u, [%zu, +%zu) to [%zu, +%zu), "
                           "refused", i, num_extents, x->loff, x->len, x->roff, x->len);
            return status;
        }
        *chunks_p += inter_engine_write_chunks(engine, peer, x->len);
    }
    return STRATA_OK;
}

strata_status_t inter_engine_write_list(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                        const inter_rdesc_t *rdesc, inter_extent_t *extents,
                                        uint32_t num_extents, bool with_imm, uint32_t imm,
                                        inter_request_t **req_p)
{
    uint32_t imms = with_imm ? inter_engine_list_imm_count(engine, peer) : 0, data;
    uint64_t chunks = 0;
    strata_status_t status;
    inter_request_t *req;
    inter_op_t *op;

    if ((status = inter_check_peer(engine, peer)) != STRATA_OK ||
        (status = inter_check_imm(with_imm, imm)) != STRATA_OK ||
        (status = inter_list_check(engine, peer, lmr, rdesc, extents, num_extents, &chunks)) !=
            STRATA_OK) {
        free(extents);
        return status;
    }
    /* A quarter of the pool at most, that other requests still find operations. */
    data   = (uint32_t)UTIL_MIN(chunks, UTIL_MAX(engine->pools.free_ops.capacity / 4, 1));
    data   = UTIL_MIN(data, INTER_LIST_OPS);
    status = inter_request_take(engine, INTER_REQ_RMA, data + imms, &req);
    if (status != STRATA_OK) {
        free(extents);
        return status;
    }
    req->peer          = peer;
    req->lmr           = lmr;
    req->rdesc         = *rdesc;
    req->extents       = extents;
    req->num_extents   = num_extents;
    req->extent_chunks = inter_engine_write_chunks(engine, peer, extents[0].len);
    req->data_ops      = data;
    op = req->ops;
    for (uint32_t i = 0; i < data; ++i, op = op->sibling) {
        inter_list_fill(engine, req, op);
    }
    inter_list_fill_imms(engine, req, op, imm);
    status = inter_request_submit(engine, req);
    if (status == STRATA_OK) {
        *req_p = req;
    }
    return status;
}

/* Every data operation is done: the immediates go, or after an error count as finished. */
static void inter_list_release_imms(inter_engine_t *engine, inter_request_t *req)
{
    inter_op_t *op = req->ops;

    for (uint32_t i = 0; i < req->data_ops; ++i) {
        op = op->sibling;
    }
    for (; op != NULL; op = op->sibling) {
        if (req->status == STRATA_OK) {
            inter_queues_push(&engine->pending, op);
        } else {
            req->ops_finished++; /* never posted */
        }
    }
}

bool inter_list_op_done(inter_engine_t *engine, inter_op_t *op)
{
    inter_request_t *req = op->req;

    if (op->with_imm) {
        return false; /* an immediate: finished as any operation */
    }
    if (req->status == STRATA_OK && !atomic_load(&req->cancelled) &&
        inter_list_fill(engine, req, op)) {
        inter_queues_push(&engine->pending, op);
        return true;
    }
    if (++req->data_retired == req->data_ops) {
        inter_list_release_imms(engine, req);
    }
    return false;
}
