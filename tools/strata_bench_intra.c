/*
 * strata-bench intra: MoE dispatch+combine between the ranks of one node through the
 * intra-node tier, against baselines run in the same processes on the same tokens: a plain
 * memcpy of the same payload bytes, MPI_Alltoallv (pack by destination, send, send back,
 * weighted sum), and on a GPU the device-to-device copy of the payload. Launched by mpirun
 * (one rank: every expert local); MPI also coordinates the ranks.
 *
 *   mpirun -n 2 strata-bench intra [--tokens N[,N...]] [--hidden H] [--topk K]
 *          [--experts E] [--iters N] [--device host]
 */
#include "strata_bench_mpi.h"
#include "tool_cli.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Distinct uniform experts per token, seeded by rank. */
void bench_intra_route(bench_intra_t *b)
{
    uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(b->rank + 1);

    for (int t = 0; t < b->tokens; ++t) {
        for (int k = 0; k < b->topk; ++k) {
            int64_t e;
            bool again;
            do {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                e = (int64_t)((state >> 33) % (uint64_t)b->experts);
                again = false;
                for (int j = 0; j < k; ++j) {
                    again |= b->idx[t * b->topk + j] == e;
                }
            } while (again);
            b->idx[t * b->topk + k]     = e;
            b->weights[t * b->topk + k] = 1.0f / (float)b->topk;
        }
    }
    for (size_t i = 0; i < (size_t)b->tokens * (size_t)b->hidden; ++i) {
        b->x[i] = (uint16_t)(0x3c00 + (i & 0xff));
    }
}

/* Dispatch rows plus combined result rows: what each rank moves per step. */
static double bench_intra_payload(const bench_intra_t *b)
{
    return 2.0 * (double)b->tokens * b->topk * (double)b->row_bytes;
}

static void bench_intra_summary(util_histogram_t *h, util_histogram_summary_t *s)
{
    util_histogram_summarize(h, s);
    util_histogram_reset(h);
}

void bench_intra_record(bench_intra_samples_t *s, uint64_t t0, uint64_t t1, uint64_t t2)
{
    util_histogram_record(&s->dispatch, t1 - t0);
    util_histogram_record(&s->combine, t2 - t1);
    util_histogram_record(&s->step, t2 - t0);
}

void bench_intra_finish(bench_intra_t *b, bench_intra_samples_t *s, bench_intra_result_t *r)
{
    bench_intra_summary(&s->dispatch, &r->dispatch);
    bench_intra_summary(&s->combine, &r->combine);
    bench_intra_summary(&s->step, &r->step);
    r->gbps = bench_intra_payload(b) / (double)r->step.p50;
}

static void bench_intra_run_strata(bench_intra_t *b, intra_moe_t *moe, bench_intra_result_t *r)
{
    static bench_intra_samples_t samples;
    intra_moe_recv_t recv;

    for (int i = -2; i < b->iters; ++i) {
        uint64_t t0, t1, t2;

        MPI_TRY(MPI_Barrier(MPI_COMM_WORLD));
        t0 = util_clock_now_ns();
        BENCH_TRY(intra_moe_dispatch(moe, b->d_x, NULL, b->d_idx, b->tokens, b->pull_mask,
                                     &recv));
        t1 = util_clock_now_ns();
        BENCH_TRY(intra_moe_combine(moe, recv.expert_y, b->d_weights, b->pull_mask, b->d_out));
        t2 = util_clock_now_ns();
        if (i >= 0) {
            bench_intra_record(&samples, t0, t1, t2);
        }
    }
    bench_intra_finish(b, &samples, r);
}

static void bench_intra_run_memcpy(bench_intra_t *b, bench_intra_result_t *r)
{
    static util_histogram_t hs;
    size_t bytes = (size_t)bench_intra_payload(b);
    char *src = malloc(bytes), *dst = malloc(bytes);

    if (src == NULL || dst == NULL) {
        fprintf(stderr, "strata-bench intra: cannot allocate 2 x %zu bytes\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    for (int i = -2; i < b->iters; ++i) {
        uint64_t t0;

        MPI_TRY(MPI_Barrier(MPI_COMM_WORLD));
        t0 = util_clock_now_ns();
        memcpy(dst, src, bytes);
        if (i >= 0) {
            util_histogram_record(&hs, util_clock_now_ns() - t0);
        }
    }
    memset(r, 0, sizeof(*r));
    bench_intra_summary(&hs, &r->step);
    r->gbps = bench_intra_payload(b) / (double)r->step.p50;
    free(src);
    free(dst);
}

/*
 * On a GPU, the copy of the same payload bytes from device memory to device memory in the
 * same process (the backend's copy, which waits for it): the bandwidth the kernels can at
 * best reach, against which their dispatch+combine is measured.
 */
static void bench_intra_run_device_copy(bench_intra_t *b, bench_intra_result_t *r)
{
    static util_histogram_t hs;
    size_t bytes = (size_t)bench_intra_payload(b);
    void *src = NULL, *dst = NULL;

    BENCH_TRY(b->device->mem_alloc(bytes, &src));
    BENCH_TRY(b->device->mem_alloc(bytes, &dst));
    BENCH_TRY(b->device->mem_set(src, 1, bytes));
    for (int i = -2; i < b->iters; ++i) {
        uint64_t t0;

        MPI_TRY(MPI_Barrier(MPI_COMM_WORLD));
        t0 = util_clock_now_ns();
        BENCH_TRY(b->device->mem_copy(dst, src, bytes));
        if (i >= 0) {
            util_histogram_record(&hs, util_clock_now_ns() - t0);
        }
    }
    memset(r, 0, sizeof(*r));
    bench_intra_summary(&hs, &r->step);
    r->gbps = bench_intra_payload(b) / (double)r->step.p50;
    b->device->mem_free(src);
    b->device->mem_free(dst);
}

/* Counts and order of the rows each rank sends: (token, k) grouped by owner rank. */
void bench_intra_mpi_layout(bench_intra_t *b)
{
    int per_rank = b->experts / b->size, n = 0;

    memset(b->send_counts, 0, sizeof(int) * (size_t)b->size);
    for (int dst = 0; dst < b->size; ++dst) {
        b->send_displs[dst] = n * b->hidden;
        for (int i = 0; i < b->tokens * b->topk; ++i) {
            if (b->idx[i] / per_rank == dst) {
                b->order[n++] = i;
                b->send_counts[dst] += b->hidden;
            }
        }
    }
    MPI_TRY(MPI_Alltoall(b->send_counts, 1, MPI_INT, b->recv_counts, 1, MPI_INT,
                         MPI_COMM_WORLD));
    for (int src = 0, off = 0; src < b->size; ++src) {
        b->recv_displs[src] = off;
        off += b->recv_counts[src];
    }
}

/* out[t] = sum_k w * y, fp32 in k order, from rows back in packed order. */
static void bench_intra_mpi_reduce(bench_intra_t *b)
{
    float *acc = calloc((size_t)b->tokens * (size_t)b->hidden, sizeof(float));

    if (acc == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int n = 0; n < b->tokens * b->topk; ++n) {
        int entry = b->order[n], t = entry / b->topk;
        const uint16_t *row = b->packed + (size_t)n * (size_t)b->hidden;
        float w = b->weights[entry];

        for (int h = 0; h < b->hidden; ++h) {
            uint32_t bits = (uint32_t)row[h] << 16;
            float v;
            memcpy(&v, &bits, sizeof(v));
            acc[(size_t)t * (size_t)b->hidden + (size_t)h] += w * v;
        }
    }
    for (size_t i = 0; i < (size_t)b->tokens * (size_t)b->hidden; ++i) {
        uint32_t bits;
        memcpy(&bits, &acc[i], sizeof(bits));
        b->out[i] = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
    free(acc);
}

void bench_intra_mpi_step(bench_intra_t *b, bench_intra_samples_t *samples)
{
    uint64_t t0, t1, t2;

    MPI_TRY(MPI_Barrier(MPI_COMM_WORLD));
    t0 = util_clock_now_ns();
    for (int n = 0; n < b->tokens * b->topk; ++n) { /* pack by destination */
        memcpy(b->packed + (size_t)n * (size_t)b->hidden,
               b->x + (size_t)(b->order[n] / b->topk) * (size_t)b->hidden, b->row_bytes);
    }
    MPI_TRY(MPI_Alltoallv(b->packed, b->send_counts, b->send_displs, MPI_UINT16_T,
                          b->received, b->recv_counts, b->recv_displs, MPI_UINT16_T,
                          MPI_COMM_WORLD));
    t1 = util_clock_now_ns();
    MPI_TRY(MPI_Alltoallv(b->received, b->recv_counts, b->recv_displs, MPI_UINT16_T,
                          b->packed, b->send_counts, b->send_displs, MPI_UINT16_T,
                          MPI_COMM_WORLD));
    bench_intra_mpi_reduce(b);
    t2 = util_clock_now_ns();
    if (samples != NULL) {
        bench_intra_record(samples, t0, t1, t2);
    }
}

void bench_intra_run_mpi(bench_intra_t *b, bench_intra_result_t *r)
{
    static bench_intra_samples_t samples;

    for (int i = -2; i < b->iters; ++i) {
        bench_intra_mpi_step(b, i >= 0 ? &samples : NULL);
    }
    bench_intra_finish(b, &samples, r);
}

void bench_intra_alloc(bench_intra_t *b, int max_tokens)
{
    size_t rows = (size_t)max_tokens * (size_t)b->topk;

    b->x           = util_alloc_aligned(256, (size_t)max_tokens * b->row_bytes);
    b->out         = util_alloc_aligned(256, (size_t)max_tokens * b->row_bytes);
    b->idx         = calloc(rows, sizeof(int64_t));
    b->weights     = calloc(rows, sizeof(float));
    b->packed      = malloc(rows * b->row_bytes);
    b->received    = malloc(rows * b->row_bytes * (size_t)b->size);
    b->order       = calloc(rows, sizeof(int));
    b->send_counts = calloc((size_t)b->size * 4, sizeof(int));
    if (!b->x || !b->out || !b->idx || !b->weights || !b->packed || !b->received ||
        !b->order || !b->send_counts) {
        fprintf(stderr, "strata-bench intra: out of memory for %d tokens\n", max_tokens);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    BENCH_TRY(b->device->mem_alloc((size_t)max_tokens * b->row_bytes, &b->d_x));
    BENCH_TRY(b->device->mem_alloc((size_t)max_tokens * b->row_bytes, &b->d_out));
    BENCH_TRY(b->device->mem_alloc(rows * sizeof(int64_t), &b->d_idx));
    BENCH_TRY(b->device->mem_alloc(rows * sizeof(float), &b->d_weights));
    b->send_displs = b->send_counts + b->size;
    b->recv_counts = b->send_counts + 2 * b->size;
    b->recv_displs = b->send_counts + 3 * b->size;
}

void bench_intra_print_header(void)
{
    printf("%6s %-16s | %9s %9s | %9s %9s | %9s %9s | %7s | %6s\n", "tokens", "path", "disp p50",
           "disp p99", "comb p50", "comb p99", "step p50", "step p99", "GB/s", "ratio");
}

int bench_intra_max_size(const int *sizes, int num_sizes)
{
    int max = 0;

    for (int i = 0; i < num_sizes; ++i) {
        max = UTIL_MAX(max, sizes[i]);
    }
    return max;
}

void bench_intra_print_row(const char *what, int tokens, const bench_intra_result_t *r,
                           const bench_intra_result_t *base)
{
    printf("%6d %-16s | %9.1f %9.1f | %9.1f %9.1f | %9.1f %9.1f | %7.2f | %6.2f\n", tokens, what,
           r->dispatch.p50 / 1e3, r->dispatch.p99 / 1e3, r->combine.p50 / 1e3,
           r->combine.p99 / 1e3, r->step.p50 / 1e3, r->step.p99 / 1e3, r->gbps,
           base != NULL ? r->gbps / base->gbps : 1.0);
}

/* One token count: strata Push and Pull, memcpy, MPI_Alltoallv. */
static void bench_intra_measure(bench_intra_t *b, intra_moe_t *moe, tool_progress_t *progress)
{
    bench_intra_result_t push, pull, copy, mpi;

    bench_intra_route(b);
    BENCH_TRY(b->device->mem_copy(b->d_x, b->x, (size_t)b->tokens * b->row_bytes));
    BENCH_TRY(b->device->mem_copy(b->d_idx, b->idx,
                                  (size_t)b->tokens * (size_t)b->topk * sizeof(int64_t)));
    BENCH_TRY(b->device->mem_copy(b->d_weights, b->weights,
                                  (size_t)b->tokens * (size_t)b->topk * sizeof(float)));
    bench_intra_mpi_layout(b);
    memset(b->pull_mask, 0, sizeof(b->pull_mask));
    bench_intra_run_strata(b, moe, &push);
    memset(b->pull_mask, 0xff, sizeof(b->pull_mask));
    bench_intra_run_strata(b, moe, &pull);
    bench_intra_run_memcpy(b, &copy);
    bench_intra_run_mpi(b, &mpi);
    if (b->rank == 0) {
        tool_progress_end(progress); /* the rows start on a clean line */
        bench_intra_print_row("memcpy", b->tokens, &copy, NULL);
        bench_intra_print_row("MPI_Alltoallv", b->tokens, &mpi, &copy);
        bench_intra_print_row("strata push", b->tokens, &push, &copy);
        bench_intra_print_row("strata pull", b->tokens, &pull, &copy);
        printf("%6d strata/alltoallv | push %.2fx   pull %.2fx (step p50 speed-up)\n", b->tokens,
               (double)mpi.step.p50 / (double)push.step.p50,
               (double)mpi.step.p50 / (double)pull.step.p50);
    }
    if (b->device->memory != INTRA_MEMORY_HOST) {
        bench_intra_result_t device;

        bench_intra_run_device_copy(b, &device);
        if (b->rank == 0) {
            bench_intra_print_row("device copy", b->tokens, &device, &copy);
            printf("%6d strata/device copy | push %.2fx   pull %.2fx (GB/s at step p50)\n",
                   b->tokens, push.gbps / device.gbps, pull.gbps / device.gbps);
        }
    }
    if (b->rank == 0) {
        fflush(stdout);
    }
}

bool bench_intra_parse_sizes(const char *tool, const char *text, int *sizes, int *num_p)
{
    char *copy = strdup(text), *save = NULL;
    bool ok = copy != NULL;
    int n = 0;

    if (copy == NULL) {
        fprintf(stderr, "%s: out of memory\n", tool);
    }
    for (char *tok = ok ? strtok_r(copy, ",", &save) : NULL; ok && tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == INTRA_MAX_SIZES) {
            tool_usage_error(tool, "--tokens %s: at most %d token counts", text,
                             INTRA_MAX_SIZES);
            ok = false;
        } else {
            ok = tool_parse_int(tool, "--tokens", tok, 1, INTRA_MAX_TOKENS, &sizes[n++]);
        }
    }
    if (ok && n == 0) {
        tool_usage_error(tool, "--tokens: '%s' holds no token count", text);
        ok = false;
    }
    free(copy);
    if (ok) {
        *num_p = n;
    }
    return ok;
}

bool bench_intra_option(const char *tool, bench_intra_t *b, bench_intra_opts_t *o, int opt,
                        const char *arg)
{
    switch (opt) {
    case 't': return bench_intra_parse_sizes(tool, arg, o->sizes, &o->num_sizes);
    case 'H': return tool_parse_int(tool, "--hidden", arg, 1, INTRA_MAX_HIDDEN, &b->hidden);
    case 'k': return tool_parse_int(tool, "--topk", arg, 1, INTRA_MAX_TOPK, &b->topk);
    case 'e': return tool_parse_int(tool, "--experts", arg, 1, INTRA_MAX_EXPERTS, &b->experts);
    case 'i': return tool_parse_int(tool, "--iters", arg, 1, INTRA_MAX_ITERS, &o->iters);
    case INTRA_OPT_PROGRESS: b->progress = true; return true;
    default:  return false; /* the callers pass only these */
    }
}

void bench_barrier(const bench_intra_t *b)
{
    if (b->launcher != NULL) {
        BENCH_TRY(b->launcher->barrier(b->launcher->ctx));
    } else {
        MPI_TRY(MPI_Barrier(MPI_COMM_WORLD));
    }
}

void bench_allgather_u64(const bench_intra_t *b, uint64_t value, uint64_t *all)
{
    if (b->launcher != NULL) {
        BENCH_TRY(b->launcher->allgather(b->launcher->ctx, &value, all, sizeof(value)));
    } else {
        MPI_TRY(MPI_Allgather(&value, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD));
    }
}

double bench_max(const bench_intra_t *b, double value)
{
    uint64_t bits, *all = calloc((size_t)b->size, sizeof(*all));
    double most = value;

    if (all == NULL) {
        fprintf(stderr, "strata-bench: out of memory\n");
        exit(1);
    }
    memcpy(&bits, &value, sizeof(bits));
    bench_allgather_u64(b, bits, all);
    for (int r = 0; r < b->size; ++r) {
        double v;

        memcpy(&v, &all[r], sizeof(v));
        most = v > most ? v : most;
    }
    free(all);
    return most;
}

bool bench_join_launcher(bench_intra_t *b, const char *tool)
{
    const char *world = getenv("WORLD_SIZE");
    strata_status_t status;

    if (b->size > 1 || world == NULL || atoi(world) <= 1) {
        return false; /* mpirun's job, or one rank */
    }
    status = strata_bootstrap_from_env(&b->launcher);
    if (status != STRATA_OK) {
        fprintf(stderr, "%s: MPI started this process as a job of 1 rank while WORLD_SIZE is "
                "%s, and strata's bootstrap cannot join the others (%s): launch with mpirun "
                "-n %s, or strata-run -n %s\n", tool, world, strata_status_string(status),
                world, world);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    b->rank = b->launcher->rank;
    b->size = b->launcher->world_size;
    util_log_set_rank(b->rank);
    return true;
}

void bench_intra_start(bench_intra_t *b, int *argc, char ***argv)
{
    MPI_TRY(MPI_Init(argc, argv));
    MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &b->rank));
    MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &b->size));
    util_log_set_rank(b->rank);
    if (b->experts == 0) {
        b->experts = 8 * b->size;
    }
}

static void bench_intra_usage(FILE *out)
{
    fprintf(out,
            "Usage: mpirun -n N strata-bench intra [--tokens N[,N...]] [--hidden H] [--topk K]\n"
            "              [--experts E] [--iters N] [--device NAME] [--progress]\n"
            "MoE dispatch+combine in one node (bf16, uniform routing) against memcpy of the\n"
            "same payload and MPI_Alltoallv moving the same tokens. Rank 0 prints a row per\n"
            "path and token count.\n"
            "\n"
            "  --tokens N[,N...]  tokens per rank, up to %d counts (default 128,4096)\n"
            "  --hidden H         elements of a row (default 7168)\n"
            "  --topk K           experts per token (default 8)\n"
            "  --experts E        experts, a multiple of the ranks (default 8 per rank)\n"
            "  --iters N          steps per token count (default 200, 10 from 1024 tokens)\n"
            "  --device NAME      device backend (default host)\n"
            "  --progress         rank 0's progress line on stderr even where it is no\n"
            "                     terminal, as under mpirun, which gives ranks pipes\n"
            "  -h, --help         this text\n",
            INTRA_MAX_SIZES);
}

/* A fresh heap and object per token count, sized for it. */
static void bench_intra_tokens(bench_intra_t *b, const char *key, tool_progress_t *progress)
{
    int avg = b->tokens * b->size * b->topk / b->experts;
    intra_moe_params_t p = {.num_experts = b->experts, .topk = b->topk, .hidden = b->hidden,
                            .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                            .max_tokens = b->tokens,
                            .capacity = UTIL_MIN(2 * avg + 64, b->tokens * b->size)};
    intra_heap_params_t hp = {.device = b->device, .local_rank = b->rank, .local_size = b->size,
                              .size = intra_moe_heap_size(&p, b->size), .job_key = key,
                              .timeout_ns = 60 * UTIL_NSEC_PER_SEC};
    intra_heap_t *heap;
    intra_moe_t *moe;

    if (hp.size == 0) {
        fprintf(stderr, "strata-bench intra: invalid shape (see the error above)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    BENCH_TRY(intra_heap_create(&hp, &heap));
    BENCH_TRY(intra_moe_create(&p, heap, &moe));
    bench_intra_measure(b, moe, progress);
    MPI_TRY(MPI_Barrier(MPI_COMM_WORLD)); /* nobody unmaps while a peer still reads */
    intra_moe_destroy(moe);
    intra_heap_destroy(heap);
}

int bench_intra_main(int argc, char **argv)
{
    static const struct option options[] = {
        INTRA_BENCH_OPTIONS, {"device", required_argument, NULL, 'd'}, {NULL, 0, NULL, 0},
    };
    bench_intra_t b = {.hidden = 7168, .topk = 8};
    bench_intra_opts_t o = {.sizes = {128, 4096}, .num_sizes = 2};
    const char *device = "host";
    tool_progress_t progress;
    char key[64];
    long job;
    int opt;

    optind = 2;
    while ((opt = getopt_long(argc, argv, ":" INTRA_BENCH_SHORT "d:", options, NULL)) != -1) {
        if (opt == 'h') {
            bench_intra_usage(stdout);
            return 0;
        }
        if (opt == '?' || opt == ':') {
            return tool_option_error(INTRA_TOOL, argv, options, opt);
        }
        if (opt == 'd') {
            device = optarg;
        } else if (!bench_intra_option(INTRA_TOOL, &b, &o, opt, optarg)) {
            return TOOL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        return tool_usage_error(INTRA_TOOL, "unexpected argument '%s'", argv[optind]);
    }
    if (intra_device_find(device) == NULL) {
        return tool_usage_error(INTRA_TOOL, "--device %s: no such device backend", device);
    }
    bench_intra_start(&b, &argc, &argv);
    b.device = intra_device_find(device);
    if (b.experts % b.size != 0) {
        fprintf(stderr, "strata-bench intra: --experts %d is not a multiple of the %d ranks\n",
                b.experts, b.size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    b.row_bytes = (size_t)b.hidden * sizeof(uint16_t);
    bench_intra_alloc(&b, bench_intra_max_size(o.sizes, o.num_sizes));
    job = (long)getpid();
    MPI_TRY(MPI_Bcast(&job, 1, MPI_LONG, 0, MPI_COMM_WORLD));
    if (b.rank == 0) {
        printf("# strata-bench intra: %d ranks in one node, %s backend, hidden %d, top-%d of %d "
               "experts, bf16\n# payload per rank and step: dispatched rows + combined rows; "
               "times in us (rank 0), GB/s = payload / step p50\n"
               "# ratio: GB/s against memcpy of the same bytes in the same processes\n",
               b.size, device, b.hidden, b.topk, b.experts);
        bench_intra_print_header();
    }
    tool_progress_start(&progress, b.rank == 0, b.progress);
    for (int i = 0; i < o.num_sizes; ++i) {
        tool_progress_update(&progress, "intra %d/%d token counts", i, o.num_sizes);
        b.tokens = o.sizes[i];
        b.iters  = o.iters > 0 ? o.iters : o.sizes[i] >= 1024 ? 10 : 200;
        snprintf(key, sizeof(key), "bench-intra-%ld-%d", job, i);
        bench_intra_tokens(&b, key, &progress);
    }
    tool_progress_end(&progress);
    MPI_TRY(MPI_Finalize());
    return 0;
}
