/*
 * The engine check's parts (engine_check.c): the shared state of one rank's run and what
 * each part offers main. Work rings: engine_check_ring.c; a dying, silent or restricted
 * engine: engine_check_faults.c.
 */
#ifndef STRATA_TESTS_ENGINE_CHECK_H
#define STRATA_TESTS_ENGINE_CHECK_H

#include "api/api.h"
#include "inter/engine.h"

#include "common/log_expect.h"

#include <rdma/fabric.h> /* the headers' version: whether shared memory can be forbidden */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOT        (2u << 20)  /* bytes each source owns in every receive region */
#define MAX_RANKS   8
#define WAIT_NS     (20ull * UTIL_NSEC_PER_SEC)
#define ROUNDS      6

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "engine_check r%d (seed %u): ", g_rank, g_seed); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

extern int g_rank, g_world;
extern unsigned g_seed;
extern inter_engine_t *g_engine;
extern strata_bootstrap_t *g_bs;
extern unsigned char *g_src, *g_dst; /* g_dst: world slots of SLOT bytes, one per source */
extern inter_mr_t *g_src_mr, *g_dst_mr;
extern inter_rdesc_t g_src_desc[MAX_RANKS], g_dst_desc[MAX_RANKS];

/* The byte a source writes at offset i in a round: both ends derive it. */
unsigned char pattern(int round, int src, size_t i);
/* One round of writes with immediates to every peer, checked on arrival. */
void round_write(int round);

/* engine_check_ring.c */
void work_ring(bool flush_by_read); /* flush_by_read: the counts wait for loopback reads */
void work_ring_bad_command(void);
int  kill_ring_test(int victim);

/* An engine created and connected to every rank (g_engine), no memory registered. */
void connect_engine(void);

/* engine_check_faults.c */
int kill_test(int victim);
int leave_test(int times);
int idle_test(void);
int forbid_shm_test(void);

#endif
