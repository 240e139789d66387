/*
 * The owner's decider for a MoE object in adaptive mode: a policy over this rank's experts,
 * fed each step with the rows they received from each node, its model from a policy file
 * or the defaults, optionally measured on this machine (STRATA_ADAPTIVE_CALIBRATE); and
 * the modes every MoE object starts with (adapt_moe_start), whatever its mode.
 */
#include "adapt_moe.h"

#include <stdlib.h>
#include <string.h>

typedef struct adapt_config {
    char *policy;
    bool  calibrate;
    char *save;
} adapt_config_t;

static const util_config_field_t adapt_config_fields[] = {
    {.name = "ADAPTIVE_POLICY", .default_value = "",
     .doc = "Adaptive mode: the policy file (docs/adaptive.md); empty: built-in defaults.",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(adapt_config_t, policy)},
    {.name = "ADAPTIVE_CALIBRATE", .default_value = "off",
     .doc = "Adaptive mode: measure the cost model's latency and bandwidth of each tier "
            "when the MoE object is created, instead of taking the policy's.",
     .type = UTIL_CONFIG_BOOL, .offset = offsetof(adapt_config_t, calibrate)},
    {.name = "ADAPTIVE_SAVE", .default_value = "",
     .doc = "Adaptive mode: rank 0 of the MoE object writes the policy it uses (the model "
            "as calibrated, where STRATA_ADAPTIVE_CALIBRATE is on) to this file.",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(adapt_config_t, save)},
};

const util_config_table_t adapt_config_table = {
    .layer       = "adaptive",
    .fields      = adapt_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(adapt_config_fields),
    .struct_size = sizeof(adapt_config_t),
};

#define ADAPT_PROBE_REPS  31
#define ADAPT_PROBE_SMALL 64
#define ADAPT_PROBE_LARGE (1u << 20)

static int adapt_compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* The median time of one probe, in seconds. */
static strata_status_t adapt_probe_time(sched_moe_t *moe, sched_probe_t kind, size_t bytes,
                                        double *seconds_p)
{
    uint64_t ns[ADAPT_PROBE_REPS];
    strata_status_t status = STRATA_OK;

    for (int i = 0; i < ADAPT_PROBE_REPS && status == STRATA_OK; ++i) {
        status = sched_moe_probe(moe, kind, bytes, &ns[i]);
    }
    if (status == STRATA_OK) {
        qsort(ns, ADAPT_PROBE_REPS, sizeof(ns[0]), adapt_compare_u64);
        *seconds_p = (double)ns[ADAPT_PROBE_REPS / 2] * 1e-9;
    }
    return status;
}

/* A link's alpha (a small transfer) and beta (the slope up to a large one); the link is
 * left as it is where the object cannot probe that kind. */
static strata_status_t adapt_fit_link(sched_moe_t *moe, sched_probe_t kind, adapt_link_t *link,
                                      double *small_s_p)
{
    size_t large = UTIL_MIN(sched_moe_probe_max(moe, kind), (size_t)ADAPT_PROBE_LARGE);
    double small_s, large_s;
    strata_status_t status;

    *small_s_p = -1.0;
    if (large < 16 * ADAPT_PROBE_SMALL) {
        return STRATA_OK;
    }
    /* Untimed first: the first transfer to a peer may set up its connection. */
    if ((status = adapt_probe_time(moe, kind, large, &large_s)) != STRATA_OK ||
        (status = adapt_probe_time(moe, kind, ADAPT_PROBE_SMALL, &small_s)) != STRATA_OK ||
        (status = adapt_probe_time(moe, kind, large, &large_s)) != STRATA_OK) {
        return status;
    }
    link->alpha_s = small_s;
    if (!adapt_link_fit_beta(ADAPT_PROBE_SMALL, small_s, large, large_s, &link->beta_Bps)) {
        UTIL_LOG_WARN("adaptive: calibration: a %zu-byte transfer took %.1f us, a %d-byte one "
                      "%.1f us: too close to tell a bandwidth; keeping %.2f GB/s", large,
                      large_s * 1e6, ADAPT_PROBE_SMALL, small_s * 1e6, link->beta_Bps * 1e-9);
    }
    *small_s_p = small_s;
    return STRATA_OK;
}

/*
 * The model measured on this rank: the node's bandwidth from copies, writes and reads to a
 * rank of another node for the network's. The alphas stand for waiting on a source that
 * sends an expert nothing, which strata's kernels do in neither mode: inside the node an
 * expert is complete once its own rows have landed (a counter per expert, Push or Pull),
 * and across nodes the owner waits for the header every source node writes every step,
 * in both modes. So a measured model has no alpha in either mode, and Pull's round trip
 * across nodes (its fetch in round two) is a small read's whole time. What it leaves out:
 * a source pushes its rows in the owners' local expert order, so a Push expert's rows
 * land after the rows of the experts before it, which a Pull expert does not wait for.
 * What cannot be measured keeps the policy's figures.
 */
static strata_status_t adapt_calibrate(sched_moe_t *moe, adapt_model_t *model)
{
    adapt_link_t *intra = model->link[ADAPT_TIER_INTRA], *inter = model->link[ADAPT_TIER_INTER];
    adapt_link_t copy = intra[ADAPT_MODE_PUSH];
    double copy_s, write_s, read_s;
    strata_status_t status;

    if ((status = adapt_fit_link(moe, SCHED_PROBE_COPY, &copy, &copy_s)) != STRATA_OK ||
        (status = adapt_fit_link(moe, SCHED_PROBE_WRITE, &inter[ADAPT_MODE_PUSH], &write_s)) !=
            STRATA_OK ||
        (status = adapt_fit_link(moe, SCHED_PROBE_READ, &inter[ADAPT_MODE_PULL], &read_s)) !=
            STRATA_OK) {
        UTIL_LOG_ERROR("adaptive: calibration failed: %s", strata_status_string(status));
        return status;
    }
    if (copy_s >= 0.0) {
        intra[ADAPT_MODE_PUSH] = (adapt_link_t){.alpha_s = 0.0, .beta_Bps = copy.beta_Bps};
        intra[ADAPT_MODE_PULL] = (adapt_link_t){.alpha_s = 0.0, .beta_Bps = copy.beta_Bps};
    }
    if (write_s >= 0.0) {
        inter[ADAPT_MODE_PUSH].alpha_s = 0.0;
    }
    if (write_s >= 0.0 && read_s >= 0.0) {
        inter[ADAPT_MODE_PULL].alpha_s     = 0.0;
        model->pull_rtt_s[ADAPT_TIER_INTER] = read_s;
    }
    UTIL_LOG_INFO("adaptive: calibrated: intra %.2f GB/s; inter push %.2f GB/s (a small "
                  "write %.2f us), pull %.2f us round trip + %.2f GB/s", intra[0].beta_Bps * 1e-9,
                  inter[0].beta_Bps * 1e-9, write_s * 1e6,
                  model->pull_rtt_s[ADAPT_TIER_INTER] * 1e6, inter[1].beta_Bps * 1e-9);
    return STRATA_OK;
}

typedef struct adapt_decider {
    adapt_policy_t *policy;
    int             num_experts;
} adapt_decider_t;

static void adapt_decider_decide(void *ctx, const int32_t *tokens, bool *pull_p)
{
    adapt_decider_t *decider = ctx;

    adapt_policy_step(decider->policy, tokens);
    for (int e = 0; e < decider->num_experts; ++e) {
        pull_p[e] = adapt_policy_mode(decider->policy, e) == ADAPT_MODE_PULL;
    }
}

static void adapt_decider_destroy(void *ctx)
{
    adapt_decider_t *decider = ctx;

    if (decider != NULL) {
        adapt_policy_destroy(decider->policy);
        free(decider);
    }
}

static const sched_mode_decider_ops_t adapt_decider_ops = {
    .decide  = adapt_decider_decide,
    .destroy = adapt_decider_destroy,
};

/* The policy's parameters: the file given, else STRATA_ADAPTIVE_POLICY's, else the
 * defaults; then the calibrated model if asked for; saved by rank 0 if asked for. */
static strata_status_t adapt_moe_params(sched_moe_t *moe, const char *policy_file,
                                        adapt_policy_params_t *params)
{
    sched_moe_shape_t shape;
    adapt_config_t config;
    strata_status_t status = util_config_read(&adapt_config_table, &config);

    if (status != STRATA_OK) {
        return status;
    }
    if (policy_file == NULL && config.policy[0] != '\0') {
        policy_file = config.policy;
    }
    adapt_policy_defaults(params);
    if (policy_file != NULL) {
        status = adapt_policy_load(policy_file, params);
    }
    if (status == STRATA_OK && config.calibrate) {
        status = adapt_calibrate(moe, &params->model);
    }
    sched_moe_shape(moe, &shape);
    if (status == STRATA_OK && config.save[0] != '\0' && shape.rank == 0) {
        status = adapt_policy_save(config.save, params);
    }
    UTIL_LOG_INFO("adaptive: policy %s%s: alpha %g, margin %g, noise_k %g, dwell %d",
                  policy_file ? policy_file : "defaults",
                  config.calibrate ? ", calibrated" : "", params->alpha, params->margin,
                  params->noise_k, params->dwell);
    util_config_release(&adapt_config_table, &config);
    return status;
}

/*
 * Give moe an adaptive policy for its rank's experts (STRATA_MOE_MODE=adaptive): the policy
 * file named by policy_file, else STRATA_ADAPTIVE_POLICY, else the defaults, with the model
 * measured on this machine when STRATA_ADAPTIVE_CALIBRATE is on. Collective over the
 * object's ranks when calibrating.
 */
static strata_status_t adapt_moe_attach(sched_moe_t *moe, const char *policy_file)
{
    adapt_policy_params_t params;
    sched_moe_shape_t shape;
    adapt_decider_t *decider;
    int *owner_node;
    strata_status_t status;

    sched_moe_shape(moe, &shape);
    status = adapt_moe_params(moe, policy_file, &params);
    if (status != STRATA_OK) {
        return status;
    }
    decider    = calloc(1, sizeof(*decider));
    owner_node = calloc((size_t)shape.num_local_experts, sizeof(int));
    if (decider == NULL || owner_node == NULL) {
        free(decider);
        free(owner_node);
        return STRATA_ERR_NO_MEMORY;
    }
    for (int e = 0; e < shape.num_local_experts; ++e) {
        owner_node[e] = shape.node; /* this rank owns them all */
    }
    decider->num_experts = shape.num_local_experts;
    status = adapt_policy_create(&params, shape.num_local_experts, shape.num_nodes, owner_node,
                                 (double)shape.row_bytes, &decider->policy);
    free(owner_node);
    if (status != STRATA_OK) {
        free(decider);
        return status;
    }
    return sched_moe_set_decider(moe, &adapt_decider_ops, decider,
                                 params.initial == ADAPT_MODE_PULL);
}

/* A fixed mode file's mask, set as both the dispatch and the combine mask. */
static strata_status_t adapt_moe_fix(sched_moe_t *moe, const char *mode_file, int num_experts)
{
    uint64_t *mask = calloc((size_t)(num_experts + 63) / 64, sizeof(uint64_t));
    strata_status_t status;

    if (mask == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = adapt_mask_load(mode_file, num_experts, mask);
    if (status == STRATA_OK) {
        status = sched_moe_set_pull_mask(moe, mask, mask);
    }
    free(mask);
    return status;
}

strata_status_t adapt_moe_start(sched_moe_t *moe, int num_experts)
{
    sched_moe_shape_t shape;

    sched_moe_shape(moe, &shape);
    switch (shape.mode) {
    case STRATA_MOE_MODE_ADAPTIVE: return adapt_moe_attach(moe, shape.mode_file);
    case STRATA_MOE_MODE_FIXED:    return adapt_moe_fix(moe, shape.mode_file, num_experts);
    default:                       return STRATA_OK; /* push or pull: the masks are set */
    }
}
