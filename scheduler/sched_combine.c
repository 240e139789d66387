/*
 * Combine: the mirror of dispatch, launched from the host and run by the kernels. Every
 * term y(t, k) the node computed goes once, unweighted, to where its token's holder wants
 * it: its owner writes it there (Push) or the holder fetches it (Pull). For a token that
 * came from another node that place is the holder's returned-terms area, which leaves in
 * one write per peer, packed in the order the peer sent its tokens; for the holder's own
 * tokens, its terms array. Each rank then sums its tokens' terms, read where they landed,
 * in fp32 in k order, so the result does not depend on the route. Within one node the
 * intra tier's combine does all of it in one pass. The inter-node leg is always written by
 * the rank holding the terms: it alone knows where they go. With the streamed exchange
 * every expert combines in Pull form and the network kernels gather the terms round by
 * round, each round's tokens summed as their terms arrive (docs/moe.md).
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <string.h>

static strata_status_t sched_check_combine(const sched_moe_t *moe, sched_state_t expected,
                                           const char *call)
{
    return moe->cur.state == expected ? STRATA_OK : sched_refuse_mid_step(moe, call);
}

/* The terms of the current round (or of the step in one round) to the other nodes;
 * receiving exactly in rounds, first the round's terms from the caller's packed outputs
 * to the places each gathering rank named for them. */
static strata_status_t sched_return_round(sched_moe_t *moe)
{
    strata_status_t status = STRATA_OK;

    if (moe->geo.exact && moe->geo.rounds > 1) {
        status = intra_moe_enqueue_combine_round(moe->intra, moe->net.args.round);
    }
    return status == STRATA_OK
               ? intra_moe_enqueue_net(moe->intra, INTRA_MOE_KERNEL_NET_RETURN, &moe->net.args)
               : status;
}

/*
 * This rank's terms, gathered in the node and (without node-reduce) sent to other nodes:
 * its experts' results, expert_y, or none where it is NULL (the step is being aborted:
 * they are withheld, and cur.expert_y says so to the rest of the step).
 */
static strata_status_t sched_send_terms(sched_moe_t *moe, const void *expert_y)
{
    uint64_t node_mask[SCHED_MASK_WORDS];
    strata_status_t status;

    status = sched_drop_exact_rows(moe);
    if (status != STRATA_OK) {
        return status;
    }
    moe->cur.expert_y = expert_y;
    moe->cur.mark_ns  = util_clock_now_ns();
    moe->cur.combine_start_ns = moe->cur.mark_ns;
    if (moe->geo.num_peers == 0) {
        moe->cur.state = SCHED_STEP_COMBINE_SENT; /* one node: combine_recv does it in one pass */
        return STRATA_OK;
    }
    sched_node_mask(moe, moe->modes.combine_mask, node_mask);
    if (moe->geo.rounds > 1) {
        /* streamed: the owners publish every row, which the network kernels gather */
        memset(node_mask, 0xff, sizeof(node_mask));
        moe->net.args.round = 0;
    }
    status = sched_launched(moe,
                            expert_y == NULL
                                ? intra_moe_enqueue_abort(moe->intra, NULL, node_mask)
                                : intra_moe_enqueue_combine(moe->intra, expert_y, NULL,
                                                            node_mask, NULL),
                            "gathering terms in the node");
    if (status != STRATA_OK) {
        return status; /* INVALID: refused before this rank took part, it may retry */
    }
    /* Node-reduce sums the terms with their tokens' weights, which come with combine_recv:
     * the terms leave from there. */
    status = moe->geo.node_reduce
                 ? sched_synchronize(moe, "gathering terms in the node")
                 : sched_settle(moe, sched_return_round(moe), "returning terms to other nodes");
    if (status != STRATA_OK) {
        return status;
    }
    sched_phase_end(moe, STRATA_MOE_PHASE_COMBINE_KERNEL);
    moe->cur.state = SCHED_STEP_COMBINE_SENT;
    return STRATA_OK;
}

strata_status_t sched_moe_combine_send(sched_moe_t *moe, const void *expert_y)
{
    strata_status_t status = sched_check_combine(moe, SCHED_STEP_DISPATCHED, "combine_send");
    intra_moe_recv_t ir;

    if (status != STRATA_OK) {
        return status;
    }
    if (moe->geo.exact && expert_y == NULL) {
        if (moe->cur.into_rows > 0) {
            UTIL_LOG_ERROR("moe: combine_send of an object that receives exactly needs the "
                           "%" PRId64 " outputs, packed as dispatch_recv_into delivered the "
                           "rows", moe->cur.into_rows);
            return STRATA_ERR_INVALID;
        }
        intra_moe_buffers(moe->intra, &ir);
        expert_y = ir.expert_y; /* no row to return: never read */
    }
    return sched_send_terms(moe, expert_y ? expert_y : moe->recv.expert_y);
}

/*
 * The streamed exchange: per round (the first one's terms left with combine_send, unless
 * node-reduce waited for the weights), our tokens' terms of the round from every peer,
 * then their sums; and the next round's terms out. Nothing waits on the host between
 * rounds. out NULL (aborting): the protocol only, and zero weights for other nodes.
 */
static strata_status_t sched_reduce_rounds(sched_moe_t *moe, const float *topk_weights,
                                           void *out)
{
    size_t topk = (size_t)moe->geo.topk;
    strata_status_t status = STRATA_OK;

    moe->net.args.topk_weights = out != NULL ? topk_weights : NULL;
    for (int round = 0; round < moe->geo.rounds && status == STRATA_OK; ++round) {
        int first, count;

        sched_round_tokens(&moe->geo, round, moe->cur.plan->num_tokens, &first, &count);

        moe->net.args.round = round;
        if (round > 0 || moe->geo.node_reduce) {
            status = sched_return_round(moe);
        }
        if (status == STRATA_OK) {
            status = intra_moe_enqueue_net(moe->intra, INTRA_MOE_KERNEL_NET_TERMS,
                                           &moe->net.args);
        }
        if (status == STRATA_OK && out != NULL && count > 0) {
            status = intra_moe_enqueue_reduce(
                moe->intra, moe->net.term_src + (size_t)first * topk,
                topk_weights + (size_t)first * topk, first, count,
                (char *)out + (size_t)first * moe->geo.y_row_bytes);
        }
    }
    status = sched_settle(moe, status, "returning terms between nodes in rounds");
    sched_phase_end(moe, STRATA_MOE_PHASE_COMBINE_WAIT);
    return status;
}

/* Our tokens' terms from every peer and our own transfers done, then the sums; out NULL
 * (the step is being aborted): the protocol only, no sums, no weights for other nodes. */
static strata_status_t sched_reduce_terms(sched_moe_t *moe, const float *topk_weights, void *out)
{
    const sched_plan_t *plan = moe->cur.plan;
    strata_status_t status = STRATA_OK;

    if (moe->geo.node_reduce) { /* the weights out, the partial rows of the peers' tokens back */
        moe->net.args.topk_weights = out != NULL ? topk_weights : NULL;
        status = sched_settle(moe, intra_moe_enqueue_net(moe->intra,
                                                         INTRA_MOE_KERNEL_NET_RETURN,
                                                         &moe->net.args),
                              "summing terms for other nodes");
    }
    if (status == STRATA_OK) {
        status = sched_settle(moe, intra_moe_enqueue_net(moe->intra,
                                                         INTRA_MOE_KERNEL_NET_TERMS,
                                                         &moe->net.args),
                              "returning terms between nodes");
    }
    if (status != STRATA_OK || out == NULL) {
        return status;
    }
    sched_phase_end(moe, STRATA_MOE_PHASE_COMBINE_WAIT);
    status = sched_settle(moe, intra_moe_enqueue_reduce(moe->intra, moe->net.term_src,
                                                        topk_weights, 0, plan->num_tokens,
                                                        out),
                          "summing terms");
    sched_phase_end(moe, STRATA_MOE_PHASE_REDUCE);
    return status;
}

/* One node: the whole combine in one pass; out NULL (aborting): this rank's tokens are
 * summed nowhere, and its results go back only where combine_send was given them. */
static strata_status_t sched_combine_node(sched_moe_t *moe, const float *topk_weights,
                                          void *out)
{
    uint64_t node_mask[SCHED_MASK_WORDS];
    strata_status_t status;

    sched_node_mask(moe, moe->modes.combine_mask, node_mask);
    status = sched_launched(moe,
                            out == NULL ? intra_moe_enqueue_abort(moe->intra, moe->cur.expert_y,
                                                                  node_mask)
                                        : intra_moe_enqueue_combine(moe->intra,
                                                                    moe->cur.expert_y,
                                                                    topk_weights, node_mask,
                                                                    out),
                            "combining in the node");
    if (status == STRATA_ERR_INVALID) {
        return status; /* refused before this rank took part: it may retry */
    }
    if (status == STRATA_OK) {
        status = sched_synchronize(moe, "combining in the node");
    }
    sched_phase_end(moe, STRATA_MOE_PHASE_COMBINE_KERNEL);
    return status;
}

/* The step is over on this rank: its statistics, and the object ready for the next. */
static void sched_end_step(sched_moe_t *moe)
{
    moe->stats.combine_ns = util_clock_now_ns() - moe->cur.combine_start_ns;
    moe->stats.steps     += 1;
    if (moe->net.ring != NULL) {
        inter_ring_stats_t ring;

        inter_ring_stats(moe->net.ring, &ring);
        moe->stats.commands_posted = ring.commands;
        moe->stats.post_delay_ns   = ring.delay_ns;
    }
    memcpy(moe->modes.stats_mask, moe->modes.step_mask, sched_mask_bytes(moe));
    moe->stats.pull_mask = moe->modes.stats_mask;
    moe->cur.state       = SCHED_STEP_IDLE;
}

strata_status_t sched_moe_combine_recv(sched_moe_t *moe, const float *topk_weights, void *out)
{
    int n = moe->cur.plan ? moe->cur.plan->num_tokens : 0;
    strata_status_t status = sched_check_combine(moe, SCHED_STEP_COMBINE_SENT, "combine_recv");

    if (status != STRATA_OK) {
        return status;
    }
    if (n > 0 && (topk_weights == NULL || out == NULL || ((uintptr_t)out & 15u) != 0)) {
        /* Refused before this rank takes part: it may retry while the peers wait. */
        UTIL_LOG_ERROR("moe: combine_recv of %d tokens needs topk_weights and out, 16-byte "
                       "aligned", n);
        return STRATA_ERR_INVALID;
    }
    if (moe->cur.expert_y == NULL) {
        UTIL_LOG_ERROR("moe: combine_recv of step %" PRIu64 ", whose results this rank "
                       "withheld: finish it with abort_step", moe->cur.step);
        return STRATA_ERR_INVALID;
    }
    status = moe->geo.num_peers == 0 ? sched_combine_node(moe, topk_weights, out)
             : moe->geo.rounds > 1   ? sched_reduce_rounds(moe, topk_weights, out)
                                     : sched_reduce_terms(moe, topk_weights, out);
    if (status != STRATA_OK) {
        return status;
    }
    sched_end_step(moe);
    return moe->cur.status;
}

/* Ends the step in progress here with every half its peers wait for: this rank's tokens
 * are summed nowhere and, unless combine_send gave them, its experts' results are
 * withheld. The step's input errors go with it. */
strata_status_t sched_moe_abort_step(sched_moe_t *moe)
{
    strata_moe_recv_t recv;
    strata_status_t status = STRATA_OK;

    if (moe->cur.state != SCHED_STEP_IDLE && intra_moe_capturing(moe->intra)) {
        UTIL_LOG_ERROR("moe: abort_step while the object's stream is being captured: a "
                       "graph would replay the abort; finish the step, end the capture first");
        return STRATA_ERR_UNSUPPORTED;
    }
    switch (moe->cur.state) {
    case SCHED_STEP_IDLE:
        return STRATA_OK;
    case SCHED_STEP_FAILED:
        return sched_refuse_mid_step(moe, "abort_step");
    case SCHED_STEP_DISPATCH_SENT:
        status = sched_moe_dispatch_recv(moe, &recv);
        if (moe->cur.state != SCHED_STEP_DISPATCHED) {
            return status;
        }
        /* fall through */
    case SCHED_STEP_DISPATCHED:
        status = sched_send_terms(moe, NULL);
        if (status != STRATA_OK) {
            return status;
        }
        /* fall through */
    case SCHED_STEP_COMBINE_SENT:
        status = moe->geo.num_peers == 0 ? sched_combine_node(moe, NULL, NULL)
                 : moe->geo.rounds > 1   ? sched_reduce_rounds(moe, NULL, NULL)
                                         : sched_reduce_terms(moe, NULL, NULL);
        break;
    }
    if (status != STRATA_OK) {
        return status;
    }
    UTIL_LOG_WARN("moe: step %" PRIu64 " aborted on this rank%s", moe->cur.step,
                  moe->cur.expert_y == NULL ? "; its experts' results were withheld" : "");
    sched_end_step(moe);
    moe->cur.status = STRATA_OK;
    moe->deferred   = STRATA_OK;
    return STRATA_OK;
}
