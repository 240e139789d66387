/*
 * intra: the intra-node tier. Device backends behind one ops table (host and CUDA today;
 * HIP plugs in here), chosen by name from the table compiled in, and the symmetric heap
 * (host backend). Other layers include only this header.
 */
#ifndef STRATA_INTRA_INTRA_H
#define STRATA_INTRA_INTRA_H

#include <strata/strata.h>

#include <stddef.h>

#include "heap/heap.h"

/** Alignment of every device allocation: what GPU allocators give and vector loads want. */
#define INTRA_DEVICE_ALIGNMENT 256
#define INTRA_REASON_LEN       128

/**
 * A device backend. Memory operations act on memory the backend allocated; copies are
 * complete when synchronize returns (the host backend's are complete on return).
 */
typedef struct intra_device_ops {
    const char *name;
    /**
     * Whether this machine can run the backend (a driver and a device). On failure, reason
     * (INTRA_REASON_LEN) says why in a few words; nothing is logged.
     */
    strata_status_t (*probe)(char *reason);
    /** size > 0; *ptr_p aligned to INTRA_DEVICE_ALIGNMENT, set only on success. */
    strata_status_t (*mem_alloc)(size_t size, void **ptr_p);
    /** Tolerates NULL. */
    void (*mem_free)(void *ptr);
    strata_status_t (*mem_copy)(void *dst, const void *src, size_t size);
    strata_status_t (*mem_set)(void *dst, int value, size_t size);
    /** Wait until every operation issued so far has completed. */
    strata_status_t (*synchronize)(void);
} intra_device_ops_t;

/** Backends compiled into this build, in preference order. */
size_t                    intra_device_count(void);
const intra_device_ops_t *intra_device_get(size_t index);

/** The backend called name ("host", "cuda", "hip"); NULL when not compiled in. */
const intra_device_ops_t *intra_device_find(const char *name);

#endif
