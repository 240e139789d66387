/*
 * Run under strata-run with 4 ranks: strata_comm_split into two communicators of 2 (color
 * rank % 2, key -rank: numbered in reverse), each running MoE steps on routing of its own,
 * exact against the step computed plainly; a receive from any rank, posted on the parent
 * before the split, gets the user message sent after it (the split's own messages never
 * reach a user receive);
 * a second split where rank 3 passes color -1 (no communicator) and the others make one of
 * 3; and the parent destroyed before the communicators split from it. Prints one line per
 * rank.
 */
#include <strata/strata.h>

#include "common/moe_plain.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "split_check: " __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

#define TOPK    2
#define HIDDEN  32
#define TOKENS  16
#define STEPS   3
#define WAIT_MS 20000u

static uint32_t next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* MoE steps on sub with experts experts, on routing seeded by seed; each checked exactly. */
static void moe_steps(strata_comm_t *sub, uint32_t seed, int experts)
{
    strata_moe_params_t p = {.num_experts = experts, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_FP32, .combine_dtype = STRATA_DTYPE_FP32,
                             .max_tokens = TOKENS};
    static float x[TOKENS][HIDDEN], w[TOKENS][TOPK], out[TOKENS][HIDDEN];
    static int64_t idx[TOKENS][TOPK];
    strata_moe_t *moe;
    strata_moe_recv_t recv;
    uint32_t s = seed * 7919u + (uint32_t)strata_comm_rank(sub);

    CHECK(strata_moe_create(sub, &p, &moe) == STRATA_OK, "moe_create on the split communicator");
    for (int step = 0; step < STEPS; ++step) {
        for (int t = 0; t < TOKENS; ++t) {
            int first = (int)(next(&s) % (uint32_t)experts);

            idx[t][0] = first;
            idx[t][1] = (first + 1 + (int)(next(&s) % (uint32_t)(experts - 1))) % experts;
            for (int k = 0; k < TOPK; ++k) {
                w[t][k] = (float)(next(&s) % 100) / 100.0f;
            }
            for (int h = 0; h < HIDDEN; ++h) {
                x[t][h] = (float)(next(&s) % 1000) / 250.0f - 2.0f;
            }
        }
        CHECK(strata_moe_dispatch(moe, x, NULL, &idx[0][0], TOKENS, &recv) == STRATA_OK,
              "dispatch");
        CHECK(moe_plain_experts(moe, &recv, HIDDEN), "a place with rows and no expert");
        CHECK(strata_moe_combine(moe, NULL, &w[0][0], out) == STRATA_OK, "combine");
        for (int t = 0; t < TOKENS; ++t) {
            for (int h = 0; h < HIDDEN; ++h) {
                float want = 0.0f;

                for (int k = 0; k < TOPK; ++k) {
                    want += w[t][k] * (x[t][h] * (float)(idx[t][k] + 1) + (float)idx[t][k]);
                }
                CHECK(out[t][h] == want, "step %d token %d column %d: %g, not %g", step, t, h,
                      (double)out[t][h], (double)want);
            }
        }
    }
    strata_moe_destroy(moe);
}

int main(void)
{
    strata_bootstrap_t *bs;
    strata_comm_t *comm, *pairs, *three;
    strata_request_t *sent, *got;
    char note[32], heard[32] = "";
    int rank, size;

    CHECK(strata_bootstrap_from_env(&bs) == STRATA_OK, "bootstrap");
    CHECK(strata_comm_create(NULL, bs, &comm) == STRATA_OK, "comm_create");
    rank = strata_comm_rank(comm);
    size = strata_comm_size(comm);
    CHECK(size == 4, "4 ranks, not %d", size);
    /* A user receive across the split: the split's messages must not take it. */
    snprintf(note, sizeof(note), "from rank %d", rank);
    /* from any rank: a message of the split, were it a user one, would match it */
    CHECK(strata_recv(comm, -1, heard, sizeof(heard), &got) == STRATA_OK, "recv");

    CHECK(strata_comm_split(comm, rank % 2, -rank, &pairs) == STRATA_OK, "split in pairs");
    CHECK(strata_send(comm, (rank + 1) % 4, note, strlen(note) + 1, &sent) == STRATA_OK, "send");
    CHECK(pairs != NULL && strata_comm_size(pairs) == 2, "a pair");
    /* key -rank: ranks 2 and 3 come first in their pairs */
    CHECK(strata_comm_rank(pairs) == (rank < 2 ? 1 : 0), "rank %d in its pair: %d", rank,
          strata_comm_rank(pairs));
    moe_steps(pairs, (uint32_t)(rank % 2) + 1, 4);

    CHECK(strata_request_wait(got, WAIT_MS) == STRATA_OK, "the user message");
    snprintf(note, sizeof(note), "from rank %d", (rank + 3) % 4);
    CHECK(strcmp(heard, note) == 0, "the user message reads '%s', not '%s'", heard, note);
    CHECK(strata_request_wait(sent, WAIT_MS) == STRATA_OK, "the user send");
    strata_request_free(got);
    strata_request_free(sent);

    CHECK(strata_comm_split(comm, rank == 3 ? -1 : 0, 0, &three) == STRATA_OK, "split of 3");
    CHECK(rank == 3 ? three == NULL : three != NULL && strata_comm_size(three) == 3 &&
                                          strata_comm_rank(three) == rank,
          "rank %d in the communicator of 3", rank);
    strata_comm_destroy(comm); /* before the communicators split from it */
    if (three != NULL) {
        moe_steps(three, 9, 6);
        strata_comm_destroy(three);
    }
    CHECK(strata_barrier(pairs, WAIT_MS) == STRATA_OK, "a barrier of the pair");
    strata_comm_destroy(pairs);
    strata_bootstrap_destroy(bs);
    printf("rank %d: split checks passed\n", rank);
    return 0;
}
