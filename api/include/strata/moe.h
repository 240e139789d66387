/*
 * strata's MoE API: expert-parallel dispatch and combine over the communicator, their
 * halves, layouts, streams, per-expert completion, statistics and memory sizing.
 * Included by <strata/strata.h>.
 */
#ifndef STRATA_MOE_H
#define STRATA_MOE_H

#include <strata/strata.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- MoE dispatch and combine ----------------------------------------------------------- */

/*
 * Expert-parallel dispatch and combine over the whole communicator. Experts are split into
 * equal contiguous blocks: rank r owns experts [r * E / W, (r + 1) * E / W). Inside a node,
 * tokens move through the intra-node tier's kernels over the symmetric heap; between nodes,
 * through the transfer engine by writes with immediate into pre-registered buffers.
 *
 * A step is collective over all ranks: dispatch (send, then receive), then combine (send,
 * then receive), on every rank, in that order, whatever a call returned. An error that one
 * rank finds in its input (a bad expert id, a capacity overflow) still completes the step
 * for the others. A peer that dies or goes silent fails the step with
 * STRATA_ERR_PEER_FAILED on every surviving rank within the heartbeat bound
 * (STRATA_INTER_PEER_TIMEOUT); the object can then only be destroyed. One object is used
 * by one thread at a time. Objects use immediates from STRATA_MOE_IMM_BASE up (each its own
 * range of 8 x world size, taken in turn by every strata_moe_create and strata_moe_recreate
 * call, failed ones too; so (65536 - STRATA_MOE_IMM_BASE) / (8 x world size) objects can
 * exist at once); do not wait on those with strata_imm_wait.
 */

typedef struct strata_moe        strata_moe_t;
typedef struct strata_moe_layout strata_moe_layout_t;

#define STRATA_MOE_IMM_BASE 32768u

/** How tokens cross nodes. */
typedef enum strata_moe_route {
    STRATA_MOE_ROUTE_DEFAULT      = 0, /**< STRATA_MOE_ROUTE; "auto" picks from max_tokens */
    STRATA_MOE_ROUTE_FLAT         = 1, /**< each token straight to each rank it goes to */
    /** once per node, to the rank with the same local index there, which fans it out */
    STRATA_MOE_ROUTE_HIERARCHICAL = 2,
} strata_moe_route_t;

/** How each expert's tokens move (docs/adaptive.md). */
typedef enum strata_moe_mode {
    STRATA_MOE_MODE_DEFAULT  = 0, /**< STRATA_MOE_MODE: push, pull, adaptive or fixed:<file> */
    STRATA_MOE_MODE_PUSH     = 1, /**< senders write into the owner's slots */
    STRATA_MOE_MODE_PULL     = 2, /**< the owner fetches what senders published */
    /** each expert's owner switches it between the two from its routing statistics
     *  (policy: mode_file, else STRATA_ADAPTIVE_POLICY, else built in); host backend */
    STRATA_MOE_MODE_ADAPTIVE = 3,
    STRATA_MOE_MODE_FIXED    = 4, /**< a per-expert mask read from mode_file */
} strata_moe_mode_t;

/** How combine sums a token's terms across nodes (docs/moe.md "Node-reduce combine"). */
typedef enum strata_moe_combine {
    /** STRATA_MOE_COMBINE: exact or node-reduce. Where the object cannot run node-reduce
     *  (flat route, GPU backend) the variable's node-reduce means exact, while
     *  params.combine asking for it is refused */
    STRATA_MOE_COMBINE_DEFAULT     = 0,
    /** every term returns to the token's rank, which sums them in fp32 in k order: the
     *  result is the same bit for bit on every route */
    STRATA_MOE_COMBINE_EXACT       = 1,
    /** hierarchical route: the node holding a token's terms sums them (fp32, k order) and
     *  returns one row per token in the combine dtype; the token's rank adds those rows in
     *  node order. Fewer bytes cross nodes; the result may differ in the last bits. */
    STRATA_MOE_COMBINE_NODE_REDUCE = 2,
} strata_moe_combine_t;

/** How a step's rows cross the network (docs/moe.md "The streamed exchange"). */
typedef enum strata_moe_exchange {
    /** STRATA_MOE_EXCHANGE: worst-case, streamed, or auto (its default): streamed for the
     *  exact receive, worst-case for the blocks */
    STRATA_MOE_EXCHANGE_DEFAULT    = 0,
    /** the network areas hold a whole step's worst case: every peer's every token */
    STRATA_MOE_EXCHANGE_WORST_CASE = 1,
    /** a step's dispatch and combine cross the network in rounds of a slice of every
     *  rank's tokens, through areas sized by STRATA_MOE_WINDOW_BYTES whatever max_tokens
     *  and the world; either combine (node-reduce sums a round's terms per node) */
    STRATA_MOE_EXCHANGE_STREAMED   = 2,
} strata_moe_exchange_t;

/** Where a dispatch delivers the rows (docs/moe.md "The exact receive"). */
typedef enum strata_moe_receive {
    STRATA_MOE_RECEIVE_DEFAULT = 0, /**< blocks */
    /** each local expert's rows in a block of capacity rows in the object's memory
     *  (strata_moe_recv_t); rows past it are dropped and reported (STRATA_ERR_CAPACITY) */
    STRATA_MOE_RECEIVE_BLOCKS  = 1,
    /** every row, none dropped, packed into buffers the caller sizes from the step's counts
     *  (strata_moe_dispatch_counts, strata_moe_dispatch_recv_into); no capacity applies and
     *  the object holds no experts' blocks. Across nodes with exact combine only
     *  (node-reduce: creation returns STRATA_ERR_UNSUPPORTED). */
    STRATA_MOE_RECEIVE_EXACT   = 2,
} strata_moe_receive_t;

/** The capacity factor of the streamed exchange where params.capacity is 0 and
 *  STRATA_MOE_CAPACITY_FACTOR is auto (its default): its experts' blocks follow the load,
 *  as its areas do. The worst-case exchange's default is the most an expert can receive. */
#define STRATA_MOE_STREAMED_CAPACITY_FACTOR 2.0

typedef struct strata_moe_params {
    int                num_experts;      /**< over all ranks; a multiple of the world size */
    int                topk;             /**< experts per token, 1..min(num_experts, 32) */
    int                hidden;           /**< columns of a token row (whole 16-byte rows;
                                              a multiple of 128 for fp8) */
    strata_dtype_t     dtype;            /**< tokens; fp8 comes with per-128-column scales */
    strata_dtype_t     combine_dtype;    /**< expert outputs and results: bf16, fp16, fp32 */
    int                max_tokens;       /**< per rank and step */
    /** rows kept for each local expert, rounded up to expert_alignment. 0: where
     *  STRATA_MOE_CAPACITY_FACTOR is a number, that factor times its mean load (see
     *  strata_moe_load_capacity; 0, the most it can receive, max_tokens times the world
     *  size); where it is auto (the default), STRATA_MOE_STREAMED_CAPACITY_FACTOR times
     *  the mean load on the streamed exchange and the most on the worst-case one */
    int                capacity;
    int                expert_alignment; /**< rows; 0 or 1: none */
    strata_moe_route_t route;
    strata_moe_mode_t  mode;
    /** FIXED: the mask file; ADAPTIVE: a policy file or NULL. Read by strata_moe_create. */
    const char        *mode_file;
    /** how combine sums a token's terms across nodes: exact (the default) or node-reduce */
    strata_moe_combine_t combine;
    /** how rows cross the network: worst-case areas or streamed; by default (and
     *  STRATA_MOE_EXCHANGE=auto) streamed when receive is exact, else worst-case */
    strata_moe_exchange_t exchange;
    /** where a dispatch delivers the rows: the experts' blocks (the default) or, exact,
     *  the caller's buffers. An exact object moves every row its own way: it refuses a
     *  mode or mode_file (STRATA_ERR_INVALID) and pull masks, and ignores capacity */
    strata_moe_receive_t  receive;
} strata_moe_params_t;

/** Where a received row came from: its rank, token index there, and top-k slot. */
typedef struct strata_moe_source {
    int32_t rank;
    int32_t token;
    int32_t slot;
} strata_moe_source_t;

/**
 * What a dispatch delivered to this rank's experts, valid until the next dispatch. Local
 * expert e (global id first_expert + e) has its rows in one contiguous block:
 * x + e * capacity * row_bytes, the first count[e] of them filled, in no particular order
 * (src says whose each row is). Buffers are in the device backend's memory except count and
 * src, which are host memory.
 */
typedef struct strata_moe_recv {
    int                        num_local_experts;
    int                        first_expert;
    int                        capacity;     /**< rows between experts' blocks */
    size_t                     row_bytes;    /**< bytes of one token row */
    size_t                     y_row_bytes;  /**< bytes of one expert output row */
    const int32_t             *count;        /**< [num_local_experts] */
    void                      *x;            /**< [num_local_experts][capacity] rows */
    const float               *x_scales;     /**< fp8 only: hidden / 128 per row ... */
    size_t                     scale_stride; /**< ... with this many bytes between rows */
    const strata_moe_source_t *src;          /**< [num_local_experts][capacity] */
    /** [num_local_experts][capacity] rows in the combine dtype: writing the expert outputs
     *  here saves combine a copy. */
    void                      *expert_y;
} strata_moe_recv_t;

/** The phases of a step that strata_moe_stats_t times (host time around each, rank-local). */
typedef enum strata_moe_phase {
    STRATA_MOE_PHASE_PACK,           /**< dispatch_send: rows packed, round one posted */
    STRATA_MOE_PHASE_DISPATCH_WAIT,  /**< headers, round two, waiting for other nodes' rows */
    STRATA_MOE_PHASE_INTRA_DISPATCH, /**< the node's dispatch and the rows' sources */
    STRATA_MOE_PHASE_COMBINE_KERNEL, /**< terms to where they leave from, returns posted */
    STRATA_MOE_PHASE_COMBINE_WAIT,   /**< waiting for this rank's tokens' terms */
    STRATA_MOE_PHASE_REDUCE,         /**< the weighted sums */
    STRATA_MOE_PHASES
} strata_moe_phase_t;

/**
 * The bytes one rank of a MoE object holds, by part (docs/moe.md "Memory"). The heap parts
 * are in the device backend's memory; the network parts too, unless the area is a pinned
 * host bounce buffer (stats.net_bounce); the work ring is pinned host memory. Across nodes
 * only: the net_ parts, the work ring and the network kernels' tables (0 on one node).
 */
typedef struct strata_moe_memory {
    uint64_t expert_rows;   /**< heap: the local experts' input and output blocks (capacity
                                 rows each, with scales and sources) */
    uint64_t node_rows;     /**< heap: the rest of the node's exchange (rows published for
                                 Pull, routes, the own tokens' terms, offsets, mode boards) */
    uint64_t net_headers;   /**< network area: headers and grants */
    uint64_t net_round_one; /**< entries other nodes send before the counts are known */
    uint64_t net_round_two; /**< entries they send (or this rank reads) after */
    uint64_t net_staging;   /**< this rank's entries packed for each peer */
    uint64_t net_returns;   /**< combine: the terms (or partial rows and weights) this rank
                                 returns to peers, and those returned to it */
    uint64_t work_ring;     /**< the ring through which the kernels hand transfers to the
                                 host proxy */
    uint64_t tables;        /**< the network kernels' and the plan's device tables, the
                                 public outputs (sources, counts) and the experts'
                                 completion marks */
    uint64_t total;         /**< the sum of the above */
} strata_moe_memory_t;

/** What the last step did, on this rank. */
typedef struct strata_moe_stats {
    uint64_t           steps;            /**< steps completed by this object */
    strata_moe_route_t route;
    int                num_local_experts;
    const int32_t     *tokens_per_expert; /**< [num_local_experts] rows received */
    const uint64_t    *pull_mask;        /**< bit e: expert e moved in Pull form */
    uint64_t           tokens_to_nodes;  /**< token rows this rank sent to other nodes */
    uint64_t           tokens_round_two; /**< of those, sent after the counts were known */
    uint64_t           bytes_to_nodes;   /**< dispatch and combine payload bytes it sent */
    uint64_t           dispatch_ns;      /**< from dispatch_send to dispatch_recv's return */
    uint64_t           combine_ns;
    /** Each phase's share of the step (0 where a stream is given: the host does not wait). */
    uint64_t           phase_ns[STRATA_MOE_PHASES];
    /** Payload bytes host code copied in the step: 0, the kernels move every row. */
    uint64_t           host_copied_bytes;
    /** 1: the network area is a pinned host bounce buffer (the transport cannot register
     *  the device's memory); 0: it is in the node's heap, registered. */
    int                net_bounce;
    /** Over the object's life: transfer commands the kernels posted, and (host backend)
     *  the sum of the times from a command's publishing to the proxy's posting of it. */
    uint64_t           commands_posted;
    uint64_t           post_delay_ns;
    /** What this object allocated on this rank, by part (fixed at creation). The same as
     *  strata_moe_memory_estimate returns for its params and world where the estimate's
     *  assumptions hold (where the area is: see there). */
    strata_moe_memory_t memory;
    /** How rows cross the network (fixed at creation): worst-case or streamed, and the
     *  rounds a step's dispatch and combine take across nodes (1 on one node or
     *  worst-case). In rounds the phases interleave: dispatch's time is all DISPATCH_WAIT,
     *  combine_recv's all COMBINE_WAIT. */
    strata_moe_exchange_t exchange;
    int                   exchange_rounds;
} strata_moe_stats_t;

/**
 * Collective: every rank calls it with the same params. Allocates the node's symmetric
 * heap and the registered network buffers, sized for the worst case of the params.
 * STRATA_ERR_INVALID names a bad parameter (including dtype, combine_dtype, route and mode
 * values outside their enums). The object holds its communicator: destroying the
 * communicator first is safe (see strata_comm_destroy).
 */
STRATA_API strata_status_t strata_moe_create(strata_comm_t *comm, const strata_moe_params_t *params,
                                             strata_moe_t **moe_p);
/**
 * Local; creates nothing and needs no communicator: what strata_moe_create would allocate
 * on each rank for params on world_size ranks spread evenly over num_nodes nodes, with the
 * STRATA_MOE_* variables as they are set now (route, round one, combine), as on the host
 * backend. It knows no transport: the network area is counted in the heap (registered)
 * unless STRATA_MOE_NET_MEMORY=bounce, whereas auto takes the bounce buffer where the
 * transport cannot register the device's memory; and node-reduce is counted where the
 * route allows it, whereas GPU backends run exact. The heap is rounded up to whole pages
 * after this. STRATA_ERR_INVALID names a bad parameter, as strata_moe_create would;
 * STRATA_ERR_UNSUPPORTED where create refuses the combine mode on the route.
 */
STRATA_API strata_status_t strata_moe_memory_estimate(const strata_moe_params_t *params,
                                                      int world_size, int num_nodes,
                                                      strata_moe_memory_t *memory_p);
/**
 * Local: the capacity an expert's block gets from its load, factor times its mean load
 * (params->max_tokens x topk / num_experts, times world_size), rounded up, at least 1 and
 * at most max_tokens x world_size (before rounding up to expert_alignment). This is what
 * strata_moe_create uses where params->capacity is 0 and STRATA_MOE_CAPACITY_FACTOR is set
 * (or, on the streamed exchange, auto: factor STRATA_MOE_STREAMED_CAPACITY_FACTOR);
 * factor 0 gives 0 (the most an expert can receive). STRATA_ERR_INVALID: NULL, a factor
 * outside 0..1e6, or sizes that are not positive.
 */
STRATA_API strata_status_t strata_moe_load_capacity(const strata_moe_params_t *params,
                                                    int world_size, double factor,
                                                    int *capacity_p);
/** Local; tolerates NULL. After a failed step the network buffers stay registered until
 *  the communicator is destroyed (a dead peer's operations may still be in flight). */
STRATA_API void strata_moe_destroy(strata_moe_t *moe);

/**
 * Where num_tokens tokens go (topk_idx: [num_tokens][topk] expert ids, -1 for none, host
 * memory): per destination rank and node, with each token sent once per node. Local and
 * reusable: pass it to every dispatch whose routing is the same (no re-layout, nothing
 * allocated: the path for CUDA-graph capture). STRATA_ERR_INVALID names a bad or repeated
 * expert id.
 */
STRATA_API strata_status_t strata_moe_layout_create(strata_moe_t *moe, const int64_t *topk_idx,
                                                    int num_tokens,
                                                    strata_moe_layout_t **layout_p);
/** Only once no dispatch or combine that used it is in progress (on a stream: once the
 *  stream has run them; strata_moe_synchronize). The copy of it to the device that
 *  layout_create queued needs no wait: the free waits for it. Tolerates NULL. */
STRATA_API void strata_moe_layout_destroy(strata_moe_layout_t *layout);

/**
 * Every rank must set the same masks before the same step: bit e of word e / 64 set moves
 * expert e in Pull form, in dispatch and in combine respectively (NULL: all Push). Refused
 * (STRATA_ERR_INVALID) in adaptive mode, where the experts' owners decide. On an object
 * from strata_moe_recreate, e is the old object's expert id.
 */
STRATA_API strata_status_t strata_moe_set_pull_mask(strata_moe_t *moe,
                                                    const uint64_t *dispatch_mask,
                                                    const uint64_t *combine_mask);

/**
 * First half of dispatch: send x ([num_tokens][hidden] in dtype, 16-byte aligned) and, for
 * fp8, x_scales ([num_tokens][hidden / 128]) to the layout's destinations. x may be reused
 * once dispatch_recv returns. The layout must outlive the step's combine.
 *
 * Input errors never shift one rank's steps against the others'. An input that cannot go
 * out (no layout, another object's layout or a destroyed one's, even where this object was
 * allocated at its address; x NULL or misaligned, x_scales present or absent
 * against the dtype) returns STRATA_ERR_INVALID, yet the step starts with this rank
 * contributing no tokens, because the other ranks are in it already: this rank must still
 * call the step's other three halves, its experts receive the other ranks' tokens as usual,
 * and combine_recv writes nothing and returns STRATA_ERR_INVALID again. The other ranks see
 * an empty contribution and return STRATA_OK. A call out of order starts nothing and returns
 * STRATA_ERR_INVALID; a rank that skips the rest of a step cannot start the next one (its
 * dispatch_send is out of order), and the others fail that step at the peer timeout.
 */
STRATA_API strata_status_t strata_moe_dispatch_send(strata_moe_t *moe,
                                                    const strata_moe_layout_t *layout,
                                                    const void *x, const float *x_scales);
/** Second half: wait for this rank's experts' tokens; fills *recv_p. */
STRATA_API strata_status_t strata_moe_dispatch_recv(strata_moe_t *moe, strata_moe_recv_t *recv_p);

/**
 * Both halves, with a layout made for this call: a bad expert id is skipped (the step
 * still completes) and reported as STRATA_ERR_INVALID. A num_tokens outside 0..max_tokens,
 * topk_idx NULL with tokens, or an input dispatch_send refuses: this rank takes part without
 * tokens, as dispatch_send says; recv_p is filled and the call returns STRATA_ERR_INVALID.
 * STRATA_ERR_CAPACITY: rows past an expert's capacity were not delivered.
 */
STRATA_API strata_status_t strata_moe_dispatch(strata_moe_t *moe, const void *x,
                                               const float *x_scales, const int64_t *topk_idx,
                                               int num_tokens, strata_moe_recv_t *recv_p);

/**
 * Per-expert completion: wait until local expert local_expert's rows of the step are all in
 * its block of recv.x (*rows_p: how many, recv.count's value for it), so that its compute
 * can start while other experts' rows are still arriving. Call it after dispatch_recv,
 * which on a stream (strata_moe_set_stream) returns without waiting: the kernels mark each
 * expert as its last row lands, in mapped host memory, and this call reads that mark.
 * recv.src of the expert is written later, once the whole dispatch is done. Without a
 * stream dispatch_recv has waited for everything and this returns at once. timeout_ns < 0:
 * the object's timeout (STRATA_MOE_TIMEOUT); 0 polls. STRATA_ERR_TIMEOUT: not complete
 * yet, the step goes on (0 in *rows_p). STRATA_ERR_PEER_FAILED: a rank failed and the step
 * with it. STRATA_ERR_INVALID: no dispatch_recv in this step yet, or an expert outside
 * 0..num_local_experts-1. STRATA_ERR_UNSUPPORTED once a dispatch of the object was
 * captured in a graph: replays advance the kernels' steps, which the host cannot count.
 */
STRATA_API strata_status_t strata_moe_expert_wait(strata_moe_t *moe, int local_expert,
                                                  int64_t timeout_ns, int32_t *rows_p);
/**
 * strata_moe_expert_wait on the device: enqueue on stream (a cudaStream_t or hipStream_t of
 * the rank's GPU, or a host stream of strata_comm_stream_create; not the object's own, where
 * the dispatch runs) a wait until local_expert's rows of the step are all in, and return;
 * kernels enqueued after it on that stream read them. The host waits for nothing. If the
 * step fails, the wait ends and strata_moe_synchronize reports the failure; a wait that
 * reached the object's bound (STRATA_INTRA_TIMEOUT, counted from the start of the
 * dispatch) ends too, and the next strata_moe_synchronize returns STRATA_ERR_TIMEOUT,
 * naming how many did: work behind such a wait must not trust the rows. After
 * dispatch_recv, as strata_moe_expert_wait; STRATA_ERR_UNSUPPORTED while stream is captured
 * (a replay would wait for the step it was captured in) or once a dispatch was;
 * STRATA_ERR_INVALID for an expert that is not local or a NULL or foreign stream. The
 * object keeps a queue bound to each stream given (up to 4; a fifth makes the oldest one's
 * stream finish its work first): a stream given must stay valid until the object is
 * destroyed.
 */
STRATA_API strata_status_t strata_moe_expert_wait_stream(strata_moe_t *moe, int local_expert,
                                                         void *stream);
/**
 * The step's counts: counts[e], for each local expert e, is the number of rows every rank
 * sent it in this step, before its capacity, so counts[e] - recv.count[e] rows of it were
 * dropped (and reported). The node's dispatch counts every rank's rows before it moves any,
 * so on a stream this returns while the rows are still moving: on GPUs the host waits here
 * for the counts, not for the rows. Across nodes the node's dispatch starts once the
 * network has delivered the other nodes' rows, so there the counts come after that
 * exchange; on the streamed exchange in rounds every rank's first round carries its counts
 * for the whole step, so they come after the first round, before the later rounds' rows
 * (a step whose rows then differ from them fails). Call it after dispatch_recv; without a stream it returns at once. timeout_ns,
 * STRATA_ERR_TIMEOUT (the step goes on), STRATA_ERR_PEER_FAILED and the refusals: as
 * strata_moe_expert_wait. counts: num_local_experts entries, zeros unless STRATA_OK.
 */
STRATA_API strata_status_t strata_moe_dispatch_counts(strata_moe_t *moe, int64_t timeout_ns,
                                                      int32_t *counts);

/**
 * The exact receive (params.receive = STRATA_MOE_RECEIVE_EXACT): after dispatch_recv, and
 * once per step, deliver every row sent to this rank's experts in the step, none dropped,
 * into x ([rows][hidden] in dtype, 16-byte aligned), x_scales ([rows][hidden / 128] fp32,
 * fp8 only) and src ([rows]), in the device backend's memory (host memory on the host
 * backend), packed: local expert e's rows start at the sum of counts[0..e-1] of
 * strata_moe_dispatch_counts, the rows of each expert by the rank of this node that holds
 * them (its own tokens, then those it received from other nodes; src names each row's
 * source); with the streamed exchange in rounds, by round first: this call then runs the
 * step's rounds after its first, each loaded after it, so the other ranks wait for it (the
 * time between dispatch_recv and this call counts against their STRATA_MOE_TIMEOUT and
 * the peer timeout). rows: how many the
 * buffers hold, at least the counts' sum. The call waits for the counts (on GPUs the host
 * waits here, as with strata_moe_dispatch_counts) and, without a stream, for the rows;
 * with one it returns once the loads are enqueued, and strata_moe_expert_wait (after this
 * call) says when each expert's rows are in. Combine then reads the expert outputs packed
 * the same way ([rows][hidden] in the combine dtype; NULL only where no row came).
 *
 * STRATA_ERR_INVALID: the object does not receive exactly, the call is out of order or
 * repeated, or the buffers are too small, NULL or misaligned; nothing started, and the call
 * can be made again (the rows stay where their sources published them until this rank's
 * combine). A step whose combine comes without a successful call drops this rank's
 * experts' rows: their tokens' ranks see STRATA_ERR_CAPACITY at combine_recv
 * (STRATA_ERR_CANCELLED where strata_moe_abort_step ended it). A dispatch of an exact
 * object inside a stream capture is refused (STRATA_ERR_UNSUPPORTED), as is this call. STRATA_ERR_TIMEOUT: the counts did not come within the object's
 * timeout (the step goes on; call again). STRATA_ERR_PEER_FAILED as for dispatch.
 */
STRATA_API strata_status_t strata_moe_dispatch_recv_into(strata_moe_t *moe, void *x,
                                                        float *x_scales,
                                                        strata_moe_source_t *src,
                                                        int64_t rows);

/**
 * First half of combine: return the experts' outputs (expert_y:
 * [num_local_experts][capacity][hidden] in the combine dtype, as laid out in the recv; NULL:
 * recv.expert_y) to their tokens' ranks. With node-reduce combine, terms for other nodes
 * wait here for their tokens' weights: combine_recv sends them, and this rank's
 * combine_recv also waits for its peers' combine_recv. GPU backends without a stream
 * (strata_moe_set_stream): the outputs must be complete when it is called, since the
 * object's kernels are not ordered after work the caller enqueued on a stream of its own.
 */
STRATA_API strata_status_t strata_moe_combine_send(strata_moe_t *moe, const void *expert_y);
/**
 * Second half: out[t] = sum over k of topk_weights[t][k] * y(t, k) ([num_tokens][hidden]
 * in the combine dtype; topk_weights [num_tokens][topk] fp32), accumulated in fp32 in k
 * order and rounded once. With STRATA_MOE_COMBINE_NODE_REDUCE each node's terms are summed
 * so on that node, other nodes' sums rounded to the combine dtype, and the sums added in
 * node order (docs/moe.md); the weights then go to those nodes from here.
 * STRATA_ERR_CAPACITY: a term of one of this rank's tokens was dropped, on this node or
 * another, and its row lacks it; only this rank's tokens count (dispatch returns
 * STRATA_ERR_CAPACITY to the owner of the expert whose capacity overflowed, and to the rank
 * that could not place a row there, and combine_recv does not say it again).
 * STRATA_ERR_CANCELLED: the same for terms whose owner aborted the step
 * (strata_moe_abort_step). STRATA_ERR_TIMEOUT also where an owner's dispatch gave up
 * waiting (a source past STRATA_MOE_TIMEOUT; on a stream its host learns it only later)
 * and it withheld its results rather than return terms of rows it never had; the object
 * then refuses every call but destroy, as the owner's does.
 */
STRATA_API strata_status_t strata_moe_combine_recv(strata_moe_t *moe, const float *topk_weights,
                                                   void *out);
STRATA_API strata_status_t strata_moe_combine(strata_moe_t *moe, const void *expert_y,
                                              const float *topk_weights, void *out);

/**
 * End the step in progress on this rank without finishing it: after an input error, or
 * when the caller cannot compute its experts' outputs. It runs the halves the other ranks
 * wait for, so they finish the step as usual, and this rank's tokens get no results (out
 * is not written). Where combine_send was not called yet, this rank's experts' results are
 * withheld: each token with a row at one of them lacks that term, and its rank's
 * combine_recv returns STRATA_ERR_CANCELLED with a log line naming the expert (the other
 * terms are summed as usual), as does the combine_recv of a rank that gathered such terms
 * for another node. After combine_send the results went back already and the others see
 * nothing amiss. The step's input errors are forgotten; STRATA_OK, also where no step is in
 * progress. A failure of the step (STRATA_ERR_PEER_FAILED, STRATA_ERR_TIMEOUT) is
 * returned as by the halves it ran, and the object can then only be destroyed. On a
 * stream nothing is waited for: strata_moe_synchronize reports what the kernels found;
 * while the stream is being captured it is refused (STRATA_ERR_UNSUPPORTED), as a graph
 * would replay it.
 */
STRATA_API strata_status_t strata_moe_abort_step(strata_moe_t *moe);

/**
 * Launch every later step's kernels on stream (a cudaStream_t or hipStream_t as void *, the
 * caller's current one; on the host backend one of strata_comm_stream_create): the dispatch
 * and combine halves then enqueue their kernels and return without waiting, and what recv
 * points to is valid once the stream reaches that point (count and src are mapped host
 * memory the kernels fill). The stream may change between any two steps: the new one waits
 * for what the object enqueued on the old one (an event), so a framework can pass its
 * current stream on every call. STRATA_ERR_INVALID: a stream of another GPU or backend.
 * With a reused layout a step can be captured in a CUDA graph and replayed; the graph keeps
 * the modes it was captured with. Inside a capture nothing waits on the host: adaptive mode,
 * pull masks changed since the last step, a new layout and strata_moe_synchronize are
 * refused with STRATA_ERR_UNSUPPORTED, and the object stays usable. Errors the kernels find
 * are returned by strata_moe_synchronize. In adaptive mode dispatch_recv still waits (the
 * owners decide on the host). NULL (the default): every half waits. Between steps only.
 * The stream must stay valid until the object leaves it (another call of this one) or is
 * destroyed, which waits for the object's work there: an object that failed refuses this
 * call, so destroy it before its stream.
 */
STRATA_API strata_status_t strata_moe_set_stream(strata_moe_t *moe, void *stream);
/** Wait for everything the object launched; the first error its kernels found. */
STRATA_API strata_status_t strata_moe_synchronize(strata_moe_t *moe);

/** The last completed step's statistics; pointers valid until the next step. */
STRATA_API strata_status_t strata_moe_get_stats(const strata_moe_t *moe,
                                                strata_moe_stats_t *stats_p);

/* --- Elastic: going on after a rank failed ---------------------------------------------- */

/**
 * Collective over comm: a MoE object with old's parameters (not its fixed mode file; a
 * capacity of 0 is taken again for comm's size) and
 * old's expert ids, for the ranks of comm, typically strata_comm_shrink's result after a
 * rank of old's communicator failed, or strata_comm_expand's to hand experts back to a
 * rank that joined. old is only read; destroy it afterwards. A rank that has no old object
 * (one that joined) passes NULL and takes the parameters from the ranks that have one,
 * which must all recreate the same object (else STRATA_ERR_CONFIG on every rank).
 *
 * expert_owner[e], for each of old's experts: the rank of comm that holds expert e from now
 * on, or -1: masked. NULL: each expert stays with the rank that held it in old, where that
 * rank is in comm (comm split or shrunk from old's communicator, in any number of steps),
 * and is masked where it is not (every rank must then have an old object). Every rank
 * must pass the same map (else
 * STRATA_ERR_CONFIG on every rank). A rank holding an expert it did not hold loads its
 * weights itself; strata moves rows, not weights.
 *
 * The new object's ranks all hold room for the most experts any rank holds (a rank with
 * fewer has places no expert uses, whose counts stay 0), in increasing expert id:
 * strata_moe_expert_id names the expert of each local place, and recv.first_expert is -1
 * where a rank's experts do not follow on from one another. Routing (topk_idx) and pull
 * masks keep naming old's expert ids. A top-k slot that names a masked expert is left out
 * of the step, as a -1 would be: its term is missing from the token's combined row, and
 * strata_moe_masked reports it per token (a warning is logged the first time).
 * STRATA_ERR_UNSUPPORTED for an object in fixed mode with a mode file.
 */
STRATA_API strata_status_t strata_moe_recreate(const strata_moe_t *old, strata_comm_t *comm,
                                               const int32_t *expert_owner,
                                               strata_moe_t **moe_p);

/** The expert id of this rank's local expert local_expert; -1 for a place no expert uses,
 *  or an index out of range. */
STRATA_API int strata_moe_expert_id(const strata_moe_t *moe, int local_expert);

/**
 * For layout (NULL: the routing of the last strata_moe_dispatch), how many top-k slots of
 * each token named a masked expert (per_token: [num_tokens], may be NULL) and in all
 * (slots_p, may be NULL). Always 0 for an object from strata_moe_create.
 */
STRATA_API strata_status_t strata_moe_masked(const strata_moe_t *moe,
                                             const strata_moe_layout_t *layout,
                                             int32_t *per_token, int64_t *slots_p);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_MOE_H */
