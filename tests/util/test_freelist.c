/*
 * Lock-free free list: slots come out in order and LIFO after that, an empty list says so,
 * and under several threads taking and giving back no slot is ever held twice, what its
 * last holder wrote is what the next one reads, and every slot is there at the end.
 */
#include "util/util.h"

#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#define THREADS    4
#define SLOTS      8 /* fewer than threads x 2: the list runs empty often */
#define ITERATIONS 200000

static util_freelist_t list;
static atomic_int      holders[SLOTS];   /* threads holding each slot: never above 1 */
static uint64_t        payload[SLOTS];   /* written by the holder, plain memory */
static uint64_t        written[SLOTS];   /* what the last holder wrote, kept by it */
static atomic_int      errors;

static void *worker(void *arg)
{
    uint64_t id = (uintptr_t)arg;
    uint32_t slot;

    for (uint64_t i = 0; i < ITERATIONS; ++i) {
        if (!util_freelist_pop(&list, &slot)) {
            sched_yield();
            continue;
        }
        if (slot >= SLOTS || atomic_fetch_add(&holders[slot], 1) != 0 ||
            payload[slot] != written[slot]) {
            atomic_fetch_add(&errors, 1);
        }
        payload[slot] = written[slot] = (id << 48) | i;
        atomic_fetch_sub(&holders[slot], 1);
        util_freelist_push(&list, slot);
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    pthread_t threads[THREADS];
    bool seen[SLOTS] = {false};
    uint32_t slot;

    (void)state;
    assert_int_equal(util_freelist_init(&list, SLOTS), STRATA_OK);
    for (uintptr_t t = 0; t < THREADS; ++t) {
        assert_int_equal(pthread_create(&threads[t], NULL, worker, (void *)t), 0);
    }
    for (int t = 0; t < THREADS; ++t) {
        pthread_join(threads[t], NULL);
    }
    assert_int_equal(atomic_load(&errors), 0);
    for (int i = 0; i < SLOTS; ++i) {
        assert_true(util_freelist_pop(&list, &slot));
        assert_true(slot < SLOTS);
        assert_false(seen[slot]);
        seen[slot] = true;
    }
    assert_false(util_freelist_pop(&list, &slot));
    util_freelist_cleanup(&list);
}

static void test_order_and_empty(void **state)
{
    uint32_t slot;

    (void)state;
    assert_int_equal(util_freelist_init(&list, 0), STRATA_ERR_INVALID);
    assert_int_equal(util_freelist_init(&list, 3), STRATA_OK);
    for (uint32_t i = 0; i < 3; ++i) {
        assert_true(util_freelist_pop(&list, &slot));
        assert_int_equal(slot, i);
    }
    assert_false(util_freelist_pop(&list, &slot));
    util_freelist_push(&list, 1);
    util_freelist_push(&list, 2);
    assert_true(util_freelist_pop(&list, &slot)); /* last given back, first taken */
    assert_int_equal(slot, 2);
    assert_true(util_freelist_pop(&list, &slot));
    assert_int_equal(slot, 1);
    assert_false(util_freelist_pop(&list, &slot));
    util_freelist_cleanup(&list);
    util_freelist_cleanup(&list); /* twice is harmless */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_empty),
        cmocka_unit_test(test_concurrent),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
