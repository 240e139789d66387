/*
 * The experts of the tests' plain fp32 MoE steps: expert e's output row is its input row
 * times (e + 1) plus e, e being the id strata_moe_expert_id gives the local place, so that
 * a row that reached the wrong expert, or a place named with the wrong id, shows.
 */
#ifndef STRATA_TESTS_COMMON_MOE_PLAIN_H
#define STRATA_TESTS_COMMON_MOE_PLAIN_H

#include <strata/strata.h>

#include <stdbool.h>
#include <stddef.h>

/* Every received row's output; false where a place with rows has no expert. */
static inline bool moe_plain_experts(const strata_moe_t *moe, const strata_moe_recv_t *recv,
                                     int hidden)
{
    for (int e = 0; e < recv->num_local_experts; ++e) {
        int id = strata_moe_expert_id(moe, e);

        if (recv->count[e] > 0 && id < 0) {
            return false;
        }
        for (int r = 0; r < recv->count[e]; ++r) {
            size_t at = (size_t)e * (size_t)recv->capacity + (size_t)r;
            const float *row = (const float *)((const char *)recv->x + at * recv->row_bytes);
            float *y = (float *)((char *)recv->expert_y + at * recv->y_row_bytes);

            for (int h = 0; h < hidden; ++h) {
                y[h] = row[h] * (float)(id + 1) + (float)id;
            }
        }
    }
    return true;
}

#endif
