/*
 * How many receive buffers a rail posts: the fixed pool where only messages use them, and,
 * where every landing immediate consumes one (FI_RX_CQ_DATA), as many as the endpoint
 * holds, within the memory bound and never fewer than the fixed pool.
 */
#include "inter/inter_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define SLOT (65536 + sizeof(inter_msg_header_t)) /* the default message and its header */

static void test_messages_only(void **state)
{
    (void)state;
    assert_int_equal(inter_rx_pool_slots(false, 8192, SLOT), INTER_RX_SLOTS);
    assert_int_equal(inter_rx_pool_slots(false, 16, SLOT), INTER_RX_SLOTS);
}

static void test_rx_cq_data_follows_rx_size(void **state)
{
    (void)state;
    /* What the endpoint holds, when it fits the memory bound. */
    assert_int_equal(inter_rx_pool_slots(true, 512, SLOT), 512);
    assert_int_equal(inter_rx_pool_slots(true, 512, 4096 + 16), 512);
    /* Never fewer than the messages alone need. */
    assert_int_equal(inter_rx_pool_slots(true, 16, SLOT), INTER_RX_SLOTS);
    /* A deep queue of large buffers: as many as INTER_RX_POOL_MAX_BYTES holds. */
    assert_int_equal(inter_rx_pool_slots(true, 1u << 20, SLOT), INTER_RX_POOL_MAX_BYTES / SLOT);
    assert_int_equal(inter_rx_pool_slots(true, 1u << 20, 1024), INTER_RX_POOL_MAX_BYTES / 1024);
    assert_true((size_t)inter_rx_pool_slots(true, 1u << 20, SLOT) * SLOT <=
                INTER_RX_POOL_MAX_BYTES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_only),
        cmocka_unit_test(test_rx_cq_data_follows_rx_size),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
