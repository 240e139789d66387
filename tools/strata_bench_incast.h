/*
 * strata-bench incast's internals: its limits, the immediates of its phases, and its
 * options (parsed in strata_bench_incast_opts.c, run in strata_bench_incast.c).
 */
#ifndef STRATA_TOOLS_STRATA_BENCH_INCAST_H
#define STRATA_TOOLS_STRATA_BENCH_INCAST_H

#include "inter/engine.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Small write n uses slot n % INCAST_SLOTS (so at most that many are in flight); both ends
 * look for arrivals among the INCAST_LOOKAHEAD oldest not yet answered, since writes of a
 * connection arrive in order, or nearly so over several rails. */
#define INCAST_SLOTS        256u
#define INCAST_LOOKAHEAD    16u
#define INCAST_MAX_RUNS     64   /* phases, warm-up ones included */
#define INCAST_MAX_PHASES   (INCAST_MAX_RUNS - INCAST_MODES)
#define INCAST_MAX_INFLIGHT 64
#define INCAST_MODES        2    /* 0: rate control on, 1: off */
#define INCAST_WARMUP       0.1  /* the part of each phase left unrecorded */
#define INCAST_WAIT_NS      (30ull * UTIL_NSEC_PER_SEC)
#define INCAST_NAP_NS       (20ull * UTIL_NSEC_PER_USEC)
/* Immediates of the phase run r-th (warm-up ones first): every phase its own, so that
 * nothing late from one phase counts in the next phase of the same engine. */
#define INCAST_IMM_BULK(r)     ((uint32_t)(r))
#define INCAST_IMM_DONE(r)     (INCAST_MAX_RUNS + (uint32_t)(r))
#define INCAST_IMM_SMALL(r, s) (2u * INCAST_MAX_RUNS + (uint32_t)(r) * INCAST_SLOTS + (s))
#define INCAST_IMM_ECHO(r, s)  (INCAST_IMM_SMALL(INCAST_MAX_RUNS, 0) + \
                                (uint32_t)(r) * INCAST_SLOTS + (s))

_Static_assert(INCAST_IMM_ECHO(INCAST_MAX_RUNS, 0) <= INTER_IMM_MAX,
               "the phases' immediates fit in the engine's range");

typedef struct incast_opts {
    unsigned modes;       /* bit m: mode m runs (1: on, 2: off, 3: both) */
    double   seconds;     /* per phase */
    int      phases;
    uint64_t bulk_size;
    int      inflight;
    uint64_t small_size;
    uint64_t interval_ns;
    bool     progress;    /* --progress: the line even where stderr is no terminal */
} incast_opts_t;

/** --help's text. */
void incast_usage(FILE *out);
/** The options after "incast" into o: 0, or 2 with the reason on stderr; *help_p for -h. */
int  incast_parse(int argc, char **argv, incast_opts_t *o, bool *help_p);

#endif
