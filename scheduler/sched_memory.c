/*
 * What a MoE object allocates on one rank, part by part. The object's creation sizes its
 * heap with these functions and reports their result in its stats; the estimate runs them
 * on a geometry built from the params alone. So the estimate is the allocation, not a
 * second formula beside it.
 */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

void sched_intra_params(const sched_moe_t *moe, intra_moe_params_t *ip)
{
    const sched_geometry_t *geo = &moe->geo;

    *ip = (intra_moe_params_t){
        .num_experts   = geo->experts_per_node,
        .topk          = moe->params.topk,
        .hidden        = moe->params.hidden,
        .dtype         = moe->params.dtype,
        .combine_dtype = moe->params.combine_dtype,
        .max_tokens    = geo->max_aug,
        /* a round numbers its own slice and at most as many tokens from each peer */
        .round_tokens  = geo->rounds > 1 ? geo->window_tokens * (1 + geo->num_peers) : 0,
        .capacity      = geo->capacity,
        .timeout_ns    = moe->timeout_ns,
        .failure       = moe->failure_dev,
        .terms_direct  = geo->num_peers > 0, /* the term_dst table says where terms go */
        .exact         = geo->exact,
        .exact_rounds  = geo->exact && geo->rounds > 1 ? geo->rounds : 0,
    };
}

size_t sched_heap_bytes(sched_moe_t *moe, bool area_in_heap)
{
    intra_moe_params_t ip;
    size_t intra;

    sched_intra_params(moe, &ip);
    intra = intra_moe_heap_size(&ip, moe->geo.local_size);
    return intra == 0 ? 0 : intra + sched_heap_extra(moe, area_in_heap);
}

/* The network area's parts, from its offsets (alignment included). */
static void sched_memory_net(const sched_net_offsets_t *l, strata_moe_memory_t *m)
{
    if (l->total == 0) {
        return;
    }
    m->net_headers   = l->spec;
    m->net_round_one = l->overflow - l->spec;
    m->net_round_two = l->staging - l->overflow;
    m->net_staging   = l->ret_out - l->staging;
    m->net_returns   = l->total - l->ret_out;
}

strata_status_t sched_memory_of(sched_moe_t *moe, bool area_in_heap, strata_moe_memory_t *m)
{
    const sched_geometry_t *geo = &moe->geo;
    size_t rows = (size_t)geo->experts_per_rank * (size_t)geo->capacity;
    size_t heap = sched_heap_bytes(moe, area_in_heap), net = moe->net.offsets.total;
    intra_moe_params_t ip;

    memset(m, 0, sizeof(*m));
    if (heap == 0) {
        return STRATA_ERR_INVALID; /* intra_moe_heap_size named the parameter */
    }
    sched_intra_params(moe, &ip);
    sched_memory_net(&moe->net.offsets, m);
    m->expert_rows = intra_moe_expert_bytes(&ip, geo->local_size);
    m->node_rows   = heap - m->expert_rows - (area_in_heap ? net : 0);
    if (sched_stage_bytes(moe, area_in_heap) > 0) { /* the returned terms' stage, in the heap */
        size_t stage = sched_round_up(sched_stage_bytes(moe, area_in_heap),
                                      INTRA_DEVICE_ALIGNMENT);

        m->node_rows   -= stage;
        m->net_returns += stage;
    }
    if (geo->num_peers > 0) {
        m->work_ring = util_work_ring_bytes(moe->net.ring_slots, INTRA_NET_COUNTERS,
                                            sched_moe_imm_count(geo->world_size));
    }
    m->tables = sched_net_tables_bytes(geo) +
                sched_plan_device_bytes(geo, geo->max_tokens, geo->max_entries) +
                UTIL_MAX(rows, 1) * sizeof(strata_moe_source_t) +
                (size_t)geo->experts_per_rank * sizeof(int32_t) + sizeof(int32_t) +
                intra_moe_ready_bytes(geo->experts_per_rank);
    m->total = heap + (area_in_heap ? 0 : net) + m->work_ring + m->tables;
    return STRATA_OK;
}

/* Ranks spread evenly over the nodes, in node order: rank r is local rank r % L of node
 * r / L. Every rank of such a world allocates the same. */
static strata_status_t sched_even_world(int world_size, int num_nodes, sched_moe_world_t *w)
{
    int local = world_size / num_nodes;
    int *rank_node = malloc(sizeof(int) * (size_t)world_size);
    int *rank_local = malloc(sizeof(int) * (size_t)world_size);

    if (rank_node == NULL || rank_local == NULL) {
        free(rank_node);
        free(rank_local);
        return STRATA_ERR_NO_MEMORY;
    }
    for (int r = 0; r < world_size; ++r) {
        rank_node[r]  = r / local;
        rank_local[r] = r % local;
    }
    *w = (sched_moe_world_t){.world_size = world_size, .num_nodes = num_nodes,
                             .rank_node = rank_node, .rank_local = rank_local,
                             .imm_base = STRATA_MOE_IMM_BASE};
    return STRATA_OK;
}

/* The estimate on a world whose sizes sched_params_valid accepted. */
static strata_status_t sched_estimate_on(const strata_moe_params_t *params,
                                         const sched_moe_world_t *world, strata_moe_memory_t *m)
{
    sched_moe_t moe = {.params = *params, .world = *world};
    sched_choices_t choices;
    strata_status_t status = sched_read_choices(params, &choices);

    if (status == STRATA_OK) {
        status = sched_default_capacity(&moe.params, world->world_size, &choices);
    }
    if (status == STRATA_OK) {
        status = sched_geometry_init(&moe.geo, &moe.params, world, choices.route,
                                     choices.spec_tokens);
    }
    if (status == STRATA_OK) {
        sched_combine_fallback(&choices, &moe.geo, NULL);
        sched_geometry_window(&moe.geo, choices.streamed, choices.window_bytes,
                              choices.combine == STRATA_MOE_COMBINE_NODE_REDUCE);
        status = sched_combine_supported(&moe.geo, choices.combine, NULL);
    }
    if (status == STRATA_OK) {
        moe.geo.node_reduce = choices.combine == STRATA_MOE_COMBINE_NODE_REDUCE &&
                              moe.geo.num_peers > 0;
        status = sched_receive_supported(&moe.geo);
    }
    if (status == STRATA_OK) {
        status = sched_net_place(&moe);
    }
    if (status == STRATA_OK) {
        moe.net.ring_slots = choices.ring_slots;
        status = sched_memory_of(&moe, choices.net_memory != 2, m);
    }
    sched_geometry_cleanup(&moe.geo);
    return status;
}

strata_status_t sched_moe_estimate(const strata_moe_params_t *params, int world_size,
                                   int num_nodes, strata_moe_memory_t *m)
{
    sched_moe_world_t world = {.world_size = world_size, .num_nodes = num_nodes,
                               .imm_base = STRATA_MOE_IMM_BASE};
    strata_status_t status;

    if (params == NULL || m == NULL || world_size < 1 || num_nodes < 1 ||
        num_nodes > world_size) {
        UTIL_LOG_ERROR("moe memory estimate: %d ranks on %d nodes (NULL params or result?)",
                       world_size, num_nodes);
        return STRATA_ERR_INVALID;
    }
    if (!sched_params_valid(params, &world)) {
        return STRATA_ERR_INVALID;
    }
    status = sched_even_world(world_size, num_nodes, &world);
    if (status == STRATA_OK) {
        status = sched_estimate_on(params, &world, m);
    }
    free((void *)world.rank_node);
    free((void *)world.rank_local);
    return status;
}
