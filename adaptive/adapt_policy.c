/*
 * The per-expert policy: predicted cost of each mode for the next step from the statistics,
 * and a switch only when the other mode's gain clears a margin plus the prediction's noise
 * for dwell steps in a row, so stationary noise never makes an expert flap.
 */
#include "adapt.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct adapt_expert_state {
    adapt_mode_t mode;
    int          streak; /* consecutive steps the other mode has been clearly cheaper */
} adapt_expert_state_t;

struct adapt_policy {
    adapt_policy_params_t params;
    int                   num_experts;
    int                   num_nodes;
    double                row_bytes;
    int                  *owner_node; /* [num_experts] */
    adapt_stats_t        *stats;
    adapt_expert_state_t *state;      /* [num_experts] */
    double               *tokens;     /* [num_nodes] scratch: predicted tokens */
    double               *busy;       /* [num_nodes] scratch: predicted chance of any */
    uint64_t              switches;
};

void adapt_policy_defaults(adapt_policy_params_t *params)
{
    /* What `strata-tune replay --synthetic --sweep` chooses for the default model
     * (docs/performance.md). */
    *params = (adapt_policy_params_t){.alpha = 0.7, .margin = 0.0, .noise_k = 5.0, .dwell = 2,
                                      .initial = ADAPT_MODE_PUSH};
    adapt_model_default(&params->model);
}

static bool adapt_positive(double x)
{
    return isfinite(x) && x > 0.0;
}

static bool adapt_not_negative(double x)
{
    return isfinite(x) && x >= 0.0;
}

static strata_status_t adapt_bad(const char *where, const char *what, double value,
                                 const char *need)
{
    UTIL_LOG_ERROR("adaptive: %s: %s is %g; it must be %s", where, what, value, need);
    return STRATA_ERR_INVALID;
}

strata_status_t adapt_policy_check(const adapt_policy_params_t *p, const char *where)
{
    static const char *const tier_names[] = {"intra", "inter"};
    static const char *const mode_names[] = {"push", "pull"};
    char what[64];

    for (int t = 0; t < ADAPT_TIERS; ++t) {
        for (int m = 0; m < ADAPT_MODES; ++m) {
            const adapt_link_t *link = &p->model.link[t][m];

            snprintf(what, sizeof(what), "%s %s alpha", tier_names[t], mode_names[m]);
            if (!adapt_not_negative(link->alpha_s)) {
                return adapt_bad(where, what, link->alpha_s, "a time >= 0");
            }
            snprintf(what, sizeof(what), "%s %s beta", tier_names[t], mode_names[m]);
            if (!adapt_positive(link->beta_Bps)) {
                return adapt_bad(where, what, link->beta_Bps, "a bandwidth > 0");
            }
        }
        snprintf(what, sizeof(what), "%s pull round trip", tier_names[t]);
        if (!adapt_not_negative(p->model.pull_rtt_s[t])) {
            return adapt_bad(where, what, p->model.pull_rtt_s[t], "a time >= 0");
        }
    }
    if (!(p->alpha > 0.0 && p->alpha <= 1.0)) {
        return adapt_bad(where, "alpha", p->alpha, "in (0, 1]");
    }
    if (!adapt_not_negative(p->margin)) {
        return adapt_bad(where, "margin", p->margin, ">= 0");
    }
    if (!adapt_not_negative(p->noise_k)) {
        return adapt_bad(where, "noise_k", p->noise_k, ">= 0");
    }
    if (p->dwell < 1 || p->dwell > 1000000) {
        return adapt_bad(where, "dwell", p->dwell, "a whole number of steps in 1..1000000");
    }
    if (p->initial != ADAPT_MODE_PUSH && p->initial != ADAPT_MODE_PULL) {
        return adapt_bad(where, "initial mode", p->initial, "push or pull");
    }
    return STRATA_OK;
}

strata_status_t adapt_policy_create(const adapt_policy_params_t *params, int num_experts,
                                    int num_nodes, const int *owner_node, double row_bytes,
                                    adapt_policy_t **policy_p)
{
    adapt_policy_t *policy;
    strata_status_t status = adapt_policy_check(params, "policy");

    if (status != STRATA_OK) {
        return status;
    }
    policy = calloc(1, sizeof(*policy));
    if (policy == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = adapt_stats_create(num_experts, num_nodes, params->alpha, row_bytes,
                                &policy->stats);
    if (status != STRATA_OK) {
        free(policy);
        return status;
    }
    policy->params      = *params;
    policy->num_experts = num_experts;
    policy->num_nodes   = num_nodes;
    policy->row_bytes   = row_bytes;
    policy->owner_node  = calloc((size_t)num_experts, sizeof(int));
    policy->state       = calloc((size_t)num_experts, sizeof(*policy->state));
    policy->tokens      = calloc((size_t)num_nodes, sizeof(double));
    policy->busy        = calloc((size_t)num_nodes, sizeof(double));
    if (!policy->owner_node || !policy->state || !policy->tokens || !policy->busy) {
        adapt_policy_destroy(policy);
        return STRATA_ERR_NO_MEMORY;
    }
    for (int e = 0; e < num_experts; ++e) {
        if (owner_node[e] < 0 || owner_node[e] >= num_nodes) {
            UTIL_LOG_ERROR("adaptive: expert %d's owner is on node %d of %d", e, owner_node[e],
                           num_nodes);
            adapt_policy_destroy(policy);
            return STRATA_ERR_INVALID;
        }
        policy->owner_node[e]  = owner_node[e];
        policy->state[e].mode = params->initial;
    }
    *policy_p = policy;
    return STRATA_OK;
}

void adapt_policy_destroy(adapt_policy_t *policy)
{
    if (policy == NULL) {
        return;
    }
    adapt_stats_destroy(policy->stats);
    free(policy->owner_node);
    free(policy->state);
    free(policy->tokens);
    free(policy->busy);
    free(policy);
}

/*
 * The standard deviation of one step's cost difference between the modes (Push less Pull),
 * node by node: a x - b B with x the node's tokens, B whether it sends any (Bernoulli p),
 * a the per-token difference of the transfer terms and b Pull's fetch cost. Since B = 1
 * wherever x > 0, Cov(x, B) = E[x] (1 - p).
 */
static double adapt_noise(const adapt_policy_t *policy, int expert)
{
    const adapt_model_t *m = &policy->params.model;
    double var = 0.0;

    for (int j = 0; j < policy->num_nodes; ++j) {
        const adapt_cell_t *c = adapt_stats_cell(policy->stats, expert, j);
        adapt_tier_t tier = j == policy->owner_node[expert] ? ADAPT_TIER_INTRA : ADAPT_TIER_INTER;
        double a = policy->row_bytes * (1.0 / m->link[tier][ADAPT_MODE_PUSH].beta_Bps -
                                        1.0 / m->link[tier][ADAPT_MODE_PULL].beta_Bps);
        double b = m->link[tier][ADAPT_MODE_PULL].alpha_s + m->pull_rtt_s[tier];

        var += a * a * c->var + b * b * c->busy * (1.0 - c->busy) -
               2.0 * a * b * c->mean * (1.0 - c->busy);
    }
    return var > 0.0 ? sqrt(var) : 0.0; /* the weighted estimates need not be consistent */
}

static void adapt_policy_decide(adapt_policy_t *policy, int expert)
{
    adapt_expert_state_t *s = &policy->state[expert];
    const adapt_policy_params_t *p = &policy->params;
    adapt_mode_t other = s->mode == ADAPT_MODE_PUSH ? ADAPT_MODE_PULL : ADAPT_MODE_PUSH;
    double current, alternative;

    for (int j = 0; j < policy->num_nodes; ++j) {
        const adapt_cell_t *c = adapt_stats_cell(policy->stats, expert, j);

        policy->tokens[j] = c->mean;
        policy->busy[j]   = c->busy;
    }
    current = adapt_model_cost(&p->model, s->mode, policy->owner_node[expert], policy->num_nodes,
                               policy->tokens, policy->busy, policy->row_bytes);
    alternative = adapt_model_cost(&p->model, other, policy->owner_node[expert],
                                   policy->num_nodes, policy->tokens, policy->busy,
                                   policy->row_bytes);
    if (current - alternative > p->margin * current + p->noise_k * adapt_noise(policy, expert)) {
        s->streak += 1;
    } else {
        s->streak = 0;
    }
    if (s->streak >= p->dwell) {
        s->mode   = other;
        s->streak = 0;
        policy->switches += 1;
    }
}

void adapt_policy_step(adapt_policy_t *policy, const int32_t *tokens)
{
    adapt_stats_update(policy->stats, tokens);
    for (int e = 0; e < policy->num_experts; ++e) {
        adapt_policy_decide(policy, e);
    }
}

adapt_mode_t adapt_policy_mode(const adapt_policy_t *policy, int expert)
{
    return policy->state[expert].mode;
}

uint64_t adapt_policy_switches(const adapt_policy_t *policy)
{
    return policy->switches;
}
