/*
 * strata-tune scale: the modelled dispatch and combine of one MoE step for a list of job
 * sizes and token counts, per route and combine mode (docs/adaptive.md, "scale").
 */
#include "strata_tune_scale.h"
#include "tool_cli.h"

#include <strata/strata.h>

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCALE_TOOL     "strata-tune"
#define SCALE_MAX_LIST 16
#define SCALE_EXIT_OK    0
#define SCALE_EXIT_FAIL  1 /* a file could not be read or the topology has no GPU or NIC */
#define SCALE_EXIT_USAGE 2

typedef struct scale_list {
    int values[SCALE_MAX_LIST];
    int count;
} scale_list_t;

/* The command's options. */
typedef struct scale_opts {
    const char  *topology; /* a file, "live", or NULL */
    const char  *policy;
    int          ranks_per_node;
    int          nics_per_node;
    double       nic_gbps; /* 0: the policy's inter bandwidth */
    scale_list_t ep, tokens, dtypes;
    int          hidden, topk, experts, combine_bytes, spec_tokens;
    double       capacity_factor; /* capacity: this times an expert's mean load; 0: the most */
} scale_opts_t;

/* What the table is printed from. */
typedef struct scale_setup {
    tune_scale_fabric_t fabric;
    int                 ranks_per_node;
    char                fabric_from[TOPO_PATH_LEN + 32];
} scale_setup_t;

enum {
    OPT_TOPOLOGY = 256, OPT_POLICY, OPT_RANKS_PER_NODE, OPT_NICS_PER_NODE, OPT_NIC_GBPS, OPT_EP,
    OPT_TOKENS, OPT_DTYPE, OPT_COMBINE_DTYPE, OPT_HIDDEN, OPT_TOPK, OPT_EXPERTS, OPT_SPEC,
    OPT_CAPACITY_FACTOR
};

static void scale_usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-tune scale [options]\n"
            "The modelled dispatch and combine of one MoE step, per route and combine mode,\n"
            "for each job size and token count: uniform routing, expected counts, alpha-beta\n"
            "links (docs/adaptive.md, \"scale\"). Modelled, not measured.\n"
            "  --topology FILE|live  ranks (GPUs) per node and the rail plan from a topology\n"
            "                     file or this machine\n"
            "  --ranks-per-node L (8)  --nics-per-node N (L)  without --topology\n"
            "  --nic-gbps G       a NIC's rate in Gb/s (default: the policy's inter Push beta)\n"
            "  --policy FILE      alpha-beta figures from a policy file (default: built in)\n"
            "  --ep LIST (8,16,32,64,256)  --tokens LIST (128,4096)  per rank\n"
            "  --dtype LIST (bf16)  dispatch rows: bf16, fp8  --combine-dtype bf16|fp16|fp32\n"
            "  --hidden H (7168)  --topk K (8)  --experts E (256)  --spec-tokens N (32)\n"
            "  --capacity-factor F (2)  the memory columns' capacity: F x an expert's mean\n"
            "                     load (tokens x EP x topk / experts); 0: the most it can get\n"
            "                     (GiB: the worst-case exchange per combine, and the streamed\n"
            "                     one with exact combine)\n"
            "Exit status: 0 printed, 1 a file could not be read or has no GPU or NIC,\n"
            "2 bad usage.\n");
}

/* A comma-separated list of integers in [min, max], or of dtype names when names is set. */
static bool scale_parse_list(const char *option, const char *text, long min, long max,
                             bool names, scale_list_t *list_p)
{
    char copy[256], *save = NULL;
    scale_list_t list = {.count = 0};

    if (strlen(text) >= sizeof(copy) || text[0] == '\0') {
        tool_usage_error(SCALE_TOOL, "scale: %s '%s': give a comma-separated list", option, text);
        return false;
    }
    strcpy(copy, text);
    for (char *item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        int value;

        if (list.count == SCALE_MAX_LIST) {
            tool_usage_error(SCALE_TOOL, "scale: %s: more than %d values", option, SCALE_MAX_LIST);
            return false;
        }
        if (names) {
            value = strcmp(item, "bf16") == 0 ? 2 : strcmp(item, "fp8") == 0 ? 1 : 0;
            if (value == 0) {
                tool_usage_error(SCALE_TOOL, "scale: %s '%s' is not bf16 or fp8", option, item);
                return false;
            }
        } else if (!tool_parse_int(SCALE_TOOL, option, item, min, max, &value)) {
            return false;
        }
        list.values[list.count++] = value;
    }
    if (list.count == 0) {
        tool_usage_error(SCALE_TOOL, "scale: %s '%s': give a comma-separated list", option, text);
        return false;
    }
    *list_p = list;
    return true;
}

static bool scale_parse_combine_dtype(const char *text, int *bytes_p)
{
    int bytes = strcmp(text, "bf16") == 0 || strcmp(text, "fp16") == 0 ? 2
                : strcmp(text, "fp32") == 0                            ? 4
                                                                       : 0;

    if (bytes == 0) {
        tool_usage_error(SCALE_TOOL, "scale: --combine-dtype '%s' is not bf16, fp16 or fp32",
                         text);
        return false;
    }
    *bytes_p = bytes;
    return true;
}

static bool scale_option(int opt, const char *arg, scale_opts_t *o)
{
    switch (opt) {
    case OPT_TOPOLOGY:       o->topology = arg; return true;
    case OPT_POLICY:         o->policy = arg; return true;
    case OPT_RANKS_PER_NODE: return tool_parse_int(SCALE_TOOL, "--ranks-per-node", arg, 1, 4096,
                                                   &o->ranks_per_node);
    case OPT_NICS_PER_NODE:  return tool_parse_int(SCALE_TOOL, "--nics-per-node", arg, 1, 4096,
                                                   &o->nics_per_node);
    case OPT_NIC_GBPS:       return tool_parse_double(SCALE_TOOL, "--nic-gbps", arg, 1e-3, 1e6,
                                                      &o->nic_gbps);
    case OPT_EP:             return scale_parse_list("--ep", arg, 1, 1 << 20, false, &o->ep);
    case OPT_TOKENS:         return scale_parse_list("--tokens", arg, 1, 1 << 24, false,
                                                     &o->tokens);
    case OPT_DTYPE:          return scale_parse_list("--dtype", arg, 0, 0, true, &o->dtypes);
    case OPT_COMBINE_DTYPE:  return scale_parse_combine_dtype(arg, &o->combine_bytes);
    case OPT_HIDDEN:         return tool_parse_int(SCALE_TOOL, "--hidden", arg, 1, 1 << 20,
                                                   &o->hidden);
    case OPT_TOPK:           return tool_parse_int(SCALE_TOOL, "--topk", arg, 1, 32, &o->topk);
    case OPT_EXPERTS:        return tool_parse_int(SCALE_TOOL, "--experts", arg, 1, 1 << 20,
                                                   &o->experts);
    case OPT_SPEC:           return tool_parse_int(SCALE_TOOL, "--spec-tokens", arg, 0, 1 << 24,
                                                   &o->spec_tokens);
    case OPT_CAPACITY_FACTOR:
        return tool_parse_double(SCALE_TOOL, "--capacity-factor", arg, 0.0, 1e6,
                                 &o->capacity_factor);
    default:                 return false;
    }
}

/* Options into o; an exit code when they are not usable (or help was asked), else -1. */
static int scale_parse(int argc, char **argv, scale_opts_t *o)
{
    static const struct option options[] = {
        {"topology", required_argument, NULL, OPT_TOPOLOGY},
        {"policy", required_argument, NULL, OPT_POLICY},
        {"ranks-per-node", required_argument, NULL, OPT_RANKS_PER_NODE},
        {"nics-per-node", required_argument, NULL, OPT_NICS_PER_NODE},
        {"nic-gbps", required_argument, NULL, OPT_NIC_GBPS},
        {"ep", required_argument, NULL, OPT_EP},
        {"tokens", required_argument, NULL, OPT_TOKENS},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"combine-dtype", required_argument, NULL, OPT_COMBINE_DTYPE},
        {"hidden", required_argument, NULL, OPT_HIDDEN},
        {"topk", required_argument, NULL, OPT_TOPK},
        {"experts", required_argument, NULL, OPT_EXPERTS},
        {"spec-tokens", required_argument, NULL, OPT_SPEC},
        {"capacity-factor", required_argument, NULL, OPT_CAPACITY_FACTOR},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;

    *o = (scale_opts_t){
        .ep = {.values = {8, 16, 32, 64, 256}, .count = 5},
        .tokens = {.values = {128, 4096}, .count = 2},
        .dtypes = {.values = {2}, .count = 1},
        .hidden = 7168, .topk = 8, .experts = 256, .combine_bytes = 2, .spec_tokens = 32,
        .capacity_factor = 2.0,
    };
    while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (opt == 'h') {
            scale_usage(stdout);
            return SCALE_EXIT_OK;
        }
        if (opt == '?' || opt == ':') {
            return tool_option_error(SCALE_TOOL, argv, options, opt);
        }
        if (!scale_option(opt, optarg, o)) {
            return SCALE_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        return tool_usage_error(SCALE_TOOL, "scale: unexpected argument '%s'", argv[optind]);
    }
    if (o->topology != NULL && (o->ranks_per_node > 0 || o->nics_per_node > 0)) {
        return tool_usage_error(SCALE_TOOL, "scale: --topology gives the ranks and NICs per "
                                "node: drop --ranks-per-node and --nics-per-node");
    }
    return -1;
}

/* Ranks per node and the busiest NIC's load from the topology; false after saying why. */
static bool scale_from_topology(const char *name, int *ranks_p, double *load_p)
{
    char err[UTIL_REASON_LEN];
    topo_rail_plan_t *plan = NULL;
    strata_status_t status;
    const char *what = strcmp(name, "live") == 0 ? "this machine" : name;
    topo_t *topo;
    bool ok = false;

    status = strcmp(name, "live") == 0 ? topo_discover(NULL, &topo, err)
                                       : topo_load_file(name, &topo, err);
    if (status != STRATA_OK) {
        fprintf(stderr, "strata-tune: scale: %s\n", err);
        return false;
    }
    if (topo_num_gpus(topo) == 0) {
        fprintf(stderr, "strata-tune: scale: %s has no GPU: give --ranks-per-node and "
                "--nics-per-node instead\n", what);
    } else if (topo_rail_plan_create(topo, &plan) != STRATA_OK) {
        fprintf(stderr, "strata-tune: scale: %s: no rail plan (out of memory)\n", name);
    } else if (tune_scale_nic_load(plan, topo_num_nics(topo), load_p) != STRATA_OK) {
        fprintf(stderr, "strata-tune: scale: %s: out of memory\n", name);
    } else if (*load_p <= 0.0) {
        fprintf(stderr, "strata-tune: scale: %s has no NIC on any GPU's rails: give "
                "--ranks-per-node and --nics-per-node instead\n", what);
    } else {
        *ranks_p = topo_num_gpus(topo);
        ok = true;
    }
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
    return ok;
}

static int scale_setup(const scale_opts_t *o, scale_setup_t *setup)
{
    adapt_policy_params_t params;
    double load;

    if (o->policy != NULL) {
        if (adapt_policy_load(o->policy, &params) != STRATA_OK) {
            fprintf(stderr, "strata-tune: scale: cannot use the policy file %s\n", o->policy);
            return SCALE_EXIT_FAIL;
        }
    } else {
        adapt_policy_defaults(&params);
    }
    if (o->topology != NULL) {
        if (!scale_from_topology(o->topology, &setup->ranks_per_node, &load)) {
            return SCALE_EXIT_FAIL;
        }
        snprintf(setup->fabric_from, sizeof(setup->fabric_from), "topology %s", o->topology);
    } else {
        setup->ranks_per_node = o->ranks_per_node > 0 ? o->ranks_per_node : 8;
        load = (double)setup->ranks_per_node /
               (o->nics_per_node > 0 ? o->nics_per_node : setup->ranks_per_node);
        snprintf(setup->fabric_from, sizeof(setup->fabric_from), "given");
    }
    tune_scale_fabric_from_model(&params.model, load, &setup->fabric);
    if (o->nic_gbps > 0.0) {
        setup->fabric.nic_Bps = o->nic_gbps * 1e9 / 8.0;
    }
    return -1;
}

static void scale_print_header(const scale_opts_t *o, const scale_setup_t *setup)
{
    const tune_scale_fabric_t *f = &setup->fabric;

    printf("# strata-tune scale: MODELLED, not measured. Uniform routing (expected counts), "
           "every expert Push.\n");
    printf("# fabric (%s): %d ranks per node; the busiest NIC carries %.2f ranks' traffic at "
           "%.1f GB/s (%s)\n", setup->fabric_from, setup->ranks_per_node, f->nic_load,
           f->nic_Bps / 1e9, o->nic_gbps > 0.0 ? "--nic-gbps" : "policy inter push beta");
    printf("# links (policy %s): intra %.1f GB/s; one-way trip %.2f us across nodes, %.2f us "
           "inside\n", o->policy != NULL ? o->policy : "built in", f->intra_Bps / 1e9,
           f->inter_lat_s * 1e6, f->intra_lat_s * 1e6);
    printf("# shape: hidden %d, top-%d of %d experts, combine rows %d bytes per element, "
           "round one %d entries per peer\n", o->hidden, o->topk, o->experts, o->combine_bytes,
           o->spec_tokens);
    printf("# MB: 10^6 bytes per NIC per step, one way. GiB: memory per rank, from the "
           "library's sizing function\n# (strata_moe_memory_estimate; not modelled), capacity "
           "%g x an expert's mean load%s;\n# the worst-case exchange, and the streamed one "
           "with exact combine and the default\n# window (STRATA_MOE_WINDOW_BYTES).\n",
           o->capacity_factor, o->capacity_factor > 0.0 ? "" : " (0: the most it can receive)");
}

/* The memory columns' objects take round one as the model does: the library reads it from
 * STRATA_MOE_SPEC_TOKENS. */
static void scale_set_round_one(int spec_tokens)
{
    char text[16];

    snprintf(text, sizeof(text), "%d", spec_tokens);
    setenv("STRATA_MOE_SPEC_TOKENS", text, 1);
}

/* The bytes per rank an object of this shape allocates, in GiB; -1 where it cannot be made
 * (node-reduce on the flat route, a shape past the library's range). */
static double scale_memory(const scale_opts_t *o, const tune_scale_shape_t *shape,
                           tune_route_t route, int combine, strata_moe_exchange_t exchange)
{
    strata_moe_params_t p = {
        .num_experts = shape->experts, .topk = shape->topk, .hidden = shape->hidden,
        .dtype = shape->dispatch_bytes == 1 ? STRATA_DTYPE_FP8_E4M3 : STRATA_DTYPE_BF16,
        .combine_dtype = shape->combine_bytes == 4 ? STRATA_DTYPE_FP32 : STRATA_DTYPE_BF16,
        .max_tokens = shape->tokens,
        .route = route == TUNE_ROUTE_FLAT ? STRATA_MOE_ROUTE_FLAT : STRATA_MOE_ROUTE_HIERARCHICAL,
        .combine = combine == TUNE_COMBINE_EXACT ? STRATA_MOE_COMBINE_EXACT
                                                 : STRATA_MOE_COMBINE_NODE_REDUCE,
        .exchange = exchange,
    };
    strata_moe_memory_t m;

    if (strata_moe_load_capacity(&p, shape->world, o->capacity_factor, &p.capacity) ==
            STRATA_OK &&
        p.capacity == 0) { /* factor 0: the most, which the streamed default is not */
        long long most = (long long)shape->tokens * shape->world;

        p.capacity = most > INT_MAX ? INT_MAX : (int)most;
    }
    if (p.capacity == 0 ||
        strata_moe_memory_estimate(&p, shape->world, shape->world / shape->ranks_per_node,
                                   &m) != STRATA_OK) {
        return -1.0;
    }
    return (double)m.total / (1024.0 * 1024.0 * 1024.0);
}

static void scale_print_gib(double gib)
{
    if (gib >= 0.0) {
        printf(" | %.2f", gib);
    } else {
        printf(" | -");
    }
}

static void scale_print_row(const scale_opts_t *o, const tune_scale_shape_t *shape,
                            tune_route_t route, const tune_scale_result_t *r)
{
    printf("| %d | %d | %s | %.1f | %.1f | %.2f", shape->world, r->nodes, tune_route_names[route],
           r->entries_per_peer, r->dispatch_s * 1e6, r->dispatch_nic_bytes / 1e6);
    for (int c = 0; c < TUNE_COMBINES; ++c) {
        if (r->combine_ok[c]) {
            printf(" | %.1f | %.2f", r->combine_s[c] * 1e6, r->combine_nic_bytes[c] / 1e6);
        } else {
            printf(" | - | -");
        }
    }
    for (int c = 0; c < TUNE_COMBINES; ++c) {
        scale_print_gib(r->combine_ok[c]
                            ? scale_memory(o, shape, route, c, STRATA_MOE_EXCHANGE_WORST_CASE)
                            : -1.0);
    }
    scale_print_gib(scale_memory(o, shape, route, TUNE_COMBINE_EXACT,
                                 STRATA_MOE_EXCHANGE_STREAMED));
    printf(" |\n");
}

/* One table: every EP size (checked by scale_check_all), both routes. */
static void scale_print_table(const scale_opts_t *o, const scale_setup_t *setup, int tokens,
                              int dispatch_bytes)
{
    tune_scale_shape_t shape = {
        .ranks_per_node = setup->ranks_per_node, .experts = o->experts, .topk = o->topk,
        .tokens = tokens, .hidden = o->hidden, .dispatch_bytes = dispatch_bytes,
        .combine_bytes = o->combine_bytes, .spec_tokens = o->spec_tokens,
    };

    printf("\n## %d tokens per rank, dispatch %s (entry %.0f bytes)\n\n", tokens,
           dispatch_bytes == 1 ? "fp8" : "bf16", tune_scale_entry_bytes(&shape));
    printf("| EP | nodes | route | entries/peer | dispatch us | dispatch MB/NIC | exact us | "
           "exact MB/NIC | node-reduce us | node-reduce MB/NIC | exact GiB | node-reduce GiB | "
           "streamed GiB |\n");
    printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < o->ep.count; ++i) {
        shape.world = o->ep.values[i];
        for (int route = 0; route < TUNE_ROUTES; ++route) {
            tune_scale_result_t r;

            tune_scale_model(&shape, &setup->fabric, (tune_route_t)route, &r);
            scale_print_row(o, &shape, (tune_route_t)route, &r);
        }
    }
}

/* Every shape is checked before anything is printed. */
static bool scale_check_all(const scale_opts_t *o, int ranks_per_node)
{
    char err[TUNE_SCALE_ERR_LEN];

    for (int d = 0; d < o->dtypes.count; ++d) {
        for (int i = 0; i < o->ep.count; ++i) {
            tune_scale_shape_t shape = {
                .world = o->ep.values[i], .ranks_per_node = ranks_per_node,
                .experts = o->experts, .topk = o->topk, .tokens = 1, .hidden = o->hidden,
                .dispatch_bytes = o->dtypes.values[d], .combine_bytes = o->combine_bytes,
                .spec_tokens = o->spec_tokens,
            };

            if (!tune_scale_check(&shape, err)) {
                tool_usage_error(SCALE_TOOL, "scale: %s", err);
                return false;
            }
        }
    }
    return true;
}

int tune_scale_main(int argc, char **argv)
{
    scale_setup_t setup;
    scale_opts_t opts;
    int code = scale_parse(argc, argv, &opts);

    if (code >= 0) {
        return code;
    }
    if ((code = scale_setup(&opts, &setup)) >= 0) {
        return code;
    }
    if (!scale_check_all(&opts, setup.ranks_per_node)) {
        return SCALE_EXIT_USAGE;
    }
    scale_set_round_one(opts.spec_tokens);
    scale_print_header(&opts, &setup);
    for (int d = 0; d < opts.dtypes.count; ++d) {
        for (int t = 0; t < opts.tokens.count; ++t) {
            scale_print_table(&opts, &setup, opts.tokens.values[t], opts.dtypes.values[d]);
        }
    }
    return fflush(stdout) == 0 ? SCALE_EXIT_OK : SCALE_EXIT_FAIL;
}
