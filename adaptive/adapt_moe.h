/*
 * adaptive, the MoE glue: the owner's decider the scheduler runs every step for a MoE
 * object in adaptive mode, built from the pure part (adapt.h), and the calibration that
 * measures the model on this machine through the scheduler's probes. A layer of its own,
 * strata_adaptive_moe: the one part of adaptive/ that sees the scheduler.
 */
#ifndef STRATA_ADAPTIVE_ADAPT_MOE_H
#define STRATA_ADAPTIVE_ADAPT_MOE_H

#include "adaptive/adapt.h"
#include "scheduler/sched.h"
#include "util/util.h"

/** The STRATA_ADAPTIVE_* variables. */
extern const util_config_table_t adapt_config_table;

/**
 * The modes moe starts with, whatever its mode (resolved by the scheduler from the params
 * and STRATA_MOE_MODE): push and pull need nothing more; fixed reads the mask file and sets
 * it; adaptive attaches the policy (STRATA_ADAPTIVE_POLICY, calibrated where asked). The
 * one call the API makes about modes. num_experts: the object's, for the mask. Collective
 * when calibrating.
 */
strata_status_t adapt_moe_start(sched_moe_t *moe, int num_experts);

#endif
