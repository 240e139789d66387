/*
 * Multi-rail striping: chunk count and chunk bounds of a large write.
 */
#include "engine.h"
#include "util/util.h"

static bool inter_stripe_params_valid(const inter_stripe_params_t *params)
{
    return params != NULL && params->num_rails > 0 && params->min_chunk > 0 &&
           params->max_chunks > 0;
}

strata_status_t inter_stripe_num_chunks(const inter_stripe_params_t *params, uint64_t length,
                                        uint32_t *num_chunks_p)
{
    uint64_t chunks, min_chunk;

    if (!inter_stripe_params_valid(params) || length == 0) {
        UTIL_LOG_ERROR("stripe: invalid write of %llu bytes (rails %u, min chunk %llu, "
                       "max chunks %u)", (unsigned long long)length,
                       params ? params->num_rails : 0,
                       params ? (unsigned long long)params->min_chunk : 0ull,
                       params ? params->max_chunks : 0);
        return STRATA_ERR_INVALID;
    }
    if (params->num_rails == 1) {
        *num_chunks_p = 1; /* one rail: cutting buys nothing and costs operations */
        return STRATA_OK;
    }
    /* Chunks of at least min_chunk each, rounded up to whole aligned units. */
    min_chunk = (params->min_chunk + INTER_STRIPE_ALIGNMENT - 1) / INTER_STRIPE_ALIGNMENT *
                INTER_STRIPE_ALIGNMENT;
    chunks = UTIL_MIN(length / min_chunk, (uint64_t)params->max_chunks);
    if (chunks >= params->num_rails) {
        chunks -= chunks % params->num_rails; /* every rail carries the same share */
    }
    *num_chunks_p = (uint32_t)UTIL_MAX(chunks, 1);
    return STRATA_OK;
}

strata_status_t inter_stripe_chunk(const inter_stripe_params_t *params, uint64_t length,
                                   uint32_t num_chunks, uint32_t index, inter_chunk_t *chunk_p)
{
    uint64_t units, base, extra, start, end;

    if (!inter_stripe_params_valid(params) || length == 0 || num_chunks == 0 ||
        index >= num_chunks) {
        return STRATA_ERR_INVALID;
    }
    /* Split the write in aligned units, spread as evenly as whole units allow; the tail
     * that is not a whole unit goes to the last chunk. */
    units = length / INTER_STRIPE_ALIGNMENT;
    if (units < num_chunks) {
        if (num_chunks != 1) {
            return STRATA_ERR_INVALID; /* not a count inter_stripe_num_chunks would give */
        }
        units = 1;
    }
    base  = units / num_chunks;
    extra = units % num_chunks;
    start = (index * base + UTIL_MIN((uint64_t)index, extra)) * INTER_STRIPE_ALIGNMENT;
    end   = ((index + 1) * base + UTIL_MIN((uint64_t)index + 1, extra)) * INTER_STRIPE_ALIGNMENT;
    if (index == num_chunks - 1) {
        end = length;
    }
    chunk_p->rail   = index % params->num_rails;
    chunk_p->offset = start;
    chunk_p->length = end - start;
    return STRATA_OK;
}
