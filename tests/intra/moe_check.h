/*
 * Multi-process checks of intra-node MoE dispatch/combine against a sequential reference,
 * shared by the cmocka test (host backend) and the moe_check program (any backend, run by
 * scripts/gpu-check.sh where a GPU exists).
 */
#ifndef STRATA_TESTS_MOE_CHECK_H
#define STRATA_TESTS_MOE_CHECK_H

#include <strata/strata.h>

typedef enum moe_scenario {
    MOE_SCENARIO_EXACT,    /* every step's results equal the reference */
    MOE_SCENARIO_OVERFLOW, /* small capacity: CAPACITY errors, delivered rows still exact */
    MOE_SCENARIO_BAD_ID,   /* rank 0 sends an out-of-range expert id on odd steps */
} moe_scenario_t;

typedef struct moe_case {
    const char    *device; /* "host", "cuda", "hip" */
    int            ranks;
    int            experts;
    int            topk;
    int            hidden;
    int            max_tokens;
    int            capacity; /* 0: no overflow possible */
    int            steps;
    strata_dtype_t dtype;
    strata_dtype_t combine_dtype;
    unsigned       seed;
    moe_scenario_t scenario;
} moe_case_t;

/** Fork case->ranks processes, run the case in each, wait; 0 if every rank passed. */
int moe_check_run(const moe_case_t *c);

#endif
