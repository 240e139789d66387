/*
 * Latency histogram: log-linear buckets (64 per power of two), so any percentile is
 * reported within 1/64 (1.6%) of the true sample; count, min, max and mean are exact.
 */
#ifndef STRATA_UTIL_HISTOGRAM_H
#define STRATA_UTIL_HISTOGRAM_H

#include <stdint.h>

#define UTIL_HISTOGRAM_SUB_BITS    6
#define UTIL_HISTOGRAM_SUB_BUCKETS (1u << UTIL_HISTOGRAM_SUB_BITS)
/* Values below SUB_BUCKETS are exact; each later power of two gets SUB_BUCKETS buckets. */
#define UTIL_HISTOGRAM_BUCKETS \
    (UTIL_HISTOGRAM_SUB_BUCKETS * (64 - UTIL_HISTOGRAM_SUB_BITS + 1))

/** Not thread-safe: one histogram per thread, merged afterwards. */
typedef struct util_histogram {
    uint64_t count;
    uint64_t min;
    uint64_t max;
    double   sum;
    uint64_t buckets[UTIL_HISTOGRAM_BUCKETS];
} util_histogram_t;

/** The standard tail summary every benchmark prints. */
typedef struct util_histogram_summary {
    uint64_t count;
    uint64_t min;
    uint64_t p50;
    uint64_t p99;
    uint64_t p999;
    uint64_t max;
    double   mean;
} util_histogram_summary_t;

void util_histogram_reset(util_histogram_t *hist);
void util_histogram_record(util_histogram_t *hist, uint64_t value);
void util_histogram_merge(util_histogram_t *dst, const util_histogram_t *src);

/**
 * Smallest recorded value v (to bucket precision) such that at least `percent` of the
 * samples are <= v; 0 when empty. percent is clamped to [0, 100]; 100 gives the exact max.
 */
uint64_t util_histogram_percentile(const util_histogram_t *hist, double percent);

void util_histogram_summarize(const util_histogram_t *hist, util_histogram_summary_t *summary_p);

#endif
