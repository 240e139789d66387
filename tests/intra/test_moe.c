/*
 * Intra-node MoE dispatch/combine on the host backend: 2, 3 and 4 local ranks as processes,
 * every token type, Push, Pull and mixed masks, 120 steps each (40 under the sanitizers),
 * compared with a sequential reference (moe_check.c); capacity overflow, bad expert ids, bad
 * parameters, calls out of order, and a peer that never comes.
 */
#include "moe_check.h"
#include "intra/intra.h"
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

static unsigned test_seed(void)
{
    const char *text = getenv("STRATA_TEST_SEED");
    return text != NULL ? (unsigned)strtoul(text, NULL, 0) : 20261202u;
}

/* Sanitizer builds (STRATA_TEST_QUICK=1, set by CMake), where a step costs ten times as
 * much, run a third of the steps, at least 20: every routing pattern and mask still runs. */
static int test_steps(int steps)
{
    const char *quick = getenv("STRATA_TEST_QUICK");

    return quick != NULL && strcmp(quick, "1") == 0 ? (steps / 3 > 20 ? steps / 3 : 20) : steps;
}

static void run_case(moe_case_t c)
{
    if (moe_check_run(&c) != 0) {
        fail_msg("%d ranks, dtype %d -> %d, scenario %d failed (seed %u; rerun with "
                 "STRATA_TEST_SEED=%u)", c.ranks, (int)c.dtype, (int)c.combine_dtype,
                 (int)c.scenario, c.seed, c.seed);
    }
}

static void run_every_dtype(int ranks, int experts)
{
    static const strata_dtype_t types[][2] = {
        {STRATA_DTYPE_BF16, STRATA_DTYPE_BF16},
        {STRATA_DTYPE_FP16, STRATA_DTYPE_FP16},
        {STRATA_DTYPE_FP32, STRATA_DTYPE_FP32},
        {STRATA_DTYPE_FP8_E4M3, STRATA_DTYPE_BF16},
    };

    for (size_t i = 0; i < UTIL_ARRAY_SIZE(types); ++i) {
        run_case((moe_case_t){.device = "host", .ranks = ranks, .experts = experts, .topk = 4,
                              .hidden = 256, .max_tokens = 40, .steps = test_steps(120),
                              .blocks = 1 + (unsigned)(i + ranks) % 3, /* 1, 2 and 3 */
                              .dtype = types[i][0], .combine_dtype = types[i][1],
                              .seed = test_seed() + (unsigned)(ranks * 10 + (int)i),
                              .scenario = MOE_SCENARIO_EXACT});
    }
}

static void test_two_ranks(void **state)
{
    (void)state;
    run_every_dtype(2, 8);
}

static void test_three_ranks(void **state)
{
    (void)state;
    run_every_dtype(3, 9);
}

static void test_four_ranks(void **state)
{
    (void)state;
    run_every_dtype(4, 16);
}

static void test_capacity_overflow(void **state)
{
    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_ERROR); /* the expected errors */
    run_case((moe_case_t){.device = "host", .ranks = 3, .experts = 6, .topk = 2, .hidden = 64,
                          .max_tokens = 32, .capacity = 5, .steps = test_steps(60),
                          .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_FP32,
                          .seed = test_seed() + 100, .scenario = MOE_SCENARIO_OVERFLOW});
}

/* A step's dispatch in rounds, each with a slice of every rank's tokens (some of them
 * empty): the experts' blocks fill over the rounds, Push and Pull, and what arrives and
 * what combine returns are exactly one dispatch's. */
static void test_dispatch_in_rounds(void **state)
{
    (void)state;
    run_case((moe_case_t){.device = "host", .ranks = 3, .experts = 9, .topk = 4,
                          .hidden = 128, .max_tokens = 40, .steps = test_steps(60),
                          .blocks = 2, .rounds = 3, .dtype = STRATA_DTYPE_BF16,
                          .combine_dtype = STRATA_DTYPE_BF16, .seed = test_seed() + 300,
                          .scenario = MOE_SCENARIO_EXACT});
    run_case((moe_case_t){.device = "host", .ranks = 2, .experts = 8, .topk = 2,
                          .hidden = 256, .max_tokens = 16, .steps = test_steps(40),
                          .blocks = 1, .rounds = 7, .dtype = STRATA_DTYPE_FP8_E4M3,
                          .combine_dtype = STRATA_DTYPE_FP32, .seed = test_seed() + 310,
                          .scenario = MOE_SCENARIO_EXACT});
    /* Rows past capacity: earlier rounds' rows come first, Pull rows in round order. */
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    run_case((moe_case_t){.device = "host", .ranks = 3, .experts = 6, .topk = 2, .hidden = 64,
                          .max_tokens = 32, .capacity = 5, .steps = test_steps(60),
                          .rounds = 4, .dtype = STRATA_DTYPE_BF16,
                          .combine_dtype = STRATA_DTYPE_FP32, .seed = test_seed() + 320,
                          .scenario = MOE_SCENARIO_OVERFLOW});
}

static void test_bad_expert_ids(void **state)
{
    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    run_case((moe_case_t){.device = "host", .ranks = 2, .experts = 4, .topk = 3, .hidden = 32,
                          .max_tokens = 16, .steps = 24, .dtype = STRATA_DTYPE_FP32,
                          .combine_dtype = STRATA_DTYPE_FP32, .seed = test_seed() + 200,
                          .scenario = MOE_SCENARIO_BAD_ID});
}

static const intra_moe_params_t good = {.num_experts = 8, .topk = 2, .hidden = 128,
                                        .dtype = STRATA_DTYPE_BF16,
                                        .combine_dtype = STRATA_DTYPE_BF16, .max_tokens = 16};

static void test_bad_parameters(void **state)
{
    intra_moe_params_t p;

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    assert_true(intra_moe_heap_size(&good, 2) > 0);
    p = good, p.topk = INTRA_MOE_MAX_TOPK + 1;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.topk = 9; /* more than the node's experts: the others are on other nodes */
    assert_true(intra_moe_heap_size(&p, 2) > 0);
    p = good, p.topk = 0;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.hidden = 100; /* 200-byte bf16 rows */
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.hidden = 64, p.dtype = STRATA_DTYPE_FP8_E4M3; /* scales need 128 columns */
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.combine_dtype = STRATA_DTYPE_FP8_E4M3;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.num_experts = 9; /* not a multiple of 2 ranks */
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.dtype = (strata_dtype_t)17;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.max_tokens = 0;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.capacity = -1;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.round_tokens = -1;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.round_tokens = good.max_tokens + 1;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p = good, p.exact = true, p.exact_rounds = -1;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p.exact_rounds = good.max_tokens + 1;
    assert_int_equal(intra_moe_heap_size(&p, 2), 0);
    p.exact_rounds = 3; /* each round's pull offsets kept: 3 x 9 more words */
    assert_true(intra_moe_heap_size(&p, 2) > intra_moe_heap_size(&good, 2));
    p = good, p.round_tokens = 4; /* the rows published for Pull: 12 fewer of 256 bytes */
    assert_int_equal(intra_moe_heap_size(&p, 2), intra_moe_heap_size(&good, 2) - 12 * 256);
    p.round_tokens = good.max_tokens; /* the same as 0 */
    assert_int_equal(intra_moe_heap_size(&p, 2), intra_moe_heap_size(&good, 2));
    assert_int_equal(intra_moe_heap_size(&good, INTRA_MOE_MAX_RANKS + 1), 0);
}

/* One rank alone on the host backend: 16 tokens of 128 bf16 columns, token t to experts
 * 2t % 8 and (2t + 1) % 8 with weight 0.5, and its heap for params p. */
static struct {
    int64_t  idx[16 * 2];
    float    w[16 * 2];
    _Alignas(16) uint16_t x[16 * 128], out[16 * 128];
} g_alone;

static intra_heap_t *alone_heap(const intra_moe_params_t *p, const char *key)
{
    intra_heap_params_t hp = {.device = intra_device_find("host"), .local_rank = 0,
                              .local_size = 1, .size = intra_moe_heap_size(p, 1),
                              .job_key = key, .timeout_ns = UTIL_NSEC_PER_SEC};
    intra_heap_t *heap;

    for (int i = 0; i < 32; ++i) {
        g_alone.idx[i] = i % 8;
        g_alone.w[i]   = 0.5f;
    }
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    assert_int_equal(intra_heap_create(&hp, &heap), STRATA_OK);
    return heap;
}

/* One rank alone: calls out of order and bad arguments are refused, and the object lives on. */
static void test_call_order_and_arguments(void **state)
{
    const int64_t *idx = g_alone.idx;
    const float *w = g_alone.w;
    uint16_t *x = g_alone.x, *out = g_alone.out;
    intra_heap_t *heap = alone_heap(&good, "test-moe-alone");
    intra_moe_recv_t recv;
    intra_moe_t *moe;
    intra_moe_params_t p = good;

    (void)state;
    p.topk = INTRA_MOE_MAX_TOPK + 1;
    assert_int_equal(intra_moe_create(&p, heap, &moe), STRATA_ERR_INVALID);
    assert_int_equal(intra_moe_create(&good, heap, &moe), STRATA_OK);
    assert_int_equal(intra_moe_combine(moe, recv.expert_y = x, w, NULL, out),
                     STRATA_ERR_INVALID); /* combine before dispatch */
    assert_int_equal(intra_moe_dispatch(moe, x, NULL, idx, 17, NULL, &recv), STRATA_ERR_INVALID);
    assert_int_equal(intra_moe_dispatch(moe, (char *)x + 2, NULL, idx, 4, NULL, &recv),
                     STRATA_ERR_INVALID); /* misaligned */
    assert_int_equal(intra_moe_dispatch(moe, x, w, idx, 4, NULL, &recv),
                     STRATA_ERR_INVALID); /* scales for bf16 */
    assert_int_equal(intra_moe_dispatch(moe, x, NULL, idx, 16, NULL, &recv), STRATA_OK);
    assert_int_equal(intra_moe_dispatch(moe, x, NULL, idx, 16, NULL, &recv),
                     STRATA_ERR_INVALID); /* dispatch twice */
    assert_int_equal(intra_moe_combine(moe, recv.expert_y, NULL, NULL, out), STRATA_ERR_INVALID);
    assert_int_equal(intra_moe_combine(moe, recv.expert_y, w, NULL, out), STRATA_OK);
    assert_int_equal(intra_moe_dispatch(moe, x, NULL, idx, 0, NULL, &recv), STRATA_OK);
    assert_int_equal(intra_moe_combine(moe, recv.expert_y, NULL, NULL, NULL), STRATA_OK);
    /* Rounds: 1..max_tokens of them; a step's first round starts at token 0; a round fits;
     * no combine before the last round. */
    assert_int_equal(intra_moe_dispatch_rounds(moe, x, NULL, idx, 16, 0, NULL, &recv),
                     STRATA_ERR_INVALID);
    assert_int_equal(intra_moe_dispatch_rounds(moe, x, NULL, idx, 16, 17, NULL, &recv),
                     STRATA_ERR_INVALID);
    {
        static const int32_t round_counts[8];
        intra_moe_step_t round = {.x = x, .topk_idx = idx, .num_own = 4, .own_base = 4,
                                  .aug_base = 4, .more_rounds = true};

        assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID);
        round.own_base = round.aug_base = 0;
        round.round = 1; /* a step's first round is its round 0 */
        assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID);
        round.round = 0;
        round.step_counts = round_counts; /* step counts need received tokens */
        assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID);
        round.step_counts = NULL;
        assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_OK);
        assert_int_equal(intra_moe_enqueue_combine(moe, recv.expert_y, w, NULL, out),
                         STRATA_ERR_INVALID);
        round.own_base = round.aug_base = 13; /* 13 + 4 > 16 */
        round.more_rounds = false;
        round.round = 1;
        assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID);
        round.own_base = round.aug_base = 4;
        round.round = 0; /* a later round is not round 0 */
        assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID);
        round.round = 1;
        assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_OK);
        assert_int_equal(intra_moe_synchronize(moe), STRATA_OK);
        assert_int_equal(intra_moe_combine(moe, recv.expert_y, w, NULL, out), STRATA_OK);
    }
    assert_int_equal(intra_moe_dispatch_rounds(moe, x, NULL, idx, 16, 16, NULL, &recv),
                     STRATA_OK);
    assert_int_equal(intra_moe_combine(moe, recv.expert_y, w, NULL, out), STRATA_OK);
    intra_moe_destroy(moe);
    intra_heap_destroy(heap);
}

/* An object whose rounds hold 5 tokens: a dispatch of 16 in one round, or in 3 (the last of
 * 6), is refused before anything runs; in 4 rounds, every expert in Pull form, each row
 * arrives from the round's published rows: the token's own. */
static void test_round_tokens(void **state)
{
    intra_moe_params_t p = good;
    const int64_t *idx = g_alone.idx;
    const uint64_t all_pull = 0xff;
    uint16_t *x = g_alone.x;
    intra_heap_t *heap;
    intra_moe_recv_t recv;
    intra_moe_t *moe;

    (void)state;
    p.round_tokens = 5;
    heap = alone_heap(&p, "test-moe-round-tokens");
    for (int i = 0; i < 16 * 128; ++i) {
        x[i] = (uint16_t)(i / 128 * 257 + i % 128 + 1); /* token t's row, its own */
    }
    assert_int_equal(intra_moe_create(&p, heap, &moe), STRATA_OK);
    assert_int_equal(intra_moe_dispatch(moe, x, NULL, idx, 16, &all_pull, &recv),
                     STRATA_ERR_INVALID);
    assert_int_equal(intra_moe_dispatch_rounds(moe, x, NULL, idx, 16, 3, &all_pull, &recv),
                     STRATA_ERR_INVALID); /* rounds of 5, 5 and 6 tokens */
    assert_int_equal(intra_moe_dispatch_rounds(moe, x, NULL, idx, 16, 4, &all_pull, &recv),
                     STRATA_OK);
    for (int e = 0; e < 8; ++e) {
        assert_int_equal(recv.count[e], 4); /* 32 entries over 8 experts */
        for (int row = 0; row < recv.count[e]; ++row) {
            size_t at = (size_t)e * (size_t)recv.capacity + (size_t)row;
            int token = recv.src[at].token;

            assert_true(token >= 0 && token < 16 && idx[token * 2 + recv.src[at].slot] == e);
            assert_memory_equal((const char *)recv.x + at * recv.row_bytes, x + token * 128,
                                recv.row_bytes);
        }
    }
    assert_int_equal(intra_moe_combine(moe, recv.expert_y, g_alone.w, NULL, g_alone.out),
                     STRATA_OK);
    intra_moe_destroy(moe);
    intra_heap_destroy(heap);
}

/* Local rank 1 joins the heap but never dispatches: rank 0 times out, then stays failed. */
static void test_missing_peer_times_out(void **state)
{
    intra_moe_params_t p = good;
    intra_heap_params_t hp = {.device = intra_device_find("host"), .local_size = 2,
                              .size = intra_moe_heap_size(&good, 2), .timeout_ns = 5 * UTIL_NSEC_PER_SEC};
    char key[64];
    static int64_t idx[32];
    static _Alignas(16) uint16_t x[16 * 128];
    intra_moe_recv_t recv;
    intra_heap_t *heap;
    intra_moe_t *moe;
    int pipefd[2], status;
    uint64_t start;
    pid_t child;
    char byte;

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    snprintf(key, sizeof(key), "test-moe-timeout-%d", (int)getpid());
    hp.job_key    = key;
    p.timeout_ns  = 300 * UTIL_NSEC_PER_MSEC;
    assert_int_equal(pipe(pipefd), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        hp.local_rank = 1;
        alarm(30);
        close(pipefd[1]);
        if (intra_heap_create(&hp, &heap) != STRATA_OK || intra_moe_create(&p, heap, &moe)) {
            _exit(1);
        }
        _exit(read(pipefd[0], &byte, 1) == 0 ? 0 : 2); /* wait for the parent's verdict */
    }
    close(pipefd[0]);
    assert_int_equal(intra_heap_create(&hp, &heap), STRATA_OK);
    assert_int_equal(intra_moe_create(&p, heap, &moe), STRATA_OK);
    start = util_clock_now_ns();
    assert_int_equal(intra_moe_dispatch(moe, x, NULL, idx, 16, NULL, &recv), STRATA_ERR_TIMEOUT);
    assert_true(util_clock_now_ns() - start < 3 * UTIL_NSEC_PER_SEC);
    assert_int_equal(intra_moe_dispatch(moe, x, NULL, idx, 16, NULL, &recv), STRATA_ERR_TIMEOUT);
    close(pipefd[1]);
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    intra_moe_destroy(moe);
    intra_heap_destroy(heap);
}

/* An exact object's first dispatch round of 2 for one rank alone: the 4 first tokens of
 * g_alone, none from the network (whose tables a round with step counts still needs). */
static intra_moe_step_t exact_first_round(const int32_t *step_counts)
{
    static int64_t aug_entry[16], aug_topk[16 * 2];
    static int32_t num_tokens = 4;
    static char entries[64];

    return (intra_moe_step_t){.x = g_alone.x, .topk_idx = g_alone.idx, .num_own = 4,
                              .more_rounds = true, .num_tokens_dev = &num_tokens,
                              .entry_base = entries, .aug_entry = aug_entry,
                              .aug_topk = aug_topk, .record_bytes = 16,
                              .step_counts = step_counts};
}

/* The round after it, the step's last: tokens 4..7. */
static void exact_second_round(intra_moe_step_t *round)
{
    round->round       = 1;
    round->own_base    = 4;
    round->aug_base    = 4;
    round->more_rounds = false;
}

/*
 * One rank alone, receiving exactly in 2 rounds: each round comes with the step's counts,
 * the object's number of rounds holds, a later round waits for the round before's load,
 * and combine rounds need an object made for them, its tables and its combine.
 */
static void test_exact_round_order(void **state)
{
    /* tokens 0..7 (4 a round), token t to experts 2t % 8 and (2t + 1) % 8: 2 rows each */
    static const int32_t step_counts[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    intra_moe_params_t p = good;
    intra_heap_t *heap;
    intra_moe_t *moe, *plain;
    intra_moe_step_t round = exact_first_round(NULL);

    (void)state;
    p.exact        = true;
    p.exact_rounds = 2;
    heap = alone_heap(&p, "test-moe-exact-rounds");
    assert_int_equal(intra_moe_create(&p, heap, &moe), STRATA_OK);
    assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID); /* no counts */
    round.step_counts = step_counts;
    round.more_rounds = false; /* a step of 1 round, not 2 */
    assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID);
    round.more_rounds = true;
    assert_int_equal(intra_moe_enqueue_pull_into(moe, NULL, NULL, NULL), STRATA_ERR_INVALID);
    assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_OK);
    exact_second_round(&round);
    assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID); /* no load */
    assert_int_equal(intra_moe_enqueue_combine_round(moe, 0), STRATA_ERR_INVALID);
    /* rows into buffers need the origins the sources are read from: no tables here */
    assert_int_equal(intra_moe_enqueue_pull_into(moe, g_alone.out, NULL,
                                                 (intra_moe_source_t *)g_alone.w),
                     STRATA_ERR_INVALID);
    assert_int_equal(intra_moe_enqueue_pull_into(moe, NULL, NULL, NULL), STRATA_OK);
    assert_int_equal(intra_moe_enqueue_pull_into(moe, NULL, NULL, NULL), STRATA_ERR_INVALID);
    round.more_rounds = true; /* round 1 of 2 is the last */
    assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_ERR_INVALID);
    round.more_rounds = false;
    assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_OK);
    assert_int_equal(intra_moe_enqueue_combine_round(moe, 0), STRATA_ERR_INVALID); /* no combine */
    assert_int_equal(intra_moe_synchronize(moe), STRATA_OK);
    intra_moe_destroy(moe);
    intra_heap_destroy(heap);
    /* an object made for one round a step: no combine rounds */
    heap = alone_heap(&good, "test-moe-exact-plain");
    assert_int_equal(intra_moe_create(&good, heap, &plain), STRATA_OK);
    assert_int_equal(intra_moe_enqueue_combine_round(plain, 0), STRATA_ERR_INVALID);
    intra_moe_destroy(plain);
    intra_heap_destroy(heap);
}

/*
 * One rank alone, receiving exactly in 2 rounds, whose step counts announce one row per
 * expert where each gets two (one a round): the caller's buffers hold the announced 8
 * rows; the second round's rows have no place and are dropped, nothing is written past
 * the buffers, and the step fails (the last round's check of the counts).
 */
static void test_exact_rounds_past_the_counts(void **state)
{
    static const int32_t step_counts[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    _Alignas(16) static uint16_t into[9 * 128];
    static intra_moe_source_t src[9];
    intra_moe_params_t p = good;
    intra_heap_t *heap;
    intra_moe_t *moe;
    intra_moe_step_t round = exact_first_round(step_counts);

    static intra_moe_source_t public_src[8];
    static int32_t public_count[8];
    intra_heap_params_t hp = {.device = intra_device_find("host"), .local_rank = 0,
                              .local_size = 1, .job_key = "test-moe-exact-past",
                              .timeout_ns = UTIL_NSEC_PER_SEC};
    intra_moe_tables_t tables = {.origin_rank = 0, .term_dst_offset = -1,
                                 .public_src = public_src, .public_count = public_count};
    size_t origins;

    (void)state;
    p.exact        = true;
    p.exact_rounds = 2;
    memset(into, 0xa5, sizeof(into));
    memset(src, 0xa5, sizeof(src));
    hp.size = intra_moe_heap_size(&p, 1) + 4096; /* and the origins the loads read */
    assert_int_equal(intra_heap_create(&hp, &heap), STRATA_OK);
    assert_int_equal(intra_moe_create(&p, heap, &moe), STRATA_OK);
    assert_int_equal(intra_heap_alloc(heap, "origins", 16 * 2 * sizeof(int32_t), 256, &origins),
                     STRATA_OK);
    tables.origin_offset = (int64_t)origins;
    assert_int_equal(intra_moe_set_tables(moe, &tables), STRATA_OK);
    assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_OK);
    assert_int_equal(intra_moe_enqueue_pull_into(moe, into, NULL, src), STRATA_OK);
    exact_second_round(&round);
    assert_int_equal(intra_moe_enqueue_dispatch(moe, &round), STRATA_OK);
    assert_int_equal(intra_moe_enqueue_pull_into(moe, into, NULL, src), STRATA_OK);
    assert_int_equal(intra_moe_synchronize(moe), STRATA_ERR_INTERNAL);
    for (int e = 0; e < 8; ++e) { /* round 0's token e / 2, slot e % 2 */
        assert_int_equal(src[e].token, e / 2);
        assert_int_equal(src[e].slot, e % 2);
    }
    for (int i = 0; i < 128; ++i) {
        assert_int_equal(into[8 * 128 + i], 0xa5a5);
    }
    assert_int_equal(src[8].token, (int32_t)0xa5a5a5a5);
    intra_moe_destroy(moe);
    intra_heap_destroy(heap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_parameters),
        cmocka_unit_test(test_call_order_and_arguments),
        cmocka_unit_test(test_exact_round_order),
        cmocka_unit_test(test_exact_rounds_past_the_counts),
        cmocka_unit_test(test_missing_peer_times_out),
        cmocka_unit_test(test_two_ranks),
        cmocka_unit_test(test_three_ranks),
        cmocka_unit_test(test_four_ranks),
        cmocka_unit_test(test_capacity_overflow),
        cmocka_unit_test(test_dispatch_in_rounds),
        cmocka_unit_test(test_round_tokens),
        cmocka_unit_test(test_bad_expert_ids),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
