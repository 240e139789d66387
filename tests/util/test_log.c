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
static char last[1024];

static void capture(strata_log_level_t level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    ++lines;
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

static void test_long_message_truncated(void **state)
{
    char big[4096];

    (void)state;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    util_log_set_handler(capture, NULL);
    UTIL_LOG_ERROR("%s", big);
    assert_true(strlen(last) < sizeof(last));
    assert_null(strchr(last, '\n'));
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
