/*
 * The proxy's queues of operations waiting to be posted (inter/inter_queue.c): each peer's
 * operations leave in submission order; peers take turns; a peer whose turn ends with
 * operations left (its window full) goes after the others, which overtake it; a push during
 * a turn does not give a peer two turns; clearing empties everything; small writes and
 * reads take the express lane ahead of the rest.
 */
#include "inter/inter_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#define WORLD 4

static inter_queues_t queues;
static inter_op_t ops[16];

static int setup(void **state)
{
    (void)state;
    memset(ops, 0, sizeof(ops));
    return inter_queues_init(&queues, WORLD) == STRATA_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    inter_queues_cleanup(&queues);
    return 0;
}

static inter_op_t *push(int index, int peer)
{
    ops[index].peer = peer;
    inter_queues_push(&queues, &ops[index]);
    return &ops[index];
}

/* Pop everything of peer in its turn, checking the order against expected indices. */
static void drain_turn(int peer, const int *expected, int count)
{
    for (int i = 0; i < count; ++i) {
        assert_ptr_equal(inter_queues_head(&queues, peer), &ops[expected[i]]);
        inter_queues_pop(&queues, peer);
    }
    assert_null(inter_queues_head(&queues, peer));
    inter_queues_end_turn(&queues, peer);
}

static void test_order_and_turns(void **state)
{
    (void)state;
    push(0, 2);
    push(1, 0);
    push(2, 2);
    push(3, 1);
    push(4, 2);
    assert_int_equal(inter_queues_waiting(&queues), 3);
    assert_int_equal(inter_queues_next(&queues), 2); /* turns in the order peers came */
    drain_turn(2, (int[]){0, 2, 4}, 3);
    assert_int_equal(inter_queues_next(&queues), 0);
    drain_turn(0, (int[]){1}, 1);
    assert_int_equal(inter_queues_next(&queues), 1);
    drain_turn(1, (int[]){3}, 1);
    assert_int_equal(inter_queues_waiting(&queues), 0);
    assert_int_equal(inter_queues_next(&queues), -1);
}

/* Peer 0's window is full: its turn ends with its operations kept; peers 1 and 3 go, and
 * peer 0's operations leave later in their order. */
static void test_held_peer_is_overtaken(void **state)
{
    (void)state;
    push(0, 0);
    push(1, 0);
    push(2, 1);
    push(3, 3);
    push(4, 0);
    assert_int_equal(inter_queues_next(&queues), 0);
    inter_queues_end_turn(&queues, 0); /* held: nothing popped */
    assert_int_equal(inter_queues_waiting(&queues), 3);
    assert_int_equal(inter_queues_next(&queues), 1);
    drain_turn(1, (int[]){2}, 1);
    assert_int_equal(inter_queues_next(&queues), 3);
    drain_turn(3, (int[]){3}, 1);
    assert_int_equal(inter_queues_next(&queues), 0);
    drain_turn(0, (int[]){0, 1, 4}, 3);
    assert_int_equal(inter_queues_next(&queues), -1);
}

/* Every peer held: each gets one turn per round, in the same order, round after round. */
static void test_turns_rotate(void **state)
{
    (void)state;
    for (int p = 0; p < WORLD; ++p) {
        push(p, p);
    }
    for (int round = 0; round < 3; ++round) {
        for (int p = 0; p < WORLD; ++p) {
            assert_int_equal(inter_queues_next(&queues), p);
            inter_queues_end_turn(&queues, p);
        }
        assert_int_equal(inter_queues_waiting(&queues), WORLD);
    }
}

/* An operation pushed for a peer during its turn does not give it a second turn. */
static void test_push_during_turn(void **state)
{
    (void)state;
    push(0, 2);
    assert_int_equal(inter_queues_next(&queues), 2);
    push(1, 2);
    assert_int_equal(inter_queues_waiting(&queues), 0);
    inter_queues_pop(&queues, 2);
    inter_queues_end_turn(&queues, 2);
    assert_int_equal(inter_queues_waiting(&queues), 1);
    assert_int_equal(inter_queues_next(&queues), 2);
    drain_turn(2, (int[]){1}, 1);
    assert_int_equal(inter_queues_next(&queues), -1);
    /* Emptied, the peer's queue starts afresh, and its next push enlists it again. */
    push(2, 2);
    assert_ptr_equal(inter_queues_head(&queues, 2), &ops[2]);
    assert_int_equal(inter_queues_waiting(&queues), 1);
}

static void test_clear(void **state)
{
    (void)state;
    push(0, 0);
    push(1, 3);
    assert_int_equal(inter_queues_next(&queues), 0);
    inter_queues_clear(&queues);
    assert_int_equal(inter_queues_waiting(&queues), 0);
    assert_int_equal(inter_queues_next(&queues), -1);
    for (int p = 0; p < WORLD; ++p) {
        assert_null(inter_queues_head(&queues, p));
    }
    push(2, 3);
    assert_int_equal(inter_queues_next(&queues), 3);
    drain_turn(3, (int[]){2}, 1);
}

/* Requests of one small write or read go first, in their own order; sends and large
 * operations after, in theirs: a small send never overtakes (receives match in order). */
static void test_express_lane(void **state)
{
    static const struct { inter_op_kind_t kind; size_t len; } shape[] = {
        {INTER_OP_WRITE, 1u << 20},                /* 0: bulk */
        {INTER_OP_WRITE, 64},                      /* 1: express */
        {INTER_OP_SEND, 64},                       /* 2: a send, small or not: bulk */
        {INTER_OP_READ, INTER_EXPRESS_BYTES},      /* 3: express, the largest */
        {INTER_OP_WRITE, INTER_EXPRESS_BYTES + 1}, /* 4: bulk, the smallest */
        {INTER_OP_WRITE, 8},                       /* 5: express */
    };
    const int expected[] = {1, 3, 5, 0, 2, 4};

    static inter_request_t single = {.num_ops = 1}, paged = {.num_ops = 64};

    (void)state;
    for (int i = 0; i < 6; ++i) {
        ops[i].kind = shape[i].kind;
        ops[i].len  = shape[i].len;
        ops[i].req  = &single;
        push(i, 1);
    }
    /* A small piece of a larger request (a page of a paged write) is bulk. */
    ops[6] = (inter_op_t){.kind = INTER_OP_WRITE, .len = 64, .req = &paged};
    assert_false(inter_op_express(&ops[6]));
    assert_int_equal(inter_queues_next(&queues), 1);
    /* The head's lane continues through next: express ops chain to express ops only. */
    assert_ptr_equal(inter_queues_head(&queues, 1)->next, &ops[3]);
    assert_null(ops[5].next);
    drain_turn(1, expected, 6);
    assert_int_equal(inter_queues_waiting(&queues), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_order_and_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_held_peer_is_overtaken, setup, teardown),
        cmocka_unit_test_setup_teardown(test_turns_rotate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_push_during_turn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_express_lane, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
