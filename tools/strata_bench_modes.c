/*
 * strata-bench moe --modes: the same routing through one MoE object per Push/Pull mode
 * (push, pull, adaptive, fixed mask files), one step of each in turn so that every mode
 * sees the same moments of a shared machine, on routing that changes by step: Zipf with a
 * drifting hot set (adapt_trace_gen.c) or a replayed trace. Per mode: step p50/p99, the
 * experts' mode switches, and the adaptive layer's cost model's prediction of the step beside
 * the clock; then adaptive against the better fixed mode. With --expert-classes the objects
 * run on streams and rank 0 times each local expert's completion, by class.
 */
#include "strata_bench_mpi.h"
#include "adaptive/adapt_trace.h"
#include "tool_cli.h"
#include "adaptive/adapt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODES_MAX    6
#define MODES_WARMUP 5 /* untimed steps of each mode before the timed ones */

/* --expert-classes: an expert's step by the rows it got, against the step's mean. */
enum { MODES_IDLE, MODES_LIGHT, MODES_HEAVY, MODES_HOT, MODES_CLASSES };
static const char *const modes_class_names[MODES_CLASSES] = {
    "no rows", "under the mean", "mean to 4 x mean", "4 x mean or more"};

/* One mode's object and what its steps measured. */
typedef struct mode_run {
    char               name[64];
    strata_moe_mode_t  mode;
    char              *file; /* fixed: the mask file (owned) */
    strata_moe_t      *moe;
    util_histogram_t  *clock, *model; /* ns per step: rank 0's clock, the model's prediction */
    util_histogram_summary_t clock_sum, model_sum;
    uint64_t           mask[INTRA_MOE_MASK_WORDS]; /* the last step's Pull experts */
    uint64_t           switches;                   /* changes of an expert's mode */
    uint64_t           pull_steps;                 /* expert-steps moved in Pull form */
    moe_breakdown_t   *bd;                         /* --breakdown: each phase */
    void              *stream; /* --expert-classes: the object's stream */
    util_histogram_t  *ready[MODES_CLASSES]; /* ns from dispatch_send to an expert's rows */
} mode_run_t;

typedef struct modes_bench {
    bench_intra_t      *b;
    strata_comm_t      *comm;
    int                 per_node, num_nodes, num_modes, warmup;
    bool                breakdown, classes;
    strata_moe_route_t  route;
    adapt_trace_t     *trace;
    adapt_model_t       model;
    const char         *model_source;
    int32_t            *by_node; /* [experts][num_nodes] tokens of the step */
    mode_run_t          runs[MODES_MAX];
} modes_bench_t;

static void modes_fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "strata-bench moe: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* "push,pull,adaptive,fixed:FILE" into runs. */
static void modes_parse(modes_bench_t *m, const char *list)
{
    char *copy = strdup(list), *save = NULL;

    if (copy == NULL) {
        modes_fail("out of memory%s", "");
    }
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        mode_run_t *run = &m->runs[m->num_modes];

        if (m->num_modes == MODES_MAX) {
            modes_fail("--modes: at most 6 modes (%s)", list);
        }
        snprintf(run->name, sizeof(run->name), "%s", tok);
        if (strcmp(tok, "push") == 0) {
            run->mode = STRATA_MOE_MODE_PUSH;
        } else if (strcmp(tok, "pull") == 0) {
            run->mode = STRATA_MOE_MODE_PULL;
        } else if (strcmp(tok, "adaptive") == 0) {
            run->mode = STRATA_MOE_MODE_ADAPTIVE;
        } else if (strncmp(tok, "fixed:", 6) == 0 && tok[6] != '\0') {
            run->mode = STRATA_MOE_MODE_FIXED;
            run->file = strdup(tok + 6);
            if (run->file == NULL) {
                modes_fail("out of memory%s", "");
            }
        } else {
            modes_fail("--modes: '%s' is not push, pull, adaptive or fixed:FILE", tok);
        }
        ++m->num_modes;
    }
    if (m->num_modes == 0) {
        modes_fail("--modes: no mode in '%s'", list);
    }
    free(copy);
}

static mode_run_t *modes_find(modes_bench_t *m, strata_moe_mode_t mode)
{
    for (int i = 0; i < m->num_modes; ++i) {
        if (m->runs[i].mode == mode) {
            return &m->runs[i];
        }
    }
    return NULL;
}

/* The routing: the trace given, or Zipf with a drifting hot set over the bench's shape. */
static void modes_trace(modes_bench_t *m, const char *path, double zipf, uint64_t seed)
{
    bench_intra_t *b = m->b;
    char err[UTIL_REASON_LEN];
    adapt_trace_gen_params_t gen;

    if (path != NULL) {
        if (adapt_trace_read(path, &m->trace, err) != STRATA_OK) {
            modes_fail("%s", err);
        }
        if (m->trace->shape.ranks != b->size || m->trace->shape.ranks_per_node != m->per_node) {
            modes_fail("%s: the trace's ranks or ranks per node are not this job's", path);
        }
        b->experts = m->trace->shape.experts;
        b->tokens  = m->trace->shape.tokens;
        b->topk    = m->trace->shape.topk;
        m->warmup  = m->trace->steps > MODES_WARMUP + 1 ? MODES_WARMUP : 0;
        b->iters   = b->iters > 0 ? UTIL_MIN(b->iters, m->trace->steps - m->warmup)
                                  : m->trace->steps - m->warmup;
        return;
    }
    adapt_trace_gen_defaults(&gen);
    gen.shape = (adapt_trace_shape_t){.experts = b->experts, .ranks = b->size,
                                       .ranks_per_node = m->per_node, .tokens = b->tokens,
                                       .topk = b->topk, .row_bytes = (double)b->row_bytes};
    m->warmup  = MODES_WARMUP;
    gen.steps  = m->warmup + b->iters;
    gen.zipf_s = zipf;
    gen.seed   = seed;
    if (adapt_trace_generate(&gen, &m->trace, err) != STRATA_OK) {
        modes_fail("%s", err);
    }
}

/* Rank 0 predicts with the model the adaptive object decides with (written by it through
 * STRATA_ADAPTIVE_SAVE, calibrated where STRATA_ADAPTIVE_CALIBRATE is on), else the
 * built-in one. */
static void modes_open(modes_bench_t *m, strata_comm_t *comm)
{
    bench_intra_t *b = m->b;
    char saved[] = "/tmp/strata-bench-policy-XXXXXX";
    bool own_file = false;
    adapt_policy_params_t policy;

    adapt_policy_defaults(&policy);
    m->model        = policy.model;
    m->model_source = "the built-in model";
    if (b->rank == 0 && modes_find(m, STRATA_MOE_MODE_ADAPTIVE) != NULL &&
        getenv("STRATA_ADAPTIVE_SAVE") == NULL) {
        int fd = mkstemp(saved);

        if (fd < 0 || setenv("STRATA_ADAPTIVE_SAVE", saved, 1) != 0) {
            modes_fail("cannot make a file for the adaptive policy%s", "");
        }
        close(fd);
        own_file = true;
    }
    for (int i = 0; i < m->num_modes; ++i) {
        mode_run_t *run = &m->runs[i];
        strata_moe_params_t p = {.num_experts = b->experts, .topk = b->topk,
                                 .hidden = b->hidden, .dtype = STRATA_DTYPE_BF16,
                                 .combine_dtype = STRATA_DTYPE_BF16, .max_tokens = b->tokens,
                                 .route = m->route, .mode = run->mode, .mode_file = run->file};

        BENCH_TRY(strata_moe_create(comm, &p, &run->moe));
        if (m->classes) { /* every mode alike (adaptive's dispatch_recv waits anyway) */
            BENCH_TRY(strata_comm_stream_create(comm, &run->stream));
            BENCH_TRY(strata_moe_set_stream(run->moe, run->stream));
            for (int c = 0; c < MODES_CLASSES; ++c) {
                run->ready[c] = calloc(1, sizeof(*run->ready[c]));
                if (run->ready[c] == NULL) {
                    modes_fail("out of memory%s", "");
                }
            }
        }
        run->clock = calloc(1, sizeof(*run->clock));
        run->model = calloc(1, sizeof(*run->model));
        run->bd    = m->breakdown ? calloc(1, sizeof(*run->bd)) : NULL;
        if (run->clock == NULL || run->model == NULL || (m->breakdown && run->bd == NULL)) {
            modes_fail("out of memory%s", "");
        }
    }
    if (b->rank == 0 && modes_find(m, STRATA_MOE_MODE_ADAPTIVE) != NULL &&
        adapt_policy_load(getenv("STRATA_ADAPTIVE_SAVE"), &policy) == STRATA_OK) {
        m->model        = policy.model;
        m->model_source = "the adaptive object's model";
    }
    if (own_file) {
        unlink(saved);
        unsetenv("STRATA_ADAPTIVE_SAVE");
    }
}

/* The step's tokens of each expert from each node, from every rank's counts. */
static void modes_tokens_by_node(modes_bench_t *m, int step)
{
    int experts = m->b->experts;

    memset(m->by_node, 0, (size_t)experts * (size_t)m->num_nodes * sizeof(int32_t));
    for (int r = 0; r < m->b->size; ++r) {
        const int32_t *counts = adapt_trace_counts(m->trace, step, r);

        for (int e = 0; e < experts; ++e) {
            m->by_node[e * m->num_nodes + r / m->per_node] += counts[e];
        }
    }
}

/* The model's step: the slowest owner's sum of its experts' costs in the modes they took. */
static double modes_predict(const modes_bench_t *m, const uint64_t *mask)
{
    int per_rank = m->b->experts / m->b->size;
    double slowest = 0.0;

    for (int r = 0; r < m->b->size; ++r) {
        double owner = 0.0;

        for (int e = r * per_rank; e < (r + 1) * per_rank; ++e) {
            bool pull = (mask[e / 64] >> (e % 64)) & 1u;

            owner += adapt_model_step_cost(&m->model, pull ? ADAPT_MODE_PULL : ADAPT_MODE_PUSH,
                                           r / m->per_node, m->num_nodes,
                                           &m->by_node[e * m->num_nodes],
                                           (double)m->b->row_bytes);
        }
        slowest = UTIL_MAX(slowest, owner);
    }
    return slowest;
}

/* The modes an object's experts moved in, and the switches since its last step. */
static void modes_track(modes_bench_t *m, mode_run_t *run, const strata_moe_stats_t *stats,
                        bool record)
{
    int words = (m->b->experts + 63) / 64;

    for (int w = 0; w < words; ++w) {
        uint64_t now = stats->pull_mask != NULL ? stats->pull_mask[w] : 0;

        if (record) {
            run->switches   += (uint64_t)__builtin_popcountll(now ^ run->mask[w]);
            run->pull_steps += (uint64_t)__builtin_popcountll(now);
        }
        run->mask[w] = now;
    }
}

/* The rows an expert gets in a step, on average. */
static double modes_mean_rows(const modes_bench_t *m)
{
    return (double)m->b->tokens * m->b->topk * m->b->size / m->b->experts;
}

/* An expert's class by the rows it got; mean: modes_mean_rows. */
static int modes_class(int32_t rows, double mean)
{
    if (rows == 0) {
        return MODES_IDLE;
    }
    return rows < mean ? MODES_LIGHT : rows < 4.0 * mean ? MODES_HEAVY : MODES_HOT;
}

/* --expert-classes, on the object's stream after dispatch_recv: poll every local expert
 * until each is complete (10 us between rounds, as --overlap: the host backend's kernels
 * need the cores), and record (record: rank 0's timed steps) each one's time from t0 under
 * its class. */
static void modes_expert_ready(const modes_bench_t *m, mode_run_t *run, int experts,
                               uint64_t t0, bool record)
{
    double mean = modes_mean_rows(m);
    bool done[INTRA_MOE_MAX_EXPERTS] = {false};
    int left = experts;

    while (left > 0) {
        for (int e = 0; e < experts; ++e) {
            int32_t rows;
            strata_status_t status;

            if (done[e]) {
                continue;
            }
            status = strata_moe_expert_wait(run->moe, e, 0, &rows);
            if (status == STRATA_OK) {
                done[e] = true;
                left   -= 1;
                if (record) {
                    util_histogram_record(run->ready[modes_class(rows, mean)],
                                          util_clock_now_ns() - t0);
                }
            } else if (status != STRATA_ERR_TIMEOUT) {
                BENCH_TRY(status);
            }
        }
        if (left > 0) {
            util_sleep_ns(10 * UTIL_NSEC_PER_USEC);
        }
    }
}

/* One step of one mode: a layout for the step's routing, dispatch and combine (on a stream,
 * each waited for: the clock is the step's either way). */
static void modes_step(modes_bench_t *m, mode_run_t *run, bool record)
{
    bench_intra_t *b = m->b;
    strata_moe_layout_t *layout;
    strata_moe_recv_t recv;
    strata_moe_stats_t stats;
    uint64_t t0, t1;

    bench_barrier(b);
    t0 = util_clock_now_ns();
    BENCH_TRY(strata_moe_layout_create(run->moe, b->idx, b->tokens, &layout));
    t1 = util_clock_now_ns();
    BENCH_TRY(strata_moe_dispatch_send(run->moe, layout, b->x, NULL));
    BENCH_TRY(strata_moe_dispatch_recv(run->moe, &recv));
    if (run->stream != NULL) {
        modes_expert_ready(m, run, recv.num_local_experts, t1, record && b->rank == 0);
        BENCH_TRY(strata_moe_synchronize(run->moe));
    }
    BENCH_TRY(strata_moe_combine(run->moe, NULL, b->weights, b->out));
    if (run->stream != NULL) {
        BENCH_TRY(strata_moe_synchronize(run->moe));
    }
    if (record) {
        util_histogram_record(run->clock, util_clock_now_ns() - t0);
    }
    strata_moe_layout_destroy(layout);
    BENCH_TRY(strata_moe_get_stats(run->moe, &stats));
    modes_track(m, run, &stats, record);
    if (run->bd != NULL) {
        if (record) {
            util_histogram_record(&run->bd->samples[MOE_BD_LAYOUT], t1 - t0);
        }
        moe_breakdown_record(run->bd, &stats, record);
    }
    if (record && b->rank == 0) {
        util_histogram_record(run->model, (uint64_t)(modes_predict(m, run->mask) * 1e9));
    }
}

static void modes_measure(modes_bench_t *m)
{
    bench_intra_t *b = m->b;
    tool_progress_t progress;

    tool_progress_start(&progress, b->rank == 0, b->progress);
    for (int i = 0; i < m->warmup + b->iters; ++i) {
        tool_progress_update(&progress, "moe --modes step %d/%d", i, m->warmup + b->iters);
        BENCH_TRY(adapt_trace_topk_idx(m->trace, i, b->rank, b->idx));
        modes_tokens_by_node(m, i);
        for (int j = 0; j < m->num_modes; ++j) {
            modes_step(m, &m->runs[(i + j) % m->num_modes], i >= m->warmup);
        }
    }
    tool_progress_end(&progress);
    for (int j = 0; j < m->num_modes; ++j) {
        util_histogram_summarize(m->runs[j].clock, &m->runs[j].clock_sum);
        util_histogram_summarize(m->runs[j].model, &m->runs[j].model_sum);
    }
}

static int modes_sign(double x)
{
    return (x > 0) - (x < 0);
}

/* Mode pairs the model orders as the clock does (by p50); pairs the model prices within
 * 1% of each other (the same modes, say) are counted apart: only the clock's noise would
 * order them. */
static void modes_print_agreement(const modes_bench_t *m)
{
    int alike = 0, pairs = 0, tied = 0;

    for (int i = 0; i < m->num_modes; ++i) {
        for (int j = i + 1; j < m->num_modes; ++j) {
            double model_a = (double)m->runs[i].model_sum.p50;
            double model_c = (double)m->runs[j].model_sum.p50;
            double clock_a = (double)m->runs[i].clock_sum.p50;
            double clock_c = (double)m->runs[j].clock_sum.p50;

            if (fabs(model_a - model_c) <= 0.01 * UTIL_MAX(model_a, model_c)) {
                ++tied;
                continue;
            }
            alike += modes_sign(clock_a - clock_c) == modes_sign(model_a - model_c);
            ++pairs;
        }
    }
    printf("model against clock: %d of %d mode pairs in the same order (by p50); %d pairs the "
           "model prices alike\n", alike, pairs, tied);
}

/* --expert-classes: per class, each mode's median time to an expert's completion (samples),
 * and pull/push. */
static void modes_print_classes(const modes_bench_t *m, const mode_run_t *push,
                                const mode_run_t *pull)
{
    printf("# expert classes: rank 0's local experts each step, by the rows they got (the "
           "step's mean: %.1f per expert); p50 us from dispatch_send to an expert's rows all "
           "in (samples)\n%-20s", modes_mean_rows(m), "# class");
    for (int i = 0; i < m->num_modes; ++i) {
        if (m->runs[i].stream != NULL) {
            printf(" %22s", m->runs[i].name);
        }
    }
    printf("%s\n", push != NULL && pull != NULL ? "  pull/push p50" : "");
    for (int c = 0; c < MODES_CLASSES; ++c) {
        printf("%-20s", modes_class_names[c]);
        for (int i = 0; i < m->num_modes; ++i) {
            const util_histogram_t *h = m->runs[i].ready[c];

            if (m->runs[i].stream != NULL) {
                printf(" %12.1f (%7llu)", (double)util_histogram_percentile(h, 50) / 1e3,
                       (unsigned long long)h->count);
            }
        }
        if (push != NULL && pull != NULL && push->ready[c]->count > 0 &&
            pull->ready[c]->count > 0) {
            printf("  %14.3f", (double)util_histogram_percentile(pull->ready[c], 50) /
                                   (double)util_histogram_percentile(push->ready[c], 50));
        }
        printf("\n");
    }
}

static void modes_print(const modes_bench_t *m)
{
    const mode_run_t *push = modes_find((modes_bench_t *)m, STRATA_MOE_MODE_PUSH);
    const mode_run_t *pull = modes_find((modes_bench_t *)m, STRATA_MOE_MODE_PULL);
    const mode_run_t *adaptive = modes_find((modes_bench_t *)m, STRATA_MOE_MODE_ADAPTIVE);
    const adapt_link_t *inter = m->model.link[ADAPT_TIER_INTER];
    const mode_run_t *best;

    printf("%-24s %10s %10s %10s %10s %9s %8s\n", "# mode", "p50 us", "p99 us", "model p50",
           "model p99", "switches", "pull %");
    for (int i = 0; i < m->num_modes; ++i) {
        const mode_run_t *r = &m->runs[i];
        double expert_steps = (double)m->b->experts * (double)m->b->iters;

        printf("%-24s %10.1f %10.1f %10.1f %10.1f %9llu %8.1f\n", r->name,
               (double)r->clock_sum.p50 / 1e3, (double)r->clock_sum.p99 / 1e3,
               (double)r->model_sum.p50 / 1e3, (double)r->model_sum.p99 / 1e3,
               (unsigned long long)r->switches, 100.0 * (double)r->pull_steps / expert_steps);
    }
    printf("# model: %s (inter: push %.1f us + %.2f GB/s, pull %.1f us + %.1f us round trip "
           "+ %.2f GB/s; intra %.1f GB/s); its step is the transfers alone (the slowest "
           "owner's experts): compare orders, not values\n", m->model_source,
           inter[ADAPT_MODE_PUSH].alpha_s * 1e6, inter[ADAPT_MODE_PUSH].beta_Bps * 1e-9,
           inter[ADAPT_MODE_PULL].alpha_s * 1e6, m->model.pull_rtt_s[ADAPT_TIER_INTER] * 1e6,
           inter[ADAPT_MODE_PULL].beta_Bps * 1e-9,
           m->model.link[ADAPT_TIER_INTRA][ADAPT_MODE_PUSH].beta_Bps * 1e-9);
    modes_print_agreement(m);
    for (int i = 0; m->breakdown && i < m->num_modes; ++i) {
        moe_breakdown_print(m->runs[i].name, m->runs[i].bd, m->runs[i].clock_sum.p50);
    }
    if (m->classes) {
        modes_print_classes(m, push, pull);
    }
    if (push != NULL && pull != NULL && adaptive != NULL) {
        best = pull->clock_sum.p50 < push->clock_sum.p50 ? pull : push;
        printf("adaptive/best fixed mode: step p50 %.3f, p99 %.3f (best fixed: %s)\n",
               (double)adaptive->clock_sum.p50 / (double)best->clock_sum.p50,
               (double)adaptive->clock_sum.p99 / (double)best->clock_sum.p99, best->name);
    }
    fflush(stdout);
}

static void modes_close(modes_bench_t *m)
{
    bench_barrier(m->b); /* nobody unmaps while a peer still reads */
    for (int i = 0; i < m->num_modes; ++i) {
        if (m->runs[i].stream != NULL) {
            BENCH_TRY(strata_moe_set_stream(m->runs[i].moe, NULL));
        }
        strata_moe_destroy(m->runs[i].moe);
        if (m->runs[i].stream != NULL) {
            strata_comm_stream_destroy(m->comm, m->runs[i].stream);
        }
        for (int c = 0; c < MODES_CLASSES; ++c) {
            free(m->runs[i].ready[c]);
        }
        free(m->runs[i].clock);
        free(m->runs[i].model);
        free(m->runs[i].bd);
        free(m->runs[i].file);
    }
    adapt_trace_destroy(m->trace);
    free(m->by_node);
}

int bench_moe_modes(bench_intra_t *b, strata_comm_t *comm, int per_node,
                    const bench_modes_opts_t *o)
{
    static modes_bench_t m;

    m = (modes_bench_t){.b = b, .comm = comm, .per_node = per_node,
                        .num_nodes = b->size / per_node, .route = o->route,
                        .breakdown = o->breakdown, .classes = o->classes};
    b->row_bytes = (size_t)b->hidden * sizeof(uint16_t);
    modes_parse(&m, o->modes);
    modes_trace(&m, o->trace, o->zipf, o->seed);
    if (b->experts % b->size != 0 || b->experts > 64 * INTRA_MOE_MASK_WORDS) {
        fprintf(stderr, "strata-bench moe --modes: %d experts: a multiple of the %d ranks, at "
                        "most %d\n", b->experts, b->size, 64 * INTRA_MOE_MASK_WORDS);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    bench_intra_alloc(b, b->tokens);
    bench_intra_route(b); /* rows and weights; the trace gives the routing step by step */
    m.by_node = calloc((size_t)b->experts * (size_t)m.num_nodes, sizeof(int32_t));
    if (m.by_node == NULL) {
        modes_fail("out of memory%s", "");
    }
    modes_open(&m, comm);
    if (b->rank == 0) {
        printf("# strata-bench moe --modes: %d ranks on %d nodes, transport %s, %d tokens per "
               "rank, top-%d of %d experts, hidden %d bf16, %s routing, %d steps per mode after "
               "%d untimed\n# times in us on rank 0, each step a layout, dispatch and combine; "
               "the modes take turns step by step\n", b->size, m.num_nodes,
               strata_comm_transport(comm), b->tokens, b->topk, b->experts, b->hidden,
               o->trace != NULL ? o->trace : "Zipf", b->iters, m.warmup);
    }
    modes_measure(&m);
    if (b->rank == 0) {
        modes_print(&m);
    }
    modes_close(&m);
    return 0;
}
