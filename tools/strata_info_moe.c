/*
 * strata-info --moe-memory: what a MoE object of a given shape would allocate on each rank,
 * part by part, from strata_moe_memory_estimate (the function the object's creation sizes
 * itself with). Creates nothing and needs no peers.
 */
#include "strata_info.h"
#include "tool_cli.h"

#include <strata/strata.h>

#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define INFO_TOOL "strata-info"

enum {
    OPT_WORLD = 256, OPT_NODES, OPT_MAX_TOKENS, OPT_HIDDEN, OPT_TOPK, OPT_EXPERTS, OPT_CAPACITY,
    OPT_ALIGNMENT, OPT_DTYPE, OPT_COMBINE_DTYPE, OPT_ROUTE, OPT_COMBINE, OPT_CAPACITY_FACTOR,
    OPT_EXCHANGE, OPT_RECEIVE
};

/* What the options say besides the params. */
typedef struct info_moe_shape {
    int    world, nodes;
    double capacity_factor; /* 0: not given */
} info_moe_shape_t;

static const char *const info_dtype_names[] = {"bf16", "fp16", "fp32", "fp8", NULL};
static const char *const info_route_names[] = {"auto", "flat", "hierarchical", NULL};
static const char *const info_combine_names[] = {"auto", "exact", "node-reduce", NULL};
static const char *const info_exchange_names[] = {"auto", "worst-case", "streamed", NULL};
/* --receive's names: blocks (the default, 0) or exact */
static const char *const info_receive_names[] = {"blocks", "", "exact", NULL};

void info_moe_memory_usage(FILE *out)
{
    fprintf(out,
            "       strata-info --moe-memory --world W --nodes N --max-tokens T --hidden H\n"
            "                   --topk K --experts E [--capacity C | --capacity-factor F]\n"
            "                   [--alignment A]\n"
            "                   [--dtype D] [--combine-dtype D] [--route R] [--combine M]\n"
            "                   [--exchange X] [--receive blocks|exact]\n"
            "  --moe-memory   (first) the bytes each rank of a MoE object of this shape would\n"
            "                 allocate, by part, and 'total: N bytes' last. W ranks spread evenly\n"
            "                 over N nodes; capacity 0 (the default): STRATA_MOE_CAPACITY_FACTOR\n"
            "                 x an expert's mean load (auto: 2 on the streamed exchange; on the\n"
            "                 worst-case one the most one expert can receive); F: the capacity\n"
            "                 is F x an expert's mean load (max-tokens x topk / experts x W), as\n"
            "                 the variable would make it;\n"
            "                 D: bf16 (default), fp16, fp32, fp8 (tokens only);\n"
            "                 R: auto (default: STRATA_MOE_ROUTE), flat, hierarchical;\n"
            "                 M: auto (default: STRATA_MOE_COMBINE), exact, node-reduce;\n"
            "                 X: auto (default: STRATA_MOE_EXCHANGE, whose auto streams\n"
            "                 with --receive exact), worst-case, streamed (its areas sized\n"
            "                 by STRATA_MOE_WINDOW_BYTES);\n"
            "                 --receive exact: rows into the caller's buffers, no experts'\n"
            "                 blocks (dispatch_recv_into; no capacity applies)\n");
}

/* The index of text in names, or a usage error. */
static bool info_parse_name(const char *option, const char *text, const char *const *names,
                            int *value_p)
{
    for (int i = 0; names[i] != NULL; ++i) {
        if (strcmp(text, names[i]) == 0) {
            *value_p = i;
            return true;
        }
    }
    tool_usage_error(INFO_TOOL, "%s: '%s' is not one of the names it takes", option, text);
    return false;
}

/* One option's value into the params; false after a usage error. */
static bool info_moe_option(int opt, const char *arg, strata_moe_params_t *p,
                            info_moe_shape_t *s)
{
    int value = 0;

    switch (opt) {
    case OPT_WORLD: return tool_parse_int(INFO_TOOL, "--world", arg, 1, INT_MAX, &s->world);
    case OPT_NODES: return tool_parse_int(INFO_TOOL, "--nodes", arg, 1, INT_MAX, &s->nodes);
    case OPT_CAPACITY_FACTOR:
        return tool_parse_double(INFO_TOOL, "--capacity-factor", arg, 1e-6, 1e6,
                                 &s->capacity_factor);
    case OPT_MAX_TOKENS:
        return tool_parse_int(INFO_TOOL, "--max-tokens", arg, 1, INT_MAX, &p->max_tokens);
    case OPT_HIDDEN: return tool_parse_int(INFO_TOOL, "--hidden", arg, 1, INT_MAX, &p->hidden);
    case OPT_TOPK: return tool_parse_int(INFO_TOOL, "--topk", arg, 1, 32, &p->topk);
    case OPT_EXPERTS:
        return tool_parse_int(INFO_TOOL, "--experts", arg, 1, INT_MAX, &p->num_experts);
    case OPT_CAPACITY:
        return tool_parse_int(INFO_TOOL, "--capacity", arg, 0, INT_MAX, &p->capacity);
    case OPT_ALIGNMENT:
        return tool_parse_int(INFO_TOOL, "--alignment", arg, 0, INT_MAX, &p->expert_alignment);
    case OPT_DTYPE:
    case OPT_COMBINE_DTYPE:
        if (!info_parse_name(opt == OPT_DTYPE ? "--dtype" : "--combine-dtype", arg,
                             info_dtype_names, &value)) {
            return false;
        }
        *(opt == OPT_DTYPE ? &p->dtype : &p->combine_dtype) = (strata_dtype_t)value;
        return true;
    case OPT_ROUTE:
        if (!info_parse_name("--route", arg, info_route_names, &value)) {
            return false;
        }
        p->route = (strata_moe_route_t)value;
        return true;
    case OPT_RECEIVE:
        if (!info_parse_name("--receive", arg, info_receive_names, &value)) {
            return false;
        }
        p->receive = (strata_moe_receive_t)value;
        return true;
    case OPT_EXCHANGE:
        if (!info_parse_name("--exchange", arg, info_exchange_names, &value)) {
            return false;
        }
        p->exchange = (strata_moe_exchange_t)value;
        return true;
    default: /* OPT_COMBINE */
        if (!info_parse_name("--combine", arg, info_combine_names, &value)) {
            return false;
        }
        p->combine = (strata_moe_combine_t)value;
        return true;
    }
}

static void info_moe_line(const char *name, uint64_t bytes)
{
    printf("  %-14s %15" PRIu64 " bytes  %10.1f MiB\n", name, bytes,
           (double)bytes / (1024.0 * 1024.0));
}

/* What capacity 0 gives: STRATA_MOE_CAPACITY_FACTOR's, whose default (auto) depends on the
 * exchange. */
static void info_default_capacity(const strata_moe_params_t *p, char *text, size_t size)
{
    const char *factor = getenv("STRATA_MOE_CAPACITY_FACTOR");

    if ((factor != NULL && strcasecmp(factor, "auto") != 0) ||
        p->exchange == STRATA_MOE_EXCHANGE_DEFAULT) {
        snprintf(text, size, " (as STRATA_MOE_CAPACITY_FACTOR and the exchange say)");
    } else if (p->exchange == STRATA_MOE_EXCHANGE_STREAMED) {
        snprintf(text, size, " (%g x an expert's mean load, the streamed exchange's)",
                 STRATA_MOE_STREAMED_CAPACITY_FACTOR);
    } else {
        snprintf(text, size, " (the most an expert can receive)");
    }
}

static void info_moe_print(const strata_moe_params_t *p, const info_moe_shape_t *s,
                           const strata_moe_memory_t *m)
{
    char capacity[96] = "";

    if (p->receive == STRATA_MOE_RECEIVE_EXACT) {
        snprintf(capacity, sizeof(capacity), " (none: the exact receive)");
    } else if (s->capacity_factor > 0.0) {
        snprintf(capacity, sizeof(capacity), " (%g x an expert's mean load)",
                 s->capacity_factor);
    } else if (p->capacity == 0) {
        info_default_capacity(p, capacity, sizeof(capacity));
    }
    printf("moe memory per rank: %d ranks on %d nodes, %d tokens, hidden %d, %s -> %s, "
           "top-%d of %d experts, capacity %d%s, route %s, combine %s, exchange %s%s\n",
           s->world, s->nodes, p->max_tokens, p->hidden, info_dtype_names[p->dtype],
           info_dtype_names[p->combine_dtype], p->topk, p->num_experts, p->capacity,
           capacity, info_route_names[p->route], info_combine_names[p->combine],
           info_exchange_names[p->exchange],
           p->receive == STRATA_MOE_RECEIVE_EXACT ? ", receive exact" : "");
    info_moe_line("expert rows", m->expert_rows);
    info_moe_line("node rows", m->node_rows);
    info_moe_line("net headers", m->net_headers);
    info_moe_line("net round one", m->net_round_one);
    info_moe_line("net round two", m->net_round_two);
    info_moe_line("net staging", m->net_staging);
    info_moe_line("net returns", m->net_returns);
    info_moe_line("work ring", m->work_ring);
    info_moe_line("tables", m->tables);
    printf("  %-14s %15" PRIu64 " bytes  %10.1f MiB outside the expert rows\n", "other",
           m->total - m->expert_rows, (double)(m->total - m->expert_rows) / (1024.0 * 1024.0));
    printf("total: %" PRIu64 " bytes\n", m->total);
}

int info_moe_memory(int argc, char **argv)
{
    static const struct option options[] = {
        {"world", required_argument, NULL, OPT_WORLD},
        {"nodes", required_argument, NULL, OPT_NODES},
        {"max-tokens", required_argument, NULL, OPT_MAX_TOKENS},
        {"hidden", required_argument, NULL, OPT_HIDDEN},
        {"topk", required_argument, NULL, OPT_TOPK},
        {"experts", required_argument, NULL, OPT_EXPERTS},
        {"capacity", required_argument, NULL, OPT_CAPACITY},
        {"alignment", required_argument, NULL, OPT_ALIGNMENT},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"combine-dtype", required_argument, NULL, OPT_COMBINE_DTYPE},
        {"route", required_argument, NULL, OPT_ROUTE},
        {"combine", required_argument, NULL, OPT_COMBINE},
        {"capacity-factor", required_argument, NULL, OPT_CAPACITY_FACTOR},
        {"exchange", required_argument, NULL, OPT_EXCHANGE},
        {"receive", required_argument, NULL, OPT_RECEIVE},
        {NULL, 0, NULL, 0},
    };
    strata_moe_params_t p = {.dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16};
    info_moe_shape_t s = {0};
    strata_moe_memory_t m;
    int opt;

    optind = 1; /* argv[0] is --moe-memory */
    while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        if (opt == '?' || opt == ':') {
            return tool_option_error(INFO_TOOL, argv, options, opt);
        }
        if (!info_moe_option(opt, optarg, &p, &s)) {
            return TOOL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        return tool_usage_error(INFO_TOOL, "unexpected argument '%s'", argv[optind]);
    }
    if (s.world == 0 || s.nodes == 0 || p.max_tokens == 0 || p.hidden == 0 || p.topk == 0 ||
        p.num_experts == 0) {
        return tool_usage_error(INFO_TOOL, "--moe-memory needs --world, --nodes, --max-tokens, "
                                "--hidden, --topk and --experts");
    }
    if (s.capacity_factor > 0.0 && p.capacity > 0) {
        return tool_usage_error(INFO_TOOL, "--capacity and --capacity-factor: give one");
    }
    if ((s.capacity_factor > 0.0 &&
         strata_moe_load_capacity(&p, s.world, s.capacity_factor, &p.capacity) != STRATA_OK) ||
        strata_moe_memory_estimate(&p, s.world, s.nodes, &m) != STRATA_OK) {
        fprintf(stderr, "strata-info: no MoE object of this shape can be made (see above)\n");
        return 1;
    }
    info_moe_print(&p, &s, &m);
    return 0;
}
