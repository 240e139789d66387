/*
 * The communicator's own calls on one rank: a bad log level is refused, every query
 * tolerates NULL with its documented value, and destroying the communicator before a MoE
 * object it runs leaves that object safe to destroy (glibc scribbles over freed memory
 * here, so a use after free shows even without ASan); the proxy thread runs on the CPUs
 * of its NIC's NUMA node.
 */
#include <strata/strata.h>

#include <dirent.h>
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "api/src/api_comm.h"
#include "common/log_capture.h"
#include "common/one_rank.h"

static int setup(void **state)
{
    (void)state;
    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    return 0;
}

static void test_bad_log_level(void **state)
{
    static const int bad[] = {77, -1, STRATA_LOG_LEVEL_TRACE + 1};
    strata_config_t config = {.field_mask = STRATA_CONFIG_FIELD_LOG_LEVEL};
    strata_comm_t *comm = NULL;

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        char text[32];

        config.log_level = (strata_log_level_t)bad[i];
        log_capture_start();
        assert_int_equal(strata_comm_create(&config, &one_rank, &comm), STRATA_ERR_INVALID);
        log_capture_stop();
        assert_null(comm);
        assert_int_equal(util_log_level(), STRATA_LOG_LEVEL_WARN); /* never took effect */
        snprintf(text, sizeof(text), "log_level %d ", bad[i]);
        assert_true(log_captured(text, "strata_log_level_t", NULL));
    }
    config.log_level = STRATA_LOG_LEVEL_ERROR;
    assert_int_equal(strata_comm_create(&config, &one_rank, &comm), STRATA_OK);
    assert_int_equal(util_log_level(), STRATA_LOG_LEVEL_ERROR);
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    strata_comm_destroy(comm);
}

static void test_queries_tolerate_null(void **state)
{
    (void)state;
    assert_int_equal(strata_comm_rank(NULL), -1);
    assert_int_equal(strata_comm_size(NULL), 0);
    assert_int_equal(strata_comm_node(NULL), -1);
    assert_int_equal(strata_comm_num_nodes(NULL), 0);
    assert_int_equal(strata_comm_local_rank(NULL), -1);
    assert_int_equal(strata_comm_local_size(NULL), 0);
    assert_int_equal(strata_comm_node_rank(NULL, 0, 0), -1);
    assert_string_equal(strata_comm_device_backend(NULL), "");
    assert_int_equal(strata_comm_gpu(NULL), -1);
    assert_int_equal(strata_comm_gpu_ordinal(NULL), -1);
    assert_int_equal(strata_comm_num_rails(NULL), 0);
    assert_string_equal(strata_comm_transport(NULL), "");
    strata_comm_destroy(NULL);
}

static void test_queries(void **state)
{
    strata_comm_t *comm = NULL;

    (void)state;
    assert_int_equal(strata_comm_create(NULL, &one_rank, &comm), STRATA_OK);
    assert_int_equal(strata_comm_rank(comm), 0);
    assert_int_equal(strata_comm_size(comm), 1);
    assert_int_equal(strata_comm_node(comm), 0);
    assert_int_equal(strata_comm_num_nodes(comm), 1);
    assert_int_equal(strata_comm_local_rank(comm), 0);
    assert_int_equal(strata_comm_local_size(comm), 1);
    assert_int_equal(strata_comm_node_rank(comm, 0, 0), 0);
    assert_int_equal(strata_comm_node_rank(comm, 1, 0), -1);
    assert_string_equal(strata_comm_device_backend(comm), "host");
    assert_int_equal(strata_comm_gpu(comm), -1); /* the host backend drives no GPU */
    assert_int_equal(strata_comm_gpu_ordinal(comm), -1);
    assert_non_null(strstr(strata_comm_transport(comm), "tcp"));
    strata_comm_destroy(comm);
}

/* Every MoE object holds its communicator: destroying the communicator first leaves the
 * object's engine, heap and buffers alive until the object goes, which tears them down. */
static void test_comm_destroyed_before_moe(void **state)
{
    strata_moe_params_t p = {.num_experts = 4, .topk = 2, .hidden = 64,
                             .dtype = STRATA_DTYPE_FP32, .combine_dtype = STRATA_DTYPE_FP32,
                             .max_tokens = 8, .mode = STRATA_MOE_MODE_PUSH};
    strata_comm_t *comm = NULL;
    strata_moe_t *first = NULL, *second = NULL;

    (void)state;
    assert_int_equal(strata_comm_create(NULL, &one_rank, &comm), STRATA_OK);
    assert_int_equal(strata_moe_create(comm, &p, &first), STRATA_OK);
    assert_int_equal(strata_moe_create(comm, &p, &second), STRATA_OK);
    log_capture_start();
    strata_comm_destroy(comm);
    strata_moe_destroy(second);
    strata_moe_destroy(first); /* the last one tears the communicator down */
    log_capture_stop();
    assert_true(log_captured("destroyed with 2 MoE objects alive", NULL, NULL));
}

/* STRATA_TOPO_OVERLAY reaches the communicator: applied onto its topology file, and a
 * missing overlay fails the communicator with the file named. */
static void test_topology_overlay(void **state)
{
    strata_config_t config = {.field_mask = STRATA_CONFIG_FIELD_TOPO_FILE,
                              .topo_file  = STRATA_TEST_FIXTURES "/vm-2gpu-4efa.hwloc.xml"};
    strata_comm_t *comm = NULL;

    (void)state;
    setenv("STRATA_TOPO_OVERLAY", STRATA_TEST_FIXTURES "/overlay/p5-style.nccl.xml", 1);
    util_log_set_level(STRATA_LOG_LEVEL_INFO);
    log_capture_start();
    assert_int_equal(strata_comm_create(&config, &one_rank, &comm), STRATA_OK);
    log_capture_stop();
    assert_true(log_captured("overlay", "p5-style.nccl.xml applied by PCI bus id",
                             "2 GPUs and 4 NICs matched, 1 of its devices"));
    strata_comm_destroy(comm);

    setenv("STRATA_TOPO_OVERLAY", "/nonexistent/overlay.xml", 1);
    comm = NULL;
    log_capture_start();
    assert_int_equal(strata_comm_create(&config, &one_rank, &comm), STRATA_ERR_NOT_FOUND);
    log_capture_stop();
    assert_null(comm);
    assert_true(log_captured("topology: /nonexistent/overlay.xml", NULL, NULL));
    unsetenv("STRATA_TOPO_OVERLAY");
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
}

/* The CPU list the engine's proxy thread may run on (Cpus_allowed_list), found by the
 * name it gives the thread; "" if there is none. */
static void proxy_cpus(char *list, size_t len)
{
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *task;

    list[0] = '\0';
    while (tasks != NULL && (task = readdir(tasks)) != NULL) {
        char path[300], line[256] = "";
        FILE *f;

        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", task->d_name);
        f = fopen(path, "r");
        if (f == NULL || fgets(line, sizeof(line), f) == NULL ||
            strncmp(line, "strata-progress", 15) != 0) {
            if (f != NULL) {
                fclose(f);
            }
            continue;
        }
        fclose(f);
        snprintf(path, sizeof(path), "/proc/self/task/%s/status", task->d_name);
        f = fopen(path, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            if (sscanf(line, "Cpus_allowed_list: %255s", list) == 1) {
                break;
            }
        }
        if (f != NULL) {
            fclose(f);
        }
    }
    if (tasks != NULL) {
        closedir(tasks);
    }
}

/*
 * A topology (written here) whose one GPU and NIC hang off a NUMA node with a single CPU,
 * the last this process may use: the proxy thread runs on that CPU alone, and the memory it
 * polls (work rings, the bounce buffer) is to go on that node.
 */
static void test_proxy_pinned_near_its_nic(void **state)
{
    char path[] = "/tmp/strata-test-numa-XXXXXX", want[16], got[256];
    strata_config_t config = {.field_mask = STRATA_CONFIG_FIELD_TOPO_FILE, .topo_file = path};
    strata_comm_t *comm = NULL;
    cpu_set_t allowed;
    int last = -1, fd;
    FILE *f;

    (void)state;
    assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    for (int cpu = 0; cpu < 32; ++cpu) {
        last = CPU_ISSET(cpu, &allowed) ? cpu : last;
    }
    if (CPU_COUNT(&allowed) < 2 || last < 0) {
        skip(); /* the pinning could not be told from the process's own CPUs */
    }
    fd = mkstemp(path);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f, "<system version=\"1\"><cpu numaid=\"0\" affinity=\"%08x\" arch=\"x86_64\">"
               "<pci busid=\"0000:10:00.0\" class=\"0x060400\" vendor=\"0x1000\" device=\"0xc030\">"
               "<pci busid=\"0000:11:00.0\" class=\"0x030200\" vendor=\"0x10de\" "
               "device=\"0x2330\"><gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\"/></pci>"
               "<pci busid=\"0000:12:00.0\" class=\"0x020700\" vendor=\"0x15b3\" "
               "device=\"0x1021\"><nic><net name=\"mlx5_0\" dev=\"0\" speed=\"400000\" "
               "port=\"1\" gdr=\"1\"/></nic></pci></pci></cpu></system>\n", 1u << last);
    fclose(f);
    assert_int_equal(strata_comm_create(&config, &one_rank, &comm), STRATA_OK);
    proxy_cpus(got, sizeof(got));
    assert_int_equal(inter_engine_numa_node(comm->engine), 0);
    strata_comm_destroy(comm);
    unlink(path);
    snprintf(want, sizeof(want), "%d", last);
    assert_string_equal(got, want);
}

/* Another rank's information, as the allgather brings it: used only once it is whole. */
static void test_rank_info_checked(void **state)
{
    api_rank_info_t info = {.node_name = "node1", .pid = 42, .num_gpus = 8};

    (void)state;
    assert_true(api_rank_info_valid(&info));
    memset(info.node_name, 'x', sizeof(info.node_name)); /* no end: strcmp would overread */
    assert_false(api_rank_info_valid(&info));
    info.node_name[0] = '\0'; /* empty */
    assert_false(api_rank_info_valid(&info));
    snprintf(info.node_name, sizeof(info.node_name), "node1");
    info.num_gpus = -1;
    assert_false(api_rank_info_valid(&info));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_log_level),
        cmocka_unit_test(test_queries_tolerate_null),
        cmocka_unit_test(test_queries),
        cmocka_unit_test(test_comm_destroyed_before_moe),
        cmocka_unit_test(test_topology_overlay),
        cmocka_unit_test(test_proxy_pinned_near_its_nic),
        cmocka_unit_test(test_rank_info_checked),
    };

    mallopt(M_PERTURB, 0xa5); /* freed memory reads as 0x5a...: a use after free crashes */
    return cmocka_run_group_tests(tests, setup, NULL);
}
