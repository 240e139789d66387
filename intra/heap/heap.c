/*
 * Symmetric heap: each rank's region comes from its device backend; descriptions of the
 * regions (and memfds, by SCM_RIGHTS) go through local rank 0 (heap_rendezvous.c); then
 * every rank opens every peer's, and allocations are placed alike in every region.
 */
#include "intra/heap/heap_rendezvous.h"
#include "intra/intra.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HEAP_MAX_ALLOCS 256

typedef struct heap_alloc {
    char   name[INTRA_HEAP_NAME_LEN];
    size_t offset;
} heap_alloc_t;

struct intra_heap {
    const intra_device_ops_t *device;
    intra_region_t own;
    int          local_rank;
    int          local_size;
    int          gpu_sharers; /* local ranks on this rank's GPU, itself included */
    size_t       size;
    void        *base[INTRA_HEAP_MAX_RANKS];
    size_t       used;
    int          num_allocs;
    heap_alloc_t allocs[HEAP_MAX_ALLOCS];
};

/* Open every peer's region from its card. */
static strata_status_t heap_open_peers(intra_heap_t *heap, const heap_card_t *cards,
                                       const int *fds)
{
    for (int r = 0; r < heap->local_size; ++r) {
        intra_region_t peer = {.size = heap->size, .fd = fds[r]};
        strata_status_t status;

        if (r == heap->local_rank) {
            continue;
        }
        memcpy(peer.handle, cards[r].handle, sizeof(peer.handle));
        status = heap->device->region_open(&peer, &heap->base[r]);
        if (status != STRATA_OK) {
            heap->base[r] = NULL;
            UTIL_LOG_ERROR("heap: cannot open local rank %d's region: %s", r,
                           strata_status_string(status));
            return status;
        }
    }
    return STRATA_OK;
}

/*
 * What the ranks' GPUs mean for this one: how many ranks share its GPU (they share its
 * multiprocessors too), and whether it may use atomics on every other GPU's memory.
 */
static strata_status_t heap_check_gpus(intra_heap_t *heap, const heap_card_t *cards)
{
    const heap_card_t *own = &cards[heap->local_rank];
    char reason[UTIL_REASON_LEN];

    heap->gpu_sharers = 0;
    for (int r = 0; r < heap->local_size; ++r) {
        if (strcasecmp(cards[r].bus_id, own->bus_id) == 0) {
            ++heap->gpu_sharers;
        } else if (heap->device->peer_atomics != NULL &&
                   heap->device->peer_atomics(cards[r].bus_id, reason) != STRATA_OK) {
            UTIL_LOG_ERROR("heap: local rank %d cannot share memory with local rank %d: %s",
                           heap->local_rank, r, reason);
            return STRATA_ERR_UNSUPPORTED;
        }
    }
    return STRATA_OK;
}

static bool heap_params_valid(const intra_heap_params_t *p)
{
    return p != NULL && p->device != NULL && p->local_size >= 1 &&
           p->local_size <= INTRA_HEAP_MAX_RANKS && p->local_rank >= 0 &&
           p->local_rank < p->local_size && p->size > 0 && p->job_key != NULL &&
           p->job_key[0] != '\0' && strlen(p->job_key) <= 64;
}

strata_status_t intra_heap_create(const intra_heap_params_t *p, intra_heap_t **heap_p)
{
    heap_card_t cards[INTRA_HEAP_MAX_RANKS];
    int fds[INTRA_HEAP_MAX_RANKS];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    strata_status_t status;
    intra_heap_t *heap;

    if (!heap_params_valid(p)) {
        UTIL_LOG_ERROR("heap: invalid parameters (local rank %d of %d, %zu bytes)",
                       p ? p->local_rank : -1, p ? p->local_size : 0, p ? p->size : 0);
        return STRATA_ERR_INVALID;
    }
    heap = calloc(1, sizeof(*heap));
    if (heap == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    heap->device     = p->device;
    heap->local_rank = p->local_rank;
    heap->local_size = p->local_size;
    heap->size       = (p->size + page - 1) / page * page;
    heap->own.fd     = -1;
    memset(cards, 0, sizeof(cards));
    for (int r = 0; r < INTRA_HEAP_MAX_RANKS; ++r) {
        fds[r] = -1;
    }
    status = heap->device->region_create(heap->size, &heap->own);
    if (status == STRATA_OK) {
        heap_card_t *own = &cards[p->local_rank];

        own->rank   = p->local_rank;
        own->has_fd = heap->own.fd >= 0;
        own->size   = heap->size;
        memcpy(own->handle, heap->own.handle, sizeof(own->handle));
        if (heap->device->device_bus_id != NULL) {
            status = heap->device->device_bus_id(own->bus_id);
        }
        fds[p->local_rank]          = heap->own.fd;
        heap->base[p->local_rank]   = heap->own.base;
        cards[0].has_fd             = own->has_fd; /* what rank 0 expects from the others */
        cards[0].size               = heap->size;
    }
    if (status == STRATA_OK) {
        status = heap_exchange(p, cards, fds);
    }
    if (status == STRATA_OK) {
        status = heap_check_gpus(heap, cards);
    }
    if (status == STRATA_OK) {
        status = heap_open_peers(heap, cards, fds);
    }
    for (int r = 0; r < p->local_size; ++r) { /* mappings keep the regions alive */
        if (fds[r] >= 0 && r != p->local_rank) {
            close(fds[r]);
        }
    }
    if (status != STRATA_OK) {
        intra_heap_destroy(heap);
        return status;
    }
    *heap_p = heap;
    return STRATA_OK;
}

void intra_heap_destroy(intra_heap_t *heap)
{
    if (heap == NULL) {
        return;
    }
    for (int r = 0; r < heap->local_size; ++r) {
        if (heap->base[r] != NULL && r != heap->local_rank) {
            heap->device->region_close(heap->base[r], heap->size);
        }
    }
    heap->device->region_destroy(&heap->own);
    free(heap);
}

void *intra_heap_base(const intra_heap_t *heap, int peer)
{
    return (peer >= 0 && peer < heap->local_size) ? heap->base[peer] : NULL;
}

size_t intra_heap_size(const intra_heap_t *heap)
{
    return heap->size;
}

int intra_heap_local_rank(const intra_heap_t *heap)
{
    return heap->local_rank;
}

int intra_heap_gpu_sharers(const intra_heap_t *heap)
{
    return heap->gpu_sharers;
}

int intra_heap_local_size(const intra_heap_t *heap)
{
    return heap->local_size;
}

const intra_device_ops_t *intra_heap_device(const intra_heap_t *heap)
{
    return heap->device;
}

strata_status_t intra_heap_find(const intra_heap_t *heap, const char *name, size_t *offset_p)
{
    for (int i = 0; name != NULL && i < heap->num_allocs; ++i) {
        if (strcmp(heap->allocs[i].name, name) == 0) {
            *offset_p = heap->allocs[i].offset;
            return STRATA_OK;
        }
    }
    return STRATA_ERR_NOT_FOUND;
}

strata_status_t intra_heap_alloc(intra_heap_t *heap, const char *name, size_t size,
                                 size_t alignment, size_t *offset_p)
{
    size_t offset, unused;

    if (name == NULL || name[0] == '\0' || strlen(name) >= INTRA_HEAP_NAME_LEN || size == 0 ||
        alignment == 0 || (alignment & (alignment - 1)) != 0 ||
        intra_heap_find(heap, name, &unused) == STRATA_OK) {
        UTIL_LOG_ERROR("heap: invalid allocation '%s' of %zu bytes aligned to %zu (empty or "
                       "repeated name, zero size, or alignment not a power of two)",
                       name ? name : "", size, alignment);
        return STRATA_ERR_INVALID;
    }
    offset = (heap->used + alignment - 1) & ~(alignment - 1);
    if (offset < heap->used || offset > heap->size || size > heap->size - offset ||
        heap->num_allocs == HEAP_MAX_ALLOCS) {
        UTIL_LOG_ERROR("heap: '%s' needs %zu bytes; %zu of %zu are used", name, size, heap->used,
                       heap->size);
        return STRATA_ERR_NO_MEMORY;
    }
    snprintf(heap->allocs[heap->num_allocs].name, INTRA_HEAP_NAME_LEN, "%s", name);
    heap->allocs[heap->num_allocs++].offset = offset;
    heap->used = offset + size;
    *offset_p  = offset;
    return STRATA_OK;
}
