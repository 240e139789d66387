/*
 * The host side of intra-node MoE: parameters checked, buffers placed in the symmetric
 * heap, one kernel launch per dispatch and per combine, and what the kernels found turned
 * into a status and one log line.
 */
#include "intra/intra.h"
#include "util/util.h"

#include <inttypes.h>
#include <sched.h>
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

typedef enum moe_state {
    MOE_EXPECT_DISPATCH,
    MOE_EXPECT_COMBINE,
    MOE_FAILED,
} moe_state_t;

struct intra_moe {
    const intra_device_ops_t *device;
    intra_queue_t            *queue;
    intra_moe_args_t          args;      /* shape, heap bases and layout; per-call fields vary */
    moe_state_t               state;
    int                       max_tokens;
    int                       num_tokens; /* of the step's dispatch, where the host knows it */
    uint64_t                  step;       /* dispatches enqueued, for messages */
    int32_t                  *counts;    /* [experts_per_rank], host copy */
    intra_moe_recv_t          recv;
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
    } else if (p->topk < 1 || p->topk > p->num_experts || p->topk > INTRA_MOE_MAX_TOPK) {
        UTIL_LOG_ERROR("intra moe: topk %d must be 1..%d (num_experts %d, at most %d)", p->topk,
                       p->num_experts < INTRA_MOE_MAX_TOPK ? p->num_experts : INTRA_MOE_MAX_TOPK,
                       p->num_experts, INTRA_MOE_MAX_TOPK);
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
               (int64_t)p->max_tokens * p->topk > INT32_MAX) {
        UTIL_LOG_ERROR("intra moe: max_tokens %d or capacity %d out of range", p->max_tokens,
                       p->capacity);
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
static void moe_layout(const intra_moe_args_t *a, size_t max_tokens, intra_moe_layout_t *l)
{
    size_t cursor = 0, entries = max_tokens * (size_t)a->topk;
    size_t rows = (size_t)a->experts_per_rank * (size_t)a->capacity;

    l->control      = moe_place(&cursor, sizeof(intra_moe_control_t));
    l->counter      = moe_place(&cursor, sizeof(uint32_t) * (size_t)a->experts_per_rank);
    l->recv_count   = moe_place(&cursor, sizeof(int32_t) * (size_t)a->experts_per_rank);
    l->pull_offset  = moe_place(&cursor, sizeof(int32_t) * (size_t)(a->num_experts + 1));
    l->pull_cursor  = moe_place(&cursor, sizeof(int32_t) * (size_t)a->num_experts);
    l->pull_entry   = moe_place(&cursor, sizeof(int32_t) * entries);
    l->route        = moe_place(&cursor, sizeof(int32_t) * entries);
    l->row_slot     = moe_place(&cursor, sizeof(int32_t) * entries);
    l->send_x       = moe_place(&cursor, max_tokens * (size_t)a->row_bytes);
    l->send_scales  = moe_place(&cursor, max_tokens * (size_t)a->scale_stride);
    l->recv_x       = moe_place(&cursor, rows * (size_t)a->row_bytes);
    l->recv_scales  = moe_place(&cursor, rows * (size_t)a->scale_stride);
    l->recv_src     = moe_place(&cursor, rows * sizeof(intra_moe_source_t));
    l->expert_y     = moe_place(&cursor, rows * (size_t)a->y_row_bytes);
    l->combine_recv = moe_place(&cursor, entries * (size_t)a->y_row_bytes);
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
    moe_layout(a, (size_t)p->max_tokens, &a->layout);
    return a->layout.total < SIZE_MAX / 2;
}

size_t intra_moe_heap_size(const intra_moe_params_t *params, int local_size)
{
    intra_moe_args_t args;

    if (params == NULL || !moe_params_valid(params, local_size) ||
        !moe_shape(params, local_size, &args)) {
        return 0;
    }
    return args.layout.total + INTRA_DEVICE_ALIGNMENT;
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

/* Rebase the layout on the heap allocation and fill in every rank's base. */
static void moe_bind_heap(intra_moe_t *moe, intra_heap_t *heap, size_t base)
{
    intra_moe_layout_t *l = &moe->args.layout;
    size_t *fields[] = {&l->control,   &l->counter,     &l->recv_count, &l->pull_offset,
                        &l->pull_cursor, &l->pull_entry, &l->route,     &l->row_slot,
                        &l->send_x,    &l->send_scales, &l->recv_x,     &l->recv_scales,
                        &l->recv_src,  &l->expert_y,    &l->combine_recv};

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
        .x                = own + a->layout.recv_x,
        .scales           = a->scale_count > 0 ? (float *)(own + a->layout.recv_scales) : NULL,
        .src              = (const intra_moe_source_t *)(own + a->layout.recv_src),
        .count            = moe->counts,
        .expert_y         = own + a->layout.expert_y,
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
    if (status != STRATA_OK) {
        return status;
    }
    moe = calloc(1, sizeof(*moe));
    if (moe == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    moe->device = device;
    if (!moe_shape(params, local_size, &moe->args)) {
        UTIL_LOG_ERROR("intra moe: max_tokens %d with capacity %d is too large",
                       params->max_tokens, params->capacity);
        status = STRATA_ERR_INVALID;
        goto err_free;
    }
    moe->max_tokens           = params->max_tokens;
    moe->args.rank            = intra_heap_local_rank(heap);
    moe->args.origin_offset   = -1;
    moe->args.term_dst_offset = -1;
    moe->args.timeout_ticks = timeout_ns / 1000u * device->timer_ticks_per_us;
    moe->counts = calloc((size_t)moe->args.experts_per_rank, sizeof(*moe->counts));
    if (moe->counts == NULL) {
        status = STRATA_ERR_NO_MEMORY;
        goto err_free;
    }
    /* A fresh heap allocation is zero on every rank: flags and counters start at 0. */
    status = intra_heap_alloc(heap, "intra-moe", moe->args.layout.total, INTRA_DEVICE_ALIGNMENT,
                              &base);
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
    free(moe->counts);
    free(moe);
}

static bool moe_misaligned(const void *ptr)
{
    return ((uintptr_t)ptr & 15u) != 0;
}

static strata_status_t moe_check_state(const intra_moe_t *moe, moe_state_t expected,
                                       const char *call)
{
    if (moe->state == MOE_FAILED) {
        UTIL_LOG_ERROR("intra moe: %s after a failed step; destroy the object", call);
        return STRATA_ERR_TIMEOUT;
    }
    if (moe->state != expected) {
        UTIL_LOG_ERROR("intra moe: %s out of order: every step is one dispatch, then one "
                       "combine", call);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

static strata_status_t moe_check_dispatch(const intra_moe_t *moe, const void *x,
                                          const float *x_scales, const int64_t *topk_idx,
                                          int num_tokens)
{
    const intra_moe_args_t *a = &moe->args;

    if (num_tokens < 0 || num_tokens > moe->max_tokens) {
        UTIL_LOG_ERROR("intra moe: num_tokens %d outside 0..%d", num_tokens, moe->max_tokens);
    } else if (num_tokens > 0 && (x == NULL || topk_idx == NULL)) {
        UTIL_LOG_ERROR("intra moe: dispatch of %d tokens without x or topk_idx", num_tokens);
    } else if (num_tokens > 0 && moe_misaligned(x)) {
        UTIL_LOG_ERROR("intra moe: x at %p is not 16-byte aligned", x);
    } else if (num_tokens > 0 && (a->scale_count > 0) != (x_scales != NULL)) {
        UTIL_LOG_ERROR("intra moe: x_scales must be given for fp8 tokens, and only for them");
    } else {
        return STRATA_OK;
    }
    return STRATA_ERR_INVALID;
}

static intra_moe_control_t *moe_own_control(const intra_moe_t *moe)
{
    return (intra_moe_control_t *)(moe->args.heap[moe->args.rank] + moe->args.layout.control);
}

static const char *const moe_net_waits[] = {
    [INTRA_NET_WAIT_CREDIT] = "room in the work ring",   [INTRA_NET_WAIT_HEADER] = "a header",
    [INTRA_NET_WAIT_GRANT] = "a round-two grant",        [INTRA_NET_WAIT_ROUND_ONE] = "round one",
    [INTRA_NET_WAIT_ROUND_TWO] = "round two",            [INTRA_NET_WAIT_READS] = "reads",
    [INTRA_NET_WAIT_TERMS] = "combine terms",            [INTRA_NET_WAIT_SENDS] = "our transfers",
    [INTRA_NET_BAD_ENTRY] = "a token entry",
};

static const char *moe_net_what(int32_t what)
{
    return what > 0 && (size_t)what < UTIL_ARRAY_SIZE(moe_net_waits) && moe_net_waits[what]
               ? moe_net_waits[what] : "the network";
}

/* The step across nodes' findings: each fails the object. */
static strata_status_t moe_net_status(intra_moe_t *moe, const intra_moe_status_t *st)
{
    strata_status_t status;

    switch (st->code) {
    case INTRA_MOE_KERNEL_NET_FAILED:
        /* The ring ends for a dead peer, or for a command it refused: never an input error. */
        status = (strata_status_t)st->count == STRATA_ERR_PEER_FAILED ? STRATA_ERR_PEER_FAILED
                                                                      : STRATA_ERR_INTERNAL;
        UTIL_LOG_ERROR("moe: step %" PRIu64 ": waiting for %s%s: the work ring failed: %s",
                       moe->step, moe_net_what(st->token), st->value >= 0 ? " from a peer" : "",
                       strata_status_string((strata_status_t)st->count));
        break;
    case INTRA_MOE_KERNEL_NET_TIMEOUT:
        status = STRATA_ERR_TIMEOUT;
        UTIL_LOG_ERROR("moe: step %" PRIu64 ": waiting for %s from rank %d: nothing within "
                       "the bound (count %" PRId64 " awaited)", moe->step, moe_net_what(st->token),
                       st->value, st->count);
        break;
    case INTRA_MOE_KERNEL_NET_PROTOCOL:
        status = STRATA_ERR_INTERNAL;
        UTIL_LOG_ERROR("moe: step %" PRIu64 ": rank %d's %s (step %" PRId64 ") does not match "
                       "ours: the ranks are not in the same step", moe->step, st->value,
                       moe_net_what(st->token), st->count);
        break;
    default:
        status = STRATA_ERR_INTERNAL;
        UTIL_LOG_ERROR("moe: the network kernels reported unknown code %d", st->code);
        break;
    }
    moe->state = MOE_FAILED;
    return status == STRATA_OK ? STRATA_ERR_INTERNAL : status;
}

/* One log line and a status for what a kernel found; net: the step across nodes'. */
static strata_status_t moe_kernel_status(intra_moe_t *moe, const intra_moe_status_t *st, bool net)
{
    const intra_moe_args_t *a = &moe->args;

    switch (st->code) {
    case INTRA_MOE_KERNEL_OK:
        return STRATA_OK;
    case INTRA_MOE_KERNEL_BAD_EXPERT:
        UTIL_LOG_ERROR("intra moe: topk_idx[%d][%d] = %d is not an expert (-1 or 0..%d); "
                       "that entry was skipped", st->token, st->slot, st->value,
                       a->num_experts - 1);
        return STRATA_ERR_INVALID;
    case INTRA_MOE_KERNEL_CAPACITY:
        if (st->token >= 0) {
            UTIL_LOG_ERROR("intra moe: token %d's choice %d for expert %d found %" PRId64
                           " rows already there; capacity %d: not delivered",
                           st->token, st->slot, st->value, st->count - 1, a->capacity);
        } else {
            UTIL_LOG_ERROR("intra moe: expert %d was sent %" PRId64 " rows; capacity %d: "
                           "the rest were not delivered", st->value, st->count, a->capacity);
        }
        return STRATA_ERR_CAPACITY;
    case INTRA_MOE_KERNEL_DROPPED:
        UTIL_LOG_ERROR("intra moe: token %d's choice %d (expert %d) was dropped for capacity; "
                       "its result lacks that term", st->token, st->slot, st->value);
        return STRATA_ERR_CAPACITY;
    case INTRA_MOE_KERNEL_TIMEOUT:
        UTIL_LOG_ERROR("intra moe: local rank %d did not reach step %" PRIu64 " within %" PRIu64
                       " us; the object can only be destroyed", st->value, moe->step,
                       a->timeout_ticks / moe->device->timer_ticks_per_us);
        moe->state = MOE_FAILED;
        return STRATA_ERR_TIMEOUT;
    case INTRA_MOE_KERNEL_MODES:
        UTIL_LOG_ERROR("moe: %s %d moves the experts of step %" PRIu64 " in other modes than "
                       "this rank: every rank must set the same pull masks and mode",
                       net ? "rank" : "local rank", st->value, moe->step);
        moe->state = MOE_FAILED;
        return STRATA_ERR_INTERNAL;
    default:
        if (net) {
            return moe_net_status(moe, st);
        }
        UTIL_LOG_ERROR("intra moe: the kernel reported unknown code %d", st->code);
        moe->state = MOE_FAILED;
        return STRATA_ERR_INTERNAL;
    }
}

/* Of two statuses, the one to report: a failure of the object before an input error. */
static strata_status_t moe_worse(strata_status_t a, strata_status_t b)
{
    bool a_soft = a == STRATA_OK || a == STRATA_ERR_INVALID || a == STRATA_ERR_CAPACITY;

    return (a == STRATA_OK || (a_soft && b != STRATA_OK && b != STRATA_ERR_INVALID &&
                               b != STRATA_ERR_CAPACITY)) ? b : a;
}

strata_status_t intra_moe_synchronize(intra_moe_t *moe)
{
    intra_moe_control_t *control = moe_own_control(moe);
    intra_moe_status_t st[3]; /* net, dispatch, combine: the root cause first */
    strata_status_t status = moe->device->queue_synchronize(moe->queue), found = STRATA_OK;

    if (status == STRATA_OK) {
        status = moe->device->mem_copy(&st[0], &control->net_status, sizeof(st[0]));
    }
    if (status == STRATA_OK) {
        status = moe->device->mem_copy(&st[1], &control->dispatch_status, 2 * sizeof(st[1]));
    }
    if (status == STRATA_OK) {
        status = moe->device->mem_set(&control->net_status, 0, sizeof(st[0]));
    }
    if (status == STRATA_OK) {
        status = moe->device->mem_set(&control->dispatch_status, 0, 2 * sizeof(st[1]));
    }
    if (status != STRATA_OK) {
        moe->state = MOE_FAILED; /* peers may be waiting on a launch that never ran */
        return status;
    }
    for (int i = 0; i < 3; ++i) {
        found = moe_worse(found, moe_kernel_status(moe, &st[i], i == 0));
    }
    return found;
}

static strata_status_t moe_launch(intra_moe_t *moe, intra_moe_kernel_t kernel,
                                  const intra_moe_args_t *args)
{
    strata_status_t status;

    if (moe->state == MOE_FAILED) {
        UTIL_LOG_ERROR("intra moe: a launch after a failed step; destroy the object");
        return STRATA_ERR_INTERNAL;
    }
    status = moe->device->moe_launch(moe->queue, kernel, args);

    if (status != STRATA_OK) {
        moe->state = MOE_FAILED;
    }
    return status;
}

static void moe_set_mask(intra_moe_args_t *a, const uint64_t *pull_mask)
{
    int words = (a->num_experts + 63) / 64;

    memset(a->pull_mask, 0, sizeof(a->pull_mask));
    if (pull_mask != NULL) {
        memcpy(a->pull_mask, pull_mask, sizeof(uint64_t) * (size_t)words);
        if (a->num_experts % 64 != 0) {
            a->pull_mask[words - 1] &= (UINT64_C(1) << (a->num_experts % 64)) - 1;
        }
    }
}

strata_status_t intra_moe_set_tables(intra_moe_t *moe, const intra_moe_tables_t *tables)
{
    if (moe == NULL || tables == NULL || tables->origin_offset < 0 ||
        tables->public_src == NULL || tables->public_count == NULL) {
        UTIL_LOG_ERROR("intra moe: tables need an origin table and the public sources");
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

static bool moe_step_valid(const intra_moe_t *moe, const intra_moe_step_t *s)
{
    if (s->aug_entry == NULL) {
        return true;
    }
    if (s->num_tokens_dev == NULL || s->entry_base == NULL || s->aug_topk == NULL ||
        s->record_bytes <= 0 || s->record_bytes % 16 != 0) {
        UTIL_LOG_ERROR("intra moe: received tokens need their count, entries, expert ids and "
                       "a record size of whole 16-byte units");
        return false;
    }
    (void)moe;
    return true;
}

strata_status_t intra_moe_enqueue_dispatch(intra_moe_t *moe, const intra_moe_step_t *s)
{
    intra_moe_args_t *a = &moe->args;
    strata_status_t status;

    if (moe == NULL || s == NULL) {
        UTIL_LOG_ERROR("intra moe: dispatch without an object or a step");
        return STRATA_ERR_INVALID;
    }
    status = moe_check_state(moe, MOE_EXPECT_DISPATCH, "dispatch");
    if (status == STRATA_OK) {
        status = moe_check_dispatch(moe, s->x, s->x_scales, s->topk_idx, s->num_own);
    }
    if (status == STRATA_OK && !moe_step_valid(moe, s)) {
        status = STRATA_ERR_INVALID;
    }
    if (status != STRATA_OK) {
        return status;
    }
    moe_set_mask(a, s->pull_mask);
    a->num_tokens     = s->num_own;
    a->num_own        = s->num_own;
    a->x              = s->x;
    a->x_scales       = s->x_scales;
    a->topk_idx       = s->topk_idx;
    a->num_tokens_dev = s->num_tokens_dev;
    a->entry_base     = s->entry_base;
    a->aug_entry      = s->aug_entry;
    a->aug_topk       = s->aug_topk;
    a->record_bytes   = s->record_bytes;
    a->digest         = s->digest;
    moe->num_tokens   = s->num_own;
    moe->step        += 1;
    status = moe_launch(moe, INTRA_MOE_KERNEL_DISPATCH, a);
    if (status == STRATA_OK) {
        moe->state = MOE_EXPECT_COMBINE; /* the step goes on even if this rank saw an error */
    }
    return status;
}

strata_status_t intra_moe_enqueue_sources(intra_moe_t *moe)
{
    if (moe->args.public_src == NULL || moe->state != MOE_EXPECT_COMBINE) {
        UTIL_LOG_ERROR("intra moe: sources need the tables and a dispatch before them");
        return STRATA_ERR_INVALID;
    }
    return moe_launch(moe, INTRA_MOE_KERNEL_SOURCES, &moe->args);
}

strata_status_t intra_moe_enqueue_combine(intra_moe_t *moe, const void *expert_y,
                                          const float *topk_weights, const uint64_t *pull_mask,
                                          void *out)
{
    bool direct = moe != NULL && moe->args.term_dst_offset >= 0;
    strata_status_t status;

    if (moe == NULL) {
        UTIL_LOG_ERROR("intra moe: combine without an object");
        return STRATA_ERR_INVALID;
    }
    status = moe_check_state(moe, MOE_EXPECT_COMBINE, "combine");
    if (status != STRATA_OK) {
        return status;
    }
    if (expert_y == NULL || moe_misaligned(expert_y) ||
        (!direct && moe->num_tokens > 0 &&
         (topk_weights == NULL || out == NULL || moe_misaligned(out)))) {
        /* Refused before this rank enters the combine: the state stays, so the caller can
         * retry with valid arguments while the peers wait (up to their timeout). */
        UTIL_LOG_ERROR("intra moe: combine needs expert_y, and for %d tokens topk_weights and "
                       "out, with expert_y and out 16-byte aligned", moe->num_tokens);
        return STRATA_ERR_INVALID;
    }
    moe_set_mask(&moe->args, pull_mask);
    moe->args.expert_y     = expert_y;
    moe->args.topk_weights = topk_weights;
    moe->args.out          = out;
    status = moe_launch(moe, INTRA_MOE_KERNEL_COMBINE, &moe->args);
    if (moe->state != MOE_FAILED) {
        moe->state = MOE_EXPECT_DISPATCH;
    }
    return status;
}

strata_status_t intra_moe_enqueue_reduce(intra_moe_t *moe, const uint64_t *term_src,
                                         const float *topk_weights, int num_tokens, void *out)
{
    intra_moe_args_t args;

    if (moe == NULL || num_tokens < 0 ||
        (num_tokens > 0 && (term_src == NULL || topk_weights == NULL || out == NULL ||
                            moe_misaligned(out)))) {
        UTIL_LOG_ERROR("intra moe: reduce of %d tokens needs term addresses, topk_weights and "
                       "out, 16-byte aligned", num_tokens);
        return STRATA_ERR_INVALID;
    }
    if (num_tokens == 0) {
        return STRATA_OK;
    }
    args              = moe->args; /* shape only; the kernel reads no peer */
    args.num_tokens   = num_tokens;
    args.term_src     = term_src;
    args.topk_weights = topk_weights;
    args.out          = out;
    return moe_launch(moe, INTRA_MOE_KERNEL_REDUCE, &args);
}

strata_status_t intra_moe_enqueue_net(intra_moe_t *moe, intra_moe_kernel_t kernel,
                                      const intra_net_args_t *net)
{
    if (kernel < INTRA_MOE_KERNEL_NET_SEND || net == NULL || net->ring == NULL) {
        UTIL_LOG_ERROR("intra moe: kernel %d is not a network kernel, or has no work ring",
                       (int)kernel);
        return STRATA_ERR_INVALID;
    }
    moe->args.net = *net; /* the node's kernels of the step see it too (moe_net_failed) */
    return moe_launch(moe, kernel, &moe->args);
}

/* --- The synchronous calls of one node's step ------------------------------------------------ */

strata_status_t intra_moe_dispatch(intra_moe_t *moe, const void *x, const float *x_scales,
                                   const int64_t *topk_idx, int num_tokens,
                                   const uint64_t *pull_mask, intra_moe_recv_t *recv_p)
{
    intra_moe_step_t step = {.x = x, .x_scales = x_scales, .topk_idx = topk_idx,
                             .num_own = num_tokens, .pull_mask = pull_mask};
    strata_status_t status, copied;

    if (moe == NULL || recv_p == NULL) {
        UTIL_LOG_ERROR("intra moe: dispatch without an object or a result");
        return STRATA_ERR_INVALID;
    }
    status = intra_moe_enqueue_dispatch(moe, &step);
    if (status != STRATA_OK) {
        return status;
    }
    status = intra_moe_synchronize(moe);
    if (moe->state == MOE_FAILED) {
        return status;
    }
    copied = moe->device->mem_copy(moe->counts,
                                   moe->args.heap[moe->args.rank] + moe->args.layout.recv_count,
                                   sizeof(int32_t) * (size_t)moe->args.experts_per_rank);
    if (copied != STRATA_OK) {
        return copied;
    }
    *recv_p = moe->recv;
    return status;
}

strata_status_t intra_moe_combine(intra_moe_t *moe, const void *expert_y,
                                  const float *topk_weights, const uint64_t *pull_mask,
                                  void *out)
{
    strata_status_t status = intra_moe_enqueue_combine(moe, expert_y, topk_weights, pull_mask,
                                                       out);

    return status == STRATA_OK ? intra_moe_synchronize(moe) : status;
}

void intra_moe_buffers(const intra_moe_t *moe, intra_moe_recv_t *recv_p)
{
    *recv_p = moe->recv;
}
