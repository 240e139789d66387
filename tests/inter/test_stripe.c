/*
 * Multi-rail striping: the chunk count follows the rule (as many chunks of at least
 * min_chunk, in aligned units, as fit, at most max_chunks, a multiple of the rails when
 * there are at least as many), computed here by a plain count-up; hand-computed chunks for
 * a few writes; and for random ones, chunks tile the write exactly, rails share it evenly,
 * sizes respect the bounds.
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

/* The count by the rule, counted up one chunk at a time. */
static uint32_t reference_chunks(const inter_stripe_params_t *p, uint64_t length)
{
    uint64_t unit = 64, min = p->min_chunk; /* INTER_STRIPE_ALIGNMENT, as documented */
    uint32_t c = 0;

    if (p->num_rails == 1) {
        return 1;
    }
    while (min % unit != 0) {
        min++;
    }
    while (c < p->max_chunks && (uint64_t)(c + 1) * min <= length) {
        c++;
    }
    if (c >= p->num_rails) {
        c = c / p->num_rails * p->num_rails;
    }
    return c == 0 ? 1 : c;
}

static uint32_t check_write(const inter_stripe_params_t *p, uint64_t length, unsigned seed)
{
    uint64_t next = 0, per_rail[MAX_RAILS] = {0}, lo = UINT64_MAX, hi = 0;
    inter_chunk_t chunk;
    uint32_t n;

    assert_int_equal(INTER_STRIPE_ALIGNMENT, 64);
    assert_int_equal(inter_stripe_num_chunks(p, length, &n), STRATA_OK);
    if (n != reference_chunks(p, length)) {
        fail_msg("seed %u len %llu rails %u min %llu max %u: %u chunks, the rule gives %u", seed,
                 (unsigned long long)length, p->num_rails, (unsigned long long)p->min_chunk,
                 p->max_chunks, n, reference_chunks(p, length));
    }
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

/* Every chunk of a few writes, computed by hand. */
static void expect_chunks(const inter_stripe_params_t *p, uint64_t length, uint32_t n,
                          const uint64_t *offsets, const uint64_t *lengths)
{
    inter_chunk_t chunk;

    assert_int_equal(check_write(p, length, 0), n);
    for (uint32_t i = 0; i < n; ++i) {
        assert_int_equal(inter_stripe_chunk(p, length, n, i, &chunk), STRATA_OK);
        assert_int_equal(chunk.offset, offsets[i]);
        assert_int_equal(chunk.length, lengths[i]);
        assert_int_equal(chunk.rail, i % p->num_rails);
    }
}

static void test_by_hand(void **state)
{
    inter_stripe_params_t p = {.num_rails = 4, .min_chunk = 64 * 1024, .max_chunks = 64};
    uint64_t off[15], len[15];

    (void)state;
    /* 300 KiB = 4800 units over 4 chunks: 1200 units = 76800 bytes each. */
    expect_chunks(&p, 300 * 1024, 4, (uint64_t[]){0, 76800, 153600, 230400},
                  (uint64_t[]){76800, 76800, 76800, 76800});
    /* 100 bytes more: 4801 whole units (one extra, to chunk 0) and a 36-byte tail (last). */
    expect_chunks(&p, 300 * 1024 + 100, 4, (uint64_t[]){0, 76864, 153664, 230464},
                  (uint64_t[]){76864, 76800, 76800, 76836});
    /* One byte: one chunk of one byte. */
    expect_chunks(&p, 1, 1, (uint64_t[]){0}, (uint64_t[]){1});
    /* 1 MiB on 3 rails: 16 chunks fit, 15 kept; 16384 units = 15 x 1092 + 4, so chunks 0-3
     * take 1093 units (69952 bytes) and 4-14 take 1092 (69888). */
    p.num_rails = 3;
    for (uint32_t i = 0; i < 15; ++i) {
        len[i] = i < 4 ? 69952 : 69888;
        off[i] = i == 0 ? 0 : off[i - 1] + len[i - 1];
    }
    expect_chunks(&p, 1 << 20, 15, off, len);
    /* 128 KiB on 3 rails: two chunks, fewer than the rails. */
    expect_chunks(&p, 128 * 1024, 2, (uint64_t[]){0, 65536}, (uint64_t[]){65536, 65536});
    /* min_chunk 100 rounds up to 128: 1000 bytes hold 7 such chunks, 6 on 3 rails; 15 whole
     * units = 6 x 2 + 3, and the last chunk takes the 40-byte tail. */
    p.min_chunk = 100;
    expect_chunks(&p, 1000, 6, (uint64_t[]){0, 192, 384, 576, 704, 832},
                  (uint64_t[]){192, 192, 192, 128, 128, 168});
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
        cmocka_unit_test(test_by_hand),
        cmocka_unit_test(test_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
