/*
 * Bounded lock-free multi-producer ring of pointers (sequence-numbered slots, in the style
 * of Vyukov's bounded queue): any thread may push; one consumer pops.
 */
#ifndef STRATA_UTIL_RING_H
#define STRATA_UTIL_RING_H

#include <strata/types.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct util_ring_slot {
    atomic_size_t seq;
    void         *item;
} util_ring_slot_t;

typedef struct util_ring {
    size_t            mask;
    util_ring_slot_t *slots;
    _Alignas(64) atomic_size_t head; /* next slot producers claim */
    _Alignas(64) atomic_size_t tail; /* next slot the consumer reads */
} util_ring_t;

/** capacity is rounded up to a power of two (at least 2). */
strata_status_t util_ring_init(util_ring_t *ring, size_t capacity);
void            util_ring_cleanup(util_ring_t *ring);

/** False when the ring is full. Thread-safe for any number of producers. */
bool util_ring_push(util_ring_t *ring, void *item);

/** NULL when empty. One consumer thread only. */
void *util_ring_pop(util_ring_t *ring);

#endif
