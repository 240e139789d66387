/*
 * Dispatch across nodes, in two rounds. Round one: every rank writes each peer a header
 * with its counts and, into a private slot, up to spec_tokens entries of Push tokens, so
 * that a step whose counts fit needs no round trip. Round two: the receiver, knowing every
 * count, hands each source a place in its overflow area; the source writes the rest there
 * (grant), and the receiver fetches Pull tokens itself by RDMA read, or where the
 * transport cannot read, has them pushed by the same grant. Then the node's tokens and the
 * received ones go through the intra tier to their experts' ranks.
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <string.h>

static size_t sched_staging_at(const sched_moe_t *moe, int dest)
{
    return moe->net_layout.staging +
           (size_t)dest * (size_t)moe->params.max_tokens * moe->entry_bytes;
}

static size_t sched_spec_at(const sched_moe_t *moe, int source)
{
    return moe->net_layout.spec + (size_t)source * (size_t)moe->spec_tokens * moe->entry_bytes;
}

/* Whether every expert the entry's token has at the peer moves in Pull form. */
static bool sched_entry_pulls(const sched_moe_t *moe, int peer_node, const int32_t *experts)
{
    bool any = false;

    for (int k = 0; k < moe->params.topk; ++k) {
        if (experts[k] >= 0) {
            if (!sched_mask_test(moe->step_dispatch_mask,
                                 sched_node_expert(moe, peer_node, experts[k]))) {
                return false;
            }
            any = true;
        }
    }
    return any;
}

static void sched_pack_entry(const sched_moe_t *moe, char *entry, int token,
                             const int32_t *experts, const void *x, const float *x_scales)
{
    sched_record_t *record = (sched_record_t *)entry;

    record->token = token;
    memcpy(record->experts, experts, sizeof(int32_t) * (size_t)moe->params.topk);
    memcpy(entry + moe->record_bytes, (const char *)x + (size_t)token * moe->row_bytes,
           moe->row_bytes);
    if (moe->scale_count > 0) {
        memcpy(entry + moe->record_bytes + moe->row_bytes,
               x_scales + (size_t)token * (size_t)moe->scale_count,
               sizeof(float) * (size_t)moe->scale_count);
    }
}

/* The peer's entries in the staging area: Push tokens first, then Pull ones; and the
 * (token, slot) of each term it will return, in the same order. */
static void sched_pack_peer(sched_moe_t *moe, int p, const void *x, const float *x_scales)
{
    const sched_plan_t *plan = moe->plan;
    int dest = moe->peers[p], node = moe->world.rank_node[dest], topk = moe->params.topk;
    char *staging = sched_net(moe, sched_staging_at(moe, dest));
    int32_t *ret_map = moe->ret_map + (size_t)p * (size_t)moe->params.max_tokens * (size_t)topk;
    sched_peer_step_t *ps = &moe->peer_step[p];
    int n = 0, terms = 0;

    ps->send_push = ps->send_pull = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (int e = plan->peer_first[p]; e < plan->peer_first[p + 1]; ++e) {
            const int32_t *experts = &plan->experts[(size_t)e * (size_t)topk];

            if (sched_entry_pulls(moe, node, experts) != (pass == 1)) {
                continue;
            }
            sched_pack_entry(moe, staging + (size_t)n++ * moe->entry_bytes, plan->tokens[e],
                             experts, x, x_scales);
            for (int k = 0; k < topk; ++k) {
                if (experts[k] >= 0) {
                    ret_map[terms++] = plan->tokens[e] * topk + k;
                }
            }
            *(pass == 0 ? &ps->send_push : &ps->send_pull) += 1;
        }
    }
}

/* Round one to peer p: the header, and the first Push entries into our private slot. */
static strata_status_t sched_send_round_one(sched_moe_t *moe, int p)
{
    int dest = moe->peers[p], me = moe->world.rank;
    const sched_peer_step_t *ps = &moe->peer_step[p];
    size_t out = moe->net_layout.out_headers + (size_t)dest * moe->header_bytes;
    sched_header_t *header = (sched_header_t *)sched_net(moe, out);
    int first = UTIL_MIN(ps->send_push, moe->spec_tokens);
    inter_request_t *req;
    strata_status_t status;

    *header = (sched_header_t){.magic = SCHED_HEADER_MAGIC, .step = moe->step,
                               .num_push = ps->send_push, .num_pull = ps->send_pull};
    sched_modes_fill_header(moe, header);
    status = inter_engine_write(moe->world.engine, dest, moe->net_mr, out, &moe->net_desc[dest],
                                sched_header_at(moe, me, moe->step), moe->header_bytes, true,
                                sched_imm(moe, SCHED_IMM_HEADER, me), &req);
    if (status != STRATA_OK) {
        return status;
    }
    sched_keep_request(moe, req);
    if (first == 0) {
        return STRATA_OK;
    }
    status = inter_engine_write(moe->world.engine, dest, moe->net_mr, sched_staging_at(moe, dest),
                                &moe->net_desc[dest], sched_spec_at(moe, me),
                                (size_t)first * moe->entry_bytes, true,
                                sched_imm(moe, SCHED_IMM_SPEC, me), &req);
    if (status == STRATA_OK) {
        sched_keep_request(moe, req);
    }
    return status;
}

static strata_status_t sched_check_send(const sched_moe_t *moe, const sched_plan_t *plan,
                                        const void *x, const float *x_scales)
{
    if (moe->state != SCHED_STEP_IDLE) {
        UTIL_LOG_ERROR("moe: dispatch_send %s", moe->state == SCHED_STEP_FAILED
                                                    ? "after a failed step; destroy the object"
                                                    : "out of order: a step is dispatch_send, "
                                                      "dispatch_recv, combine_send, combine_recv");
        return moe->state == SCHED_STEP_FAILED ? STRATA_ERR_PEER_FAILED : STRATA_ERR_INVALID;
    }
    if (plan == NULL || plan->moe != moe) {
        UTIL_LOG_ERROR("moe: dispatch_send needs a layout made by this object");
    } else if (plan->num_tokens > 0 && (x == NULL || ((uintptr_t)x & 15u) != 0)) {
        UTIL_LOG_ERROR("moe: dispatch_send of %d tokens needs x, 16-byte aligned",
                       plan->num_tokens);
    } else if (plan->num_tokens > 0 && (moe->scale_count > 0) != (x_scales != NULL)) {
        UTIL_LOG_ERROR("moe: x_scales must be given for fp8 tokens, and only for them");
    } else {
        return STRATA_OK;
    }
    return STRATA_ERR_INVALID;
}

strata_status_t sched_moe_dispatch_send(sched_moe_t *moe, const sched_plan_t *plan,
                                        const void *x, const float *x_scales)
{
    size_t n = plan ? (size_t)plan->num_tokens : 0;
    strata_status_t status = sched_check_send(moe, plan, x, x_scales);

    if (status != STRATA_OK) {
        return status;
    }
    moe->step         += 1;
    moe->step_start_ns = util_clock_now_ns();
    moe->plan          = plan;
    moe->x             = x;
    moe->x_scales      = x_scales;
    moe->step_status   = plan->had_bad_ids ? STRATA_ERR_INVALID : STRATA_OK;
    status = sched_modes_begin_step(moe);
    if (status != STRATA_OK) {
        return sched_fail(moe, status, "reading the step's modes");
    }
    memcpy(moe->host_idx, plan->node_idx, n * (size_t)moe->params.topk * sizeof(int64_t));
    if (moe->num_peers > 0 && n > 0) {
        /* The intra tier takes one array: this rank's tokens first, then the received. */
        memcpy(moe->aug_x, x, n * moe->row_bytes);
        if (moe->scale_count > 0) {
            memcpy(moe->aug_scales, x_scales, n * (size_t)moe->scale_count * sizeof(float));
        }
    }
    moe->stats.tokens_to_nodes = moe->stats.tokens_round_two = moe->stats.bytes_to_nodes = 0;
    for (int p = 0; p < moe->num_peers && status == STRATA_OK; ++p) {
        const sched_peer_step_t *ps = &moe->peer_step[p];

        sched_pack_peer(moe, p, x, x_scales);
        status = sched_send_round_one(moe, p);
        moe->stats.tokens_to_nodes += (uint64_t)(ps->send_push + ps->send_pull);
        moe->stats.bytes_to_nodes  += (uint64_t)(ps->send_push + ps->send_pull) * moe->entry_bytes;
    }
    if (status != STRATA_OK) {
        return sched_fail(moe, status, "sending round one");
    }
    moe->state = SCHED_STEP_DISPATCH_SENT;
    return STRATA_OK;
}

/* Receiver: every peer's header, checked. */
static strata_status_t sched_read_headers(sched_moe_t *moe)
{
    for (int p = 0; p < moe->num_peers; ++p) {
        int source = moe->peers[p];
        const sched_header_t *h =
            (const sched_header_t *)sched_net(moe, sched_header_at(moe, source, moe->step));
        strata_status_t status = sched_wait_imm(moe, SCHED_IMM_HEADER, source, 1, "counts");

        if (status != STRATA_OK) {
            return status;
        }
        if (h->magic != SCHED_HEADER_MAGIC || h->step != moe->step || h->num_push < 0 ||
            h->num_pull < 0 || h->num_push + h->num_pull > moe->params.max_tokens) {
            UTIL_LOG_ERROR("moe: rank %d's header for step %" PRIu64 " is step %" PRIu64
                           " with %d + %d tokens: the ranks are not in the same step",
                           source, moe->step, h->step, h->num_push, h->num_pull);
            return STRATA_ERR_INTERNAL;
        }
        status = sched_modes_check_header(moe, source, h);
        if (status != STRATA_OK) {
            return status;
        }
        moe->peer_step[p].recv_push = h->num_push;
        moe->peer_step[p].recv_pull = h->num_pull;
    }
    return STRATA_OK;
}

/* Receiver: places in the overflow area, grants where the source writes, reads where we
 * fetch. Each source's rest lands contiguously: its round-two Push entries, then Pull. */
static strata_status_t sched_grant_round_two(sched_moe_t *moe)
{
    int me = moe->world.rank;
    int64_t cursor = 0;
    inter_request_t *req;
    strata_status_t status = STRATA_OK;

    for (int p = 0; p < moe->num_peers && status == STRATA_OK; ++p) {
        sched_peer_step_t *ps = &moe->peer_step[p];
        int source = moe->peers[p], first = UTIL_MIN(ps->recv_push, moe->spec_tokens);
        int rest_push = ps->recv_push - first;
        size_t out = moe->net_layout.out_grants + (size_t)source * SCHED_CTRL_BYTES;
        sched_grant_t *grant = (sched_grant_t *)sched_net(moe, out);

        ps->recv_offset = cursor;
        ps->granted     = rest_push + (moe->pull_read ? 0 : ps->recv_pull);
        cursor         += rest_push + ps->recv_pull;
        if (ps->granted > 0) {
            *grant = (sched_grant_t){.magic = SCHED_GRANT_MAGIC, .step = moe->step,
                                     .offset = ps->recv_offset, .first = first,
                                     .count = ps->granted};
            status = inter_engine_write(moe->world.engine, source, moe->net_mr, out,
                                        &moe->net_desc[source],
                                        moe->net_layout.grants + (size_t)me * SCHED_CTRL_BYTES,
                                        sizeof(*grant), true,
                                        sched_imm(moe, SCHED_IMM_GRANT, me), &req);
            if (status == STRATA_OK) {
                sched_keep_request(moe, req);
            }
        }
        if (status == STRATA_OK && moe->pull_read && ps->recv_pull > 0) {
            size_t at = moe->net_layout.overflow +
                        (size_t)(ps->recv_offset + rest_push) * moe->entry_bytes;

            status = inter_engine_read(moe->world.engine, source, moe->net_mr, at,
                                       &moe->net_desc[source],
                                       sched_staging_at(moe, me) +
                                           (size_t)ps->recv_push * moe->entry_bytes,
                                       (size_t)ps->recv_pull * moe->entry_bytes, &req);
            if (status == STRATA_OK) {
                sched_keep_request(moe, req);
            }
        }
    }
    return status;
}

/* Source: for each peer that needs round two from us, wait for its grant and write. */
static strata_status_t sched_send_round_two(sched_moe_t *moe)
{
    int me = moe->world.rank;

    for (int p = 0; p < moe->num_peers; ++p) {
        const sched_peer_step_t *ps = &moe->peer_step[p];
        int dest = moe->peers[p], first = UTIL_MIN(ps->send_push, moe->spec_tokens);
        const sched_grant_t *grant = (const sched_grant_t *)sched_net(
            moe, moe->net_layout.grants + (size_t)dest * SCHED_CTRL_BYTES);
        inter_request_t *req;
        strata_status_t status;

        if (ps->send_push == first && (moe->pull_read || ps->send_pull == 0)) {
            continue;
        }
        status = sched_wait_imm(moe, SCHED_IMM_GRANT, dest, 1, "a round-two grant");
        if (status != STRATA_OK) {
            return status;
        }
        if (grant->magic != SCHED_GRANT_MAGIC || grant->step != moe->step ||
            grant->first != first || grant->count <= 0 ||
            grant->first + grant->count > ps->send_push + ps->send_pull || grant->offset < 0 ||
            grant->offset + grant->count >
                (int64_t)moe->num_peers * (int64_t)moe->params.max_tokens) {
            UTIL_LOG_ERROR("moe: rank %d's grant for step %" PRIu64 " (step %" PRIu64 ", "
                           "entries %d+%d at %" PRId64 ") does not match our counts",
                           dest, moe->step, grant->step, grant->first, grant->count,
                           grant->offset);
            return STRATA_ERR_INTERNAL;
        }
        status = inter_engine_write(
            moe->world.engine, dest, moe->net_mr,
            sched_staging_at(moe, dest) + (size_t)grant->first * moe->entry_bytes,
            &moe->net_desc[dest],
            moe->net_layout.overflow + (size_t)grant->offset * moe->entry_bytes,
            (size_t)grant->count * moe->entry_bytes, true,
            sched_imm(moe, SCHED_IMM_OVERFLOW, me), &req);
        if (status != STRATA_OK) {
            return status;
        }
        sched_keep_request(moe, req);
        moe->stats.tokens_round_two += (uint64_t)grant->count;
    }
    return STRATA_OK;
}

/* Receiver: round one's and round two's data from every peer, and our reads. */
static strata_status_t sched_wait_entries(sched_moe_t *moe)
{
    strata_status_t status = STRATA_OK;

    for (int p = 0; p < moe->num_peers && status == STRATA_OK; ++p) {
        const sched_peer_step_t *ps = &moe->peer_step[p];
        int source = moe->peers[p], first = UTIL_MIN(ps->recv_push, moe->spec_tokens);
        inter_engine_t *engine = moe->world.engine;

        if (first > 0) {
            status = sched_wait_imm(moe, SCHED_IMM_SPEC, source,
                                    inter_engine_write_chunks(engine, source,
                                                              (size_t)first * moe->entry_bytes),
                                    "round one");
        }
        if (status == STRATA_OK && ps->granted > 0) {
            status = sched_wait_imm(
                moe, SCHED_IMM_OVERFLOW, source,
                inter_engine_write_chunks(engine, source, (size_t)ps->granted * moe->entry_bytes),
                "round two");
        }
    }
    return status == STRATA_OK ? sched_finish_requests(moe) : status;
}

/* One received entry into the intra tier's input, and its terms into the page lists. */
static strata_status_t sched_unpack_entry(sched_moe_t *moe, int p, const char *entry, int aug,
                                          int *pages)
{
    const sched_record_t *record = (const sched_record_t *)entry;
    int topk = moe->params.topk;

    if (record->token < 0 || record->token >= moe->params.max_tokens) {
        UTIL_LOG_ERROR("moe: rank %d sent token index %d", moe->peers[p], record->token);
        return STRATA_ERR_INTERNAL;
    }
    memcpy(moe->aug_x + (size_t)aug * moe->row_bytes, entry + moe->record_bytes, moe->row_bytes);
    if (moe->scale_count > 0) {
        memcpy(moe->aug_scales + (size_t)aug * (size_t)moe->scale_count,
               entry + moe->record_bytes + moe->row_bytes,
               sizeof(float) * (size_t)moe->scale_count);
    }
    moe->aug_origin[2 * aug]     = moe->peers[p];
    moe->aug_origin[2 * aug + 1] = record->token;
    for (int k = 0; k < topk; ++k) {
        int32_t expert = record->experts[k];

        if (expert < -1 || expert >= moe->experts_per_node) {
            UTIL_LOG_ERROR("moe: rank %d sent expert %d for token %d", moe->peers[p], expert,
                           record->token);
            return STRATA_ERR_INTERNAL;
        }
        moe->host_idx[(size_t)aug * (size_t)topk + (size_t)k] = expert;
        if (expert >= 0) { /* the order the source's ret_map expects */
            moe->src_pages[*pages] = (uint32_t)(aug * topk + k);
            *pages += 1;
        }
    }
    return STRATA_OK;
}

/* The intra tier's input: this rank's tokens, then each peer's in the order it sent them. */
static strata_status_t sched_unpack(sched_moe_t *moe)
{
    int aug = moe->plan->num_tokens, pages = 0;
    strata_status_t status = STRATA_OK;

    for (int p = 0; p < moe->num_peers && status == STRATA_OK; ++p) {
        sched_peer_step_t *ps = &moe->peer_step[p];
        int first = UTIL_MIN(ps->recv_push, moe->spec_tokens);
        const char *spec = sched_net(moe, sched_spec_at(moe, moe->peers[p]));
        const char *rest = sched_net(moe, moe->net_layout.overflow +
                                              (size_t)ps->recv_offset * moe->entry_bytes);

        ps->terms_first = pages;
        for (int i = 0; i < ps->recv_push + ps->recv_pull && status == STRATA_OK; ++i) {
            const char *entry = i < first ? spec + (size_t)i * moe->entry_bytes
                                          : rest + (size_t)(i - first) * moe->entry_bytes;

            status = sched_unpack_entry(moe, p, entry, aug++, &pages);
        }
        ps->num_terms = pages - ps->terms_first;
    }
    moe->num_aug = aug;
    return status;
}

/* Received rows' sources as (rank, token, slot), from every local rank's origin table. */
static strata_status_t sched_translate_sources(sched_moe_t *moe, const intra_moe_recv_t *ir)
{
    const struct intra_device_ops *device = moe->world.device;
    size_t table = (size_t)moe->max_aug * 2 * sizeof(int32_t);
    size_t rows = (size_t)ir->experts_per_rank * (size_t)ir->capacity;
    strata_status_t status = device->mem_copy(moe->intra_src, ir->src,
                                              rows * sizeof(intra_moe_source_t));

    for (int l = 0; l < moe->local_size && status == STRATA_OK; ++l) {
        status = device->mem_copy(moe->origins + (size_t)l * (size_t)moe->max_aug * 2,
                                  (char *)intra_heap_base(moe->heap, l) + moe->origin_offset,
                                  table);
    }
    for (int e = 0; e < ir->experts_per_rank && status == STRATA_OK; ++e) {
        for (int row = 0; row < ir->count[e]; ++row) {
            size_t at = (size_t)e * (size_t)ir->capacity + (size_t)row;
            const intra_moe_source_t *s = &moe->intra_src[at];
            const int32_t *origin =
                &moe->origins[((size_t)s->rank * (size_t)moe->max_aug + (size_t)s->token) * 2];

            moe->src[at] = (strata_moe_source_t){.rank = origin[0], .token = origin[1],
                                                 .slot = s->slot};
        }
    }
    return status;
}

static void sched_fill_recv(sched_moe_t *moe, const intra_moe_recv_t *ir)
{
    moe->recv = (strata_moe_recv_t){
        .num_local_experts = ir->experts_per_rank,
        .first_expert      = moe->world.rank * moe->experts_per_rank,
        .capacity          = ir->capacity,
        .row_bytes         = ir->row_bytes,
        .y_row_bytes       = moe->y_row_bytes,
        .count             = ir->count,
        .x                 = ir->x,
        .x_scales          = ir->scales,
        .scale_stride      = ir->scale_stride,
        .src               = moe->src,
        .expert_y          = ir->expert_y,
    };
}

/* Through the intra tier to the experts' ranks on this node. */
static strata_status_t sched_dispatch_node(sched_moe_t *moe, intra_moe_recv_t *ir)
{
    uint64_t node_mask[SCHED_MASK_WORDS];
    bool across = moe->num_peers > 0;
    strata_status_t status;

    status = moe->world.device->mem_copy(
        (char *)intra_heap_base(moe->heap, moe->world.rank_local[moe->world.rank]) +
            moe->origin_offset,
        moe->aug_origin, (size_t)moe->num_aug * 2 * sizeof(int32_t));
    if (status != STRATA_OK) {
        return status;
    }
    sched_node_mask(moe, moe->step_dispatch_mask, node_mask);
    status = moe->world.device->mem_copy(moe->aug_idx, moe->host_idx,
                                         (size_t)moe->num_aug * (size_t)moe->params.topk *
                                             sizeof(int64_t));
    if (status != STRATA_OK) {
        return status;
    }
    return intra_moe_dispatch(moe->intra, across ? moe->aug_x : moe->x,
                              moe->scale_count == 0 ? NULL
                              : across             ? moe->aug_scales
                                                   : moe->x_scales,
                              moe->aug_idx, moe->num_aug, node_mask, ir);
}

strata_status_t sched_moe_dispatch_recv(sched_moe_t *moe, strata_moe_recv_t *recv_p)
{
    intra_moe_recv_t ir;
    strata_status_t status;

    if (moe->state != SCHED_STEP_DISPATCH_SENT || recv_p == NULL) {
        UTIL_LOG_ERROR("moe: dispatch_recv %s", recv_p == NULL ? "without a result"
                                                : "without a dispatch_send before it");
        return moe->state == SCHED_STEP_FAILED ? STRATA_ERR_PEER_FAILED : STRATA_ERR_INVALID;
    }
    moe->num_aug = moe->plan->num_tokens;
    for (int t = 0; t < moe->num_aug; ++t) {
        moe->aug_origin[2 * t]     = moe->world.rank;
        moe->aug_origin[2 * t + 1] = t;
    }
    if (moe->num_peers > 0) {
        if ((status = sched_read_headers(moe)) != STRATA_OK ||
            (status = sched_grant_round_two(moe)) != STRATA_OK ||
            (status = sched_send_round_two(moe)) != STRATA_OK ||
            (status = sched_wait_entries(moe)) != STRATA_OK ||
            (status = sched_unpack(moe)) != STRATA_OK) {
            return sched_fail(moe, status, "exchanging tokens between nodes");
        }
    }
    sched_modes_publish(moe);
    /* Ids were checked by the plan: only a capacity overflow lets the step go on. */
    status = sched_dispatch_node(moe, &ir);
    if (status != STRATA_OK && status != STRATA_ERR_CAPACITY) {
        return sched_fail(moe, sched_intra_failure(moe, status), "inside the node");
    }
    if (status != STRATA_OK && moe->step_status == STRATA_OK) {
        moe->step_status = status;
    }
    status = sched_modes_check_node(moe);
    if (status != STRATA_OK) {
        return sched_fail(moe, status, "checking the node's modes");
    }
    status = sched_translate_sources(moe, &ir);
    if (status != STRATA_OK) {
        return sched_fail(moe, status, "reading the sources of received rows");
    }
    sched_fill_recv(moe, &ir);
    sched_modes_decide(moe);
    moe->stats.tokens_per_expert = ir.count;
    moe->stats.dispatch_ns       = util_clock_now_ns() - moe->step_start_ns;
    moe->state = SCHED_STEP_DISPATCHED;
    *recv_p = moe->recv;
    return moe->step_status;
}
