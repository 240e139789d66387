/*
 * Expert ids as the caller names them and as the object numbers them inside. An object made
 * by strata_moe_recreate keeps the ids of the object it replaces (its global experts), while
 * the kernels need rank r's experts to be r * experts_per_rank + j: every expert has an
 * internal id on the rank that now holds it, and an expert no rank holds is masked (its
 * slots become -1 and are counted per token). An object made by strata_moe_create has no
 * map: both numberings are the same.
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

strata_status_t sched_moe_map_experts(sched_moe_t *moe, int global_experts, const int32_t *owner)
{
    sched_experts_t *x = &moe->experts;
    int per_rank = moe->geo.experts_per_rank, world = moe->geo.world_size;
    int *held = calloc((size_t)world, sizeof(int));
    size_t slots = (size_t)UTIL_MAX(moe->geo.max_tokens, 1) * (size_t)moe->geo.topk;

    x->to_internal = calloc((size_t)global_experts, sizeof(int32_t));
    x->to_global   = malloc(sizeof(int32_t) * (size_t)moe->params.num_experts);
    x->scratch     = malloc(sizeof(int64_t) * slots);
    if (held == NULL || x->to_internal == NULL || x->to_global == NULL || x->scratch == NULL) {
        free(held);
        return STRATA_ERR_NO_MEMORY; /* the object's destroy frees the rest */
    }
    x->global = global_experts;
    for (int i = 0; i < moe->params.num_experts; ++i) {
        x->to_global[i] = -1; /* a place no expert holds */
    }
    for (int e = 0; e < global_experts; ++e) { /* each rank's experts in increasing id */
        int r = owner[e];

        if (r < 0 || r >= world || held[r] >= per_rank) {
            x->to_internal[e] = -1; /* checked by the caller: only -1 gets here */
            continue;
        }
        x->to_internal[e]                      = r * per_rank + held[r];
        x->to_global[r * per_rank + held[r]++] = e;
    }
    free(held);
    return STRATA_OK;
}

void sched_experts_free(sched_experts_t *x)
{
    free(x->to_internal);
    free(x->to_global);
    free(x->scratch);
    memset(x, 0, sizeof(*x));
}

int sched_moe_global_experts(const sched_moe_t *moe)
{
    return moe->experts.to_internal != NULL ? moe->experts.global : moe->params.num_experts;
}

int sched_moe_expert_id(const sched_moe_t *moe, int local)
{
    int internal = moe->geo.rank * moe->geo.experts_per_rank + local;

    if (local < 0 || local >= moe->geo.experts_per_rank) {
        return -1;
    }
    return moe->experts.to_internal != NULL ? moe->experts.to_global[internal] : internal;
}

int sched_moe_first_expert(const sched_moe_t *moe)
{
    int first = sched_moe_expert_id(moe, 0);

    for (int j = 1; j < moe->geo.experts_per_rank; ++j) {
        if (sched_moe_expert_id(moe, j) != first + j) {
            return -1;
        }
    }
    return first;
}

int sched_moe_expert_owner(const sched_moe_t *moe, int expert)
{
    int internal;

    if (expert < 0 || expert >= sched_moe_global_experts(moe)) {
        return -1;
    }
    internal = moe->experts.to_internal != NULL ? moe->experts.to_internal[expert] : expert;
    return internal < 0 ? -1 : internal / moe->geo.experts_per_rank;
}

/* Caller's id g as the object numbers it: -1 for none or masked (counted); an id the
 * object does not have stays an id its geometry refuses, itself where it can. */
static int64_t sched_expert_inside(const sched_experts_t *x, int internal_experts, int64_t g,
                                   int32_t *masked)
{
    if (g >= 0 && g < x->global) {
        if (x->to_internal[g] < 0) {
            ++*masked;
        }
        return x->to_internal[g];
    }
    return g >= x->global && g < internal_experts ? INT64_C(-2) : g;
}

strata_status_t sched_plan_map_ids(const sched_moe_t *moe, sched_plan_t *plan,
                                   const int64_t *topk_idx, int num_tokens, int64_t *out)
{
    int topk = moe->geo.topk;
    int32_t *masked;

    /* Once per plan, for the most tokens a plan holds: the object's own plan is refilled
     * every step. */
    if (plan->masked == NULL &&
        (plan->masked = malloc(sizeof(int32_t) * (size_t)UTIL_MAX(moe->geo.max_tokens, 1))) ==
            NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    masked             = plan->masked;
    plan->masked_slots = 0;
    for (int t = 0; t < num_tokens; ++t) {
        masked[t] = 0;
        for (int k = 0; k < topk; ++k) {
            size_t at = (size_t)t * (size_t)topk + (size_t)k;

            out[at] = sched_expert_inside(&moe->experts, moe->params.num_experts, topk_idx[at],
                                          &masked[t]);
        }
        plan->masked_slots += masked[t];
    }
    if (plan->masked_slots > 0 && !moe->experts.masked_logged) {
        UTIL_LOG_WARN("moe: %" PRId64 " top-k slots of %d tokens name experts no rank holds "
                      "since the object was recreated; they are left out of the step "
                      "(strata_moe_masked says which tokens; this is logged once)",
                      plan->masked_slots, num_tokens);
        ((sched_moe_t *)moe)->experts.masked_logged = true;
    }
    return STRATA_OK;
}

strata_status_t sched_moe_masked(const sched_moe_t *moe, const sched_plan_t *plan,
                                 int32_t *per_token, int64_t *slots_p)
{
    if (plan == NULL) {
        plan = &moe->own_plan;
    } else if (plan->moe != moe || plan->moe_serial != moe->serial) {
        UTIL_LOG_ERROR("moe: masked: the layout was made by another object");
        return STRATA_ERR_INVALID;
    }
    if (per_token != NULL) {
        for (int t = 0; t < plan->num_tokens; ++t) {
            per_token[t] = plan->masked != NULL ? plan->masked[t] : 0;
        }
    }
    if (slots_p != NULL) {
        *slots_p = plan->masked_slots;
    }
    return STRATA_OK;
}

void sched_experts_mask(const sched_moe_t *moe, const uint64_t *global, uint64_t *internal)
{
    const sched_experts_t *x = &moe->experts;

    memset(internal, 0, sched_mask_bytes(moe));
    for (int e = 0; global != NULL && e < x->global; ++e) {
        if (x->to_internal[e] >= 0 && sched_mask_test(global, e)) {
            internal[x->to_internal[e] / 64] |= UINT64_C(1) << (x->to_internal[e] % 64);
        }
    }
}
