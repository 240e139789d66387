/*
 * The two-tier MoE object's parts, shared by the scheduler's sources, split by lifetime:
 * the fixed geometry, the network area and work ring, the modes, and the state of the step
 * in progress; and the plan of a rank's tokens.
 */
#ifndef STRATA_SCHEDULER_SCHED_INTERNAL_H
#define STRATA_SCHEDULER_SCHED_INTERNAL_H

#include "sched.h"
#include "util/util.h"

#include <stdatomic.h>

#define SCHED_MASK_WORDS (INTRA_MOE_MAX_EXPERTS / 64) /* of a node's experts */

/*
 * What never changes after creation: the shape of the work and who talks to whom. Computed
 * by sched_geometry_init from the params and the world alone, so the plan can be tested
 * without a communicator.
 */
typedef struct sched_geometry {
    int                rank, world_size, num_nodes, node;
    const int         *rank_node;   /* [world_size] */
    const int         *rank_local;  /* [world_size] */
    strata_moe_route_t route;
    bool               node_reduce; /* combine: one partial row per token and node */
    bool               exact;       /* the exact receive: rows into the caller's buffers */
    int                num_experts, topk, max_tokens, capacity;
    int                local_size;
    int                experts_per_rank;
    int                experts_per_node;
    int               *node_ranks;  /* [num_nodes][local_size] global rank */
    int                num_peers;
    int               *peers;       /* [num_peers] ranks this rank exchanges tokens with */
    int               *peer_index;  /* [world_size] index in peers, or -1 */
    int                max_aug;     /* own tokens plus every peer's */
    /* The streamed exchange (sched_geometry_window): across nodes a step's dispatch crosses
     * the network in `rounds` rounds of window_tokens of every rank's own tokens (one round
     * of max_tokens otherwise, and on one node). */
    bool               streamed;
    int                window_tokens, rounds;
    int                header_counts; /* rounds > 1: the step's counts a first round's
                                       * header carries, one per expert of a node */
    int                max_entries; /* a plan's entries: tokens x min(peers, topk) */
    int                spec_tokens;
    int                scale_count;
    size_t             row_bytes, scale_bytes, record_bytes, entry_bytes, y_row_bytes;
    size_t             header_bytes, board_bytes;
    int                mask_words;  /* of a global expert mask */
    int                own_words;   /* of this rank's experts' bits */
} sched_geometry_t;

/* How the network's writes into the heap are made visible before the kernels hear of them
 * (STRATA_MOE_FLUSH; the values are its names' order). */
typedef enum sched_flush {
    SCHED_FLUSH_AUTO   = 0, /* as chosen: device where it can, else read; none on the host */
    SCHED_FLUSH_DEVICE = 1, /* the GPU's own flush (intra_device_ops_t.flush_remote_writes) */
    SCHED_FLUSH_READ   = 2, /* a loopback read per rail (inter_ring_params_t.flush_by_read) */
    SCHED_FLUSH_NONE   = 3  /* the memory needs none: host memory, or the bounce buffer */
} sched_flush_t;

/* What the STRATA_MOE_* variables choose for an object's params. */
typedef struct sched_choices {
    strata_moe_route_t   route;
    strata_moe_combine_t combine;
    bool                 combine_from_env; /* params.combine left it to STRATA_MOE_COMBINE */
    int                  spec_tokens; /* round one's tokens per destination */
    int                  net_memory;  /* 0 auto, 1 heap, 2 bounce */
    sched_flush_t        flush;       /* as asked: auto, device or read */
    uint32_t             ring_slots;  /* of the work ring, a power of two */
    double               capacity_factor; /* STRATA_MOE_CAPACITY_FACTOR; 0: none */
    bool                 streamed;     /* params.exchange, else STRATA_MOE_EXCHANGE (auto:
                                          * the exact receive streams) */
    uint64_t             window_bytes; /* STRATA_MOE_WINDOW_BYTES */
} sched_choices_t;

/** rank_node and rank_local are the caller's and must outlive the geometry. */
strata_status_t sched_geometry_init(sched_geometry_t *geo, const strata_moe_params_t *params,
                                    const sched_moe_world_t *world, strata_moe_route_t route,
                                    int spec_tokens);
/** The exchange's rounds: streamed (across nodes), as many own tokens per round as a
 *  round's network areas (dispatch and returns, and with node-reduce the weights) hold in
 *  window_bytes (at least one); else one round. */
void            sched_geometry_window(sched_geometry_t *geo, bool streamed,
                                      uint64_t window_bytes, bool node_reduce);
void            sched_geometry_cleanup(sched_geometry_t *geo);

/* Offsets in the network area, the same on every rank. */
typedef struct sched_net_offsets {
    size_t headers, grants, out_headers, out_grants, spec, overflow, staging, ret_out, ret_in;
    size_t w_out, w_in; /* node-reduce only: the weights of the tokens sent, and received */
    size_t ret_out_block; /* one peer's block in ret_out */
    size_t ret_out_bytes; /* ret_out: every peer's block (also the heap's stage for them) */
    size_t ret_in_bytes;  /* ret_in: the blocks of every peer, one after the other */
    int    entry_terms; /* the most terms an entry has at its receiver */
    size_t total;
} sched_net_offsets_t;

/*
 * The network area, registered with the engine, and the work ring the kernels feed. The
 * area lives in the node's heap when the engine can register the heap's memory (then the
 * whole heap region is registered); otherwise in a pinned host bounce buffer.
 */
typedef struct sched_net {
    sched_net_offsets_t offsets;
    bool               bounce;
    bool               heap_required; /* STRATA_MOE_NET_MEMORY=heap: no falling back */
    sched_flush_t      flush;         /* of the heap's area: device, read or none */
    uint32_t           ring_slots;    /* of the work ring (STRATA_MOE_RING_SLOTS) */
    char              *area;        /* device address */
    size_t             area_heap;   /* its offset in the heap (not bounce) */
    void              *bounce_host; /* the bounce buffer, host view */
    inter_mr_t        *mr;          /* the heap region, or the bounce buffer */
    int                device;      /* the GPU whose memory the heap is (0 on the host) */
    size_t             mr_offset;   /* of the area in mr */
    inter_rdesc_t     *desc;        /* [world] */
    util_work_ring_t  *ring_host;
    util_work_ring_t  *ring_dev;
    inter_ring_t      *ring;
    uint64_t           chunk_bytes;
    /* Device memory the network kernels keep. */
    void              *device_mem;  /* one allocation holding the tables below */
    intra_net_state_t *state;
    intra_net_peer_t  *peers;       /* [num_peers] */
    uint64_t          *ticket;
    int32_t           *slot_of;     /* [max_entries] */
    uint64_t          *term_src;    /* [max_tokens][topk] */
    int64_t           *aug_entry;   /* [max_aug] */
    int64_t           *aug_topk;    /* [max_aug][topk] */
    int32_t           *num_aug;
    uint64_t          *mask;        /* [mask_words] */
    int32_t           *node_ranks;  /* [world] */
    int32_t           *rank_node;   /* [world] */
    int64_t           *round_seg;   /* streamed: [rounds][num_peers + 1][3] */
    int32_t           *step_counts; /* rounds > 1: [experts_per_node] (intra_net_args_t) */
    intra_net_args_t   args;        /* the launches' arguments; per-step fields set each step */
} sched_net_t;

/* Per-expert modes and their agreement (sched_modes.c). */
typedef struct sched_modes {
    strata_moe_mode_t mode;          /* resolved */
    char             *mode_file;
    uint64_t         *dispatch_mask; /* set between steps (bit: Pull), mask_words */
    uint64_t         *combine_mask;
    uint64_t         *step_mask;     /* dispatch mask of the step in progress */
    uint64_t         *stats_mask;    /* the last completed step's */
    uint64_t         *uploaded;      /* the mask the device has, for the network kernels */
    bool              uploaded_valid;
    uint64_t          digest;        /* of the step's masks */
    const sched_mode_decider_ops_t *decider;
    void             *decider_ctx;
    bool             *decided;       /* [experts_per_rank] the decider's answer */
    uint64_t         *next_bits;     /* [own_words] to publish with the next header */
    uint64_t         *sent_bits;     /* [own_words] published with this step's */
    int32_t          *node_tokens;   /* [experts_per_rank][num_nodes] */
    uint64_t         *board_bits;    /* scratch: [local_size][mask_words], boards read */
    uint64_t         *board_mask;    /* scratch: [mask_words], the board being published */
    size_t            board_offset;  /* heap: two boards, by step parity */
} sched_modes_t;

typedef enum sched_state {
    SCHED_STEP_IDLE,
    SCHED_STEP_DISPATCH_SENT,
    SCHED_STEP_DISPATCHED,
    SCHED_STEP_COMBINE_SENT,
    SCHED_STEP_FAILED,
} sched_state_t;

/* Expert ids of an object made by strata_moe_recreate (sched_experts.c); all NULL for one
 * made by strata_moe_create, whose ids are the kernels' own. */
typedef struct sched_experts {
    int      global;        /* the caller's experts */
    int32_t *to_internal;   /* [global] the object's id, -1: masked */
    int32_t *to_global;     /* [params.num_experts] the caller's id, -1: a place none holds */
    int64_t *scratch;       /* [max_tokens][topk] a dispatch's ids, translated */
    bool     masked_logged;
} sched_experts_t;

/* sched_experts.c: topk_idx (at most max_tokens tokens) in the caller's ids into out, in
 * the object's; the plan's per token counts of masked slots. */
strata_status_t sched_plan_map_ids(const sched_moe_t *moe, sched_plan_t *plan,
                                   const int64_t *topk_idx, int num_tokens, int64_t *out);
/* sched_experts.c: a mask of the caller's experts as the object's. */
void            sched_experts_mask(const sched_moe_t *moe, const uint64_t *global,
                                   uint64_t *internal);
void            sched_experts_free(sched_experts_t *x);

/* The step in progress. */
typedef struct sched_step {
    sched_state_t       state;
    uint64_t            step;
    const sched_plan_t *plan;
    const void         *x;
    const float        *x_scales;
    const void         *expert_y;
    strata_status_t     status; /* INVALID or CAPACITY found earlier in the step */
    bool                received_into; /* the exact receive's rows were asked for */
    int64_t             into_rows;     /* and how many it loaded */
    uint64_t            start_ns;
    uint64_t            mark_ns; /* the last phase boundary */
    uint64_t            combine_start_ns;
} sched_step_t;

/* The public layout: one rank's tokens, by peer, on the host and (for the kernels) on the
 * device. Entries are exactly as many as the counting pass finds. */
struct strata_moe_layout {
    const sched_moe_t *moe;        /* NULL for a plan built without an object (tests) */
    uint64_t           moe_serial; /* moe's serial: another object at the same address is not it */
    const intra_device_ops_t *device; /* whose memory device_mem is */
    int                num_tokens;
    bool               had_bad_ids; /* bad ids were turned into -1 */
    int                num_entries;
    int                capacity;    /* entries the arrays hold */
    int64_t           *clean_idx;   /* [num_tokens][topk] global ids, bad ones -1 */
    int64_t           *node_idx;    /* [num_tokens][topk] node-local ids on this node, or -1 */
    int32_t           *peer_first;  /* [num_peers + 1] into tokens/experts */
    int32_t           *tokens;      /* per peer, in token order */
    int32_t           *experts;     /* [entries][topk] node-local ids at the peer, or -1 */
    int64_t           *peer_terms;  /* [num_peers] (token, slot) pairs the peer returns */
    /* in rounds (geo.header_counts > 0): [num_peers + 1][header_counts] the (token, slot)
     * pairs sent to each peer's node, by expert there, then this node's own; else NULL */
    int32_t           *step_counts;
    int32_t           *masked;      /* [num_tokens] slots naming a masked expert (recreated) */
    int64_t            masked_slots;
    void              *device_mem;  /* the device copies below, one allocation */
    int64_t           *d_clean_idx, *d_node_idx, *d_peer_terms;
    int32_t           *d_peer_first, *d_tokens, *d_experts, *d_step_counts;
};

/* Fill plan (sized for at most plan->capacity entries, or allocated exactly when 0) from
 * topk_idx on the geometry; no device memory. */
strata_status_t sched_plan_build(const sched_geometry_t *geo, const int64_t *topk_idx,
                                 int num_tokens, bool skip_bad, sched_plan_t *plan);
/* Bytes of a plan's step counts (none but in rounds). */
size_t          sched_plan_step_counts_bytes(const sched_geometry_t *geo);
/* The host arrays of a plan (not the struct). */
void            sched_plan_release(sched_plan_t *plan);
/* Host arrays for up to num_tokens tokens, and for up to entries entries. */
strata_status_t sched_plan_alloc_ids(const sched_geometry_t *geo, sched_plan_t *plan,
                                     int num_tokens);
strata_status_t sched_plan_alloc_entries(const sched_geometry_t *geo, sched_plan_t *plan,
                                         int entries);
/* Device arrays for up to max_tokens tokens and plan->capacity entries. */
strata_status_t sched_plan_device_alloc(const sched_moe_t *moe, sched_plan_t *plan,
                                        int max_tokens);
/* A token's expert ids: distinct, each -1 or in 0..num_experts-1; or INVALID (logged). */
strata_status_t sched_token_check(int num_experts, int topk, const int64_t *experts, int token);
/* The bad slots of one call: how many, and the first SCHED_BAD_IDS_SHOWN as text. */
#define SCHED_BAD_IDS_SHOWN 4
typedef struct sched_bad_ids {
    int  count;
    char first[160];
} sched_bad_ids_t;
/* The same check, turning each bad slot into -1 and adding it to bad (logged by
 * sched_bad_ids_log, once per call). */
strata_status_t sched_token_clean(int num_experts, int topk, int64_t *experts, int token,
                                  sched_bad_ids_t *bad);
/* One line for a call's bad slots, where there are any. */
void sched_bad_ids_log(const sched_bad_ids_t *bad, int num_experts);

struct sched_moe {
    /* Unique in the process: a layout names its object by pointer and serial, since a new
     * object may be allocated where a destroyed one was. */
    uint64_t             serial;
    strata_moe_params_t  params;         /* as resolved (the capacity taken, the combine) */
    int                  capacity_asked; /* params.capacity as given: 0 is the library's */
    sched_moe_world_t    world;
    bool                 pull_read;
    uint64_t             timeout_ns;
    int32_t             *failure_host; /* the engine's failure watch (sched_watch_failures) */
    int32_t             *failure_dev;  /* the same word, as the kernels reach it */
    uint64_t             waits_expired; /* expert waits on streams that ended at their bound,
                                           as strata_moe_synchronize last reported them */
    void                *stream;     /* the caller's, or NULL: every half waits */
    strata_status_t      deferred;   /* stream: an input error found while draining, kept
                                        for strata_moe_synchronize */
    sched_geometry_t     geo;
    intra_heap_t        *heap;
    intra_moe_t         *intra;
    size_t               origin_offset;   /* heap: int32[max_aug][2] */
    size_t               term_dst_offset; /* heap: int64[max_aug][topk] */
    size_t               terms_offset;    /* heap: own tokens' terms (across nodes) */
    size_t               stage_offset;    /* heap: returned terms (bounce) */
    sched_net_t          net;
    sched_modes_t        modes;
    sched_experts_t      experts;
    sched_step_t         cur;
    sched_plan_t         own_plan;   /* strata_moe_dispatch's, reused step after step */
    strata_moe_source_t *public_src; /* mapped host memory the sources kernel fills */
    int32_t             *public_count;
    void                *public_src_dev, *public_count_dev;
    int32_t             *step_counts; /* [experts_per_rank]: the exact receive's, per step */
    strata_moe_recv_t    recv;
    strata_moe_stats_t   stats;
};

static inline size_t sched_round_up(size_t n, size_t unit)
{
    return (n + unit - 1) / unit * unit;
}

/* The next part of a carved-up allocation: bytes (at least 1) at *cursor, each part on a
 * device-aligned boundary. */
static inline size_t sched_place(size_t *cursor, size_t bytes)
{
    size_t at = *cursor;

    *cursor = sched_round_up(at + UTIL_MAX(bytes, 1), INTRA_DEVICE_ALIGNMENT);
    return at;
}

/* Round `round`'s slice of a rank's own tokens (the streamed exchange): [*first_p,
 * *first_p + *count_p) of its num_tokens, as the network kernels take it (net_own_first). */
static inline void sched_round_tokens(const sched_geometry_t *geo, int round, int num_tokens,
                                      int *first_p, int *count_p)
{
    int64_t window = geo->window_tokens;

    *first_p = (int)UTIL_MIN(round * window, (int64_t)num_tokens);
    *count_p = (int)UTIL_MIN((round + 1) * window, (int64_t)num_tokens) - *first_p;
}

static inline bool sched_mask_test(const uint64_t *mask, int bit)
{
    return (mask[bit / 64] >> (bit % 64)) & 1u;
}

/* Global id of node-local expert j on node. */
static inline int sched_node_expert(const sched_geometry_t *geo, int node, int j)
{
    int owner = geo->node_ranks[node * geo->local_size + j / geo->experts_per_rank];

    return owner * geo->experts_per_rank + j % geo->experts_per_rank;
}

/* Node-local id of global expert e on its node. */
static inline int sched_local_expert(const sched_geometry_t *geo, int expert)
{
    int owner = expert / geo->experts_per_rank;

    return geo->rank_local[owner] * geo->experts_per_rank + expert % geo->experts_per_rank;
}

static inline size_t sched_mask_bytes(const sched_moe_t *moe)
{
    return sizeof(uint64_t) * (size_t)moe->geo.mask_words;
}

/* sched_config.c: the mode, and the choices above, for the object; the pull and timeout
 * settings. */
strata_status_t sched_resolve_config(sched_moe_t *moe, sched_choices_t *choices);
/* sched_config.c: the same choices for params alone (strata_moe_memory_estimate). */
strata_status_t sched_read_choices(const strata_moe_params_t *params, sched_choices_t *choices);
/* sched_config.c: STRATA_MOE_COMBINE=node-reduce is a preference for every object of the
 * process: one whose route or backend cannot run it (device NULL: not asked) combines
 * exactly instead, and says so. */
void            sched_combine_fallback(sched_choices_t *choices, const sched_geometry_t *geo,
                                       const intra_device_ops_t *device);
/* sched_config.c: STRATA_ERR_UNSUPPORTED, logged, where node-reduce cannot run (device
 * NULL: not asked). */
strata_status_t sched_combine_supported(const sched_geometry_t *geo,
                                        strata_moe_combine_t combine,
                                        const intra_device_ops_t *device);
/* sched_config.c: node-reduce combine where it applies (across nodes, hierarchical route,
 * host backend); UNSUPPORTED, logged, where it was asked for elsewhere. */
strata_status_t sched_resolve_combine(sched_moe_t *moe);
/* sched_geometry.c: what the intra tier does not check itself, the world's shape. */
bool            sched_params_valid(const strata_moe_params_t *p, const sched_moe_world_t *w);
/** STRATA_ERR_UNSUPPORTED, logged, where the geometry's receive cannot run (the exact one
 *  in rounds or with node-reduce). */
strata_status_t sched_receive_supported(const sched_geometry_t *geo);
/* sched_geometry.c: params->capacity, where it is 0 and the choices give a capacity factor,
 * from the load (sched_load_capacity). */
strata_status_t sched_default_capacity(strata_moe_params_t *params, int world_size,
                                       const sched_choices_t *choices);

/* sched_memory.c: the intra tier's params for the object's geometry; the heap's bytes per
 * rank (area_in_heap: the network area is part of it); every part the object allocates. */
void            sched_intra_params(const sched_moe_t *moe, intra_moe_params_t *ip);
size_t          sched_heap_bytes(sched_moe_t *moe, bool area_in_heap);
strata_status_t sched_memory_of(sched_moe_t *moe, bool area_in_heap,
                                strata_moe_memory_t *memory);
/* sched_moe.c: the scheduler's parts of the heap, beside the intra tier's. */
size_t          sched_heap_extra(sched_moe_t *moe, bool area_in_heap);
/* sched_plan.c: a plan's device arrays for max_tokens tokens and entries entries. */
size_t          sched_plan_device_bytes(const sched_geometry_t *geo, int max_tokens, int entries);

/* sched_net.c: the area, its registration, the ring and the kernels' tables. */
inter_mem_kind_t sched_mem_kind(const intra_device_ops_t *device);
strata_status_t sched_net_place(sched_moe_t *moe);
/* Collective: every rank computes transfers alike (round one, Pull by read, chunks). */
strata_status_t sched_net_agree(sched_moe_t *moe);
strata_status_t sched_net_open(sched_moe_t *moe);
/* The network kernels' device tables (0 on one node). */
size_t          sched_net_tables_bytes(const sched_geometry_t *geo);
void            sched_net_close(sched_moe_t *moe);
/* The network kernels' arguments for this step's plan and inputs. */
strata_status_t sched_net_prepare(sched_moe_t *moe);

/* Every expert in one mode, in dispatch and combine. */
void            sched_fill_masks(sched_moe_t *moe, bool pull);
/* The intra tier's pull mask (node-local expert ids) from a global one. */
void            sched_node_mask(const sched_moe_t *moe, const uint64_t *global, uint64_t *node_mask);
/* Wait for what the step launched (unless a stream is given), and what it found. */
strata_status_t sched_synchronize(sched_moe_t *moe, const char *what);
/* After launches: wait for them as sched_synchronize does if they were made; a launch that
 * could not be made fails the step. */
strata_status_t sched_settle(sched_moe_t *moe, strata_status_t launched, const char *what);
/* Wait for the device before the host rewrites what its kernels read: an input error found
 * is kept for strata_moe_synchronize, a failure fails the object. */
strata_status_t sched_drain(sched_moe_t *moe, const char *what);
/** Whether the engine's failure watch says a rank failed (sched_moe.c). */
bool            sched_any_rank_failed(const sched_moe_t *moe);
/** The engine's rank of the object's rank r, and whether the engine has declared it failed. */
int             sched_engine_rank(const sched_moe_t *moe, int r);
bool            sched_peer_failed(const sched_moe_t *moe, int r);
/** A call that needs the step to be elsewhere (call names it): logs which calls finish the
 *  step in progress, or that none is, or that the object failed; the status to return. */
strata_status_t sched_refuse_mid_step(const sched_moe_t *moe, const char *call);
/* What a launch returned: OK; INVALID when refused before this rank took part (it may
 * retry); anything else fails the object. */
strata_status_t sched_launched(sched_moe_t *moe, strata_status_t status, const char *what);
/* Across nodes, the heap's stage for the terms this rank returns to other nodes, where the
 * network area is not in the heap (with it, the area's ret_out is the stage); in rounds,
 * only receiving exactly, one round's (sched_moe.c). 0: none. */
size_t          sched_stage_bytes(const sched_moe_t *moe, bool area_in_heap);
/* Receiving exactly in rounds, before combine: a step whose rows the caller did not ask
 * for (dispatch_recv_into) runs its later rounds now, as the peers wait for them, and
 * drops its rows (in one round the node's combine drops them itself). */
strata_status_t sched_drop_exact_rows(sched_moe_t *moe);
/* A step failed for good: the object can only be destroyed. */
strata_status_t sched_fail(sched_moe_t *moe, strata_status_t status, const char *what);
/* An intra-tier step that timed out: PEER_FAILED if the engine sees a dead rank within its
 * heartbeat bound, else the status as it is. */
strata_status_t sched_intra_failure(sched_moe_t *moe, strata_status_t status);
/* The time since the last phase boundary goes to phase. */
void            sched_phase_end(sched_moe_t *moe, strata_moe_phase_t phase);
/* Modes: this step's masks from the boards (adaptive), and their digest. */
strata_status_t sched_modes_begin_step(sched_moe_t *moe);
/* Adaptive: this rank's board for the next step, from its own and its peers' decisions. */
strata_status_t sched_modes_publish(sched_moe_t *moe);
/* Adaptive: the decider's answer from this step's rows, for the next header. */
void            sched_modes_decide(sched_moe_t *moe);
strata_status_t sched_modes_open(sched_moe_t *moe);
void            sched_modes_close(sched_moe_t *moe);

#endif
