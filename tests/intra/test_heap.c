/*
 * Symmetric heap with real processes: every rank sees every peer's region, symmetric
 * allocations agree, stores into a peer's region are seen there (release/acquire flags),
 * a missing rank is a timeout, a rank that died ends the rendezvous at once (through the
 * caller's peer check), and bad allocations are refused. The ranks' GPUs: host memory
 * under GPU addresses that a test backend gives each rank, to count the ranks sharing one
 * GPU and to refuse GPUs without peer atomics. Who may join: test_heap_access.c.
 */
#include "intra/host/host_device.h"
#include "util/util.h"

#include <grp.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "intra/heap_ranks.h"

static void run(int size)
{
    char key[64];
    pid_t pids[8];
    int status;

    snprintf(key, sizeof(key), "test-%d-%d", (int)getpid(), size);
    for (int r = 0; r < size; ++r) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            alarm(30);
            _exit(rank_main(r, size, key));
        }
    }
    for (int r = 0; r < size; ++r) {
        assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fail_msg("%d ranks: rank %d ended with status 0x%x", size, r, status);
        }
    }
}

static void test_2_3_4_ranks(void **state)
{
    (void)state;
    run(2);
    run(3);
    run(4);
}

static void test_missing_rank_times_out(void **state)
{
    intra_heap_params_t p = {.device = &host_device_ops, .local_rank = 1, .local_size = 2,
                             .size = 4096, .job_key = "test-nobody-listens", .timeout_ns = 300 * UTIL_NSEC_PER_MSEC};
    uint64_t start = util_clock_now_ns();
    intra_heap_t *heap = NULL;

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    assert_int_equal(intra_heap_create(&p, &heap), STRATA_ERR_TIMEOUT);
    assert_null(heap);
    assert_true(util_clock_now_ns() - start < 3 * UTIL_NSEC_PER_SEC);
}

/* The peer check the engine stands for here: the other local rank, a child, has ended. */
static pid_t dead_candidate;

static strata_status_t child_alive(void *ctx)
{
    (void)ctx;
    return waitpid(dead_candidate, NULL, WNOHANG) == 0 ? STRATA_OK : STRATA_ERR_PEER_FAILED;
}

/* Local rank `dies` of 2 exits before it reaches the rendezvous (local rank 0: before its
 * bind; local rank 1: before its connect); the other, this process, must learn it from its
 * peer check within a second or so, not at the 60 s timeout. */
static void rank_dies_before_rendezvous(int dies)
{
    char key[64];
    intra_heap_params_t p = {.device = &host_device_ops, .local_rank = 1 - dies,
                             .local_size = 2, .size = 4096, .job_key = key,
                             .timeout_ns = 60 * UTIL_NSEC_PER_SEC, .peer_check = child_alive};
    intra_heap_t *heap = NULL;
    uint64_t start;

    snprintf(key, sizeof(key), "test-dies-%d-%d", (int)getpid(), dies);
    dead_candidate = fork();
    assert_true(dead_candidate >= 0);
    if (dead_candidate == 0) {
        usleep(200000); /* the survivor is waiting by now */
        _exit(9);
    }
    start = util_clock_now_ns();
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    assert_int_equal(intra_heap_create(&p, &heap), STRATA_ERR_PEER_FAILED);
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    assert_null(heap);
    assert_true(util_clock_now_ns() - start < 3 * UTIL_NSEC_PER_SEC);
}

static void test_dead_rank_ends_the_rendezvous(void **state)
{
    (void)state;
    rank_dies_before_rendezvous(1); /* before its connect: local rank 0 stops listening */
    rank_dies_before_rendezvous(0); /* before its bind: local rank 1 stops connecting */
}

static void test_allocation_rules(void **state)
{
    intra_heap_params_t p = {.device = &host_device_ops, .local_rank = 0, .local_size = 1,
                             .size = 10000, .job_key = "test-alone", .timeout_ns = UTIL_NSEC_PER_SEC};
    intra_heap_t *heap;
    size_t a, b;

    (void)state;
    assert_int_equal(intra_heap_create(&p, &heap), STRATA_OK);
    assert_int_equal(intra_heap_size(heap) % 4096, 0);
    assert_int_equal(intra_heap_alloc(heap, "a", 100, 8, &a), STRATA_OK);
    assert_int_equal(intra_heap_alloc(heap, "b", 100, 256, &b), STRATA_OK);
    assert_int_equal(a, 0);
    assert_int_equal(b, 256);
    assert_int_equal(intra_heap_alloc(heap, "a", 8, 8, &a), STRATA_ERR_INVALID);   /* twice */
    assert_int_equal(intra_heap_alloc(heap, "c", 0, 8, &a), STRATA_ERR_INVALID);   /* empty */
    assert_int_equal(intra_heap_alloc(heap, "c", 8, 12, &a), STRATA_ERR_INVALID);  /* align */
    assert_int_equal(intra_heap_alloc(heap, "c", 1u << 20, 8, &a), STRATA_ERR_NO_MEMORY);
    assert_int_equal(intra_heap_find(heap, "nope", &a), STRATA_ERR_NOT_FOUND);
    assert_null(intra_heap_base(heap, 1));
    intra_heap_destroy(heap);
    p.local_size = 0;
    assert_int_equal(intra_heap_create(&p, &heap), STRATA_ERR_INVALID);
}

/* The host backend, with a GPU address per process and a GPU without peer atomics. */
static const char *test_bus_id = "";
static const char *test_isolated_bus_id = "";

static strata_status_t test_device_bus_id(char *bus_id)
{
    snprintf(bus_id, INTRA_BUS_ID_LEN, "%s", test_bus_id);
    return STRATA_OK;
}

static strata_status_t test_peer_atomics(const char *peer_bus_id, char *reason)
{
    if (strcmp(peer_bus_id, test_isolated_bus_id) == 0 ||
        strcmp(test_bus_id, test_isolated_bus_id) == 0) {
        util_reason(reason, "no NVLink between %s and %s", test_bus_id,
                    peer_bus_id);
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

/* Each rank creates a heap on its GPU; exit code: 0 as expected, 1 not, 2 creation failed. */
static int gpu_rank_main(int rank, int size, const char *key, int expect_sharers)
{
    intra_device_ops_t ops = host_device_ops;
    intra_heap_params_t p = {.device = &ops, .local_rank = rank, .local_size = size,
                             .size = 4096, .job_key = key, .timeout_ns = WAIT_NS};
    intra_heap_t *heap;
    int sharers;

    ops.device_bus_id = test_device_bus_id;
    ops.peer_atomics  = test_peer_atomics;
    if (intra_heap_create(&p, &heap) != STRATA_OK) {
        return 2;
    }
    sharers = intra_heap_gpu_sharers(heap);
    intra_heap_destroy(heap);
    return sharers == expect_sharers ? 0 : 1;
}

/* Ranks on the GPUs bus_ids[rank], sharers[rank] of them on each one's GPU as its heap must
 * count; each must end with expect_code. */
static void run_gpus(int size, const char *const *bus_ids, const char *isolated,
                     const int *sharers, int expect_code)
{
    char key[64];
    pid_t pids[8];
    int status;

    snprintf(key, sizeof(key), "test-gpus-%d-%d", (int)getpid(), size);
    for (int r = 0; r < size; ++r) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            alarm(30);
            util_log_set_level(STRATA_LOG_LEVEL_ERROR);
            test_bus_id          = bus_ids[r];
            test_isolated_bus_id = isolated;
            _exit(gpu_rank_main(r, size, key, sharers[r]));
        }
    }
    for (int r = 0; r < size; ++r) {
        assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != expect_code) {
            fail_msg("rank %d on GPU %s ended with status 0x%x, not code %d", r, bus_ids[r],
                     status, expect_code);
        }
    }
}

static void test_ranks_sharing_a_gpu(void **state)
{
    const char *const bus_ids[] = {"0000:18:00.0", "0000:2a:00.0", "0000:18:00.0",
                                   "0000:18:00.0"};
    const char *const upper[]   = {"0000:2A:00.0", "0000:2a:00.0"};
    const int sharers[] = {3, 1, 3, 3}, alone[] = {2, 2};

    (void)state;
    run_gpus(4, bus_ids, "", sharers, 0);
    run_gpus(2, upper, "", alone, 0); /* the same GPU, however the runtime spells it */
}

static void test_gpus_without_peer_atomics_are_refused(void **state)
{
    const char *const bus_ids[] = {"0000:18:00.0", "0000:2a:00.0", "0000:18:00.0"};
    const int sharers[] = {2, 1, 2};

    (void)state;
    run_gpus(3, bus_ids, "0000:2a:00.0", sharers, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_2_3_4_ranks),
        cmocka_unit_test(test_missing_rank_times_out),
        cmocka_unit_test(test_dead_rank_ends_the_rendezvous),
        cmocka_unit_test(test_allocation_rules),
        cmocka_unit_test(test_ranks_sharing_a_gpu),
        cmocka_unit_test(test_gpus_without_peer_atomics_are_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
