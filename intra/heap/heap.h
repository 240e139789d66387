/*
 * Symmetric heap: every local rank of a node creates one shared region of the same size in
 * its device backend's memory, and every rank maps every peer's, so heap_base[peer] + offset
 * reaches the same object in any rank's region (the Iris scheme). Regions (memfds, or GPU
 * IPC handles) are handed over a unix socket in the abstract namespace, so nothing is left
 * in the file system on any exit. Anyone on the node can connect to that socket: local rank 0
 * admits only processes of its own user (SO_PEERCRED) that prove the object's secret by an
 * HMAC over a fresh nonce; the joining ranks check the listener's user and its proof.
 */
#ifndef STRATA_INTRA_HEAP_H
#define STRATA_INTRA_HEAP_H

#include <strata/strata.h>

#include <stddef.h>
#include <stdint.h>

#define INTRA_HEAP_MAX_RANKS 64
#define INTRA_HEAP_NAME_LEN  48
#define INTRA_HEAP_SECRET_LEN 32

typedef struct intra_heap intra_heap_t;
struct intra_device_ops;

typedef struct intra_heap_params {
    const struct intra_device_ops *device; /**< whose memory; the same on every rank */
    int         local_rank;
    int         local_size;
    size_t      size;       /**< bytes of each rank's region (rounded up to pages) */
    const char *job_key;    /**< the same on every rank of the job, unique per job */
    uint64_t    timeout_ns; /**< for the exchange of regions */
    /** The same on every local rank and known to nobody else (random bytes: the scheduler
     * draws them on local rank 0 and hands them out through the bootstrap). All zeros is
     * a key everyone knows: the user check alone then keeps strangers out. */
    unsigned char secret[INTRA_HEAP_SECRET_LEN];
    /** Asked every INTRA_HEAP_CHECK_NS while the rendezvous waits for a local rank: a
     *  status other than STRATA_OK (the engine's STRATA_ERR_PEER_FAILED once a rank died)
     *  ends the wait with it. NULL: wait up to timeout_ns. */
    strata_status_t (*peer_check)(void *ctx);
    void          *peer_check_ctx;
} intra_heap_params_t;

#define INTRA_HEAP_CHECK_NS (100ull * 1000 * 1000)

/**
 * Collective over the node's local ranks: create this rank's region, exchange regions,
 * map every peer's. A rank that never shows up gives STRATA_ERR_TIMEOUT, or peer_check's
 * status as soon as it reports one (a rank that died); GPUs without
 * native atomics on each other's memory (PCIe without NVLink or XGMI) STRATA_ERR_UNSUPPORTED.
 * Connections from another user or without the secret are refused and logged on local rank
 * 0, which keeps waiting for the real rank; a joining rank that finds the rendezvous held by
 * another user, or by a process without the secret, gives STRATA_ERR_BOOTSTRAP.
 */
strata_status_t intra_heap_create(const intra_heap_params_t *params, intra_heap_t **heap_p);
void            intra_heap_destroy(intra_heap_t *heap);

/** Start of local rank peer's region as mapped here. */
void  *intra_heap_base(const intra_heap_t *heap, int peer);
size_t intra_heap_size(const intra_heap_t *heap);
int    intra_heap_local_rank(const intra_heap_t *heap);
int    intra_heap_local_size(const intra_heap_t *heap);
/** Local ranks whose kernels run on this rank's GPU, itself included (host: every rank). */
int    intra_heap_gpu_sharers(const intra_heap_t *heap);
const struct intra_device_ops *intra_heap_device(const intra_heap_t *heap);

/**
 * Symmetric allocation: every rank calls it with the same arguments in the same order and
 * gets the same offset. STRATA_ERR_NO_MEMORY when the region is full; STRATA_ERR_INVALID
 * for a zero size, an alignment that is not a power of two, or a name used twice.
 */
strata_status_t intra_heap_alloc(intra_heap_t *heap, const char *name, size_t size,
                                 size_t alignment, size_t *offset_p);

/** Offset of a named allocation, or STRATA_ERR_NOT_FOUND. */
strata_status_t intra_heap_find(const intra_heap_t *heap, const char *name, size_t *offset_p);

#endif
