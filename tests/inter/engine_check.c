/*
 * The transfer engine across real processes (run under strata-run): every operation's data
 * checked byte for byte with seeded random sizes and offsets, exact immediate counts,
 * barrier, callbacks, cancellation, bad input refused without harm, and with --kill RANK a
 * peer that dies mid-transfer: the survivors must see STRATA_ERR_PEER_FAILED within the
 * bound and exit 0. With --idle, ranks stay quiet for longer than the peer timeout and must
 * all still be alive (heartbeats flow); with --forbid-shm, STRATA_INTER_SHARED_MEMORY=no is
 * honoured where libfabric can and refused at creation where it cannot; with --leave N, N
 * engines in turn destroyed right after a barrier, then peers that left seen at once.
 * Prints one line per rank; exit 0 on success. With --built NAME (no launcher), exit 0 when transport NAME is
 * compiled in, 77 otherwise. Under STRATA_INTER_RATE_CONTROL=on the same checks run with
 * submissions paced, and every peer's rate figures are checked at the end.
 */
#include "inter/engine_check.h"
#include "inter/transport.h"

int g_rank, g_world;
unsigned g_seed = 12345;
inter_engine_t *g_engine;
strata_bootstrap_t *g_bs;
unsigned char *g_src, *g_dst; /* g_dst: world slots of SLOT bytes, one per source */
inter_mr_t *g_src_mr, *g_dst_mr;
inter_rdesc_t g_src_desc[MAX_RANKS], g_dst_desc[MAX_RANKS];

/* Deterministic per (round, src, dst): both ends derive the same sizes and offsets. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint64_t draw(int round, int src, int dst, int what)
{
    return mix(((uint64_t)g_seed << 40) ^ ((uint64_t)round << 24) ^ ((uint64_t)src << 16) ^
               ((uint64_t)dst << 8) ^ (uint64_t)what);
}

unsigned char pattern(int round, int src, size_t i)
{
    return (unsigned char)(mix(((uint64_t)round << 48) ^ ((uint64_t)src << 40) ^ i) & 0xff);
}

/* Size in 1..max with a spread over small and large, and an offset keeping it in a slot. */
static void shape(int round, int src, int dst, size_t *len, size_t *off)
{
    size_t max = SLOT / 2;

    *len = 1 + draw(round, src, dst, 1) % ((draw(round, src, dst, 2) % 3 == 0) ? 256 : max);
    *off = draw(round, src, dst, 3) % (SLOT - *len);
}

static void bootstrap(void)
{
    const char *seed = getenv("STRATA_TEST_SEED");

    if (seed != NULL) {
        g_seed = (unsigned)strtoul(seed, NULL, 10);
    }
    CHECK(strata_bootstrap_from_env(&g_bs) == STRATA_OK, "bootstrap");
    g_rank  = g_bs->rank;
    g_world = g_bs->world_size;
    util_log_set_rank(g_rank);
    CHECK(g_world <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
}

static int g_rank_node[MAX_RANKS];

/*
 * Which transport carries each peer's traffic: with STRATA_TEST_SAME_NODE=NAME, peers on
 * this rank's node must go through the transport named NAME... and the others must not.
 * Prints the same-node transport when there is one.
 */
static void check_peer_transports(void)
{
    const char *expect = getenv("STRATA_TEST_SAME_NODE");
    int local = 0;

    for (int p = 0; p < g_world; ++p) {
        const char *name = inter_engine_peer_transport_name(g_engine, p);
        bool same = p != g_rank && g_rank_node[p] == g_rank_node[g_rank];
        bool named = expect != NULL && strncmp(name, expect, strlen(expect)) == 0;

        if (p == g_rank || expect == NULL) {
            continue;
        }
        CHECK(same == named, "peer %d (%s node) goes through %s; expected %s%s", p,
              same ? "this" : "another", name, same ? "" : "not ", expect);
        local += same;
    }
    if (expect != NULL) {
        printf("rank %d: %d peer%s of this node through %s, the others through %s\n", g_rank,
               local, local == 1 ? "" : "s", expect, inter_engine_transport_name(g_engine));
    }
}

void connect_engine(void)
{
    inter_engine_params_t params;
    strata_status_t status;
    size_t blob_size;
    void *blobs, *mine;

    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    params.rank       = g_rank;
    params.world_size = g_world;
    params.local_size = getenv("LOCAL_WORLD_SIZE") ? atoi(getenv("LOCAL_WORLD_SIZE")) : 1;
    /* strata-run numbers ranks node by node: the node map the communicator would give. */
    for (int r = 0; r < g_world; ++r) {
        g_rank_node[r] = r / (params.local_size > 0 ? params.local_size : 1);
    }
    params.rank_node = g_rank_node;
    status = inter_engine_create(&params, &g_engine);
    CHECK(status == STRATA_OK, "engine create: %s", strata_status_string(status));
    blob_size = inter_engine_address_size(g_engine);
    mine      = malloc(blob_size);
    blobs     = malloc(blob_size * (size_t)g_world);
    CHECK(inter_engine_address(g_engine, mine) == STRATA_OK, "address");
    CHECK(g_bs->allgather(g_bs->ctx, mine, blobs, blob_size) == STRATA_OK, "allgather");
    CHECK(inter_engine_connect(g_engine, blobs) == STRATA_OK, "connect");
    free(mine);
    free(blobs);
}

static void setup(void)
{
    connect_engine();
    g_src = util_alloc_aligned(4096, SLOT);
    g_dst = util_alloc_aligned(4096, SLOT * (size_t)g_world);
    CHECK(g_src && g_dst, "memory");
    CHECK(inter_engine_mem_register(g_engine, g_src, SLOT, &g_src_mr) == STRATA_OK, "reg src");
    CHECK(inter_engine_mem_register(g_engine, g_dst, SLOT * (size_t)g_world, &g_dst_mr) ==
              STRATA_OK, "reg dst");
    inter_engine_mem_descriptor(g_src_mr, &g_src_desc[g_rank]);
    inter_engine_mem_descriptor(g_dst_mr, &g_dst_desc[g_rank]);
    CHECK(g_bs->allgather(g_bs->ctx, &g_src_desc[g_rank], g_src_desc, sizeof(inter_rdesc_t)) ==
              STRATA_OK, "src descriptors");
    CHECK(g_bs->allgather(g_bs->ctx, &g_dst_desc[g_rank], g_dst_desc, sizeof(inter_rdesc_t)) ==
              STRATA_OK, "dst descriptors");
}

static void fill_src(int round)
{
    for (size_t i = 0; i < SLOT; ++i) {
        g_src[i] = pattern(round, g_rank, i);
    }
}

static void wait_req(inter_request_t *req, const char *what)
{
    strata_status_t status = inter_request_wait(req, WAIT_NS);

    CHECK(status == STRATA_OK, "%s: %s", what, strata_status_string(status));
    inter_request_free(req);
}

/* Every rank writes a random piece of its source to every rank (itself too). */
void round_write(int round)
{
    inter_request_t *reqs[MAX_RANKS];
    uint64_t expect = 0;
    size_t len, off;
    uint32_t imm = 100 + (uint32_t)round;
    strata_status_t status;

    fill_src(round);
    memset(g_dst, 0, SLOT * (size_t)g_world);
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier before write round %d", round);
    for (int dst = 0; dst < g_world; ++dst) {
        shape(round, g_rank, dst, &len, &off);
        CHECK(inter_engine_write(g_engine, dst, g_src_mr, off, &g_dst_desc[dst],
                                 (size_t)g_rank * SLOT + off, len, true, imm, &reqs[dst]) ==
                  STRATA_OK, "write to %d", dst);
    }
    for (int src = 0; src < g_world; ++src) {
        shape(round, src, g_rank, &len, &off);
        expect += inter_engine_write_chunks(g_engine, src, len);
    }
    CHECK(inter_engine_imm_wait(g_engine, imm, expect, -1, WAIT_NS) == STRATA_OK,
          "round %d: %llu immediates", round, (unsigned long long)expect);
    for (int dst = 0; dst < g_world; ++dst) {
        wait_req(reqs[dst], "write");
    }
    for (int src = 0; src < g_world; ++src) {
        shape(round, src, g_rank, &len, &off);
        for (size_t i = 0; i < len; ++i) {
            CHECK(g_dst[(size_t)src * SLOT + off + i] == pattern(round, src, off + i),
                  "round %d: byte %zu of %zu from rank %d", round, i, len, src);
        }
    }
    /* No extra immediates: the count was exact. A peer that failed meanwhile is reported
     * as such, not as a miscount (the wait checks failures when nothing is there). */
    status = inter_engine_imm_wait(g_engine, imm, 1, -1, 0);
    CHECK(status == STRATA_ERR_TIMEOUT, "round %d: %s", round,
          status == STRATA_OK ? "more immediates than writes" : strata_status_string(status));
}

/* Pages of the source, permuted, into the next rank's slot; one immediate per page. */
static void paged_write(void)
{
    enum { PAGES = 64, PAGE = 4096 };
    uint32_t src_pages[PAGES], dst_pages[PAGES];
    int next = (g_rank + 1) % g_world, prev = (g_rank + g_world - 1) % g_world;
    inter_request_t *req;

    fill_src(50);
    for (uint32_t i = 0; i < PAGES; ++i) {
        src_pages[i] = (uint32_t)((i * 7 + 3) % PAGES);
        dst_pages[i] = (uint32_t)(PAGES - 1 - i);
    }
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier before paged write");
    CHECK(inter_engine_write_paged(g_engine, next, g_src_mr, &g_dst_desc[next], src_pages,
                                   dst_pages, PAGES, PAGE, PAGE, true, 7, &req) == STRATA_OK,
          "paged write");
    CHECK(inter_engine_imm_wait(g_engine, 7, PAGES, prev, WAIT_NS) == STRATA_OK, "page imms");
    wait_req(req, "paged write");
    /* The previous rank wrote its page src_pages[i] at page dst_pages[i] of our region. */
    for (uint32_t i = 0; i < PAGES; ++i) {
        for (size_t b = 0; b < PAGE; b += 61) {
            CHECK(g_dst[(size_t)dst_pages[i] * PAGE + b] ==
                      pattern(50, prev, (size_t)src_pages[i] * PAGE + b),
                  "page %u byte %zu", i, b);
        }
    }
}

/* One source to every other rank, then an RDMA read of the right neighbour's source. */
static void scatter_and_read(void)
{
    int peers[MAX_RANKS], n = 0;
    inter_rdesc_t descs[MAX_RANKS];
    size_t offs[MAX_RANKS], len = 300000;
    inter_request_t *req;
    int right = (g_rank + 1) % g_world;
    unsigned char *back;

    fill_src(60);
    for (int p = 0; p < g_world; ++p) {
        if (p != g_rank) {
            peers[n]  = p;
            descs[n]  = g_dst_desc[p];
            offs[n++] = (size_t)g_rank * SLOT + 1000;
        }
    }
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier before scatter");
    if (n > 0) {
        CHECK(inter_engine_write_scatter(g_engine, peers, n, g_src_mr, 17, descs, offs, len, true,
                                         9, &req) == STRATA_OK, "scatter");
        wait_req(req, "scatter");
        uint64_t expect = 0;
        for (int p = 0; p < g_world; ++p) {
            expect += (p == g_rank) ? 0 : inter_engine_write_chunks(g_engine, p, len);
        }
        CHECK(inter_engine_imm_wait(g_engine, 9, expect, -1, WAIT_NS) == STRATA_OK, "scatter imms");
        for (int p = 0; p < g_world; ++p) {
            for (size_t i = 0; p != g_rank && i < len; i += 13) {
                CHECK(g_dst[(size_t)p * SLOT + 1000 + i] == pattern(60, p, 17 + i),
                      "scatter from %d byte %zu", p, i);
            }
        }
    }
    if (!inter_engine_has_read(g_engine)) {
        return;
    }
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier before read");
    back = g_dst + (size_t)g_rank * SLOT; /* read into our own slot */
    memset(back, 0, SLOT);
    CHECK(inter_engine_read(g_engine, right, g_dst_mr, (size_t)g_rank * SLOT, &g_src_desc[right],
                            4096, 1500000, &req) == STRATA_OK, "read");
    wait_req(req, "read");
    for (size_t i = 0; i < 1500000; i += 7) {
        CHECK(back[i] == pattern(60, right, 4096 + i), "read byte %zu", i);
    }
}

/* Messages around the ring, sizes from 0 to the limit, and a receive from anyone. */
static void messages(void)
{
    static const size_t sizes[] = {0, 1, 100, 4096, 65536};
    int next = (g_rank + 1) % g_world, prev = (g_rank + g_world - 1) % g_world;
    unsigned char out[65536], in[65536];
    inter_request_t *send, *recv;

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
        for (size_t i = 0; i < sizes[k]; ++i) {
            out[i] = pattern(70 + (int)k, g_rank, i);
        }
        CHECK(inter_engine_recv(g_engine, k == 2 ? -1 : prev, in, sizeof(in), &recv) == STRATA_OK,
              "recv");
        CHECK(inter_engine_send(g_engine, next, out, sizes[k], &send) == STRATA_OK, "send");
        wait_req(send, "send");
        CHECK(inter_request_wait(recv, WAIT_NS) == STRATA_OK, "recv of %zu bytes", sizes[k]);
        CHECK(inter_request_length(recv) == sizes[k] && inter_request_source(recv) == prev,
              "recv: %zu bytes from %d", inter_request_length(recv), inter_request_source(recv));
        for (size_t i = 0; i < sizes[k]; ++i) {
            CHECK(in[i] == pattern(70 + (int)k, prev, i), "message byte %zu", i);
        }
        inter_request_free(recv);
    }
}

static atomic_int g_notified = -1; /* set by the proxy thread's callback */

static void on_imm(void *arg, uint32_t imm, strata_status_t status)
{
    (void)arg;
    g_notified = (status == STRATA_OK) ? (int)imm : -2;
}

/* A callback when the left neighbour's three writes are in. */
static void notify(void)
{
    int next = (g_rank + 1) % g_world, prev = (g_rank + g_world - 1) % g_world;
    inter_request_t *req;
    uint64_t deadline = util_clock_now_ns() + WAIT_NS;
    uint64_t chunks = 3ull * inter_engine_write_chunks(g_engine, prev, 1000);

    CHECK(inter_engine_imm_notify(g_engine, 4242, chunks, prev, on_imm, NULL) == STRATA_OK,
          "notify");
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier before notify");
    for (int i = 0; i < 3; ++i) {
        CHECK(inter_engine_write(g_engine, next, g_src_mr, 0, &g_dst_desc[next], 0, 1000, true,
                                 4242, &req) == STRATA_OK, "write for notify");
        wait_req(req, "write for notify");
    }
    while (g_notified != 4242 && util_clock_now_ns() < deadline) {
        usleep(100);
    }
    CHECK(g_notified == 4242, "callback not called (%d)", g_notified);
}

/* Bad input is refused, logged, and harmless; a cancelled receive completes as such. */
static void bad_input_and_cancel(void)
{
    inter_request_t *req = NULL;
    int next = (g_rank + 1) % g_world;
    unsigned char big[70000];
    strata_status_t status;

    util_log_set_level(STRATA_LOG_LEVEL_ERROR + 0); /* the refusals log one line each */
    CHECK(inter_engine_write(g_engine, g_world, g_src_mr, 0, &g_dst_desc[0], 0, 8, false, 0,
                             &req) == STRATA_ERR_INVALID, "unknown peer");
    CHECK(inter_engine_write(g_engine, -1, g_src_mr, 0, &g_dst_desc[0], 0, 8, false, 0, &req) ==
              STRATA_ERR_INVALID, "negative peer");
    CHECK(inter_engine_write(g_engine, next, g_src_mr, SLOT - 4, &g_dst_desc[next], 0, 8, false,
                             0, &req) == STRATA_ERR_INVALID, "local range past registration");
    CHECK(inter_engine_write(g_engine, next, NULL, 0, &g_dst_desc[next], 0, 8, false, 0, &req) ==
              STRATA_ERR_INVALID, "unregistered local memory");
    CHECK(inter_engine_write(g_engine, next, g_src_mr, 0, &g_dst_desc[next],
                             SLOT * (size_t)g_world - 4, 8, false, 0, &req) == STRATA_ERR_INVALID,
          "length past the remote region");
    CHECK(inter_engine_write(g_engine, next, g_src_mr, 0, &g_dst_desc[next], 0, 0, false, 0,
                             &req) == STRATA_ERR_INVALID, "zero length");
    CHECK(inter_engine_write(g_engine, next, g_src_mr, 0, &g_dst_desc[next], 0, 8, true,
                             INTER_IMM_MAX, &req) == STRATA_ERR_INVALID, "immediate range");
    CHECK(inter_engine_send(g_engine, next, big, sizeof(big), &req) == STRATA_ERR_INVALID,
          "oversized message");
    inter_rdesc_t forged = g_dst_desc[next];
    forged.magic = 0;
    CHECK(inter_engine_write(g_engine, next, g_src_mr, 0, &forged, 0, 8, false, 0, &req) ==
              STRATA_ERR_INVALID, "not a descriptor");
    inter_peer_rate_t rate;
    CHECK(inter_engine_peer_rate(g_engine, g_world, &rate) == STRATA_ERR_INVALID &&
              inter_engine_peer_rate(g_engine, -1, &rate) == STRATA_ERR_INVALID,
          "rate of a peer out of range");
    CHECK(req == NULL, "a refused call made a request");

    CHECK(inter_engine_recv(g_engine, next, big, sizeof(big), &req) == STRATA_OK, "recv");
    inter_request_cancel(req);
    status = inter_request_wait(req, WAIT_NS);
    CHECK(status == STRATA_ERR_CANCELLED, "cancelled recv: %s", strata_status_string(status));
    inter_request_free(req);

    /* A cancelled write completes (cancelled, or done if it got out first); never hangs. */
    CHECK(inter_engine_write(g_engine, next, g_src_mr, 0, &g_dst_desc[next],
                             (size_t)g_rank * SLOT, SLOT / 2, false, 0, &req) == STRATA_OK,
          "write to cancel");
    inter_request_cancel(req);
    status = inter_request_wait(req, WAIT_NS);
    CHECK(status == STRATA_ERR_CANCELLED || status == STRATA_OK, "cancelled write: %s",
          strata_status_string(status));
    inter_request_free(req);
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
}

/*
 * Rate control's figures once everything has completed: in-flight bytes back to zero for
 * every peer (a failed work ring's last commands may still be finishing), a rate and a
 * base RTT for each, all having been written to, and a window of at least one chunk when
 * pacing, unbounded with nothing held otherwise. Returns the operations paced.
 */
static inter_peer_rate_t settled_rate(int peer)
{
    uint64_t deadline = util_clock_now_ns() + WAIT_NS;
    inter_peer_rate_t rate;

    for (;;) {
        CHECK(inter_engine_peer_rate(g_engine, peer, &rate) == STRATA_OK, "rate of %d", peer);
        if (rate.in_flight_bytes == 0 || util_clock_now_ns() > deadline) {
            return rate;
        }
        if (inter_engine_progress(g_engine) == 0) {
            usleep(1000);
        }
    }
}

static uint64_t check_rates(void)
{
    inter_engine_params_t params;
    inter_peer_rate_t rate;
    uint64_t paced = 0;

    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    for (int p = 0; p < g_world; ++p) {
        rate = settled_rate(p);
        CHECK(rate.in_flight_bytes == 0, "%llu bytes still in flight to %d after the checks",
              (unsigned long long)rate.in_flight_bytes, p);
        CHECK(rate.rate_Bps > 0 && rate.rtt_ns > 0, "no rate (%g B/s) or RTT (%llu ns) for %d",
              rate.rate_Bps, (unsigned long long)rate.rtt_ns, p);
        if (params.rate_control) {
            CHECK(rate.window_bytes >= inter_engine_chunk_bytes(g_engine) &&
                      rate.window_bytes < UINT64_MAX,
                  "window of %llu bytes to %d", (unsigned long long)rate.window_bytes, p);
        } else {
            CHECK(rate.window_bytes == UINT64_MAX && rate.paced == 0,
                  "rate control off, yet a window of %llu bytes and %llu held to %d",
                  (unsigned long long)rate.window_bytes, (unsigned long long)rate.paced, p);
        }
        paced += rate.paced;
    }
    return params.rate_control ? paced : UINT64_MAX;
}

/* What the deliberate bad calls must log (specific texts before general ones). */
static const char *const refusals[] = {
    "engine: unknown peer -1 (ranks are 0..",
    "engine: unknown peer ",
    "is not inside a registered region (0 bytes)",
    "is not inside a registered region (",
    "runs past peer ",
    "engine: transfer of 0 bytes",
    "engine: immediate 65536 out of range",
    "engine: message of 70000 bytes",
    "engine: not a remote memory descriptor",
    "engine: rate of peer ",
    "engine: a work ring already counts immediates",
    "is not valid; the ring is failed",
    NULL,
};

int main(int argc, char **argv)
{
    int kill = (argc == 3 && strcmp(argv[1], "--kill") == 0) ? atoi(argv[2]) : -1;
    int kill_ring = (argc == 3 && strcmp(argv[1], "--kill-ring") == 0) ? atoi(argv[2]) : -1;
    bool idle = argc == 2 && strcmp(argv[1], "--idle") == 0;
    int leave = (argc == 3 && strcmp(argv[1], "--leave") == 0) ? atoi(argv[2]) : 0;

    if (argc == 3 && strcmp(argv[1], "--built") == 0) {
        return inter_transport_find(argv[2]) != NULL ? 0 : 77; /* for the test scripts */
    }
    bootstrap();
    if (argc == 2 && strcmp(argv[1], "--forbid-shm") == 0) {
        forbid_shm_test();
        strata_bootstrap_destroy(g_bs);
        return 0;
    }
    if (leave > 0) {
        leave_test(leave);
        strata_bootstrap_destroy(g_bs);
        return 0;
    }
    setup();
    if (idle) {
        idle_test();
        /* g_dst_mr is left to destroy, which closes registrations before endpoints. */
        g_dst_mr = NULL;
    } else if (kill >= 0) {
        kill_test(kill);
    } else if (kill_ring >= 0) {
        kill_ring_test(kill_ring);
    } else {
        for (int round = 0; round < ROUNDS; ++round) {
            round_write(round);
        }
        paged_write();
        scatter_and_read();
        messages();
        notify();
        check_peer_transports();
        log_expect_start(refusals);
        bad_input_and_cancel();
        work_ring(false);
        if (inter_engine_can_flush_by_read(g_engine)) {
            work_ring(true);
        }
        work_ring_bad_command();
        CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
                  STRATA_OK, "final barrier");
        CHECK(log_expect_missing() == NULL, "a refusal did not log '%s'", log_expect_missing());
        util_log_set_handler(NULL, NULL);
        uint64_t paced = check_rates();
        char pacing[64] = "";
        if (paced != UINT64_MAX) {
            snprintf(pacing, sizeof(pacing), ", rate control on (%llu paced)",
                     (unsigned long long)paced);
        }
        printf("rank %d of %d: all checks passed over %s, %d rails, read %s, loopback flush "
               "%s%s\n", g_rank, g_world, inter_engine_transport_name(g_engine),
               inter_engine_num_rails(g_engine), inter_engine_has_read(g_engine) ? "yes" : "no",
               inter_engine_can_flush_by_read(g_engine) ? "yes" : "no", pacing);
    }
    inter_engine_mem_deregister(g_engine, g_src_mr);
    inter_engine_mem_deregister(g_engine, g_dst_mr);
    inter_engine_destroy(g_engine);
    free(g_src);
    free(g_dst);
    strata_bootstrap_destroy(g_bs);
    return 0;
}
