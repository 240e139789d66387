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
 * Options: --victim R (the rank that fails), --stop (SIGSTOP instead of SIGKILL; with
 * --resume, the survivors' rank 0 resumes it (SIGCONT) after its first good step, and the
 * victim, which the others declared failed, must shrink to a communicator of itself alone
 * and print "resumed alone", while the survivors go on; their rank 0 waits for that before
 * it ends), --at S
 * (the step it fails in, default 3), --steps N (after the shrink, default 5), --second R
 * (this rank dies too, a few milliseconds into its shrink, or as the shrink returns where
 * it was quicker, never in the middle of a step; with --second-first, just
 * before it, so that the others' agreement must count it and one shrink must do; with
 * --second-last-to T, it plays its part of the agreement by hand, sending its set, the
 * victim, to every survivor in the first two rounds and to rank T only in the last, and
 * taking theirs, then dies: the survivors must still agree, on the same members, and a
 * second shrink must leave it out), --slow R (this rank's engine
 * takes 60 s, or --slow-timeout S seconds, to declare a silent peer failed, and its steps
 * wait 4 s: it learns of the failure from the others' sets; when its engine declares the
 * victim failed at last, the shrunk communicator, which the victim is not in, must go on),
 * --failed-calls (with --moe: after the failed step, each survivor asks for a split and a
 * MoE object of the communicator with the failed rank, which must fail with
 * STRATA_ERR_PEER_FAILED and still count as one of the communicator's splits and objects:
 * a rank dying in such a call's exchanges could otherwise leave the survivors counting
 * differently, and their later shrinks talking on different channels, or their next
 * objects counting different immediates),
 * --step-ms M (a pause of M ms after each step on the shrunk communicator, so that its
 * steps span a time every rank agrees on without a clock: --steps N of them), --max-ms T (the time from the failure to the first good
 * step must be below T), --moe (each step also runs a MoE step, exact against the step
 * computed plainly: 2 experts per rank, top-2; after a shrink the object is recreated on
 * the shrunk communicator, the dead ranks' experts masked, and every token's masked slots
 * must be the ones strata_moe_masked reports), --reassign (the same, the dead ranks' experts
 * handed to the survivors in turn by an explicit map: nothing masked), --rejoin (after
 * the steps on the shrunk communicator, its rank 0 starts a replacement for the victim,
 * which joins through strata_comm_expand's rendezvous; the MoE object is recreated with
 * every expert back where it first was, the joiner passing no old object; more steps, all
 * exact; each process then prints "grew back to N ranks"), --map-refusals (with --moe:
 * before the recreation, rank 0 alone passes a map naming a rank that is not there, then
 * one unlike the others', and every rank must get INVALID, then CONFIG), --registered
 * (each step also writes, with an immediate, into the right neighbour's buffer that the
 * first communicator registered, through the descriptors exchanged then, and checks what
 * its left neighbour wrote: the shrunk communicators run on the first one's engine, so its
 * registrations and descriptors stay good after the first communicator is destroyed; not
 * with --rejoin, whose joiner has none). Prints, per survivor, "shrunk to N ranks" and
 * that time.
 */
#include "api/shrink_check.h"
#include "api/src/api_comm.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int g_first_rank;

#define MAX_SHRINKS 3

typedef struct ring_msg {
    int32_t  first_rank; /* the sender's rank in the first communicator */
    int32_t  step;
    uint64_t pattern;
} ring_msg_t;

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

/* --- Writes into memory the first communicator registered ------------------------------ */

#define MAX_FIRST 256

static strata_mem_t     *g_reg_mem;
static uint64_t          g_reg_buf[MAX_FIRST];        /* [first rank] what it wrote here */
static strata_mem_desc_t g_reg_descs[MAX_FIRST];      /* [first rank] its buffer */

/* Register the buffer on the first communicator and gather every rank's descriptor. */
static void registered_setup(strata_comm_t *comm, strata_bootstrap_t *bs)
{
    strata_mem_desc_t mine;

    CHECK(strata_mem_register(comm, g_reg_buf, sizeof(g_reg_buf), &g_reg_mem) == STRATA_OK,
          "registering the buffer");
    strata_mem_descriptor(g_reg_mem, &mine);
    CHECK(bs->allgather(bs->ctx, &mine, g_reg_descs, sizeof(mine)) == STRATA_OK,
          "exchanging the descriptors");
}

/* Write this rank's pattern into its slot at the right neighbour, wait for the left one's
 * (its own immediate per step: one left over from a failed step cannot stand in), check. */
static strata_status_t registered_step(strata_comm_t *comm, const int *first_of, int step)
{
    int n = strata_comm_size(comm), me = strata_comm_rank(comm);
    int right = (me + 1) % n, left = (me + n - 1) % n, from = first_of[left];
    uint32_t imm = 1 + (uint32_t)step % 30000;
    size_t slot = sizeof(uint64_t) * (size_t)g_first_rank;
    strata_request_t *req = NULL;
    strata_status_t status;

    if (n == 1) {
        return STRATA_OK;
    }
    g_reg_buf[g_first_rank] = pattern_of(g_first_rank, step);
    status = strata_write(comm, right, g_reg_mem, slot, &g_reg_descs[first_of[right]], slot,
                          sizeof(uint64_t), STRATA_WRITE_IMM, imm, &req);
    if (status == STRATA_OK) {
        status = strata_request_wait(req, g_wait_ms);
    }
    strata_request_free(req);
    if (status == STRATA_OK) {
        status = strata_imm_wait(comm, imm, strata_write_imm_count(comm, left, sizeof(uint64_t)),
                                 left, g_wait_ms);
    }
    if (status == STRATA_OK) {
        CHECK(g_reg_buf[from] == pattern_of(from, step),
              "step %d: the registered buffer holds %016llx from first rank %d, not its "
              "pattern", step, (unsigned long long)g_reg_buf[from], from);
    }
    return status;
}

/* The second rank's death: 1 to 20 ms into its shrink, or, where the shrink returned
 * sooner, before its first step after it. Never in the middle of a step, which the others
 * could end differently (some having heard from it, some not) and so run apart. */
static pthread_mutex_t g_death_lock = PTHREAD_MUTEX_INITIALIZER;
static bool            g_in_shrink, g_die_at_step;

static void *die_soon(void *arg)
{
    (void)arg;
    usleep(1000 + (useconds_t)(getpid() % 20) * 1000);
    pthread_mutex_lock(&g_death_lock);
    if (g_in_shrink) {
        raise(SIGKILL);
    }
    g_die_at_step = true;
    pthread_mutex_unlock(&g_death_lock);
    return NULL;
}

/* The failing rank's end: the time and its pid go to a file the survivors read. Returns
 * only where it is resumed (--resume). */
static void fail_now(const options_t *o, const char *dir)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/failed", dir);
    f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    fprintf(f, "%llu %d\n", (unsigned long long)now_ns(), (int)getpid());
    fclose(f);
    raise(o->stop ? SIGSTOP : SIGKILL);
    while (!o->resume) {
        pause(); /* stopped: strata-run ends it */
    }
}

/* The victim, resumed after the others left it out: they send it nothing, its engine
 * declares them failed as their heartbeats stop, and its shrink ends with itself alone.
 * It then leaves a file the survivors' rank 0 waits for before it ends. */
static void resumed_alone(strata_comm_t *comm, const char *dir)
{
    strata_comm_t *alone = NULL;
    strata_status_t status = strata_comm_shrink(comm, &alone);
    char path[512];
    FILE *f;

    CHECK(status == STRATA_OK, "the resumed victim's shrink: %s",
          strata_status_string(status));
    CHECK(strata_comm_size(alone) == 1, "the resumed victim shrank to %d ranks, not itself "
          "alone", strata_comm_size(alone));
    printf("rank %d resumed alone\n", g_first_rank);
    fflush(stdout);
    snprintf(path, sizeof(path), "%s/alone", dir);
    f = fopen(path, "w");
    CHECK(f != NULL && fclose(f) == 0, "cannot write %s", path);
    _exit(0); /* its first communicator's engine still runs: nothing to tear down */
}

/* What the failing rank wrote: the time it failed; its pid in *pid_p where not NULL. */
static uint64_t failed_at(const char *dir, int *pid_p)
{
    char path[512];
    unsigned long long t = 0;
    int pid = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/failed", dir);
    f = fopen(path, "r");
    CHECK(f != NULL && fscanf(f, "%llu %d", &t, &pid) == 2, "no failure time in %s", path);
    fclose(f);
    if (pid_p != NULL) {
        *pid_p = pid;
    }
    return t;
}

/* The survivors' rank 0 resumes the stopped victim, once. */
static void resume_victim(const char *dir)
{
    static bool resumed;
    int pid = 0;

    if (resumed) {
        return;
    }
    resumed = true;
    (void)failed_at(dir, &pid);
    CHECK(pid > 0 && kill((pid_t)pid, SIGCONT) == 0, "resuming the victim (pid %d)", pid);
}

/* The survivors' rank 0, at its end: the resumed victim's shrink must end first (strata-run
 * stops the ranks allowed to fail once the others are done). */
static void wait_resumed_alone(const char *dir)
{
    uint64_t until = now_ns() + 60ull * 1000000000ull;
    char path[512];

    snprintf(path, sizeof(path), "%s/alone", dir);
    while (access(path, F_OK) != 0) {
        CHECK(now_ns() < until, "the resumed victim did not end its shrink within 60 s");
        usleep(10000);
    }
}

static void parse(int argc, char **argv, options_t *o)
{
    *o = (options_t){.victim = 1, .second = -1, .second_last_to = -1, .slow = -1,
                     .slow_timeout = 60, .at = 3, .steps = 5};
    for (int i = 1; i < argc; ++i) {
        bool has = i + 1 < argc;

        if (!strcmp(argv[i], "--victim") && has) {
            o->victim = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--second") && has) {
            o->second = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--second-last-to") && has) {
            o->second_last_to = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--slow") && has) {
            o->slow = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--slow-timeout") && has) {
            o->slow_timeout = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--step-ms") && has) {
            o->step_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--max-ms") && has) {
            o->max_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--at") && has) {
            o->at = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--steps") && has) {
            o->steps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--moe")) {
            o->moe = true;
        } else if (!strcmp(argv[i], "--map-refusals")) {
            o->moe = o->map_refusals = true;
        } else if (!strcmp(argv[i], "--rejoin")) {
            o->rejoin = true;
        } else if (!strcmp(argv[i], "--join") && i + 3 < argc) {
            o->join_addr = argv[++i];
            o->join_port = atoi(argv[++i]);
            o->join_rank = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reassign")) {
            o->moe = o->reassign = true;
        } else if (!strcmp(argv[i], "--failed-calls")) {
            o->moe = o->failed_calls = true;
        } else if (!strcmp(argv[i], "--registered")) {
            o->registered = true;
        } else if (!strcmp(argv[i], "--second-first")) {
            o->second_first = true;
        } else if (!strcmp(argv[i], "--stop")) {
            o->stop = true;
        } else if (!strcmp(argv[i], "--resume")) {
            o->stop = o->resume = true;
        } else {
            CHECK(0, "unknown option %s", argv[i]);
        }
    }
}

/* The second rank's part of the first shrink, by hand: in each round its set (the
 * victim) to every survivor (in the last round to o->second_last_to only), then each
 * survivor's set of the round, which proves that survivor began the round with this rank
 * outside its set; after the last round it dies. So the survivors all begin the last
 * round agreeing that it is alive, and only o->second_last_to gets its last set. */
static void die_after_partial_shrink(strata_comm_t *comm, const int *first_of,
                                     const options_t *o)
{
    int n = strata_comm_size(comm), me = strata_comm_rank(comm);
    uint8_t set[256] = {0};

    for (int r = 0; r < n; ++r) {
        set[r] = first_of[r] == o->victim;
    }
    for (uint32_t round = 1; round <= 3; ++round) {
        uint8_t theirs[256];

        for (int r = 0; r < n; ++r) {
            bool to = !set[r] && r != me && (round < 3 || first_of[r] == o->second_last_to);

            CHECK(!to || api_shrink_send_set(comm, round, set, r) == STRATA_OK,
                  "round %u's set to rank %d", round, r);
        }
        for (int r = 0; r < n; ++r) {
            if (set[r] || r == me) {
                continue;
            }
            memcpy(theirs, set, sizeof(theirs));
            CHECK(api_shrink_recv_set(comm, round, r, theirs, 30ull * 1000000000ull) ==
                      STRATA_OK, "rank %d's set of round %u", r, round);
            CHECK(memcmp(theirs, set, sizeof(theirs)) == 0, "rank %d's set of round %u names "
                  "other ranks than the victim", r, round);
        }
    }
    usleep(100 * 1000); /* the last set on its way */
    raise(SIGKILL);
}

/* A split of comm, whose failed rank every rank's engine has declared: the call fails, and
 * counts as one of comm's splits all the same. */
static void split_fails(strata_comm_t *comm)
{
    unsigned before = comm->splits;
    strata_comm_t *sub = NULL;
    strata_status_t status = strata_comm_split(comm, 0, strata_comm_rank(comm), &sub);

    CHECK(status == STRATA_ERR_PEER_FAILED && sub == NULL,
          "strata_comm_split with a rank failed returned %s", strata_status_string(status));
    CHECK(comm->splits == before + 1, "the failed strata_comm_split counted %u splits, not 1",
          comm->splits - before);
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
    if (g_first_rank == o->second && o->second_last_to >= 0) {
        die_after_partial_shrink(*comm, first_of, o);
    }
    if (g_first_rank == o->second) {
        g_in_shrink = true;
        CHECK(pthread_create(&killer, NULL, die_soon, NULL) == 0, "thread");
    }
    status = strata_comm_shrink(*comm, &shrunk);
    if (g_first_rank == o->second) {
        pthread_mutex_lock(&g_death_lock);
        g_in_shrink = false;
        pthread_mutex_unlock(&g_death_lock);
        pthread_join(killer, NULL);
        if (g_die_at_step) {
            raise(SIGKILL);
        }
    }
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

/* A step of the job: the ring, then the MoE step where there is an object. */
strata_status_t job_step(strata_comm_t *comm, strata_moe_t *moe, const int *first_of,
                                int step, const options_t *o)
{
    strata_status_t status = ring_step(comm, first_of, step);

    if (status == STRATA_OK && o->registered) {
        status = registered_step(comm, first_of, step);
    }
    if (status == STRATA_OK && moe != NULL) {
        status = moe_step(moe, first_of, strata_comm_size(comm), step, o->reassign);
    }
    return status;
}

int main(int argc, char **argv)
{
    const char *dir = getenv("STRATA_TEST_CASE_DIR");
    int first_of[256], shrinks = 0, expected, step = 0;
    strata_bootstrap_t *bs;
    strata_comm_t *comm;
    strata_status_t status;
    uint64_t good_ns = 0;
    strata_moe_t *moe = NULL;
    pid_t joiner = -1;
    double elapsed_ms;
    options_t o;

    parse(argc, argv, &o);
    if (o.join_addr != NULL) {
        return run_joiner(&o);
    }
    CHECK(dir != NULL, "STRATA_TEST_CASE_DIR (a folder of this case's own) is not set");
    if (o.slow >= 0 && getenv("RANK") != NULL && atoi(getenv("RANK")) == o.slow) {
        char timeout[32];

        snprintf(timeout, sizeof(timeout), "%ds", o.slow_timeout);
        setenv("STRATA_INTER_PEER_TIMEOUT", timeout, 1);
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
    g_experts = EXPERTS_PER_RANK * strata_comm_size(comm);
    CHECK(!o.registered || !o.rejoin, "--registered with --rejoin: the joiner registered nothing");
    if (o.registered) {
        registered_setup(comm, bs);
    }
    moe = o.moe ? moe_first(comm) : NULL;
    for (; step < o.at; ++step) {
        CHECK(job_step(comm, moe, first_of, step, &o) == STRATA_OK, "step %d before the failure",
              step);
    }
    if (g_first_rank == o.victim) {
        fail_now(&o, dir);
        resumed_alone(comm, dir);
    }
    status = job_step(comm, moe, first_of, step, &o);
    CHECK(status == STRATA_ERR_PEER_FAILED ||
              (g_first_rank == o.slow && status == STRATA_ERR_TIMEOUT),
          "the step with the failure returned %s", strata_status_string(status));
    if (o.failed_calls) {
        split_fails(comm);
        moe_create_fails(comm);
    }
    for (int good = 0; good < o.steps;) {
        if (status != STRATA_OK) {
            CHECK(++shrinks <= MAX_SHRINKS, "still failing after %d shrinks: %s", MAX_SHRINKS,
                  strata_status_string(status));
            status = shrink(&comm, first_of, &o);
            if (status == STRATA_OK && moe != NULL) {
                status = moe_again(&moe, comm, first_of, o.reassign, o.map_refusals);
            }
            if (status != STRATA_OK) {
                continue; /* a second failure: shrink again */
            }
        }
        status = job_step(comm, moe, first_of, ++step, &o);
        if (status == STRATA_OK && good++ == 0) {
            good_ns = now_ns();
            if (o.resume && strata_comm_rank(comm) == 0) {
                resume_victim(dir);
            }
        }
        if (status != STRATA_OK) {
            good = 0;
        } else if (o.step_ms > 0) {
            usleep((useconds_t)o.step_ms * 1000);
        }
    }
    CHECK(strata_comm_size(comm) == expected, "shrunk to %d ranks, %d expected",
          strata_comm_size(comm), expected);
    CHECK(o.second_last_to < 0 || shrinks == 2, "%d shrinks: the first should have kept the "
          "rank that died in its last round, on every survivor, and the second left it out",
          shrinks);
    CHECK(!o.second_first || shrinks == 1, "%d shrinks where the agreement should have "
          "counted both failed ranks", shrinks);
    elapsed_ms = (double)(good_ns - failed_at(dir, NULL)) / 1e6;
    CHECK(o.max_ms == 0 || elapsed_ms < o.max_ms,
          "the first good step came %.0f ms after the failure (bound %d ms)", elapsed_ms,
          o.max_ms);
    if (o.resume && strata_comm_rank(comm) == 0) {
        wait_resumed_alone(dir);
    }
    printf("shrunk to %d ranks in %d shrink%s: the failure to the first good step %.0f ms\n",
           strata_comm_size(comm), shrinks, shrinks == 1 ? "" : "s", elapsed_ms);
    if (o.rejoin) {
        joiner = grow_back(&comm, &moe, first_of, argc, argv, &o);
    }
    strata_barrier(comm, WAIT_MS); /* nobody leaves while another still waits on it */
    if (g_reg_mem != NULL) {
        strata_mem_deregister(comm, g_reg_mem); /* the first communicator's, on this engine */
    }
    strata_moe_destroy(moe);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    if (joiner > 0) {
        int how;

        CHECK(waitpid(joiner, &how, 0) == joiner && WIFEXITED(how) && WEXITSTATUS(how) == 0,
              "the joiner failed");
    }
    return 0;
}
