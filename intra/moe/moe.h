/*
 * MoE dispatch and combine between the local ranks of one node, over the symmetric heap
 * and the device backend's kernels (intra/kernels/moe_kernels.h).
 *
 * Experts are spread evenly: local rank r owns experts [r * E/L, (r + 1) * E/L). A step is
 * collective: every local rank calls intra_moe_dispatch, then intra_moe_combine, in that
 * order, whatever the calls return (an error reported by one rank, e.g. a bad expert id
 * or an overflowing capacity, still completes the step for the others). A wait for a peer
 * that exceeds the timeout fails the call with STRATA_ERR_TIMEOUT and the object for good.
 * One object is used by one thread at a time.
 */
#ifndef STRATA_INTRA_MOE_H
#define STRATA_INTRA_MOE_H

#include <strata/strata.h>

#include "intra/kernels/moe_kernels.h"
#include "util/util_config.h"

typedef struct intra_moe intra_moe_t;

typedef struct intra_moe_params {
    int            num_experts;   /**< over the node; a multiple of the local ranks */
    int            topk;          /**< 1..min(num_experts, INTRA_MOE_MAX_TOPK) */
    int            hidden;        /**< columns; rows must be whole 16-byte units */
    strata_dtype_t dtype;         /**< tokens; fp8 comes with scales */
    strata_dtype_t combine_dtype; /**< expert outputs and results: bf16, fp16 or fp32 */
    int            max_tokens;    /**< per rank and step */
    int            capacity;      /**< rows per local expert; 0: max_tokens * local ranks */
    unsigned       num_blocks;    /**< kernel blocks; 0: STRATA_INTRA_BLOCKS or the backend's */
    uint64_t       timeout_ns;    /**< bound on each wait for a peer; 0: STRATA_INTRA_TIMEOUT */
} intra_moe_params_t;

/** What a dispatch delivered to this rank's experts; valid until the next combine. */
typedef struct intra_moe_recv {
    int                       experts_per_rank;
    int                       capacity;
    size_t                    row_bytes;    /**< bytes of one token row */
    size_t                    scale_stride; /**< bytes between rows of scales */
    /** [experts_per_rank][capacity] rows; the first count[e] of expert e are filled, in no
     *  particular order: src says which source token and top-k slot each row is. */
    void                     *x;
    float                    *scales;       /**< NULL unless the dtype is fp8 */
    const intra_moe_source_t *src;
    const int32_t            *count;        /**< host memory */
    /** Where combine wants the expert outputs, [experts_per_rank][capacity][hidden] in the
     *  combine dtype; writing them here saves combine a copy for Pull experts. */
    void                     *expert_y;
} intra_moe_recv_t;

/** Heap bytes each rank needs for these parameters; 0 if they are invalid. */
size_t intra_moe_heap_size(const intra_moe_params_t *params, int local_size);

/**
 * Place the buffers in the heap (a symmetric allocation: every local rank calls it with the
 * same parameters on the same heap). STRATA_ERR_INVALID names a bad parameter;
 * STRATA_ERR_NO_MEMORY if the heap is too small.
 */
strata_status_t intra_moe_create(const intra_moe_params_t *params, intra_heap_t *heap,
                                 intra_moe_t **moe_p);
void            intra_moe_destroy(intra_moe_t *moe);

/**
 * Send this rank's tokens to the owners of their experts and receive its experts' tokens.
 * x: [num_tokens][hidden] in dtype, 16-byte aligned; x_scales: [num_tokens][hidden / 128]
 * for fp8, else NULL; topk_idx: [num_tokens][topk] expert ids, -1 for none. pull_mask:
 * bit e of word e / 64 set moves expert e in Pull form (NULL: all Push); every rank must
 * pass the same mask. Errors: STRATA_ERR_INVALID (bad arguments, or an expert id out of
 * range: that entry is skipped), STRATA_ERR_CAPACITY (rows past an expert's capacity are
 * not delivered), STRATA_ERR_TIMEOUT.
 */
strata_status_t intra_moe_dispatch(intra_moe_t *moe, const void *x, const float *x_scales,
                                   const int64_t *topk_idx, int num_tokens,
                                   const uint64_t *pull_mask, intra_moe_recv_t *recv_p);

/**
 * Return the experts' outputs to their tokens: out[t] = sum over k of topk_weights[t][k] *
 * y(t, k), accumulated in fp32 in k order and rounded once to the combine dtype.
 * expert_y: [experts_per_rank][capacity][hidden] (recv->expert_y or any buffer of that
 * shape); topk_weights: [num_tokens][topk] of the dispatch; out: [num_tokens][hidden].
 * pull_mask as for dispatch, for the return direction. STRATA_ERR_CAPACITY if a row of one
 * of this rank's tokens was dropped (its out row lacks that term).
 */
strata_status_t intra_moe_combine(intra_moe_t *moe, const void *expert_y,
                                  const float *topk_weights, const uint64_t *pull_mask,
                                  void *out);

/**
 * Combine in gather form, for steps whose tokens also have experts on other nodes: the
 * term y(t, k) of every slot routed to this node is written, unweighted, to
 * terms[t][k] ([num_tokens][topk][hidden] in the combine dtype, 16-byte aligned); a term
 * dropped for capacity becomes zeros (and STRATA_ERR_CAPACITY); other slots are not
 * touched. Collective like intra_moe_combine, in its place in the step.
 */
strata_status_t intra_moe_combine_terms(intra_moe_t *moe, const void *expert_y,
                                        const uint64_t *pull_mask, void *terms);

/**
 * out[t] = sum over k with topk_idx[t][k] >= 0 of topk_weights[t][k] * terms[t][k],
 * accumulated in fp32 in k order and rounded once: intra_moe_combine's arithmetic over
 * terms gathered from anywhere. Local: involves no peer, any number of tokens.
 */
strata_status_t intra_moe_reduce(intra_moe_t *moe, const void *terms, const int64_t *topk_idx,
                                 const float *topk_weights, int num_tokens, void *out);

/** The config table of the intra layer (STRATA_INTRA_*). */
extern const util_config_table_t intra_config_table;

#endif
