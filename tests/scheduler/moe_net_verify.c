/*
 * The reference of the two-tier MoE check (moe_net_check.c): every rank's inputs from the
 * seed, the rows each expert must receive, and each token's combined row, exact (fp32 in k
 * order, rounded once) or, with node-reduce, within the rounding of each node's partial sum.
 */
#include "scheduler/moe_net_check.h"

#include <math.h>
#include <string.h>

/* Whether rank s refuses its input this step: a bad count, or tokens without x, on two
 * steps in a row (one of each form: strata_moe_dispatch, and a layout with split halves). */
bool refuses(const moe_case_t *c, int s)
{
    return s == g_bad_rank && (g_step == g_bad_step || g_step == g_bad_step + 1) &&
           (g_bad_kind != BAD_NULL_X || gen_tokens(c, g_step, s) > 0);
}

/* Tokens rank s contributes this step: none when its input was refused. */
static int src_tokens(const moe_case_t *c, int s)
{
    return refuses(c, s) ? 0 : gen_tokens(c, g_step, s);
}

void make_inputs(rank_state_t *r)
{
    const moe_case_t *c = r->c;

    r->n = gen_tokens(c, g_step, r->rank);
    for (int t = 0; t < r->n; ++t) {
        for (size_t i = 0; i < r->row_bytes; ++i) {
            r->x[(size_t)t * r->row_bytes + i] = gen_x_byte(c, g_step, r->rank, t, i);
        }
        for (size_t i = 0; i < r->scales; ++i) {
            r->x_scales[(size_t)t * r->scales + i] = gen_scale(c, g_step, r->rank, t, (int)i);
        }
        for (int k = 0; k < c->topk; ++k) {
            r->idx[(size_t)t * (size_t)c->topk + (size_t)k] = gen_route(c, g_step, r->rank, t, k);
            r->weights[(size_t)t * (size_t)c->topk + (size_t)k] =
                gen_weight(c, g_step, r->rank, t, k);
        }
    }
}

/* Rows every rank routes to expert e this step. */
static int ref_count(const rank_state_t *r, int64_t e)
{
    int count = 0;

    for (int s = 0; s < r->world; ++s) {
        int n = src_tokens(r->c, s);

        for (int t = 0; t < n; ++t) {
            for (int k = 0; k < r->c->topk; ++k) {
                count += ref_route(r->c, g_step, s, t, k) == e;
            }
        }
    }
    return count;
}

/* A received row: routed here by the reference, equal to its source's, seen once. */
static void check_row(rank_state_t *r, const strata_moe_recv_t *recv, int e, int row)
{
    const moe_case_t *c = r->c;
    size_t at = (size_t)e * (size_t)recv->capacity + (size_t)row;
    strata_moe_source_t s = recv->src[at];
    const unsigned char *got = (const unsigned char *)recv->x + at * recv->row_bytes;
    size_t key;

    CHECK(s.rank >= 0 && s.rank < r->world && s.token >= 0 &&
              s.token < src_tokens(c, s.rank) && s.slot >= 0 && s.slot < c->topk,
          "expert %d row %d has source (%d, %d, %d)", recv->first_expert + e, row, s.rank,
          s.token, s.slot);
    CHECK(ref_route(c, g_step, s.rank, s.token, s.slot) == recv->first_expert + e,
          "expert %d row %d: (%d, %d, %d) is not routed here", recv->first_expert + e, row,
          s.rank, s.token, s.slot);
    key = ((size_t)s.rank * (size_t)c->max_tokens + (size_t)s.token) * (size_t)c->topk +
          (size_t)s.slot;
    CHECK(!r->seen[key], "(%d, %d, %d) delivered twice", s.rank, s.token, s.slot);
    r->seen[key] = 1;
    for (size_t i = 0; i < recv->row_bytes; ++i) {
        CHECK(got[i] == gen_x_byte(c, g_step, s.rank, s.token, i),
              "expert %d row %d from (%d, %d): byte %zu differs", recv->first_expert + e, row,
              s.rank, s.token, i);
    }
    for (size_t i = 0; i < r->scales; ++i) {
        const float *sc = (const float *)((const char *)recv->x_scales + at * recv->scale_stride);

        CHECK(sc[i] == gen_scale(c, g_step, s.rank, s.token, (int)i),
              "expert %d row %d: scale %zu differs", recv->first_expert + e, row, i);
    }
}

/* Check what arrived, and compute the experts' outputs into recv->expert_y. */
void check_dispatch(rank_state_t *r, const strata_moe_recv_t *recv)
{
    const moe_case_t *c = r->c;

    memset(r->seen, 0, (size_t)r->world * (size_t)c->max_tokens * (size_t)c->topk);
    CHECK(c->capacity == 0 || recv->capacity == (c->capacity + 3) / 4 * 4,
          "capacity %d, expected %d rounded up to the alignment of 4", recv->capacity,
          c->capacity);
    for (int e = 0; e < recv->num_local_experts; ++e) {
        int g = recv->first_expert + e;

        int want = ref_count(r, g);

        want = r->c->capacity > 0 && want > recv->capacity ? recv->capacity : want;
        CHECK(recv->count[e] == want, "expert %d received %d rows, expected %d", g,
              recv->count[e], want);
        for (int row = 0; row < recv->count[e]; ++row) {
            size_t at = (size_t)e * (size_t)recv->capacity + (size_t)row;
            strata_moe_source_t s;
            unsigned char *y = (unsigned char *)recv->expert_y + at * recv->y_row_bytes;

            check_row(r, recv, e, row);
            s = recv->src[at];
            for (int h = 0; h < c->hidden; ++h) {
                ref_store(y, h, c->combine_dtype, gen_y(c, g_step, g, s.rank, s.token, h));
            }
        }
    }
}

void check_counts(const rank_state_t *r, const strata_moe_recv_t *recv, const int32_t *counts)
{
    for (int e = 0; e < recv->num_local_experts; ++e) {
        int g = recv->first_expert + e;

        CHECK(counts[e] == ref_count(r, g) && counts[e] >= recv->count[e],
              "expert %d: dispatch_counts says %d rows, %d were routed to it and %d "
              "delivered", g, counts[e], ref_count(r, g), recv->count[e]);
    }
}

/* Column h of token t's terms on node (-1: every node), weighted, summed in fp32 in k order,
 * but for the slots in dropped (bit k: its row was past its expert's capacity); *any_p:
 * whether the token has a term there. */
static float ref_node_sum(const rank_state_t *r, int t, int h, int node, uint32_t dropped,
                          bool *any_p, double *magnitude_p)
{
    const moe_case_t *c = r->c;
    unsigned char yrow[16];
    float acc = 0.0f;

    *any_p       = false;
    *magnitude_p = 0.0;
    for (int k = 0; k < c->topk; ++k) {
        int64_t e = ref_route(c, g_step, r->rank, t, k);

        if (e < 0 || (node >= 0 && r->rank_node[e / (c->experts / r->world)] != node) ||
            withheld(r, e) || (dropped >> k & 1u) != 0) {
            continue;
        }
        ref_store(yrow, 0, c->combine_dtype, gen_y(c, g_step, (int)e, r->rank, t, h));
        acc = acc + r->weights[(size_t)t * (size_t)c->topk + (size_t)k] *
                        ref_load(yrow, 0, c->combine_dtype);
        *magnitude_p += fabs((double)r->weights[(size_t)t * (size_t)c->topk + (size_t)k] *
                             (double)ref_load(yrow, 0, c->combine_dtype));
        *any_p = true;
    }
    return acc;
}

/* The combine dtype's unit roundoff: half the distance from 1 to the next value. */
double ref_unit(strata_dtype_t dtype)
{
    return dtype == STRATA_DTYPE_BF16 ? 0x1p-8 : dtype == STRATA_DTYPE_FP16 ? 0x1p-11 : 0x1p-24;
}

/* Node-reduce's value against the exact one, within the bound docs/moe.md derives: three
 * roundings to the combine dtype (this result, the exact one, the other nodes' partial
 * rows), and fp32 reassociation, of the sum of the terms' magnitudes. */
static void ref_against_exact(rank_state_t *r, int t, int h, uint32_t dropped,
                              const unsigned char *ref)
{
    strata_dtype_t dtype = r->c->combine_dtype;
    unsigned char exact[16];
    double magnitude, diff, unit = ref_unit(dtype);
    double bound = 3.0 + 2.0 * (r->c->topk + r->num_nodes) * 0x1p-24 / unit;
    bool any;

    ref_store(exact, 0, dtype, ref_node_sum(r, t, h, -1, dropped, &any, &magnitude));
    diff = fabs((double)ref_load(exact, 0, dtype) - (double)ref_load(ref, h, dtype));
    r->nr_values += 1;
    r->nr_differ += diff != 0.0;
    if (magnitude > 0.0) {
        r->nr_worst = fmax(r->nr_worst, diff / magnitude / unit);
    }
    CHECK(diff <= bound * unit * magnitude, "token %d column %d: node-reduce %g, exact %g: "
          "more than %.2f units of %g apart", t, h, (double)ref_load(ref, h, dtype),
          (double)ref_load(exact, 0, dtype), bound, magnitude);
}

/* Column h of token t's result. Exact: every term in fp32 in k order. Node-reduce: each
 * node's terms so, this node's kept in fp32, another's rounded to the combine dtype (the
 * row that node returns), the partials added in node order; rounded once. */
static void ref_column(rank_state_t *r, int t, int h, uint32_t dropped, unsigned char *ref)
{
    strata_dtype_t dtype = r->c->combine_dtype;
    unsigned char part[16];
    double magnitude;
    float acc = 0.0f;
    bool any;

    if (!r->node_reduce) {
        ref_store(ref, h, dtype, ref_node_sum(r, t, h, -1, dropped, &any, &magnitude));
        return;
    }
    for (int node = 0; node < r->num_nodes; ++node) {
        float sum = ref_node_sum(r, t, h, node, dropped, &any, &magnitude);

        if (node == r->node) {
            acc = acc + sum;
        } else if (any) {
            ref_store(part, 0, dtype, sum);
            acc = acc + ref_load(part, 0, dtype);
        }
    }
    ref_store(ref, h, dtype, acc);
    ref_against_exact(r, t, h, dropped, ref);
}

bool aborts(int s)
{
    return g_abort_at != ABORT_NONE && s == g_abort_rank && g_step == g_bad_step;
}

bool withheld(const rank_state_t *r, int64_t e)
{
    return aborts((int)(e / (r->c->experts / r->world))) && g_abort_at != ABORT_COMBINED;
}

/* The status combine_recv must return where no result lacks a term dropped for capacity:
 * CANCELLED where one of this rank's terms was withheld, OK where none was (what it
 * gathered for other nodes' tokens is theirs to report). */
static void check_withheld(const rank_state_t *r, strata_status_t combined)
{
    bool lost = false;

    for (int t = 0; t < r->n; ++t) {
        for (int k = 0; k < r->c->topk; ++k) {
            int64_t e = ref_route(r->c, g_step, r->rank, t, k);

            lost = lost || (e >= 0 && withheld(r, e));
        }
    }
    CHECK(combined == (lost ? STRATA_ERR_CANCELLED : STRATA_OK),
          "combine_recv returned %s; %s of this rank's terms were withheld",
          strata_status_string(combined), lost ? "some" : "none");
}

/* Token t's row, as the reference makes it with the slots in dropped left out. */
static void ref_row(rank_state_t *r, int t, uint32_t dropped, unsigned char *ref)
{
    for (int h = 0; h < r->c->hidden; ++h) {
        ref_column(r, t, h, dropped, ref);
    }
}

/* The slots of token t whose expert was routed more rows this step than its capacity (the
 * rows past it are dropped, which of them depends on arrival order). */
static uint32_t ref_overflowed(const rank_state_t *r, int t)
{
    int capacity = (r->c->capacity + 3) / 4 * 4; /* rounded up to the alignment of 4 */
    uint32_t slots = 0;

    for (int k = 0; k < r->c->topk; ++k) {
        int64_t e = ref_route(r->c, g_step, r->rank, t, k);

        slots |= e >= 0 && ref_count(r, e) > capacity ? 1u << k : 0u;
    }
    return slots;
}

/* Whether a token of this rank's routed a slot to an expert that overflowed this step:
 * combine_recv may then return CAPACITY although every result is whole (a dropped term
 * too small to change a rounded result), and only then. */
static bool own_overflowed(const rank_state_t *r)
{
    for (int t = 0; t < r->n && r->c->capacity > 0; ++t) {
        if (ref_overflowed(r, t) != 0) {
            return true;
        }
    }
    return false;
}

/* A row that is not the token's whole result: it must be the result without some of the
 * terms whose experts overflowed, and the rank must be told (CAPACITY). */
static void check_dropped(rank_state_t *r, int t, const unsigned char *got,
                          strata_status_t combined)
{
    uint32_t overflowed = ref_overflowed(r, t);
    unsigned char *ref = r->ref + (size_t)t * r->y_row_bytes;

    for (uint32_t dropped = overflowed; dropped != 0; dropped = (dropped - 1) & overflowed) {
        ref_row(r, t, dropped, ref);
        if (memcmp(ref, got, r->y_row_bytes) == 0) {
            CHECK(combined == STRATA_ERR_CAPACITY, "token %d lost terms (slots 0x%x), and "
                  "combine_recv returned %s, not CAPACITY", t, dropped,
                  strata_status_string(combined));
            r->short_results += 1;
            return;
        }
    }
    CHECK(false, "token %d's combined row differs, and is not its result without any of "
          "its terms past their experts' capacity (slots 0x%x)", t, overflowed);
}

void check_combine(rank_state_t *r, strata_status_t combined)
{
    const moe_case_t *c = r->c;
    uint64_t short_before = r->short_results;

    for (int t = 0; t < r->n; ++t) {
        unsigned char *ref = r->ref + (size_t)t * r->y_row_bytes;
        const unsigned char *got = r->out + (size_t)t * r->y_row_bytes;

        ref_row(r, t, 0, ref);
        if (c->capacity > 0 && memcmp(ref, got, r->y_row_bytes) != 0) {
            check_dropped(r, t, got, combined);
            continue;
        }
        CHECK(memcmp(ref, got, r->y_row_bytes) == 0, "token %d's combined row differs", t);
    }
    if (r->short_results == short_before && combined == STRATA_ERR_CAPACITY) {
        CHECK(own_overflowed(r), "combine_recv returned CAPACITY, and no token of this rank "
              "was routed to an expert that overflowed");
    } else if (r->short_results == short_before) { /* nothing lost: OK, CANCELLED */
        check_withheld(r, combined);
    }
}

/* What this rank passes this step: its inputs, or the bad one it was told to pass. */
void step_input(const rank_state_t *r, int *n_p, const void **x_p)
{
    *n_p = r->n;
    *x_p = r->x;
    if (!refuses(r->c, r->rank)) {
        return;
    }
    *n_p = g_bad_kind == BAD_OVER ? r->c->max_tokens + 1 : g_bad_kind == BAD_NEGATIVE ? -1 : r->n;
    *x_p = g_bad_kind == BAD_NULL_X ? NULL : r->x;
}
