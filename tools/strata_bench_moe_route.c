/*
 * strata-bench moe: one MoE object of a route (and mode) with its layout, reused each step:
 * a timed step of dispatch and combine halves, with --receive exact the counts and the rows
 * into the bench's buffers between them.
 */
#include "strata_bench_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void moe_route_open(bench_intra_t *b, strata_comm_t *comm, moe_route_t *r)
{
    strata_moe_params_t p = {.num_experts = b->experts, .topk = b->topk, .hidden = b->hidden,
                             .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                             .max_tokens = b->tokens, .route = r->route,
                             .mode = STRATA_MOE_MODE_PUSH, .combine = r->combine,
                             .exchange = r->exchange, .receive = r->receive};
    uint64_t t0;

    if (r->exchange != STRATA_MOE_EXCHANGE_DEFAULT || r->receive != STRATA_MOE_RECEIVE_DEFAULT) {
        /* --exchange, --receive: the most an expert can receive on all, so that they differ
         * in the mode alone (whatever STRATA_MOE_CAPACITY_FACTOR says; the streamed one's
         * default, twice the mean load, may drop rows) */
        p.capacity = b->tokens * b->size;
    }
    if (r->receive == STRATA_MOE_RECEIVE_EXACT) { /* its own modes; the rows in buffers */
        p.mode       = STRATA_MOE_MODE_DEFAULT;
        r->into_rows = (int64_t)b->tokens * b->size * b->topk;
        r->into_x    = aligned_alloc(64, (size_t)r->into_rows * b->row_bytes);
        r->into_src  = calloc((size_t)r->into_rows, sizeof(strata_moe_source_t));
        r->into_counts = calloc((size_t)(b->experts / b->size), sizeof(int32_t));
        if (r->into_x == NULL || r->into_src == NULL || r->into_counts == NULL) {
            fprintf(stderr, "strata-bench moe: out of memory\n");
            exit(1);
        }
    }

    bench_barrier(b);
    t0 = util_clock_now_ns();
    BENCH_TRY(strata_moe_create(comm, &p, &r->moe));
    BENCH_TRY(strata_moe_layout_create(r->moe, b->idx, b->tokens, &r->layout));
    r->create_ms = moe_slowest_ms(b, t0);
}

/* One step: the reused layout, dispatch and combine halves, timed; with a breakdown, what a
 * layout made for the step would cost, and each phase. */
void moe_route_step(bench_intra_t *b, moe_route_t *r, bool record, bool breakdown)
{
    strata_moe_recv_t recv;
    uint64_t t0, t1, t2;

    if (breakdown) {
        strata_moe_layout_t *fresh;

        t0 = util_clock_now_ns();
        BENCH_TRY(strata_moe_layout_create(r->moe, b->idx, b->tokens, &fresh));
        strata_moe_layout_destroy(fresh);
        if (record) {
            util_histogram_record(&r->bd.samples[MOE_BD_LAYOUT], util_clock_now_ns() - t0);
        }
    }
    bench_barrier(b);
    t0 = util_clock_now_ns();
    BENCH_TRY(strata_moe_dispatch_send(r->moe, r->layout, b->x, NULL));
    BENCH_TRY(strata_moe_dispatch_recv(r->moe, &recv));
    if (r->receive == STRATA_MOE_RECEIVE_EXACT) { /* the counts, then the rows into buffers */
        BENCH_TRY(strata_moe_dispatch_counts(r->moe, -1, r->into_counts));
        BENCH_TRY(strata_moe_dispatch_recv_into(r->moe, r->into_x, NULL, r->into_src,
                                                r->into_rows));
    }
    t1 = util_clock_now_ns();
    /* identity experts: the rows themselves are the outputs (bf16 both) */
    BENCH_TRY(strata_moe_combine(r->moe, r->receive == STRATA_MOE_RECEIVE_EXACT ? r->into_x
                                                                                  : NULL,
                                 b->weights, b->out));
    t2 = util_clock_now_ns();
    BENCH_TRY(strata_moe_get_stats(r->moe, &r->stats));
    if (record) {
        bench_intra_record(&r->samples, t0, t1, t2);
    }
    if (breakdown) {
        moe_breakdown_record(&r->bd, &r->stats, record);
    }
}

void moe_route_close(bench_intra_t *b, moe_route_t *r)
{
    bench_intra_finish(b, &r->samples, &r->result);
    bench_barrier(b); /* nobody unmaps while a peer still reads */
    strata_moe_layout_destroy(r->layout);
    strata_moe_destroy(r->moe);
    free(r->into_x);
    free(r->into_src);
    free(r->into_counts);
}
