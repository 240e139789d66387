/*
 * Latency histogram: percentiles against an exact sorted reference, within bucket error.
 */
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#define NUM_SAMPLES 20000

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* Exact percentile with the histogram's definition: smallest v with >= p% samples <= v. */
static uint64_t exact_percentile(const uint64_t *sorted, size_t n, double p)
{
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999999);

    return sorted[(rank ? rank : 1) - 1];
}

static void assert_close(uint64_t got, uint64_t want, unsigned seed, double p)
{
    double tolerance = (double)want / UTIL_HISTOGRAM_SUB_BUCKETS + 1.0;
    double diff = (double)got - (double)want;

    if (diff < -tolerance || diff > tolerance) {
        fail_msg("seed %u p%.1f: histogram %llu, exact %llu", seed, p, (unsigned long long)got,
                 (unsigned long long)want);
    }
}

static void check_against_reference(unsigned seed, uint64_t (*draw)(void))
{
    static uint64_t samples[NUM_SAMPLES];
    static util_histogram_t hist;
    util_histogram_summary_t s;
    double mean = 0;

    srand(seed);
    util_histogram_reset(&hist);
    for (size_t i = 0; i < NUM_SAMPLES; ++i) {
        samples[i] = draw();
        mean += (double)samples[i] / NUM_SAMPLES;
        util_histogram_record(&hist, samples[i]);
    }
    qsort(samples, NUM_SAMPLES, sizeof(samples[0]), compare_u64);
    util_histogram_summarize(&hist, &s);
    assert_int_equal(s.count, NUM_SAMPLES);
    assert_int_equal(s.min, samples[0]);
    assert_int_equal(s.max, samples[NUM_SAMPLES - 1]);
    assert_true(s.mean > mean * 0.999 && s.mean < mean * 1.001);
    assert_close(s.p50, exact_percentile(samples, NUM_SAMPLES, 50), seed, 50);
    assert_close(s.p99, exact_percentile(samples, NUM_SAMPLES, 99), seed, 99);
    assert_close(s.p999, exact_percentile(samples, NUM_SAMPLES, 99.9), seed, 99.9);
}

static uint64_t draw_uniform(void)
{
    return 1000 + (uint64_t)(rand() % 100000);
}

/* Latency-like: mostly ~2 us with a heavy tail to tens of milliseconds. */
static uint64_t draw_heavy_tail(void)
{
    uint64_t base = 1500 + (uint64_t)(rand() % 1000);

    return (rand() % 100 == 0) ? base * (uint64_t)(1 + rand() % 20000) : base;
}

static void test_uniform(void **state)
{
    (void)state;
    check_against_reference(1, draw_uniform);
    check_against_reference(2, draw_uniform);
}

static void test_heavy_tail(void **state)
{
    (void)state;
    check_against_reference(3, draw_heavy_tail);
    check_against_reference(4, draw_heavy_tail);
}

static void test_edges(void **state)
{
    static util_histogram_t a, b;

    (void)state;
    util_histogram_reset(&a);
    assert_int_equal(util_histogram_percentile(&a, 50), 0); /* empty */
    for (uint64_t v = 0; v < 64; ++v) {
        util_histogram_record(&a, v); /* small values are exact */
    }
    assert_int_equal(util_histogram_percentile(&a, 50), 31);
    assert_int_equal(util_histogram_percentile(&a, 100), 63);
    assert_int_equal(util_histogram_percentile(&a, 0), 0);
    util_histogram_reset(&b);
    util_histogram_record(&b, UINT64_MAX);
    util_histogram_merge(&a, &b);
    assert_int_equal(a.count, 65);
    assert_int_equal(util_histogram_percentile(&a, 100), UINT64_MAX);
    assert_int_equal(util_histogram_percentile(&a, 98), 63);   /* rank 64 of 65 */
    assert_true(util_histogram_percentile(&a, 99) >= UINT64_MAX - UINT64_MAX / 64); /* rank 65 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_heavy_tail),
        cmocka_unit_test(test_edges),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
