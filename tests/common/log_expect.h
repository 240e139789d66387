/*
 * For programs that make deliberate bad calls: log lines containing one of the expected
 * texts are counted instead of printed (a passing run prints no "error:" line), every other
 * line goes to stderr as usual, and the program checks at the end that each expected text
 * was logged (the refusal said what was wrong). Thread-safe: proxy threads log too.
 */
#ifndef STRATA_TESTS_LOG_EXPECT_H
#define STRATA_TESTS_LOG_EXPECT_H

#include "util/util.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define LOG_EXPECT_MAX 32

static struct {
    pthread_mutex_t    lock;
    const char *const *texts; /* NULL-terminated */
    int                seen[LOG_EXPECT_MAX];
} log_expect = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void log_expect_handler(strata_log_level_t level, const char *line, void *arg)
{
    bool expected = false;

    (void)level;
    (void)arg;
    pthread_mutex_lock(&log_expect.lock);
    for (int i = 0; log_expect.texts[i] != NULL && i < LOG_EXPECT_MAX && !expected; ++i) {
        if (strstr(line, log_expect.texts[i]) != NULL) {
            log_expect.seen[i]++;
            expected = true;
        }
    }
    pthread_mutex_unlock(&log_expect.lock);
    if (!expected) {
        fprintf(stderr, "%s\n", line);
    }
}

/* From now on, lines with one of texts (NULL-terminated, at most LOG_EXPECT_MAX) are
 * expected. */
static inline void log_expect_start(const char *const *texts)
{
    log_expect.texts = texts;
    util_log_set_handler(log_expect_handler, NULL);
}

/* The first expected text never logged, or NULL when every one was. */
static inline const char *log_expect_missing(void)
{
    const char *missing = NULL;

    pthread_mutex_lock(&log_expect.lock);
    for (int i = 0; log_expect.texts[i] != NULL && i < LOG_EXPECT_MAX && !missing; ++i) {
        missing = log_expect.seen[i] == 0 ? log_expect.texts[i] : NULL;
    }
    pthread_mutex_unlock(&log_expect.lock);
    return missing;
}

#endif
