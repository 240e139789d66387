/*
 * Multi-process checks of intra-node MoE dispatch/combine against a sequential reference,
 * shared by the cmocka test (host backend) and the moe_check program (any backend, run by
 * scripts/gpu-check.sh where a GPU exists).
 */
#ifndef STRATA_TESTS_MOE_CHECK_H
#define STRATA_TESTS_MOE_CHECK_H

#include "common/moe_ref.h"

/** Fork case->ranks processes, run the case in each, wait; 0 if every rank passed. */
int moe_check_run(const moe_case_t *c);

#endif
