/*
 * strata_moe_recreate: a MoE object on a communicator shrunk from (or split from) the old
 * object's, with the old object's parameters and expert ids. Which rank holds each expert
 * comes from the caller's map or, by default, stays where it was: an expert whose rank is
 * gone is masked. The new object numbers its experts for the kernels (r * per_rank + j on
 * rank r) and translates the caller's ids at every entry (scheduler/sched_experts.c).
 */
#include "api/src/api_comm.h"
#include "scheduler/sched.h"
#include "util/util.h"
#include "util/util_crypto.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Rank r of comm as a rank of ancestor (comm itself or one it was split or shrunk from,
 * through any number of steps); -1 where ancestor is not one. */
static int api_moe_rank_in(const strata_comm_t *comm, const strata_comm_t *ancestor, int r)
{
    while (comm != ancestor) {
        r    = strata_comm_parent_rank(comm, r);
        comm = api_comm_parent(comm);
        if (comm == NULL || r < 0) {
            return -1;
        }
    }
    return r;
}

/* The default map: every expert on the rank of comm that held it in old, or -1. */
static strata_status_t api_moe_default_owner(const strata_moe_t *old, const strata_comm_t *comm,
                                             int32_t *owner, int experts)
{
    int *new_rank = malloc(sizeof(int) * (size_t)old->comm->size);

    if (new_rank == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int r = 0; r < old->comm->size; ++r) {
        new_rank[r] = -1;
    }
    for (int r = 0; r < comm->size; ++r) {
        int up = api_moe_rank_in(comm, old->comm, r);

        if (up < 0) {
            free(new_rank);
            UTIL_LOG_ERROR("strata_moe_recreate: the communicator was not split or shrunk "
                           "from the old object's; pass expert_owner");
            return STRATA_ERR_INVALID;
        }
        new_rank[up] = r;
    }
    for (int e = 0; e < experts; ++e) {
        int was = sched_moe_expert_owner(old->sched, e);

        owner[e] = was < 0 ? -1 : new_rank[was];
    }
    free(new_rank);
    return STRATA_OK;
}

/* Every entry -1 or a rank of comm; the most experts a rank holds (at least 1). */
static strata_status_t api_moe_owner_check(const int32_t *owner, int experts, int world,
                                           int *per_rank_p)
{
    int *held = calloc((size_t)world, sizeof(int)), most = 1;

    if (held == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int e = 0; e < experts; ++e) {
        if (owner[e] < -1 || owner[e] >= world) {
            UTIL_LOG_ERROR("strata_moe_recreate: expert_owner[%d] is %d: not -1 or a rank "
                           "(0..%d)", e, (int)owner[e], world - 1);
            free(held);
            return STRATA_ERR_INVALID;
        }
        if (owner[e] >= 0) {
            most = UTIL_MAX(most, ++held[owner[e]]);
        }
    }
    free(held);
    *per_rank_p = most;
    return STRATA_OK;
}

/* A rank's outcome so far and its map's digest, gathered in one collective. */
typedef struct api_moe_map_vote {
    int32_t  status;
    int32_t  reserved;
    uint64_t digest;
} api_moe_map_vote_t;

/* Collective: every rank's outcome (the first failed one's, logged, fails it everywhere),
 * and every rank passed the same map, or CONFIG on every rank. */
static strata_status_t api_moe_owner_agree(strata_comm_t *comm, strata_status_t mine,
                                           const int32_t *owner, int experts)
{
    unsigned char digest[UTIL_SHA256_LEN];
    api_moe_map_vote_t vote = {.status = mine}, *all;
    strata_status_t status;
    util_sha256_t sha;

    if (mine == STRATA_OK) {
        util_sha256_init(&sha);
        util_sha256_update(&sha, owner, sizeof(int32_t) * (size_t)experts);
        util_sha256_final(&sha, digest);
        memcpy(&vote.digest, digest, sizeof(vote.digest));
    }
    all = calloc((size_t)comm->size, sizeof(*all));
    if (all == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = api_comm_allgather(comm, &vote, all, sizeof(vote));
    for (int r = 0; r < comm->size && status == STRATA_OK; ++r) {
        if (all[r].status != STRATA_OK) {
            if (r != comm->rank) {
                UTIL_LOG_ERROR("strata_moe_recreate: rank %d failed: %s", r,
                               strata_status_string((strata_status_t)all[r].status));
            }
            status = (strata_status_t)all[r].status;
        } else if (all[r].digest != vote.digest) {
            UTIL_LOG_ERROR("strata_moe_recreate: rank %d passed another expert_owner map than "
                           "rank %d", r, comm->rank);
            status = STRATA_ERR_CONFIG;
        }
    }
    free(all);
    return status;
}

/* What each rank knows of the object to recreate: a rank that joined has no old object. */
typedef struct api_moe_card {
    int32_t status;  /* of this rank's part so far: one failed fails it on every rank */
    int32_t has_old;
    int32_t global_experts;
    int32_t topk, hidden, dtype, combine_dtype, max_tokens, capacity, expert_alignment;
    int32_t route, mode, combine, exchange, receive;
    char    mode_file[256]; /* adaptive: the policy file, "" for none */
} api_moe_card_t;

static strata_status_t api_moe_card(const strata_moe_t *old, api_moe_card_t *card)
{
    strata_moe_params_t p;
    sched_moe_shape_t shape;

    memset(card, 0, sizeof(*card));
    if (old == NULL) {
        return STRATA_OK;
    }
    sched_moe_params(old->sched, &p);
    sched_moe_shape(old->sched, &shape);
    if (shape.mode == STRATA_MOE_MODE_FIXED) {
        UTIL_LOG_ERROR("strata_moe_recreate: a fixed mode file names experts by the old "
                       "placement; recreate in another mode and set pull masks");
        return STRATA_ERR_UNSUPPORTED;
    }
    if (p.mode_file != NULL && strlen(p.mode_file) >= sizeof(card->mode_file)) {
        UTIL_LOG_ERROR("strata_moe_recreate: the policy file's name is longer than %zu bytes",
                       sizeof(card->mode_file) - 1);
        return STRATA_ERR_UNSUPPORTED;
    }
    *card = (api_moe_card_t){
        .has_old = 1, .global_experts = sched_moe_global_experts(old->sched), .topk = p.topk,
        .hidden = p.hidden, .dtype = p.dtype, .combine_dtype = p.combine_dtype,
        .max_tokens = p.max_tokens, .capacity = shape.capacity_asked,
        .expert_alignment = p.expert_alignment, .route = p.route, .mode = p.mode,
        .combine = p.combine, .exchange = shape.exchange, .receive = p.receive};
    if (p.mode_file != NULL) {
        snprintf(card->mode_file, sizeof(card->mode_file), "%s", p.mode_file);
    }
    return STRATA_OK;
}

/* Collective: every rank's card; a rank's failure (logged) fails it on every rank; the
 * object to recreate as the ranks that have one agree on it (CONFIG where they differ,
 * INVALID where none has one). */
static strata_status_t api_moe_cards(strata_comm_t *comm, const api_moe_card_t *mine,
                                     api_moe_card_t *chosen)
{
    api_moe_card_t *all = calloc((size_t)comm->size, sizeof(*all));
    strata_status_t status;
    int first = -1;

    if (all == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = api_comm_allgather(comm, mine, all, sizeof(*mine));
    for (int r = 0; r < comm->size && status == STRATA_OK; ++r) {
        if (all[r].status != STRATA_OK) {
            if (r != comm->rank) {
                UTIL_LOG_ERROR("strata_moe_recreate: rank %d failed: %s", r,
                               strata_status_string((strata_status_t)all[r].status));
            }
            status = (strata_status_t)all[r].status;
        }
    }
    for (int r = 0; r < comm->size && status == STRATA_OK; ++r) {
        if (!all[r].has_old) {
            continue;
        }
        all[r].mode_file[sizeof(all[r].mode_file) - 1] = '\0';
        if (first < 0) {
            first   = r;
            *chosen = all[r];
        } else if (memcmp(&all[r], chosen, sizeof(*chosen)) != 0) {
            UTIL_LOG_ERROR("strata_moe_recreate: ranks %d and %d recreate different objects",
                           first, r);
            status = STRATA_ERR_CONFIG;
        }
    }
    if (status == STRATA_OK && first < 0) {
        UTIL_LOG_ERROR("strata_moe_recreate: no rank has an object to recreate");
        status = STRATA_ERR_INVALID;
    }
    free(all);
    return status;
}

/* The new object's params: the card's, with room for the most experts a rank holds. */
static strata_moe_params_t api_moe_recreated_params(const api_moe_card_t *c, int world,
                                                    int per_rank)
{
    return (strata_moe_params_t){
        .num_experts = world * per_rank, .topk = c->topk, .hidden = c->hidden,
        .dtype = (strata_dtype_t)c->dtype, .combine_dtype = (strata_dtype_t)c->combine_dtype,
        .max_tokens = c->max_tokens, .capacity = c->capacity,
        .expert_alignment = c->expert_alignment, .route = (strata_moe_route_t)c->route,
        .mode = (strata_moe_mode_t)c->mode, .mode_file = c->mode_file[0] ? c->mode_file : NULL,
        .combine = (strata_moe_combine_t)c->combine,
        .exchange = (strata_moe_exchange_t)c->exchange,
        .receive = (strata_moe_receive_t)c->receive};
}

/* A capacity of 0 given to the old object is worked out again for the new world from the
 * experts the caller names (the new object's places may be more): the load grows with the
 * world, and so does the most an expert can receive. Where the variables cannot be read it
 * stays 0, and the creation, collective, fails on them as strata_moe_create would. */
static void api_moe_recreated_capacity(const api_moe_card_t *c, int world,
                                       strata_moe_params_t *params)
{
    strata_moe_params_t named = *params;

    if (c->capacity != 0) {
        return;
    }
    named.num_experts = c->global_experts;
    if (sched_default_capacity_of(&named, world, &params->capacity) != STRATA_OK) {
        params->capacity = 0;
    }
}

/* This rank's map: the caller's, or the default one from old (which needs every rank to
 * have an old object). */
static strata_status_t api_moe_owner_of(const strata_moe_t *old, const strata_comm_t *comm,
                                        const int32_t *expert_owner, int experts,
                                        int32_t *owner)
{
    if (expert_owner != NULL) {
        memcpy(owner, expert_owner, sizeof(int32_t) * (size_t)experts);
        return STRATA_OK;
    }
    if (old == NULL) {
        UTIL_LOG_ERROR("strata_moe_recreate: a rank without an old object needs expert_owner");
        return STRATA_ERR_INVALID;
    }
    return api_moe_default_owner(old, comm, owner, experts);
}

/* Whether comm's nodes hold unequal numbers of ranks (a failure took one of a node's): the
 * node tier needs equal ones, so the object then treats each rank as a node of its own. */
static bool api_moe_nodes_uneven(const strata_comm_t *comm)
{
    for (int n = 1; n < comm->num_nodes; ++n) {
        if (comm->node_size[n] != comm->node_size[0]) {
            UTIL_LOG_WARN("strata_moe_recreate: node %d has %d ranks, node 0 %d: every rank "
                          "is a node of its own in the new object (its rows go through the "
                          "engine even within a node)", n, comm->node_size[n], comm->node_size[0]);
            return true;
        }
    }
    return false;
}

STRATA_API strata_status_t strata_moe_recreate(const strata_moe_t *old, strata_comm_t *comm,
                                               const int32_t *expert_owner,
                                               strata_moe_t **moe_p)
{
    api_moe_card_t mine, card;
    strata_moe_params_t params;
    int32_t *owner = NULL;
    strata_status_t status;
    int per_rank = 1;
    unsigned number = api_moe_number(comm); /* counted whatever happens next, as create's */

    if (comm == NULL || moe_p == NULL) {
        UTIL_LOG_ERROR("strata_moe_recreate: NULL communicator or result");
        return STRATA_ERR_INVALID;
    }
    *moe_p = NULL;
    /* Collective from here on: a rank that cannot go on takes part and fails it everywhere. */
    mine.status = api_moe_card(old, &mine);
    status      = api_moe_cards(comm, &mine, &card);
    if (status == STRATA_OK) {
        owner  = malloc(sizeof(int32_t) * (size_t)card.global_experts);
        status = owner == NULL ? STRATA_ERR_NO_MEMORY
                               : api_moe_owner_of(old, comm, expert_owner, card.global_experts,
                                                  owner);
        if (status == STRATA_OK) {
            status = api_moe_owner_check(owner, card.global_experts, comm->size, &per_rank);
        }
        status = api_moe_owner_agree(comm, status, owner, card.global_experts);
    }
    if (status == STRATA_OK) {
        params = api_moe_recreated_params(&card, comm->size, per_rank);
        api_moe_recreated_capacity(&card, comm->size, &params);
        status = api_moe_create(comm, &params, api_moe_nodes_uneven(comm), number, moe_p);
    }
    if (status == STRATA_OK) {
        sched_moe_set_capacity_asked((*moe_p)->sched, card.capacity);
    }
    if (status == STRATA_OK) {
        status = api_comm_agree(comm,
                                sched_moe_map_experts((*moe_p)->sched, card.global_experts,
                                                      owner),
                                "strata_moe_recreate");
        if (status != STRATA_OK) {
            strata_moe_destroy(*moe_p);
            *moe_p = NULL;
        }
    }
    free(owner);
    return status;
}

STRATA_API int strata_moe_expert_id(const strata_moe_t *moe, int local_expert)
{
    return moe != NULL ? sched_moe_expert_id(moe->sched, local_expert) : -1;
}

STRATA_API strata_status_t strata_moe_masked(const strata_moe_t *moe,
                                             const strata_moe_layout_t *layout,
                                             int32_t *per_token, int64_t *slots_p)
{
    if (moe == NULL) {
        UTIL_LOG_ERROR("strata_moe_masked: NULL object");
        return STRATA_ERR_INVALID;
    }
    return sched_moe_masked(moe->sched, layout, per_token, slots_p);
}
