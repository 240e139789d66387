/*
 * The network kernels' checks of what a peer sent (intra/kernels/net_kernels.h, compiled as
 * host C here as in the host backend): a peer's header says where in its returned-terms
 * area this rank's returns go, and an entry says how many terms it has; a hostile or broken
 * peer must not make this rank write outside that area or past its block for the peer, nor
 * send an entry with no term here.
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

static void test_entry_terms(void **state)
{
    intra_moe_args_t a = args(0);
    int32_t two[5] = {7, 0, -1, 3, -1}, three[5] = {7, 0, 1, 3, -1}, none[5] = {7, -1, -1, -1, -1};

    (void)state;
    assert_true(net_entry_terms_fit(&a, two));
    assert_false(net_entry_terms_fit(&a, three)); /* more than the block has rows for */
    assert_false(net_entry_terms_fit(&a, none));  /* nothing for this node: never sent */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_returns_inside_the_peers_area),
        cmocka_unit_test(test_node_reduce_counts_entries),
        cmocka_unit_test(test_entry_terms),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
