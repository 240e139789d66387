/*
 * util config table: typed parsers, environment reading, unknown-variable suggestions.
 */
#include "util/util.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

typedef struct test_config {
    int64_t  count;
    uint64_t size;
    uint64_t timeout;
    bool     enabled;
    int      mode;
    char    *name;
    double   factor;
} test_config_t;

static const char *const test_modes[] = {"push", "pull", "adaptive", NULL};

static const util_config_field_t test_fields[] = {
    {.name = "TEST_CFG_COUNT", .default_value = "-3", .doc = "count", .type = UTIL_CONFIG_INT,
     .offset = offsetof(test_config_t, count)},
    {.name = "TEST_CFG_SIZE", .default_value = "8k", .doc = "size", .type = UTIL_CONFIG_SIZE,
     .offset = offsetof(test_config_t, size)},
    {.name = "TEST_CFG_TIMEOUT", .default_value = "10ms", .doc = "time", .type = UTIL_CONFIG_TIME,
     .offset = offsetof(test_config_t, timeout)},
    {.name = "TEST_CFG_ENABLED", .default_value = "yes", .doc = "bool", .type = UTIL_CONFIG_BOOL,
     .offset = offsetof(test_config_t, enabled)},
    {.name = "TEST_CFG_MODE", .default_value = "pull", .doc = "enum", .type = UTIL_CONFIG_ENUM,
     .offset = offsetof(test_config_t, mode), .enum_names = test_modes},
    {.name = "TEST_CFG_NAME", .default_value = "", .doc = "string", .type = UTIL_CONFIG_STRING,
     .offset = offsetof(test_config_t, name)},
    {.name = "TEST_CFG_FACTOR", .default_value = "2", .doc = "real", .type = UTIL_CONFIG_REAL,
     .offset = offsetof(test_config_t, factor)},
};

static const util_config_table_t test_table = {
    .layer = "test", .fields = test_fields, .num_fields = UTIL_ARRAY_SIZE(test_fields),
    .struct_size = sizeof(test_config_t),
};

static uint64_t parse_u64(int field, const char *text, strata_status_t expect)
{
    char err[UTIL_REASON_LEN] = "";
    uint64_t value = 0xdeadbeef;

    assert_int_equal(util_config_parse_value(&test_fields[field], text, &value, err), expect);
    if (expect != STRATA_OK) {
        assert_true(strlen(err) > 0);
        assert_int_equal(value, 0xdeadbeef); /* untouched on error */
    }
    return value;
}

static void test_size_units(void **state)
{
    (void)state;
    assert_int_equal(parse_u64(1, "0", STRATA_OK), 0);
    assert_int_equal(parse_u64(1, "4096", STRATA_OK), 4096);
    assert_int_equal(parse_u64(1, "8k", STRATA_OK), 8192);
    assert_int_equal(parse_u64(1, "64KiB", STRATA_OK), 65536);
    assert_int_equal(parse_u64(1, "3m", STRATA_OK), 3u << 20);
    assert_int_equal(parse_u64(1, "2GB", STRATA_OK), 2ull << 30);
    assert_int_equal(parse_u64(1, "1t", STRATA_OK), 1ull << 40);
    parse_u64(1, "", STRATA_ERR_CONFIG);
    parse_u64(1, "k", STRATA_ERR_CONFIG);
    parse_u64(1, "-1", STRATA_ERR_CONFIG);
    parse_u64(1, "12parsecs", STRATA_ERR_CONFIG);
    parse_u64(1, "99999999999999999999", STRATA_ERR_CONFIG);
    parse_u64(1, "20000000t", STRATA_ERR_CONFIG); /* overflows 64 bits once scaled */
}

static void test_time_units(void **state)
{
    (void)state;
    assert_int_equal(parse_u64(2, "100ns", STRATA_OK), 100);
    assert_int_equal(parse_u64(2, "500us", STRATA_OK), 500000);
    assert_int_equal(parse_u64(2, "10ms", STRATA_OK), 10000000);
    assert_int_equal(parse_u64(2, "2s", STRATA_OK), 2000000000ull);
    assert_int_equal(parse_u64(2, "1min", STRATA_OK), 60000000000ull);
    parse_u64(2, "10", STRATA_ERR_CONFIG); /* a time needs its unit */
    parse_u64(2, "10 ms", STRATA_ERR_CONFIG);
    parse_u64(2, "1h", STRATA_ERR_CONFIG);
}

static void test_int_bool_enum(void **state)
{
    char err[UTIL_REASON_LEN];
    int64_t i64;
    bool flag;
    int mode;

    (void)state;
    assert_int_equal(util_config_parse_value(&test_fields[0], "-42", &i64, err), STRATA_OK);
    assert_int_equal(i64, -42);
    assert_int_equal(util_config_parse_value(&test_fields[0], "4x", &i64, err), STRATA_ERR_CONFIG);
    assert_int_equal(util_config_parse_value(&test_fields[0], "", &i64, err), STRATA_ERR_CONFIG);
    assert_int_equal(util_config_parse_value(&test_fields[0], "99999999999999999999", &i64, err),
                     STRATA_ERR_CONFIG);

    assert_int_equal(util_config_parse_value(&test_fields[3], "ON", &flag, err), STRATA_OK);
    assert_true(flag);
    assert_int_equal(util_config_parse_value(&test_fields[3], "0", &flag, err), STRATA_OK);
    assert_false(flag);
    assert_int_equal(util_config_parse_value(&test_fields[3], "maybe", &flag, err),
                     STRATA_ERR_CONFIG);

    assert_int_equal(util_config_parse_value(&test_fields[4], "Adaptive", &mode, err), STRATA_OK);
    assert_int_equal(mode, 2);
    assert_int_equal(util_config_parse_value(&test_fields[4], "pushpull", &mode, err),
                     STRATA_ERR_CONFIG);
    assert_non_null(strstr(err, "push pull adaptive")); /* the error lists the choices */
}

static void test_real(void **state)
{
    char err[UTIL_REASON_LEN], text[32];
    double real = -1.0;

    (void)state;
    assert_int_equal(util_config_parse_value(&test_fields[6], "1.5", &real, err), STRATA_OK);
    assert_true(real == 1.5);
    assert_int_equal(util_config_parse_value(&test_fields[6], "2e-1", &real, err), STRATA_OK);
    assert_true(real == 0.2);
    assert_int_equal(util_config_parse_value(&test_fields[6], "-3", &real, err), STRATA_OK);
    assert_true(real == -3.0);
    real = 7.0;
    for (size_t i = 0; i < 6; ++i) {
        static const char *const bad[] = {"", "1.5x", "nan", "inf", "1e999", " 2"};

        assert_int_equal(util_config_parse_value(&test_fields[6], bad[i], &real, err),
                         STRATA_ERR_CONFIG);
        assert_true(real == 7.0); /* untouched */
    }
    util_config_format_value(&test_fields[6], &real, text, sizeof(text));
    assert_string_equal(text, "7");
    real = 0.1; /* formatted so that it reads back as the same double */
    util_config_format_value(&test_fields[6], &real, text, sizeof(text));
    real = 0.0;
    assert_int_equal(util_config_parse_value(&test_fields[6], text, &real, err), STRATA_OK);
    assert_true(real == 0.1);
    /* "auto", any case, leaves the choice to the field's user: NAN, formatted back as auto */
    assert_int_equal(util_config_parse_value(&test_fields[6], "AUTO", &real, err), STRATA_OK);
    assert_true(isnan(real));
    util_config_format_value(&test_fields[6], &real, text, sizeof(text));
    assert_string_equal(text, "auto");
}

/* A value with a newline (found by fuzz_config) is refused in one line of message. */
static void test_error_is_one_line(void **state)
{
    char err[UTIL_REASON_LEN] = "";
    test_config_t config;
    bool flag;

    (void)state;
    assert_int_equal(util_config_parse_value(&test_fields[3], "y\nSTRATA_X=1", &flag, err),
                     STRATA_ERR_CONFIG);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "'y?STRATA_X=1' is not a boolean"));
    setenv("STRATA_TEST_CFG_SIZE", "8k\n", 1);
    assert_int_equal(util_config_read_quiet(&test_table, &config, err), STRATA_ERR_CONFIG);
    unsetenv("STRATA_TEST_CFG_SIZE");
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "STRATA_TEST_CFG_SIZE=8k?: '8k?' has an unknown size unit"));
}

static void test_read_defaults_and_env(void **state)
{
    test_config_t config;

    (void)state;
    unsetenv("STRATA_TEST_CFG_SIZE");
    assert_int_equal(util_config_read(&test_table, &config), STRATA_OK);
    assert_int_equal(config.count, -3);
    assert_int_equal(config.size, 8192);
    assert_int_equal(config.timeout, 10000000);
    assert_true(config.enabled);
    assert_int_equal(config.mode, 1);
    assert_string_equal(config.name, "");
    util_config_release(&test_table, &config);
    assert_null(config.name);

    setenv("STRATA_TEST_CFG_SIZE", "1m", 1);
    setenv("STRATA_TEST_CFG_NAME", "mlx5_0", 1);
    assert_int_equal(util_config_read(&test_table, &config), STRATA_OK);
    assert_int_equal(config.size, 1u << 20);
    assert_string_equal(config.name, "mlx5_0");

    assert_int_equal(util_config_set(&test_table, &config, "TEST_CFG_NAME", "efa_0"), STRATA_OK);
    assert_string_equal(config.name, "efa_0");
    assert_int_equal(util_config_set(&test_table, &config, "TEST_CFG_MODE", "bogus"),
                     STRATA_ERR_CONFIG);
    assert_int_equal(config.mode, 1);
    assert_int_equal(util_config_set(&test_table, &config, "NO_SUCH", "1"), STRATA_ERR_INVALID);
    util_config_release(&test_table, &config);

    setenv("STRATA_TEST_CFG_SIZE", "lots", 1);
    assert_int_equal(util_config_read(&test_table, &config), STRATA_ERR_CONFIG);
    unsetenv("STRATA_TEST_CFG_SIZE");
    unsetenv("STRATA_TEST_CFG_NAME");
}

static void test_closest_name(void **state)
{
    const util_config_table_t *tables[] = {&util_log_config_table, &test_table};
    char buf[128];

    (void)state;
    assert_string_equal(util_config_closest_name(tables, 2, "STRATA_LOG_LEVL", buf, sizeof(buf)),
                        "STRATA_LOG_LEVEL");
    assert_string_equal(util_config_closest_name(tables, 2, "STRATA_TEST_CFG_TIMEOUTS", buf,
                                                 sizeof(buf)),
                        "STRATA_TEST_CFG_TIMEOUT");
    assert_null(util_config_closest_name(tables, 2, "STRATA_SOMETHING_ELSE_ENTIRELY", buf,
                                         sizeof(buf)));
}

static int warnings;
static char last_warning[512];

static void capture(strata_log_level_t level, const char *line, void *arg)
{
    (void)arg;
    if (level == STRATA_LOG_LEVEL_WARN) {
        ++warnings;
        snprintf(last_warning, sizeof(last_warning), "%s", line);
    }
}

static void test_warn_unknown(void **state)
{
    const util_config_table_t *tables[] = {&util_log_config_table};

    (void)state;
    util_log_set_handler(capture, NULL);
    setenv("STRATA_LOG_LEVL", "debug", 1);
    setenv("STRATA_TEST_ANYTHING", "1", 1); /* the test suite's prefix is exempt */
    warnings = 0;
    assert_int_equal(util_config_warn_unknown(tables, 1), 1);
    assert_int_equal(warnings, 1);
    assert_non_null(strstr(last_warning, "STRATA_LOG_LEVL"));
    assert_non_null(strstr(last_warning, "did you mean STRATA_LOG_LEVEL?"));
    unsetenv("STRATA_LOG_LEVL");
    unsetenv("STRATA_TEST_ANYTHING");
    assert_int_equal(util_config_warn_unknown(tables, 1), 0);
    util_log_set_handler(NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_units),
        cmocka_unit_test(test_time_units),
        cmocka_unit_test(test_int_bool_enum),
        cmocka_unit_test(test_real),
        cmocka_unit_test(test_error_is_one_line),
        cmocka_unit_test(test_read_defaults_and_env),
        cmocka_unit_test(test_closest_name),
        cmocka_unit_test(test_warn_unknown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
