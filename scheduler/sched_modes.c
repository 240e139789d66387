/*
 * Per-expert modes agreed by every rank. Static modes (push, pull, a mask) are set on every
 * rank alike. Adaptive ones are decided by each expert's owner: after dispatch of step t it
 * decides from the rows its experts received, publishes the decision with step t+1's
 * counts (the header to each peer), and every rank moves the expert in that mode in step
 * t+2. A rank learns the decisions of its node's owners, and those its peers relayed, from
 * the node's mode boards in the heap, read and written with the device backend's copies so
 * that any backend's memory serves. Every header carries a digest of its sender's masks and
 * the node's dispatch compares every local rank's, so a step in which two ranks disagree
 * fails (both checks run in the kernels).
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A board: the step it is for, then the modes (bit: Pull) of its experts. */
typedef struct sched_board_head {
    uint64_t step;
    uint64_t pad[7];
} sched_board_head_t;

/* FNV-1a over the step's two masks. */
static uint64_t sched_mask_digest(const sched_moe_t *moe)
{
    uint64_t hash = UINT64_C(14695981039346656037);
    const uint64_t *masks[2] = {moe->modes.step_mask, moe->modes.combine_mask};

    for (int m = 0; m < 2; ++m) {
        for (int w = 0; w < moe->geo.mask_words; ++w) {
            for (int b = 0; b < 8; ++b) {
                hash = (hash ^ ((masks[m][w] >> (8 * b)) & 0xffu)) * UINT64_C(1099511628211);
            }
        }
    }
    return hash;
}

static char *sched_board(const sched_moe_t *moe, int local_rank, uint64_t step)
{
    return (char *)intra_heap_base(moe->heap, local_rank) + moe->modes.board_offset +
           (size_t)(step & 1) * moe->geo.board_bytes;
}

static void sched_set_bit(uint64_t *mask, int bit, bool value)
{
    if (value) {
        mask[bit / 64] |= UINT64_C(1) << (bit % 64);
    } else {
        mask[bit / 64] &= ~(UINT64_C(1) << (bit % 64));
    }
}

strata_status_t sched_modes_open(sched_moe_t *moe)
{
    sched_modes_t *m = &moe->modes;
    const sched_geometry_t *geo = &moe->geo;
    size_t words = (size_t)geo->mask_words;

    m->dispatch_mask = calloc(words, sizeof(uint64_t));
    m->combine_mask  = calloc(words, sizeof(uint64_t));
    m->step_mask     = calloc(words, sizeof(uint64_t));
    m->stats_mask    = calloc(words, sizeof(uint64_t));
    m->uploaded      = calloc(words, sizeof(uint64_t));
    m->decided       = calloc((size_t)geo->experts_per_rank, sizeof(bool));
    m->next_bits     = calloc((size_t)geo->own_words, sizeof(uint64_t));
    m->sent_bits     = calloc((size_t)geo->own_words, sizeof(uint64_t));
    m->node_tokens   = calloc((size_t)geo->experts_per_rank * (size_t)geo->num_nodes,
                              sizeof(int32_t));
    m->board_bits    = calloc(words * (size_t)geo->local_size, sizeof(uint64_t));
    m->board_mask    = calloc(words, sizeof(uint64_t));
    if (!m->dispatch_mask || !m->combine_mask || !m->step_mask || !m->stats_mask ||
        !m->uploaded || !m->decided || !m->next_bits || !m->sent_bits || !m->node_tokens ||
        !m->board_bits || !m->board_mask) {
        return STRATA_ERR_NO_MEMORY;
    }
    return STRATA_OK;
}

void sched_modes_close(sched_moe_t *moe)
{
    sched_modes_t *m = &moe->modes;

    free(m->dispatch_mask);
    free(m->combine_mask);
    free(m->step_mask);
    free(m->stats_mask);
    free(m->uploaded);
    free(m->decided);
    free(m->next_bits);
    free(m->sent_bits);
    free(m->node_tokens);
    free(m->board_bits);
    free(m->board_mask);
    free(m->mode_file);
    if (m->decider != NULL) {
        m->decider->destroy(m->decider_ctx);
    }
}

void sched_moe_shape(const sched_moe_t *moe, sched_moe_shape_t *shape_p)
{
    *shape_p = (sched_moe_shape_t){
        .num_local_experts = moe->geo.experts_per_rank,
        .num_nodes         = moe->geo.num_nodes,
        .node              = moe->geo.node,
        .rank              = moe->geo.rank,
        .row_bytes         = moe->geo.row_bytes,
        .mode              = moe->modes.mode,
        .exchange          = moe->geo.streamed ? STRATA_MOE_EXCHANGE_STREAMED
                                               : STRATA_MOE_EXCHANGE_WORST_CASE,
        .capacity_asked    = moe->capacity_asked,
        .mode_file         = moe->modes.mode_file,
    };
}

strata_status_t sched_moe_set_decider(sched_moe_t *moe, const sched_mode_decider_ops_t *ops,
                                      void *ctx, bool initial_pull)
{
    sched_modes_t *m = &moe->modes;

    if (moe->cur.step != 0 || m->decider != NULL) {
        UTIL_LOG_ERROR("moe: a decider is given once, before the first step");
        ops->destroy(ctx);
        return STRATA_ERR_INVALID;
    }
    m->decider     = ops;
    m->decider_ctx = ctx;
    sched_fill_masks(moe, initial_pull);
    for (int e = 0; e < moe->geo.experts_per_rank; ++e) {
        sched_set_bit(m->next_bits, e, initial_pull);
    }
    return STRATA_OK;
}

/* Wait until local rank l's board for this step is published, then read its bits. */
static strata_status_t sched_read_board(sched_moe_t *moe, int l, uint64_t *mask)
{
    char *board = sched_board(moe, l, moe->cur.step);
    uint64_t deadline = util_clock_now_ns() + moe->timeout_ns, seen = 0;
    strata_status_t status;

    for (;;) {
        status = intra_moe_read(moe->intra, &seen, board, sizeof(seen));
        if (status != STRATA_OK || seen == moe->cur.step) {
            break;
        }
        if (util_clock_now_ns() > deadline) {
            UTIL_LOG_ERROR("moe: local rank %d published no modes for step %" PRIu64, l,
                           moe->cur.step);
            return sched_intra_failure(moe, STRATA_ERR_TIMEOUT);
        }
        util_sleep_ns(UTIL_NSEC_PER_USEC * 20);
    }
    /* Acquire: the bits were copied before the step that was just seen. */
    atomic_thread_fence(memory_order_acquire);
    return status == STRATA_OK ? intra_moe_read(moe->intra, mask,
                                                board + sizeof(sched_board_head_t),
                                                sched_mask_bytes(moe))
                               : status;
}

/* Each expert's bit from the board of the local rank with its owner's local index. */
static strata_status_t sched_read_boards(sched_moe_t *moe)
{
    uint64_t *bits = moe->modes.board_bits;
    strata_status_t status = STRATA_OK;

    for (int l = 0; l < moe->geo.local_size && status == STRATA_OK; ++l) {
        status = sched_read_board(moe, l, bits + (size_t)l * (size_t)moe->geo.mask_words);
    }
    for (int e = 0; e < moe->params.num_experts && status == STRATA_OK; ++e) {
        int l = moe->geo.rank_local[e / moe->geo.experts_per_rank];

        sched_set_bit(moe->modes.dispatch_mask, e,
                      sched_mask_test(bits + (size_t)l * (size_t)moe->geo.mask_words, e));
    }
    if (status == STRATA_OK) {
        memcpy(moe->modes.combine_mask, moe->modes.dispatch_mask, sched_mask_bytes(moe));
    }
    return status;
}

strata_status_t sched_modes_begin_step(sched_moe_t *moe)
{
    sched_modes_t *m = &moe->modes;
    strata_status_t status = STRATA_OK;

    if (m->decider != NULL) {
        memcpy(m->sent_bits, m->next_bits, sizeof(uint64_t) * (size_t)moe->geo.own_words);
        if (moe->cur.step >= 2) { /* step 2's boards still hold the initial modes */
            status = sched_read_boards(moe);
        }
    }
    memcpy(m->step_mask, m->dispatch_mask, sched_mask_bytes(moe));
    m->digest = sched_mask_digest(moe);
    return status;
}

static void sched_copy_bits(uint64_t *mask, int first, const uint64_t *bits, int count)
{
    for (int i = 0; i < count; ++i) {
        sched_set_bit(mask, first + i, sched_mask_test(bits, i));
    }
}

/* The bits a peer's header of this step carries, read from the network area. */
static strata_status_t sched_header_bits(sched_moe_t *moe, int source, uint64_t *bits)
{
    size_t at = moe->net.offsets.headers +
                ((size_t)source * 2 + (size_t)(moe->cur.step & 1)) * moe->geo.header_bytes;

    return intra_moe_read(moe->intra, bits, moe->net.area + at + sizeof(intra_net_header_t),
                          sizeof(uint64_t) * (size_t)moe->geo.own_words);
}

strata_status_t sched_modes_publish(sched_moe_t *moe)
{
    const sched_geometry_t *geo = &moe->geo;
    int me = geo->rank, local = geo->rank_local[me], per = geo->experts_per_rank;
    uint64_t bits[INTRA_NET_MAX_OWN_WORDS], step = moe->cur.step + 1;
    uint64_t *mask = moe->modes.board_mask;
    char *board = sched_board(moe, local, step);
    strata_status_t status = STRATA_OK;

    if (moe->modes.decider == NULL) {
        return STRATA_OK;
    }
    memset(mask, 0, sched_mask_bytes(moe));
    sched_copy_bits(mask, me * per, moe->modes.sent_bits, per);
    for (int p = 0; p < geo->num_peers && status == STRATA_OK; ++p) {
        int source = geo->peers[p];

        if (geo->rank_local[source] == local) { /* relayed for the node's ranks */
            status = sched_header_bits(moe, source, bits);
            sched_copy_bits(mask, source * per, bits, per);
        }
    }
    if (status == STRATA_OK) {
        status = intra_moe_write(moe->intra, board + sizeof(sched_board_head_t), mask,
                                 sched_mask_bytes(moe));
    }
    /* Release: the bits above before the step (copies on one stream land in order); the
     * node's ranks read them after it. */
    atomic_thread_fence(memory_order_release);
    if (status == STRATA_OK) {
        status = intra_moe_write(moe->intra, board, &step, sizeof(step));
    }
    return status;
}

void sched_modes_decide(sched_moe_t *moe)
{
    sched_modes_t *m = &moe->modes;
    int nodes = moe->geo.num_nodes, per = moe->geo.experts_per_rank;

    if (m->decider == NULL) {
        return;
    }
    memset(m->node_tokens, 0, sizeof(int32_t) * (size_t)per * (size_t)nodes);
    for (int e = 0; e < per; ++e) {
        for (int row = 0; row < moe->public_count[e]; ++row) {
            int rank = moe->public_src[(size_t)e * (size_t)moe->geo.capacity + (size_t)row].rank;

            m->node_tokens[(size_t)e * (size_t)nodes + (size_t)moe->geo.rank_node[rank]]++;
        }
    }
    m->decider->decide(m->decider_ctx, m->node_tokens, m->decided);
    for (int e = 0; e < per; ++e) {
        sched_set_bit(m->next_bits, e, m->decided[e]);
    }
}

strata_status_t sched_moe_set_pull_mask(sched_moe_t *moe, const uint64_t *dispatch_mask,
                                        const uint64_t *combine_mask)
{
    sched_modes_t *m = &moe->modes;
    int words = moe->geo.mask_words;

    if (moe->cur.state != SCHED_STEP_IDLE) {
        return sched_refuse_mid_step(moe, "set_pull_mask (masks change between steps)");
    }
    if (m->decider != NULL) {
        UTIL_LOG_ERROR("moe: in adaptive mode the experts' owners set the modes");
        return STRATA_ERR_INVALID;
    }
    if (moe->geo.exact) {
        UTIL_LOG_ERROR("moe: an object that receives exactly moves every row its own way: "
                       "it takes no pull masks");
        return STRATA_ERR_INVALID;
    }
    if (moe->experts.to_internal != NULL) { /* the caller's ids, not the object's */
        sched_experts_mask(moe, dispatch_mask, m->dispatch_mask);
        sched_experts_mask(moe, combine_mask, m->combine_mask);
        return STRATA_OK;
    }
    memset(m->dispatch_mask, 0, sched_mask_bytes(moe));
    memset(m->combine_mask, 0, sched_mask_bytes(moe));
    if (dispatch_mask != NULL) {
        memcpy(m->dispatch_mask, dispatch_mask, sizeof(uint64_t) * (size_t)words);
    }
    if (combine_mask != NULL) {
        memcpy(m->combine_mask, combine_mask, sizeof(uint64_t) * (size_t)words);
    }
    if (moe->params.num_experts % 64 != 0) {
        uint64_t keep = (UINT64_C(1) << (moe->params.num_experts % 64)) - 1;

        m->dispatch_mask[words - 1] &= keep;
        m->combine_mask[words - 1] &= keep;
    }
    return STRATA_OK;
}

void sched_fill_masks(sched_moe_t *moe, bool pull)
{
    memset(moe->modes.dispatch_mask, 0, sched_mask_bytes(moe));
    for (int e = 0; pull && e < moe->params.num_experts; ++e) {
        moe->modes.dispatch_mask[e / 64] |= UINT64_C(1) << (e % 64);
    }
    memcpy(moe->modes.combine_mask, moe->modes.dispatch_mask, sched_mask_bytes(moe));
}

void sched_node_mask(const sched_moe_t *moe, const uint64_t *global, uint64_t *node_mask)
{
    memset(node_mask, 0, sizeof(uint64_t) * SCHED_MASK_WORDS);
    for (int j = 0; j < moe->geo.experts_per_node; ++j) {
        if (sched_mask_test(global, sched_node_expert(&moe->geo, moe->geo.node, j))) {
            node_mask[j / 64] |= UINT64_C(1) << (j % 64);
        }
    }
}
