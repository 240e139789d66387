/*
 * Run under strata-run on 4 ranks: a weight transfer plan from 2 trainer ranks (0, 1) to 2
 * inference ranks (2, 3). 300 tensors of random sizes; trainer t % 2 holds tensor t. Every
 * inference rank gets a whole copy of most tensors; every fifth is sharded (its first half
 * to rank 2, the rest to rank 3); every seventh goes as two adjacent pieces (merged into
 * one write); some land with their halves swapped (pieces adjacent at the destination,
 * not at the source: not merged). Three rounds, the trainers' tensors changing each round, the plan made once:
 * each inference rank waits for its tensors one at a time in a shuffled order and checks
 * each bit for bit as soon as its wait returns, then waits for the rest and checks that
 * the gaps between tensors kept their fill. Before that, plans every rank must refuse: two
 * pieces writing the same bytes (STRATA_ERR_INVALID), and one rank passing other pieces
 * than the rest (STRATA_ERR_CONFIG). With --kill-trainer, rank 0 dies in the middle of a
 * round (rank 1 still sending its half), and the inference ranks' waits end with
 * STRATA_ERR_PEER_FAILED. With --late-writes (under the chaos transport, which holds each
 * operation back), one round, then one whose trainers give up at once and overwrite their
 * tensors: nothing overwritten may land, since a round that returns STRATA_ERR_TIMEOUT no
 * longer reads the source.
 */
#include <strata/strata.h>

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "transfer_check rank %d: ", g_rank); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

#define TENSORS  300
#define GAP      64    /* bytes between tensors at the destinations, kept at FILL */
#define FILL     0xa5
#define IMM_BASE 1000u
#define WAIT_MS  30000u
#define POISON   0xfe  /* never a value(): value() is below 253 */
#define SETTLE_MS 500 /* longer than the chaos transport holds an operation in the test */

static int g_rank;

typedef struct model {
    size_t size[TENSORS], src_off[TENSORS], dst_off[TENSORS];
    size_t src_bytes[2], dst_bytes;
} model_t;

static uint64_t mix(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 33;
}

static void make_model(model_t *m)
{
    uint64_t state = 99;

    memset(m, 0, sizeof(*m));
    for (int t = 0; t < TENSORS; ++t) {
        m->size[t]    = 1 + mix(&state) % (48 << 10);
        m->src_off[t] = m->src_bytes[t % 2];
        m->src_bytes[t % 2] += m->size[t];
        m->dst_off[t] = m->dst_bytes + GAP;
        m->dst_bytes += GAP + m->size[t];
    }
    m->dst_bytes += GAP;
}

static unsigned char value(int round, int t, size_t byte)
{
    return (unsigned char)((round * 131 + t * 17 + byte * 7 + (byte >> 8)) % 253);
}

/* Whether tensor t lands with its halves swapped: its second half first. Its two pieces
 * are then adjacent at the destination but not at the source, and must not merge. */
static bool rotated(const model_t *m, int t)
{
    return t % 11 == 3 && t % 5 != 0 && m->size[t] > 1;
}

/* Bytes [*lo, *hi) of tensor t land on inference rank r. */
static void landing(const model_t *m, int t, int r, size_t *lo, size_t *hi)
{
    size_t half = m->size[t] / 2;

    *lo = 0;
    *hi = m->size[t];
    if (t % 5 == 0 && m->size[t] > 1) { /* sharded */
        *lo = r == 2 ? 0 : half;
        *hi = r == 2 ? half : m->size[t];
    }
}

static size_t add_piece(strata_transfer_piece_t *p, size_t n, const model_t *m, int t, int dst,
                        size_t lo, size_t hi)
{
    p[n++] = (strata_transfer_piece_t){.tensor = (uint32_t)t, .src_rank = t % 2,
                                       .src_offset = m->src_off[t] + lo, .dst_rank = dst,
                                       .dst_offset = m->dst_off[t] + lo, .length = hi - lo};
    return n;
}

/* Every piece of the model; *n_p of them. */
static strata_transfer_piece_t *make_pieces(const model_t *m, size_t *n_p)
{
    strata_transfer_piece_t *p = calloc(TENSORS * 4, sizeof(*p));
    size_t n = 0;

    CHECK(p != NULL, "memory");
    for (int t = 0; t < TENSORS; ++t) {
        for (int dst = 2; dst < 4; ++dst) {
            size_t lo, hi;

            landing(m, t, dst, &lo, &hi);
            if (hi <= lo) {
                continue;
            }
            if (rotated(m, t)) {
                size_t h = m->size[t] / 2, len = m->size[t];

                p[n++] = (strata_transfer_piece_t){
                    .tensor = (uint32_t)t, .src_rank = t % 2, .src_offset = m->src_off[t] + h,
                    .dst_rank = dst, .dst_offset = m->dst_off[t], .length = len - h};
                p[n++] = (strata_transfer_piece_t){
                    .tensor = (uint32_t)t, .src_rank = t % 2, .src_offset = m->src_off[t],
                    .dst_rank = dst, .dst_offset = m->dst_off[t] + len - h, .length = h};
            } else if (t % 7 == 1 && hi - lo > 1) { /* two adjacent pieces */
                n = add_piece(p, n, m, t, dst, lo, lo + (hi - lo) / 2);
                n = add_piece(p, n, m, t, dst, lo + (hi - lo) / 2, hi);
            } else {
                n = add_piece(p, n, m, t, dst, lo, hi);
            }
        }
    }
    *n_p = n;
    return p;
}

/* Plans every rank refuses, whatever rank it is. */
static void check_refusals(strata_comm_t *comm, strata_mem_t *region, strata_transfer_piece_t *p,
                           size_t n)
{
    strata_transfer_plan_t *plan = NULL;
    strata_transfer_piece_t saved = p[1];
    strata_status_t status;

    p[1].dst_offset = p[0].dst_offset; /* both write tensor 0's first bytes at rank 2 */
    p[1].dst_rank   = p[0].dst_rank;
    status = strata_transfer_plan_create(comm, region, p, n, TENSORS, IMM_BASE, &plan);
    CHECK(status == STRATA_ERR_INVALID && plan == NULL, "overlapping pieces: %s",
          strata_status_string(status));
    p[1] = saved;
    if (g_rank == 1) {
        p[5].length += 1; /* this rank alone passes another list */
    }
    status = strata_transfer_plan_create(comm, region, p, n, TENSORS, IMM_BASE, &plan);
    CHECK(status == STRATA_ERR_CONFIG && plan == NULL, "rank 1's other pieces: %s",
          strata_status_string(status));
    if (g_rank == 1) {
        p[5].length -= 1;
    }
}

static void fill_sources(const model_t *m, unsigned char *buf, int round)
{
    for (int t = g_rank; t < TENSORS; t += 2) {
        for (size_t b = 0; b < m->size[t]; ++b) {
            buf[m->src_off[t] + b] = value(round, t, b);
        }
    }
}

static void check_tensor(const model_t *m, const unsigned char *buf, int round, int t)
{
    size_t lo, hi;

    landing(m, t, g_rank, &lo, &hi);
    for (size_t b = lo; b < hi; ++b) { /* b: the byte's place at the destination */
        size_t from = rotated(m, t) ? (b + m->size[t] / 2) % m->size[t] : b;

        CHECK(buf[m->dst_off[t] + b] == value(round, t, from),
              "round %d: tensor %d byte %zu is 0x%02x, expected 0x%02x", round, t, b,
              buf[m->dst_off[t] + b], value(round, t, from));
    }
}

static void check_gaps(const model_t *m, const unsigned char *buf)
{
    for (int t = 0; t < TENSORS; ++t) {
        size_t lo, hi;

        landing(m, t, g_rank, &lo, &hi);
        for (size_t b = 0; b < GAP; ++b) {
            CHECK(buf[m->dst_off[t] - GAP + b] == FILL, "the gap before tensor %d was written",
                  t);
        }
        for (size_t b = 0; b < m->size[t]; ++b) {
            CHECK((b >= lo && b < hi) || buf[m->dst_off[t] + b] == FILL,
                  "tensor %d byte %zu, not this rank's, was written", t, b);
        }
    }
}

/* An inference rank's round: tensors waited for in a shuffled order, each checked at once. */
static void receive_round(const model_t *m, strata_transfer_plan_t *plan,
                          const unsigned char *buf, int round)
{
    int order[TENSORS];
    uint64_t state = 7u + (uint64_t)round * 31u + (uint64_t)g_rank;
    strata_status_t status;

    for (int t = 0; t < TENSORS; ++t) {
        order[t] = t;
    }
    for (int t = TENSORS - 1; t > 0; --t) {
        int u = (int)(mix(&state) % (uint64_t)(t + 1)), x = order[t];

        order[t] = order[u];
        order[u] = x;
    }
    for (int i = 0; i < TENSORS / 2; ++i) {
        status = strata_transfer_plan_wait_tensor(plan, (uint32_t)order[i], WAIT_MS);
        CHECK(status == STRATA_OK, "round %d: waiting for tensor %d: %s", round, order[i],
              strata_status_string(status));
        check_tensor(m, buf, round, order[i]);
    }
    status = strata_transfer_plan_wait(plan, WAIT_MS);
    CHECK(status == STRATA_OK, "round %d: waiting for the rest: %s", round,
          strata_status_string(status));
    for (int t = 0; t < TENSORS; ++t) {
        check_tensor(m, buf, round, t);
    }
}

static void poison_sources(const model_t *m, unsigned char *buf)
{
    for (int t = g_rank; t < TENSORS; t += 2) {
        memset(buf + m->src_off[t], POISON, m->size[t]);
    }
}

/* The bytes of this inference rank's tensors that hold round's values; none may be POISON. */
static size_t count_landed(const model_t *m, const unsigned char *buf, int round)
{
    size_t landed = 0;

    for (int t = 0; t < TENSORS; ++t) {
        size_t lo, hi;

        landing(m, t, g_rank, &lo, &hi);
        for (size_t b = lo; b < hi; ++b) {
            size_t from = rotated(m, t) ? (b + m->size[t] / 2) % m->size[t] : b;

            CHECK(buf[m->dst_off[t] + b] != POISON,
                  "tensor %d byte %zu was read from its source after the round gave up", t, b);
            landed += buf[m->dst_off[t] + b] == value(round, t, from);
        }
    }
    return landed;
}

/* --late-writes: round 1 with a bound of 1 ms, which the chaos transport's held operations
 * outlast; the trainers overwrite their tensors as soon as it returns. Once every operation
 * the round posted has had time to land, an inference rank finds only round 0's or round
 * 1's values, none of the overwritten ones. */
static void late_round(const model_t *m, strata_comm_t *comm, strata_transfer_plan_t *plan,
                       unsigned char *buf)
{
    strata_status_t status;

    if (g_rank < 2) {
        fill_sources(m, buf, 1);
    }
    CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier");
    status = strata_transfer_plan_execute(plan, 1);
    if (g_rank < 2) {
        CHECK(status == STRATA_ERR_TIMEOUT, "the late round's execute: %s, not a timeout",
              strata_status_string(status));
        poison_sources(m, buf);
    }
    CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier");
    usleep(SETTLE_MS * 1000);
    CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier");
    if (g_rank >= 2) {
        size_t landed = count_landed(m, buf, 1);

        check_gaps(m, buf);
        printf("rank %d: late round passed (%zu bytes of the round landed, none overwritten "
               "after it gave up)\n", g_rank, landed);
    } else {
        printf("rank %d: late round passed (gave up: %s)\n", g_rank,
               strata_status_string(status));
    }
    fflush(stdout);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    bool kill_trainer = argc > 1 && strcmp(argv[1], "--kill-trainer") == 0;
    bool late_writes  = argc > 1 && strcmp(argv[1], "--late-writes") == 0;
    int rounds        = late_writes ? 1 : 3;
    strata_transfer_piece_t *pieces;
    strata_transfer_plan_t *plan;
    strata_bootstrap_t *bs;
    strata_mem_t *region;
    strata_comm_t *comm;
    strata_status_t status;
    unsigned char *buf;
    size_t n, bytes;
    model_t m;
    double start;

    CHECK(strata_bootstrap_from_env(&bs) == STRATA_OK, "bootstrap");
    CHECK(strata_comm_create(NULL, bs, &comm) == STRATA_OK, "comm_create");
    g_rank = strata_comm_rank(comm);
    CHECK(strata_comm_size(comm) == 4, "4 ranks: 2 trainers, 2 inference ranks");
    make_model(&m);
    pieces = make_pieces(&m, &n);
    bytes  = g_rank < 2 ? m.src_bytes[g_rank] : m.dst_bytes;
    buf    = malloc(bytes);
    CHECK(buf != NULL, "memory");
    memset(buf, FILL, bytes);
    CHECK(strata_mem_register(comm, buf, bytes, &region) == STRATA_OK, "register");
    check_refusals(comm, region, pieces, n);
    status = strata_transfer_plan_create(comm, region, pieces, n, TENSORS, IMM_BASE, &plan);
    CHECK(status == STRATA_OK, "plan: %s", strata_status_string(status));
    for (int round = 0; round < rounds; ++round) {
        if (g_rank < 2) {
            fill_sources(&m, buf, round);
        }
        CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier");
        start = now_ms();
        if (kill_trainer && round == 1 && g_rank == 0) {
            kill(getpid(), SIGKILL); /* rank 1 sends its half of the round, rank 0 none */
        }
        status = strata_transfer_plan_execute(plan, WAIT_MS);
        if (kill_trainer && round == 1) {
            if (g_rank == 1) {
                _exit(0); /* its own writes may or may not have gone */
            }
            status = strata_transfer_plan_wait(plan, WAIT_MS);
            CHECK(status == STRATA_ERR_PEER_FAILED, "rank 0 died, and the wait gave %s",
                  strata_status_string(status));
            printf("rank %d: rank 0 failed after %.0f ms: %s\n", g_rank, now_ms() - start,
                   strata_status_string(status));
            fflush(stdout);
            _exit(0); /* the communicator cannot go on without rank 0 */
        }
        CHECK(status == STRATA_OK, "round %d: execute: %s", round, strata_status_string(status));
        if (g_rank >= 2) {
            receive_round(&m, plan, buf, round);
            check_gaps(&m, buf);
        }
        CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier"); /* read before rewritten */
    }
    if (late_writes) {
        late_round(&m, comm, plan, buf);
    } else {
        printf("rank %d: 3 rounds passed (%d tensors, %zu pieces, %zu bytes %s)\n", g_rank,
               TENSORS, n, g_rank < 2 ? m.src_bytes[g_rank] : m.dst_bytes,
               g_rank < 2 ? "sent from" : "received into");
    }
    strata_transfer_plan_destroy(plan);
    strata_mem_deregister(comm, region);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    free(buf);
    free(pieces);
    return 0;
}
