/*
 * A work ring flushed by loopback reads (inter/inter_ring.c, flush_by_read): the counts of
 * what the network wrote into the ring's memory are raised only once a read from this rank
 * to itself has completed on every rail that wrote, and with their values from when that
 * read was posted; counts of completed writes alone go out at once; a failed read fails
 * the ring and raises nothing; a full send queue delays the read, not the rule. The engine
 * is made by hand around a transport that records what is posted.
 */
#include "inter/inter_internal.h"

#include "common/log_capture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define WORLD    2
#define SELF     1
#define RAILS    2
#define SLOTS    4
#define COUNTERS 2
#define IMMS     2
#define IMM_BASE 100

static struct {
    inter_post_t    posts[16];
    int             num_posts;
    strata_status_t post_status; /* what the next post returns */
} fake;

static strata_status_t fake_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                                 int *posted_p)
{
    (void)tp;
    *posted_p = 0;
    if (fake.post_status != STRATA_OK) {
        return fake.post_status;
    }
    for (int i = 0; i < count; ++i) {
        fake.posts[fake.num_posts++ % 16] = posts[i];
    }
    *posted_p = count;
    return STRATA_OK;
}

static const inter_transport_ops_t fake_ops = {.name = "fake", .post = fake_post};

static struct {
    inter_engine_t     engine;
    inter_transport_t  tp[RAILS];
    uint64_t           peers[RAILS][WORLD];
    uint64_t           ctrl[8];
    inter_mr_t         ctrl_mr, area_mr;
    inter_rdesc_t      desc[WORLD];
    char               area[4096];
    util_work_ring_t  *mem;
    inter_ring_t      *ring;
} t;

static void make_engine(void)
{
    memset(&t, 0, sizeof(t));
    memset(&fake, 0, sizeof(fake));
    t.engine.params.rank       = SELF;
    t.engine.params.world_size = WORLD;
    t.engine.ops               = &fake_ops;
    t.engine.num_rails         = RAILS;
    t.engine.ctrl              = t.ctrl;
    t.engine.ctrl_mr           = &t.ctrl_mr;
    for (int r = 0; r < RAILS; ++r) {
        t.tp[r] = (inter_transport_t){.has_read = true, .loopback_flush = true,
                                      .virt_addr = true};
        t.engine.rails[r].tp    = &t.tp[r];
        t.engine.rails[r].peers = t.peers[r];
        t.ctrl_mr.tmr[r].desc   = &t.ctrl_mr.tmr[r]; /* any pointer the post must carry */
        for (int p = 0; p < WORLD; ++p) {
            t.peers[r][p] = 1000u * (unsigned)r + (unsigned)p;
        }
    }
    t.area_mr = (inter_mr_t){.addr = t.area, .len = sizeof(t.area), .num_rails = RAILS};
    for (int p = 0; p < WORLD; ++p) {
        t.desc[p] = (inter_rdesc_t){.magic = INTER_RDESC_MAGIC, .num_rails = RAILS,
                                    .base = 0x10000u * (unsigned)(p + 1),
                                    .length = sizeof(t.area),
                                    .keys = {70u + (unsigned)p, 80u + (unsigned)p}};
    }
}

static int setup_ring(bool flush_by_read)
{
    inter_ring_params_t p = {.slots = SLOTS, .num_counters = COUNTERS, .num_imms = IMMS,
                             .imm_base = IMM_BASE, .num_regions = 1,
                             .regions = {&t.area_mr}, .remote = {t.desc},
                             .flush_by_read = flush_by_read};

    make_engine();
    t.mem = calloc(1, util_work_ring_bytes(SLOTS, COUNTERS, IMMS));
    p.mem = t.mem;
    t.ring = inter_ring_new(&t.engine, &p);
    if (t.mem == NULL || t.ring == NULL) {
        return -1;
    }
    inter_ring_init_mem(&p);
    t.engine.rings = t.ring;
    return 0;
}

static int setup_flushed(void **state)
{
    (void)state;
    return setup_ring(true);
}

static int setup_plain(void **state)
{
    (void)state;
    return setup_ring(false);
}

static int teardown(void **state)
{
    (void)state;
    inter_ring_free(t.ring);
    free(t.mem);
    return 0;
}

static uint64_t imm_count(int i)
{
    return util_work_ring_imms(t.mem)[i];
}

static uint64_t counter(int i)
{
    return util_work_ring_counters(t.mem)[i];
}

/* Post k of the fake transport is this rank's loopback read of its area on rail. */
static void assert_flush_read(int k, int rail)
{
    const inter_post_t *post = &fake.posts[k];
    const inter_op_t *op = post->context;

    assert_int_equal(post->kind, INTER_POST_READ);
    assert_int_equal(op->rail, rail);
    assert_int_equal(op->kind, INTER_OP_FLUSH);
    assert_int_equal(post->peer, t.peers[rail][SELF]);
    assert_int_equal(post->raddr, t.desc[SELF].base);
    assert_int_equal(post->rkey, t.desc[SELF].keys[rail]);
    assert_ptr_equal(post->buf, &t.ctrl[INTER_CTRL_FLUSH]);
    assert_ptr_equal(post->desc, t.ctrl_mr.tmr[rail].desc);
    assert_int_equal(post->len, sizeof(uint64_t));
}

static void complete(int k, strata_status_t status)
{
    inter_ring_flush_done(&t.engine, fake.posts[k].context, status);
}

/* A work ring command of kind on rail, posted and completed. */
static void command_done(inter_op_kind_t kind, int rail, uint32_t counter_index)
{
    inter_ring_t *ring = t.ring;
    uint64_t ticket = ring->consumed++;
    inter_op_t *op = &ring->ops[ticket & ring->mask];

    *op = (inter_op_t){.kind = kind, .rail = rail, .peer = 0, .ring = ring,
                       .slot = (int)(ticket & ring->mask), .counter = counter_index};
    ring->done[op->slot] = false;
    ring->in_flight++;
    inter_ring_op_done(&t.engine, op, STRATA_OK);
}

static void test_immediate_waits_for_its_rail_read(void **state)
{
    inter_ring_stats_t stats;

    (void)state;
    assert_true(inter_ring_imm(&t.engine, IMM_BASE, 1));
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 1);
    assert_flush_read(0, 1);
    assert_int_equal(imm_count(0), 0);
    /* One more for the same count, and another on rail 0, while the read is out: the
     * flush raises count 0 to 1 only, the value it began with. */
    assert_true(inter_ring_imm(&t.engine, IMM_BASE, 1));
    assert_true(inter_ring_imm(&t.engine, IMM_BASE + 1, 0));
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 1);
    assert_int_equal(imm_count(0), 0);
    complete(0, STRATA_OK);
    assert_int_equal(imm_count(0), 1);
    assert_int_equal(imm_count(1), 0);
    /* The next flush reads on both rails and raises both once both are back. */
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 3);
    assert_flush_read(1, 0);
    assert_flush_read(2, 1);
    complete(1, STRATA_OK);
    assert_int_equal(imm_count(1), 0);
    complete(2, STRATA_OK);
    assert_int_equal(imm_count(0), 2);
    assert_int_equal(imm_count(1), 1);
    inter_ring_stats(t.ring, &stats);
    assert_int_equal(stats.flushes, 3);
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 3); /* nothing new landed: no read */
}

static void test_reads_are_flushed_writes_are_not(void **state)
{
    (void)state;
    command_done(INTER_OP_WRITE, 1, 0);
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 0);
    assert_int_equal(counter(0), 1); /* a write's completion brought nothing here */
    command_done(INTER_OP_READ, 0, 1);
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 1);
    assert_flush_read(0, 0);
    assert_int_equal(counter(1), 0);
    /* A write completing while that flush is out waits behind it. */
    command_done(INTER_OP_WRITE, 1, 0);
    inter_ring_publish(&t.engine);
    assert_int_equal(counter(0), 1);
    complete(0, STRATA_OK);
    assert_int_equal(counter(1), 1);
    inter_ring_publish(&t.engine);
    assert_int_equal(counter(0), 2);
    assert_int_equal(fake.num_posts, 1);
}

static void test_failed_read_fails_the_ring(void **state)
{
    (void)state;
    assert_true(inter_ring_imm(&t.engine, IMM_BASE, 0));
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 1);
    log_capture_start();
    complete(0, STRATA_ERR_TRANSPORT);
    log_capture_stop();
    assert_true(log_captured("loopback read on rail 0 failed", NULL, NULL));
    assert_int_equal(imm_count(0), 0);
    assert_int_equal(t.mem->failure, STRATA_ERR_TRANSPORT);
}

static void test_full_queue_delays_the_read(void **state)
{
    (void)state;
    assert_true(inter_ring_imm(&t.engine, IMM_BASE + 1, 1));
    fake.post_status = STRATA_ERR_BUSY;
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 0);
    assert_int_equal(imm_count(1), 0);
    fake.post_status = STRATA_OK;
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 1);
    assert_flush_read(0, 1);
    assert_int_equal(imm_count(1), 0);
    complete(0, STRATA_OK);
    assert_int_equal(imm_count(1), 1);
}

static void test_unflushed_ring_raises_at_once(void **state)
{
    (void)state;
    assert_true(inter_ring_imm(&t.engine, IMM_BASE, 1));
    inter_ring_publish(&t.engine);
    assert_int_equal(fake.num_posts, 0);
    assert_int_equal(imm_count(0), 1);
}

static void test_who_can_flush(void **state)
{
    (void)state;
    make_engine();
    assert_true(inter_engine_can_flush_by_read(&t.engine));
    t.tp[1].loopback_flush = false; /* ucx: a read to itself is a memory copy */
    assert_false(inter_engine_can_flush_by_read(&t.engine));
    t.tp[1].loopback_flush = true;
    t.tp[0].has_read       = false;
    assert_false(inter_engine_can_flush_by_read(&t.engine));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_immediate_waits_for_its_rail_read, setup_flushed,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reads_are_flushed_writes_are_not, setup_flushed,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failed_read_fails_the_ring, setup_flushed,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_full_queue_delays_the_read, setup_flushed,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unflushed_ring_raises_at_once, setup_plain,
                                        teardown),
        cmocka_unit_test(test_who_can_flush),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
