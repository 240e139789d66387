/*
 * adaptive: per-expert Push/Pull decisions from routing statistics. The statistics (EWMA
 * of each expert's tokens from each source node), the cost model of each mode on each tier,
 * the policy with its hysteresis, and policy and mask files: pure computation over util,
 * which strata-tune replays traces through. The decider a MoE object runs, with the model's
 * calibration, is the glue in adapt_moe.h, a layer of its own above the scheduler.
 */
#ifndef STRATA_ADAPTIVE_ADAPT_H
#define STRATA_ADAPTIVE_ADAPT_H

#include <strata/types.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


/* --- Statistics --------------------------------------------------------------------------- */

/** One expert's tokens from one source node, per step. */
typedef struct adapt_cell {
    double mean; /**< EWMA of tokens */
    double var;  /**< exponentially weighted variance of tokens */
    double busy; /**< EWMA of "any token at all": the chance the node sends one */
} adapt_cell_t;

/** One expert over all source nodes. */
typedef struct adapt_expert_stats {
    double   mean;  /**< EWMA of tokens per step */
    double   var;   /**< exponentially weighted variance of tokens per step */
    double   bytes; /**< EWMA of token bytes per step */
    uint64_t steps; /**< steps observed */
} adapt_expert_stats_t;

typedef struct adapt_stats adapt_stats_t;

/**
 * alpha in (0, 1]: weight of the newest step (1 keeps only the last step). row_bytes: bytes
 * of one token row, for the byte statistics.
 */
strata_status_t adapt_stats_create(int num_experts, int num_nodes, double alpha, double row_bytes,
                                   adapt_stats_t **stats_p);
void            adapt_stats_destroy(adapt_stats_t *stats);

/** Fold in one step: tokens[num_experts][num_nodes]. Not thread-safe. */
void adapt_stats_update(adapt_stats_t *stats, const int32_t *tokens);

/** NULL when out of range. */
const adapt_expert_stats_t *adapt_stats_expert(const adapt_stats_t *stats, int expert);
const adapt_cell_t         *adapt_stats_cell(const adapt_stats_t *stats, int expert, int node);

/* --- Cost model --------------------------------------------------------------------------- */

typedef enum adapt_tier {
    ADAPT_TIER_INTRA, /**< the source node is the owner's */
    ADAPT_TIER_INTER, /**< across the network */
    ADAPT_TIERS
} adapt_tier_t;

typedef enum adapt_mode {
    ADAPT_MODE_PUSH,
    ADAPT_MODE_PULL,
    ADAPT_MODES
} adapt_mode_t;

/** One tier in one mode: a fixed cost per source node, and bandwidth. */
typedef struct adapt_link {
    double alpha_s;  /**< seconds per source node taking part */
    double beta_Bps; /**< bytes per second */
} adapt_link_t;

/**
 * An expert's time in one step (docs/adaptive.md "The policy"). Push: every source node
 * writes into the owner's slots and the owner waits on each one's flag, tokens or not:
 * sum over source nodes of alpha + bytes / beta. Pull: the owner fetches only from nodes
 * that have tokens for it, each fetch one extra round trip: sum over those nodes of
 * alpha + rtt + bytes / beta.
 */
typedef struct adapt_model {
    adapt_link_t link[ADAPT_TIERS][ADAPT_MODES];
    double       pull_rtt_s[ADAPT_TIERS]; /**< the round trip Pull adds per fetch */
} adapt_model_t;

/** Figures of an NVLink node joined by a 400 Gb/s RDMA NIC; calibrate or load a policy
 *  file for a real machine. */
void adapt_model_default(adapt_model_t *model);

/**
 * One expert's modelled seconds in mode: tokens[j] from source node j, busy[j] the chance
 * node j sends any (for an observed step: 1 where tokens[j] > 0). owner_node selects the
 * intra tier.
 */
double adapt_model_cost(const adapt_model_t *model, adapt_mode_t mode, int owner_node,
                        int num_nodes, const double *tokens, const double *busy,
                        double row_bytes);

/** The same for an observed step (busy from the counts). */
double adapt_model_step_cost(const adapt_model_t *model, adapt_mode_t mode, int owner_node,
                             int num_nodes, const int32_t *tokens, double row_bytes);

/** The share of a large probe's time its difference from a small one's must reach. */
#define ADAPT_FIT_MIN_SHARE 0.1

/**
 * Calibration: the bandwidth of a link from the median times of a small and a large
 * transfer, into *beta_Bps_p. false (nothing set) where the large one took less than
 * ADAPT_FIT_MIN_SHARE of its time longer than the small one: noise, not a bandwidth.
 */
bool adapt_link_fit_beta(size_t small_bytes, double small_s, size_t large_bytes, double large_s,
                         double *beta_Bps_p);

/* --- Policy ------------------------------------------------------------------------------- */

typedef struct adapt_policy_params {
    adapt_model_t model;
    double        alpha;   /**< statistics: weight of the newest step, (0, 1] */
    double        margin;  /**< switch when the other mode is predicted cheaper by this
                                fraction of the current mode's cost ... */
    double        noise_k; /**< ... plus this many standard deviations of the prediction ... */
    int           dwell;   /**< ... on this many consecutive steps (>= 1) */
    adapt_mode_t  initial; /**< every expert's mode before any statistics */
} adapt_policy_params_t;

typedef struct adapt_policy adapt_policy_t;

/** The default model, alpha 0.7, margin 0, noise_k 5, dwell 2, initial push. */
void adapt_policy_defaults(adapt_policy_params_t *params);
/** STRATA_ERR_INVALID naming the first parameter out of range. */
strata_status_t adapt_policy_check(const adapt_policy_params_t *params, const char *where);

/**
 * A policy for num_experts experts, owner_node[e] being the node of expert e's owner
 * (copied). row_bytes: bytes of one token row.
 */
strata_status_t adapt_policy_create(const adapt_policy_params_t *params, int num_experts,
                                    int num_nodes, const int *owner_node, double row_bytes,
                                    adapt_policy_t **policy_p);
void            adapt_policy_destroy(adapt_policy_t *policy);

/**
 * Fold in one step's tokens[num_experts][num_nodes] and decide each expert's mode for the
 * next step: the other mode is taken when, for dwell steps in a row, it is predicted cheaper
 * by more than margin times the current cost plus noise_k standard deviations.
 */
void         adapt_policy_step(adapt_policy_t *policy, const int32_t *tokens);
adapt_mode_t adapt_policy_mode(const adapt_policy_t *policy, int expert);
/** Mode changes so far. */
uint64_t     adapt_policy_switches(const adapt_policy_t *policy);

/* --- Files (JSON; format in docs/adaptive.md) ---------------------------------------------- */

/**
 * Read a policy file; every error names the file and the key. Only a regular file of at most
 * 16 MiB is read: a FIFO or device is refused at once (STRATA_ERR_IO), a larger file with
 * STRATA_ERR_PARSE; STRATA_ERR_NOT_FOUND when it is missing.
 */
strata_status_t adapt_policy_load(const char *path, adapt_policy_params_t *params_p);
/** The same from text; name is used in messages. */
strata_status_t adapt_policy_parse(const char *text, const char *name,
                                   adapt_policy_params_t *params_p);
strata_status_t adapt_policy_save(const char *path, const adapt_policy_params_t *params);

/** A fixed mode file: bit e of mask (words of 64) set where expert e moves in Pull form.
 *  Read as adapt_policy_load reads a policy file. */
strata_status_t adapt_mask_load(const char *path, int num_experts, uint64_t *mask);

#endif
