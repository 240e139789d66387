/*
 * strata-bench: performance of strata against a baseline run in the same process.
 *
 *   strata-run -n 2 -- strata-bench p2p [--min BYTES] [--max BYTES]
 *   mpirun -n 2 strata-bench intra [options]           (strata_bench_intra.c)
 *   mpirun -n 4 strata-bench moe [options]             (strata_bench_moe.c)
 *   strata-run -n 4 --nodes 4 --link-rate 1gbit -- strata-bench incast [options]
 *                                                      (strata_bench_incast.c)
 *
 * p2p: write-with-immediate between two ranks, through the transfer engine and through raw
 * libfabric calls on the same provider and interface: one-way latency from ping-pong
 * (p50/p99) and streaming bandwidth, with engine/raw ratios.
 */
#include "strata_bench.h"
#include "inter/engine.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_TIMEOUT_NS (60ull * UTIL_NSEC_PER_SEC)
#define BENCH_WARMUP     10
#define BENCH_BW_REPS    5
#define BENCH_IMM_PING   1
#define BENCH_IMM_PONG   2
#define BENCH_IMM_DATA   3
#define BENCH_IMM_ACK    4

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

static strata_status_t bench_engine_setup(strata_bootstrap_t *bs, size_t buf_size,
                                          bench_engine_t *be, bench_path_t *path)
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
    *path = (bench_path_t){.name = "engine", .ctx = be, .write = bench_engine_write,
                           .flush = bench_engine_flush, .wait_imm = bench_engine_wait_imm};
    return status;
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

/* Rank 0 streams `count` writes, rank 1 acknowledges all of them with one small write. */
static double bench_bandwidth(const bench_path_t *path, int rank, size_t len, int count)
{
    double rates[BENCH_BW_REPS], swap;
    uint64_t start;

    for (int rep = 0; rep < BENCH_BW_REPS; ++rep) {
        start = util_clock_now_ns();
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
        rates[rep] = (double)len * count / (double)(util_clock_now_ns() - start);
    }
    for (int i = 0; i < BENCH_BW_REPS; ++i) { /* median */
        for (int j = i + 1; j < BENCH_BW_REPS; ++j) {
            if (rates[j] < rates[i]) {
                swap = rates[i], rates[i] = rates[j], rates[j] = swap;
            }
        }
    }
    return rates[BENCH_BW_REPS / 2];
}

static void bench_measure(const bench_path_t *path, strata_bootstrap_t *bs, size_t len,
                          bench_result_t *result)
{
    static util_histogram_t hist;
    int iters = (int)UTIL_MAX(20, UTIL_MIN(1000, (64u << 20) / len / 4));
    int count = (int)UTIL_MAX(8, UTIL_MIN(512, (256u << 20) / len));

    util_histogram_reset(&hist);
    BENCH_TRY(bs->barrier(bs->ctx));
    bench_latency(path, bs->rank, len, iters, &hist);
    util_histogram_summarize(&hist, &result->latency);
    BENCH_TRY(bs->barrier(bs->ctx));
    result->gbps = bench_bandwidth(path, bs->rank, len, count);
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: strata-run -n 2 -- strata-bench p2p [--min BYTES] [--max BYTES]\n"
                 "       mpirun -n N strata-bench intra [--help]\n"
                 "       mpirun -n N strata-bench moe [--help]\n"
                 "       strata-run -n N --nodes N --link-rate RATE -- strata-bench incast "
                 "[--help]\n"
                 "Write-with-immediate latency (p50/p99) and bandwidth, engine against raw\n"
                 "libfabric on the same provider (STRATA_INTER_PROVIDER, STRATA_INTER_IFACE).\n");
}

static size_t bench_parse_size(const char *text)
{
    char *end;
    double value = strtod(text, &end);

    switch (*end) {
    case 'k': case 'K': value *= 1024; break;
    case 'm': case 'M': value *= 1024 * 1024; break;
    default: break;
    }
    return (size_t)value;
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

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"min", required_argument, NULL, 'm'},
        {"max", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    size_t min = 8, max = 64u << 20;
    bench_result_t raw_res, eng_res;
    bench_path_t eng_path, raw_path;
    static bench_engine_t be;
    strata_bootstrap_t *bs;
    bench_raw_any_t raw;
    int opt;

    if (argc >= 2 && strcmp(argv[1], "incast") == 0) {
        return bench_incast_main(argc, argv);
    }
#ifdef STRATA_BENCH_HAVE_MPI
    if (argc >= 2 && strcmp(argv[1], "intra") == 0) {
        return bench_intra_main(argc, argv);
    }
    if (argc >= 2 && strcmp(argv[1], "moe") == 0) {
        return bench_moe_main(argc, argv);
    }
#else
    if (argc >= 2 && (strcmp(argv[1], "intra") == 0 || strcmp(argv[1], "moe") == 0)) {
        fprintf(stderr, "strata-bench: this build has no '%s' subcommand: intra and moe need MPI, "
                        "and strata was configured without it (STRATA_WITH_MPI_BENCH=OFF)\n",
                argv[1]);
        return 2;
    }
#endif
    if (argc < 2 || strcmp(argv[1], "p2p") != 0) {
        usage(stderr);
        return 2;
    }
    optind = 2;
    while ((opt = getopt_long(argc, argv, "m:M:h", options, NULL)) != -1) {
        switch (opt) {
        case 'm': min = bench_parse_size(optarg); break;
        case 'M': max = bench_parse_size(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (min < 8 || max < min) {
        fprintf(stderr, "strata-bench: need 8 <= --min <= --max\n");
        return 2;
    }
    BENCH_TRY(strata_bootstrap_from_env(&bs));
    if (bs->world_size != 2) {
        fprintf(stderr, "strata-bench p2p: run with exactly 2 ranks (strata-run -n 2)\n");
        strata_bootstrap_destroy(bs);
        return 2;
    }
    util_log_set_rank(bs->rank);
    BENCH_TRY(bench_engine_setup(bs, max, &be, &eng_path));
    BENCH_TRY(bench_raw_any_create(bs, inter_engine_transport_name(be.engine), max, &raw,
                                   &raw_path));
    if (bs->rank == 0) {
        printf("# strata-bench p2p: write with immediate, rank 0 -> rank 1, over %s (%d rail%s)\n"
               "# latency: one way (half a ping-pong round trip), microseconds;\n"
               "# bandwidth: GB/s streaming %d writes in flight; ratio = engine / raw\n"
               "# raw: %s\n",
               inter_engine_transport_name(be.engine), inter_engine_num_rails(be.engine),
               inter_engine_num_rails(be.engine) == 1 ? "" : "s", BENCH_WINDOW, raw_path.name);
        printf("%10s | %9s %9s | %9s %9s | %8s | %8s %8s %6s\n", "bytes", "raw p50", "raw p99",
               "eng p50", "eng p99", "+p50", "raw GB/s", "eng GB/s", "ratio");
    }
    for (size_t len = min; len <= max; len *= 2) {
        bench_measure(&raw_path, bs, len, &raw_res);
        bench_measure(&eng_path, bs, len, &eng_res);
        if (bs->rank == 0) {
            printf("%10zu | %9.2f %9.2f | %9.2f %9.2f | %8.2f | %8.3f %8.3f %6.2f\n", len,
                   raw_res.latency.p50 / 1e3, raw_res.latency.p99 / 1e3,
                   eng_res.latency.p50 / 1e3, eng_res.latency.p99 / 1e3,
                   ((double)eng_res.latency.p50 - (double)raw_res.latency.p50) / 1e3,
                   raw_res.gbps, eng_res.gbps, eng_res.gbps / raw_res.gbps);
            fflush(stdout);
        }
    }
    BENCH_TRY(bs->barrier(bs->ctx));
    bench_raw_any_destroy(&raw);
    inter_engine_mem_deregister(be.engine, be.mr);
    inter_engine_destroy(be.engine);
    free(be.buf);
    strata_bootstrap_destroy(bs);
    return 0;
}
