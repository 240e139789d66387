/*
 * The operations waiting to be posted: one queue per peer, and the turns the peers with
 * waiting operations take. A peer whose window is full keeps its queue while the others
 * take their turns, so that one slow receiver holds back nothing sent to the rest. Within
 * a peer's queue, requests of one small write or read, and small work ring commands, go
 * first, in an express lane that the window does not hold: in an incast they would
 * otherwise wait behind their own sender's bulk. Nothing orders one write or read against another, so only sends, whose
 * receives match in order, never overtake. Proxy-owned (inter_queues_t in
 * inter_internal.h).
 */
#include "inter_internal.h"

#include <stdlib.h>

strata_status_t inter_queues_init(inter_queues_t *queues, int world)
{
    *queues = (inter_queues_t){.world = world};
    queues->peers  = calloc((size_t)world, sizeof(*queues->peers));
    queues->turns  = calloc((size_t)world, sizeof(*queues->turns));
    queues->listed = calloc((size_t)world, sizeof(*queues->listed));
    if (queues->peers == NULL || queues->turns == NULL || queues->listed == NULL) {
        inter_queues_cleanup(queues);
        return STRATA_ERR_NO_MEMORY;
    }
    return STRATA_OK;
}

void inter_queues_cleanup(inter_queues_t *queues)
{
    free(queues->peers);
    free(queues->turns);
    free(queues->listed);
    *queues = (inter_queues_t){0};
}

/* Peer's turn comes after those of the peers already waiting. */
static void inter_queues_enlist(inter_queues_t *queues, int peer)
{
    queues->turns[(queues->first + queues->waiting) % queues->world] = peer;
    queues->waiting++;
    queues->listed[peer] = true;
}

/* A whole request of one small write or read, or a small work ring command (each is a
 * transfer of its own): the pieces of a paged or striped transfer, however small each, are
 * bulk, so that the lane stays for what is small altogether. */
bool inter_op_express(const inter_op_t *op)
{
    return (op->kind == INTER_OP_WRITE || op->kind == INTER_OP_READ) &&
           op->len <= INTER_EXPRESS_BYTES &&
           (op->ring != NULL || (op->req != NULL && op->req->num_ops == 1));
}

void inter_queues_push(inter_queues_t *queues, inter_op_t *op)
{
    inter_op_queue_t *queue = &queues->peers[op->peer];
    inter_op_lane_t *lane = inter_op_express(op) ? &queue->express : &queue->bulk;

    op->next = NULL;
    if (lane->tail != NULL) {
        lane->tail->next = op;
    } else {
        lane->head = op;
    }
    lane->tail = op;
    if (!queues->listed[op->peer]) {
        inter_queues_enlist(queues, op->peer);
    }
}

/* The lane whose head is the queue's: express while it has any. */
static inter_op_lane_t *inter_queue_front(inter_op_queue_t *queue)
{
    return queue->express.head != NULL ? &queue->express : &queue->bulk;
}

inter_op_t *inter_queues_head(const inter_queues_t *queues, int peer)
{
    return inter_queue_front(&queues->peers[peer])->head;
}

void inter_queues_pop(inter_queues_t *queues, int peer)
{
    inter_op_lane_t *lane = inter_queue_front(&queues->peers[peer]);

    if (lane->head != NULL) {
        lane->head = lane->head->next;
        if (lane->head == NULL) {
            lane->tail = NULL;
        }
    }
}

int inter_queues_next(inter_queues_t *queues)
{
    int peer;

    if (queues->waiting == 0) {
        return -1;
    }
    peer          = queues->turns[queues->first];
    queues->first = (queues->first + 1) % queues->world;
    queues->waiting--;
    return peer; /* still listed: a push during its turn does not enlist it twice */
}

void inter_queues_end_turn(inter_queues_t *queues, int peer)
{
    if (inter_queues_head(queues, peer) != NULL) {
        inter_queues_enlist(queues, peer);
    } else {
        queues->listed[peer] = false;
    }
}

int inter_queues_waiting(const inter_queues_t *queues)
{
    return queues->waiting;
}

void inter_queues_clear(inter_queues_t *queues)
{
    for (int p = 0; p < queues->world; ++p) {
        queues->peers[p]  = (inter_op_queue_t){0};
        queues->listed[p] = false;
    }
    queues->first   = 0;
    queues->waiting = 0;
}
