/*
 * MoE dispatch and combine between the local ranks of one node, over the symmetric heap
 * and the device backend's kernels (intra/kernels/moe_kernels.h), and the launches of the
 * step across nodes (intra/kernels/net_kernels.h), which the scheduler drives.
 *
 * Experts are spread evenly: local rank r owns experts [r * E/L, (r + 1) * E/L). A step is
 * collective: every local rank calls intra_moe_dispatch, then intra_moe_combine, in that
 * order, whatever the calls return (an error reported by one rank, e.g. a bad expert id
 * or an overflowing capacity, still completes the step for the others). A wait for a peer
 * that exceeds the timeout fails the call with STRATA_ERR_TIMEOUT and the object for good.
 * One object is used by one thread at a time.
 */
#ifndef STRATA_INTRA_MOE_H
#define STRATA_INTRA_MOE_H

#include <strata/strata.h>

#include "intra/kernels/moe_format.h"
#include "util/util_config.h"

typedef struct intra_moe intra_moe_t;

typedef struct intra_moe_params {
    int            num_experts;   /**< over the node; a multiple of the local ranks */
    int            topk;          /**< 1..INTRA_MOE_MAX_TOPK; slots past the node's experts are -1 */
    int            hidden;        /**< columns; rows must be whole 16-byte units */
    strata_dtype_t dtype;         /**< tokens; fp8 comes with scales */
    strata_dtype_t combine_dtype; /**< expert outputs and results: bf16, fp16 or fp32 */
    int            max_tokens;    /**< per rank and step */
    /** The most tokens one dispatch round numbers, its own and those it received: the
     *  rows published for Pull hold one round. 0: max_tokens (a round may be the step). */
    int            round_tokens;
    int            capacity;      /**< rows per local expert; 0: max_tokens * local ranks */
    unsigned       num_blocks;    /**< kernel blocks; 0: STRATA_INTRA_BLOCKS or the backend's */
    uint64_t       timeout_ns;    /**< bound on each wait for a live peer; 0: STRATA_INTRA_TIMEOUT */
    /** Device address of a word that turns nonzero once any rank failed (the engine's
     *  failure watch): waits end then. NULL: only timeout_ns bounds them. */
    const int32_t *failure;
    /** Combine leaves every term where the term_dst table of intra_moe_set_tables says
     *  (the scheduler's, across nodes): no combine_recv area is allocated, and the tables
     *  must then give one. */
    bool           terms_direct;
    /** Exact receive: no capacity; each step's rows go, packed, into buffers the caller
     *  gives after the counts (intra_moe_enqueue_pull_into), and combine reads the outputs
     *  packed the same way. The pull masks are ignored. */
    bool           exact;
    /** Exact receive across nodes in rounds: the most dispatch rounds of a step (each
     *  round's pull lists are kept for its combine round). 0 or 1: one round a step. */
    int            exact_rounds;
} intra_moe_params_t;

/** What a dispatch delivered to this rank's experts; valid until the next combine. */
typedef struct intra_moe_recv {
    int                       experts_per_rank;
    int                       capacity;
    size_t                    row_bytes;    /**< bytes of one token row */
    size_t                    scale_stride; /**< bytes between rows of scales */
    /** [experts_per_rank][capacity] rows; the first count[e] of expert e are filled, in no
     *  particular order: src says which source token and top-k slot each row is. */
    void                     *x;
    float                    *scales;       /**< NULL unless the dtype is fp8 */
    const intra_moe_source_t *src;
    const int32_t            *count;        /**< host memory */
    /** Where combine wants the expert outputs, [experts_per_rank][capacity][hidden] in the
     *  combine dtype; writing them here saves combine a copy for Pull experts. */
    void                     *expert_y;
} intra_moe_recv_t;

/**
 * Kernel blocks a rank may launch: at most requested, and at most its share of the blocks its
 * GPU holds resident at once (resident, split among the sharers ranks on that GPU); at least 1.
 */
unsigned intra_moe_fit_blocks(unsigned requested, unsigned resident, int sharers);

/** Heap bytes each rank needs for these parameters; 0 if they are invalid. */
size_t intra_moe_heap_size(const intra_moe_params_t *params, int local_size);
/** Of that, the local experts' blocks: input rows, their scales and sources, output rows
 *  (capacity rows each); 0 where the params are invalid. */
size_t intra_moe_expert_bytes(const intra_moe_params_t *params, int local_size);

/**
 * Place the buffers in the heap (a symmetric allocation: every local rank calls it with the
 * same parameters on the same heap). STRATA_ERR_INVALID names a bad parameter;
 * STRATA_ERR_NO_MEMORY if the heap is too small.
 */
strata_status_t intra_moe_create(const intra_moe_params_t *params, intra_heap_t *heap,
                                 intra_moe_t **moe_p);
void            intra_moe_destroy(intra_moe_t *moe);

/**
 * Send this rank's tokens to the owners of their experts and receive its experts' tokens.
 * x: [num_tokens][hidden] in dtype, 16-byte aligned; x_scales: [num_tokens][hidden / 128]
 * for fp8, else NULL; topk_idx: [num_tokens][topk] expert ids, -1 for none. pull_mask:
 * bit e of word e / 64 set moves expert e in Pull form (NULL: all Push); every rank must
 * pass the same mask. Errors: STRATA_ERR_INVALID (bad arguments, or an expert id out of
 * range: that entry is skipped), STRATA_ERR_CAPACITY (rows past an expert's capacity are
 * not delivered), STRATA_ERR_TIMEOUT.
 */
strata_status_t intra_moe_dispatch(intra_moe_t *moe, const void *x, const float *x_scales,
                                   const int64_t *topk_idx, int num_tokens,
                                   const uint64_t *pull_mask, intra_moe_recv_t *recv_p);
/**
 * The same dispatch in rounds (1..max_tokens): rounds launches, each with the next slice of
 * this rank's tokens (round r: tokens num_tokens * r / rounds up to num_tokens * (r + 1) /
 * rounds), the experts' blocks filling over them; what the receiver gets, and the combine
 * after it, are those of one dispatch. Every local rank passes the same number of rounds.
 */
strata_status_t intra_moe_dispatch_rounds(intra_moe_t *moe, const void *x,
                                          const float *x_scales, const int64_t *topk_idx,
                                          int num_tokens, int rounds,
                                          const uint64_t *pull_mask, intra_moe_recv_t *recv_p);

/**
 * Return the experts' outputs to their tokens: out[t] = sum over k of topk_weights[t][k] *
 * y(t, k), accumulated in fp32 in k order and rounded once to the combine dtype.
 * expert_y: [experts_per_rank][capacity][hidden] (recv->expert_y or any buffer of that
 * shape); topk_weights: [num_tokens][topk] of the dispatch; out: [num_tokens][hidden].
 * pull_mask as for dispatch, for the return direction. STRATA_ERR_CAPACITY if a row of one
 * of this rank's tokens was dropped (its out row lacks that term).
 */
strata_status_t intra_moe_combine(intra_moe_t *moe, const void *expert_y,
                                  const float *topk_weights, const uint64_t *pull_mask,
                                  void *out);

/* --- Launched without waiting: the two-tier step and stream-ordered use ------------------- */

/*
 * The enqueue calls start kernels on the object's queue and return; intra_moe_synchronize
 * waits for them and reports the first error any of them found (a failure of the object
 * before an input error). On GPU backends with a stream given, launches are ordered on it.
 */

/**
 * Exact receive (params.exact), after the step's dispatch and before its combine, once per
 * step (in rounds, params.exact_rounds: after each dispatch round, the round's rows, each
 * at its expert's place over the step, the experts' rows as the step's counts say): load
 * every row sent to this rank's experts into x ([rows][hidden] in dtype,
 * 16-byte aligned), x_scales ([rows][hidden / 128], fp8 only) and src ([rows], the sources
 * as the API names them), in the device's memory, packed: local expert e's rows from the
 * sum of the counts of the experts before it (intra_moe_counts_ready), sources in rank
 * order. x NULL loads none and drops every row (their sources' combines report it). A
 * combine without this call before it drops them so itself. The outputs combine reads lie
 * packed the same way.
 */
strata_status_t intra_moe_enqueue_pull_into(intra_moe_t *moe, void *x, float *x_scales,
                                            intra_moe_source_t *src);
/**
 * Exact receive in rounds (params.exact_rounds > 1), after the step's combine (or abort)
 * and for each round r in order, each after the round before's reduce: the outputs of the
 * rows this rank's experts got in dispatch round r, read from the packed buffer combine was
 * given, written where their tokens' ranks' term_dst tables say; waits for every local
 * rank's before the next launch on the queue.
 */
strata_status_t intra_moe_enqueue_combine_round(intra_moe_t *moe, int round);
/** Whether the object receives exactly (params.exact). */
bool            intra_moe_exact(const intra_moe_t *moe);

/** What the step across nodes set up once: tables in the heap and the public outputs. */
typedef struct intra_moe_tables {
    int64_t             origin_offset;   /**< heap: int32[max_tokens][2] (rank, token) */
    int32_t             origin_rank;     /**< this rank's global rank */
    int64_t             term_dst_offset; /**< heap: int64[max_tokens][topk]; -1: fused combine */
    intra_moe_source_t *public_src;      /**< device address, [experts_per_rank][capacity] */
    int32_t            *public_count;    /**< device address, [experts_per_rank] */
} intra_moe_tables_t;

/**
 * One dispatch: own tokens from x, and (aug_entry not NULL) those the network brought. A
 * step's dispatch may be several of them, its rounds (every local rank launching as many):
 * each numbers its tokens on from the step's earlier rounds (aug_base) and takes its own
 * tokens from row own_base of x and topk_idx on; all but the last say more_rounds. The
 * experts' blocks fill over the rounds; combine comes after the last, for the whole step.
 * A step in one round leaves the three at 0.
 */
typedef struct intra_moe_step {
    const void     *x;
    const float    *x_scales;
    const int64_t  *topk_idx;       /**< [own_base + num_own][topk] node-local ids, device */
    int             num_own;
    int             own_base;       /**< rounds: row of x and topk_idx of the first own token */
    int             aug_base;       /**< rounds: the step's index of the round's first token */
    bool            more_rounds;    /**< rounds: another dispatch of this step follows */
    int             round;          /**< rounds: this dispatch's index in its step */
    /** across nodes in rounds, every round: [num_experts] the rows this rank sends each
     *  expert of the node over the whole step, device memory, ready by the first round's
     *  launch (the owners then know the step's counts before any row); NULL: one round */
    const int32_t  *step_counts;
    const int32_t  *num_tokens_dev; /**< received: own + received, written by the device */
    /** received, in rounds: the round's aug_base as the device counts it (aug_base is then
     *  not read) */
    const int32_t  *aug_base_dev;
    const char     *entry_base;     /**< received: entries at entry_base + aug_entry[t] */
    const int64_t  *aug_entry;
    const int64_t  *aug_topk;
    int             record_bytes;
    const uint64_t *pull_mask;
    uint64_t        digest;         /**< of the step's modes, checked across the node */
} intra_moe_step_t;

strata_status_t intra_moe_set_tables(intra_moe_t *moe, const intra_moe_tables_t *tables);
/** Launch on the caller's stream from now on (NULL: the object's own queue), after what
 *  was launched before on the old one. */
strata_status_t intra_moe_set_stream(intra_moe_t *moe, void *stream);
/** Copy host src into device dst after the object's launches so far, without waiting;
 *  src may change on return. STRATA_ERR_UNSUPPORTED while the stream is captured. */
strata_status_t intra_moe_write(intra_moe_t *moe, void *dst, const void *src, size_t size);
/** Copy device src into host dst once the object's launches have run (a host wait). */
strata_status_t intra_moe_read(intra_moe_t *moe, void *dst, const void *src, size_t size);
/** Whether the object's stream is being captured into a graph: nothing may wait for it. */
bool            intra_moe_capturing(const intra_moe_t *moe);
strata_status_t intra_moe_enqueue_dispatch(intra_moe_t *moe, const intra_moe_step_t *step);
/** After a dispatch: the public sources and counts (needs the tables). */
strata_status_t intra_moe_enqueue_sources(intra_moe_t *moe);
/**
 * Combine: with a term_dst table, each term y(t, k) of a slot routed to this node goes,
 * unweighted, to the heap offset the table gives (a term dropped for capacity becomes
 * zeros); otherwise the fused sum into out, as intra_moe_combine.
 */
strata_status_t intra_moe_enqueue_combine(intra_moe_t *moe, const void *expert_y,
                                          const float *topk_weights, const uint64_t *pull_mask,
                                          void *out);
/**
 * The combine of a step this rank aborts: the protocol runs to its end with the peers, its
 * own tokens are summed nowhere. expert_y: its experts' results go back as in a combine;
 * NULL: they are withheld, and each source of a row of theirs finds no term for it
 * (STRATA_ERR_CANCELLED there, or from the rank returning that source's terms).
 */
strata_status_t intra_moe_enqueue_abort(intra_moe_t *moe, const void *expert_y,
                                        const uint64_t *pull_mask);
/**
 * out[t] = sum over k of topk_weights[t][k] * y(t, k), y(t, k) at address term_src[t][k] (0:
 * none), accumulated in fp32 in k order and rounded once. Involves no peer. The tokens are
 * the step's from first_token on (with node-reduce the network tables, which are the
 * step's, say on which node each term was summed).
 */
strata_status_t intra_moe_enqueue_reduce(intra_moe_t *moe, const uint64_t *term_src,
                                         const float *topk_weights, int first_token,
                                         int num_tokens, void *out);
/** One of the network kernels (INTRA_MOE_KERNEL_NET_*) with its arguments. */
strata_status_t intra_moe_enqueue_net(intra_moe_t *moe, intra_moe_kernel_t kernel,
                                      const intra_net_args_t *net);
/** The buffers a dispatch fills (counts aside): valid for the object's life. */
void            intra_moe_buffers(const intra_moe_t *moe, intra_moe_recv_t *recv_p);
/** Wait for everything launched; the first error found (and its one log line). Resetting
 *  the statuses for the next step is enqueued, not waited for: see intra_moe_idle. */
strata_status_t intra_moe_synchronize(intra_moe_t *moe);
/** Whether a step that ended with status goes on (an input error: a bad expert id, rows
 *  past capacity, terms an owner withheld) rather than failing the object. */
bool            intra_moe_status_soft(strata_status_t status);
/** Wait until nothing the object enqueued is pending (before its memory goes). */
strata_status_t intra_moe_idle(intra_moe_t *moe);
/** The number the step about to start has in the caller's messages; from then on the
 *  object's own messages use it (without it, they count dispatches). */
void            intra_moe_name_step(intra_moe_t *moe, uint64_t step);
/** The rank the wait that failed the object was for, -1 if none; *local_p: a rank of this
 *  node by its local rank, else a global rank. */
int             intra_moe_waited_for(const intra_moe_t *moe, bool *local_p);

/**
 * Per-expert completion: the dispatches launched so far (the last one's kernels mark its
 * experts with this number), and whether local expert e's rows of that step are all in
 * its block (*rows_p: how many). Reads mapped host memory the kernels write; waits for
 * nothing. STRATA_ERR_INVALID: e out of range; STRATA_ERR_UNSUPPORTED once a dispatch was
 * captured in a graph (its replays advance the kernels' step, not the host's count).
 */
uint64_t        intra_moe_dispatches(const intra_moe_t *moe);
strata_status_t intra_moe_expert_ready(const intra_moe_t *moe, int e, bool *ready_p,
                                       int32_t *rows_p);
/**
 * Whether the last dispatch launched has counted its rows: then counts[e] (for each local
 * expert) is the rows every rank sent expert e in that step, before its capacity; else
 * zeros. Reads mapped host memory; waits for nothing. STRATA_ERR_UNSUPPORTED once a
 * dispatch was captured, as intra_moe_expert_ready.
 */
strata_status_t intra_moe_counts_ready(const intra_moe_t *moe, bool *ready_p, int32_t *counts);
/**
 * Enqueue on the caller's stream a wait until local expert e's rows of the last dispatch
 * launched are all in: work enqueued after it there reads them. The wait ends as well at
 * a failed rank or the object's bound, without a report (the step's kernels report).
 * STRATA_ERR_UNSUPPORTED while that stream is captured; STRATA_ERR_INVALID: e out of
 * range, no stream, or no dispatch yet.
 */
strata_status_t intra_moe_enqueue_expert_wait(intra_moe_t *moe, int e, void *stream);
/** The queues of those waits, each waited for (before the marks they read go). */
void            intra_moe_release_waits(intra_moe_t *moe);
/** Expert waits on streams that ended at their bound without the mark, over the object's
 *  life (their work may have read incomplete rows). */
uint64_t        intra_moe_waits_expired(const intra_moe_t *moe);
/** The mapped words' size for experts_per_rank experts (the object's own allocation). */
size_t          intra_moe_ready_bytes(int experts_per_rank);

/** The config table of the intra layer (STRATA_INTRA_*). */
extern const util_config_table_t intra_config_table;

#endif
