/*
 * The transport registry: every transport built is found by name and runs its probe; an
 * unknown name is a configuration error and a known one not built is unsupported, both
 * said with the alternatives; auto picks the best probe, and a transport whose own
 * variables the user set wins it.
 */
#include "inter/transport.h"

#include "common/log_capture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static const inter_transport_params_t test_params = {.rank = 0, .world_size = 2, .iface = "",
                                                      .msg_bytes = 4096};

/* Whether a captured line contains every one of the words. */
static bool test_logged(const char *a, const char *b)
{
    for (int i = 0; i < log_capture.count && i < LOG_CAPTURE_LINES; ++i) {
        if (strstr(log_capture.lines[i], a) && strstr(log_capture.lines[i], b)) {
            return true;
        }
    }
    return false;
}

static void test_built_are_found(void **state)
{
    (void)state;
    assert_non_null(inter_transport_built(0));
    assert_ptr_equal(inter_transport_find("ofi"), inter_transport_find("ofi"));
    assert_non_null(inter_transport_find("ofi"));
    assert_null(inter_transport_find(NULL));
    assert_null(inter_transport_find("OFI"));
    assert_null(inter_transport_built(-1));
    for (int i = 0; inter_transport_built(i) != NULL; ++i) {
        const inter_transport_ops_t *ops = inter_transport_built(i);
        bool known = false;

        assert_ptr_equal(inter_transport_find(ops->name), ops);
        assert_non_null(ops->probe);
        assert_non_null(ops->post);
        assert_non_null(ops->poll);
        for (int k = 0; inter_transport_known(k) != NULL; ++k) {
            known = known || strcmp(inter_transport_known(k), ops->name) == 0;
        }
        assert_true(known);
    }
    assert_null(inter_transport_known(3));
}

static void test_unknown_name_is_config(void **state)
{
    const inter_transport_ops_t *ops = NULL;
    char why[160];

    (void)state;
    log_capture_start();
    assert_int_equal(inter_transport_select("rdma", &test_params, &ops, why, sizeof(why)),
                     STRATA_ERR_CONFIG);
    log_capture_stop();
    assert_null(ops);
    assert_true(test_logged("STRATA_INTER_TRANSPORT=rdma", "no such transport"));
    assert_true(test_logged("STRATA_INTER_TRANSPORT=rdma", "this build has"));
    assert_true(test_logged("this build has", "ofi"));
    log_capture_start();
    assert_int_equal(inter_transport_select("", &test_params, &ops, why, sizeof(why)),
                     STRATA_ERR_CONFIG);
    log_capture_stop();
}

/* Known transports that this build left out are unsupported, not unknown. */
static void test_not_built_is_unsupported(void **state)
{
    char why[160];

    (void)state;
    for (int k = 0; inter_transport_known(k) != NULL; ++k) {
        const char *name = inter_transport_known(k);
        const inter_transport_ops_t *ops = NULL;

        if (inter_transport_find(name) != NULL) {
            continue;
        }
        log_capture_start();
        assert_int_equal(inter_transport_select(name, &test_params, &ops, why, sizeof(why)),
                         STRATA_ERR_UNSUPPORTED);
        log_capture_stop();
        assert_null(ops);
        assert_true(test_logged(name, "not built in"));
    }
}

static void test_auto_picks_a_probe(void **state)
{
    const inter_transport_ops_t *ops = NULL;
    inter_probe_t probe = {0};
    char why[256] = "";

    (void)state;
    assert_int_equal(inter_transport_select("auto", &test_params, &ops, why, sizeof(why)),
                     STRATA_OK);
    assert_non_null(ops);
    assert_true(strncmp(why, "auto: ", 6) == 0);
    ops->probe(&test_params, &probe);
    assert_true(probe.score > INTER_PROBE_NONE);
    assert_string_equal(why + 6, probe.why);
    /* Nothing built scores higher than the pick. */
    for (int i = 0; inter_transport_built(i) != NULL; ++i) {
        inter_probe_t other = {0};

        inter_transport_built(i)->probe(&test_params, &other);
        assert_true(other.score <= probe.score);
    }
}

/* STRATA_INTER_PROVIDER is ofi's own variable: setting it makes auto take ofi. */
static void test_provider_set_asks_for_ofi(void **state)
{
    const inter_transport_ops_t *ops = NULL;
    inter_probe_t probe = {0};
    char why[256] = "";

    (void)state;
    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    inter_transport_find("ofi")->probe(&test_params, &probe);
    assert_int_equal(probe.score, INTER_PROBE_ASKED);
    assert_int_equal(inter_transport_select("auto", &test_params, &ops, why, sizeof(why)),
                     STRATA_OK);
    assert_ptr_equal(ops, inter_transport_find("ofi"));
    assert_non_null(strstr(why, "STRATA_INTER_PROVIDER=tcp"));
    /* A provider libfabric does not have cannot run: named, it is refused. */
    setenv("STRATA_INTER_PROVIDER", "psm9", 1);
    log_capture_start();
    assert_int_equal(inter_transport_select("ofi", &test_params, &ops, why, sizeof(why)),
                     STRATA_ERR_UNSUPPORTED);
    log_capture_stop();
    assert_true(test_logged("STRATA_INTER_PROVIDER=psm9", "cannot run here"));
    unsetenv("STRATA_INTER_PROVIDER");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_built_are_found),
        cmocka_unit_test(test_unknown_name_is_config),
        cmocka_unit_test(test_not_built_is_unsupported),
        cmocka_unit_test(test_auto_picks_a_probe),
        cmocka_unit_test(test_provider_set_asks_for_ofi),
    };

    unsetenv("STRATA_INTER_PROVIDER");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
