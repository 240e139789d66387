/*
 * What every strata tool does alike on its command line: the version line, usage errors
 * (one line on stderr naming the mistake, exit 2), option values, and a progress line on a
 * terminal. Depends on libc only, so that strata-run, which links no libstrata, uses it too.
 */
#ifndef STRATA_TOOLS_TOOL_CLI_H
#define STRATA_TOOLS_TOOL_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define TOOL_EXIT_USAGE 2

/** "TOOL VERSION (BUILD)" on stdout; "TOOL VERSION" when build is NULL. */
void tool_print_version(const char *tool, const char *version, const char *build);

/** "TOOL: MESSAGE (see --help)" on stderr; returns TOOL_EXIT_USAGE. */
int tool_usage_error(const char *tool, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** "TOOL: unknown subcommand 'NAME'" (name NULL: "TOOL: no subcommand"), then the usage,
 *  on stderr; returns TOOL_EXIT_USAGE. */
int tool_unknown_subcommand(const char *tool, const char *name, void (*usage)(FILE *out));

/**
 * The usage error for what getopt_long returned as an error (opt '?' or ':'; the option
 * string must start with ':', after any '+', so that a missing value returns ':' and
 * getopt prints nothing itself): an unknown or ambiguous option, an option without its
 * value, a value given to an option that takes none. Returns TOOL_EXIT_USAGE.
 */
int tool_option_error(const char *tool, char *const argv[], const struct option *options,
                      int opt);

/**
 * Option values. Each returns false after a usage error naming the option and the value:
 * "not an integer" / "not a number" when the text does not parse whole, "out of range
 * (MIN..MAX)" when it parses but lies outside.
 */
bool tool_parse_int(const char *tool, const char *option, const char *text, long min,
                    long max, int *value_p);
bool tool_parse_double(const char *tool, const char *option, const char *text, double min,
                       double max, double *value_p);
bool tool_parse_u64(const char *tool, const char *option, const char *text, uint64_t min,
                    uint64_t max, uint64_t *value_p);
/** A byte count with an optional k, m or g suffix (powers of 1024). */
bool tool_parse_size(const char *tool, const char *option, const char *text, uint64_t min,
                     uint64_t max, uint64_t *value_p);

/**
 * One line on stderr that says how far a long run is ("sweep 12/48 configs, 25 s"),
 * redrawn in place (carriage return) at most a few times a second and cleared at the end.
 * Shown only when stderr is a terminal, so logs and pipes never see it, unless forced
 * (--progress).
 */
typedef struct tool_progress {
    bool   on;
    double start;    /* seconds, monotonic */
    double next;     /* when the line may be redrawn */
    int    width;    /* characters of the line drawn last, to clear it */
} tool_progress_t;

/** Start timing. The line is drawn where enabled (e.g. on rank 0) and stderr is a terminal,
 *  or where forced (a --progress option: stderr is a pipe that ends at a terminal, as
 *  mpirun gives its ranks). */
void tool_progress_start(tool_progress_t *progress, bool enabled, bool forced);
/** Redraw "MESSAGE, N s" if due; the message is printf-formatted. */
void tool_progress_update(tool_progress_t *progress, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** Clear the line; the next output starts at the beginning of an empty line, and the next
 *  update draws at once. */
void tool_progress_end(tool_progress_t *progress);

#endif
