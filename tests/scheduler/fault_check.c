/*
 * One fault on one rank, in one phase, and what the other ranks see: a case of the fault
 * matrix (scripts/fault-matrix.sh, results in docs/reliability.md). Run under strata-run:
 *
 *   fault_check --fault KIND:PHASE:RANK [--steps N]
 *
 * KIND: kill (SIGKILL), stop (SIGSTOP: alive, silent), exit (the process ends without
 * destroying anything), stall (sleeps --stall-ms, 5000 by default, alive and heartbeating).
 * PHASE: create (before strata_moe_create, while the others are in it), dispatch (after
 * its dispatch_send in the middle step), combine (after its combine_send there), p2p (in a
 * ring of writes with immediates after the steps, before its write).
 *
 * Every other rank prints one line: "rank R: completed" when every call succeeded, or
 * "rank R: STATUS after MS ms in PHASE" for the first call that failed, with the time that
 * call took; then it destroys what it made and exits 0. The values are not checked here
 * (moe_net_check does that); only what each rank is told, and how soon.
 */
#include <strata/strata.h>

#include "util/util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPERTS   8
#define TOPK      2
#define HIDDEN    128
#define TOKENS    16
#define P2P_BYTES 4096
#define P2P_IMM   7
#define P2P_ROUNDS 10

typedef enum fault_kind { FAULT_KILL, FAULT_STOP, FAULT_EXIT, FAULT_STALL } fault_kind_t;
typedef enum fault_phase { PHASE_CREATE, PHASE_DISPATCH, PHASE_COMBINE, PHASE_P2P } fault_phase_t;

static const char *const phase_names[] = {"create", "dispatch", "combine", "p2p"};
static const char *const kind_names[]  = {"kill", "stop", "exit", "stall"};

typedef struct fault {
    fault_kind_t  kind;
    fault_phase_t phase;
    int           rank;
    unsigned      stall_ms;
    int           steps;
} fault_t;

static int lookup(const char *const *names, int count, const char *name, size_t len)
{
    for (int i = 0; i < count; ++i) {
        if (strlen(names[i]) == len && strncmp(names[i], name, len) == 0) {
            return i;
        }
    }
    return -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: fault_check --fault kill|stop|exit|stall:create|dispatch|combine|p2p"
                    ":RANK [--steps N] [--stall-ms MS]\n");
    exit(2);
}

static fault_t parse(int argc, char **argv)
{
    fault_t f = {.rank = -1, .stall_ms = 5000, .steps = 6};

    for (int i = 1; i + 1 < argc; i += 2) {
        const char *v = argv[i + 1], *c1 = strchr(v, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        int kind, phase;

        if (strcmp(argv[i], "--steps") == 0) {
            f.steps = atoi(v);
        } else if (strcmp(argv[i], "--stall-ms") == 0) {
            f.stall_ms = (unsigned)atoi(v);
        } else if (strcmp(argv[i], "--fault") == 0 && c2 != NULL) {
            kind  = lookup(kind_names, 4, v, (size_t)(c1 - v));
            phase = lookup(phase_names, 4, c1 + 1, (size_t)(c2 - c1 - 1));
            if (kind < 0 || phase < 0) {
                usage();
            }
            f.kind  = (fault_kind_t)kind;
            f.phase = (fault_phase_t)phase;
            f.rank  = atoi(c2 + 1);
        } else {
            usage();
        }
    }
    if (f.rank < 0 || f.steps < 2) {
        usage();
    }
    return f;
}

/* The fault, where this rank is the one and this is the place. */
static void fault_point(const fault_t *f, int rank, fault_phase_t here)
{
    if (rank != f->rank || here != f->phase) {
        return;
    }
    fflush(NULL);
    switch (f->kind) {
    case FAULT_KILL:
        raise(SIGKILL);
        break;
    case FAULT_STOP:
        raise(SIGSTOP);
        break;
    case FAULT_EXIT:
        _exit(0);
    case FAULT_STALL:
        util_sleep_ns((uint64_t)f->stall_ms * UTIL_NSEC_PER_MSEC);
        break;
    }
}

/* What a survivor was told: the first failing call's status and duration, or success. */
typedef struct outcome {
    strata_status_t status;
    fault_phase_t   phase;
    uint64_t        took_ms;
} outcome_t;

static bool note(outcome_t *o, strata_status_t status, fault_phase_t phase, uint64_t start)
{
    if (status != STRATA_OK && o->status == STRATA_OK) {
        o->status  = status;
        o->phase   = phase;
        o->took_ms = (util_clock_now_ns() - start) / UTIL_NSEC_PER_MSEC;
    }
    return o->status == STRATA_OK;
}

typedef struct inputs {
    _Alignas(16) uint16_t x[TOKENS * HIDDEN];
    _Alignas(16) uint16_t out[TOKENS * HIDDEN];
    int64_t idx[TOKENS * TOPK];
    float   weights[TOKENS * TOPK];
} inputs_t;

static void make_inputs(inputs_t *in, int rank, int step)
{
    for (int t = 0; t < TOKENS; ++t) {
        for (int k = 0; k < TOPK; ++k) {
            in->idx[t * TOPK + k]     = (t + rank + step + k * 3) % EXPERTS;
            in->weights[t * TOPK + k] = 0.5f;
        }
    }
    memset(in->x, 0x3c, sizeof(in->x));
}

/* The steps, with the fault in the middle one. */
static void run_steps(const fault_t *f, strata_moe_t *moe, int rank, outcome_t *o)
{
    static inputs_t in;
    strata_moe_recv_t recv;
    uint64_t start;

    for (int step = 0; step < f->steps && o->status == STRATA_OK; ++step) {
        bool middle = step == f->steps / 2;

        make_inputs(&in, rank, step);
        start = util_clock_now_ns();
        if (!note(o, strata_moe_dispatch(moe, in.x, NULL, in.idx, TOKENS, &recv), PHASE_DISPATCH,
                  start)) {
            return;
        }
        if (middle) {
            fault_point(f, rank, PHASE_DISPATCH);
        }
        start = util_clock_now_ns();
        if (!note(o, strata_moe_combine_send(moe, NULL), PHASE_COMBINE, start)) {
            return;
        }
        if (middle) {
            fault_point(f, rank, PHASE_COMBINE);
        }
        note(o, strata_moe_combine_recv(moe, in.weights, in.out), PHASE_COMBINE, start);
    }
}

/* A ring of writes with immediates: each rank writes to the next and waits for the last. */
static void run_p2p(const fault_t *f, strata_comm_t *comm, strata_bootstrap_t *bs, outcome_t *o)
{
    int rank = strata_comm_rank(comm), size = strata_comm_size(comm);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    static char buf[2 * P2P_BYTES];
    strata_mem_desc_t mine, *all = calloc((size_t)size, sizeof(*all));
    strata_mem_t *mem = NULL;
    uint64_t start = util_clock_now_ns();

    if (all == NULL || !note(o, strata_mem_register(comm, buf, sizeof(buf), &mem), PHASE_P2P,
                             start)) {
        free(all);
        return;
    }
    strata_mem_descriptor(mem, &mine);
    note(o, bs->allgather(bs->ctx, &mine, all, sizeof(mine)), PHASE_P2P, start);
    for (int round = 0; round < P2P_ROUNDS && o->status == STRATA_OK; ++round) {
        strata_request_t *req = NULL;

        if (round == P2P_ROUNDS / 2) {
            fault_point(f, rank, PHASE_P2P);
        }
        start = util_clock_now_ns();
        if (note(o, strata_write(comm, next, mem, 0, &all[next], P2P_BYTES, P2P_BYTES,
                                 STRATA_WRITE_IMM, P2P_IMM, &req), PHASE_P2P, start)) {
            note(o, strata_request_wait(req, 120000), PHASE_P2P, start);
        }
        strata_request_free(req);
        if (o->status == STRATA_OK) {
            note(o, strata_imm_wait(comm, P2P_IMM, strata_write_imm_count(comm, prev, P2P_BYTES),
                                    prev, 120000), PHASE_P2P, start);
        }
    }
    strata_mem_deregister(comm, mem);
    free(all);
}

int main(int argc, char **argv)
{
    fault_t f = parse(argc, argv);
    strata_moe_params_t p = {.num_experts = EXPERTS, .topk = TOPK, .hidden = HIDDEN,
                             .dtype = STRATA_DTYPE_BF16, .combine_dtype = STRATA_DTYPE_BF16,
                             .max_tokens = TOKENS};
    outcome_t o = {.status = STRATA_OK};
    strata_bootstrap_t *bs = NULL;
    strata_comm_t *comm = NULL;
    strata_moe_t *moe = NULL;
    uint64_t start;
    int rank;

    if (strata_bootstrap_from_env(&bs) != STRATA_OK ||
        strata_comm_create(NULL, bs, &comm) != STRATA_OK) {
        fprintf(stderr, "fault_check: no communicator\n");
        return 1;
    }
    rank = strata_comm_rank(comm);
    fault_point(&f, rank, PHASE_CREATE);
    start = util_clock_now_ns();
    if (note(&o, strata_moe_create(comm, &p, &moe), PHASE_CREATE, start)) {
        run_steps(&f, moe, rank, &o);
    }
    if (o.status == STRATA_OK) {
        run_p2p(&f, comm, bs, &o);
    }
    if (o.status == STRATA_OK) {
        printf("rank %d: completed\n", rank);
    } else {
        printf("rank %d: %s after %llu ms in %s\n", rank, strata_status_string(o.status),
               (unsigned long long)o.took_ms, phase_names[o.phase]);
    }
    fflush(stdout);
    strata_moe_destroy(moe);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    return 0;
}
