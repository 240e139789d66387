/*
 * Treiber stack of slot indices. The tag in the top word changes with every push and pop,
 * so a taker that read top, then lost the processor while the same slot was taken and
 * given back, fails its compare-exchange instead of installing a stale "below" (ABA).
 */
#include "util_freelist.h"

#include <stdlib.h>

#define UTIL_FREELIST_SLOT(top) ((uint32_t)((top) & 0xffffffffu)) /* slot + 1, 0 empty */
#define UTIL_FREELIST_NEXT(top, slot1) ((((top) >> 32) + 1) << 32 | (uint64_t)(slot1))

strata_status_t util_freelist_init(util_freelist_t *list, uint32_t capacity)
{
    if (capacity == 0 || capacity > UTIL_FREELIST_MAX) {
        return STRATA_ERR_INVALID;
    }
    list->below = malloc((size_t)capacity * sizeof(*list->below));
    if (list->below == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    list->capacity = capacity;
    /* Slot i lies on slot i + 1: taken in order 0, 1, 2, ... */
    for (uint32_t i = 0; i < capacity; ++i) {
        atomic_init(&list->below[i], i + 1 < capacity ? i + 2 : 0);
    }
    atomic_init(&list->top, 1);
    return STRATA_OK;
}

void util_freelist_cleanup(util_freelist_t *list)
{
    free(list->below);
    list->below    = NULL;
    list->capacity = 0;
}

bool util_freelist_pop(util_freelist_t *list, uint32_t *slot_p)
{
    /* The giver published the slot, its contents and its "below" with release (push); the
     * taker acquires them here and again in the compare-exchange. */
    uint64_t top = atomic_load_explicit(&list->top, memory_order_acquire);
    uint32_t slot1, below;

    for (;;) {
        slot1 = UTIL_FREELIST_SLOT(top);
        if (slot1 == 0) {
            return false;
        }
        /* May be stale if the slot was taken meanwhile: then the tag moved and the
         * compare-exchange fails. */
        below = atomic_load_explicit(&list->below[slot1 - 1], memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&list->top, &top,
                                                  UTIL_FREELIST_NEXT(top, below),
                                                  memory_order_acquire, memory_order_acquire)) {
            *slot_p = slot1 - 1;
            return true;
        }
    }
}

void util_freelist_push(util_freelist_t *list, uint32_t slot)
{
    uint64_t top = atomic_load_explicit(&list->top, memory_order_relaxed);

    do {
        atomic_store_explicit(&list->below[slot], UTIL_FREELIST_SLOT(top), memory_order_relaxed);
        /* The giver publishes the slot and what it wrote into it (release); takers acquire. */
    } while (!atomic_compare_exchange_weak_explicit(&list->top, &top,
                                                    UTIL_FREELIST_NEXT(top, slot + 1),
                                                    memory_order_release, memory_order_relaxed));
}
