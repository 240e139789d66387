/*
 * The engine's pools, on one rank writing to itself over the tcp provider: a steady stream
 * of writes, reads, sends and receives allocates nothing once warm, on the submitting
 * thread or the proxy's, paced by rate control or not (whose account of the bytes in
 * flight comes back to zero); every pool that runs out says STRATA_ERR_BUSY and makes no
 * request, and takes submissions again once requests complete and are given back, well
 * before a heartbeat's sweep, a receive cancelled before the proxy took it too; a request
 * larger than its pool is refused by name.
 *
 * Allocations are counted by wrapping malloc, calloc, realloc, posix_memalign and
 * aligned_alloc at link time (tests/CMakeLists.txt): the wrap binds the calls of the
 * objects linked into this executable, strata_internal's among them, and not those inside
 * shared libraries, so what libfabric allocates inside its own calls is not counted and
 * everything strata itself allocates, on any thread, is.
 */
#include "inter/engine.h"
#include "util/util.h"

#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/log_capture.h"

#define WAIT_NS       (10ull * UTIL_NSEC_PER_SEC)
#define REGION        (1u << 20)
#define IMM           77
#define WINDOW        4    /* writes in flight per round of the stream */
#define WARMUP_ROUNDS 200
#define STREAM_ROUNDS 2000 /* rounds x requests per round well past the default pool */
#define RECOVER_NS    (1ull * UTIL_NSEC_PER_SEC) /* the heartbeat (and its sweep): 10 s */

/* --- Counting allocations ---------------------------------------------------------------- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *ptr, size_t size);
int   __real_posix_memalign(void **ptr, size_t alignment, size_t size);
void *__real_aligned_alloc(size_t alignment, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *ptr, size_t size);
int   __wrap_posix_memalign(void **ptr, size_t alignment, size_t size);
void *__wrap_aligned_alloc(size_t alignment, size_t size);

static atomic_bool counting;
static atomic_long allocations;

static void count(void)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
    }
}

void *__wrap_malloc(size_t size)
{
    count();
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    count();
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *ptr, size_t size)
{
    count();
    return __real_realloc(ptr, size);
}

int __wrap_posix_memalign(void **ptr, size_t alignment, size_t size)
{
    count();
    return __real_posix_memalign(ptr, alignment, size);
}

void *__wrap_aligned_alloc(size_t alignment, size_t size)
{
    count();
    return __real_aligned_alloc(alignment, size);
}

/* --- One rank, wired to itself ----------------------------------------------------------- */

typedef struct fixture {
    inter_engine_t *engine;
    unsigned char  *src, *dst;
    inter_mr_t     *src_mr, *dst_mr;
    inter_rdesc_t   src_desc, dst_desc;
} fixture_t;

/* An engine of max_requests (msg_size 0: the default) on rails rails (two: writes from
 * 16 KiB up are cut into chunks), paced by rate control or not, whose heartbeat, and the
 * sweep that comes with it, is far off: pools refill here only by the sweeps they ask for. */
static void fixture_open(fixture_t *f, uint32_t max_requests, size_t msg_size, int rails,
                         bool paced)
{
    inter_engine_params_t params;
    void *blob;

    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    setenv("STRATA_INTER_HEARTBEAT", "10s", 1);
    setenv("STRATA_INTER_PEER_TIMEOUT", "60s", 1);
    setenv("STRATA_INTER_RAILS", rails > 1 ? "2" : "1", 1);
    setenv("STRATA_INTER_STRIPE_MIN", rails > 1 ? "16k" : "256k", 1);
    setenv("STRATA_INTER_RATE_CONTROL", paced ? "on" : "off", 1);
    memset(f, 0, sizeof(*f));
    assert_int_equal(inter_engine_params_from_env(&params), STRATA_OK);
    params.rank         = 0;
    params.world_size   = 1;
    params.max_requests = max_requests;
    if (msg_size != 0) {
        params.msg_size = msg_size;
    }
    assert_int_equal(inter_engine_create(&params, &f->engine), STRATA_OK);
    blob = malloc(inter_engine_address_size(f->engine));
    assert_non_null(blob);
    assert_int_equal(inter_engine_address(f->engine, blob), STRATA_OK);
    assert_int_equal(inter_engine_connect(f->engine, blob), STRATA_OK);
    free(blob);
    f->src = util_alloc_aligned(4096, REGION);
    f->dst = util_alloc_aligned(4096, REGION);
    assert_true(f->src != NULL && f->dst != NULL);
    for (size_t i = 0; i < REGION; ++i) {
        f->src[i] = (unsigned char)(i * 7 + 1);
    }
    assert_int_equal(inter_engine_mem_register(f->engine, f->src, REGION, &f->src_mr), STRATA_OK);
    assert_int_equal(inter_engine_mem_register(f->engine, f->dst, REGION, &f->dst_mr), STRATA_OK);
    inter_engine_mem_descriptor(f->src_mr, &f->src_desc);
    inter_engine_mem_descriptor(f->dst_mr, &f->dst_desc);
}

static void fixture_close(fixture_t *f)
{
    inter_engine_mem_deregister(f->engine, f->src_mr);
    inter_engine_mem_deregister(f->engine, f->dst_mr);
    inter_engine_destroy(f->engine);
    free(f->src);
    free(f->dst);
}

static void wait_ok(inter_request_t *req)
{
    assert_int_equal(inter_request_wait(req, WAIT_NS), STRATA_OK);
    inter_request_free(req);
}

static strata_status_t write_at(fixture_t *f, size_t off, size_t len, inter_request_t **req_p)
{
    return inter_engine_write(f->engine, 0, f->src_mr, off, &f->dst_desc, off, len, true, IMM,
                              req_p);
}

/* --- The steady stream ------------------------------------------------------------------- */

/* WINDOW small writes, a large one (cut into chunks on two rails), a paged write, a read
 * back and a message to ourselves, all with immediates: every call must be taken (no
 * STRATA_ERR_BUSY: the pools keep up), and everything lands. */
static void stream_round(fixture_t *f, int round)
{
    enum { LARGE = 64 << 10, LARGE_AT = 64 << 10, PAGES = 4, PAGES_AT = 32 };
    inter_request_t *writes[WINDOW], *large, *paged, *read = NULL, *send, *recv;
    uint32_t src_pages[PAGES], dst_pages[PAGES];
    unsigned char msg[64], in[256];
    size_t len = 1024 + (size_t)(round % 7) * 512;
    uint64_t imms = WINDOW + inter_engine_write_chunks(f->engine, 0, LARGE) + PAGES;

    for (int k = 0; k < WINDOW; ++k) {
        assert_int_equal(write_at(f, (size_t)k * 8192, len, &writes[k]), STRATA_OK);
    }
    assert_int_equal(write_at(f, LARGE_AT, LARGE, &large), STRATA_OK);
    for (uint32_t i = 0; i < PAGES; ++i) {
        src_pages[i] = PAGES_AT + (i + (uint32_t)round) % PAGES;
        dst_pages[i] = PAGES_AT + i;
    }
    assert_int_equal(inter_engine_write_paged(f->engine, 0, f->src_mr, &f->dst_desc, src_pages,
                                              dst_pages, PAGES, 4096, 4096, true, IMM, &paged),
                     STRATA_OK);
    wait_ok(large);
    wait_ok(paged);
    memset(msg, round & 0xff, sizeof(msg));
    assert_int_equal(inter_engine_recv(f->engine, 0, in, sizeof(in), &recv), STRATA_OK);
    assert_int_equal(inter_engine_send(f->engine, 0, msg, sizeof(msg), &send), STRATA_OK);
    for (int k = 0; k < WINDOW; ++k) {
        wait_ok(writes[k]);
    }
    if (inter_engine_has_read(f->engine)) {
        assert_int_equal(inter_engine_read(f->engine, 0, f->dst_mr, REGION / 2, &f->src_desc,
                                           (size_t)round, 512, &read),
                         STRATA_OK);
        wait_ok(read);
        assert_int_equal(f->dst[REGION / 2 + 511], f->src[(size_t)round + 511]);
    }
    wait_ok(send);
    assert_int_equal(inter_request_wait(recv, WAIT_NS), STRATA_OK);
    assert_int_equal(inter_request_length(recv), sizeof(msg));
    assert_memory_equal(in, msg, sizeof(msg));
    inter_request_free(recv);
    assert_int_equal(inter_engine_imm_wait(f->engine, IMM, imms, 0, WAIT_NS), STRATA_OK);
    assert_int_equal(f->dst[(WINDOW - 1) * 8192 + len - 1], f->src[(WINDOW - 1) * 8192 + len - 1]);
    assert_memory_equal(f->dst + LARGE_AT, f->src + LARGE_AT, LARGE);
    assert_memory_equal(f->dst + (size_t)dst_pages[1] * 4096,
                        f->src + (size_t)src_pages[1] * 4096, 4096);
}

/* The stream's bytes all completed: rate control's account of them is back to zero. */
static void check_rate_settled(fixture_t *f, bool paced)
{
    inter_peer_rate_t rate;

    assert_int_equal(inter_engine_peer_rate(f->engine, 0, &rate), STRATA_OK);
    assert_int_equal(rate.in_flight_bytes, 0);
    assert_true(rate.rate_Bps > 0 && rate.rtt_ns > 0);
    if (paced) {
        assert_true(rate.window_bytes < UINT64_MAX);
        assert_true(rate.paced > 0); /* holding and releasing were exercised */
    } else {
        assert_true(rate.window_bytes == UINT64_MAX && rate.paced == 0);
    }
}

static void stream(int rails, bool paced)
{
    fixture_t f;
    long counted;

    fixture_open(&f, 0, 0, rails, paced); /* the default pools */
    if (rails > 1) {
        assert_int_equal(inter_engine_num_rails(f.engine), 2);
        assert_int_equal(inter_engine_write_chunks(f.engine, 0, 64 << 10), 4);
    }
    for (int round = 0; round < WARMUP_ROUNDS; ++round) {
        stream_round(&f, round);
    }
    atomic_store(&allocations, 0);
    atomic_store(&counting, true);
    for (int round = 0; round < STREAM_ROUNDS; ++round) {
        stream_round(&f, round);
    }
    atomic_store(&counting, false);
    counted = atomic_load(&allocations);
    if (counted != 0) {
        fprintf(stderr, "%ld allocations by strata in %d rounds of %d + 2 writes, a read, a "
                "send and a receive on %d rails%s\n", counted, STREAM_ROUNDS, WINDOW, rails,
                paced ? ", paced" : "");
    }
    assert_int_equal(counted, 0);
    check_rate_settled(&f, paced);
    fixture_close(&f);
}

static void test_stream_allocates_nothing(void **state)
{
    (void)state;
    stream(1, false);
}

static void test_striped_stream_allocates_nothing(void **state)
{
    (void)state;
    stream(2, false);
}

/* Rate control on: holding and releasing operations allocates nothing either. */
static void test_paced_stream_allocates_nothing(void **state)
{
    (void)state;
    stream(2, true);
}

/* --- Running out ------------------------------------------------------------------------- */

/* Submit until the engine takes it; how long that took. Fails past RECOVER_NS. */
static uint64_t submit_until_taken(fixture_t *f, inter_request_t **req_p)
{
    uint64_t start = util_clock_now_ns(), now;
    strata_status_t status;

    while ((status = write_at(f, 0, 64, req_p)) == STRATA_ERR_BUSY) {
        now = util_clock_now_ns();
        assert_true(now - start < RECOVER_NS);
        sched_yield();
    }
    assert_int_equal(status, STRATA_OK);
    return util_clock_now_ns() - start;
}

static int called; /* by the proxy, for a notify that must never be made */

static void on_imm(void *arg, uint32_t imm, strata_status_t status)
{
    (void)arg;
    (void)imm;
    (void)status;
    called = 1;
}

static void test_requests_run_out(void **state)
{
    enum { POOL = 8 };
    inter_request_t *held[POOL], *req = NULL;
    unsigned char in[POOL][64];
    fixture_t f;

    (void)state;
    fixture_open(&f, POOL, 0, 1, false);
    /* Receives nobody sends to: every request held. */
    for (int i = 0; i < POOL; ++i) {
        assert_int_equal(inter_engine_recv(f.engine, 0, in[i], sizeof(in[i]), &held[i]),
                         STRATA_OK);
    }
    assert_int_equal(write_at(&f, 0, 64, &req), STRATA_ERR_BUSY);
    assert_int_equal(inter_engine_send(f.engine, 0, "x", 1, &req), STRATA_ERR_BUSY);
    assert_int_equal(inter_engine_recv(f.engine, 0, in[0], 64, &req), STRATA_ERR_BUSY);
    if (inter_engine_has_read(f.engine)) {
        assert_int_equal(inter_engine_read(f.engine, 0, f.dst_mr, 0, &f.src_desc, 0, 64, &req),
                         STRATA_ERR_BUSY);
    }
    assert_int_equal(inter_engine_imm_notify(f.engine, IMM, 1, 0, on_imm, NULL),
                     STRATA_ERR_BUSY);
    assert_null(req);
    /* Cancelled and given back: taken again within moments, not at the next heartbeat. */
    for (int i = 0; i < POOL; ++i) {
        inter_request_cancel(held[i]);
        assert_int_equal(inter_request_wait(held[i], WAIT_NS), STRATA_ERR_CANCELLED);
        inter_request_free(held[i]);
    }
    submit_until_taken(&f, &req);
    wait_ok(req);

    /* Completed writes the caller still holds keep their requests. */
    for (int i = 0; i < POOL; ++i) {
        held[i] = NULL;
        submit_until_taken(&f, &held[i]);
    }
    for (int i = 0; i < POOL; ++i) {
        assert_int_equal(inter_request_wait(held[i], WAIT_NS), STRATA_OK);
    }
    assert_int_equal(write_at(&f, 0, 64, &req), STRATA_ERR_BUSY);
    for (int i = 0; i < POOL; ++i) {
        inter_request_free(held[i]);
    }
    submit_until_taken(&f, &req);
    wait_ok(req);
    assert_int_equal(inter_engine_imm_wait(f.engine, IMM, 2 + POOL, 0, WAIT_NS), STRATA_OK);
    assert_int_equal(called, 0);
    fixture_close(&f);
}

/* One rail: a write is one operation; POOL requests, and one rank, make POOL + 1 of them. */
/* A receive cancelled before the proxy took it from the submissions: the proxy's sweep,
 * due at the cancel, may run before it takes the receive, and no later sweep is due; the
 * receive must end at once all the same, not at the heartbeat's sweep (10 s here). The
 * proxy naps when idle, so the submission and its cancel often fall into one nap. */
static void test_cancel_before_taken(void **state)
{
    unsigned char in[64];
    fixture_t f;

    (void)state;
    fixture_open(&f, 8, 0, 1, false);
    for (int i = 0; i < 200; ++i) {
        inter_request_t *req = NULL;

        util_sleep_ns(UTIL_NSEC_PER_MSEC); /* the proxy goes idle */
        assert_int_equal(inter_engine_recv(f.engine, 0, in, sizeof(in), &req), STRATA_OK);
        inter_request_cancel(req);
        assert_int_equal(inter_request_wait(req, RECOVER_NS), STRATA_ERR_CANCELLED);
        inter_request_free(req);
    }
    fixture_close(&f);
}

static void test_operations_run_out(void **state)
{
    enum { POOL = 8, OPS = POOL + 1 };
    uint32_t pages[OPS + 1];
    inter_request_t *held, *req = NULL;
    uint64_t start;
    strata_status_t status;
    fixture_t f;

    (void)state;
    fixture_open(&f, POOL, 0, 1, false);
    assert_int_equal(inter_engine_num_rails(f.engine), 1);
    for (uint32_t i = 0; i <= OPS; ++i) {
        pages[i] = i;
    }
    log_capture_start();
    assert_int_equal(inter_engine_write_paged(f.engine, 0, f.src_mr, &f.dst_desc, pages, pages,
                                              OPS + 1, 4096, 4096, false, 0, &req),
                     STRATA_ERR_INVALID);
    log_capture_stop();
    assert_true(log_captured("a request of 10 operations", "more than the 9",
                             "STRATA_INTER_REQUESTS"));
    assert_null(req);

    /* One held write leaves POOL of the OPS operations: a paged write of OPS waits. */
    submit_until_taken(&f, &held);
    assert_int_equal(inter_request_wait(held, WAIT_NS), STRATA_OK);
    assert_int_equal(inter_engine_write_paged(f.engine, 0, f.src_mr, &f.dst_desc, pages, pages,
                                              OPS, 4096, 4096, false, 0, &req),
                     STRATA_ERR_BUSY);
    inter_request_free(held);
    start = util_clock_now_ns();
    while ((status = inter_engine_write_paged(f.engine, 0, f.src_mr, &f.dst_desc, pages, pages,
                                              OPS, 4096, 4096, false, 0, &req)) ==
           STRATA_ERR_BUSY) {
        assert_true(util_clock_now_ns() - start < RECOVER_NS);
        sched_yield();
    }
    assert_int_equal(status, STRATA_OK);
    wait_ok(req);
    assert_memory_equal(f.dst, f.src, (size_t)OPS * 4096);
    fixture_close(&f);
}

/* Messages of 512 KiB: 16 MiB holds 32 copies, fewer than a rail's 64 send buffers, so 64;
 * and fewer than the 100 requests. Sends held run out of copies; writes still go. */
static void test_send_copies_run_out(void **state)
{
    enum { POOL = 100, COPIES = 64 };
    inter_request_t *sends[COPIES], *req = NULL;
    uint64_t start;
    strata_status_t status;
    fixture_t f;

    (void)state;
    fixture_open(&f, POOL, 512 << 10, 1, false);
    for (int i = 0; i < COPIES; ++i) {
        assert_int_equal(inter_engine_send(f.engine, 0, "y", 1, &sends[i]), STRATA_OK);
    }
    assert_int_equal(inter_engine_send(f.engine, 0, "y", 1, &req), STRATA_ERR_BUSY);
    assert_null(req);
    submit_until_taken(&f, &req); /* requests and operations are left */
    wait_ok(req);
    for (int i = 0; i < COPIES; ++i) {
        wait_ok(sends[i]);
    }
    start = util_clock_now_ns();
    while ((status = inter_engine_send(f.engine, 0, "z", 1, &req)) == STRATA_ERR_BUSY) {
        assert_true(util_clock_now_ns() - start < RECOVER_NS);
        sched_yield();
    }
    assert_int_equal(status, STRATA_OK);
    wait_ok(req);
    fixture_close(&f); /* with the messages nobody received */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_allocates_nothing),
        cmocka_unit_test(test_striped_stream_allocates_nothing),
        cmocka_unit_test(test_paced_stream_allocates_nothing),
        cmocka_unit_test(test_requests_run_out),
        cmocka_unit_test(test_cancel_before_taken),
        cmocka_unit_test(test_operations_run_out),
        cmocka_unit_test(test_send_copies_run_out),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
