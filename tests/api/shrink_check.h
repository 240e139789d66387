/*
 * What the parts of shrink_check share (shrink_check.c: the job, its ring and registered
 * steps, the failures and shrinks; shrink_check_moe.c: its MoE steps; shrink_check_grow.c:
 * the replacement that joins).
 */
#ifndef STRATA_TESTS_SHRINK_CHECK_H
#define STRATA_TESTS_SHRINK_CHECK_H

#include <strata/strata.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "shrink_check rank %d: ", g_first_rank); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

#define WAIT_MS 30000u

typedef struct options {
    int  victim, second, second_last_to, slow, slow_timeout, at, steps, max_ms, step_ms;
    bool stop, resume, second_first, moe, reassign, rejoin, map_refusals, registered,
         failed_calls;
    const char *join_addr; /* set: this process is the replacement, joining there */
    int  join_port, join_rank;
} options_t;

extern int g_first_rank; /* this process's rank in the first communicator */

/* A step of the job: the ring, the registered writes, then the MoE step where there is an
 * object (shrink_check.c). */
strata_status_t job_step(strata_comm_t *comm, strata_moe_t *moe, const int *first_of,
                         int step, const options_t *o);

/* shrink_check_moe.c: 2 experts per rank of the first communicator, g_experts in all. */
#define EXPERTS_PER_RANK 2
extern int g_experts;
strata_status_t moe_step(strata_moe_t *moe, const int *first_of, int n, int step,
                         bool reassign);
strata_moe_t   *moe_first(strata_comm_t *comm);
void            moe_create_fails(strata_comm_t *comm);
strata_status_t moe_again(strata_moe_t **moe, strata_comm_t *comm, const int *first_of,
                          bool reassign, bool refusals);
strata_status_t moe_back(strata_moe_t **moe, strata_comm_t *comm, const int *first_of);

/* shrink_check_grow.c */
int   run_joiner(const options_t *o);
pid_t grow_back(strata_comm_t **comm, strata_moe_t **moe, int *first_of, int argc,
                char **argv, const options_t *o);

#endif
