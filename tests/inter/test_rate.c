/*
 * Rate control towards one peer (inter/inter_rate.c) on synthetic links: a bottleneck of
 * known capacity served in order behind a fixed propagation round trip, simulated event by
 * event, against which the estimates are checked: the rate of a saturated link, the window
 * near gain x rate x base RTT, a rate that halves, the weight of one sample, samples of a
 * quiet application, the floor, operations as large as the floor on a path whose base RTT
 * small operations set, operations larger than the window, a base RTT that grows,
 * completions reported in batches (and the cap on what they add), a path used after a pause, failed operations, and the
 * estimator without pacing.
 */
#include "inter/inter_rate.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#define MAX_FLIGHT 4096
#define US         1000ull
#define MS         1000000ull

/* One operation on the link: when it completes, and what its completion hands back. */
typedef struct flight {
    uint64_t           bytes, done_ns;
    inter_rate_stamp_t stamp;
} flight_t;

/* A bottleneck of capacity_Bps served first come first served, then base_rtt_ns of
 * propagation: an operation posted at t completes at max(t, free) + bytes / capacity +
 * base RTT, in the order posted. */
typedef struct sim {
    inter_rate_t rate;
    double       capacity_Bps;
    uint64_t     base_rtt_ns;
    uint64_t     hold_ns;         /* completions are reported at multiples of this (0: at once) */
    double       free_ns;         /* when the bottleneck is done with what it holds */
    uint64_t     now;
    flight_t     flights[MAX_FLIGHT];
    int          first, count;
    uint64_t     completed;
    int          most_in_flight;  /* operations, since the last reset */
    uint64_t     least_window;    /* the smallest window seen after a completion */
    bool         saw_probe_floor; /* the window was the floor during a probe */
} sim_t;

static void sim_init(sim_t *s, double capacity_Bps, uint64_t base_rtt_ns, bool pace,
                     uint64_t floor_bytes, uint64_t lifetime_ns)
{
    inter_rate_params_t params = {.pace = pace, .floor_bytes = floor_bytes,
                                  .min_rtt_lifetime_ns = lifetime_ns};

    *s = (sim_t){.capacity_Bps = capacity_Bps, .base_rtt_ns = base_rtt_ns,
                 .least_window = UINT64_MAX};
    inter_rate_init(&s->rate, &params);
}

static void sim_post(sim_t *s, uint64_t bytes, bool more_queued)
{
    flight_t *f = &s->flights[(s->first + s->count) % MAX_FLIGHT];
    double start = (double)s->now > s->free_ns ? (double)s->now : s->free_ns;

    assert_true(s->count < MAX_FLIGHT);
    s->count++;
    if (s->count > s->most_in_flight) {
        s->most_in_flight = s->count;
    }
    s->free_ns = start + (double)bytes * 1e9 / s->capacity_Bps;
    f->bytes   = bytes;
    f->done_ns = (uint64_t)llround(s->free_ns) + s->base_rtt_ns;
    if (s->hold_ns != 0) { /* a receiver that reports completions in batches */
        f->done_ns = (f->done_ns + s->hold_ns - 1) / s->hold_ns * s->hold_ns;
    }
    inter_rate_posted(&s->rate, bytes, s->now, more_queued, &f->stamp);
}

/* Time runs to the next completion, which the estimator is told of. */
static void sim_complete_next(sim_t *s)
{
    flight_t *f = &s->flights[s->first];

    assert_true(s->count > 0);
    s->first = (s->first + 1) % MAX_FLIGHT;
    s->count--;
    s->now = f->done_ns > s->now ? f->done_ns : s->now;
    inter_rate_completed(&s->rate, f->bytes, &f->stamp, true, s->now);
    s->completed++;
    if (s->rate.window < s->least_window) {
        s->least_window = s->rate.window;
    }
    if (s->rate.probing && s->rate.window == s->rate.params.floor_bytes) {
        s->saw_probe_floor = true;
    }
}

/* An application that always has more: it posts op_bytes at a time whatever the window
 * admits, then waits for a completion; once until_ns is reached, one step at most. */
static void sim_step(sim_t *s, uint64_t op_bytes)
{
    while (inter_rate_admits(&s->rate, 0)) {
        sim_post(s, op_bytes, true);
    }
    if (s->count == 0) {
        fail_msg("deadlock: nothing in flight and the window (%llu bytes) admits nothing",
                 (unsigned long long)s->rate.window);
    }
    sim_complete_next(s);
}

static void sim_saturate(sim_t *s, uint64_t op_bytes, uint64_t until_ns)
{
    while (s->now < until_ns) {
        sim_step(s, op_bytes);
    }
}

/* Ten operations of bytes on an idle path, 1 ms apart: they set the base RTT. */
static void sim_idle_base_rtt(sim_t *s, uint64_t bytes)
{
    for (int i = 0; i < 10; ++i) {
        sim_post(s, bytes, false);
        sim_complete_next(s);
        s->now += 1 * MS;
    }
}

/* Bytes per second delivered by a saturated stream of op_bytes operations over 50 ms,
 * after 20 ms to settle. */
static double sim_throughput(sim_t *s, uint64_t op_bytes)
{
    uint64_t start, delivered;

    sim_saturate(s, op_bytes, s->now + 20 * MS);
    start     = s->now;
    delivered = s->rate.delivered;
    sim_saturate(s, op_bytes, s->now + 50 * MS);
    return (double)(s->rate.delivered - delivered) * 1e9 / (double)(s->now - start);
}

static void assert_near(double got, double want, double tolerance, const char *what)
{
    if (fabs(got - want) > tolerance * fabs(want)) {
        fail_msg("%s: %.6g, expected %.6g within %.1f%%", what, got, want, tolerance * 100);
    }
}

/* 10 GB/s, 20 us of propagation, operations of 50 kB (5 us on the wire): the least RTT
 * is 25 us, the path holds 250 kB, and the window should be twice that plus the floor. */
#define LINK_BPS   1e10
#define LINK_RTT   (20 * US)
#define OP_BYTES   50000ull
#define BASE_RTT   (25 * US)
#define FLOOR      OP_BYTES

/* The window the estimator should keep: gain x rate x base RTT, plus the floor (one
 * operation in transfer). */
static double window_above(uint64_t floor_bytes, double rate_Bps, uint64_t rtt_ns)
{
    return INTER_RATE_WINDOW_GAIN * rate_Bps * (double)rtt_ns / 1e9 + (double)floor_bytes;
}

static double window_for(double rate_Bps, uint64_t rtt_ns)
{
    return window_above(FLOOR, rate_Bps, rtt_ns);
}

static void test_constant_rate(void **state)
{
    sim_t s;

    (void)state;
    sim_init(&s, LINK_BPS, LINK_RTT, true, FLOOR, 0);
    sim_saturate(&s, OP_BYTES, 50 * MS);
    assert_near(s.rate.rate_Bps, LINK_BPS, 0.03, "rate of a saturated 10 GB/s link");
    assert_int_equal(s.rate.min_rtt_ns, BASE_RTT);
    assert_near((double)s.rate.window, window_for(LINK_BPS, BASE_RTT), 0.03, "window");
    assert_true(s.rate.in_flight <= s.rate.window + OP_BYTES);
    assert_false(s.rate.probing);
}

/* The link's capacity halves under a saturated stream: the window must follow to the new
 * rate x the same base RTT within a bounded number of base RTTs. */
static void test_rate_halves(void **state)
{
    double target = window_for(LINK_BPS / 2, BASE_RTT);
    uint64_t change;
    sim_t s;

    (void)state;
    sim_init(&s, LINK_BPS, LINK_RTT, true, FLOOR, 0);
    sim_saturate(&s, OP_BYTES, 50 * MS);
    s.capacity_Bps = LINK_BPS / 2;
    change         = s.now;
    while ((double)s.rate.window > 1.1 * target) {
        sim_step(&s, OP_BYTES);
        if (s.now - change > 20 * BASE_RTT) {
            fail_msg("window still %llu bytes %llu base RTTs after the rate halved (target %.0f)",
                     (unsigned long long)s.rate.window,
                     (unsigned long long)((s.now - change) / BASE_RTT), target);
        }
    }
    printf("window within 10%% of the halved target after %.1f base RTTs\n",
           (double)(s.now - change) / BASE_RTT);
    sim_saturate(&s, OP_BYTES, s.now + 50 * MS);
    assert_near(s.rate.rate_Bps, LINK_BPS / 2, 0.03, "rate after halving");
    assert_near((double)s.rate.window, target, 0.03, "window after halving");
}

/*
 * After a steady run, the completion of an operation made by hand: posted send_ns after
 * the operation delivered last then had been posted, and ack_ns after that delivery, with
 * bytes_during delivered meanwhile (its own included). Returns the average before it.
 */
static double one_sample(sim_t *s, uint64_t send_ns, uint64_t ack_ns, uint64_t bytes_during)
{
    double before;
    inter_rate_stamp_t stamp;

    sim_init(s, LINK_BPS, LINK_RTT, true, FLOOR, 0);
    sim_saturate(s, OP_BYTES, 50 * MS);
    before = s->rate.rate_Bps;
    stamp  = (inter_rate_stamp_t){
         .posted_ns       = s->now - 2 * BASE_RTT,
         .first_posted_ns = s->now - 2 * BASE_RTT - send_ns,
         .delivered       = s->rate.delivered + OP_BYTES - bytes_during,
         .delivered_ns    = s->now - ack_ns,
    };
    inter_rate_completed(&s->rate, OP_BYTES, &stamp, true, s->now);
    return before;
}

/* One sample moves the average by 1/8 of its distance: a sample of twice the rate. */
static void test_sample_weight(void **state)
{
    uint64_t interval = 4 * BASE_RTT;
    double sample = 2 * LINK_BPS, before;
    sim_t s;

    (void)state;
    before = one_sample(&s, 0, interval, (uint64_t)(sample * (double)interval / 1e9));
    assert_near(s.rate.rate_Bps, before + (sample - before) / 8, 1e-9,
                "average after one sample of twice the rate");
}

/* The sample's interval is the longer of the send and the delivery intervals: bytes that
 * took long to send but whose completions came bunched are not a faster path. */
static void test_sample_interval(void **state)
{
    uint64_t bytes = 2 * OP_BYTES * 10;
    double before;
    sim_t s;

    (void)state;
    before = one_sample(&s, 20 * BASE_RTT, 2 * BASE_RTT, bytes); /* sent over 20 RTTs */
    assert_near(s.rate.rate_Bps,
                before + ((double)bytes * 1e9 / (20.0 * BASE_RTT) - before) / 8, 1e-9,
                "sample over the send interval");
    before = one_sample(&s, 0, 10 * BASE_RTT, bytes); /* delivered over 10 RTTs */
    assert_near(s.rate.rate_Bps,
                before + ((double)bytes * 1e9 / (10.0 * BASE_RTT) - before) / 8, 1e-9,
                "sample over the delivery interval");
}

/* An application that posts one operation at a time with pauses shows its own pace, not
 * the path's: after a saturated run, such samples must not pull the estimate down. */
static void test_app_limited_samples(void **state)
{
    sim_t s;

    (void)state;
    sim_init(&s, LINK_BPS, LINK_RTT, true, FLOOR, 0);
    sim_saturate(&s, OP_BYTES, 50 * MS);
    while (s.count > 0) {
        sim_complete_next(&s);
    }
    for (int i = 0; i < 200; ++i) {
        s.now += 1 * MS;
        sim_post(&s, OP_BYTES, false);
        sim_complete_next(&s);
    }
    assert_near(s.rate.rate_Bps, LINK_BPS, 0.03, "rate after 200 app-limited operations");
}

/* A slow path whose rate x RTT is far below the floor: the window is the floor and that
 * product, never less than the floor. */
static void test_window_floor(void **state)
{
    uint64_t floor = 1 << 18;
    sim_t s;

    (void)state;
    sim_init(&s, 1e8, 1 * US, true, floor, 0); /* 100 MB/s: 2.2 kB in flight would do */
    sim_saturate(&s, 1000, 200 * MS);
    assert_near(s.rate.rate_Bps, 1e8, 0.03, "rate of a 100 MB/s link");
    assert_true(window_above(0, s.rate.rate_Bps, s.rate.min_rtt_ns) < (double)floor / 100);
    assert_true(fabs((double)s.rate.window -
                     window_above(floor, s.rate.rate_Bps, s.rate.min_rtt_ns)) < 1.0);
    assert_true(s.least_window >= floor);
    assert_true(s.rate.in_flight <= s.rate.window + 1000);
}

/*
 * The base RTT comes from small operations (a barrier, a header) while the bulk goes in
 * operations as large as the floor, each taking several base RTTs on the wire: the window
 * must let a second one follow the first, or the path idles while each completes.
 * 10 GB/s, 20 us: a 1 MB operation takes 100 us on the wire; alone in flight at a time the
 * path would carry 1 MB per 120 us, 83% of its capacity.
 */
static void test_floor_sized_operations(void **state)
{
    uint64_t op = 1000000;
    sim_t s;

    (void)state;
    sim_init(&s, LINK_BPS, LINK_RTT, true, op, 0);
    sim_idle_base_rtt(&s, 8); /* from 8-byte operations */
    assert_int_equal(s.rate.min_rtt_ns, LINK_RTT + 1); /* 8 bytes take 0.8 ns on the wire */
    assert_near(sim_throughput(&s, op), LINK_BPS, 0.05, "throughput of floor-sized operations");
}

/* Small operations make the base RTT small and the window about the floor; operations ten times
 * larger than the floor still go, one at a time, each once the path is empty. */
static void test_larger_than_window(void **state)
{
    uint64_t floor = 10000, big = 10 * floor;
    sim_t s;

    (void)state;
    sim_init(&s, 1e8, 1 * US, true, floor, 0);
    sim_saturate(&s, 100, 10 * MS);
    assert_true(s.rate.window < floor + floor / 10);
    while (s.count > 0) {
        sim_complete_next(&s);
    }
    s.most_in_flight = 0;
    for (uint64_t n = s.completed; s.completed < n + 20;) {
        sim_step(&s, big);
    }
    assert_int_equal(s.most_in_flight, 1);
    assert_true(s.rate.window < floor + floor / 10);
}

/* The base RTT grows (a new route) under a saturated stream whose queue hides it: once the
 * least RTT has not been seen for its lifetime, the window drops to the floor, the RTT of
 * an operation posted under it is the new base, and the window follows. */
static void test_base_rtt_grows(void **state)
{
    uint64_t lifetime = 2 * MS, new_base = 60 * US + OP_BYTES * 1000000000ull / 10000000000ull;
    sim_t s;

    (void)state;
    sim_init(&s, LINK_BPS, LINK_RTT, true, FLOOR, lifetime);
    sim_saturate(&s, OP_BYTES, 10 * MS);
    assert_int_equal(s.rate.min_rtt_ns, BASE_RTT);
    s.base_rtt_ns      = 60 * US;
    s.saw_probe_floor  = false;
    sim_saturate(&s, OP_BYTES, s.now + lifetime + 100 * new_base);
    for (uint64_t end = s.now + 100 * new_base; s.rate.probing;) {
        sim_step(&s, OP_BYTES);
        if (s.now > end) {
            fail_msg("still probing 100 RTTs on");
        }
    }
    assert_true(s.saw_probe_floor);
    assert_int_equal(s.rate.min_rtt_ns, new_base);
    assert_near(s.rate.rate_Bps, LINK_BPS, 0.05, "rate across the probe");
    assert_near((double)s.rate.window, window_for(LINK_BPS, new_base), 0.05,
                "window for the new base RTT");
}

/* The window's aggregation allowance: what it holds beyond the floor and 2 x rate x base RTT. */
static double sim_allowance(const sim_t *s)
{
    return (double)s->rate.window - window_for(s->rate.rate_Bps, s->rate.min_rtt_ns);
}

/* The link of these tests, its base RTT measured, with completions reported in batches
 * every hold_ns from now on. */
static void sim_init_batched(sim_t *s, uint64_t hold_ns)
{
    sim_init(s, LINK_BPS, LINK_RTT, true, FLOOR, 0);
    sim_idle_base_rtt(s, OP_BYTES);
    s->hold_ns = hold_ns;
}

/*
 * Completions reported in batches every 200 us (a proxy or receiver that runs in time
 * slices), on a path whose base RTT is 25 us: without the aggregation allowance the window
 * (2 x rate x base RTT + floor, 550 kB) holds the path idle through each silence, and the
 * rate estimate, taken under that window, falls with it (5% of the capacity measured with
 * the allowance left out). With it the path must run within 10% of its capacity, and the
 * allowance must fade once completions come smoothly again.
 */
static void test_bunched_completions(void **state)
{
    sim_t s;

    (void)state;
    sim_init_batched(&s, 200 * US);
    assert_near(sim_throughput(&s, OP_BYTES), LINK_BPS, 0.10,
                "throughput with completions in batches of 200 us");
    assert_true(sim_allowance(&s) > 0);
    s.hold_ns = 0; /* smooth again: within 10 rounds (some ms here) the allowance is gone */
    sim_saturate(&s, OP_BYTES, s.now + 20 * MS);
    assert_near((double)s.rate.window, window_for(s.rate.rate_Bps, s.rate.min_rtt_ns), 0.01,
                "window once completions are smooth again");
}

/*
 * The allowance is the most measured over the last INTER_RATE_AGGREGATION_ROUNDS round
 * trips, kept in two halves, and every half-window the older half is dropped: the newer
 * one must still hold it then. With completions in steady batches (16 such drops in the
 * 20 ms checked here), the window must never fall back to what the rate alone asks for.
 */
static void test_aggregation_held_across_halves(void **state)
{
    double allowance, least_allowance;
    sim_t s;

    (void)state;
    sim_init_batched(&s, 200 * US);
    sim_saturate(&s, OP_BYTES, s.now + 20 * MS);
    allowance       = sim_allowance(&s);
    least_allowance = allowance;
    for (uint64_t until = s.now + 20 * MS; s.now < until;) {
        sim_step(&s, OP_BYTES); /* one completion, and the window it leaves */
        if (sim_allowance(&s) < least_allowance) {
            least_allowance = sim_allowance(&s);
        }
    }
    if (allowance <= 0 || least_allowance < 0.5 * allowance) {
        fail_msg("the allowance (%.0f bytes) fell to %.0f between batches", allowance,
                 least_allowance);
    }
}

/* Batches 5 ms apart, longer than INTER_RATE_AGGREGATION_MAX_NS: the bursts would grow the
 * allowance past what the rate delivers in that time, and the cap must hold it there. */
static void test_aggregation_cap(void **state)
{
    double cap;
    sim_t s;

    (void)state;
    sim_init_batched(&s, 5 * MS);
    sim_saturate(&s, OP_BYTES, s.now + 100 * MS);
    cap = s.rate.rate_Bps * (double)INTER_RATE_AGGREGATION_MAX_NS / 1e9;
    if (sim_allowance(&s) > cap + 1.0 || sim_allowance(&s) < 0.9 * cap) {
        fail_msg("allowance %.0f bytes, expected the cap, rate x %llu ns = %.0f",
                 sim_allowance(&s), (unsigned long long)INTER_RATE_AGGREGATION_MAX_NS, cap);
    }
}

/* A path first used a second in: the first sample's interval starts at its post, not at
 * the estimator's creation (nor, later, at the last delivery before a pause). */
static void test_idle_path_sample(void **state)
{
    sim_t s;

    (void)state;
    sim_init(&s, LINK_BPS, LINK_RTT, true, FLOOR, 0);
    s.now = 1000 * MS;
    sim_post(&s, OP_BYTES, true);
    sim_complete_next(&s);
    assert_near(s.rate.rate_Bps, (double)OP_BYTES * 1e9 / BASE_RTT, 1e-9,
                "first sample: one operation over its RTT");
}

/* A failed operation leaves the path and gives no sample. */
static void test_failed_operation(void **state)
{
    inter_rate_params_t params = {.pace = true, .floor_bytes = FLOOR};
    inter_rate_stamp_t stamp;
    inter_rate_t rate;

    (void)state;
    inter_rate_init(&rate, &params);
    inter_rate_posted(&rate, 4096, 1 * MS, false, &stamp);
    assert_int_equal(rate.in_flight, 4096);
    inter_rate_completed(&rate, 4096, &stamp, false, 2 * MS);
    assert_int_equal(rate.in_flight, 0);
    assert_int_equal(rate.delivered, 0);
    assert_true(rate.rate_Bps == 0);
    assert_int_equal(rate.min_rtt_ns, 0);
    assert_int_equal(rate.window, INTER_RATE_INITIAL_FLOORS * FLOOR);
}

/* Without pacing nothing is held, whatever is in flight, and the rate is still estimated. */
static void test_estimate_only(void **state)
{
    sim_t s;

    (void)state;
    sim_init(&s, LINK_BPS, LINK_RTT, false, FLOOR, 0);
    assert_int_equal(s.rate.window, UINT64_MAX);
    for (int i = 0; i < 1000; ++i) {
        assert_true(inter_rate_admits(&s.rate, (uint64_t)i * OP_BYTES));
        sim_post(&s, OP_BYTES, i < 999);
    }
    assert_int_equal(s.rate.in_flight, 1000 * OP_BYTES);
    while (s.count > 0) {
        sim_complete_next(&s);
    }
    assert_int_equal(s.rate.window, UINT64_MAX);
    assert_int_equal(s.rate.paced, 0);
    assert_int_equal(s.rate.min_rtt_ns, BASE_RTT);
    assert_near(s.rate.rate_Bps, LINK_BPS, 0.05, "rate without pacing");
}

/* The window is checked against the bytes gathered into one post call too. */
static void test_admits_counts_bytes_ahead(void **state)
{
    inter_rate_params_t params = {.pace = true, .floor_bytes = 1000};
    inter_rate_stamp_t stamp;
    inter_rate_t rate;

    (void)state;
    inter_rate_init(&rate, &params); /* window: INTER_RATE_INITIAL_FLOORS x 1000 */
    assert_true(inter_rate_admits(&rate, 0));
    assert_true(inter_rate_admits(&rate, rate.window - 1));
    assert_false(inter_rate_admits(&rate, rate.window));
    inter_rate_posted(&rate, rate.window, 0, true, &stamp);
    assert_false(inter_rate_admits(&rate, 0));
    inter_rate_held(&rate);
    assert_int_equal(rate.paced, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant_rate),
        cmocka_unit_test(test_rate_halves),
        cmocka_unit_test(test_sample_weight),
        cmocka_unit_test(test_sample_interval),
        cmocka_unit_test(test_app_limited_samples),
        cmocka_unit_test(test_window_floor),
        cmocka_unit_test(test_floor_sized_operations),
        cmocka_unit_test(test_larger_than_window),
        cmocka_unit_test(test_base_rtt_grows),
        cmocka_unit_test(test_bunched_completions),
        cmocka_unit_test(test_aggregation_cap),
        cmocka_unit_test(test_aggregation_held_across_halves),
        cmocka_unit_test(test_idle_path_sample),
        cmocka_unit_test(test_failed_operation),
        cmocka_unit_test(test_estimate_only),
        cmocka_unit_test(test_admits_counts_bytes_ahead),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
