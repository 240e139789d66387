/*
 * Multi-rail striping: chunks tile the write exactly, rails share it evenly, sizes respect
 * the bounds, and the count is the same wherever it is computed.
 */
#include "inter/engine.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#define MAX_RAILS 8

static uint32_t check_write(const inter_stripe_params_t *p, uint64_t length, unsigned seed)
{
    uint64_t next = 0, per_rail[MAX_RAILS] = {0}, lo = UINT64_MAX, hi = 0;
    inter_chunk_t chunk;
    uint32_t n, again;

    assert_int_equal(inter_stripe_num_chunks(p, length, &n), STRATA_OK);
    assert_int_equal(inter_stripe_num_chunks(p, length, &again), STRATA_OK);
    assert_int_equal(n, again);
    assert_true(n >= 1 && n <= p->max_chunks);
    for (uint32_t i = 0; i < n; ++i) {
        assert_int_equal(inter_stripe_chunk(p, length, n, i, &chunk), STRATA_OK);
        if (chunk.offset != next || chunk.length == 0) {
            fail_msg("seed %u len %llu chunk %u/%u: offset %llu length %llu, expected offset %llu",
                     seed, (unsigned long long)length, i, n, (unsigned long long)chunk.offset,
                     (unsigned long long)chunk.length, (unsigned long long)next);
        }
        assert_int_equal(chunk.offset % INTER_STRIPE_ALIGNMENT, 0);
        assert_int_equal(chunk.rail, i % p->num_rails);
        if (n > 1) {
            assert_true(chunk.length >= p->min_chunk);
        }
        per_rail[chunk.rail] += chunk.length;
        next += chunk.length;
    }
    assert_int_equal(next, length);
    if (n >= p->num_rails) {
        assert_int_equal(n % p->num_rails, 0);
        for (uint32_t r = 0; r < p->num_rails; ++r) {
            lo = per_rail[r] < lo ? per_rail[r] : lo;
            hi = per_rail[r] > hi ? per_rail[r] : hi;
        }
        /* Rails differ by at most one aligned unit per chunk plus the unaligned tail. */
        assert_true(hi - lo <= (uint64_t)(n / p->num_rails) * INTER_STRIPE_ALIGNMENT +
                                   INTER_STRIPE_ALIGNMENT);
    }
    return n;
}

static void test_examples(void **state)
{
    inter_stripe_params_t p = {.num_rails = 4, .min_chunk = 64 * 1024, .max_chunks = 64};
    uint32_t n;

    (void)state;
    assert_int_equal(check_write(&p, 1, 0), 1);
    assert_int_equal(check_write(&p, 64 * 1024, 0), 1);
    assert_int_equal(check_write(&p, 256 * 1024, 0), 4);
    assert_int_equal(check_write(&p, 300 * 1024, 0), 4);
    assert_int_equal(check_write(&p, 1 << 20, 0), 16);
    assert_int_equal(check_write(&p, 64ull << 20, 0), 64);
    p.num_rails = 3;
    assert_int_equal(check_write(&p, 1 << 20, 0), 15);
    p.num_rails = 1;
    assert_int_equal(check_write(&p, 64ull << 20, 0), 1); /* one rail: one chunk */
    p.num_rails = 3;
    assert_int_equal(check_write(&p, 128 * 1024, 0), 2); /* fewer chunks than rails */
    assert_int_equal(inter_stripe_num_chunks(&p, 0, &n), STRATA_ERR_INVALID);
    p.num_rails = 0;
    assert_int_equal(inter_stripe_num_chunks(&p, 100, &n), STRATA_ERR_INVALID);
    p.num_rails = 1;
    inter_chunk_t chunk;
    assert_int_equal(inter_stripe_chunk(&p, 100, 1, 1, &chunk), STRATA_ERR_INVALID);
    assert_int_equal(inter_stripe_chunk(&p, 100, 2, 0, &chunk), STRATA_ERR_INVALID);
}

static void test_random(void **state)
{
    (void)state;
    for (unsigned seed = 1; seed <= 2000; ++seed) {
        inter_stripe_params_t p;
        uint64_t length;

        srand(seed);
        p.num_rails  = 1 + (uint32_t)(rand() % MAX_RAILS);
        p.min_chunk  = 64 + (uint64_t)(rand() % (1 << 20));
        p.max_chunks = 1 + (uint32_t)(rand() % 128);
        length       = 1 + ((uint64_t)rand() << 8 | (uint64_t)(rand() & 0xff)) % (256ull << 20);
        check_write(&p, length, seed);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
