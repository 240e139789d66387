/*
 * The MoE object's mode selection on one rank: bad modes and mode files, and route or dtype
 * values outside their enums, are refused at creation with a clear status; a fixed mask file sets the masks the stats report; in
 * adaptive mode set_pull_mask is refused and the steps still complete.
 */
#include <strata/strata.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/log_capture.h"
#include "common/one_rank.h"

#define EXPERTS 8
#define HIDDEN  64
#define TOKENS  4

static int setup(void **state)
{
    strata_comm_t *comm = NULL;

    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    if (strata_comm_create(NULL, &one_rank, &comm) != STRATA_OK) {
        return -1;
    }
    *state = comm;
    return 0;
}

static int teardown(void **state)
{
    strata_comm_destroy(*state);
    return 0;
}

static strata_moe_params_t params(strata_moe_mode_t mode, const char *file)
{
    return (strata_moe_params_t){.num_experts = EXPERTS, .topk = 2, .hidden = HIDDEN,
                                 .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                                 .max_tokens = TOKENS, .mode = mode, .mode_file = file};
}

static strata_status_t create(strata_comm_t *comm, strata_moe_mode_t mode, const char *file,
                              const char *env)
{
    strata_moe_params_t p = params(mode, file);
    strata_moe_t *moe = NULL;
    strata_status_t status;

    if (env != NULL) {
        setenv("STRATA_MOE_MODE", env, 1);
    }
    status = strata_moe_create(comm, &p, &moe);
    unsetenv("STRATA_MOE_MODE");
    assert_true((status == STRATA_OK) == (moe != NULL));
    strata_moe_destroy(moe);
    return status;
}

static void test_bad_modes(void **state)
{
    strata_comm_t *comm = *state;

    assert_int_equal(create(comm, STRATA_MOE_MODE_FIXED, NULL, NULL), STRATA_ERR_INVALID);
    assert_int_equal(create(comm, (strata_moe_mode_t)9, NULL, NULL), STRATA_ERR_INVALID);
    assert_int_equal(create(comm, STRATA_MOE_MODE_DEFAULT, NULL, "adaptiv"), STRATA_ERR_CONFIG);
    assert_int_equal(create(comm, STRATA_MOE_MODE_DEFAULT, NULL, "fixed:"), STRATA_ERR_CONFIG);
    assert_int_equal(create(comm, STRATA_MOE_MODE_DEFAULT, NULL, "fixed:/nonexistent/m.json"),
                     STRATA_ERR_NOT_FOUND);
    assert_int_equal(create(comm, STRATA_MOE_MODE_ADAPTIVE, "/nonexistent/p.json", NULL),
                     STRATA_ERR_NOT_FOUND);
    assert_int_equal(create(comm, STRATA_MOE_MODE_DEFAULT, NULL, "pull"), STRATA_OK);
}

/* Enum fields outside their enums are refused before anything is allocated, by name. */
static void test_bad_enums(void **state)
{
    static const struct {
        int route, mode, dtype, combine_dtype;
        const char *says;
    } bad[] = {
        {9, STRATA_MOE_MODE_PUSH, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, "route 9 "},
        {-3, STRATA_MOE_MODE_PUSH, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, "route -3 "},
        {STRATA_MOE_ROUTE_HIERARCHICAL + 1, STRATA_MOE_MODE_PUSH, STRATA_DTYPE_BF16,
         STRATA_DTYPE_BF16, "route 3 "},
        {STRATA_MOE_ROUTE_FLAT, -3, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, "mode -3 "},
        {STRATA_MOE_ROUTE_FLAT, STRATA_MOE_MODE_PUSH, 7, STRATA_DTYPE_BF16, "dtype 7 "},
        {STRATA_MOE_ROUTE_FLAT, STRATA_MOE_MODE_PUSH, STRATA_DTYPE_BF16, -1, "dtype -1 "},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        strata_moe_params_t p = params((strata_moe_mode_t)bad[i].mode, NULL);
        strata_moe_t *moe = NULL;

        p.route         = (strata_moe_route_t)bad[i].route;
        p.dtype         = (strata_dtype_t)bad[i].dtype;
        p.combine_dtype = (strata_dtype_t)bad[i].combine_dtype;
        log_capture_start();
        assert_int_equal(strata_moe_create(*state, &p, &moe), STRATA_ERR_INVALID);
        log_capture_stop();
        assert_null(moe);
        assert_true(log_captured(bad[i].says, NULL, NULL));
    }
    for (int route = STRATA_MOE_ROUTE_DEFAULT; route <= STRATA_MOE_ROUTE_HIERARCHICAL; ++route) {
        strata_moe_params_t p = params(STRATA_MOE_MODE_PUSH, NULL);
        strata_moe_t *moe = NULL;

        p.route = (strata_moe_route_t)route;
        assert_int_equal(strata_moe_create(*state, &p, &moe), STRATA_OK);
        strata_moe_destroy(moe);
    }
}

/* One step of TOKENS tokens, each to experts t and t + 1; the stats' pull mask after it. */
static uint64_t one_step(strata_moe_t *moe)
{
    static uint16_t x[TOKENS * HIDDEN] __attribute__((aligned(16)));
    static uint16_t out[TOKENS * HIDDEN] __attribute__((aligned(16)));
    int64_t idx[TOKENS * 2];
    float weights[TOKENS * 2];
    strata_moe_recv_t recv;
    strata_moe_stats_t stats;

    for (int t = 0; t < TOKENS; ++t) {
        idx[2 * t]         = t;
        idx[2 * t + 1]     = t + 1;
        weights[2 * t]     = 0.5f;
        weights[2 * t + 1] = 0.5f;
    }
    assert_int_equal(strata_moe_dispatch(moe, x, NULL, idx, TOKENS, &recv), STRATA_OK);
    assert_int_equal(strata_moe_combine(moe, NULL, weights, out), STRATA_OK);
    assert_int_equal(strata_moe_get_stats(moe, &stats), STRATA_OK);
    return stats.pull_mask[0];
}

static void test_fixed_file(void **state)
{
    char path[] = "/tmp/strata-modes-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    strata_moe_params_t p = params(STRATA_MOE_MODE_FIXED, path);
    strata_moe_t *moe;

    assert_non_null(f);
    fprintf(f, "{\"format\": \"strata-modes\", \"version\": 1, \"num_experts\": %d, "
               "\"pull\": [1, 6]}", EXPERTS);
    fclose(f);
    assert_int_equal(strata_moe_create(*state, &p, &moe), STRATA_OK);
    remove(path); /* read at creation only */
    assert_true(one_step(moe) == ((UINT64_C(1) << 1) | (UINT64_C(1) << 6)));
    strata_moe_destroy(moe);
}

static void test_adaptive(void **state)
{
    strata_moe_params_t p = params(STRATA_MOE_MODE_ADAPTIVE, NULL);
    uint64_t mask[1] = {0};
    strata_moe_t *moe;

    assert_int_equal(strata_moe_create(*state, &p, &moe), STRATA_OK);
    assert_int_equal(strata_moe_set_pull_mask(moe, mask, mask), STRATA_ERR_INVALID);
    for (int step = 0; step < 6; ++step) {
        /* One node: only experts 0..4 get tokens, and the owner sees them all; the idle
         * experts 5..7 cost Push a flag wait and Pull nothing, so they go to Pull. */
        uint64_t modes = one_step(moe);

        if (step >= 5) {
            assert_true((modes & 0xe0u) == 0xe0u);
        }
    }
    strata_moe_destroy(moe);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_modes),
        cmocka_unit_test(test_bad_enums),
        cmocka_unit_test(test_fixed_file),
        cmocka_unit_test(test_adaptive),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
