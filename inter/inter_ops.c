/*
 * The engine's operations, from any thread: write (plain, paged, scattered), read, send,
 * recv, immediates and barriers; their validation, their expansion into transport
 * operations (chunks striped over rails, pages, scatter targets), and the requests they
 * return, with the waits on them.
 */
#include "inter_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

void inter_request_finish(inter_request_t *req, strata_status_t status)
{
    if (atomic_load_explicit(&req->done, memory_order_relaxed)) {
        return;
    }
    if (status == STRATA_OK && atomic_load(&req->cancelled)) {
        status = STRATA_ERR_CANCELLED;
    }
    req->status = status;
    /* Proxy publishes the status (release); the user's test/wait acquires it. Sequentially
     * consistent, as inter_request_free's pair: of the two, one sees the other's store. */
    atomic_store(&req->done, 1);
    if (atomic_load(&req->released)) {
        inter_pools_reclaimable(req->engine, req->extents != NULL);
    }
    inter_engine_wake(req->engine);
}

strata_status_t inter_request_submit(inter_engine_t *engine, inter_request_t *req)
{
    uint64_t deadline;

    if (!engine->connected) {
        UTIL_LOG_ERROR("engine: request before inter_engine_connect");
        inter_request_destroy(req);
        return STRATA_ERR_INVALID;
    }
    deadline = util_clock_now_ns() + engine->params.peer_timeout_ns;
    while (!util_ring_push(&engine->ring, req)) {
        if (util_clock_now_ns() > deadline) { /* the proxy is stuck: do not hang */
            UTIL_LOG_ERROR("engine: submission ring full for %llu ns",
                           (unsigned long long)engine->params.peer_timeout_ns);
            inter_request_destroy(req);
            return STRATA_ERR_BUSY;
        }
        if (!engine->caller_progress || inter_engine_progress(engine) == 0) {
            sched_yield();
        }
    }
    return STRATA_OK;
}

strata_status_t inter_request_test(const inter_request_t *req)
{
    if (!atomic_load_explicit(&req->done, memory_order_acquire)) {
        if (!req->engine->caller_progress || inter_engine_progress(req->engine) == 0 ||
            !atomic_load_explicit(&req->done, memory_order_acquire)) {
            return STRATA_INPROGRESS;
        }
    }
    return req->status;
}

strata_status_t inter_request_wait(const inter_request_t *req, uint64_t timeout_ns)
{
    uint64_t deadline = util_clock_now_ns() + timeout_ns;
    strata_status_t status;
    unsigned seq = atomic_load_explicit(&req->engine->wake_seq, memory_order_acquire);
    uint64_t spins = 0;

    while ((status = inter_request_test(req)) == STRATA_INPROGRESS) {
        if (inter_engine_wedged(req->engine)) {
            return STRATA_ERR_PEER_FAILED;
        }
        if (util_clock_now_ns() > deadline) {
            return STRATA_ERR_TIMEOUT;
        }
        inter_engine_idle(req->engine, &spins, seq);
        seq = atomic_load_explicit(&req->engine->wake_seq, memory_order_acquire);
    }
    return status;
}

size_t inter_request_length(const inter_request_t *req)
{
    return req->length;
}

int inter_request_source(const inter_request_t *req)
{
    return req->source_ranks != NULL && req->source >= 0 ? req->source_ranks[req->source]
                                                         : req->source;
}

void inter_request_report_source(inter_request_t *req, const int *ranks)
{
    req->source_ranks = ranks;
}

void inter_request_cancel(inter_request_t *req)
{
    if (req != NULL) {
        atomic_store(&req->cancelled, true);
        if (req->type == INTER_REQ_RECV) {
            inter_pools_reclaimable(req->engine, false); /* a sweep finishes it */
        }
    }
}

void inter_request_free(inter_request_t *req)
{
    if (req != NULL) {
        inter_engine_t *engine = req->engine; /* once given back it may be reused */
        bool list = req->extents != NULL;

        /* User gives it back (release); the proxy frees it when no operation is left, and
         * sooner when told it is done too (inter_request_finish checks the other way). */
        atomic_store(&req->released, true);
        if (atomic_load(&req->done)) {
            inter_pools_reclaimable(engine, list);
        }
    }
}

/* --- Validation ------------------------------------------------------------------------- */

strata_status_t inter_check_peer(inter_engine_t *engine, int peer)
{
    if (peer < 0 || peer >= engine->params.world_size) {
        UTIL_LOG_ERROR("engine: unknown peer %d (ranks are 0..%d)", peer,
                       engine->params.world_size - 1);
        return STRATA_ERR_INVALID;
    }
    if (inter_engine_peer_failed(engine, peer) || inter_engine_wedged(engine)) {
        UTIL_LOG_ERROR("engine: peer %d has failed", peer);
        return STRATA_ERR_PEER_FAILED;
    }
    if (inter_engine_peer_left(engine, peer)) {
        UTIL_LOG_ERROR("engine: peer %d has left (its communicator was destroyed)", peer);
        return STRATA_ERR_PEER_FAILED;
    }
    return STRATA_OK;
}

strata_status_t inter_check_local(const inter_mr_t *lmr, size_t off, size_t len)
{
    if (lmr == NULL || off > lmr->len || len > lmr->len - off) {
        UTIL_LOG_ERROR("engine: local memory [%zu, +%zu) is not inside a registered region "
                       "(%zu bytes)", off, len, lmr ? lmr->len : 0);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

strata_status_t inter_check_remote(const inter_engine_t *engine, int peer,
                                          const inter_rdesc_t *rdesc, size_t off, size_t len)
{
    inter_stripe_params_t stripe;

    inter_engine_stripe(engine, peer, &stripe);
    if (rdesc == NULL || rdesc->magic != INTER_RDESC_MAGIC ||
        (engine->peer_info[peer].local ? !rdesc->has_local
                                       : rdesc->num_rails < stripe.num_rails)) {
        UTIL_LOG_ERROR("engine: not a remote memory descriptor (for peer %d)", peer);
        return STRATA_ERR_INVALID;
    }
    if (off > rdesc->length || len > rdesc->length - off) {
        UTIL_LOG_ERROR("engine: remote range [%zu, +%zu) runs past peer %d's region of %llu "
                       "bytes", off, len, peer, (unsigned long long)rdesc->length);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

strata_status_t inter_check_length(const inter_engine_t *engine, size_t len)
{
    if (len == 0 || len > engine->rails[0].tp->max_rma_size) {
        UTIL_LOG_ERROR("engine: transfer of %zu bytes (must be 1..%llu)", len,
                       (unsigned long long)engine->rails[0].tp->max_rma_size);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

strata_status_t inter_check_imm(bool with_imm, uint32_t imm)
{
    if (with_imm && imm >= INTER_IMM_MAX) {
        UTIL_LOG_ERROR("engine: immediate %u out of range (0..%u)", imm, INTER_IMM_MAX - 1);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

/* --- Writes and reads --------------------------------------------------------------------- */

void inter_fill_rma(const inter_engine_t *engine, inter_op_t *op, inter_op_kind_t kind, int peer,
                    int rail, const inter_mr_t *lmr, size_t loff, const inter_rdesc_t *rdesc,
                    size_t roff, size_t len, bool with_imm, uint32_t imm)
{
    op->kind     = kind;
    op->peer     = peer;
    op->rail     = rail;
    op->lbuf     = (char *)lmr->addr + loff;
    op->len      = len;
    op->desc     = lmr->tmr[rail].desc;
    op->raddr    = inter_remote_addr(engine, rail, rdesc, roff);
    op->rkey     = rdesc->keys[rail];
    op->with_imm = with_imm;
    op->imm      = (INTER_IMM_USER << INTER_IMM_TYPE_SHIFT) | imm;
    op->slot     = -1;
}

/* Which chunk (or page) of count goes i-th: in order, or last first in the test mode that
 * stands for a fabric delivering them out of order (EFA SRD). */
static uint32_t inter_post_index(const inter_engine_t *engine, uint32_t i, uint32_t count)
{
    return engine->params.chunk_order == INTER_CHUNK_REVERSE ? count - 1 - i : i;
}

/* Chunks of one striped transfer to one peer, filled in from *op_p on (the request's chain),
 * which is left at the operation after them. */
static void inter_add_chunks(const inter_engine_t *engine, inter_op_t **op_p,
                             inter_op_kind_t kind, int peer, const inter_mr_t *lmr, size_t loff,
                             const inter_rdesc_t *rdesc, size_t roff, size_t len, bool with_imm,
                             uint32_t imm)
{
    uint32_t chunks = inter_engine_write_chunks(engine, peer, len);
    inter_stripe_params_t stripe;
    inter_chunk_t chunk;

    inter_engine_stripe(engine, peer, &stripe);
    for (uint32_t c = 0; c < chunks; ++c, *op_p = (*op_p)->sibling) {
        inter_stripe_chunk(&stripe, len, chunks, inter_post_index(engine, c, chunks), &chunk);
        inter_fill_rma(engine, *op_p, kind, peer, inter_rail_for(engine, peer, chunk.rail), lmr,
                       loff + chunk.offset, rdesc, roff + chunk.offset, chunk.length, with_imm,
                       imm);
    }
}

static strata_status_t inter_rma(inter_engine_t *engine, inter_op_kind_t kind, int peer,
                                 const inter_mr_t *lmr, size_t loff, const inter_rdesc_t *rdesc,
                                 size_t roff, size_t len, bool with_imm, uint32_t imm,
                                 inter_request_t **req_p)
{
    strata_status_t status;
    inter_request_t *req;
    inter_op_t *op;

    if ((status = inter_check_peer(engine, peer)) != STRATA_OK ||
        (status = inter_check_length(engine, len)) != STRATA_OK ||
        (status = inter_check_local(lmr, loff, len)) != STRATA_OK ||
        (status = inter_check_remote(engine, peer, rdesc, roff, len)) != STRATA_OK ||
        (status = inter_check_imm(with_imm, imm)) != STRATA_OK) {
        return status;
    }
    status = inter_request_take(engine, INTER_REQ_RMA,
                                inter_engine_write_chunks(engine, peer, len), &req);
    if (status != STRATA_OK) {
        return status;
    }
    op = req->ops;
    inter_add_chunks(engine, &op, kind, peer, lmr, loff, rdesc, roff, len, with_imm, imm);
    req->peer = peer;
    status    = inter_request_submit(engine, req);
    if (status == STRATA_OK) {
        *req_p = req;
    }
    return status;
}

strata_status_t inter_engine_write(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                   size_t loff, const inter_rdesc_t *rdesc, size_t roff,
                                   size_t len, bool with_imm, uint32_t imm,
                                   inter_request_t **req_p)
{
    return inter_rma(engine, INTER_OP_WRITE, peer, lmr, loff, rdesc, roff, len, with_imm, imm,
                     req_p);
}

strata_status_t inter_engine_read(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                  size_t loff, const inter_rdesc_t *rdesc, size_t roff,
                                  size_t len, inter_request_t **req_p)
{
    if (!inter_engine_has_read(engine)) {
        UTIL_LOG_ERROR("engine: %s offers no RDMA read", inter_engine_transport_name(engine));
        return STRATA_ERR_UNSUPPORTED;
    }
    return inter_rma(engine, INTER_OP_READ, peer, lmr, loff, rdesc, roff, len, false, 0, req_p);
}

strata_status_t inter_engine_write_paged(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                         const inter_rdesc_t *rdesc, const uint32_t *src_pages,
                                         const uint32_t *dst_pages, uint32_t num_pages,
                                         size_t page_size, size_t stride, bool with_imm,
                                         uint32_t imm, inter_request_t **req_p)
{
    strata_status_t status;
    inter_request_t *req;

    if ((status = inter_check_peer(engine, peer)) != STRATA_OK ||
        (status = inter_check_length(engine, page_size)) != STRATA_OK ||
        (status = inter_check_imm(with_imm, imm)) != STRATA_OK) {
        return status;
    }
    if (num_pages == 0 || src_pages == NULL || dst_pages == NULL || stride < page_size ||
        stride > SIZE_MAX / ((size_t)UINT32_MAX + 1)) { /* index * stride must not wrap */
        UTIL_LOG_ERROR("engine: paged write of %u pages of %zu bytes with stride %zu", num_pages,
                       page_size, stride);
        return STRATA_ERR_INVALID;
    }
    for (uint32_t i = 0; i < num_pages; ++i) {
        if ((status = inter_check_local(lmr, (size_t)src_pages[i] * stride, page_size)) !=
                STRATA_OK ||
            (status = inter_check_remote(engine, peer, rdesc, (size_t)dst_pages[i] * stride,
                                         page_size)) != STRATA_OK) {
            return status;
        }
    }
    status = inter_request_take(engine, INTER_REQ_RMA, num_pages, &req);
    if (status != STRATA_OK) {
        return status;
    }
    /* One operation per page, pages spread over the pair's rails. */
    inter_stripe_params_t stripe;
    inter_op_t *op = req->ops;

    inter_engine_stripe(engine, peer, &stripe);
    for (uint32_t k = 0; k < num_pages; ++k, op = op->sibling) {
        uint32_t i = inter_post_index(engine, k, num_pages);
        int rail = inter_rail_for(engine, peer, (uint32_t)(i % stripe.num_rails));

        inter_fill_rma(engine, op, INTER_OP_WRITE, peer, rail, lmr,
                       (size_t)src_pages[i] * stride, rdesc, (size_t)dst_pages[i] * stride,
                       page_size, with_imm, imm);
    }
    req->peer = peer;
    status    = inter_request_submit(engine, req);
    if (status == STRATA_OK) {
        *req_p = req;
    }
    return status;
}

strata_status_t inter_engine_write_scatter(inter_engine_t *engine, const int *peers,
                                           int num_peers, const inter_mr_t *lmr, size_t loff,
                                           const inter_rdesc_t *rdescs, const size_t *roffs,
                                           size_t len, bool with_imm, uint32_t imm,
                                           inter_request_t **req_p)
{
    strata_status_t status;
    inter_request_t *req;
    inter_op_t *op;
    uint64_t total = 0;

    if (num_peers <= 0 || peers == NULL || rdescs == NULL || roffs == NULL) {
        UTIL_LOG_ERROR("engine: scatter write to %d peers", num_peers);
        return STRATA_ERR_INVALID;
    }
    if ((status = inter_check_length(engine, len)) != STRATA_OK ||
        (status = inter_check_local(lmr, loff, len)) != STRATA_OK ||
        (status = inter_check_imm(with_imm, imm)) != STRATA_OK) {
        return status;
    }
    for (int i = 0; i < num_peers; ++i) {
        if ((status = inter_check_peer(engine, peers[i])) != STRATA_OK ||
            (status = inter_check_remote(engine, peers[i], &rdescs[i], roffs[i], len)) !=
                STRATA_OK) {
            return status;
        }
        total += inter_engine_write_chunks(engine, peers[i], len);
    }
    status = inter_request_take(engine, INTER_REQ_RMA, (uint32_t)UTIL_MIN(total, UINT32_MAX),
                                &req);
    if (status != STRATA_OK) {
        return status;
    }
    op = req->ops;
    for (int i = 0; i < num_peers; ++i) {
        inter_add_chunks(engine, &op, INTER_OP_WRITE, peers[i], lmr, loff, &rdescs[i],
                         roffs[i], len, with_imm, imm);
    }
    status = inter_request_submit(engine, req);
    if (status == STRATA_OK) {
        *req_p = req;
    }
    return status;
}

/* --- Messages -------------------------------------------------------------------------- */

strata_status_t inter_engine_send_on(inter_engine_t *engine, uint32_t channel, int peer,
                                     const void *buf, size_t len, inter_request_t **req_p)
{
    strata_status_t status;
    inter_request_t *req;

    if ((status = inter_check_peer(engine, peer)) != STRATA_OK) {
        return status;
    }
    if ((len > 0 && buf == NULL) || len > engine->params.msg_size) {
        UTIL_LOG_ERROR("engine: message of %zu bytes (at most %zu)", len,
                       engine->params.msg_size);
        return STRATA_ERR_INVALID;
    }
    status = inter_request_take(engine, INTER_REQ_SEND, 1, &req); /* with a copy buffer */
    if (status != STRATA_OK) {
        return status;
    }
    if (len > 0) {
        memcpy(req->buf, buf, len);
    }
    req->length       = len;
    req->peer         = peer;
    req->channel      = channel;
    req->ops[0].kind  = INTER_OP_SEND;
    req->ops[0].peer  = peer;
    req->ops[0].rail  = inter_rail_for(engine, peer, 0);
    req->ops[0].slot  = -1;
    req->ops[0].len   = len;
    status            = inter_request_submit(engine, req);
    if (status == STRATA_OK) {
        *req_p = req;
    }
    return status;
}

strata_status_t inter_engine_recv_on(inter_engine_t *engine, uint32_t channel, int peer,
                                     void *buf, size_t cap, inter_request_t **req_p)
{
    strata_status_t status;
    inter_request_t *req;

    if (peer != -1 && (status = inter_check_peer(engine, peer)) != STRATA_OK) {
        return status;
    }
    if (buf == NULL && cap > 0) {
        UTIL_LOG_ERROR("engine: receive into a NULL buffer of %zu bytes", cap);
        return STRATA_ERR_INVALID;
    }
    status = inter_request_take(engine, INTER_REQ_RECV, 0, &req);
    if (status != STRATA_OK) {
        return status;
    }
    req->peer    = peer;
    req->buf     = buf;
    req->cap     = cap;
    req->channel = channel;
    status    = inter_request_submit(engine, req);
    if (status == STRATA_OK) {
        *req_p = req;
    }
    return status;
}

strata_status_t inter_engine_send(inter_engine_t *engine, int peer, const void *buf, size_t len,
                                  inter_request_t **req_p)
{
    return inter_engine_send_on(engine, 0, peer, buf, len, req_p);
}

strata_status_t inter_engine_recv(inter_engine_t *engine, int peer, void *buf, size_t cap,
                                  inter_request_t **req_p)
{
    return inter_engine_recv_on(engine, 0, peer, buf, cap, req_p);
}

/* --- Immediates and barrier ---------------------------------------------------------------- */

/* Whether any of peers[0..n) failed; every rank when peers is NULL. */
static bool inter_peers_failed(const inter_engine_t *engine, const int *peers, int n)
{
    for (int i = 0; i < (peers ? n : engine->params.world_size); ++i) {
        if (inter_engine_peer_failed(engine, peers ? peers[i] : i)) {
            return true;
        }
    }
    return false;
}

/* Wait until *counter >= count, then take count; fail if a writer (peers) fails. */
static strata_status_t inter_counter_wait(inter_engine_t *engine, _Atomic uint64_t *counter,
                                          uint64_t count, const int *peers, int n,
                                          uint64_t timeout_ns)
{
    uint64_t deadline = util_clock_now_ns() + timeout_ns;
    uint64_t spins = 0;
    unsigned seq;

    for (;;) {
        seq  = atomic_load_explicit(&engine->wake_seq, memory_order_acquire);
        if (inter_counter_take(counter, count)) {
            return STRATA_OK;
        }
        if (inter_engine_wedged(engine) || inter_peers_failed(engine, peers, n)) {
            return STRATA_ERR_PEER_FAILED;
        }
        if (util_clock_now_ns() > deadline) {
            return STRATA_ERR_TIMEOUT;
        }
        inter_engine_idle(engine, &spins, seq);
    }
}

strata_status_t inter_engine_imm_wait(inter_engine_t *engine, uint32_t imm, uint64_t count,
                                      int from_peer, uint64_t timeout_ns)
{
    if (imm >= INTER_IMM_MAX || from_peer >= engine->params.world_size || from_peer < -1) {
        UTIL_LOG_ERROR("engine: wait on immediate %u from peer %d", imm, from_peer);
        return STRATA_ERR_INVALID;
    }
    return inter_counter_wait(engine, &engine->imm_count[imm], count,
                              from_peer >= 0 ? &from_peer : NULL, 1, timeout_ns);
}

strata_status_t inter_engine_imm_wait_from(inter_engine_t *engine, uint32_t imm, uint64_t count,
                                           const int *peers, int n, uint64_t timeout_ns)
{
    bool valid = imm < INTER_IMM_MAX && peers != NULL && n >= 1;

    for (int i = 0; valid && i < n; ++i) {
        valid = peers[i] >= 0 && peers[i] < engine->params.world_size;
    }
    if (!valid) {
        UTIL_LOG_ERROR("engine: wait on immediate %u from %d peers (each a rank of %d)", imm,
                       n, engine->params.world_size);
        return STRATA_ERR_INVALID;
    }
    return inter_counter_wait(engine, &engine->imm_count[imm], count, peers, n, timeout_ns);
}

strata_status_t inter_engine_imm_notify(inter_engine_t *engine, uint32_t imm, uint64_t count,
                                        int from_peer, inter_imm_fn_t fn, void *arg)
{
    inter_request_t *req;
    strata_status_t status;

    if (imm >= INTER_IMM_MAX || fn == NULL || count == 0 || from_peer < -1 ||
        from_peer >= engine->params.world_size) {
        UTIL_LOG_ERROR("engine: notify on immediate %u x %llu from peer %d", imm,
                       (unsigned long long)count, from_peer);
        return STRATA_ERR_INVALID;
    }
    status = inter_request_take(engine, INTER_REQ_NOTIFY, 0, &req);
    if (status != STRATA_OK) {
        return status;
    }
    req->imm   = imm;
    req->count = count;
    req->peer  = from_peer;
    req->fn    = fn;
    req->arg   = arg;
    atomic_store(&req->released, true); /* the engine owns it; the callback is the result */
    return inter_request_submit(engine, req);
}

static int inter_int_compare(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The group's key (FNV-1a over its sorted members) and this barrier's sequence in it. */
static strata_status_t inter_barrier_next(inter_engine_t *engine, const int *peers, int n,
                                          uint32_t *value_p)
{
    uint64_t key = 1469598103934665603ull;
    int *sorted = malloc((size_t)n * sizeof(int)), g;

    if (sorted == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    memcpy(sorted, peers, (size_t)n * sizeof(int));
    qsort(sorted, (size_t)n, sizeof(int), inter_int_compare);
    for (int i = 0; i < n; ++i) {
        key = (key ^ (uint64_t)(uint32_t)sorted[i]) * 1099511628211ull;
    }
    free(sorted);
    pthread_mutex_lock(&engine->barrier_lock);
    for (g = 0; g < engine->num_barrier_groups && engine->barrier_keys[g] != key; ++g) {
    }
    if (g == engine->num_barrier_groups) {
        if (g == INTER_BARRIER_GROUPS) {
            pthread_mutex_unlock(&engine->barrier_lock);
            UTIL_LOG_ERROR("engine: barriers over more than %d different groups",
                           INTER_BARRIER_GROUPS);
            return STRATA_ERR_UNSUPPORTED;
        }
        engine->barrier_keys[g] = key;
        engine->num_barrier_groups++;
    }
    /* 16 bits of the group, 14 of its sequence: the immediate's 30-bit value. */
    *value_p = (uint32_t)((key & 0xffff) << 14) | (++engine->barrier_seqs[g] & 0x3fff);
    pthread_mutex_unlock(&engine->barrier_lock);
    return STRATA_OK;
}

strata_status_t inter_engine_barrier(inter_engine_t *engine, const int *peers, int n,
                                     uint64_t timeout_ns)
{
    uint64_t deadline = util_clock_now_ns() + timeout_ns;
    inter_request_t *req;
    strata_status_t status = STRATA_OK;
    uint32_t value;
    inter_op_t *op;
    bool member = false;

    for (int i = 0; i < n && peers != NULL; ++i) {
        if ((status = inter_check_peer(engine, peers[i])) != STRATA_OK) {
            return status;
        }
        member = member || peers[i] == engine->params.rank;
    }
    if (!member || n < 1) {
        UTIL_LOG_ERROR("engine: barrier over %d ranks that do not include rank %d", n,
                       engine->params.rank);
        return STRATA_ERR_INVALID;
    }
    if (n == 1) {
        return STRATA_OK;
    }
    status = inter_barrier_next(engine, peers, n, &value);
    if (status != STRATA_OK) {
        return status;
    }
    /* The engine's requests may all be in flight for a while: wait for one to come back. */
    status = inter_request_take_wait(engine, INTER_REQ_RMA, (uint32_t)(n - 1), deadline, &req);
    if (status != STRATA_OK) {
        return status;
    }
    op = req->ops;
    for (int i = 0; i < n; ++i) {
        if (peers[i] == engine->params.rank) {
            continue;
        }
        /* 8 bytes from the control word to the peer's; the immediate is what counts. */
        inter_fill_rma(engine, op, INTER_OP_WRITE, peers[i], 0, engine->ctrl_mr,
                       sizeof(uint64_t), &engine->peer_info[peers[i]].ctrl, 0, sizeof(uint64_t),
                       true, 0);
        op->imm = (INTER_IMM_BARRIER << INTER_IMM_TYPE_SHIFT) | value;
        op      = op->sibling;
    }
    status = inter_request_submit(engine, req);
    if (status != STRATA_OK) {
        return status;
    }
    status = inter_counter_wait(engine, &engine->barrier_count[value % INTER_BARRIER_SLOTS],
                                (uint64_t)(n - 1), peers, n, timeout_ns);
    if (status == STRATA_OK) {
        status = inter_request_wait(req, timeout_ns);
    }
    inter_request_free(req);
    return status;
}
