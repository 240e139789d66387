/*
 * Point-to-point calls on one rank (writes to itself over the tcp provider): a registration
 * must cover mapped memory of the process and may not wrap around the address space, and
 * a write or read must fit in both the local registration and the peer's descriptor; every
 * refusal names the bad range, and an accepted write lands exactly where it was aimed.
 */
#include <strata/strata.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/log_capture.h"
#include "common/one_rank.h"

#define BUF (64u << 10)

typedef struct fixture {
    strata_comm_t *comm;
    uint8_t       *buf;  /* BUF bytes, with an unmapped BUF bytes after them */
} fixture_t;

static int setup(void **state)
{
    static fixture_t f;
    uint8_t *area;

    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    area = mmap(NULL, 2 * BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED || munmap(area + BUF, BUF) != 0 ||
        strata_comm_create(NULL, &one_rank, &f.comm) != STRATA_OK) {
        return -1;
    }
    f.buf  = area;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    strata_comm_destroy(f->comm);
    munmap(f->buf, BUF);
    return 0;
}

static strata_status_t reg(fixture_t *f, void *addr, size_t len, strata_mem_t **mem_p)
{
    strata_status_t status;

    *mem_p = NULL;
    log_capture_start();
    status = strata_mem_register(f->comm, addr, len, mem_p);
    log_capture_stop();
    for (int i = 0; status != STRATA_OK && i < log_capture.count && i < LOG_CAPTURE_LINES; ++i) {
        fprintf(stderr, "refused (%zu bytes at %p): %s\n", len, addr, log_capture.lines[i]);
    }
    assert_true((status == STRATA_OK) == (*mem_p != NULL));
    return status;
}

static void test_register_sizes(void **state)
{
    fixture_t *f = *state;
    strata_mem_t *mem;

    assert_int_equal(reg(f, f->buf, SIZE_MAX, &mem), STRATA_ERR_INVALID);
    assert_true(log_captured("wraps around the address space", NULL, NULL));
    assert_int_equal(reg(f, f->buf, (size_t)1 << 30, &mem), STRATA_ERR_INVALID);
    assert_true(log_captured("not mapped memory", NULL, NULL));
    assert_int_equal(reg(f, f->buf, BUF + 1, &mem), STRATA_ERR_INVALID); /* one byte over */
    assert_int_equal(reg(f, f->buf, 0, &mem), STRATA_ERR_INVALID);
    assert_int_equal(reg(f, NULL, BUF, &mem), STRATA_ERR_INVALID);
    assert_int_equal(reg(f, f->buf + 1, BUF - 1, &mem), STRATA_OK); /* unaligned start */
    strata_mem_deregister(f->comm, mem);
    assert_int_equal(reg(f, f->buf, BUF, &mem), STRATA_OK);
    strata_mem_deregister(f->comm, mem);
}

/* Write len bytes from src's src_off to dst's dst_off; the status of the call. */
static strata_status_t write_at(fixture_t *f, strata_mem_t *src, size_t src_off,
                                const strata_mem_desc_t *dst, size_t dst_off, size_t len)
{
    strata_request_t *req = NULL;
    strata_status_t status;

    log_capture_start();
    status = strata_write(f->comm, 0, src, src_off, dst, dst_off, len, 0, 0, &req);
    log_capture_stop();
    if (status == STRATA_OK) {
        status = strata_request_wait(req, 10000);
        strata_request_free(req);
    } else {
        assert_null(req);
    }
    return status;
}

static void test_write_bounds(void **state)
{
    fixture_t *f = *state;
    size_t half = BUF / 2;
    strata_mem_t *src, *dst;
    strata_mem_desc_t desc;

    /* Two registrations side by side in the buffer: src is the first half, dst the second. */
    assert_int_equal(reg(f, f->buf, half, &src), STRATA_OK);
    assert_int_equal(reg(f, f->buf + half, half, &dst), STRATA_OK);
    strata_mem_descriptor(dst, &desc);
    memset(f->buf, 0x11, half);
    memset(f->buf + half, 0, half);

    assert_int_equal(write_at(f, src, 0, &desc, (size_t)1 << 30, 8), STRATA_ERR_INVALID);
    assert_true(log_captured("remote range", "1073741824", NULL));
    assert_int_equal(write_at(f, src, 0, &desc, half - 4, 8), STRATA_ERR_INVALID);
    assert_int_equal(write_at(f, src, 0, &desc, 8, SIZE_MAX - 4), STRATA_ERR_INVALID);
    assert_int_equal(write_at(f, src, half - 4, &desc, 0, 8), STRATA_ERR_INVALID);
    assert_true(log_captured("local memory", "not inside a registered region", NULL));
    assert_int_equal(write_at(f, src, SIZE_MAX, &desc, 0, 2), STRATA_ERR_INVALID);
    for (size_t i = 0; i < half; ++i) {
        assert_int_equal(f->buf[half + i], 0); /* nothing refused was written */
    }
    /* The last bytes of both: accepted, and exactly there. */
    assert_int_equal(write_at(f, src, half - 8, &desc, half - 8, 8), STRATA_OK);
    for (size_t i = 0; i < half; ++i) {
        assert_int_equal(f->buf[half + i], i >= half - 8 ? 0x11 : 0);
    }
    strata_mem_deregister(f->comm, src);
    strata_mem_deregister(f->comm, dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_sizes),
        cmocka_unit_test(test_write_bounds),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
