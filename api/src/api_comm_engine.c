/*
 * A communicator on another's engine: what strata_comm_shrink makes. The survivors keep the
 * engine they have (its connections, rails, registrations and proxy) and number its ranks
 * their own way; every call that names a peer goes through api_engine_rank, and everything
 * that watches for failures watches the members only, since the ranks left out are dead or
 * about to be declared so.
 */
#include "api/api.h"
#include "api_comm.h"
#include "scheduler/sched.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

int api_engine_rank(const strata_comm_t *comm, int r)
{
    if (r < 0 || r >= comm->size) {
        return -1;
    }
    return comm->engine_ranks != NULL ? comm->engine_ranks[r] : r;
}

bool api_engine_peer(const strata_comm_t *comm, const char *call, int peer, bool any_ok,
                     int *engine_peer_p)
{
    if (comm->engine_ranks == NULL || (any_ok && peer == -1)) {
        *engine_peer_p = peer;
        return true;
    }
    *engine_peer_p = api_engine_rank(comm, peer);
    if (*engine_peer_p < 0) {
        UTIL_LOG_ERROR("%s: peer %d is not a rank of the communicator (0..%d)", call, peer,
                       comm->size - 1);
        return false;
    }
    return true;
}

strata_status_t api_imm_wait(strata_comm_t *comm, uint32_t imm, uint64_t count, int from_peer,
                             uint64_t timeout_ns)
{
    int peer;

    if (comm->engine_ranks == NULL) {
        return inter_engine_imm_wait(comm->engine, imm, count, from_peer, timeout_ns);
    }
    if (from_peer == -1) { /* any member: only a member's failure ends the wait */
        return inter_engine_imm_wait_from(comm->engine, imm, count, comm->engine_ranks,
                                          comm->size, timeout_ns);
    }
    if (!api_engine_peer(comm, "strata_imm_wait", from_peer, false, &peer)) {
        return STRATA_ERR_INVALID;
    }
    return inter_engine_imm_wait_from(comm->engine, imm, count, &peer, 1, timeout_ns);
}

bool api_comm_shrunk_already(const strata_comm_t *comm)
{
    return atomic_load_explicit(&((strata_comm_t *)comm)->engine_sharers,
                                memory_order_relaxed) > 0;
}

bool api_peer_failed(const strata_comm_t *comm, int r)
{
    int peer = api_engine_rank(comm, r);

    return peer >= 0 && inter_engine_peer_failed(comm->engine, peer);
}

/* Nodes and local ranks of the members as api_comm_create would number them: nodes in
 * order of their first member, local ranks in member order within a node. */
static strata_status_t api_shrunk_map_nodes(strata_comm_t *comm, const strata_comm_t *parent,
                                            const int *members)
{
    int *node_of_parent_node = malloc(sizeof(int) * (size_t)parent->num_nodes);

    comm->rank_node  = calloc((size_t)comm->size, sizeof(int));
    comm->rank_local = calloc((size_t)comm->size, sizeof(int));
    comm->node_size  = calloc((size_t)comm->size, sizeof(int));
    if (!node_of_parent_node || !comm->rank_node || !comm->rank_local || !comm->node_size) {
        free(node_of_parent_node);
        return STRATA_ERR_NO_MEMORY;
    }
    for (int n = 0; n < parent->num_nodes; ++n) {
        node_of_parent_node[n] = -1;
    }
    for (int r = 0; r < comm->size; ++r) {
        int *node = &node_of_parent_node[parent->rank_node[members[r]]];

        if (*node < 0) {
            *node = comm->num_nodes++;
        }
        comm->rank_node[r]  = *node;
        comm->rank_local[r] = comm->node_size[*node]++;
    }
    free(node_of_parent_node);
    return STRATA_OK;
}

/* Both directions between the members and the engine's ranks; the barrier's group. */
static strata_status_t api_shrunk_map_ranks(strata_comm_t *comm, const strata_comm_t *parent,
                                            const int *members, int engine_size)
{
    comm->engine_ranks   = malloc(sizeof(int) * (size_t)comm->size);
    comm->parent_ranks   = malloc(sizeof(int) * (size_t)comm->size);
    comm->all_ranks      = malloc(sizeof(int) * (size_t)comm->size);
    comm->rank_of_engine = malloc(sizeof(int) * (size_t)engine_size);
    if (!comm->engine_ranks || !comm->parent_ranks || !comm->all_ranks ||
        !comm->rank_of_engine) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int e = 0; e < engine_size; ++e) {
        comm->rank_of_engine[e] = -1;
    }
    for (int r = 0; r < comm->size; ++r) {
        comm->parent_ranks[r] = members[r];
        comm->engine_ranks[r] = api_engine_rank(parent, members[r]);
        comm->all_ranks[r]    = comm->engine_ranks[r];
        comm->rank_of_engine[comm->engine_ranks[r]] = r;
    }
    return STRATA_OK;
}

/* The first immediate the members' MoE objects may count: past every range parent's
 * objects took (they may still be attached to the engine), else from the start again. */
static uint32_t api_shrunk_imm_base(const strata_comm_t *parent, int size)
{
    uint32_t count = sched_moe_imm_count(parent->size);
    uint32_t slots = (INTER_IMM_MAX - parent->moe_imm_base) / count;
    uint64_t used  = (uint64_t)parent->moe_imm_base +
                     (uint64_t)UTIL_MIN(parent->moe_created, slots) * count;

    return used + sched_moe_imm_count(size) <= INTER_IMM_MAX ? (uint32_t)used
                                                             : STRATA_MOE_IMM_BASE;
}

/* The ranks of the engine comm runs on: those of the communicator that made it. */
static int api_engine_world(const strata_comm_t *comm)
{
    while (comm->engine_owner != NULL) {
        comm = comm->engine_owner;
    }
    return comm->size;
}

strata_status_t api_comm_create_shrunk(strata_comm_t *parent, const int *members, int n,
                                       strata_bootstrap_t *bootstrap, strata_comm_t **comm_p)
{
    strata_comm_t *comm = calloc(1, sizeof(*comm));
    strata_status_t status;

    if (comm == NULL) {
        api_split_bootstrap_destroy(bootstrap);
        return STRATA_ERR_NO_MEMORY;
    }
    atomic_init(&comm->refs, 1);
    atomic_init(&comm->split_children, 0);
    atomic_init(&comm->engine_sharers, 0);
    comm->bootstrap       = bootstrap;
    comm->split_bootstrap = bootstrap;
    comm->rank            = bootstrap->rank;
    comm->size            = n;
    comm->topo            = parent->topo;
    comm->plan            = parent->plan;
    comm->gpu             = parent->gpu;
    comm->gpu_ordinal     = parent->gpu_ordinal;
    comm->device          = parent->device;
    comm->engine          = parent->engine;
    comm->node_name_given = parent->node_name_given;
    memcpy(comm->node_name, parent->node_name, sizeof(comm->node_name));
    /* Every survivor made the same splits and shrinks of parent: its numbers and channels
     * go on from there, never meeting parent's on the engine they share. */
    comm->splits       = parent->splits;
    comm->user_channel = parent->splits << API_SPLIT_SEQ_BITS;
    comm->moe_imm_base = api_shrunk_imm_base(parent, n);
    comm->engine_owner = parent;
    api_comm_hold(parent);
    atomic_fetch_add_explicit(&parent->split_children, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&parent->engine_sharers, 1, memory_order_relaxed);
    status = api_shrunk_map_nodes(comm, parent, members);
    if (status == STRATA_OK) {
        status = api_shrunk_map_ranks(comm, parent, members, api_engine_world(parent));
    }
    if (status != STRATA_OK) {
        strata_comm_destroy(comm);
        return status;
    }
    UTIL_LOG_INFO("comm: rank %d of %d on node %d, local rank %d of %d, on the engine of the "
                  "communicator it was shrunk from (its rank %d there)", comm->rank, comm->size,
                  strata_comm_node(comm), strata_comm_local_rank(comm),
                  strata_comm_local_size(comm), parent->rank);
    *comm_p = comm;
    return STRATA_OK;
}
