/*
 * List writes: many extents to one peer in one request. Each extent is cut into chunks
 * striped over the pair's rails as one write is. The request holds a bounded number of
 * operations; the proxy fills each again with the next chunk as it completes, so a list
 * may be longer than the engine's pools and bytes in flight stay bounded (rate control
 * paces them as any write).
 *
 * With an immediate, the last chunk of each rail is held back and goes, carrying the
 * immediate, once every other chunk has completed; a rail with no chunk gets an 8-byte
 * write from this engine's control word to the peer's (as a barrier writes). The target
 * counts one per rail. A held-back chunk rather than a separate small write: over tcp a
 * segment smaller than the path's MSS waits behind unacknowledged data (Nagle) for the
 * peer's delayed acknowledgement, tens of milliseconds, while a full chunk goes at once.
 */
#include "inter_internal.h"

#include <stdlib.h>
#include <string.h>

/* Data operations a list write holds at most at once. */
#define INTER_LIST_OPS 256

/* Whether chunk `chunk` of extent `extent` is one the immediates carry. */
static bool inter_list_held(const inter_request_t *req, uint32_t extent, uint32_t chunk)
{
    for (uint32_t r = 0; r < req->num_ops - req->data_ops; ++r) { /* one per immediate */
        if (req->held[r].extent == extent && req->held[r].chunk == chunk) {
            return true;
        }
    }
    return false;
}

/* Move the cursor past one chunk. */
static void inter_list_advance(inter_engine_t *engine, inter_request_t *req)
{
    if (++req->next_chunk == req->extent_chunks) {
        req->next_chunk = 0;
        if (++req->next_extent < req->num_extents) {
            req->extent_chunks = inter_engine_write_chunks(engine, req->peer,
                                                           req->extents[req->next_extent].len);
        }
    }
}

/* The chunk rail of chunk `chunk` (its stripe rail `rail`) of extent `extent`: rotated by
 * the extent, so that lists of one-chunk extents (pages) spread over the rails too. */
static uint32_t inter_list_rail(const inter_stripe_params_t *stripe, uint32_t extent,
                                uint32_t rail)
{
    return (rail + extent) % stripe->num_rails;
}

/* Fill op with chunk `chunk` of extent `extent`. */
static void inter_list_fill_chunk(inter_engine_t *engine, inter_request_t *req, inter_op_t *op,
                                  uint32_t extent, uint32_t chunk, bool with_imm, uint32_t imm)
{
    const inter_extent_t *x = &req->extents[extent];
    inter_stripe_params_t stripe;
    inter_chunk_t piece;

    inter_engine_stripe(engine, req->peer, &stripe);
    inter_stripe_chunk(&stripe, x->len, inter_engine_write_chunks(engine, req->peer, x->len),
                       chunk, &piece);
    inter_fill_rma(engine, op, INTER_OP_WRITE, req->peer,
                   inter_rail_for(engine, req->peer, inter_list_rail(&stripe, extent, piece.rail)),
                   req->lmr,
                   x->loff + piece.offset, &req->rdesc, x->roff + piece.offset, piece.length,
                   with_imm, imm);
    op->paced = false;
}

/* Fill op with the list's next chunk that no immediate carries; false when none is left. */
static bool inter_list_fill(inter_engine_t *engine, inter_request_t *req, inter_op_t *op)
{
    while (req->next_extent < req->num_extents &&
           inter_list_held(req, req->next_extent, req->next_chunk)) {
        inter_list_advance(engine, req);
    }
    if (req->next_extent == req->num_extents) {
        return false;
    }
    inter_list_fill_chunk(engine, req, op, req->next_extent, req->next_chunk, false, 0);
    inter_list_advance(engine, req);
    return true;
}

/* The immediates' operations, one per rail r of the pair: its last chunk, or, where the
 * list put none on it, 8 bytes into the peer's control word. */
static void inter_list_fill_imms(inter_engine_t *engine, inter_request_t *req, uint32_t imm)
{
    inter_op_t *op = req->ops;

    for (uint32_t i = 0; i < req->data_ops; ++i) {
        op = op->sibling;
    }
    for (uint32_t r = 0; op != NULL; ++r, op = op->sibling) {
        if (req->held[r].extent != UINT32_MAX) {
            inter_list_fill_chunk(engine, req, op, req->held[r].extent, req->held[r].chunk,
                                  true, imm);
        } else {
            inter_fill_rma(engine, op, INTER_OP_WRITE, req->peer,
                           inter_rail_for(engine, req->peer, r), engine->ctrl_mr,
                           sizeof(uint64_t), &engine->peer_info[req->peer].ctrl, 0,
                           sizeof(uint64_t), true, imm);
        }
    }
}

/* The last chunk of each of the first `rails` rails (held[r], extent UINT32_MAX: none);
 * how many rails have one; the chunks in all into *chunks_p. */
static uint32_t inter_list_hold_last(inter_engine_t *engine, int peer,
                                     const inter_extent_t *extents, uint32_t num_extents,
                                     uint32_t rails, inter_list_chunk_t *held,
                                     uint64_t *chunks_p)
{
    inter_stripe_params_t stripe;
    inter_chunk_t piece;
    uint32_t with_chunk = 0;

    inter_engine_stripe(engine, peer, &stripe);
    for (uint32_t r = 0; r < rails; ++r) {
        held[r].extent = UINT32_MAX;
    }
    *chunks_p = 0;
    for (uint32_t e = 0; e < num_extents; ++e) {
        uint32_t n = inter_engine_write_chunks(engine, peer, extents[e].len);

        for (uint32_t c = 0; c < n; ++c) {
            inter_stripe_chunk(&stripe, extents[e].len, n, c, &piece);
            uint32_t rail = inter_list_rail(&stripe, e, piece.rail);

            if (rail < rails) {
                with_chunk += held[rail].extent == UINT32_MAX;
                held[rail] = (inter_list_chunk_t){.extent = e, .chunk = c};
            }
        }
        *chunks_p += n;
    }
    return with_chunk;
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

/* Every extent inside both regions. */
static strata_status_t inter_list_check(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                        const inter_rdesc_t *rdesc,
                                        const inter_extent_t *extents, uint32_t num_extents)
{
    strata_status_t status;

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
    }
    return STRATA_OK;
}

strata_status_t inter_engine_write_list(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                        const inter_rdesc_t *rdesc, inter_extent_t *extents,
                                        uint32_t num_extents, bool with_imm, uint32_t imm,
                                        inter_request_t **req_p)
{
    uint32_t imms = with_imm ? inter_engine_list_imm_count(engine, peer) : 0, held, data;
    inter_list_chunk_t last[INTER_MAX_RAILS];
    uint64_t chunks = 0;
    strata_status_t status;
    inter_request_t *req;
    inter_op_t *op;

    if ((status = inter_check_peer(engine, peer)) != STRATA_OK ||
        (status = inter_check_imm(with_imm, imm)) != STRATA_OK ||
        (status = inter_list_check(engine, peer, lmr, rdesc, extents, num_extents)) !=
            STRATA_OK) {
        free(extents);
        return status;
    }
    held = inter_list_hold_last(engine, peer, extents, num_extents, imms, last, &chunks);
    /* A quarter of the pool at most, that other requests still find operations. */
    data   = (uint32_t)UTIL_MIN(chunks - held, UTIL_MAX(engine->pools.free_ops.capacity / 4, 1));
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
    memcpy(req->held, last, imms * sizeof(last[0]));
    op = req->ops;
    for (uint32_t i = 0; i < data; ++i, op = op->sibling) {
        inter_list_fill(engine, req, op);
    }
    inter_list_fill_imms(engine, req, imm);
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
        if (req->status == STRATA_OK && !atomic_load(&req->cancelled)) {
            op->uncancellable = true; /* all go, or the target keeps a partial count */
            inter_queues_push(&engine->pending, op);
        } else {
            req->ops_finished++; /* never posted */
        }
    }
}

void inter_list_accept(inter_engine_t *engine, inter_request_t *req)
{
    inter_op_t *op = req->ops;

    for (uint32_t i = 0; i < req->data_ops; ++i, op = op->sibling) {
        inter_queues_push(&engine->pending, op);
    }
    if (req->data_ops == 0) { /* every chunk is one an immediate carries */
        inter_list_release_imms(engine, req);
        if (req->ops_finished == req->num_ops) { /* cancelled before it came: none went */
            inter_request_finish(req, req->status);
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
