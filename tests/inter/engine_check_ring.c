/*
 * The engine check's work rings: host threads play the producers GPU kernels are, posting
 * commands that the proxy validates, posts and counts; a bad command; a peer killed while
 * producers feed a ring, after which a ring and a failure watch over the survivors only
 * (numbered their own way, as a shrunk communicator numbers them) go on.
 */
#include "inter/engine_check.h"

#define RING_SLOTS     8  /* fewer than the commands: producers must wait for credit */
#define RING_WRITES    32 /* commands that carry one rank's source to one peer */
#define RING_READ      4096
#define RING_IMM       600
#define RING_PRODUCERS 3
#define SURVIVOR_WRITE 4096

typedef struct ring_test {
    unsigned char    *buf;  /* [src SLOT][dst: world x SLOT][read back: world x RING_READ] */
    inter_mr_t       *mr;
    inter_rdesc_t     desc[MAX_RANKS];
    util_work_ring_t *mem;
    inter_ring_t     *ring;
    _Atomic uint64_t  head; /* the producers' ticket counter */
    atomic_int        next; /* the producers' next command */
    int               num_cmds;
} ring_test_t;

static size_t ring_dst(int src)
{
    return SLOT + (size_t)src * SLOT;
}

static size_t ring_back(int peer)
{
    return SLOT + (size_t)g_world * SLOT + (size_t)peer * RING_READ;
}

/* One command through the ring as a kernel block posts it; the failure word if it ended. */
static strata_status_t ring_post(ring_test_t *t, util_work_cmd_t cmd)
{
    uint64_t ticket = atomic_fetch_add(&t->head, 1);
    util_work_cmd_t *slot = &util_work_ring_cmds(t->mem)[ticket % RING_SLOTS];
    uint64_t deadline = util_clock_now_ns() + WAIT_NS;
    int64_t failure;

    /* Acquire: pairs with the proxy's release of credit once the slot is free. */
    while (atomic_load_explicit((_Atomic uint64_t *)&t->mem->credit, memory_order_acquire) <=
           ticket) {
        failure = atomic_load_explicit((_Atomic int64_t *)&t->mem->failure, memory_order_acquire);
        if (failure != 0) {
            return (strata_status_t)failure;
        }
        if (util_clock_now_ns() > deadline) {
            return STRATA_ERR_TIMEOUT; /* credit never came back */
        }
        sched_yield();
    }
    cmd.stamp = util_clock_now_ns();
    cmd.seq   = 0;
    memcpy((char *)slot + sizeof(slot->seq), (char *)&cmd + sizeof(cmd.seq),
           sizeof(cmd) - sizeof(cmd.seq));
    /* Release: the command before its sequence number; the proxy acquires it. */
    atomic_store_explicit((_Atomic uint64_t *)&slot->seq, ticket + 1, memory_order_release);
    return STRATA_OK;
}

/* Command i of this rank: RING_WRITES writes of its source to each rank, then a read of the
 * first RING_READ bytes of each rank's source. */
static util_work_cmd_t ring_cmd(int i)
{
    size_t piece = SLOT / RING_WRITES;

    if (i < g_world * RING_WRITES) {
        int dst = i / RING_WRITES, j = i % RING_WRITES;

        return (util_work_cmd_t){.op = UTIL_WORK_WRITE_IMM, .peer = dst, .counter = 0,
                                 .imm = RING_IMM + (uint32_t)g_rank, .offset = (size_t)j * piece,
                                 .remote_offset = ring_dst(g_rank) + (size_t)j * piece,
                                 .length = piece};
    }
    i -= g_world * RING_WRITES;
    return (util_work_cmd_t){.op = UTIL_WORK_READ, .peer = i, .counter = 1,
                             .offset = ring_back(i), .remote_offset = 0, .length = RING_READ};
}

static void *ring_producer(void *arg)
{
    ring_test_t *t = arg;

    for (int i; (i = atomic_fetch_add(&t->next, 1)) < t->num_cmds;) {
        strata_status_t status = ring_post(t, ring_cmd(i));

        CHECK(status == STRATA_OK, "ring command %d: %s", i, strata_status_string(status));
    }
    return NULL;
}

static void ring_open(ring_test_t *t, uint32_t imm_base, bool flush_by_read)
{
    size_t bytes = SLOT + (size_t)g_world * (SLOT + RING_READ);
    inter_ring_params_t p = {.slots = RING_SLOTS, .num_counters = 2, .num_imms = (uint32_t)g_world,
                             .imm_base = imm_base, .num_regions = 1, .host_stamps = true,
                             .flush_by_read = flush_by_read};

    t->buf = util_alloc_aligned(4096, bytes);
    t->mem = util_alloc_aligned(64, util_work_ring_bytes(RING_SLOTS, 2, (uint32_t)g_world));
    CHECK(t->buf && t->mem, "memory");
    memset(t->buf, 0, bytes);
    for (size_t i = 0; i < SLOT; ++i) {
        t->buf[i] = pattern(77, g_rank, i);
    }
    CHECK(inter_engine_mem_register(g_engine, t->buf, bytes, &t->mr) == STRATA_OK, "register");
    inter_engine_mem_descriptor(t->mr, &t->desc[g_rank]);
    CHECK(g_bs->allgather(g_bs->ctx, &t->desc[g_rank], t->desc, sizeof(inter_rdesc_t)) ==
              STRATA_OK, "ring descriptors");
    p.mem        = t->mem;
    p.regions[0] = t->mr;
    p.remote[0]  = t->desc;
    CHECK(inter_engine_ring_attach(g_engine, &p, &t->ring) == STRATA_OK, "attach");
    /* Every rank counts the ring's immediates before anyone writes. */
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier after attach");
}

static void ring_close(ring_test_t *t)
{
    inter_engine_ring_detach(g_engine, t->ring);
    inter_engine_mem_deregister(g_engine, t->mr);
    free(t->buf);
    free(t->mem);
}

/* Wait until *word >= want, or the ring's failure word is set. */
static strata_status_t ring_wait(ring_test_t *t, const uint64_t *word, uint64_t want)
{
    uint64_t deadline = util_clock_now_ns() + WAIT_NS;

    while (atomic_load_explicit((_Atomic uint64_t *)word, memory_order_acquire) < want) {
        int64_t failure = atomic_load_explicit((_Atomic int64_t *)&t->mem->failure,
                                               memory_order_acquire);

        if (failure != 0) {
            return (strata_status_t)failure;
        }
        if (util_clock_now_ns() > deadline) {
            return STRATA_ERR_TIMEOUT;
        }
        sched_yield();
    }
    return STRATA_OK;
}

/* Operations rate control has held back so far, to every peer. */
static uint64_t held_so_far(void)
{
    inter_peer_rate_t rate;
    uint64_t held = 0;

    for (int p = 0; p < g_world; ++p) {
        CHECK(inter_engine_peer_rate(g_engine, p, &rate) == STRATA_OK, "rate of %d", p);
        held += rate.paced;
    }
    return held;
}

/* Every rank sends its source to every rank and reads back from each, through a ring of
 * fewer slots than commands, from several producer threads; counts and bytes exact. With
 * rate control on, the ring's writes (each larger than a 16 KiB chunk) must have waited
 * for their peers' windows: commands are paced like requests. flush_by_read: the counts
 * wait for loopback reads through the transport, which must have been made. */
void work_ring(bool flush_by_read)
{
    ring_test_t t = {.num_cmds = g_world * (RING_WRITES + 1)};
    pthread_t producers[RING_PRODUCERS];
    inter_ring_params_t overlap;
    inter_engine_params_t params;
    inter_ring_stats_t stats;
    inter_ring_t *other;
    uint64_t held_before;

    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    ring_open(&t, RING_IMM, flush_by_read);
    held_before = held_so_far();
    for (int i = 0; i < RING_PRODUCERS; ++i) {
        CHECK(pthread_create(&producers[i], NULL, ring_producer, &t) == 0, "producer");
    }
    for (int i = 0; i < RING_PRODUCERS; ++i) {
        pthread_join(producers[i], NULL);
    }
    CHECK(ring_wait(&t, &util_work_ring_counters(t.mem)[0], (uint64_t)g_world * RING_WRITES) ==
              STRATA_OK && ring_wait(&t, &util_work_ring_counters(t.mem)[1], (uint64_t)g_world) ==
              STRATA_OK, "ring commands did not complete");
    for (int src = 0; src < g_world; ++src) {
        CHECK(ring_wait(&t, &util_work_ring_imms(t.mem)[src], RING_WRITES) == STRATA_OK,
              "immediates from rank %d", src);
    }
    CHECK(!params.rate_control || held_so_far() > held_before,
          "rate control on, yet no work ring command waited for a window");
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier after the ring's writes");
    for (int src = 0; src < g_world; ++src) {
        CHECK(util_work_ring_imms(t.mem)[src] == RING_WRITES, "%llu immediates from rank %d",
              (unsigned long long)util_work_ring_imms(t.mem)[src], src);
        for (size_t i = 0; i < SLOT; ++i) {
            CHECK(t.buf[ring_dst(src) + i] == pattern(77, src, i), "ring byte %zu from %d", i, src);
        }
        for (size_t i = 0; i < RING_READ; ++i) {
            CHECK(t.buf[ring_back(src) + i] == pattern(77, src, i), "read byte %zu of %d", i, src);
        }
    }
    CHECK(t.mem->credit == (uint64_t)t.num_cmds + RING_SLOTS, "credit %llu",
          (unsigned long long)t.mem->credit);
    inter_ring_stats(t.ring, &stats);
    CHECK(stats.commands == (uint64_t)t.num_cmds && stats.stamped == stats.commands,
          "stats: %llu commands", (unsigned long long)stats.commands);
    CHECK(flush_by_read ? stats.flushes > 0 : stats.flushes == 0, "%llu loopback reads",
          (unsigned long long)stats.flushes);
    /* A second ring may not count the same immediates. */
    overlap = (inter_ring_params_t){.mem = util_alloc_aligned(64, util_work_ring_bytes(4, 1, 4)),
                                    .slots = 4, .num_counters = 1, .num_imms = 4,
                                    .imm_base = RING_IMM + 1, .num_regions = 1,
                                    .regions = {t.mr}, .remote = {t.desc}};
    CHECK(inter_engine_ring_attach(g_engine, &overlap, &other) == STRATA_ERR_BUSY, "overlap");
    free(overlap.mem);
    ring_close(&t);
}

/* A command reaching past its region fails the ring (STRATA_ERR_INVALID), nothing else. */
void work_ring_bad_command(void)
{
    ring_test_t t = {0};
    util_work_cmd_t cmd = {.op = UTIL_WORK_WRITE, .peer = (g_rank + 1) % g_world,
                           .offset = SLOT, .remote_offset = 0, .length = 64ull << 30};

    ring_open(&t, RING_IMM + MAX_RANKS, false);
    CHECK(ring_post(&t, cmd) == STRATA_OK, "post");
    CHECK(ring_wait(&t, &util_work_ring_counters(t.mem)[0], 1) == STRATA_ERR_INVALID,
          "a bad command did not fail the ring");
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "the engine goes on after a failed ring");
    ring_close(&t);
}

/* After victim died: a ring over the survivors, numbered 0.. in rank order as a shrunk
 * communicator numbers them, carries a write to the next survivor and its immediate (the
 * proxy maps its peers to the engine's ranks), and neither it nor a failure watch over the
 * survivors learns of the death, while a watch over every rank does. The write is 4 KiB:
 * on tcp;ofi_rxm, a rank that went on writing 512 KiB pieces to the dead peer for the
 * whole peer timeout (thousands of them, as kill_ring_test does) could not then complete
 * a write with an immediate above rxm's 16 KiB eager size to a live one (docs/reliability.md,
 * "Elastic"); after a few dozen such writes it could. */
static void survivors_ring(ring_test_t *dead_ring, int victim)
{
    int survivors[MAX_RANKS], n = 0, me = -1, next, prev;
    inter_rdesc_t descs[MAX_RANKS];
    util_work_ring_t *mem = util_alloc_aligned(64, util_work_ring_bytes(4, 1, MAX_RANKS));
    ring_test_t t = {.buf = dead_ring->buf, .mr = dead_ring->mr, .mem = mem};
    inter_ring_params_t p = {.mem = mem, .slots = 4, .num_counters = 1, .num_imms = MAX_RANKS,
                             .imm_base = RING_IMM + 2 * MAX_RANKS, .num_regions = 1,
                             .regions = {dead_ring->mr}, .remote = {descs},
                             .peers = survivors};
    int32_t word_all = 0, word_survivors = 0;
    size_t at = ring_dst(g_rank) + SLOT / 2;
    strata_status_t status;

    CHECK(mem != NULL, "memory");
    for (int r = 0; r < g_world; ++r) {
        if (r != victim) {
            me = r == g_rank ? n : me;
            descs[n]       = dead_ring->desc[r];
            survivors[n++] = r;
        }
    }
    next = (me + 1) % n;
    prev = (me + n - 1) % n;
    p.num_peers = n;
    CHECK(inter_engine_ring_attach(g_engine, &p, &t.ring) == STRATA_OK, "survivors' ring");
    CHECK(inter_engine_watch_failures(g_engine, &word_all) == STRATA_OK &&
              inter_engine_watch_failures_of(g_engine, &word_survivors, survivors, n) ==
                  STRATA_OK, "watches");
    CHECK(inter_engine_barrier(g_engine, survivors, n, WAIT_NS) == STRATA_OK,
          "barrier of the survivors");
    CHECK(ring_post(&t, (util_work_cmd_t){.op = UTIL_WORK_WRITE_IMM, .peer = next,
                                          .imm = p.imm_base + (uint32_t)me, .offset = 0,
                                          .remote_offset = at, .length = SURVIVOR_WRITE}) ==
              STRATA_OK, "post to the next survivor");
    status = ring_wait(&t, &util_work_ring_counters(mem)[0], 1);
    CHECK(status == STRATA_OK, "the survivors' ring: the write did not complete: %s",
          strata_status_string(status));
    status = ring_wait(&t, &util_work_ring_imms(mem)[prev], 1);
    CHECK(status == STRATA_OK, "the survivors' ring: no immediate from the previous one: %s",
          strata_status_string(status));
    for (size_t i = 0; i < SURVIVOR_WRITE; ++i) {
        CHECK(t.buf[ring_dst(survivors[prev]) + SLOT / 2 + i] == pattern(77, survivors[prev], i),
              "byte %zu from survivor %d", i, prev);
    }
    CHECK(atomic_load((_Atomic int32_t *)&word_all) == STRATA_ERR_PEER_FAILED &&
              atomic_load((_Atomic int32_t *)&word_survivors) == 0,
          "the watch over every rank says %d, the one over the survivors %d", word_all,
          word_survivors);
    CHECK(inter_engine_barrier(g_engine, survivors, n, WAIT_NS) == STRATA_OK,
          "barrier after the survivors' ring");
    inter_engine_unwatch_failures(g_engine, &word_all);
    inter_engine_unwatch_failures(g_engine, &word_survivors);
    inter_engine_ring_detach(g_engine, t.ring);
    free(mem);
}

/* Rank `victim` dies while the others' producers write to it through a ring: the failure
 * word wakes them (no producer waits for credit forever) within the bound. Then the
 * survivors' own ring and watches (survivors_ring). */
int kill_ring_test(int victim)
{
    inter_engine_params_t params;
    ring_test_t t = {0};
    uint64_t start, bound, posted = 0;
    strata_status_t status;

    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    bound = params.peer_timeout_ns + 4 * UTIL_NSEC_PER_SEC;
    ring_open(&t, RING_IMM, false);
    if (g_rank == victim) {
        usleep(200000);
        _exit(9);
    }
    start = util_clock_now_ns();
    do {
        status = ring_post(&t, (util_work_cmd_t){.op = UTIL_WORK_WRITE_IMM, .peer = victim,
                                                 .imm = RING_IMM + (uint32_t)g_rank,
                                                 .length = SLOT / 4,
                                                 .remote_offset = ring_dst(g_rank)});
        posted += status == STRATA_OK;
        CHECK(util_clock_now_ns() - start < WAIT_NS, "the ring never failed");
    } while (status == STRATA_OK);
    CHECK(status == STRATA_ERR_PEER_FAILED, "ring failed with %s", strata_status_string(status));
    CHECK(util_clock_now_ns() - start < bound, "took %.2f s to notice",
          (double)(util_clock_now_ns() - start) / 1e9);
    printf("rank %d: peer %d failed after %llu ring commands, noticed in %.2f s\n", g_rank,
           victim, (unsigned long long)posted, (double)(util_clock_now_ns() - start) / 1e9);
    fflush(stdout); /* seen even where the teardown or exit after it hangs */
    survivors_ring(&t, victim);
    printf("rank %d: the survivors' ring and watch went on\n", g_rank);
    ring_close(&t);
    return 0;
}
