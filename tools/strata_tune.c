/*
 * strata-tune: routing traces for the adaptive layer (docs/adaptive.md "strata-tune").
 *
 *   strata-tune generate [options] -o FILE       a synthetic routing trace
 *   strata-tune replay [TRACE...] [options]      push, pull, adaptive and oracle through the
 *                                                cost model; sweep, check, SVG
 *   strata-tune scale [options]                  modelled dispatch and combine at EP8..EP256
 *                                                (strata_tune_scale.c)
 */
#include "strata_tune.h"
#include "strata_tune_scale.h"
#include "util/util.h"
#include "tool_cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exit codes (docs/adaptive.md). */
enum {
    EXIT_TUNE_OK       = 0,
    EXIT_TUNE_FAIL     = 1, /* a file could not be read or written, or --check failed */
    EXIT_TUNE_USAGE    = 2,
    EXIT_TUNE_INTERNAL = 3  /* out of memory */
};

#define TUNE_TOOL         "strata-tune"
#define TUNE_CHECK_SLACK  1e-9 /* relative, for float rounding */
#define TUNE_BF16_BYTES   2

/* The --synthetic suite (docs/adaptive.md). */
static const int    tune_suite_experts[] = {8, 16, 32, 64, 128, 256};
static const double tune_suite_zipf[]    = {0.8, 1.2, 1.6};
static const int    tune_suite_tokens[]  = {16, 128}; /* per rank: decode, prefill */
#define TUNE_SUITE_NODES   4
#define TUNE_SUITE_HIDDEN  7168
#define TUNE_SUITE_STEPS   400
#define TUNE_SUITE_SEED    0x5eed2024u

/* Options of replay. */
typedef struct tune_replay_opts {
    const char *policy;
    const char *out_policy;
    const char *svg;
    int         svg_trace;
    bool        synthetic;
    int         steps; /* of the synthetic traces */
    bool        sweep;
    bool        sweep_small;
    bool        check;
    bool        progress; /* --progress: the line even where stderr is no terminal */
    char      **traces;
    int         num_traces;
} tune_replay_opts_t;

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-tune generate [options] -o FILE\n"
            "       strata-tune replay [TRACE...] [options]\n"
            "       strata-tune scale [options]   (strata-tune scale --help)\n"
            "Routing traces through the adaptive layer's cost model (docs/adaptive.md).\n"
            "\n"
            "generate: write a synthetic routing trace\n"
            "  --experts E (64)  --ranks R (32)  --ranks-per-node L (8)  --tokens T (128)\n"
            "  --topk K (8)  --hidden H (7168, bf16 rows) or --row-bytes B\n"
            "  --zipf s (1.2)  --drift-period N (50, 0: none)  --drift-fraction f (0.25)\n"
            "  --burst-prob p (0.05)  --steps N (400)  --seed S (1)  -o, --output FILE\n"
            "\n"
            "replay: model every step under push, pull, adaptive and oracle; print a table\n"
            "  --synthetic       the standard suite instead of TRACE files\n"
            "  --steps N         steps of each synthetic trace (%d)\n"
            "  --policy FILE     policy parameters (default: the built-in ones)\n"
            "  --sweep           choose alpha, margin, noise_k and dwell on a grid\n"
            "  --sweep-small     the same on a 16-point grid\n"
            "  --out-policy FILE write the parameters used as a policy file\n"
            "  --svg FILE        draw a trace's replay; --svg-trace N picks it (0)\n"
            "  --check           fail unless adaptive beats push and pull and is within\n"
            "                    10%% of the oracle at p50 and p99 on every trace\n"
            "  --progress        the progress line on stderr (how far the traces and the\n"
            "                    sweep are) even where stderr is no terminal\n"
            "\n"
            "  -h, --help     this text (also after a subcommand)\n"
            "  -V, --version  strata's version and build options\n"
            "Exit status: 0 done, 1 a file could not be read or written or --check failed,\n"
            "2 bad usage, 3 internal error.\n",
            TUNE_SUITE_STEPS);
}

static bool parse_int(const char *option, const char *text, long min, long max, int *value_p)
{
    return tool_parse_int(TUNE_TOOL, option, text, min, max, value_p);
}

static bool parse_double(const char *option, const char *text, double min, double max,
                         double *value_p)
{
    return tool_parse_double(TUNE_TOOL, option, text, min, max, value_p);
}

static bool parse_seed(const char *text, uint64_t *seed_p)
{
    return tool_parse_u64(TUNE_TOOL, "--seed", text, 0, UINT64_MAX, seed_p);
}

/* --- generate ---------------------------------------------------------------------------- */

enum {
    OPT_EXPERTS = 256, OPT_RANKS, OPT_RANKS_PER_NODE, OPT_TOKENS, OPT_TOPK, OPT_HIDDEN,
    OPT_ROW_BYTES, OPT_ZIPF, OPT_DRIFT_PERIOD, OPT_DRIFT_FRACTION, OPT_BURST_PROB, OPT_STEPS,
    OPT_SEED, OPT_SYNTHETIC, OPT_POLICY, OPT_SWEEP, OPT_SWEEP_SMALL, OPT_OUT_POLICY, OPT_SVG,
    OPT_SVG_TRACE, OPT_CHECK, OPT_PROGRESS
};

/* One option of generate into params; false on a bad value. */
static bool generate_option(int opt, const char *arg, adapt_trace_gen_params_t *p,
                            int *hidden_p, double *row_bytes_p)
{
    adapt_trace_shape_t *s = &p->shape;

    switch (opt) {
    case OPT_EXPERTS:        return parse_int("--experts", arg, 1, INT_MAX, &s->experts);
    case OPT_RANKS:          return parse_int("--ranks", arg, 1, INT_MAX, &s->ranks);
    case OPT_RANKS_PER_NODE: return parse_int("--ranks-per-node", arg, 1, INT_MAX,
                                              &s->ranks_per_node);
    case OPT_TOKENS:         return parse_int("--tokens", arg, 1, INT_MAX, &s->tokens);
    case OPT_TOPK:           return parse_int("--topk", arg, 1, INT_MAX, &s->topk);
    case OPT_HIDDEN:         return parse_int("--hidden", arg, 1, INT_MAX, hidden_p);
    case OPT_ROW_BYTES:      return parse_double("--row-bytes", arg, 1.0, 1e12, row_bytes_p);
    case OPT_ZIPF:           return parse_double("--zipf", arg, 0.0, 16.0, &p->zipf_s);
    case OPT_DRIFT_PERIOD:   return parse_int("--drift-period", arg, 0, INT_MAX,
                                              &p->drift_period);
    case OPT_DRIFT_FRACTION: return parse_double("--drift-fraction", arg, 0.0, 1.0,
                                                 &p->drift_fraction);
    case OPT_BURST_PROB:     return parse_double("--burst-prob", arg, 0.0, 1.0, &p->burst_prob);
    case OPT_STEPS:          return parse_int("--steps", arg, 1, INT_MAX, &p->steps);
    case OPT_SEED:           return parse_seed(arg, &p->seed);
    default:                 return false;
    }
}

static int generate_main(int argc, char **argv)
{
    static const struct option options[] = {
        {"experts", required_argument, NULL, OPT_EXPERTS},
        {"ranks", required_argument, NULL, OPT_RANKS},
        {"ranks-per-node", required_argument, NULL, OPT_RANKS_PER_NODE},
        {"tokens", required_argument, NULL, OPT_TOKENS},
        {"topk", required_argument, NULL, OPT_TOPK},
        {"hidden", required_argument, NULL, OPT_HIDDEN},
        {"row-bytes", required_argument, NULL, OPT_ROW_BYTES},
        {"zipf", required_argument, NULL, OPT_ZIPF},
        {"drift-period", required_argument, NULL, OPT_DRIFT_PERIOD},
        {"drift-fraction", required_argument, NULL, OPT_DRIFT_FRACTION},
        {"burst-prob", required_argument, NULL, OPT_BURST_PROB},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char err[UTIL_REASON_LEN];
    adapt_trace_gen_params_t params;
    double row_bytes = 0.0;
    const char *output = NULL;
    adapt_trace_t *trace;
    strata_status_t status;
    int hidden = 0, opt;

    adapt_trace_gen_defaults(&params);
    while ((opt = getopt_long(argc, argv, ":o:h", options, NULL)) != -1) {
        if (opt == 'o') {
            output = optarg;
        } else if (opt == 'h') {
            usage(stdout);
            return EXIT_TUNE_OK;
        } else if (opt == '?' || opt == ':') {
            return tool_option_error(TUNE_TOOL, argv, options, opt);
        } else if (!generate_option(opt, optarg, &params, &hidden, &row_bytes)) {
            return EXIT_TUNE_USAGE;
        }
    }
    if (optind < argc) {
        return tool_usage_error(TUNE_TOOL, "generate: unexpected argument '%s'",
                                argv[optind]);
    }
    if (output == NULL) {
        return tool_usage_error(TUNE_TOOL, "generate: no output file: give -o FILE");
    }
    if (hidden > 0 && row_bytes > 0.0) {
        return tool_usage_error(TUNE_TOOL, "generate: give --hidden or --row-bytes, not both");
    }
    if (hidden > 0 || row_bytes > 0.0) {
        params.shape.row_bytes = hidden > 0 ? (double)hidden * TUNE_BF16_BYTES : row_bytes;
    }
    params.burst_experts = params.shape.experts >= 16 ? params.shape.experts / 16 : 1;

    status = adapt_trace_generate(&params, &trace, err);
    if (status == STRATA_ERR_INVALID) {
        return tool_usage_error(TUNE_TOOL, "generate: %s", err);
    }
    if (status == STRATA_OK) {
        status = adapt_trace_write(trace, output, err);
        adapt_trace_destroy(trace);
    }
    if (status != STRATA_OK) {
        fprintf(stderr, "strata-tune: %s\n", err);
        return status == STRATA_ERR_NO_MEMORY ? EXIT_TUNE_INTERNAL : EXIT_TUNE_FAIL;
    }
    return EXIT_TUNE_OK;
}

/* --- replay: the cases ------------------------------------------------------------------- */

static void destroy_cases(tune_case_t **cases, int num_cases)
{
    for (int i = 0; i < num_cases; ++i) {
        tune_case_destroy(cases[i]);
    }
    free(cases);
}

/* One synthetic trace of the suite: 4 nodes, experts E, Zipf s. */
static strata_status_t synthetic_case(int experts, double zipf, int tokens, int steps,
                                      uint64_t seed, const adapt_model_t *model,
                                      tool_progress_t *progress, tune_case_t **case_p)
{
    char err[UTIL_REASON_LEN], name[TUNE_NAME_LEN];
    adapt_trace_gen_params_t params;
    adapt_trace_t *trace;
    strata_status_t status;
    int per_node = experts / 4 < 8 ? experts / 4 : 8;

    adapt_trace_gen_defaults(&params);
    params.shape = (adapt_trace_shape_t){
        .experts        = experts,
        .ranks          = TUNE_SUITE_NODES * per_node,
        .ranks_per_node = per_node,
        .tokens         = tokens,
        .topk           = per_node, /* min(8, E/4), as ranks_per_node */
        .row_bytes      = TUNE_SUITE_HIDDEN * TUNE_BF16_BYTES,
    };
    params.steps         = steps;
    params.zipf_s        = zipf;
    params.burst_experts = experts >= 16 ? experts / 16 : 1;
    params.seed          = seed;
    status = adapt_trace_generate(&params, &trace, err);
    if (status != STRATA_OK) {
        tool_progress_end(progress);
        fprintf(stderr, "strata-tune: synthetic trace E=%d s=%g: %s\n", experts, zipf, err);
        return status;
    }
    snprintf(name, sizeof(name), "synthetic E=%d s=%.1f T=%d", experts, zipf, tokens);
    status = tune_case_create(trace, name, model, case_p);
    adapt_trace_destroy(trace);
    return status;
}

static strata_status_t synthetic_cases(int steps, const adapt_model_t *model,
                                       tool_progress_t *progress, tune_case_t **cases,
                                       int *num_cases_p)
{
    int total = (int)(UTIL_ARRAY_SIZE(tune_suite_tokens) * UTIL_ARRAY_SIZE(tune_suite_experts) *
                      UTIL_ARRAY_SIZE(tune_suite_zipf));
    int n = 0;

    for (size_t t = 0; t < UTIL_ARRAY_SIZE(tune_suite_tokens); ++t) {
        for (size_t i = 0; i < UTIL_ARRAY_SIZE(tune_suite_experts); ++i) {
            for (size_t j = 0; j < UTIL_ARRAY_SIZE(tune_suite_zipf); ++j) {
                strata_status_t status;

                tool_progress_update(progress, "synthetic traces %d/%d", n, total);
                status = synthetic_case(tune_suite_experts[i], tune_suite_zipf[j],
                                        tune_suite_tokens[t], steps,
                                        TUNE_SUITE_SEED + (uint64_t)n, model, progress,
                                        &cases[n]);

                if (status != STRATA_OK) {
                    *num_cases_p = n;
                    return status;
                }
                n++;
            }
        }
    }
    *num_cases_p = n;
    return STRATA_OK;
}

static strata_status_t file_cases(char **paths, int num_paths, const adapt_model_t *model,
                                  tune_case_t **cases, int *num_cases_p)
{
    char err[UTIL_REASON_LEN];
    strata_status_t status = STRATA_OK;
    adapt_trace_t *trace;
    int n;

    for (n = 0; n < num_paths && status == STRATA_OK; ++n) {
        status = adapt_trace_read(paths[n], &trace, err);
        if (status != STRATA_OK) {
            fprintf(stderr, "strata-tune: %s\n", err);
            break;
        }
        status = tune_case_create(trace, paths[n], model, &cases[n]);
        adapt_trace_destroy(trace);
        if (status != STRATA_OK) {
            break;
        }
    }
    *num_cases_p = n;
    return status;
}

/* The synthetic suite or the named files, priced with model; unreadable files are reported. */
static strata_status_t build_cases(const tune_replay_opts_t *opts, const adapt_model_t *model,
                                   tool_progress_t *progress, tune_case_t ***cases_p,
                                   int *num_cases_p)
{
    int capacity = opts->synthetic ? (int)(UTIL_ARRAY_SIZE(tune_suite_experts) *
                                           UTIL_ARRAY_SIZE(tune_suite_zipf) *
                                           UTIL_ARRAY_SIZE(tune_suite_tokens))
                                   : opts->num_traces;
    tune_case_t **cases = calloc((size_t)capacity, sizeof(*cases));
    strata_status_t status;
    int n = 0;

    if (cases == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = opts->synthetic ? synthetic_cases(opts->steps, model, progress, cases, &n)
                             : file_cases(opts->traces, opts->num_traces, model, cases, &n);
    if (status != STRATA_OK) {
        destroy_cases(cases, n);
        return status;
    }
    *cases_p     = cases;
    *num_cases_p = n;
    return STRATA_OK;
}

/* --- replay: output ---------------------------------------------------------------------- */

static void print_params(const char *what, const adapt_policy_params_t *p)
{
    printf("%s: alpha %g, margin %g, noise_k %g, dwell %d, initial %s\n\n", what, p->alpha,
           p->margin, p->noise_k, p->dwell, p->initial == ADAPT_MODE_PUSH ? "push" : "pull");
}

static void print_table(tune_case_t *const *cases, int num_cases)
{
    bool same_steps = true;

    printf("| trace | push p50 | push p99 | pull p50 | pull p99 | adaptive p50 | adaptive p99 "
           "| oracle p50 | oracle p99 | adaptive/oracle p50 | adaptive/oracle p99 | switches |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < num_cases; ++i) {
        const tune_case_t *tc = cases[i];

        printf("| %s (E=%d) |", tc->name, tc->experts);
        for (int s = 0; s < TUNE_STRATEGIES; ++s) {
            printf(" %.2f | %.2f |", tc->p50[s] * 1e6, tc->p99[s] * 1e6);
        }
        printf(" %.3f | %.3f | %llu |\n", tune_ratio(tc->p50[TUNE_ADAPTIVE], tc->p50[TUNE_ORACLE]),
               tune_ratio(tc->p99[TUNE_ADAPTIVE], tc->p99[TUNE_ORACLE]),
               (unsigned long long)tc->switches);
    }
    for (int i = 1; i < num_cases; ++i) {
        same_steps = same_steps && cases[i]->steps == cases[0]->steps;
    }
    printf("\nModelled step latency in µs over every step of each trace");
    if (same_steps) {
        printf(" (%d each)", cases[0]->steps);
    }
    printf("; percentiles by nearest rank.\n");
}

/* One --check rule; prints the failure. */
static bool check_at_most(const tune_case_t *tc, const char *what, double value, double bound,
                          const char *bound_name)
{
    if (value <= bound * (1.0 + TUNE_CHECK_SLACK)) {
        return true;
    }
    printf("check failed: %s: adaptive %s %.3f µs > %s %.3f µs\n", tc->name, what, value * 1e6,
           bound_name, bound * 1e6);
    return false;
}

static bool check_case(const tune_case_t *tc)
{
    const double *p[2] = {tc->p50, tc->p99};
    static const char *const names[2] = {"p50", "p99"};
    bool ok = true;

    for (int i = 0; i < 2; ++i) {
        const char *other = p[i][TUNE_PUSH] <= p[i][TUNE_PULL] ? "push" : "pull";
        double best = p[i][TUNE_PUSH] <= p[i][TUNE_PULL] ? p[i][TUNE_PUSH] : p[i][TUNE_PULL];

        ok = check_at_most(tc, names[i], p[i][TUNE_ADAPTIVE], best, other) && ok;
        ok = check_at_most(tc, names[i], p[i][TUNE_ADAPTIVE], TUNE_CHECK_ORACLE * p[i][TUNE_ORACLE],
                           "1.10 x oracle") && ok;
    }
    return ok;
}

/* --- replay ------------------------------------------------------------------------------ */

static bool replay_option(int opt, const char *arg, tune_replay_opts_t *opts)
{
    switch (opt) {
    case OPT_SYNTHETIC:   opts->synthetic = true; return true;
    case OPT_STEPS:       return parse_int("--steps", arg, 1, 1000000, &opts->steps);
    case OPT_POLICY:      opts->policy = arg; return true;
    case OPT_SWEEP:       opts->sweep = true; return true;
    case OPT_SWEEP_SMALL: opts->sweep = opts->sweep_small = true; return true;
    case OPT_OUT_POLICY:  opts->out_policy = arg; return true;
    case OPT_SVG:         opts->svg = arg; return true;
    case OPT_SVG_TRACE:   return parse_int("--svg-trace", arg, 0, INT_MAX, &opts->svg_trace);
    case OPT_CHECK:       opts->check = true; return true;
    case OPT_PROGRESS:    opts->progress = true; return true;
    default:              return false;
    }
}

/* Options into opts; an exit code when they are not usable, else -1. */
static int replay_parse(int argc, char **argv, tune_replay_opts_t *opts)
{
    static const struct option options[] = {
        {"synthetic", no_argument, NULL, OPT_SYNTHETIC},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"policy", required_argument, NULL, OPT_POLICY},
        {"sweep", no_argument, NULL, OPT_SWEEP},
        {"sweep-small", no_argument, NULL, OPT_SWEEP_SMALL},
        {"out-policy", required_argument, NULL, OPT_OUT_POLICY},
        {"svg", required_argument, NULL, OPT_SVG},
        {"svg-trace", required_argument, NULL, OPT_SVG_TRACE},
        {"check", no_argument, NULL, OPT_CHECK},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool steps_given = false;
    int opt;

    *opts = (tune_replay_opts_t){.steps = TUNE_SUITE_STEPS};
    while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            return EXIT_TUNE_OK;
        }
        if (opt == '?' || opt == ':') {
            return tool_option_error(TUNE_TOOL, argv, options, opt);
        }
        if (!replay_option(opt, optarg, opts)) {
            return EXIT_TUNE_USAGE;
        }
        steps_given |= opt == OPT_STEPS;
    }
    opts->traces     = argv + optind;
    opts->num_traces = argc - optind;
    if (opts->synthetic == (opts->num_traces > 0)) {
        return tool_usage_error(TUNE_TOOL, "replay: give trace files or --synthetic%s",
                                opts->synthetic ? ", not both" : "");
    }
    if (steps_given && !opts->synthetic) {
        return tool_usage_error(TUNE_TOOL, "replay: --steps sets the length of the "
                                "--synthetic traces");
    }
    return -1;
}

/* Sweep if asked (printing the choice), then replay every case with the final params. */
static strata_status_t replay_cases(const tune_replay_opts_t *opts, tune_case_t **cases,
                                    int num_cases, tool_progress_t *progress,
                                    adapt_policy_params_t *params)
{
    strata_status_t status;
    double objective;

    if (opts->sweep) {
        status = tune_sweep(cases, num_cases, opts->sweep_small ? &tune_grid_small
                                                                : &tune_grid_full,
                            progress, params, &objective);
        tool_progress_end(progress);
        if (status != STRATA_OK) {
            return status;
        }
        printf("sweep: worst score %.4f (adaptive over the better static mode, or over 1.1x "
               "the oracle; at most 1 passes the check)\n", objective);
        print_params("chosen", params);
    } else {
        print_params("policy", params);
    }
    for (int i = 0; i < num_cases; ++i) {
        status = tune_case_replay(cases[i], params, opts->svg != NULL && i == opts->svg_trace);
        if (status != STRATA_OK) {
            return status;
        }
    }
    return STRATA_OK;
}

/* --out-policy and --svg; false when a file could not be written (reported). */
static bool replay_outputs(const tune_replay_opts_t *opts, tune_case_t *const *cases,
                           const adapt_policy_params_t *params)
{
    bool ok = true;

    if (opts->out_policy != NULL && adapt_policy_save(opts->out_policy, params) != STRATA_OK) {
        fprintf(stderr, "strata-tune: cannot write the policy file %s\n", opts->out_policy);
        ok = false;
    }
    errno = 0;
    if (opts->svg != NULL && tune_svg_write(cases[opts->svg_trace], opts->svg) != STRATA_OK) {
        fprintf(stderr, "strata-tune: cannot write %s: %s\n", opts->svg,
                strerror(errno ? errno : EIO));
        ok = false;
    }
    return ok;
}

static int replay_run(const tune_replay_opts_t *opts, adapt_policy_params_t *params)
{
    strata_status_t status;
    tool_progress_t progress;
    tune_case_t **cases;
    int num_cases = 0, code = EXIT_TUNE_OK;

    tool_progress_start(&progress, true, opts->progress);
    status = build_cases(opts, &params->model, &progress, &cases, &num_cases);
    tool_progress_end(&progress);
    if (status == STRATA_ERR_NO_MEMORY) {
        fprintf(stderr, "strata-tune: out of memory building the traces\n");
        return EXIT_TUNE_INTERNAL;
    }
    if (status != STRATA_OK) {
        return EXIT_TUNE_FAIL;
    }
    if (opts->svg != NULL && opts->svg_trace >= num_cases) {
        destroy_cases(cases, num_cases);
        fprintf(stderr, "strata-tune: --svg-trace %d: there are %d traces (0..%d)\n",
                opts->svg_trace, num_cases, num_cases - 1);
        return EXIT_TUNE_USAGE;
    }
    status = replay_cases(opts, cases, num_cases, &progress, params);
    if (status != STRATA_OK) {
        destroy_cases(cases, num_cases);
        fprintf(stderr, "strata-tune: replay: %s\n", strata_status_string(status));
        return EXIT_TUNE_INTERNAL;
    }
    print_table(cases, num_cases);
    if (!replay_outputs(opts, cases, params)) {
        code = EXIT_TUNE_FAIL;
    }
    for (int i = 0; i < num_cases && opts->check; ++i) {
        code = check_case(cases[i]) ? code : EXIT_TUNE_FAIL;
    }
    if (opts->check && code == EXIT_TUNE_OK) {
        printf("check passed: adaptive <= min(push, pull) and <= 1.10 x oracle at p50 and p99 "
               "on %s %d trace%s\n", num_cases == 1 ? "the" : "all", num_cases,
               num_cases == 1 ? "" : "s");
    }
    destroy_cases(cases, num_cases);
    return code;
}

static int replay_main(int argc, char **argv)
{
    adapt_policy_params_t params;
    tune_replay_opts_t opts;
    int code = replay_parse(argc, argv, &opts);

    if (code >= 0) {
        return code;
    }
    if (opts.policy != NULL) {
        if (adapt_policy_load(opts.policy, &params) != STRATA_OK) {
            fprintf(stderr, "strata-tune: cannot use the policy file %s\n", opts.policy);
            return EXIT_TUNE_FAIL;
        }
    } else {
        adapt_policy_defaults(&params);
    }
    return replay_run(&opts, &params);
}

int main(int argc, char **argv)
{
    const char *command = argc > 1 ? argv[1] : "";

    if (strcmp(command, "generate") == 0) {
        return generate_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "replay") == 0) {
        return replay_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "scale") == 0) {
        return tune_scale_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0) {
        usage(stdout);
        return EXIT_TUNE_OK;
    }
    if (strcmp(command, "-V") == 0 || strcmp(command, "--version") == 0) {
        tool_print_version(TUNE_TOOL, strata_get_version_string(), strata_get_build_options());
        return EXIT_TUNE_OK;
    }
    if (command[0] == '-') {
        return tool_usage_error(TUNE_TOOL, "unknown option '%s' before the subcommand", command);
    }
    return tool_unknown_subcommand(TUNE_TOOL, argc > 1 ? command : NULL, usage);
}
