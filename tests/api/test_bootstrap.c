/*
 * The TCP rendezvous with real processes on loopback: allgather and barrier results, a
 * root that never appears, a rank that dies mid-collective, launcher variables. The
 * launcher's local rank, beside its rank and size, picks a communicator's GPU, and a
 * disagreement with the node grouping is logged (at info level only where node names are
 * given). The shared secret and attacks on the rendezvous: test_bootstrap_secret.c.
 */
#include "api/api.h"

#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/log_capture.h"
#include "common/one_rank.h"

#include "api/bootstrap_ranks.h"

/* Allgather blocks of several sizes, each rank's block a pattern of (rank, round). */
static int allgather_rounds(int rank, int world, uint16_t port)
{
    static const size_t sizes[] = {1, 8, 1000, 65536, 0, 3};
    strata_bootstrap_t *bs;
    unsigned char *send, *recv;

    if (strata_bootstrap_tcp_create("127.0.0.1", port, rank, world, 10000, &bs) != STRATA_OK) {
        return 10;
    }
    send = malloc(65536);
    recv = malloc(65536 * (size_t)world);
    for (size_t round = 0; round < sizeof(sizes) / sizeof(sizes[0]); ++round) {
        for (size_t i = 0; i < sizes[round]; ++i) {
            send[i] = (unsigned char)(rank * 31 + round * 7 + i);
        }
        if (bs->allgather(bs->ctx, send, recv, sizes[round]) != STRATA_OK) {
            return 11;
        }
        for (int r = 0; r < world; ++r) {
            for (size_t i = 0; i < sizes[round]; ++i) {
                if (recv[(size_t)r * sizes[round] + i] != (unsigned char)(r * 31 + round * 7 + i)) {
                    return 12;
                }
            }
        }
        if (bs->barrier(bs->ctx) != STRATA_OK) {
            return 13;
        }
    }
    free(send);
    free(recv);
    strata_bootstrap_destroy(bs);
    return 0;
}

static void test_allgather_2_and_4_ranks(void **state)
{
    int codes[MAX_RANKS];

    (void)state;
    for (int world = 1; world <= 4; world *= 2) {
        run_ranks(world, allgather_rounds, codes);
        for (int r = 0; r < world; ++r) {
            if (codes[r] != 0) {
                fail_msg("world %d: rank %d exited %d", world, r, codes[r]);
            }
        }
    }
}

/* Rank 1 alone: nobody listens; it must give up with a timeout close to the one asked. */
static int lonely_rank(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    uint64_t start = util_clock_now_ns(), elapsed;
    strata_status_t status;

    (void)rank;
    (void)world;
    status = strata_bootstrap_tcp_create("127.0.0.1", port, 1, 2, 300, &bs);
    elapsed = util_clock_now_ns() - start;
    if (status != STRATA_ERR_TIMEOUT || bs != NULL) {
        return 20;
    }
    return (elapsed >= 250 * UTIL_NSEC_PER_MSEC && elapsed < 3 * UTIL_NSEC_PER_SEC) ? 0 : 21;
}

static void test_root_never_appears(void **state)
{
    int codes[1];

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    run_ranks(1, lonely_rank, codes);
    assert_int_equal(codes[0], 0);
}

/* Rank 2 of 3 joins, then dies before the first collective: the others fail, not hang. */
static int dies_mid_collective(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs;
    int value = rank, all[MAX_RANKS];
    strata_status_t status;

    if (strata_bootstrap_tcp_create("127.0.0.1", port, rank, world, 2000, &bs) != STRATA_OK) {
        return 30;
    }
    if (rank == 2) {
        _exit(0);
    }
    status = bs->allgather(bs->ctx, &value, all, sizeof(value));
    if (status == STRATA_OK) {
        return 31;
    }
    strata_bootstrap_destroy(bs);
    return (status == STRATA_ERR_BOOTSTRAP || status == STRATA_ERR_TIMEOUT) ? 0 : 32;
}

static void test_rank_dies(void **state)
{
    int codes[3];

    (void)state;
    run_ranks(3, dies_mid_collective, codes);
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[1], 0);
    assert_int_equal(codes[2], 0);
}

/* Rank 0 of 2 and a stray rank that believes in 3 ranks: refused at once, not at its timeout;
 * the real rank 1 then completes the rendezvous. */
static int mismatched_world(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    uint64_t start = util_clock_now_ns();
    strata_status_t status;

    (void)world;
    if (rank == 2) {
        status = strata_bootstrap_tcp_create("127.0.0.1", port, 1, 3, 10000, &bs);
        if (status != STRATA_ERR_BOOTSTRAP || bs != NULL) {
            return 40;
        }
        return (util_clock_now_ns() - start < 5 * UTIL_NSEC_PER_SEC) ? 0 : 41;
    }
    if (rank == 1) {
        sleep(2); /* after the stray one has been refused */
    }
    status = strata_bootstrap_tcp_create("127.0.0.1", port, rank, 2, 10000, &bs);
    if (status != STRATA_OK) {
        return 42;
    }
    status = bs->barrier(bs->ctx);
    strata_bootstrap_destroy(bs);
    return (status == STRATA_OK) ? 0 : 43;
}

static void test_refused_quickly(void **state)
{
    int codes[3];

    (void)state;
    run_ranks(3, mismatched_world, codes);
    for (int r = 0; r < 3; ++r) {
        if (codes[r] != 0) {
            fail_msg("process %d exited %d", r, codes[r]);
        }
    }
}

static void test_invalid_arguments(void **state)
{
    strata_bootstrap_t *bs = NULL;

    (void)state;
    assert_int_equal(strata_bootstrap_tcp_create("127.0.0.1", 1, 2, 2, 100, &bs),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_bootstrap_tcp_create("127.0.0.1", 1, -1, 2, 100, &bs),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_bootstrap_tcp_create(NULL, 1, 0, 2, 100, &bs), STRATA_ERR_INVALID);
    assert_int_equal(strata_bootstrap_tcp_create("127.0.0.1", 0, 0, 2, 100, &bs),
                     STRATA_ERR_INVALID);
    assert_null(bs);
    assert_int_equal(strata_bootstrap_tcp_create(NULL, 0, 0, 1, 100, &bs), STRATA_OK);
    strata_bootstrap_destroy(bs);
    strata_bootstrap_destroy(NULL);
}

static void test_from_env(void **state)
{
    strata_bootstrap_t *bs = NULL;

    (void)state;
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("SLURM_JOB_NODELIST");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    /* No launcher: a world of one. */
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_OK);
    assert_int_equal(bs->rank, 0);
    assert_int_equal(bs->world_size, 1);
    strata_bootstrap_destroy(bs);
    bs = NULL;
    /* MPICH's Hydra, and a bad rank refused. */
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "1", 1);
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_OK);
    assert_int_equal(bs->world_size, 1);
    strata_bootstrap_destroy(bs);
    bs = NULL;
    setenv("PMI_RANK", "3", 1);
    setenv("PMI_SIZE", "2", 1);
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_ERR_INVALID);
    assert_null(bs);
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");

    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_OK); /* one rank needs no root */
    assert_int_equal(bs->rank, 0);
    assert_int_equal(bs->world_size, 1);
    strata_bootstrap_destroy(bs);

    setenv("OMPI_COMM_WORLD_RANK", "1", 1); /* Slurm's pair is read first */
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_PROCID", "one", 1);
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_ERR_INVALID);
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    bs = NULL;
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_ERR_INVALID); /* no address */
    assert_null(bs);
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
}

/* Slurm: rank 0's address is the first host of the step's node list, the port one that
 * every rank derives from the job and step ids. Two ranks of a step, as threads. */
static void test_hostlist_first(void **state)
{
    static const char *const cases[][2] = {
        {"node[01-04,07]", "node01"},       {"node[01-04,07]-ib,gpu5", "node01-ib"},
        {"gpu7,gpu8", "gpu7"},              {"h[3],x[1-2]", "h3"},
        {"127.0.0.[1-4]", "127.0.0.1"},     {"solo", "solo"},
    };
    static const char *const bad[] = {"", ",a", "[1-2]", "n[a-b]", "n[1-2", "n[1x]"};
    char host[64];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        assert_true(api_hostlist_first(cases[i][0], host, sizeof(host)));
        assert_string_equal(host, cases[i][1]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        assert_false(api_hostlist_first(bad[i], host, sizeof(host)));
    }
    assert_false(api_hostlist_first("averylongname", host, 8)); /* does not fit */
}

/* One rank of a Slurm step of two, in its own process: the address and port come from
 * the step's variables alone; every rank must see both ranks. */
static int slurm_rank(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    char id[16];
    int ranks[2] = {-1, -1};

    (void)port; /* derived from the job and step ids instead */
    snprintf(id, sizeof(id), "%d", rank);
    setenv("SLURM_PROCID", id, 1);
    snprintf(id, sizeof(id), "%d", world);
    setenv("SLURM_NTASKS", id, 1);
    if (strata_bootstrap_from_env(&bs) != STRATA_OK) {
        return 10;
    }
    if (bs->rank != rank || bs->allgather(bs->ctx, &rank, ranks, sizeof(int)) != STRATA_OK ||
        ranks[0] != 0 || ranks[1] != 1) {
        strata_bootstrap_destroy(bs);
        return 11;
    }
    strata_bootstrap_destroy(bs);
    return 0;
}

static void test_from_env_slurm(void **state)
{
    char job[16];
    int codes[2];

    (void)state;
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    unsetenv("RANK");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("STRATA_BOOTSTRAP_ADDR");
    unsetenv("STRATA_BOOTSTRAP_PORT");
    setenv("SLURM_STEP_NODELIST", "127.0.0.[1-2]", 1);
    snprintf(job, sizeof(job), "%d", (int)getpid()); /* another port for every run */
    setenv("SLURM_JOB_ID", job, 1);
    setenv("SLURM_STEP_ID", "3", 1);
    run_ranks(2, slurm_rank, codes);
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[1], 0);
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
}

/* Every launcher's rank, size and local rank variables, and the ones torchrun sets. */
static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",             "PMI_SIZE",             "MPI_LOCALRANKID",
    "RANK",                 "WORLD_SIZE",           "LOCAL_RANK",
    "SLURM_PROCID",         "SLURM_NTASKS",         "SLURM_LOCALID",
};

/* The GPU a one-rank communicator over an 8-GPU topology picks (the host backend takes
 * the topology's GPUs in turn: GPU = local rank). */
static int gpu_of_one_rank_comm(void)
{
    strata_config_t config = {.field_mask = STRATA_CONFIG_FIELD_TOPO_FILE,
                              .topo_file  = STRATA_TEST_FIXTURES "/nvswitch-8gpu-8nic.nccl.xml"};
    strata_comm_t *comm = NULL;
    int gpu;

    assert_int_equal(strata_comm_create(&config, &one_rank, &comm), STRATA_OK);
    assert_int_equal(strata_comm_local_rank(comm), 0); /* the grouping's, whatever the launcher */
    gpu = strata_comm_gpu(comm);
    strata_comm_destroy(comm);
    return gpu;
}

/* Each launcher's local rank picks the GPU, read only beside that launcher's rank and size,
 * and only where those are the communicator's (the first launcher found wins, as for the
 * rank); the grouping (local rank 0 of 1) gives
 * way with a warning naming both; a value that is no local rank is ignored, with a warning. */
static void test_launcher_local_rank_picks_gpu(void **state)
{
    static const struct {
        const char *set[6]; /* variable, value pairs */
        int         gpu;
        const char *warning; /* expected in a warning; NULL: none */
    } cases[] = {
        {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "3"}, 3,
         "LOCAL_RANK=3 differs from local rank 0 of 1"},
        {{"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1",
          "OMPI_COMM_WORLD_LOCAL_RANK", "5"}, 5, "OMPI_COMM_WORLD_LOCAL_RANK=5 differs"},
        {{"PMI_RANK", "0", "PMI_SIZE", "1", "MPI_LOCALRANKID", "2"}, 2,
         "MPI_LOCALRANKID=2 differs"},
        {{"SLURM_PROCID", "0", "SLURM_NTASKS", "1", "SLURM_LOCALID", "6"}, 6,
         "SLURM_LOCALID=6 differs"},
        {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "0"}, 0, NULL}, /* they agree */
        {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "two"}, 0,
         "LOCAL_RANK=two is not a local rank"},
        {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "-1"}, 0,
         "LOCAL_RANK=-1 is not a local rank"},
        /* torchrun's rank wins over Slurm's, so Slurm's local id is not read */
        {{"RANK", "0", "WORLD_SIZE", "1", "SLURM_LOCALID", "4"}, 0, NULL},
        /* a local rank without its launcher's rank and size is not read */
        {{"LOCAL_RANK", "3", NULL}, 0, NULL},
        /* nor where the communicator's ranks are not the launcher's processes (a caller's
         * own bootstrap, here rank 0 of 1 under torchrun's rank 0 of 4) */
        {{"RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "3"}, 0, NULL},
        {{"RANK", "2", "WORLD_SIZE", "4", "LOCAL_RANK", "3"}, 0, NULL},
    };

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_WARN); /* earlier tests quiet it */
    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        int gpu;

        for (size_t v = 0; v < sizeof(launcher_vars) / sizeof(launcher_vars[0]); ++v) {
            unsetenv(launcher_vars[v]);
        }
        for (size_t v = 0; v + 1 < 6 && cases[i].set[v] != NULL; v += 2) {
            setenv(cases[i].set[v], cases[i].set[v + 1], 1);
        }
        log_capture_start();
        gpu = gpu_of_one_rank_comm();
        log_capture_stop();
        if (gpu != cases[i].gpu) {
            print_error("case %zu (%s=%s): GPU %d, expected %d\n", i, cases[i].set[0],
                        cases[i].set[1], gpu, cases[i].gpu);
        }
        assert_int_equal(gpu, cases[i].gpu);
        if (cases[i].warning != NULL) {
            assert_true(log_captured(cases[i].warning, NULL, NULL));
        }
        for (int l = 0; cases[i].warning == NULL && l < log_capture.count; ++l) {
            assert_null(strstr(log_capture.lines[l], "differs from local rank"));
            assert_null(strstr(log_capture.lines[l], "is not a local rank"));
        }
    }
    for (size_t v = 0; v < sizeof(launcher_vars) / sizeof(launcher_vars[0]); ++v) {
        unsetenv(launcher_vars[v]);
    }
}

/* Node names given on purpose (simulated nodes): the launcher's local rank still picks the
 * GPU, and its disagreement with the grouping is said once, at info level, not warned. */
static void test_given_node_names_do_not_warn(void **state)
{
    int gpu;

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_INFO);
    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "3", 1);
    setenv("STRATA_NODE_NAME", "node1", 1);
    log_capture_start();
    gpu = gpu_of_one_rank_comm();
    log_capture_stop();
    unsetenv("STRATA_NODE_NAME");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("LOCAL_RANK");
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    assert_int_equal(gpu, 3);
    assert_true(log_captured("node names are given", "LOCAL_RANK", NULL));
    for (int l = 0; l < log_capture.count; ++l) {
        assert_null(strstr(log_capture.lines[l], "differs from local rank"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allgather_2_and_4_ranks),
        cmocka_unit_test(test_root_never_appears),
        cmocka_unit_test(test_rank_dies),
        cmocka_unit_test(test_refused_quickly),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_from_env),
        cmocka_unit_test(test_hostlist_first),
        cmocka_unit_test(test_from_env_slurm),
        cmocka_unit_test(test_launcher_local_rank_picks_gpu),
        cmocka_unit_test(test_given_node_names_do_not_warn),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
