/*
 * strata-bench incast's options: each parsed and checked with its own message, and the
 * usage text.
 */
#include "strata_bench_incast.h"
#include "util/util.h"
#include "tool_cli.h"

#include <getopt.h>

#define INCAST_TOOL "strata-bench incast"
#include <stdlib.h>
#include <string.h>

void incast_usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-run -n N --nodes N --link-rate RATE -- strata-bench incast [options]\n"
            "Ranks 1..N-1 stream bulk writes into rank 0; rank 1 also writes a small message\n"
            "every interval, which rank 0 echoes with a small write, and times the round trip.\n"
            "Each process opens two engines, STRATA_INTER_RATE_CONTROL=on and off, used in\n"
            "alternating phases (on off off on on off ...), after an unrecorded phase on each;\n"
            "the first 10%% of each phase is not recorded. Per mode: small round trip p50/p99,\n"
            "bulk bytes per second received by rank 0; then 'incast with/without rate control:\n"
            "p99 X, throughput Y', the ratios.\n"
            "\n"
            "  --rate-control M  both (default), or on or off alone: one engine, every phase\n"
            "                    (e.g. to read strata-run's queue figures of one mode)\n"
            "  --seconds S       length of a phase (default 1)\n"
            "  --phases N        phases, 1..%d, even for both (default 10)\n"
            "  --bulk-size SIZE  bytes of a bulk write (default 1m)\n"
            "  --inflight N      bulk writes each sender keeps in flight, 1..%d (default 4)\n"
            "  --small-size SIZE bytes of the timed write and of its echo (default 64)\n"
            "  --interval TIME   between two timed writes (default 1ms; at most %u in flight)\n"
            "  --progress        rank 0's progress line on stderr even where it is no\n"
            "                    terminal (without it: only on a terminal, which strata-run\n"
            "                    on one gives)\n"
            "  -h, --help        this text\n",
            INCAST_MAX_PHASES, INCAST_MAX_INFLIGHT, INCAST_SLOTS);
}

/* A size or a time in strata's units ("64k", "1ms"); false after printing why not. */
static bool incast_parse_unit(const char *option, const char *text, util_config_type_t type,
                              uint64_t min, uint64_t max, uint64_t *value_p)
{
    util_config_field_t field = {.name = option, .type = type};
    char err[UTIL_REASON_LEN];
    uint64_t value;

    if (util_config_parse_value(&field, text, &value, err) != STRATA_OK) {
        tool_usage_error(INCAST_TOOL, "--%s: %s", option, err);
        return false;
    }
    if (value < min || value > max) {
        tool_usage_error(INCAST_TOOL, "--%s %s is out of range (%llu..%llu %s)", option, text,
                         (unsigned long long)min, (unsigned long long)max,
                         type == UTIL_CONFIG_TIME ? "ns" : "bytes");
        return false;
    }
    *value_p = value;
    return true;
}

static bool incast_parse_modes(const char *text, unsigned *modes_p)
{
    static const char *const names[] = {"", "on", "off", "both"};

    for (unsigned m = 1; m < UTIL_ARRAY_SIZE(names); ++m) {
        if (strcmp(text, names[m]) == 0) {
            *modes_p = m;
            return true;
        }
    }
    tool_usage_error(INCAST_TOOL, "--rate-control '%s' is not on, off or both", text);
    return false;
}

/* Options into o; 0 to go on, else the exit status (0 after --help). */
int incast_parse(int argc, char **argv, incast_opts_t *o, bool *help_p)
{
    static const struct option options[] = {
        {"seconds", required_argument, NULL, 'S'},    {"phases", required_argument, NULL, 'P'},
        {"bulk-size", required_argument, NULL, 'B'},  {"inflight", required_argument, NULL, 'I'},
        {"small-size", required_argument, NULL, 's'}, {"interval", required_argument, NULL, 'i'},
        {"rate-control", required_argument, NULL, 'r'}, {"progress", no_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool ok = true;
    int opt;

    *o = (incast_opts_t){.modes = 3, .seconds = 1, .phases = 10, .bulk_size = 1u << 20,
                         .inflight = 4, .small_size = 64, .interval_ns = UTIL_NSEC_PER_MSEC};
    *help_p = false;
    optind  = 2;
    while (ok && (opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (opt) {
        case 'S': ok = tool_parse_double(INCAST_TOOL, "--seconds", optarg, 0.01, 3600,
                                         &o->seconds); break;
        case 'P': ok = tool_parse_int(INCAST_TOOL, "--phases", optarg, 1, INCAST_MAX_PHASES,
                                      &o->phases); break;
        case 'r': ok = incast_parse_modes(optarg, &o->modes); break;
        case 'B': ok = incast_parse_unit("bulk-size", optarg, UTIL_CONFIG_SIZE, 1, 64u << 20,
                                         &o->bulk_size); break;
        case 'I': ok = tool_parse_int(INCAST_TOOL, "--inflight", optarg, 1, INCAST_MAX_INFLIGHT,
                                      &o->inflight); break;
        case 's': ok = incast_parse_unit("small-size", optarg, UTIL_CONFIG_SIZE, 1, 64u << 10,
                                         &o->small_size); break;
        case 'i': ok = incast_parse_unit("interval", optarg, UTIL_CONFIG_TIME,
                                         10 * UTIL_NSEC_PER_USEC, UTIL_NSEC_PER_SEC,
                                         &o->interval_ns); break;
        case 'p': o->progress = true; break;
        case 'h': *help_p = true; return 0;
        default:  return tool_option_error(INCAST_TOOL, argv, options, opt);
        }
    }
    if (!ok) {
        return TOOL_EXIT_USAGE;
    }
    if (optind < argc) {
        return tool_usage_error(INCAST_TOOL, "unexpected argument '%s'", argv[optind]);
    }
    if (o->modes == 3 && o->phases % 2 != 0) {
        return tool_usage_error(INCAST_TOOL, "--phases %d is odd: phases must be even to "
                                "measure both modes alike", o->phases);
    }
    return 0;
}

