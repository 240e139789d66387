/*
 * Lock-free stack of the free slots of a fixed pool (a Treiber stack of indices whose top
 * carries a tag against ABA): any thread takes and gives back, none ever waits on a lock.
 */
#ifndef STRATA_UTIL_FREELIST_H
#define STRATA_UTIL_FREELIST_H

#include <strata/types.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct util_freelist {
    uint32_t          capacity;
    _Atomic uint32_t *below;              /* [capacity] the slot under each, plus one (0: none) */
    _Alignas(64) _Atomic uint64_t top;    /* tag << 32 | (slot + 1); low half 0 when empty */
} util_freelist_t;

#define UTIL_FREELIST_MAX (UINT32_MAX - 1)

/** Every slot 0..capacity-1 free, 0 on top. capacity 1..UTIL_FREELIST_MAX. */
strata_status_t util_freelist_init(util_freelist_t *list, uint32_t capacity);
/** Tolerates a list never initialised (zeroed) or cleaned up already. */
void            util_freelist_cleanup(util_freelist_t *list);

/**
 * Take a free slot into *slot_p; false when none is. Thread-safe. What the thread that gave
 * the slot back wrote into it before util_freelist_push is visible to the taker.
 */
bool util_freelist_pop(util_freelist_t *list, uint32_t *slot_p);
/** Give slot back (it must be taken, and given back once). Thread-safe. */
void util_freelist_push(util_freelist_t *list, uint32_t slot);

#endif
