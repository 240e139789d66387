/*
 * Memory placed on a NUMA node: the mapping carries the kernel's preference for the node
 * asked (read back with get_mempolicy), its pages are zeroed and on a node the kernel names,
 * a node the machine lacks still gives memory, and sizes that cannot be mapped are refused.
 * Skips the placement checks where the kernel has no NUMA policy calls (a sandbox).
 */
#include "util/util_numa.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#define MPOL_PREFERRED_MODE 1
#define MPOL_F_ADDR_FLAG    (1 << 1)

/* The policy of the mapping at addr: its mode, and the first word of its node mask. */
static int policy_of(const void *addr, unsigned long *mask_p)
{
    unsigned long mask[(UTIL_NUMA_MAX_NODE + 1) / (8 * sizeof(unsigned long))] = {0};
    int mode = -1;

    if (syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)UTIL_NUMA_MAX_NODE + 1, addr,
                MPOL_F_ADDR_FLAG) != 0) {
        return -1;
    }
    *mask_p = mask[0];
    return mode;
}

static void test_placed_on_node_zero(void **state)
{
    size_t size = 3 * 4096 + 100;
    unsigned char *p = util_numa_alloc(size, 0);
    unsigned long mask = 0;
    int mode;

    (void)state;
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 4096, 0);
    for (size_t i = 0; i < size; ++i) {
        assert_int_equal(p[i], 0);
    }
    memset(p, 0xab, size); /* every byte asked for is writable */
    mode = policy_of(p + size - 1, &mask);
    if (mode < 0) {
        util_numa_free(p);
        skip(); /* no get_mempolicy here */
    }
    assert_int_equal(mode, MPOL_PREFERRED_MODE);
    assert_int_equal(mask, 1ul);
    assert_int_equal(util_numa_node_of(p), 0);
    util_numa_free(p);
}

static void test_no_preference_and_missing_node(void **state)
{
    unsigned long mask = 0;
    char *anywhere = util_numa_alloc(4096, -1);
    char *missing  = util_numa_alloc(4096, UTIL_NUMA_MAX_NODE);
    int mode;

    (void)state;
    assert_non_null(anywhere);
    assert_non_null(missing); /* the kernel refuses the node; the memory still comes */
    mode = policy_of(anywhere, &mask);
    assert_true(mode < 0 || mode != MPOL_PREFERRED_MODE);
    anywhere[4095] = 1;
    missing[4095]  = 1;
    util_numa_free(anywhere);
    util_numa_free(missing);
    util_numa_free(NULL);
}

static void test_refused_sizes(void **state)
{
    (void)state;
    assert_null(util_numa_alloc(0, 0));
    assert_null(util_numa_alloc(SIZE_MAX - 100, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placed_on_node_zero),
        cmocka_unit_test(test_no_preference_and_missing_node),
        cmocka_unit_test(test_refused_sizes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
