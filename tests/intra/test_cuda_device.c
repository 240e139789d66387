/*
 * The CUDA device backend on a machine with a GPU: allocation, fill, copies both ways.
 * Skipped, with the reason, where CUDA has no device.
 */
#include "intra/intra.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static void test_cuda_roundtrip(void **state)
{
    const intra_device_ops_t *cuda = intra_device_find("cuda");
    char reason[INTRA_REASON_LEN] = "";
    unsigned char host[4096], back[4096];
    void *a = NULL, *b = NULL;

    (void)state;
    assert_non_null(cuda); /* compiled in: this test exists only in CUDA builds */
    if (cuda->probe(reason) != STRATA_OK) {
        print_message("no usable CUDA device here (%s): skipped\n", reason);
        skip();
        return;
    }
    for (size_t i = 0; i < sizeof(host); ++i) {
        host[i] = (unsigned char)(i * 13 + 1);
    }
    assert_int_equal(cuda->mem_alloc(sizeof(host), &a), STRATA_OK);
    assert_int_equal(cuda->mem_alloc(sizeof(host), &b), STRATA_OK);
    assert_int_equal((uintptr_t)a % INTRA_DEVICE_ALIGNMENT, 0);
    assert_int_equal(cuda->mem_set(b, 0x33, sizeof(host)), STRATA_OK);
    assert_int_equal(cuda->mem_copy(a, host, sizeof(host)), STRATA_OK);
    assert_int_equal(cuda->mem_copy((char *)b + 100, a, 1000), STRATA_OK);
    assert_int_equal(cuda->mem_copy(back, b, sizeof(back)), STRATA_OK);
    assert_int_equal(cuda->synchronize(), STRATA_OK);
    assert_int_equal(back[99], 0x33);
    assert_memory_equal(back + 100, host, 1000);
    assert_int_equal(back[1100], 0x33);
    assert_int_equal(cuda->mem_alloc(0, &a), STRATA_ERR_INVALID);
    cuda->mem_free(a);
    cuda->mem_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_roundtrip),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
