/*
 * Rate control towards one peer: the delivery rate and base round trip estimated from the
 * completions of what this rank posts to it, and the window of bytes it may keep in flight.
 * Pure functions over a per-peer struct fed with events and times: the engine keeps one per
 * peer (inter_pace.c), which its proxy feeds; tests/inter/test_rate.c drives one with
 * synthetic links.
 */
#ifndef STRATA_INTER_RATE_H
#define STRATA_INTER_RATE_H

#include <stdbool.h>
#include <stdint.h>

/* The window is this many times rate x base RTT, plus the floor: one to keep the path busy,
 * one of headroom that a window-limited estimate can grow into (it never measures more than
 * the window lets through) and that absorbs completions arriving in batches. */
#define INTER_RATE_WINDOW_GAIN 2.0
/* Weight of a new rate sample in the average (TCP's smoothed RTT uses the same 1/8). */
#define INTER_RATE_SAMPLE_WEIGHT 0.125
/* Before the first sample the window is this many floors. */
#define INTER_RATE_INITIAL_FLOORS 4
/* A base RTT not seen again for this long is measured again (BBR's ProbeRTT interval). */
#define INTER_RATE_MIN_RTT_LIFETIME_NS 10000000000ull
/* The aggregation allowance is the most seen over this many round trips, kept as two halves
 * (BBR's extra_acked filter: 10 round trips). */
#define INTER_RATE_AGGREGATION_ROUNDS 10
/* ... and at most what the estimated rate delivers in this time: about a scheduler's time
 * slice, the longest a busy host holds completions back. */
#define INTER_RATE_AGGREGATION_MAX_NS 1000000ull

typedef struct inter_rate_params {
    bool     pace;                /* hold operations past the window; else only estimate */
    uint64_t floor_bytes;         /* one operation in transfer: the window is this plus
                                     gain x rate x base RTT, never less; > 0 */
    uint64_t min_rtt_lifetime_ns; /* 0: INTER_RATE_MIN_RTT_LIFETIME_NS */
} inter_rate_params_t;

/* What an operation's completion needs from the moment it was posted; kept in the op. */
typedef struct inter_rate_stamp {
    uint64_t posted_ns;
    uint64_t delivered;       /* bytes the peer had been delivered when it was posted */
    uint64_t delivered_ns;    /* when that count last grew, or when the path went busy */
    uint64_t first_posted_ns; /* when the operation delivered last then had been posted */
    bool     app_limited;     /* posted while the application left the window unused */
    bool     probes_rtt;      /* posted during a probe, with less than the floor ahead */
} inter_rate_stamp_t;

/* The most of a measure seen over a window of round trips, kept as the most of each of its
 * two halves: [0] the current half, [1] the one before (BBR's windowed max filter, in two
 * buckets). */
typedef struct inter_rate_max {
    double half[2];
} inter_rate_max_t;

/* One peer's estimator and window. Owned by one thread (the proxy); not thread-safe. */
typedef struct inter_rate {
    inter_rate_params_t params;
    uint64_t in_flight;         /* bytes posted and not completed */
    uint64_t delivered;         /* bytes completed successfully, ever */
    uint64_t delivered_ns;      /* when delivered last grew (or the path went busy) */
    uint64_t first_posted_ns;   /* post time of the operation delivered last */
    /* Samples of operations posted until delivered passes this are app-limited (0: none). */
    uint64_t app_limited_until;
    double   rate_Bps;          /* moving average of delivery rate samples; 0: none yet */
    uint64_t min_rtt_ns;        /* base round trip: the least seen; 0: none yet */
    uint64_t min_rtt_at_ns;     /* when min_rtt_ns was last seen */
    bool     probing;           /* min_rtt_ns expired: the window is the floor until an
                                   operation posted under it measures the RTT again */
    /* Round trips: one ends when an operation posted after the last one ended completes. */
    uint64_t rounds;            /* round trips counted so far */
    uint64_t round_end;         /* delivered count whose passing ends the current round */
    /* Aggregation: bytes delivered in an epoch beyond what the rate explains, i.e. how
     * bunched completions come; its recent maximum is added to the window. */
    uint64_t epoch_ns;          /* when the current epoch started; 0: none */
    uint64_t epoch_delivered;   /* bytes delivered since then */
    inter_rate_max_t aggregation; /* bytes extra in an epoch, most over the window */
    inter_rate_max_t peak_Bps;    /* highest rate sample over the same window */
    uint64_t aggregation_round; /* round in which the current half-window started */
    uint64_t window;            /* bytes allowed in flight; UINT64_MAX when not pacing */
    uint64_t paced;             /* operations held back by the window, ever */
} inter_rate_t;

/** A fresh estimator: no sample, the initial window (or UINT64_MAX without pacing). */
void inter_rate_init(inter_rate_t *rate, const inter_rate_params_t *params);

/**
 * Whether an operation may be posted now, bytes_ahead being those of operations posted
 * with it in the same call: while less than the window is in flight, whatever its size, so
 * that an operation larger than the window still goes once the path is empty. Always true
 * without pacing.
 */
bool inter_rate_admits(const inter_rate_t *rate, uint64_t bytes_ahead);

/** An operation the window held back (counted once per operation by the caller). */
void inter_rate_held(inter_rate_t *rate);

/**
 * An operation of bytes posted at now_ns; more_queued: the application has more for this
 * peer right behind it. Fills *stamp_p, which inter_rate_completed takes back.
 */
void inter_rate_posted(inter_rate_t *rate, uint64_t bytes, uint64_t now_ns, bool more_queued,
                       inter_rate_stamp_t *stamp_p);

/**
 * The local completion of an operation of bytes posted with stamp; delivered: it succeeded
 * (a failed one leaves the path without giving a sample). Updates the rate, the base RTT and
 * the window.
 */
void inter_rate_completed(inter_rate_t *rate, uint64_t bytes, const inter_rate_stamp_t *stamp,
                          bool delivered, uint64_t now_ns);

#endif
