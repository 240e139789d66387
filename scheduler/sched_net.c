/*
 * The network side of the MoE object: the area other nodes write into and read from (in
 * the node's heap, whose region is registered with the engine; or a pinned host bounce
 * buffer where the transport cannot register the heap's memory), every rank's descriptor
 * of it, the engine's work ring in memory both the kernels and the proxy reach, and the
 * device tables the network kernels keep between steps.
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

strata_status_t sched_net_place(sched_moe_t *moe)
{
    const sched_geometry_t *geo = &moe->geo;
    sched_net_offsets_t *l = &moe->net.offsets;
    size_t world = (size_t)geo->world_size, cursor = 0, max_tokens = (size_t)geo->max_tokens;
    size_t peers = (size_t)geo->num_peers, topk = (size_t)geo->topk;
    size_t window = (size_t)geo->window_tokens, stagings = geo->rounds > 1 ? 2 : 1;

    memset(l, 0, sizeof(*l));
    if (peers == 0) {
        return STRATA_OK;
    }
    /* an entry's terms are on one rank (flat) or one node (hierarchical) of the receiver */
    l->entry_terms   = UTIL_MIN(geo->topk, geo->route == STRATA_MOE_ROUTE_FLAT
                                               ? geo->experts_per_rank : geo->experts_per_node);
    /* in rounds, a round's entries' terms: each of two buffers, by round */
    l->ret_out_block = INTRA_NET_RET_BLOCK(window, l->entry_terms, geo->y_row_bytes);
    l->ret_out_bytes = stagings * peers * l->ret_out_block;
    /* what comes back to this rank's tokens (of a round), from all peers: at most one term
     * per token and slot, or with node-reduce in one pass one partial row per entry (in
     * rounds, fewer than the round's slots); and each peer's drop count */
    l->ret_in_bytes  = (geo->node_reduce && geo->rounds == 1 ? (size_t)geo->max_entries
                                                             : window * topk) *
                           geo->y_row_bytes +
                       peers * INTRA_NET_DROPS_BYTES;
    l->headers     = sched_place(&cursor, 2 * world * geo->header_bytes);
    l->grants      = sched_place(&cursor, world * INTRA_NET_CTRL_BYTES);
    l->out_headers = sched_place(&cursor, world * geo->header_bytes);
    l->out_grants  = sched_place(&cursor, world * INTRA_NET_CTRL_BYTES);
    l->spec        = sched_place(&cursor, peers * (size_t)geo->spec_tokens * geo->entry_bytes);
    l->overflow    = sched_place(&cursor, peers * window * geo->entry_bytes);
    l->staging     = sched_place(&cursor, stagings * peers * window * geo->entry_bytes);
    l->ret_out     = sched_place(&cursor, l->ret_out_bytes);
    l->ret_in      = sched_place(&cursor, stagings * l->ret_in_bytes);
    if (geo->node_reduce) { /* the weights of a step's entries, or of a round's (two) */
        size_t weights = stagings * peers * (geo->rounds > 1 ? window : max_tokens) * topk *
                         sizeof(float);

        l->w_out = sched_place(&cursor, weights);
        l->w_in  = sched_place(&cursor, weights);
    }
    l->total       = cursor;
    return STRATA_OK;
}

/* Our index among peer's peers: the block of its spec, staging and ret_in areas that is
 * ours (peers are kept in rank order on every rank). */
static int sched_index_there(const sched_geometry_t *geo, int peer)
{
    int index = 0;

    for (int r = 0; r < geo->rank; ++r) {
        index += geo->rank_node[r] != geo->rank_node[peer] &&
                 (geo->route == STRATA_MOE_ROUTE_FLAT ||
                  geo->rank_local[r] == geo->rank_local[peer]);
    }
    return index;
}

inter_mem_kind_t sched_mem_kind(const intra_device_ops_t *device)
{
    return device->memory == INTRA_MEMORY_CUDA ? INTER_MEM_CUDA
           : device->memory == INTRA_MEMORY_HIP ? INTER_MEM_ROCM
                                                : INTER_MEM_HOST;
}

/* Register the area's memory: the whole heap region, or the bounce buffer. */
static strata_status_t sched_net_register(sched_moe_t *moe)
{
    sched_net_t *net = &moe->net;
    const intra_device_ops_t *d = moe->world.device;
    int local = moe->geo.rank_local[moe->geo.rank], device = 0;
    strata_status_t status;

    if (net->bounce) {
        /* Near the NIC that writes it, as the proxy's work ring. */
        status = d->host_alloc(net->offsets.total, inter_engine_numa_node(moe->world.engine),
                               &net->bounce_host, (void **)&net->area);
        if (status == STRATA_OK) {
            status = inter_engine_mem_register(moe->world.engine, net->bounce_host,
                                               net->offsets.total, &net->mr);
        }
        net->mr_offset = 0;
        UTIL_LOG_INFO("moe: the network area is a pinned host buffer of %zu bytes that the "
                      "kernels write through (%s cannot register %s memory, or "
                      "STRATA_MOE_NET_MEMORY=bounce)", net->offsets.total,
                      inter_engine_transport_name(moe->world.engine), d->name);
        return status;
    }
    status = d->current_device(&device);
    net->device = device;
    if (status == STRATA_OK) {
        status = inter_engine_mem_register_kind(moe->world.engine, intra_heap_base(moe->heap, local),
                                                intra_heap_size(moe->heap), sched_mem_kind(d),
                                                device,
                                                &net->mr);
    }
    if (status == STRATA_ERR_UNSUPPORTED && !net->heap_required) {
        /* The transport offered GPU memory, but this registration failed (a NIC driver
         * without dma-buf, say): the bounce buffer works everywhere. */
        UTIL_LOG_INFO("moe: %s could not register the heap's %s memory: the network area "
                      "goes in a pinned host bounce buffer instead",
                      inter_engine_transport_name(moe->world.engine), d->name);
        net->bounce = true;
        return sched_net_register(moe);
    }
    net->area      = (char *)intra_heap_base(moe->heap, local) + net->area_heap;
    net->mr_offset = net->area_heap;
    return status;
}

/* The proxy's call before it tells the kernels what the network wrote into the heap. */
static void sched_flush_writes(void *ctx)
{
    const sched_moe_t *moe = ctx;

    moe->world.device->flush_remote_writes(moe->net.device);
}

/* The ring the kernels feed, in memory both they and the proxy reach. */
static strata_status_t sched_net_ring(sched_moe_t *moe)
{
    sched_net_t *net = &moe->net;
    const intra_device_ops_t *d = moe->world.device;
    uint32_t imms = sched_moe_imm_count(moe->geo.world_size);
    inter_ring_params_t p = {.slots = net->ring_slots, .num_counters = INTRA_NET_COUNTERS,
                             .num_imms = imms, .imm_base = moe->world.imm_base,
                             .num_regions = 1, .host_stamps = d->memory == INTRA_MEMORY_HOST};
    strata_status_t status;

    /* On the proxy's NUMA node: it polls the ring's slots without pause, the kernels write
     * each command once. */
    status = d->host_alloc(util_work_ring_bytes(p.slots, p.num_counters, p.num_imms),
                           inter_engine_numa_node(moe->world.engine), (void **)&net->ring_host,
                           (void **)&net->ring_dev);
    if (status != STRATA_OK) {
        return status;
    }
    p.mem               = net->ring_host;
    p.regions[0]        = net->mr;
    p.region_offsets[0] = net->mr_offset;
    p.remote[0]         = net->desc;
    p.peers             = moe->world.engine_ranks; /* commands name the object's ranks */
    p.num_peers         = moe->world.engine_ranks != NULL ? moe->geo.world_size : 0;
    if (!net->bounce && net->flush == SCHED_FLUSH_DEVICE && d->flush_remote_writes != NULL) {
        p.flush_fn  = sched_flush_writes; /* GPU memory the NIC writes, flushed by the GPU */
        p.flush_ctx = moe;
    }
    p.flush_by_read = !net->bounce && net->flush == SCHED_FLUSH_READ;
    status = inter_engine_ring_attach(moe->world.engine, &p, &net->ring);
    if (status == STRATA_ERR_BUSY) {
        UTIL_LOG_ERROR("moe: immediates %u..%u are still counted by an older MoE object: "
                       "too many objects at once on %d ranks", p.imm_base,
                       p.imm_base + p.num_imms - 1, moe->geo.world_size);
    }
    return status;
}

/* Offsets of the network kernels' tables in their one device allocation. */
typedef struct sched_net_tables_place {
    size_t state, peers, ticket, slots, tsrc, entry, atopk, naug, mask, ranks, nodes, segs,
        counts;
    size_t total;
} sched_net_tables_place_t;

static void sched_net_tables_place(const sched_geometry_t *geo, sched_net_tables_place_t *t)
{
    size_t cursor = 0, aug = (size_t)geo->max_aug, topk = (size_t)geo->topk;

    t->state  = sched_place(&cursor, sizeof(intra_net_state_t));
    t->peers  = sched_place(&cursor, (size_t)geo->num_peers * sizeof(intra_net_peer_t));
    t->ticket = sched_place(&cursor, sizeof(uint64_t));
    t->slots  = sched_place(&cursor, (size_t)geo->max_entries * sizeof(int32_t));
    t->tsrc   = sched_place(&cursor, (size_t)geo->max_tokens * topk * sizeof(uint64_t));
    t->entry  = sched_place(&cursor, aug * sizeof(int64_t));
    t->atopk  = sched_place(&cursor, aug * topk * sizeof(int64_t));
    t->naug   = sched_place(&cursor, 2 * sizeof(int32_t));
    t->mask   = sched_place(&cursor, (size_t)geo->mask_words * sizeof(uint64_t));
    t->ranks  = sched_place(&cursor, (size_t)geo->world_size * sizeof(int32_t));
    t->nodes  = sched_place(&cursor, (size_t)geo->world_size * sizeof(int32_t));
    t->segs   = geo->rounds > 1 ? sched_place(&cursor, (size_t)geo->rounds *
                                                       ((size_t)geo->num_peers + 1) * 3 *
                                                       sizeof(int64_t))
                                : 0;
    t->counts = geo->header_counts > 0
                    ? sched_place(&cursor, (size_t)geo->header_counts * sizeof(int32_t))
                    : 0;
    t->total  = cursor;
}

size_t sched_net_tables_bytes(const sched_geometry_t *geo)
{
    sched_net_tables_place_t t;

    if (geo->num_peers == 0) {
        return 0;
    }
    sched_net_tables_place(geo, &t);
    return t.total;
}

/* The network kernels' tables in device memory, in one allocation. */
static strata_status_t sched_net_tables(sched_moe_t *moe)
{
    sched_net_t *net = &moe->net;
    const sched_geometry_t *geo = &moe->geo;
    const intra_device_ops_t *d = moe->world.device;
    sched_net_tables_place_t t;
    intra_net_peer_t *init = calloc((size_t)geo->num_peers, sizeof(*init));
    /* the host copy of node_ranks, followed by that of rank_node */
    int32_t *node_ranks = malloc(2 * (size_t)geo->world_size * sizeof(int32_t));
    strata_status_t status;
    char *base;

    sched_net_tables_place(geo, &t);
    status = init && node_ranks ? d->mem_alloc(t.total, &net->device_mem) : STRATA_ERR_NO_MEMORY;
    base   = net->device_mem;
    if (status == STRATA_OK) {
        net->state      = (intra_net_state_t *)(base + t.state);
        net->peers      = (intra_net_peer_t *)(base + t.peers);
        net->ticket     = (uint64_t *)(base + t.ticket);
        net->slot_of    = (int32_t *)(base + t.slots);
        net->term_src   = (uint64_t *)(base + t.tsrc);
        net->aug_entry  = (int64_t *)(base + t.entry);
        net->aug_topk   = (int64_t *)(base + t.atopk);
        net->num_aug    = (int32_t *)(base + t.naug);
        net->mask       = (uint64_t *)(base + t.mask);
        net->node_ranks = (int32_t *)(base + t.ranks);
        net->rank_node  = (int32_t *)(base + t.nodes);
        net->round_seg  = geo->rounds > 1 ? (int64_t *)(base + t.segs) : NULL;
        net->step_counts = geo->header_counts > 0 ? (int32_t *)(base + t.counts) : NULL;
        status = d->mem_set(base, 0, t.total);
    }
    for (int p = 0; p < geo->num_peers && status == STRATA_OK; ++p) {
        init[p].rank        = geo->peers[p];
        init[p].node        = geo->rank_node[geo->peers[p]];
        init[p].index_there = sched_index_there(geo, geo->peers[p]);
    }
    for (int r = 0; node_ranks != NULL && r < geo->world_size; ++r) {
        node_ranks[r]                   = geo->node_ranks[r];
        node_ranks[geo->world_size + r] = geo->rank_node[r];
    }
    if (status == STRATA_OK) {
        status = d->mem_copy(net->peers, init, (size_t)geo->num_peers * sizeof(*init));
    }
    if (status == STRATA_OK) {
        status = d->mem_copy(net->node_ranks, node_ranks,
                             (size_t)geo->world_size * sizeof(int32_t));
    }
    if (status == STRATA_OK) {
        status = d->mem_copy(net->rank_node, node_ranks + geo->world_size,
                             (size_t)geo->world_size * sizeof(int32_t));
    }
    free(init);
    free(node_ranks);
    return status;
}

/* The device's address of a place in the mapped ring, given the host's. */
static void *sched_ring_device(const sched_net_t *net, const void *host)
{
    return (char *)net->ring_dev + ((const char *)host - (const char *)net->ring_host);
}

/* What every launch of the network kernels shares; sched_net_prepare adds the step's. */
static void sched_net_args(sched_moe_t *moe)
{
    const sched_geometry_t *geo = &moe->geo;
    sched_net_t *net = &moe->net;
    intra_net_args_t *a = &net->args;
    char *heap = intra_heap_base(moe->heap, geo->rank_local[geo->rank]);

    *a = (intra_net_args_t){
        .ring = net->ring_dev, .ticket = net->ticket, .state = net->state, .peers = net->peers,
        .area = net->area, .slots = net->ring_slots,
        .timeout_ticks = moe->timeout_ns / 1000u * moe->world.device->timer_ticks_per_us,
        .world = geo->world_size, .rank = geo->rank, .num_peers = geo->num_peers,
        .spec_tokens = geo->spec_tokens, .max_tokens = geo->max_tokens,
        .rounds = geo->rounds, .window_tokens = geo->window_tokens,
        .round_seg = net->round_seg,
        .header_counts = geo->header_counts, .step_counts = net->step_counts,
        .pull_read = moe->pull_read,
        .host_stamps = moe->world.device->memory == INTRA_MEMORY_HOST, .bounce = net->bounce,
        .entry_bytes = (int32_t)geo->entry_bytes, .record_bytes = (int32_t)geo->record_bytes,
        .scale_bytes = (int32_t)geo->scale_bytes,
        .header_bytes = (int32_t)geo->header_bytes, .own_words = geo->own_words,
        .experts_per_rank = geo->experts_per_rank, .local_size = geo->local_size,
        .experts_per_node = geo->experts_per_node, .imm_base = moe->world.imm_base,
        .chunk_bytes = net->chunk_bytes,
        .headers = net->offsets.headers, .grants = net->offsets.grants,
        .out_headers = net->offsets.out_headers, .out_grants = net->offsets.out_grants,
        .spec = net->offsets.spec, .overflow = net->offsets.overflow,
        .staging = net->offsets.staging, .ret_out = net->offsets.ret_out,
        .ret_in = net->offsets.ret_in, .w_out = net->offsets.w_out, .w_in = net->offsets.w_in,
        .ret_out_block = net->offsets.ret_out_block, .ret_in_bytes = net->offsets.ret_in_bytes,
        .entry_terms = net->offsets.entry_terms,
        .ret_stage = (int64_t)moe->stage_offset,
        .rank_node = net->rank_node, .node_reduce = geo->node_reduce, .node = geo->node,
        .num_nodes = geo->num_nodes,
        .terms = (int64_t)moe->terms_offset, .node_ranks = net->node_ranks, .mask = net->mask,
        .slot_of = net->slot_of, .term_src = net->term_src, .aug_entry = net->aug_entry,
        .aug_topk = net->aug_topk, .num_aug = net->num_aug,
        .term_dst = (int64_t *)(heap + moe->term_dst_offset),
        .origin = (int32_t *)(heap + moe->origin_offset),
    };
    a->counters = sched_ring_device(net, util_work_ring_counters(net->ring_host));
    a->imms     = sched_ring_device(net, util_work_ring_imms(net->ring_host));
    a->cmds     = sched_ring_device(net, util_work_ring_cmds(net->ring_host));
}

/* What both sides of a transfer must compute alike: the route and the shape size and
 * address every area; round one, Pull by read and the chunks cut the transfers. */
typedef struct sched_net_card {
    int32_t  spec_tokens;
    int32_t  pull_read;
    uint64_t chunk_bytes;
    int32_t  node_reduce;
    int32_t  route;
    int32_t  shape[7]; /* experts, topk, hidden, dtype, combine dtype, max_tokens, capacity */
    int32_t  window_tokens; /* a round's own tokens: max_tokens unless streamed */
} sched_net_card_t;

static sched_net_card_t sched_net_card(const sched_moe_t *moe)
{
    const strata_moe_params_t *p = &moe->params;

    return (sched_net_card_t){
        .spec_tokens = moe->geo.spec_tokens, .pull_read = moe->pull_read,
        .chunk_bytes = inter_engine_chunk_bytes(moe->world.engine),
        .node_reduce = p->combine == STRATA_MOE_COMBINE_NODE_REDUCE,
        .route       = (int32_t)moe->geo.route,
        .window_tokens = moe->geo.streamed ? moe->geo.window_tokens : 0,
        .shape       = {p->num_experts, p->topk, p->hidden, (int32_t)p->dtype,
                        (int32_t)p->combine_dtype, p->max_tokens, moe->geo.capacity},
    };
}

/* STRATA_ERR_CONFIG, logged, where rank r's card differs from ours. */
static strata_status_t sched_card_compare(const sched_net_card_t *theirs,
                                          const sched_net_card_t *mine, int r, int me)
{
    if (theirs->route != mine->route ||
        memcmp(theirs->shape, mine->shape, sizeof(mine->shape)) != 0) {
        UTIL_LOG_ERROR("moe: rank %d made its object for the %s route, %d experts, top-%d, "
                       "hidden %d, %d tokens, capacity %d; this rank %d for the %s route, %d, "
                       "%d, %d, %d, %d: every rank must pass the same params, and the same "
                       "STRATA_MOE_ROUTE, STRATA_MOE_FLAT_TOKENS and STRATA_MOE_CAPACITY_FACTOR "
                       "(whose default follows the exchange)", r,
                       theirs->route == STRATA_MOE_ROUTE_FLAT ? "flat" : "hierarchical",
                       theirs->shape[0], theirs->shape[1], theirs->shape[2], theirs->shape[5],
                       theirs->shape[6], me,
                       mine->route == STRATA_MOE_ROUTE_FLAT ? "flat" : "hierarchical",
                       mine->shape[0], mine->shape[1], mine->shape[2], mine->shape[5],
                       mine->shape[6]);
    } else if (theirs->spec_tokens != mine->spec_tokens ||
               theirs->pull_read != mine->pull_read || theirs->chunk_bytes != mine->chunk_bytes) {
        UTIL_LOG_ERROR("moe: rank %d sends %d tokens in round one, pulls by %s, cuts "
                       "transfers at %llu bytes; this rank %d, %s, %llu: "
                       "STRATA_MOE_SPEC_TOKENS, STRATA_MOE_PULL_READ and "
                       "STRATA_INTER_STRIPE_MIN must match on every rank", r,
                       theirs->spec_tokens, theirs->pull_read ? "read" : "request",
                       (unsigned long long)theirs->chunk_bytes, mine->spec_tokens,
                       mine->pull_read ? "read" : "request",
                       (unsigned long long)mine->chunk_bytes);
    } else if (theirs->window_tokens != mine->window_tokens) {
        UTIL_LOG_ERROR("moe: rank %d streams %d of each rank's tokens a round across nodes, "
                       "this rank %d streams %d (0: the worst-case exchange): "
                       "STRATA_MOE_EXCHANGE (or params.exchange) and STRATA_MOE_WINDOW_BYTES "
                       "must match on every rank", r, theirs->window_tokens, me,
                       mine->window_tokens);
    } else if (theirs->node_reduce != mine->node_reduce) {
        UTIL_LOG_ERROR("moe: rank %d combines %s, this rank %d %s: STRATA_MOE_COMBINE (or "
                       "params.combine) must match on every rank", r,
                       theirs->node_reduce ? "node-reduce" : "exact", me,
                       mine->node_reduce ? "node-reduce" : "exact");
    } else {
        return STRATA_OK;
    }
    return STRATA_ERR_CONFIG;
}

/* Every rank's card, before anything is sized from them; a rank that differs fails the
 * object on every rank. Collective. */
strata_status_t sched_net_agree(sched_moe_t *moe)
{
    sched_net_card_t mine = sched_net_card(moe);
    sched_net_card_t *all = calloc((size_t)moe->geo.world_size, sizeof(*all));
    strata_status_t status = all ? moe->world.allgather(moe->world.allgather_ctx, &mine, all,
                                                        sizeof(mine))
                                 : STRATA_ERR_NO_MEMORY;

    for (int r = 0; r < moe->geo.world_size && status == STRATA_OK; ++r) {
        status = sched_card_compare(&all[r], &mine, r, moe->geo.rank);
    }
    free(all);
    return status;
}

strata_status_t sched_net_open(sched_moe_t *moe)
{
    sched_net_t *net = &moe->net;
    inter_rdesc_t mine;
    int32_t ready = 0, *all_ready;
    strata_status_t status;

    if (moe->geo.num_peers == 0) {
        return STRATA_OK;
    }
    net->chunk_bytes = inter_engine_chunk_bytes(moe->world.engine);
    net->desc = calloc((size_t)moe->geo.world_size, sizeof(inter_rdesc_t));
    all_ready = calloc((size_t)moe->geo.world_size, sizeof(int32_t));
    status = net->desc && all_ready ? sched_net_register(moe) : STRATA_ERR_NO_MEMORY;
    if (status == STRATA_OK) {
        inter_engine_mem_range(net->mr, net->mr_offset, net->offsets.total, &mine);
        status = moe->world.allgather(moe->world.allgather_ctx, &mine, net->desc, sizeof(mine));
    }
    if (status == STRATA_OK && (status = sched_net_tables(moe)) == STRATA_OK) {
        status = sched_net_ring(moe);
    }
    if (status == STRATA_OK) {
        sched_net_args(moe);
        /* Nobody writes before every rank's ring counts the immediates. */
        status = moe->world.allgather(moe->world.allgather_ctx, &ready, all_ready, sizeof(ready));
    }
    free(all_ready);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("moe: setting up the network area failed: %s",
                       strata_status_string(status));
    }
    return status;
}

static void sched_heap_release(void *heap)
{
    intra_heap_destroy(heap);
}

void sched_net_close(sched_moe_t *moe)
{
    sched_net_t *net = &moe->net;
    const intra_device_ops_t *d = moe->world.device;
    bool failed = moe->cur.state == SCHED_STEP_FAILED;

    inter_engine_ring_detach(moe->world.engine, net->ring);
    if (d != NULL) {
        d->host_free(net->ring_host);
        if (net->device_mem != NULL) {
            d->mem_free(net->device_mem);
        }
    }
    if (net->mr != NULL && failed) {
        /* A dead peer's operations may still be in the transport: the memory they reach
         * goes only once the engine's endpoints are shut. */
        if (net->bounce) {
            inter_engine_mem_release_late(moe->world.engine, net->mr, net->bounce_host,
                                          d->host_free);
            net->bounce_host = NULL;
        } else {
            inter_engine_mem_release_late(moe->world.engine, net->mr, moe->heap,
                                          sched_heap_release);
            moe->heap = NULL;
        }
    } else {
        inter_engine_mem_deregister(moe->world.engine, net->mr);
    }
    if (d != NULL) {
        d->host_free(net->bounce_host);
    }
    free(net->desc);
    memset(net, 0, sizeof(*net));
}

strata_status_t sched_net_prepare(sched_moe_t *moe)
{
    sched_net_t *net = &moe->net;
    sched_modes_t *m = &moe->modes;
    const sched_plan_t *plan = moe->cur.plan;
    intra_net_args_t *a = &net->args;
    strata_status_t status = STRATA_OK;

    if (!m->uploaded_valid || memcmp(m->uploaded, m->step_mask, sched_mask_bytes(moe)) != 0) {
        /* Stream-ordered: after the kernels of the last step, which read the old mask. */
        status = intra_moe_write(moe->intra, net->mask, m->step_mask, sched_mask_bytes(moe));
        if (status != STRATA_OK) {
            return status;
        }
        memcpy(m->uploaded, m->step_mask, sched_mask_bytes(moe));
        m->uploaded_valid = true;
    }
    a->num_own    = plan->num_tokens;
    a->peer_first = plan->d_peer_first;
    a->tokens     = plan->d_tokens;
    a->experts    = plan->d_experts;
    a->clean_idx  = plan->d_clean_idx;
    a->node_idx   = plan->d_node_idx;
    a->peer_terms = plan->d_peer_terms;
    a->plan_counts = plan->d_step_counts;
    a->x          = moe->cur.x;
    a->x_scales   = moe->cur.x_scales;
    a->digest     = m->digest;
    memset(a->next, 0, sizeof(a->next));
    memcpy(a->next, m->sent_bits, sizeof(uint64_t) * (size_t)moe->geo.own_words);
    return STRATA_OK;
}
