/*
 * The MoE object's fixed geometry: the world's shape checked, who exchanges tokens with
 * whom on each route, and the sizes of rows, entries, headers and masks.
 */
#include "sched_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A header: its fields, the bits of our experts' modes, and in rounds the step's counts. */
static void sched_size_header(sched_geometry_t *geo)
{
    geo->header_bytes = sched_round_up(sizeof(intra_net_header_t) +
                                           sizeof(uint64_t) * (size_t)geo->own_words +
                                           sizeof(int32_t) * (size_t)geo->header_counts,
                                       INTRA_NET_CTRL_BYTES);
}

static size_t sched_elem_size(strata_dtype_t dtype)
{
    return dtype == STRATA_DTYPE_FP32 ? 4 : dtype == STRATA_DTYPE_FP8_E4M3 ? 1 : 2;
}

uint32_t sched_moe_imm_count(int world_size)
{
    return INTRA_NET_IMM_KINDS * (uint32_t)world_size;
}

/* What the intra tier does not check itself: the world's shape. */
bool sched_params_valid(const strata_moe_params_t *p, const sched_moe_world_t *w)
{
    int max_world = (int)((INTER_IMM_MAX - STRATA_MOE_IMM_BASE) / INTRA_NET_IMM_KINDS);

    if (w->world_size > max_world) {
        UTIL_LOG_ERROR("moe: %d ranks; at most %d are supported", w->world_size, max_world);
    } else if (w->imm_base < STRATA_MOE_IMM_BASE ||
               w->imm_base + sched_moe_imm_count(w->world_size) > INTER_IMM_MAX) {
        UTIL_LOG_ERROR("moe: immediates %u + %u outside %u..%u", w->imm_base,
                       sched_moe_imm_count(w->world_size), STRATA_MOE_IMM_BASE, INTER_IMM_MAX - 1);
    } else if (w->world_size % w->num_nodes != 0) {
        UTIL_LOG_ERROR("moe: %d ranks on %d nodes: every node needs as many ranks",
                       w->world_size, w->num_nodes);
    } else if (p->num_experts <= 0 || p->num_experts % w->world_size != 0) {
        UTIL_LOG_ERROR("moe: %d experts do not split evenly over %d ranks", p->num_experts,
                       w->world_size);
    } else if (p->max_tokens <= 0 || p->capacity < 0 || p->expert_alignment < 0) {
        UTIL_LOG_ERROR("moe: max_tokens %d, capacity %d, expert_alignment %d: max_tokens must "
                       "be positive, the others not negative", p->max_tokens, p->capacity,
                       p->expert_alignment);
    } else if ((uint64_t)p->max_tokens * (uint64_t)w->world_size > INT32_MAX / 4) {
        UTIL_LOG_ERROR("moe: max_tokens %d times %d ranks is too large", p->max_tokens,
                       w->world_size);
    } else if (p->num_experts > INTRA_MOE_MAX_EXPERTS * w->num_nodes) {
        UTIL_LOG_ERROR("moe: %d experts on %d nodes; at most %d per node are supported",
                       p->num_experts, w->num_nodes, INTRA_MOE_MAX_EXPERTS);
    } else if (p->num_experts / w->world_size > 64 * INTRA_NET_MAX_OWN_WORDS) {
        UTIL_LOG_ERROR("moe: %d experts per rank; at most %d are supported",
                       p->num_experts / w->world_size, 64 * INTRA_NET_MAX_OWN_WORDS);
    } else if ((int)p->route < STRATA_MOE_ROUTE_DEFAULT ||
               (int)p->route > STRATA_MOE_ROUTE_HIERARCHICAL) {
        UTIL_LOG_ERROR("moe: route %d is not a strata_moe_route_t (%d..%d)", (int)p->route,
                       STRATA_MOE_ROUTE_DEFAULT, STRATA_MOE_ROUTE_HIERARCHICAL);
    } else if ((int)p->combine < STRATA_MOE_COMBINE_DEFAULT ||
               (int)p->combine > STRATA_MOE_COMBINE_NODE_REDUCE) {
        UTIL_LOG_ERROR("moe: combine %d is not a strata_moe_combine_t (%d..%d)",
                       (int)p->combine, STRATA_MOE_COMBINE_DEFAULT,
                       STRATA_MOE_COMBINE_NODE_REDUCE);
    } else if ((int)p->exchange < STRATA_MOE_EXCHANGE_DEFAULT ||
               (int)p->exchange > STRATA_MOE_EXCHANGE_STREAMED) {
        UTIL_LOG_ERROR("moe: exchange %d is not a strata_moe_exchange_t (%d..%d)",
                       (int)p->exchange, STRATA_MOE_EXCHANGE_DEFAULT,
                       STRATA_MOE_EXCHANGE_STREAMED);
    } else if ((int)p->receive < STRATA_MOE_RECEIVE_DEFAULT ||
               (int)p->receive > STRATA_MOE_RECEIVE_EXACT) {
        UTIL_LOG_ERROR("moe: receive %d is not a strata_moe_receive_t (%d..%d)",
                       (int)p->receive, STRATA_MOE_RECEIVE_DEFAULT, STRATA_MOE_RECEIVE_EXACT);
    } else if (p->receive == STRATA_MOE_RECEIVE_EXACT &&
               (p->mode != STRATA_MOE_MODE_DEFAULT || p->mode_file != NULL)) {
        UTIL_LOG_ERROR("moe: an object that receives exactly moves every row its own way: "
                       "leave mode (%d) and mode_file unset", (int)p->mode);
    } else {
        return true;
    }
    return false;
}

strata_status_t sched_receive_supported(const sched_geometry_t *geo)
{
    if (!geo->exact || !geo->node_reduce) {
        return STRATA_OK;
    }
    UTIL_LOG_ERROR("moe: the exact receive combines exactly, not with node-reduce (set "
                   "STRATA_MOE_COMBINE=exact, or receive into the experts' blocks)");
    return STRATA_ERR_UNSUPPORTED;
}

strata_status_t sched_load_capacity(const strata_moe_params_t *params, int world_size,
                                    double factor, int *capacity_p)
{
    double most, rows;

    if (params == NULL || capacity_p == NULL || world_size < 1 || params->num_experts <= 0 ||
        params->topk <= 0 || params->max_tokens <= 0 ||
        !(factor >= 0.0 && factor <= SCHED_MAX_LOAD_FACTOR)) {
        UTIL_LOG_ERROR("moe load capacity: factor %g (0..%.0f), %d ranks (NULL params or "
                       "result? experts, topk and max_tokens must be positive)", factor,
                       SCHED_MAX_LOAD_FACTOR, world_size);
        return STRATA_ERR_INVALID;
    }
    /* the load's numerator is an integer, exact in a double; one rounding in the divide */
    most = fmin((double)params->max_tokens * (double)world_size, (double)INT32_MAX);
    rows = ceil(factor * ((double)params->max_tokens * (double)params->topk *
                          (double)world_size / (double)params->num_experts));
    *capacity_p = factor == 0.0 ? 0 : (int)fmax(1.0, fmin(rows, most));
    return STRATA_OK;
}

strata_status_t sched_default_capacity(strata_moe_params_t *params, int world_size,
                                       const sched_choices_t *choices)
{
    if (params->capacity != 0 || choices->capacity_factor == 0.0) {
        return STRATA_OK;
    }
    return sched_load_capacity(params, world_size, choices->capacity_factor,
                               &params->capacity);
}

/* Node membership, and the ranks this one exchanges tokens with: on the flat route every
 * rank of another node, on the hierarchical one the rank with this local index there. */
static strata_status_t sched_map_peers(sched_geometry_t *geo)
{
    int me = geo->rank;

    geo->local_size = geo->world_size / geo->num_nodes;
    geo->node_ranks = calloc((size_t)geo->world_size, sizeof(int));
    geo->peers      = calloc((size_t)geo->world_size, sizeof(int));
    geo->peer_index = calloc((size_t)geo->world_size, sizeof(int));
    if (!geo->node_ranks || !geo->peers || !geo->peer_index) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int r = 0; r < geo->world_size; ++r) {
        if (geo->rank_local[r] >= geo->local_size || geo->rank_node[r] >= geo->num_nodes) {
            UTIL_LOG_ERROR("moe: rank %d is local rank %d of node %d: every node needs %d "
                           "ranks", r, geo->rank_local[r], geo->rank_node[r], geo->local_size);
            return STRATA_ERR_INVALID;
        }
        geo->node_ranks[geo->rank_node[r] * geo->local_size + geo->rank_local[r]] = r;
        geo->peer_index[r] = -1;
    }
    for (int r = 0; r < geo->world_size; ++r) {
        bool remote = geo->rank_node[r] != geo->rank_node[me];

        if (remote && (geo->route == STRATA_MOE_ROUTE_FLAT ||
                       geo->rank_local[r] == geo->rank_local[me])) {
            geo->peer_index[r]           = geo->num_peers;
            geo->peers[geo->num_peers++] = r;
        }
    }
    return STRATA_OK;
}

static void sched_size_rows(sched_geometry_t *geo, const strata_moe_params_t *p)
{
    int align = UTIL_MAX(p->expert_alignment, 1);
    int64_t capacity = p->capacity > 0 ? p->capacity : (int64_t)p->max_tokens * geo->world_size;

    geo->experts_per_rank = p->num_experts / geo->world_size;
    geo->experts_per_node = geo->experts_per_rank * geo->local_size;
    geo->exact        = p->receive == STRATA_MOE_RECEIVE_EXACT;
    /* the exact receive keeps no blocks: the intra tier's one row each is never filled */
    geo->capacity     = geo->exact ? 1 : (int)((capacity + align - 1) / align * align);
    geo->scale_count  = p->dtype == STRATA_DTYPE_FP8_E4M3 ? p->hidden / INTRA_MOE_SCALE_COLUMNS : 0;
    geo->row_bytes    = (size_t)p->hidden * sched_elem_size(p->dtype);
    geo->scale_bytes  = sched_round_up((size_t)geo->scale_count * sizeof(float), 16);
    geo->record_bytes = sched_round_up(sizeof(int32_t) * (size_t)(1 + p->topk), 16);
    geo->entry_bytes  = geo->record_bytes + geo->row_bytes + geo->scale_bytes;
    geo->y_row_bytes  = (size_t)p->hidden * sched_elem_size(p->combine_dtype);
    geo->max_aug      = p->max_tokens * (1 + geo->num_peers);
    geo->max_entries  = p->max_tokens * UTIL_MAX(UTIL_MIN(geo->num_peers, p->topk), 1);
    geo->mask_words   = (p->num_experts + 63) / 64;
    geo->own_words    = (geo->experts_per_rank + 63) / 64;
    sched_size_header(geo);
    geo->board_bytes  = sched_round_up(sizeof(uint64_t) * (size_t)(8 + geo->mask_words),
                                       INTRA_NET_CTRL_BYTES);
}

strata_status_t sched_geometry_init(sched_geometry_t *geo, const strata_moe_params_t *params,
                                    const sched_moe_world_t *world, strata_moe_route_t route,
                                    int spec_tokens)
{
    strata_status_t status;

    memset(geo, 0, sizeof(*geo));
    geo->rank        = world->rank;
    geo->world_size  = world->world_size;
    geo->num_nodes   = world->num_nodes;
    geo->rank_node   = world->rank_node;
    geo->rank_local  = world->rank_local;
    geo->node        = world->rank_node[world->rank];
    geo->route       = route;
    geo->num_experts = params->num_experts;
    geo->topk        = params->topk;
    geo->max_tokens  = params->max_tokens;
    geo->spec_tokens = spec_tokens;
    geo->window_tokens = params->max_tokens; /* one round, unless sched_geometry_window */
    geo->rounds      = 1;
    status = sched_map_peers(geo);
    if (status == STRATA_OK) {
        sched_size_rows(geo, params);
    }
    return status;
}

void sched_geometry_window(sched_geometry_t *geo, bool streamed, uint64_t window_bytes,
                           bool node_reduce)
{
    /* a round's areas, two of each buffer a round fills while its peer may read the one
     * before: per peer round one, overflow, staging and the terms returned (at most t a
     * token), with node-reduce the weights sent and received; and the terms returned to
     * our own tokens (at most topk). Receiving exactly, one more of the latter: where the
     * owners write a round's terms of our own tokens (those returned to peers they write
     * in ret_out; with a bounce buffer in a stage of one round beside the window). */
    uint64_t terms = (uint64_t)UTIL_MIN(geo->topk, geo->route == STRATA_MOE_ROUTE_FLAT
                                                       ? geo->experts_per_rank
                                                       : geo->experts_per_node);
    uint64_t weights = node_reduce ? 4 * (uint64_t)geo->topk * sizeof(float) : 0;
    uint64_t own = geo->exact ? 3 : 2;
    uint64_t per_token = (uint64_t)geo->num_peers * (4 * geo->entry_bytes +
                                                     2 * terms * geo->y_row_bytes + weights) +
                         own * (uint64_t)geo->topk * geo->y_row_bytes;
    uint64_t tokens = per_token > 0 ? window_bytes / per_token : 0;

    geo->streamed      = streamed;
    geo->window_tokens = geo->max_tokens;
    geo->rounds        = 1;
    if (streamed && geo->num_peers > 0) { /* on one node nothing crosses a network */
        geo->window_tokens = (int)UTIL_MAX(UTIL_MIN(tokens, (uint64_t)geo->max_tokens), 1);
        geo->rounds        = (geo->max_tokens + geo->window_tokens - 1) / geo->window_tokens;
        geo->spec_tokens   = UTIL_MIN(geo->spec_tokens, geo->window_tokens);
    }
    geo->header_counts = geo->rounds > 1 ? geo->experts_per_node : 0;
    sched_size_header(geo);
}

void sched_geometry_cleanup(sched_geometry_t *geo)
{
    free(geo->node_ranks);
    free(geo->peers);
    free(geo->peer_index);
}
