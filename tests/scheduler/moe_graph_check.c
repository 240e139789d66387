/*
 * The device-initiated step across nodes on CUDA (run under strata-run, several simulated
 * nodes sharing one GPU): steps called synchronously, then on a stream without waiting,
 * then on a stream that changes every step (as a framework passes its current one), then
 * beside a kernel that holds most of the GPU until the host lets it end, then one step
 * captured in a CUDA graph and replayed; and an adaptive object, whose dispatch under
 * capture must be refused with the object left usable. The experts are the identity (each
 * expert's output is its input row, copied on the stream), so every token's result is
 * sum_k w[t][k] * x[t], in fp32 in k order, rounded once: checked bit for bit on every rank
 * after every step and replay. --probe exits 0 when a CUDA device is present, 3 when not.
 */
#include <strata/strata.h>

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIDDEN   512
#define TOPK     4
#define TOKENS   64
#define PER_RANK 4
#define STEPS    3
#define REPLAYS  5

static int g_rank;

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "moe_graph_check r%d: ", g_rank); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

#define CUDA_OK(expr) \
    do { \
        cudaError_t err_ = (expr); \
        CHECK(err_ == cudaSuccess, "%s: %s", #expr, cudaGetErrorString(err_)); \
    } while (0)

typedef struct bench {
    strata_moe_t        *moe;
    strata_moe_layout_t *layout;
    uint16_t            *x, *ref, *out;   /* host */
    void                *d_x, *d_out, *d_w;
    int64_t              idx[TOKENS * TOPK];
    float                w[TOKENS * TOPK];
    cudaStream_t         stream, other;
    cudaStream_t         cur;       /* where this step's work goes: stream or other */
    bool                 on_stream; /* the object launches on cur (set_stream) */
} bench_t;

/* moe_graph_busy.cu: a kernel spinning on mapped host memory, leaving spare processors. */
cudaError_t moe_graph_busy_start(cudaStream_t stream, const int *flag, int spare, int *blocks_p);

static float bf16_to_f32(uint16_t v)
{
    uint32_t bits = (uint32_t)v << 16;
    float f;

    memcpy(&f, &bits, sizeof(f));
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Seeded routing (distinct experts, some slots none), rows and weights; the reference. */
static void make_inputs(bench_t *b, int experts)
{
    unsigned seed = 1000u + (unsigned)g_rank;

    for (int t = 0; t < TOKENS; ++t) {
        for (int k = 0; k < TOPK; ++k) {
            int64_t e;
            int again;

            do {
                e = rand_r(&seed) % 5 == 0 ? -1 : rand_r(&seed) % experts;
                again = 0;
                for (int j = 0; j < k; ++j) {
                    again |= e >= 0 && b->idx[t * TOPK + j] == e;
                }
            } while (again);
            b->idx[t * TOPK + k] = e;
            b->w[t * TOPK + k]   = (float)(1 + rand_r(&seed) % 7) / 8.0f;
        }
        for (int h = 0; h < HIDDEN; ++h) {
            b->x[t * HIDDEN + h] = f32_to_bf16((float)((t * 31 + h * 7 + g_rank) % 97) / 16.0f);
        }
    }
    for (int t = 0; t < TOKENS; ++t) {
        for (int h = 0; h < HIDDEN; ++h) {
            float acc = 0.0f;

            for (int k = 0; k < TOPK; ++k) {
                if (b->idx[t * TOPK + k] >= 0) {
                    acc = acc + b->w[t * TOPK + k] * bf16_to_f32(b->x[t * HIDDEN + h]);
                }
            }
            b->ref[t * HIDDEN + h] = f32_to_bf16(acc);
        }
    }
}

/* One step; the identity experts copy their inputs to their outputs on the stream. */
static void enqueue_step(bench_t *b)
{
    strata_moe_recv_t recv;
    size_t block;

    CHECK(strata_moe_dispatch_send(b->moe, b->layout, b->d_x, NULL) == STRATA_OK, "send");
    CHECK(strata_moe_dispatch_recv(b->moe, &recv) == STRATA_OK, "recv");
    block = (size_t)recv.num_local_experts * (size_t)recv.capacity * recv.row_bytes;
    CUDA_OK(cudaMemcpyAsync(recv.expert_y, recv.x, block, cudaMemcpyDeviceToDevice, b->cur));
    if (!b->on_stream) {
        /* The object's own stream is not ordered after ours (non-blocking): the outputs
         * must be there before a synchronous combine reads them. Without this, step 0 read
         * what expert_y held before (later steps hid it: the same data every step). */
        CUDA_OK(cudaStreamSynchronize(b->cur));
    }
    CHECK(strata_moe_combine_send(b->moe, NULL) == STRATA_OK, "combine_send");
    CHECK(strata_moe_combine_recv(b->moe, b->d_w, b->d_out) == STRATA_OK, "combine_recv");
}

static void check_out(bench_t *b, const char *what, int step)
{
    strata_status_t status;

    CUDA_OK(cudaStreamSynchronize(b->cur));
    status = strata_moe_synchronize(b->moe);
    CHECK(status == STRATA_OK, "%s %d: %s", what, step, strata_status_string(status));
    CUDA_OK(cudaMemcpy(b->out, b->d_out, sizeof(uint16_t) * TOKENS * HIDDEN,
                       cudaMemcpyDeviceToHost));
    for (int t = 0; t < TOKENS; ++t) {
        CHECK(memcmp(b->out + t * HIDDEN, b->ref + t * HIDDEN, sizeof(uint16_t) * HIDDEN) == 0,
              "%s %d: token %d's result differs", what, step, t);
    }
    CUDA_OK(cudaMemsetAsync(b->d_out, 0, sizeof(uint16_t) * TOKENS * HIDDEN, b->cur));
}

/* The object on stream s from now on; the step's own work goes there too. */
static void use_stream(bench_t *b, cudaStream_t s)
{
    CHECK(strata_moe_set_stream(b->moe, s) == STRATA_OK, "set_stream");
    b->cur       = s;
    b->on_stream = true;
}

/*
 * A step while a kernel on another stream holds all multiprocessors but a few, until the
 * host lets it end: the step's grids start only once all their blocks fit (cooperative
 * launches), and the result is exact.
 */
static void run_beside_busy(bench_t *b)
{
    int *flag_host = NULL, *flag_dev = NULL, blocks = 0;
    cudaStream_t busy;

    CUDA_OK(cudaHostAlloc((void **)&flag_host, sizeof(int), cudaHostAllocMapped));
    *(volatile int *)flag_host = 0;
    CUDA_OK(cudaHostGetDevicePointer((void **)&flag_dev, flag_host, 0));
    CUDA_OK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    CUDA_OK(moe_graph_busy_start(busy, flag_dev, 8, &blocks));
    use_stream(b, b->stream);
    enqueue_step(b);
    usleep(200 * 1000); /* the neighbour keeps its processors meanwhile */
    *(volatile int *)flag_host = 1;
    check_out(b, "step beside a busy kernel", blocks);
    CUDA_OK(cudaStreamSynchronize(busy));
    CUDA_OK(cudaStreamDestroy(busy));
    CUDA_OK(cudaFreeHost(flag_host));
}

static void run(bench_t *b)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;

    for (int s = 0; s < STEPS; ++s) { /* every half waits */
        enqueue_step(b);
        check_out(b, "synchronous step", s);
    }
    use_stream(b, b->stream);
    for (int s = 0; s < STEPS; ++s) { /* enqueued, waited for only here */
        enqueue_step(b);
        check_out(b, "stream step", s);
    }
    for (int s = 0; s < 2 * STEPS; ++s) { /* a new stream every step, waited for every other */
        use_stream(b, s % 2 == 0 ? b->stream : b->other);
        enqueue_step(b);
        if (s % 2 == 1) {
            CUDA_OK(cudaStreamSynchronize(b->stream));
            check_out(b, "stream-changing step", s);
        }
    }
    run_beside_busy(b);
    use_stream(b, b->stream);
    CUDA_OK(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    enqueue_step(b);
    CUDA_OK(cudaStreamEndCapture(b->stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < REPLAYS; ++r) {
        CUDA_OK(cudaGraphLaunch(exec, b->stream));
        check_out(b, "graph replay", r);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
}

/*
 * Adaptive mode decides each step on the host: its dispatch inside a capture is refused
 * before anything is enqueued, and the object then steps as before. Collective.
 */
static void run_adaptive_capture(const bench_t *b, strata_comm_t *comm, int experts)
{
    strata_moe_params_t p = {.num_experts = experts, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                             .max_tokens = TOKENS, .mode = STRATA_MOE_MODE_ADAPTIVE};
    bench_t a = *b;
    cudaGraph_t graph = NULL;
    strata_status_t status;

    CHECK(strata_moe_create(comm, &p, &a.moe) == STRATA_OK, "adaptive moe_create");
    CHECK(strata_moe_layout_create(a.moe, a.idx, TOKENS, &a.layout) == STRATA_OK, "layout");
    use_stream(&a, a.stream);
    CUDA_OK(cudaStreamBeginCapture(a.stream, cudaStreamCaptureModeThreadLocal));
    status = strata_moe_dispatch_send(a.moe, a.layout, a.d_x, NULL);
    CUDA_OK(cudaStreamEndCapture(a.stream, &graph));
    if (graph != NULL) {
        CUDA_OK(cudaGraphDestroy(graph));
    }
    CHECK(status == STRATA_ERR_UNSUPPORTED, "an adaptive dispatch under capture gave %s, not "
          "UNSUPPORTED", strata_status_string(status));
    for (int s = 0; s < STEPS; ++s) {
        enqueue_step(&a);
        check_out(&a, "adaptive step after a refused capture", s);
    }
    CHECK(strata_moe_set_stream(a.moe, NULL) == STRATA_OK, "set_stream NULL");
    strata_moe_layout_destroy(a.layout);
    strata_moe_destroy(a.moe);
}

int main(int argc, char **argv)
{
    strata_bootstrap_t *bs;
    strata_comm_t *comm;
    strata_moe_stats_t stats;
    bench_t b = {0};
    int count = 0;

    if (argc > 1 && strcmp(argv[1], "--probe") == 0) {
        return cudaGetDeviceCount(&count) == cudaSuccess && count > 0 ? 0 : 3;
    }
    CHECK(strata_bootstrap_from_env(&bs) == STRATA_OK, "bootstrap");
    CHECK(strata_comm_create(NULL, bs, &comm) == STRATA_OK, "comm_create");
    g_rank = strata_comm_rank(comm);
    CHECK(strcmp(strata_comm_device_backend(comm), "cuda") == 0,
          "the communicator chose the %s backend, not cuda", strata_comm_device_backend(comm));
    {
        int experts = PER_RANK * strata_comm_size(comm);
        strata_moe_params_t p = {.num_experts = experts, .topk = TOPK, .hidden = HIDDEN,
                                 .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                                 .max_tokens = TOKENS, .mode = STRATA_MOE_MODE_PUSH};

        b.x   = malloc(sizeof(uint16_t) * TOKENS * HIDDEN);
        b.ref = malloc(sizeof(uint16_t) * TOKENS * HIDDEN);
        b.out = malloc(sizeof(uint16_t) * TOKENS * HIDDEN);
        CHECK(b.x && b.ref && b.out, "memory");
        make_inputs(&b, experts);
        CHECK(strata_moe_create(comm, &p, &b.moe) == STRATA_OK, "moe_create");
        CHECK(strata_moe_layout_create(b.moe, b.idx, TOKENS, &b.layout) == STRATA_OK, "layout");
    }
    CUDA_OK(cudaMalloc(&b.d_x, sizeof(uint16_t) * TOKENS * HIDDEN));
    CUDA_OK(cudaMalloc(&b.d_out, sizeof(uint16_t) * TOKENS * HIDDEN));
    CUDA_OK(cudaMalloc(&b.d_w, sizeof(float) * TOKENS * TOPK));
    CUDA_OK(cudaMemcpy(b.d_x, b.x, sizeof(uint16_t) * TOKENS * HIDDEN, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b.d_w, b.w, sizeof(float) * TOKENS * TOPK, cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&b.other, cudaStreamNonBlocking));
    b.cur = b.stream;
    run(&b);
    run_adaptive_capture(&b, comm, PER_RANK * strata_comm_size(comm));
    CHECK(strata_moe_get_stats(b.moe, &stats) == STRATA_OK, "stats");
    printf("rank %d: %d synchronous, %d stream, %d stream-changing, 1 busy-neighbour and %d "
           "graph-replayed steps, and the adaptive capture refusal, passed across %d "
           "nodes (network area in %s)\n", g_rank, STEPS, STEPS, 2 * STEPS, REPLAYS,
           strata_comm_num_nodes(comm), stats.net_bounce ? "a host bounce buffer" : "the heap");
    CHECK(strata_moe_set_stream(b.moe, NULL) == STRATA_OK, "set_stream NULL");
    CHECK(bs->barrier(bs->ctx) == STRATA_OK, "barrier"); /* nobody unmaps what a peer reads */
    strata_moe_layout_destroy(b.layout);
    strata_moe_destroy(b.moe);
    cudaFree(b.d_x);
    cudaFree(b.d_out);
    cudaFree(b.d_w);
    cudaStreamDestroy(b.stream);
    cudaStreamDestroy(b.other);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    free(b.x);
    free(b.ref);
    free(b.out);
    return 0;
}
