/*
 * intra: the intra-node tier. Device backends (host, CUDA, HIP) behind one ops table,
 * chosen by name from the table compiled in; the symmetric heap over the backend's
 * shareable memory; and MoE dispatch/combine between the local ranks with the single-source
 * kernels. Other layers include only this header.
 */
#ifndef STRATA_INTRA_INTRA_H
#define STRATA_INTRA_INTRA_H

#include <strata/strata.h>

#include "util/util_reason.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Alignment of every device allocation: what GPU allocators give and vector loads want. */
#define INTRA_DEVICE_ALIGNMENT  256
#define INTRA_REGION_HANDLE_LEN 64
/** A GPU's PCI address, "dddd:bb:dd.f", as the runtimes print it. */
#define INTRA_BUS_ID_LEN        32

/**
 * Memory one rank shares with the other local ranks: a memfd on the host backend (fd), an
 * IPC handle on GPU backends (handle). Peers receive fd or handle and open the region.
 */
typedef struct intra_region {
    void         *base;
    size_t        size;
    int           fd;
    unsigned char handle[INTRA_REGION_HANDLE_LEN];
} intra_region_t;

/** A backend's queue: a thread pool on the host, a stream on GPUs. */
typedef struct intra_queue intra_queue_t;

struct intra_moe_args;

#include "kernels/kernel_ids.h"

/** Whose memory a backend's allocations and regions are. */
typedef enum intra_memory {
    INTRA_MEMORY_HOST = 0,
    INTRA_MEMORY_CUDA = 1,
    INTRA_MEMORY_HIP  = 2,
} intra_memory_t;

/**
 * A device backend. Memory operations act on memory the backend allocated; copies and sets
 * are complete when they return, so kernels launched later on any stream see them.
 */
typedef struct intra_device_ops {
    const char *name;
    /** What mem_alloc and region_create give: the network registers it as such. */
    intra_memory_t memory;
    /**
     * Whether this machine can run the backend (a driver and a device). On failure, reason
     * (UTIL_REASON_LEN) says why in a few words; nothing is logged.
     */
    strata_status_t (*probe)(char *reason);
    /** size > 0; *ptr_p aligned to INTRA_DEVICE_ALIGNMENT, set only on success. */
    strata_status_t (*mem_alloc)(size_t size, void **ptr_p);
    /**
     * Tolerates NULL. Not before the work every stream has queued so far has run, as
     * cudaFree waits for the device: a copy or kernel queued earlier may still write to ptr.
     * The host backend does not wait: its streams free ptr when they reach that point.
     */
    void (*mem_free)(void *ptr);
    /**
     * A dma-buf of this backend's memory at ptr (size bytes within one allocation), so that
     * a NIC driver can register it without a peer-memory module: *fd_p (the caller closes
     * it) covers at least [ptr, ptr + size) (CUDA: the whole allocation) and *offset_p is
     * ptr's offset in it; both set only on success. On failure reason (UTIL_REASON_LEN)
     * says why (HIP: a ROCm older than 5.7). NULL where the backend has no way to export
     * (the host).
     */
    strata_status_t (*mem_export_dmabuf)(void *ptr, size_t size, int *fd_p, uint64_t *offset_p,
                                         char *reason);
    /**
     * Where ptr points, for registering it with the network: *device_p is the ordinal of the
     * GPU whose memory (of this backend) holds it, and [*base_p, *base_p + *size_p) the
     * allocation it lies in; or -1 for host memory, pageable or pinned (base and size are
     * then not set). STRATA_ERR_UNSUPPORTED, with reason (UTIL_REASON_LEN), for memory a
     * NIC cannot register as either (managed memory, which migrates between them) or that
     * the runtime cannot place. NULL where all memory is host memory (the host).
     */
    strata_status_t (*mem_locate)(const void *ptr, int *device_p, uintptr_t *base_p,
                                  size_t *size_p, char *reason);
    strata_status_t (*mem_copy)(void *dst, const void *src, size_t size);
    strata_status_t (*mem_set)(void *dst, int value, size_t size);
    /** Wait until every operation issued so far has completed. */
    strata_status_t (*synchronize)(void);
    /** The GPU this thread's calls use (host: 0). */
    strata_status_t (*current_device)(int *device_p);
    /** How many GPUs this process sees (host: 0). */
    strata_status_t (*device_count)(int *count_p);
    /**
     * Make GPU ordinal (0..device_count) this thread's, and check that the library carries
     * kernels for it; on failure reason (UTIL_REASON_LEN) says why. NULL on the host.
     */
    strata_status_t (*device_select)(int ordinal, char *reason);
    /**
     * The GPU the calling thread chose before it called strata (*chosen_p false: it chose
     * none, or the runtime cannot tell), as NCCL adopts the current device. NULL on the host.
     */
    strata_status_t (*device_chosen)(int *ordinal_p, bool *chosen_p);
    /**
     * Make GPU ordinal this thread's; *previous_p: the one that was, -1 where the thread had
     * chosen none (nothing to give back). NULL on the host.
     */
    strata_status_t (*device_use)(int ordinal, int *previous_p);
    /** PCI address (INTRA_BUS_ID_LEN) of this thread's GPU; NULL on the host. */
    strata_status_t (*device_bus_id)(char *bus_id);
    /**
     * Whether kernels on this thread's GPU may use system-scope atomics on memory of the GPU
     * at peer_bus_id (NVLink or XGMI peer atomics); on failure reason says why. NULL where
     * there is one memory for all (the host).
     */
    strata_status_t (*peer_atomics)(const char *peer_bus_id, char *reason);
    /**
     * Blocks of the MoE kernels this thread's GPU holds resident at once (the occupancy of
     * the most demanding kernel times the multiprocessors). A launch's blocks all wait for
     * one another, so a larger grid would never finish. NULL where blocks are threads.
     */
    strata_status_t (*resident_blocks)(unsigned *blocks_p);
    /**
     * Zeroed host memory the device reaches too (pinned and mapped on GPUs): *host_p for the
     * host, *device_p for kernels; both set only on success. Its pages on NUMA node
     * numa_node (the kernel's index) where the kernel places them there; -1: anywhere.
     */
    strata_status_t (*host_alloc)(size_t size, int numa_node, void **host_p, void **device_p);
    /** Tolerates NULL. */
    void (*host_free)(void *host);
    /**
     * Make RDMA writes that a NIC completed into this GPU's memory visible to its kernels
     * before they are told of them (GPUDirect RDMA); NULL where nothing is needed. Called
     * by whichever thread progresses the transfer engine; that thread's GPU stays as it was.
     */
    void (*flush_remote_writes)(int device);
    /**
     * Whether what a NIC writes into this thread's GPU's memory can be made visible to its
     * kernels before they are told of it: the GPU orders such writes itself, or
     * flush_remote_writes works on it. STRATA_ERR_UNSUPPORTED, with reason
     * (UTIL_REASON_LEN), where neither holds: the network must then not write there. NULL
     * where there is one memory for all (the host).
     */
    strata_status_t (*remote_writes_visible)(char *reason);

    /** A zeroed region of size bytes that peers can open; region_p set only on success. */
    strata_status_t (*region_create)(size_t size, intra_region_t *region_p);
    /** Map a peer's region (its size, and its fd or handle as received). */
    strata_status_t (*region_open)(const intra_region_t *peer, void **base_p);
    /** Unmap a peer's region opened by region_open. */
    void (*region_close)(void *base, size_t size);
    /** Release this rank's region; tolerates a zeroed struct. */
    void (*region_destroy)(intra_region_t *region);

    /**
     * A stream of this backend for callers without one of their own: what is enqueued on it
     * runs in order, after the call that enqueued it returned (CUDA, HIP: a non-blocking
     * stream of this thread's GPU; host: a thread of its own). stream_destroy waits for its
     * work and tolerates NULL.
     */
    strata_status_t (*stream_create)(void **stream_p);
    void (*stream_destroy)(void *stream);
    /** Wait for everything enqueued on stream. STRATA_ERR_INVALID: not this backend's. */
    strata_status_t (*stream_synchronize)(void *stream);
    /**
     * Whether work enqueued on stream is being captured into a graph instead of run: then
     * nothing may wait for it on the host. STRATA_ERR_INVALID: not this backend's stream.
     */
    strata_status_t (*stream_capturing)(void *stream, bool *capturing_p);

    /** A queue whose launches run num_blocks blocks (host: that many threads). */
    strata_status_t (*queue_create)(unsigned num_blocks, intra_queue_t **queue_p);
    void (*queue_destroy)(intra_queue_t *queue);
    /**
     * Launch on the caller's stream (cudaStream_t or hipStream_t as void *, a host stream
     * of stream_create) from now on; NULL: the queue's own. What is enqueued later runs
     * after what was enqueued before, on whichever stream (an event recorded on the old
     * stream, waited for by the new one). STRATA_ERR_INVALID: a stream of another backend
     * or another GPU.
     */
    strata_status_t (*queue_set_stream)(intra_queue_t *queue, void *stream);
    /**
     * Copy size bytes of host memory src into dst (this backend's memory) after the work
     * enqueued on the queue so far, without waiting for it: src may change once this
     * returns. Refused (STRATA_ERR_UNSUPPORTED) while the queue's stream is captured, where
     * a replay would copy whatever src holds then.
     */
    strata_status_t (*queue_write)(intra_queue_t *queue, void *dst, const void *src,
                                   size_t size);
    /** Copy size bytes of src (this backend's memory) into host memory dst once the work
     *  enqueued on the queue has run: complete on return, a host wait. */
    strata_status_t (*queue_read)(intra_queue_t *queue, void *dst, const void *src,
                                  size_t size);
    /** Set size bytes at dst to value after the work enqueued on the queue so far. */
    strata_status_t (*queue_fill)(intra_queue_t *queue, void *dst, int value, size_t size);
    /** Whether the queue's stream is being captured (stream_capturing). */
    strata_status_t (*queue_capturing)(const intra_queue_t *queue, bool *capturing_p);
    /** Start a MoE kernel; it has finished when queue_synchronize returns. */
    strata_status_t (*moe_launch)(intra_queue_t *queue, intra_moe_kernel_t kernel,
                                  const struct intra_moe_args *args);
    strata_status_t (*queue_synchronize)(intra_queue_t *queue);
    /** Blocks a launch uses when the caller does not say; 0: the rank's share of the cores. */
    unsigned default_blocks;
    /** Rate of the kernels' timer (kernel_timer), for their wait bounds. */
    uint64_t timer_ticks_per_us;
} intra_device_ops_t;

#include "heap/heap.h"
#include "moe/moe.h"

/** Backends compiled into this build, in preference order. */
size_t                    intra_device_count(void);
const intra_device_ops_t *intra_device_get(size_t index);

/** The backend called name ("host", "cuda", "hip"); NULL when not compiled in. */
const intra_device_ops_t *intra_device_find(const char *name);

#endif
