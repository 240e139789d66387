/*
 * The two-tier MoE object: parameters and configuration resolved, the ranks it exchanges
 * tokens with, the node's symmetric heap and intra-tier object, the registered network
 * area, and the helpers every phase of a step uses.
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
} sched_moe_config_t;

static const char *const sched_route_names[] = {"auto", "flat", "hierarchical", NULL};

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
};

const util_config_table_t sched_moe_config_table = {
    .layer       = "moe",
    .fields      = sched_moe_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(sched_moe_config_fields),
    .struct_size = sizeof(sched_moe_config_t),
};

static size_t sched_round_up(size_t n, size_t unit)
{
    return (n + unit - 1) / unit * unit;
}

static size_t sched_elem_size(strata_dtype_t dtype)
{
    return dtype == STRATA_DTYPE_FP32 ? 4 : dtype == STRATA_DTYPE_FP8_E4M3 ? 1 : 2;
}

/* What the intra tier does not check itself: the world's shape. */
static bool sched_params_valid(const strata_moe_params_t *p, const sched_moe_world_t *w)
{
    int max_world = (int)((INTER_IMM_MAX - STRATA_MOE_IMM_BASE) / SCHED_IMM_KINDS);

    if (w->world_size > max_world) {
        UTIL_LOG_ERROR("moe: %d ranks; at most %d are supported", w->world_size, max_world);
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

    moe->mode = moe->params.mode;
    if (moe->mode == STRATA_MOE_MODE_DEFAULT) {
        if (file != NULL) {
            UTIL_LOG_WARN("moe: mode_file %s is ignored: the mode comes from STRATA_MOE_MODE "
                          "(set params.mode to adaptive or fixed to use it)", file);
        }
        file = NULL;
        if (strcmp(text, "push") == 0 || strcmp(text, "pull") == 0) {
            moe->mode = strcmp(text, "push") == 0 ? STRATA_MOE_MODE_PUSH : STRATA_MOE_MODE_PULL;
        } else if (strcmp(text, "adaptive") == 0) {
            moe->mode = STRATA_MOE_MODE_ADAPTIVE;
        } else if (strncmp(text, fixed, sizeof(fixed) - 1) == 0 && text[sizeof(fixed) - 1]) {
            moe->mode = STRATA_MOE_MODE_FIXED;
            file      = text + sizeof(fixed) - 1;
        } else {
            UTIL_LOG_ERROR("moe: STRATA_MOE_MODE=%s is not push, pull, adaptive or "
                           "fixed:<file>", text);
            return STRATA_ERR_CONFIG;
        }
    } else if (moe->mode < STRATA_MOE_MODE_PUSH || moe->mode > STRATA_MOE_MODE_FIXED ||
               (moe->mode == STRATA_MOE_MODE_FIXED && file == NULL)) {
        UTIL_LOG_ERROR("moe: mode %d%s", (int)moe->mode,
                       moe->mode == STRATA_MOE_MODE_FIXED ? " needs a mode_file"
                                                          : " is not a strata_moe_mode_t");
        return STRATA_ERR_INVALID;
    }
    if (file != NULL && (moe->mode_file = strdup(file)) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    return STRATA_OK;
}

static strata_status_t sched_resolve_config(sched_moe_t *moe)
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
    moe->route = moe->params.route;
    if (moe->route == STRATA_MOE_ROUTE_DEFAULT) {
        moe->route = config.route == 1 ? STRATA_MOE_ROUTE_FLAT
                     : config.route == 2 ? STRATA_MOE_ROUTE_HIERARCHICAL
                     : moe->params.max_tokens <= config.flat_tokens ? STRATA_MOE_ROUTE_FLAT
                                                                    : STRATA_MOE_ROUTE_HIERARCHICAL;
    }
    moe->spec_tokens = (int)UTIL_MIN(config.spec_tokens, (int64_t)moe->params.max_tokens);
    moe->pull_read   = config.pull_read && inter_engine_has_read(moe->world.engine);
    moe->timeout_ns  = config.timeout_ns;
    return STRATA_OK;
}

/* Node membership, and the ranks this one exchanges tokens with: on the flat route every
 * rank of another node, on the hierarchical one the rank with this local index there. */
static strata_status_t sched_map_peers(sched_moe_t *moe)
{
    const sched_moe_world_t *w = &moe->world;
    int me = w->rank;

    moe->local_size = w->world_size / w->num_nodes;
    moe->node_ranks = calloc((size_t)w->world_size, sizeof(int));
    moe->peers      = calloc((size_t)w->world_size, sizeof(int));
    moe->peer_index = calloc((size_t)w->world_size, sizeof(int));
    if (!moe->node_ranks || !moe->peers || !moe->peer_index) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int r = 0; r < w->world_size; ++r) {
        if (w->rank_local[r] >= moe->local_size) {
            UTIL_LOG_ERROR("moe: rank %d is local rank %d of node %d: every node needs %d "
                           "ranks", r, w->rank_local[r], w->rank_node[r], moe->local_size);
            return STRATA_ERR_INVALID;
        }
        moe->node_ranks[w->rank_node[r] * moe->local_size + w->rank_local[r]] = r;
        moe->peer_index[r] = -1;
    }
    for (int r = 0; r < w->world_size; ++r) {
        bool remote = w->rank_node[r] != w->rank_node[me];

        if (remote && (moe->route == STRATA_MOE_ROUTE_FLAT ||
                       w->rank_local[r] == w->rank_local[me])) {
            moe->peer_index[r]           = moe->num_peers;
            moe->peers[moe->num_peers++] = r;
        }
    }
    return STRATA_OK;
}

static void sched_size_rows(sched_moe_t *moe)
{
    const strata_moe_params_t *p = &moe->params;
    int align = UTIL_MAX(p->expert_alignment, 1);
    int64_t capacity = p->capacity > 0 ? p->capacity
                                       : (int64_t)p->max_tokens * moe->world.world_size;

    moe->experts_per_rank = p->num_experts / moe->world.world_size;
    moe->experts_per_node = moe->experts_per_rank * moe->local_size;
    moe->params.capacity  = (int)((capacity + align - 1) / align * align);
    moe->scale_count  = p->dtype == STRATA_DTYPE_FP8_E4M3 ? p->hidden / INTRA_MOE_SCALE_COLUMNS
                                                          : 0;
    moe->row_bytes    = (size_t)p->hidden * sched_elem_size(p->dtype);
    moe->scale_bytes  = sched_round_up((size_t)moe->scale_count * sizeof(float), 16);
    moe->record_bytes = sched_round_up(sizeof(int32_t) * (size_t)(1 + p->topk), 16);
    moe->entry_bytes  = moe->record_bytes + moe->row_bytes + moe->scale_bytes;
    moe->y_row_bytes  = (size_t)p->hidden * sched_elem_size(p->combine_dtype);
    moe->max_aug      = p->max_tokens * (1 + moe->num_peers);
    moe->mask_words   = (p->num_experts + 63) / 64;
    moe->own_words    = (moe->experts_per_rank + 63) / 64;
    moe->header_bytes = sched_round_up(sizeof(sched_header_t) +
                                           sizeof(uint64_t) * (size_t)moe->own_words,
                                       SCHED_CTRL_BYTES);
    moe->board_bytes  = sched_round_up(sizeof(sched_board_t) +
                                           sizeof(uint64_t) * (size_t)moe->mask_words,
                                       SCHED_CTRL_BYTES);
}

static size_t sched_place(size_t *cursor, size_t bytes)
{
    size_t at = *cursor;

    *cursor = sched_round_up(at + bytes, 256);
    return at;
}

static void sched_layout_net(sched_moe_t *moe)
{
    sched_net_layout_t *l = &moe->net_layout;
    size_t world = (size_t)moe->world.world_size, cursor = 0;
    size_t max_tokens = (size_t)moe->params.max_tokens;

    l->terms    = sched_place(&cursor, (size_t)moe->max_aug * (size_t)moe->params.topk *
                                           moe->y_row_bytes);
    l->headers  = sched_place(&cursor, 2 * world * moe->header_bytes);
    l->grants   = sched_place(&cursor, world * SCHED_CTRL_BYTES);
    l->out_headers = sched_place(&cursor, world * moe->header_bytes);
    l->out_grants  = sched_place(&cursor, world * SCHED_CTRL_BYTES);
    l->spec     = sched_place(&cursor, world * (size_t)moe->spec_tokens * moe->entry_bytes);
    l->overflow = sched_place(&cursor, (size_t)moe->num_peers * max_tokens * moe->entry_bytes);
    l->staging  = sched_place(&cursor, world * max_tokens * moe->entry_bytes);
    l->ret_out  = sched_place(&cursor, (size_t)moe->num_peers * max_tokens *
                                           (size_t)moe->params.topk * moe->y_row_bytes);
    l->ret_in   = sched_place(&cursor, (size_t)moe->num_peers * max_tokens *
                                           (size_t)moe->params.topk * moe->y_row_bytes);
    l->total    = sched_place(&cursor, 0);
}

/* The node's heap, holding the intra tier's buffers, every rank's origin table and its
 * mode boards. */
static strata_status_t sched_open_intra(sched_moe_t *moe, const char *job_key)
{
    const strata_moe_params_t *p = &moe->params;
    intra_moe_params_t ip = {
        .num_experts   = moe->experts_per_node,
        .topk          = p->topk,
        .hidden        = p->hidden,
        .dtype         = p->dtype,
        .combine_dtype = p->combine_dtype,
        .max_tokens    = moe->max_aug,
        .capacity      = p->capacity,
        .timeout_ns    = moe->world.peer_timeout_ns,
    };
    size_t origin_bytes = (size_t)moe->max_aug * 2 * sizeof(int32_t);
    size_t board_bytes  = 2 * moe->board_bytes;
    size_t intra_bytes  = intra_moe_heap_size(&ip, moe->local_size);
    char key[128];
    intra_heap_params_t hp = {
        .device     = moe->world.device,
        .local_rank = moe->world.rank_local[moe->world.rank],
        .local_size = moe->local_size,
        .size       = intra_bytes + origin_bytes + board_bytes + 3 * INTRA_DEVICE_ALIGNMENT,
        .job_key    = key,
        .timeout_ns = moe->timeout_ns,
    };
    strata_status_t status;

    /* Per node: nodes may share a network namespace, and so the socket's name space. */
    snprintf(key, sizeof(key), "%s-node%d", job_key,
             moe->world.rank_node[moe->world.rank]);
    if (intra_bytes == 0) {
        return STRATA_ERR_INVALID; /* intra_moe_heap_size named the parameter */
    }
    status = intra_heap_create(&hp, &moe->heap);
    if (status == STRATA_OK) {
        status = intra_moe_create(&ip, moe->heap, &moe->intra);
    }
    if (status == STRATA_OK) {
        status = intra_heap_alloc(moe->heap, "sched-origin", origin_bytes,
                                  INTRA_DEVICE_ALIGNMENT, &moe->origin_offset);
    }
    if (status == STRATA_OK) {
        status = intra_heap_alloc(moe->heap, "sched-modes", board_bytes, INTRA_DEVICE_ALIGNMENT,
                                  &moe->board_offset);
    }
    return status;
}

/* The registered network area, and every rank's descriptor of it. */
static strata_status_t sched_open_net(sched_moe_t *moe)
{
    inter_rdesc_t mine;
    strata_status_t status;

    sched_layout_net(moe);
    if (posix_memalign((void **)&moe->net, 4096, moe->net_layout.total) != 0) {
        moe->net = NULL;
        return STRATA_ERR_NO_MEMORY;
    }
    memset(moe->net, 0, moe->net_layout.total);
    moe->net_desc = calloc((size_t)moe->world.world_size, sizeof(inter_rdesc_t));
    if (moe->net_desc == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = inter_engine_mem_register(moe->world.engine, moe->net, moe->net_layout.total,
                                       &moe->net_mr);
    if (status != STRATA_OK) {
        return status;
    }
    inter_engine_mem_descriptor(moe->net_mr, &mine);
    status = moe->world.allgather(moe->world.allgather_ctx, &mine, moe->net_desc, sizeof(mine));
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("moe: exchanging buffer descriptors failed: %s",
                       strata_status_string(status));
    }
    return status;
}

static strata_status_t sched_alloc_step_buffers(sched_moe_t *moe)
{
    size_t aug = (size_t)moe->max_aug, topk = (size_t)moe->params.topk;
    size_t rows = (size_t)moe->experts_per_rank * (size_t)moe->params.capacity;

    const struct intra_device_ops *device = moe->world.device;
    strata_status_t status;

    /* The intra kernels read their token ids from device memory. */
    status = device->mem_alloc(aug * topk * sizeof(int64_t), (void **)&moe->aug_idx);
    if (status != STRATA_OK) {
        return status;
    }
    if (posix_memalign((void **)&moe->aug_x, 64, UTIL_MAX(aug * moe->row_bytes, 64)) != 0) {
        moe->aug_x = NULL;
        return STRATA_ERR_NO_MEMORY;
    }
    moe->aug_scales = calloc(aug * (size_t)UTIL_MAX(moe->scale_count, 1), sizeof(float));
    moe->host_idx   = calloc(aug * topk, sizeof(int64_t));
    moe->aug_origin = calloc(aug * 2, sizeof(int32_t));
    moe->src_pages  = calloc(aug * topk, sizeof(uint32_t));
    moe->ret_map    = calloc((size_t)UTIL_MAX(moe->num_peers, 1) *
                                 (size_t)moe->params.max_tokens * topk, sizeof(int32_t));
    moe->peer_step  = calloc((size_t)UTIL_MAX(moe->num_peers, 1), sizeof(sched_peer_step_t));
    moe->requests   = calloc((size_t)UTIL_MAX(moe->num_peers, 1) * SCHED_MAX_REQUESTS_PER_PEER,
                             sizeof(inter_request_t *));
    moe->src        = calloc(UTIL_MAX(rows, 1), sizeof(strata_moe_source_t));
    moe->intra_src  = calloc(UTIL_MAX(rows, 1), sizeof(intra_moe_source_t));
    moe->origins    = calloc((size_t)moe->local_size * aug * 2, sizeof(int32_t));
    moe->decided    = calloc((size_t)moe->experts_per_rank, sizeof(bool));
    moe->next_bits  = calloc((size_t)moe->own_words, sizeof(uint64_t));
    moe->sent_bits  = calloc((size_t)moe->own_words, sizeof(uint64_t));
    moe->node_tokens = calloc((size_t)moe->experts_per_rank * (size_t)moe->world.num_nodes,
                              sizeof(int32_t));
    moe->dispatch_mask      = calloc((size_t)moe->mask_words, sizeof(uint64_t));
    moe->combine_mask       = calloc((size_t)moe->mask_words, sizeof(uint64_t));
    moe->step_dispatch_mask = calloc((size_t)moe->mask_words, sizeof(uint64_t));
    moe->stats_mask         = calloc((size_t)moe->mask_words, sizeof(uint64_t));
    if (!moe->aug_scales || !moe->host_idx || !moe->aug_origin || !moe->src_pages ||
        !moe->ret_map || !moe->peer_step || !moe->requests || !moe->src || !moe->intra_src ||
        !moe->origins || !moe->decided || !moe->next_bits || !moe->sent_bits ||
        !moe->node_tokens || !moe->dispatch_mask || !moe->combine_mask ||
        !moe->step_dispatch_mask || !moe->stats_mask) {
        return STRATA_ERR_NO_MEMORY;
    }
    return STRATA_OK;
}

void sched_fill_masks(sched_moe_t *moe, bool pull)
{
    memset(moe->dispatch_mask, 0, sched_mask_bytes(moe));
    for (int e = 0; pull && e < moe->params.num_experts; ++e) {
        moe->dispatch_mask[e / 64] |= UINT64_C(1) << (e % 64);
    }
    memcpy(moe->combine_mask, moe->dispatch_mask, sched_mask_bytes(moe));
}

static int *sched_copy_ints(const int *src, int n)
{
    int *copy = malloc(sizeof(int) * (size_t)n);

    if (copy != NULL) {
        memcpy(copy, src, sizeof(int) * (size_t)n);
    }
    return copy;
}

strata_status_t sched_moe_create(const strata_moe_params_t *params, const sched_moe_world_t *world,
                                 sched_moe_t **moe_p)
{
    strata_status_t status;
    sched_moe_t *moe;

    if (params == NULL || world == NULL || moe_p == NULL || !sched_params_valid(params, world)) {
        return STRATA_ERR_INVALID;
    }
    if (world->num_nodes > 1 && strcmp(world->device->name, "host") != 0) {
        /* The network area would have to be device memory registered with the NIC. */
        UTIL_LOG_ERROR("moe: across nodes, the %s backend needs GPU memory registration "
                       "(GPUDirect RDMA), which this version does not do", world->device->name);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (params->num_experts > INTRA_MOE_MAX_EXPERTS * world->num_nodes) {
        UTIL_LOG_ERROR("moe: %d experts on %d nodes; at most %d per node are supported",
                       params->num_experts, world->num_nodes, INTRA_MOE_MAX_EXPERTS);
        return STRATA_ERR_INVALID;
    }
    moe = calloc(1, sizeof(*moe));
    if (moe == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    moe->params    = *params;
    moe->world     = *world;
    moe->host_heap = strcmp(world->device->name, "host") == 0;
    /* Ours to keep: the caller's arrays need not outlive the object; the key is used once. */
    moe->world.job_key    = NULL;
    moe->world.rank_node  = sched_copy_ints(world->rank_node, world->world_size);
    moe->world.rank_local = sched_copy_ints(world->rank_local, world->world_size);
    status = STRATA_ERR_NO_MEMORY;
    if (moe->world.rank_node == NULL || moe->world.rank_local == NULL ||
        (status = sched_resolve_config(moe)) != STRATA_OK ||
        (status = sched_map_peers(moe)) != STRATA_OK) {
        goto err;
    }
    sched_size_rows(moe);
    if ((status = sched_open_intra(moe, world->job_key)) != STRATA_OK ||
        (status = sched_open_net(moe)) != STRATA_OK ||
        (status = sched_alloc_step_buffers(moe)) != STRATA_OK) {
        goto err;
    }
    sched_fill_masks(moe, moe->mode == STRATA_MOE_MODE_PULL);
    moe->stats.route             = moe->route;
    moe->stats.num_local_experts = moe->experts_per_rank;
    UTIL_LOG_INFO("moe: %d experts, top-%d, hidden %d, %s route, %d peers, round one %d "
                  "tokens, capacity %d, network area %zu bytes, pull across nodes by %s",
                  params->num_experts, params->topk, params->hidden,
                  moe->route == STRATA_MOE_ROUTE_FLAT ? "flat" : "hierarchical", moe->num_peers,
                  moe->spec_tokens, moe->params.capacity, moe->net_layout.total,
                  moe->pull_read ? "read" : "request");
    *moe_p = moe;
    return STRATA_OK;

err:
    sched_moe_destroy(moe);
    return status;
}

void sched_moe_destroy(sched_moe_t *moe)
{
    if (moe == NULL) {
        return;
    }
    if (moe->num_requests > 0 && moe->state != SCHED_STEP_FAILED) {
        (void)sched_finish_requests(moe);
    }
    for (int i = 0; i < moe->num_requests; ++i) {
        inter_request_free(moe->requests[i]);
    }
    intra_moe_destroy(moe->intra);
    intra_heap_destroy(moe->heap);
    if (moe->state == SCHED_STEP_FAILED && moe->net_mr != NULL) {
        /* A dead peer's operations may still be in the transport: not before it closes. */
        inter_engine_mem_release_late(moe->world.engine, moe->net_mr, moe->net, free);
    } else {
        inter_engine_mem_deregister(moe->world.engine, moe->net_mr);
        free(moe->net);
    }
    free(moe->net_desc);
    free(moe->aug_x);
    free(moe->aug_scales);
    if (moe->aug_idx != NULL) {
        moe->world.device->mem_free(moe->aug_idx);
    }
    free(moe->host_idx);
    free(moe->aug_origin);
    free(moe->src_pages);
    free(moe->ret_map);
    free(moe->peer_step);
    free(moe->requests);
    free(moe->src);
    free(moe->intra_src);
    free(moe->origins);
    free(moe->decided);
    free(moe->next_bits);
    free(moe->sent_bits);
    free(moe->node_tokens);
    free(moe->dispatch_mask);
    free(moe->combine_mask);
    free(moe->step_dispatch_mask);
    free(moe->stats_mask);
    free(moe->mode_file);
    if (moe->decider != NULL) {
        moe->decider->destroy(moe->decider_ctx);
    }
    free(moe->node_ranks);
    free(moe->peers);
    free(moe->peer_index);
    free((void *)moe->world.rank_node);
    free((void *)moe->world.rank_local);
    free(moe);
}

strata_status_t sched_moe_set_pull_mask(sched_moe_t *moe, const uint64_t *dispatch_mask,
                                        const uint64_t *combine_mask)
{
    int words = (moe->params.num_experts + 63) / 64;

    if (moe->state != SCHED_STEP_IDLE) {
        UTIL_LOG_ERROR("moe: pull masks can change only between steps");
        return moe->state == SCHED_STEP_FAILED ? STRATA_ERR_PEER_FAILED : STRATA_ERR_INVALID;
    }
    if (moe->decider != NULL) {
        UTIL_LOG_ERROR("moe: in adaptive mode the experts' owners set the modes");
        return STRATA_ERR_INVALID;
    }
    memset(moe->dispatch_mask, 0, sched_mask_bytes(moe));
    memset(moe->combine_mask, 0, sched_mask_bytes(moe));
    if (dispatch_mask != NULL) {
        memcpy(moe->dispatch_mask, dispatch_mask, sizeof(uint64_t) * (size_t)words);
    }
    if (combine_mask != NULL) {
        memcpy(moe->combine_mask, combine_mask, sizeof(uint64_t) * (size_t)words);
    }
    if (moe->params.num_experts % 64 != 0) {
        uint64_t keep = (UINT64_C(1) << (moe->params.num_experts % 64)) - 1;

        moe->dispatch_mask[words - 1] &= keep;
        moe->combine_mask[words - 1] &= keep;
    }
    return STRATA_OK;
}

void sched_node_mask(const sched_moe_t *moe, const uint64_t *global, uint64_t *node_mask)
{
    int node = moe->world.rank_node[moe->world.rank];

    memset(node_mask, 0, sizeof(uint64_t) * SCHED_MASK_WORDS);
    for (int j = 0; j < moe->experts_per_node; ++j) {
        if (sched_mask_test(global, sched_node_expert(moe, node, j))) {
            node_mask[j / 64] |= UINT64_C(1) << (j % 64);
        }
    }
}

void sched_moe_stats(const sched_moe_t *moe, strata_moe_stats_t *stats_p)
{
    *stats_p = moe->stats;
}

strata_status_t sched_fail(sched_moe_t *moe, strata_status_t status, const char *what)
{
    UTIL_LOG_ERROR("moe: step %" PRIu64 " failed %s: %s; the object can only be destroyed",
                   moe->step, what, strata_status_string(status));
    moe->state = SCHED_STEP_FAILED;
    return status;
}

strata_status_t sched_wait_imm(sched_moe_t *moe, sched_imm_kind_t kind, int from, uint64_t count,
                               const char *what)
{
    strata_status_t status;

    if (count == 0) {
        return STRATA_OK;
    }
    /* from_peer -1: the failure of any rank ends the wait, since a step needs all of them. */
    status = inter_engine_imm_wait(moe->world.engine, sched_imm(moe, kind, from), count, -1,
                                   moe->timeout_ns);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("moe: waiting for %s from rank %d: %s", what, from,
                       strata_status_string(status));
    }
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
                UTIL_LOG_ERROR("moe: rank %d failed during step %" PRIu64, r, moe->step);
                return STRATA_ERR_PEER_FAILED;
            }
        }
        util_sleep_ns(UTIL_NSEC_PER_MSEC * 10);
    } while (util_clock_now_ns() < deadline);
    return status;
}

void sched_keep_request(sched_moe_t *moe, inter_request_t *req)
{
    moe->requests[moe->num_requests++] = req;
}

strata_status_t sched_finish_requests(sched_moe_t *moe)
{
    strata_status_t status = STRATA_OK, one;
    int kept = 0;

    for (int i = 0; i < moe->num_requests; ++i) {
        one = inter_request_wait(moe->requests[i], moe->timeout_ns);
        if (one == STRATA_ERR_TIMEOUT) {
            moe->requests[kept++] = moe->requests[i]; /* still running: never free it early */
        } else {
            inter_request_free(moe->requests[i]);
        }
        if (status == STRATA_OK && one != STRATA_OK) {
            status = one;
        }
    }
    moe->num_requests = kept;
    return status;
}
