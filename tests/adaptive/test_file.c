/*
 * Policy and mode files: a saved policy reads back the same; partial files keep the
 * defaults; every malformed file is refused with STRATA_ERR_PARSE (or NOT_FOUND) and
 * changes nothing; mask files set exactly the listed experts.
 */
#include "adaptive/adapt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/log_capture.h"

static char test_dir[] = "/tmp/strata-adapt-XXXXXX";

static int test_setup(void **state)
{
    (void)state;
    return mkdtemp(test_dir) == NULL ? -1 : 0;
}

static int test_teardown(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *test_write(const char *name, const char *text)
{
    static char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", test_dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_round_trip(void **state)
{
    adapt_policy_params_t saved, loaded;
    char path[256];

    (void)state;
    adapt_policy_defaults(&saved);
    saved.alpha   = 0.55;
    saved.margin  = 0.07;
    saved.noise_k = 0.5;
    saved.dwell   = 4;
    saved.initial = ADAPT_MODE_PULL;
    saved.model.link[ADAPT_TIER_INTER][ADAPT_MODE_PULL].beta_Bps = 12.5e9;
    saved.model.pull_rtt_s[ADAPT_TIER_INTER]                     = 7.25e-6;
    snprintf(path, sizeof(path), "%s/policy.json", test_dir);
    assert_int_equal(adapt_policy_save(path, &saved), STRATA_OK);
    assert_int_equal(adapt_policy_load(path, &loaded), STRATA_OK);
    assert_float_equal(loaded.alpha, 0.55, 1e-12);
    assert_float_equal(loaded.margin, 0.07, 1e-12);
    assert_float_equal(loaded.noise_k, 0.5, 1e-12);
    assert_int_equal(loaded.dwell, 4);
    assert_int_equal(loaded.initial, ADAPT_MODE_PULL);
    for (int t = 0; t < ADAPT_TIERS; ++t) {
        for (int m = 0; m < ADAPT_MODES; ++m) {
            assert_float_equal(loaded.model.link[t][m].alpha_s, saved.model.link[t][m].alpha_s,
                               1e-15);
            assert_float_equal(loaded.model.link[t][m].beta_Bps,
                               saved.model.link[t][m].beta_Bps, 1.0);
        }
        assert_float_equal(loaded.model.pull_rtt_s[t], saved.model.pull_rtt_s[t], 1e-15);
    }
}

static void test_partial(void **state)
{
    adapt_policy_params_t p, defaults;

    (void)state;
    adapt_policy_defaults(&defaults);
    assert_int_equal(adapt_policy_parse("{\"format\": \"strata-policy\", \"version\": 1, "
                                        "\"dwell\": 7, \"model\": {\"inter\": {\"pull\": "
                                        "{\"alpha_us\": 9}}}}", "partial", &p),
                     STRATA_OK);
    assert_int_equal(p.dwell, 7);
    assert_float_equal(p.model.link[ADAPT_TIER_INTER][ADAPT_MODE_PULL].alpha_s, 9e-6, 1e-15);
    assert_float_equal(p.model.link[ADAPT_TIER_INTER][ADAPT_MODE_PULL].beta_Bps,
                       defaults.model.link[ADAPT_TIER_INTER][ADAPT_MODE_PULL].beta_Bps, 1.0);
    assert_float_equal(p.alpha, defaults.alpha, 1e-12);
}

static void test_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "[1, 2]",
        "{\"version\": 1}",
        "{\"format\": \"strata-modes\", \"version\": 1}",
        "{\"format\": \"strata-policy\", \"version\": 2}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"alpah\": 0.3}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"alpha\": \"high\"}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"alpha\": 1.5}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"dwell\": 2.5}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"dwell\": 0}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"initial\": \"both\"}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"model\": []}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"model\": {\"nvlink\": {}}}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"model\": {\"inter\": {\"push\": "
        "{\"beta_GBps\": 0}}}}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"model\": {\"intra\": {\"pull\": "
        "{\"alpha_us\": -1}}}}",
        "{\"format\": \"strata-policy\", \"version\": 1, \"margin\": 0.1, \"margin\": 0.2}",
    };
    adapt_policy_params_t p, before;

    (void)state;
    memset(&p, 0x5a, sizeof(p));
    before = p;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        strata_status_t status = adapt_policy_parse(bad[i], "bad", &p);

        if (status != STRATA_ERR_PARSE && status != STRATA_ERR_INVALID) {
            print_error("accepted: %s\n", bad[i]);
            fail();
        }
        assert_memory_equal(&p, &before, sizeof(p));
    }
    assert_int_equal(adapt_policy_load("/nonexistent/policy.json", &p), STRATA_ERR_NOT_FOUND);
}

static void test_masks(void **state)
{
    uint64_t mask[2] = {0, 0}, untouched[2] = {7, 7};

    (void)state;
    assert_int_equal(adapt_mask_load(test_write("modes.json", "{\"format\": \"strata-modes\", "
                                                "\"version\": 1, \"num_experts\": 70, "
                                                "\"pull\": [0, 63, 64, 69]}"),
                                     70, mask),
                     STRATA_OK);
    assert_true(mask[0] == (UINT64_C(1) | UINT64_C(1) << 63));
    assert_true(mask[1] == (UINT64_C(1) | UINT64_C(1) << 5));
    assert_int_equal(adapt_mask_load(test_write("range.json", "{\"format\": \"strata-modes\", "
                                                "\"version\": 1, \"num_experts\": 70, "
                                                "\"pull\": [70]}"),
                                     70, untouched),
                     STRATA_ERR_PARSE);
    assert_int_equal(adapt_mask_load(test_write("twice.json", "{\"format\": \"strata-modes\", "
                                                "\"version\": 1, \"num_experts\": 70, "
                                                "\"pull\": [3, 3]}"),
                                     70, untouched),
                     STRATA_ERR_PARSE);
    assert_int_equal(adapt_mask_load(test_write("count.json", "{\"format\": \"strata-modes\", "
                                                "\"version\": 1, \"num_experts\": 64, "
                                                "\"pull\": []}"),
                                     70, untouched),
                     STRATA_ERR_PARSE);
    assert_true(untouched[0] == 7 && untouched[1] == 7);
}

/* Only a regular file is read: a FIFO (which would block in open) and a device (which never
 * ends) are refused at once, naming the file; so is a file of more than 16 MiB. */
static void test_not_a_file(void **state)
{
    char fifo[64], big[64];
    adapt_policy_params_t params;
    uint64_t mask[1];
    FILE *file;

    (void)state;
    snprintf(fifo, sizeof(fifo), "%s/fifo.json", test_dir);
    snprintf(big, sizeof(big), "%s/big.json", test_dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    log_capture_start();
    assert_int_equal(adapt_policy_load(fifo, &params), STRATA_ERR_IO);
    assert_int_equal(adapt_mask_load(fifo, 8, mask), STRATA_ERR_IO);
    assert_int_equal(adapt_policy_load("/dev/zero", &params), STRATA_ERR_IO);
    assert_int_equal(adapt_mask_load("/dev/zero", 8, mask), STRATA_ERR_IO);
    assert_int_equal(adapt_policy_load(test_dir, &params), STRATA_ERR_IO);
    file = fopen(big, "w");
    assert_non_null(file);
    assert_int_equal(fseek(file, (16L << 20) + 1, SEEK_SET), 0);
    fputc('}', file);
    fclose(file);
    assert_int_equal(adapt_policy_load(big, &params), STRATA_ERR_PARSE);
    log_capture_stop();
    assert_true(log_captured(fifo, "not a regular file but a FIFO", NULL));
    assert_true(log_captured("/dev/zero", "not a regular file but a device", NULL));
    assert_true(log_captured(big, "is larger than the 16777216", NULL));
    unlink(fifo);
    unlink(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_partial),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_not_a_file),
    };

    return cmocka_run_group_tests(tests, test_setup, test_teardown);
}
