/*
 * What the MoE step across nodes keeps and sends, shared by its kernels (net_kernels.h),
 * the host code that sets them up (scheduler/) and the launch arguments (moe_format.h):
 * the wire formats of headers, grants and token entries, the per-peer and per-object state
 * in device memory, and the kernels' arguments. Plain C, compiled by every backend.
 */
#ifndef STRATA_INTRA_NET_FORMAT_H
#define STRATA_INTRA_NET_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "util/util_work_ring.h"

#define INTRA_NET_HEADER_MAGIC  0x53544845u /* "STHE" */
#define INTRA_NET_GRANT_MAGIC   0x53544752u /* "STGR" */
#define INTRA_NET_CTRL_BYTES    64          /* one grant slot */
/*
 * One peer's block of rows being returned: up to max_tokens entries of up to rows_per_entry
 * rows each (an entry's terms on the returning side), packed, then this many bytes: two
 * int64 that count the terms missing on the returning node (a zero term stands in for
 * each), dropped for capacity there and withheld by an owner there that aborted the step
 * (INTRA_NET_DROPS_GAVE_UP set in the count where an owner there withheld because a wait
 * of its step gave up); the tokens' rank learns of them from there. Blocks land in the
 * tokens' rank's ret_in one after the other, each where that rank's header said.
 */
#define INTRA_NET_DROPS_BYTES   16
#define INTRA_NET_DROPS_GAVE_UP (1ull << 62)
#define INTRA_NET_RET_BLOCK(max_tokens, rows_per_entry, y_row_bytes) \
    ((size_t)(max_tokens) * (size_t)(rows_per_entry) * (size_t)(y_row_bytes) + \
     INTRA_NET_DROPS_BYTES)
#define INTRA_NET_MAX_OWN_WORDS 16          /* words of one rank's expert bits */

/* Immediates: imm_base + kind * world + the writing rank. */
enum {
    INTRA_NET_IMM_HEADER,   /* a source's counts for this step */
    INTRA_NET_IMM_SPEC,     /* round one: the first tokens, into the source's private slot */
    INTRA_NET_IMM_GRANT,    /* where round two goes, from the receiver */
    INTRA_NET_IMM_OVERFLOW, /* round two: the rest, at the granted place */
    INTRA_NET_IMM_COMBINE,  /* terms returned (node-reduce: one partial row per token) */
    INTRA_NET_IMM_WEIGHTS,  /* node-reduce: a token's weights, to the node holding its terms */
    /* In rounds, the same two into the second of their two buffers (net_buffer_imm). */
    INTRA_NET_IMM_COMBINE_ODD,
    INTRA_NET_IMM_WEIGHTS_ODD,
    INTRA_NET_IMM_KINDS
};

/* The work ring's completion counters. */
enum {
    INTRA_NET_COUNTER_SEND, /* writes from this rank's network area */
    INTRA_NET_COUNTER_READ, /* reads into it */
    INTRA_NET_COUNTERS
};

/* What a network failure was waiting for (a status's token field). */
enum {
    INTRA_NET_WAIT_CREDIT = 1,
    INTRA_NET_WAIT_HEADER,
    INTRA_NET_WAIT_GRANT,
    INTRA_NET_WAIT_ROUND_ONE,
    INTRA_NET_WAIT_ROUND_TWO,
    INTRA_NET_WAIT_READS,
    INTRA_NET_WAIT_TERMS,
    INTRA_NET_WAIT_SENDS,
    INTRA_NET_BAD_ENTRY, /* protocol: a record with a token or expert out of range */
    INTRA_NET_WAIT_WEIGHTS,
    INTRA_NET_WAIT_ROUND, /* a dispatch round's header from the peer: its credit for round one */
    INTRA_NET_BAD_COUNTS, /* protocol: a header's step counts out of range */
};

/* What a source writes to each peer first, every step, even with no tokens; followed by
 * own_words of the bits of its own experts' modes decided for the step after next, then
 * (the streamed exchange in rounds) the step's counts (intra_net_args_t header_counts). */
typedef struct intra_net_header {
    uint32_t magic;
    uint32_t pad;
    uint64_t step;
    int32_t  num_push;    /* entries the source writes: round one, then round two */
    int32_t  num_pull;    /* entries after those, for the receiver to fetch */
    uint64_t mask_digest; /* of the modes the source moves this step's experts in */
    int64_t  ret_at;      /* where in the source's ret_in the receiver's returns go */
} intra_net_header_t;

/* The receiver's answer when round two is needed. */
typedef struct intra_net_grant {
    uint32_t magic;
    uint32_t pad;
    uint64_t step;
    int64_t  offset; /* entry index in the receiver's overflow area */
    int32_t  first;  /* the source's first entry to write there */
    int32_t  count;  /* entries to write */
} intra_net_grant_t;

/*
 * A token on the wire: one entry of entry_bytes, [record][row][scales], each part a whole
 * number of 16-byte units. The record: the token's index at its source, then for each
 * top-k slot the node-local expert id at the destination, or -1.
 */

/* Per peer, in device memory. rank and index_there are set at creation; the running totals
 * only grow (what the kernels have waited for so far); the rest is the step's. */
typedef struct intra_net_peer {
    int32_t  rank;
    int32_t  index_there; /* our index among the peer's peers: our block in its spec,
                           * staging and w_in areas */
    int32_t  send_push, send_pull;
    int32_t  recv_push, recv_pull;
    int32_t  granted;     /* entries the peer writes into our overflow area */
    int32_t  num_terms;   /* terms we return to it */
    int64_t  ret_at;      /* where in its ret_in they go (from its header) */
    int64_t  recv_offset; /* overflow entry given to the peer */
    int32_t  aug_first;   /* our first token index of its entries (this round's) */
    int32_t  node;
    /* Over the rounds of a step's dispatch, for its statistics: the entries we sent, those
     * of them in round two, and the entries we received. */
    int32_t  step_sent, step_later, step_recv;
    uint64_t spec_seen, overflow_seen, grant_seen;
    uint64_t combine_seen[2], weights_seen[2]; /* by buffer (net_buffer_imm) */
} intra_net_peer_t;

/** Blocks a launch may have (STRATA_INTRA_BLOCKS' bound). */
#define INTRA_NET_MAX_BLOCKS 1024

/* Per object, in device memory; every field only grows. */
typedef struct intra_net_state {
    uint64_t step;   /* steps completed across nodes */
    uint64_t posted; /* commands on INTRA_NET_COUNTER_SEND */
    uint64_t reads;  /* commands on INTRA_NET_COUNTER_READ */
    uint64_t pad[5];
    /* The work ring's credit as each block last read it, written and read by that block's
     * posting thread alone (launches of an object follow one another): a ticket below it
     * needs no read of the credit across PCIe. */
    uint64_t credit_seen[INTRA_NET_MAX_BLOCKS];
} intra_net_state_t;

/* The network kernels' arguments; ring NULL when the node is alone. */
typedef struct intra_net_args {
    util_work_ring_t  *ring;      /* device address of the mapped ring */
    util_work_cmd_t   *cmds;      /* its slots, counters and immediate counts */
    uint64_t          *counters;
    uint64_t          *imms;
    uint32_t           slots;
    uint64_t          *ticket;    /* producers' ticket counter, device memory */
    uint64_t           timeout_ticks; /* bound on each wait, in kernel_timer ticks */
    intra_net_state_t *state;
    intra_net_peer_t  *peers;     /* [num_peers] */
    char              *area;      /* this rank's network area (registered) */
    int32_t  world, rank, num_peers, spec_tokens, max_tokens, pull_read, host_stamps;
    /*
     * A step's dispatch crosses the network in rounds (the streamed exchange): round r
     * takes every rank's own tokens [r * window_tokens, (r + 1) * window_tokens), and the
     * spec, overflow and staging areas hold one round's entries (staging two: by the parity
     * of the round's wire step, below, so that a round is packed while the peers may still
     * read the last one). One
     * round: window_tokens is max_tokens. Each round is a step of the wire protocol: its
     * headers, grants and counts are numbered state->step * rounds + round + 1. Combine
     * then runs in as many rounds: each returns the terms of one dispatch round's entries,
     * through ret_out and ret_in buffers of a round's size, two of each by the parity of
     * that number; every expert combines in Pull form, and the terms are gathered where
     * their owners published them.
     */
    int32_t  rounds, round, window_tokens;
    int64_t *round_seg;   /* rounds > 1: [rounds][num_peers + 1][3]: for each round and peer
                           * the entries received from it (the step's index of the first,
                           * how many) and where in its ret_in their terms go; at num_peers
                           * our own tokens (the step's index of the first, how many) */
    int32_t  bounce;      /* the area is not in the heap: terms are copied into it */
    int32_t  entry_bytes, record_bytes, scale_bytes, header_bytes, own_words;
    int32_t  experts_per_rank, local_size, experts_per_node;
    /*
     * The streamed exchange in rounds: a header of the step's first round carries, after
     * its modes, header_counts int32 counts, one per expert of the receiver's node: the
     * rows (token and top-k slot) the source sends there over the whole step, so that the
     * node's owners know the step's counts before any round's rows (0: no counts, one
     * round). step_counts: [header_counts], this rank's rows into its node over the step
     * (its own tokens' and every peer's counts), summed by NET_RECV in the first round.
     */
    int32_t  header_counts;
    int32_t *step_counts;
    uint32_t imm_base;
    uint64_t chunk_bytes; /* every transfer is cut into commands of at most this */
    /* Offsets in the area. */
    uint64_t headers;     /* [world][2] received, by source and step parity */
    uint64_t grants;      /* [world] received, by receiver */
    uint64_t out_headers; /* [world] being sent, by peer */
    uint64_t out_grants;  /* [world] being sent, by peer */
    uint64_t spec;        /* [num_peers][spec_tokens] entries, by source's peer index */
    uint64_t overflow;    /* [num_peers * window_tokens] entries, handed out by grants */
    uint64_t staging;     /* [1 or 2][num_peers][window_tokens] entries, by destination's
                           * peer index */
    uint64_t ret_out;     /* [1 or 2][num_peers] blocks of ret_out_block: terms being
                           * returned */
    uint64_t ret_in;      /* [1 or 2] of ret_in_bytes: the peers' returns to us, block
                           * after block */
    uint64_t ret_out_block, ret_in_bytes;
    int32_t  entry_terms; /* the most terms an entry has at its receiver: min(topk, the
                           * experts of a peer rank (flat route) or node) */
    uint64_t w_out;       /* node-reduce: [num_peers][max_tokens][topk] fp32 weights sent */
    uint64_t w_in;        /* node-reduce: [num_peers][max_tokens][topk] weights received */
    /* Offsets in this rank's heap part: where owners on the node write terms. */
    int64_t  ret_stage;   /* the terms returned to peers (ret_out itself when the area is
                             in the heap; else copied there before they leave) */
    int64_t  terms;       /* [max_tokens][topk]: own tokens' terms from this node */
    /* The layout (device copies). */
    int32_t        num_own;
    const int32_t *peer_first;  /* [num_peers + 1] into tokens/experts */
    const int32_t *tokens;      /* token of each entry */
    const int32_t *experts;     /* [entries][topk] node-local ids at the peer, or -1 */
    const int64_t *clean_idx;   /* [num_own][topk] global ids, -1 none */
    const int64_t *node_idx;    /* [num_own][topk] node-local ids on this node, -1 elsewhere */
    const int64_t *peer_terms;  /* [num_peers] terms each peer returns */
    const int32_t *plan_counts; /* header_counts > 0: [num_peers + 1][header_counts] the
                                 * step's counts for each peer's node, then our own */
    const int32_t *node_ranks;  /* [nodes][local_size] global rank */
    const uint64_t *mask;       /* the step's global dispatch mask (bit: Pull) */
    const int32_t  *rank_node;  /* [world] node of each rank */
    /* Node-reduce combine: the node holding a token's terms sums them, weighted, and
     * returns one row per token; the token's rank adds those rows in node order. */
    int32_t  node_reduce, node, num_nodes;
    const float *topk_weights;  /* [num_own][topk] of combine_recv (node-reduce) */
    /* The step's scratch. */
    int32_t  *slot_of;    /* [entries] place of each entry in its peer's staging */
    uint64_t *term_src;   /* [max_tokens][topk] address of each own token's term */
    int64_t  *aug_entry;  /* [max_aug] area offset of each received entry */
    int64_t  *aug_topk;   /* [max_aug][topk] */
    int32_t  *num_aug;    /* [2]: the round's own tokens and received entries; the
                           * step's tokens before the round (its aug_base) */
    int64_t  *term_dst;   /* [max_aug][topk] heap offsets (the intra tier's term_dst) */
    int32_t  *origin;     /* [max_aug][2] in the heap (the intra tier's origin table) */
    const void  *x;
    const float *x_scales;
    uint64_t digest;
    uint64_t next[INTRA_NET_MAX_OWN_WORDS];
} intra_net_args_t;

#endif
