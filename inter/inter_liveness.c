/*
 * Liveness, on the proxy: heartbeats to every peer, a peer silent past the peer timeout
 * failed, and everything that involves a failed peer ended with STRATA_ERR_PEER_FAILED.
 */
#include "inter_internal.h"

#include <stdio.h>
#include <string.h>

static bool inter_request_involves(const inter_request_t *req, int peer)
{
    if (req->peer == peer) {
        return true;
    }
    for (const inter_op_t *op = req->ops; op != NULL; op = op->sibling) {
        if (op->peer == peer) {
            return true;
        }
    }
    return false;
}

void inter_proxy_fail_peer(inter_engine_t *engine, int peer, const char *why)
{
    inter_request_t **link;

    if (peer < 0 || peer >= engine->params.world_size || peer == engine->params.rank ||
        atomic_exchange(&engine->peer_failed[peer], true)) {
        return;
    }
    if (inter_engine_peer_left(engine, peer)) { /* as it said: no news */
        UTIL_LOG_DEBUG("engine: peer %d, which said it was leaving, is gone: %s", peer, why);
    } else {
        UTIL_LOG_WARN("engine: peer %d failed: %s", peer, why);
    }
    inter_ring_fail_peer(engine, peer, STRATA_ERR_PEER_FAILED);
    inter_engine_announce_failure(engine, peer);
    for (inter_request_t *req = engine->active; req != NULL; req = req->next_active) {
        if (!atomic_load(&req->done) && req->type != INTER_REQ_NOTIFY &&
            inter_request_involves(req, peer)) {
            inter_request_finish(req, STRATA_ERR_PEER_FAILED);
        }
    }
    for (link = &engine->recvs; *link != NULL;) {
        if ((*link)->peer == peer || atomic_load(&(*link)->done)) {
            inter_request_finish(*link, STRATA_ERR_PEER_FAILED);
            *link = (*link)->next_recv;
        } else {
            link = &(*link)->next_recv;
        }
    }
    for (uint32_t imm = 0; imm < INTER_IMM_MAX; ++imm) {
        inter_request_t *req = engine->notify[imm];

        if (req != NULL && (req->peer == peer || req->peer == -1)) {
            engine->notify[imm] = NULL;
            req->fn(req->arg, imm, STRATA_ERR_PEER_FAILED);
            inter_request_finish(req, STRATA_ERR_PEER_FAILED);
        }
    }
}

/* A heartbeat by a send from rail 0's registered buffers; skipped (STRATA_OK) while the
 * last one to the peer is still out or every buffer is taken: the next beat goes. */
static strata_status_t inter_heartbeat_send(inter_engine_t *engine, int peer,
                                            const inter_msg_header_t *beat)
{
    inter_rail_t *rail = &engine->rails[0];
    inter_op_t *op = &engine->beat_ops[peer];
    inter_msg_header_t *header;
    strata_status_t status;

    if (op->slot >= 0 || rail->num_tx_free == 0) {
        return STRATA_OK;
    }
    op->slot = rail->tx_free[--rail->num_tx_free];
    header   = (inter_msg_header_t *)(rail->tx_pool + (size_t)op->slot * engine->slot_size);
    *header  = *beat;
    status   = inter_post_one(engine, &(inter_post_t){
                                          .kind = INTER_POST_SEND, .peer = rail->peers[peer],
                                          .buf = header, .len = sizeof(*header),
                                          .desc = rail->tx_mr.desc, .context = op});
    if (status != STRATA_OK) {
        rail->tx_free[rail->num_tx_free++] = op->slot;
        op->slot                           = -1;
    }
    return status;
}

/* What a heartbeat that did not go means: the peer is gone, or inject cannot carry it. */
static void inter_heartbeat_refused(inter_engine_t *engine, int peer, strata_status_t status)
{
    if (status == STRATA_ERR_TRANSPORT) {
        inter_proxy_fail_peer(engine, peer, "sending it a heartbeat failed");
    } else if (!engine->beat_by_send) {
        /* Silent heartbeats would fail every peer after the timeout: take the other path. */
        UTIL_LOG_WARN("engine: %s refused a heartbeat by inject (%s); heartbeats go as "
                      "registered sends from now on", engine->rails[0].tp->name,
                      strata_status_string(status));
        engine->beat_by_send = true;
    } else {
        UTIL_LOG_DEBUG("engine: heartbeat to rank %d: %s", peer, strata_status_string(status));
    }
}

void inter_heartbeat(inter_engine_t *engine, uint64_t now)
{
    inter_rail_t *rail = &engine->rails[0];
    inter_msg_header_t beat = {.magic = INTER_MSG_MAGIC, .type = INTER_MSG_HEARTBEAT,
                               .src = engine->params.rank};
    strata_status_t status;

    for (int p = 0; p < engine->params.world_size; ++p) {
        if (p == engine->params.rank || inter_engine_peer_failed(engine, p)) {
            continue;
        }
        if (!inter_engine_peer_left(engine, p)) { /* no beats to a closing endpoint */
            atomic_store_explicit(&engine->proxy_target, p, memory_order_relaxed);
            status = engine->beat_by_send
                         ? inter_heartbeat_send(engine, p, &beat)
                         : engine->ops->inject(rail->tp, rail->peers[p], &beat, sizeof(beat));
            atomic_store_explicit(&engine->proxy_target, -1, memory_order_relaxed);
            /* A full queue now is fine: the next beat will go. */
            if (status != STRATA_OK && status != STRATA_ERR_BUSY) {
                inter_heartbeat_refused(engine, p, status);
            }
        }
        if (now - engine->last_seen[p] > engine->params.peer_timeout_ns &&
            engine->last_seen[p] < now) {
            inter_proxy_fail_peer(engine, p, "no heartbeat within the peer timeout");
        }
    }
}
