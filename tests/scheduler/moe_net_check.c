/*
 * Two-tier MoE across simulated nodes (run under strata-run): every rank regenerates every
 * rank's inputs from the seed and checks, each step, that its experts received exactly the
 * reference's rows (count per expert, each row byte for byte, its source recorded once)
 * and that its tokens' combined results equal a sequential reference bit for bit (fp32 in
 * k order, rounded once). Steps alternate between strata_moe_dispatch/combine and a
 * reusable layout with split halves; pull masks change by step. With --kill RANK that rank
 * dies in the middle of a step and the others must see STRATA_ERR_PEER_FAILED in time; with
 * --stop RANK that rank stops (SIGSTOP) instead, and the others must see PEER_FAILED or
 * TIMEOUT in time.
 * With --trace FILE the routing is a trace's (adaptive/adapt_trace.h); with --mode adaptive
 * the experts' owners choose the modes, and every step every rank's modes must be the same
 * (gathered from all ranks) while they change; --mode env takes STRATA_MOE_MODE's. With
 * --disagree RANK that rank sets a pull mask unlike the others' in the middle of the run,
 * and every rank must see that step fail (INTERNAL where the masks are compared, or
 * PEER_FAILED / TIMEOUT where it then waits on a rank that gave up).
 * With --odd-config RANK that rank sends another number of tokens in round one: creation
 * must fail on every rank with STRATA_ERR_CONFIG (--odd-exchange RANK: that rank takes the
 * worst-case exchange, the same; --odd-route RANK: that rank takes the flat
 * route, with --refused). With --bad-input RANK:KIND that rank
 * passes a bad input in the middle of the run (KIND: over, max_tokens + 1 tokens; negative,
 * -1 tokens; null-x, no x) on two steps in a row: it must get STRATA_ERR_INVALID from its dispatch and its
 * combine_recv while its experts still get every other rank's rows, the others must get OK
 * with that step computed as if it had no tokens, and every later step must stay exact
 * (no rank pairs its step with another's next one). With --stall RANK:MS that rank sleeps
 * MS milliseconds before its dispatch in the middle of the run, alive (its heartbeats go
 * on), while the others wait for it: every step must still pass. With --streams and --late
 * RANK:MS that rank dispatches MS milliseconds late in the middle step, which every rank
 * runs as a framework computing its experts on the stream does (no host wait between
 * dispatch and combine): with MS past STRATA_MOE_TIMEOUT the others' owners give up on
 * its rows and still run their combine, so every rank, the late one included, must get
 * STRATA_ERR_TIMEOUT from that step (or PEER_FAILED, where a rank that failed has left),
 * none OK or a status the object survives (but the late rank's OK where none of its tokens
 * has a choice at another rank's expert: nothing of its was withheld) (an owner that gave up withholds its results;
 * summed, they would lack the late rank's rows). With --streams and --late-combine RANK:MS
 * the host of that rank waits for its dispatch, as every rank's does, then makes its
 * combine_send MS milliseconds late: a rank whose combine needed its results (its node's
 * ranks wait for them, and other nodes' ranks whose tokens have terms at its experts) must
 * fail within the bound, and a rank that passes must have exact results (no rank may sum
 * the late rank's former results as if they were the step's). With --timeout-from RANK:BOUND
 * the ranks from RANK on take STRATA_MOE_TIMEOUT=BOUND, so that they outwait the others. With --two, a second object of the other route lives beside the first and the steps
 * alternate between them (each counts its own immediates). Prints one line per rank; exit 0
 * on success. With --streams the object runs on two streams of strata_comm_stream_create,
 * changing every step, and the host waits only to check each dispatch: a step's kernels
 * are ordered after the last step's, still running on the other stream, by the object
 * alone. With --overflow EXPERT:CAPACITY every token goes to that one expert, whose
 * capacity is far too small: its rows are exact up to the capacity, every token's result is
 * exact or lacks its term, and a rank whose token lacks its term must get
 * STRATA_ERR_CAPACITY from combine_recv, wherever the term was dropped; a rank none of
 * whose tokens went to an expert that overflowed must not (--overflow E:C:FROM: only ranks
 * from FROM on send to E, the others' tokens fit their experts). On the streamed
 * exchange with no capacity given (and no STRATA_MOE_CAPACITY_FACTOR) every expert's
 * capacity must be twice its mean load, and rows past it are checked as dropped, the
 * same way. With --abort
 * RANK:WHEN that rank ends the middle step with strata_moe_abort_step after dispatch_send
 * (sent), dispatch_recv (dispatched) or combine_send (combined): the others' results must
 * lack exactly the terms of its experts (none where it aborted after combine_send) with
 * STRATA_ERR_CANCELLED where they lack any, and every later step must stay exact. With
 * --expert-wait 1 each rank waits for its local experts one by one
 * (strata_moe_expert_wait; 2: strata_moe_expert_wait_stream on a stream of its own, then
 * the host for that stream) before the dispatch is known to be done, and copies each
 * expert's rows the moment its wait returns: after the dispatch those copies must equal
 * the expert's rows then, as many as it counts (a mark set before the last row landed
 * fails here; with --streams the kernels are still running when the waits begin). With
 * --streams and --counts-first RANK:DIR, on the steps of split halves, RANK (on another node
 * than rank 0) holds back its dispatch_recv, and with it its later rounds, until rank 0's
 * strata_moe_dispatch_counts has returned the step's counts (rank 0 leaves a file in DIR):
 * across nodes in rounds those come after every rank's first round, before the others.
 */
#include "scheduler/moe_net_check.h"
#include "intra/intra.h"
#include "adaptive/adapt_trace.h"
#include "util/util.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int      g_rank, g_step;
unsigned g_seed;

/* The rank that passes a bad input, at which step, and which. */
int         g_bad_rank = -1, g_bad_step = -1;
bad_input_t g_bad_kind = BAD_NONE;

/* The rank that aborts that step, and where. */
int           g_abort_rank = -1;
abort_point_t g_abort_at   = ABORT_NONE;

typedef struct options {
    moe_case_t c;
    mask_mode_t masks;
    const char *trace;
    int        kill;       /* rank that dies, or -1 */
    bool       stop;       /* it stops (SIGSTOP) instead of dying */
    bool       two;        /* a second object, of the other route, on odd steps */
    int        odd_config; /* rank whose round one differs, or -1 */
    bool       odd_exchange; /* that rank's exchange differs instead (worst-case) */
    int        disagree;   /* rank that sets other masks mid-run, or -1 */
    int        stall;      /* rank that sleeps before a dispatch mid-run, or -1 */
    int        late;       /* --streams: rank that dispatches late mid-run, or -1 */
    unsigned   late_ms;
    int        late_combine; /* --streams: rank whose combine_send comes late, or -1 */
    unsigned   late_combine_ms;
    int        timeout_from; /* ranks from this one on take timeout_value as their bound */
    const char *timeout_value;
    int        overflow;   /* the expert every token goes to, or -1 */
    int        overflow_from; /* the first rank whose tokens do (the others' fit) */
    unsigned   stall_ms;
    int        kill_step;
    uint64_t   kill_bound_ms; /* survivors must see the failure within this */
    strata_moe_combine_t combine; /* params.combine */
    int        odd_combine; /* rank that asks for node-reduce while the others do not, or -1 */
    int        odd_route;   /* rank that takes the flat route whatever the others do, or -1 */
    const char *refused;  /* creation must fail on every rank with this status's name */
    bool       streams;   /* steps alternate between two streams, nothing waited for */
    const char *capacity_factor; /* STRATA_MOE_CAPACITY_FACTOR gives the capacity, or NULL */
    bool       exact;     /* the object receives exactly: no capacity, every row delivered */
} options_t;

static strata_dtype_t parse_dtype(const char *s)
{
    return !strcmp(s, "fp16") ? STRATA_DTYPE_FP16 : !strcmp(s, "fp32") ? STRATA_DTYPE_FP32
           : !strcmp(s, "fp8") ? STRATA_DTYPE_FP8_E4M3 : STRATA_DTYPE_BF16;
}

/* "RANK:KIND" of option, KIND one of kinds[1..] (an enum in that order, 0 none): the rank
 * into *rank_p, KIND's value returned; usage names them for the message. */
static int parse_rank_kind(const char *v, const char *const *kinds, int count, int *rank_p,
                           const char *usage)
{
    const char *kind = strchr(v, ':');

    *rank_p = atoi(v);
    for (int i = 1; kind != NULL && i < count; ++i) {
        if (!strcmp(kind + 1, kinds[i])) {
            return i;
        }
    }
    CHECK(0, "%s, not %s", usage, v);
    return 0;
}

static void parse_bad_input(const char *v)
{
    static const char *const kinds[] = {[BAD_OVER] = "over", [BAD_NEGATIVE] = "negative",
                                        [BAD_NULL_X] = "null-x"};

    g_bad_kind = (bad_input_t)parse_rank_kind(v, kinds, 4, &g_bad_rank,
                                              "--bad-input RANK:over|negative|null-x");
}

static void parse_abort(const char *v)
{
    static const char *const kinds[] = {[ABORT_SENT] = "sent", [ABORT_DISPATCHED] = "dispatched",
                                        [ABORT_COMBINED] = "combined"};

    g_abort_at = (abort_point_t)parse_rank_kind(v, kinds, 4, &g_abort_rank,
                                                "--abort RANK:sent|dispatched|combined");
}

/* --overflow EXPERT[:CAPACITY[:FROM]] (capacity 8, every rank's tokens by default). */
static void parse_overflow(options_t *o, const char *v)
{
    const char *capacity = strchr(v, ':');
    const char *from = capacity != NULL ? strchr(capacity + 1, ':') : NULL;

    o->overflow      = atoi(v);
    o->c.capacity    = capacity != NULL ? atoi(capacity + 1) : 8;
    o->overflow_from = from != NULL ? atoi(from + 1) : 0;
}

static void parse(int argc, char **argv, options_t *o)
{
    const char *seed = getenv("STRATA_TEST_SEED");

    *o = (options_t){.c = {.device = "host", .experts = 16, .topk = 4, .hidden = 256,
                           .max_tokens = 24, .steps = 50, .dtype = STRATA_DTYPE_BF16,
                           .combine_dtype = STRATA_DTYPE_BF16},
                     .kill = -1, .disagree = -1, .odd_config = -1, .stall = -1, .late = -1, .late_combine = -1, .timeout_from = -1,
                     .overflow = -1,
                     .odd_combine = -1, .odd_route = -1,
                     .kill_bound_ms = 15000};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];

        if (!strcmp(k, "--experts")) o->c.experts = atoi(v);
        else if (!strcmp(k, "--topk")) o->c.topk = atoi(v);
        else if (!strcmp(k, "--hidden")) o->c.hidden = atoi(v);
        else if (!strcmp(k, "--tokens")) o->c.max_tokens = atoi(v);
        else if (!strcmp(k, "--steps")) o->c.steps = atoi(v);
        else if (!strcmp(k, "--dtype")) o->c.dtype = parse_dtype(v);
        else if (!strcmp(k, "--combine-dtype")) o->c.combine_dtype = parse_dtype(v);
        else if (!strcmp(k, "--kill")) o->kill = atoi(v);
        else if (!strcmp(k, "--stop")) { o->kill = atoi(v); o->stop = true; }
        else if (!strcmp(k, "--two")) o->two = atoi(v) != 0;
        else if (!strcmp(k, "--odd-config")) o->odd_config = atoi(v);
        else if (!strcmp(k, "--odd-exchange")) o->odd_config = atoi(v), o->odd_exchange = true;
        else if (!strcmp(k, "--disagree")) o->disagree = atoi(v);
        else if (!strcmp(k, "--bad-input")) parse_bad_input(v);
        else if (!strcmp(k, "--abort")) parse_abort(v);
        else if (!strcmp(k, "--overflow")) parse_overflow(o, v);
        else if (!strcmp(k, "--stall")) { o->stall = atoi(v); o->stall_ms = strchr(v, ':') ? (unsigned)atoi(strchr(v, ':') + 1) : 5000; }
        else if (!strcmp(k, "--late")) { o->late = atoi(v); o->late_ms = strchr(v, ':') ? (unsigned)atoi(strchr(v, ':') + 1) : 5000; }
        else if (!strcmp(k, "--timeout-from")) { o->timeout_from = atoi(v); o->timeout_value = strchr(v, ':') ? strchr(v, ':') + 1 : "60s"; }
        else if (!strcmp(k, "--late-combine")) { o->late_combine = atoi(v); o->late_combine_ms = strchr(v, ':') ? (unsigned)atoi(strchr(v, ':') + 1) : 5000; }
        else if (!strcmp(k, "--kill-bound-ms")) o->kill_bound_ms = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--trace")) o->trace = v;
        else if (!strcmp(k, "--mode") && !strcmp(v, "adaptive")) o->masks = MASKS_ADAPTIVE;
        else if (!strcmp(k, "--mode") && !strcmp(v, "env")) o->masks = MASKS_ENV;
        else if (!strcmp(k, "--combine") && !strcmp(v, "node-reduce")) o->combine = STRATA_MOE_COMBINE_NODE_REDUCE;
        else if (!strcmp(k, "--combine") && !strcmp(v, "exact")) o->combine = STRATA_MOE_COMBINE_EXACT;
        else if (!strcmp(k, "--combine") && !strcmp(v, "bogus")) o->combine = (strata_moe_combine_t)7;
        else if (!strcmp(k, "--odd-combine")) o->odd_combine = atoi(v);
        else if (!strcmp(k, "--odd-route")) o->odd_route = atoi(v);
        else if (!strcmp(k, "--refused")) o->refused = v;
        else if (!strcmp(k, "--streams")) o->streams = atoi(v) != 0;
        else if (!strcmp(k, "--expert-wait")) g_expert_wait = atoi(v);
        else if (!strcmp(k, "--counts-first")) { g_counts_first = atoi(v); g_counts_dir = strchr(v, ':') ? strchr(v, ':') + 1 : "."; }
        else if (!strcmp(k, "--capacity-factor")) o->capacity_factor = v;
        else if (!strcmp(k, "--exact")) o->exact = atoi(v) != 0;
        else CHECK(0, "unknown option %s", k);
    }
    o->c.seed = seed ? (unsigned)strtoul(seed, NULL, 10) : 12345u;
    o->kill_step = o->c.steps / 2;
    g_bad_step   = o->c.steps / 2;
    g_seed = o->c.seed;
}

/* The routing of every step from the trace; the case takes the trace's shape. */
static int64_t *load_trace(const char *path, moe_case_t *c)
{
    char err[UTIL_REASON_LEN];
    adapt_trace_t *trace;
    int64_t *routes;
    size_t per_rank;

    CHECK(adapt_trace_read(path, &trace, err) == STRATA_OK, "%s", err);
    CHECK(trace->shape.ranks == c->ranks && trace->steps >= c->steps,
          "the trace has %d ranks and %d steps; the run %d and %d", trace->shape.ranks,
          trace->steps, c->ranks, c->steps);
    c->experts    = trace->shape.experts;
    c->topk       = trace->shape.topk;
    c->max_tokens = trace->shape.tokens;
    per_rank      = (size_t)c->max_tokens * (size_t)c->topk;
    routes        = calloc((size_t)c->steps * (size_t)c->ranks * per_rank, sizeof(int64_t));
    CHECK(routes != NULL, "memory");
    for (int step = 0; step < c->steps; ++step) {
        for (int rank = 0; rank < c->ranks; ++rank) {
            CHECK(adapt_trace_topk_idx(trace, step, rank,
                                       routes + ((size_t)step * (size_t)c->ranks +
                                                 (size_t)rank) * per_rank) == STRATA_OK,
                  "trace step %d rank %d", step, rank);
        }
    }
    adapt_trace_destroy(trace);
    return routes;
}

/*
 * Every rank moved every expert in the same mode this step (gathered from all ranks), and
 * how many experts changed mode since the last step.
 */
/* Every token of every step of the ranks from `from` on to one expert (its first choice;
 * the others none); the ranks before them send each token to one other expert, in turn,
 * so that those experts stay far below any capacity. */
static int64_t *overflow_routes(const moe_case_t *c, int expert, int from)
{
    size_t tokens = (size_t)c->steps * (size_t)c->ranks * (size_t)c->max_tokens;
    int64_t *routes = malloc(tokens * (size_t)c->topk * sizeof(int64_t));

    CHECK(routes != NULL && expert < c->experts && c->experts > 1,
          "--overflow %d of %d experts", expert, c->experts);
    for (size_t i = 0; i < tokens; ++i) {
        int rank = (int)(i / (size_t)c->max_tokens % (size_t)c->ranks);
        int64_t other = (int64_t)(i % (size_t)(c->experts - 1));

        for (int k = 0; k < c->topk; ++k) {
            routes[i * (size_t)c->topk + (size_t)k] =
                k > 0 ? -1 : rank >= from ? expert : other + (other >= expert);
        }
    }
    return routes;
}


static int check_agreement(strata_bootstrap_t *bs, const rank_state_t *r, uint64_t *last)
{
    int words = (r->c->experts + 63) / 64, changed = 0;
    strata_moe_stats_t stats;
    uint64_t *all = calloc((size_t)r->world * (size_t)words, sizeof(uint64_t));

    CHECK(all != NULL && strata_moe_get_stats(r->moe, &stats) == STRATA_OK, "stats");
    CHECK(bs->allgather(bs->ctx, stats.pull_mask, all, sizeof(uint64_t) * (size_t)words) ==
              STRATA_OK, "allgather");
    for (int q = 0; q < r->world; ++q) {
        CHECK(memcmp(all + (size_t)q * (size_t)words, stats.pull_mask,
                     sizeof(uint64_t) * (size_t)words) == 0,
              "rank %d moved this step's experts in other modes than this rank", q);
    }
    for (int e = 0; e < r->c->experts; ++e) {
        changed += is_pull(stats.pull_mask, e) != is_pull(last, e);
    }
    memcpy(last, stats.pull_mask, sizeof(uint64_t) * (size_t)words);
    free(all);
    return changed;
}

/* The object holds what strata_moe_memory_estimate says for its params and world, part by
 * part (the estimate counts the network area in the heap unless asked for bounce). */
static void check_memory(const strata_moe_params_t *p, const rank_state_t *r,
                         const strata_moe_t *moe)
{
    const char *where = getenv("STRATA_MOE_NET_MEMORY");
    strata_moe_memory_t want;
    strata_moe_stats_t stats;

    CHECK(strata_moe_get_stats(moe, &stats) == STRATA_OK &&
              strata_moe_memory_estimate(p, r->world, r->num_nodes, &want) == STRATA_OK,
          "stats and memory estimate");
    if (stats.net_bounce && (where == NULL || strcmp(where, "bounce") != 0)) {
        return; /* the transport could not register the heap: not what was estimated */
    }
    CHECK(memcmp(&want, &stats.memory, sizeof(want)) == 0,
          "the object holds %" PRIu64 " bytes (expert rows %" PRIu64 ", returns %" PRIu64
          "); the estimate says %" PRIu64 " (%" PRIu64 ", %" PRIu64 ")", stats.memory.total,
          stats.memory.expert_rows, stats.memory.net_returns, want.total, want.expert_rows,
          want.net_returns);
}

/* A run whose object was refused, as it expected: everything it made goes (moe may be
 * NULL), and it succeeded. */
static int end_refused(strata_moe_t *moe, strata_comm_t *comm, strata_bootstrap_t *bs,
                       rank_state_t *r, int64_t *routes)
{
    strata_moe_destroy(moe);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    free_state(r);
    free(r->rank_node);
    free(routes);
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t last_mask[INTRA_MOE_MASK_WORDS] = {0};
    int64_t *routes = NULL;
    int mode_changes = 0;
    options_t o;
    strata_bootstrap_t *bs;
    strata_comm_t *comm;
    strata_moe_stats_t stats;
    rank_state_t r = {0};
    strata_status_t status = STRATA_OK;
    uint64_t step_start = 0;
    bool needs_others = true; /* --late: whether this rank's tokens of that step had any
                                 choice at another rank's expert */
    strata_moe_t *objects[2] = {NULL, NULL};
    stream_run_t sr;

    if (argc == 3 && strcmp(argv[1], "--built") == 0) { /* for the test script */
        char option[32];

        snprintf(option, sizeof(option), "%s=on", argv[2]);
        return strstr(strata_get_build_options(), option) != NULL ? 0 : 77;
    }
    parse(argc, argv, &o);
    CHECK(strata_bootstrap_from_env(&bs) == STRATA_OK, "bootstrap");
    CHECK(strata_comm_create(NULL, bs, &comm) == STRATA_OK, "comm_create");
    g_comm = comm;
    if (g_expert_wait == 2) {
        CHECK(strata_comm_stream_create(comm, &g_wait_stream) == STRATA_OK, "stream_create");
    }
    g_rank  = strata_comm_rank(comm);
    r.rank  = g_rank;
    r.world = strata_comm_size(comm);
    r.c     = &o.c;
    o.c.ranks = r.world;
    r.node      = strata_comm_node(comm);
    r.num_nodes = strata_comm_num_nodes(comm);
    r.rank_node = calloc((size_t)r.world, sizeof(int));
    CHECK(r.rank_node != NULL, "memory");
    for (int node = 0; node < r.num_nodes; ++node) {
        for (int local = 0; local < r.world / r.num_nodes; ++local) {
            r.rank_node[strata_comm_node_rank(comm, node, local)] = node;
        }
    }
    if (o.exact) { /* its own modes; every row delivered, whatever --overflow set */
        o.masks     = MASKS_ENV;
        o.c.capacity = 0;
    }
    r.masks   = o.masks;
    r.exact   = o.exact;
    if (o.trace != NULL) {
        routes = load_trace(o.trace, &o.c);
        o.c.routes = routes;
    }
    if (o.overflow >= 0) {
        routes = overflow_routes(&o.c, o.overflow, o.overflow_from);
        o.c.routes = routes;
    }
    alloc_state(&r, &o.c);
    {
        strata_moe_params_t p = {.num_experts = o.c.experts, .topk = o.c.topk,
                                 .hidden = o.c.hidden, .dtype = o.c.dtype,
                                 .combine_dtype = o.c.combine_dtype,
                                 .max_tokens = o.c.max_tokens, .expert_alignment = 4,
                                 .capacity = o.c.capacity,
                                 .mode = o.masks == MASKS_ADAPTIVE ? STRATA_MOE_MODE_ADAPTIVE
                                                                   : STRATA_MOE_MODE_DEFAULT,
                                 .combine = o.combine,
                                 .receive = o.exact ? STRATA_MOE_RECEIVE_EXACT
                                                    : STRATA_MOE_RECEIVE_DEFAULT};
        const char *env = getenv("STRATA_MOE_COMBINE");

        if (g_rank == o.odd_config) {
            setenv(o.odd_exchange ? "STRATA_MOE_EXCHANGE" : "STRATA_MOE_SPEC_TOKENS",
                   o.odd_exchange ? "worst-case" : "5", 1);
        }
        if (o.capacity_factor != NULL) { /* the capacity from the load, as the library says */
            setenv("STRATA_MOE_CAPACITY_FACTOR", o.capacity_factor, 1);
            p.capacity = 0;
            CHECK(strata_moe_load_capacity(&p, r.world, atof(o.capacity_factor),
                                           &o.c.capacity) == STRATA_OK && o.c.capacity > 0,
                  "no capacity for factor %s", o.capacity_factor);
        }
        if (g_rank == o.odd_combine) {
            p.combine = STRATA_MOE_COMBINE_NODE_REDUCE;
        }
        if (g_rank == o.odd_route) {
            setenv("STRATA_MOE_ROUTE", "flat", 1);
        }
        if (o.timeout_from >= 0 && g_rank >= o.timeout_from) {
            setenv("STRATA_MOE_TIMEOUT", o.timeout_value, 1);
        }
        status = strata_moe_create(comm, &p, &objects[0]);
        if (o.refused != NULL) {
            CHECK(status != STRATA_OK && strstr(strata_status_string(status), o.refused),
                  "creation must be refused with %s; it gave %s", o.refused,
                  strata_status_string(status));
            printf("rank %d: creation refused: %s\n", g_rank, strata_status_string(status));
            return end_refused(objects[0], comm, bs, &r, routes);
        }
        if (o.odd_config >= 0) {
            CHECK(status == STRATA_ERR_CONFIG, "rank %d's round one differs; creation gave %s",
                  o.odd_config, strata_status_string(status));
            printf("rank %d: creation refused, rank %d's configuration differs\n", g_rank,
                   o.odd_config);
            return end_refused(objects[0], comm, bs, &r, routes);
        }
        CHECK(status == STRATA_OK, "moe_create: %s", strata_status_string(status));
        check_memory(&p, &r, objects[0]);
        CHECK(strata_moe_get_stats(objects[0], &stats) == STRATA_OK, "stats");
        const char *factor = getenv("STRATA_MOE_CAPACITY_FACTOR");

        if (p.capacity == 0 && !o.exact && stats.exchange == STRATA_MOE_EXCHANGE_STREAMED &&
            (factor == NULL || strcasecmp(factor, "auto") == 0)) {
            /* the streamed exchange's default: twice the mean load, rows past it dropped */
            CHECK(strata_moe_load_capacity(&p, r.world, 2.0, &o.c.capacity) == STRATA_OK,
                  "no capacity of twice the mean load");
        }
        /* STRATA_MOE_COMBINE=node-reduce leaves a flat object exact */
        r.node_reduce = r.num_nodes > 1 && stats.route == STRATA_MOE_ROUTE_HIERARCHICAL &&
                        (o.combine == STRATA_MOE_COMBINE_NODE_REDUCE ||
                         (o.combine == STRATA_MOE_COMBINE_DEFAULT && env != NULL &&
                          strcmp(env, "node-reduce") == 0));
        if (o.two) {
            p.route = stats.route == STRATA_MOE_ROUTE_FLAT ? STRATA_MOE_ROUTE_HIERARCHICAL
                                                           : STRATA_MOE_ROUTE_FLAT;
            status = strata_moe_create(comm, &p, &objects[1]);
            CHECK(status == STRATA_OK, "second moe_create: %s", strata_status_string(status));
        }
    }
    r.moe = objects[0];
    CHECK(g_counts_first < 0 || o.streams, "--counts-first needs --streams");
    CHECK(!o.exact || !g_expert_wait, "--expert-wait copies the experts' blocks, which an "
          "object of --exact has none of");
    if (o.streams) {
        stream_run_start(&sr, comm, &r);
    }
    for (g_step = 0; g_step < o.c.steps; ++g_step) {
        step_start = util_clock_now_ns();
        r.moe = objects[o.two ? g_step % 2 : 0];
        if (o.streams && o.late >= 0 && g_step == o.kill_step) {
            status = run_late_step(&sr, g_rank == o.late ? o.late_ms : 0, &needs_others);
            break; /* the step must fail everywhere: checked below */
        }
        if (o.streams && o.late_combine >= 0 && g_step == o.kill_step) {
            status = run_late_combine_step(&sr, g_rank == o.late_combine ? o.late_combine_ms
                                                                          : 0);
            break; /* checked below */
        }
        if (o.streams) {
            status = run_stream_step(&sr, g_step == o.kill_step && g_rank == o.kill
                                              ? (o.stop ? SIGSTOP : SIGKILL) : 0);
            if (status != STRATA_OK) {
                break;
            }
            continue;
        }
        if (g_rank == o.stall && g_step == o.kill_step) {
            util_sleep_ns((uint64_t)o.stall_ms * UTIL_NSEC_PER_MSEC); /* the others wait */
        }
        status = run_step(&r, g_step == o.kill_step && g_rank == o.kill
                                  ? (o.stop ? SIGSTOP : SIGKILL) : 0,
                          g_step == o.kill_step && g_rank == o.disagree);
        if (status != STRATA_OK) {
            break;
        }
        /* from the kill step on the rank that died takes part in no collective (a
         * survivor may complete that step: see the check of kills below) */
        if (o.masks != MASKS_BY_STEP && !(o.kill >= 0 && g_step >= o.kill_step)) {
            mode_changes += check_agreement(bs, &r, last_mask);
        }
    }
    if (o.streams) {
        stream_run_end(&sr, &r, status);
    }
    if (o.disagree >= 0) {
        CHECK(g_step == o.kill_step && (status == STRATA_ERR_INTERNAL ||
                                        status == STRATA_ERR_PEER_FAILED ||
                                        status == STRATA_ERR_TIMEOUT),
              "rank %d moved step %d in other modes; this rank got %s at step %d", o.disagree,
              o.kill_step, strata_status_string(status), g_step);
        printf("rank %d: the step with rank %d's other modes failed: %s\n", g_rank, o.disagree,
               strata_status_string(status));
    } else if (o.late_combine >= 0) {
        /* exact where it passed (run_late_combine_step checked it); a rank that needed
         * the late rank's terms fails within its bound, and so does every other rank of
         * its node, whose combine waits for its results whatever the routing */
        bool node_mate = g_rank != o.late_combine &&
                         r.rank_node[g_rank] == r.rank_node[o.late_combine];

        CHECK((status == STRATA_ERR_TIMEOUT || status == STRATA_ERR_PEER_FAILED ||
               (status == STRATA_OK && !node_mate)) && g_step == o.kill_step,
              "rank %d's combine came %u ms late at step %d, past the object's bound; this "
              "rank%s got %s at step %d", o.late_combine, o.late_combine_ms, o.kill_step,
              node_mate ? ", on its node," : "", strata_status_string(status), g_step);
        printf("rank %d: rank %d combined late: %s after %llu ms\n", g_rank, o.late_combine,
               strata_status_string(status),
               (unsigned long long)((util_clock_now_ns() - step_start) / UTIL_NSEC_PER_MSEC));
    } else if (o.late >= 0) {
        /* the late rank's own tokens lack nothing where none has a choice at another
         * rank's expert (it may have none): the owners that gave up withheld nothing of
         * its, and its own experts got every row in time */
        bool exact_anyway = g_rank == o.late && !needs_others && status == STRATA_OK;

        CHECK((status == STRATA_ERR_TIMEOUT || status == STRATA_ERR_PEER_FAILED ||
               exact_anyway) && g_step == o.kill_step,
              "rank %d dispatched %u ms late at step %d, past the object's bound; this rank "
              "got %s at step %d", o.late, o.late_ms, o.kill_step,
              strata_status_string(status), g_step);
        printf("rank %d: rank %d was late: %s after %llu ms\n", g_rank, o.late,
               strata_status_string(status),
               (unsigned long long)((util_clock_now_ns() - step_start) / UTIL_NSEC_PER_MSEC));
    } else if (o.kill >= 0) {
        uint64_t took_ms = (util_clock_now_ns() - step_start) / UTIL_NSEC_PER_MSEC;

        /* Without streams the rank dies after its dispatch_send: a survivor that needed
         * nothing more from it (its rows came in round one, none of its tokens had a term
         * there) completes that step, checked exact, and the next one needs every rank.
         * On streams it dies before its dispatch, which every survivor needs. */
        CHECK((status == STRATA_ERR_PEER_FAILED ||
               (o.stop && status == STRATA_ERR_TIMEOUT)) &&
                  (g_step == o.kill_step || (!o.streams && g_step == o.kill_step + 1)),
              "rank %d %s at step %d; this rank got %s at step %d", o.kill,
              o.stop ? "stopped" : "died", o.kill_step, strata_status_string(status), g_step);
        CHECK(took_ms <= o.kill_bound_ms, "the failure took %" PRIu64 " ms to show, bound %"
              PRIu64, took_ms, o.kill_bound_ms);
        printf("rank %d: rank %d failed after %" PRIu64 " ms: %s\n", g_rank, o.kill, took_ms,
               strata_status_string(status));
    } else {
        CHECK(status == STRATA_OK, "%s", strata_status_string(status));
        CHECK(o.masks != MASKS_ADAPTIVE || mode_changes > 0,
              "no expert changed mode in %d adaptive steps", o.c.steps);
        for (int i = 0; i < (o.two ? 2 : 1); ++i) {
            uint64_t want = o.two ? (uint64_t)(o.c.steps + (i == 0)) / 2 : (uint64_t)o.c.steps;

            CHECK(strata_moe_get_stats(objects[i], &stats) == STRATA_OK && stats.steps == want,
                  "stats of object %d: %" PRIu64 " steps, not %" PRIu64, i, stats.steps, want);
        }
        char streamed[128] = "";

        if (o.exact && stats.exchange == STRATA_MOE_EXCHANGE_STREAMED) {
            snprintf(streamed, sizeof(streamed), ", exact receive, streamed exchange in %d "
                     "rounds", stats.exchange_rounds);
        } else if (o.exact) {
            snprintf(streamed, sizeof(streamed), ", exact receive, worst-case exchange");
        } else if (stats.exchange == STRATA_MOE_EXCHANGE_STREAMED) {
            snprintf(streamed, sizeof(streamed), ", streamed exchange in %d rounds, capacity "
                     "%d", stats.exchange_rounds, o.c.capacity);
        }
        printf("rank %d: %d steps passed (%s route, %s combine%s, last step %" PRIu64 " tokens "
               "to other nodes, %" PRIu64 " in round two; %d mode changes, every rank "
               "agreeing)\n", g_rank, o.c.steps,
               stats.route == STRATA_MOE_ROUTE_FLAT ? "flat" : "hierarchical",
               r.node_reduce ? "node-reduce" : "exact", streamed,
               stats.tokens_to_nodes, stats.tokens_round_two, mode_changes);
        /* A rank that leaves once its last step is done may take with it what a slower
         * rank's last step still waits for (the acknowledgement of a write it received):
         * leave together, as an application ending its job would. */
        CHECK(strata_barrier(comm, 60000) == STRATA_OK, "the barrier before leaving");
    }
    if (r.short_results > 0) {
        printf("rank %d: %" PRIu64 " results lacked terms dropped past their experts' "
               "capacity, each exact without them\n", g_rank, r.short_results);
    }
    if (r.node_reduce && r.nr_values > 0) {
        printf("rank %d: node-reduce against exact: %" PRIu64 " of %" PRIu64 " values differ, "
               "the largest by %.3f units (2^-%d) of the sum of its terms' magnitudes\n",
               g_rank, r.nr_differ, r.nr_values, r.nr_worst,
               (int)-log2(ref_unit(o.c.combine_dtype)));
    }
    strata_moe_destroy(objects[0]);
    strata_moe_destroy(objects[1]);
    if (o.streams) {
        stream_run_free(&sr);
    }
    strata_comm_stream_destroy(comm, g_wait_stream);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    free_state(&r);
    free(r.rank_node);
    free(routes);
    return 0;
}
