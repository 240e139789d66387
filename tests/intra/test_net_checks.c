/*
 * The network kernels' checks of what a peer sent (intra/kernels/net_kernels.h, compiled as
 * host C here as in the host backend): a peer's header says where in its returned-terms
 * area this rank's returns go, and an entry says how many terms it has; a hostile or broken
 * peer must not make this rank write outside that area or past its block for the peer, nor
 * send an entry with no term here. Headers and grants must be for this step, with counts
 * and places in range however large the numbers a peer writes (intra/kernels/net_wire.h).
 * A kernel's status lets a failure replace a code the object survives (moe_report), and a
 * round of a streamed step that gave up marks the step's later rounds. In rounds a header's
 * step counts are checked as they are summed, and the owners' sums of them against the
 * rows sent.
 */
#include "intra/kernels/moe_kernels.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#define Y_ROW 256 /* bytes of a returned row */

static intra_moe_args_t args(int node_reduce)
{
    intra_moe_args_t a;

    memset(&a, 0, sizeof(a));
    a.topk              = 4;
    a.y_row_bytes       = Y_ROW;
    a.net.node_reduce   = node_reduce;
    a.net.ret_in_bytes  = 10 * Y_ROW + 2 * INTRA_NET_DROPS_BYTES; /* two peers' drop counts */
    a.net.entry_terms   = 2;
    return a;
}

static void test_returns_inside_the_peers_area(void **state)
{
    intra_moe_args_t a = args(0);
    intra_net_peer_t peer = {.num_terms = 4};

    (void)state;
    peer.ret_at = 0; /* the first block */
    assert_true(net_returns_fit(&a, &peer));
    peer.ret_at = 6 * Y_ROW + INTRA_NET_DROPS_BYTES; /* the last: 4 rows and a count, exactly */
    assert_true(net_returns_fit(&a, &peer));
    peer.ret_at += INTRA_NET_DROPS_BYTES; /* one count further: past the end */
    assert_false(net_returns_fit(&a, &peer));
    peer.ret_at = -INTRA_NET_DROPS_BYTES;
    assert_false(net_returns_fit(&a, &peer));
    peer.ret_at = 8; /* rows are 16-byte aligned */
    assert_false(net_returns_fit(&a, &peer));
    peer.ret_at = (int64_t)a.net.ret_in_bytes + Y_ROW;
    assert_false(net_returns_fit(&a, &peer));
    peer.ret_at = INT64_MAX - 15; /* no wrap-around in the sum */
    assert_false(net_returns_fit(&a, &peer));
}

/* With node-reduce one partial row per entry returns, whatever its terms. */
static void test_node_reduce_counts_entries(void **state)
{
    intra_moe_args_t a = args(1);
    intra_net_peer_t peer = {.num_terms = 40, .recv_push = 6, .recv_pull = 3};

    (void)state;
    peer.ret_at = 0;
    assert_true(net_returns_fit(&a, &peer)); /* 9 rows of the 10 */
    peer.recv_pull = 5;
    assert_false(net_returns_fit(&a, &peer));
}

static void test_entry_records(void **state)
{
    const int32_t two[5] = {7, 0, -1, 3, -1}, three[5] = {7, 0, 1, 3, -1};
    const int32_t none[5] = {7, -1, -1, -1, -1}, far_token[5] = {64, 0, -1, -1, -1};
    const int32_t negative_token[5] = {-1, 0, -1, -1, -1}, far_expert[5] = {7, 0, 4, -1, -1};
    const int32_t below[5] = {7, 0, -2, -1, -1};
    int64_t experts[4];
    int32_t token;

    (void)state;
    /* 64 tokens, 4 experts on this node, at most 2 terms an entry */
    assert_int_equal(net_record_check(two, 4, 64, 4, 2, &token, experts), 2);
    assert_int_equal(token, 7);
    assert_int_equal(experts[0], 0);
    assert_int_equal(experts[1], -1);
    assert_int_equal(experts[2], 3);
    assert_int_equal(net_record_check(three, 4, 64, 4, 2, &token, experts), -1); /* too many */
    assert_int_equal(net_record_check(none, 4, 64, 4, 2, &token, experts), -1); /* never sent */
    assert_int_equal(net_record_check(far_token, 4, 64, 4, 2, &token, experts), -1);
    assert_int_equal(net_record_check(negative_token, 4, 64, 4, 2, &token, experts), -1);
    assert_int_equal(net_record_check(far_expert, 4, 64, 4, 2, &token, experts), -1);
    assert_int_equal(net_record_check(below, 4, 64, 4, 2, &token, experts), -1);
}

static intra_net_header_t header(int32_t push, int32_t pull)
{
    return (intra_net_header_t){.magic = INTRA_NET_HEADER_MAGIC, .step = 5, .num_push = push,
                                .num_pull = pull, .mask_digest = 0xabc};
}

/* Counts that fit max_tokens together, summed without overflow; the step and the modes. */
static void test_headers(void **state)
{
    intra_net_header_t h = header(40, 24);

    (void)state;
    assert_int_equal(net_header_check(&h, 5, 64, 0xabc), NET_WIRE_OK);
    assert_int_equal(net_header_check(&h, 6, 64, 0xabc), NET_WIRE_BAD);
    assert_int_equal(net_header_check(&h, 5, 63, 0xabc), NET_WIRE_BAD);
    assert_int_equal(net_header_check(&h, 5, 64, 0xabd), NET_WIRE_OTHER_MODES);
    h = header(INT32_MAX, 1); /* a 32-bit sum would wrap below max_tokens */
    assert_int_equal(net_header_check(&h, 5, 64, 0xabc), NET_WIRE_BAD);
    h = header(INT32_MAX, INT32_MAX);
    assert_int_equal(net_header_check(&h, 5, 64, 0xabc), NET_WIRE_BAD);
    h = header(-1, 2);
    assert_int_equal(net_header_check(&h, 5, 64, 0xabc), NET_WIRE_BAD);
    h       = header(1, 1);
    h.magic = 0;
    assert_int_equal(net_header_check(&h, 5, 64, 0xabc), NET_WIRE_BAD);
}

/* A first round's step counts: each at least 0, their total within what the peer's tokens
 * can have, no sum past INT32_MAX. */
static void test_header_step_counts(void **state)
{
    int32_t sums[3] = {1, 2, 3};
    const int32_t good[3] = {4, 0, 6}, negative[3] = {5, -1, 7}, huge[3] = {0, 0, INT32_MAX};

    (void)state;
    assert_int_equal(net_header_counts_add(good, 3, 10, sums), 1);
    assert_int_equal(sums[0], 5);
    assert_int_equal(sums[1], 2);
    assert_int_equal(sums[2], 9);
    assert_int_equal(net_header_counts_add(good, 3, 9, sums), 0); /* 10 rows, 9 at most */
    assert_int_equal(net_header_counts_add(negative, 3, 100, sums), 0);
    assert_int_equal(net_header_counts_add(huge, 3, INT64_MAX, sums), 0); /* 9 + INT32_MAX */
}

static intra_net_grant_t grant(int64_t offset, int32_t first, int32_t count)
{
    return (intra_net_grant_t){.magic = INTRA_NET_GRANT_MAGIC, .step = 5, .offset = offset,
                               .first = first, .count = count};
}

/* A grant for our round-two entries (first 3, sending 10), inside 100 overflow entries. */
static void test_grants(void **state)
{
    intra_net_grant_t g = grant(93, 3, 7);

    (void)state;
    assert_true(net_grant_check(&g, 5, 3, 10, 100)); /* the last 7 places, exactly */
    g = grant(94, 3, 7);
    assert_false(net_grant_check(&g, 5, 3, 10, 100));
    g = grant(INT64_MAX, 3, 7); /* offset + count would wrap */
    assert_false(net_grant_check(&g, 5, 3, 10, 100));
    g = grant(0, 3, 8); /* more than we send */
    assert_false(net_grant_check(&g, 5, 3, 10, 100));
    g = grant(0, 3, INT32_MAX); /* first + count would wrap */
    assert_false(net_grant_check(&g, 5, 3, 10, 100));
    g = grant(0, 2, 7); /* not our first round-two entry */
    assert_false(net_grant_check(&g, 5, 3, 10, 100));
    g = grant(0, 3, 0);
    assert_false(net_grant_check(&g, 5, 3, 10, 100));
    g = grant(-1, 3, 1);
    assert_false(net_grant_check(&g, 5, 3, 10, 100));
    g = grant(0, 3, 7);
    assert_false(net_grant_check(&g, 4, 3, 10, 100));
}

/*
 * A kernel's status keeps the first code found, except that a failure of the step replaces
 * a code the object survives: a source that found a dropped term and then an owner that
 * gave up must fail (TIMEOUT at the host), not report the capacity and go on.
 */
static void test_status_failure_over_soft(void **state)
{
    intra_moe_status_t st;

    (void)state;
    memset(&st, 0, sizeof(st));
    moe_report(&st, INTRA_MOE_KERNEL_DROPPED, 3, 1, 0, 0);
    moe_report(&st, INTRA_MOE_KERNEL_GAVE_UP, 5, 2, 1, 0);
    assert_int_equal(st.code, INTRA_MOE_KERNEL_GAVE_UP);
    assert_int_equal(st.value, 5);
    moe_report(&st, INTRA_MOE_KERNEL_WITHHELD, 6, 0, 0, 0); /* soft after a failure */
    moe_report(&st, INTRA_MOE_KERNEL_TIMEOUT, 7, 0, 0, 0);  /* a second failure */
    assert_int_equal(st.code, INTRA_MOE_KERNEL_GAVE_UP);
    assert_int_equal(st.value, 5);
    memset(&st, 0, sizeof(st));
    moe_report(&st, INTRA_MOE_KERNEL_CAPACITY, 1, 0, 0, 9);
    moe_report(&st, INTRA_MOE_KERNEL_TERMS_WITHHELD, 2, 0, 0, 4); /* soft after soft */
    assert_int_equal(st.code, INTRA_MOE_KERNEL_CAPACITY);
    assert_int_equal(st.count, 9);
    moe_report(&st, INTRA_MOE_KERNEL_TERMS_GAVE_UP, 2, -1, -1, 4);
    assert_int_equal(st.code, INTRA_MOE_KERNEL_TERMS_GAVE_UP);
    assert_int_equal(st.count, 4);
}

/*
 * In the rounds of a streamed step a round that gave up marks the later rounds: a source
 * late in round 0 only lets round 1 pass, and the combine, numbered as the step's last
 * round, must still find that the step's rows are not all in. A former step's failure
 * (its last round, two numbers before a later round of this step) is not carried.
 */
static void test_round_carries_failure(void **state)
{
    intra_moe_control_t control;
    const uint64_t first = 41; /* round 0 of the step; rounds 1..3 follow */

    (void)state;
    memset(&control, 0, sizeof(control));
    control.failed_step = first; /* round 0 gave up */
    for (uint64_t round = 1; round <= 3; ++round) {
        moe_round_carry_failure(&control, first + round);
    }
    assert_int_equal(control.failed_step, first + 3); /* the last round: the combine's */
    control.failed_step = first - 1; /* the former step's last round gave up */
    moe_round_carry_failure(&control, first + 1);
    assert_int_equal(control.failed_step, first - 1);
    control.failed_step = 0; /* nothing ever gave up: round 1 of the first step is 2 */
    moe_round_carry_failure(&control, 2);
    assert_int_equal(control.failed_step, 0);
}

/*
 * Whose results of the step a rank takes as missing when it sums or returns terms: the
 * owners that aborted (withheld), those that gave up (withheld, flagged), and every owner,
 * flagged, where this rank itself gave up in the step, waiting in its combine for the
 * owners' results or in its dispatch: what it holds for them then may be a former step's,
 * which it must never return as this step's.
 */
static void test_withheld_ranks(void **state)
{
    intra_moe_control_t control[3];
    intra_moe_args_t a;
    const uint64_t step = 7;
    const uint32_t all = 7u | (7u << MOE_HELD_GAVE_UP);

    (void)state;
    memset(&a, 0, sizeof(a));
    memset(control, 0, sizeof(control));
    a.num_ranks = 3;
    a.rank      = 0;
    a.experts_per_rank = 2;
    for (int r = 0; r < 3; ++r) {
        a.heap[r] = (char *)&control[r];
    }
    control[0].dispatched = step;
    control[0].failed_step = step - 2; /* a former step's: not this one's */
    control[0].combine_failed_step = step - 1;
    assert_int_equal(moe_withheld_ranks(&a), 0);
    control[1].withheld = step; /* rank 1 aborted */
    control[2].withheld = control[2].gave_up = step; /* rank 2 gave up */
    assert_int_equal(moe_withheld_ranks(&a), 6u | (4u << MOE_HELD_GAVE_UP));
    assert_true(moe_withheld(&a, moe_withheld_ranks(&a), 2));       /* expert 2: rank 1 */
    assert_false(moe_held_gave_up(&a, moe_withheld_ranks(&a), 2));
    assert_true(moe_held_gave_up(&a, moe_withheld_ranks(&a), 5));   /* expert 5: rank 2 */
    control[0].combine_failed_step = step; /* its combine gave up on the owners */
    assert_int_equal(moe_withheld_ranks(&a), all);
    control[0].combine_failed_step = step - 1;
    control[0].failed_step = step; /* its dispatch gave up */
    assert_int_equal(moe_withheld_ranks(&a), all);
    assert_int_equal(net_withheld_word(moe_withheld_ranks(&a), 3),
                     (int64_t)(3u | INTRA_NET_DROPS_GAVE_UP));
    assert_int_equal(net_withheld_word(6u, 3), 3); /* aborts alone: not flagged */
}

/*
 * Across nodes in rounds the owner sums its sources' step counts in the step's first round,
 * once every source's counts are in, for the host; the last round checks them against the
 * rows sent and fails the step where they differ; a step whose first round announced
 * nothing is not checked.
 */
static void test_step_counts_announced(void **state)
{
    enum { RANKS = 2, EXPERTS = 4, PER_RANK = 2 };
    enum { SENT = sizeof(intra_moe_control_t), ANNOUNCED = SENT + 64, PART = ANNOUNCED + 64 };
    static char parts[RANKS][PART];
    const int32_t announced_sent[RANKS][EXPERTS] = {{3, 1, 9, 9}, {4, 0, 9, 9}};
    int32_t routed[PER_RANK] = {0, 0}, step_counts[EXPERTS] = {0};
    uint64_t counts_step = 0;
    const uint64_t step = 11;
    intra_moe_control_t *control = (intra_moe_control_t *)parts[0];
    intra_moe_args_t a;

    (void)state;
    memset(&a, 0, sizeof(a));
    memset(parts, 0, sizeof(parts));
    a.num_ranks        = RANKS;
    a.num_experts      = EXPERTS;
    a.experts_per_rank = PER_RANK;
    a.rank             = 0;
    a.heap_offsets.step_sent = SENT;
    a.heap_offsets.announced = ANNOUNCED;
    for (int r = 0; r < RANKS; ++r) {
        a.heap[r] = parts[r];
        memcpy(parts[r] + SENT, announced_sent[r], sizeof(announced_sent[r]));
    }
    a.marks.routed      = routed;
    a.marks.counts_step = &counts_step;
    a.step_counts       = step_counts;
    a.more_rounds       = 1; /* the first of 3 rounds */
    control->counts_flag[0] = step;
    control->counts_flag[1] = step - 1; /* rank 1's counts not in yet */
    moe_announce_counts(&a, step);
    assert_int_equal(counts_step, 0);
    control->counts_flag[1] = step;
    moe_announce_counts(&a, step);
    assert_int_equal(counts_step, step);
    assert_int_equal(routed[0], 7);
    assert_int_equal(routed[1], 1);
    /* the last round, step + 2: rows as announced pass, others fail the step */
    a.more_rounds = 0;
    a.later_round = 1;
    a.round       = 2;
    assert_true(moe_check_announced(&a, 0, 7, step + 2));
    assert_true(moe_check_announced(&a, 1, 1, step + 2));
    assert_int_equal(control->dispatch_status.code, INTRA_MOE_KERNEL_OK);
    /* another step's first round announced: nothing checked, the counts are the last
     * round's to write */
    assert_false(moe_check_announced(&a, 1, 2, step + 5));
    assert_int_equal(control->dispatch_status.code, INTRA_MOE_KERNEL_OK);
    assert_true(moe_check_announced(&a, 1, 2, step + 2));
    assert_int_equal(control->dispatch_status.code, INTRA_MOE_KERNEL_COUNTS);
    assert_int_equal(control->dispatch_status.value, 1);
    assert_int_equal(control->dispatch_status.count, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_returns_inside_the_peers_area),
        cmocka_unit_test(test_node_reduce_counts_entries),
        cmocka_unit_test(test_entry_records),
        cmocka_unit_test(test_headers),
        cmocka_unit_test(test_header_step_counts),
        cmocka_unit_test(test_step_counts_announced),
        cmocka_unit_test(test_grants),
        cmocka_unit_test(test_status_failure_over_soft),
        cmocka_unit_test(test_round_carries_failure),
        cmocka_unit_test(test_withheld_ranks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
