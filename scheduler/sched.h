/*
 * scheduler: MoE step planning and execution. The plan of a rank's tokens (by peer, each
 * token once per destination) and the two-tier MoE object: it sets up the node's heap, the
 * registered network area and the engine's work ring, and launches the step, whose kernels
 * (the intra tier's and the network ones) move every row and post every transfer: flat or
 * hierarchical routes, two-round speculative dispatch, Pull by read or request. Other
 * layers include only this header.
 */
#ifndef STRATA_SCHEDULER_SCHED_H
#define STRATA_SCHEDULER_SCHED_H

#include <strata/strata.h>

#include <stdbool.h>
#include <stdint.h>

#include "inter/engine.h"
#include "intra/intra.h"
#include "util/util_config.h"

/* --- Two-tier MoE ------------------------------------------------------------------------- */

typedef struct sched_moe sched_moe_t;
/** A rank's plan for one routing: the public layout handle. */
typedef struct strata_moe_layout sched_plan_t;

/** Where the MoE object runs: the communicator's view of the ranks, and its tiers. */
typedef struct sched_moe_world {
    int                            rank;
    int                            world_size;
    int                            num_nodes;
    const int                     *rank_node;  /**< [world_size], copied */
    const int                     *rank_local; /**< [world_size], copied */
    inter_engine_t                *engine;
    /** The engine's rank of each rank ([world_size], kept, not copied: the communicator's,
     *  which outlives the object), for a communicator on another's engine; NULL: the same. */
    const int                     *engine_ranks;
    const struct intra_device_ops *device;
    const char                    *job_key;    /**< the same on every rank, unique per object */
    /** INTRA_HEAP_SECRET_LEN random bytes, the same on every rank of the node: what admits
     * a process to the node's heap. Used once, not kept. */
    const unsigned char           *heap_secret;
    uint64_t                       peer_timeout_ns; /**< the engine's heartbeat bound */
    /** The object's immediates: imm_base .. imm_base + sched_moe_imm_count(world) - 1. */
    uint32_t                       imm_base;
    strata_allgather_fn_t          allgather;  /**< collective over all ranks */
    void                          *allgather_ctx;
} sched_moe_world_t;

/** How many immediates an object over world_size ranks counts. */
uint32_t sched_moe_imm_count(int world_size);

/** The STRATA_MOE_* variables. */
extern const util_config_table_t sched_moe_config_table;

/** Collective over all ranks (see strata_moe_create). */
strata_status_t sched_moe_create(const strata_moe_params_t *params, const sched_moe_world_t *world,
                                 sched_moe_t **moe_p);
/** See strata_moe_memory_estimate: local, allocates nothing of the object's. */
strata_status_t sched_moe_estimate(const strata_moe_params_t *params, int world_size,
                                   int num_nodes, strata_moe_memory_t *memory_p);
/** The largest capacity factor accepted (STRATA_MOE_CAPACITY_FACTOR, the estimate's). */
#define SCHED_MAX_LOAD_FACTOR 1e6
/** See strata_moe_load_capacity. */
strata_status_t sched_load_capacity(const strata_moe_params_t *params, int world_size,
                                    double factor, int *capacity_p);
/** The capacity an object of params on world_size ranks takes where params->capacity is 0,
 *  as STRATA_MOE_CAPACITY_FACTOR and the exchange decide (0: the most an expert can
 *  receive, which the object works out itself). */
strata_status_t sched_default_capacity_of(const strata_moe_params_t *params, int world_size,
                                          int *capacity_p);
/** After a failed step the network area goes to the engine to release at its destroy. */
void            sched_moe_destroy(sched_moe_t *moe);

/**
 * Plan num_tokens tokens. skip_bad: a bad expert id becomes -1 and the plan is still made
 * (with STRATA_ERR_INVALID); otherwise it is refused.
 */
strata_status_t sched_plan_create(const sched_moe_t *moe, const int64_t *topk_idx, int num_tokens,
                                  bool skip_bad, sched_plan_t **plan_p);
void            sched_plan_destroy(sched_plan_t *plan);
/**
 * The object's own plan (owned by it, reused step after step: no allocation), refilled for
 * num_tokens tokens between steps; bad ids become -1 and the plan says so (the step then
 * returns STRATA_ERR_INVALID). With a stream, waits first for the device to finish with the
 * last one. STRATA_ERR_INVALID for a bad count or a step in progress.
 */
strata_status_t sched_plan_refill(sched_moe_t *moe, const int64_t *topk_idx, int num_tokens,
                                  const sched_plan_t **plan_p);

/**
 * Expert ids (sched_experts.c). After creation and before any step, an object can take the
 * ids of the object it replaces: global_experts of them, owner[e] the rank that holds
 * expert e (each rank at most experts_per_rank of them, in increasing id), or -1: masked.
 */
strata_status_t sched_moe_map_experts(sched_moe_t *moe, int global_experts, const int32_t *owner);
/** The caller's number of experts, and the id of this rank's local expert (-1: none there). */
int             sched_moe_global_experts(const sched_moe_t *moe);
int             sched_moe_expert_id(const sched_moe_t *moe, int local);
/** The id of local expert 0 where this rank's ids follow on from it, else -1. */
int             sched_moe_first_expert(const sched_moe_t *moe);
/** The rank that holds the caller's expert, -1 if none (masked, or no such expert). */
int             sched_moe_expert_owner(const sched_moe_t *moe, int expert);
/** Per token of plan (NULL: the last strata_moe_dispatch's), its slots that named a masked
 *  expert; and their sum. Either output may be NULL. */
strata_status_t sched_moe_masked(const sched_moe_t *moe, const sched_plan_t *plan,
                                 int32_t *per_token, int64_t *slots_p);
/** The params the object was made with (mode_file: its own copy, valid while it lives). */
void            sched_moe_params(const sched_moe_t *moe, strata_moe_params_t *params_p);
/** An object made again (strata_moe_recreate) for a caller who gave capacity 0: its own
 *  capacity was worked out for it, and a later recreation works it out again. */
void            sched_moe_set_capacity_asked(sched_moe_t *moe, int capacity);

strata_status_t sched_moe_set_pull_mask(sched_moe_t *moe, const uint64_t *dispatch_mask,
                                        const uint64_t *combine_mask);
/**
 * Start a step. An input that cannot go out (no layout or another object's, no x or x
 * misaligned, x_scales given or missing against the dtype) still starts it, with no tokens
 * from this rank, and returns STRATA_ERR_INVALID: the other ranks are in the step already.
 * The rest of the step then runs as usual, and combine_recv returns STRATA_ERR_INVALID too.
 * A call out of order starts nothing.
 */
strata_status_t sched_moe_dispatch_send(sched_moe_t *moe, const sched_plan_t *plan,
                                        const void *x, const float *x_scales);
/** No step in progress. */
bool            sched_moe_idle(const sched_moe_t *moe);
/** A step was started by dispatch_send and waits for dispatch_recv. */
bool            sched_moe_dispatch_pending(const sched_moe_t *moe);
strata_status_t sched_moe_dispatch_recv(sched_moe_t *moe, strata_moe_recv_t *recv_p);
/** See strata_moe_dispatch_recv_into. */
strata_status_t sched_moe_dispatch_recv_into(sched_moe_t *moe, void *x, float *x_scales,
                                             strata_moe_source_t *src, int64_t rows);
/** strata_moe_expert_wait: local expert `expert`'s rows of the step are all in. */
strata_status_t sched_moe_expert_wait(sched_moe_t *moe, int expert, int64_t timeout_ns,
                                      int32_t *rows_p);
/** strata_moe_expert_wait_stream: the same, as a wait enqueued on the caller's stream. */
strata_status_t sched_moe_expert_wait_stream(sched_moe_t *moe, int expert, void *stream);
/** strata_moe_dispatch_counts: the rows each local expert was sent in the step. */
strata_status_t sched_moe_dispatch_counts(sched_moe_t *moe, int64_t timeout_ns,
                                          int32_t *counts);
strata_status_t sched_moe_combine_send(sched_moe_t *moe, const void *expert_y);
strata_status_t sched_moe_combine_recv(sched_moe_t *moe, const float *topk_weights, void *out);
/** End the step in progress on this rank with the halves its peers wait for (see
 *  strata_moe_abort_step); nothing in progress: STRATA_OK. */
strata_status_t sched_moe_abort_step(sched_moe_t *moe);
void            sched_moe_stats(const sched_moe_t *moe, strata_moe_stats_t *stats_p);
/** Launch on the caller's stream (GPU backends); NULL: every half waits for its kernels. */
strata_status_t sched_moe_set_stream(sched_moe_t *moe, void *stream);
/** Wait for everything launched; the first error the kernels found. */
strata_status_t sched_moe_synchronize(sched_moe_t *moe);

/* --- Per-expert modes decided by the experts' owners -------------------------------------- */

/** What a decider needs to know of the object. */
typedef struct sched_moe_shape {
    int           num_local_experts;
    int           num_nodes;
    int           node;      /**< this rank's */
    int           rank;      /**< this rank's in the object's communicator */
    size_t        row_bytes; /**< one token row on the wire */
    strata_moe_mode_t mode;  /**< resolved from the params and STRATA_MOE_MODE */
    strata_moe_exchange_t exchange; /**< resolved from the params and STRATA_MOE_EXCHANGE */
    int           capacity_asked; /**< params.capacity as given (0: from the world, the load) */
    const char   *mode_file; /**< FIXED: the mask file; ADAPTIVE: a policy file, or NULL */
} sched_moe_shape_t;

void sched_moe_shape(const sched_moe_t *moe, sched_moe_shape_t *shape_p);

/**
 * The owner's side of adaptive modes (implemented by the adaptive layer). After each step's
 * dispatch the scheduler calls decide with tokens[num_local_experts][num_nodes], the rows
 * each of this rank's experts received from each node; decide sets pull_p[e] to the mode
 * the expert should move in. The scheduler publishes the answer with the next step's
 * counts, and every rank moves the expert in that mode in the step after.
 */
typedef struct sched_mode_decider_ops {
    void (*decide)(void *ctx, const int32_t *tokens, bool *pull_p);
    void (*destroy)(void *ctx);
} sched_mode_decider_ops_t;

/**
 * Give the object a decider before its first step; every rank of the object must. initial
 * is every expert's mode until the decisions arrive. ctx is the object's from now on, also
 * on error. The owners decide on the host, so in adaptive mode dispatch_recv waits for the
 * step's dispatch even with a stream.
 */
strata_status_t sched_moe_set_decider(sched_moe_t *moe, const sched_mode_decider_ops_t *ops,
                                      void *ctx, bool initial_pull);

/** What sched_moe_probe times. */
typedef enum sched_probe {
    SCHED_PROBE_COPY,  /**< a copy in the device backend's memory */
    SCHED_PROBE_WRITE, /**< an RDMA write to a rank on another node, to its completion */
    SCHED_PROBE_READ,  /**< an RDMA read from it */
} sched_probe_t;

/** The largest probe of kind; 0 where there is none (one node, no read). */
size_t          sched_moe_probe_max(const sched_moe_t *moe, sched_probe_t kind);
/** Time one transfer of bytes (<= sched_moe_probe_max) before the object's first step:
 *  it uses buffers no other rank touches until then. A failed probe fails the object. */
strata_status_t sched_moe_probe(sched_moe_t *moe, sched_probe_t kind, size_t bytes,
                                uint64_t *ns_p);

#endif
