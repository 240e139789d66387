/*
 * Device backend table and the host backend.
 */
#include "intra/intra.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void test_table(void **state)
{
    (void)state;
    assert_true(intra_device_count() >= 1);
    assert_ptr_equal(intra_device_find("host"), intra_device_get(0));
    assert_null(intra_device_find("no-such-backend"));
    assert_null(intra_device_find(NULL));
    assert_null(intra_device_get(intra_device_count()));
    for (size_t i = 0; i < intra_device_count(); ++i) {
        const intra_device_ops_t *ops = intra_device_get(i);
        assert_non_null(ops->probe);
        assert_non_null(ops->mem_alloc);
        assert_non_null(ops->mem_free);
        assert_non_null(ops->mem_copy);
        assert_non_null(ops->mem_set);
        assert_non_null(ops->synchronize);
        assert_ptr_equal(intra_device_find(ops->name), ops);
    }
}

static void test_host_memory(void **state)
{
    const intra_device_ops_t *host = intra_device_find("host");
    unsigned char *a = NULL, *b = NULL;
    void *untouched = (void *)(uintptr_t)0x1;

    char reason[UTIL_REASON_LEN];

    (void)state;
    assert_int_equal(host->probe(reason), STRATA_OK);
    assert_int_equal(host->mem_alloc(0, &untouched), STRATA_ERR_INVALID);
    assert_ptr_equal(untouched, (void *)(uintptr_t)0x1);
    assert_int_equal(host->mem_alloc(1000, (void **)&a), STRATA_OK);
    assert_int_equal(host->mem_alloc(1000, (void **)&b), STRATA_OK);
    assert_int_equal((uintptr_t)a % INTRA_DEVICE_ALIGNMENT, 0);
    assert_int_equal(host->mem_set(a, 0x5a, 1000), STRATA_OK);
    for (int i = 0; i < 1000; ++i) {
        b[i] = (unsigned char)(i * 7);
    }
    assert_int_equal(host->mem_copy(a + 100, b, 500), STRATA_OK);
    assert_int_equal(host->synchronize(), STRATA_OK);
    assert_int_equal(a[99], 0x5a);
    assert_memory_equal(a + 100, b, 500);
    assert_int_equal(a[600], 0x5a);
    assert_int_equal(host->mem_copy(a + 1, a, 999), STRATA_OK); /* overlapping is fine */
    assert_int_equal(host->mem_copy(NULL, b, 1), STRATA_ERR_INVALID);
    assert_int_equal(host->mem_set(NULL, 0, 1), STRATA_ERR_INVALID);
    host->mem_free(a);
    host->mem_free(b);
    host->mem_free(NULL);
}

/*
 * mem_free frees only once the streams have run what they had queued, as cudaFree waits for
 * the device: a copy still queued to the memory would write there after it was freed. The
 * host backend does not make the caller wait; its streams free the memory when they get
 * there. Large copies queued first keep the stream busy well past the call; freed at once,
 * their target (mapped for its size) would be unmapped under them and the process would
 * end on a fault (an address sanitizer names the use after free).
 */
static void test_host_free_after_streams(void **state)
{
    const intra_device_ops_t *host = intra_device_find("host");
    const size_t big = (size_t)64 << 20;
    unsigned char *dst = NULL, *mark = NULL, *src = malloc(big);
    const uint64_t stamp = 0x5a5aa5a5c3c33c3cull;
    intra_queue_t *queue = NULL;
    void *stream = NULL;

    (void)state;
    assert_non_null(src);
    memset(src, 0x77, big);
    assert_int_equal(host->mem_alloc(big, (void **)&dst), STRATA_OK);
    assert_int_equal(host->mem_alloc(64, (void **)&mark), STRATA_OK);
    memset(mark, 0, 64);
    assert_int_equal(host->stream_create(&stream), STRATA_OK);
    assert_int_equal(host->queue_create(1, &queue), STRATA_OK);
    assert_int_equal(host->queue_set_stream(queue, stream), STRATA_OK);
    for (int i = 0; i < 3; ++i) {
        assert_int_equal(host->queue_write(queue, dst, src, big), STRATA_OK);
    }
    host->mem_free(dst);
    assert_int_equal(host->queue_write(queue, mark, &stamp, sizeof(stamp)), STRATA_OK);
    assert_int_equal(host->stream_synchronize(stream), STRATA_OK);
    assert_memory_equal(mark, &stamp, sizeof(stamp));
    assert_int_equal(host->queue_set_stream(queue, NULL), STRATA_OK);
    host->queue_destroy(queue);
    host->stream_destroy(stream);
    host->mem_free(mark);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_host_memory),
        cmocka_unit_test(test_host_free_after_streams),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
