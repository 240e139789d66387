/*
 * The MoE tests' inputs and reference arithmetic, shared by the intra-node checker
 * (tests/intra/moe_check.c) and the two-tier one (tests/scheduler/moe_net_check.c).
 */
#ifndef STRATA_TESTS_MOE_REF_H
#define STRATA_TESTS_MOE_REF_H

#include <strata/strata.h>

#include <stddef.h>
#include <stdint.h>

typedef enum moe_scenario {
    MOE_SCENARIO_EXACT,    /* every step's results equal the reference */
    MOE_SCENARIO_OVERFLOW, /* small capacity: CAPACITY errors, delivered rows still exact */
    MOE_SCENARIO_BAD_ID,   /* rank 0 sends an out-of-range expert id on odd steps */
} moe_scenario_t;

typedef struct moe_case {
    const char    *device; /* "host", "cuda", "hip" */
    int            ranks;
    int            experts;
    int            topk;
    int            hidden;
    int            max_tokens;
    int            capacity; /* 0: no overflow possible */
    int            steps;
    strata_dtype_t dtype;
    strata_dtype_t combine_dtype;
    unsigned       seed;
    moe_scenario_t scenario;
    unsigned       blocks;   /* kernel blocks; 0: the backend's default */
    int            rounds;   /* dispatch rounds per step (intra_moe_dispatch_rounds); 0: 1 */
    /* A routing given in full (from a trace), or NULL: [steps][ranks][max_tokens][topk],
     * every rank sending max_tokens tokens every step. */
    const int64_t *routes;
} moe_case_t;

/* Inputs: pure functions of the case's seed and their arguments. */
uint64_t      mix(uint64_t x);
uint64_t      hash4(const moe_case_t *c, uint64_t a, uint64_t b, uint64_t d, uint64_t e);
int           gen_tokens(const moe_case_t *c, int step, int rank);
/** Top-k choices of a token: distinct experts or -1; uniform, skewed, or sparse by step. */
int64_t       gen_route(const moe_case_t *c, int step, int rank, int t, int k);
unsigned char gen_x_byte(const moe_case_t *c, int step, int rank, int t, size_t i);
float         gen_scale(const moe_case_t *c, int step, int rank, int t, int i);
float         gen_weight(const moe_case_t *c, int step, int rank, int t, int k);
/** What expert e computes for a row: a value of the source token, the expert and column. */
float         gen_y(const moe_case_t *c, int step, int expert, int rank, int t, int h);
/** Pull mask per step (INTRA_MOE_MASK_WORDS words): none, all, mixed, or by halves. */
void          gen_mask(const moe_case_t *c, int step, int which, uint64_t *mask);
int           is_pull(const uint64_t *mask, int64_t e);

/* Reference conversions, written independently of the kernels'. */
uint32_t bits_of(float f);
float    float_of(uint32_t u);
uint16_t ref_to_bf16(float f);
float    ref_from_half(uint16_t h);
uint16_t ref_to_half(float f);
size_t   elem_size(strata_dtype_t t);
float    ref_load(const unsigned char *row, int h, strata_dtype_t t);
void     ref_store(unsigned char *row, int h, strata_dtype_t t, float f);
/** The expert id dispatch acts on: out-of-range ids count as -1. */
int64_t  ref_route(const moe_case_t *c, int step, int rank, int t, int k);

#endif
