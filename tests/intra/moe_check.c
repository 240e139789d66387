/*
 * Intra-node MoE checked against a sequential reference. Every rank regenerates every
 * rank's inputs from the seed, so each can compute what its experts must receive and what
 * its tokens' combined results must be, then compares with what the kernels produced:
 * counts exact, every row byte for byte with its source recorded, results bit for bit
 * (fp32 sums in k order, rounded once with this file's own conversions).
 */
#include "moe_check.h"
#include "common/moe_ref.h"
#include "intra/intra.h"
#include "util/util.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK_TIMEOUT_NS (20ull * UTIL_NSEC_PER_SEC)

typedef struct rank_ctx {
    const moe_case_t         *c;
    const intra_device_ops_t *dev;
    int                       rank;
    int                       step;
    int                       per_rank; /* experts per rank */
    size_t                    row_bytes, y_row_bytes, scales;
    /* host copies */
    unsigned char            *x, *y, *out, *recv_x, *recv_scales;
    float                    *x_scales, *weights, *recv_scales_f;
    int64_t                  *idx;
    intra_moe_source_t       *src;
    unsigned char            *seen;
    /* device buffers */
    void                     *d_x, *d_scales, *d_idx, *d_w, *d_out, *d_y;
} rank_ctx_t;

static int check_fail(const rank_ctx_t *r, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "moe_check: rank %d of %d, step %d, %s, seed %u: ", r->rank, r->c->ranks,
            r->step, r->c->device, r->c->seed);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static int rounds_of(const moe_case_t *c)
{
    return c->rounds > 0 ? c->rounds : 1;
}

/* The first of n tokens in dispatch round r (intra_moe_dispatch_rounds' slices). */
static int round_first(int n, int r, int rounds)
{
    return (int)((int64_t)n * r / rounds);
}

/* Rows of expert e before (rank, t, k) in round, then source-rank, then entry order; the
 * entry's place. */
static int64_t ref_position(const moe_case_t *c, int step, int64_t e, int rank, int t, int k)
{
    int rounds = rounds_of(c);
    int64_t before = 0;

    for (int r = 0; r < rounds; ++r) {
        for (int s = 0; s < c->ranks; ++s) {
            int n = gen_tokens(c, step, s), end = round_first(n, r + 1, rounds);
            for (int tt = round_first(n, r, rounds); tt < end; ++tt) {
                for (int kk = 0; kk < c->topk; ++kk) {
                    if (s == rank && tt == t && kk == k) {
                        return before;
                    }
                    before += ref_route(c, step, s, tt, kk) == e;
                }
            }
        }
    }
    return before; /* (rank, t, k) == end: the total */
}

static int64_t ref_requested(const moe_case_t *c, int step, int64_t e)
{
    return ref_position(c, step, e, c->ranks, 0, 0);
}

static int capacity_of(const moe_case_t *c)
{
    return c->capacity > 0 ? c->capacity : c->max_tokens * c->ranks;
}

/* ---- one rank ---- */

static int ctx_alloc(rank_ctx_t *r, const intra_moe_recv_t *shape)
{
    const moe_case_t *c = r->c;
    size_t T = (size_t)c->max_tokens, K = (size_t)c->topk;
    size_t rows = (size_t)r->per_rank * (size_t)shape->capacity;

    r->x             = calloc(T, r->row_bytes);
    r->x_scales      = calloc(T * r->scales + 1, sizeof(float));
    r->idx           = calloc(T * K, sizeof(int64_t));
    r->weights       = calloc(T * K, sizeof(float));
    r->out           = calloc(T, r->y_row_bytes);
    r->y             = calloc(rows, r->y_row_bytes);
    r->recv_x        = calloc(rows, r->row_bytes);
    r->recv_scales   = calloc(rows, shape->scale_stride + 16);
    r->src           = calloc(rows, sizeof(intra_moe_source_t));
    r->seen          = calloc((size_t)c->ranks * T * K, 1);
    if (!r->x || !r->x_scales || !r->idx || !r->weights || !r->out || !r->y || !r->recv_x ||
        !r->recv_scales || !r->src || !r->seen) {
        return check_fail(r, "out of host memory");
    }
    if (r->dev->mem_alloc(T * r->row_bytes, &r->d_x) != STRATA_OK ||
        r->dev->mem_alloc(T * r->scales * sizeof(float) + 16, &r->d_scales) != STRATA_OK ||
        r->dev->mem_alloc(T * K * sizeof(int64_t), &r->d_idx) != STRATA_OK ||
        r->dev->mem_alloc(T * K * sizeof(float), &r->d_w) != STRATA_OK ||
        r->dev->mem_alloc(T * r->y_row_bytes, &r->d_out) != STRATA_OK ||
        r->dev->mem_alloc(rows * r->y_row_bytes, &r->d_y) != STRATA_OK) {
        return check_fail(r, "out of device memory");
    }
    return 0;
}

static void ctx_free(rank_ctx_t *r)
{
    void *host[] = {r->x, r->x_scales, r->idx, r->weights, r->out, r->y, r->recv_x,
                    r->recv_scales, r->src, r->seen};
    void *dev[] = {r->d_x, r->d_scales, r->d_idx, r->d_w, r->d_out, r->d_y};

    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); ++i) {
        free(host[i]);
    }
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); ++i) {
        if (r->dev != NULL) {
            r->dev->mem_free(dev[i]);
        }
    }
}

/* This rank's inputs for the step, copied to the device. */
static int put_inputs(rank_ctx_t *r, int n)
{
    const moe_case_t *c = r->c;
    const intra_device_ops_t *d = r->dev;

    for (int t = 0; t < n; ++t) {
        for (size_t i = 0; i < r->row_bytes; ++i) {
            r->x[(size_t)t * r->row_bytes + i] = gen_x_byte(c, r->step, r->rank, t, i);
        }
        for (size_t i = 0; i < r->scales; ++i) {
            r->x_scales[(size_t)t * r->scales + i] = gen_scale(c, r->step, r->rank, t, (int)i);
        }
        for (int k = 0; k < c->topk; ++k) {
            r->idx[t * c->topk + k]     = gen_route(c, r->step, r->rank, t, k);
            r->weights[t * c->topk + k] = gen_weight(c, r->step, r->rank, t, k);
        }
    }
    if (d->mem_copy(r->d_x, r->x, (size_t)n * r->row_bytes) != STRATA_OK ||
        d->mem_copy(r->d_scales, r->x_scales, (size_t)n * r->scales * sizeof(float)) !=
            STRATA_OK ||
        d->mem_copy(r->d_idx, r->idx, (size_t)n * (size_t)c->topk * sizeof(int64_t)) !=
            STRATA_OK ||
        d->mem_copy(r->d_w, r->weights, (size_t)n * (size_t)c->topk * sizeof(float)) !=
            STRATA_OK) {
        return check_fail(r, "copying inputs to the device failed");
    }
    return 0;
}

/* One received row: its source is a real entry for this expert, seen once, bytes equal. */
static int check_row(rank_ctx_t *r, int64_t e, size_t slot, const intra_moe_recv_t *recv,
                     const uint64_t *mask)
{
    const moe_case_t *c = r->c;
    intra_moe_source_t s = r->src[slot];
    const unsigned char *row = r->recv_x + slot * r->row_bytes;
    const float *scales = (const float *)(r->recv_scales + slot * recv->scale_stride);
    size_t key;

    if (s.rank < 0 || s.rank >= c->ranks || s.token < 0 ||
        s.token >= gen_tokens(c, r->step, s.rank) || s.slot < 0 || s.slot >= c->topk ||
        ref_route(c, r->step, s.rank, s.token, s.slot) != e) {
        return check_fail(r, "expert %" PRId64 " row %zu claims source (%d, %d, %d), which "
                          "did not choose it", e, slot % (size_t)recv->capacity, s.rank,
                          s.token, s.slot);
    }
    key = ((size_t)s.rank * (size_t)c->max_tokens + (size_t)s.token) * (size_t)c->topk +
          (size_t)s.slot;
    if (r->seen[key]++) {
        return check_fail(r, "expert %" PRId64 " received (%d, %d, %d) twice", e, s.rank,
                          s.token, s.slot);
    }
    if (is_pull(mask, e) && ref_position(c, r->step, e, s.rank, s.token, s.slot) >=
                                capacity_of(c)) {
        return check_fail(r, "pull expert %" PRId64 " kept (%d, %d, %d), past its capacity",
                          e, s.rank, s.token, s.slot);
    }
    for (size_t i = 0; i < r->row_bytes; ++i) {
        if (row[i] != gen_x_byte(c, r->step, s.rank, s.token, i)) {
            return check_fail(r, "expert %" PRId64 " row from (%d, %d): byte %zu differs", e,
                              s.rank, s.token, i);
        }
    }
    for (size_t i = 0; i < r->scales; ++i) {
        if (bits_of(scales[i]) != bits_of(gen_scale(c, r->step, s.rank, s.token, (int)i))) {
            return check_fail(r, "expert %" PRId64 " row from (%d, %d): scale %zu differs", e,
                              s.rank, s.token, i);
        }
    }
    return 0;
}

static strata_status_t expected_dispatch_status(rank_ctx_t *r, const uint64_t *mask,
                                                bool *either_p)
{
    const moe_case_t *c = r->c;
    bool overflow = false, pushed_overflow = false;

    *either_p = false;
    if (c->scenario == MOE_SCENARIO_BAD_ID && r->rank == 0 && r->step % 2 == 1 &&
        gen_tokens(c, r->step, 0) > 0) {
        return STRATA_ERR_INVALID;
    }
    for (int64_t e = 0; e < c->experts; ++e) {
        bool over = ref_requested(c, r->step, e) > capacity_of(c);
        overflow |= over && e / r->per_rank == r->rank;
        pushed_overflow |= over && !is_pull(mask, e);
    }
    *either_p = !overflow && pushed_overflow; /* a sender whose claim came late sees it too */
    return overflow ? STRATA_ERR_CAPACITY : STRATA_OK;
}

static int check_dispatch(rank_ctx_t *r, strata_status_t st, const intra_moe_recv_t *recv,
                          const uint64_t *mask)
{
    const moe_case_t *c = r->c;
    size_t rows = (size_t)r->per_rank * (size_t)recv->capacity;
    const intra_device_ops_t *d = r->dev;
    bool either;
    strata_status_t want = expected_dispatch_status(r, mask, &either);

    if (st != want && !(either && st == STRATA_ERR_CAPACITY)) {
        return check_fail(r, "dispatch returned %s, expected %s", strata_status_string(st),
                          strata_status_string(want));
    }
    if (d->mem_copy(r->recv_x, recv->x, rows * r->row_bytes) != STRATA_OK ||
        d->mem_copy(r->src, recv->src, rows * sizeof(intra_moe_source_t)) != STRATA_OK ||
        (recv->scales != NULL &&
         d->mem_copy(r->recv_scales, recv->scales, rows * recv->scale_stride) != STRATA_OK)) {
        return check_fail(r, "copying received rows to the host failed");
    }
    memset(r->seen, 0, (size_t)c->ranks * (size_t)c->max_tokens * (size_t)c->topk);
    for (int le = 0; le < r->per_rank; ++le) {
        int64_t e = (int64_t)r->rank * r->per_rank + le, requested = ref_requested(c, r->step, e);
        int64_t want_count = requested < recv->capacity ? requested : recv->capacity;

        if (recv->count[le] != want_count) {
            return check_fail(r, "expert %" PRId64 " received %d rows, expected %" PRId64, e,
                              recv->count[le], want_count);
        }
        for (int i = 0; i < recv->count[le]; ++i) {
            if (check_row(r, e, (size_t)le * (size_t)recv->capacity + (size_t)i, recv, mask)) {
                return 1;
            }
        }
    }
    return 0;
}

/* The experts' outputs: a function of expert, source token and column, in the combine type. */
static int put_expert_y(rank_ctx_t *r, const intra_moe_recv_t *recv, void **y_p)
{
    const moe_case_t *c = r->c;
    size_t rows = (size_t)r->per_rank * (size_t)recv->capacity;

    for (int le = 0; le < r->per_rank; ++le) {
        for (int i = 0; i < recv->count[le]; ++i) {
            size_t slot = (size_t)le * (size_t)recv->capacity + (size_t)i;
            intra_moe_source_t s = r->src[slot];
            for (int h = 0; h < c->hidden; ++h) {
                ref_store(r->y + slot * r->y_row_bytes, h, c->combine_dtype,
                          gen_y(c, r->step, r->rank * r->per_rank + le, s.rank, s.token, h));
            }
        }
    }
    /* Odd steps write into the heap's buffer (no copy), even ones pass a buffer of ours. */
    *y_p = r->step % 2 ? recv->expert_y : r->d_y;
    if (r->dev->mem_copy(*y_p, r->y, rows * r->y_row_bytes) != STRATA_OK) {
        return check_fail(r, "copying expert outputs to the device failed");
    }
    return 0;
}

/* Whether (t, k) of this rank reached its expert: 1 yes, 0 no, -1 cannot say (push race). */
static int ref_delivered(rank_ctx_t *r, int t, int k, int64_t e, const uint64_t *dmask)
{
    const moe_case_t *c = r->c;

    if (ref_requested(c, r->step, e) <= capacity_of(c)) {
        return 1;
    }
    if (!is_pull(dmask, e)) {
        return -1;
    }
    return ref_position(c, r->step, e, r->rank, t, k) < capacity_of(c);
}

static int check_combine(rank_ctx_t *r, strata_status_t st, int n, const uint64_t *dmask)
{
    const moe_case_t *c = r->c;
    unsigned char *want = calloc(1, r->y_row_bytes);
    bool dropped = false, unsure = false;
    int failed = 0;

    if (want == NULL || r->dev->mem_copy(r->out, r->d_out, (size_t)n * r->y_row_bytes)) {
        free(want);
        return check_fail(r, "copying results to the host failed");
    }
    for (int t = 0; t < n && !failed; ++t) {
        int delivered[64];
        bool skip = false;

        for (int k = 0; k < c->topk; ++k) {
            int64_t e = ref_route(c, r->step, r->rank, t, k);
            delivered[k] = e < 0 ? 0 : ref_delivered(r, t, k, e, dmask);
            dropped |= e >= 0 && delivered[k] == 0;
            skip |= delivered[k] < 0;
        }
        unsure |= skip;
        for (int h = 0; h < c->hidden && !skip; ++h) {
            float sum = 0.0f;
            for (int k = 0; k < c->topk; ++k) {
                unsigned char y[4];
                int64_t e = ref_route(c, r->step, r->rank, t, k);
                if (delivered[k] == 1) {
                    ref_store(y, 0, c->combine_dtype, gen_y(c, r->step, (int)e, r->rank, t, h));
                    sum = sum + gen_weight(c, r->step, r->rank, t, k) *
                                    ref_load(y, 0, c->combine_dtype);
                }
            }
            ref_store(want, h, c->combine_dtype, sum);
        }
        if (!skip && memcmp(want, r->out + (size_t)t * r->y_row_bytes, r->y_row_bytes) != 0) {
            failed = check_fail(r, "combined result of token %d differs from the reference", t);
        }
    }
    free(want);
    if (!failed && st != (dropped ? STRATA_ERR_CAPACITY : STRATA_OK) &&
        !(unsure && (st == STRATA_OK || st == STRATA_ERR_CAPACITY))) {
        failed = check_fail(r, "combine returned %s, expected %s", strata_status_string(st),
                            dropped ? "CAPACITY" : "OK");
    }
    return failed;
}

/* After the dispatch (all its rounds): every local expert marked complete with its rows,
 * and the counts every rank sent it, capacity aside, published for the host. */
static int check_marks(rank_ctx_t *r, intra_moe_t *moe, const intra_moe_recv_t *recv)
{
    int32_t counts[INTRA_MOE_MAX_EXPERTS];
    bool ready = false;

    if (intra_moe_counts_ready(moe, &ready, counts) != STRATA_OK || !ready) {
        return check_fail(r, "the step's counts are not published after its dispatch");
    }
    for (int le = 0; le < r->per_rank; ++le) {
        int64_t e = (int64_t)r->rank * r->per_rank + le;
        int32_t rows = -1;

        if (intra_moe_expert_ready(moe, le, &ready, &rows) != STRATA_OK || !ready ||
            rows != recv->count[le]) {
            return check_fail(r, "expert %" PRId64 " is %s with %d rows after its dispatch of "
                              "%d", e, ready ? "marked" : "not marked", rows, recv->count[le]);
        }
        if (counts[le] != ref_requested(r->c, r->step, e)) {
            return check_fail(r, "expert %" PRId64 " was sent %d rows, the counts say, not %"
                              PRId64, e, counts[le], ref_requested(r->c, r->step, e));
        }
    }
    return 0;
}

static int rank_step(rank_ctx_t *r, intra_moe_t *moe)
{
    uint64_t dmask[INTRA_MOE_MASK_WORDS], cmask[INTRA_MOE_MASK_WORDS];
    int n = gen_tokens(r->c, r->step, r->rank);
    intra_moe_recv_t recv;
    strata_status_t st;
    void *y;

    gen_mask(r->c, r->step, 0, dmask);
    gen_mask(r->c, r->step, 1, cmask);
    if (put_inputs(r, n)) {
        return 1;
    }
    st = intra_moe_dispatch_rounds(moe, r->d_x, r->scales ? r->d_scales : NULL, r->d_idx, n,
                                   rounds_of(r->c), dmask, &recv);
    if (check_dispatch(r, st, &recv, dmask) || check_marks(r, moe, &recv) ||
        put_expert_y(r, &recv, &y)) {
        return 1;
    }
    /* Results for this rank's tokens are checked under the mask their rows went out with. */
    st = intra_moe_combine(moe, y, r->d_w, cmask, r->d_out);
    return check_combine(r, st, n, dmask);
}

/* Tell the parent this rank's verdict and wait for its go-ahead, which comes once every rank
 * has reported: no peer reads this rank's region after it is freed. */
static int rank_report(int failed, int done_fd, int go_fd)
{
    char byte = failed ? 'F' : 'K';

    if (write(done_fd, &byte, 1) != 1 || read(go_fd, &byte, 1) != 1) {
        return 2;
    }
    return failed;
}

static int rank_main(const moe_case_t *c, int rank, const char *key, int done_fd, int go_fd)
{
    intra_moe_params_t p = {.num_experts = c->experts, .topk = c->topk, .hidden = c->hidden,
                            .dtype = c->dtype, .combine_dtype = c->combine_dtype,
                            .max_tokens = c->max_tokens, .capacity = c->capacity,
                            .num_blocks = c->blocks,
                            /* the rows published for Pull hold the largest round alone */
                            .round_tokens = (c->max_tokens + rounds_of(c) - 1) / rounds_of(c)};
    rank_ctx_t r = {.c = c, .rank = rank, .per_rank = c->experts / c->ranks,
                    .dev = intra_device_find(c->device)};
    intra_heap_params_t hp = {.device = r.dev, .local_rank = rank, .local_size = c->ranks,
                              .size = intra_moe_heap_size(&p, c->ranks), .job_key = key,
                              .timeout_ns = CHECK_TIMEOUT_NS};
    intra_moe_recv_t shape = {.capacity = capacity_of(c)};
    intra_heap_t *heap = NULL;
    intra_moe_t *moe = NULL;
    int failed;

    r.row_bytes   = (size_t)c->hidden * elem_size(c->dtype);
    r.y_row_bytes = (size_t)c->hidden * elem_size(c->combine_dtype);
    r.scales      = c->dtype == STRATA_DTYPE_FP8_E4M3 ? (size_t)c->hidden / 128 : 0;
    shape.scale_stride = (r.scales * sizeof(float) + 15) / 16 * 16;
    if (r.dev == NULL || hp.size == 0) {
        return rank_report(check_fail(&r, "no %s backend in this build, or invalid parameters",
                                      c->device), done_fd, go_fd);
    }
    if (intra_heap_create(&hp, &heap) != STRATA_OK ||
        intra_moe_create(&p, heap, &moe) != STRATA_OK) {
        failed = check_fail(&r, "creating the heap or the moe object failed");
    } else {
        failed = ctx_alloc(&r, &shape);
    }
    for (r.step = 1; !failed && r.step <= c->steps; ++r.step) {
        failed = rank_step(&r, moe);
    }
    /* Peers may still read this rank's region in their last combine: GPU backends must not
     * free it before every rank is done. */
    failed = rank_report(failed, done_fd, go_fd);
    intra_moe_destroy(moe);
    ctx_free(&r);
    intra_heap_destroy(heap);
    return failed;
}

/* ---- the processes ---- */

int moe_check_run(const moe_case_t *c)
{
    pid_t pids[INTRA_MOE_MAX_RANKS];
    int done[2], go[2], failed = 0, status;
    char key[64], byte;

    signal(SIGPIPE, SIG_IGN); /* a rank that died closed its end of the go-ahead pipe */
    snprintf(key, sizeof(key), "moe-check-%d-%u-%d", (int)getpid(), c->seed, c->ranks);
    if (c->ranks < 1 || c->ranks > INTRA_MOE_MAX_RANKS || pipe(done) != 0 || pipe(go) != 0) {
        return 1;
    }
    fflush(NULL);
    for (int r = 0; r < c->ranks; ++r) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(120); /* a hang ends the rank, and the test fails */
            close(done[0]);
            close(go[1]);
            _exit(rank_main(c, r, key, done[1], go[0]));
        }
    }
    close(done[1]);
    close(go[0]);
    for (int r = 0; r < c->ranks; ++r) {
        if (read(done[0], &byte, 1) != 1) {
            break; /* a rank died: its pipe end closed with it */
        }
    }
    for (int r = 0; r < c->ranks; ++r) {
        byte = 'G';
        (void)!write(go[1], &byte, 1);
    }
    close(go[1]);
    close(done[0]);
    for (int r = 0; r < c->ranks; ++r) {
        if (pids[r] < 0 || waitpid(pids[r], &status, 0) != pids[r] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "moe_check: rank %d of %d ended with status 0x%x\n", r, c->ranks,
                    pids[r] < 0 ? -1 : status);
            failed = 1;
        }
    }
    return failed;
}
