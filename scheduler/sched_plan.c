/*
 * A rank's plan for one routing: its tokens' ids checked, the slots served on its own
 * node, and per peer the tokens that cross the network to it (each token once per peer,
 * whatever the number of its experts there) with the node-local expert ids it carries.
 * Built on the host from topk_idx, then copied once to the device, where the step's
 * kernels read it.
 */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

/* Why slot k of a token is bad: 0 fine, 1 not an expert, 2 the expert of slot *dup_p too. */
static int sched_slot_problem(int num_experts, const int64_t *experts, int k, int *dup_p)
{
    if (experts[k] < -1 || experts[k] >= num_experts) {
        return 1;
    }
    for (int j = 0; j < k && experts[k] >= 0; ++j) {
        if (experts[j] == experts[k]) {
            *dup_p = j;
            return 2;
        }
    }
    return 0;
}

static void sched_slot_log(int num_experts, const int64_t *experts, int token, int k,
                           int problem, int dup)
{
    if (problem == 1) {
        UTIL_LOG_ERROR("layout: topk_idx[%d][%d] = %lld is not an expert (0..%d, or -1)", token,
                       k, (long long)experts[k], num_experts - 1);
    } else {
        UTIL_LOG_ERROR("layout: token %d routes to expert %lld twice (slots %d and %d)", token,
                       (long long)experts[k], dup, k);
    }
}

strata_status_t sched_token_check(int num_experts, int topk, const int64_t *experts, int token)
{
    int dup = 0, problem;

    for (int k = 0; k < topk; ++k) {
        if ((problem = sched_slot_problem(num_experts, experts, k, &dup)) != 0) {
            sched_slot_log(num_experts, experts, token, k, problem, dup);
            return STRATA_ERR_INVALID;
        }
    }
    return STRATA_OK;
}

/* One bad slot into the call's summary: counted, and among the first shown. */
static void sched_bad_ids_add(sched_bad_ids_t *bad, const int64_t *experts, int token, int k)
{
    size_t used = strlen(bad->first);

    if (bad->count++ < SCHED_BAD_IDS_SHOWN && used < sizeof(bad->first)) {
        snprintf(bad->first + used, sizeof(bad->first) - used, "%s[%d][%d] = %lld",
                 used ? ", " : "", token, k, (long long)experts[k]);
    }
}

strata_status_t sched_token_clean(int num_experts, int topk, int64_t *experts, int token,
                                  sched_bad_ids_t *bad)
{
    strata_status_t status = STRATA_OK;
    int dup = 0, problem;

    for (int k = 0; k < topk; ++k) {
        if ((problem = sched_slot_problem(num_experts, experts, k, &dup)) != 0) {
            sched_bad_ids_add(bad, experts, token, k);
            experts[k] = -1;
            status     = STRATA_ERR_INVALID;
        }
    }
    return status;
}

void sched_bad_ids_log(const sched_bad_ids_t *bad, int num_experts)
{
    if (bad->count > 0) {
        UTIL_LOG_ERROR("layout: %d topk_idx entries skipped: not an expert (0..%d, or -1), or "
                       "a token's expert again; %s %s%s", bad->count, num_experts - 1,
                       bad->count > SCHED_BAD_IDS_SHOWN ? "the first:" : "they are:", bad->first,
                       bad->count > SCHED_BAD_IDS_SHOWN ? ", ..." : "");
    }
}

/* The peer that takes global expert e's tokens from this rank, or -1 on this node. */
static int sched_expert_peer(const sched_geometry_t *geo, int expert)
{
    int owner = expert / geo->experts_per_rank;
    int node  = geo->rank_node[owner];

    if (node == geo->node) {
        return -1;
    }
    if (geo->route == STRATA_MOE_ROUTE_HIERARCHICAL) {
        owner = geo->node_ranks[node * geo->local_size + geo->rank_local[geo->rank]];
    }
    return geo->peer_index[owner];
}

/* Check every token; a bad one is refused, or with skip_bad has its bad slots cleared. */
static strata_status_t sched_plan_clean(const sched_geometry_t *geo, sched_plan_t *plan,
                                        const int64_t *topk_idx, bool skip_bad)
{
    int topk = geo->topk;
    strata_status_t status = STRATA_OK;
    sched_bad_ids_t bad = {0};

    if (plan->num_tokens > 0) {
        memcpy(plan->clean_idx, topk_idx,
               sizeof(int64_t) * (size_t)plan->num_tokens * (size_t)topk);
    }
    plan->had_bad_ids = false;
    for (int t = 0; t < plan->num_tokens; ++t) {
        int64_t *ids = &plan->clean_idx[(size_t)t * (size_t)topk];

        if (!skip_bad) {
            status = sched_token_check(geo->num_experts, topk, ids, t);
            if (status != STRATA_OK) {
                return status;
            }
        } else if (sched_token_clean(geo->num_experts, topk, ids, t, &bad) != STRATA_OK) {
            plan->had_bad_ids = true;
            status            = STRATA_ERR_INVALID;
        }
    }
    sched_bad_ids_log(&bad, geo->num_experts); /* one line for the call, however many */
    return status;
}

/* Slot k's peer, or -1; first_p: whether no earlier slot of the token has that peer. */
static int sched_slot_peer(const sched_geometry_t *geo, const int64_t *ids, int k, bool *first_p)
{
    int peer = ids[k] >= 0 ? sched_expert_peer(geo, (int)ids[k]) : -1;

    *first_p = peer >= 0;
    for (int j = 0; j < k && *first_p; ++j) {
        *first_p = !(ids[j] >= 0 && sched_expert_peer(geo, (int)ids[j]) == peer);
    }
    return peer;
}

/* In rounds: one (token, slot) pair more for the node-local expert `local` of peer's node
 * (num_peers: this node). */
static void sched_plan_step_count(const sched_geometry_t *geo, sched_plan_t *plan, int peer,
                                  int64_t local)
{
    if (plan->step_counts != NULL && local >= 0) {
        ++plan->step_counts[(size_t)peer * (size_t)geo->header_counts + (size_t)local];
    }
}

/* Counting pass: node-local slots, entries and terms per peer (peer_first[p + 1]); in rounds
 * the step's counts by node and expert. */
static int sched_plan_count(const sched_geometry_t *geo, sched_plan_t *plan)
{
    int topk = geo->topk, entries = 0;

    memset(plan->peer_first, 0, sizeof(int32_t) * (size_t)(geo->num_peers + 1));
    memset(plan->peer_terms, 0, sizeof(int64_t) * (size_t)UTIL_MAX(geo->num_peers, 1));
    if (plan->step_counts != NULL) {
        memset(plan->step_counts, 0, sched_plan_step_counts_bytes(geo));
    }
    for (int t = 0; t < plan->num_tokens; ++t) {
        const int64_t *ids = &plan->clean_idx[(size_t)t * (size_t)topk];

        for (int k = 0; k < topk; ++k) {
            bool first;
            int peer = sched_slot_peer(geo, ids, k, &first);
            int64_t local = ids[k] >= 0 ? sched_local_expert(geo, (int)ids[k]) : -1;

            plan->node_idx[(size_t)t * (size_t)topk + (size_t)k] = peer < 0 ? local : -1;
            sched_plan_step_count(geo, plan, peer < 0 ? geo->num_peers : peer, local);
            if (peer >= 0) {
                plan->peer_terms[peer] += 1;
                plan->peer_first[peer + 1] += first;
                entries += first;
            }
        }
    }
    for (int p = 0; p < geo->num_peers; ++p) {
        plan->peer_first[p + 1] += plan->peer_first[p];
    }
    return entries;
}

/* Fill pass: per peer, its tokens in token order with the expert ids they carry there. The
 * starts in peer_first serve as cursors, then move back into place. */
static void sched_plan_fill(const sched_geometry_t *geo, sched_plan_t *plan)
{
    int topk = geo->topk;

    for (int t = 0; t < plan->num_tokens; ++t) {
        const int64_t *ids = &plan->clean_idx[(size_t)t * (size_t)topk];

        for (int k = 0; k < topk; ++k) {
            bool first;
            int peer = sched_slot_peer(geo, ids, k, &first), entry;

            if (peer < 0) {
                continue;
            }
            if (first) {
                entry = plan->peer_first[peer]++;
                plan->tokens[entry] = t;
                for (int j = 0; j < topk; ++j) {
                    plan->experts[(size_t)entry * (size_t)topk + (size_t)j] = -1;
                }
            }
            entry = plan->peer_first[peer] - 1;
            plan->experts[(size_t)entry * (size_t)topk + (size_t)k] =
                sched_local_expert(geo, (int)ids[k]);
        }
    }
    for (int p = geo->num_peers; p > 0; --p) {
        plan->peer_first[p] = plan->peer_first[p - 1];
    }
    plan->peer_first[0] = 0;
}

size_t sched_plan_step_counts_bytes(const sched_geometry_t *geo)
{
    return ((size_t)geo->num_peers + 1) * (size_t)geo->header_counts * sizeof(int32_t);
}

strata_status_t sched_plan_alloc_ids(const sched_geometry_t *geo, sched_plan_t *plan,
                                     int num_tokens)
{
    size_t slots = (size_t)UTIL_MAX(num_tokens, 1) * (size_t)geo->topk;
    size_t counts = sched_plan_step_counts_bytes(geo);

    plan->clean_idx   = malloc(sizeof(int64_t) * slots);
    plan->node_idx    = malloc(sizeof(int64_t) * slots);
    plan->peer_first  = calloc((size_t)geo->num_peers + 1, sizeof(int32_t));
    plan->peer_terms  = calloc((size_t)UTIL_MAX(geo->num_peers, 1), sizeof(int64_t));
    plan->step_counts = counts > 0 ? calloc(1, counts) : NULL;
    return plan->clean_idx && plan->node_idx && plan->peer_first && plan->peer_terms &&
                   (counts == 0 || plan->step_counts)
               ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

strata_status_t sched_plan_alloc_entries(const sched_geometry_t *geo, sched_plan_t *plan,
                                         int entries)
{
    plan->capacity = UTIL_MAX(entries, 1);
    plan->tokens   = malloc(sizeof(int32_t) * (size_t)plan->capacity);
    plan->experts  = malloc(sizeof(int32_t) * (size_t)plan->capacity * (size_t)geo->topk);
    return plan->tokens && plan->experts ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

/* num_tokens in range, and topk_idx given when there are tokens; one line naming which. */
static bool sched_plan_tokens_ok(const sched_geometry_t *geo, const int64_t *topk_idx,
                                 int num_tokens, const char *what)
{
    if (num_tokens < 0 || num_tokens > geo->max_tokens) {
        UTIL_LOG_ERROR("moe: %s of %d tokens: num_tokens must be 0..%d (max_tokens)", what,
                       num_tokens, geo->max_tokens);
        return false;
    }
    if (num_tokens > 0 && topk_idx == NULL) {
        UTIL_LOG_ERROR("moe: %s of %d tokens with a NULL topk_idx", what, num_tokens);
        return false;
    }
    return true;
}

strata_status_t sched_plan_build(const sched_geometry_t *geo, const int64_t *topk_idx,
                                 int num_tokens, bool skip_bad, sched_plan_t *plan)
{
    bool exact = plan->capacity == 0;
    strata_status_t status, cleaned;

    if (!sched_plan_tokens_ok(geo, topk_idx, num_tokens, "layout")) {
        return STRATA_ERR_INVALID;
    }
    if (exact && (status = sched_plan_alloc_ids(geo, plan, num_tokens)) != STRATA_OK) {
        return status;
    }
    plan->num_tokens = num_tokens;
    cleaned = sched_plan_clean(geo, plan, topk_idx, skip_bad);
    if (cleaned != STRATA_OK && !skip_bad) {
        return cleaned;
    }
    plan->num_entries = sched_plan_count(geo, plan);
    if (exact && (status = sched_plan_alloc_entries(geo, plan, plan->num_entries)) != STRATA_OK) {
        return status;
    }
    sched_plan_fill(geo, plan);
    return cleaned;
}

void sched_plan_release(sched_plan_t *plan)
{
    free(plan->masked);
    free(plan->clean_idx);
    free(plan->node_idx);
    free(plan->peer_first);
    free(plan->peer_terms);
    free(plan->step_counts);
    free(plan->tokens);
    free(plan->experts);
}

/* --- The device copy ----------------------------------------------------------------------- */

/* Offsets of a plan's device arrays (up to max_tokens tokens and entries entries) in their
 * one allocation. */
typedef struct sched_plan_place {
    size_t clean, node, terms, first, toks, exps, counts, total;
} sched_plan_place_t;

static void sched_plan_place(const sched_geometry_t *geo, int max_tokens, int entries,
                             sched_plan_place_t *p)
{
    size_t slots = (size_t)UTIL_MAX(max_tokens, 1) * (size_t)geo->topk, cursor = 0;
    size_t peers = (size_t)geo->num_peers;

    p->clean = sched_place(&cursor, slots * sizeof(int64_t));
    p->node  = sched_place(&cursor, slots * sizeof(int64_t));
    p->terms = sched_place(&cursor, UTIL_MAX(peers, 1) * sizeof(int64_t));
    p->first = sched_place(&cursor, (peers + 1) * sizeof(int32_t));
    p->toks  = sched_place(&cursor, (size_t)entries * sizeof(int32_t));
    p->exps  = sched_place(&cursor, (size_t)entries * (size_t)geo->topk * sizeof(int32_t));
    p->counts = geo->header_counts > 0 ? sched_place(&cursor, sched_plan_step_counts_bytes(geo))
                                       : 0;
    p->total = cursor;
}

size_t sched_plan_device_bytes(const sched_geometry_t *geo, int max_tokens, int entries)
{
    sched_plan_place_t p;

    sched_plan_place(geo, max_tokens, UTIL_MAX(entries, 1), &p);
    return p.total;
}

/* Device arrays for up to max_tokens tokens and the plan's capacity of entries. */
strata_status_t sched_plan_device_alloc(const sched_moe_t *moe, sched_plan_t *plan, int max_tokens)
{
    sched_plan_place_t p;
    char *base;
    strata_status_t status;

    sched_plan_place(&moe->geo, max_tokens, plan->capacity, &p);
    status = moe->world.device->mem_alloc(p.total, &plan->device_mem);
    if (status != STRATA_OK) {
        return status;
    }
    base = plan->device_mem;
    plan->d_clean_idx  = (int64_t *)(base + p.clean);
    plan->d_node_idx   = (int64_t *)(base + p.node);
    plan->d_peer_terms = (int64_t *)(base + p.terms);
    plan->d_peer_first = (int32_t *)(base + p.first);
    plan->d_tokens     = (int32_t *)(base + p.toks);
    plan->d_experts    = (int32_t *)(base + p.exps);
    plan->d_step_counts = moe->geo.header_counts > 0 ? (int32_t *)(base + p.counts) : NULL;
    return STRATA_OK;
}

/* The host arrays to the device, after the launches that still read the old ones. */
static strata_status_t sched_plan_upload(const sched_moe_t *moe, const sched_plan_t *plan)
{
    intra_moe_t *d = moe->intra;
    size_t slots = (size_t)plan->num_tokens * (size_t)moe->geo.topk;
    size_t peers = (size_t)moe->geo.num_peers;
    size_t entries = (size_t)plan->num_entries;
    size_t experts = entries * (size_t)moe->geo.topk;
    strata_status_t status = STRATA_OK;

    if (slots > 0) {
        status = intra_moe_write(d, plan->d_clean_idx, plan->clean_idx, slots * sizeof(int64_t));
        if (status == STRATA_OK) {
            status = intra_moe_write(d, plan->d_node_idx, plan->node_idx, slots * sizeof(int64_t));
        }
    }
    if (status == STRATA_OK && peers > 0) {
        status = intra_moe_write(d, plan->d_peer_terms, plan->peer_terms, peers * sizeof(int64_t));
    }
    if (status == STRATA_OK) {
        status = intra_moe_write(d, plan->d_peer_first, plan->peer_first,
                                 (peers + 1) * sizeof(int32_t));
    }
    if (status == STRATA_OK && entries > 0) {
        status = intra_moe_write(d, plan->d_tokens, plan->tokens, entries * sizeof(int32_t));
    }
    if (status == STRATA_OK && entries > 0) {
        status = intra_moe_write(d, plan->d_experts, plan->experts, experts * sizeof(int32_t));
    }
    if (status == STRATA_OK && plan->step_counts != NULL) {
        status = intra_moe_write(d, plan->d_step_counts, plan->step_counts,
                                 sched_plan_step_counts_bytes(&moe->geo));
    }
    return status;
}

/* sched_plan_build on the ids as the object numbers them (an object with an expert map:
 * translated into scratch, or a buffer of its own where scratch is NULL). */
static strata_status_t sched_plan_build_mapped(const sched_moe_t *moe, sched_plan_t *plan,
                                               const int64_t *topk_idx, int num_tokens,
                                               bool skip_bad, int64_t *scratch)
{
    int64_t *ids = scratch;
    strata_status_t status;

    plan->masked_slots = 0;
    if (moe->experts.to_internal == NULL || num_tokens <= 0 || topk_idx == NULL ||
        num_tokens > moe->geo.max_tokens) {
        return sched_plan_build(&moe->geo, topk_idx, num_tokens, skip_bad, plan);
    }
    if (ids == NULL &&
        (ids = malloc(sizeof(int64_t) * (size_t)num_tokens * (size_t)moe->geo.topk)) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = sched_plan_map_ids(moe, plan, topk_idx, num_tokens, ids);
    if (status == STRATA_OK) {
        status = sched_plan_build(&moe->geo, ids, num_tokens, skip_bad, plan);
    }
    if (ids != scratch) {
        free(ids);
    }
    return status;
}

strata_status_t sched_plan_create(const sched_moe_t *moe, const int64_t *topk_idx, int num_tokens,
                                  bool skip_bad, sched_plan_t **plan_p)
{
    strata_status_t status, built;
    sched_plan_t *plan;

    if (moe == NULL || plan_p == NULL) {
        UTIL_LOG_ERROR("moe: a layout needs an object and a result");
        return STRATA_ERR_INVALID;
    }
    plan = calloc(1, sizeof(*plan));
    if (plan == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    plan->moe        = moe;
    plan->moe_serial = moe->serial;
    plan->device     = moe->world.device;
    built = sched_plan_build_mapped(moe, plan, topk_idx, num_tokens, skip_bad, NULL);
    status = built == STRATA_OK || (skip_bad && built == STRATA_ERR_INVALID) ? STRATA_OK : built;
    if (status == STRATA_OK) {
        status = sched_plan_device_alloc(moe, plan, num_tokens);
    }
    if (status == STRATA_OK) {
        status = sched_plan_upload(moe, plan);
    }
    if (status != STRATA_OK) {
        sched_plan_destroy(plan);
        return status;
    }
    *plan_p = plan;
    return built;
}

void sched_plan_destroy(sched_plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    if (plan->device_mem != NULL) {
        plan->device->mem_free(plan->device_mem);
    }
    sched_plan_release(plan);
    free(plan);
}

strata_status_t sched_plan_refill(sched_moe_t *moe, const int64_t *topk_idx, int num_tokens,
                                  const sched_plan_t **plan_p)
{
    strata_status_t built, status = STRATA_OK;

    if (moe->cur.state != SCHED_STEP_IDLE) { /* the step in progress still uses the plan */
        return sched_refuse_mid_step(moe, "dispatch");
    }
    if (!sched_plan_tokens_ok(&moe->geo, topk_idx, num_tokens, "dispatch")) {
        return STRATA_ERR_INVALID;
    }
    /* Bad ids become -1 and the plan says so (had_bad_ids): the step reports INVALID. */
    built = sched_plan_build_mapped(moe, &moe->own_plan, topk_idx, num_tokens, true,
                                    moe->experts.scratch);
    if (built != STRATA_OK && built != STRATA_ERR_INVALID) {
        return built;
    }
    status = sched_plan_upload(moe, &moe->own_plan);
    if (status == STRATA_OK) {
        *plan_p = &moe->own_plan;
    }
    return status;
}
