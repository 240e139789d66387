/*
 * strata_comm_shrink: after a rank failed, the survivors agree on who is alive and make a
 * communicator over them, with no rendezvous (rank 0 may be the dead one).
 *
 * Agreement is a flooding of failure sets over the old communicator's engine. In each of
 * API_SHRINK_ROUNDS rounds each rank adds to its set the ranks its engine has declared
 * failed (by heartbeat silence or a transport error), sends the set to every rank outside
 * it and takes every such rank's set into its own. A rank whose set does not come is in
 * the set once the engine declares it failed, or once another rank's set names it; but in
 * the last round, see below. After the last round the members are the ranks outside the
 * set, in their old order. Sets go to the ranks outside them only: a rank that the others
 * declared failed while it was alive (stopped, then resumed) hears from none of them; its
 * own engine declares them failed as their heartbeats stop, and its shrink ends with a
 * communicator of itself alone.
 *
 * The last round infers nothing: a set that does not come there adds nothing. A rank
 * dying in it may have sent its set to some survivors and not to others; inferring its
 * failure there would leave the two groups with different members and no later round to
 * reconcile them. Unless a survivor's engine had declared it failed as the round began
 * (the engine's verdicts are still taken then, and go out in the set to every partner),
 * it stays a member on every survivor alike, and the new communicator's first exchange
 * with it fails, so the caller shrinks again.
 *
 * Why the sets end equal: a failure in round r can leave the survivors with different sets
 * at its end, where some got the dying rank's set and others inferred its failure; but
 * every survivor that lives through round r + 1 sends its set to all the others there, so
 * if no rank fails in round r + 1 they all end it with the union. And once the survivors
 * begin the last round with equal sets, a failure in it changes no set. So they end
 * agreed unless ranks fail both in the second round and in the last: with R = 3, one more
 * failure within the agreement, in any round, is covered. Ranks that end with different
 * sets are on different communicators, which nothing reconciles: their exchanges fail, and
 * so do their later shrinks (a set of another world size is malformed,
 * STRATA_ERR_BOOTSTRAP).
 */
#include "api/src/api_bootstrap.h"
#include "api/src/api_comm.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

#define API_SHRINK_MAGIC   0x53484b31u /* "SHK1" */
#define API_SHRINK_ROUNDS  3u
#define API_SHRINK_POLL_NS 1000000ull /* a wait between looks at the round's receives */

/* One rank's failure set in one round: a bit per rank of the old communicator. */
typedef struct api_shrink_msg {
    uint32_t magic;
    uint32_t round;
    uint32_t world_size;
    uint32_t reserved;
    uint8_t  failed[]; /* (world_size + 7) / 8 bytes */
} api_shrink_msg_t;

typedef struct api_shrink {
    strata_comm_t    *comm;
    uint32_t          number; /* the channels' high bits */
    size_t            msg_bytes;
    size_t            slot_bytes; /* of a rank's set in in: msg_bytes, aligned */
    uint8_t          *failed;   /* [size] this rank's set */
    api_shrink_msg_t *out;      /* what this rank sends in the round: its set then */
    char             *in;       /* [size][slot_bytes] what each rank sent it */
    inter_request_t **recvs;    /* [size] */
    bool              in_lent;  /* a cancelled receive may still write into in */
    uint64_t          timeout_ns;
} api_shrink_t;

static bool api_shrink_bit(const uint8_t *bits, int r)
{
    return (bits[r / 8] >> (r % 8)) & 1u;
}

/* Whether a missing set puts its rank in the set in this round: not in the last. */
static bool api_shrink_infers(uint32_t round)
{
    return round < API_SHRINK_ROUNDS;
}

/* A round's message for a world of size ranks. */
static size_t api_shrink_msg_bytes(int size)
{
    return sizeof(api_shrink_msg_t) + ((size_t)size + 7) / 8;
}

static inter_engine_t *api_shrink_engine(const api_shrink_t *sh)
{
    return sh->comm->engine;
}

static uint32_t api_shrink_channel(const api_shrink_t *sh, uint32_t round)
{
    return (sh->number << API_SPLIT_SEQ_BITS) | round;
}

/* This rank's set as the engine sees it now, added to what it holds. */
static void api_shrink_take_engine(api_shrink_t *sh)
{
    for (int r = 0; r < sh->comm->size; ++r) {
        if (r != sh->comm->rank && api_peer_failed(sh->comm, r)) {
            sh->failed[r] = 1;
        }
    }
}

/* A received set: well formed, of this round; merged. STRATA_ERR_PEER_FAILED where it
 * holds this rank (no rank sends one such, but a set is checked whatever its sender). */
static strata_status_t api_shrink_merge(api_shrink_t *sh, int from, uint32_t round,
                                        const api_shrink_msg_t *msg, size_t got)
{
    if (got != sh->msg_bytes || msg->magic != API_SHRINK_MAGIC || msg->round != round ||
        msg->world_size != (uint32_t)sh->comm->size) {
        UTIL_LOG_ERROR("comm shrink: a malformed set from rank %d in round %u (%zu bytes)",
                       from, round, got);
        return STRATA_ERR_BOOTSTRAP;
    }
    if (api_shrink_bit(msg->failed, sh->comm->rank)) {
        UTIL_LOG_ERROR("comm shrink: rank %d has declared this rank failed: it is not in the "
                       "shrunk communicator", from);
        return STRATA_ERR_PEER_FAILED;
    }
    for (int r = 0; r < sh->comm->size; ++r) {
        if (api_shrink_bit(msg->failed, r)) {
            sh->failed[r] = 1;
        }
    }
    return STRATA_OK;
}

/* Cancel a receive and free it; whether its buffer is still lent (the cancel did not end
 * it within the peer timeout: it may still write there). */
static bool api_shrink_cancel(inter_engine_t *engine, inter_request_t *req)
{
    bool lent;

    inter_request_cancel(req);
    lent = inter_request_wait(req, inter_engine_peer_timeout_ns(engine)) == STRATA_ERR_TIMEOUT;
    inter_request_free(req);
    return lent;
}

/* Give up rank r's receive (r is in the set, or the round failed). */
static void api_shrink_drop(api_shrink_t *sh, int r)
{
    if (api_shrink_cancel(api_shrink_engine(sh), sh->recvs[r])) {
        sh->in_lent = true;
    }
    sh->recvs[r] = NULL;
}

/* Rank r's receive, complete: its set merged, or r in the set where it failed. */
static strata_status_t api_shrink_take(api_shrink_t *sh, int r, uint32_t round,
                                       strata_status_t status)
{
    inter_request_t *req = sh->recvs[r];

    if (status == STRATA_OK) {
        status = api_shrink_merge(sh, r, round,
                                  (const api_shrink_msg_t *)(sh->in + (size_t)r * sh->slot_bytes),
                                  inter_request_length(req));
    } else if (status == STRATA_ERR_PEER_FAILED) {
        /* Failed during the agreement: in the set from now on, but for the last round. */
        sh->failed[r] = sh->failed[r] || api_shrink_infers(round);
        status        = STRATA_OK;
    }
    inter_request_free(req);
    sh->recvs[r] = NULL;
    return status;
}

/* Look once at every receive still out; whether any is. A rank that another's set names
 * is not waited for: its own engine may be slower to declare it than the other's. */
static strata_status_t api_shrink_poll(api_shrink_t *sh, uint32_t round, bool *pending_p)
{
    strata_status_t status = STRATA_OK;

    *pending_p = false;
    for (int r = 0; r < sh->comm->size && status == STRATA_OK; ++r) {
        strata_status_t done;

        if (sh->recvs[r] == NULL) {
            continue;
        }
        if (sh->failed[r]) {
            api_shrink_drop(sh, r);
            continue;
        }
        done = inter_request_test(sh->recvs[r]);
        if (done == STRATA_INPROGRESS) {
            *pending_p = true;
        } else {
            status = api_shrink_take(sh, r, round, done);
        }
    }
    return status;
}

/* Every set of the round, within the bootstrap's bound; the receives left over dropped. */
static strata_status_t api_shrink_gather(api_shrink_t *sh, uint32_t round)
{
    uint64_t until = util_clock_now_ns() + sh->timeout_ns;
    strata_status_t status;
    bool pending = true;

    for (;;) {
        status = api_shrink_poll(sh, round, &pending);
        if (status != STRATA_OK || !pending) {
            break;
        }
        if (util_clock_now_ns() >= until) {
            status = STRATA_ERR_TIMEOUT;
            break;
        }
        for (int r = 0; r < sh->comm->size; ++r) { /* a short wait on one of them */
            if (sh->recvs[r] != NULL) {
                inter_request_wait(sh->recvs[r], API_SHRINK_POLL_NS);
                break;
            }
        }
    }
    for (int r = 0; r < sh->comm->size; ++r) {
        if (sh->recvs[r] != NULL) {
            if (status == STRATA_ERR_TIMEOUT) {
                UTIL_LOG_ERROR("comm shrink: no set from rank %d in round %u", r, round);
            }
            api_shrink_drop(sh, r);
        }
    }
    return status;
}

/* Whether rank r is another rank outside the set this rank sends in the round. */
static bool api_shrink_partner(const api_shrink_t *sh, int r)
{
    return r != sh->comm->rank && !api_shrink_bit(sh->out->failed, r);
}

/* Post a receive for the set of every rank outside this rank's, then send it to them; a
 * rank whose receive cannot be posted (declared failed since) joins the set, but in the
 * last round. */
static void api_shrink_post(api_shrink_t *sh, uint32_t round)
{
    uint32_t channel = api_shrink_channel(sh, round);

    for (int r = 0; r < sh->comm->size; ++r) {
        if (api_shrink_partner(sh, r) &&
            inter_engine_recv_on(api_shrink_engine(sh), channel, api_engine_rank(sh->comm, r),
                                 sh->in + (size_t)r * sh->slot_bytes, sh->msg_bytes,
                                 &sh->recvs[r]) != STRATA_OK) {
            sh->recvs[r]  = NULL;
            sh->failed[r] = sh->failed[r] || api_shrink_infers(round);
        }
    }
    for (int r = 0; r < sh->comm->size; ++r) {
        inter_request_t *send = NULL;

        if (!api_shrink_partner(sh, r)) {
            continue;
        }
        /* Copied at submission; a send to a rank that fails is its own receive's business. */
        if (inter_engine_send_on(api_shrink_engine(sh), channel, api_engine_rank(sh->comm, r),
                                 sh->out, sh->msg_bytes, &send) == STRATA_OK) {
            inter_request_free(send);
        }
    }
}

/* A round's message: set, [size] bytes, nonzero for a rank in it. */
static void api_shrink_encode(api_shrink_msg_t *msg, int size, uint32_t round,
                              const uint8_t *set)
{
    *msg = (api_shrink_msg_t){.magic = API_SHRINK_MAGIC, .round = round,
                              .world_size = (uint32_t)size};
    memset(msg->failed, 0, ((size_t)size + 7) / 8);
    for (int r = 0; r < size; ++r) {
        msg->failed[r / 8] |= (uint8_t)((set[r] != 0) << (r % 8));
    }
}

static strata_status_t api_shrink_round(api_shrink_t *sh, uint32_t round)
{
    api_shrink_take_engine(sh); /* sent to every partner: no survivor left out of it */
    api_shrink_encode(sh->out, sh->comm->size, round, sh->failed);
    api_shrink_post(sh, round);
    return api_shrink_gather(sh, round);
}

/* The agreement of comm's next shrink as one message's sender or receiver sees it; false
 * where round or peer cannot be one of its messages. */
static bool api_shrink_next(strata_comm_t *comm, uint32_t round, int peer, uint8_t *set,
                            api_shrink_t *sh_p)
{
    *sh_p = (api_shrink_t){.comm = comm, .number = comm->splits + 1, .failed = set,
                           .msg_bytes = api_shrink_msg_bytes(comm->size)};
    return round >= 1 && round <= API_SHRINK_ROUNDS && peer >= 0 && peer < comm->size &&
           peer != comm->rank;
}

strata_status_t api_shrink_send_set(strata_comm_t *comm, uint32_t round, const uint8_t *set,
                                    int to)
{
    inter_request_t *send = NULL;
    api_shrink_msg_t *msg;
    strata_status_t status;
    api_shrink_t sh;

    if (!api_shrink_next(comm, round, to, NULL, &sh)) {
        return STRATA_ERR_INVALID;
    }
    msg = calloc(1, sh.msg_bytes);
    if (msg == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    api_shrink_encode(msg, comm->size, round, set);
    status = inter_engine_send_on(comm->engine, api_shrink_channel(&sh, round),
                                  api_engine_rank(comm, to), msg, sh.msg_bytes, &send);
    if (status == STRATA_OK) {
        status = inter_request_wait(send, inter_engine_peer_timeout_ns(comm->engine));
        inter_request_free(send);
    }
    free(msg);
    return status;
}

strata_status_t api_shrink_recv_set(strata_comm_t *comm, uint32_t round, int from,
                                    uint8_t *set, uint64_t timeout_ns)
{
    inter_request_t *recv = NULL;
    strata_status_t status;
    api_shrink_t sh;
    void *msg;

    if (!api_shrink_next(comm, round, from, set, &sh)) {
        return STRATA_ERR_INVALID;
    }
    msg = calloc(1, sh.msg_bytes);
    if (msg == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = inter_engine_recv_on(comm->engine, api_shrink_channel(&sh, round),
                                  api_engine_rank(comm, from), msg, sh.msg_bytes, &recv);
    if (status == STRATA_OK) {
        status = inter_request_wait(recv, timeout_ns);
        if (status == STRATA_ERR_TIMEOUT) {
            if (api_shrink_cancel(comm->engine, recv)) {
                msg = NULL; /* it may still write into msg: kept */
            }
        } else {
            if (status == STRATA_OK) {
                status = api_shrink_merge(&sh, from, round, msg, inter_request_length(recv));
            }
            inter_request_free(recv);
        }
    }
    free(msg);
    return status;
}

static strata_status_t api_shrink_open(api_shrink_t *sh, strata_comm_t *comm, uint32_t number)
{
    *sh = (api_shrink_t){.comm = comm, .number = number,
                         .msg_bytes = api_shrink_msg_bytes(comm->size),
                         .timeout_ns = api_bootstrap_timeout_ns()};
    if (sh->msg_bytes > inter_engine_msg_size(comm->engine)) {
        UTIL_LOG_ERROR("comm shrink: a failure set of %d ranks (%zu bytes) exceeds the "
                       "engine's messages (%zu bytes)", comm->size, sh->msg_bytes,
                       inter_engine_msg_size(comm->engine));
        return STRATA_ERR_CONFIG;
    }
    sh->failed = calloc((size_t)comm->size, 1);
    sh->out    = calloc(1, sh->msg_bytes);
    sh->slot_bytes = (sh->msg_bytes + 7) / 8 * 8;
    sh->in     = calloc((size_t)comm->size, sh->slot_bytes);
    sh->recvs  = calloc((size_t)comm->size, sizeof(*sh->recvs));
    return sh->failed && sh->out && sh->in && sh->recvs ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

static void api_shrink_close(api_shrink_t *sh)
{
    free(sh->failed);
    free(sh->out);
    if (!sh->in_lent) {
        free(sh->in);
    }
    free(sh->recvs);
}

/* The survivors, in their old order; how many. */
static int api_shrink_members(const api_shrink_t *sh, int *members)
{
    int n = 0;

    for (int r = 0; r < sh->comm->size; ++r) {
        if (!sh->failed[r]) {
            members[n++] = r;
        }
    }
    return n;
}

static void api_shrink_log(const api_shrink_t *sh, int survivors, uint64_t start_ns)
{
    char gone[160] = "";
    size_t used = 0;

    for (int r = 0; r < sh->comm->size && used < sizeof(gone) - 16; ++r) {
        if (sh->failed[r]) {
            used += (size_t)snprintf(gone + used, sizeof(gone) - used, "%s%d",
                                     used ? " " : "", r);
        }
    }
    UTIL_LOG_INFO("comm shrink: %d of %d ranks go on (failed: %s), agreed in %.1f ms",
                  survivors, sh->comm->size, used ? gone : "none",
                  (double)(util_clock_now_ns() - start_ns) / 1e6);
}

/* The survivors' communicator on comm's engine, with a bootstrap over it for collectives.
 * Made locally, with no exchange: an exchange here could fail on some members and not on
 * others (a rank dying in it), leaving them on different communicators, while the rounds
 * ended alike on all. A rank that dies from now on is a failure of the new communicator. */
static strata_status_t api_shrink_create(strata_comm_t *comm, uint32_t number,
                                         const int *members, int n, strata_comm_t **shrunk_p)
{
    strata_bootstrap_t *bootstrap;
    strata_status_t status;

    status = api_split_bootstrap_create(comm, number, API_SHRINK_ROUNDS, members, n,
                                        &bootstrap);
    return status == STRATA_OK ? api_comm_create_shrunk(comm, members, n, bootstrap, shrunk_p)
                               : status;
}

STRATA_API strata_status_t strata_comm_shrink(strata_comm_t *comm, strata_comm_t **shrunk_p)
{
    uint64_t start_ns = util_clock_now_ns();
    strata_status_t status;
    api_shrink_t sh;
    int *members, n;

    if (comm == NULL || shrunk_p == NULL || comm->bootstrap == NULL ||
        comm->splits >= API_SPLIT_MAX || api_comm_shrunk_already(comm)) {
        UTIL_LOG_ERROR("strata_comm_shrink: %s",
                       comm == NULL || shrunk_p == NULL ? "NULL communicator or result"
                       : comm->bootstrap == NULL        ? "the communicator was destroyed"
                       : comm->splits >= API_SPLIT_MAX  ? "too many splits and shrinks of one "
                                                          "communicator"
                                                        : API_SHRUNK_ALREADY);
        return STRATA_ERR_INVALID;
    }
    *shrunk_p = NULL;
    /* Every survivor made the same splits and shrinks before: the same number here. */
    status = api_shrink_open(&sh, comm, ++comm->splits);
    for (uint32_t round = 1; round <= API_SHRINK_ROUNDS && status == STRATA_OK; ++round) {
        status = api_shrink_round(&sh, round);
    }
    members = status == STRATA_OK ? malloc(sizeof(int) * (size_t)comm->size) : NULL;
    if (status == STRATA_OK && members == NULL) {
        status = STRATA_ERR_NO_MEMORY;
    }
    if (status == STRATA_OK) {
        n = api_shrink_members(&sh, members);
        api_shrink_log(&sh, n, start_ns);
        status = api_shrink_create(comm, sh.number, members, n, shrunk_p);
    }
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("strata_comm_shrink: %s", strata_status_string(status));
    }
    free(members);
    api_shrink_close(&sh);
    return status;
}
