/*
 * The cost model of one expert's step in Push and Pull form, over source nodes on the
 * owner's node (intra tier) and across the network (inter tier).
 */
#include "adapt.h"

#include <math.h>

void adapt_model_default(adapt_model_t *model)
{
    /* NVLink inside the node; a 400 Gb/s NIC between nodes, where a read costs a round trip
     * more than a write. alpha is per source node: the flag of every rank there. */
    *model = (adapt_model_t){
        .link = {
            [ADAPT_TIER_INTRA] = {[ADAPT_MODE_PUSH] = {.alpha_s = 3e-6, .beta_Bps = 150e9},
                                  [ADAPT_MODE_PULL] = {.alpha_s = 2e-6, .beta_Bps = 120e9}},
            [ADAPT_TIER_INTER] = {[ADAPT_MODE_PUSH] = {.alpha_s = 5e-6, .beta_Bps = 45e9},
                                  [ADAPT_MODE_PULL] = {.alpha_s = 4e-6, .beta_Bps = 40e9}},
        },
        .pull_rtt_s = {[ADAPT_TIER_INTRA] = 1e-6, [ADAPT_TIER_INTER] = 6e-6},
    };
}

/* One source node's part of an expert's step. */
static double adapt_node_cost(const adapt_model_t *model, adapt_mode_t mode, adapt_tier_t tier,
                              double tokens, double busy, double row_bytes)
{
    const adapt_link_t *link = &model->link[tier][mode];
    double transfer = tokens * row_bytes / link->beta_Bps;

    if (mode == ADAPT_MODE_PUSH) {
        return link->alpha_s + transfer; /* the node's flags are waited on, tokens or not */
    }
    return busy * (link->alpha_s + model->pull_rtt_s[tier]) + transfer;
}

static adapt_tier_t adapt_tier(int owner_node, int node)
{
    return node == owner_node ? ADAPT_TIER_INTRA : ADAPT_TIER_INTER;
}

double adapt_model_cost(const adapt_model_t *model, adapt_mode_t mode, int owner_node,
                        int num_nodes, const double *tokens, const double *busy,
                        double row_bytes)
{
    double seconds = 0.0;

    for (int j = 0; j < num_nodes; ++j) {
        seconds += adapt_node_cost(model, mode, adapt_tier(owner_node, j), tokens[j], busy[j],
                                   row_bytes);
    }
    return seconds;
}

double adapt_model_step_cost(const adapt_model_t *model, adapt_mode_t mode, int owner_node,
                             int num_nodes, const int32_t *tokens, double row_bytes)
{
    double seconds = 0.0;

    for (int j = 0; j < num_nodes; ++j) {
        seconds += adapt_node_cost(model, mode, adapt_tier(owner_node, j), (double)tokens[j],
                                   tokens[j] > 0 ? 1.0 : 0.0, row_bytes);
    }
    return seconds;
}

bool adapt_link_fit_beta(size_t small_bytes, double small_s, size_t large_bytes, double large_s,
                         double *beta_Bps_p)
{
    double slope_s = large_s - small_s;

    /* Below a tenth of the large transfer's time, the difference is the probes' noise (a
     * busy machine's scheduling delays both alike), and its inverse no bandwidth. */
    if (!(large_bytes > small_bytes) || !(slope_s >= ADAPT_FIT_MIN_SHARE * large_s) ||
        !isfinite(slope_s)) {
        return false;
    }
    *beta_Bps_p = (double)(large_bytes - small_bytes) / slope_s;
    return true;
}
