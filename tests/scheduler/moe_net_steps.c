/*
 * The steps of the two-tier MoE check (moe_net_check.c): a rank's buffers, one step in the
 * forms the options ask for (the layout form on odd steps, a bad input, an abort, a kill
 * mid-step), steps on two streams changing every step (--streams), and each expert waited
 * for alone, its rows copied the moment its wait returns (--expert-wait).
 */
#include "scheduler/moe_net_check.h"
#include "intra/intra.h"
#include "util/util.h"

#include <inttypes.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int            g_expert_wait; /* moe_net_check.h */
int            g_counts_first = -1;
const char    *g_counts_dir;
void          *g_wait_stream;
strata_comm_t *g_comm;

/* --expert-wait: each expert's rows as they were when its wait returned. */
typedef struct expert_copies {
    int32_t       *rows; /* [num_local_experts] */
    unsigned char *x;    /* [num_local_experts][capacity][row_bytes] */
} expert_copies_t;

/* --expert-wait: wait for each local expert in turn and copy its rows at once. */
static strata_status_t copy_experts(rank_state_t *r, const strata_moe_recv_t *recv,
                                    expert_copies_t *copies)
{
    size_t block = (size_t)recv->capacity * recv->row_bytes;

    copies->rows = calloc((size_t)recv->num_local_experts, sizeof(int32_t));
    copies->x    = malloc((size_t)recv->num_local_experts * block + 1);
    CHECK(copies->rows != NULL && copies->x != NULL, "memory");
    for (int e = 0; e < recv->num_local_experts; ++e) {
        strata_status_t status;

        if (g_expert_wait == 2) { /* the stream's wait done: the mark is there */
            status = strata_moe_expert_wait_stream(r->moe, e, g_wait_stream);
            if (status == STRATA_OK) {
                status = strata_comm_stream_synchronize(g_comm, g_wait_stream);
            }
            if (status == STRATA_OK) {
                status = strata_moe_expert_wait(r->moe, e, 0, &copies->rows[e]);
                CHECK(status != STRATA_ERR_TIMEOUT, "expert %d is not complete once the wait "
                      "on a stream is done", recv->first_expert + e);
            }
        } else {
            status = strata_moe_expert_wait(r->moe, e, -1, &copies->rows[e]);
        }
        if (status != STRATA_OK) {
            return status;
        }
        memcpy(copies->x + (size_t)e * block, (const char *)recv->x + (size_t)e * block,
               (size_t)copies->rows[e] * recv->row_bytes);
    }
    return STRATA_OK;
}

/* After the dispatch: the copies are the experts' rows, as many as they count. */
static void check_expert_copies(const strata_moe_recv_t *recv, expert_copies_t *copies)
{
    size_t block = (size_t)recv->capacity * recv->row_bytes;

    for (int e = 0; e < recv->num_local_experts; ++e) {
        CHECK(copies->rows[e] == recv->count[e], "expert %d: %d rows when its wait returned, "
              "%d after the dispatch", recv->first_expert + e, copies->rows[e], recv->count[e]);
        CHECK(memcmp(copies->x + (size_t)e * block, (const char *)recv->x + (size_t)e * block,
                     (size_t)copies->rows[e] * recv->row_bytes) == 0,
              "expert %d: its rows changed after its wait returned", recv->first_expert + e);
    }
    free(copies->rows);
    free(copies->x);
    copies->rows = NULL;
    copies->x    = NULL;
}


static void *exact_alloc(int64_t rows, size_t bytes)
{
    void *p = aligned_alloc(64, ((size_t)UTIL_MAX(rows, 1) * bytes + 63) / 64 * 64);

    CHECK(p != NULL, "memory");
    return p;
}

/* The counts; buffers of their size; the rows asked for (on a stream, still moving when
 * this returns), with the refusals around that call checked. */
static strata_status_t receive_exact(rank_state_t *r, strata_moe_recv_t *recv, exact_step_t *x)
{
    size_t scale_bytes = r->scales * sizeof(float);
    strata_status_t status;

    memset(x, 0, sizeof(*x));
    CHECK(recv->x == NULL && recv->src == NULL && recv->expert_y == NULL && recv->capacity == 0,
          "an exact object's recv must hold no blocks");
    status = strata_moe_dispatch_counts(r->moe, 0, x->counts);
    if (status != STRATA_OK) {
        return status;
    }
    for (int e = 0; e < recv->num_local_experts; ++e) {
        x->rows  += x->counts[e];
        x->widest = UTIL_MAX(x->widest, x->counts[e]);
    }
    x->x      = exact_alloc(x->rows, r->row_bytes);
    x->y      = exact_alloc(x->rows, r->y_row_bytes);
    x->scales = r->scales ? exact_alloc(x->rows, scale_bytes) : NULL;
    x->src    = exact_alloc(x->rows, sizeof(strata_moe_source_t));
    CHECK(strata_moe_dispatch_recv_into(r->moe, x->x, x->scales, x->src, x->rows - 1) ==
              STRATA_ERR_INVALID || x->rows == 0,
          "dispatch_recv_into of %" PRId64 " rows into one fewer must be refused", x->rows);
    status = strata_moe_dispatch_recv_into(r->moe, x->x, x->scales, x->src, x->rows);
    if (status != STRATA_OK) {
        return status;
    }
    CHECK(strata_moe_dispatch_recv_into(r->moe, x->x, x->scales, x->src, x->rows) ==
              STRATA_ERR_INVALID, "a second dispatch_recv_into in one step must be refused");
    CHECK(x->rows == 0 || strata_moe_combine_send(r->moe, NULL) == STRATA_ERR_INVALID,
          "combine_send without the outputs of %" PRId64 " rows must be refused", x->rows);
    return STRATA_OK;
}

/* Once the rows are in (on a stream: after it was waited for), recv becomes the view of
 * them in blocks. */
static void exact_blocks(const rank_state_t *r, strata_moe_recv_t *recv, exact_step_t *x)
{
    size_t scale_bytes = r->scales * sizeof(float), stride = (scale_bytes + 15) / 16 * 16;
    int64_t at = 0;

    x->block_x   = exact_alloc(x->widest * recv->num_local_experts, r->row_bytes);
    x->block_y   = exact_alloc(x->widest * recv->num_local_experts, r->y_row_bytes);
    x->block_src = exact_alloc(x->widest * recv->num_local_experts, sizeof(strata_moe_source_t));
    x->block_scales = r->scales ? exact_alloc(x->widest * recv->num_local_experts, stride) : NULL;
    for (int e = 0; e < recv->num_local_experts; ++e) {
        for (int row = 0; row < x->counts[e]; ++row, ++at) {
            size_t block = (size_t)e * (size_t)x->widest + (size_t)row;

            memcpy(x->block_x + block * r->row_bytes, x->x + (size_t)at * r->row_bytes,
                   r->row_bytes);
            x->block_src[block] = x->src[at];
            if (r->scales) {
                memcpy((char *)x->block_scales + block * stride, x->scales + (size_t)at * r->scales,
                       scale_bytes);
            }
        }
    }
    recv->capacity     = (int)x->widest;
    recv->count        = x->counts;
    recv->x            = x->block_x;
    recv->x_scales     = x->block_scales;
    recv->scale_stride = stride;
    recv->src          = x->block_src;
    recv->expert_y     = x->block_y;
}

/* The outputs check_dispatch wrote in blocks, packed as the rows came. */
static void pack_outputs(const rank_state_t *r, const strata_moe_recv_t *recv, exact_step_t *x)
{
    int64_t at = 0;

    for (int e = 0; e < recv->num_local_experts; ++e) {
        for (int row = 0; row < x->counts[e]; ++row, ++at) {
            memcpy(x->y + (size_t)at * r->y_row_bytes,
                   x->block_y + ((size_t)e * (size_t)x->widest + (size_t)row) * r->y_row_bytes,
                   r->y_row_bytes);
        }
    }
}

static void free_exact(exact_step_t *x)
{
    free(x->x);
    free(x->y);
    free(x->scales);
    free(x->src);
    free(x->block_x);
    free(x->block_y);
    free(x->block_scales);
    free(x->block_src);
    memset(x, 0, sizeof(*x));
}

/* --abort: this rank ends the step where it was told to, with strata_moe_abort_step; the
 * step then is over (a second abort has nothing to end), and its next one starts. */
static strata_status_t run_aborted_step(rank_state_t *r)
{
    strata_moe_layout_t *layout = NULL;
    strata_moe_recv_t recv;
    exact_step_t exact = {0};
    strata_status_t status;

    CHECK(strata_moe_layout_create(r->moe, r->idx, r->n, &layout) == STRATA_OK, "layout");
    status = strata_moe_dispatch_send(r->moe, layout, r->x, r->scales ? r->x_scales : NULL);
    if (status == STRATA_OK && g_abort_at != ABORT_SENT) {
        status = strata_moe_dispatch_recv(r->moe, &recv);
    }
    if (status == STRATA_OK && g_abort_at == ABORT_COMBINED && r->exact) {
        status = receive_exact(r, &recv, &exact);
        if (status == STRATA_OK) {
            check_counts(r, &recv, exact.counts); /* recv.count: the dispatch's, no stream */
            exact_blocks(r, &recv, &exact);
            check_dispatch(r, &recv);
            pack_outputs(r, &recv, &exact);
            status = strata_moe_combine_send(r->moe, exact.y);
        }
    } else if (status == STRATA_OK && g_abort_at == ABORT_COMBINED) {
        check_dispatch(r, &recv);
        status = strata_moe_combine_send(r->moe, NULL);
    }
    CHECK(status == STRATA_OK, "the step before its abort: %s", strata_status_string(status));
    status = strata_moe_abort_step(r->moe);
    CHECK(status == STRATA_OK, "abort_step: %s", strata_status_string(status));
    CHECK(strata_moe_abort_step(r->moe) == STRATA_OK, "a second abort_step");
    CHECK(strata_moe_combine_recv(r->moe, r->weights, r->out) == STRATA_ERR_INVALID,
          "combine_recv after abort_step must be out of order");
    free_exact(&exact); /* combine_send's outputs were read by the abort's combine */
    strata_moe_layout_destroy(layout);
    return STRATA_OK;
}

/* One step; the layout form on odd steps. Returns the first status that was not OK, or OK
 * where a refused input gave the STRATA_ERR_INVALID it must. */
strata_status_t run_step(rank_state_t *r, int kill, bool disagree)
/* kill: 0 no, else the signal this rank raises in the middle of the step */
{
    uint64_t dmask[INTRA_MOE_MASK_WORDS] = {0}, cmask[INTRA_MOE_MASK_WORDS] = {0};
    strata_moe_layout_t *layout = NULL;
    strata_moe_recv_t recv;
    strata_status_t status, expect;
    exact_step_t exact = {0};
    const void *x;
    int n;

    if (r->masks == MASKS_BY_STEP) {
        gen_mask(r->c, g_step, 0, dmask);
        gen_mask(r->c, g_step, 1, cmask);
        dmask[0] ^= disagree ? 1u : 0u; /* expert 0 in the other mode than on every rank */
        CHECK(strata_moe_set_pull_mask(r->moe, dmask, cmask) == STRATA_OK, "set_pull_mask");
    } else if (r->masks == MASKS_ADAPTIVE) {
        CHECK(strata_moe_set_pull_mask(r->moe, dmask, NULL) == STRATA_ERR_INVALID,
              "set_pull_mask in adaptive mode must be refused");
    }
    make_inputs(r);
    if (aborts(r->rank)) {
        return run_aborted_step(r);
    }
    step_input(r, &n, &x);
    expect = refuses(r->c, r->rank) ? STRATA_ERR_INVALID : STRATA_OK;
    if (g_step % 2 == 1) {
        status = strata_moe_layout_create(r->moe, r->idx, n, &layout);
        CHECK(status == (n == r->n ? STRATA_OK : STRATA_ERR_INVALID), "layout: %s",
              strata_status_string(status));
        status = strata_moe_dispatch_send(r->moe, layout, x, r->scales ? r->x_scales : NULL);
        if (kill) {
            raise(kill); /* in the middle of the step, as a crash or a stall would */
        }
        if (status == expect) {
            status = strata_moe_dispatch_recv(r->moe, &recv);
        }
    } else {
        status = strata_moe_dispatch(r->moe, x, r->scales ? r->x_scales : NULL, r->idx, n, &recv);
    }
    if (r->c->capacity > 0 && status == STRATA_ERR_CAPACITY) {
        status = expect; /* the owner of the overflowing expert */
    }
    if (status == expect && g_expert_wait) { /* dispatch_recv waited: at once */
        expert_copies_t copies;

        status = copy_experts(r, &recv, &copies);
        CHECK(status == STRATA_OK, "expert_wait after the dispatch: %s",
              strata_status_string(status));
        check_expert_copies(&recv, &copies);
        status = expect;
    }
    if (status == expect && r->exact) {
        status = receive_exact(r, &recv, &exact);
        if (status == STRATA_OK) {
            check_counts(r, &recv, exact.counts); /* recv.count: the dispatch's, no stream */
            exact_blocks(r, &recv, &exact);
            check_dispatch(r, &recv);
            pack_outputs(r, &recv, &exact);
            status = strata_moe_combine_send(r->moe, exact.y); /* read until combine_recv */
        }
    } else if (status == expect) {
        int32_t counts[MAX_LOCAL_EXPERTS];

        CHECK(recv.num_local_experts <= MAX_LOCAL_EXPERTS &&
                  strata_moe_dispatch_counts(r->moe, 0, counts) == STRATA_OK,
              "dispatch_counts after dispatch_recv returned (no stream) must answer at once");
        check_counts(r, &recv, counts);
        check_dispatch(r, &recv);
        status = strata_moe_combine_send(r->moe, NULL);
    }
    if (status == STRATA_OK) {
        status = strata_moe_combine_recv(r->moe, r->weights, r->out);
    }
    free_exact(&exact);
    if (status == STRATA_OK || status == STRATA_ERR_CANCELLED ||
        (r->c->capacity > 0 && status == STRATA_ERR_CAPACITY)) {
        check_combine(r, status);
        status = STRATA_OK;
    } else if (status == expect) {
        status = STRATA_OK; /* refused as it must be; this rank's results are none */
    }
    strata_moe_layout_destroy(layout);
    return status;
}

/* Step sr->pending's results, in its own buffers, once its kernels are known to be done. */
static void check_pending(stream_run_t *sr)
{
    int step = g_step;

    if (sr->pending < 0) {
        return;
    }
    g_step = sr->pending; /* the reference of that step */
    check_combine(&sr->states[sr->pending % 2], STRATA_OK);
    g_step      = step;
    sr->pending = -1;
}

/*
 * One step on stream g_step % 2, in that stream's buffers: the layout form on odd steps.
 * The host waits for the dispatch (to check it and write the experts' outputs); then the
 * last step's combine, which ran on the other stream, must be done: the new stream waited
 * for it. This step's combine is checked after the next step's dispatch.
 */
/* A step on stream g_step % 2 begins: its buffers (the step's of two steps ago, checked
 * since), its masks and its input (n tokens at x). */
static rank_state_t *stream_step_begin(stream_run_t *sr, int *n, const void **x)
{
    rank_state_t *r = &sr->states[g_step % 2];
    uint64_t dmask[INTRA_MOE_MASK_WORDS], cmask[INTRA_MOE_MASK_WORDS];

    strata_moe_layout_destroy(r->layout);
    r->layout = NULL;
    free_exact(&sr->exact[g_step % 2]); /* its combine read them: checked since */
    CHECK(strata_moe_set_stream(r->moe, sr->streams[g_step % 2]) == STRATA_OK, "set_stream");
    if (r->masks == MASKS_BY_STEP) {
        gen_mask(r->c, g_step, 0, dmask);
        gen_mask(r->c, g_step, 1, cmask);
        CHECK(strata_moe_set_pull_mask(r->moe, dmask, cmask) == STRATA_OK, "set_pull_mask");
    }
    make_inputs(r);
    step_input(r, n, x);
    return r;
}

/* --counts-first: the file rank 0 leaves once it has this step's counts. */
static void counts_file(char *path, size_t size)
{
    snprintf(path, size, "%s/counts-%d", g_counts_dir, g_step);
}

/* --counts-first: rank 0 says it has the step's counts. */
static void counts_seen(void)
{
    char path[4096];
    FILE *f;

    if (g_counts_first < 0 || g_rank != 0) {
        return;
    }
    counts_file(path, sizeof(path));
    f = fopen(path, "w");
    CHECK(f != NULL && fclose(f) == 0, "cannot write %s", path);
}

/* --counts-first: that rank holds back its dispatch_recv (its rounds after the first)
 * until rank 0 has the step's counts, 30 s at most. */
static void counts_hold(const rank_state_t *r)
{
    char path[4096];
    uint64_t start = util_clock_now_ns();
    FILE *f = NULL;

    if (g_rank != g_counts_first) {
        return;
    }
    /* rank 0's first round needs nothing of ours but what dispatch_send sent (round one
     * holds a round's entries, Pull rows are read): on its node it would need our counts */
    CHECK(r->rank_node[g_rank] != r->rank_node[0], "--counts-first: rank %d is on rank 0's "
          "node", g_rank);
    counts_file(path, sizeof(path));
    while ((f = fopen(path, "r")) == NULL &&
           util_clock_now_ns() - start < 30 * UTIL_NSEC_PER_SEC) {
        util_sleep_ns(UTIL_NSEC_PER_MSEC);
    }
    CHECK(f != NULL, "step %d: rank 0 had no counts within 30 s while this rank held its "
          "later rounds back", g_step);
    fclose(f);
}

strata_status_t run_stream_step(stream_run_t *sr, int kill)
/* kill: 0 no, else the signal this rank raises before its dispatch: the others' experts then
 * lack its counts and rows, whatever the timing (its last step's combine may still be
 * queued too) */
{
    expert_copies_t copies = {NULL, NULL};
    int32_t counts[MAX_LOCAL_EXPERTS];
    strata_moe_recv_t recv;
    strata_status_t status;
    const void *x;
    int n;
    rank_state_t *r = stream_step_begin(sr, &n, &x);
    exact_step_t *exact = &sr->exact[g_step % 2];

    if (kill) {
        raise(kill);
    }
    if (g_step % 2 == 1) {
        status = strata_moe_layout_create(r->moe, r->idx, n, &r->layout);
        if (status == STRATA_OK) {
            status = strata_moe_dispatch_send(r->moe, r->layout, x,
                                              r->scales ? r->x_scales : NULL);
        }
        if (status == STRATA_OK) {
            counts_hold(r);
            status = strata_moe_dispatch_recv(r->moe, &recv);
        }
    } else {
        status = strata_moe_dispatch(r->moe, x, r->scales ? r->x_scales : NULL, r->idx, n,
                                     &recv);
    }
    if (status == STRATA_OK) { /* the counts, while the rows may still be moving */
        CHECK(recv.num_local_experts <= MAX_LOCAL_EXPERTS, "too many local experts");
        status = strata_moe_dispatch_counts(r->moe, -1, counts);
    }
    if (status == STRATA_OK && g_step % 2 == 1) {
        counts_seen(); /* the counts are checked below, once the rows are in */
    }
    if (status == STRATA_OK && r->exact) { /* the loads (and later rounds) enqueued */
        status = receive_exact(r, &recv, exact);
    }
    if (status == STRATA_OK && g_expert_wait) {
        status = copy_experts(r, &recv, &copies);
    }
    if (status == STRATA_OK) {
        status = strata_moe_synchronize(r->moe);
    }
    if (status != STRATA_OK) {
        free(copies.rows);
        free(copies.x);
        return status;
    }
    check_pending(sr);
    if (g_expert_wait) {
        check_expert_copies(&recv, &copies);
    }
    if (r->exact) {
        exact_blocks(r, &recv, exact);
    }
    check_counts(r, &recv, counts);
    check_dispatch(r, &recv);
    if (r->exact) { /* the outputs stay until this state's next step: its combine reads them */
        pack_outputs(r, &recv, exact);
    }
    status = strata_moe_combine_send(r->moe, r->exact ? exact->y : NULL);
    if (status == STRATA_OK) {
        status = strata_moe_combine_recv(r->moe, r->weights, r->out);
    }
    if (status == STRATA_OK) {
        sr->pending = g_step;
    }
    return status;
}

/* --late-combine: one step on stream g_step % 2 whose dispatch the host waits for and
 * checks (writing the experts' outputs), and whose combine_send this rank makes late_ms
 * late; a step that passes here must be exact. */
strata_status_t run_late_combine_step(stream_run_t *sr, unsigned late_ms)
{
    strata_moe_recv_t recv;
    strata_status_t status;
    const void *x;
    int n;
    rank_state_t *r = stream_step_begin(sr, &n, &x);
    exact_step_t *exact = &sr->exact[g_step % 2];

    status = strata_moe_dispatch(r->moe, x, r->scales ? r->x_scales : NULL, r->idx, n, &recv);
    if (status == STRATA_OK && r->exact) { /* receive_exact reads the counts without a wait */
        status = strata_moe_dispatch_counts(r->moe, -1, exact->counts);
    }
    if (status == STRATA_OK && r->exact) {
        status = receive_exact(r, &recv, exact);
    }
    if (status == STRATA_OK) {
        status = strata_moe_synchronize(r->moe);
    }
    if (status != STRATA_OK) {
        return status;
    }
    check_pending(sr);
    if (r->exact) {
        exact_blocks(r, &recv, exact);
    }
    check_dispatch(r, &recv);
    if (r->exact) {
        pack_outputs(r, &recv, exact);
    }
    util_sleep_ns((uint64_t)late_ms * UTIL_NSEC_PER_MSEC); /* the others' combines wait */
    status = strata_moe_combine_send(r->moe, r->exact ? exact->y : NULL);
    if (status == STRATA_OK) {
        status = strata_moe_combine_recv(r->moe, r->weights, r->out);
    }
    if (status == STRATA_OK) {
        status = strata_moe_synchronize(r->moe);
    }
    if (status == STRATA_OK) {
        check_combine(r, STRATA_OK);
    }
    return status;
}

/* Whether any of this rank's n tokens has a choice at another rank's expert. */
static bool terms_elsewhere(const rank_state_t *r, int n)
{
    int per_rank = r->c->experts / r->world;

    for (int i = 0; i < n * r->c->topk; ++i) {
        if (r->idx[i] >= 0 && r->idx[i] / per_rank != r->rank) {
            return true;
        }
    }
    return false;
}

strata_status_t run_late_step(stream_run_t *sr, unsigned late_ms, bool *needs_others_p)
{
    strata_moe_recv_t recv;
    strata_status_t status;
    const void *x;
    int n;
    rank_state_t *r = stream_step_begin(sr, &n, &x);

    *needs_others_p = terms_elsewhere(r, n);

    util_sleep_ns((uint64_t)late_ms * UTIL_NSEC_PER_MSEC); /* the others wait, then give up */
    status = strata_moe_dispatch(r->moe, x, r->scales ? r->x_scales : NULL, r->idx, n, &recv);
    if (status == STRATA_OK) { /* the experts' outputs: whatever recv.expert_y holds */
        status = strata_moe_combine_send(r->moe, NULL);
    }
    if (status == STRATA_OK) {
        status = strata_moe_combine_recv(r->moe, r->weights, r->out);
    }
    return status == STRATA_OK ? strata_moe_synchronize(r->moe) : status;
}

/* --streams: the second stream's buffers, and the streams. */
void stream_run_start(stream_run_t *sr, strata_comm_t *comm, const rank_state_t *r)
{
    *sr = (stream_run_t){.comm = comm, .states = {*r, *r}, .pending = -1};
    alloc_state(&sr->states[1], r->c);
    for (int i = 0; i < 2; ++i) {
        CHECK(strata_comm_stream_create(comm, &sr->streams[i]) == STRATA_OK, "stream_create");
    }
}

/* The last step's results and the layouts (the first buffers are r's). */
void stream_run_end(stream_run_t *sr, rank_state_t *r, strata_status_t status)
{
    if (status == STRATA_OK) {
        CHECK(strata_moe_synchronize(r->moe) == STRATA_OK, "synchronize");
        check_pending(sr);
    }
    for (int i = 0; i < 2; ++i) {
        strata_moe_layout_destroy(sr->states[i].layout);
    }
    /* after a failed step the object refuses everything but destroy, and its stream must
     * outlive it (stream_run_free) */
    CHECK(strata_moe_set_stream(r->moe, NULL) == STRATA_OK || status != STRATA_OK,
          "set_stream(NULL)");
}

/* The streams and the second buffers, once the object is destroyed. */
void stream_run_free(stream_run_t *sr)
{
    for (int i = 0; i < 2; ++i) {
        strata_comm_stream_destroy(sr->comm, sr->streams[i]);
        free_exact(&sr->exact[i]);
    }
    free_state(&sr->states[1]);
}

void alloc_state(rank_state_t *r, const moe_case_t *c)
{
    size_t n = (size_t)c->max_tokens;

    r->row_bytes   = (size_t)c->hidden * elem_size(c->dtype);
    r->y_row_bytes = (size_t)c->hidden * elem_size(c->combine_dtype);
    r->scales      = c->dtype == STRATA_DTYPE_FP8_E4M3 ? (size_t)c->hidden / 128 : 0;
    r->x           = aligned_alloc(64, n * r->row_bytes + 64);
    r->out         = aligned_alloc(64, n * r->y_row_bytes + 64);
    r->ref         = malloc(n * r->y_row_bytes + 64);
    r->x_scales    = calloc(n * (r->scales + 1), sizeof(float));
    r->weights     = calloc(n * (size_t)c->topk, sizeof(float));
    r->idx         = calloc(n * (size_t)c->topk, sizeof(int64_t));
    r->seen        = calloc((size_t)r->world * n * (size_t)c->topk, 1);
    CHECK(r->x && r->out && r->ref && r->x_scales && r->weights && r->idx && r->seen, "memory");
}

void free_state(rank_state_t *r)
{
    free(r->x);
    free(r->out);
    free(r->ref);
    free(r->x_scales);
    free(r->weights);
    free(r->idx);
    free(r->seen);
}
