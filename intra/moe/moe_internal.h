/*
 * The intra-node MoE object as its sources share it (moe.c, moe_launch.c, moe_status.c).
 */
#ifndef STRATA_INTRA_MOE_INTERNAL_H
#define STRATA_INTRA_MOE_INTERNAL_H

#include "intra/intra.h"
#include "util/util.h"

#define MOE_WAIT_QUEUES 4

typedef enum moe_state {
    MOE_EXPECT_DISPATCH,
    MOE_EXPECT_COMBINE,
    MOE_FAILED,
} moe_state_t;

struct intra_moe {
    const intra_device_ops_t *device;
    intra_queue_t            *queue;
    intra_moe_args_t          args;      /* shape, heap bases and offsets; per-call fields vary */
    moe_state_t               state;
    int                       max_tokens;
    bool                      terms_direct; /* no combine_recv: term_dst must be set */
    int                       num_tokens; /* own tokens of the step's dispatch (all its
                                             rounds), where the host knows it */
    bool                      rounds_open; /* a round said more_rounds: the step goes on */
    uint64_t                  step;       /* the step messages name (intra_moe_name_step) */
    bool                      named;      /* the caller names the steps; else dispatches count */
    int                       waited_for; /* rank a failed wait was for, -1 none */
    bool                      waited_local; /* waited_for is a local rank, else a global one */
    int32_t                  *counts;    /* [experts_per_rank], host copy */
    uint64_t                  dispatches; /* dispatch kernels launched */
    uint64_t                  step_dispatch; /* dispatches, at the step's first (in rounds,
                                              * where its counts are marked) */
    bool                      captured;   /* a dispatch was captured: replays go uncounted */
    bool                      pulled_into; /* exact receive: the round's rows were loaded */
    bool                      combined;    /* the step's combine launched (its rounds follow) */
    int                       combine_round; /* exact receive in rounds: the next to launch */
    /* Queues of the expert-wait kernel, each bound to one caller's stream for good (a
     * queue that changed streams would order the new stream after the old one). */
    struct {
        void          *stream;
        intra_queue_t *queue;
    } waits[MOE_WAIT_QUEUES];
    unsigned                  next_wait; /* the slot taken when all are bound */
    void                     *ready_host; /* the kernels' marks (intra_moe_ready_bytes) */
    intra_moe_marks_t         marks;      /* in it, as the host sees them */
    intra_moe_recv_t          recv;
};

/* Per-expert completion after a captured dispatch: refused, logged (moe_launch.c). */
strata_status_t moe_refuse_captured(void);

#endif
