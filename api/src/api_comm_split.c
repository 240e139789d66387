/*
 * strata_comm_split: sub-communicators of an existing one with no new rendezvous. The
 * members agree through the parent's bootstrap, then their own bootstrap runs over the
 * parent's engine: each collective sends this rank's block to every other member as
 * messages on a channel of its own ((split number << 20) | collective number), which no
 * user receive and no other collective can take. A block travels in pieces that say where
 * they go, so pieces may arrive in any order.
 */
#include "api/src/api_bootstrap.h"
#include "api/src/api_comm.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

#define API_SPLIT_MAGIC         0x53504c54u /* "SPLT" */
#define API_SPLIT_WATCH_NS      10000000ull /* between looks at the members' liveness */

/* Where a piece of a member's block goes. */
typedef struct api_split_piece {
    uint32_t magic;
    uint32_t seq;    /* the collective it belongs to */
    uint64_t offset; /* in the block */
    uint64_t total;  /* the block's size */
} api_split_piece_t;

typedef struct api_split_bootstrap {
    strata_bootstrap_t base;     /* first: the library sees this */
    strata_comm_t     *parent;   /* held until destroyed */
    int               *members;  /* [world_size] parent ranks, in this communicator's order */
    uint32_t           split;    /* the parent's split number: the channels' high bits */
    uint32_t           seq;      /* collectives so far, equal on every member */
    uint64_t           timeout_ns;
    size_t             piece_max; /* block bytes a message carries */
    char              *message;  /* a receive buffer of one message */
    bool               message_lent; /* a cancelled receive may still write it: never freed */
} api_split_bootstrap_t;

/* --- The bootstrap's collectives -------------------------------------------------------- */

static int api_split_member(const api_split_bootstrap_t *bs, int parent_rank)
{
    for (int m = 0; m < bs->base.world_size; ++m) {
        if (bs->members[m] == parent_rank) {
            return m;
        }
    }
    return -1;
}

/* Cancel req and wait until the engine is done with it; false where it is not within the
 * peer timeout (its buffer must then stay). */
static bool api_split_cancel(api_split_bootstrap_t *bs, inter_request_t *req)
{
    inter_request_cancel(req);
    return inter_request_wait(req, inter_engine_peer_timeout_ns(bs->parent->engine)) !=
           STRATA_ERR_TIMEOUT;
}

/* A member the parent's engine has declared failed, or -1. */
static int api_split_failed_member(const api_split_bootstrap_t *bs)
{
    for (int m = 0; m < bs->base.world_size; ++m) {
        if (api_peer_failed(bs->parent, bs->members[m])) {
            return m;
        }
    }
    return -1;
}

/* Wait for req within the bootstrap's bound, giving up with STRATA_ERR_PEER_FAILED as soon
 * as the parent's engine declares a member failed: a piece it owes would never come. */
static strata_status_t api_split_wait_watched(api_split_bootstrap_t *bs,
                                              const inter_request_t *req)
{
    uint64_t until = util_clock_now_ns() + bs->timeout_ns;

    for (;;) {
        strata_status_t status = inter_request_wait(req, API_SPLIT_WATCH_NS);
        int failed;

        if (status != STRATA_ERR_TIMEOUT) {
            return status;
        }
        failed = api_split_failed_member(bs);
        if (failed >= 0) {
            UTIL_LOG_ERROR("comm split: member %d (rank %d of the parent) has failed", failed,
                           bs->members[failed]);
            return STRATA_ERR_PEER_FAILED;
        }
        if (util_clock_now_ns() >= until) {
            return STRATA_ERR_TIMEOUT;
        }
    }
}

static strata_status_t api_split_wait(api_split_bootstrap_t *bs, inter_request_t *req)
{
    strata_status_t status = api_split_wait_watched(bs, req);

    if (status == STRATA_ERR_TIMEOUT || status == STRATA_ERR_PEER_FAILED) {
        api_split_cancel(bs, req); /* a send copied its bytes: nothing of ours is lent */
    }
    inter_request_free(req);
    return status;
}

/* This rank's block to one member, in pieces. */
static strata_status_t api_split_send(api_split_bootstrap_t *bs, uint32_t channel, int member,
                                      const char *block, size_t size)
{
    inter_engine_t *engine = bs->parent->engine;
    size_t offset = 0;

    do {
        size_t len = UTIL_MIN(size - offset, bs->piece_max);
        api_split_piece_t piece = {.magic = API_SPLIT_MAGIC, .seq = bs->seq, .offset = offset,
                                   .total = size};
        inter_request_t *req;
        strata_status_t status;

        memcpy(bs->message, &piece, sizeof(piece));
        if (len > 0) {
            memcpy(bs->message + sizeof(piece), block + offset, len);
        }
        status = inter_engine_send_on(engine, channel,
                                      api_engine_rank(bs->parent, bs->members[member]),
                                      bs->message, sizeof(piece) + len, &req);
        if (status == STRATA_OK) {
            status = api_split_wait(bs, req);
        }
        if (status != STRATA_OK) {
            return status;
        }
        offset += len;
    } while (offset < size);
    return STRATA_OK;
}

/* One piece from any member into recv; how many bytes it carried into *len_p. */
static strata_status_t api_split_recv_piece(api_split_bootstrap_t *bs, uint32_t channel,
                                            char *recv, size_t size, size_t *len_p)
{
    size_t cap = sizeof(api_split_piece_t) + bs->piece_max;
    api_split_piece_t piece;
    inter_request_t *req;
    strata_status_t status;
    size_t got;
    int member;

    status = inter_engine_recv_on(bs->parent->engine, channel, -1, bs->message, cap, &req);
    if (status != STRATA_OK) {
        return status;
    }
    inter_request_report_source(req, bs->parent->rank_of_engine); /* as parent ranks */
    status = api_split_wait_watched(bs, req);
    got    = status == STRATA_OK ? inter_request_length(req) : 0;
    member = status == STRATA_OK ? api_split_member(bs, inter_request_source(req)) : -1;
    if ((status == STRATA_ERR_TIMEOUT || status == STRATA_ERR_PEER_FAILED) &&
        !api_split_cancel(bs, req)) {
        bs->message_lent = true; /* a late piece may still land in it */
    }
    inter_request_free(req);
    if (status != STRATA_OK) {
        return status;
    }
    memcpy(&piece, bs->message, UTIL_MIN(got, sizeof(piece)));
    if (got < sizeof(piece) || member < 0 || member == bs->base.rank ||
        piece.magic != API_SPLIT_MAGIC || piece.seq != bs->seq || piece.total != size ||
        piece.offset > size || got - sizeof(piece) > size - piece.offset) {
        UTIL_LOG_ERROR("comm split: a malformed piece of collective %u (%zu bytes, from "
                       "member %d)", bs->seq, got, member);
        return STRATA_ERR_BOOTSTRAP;
    }
    memcpy(recv + (size_t)member * size + piece.offset, bs->message + sizeof(piece),
           got - sizeof(piece));
    *len_p = got - sizeof(piece);
    return STRATA_OK;
}

static strata_status_t api_split_allgather(void *ctx, const void *send_buf, void *recv_buf,
                                           size_t size)
{
    api_split_bootstrap_t *bs = ctx;
    uint32_t channel;

    if ((++bs->seq & API_SPLIT_SEQ_MASK) == 0) {
        ++bs->seq; /* sequence 0 is a shrunk communicator's channel for strata_send */
    }
    channel = (bs->split << API_SPLIT_SEQ_BITS) | (bs->seq & API_SPLIT_SEQ_MASK);
    size_t pieces = size == 0 ? 1 : (size + bs->piece_max - 1) / bs->piece_max;
    size_t expected = pieces * (size_t)(bs->base.world_size - 1), len;
    strata_status_t status = STRATA_OK;

    if (size > 0) {
        memcpy((char *)recv_buf + (size_t)bs->base.rank * size, send_buf, size);
    }
    for (int m = 0; m < bs->base.world_size && status == STRATA_OK; ++m) {
        if (m != bs->base.rank) {
            status = api_split_send(bs, channel, m, send_buf, size);
        }
    }
    for (size_t i = 0; i < expected && status == STRATA_OK; ++i) {
        status = api_split_recv_piece(bs, channel, recv_buf, size, &len);
    }
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("comm split: collective %u of the split communicator failed: %s",
                       bs->seq, strata_status_string(status));
    }
    return status;
}

static strata_status_t api_split_barrier(void *ctx)
{
    return api_split_allgather(ctx, NULL, NULL, 0);
}

void api_split_bootstrap_destroy(strata_bootstrap_t *bootstrap)
{
    api_split_bootstrap_t *bs = (api_split_bootstrap_t *)bootstrap;

    if (bs == NULL) {
        return;
    }
    atomic_fetch_sub_explicit(&bs->parent->split_children, 1, memory_order_relaxed);
    api_comm_release(bs->parent);
    free(bs->members);
    if (!bs->message_lent) {
        free(bs->message);
    }
    free(bs);
}

/* --- The split ---------------------------------------------------------------------------- */

/* What each rank says in the split: its color and key. */
typedef struct api_split_vote {
    int32_t color;
    int32_t key;
} api_split_vote_t;

/* The members of this rank's color, ordered by key, then by parent rank; how many. */
static int api_split_members(const api_split_vote_t *votes, int size, int rank, int *members)
{
    int n = 0;

    for (int r = 0; r < size; ++r) {
        if (votes[r].color == votes[rank].color) {
            int at = n++;

            while (at > 0 && (votes[members[at - 1]].key > votes[r].key)) {
                members[at] = members[at - 1]; /* insertion: keys, then ranks, in order */
                --at;
            }
            members[at] = r;
        }
    }
    return n;
}

strata_status_t api_split_bootstrap_create(strata_comm_t *parent, uint32_t number,
                                           uint32_t first_seq, const int *members, int n,
                                           strata_bootstrap_t **bootstrap_p)
{
    api_split_bootstrap_t *bs = calloc(1, sizeof(*bs));
    size_t msg = inter_engine_msg_size(parent->engine);

    if (bs == NULL || msg <= sizeof(api_split_piece_t)) {
        free(bs);
        return bs == NULL ? STRATA_ERR_NO_MEMORY : STRATA_ERR_CONFIG;
    }
    bs->members = malloc(sizeof(int) * (size_t)n);
    bs->message = malloc(msg);
    if (bs->members == NULL || bs->message == NULL) {
        free(bs->members);
        free(bs->message);
        free(bs);
        return STRATA_ERR_NO_MEMORY;
    }
    memcpy(bs->members, members, sizeof(int) * (size_t)n);
    bs->base       = (strata_bootstrap_t){.world_size = n, .allgather = api_split_allgather,
                                          .barrier = api_split_barrier, .ctx = bs};
    bs->base.rank  = api_split_member(bs, parent->rank);
    bs->parent     = parent;
    bs->split      = number;
    bs->seq        = first_seq;
    bs->piece_max  = msg - sizeof(api_split_piece_t);
    bs->timeout_ns = api_bootstrap_timeout_ns();
    api_comm_hold(parent);
    atomic_fetch_add_explicit(&parent->split_children, 1, memory_order_relaxed);
    *bootstrap_p = &bs->base;
    return STRATA_OK;
}

static const int *api_split_members_of(const strata_bootstrap_t *bootstrap)
{
    return ((const api_split_bootstrap_t *)bootstrap)->members;
}

strata_config_t api_comm_inherited_config(const strata_comm_t *parent)
{
    strata_config_t config = {.field_mask = STRATA_CONFIG_FIELD_NODE_NAME,
                              .node_name = parent->node_name};

    if (parent->gpu_ordinal >= 0) {
        config.field_mask |= STRATA_CONFIG_FIELD_GPU;
        config.gpu = parent->gpu_ordinal;
    }
    return config;
}

/* A communicator over members (parent ranks, in the new order; this rank among them), with
 * an engine of its own, made over a bootstrap on the parent's engine: every member passes
 * the same number and members. */
static strata_status_t api_comm_over_members(strata_comm_t *parent, uint32_t number,
                                             const int *members, int n, strata_comm_t **sub_p)
{
    strata_bootstrap_t *bootstrap;
    strata_config_t config;
    strata_status_t status;

    status = api_split_bootstrap_create(parent, number, 0, members, n, &bootstrap);
    if (status != STRATA_OK) {
        return status;
    }
    config = api_comm_inherited_config(parent);
    status = api_comm_create(&config, bootstrap, false, sub_p);
    if (status == STRATA_OK) {
        (*sub_p)->split_bootstrap = bootstrap;
    } else {
        api_split_bootstrap_destroy(bootstrap);
    }
    return status;
}

STRATA_API strata_status_t strata_comm_split(strata_comm_t *comm, int color, int key,
                                             strata_comm_t **sub_p)
{
    api_split_vote_t mine = {.color = color, .key = key}, *votes = NULL;
    strata_status_t status;
    int *members = NULL;
    uint32_t number;

    if (comm == NULL || comm->bootstrap == NULL || comm->splits >= API_SPLIT_MAX ||
        api_comm_shrunk_already(comm)) {
        UTIL_LOG_ERROR("strata_comm_split: %s", comm == NULL ? "NULL communicator"
                                                : comm->splits >= API_SPLIT_MAX
                                                    ? "too many splits of one communicator"
                                                : comm->bootstrap == NULL
                                                    ? "the communicator was destroyed"
                                                    : API_SHRUNK_ALREADY);
        return STRATA_ERR_INVALID;
    }
    /* Every rank counts the split as it starts, members or not, with good arguments or not
     * and whatever fails next, so that the numbers (the channels' high bits) stay equal on
     * every rank: a rank dying in the vote can let some ranks past it and fail the others. */
    number = ++comm->splits;
    if (sub_p == NULL || color < -1) {
        UTIL_LOG_ERROR("strata_comm_split: %s", sub_p == NULL ? "NULL result" : "color below -1");
        return STRATA_ERR_INVALID;
    }
    *sub_p  = NULL;
    votes   = calloc((size_t)comm->size, sizeof(*votes));
    members = calloc((size_t)comm->size, sizeof(int));
    status  = votes && members ? api_comm_allgather(comm, &mine, votes, sizeof(mine))
                               : STRATA_ERR_NO_MEMORY;
    if (status == STRATA_OK && color != -1) {
        int n = api_split_members(votes, comm->size, comm->rank, members);

        status = api_comm_over_members(comm, number, members, n, sub_p);
    }
    free(votes);
    free(members);
    return status;
}

strata_comm_t *api_comm_parent(const strata_comm_t *comm)
{
    if (comm->engine_owner != NULL) { /* shrunk: held, so known after a destroy too */
        return comm->engine_owner;
    }
    return comm->split_bootstrap != NULL
               ? ((const api_split_bootstrap_t *)comm->split_bootstrap)->parent
               : NULL;
}

STRATA_API int strata_comm_parent_rank(const strata_comm_t *comm, int rank)
{
    if (comm == NULL || rank < 0 || rank >= comm->size) {
        return -1;
    }
    if (comm->parent_ranks != NULL) {
        return comm->parent_ranks[rank];
    }
    if (comm->split_bootstrap == NULL) {
        return -1;
    }
    return api_split_members_of(comm->split_bootstrap)[rank];
}
