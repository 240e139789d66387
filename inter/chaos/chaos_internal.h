/*
 * The chaos transport's state, shared by its two files: chaos_transport.c (settings, ops
 * tables, opening and closing) and chaos_ops.c (the operations it holds back and the
 * completions it reorders).
 */
#ifndef STRATA_INTER_CHAOS_INTERNAL_H
#define STRATA_INTER_CHAOS_INTERNAL_H

#include "inter/transport.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CHAOS_MAX_PIECES   4    /* a write or read is cut into at most this many */
#define CHAOS_SPLIT_MIN    256  /* bytes; shorter operations stay whole */
#define CHAOS_MAX_WAITING  4096 /* pieces held back before a post answers busy */
#define CHAOS_RELEASE_MAX  64   /* pieces handed to the inner transport per poll */

typedef struct chaos_op chaos_op_t;

/* One piece of an operation: what the inner transport is handed, with this as its context. */
typedef struct chaos_piece {
    alignas(max_align_t) unsigned char space[INTER_CONTEXT_SPACE]; /* the inner transport's */
    struct chaos_piece *next;  /* in the waiting list */
    chaos_op_t         *op;
    inter_post_t        post;
    uint64_t            due_ns; /* not handed over before */
    uint64_t            seq;    /* in the order pieces started waiting */
} chaos_piece_t;

/* One operation the engine posted (or injected), and its pieces. */
struct chaos_op {
    chaos_op_t     *prev, *next; /* every live operation, freed at shutdown */
    void           *context;     /* the engine's */
    size_t          len;
    bool            inject;      /* no completion; data below */
    bool            recv;        /* a posted receive: its completion goes up as it is */
    bool            imm_held;    /* the last piece waits for the others */
    int             pieces_left; /* not completed */
    int             num_pieces;
    strata_status_t status;
    chaos_piece_t   pieces[CHAOS_MAX_PIECES];
    unsigned char   data[];      /* an inject's copy */
};

typedef struct chaos_cqes {
    inter_cqe_t *cqes;
    int          count, cap;
} chaos_cqes_t;

typedef struct chaos_transport {
    inter_transport_t            base;
    const inter_transport_ops_t *inner_ops;
    inter_transport_t           *inner;
    pthread_mutex_t              lock;
    uint64_t                     rng;
    uint64_t                     max_delay_ns;
    uint64_t                     last_ordered_due; /* of the latest send or inject */
    chaos_piece_t               *waiting, **waiting_tail;
    int                          num_waiting;
    chaos_op_t                  *live;
    uint64_t                     next_seq;     /* of the next piece to wait */
    uint64_t                     highest_seq;  /* of the pieces handed over */
    /* What the chaos did, logged at close: operations, the pieces they were cut into,
     * pieces handed over after one that started waiting later, polls that held back. */
    uint64_t                     num_ops, num_pieces, num_overtaken, num_held_polls;
    strata_status_t              inject_status; /* a held inject that failed: the next says */
    chaos_cqes_t                 done; /* completions not yet reported, any order */
    chaos_cqes_t                 msgs; /* messages received not yet reported, in order */
} chaos_transport_t;

static inline uint64_t chaos_next(chaos_transport_t *ct)
{
    uint64_t z = (ct->rng += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A random number in [0, n). */
static inline uint64_t chaos_below(chaos_transport_t *ct, uint64_t n)
{
    return n == 0 ? 0 : chaos_next(ct) % n;
}

static inline chaos_transport_t *chaos_of(inter_transport_t *tp)
{
    return (chaos_transport_t *)tp;
}

/* chaos_ops.c: the ops of every table that hold operations back, and the teardown's part. */
strata_status_t chaos_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                           int *posted_p);
strata_status_t chaos_inject(inter_transport_t *tp, uint64_t peer, const void *buf, size_t len);
strata_status_t chaos_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                                void *context);
strata_status_t chaos_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p);
/** Forget every operation held (the inner transport is shut: none will complete). */
void            chaos_free_held(chaos_transport_t *ct);

#endif
