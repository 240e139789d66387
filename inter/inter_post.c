/*
 * Posting what waits in the per-peer queues (proxy thread): each peer in its turn, its
 * operations in order (requests of one small write or read, and small work ring commands,
 * first: the express lane), a send alone, a run of writes and reads on one rail as one
 * list, until its queue is empty, its window full under rate control, or the transport
 * answers "busy". Operations whose request was cancelled, whose ring failed or was
 * detached, or whose peer failed leave the queue unposted.
 */
#include "inter_internal.h"

#include <string.h>

#define INTER_PROXY_POST_BATCH 16 /* writes and reads handed to the transport in one call */

/* One operation on its rail's transport. */
strata_status_t inter_post_one(inter_engine_t *engine, const inter_post_t *post)
{
    const inter_op_t *op = post->context;
    int posted;

    return engine->ops->post(engine->rails[op->rail].tp, post, 1, &posted);
}

static strata_status_t inter_post_send(inter_engine_t *engine, inter_op_t *op)
{
    inter_rail_t *rail = &engine->rails[op->rail];
    inter_msg_header_t *header;
    strata_status_t status;

    if (op->slot < 0) {
        if (rail->num_tx_free == 0) {
            return STRATA_ERR_BUSY; /* all send buffers in flight */
        }
        op->slot = rail->tx_free[--rail->num_tx_free];
    }
    header  = (inter_msg_header_t *)(rail->tx_pool + (size_t)op->slot * engine->slot_size);
    *header = (inter_msg_header_t){.magic = INTER_MSG_MAGIC, .type = INTER_MSG_USER,
                                   .rail = (uint16_t)op->rail, .src = engine->params.rank,
                                   .length = (uint32_t)op->len, .channel = op->req->channel};
    memcpy(header + 1, op->req->buf, op->len);
    status = inter_post_one(engine, &(inter_post_t){
                                        .kind = INTER_POST_SEND, .peer = rail->peers[op->peer],
                                        .buf = header, .len = sizeof(*header) + op->len,
                                        .desc = rail->tx_mr.desc, .context = op});
    if (status != STRATA_OK) {
        rail->tx_free[rail->num_tx_free++] = op->slot;
        op->slot                           = -1;
    }
    return status;
}

inter_post_t inter_rma_post(const inter_engine_t *engine, inter_op_t *op)
{
    return (inter_post_t){.kind = op->kind == INTER_OP_READ ? INTER_POST_READ : INTER_POST_WRITE,
                          .peer = engine->rails[op->rail].peers[op->peer], .buf = op->lbuf,
                          .len = op->len, .desc = op->desc, .raddr = op->raddr,
                          .rkey = op->rkey, .with_imm = op->with_imm, .imm = op->imm,
                          .context = op};
}

/* Whether a pending operation may still go: not when its request was cancelled (unless the
 * operation is one that must go once queued: a list write's immediates), its work ring
 * failed or was detached (whose owner may have released the memory), or its peer failed. */
static strata_status_t inter_pending_check(const inter_engine_t *engine, const inter_op_t *op)
{
    if (op->ring != NULL ? op->ring->failed || op->ring->detached
                         : atomic_load(&op->req->cancelled) && !op->uncancellable) {
        return STRATA_ERR_CANCELLED;
    }
    return inter_engine_peer_failed(engine, op->peer) ? STRATA_ERR_PEER_FAILED : STRATA_OK;
}

/* The head of peer's queue was posted at now: it leaves the queue for the transport. */
static void inter_pending_posted(inter_engine_t *engine, int peer, uint64_t now)
{
    inter_op_t *op = inter_queues_head(&engine->pending, peer);

    inter_queues_pop(&engine->pending, peer);
    engine->rails_used[peer] |= 1u << op->rail; /* where a goodbye must follow it */
    if (op->req != NULL) {
        op->req->ops_posted++;
    } else {
        inter_ring_op_posted(op);
    }
    inter_pace_posted(engine, op, inter_queues_head(&engine->pending, peer) != NULL, now);
}

/* The head of peer's queue leaves it unposted, as inter_pending_check found (its request
 * cancelled, its ring failed or detached, its peer failed). */
static void inter_pending_drop(inter_engine_t *engine, int peer, strata_status_t status)
{
    inter_op_t *op = inter_queues_head(&engine->pending, peer);

    inter_queues_pop(&engine->pending, peer);
    if (op->ring == NULL) {
        inter_op_finished(op, status);
    } else {
        inter_ring_op_dropped(op); /* its ring has failed, or its owner took it back */
    }
}

/* The head of peer's queue was refused by the transport with status (neither STRATA_OK nor
 * STRATA_ERR_BUSY): the peer is failed, as a refused post always does, and so the ring of a
 * work ring command; a request's operation finishes with the status. */
static void inter_pending_refused(inter_engine_t *engine, int peer, strata_status_t status)
{
    inter_op_t *op = inter_queues_head(&engine->pending, peer);

    inter_queues_pop(&engine->pending, peer);
    if (op->ring != NULL) {
        inter_proxy_fail_peer(engine, op->peer, "posting a work ring command failed");
        inter_ring_op_done(engine, op, STRATA_ERR_PEER_FAILED);
        return;
    }
    if (status == STRATA_ERR_TRANSPORT) {
        inter_proxy_fail_peer(engine, op->peer, "posting to it failed");
    }
    inter_op_finished(op, status);
}

/* The run of writes and reads at the head of peer's queue that can go on the head's rail in
 * one post call (verbs chains them into one ibv_post_send), as far as the window allows. */
static int inter_gather_rma(const inter_engine_t *engine, int peer, inter_post_t *posts)
{
    const inter_op_t *head = inter_queues_head(&engine->pending, peer);
    uint64_t ahead = 0;
    int count = 0;

    for (inter_op_t *op = inter_queues_head(&engine->pending, peer);
         op != NULL && count < INTER_PROXY_POST_BATCH && op->rail == head->rail &&
         (op->kind == INTER_OP_WRITE || op->kind == INTER_OP_READ) &&
         inter_pending_check(engine, op) == STRATA_OK &&
         (inter_op_express(op) || inter_pace_admits(engine, peer, ahead));
         op = op->next) {
        posts[count++] = inter_rma_post(engine, op);
        ahead += op->len;
    }
    return count;
}

/*
 * Peer's turn: post its operations in queue order (express lane first), a send alone, a
 * run of writes and reads on one rail as one list, until its queue is empty, its window
 * full (STRATA_OK: completions open it again) or the transport pushes back
 * (STRATA_ERR_BUSY). Adds what left the queue to *work_p.
 */
static strata_status_t inter_post_peer(inter_engine_t *engine, int peer, int *work_p)
{
    inter_post_t posts[INTER_PROXY_POST_BATCH];
    strata_status_t status;
    inter_op_t *op;
    int count, posted;
    uint64_t now;

    while ((op = inter_queues_head(&engine->pending, peer)) != NULL) {
        status = inter_pending_check(engine, op);
        if (status != STRATA_OK) {
            inter_pending_drop(engine, peer, status);
            ++*work_p;
            continue;
        }
        if (!inter_op_express(op) && !inter_pace_admits(engine, peer, 0)) {
            inter_pace_hold(engine, op);
            return STRATA_OK;
        }
        atomic_store_explicit(&engine->proxy_target, peer, memory_order_relaxed);
        now = util_clock_now_ns();
        if (op->kind == INTER_OP_SEND) {
            count  = 1;
            status = inter_post_send(engine, op);
            posted = status == STRATA_OK;
        } else {
            count  = inter_gather_rma(engine, peer, posts);
            status = engine->ops->post(engine->rails[op->rail].tp, posts, count, &posted);
        }
        atomic_store_explicit(&engine->proxy_target, -1, memory_order_relaxed);
        for (int i = 0; i < posted; ++i) {
            inter_pending_posted(engine, peer, now);
        }
        *work_p += posted;
        if (status == STRATA_ERR_BUSY) {
            return status;
        }
        if (status != STRATA_OK && posted < count) {
            inter_pending_refused(engine, peer, status);
            ++*work_p;
        }
    }
    return STRATA_OK;
}

/* Post what waits, peer after peer, each in its turn, until the transport pushes back. A
 * peer whose window is full keeps its operations, in order, and the others go on. */
int inter_post_pending(inter_engine_t *engine)
{
    int turns = inter_queues_waiting(&engine->pending), work = 0, peer;
    strata_status_t status = STRATA_OK;

    while (turns-- > 0 && status != STRATA_ERR_BUSY &&
           (peer = inter_queues_next(&engine->pending)) >= 0) {
        status = inter_post_peer(engine, peer, &work);
        inter_queues_end_turn(&engine->pending, peer);
    }
    return work;
}
