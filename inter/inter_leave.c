/*
 * Leaving: the handshake an engine runs at destroy, before it closes its endpoints.
 *
 * Closing an endpoint does not wait for the peers to have read what this rank sent: over
 * tcp, a socket closed with unread data resets the connection, and bytes a peer has not
 * read yet (this rank's last barrier write, say) may go with it; the peer then waits in
 * that barrier until the peer timeout. So the engine first tells every live peer it is
 * leaving, with a LEAVING message on each rail that reaches the peer (after everything it
 * sent there: rail 0, which carries heartbeats and barriers, and every other rail an
 * operation to the peer went on), and waits, a bounded time, until each peer has answered
 * on each of them (LEFT_ACK: read up to the LEAVING), failed, or said it is leaving too
 * (then it needs nothing more from this rank), and its own answers have gone. A peer that
 * heard LEAVING stops sending heartbeats to the rank and fails it quietly once it is silent
 * past the peer timeout; an engine call that names it fails at once. Messages go by
 * inject; a rail that cannot inject a header is skipped.
 */
#include "inter_internal.h"

#include <stdlib.h>

#define INTER_LEAVE_MAX_NS (1000 * UTIL_NSEC_PER_MSEC) /* the most destroy waits for answers */

strata_status_t inter_leave_setup(inter_engine_t *engine)
{
    size_t world = (size_t)engine->params.world_size;

    engine->peer_left   = calloc(world, sizeof(*engine->peer_left));
    engine->leave_acks  = calloc(world, sizeof(*engine->leave_acks));
    engine->leave_asked = calloc(world, sizeof(*engine->leave_asked));
    engine->leave_owed  = calloc(world, sizeof(*engine->leave_owed));
    engine->acks_owed   = calloc(world, sizeof(*engine->acks_owed));
    engine->rails_used  = calloc(world, sizeof(*engine->rails_used));
    if (engine->peer_left == NULL || engine->leave_acks == NULL ||
        engine->leave_asked == NULL || engine->leave_owed == NULL || engine->acks_owed == NULL ||
        engine->rails_used == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    return STRATA_OK;
}

void inter_leave_cleanup(inter_engine_t *engine)
{
    free(engine->peer_left);
    free(engine->leave_acks);
    free(engine->leave_asked);
    free(engine->leave_owed);
    free(engine->acks_owed);
    free(engine->rails_used);
}

bool inter_engine_peer_left(const inter_engine_t *engine, int peer)
{
    return engine->peer_left != NULL && peer >= 0 && peer < engine->params.world_size &&
           atomic_load_explicit(&engine->peer_left[peer], memory_order_acquire);
}

/* Whether a goodbye goes to peer on rail r: rail 0 (heartbeats, barriers) or a rail an
 * operation to it went on, where the peer has that rail and it can inject a header. A rail
 * nothing went on is never connected for the first time at the close. */
static bool inter_leave_rail(const inter_engine_t *engine, int r, int peer)
{
    const inter_peer_info_t *info = &engine->peer_info[peer];

    if ((r != 0 && (engine->rails_used[peer] & (1u << r)) == 0) ||
        (r == INTER_LOCAL_RAIL ? !info->local : r >= info->num_rails)) {
        return false;
    }
    return engine->rails[r].tp->inject_size >= sizeof(inter_msg_header_t);
}

void inter_leave_on_message(inter_engine_t *engine, int src, inter_msg_type_t type, int rail)
{
    if (type == INTER_MSG_LEAVING) {
        engine->acks_owed[src] |= 1u << rail;
        atomic_store_explicit(&engine->leave_owing, true, memory_order_relaxed);
        if (!atomic_exchange_explicit(&engine->peer_left[src], true, memory_order_acq_rel)) {
            UTIL_LOG_DEBUG("engine: peer %d is leaving", src);
        }
    } else if (type == INTER_MSG_LEFT_ACK) {
        atomic_fetch_add_explicit(&engine->leave_acks[src], 1, memory_order_acq_rel);
    }
    inter_engine_wake(engine);
}

/* Each owed message of kind type to peer, by inject on its rail: the bits of those that
 * went, or can never go (counted in *refused_p), are cleared; those the transport had no
 * room for stay. Returns how many went. */
static int inter_leave_send(inter_engine_t *engine, int peer, uint32_t *owed,
                            inter_msg_type_t type, unsigned *refused_p)
{
    inter_msg_header_t header = {.magic = INTER_MSG_MAGIC, .type = (uint16_t)type,
                                 .src = engine->params.rank};
    int sent = 0;

    INTER_FOR_EACH_RAIL(engine, r) {
        strata_status_t status;

        if ((*owed & (1u << r)) == 0) {
            continue;
        }
        header.rail = (uint16_t)r;
        status = engine->ops->inject(engine->rails[r].tp, engine->rails[r].peers[peer], &header,
                                     sizeof(header));
        if (status == STRATA_ERR_BUSY) {
            continue;
        }
        *owed &= ~(1u << r);
        if (status == STRATA_OK) {
            ++sent;
        } else {
            ++*refused_p;
        }
    }
    return sent;
}

/* At the first round after destroy asked: the rails each live peer must answer on. */
static void inter_leave_start(inter_engine_t *engine)
{
    for (int p = 0; p < engine->params.world_size; ++p) {
        uint32_t rails = 0;

        if (p == engine->params.rank || inter_engine_peer_failed(engine, p) ||
            inter_engine_peer_left(engine, p) || /* it needs nothing more */
            !atomic_load_explicit(&engine->heard[p], memory_order_acquire)) { /* never met */
            continue;
        }
        INTER_FOR_EACH_RAIL(engine, r) {
            if (inter_leave_rail(engine, r, p)) {
                rails |= 1u << r;
            }
        }
        engine->leave_owed[p] = rails;
        atomic_store_explicit(&engine->leave_asked[p], (unsigned)__builtin_popcount(rails),
                              memory_order_release);
    }
    atomic_store_explicit(&engine->leave_owing, true, memory_order_relaxed);
    atomic_store_explicit(&engine->leave_started, true, memory_order_release);
}

int inter_leave_progress(inter_engine_t *engine)
{
    bool owing = false;
    int work = 0;

    if (!atomic_load_explicit(&engine->leave_started, memory_order_relaxed) &&
        atomic_load_explicit(&engine->leaving, memory_order_acquire)) {
        inter_leave_start(engine);
    }
    if (!atomic_load_explicit(&engine->leave_owing, memory_order_relaxed)) {
        return 0;
    }
    for (int p = 0; p < engine->params.world_size; ++p) {
        unsigned refused = 0, unanswered = 0;

        if (inter_engine_peer_failed(engine, p)) { /* nothing more goes to it */
            engine->acks_owed[p] = engine->leave_owed[p] = 0;
        } else if (inter_engine_peer_left(engine, p)) {
            engine->leave_owed[p] = 0; /* it needs no goodbye; it waits for its answers */
        }
        if (engine->acks_owed[p] != 0) {
            /* an answer that cannot go: the peer stops waiting at its bound */
            work += inter_leave_send(engine, p, &engine->acks_owed[p], INTER_MSG_LEFT_ACK,
                                     &unanswered);
        }
        if (engine->leave_owed[p] != 0) {
            work += inter_leave_send(engine, p, &engine->leave_owed[p], INTER_MSG_LEAVING,
                                     &refused);
            /* no answer comes on a rail where it could not go */
            atomic_fetch_sub_explicit(&engine->leave_asked[p], refused, memory_order_acq_rel);
        }
        owing = owing || engine->acks_owed[p] != 0 || engine->leave_owed[p] != 0;
    }
    atomic_store_explicit(&engine->leave_owing, owing, memory_order_release);
    return work;
}

/* Whether peer needs nothing more before this rank closes (destroy's thread). */
static bool inter_leave_settled(const inter_engine_t *engine, int peer)
{
    return inter_engine_peer_failed(engine, peer) || inter_engine_peer_left(engine, peer) ||
           atomic_load_explicit(&engine->leave_acks[peer], memory_order_acquire) >=
               atomic_load_explicit(&engine->leave_asked[peer], memory_order_acquire);
}

/* The peers not settled yet; -1 while a LEAVING or an answer owed is yet to go (the proxy
 * sets leave_owing before it publishes leave_started, and clears it once all went). */
static int inter_leave_waiting(inter_engine_t *engine)
{
    int waiting = 0;

    if (!atomic_load_explicit(&engine->leave_started, memory_order_acquire) ||
        atomic_load_explicit(&engine->leave_owing, memory_order_acquire)) {
        return -1;
    }
    for (int p = 0; p < engine->params.world_size; ++p) {
        waiting += p != engine->params.rank && !inter_leave_settled(engine, p);
    }
    return waiting;
}

void inter_engine_leave(inter_engine_t *engine)
{
    uint64_t bound = UTIL_MIN(engine->params.peer_timeout_ns, (uint64_t)INTER_LEAVE_MAX_NS);
    uint64_t deadline = util_clock_now_ns() + bound, spins = 0;
    unsigned seq;
    int waiting;

    if (engine->params.world_size < 2 || engine->peer_left == NULL) {
        return;
    }
    atomic_store_explicit(&engine->leaving, true, memory_order_release);
    for (;;) { /* the progress thread runs the rounds, or, with caller progress, the idle */
        seq     = atomic_load_explicit(&engine->wake_seq, memory_order_acquire);
        waiting = inter_leave_waiting(engine);
        if (waiting == 0) {
            return;
        }
        if (util_clock_now_ns() > deadline || inter_engine_wedged(engine)) {
            UTIL_LOG_INFO("engine: leaving after %.0f ms with %s yet to answer (their "
                          "connections close under what they have not read)",
                          (double)bound / 1e6,
                          waiting < 0 ? "messages of its own yet to go, and peers" : "peers");
            return;
        }
        inter_engine_idle(engine, &spins, seq);
    }
}
