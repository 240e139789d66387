/*
 * inter: the inter-node tier, a host-proxy transfer engine. Requests from any thread enter
 * a lock-free ring; a proxy thread posts them over one or more rails (transport endpoints)
 * and polls their completion queues. Delivery is reliable but unordered: a target learns
 * that data arrived only by counting immediates. Large writes are cut into chunks striped
 * over the rails, each chunk carrying the immediate; sender and receiver compute the same
 * chunk count. Heartbeats turn a dead or silent peer into STRATA_ERR_PEER_FAILED for every
 * request that involves it, within the peer timeout. Other layers include only this header.
 */
#ifndef STRATA_INTER_ENGINE_H
#define STRATA_INTER_ENGINE_H

#include <strata/strata.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util_config.h"
#include "util/util_work_ring.h"

/* --- Striping ------------------------------------------------------------------------ */

/** Chunks never start on an offset that is not a multiple of this (cache line). */
#define INTER_STRIPE_ALIGNMENT 64

typedef struct inter_stripe_params {
    uint32_t num_rails;  /**< NICs the write may use, >= 1 */
    uint64_t min_chunk;  /**< no chunk smaller than this unless the write is */
    uint32_t max_chunks; /**< upper bound on chunks (and so on immediates) per write */
} inter_stripe_params_t;

typedef struct inter_chunk {
    uint32_t rail;   /**< index into the GPU's rail list */
    uint64_t offset; /**< from the start of the write */
    uint64_t length;
} inter_chunk_t;

/**
 * How many chunks a write of `length` bytes is cut into: a multiple of the rail count when
 * there is enough data, so rails carry equal shares. Deterministic: both sides of a write
 * call it with the same arguments. STRATA_ERR_INVALID on zero length or bad params.
 */
strata_status_t inter_stripe_num_chunks(const inter_stripe_params_t *params, uint64_t length,
                                        uint32_t *num_chunks_p);

/** Chunk `index` of a write cut into num_chunks (from inter_stripe_num_chunks). */
strata_status_t inter_stripe_chunk(const inter_stripe_params_t *params, uint64_t length,
                                   uint32_t num_chunks, uint32_t index, inter_chunk_t *chunk_p);

/* --- Engine ---------------------------------------------------------------------------- */

#define INTER_MAX_RAILS 8
#define INTER_IMM_MAX   65536u /* user immediates are 0..INTER_IMM_MAX-1 */
#define INTER_REQUESTS_DEFAULT 1024u
#define INTER_MAX_REQUESTS     (1u << 20)

/** Whose memory a registration covers. */
typedef enum inter_mem_kind {
    INTER_MEM_HOST = 0,
    INTER_MEM_CUDA = 1, /**< CUDA device memory (libfabric FI_HMEM_CUDA) */
    INTER_MEM_ROCM = 2, /**< ROCm device memory (FI_HMEM_ROCR) */
} inter_mem_kind_t;

typedef struct inter_engine  inter_engine_t;
typedef struct inter_mr      inter_mr_t;
typedef struct inter_request inter_request_t;

/** The order in which the chunks (and pages) of one write are posted. */
typedef enum inter_chunk_order {
    INTER_CHUNK_FORWARD = 0, /**< first chunk first */
    /** Test mode: last chunk first, as EFA SRD may deliver them; tcp never reorders, so
     *  this shows up code that expects the last chunk to land last. */
    INTER_CHUNK_REVERSE = 1,
} inter_chunk_order_t;

/** How heartbeats are sent. */
typedef enum inter_heartbeat_path {
    INTER_HEARTBEAT_AUTO = 0, /**< inject where the provider's inject size allows, else send */
    INTER_HEARTBEAT_SEND = 1, /**< always a registered send with a completion */
} inter_heartbeat_path_t;

/** Who drives the transports (STRATA_INTER_PROGRESS). */
typedef enum inter_progress {
    INTER_PROGRESS_AUTO   = 0, /**< caller where the process has fewer than 2 cores per rank
                                    of its node, else thread */
    INTER_PROGRESS_THREAD = 1, /**< a progress thread polls all the time */
    INTER_PROGRESS_CALLER = 2, /**< threads that wait (or test) progress; the thread wakes
                                    only to send heartbeats, or runs while work rings live */
} inter_progress_t;

typedef struct inter_engine_params {
    int         rank;
    int         world_size;
    char        transport[16];   /**< "auto", "ofi", "ucx" or "verbs" (inter/transport.h) */
    char        iface[64];       /**< interface (tcp) or device; "" for any; must exist */
    /** Preferred device of each rail (the rail plan's NICs); used when iface is "", and
     *  skipped for the default when the provider has no such device. "" entries: none. */
    char        rail_devices[INTER_MAX_RAILS][64];
    int         num_rails;       /**< endpoints to open, 1..INTER_MAX_RAILS (0: 1) */
    uint64_t    heartbeat_ns;    /**< interval between heartbeats to each peer */
    uint64_t    peer_timeout_ns; /**< silence after which a peer is failed */
    size_t      msg_size;        /**< largest send/recv message */
    /** Requests in flight at once, 1..INTER_MAX_REQUESTS (0: INTER_REQUESTS_DEFAULT): the
     *  pools submission takes from instead of allocating (see Requests below). */
    uint32_t    max_requests;
    uint64_t    stripe_min_chunk;
    uint32_t    stripe_max_chunks;
    /** Device memory the engine will be asked to register besides host memory
     *  (INTER_MEM_HOST: none); the transport asks its provider for it where offered. */
    inter_mem_kind_t device_memory;
    /** Forbid the transport's shared-memory path between ranks of a node (libfabric
     *  FI_OPT_SHARED_MEMORY_PERMITTED, UCX without its shared-memory transports);
     *  creation fails where that cannot be done. */
    bool        forbid_shared_memory;
    inter_chunk_order_t    chunk_order;
    inter_heartbeat_path_t heartbeat_path;
    inter_progress_t       progress;
    int         local_size;      /**< ranks on this node, for progress auto (0: 1) */
    /** Node of every rank (world_size entries, copied at create), or NULL: peers on this
     *  rank's node then go through a same-node transport (libfabric shm) where one opens. */
    const int  *rank_node;
    bool        same_node_network; /**< same-node peers over the network transport too */
    /** Pace submissions to each peer by its estimated delivery rate
     *  (STRATA_INTER_RATE_CONTROL; see inter_engine_peer_rate). */
    bool        rate_control;
    /** CPUs to pin the proxy thread to, in list form ("0-23,48-71": those nearest its NIC
     *  and GPU), within those the process may use; "" leaves it where it starts. */
    char        proxy_cpus[256];
    /** The NUMA node (the kernel's index) of those CPUs, where the memory the proxy polls
     *  should live (inter_engine_numa_node); -1 unknown. */
    int         proxy_numa_node;
    /** Called on the proxy thread as it starts, before it touches a transport: the caller
     *  binds it to the rank's GPU, whose runtime a provider may call; NULL: nothing. */
    void      (*proxy_start_fn)(void *ctx);
    void       *proxy_start_ctx;
    /** Exports device memory as a dma-buf (inter/transport.h), for transports that register
     *  GPU memory without a peer-memory module; NULL: none. */
    strata_status_t (*dmabuf_fn)(void *ctx, void *addr, size_t len, int *fd_p,
                                 uint64_t *offset_p);
    void       *dmabuf_ctx;
} inter_engine_params_t;

/** The STRATA_INTER_* variables. */
extern const util_config_table_t inter_config_table;

/** Each transport's own variables (those compiled in: STRATA_HAVE_UCX, STRATA_HAVE_VERBS,
 *  and STRATA_HAVE_CHAOS for the test builds' chaos transport). */
extern const util_config_table_t ofi_config_table;
extern const util_config_table_t verbs_config_table;
extern const util_config_table_t ucx_config_table;
extern const util_config_table_t chaos_config_table;

/** Parameters from STRATA_INTER_*; rank and world size are the caller's to set. */
strata_status_t inter_engine_params_from_env(inter_engine_params_t *params);

/** The check inter_engine_create makes first: STRATA_ERR_INVALID, with one log line
 *  naming every value, when a parameter is out of range. */
strata_status_t inter_engine_params_check(const inter_engine_params_t *params);

/** The cores this process may run on (its affinity mask), at least 1. */
int inter_engine_cores(void);

/** Whether the waiting threads drive progress for params->progress, given cores (pure):
 *  as asked, or for auto, where cores are fewer than 2 per rank of the node. */
bool inter_engine_progress_by_caller(const inter_engine_params_t *params, int cores);

strata_status_t inter_engine_create(const inter_engine_params_t *params, inter_engine_t **engine_p);

/** Bytes of this rank's address blob; equal on every rank with equal parameters. */
size_t          inter_engine_address_size(const inter_engine_t *engine);
strata_status_t inter_engine_address(const inter_engine_t *engine, void *blob);

/**
 * Wire up every rank from their blobs (world_size blobs, rank order, as an allgather gives)
 * and start the proxy thread. Collective: returns once every peer has been heard from, so
 * the provider's connections to all of them are made; STRATA_ERR_PEER_FAILED if a peer
 * fails or stays silent for the peer timeout first (destroy the engine then).
 */
strata_status_t inter_engine_connect(inter_engine_t *engine, const void *blobs);

/**
 * One round of progress (submissions, posts, completions, heartbeats) unless another
 * thread is in one; returns the work it did. Waits call it in caller mode; any thread may.
 */
int inter_engine_progress(inter_engine_t *engine);

/** The progress thread's name (/proc/<pid>/task/<tid>/comm). */
#define INTER_PROGRESS_THREAD_NAME "strata-progress"

/** Whether waiting threads drive progress (STRATA_INTER_PROGRESS resolved). */
bool inter_engine_caller_progress(const inter_engine_t *engine);

/**
 * Stop the proxy, close the rails and free every request, given back or not: requests and
 * registrations are invalid afterwards. Tolerates NULL.
 */
void inter_engine_destroy(inter_engine_t *engine);

int         inter_engine_num_rails(const inter_engine_t *engine);
/** The NUMA node memory the proxy polls should be on (params.proxy_numa_node), -1 unknown. */
int         inter_engine_numa_node(const inter_engine_t *engine);
const char *inter_engine_transport_name(const inter_engine_t *engine);
/** The transport that carries this rank's traffic with peer (its first rail's name). */
const char *inter_engine_peer_transport_name(const inter_engine_t *engine, int peer);
bool        inter_engine_has_read(const inter_engine_t *engine);
/** The silence after which a peer is declared failed. */
uint64_t    inter_engine_peer_timeout_ns(const inter_engine_t *engine);
/** The largest message a send carries (params.msg_size). */
size_t      inter_engine_msg_size(const inter_engine_t *engine);
/** Whether peer has been declared failed (by heartbeat silence or a transport error). */
bool        inter_engine_peer_failed(const inter_engine_t *engine, int peer);
/** Whether peer said it is leaving (its engine is being destroyed): calls that name it fail
 *  with STRATA_ERR_PEER_FAILED, and its silence past the peer timeout is no news. */
bool        inter_engine_peer_left(const inter_engine_t *engine, int peer);

/** Rate control towards one peer, as the proxy estimates it (inter_engine_peer_rate). */
typedef struct inter_peer_rate {
    double   rate_Bps;        /**< estimated delivery rate, bytes per second (0: no sample yet) */
    uint64_t rtt_ns;          /**< base round trip: the least seen recently (0: none yet) */
    uint64_t window_bytes;    /**< bytes allowed in flight to the peer now */
    uint64_t in_flight_bytes; /**< bytes posted and not yet completed */
    uint64_t paced;           /**< operations held back by the window so far */
} inter_peer_rate_t;

/**
 * The delivery rate, base RTT and window the engine keeps for peer, from the local
 * completions of what this rank posted to it (writes, reads, sends, work ring commands;
 * docs/engine.md, "Rate control"). Estimated with rate control off too; the window is then
 * UINT64_MAX and nothing is held (paced 0). Any thread, without waiting for the proxy: each
 * figure is one the proxy held, the five not necessarily from the same instant.
 * STRATA_ERR_INVALID, with a log line, for a peer out of range.
 */
strata_status_t inter_engine_peer_rate(inter_engine_t *engine, int peer, inter_peer_rate_t *rate_p);

#define INTER_MAX_FAILURE_WATCHES 64
/**
 * Have the proxy store STRATA_ERR_PEER_FAILED into *word as soon as any peer fails (at once
 * if one has): for waits outside the engine that must end when a rank dies, yet not while
 * it is alive, such as a node's kernels spinning on a peer's flag. The word may be memory a
 * GPU reads (mapped pinned host memory); it is written with a release store. STRATA_ERR_BUSY
 * when INTER_MAX_FAILURE_WATCHES words are watched already.
 */
strata_status_t inter_engine_watch_failures(inter_engine_t *engine, int32_t *word);
/** The same for the failures of n of the engine's ranks only (copied), for the members of a
 *  communicator that outlived others on this engine: a failure of any other rank leaves
 *  the word alone. */
strata_status_t inter_engine_watch_failures_of(inter_engine_t *engine, int32_t *word,
                                               const int *ranks, int n);
/** Stop watching word (tolerates one not watched); the proxy no longer writes it on return. */
void            inter_engine_unwatch_failures(inter_engine_t *engine, int32_t *word);

/* --- Memory -------------------------------------------------------------------------- */

/** What a peer needs to write into or read from a registered region; plain bytes. */
typedef struct inter_rdesc {
    uint32_t magic;
    uint32_t num_rails;
    uint64_t base;      /**< address of the range's first byte at its owner */
    uint64_t length;    /**< bytes of the range */
    uint64_t mr_offset; /**< the range's start in its registration */
    uint64_t keys[INTER_MAX_RAILS + 1]; /**< per network rail, then the same-node one */
    uint32_t has_local; /**< keys[INTER_MAX_RAILS] is set */
    uint32_t reserved;
} inter_rdesc_t;

/** Register host memory [addr, addr+len) on every rail. Thread-safe. */
strata_status_t inter_engine_mem_register(inter_engine_t *engine, void *addr, size_t len,
                                          inter_mr_t **mr_p);
/** Whether every rail's transport can register memory of this kind (host: always). */
bool            inter_engine_can_register(const inter_engine_t *engine, inter_mem_kind_t kind);
/**
 * Register memory of a kind, on GPU device `device` for device memory. STRATA_ERR_UNSUPPORTED
 * (without a log line) where inter_engine_can_register says no. Thread-safe.
 */
strata_status_t inter_engine_mem_register_kind(inter_engine_t *engine, void *addr, size_t len,
                                               inter_mem_kind_t kind, int device,
                                               inter_mr_t **mr_p);
/**
 * Only once no request uses the region. A request failed with STRATA_ERR_PEER_FAILED may
 * still have an operation with the transport (the peer vanished mid-flight): keep its
 * memory registered until the engine is destroyed. Tolerates NULL.
 */
void            inter_engine_mem_deregister(inter_engine_t *engine, inter_mr_t *mr);
void            inter_engine_mem_descriptor(const inter_mr_t *mr, inter_rdesc_t *desc_p);
/** A descriptor of [offset, offset + length) of a registration (what a peer may reach). */
void            inter_engine_mem_range(const inter_mr_t *mr, size_t offset, size_t length,
                                       inter_rdesc_t *desc_p);

/**
 * For memory a failed peer's operation may still reach: the engine deregisters mr and calls
 * free_fn(ptr) in inter_engine_destroy, once its endpoints are shut down. Thread-safe.
 */
void inter_engine_mem_release_late(inter_engine_t *engine, inter_mr_t *mr, void *ptr,
                                   void (*free_fn)(void *ptr));

/* --- Requests -------------------------------------------------------------------------- */

/**
 * Every operation returns a request (set only on success) that completes asynchronously.
 * Bad input (unknown or failed peer, unregistered or out-of-range memory, a length past the
 * remote region, zero or oversized length, an immediate out of range) is refused with a
 * status and one log line, and no request is made.
 *
 * Submission allocates nothing (a list write's extents are the caller's allocation, handed
 * over): requests, their operations (one per chunk, page or scatter
 * target) and send copies come from pools sized at creation (max_requests; operations for
 * every request to be a write cut into stripe_max_chunks, plus world_size; send copies of
 * msg_size, as many as fit in 16 MiB but at least 64 and at most max_requests). When one
 * is empty the call returns STRATA_ERR_BUSY and makes no request: retry once requests
 * complete and are given back (waiting on one of this caller's own requests is progress;
 * a given-back request returns to the pool within the proxy's next rounds). A request that
 * needs more operations than the pool holds at all (a paged write or scatter that large) is
 * refused with STRATA_ERR_INVALID and one log line: cut it into smaller ones, or raise
 * max_requests. The engine's own requests (barrier, work ring attach and detach) wait for
 * room instead, within their timeout.
 */

/** Write len bytes; with_imm: the target counts imm once per chunk (inter_engine_write_chunks). */
strata_status_t inter_engine_write(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                   size_t loff, const inter_rdesc_t *rdesc, size_t roff,
                                   size_t len, bool with_imm, uint32_t imm,
                                   inter_request_t **req_p);

/**
 * Paged write: page i goes from lmr offset src_pages[i] * stride to rdesc offset
 * dst_pages[i] * stride, page_size bytes each; with_imm counts once per page.
 */
strata_status_t inter_engine_write_paged(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                         const inter_rdesc_t *rdesc, const uint32_t *src_pages,
                                         const uint32_t *dst_pages, uint32_t num_pages,
                                         size_t page_size, size_t stride, bool with_imm,
                                         uint32_t imm, inter_request_t **req_p);

/** One source to many peers: rdescs[i] at roffs[i] on peers[i]; one request for all. */
strata_status_t inter_engine_write_scatter(inter_engine_t *engine, const int *peers,
                                           int num_peers, const inter_mr_t *lmr, size_t loff,
                                           const inter_rdesc_t *rdescs, const size_t *roffs,
                                           size_t len, bool with_imm, uint32_t imm,
                                           inter_request_t **req_p);

/** One piece of a list write: len bytes from lmr offset loff to the remote offset roff. */
typedef struct inter_extent {
    size_t loff;
    size_t roff;
    size_t len;
} inter_extent_t;

/**
 * List write: every extent to peer in one request, each cut into chunks striped over the
 * pair's rails as inter_engine_write cuts one write, through at most a bounded number of
 * operations at once (the proxy fills each again with the next chunk as it completes, so a
 * list may be longer than the pools). extents: malloc'd, owned by the engine from the call
 * on (freed with the request, or at once where the call fails). with_imm: once every
 * chunk has completed, one 8-byte write to the peer's engine control word per rail of the
 * pair carries imm, so the target counts inter_engine_list_imm_count(peer) of them, each
 * after that rail's data; no chunk carries it. After an error the immediates do not go.
 */
strata_status_t inter_engine_write_list(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                        const inter_rdesc_t *rdesc, inter_extent_t *extents,
                                        uint32_t num_extents, bool with_imm, uint32_t imm,
                                        inter_request_t **req_p);
/** Immediates the target of a list write with an immediate counts: the pair's rails. */
uint32_t        inter_engine_list_imm_count(const inter_engine_t *engine, int peer);

/** RDMA read; STRATA_ERR_UNSUPPORTED where the transport has none. */
strata_status_t inter_engine_read(inter_engine_t *engine, int peer, const inter_mr_t *lmr,
                                  size_t loff, const inter_rdesc_t *rdesc, size_t roff,
                                  size_t len, inter_request_t **req_p);

/** Message of at most msg_size bytes from any memory (copied at submission). */
strata_status_t inter_engine_send(inter_engine_t *engine, int peer, const void *buf, size_t len,
                                  inter_request_t **req_p);

/** Receive into buf (cap bytes) a message from peer, or from anyone with peer -1. */
strata_status_t inter_engine_recv(inter_engine_t *engine, int peer, void *buf, size_t cap,
                                  inter_request_t **req_p);

/**
 * The same on a channel of the library's own (channel > 0): a message sent on a channel is
 * received only by a receive on that channel, never by the user's (channel 0), and the
 * other way round. What the bootstrap of a split communicator talks over.
 */
strata_status_t inter_engine_send_on(inter_engine_t *engine, uint32_t channel, int peer,
                                     const void *buf, size_t len, inter_request_t **req_p);
strata_status_t inter_engine_recv_on(inter_engine_t *engine, uint32_t channel, int peer,
                                     void *buf, size_t cap, inter_request_t **req_p);

/** STRATA_INPROGRESS until done, then the request's final status. */
strata_status_t inter_request_test(const inter_request_t *req);
/** Wait up to timeout_ns; STRATA_ERR_TIMEOUT leaves the request running. */
strata_status_t inter_request_wait(const inter_request_t *req, uint64_t timeout_ns);
/** For a completed recv: bytes received and the sender. */
size_t          inter_request_length(const inter_request_t *req);
int             inter_request_source(const inter_request_t *req);
/** Have inter_request_source report a receive's sender as ranks[sender] (ranks: one entry
 *  per rank of the engine, kept by the caller until the request is freed), for a
 *  communicator that numbers the engine's ranks its own way. */
void            inter_request_report_source(inter_request_t *req, const int *ranks);
/**
 * Cancel: parts not yet posted are never posted; the request completes with
 * STRATA_ERR_CANCELLED (bytes already in flight may still land). No effect once done.
 */
void            inter_request_cancel(inter_request_t *req);
/** Give the request back; the engine frees it once nothing refers to it. Tolerates NULL. */
void            inter_request_free(inter_request_t *req);

/* --- Immediates and barrier ------------------------------------------------------------------- */

/** The largest piece a work ring's producers should cut a transfer into: the striping
 *  chunk, within the transport's largest message; the same on every rank. */
uint64_t inter_engine_chunk_bytes(const inter_engine_t *engine);

/** How many immediates a write of len bytes from this rank produces at peer. */
uint32_t inter_engine_write_chunks(const inter_engine_t *engine, int peer, size_t len);

/**
 * Wait until imm has arrived count times, and consume them. from_peer (or -1 for any peer)
 * names who writes: its failure ends the wait with STRATA_ERR_PEER_FAILED.
 */
strata_status_t inter_engine_imm_wait(inter_engine_t *engine, uint32_t imm, uint64_t count,
                                      int from_peer, uint64_t timeout_ns);
/** The same, failing where any of peers[0..n) (and no other rank) fails first: for a
 *  communicator over some of the engine's ranks. */
strata_status_t inter_engine_imm_wait_from(inter_engine_t *engine, uint32_t imm, uint64_t count,
                                           const int *peers, int n, uint64_t timeout_ns);

typedef void (*inter_imm_fn_t)(void *arg, uint32_t imm, strata_status_t status);

/**
 * Call fn from the proxy thread once imm has arrived count times (consuming them), or with
 * STRATA_ERR_PEER_FAILED if from_peer fails first. One callback per immediate at a time
 * (a second is called with STRATA_ERR_BUSY). Holds a pooled request until it is called:
 * STRATA_ERR_BUSY from this call (fn never called) when the pool is empty.
 */
strata_status_t inter_engine_imm_notify(inter_engine_t *engine, uint32_t imm, uint64_t count,
                                        int from_peer, inter_imm_fn_t fn, void *arg);

/**
 * Barrier over peers[0..n) (this rank among them), by immediates: every member writes to
 * every other. Members call barriers over a group in the same order. Waits for a pooled
 * request while all are in flight; STRATA_ERR_BUSY if none came back within timeout_ns.
 */
strata_status_t inter_engine_barrier(inter_engine_t *engine, const int *peers, int n,
                                     uint64_t timeout_ns);

/* --- Device-producer work rings ------------------------------------------------------------ */

#define INTER_RING_MAX_REGIONS 4

typedef struct inter_ring inter_ring_t;

/**
 * A work ring (util/util_work_ring.h) the proxy drains: kernels (or any thread) write
 * commands into it, the proxy posts them as RDMA writes and reads and raises the ring's
 * completion counters; immediates imm_base .. imm_base + num_imms - 1 are counted in the
 * ring instead of the engine (inter_engine_imm_wait does not see them). The failure of any
 * peer, or a command that is not valid, sets the ring's failure word, which producers and
 * waiters poll. A command is posted whole, on one rail.
 */
typedef struct inter_ring_params {
    util_work_ring_t    *mem;          /**< util_work_ring_bytes() bytes the proxy can reach */
    uint32_t             slots;        /**< a power of two, 2..65536 */
    uint32_t             num_counters;
    uint32_t             num_imms;
    uint32_t             imm_base;     /**< imm_base + num_imms <= INTER_IMM_MAX */
    int                  num_regions;  /**< 1..INTER_RING_MAX_REGIONS */
    /** Local region r of a command (offsets count from region_offsets[r] in it), and
     *  [world] descriptors of every rank's region r. */
    const inter_mr_t    *regions[INTER_RING_MAX_REGIONS];
    size_t               region_offsets[INTER_RING_MAX_REGIONS];
    const inter_rdesc_t *remote[INTER_RING_MAX_REGIONS];
    /** The ring's peers, for a communicator over some of the engine's ranks: a command's
     *  peer p is the engine's rank peers[p] (num_peers of them, copied; remote[r] holds
     *  num_peers descriptors, in that order), and only a failure of one of them fails the
     *  ring. NULL: every rank, p itself (remote[r] holds world_size). */
    const int           *peers;
    int                  num_peers;
    bool                 host_stamps;  /**< command stamps are util_clock_now_ns() */
    /** Called by the proxy, where the network writes into memory whose readers must be told
     *  only once those writes are visible to them (GPU memory under GPUDirect RDMA), before
     *  it raises counts for what arrived; NULL where none is needed. */
    void               (*flush_fn)(void *ctx);
    void                *flush_ctx;
    /** The flush any NIC gives, for memory whose device has none of its own: before it
     *  raises the counts of what the network wrote into region 0 (immediates that landed,
     *  reads that completed), the proxy reads one word of that region from itself on every
     *  rail that wrote, and raises those counts only once all the reads have completed.
     *  PCIe orders the read behind the rail's writes into the memory, as NCCL flushes
     *  GPUDirect RDMA. Counts wait one loopback read longer. Needs
     *  inter_engine_can_flush_by_read. */
    bool                 flush_by_read;
} inter_ring_params_t;

typedef struct inter_ring_stats {
    uint64_t commands;     /**< posted so far */
    uint64_t stamped;      /**< of those, with a stamp on the host clock */
    uint64_t delay_ns;     /**< sum over stamped commands of publish-to-post time */
    uint64_t max_delay_ns;
    uint64_t flushes;      /**< loopback reads completed (flush_by_read) */
} inter_ring_stats_t;

/** Whether every network rail can flush by a loopback read (inter_ring_params_t). */
bool inter_engine_can_flush_by_read(const inter_engine_t *engine);

/**
 * Initialise params->mem (zeroed, credit = slots) and hand the ring to the proxy. Ranges of
 * immediates of two attached rings must not overlap (STRATA_ERR_BUSY).
 */
strata_status_t inter_engine_ring_attach(inter_engine_t *engine, const inter_ring_params_t *params,
                                         inter_ring_t **ring_p);
/**
 * Take the ring from the proxy: once this returns the proxy no longer reads or writes its
 * memory; commands still in flight finish inside the engine (at the latest at its destroy).
 * Tolerates NULL.
 */
void inter_engine_ring_detach(inter_engine_t *engine, inter_ring_t *ring);
/** Thread-safe snapshot of the proxy's figures for the ring. */
void inter_ring_stats(const inter_ring_t *ring, inter_ring_stats_t *stats_p);

#endif
