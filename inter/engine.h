/*
 * inter: the inter-node tier (host-proxy RDMA transfer engine). Today: how a large write is
 * cut into chunks and striped over a GPU's rails, computed identically by sender and
 * receiver so the receiver knows how many immediates to expect. Other layers include only
 * this header.
 */
#ifndef STRATA_INTER_ENGINE_H
#define STRATA_INTER_ENGINE_H

#include <strata/strata.h>

#include <stdint.h>

/** Chunks never start on an offset that is not a multiple of this (cache line). */
#define INTER_STRIPE_ALIGNMENT 64

typedef struct inter_stripe_params {
    uint32_t num_rails;  /**< NICs the write may use, >= 1 */
    uint64_t min_chunk;  /**< no chunk smaller than this unless the write is */
    uint32_t max_chunks; /**< upper bound on chunks (and so on immediates) per write */
} inter_stripe_params_t;

typedef struct inter_chunk {
    uint32_t rail;   /**< index into the GPU's rail list */
    uint64_t offset; /**< from the start of the write */
    uint64_t length;
} inter_chunk_t;

/**
 * How many chunks a write of `length` bytes is cut into: a multiple of the rail count when
 * there is enough data, so rails carry equal shares. Deterministic: both sides of a write
 * call it with the same arguments. STRATA_ERR_INVALID on zero length or bad params.
 */
strata_status_t inter_stripe_num_chunks(const inter_stripe_params_t *params, uint64_t length,
                                        uint32_t *num_chunks_p);

/** Chunk `index` of a write cut into num_chunks (from inter_stripe_num_chunks). */
strata_status_t inter_stripe_chunk(const inter_stripe_params_t *params, uint64_t length,
                                   uint32_t num_chunks, uint32_t index, inter_chunk_t *chunk_p);

#endif
