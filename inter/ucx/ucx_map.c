/*
 * Open addressing with linear probing; removal shifts the following run back, so there are
 * no tombstones and a lookup stops at the first empty slot.
 */
#include "inter/ucx/ucx_map.h"

#include <stdlib.h>

static size_t ucx_map_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key;
}

void *ucx_map_get(const ucx_map_t *map, uint64_t key)
{
    if (map->mask == 0) {
        return NULL;
    }
    for (size_t i = ucx_map_hash(key) & map->mask;; i = (i + 1) & map->mask) {
        const ucx_map_entry_t *slot = &map->slots[i];

        if (slot->value == NULL || slot->key == key) {
            return slot->value;
        }
    }
}

static void ucx_map_insert(ucx_map_entry_t *slots, size_t mask, uint64_t key, void *value)
{
    size_t i = ucx_map_hash(key) & mask;

    while (slots[i].value != NULL && slots[i].key != key) {
        i = (i + 1) & mask;
    }
    slots[i].key   = key;
    slots[i].value = value;
}

/* Keep the load at most a half. */
static strata_status_t ucx_map_grow(ucx_map_t *map)
{
    size_t capacity = map->mask ? 2 * (map->mask + 1) : 16;
    ucx_map_entry_t *slots = calloc(capacity, sizeof(*slots));

    if (slots == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (size_t i = 0; map->mask != 0 && i <= map->mask; ++i) {
        if (map->slots[i].value != NULL) {
            ucx_map_insert(slots, capacity - 1, map->slots[i].key, map->slots[i].value);
        }
    }
    free(map->slots);
    map->slots = slots;
    map->mask  = capacity - 1;
    return STRATA_OK;
}

strata_status_t ucx_map_put(ucx_map_t *map, uint64_t key, void *value)
{
    if (value == NULL) {
        return STRATA_ERR_INVALID;
    }
    if (ucx_map_get(map, key) == NULL) {
        if ((map->count + 1) * 2 > map->mask + 1) {
            strata_status_t status = ucx_map_grow(map);

            if (status != STRATA_OK) {
                return status;
            }
        }
        ++map->count;
    }
    ucx_map_insert(map->slots, map->mask, key, value);
    return STRATA_OK;
}

void *ucx_map_remove(ucx_map_t *map, uint64_t key)
{
    size_t i, j, home;
    void *value;

    if (map->mask == 0) {
        return NULL;
    }
    for (i = ucx_map_hash(key) & map->mask; map->slots[i].key != key; i = (i + 1) & map->mask) {
        if (map->slots[i].value == NULL) {
            return NULL;
        }
    }
    if ((value = map->slots[i].value) == NULL) {
        return NULL;
    }
    /* Shift back every entry of the run after i whose home slot does not lie in (i, j]. */
    for (j = (i + 1) & map->mask; map->slots[j].value != NULL; j = (j + 1) & map->mask) {
        home = ucx_map_hash(map->slots[j].key) & map->mask;
        if (((j - home) & map->mask) >= ((j - i) & map->mask)) {
            map->slots[i] = map->slots[j];
            i             = j;
        }
    }
    map->slots[i].value = NULL;
    --map->count;
    return value;
}

void ucx_map_for_each(const ucx_map_t *map, void (*fn)(void *value, void *arg), void *arg)
{
    for (size_t i = 0; map->mask != 0 && i <= map->mask; ++i) {
        if (map->slots[i].value != NULL) {
            fn(map->slots[i].value, arg);
        }
    }
}

void ucx_map_cleanup(ucx_map_t *map)
{
    free(map->slots);
    map->slots = NULL;
    map->mask  = 0;
    map->count = 0;
}
