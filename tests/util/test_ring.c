/*
 * Multi-producer ring: every item pushed by several threads is popped exactly once, each
 * producer's items in its own order; full and empty are reported.
 */
#include "util/util.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#define PRODUCERS 4
#define PER_PRODUCER 50000

static util_ring_t ring;

static void *producer(void *arg)
{
    uintptr_t id = (uintptr_t)arg;

    for (uintptr_t i = 0; i < PER_PRODUCER; ++i) {
        /* item = producer in the high bits, sequence in the low; never NULL */
        while (!util_ring_push(&ring, (void *)((id << 32) | (i + 1)))) {
            sched_yield();
        }
    }
    return NULL;
}

static void test_concurrent_producers(void **state)
{
    pthread_t threads[PRODUCERS];
    uintptr_t next[PRODUCERS] = {0};
    size_t popped = 0;

    (void)state;
    assert_int_equal(util_ring_init(&ring, 64), STRATA_OK);
    for (uintptr_t p = 0; p < PRODUCERS; ++p) {
        assert_int_equal(pthread_create(&threads[p], NULL, producer, (void *)p), 0);
    }
    while (popped < (size_t)PRODUCERS * PER_PRODUCER) {
        void *item = util_ring_pop(&ring);
        uintptr_t value = (uintptr_t)item, id, seq;

        if (item == NULL) {
            sched_yield();
            continue;
        }
        id  = value >> 32;
        seq = value & 0xffffffffu;
        assert_true(id < PRODUCERS);
        assert_int_equal(seq, next[id] + 1); /* per-producer order kept, nothing lost */
        next[id] = seq;
        ++popped;
    }
    for (int p = 0; p < PRODUCERS; ++p) {
        pthread_join(threads[p], NULL);
    }
    assert_null(util_ring_pop(&ring));
    util_ring_cleanup(&ring);
}

static void test_full_and_empty(void **state)
{
    (void)state;
    assert_int_equal(util_ring_init(&ring, 3), STRATA_OK); /* rounded up to 4 */
    assert_null(util_ring_pop(&ring));
    for (uintptr_t i = 1; i <= 4; ++i) {
        assert_true(util_ring_push(&ring, (void *)i));
    }
    assert_false(util_ring_push(&ring, (void *)5));
    assert_ptr_equal(util_ring_pop(&ring), (void *)1);
    assert_true(util_ring_push(&ring, (void *)5));
    for (uintptr_t i = 2; i <= 5; ++i) {
        assert_ptr_equal(util_ring_pop(&ring), (void *)i);
    }
    assert_null(util_ring_pop(&ring));
    util_ring_cleanup(&ring);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_producers),
        cmocka_unit_test(test_full_and_empty),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
