/*
 * strata-bench: performance of strata against a baseline run in the same process.
 *
 *   strata-run -n 2 -- strata-bench p2p [--min BYTES] [--max BYTES]
 *   mpirun -n 2 strata-bench intra [options]           (strata_bench_intra.c)
 *   mpirun -n 4 strata-bench moe [options]             (strata_bench_moe.c)
 *   strata-run -n 4 --nodes 4 --link-rate 1gbit -- strata-bench incast [options]
 *                                                      (strata_bench_incast.c)
 *   strata-run -n 2 [--nodes 2] -- strata-bench kv [options]  (strata_bench_kv.c)
 *   mpirun -n 4 strata-bench weights [options]         (strata_bench_weights.c)
 *
 * p2p: write-with-immediate between two ranks, through the transfer engine and through raw
 * libfabric calls on the same provider and interface: one-way latency from ping-pong
 * (p50/p99) and streaming bandwidth, with engine/raw ratios. With --baseline
 * no-rate-control the baseline is a second engine with rate control off and the measured
 * engine has it on: what pacing costs on an unshaped link.
 */
#include "strata_bench.h"
#include "inter/engine.h"
#include "tool_cli.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_TIMEOUT_NS (60ull * UTIL_NSEC_PER_SEC)
#define BENCH_WARMUP     10
#define BENCH_BW_REPS    5  /* streaming repetitions per size and path, by default */
#define BENCH_MAX_REPS   101
#define BENCH_IMM_PING   1
#define BENCH_IMM_PONG   2
#define BENCH_IMM_DATA   3
#define BENCH_IMM_ACK    4
#define BENCH_TOOL       "strata-bench"
#define BENCH_P2P        "strata-bench p2p"
#define BENCH_P2P_MAX    (1ull << 30) /* bytes: the buffer each path registers */
#ifdef STRATA_BENCH_HAVE_MPI
#define BENCH_MPI_NOTE ""
#else
#define BENCH_MPI_NOTE "\n          (not built in: this strata-bench was built without MPI)"
#endif

typedef struct bench_engine {
    inter_engine_t  *engine;
    inter_mr_t      *mr;
    inter_rdesc_t    peer_desc;
    int              peer;
    char            *buf;
    inter_request_t *window[BENCH_WINDOW];
    unsigned         head, count;
} bench_engine_t;

typedef struct bench_result {
    util_histogram_summary_t latency;   /* one-way, ns */
    double                   gbps;      /* median of the repetitions */
} bench_result_t;

static strata_status_t bench_engine_retire(bench_engine_t *be)
{
    inter_request_t *req = be->window[be->head];
    strata_status_t status = inter_request_wait(req, BENCH_TIMEOUT_NS);

    inter_request_free(req);
    be->head = (be->head + 1) % BENCH_WINDOW;
    be->count--;
    return status;
}

static strata_status_t bench_engine_write(void *ctx, size_t len, uint32_t imm)
{
    bench_engine_t *be = ctx;
    inter_request_t *req;
    strata_status_t status;

    if (be->count == BENCH_WINDOW && (status = bench_engine_retire(be)) != STRATA_OK) {
        return status;
    }
    for (uint64_t deadline = util_clock_now_ns() + BENCH_TIMEOUT_NS;;) {
        status = inter_engine_write(be->engine, be->peer, be->mr, 0, &be->peer_desc, 0, len,
                                    true, imm, &req);
        if (status != STRATA_ERR_BUSY || util_clock_now_ns() > deadline) {
            break;
        }
        /* Every pooled request in flight (STRATA_INTER_REQUESTS below the window): finish
         * the oldest, or give the proxy a moment to sweep those given back. */
        if (be->count > 0 && (status = bench_engine_retire(be)) != STRATA_OK) {
            return status;
        }
        if (be->count == 0 && inter_engine_progress(be->engine) == 0) {
            util_sleep_ns(10 * UTIL_NSEC_PER_USEC);
        }
    }
    if (status == STRATA_OK) {
        be->window[(be->head + be->count++) % BENCH_WINDOW] = req;
    }
    return status;
}

static strata_status_t bench_engine_flush(void *ctx)
{
    bench_engine_t *be = ctx;
    strata_status_t status = STRATA_OK;

    while (be->count > 0 && status == STRATA_OK) {
        status = bench_engine_retire(be);
    }
    return status;
}

static strata_status_t bench_engine_wait_imm(void *ctx, size_t len, uint32_t imm, uint64_t count)
{
    bench_engine_t *be = ctx;

    return inter_engine_imm_wait(be->engine, imm,
                                 count * inter_engine_write_chunks(be->engine, be->peer, len),
                                 be->peer, BENCH_TIMEOUT_NS);
}

/* rate_control: -1 as STRATA_INTER_RATE_CONTROL says, else off (0) or on (1). */
static strata_status_t bench_engine_setup(strata_bootstrap_t *bs, size_t buf_size,
                                          int rate_control, bench_engine_t *be,
                                          bench_path_t *path)
{
    inter_engine_params_t params;
    inter_rdesc_t descs[2];
    size_t blob_size;
    char *blobs, *mine;
    strata_status_t status;

    if ((status = inter_engine_params_from_env(&params)) != STRATA_OK) {
        return status;
    }
    params.rank       = bs->rank;
    params.world_size = bs->world_size;
    params.local_size = getenv("LOCAL_WORLD_SIZE") ? atoi(getenv("LOCAL_WORLD_SIZE")) : 1;
    if (rate_control >= 0) {
        params.rate_control = rate_control != 0;
    }
    if ((status = inter_engine_create(&params, &be->engine)) != STRATA_OK) {
        return status;
    }
    blob_size = inter_engine_address_size(be->engine);
    mine      = malloc(blob_size);
    blobs     = malloc(blob_size * 2);
    be->buf   = util_alloc_aligned(4096, buf_size);
    if (!mine || !blobs || !be->buf) {
        return STRATA_ERR_NO_MEMORY;
    }
    memset(be->buf, 0x3c, buf_size);
    status = inter_engine_address(be->engine, mine);
    if (status == STRATA_OK) {
        status = bs->allgather(bs->ctx, mine, blobs, blob_size);
    }
    if (status == STRATA_OK) {
        status = inter_engine_connect(be->engine, blobs);
    }
    if (status == STRATA_OK) {
        status = inter_engine_mem_register(be->engine, be->buf, buf_size, &be->mr);
    }
    free(mine);
    free(blobs);
    if (status != STRATA_OK) {
        return status;
    }
    inter_engine_mem_descriptor(be->mr, &descs[bs->rank]);
    status = bs->allgather(bs->ctx, &descs[bs->rank], descs, sizeof(descs[0]));
    be->peer      = 1 - bs->rank;
    be->peer_desc = descs[be->peer];
    *path = (bench_path_t){.name = rate_control == 0 ? "engine without rate control" : "engine",
                           .ctx = be, .write = bench_engine_write,
                           .flush = bench_engine_flush, .wait_imm = bench_engine_wait_imm};
    return status;
}


static void bench_engine_destroy(bench_engine_t *be)
{
    if (be->engine == NULL) {
        return;
    }
    inter_engine_mem_deregister(be->engine, be->mr);
    inter_engine_destroy(be->engine);
    free(be->buf);
}

/* What the engine estimated for the path to the peer, and how often its window held a
 * write back: where the window never holds, pacing cannot be what a ratio below 1 costs. */
static void bench_print_rate(bench_engine_t *be, const char *mode)
{
    inter_peer_rate_t rate;
    char window[32] = "none";

    BENCH_TRY(inter_engine_peer_rate(be->engine, be->peer, &rate));
    if (rate.window_bytes != UINT64_MAX) {
        snprintf(window, sizeof(window), "%.0f KiB", (double)rate.window_bytes / 1024);
    }
    printf("# rate control %-3s: rate %.1f MB/s, base RTT %.1f us, window %s, "
           "%llu writes held by the window\n",
           mode, rate.rate_Bps / 1e6, (double)rate.rtt_ns / 1e3, window,
           (unsigned long long)rate.paced);
}

/* Rank 0 pings, rank 1 pongs; half the round trip is the one-way latency. */
static void bench_latency(const bench_path_t *path, int rank, size_t len, int iters,
                          util_histogram_t *hist)
{
    uint64_t start;

    for (int i = -BENCH_WARMUP; i < iters; ++i) {
        start = util_clock_now_ns();
        if (rank == 0) {
            BENCH_TRY(path->write(path->ctx, len, BENCH_IMM_PING));
            BENCH_TRY(path->wait_imm(path->ctx, len, BENCH_IMM_PONG, 1));
            if (i >= 0) {
                util_histogram_record(hist, (util_clock_now_ns() - start) / 2);
            }
        } else {
            BENCH_TRY(path->wait_imm(path->ctx, len, BENCH_IMM_PING, 1));
            BENCH_TRY(path->write(path->ctx, len, BENCH_IMM_PONG));
        }
    }
    BENCH_TRY(path->flush(path->ctx));
}

/* Rank 0 streams `count` writes, rank 1 acknowledges all of them with one small write:
 * the rate of one repetition, GB/s. */
static double bench_stream(const bench_path_t *path, int rank, size_t len, int count)
{
    uint64_t start = util_clock_now_ns();

    if (rank == 0) {
        for (int i = 0; i < count; ++i) {
            BENCH_TRY(path->write(path->ctx, len, BENCH_IMM_DATA));
        }
        BENCH_TRY(path->flush(path->ctx));
        BENCH_TRY(path->wait_imm(path->ctx, 8, BENCH_IMM_ACK, 1));
    } else {
        BENCH_TRY(path->wait_imm(path->ctx, len, BENCH_IMM_DATA, (uint64_t)count));
        BENCH_TRY(path->write(path->ctx, 8, BENCH_IMM_ACK));
        BENCH_TRY(path->flush(path->ctx));
    }
    return (double)len * count / (double)(util_clock_now_ns() - start);
}

static int bench_compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double bench_median(double *values, int n)
{
    qsort(values, (size_t)n, sizeof(values[0]), bench_compare_doubles);
    return values[n / 2];
}

static void bench_latency_of(const bench_path_t *path, strata_bootstrap_t *bs, size_t len,
                             util_histogram_summary_t *summary)
{
    static util_histogram_t hist;
    int iters = (int)UTIL_MAX(20, UTIL_MIN(1000, (64u << 20) / len / 4));

    util_histogram_reset(&hist);
    BENCH_TRY(bs->barrier(bs->ctx));
    bench_latency(path, bs->rank, len, iters, &hist);
    util_histogram_summarize(&hist, summary);
}

/*
 * Latency through each path, then `reps` streaming repetitions through each in turn: the
 * ratio is the median of the ratios of repetitions run back to back, which the machine's
 * slow swings of load touch alike.
 */
static void bench_measure(const bench_path_t *base, const bench_path_t *eng,
                          strata_bootstrap_t *bs, size_t len, int reps, bench_result_t *base_res,
                          bench_result_t *eng_res, double *ratio_p)
{
    int count = (int)UTIL_MAX(8, UTIL_MIN(512, (256u << 20) / len));
    double base_rates[BENCH_MAX_REPS], eng_rates[BENCH_MAX_REPS], ratios[BENCH_MAX_REPS];

    bench_latency_of(base, bs, len, &base_res->latency);
    bench_latency_of(eng, bs, len, &eng_res->latency);
    for (int rep = 0; rep < reps; ++rep) {
        BENCH_TRY(bs->barrier(bs->ctx));
        base_rates[rep] = bench_stream(base, bs->rank, len, count);
        BENCH_TRY(bs->barrier(bs->ctx));
        eng_rates[rep] = bench_stream(eng, bs->rank, len, count);
        ratios[rep]    = eng_rates[rep] / base_rates[rep];
    }
    base_res->gbps = bench_median(base_rates, reps);
    eng_res->gbps  = bench_median(eng_rates, reps);
    *ratio_p       = bench_median(ratios, reps);
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-bench SUBCOMMAND [options]\n"
            "       strata-bench -h | -V\n"
            "Performance of strata against a baseline run in the same processes. Rank 0\n"
            "prints; on a terminal it also keeps a progress line on stderr.\n"
            "\n"
            "Subcommands (SUBCOMMAND --help says more):\n"
            "  p2p     strata-run -n 2 -- strata-bench p2p [--min BYTES] [--max BYTES]\n"
            "              [--baseline raw|no-rate-control] [--reps N]\n"
            "          write-with-immediate latency (p50/p99) and bandwidth, the engine against\n"
            "          raw libfabric or UCX on the same provider (STRATA_INTER_PROVIDER,\n"
            "          STRATA_INTER_IFACE), or against itself without rate control, sizes\n"
            "          from --min (8) to --max (64m) by doubling\n"
            "  intra   mpirun -n N strata-bench intra [options]\n"
            "          MoE dispatch+combine in one node against memcpy and MPI_Alltoallv%s\n"
            "  moe     mpirun -n N strata-bench moe [options]\n"
            "          two-tier MoE dispatch+combine against MPI_Alltoallv; --modes: Push,\n"
            "          Pull and adaptive on the same routing%s\n"
            "  weights mpirun -n 4 strata-bench weights [options]\n"
            "          a model's weights from 2 ranks to 2: a transfer plan against MPI_Isend\n"
            "          and MPI_Irecv of the same tensors%s\n"
            "  kv      strata-run -n 2 [--nodes 2] -- strata-bench kv [options]\n"
            "          a KV-cache transfer's pages: strata_write_paged against raw libfabric\n"
            "          writes, one per page\n"
            "  incast  strata-run -n N --nodes N --link-rate RATE --\n"
            "              strata-bench incast [options]\n"
            "          an incast with and without rate control on shaped links\n"
            "\n"
            "  -h, --help     this text\n"
            "  -V, --version  strata's version and build options\n"
            "\n"
            "Exit status: 0 done, 1 a run failed, 2 bad usage.\n",
            BENCH_MPI_NOTE, BENCH_MPI_NOTE, BENCH_MPI_NOTE);
}

static void p2p_usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-run -n 2 -- strata-bench p2p [--min BYTES] [--max BYTES] [--progress]\n"
            "                                  [--baseline raw|no-rate-control] [--reps N]\n"
            "Write-with-immediate between two ranks, through the transfer engine and through\n"
            "raw calls of its library (libfabric, or UCX) on the same provider and interface\n"
            "(STRATA_INTER_PROVIDER, STRATA_INTER_IFACE): one-way latency from ping-pong\n"
            "(p50/p99) and streaming bandwidth, with engine/raw ratios, for sizes from --min\n"
            "to --max, doubling.\n"
            "\n"
            "  --min BYTES  smallest size, at least 8 (default 8); k, m and g suffixes\n"
            "  --max BYTES  largest size, at least --min, at most 1g (default 64m)\n"
            "  --baseline raw|no-rate-control\n"
            "               what the engine is measured against: raw calls (default), or the\n"
            "               same engine with rate control off, the measured one having it on\n"
            "  --reps N     streaming repetitions per size and path, 1 to 101 (default 5);\n"
            "               the ratio is the median of the ratios of back-to-back ones\n"
            "  --progress   rank 0's progress line on stderr even where it is no terminal\n"
            "               (without it: only on a terminal, which strata-run on one gives)\n"
            "  -h, --help   this text\n");
}

/* The raw path on the engine's library and settings: "ofi tcp;ofi_rxm lo" (provider and
 * interface) or "ucx tcp lo" (UCX transports and devices). */
typedef struct bench_raw_any {
    bench_raw_t *ofi;
#ifdef STRATA_HAVE_UCX
    bench_raw_ucx_t *ucx;
#endif
} bench_raw_any_t;

static strata_status_t bench_raw_any_create(strata_bootstrap_t *bs, const char *name,
                                            size_t buf_size, bench_raw_any_t *raw,
                                            bench_path_t *path)
{
    char first[64] = "", second[64] = "";

    memset(raw, 0, sizeof(*raw));
    sscanf(name, "%*s %63s %63s", first, second);
#ifdef STRATA_HAVE_UCX
    if (strncmp(name, "ucx ", 4) == 0) {
        return bench_raw_ucx_create(bs, first, second, buf_size, &raw->ucx, path);
    }
#endif
    return bench_raw_create(bs, first, second, buf_size, &raw->ofi, path);
}

static void bench_raw_any_destroy(bench_raw_any_t *raw)
{
    bench_raw_destroy(raw->ofi);
#ifdef STRATA_HAVE_UCX
    bench_raw_ucx_destroy(raw->ucx);
#endif
}

typedef struct p2p_opts {
    uint64_t min, max;
    int      reps;
    bool     progress;       /* the progress line even where stderr is no terminal */
    bool     against_engine; /* --baseline no-rate-control */
} p2p_opts_t;

static bool p2p_parse_baseline(const char *text, p2p_opts_t *o)
{
    if (strcmp(text, "raw") == 0 || strcmp(text, "no-rate-control") == 0) {
        o->against_engine = strcmp(text, "no-rate-control") == 0;
        return true;
    }
    tool_usage_error(BENCH_P2P, "--baseline takes raw or no-rate-control, not '%s'", text);
    return false;
}

/* p2p's options into *o; -1 to go on, else the exit status. */
static int p2p_parse(int argc, char **argv, p2p_opts_t *o)
{
    static const struct option options[] = {
        {"min", required_argument, NULL, 'm'},
        {"max", required_argument, NULL, 'M'},
        {"baseline", required_argument, NULL, 'b'},
        {"reps", required_argument, NULL, 'r'},
        {"progress", no_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    bool ok = true;

    optind = 2;
    while (ok && (opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (opt) {
        case 'm':
            ok = tool_parse_size(BENCH_P2P, "--min", optarg, 8, BENCH_P2P_MAX, &o->min);
            break;
        case 'M':
            ok = tool_parse_size(BENCH_P2P, "--max", optarg, 8, BENCH_P2P_MAX, &o->max);
            break;
        case 'b': ok = p2p_parse_baseline(optarg, o); break;
        case 'r':
            ok = tool_parse_int(BENCH_P2P, "--reps", optarg, 1, BENCH_MAX_REPS, &o->reps);
            break;
        case 'p': o->progress = true; break;
        case 'h': p2p_usage(stdout); return 0;
        default:  return tool_option_error(BENCH_P2P, argv, options, opt);
        }
    }
    if (!ok) {
        return TOOL_EXIT_USAGE;
    }
    if (optind < argc) {
        return tool_usage_error(BENCH_P2P, "unexpected argument '%s'", argv[optind]);
    }
    if (o->max < o->min) {
        return tool_usage_error(BENCH_P2P, "--max %llu is below --min %llu",
                                (unsigned long long)o->max, (unsigned long long)o->min);
    }
    return -1;
}

static int bench_p2p_main(int argc, char **argv)
{
    p2p_opts_t o = {.min = 8, .max = 64u << 20, .reps = BENCH_BW_REPS};
    bench_result_t raw_res, eng_res;
    bench_path_t eng_path, raw_path;
    static bench_engine_t be, base_be;
    tool_progress_t progress;
    strata_bootstrap_t *bs;
    bench_raw_any_t raw = {0};
    double ratio;
    int rc = p2p_parse(argc, argv, &o), num_sizes = 0, done = 0;

    if (rc >= 0) {
        return rc;
    }
    BENCH_TRY(strata_bootstrap_from_env(&bs));
    if (bs->world_size != 2) {
        fprintf(stderr, "strata-bench p2p: run with exactly 2 ranks (strata-run -n 2)\n");
        strata_bootstrap_destroy(bs);
        return 2;
    }
    util_log_set_rank(bs->rank);
    BENCH_TRY(bench_engine_setup(bs, o.max, o.against_engine ? 1 : -1, &be, &eng_path));
    if (o.against_engine) {
        BENCH_TRY(bench_engine_setup(bs, o.max, 0, &base_be, &raw_path));
    } else {
        BENCH_TRY(bench_raw_any_create(bs, inter_engine_transport_name(be.engine), o.max, &raw,
                                       &raw_path));
    }
    if (bs->rank == 0) {
        printf("# strata-bench p2p: write with immediate, rank 0 -> rank 1, over %s (%d rail%s)\n"
               "# latency: one way (half a ping-pong round trip), microseconds;\n"
               "# bandwidth: GB/s streaming %d writes in flight, median of %d repetitions;\n"
               "# ratio: median of engine / base over repetitions run back to back\n"
               "# base: %s%s\n",
               inter_engine_transport_name(be.engine), inter_engine_num_rails(be.engine),
               inter_engine_num_rails(be.engine) == 1 ? "" : "s", BENCH_WINDOW, o.reps,
               raw_path.name, o.against_engine ? "; eng: the same engine with rate control on" : "");
        printf("%10s | %9s %9s | %9s %9s | %8s | %8s %8s %6s\n", "bytes", "base p50",
               "base p99", "eng p50", "eng p99", "+p50", "baseGB/s", "eng GB/s", "ratio");
        fflush(stdout);
    }
    for (uint64_t len = o.min; len <= o.max; len *= 2) {
        ++num_sizes;
    }
    tool_progress_start(&progress, bs->rank == 0, o.progress);
    for (size_t len = o.min; len <= o.max; len *= 2) {
        tool_progress_update(&progress, "p2p %d/%d sizes", done++, num_sizes);
        bench_measure(&raw_path, &eng_path, bs, len, o.reps, &raw_res, &eng_res, &ratio);
        if (bs->rank == 0) {
            tool_progress_end(&progress); /* the row starts on a clean line */
            printf("%10zu | %9.2f %9.2f | %9.2f %9.2f | %8.2f | %8.3f %8.3f %6.2f\n", len,
                   raw_res.latency.p50 / 1e3, raw_res.latency.p99 / 1e3,
                   eng_res.latency.p50 / 1e3, eng_res.latency.p99 / 1e3,
                   ((double)eng_res.latency.p50 - (double)raw_res.latency.p50) / 1e3,
                   raw_res.gbps, eng_res.gbps, ratio);
            fflush(stdout);
        }
    }
    tool_progress_end(&progress);
    if (o.against_engine && bs->rank == 0) {
        bench_print_rate(&base_be, "off");
        bench_print_rate(&be, "on");
    }
    BENCH_TRY(bs->barrier(bs->ctx));
    bench_raw_any_destroy(&raw);
    bench_engine_destroy(&be);
    bench_engine_destroy(&base_be);
    strata_bootstrap_destroy(bs);
    return 0;
}

int main(int argc, char **argv)
{
    const char *command = argc > 1 ? argv[1] : NULL;

    if (command == NULL) {
        return tool_unknown_subcommand(BENCH_TOOL, NULL, usage);
    }
    if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(command, "-V") == 0 || strcmp(command, "--version") == 0) {
        tool_print_version(BENCH_TOOL, strata_get_version_string(), strata_get_build_options());
        return 0;
    }
    if (strcmp(command, "p2p") == 0) {
        return bench_p2p_main(argc, argv);
    }
    if (strcmp(command, "incast") == 0) {
        return bench_incast_main(argc, argv);
    }
    if (strcmp(command, "kv") == 0) {
        return bench_kv_main(argc, argv);
    }
#ifdef STRATA_BENCH_HAVE_MPI
    if (strcmp(command, "intra") == 0) {
        return bench_intra_main(argc, argv);
    }
    if (strcmp(command, "moe") == 0) {
        return bench_moe_main(argc, argv);
    }
    if (strcmp(command, "weights") == 0) {
        return bench_weights_main(argc, argv);
    }
#else
    if (strcmp(command, "intra") == 0 || strcmp(command, "moe") == 0 ||
        strcmp(command, "weights") == 0) {
        return tool_usage_error(BENCH_TOOL, "subcommand '%s' is not built in: this "
                                "strata-bench was built without MPI", command);
    }
#endif
    if (command[0] == '-') {
        return tool_usage_error(BENCH_TOOL, "unknown option '%s' before the subcommand",
                                command);
    }
    return tool_unknown_subcommand(BENCH_TOOL, command, usage);
}
