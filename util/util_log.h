/*
 * Logging: levels from STRATA_LOG_LEVEL, one line per message, prefixed with the rank.
 */
#ifndef STRATA_UTIL_LOG_H
#define STRATA_UTIL_LOG_H

#include <strata/types.h>

#include "util_compiler.h"

/** Longest line, with its "strata[r0] error: " prefix: longer ones are cut to this many
 *  bytes (a handler receives at most UTIL_LOG_LINE_MAX - 1 bytes and the NUL). */
#define UTIL_LOG_LINE_MAX 1024

/** Receives every message that passes the level filter; the default writes to stderr. */
typedef void (*util_log_handler_fn_t)(strata_log_level_t level, const char *line, void *arg);

/** Current level: the configured one (STRATA_LOG_LEVEL, default warn) until set. */
strata_log_level_t util_log_level(void);
void util_log_set_level(strata_log_level_t level);

/** Rank shown in every line once known; -1 (the default) shows the process id instead. */
void util_log_set_rank(int rank);

/** Route messages to handler (NULL restores stderr). For tests and embedding frameworks. */
void util_log_set_handler(util_log_handler_fn_t handler, void *arg);

void util_log_write(strata_log_level_t level, const char *file, int line, const char *fmt, ...)
    UTIL_PRINTF(4, 5);

/** The message (without the line's prefix) of the last error logged on this thread, "" if
 *  none since util_log_clear_last_error; the thread's own storage. */
const char *util_log_last_error(void);
void        util_log_clear_last_error(void);

#define UTIL_LOG(level, ...) \
    do { \
        if ((level) <= util_log_level()) { \
            util_log_write((level), __FILE__, __LINE__, __VA_ARGS__); \
        } \
    } while (0)

#define UTIL_LOG_ERROR(...) UTIL_LOG(STRATA_LOG_LEVEL_ERROR, __VA_ARGS__)
#define UTIL_LOG_WARN(...)  UTIL_LOG(STRATA_LOG_LEVEL_WARN, __VA_ARGS__)
#define UTIL_LOG_INFO(...)  UTIL_LOG(STRATA_LOG_LEVEL_INFO, __VA_ARGS__)
#define UTIL_LOG_DEBUG(...) UTIL_LOG(STRATA_LOG_LEVEL_DEBUG, __VA_ARGS__)
#define UTIL_LOG_TRACE(...) UTIL_LOG(STRATA_LOG_LEVEL_TRACE, __VA_ARGS__)

#endif
