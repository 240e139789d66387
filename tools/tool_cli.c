/*
 * The tools' shared command-line helpers: version line, usage errors, option values,
 * progress line (tool_cli.h).
 */
#include "tool_cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOOL_PROGRESS_PERIOD 0.25 /* seconds between two redraws */
#define TOOL_PROGRESS_MAX    160  /* characters of a progress line */

void tool_print_version(const char *tool, const char *version, const char *build)
{
    if (build != NULL) {
        printf("%s %s (%s)\n", tool, version, build);
    } else {
        printf("%s %s\n", tool, version);
    }
}

int tool_usage_error(const char *tool, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", tool);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see --help)\n", stderr);
    return TOOL_EXIT_USAGE;
}

int tool_unknown_subcommand(const char *tool, const char *name,
                            void (*usage)(FILE *out))
{
    if (name == NULL) {
        fprintf(stderr, "%s: no subcommand\n", tool);
    } else {
        fprintf(stderr, "%s: unknown subcommand '%s'\n", tool, name);
    }
    usage(stderr);
    return TOOL_EXIT_USAGE;
}

/* The long options whose names start with the len characters of name; the exact match
 * (or the only one) in *match_p. */
static int tool_long_matches(const struct option *options, const char *name, size_t len,
                             const struct option **match_p)
{
    int matches = 0;

    *match_p = NULL;
    for (const struct option *o = options; o->name != NULL; ++o) {
        if (strncmp(o->name, name, len) != 0) {
            continue;
        }
        if (strlen(o->name) == len) {
            *match_p = o;
            return 1;
        }
        *match_p = o;
        ++matches;
    }
    return matches;
}

/* A long option getopt_long refused: argv[optind - 1] is "--name" or "--name=value". */
static int tool_long_option_error(const char *tool, const char *arg,
                                  const struct option *options, int opt)
{
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    const struct option *match;
    int matches = tool_long_matches(options, name, len, &match);

    if (opt == ':') {
        return tool_usage_error(tool, "option '--%.*s' needs a value", (int)len, name);
    }
    if (matches > 1) {
        return tool_usage_error(tool, "ambiguous option '--%.*s'", (int)len, name);
    }
    if (matches == 1 && name[len] == '=' && match->has_arg == no_argument) {
        return tool_usage_error(tool, "option '--%s' takes no value (found '%s')", match->name,
                                name + len + 1);
    }
    return tool_usage_error(tool, "unknown option '--%.*s'", (int)len, name);
}

/* Whether getopt_long's error is about the long option arg: it set optopt to 0 for an
 * unknown one and to the option's value for one it refused; an unknown short option sets
 * optopt to its letter, and one inside a cluster leaves optind behind it, so arg may be
 * the argument before. */
static bool tool_error_is_long(const char *arg, const struct option *options)
{
    const struct option *match;
    const char *name;

    if (arg == NULL || strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
        return false;
    }
    if (optopt == 0 || optopt > 255) {
        return true;
    }
    name = arg + 2;
    return tool_long_matches(options, name, strcspn(name, "="), &match) == 1 &&
           match->flag == NULL && match->val == optopt;
}

int tool_option_error(const char *tool, char *const argv[], const struct option *options,
                      int opt)
{
    const char *arg = optind > 0 ? argv[optind - 1] : NULL;

    if (tool_error_is_long(arg, options)) {
        return tool_long_option_error(tool, arg, options, opt);
    }
    if (opt == ':') {
        return tool_usage_error(tool, "option '-%c' needs a value", optopt);
    }
    if (optopt > 0 && optopt <= 255) {
        return tool_usage_error(tool, "unknown option '-%c'", optopt);
    }
    return tool_usage_error(tool, "unknown option '%s'", arg != NULL ? arg : "?");
}

/* "OPTION: 'TEXT' is not WHAT" or "OPTION TEXT is out of range (RANGE)". */
static bool tool_value_error(const char *tool, const char *option, const char *text,
                             bool parsed, const char *what, const char *range)
{
    if (!parsed) {
        tool_usage_error(tool, "%s: '%s' is not %s", option, text, what);
    } else {
        tool_usage_error(tool, "%s %s is out of range (%s)", option, text, range);
    }
    return false;
}

/* Whether text starts as a number written plainly does: a digit, or '-' where negatives
 * are allowed and a digit or '.' follows (strto* would also take spaces and a '+'). */
static bool tool_plain_start(const char *text, bool negative_ok)
{
    if (negative_ok && text[0] == '-') {
        ++text;
    }
    return isdigit((unsigned char)text[0]) || (text[0] == '.' && isdigit((unsigned char)text[1]));
}

bool tool_parse_int(const char *tool, const char *option, const char *text, long min,
                    long max, int *value_p)
{
    char *end, range[64];
    long value;

    errno = 0;
    value = strtol(text, &end, 10);
    if (!tool_plain_start(text, true) || text[0] == '.' || end == text || *end != '\0') {
        return tool_value_error(tool, option, text, false, "an integer", NULL);
    }
    if (errno == ERANGE || value < min || value > max) {
        snprintf(range, sizeof(range), "%ld..%ld", min, max);
        return tool_value_error(tool, option, text, true, NULL, range);
    }
    *value_p = (int)value;
    return true;
}

bool tool_parse_double(const char *tool, const char *option, const char *text, double min,
                       double max, double *value_p)
{
    char *end, range[64];
    double value;

    errno = 0;
    value = strtod(text, &end);
    if (!tool_plain_start(text, true) || end == text || *end != '\0' || isnan(value)) {
        return tool_value_error(tool, option, text, false, "a number", NULL);
    }
    if (errno == ERANGE || !(value >= min && value <= max)) {
        snprintf(range, sizeof(range), "%g..%g", min, max);
        return tool_value_error(tool, option, text, true, NULL, range);
    }
    *value_p = value;
    return true;
}

/* An unsigned integer (decimal; 0x hexadecimal where there is no suffix), times its
 * suffix's multiplier where one is allowed. */
static bool tool_parse_unsigned(const char *tool, const char *option, const char *text,
                                bool suffix, uint64_t min, uint64_t max, uint64_t *value_p)
{
    unsigned long long value;
    uint64_t scale = 1;
    char *end, range[64];

    errno = 0;
    value = strtoull(text, &end,
                     !suffix && text[0] == '0' && (text[1] == 'x' || text[1] == 'X') ? 16 : 10);
    if (!tool_plain_start(text, false) || text[0] == '.') {
        end = (char *)text; /* not a number: a sign, a space or a point first */
    }
    if (suffix && end != text) {
        switch (*end) {
        case 'k': case 'K': scale = 1ull << 10; ++end; break;
        case 'm': case 'M': scale = 1ull << 20; ++end; break;
        case 'g': case 'G': scale = 1ull << 30; ++end; break;
        default: break;
        }
    }
    if (end == text || *end != '\0' || strchr(text, '-') != NULL) {
        return tool_value_error(tool, option, text, false,
                                suffix ? "a size (bytes, or with k, m or g)"
                                       : "an unsigned integer", NULL);
    }
    if (errno == ERANGE || value > UINT64_MAX / scale || value * scale < min ||
        value * scale > max) {
        snprintf(range, sizeof(range), "%llu..%llu", (unsigned long long)min,
                 (unsigned long long)max);
        return tool_value_error(tool, option, text, true, NULL, range);
    }
    *value_p = value * scale;
    return true;
}

bool tool_parse_u64(const char *tool, const char *option, const char *text, uint64_t min,
                    uint64_t max, uint64_t *value_p)
{
    return tool_parse_unsigned(tool, option, text, false, min, max, value_p);
}

bool tool_parse_size(const char *tool, const char *option, const char *text, uint64_t min,
                     uint64_t max, uint64_t *value_p)
{
    return tool_parse_unsigned(tool, option, text, true, min, max, value_p);
}

/* --- progress ------------------------------------------------------------------------- */

static double tool_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tool_progress_start(tool_progress_t *progress, bool enabled, bool forced)
{
    *progress = (tool_progress_t){.on    = enabled && (forced || isatty(STDERR_FILENO)),
                                  .start = tool_now()};
    progress->next = progress->start;
}

void tool_progress_update(tool_progress_t *progress, const char *fmt, ...)
{
    char line[TOOL_PROGRESS_MAX];
    double now;
    va_list ap;
    int len, used;

    if (!progress->on || (now = tool_now()) < progress->next) {
        return;
    }
    progress->next = now + TOOL_PROGRESS_PERIOD;
    va_start(ap, fmt);
    used = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    used = used < 0 ? 0 : used >= (int)sizeof(line) ? (int)sizeof(line) - 1 : used;
    snprintf(line + used, sizeof(line) - (size_t)used, ", %.0f s", now - progress->start);
    len = (int)strlen(line);
    /* Pad over the longer line drawn before, so none of it stays visible. */
    fprintf(stderr, "\r%s%*s", line, progress->width > len ? progress->width - len : 0, "");
    fflush(stderr);
    progress->width = len;
}

void tool_progress_end(tool_progress_t *progress)
{
    if (progress->on && progress->width > 0) {
        fprintf(stderr, "\r%*s\r", progress->width, "");
        fflush(stderr);
    }
    progress->width = 0;
    progress->next  = 0; /* a line drawn after this one starts at once */
}
