/*
 * The plan a MoE step runs on (scheduler/sched_plan.c, the code the library runs): per
 * peer, the tokens that cross the network to it and the expert ids they carry, and the
 * slots served on this rank's node, checked against a brute-force reference on seeded
 * random routing, for every rank of several worlds, both routes, and two ways of placing
 * ranks on nodes; a plan refilled in place equals a fresh one; bad ids refused or cleaned.
 */
#include "scheduler/sched_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/log_capture.h"

#define MAX_TOKENS 64
#define MAX_WORLD  8

typedef struct world {
    int rank_node[MAX_WORLD], rank_local[MAX_WORLD];
    sched_moe_world_t w;
    strata_moe_params_t p;
} world_t;

/* nodes x local ranks; strided: rank r on node r % nodes (else r / local). */
static void make_world(world_t *wd, int nodes, int local, int rank, int experts, int topk,
                       bool strided)
{
    memset(wd, 0, sizeof(*wd));
    for (int r = 0; r < nodes * local; ++r) {
        wd->rank_node[r]  = strided ? r % nodes : r / local;
        wd->rank_local[r] = strided ? r / nodes : r % local;
    }
    wd->w = (sched_moe_world_t){.rank = rank, .world_size = nodes * local, .num_nodes = nodes,
                                .rank_node = wd->rank_node, .rank_local = wd->rank_local};
    wd->p = (strata_moe_params_t){.num_experts = experts, .topk = topk, .hidden = 64,
                                  .dtype = STRATA_DTYPE_BF16,
                                  .combine_dtype = STRATA_DTYPE_BF16, .max_tokens = MAX_TOKENS};
}

/* Reference: the peer rank of expert e for this rank, or -1 on its own node. */
static int ref_peer_rank(const world_t *wd, strata_moe_route_t route, int e)
{
    int per = wd->p.num_experts / wd->w.world_size, owner = e / per, me = wd->w.rank;

    if (wd->rank_node[owner] == wd->rank_node[me]) {
        return -1;
    }
    if (route == STRATA_MOE_ROUTE_FLAT) {
        return owner;
    }
    for (int r = 0; r < wd->w.world_size; ++r) {
        if (wd->rank_node[r] == wd->rank_node[owner] && wd->rank_local[r] == wd->rank_local[me]) {
            return r;
        }
    }
    return -2;
}

static int ref_local_id(const world_t *wd, int e)
{
    int per = wd->p.num_experts / wd->w.world_size;

    return wd->rank_local[e / per] * per + e % per;
}

/* The plan against the reference, entry by entry. */
static void check_plan(const world_t *wd, const sched_geometry_t *geo, const sched_plan_t *plan,
                       const int64_t *idx, int n)
{
    int topk = wd->p.topk, entries = 0;

    for (int t = 0; t < n; ++t) {
        for (int k = 0; k < topk; ++k) {
            int64_t e = idx[t * topk + k];
            int64_t want = (e >= 0 && ref_peer_rank(wd, geo->route, (int)e) < 0)
                               ? ref_local_id(wd, (int)e) : -1;

            assert_int_equal(plan->node_idx[t * topk + k], want);
        }
    }
    for (int p = 0; p < geo->num_peers; ++p) {
        int peer = geo->peers[p], entry = plan->peer_first[p];
        int64_t terms = 0;

        for (int t = 0; t < n; ++t) {
            bool hit = false;

            for (int k = 0; k < topk; ++k) {
                int64_t e = idx[t * topk + k];
                hit = hit || (e >= 0 && ref_peer_rank(wd, geo->route, (int)e) == peer);
            }
            if (!hit) {
                continue;
            }
            assert_true(entry < plan->peer_first[p + 1]);
            assert_int_equal(plan->tokens[entry], t);
            for (int k = 0; k < topk; ++k) {
                int64_t e = idx[t * topk + k];
                bool here = e >= 0 && ref_peer_rank(wd, geo->route, (int)e) == peer;

                assert_int_equal(plan->experts[entry * topk + k],
                                 here ? ref_local_id(wd, (int)e) : -1);
                terms += here;
            }
            ++entry;
        }
        assert_int_equal(entry, plan->peer_first[p + 1]);
        assert_int_equal(plan->peer_terms[p], terms);
        entries += plan->peer_first[p + 1] - plan->peer_first[p];
    }
    assert_int_equal(plan->num_entries, entries);
    assert_true(plan->num_entries <= geo->max_entries);
}

/* Distinct experts per token, some slots -1, skewed toward low ids. */
static void random_routing(const strata_moe_params_t *p, int64_t *idx, int n, unsigned *seed)
{
    for (int t = 0; t < n; ++t) {
        for (int k = 0; k < p->topk; ++k) {
            int64_t e;
            bool dup;

            do {
                e = (rand_r(seed) % 8 == 0) ? -1
                    : (rand_r(seed) % 2) ? rand_r(seed) % (p->num_experts / 2 + 1)
                                         : rand_r(seed) % p->num_experts;
                dup = false;
                for (int j = 0; j < k; ++j) {
                    dup = dup || (e >= 0 && idx[t * p->topk + j] == e);
                }
            } while (dup);
            idx[t * p->topk + k] = e;
        }
    }
}

static void test_random_against_reference(void **state)
{
    static const int shapes[][4] = {{2, 2, 8, 3}, {3, 2, 12, 4}, {2, 4, 16, 6}, {4, 2, 16, 5},
                                    {1, 4, 8, 2}};
    int64_t idx[MAX_TOKENS * 8];
    unsigned seed = 20261203;

    (void)state;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
        for (int strided = 0; strided < 2; ++strided) {
            for (int route = 1; route <= 2; ++route) {
                for (int rank = 0; rank < shapes[s][0] * shapes[s][1]; ++rank) {
                    world_t wd;
                    sched_geometry_t geo;
                    sched_plan_t plan = {0};
                    int n = 1 + rand_r(&seed) % MAX_TOKENS;

                    make_world(&wd, shapes[s][0], shapes[s][1], rank, shapes[s][2],
                               shapes[s][3], strided);
                    assert_int_equal(sched_geometry_init(&geo, &wd.p, &wd.w,
                                                         (strata_moe_route_t)route, 4),
                                     STRATA_OK);
                    random_routing(&wd.p, idx, n, &seed);
                    assert_int_equal(sched_plan_build(&geo, idx, n, false, &plan), STRATA_OK);
                    assert_int_equal(plan.capacity, plan.num_entries > 0 ? plan.num_entries : 1);
                    check_plan(&wd, &geo, &plan, idx, n);
                    sched_plan_release(&plan);
                    sched_geometry_cleanup(&geo);
                }
            }
        }
    }
}

/* One token with three experts on one remote node: once per node (hierarchical), once per
 * rank (flat). */
static void test_dedup_example(void **state)
{
    int64_t idx[3] = {4, 5, 7}; /* 2 experts per rank: ranks 2, 2, 3, all on node 1 */
    world_t wd;
    sched_geometry_t geo;
    sched_plan_t plan = {0};

    (void)state;
    make_world(&wd, 2, 2, 0, 8, 3, false);
    assert_int_equal(sched_geometry_init(&geo, &wd.p, &wd.w, STRATA_MOE_ROUTE_HIERARCHICAL, 4),
                     STRATA_OK);
    assert_int_equal(sched_plan_build(&geo, idx, 1, false, &plan), STRATA_OK);
    assert_int_equal(geo.num_peers, 1);
    assert_int_equal(plan.num_entries, 1);
    assert_int_equal(plan.peer_terms[0], 3);
    sched_plan_release(&plan);
    sched_geometry_cleanup(&geo);
    memset(&plan, 0, sizeof(plan));
    assert_int_equal(sched_geometry_init(&geo, &wd.p, &wd.w, STRATA_MOE_ROUTE_FLAT, 4), STRATA_OK);
    assert_int_equal(sched_plan_build(&geo, idx, 1, false, &plan), STRATA_OK);
    assert_int_equal(geo.num_peers, 2);
    assert_int_equal(plan.num_entries, 2);
    assert_int_equal(plan.peer_terms[0] + plan.peer_terms[1], 3);
    sched_plan_release(&plan);
    sched_geometry_cleanup(&geo);
}

/* The reused plan (arrays sized once for the most entries) refilled step after step gives
 * what a fresh plan gives. */
static void test_refill_in_place(void **state)
{
    int64_t idx[MAX_TOKENS * 6];
    unsigned seed = 77;
    world_t wd;
    sched_geometry_t geo;
    sched_plan_t reused = {0};

    (void)state;
    make_world(&wd, 3, 2, 1, 12, 6, false);
    assert_int_equal(sched_geometry_init(&geo, &wd.p, &wd.w, STRATA_MOE_ROUTE_FLAT, 4),
                     STRATA_OK);
    reused.capacity   = geo.max_entries;
    reused.clean_idx  = malloc(sizeof(int64_t) * MAX_TOKENS * 6);
    reused.node_idx   = malloc(sizeof(int64_t) * MAX_TOKENS * 6);
    reused.peer_first = calloc((size_t)geo.num_peers + 1, sizeof(int32_t));
    reused.peer_terms = calloc((size_t)geo.num_peers, sizeof(int64_t));
    reused.tokens     = malloc(sizeof(int32_t) * (size_t)geo.max_entries);
    reused.experts    = malloc(sizeof(int32_t) * (size_t)geo.max_entries * 6);
    for (int step = 0; step < 20; ++step) {
        int n = step % 5 == 0 ? MAX_TOKENS : 1 + rand_r(&seed) % MAX_TOKENS;

        random_routing(&wd.p, idx, n, &seed);
        assert_int_equal(sched_plan_build(&geo, idx, n, false, &reused), STRATA_OK);
        check_plan(&wd, &geo, &reused, idx, n);
    }
    sched_plan_release(&reused);
    sched_geometry_cleanup(&geo);
}

static void test_bad_input(void **state)
{
    int64_t out_of_range[4] = {0, 8, -1, 2}, repeated[4] = {1, -1, 2, 2};
    world_t wd;
    sched_geometry_t geo;
    sched_plan_t plan = {0};

    (void)state;
    make_world(&wd, 2, 2, 0, 8, 2, false);
    assert_int_equal(sched_geometry_init(&geo, &wd.p, &wd.w, STRATA_MOE_ROUTE_FLAT, 4), STRATA_OK);
    assert_int_equal(sched_plan_build(&geo, out_of_range, 2, false, &plan), STRATA_ERR_INVALID);
    sched_plan_release(&plan);
    memset(&plan, 0, sizeof(plan));
    assert_int_equal(sched_plan_build(&geo, repeated, 2, false, &plan), STRATA_ERR_INVALID);
    sched_plan_release(&plan);
    memset(&plan, 0, sizeof(plan));
    assert_int_equal(sched_plan_build(&geo, NULL, 2, false, &plan), STRATA_ERR_INVALID);
    assert_int_equal(sched_plan_build(&geo, repeated, MAX_TOKENS + 1, false, &plan),
                     STRATA_ERR_INVALID);
    /* Skipping: the plan is made, bad slots cleared, and the step told. */
    assert_int_equal(sched_plan_build(&geo, out_of_range, 2, true, &plan), STRATA_ERR_INVALID);
    assert_true(plan.had_bad_ids);
    assert_int_equal(plan.clean_idx[1], -1);
    assert_int_equal(plan.clean_idx[0], 0);
    assert_int_equal(plan.clean_idx[3], 2);
    sched_plan_release(&plan);
    sched_geometry_cleanup(&geo);
}

/* Every token's ids bad: one line for the call, with the count and the first few. */
static void test_many_bad_ids_one_line(void **state)
{
    int64_t ids[2 * MAX_TOKENS];
    world_t wd;
    sched_geometry_t geo;
    sched_plan_t plan = {0};

    (void)state;
    for (int i = 0; i < 2 * MAX_TOKENS; ++i) {
        ids[i] = 99;
    }
    make_world(&wd, 2, 2, 0, 8, 2, false);
    assert_int_equal(sched_geometry_init(&geo, &wd.p, &wd.w, STRATA_MOE_ROUTE_FLAT, 4), STRATA_OK);
    log_capture_start();
    assert_int_equal(sched_plan_build(&geo, ids, MAX_TOKENS, true, &plan), STRATA_ERR_INVALID);
    log_capture_stop();
    assert_int_equal(log_capture.count, 1);
    assert_non_null(strstr(log_capture.lines[0], "layout: 128 topk_idx entries skipped"));
    assert_non_null(strstr(log_capture.lines[0], "the first: [0][0] = 99, [0][1] = 99, "
                                                 "[1][0] = 99, [1][1] = 99, ..."));
    sched_plan_release(&plan);
    sched_geometry_cleanup(&geo);
}

static void test_clean_token(void **state)
{
    int64_t ids[4] = {3, 3, 99, -1};
    sched_bad_ids_t bad = {0};

    (void)state;
    assert_int_equal(sched_token_clean(8, 4, ids, 0, &bad), STRATA_ERR_INVALID);
    assert_int_equal(bad.count, 2);
    assert_string_equal(bad.first, "[0][1] = 3, [0][2] = 99");
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], -1);
    assert_int_equal(ids[2], -1);
    assert_int_equal(ids[3], -1);
    assert_int_equal(sched_token_check(8, 4, ids, 0), STRATA_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test(test_dedup_example),
        cmocka_unit_test(test_refill_in_place),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_many_bad_ids_one_line),
        cmocka_unit_test(test_clean_token),
    };

    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
