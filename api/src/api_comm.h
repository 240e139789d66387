/*
 * The communicator object, shared by the api/ sources that implement its parts.
 */
#ifndef STRATA_API_COMM_H
#define STRATA_API_COMM_H

#include "inter/engine.h"
#include "intra/intra.h"
#include "topo/topo.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define API_NODE_NAME_LEN 64

/* What every rank tells the others when the communicator is created. */
typedef struct api_rank_info {
    char    node_name[API_NODE_NAME_LEN];
    int32_t pid;
    int32_t num_gpus;
    int32_t num_rdma_nics;
} api_rank_info_t;

/** Whether another rank's information may be used: a node name that ends inside it and is
 *  not empty, counts not negative. Pure (tests/fuzz/fuzz_bootstrap.c). */
bool api_rank_info_valid(const api_rank_info_t *info);

struct strata_comm {
    strata_bootstrap_t       *bootstrap;
    int                       rank;
    int                       size;
    int                       num_nodes;
    int                      *rank_node;  /* [size] node of each rank */
    int                      *rank_local; /* [size] local rank of each rank */
    int                      *node_size;  /* [num_nodes] ranks on each node */
    topo_t                   *topo;
    topo_rail_plan_t         *plan;
    int                       gpu;         /* in the topology; -1: none */
    int                       gpu_ordinal; /* among the runtime's GPUs; -1: host backend */
    const intra_device_ops_t *device;
    inter_engine_t           *engine;
    int                      *all_ranks;  /* [size] 0..size-1, the group of strata_barrier */
    unsigned                  moe_created; /* MoE objects asked for (api_moe_number) */
    atomic_int                refs;        /* the caller's (until destroy) + one per MoE object */
    bool                      peer_failure_logged;
    bool                      node_name_given; /* STRATA_NODE_NAME or config, not the host's */
    char                      node_name[API_NODE_NAME_LEN];
    unsigned                  splits;      /* split and shrink calls, counted as each starts
                                              (collective: equal on all) */
    atomic_int                split_children; /* communicators split from it, alive (in refs) */
    /* A communicator strata_comm_split made: the bootstrap it made for it over the parent's
     * engine, which holds the parent (api_comm_split.c); destroyed with it. */
    strata_bootstrap_t       *split_bootstrap;
    /* A communicator strata_comm_expand made: the TCP bootstrap it made for it. */
    strata_bootstrap_t       *owned_bootstrap;
    /* A communicator strata_comm_shrink made runs on the engine of the one it was shrunk
     * from (engine_owner, held, with its topology and rail plan), whose rank engine_ranks[r]
     * its rank r is; rank_of_engine says the reverse (-1: not a member). All NULL for one
     * with an engine of its own. */
    strata_comm_t            *engine_owner;
    int                      *engine_ranks;   /* [size] */
    int                      *parent_ranks;   /* [size] members in engine_owner: kept after
                                                 strata_comm_destroy, while children hold it */
    int                      *rank_of_engine; /* [the engine's world size] */
    atomic_int                engine_sharers; /* shrunk communicators on its engine, alive */
    uint32_t                  user_channel;   /* of strata_send and strata_recv (0 but shrunk) */
    uint32_t                  moe_imm_base;   /* the first immediate of its MoE objects */
};

/** The engine's rank of comm's rank r (r itself where comm has an engine of its own); -1
 *  where r is not one of comm's ranks. */
int api_engine_rank(const strata_comm_t *comm, int r);

/** A peer a call names, as the engine numbers it: false, with a line naming call, where it
 *  is not one of comm's ranks (any_ok: -1 stands for any rank). Passed through where comm
 *  has an engine of its own, whose own checks then apply. */
bool api_engine_peer(const strata_comm_t *comm, const char *call, int peer, bool any_ok,
                     int *engine_peer_p);

/** inter_engine_imm_wait with from_peer one of comm's ranks, or -1: any of them. */
strata_status_t api_imm_wait(strata_comm_t *comm, uint32_t imm, uint64_t count, int from_peer,
                             uint64_t timeout_ns);

/** Whether the engine has declared comm's rank r failed. */
bool api_peer_failed(const strata_comm_t *comm, int r);

/** strata_comm_create; log_as_rank: this communicator's rank prefixes the log's lines (not
 *  for one split from another, whose ranks the process's lines keep). */
strata_status_t api_comm_create(const strata_config_t *config, strata_bootstrap_t *bootstrap,
                                bool log_as_rank, strata_comm_t **comm_p);

/** A split communicator's bootstrap, destroyed with the communicator (api_comm_split.c). */
void api_split_bootstrap_destroy(strata_bootstrap_t *bootstrap);

/** Splits and shrinks of one communicator: their numbers are the high bits of the message
 *  channels their ranks talk over, below API_SPLIT_MAX. */
#define API_SPLIT_SEQ_BITS 20
#define API_SPLIT_SEQ_MASK ((1u << API_SPLIT_SEQ_BITS) - 1)
#define API_SPLIT_MAX      ((1u << (32 - API_SPLIT_SEQ_BITS)) - 1)

/** A bootstrap over parent's engine among members (parent ranks, in the new order; this rank
 *  among them): collectives on channels (number << API_SPLIT_SEQ_BITS) | seq, seq counting
 *  from first_seq + 1 (api_comm_split.c). It holds parent until destroyed. */
strata_status_t api_split_bootstrap_create(strata_comm_t *parent, uint32_t number,
                                           uint32_t first_seq, const int *members, int n,
                                           strata_bootstrap_t **bootstrap_p);

/** Whether a communicator shrunk from comm is alive on comm's engine: comm's splits and
 *  shrinks would then draw channel numbers the shrunk one draws too, so they are refused
 *  (API_SHRUNK_ALREADY says why). */
bool api_comm_shrunk_already(const strata_comm_t *comm);
#define API_SHRUNK_ALREADY "a communicator shrunk from this one is alive: split or shrink " \
                           "that one (the newest), not this one"

/** Send to rank to what the next strata_comm_shrink of comm sends there as this rank's set
 *  in round (1 to 3, the last inferring nothing): set, [size] bytes, nonzero for a rank in
 *  it. Returns once the engine has sent it. With api_shrink_recv_set, for tests that play a
 *  rank's part in the agreement by hand, such as a rank that dies after sending its last
 *  set to some survivors only (api_comm_shrink.c). */
strata_status_t api_shrink_send_set(strata_comm_t *comm, uint32_t round, const uint8_t *set,
                                    int to);
/** Receive rank from's set of round in comm's next shrink, within timeout_ns, and add it
 *  to set ([size] bytes). STRATA_ERR_PEER_FAILED where it names this rank, or where from
 *  failed; STRATA_ERR_BOOTSTRAP where it is malformed. */
strata_status_t api_shrink_recv_set(strata_comm_t *comm, uint32_t round, int from,
                                    uint8_t *set, uint64_t timeout_ns);

/** The settings of a communicator made from parent (split, shrunk, expanded): the
 *  parent's node name and GPU. */
strata_config_t api_comm_inherited_config(const strata_comm_t *parent);

/**
 * The communicator the survivors of parent agreed on (members: parent ranks, in order; this
 * rank among them) on parent's engine, over bootstrap (a split bootstrap, owned from now
 * on): no collective, no new connection (api_comm.c).
 */
strata_status_t api_comm_create_shrunk(strata_comm_t *parent, const int *members, int n,
                                       strata_bootstrap_t *bootstrap, strata_comm_t **comm_p);

/** The communicator comm was split or shrunk from; NULL for one from a bootstrap. */
strata_comm_t *api_comm_parent(const strata_comm_t *comm);

/** The public MoE object: its communicator, and the scheduler's object that runs it. */
struct strata_moe {
    strata_comm_t      *comm;
    struct sched_moe   *sched;
};

/** strata_moe_create; ranks_apart: each rank a node of its own in the object (no node
 *  tier), for a communicator whose nodes hold unequal numbers of ranks; number: what
 *  api_moe_number gave the public call. */
strata_status_t api_moe_create(strata_comm_t *comm, const strata_moe_params_t *params,
                               bool ranks_apart, unsigned number, strata_moe_t **moe_p);
/** The number of the MoE object that strata_moe_create or strata_moe_recreate makes on
 *  comm, which picks its range of immediates: taken as the call starts, before any
 *  exchange, so that every rank counts every call whatever its outcome. A rank dying in
 *  one of the call's exchanges can leave some ranks past it and others failed there;
 *  counted only past it, the numbers would differ from then on, and so would the ranges
 *  the ranks' next objects count (on comm, and on communicators shrunk from it): every
 *  step across nodes would then time out. */
unsigned api_moe_number(strata_comm_t *comm);

/** A MoE object keeps the communicator it runs on: torn down by the last release. */
void api_comm_hold(strata_comm_t *comm);
void api_comm_release(strata_comm_t *comm);

/**
 * Collective: every rank's outcome of a step that may fail on some ranks only (what names
 * it in messages). One that failed fails the step on every rank, instead of leaving the
 * others to wait for it in the next exchange.
 */
strata_status_t api_comm_agree(strata_comm_t *comm, strata_status_t mine, const char *what);

/**
 * The bootstrap's allgather, watched by the engine: STRATA_ERR_PEER_FAILED (logged) instead
 * of entering it, or instead of its own failure, once the engine has declared a rank failed.
 * The built-in bootstrap also gives up early while it waits (api_bootstrap_set_check); a
 * caller's own bootstrap returns when it returns.
 */
strata_status_t api_comm_allgather(strata_comm_t *comm, const void *send_buf, void *recv_buf,
                                   size_t size);

/** Its strata_allgather_fn_t form, with the communicator as ctx. */
strata_status_t api_comm_allgather_fn(void *comm, const void *send_buf, void *recv_buf,
                                      size_t size);

#endif
