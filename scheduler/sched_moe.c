/*
 * The two-tier MoE object: parameters and configuration resolved, its geometry (the ranks
 * it exchanges tokens with, the sizes of rows and entries), the node's heap and intra-tier
 * object, and the helpers every phase of a step uses.
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sched_moe_config {
    int      route;
    int64_t  flat_tokens;
    int64_t  spec_tokens;
    char    *mode;
    bool     pull_read;
    uint64_t timeout_ns;
    int      net_memory;
} sched_moe_config_t;

static const char *const sched_route_names[] = {"auto", "flat", "hierarchical", NULL};
static const char *const sched_net_memory_names[] = {"auto", "heap", "bounce", NULL};

static const util_config_field_t sched_moe_config_fields[] = {
    {.name = "MOE_ROUTE", .default_value = "auto",
     .doc = "How tokens cross nodes: flat (straight to each rank), hierarchical (once per "
            "node, fanned out there), or auto (flat up to STRATA_MOE_FLAT_TOKENS tokens).",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(sched_moe_config_t, route),
     .enum_names = sched_route_names},
    {.name = "MOE_FLAT_TOKENS", .default_value = "128",
     .doc = "auto route: the largest max_tokens that still takes the flat route.",
     .type = UTIL_CONFIG_INT, .offset = offsetof(sched_moe_config_t, flat_tokens)},
    {.name = "MOE_SPEC_TOKENS", .default_value = "32",
     .doc = "Tokens per destination sent in round one of dispatch, before the counts are "
            "known; the rest follow in round two.",
     .type = UTIL_CONFIG_INT, .offset = offsetof(sched_moe_config_t, spec_tokens)},
    {.name = "MOE_MODE", .default_value = "push",
     .doc = "How experts move where the params leave it open: push, pull, adaptive (each "
            "expert's owner switches it from routing statistics), or fixed:<file> (a "
            "per-expert mask file, docs/adaptive.md).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(sched_moe_config_t, mode)},
    {.name = "MOE_PULL_READ", .default_value = "on",
     .doc = "Pull across nodes by RDMA read where the transport has it (off: ask the "
            "sender to push).",
     .type = UTIL_CONFIG_BOOL, .offset = offsetof(sched_moe_config_t, pull_read)},
    {.name = "MOE_TIMEOUT", .default_value = "60s",
     .doc = "Bound on each wait of a MoE step for live peers (a dead peer fails the step "
            "within STRATA_INTER_PEER_TIMEOUT).",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(sched_moe_config_t, timeout_ns)},
    {.name = "MOE_NET_MEMORY", .default_value = "auto",
     .doc = "Where the network area lives: heap (the node's symmetric heap, registered with "
            "the transport: device memory on GPUs), bounce (a pinned host buffer the kernels "
            "write through), or auto (heap where the transport can register it).",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(sched_moe_config_t, net_memory),
     .enum_names = sched_net_memory_names},
};

const util_config_table_t sched_moe_config_table = {
    .layer       = "moe",
    .fields      = sched_moe_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(sched_moe_config_fields),
    .struct_size = sizeof(sched_moe_config_t),
};

static size_t sched_elem_size(strata_dtype_t dtype)
{
    return dtype == STRATA_DTYPE_FP32 ? 4 : dtype == STRATA_DTYPE_FP8_E4M3 ? 1 : 2;
}

uint32_t sched_moe_imm_count(int world_size)
{
    return INTRA_NET_IMM_KINDS * (uint32_t)world_size;
}

/* What the intra tier does not check itself: the world's shape. */
static bool sched_params_valid(const strata_moe_params_t *p, const sched_moe_world_t *w)
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
    } else {
        return true;
    }
    return false;
}

/* The mode and its file, from the params or else STRATA_MOE_MODE. */
static strata_status_t sched_resolve_mode(sched_moe_t *moe, const char *text)
{
    static const char fixed[] = "fixed:";
    const char *file = moe->params.mode_file;
    sched_modes_t *m = &moe->modes;

    m->mode = moe->params.mode;
    if (m->mode == STRATA_MOE_MODE_DEFAULT) {
        if (file != NULL) {
            UTIL_LOG_WARN("moe: mode_file %s is ignored: the mode comes from STRATA_MOE_MODE "
                          "(set params.mode to adaptive or fixed to use it)", file);
        }
        file = NULL;
        if (strcmp(text, "push") == 0 || strcmp(text, "pull") == 0) {
            m->mode = strcmp(text, "push") == 0 ? STRATA_MOE_MODE_PUSH : STRATA_MOE_MODE_PULL;
        } else if (strcmp(text, "adaptive") == 0) {
            m->mode = STRATA_MOE_MODE_ADAPTIVE;
        } else if (strncmp(text, fixed, sizeof(fixed) - 1) == 0 && text[sizeof(fixed) - 1]) {
            m->mode = STRATA_MOE_MODE_FIXED;
            file    = text + sizeof(fixed) - 1;
        } else {
            UTIL_LOG_ERROR("moe: STRATA_MOE_MODE=%s is not push, pull, adaptive or "
                           "fixed:<file>", text);
            return STRATA_ERR_CONFIG;
        }
    } else if (m->mode < STRATA_MOE_MODE_PUSH || m->mode > STRATA_MOE_MODE_FIXED ||
               (m->mode == STRATA_MOE_MODE_FIXED && file == NULL)) {
        UTIL_LOG_ERROR("moe: mode %d%s", (int)m->mode,
                       m->mode == STRATA_MOE_MODE_FIXED ? " needs a mode_file"
                                                        : " is not a strata_moe_mode_t");
        return STRATA_ERR_INVALID;
    }
    if (file != NULL && (m->mode_file = strdup(file)) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    return STRATA_OK;
}

/* The route, round one's size and the other STRATA_MOE_* choices; *net_memory_p: 0 auto,
 * 1 heap, 2 bounce. */
static strata_status_t sched_resolve_config(sched_moe_t *moe, strata_moe_route_t *route_p,
                                            int *spec_p, int *net_memory_p)
{
    sched_moe_config_t config;
    strata_status_t status = util_config_read(&sched_moe_config_table, &config);

    if (status != STRATA_OK) {
        return status;
    }
    status = sched_resolve_mode(moe, config.mode);
    util_config_release(&sched_moe_config_table, &config);
    if (status != STRATA_OK) {
        return status;
    }
    if (config.spec_tokens < 0 || config.spec_tokens > INT32_MAX / 2 || config.flat_tokens < 0) {
        UTIL_LOG_ERROR("moe: STRATA_MOE_SPEC_TOKENS=%" PRId64 " and STRATA_MOE_FLAT_TOKENS=%"
                       PRId64 " must not be negative", config.spec_tokens, config.flat_tokens);
        return STRATA_ERR_CONFIG;
    }
    *route_p = moe->params.route;
    if (*route_p == STRATA_MOE_ROUTE_DEFAULT) {
        *route_p = config.route == 1 ? STRATA_MOE_ROUTE_FLAT
                   : config.route == 2 ? STRATA_MOE_ROUTE_HIERARCHICAL
                   : moe->params.max_tokens <= config.flat_tokens ? STRATA_MOE_ROUTE_FLAT
                                                                  : STRATA_MOE_ROUTE_HIERARCHICAL;
    }
    *spec_p         = (int)UTIL_MIN(config.spec_tokens, (int64_t)moe->params.max_tokens);
    *net_memory_p   = config.net_memory;
    moe->pull_read  = config.pull_read && inter_engine_has_read(moe->world.engine);
    moe->timeout_ns = config.timeout_ns;
    return STRATA_OK;
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
    geo->capacity     = (int)((capacity + align - 1) / align * align);
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
    geo->header_bytes = sched_round_up(sizeof(intra_net_header_t) +
                                           sizeof(uint64_t) * (size_t)geo->own_words,
                                       INTRA_NET_CTRL_BYTES);
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
    status = sched_map_peers(geo);
    if (status == STRATA_OK) {
        sched_size_rows(geo, params);
    }
    return status;
}

void sched_geometry_cleanup(sched_geometry_t *geo)
{
    free(geo->node_ranks);
    free(geo->peers);
    free(geo->peer_index);
}

/* Heap bytes beside the intra tier's: origins, term destinations, mode boards, and across
 * nodes the own tokens' terms and the network area (or the returned terms' stage). */
static size_t sched_heap_extra(const sched_moe_t *moe, bool area_in_heap)
{
    const sched_geometry_t *geo = &moe->geo;
    size_t aug = (size_t)geo->max_aug, topk = (size_t)geo->topk, extra;

    extra = aug * 2 * sizeof(int32_t) + aug * topk * sizeof(int64_t) + 2 * geo->board_bytes;
    if (geo->num_peers > 0) {
        extra += (size_t)geo->max_tokens * topk * geo->y_row_bytes;
        extra += area_in_heap ? moe->net.layout.total
                              : (size_t)geo->num_peers * (size_t)geo->max_tokens * topk *
                                    geo->y_row_bytes;
    }
    return extra + 6 * INTRA_DEVICE_ALIGNMENT;
}

static strata_status_t sched_heap_alloc(sched_moe_t *moe, const char *name, size_t bytes,
                                        size_t *offset_p)
{
    return intra_heap_alloc(moe->heap, name, UTIL_MAX(bytes, 1), INTRA_DEVICE_ALIGNMENT, offset_p);
}

static strata_status_t sched_place_tables(sched_moe_t *moe, bool area_in_heap)
{
    const sched_geometry_t *geo = &moe->geo;
    size_t aug = (size_t)geo->max_aug, topk = (size_t)geo->topk;
    size_t terms = (size_t)geo->max_tokens * topk * geo->y_row_bytes;
    size_t stage = (size_t)geo->num_peers * (size_t)geo->max_tokens * topk * geo->y_row_bytes;
    strata_status_t status;

    if ((status = sched_heap_alloc(moe, "sched-origin", aug * 2 * sizeof(int32_t),
                                   &moe->origin_offset)) != STRATA_OK ||
        (status = sched_heap_alloc(moe, "sched-term-dst", aug * topk * sizeof(int64_t),
                                   &moe->term_dst_offset)) != STRATA_OK ||
        (status = sched_heap_alloc(moe, "sched-modes", 2 * geo->board_bytes,
                                   &moe->modes.board_offset)) != STRATA_OK) {
        return status;
    }
    if (geo->num_peers == 0) {
        return STRATA_OK;
    }
    status = sched_heap_alloc(moe, "sched-terms", terms, &moe->terms_offset);
    if (status == STRATA_OK && area_in_heap) {
        status = sched_heap_alloc(moe, "sched-net", moe->net.layout.total, &moe->net.area_heap);
        moe->stage_offset = moe->net.area_heap + moe->net.layout.ret_out;
    } else if (status == STRATA_OK) {
        status = sched_heap_alloc(moe, "sched-stage", stage, &moe->stage_offset);
    }
    return status;
}

/* The public outputs in mapped host memory, filled by the sources kernel. */
static strata_status_t sched_alloc_public(sched_moe_t *moe)
{
    const intra_device_ops_t *d = moe->world.device;
    size_t rows = (size_t)moe->geo.experts_per_rank * (size_t)moe->geo.capacity;
    strata_status_t status;

    status = d->host_alloc(UTIL_MAX(rows, 1) * sizeof(strata_moe_source_t),
                           (void **)&moe->public_src, &moe->public_src_dev);
    if (status == STRATA_OK) {
        status = d->host_alloc((size_t)moe->geo.experts_per_rank * sizeof(int32_t),
                               (void **)&moe->public_count, &moe->public_count_dev);
    }
    return status;
}

/* The node's heap, the intra tier's object, and the scheduler's tables in the heap. */
static strata_status_t sched_open_intra(sched_moe_t *moe, const char *job_key, bool area_in_heap)
{
    const strata_moe_params_t *p = &moe->params;
    const sched_geometry_t *geo = &moe->geo;
    intra_moe_params_t ip = {
        .num_experts   = geo->experts_per_node,
        .topk          = p->topk,
        .hidden        = p->hidden,
        .dtype         = p->dtype,
        .combine_dtype = p->combine_dtype,
        .max_tokens    = geo->max_aug,
        .capacity      = geo->capacity,
        .timeout_ns    = moe->world.peer_timeout_ns,
    };
    size_t intra_bytes = intra_moe_heap_size(&ip, geo->local_size);
    char key[128];
    intra_heap_params_t hp = {
        .device     = moe->world.device,
        .local_rank = geo->rank_local[geo->rank],
        .local_size = geo->local_size,
        .size       = intra_bytes + sched_heap_extra(moe, area_in_heap),
        .job_key    = key,
        .timeout_ns = moe->timeout_ns,
    };
    intra_moe_tables_t tables;
    strata_status_t status;

    /* Per node: nodes may share a network namespace, and so the socket's name space. */
    snprintf(key, sizeof(key), "%s-node%d", job_key, geo->node);
    if (intra_bytes == 0) {
        return STRATA_ERR_INVALID; /* intra_moe_heap_size named the parameter */
    }
    status = intra_heap_create(&hp, &moe->heap);
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

    plan->moe    = moe;
    plan->device = moe->world.device;
    if ((status = sched_plan_alloc_ids(&moe->geo, plan, moe->geo.max_tokens)) != STRATA_OK ||
        (status = sched_plan_alloc_entries(&moe->geo, plan, moe->geo.max_entries)) != STRATA_OK) {
        return status;
    }
    return sched_plan_device_alloc(moe, plan, moe->geo.max_tokens);
}

static int *sched_copy_ints(const int *src, int n)
{
    int *copy = malloc(sizeof(int) * (size_t)n);

    if (copy != NULL) {
        memcpy(copy, src, sizeof(int) * (size_t)n);
    }
    return copy;
}

static inter_mem_kind_t sched_mem_kind(const intra_device_ops_t *device)
{
    return device->memory == INTRA_MEMORY_CUDA ? INTER_MEM_CUDA
           : device->memory == INTRA_MEMORY_HIP ? INTER_MEM_ROCM
                                                : INTER_MEM_HOST;
}

/* Whether the network area goes in the heap (registered as the device's memory). */
static strata_status_t sched_choose_area(sched_moe_t *moe, int net_memory, bool *in_heap_p)
{
    bool can = inter_engine_can_register(moe->world.engine, sched_mem_kind(moe->world.device));

    *in_heap_p = net_memory != 2 && can;
    if (net_memory == 1 && !can) {
        UTIL_LOG_ERROR("moe: STRATA_MOE_NET_MEMORY=heap, but %s cannot register %s memory",
                       inter_engine_transport_name(moe->world.engine), moe->world.device->name);
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

static strata_status_t sched_moe_open(sched_moe_t *moe, const sched_moe_world_t *world)
{
    strata_moe_route_t route;
    int spec, net_memory;
    bool in_heap = false;
    strata_status_t status;

    if ((status = sched_resolve_config(moe, &route, &spec, &net_memory)) != STRATA_OK ||
        (status = sched_geometry_init(&moe->geo, &moe->params, &moe->world, route, spec)) !=
            STRATA_OK) {
        return status;
    }
    moe->params.capacity = moe->geo.capacity;
    if (moe->geo.num_peers > 0 &&
        ((status = sched_net_agree(moe)) != STRATA_OK ||
         (status = sched_choose_area(moe, net_memory, &in_heap)) != STRATA_OK)) {
        return status;
    }
    moe->net.bounce = moe->geo.num_peers > 0 && !in_heap;
    if ((status = sched_net_layout(moe)) != STRATA_OK ||
        (status = sched_open_intra(moe, world->job_key, in_heap)) != STRATA_OK ||
        (status = sched_net_open(moe)) != STRATA_OK ||
        (status = sched_modes_open(moe)) != STRATA_OK) {
        return status;
    }
    return sched_open_own_plan(moe);
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
    moe->params = *params;
    moe->world  = *world;
    /* Ours to keep: the caller's arrays need not outlive the object; the key is used once. */
    moe->world.job_key    = NULL;
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
    UTIL_LOG_INFO("moe: %d experts, top-%d, hidden %d, %s route, %d peers, round one %d "
                  "tokens, capacity %d, network area %zu bytes in %s, pull across nodes by %s",
                  params->num_experts, params->topk, params->hidden,
                  moe->geo.route == STRATA_MOE_ROUTE_FLAT ? "flat" : "hierarchical",
                  moe->geo.num_peers, moe->geo.spec_tokens, moe->geo.capacity,
                  moe->net.layout.total, moe->net.bounce ? "a host bounce buffer" : "the heap",
                  moe->pull_read ? "read" : "request");
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
        (void)intra_moe_synchronize(moe->intra); /* nothing of ours runs after this */
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
    if (d != NULL) {
        d->host_free(moe->public_src);
        d->host_free(moe->public_count);
    }
    sched_modes_close(moe);
    sched_geometry_cleanup(&moe->geo);
    free((void *)moe->world.rank_node);
    free((void *)moe->world.rank_local);
    free(moe);
}

strata_status_t sched_moe_set_pull_mask(sched_moe_t *moe, const uint64_t *dispatch_mask,
                                        const uint64_t *combine_mask)
{
    sched_modes_t *m = &moe->modes;
    int words = moe->geo.mask_words;

    if (moe->cur.state != SCHED_STEP_IDLE) {
        UTIL_LOG_ERROR("moe: pull masks can change only between steps");
        return moe->cur.state == SCHED_STEP_FAILED ? STRATA_ERR_PEER_FAILED : STRATA_ERR_INVALID;
    }
    if (m->decider != NULL) {
        UTIL_LOG_ERROR("moe: in adaptive mode the experts' owners set the modes");
        return STRATA_ERR_INVALID;
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

void sched_moe_stats(const sched_moe_t *moe, strata_moe_stats_t *stats_p)
{
    *stats_p = moe->stats;
}

strata_status_t sched_moe_set_stream(sched_moe_t *moe, void *stream)
{
    strata_status_t status;

    if (moe->cur.state != SCHED_STEP_IDLE) {
        UTIL_LOG_ERROR("moe: the stream can change only between steps");
        return moe->cur.state == SCHED_STEP_FAILED ? STRATA_ERR_PEER_FAILED : STRATA_ERR_INVALID;
    }
    status = intra_moe_set_stream(moe->intra, stream);
    if (status == STRATA_OK) {
        moe->stream = stream;
    }
    return status;
}

static bool sched_soft(strata_status_t status)
{
    return status == STRATA_ERR_INVALID || status == STRATA_ERR_CAPACITY;
}

strata_status_t sched_drain(sched_moe_t *moe, const char *what)
{
    strata_status_t status = intra_moe_synchronize(moe->intra);

    if (sched_soft(status)) {
        moe->deferred = moe->deferred != STRATA_OK ? moe->deferred : status;
        return STRATA_OK;
    }
    return status == STRATA_OK ? STRATA_OK
                               : sched_fail(moe, sched_intra_failure(moe, status), what);
}

strata_status_t sched_moe_synchronize(sched_moe_t *moe)
{
    strata_status_t status;

    if (moe->cur.state == SCHED_STEP_FAILED) {
        return STRATA_ERR_PEER_FAILED;
    }
    status = sched_drain(moe, "in the device's work");
    if (status == STRATA_OK) {
        status        = moe->deferred;
        moe->deferred = STRATA_OK;
    }
    return status;
}

strata_status_t sched_launched(sched_moe_t *moe, strata_status_t status, const char *what)
{
    return status == STRATA_OK || status == STRATA_ERR_INVALID ? status
                                                               : sched_fail(moe, status, what);
}

strata_status_t sched_synchronize(sched_moe_t *moe, const char *what)
{
    strata_status_t status;

    if (moe->stream != NULL && moe->modes.decider == NULL) {
        return STRATA_OK; /* stream-ordered: errors surface at strata_moe_synchronize */
    }
    status = intra_moe_synchronize(moe->intra);
    if (sched_soft(status)) {
        if (moe->cur.status == STRATA_OK) {
            moe->cur.status = status;
        }
        return STRATA_OK;
    }
    return status == STRATA_OK ? STRATA_OK
                               : sched_fail(moe, sched_intra_failure(moe, status), what);
}

void sched_phase_end(sched_moe_t *moe, strata_moe_phase_t phase)
{
    uint64_t now = util_clock_now_ns();

    moe->stats.phase_ns[phase] = now - moe->cur.mark_ns;
    moe->cur.mark_ns = now;
}

strata_status_t sched_fail(sched_moe_t *moe, strata_status_t status, const char *what)
{
    UTIL_LOG_ERROR("moe: step %" PRIu64 " failed %s: %s; the object can only be destroyed",
                   moe->cur.step, what, strata_status_string(status));
    moe->cur.state = SCHED_STEP_FAILED;
    return status;
}

strata_status_t sched_intra_failure(sched_moe_t *moe, strata_status_t status)
{
    uint64_t deadline = util_clock_now_ns() + moe->world.peer_timeout_ns;

    if (status != STRATA_ERR_TIMEOUT) {
        return status;
    }
    do {
        for (int r = 0; r < moe->world.world_size; ++r) {
            if (inter_engine_peer_failed(moe->world.engine, r)) {
                UTIL_LOG_ERROR("moe: rank %d failed during step %" PRIu64, r, moe->cur.step);
                return STRATA_ERR_PEER_FAILED;
            }
        }
        util_sleep_ns(UTIL_NSEC_PER_MSEC * 10);
    } while (util_clock_now_ns() < deadline);
    return status;
}
