/*
 * The scale model of strata-tune scale (tools/strata_tune_scale.h) against hand
 * computations: the chance a token reaches a rank or node (and a count of every top-k
 * choice), entry sizes, a 2-node job on both routes and both combine modes, the rail
 * plan's busiest NIC, and the shapes refused.
 */
#include "tools/strata_tune_scale.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define TEST_REL 1e-12

static void assert_close(double value, double expected, const char *what)
{
    double tolerance = TEST_REL * (expected < 0 ? -expected : expected) + 1e-18;

    if (!(value >= expected - tolerance && value <= expected + tolerance)) {
        fail_msg("%s: %.15g, expected %.15g", what, value, expected);
    }
}

/* Every k-subset of E experts, counted: the share that holds one of experts [0, e). */
static double count_any(int experts, int e, int k, int first, int left, bool hit)
{
    double share = 0.0;
    int choices = experts - first;

    if (left == 0) {
        return hit ? 1.0 : 0.0;
    }
    /* The subsets of the remaining experts that take `first` or leave it, each weighted by
     * its share of the choices. */
    if (choices < left) {
        return 0.0;
    }
    share += (double)left / choices * count_any(experts, e, k, first + 1, left - 1,
                                               hit || first < e);
    share += (double)(choices - left) / choices * count_any(experts, e, k, first + 1, left, hit);
    return share;
}

static void test_p_any_by_hand(void **state)
{
    (void)state;
    /* 1 - C(6,2)/C(8,2) = 1 - 15/28; 1 - C(4,2)/C(8,2) = 1 - 6/28; 2 of 4 with 3 held: sure. */
    assert_close(tune_scale_p_any(8, 2, 2), 13.0 / 28.0, "p_any(8, 2, 2)");
    assert_close(tune_scale_p_any(8, 4, 2), 22.0 / 28.0, "p_any(8, 4, 2)");
    assert_close(tune_scale_p_any(4, 3, 2), 1.0, "p_any(4, 3, 2)");
    assert_close(tune_scale_p_any(8, 0, 2), 0.0, "p_any(8, 0, 2)");
    /* Against every top-k choice of small shapes, and DeepSeek-V3's node at EP64 by its
     * closed form 1 - prod (E - e - i) / (E - i) written out: 1 - (224/256)(223/255)... */
    for (int e = 0; e <= 12; e += 3) {
        char what[64];

        snprintf(what, sizeof(what), "p_any(12, %d, 4) against the count", e);
        assert_close(tune_scale_p_any(12, e, 4), count_any(12, e, 4, 0, 4, false), what);
    }
    assert_close(tune_scale_p_any(256, 32, 8),
                 1.0 - (224.0 / 256) * (223.0 / 255) * (222.0 / 254) * (221.0 / 253) *
                           (220.0 / 252) * (219.0 / 251) * (218.0 / 250) * (217.0 / 249),
                 "p_any(256, 32, 8)");
}

static void test_entry_bytes(void **state)
{
    tune_scale_shape_t s = {.hidden = 7168, .topk = 8, .dispatch_bytes = 2};

    (void)state;
    /* record: 9 int32 = 36 -> 48; row 7168 x 2; fp8: 7168 + 56 scales x 4 = 224. */
    assert_close(tune_scale_entry_bytes(&s), 48 + 14336, "bf16 entry");
    s.dispatch_bytes = 1;
    assert_close(tune_scale_entry_bytes(&s), 48 + 7168 + 224, "fp8 entry");
}

/* 2 nodes of 2 ranks, top-2 of 8 experts, 10 tokens, hidden 128 bf16, round one 4. */
static const tune_scale_shape_t test_shape = {
    .world = 4, .ranks_per_node = 2, .experts = 8, .topk = 2, .tokens = 10, .hidden = 128,
    .dispatch_bytes = 2, .combine_bytes = 2, .spec_tokens = 4,
};
/* 1 GB/s NIC, 2 GB/s inside, 1 us a trip across, 0.5 us inside. */
static const tune_scale_fabric_t test_fabric = {
    .nic_Bps = 1e9, .nic_load = 1.0, .intra_Bps = 2e9, .inter_lat_s = 1e-6, .intra_lat_s = 0.5e-6,
};

static void test_two_nodes_flat(void **state)
{
    tune_scale_result_t r;

    (void)state;
    tune_scale_model(&test_shape, &test_fabric, TUNE_ROUTE_FLAT, &r);
    /* Peers: the 2 ranks of the other node, 2 experts each: 10 x 13/28 tokens each, over
     * round one's 4, so 3 trips. Entry 16 + 256 bytes. */
    assert_int_equal(r.nodes, 2);
    assert_close(r.peers, 2, "flat peers");
    assert_close(r.entries_per_peer, 10.0 * 13 / 28, "flat entries per peer");
    assert_close(r.entries, 20.0 * 13 / 28, "flat entries");
    assert_int_equal(r.dispatch_trips, 3);
    assert_close(r.dispatch_nic_bytes, 20.0 * 13 / 28 * 272, "flat dispatch bytes");
    /* 3 trips + bytes / 1 GB/s + the intra flag + 10 x 2 rows of 256 bytes at 2 GB/s. */
    assert_close(r.dispatch_s, 3e-6 + 20.0 * 13 / 28 * 272 / 1e9 + 0.5e-6 + 20 * 256 / 2e9,
                 "flat dispatch time");
    /* Exact: half of the 20 terms are on the other node, 256 bytes each. */
    assert_close(r.remote_terms, 10, "remote terms");
    assert_true(r.combine_ok[TUNE_COMBINE_EXACT]);
    assert_close(r.combine_nic_bytes[TUNE_COMBINE_EXACT], 2560, "exact bytes");
    assert_close(r.combine_s[TUNE_COMBINE_EXACT], 0.5e-6 + 20 * 256 / 2e9 + 1e-6 + 2560 / 1e9,
                 "exact time");
    assert_false(r.combine_ok[TUNE_COMBINE_NODE_REDUCE]); /* refused on the flat route */
}

static void test_two_nodes_hier(void **state)
{
    tune_scale_result_t r;

    (void)state;
    tune_scale_model(&test_shape, &test_fabric, TUNE_ROUTE_HIER, &r);
    /* One peer, the other node's 4 experts: 10 x 22/28 tokens, 3 trips. */
    assert_close(r.peers, 1, "hier peers");
    assert_close(r.entries, 10.0 * 22 / 28, "hier entries");
    assert_int_equal(r.dispatch_trips, 3);
    assert_close(r.dispatch_nic_bytes, 10.0 * 22 / 28 * 272, "hier dispatch bytes");
    assert_close(r.dispatch_s, 3e-6 + 10.0 * 22 / 28 * 272 / 1e9 + 0.5e-6 + 20 * 256 / 2e9,
                 "hier dispatch time");
    /* Exact returns the same terms on either route. */
    assert_close(r.combine_nic_bytes[TUNE_COMBINE_EXACT], 2560, "hier exact bytes");
    /* Node-reduce: per entry 2 fp32 weights out and one 256-byte row back; 2 trips. */
    assert_true(r.combine_ok[TUNE_COMBINE_NODE_REDUCE]);
    assert_close(r.combine_nic_bytes[TUNE_COMBINE_NODE_REDUCE], 10.0 * 22 / 28 * 264,
                 "node-reduce bytes");
    assert_close(r.combine_s[TUNE_COMBINE_NODE_REDUCE],
                 0.5e-6 + 20 * 256 / 2e9 + 2e-6 + 10.0 * 22 / 28 * 264 / 1e9, "node-reduce time");
}

static void test_nic_load_and_round_one(void **state)
{
    tune_scale_shape_t s = test_shape;
    tune_scale_fabric_t f = test_fabric;
    tune_scale_result_t r;

    (void)state;
    /* Two ranks' traffic on one NIC doubles its bytes and their time. */
    f.nic_load = 2.0;
    tune_scale_model(&s, &f, TUNE_ROUTE_HIER, &r);
    assert_close(r.dispatch_nic_bytes, 2 * 10.0 * 22 / 28 * 272, "bytes on a shared NIC");
    assert_close(r.dispatch_s, 3e-6 + 2 * 10.0 * 22 / 28 * 272 / 1e9 + 0.5e-6 + 20 * 256 / 2e9,
                 "time on a shared NIC");
    assert_close(r.combine_s[TUNE_COMBINE_EXACT], 0.5e-6 + 20 * 256 / 2e9 + 1e-6 + 2 * 2560 / 1e9,
                 "exact combine on a shared NIC");
    assert_close(r.combine_s[TUNE_COMBINE_NODE_REDUCE],
                 0.5e-6 + 20 * 256 / 2e9 + 2e-6 + 2 * 10.0 * 22 / 28 * 264 / 1e9,
                 "node-reduce on a shared NIC");
    /* When a peer's tokens fit round one more often than not, one trip: 10 tokens, each
     * to the peer with chance 22/28, more than 8 with chance 10 p^9 q + p^10 = 0.3342. */
    s.spec_tokens = 8;
    assert_close(tune_scale_round_two_chance(10, 22.0 / 28, 8, 1), 0.33422402601963785,
                 "one peer over 8");
    tune_scale_model(&s, &test_fabric, TUNE_ROUTE_HIER, &r);
    assert_int_equal(r.dispatch_trips, 1);
    assert_close(tune_scale_round_two_chance(10, 22.0 / 28, 8, 2), 0.5567423524705002,
                 "two peers");
    /* 4 nodes of 2 experts: 3 peers, each token to one with chance 13/28, 4.64 on average,
     * within round one's 5; but more than 5 with chance 0.2928 each, for one of the three
     * 1 - (1 - 0.2928)^3 = 0.6463: three trips. */
    s.world       = 8;
    s.spec_tokens = 5;
    assert_close(tune_scale_round_two_chance(10, 13.0 / 28, 5, 3), 0.6462538567951148,
                 "three peers");
    tune_scale_model(&s, &test_fabric, TUNE_ROUTE_HIER, &r);
    assert_close(r.peers, 3, "four nodes' peers");
    assert_close(r.entries_per_peer, 10.0 * 13 / 28, "four nodes' entries");
    assert_int_equal(r.dispatch_trips, 3);
    s.world = 4;
    /* One node: nothing crosses, both routes the intra part only. */
    s.world = 2;
    tune_scale_model(&s, &test_fabric, TUNE_ROUTE_FLAT, &r);
    assert_int_equal(r.nodes, 1);
    assert_int_equal(r.dispatch_trips, 0);
    assert_close(r.dispatch_nic_bytes, 0, "one node's bytes");
    assert_close(r.dispatch_s, 0.5e-6 + 20 * 256 / 2e9, "one node's dispatch");
    assert_close(r.combine_s[TUNE_COMBINE_EXACT], 0.5e-6 + 20 * 256 / 2e9, "one node's combine");
}

static void test_rail_plan_load(void **state)
{
    /* 8 GPUs on 4 NICs, two to a NIC: load 2. Then GPU 0 on rails {0, 1} and GPU 1 on {1}:
     * NIC 1 carries half of GPU 0 and all of GPU 1. */
    int pairs[8][1] = {{0}, {0}, {1}, {1}, {2}, {2}, {3}, {3}};
    int both[2] = {0, 1}, one[1] = {1};
    topo_rail_t rails[8];
    double load = -1.0;
    topo_rail_plan_t plan = {.num_gpus = 8, .rails = rails};

    (void)state;
    for (int g = 0; g < 8; ++g) {
        rails[g] = (topo_rail_t){.gpu = g, .num_rails = 1, .num_nics = 1, .nics = pairs[g]};
    }
    assert_int_equal(tune_scale_nic_load(&plan, 4, &load), STRATA_OK);
    assert_close(load, 2.0, "two GPUs per NIC");
    rails[0] = (topo_rail_t){.gpu = 0, .num_rails = 2, .num_nics = 2, .nics = both};
    rails[1] = (topo_rail_t){.gpu = 1, .num_rails = 1, .num_nics = 1, .nics = one};
    plan.num_gpus = 2;
    assert_int_equal(tune_scale_nic_load(&plan, 4, &load), STRATA_OK);
    assert_close(load, 1.5, "a GPU on two rails");
    plan.num_gpus = 0;
    assert_int_equal(tune_scale_nic_load(&plan, 4, &load), STRATA_OK);
    assert_close(load, 0.0, "no GPU");
}

static void test_fabric_from_defaults(void **state)
{
    adapt_model_t model;
    tune_scale_fabric_t f;

    (void)state;
    adapt_model_default(&model);
    tune_scale_fabric_from_model(&model, 1.0, &f);
    assert_close(f.nic_Bps, 45e9, "NIC");
    assert_close(f.intra_Bps, 150e9, "intra");
    assert_close(f.inter_lat_s, 3e-6, "half of 6 us");
    assert_close(f.intra_lat_s, 0.5e-6, "half of 1 us");
}

static void test_check(void **state)
{
    char err[TUNE_SCALE_ERR_LEN];
    tune_scale_shape_t s = {
        .world = 12, .ranks_per_node = 8, .experts = 96, .topk = 8, .tokens = 128,
        .hidden = 7168, .dispatch_bytes = 2, .combine_bytes = 2, .spec_tokens = 32,
    };

    (void)state;
    assert_false(tune_scale_check(&s, err));
    assert_string_equal(err, "EP 12 is not a whole number of 8-rank nodes");
    s.world = 64;
    assert_false(tune_scale_check(&s, err));
    assert_string_equal(err, "96 experts do not divide among EP 64 ranks");
    s.world = 4; /* below a node: one node of 4 */
    assert_true(tune_scale_check(&s, err));
    s.topk = 97;
    assert_false(tune_scale_check(&s, err));
    s.topk = 8;
    s.dispatch_bytes = 1;
    s.hidden = 100;
    assert_false(tune_scale_check(&s, err));
    assert_non_null(strstr(err, "fp8"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p_any_by_hand),
        cmocka_unit_test(test_entry_bytes),
        cmocka_unit_test(test_two_nodes_flat),
        cmocka_unit_test(test_two_nodes_hier),
        cmocka_unit_test(test_nic_load_and_round_one),
        cmocka_unit_test(test_rail_plan_load),
        cmocka_unit_test(test_fabric_from_defaults),
        cmocka_unit_test(test_check),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
