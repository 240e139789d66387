/*
 * What strata-bench's MPI-launched subcommands share: the bench state, MPI_Alltoallv as the
 * baseline (pack rows by destination rank, exchange, exchange back, weighted sum), uniform
 * routing, per-step samples and the result rows (strata_bench_intra.c).
 */
#ifndef STRATA_TOOLS_STRATA_BENCH_MPI_H
#define STRATA_TOOLS_STRATA_BENCH_MPI_H

#include "strata_bench.h"
#include "intra/intra.h"
#include "tool_cli.h"

#include <mpi.h>
#include <stdbool.h>

#define INTRA_MAX_SIZES 8
/* Bounds of the shared options; the MoE objects check the shapes further. */
#define INTRA_MAX_TOKENS  (1 << 20)
#define INTRA_MAX_HIDDEN  (1 << 16)
#define INTRA_MAX_TOPK    1024
#define INTRA_MAX_EXPERTS (1 << 16)
#define INTRA_MAX_ITERS   1000000
#define INTRA_TOOL        "strata-bench intra"
#define MOE_TOOL          "strata-bench moe"

typedef struct bench_intra {
    int                       rank, size;
    /* Where strata-run (or another launcher that sets WORLD_SIZE and strata's bootstrap
     * variables) started the ranks rather than mpirun: strata's bootstrap, which then
     * carries the bench's own barriers and reductions too; NULL under mpirun. */
    strata_bootstrap_t       *launcher;
    int                       hidden, topk, experts, tokens, iters;
    bool                      progress; /* --progress: rank 0's line even on a pipe */
    uint64_t                  pull_mask[INTRA_MOE_MASK_WORDS];
    const intra_device_ops_t *device;
    size_t                    row_bytes;
    uint16_t                 *x, *out;
    int64_t                  *idx;
    float                    *weights;
    /* the MPI path */
    uint16_t                 *packed, *received;
    int                      *send_counts, *send_displs, *recv_counts, *recv_displs;
    int                      *order; /* packed row -> token * topk + k */
    /* the same inputs in the device's memory, for strata */
    void                     *d_x, *d_out, *d_idx, *d_weights;
} bench_intra_t;

typedef struct bench_intra_result {
    util_histogram_summary_t dispatch, combine, step; /* ns, rank 0's samples */
    double                   gbps;                    /* payload / median step time */
} bench_intra_result_t;

#define MPI_TRY(expr) \
    do { \
        if ((expr) != MPI_SUCCESS) { \
            fprintf(stderr, "strata-bench intra: %s failed\n", #expr); \
            MPI_Abort(MPI_COMM_WORLD, 1); \
        } \
    } while (0)

/* Per-step samples of one path: dispatch, combine, and the two together. */
typedef struct bench_intra_samples {
    util_histogram_t dispatch, combine, step;
} bench_intra_samples_t;

/** A barrier of every rank: MPI's, or the launcher's bootstrap (collective). */
void bench_barrier(const bench_intra_t *b);
/** The largest of every rank's value, on every rank (collective). */
double bench_max(const bench_intra_t *b, double value);
/** Every rank's value into all[b->size], in rank order (collective). */
void bench_allgather_u64(const bench_intra_t *b, uint64_t value, uint64_t *all);
/**
 * After bench_intra_start: where MPI made this process a job of its own while WORLD_SIZE
 * says more, the ranks join through strata's bootstrap from the launcher's variables
 * (b->launcher, rank and size from it); where they cannot, a message and exit 2. true when
 * the launcher's bootstrap carries the job.
 */
bool bench_join_launcher(bench_intra_t *b, const char *tool);

/** Distinct uniform experts per token (seeded by rank), equal weights, fixed rows. */
void bench_intra_route(bench_intra_t *b);
void bench_intra_alloc(bench_intra_t *b, int max_tokens);
void bench_intra_record(bench_intra_samples_t *s, uint64_t t0, uint64_t t1, uint64_t t2);
void bench_intra_finish(bench_intra_t *b, bench_intra_samples_t *s, bench_intra_result_t *r);
/** Counts and order of the rows each rank sends to each rank (collective). */
void bench_intra_mpi_layout(bench_intra_t *b);
/** The baseline over b->iters steps (collective). */
void bench_intra_run_mpi(bench_intra_t *b, bench_intra_result_t *r);
/** One step of the baseline (collective), recorded in samples unless NULL. */
void bench_intra_mpi_step(bench_intra_t *b, bench_intra_samples_t *samples);
/** The column titles of bench_intra_print_row. */
void bench_intra_print_header(void);
int  bench_intra_max_size(const int *sizes, int num_sizes);
void bench_intra_print_row(const char *what, int tokens, const bench_intra_result_t *r,
                           const bench_intra_result_t *base);
/** "128,4096" into sizes (at most INTRA_MAX_SIZES) and their count into *num_p; false
 *  after a usage error of tool naming the bad count. */
bool bench_intra_parse_sizes(const char *tool, const char *text, int *sizes, int *num_p);

/* The options every MPI subcommand takes: a getopt_long table's first entries, and their
 * letters for its short string. */
#define INTRA_BENCH_OPTIONS \
    {"tokens", required_argument, NULL, 't'}, {"hidden", required_argument, NULL, 'H'}, \
    {"topk", required_argument, NULL, 'k'}, {"experts", required_argument, NULL, 'e'}, \
    {"iters", required_argument, NULL, 'i'}, {"help", no_argument, NULL, 'h'}, \
    {"progress", no_argument, NULL, INTRA_OPT_PROGRESS}
#define INTRA_BENCH_SHORT "t:H:k:e:i:h"
#define INTRA_OPT_PROGRESS 256 /* long only */

/* Where a step's time goes on rank 0: a layout made anew, then each phase strata times,
 * then the mean delay from a kernel's command to its posting (strata_bench_moe.c). */
enum { MOE_BD_LAYOUT, MOE_BD_PHASES, MOE_BD_POST = MOE_BD_PHASES + STRATA_MOE_PHASES, MOE_BD_N };

typedef struct moe_breakdown {
    util_histogram_t         samples[MOE_BD_N];
    util_histogram_summary_t median[MOE_BD_N];
    uint64_t                 commands, delay_ns; /* the last step's cumulative counts */
} moe_breakdown_t;

/** Record one step's phases from the object's stats (after the step). */
void moe_breakdown_record(moe_breakdown_t *bd, const strata_moe_stats_t *s, bool record);
/** "ROW breakdown | layout X (Y%) | ..." with each phase's median and share of step_p50. */
void moe_breakdown_print(const char *row, moe_breakdown_t *bd, uint64_t step_p50);

/* One route's object, its reused layout, and what its steps measured. */
typedef struct moe_route {
    strata_moe_route_t   route;
    strata_moe_combine_t combine;
    strata_moe_exchange_t exchange;
    strata_moe_receive_t receive;
    /* --receive exact: the caller's buffers, sized for every row the rank can receive */
    void                *into_x;
    int32_t             *into_counts; /* [local experts] */
    strata_moe_source_t *into_src;
    int64_t              into_rows;
    strata_moe_t        *moe;
    strata_moe_layout_t *layout;
    bench_intra_samples_t      samples;
    bench_intra_result_t       result;
    strata_moe_stats_t   stats;
    moe_breakdown_t      bd;
    double               create_ms; /* the object and its layout, slowest rank */
} moe_route_t;

/** The slowest rank's time since t0, in ms (collective; strata_bench_moe.c). */
double moe_slowest_ms(const bench_intra_t *b, uint64_t t0);
/** A route's object and its layout for the bench's routing (strata_bench_moe_route.c);
 *  one timed step, the reused layout's; what the steps measured, and the object gone. */
void moe_route_open(bench_intra_t *b, strata_comm_t *comm, moe_route_t *r);
void moe_route_step(bench_intra_t *b, moe_route_t *r, bool record, bool breakdown);
void moe_route_close(bench_intra_t *b, moe_route_t *r);

/* What --combine, --exchange and --receive compare. */
typedef enum moe_variant_kind {
    MOE_VARIANT_COMBINE,
    MOE_VARIANT_EXCHANGE,
    MOE_VARIANT_RECEIVE,
} moe_variant_kind_t;

/* --combine, --exchange or --receive: the modes to compare, in the order given. */
typedef struct moe_variant_opts {
    int  modes[2];   /* strata_moe_combine_t, strata_moe_exchange_t or strata_moe_receive_t */
    int  count;
    moe_variant_kind_t kind;
    bool overlap;    /* --overlap instead of the modes or routes */
} moe_variant_opts_t;

/** --combine, --exchange or --receive's value into c: one or two modes, each once, and one
 *  of the options (a usage error otherwise; strata_bench_moe_variants.c). */
bool moe_parse_variants(const char *option, const char *text, moe_variant_kind_t kind,
                        moe_variant_opts_t *c);
/** One hierarchical object per mode of c, one step of each in turn; rank 0 prints. */
void moe_measure_variants(bench_intra_t *b, strata_comm_t *comm, const moe_variant_opts_t *c,
                          bool breakdown, tool_progress_t *progress);

/** strata-bench moe --modes (strata_bench_modes.c). */
typedef struct bench_modes_opts {
    const char        *modes; /* "push,pull,adaptive[,fixed:FILE]" */
    const char        *trace; /* a routing trace to replay, or NULL: Zipf */
    double             zipf;  /* the generated routing's exponent */
    uint64_t           seed;
    strata_moe_route_t route;
    bool               breakdown; /* per mode, the median of each phase */
    bool               classes;   /* per mode and expert class, the experts' completion */
} bench_modes_opts_t;

/** The modes one step each in turn on routing that changes by step; rank 0 prints. */
int bench_moe_modes(bench_intra_t *b, strata_comm_t *comm, int per_node,
                    const bench_modes_opts_t *o);

/** strata-bench moe --overlap (strata_bench_overlap.c): per step, the first and the last
 *  local expert complete against the whole dispatch, on a stream; rank 0 prints. */
void bench_moe_overlap(bench_intra_t *b, strata_comm_t *comm, tool_progress_t *progress);

/** What the shared options give besides the bench state. */
typedef struct bench_intra_opts {
    int sizes[INTRA_MAX_SIZES];
    int num_sizes;
    int iters; /* steps per size; 0: the subcommand's default */
} bench_intra_opts_t;

/** One of the shared options into b and o (not --help); false after a usage error of tool
 *  naming the option and its value. */
bool bench_intra_option(const char *tool, bench_intra_t *b, bench_intra_opts_t *o, int opt,
                        const char *arg);
/** MPI_Init, this rank and the world's size, the log's rank, and 8 experts per rank
 *  unless --experts said otherwise. */
void bench_intra_start(bench_intra_t *b, int *argc, char ***argv);

#endif
