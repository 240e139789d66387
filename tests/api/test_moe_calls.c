/*
 * The MoE object's calls on one rank: the host backend refuses a stream it did not make,
 * runs every half to completion without one, and on one of its own streams enqueues the
 * halves and returns (results exact once synchronized); inside a capture (the host stream's
 * stand-in state) what would wait on the host is refused and the object stays usable;
 * strata_moe_dispatch reuses its own layout across steps of different
 * sizes, skipping bad ids (STRATA_ERR_INVALID, the step completed) and refusing a dispatch
 * while a step is in progress; a layout outliving its object is refused by a new object,
 * even one allocated where the old one was; per-expert completion's calls are refused
 * where they must be; strata_moe_recreate's refusals, masks and expert ids; every result
 * is exact.
 */
#include <strata/strata.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "api/src/api_comm.h"
#include "common/log_capture.h"
#include "common/one_rank.h"
#include "intra/host/host_device.h"
#include "scheduler/sched_internal.h"

#include "api/moe_one_rank.h"

/* Identity experts: every output row is its input row; so out[t] = sum of routed w * x[t]. */
static strata_status_t step(fixture_t *f, int n)
{
    strata_moe_recv_t recv = {0};
    strata_status_t status = strata_moe_dispatch(f->moe, f->x, NULL, f->idx, n, &recv);

    if (recv.x == NULL) { /* refused: no step was taken (INVALID also means ids skipped) */
        return status;
    }
    memcpy(recv.expert_y, recv.x, (size_t)recv.num_local_experts * (size_t)recv.capacity *
                                      recv.row_bytes);
    memset(f->out, 0xff, sizeof(f->out));
    {
        strata_status_t combined = strata_moe_combine(f->moe, NULL, f->w, f->out);

        return combined != STRATA_OK ? combined : status;
    }
}

static void test_stream_refused_on_host(void **state)
{
    fixture_t *f = *state;
    int fake;

    assert_int_equal(strata_moe_set_stream(f->moe, &fake), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_set_stream(f->moe, NULL), STRATA_OK);
    assert_int_equal(strata_moe_synchronize(f->moe), STRATA_OK);
    assert_int_equal(strata_moe_set_stream(NULL, NULL), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_synchronize(NULL), STRATA_ERR_INVALID);
}

/* One step on the object's stream: the halves return before their kernels ran. */
static strata_status_t stream_step(fixture_t *f, const strata_moe_layout_t *layout, int n)
{
    strata_moe_recv_t recv = {0};
    strata_status_t status = layout ? strata_moe_dispatch_send(f->moe, layout, f->x, NULL)
                                    : strata_moe_dispatch(f->moe, f->x, NULL, f->idx, n, &recv);

    if (status == STRATA_OK && layout != NULL) {
        status = strata_moe_dispatch_recv(f->moe, &recv);
    }
    if (status == STRATA_OK) {
        status = strata_moe_synchronize(f->moe); /* the experts run on the host here */
    }
    if (status != STRATA_OK) {
        return status;
    }
    memcpy(recv.expert_y, recv.x, (size_t)recv.num_local_experts * (size_t)recv.capacity *
                                      recv.row_bytes);
    memset(f->out, 0xff, sizeof(f->out));
    status = strata_moe_combine(f->moe, NULL, f->w, f->out);
    return status == STRATA_OK ? strata_moe_synchronize(f->moe) : status;
}

static void test_host_streams(void **state)
{
    fixture_t *f = *state;
    void *streams[2];

    for (int i = 0; i < 2; ++i) {
        assert_int_equal(strata_comm_stream_create(f->comm, &streams[i]), STRATA_OK);
    }
    for (int i = 0; i < 6; ++i) { /* the stream changes every step */
        int n = i % 3 == 2 ? 5 : TOKENS;

        assert_int_equal(strata_moe_set_stream(f->moe, streams[i % 2]), STRATA_OK);
        fill(f, n);
        assert_int_equal(stream_step(f, NULL, n), STRATA_OK);
        check(f, n);
    }
    assert_int_equal(strata_moe_set_stream(f->moe, NULL), STRATA_OK);
    for (int i = 0; i < 2; ++i) {
        strata_comm_stream_destroy(f->comm, streams[i]);
    }
    /* A destroyed stream is no stream of the backend. */
    assert_int_equal(strata_moe_set_stream(f->moe, streams[0]), STRATA_ERR_INVALID);
    assert_int_equal(strata_comm_stream_create(NULL, &streams[0]), STRATA_ERR_INVALID);
    assert_int_equal(strata_comm_stream_synchronize(f->comm, NULL), STRATA_ERR_INVALID);
}

/*
 * Inside a capture nothing may wait on the host: strata_moe_synchronize and a new layout
 * (its copy to the device) are refused, a step with a layout made before runs, and once the
 * capture ends the object works as before.
 */
static void test_capture_refusals(void **state)
{
    fixture_t *f = *state;
    strata_moe_layout_t *layout = NULL, *late = NULL;
    void *stream;

    fill(f, TOKENS);
    assert_int_equal(strata_moe_layout_create(f->moe, f->idx, TOKENS, &layout), STRATA_OK);
    assert_int_equal(strata_comm_stream_create(f->comm, &stream), STRATA_OK);
    assert_int_equal(strata_moe_set_stream(f->moe, stream), STRATA_OK);
    host_stream_set_capturing(stream, true);
    log_capture_start();
    assert_int_equal(strata_moe_synchronize(f->moe), STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_moe_layout_create(f->moe, f->idx, TOKENS, &late),
                     STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_moe_dispatch_send(f->moe, layout, f->x, NULL), STRATA_OK);
    assert_int_equal(strata_moe_dispatch_recv(f->moe, &(strata_moe_recv_t){0}), STRATA_OK);
    assert_int_equal(strata_moe_abort_step(f->moe), STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_moe_combine(f->moe, NULL, f->w, f->out), STRATA_OK);
    log_capture_stop();
    assert_true(log_captured("a graph would replay the abort", NULL, NULL));
    assert_true(log_captured("being captured", NULL, NULL));
    assert_true(log_captured("inside a stream capture", NULL, NULL));
    assert_null(late);
    host_stream_set_capturing(stream, false);
    assert_int_equal(strata_moe_synchronize(f->moe), STRATA_OK);
    for (int i = 0; i < 2; ++i) { /* the object is whole: a layout step, then a new layout */
        assert_int_equal(stream_step(f, i == 0 ? layout : NULL, TOKENS), STRATA_OK);
        check(f, TOKENS);
    }
    assert_int_equal(strata_moe_set_stream(f->moe, NULL), STRATA_OK);
    strata_comm_stream_destroy(f->comm, stream);
    strata_moe_layout_destroy(layout);
}

/* Adaptive mode decides each step on the host: a capture of its dispatch is refused before
 * the step starts, and the object steps on once the capture ends. */
static void test_capture_adaptive_refused(void **state)
{
    fixture_t *f = *state, g = *f;
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_FP32, .combine_dtype = STRATA_DTYPE_FP32,
                             .max_tokens = TOKENS, .mode = STRATA_MOE_MODE_ADAPTIVE};
    strata_moe_layout_t *layout = NULL;
    void *stream;

    assert_int_equal(strata_moe_create(f->comm, &p, &g.moe), STRATA_OK);
    fill(&g, TOKENS);
    assert_int_equal(strata_moe_layout_create(g.moe, g.idx, TOKENS, &layout), STRATA_OK);
    assert_int_equal(strata_comm_stream_create(g.comm, &stream), STRATA_OK);
    assert_int_equal(strata_moe_set_stream(g.moe, stream), STRATA_OK);
    host_stream_set_capturing(stream, true);
    log_capture_start();
    assert_int_equal(strata_moe_dispatch_send(g.moe, layout, g.x, NULL), STRATA_ERR_UNSUPPORTED);
    log_capture_stop();
    assert_true(log_captured("adaptive mode", NULL, NULL));
    host_stream_set_capturing(stream, false);
    for (int i = 0; i < 3; ++i) {
        assert_int_equal(stream_step(&g, layout, TOKENS), STRATA_OK);
        check(&g, TOKENS);
    }
    strata_moe_layout_destroy(layout);
    strata_moe_destroy(g.moe);
    strata_comm_stream_destroy(g.comm, stream);
}

static void test_reused_layout_sizes(void **state)
{
    fixture_t *f = *state;
    static const int sizes[] = {TOKENS, 3, 0, 1, TOKENS, 7};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        fill(f, sizes[i]);
        assert_int_equal(step(f, sizes[i]), STRATA_OK);
        check(f, sizes[i]);
    }
    log_capture_start();
    assert_int_equal(step(f, TOKENS + 1), STRATA_ERR_INVALID); /* refused, no step taken */
    log_capture_stop();
    assert_true(log_captured("dispatch of 17 tokens", NULL, NULL));
    fill(f, 5);
    assert_int_equal(step(f, 5), STRATA_OK);
    check(f, 5);
}

static void test_bad_ids_skipped(void **state)
{
    fixture_t *f = *state;

    fill(f, 6);
    f->idx[2 * TOPK + 1] = EXPERTS + 4; /* not an expert */
    f->idx[4 * TOPK + 1] = f->idx[4 * TOPK]; /* twice the same */
    assert_int_equal(step(f, 6), STRATA_ERR_INVALID);
    f->idx[2 * TOPK + 1] = -1;
    f->idx[4 * TOPK + 1] = -1;
    check(f, 6); /* the bad slots were left out, the rest exact */
    fill(f, 6);
    assert_int_equal(step(f, 6), STRATA_OK);
    check(f, 6);
}

static void test_dispatch_during_a_step(void **state)
{
    fixture_t *f = *state;
    strata_moe_recv_t recv;

    fill(f, 4);
    assert_int_equal(strata_moe_dispatch(f->moe, f->x, NULL, f->idx, 4, &recv), STRATA_OK);
    assert_int_equal(strata_moe_dispatch(f->moe, f->x, NULL, f->idx, 2, &recv),
                     STRATA_ERR_INVALID);
    memcpy(recv.expert_y, recv.x, (size_t)recv.num_local_experts * (size_t)recv.capacity *
                                      recv.row_bytes);
    memset(f->out, 0xff, sizeof(f->out));
    assert_int_equal(strata_moe_combine(f->moe, NULL, f->w, f->out), STRATA_OK);
    check(f, 4); /* the step in progress completes */
}

/* abort_step: NULL refused; nothing in progress, nothing done; mid-step, the step ends
 * without writing out, the refusal before it names it, and the next step is exact. */
static void test_abort_step(void **state)
{
    fixture_t *f = *state;
    strata_moe_recv_t recv;

    assert_int_equal(strata_moe_abort_step(NULL), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_abort_step(f->moe), STRATA_OK);
    fill(f, 4);
    assert_int_equal(strata_moe_dispatch(f->moe, f->x, NULL, f->idx, 4, &recv), STRATA_OK);
    log_capture_start();
    assert_int_equal(strata_moe_dispatch(f->moe, f->x, NULL, f->idx, 4, &recv),
                     STRATA_ERR_INVALID);
    log_capture_stop();
    assert_true(log_captured("end it without results with abort_step", NULL, NULL));
    memset(f->out, 0x5a, sizeof(f->out));
    assert_int_equal(strata_moe_abort_step(f->moe), STRATA_OK);
    assert_int_equal(strata_moe_abort_step(f->moe), STRATA_OK);
    for (size_t i = 0; i < sizeof(f->out); ++i) {
        assert_int_equal(((unsigned char *)f->out)[i], 0x5a);
    }
    assert_int_equal(strata_moe_combine_recv(f->moe, f->w, f->out), STRATA_ERR_INVALID);
    fill(f, 4);
    assert_int_equal(step(f, 4), STRATA_OK);
    check(f, 4);
}

/* One step of an object on one rank, identity experts, its results checked. */
static void fresh_step(fixture_t *f, strata_moe_t *moe)
{
    strata_moe_recv_t recv;

    fill(f, TOKENS);
    assert_int_equal(strata_moe_dispatch(moe, f->x, NULL, f->idx, TOKENS, &recv), STRATA_OK);
    assert_int_equal(strata_moe_synchronize(moe), STRATA_OK);
    memcpy(recv.expert_y, recv.x, (size_t)recv.num_local_experts * (size_t)recv.capacity *
                                      recv.row_bytes);
    assert_int_equal(strata_moe_combine(moe, NULL, f->w, f->out), STRATA_OK);
    assert_int_equal(strata_moe_synchronize(moe), STRATA_OK);
    check(f, TOKENS);
}

/*
 * Per-expert completion's calls: refused before any dispatch_recv (on a new object, and
 * between dispatch_send and dispatch_recv of a later step, where the last step's marks
 * would answer), for an expert that is not local, without a place
 * for the count, without a stream or with one that is no stream, on a stream being
 * captured, and once a dispatch of the object was captured; after a dispatch without a
 * stream every expert is complete at once, with the count the recv has.
 */
static void test_expert_wait_calls(void **state)
{
    fixture_t *f = *state;
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_FP32, .combine_dtype = STRATA_DTYPE_FP32,
                             .max_tokens = TOKENS, .mode = STRATA_MOE_MODE_PUSH};
    strata_moe_layout_t *layout;
    strata_moe_recv_t recv;
    strata_moe_t *moe;
    int32_t rows = -1, counts[EXPERTS];
    void *stream;

    assert_int_equal(strata_moe_expert_wait(NULL, 0, 0, &rows), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_dispatch_counts(NULL, 0, counts), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_expert_wait_stream(NULL, 0, NULL), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_create(f->comm, &p, &moe), STRATA_OK);
    log_capture_start();
    assert_int_equal(strata_moe_expert_wait(moe, 0, 0, &rows), STRATA_ERR_INVALID);
    log_capture_stop();
    assert_true(log_captured("expert_wait before dispatch_recv", NULL, NULL));
    assert_int_equal(strata_moe_dispatch_counts(moe, 0, counts), STRATA_ERR_INVALID);

    fresh_step(f, moe); /* a step done: its marks must not answer for the next one */
    fill(f, TOKENS);
    assert_int_equal(strata_moe_layout_create(moe, f->idx, TOKENS, &layout), STRATA_OK);
    assert_int_equal(strata_moe_dispatch_send(moe, layout, f->x, NULL), STRATA_OK);
    assert_int_equal(strata_moe_expert_wait(moe, 0, 0, &rows), STRATA_ERR_INVALID);
    counts[0] = -1;
    log_capture_start();
    assert_int_equal(strata_moe_dispatch_counts(moe, 0, counts), STRATA_ERR_INVALID);
    log_capture_stop();
    assert_true(log_captured("dispatch_counts before dispatch_recv", NULL, NULL));
    assert_int_equal(counts[0], 0); /* zeros unless OK */
    assert_int_equal(strata_moe_dispatch_recv(moe, &recv), STRATA_OK);
    assert_int_equal(strata_moe_dispatch_counts(moe, 0, counts), STRATA_OK);
    for (int e = 0; e < recv.num_local_experts; ++e) {
        assert_int_equal(strata_moe_expert_wait(moe, e, 0, &rows), STRATA_OK);
        assert_int_equal(rows, recv.count[e]);
        assert_int_equal(counts[e], recv.count[e]); /* the default capacity drops nothing */
    }
    assert_int_equal(strata_moe_dispatch_counts(moe, 0, NULL), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_expert_wait(moe, EXPERTS, 0, &rows), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_expert_wait(moe, -1, 0, &rows), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_expert_wait(moe, 0, 0, NULL), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_expert_wait_stream(moe, 0, NULL), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_expert_wait_stream(moe, 0, f), STRATA_ERR_INVALID);
    assert_int_equal(strata_comm_stream_create(f->comm, &stream), STRATA_OK);
    assert_int_equal(strata_moe_expert_wait_stream(moe, EXPERTS, stream), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_expert_wait_stream(moe, 1, stream), STRATA_OK);
    assert_int_equal(strata_comm_stream_synchronize(f->comm, stream), STRATA_OK);
    host_stream_set_capturing(stream, true);
    log_capture_start();
    assert_int_equal(strata_moe_expert_wait_stream(moe, 1, stream), STRATA_ERR_UNSUPPORTED);
    log_capture_stop();
    assert_true(log_captured("an expert wait inside a stream capture", NULL, NULL));
    host_stream_set_capturing(stream, false);
    memcpy(recv.expert_y, recv.x, (size_t)recv.num_local_experts * (size_t)recv.capacity *
                                      recv.row_bytes);
    assert_int_equal(strata_moe_combine(moe, NULL, f->w, f->out), STRATA_OK);
    check(f, TOKENS);

    /* a step captured: the host no longer knows which step the kernels are in */
    assert_int_equal(strata_moe_set_stream(moe, stream), STRATA_OK);
    host_stream_set_capturing(stream, true);
    assert_int_equal(strata_moe_dispatch_send(moe, layout, f->x, NULL), STRATA_OK);
    assert_int_equal(strata_moe_dispatch_recv(moe, &recv), STRATA_OK);
    host_stream_set_capturing(stream, false);
    log_capture_start();
    assert_int_equal(strata_moe_expert_wait(moe, 0, 0, &rows), STRATA_ERR_UNSUPPORTED);
    log_capture_stop();
    assert_true(log_captured("captured in a graph", NULL, NULL));
    assert_int_equal(strata_moe_expert_wait_stream(moe, 0, stream), STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_moe_dispatch_counts(moe, 0, counts), STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_moe_synchronize(moe), STRATA_OK); /* the rows, to copy them */
    memcpy(recv.expert_y, recv.x, (size_t)recv.num_local_experts * (size_t)recv.capacity *
                                      recv.row_bytes);
    assert_int_equal(strata_moe_combine(moe, NULL, f->w, f->out), STRATA_OK);
    assert_int_equal(strata_moe_synchronize(moe), STRATA_OK);
    check(f, TOKENS);
    assert_int_equal(strata_moe_set_stream(moe, NULL), STRATA_OK);
    fresh_step(f, moe); /* the object steps on */
    strata_moe_layout_destroy(layout);
    strata_moe_destroy(moe); /* its wait queue on the stream goes first */
    strata_comm_stream_destroy(f->comm, stream);
}

/* A layout of no tokens needs no topk_idx; a bad count or a missing topk_idx is refused
 * with a line saying which. */
/* Each token's slots naming expert 2 or 5. */
static int masked_in(const fixture_t *f, int t)
{
    int n = 0;

    for (int k = 0; k < TOPK; ++k) {
        n += f->idx[t * TOPK + k] == 2 || f->idx[t * TOPK + k] == 5;
    }
    return n;
}

/* strata_moe_recreate on one rank: its refusals; a map that masks experts 2 and 5 (each
 * token's masked slots reported, for the dispatch's routing and for a layout; the results
 * exact without them; the places in increasing id); the default map on the same
 * communicator, which keeps every expert. */
static void test_recreate(void **state)
{
    fixture_t *f = *state;
    int32_t owner[EXPERTS] = {0, 0, -1, 0, 0, -1, 0, 0}, bad[EXPERTS] = {0, 0, 0, 0, 0, 0, 0, 1};
    const int held[6] = {0, 1, 3, 4, 6, 7};
    strata_moe_t *kept = f->moe, *moe = kept;
    strata_moe_layout_t *layout;
    int32_t masked[TOKENS];
    int64_t slots = -1;

    assert_int_equal(strata_moe_recreate(kept, NULL, NULL, &moe), STRATA_ERR_INVALID);
    log_capture_start();
    assert_int_equal(strata_moe_recreate(kept, f->comm, bad, &moe), STRATA_ERR_INVALID);
    log_capture_stop();
    assert_true(log_captured("expert_owner[7] is 1", "not -1 or a rank (0..0)", NULL));
    assert_null(moe);

    assert_int_equal(strata_moe_recreate(kept, f->comm, owner, &moe), STRATA_OK);
    for (int j = 0; j < 6; ++j) {
        assert_int_equal(strata_moe_expert_id(moe, j), held[j]);
    }
    assert_int_equal(strata_moe_expert_id(moe, 6), -1);
    f->moe = moe;
    fill(f, TOKENS);
    assert_int_equal(step(f, TOKENS), STRATA_OK);
    assert_int_equal(strata_moe_masked(moe, NULL, masked, &slots), STRATA_OK);
    for (int t = 0; t < TOKENS; ++t) {
        assert_int_equal(masked[t], masked_in(f, t));
        slots -= masked[t];
    }
    assert_int_equal(slots, 0);
    assert_int_equal(strata_moe_layout_create(moe, f->idx, TOKENS, &layout), STRATA_OK);
    memset(masked, 0xff, sizeof(masked));
    assert_int_equal(strata_moe_masked(moe, layout, masked, NULL), STRATA_OK);
    for (int t = 0; t < TOKENS; ++t) {
        assert_int_equal(masked[t], masked_in(f, t));
        for (int k = 0; k < TOPK; ++k) { /* what the step summed: the masked slots left out */
            int64_t *id = &f->idx[t * TOPK + k];

            *id = *id == 2 || *id == 5 ? -1 : *id;
        }
    }
    strata_moe_layout_destroy(layout);
    check(f, TOKENS);
    strata_moe_destroy(moe);

    assert_int_equal(strata_moe_recreate(kept, f->comm, NULL, &moe), STRATA_OK);
    f->moe = moe;
    assert_int_equal(strata_moe_expert_id(moe, 7), 7);
    fill(f, TOKENS);
    assert_int_equal(step(f, TOKENS), STRATA_OK);
    check(f, TOKENS);
    assert_int_equal(strata_moe_masked(moe, NULL, NULL, &slots), STRATA_OK);
    assert_int_equal(slots, 0);
    strata_moe_destroy(moe);
    f->moe = kept;
}

/* The fixture's shape on the streamed exchange, capacity 0 (the library's). */
static strata_moe_params_t streamed_params(void)
{
    return (strata_moe_params_t){.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                                 .dtype = STRATA_DTYPE_FP32,
                                 .combine_dtype = STRATA_DTYPE_FP32, .max_tokens = TOKENS,
                                 .expert_alignment = 4,
                                 .exchange = STRATA_MOE_EXCHANGE_STREAMED};
}

/* The exchange an object took travels to its recreation, and so does its capacity (the
 * streamed exchange's default, twice the mean load of 16 x 2 / 8 rows: 8, not the worst
 * case's 16). */
static void test_recreate_keeps_the_exchange(void **state)
{
    fixture_t *f = *state;
    strata_moe_params_t p = streamed_params();
    strata_moe_t *old = NULL, *again = NULL;
    strata_moe_stats_t stats;
    strata_moe_recv_t recv;

    assert_int_equal(strata_moe_create(f->comm, &p, &old), STRATA_OK);
    assert_int_equal(strata_moe_recreate(old, f->comm, NULL, &again), STRATA_OK);
    assert_int_equal(strata_moe_get_stats(again, &stats), STRATA_OK);
    assert_int_equal(stats.exchange, STRATA_MOE_EXCHANGE_STREAMED);
    fill(f, 1);
    assert_int_equal(strata_moe_dispatch(again, f->x, NULL, f->idx, 1, &recv), STRATA_OK);
    assert_int_equal(recv.capacity, 8);
    assert_int_equal(strata_moe_combine(again, NULL, f->w, f->out), STRATA_OK);
    strata_moe_destroy(again);
    strata_moe_destroy(old);
}

/* The capacity a recreated object takes where the first was given 0: worked out again at
 * each recreation (here from STRATA_MOE_CAPACITY_FACTOR, changed between two), not carried
 * from the object before. */
static void test_recreate_works_the_capacity_out_again(void **state)
{
    fixture_t *f = *state;
    strata_moe_params_t p = streamed_params();
    strata_moe_t *moe[3] = {NULL, NULL, NULL};
    strata_moe_recv_t recv;

    assert_int_equal(strata_moe_create(f->comm, &p, &moe[0]), STRATA_OK);
    assert_int_equal(strata_moe_recreate(moe[0], f->comm, NULL, &moe[1]), STRATA_OK);
    setenv("STRATA_MOE_CAPACITY_FACTOR", "0", 1); /* the most an expert can receive */
    assert_int_equal(strata_moe_recreate(moe[1], f->comm, NULL, &moe[2]), STRATA_OK);
    unsetenv("STRATA_MOE_CAPACITY_FACTOR");
    fill(f, 1);
    for (int i = 0; i < 3; ++i) {
        assert_int_equal(strata_moe_dispatch(moe[i], f->x, NULL, f->idx, 1, &recv), STRATA_OK);
        assert_int_equal(recv.capacity, i < 2 ? 8 : TOKENS); /* 2 x the mean load, or all */
        assert_int_equal(strata_moe_combine(moe[i], NULL, f->w, f->out), STRATA_OK);
    }
    for (int i = 2; i >= 0; --i) {
        strata_moe_destroy(moe[i]);
    }
}

static void test_layout_arguments(void **state)
{
    fixture_t *f = *state;
    strata_moe_layout_t *layout = NULL;

    assert_int_equal(strata_moe_layout_create(f->moe, NULL, 0, &layout), STRATA_OK);
    assert_non_null(layout);
    strata_moe_layout_destroy(layout);
    layout = NULL;
    log_capture_start();
    assert_int_equal(strata_moe_layout_create(f->moe, f->idx, TOKENS + 1, &layout),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_layout_create(f->moe, f->idx, -2, &layout), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_layout_create(f->moe, NULL, 3, &layout), STRATA_ERR_INVALID);
    assert_int_equal(step(f, TOKENS + 1), STRATA_ERR_INVALID);
    log_capture_stop();
    assert_null(layout);
    assert_true(log_captured("layout of 17 tokens", "num_tokens must be 0..16", NULL));
    assert_true(log_captured("layout of -2 tokens", "num_tokens must be 0..16", NULL));
    assert_true(log_captured("layout of 3 tokens with a NULL topk_idx", NULL, NULL));
    assert_true(log_captured("dispatch of 17 tokens", "num_tokens must be 0..16", NULL));
    for (int i = 0; i < log_capture.count; ++i) { /* range errors do not blame topk_idx */
        assert_true(strstr(log_capture.lines[i], "tokens:") == NULL ||
                    strstr(log_capture.lines[i], "topk_idx") == NULL);
    }
}

/*
 * A layout outlives its object, and a new object lands at the old one's address (forced
 * here: the layout is made to name the new object's memory, as the allocator may do by
 * itself). dispatch_send refuses the stale layout, the step runs without this rank's
 * tokens, and the new object's own layouts still work.
 */
static void test_layout_of_a_destroyed_object(void **state)
{
    fixture_t *f = *state;
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_FP32, .combine_dtype = STRATA_DTYPE_FP32,
                             .max_tokens = TOKENS, .mode = STRATA_MOE_MODE_PUSH};
    strata_moe_t *old = NULL, *fresh = NULL, *fixture_moe;
    strata_moe_layout_t *stale = NULL;
    strata_moe_recv_t recv = {0};

    fill(f, 4);
    assert_int_equal(strata_moe_create(f->comm, &p, &old), STRATA_OK);
    assert_int_equal(strata_moe_layout_create(old, f->idx, 4, &stale), STRATA_OK);
    strata_moe_destroy(old);
    assert_int_equal(strata_moe_create(f->comm, &p, &fresh), STRATA_OK);
    ((struct strata_moe_layout *)stale)->moe = fresh->sched;
    log_capture_start();
    assert_int_equal(strata_moe_dispatch_send(fresh, stale, f->x, NULL), STRATA_ERR_INVALID);
    log_capture_stop();
    assert_true(log_captured("needs a layout made by this object", NULL, NULL));
    /* The step's status, as every later half of it returns. */
    assert_int_equal(strata_moe_dispatch_recv(fresh, &recv), STRATA_ERR_INVALID);
    for (int e = 0; e < recv.num_local_experts; ++e) {
        assert_int_equal(recv.count[e], 0); /* this rank sent nothing */
    }
    assert_int_equal(strata_moe_combine_send(fresh, NULL), STRATA_OK);
    assert_int_equal(strata_moe_combine_recv(fresh, f->w, f->out), STRATA_ERR_INVALID);
    strata_moe_layout_destroy(stale);
    fill(f, 4); /* the new object's own layouts work */
    fixture_moe = f->moe;
    f->moe      = fresh;
    assert_int_equal(step(f, 4), STRATA_OK);
    check(f, 4);
    f->moe = fixture_moe;
    strata_moe_destroy(fresh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_refused_on_host),
        cmocka_unit_test(test_host_streams),
        cmocka_unit_test(test_capture_refusals),
        cmocka_unit_test(test_capture_adaptive_refused),
        cmocka_unit_test(test_reused_layout_sizes),
        cmocka_unit_test(test_bad_ids_skipped),
        cmocka_unit_test(test_dispatch_during_a_step),
        cmocka_unit_test(test_abort_step),
        cmocka_unit_test(test_expert_wait_calls),
        cmocka_unit_test(test_layout_arguments),
        cmocka_unit_test(test_recreate),
        cmocka_unit_test(test_recreate_keeps_the_exchange),
        cmocka_unit_test(test_recreate_works_the_capacity_out_again),
        cmocka_unit_test(test_layout_of_a_destroyed_object),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
