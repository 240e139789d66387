/*
 * The GPU device backends (CUDA, HIP) on a machine with a GPU: allocation, fill, copies
 * both ways, where a pointer's memory is (device, pageable or pinned host), then MoE
 * dispatch/combine with 2 and 4 processes sharing the GPU through IPC handles, with the
 * same checks as the host backend's test. Each backend compiled in but
 * without a usable device here is skipped with the reason. GPU runtimes do not survive
 * fork(), and the MoE check forks its ranks, so this process never touches a GPU itself:
 * probes and the round trip run in children too.
 */
#include "moe_check.h"
#include "intra/intra.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

/* Probe a backend in a child process; the reason comes back through a pipe. */
static bool probe_in_child(const intra_device_ops_t *ops, char *reason)
{
    int fds[2], status;
    ssize_t got;
    pid_t pid;

    if (pipe(fds) != 0 || (pid = fork()) < 0) {
        util_reason(reason, "cannot start a probe process");
        return false;
    }
    if (pid == 0) {
        char why[UTIL_REASON_LEN] = "";
        bool ok = ops->probe(why) == STRATA_OK;
        (void)!write(fds[1], why, strlen(why));
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    got = read(fds[0], reason, UTIL_REASON_LEN - 1);
    reason[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The GPU backends compiled in that have a device here. */
static int usable_gpus(const intra_device_ops_t **found)
{
    int n = 0;

    for (size_t i = 0; i < intra_device_count(); ++i) {
        const intra_device_ops_t *ops = intra_device_get(i);
        char reason[UTIL_REASON_LEN];

        if (strcmp(ops->name, "host") == 0) {
            continue;
        }
        if (!probe_in_child(ops, reason)) {
            print_message("%s backend: no usable device here (%s)\n", ops->name, reason);
            continue;
        }
        found[n++] = ops;
    }
    return n;
}

/* In the round trip's child: where mem_locate places device memory (inside a, of size
 * bytes), pageable host memory and pinned host memory. */
static bool locates(const intra_device_ops_t *gpu, void *a, size_t size)
{
    char why[UTIL_REASON_LEN] = "", pageable[64];
    void *pinned = NULL, *pinned_dev = NULL;
    uintptr_t base = 0;
    size_t alloc = 0;
    int current = -1, device = -2, host = -2, host_pinned = -2;
    bool ok;

    ok = gpu->current_device(&current) == STRATA_OK &&
         gpu->mem_locate((char *)a + 100, &device, &base, &alloc, why) == STRATA_OK &&
         device == current && base == (uintptr_t)a && alloc >= size &&
         gpu->mem_locate(pageable, &host, &base, &alloc, why) == STRATA_OK && host == -1 &&
         gpu->host_alloc(4096, -1, &pinned, &pinned_dev) == STRATA_OK &&
         gpu->mem_locate(pinned, &host_pinned, &base, &alloc, why) == STRATA_OK &&
         host_pinned == -1;
    if (!ok) {
        fprintf(stderr, "%s: mem_locate: device %d (current %d), host %d, pinned %d: %s\n",
                gpu->name, device, current, host, host_pinned, why);
    }
    gpu->host_free(pinned);
    return ok;
}

/* Runs in a child: plain checks, as cmocka's assertions would unwind into the runner. */
static bool roundtrip(const intra_device_ops_t *gpu)
{
    unsigned char host[4096], back[4096];
    void *a = NULL, *b = NULL;
    bool ok;

    for (size_t i = 0; i < sizeof(host); ++i) {
        host[i] = (unsigned char)(i * 13 + 1);
    }
    ok = gpu->mem_alloc(sizeof(host), &a) == STRATA_OK &&
         gpu->mem_alloc(sizeof(host), &b) == STRATA_OK &&
         (uintptr_t)a % INTRA_DEVICE_ALIGNMENT == 0 &&
         gpu->mem_set(b, 0x33, sizeof(host)) == STRATA_OK &&
         gpu->mem_copy(a, host, sizeof(host)) == STRATA_OK &&
         gpu->mem_copy((char *)b + 100, a, 1000) == STRATA_OK &&
         gpu->mem_copy(back, b, sizeof(back)) == STRATA_OK &&
         gpu->synchronize() == STRATA_OK && back[99] == 0x33 &&
         memcmp(back + 100, host, 1000) == 0 && back[1100] == 0x33 &&
         locates(gpu, a, sizeof(host));
    gpu->mem_free(a);
    gpu->mem_free(b);
    a = NULL;
    return ok && gpu->mem_alloc(0, &a) == STRATA_ERR_INVALID;
}

static void test_gpu_roundtrip(void **state)
{
    const intra_device_ops_t *gpus[4];
    int n = usable_gpus(gpus);

    (void)state;
    if (n == 0) {
        skip();
    }
    for (int i = 0; i < n; ++i) {
        int status;
        pid_t pid = fork();

        assert_true(pid >= 0);
        if (pid == 0) {
            _exit(roundtrip(gpus[i]) ? 0 : 1);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fail_msg("%s: the round trip failed (status 0x%x)", gpus[i]->name, status);
        }
    }
}

static void test_gpu_moe(void **state)
{
    static const strata_dtype_t types[][2] = {
        {STRATA_DTYPE_BF16, STRATA_DTYPE_BF16},
        {STRATA_DTYPE_FP16, STRATA_DTYPE_FP16},
        {STRATA_DTYPE_FP32, STRATA_DTYPE_FP32},
        {STRATA_DTYPE_FP8_E4M3, STRATA_DTYPE_BF16},
    };
    const intra_device_ops_t *gpus[4];
    int n = usable_gpus(gpus);

    (void)state;
    if (n == 0) {
        skip();
    }
    for (int g = 0; g < n; ++g) {
        for (int ranks = 2; ranks <= 4; ranks += 2) {
            for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); ++i) {
                moe_case_t c = {.device = gpus[g]->name, .ranks = ranks, .experts = 4 * ranks,
                                .topk = 4, .hidden = 512, .max_tokens = 64, .steps = 100,
                                .dtype = types[i][0], .combine_dtype = types[i][1],
                                .seed = 7000u + (unsigned)(ranks * 10) + (unsigned)i,
                                .scenario = MOE_SCENARIO_EXACT};
                if (moe_check_run(&c) != 0) {
                    fail_msg("%s: %d ranks, dtype %d failed (seed %u)", c.device, ranks,
                             (int)c.dtype, c.seed);
                }
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_roundtrip),
        cmocka_unit_test(test_gpu_moe),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
