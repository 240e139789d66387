/*
 * What the node's MoE kernels and their host side share: limits, status codes, the control
 * block and buffer layout in each rank's heap part, and a launch's arguments. Plain C
 * types, compiled by every backend; the kernel bodies are in moe_dispatch.h and
 * moe_combine.h (all of them: moe_kernels.h).
 */
#ifndef STRATA_INTRA_MOE_FORMAT_H
#define STRATA_INTRA_MOE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "net_format.h"

#define INTRA_MOE_MAX_RANKS   16
#define INTRA_MOE_MAX_EXPERTS 1024
#define INTRA_MOE_MAX_TOPK    32
#define INTRA_MOE_MASK_WORDS  (INTRA_MOE_MAX_EXPERTS / 64)
/** fp8 tokens carry one fp32 scale per this many columns. */
#define INTRA_MOE_SCALE_COLUMNS 128

/** Element types of the combine input and output. */
enum {
    INTRA_MOE_ELEM_BF16 = 0,
    INTRA_MOE_ELEM_FP16 = 1,
    INTRA_MOE_ELEM_FP32 = 2,
};

/** What a kernel found wrong; the first error of a launch wins. */
enum {
    INTRA_MOE_KERNEL_OK           = 0,
    INTRA_MOE_KERNEL_BAD_EXPERT   = 1, /* value: the id, token/slot: where */
    INTRA_MOE_KERNEL_CAPACITY     = 2, /* value: the expert, count: rows it was sent */
    INTRA_MOE_KERNEL_DROPPED      = 3, /* combine: a row of this token was not received */
    INTRA_MOE_KERNEL_TIMEOUT      = 4, /* value: the rank waited for */
    INTRA_MOE_KERNEL_MODES        = 5, /* value: a local rank moving the step in other modes */
    INTRA_MOE_KERNEL_NET_FAILED   = 6, /* count: the work ring's failure status */
    INTRA_MOE_KERNEL_NET_TIMEOUT  = 7, /* value: the rank waited for; token: what */
    INTRA_MOE_KERNEL_NET_PROTOCOL = 8, /* value: the rank whose header, grant or entry is
                                          wrong; token: what; count: its step */
    INTRA_MOE_KERNEL_PEER_FAILED  = 9, /* value: the local rank waited for when the engine
                                          announced that a rank failed */
    INTRA_MOE_KERNEL_TERMS_DROPPED = 10, /* value: the rank that returned this rank's terms;
                                            count: how many of them were dropped there */
    INTRA_MOE_KERNEL_WITHHELD     = 11, /* combine: the owner of a row of this token aborted
                                           the step and returned nothing (value: expert) */
    INTRA_MOE_KERNEL_TERMS_WITHHELD = 12, /* value: the rank that returned this rank's terms;
                                             count: how many of them an owner there withheld */
    INTRA_MOE_KERNEL_GAVE_UP      = 13, /* combine: the owner of a row of this token gave up
                                           waiting in its dispatch and returned nothing
                                           (value: expert) */
    INTRA_MOE_KERNEL_TERMS_GAVE_UP = 14, /* as TERMS_WITHHELD, where an owner there gave up */
    INTRA_MOE_KERNEL_COUNTS       = 15, /* value: the local expert; token: the rows the step's
                                           counts announced; count: the rows sent */
};

typedef struct intra_moe_status {
    int32_t code;
    int32_t value;
    int32_t token;
    int32_t slot;
    int64_t count;
    int64_t pad;
} intra_moe_status_t;

/** The head of every rank's part of the heap. Flags are written by peers. */
typedef struct intra_moe_control {
    uint64_t dispatch_flag[INTRA_MOE_MAX_RANKS]; /* [source]: last step it sent us */
    uint64_t combine_flag[INTRA_MOE_MAX_RANKS];  /* [owner]: last step it returned us */
    uint64_t dispatch_send_done; /* blocks that finished a phase, summed over steps */
    uint64_t dispatch_recv_done;
    uint64_t combine_send_done;
    /* Dispatches completed, written by the last block of each: kernels read their step
     * here rather than from their arguments, so that a captured graph can replay them. */
    uint64_t dispatched;
    /* Combines completed, written by the last block of each: the count its blocks are
     * summed against (a step's dispatch may take several launches, its combine takes one). */
    uint64_t combined;
    uint64_t digest;       /* of the modes this rank moves the current step in */
    /* The last step whose results this rank withheld (it aborted the step): its sources
     * read it once its combine flag is released, and take no term from it. */
    uint64_t withheld;
    /* The last step whose results it withheld because a wait of its dispatch gave up (its
     * blocks may lack rows a late source sent, their slots a former step's): written
     * before withheld. */
    uint64_t gave_up;
    /* Per-expert completion (moe_common.h): the last step whose counts each source
     * published to us, and the last step whose expected rows we settled. */
    uint64_t counts_flag[INTRA_MOE_MAX_RANKS];
    uint64_t expected_step;
    /* Across nodes in rounds: the first round (its step) whose sources' step counts this
     * owner summed for the host (moe_announce_counts); its last round checks them. */
    uint64_t announced_step;
    /* [source]: last step whose rows for Pull experts it published to us, and the blocks
     * of this rank done publishing, summed over steps. */
    uint64_t pull_flag[INTRA_MOE_MAX_RANKS];
    uint64_t pull_published_done;
    uint64_t pull_into_done; /* exact receive: blocks done loading, summed over steps */
    /* Exact receive in rounds: the last round (its step) whose rows this rank loaded, read
     * by the next round's barrier (the sources then rewrite what the loads read). */
    uint64_t pulled_into;
    /* Exact receive in rounds, combine: this rank's combine rounds so far (combine_rounds,
     * written by the last block of each, and the blocks done, summed); the last round
     * whose terms this rank's areas may take (round_ready); [owner]: the last round whose
     * terms that owner wrote here (round_flag). Numbered by combine_rounds + 1. */
    uint64_t combine_rounds;
    uint64_t round_push_done;
    uint64_t round_ready;
    uint64_t round_flag[INTRA_MOE_MAX_RANKS];
    uint64_t failed_step; /* the last step a wait of this rank's dispatch (or its rounds, or
                             the exact receive's loads) gave up in: its rows are not all in */
    /* The last step whose combine gave up here waiting for the node's owners' results:
     * what this rank returns to other nodes that step lacks them (net_combine.h). */
    uint64_t combine_failed_step;
    /* The table index of the first token of this rank's current dispatch round (its
     * aug_base): owners find the rows it publishes for Pull at send_x[token - aug_base].
     * Written before the counts, and read after their flag. */
    int64_t  aug_base;
    intra_moe_status_t dispatch_status;
    intra_moe_status_t combine_status;
    intra_moe_status_t net_status; /* the step across nodes (net_kernels.h) */
} intra_moe_control_t;

/** Where a received row came from. */
typedef struct intra_moe_source {
    int32_t rank;
    int32_t token;
    int32_t slot; /* k: which of the token's top-k choices */
} intra_moe_source_t;

/** Offsets of the buffers inside each rank's heap part (the same on every rank). */
typedef struct intra_moe_heap_offsets {
    size_t control;       /* intra_moe_control_t */
    size_t counter;       /* uint32[experts_per_rank]: push slots claimed, owner zeroes */
    size_t recv_count;    /* int32[experts_per_rank] */
    size_t pull_offset;   /* int32[num_experts + 1]: CSR of this rank's pull entries */
    size_t pull_cursor;   /* int32[num_experts]: scratch for building it */
    size_t pull_entry;    /* int32[max_tokens * topk]: token * topk + k, by expert; a
                             round's lists from its first entry's place on */
    size_t round_offset;  /* int32[exact_rounds][num_experts + 1]: each round's pull_offset,
                             kept for the exact receive's combine in rounds */
    size_t sent_count;    /* int32[num_experts]: rows this rank sends each expert this step
                             (in rounds: this round) */
    size_t step_sent;     /* int32[num_experts]: across nodes in rounds, the rows this rank
                             sends each expert over the whole step, published in its first */
    size_t announced;     /* int32[experts_per_rank]: those summed over the sources */
    size_t landed;        /* uint32[experts_per_rank]: rows landed this step, owner zeroes */
    size_t expected;      /* int32[experts_per_rank]: rows each expert gets this step */
    size_t round_base;    /* int32[experts_per_rank]: rows each expert was sent in the
                             step's earlier dispatch rounds (capacity aside); 0 in the first */
    size_t marked;        /* uint64[experts_per_rank]: last step marked complete (the
                             kernels' copy of the mapped marks) */
    size_t route;         /* int32[max_tokens * topk]: validated expert id or -1 */
    size_t row_slot;      /* int32[max_tokens * topk]: row at the owner, -1 if none */
    size_t send_x;        /* [round_tokens][row_bytes]: tokens published for pull, by
                             their index in the dispatch round */
    size_t send_scales;   /* [round_tokens][scale_stride] */
    size_t recv_x;        /* [experts_per_rank][capacity][row_bytes] */
    size_t recv_scales;   /* [experts_per_rank][capacity][scale_stride] */
    size_t recv_src;      /* intra_moe_source_t[experts_per_rank][capacity] */
    size_t expert_y;      /* [experts_per_rank][capacity][y_row_bytes]: published for pull */
    size_t combine_recv;  /* [max_tokens][topk][y_row_bytes]: pushed by owners */
    size_t total;
} intra_moe_heap_offsets_t;

/** One launch's arguments, passed by value to GPU kernels. */
/*
 * What the host learns of a dispatch before it ends, in mapped host memory the owner's
 * kernels write: for each local expert, the last step whose rows have all landed in its
 * block and how many there are (written before the step); the last step whose counts are
 * in, and those counts: the rows every rank sent each local expert, before the capacity.
 */
typedef struct intra_moe_marks {
    uint64_t *ready;         /* [experts_per_rank] */
    uint64_t *waits_expired; /* expert waits on streams that ended at their bound */
    uint64_t *counts_step;
    int32_t  *ready_rows;    /* [experts_per_rank] */
    int32_t  *routed;        /* [experts_per_rank] */
} intra_moe_marks_t;

typedef struct intra_moe_args {
    int32_t  rank;
    int32_t  num_ranks;
    int32_t  num_experts;
    int32_t  experts_per_rank;
    int32_t  topk;
    int32_t  capacity;
    int32_t  num_tokens;
    int32_t  round_tokens; /* the most tokens one round numbers: send_x's rows */
    /*
     * A step's dispatch may come in rounds, each a launch with some of its tokens; the
     * experts' blocks fill over the rounds and combine follows the last. Tokens are
     * numbered over the whole step: a round's token t (0 <= t < its count) is the step's
     * aug_base + t in the tables (route, row_slot, pull lists, origins, term_dst,
     * aug_entry, aug_topk), and own token t is row own_base + t of x and topk_idx. One
     * round: both 0, more_rounds 0. Across nodes in rounds only the device knows how many
     * tokens the earlier rounds brought: aug_base_dev, where not NULL, holds aug_base.
     */
    int32_t  aug_base;
    int32_t  own_base;
    int32_t  more_rounds;  /* nonzero: another round of this step's dispatch follows */
    int32_t  later_round;  /* nonzero: a round of this step's dispatch came before */
    int32_t  round;        /* the round's index in its step */
    /* Across nodes in rounds, every round: [num_experts] the rows this rank sends each
     * expert of the node over the whole step (its own and those it received), which the
     * first round publishes before any row, so that the owners know the step's counts
     * then and the last round checks them against the rows sent. NULL: one round. */
    const int32_t *step_counts;
    int32_t  row_bytes;    /* dispatched token row, a multiple of 16 */
    int32_t  scale_count;  /* fp32 scales per row, 0 without */
    int32_t  scale_stride; /* bytes between scale rows in the heap, a multiple of 16 */
    int32_t  hidden;
    int32_t  y_elem;       /* INTRA_MOE_ELEM_* of combine input and output */
    int32_t  y_row_bytes;
    /*
     * Exact receive: the dispatch counts every row and publishes it (every expert in Pull
     * form) but loads none, and no capacity applies; PULL_INTO then loads the rows into
     * the caller's buffers, packed expert after expert (into_x NULL: it loads none, and
     * the sources learn that their rows were dropped); combine reads the outputs packed
     * the same way and pushes them back. Buffers in the device's memory.
     */
    int32_t  exact;
    /* In rounds (exact_rounds > 1, across nodes: step_counts given) each round's rows are
     * loaded after it, at their expert's place over the step (the first round's counts
     * give the experts' places), and combine returns each round's terms in its round
     * (COMBINE_ROUND) into the places the gathering rank's term_dst says. */
    int32_t  exact_rounds;
    void    *into_x;                /* [rows][row_bytes] */
    float   *into_scales;           /* [rows][scale_count], fp8 only */
    intra_moe_source_t *into_src;   /* [rows], as the API names sources */
    uint64_t timeout_ticks; /* bound on each wait for a live peer, in kernel_timer ticks */
    /* Nonzero once the engine saw any rank fail (its heartbeats stopped): waits for a peer
     * end then, however long their bound. NULL: none. */
    const int32_t *failure;
    uint64_t digest;        /* of the step's modes: every local rank must pass the same */
    uint64_t pull_mask[INTRA_MOE_MASK_WORDS]; /* bit e set: expert e moves in Pull form */
    char    *heap[INTRA_MOE_MAX_RANKS];       /* each rank's heap part as mapped here */
    intra_moe_heap_offsets_t heap_offsets;
    /* the caller's buffers */
    const void    *x;            /* [num_tokens][row_bytes] */
    const float   *x_scales;     /* [num_tokens][scale_count] or NULL */
    const int64_t *topk_idx;     /* [num_tokens][topk] */
    const void    *expert_y;     /* [experts_per_rank][capacity][y_row_bytes] */
    const float   *topk_weights; /* [num_tokens][topk] */
    void          *out;          /* [num_tokens][y_row_bytes]; gather: [num_tokens][topk][..] */
    /* Combine of a step this rank aborts: withhold (nonzero) returns none of its experts'
     * results; out NULL sums none of its own tokens. */
    int32_t        withhold;
    /*
     * The step across nodes (NULL / -1 / 0 when the node is alone). Tokens from num_own on
     * came over the network: their entries [record][row][scales] are at entry_base +
     * aug_entry[t] and their node-local expert ids in aug_topk; only the device knows how
     * many there are (*num_tokens_dev). Origins and term destinations are tables in each
     * rank's heap part; term_src gives reduce every term's address.
     */
    int32_t        num_own;
    int32_t        record_bytes;
    int32_t        origin_rank;     /* the global rank of this rank's own tokens */
    const int32_t *num_tokens_dev;
    const int32_t *aug_base_dev;    /* rounds across nodes: the round's aug_base, or NULL */
    const char    *entry_base;
    const int64_t *aug_entry;       /* [max_tokens] byte offsets, from num_own on */
    const int64_t *aug_topk;        /* [max_tokens][topk], from num_own on */
    int64_t        origin_offset;   /* heap: int32[max_tokens][2] (rank, token); -1 none */
    int64_t        term_dst_offset; /* heap: int64[max_tokens][topk] heap offsets; -1 none */
    const uint64_t *term_src;       /* reduce: [num_tokens][topk] addresses, 0: no term */
    intra_moe_marks_t marks;        /* per-expert completion and counts, mapped host memory */
    int32_t        wait_expert;     /* the expert-wait kernel's: which expert, which step */
    uint64_t       wait_step;
    intra_moe_source_t *public_src; /* sources: [experts_per_rank][capacity] as the API has them */
    int32_t       *public_count;    /* sources: [experts_per_rank] */
    intra_net_args_t net;           /* the network kernels' (net_kernels.h); ring NULL: none */
} intra_moe_args_t;

#endif
