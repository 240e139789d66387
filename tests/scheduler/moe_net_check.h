/*
 * What the two-tier MoE check (moe_net_check.c) shares with its reference
 * (moe_net_verify.c): a rank's state, the bad input a rank may be told to pass, and the
 * checks of a step's dispatch and combine against the reference.
 */
#ifndef STRATA_TESTS_MOE_NET_CHECK_H
#define STRATA_TESTS_MOE_NET_CHECK_H

#include "common/moe_ref.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "moe_net_check r%d step %d (seed %u): ", g_rank, g_step, g_seed); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

/* The rank, the step it runs and the case's seed, for CHECK's messages and the reference. */
extern int      g_rank, g_step;
extern unsigned g_seed;

typedef enum bad_input {
    BAD_NONE,
    BAD_OVER,     /* max_tokens + 1 tokens */
    BAD_NEGATIVE, /* -1 tokens */
    BAD_NULL_X,   /* tokens without x */
} bad_input_t;

/* The rank that passes a bad input, at which step, and which (moe_net_check.c sets them). */
extern int         g_bad_rank, g_bad_step;
extern bad_input_t g_bad_kind;

/* Where the aborting rank ends its step with strata_moe_abort_step (--abort RANK:WHEN). */
typedef enum abort_point {
    ABORT_NONE,
    ABORT_SENT,       /* after dispatch_send: its experts' results are withheld */
    ABORT_DISPATCHED, /* after dispatch_recv: withheld too */
    ABORT_COMBINED,   /* after combine_send: the others see nothing amiss */
} abort_point_t;

/* The rank that aborts step g_bad_step, and where (moe_net_check.c sets them). */
extern int           g_abort_rank;
extern abort_point_t g_abort_at;

typedef enum mask_mode {
    MASKS_BY_STEP, /* the test sets pull masks, changing by step */
    MASKS_ADAPTIVE, /* the owners decide: STRATA_MOE_MODE_ADAPTIVE */
    MASKS_ENV,      /* STRATA_MOE_MODE decides */
} mask_mode_t;

typedef struct rank_state {
    const moe_case_t *c;
    mask_mode_t       masks;
    strata_moe_t     *moe;
    int               rank, world, n;
    size_t            row_bytes, y_row_bytes, scales;
    unsigned char    *x, *out, *ref;
    float            *x_scales, *weights;
    int64_t          *idx;
    unsigned char    *seen; /* [world][max_tokens][topk] */
    bool              node_reduce; /* the object sums each node's terms there */
    int               node, num_nodes;
    int              *rank_node; /* [world] */
    /* Node-reduce against exact, over every value checked: how many differ, and the
     * largest difference relative to the sum of the magnitudes of the value's terms. */
    uint64_t          nr_values, nr_differ;
    double            nr_worst; /* in units of the combine dtype's rounding unit */
    uint64_t          short_results; /* tokens whose result lacked terms past capacity */
    strata_moe_layout_t *layout; /* --streams: the step's, kept until its kernels are done */
    bool              exact; /* --exact: the object receives exactly (dispatch_recv_into) */
} rank_state_t;

/** The most local experts the counts' checks take. */
#define MAX_LOCAL_EXPERTS 256

/*
 * --exact: the step's rows as dispatch_recv_into delivers them, packed. To check them as
 * any other dispatch's, they are laid out in blocks of the largest count (recv becomes that
 * view); the outputs check_dispatch writes there go back packed the same way, for combine.
 */
typedef struct exact_step {
    int32_t             counts[MAX_LOCAL_EXPERTS];
    int64_t             rows, widest;
    unsigned char      *x, *y, *block_x, *block_y;
    float              *scales, *block_scales;
    strata_moe_source_t *src, *block_src;
} exact_step_t;

/* --streams: the two streams, the buffers of the steps on each, and the step whose combine
 * is still to be checked (-1: none). */
typedef struct stream_run {
    strata_comm_t *comm;
    void          *streams[2];
    rank_state_t   states[2];
    exact_step_t   exact[2]; /* --exact: each state's buffers, until its next step */
    int            pending;
} stream_run_t;

/* --expert-wait: 0 none; 1 each expert waited for on the host; 2 on g_wait_stream, a
 * stream of g_comm's, which the host then waits for (moe_net_steps.c). */
extern int            g_expert_wait;
extern int            g_counts_first; /* --counts-first: the rank that holds back, or -1 */
extern const char    *g_counts_dir;
extern void          *g_wait_stream;
extern strata_comm_t *g_comm;

/* moe_net_steps.c */
void            alloc_state(rank_state_t *r, const moe_case_t *c);
void            free_state(rank_state_t *r);
/** One step; the first status that was not OK, or OK where a refused input gave the
 *  STRATA_ERR_INVALID it must. kill: 0, or the signal this rank raises mid-step. */
strata_status_t run_step(rank_state_t *r, int kill, bool disagree);
/** --streams: the second stream's buffers, and the streams. */
void            stream_run_start(stream_run_t *sr, strata_comm_t *comm, const rank_state_t *r);
/** One step on stream g_step % 2; kill as run_step's, raised before the dispatch. */
strata_status_t run_stream_step(stream_run_t *sr, int kill);
/** --late: one step on stream g_step % 2 as a framework that computes its experts on the
 *  stream runs it: no host wait between dispatch and combine, then the stream's status;
 *  this rank dispatches late_ms late. *needs_others_p: whether any of its tokens has a
 *  choice at another rank's expert. */
strata_status_t run_late_step(stream_run_t *sr, unsigned late_ms, bool *needs_others_p);
/** --late-combine: one step on stream g_step % 2, checked as run_stream_step's, whose
 *  combine_send this rank makes late_ms late; where it passes, its results are checked. */
strata_status_t run_late_combine_step(stream_run_t *sr, unsigned late_ms);
/** The last step's results, and the layouts; the object leaves its stream (where the step
 *  passed). */
void            stream_run_end(stream_run_t *sr, rank_state_t *r, strata_status_t status);
/** The streams and the second buffers: after the object is destroyed, which a failed object
 *  must be before its stream. */
void            stream_run_free(stream_run_t *sr);

/* moe_net_verify.c */
/** Whether rank s refuses its input this step (the bad input it was told to pass). */
bool refuses(const moe_case_t *c, int s);
/** Whether rank s aborts this step (at g_abort_at). */
bool aborts(int s);
/** Whether the owner of expert e withholds its results this step: the term is missing. */
bool withheld(const rank_state_t *r, int64_t e);
/** This rank's inputs of this step, from the seed. */
void make_inputs(rank_state_t *r);
/** Every row this rank's experts received is the reference's, each seen once. */
void check_dispatch(rank_state_t *r, const strata_moe_recv_t *recv);
/** The step's counts (strata_moe_dispatch_counts) are the rows every rank routed to each
 *  local expert, before the capacity: at least what was delivered. */
void check_counts(const rank_state_t *r, const strata_moe_recv_t *recv,
                  const int32_t *counts);
/** Every token's combined row is the reference's (or, where terms were dropped for
 *  capacity, the reference without some of those whose experts overflowed, with
 *  combine_recv's CAPACITY; where its owner withheld it, without that term, with
 *  CANCELLED). */
void check_combine(rank_state_t *r, strata_status_t combined);
/** The combine dtype's unit roundoff: half the distance from 1 to the next value. */
double ref_unit(strata_dtype_t dtype);
/** What this rank passes this step: its inputs, or the bad one it was told to pass. */
void step_input(const rank_state_t *r, int *n_p, const void **x_p);

#endif
