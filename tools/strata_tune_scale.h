/*
 * strata-tune scale: the modelled cost of one MoE step's dispatch and combine at a job size
 * no one has run, from the route's expected counts under uniform routing, the fabric (ranks
 * and NICs per node, the rail plan) and the adaptive layer's alpha-beta link figures.
 * Pure functions (strata_tune_scale_model.c); the command is strata_tune_scale.c.
 */
#ifndef STRATA_TOOLS_STRATA_TUNE_SCALE_H
#define STRATA_TOOLS_STRATA_TUNE_SCALE_H

#include "adaptive/adapt.h"
#include "topo/topo.h"

#include <stdbool.h>

#define TUNE_SCALE_ERR_LEN 160

typedef enum tune_route {
    TUNE_ROUTE_FLAT, /* a token once per remote rank holding any of its experts */
    TUNE_ROUTE_HIER, /* a token once per remote node, forwarded inside the node */
    TUNE_ROUTES
} tune_route_t;

typedef enum tune_combine {
    TUNE_COMBINE_EXACT,       /* one row back per (token, expert on a remote node) term */
    TUNE_COMBINE_NODE_REDUCE, /* one partial row back per (token, remote node); hier only */
    TUNE_COMBINES
} tune_combine_t;

extern const char *const tune_route_names[TUNE_ROUTES];
extern const char *const tune_combine_names[TUNE_COMBINES];

/** One job: its size and the layer's shape. */
typedef struct tune_scale_shape {
    int world;          /* ranks (EP size) */
    int ranks_per_node; /* L; a world below L is one node of world ranks */
    int experts;        /* E, a multiple of world */
    int topk;           /* k <= E */
    int tokens;         /* per rank and step */
    int hidden;
    int dispatch_bytes; /* bytes per element: 2 bf16, 1 fp8 (with per-128-column scales) */
    int combine_bytes;  /* bytes per element of the returned rows */
    int spec_tokens;    /* round one's entries per peer (STRATA_MOE_SPEC_TOKENS) */
} tune_scale_shape_t;

/** What the links can do. */
typedef struct tune_scale_fabric {
    double nic_Bps;   /* one NIC's bandwidth */
    double nic_load;  /* ranks' worth of traffic on the node's busiest NIC (rail plan) */
    double intra_Bps; /* inside the node */
    double inter_lat_s; /* one one-way trip across nodes */
    double intra_lat_s; /* one flag inside the node */
} tune_scale_fabric_t;

/** Expected figures per rank and step, and the modelled times. */
typedef struct tune_scale_result {
    int    nodes;
    double peers;            /* remote peers the rank exchanges entries with */
    double entries_per_peer; /* tokens sent to one peer */
    double entries;          /* tokens sent across nodes */
    double remote_terms;     /* (token, expert on another node) pairs */
    int    dispatch_trips;   /* one-way trips across nodes: 0, 1, or 3 with round two */
    double dispatch_nic_bytes;
    double dispatch_s;
    bool   combine_ok[TUNE_COMBINES]; /* node-reduce runs on the hierarchical route only */
    double combine_nic_bytes[TUNE_COMBINES];
    double combine_s[TUNE_COMBINES];
} tune_scale_result_t;

/** The chance that a token's k distinct uniform experts of E include one of a given e:
 *  1 - C(E - e, k) / C(E, k). */
double tune_scale_p_any(int experts, int e, int k);

/**
 * The chance that at least one of peers needs round two: that of tokens, each sent to a
 * given peer with chance p, more than spec go to it (a binomial tail), for any of them.
 */
double tune_scale_round_two_chance(int tokens, double p, int spec, double peers);

/** Bytes of one dispatched entry: the record, the row, fp8's scales (scheduler's sizes). */
double tune_scale_entry_bytes(const tune_scale_shape_t *shape);

/** false, with one line in err (TUNE_SCALE_ERR_LEN), when shape cannot be modelled. */
bool tune_scale_check(const tune_scale_shape_t *shape, char *err);

/**
 * The fabric from the policy's model: intra and inter Push bandwidths (the inter one is one
 * NIC's), one-way trips of half of Pull's round trips; nic_load as given.
 */
void tune_scale_fabric_from_model(const adapt_model_t *model, double nic_load,
                                  tune_scale_fabric_t *fabric_p);

/**
 * The busiest NIC's load in ranks' worth of traffic, each GPU striping over its rails
 * evenly, into *load_p: 0 when no GPU has a rail. STRATA_ERR_NO_MEMORY.
 */
strata_status_t tune_scale_nic_load(const topo_rail_plan_t *plan, int num_nics,
                                    double *load_p);

/** Model one route for a shape tune_scale_check accepted. */
void tune_scale_model(const tune_scale_shape_t *shape, const tune_scale_fabric_t *fabric,
                      tune_route_t route, tune_scale_result_t *result_p);

/** strata-tune scale ARGS (argv[0] is "scale"): the command's exit code. */
int tune_scale_main(int argc, char **argv);

#endif
