/*
 * strata_moe_memory_estimate on EP8 to EP256 shapes (8 ranks per node, hidden 7168, bf16,
 * top-8 of 256 experts, decode and prefill token counts), each part checked against a
 * computation written out here from the formula of docs/moe.md "Memory": every array
 * rounded up to 256 bytes, in the heap, the network area and the tables. The object's own
 * figures (stats.memory) are checked against the estimate by the multi-rank test
 * (moe_net_check).
 */
#include "intra/intra.h"
#include "intra/kernels/moe_format.h"
#include "intra/kernels/net_format.h"
#include "util/util_work_ring.h"

#include <strata/strata.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#define ALIGN     256u
#define LOCAL     8
#define HIDDEN    7168
#define EXPERTS   256
#define TOPK      8
#define SPEC      32 /* STRATA_MOE_SPEC_TOKENS' default */
#define RING      1024
#define IMM_KINDS 8 /* immediate kinds per rank: INTRA_NET_IMM_KINDS */

typedef struct shape {
    int world, tokens, capacity;
    strata_moe_route_t route;
    strata_moe_combine_t combine;
    uint64_t window; /* streamed exchange: STRATA_MOE_WINDOW_BYTES; 0: worst-case */
} shape_t;

static uint64_t up(uint64_t n, uint64_t unit)
{
    return (n + unit - 1) / unit * unit;
}

/* One array of n bytes (at least 1), rounded up to the alignment. */
static uint64_t arr(uint64_t n)
{
    return up(n ? n : 1, ALIGN);
}

/* What the formula gives, part by part. */
static strata_moe_memory_t hand(const shape_t *s)
{
    uint64_t W = (uint64_t)s->world, N = W / LOCAL, T = (uint64_t)s->tokens, K = TOPK;
    uint64_t C = (uint64_t)s->capacity, epr = EXPERTS / W, epn = epr * LOCAL;
    uint64_t row = 2 * HIDDEN, y = 2 * HIDDEN, rows = epr * C;
    bool flat = s->route == STRATA_MOE_ROUTE_FLAT;
    bool reduce = s->combine == STRATA_MOE_COMBINE_NODE_REDUCE && N > 1;
    uint64_t P = N == 1 ? 0 : flat ? W - LOCAL : N - 1;
    uint64_t entry = up(4 * (1 + K), 16) + row, aug = T * (1 + P);
    uint64_t entries = T * (P < K ? (P > 0 ? P : 1) : K), mask_words = (EXPERTS + 63) / 64;
    uint64_t header;
    uint64_t board = up(8 * (8 + mask_words), 64), net = 0, heap;
    uint64_t terms = K < (flat ? epr : epn) ? K : (flat ? epr : epn);
    /* streamed: a window's tokens, as many as fit of, per token, 4 entries per peer (round
     * one, overflow, two staging buffers), two buffers of the terms returned to each peer,
     * and two of those returned to it; 1..T; rounds to cover T */
    uint64_t Tw = T, rounds = 1, stagings = 1;
    strata_moe_memory_t m = {0};

    if (s->window > 0 && P > 0) {
        Tw       = s->window / (P * (4 * entry + 2 * terms * y) + 2 * K * y);
        Tw       = Tw < 1 ? 1 : Tw > T ? T : Tw;
        rounds   = (T + Tw - 1) / Tw;
        stagings = rounds > 1 ? 2 : 1;
    }
    /* a header's fields, its modes' bits and, in rounds, a count per expert of a node */
    header = up(sizeof(intra_net_header_t) + 8 * ((epr + 63) / 64) + (rounds > 1 ? 4 * epn : 0),
                64);

    m.expert_rows = up(rows * row, ALIGN) + up(rows * sizeof(intra_moe_source_t), ALIGN) +
                    up(rows * y, ALIGN);
    if (P > 0) {
        m.net_headers   = arr(2 * W * header) + arr(W * 64) + arr(W * header) + arr(W * 64);
        m.net_round_one = arr(P * (Tw < SPEC ? Tw : SPEC) * entry);
        m.net_round_two = arr(P * Tw * entry);
        m.net_staging   = arr(stagings * P * Tw * entry);
        /* out: per peer, T entries of `terms` rows; in: what comes back to the own tokens,
         * one row per token and slot (node-reduce: per entry), and each peer's drop count;
         * streamed: Tw tokens, two buffers of each */
        m.net_returns   = arr(stagings * P * (Tw * terms * y + 16)) +
                          arr(stagings * ((reduce ? entries : Tw * K) * y + P * 16)) +
                          (reduce ? 2 * arr(P * T * K * 4) : 0);
        m.work_ring     = util_work_ring_bytes(RING, 2, (uint32_t)(IMM_KINDS * W));
        net = m.net_headers + m.net_round_one + m.net_round_two + m.net_staging +
              m.net_returns;
        m.tables = arr(sizeof(intra_net_state_t)) + arr(P * sizeof(intra_net_peer_t)) + arr(8) +
                   arr(4 * entries) + arr(8 * T * K) + arr(8 * aug) + arr(8 * aug * K) +
                   arr(8) + arr(8 * mask_words) + 2 * arr(4 * W) +
                   (rounds > 1 ? arr(rounds * (P + 1) * 3 * 8) : 0) + /* each round's record */
                   (rounds > 1 ? arr(4 * epn) : 0); /* and the step's counts */
    }
    /* the intra tier's object for the node's experts, with aug tokens per rank; the rows
     * published for Pull hold one round's (Tw of its own and of each peer's) */
    /* counter, recv_count, landed, expected, round_base and announced per local expert,
     * and marked (8 bytes); pull_cursor, sent_count and step_sent per expert of the node */
    heap = up(up(sizeof(intra_moe_control_t), ALIGN) + up(4 * epr, ALIGN) * 6 +
              up(8 * epr, ALIGN) +
              up(4 * (epn + 1), ALIGN) + up(4 * epn, ALIGN) * 3 + 3 * up(4 * aug * K, ALIGN) +
              up(Tw * (1 + P) * row, ALIGN) + m.expert_rows + (P > 0 ? 0 : aug * K * y), ALIGN) + ALIGN;
    /* the scheduler's parts beside it */
    /* the own tokens' terms: not in rounds, which read them where their owners put them */
    heap += ALIGN + arr(8 * aug) + arr(8 * aug * K) + arr(2 * board) +
            (P > 0 && rounds == 1 ? arr(T * K * y) : 0) + (P > 0 ? arr(net) : 0);
    m.node_rows = heap - m.expert_rows - net;
    m.tables += 2 * arr(8 * T * K) + arr(8 * (P > 0 ? P : 1)) + arr(4 * (P + 1)) +
                arr(4 * entries) + arr(4 * entries * K) +
                (rounds > 1 ? arr(4 * (P + 1) * epn) : 0) + /* the plan's step counts */
                (rows ? rows : 1) * 12 + 4 * epr + 4 +
                16 * epr + 16; /* the completion marks: a step, a row count and the
                                * rows sent per local expert; the count of stream waits
                                * that expired and the counts' step */
    m.total = heap + m.work_ring + m.tables;
    return m;
}

static void check_shape(const shape_t *s)
{
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                             .max_tokens = s->tokens, .capacity = s->capacity,
                             .route = s->route, .combine = s->combine,
                             .exchange = s->window > 0 ? STRATA_MOE_EXCHANGE_STREAMED
                                                       : STRATA_MOE_EXCHANGE_WORST_CASE};
    strata_moe_memory_t want = hand(s), got;
    char window[32];

    print_message("EP%d, %d tokens, capacity %d, %s, %s: %.2f GiB\n", s->world, s->tokens,
                  s->capacity, s->route == STRATA_MOE_ROUTE_FLAT ? "flat" : "hierarchical",
                  s->combine == STRATA_MOE_COMBINE_NODE_REDUCE ? "node-reduce" : "exact",
                  (double)want.total / (1 << 30));
    snprintf(window, sizeof(window), "%llu", (unsigned long long)s->window);
    if (s->window > 0) {
        setenv("STRATA_MOE_WINDOW_BYTES", window, 1);
    }
    assert_int_equal(strata_moe_memory_estimate(&p, s->world, s->world / LOCAL, &got),
                     STRATA_OK);
    unsetenv("STRATA_MOE_WINDOW_BYTES");
    assert_int_equal(got.expert_rows, want.expert_rows);
    assert_int_equal(got.net_headers, want.net_headers);
    assert_int_equal(got.net_round_one, want.net_round_one);
    assert_int_equal(got.net_round_two, want.net_round_two);
    assert_int_equal(got.net_staging, want.net_staging);
    assert_int_equal(got.net_returns, want.net_returns);
    assert_int_equal(got.work_ring, want.work_ring);
    assert_int_equal(got.node_rows, want.node_rows);
    assert_int_equal(got.tables, want.tables);
    assert_int_equal(got.total, want.total);
    assert_int_equal(got.total, got.expert_rows + got.node_rows + got.net_headers +
                                    got.net_round_one + got.net_round_two + got.net_staging +
                                    got.net_returns + got.work_ring + got.tables);
}

/* Capacity twice the mean load of an expert: tokens x world x topk / experts x 2. */
static int mean_x2(int world, int tokens)
{
    return (int)((int64_t)tokens * world * TOPK / EXPERTS * 2);
}

static void test_ep_sizes_hierarchical_exact(void **state)
{
    static const int worlds[] = {8, 16, 32, 64, 256};
    static const int tokens[] = {128, 4096};

    (void)state;
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); ++w) {
        for (size_t t = 0; t < sizeof(tokens) / sizeof(tokens[0]); ++t) {
            shape_t s = {worlds[w], tokens[t], mean_x2(worlds[w], tokens[t]),
                         STRATA_MOE_ROUTE_HIERARCHICAL, STRATA_MOE_COMBINE_EXACT, 0};
            check_shape(&s);
        }
    }
}

static void test_flat_and_node_reduce(void **state)
{
    shape_t flat = {16, 128, mean_x2(16, 128), STRATA_MOE_ROUTE_FLAT, STRATA_MOE_COMBINE_EXACT,
                    0};
    shape_t reduce = {64, 4096, 16384, STRATA_MOE_ROUTE_HIERARCHICAL,
                      STRATA_MOE_COMBINE_NODE_REDUCE, 0};
    shape_t flat256 = {256, 128, mean_x2(256, 128), STRATA_MOE_ROUTE_FLAT,
                       STRATA_MOE_COMBINE_EXACT, 0};

    (void)state;
    check_shape(&flat);
    check_shape(&reduce);
    check_shape(&flat256);
}

/* The target shape of docs/moe.md: the expert blocks are 1.75 GiB per rank. */
static void test_target_expert_blocks(void **state)
{
    shape_t s = {64, 4096, 16384, STRATA_MOE_ROUTE_HIERARCHICAL, STRATA_MOE_COMBINE_EXACT,
                 0};
    strata_moe_memory_t m = hand(&s);

    (void)state;
    check_shape(&s);
    assert_int_equal(m.expert_rows, 4ull * 16384 * (2 * 2 * HIDDEN + 12));
}

/*
 * The streamed exchange: round one, round two, staging and the returns hold a window's
 * tokens, whatever max_tokens and the world (EP64 and EP256 prefill: within the default
 * window), and the heap has no terms of the own tokens;
 * a window smaller than one token's share still takes one token a round; one large enough
 * for every token is a single round, with one staging buffer.
 */
static void test_streamed(void **state)
{
    static const int worlds[] = {16, 64, 256};
    uint64_t window = 256ull << 20;

    (void)state;
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); ++w) {
        shape_t s = {worlds[w], 4096, mean_x2(worlds[w], 4096), STRATA_MOE_ROUTE_HIERARCHICAL,
                     STRATA_MOE_COMBINE_EXACT, window};
        strata_moe_memory_t m = hand(&s);

        check_shape(&s);
        assert_true(m.net_round_one + m.net_round_two + m.net_staging + m.net_returns <=
                    window);
    }
    for (uint64_t small = 1; small < 1u << 20; small *= 37) {
        shape_t s = {64, 128, mean_x2(64, 128), STRATA_MOE_ROUTE_FLAT, STRATA_MOE_COMBINE_EXACT,
                     small};

        check_shape(&s);
    }
    {
        shape_t whole = {16, 128, mean_x2(16, 128), STRATA_MOE_ROUTE_HIERARCHICAL,
                         STRATA_MOE_COMBINE_EXACT, window};
        shape_t worst = whole;

        worst.window = 0;
        check_shape(&whole);
        assert_int_equal(hand(&whole).total, hand(&worst).total);
    }
}

/* STRATA_MOE_NET_MEMORY=bounce: the network area is a pinned host buffer, not in the heap,
 * and the heap holds a stage for the terms being returned (P blocks of T x t rows), counted
 * with the returns. */
static void test_bounce_buffer(void **state)
{
    shape_t s = {64, 4096, 16384, STRATA_MOE_ROUTE_HIERARCHICAL, STRATA_MOE_COMBINE_EXACT,
                 0};
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .max_tokens = s.tokens, .capacity = s.capacity, .route = s.route,
                             .combine = s.combine};
    strata_moe_memory_t heap = hand(&s), got;
    uint64_t stage = arr(7 * (4096ull * TOPK * 2 * HIDDEN + 16)), net;

    (void)state;
    net = heap.net_headers + heap.net_round_one + heap.net_round_two + heap.net_staging +
          heap.net_returns;
    setenv("STRATA_MOE_NET_MEMORY", "bounce", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 64, 8, &got), STRATA_OK);
    unsetenv("STRATA_MOE_NET_MEMORY");
    assert_int_equal(got.net_returns, heap.net_returns + stage);
    assert_int_equal(got.node_rows, heap.node_rows);
    assert_int_equal(got.total, heap.total - arr(net) + stage + net);
}

/* The capacity left at 0 is the most an expert can receive: max_tokens x world. */
static void test_default_capacity(void **state)
{
    shape_t explicit = {16, 128, 128 * 16, STRATA_MOE_ROUTE_HIERARCHICAL,
                        STRATA_MOE_COMBINE_EXACT, 0};
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .max_tokens = 128, .route = STRATA_MOE_ROUTE_HIERARCHICAL,
                             .combine = STRATA_MOE_COMBINE_EXACT};
    strata_moe_memory_t got;

    (void)state;
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 2, &got), STRATA_OK);
    assert_int_equal(got.total, hand(&explicit).total);
}

/* The capacity from the load: F x (max_tokens x topk / experts x world), rounded up, within
 * 1..max_tokens x world; STRATA_MOE_CAPACITY_FACTOR makes it the default. */
static void test_load_capacity(void **state)
{
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .max_tokens = 4096, .route = STRATA_MOE_ROUTE_HIERARCHICAL,
                             .combine = STRATA_MOE_COMBINE_EXACT};
    shape_t twice = {64, 4096, 16384, STRATA_MOE_ROUTE_HIERARCHICAL, STRATA_MOE_COMBINE_EXACT,
                     0};
    strata_moe_memory_t got;
    int capacity = -1;

    (void)state;
    assert_int_equal(strata_moe_load_capacity(&p, 64, 2.0, &capacity), STRATA_OK);
    assert_int_equal(capacity, 16384); /* the mean is 4096 x 8 / 256 x 64 = 8192 */
    assert_int_equal(strata_moe_load_capacity(&p, 64, 1.0001, &capacity), STRATA_OK);
    assert_int_equal(capacity, 8193); /* rounded up */
    assert_int_equal(strata_moe_load_capacity(&p, 64, 1e-9, &capacity), STRATA_OK);
    assert_int_equal(capacity, 1);
    assert_int_equal(strata_moe_load_capacity(&p, 64, 1000.0, &capacity), STRATA_OK);
    assert_int_equal(capacity, 4096 * 64); /* no more than every token of every rank */
    assert_int_equal(strata_moe_load_capacity(&p, 64, 0.0, &capacity), STRATA_OK);
    assert_int_equal(capacity, 0);
    assert_int_equal(strata_moe_load_capacity(&p, 64, -1.0, &capacity), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_load_capacity(&p, 0, 2.0, &capacity), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_load_capacity(NULL, 64, 2.0, &capacity), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_load_capacity(&p, 64, 2.0, NULL), STRATA_ERR_INVALID);

    setenv("STRATA_MOE_CAPACITY_FACTOR", "2", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 64, 8, &got), STRATA_OK);
    assert_int_equal(got.total, hand(&twice).total);
    p.capacity = 100; /* a capacity given wins over the variable */
    assert_int_equal(strata_moe_memory_estimate(&p, 64, 8, &got), STRATA_OK);
    twice.capacity = 100;
    assert_int_equal(got.total, hand(&twice).total);
    setenv("STRATA_MOE_CAPACITY_FACTOR", "-2", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 64, 8, &got), STRATA_ERR_CONFIG);
    setenv("STRATA_MOE_CAPACITY_FACTOR", "two", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 64, 8, &got), STRATA_ERR_CONFIG);
    unsetenv("STRATA_MOE_CAPACITY_FACTOR");
}

/* Capacity 0 on the streamed exchange: twice the mean load unless the variable says
 * otherwise (auto, its default, is that; 0 the most an expert can receive); on the
 * worst-case exchange auto is the most. Both worlds of the prefill shape fit
 * 2.4 GiB, all but the expert rows 512 MiB. */
static void test_streamed_capacity(void **state)
{
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                             .max_tokens = 4096, .route = STRATA_MOE_ROUTE_HIERARCHICAL,
                             .combine = STRATA_MOE_COMBINE_EXACT,
                             .exchange = STRATA_MOE_EXCHANGE_STREAMED};
    static const int worlds[] = {64, 256};
    strata_moe_memory_t got;

    (void)state;
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); ++w) {
        shape_t s = {worlds[w], 4096, mean_x2(worlds[w], 4096), STRATA_MOE_ROUTE_HIERARCHICAL,
                     STRATA_MOE_COMBINE_EXACT, 256ull << 20};

        assert_int_equal(strata_moe_memory_estimate(&p, worlds[w], worlds[w] / LOCAL, &got),
                         STRATA_OK);
        assert_int_equal(got.total, hand(&s).total);
        assert_true(got.total <= (uint64_t)(2.4 * (1 << 30)));
        assert_true(got.total - got.expert_rows <= 512u << 20);
    }
    setenv("STRATA_MOE_CAPACITY_FACTOR", "auto", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 64, 8, &got), STRATA_OK);
    assert_int_equal(got.total, hand(&(shape_t){64, 4096, mean_x2(64, 4096),
                                               STRATA_MOE_ROUTE_HIERARCHICAL,
                                               STRATA_MOE_COMBINE_EXACT, 256ull << 20}).total);
    setenv("STRATA_MOE_CAPACITY_FACTOR", "0", 1);
    assert_int_equal(strata_moe_memory_estimate(&p, 64, 8, &got), STRATA_OK);
    assert_int_equal(got.total, hand(&(shape_t){64, 4096, 4096 * 64,
                                               STRATA_MOE_ROUTE_HIERARCHICAL,
                                               STRATA_MOE_COMBINE_EXACT, 256ull << 20}).total);
    unsetenv("STRATA_MOE_CAPACITY_FACTOR");
    p.exchange = STRATA_MOE_EXCHANGE_WORST_CASE;
    assert_int_equal(strata_moe_memory_estimate(&p, 64, 8, &got), STRATA_OK);
    assert_int_equal(got.total, hand(&(shape_t){64, 4096, 4096 * 64,
                                               STRATA_MOE_ROUTE_HIERARCHICAL,
                                               STRATA_MOE_COMBINE_EXACT, 0}).total);
}

static void test_refusals(void **state)
{
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .max_tokens = 128, .route = STRATA_MOE_ROUTE_FLAT,
                             .combine = STRATA_MOE_COMBINE_EXACT};
    strata_moe_memory_t m;

    (void)state;
    assert_int_equal(strata_moe_memory_estimate(NULL, 16, 2, &m), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 2, NULL), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 0, &m), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 3, &m), STRATA_ERR_INVALID);
    assert_int_equal(strata_moe_memory_estimate(&p, 2, 4, &m), STRATA_ERR_INVALID);
    p.num_experts = 100; /* not a multiple of 16 ranks */
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 2, &m), STRATA_ERR_INVALID);
    p.num_experts = EXPERTS;
    p.combine = STRATA_MOE_COMBINE_NODE_REDUCE; /* needs the hierarchical route */
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 2, &m), STRATA_ERR_UNSUPPORTED);
    p.route = STRATA_MOE_ROUTE_HIERARCHICAL;
    p.exchange = STRATA_MOE_EXCHANGE_STREAMED; /* node-reduce runs in rounds too */
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 2, &m), STRATA_OK);
    p.combine = STRATA_MOE_COMBINE_EXACT;
    setenv("STRATA_MOE_WINDOW_BYTES", "0", 1); /* a window holds at least one token */
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 2, &m), STRATA_ERR_CONFIG);
    unsetenv("STRATA_MOE_WINDOW_BYTES");
    p.exchange = (strata_moe_exchange_t)3;
    p.combine = STRATA_MOE_COMBINE_EXACT;
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 2, &m), STRATA_ERR_INVALID);
    p.exchange = STRATA_MOE_EXCHANGE_DEFAULT;
    p.combine_dtype = STRATA_DTYPE_FP8_E4M3; /* outputs are never fp8 */
    assert_int_equal(strata_moe_memory_estimate(&p, 16, 2, &m), STRATA_ERR_INVALID);
}

/* The estimate reads the STRATA_MOE_* variables; the hand computation assumes defaults. */
static int clear_variables(void **state)
{
    static const char *const names[] = {"STRATA_MOE_ROUTE", "STRATA_MOE_FLAT_TOKENS",
                                        "STRATA_MOE_SPEC_TOKENS", "STRATA_MOE_NET_MEMORY",
                                        "STRATA_MOE_COMBINE", "STRATA_MOE_CAPACITY_FACTOR",
                                        "STRATA_MOE_EXCHANGE", "STRATA_MOE_WINDOW_BYTES"};

    (void)state;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        unsetenv(names[i]);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ep_sizes_hierarchical_exact),
        cmocka_unit_test(test_flat_and_node_reduce),
        cmocka_unit_test(test_target_expert_blocks),
        cmocka_unit_test(test_streamed),
        cmocka_unit_test(test_bounce_buffer),
        cmocka_unit_test(test_default_capacity),
        cmocka_unit_test(test_load_capacity),
        cmocka_unit_test(test_streamed_capacity),
        cmocka_unit_test(test_refusals),
    };

    return cmocka_run_group_tests(tests, clear_variables, NULL);
}
