/*
 * Public API basics: version, status strings, build options, the config registry.
 */
#include "api/api.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>

static void test_version(void **state)
{
    unsigned major, minor, patch;
    char expect[32];

    (void)state;
    strata_get_version(&major, &minor, &patch);
    assert_int_equal(major, STRATA_VERSION_MAJOR);
    assert_int_equal(minor, STRATA_VERSION_MINOR);
    assert_int_equal(patch, STRATA_VERSION_PATCH);
    snprintf(expect, sizeof(expect), "%u.%u.%u", major, minor, patch);
    assert_string_equal(strata_get_version_string(), expect);
    assert_non_null(strstr(strata_get_build_options(), "cuda="));
}

static void test_status_strings(void **state)
{
    static const strata_status_t all[] = {
        STRATA_OK, STRATA_INPROGRESS, STRATA_ERR_INVALID, STRATA_ERR_NO_MEMORY,
        STRATA_ERR_UNSUPPORTED, STRATA_ERR_TIMEOUT, STRATA_ERR_CANCELLED, STRATA_ERR_NOT_FOUND,
        STRATA_ERR_IO, STRATA_ERR_INTERNAL, STRATA_ERR_BUSY, STRATA_ERR_PEER_FAILED,
        STRATA_ERR_TRANSPORT, STRATA_ERR_BOOTSTRAP, STRATA_ERR_PARSE, STRATA_ERR_TOPOLOGY,
        STRATA_ERR_CONFIG, STRATA_ERR_CAPACITY,
    };

    (void)state;
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(all); ++i) {
        assert_string_not_equal(strata_status_string(all[i]), "unknown status");
        for (size_t j = 0; j < i; ++j) {
            assert_string_not_equal(strata_status_string(all[i]), strata_status_string(all[j]));
        }
        assert_true(all[i] <= STRATA_INPROGRESS && (all[i] >= 0 || all[i] > STRATA_ERR_LAST));
    }
    assert_string_equal(strata_status_string((strata_status_t)-99), "unknown status");
}

static void test_config_registry(void **state)
{
    char a[128], b[UTIL_REASON_LEN];
    bool log_level = false, topo_file = false;

    (void)state;
    for (size_t t = 0; t < api_num_config_tables; ++t) {
        for (size_t i = 0; i < api_config_tables[t]->num_fields; ++i) {
            const util_config_field_t *field = &api_config_tables[t]->fields[i];
            char value[64];

            snprintf(a, sizeof(a), "%s", field->name);
            log_level = log_level || strcmp(a, "LOG_LEVEL") == 0;
            topo_file = topo_file || strcmp(a, "TOPO_FILE") == 0;
            /* Every default parses, and names are unique across layers. */
            assert_int_equal(util_config_parse_value(field, field->default_value, value, b),
                             STRATA_OK);
            if (field->type == UTIL_CONFIG_STRING) {
                free(*(char **)value);
            }
            for (size_t u = 0; u <= t; ++u) {
                for (size_t j = 0; j < api_config_tables[u]->num_fields; ++j) {
                    if (u == t && j == i) {
                        continue;
                    }
                    assert_string_not_equal(api_config_tables[u]->fields[j].name, a);
                }
            }
        }
    }
    assert_true(log_level && topo_file);
}

static void *last_error_elsewhere(void *arg)
{
    (void)arg;
    return (void *)strata_get_last_error(); /* this thread's: nothing failed here */
}

/* Why the last call failed, in the library's words: set by the error it logged, the calling
 * thread's alone, and gone once cleared. */
static void test_last_error(void **state)
{
    strata_comm_t *comm = NULL;
    pthread_t thread;
    void *other;

    (void)state;
    strata_clear_last_error();
    assert_string_equal(strata_get_last_error(), "");
    assert_int_equal(strata_comm_create(NULL, NULL, &comm), STRATA_ERR_INVALID);
    assert_non_null(strstr(strata_get_last_error(), "bootstrap"));
    assert_int_equal(pthread_create(&thread, NULL, last_error_elsewhere, NULL), 0);
    assert_int_equal(pthread_join(thread, &other), 0);
    assert_string_equal((const char *)other, "");
    strata_clear_last_error();
    assert_string_equal(strata_get_last_error(), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_config_registry),
        cmocka_unit_test(test_last_error),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
