/*
 * Tests of refused calls: the library's log lines are captured instead of printed, so a
 * test can assert that the refusal said what was wrong (and a passing run prints no
 * "error:" lines).
 */
#ifndef STRATA_TESTS_LOG_CAPTURE_H
#define STRATA_TESTS_LOG_CAPTURE_H

#include "util/util.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define LOG_CAPTURE_LINES 64

static struct {
    int  count;
    char lines[LOG_CAPTURE_LINES][1024];
} log_capture;

static void log_capture_handler(strata_log_level_t level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    if (log_capture.count < LOG_CAPTURE_LINES) {
        snprintf(log_capture.lines[log_capture.count], sizeof(log_capture.lines[0]), "%s", line);
    }
    log_capture.count++;
}

/* Capture from now on, forgetting earlier lines. */
static inline void log_capture_start(void)
{
    log_capture.count = 0;
    util_log_set_handler(log_capture_handler, NULL);
}

/* Back to stderr. */
static inline void log_capture_stop(void)
{
    util_log_set_handler(NULL, NULL);
}

/* Whether a line captured since log_capture_start contains every one of the texts (up to
 * three; NULL ends the list); prints what was captured when none does. */
static inline bool log_captured(const char *a, const char *b, const char *c)
{
    for (int i = 0; i < log_capture.count && i < LOG_CAPTURE_LINES; ++i) {
        const char *line = log_capture.lines[i];

        if (strstr(line, a) && (!b || strstr(line, b)) && (!c || strstr(line, c))) {
            return true;
        }
    }
    fprintf(stderr, "no captured line has \"%s\"%s%s%s%s%s; captured %d:\n", a, b ? " and \"" : "",
            b ? b : "", b ? "\"" : "", c ? " and " : "", c ? c : "", log_capture.count);
    for (int i = 0; i < log_capture.count && i < LOG_CAPTURE_LINES; ++i) {
        fprintf(stderr, "  %s\n", log_capture.lines[i]);
    }
    return false;
}

#endif
