/*
 * Logging: level filter, rank prefix, one line per message.
 */
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static int lines;
static char last[8192]; /* far larger than a line may be, so the library's limit shows */
static size_t last_len;  /* strlen of the line the handler received, before any copy */

static void capture(strata_log_level_t level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    ++lines;
    last_len = strlen(line);
    snprintf(last, sizeof(last), "%s", line);
}

static void test_level_filter(void **state)
{
    (void)state;
    util_log_set_handler(capture, NULL);
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    lines = 0;
    UTIL_LOG_INFO("hidden %d", 1);
    UTIL_LOG_DEBUG("hidden %d", 2);
    assert_int_equal(lines, 0);
    UTIL_LOG_WARN("shown %d", 3);
    UTIL_LOG_ERROR("shown %d", 4);
    assert_int_equal(lines, 2);
    assert_non_null(strstr(last, "error: shown 4"));
    util_log_set_level(STRATA_LOG_LEVEL_DEBUG);
    UTIL_LOG_DEBUG("with location");
    assert_non_null(strstr(last, "(test_log.c:"));
    util_log_set_handler(NULL, NULL);
}

static void test_rank_prefix(void **state)
{
    (void)state;
    util_log_set_handler(capture, NULL);
    util_log_set_level(STRATA_LOG_LEVEL_INFO);
    util_log_set_rank(7);
    UTIL_LOG_INFO("hello");
    assert_string_equal(last, "strata[r7] info: hello");
    util_log_set_rank(-1);
    UTIL_LOG_INFO("hello");
    assert_non_null(strstr(last, "strata[pid "));
    util_log_set_handler(NULL, NULL);
}

/* A message longer than a line reaches the handler cut at UTIL_LOG_LINE_MAX - 1 bytes:
 * the prefix and then the message's first bytes, NUL-terminated. */
static void test_long_message_truncated(void **state)
{
    static const char prefix[] = "strata[r3] error: ";
    char big[4096];

    (void)state;
    for (size_t i = 0; i < sizeof(big) - 1; ++i) {
        big[i] = (char)('a' + i % 26);
    }
    big[sizeof(big) - 1] = '\0';
    util_log_set_handler(capture, NULL);
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    util_log_set_rank(3);
    UTIL_LOG_ERROR("%s", big);
    assert_int_equal(last_len, UTIL_LOG_LINE_MAX - 1);
    assert_memory_equal(last, prefix, sizeof(prefix) - 1);
    assert_memory_equal(last + sizeof(prefix) - 1, big,
                        UTIL_LOG_LINE_MAX - 1 - (sizeof(prefix) - 1));
    /* One that fits arrives whole. */
    big[100] = '\0';
    UTIL_LOG_ERROR("%s", big);
    assert_int_equal(last_len, sizeof(prefix) - 1 + 100);
    assert_string_equal(last + sizeof(prefix) - 1, big);
    util_log_set_rank(-1);
    util_log_set_handler(NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_level_filter),
        cmocka_unit_test(test_rank_prefix),
        cmocka_unit_test(test_long_message_truncated),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
