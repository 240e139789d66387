/*
 * Log-linear latency histogram.
 */
#include "util_histogram.h"
#include "util_compiler.h"

#include <math.h>
#include <string.h>

static unsigned util_histogram_bucket(uint64_t value)
{
    unsigned exponent, sub;

    if (value < UTIL_HISTOGRAM_SUB_BUCKETS) {
        return (unsigned)value;
    }
    exponent = 63u - (unsigned)__builtin_clzll(value); /* >= SUB_BITS */
    sub      = (unsigned)(value >> (exponent - UTIL_HISTOGRAM_SUB_BITS)) &
               (UTIL_HISTOGRAM_SUB_BUCKETS - 1);
    return (exponent - UTIL_HISTOGRAM_SUB_BITS + 1) * UTIL_HISTOGRAM_SUB_BUCKETS + sub;
}

/* Middle of the value range a bucket covers. */
static uint64_t util_histogram_bucket_value(unsigned bucket)
{
    unsigned group = bucket / UTIL_HISTOGRAM_SUB_BUCKETS;
    unsigned sub   = bucket % UTIL_HISTOGRAM_SUB_BUCKETS;
    unsigned shift;
    uint64_t low;

    if (group == 0) {
        return sub;
    }
    shift = group - 1;
    low   = ((uint64_t)(UTIL_HISTOGRAM_SUB_BUCKETS + sub)) << shift;
    return low + (((uint64_t)1 << shift) - 1) / 2;
}

void util_histogram_reset(util_histogram_t *hist)
{
    memset(hist, 0, sizeof(*hist));
    hist->min = UINT64_MAX;
}

void util_histogram_record(util_histogram_t *hist, uint64_t value)
{
    hist->buckets[util_histogram_bucket(value)]++;
    hist->count++;
    hist->sum += (double)value;
    hist->min = UTIL_MIN(hist->min, value);
    hist->max = UTIL_MAX(hist->max, value);
}

void util_histogram_merge(util_histogram_t *dst, const util_histogram_t *src)
{
    for (unsigned i = 0; i < UTIL_HISTOGRAM_BUCKETS; ++i) {
        dst->buckets[i] += src->buckets[i];
    }
    dst->count += src->count;
    dst->sum += src->sum;
    dst->min = UTIL_MIN(dst->min, src->min);
    dst->max = UTIL_MAX(dst->max, src->max);
}

uint64_t util_histogram_percentile(const util_histogram_t *hist, double percent)
{
    uint64_t rank, seen = 0, value;

    if (hist->count == 0) {
        return 0;
    }
    if (!(percent > 0.0)) {
        return hist->min;
    }
    if (percent >= 100.0) {
        return hist->max;
    }
    rank = (uint64_t)ceil(percent / 100.0 * (double)hist->count);
    rank = UTIL_MAX(rank, 1);
    for (unsigned i = 0; i < UTIL_HISTOGRAM_BUCKETS; ++i) {
        seen += hist->buckets[i];
        if (seen >= rank) {
            value = util_histogram_bucket_value(i);
            return UTIL_MIN(UTIL_MAX(value, hist->min), hist->max);
        }
    }
    return hist->max;
}

void util_histogram_summarize(const util_histogram_t *hist, util_histogram_summary_t *summary_p)
{
    summary_p->count = hist->count;
    summary_p->min   = hist->count ? hist->min : 0;
    summary_p->p50   = util_histogram_percentile(hist, 50.0);
    summary_p->p99   = util_histogram_percentile(hist, 99.0);
    summary_p->p999  = util_histogram_percentile(hist, 99.9);
    summary_p->max   = hist->max;
    summary_p->mean  = hist->count ? hist->sum / (double)hist->count : 0.0;
}
