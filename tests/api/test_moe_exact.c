/*
 * The exact receive on one rank (params.receive = STRATA_MOE_RECEIVE_EXACT): its refusals
 * (the receive's value, a mode, rounds, node-reduce, pull masks, an object with blocks),
 * the exchange it takes by default, what it allocates against the estimate, a step on a
 * host stream with every expert waited for and every row checked where the caller's
 * buffers got it, a capture refused, and a recreated object that receives exactly still.
 */
#include <strata/strata.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "api/moe_one_rank.h"
#include "intra/host/host_device.h"

/* The fixture's shape, receiving exactly. */
static strata_moe_params_t exact_params(void)
{
    return (strata_moe_params_t){.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                                 .dtype = STRATA_DTYPE_FP32, .combine_dtype = STRATA_DTYPE_FP32,
                                 .max_tokens = TOKENS, .receive = STRATA_MOE_RECEIVE_EXACT};
}

/* The exact receive's parameters: a receive outside the enum, and an exact object given a
 * mode, are refused; across nodes in rounds or with node-reduce it is unsupported; it holds
 * no blocks worth the name, as the estimate says, and its pull masks are refused. */
static void test_exact_receive_refusals(void **state)
{
    fixture_t *f = *state;
    strata_moe_params_t p = exact_params();
    strata_moe_memory_t exact, blocks, streamed;
    strata_moe_stats_t stats;
    strata_moe_t *moe = NULL;
    uint64_t mask[1] = {1};

    p.receive = (strata_moe_receive_t)3;
    assert_int_equal(strata_moe_create(f->comm, &p, &moe), STRATA_ERR_INVALID);
    p.receive = STRATA_MOE_RECEIVE_EXACT;
    p.mode    = STRATA_MOE_MODE_PULL;
    assert_int_equal(strata_moe_create(f->comm, &p, &moe), STRATA_ERR_INVALID);
    p.mode = STRATA_MOE_MODE_DEFAULT;
    setenv("STRATA_MOE_EXCHANGE", "worst-case", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 2, &exact), STRATA_OK);
    setenv("STRATA_MOE_EXCHANGE", "streamed", 1);
    setenv("STRATA_MOE_WINDOW_BYTES", "8k", 1); /* rounds across nodes: no blocks either */
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 2, &streamed), STRATA_OK);
    assert_int_equal(streamed.expert_rows, exact.expert_rows);
    assert_true(streamed.total < exact.total);
    unsetenv("STRATA_MOE_WINDOW_BYTES");
    unsetenv("STRATA_MOE_EXCHANGE");
    setenv("STRATA_MOE_COMBINE", "node-reduce", 1);
    setenv("STRATA_MOE_ROUTE", "hierarchical", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 2, &exact), STRATA_ERR_UNSUPPORTED);
    unsetenv("STRATA_MOE_ROUTE");
    unsetenv("STRATA_MOE_COMBINE");
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 1, &exact), STRATA_OK);
    p.receive = STRATA_MOE_RECEIVE_BLOCKS;
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 1, &blocks), STRATA_OK);
    /* one row per expert, against the most it can receive (TOKENS x 4 ranks) */
    assert_true(exact.expert_rows * TOKENS * 4 <= blocks.expert_rows * 2);
    p.receive = STRATA_MOE_RECEIVE_EXACT;
    assert_int_equal(strata_moe_create(f->comm, &p, &moe), STRATA_OK);
    assert_int_equal(strata_moe_get_stats(moe, &stats), STRATA_OK);
    assert_int_equal(strata_moe_memory_estimate(&p, 1, 1, &exact), STRATA_OK);
    assert_memory_equal(&stats.memory, &exact, sizeof(exact));
    assert_int_equal(strata_moe_set_pull_mask(moe, mask, NULL), STRATA_ERR_INVALID);
    strata_moe_destroy(moe);
    /* an object with blocks has no exact receive */
    assert_int_equal(strata_moe_dispatch_recv_into(f->moe, f->x, NULL, NULL, TOKENS),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_dispatch_recv_into(NULL, NULL, NULL, NULL, 0),
                     STRATA_ERR_INVALID);
}

static void exchange_is(const strata_moe_t *moe, strata_moe_exchange_t exchange)
{
    strata_moe_stats_t stats;

    assert_int_equal(strata_moe_get_stats(moe, &stats), STRATA_OK);
    assert_int_equal(stats.exchange, exchange);
}

/* Where params.exchange and STRATA_MOE_EXCHANGE leave it open (auto), an exact object
 * streams: every row arrives on either exchange, so it takes the one whose areas the window
 * bounds. An object with blocks keeps the worst-case exchange, whose default capacity drops
 * nothing; the variable, or params.exchange, still decides for both. The estimates across
 * nodes show which areas each sized. A recreated object keeps the exchange it took, and a
 * blocks object given STRATA_MOE_EXCHANGE=streamed streams. */
static void test_exact_receive_streams_by_default(void **state)
{
    fixture_t *f = *state;
    strata_moe_params_t p = exact_params();
    strata_moe_memory_t chosen, streamed, worst;
    strata_moe_t *moe = NULL, *blocks = NULL, *again = NULL;

    unsetenv("STRATA_MOE_EXCHANGE");
    setenv("STRATA_MOE_WINDOW_BYTES", "8k", 1); /* several rounds: the areas differ */
    p.exchange = STRATA_MOE_EXCHANGE_STREAMED;
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 2, &streamed), STRATA_OK);
    p.exchange = STRATA_MOE_EXCHANGE_WORST_CASE;
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 2, &worst), STRATA_OK);
    assert_true(streamed.total < worst.total);
    p.exchange = STRATA_MOE_EXCHANGE_DEFAULT;
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 2, &chosen), STRATA_OK);
    assert_memory_equal(&chosen, &streamed, sizeof(chosen));
    setenv("STRATA_MOE_EXCHANGE", "worst-case", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 2, &chosen), STRATA_OK);
    assert_memory_equal(&chosen, &worst, sizeof(chosen));
    setenv("STRATA_MOE_EXCHANGE", "auto", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 4, 2, &chosen), STRATA_OK);
    assert_memory_equal(&chosen, &streamed, sizeof(chosen));
    unsetenv("STRATA_MOE_EXCHANGE");
    unsetenv("STRATA_MOE_WINDOW_BYTES");

    /* the objects say which they took, a recreated one the same */
    assert_int_equal(strata_moe_create(f->comm, &p, &moe), STRATA_OK);
    exchange_is(moe, STRATA_MOE_EXCHANGE_STREAMED);
    p.receive = STRATA_MOE_RECEIVE_BLOCKS;
    assert_int_equal(strata_moe_create(f->comm, &p, &blocks), STRATA_OK);
    exchange_is(blocks, STRATA_MOE_EXCHANGE_WORST_CASE);
    setenv("STRATA_MOE_EXCHANGE", "streamed", 1);
    assert_int_equal(strata_moe_recreate(moe, f->comm, NULL, &again), STRATA_OK);
    exchange_is(again, STRATA_MOE_EXCHANGE_STREAMED);
    strata_moe_destroy(again);
    assert_int_equal(strata_moe_recreate(blocks, f->comm, NULL, &again), STRATA_OK);
    exchange_is(again, STRATA_MOE_EXCHANGE_WORST_CASE);
    strata_moe_destroy(again);
    assert_int_equal(strata_moe_create(f->comm, &p, &again), STRATA_OK);
    exchange_is(again, STRATA_MOE_EXCHANGE_STREAMED);
    unsetenv("STRATA_MOE_EXCHANGE");
    strata_moe_destroy(again);
    strata_moe_destroy(blocks);
    strata_moe_destroy(moe);
}

/* An exact step on a host stream: the counts, then the rows packed expert after expert,
 * each expert complete once its wait returns; identity experts, so every result is exact.
 * Inside a capture the call is refused, and the step can still take its rows after it. A
 * recreated object may have more local places than experts: those get no rows. */
static void exact_step(fixture_t *f, strata_moe_t *moe, void *stream)
{
    strata_moe_recv_t recv;
    int32_t counts[4 * EXPERTS], rows;
    float y[TOKENS * TOPK * HIDDEN];
    strata_moe_source_t src[TOKENS * TOPK];
    int64_t total = 0, at = 0;

    assert_int_equal(strata_moe_dispatch(moe, f->x, NULL, f->idx, TOKENS, &recv), STRATA_OK);
    assert_null(recv.x);
    assert_true(recv.num_local_experts <= 4 * EXPERTS);
    assert_int_equal(strata_moe_dispatch_counts(moe, -1, counts), STRATA_OK);
    for (int e = 0; e < recv.num_local_experts; ++e) {
        total += counts[e];
    }
    assert_int_equal(total, TOKENS * TOPK);
    host_stream_set_capturing(stream, true);
    assert_int_equal(strata_moe_dispatch_recv_into(moe, y, NULL, src, total),
                     STRATA_ERR_UNSUPPORTED);
    host_stream_set_capturing(stream, false);
    assert_int_equal(strata_moe_dispatch_recv_into(moe, (char *)y + 4, NULL, src, total),
                     STRATA_ERR_INVALID); /* misaligned: refused, and the call stays open */
    assert_int_equal(strata_moe_dispatch_recv_into(moe, y, NULL, src, total), STRATA_OK);
    for (int e = 0; e < recv.num_local_experts; ++e) {
        assert_int_equal(strata_moe_expert_wait(moe, e, -1, &rows), STRATA_OK);
        assert_int_equal(rows, counts[e]);
        for (int row = 0; row < counts[e]; ++row, ++at) {
            const strata_moe_source_t *s = &src[at];

            assert_int_equal(s->rank, 0);
            assert_int_equal(f->idx[s->token * TOPK + s->slot], strata_moe_expert_id(moe, e));
            assert_memory_equal(&y[at * HIDDEN], &f->x[s->token * HIDDEN],
                                sizeof(float) * HIDDEN);
        }
    }
    memset(f->out, 0xff, sizeof(f->out));
    assert_int_equal(strata_moe_combine(moe, y, f->w, f->out), STRATA_OK); /* identity */
    assert_int_equal(strata_moe_synchronize(moe), STRATA_OK);
    check(f, TOKENS);
}

static void test_exact_receive_on_a_stream(void **state)
{
    fixture_t *f = *state;
    strata_moe_params_t p = exact_params();
    strata_moe_layout_t *layout;
    strata_moe_t *moe;
    void *stream;

    assert_int_equal(strata_moe_create(f->comm, &p, &moe), STRATA_OK);
    assert_int_equal(strata_comm_stream_create(f->comm, &stream), STRATA_OK);
    assert_int_equal(strata_moe_set_stream(moe, stream), STRATA_OK);
    fill(f, TOKENS);
    assert_int_equal(strata_moe_layout_create(moe, f->idx, TOKENS, &layout), STRATA_OK);
    host_stream_set_capturing(stream, true); /* the host waits for each step's counts */
    assert_int_equal(strata_moe_dispatch_send(moe, layout, f->x, NULL), STRATA_ERR_UNSUPPORTED);
    host_stream_set_capturing(stream, false);
    assert_int_equal(strata_moe_synchronize(moe), STRATA_OK); /* the layout's upload ran */
    strata_moe_layout_destroy(layout);
    for (int i = 0; i < 3; ++i) {
        fill(f, TOKENS);
        for (int t = 0; i > 0 && t < TOKENS; ++t) { /* later steps: TOKENS rows at expert 5 */
            f->idx[t * TOPK] = 5;
            f->idx[t * TOPK + 1] = t % 5;
        }
        exact_step(f, moe, stream);
    }
    assert_int_equal(strata_moe_set_stream(moe, NULL), STRATA_OK);
    strata_moe_destroy(moe);
    strata_comm_stream_destroy(f->comm, stream);
}

/* An object that receives exactly is made again so: the recreated one's step delivers
 * every row into the caller's buffers (exact_step checks that its recv has no blocks). */
static void test_recreate_keeps_the_exact_receive(void **state)
{
    fixture_t *f = *state;
    strata_moe_params_t p = exact_params();
    strata_moe_t *old, *moe;
    void *stream;

    assert_int_equal(strata_moe_create(f->comm, &p, &old), STRATA_OK);
    assert_int_equal(strata_moe_recreate(old, f->comm, NULL, &moe), STRATA_OK);
    strata_moe_destroy(old);
    assert_int_equal(strata_comm_stream_create(f->comm, &stream), STRATA_OK);
    assert_int_equal(strata_moe_set_stream(moe, stream), STRATA_OK);
    fill(f, TOKENS);
    exact_step(f, moe, stream);
    assert_int_equal(strata_moe_set_stream(moe, NULL), STRATA_OK);
    strata_moe_destroy(moe);
    strata_comm_stream_destroy(f->comm, stream);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_receive_refusals),
        cmocka_unit_test(test_exact_receive_streams_by_default),
        cmocka_unit_test(test_exact_receive_on_a_stream),
        cmocka_unit_test(test_recreate_keeps_the_exact_receive),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
