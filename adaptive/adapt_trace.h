/*
 * Routing traces: how many of each rank's tokens went to each expert, step by step. The text
 * format (docs/adaptive.md "Routing traces"), its reader and writer, a seeded synthetic
 * generator, and the top-k routing a trace's counts stand for.
 */
#ifndef STRATA_ADAPTIVE_ADAPT_TRACE_H
#define STRATA_ADAPTIVE_ADAPT_TRACE_H

#include <strata/strata.h>

#include "util/util_reason.h"

#include <stdint.h>

#define ADAPT_TRACE_VERSION 1   /* the number on a trace's first line */

/** What a trace describes; every step has this shape. */
typedef struct adapt_trace_shape {
    int    experts;        /**< global expert count, a multiple of ranks */
    int    ranks;          /**< source ranks, a multiple of ranks_per_node */
    int    ranks_per_node; /**< ranks of one node */
    int    tokens;         /**< tokens of one rank in one step */
    int    topk;           /**< experts per token, 1..experts */
    double row_bytes;      /**< bytes of one token row */
} adapt_trace_shape_t;

typedef struct adapt_trace {
    adapt_trace_shape_t shape;
    int                  steps;
    int32_t             *counts; /**< [steps][ranks][experts]: tokens of a rank to an expert */
} adapt_trace_t;

/**
 * STRATA_OK, or STRATA_ERR_INVALID with err (UTIL_REASON_LEN) naming the first bad
 * field: sizes out of range, experts not a multiple of ranks, topk above experts...
 */
strata_status_t adapt_trace_shape_check(const adapt_trace_shape_t *shape, char *err);

/**
 * A trace of steps (>= 1) steps with every count zero; free with adapt_trace_destroy.
 * STRATA_ERR_INVALID (err says why) or STRATA_ERR_NO_MEMORY.
 */
strata_status_t adapt_trace_create(const adapt_trace_shape_t *shape, int steps,
                                   adapt_trace_t **trace_p, char *err);
void            adapt_trace_destroy(adapt_trace_t *trace);

/** One rank's counts in one step: [experts]. No range check. */
static inline int32_t *adapt_trace_counts(const adapt_trace_t *trace, int step, int rank)
{
    return trace->counts +
           ((size_t)step * (size_t)trace->shape.ranks + (size_t)rank) *
               (size_t)trace->shape.experts;
}

/**
 * Read a trace file. Every error names the file and line in err: STRATA_ERR_PARSE for text
 * that is not the format, STRATA_ERR_INVALID for values out of range (an unknown expert, a
 * count above tokens, a rank's counts above tokens * topk), STRATA_ERR_NOT_FOUND or
 * STRATA_ERR_IO when the file cannot be read or is not a regular file (a FIFO or device is
 * refused without blocking), STRATA_ERR_NO_MEMORY. A NUL byte, a line above 4 MiB or a file
 * above 4 GiB is STRATA_ERR_PARSE.
 */
strata_status_t adapt_trace_read(const char *path, adapt_trace_t **trace_p, char *err);

/** Write a trace file; STRATA_ERR_IO (err names the file and the system's reason). */
strata_status_t adapt_trace_write(const adapt_trace_t *trace, const char *path, char *err);

/**
 * A top-k routing with these counts: topk_idx[tokens][topk] (int64, -1 in unused slots) for
 * one rank in one step. Expert ids are laid out in order, each repeated by its count, and
 * position p goes to token p % tokens, slot p / tokens; as no count exceeds tokens, no token
 * gets an expert twice. STRATA_ERR_INVALID for a step or rank out of range or counts that
 * break the trace's bounds (possible only in a trace filled by hand).
 */
strata_status_t adapt_trace_topk_idx(const adapt_trace_t *trace, int step, int rank,
                                     int64_t *topk_idx);

/* --- Synthetic traces (adapt_trace_gen.c) ------------------------------------------------- */

/**
 * Each expert's popularity is Zipf over a ranking of the experts: the expert at rank i (from
 * 0) weighs 1 / (i + 1)^zipf_s. Each source rank's tokens each pick topk distinct experts by
 * weight (without replacement).
 */
typedef struct adapt_trace_gen_params {
    adapt_trace_shape_t shape;
    int      steps;
    double   zipf_s;         /**< Zipf exponent, >= 0 (0: uniform) */
    int      drift_period;   /**< every this many steps the ranking drifts; 0: never */
    double   drift_fraction; /**< a drift makes round(fraction * experts / 2) swaps, each of
                                  a rank in the hotter half with any rank, in [0, 1] */
    double   burst_prob;     /**< chance per step of a burst, in [0, 1] */
    int      burst_experts;  /**< experts a burst hits, chosen at random */
    double   burst_factor;   /**< ... whose weight is multiplied by this for the step, >= 1 */
    double   node_jitter;    /**< each source node multiplies each expert's weight by
                                  exp(node_jitter * N(0, 1)), fixed per trace, >= 0 */
    uint64_t seed;
} adapt_trace_gen_params_t;

/** Shape 4 nodes x 8 ranks, 64 experts, 128 tokens, top-8, hidden 7168 in bf16; 400 steps,
 *  Zipf 1.2, drift every 50 steps of a quarter, bursts on 5% of steps, node jitter 0.2. */
void adapt_trace_gen_defaults(adapt_trace_gen_params_t *params);

/**
 * A synthetic trace, the same for the same parameters on every machine. STRATA_ERR_INVALID
 * with err naming the bad parameter, or STRATA_ERR_NO_MEMORY.
 */
strata_status_t adapt_trace_generate(const adapt_trace_gen_params_t *params,
                                     adapt_trace_t **trace_p, char *err);

#endif
