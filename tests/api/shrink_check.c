/*
 * Run under strata-run: ranks exchange checked messages in a ring, step after step; at a
 * chosen step one rank dies (SIGKILL) or stops (SIGSTOP). Every survivor must see its step
 * fail with STRATA_ERR_PEER_FAILED, call strata_comm_shrink, and go on on the shrunk
 * communicator: its size and numbering are checked (the survivors in their old order, which
 * strata_comm_parent_rank must give), and each ring message carries its sender's first rank,
 * so a rank paired with the wrong neighbour fails. A shrink or a step that fails again
 * (a second failure) is followed by another shrink, at most three in all; the job must end
 * with exactly the ranks that were not made to fail.
 *
 * Options: --victim R (the rank that fails), --stop (SIGSTOP instead of SIGKILL), --at S
 * (the step it fails in, default 3), --steps N (after the shrink, default 5), --second R
 * (this rank dies too, a few milliseconds into its shrink; with --second-first, just
 * before it, so that the others' agreement must count it and one shrink must do), --slow R (this rank's engine
 * takes 60 s to declare a silent peer failed, and its steps wait 4 s: it learns of the
 * failure from the others' sets), --max-ms T (the time from the failure to the first good
 * step must be below T). Prints, per survivor, "shrunk to N ranks" and that time.
 */
#include <strata/strata.h>

#include <pthread.h>
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
            fprintf(stderr, "shrink_check rank %d: ", g_first_rank); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

#define WAIT_MS     30000u
#define MAX_SHRINKS 3

static int g_first_rank;

typedef struct ring_msg {
    int32_t  first_rank; /* the sender's rank in the first communicator */
    int32_t  step;
    uint64_t pattern;
} ring_msg_t;

typedef struct options {
    int  victim, second, slow, at, steps, max_ms;
    bool stop, second_first;
} options_t;

static uint32_t g_wait_ms = WAIT_MS;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts); /* the same clock in every rank of the machine */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t pattern_of(int first_rank, int step)
{
    return 0x9e3779b97f4a7c15ull * (uint64_t)(first_rank + 1) + (uint64_t)step * 1000003u;
}

/* One ring step: send to the right, receive from the left, check who sent it; then a
 * barrier. first_of[r]: rank r's first rank. */
static strata_status_t ring_step(strata_comm_t *comm, const int *first_of, int step)
{
    int n = strata_comm_size(comm), me = strata_comm_rank(comm);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    ring_msg_t out = {first_of[me], step, pattern_of(first_of[me], step)}, in;
    strata_request_t *send = NULL, *recv = NULL;
    strata_status_t status;

    if (n == 1) {
        return strata_barrier(comm, g_wait_ms);
    }
    status = strata_recv(comm, left, &in, sizeof(in), &recv);
    if (status == STRATA_OK) {
        status = strata_send(comm, right, &out, sizeof(out), &send);
    }
    if (status == STRATA_OK) {
        status = strata_request_wait(recv, g_wait_ms);
    }
    if (status == STRATA_OK) {
        CHECK(strata_request_length(recv) == sizeof(in) && in.first_rank == first_of[left] &&
                  in.step == step && in.pattern == pattern_of(first_of[left], step),
              "step %d: from the left (first rank %d expected) came first rank %d, step %d",
              step, first_of[left], in.first_rank, in.step);
        status = strata_request_wait(send, g_wait_ms);
    }
    if (status != STRATA_OK) {
        strata_request_cancel(recv);
        strata_request_cancel(send);
        strata_request_wait(recv, WAIT_MS);
        strata_request_wait(send, WAIT_MS);
    }
    strata_request_free(recv);
    strata_request_free(send);
    return status == STRATA_OK ? strata_barrier(comm, g_wait_ms) : status;
}

static void *die_soon(void *arg)
{
    (void)arg;
    usleep(1000 + (useconds_t)(getpid() % 20) * 1000);
    raise(SIGKILL);
    return NULL;
}

/* The failing rank's end: the time goes to a file the survivors read. */
static void fail_now(const options_t *o, const char *dir)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/failed", dir);
    f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    fprintf(f, "%llu\n", (unsigned long long)now_ns());
    fclose(f);
    raise(o->stop ? SIGSTOP : SIGKILL);
    for (;;) {
        pause(); /* stopped: strata-run ends it */
    }
}

static uint64_t failed_at(const char *dir)
{
    char path[512];
    unsigned long long t = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/failed", dir);
    f = fopen(path, "r");
    CHECK(f != NULL && fscanf(f, "%llu", &t) == 1, "no failure time in %s", path);
    fclose(f);
    return t;
}

static void parse(int argc, char **argv, options_t *o)
{
    *o = (options_t){.victim = 1, .second = -1, .slow = -1, .at = 3, .steps = 5};
    for (int i = 1; i < argc; ++i) {
        bool has = i + 1 < argc;

        if (!strcmp(argv[i], "--victim") && has) {
            o->victim = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--second") && has) {
            o->second = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--slow") && has) {
            o->slow = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--max-ms") && has) {
            o->max_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--at") && has) {
            o->at = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--steps") && has) {
            o->steps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--second-first")) {
            o->second_first = true;
        } else if (!strcmp(argv[i], "--stop")) {
            o->stop = true;
        } else {
            CHECK(0, "unknown option %s", argv[i]);
        }
    }
}

/* Shrink comm; the new first-rank table from the parent ranks; the old comm is destroyed. */
static strata_status_t shrink(strata_comm_t **comm, int *first_of, const options_t *o)
{
    int old_first[256];
    strata_comm_t *shrunk = NULL;
    strata_status_t status;
    pthread_t killer;

    memcpy(old_first, first_of, sizeof(int) * (size_t)strata_comm_size(*comm));
    if (g_first_rank == o->second && o->second_first) {
        raise(SIGKILL);
    }
    if (g_first_rank == o->second) {
        CHECK(pthread_create(&killer, NULL, die_soon, NULL) == 0, "thread");
    }
    status = strata_comm_shrink(*comm, &shrunk);
    if (status != STRATA_OK) {
        return status;
    }
    for (int r = 0; r < strata_comm_size(shrunk); ++r) {
        int parent = strata_comm_parent_rank(shrunk, r);

        CHECK(parent >= 0 && parent < strata_comm_size(*comm) &&
                  (r == 0 || parent > strata_comm_parent_rank(shrunk, r - 1)),
              "shrunk rank %d: parent rank %d out of order", r, parent);
        first_of[r] = old_first[parent];
    }
    CHECK(first_of[strata_comm_rank(shrunk)] == g_first_rank,
          "this rank's entry in the shrunk communicator is first rank %d",
          first_of[strata_comm_rank(shrunk)]);
    strata_comm_destroy(*comm);
    *comm = shrunk;
    return STRATA_OK;
}

int main(int argc, char **argv)
{
    const char *dir = getenv("SHRINK_CHECK_DIR");
    int first_of[256], shrinks = 0, expected, step = 0;
    strata_bootstrap_t *bs;
    strata_comm_t *comm;
    strata_status_t status;
    uint64_t good_ns = 0;
    double elapsed_ms;
    options_t o;

    parse(argc, argv, &o);
    CHECK(dir != NULL, "SHRINK_CHECK_DIR is not set");
    if (o.slow >= 0 && getenv("RANK") != NULL && atoi(getenv("RANK")) == o.slow) {
        setenv("STRATA_INTER_PEER_TIMEOUT", "60s", 1);
        g_wait_ms = 4000;
    }
    CHECK(strata_bootstrap_from_env(&bs) == STRATA_OK, "bootstrap");
    CHECK(strata_comm_create(NULL, bs, &comm) == STRATA_OK, "comm_create");
    g_first_rank = strata_comm_rank(comm);
    CHECK(strata_comm_size(comm) <= 256 && strata_comm_parent_rank(comm, 0) == -1,
          "a first communicator of at most 256 ranks, with no parent");
    expected = strata_comm_size(comm) - 1 - (o.second >= 0);
    for (int r = 0; r < strata_comm_size(comm); ++r) {
        first_of[r] = r;
    }
    for (; step < o.at; ++step) {
        CHECK(ring_step(comm, first_of, step) == STRATA_OK, "step %d before the failure", step);
    }
    if (g_first_rank == o.victim) {
        fail_now(&o, dir);
    }
    status = ring_step(comm, first_of, step);
    CHECK(status == STRATA_ERR_PEER_FAILED ||
              (g_first_rank == o.slow && status == STRATA_ERR_TIMEOUT),
          "the step with the failure returned %s", strata_status_string(status));
    for (int good = 0; good < o.steps;) {
        if (status != STRATA_OK) {
            CHECK(++shrinks <= MAX_SHRINKS, "still failing after %d shrinks: %s", MAX_SHRINKS,
                  strata_status_string(status));
            status = shrink(&comm, first_of, &o);
            if (status != STRATA_OK) {
                continue; /* a second failure: shrink again */
            }
        }
        status = ring_step(comm, first_of, ++step);
        if (status == STRATA_OK && good++ == 0) {
            good_ns = now_ns();
        }
        if (status != STRATA_OK) {
            good = 0;
        }
    }
    CHECK(strata_comm_size(comm) == expected, "shrunk to %d ranks, %d expected",
          strata_comm_size(comm), expected);
    CHECK(!o.second_first || shrinks == 1, "%d shrinks where the agreement should have "
          "counted both failed ranks", shrinks);
    elapsed_ms = (double)(good_ns - failed_at(dir)) / 1e6;
    CHECK(o.max_ms == 0 || elapsed_ms < o.max_ms,
          "the first good step came %.0f ms after the failure (bound %d ms)", elapsed_ms,
          o.max_ms);
    printf("shrunk to %d ranks in %d shrink%s: the failure to the first good step %.0f ms\n",
           strata_comm_size(comm), shrinks, shrinks == 1 ? "" : "s", elapsed_ms);
    strata_barrier(comm, WAIT_MS); /* nobody leaves while another still waits on it */
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    return 0;
}
