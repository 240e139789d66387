/*
 * strata-bench incast: every other rank streams bulk writes into rank 0 while rank 1 also
 * times a small write (the size of a MoE header) echoed back by rank 0, through two
 * engines in each process, one with rate control on and one with it off, in alternating
 * phases of the same run. Meant for simulated nodes whose links tc shapes:
 *
 *   strata-run -n 4 --nodes 4 --link-rate 1gbit -- strata-bench incast
 */
#include "strata_bench.h"
#include "inter/engine.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata_bench_incast.h"
#include "tool_cli.h"

/* One engine and its registered buffer: [bulk_size bytes][INCAST_SLOTS small slots]. Every
 * sender writes its bulk into rank 0's bulk area (nobody reads it); small write n and its
 * echo use slot n % INCAST_SLOTS at both ends. */
typedef struct incast_engine {
    inter_engine_t *engine;
    char           *buf;
    inter_mr_t     *mr;
    inter_rdesc_t  *descs;       /* every rank's buffer */
    uint32_t        bulk_chunks; /* immediates one bulk write gives rank 0 */
    bool            caller;      /* this thread drives the engine's progress */
} incast_engine_t;

/* What a phase, or one mode over its phases, measured. */
typedef struct incast_result {
    util_histogram_t latency;    /* rank 1: small write round trips, ns */
    uint64_t         skipped;    /* rank 1: ticks whose slot was still in flight */
    uint64_t         bytes;      /* rank 0: bulk bytes received inside the windows */
    uint64_t         window_ns;  /* rank 0: the windows' length */
} incast_result_t;

/* A result in numbers, as the ranks exchange them. */
typedef struct incast_figures {
    uint64_t p50, p99, samples, skipped, bytes, window_ns;
} incast_figures_t;

/* One phase of one rank. */
typedef struct incast_phase {
    incast_engine_t     *e;
    const incast_opts_t *o;
    int                  index;  /* of the run, warm-up phases first: its immediates */
    int                  rank;
    uint64_t             from;   /* the recorded window: [from, end) */
    uint64_t             end;
} incast_phase_t;

/* Rank 1's small writes. */
typedef struct incast_small {
    uint64_t next_tick;
    uint64_t sent;                  /* small writes posted */
    uint64_t oldest;                /* the oldest not yet echoed */
    uint64_t sent_at[INCAST_SLOTS]; /* of write n in slot n % INCAST_SLOTS; 0: echoed */
} incast_small_t;

/* Rank 0's echoes of one phase. */
typedef enum incast_echo_state {
    INCAST_ECHO_WAITING = 0,
    INCAST_ECHO_DUE,     /* arrived; the engine was too busy to post the echo yet */
    INCAST_ECHO_SENT,
} incast_echo_state_t;

typedef struct incast_echo {
    uint64_t next;                    /* the oldest small write not yet echoed */
    uint8_t  state[INCAST_SLOTS];     /* of write n in slot n % INCAST_SLOTS */
} incast_echo_t;

/* What each rank contributes to rank 0's report: rank 1 the timings, rank 0 the bytes. */
typedef struct incast_report {
    incast_figures_t  mode[INCAST_MODES];
    incast_figures_t  phase[INCAST_MAX_PHASES];
    inter_peer_rate_t to_receiver[INCAST_MODES]; /* senders: each engine's figures for rank 0 */
} incast_report_t;

static const char *const incast_mode_names[INCAST_MODES] = {"on", "off"};

/* Where the run is, for the message of a failure. */
static int g_rank = -1, g_world;
static char g_where[48] = "setup";
static inter_engine_t *g_engine;

/* A benchmark has nothing to recover: say where it failed, and which peers, and exit. */
static void incast_check(strata_status_t status, const char *what)
{
    if (status == STRATA_OK) {
        return;
    }
    fprintf(stderr, "strata-bench incast: rank %d, %s: %s: %s", g_rank, g_where, what,
            strata_status_string(status));
    for (int peer = 0; g_engine != NULL && peer < g_world; ++peer) {
        if (inter_engine_peer_failed(g_engine, peer)) {
            fprintf(stderr, " (rank %d failed)", peer);
        }
    }
    fprintf(stderr, "\n");
    exit(1);
}

/* The engine parameters of one mode: rate control on or off whatever
 * STRATA_INTER_RATE_CONTROL says, the others from the environment, and the rank's place in
 * the job. */
static strata_status_t incast_params(bool rate_control, const strata_bootstrap_t *bs,
                                     const int *rank_node, inter_engine_params_t *params)
{
    const char *local = getenv("LOCAL_WORLD_SIZE");
    strata_status_t status;

    status = inter_engine_params_from_env(params);
    if (status != STRATA_OK) {
        return status;
    }
    params->rate_control = rate_control;
    params->rank       = bs->rank;
    params->world_size = bs->world_size;
    params->local_size = local != NULL ? atoi(local) : 1;
    params->rank_node  = rank_node;
    return STRATA_OK;
}

static void incast_connect(incast_engine_t *e, strata_bootstrap_t *bs)
{
    size_t size = inter_engine_address_size(e->engine);
    char *mine = malloc(size), *all = malloc(size * (size_t)bs->world_size);
    strata_status_t status = (mine && all) ? STRATA_OK : STRATA_ERR_NO_MEMORY;

    if (status == STRATA_OK) {
        status = inter_engine_address(e->engine, mine);
    }
    if (status == STRATA_OK) {
        status = bs->allgather(bs->ctx, mine, all, size);
    }
    if (status == STRATA_OK) {
        status = inter_engine_connect(e->engine, all);
    }
    free(mine);
    free(all);
    incast_check(status, "connecting the engine");
}

/* Every sender's bulk write must give rank 0 the same count of immediates. */
static void incast_count_chunks(incast_engine_t *e, const incast_opts_t *o, int world)
{
    e->bulk_chunks = inter_engine_write_chunks(e->engine, 1, o->bulk_size);
    for (int peer = 2; peer < world; ++peer) {
        if (inter_engine_write_chunks(e->engine, peer, o->bulk_size) != e->bulk_chunks) {
            incast_check(STRATA_ERR_UNSUPPORTED, "senders with different rail counts");
        }
    }
}

static void incast_engine_open(incast_engine_t *e, bool rate_control, strata_bootstrap_t *bs,
                               const incast_opts_t *o, const int *rank_node)
{
    size_t size = o->bulk_size + INCAST_SLOTS * o->small_size;
    inter_engine_params_t params;
    inter_rdesc_t mine;

    incast_check(incast_params(rate_control, bs, rank_node, &params), "engine parameters");
    incast_check(inter_engine_create(&params, &e->engine), "creating an engine");
    incast_connect(e, bs);
    e->caller = inter_engine_caller_progress(e->engine);
    e->buf    = util_alloc_aligned(4096, size);
    e->descs  = calloc((size_t)bs->world_size, sizeof(*e->descs));
    if (e->buf == NULL || e->descs == NULL) {
        incast_check(STRATA_ERR_NO_MEMORY, "buffers");
    }
    memset(e->buf, 0x5a, size);
    incast_check(inter_engine_mem_register(e->engine, e->buf, size, &e->mr), "registration");
    inter_engine_mem_descriptor(e->mr, &mine);
    incast_check(bs->allgather(bs->ctx, &mine, e->descs, sizeof(mine)), "descriptors");
    if (bs->rank == 0) {
        incast_count_chunks(e, o, bs->world_size);
    }
}

static void incast_engine_close(incast_engine_t *e)
{
    if (e->engine == NULL) {
        return; /* a mode not measured */
    }
    inter_engine_mem_deregister(e->engine, e->mr);
    inter_engine_destroy(e->engine);
    free(e->buf);
    free(e->descs);
}

static int incast_progress(const incast_engine_t *e)
{
    return e->caller ? inter_engine_progress(e->engine) : 0;
}

static size_t incast_slot_offset(const incast_phase_t *ph, uint32_t slot)
{
    return ph->o->bulk_size + slot * ph->o->small_size;
}

/* Whether imm has arrived once more (consumed); a failed peer ends the benchmark. */
static bool incast_arrived(const incast_phase_t *ph, uint32_t imm, int from_peer)
{
    strata_status_t status = inter_engine_imm_wait(ph->e->engine, imm, 1, from_peer, 0);

    if (status != STRATA_ERR_TIMEOUT) {
        incast_check(status, "waiting for a write");
    }
    return status == STRATA_OK;
}

static void incast_check_deadline(const incast_phase_t *ph, uint64_t now, const char *what)
{
    if (now > ph->end + INCAST_WAIT_NS) {
        incast_check(STRATA_ERR_TIMEOUT, what);
    }
}

/* --- Rank 0 ------------------------------------------------------------------------- */

/* Echo the small writes that arrived, oldest first. */
static int incast_echo(const incast_phase_t *ph, incast_echo_t *ec)
{
    inter_request_t *req;
    strata_status_t status;
    uint32_t s;
    size_t offset;
    int work = 0;

    for (uint64_t n = ec->next; n < ec->next + INCAST_LOOKAHEAD; ++n) {
        s = (uint32_t)(n % INCAST_SLOTS);
        if (ec->state[s] == INCAST_ECHO_WAITING &&
            incast_arrived(ph, INCAST_IMM_SMALL(ph->index, s), 1)) {
            ec->state[s] = INCAST_ECHO_DUE;
        }
        if (ec->state[s] != INCAST_ECHO_DUE) {
            continue;
        }
        offset = incast_slot_offset(ph, s);
        status = inter_engine_write(ph->e->engine, 1, ph->e->mr, offset, &ph->e->descs[1], offset,
                                    ph->o->small_size, true, INCAST_IMM_ECHO(ph->index, s), &req);
        if (status != STRATA_ERR_BUSY) {
            incast_check(status, "echo to rank 1");
            inter_request_free(req); /* rank 1 sees it arrive; a failure fails a peer */
            ec->state[s] = INCAST_ECHO_SENT;
            ++work;
        }
    }
    while (ec->state[ec->next % INCAST_SLOTS] == INCAST_ECHO_SENT) {
        ec->state[ec->next++ % INCAST_SLOTS] = INCAST_ECHO_WAITING;
    }
    return work;
}

/* Serve one phase until every sender is done with it; bulk bytes of the window. */
static uint64_t incast_receive(const incast_phase_t *ph, int world)
{
    incast_echo_t ec = {0};
    uint64_t chunks = 0, now;
    int done = 0, work;

    while (done < world - 1) {
        work = incast_progress(ph->e) + incast_echo(ph, &ec);
        now  = util_clock_now_ns();
        while (incast_arrived(ph, INCAST_IMM_BULK(ph->index), -1)) {
            chunks += now >= ph->from && now < ph->end;
            ++work;
        }
        while (incast_arrived(ph, INCAST_IMM_DONE(ph->index), -1)) {
            ++done;
        }
        incast_check_deadline(ph, now, "senders not done 30 s after the phase");
        if (work == 0) {
            util_sleep_ns(INCAST_NAP_NS);
        }
    }
    return chunks * ph->o->bulk_size / ph->e->bulk_chunks;
}

/* --- Senders ------------------------------------------------------------------------ */

/* Keep inflight bulk writes going until the phase ends; then let them finish. */
static int incast_bulk(const incast_phase_t *ph, inter_request_t **reqs, bool post)
{
    strata_status_t status;
    int work = 0;

    for (int i = 0; i < ph->o->inflight; ++i) {
        if (reqs[i] != NULL) {
            status = inter_request_test(reqs[i]);
            if (status == STRATA_INPROGRESS) {
                continue;
            }
            incast_check(status, "bulk write to rank 0");
            inter_request_free(reqs[i]);
            reqs[i] = NULL;
            ++work;
        }
        if (!post) {
            continue;
        }
        status = inter_engine_write(ph->e->engine, 0, ph->e->mr, 0, &ph->e->descs[0], 0,
                                    ph->o->bulk_size, true, INCAST_IMM_BULK(ph->index), &reqs[i]);
        if (status != STRATA_ERR_BUSY) {
            incast_check(status, "bulk write to rank 0");
            ++work;
        }
    }
    return work;
}

/* Rank 1: a small write at every tick (the interval's grid; a tick the loop missed is not
 * made up), or a tick skipped when its slot is still in flight. */
static int incast_small_send(const incast_phase_t *ph, incast_small_t *sm, uint64_t now,
                             incast_result_t *res)
{
    uint32_t s = (uint32_t)(sm->sent % INCAST_SLOTS);
    inter_request_t *req;
    strata_status_t status;

    if (now < sm->next_tick) {
        return 0;
    }
    if (sm->sent - sm->oldest == INCAST_SLOTS) {
        res->skipped += now >= ph->from;
    } else {
        status = inter_engine_write(ph->e->engine, 0, ph->e->mr, incast_slot_offset(ph, s),
                                    &ph->e->descs[0], incast_slot_offset(ph, s),
                                    ph->o->small_size, true, INCAST_IMM_SMALL(ph->index, s), &req);
        if (status == STRATA_ERR_BUSY) {
            return 0; /* again on the next turn */
        }
        incast_check(status, "small write to rank 0");
        inter_request_free(req); /* its echo says it arrived */
        sm->sent_at[s] = now;
        sm->sent++;
    }
    while (sm->next_tick <= now) {
        sm->next_tick += ph->o->interval_ns;
    }
    return 1;
}

/* Rank 1: record the round trips of the echoes that came back, oldest first. */
static int incast_small_collect(const incast_phase_t *ph, incast_small_t *sm, uint64_t now,
                                incast_result_t *res)
{
    uint64_t last = UTIL_MIN(sm->sent, sm->oldest + INCAST_LOOKAHEAD);
    uint32_t s;
    int work = 0;

    for (uint64_t n = sm->oldest; n < last; ++n) {
        s = (uint32_t)(n % INCAST_SLOTS);
        if (sm->sent_at[s] == 0 || !incast_arrived(ph, INCAST_IMM_ECHO(ph->index, s), 0)) {
            continue;
        }
        if (sm->sent_at[s] >= ph->from && sm->sent_at[s] < ph->end) {
            util_histogram_record(&res->latency, now - sm->sent_at[s]);
        }
        sm->sent_at[s] = 0;
        ++work;
    }
    while (sm->oldest < sm->sent && sm->sent_at[sm->oldest % INCAST_SLOTS] == 0) {
        sm->oldest++;
    }
    return work;
}

static bool incast_busy(const incast_phase_t *ph, inter_request_t *const *reqs,
                        const incast_small_t *sm)
{
    for (int i = 0; i < ph->o->inflight; ++i) {
        if (reqs[i] != NULL) {
            return true;
        }
    }
    return sm->oldest < sm->sent;
}

/* Tell rank 0 that this rank is done with the phase: its writes and echoes are in. */
static void incast_done(const incast_phase_t *ph)
{
    inter_request_t *req;

    incast_check(inter_engine_write(ph->e->engine, 0, ph->e->mr, 0, &ph->e->descs[0], 0, 8, true,
                                    INCAST_IMM_DONE(ph->index), &req),
                 "end of phase to rank 0");
    incast_check(inter_request_wait(req, INCAST_WAIT_NS), "end of phase to rank 0");
    inter_request_free(req);
}

static void incast_send(const incast_phase_t *ph, incast_result_t *res)
{
    inter_request_t *reqs[INCAST_MAX_INFLIGHT] = {NULL};
    incast_small_t sm = {.next_tick = util_clock_now_ns()};
    uint64_t now = sm.next_tick;
    bool sending = true;
    int work;

    while (sending || incast_busy(ph, reqs, &sm)) {
        sending = now < ph->end;
        work    = incast_progress(ph->e) + incast_bulk(ph, reqs, sending);
        if (ph->rank == 1) {
            work += (sending ? incast_small_send(ph, &sm, now, res) : 0) +
                    incast_small_collect(ph, &sm, now, res);
        }
        incast_check_deadline(ph, now, "writes not done 30 s after the phase");
        if (work == 0) {
            util_sleep_ns(INCAST_NAP_NS);
        }
        now = util_clock_now_ns();
    }
    incast_done(ph);
}

/* --- The run ------------------------------------------------------------------------ */

/* Both modes: pairs of phases in turn on-off, off-on, ..., so that a drift over the run
 * weighs on both alike; else the one asked for. */
static int incast_mode_of(const incast_opts_t *o, int phase)
{
    return o->modes == 3 ? ((phase + 1) / 2) % 2 : o->modes == 1 ? 0 : 1;
}

static void incast_figures(const incast_result_t *res, incast_figures_t *fig)
{
    util_histogram_summary_t sum;

    util_histogram_summarize(&res->latency, &sum);
    *fig = (incast_figures_t){.p50 = sum.p50, .p99 = sum.p99, .samples = sum.count,
                              .skipped = res->skipped, .bytes = res->bytes,
                              .window_ns = res->window_ns};
}

/* A phase's result into its mode's, and its figures into the report. */
static void incast_add(incast_result_t *mode, const incast_result_t *phase,
                       incast_figures_t *fig)
{
    util_histogram_merge(&mode->latency, &phase->latency);
    mode->skipped += phase->skipped;
    mode->bytes += phase->bytes;
    mode->window_ns += phase->window_ns;
    incast_figures(phase, fig);
}

/* One phase on every rank, after a barrier: rank 0 serves, the others send. */
static void incast_phase_run(incast_phase_t *ph, strata_bootstrap_t *bs, incast_result_t *res)
{
    uint64_t span = (uint64_t)(ph->o->seconds * 1e9), start;

    incast_check(bs->barrier(bs->ctx), "barrier before the phase");
    start    = util_clock_now_ns();
    ph->from = start + (uint64_t)(INCAST_WARMUP * (double)span);
    ph->end  = start + span;
    util_histogram_reset(&res->latency);
    res->skipped = res->bytes = res->window_ns = 0;
    if (bs->rank != 0) {
        incast_send(ph, res);
    } else {
        res->bytes     = incast_receive(ph, bs->world_size);
        res->window_ns = ph->end - ph->from;
    }
}

/*
 * An unrecorded phase on each engine first: a connection's buffers grow over its first
 * seconds of traffic, which would otherwise weigh on the first phases of each mode. Then
 * the recorded phases, their results into their modes' and the report.
 */
static void incast_run(incast_engine_t *engines, const incast_opts_t *o, strata_bootstrap_t *bs,
                       incast_result_t *results, incast_report_t *mine)
{
    static incast_result_t phase;
    incast_phase_t ph = {.o = o, .rank = bs->rank};
    int warm = o->modes == 3 ? INCAST_MODES : 1, mode, p;
    tool_progress_t progress;

    tool_progress_start(&progress, bs->rank == 0, o->progress);
    for (int r = 0; r < warm + o->phases; ++r) {
        tool_progress_update(&progress, "incast phase %d/%d (%d warm-up)", r, warm + o->phases,
                             warm);
        p    = r - warm;
        mode = incast_mode_of(o, r < warm ? r : p);
        ph.e     = &engines[mode];
        ph.index = r;
        g_engine = ph.e->engine;
        if (p < 0) {
            snprintf(g_where, sizeof(g_where), "warm-up phase (rate control %s)",
                     incast_mode_names[mode]);
        } else {
            snprintf(g_where, sizeof(g_where), "phase %d", p);
        }
        incast_phase_run(&ph, bs, &phase);
        if (p >= 0) {
            incast_add(&results[mode], &phase, &mine->phase[p]);
        }
    }
    tool_progress_end(&progress);
    for (int m = 0; m < INCAST_MODES; ++m) {
        incast_figures(&results[m], &mine->mode[m]);
        if (bs->rank != 0 && engines[m].engine != NULL) {
            incast_check(inter_engine_peer_rate(engines[m].engine, 0, &mine->to_receiver[m]),
                         "the rate figures");
        }
    }
    snprintf(g_where, sizeof(g_where), "the end");
    g_engine = NULL;
}

static double incast_rate(const incast_figures_t *fig)
{
    return fig->window_ns ? (double)fig->bytes * 1e9 / (double)fig->window_ns : 0;
}

/* Rank 0: every phase, from its bulk figures and rank 1's timings. */
static void incast_print_phases(const incast_opts_t *o, const incast_report_t *mine,
                                const incast_report_t *timer)
{
    printf("# phase, rate control: small round trip p50, p99 (us); bulk MB/s\n");
    for (int p = 0; p < o->phases; ++p) {
        printf("# %5d %-3s %12.1f %12.1f %9.2f\n", p, incast_mode_names[incast_mode_of(o, p)],
               (double)timer->phase[p].p50 / 1e3, (double)timer->phase[p].p99 / 1e3,
               incast_rate(&mine->phase[p]) / 1e6);
    }
}

static int incast_compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* The median over mode m's phases of their p99: one phase that goes wrong (a socket buffer
 * grown to its largest, a scheduler stall) moves it less than the p99 of all samples. */
static double incast_median_p99(const incast_opts_t *o, const incast_report_t *timer, int m)
{
    uint64_t p99[INCAST_MAX_PHASES];
    int n = 0;

    for (int p = 0; p < o->phases; ++p) {
        if (incast_mode_of(o, p) == m) {
            p99[n++] = timer->phase[p].p99;
        }
    }
    qsort(p99, (size_t)n, sizeof(p99[0]), incast_compare_u64);
    return n % 2 ? (double)p99[n / 2] : ((double)p99[n / 2 - 1] + (double)p99[n / 2]) / 2;
}

/* Rank 0: a line per mode and the summary. */
static int incast_print(const incast_opts_t *o, const incast_report_t *mine,
                        const incast_report_t *timer)
{
    double rate[INCAST_MODES];

    incast_print_phases(o, mine, timer);
    for (int m = 0; m < INCAST_MODES; ++m) {
        const incast_figures_t *t = &timer->mode[m];

        if (!(o->modes & (1u << m))) {
            continue;
        }
        rate[m] = incast_rate(&mine->mode[m]);
        printf("rate control %-3s: small round trip p50 %.1f us, p99 %.1f us (%llu samples, "
               "%llu skipped); bulk %.2f MB/s (%.3f Gbit/s)\n",
               incast_mode_names[m], (double)t->p50 / 1e3, (double)t->p99 / 1e3,
               (unsigned long long)t->samples, (unsigned long long)t->skipped, rate[m] / 1e6,
               rate[m] * 8 / 1e9);
        if (t->samples == 0 || rate[m] == 0) {
            fprintf(stderr, "strata-bench incast: nothing measured with rate control %s\n",
                    incast_mode_names[m]);
            return 1;
        }
    }
    if (o->modes == 3) {
        printf("# median of the phases' p99: on %.1f us, off %.1f us, ratio %.2f\n",
               incast_median_p99(o, timer, 0) / 1e3, incast_median_p99(o, timer, 1) / 1e3,
               incast_median_p99(o, timer, 0) / incast_median_p99(o, timer, 1));
        printf("incast with/without rate control: p99 %.2f, throughput %.2f\n",
               (double)timer->mode[0].p99 / (double)timer->mode[1].p99, rate[0] / rate[1]);
    }
    return 0;
}

/* Rank 0: what each sender's engines estimated for the path to it, at the end. */
static void incast_print_rates(const incast_opts_t *o, const incast_report_t *all, int world)
{
    for (int r = 1; r < world; ++r) {
        for (int m = 0; m < INCAST_MODES; ++m) {
            const inter_peer_rate_t *f = &all[r].to_receiver[m];

            if (!(o->modes & (1u << m))) {
                continue;
            }
            printf("# rank %d to rank 0, rate control %-3s: rate %.1f MB/s, base RTT %.0f us, "
                   "window %s%.0f KiB, %llu operations held\n", r, incast_mode_names[m],
                   f->rate_Bps / 1e6, (double)f->rtt_ns / 1e3,
                   f->window_bytes == UINT64_MAX ? "none, " : "",
                   f->window_bytes == UINT64_MAX ? 0.0 : (double)f->window_bytes / 1024,
                   (unsigned long long)f->paced);
        }
    }
}

static void incast_print_header(const incast_engine_t *e, const incast_opts_t *o, int world)
{
    printf("# strata-bench incast: ranks 1..%d write %llu bytes to rank 0, %d in flight each; "
           "rank 1 also writes %llu bytes every %.0f us, echoed by rank 0 (round trip timed)\n"
           "# %d phases of %.2f s after an unrecorded one per engine, STRATA_INTER_RATE_CONTROL "
           "%s, the first %.0f%% of each unrecorded; over %s (%d rail%s)\n",
           world - 1, (unsigned long long)o->bulk_size, o->inflight,
           (unsigned long long)o->small_size, (double)o->interval_ns / 1e3, o->phases,
           o->seconds, o->modes == 3 ? "on and off in turn (on off off on ...)"
                                     : incast_mode_names[o->modes == 1 ? 0 : 1],
           INCAST_WARMUP * 100, inter_engine_transport_name(e->engine),
           inter_engine_num_rails(e->engine), inter_engine_num_rails(e->engine) == 1 ? "" : "s");
    fflush(stdout);
}

/* strata-run numbers ranks node by node: the node map a communicator would give. */
static int *incast_rank_nodes(int world)
{
    const char *local = getenv("LOCAL_WORLD_SIZE");
    int per_node = local != NULL && atoi(local) > 0 ? atoi(local) : 1;
    int *nodes = malloc((size_t)world * sizeof(*nodes));

    for (int r = 0; nodes != NULL && r < world; ++r) {
        nodes[r] = r / per_node;
    }
    return nodes;
}

int bench_incast_main(int argc, char **argv)
{
    static incast_engine_t engines[INCAST_MODES];
    static incast_result_t results[INCAST_MODES];
    incast_report_t mine, *all;
    strata_bootstrap_t *bs;
    incast_opts_t o;
    int rc, *rank_node;
    bool help;

    rc = incast_parse(argc, argv, &o, &help);
    if (help) {
        incast_usage(stdout);
    }
    if (help || rc != 0) {
        return rc;
    }
    incast_check(strata_bootstrap_from_env(&bs), "bootstrap");
    g_rank  = bs->rank;
    g_world = bs->world_size;
    util_log_set_rank(bs->rank);
    if (bs->world_size < 2) {
        fprintf(stderr, "strata-bench incast: needs at least 2 ranks (strata-run -n 4 "
                        "--nodes 4)\n");
        strata_bootstrap_destroy(bs);
        return 2;
    }
    rank_node = incast_rank_nodes(bs->world_size);
    all       = calloc((size_t)bs->world_size, sizeof(*all));
    if (rank_node == NULL || all == NULL) {
        incast_check(STRATA_ERR_NO_MEMORY, "setup");
    }
    for (int m = 0; m < INCAST_MODES; ++m) {
        if (o.modes & (1u << m)) {
            incast_engine_open(&engines[m], m == 0, bs, &o, rank_node);
        }
    }
    if (bs->rank == 0) {
        incast_print_header(&engines[incast_mode_of(&o, 0)], &o, bs->world_size);
    }
    memset(&mine, 0, sizeof(mine));
    incast_run(engines, &o, bs, results, &mine);
    incast_check(bs->allgather(bs->ctx, &mine, all, sizeof(mine)), "gathering the figures");
    if (bs->rank == 0) {
        incast_print_rates(&o, all, bs->world_size);
    }
    rc = bs->rank == 0 ? incast_print(&o, &all[0], &all[1]) : 0;
    incast_check(bs->barrier(bs->ctx), "final barrier");
    for (int m = 0; m < INCAST_MODES; ++m) {
        incast_engine_close(&engines[m]);
    }
    free(all);
    free(rank_node);
    strata_bootstrap_destroy(bs);
    return rc;
}
