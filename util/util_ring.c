/*
 * Multi-producer, single-consumer bounded ring.
 */
#include "util_ring.h"

#include <stdint.h>
#include <stdlib.h>

strata_status_t util_ring_init(util_ring_t *ring, size_t capacity)
{
    size_t size = 2;

    while (size < capacity && size < (SIZE_MAX >> 2)) {
        size <<= 1;
    }
    ring->slots = calloc(size, sizeof(*ring->slots));
    if (ring->slots == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < size; ++i) {
        atomic_init(&ring->slots[i].seq, i);
    }
    ring->mask = size - 1;
    atomic_init(&ring->head, 0);
    atomic_init(&ring->tail, 0);
    return STRATA_OK;
}

void util_ring_cleanup(util_ring_t *ring)
{
    free(ring->slots);
    ring->slots = NULL;
}

bool util_ring_push(util_ring_t *ring, void *item)
{
    size_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    util_ring_slot_t *slot;
    intptr_t diff;
    size_t seq;

    for (;;) {
        slot = &ring->slots[pos & ring->mask];
        /* Consumer publishes a free slot with release (seq = pos); producer acquires it. */
        seq  = atomic_load_explicit(&slot->seq, memory_order_acquire);
        diff = (intptr_t)seq - (intptr_t)pos;
        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&ring->head, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                break;
            }
        } else if (diff < 0) {
            return false; /* full */
        } else {
            pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
        }
    }
    slot->item = item;
    /* Producer publishes the item with release (seq = pos + 1); the consumer acquires it. */
    atomic_store_explicit(&slot->seq, pos + 1, memory_order_release);
    return true;
}

void *util_ring_pop(util_ring_t *ring)
{
    size_t pos = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    util_ring_slot_t *slot = &ring->slots[pos & ring->mask];
    size_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
    void *item;

    if ((intptr_t)seq - (intptr_t)(pos + 1) < 0) {
        return NULL; /* empty, or the producer of this slot has not published yet */
    }
    item = slot->item;
    atomic_store_explicit(&ring->tail, pos + 1, memory_order_relaxed);
    /* Consumer frees the slot for the producer one lap later (release). */
    atomic_store_explicit(&slot->seq, pos + ring->mask + 1, memory_order_release);
    return item;
}
