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
#include "net_format.h"

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
    INTRA_MOE_KERNEL_MODES        = 5, /* value: a local rank moving the step in other modes */
    INTRA_MOE_KERNEL_NET_FAILED   = 6, /* count: the work ring's failure status */
    INTRA_MOE_KERNEL_NET_TIMEOUT  = 7, /* value: the rank waited for; token: what */
    INTRA_MOE_KERNEL_NET_PROTOCOL = 8, /* value: the rank whose header, grant or entry is
                                          wrong; token: what; count: its step */
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
    /* Dispatches completed, written by the last block of each: kernels read their step
     * here rather than from their arguments, so that a captured graph can replay them. */
    uint64_t dispatched;
    uint64_t digest;       /* of the modes this rank moves the current step in */
    intra_moe_status_t dispatch_status;
    intra_moe_status_t combine_status;
    intra_moe_status_t net_status; /* the step across nodes (net_kernels.h) */
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
    uint64_t timeout_ticks; /* bound on each wait for a peer, in kernel_timer ticks */
    uint64_t digest;        /* of the step's modes: every local rank must pass the same */
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
    /*
     * The step across nodes (NULL / -1 / 0 when the node is alone). Tokens from num_own on
     * came over the network: their entries [record][row][scales] are at entry_base +
     * aug_entry[t] and their node-local expert ids in aug_topk; only the device knows how
     * many there are (*num_tokens_dev). Origins and term destinations are tables in each
     * rank's heap part; term_src gives reduce every term's address.
     */
    int32_t        num_own;
    int32_t        record_bytes;
    int32_t        origin_rank;     /* the global rank of this rank's own tokens */
    const int32_t *num_tokens_dev;
    const char    *entry_base;
    const int64_t *aug_entry;       /* [max_tokens] byte offsets, from num_own on */
    const int64_t *aug_topk;        /* [max_tokens][topk], from num_own on */
    int64_t        origin_offset;   /* heap: int32[max_tokens][2] (rank, token); -1 none */
    int64_t        term_dst_offset; /* heap: int64[max_tokens][topk] heap offsets; -1 none */
    const uint64_t *term_src;       /* reduce: [num_tokens][topk] addresses, 0: no term */
    intra_moe_source_t *public_src; /* sources: [experts_per_rank][capacity] as the API has them */
    int32_t       *public_count;    /* sources: [experts_per_rank] */
    intra_net_args_t net;           /* the network kernels' (net_kernels.h); ring NULL: none */
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
KERNEL_FN int moe_last_block(uint64_t *done, uint64_t step, kernel_grid_t g)
{
    KERNEL_SHARED int last;

    kernel_fence_system(); /* this thread's stores, before the block's count */
    kernel_block_sync();
    if (g.thread == 0) {
        last = kernel_atomic_add_u64(done, 1) + 1 == step * g.num_blocks;
        if (last) {
            kernel_fence_system(); /* acquire: every other block's stores */
        }
    }
    kernel_block_sync();
    return last && g.thread == 0;
}

/* Wait until every rank's flag reaches this step; 0 (and a TIMEOUT report) if one never does. */
KERNEL_FN int moe_wait_flags(const intra_moe_args_t *a, const uint64_t *flags, uint64_t step,
                             intra_moe_status_t *status, kernel_grid_t g)
{
    KERNEL_SHARED int ok;

    if (g.thread == 0) {
        uint64_t start = kernel_timer();
        uint32_t spins = 0;

        ok = 1;
        for (int r = 0; r < a->num_ranks && ok; ++r) {
            /* acquire: pairs with the release in the peer's last block */
            while (kernel_load_acquire_u64(&flags[r]) < step) {
                if (kernel_timer() - start > a->timeout_ticks) {
                    moe_report(status, INTRA_MOE_KERNEL_TIMEOUT, r, -1, -1, 0);
                    ok = 0;
                    break;
                }
                kernel_spin_pause(spins++);
            }
        }
    }
    kernel_block_sync();
    return ok;
}

/*
 * The step: dispatch runs the one after the last completed dispatch, combine the current
 * one. Read once by thread 0 and shared with the block.
 */
KERNEL_FN uint64_t moe_step(const intra_moe_args_t *a, int dispatch, kernel_grid_t g)
{
    KERNEL_SHARED uint64_t step;

    if (g.thread == 0) {
        step = kernel_load_acquire_u64(&moe_control(a, a->rank)->dispatched) + (dispatch ? 1 : 0);
    }
    kernel_block_sync();
    return step;
}

/* Whether the step across nodes already failed here: the node's kernels then stand down. */
KERNEL_FN int moe_net_failed(const intra_moe_args_t *a)
{
    return a->net.ring != 0 && kernel_load_i32(&moe_control(a, a->rank)->net_status.code) != 0;
}

/* Tokens of this launch: the caller's count, or the device's for a step across nodes. */
KERNEL_FN int moe_num_tokens(const intra_moe_args_t *a)
{
    return a->num_tokens_dev != 0 ? kernel_load_i32(a->num_tokens_dev) : a->num_tokens;
}

KERNEL_FN int moe_received(const intra_moe_args_t *a, int token)
{
    return a->aug_entry != 0 && token >= a->num_own;
}

/* Token t's row and scales: the caller's x, or where the network put its entry. */
KERNEL_FN const char *moe_token_row(const intra_moe_args_t *a, int token)
{
    if (moe_received(a, token)) {
        return a->entry_base + a->aug_entry[token] + a->record_bytes;
    }
    return (const char *)a->x + (size_t)token * (size_t)a->row_bytes;
}

KERNEL_FN const float *moe_token_scales(const intra_moe_args_t *a, int token)
{
    if (a->scale_count == 0) {
        return 0;
    }
    if (moe_received(a, token)) {
        return (const float *)(moe_token_row(a, token) + a->row_bytes);
    }
    return a->x_scales + (size_t)token * (size_t)a->scale_count;
}

KERNEL_FN int64_t moe_token_expert(const intra_moe_args_t *a, int token, int k)
{
    if (moe_received(a, token)) {
        return a->aug_topk[(size_t)token * (size_t)a->topk + (size_t)k];
    }
    return a->topk_idx[(size_t)token * (size_t)a->topk + (size_t)k];
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
                       moe_token_row(a, token), moe_token_scales(a, token), g);
    }
    kernel_block_sync(); /* row is reused by the next call */
}

/* Validate (token, k)'s expert id and record it in route; -1 for none or invalid. */
KERNEL_FN int moe_route(const intra_moe_args_t *a, int token, int k, kernel_grid_t g)
{
    int64_t expert = moe_token_expert(a, token, k);

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
KERNEL_FN void moe_dispatch_send(const intra_moe_args_t *a, int num_tokens, kernel_grid_t g)
{
    for (int t = (int)g.block; t < num_tokens; t += (int)g.num_blocks) {
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
                               moe_token_row(a, t), moe_token_scales(a, t), g);
                published = 1;
            }
        }
    }
}

/* Source role, one thread: the CSR of (token, k) entries per Pull expert, for the owners. */
KERNEL_FN void moe_build_pull_lists(const intra_moe_args_t *a, int num_tokens)
{
    int32_t *offset = MOE_AT(a, a->rank, pull_offset, int32_t);
    int32_t *cursor = MOE_AT(a, a->rank, pull_cursor, int32_t);
    int32_t *entry  = MOE_AT(a, a->rank, pull_entry, int32_t);
    int entries = num_tokens * a->topk;

    for (int e = 0; e <= a->num_experts; ++e) {
        offset[e] = 0;
    }
    for (int i = 0; i < entries; ++i) {
        int64_t e = moe_token_expert(a, i / a->topk, i % a->topk);
        if (e >= 0 && e < a->num_experts && moe_is_pull(a, (int)e)) {
            ++offset[e + 1];
        }
    }
    for (int e = 0; e < a->num_experts; ++e) {
        offset[e + 1] += offset[e];
        cursor[e] = offset[e];
    }
    for (int i = 0; i < entries; ++i) {
        int64_t e = moe_token_expert(a, i / a->topk, i % a->topk);
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

/* Own tokens' origins, for the owners' sources kernel: (this rank, the token). */
KERNEL_FN void moe_write_origins(const intra_moe_args_t *a, kernel_grid_t g)
{
    int32_t *origin = (int32_t *)(a->heap[a->rank] + a->origin_offset);
    int own = a->aug_entry != 0 ? a->num_own : a->num_tokens;

    for (int t = (int)(g.block * g.num_threads + g.thread); t < own;
         t += (int)(g.num_blocks * g.num_threads)) {
        origin[2 * t]     = a->origin_rank;
        origin[2 * t + 1] = t;
    }
}

/* Owner role, after every source's flag: every local rank moves the step in our modes. */
KERNEL_FN void moe_check_digests(const intra_moe_args_t *a)
{
    for (int source = 0; source < a->num_ranks; ++source) {
        if (kernel_load_acquire_u64(&moe_control(a, source)->digest) != a->digest) {
            moe_report(&moe_control(a, a->rank)->dispatch_status, INTRA_MOE_KERNEL_MODES,
                       source, -1, -1, 0);
        }
    }
}

KERNEL_FN void intra_moe_dispatch_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    uint64_t step = moe_step(a, 1, g);
    int num_tokens = moe_num_tokens(a);

    if (moe_net_failed(a)) {
        return;
    }
    if (g.block == 0 && g.thread == 0) {
        control->digest = a->digest; /* published by the fence before our flags */
        moe_build_pull_lists(a, num_tokens);
    }
    if (a->origin_offset >= 0) {
        moe_write_origins(a, g);
    }
    moe_dispatch_send(a, num_tokens, g);
    if (moe_last_block(&control->dispatch_send_done, step, g)) {
        for (int owner = 0; owner < a->num_ranks; ++owner) {
            /* release: our pushed rows, published rows, pull lists and digest, to the owner */
            kernel_store_release_u64(&moe_control(a, owner)->dispatch_flag[a->rank], step);
        }
    }
    if (moe_wait_flags(a, control->dispatch_flag, step, &control->dispatch_status, g)) {
        if (g.block == 0 && g.thread == 0) {
            moe_check_digests(a);
        }
        moe_dispatch_pull(a, g);
    }
    if (moe_last_block(&control->dispatch_recv_done, step, g)) {
        moe_dispatch_finish(a);
        kernel_store_release_u64(&control->dispatched, step);
    }
}

/*
 * Owner role, after dispatch: each received row's source as the API names it (global rank,
 * token index there, slot), from the origin tables of the node's ranks, and the counts.
 */
KERNEL_FN void intra_moe_sources_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const int32_t *count = MOE_AT(a, a->rank, recv_count, int32_t);
    const intra_moe_source_t *src = MOE_AT(a, a->rank, recv_src, intra_moe_source_t);
    size_t rows = (size_t)a->experts_per_rank * (size_t)a->capacity;

    if (moe_net_failed(a)) {
        return;
    }
    for (size_t i = g.block * g.num_threads + g.thread; i < rows;
         i += (size_t)g.num_blocks * g.num_threads) {
        int e = (int)(i / (size_t)a->capacity), row = (int)(i % (size_t)a->capacity);

        if (row < count[e]) {
            const int32_t *origin = (const int32_t *)(a->heap[src[i].rank] + a->origin_offset);
            intra_moe_source_t s;

            s.rank  = origin[2 * src[i].token];
            s.token = origin[2 * src[i].token + 1];
            s.slot  = src[i].slot;
            a->public_src[i] = s;
        }
    }
    for (int e = (int)(g.block * g.num_threads + g.thread); e < a->experts_per_rank;
         e += (int)(g.num_blocks * g.num_threads)) {
        a->public_count[e] = count[e];
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

            if (!pull && a->term_dst_offset >= 0) {
                /* straight to where the term's holder wants it (its network area, or its
                 * own tokens' terms) */
                int64_t at = ((const int64_t *)(a->heap[src.rank] + a->term_dst_offset))[entry];

                if (at >= 0) {
                    kernel_copy_block(a->heap[src.rank] + at, y, (size_t)a->y_row_bytes, g);
                }
            } else if (!pull) {
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

/* Source role, direct form: Push terms are already where term_dst says (their owners put
 * them there); Pull terms are fetched there; a dropped term becomes zeros, so that a later
 * sum lacks it. Slots routed nowhere on this node are left alone. */
KERNEL_FN void moe_combine_direct(const intra_moe_args_t *a, int num_tokens, kernel_grid_t g)
{
    intra_moe_control_t *control = moe_control(a, a->rank);
    const int64_t *term_dst = (const int64_t *)(a->heap[a->rank] + a->term_dst_offset);

    for (int t = (int)g.block; t < num_tokens; t += (int)g.num_blocks) {
        for (int k = 0; k < a->topk; ++k) {
            size_t entry = (size_t)t * (size_t)a->topk + (size_t)k;
            int expert = MOE_AT(a, a->rank, route, int32_t)[entry];
            const char *row = moe_result_row(a, t, k);
            char *out = a->heap[a->rank] + term_dst[entry];

            if (expert < 0 || term_dst[entry] < 0 || (row != NULL && !moe_is_pull(a, expert))) {
                continue;
            }
            if (row != NULL) {
                kernel_copy_block(out, row, (size_t)a->y_row_bytes, g);
            } else {
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
    uint64_t step = moe_step(a, 0, g);

    if (moe_net_failed(a)) {
        return;
    }
    moe_combine_send(a, g);
    if (moe_last_block(&control->combine_send_done, step, g)) {
        for (int source = 0; source < a->num_ranks; ++source) {
            /* release: our pushed and published result rows, to the source */
            kernel_store_release_u64(&moe_control(a, source)->combine_flag[a->rank], step);
        }
    }
    if (!moe_wait_flags(a, control->combine_flag, step, &control->combine_status, g)) {
        return;
    }
    if (a->term_dst_offset >= 0) {
        moe_combine_direct(a, moe_num_tokens(a), g);
    } else {
        moe_combine_reduce(a, g);
    }
}

/* out[t] = sum over k of topk_weights[t][k] * y(t, k), with y(t, k) at term_src[t][k] (0:
 * no term), in fp32, k in order: the last stage of a combine whose terms came from several
 * places, read where they landed. */
KERNEL_FN void intra_moe_reduce_body(const intra_moe_args_t *a, kernel_grid_t g)
{
    const char *rows[INTRA_MOE_MAX_TOPK];
    float weights[INTRA_MOE_MAX_TOPK];

    if (moe_net_failed(a)) {
        return;
    }
    for (int t = (int)g.block; t < a->num_tokens; t += (int)g.num_blocks) {
        int n = 0;

        for (int k = 0; k < a->topk; ++k) {
            size_t entry = (size_t)t * (size_t)a->topk + (size_t)k;

            if (a->term_src[entry] != 0) {
                rows[n] = (const char *)(uintptr_t)a->term_src[entry];
                weights[n++] = a->topk_weights[entry];
            }
        }
        moe_sum_rows(a, rows, weights, n, (char *)a->out + (size_t)t * (size_t)a->y_row_bytes,
                     g);
    }
}

#endif
