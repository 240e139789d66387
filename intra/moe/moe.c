/*
 * The intra-node MoE object: its configuration, parameters checked, buffers placed in the
 * symmetric heap, and the tables a step across nodes gives it. Launches are moe_launch.c,
 * what the kernels found is moe_status.c.
 */
#include "moe_internal.h"

#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct intra_config {
    int64_t  blocks;
    uint64_t timeout_ns;
} intra_config_t;

static const util_config_field_t intra_config_fields[] = {
    {.name = "INTRA_BLOCKS", .default_value = "0",
     .doc = "Blocks of each intra-node MoE kernel (host backend: threads per rank); 0: the "
            "backend's default (host: the rank's share of the cores it may run on).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(intra_config_t, blocks)},
    {.name = "INTRA_TIMEOUT", .default_value = "10s",
     .doc = "How long an intra-node kernel waits for a local peer before failing the step.",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(intra_config_t, timeout_ns)},
};

const util_config_table_t intra_config_table = {
    .layer       = "intra",
    .fields      = intra_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(intra_config_fields),
    .struct_size = sizeof(intra_config_t),
};

static size_t moe_elem_size(strata_dtype_t dtype)
{
    switch (dtype) {
    case STRATA_DTYPE_BF16:
    case STRATA_DTYPE_FP16:
        return 2;
    case STRATA_DTYPE_FP32:
        return 4;
    case STRATA_DTYPE_FP8_E4M3:
        return 1;
    }
    return 0;
}

static int moe_y_elem(strata_dtype_t dtype)
{
    return dtype == STRATA_DTYPE_BF16   ? INTRA_MOE_ELEM_BF16
           : dtype == STRATA_DTYPE_FP16 ? INTRA_MOE_ELEM_FP16
                                        : INTRA_MOE_ELEM_FP32;
}

/* One line naming the first bad parameter, or true. */
static bool moe_params_valid(const intra_moe_params_t *p, int local_size)
{
    size_t elem = moe_elem_size(p->dtype);

    if (local_size < 1 || local_size > INTRA_MOE_MAX_RANKS) {
        UTIL_LOG_ERROR("intra moe: %d local ranks; at most %d are supported", local_size,
                       INTRA_MOE_MAX_RANKS);
    } else if (p->num_experts < 1 || p->num_experts > INTRA_MOE_MAX_EXPERTS ||
               p->num_experts % local_size != 0) {
        UTIL_LOG_ERROR("intra moe: num_experts %d must be 1..%d and a multiple of the %d "
                       "local ranks", p->num_experts, INTRA_MOE_MAX_EXPERTS, local_size);
    } else if (p->topk < 1 || p->topk > INTRA_MOE_MAX_TOPK) {
        /* Not bounded by num_experts: across nodes a token's top-k spans every node's
         * experts, and the node sees the slots of other nodes' experts as -1. */
        UTIL_LOG_ERROR("intra moe: topk %d must be 1..%d", p->topk, INTRA_MOE_MAX_TOPK);
    } else if (elem == 0) {
        UTIL_LOG_ERROR("intra moe: dtype %d is not a token type", (int)p->dtype);
    } else if (p->combine_dtype == STRATA_DTYPE_FP8_E4M3 || moe_elem_size(p->combine_dtype) == 0) {
        UTIL_LOG_ERROR("intra moe: combine dtype %d must be bf16, fp16 or fp32",
                       (int)p->combine_dtype);
    } else if (p->hidden < 1 || p->hidden > (1 << 20) || (p->hidden * elem) % 16 != 0 ||
               (p->hidden * moe_elem_size(p->combine_dtype)) % 16 != 0 ||
               (p->dtype == STRATA_DTYPE_FP8_E4M3 && p->hidden % INTRA_MOE_SCALE_COLUMNS != 0)) {
        UTIL_LOG_ERROR("intra moe: hidden %d is misaligned: rows must be whole 16-byte units "
                       "in the token and combine types%s", p->hidden,
                       p->dtype == STRATA_DTYPE_FP8_E4M3 ? ", and fp8 a multiple of 128" : "");
    } else if (p->max_tokens < 1 || p->max_tokens > (1 << 24) || p->capacity < 0 ||
               (int64_t)p->max_tokens * p->topk > INT32_MAX || p->round_tokens < 0 ||
               p->round_tokens > p->max_tokens || p->exact_rounds < 0 ||
               p->exact_rounds > p->max_tokens) {
        UTIL_LOG_ERROR("intra moe: max_tokens %d, round_tokens %d (0..max_tokens), "
                       "exact_rounds %d (0..max_tokens) or capacity %d out of range",
                       p->max_tokens, p->round_tokens, p->exact_rounds, p->capacity);
    } else {
        return true;
    }
    return false;
}

static size_t moe_place(size_t *cursor, size_t bytes)
{
    size_t offset = (*cursor + INTRA_DEVICE_ALIGNMENT - 1) & ~(size_t)(INTRA_DEVICE_ALIGNMENT - 1);

    *cursor = offset + bytes;
    return offset;
}

/* The buffers of one rank's part, from offset 0; the shape fields of args must be set. */
static void moe_place_heap(const intra_moe_args_t *a, size_t max_tokens, size_t round_tokens,
                           bool terms_direct, intra_moe_heap_offsets_t *l)
{
    size_t cursor = 0, entries = max_tokens * (size_t)a->topk;
    size_t rows = (size_t)a->experts_per_rank * (size_t)a->capacity;

    l->control      = moe_place(&cursor, sizeof(intra_moe_control_t));
    l->counter      = moe_place(&cursor, sizeof(uint32_t) * (size_t)a->experts_per_rank);
    l->recv_count   = moe_place(&cursor, sizeof(int32_t) * (size_t)a->experts_per_rank);
    l->pull_offset  = moe_place(&cursor, sizeof(int32_t) * (size_t)(a->num_experts + 1));
    l->pull_cursor  = moe_place(&cursor, sizeof(int32_t) * (size_t)a->num_experts);
    l->pull_entry   = moe_place(&cursor, sizeof(int32_t) * entries);
    l->round_offset = moe_place(&cursor, sizeof(int32_t) * (size_t)(a->num_experts + 1) *
                                             (size_t)(a->exact_rounds > 1 ? a->exact_rounds : 0));
    l->sent_count   = moe_place(&cursor, sizeof(int32_t) * (size_t)a->num_experts);
    l->step_sent    = moe_place(&cursor, sizeof(int32_t) * (size_t)a->num_experts);
    l->announced    = moe_place(&cursor, sizeof(int32_t) * (size_t)a->experts_per_rank);
    l->landed       = moe_place(&cursor, sizeof(uint32_t) * (size_t)a->experts_per_rank);
    l->expected     = moe_place(&cursor, sizeof(int32_t) * (size_t)a->experts_per_rank);
    l->round_base   = moe_place(&cursor, sizeof(int32_t) * (size_t)a->experts_per_rank);
    l->marked       = moe_place(&cursor, sizeof(uint64_t) * (size_t)a->experts_per_rank);
    l->route        = moe_place(&cursor, sizeof(int32_t) * entries);
    l->row_slot     = moe_place(&cursor, sizeof(int32_t) * entries);
    l->send_x       = moe_place(&cursor, round_tokens * (size_t)a->row_bytes);
    l->send_scales  = moe_place(&cursor, round_tokens * (size_t)a->scale_stride);
    l->recv_x       = moe_place(&cursor, rows * (size_t)a->row_bytes);
    l->recv_scales  = moe_place(&cursor, rows * (size_t)a->scale_stride);
    l->recv_src     = moe_place(&cursor, rows * sizeof(intra_moe_source_t));
    l->expert_y     = moe_place(&cursor, rows * (size_t)a->y_row_bytes);
    l->combine_recv = moe_place(&cursor, terms_direct ? 0 : entries * (size_t)a->y_row_bytes);
    l->total        = moe_place(&cursor, 0);
}

/* Shape fields of the launch arguments; false if the sizes overflow. */
static bool moe_shape(const intra_moe_params_t *p, int local_size, intra_moe_args_t *a)
{
    int64_t capacity = p->capacity > 0 ? p->capacity : (int64_t)p->max_tokens * local_size;
    size_t scales = p->dtype == STRATA_DTYPE_FP8_E4M3
                        ? (size_t)p->hidden / INTRA_MOE_SCALE_COLUMNS : 0;

    if (capacity > INT32_MAX / 2) {
        return false;
    }
    memset(a, 0, sizeof(*a));
    a->num_ranks        = local_size;
    a->num_experts      = p->num_experts;
    a->experts_per_rank = p->num_experts / local_size;
    a->topk             = p->topk;
    a->capacity         = (int32_t)capacity;
    a->hidden           = p->hidden;
    a->row_bytes        = (int32_t)((size_t)p->hidden * moe_elem_size(p->dtype));
    a->scale_count      = (int32_t)scales;
    a->scale_stride     = (int32_t)((scales * sizeof(float) + 15) / 16 * 16);
    a->y_elem           = moe_y_elem(p->combine_dtype);
    a->y_row_bytes      = (int32_t)((size_t)p->hidden * moe_elem_size(p->combine_dtype));
    a->round_tokens     = p->round_tokens > 0 ? p->round_tokens : p->max_tokens;
    a->exact            = p->exact;
    a->exact_rounds     = p->exact && p->exact_rounds > 1 ? p->exact_rounds : 0;
    moe_place_heap(a, (size_t)p->max_tokens, (size_t)a->round_tokens, p->terms_direct,
                   &a->heap_offsets);
    return a->heap_offsets.total < SIZE_MAX / 2;
}

size_t intra_moe_heap_size(const intra_moe_params_t *params, int local_size)
{
    intra_moe_args_t args;

    if (params == NULL || !moe_params_valid(params, local_size) ||
        !moe_shape(params, local_size, &args)) {
        return 0;
    }
    return args.heap_offsets.total + INTRA_DEVICE_ALIGNMENT;
}

size_t intra_moe_expert_bytes(const intra_moe_params_t *params, int local_size)
{
    intra_moe_args_t args;

    if (params == NULL || !moe_params_valid(params, local_size) ||
        !moe_shape(params, local_size, &args)) {
        return 0;
    }
    /* recv_x, recv_scales, recv_src and expert_y lie in that order, before combine_recv */
    return args.heap_offsets.combine_recv - args.heap_offsets.recv_x;
}

/* The host backend's blocks are threads: more of them than the rank's share of the cores
 * it may run on only adds switching (the node's ranks share those cores). */
static unsigned moe_host_blocks(int local_size)
{
    cpu_set_t cpus;
    int count = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;

    return (unsigned)UTIL_MAX(1, UTIL_MIN(8, count / UTIL_MAX(local_size, 1)));
}

static strata_status_t moe_apply_config(const intra_moe_params_t *p, const intra_device_ops_t *dev,
                                        int local_size, unsigned *blocks_p, uint64_t *timeout_p)
{
    intra_config_t config;
    strata_status_t status = util_config_read(&intra_config_table, &config);

    if (status != STRATA_OK) {
        return status;
    }
    if (config.blocks < 0 || config.blocks > 1024) {
        UTIL_LOG_ERROR("intra moe: STRATA_INTRA_BLOCKS=%" PRId64 " must be 0..1024",
                       config.blocks);
        return STRATA_ERR_CONFIG;
    }
    *blocks_p  = p->num_blocks      ? p->num_blocks
                 : config.blocks > 0  ? (unsigned)config.blocks
                 : dev->default_blocks ? dev->default_blocks
                                       : moe_host_blocks(local_size);
    *timeout_p = p->timeout_ns ? p->timeout_ns : config.timeout_ns;
    return STRATA_OK;
}

unsigned intra_moe_fit_blocks(unsigned requested, unsigned resident, int sharers)
{
    unsigned share = resident / (unsigned)UTIL_MAX(sharers, 1);

    return UTIL_MAX(1u, UTIL_MIN(requested, share));
}

/*
 * Every block of a launch waits for the others, and the kernels of the ranks sharing a GPU
 * (under MPS, or on a MIG slice) wait for one another: more blocks than the GPU holds at
 * once for each of them would wait until the timeout. Fewer blocks only run slower.
 */
static strata_status_t moe_fit_grid(const intra_device_ops_t *dev, const intra_heap_t *heap,
                                    unsigned *blocks_p)
{
    int sharers = intra_heap_gpu_sharers(heap);
    unsigned resident, fitted;
    strata_status_t status;

    if (dev->resident_blocks == NULL) {
        return STRATA_OK;
    }
    status = dev->resident_blocks(&resident);
    if (status != STRATA_OK) {
        return status;
    }
    fitted = intra_moe_fit_blocks(*blocks_p, resident, sharers);
    if (fitted < *blocks_p) {
        UTIL_LOG_WARN("intra moe: %u blocks asked, but the GPU holds %u at once for each of "
                      "the %d ranks on it: using %u", *blocks_p, resident / (unsigned)sharers,
                      sharers, fitted);
        *blocks_p = fitted;
    }
    return STRATA_OK;
}

/* Where the mapped words are from base, as the host or the kernels see it: [experts]
 * steps, the expired waits' count, the counts' step, [experts] row counts, [experts] rows
 * sent before the capacity. */
static void moe_ready_words(void *base, int experts, intra_moe_marks_t *m)
{
    m->ready         = base;
    m->waits_expired = m->ready + experts;
    m->counts_step   = m->waits_expired + 1;
    m->ready_rows    = (int32_t *)(m->counts_step + 1);
    m->routed        = m->ready_rows + experts;
}

/* The per-expert completion marks, in memory the kernels write and the host reads. */
static strata_status_t moe_alloc_ready(intra_moe_t *moe)
{
    intra_moe_args_t *a = &moe->args;
    size_t bytes = intra_moe_ready_bytes(a->experts_per_rank);
    void *host = NULL, *dev = NULL;
    strata_status_t status = moe->device->host_alloc(bytes, -1, &host, &dev);

    if (status != STRATA_OK) {
        return status;
    }
    memset(host, 0, bytes);
    moe->ready_host = host;
    moe_ready_words(host, a->experts_per_rank, &moe->marks);
    moe_ready_words(dev, a->experts_per_rank, &a->marks);
    return STRATA_OK;
}

/* Rebase the heap offsets on the heap allocation and fill in every rank's base. */
static void moe_bind_heap(intra_moe_t *moe, intra_heap_t *heap, size_t base)
{
    intra_moe_heap_offsets_t *l = &moe->args.heap_offsets;
    size_t *fields[] = {&l->control,     &l->counter,     &l->recv_count, &l->pull_offset,
                        &l->pull_cursor, &l->pull_entry,  &l->round_offset, &l->sent_count,
                        &l->step_sent,   &l->announced,   &l->landed,     &l->expected,
                        &l->round_base,  &l->marked,      &l->route,      &l->row_slot,
                        &l->send_x,      &l->send_scales, &l->recv_x,     &l->recv_scales,
                        &l->recv_src,    &l->expert_y,    &l->combine_recv};

    /* every offset but total */
    _Static_assert(UTIL_ARRAY_SIZE(fields) + 1 == sizeof(*l) / sizeof(size_t),
                   "moe_bind_heap rebases every buffer of the heap layout");
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(fields); ++i) {
        *fields[i] += base;
    }
    for (int r = 0; r < moe->args.num_ranks; ++r) {
        moe->args.heap[r] = intra_heap_base(heap, r);
    }
}

static void moe_fill_recv(intra_moe_t *moe)
{
    const intra_moe_args_t *a = &moe->args;
    char *own = a->heap[a->rank];

    moe->recv = (intra_moe_recv_t){
        .experts_per_rank = a->experts_per_rank,
        .capacity         = a->capacity,
        .row_bytes        = (size_t)a->row_bytes,
        .scale_stride     = (size_t)a->scale_stride,
        .x                = own + a->heap_offsets.recv_x,
        .scales           = a->scale_count > 0 ? (float *)(own + a->heap_offsets.recv_scales)
                                               : NULL,
        .src              = (const intra_moe_source_t *)(own + a->heap_offsets.recv_src),
        .count            = moe->counts,
        .expert_y         = own + a->heap_offsets.expert_y,
    };
}

strata_status_t intra_moe_create(const intra_moe_params_t *params, intra_heap_t *heap,
                                 intra_moe_t **moe_p)
{
    int local_size = heap ? intra_heap_local_size(heap) : 0;
    const intra_device_ops_t *device = heap ? intra_heap_device(heap) : NULL;
    unsigned blocks;
    uint64_t timeout_ns;
    strata_status_t status;
    intra_moe_t *moe;
    size_t base;

    if (params == NULL || heap == NULL || moe_p == NULL) {
        UTIL_LOG_ERROR("intra moe: NULL parameters, heap or result");
        return STRATA_ERR_INVALID;
    }
    if (!moe_params_valid(params, local_size)) {
        return STRATA_ERR_INVALID;
    }
    status = moe_apply_config(params, device, local_size, &blocks, &timeout_ns);
    if (status == STRATA_OK) {
        status = moe_fit_grid(device, heap, &blocks);
    }
    if (status != STRATA_OK) {
        return status;
    }
    moe = calloc(1, sizeof(*moe));
    if (moe == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    moe->device     = device;
    moe->waited_for = -1;
    if (!moe_shape(params, local_size, &moe->args)) {
        UTIL_LOG_ERROR("intra moe: max_tokens %d with capacity %d is too large",
                       params->max_tokens, params->capacity);
        status = STRATA_ERR_INVALID;
        goto err_free;
    }
    moe->max_tokens           = params->max_tokens;
    moe->terms_direct         = params->terms_direct;
    moe->args.exact           = params->exact;
    moe->args.rank            = intra_heap_local_rank(heap);
    moe->args.origin_offset   = -1;
    moe->args.term_dst_offset = -1;
    moe->args.timeout_ticks = timeout_ns / 1000u * device->timer_ticks_per_us;
    moe->args.failure       = params->failure;
    moe->counts = calloc((size_t)moe->args.experts_per_rank, sizeof(*moe->counts));
    if (moe->counts == NULL) {
        status = STRATA_ERR_NO_MEMORY;
        goto err_free;
    }
    status = moe_alloc_ready(moe);
    if (status != STRATA_OK) {
        goto err_free;
    }
    /* A fresh heap allocation is zero on every rank: flags and counters start at 0. */
    status = intra_heap_alloc(heap, "intra-moe", moe->args.heap_offsets.total,
                              INTRA_DEVICE_ALIGNMENT, &base);
    if (status != STRATA_OK) {
        goto err_free;
    }
    status = device->queue_create(blocks, &moe->queue);
    if (status != STRATA_OK) {
        goto err_free;
    }
    moe_bind_heap(moe, heap, base);
    moe_fill_recv(moe);
    *moe_p = moe;
    return STRATA_OK;

err_free:
    if (moe->ready_host != NULL) {
        device->host_free(moe->ready_host);
    }
    free(moe->counts);
    free(moe);
    return status;
}

void intra_moe_destroy(intra_moe_t *moe)
{
    if (moe == NULL) {
        return;
    }
    moe->device->queue_destroy(moe->queue);
    intra_moe_release_waits(moe); /* their kernels read the marks */
    if (moe->ready_host != NULL) {
        moe->device->host_free(moe->ready_host);
    }
    free(moe->counts);
    free(moe);
}

size_t intra_moe_ready_bytes(int experts_per_rank) /* as moe_ready_words lays them out */
{
    return (size_t)experts_per_rank * (sizeof(uint64_t) + 2 * sizeof(int32_t)) +
           2 * sizeof(uint64_t);
}

uint64_t intra_moe_waits_expired(const intra_moe_t *moe)
{
    return atomic_load_explicit((_Atomic uint64_t *)moe->marks.waits_expired,
                                memory_order_acquire);
}

uint64_t intra_moe_dispatches(const intra_moe_t *moe)
{
    return moe->dispatches;
}

strata_status_t intra_moe_expert_ready(const intra_moe_t *moe, int e, bool *ready_p,
                                       int32_t *rows_p)
{
    if (e < 0 || e >= moe->args.experts_per_rank) {
        UTIL_LOG_ERROR("moe: local expert %d is not one of this rank's %d", e,
                       moe->args.experts_per_rank);
        return STRATA_ERR_INVALID;
    }
    if (moe->captured) {
        return moe_refuse_captured();
    }
    /* acquire: pairs with the kernels' release of the step after the count */
    *ready_p = moe->dispatches > 0 &&
               atomic_load_explicit((_Atomic uint64_t *)&moe->marks.ready[e],
                                    memory_order_acquire) >= moe->dispatches;
    *rows_p  = *ready_p ? moe->marks.ready_rows[e] : 0;
    return STRATA_OK;
}

strata_status_t intra_moe_counts_ready(const intra_moe_t *moe, bool *ready_p, int32_t *counts)
{
    int experts = moe->args.experts_per_rank;

    if (moe->captured) {
        return moe_refuse_captured();
    }
    /* acquire: pairs with the kernels' release of the step after the counts (across
     * nodes in rounds, in the step's first round) */
    *ready_p = moe->dispatches > 0 &&
               atomic_load_explicit((_Atomic uint64_t *)moe->marks.counts_step,
                                    memory_order_acquire) >= moe->step_dispatch;
    for (int e = 0; e < experts; ++e) {
        counts[e] = *ready_p ? moe->marks.routed[e] : 0;
    }
    return STRATA_OK;
}

strata_status_t intra_moe_set_tables(intra_moe_t *moe, const intra_moe_tables_t *tables)
{
    if (moe == NULL || tables == NULL || tables->origin_offset < 0 ||
        tables->public_src == NULL || tables->public_count == NULL) {
        UTIL_LOG_ERROR("intra moe: tables need an origin table and the public sources");
        return STRATA_ERR_INVALID;
    }
    if (moe->terms_direct && tables->term_dst_offset < 0) {
        UTIL_LOG_ERROR("intra moe: an object made for direct terms has no combine_recv "
                       "area: its tables need a term_dst table");
        return STRATA_ERR_INVALID;
    }
    moe->args.origin_offset   = tables->origin_offset;
    moe->args.origin_rank     = tables->origin_rank;
    moe->args.term_dst_offset = tables->term_dst_offset;
    moe->args.public_src      = tables->public_src;
    moe->args.public_count    = tables->public_count;
    return STRATA_OK;
}

strata_status_t intra_moe_set_stream(intra_moe_t *moe, void *stream)
{
    return moe->device->queue_set_stream(moe->queue, stream);
}

strata_status_t intra_moe_write(intra_moe_t *moe, void *dst, const void *src, size_t size)
{
    return moe->device->queue_write(moe->queue, dst, src, size);
}

strata_status_t intra_moe_read(intra_moe_t *moe, void *dst, const void *src, size_t size)
{
    return moe->device->queue_read(moe->queue, dst, src, size);
}

bool intra_moe_exact(const intra_moe_t *moe)
{
    return moe->args.exact != 0;
}

bool intra_moe_capturing(const intra_moe_t *moe)
{
    bool capturing = false;

    return moe->device->queue_capturing(moe->queue, &capturing) == STRATA_OK && capturing;
}

void intra_moe_buffers(const intra_moe_t *moe, intra_moe_recv_t *recv_p)
{
    *recv_p = moe->recv;
}

void intra_moe_name_step(intra_moe_t *moe, uint64_t step)
{
    moe->step  = step;
    moe->named = true;
}

int intra_moe_waited_for(const intra_moe_t *moe, bool *local_p)
{
    *local_p = moe->waited_local;
    return moe->waited_for;
}
