/*
 * shrink_check's MoE steps: each checked exactly against the step computed plainly, with
 * the masked slots left out; the object recreated after a shrink (experts masked, or
 * reassigned in turn) and after the expand (every expert back on its first rank).
 */
#include "api/shrink_check.h"
#include "api/src/api_comm.h"

#include "common/moe_plain.h"

#include <string.h>

#define TOPK             2
#define HIDDEN           32
#define TOKENS           16

int g_experts; /* 2 per rank of the first communicator */

static uint32_t next_random(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* The rank of comm that holds expert e: its first owner where alive, else -1 (masked), or
 * with reassign, the survivors in turn. */
static int expert_owner(const int *first_of, int n, int e, bool reassign)
{
    int first_owner = e / EXPERTS_PER_RANK, lost = 0;

    for (int r = 0; r < n; ++r) {
        if (first_of[r] == first_owner) {
            return r;
        }
    }
    if (!reassign) {
        return -1;
    }
    for (int earlier = 0; earlier < e; ++earlier) { /* experts lost before this one */
        bool alive = false;

        for (int r = 0; r < n; ++r) {
            alive = alive || first_of[r] == earlier / EXPERTS_PER_RANK;
        }
        lost += !alive;
    }
    return lost % n;
}

/* One step: routing, inputs and weights from the step and this rank's first rank; the
 * experts compute y = x (e + 1) + e from the id strata_moe_expert_id gives. */
strata_status_t moe_step(strata_moe_t *moe, const int *first_of, int n, int step,
                                bool reassign)
{
    static float x[TOKENS][HIDDEN], w[TOKENS][TOPK], out[TOKENS][HIDDEN];
    static int64_t idx[TOKENS][TOPK];
    int32_t masked[TOKENS];
    uint32_t s = (uint32_t)step * 7919u + (uint32_t)g_first_rank * 104729u + 1u;
    strata_moe_recv_t recv;
    strata_status_t status;
    int64_t slots;

    for (int t = 0; t < TOKENS; ++t) {
        int first = (int)(next_random(&s) % (uint32_t)g_experts);

        idx[t][0] = first;
        idx[t][1] = (first + 1 + (int)(next_random(&s) % (uint32_t)(g_experts - 1))) % g_experts;
        for (int k = 0; k < TOPK; ++k) {
            w[t][k] = (float)(next_random(&s) % 100) / 100.0f;
        }
        for (int h = 0; h < HIDDEN; ++h) {
            x[t][h] = (float)(next_random(&s) % 1000) / 250.0f - 2.0f;
        }
    }
    status = strata_moe_dispatch(moe, x, NULL, &idx[0][0], TOKENS, &recv);
    if (status != STRATA_OK) {
        return status;
    }
    /* capacity 0 given: the most an expert can receive on this object's ranks, worked out
     * again by each recreation (fewer ranks, less memory; more ranks, room for their rows) */
    CHECK(recv.capacity == TOKENS * n, "step %d: capacity %d on %d ranks, not %d", step,
          recv.capacity, n, TOKENS * n);
    CHECK(moe_plain_experts(moe, &recv, HIDDEN), "a place with rows and no expert");
    status = strata_moe_combine(moe, NULL, &w[0][0], out);
    if (status != STRATA_OK) {
        return status;
    }
    CHECK(strata_moe_masked(moe, NULL, masked, &slots) == STRATA_OK, "strata_moe_masked");
    for (int t = 0; t < TOKENS; ++t) {
        int lost = 0;

        for (int k = 0; k < TOPK; ++k) {
            lost += expert_owner(first_of, n, (int)idx[t][k], reassign) < 0;
        }
        CHECK(masked[t] == lost, "step %d token %d: %d slots masked, %d expected", step, t,
              masked[t], lost);
        for (int h = 0; h < HIDDEN; ++h) {
            float want = 0.0f;

            for (int k = 0; k < TOPK; ++k) {
                if (expert_owner(first_of, n, (int)idx[t][k], reassign) >= 0) {
                    want += w[t][k] * (x[t][h] * (float)(idx[t][k] + 1) + (float)idx[t][k]);
                }
            }
            CHECK(out[t][h] == want, "step %d token %d column %d: %g, not %g", step, t, h,
                  (double)out[t][h], (double)want);
        }
    }
    return STRATA_OK;
}

/* The first object's params. */
static strata_moe_params_t moe_first_params(void)
{
    return (strata_moe_params_t){.num_experts = g_experts, .topk = TOPK, .hidden = HIDDEN,
                                 .dtype = STRATA_DTYPE_FP32,
                                 .combine_dtype = STRATA_DTYPE_FP32, .max_tokens = TOKENS};
}

strata_moe_t *moe_first(strata_comm_t *comm)
{
    strata_moe_params_t p = moe_first_params();
    strata_moe_t *moe;

    CHECK(strata_moe_create(comm, &p, &moe) == STRATA_OK, "strata_moe_create");
    return moe;
}

/* A MoE object asked for on comm, whose failed rank every rank's engine has declared: the
 * call fails, and counts as one of comm's objects all the same (api_moe_number). */
void moe_create_fails(strata_comm_t *comm)
{
    strata_moe_params_t p = moe_first_params();
    unsigned before = comm->moe_created;
    strata_moe_t *moe = NULL;
    strata_status_t status = strata_moe_create(comm, &p, &moe);

    CHECK(status == STRATA_ERR_PEER_FAILED && moe == NULL,
          "strata_moe_create with a rank failed returned %s", strata_status_string(status));
    CHECK(comm->moe_created == before + 1, "the failed strata_moe_create counted %u objects "
          "on the communicator, not 1", comm->moe_created - before);
}

/* Recreations every rank must refuse because one rank's map is wrong: rank 0 of comm passes
 * a map naming a rank comm has not (INVALID), then one unlike the others' (CONFIG). */
static void moe_refusals(strata_moe_t *moe, strata_comm_t *comm, const int32_t *owner)
{
    int32_t mine[512];
    strata_moe_t *fresh = NULL;
    strata_status_t status;

    memcpy(mine, owner, sizeof(int32_t) * (size_t)g_experts);
    if (strata_comm_rank(comm) == 0) {
        mine[0] = strata_comm_size(comm);
    }
    status = strata_moe_recreate(moe, comm, mine, &fresh);
    CHECK(status == STRATA_ERR_INVALID && fresh == NULL,
          "a map with rank %d on rank 0: recreate returned %s", strata_comm_size(comm),
          strata_status_string(status));
    if (strata_comm_rank(comm) == 0) {
        mine[0] = -1;
    }
    status = strata_moe_recreate(moe, comm, mine, &fresh);
    CHECK(status == STRATA_ERR_CONFIG && fresh == NULL,
          "rank 0's map unlike the others': recreate returned %s", strata_status_string(status));
}

strata_status_t moe_again(strata_moe_t **moe, strata_comm_t *comm, const int *first_of,
                                 bool reassign, bool refusals)
{
    int32_t owner[512];
    strata_moe_t *fresh;
    strata_status_t status;

    for (int e = 0; e < g_experts; ++e) {
        owner[e] = expert_owner(first_of, strata_comm_size(comm), e, true);
    }
    if (refusals) {
        moe_refusals(*moe, comm, owner);
    }
    status = strata_moe_recreate(*moe, comm, reassign ? owner : NULL, &fresh);
    if (status == STRATA_OK) {
        strata_moe_destroy(*moe);
        *moe = fresh;
    }
    return status;
}

/* Every expert back on its first rank: the first ranks of a communicator that has them all. */
strata_status_t moe_back(strata_moe_t **moe, strata_comm_t *comm, const int *first_of)
{
    int32_t owner[512];
    strata_moe_t *fresh;
    strata_status_t status;

    for (int e = 0; e < g_experts; ++e) {
        owner[e] = expert_owner(first_of, strata_comm_size(comm), e, false);
        CHECK(owner[e] >= 0, "expert %d has no rank after the expand", e);
    }
    status = strata_moe_recreate(*moe, comm, owner, &fresh);
    if (status == STRATA_OK) {
        strata_moe_destroy(*moe); /* tolerates NULL: the joiner had none */
        *moe = fresh;
    }
    return status;
}
