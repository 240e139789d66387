/*
 * The heap tests' ranks (tests/intra/test_heap.c, test_heap_access.c): each a process that
 * joins a symmetric heap of the host backend with the test's secret, writes a pattern into
 * its region, flags it, and checks every peer's through their mappings (release/acquire
 * flags); an exit code says what went wrong.
 */
#ifndef STRATA_TESTS_INTRA_HEAP_RANKS_H
#define STRATA_TESTS_INTRA_HEAP_RANKS_H

#include "intra/heap/heap.h"
#include "intra/host/host_device.h"
#include "util/util.h"

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DATA_BYTES (1u << 20)
#define WAIT_NS    (10ull * UTIL_NSEC_PER_SEC)

static unsigned char pattern(int rank, int round, size_t i)
{
    return (unsigned char)(rank * 37 + round * 101 + i * 13 + (i >> 11));
}

/* Spin until the flag reaches value (acquire: the writer's data is visible after it). */
static int wait_flag(_Atomic uint64_t *flag, uint64_t value)
{
    uint64_t deadline = util_clock_now_ns() + WAIT_NS;

    while (atomic_load_explicit(flag, memory_order_acquire) < value) {
        if (util_clock_now_ns() > deadline) {
            return 0;
        }
        sched_yield();
    }
    return 1;
}

static const unsigned char test_secret[INTRA_HEAP_SECRET_LEN] = "the job's secret, 32 bytes long";

static int rank_main(int rank, int size, const char *key)
{
    intra_heap_params_t p = {.device = &host_device_ops, .local_rank = rank,
                             .local_size = size, .size = 3 * DATA_BYTES, .job_key = key, .timeout_ns = WAIT_NS};
    size_t data, flags, again;
    intra_heap_t *heap;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    memcpy(p.secret, test_secret, sizeof(p.secret));
    if (intra_heap_create(&p, &heap) != STRATA_OK) {
        return 10;
    }
    if (intra_heap_alloc(heap, "data", DATA_BYTES, 4096, &data) != STRATA_OK ||
        intra_heap_alloc(heap, "flags", 64 * sizeof(uint64_t), 64, &flags) != STRATA_OK ||
        intra_heap_find(heap, "data", &again) != STRATA_OK || again != data) {
        return 11;
    }
    /* Round 1: fill our own region, raise our flag; read every peer's after its flag. */
    unsigned char *own = (unsigned char *)intra_heap_base(heap, rank) + data;
    for (size_t i = 0; i < DATA_BYTES; ++i) {
        own[i] = pattern(rank, 1, i);
    }
    _Atomic uint64_t *own_flags = (void *)((char *)intra_heap_base(heap, rank) + flags);
    atomic_store_explicit(&own_flags[rank], 1, memory_order_release); /* publishes own data */
    for (int r = 0; r < size; ++r) {
        _Atomic uint64_t *f = (void *)((char *)intra_heap_base(heap, r) + flags);
        const unsigned char *d = (const unsigned char *)intra_heap_base(heap, r) + data;

        if (!wait_flag(&f[r], 1)) {
            return 12;
        }
        for (size_t i = 0; i < DATA_BYTES; i += 97) {
            if (d[i] != pattern(r, 1, i)) {
                return 13;
            }
        }
    }
    /* Everyone has read round 1 before anyone writes into a peer's region. */
    atomic_store_explicit(&own_flags[rank], 2, memory_order_release);
    for (int r = 0; r < size; ++r) {
        _Atomic uint64_t *f = (void *)((char *)intra_heap_base(heap, r) + flags);
        if (!wait_flag(&f[r], 2)) {
            return 17;
        }
    }
    /* Round 2: write a slice into the next rank's region, raise its flag for us. */
    size_t slice = DATA_BYTES / 64;
    unsigned char *theirs = (unsigned char *)intra_heap_base(heap, next) + data + rank * slice;
    for (size_t i = 0; i < slice; ++i) {
        theirs[i] = pattern(rank, 2, i);
    }
    _Atomic uint64_t *next_flags = (void *)((char *)intra_heap_base(heap, next) + flags);
    atomic_store_explicit(&next_flags[32 + rank], 2, memory_order_release); /* publishes it */
    if (!wait_flag(&own_flags[32 + prev], 2)) {
        return 14;
    }
    for (size_t i = 0; i < slice; ++i) {
        if (own[prev * slice + i] != pattern(prev, 2, i)) {
            return 15;
        }
    }
    /* Everyone done reading before anyone unmaps. */
    atomic_store_explicit(&own_flags[rank], 3, memory_order_release);
    for (int r = 0; r < size; ++r) {
        _Atomic uint64_t *f = (void *)((char *)intra_heap_base(heap, r) + flags);
        if (!wait_flag(&f[r], 3)) {
            return 16;
        }
    }
    intra_heap_destroy(heap);
    return 0;
}

#endif
