/*
 * Logging implementation: lazily reads STRATA_LOG_LEVEL through the util config table.
 */
#include "util_log.h"
#include "util_config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const util_log_level_names[] = {
    [STRATA_LOG_LEVEL_ERROR] = "error",
    [STRATA_LOG_LEVEL_WARN]  = "warn",
    [STRATA_LOG_LEVEL_INFO]  = "info",
    [STRATA_LOG_LEVEL_DEBUG] = "debug",
    [STRATA_LOG_LEVEL_TRACE] = "trace",
    NULL
};

typedef struct util_log_config {
    int level;
} util_log_config_t;

static const util_config_field_t util_log_config_fields[] = {
    {
        .name          = "LOG_LEVEL",
        .default_value = "warn",
        .doc           = "Lowest severity printed: error, warn, info, debug or trace.",
        .type          = UTIL_CONFIG_ENUM,
        .offset        = offsetof(util_log_config_t, level),
        .enum_names    = util_log_level_names,
    },
};

const util_config_table_t util_log_config_table = {
    .layer       = "log",
    .fields      = util_log_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(util_log_config_fields),
    .struct_size = sizeof(util_log_config_t),
};

static pthread_once_t util_log_once = PTHREAD_ONCE_INIT;
static atomic_int util_log_current_level = STRATA_LOG_LEVEL_WARN;
static atomic_int util_log_rank = -1;
static util_log_handler_fn_t util_log_handler;
static void *util_log_handler_arg;

static void util_log_init(void)
{
    char err[UTIL_REASON_LEN];
    util_log_config_t config;

    /* Logging cannot log while it starts: a bad STRATA_LOG_LEVEL goes straight to stderr. */
    if (util_config_read_quiet(&util_log_config_table, &config, err) == STRATA_OK) {
        atomic_store(&util_log_current_level, config.level);
        util_config_release(&util_log_config_table, &config);
    } else {
        fprintf(stderr, "strata: %s (keeping warn)\n", err);
    }
}

strata_log_level_t util_log_level(void)
{
    pthread_once(&util_log_once, util_log_init);
    return (strata_log_level_t)atomic_load_explicit(&util_log_current_level,
                                                    memory_order_relaxed);
}

void util_log_set_level(strata_log_level_t level)
{
    pthread_once(&util_log_once, util_log_init);
    atomic_store(&util_log_current_level, level);
}

void util_log_set_rank(int rank)
{
    atomic_store(&util_log_rank, rank);
}

void util_log_set_handler(util_log_handler_fn_t handler, void *arg)
{
    util_log_handler     = handler;
    util_log_handler_arg = arg;
}

/* The level as STRATA_LOG_LEVEL names it. */
static const char *util_log_level_name(strata_log_level_t level)
{
    if ((int)level < 0 || level > STRATA_LOG_LEVEL_TRACE) {
        return "?";
    }
    return util_log_level_names[level];
}

/* The message of the last error logged on each thread, without the line's prefix. */
static _Thread_local char util_last_error[UTIL_LOG_LINE_MAX];

const char *util_log_last_error(void)
{
    return util_last_error;
}

void util_log_clear_last_error(void)
{
    util_last_error[0] = '\0';
}

void util_log_write(strata_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char buf[UTIL_LOG_LINE_MAX];
    int rank = atomic_load(&util_log_rank);
    const char *base = strrchr(file, '/');
    size_t len;
    va_list ap;
    int n;

    if (rank >= 0) {
        n = snprintf(buf, sizeof(buf), "strata[r%d] %s: ", rank, util_log_level_name(level));
    } else {
        n = snprintf(buf, sizeof(buf), "strata[pid %d] %s: ", (int)getpid(),
                     util_log_level_name(level));
    }
    len = (n > 0) ? UTIL_MIN((size_t)n, sizeof(buf) - 1) : 0;

    va_start(ap, fmt);
    n = vsnprintf(buf + len, sizeof(buf) - len, fmt, ap);
    va_end(ap);
    if (level == STRATA_LOG_LEVEL_ERROR) {
        snprintf(util_last_error, sizeof(util_last_error), "%s", buf + len);
    }
    len = (n > 0) ? UTIL_MIN(len + (size_t)n, sizeof(buf) - 1) : len;

    if (level >= STRATA_LOG_LEVEL_DEBUG && len < sizeof(buf) - 1) {
        snprintf(buf + len, sizeof(buf) - len, " (%s:%d)", base ? base + 1 : file, line);
    }

    if (util_log_handler != NULL) {
        util_log_handler(level, buf, util_log_handler_arg);
    } else {
        fprintf(stderr, "%s\n", buf);
    }
}
