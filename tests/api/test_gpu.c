/*
 * Which GPU a rank drives: the local rank's turn among the GPUs the runtime shows the
 * process, found in the topology by PCI address, whatever order or subset the runtime shows
 * (CUDA_VISIBLE_DEVICES), unless the caller asked for one or made one current; entries
 * give the caller's GPU back. The runtime is a test backend over the host one, showing a chosen
 * list of GPUs of the 8-GPU fixture; and how many kernel blocks fit on the chosen GPU.
 */
#include "api/src/api_gpu.h"
#include "intra/host/host_device.h"
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define FIXTURE STRATA_TEST_FIXTURES "/nvswitch-8gpu-8nic.nccl.xml"

/* The fixture's GPUs in topology order: 0000:18, 2a, 3a, 5d, 9a, ab, ba, db. */
static const char *visible[8];
static int         num_visible;
static int         current = -1;
static int         refused = -1; /* an ordinal the library "has no kernels for" */
static int         chosen  = -1; /* the GPU the calling thread chose before; -1: none */

static strata_status_t test_device_chosen(int *ordinal_p, bool *chosen_p)
{
    *chosen_p  = chosen >= 0;
    *ordinal_p = chosen;
    return STRATA_OK;
}

/* Like the GPU backends: nothing to give back to a thread that had chosen no GPU. */
static strata_status_t test_device_use(int ordinal, int *previous_p)
{
    *previous_p = chosen >= 0 ? current : -1;
    current     = ordinal;
    chosen      = ordinal;
    return STRATA_OK;
}

static strata_status_t test_device_count(int *count_p)
{
    *count_p = num_visible;
    return STRATA_OK;
}

static strata_status_t test_device_select(int ordinal, char *reason)
{
    if (ordinal < 0 || ordinal >= num_visible || ordinal == refused) {
        util_reason(reason, "GPU %d: no kernels for it", ordinal);
        return STRATA_ERR_UNSUPPORTED;
    }
    current = ordinal;
    return STRATA_OK;
}

static strata_status_t test_device_bus_id(char *bus_id)
{
    snprintf(bus_id, INTRA_BUS_ID_LEN, "%s", visible[current]);
    return STRATA_OK;
}

static intra_device_ops_t test_ops(void)
{
    intra_device_ops_t ops = host_device_ops;

    ops.device_count  = test_device_count;
    ops.device_select = test_device_select;
    ops.device_bus_id = test_device_bus_id;
    ops.device_chosen = test_device_chosen;
    ops.device_use    = test_device_use;
    return ops;
}

/* Memory as a GPU backend places it: arena's first half is a 4 KiB allocation on GPU 2,
 * its second half managed memory; anything else is host memory. */
static char arena[8192];

static strata_status_t test_mem_locate(const void *ptr, int *device_p, uintptr_t *base_p,
                                       size_t *size_p, char *reason)
{
    uintptr_t at = (uintptr_t)ptr, first = (uintptr_t)arena;

    if (at < first || at >= first + sizeof(arena)) {
        *device_p = -1;
        return STRATA_OK;
    }
    if (at >= first + 4096) {
        util_reason(reason, "%p is managed memory", ptr);
        return STRATA_ERR_UNSUPPORTED;
    }
    *device_p = 2;
    *base_p   = first;
    *size_p   = 4096;
    return STRATA_OK;
}

static int setup(void **state)
{
    char err[UTIL_REASON_LEN];
    topo_t *topo = NULL;

    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    if (topo_open(FIXTURE, &topo, err) != STRATA_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    *state = topo;
    return 0;
}

static int teardown(void **state)
{
    topo_destroy(*state);
    return 0;
}

/* The topology GPU local_rank drives (asked for GPU requested, -1: none), -1 if selection
 * fails; 99 before selection. */
static int topology_gpu_asked(const topo_t *topo, int local_rank, int requested)
{
    intra_device_ops_t ops = test_ops();
    char reason[UTIL_REASON_LEN] = "";
    api_gpu_request_t request = {.local_rank = local_rank, .ordinal = requested};
    api_gpu_t gpu = {.topo_gpu = 99, .ordinal = -1};

    current = -1;
    if (api_gpu_select(&ops, topo, &request, &gpu, reason) != STRATA_OK) {
        assert_true(reason[0] != '\0');
        return -1;
    }
    assert_int_equal(gpu.ordinal, current);
    return gpu.topo_gpu;
}

static int topology_gpu_of(const topo_t *topo, int local_rank)
{
    return topology_gpu_asked(topo, local_rank, -1);
}

static void test_every_gpu_visible(void **state)
{
    const char *all[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                         "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};

    memcpy(visible, all, sizeof(all));
    num_visible = 8;
    for (int local = 0; local < 8; ++local) {
        assert_int_equal(topology_gpu_of(*state, local), local);
        assert_int_equal(current, local);
    }
    /* More ranks than GPUs: they take the GPUs in turn again. */
    assert_int_equal(topology_gpu_of(*state, 9), 1);
    assert_int_equal(current, 1);
}

static void test_runtime_order_differs_from_topology(void **state)
{
    /* CUDA_VISIBLE_DEVICES=2,0 (or FASTEST_FIRST): the runtime's 0 is the topology's 2. */
    visible[0]  = "0000:3A:00.0"; /* spelled as some runtimes do */
    visible[1]  = "0000:18:00.0";
    num_visible = 2;
    assert_int_equal(topology_gpu_of(*state, 0), 2);
    assert_int_equal(topology_gpu_of(*state, 1), 0);
    assert_int_equal(topology_gpu_of(*state, 2), 2);
    assert_int_equal(topology_gpu_of(*state, 3), 0);
}

static void test_one_gpu_per_process(void **state)
{
    /* A launcher that narrows each process to its own GPU: ordinal 0 is that one. */
    visible[0]  = "0000:ba:00.0";
    num_visible = 1;
    assert_int_equal(topology_gpu_of(*state, 6), 6);
    assert_int_equal(current, 0);
}

static void test_failures(void **state)
{
    visible[0]  = "0000:18:00.0";
    visible[1]  = "0000:2a:00.0";
    num_visible = 2;
    refused     = 1;
    assert_int_equal(topology_gpu_of(*state, 1), -1); /* no kernels for this GPU */
    assert_int_equal(topology_gpu_of(*state, 0), 0);
    refused     = -1;
    num_visible = 0;
    assert_int_equal(topology_gpu_of(*state, 0), -1); /* the runtime shows none */
    /* A GPU the topology does not list keeps the rails it had, and still runs. */
    visible[0]  = "0000:ee:00.0";
    num_visible = 1;
    assert_int_equal(topology_gpu_of(*state, 0), 99);
}

/* A GPU asked for wins; else the one the caller made current; else the local rank's turn. */
static void test_adopts_the_callers_gpu(void **state)
{
    const char *all[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"};

    memcpy(visible, all, sizeof(all));
    num_visible = 4;
    chosen      = 3;
    assert_int_equal(topology_gpu_of(*state, 1), 3); /* not local rank 1's turn */
    assert_int_equal(current, 3);
    chosen = 3;
    assert_int_equal(topology_gpu_asked(*state, 1, 2), 2); /* config.gpu / STRATA_GPU */
    chosen = -1;
    assert_int_equal(topology_gpu_of(*state, 1), 1);
    assert_int_equal(topology_gpu_asked(*state, 0, 4), -1); /* no such GPU: refused */
}

/* An entry runs on the object's GPU and gives the caller's back; a thread that had chosen
 * none keeps the object's (giving back "GPU 0" would open a context there). */
static void test_scope_gives_the_gpu_back(void **state)
{
    intra_device_ops_t ops = test_ops();
    api_gpu_scope_t scope;

    (void)state;
    current = chosen = 1;
    api_gpu_enter(&ops, 3, &scope);
    assert_int_equal(current, 3);
    api_gpu_leave(&scope);
    assert_int_equal(current, 1);
    chosen = -1;
    api_gpu_enter(&ops, 2, &scope);
    assert_int_equal(current, 2);
    api_gpu_leave(&scope);
    assert_int_equal(current, 2);
    api_gpu_enter(&host_device_ops, 2, &scope); /* the host backend has no GPU to change */
    api_gpu_leave(&scope);
    assert_int_equal(current, 2);
}

/* A GPU in MIG mode (as NVML tells live discovery) is refused, naming the mode. */
static void test_mig_refused(void **state)
{
    topo_gpu_t *gpu = (topo_gpu_t *)topo_gpu(*state, 1); /* what discovery would have set */
    intra_device_ops_t ops = test_ops();
    char reason[UTIL_REASON_LEN] = "";
    api_gpu_request_t request = {.local_rank = 1, .ordinal = -1};
    api_gpu_t picked = {.topo_gpu = -1, .ordinal = -1};

    visible[0]  = "0000:18:00.0";
    visible[1]  = "0000:2a:00.0";
    num_visible = 2;
    chosen      = -1;
    gpu->mig    = true;
    assert_int_equal(api_gpu_select(&ops, *state, &request, &picked, reason),
                     STRATA_ERR_UNSUPPORTED);
    assert_non_null(strstr(reason, "MIG"));
    gpu->mig = false;
    assert_int_equal(api_gpu_select(&ops, *state, &request, &picked, reason), STRATA_OK);
    assert_int_equal(picked.topo_gpu, 1);
}

static void test_blocks_fit_the_gpu(void **state)
{
    (void)state;
    assert_int_equal(intra_moe_fit_blocks(32, 264, 1), 32);   /* fits */
    assert_int_equal(intra_moe_fit_blocks(1024, 264, 1), 264); /* one GPU's worth */
    assert_int_equal(intra_moe_fit_blocks(1024, 264, 4), 66);  /* 4 ranks under MPS */
    assert_int_equal(intra_moe_fit_blocks(32, 14, 4), 3);      /* a small MIG slice */
    assert_int_equal(intra_moe_fit_blocks(32, 2, 4), 1);       /* never none */
    assert_int_equal(intra_moe_fit_blocks(32, 264, 0), 32);
}

/* What strata_mem_register hands the engine: the kind and GPU of device memory, a range
 * inside its allocation only. */
static void test_memory_placed(void **state)
{
    intra_device_ops_t ops = test_ops();
    api_gpu_memory_t memory;
    char host[64];

    (void)state;
    ops.memory     = INTRA_MEMORY_CUDA;
    ops.mem_locate = test_mem_locate;
    assert_int_equal(api_gpu_mem_place(&ops, arena + 100, 3996, "test", &memory), STRATA_OK);
    assert_int_equal(memory.kind, INTER_MEM_CUDA);
    assert_int_equal(memory.device, 2);
    assert_int_equal(api_gpu_mem_place(&ops, arena, 4096, "test", &memory), STRATA_OK);
    assert_int_equal(api_gpu_mem_place(&ops, host, sizeof(host), "test", &memory), STRATA_OK);
    assert_int_equal(memory.kind, INTER_MEM_HOST);
    assert_int_equal(memory.device, 0);
    /* One byte past the allocation's end, or a length that wraps: peers could write there. */
    assert_int_equal(api_gpu_mem_place(&ops, arena + 100, 3997, "test", &memory),
                     STRATA_ERR_INVALID);
    assert_int_equal(api_gpu_mem_place(&ops, arena + 1, SIZE_MAX, "test", &memory),
                     STRATA_ERR_INVALID);
    assert_int_equal(api_gpu_mem_place(&ops, arena + 5000, 16, "test", &memory),
                     STRATA_ERR_UNSUPPORTED);
    ops.memory = INTRA_MEMORY_HIP;
    assert_int_equal(api_gpu_mem_place(&ops, arena, 16, "test", &memory), STRATA_OK);
    assert_int_equal(memory.kind, INTER_MEM_ROCM);
    /* The host backend: every address is host memory. */
    assert_int_equal(api_gpu_mem_place(&host_device_ops, arena, 16, "test", &memory), STRATA_OK);
    assert_int_equal(memory.kind, INTER_MEM_HOST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_gpu_visible),
        cmocka_unit_test(test_runtime_order_differs_from_topology),
        cmocka_unit_test(test_one_gpu_per_process),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_adopts_the_callers_gpu),
        cmocka_unit_test(test_scope_gives_the_gpu_back),
        cmocka_unit_test(test_mig_refused),
        cmocka_unit_test(test_blocks_fit_the_gpu),
        cmocka_unit_test(test_memory_placed),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
