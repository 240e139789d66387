/*
 * The two-tier MoE object's parts, shared by the scheduler's sources: the plan of a rank's
 * tokens, the registered network area and its wire formats, and the step state.
 */
#ifndef STRATA_SCHEDULER_SCHED_INTERNAL_H
#define STRATA_SCHEDULER_SCHED_INTERNAL_H

#include "sched.h"
#include "util/util.h"

#include <stdatomic.h>

#define SCHED_MASK_WORDS  (INTRA_MOE_MAX_EXPERTS / 64) /* of a node's experts */
#define SCHED_CTRL_BYTES  64 /* one header or grant */
#define SCHED_HEADER_MAGIC 0x53544845u /* "STHE" */
#define SCHED_GRANT_MAGIC  0x53544752u /* "STGR" */

/* Immediates: STRATA_MOE_IMM_BASE + kind * world_size + the writing rank. */
typedef enum sched_imm_kind {
    SCHED_IMM_HEADER,   /* a source's counts for this step */
    SCHED_IMM_SPEC,     /* round one: the first tokens, into the source's private slot */
    SCHED_IMM_GRANT,    /* where round two goes, from the receiver */
    SCHED_IMM_OVERFLOW, /* round two: the rest, at the granted place */
    SCHED_IMM_COMBINE,  /* one per returned term */
    SCHED_IMM_KINDS
} sched_imm_kind_t;

/* What a source writes to each peer first, every step, even with no tokens. */
typedef struct sched_header {
    uint32_t magic;
    uint32_t pad;
    uint64_t step;
    int32_t  num_push;    /* entries the source writes: round one, then round two */
    int32_t  num_pull;    /* entries after those, for the receiver to fetch */
    uint64_t mask_digest; /* of the modes the source moves this step's experts in */
    uint64_t next[];      /* adaptive: its own experts' modes decided for the step after
                             next (bit: Pull), [own_words] */
} sched_header_t;

/*
 * A local rank's mode board in the node's heap, one per step parity: the modes of the
 * experts whose owner has this local index, on every node, for one step. The rank writes
 * the bits, then publishes the step (release); the node's ranks read them after seeing
 * the step (acquire).
 */
typedef struct sched_board {
    _Atomic uint64_t step;
    _Atomic uint64_t digest_step; /* published after digest, by the rank in that step */
    uint64_t         digest;      /* of the masks it moves that step in */
    uint64_t         pad[5];
    uint64_t         mask[];      /* [mask_words] global expert ids */
} sched_board_t;

/* The receiver's answer when round two is needed. */
typedef struct sched_grant {
    uint32_t magic;
    uint32_t pad;
    uint64_t step;
    int64_t  offset; /* entry index in the receiver's overflow area */
    int32_t  first;  /* the source's first entry to write there */
    int32_t  count;  /* entries to write */
} sched_grant_t;

/*
 * A token on the wire: one entry of entry_bytes, [record][row][scales], each part a whole
 * number of 16-byte units. The record: the token's index at its source, then for each
 * top-k slot the node-local expert id at the destination, or -1.
 */
typedef struct sched_record {
    int32_t token;
    int32_t experts[]; /* [topk] */
} sched_record_t;

/* The public layout: one rank's tokens, by peer. */
struct strata_moe_layout {
    const sched_moe_t *moe;
    int                num_tokens;
    bool               had_bad_ids; /* bad ids were turned into -1 */
    int64_t           *clean_idx;   /* [num_tokens][topk] global ids, bad ones -1 */
    int64_t           *node_idx;    /* [num_tokens][topk] node-local ids on this node, or -1 */
    int32_t           *peer_first;  /* [num_peers + 1] into tokens/experts */
    int32_t           *tokens;      /* per peer, in token order */
    int32_t           *experts;     /* [entries][topk] node-local ids at the peer, or -1 */
    int64_t           *peer_terms;  /* [num_peers] (token, slot) pairs the peer returns */
};

typedef enum sched_state {
    SCHED_STEP_IDLE,
    SCHED_STEP_DISPATCH_SENT,
    SCHED_STEP_DISPATCHED,
    SCHED_STEP_COMBINE_SENT,
    SCHED_STEP_FAILED,
} sched_state_t;

/* Offsets in the registered network area, the same on every rank. */
typedef struct sched_net_layout {
    size_t terms;    /* [max_aug][topk][y_row_bytes]: first, so pages count from 0 */
    size_t headers;  /* [world][2] received, by source and step parity */
    size_t grants;   /* [world] received, by receiver */
    size_t out_headers; /* [world] headers being sent, by peer */
    size_t out_grants;  /* [world] grants being sent, by peer */
    size_t spec;     /* [world][spec_tokens] entries, by source */
    size_t overflow; /* [num_peers * max_tokens] entries, handed out by grants */
    size_t staging;  /* [world][max_tokens] entries, by destination */
    size_t ret_out;  /* [num_peers * max_tokens * topk] terms being returned, by peer */
    size_t ret_in;   /* [num_peers][max_tokens * topk] terms returned to us, by peer */
    size_t total;
} sched_net_layout_t;

/* Per peer and step. */
typedef struct sched_peer_step {
    int32_t          send_push, send_pull; /* this rank's entries for the peer */
    int32_t          recv_push, recv_pull; /* the peer's entries for this rank */
    int64_t          recv_offset;          /* overflow entry given to the peer */
    int32_t          granted;              /* entries the peer writes there */
    int32_t          terms_first;          /* into page lists */
    int32_t          num_terms;            /* pages combine returns to the peer */
} sched_peer_step_t;

#define SCHED_MAX_REQUESTS_PER_PEER 6

struct sched_moe {
    strata_moe_params_t  params;
    sched_moe_world_t    world;
    strata_moe_route_t   route;
    int                  spec_tokens;
    bool                 pull_read;
    uint64_t             timeout_ns;
    int                  local_size;
    int                  experts_per_rank;
    int                  experts_per_node;
    int                 *node_ranks; /* [num_nodes][local_size] global rank */
    int                  num_peers;
    int                 *peers;      /* [num_peers] ranks this rank exchanges tokens with */
    int                 *peer_index; /* [world] index in peers, or -1 */
    int                  max_aug;    /* own tokens plus every peer's */
    size_t               row_bytes, scale_bytes, record_bytes, entry_bytes, y_row_bytes;
    int                  scale_count;

    intra_heap_t        *heap;
    intra_moe_t         *intra;
    size_t               origin_offset; /* heap: int32[max_aug][2] (rank, token) */

    char                *net;
    inter_mr_t          *net_mr;
    inter_rdesc_t       *net_desc; /* [world] */
    sched_net_layout_t   net_layout;

    char                *aug_x;      /* [max_aug][row_bytes]: the intra tier's input */
    float               *aug_scales; /* [max_aug][scale_count] */
    int64_t             *aug_idx;    /* [max_aug][topk] node-local, device memory */
    int64_t             *host_idx;   /* host copy being built */
    int32_t             *aug_origin; /* [max_aug][2] */
    uint32_t            *src_pages;  /* [max_aug * topk] terms to return, by peer */
    int32_t             *ret_map;    /* [num_peers][max_tokens * topk]: t * topk + k of each
                                        term a peer returns, in the order it sends them */
    sched_peer_step_t   *peer_step;  /* [num_peers] */
    inter_request_t    **requests;   /* [num_peers * SCHED_MAX_REQUESTS_PER_PEER] */
    int                  num_requests;

    sched_state_t        state;
    uint64_t             step;
    const sched_plan_t  *plan;
    const void          *x;        /* the step's tokens, for a single node */
    const float         *x_scales;
    int                  num_aug;
    const void          *expert_y;
    strata_status_t      step_status; /* INVALID or CAPACITY found earlier in the step */
    /* Global expert masks (bit: Pull), mask_words each. */
    uint64_t            *dispatch_mask, *combine_mask;
    uint64_t            *step_dispatch_mask;
    uint64_t            *stats_mask; /* the last completed step's */

    strata_moe_recv_t    recv;
    strata_moe_source_t *src;        /* [experts_per_rank][capacity] */
    intra_moe_source_t  *intra_src;  /* host copy */
    int32_t             *origins;    /* [local_size][max_aug][2] host copy */
    strata_moe_stats_t   stats;
    uint64_t             step_start_ns;

    /* Modes (sched_modes.c). */
    strata_moe_mode_t    mode;           /* resolved */
    bool                 host_heap;      /* the boards can be used from the host */
    char                *mode_file;
    int                  mask_words;     /* words of a global expert mask */
    int                  own_words;      /* words of this rank's experts' bits */
    size_t               header_bytes;   /* a header slot: the header and its bits */
    size_t               board_bytes;    /* one board slot */
    size_t               board_offset;   /* heap: sched_board_t[2] */
    const sched_mode_decider_ops_t *decider;
    void                *decider_ctx;
    bool                *decided;        /* [experts_per_rank] the decider's answer */
    uint64_t            *next_bits;      /* [own_words] to publish with the next header */
    uint64_t            *sent_bits;      /* [own_words] published with this step's */
    int32_t             *node_tokens;    /* [experts_per_rank][num_nodes] */
    uint64_t             step_digest;    /* of this step's masks */
};

static inline uint32_t sched_imm(const sched_moe_t *moe, sched_imm_kind_t kind, int rank)
{
    return STRATA_MOE_IMM_BASE + (uint32_t)kind * (uint32_t)moe->world.world_size +
           (uint32_t)rank;
}

static inline bool sched_mask_test(const uint64_t *mask, int bit)
{
    return (mask[bit / 64] >> (bit % 64)) & 1u;
}

/* Global id of node-local expert j on node. */
static inline int sched_node_expert(const sched_moe_t *moe, int node, int j)
{
    int owner = moe->node_ranks[node * moe->local_size + j / moe->experts_per_rank];

    return owner * moe->experts_per_rank + j % moe->experts_per_rank;
}

/* Node-local id of global expert e on its node. */
static inline int sched_local_expert(const sched_moe_t *moe, int expert)
{
    int owner = expert / moe->experts_per_rank;

    return moe->world.rank_local[owner] * moe->experts_per_rank + expert % moe->experts_per_rank;
}

/* Bytes of a global expert mask. */
static inline size_t sched_mask_bytes(const sched_moe_t *moe)
{
    return sizeof(uint64_t) * (size_t)moe->mask_words;
}

/* Every expert in one mode, in dispatch and combine. */
void            sched_fill_masks(sched_moe_t *moe, bool pull);
/* The intra tier's pull mask (node-local expert ids) from a global one. */
void            sched_node_mask(const sched_moe_t *moe, const uint64_t *global, uint64_t *node_mask);
/* Wait for count arrivals of imm; any rank's failure ends it with PEER_FAILED. */
strata_status_t sched_wait_imm(sched_moe_t *moe, sched_imm_kind_t kind, int from, uint64_t count,
                               const char *what);
/* Keep a request until the step's end. */
void            sched_keep_request(sched_moe_t *moe, inter_request_t *req);
/* Wait for every kept request and give them back. */
strata_status_t sched_finish_requests(sched_moe_t *moe);
/* An intra-tier step that timed out: PEER_FAILED if the engine sees a dead rank within its
 * heartbeat bound, else the status as it is. */
strata_status_t sched_intra_failure(sched_moe_t *moe, strata_status_t status);
/* A step failed for good: the object can only be destroyed. */
strata_status_t sched_fail(sched_moe_t *moe, strata_status_t status, const char *what);
/* Modes: this step's masks from the boards (adaptive), and their digest. */
strata_status_t sched_modes_begin_step(sched_moe_t *moe);
/* After the node's dispatch: INTERNAL when a local rank moved the step in other modes. */
strata_status_t sched_modes_check_node(sched_moe_t *moe);
/* The digest and decided bits a header carries. */
void            sched_modes_fill_header(const sched_moe_t *moe, sched_header_t *header);
/* INTERNAL when a source moves this step's experts in other modes than this rank. */
strata_status_t sched_modes_check_header(const sched_moe_t *moe, int source,
                                         const sched_header_t *header);
/* Adaptive: this rank's board for the next step, from its own and its peers' decisions. */
void            sched_modes_publish(sched_moe_t *moe);
/* Adaptive: the decider's answer from this step's rows, for the next header. */
void            sched_modes_decide(sched_moe_t *moe);
/* Where, in peer's network area, the terms this rank returns to it land. */
size_t          sched_ret_in_at(const sched_moe_t *moe, int peer);

/*
 * A source's header slot for a step. Two per source, by the step's parity: a peer that
 * exchanged no tokens with us in a step does not wait for us in its combine, so it can
 * send the next step's header before we have read this one; it cannot get two steps ahead,
 * since each step's dispatch waits for our header of that step.
 */
static inline size_t sched_header_at(const sched_moe_t *moe, int source, uint64_t step)
{
    return moe->net_layout.headers + ((size_t)source * 2 + (size_t)(step & 1)) * moe->header_bytes;
}

/* The peer's part of the network area. */
static inline char *sched_net(const sched_moe_t *moe, size_t offset)
{
    return moe->net + offset;
}

#endif
