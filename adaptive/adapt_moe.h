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
 * Give moe an adaptive policy for its rank's experts (STRATA_MOE_MODE=adaptive): the policy
 * file named by policy_file, else STRATA_ADAPTIVE_POLICY, else the defaults, with the model
 * measured on this machine when STRATA_ADAPTIVE_CALIBRATE is on. Collective over the
 * object's ranks when calibrating.
 */
strata_status_t adapt_moe_attach(sched_moe_t *moe, const char *policy_file);

#endif
