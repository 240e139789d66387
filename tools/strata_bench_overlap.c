/*
 * strata-bench moe --overlap: how soon a rank's first expert has all its rows, against the
 * whole dispatch. The object runs on a stream of strata_comm_stream_create, so dispatch_recv
 * returns once the kernels are enqueued; each rank then polls its local experts
 * (strata_moe_expert_wait with a timeout of 0) until one is complete, waits for the others,
 * and then for the whole dispatch (strata_moe_synchronize: the rows' sources too). Rank 0's
 * medians are printed, and their ratio: the share of the dispatch an expert's compute could
 * overlap at best.
 */
#include "strata_bench_mpi.h"

#include <stdio.h>
#include <string.h>

typedef struct overlap_samples {
    util_histogram_t first, last, done; /* from dispatch_send, ns */
} overlap_samples_t;

/* Poll every local expert until one is complete, sleeping 10 us between rounds: the
 * kernels of the host backend are threads that need the cores. */
static void overlap_first_ready(strata_moe_t *moe, int experts)
{
    for (;; util_sleep_ns(10 * UTIL_NSEC_PER_USEC)) {
        for (int e = 0; e < experts; ++e) {
            int32_t rows;
            strata_status_t status = strata_moe_expert_wait(moe, e, 0, &rows);

            if (status == STRATA_OK) {
                return;
            }
            if (status != STRATA_ERR_TIMEOUT) {
                BENCH_TRY(status);
            }
        }
    }
}

/* One step on the stream, timed to its first and last complete expert and its end. */
static void overlap_step(bench_intra_t *b, strata_moe_t *moe, strata_moe_layout_t *layout,
                         overlap_samples_t *s, bool record)
{
    strata_moe_recv_t recv;
    uint64_t t0, first, last, done;

    bench_barrier(b);
    t0 = util_clock_now_ns();
    BENCH_TRY(strata_moe_dispatch_send(moe, layout, b->x, NULL));
    BENCH_TRY(strata_moe_dispatch_recv(moe, &recv));
    overlap_first_ready(moe, recv.num_local_experts);
    first = util_clock_now_ns();
    for (int e = 0; e < recv.num_local_experts; ++e) {
        int32_t rows;

        BENCH_TRY(strata_moe_expert_wait(moe, e, -1, &rows));
    }
    last = util_clock_now_ns();
    BENCH_TRY(strata_moe_synchronize(moe));
    done = util_clock_now_ns();
    BENCH_TRY(strata_moe_combine(moe, NULL, b->weights, b->out));
    BENCH_TRY(strata_moe_synchronize(moe));
    if (record) {
        util_histogram_record(&s->first, first - t0);
        util_histogram_record(&s->last, last - t0);
        util_histogram_record(&s->done, done - t0);
    }
}

static void overlap_print(const bench_intra_t *b, const overlap_samples_t *s)
{
    double first = (double)util_histogram_percentile(&s->first, 50) / 1e3;
    double last  = (double)util_histogram_percentile(&s->last, 50) / 1e3;
    double done  = (double)util_histogram_percentile(&s->done, 50) / 1e3;

    printf("%6d overlap: first expert ready p50 %.1f us (p99 %.1f), last expert ready p50 "
           "%.1f us, dispatch done p50 %.1f us (p99 %.1f)\n", b->tokens, first,
           (double)util_histogram_percentile(&s->first, 99) / 1e3, last, done,
           (double)util_histogram_percentile(&s->done, 99) / 1e3);
    printf("%6d first expert ready / dispatch done: %.2f\n", b->tokens,
           done > 0 ? first / done : 0.0);
    fflush(stdout);
}

void bench_moe_overlap(bench_intra_t *b, strata_comm_t *comm, tool_progress_t *progress)
{
    strata_moe_params_t p = {.num_experts = b->experts, .topk = b->topk, .hidden = b->hidden,
                             .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                             .max_tokens = b->tokens, .mode = STRATA_MOE_MODE_PUSH};
    static overlap_samples_t s;
    strata_moe_layout_t *layout;
    strata_moe_t *moe;
    void *stream;

    memset(&s, 0, sizeof(s));
    bench_intra_route(b);
    BENCH_TRY(strata_comm_stream_create(comm, &stream));
    BENCH_TRY(strata_moe_create(comm, &p, &moe));
    BENCH_TRY(strata_moe_set_stream(moe, stream));
    BENCH_TRY(strata_moe_layout_create(moe, b->idx, b->tokens, &layout));
    for (int i = -2; i < b->iters; ++i) {
        tool_progress_update(progress, "moe --overlap %d tokens: step %d/%d", b->tokens, i + 2,
                             b->iters + 2);
        overlap_step(b, moe, layout, &s, i >= 0);
    }
    bench_barrier(b); /* nobody unmaps while a peer still reads */
    strata_moe_layout_destroy(layout);
    BENCH_TRY(strata_moe_set_stream(moe, NULL));
    strata_moe_destroy(moe);
    strata_comm_stream_destroy(comm, stream);
    if (b->rank == 0) {
        tool_progress_end(progress);
        overlap_print(b, &s);
    }
}
