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

/*
 * A stream destroyed while another stream's wait for it is still queued (a queue moved
 * from it to a busy stream): CUDA lets a stream go while an event recorded on it is
 * waited for, and so does the host backend, whose wait keeps the stream's record until it
 * has run (used after free before; an address sanitizer names it).
 */
static void test_host_stream_destroyed_before_its_waiter(void **state)
{
    const intra_device_ops_t *host = intra_device_find("host");
    const size_t big = (size_t)64 << 20;
    unsigned char *dst = NULL, *mark = NULL;
    const uint64_t stamp = 0x0123456789abcdefull;
    intra_queue_t *busy = NULL, *moving = NULL;
    void *first = NULL, *second = NULL;

    (void)state;
    assert_int_equal(host->mem_alloc(big, (void **)&dst), STRATA_OK);
    assert_int_equal(host->mem_alloc(64, (void **)&mark), STRATA_OK);
    memset(mark, 0, 64);
    assert_int_equal(host->stream_create(&first), STRATA_OK);
    assert_int_equal(host->stream_create(&second), STRATA_OK);
    assert_int_equal(host->queue_create(1, &busy), STRATA_OK);
    assert_int_equal(host->queue_create(1, &moving), STRATA_OK);
    assert_int_equal(host->queue_set_stream(busy, second), STRATA_OK);
    for (int i = 0; i < 16; ++i) { /* fills cost the caller nothing: the second stream is */
        assert_int_equal(host->queue_fill(busy, dst, i, big), STRATA_OK); /* busy long after */
    }
    assert_int_equal(host->queue_set_stream(moving, first), STRATA_OK);
    assert_int_equal(host->queue_write(moving, mark, &stamp, sizeof(stamp)), STRATA_OK);
    assert_int_equal(host->queue_set_stream(moving, second), STRATA_OK); /* waits for first */
    host->stream_destroy(first);
    assert_int_equal(host->queue_write(moving, mark + 8, &stamp, sizeof(stamp)), STRATA_OK);
    assert_int_equal(host->stream_synchronize(second), STRATA_OK);
    assert_memory_equal(mark, &stamp, sizeof(stamp));
    assert_memory_equal(mark + 8, &stamp, sizeof(stamp));
    assert_int_equal(host->queue_set_stream(busy, NULL), STRATA_OK);
    assert_int_equal(host->queue_set_stream(moving, NULL), STRATA_OK);
    host->queue_destroy(busy);
    host->queue_destroy(moving);
    host->stream_destroy(second);
    host->mem_free(dst);
    host->mem_free(mark);
}

/*
 * A queue left on a stream its caller destroyed (an object destroyed after the stream it
 * ran on): it finds the stream finished, refuses new work rather than queue it where no
 * thread runs it (a hang at the next wait), and goes without touching freed memory.
 */
static void test_host_queue_outlives_its_stream(void **state)
{
    const intra_device_ops_t *host = intra_device_find("host");
    uint64_t *word = NULL;
    const uint64_t stamp = 42;
    intra_queue_t *queue = NULL;
    void *stream = NULL, *other = NULL;
    bool capturing = true;

    (void)state;
    assert_int_equal(host->mem_alloc(64, (void **)&word), STRATA_OK);
    *word = 0;
    assert_int_equal(host->stream_create(&stream), STRATA_OK);
    assert_int_equal(host->queue_create(2, &queue), STRATA_OK);
    assert_int_equal(host->queue_set_stream(queue, stream), STRATA_OK);
    assert_int_equal(host->queue_write(queue, word, &stamp, sizeof(stamp)), STRATA_OK);
    host->stream_destroy(stream); /* runs the write first */
    assert_int_equal(*word, stamp);
    assert_int_equal(host->queue_write(queue, word, &stamp, sizeof(stamp)), STRATA_ERR_INVALID);
    assert_int_equal(host->queue_fill(queue, word, 0, 8), STRATA_ERR_INVALID);
    assert_int_equal(host->queue_synchronize(queue), STRATA_OK);
    assert_int_equal(host->queue_capturing(queue, &capturing), STRATA_OK);
    assert_false(capturing);
    assert_int_equal(host->stream_create(&other), STRATA_OK); /* may reuse the address */
    assert_int_equal(host->queue_set_stream(queue, other), STRATA_OK);
    assert_int_equal(host->queue_write(queue, word, &stamp, sizeof(stamp)), STRATA_OK);
    assert_int_equal(host->queue_synchronize(queue), STRATA_OK);
    host->queue_destroy(queue); /* still on other, which it holds */
    host->stream_destroy(other);
    host->mem_free(word);
}

/* The device's synchronize waits for the streams' work, as cudaDeviceSynchronize does. */
static void test_host_synchronize_waits_for_streams(void **state)
{
    const intra_device_ops_t *host = intra_device_find("host");
    const size_t big = (size_t)64 << 20;
    unsigned char *dst = NULL, *src = malloc(big);
    intra_queue_t *queue = NULL;
    void *stream = NULL;

    (void)state;
    assert_non_null(src);
    assert_int_equal(host->mem_alloc(big, (void **)&dst), STRATA_OK);
    memset(dst, 0, big);
    assert_int_equal(host->stream_create(&stream), STRATA_OK);
    assert_int_equal(host->queue_create(1, &queue), STRATA_OK);
    assert_int_equal(host->queue_set_stream(queue, stream), STRATA_OK);
    for (int i = 1; i <= 8; ++i) { /* fills cost the caller nothing; the last one's bytes */
        assert_int_equal(host->queue_fill(queue, dst, i, big), STRATA_OK); /* tell it ran */
    }
    memset(src, 8, big);
    assert_int_equal(host->synchronize(), STRATA_OK);
    assert_memory_equal(dst, src, big);
    host->queue_destroy(queue);
    host->stream_destroy(stream);
    host->mem_free(dst);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_host_memory),
        cmocka_unit_test(test_host_free_after_streams),
        cmocka_unit_test(test_host_stream_destroyed_before_its_waiter),
        cmocka_unit_test(test_host_queue_outlives_its_stream),
        cmocka_unit_test(test_host_synchronize_waits_for_streams),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
