/*
 * The two-tier MoE object: its creation (configuration, geometry, the node's heap and its
 * tables, the intra-tier object, the network area, the modes, its own plan) and
 * destruction.
 */
#include "sched_internal.h"

#include <stdatomic.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One of the scheduler's parts of the heap, beside the intra tier's. */
typedef struct sched_heap_part {
    const char *name;
    size_t      bytes;
    size_t     *offset_p;
} sched_heap_part_t;

#define SCHED_HEAP_PARTS 6

/* Across nodes, where the node's owners write the terms of this rank's own tokens: the
 * step's in one round; receiving exactly in rounds, a round's (elsewhere in rounds
 * combine reads the owners' rows where they publish them). 0: none. */
static size_t sched_own_terms_bytes(const sched_geometry_t *geo)
{
    size_t slots = (size_t)geo->topk * geo->y_row_bytes;

    if (geo->num_peers == 0) {
        return 0;
    }
    if (geo->rounds == 1) {
        return (size_t)geo->max_tokens * slots;
    }
    return geo->exact ? (size_t)geo->window_tokens * slots : 0;
}

size_t sched_stage_bytes(const sched_moe_t *moe, bool area_in_heap)
{
    const sched_geometry_t *geo = &moe->geo;

    if (geo->num_peers == 0) {
        return 0;
    }
    if (area_in_heap) {
        return 0; /* ret_out itself */
    }
    if (geo->rounds == 1) {
        return moe->net.offsets.ret_out_bytes;
    }
    return geo->exact ? (size_t)geo->num_peers * moe->net.offsets.ret_out_block : 0;
}

/* The parts in placing order: origins, term destinations, mode boards, and across nodes
 * the own tokens' terms, the network area and the stage of the terms returned to other
 * nodes (sched_own_terms_bytes, sched_stage_bytes: each where there is one). */
static int sched_heap_parts(sched_moe_t *moe, bool area_in_heap, sched_heap_part_t *parts)
{
    const sched_geometry_t *geo = &moe->geo;
    size_t aug = (size_t)geo->max_aug, topk = (size_t)geo->topk;
    size_t own = sched_own_terms_bytes(geo), stage = sched_stage_bytes(moe, area_in_heap);
    int n = 0;

    parts[n++] = (sched_heap_part_t){"sched-origin", aug * 2 * sizeof(int32_t),
                                     &moe->origin_offset};
    parts[n++] = (sched_heap_part_t){"sched-term-dst", aug * topk * sizeof(int64_t),
                                     &moe->term_dst_offset};
    parts[n++] = (sched_heap_part_t){"sched-modes", 2 * geo->board_bytes,
                                     &moe->modes.board_offset};
    if (own > 0) {
        parts[n++] = (sched_heap_part_t){"sched-terms", own, &moe->terms_offset};
    }
    if (geo->num_peers > 0 && area_in_heap) {
        parts[n++] = (sched_heap_part_t){"sched-net", moe->net.offsets.total,
                                         &moe->net.area_heap};
    }
    if (stage > 0) {
        parts[n++] = (sched_heap_part_t){"sched-stage", stage, &moe->stage_offset};
    }
    return n;
}

/* Their bytes (sched_memory.c sizes the heap with it). */
size_t sched_heap_extra(sched_moe_t *moe, bool area_in_heap)
{
    sched_heap_part_t parts[SCHED_HEAP_PARTS];
    int n = sched_heap_parts(moe, area_in_heap, parts);
    size_t bytes = INTRA_DEVICE_ALIGNMENT; /* the first part's alignment */

    for (int i = 0; i < n; ++i) {
        bytes += sched_round_up(UTIL_MAX(parts[i].bytes, 1), INTRA_DEVICE_ALIGNMENT);
    }
    return bytes;
}

static strata_status_t sched_place_tables(sched_moe_t *moe, bool area_in_heap)
{
    sched_heap_part_t parts[SCHED_HEAP_PARTS];
    int n = sched_heap_parts(moe, area_in_heap, parts);
    strata_status_t status = STRATA_OK;

    for (int i = 0; i < n && status == STRATA_OK; ++i) {
        status = intra_heap_alloc(moe->heap, parts[i].name, UTIL_MAX(parts[i].bytes, 1),
                                  INTRA_DEVICE_ALIGNMENT, parts[i].offset_p);
    }
    if (status == STRATA_OK && area_in_heap && moe->geo.num_peers > 0) {
        moe->stage_offset = moe->net.area_heap + moe->net.offsets.ret_out; /* ret_out itself */
    }
    return status;
}

/* The public outputs in mapped host memory, filled by the sources kernel, and the host's
 * copy of a step's counts (the exact receive's). */
static strata_status_t sched_alloc_public(sched_moe_t *moe)
{
    const intra_device_ops_t *d = moe->world.device;
    size_t rows = (size_t)moe->geo.experts_per_rank * (size_t)moe->geo.capacity;
    strata_status_t status;

    moe->step_counts = calloc((size_t)moe->geo.experts_per_rank, sizeof(int32_t));
    if (moe->step_counts == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = d->host_alloc(UTIL_MAX(rows, 1) * sizeof(strata_moe_source_t), -1,
                           (void **)&moe->public_src, &moe->public_src_dev);
    if (status == STRATA_OK) {
        status = d->host_alloc((size_t)moe->geo.experts_per_rank * sizeof(int32_t), -1,
                               (void **)&moe->public_count, &moe->public_count_dev);
    }
    return status;
}

/*
 * A word the engine sets once any rank fails, read by the node's kernels while they wait
 * for a local peer: a dead peer ends the step within the heartbeat bound, while a live but
 * slow one (a stall, a debugger) is waited for up to STRATA_MOE_TIMEOUT.
 */
static strata_status_t sched_watch_failures(sched_moe_t *moe)
{
    const intra_device_ops_t *d = moe->world.device;
    strata_status_t status;

    status = d->host_alloc(sizeof(int32_t), -1, (void **)&moe->failure_host,
                           (void **)&moe->failure_dev);
    if (status != STRATA_OK) {
        return status;
    }
    status = moe->world.engine_ranks == NULL
                 ? inter_engine_watch_failures(moe->world.engine, moe->failure_host)
                 : inter_engine_watch_failures_of(moe->world.engine, moe->failure_host,
                                                  moe->world.engine_ranks,
                                                  moe->world.world_size);
    if (status != STRATA_OK) {
        d->host_free(moe->failure_host);
        moe->failure_host = NULL;
        moe->failure_dev  = NULL;
    }
    return status;
}

/* The heap rendezvous' peer check: the engine's failure watch, set once any rank failed. */
static strata_status_t sched_peers_alive(void *ctx)
{
    return sched_any_rank_failed(ctx) ? STRATA_ERR_PEER_FAILED : STRATA_OK;
}

int sched_engine_rank(const sched_moe_t *moe, int r)
{
    return moe->world.engine_ranks != NULL ? moe->world.engine_ranks[r] : r;
}

bool sched_peer_failed(const sched_moe_t *moe, int r)
{
    return inter_engine_peer_failed(moe->world.engine, sched_engine_rank(moe, r));
}

bool sched_any_rank_failed(const sched_moe_t *moe)
{
    return moe->failure_host != NULL &&
           atomic_load_explicit((_Atomic int32_t *)moe->failure_host, memory_order_acquire) != 0;
}

/* The node's heap, the intra tier's object, and the scheduler's tables in the heap. */
static strata_status_t sched_open_intra(sched_moe_t *moe, const sched_moe_world_t *world,
                                        bool area_in_heap)
{
    const sched_geometry_t *geo = &moe->geo;
    intra_moe_params_t ip;
    char key[128];
    intra_heap_params_t hp = {
        .device     = moe->world.device,
        .local_rank = geo->rank_local[geo->rank],
        .local_size = geo->local_size,
        .size       = sched_heap_bytes(moe, area_in_heap),
        .job_key    = key,
        .timeout_ns = moe->timeout_ns,
        .peer_check = sched_peers_alive,
        .peer_check_ctx = moe,
    };
    intra_moe_tables_t tables;
    strata_status_t status;

    /* Per node: nodes may share a network namespace, and so the socket's name space. */
    snprintf(key, sizeof(key), "%s-node%d", world->job_key, geo->node);
    if (hp.size == 0) {
        return STRATA_ERR_INVALID; /* intra_moe_heap_size named the parameter */
    }
    sched_intra_params(moe, &ip);
    memcpy(hp.secret, world->heap_secret, sizeof(hp.secret));
    status = intra_heap_create(&hp, &moe->heap);
    util_crypto_wipe(hp.secret, sizeof(hp.secret));
    if (status == STRATA_OK) {
        status = intra_moe_create(&ip, moe->heap, &moe->intra);
    }
    if (status == STRATA_OK) {
        status = sched_place_tables(moe, area_in_heap);
    }
    if (status == STRATA_OK) {
        status = sched_alloc_public(moe);
    }
    if (status != STRATA_OK) {
        return status;
    }
    tables = (intra_moe_tables_t){
        .origin_offset   = (int64_t)moe->origin_offset,
        .origin_rank     = geo->rank,
        .term_dst_offset = geo->num_peers > 0 ? (int64_t)moe->term_dst_offset : -1,
        .public_src      = moe->public_src_dev,
        .public_count    = moe->public_count_dev,
    };
    return intra_moe_set_tables(moe->intra, &tables);
}

/* strata_moe_dispatch's plan: sized once for the most tokens, refilled every step. */
static strata_status_t sched_open_own_plan(sched_moe_t *moe)
{
    sched_plan_t *plan = &moe->own_plan;
    strata_status_t status;

    plan->moe        = moe;
    plan->moe_serial = moe->serial;
    plan->device     = moe->world.device;
    if ((status = sched_plan_alloc_ids(&moe->geo, plan, moe->geo.max_tokens)) != STRATA_OK ||
        (status = sched_plan_alloc_entries(&moe->geo, plan, moe->geo.max_entries)) != STRATA_OK) {
        return status;
    }
    return sched_plan_device_alloc(moe, plan, moe->geo.max_tokens);
}

/* Serials given to objects so far (struct sched_moe.serial). */
static _Atomic uint64_t sched_moe_serials;

static int *sched_copy_ints(const int *src, int n)
{
    int *copy = malloc(sizeof(int) * (size_t)n);

    if (copy != NULL) {
        memcpy(copy, src, sizeof(int) * (size_t)n);
    }
    return copy;
}

/* How the heap's area would be flushed (SCHED_FLUSH_DEVICE, _READ or _NONE) as asked, or
 * STRATA_ERR_UNSUPPORTED with why where it cannot be. */
static strata_status_t sched_choose_flush(const sched_moe_t *moe, sched_flush_t asked,
                                          sched_flush_t *flush_p, char *why)
{
    const intra_device_ops_t *d = moe->world.device;
    bool by_read = inter_engine_can_flush_by_read(moe->world.engine);
    char device_why[UTIL_REASON_LEN] = "";
    bool by_device;

    if (d->remote_writes_visible == NULL && asked != SCHED_FLUSH_READ) {
        *flush_p = SCHED_FLUSH_NONE; /* host memory: the NIC's writes are coherent */
        return STRATA_OK;
    }
    by_device = d->remote_writes_visible != NULL && d->remote_writes_visible(device_why) ==
                                                        STRATA_OK;
    if (asked != SCHED_FLUSH_READ && by_device) {
        *flush_p = SCHED_FLUSH_DEVICE;
        return STRATA_OK;
    }
    if (asked != SCHED_FLUSH_DEVICE && by_read) {
        *flush_p = SCHED_FLUSH_READ;
        return STRATA_OK;
    }
    if (asked == SCHED_FLUSH_READ) {
        util_reason(why, "STRATA_MOE_FLUSH=read, but %s cannot flush by a loopback read",
                    inter_engine_transport_name(moe->world.engine));
    } else {
        util_reason(why, "%s%s", device_why,
                    asked == SCHED_FLUSH_DEVICE ? "" : ", nor can the transport by a loopback read");
    }
    return STRATA_ERR_UNSUPPORTED;
}

/* Whether the network area goes in the heap (registered as the device's memory), and how
 * the network's writes into it are then flushed. */
static strata_status_t sched_choose_area(sched_moe_t *moe, const sched_choices_t *choices,
                                         bool *in_heap_p)
{
    const intra_device_ops_t *d = moe->world.device;
    bool can = inter_engine_can_register(moe->world.engine, sched_mem_kind(d));
    char why[UTIL_REASON_LEN] = "";
    int net_memory = choices->net_memory;

    moe->net.flush = SCHED_FLUSH_NONE;
    if (!can) {
        util_reason(why, "%s cannot register %s memory",
                    inter_engine_transport_name(moe->world.engine), d->name);
    } else {
        /* Checked once here, rather than failing at every publish of what arrived. */
        can = sched_choose_flush(moe, choices->flush, &moe->net.flush, why) == STRATA_OK;
    }
    *in_heap_p = net_memory != 2 && can;
    if (net_memory == 1 && !can) {
        UTIL_LOG_ERROR("moe: STRATA_MOE_NET_MEMORY=heap, but %s", why);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (net_memory == 0 && !can) {
        UTIL_LOG_INFO("moe: the network area goes in a pinned host bounce buffer: %s", why);
    }
    if (!*in_heap_p) {
        moe->net.flush = SCHED_FLUSH_NONE; /* pinned host memory */
    } else if (moe->net.flush == SCHED_FLUSH_READ) {
        UTIL_LOG_INFO("moe: the network's writes into the heap are flushed by a loopback read "
                      "on each rail that wrote, before the kernels hear of them");
    }
    return STRATA_OK;
}

static strata_status_t sched_moe_open(sched_moe_t *moe, const sched_moe_world_t *world)
{
    sched_choices_t choices;
    bool in_heap = false;
    strata_status_t status;

    if ((status = sched_resolve_config(moe, &choices)) != STRATA_OK ||
        (status = sched_default_capacity(&moe->params, moe->world.world_size, &choices)) !=
            STRATA_OK ||
        (status = sched_geometry_init(&moe->geo, &moe->params, &moe->world, choices.route,
                                      choices.spec_tokens)) != STRATA_OK) {
        return status;
    }
    sched_combine_fallback(&choices, &moe->geo, moe->world.device);
    sched_geometry_window(&moe->geo, choices.streamed, choices.window_bytes,
                          choices.combine == STRATA_MOE_COMBINE_NODE_REDUCE);
    moe->net.ring_slots = choices.ring_slots;
    moe->params.combine = choices.combine;
    moe->params.capacity = moe->geo.capacity;
    /* The combine mode asked for is agreed before it is refused anywhere: a rank that
     * returned early would leave the others waiting in the agreement's allgather. */
    if (moe->geo.num_peers > 0 &&
        ((status = sched_net_agree(moe)) != STRATA_OK ||
         (status = sched_resolve_combine(moe)) != STRATA_OK ||
         (status = sched_receive_supported(&moe->geo)) != STRATA_OK ||
         (status = sched_choose_area(moe, &choices, &in_heap)) != STRATA_OK)) {
        return status;
    }
    moe->net.bounce        = moe->geo.num_peers > 0 && !in_heap;
    moe->net.heap_required = choices.net_memory == 1;
    if ((status = sched_net_place(moe)) != STRATA_OK ||
        (status = sched_watch_failures(moe)) != STRATA_OK ||
        (status = sched_open_intra(moe, world, in_heap)) != STRATA_OK ||
        (status = sched_net_open(moe)) != STRATA_OK ||
        (status = sched_modes_open(moe)) != STRATA_OK ||
        (status = sched_open_own_plan(moe)) != STRATA_OK) {
        return status;
    }
    return sched_memory_of(moe, in_heap, &moe->stats.memory);
}

strata_status_t sched_moe_create(const strata_moe_params_t *params, const sched_moe_world_t *world,
                                 sched_moe_t **moe_p)
{
    strata_status_t status;
    sched_moe_t *moe;

    if (params == NULL || world == NULL || moe_p == NULL || !sched_params_valid(params, world)) {
        return STRATA_ERR_INVALID;
    }
    moe = calloc(1, sizeof(*moe));
    if (moe == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    moe->serial = atomic_fetch_add_explicit(&sched_moe_serials, 1, memory_order_relaxed) + 1;
    moe->params = *params;
    moe->capacity_asked = params->capacity;
    moe->world  = *world;
    /* Ours to keep: the caller's arrays need not outlive the object; the key and the
     * secret are used once. */
    moe->world.job_key     = NULL;
    moe->world.heap_secret = NULL;
    moe->world.rank_node  = sched_copy_ints(world->rank_node, world->world_size);
    moe->world.rank_local = sched_copy_ints(world->rank_local, world->world_size);
    status = moe->world.rank_node && moe->world.rank_local ? sched_moe_open(moe, world)
                                                           : STRATA_ERR_NO_MEMORY;
    if (status != STRATA_OK) {
        sched_moe_destroy(moe);
        return status;
    }
    sched_fill_masks(moe, moe->modes.mode == STRATA_MOE_MODE_PULL);
    moe->stats.route             = moe->geo.route;
    moe->stats.num_local_experts = moe->geo.experts_per_rank;
    moe->stats.net_bounce        = moe->net.bounce;
    moe->stats.exchange          = moe->geo.streamed ? STRATA_MOE_EXCHANGE_STREAMED
                                                     : STRATA_MOE_EXCHANGE_WORST_CASE;
    moe->stats.exchange_rounds   = moe->geo.rounds;
    UTIL_LOG_INFO("moe: %d experts, top-%d, hidden %d, %s route, %s combine, %d peers, round "
                  "one %d tokens, capacity %d, network area %zu bytes in %s, pull across "
                  "nodes by %s", params->num_experts, params->topk, params->hidden,
                  moe->geo.route == STRATA_MOE_ROUTE_FLAT ? "flat" : "hierarchical",
                  moe->geo.node_reduce ? "node-reduce" : "exact",
                  moe->geo.num_peers, moe->geo.spec_tokens, moe->geo.capacity,
                  moe->net.offsets.total, moe->net.bounce ? "a host bounce buffer" : "the heap",
                  moe->pull_read ? "read" : "request");
    if (moe->geo.rounds > 1) {
        UTIL_LOG_INFO("moe: streamed exchange: a step's dispatch crosses the network in %d "
                      "rounds of %d of each rank's tokens", moe->geo.rounds,
                      moe->geo.window_tokens);
    }
    *moe_p = moe;
    return STRATA_OK;
}

void sched_moe_destroy(sched_moe_t *moe)
{
    const intra_device_ops_t *d;

    if (moe == NULL) {
        return;
    }
    d = moe->world.device;
    if (moe->intra != NULL && moe->cur.state != SCHED_STEP_FAILED) {
        (void)intra_moe_synchronize(moe->intra);
        (void)intra_moe_idle(moe->intra); /* nothing of ours runs after this */
    }
    sched_net_close(moe);
    intra_moe_destroy(moe->intra);
    if (moe->cur.state != SCHED_STEP_FAILED || moe->net.mr == NULL || moe->net.bounce) {
        intra_heap_destroy(moe->heap);
    } /* else the registered heap is released by the engine, once its endpoints are shut */
    if (moe->own_plan.device_mem != NULL) {
        d->mem_free(moe->own_plan.device_mem);
    }
    sched_plan_release(&moe->own_plan);
    sched_experts_free(&moe->experts);
    if (moe->failure_host != NULL) {
        inter_engine_unwatch_failures(moe->world.engine, moe->failure_host);
        d->host_free(moe->failure_host);
    }
    if (d != NULL) {
        d->host_free(moe->public_src);
        d->host_free(moe->public_count);
    }
    free(moe->step_counts);
    sched_modes_close(moe);
    sched_geometry_cleanup(&moe->geo);
    free((void *)moe->world.rank_node);
    free((void *)moe->world.rank_local);
    free(moe);
}

void sched_moe_stats(const sched_moe_t *moe, strata_moe_stats_t *stats_p)
{
    *stats_p = moe->stats;
}

void sched_moe_params(const sched_moe_t *moe, strata_moe_params_t *params_p)
{
    *params_p           = moe->params;
    params_p->mode_file = moe->modes.mode_file;
}

void sched_moe_set_capacity_asked(sched_moe_t *moe, int capacity)
{
    moe->capacity_asked = capacity;
}

