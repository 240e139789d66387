/*
 * Rate control towards one peer (inter_rate.h): delivery rate samples as BBR takes them
 * (draft-cheng-iccrg-delivery-rate-estimation), averaged; the base round trip as the least
 * RTT seen, measured again when it expires; the window as a multiple of their product plus
 * an allowance for completions that come in bursts.
 * docs/engine.md, "Rate control", says why.
 */
#include "inter_rate.h"

#define INTER_RATE_NS_PER_SEC 1e9

/* Time from one instant to a later one; 0 where the clock went backwards. */
static uint64_t inter_rate_elapsed(uint64_t from_ns, uint64_t to_ns)
{
    return to_ns > from_ns ? to_ns - from_ns : 0;
}

static uint64_t inter_rate_lifetime(const inter_rate_t *rate)
{
    return rate->params.min_rtt_lifetime_ns ? rate->params.min_rtt_lifetime_ns
                                            : INTER_RATE_MIN_RTT_LIFETIME_NS;
}

static void inter_rate_max_take(inter_rate_max_t *max, double value)
{
    if (value > max->half[0]) {
        max->half[0] = value;
    }
}

static double inter_rate_max_get(const inter_rate_max_t *max)
{
    return max->half[0] > max->half[1] ? max->half[0] : max->half[1];
}

/* The current half becomes the previous one, the oldest is dropped. */
static void inter_rate_max_rotate(inter_rate_max_t *max)
{
    max->half[1] = max->half[0];
    max->half[0] = 0;
}

/* The aggregation allowance: the most bytes seen delivered in a burst beyond what the rate
 * explains, over the last INTER_RATE_AGGREGATION_ROUNDS round trips, and at most what the
 * current rate delivers in INTER_RATE_AGGREGATION_MAX_NS (capped here, not when measured,
 * so that a rate that falls takes the allowance down with it at once). */
static double inter_rate_aggregation(const inter_rate_t *rate)
{
    double most = inter_rate_max_get(&rate->aggregation);
    double cap = rate->rate_Bps * (double)INTER_RATE_AGGREGATION_MAX_NS / INTER_RATE_NS_PER_SEC;

    return most < cap ? most : cap;
}

/* The window the estimates give: gain x rate x base RTT plus the floor (one operation in
 * transfer: the base RTT is that of the smallest operations, a chunk's own takes longer)
 * plus the aggregation allowance; the floor alone while the base RTT is measured again. */
static uint64_t inter_rate_target(const inter_rate_t *rate)
{
    uint64_t floor_bytes = rate->params.floor_bytes;
    double bytes;

    if (!rate->params.pace) {
        return UINT64_MAX;
    }
    if (rate->probing) {
        return floor_bytes;
    }
    if (rate->rate_Bps <= 0 || rate->min_rtt_ns == 0) {
        return INTER_RATE_INITIAL_FLOORS * floor_bytes;
    }
    bytes = INTER_RATE_WINDOW_GAIN * rate->rate_Bps * (double)rate->min_rtt_ns /
                INTER_RATE_NS_PER_SEC +
            (double)floor_bytes + inter_rate_aggregation(rate);
    if (bytes >= (double)(UINT64_MAX / 2)) {
        return UINT64_MAX / 2;
    }
    return (uint64_t)bytes;
}

void inter_rate_init(inter_rate_t *rate, const inter_rate_params_t *params)
{
    *rate        = (inter_rate_t){.params = *params};
    rate->window = inter_rate_target(rate);
}

bool inter_rate_admits(const inter_rate_t *rate, uint64_t bytes_ahead)
{
    if (!rate->params.pace) {
        return true;
    }
    return rate->in_flight < rate->window && bytes_ahead < rate->window - rate->in_flight;
}

void inter_rate_held(inter_rate_t *rate)
{
    rate->paced++;
}

void inter_rate_posted(inter_rate_t *rate, uint64_t bytes, uint64_t now_ns, bool more_queued,
                       inter_rate_stamp_t *stamp_p)
{
    bool probes = rate->probing && rate->in_flight < rate->params.floor_bytes;

    if (rate->in_flight == 0) {
        /* The path was idle: the interval of the next samples starts now, not at the last
         * delivery before the pause. */
        rate->delivered_ns    = now_ns;
        rate->first_posted_ns = now_ns;
        rate->epoch_ns        = 0;
    }
    rate->in_flight += bytes;
    if ((!more_queued && rate->in_flight < rate->window) || rate->probing) {
        /* A bubble, left by the application or by a probe: until what is in flight now is
         * delivered, samples show that pace, not the path's. */
        rate->app_limited_until = rate->delivered + rate->in_flight;
    }
    *stamp_p = (inter_rate_stamp_t){
        .posted_ns       = now_ns,
        .delivered       = rate->delivered,
        .delivered_ns    = rate->delivered_ns,
        .first_posted_ns = rate->first_posted_ns,
        .app_limited     = rate->app_limited_until != 0,
        .probes_rtt      = probes,
    };
}

/* The base RTT: the least seen, or while probing the first sample posted under the floor;
 * one not seen again within its lifetime starts a probe. */
static void inter_rate_take_rtt(inter_rate_t *rate, const inter_rate_stamp_t *stamp,
                                uint64_t now_ns)
{
    uint64_t rtt = inter_rate_elapsed(stamp->posted_ns, now_ns);

    if (rtt == 0) {
        return;
    }
    if (rate->min_rtt_ns == 0 || rtt <= rate->min_rtt_ns || (rate->probing && stamp->probes_rtt)) {
        rate->min_rtt_ns    = rtt;
        rate->min_rtt_at_ns = now_ns;
        rate->probing       = false;
    } else if (!rate->probing &&
               inter_rate_elapsed(rate->min_rtt_at_ns, now_ns) > inter_rate_lifetime(rate)) {
        rate->probing = true;
    }
}

/*
 * A delivery rate sample: the bytes delivered while this operation was in flight over the
 * longer of the send and the delivery intervals (completions that arrive bunched shorten
 * the second, not the first). App-limited samples only raise the average: a quiet
 * application must not talk the estimate down.
 */
static void inter_rate_take_sample(inter_rate_t *rate, const inter_rate_stamp_t *stamp,
                                   uint64_t now_ns)
{
    uint64_t send_elapsed = inter_rate_elapsed(stamp->first_posted_ns, stamp->posted_ns);
    uint64_t ack_elapsed = inter_rate_elapsed(stamp->delivered_ns, now_ns);
    uint64_t interval = send_elapsed > ack_elapsed ? send_elapsed : ack_elapsed;
    double sample;

    if (interval == 0) {
        return; /* the clock did not move */
    }
    sample = (double)(rate->delivered - stamp->delivered) * INTER_RATE_NS_PER_SEC /
             (double)interval;
    inter_rate_max_take(&rate->peak_Bps, sample);
    if (rate->rate_Bps <= 0) {
        rate->rate_Bps = sample;
    } else if (!stamp->app_limited || sample > rate->rate_Bps) {
        rate->rate_Bps += INTER_RATE_SAMPLE_WEIGHT * (sample - rate->rate_Bps);
    }
}

/* The completion of an operation posted after the round began (when the delivered count
 * was round_end) ends the round; every INTER_RATE_AGGREGATION_ROUNDS / 2 rounds the older
 * half of the aggregation's and the peak rate's windows is dropped. */
static void inter_rate_count_round(inter_rate_t *rate, const inter_rate_stamp_t *stamp)
{
    if (stamp->delivered < rate->round_end) {
        return;
    }
    rate->rounds++;
    rate->round_end = rate->delivered;
    if (rate->rounds - rate->aggregation_round >= INTER_RATE_AGGREGATION_ROUNDS / 2) {
        inter_rate_max_rotate(&rate->aggregation);
        inter_rate_max_rotate(&rate->peak_Bps);
        rate->aggregation_round = rate->rounds;
    }
}

/*
 * How bunched completions arrive (BBR's extra_acked): an epoch starts at a completion, and
 * the bytes completed after it, beyond what the highest recent rate sample delivers in the
 * time since, are extra (the average would count its own dips as extra);
 * an epoch in which no more arrived than that rate explains ends there. A path whose
 * completions come in bursts (a receiver or a proxy that runs in slices, a NIC that
 * coalesces) delivers nothing for a while and then much at once; a window of rate x base
 * RTT would hold operations through the silence that the burst then shows the path could
 * take. The first completion of an epoch counts no extra: the floor already covers one
 * operation. An epoch also ends once it has seen a window delivered: with a rate estimate
 * a little below the path's, an endless epoch would count the difference as extra for
 * ever. Each measure is capped at the window it was taken under, so the allowance at most
 * doubles the window per round trip.
 */
static void inter_rate_take_aggregation(inter_rate_t *rate, uint64_t bytes, uint64_t now_ns)
{
    double peak = inter_rate_max_get(&rate->peak_Bps);
    double expected = peak * (double)inter_rate_elapsed(rate->epoch_ns, now_ns) /
                      INTER_RATE_NS_PER_SEC;
    double extra;

    if (rate->epoch_ns == 0 || peak <= 0 || rate->epoch_delivered >= rate->window ||
        (double)(rate->epoch_delivered + bytes) <= expected) {
        rate->epoch_ns        = now_ns;
        rate->epoch_delivered = 0;
        return;
    }
    rate->epoch_delivered += bytes;
    extra = (double)rate->epoch_delivered - expected; /* > 0: the epoch went on */
    inter_rate_max_take(&rate->aggregation,
                        extra < (double)rate->window ? extra : (double)rate->window);
}

void inter_rate_completed(inter_rate_t *rate, uint64_t bytes, const inter_rate_stamp_t *stamp,
                          bool delivered, uint64_t now_ns)
{
    rate->in_flight -= bytes < rate->in_flight ? bytes : rate->in_flight;
    if (!delivered || bytes == 0) {
        return;
    }
    rate->delivered      += bytes;
    rate->delivered_ns    = now_ns;
    rate->first_posted_ns = stamp->posted_ns;
    if (rate->app_limited_until != 0 && rate->delivered > rate->app_limited_until) {
        rate->app_limited_until = 0;
    }
    inter_rate_count_round(rate, stamp);
    inter_rate_take_rtt(rate, stamp, now_ns);
    inter_rate_take_sample(rate, stamp, now_ns);
    inter_rate_take_aggregation(rate, bytes, now_ns);
    rate->window = inter_rate_target(rate);
}
