/*
 * The scale model of strata-tune scale (docs/adaptive.md, "scale"): expected entries,
 * terms and bytes of one rank's step under uniform routing, and their alpha-beta time.
 */
#include "strata_tune_scale.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The scheduler's sizes (scheduler/sched_geometry.c): a record of the token index and its
 * expert ids, rounded to 16 bytes; fp8 carries one fp32 scale per 128 columns. */
#define TUNE_SCALE_ALIGN       16
#define TUNE_SCALE_FP8_COLUMNS 128
#define TUNE_SCALE_WEIGHT_BYTES 4 /* node-reduce sends each token's top-k weights in fp32 */

const char *const tune_route_names[TUNE_ROUTES] = {
    [TUNE_ROUTE_FLAT] = "flat",
    [TUNE_ROUTE_HIER] = "hier",
};

const char *const tune_combine_names[TUNE_COMBINES] = {
    [TUNE_COMBINE_EXACT]       = "exact",
    [TUNE_COMBINE_NODE_REDUCE] = "node-reduce",
};

double tune_scale_round_two_chance(int tokens, double p, int spec, double peers)
{
    double over = 0.0;

    if (p <= 0.0 || spec >= tokens) {
        return 0.0;
    }
    if (p >= 1.0) {
        return 1.0;
    }
    for (int n = spec + 1; n <= tokens; ++n) { /* P(X = n), through logs: tokens reach 4096 */
        over += exp(lgamma(tokens + 1.0) - lgamma(n + 1.0) - lgamma(tokens - n + 1.0) +
                    n * log(p) + (tokens - n) * log1p(-p));
    }
    return 1.0 - pow(1.0 - fmin(over, 1.0), peers);
}

static double tune_scale_round16(double bytes)
{
    return ceil(bytes / TUNE_SCALE_ALIGN) * TUNE_SCALE_ALIGN;
}

double tune_scale_p_any(int experts, int e, int k)
{
    /* C(E - e, k) / C(E, k) = prod over i < k of (E - e - i) / (E - i): none of the k
     * draws without replacement falls among the e. */
    double none = 1.0;

    for (int i = 0; i < k && none > 0.0; ++i) {
        double left = (double)(experts - e - i);

        none *= left > 0.0 ? left / (double)(experts - i) : 0.0;
    }
    return 1.0 - none;
}

double tune_scale_entry_bytes(const tune_scale_shape_t *shape)
{
    double record = tune_scale_round16(4.0 * (1.0 + shape->topk));
    double row    = (double)shape->hidden * shape->dispatch_bytes;
    double scales = shape->dispatch_bytes == 1
                        ? tune_scale_round16(4.0 * (shape->hidden / TUNE_SCALE_FP8_COLUMNS))
                        : 0.0;

    return record + row + scales;
}

static int tune_scale_local(const tune_scale_shape_t *shape)
{
    return shape->world < shape->ranks_per_node ? shape->world : shape->ranks_per_node;
}

bool tune_scale_check(const tune_scale_shape_t *s, char *err)
{
    const char *bad = NULL;
    char what[TUNE_SCALE_ERR_LEN];

    if (s->world < 1 || s->ranks_per_node < 1 || s->tokens < 1 || s->hidden < 1 ||
        s->topk < 1 || s->spec_tokens < 0) {
        bad = "every size must be positive";
    } else if (s->world % tune_scale_local(s) != 0) {
        snprintf(what, sizeof(what), "EP %d is not a whole number of %d-rank nodes", s->world,
                 s->ranks_per_node);
        bad = what;
    } else if (s->experts % s->world != 0) {
        snprintf(what, sizeof(what), "%d experts do not divide among EP %d ranks", s->experts,
                 s->world);
        bad = what;
    } else if (s->topk > s->experts) {
        snprintf(what, sizeof(what), "top-%d of %d experts", s->topk, s->experts);
        bad = what;
    } else if (s->dispatch_bytes == 1 && s->hidden % TUNE_SCALE_FP8_COLUMNS != 0) {
        snprintf(what, sizeof(what), "fp8 needs a hidden size that is a multiple of %d, not %d",
                 TUNE_SCALE_FP8_COLUMNS, s->hidden);
        bad = what;
    }
    if (bad != NULL) {
        snprintf(err, TUNE_SCALE_ERR_LEN, "%s", bad);
    }
    return bad == NULL;
}

void tune_scale_fabric_from_model(const adapt_model_t *model, double nic_load,
                                  tune_scale_fabric_t *fabric_p)
{
    /* The Push links are what a step moves its rows with. The policy's alpha prices an
     * owner's wait per source node and expert, which the kernels do not have (a header per
     * peer is waited for in every mode); a trip's latency is half a measured round trip. */
    *fabric_p = (tune_scale_fabric_t){
        .nic_Bps     = model->link[ADAPT_TIER_INTER][ADAPT_MODE_PUSH].beta_Bps,
        .nic_load    = nic_load,
        .intra_Bps   = model->link[ADAPT_TIER_INTRA][ADAPT_MODE_PUSH].beta_Bps,
        .inter_lat_s = model->pull_rtt_s[ADAPT_TIER_INTER] / 2.0,
        .intra_lat_s = model->pull_rtt_s[ADAPT_TIER_INTRA] / 2.0,
    };
}

strata_status_t tune_scale_nic_load(const topo_rail_plan_t *plan, int num_nics,
                                    double *load_p)
{
    double *load = calloc((size_t)(num_nics > 0 ? num_nics : 1), sizeof(double));
    double busiest = 0.0;

    if (load == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int g = 0; g < plan->num_gpus; ++g) {
        const topo_rail_t *rail = &plan->rails[g];

        for (int i = 0; i < rail->num_rails; ++i) {
            int nic = rail->nics[i];

            if (nic >= 0 && nic < num_nics) {
                load[nic] += 1.0 / rail->num_rails;
                busiest = fmax(busiest, load[nic]);
            }
        }
    }
    free(load);
    *load_p = busiest;
    return STRATA_OK;
}

/* Entries: the route's peers and the tokens each of them gets. */
static void tune_scale_entries(const tune_scale_shape_t *s, tune_route_t route, int local,
                               tune_scale_result_t *r)
{
    int own = route == TUNE_ROUTE_FLAT ? s->experts / s->world /* one rank's experts */
                                       : s->experts / r->nodes; /* one node's */

    r->peers            = route == TUNE_ROUTE_FLAT ? (double)(s->world - local) : r->nodes - 1;
    r->entries_per_peer =
        r->nodes == 1 ? 0.0 : s->tokens * tune_scale_p_any(s->experts, own, s->topk);
    r->entries          = r->peers * r->entries_per_peer;
    r->remote_terms     = (double)s->tokens * s->topk * (r->nodes - 1) / r->nodes;
    /* The step waits for every peer, and any peer with more than round one's entries
     * takes round two (a grant back, then the rest): its two trips count when that is more
     * likely than not for some peer, not only when the mean exceeds round one. */
    r->dispatch_trips =
        r->nodes == 1 ? 0
        : tune_scale_round_two_chance(s->tokens, r->entries_per_peer / s->tokens, s->spec_tokens,
                                      r->peers) > 0.5 ? 3 : 1;
}

void tune_scale_model(const tune_scale_shape_t *s, const tune_scale_fabric_t *f,
                      tune_route_t route, tune_scale_result_t *result_p)
{
    int local = tune_scale_local(s);
    double terms = (double)s->tokens * s->topk; /* rows a rank's node writes for it */
    double row   = (double)s->hidden * s->dispatch_bytes;
    double y_row = (double)s->hidden * s->combine_bytes;
    tune_scale_result_t r = {.nodes = s->world / local};
    double trip = r.nodes > 1 ? f->inter_lat_s : 0.0;
    double intra_disp = f->intra_lat_s + terms * row / f->intra_Bps;
    double intra_comb = f->intra_lat_s + terms * y_row / f->intra_Bps;

    tune_scale_entries(s, route, local, &r);
    r.dispatch_nic_bytes = r.entries * tune_scale_entry_bytes(s) * f->nic_load;
    r.dispatch_s = r.dispatch_trips * f->inter_lat_s + r.dispatch_nic_bytes / f->nic_Bps +
                   intra_disp;

    r.combine_ok[TUNE_COMBINE_EXACT]        = true;
    r.combine_nic_bytes[TUNE_COMBINE_EXACT] = r.remote_terms * y_row * f->nic_load;
    r.combine_s[TUNE_COMBINE_EXACT] =
        intra_comb + trip + r.combine_nic_bytes[TUNE_COMBINE_EXACT] / f->nic_Bps;

    /* Node-reduce: the weights go out (one trip), then one partial row per entry comes back. */
    r.combine_ok[TUNE_COMBINE_NODE_REDUCE] = route == TUNE_ROUTE_HIER;
    if (route == TUNE_ROUTE_HIER) {
        double bytes = r.entries * ((double)s->topk * TUNE_SCALE_WEIGHT_BYTES + y_row);

        r.combine_nic_bytes[TUNE_COMBINE_NODE_REDUCE] = bytes * f->nic_load;
        r.combine_s[TUNE_COMBINE_NODE_REDUCE] =
            intra_comb + 2.0 * trip + bytes * f->nic_load / f->nic_Bps;
    }
    *result_p = r;
}
