/*
 * A bootstrap of one rank, for tests of the public API that need no peers: the allgather
 * copies, the barrier returns.
 */
#ifndef STRATA_TESTS_ONE_RANK_H
#define STRATA_TESTS_ONE_RANK_H

#include <strata/strata.h>

#include <string.h>

static strata_status_t one_rank_allgather(void *ctx, const void *send, void *recv, size_t size)
{
    (void)ctx;
    memcpy(recv, send, size);
    return STRATA_OK;
}

static strata_status_t one_rank_barrier(void *ctx)
{
    (void)ctx;
    return STRATA_OK;
}

static strata_bootstrap_t one_rank = {.rank = 0, .world_size = 1,
                                      .allgather = one_rank_allgather,
                                      .barrier = one_rank_barrier};

#endif
