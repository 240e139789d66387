/*
 * MoE dispatch and combine between the local ranks of a node, written once over
 * kernel_port.h and compiled as host C, CUDA and HIP. Every rank runs the same kernel and
 * plays both roles at once: source of its tokens and owner of its experts. Each expert is
 * moved in Push form (the source writes rows into the owner's slots) or Pull form (the
 * source publishes, the owner loads), chosen per expert by a bit mask. Completion between
 * ranks is a sequence-number flag per (source, owner) and step; no flag is ever reset.
 *
 * Step protocol (why buffers can be reused without resets): a rank starts dispatch t+1
 * only after its combine t has seen every owner's combine-t flag, and an owner raises that
 * flag only after its dispatch t has finished reading. So no buffer of step t is written
 * for step t+1 while anyone still reads it, provided every rank calls dispatch and
 * combine alternately.
 */
#ifndef STRATA_INTRA_MOE_KERNELS_H
#define STRATA_INTRA_MOE_KERNELS_H

#include "kernel_port.h"

#define INTRA_MOE_MAX_RANKS   16
#define INTRA_MOE_MAX_EXPERTS 1024
#define INTRA_MOE_MAX_TOPK    32
#define INTRA_MOE_MASK_WORDS  (INTRA_MOE_MAX_EXPERTS / 64)
/** fp8 tokens carry one fp32 scale per this many columns. */
#define INTRA_MOE_SCALE_COLUMNS 128

/** Element types of the combine input and output. */
enum {
    INTRA_MOE_ELEM_BF16 = 0,
    INTRA_MOE_ELEM_FP16 = 1,
    INTRA_MOE_ELEM_FP32 = 2,
};

/** What a kernel found wrong; the first error of a launch wins. */
enum {
    INTRA_MOE_KERNEL_OK           = 0,
    INTRA_MOE_KERNEL_BAD_EXPERT   = 1, /* value: the id, token/slot: where */
    INTRA_MOE_KERNEL_CAPACITY     = 2, /* value: the expert, count: rows it was sent */
    INTRA_MOE_KERNEL_DROPPED      = 3, /* combine: a row of this token was not received */
    INTRA_MOE_KERNEL_TIMEOUT      = 4, /* value: the rank waited for */
};

typedef struct intra_moe_status {
    int32_t code;
    int32_t value;
    int32_t token;
    int32_t slot;
    int64_t count;
    int64_t pad;
} intra_moe_status_t;

/** The head of every rank's part of the heap. Flags are written by peers. */
typedef struct intra_moe_control {
    uint64_t dispatch_flag[INTRA_MOE_MAX_RANKS]; /* [source]: last step it sent us */
    uint64_t combine_flag[INTRA_MOE_MAX_RANKS];  /* [owner]: last step it returned us */
    uint64_t dispatch_send_done; /* blocks that finished a phase, summed over steps */
    uint64_t dispatch_recv_done;
    uint64_t combine_send_done;
    intra_moe_status_t dispatch_status;
    intra_moe_status_t combine_status;
} intra_moe_control_t;

/** Where a received row came from. */
typedef struct intra_moe_source {
    int32_t rank;
    int32_t token;
    int32_t slot; /* k: which of the token's top-k choices */
} intra_moe_source_t;

/** Offsets of the buffers inside each rank's heap part (the same on every rank). */
typedef struct intra_moe_layout {
    size_t control;       /* intra_moe_control_t */
    size_t counter;       /* uint32[experts_per_rank]: push slots claimed, owner zeroes */
    size_t recv_count;    /* int32[experts_per_rank] */
    size_t pull_offset;   /* int32[num_experts + 1]: CSR of this rank's pull entries */
    size_t pull_cursor;   /* int32[num_experts]: scratch for building it */
    size_t pull_entry;    /* int32[max_tokens * topk]: token * topk + k, by expert */
    size_t route;         /* int32[max_tokens * topk]: validated expert id or -1 */
    size_t row_slot;      /* int32[max_tokens * topk]: row at the owner, -1 if none */
    size_t send_x;        /* [max_tokens][row_bytes]: tokens published for pull */
    size_t send_scales;   /* [max_tokens][scale_stride] */
    size_t recv_x;        /* [experts_per_rank][capacity][row_bytes] */
    size_t recv_scales;   /* [experts_per_rank][capacity][scale_stride] */
    size_t recv_src;      /* intra_moe_source_t[experts_per_rank][capacity] */
    size_t expert_y;      /* [experts_per_rank][capacity][y_row_bytes]: published for pull */
    size_t combine_recv;  /* [max_tokens][topk][y_row_bytes]: pushed by owners */
    size_t total;
} intra_moe_layout_t;

/** One launch's arguments, passed by value to GPU kernels. */
typedef struct intra_moe_args {
    int32_t  rank;
    int32_t  num_ranks;
    int32_t  num_experts;
    int32_t  experts_per_rank;
    int32_t  topk;
    int32_t  capacity;
    int32_t  num_tokens;
    int32_t  row_bytes;    /* dispatched token row, a multiple of 16 */
    int32_t  scale_count;  /* fp32 scales per row, 0 without */
    int32_t  scale_stride; /* bytes between scale rows in the heap, a multiple of 16 */
    int32_t  hidden;
    int32_t  y_elem;       /* INTRA_MOE_ELEM_* of combine input and output */
    int32_t  y_row_bytes;
    int32_t  gather;        /* combine: write each term to out[t][k] instead of the sum */
    uint64_t step;          /* 1 for the first step */
    uint64_t timeout_ticks; /* bound on each wait for a peer, in kernel_timer ticks */
    uint64_t pull_mask[INTRA_MOE_MASK_WORDS]; /* bit e set: expert e moves in Pull form */
    char    *heap[INTRA_MOE_MAX_RANKS];       /* each rank's heap part as mapped here */
    intra_moe_layout_t layout;
    /* the caller's buffers */
    const void    *x;            /* [num_tokens][row_bytes] */
    const float   *x_scales;     /* [num_tokens][scale_count] or NULL */
    const int64_t *topk_idx;     /* [num_tokens][topk] */
    const void    *expert_y;     /* [experts_per_rank][capacity][y_row_bytes] */
    const float   *topk_weights; /* [num_tokens][topk] */
    void          *out;          /* [num_tokens][y_row_bytes]; gather: [num_tokens][topk][..] */
    const void    *terms;        /* reduce: [num_tokens][topk][y_row_bytes] */
} intra_moe_args_t;

#define MOE_AT(a, rank, field, type) ((type *)((a)->heap[rank] + (a)->layout.field))

KERNEL_FN intra_moe_control_t *moe_control(const intra_moe_args_t *a, int rank)
{
    return MOE_AT(a, rank, control, intra_moe_control_t);
}

KERNEL_FN int moe_is_pull(const intra_moe_args_t *a, int expert)
{
    return (int)((a->pull_mask[expert >> 6] >> (expert & 63)) & 1u);
}

/* First error wins: claim the status, then fill it in; the host reads it after the launch. */
KERNEL_FN void moe_report(intra_moe_status_t *status, int32_t code, int32_t value,
                          int32_t token, int32_t slot, int64_t count)
{
    if (kernel_atomic_cas_i32(&status->code, INTRA_MOE_KERNEL_OK, code) == INTRA_MOE_KERNEL_OK) {
        status->value = value;
        status->token = token;
        status->slot  = slot;
        status->count = count;
    }
}

/*
 * Count this block as done with a phase (summed over steps, never reset); return nonzero
 * in thread 0 of the last block of the step, which then sees every block's stores.
 */
KERNEL_FN int moe_last_block(uint64_t *done, const intra_moe_args_t *a, kernel_grid_t g)
{
    KERNEL_SHARED int last;

    kernel_fence_system(); /* this thread's stores, before the block's count */
    kernel_block_sync();
    if (g.thread == 0) {
        last = kernel_atomic_add_u64(done, 1) + 1 == a->step * g.num_blocks;
        if (last) {
            kernel_fence_system(); /* acquire: every other block's stores */
        }
    }
    kernel_block_sync();
    return last && g.thread == 0;
}

/* Wait until every rank's flag reaches this step; 0 (and a TIMEOUT report) if one never does. */
KERNEL_FN int moe_wait_flags(const intra_moe_args_t *a, const uint64_t *flags,
                             intra_moe_status_t *status, kernel_grid_t g)
{
    KERNEL_SHARED int ok;

    if (g.thread == 0) {
        uint64_t start = kernel_timer();

        ok = 1;
        for (int r = 0; r < a->num_ranks && ok; ++r) {
            /* acquire: pairs with the release in the peer's last block */
            while (kernel_load_acquire_u64(&flags[r]) < a->step) {
                if (kernel_timer() - start > a->timeout_ticks) {
                    moe_report(status, INTRA_MOE_KERNEL_TIMEOUT, r, -1, -1, 0);
                    ok = 0;
                    break;
                }
                kernel_spin_pause();
            }
        }
    }
    kernel_block_sync();
    return ok;
}

KERNEL_FN int moe_copy_scales(float *dst, const float *src, int count, kernel_grid_t g)
{
    for (int i = (int)g.thread; i < count; i += (int)g.num_threads) {
        dst[i] = src[i];
    }
    return count;
}

/* The scales of row `index` of a [rows][stride-byte] array, NULL without scales. */
KERNEL_FN float *moe_scales_at(const intra_moe_args_t *a, const void *base, size_t index,
                               size_t stride)
{
    return a->scale_count > 0 ? (float *)((const char *)base + index * stride) : NULL;
}

/* Copy one token row (and its scales) with the whole block. */
KERNEL_FN void moe_copy_token(const intra_moe_args_t *a, char *dst, float *dst_scales,
                              const char *src, const float *src_scales, kernel_grid_t g)
{
    kernel_copy_block(dst, src, (size_t)a->row_bytes, g);
    if (a->scale_count > 0) {
        moe_copy_scales(dst_scales, src_scales, a->scale_count, g);
    }
}

/* Push one (token, k) row into the owner's next free slot, or report the overflow. */
KERNEL_FN void moe_push_row(const intra_moe_args_t *a, int token, int k, int expert,
                            kernel_grid_t g)
{
    KERNEL_SHARED int32_t row;
    int owner = expert / a->experts_per_rank, local = expert % a->experts_per_rank;
    int32_t *row_slot = MOE_AT(a, a->rank, row_slot, int32_t);
    size_t index = (size_t)local * (size_t)a->capacity;

    if (g.thread == 0) {
        uint32_t claimed = kernel_atomic_add_u32(MOE_AT(a, owner, counter, uint32_t) + local, 1);

        row = claimed < (uint32_t)a->capacity ? (int32_t)claimed : -1;
        row_slot[token * a->topk + k] = row;
        if (row < 0) {
            moe_report(&moe_control(a, a->rank)->dispatch_status, INTRA_MOE_KERNEL_CAPACITY,
                       expert, token, k, (int64_t)claimed + 1);
        } else {
            intra_moe_source_t src = {a->rank, token, k};
            MOE_AT(a, owner, recv_src, intra_moe_source_t)[index + (size_t)row] = src;
        }
    }
    kernel_block_sync();
    if (row >= 0) {
        index += (size_t)row;
        moe_copy_token(a, MOE_AT(a, owner, recv_x, char) + index * (size_t)a->row_bytes,
                       moe_scales_at(a, MOE_AT(a, owner, recv_scales, char), index,
                                     (size_t)a->scale_stride),
                       (const char *)a->x + (size_t)token * (size_t)a->row_bytes,
                       moe_scales_at(a, a->x_scales, (size_t)token,
                                     (size_t)a->scale_count * sizeof(float)),
                       g);
    }
    kernel_block_sync(); /* row is reused by the next call */
}

/* Validate (token, k)'s expert id and record it in route; -1 for none or invalid. */
KERNEL_FN int moe_route(const intra_moe_args_t *a, int token, int k, kernel_grid_t g)
{
    int64_t expert = a->topk_idx[(size_t)token * (size_t)a->topk + (size_t)k];

    if (expert < -1 || expert >= a->num_experts) {
        if (g.thread == 0) {
            moe_report(&moe_control(a, a->rank)->dispatch_status, INTRA_MOE_KERNEL_BAD_EXPERT,
                       (int32_t)(expert < INT32_MIN ? INT32_MIN : expert > INT32_MAX ? INT32_MAX
                                                                                     : expert),
                       token, k, 0);
        }
        expert = -1;
    }
    if (g.thread == 0) {
        MOE_AT(a, a->rank, route, int32_t)[token * a->topk + k] = (int32_t)expert;
        if (expert < 0) {
            MOE_AT(a, a->rank, row_slot, int32_t)[token * a->topk + k] = -1;
        }
    }
    return (int)expert;
}

/* Source role: push rows of Push experts, publish rows of tokens that Pull experts need. */
KERNEL_FN void moe_dispatch_send(const intra_moe_args_t *a, kernel_grid_t g)
{
    for (int t = (int)g.block; t < a->num_tokens; t += (int)g.num_blocks) {
        int published = 0;

        for (int k = 0; k < a->topk; ++k) {
            int expert = moe_route(a, t, k, g);

            if (expert < 0) {
                continue;
            }
            if (!moe_is_pull(a, expert)) {
                moe_push_row(a, t, k, expert, g);
            } else if (!published) {
                size_t row = (size_t)t;
                moe_copy_token(a, MOE_AT(a, a->rank, send_x, char) + row * (size_t)a->row_bytes,
                               moe_scales_at(a, MOE_AT(a, a->rank, send_scales, char), row,
                                             (size_t)a->scale_stride),
                               (const char *)a->x + row * (size_t)a->row_bytes,
                               moe_scales_at(a, a->x_scales, row,
                                             (size_t)a->scale_count * sizeof(float)),
                               g);
                published = 1;
            }
        }
    }
}

/* Source role, one thread: the CSR of (token, k) entries per Pull expert, for the owners. */
KERNEL_FN void moe_build_pull_lists(const intra_moe_args_t *a)
{
    int32_t *offset = MOE_AT(a, a->rank, pull_offset, int32_t);
    int32_t *cursor = MOE_AT(a, a->rank, pull_cursor, int32_t);
    int32_t *entry  = MOE_AT(a, a->rank, pull_entry, int32_t);
    int entries = a->num_tokens * a->topk;

    for (int e = 0; e <= a->num_experts; ++e) {
        offset[e] = 0;
    }
    for (int i = 0; i < entries; ++i) {
        int64_t e = a->topk_idx[i];
        if (e >= 0 && e < a->num_experts && moe_is_pull(a, (int)e)) {
            ++offset[e + 1];
        }
    }
    for (int e = 0; e < a->num_experts; ++e) {
        offset[e + 1] += offset[e];
        cursor[e] = offset[e];
    }
    for (int i = 0; i < entries; ++i) {
        int64_t e = a->topk_idx[i];
        if (e >= 0 && e < a->num_experts && moe_is_pull(a, (int)e)) {
            entry[cursor[e]++] = i;
        }
    }
}

/* Rows source published for local expert `local` (read after its flag). */
KERNEL_FN int moe_pull_count(const intra_moe_args_t *a, int source, int local)
{
    const int32_t *offset = MOE_AT(a, source, pull_offset, int32_t);
    int expert = a->rank * a->experts_per_rank + local;

    return offset[expert + 1] - offset[expert];
}

/* Owner role: load one published row into slot `row`, or tell the source it was dropped. */
KERNEL_FN void moe_pull_row(const intra_moe_args_t *a, int source, int local, int index,
                            int row, kernel_grid_t g)
{
    int expert = a->rank * a->experts_per_rank + local;
    int32_t entry = MOE_AT(a, source, pull_entry, int32_t)
                        [MOE_AT(a, source, pull_offset, int32_t)[expert] + index];
    int token = entry / a->topk, k = entry % a->topk;
    size_t slot = (size_t)local * (size_t)a->capacity + (size_t)row;

    if (g.thread == 0) {
        MOE_AT(a, source, row_slot, int32_t)[entry] = row < a->capacity ? row : -1;
    }
    if (row >= a->capacity) {
        return; /* reported once per expert by the last block */
    }
    if (g.thread == 0) {
        intra_moe_source_t src = {source, token, k};
        MOE_AT(a, a->rank, recv_src, intra_moe_source_t)[slot] = src;
    }
    moe_copy_token(a, MOE_AT(a, a->rank, recv_x, char) + slot * (size_t)a->row_bytes,
                   moe_scales_at(a, MOE_AT(a, a->rank, recv_scales, char), slot,
                                 (size_t)a->scale_stride),
                   MOE_AT(a, source, send_x, char) + (size_t)token * (size_t)a->row_bytes,
                   moe_scales_at(a, MOE_AT(a, source, send_scales, char), (size_t)token,
                                 (size_t)a->scale_stride),
                   g);
}

/* Owner role: load the rows of Pull experts, sources in rank order, spread over blocks. */
KERNEL_FN void moe_dispatch_pull(const intra_moe_args_t *a, kernel_grid_t g)
{
    uint64_t seen = 0; /* rows before the current list, over all lists */

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int row = 0;

        if (!moe_is_pull(a, a->rank * a->experts_per_rank + local)) {
            continue;
        }
        for (int source = 0; source < a->num_ranks; ++source) {
            int n = moe_pull_count(a, source, local);
            int first = (int)((g.block + g.num_blocks - seen % g.num_blocks) % g.num_blocks);

            for (int i = first; i < n; i += (int)g.num_blocks) {
                moe_pull_row(a, source, local, i, row + i, g);
            }
            row += n;
            seen += (uint64_t)n;
        }
    }
}

/* Owner role, last block: per-expert counts, capacity check, push counters back to zero. */
KERNEL_FN void moe_dispatch_finish(const intra_moe_args_t *a)
{
    int32_t *count = MOE_AT(a, a->rank, recv_count, int32_t);
    uint32_t *counter = MOE_AT(a, a->rank, counter, uint32_t);
    intra_moe_control_t *control = moe_control(a, a->rank);

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int expert = a->rank * a->experts_per_rank + local;
        int64_t requested = 0;

        if (moe_is_pull(a, expert)) {
            for (int source = 0; source < a->num_ranks; ++source) {
                requested += moe_pull_count(a, source, local);
            }
        } else {
            requested = counter[local];
            counter[local] = 0; /* every claim of this step happened before its flag */
        }
        count[local] = (int32_t)(requested < a->capacity ? requested : a->capacity);
        if (requested > a->capacity) {
            moe_report(&control->dispatch_status, INTRA_MOE_KERNEL_CAPACITY, expert, -1, -1,
                       requested);
        }
    }
}

KERNEL_FN void intra_moe_dispatch_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);

    if (g.block == 0 && g.thread == 0) {
        moe_build_pull_lists(a);
    }
    moe_dispatch_send(a, g);
    if (moe_last_block(&control->dispatch_send_done, a, g)) {
        for (int owner = 0; owner < a->num_ranks; ++owner) {
            /* release: our pushed rows, published rows and pull lists, to the owner */
            kernel_store_release_u64(&moe_control(a, owner)->dispatch_flag[a->rank], a->step);
        }
    }
    if (moe_wait_flags(a, control->dispatch_flag, &control->dispatch_status, g)) {
        moe_dispatch_pull(a, g);
    }
    if (moe_last_block(&control->dispatch_recv_done, a, g)) {
        moe_dispatch_finish(a);
    }
}

/* Columns each thread sums at a time: a 16-byte vector on GPUs, a cache-friendly run on
 * the host's single thread. */
#if KERNEL_GPU
#define MOE_COMBINE_TILE 8
#else
#define MOE_COMBINE_TILE 512
#endif

/* acc[j] += w * y[h0 + j], one rounding per multiply and per add; the type switch is
 * outside the loop so that the loop vectorises. */
KERNEL_FN void moe_accumulate(float *acc, const void *row, int h0, int len, float w, int elem)
{
    const uint16_t *half = (const uint16_t *)row + h0;
    const float *single = (const float *)row + h0;

    switch (elem) {
    case INTRA_MOE_ELEM_BF16:
        for (int j = 0; j < len; ++j) {
            acc[j] = kernel_add_f32(acc[j], kernel_mul_f32(w, kernel_bf16_to_f32(half[j])));
        }
        break;
    case INTRA_MOE_ELEM_FP16:
        for (int j = 0; j < len; ++j) {
            acc[j] = kernel_add_f32(acc[j], kernel_mul_f32(w, kernel_fp16_to_f32(half[j])));
        }
        break;
    default:
        for (int j = 0; j < len; ++j) {
            acc[j] = kernel_add_f32(acc[j], kernel_mul_f32(w, single[j]));
        }
        break;
    }
}

KERNEL_FN void moe_store_tile(void *row, int h0, int len, int elem, const float *acc)
{
    uint16_t *half = (uint16_t *)row + h0;
    float *single = (float *)row + h0;

    for (int j = 0; j < len; ++j) {
        if (elem == INTRA_MOE_ELEM_BF16) {
            half[j] = kernel_f32_to_bf16(acc[j]);
        } else if (elem == INTRA_MOE_ELEM_FP16) {
            half[j] = kernel_f32_to_fp16(acc[j]);
        } else {
            single[j] = acc[j];
        }
    }
}

/* Owner role: push result rows back into their sources, publish those of Pull experts. */
KERNEL_FN void moe_combine_send(const intra_moe_args_t *a, kernel_grid_t g)
{
    const int32_t *count = MOE_AT(a, a->rank, recv_count, int32_t);
    char *published = MOE_AT(a, a->rank, expert_y, char);
    uint64_t seen = 0;

    for (int local = 0; local < a->experts_per_rank; ++local) {
        int pull = moe_is_pull(a, a->rank * a->experts_per_rank + local);
        int first = (int)((g.block + g.num_blocks - seen % g.num_blocks) % g.num_blocks);

        for (int row = first; row < count[local]; row += (int)g.num_blocks) {
            size_t slot = (size_t)local * (size_t)a->capacity + (size_t)row;
            const char *y = (const char *)a->expert_y + slot * (size_t)a->y_row_bytes;
            intra_moe_source_t src = MOE_AT(a, a->rank, recv_src, intra_moe_source_t)[slot];
            size_t entry = (size_t)src.token * (size_t)a->topk + (size_t)src.slot;

            if (!pull) {
                kernel_copy_block(MOE_AT(a, src.rank, combine_recv, char) +
                                      entry * (size_t)a->y_row_bytes,
                                  y, (size_t)a->y_row_bytes, g);
            } else if (y != published + slot * (size_t)a->y_row_bytes) {
                kernel_copy_block(published + slot * (size_t)a->y_row_bytes, y,
                                  (size_t)a->y_row_bytes, g);
            }
        }
        seen += (uint64_t)count[local];
    }
}

/* Source role: the row that (token, k)'s owner produced, or NULL if it was dropped. */
KERNEL_FN const char *moe_result_row(const intra_moe_args_t *a, int token, int k)
{
    size_t entry = (size_t)token * (size_t)a->topk + (size_t)k;
    int expert = MOE_AT(a, a->rank, route, int32_t)[entry];
    int row = MOE_AT(a, a->rank, row_slot, int32_t)[entry];
    int owner, local;

    if (expert < 0 || row < 0) {
        return NULL;
    }
    if (!moe_is_pull(a, expert)) {
        return MOE_AT(a, a->rank, combine_recv, char) + entry * (size_t)a->y_row_bytes;
    }
    owner = expert / a->experts_per_rank;
    local = expert % a->experts_per_rank;
    return MOE_AT(a, owner, expert_y, char) +
           ((size_t)local * (size_t)a->capacity + (size_t)row) * (size_t)a->y_row_bytes;
}

/* out = sum over the n rows of weights[i] * rows[i], in fp32, i in order: the
 * reference's rounding order. */
KERNEL_FN void moe_sum_rows(const intra_moe_args_t *a, const char *const *rows,
                            const float *weights, int n, char *out, kernel_grid_t g)
{
    for (int h0 = (int)g.thread * MOE_COMBINE_TILE; h0 < a->hidden;
         h0 += (int)g.num_threads * MOE_COMBINE_TILE) {
        int len = a->hidden - h0 < MOE_COMBINE_TILE ? a->hidden - h0 : MOE_COMBINE_TILE;
        float acc[MOE_COMBINE_TILE];

        for (int j = 0; j < len; ++j) {
            acc[j] = 0.0f;
        }
        for (int i = 0; i < n; ++i) {
            moe_accumulate(acc, rows[i], h0, len, weights[i], a->y_elem);
        }
        moe_store_tile(out, h0, len, a->y_elem, acc);
    }
}

/* Source role: out[t] = sum over k of topk_weights[t][k] * y, in fp32, k in order. */
KERNEL_FN void moe_combine_reduce(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    const char *rows[INTRA_MOE_MAX_TOPK];
    float weights[INTRA_MOE_MAX_TOPK];

    for (int t = (int)g.block; t < a->num_tokens; t += (int)g.num_blocks) {
        int n = 0;

        for (int k = 0; k < a->topk; ++k) {
            size_t entry = (size_t)t * (size_t)a->topk + (size_t)k;
            int expert = MOE_AT(a, a->rank, route, int32_t)[entry];

            rows[n] = moe_result_row(a, t, k);
            weights[n] = a->topk_weights[entry];
            if (rows[n] != NULL) {
                ++n;
            } else if (expert >= 0 && g.thread == 0) {
                moe_report(&control->combine_status, INTRA_MOE_KERNEL_DROPPED, expert, t, k, 0);
            }
        }
        moe_sum_rows(a, rows, weights, n, (char *)a->out + (size_t)t * (size_t)a->y_row_bytes,
                     g);
    }
}

/* Source role, gather form: each term as it is, out[t][k]; a dropped term becomes zeros,
 * so that a later sum lacks it. Slots routed nowhere on this node are left alone. */
KERNEL_FN void moe_combine_gather(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);

    for (int t = (int)g.block; t < a->num_tokens; t += (int)g.num_blocks) {
        for (int k = 0; k < a->topk; ++k) {
            size_t entry = (size_t)t * (size_t)a->topk + (size_t)k;
            int expert = MOE_AT(a, a->rank, route, int32_t)[entry];
            const char *row = moe_result_row(a, t, k);
            char *out = (char *)a->out + entry * (size_t)a->y_row_bytes;

            if (row != NULL) {
                kernel_copy_block(out, row, (size_t)a->y_row_bytes, g);
            } else if (expert >= 0) {
                for (int j = (int)g.thread; j < a->y_row_bytes; j += (int)g.num_threads) {
                    out[j] = 0;
                }
                if (g.thread == 0) {
                    moe_report(&control->combine_status, INTRA_MOE_KERNEL_DROPPED, expert, t,
                               k, 0);
                }
            }
        }
    }
}

KERNEL_FN void intra_moe_combine_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);

    moe_combine_send(a, g);
    if (moe_last_block(&control->combine_send_done, a, g)) {
        for (int source = 0; source < a->num_ranks; ++source) {
            /* release: our pushed and published result rows, to the source */
            kernel_store_release_u64(&moe_control(a, source)->combine_flag[a->rank], a->step);
        }
    }
    if (!moe_wait_flags(a, control->combine_flag, &control->combine_status, g)) {
        return;
    }
    if (a->gather) {
        moe_combine_gather(a, g);
    } else {
        moe_combine_reduce(a, g);
    }
}

/* out[t] = sum over k with topk_idx[t][k] >= 0 of topk_weights[t][k] * terms[t][k], in
 * fp32, k in order: the last stage of a combine whose terms came from several places. */
KERNEL_FN void intra_moe_reduce_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const char *rows[INTRA_MOE_MAX_TOPK];
    float weights[INTRA_MOE_MAX_TOPK];

    for (int t = (int)g.block; t < a->num_tokens; t += (int)g.num_blocks) {
        int n = 0;

        for (int k = 0; k < a->topk; ++k) {
            size_t entry = (size_t)t * (size_t)a->topk + (size_t)k;

            if (a->topk_idx[entry] >= 0) {
                rows[n] = (const char *)a->terms + entry * (size_t)a->y_row_bytes;
                weights[n++] = a->topk_weights[entry];
            }
        }
        moe_sum_rows(a, rows, weights, n, (char *)a->out + (size_t)t * (size_t)a->y_row_bytes,
                     g);
    }
}

#endif
