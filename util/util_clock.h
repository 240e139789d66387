/*
 * Monotonic clock for timeouts and latency measurement.
 */
#ifndef STRATA_UTIL_CLOCK_H
#define STRATA_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

#define UTIL_NSEC_PER_USEC 1000ull
#define UTIL_NSEC_PER_MSEC 1000000ull
#define UTIL_NSEC_PER_SEC  1000000000ull

/** Nanoseconds since an arbitrary fixed point; never goes backwards; thread-safe. */
static inline uint64_t util_clock_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UTIL_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/** Sleep about ns nanoseconds (longer if a signal interrupts it). */
static inline void util_sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec  = (time_t)(ns / UTIL_NSEC_PER_SEC),
                          .tv_nsec = (long)(ns % UTIL_NSEC_PER_SEC)};

    nanosleep(&ts, NULL);
}

#endif
