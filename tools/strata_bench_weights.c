/*
 * strata-bench weights (mpirun -n 4): a synthetic model's weights from 2 sender ranks to 2
 * receiver ranks, every tensor to both receivers, sender t % 2 holding tensor t, once
 * through a strata transfer plan and once by MPI (MPI_Isend of each tensor to each
 * receiver, MPI_Irecv of each at the receivers), the two alternating round by round in the
 * same processes. A round runs from a barrier to a barrier after the receivers have every
 * tensor. Prints p50 and p99 of a round, GB/s received per receiver at p50, and the line
 * "weights/mpi: time X" (the ratio of the p50 times).
 */
#include "strata_bench.h"
#include "tool_cli.h"

#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEIGHTS_TOOL       "strata-bench weights"
#define WEIGHTS_TIMEOUT_MS 600000u
#define WEIGHTS_WARMUP     1

typedef struct weights_opts {
    uint64_t bytes;
    int      tensors, rounds;
} weights_opts_t;

typedef struct weights_model {
    size_t   *size, *offset; /* [tensors]: at the receivers, and in its sender's buffer */
    uint64_t  total;         /* a receiver's bytes */
    uint64_t  sent[2];       /* each sender's */
} weights_model_t;

static void weights_usage(FILE *out)
{
    fprintf(out,
            "Usage: mpirun -n 4 strata-bench weights [--bytes N] [--tensors N] [--rounds N]\n"
            "A model's weights from ranks 0 and 1 (each holding every other tensor) to ranks\n"
            "2 and 3 (each receiving every tensor): a strata transfer plan against MPI_Isend\n"
            "and MPI_Irecv of the same tensors, in the same run.\n"
            "\n"
            "  --bytes N    the model's size, with k, m or g (default 2g)\n"
            "  --tensors N  tensors, of random sizes around the mean, 1..100000 (default 1000)\n"
            "  --rounds N   timed rounds per path, 1..1000 (default 5)\n"
            "  -h, --help   this text\n");
}

/* Options into *o; -1 to go on, else the exit status. */
static int weights_parse(int argc, char **argv, weights_opts_t *o)
{
    static const struct option options[] = {
        {"bytes", required_argument, NULL, 'b'},
        {"tensors", required_argument, NULL, 't'},
        {"rounds", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool ok = true;
    int opt;

    optind = 2;
    while (ok && (opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (opt) {
        case 'b': ok = tool_parse_size(WEIGHTS_TOOL, "--bytes", optarg, 1 << 20, 64ull << 30,
                                       &o->bytes); break;
        case 't': ok = tool_parse_int(WEIGHTS_TOOL, "--tensors", optarg, 1, 100000,
                                      &o->tensors); break;
        case 'r': ok = tool_parse_int(WEIGHTS_TOOL, "--rounds", optarg, 1, 1000, &o->rounds);
                  break;
        case 'h': weights_usage(stdout); return 0;
        default:  return tool_option_error(WEIGHTS_TOOL, argv, options, opt);
        }
    }
    if (!ok) {
        return TOOL_EXIT_USAGE;
    }
    if (optind < argc) {
        return tool_usage_error(WEIGHTS_TOOL, "unexpected argument '%s'", argv[optind]);
    }
    if (o->bytes / (uint64_t)o->tensors > INT_MAX / 2) {
        return tool_usage_error(WEIGHTS_TOOL, "--bytes %llu over %d tensors: a tensor must "
                                "stay under 1 GiB, what one MPI call moves",
                                (unsigned long long)o->bytes, o->tensors);
    }
    return -1;
}

/* Tensor sizes between half and one and a half times the mean, 16-byte multiples. */
static void weights_model(const weights_opts_t *o, weights_model_t *m)
{
    uint64_t mean = o->bytes / (uint64_t)o->tensors, state = 42;

    m->size   = calloc((size_t)o->tensors, sizeof(*m->size));
    m->offset = calloc((size_t)o->tensors, sizeof(*m->offset));
    if (m->size == NULL || m->offset == NULL) {
        fprintf(stderr, "%s: no memory\n", WEIGHTS_TOOL);
        exit(1);
    }
    for (int t = 0; t < o->tensors; ++t) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        m->size[t]   = UTIL_MAX((mean / 2 + (state >> 33) % (mean + 1)) & ~(uint64_t)15, 16);
        m->offset[t] = m->sent[t % 2];
        m->sent[t % 2] += m->size[t];
        m->total += m->size[t];
    }
}

static strata_status_t weights_mpi_allgather(void *ctx, const void *send, void *recv,
                                             size_t size)
{
    (void)ctx;
    return MPI_Allgather(send, (int)size, MPI_BYTE, recv, (int)size, MPI_BYTE,
                         MPI_COMM_WORLD) == MPI_SUCCESS ? STRATA_OK : STRATA_ERR_BOOTSTRAP;
}

static strata_status_t weights_mpi_barrier(void *ctx)
{
    (void)ctx;
    return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? STRATA_OK : STRATA_ERR_BOOTSTRAP;
}

/* Where tensor t sits at a receiver: the senders' buffers end to end, as ranks 0 and 1. */
static size_t weights_at_receiver(const weights_model_t *m, int t)
{
    return (t % 2 == 0 ? 0 : m->sent[0]) + m->offset[t];
}

static strata_transfer_plan_t *weights_plan(strata_comm_t *comm, strata_mem_t *region,
                                            const weights_model_t *m, int tensors)
{
    strata_transfer_piece_t *pieces = calloc((size_t)tensors * 2, sizeof(*pieces));
    strata_transfer_plan_t *plan;

    if (pieces == NULL) {
        fprintf(stderr, "%s: no memory\n", WEIGHTS_TOOL);
        exit(1);
    }
    for (int t = 0; t < tensors; ++t) {
        for (int r = 0; r < 2; ++r) {
            pieces[2 * t + r] = (strata_transfer_piece_t){
                .tensor = (uint32_t)t, .src_rank = t % 2, .src_offset = m->offset[t],
                .dst_rank = 2 + r, .dst_offset = weights_at_receiver(m, t),
                .length = m->size[t]};
        }
    }
    BENCH_TRY(strata_transfer_plan_create(comm, region, pieces, (size_t)tensors * 2,
                                          (uint32_t)tensors, 1000, &plan));
    free(pieces);
    return plan;
}

/* One round through MPI: each tensor from its sender to each receiver, in chunks MPI's
 * int counts hold. */
static void weights_mpi_round(int rank, const weights_model_t *m, int tensors, char *buf,
                              MPI_Request *reqs)
{
    int n = 0;

    for (int t = 0; t < tensors; ++t) {
        if (rank < 2 && t % 2 == rank) {
            for (int r = 2; r < 4; ++r) {
                MPI_Isend(buf + m->offset[t], (int)m->size[t], MPI_BYTE, r, t, MPI_COMM_WORLD,
                          &reqs[n++]);
            }
        } else if (rank >= 2) {
            MPI_Irecv(buf + weights_at_receiver(m, t), (int)m->size[t], MPI_BYTE, t % 2, t,
                      MPI_COMM_WORLD, &reqs[n++]);
        }
    }
    MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
}

static void weights_strata_round(int rank, strata_transfer_plan_t *plan)
{
    BENCH_TRY(strata_transfer_plan_execute(plan, WEIGHTS_TIMEOUT_MS));
    if (rank >= 2) {
        BENCH_TRY(strata_transfer_plan_wait(plan, WEIGHTS_TIMEOUT_MS));
    }
}

static int weights_compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void weights_report(double *mpi, double *plan, int rounds, uint64_t total)
{
    qsort(mpi, (size_t)rounds, sizeof(*mpi), weights_compare);
    qsort(plan, (size_t)rounds, sizeof(*plan), weights_compare);
    printf("%-6s | %9s %9s | %8s\n", "path", "p50 ms", "p99 ms", "GB/s");
    printf("%-6s | %9.1f %9.1f | %8.3f\n", "mpi", mpi[rounds / 2], mpi[(rounds * 99) / 100],
           (double)total / (mpi[rounds / 2] * 1e6));
    printf("%-6s | %9.1f %9.1f | %8.3f\n", "strata", plan[rounds / 2],
           plan[(rounds * 99) / 100], (double)total / (plan[rounds / 2] * 1e6));
    printf("weights/mpi: time %.2f (p50)\n", plan[rounds / 2] / mpi[rounds / 2]);
}

int bench_weights_main(int argc, char **argv)
{
    weights_opts_t o = {.bytes = 2ull << 30, .tensors = 1000, .rounds = 5};
    strata_bootstrap_t bs = {.allgather = weights_mpi_allgather, .barrier = weights_mpi_barrier};
    weights_model_t m = {0};
    strata_transfer_plan_t *plan;
    strata_mem_t *region;
    strata_comm_t *comm;
    MPI_Request *reqs;
    double *t_mpi, *t_plan;
    int rank, size, rc = weights_parse(argc, argv, &o);
    size_t bytes;
    char *buf;

    if (rc >= 0) {
        return rc;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4) {
        fprintf(stderr, "%s: run on 4 ranks (mpirun -n 4): 2 senders, 2 receivers\n",
                WEIGHTS_TOOL);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    weights_model(&o, &m);
    bytes  = rank < 2 ? m.sent[rank] : m.total;
    buf    = util_alloc_aligned(4096, bytes);
    reqs   = calloc((size_t)o.tensors * 2, sizeof(*reqs));
    t_mpi  = calloc((size_t)o.rounds, sizeof(double));
    t_plan = calloc((size_t)o.rounds, sizeof(double));
    if (buf == NULL || reqs == NULL || t_mpi == NULL || t_plan == NULL) {
        fprintf(stderr, "%s: no memory for %zu bytes\n", WEIGHTS_TOOL, bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(buf, rank + 1, bytes);
    bs.rank       = rank;
    bs.world_size = size;
    BENCH_TRY(strata_comm_create(NULL, &bs, &comm));
    BENCH_TRY(strata_mem_register(comm, buf, bytes, &region));
    plan = weights_plan(comm, region, &m, o.tensors);
    if (rank == 0) {
        printf("# strata-bench weights: %d tensors, %.2f GiB, ranks 0,1 -> 2,3 over %s; "
               "%d rounds per path, alternating\n", o.tensors,
               (double)m.total / (double)(1ull << 30), strata_comm_transport(comm), o.rounds);
        fflush(stdout);
    }
    for (int i = -WEIGHTS_WARMUP; i < o.rounds; ++i) {
        double start;

        MPI_Barrier(MPI_COMM_WORLD);
        start = MPI_Wtime();
        weights_mpi_round(rank, &m, o.tensors, buf, reqs);
        MPI_Barrier(MPI_COMM_WORLD);
        if (i >= 0) {
            t_mpi[i] = (MPI_Wtime() - start) * 1e3;
        }
        start = MPI_Wtime();
        weights_strata_round(rank, plan);
        MPI_Barrier(MPI_COMM_WORLD);
        if (i >= 0) {
            t_plan[i] = (MPI_Wtime() - start) * 1e3;
        }
    }
    if (rank == 0) {
        weights_report(t_mpi, t_plan, o.rounds, m.total);
    }
    strata_transfer_plan_destroy(plan);
    strata_mem_deregister(comm, region);
    strata_comm_destroy(comm);
    free(buf);
    free(reqs);
    free(t_mpi);
    free(t_plan);
    free(m.size);
    free(m.offset);
    MPI_Finalize();
    return 0;
}
