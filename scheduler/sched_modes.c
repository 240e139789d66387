/*
 * Per-expert modes agreed by every rank. Static modes (push, pull, a mask) are set on every
 * rank alike. Adaptive ones are decided by each expert's owner: after dispatch of step t it
 * decides from the rows its experts received, publishes the decision with step t+1's
 * counts (the header to each peer), and every rank moves the expert in that mode in step
 * t+2. A rank learns the decisions of its node's owners, and those its peers relayed, from
 * the node's mode boards. Every header carries a digest of its sender's masks, and every
 * rank leaves its digest on its board, so a step in which two ranks disagree fails.
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <string.h>

/* FNV-1a over the step's two masks. */
static uint64_t sched_mask_digest(const sched_moe_t *moe)
{
    uint64_t hash = UINT64_C(14695981039346656037);
    const uint64_t *masks[2] = {moe->step_dispatch_mask, moe->combine_mask};

    for (int m = 0; m < 2; ++m) {
        for (int w = 0; w < moe->mask_words; ++w) {
            for (int b = 0; b < 8; ++b) {
                hash = (hash ^ ((masks[m][w] >> (8 * b)) & 0xffu)) * UINT64_C(1099511628211);
            }
        }
    }
    return hash;
}

static sched_board_t *sched_board(const sched_moe_t *moe, int local_rank, uint64_t step)
{
    return (sched_board_t *)((char *)intra_heap_base(moe->heap, local_rank) + moe->board_offset +
                             (size_t)(step & 1) * moe->board_bytes);
}

static void sched_set_bit(uint64_t *mask, int bit, bool value)
{
    if (value) {
        mask[bit / 64] |= UINT64_C(1) << (bit % 64);
    } else {
        mask[bit / 64] &= ~(UINT64_C(1) << (bit % 64));
    }
}

void sched_moe_shape(const sched_moe_t *moe, sched_moe_shape_t *shape_p)
{
    *shape_p = (sched_moe_shape_t){
        .num_local_experts = moe->experts_per_rank,
        .num_nodes         = moe->world.num_nodes,
        .node              = moe->world.rank_node[moe->world.rank],
        .row_bytes         = moe->row_bytes,
        .mode              = moe->mode,
        .mode_file         = moe->mode_file,
        .host_heap         = moe->host_heap,
    };
}

strata_status_t sched_moe_set_decider(sched_moe_t *moe, const sched_mode_decider_ops_t *ops,
                                      void *ctx, bool initial_pull)
{
    if (!moe->host_heap) {
        /* The boards are read and written by the host; a device heap is not host memory. */
        UTIL_LOG_ERROR("moe: adaptive modes need the host backend; the %s heap is device "
                       "memory", moe->world.device->name);
        ops->destroy(ctx);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (moe->step != 0 || moe->decider != NULL) {
        UTIL_LOG_ERROR("moe: a decider is given once, before the first step");
        ops->destroy(ctx);
        return STRATA_ERR_INVALID;
    }
    moe->decider     = ops;
    moe->decider_ctx = ctx;
    sched_fill_masks(moe, initial_pull);
    for (int e = 0; e < moe->experts_per_rank; ++e) {
        sched_set_bit(moe->next_bits, e, initial_pull);
    }
    return STRATA_OK;
}

/* Wait until a board's field shows this step. */
static strata_status_t sched_wait_board(sched_moe_t *moe, int l, _Atomic uint64_t *field,
                                        const char *what)
{
    uint64_t deadline = util_clock_now_ns() + moe->timeout_ns;

    /* Acquire: pairs with the writer's release in sched_modes_publish or _begin_step. */
    while (atomic_load_explicit(field, memory_order_acquire) != moe->step) {
        if (util_clock_now_ns() > deadline) {
            UTIL_LOG_ERROR("moe: local rank %d published no %s for step %" PRIu64, l, what,
                           moe->step);
            return sched_intra_failure(moe, STRATA_ERR_TIMEOUT);
        }
        util_sleep_ns(UTIL_NSEC_PER_USEC * 20);
    }
    return STRATA_OK;
}

/* Each expert's bit from the board of the local rank with its owner's local index. */
static strata_status_t sched_read_boards(sched_moe_t *moe)
{
    for (int l = 0; l < moe->local_size; ++l) {
        strata_status_t status = sched_wait_board(moe, l, &sched_board(moe, l, moe->step)->step,
                                                  "modes");

        if (status != STRATA_OK) {
            return status;
        }
    }
    for (int e = 0; e < moe->params.num_experts; ++e) {
        int l = moe->world.rank_local[e / moe->experts_per_rank];

        sched_set_bit(moe->dispatch_mask, e,
                      sched_mask_test(sched_board(moe, l, moe->step)->mask, e));
    }
    memcpy(moe->combine_mask, moe->dispatch_mask, sched_mask_bytes(moe));
    return STRATA_OK;
}

strata_status_t sched_modes_begin_step(sched_moe_t *moe)
{
    strata_status_t status = STRATA_OK;

    if (moe->decider != NULL) {
        memcpy(moe->sent_bits, moe->next_bits, sizeof(uint64_t) * (size_t)moe->own_words);
        if (moe->step >= 2) { /* step 1 and 2 keep the initial modes */
            status = sched_read_boards(moe);
        }
    }
    memcpy(moe->step_dispatch_mask, moe->dispatch_mask, sched_mask_bytes(moe));
    moe->step_digest = sched_mask_digest(moe);
    if (moe->host_heap) {
        sched_board_t *mine = sched_board(moe, moe->world.rank_local[moe->world.rank], moe->step);

        mine->digest = moe->step_digest;
        /* Release: the digest before its step; sched_modes_check_node acquires it. */
        atomic_store_explicit(&mine->digest_step, moe->step, memory_order_release);
    }
    return status;
}

/*
 * Every local rank left its digest before its part of the node's dispatch, which this
 * rank's dispatch has waited for; the next write of the slot is two steps away.
 */
strata_status_t sched_modes_check_node(sched_moe_t *moe)
{
    for (int l = 0; moe->host_heap && l < moe->local_size; ++l) {
        sched_board_t *board = sched_board(moe, l, moe->step);
        strata_status_t status = sched_wait_board(moe, l, &board->digest_step, "mask digest");

        if (status != STRATA_OK) {
            return status;
        }
        if (board->digest != moe->step_digest) {
            UTIL_LOG_ERROR("moe: local rank %d moved the experts of step %" PRIu64 " in other "
                           "modes than this rank: every rank must set the same pull masks and "
                           "mode", l, moe->step);
            return STRATA_ERR_INTERNAL;
        }
    }
    return STRATA_OK;
}

void sched_modes_fill_header(const sched_moe_t *moe, sched_header_t *header)
{
    header->mask_digest = moe->step_digest;
    memcpy(header->next, moe->sent_bits, sizeof(uint64_t) * (size_t)moe->own_words);
}

strata_status_t sched_modes_check_header(const sched_moe_t *moe, int source,
                                         const sched_header_t *header)
{
    if (header->mask_digest == moe->step_digest) {
        return STRATA_OK;
    }
    UTIL_LOG_ERROR("moe: rank %d moves the experts of step %" PRIu64 " in other modes than "
                   "this rank (mask digest %016" PRIx64 ", ours %016" PRIx64 "): every rank "
                   "must set the same pull masks and mode", source, moe->step,
                   header->mask_digest, moe->step_digest);
    return STRATA_ERR_INTERNAL;
}

static void sched_copy_bits(uint64_t *mask, int first, const uint64_t *bits, int count)
{
    for (int i = 0; i < count; ++i) {
        sched_set_bit(mask, first + i, sched_mask_test(bits, i));
    }
}

void sched_modes_publish(sched_moe_t *moe)
{
    int me = moe->world.rank, local = moe->world.rank_local[me], per = moe->experts_per_rank;
    sched_board_t *board;

    if (moe->decider == NULL) {
        return;
    }
    board = sched_board(moe, local, moe->step + 1);
    memset(board->mask, 0, sizeof(uint64_t) * (size_t)moe->mask_words);
    sched_copy_bits(board->mask, me * per, moe->sent_bits, per);
    for (int p = 0; p < moe->num_peers; ++p) {
        int source = moe->peers[p];
        const sched_header_t *h =
            (const sched_header_t *)sched_net(moe, sched_header_at(moe, source, moe->step));

        if (moe->world.rank_local[source] == local) { /* relayed for the node's ranks */
            sched_copy_bits(board->mask, source * per, h->next, per);
        }
    }
    /* Release: the bits above before the step; the node's ranks acquire it. */
    atomic_store_explicit(&board->step, moe->step + 1, memory_order_release);
}

void sched_modes_decide(sched_moe_t *moe)
{
    int nodes = moe->world.num_nodes, per = moe->experts_per_rank;

    if (moe->decider == NULL) {
        return;
    }
    memset(moe->node_tokens, 0, sizeof(int32_t) * (size_t)per * (size_t)nodes);
    for (int e = 0; e < per; ++e) {
        for (int row = 0; row < moe->recv.count[e]; ++row) {
            int rank = moe->src[(size_t)e * (size_t)moe->params.capacity + (size_t)row].rank;

            moe->node_tokens[(size_t)e * (size_t)nodes + (size_t)moe->world.rank_node[rank]]++;
        }
    }
    moe->decider->decide(moe->decider_ctx, moe->node_tokens, moe->decided);
    for (int e = 0; e < per; ++e) {
        sched_set_bit(moe->next_bits, e, moe->decided[e]);
    }
}
