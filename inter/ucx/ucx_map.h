/*
 * A small map from 64-bit keys to pointers (open addressing, linear probing), for the ucx
 * transport's registrations by key and each peer's unpacked rkeys. Not thread-safe.
 */
#ifndef STRATA_INTER_UCX_MAP_H
#define STRATA_INTER_UCX_MAP_H

#include <strata/strata.h>

#include <stddef.h>
#include <stdint.h>

typedef struct ucx_map_entry {
    uint64_t key;
    void    *value; /* NULL: the slot is empty */
} ucx_map_entry_t;

typedef struct ucx_map {
    ucx_map_entry_t *slots;
    size_t           mask;  /* capacity - 1 (a power of two), or 0 before the first put */
    size_t           count;
} ucx_map_t;

/** The value stored under key, or NULL. */
void *ucx_map_get(const ucx_map_t *map, uint64_t key);

/** Store value (not NULL) under key, replacing any; STRATA_ERR_NO_MEMORY if it cannot grow. */
strata_status_t ucx_map_put(ucx_map_t *map, uint64_t key, void *value);

/** Remove key; returns the value it had, or NULL. */
void *ucx_map_remove(ucx_map_t *map, uint64_t key);

/** Call fn on every value (the map must not change meanwhile). */
void ucx_map_for_each(const ucx_map_t *map, void (*fn)(void *value, void *arg), void *arg);

/** Free the table (not the values); the map is empty and usable after. */
void ucx_map_cleanup(ucx_map_t *map);

#endif
