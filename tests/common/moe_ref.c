/*
 * The MoE tests' inputs and reference arithmetic, shared by the intra-node and two-tier
 * checkers: inputs are pure functions of (seed, step, rank, token, ...), so every rank can
 * regenerate every rank's; conversions are written independently of the kernels'.
 */
#include "moe_ref.h"
#include "intra/intra.h"

#include <math.h>
#include <string.h>

uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

uint64_t hash4(const moe_case_t *c, uint64_t a, uint64_t b, uint64_t d, uint64_t e)
{
    return mix(mix(mix(mix((uint64_t)c->seed * 0x9e3779b97f4a7c15ull ^ a) ^ b) ^ d) ^ e);
}

/* ---- inputs, the same function on every rank ---- */

int gen_tokens(const moe_case_t *c, int step, int rank)
{
    uint64_t h = hash4(c, 1, (uint64_t)step, (uint64_t)rank, 0);

    if (c->routes != NULL) {
        return c->max_tokens;
    }
    if (h % 17 == 0) {
        return 0;
    }
    return h % 5 == 0 ? c->max_tokens : (int)(h % (uint64_t)(c->max_tokens + 1));
}

/* Top-k choices of a token: distinct experts or -1; uniform, skewed, or sparse by step. */
int64_t gen_route(const moe_case_t *c, int step, int rank, int t, int k)
{
    int64_t chosen[64];
    int pattern = step % 3;

    if (c->routes != NULL) {
        return c->routes[(((size_t)step * (size_t)c->ranks + (size_t)rank) *
                              (size_t)c->max_tokens + (size_t)t) * (size_t)c->topk + (size_t)k];
    }
    if (c->scenario == MOE_SCENARIO_BAD_ID && rank == 0 && step % 2 == 1 && t == 0 && k == 0) {
        return step % 4 == 1 ? c->experts : -7; /* past the end, or below -1 */
    }
    if (c->scenario == MOE_SCENARIO_OVERFLOW && pattern == 2) {
        return (k == 0 && t % 5 == 0) ? (t / 5) % c->experts : -1; /* fits any capacity */
    }
    for (int j = 0; j <= k; ++j) {
        uint64_t h = hash4(c, 2, (uint64_t)step, ((uint64_t)rank << 32) | (uint64_t)t,
                           (uint64_t)j);
        double u = (double)(h >> 11) / 9007199254740992.0;
        int64_t e;

        if (pattern == 2 && h % 4 == 0) {
            chosen[j] = -1;
            continue;
        }
        e = pattern == 1 || c->scenario == MOE_SCENARIO_OVERFLOW
                ? (int64_t)(c->experts * u * u * u) /* skewed to low ids */
                : (int64_t)(h % (uint64_t)c->experts);
        for (int i = 0; i < j; ++i) { /* distinct: walk to the next unused id */
            if (chosen[i] == e) {
                e = (e + 1) % c->experts;
                i = -1;
            }
        }
        chosen[j] = e;
    }
    return chosen[k];
}

unsigned char gen_x_byte(const moe_case_t *c, int step, int rank, int t, size_t i)
{
    return (unsigned char)hash4(c, 3, (uint64_t)step, ((uint64_t)rank << 32) | (uint64_t)t, i);
}

float gen_scale(const moe_case_t *c, int step, int rank, int t, int i)
{
    return (float)(hash4(c, 4, (uint64_t)step, ((uint64_t)rank << 32) | (uint64_t)t,
                         (uint64_t)i) % 1000) / 256.0f;
}

float gen_weight(const moe_case_t *c, int step, int rank, int t, int k)
{
    return (float)(hash4(c, 5, (uint64_t)step, ((uint64_t)rank << 32) | (uint64_t)t,
                         (uint64_t)k) % 1001) / 1000.0f;
}

/* What expert e computes for a row: a value of the source token, the expert and column. */
float gen_y(const moe_case_t *c, int step, int expert, int rank, int t, int h)
{
    uint64_t v = hash4(c, 6, (uint64_t)step, ((uint64_t)expert << 40) | ((uint64_t)rank << 32) |
                                                 (uint64_t)t, (uint64_t)h);
    return ((float)(v % 20001) - 10000.0f) / 997.0f;
}

/* Pull mask per step, the same on every rank: none, all, mixed, or by halves. */
void gen_mask(const moe_case_t *c, int step, int which, uint64_t *mask)
{
    memset(mask, 0, sizeof(uint64_t) * INTRA_MOE_MASK_WORDS);
    for (int e = 0; e < c->experts; ++e) {
        int pull;

        switch ((c->scenario == MOE_SCENARIO_OVERFLOW ? step % 2 : step % 4)) {
        case 0: pull = 0; break;
        case 1: pull = 1; break;
        case 2: pull = (int)(hash4(c, 7, (uint64_t)step, (uint64_t)which, (uint64_t)e) & 1); break;
        default: pull = which == 0 ? e < c->experts / 2 : e >= c->experts / 2; break;
        }
        if (pull) {
            mask[e / 64] |= UINT64_C(1) << (e % 64);
        }
    }
}

int is_pull(const uint64_t *mask, int64_t e)
{
    return (int)((mask[e / 64] >> (e % 64)) & 1u);
}

/* ---- reference conversions, written independently of the kernels' ---- */

uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Nearest of the two neighbouring bf16 values, compared in double; ties to even. */
uint16_t ref_to_bf16(float f)
{
    uint32_t lo = bits_of(f) & 0xffff0000u, hi = lo + 0x10000u;
    double dl, dh;

    if (f != f) {
        return (uint16_t)((bits_of(f) >> 16) | 0x40);
    }
    if ((bits_of(f) & 0xffffu) == 0) {
        return (uint16_t)(lo >> 16);
    }
    dl = (double)f - (double)float_of(lo);
    dh = (double)float_of(hi) - (double)f;
    if (dl < 0) { /* negative values: lo is the one nearer zero either way */
        dl = -dl;
        dh = -dh;
    }
    if (dl < dh || (dl == dh && ((lo >> 16) & 1u) == 0)) {
        return (uint16_t)(lo >> 16);
    }
    return (uint16_t)(hi >> 16);
}

float ref_from_half(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0 ? ldexp(mant, -24) : exp == 31 ? (mant ? NAN : INFINITY)
                                                       : ldexp(mant | 0x400, exp - 25);
    return (float)((h & 0x8000) ? -v : v);
}

/* The half nearest to f, found by bisection over the ordered magnitudes; ties to even. */
uint16_t ref_to_half(float f)
{
    double a = fabs((double)f);
    uint16_t sign = (bits_of(f) >> 16) & 0x8000, lo = 0, hi = 0x7bff;

    if (f != f) {
        return (uint16_t)(sign | 0x7e00);
    }
    if (a >= 65520.0) {
        return (uint16_t)(sign | 0x7c00); /* the rounding point past the largest half */
    }
    while (lo < hi) { /* largest m with value(m) <= a */
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if ((double)ref_from_half(mid) <= a) {
            lo = mid;
        } else {
            hi = (uint16_t)(mid - 1);
        }
    }
    if (lo < 0x7bff) {
        double below = a - (double)ref_from_half(lo);
        double above = (double)ref_from_half((uint16_t)(lo + 1)) - a;
        if (above < below || (above == below && (lo & 1u))) {
            ++lo;
        }
    }
    return (uint16_t)(sign | lo);
}

size_t elem_size(strata_dtype_t t)
{
    return t == STRATA_DTYPE_FP32 ? 4 : t == STRATA_DTYPE_FP8_E4M3 ? 1 : 2;
}

float ref_load(const unsigned char *row, int h, strata_dtype_t t)
{
    uint16_t v;

    if (t == STRATA_DTYPE_FP32) {
        float f;
        memcpy(&f, row + 4 * (size_t)h, 4);
        return f;
    }
    memcpy(&v, row + 2 * (size_t)h, 2);
    return t == STRATA_DTYPE_BF16 ? float_of((uint32_t)v << 16) : ref_from_half(v);
}

void ref_store(unsigned char *row, int h, strata_dtype_t t, float f)
{
    uint16_t v;

    if (t == STRATA_DTYPE_FP32) {
        memcpy(row + 4 * (size_t)h, &f, 4);
        return;
    }
    v = t == STRATA_DTYPE_BF16 ? ref_to_bf16(f) : ref_to_half(f);
    memcpy(row + 2 * (size_t)h, &v, 2);
}

/* ---- the reference ---- */

/* The expert id the kernels act on: out-of-range ids count as -1. */
int64_t ref_route(const moe_case_t *c, int step, int rank, int t, int k)
{
    int64_t e = gen_route(c, step, rank, t, k);
    return (e < -1 || e >= c->experts) ? -1 : e;
}

