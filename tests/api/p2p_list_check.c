/*
 * Run under strata-run: paged and scatter writes between ranks in pairs (rank r and r + W/2
 * mod W, on another node where there are two; one writes and the other checks each round,
 * then the other way). Every list comes
 * from a seed both ranks share: random pages (a source page may repeat, a destination page
 * does not), runs of adjacent pages that merge into one write, the first and last page of
 * both regions, and scatter pieces of random lengths. The reader waits for
 * strata_write_list_imm_count immediates and then checks every named byte, and that every
 * other byte still holds the fill: nothing is written outside what was named. Rank 0 also
 * checks the refusals (a destination page named twice, a page past a region's end,
 * overlapping scatter pieces) and their messages.
 *
 * Options: --pages N (of each region, default 512) --page B (bytes, default 1024)
 * --rounds R (default 4); --kill-writer: rank 0 writes a long list and dies at once, and
 * rank 1 must see STRATA_ERR_PEER_FAILED, with nothing written outside the list;
 * --kill-reader: rank 1 dies, and rank 0's request must end with STRATA_ERR_PEER_FAILED.
 */
#include <strata/strata.h>

#include "common/log_capture.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "p2p_list_check rank %d: ", g_rank); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

#define FILL    0xee
#define IMM     21u
#define WAIT_MS 30000u

static int g_rank;

#define PAIR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PAIR_MAX(a, b) ((a) > (b) ? (a) : (b))

typedef struct region_pair {
    size_t pages, page;
    unsigned char *src, *dst;
    strata_mem_t *src_mem, *dst_mem;
    strata_mem_desc_t *dst_descs; /* every rank's */
} region_pair_t;

static unsigned char pattern(int rank, size_t byte)
{
    return (unsigned char)((rank * 37 + byte * 11 + (byte >> 10)) % 251);
}

static uint64_t mix(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 33;
}

/* Whether page p of the destination is reserved for the fixed part of every list. */
static bool page_reserved(const region_pair_t *rp, size_t p)
{
    return p == 0 || p == rp->pages - 1 || (p >= rp->pages / 4 && p < rp->pages / 4 + 8);
}

/*
 * The page list of a round, the same on both ranks: the two ends of both regions crossed
 * over, a run of 8 pages adjacent in both regions (one write once merged), then random
 * destinations, each once, from random sources (which may repeat). n pairs in all.
 */
static size_t page_list(const region_pair_t *rp, int round, size_t n, uint32_t *src,
                        uint32_t *dst)
{
    uint64_t state = 1000003u * (uint64_t)round + 17;
    uint32_t *perm = malloc(rp->pages * sizeof(*perm));
    size_t i = 0;

    CHECK(perm != NULL && rp->pages >= 16 && n >= 10 && n <= rp->pages, "page list");
    for (size_t p = 0; p < rp->pages; ++p) {
        perm[p] = (uint32_t)p;
    }
    for (size_t p = rp->pages - 1; p > 0; --p) {
        size_t q = mix(&state) % (p + 1);
        uint32_t t = perm[p];

        perm[p] = perm[q];
        perm[q] = t;
    }
    src[i] = (uint32_t)(rp->pages - 1), dst[i++] = 0;
    src[i] = 0, dst[i++] = (uint32_t)(rp->pages - 1);
    for (size_t k = 0; k < 8; ++k, ++i) {
        src[i] = (uint32_t)(rp->pages / 2 + k);
        dst[i] = (uint32_t)(rp->pages / 4 + k);
    }
    for (size_t p = 0; i < n && p < rp->pages; ++p) {
        if (!page_reserved(rp, perm[p])) {
            src[i]   = (uint32_t)(mix(&state) % rp->pages);
            dst[i++] = perm[p];
        }
    }
    free(perm);
    return i;
}

/* Scatter pieces of a round: random lengths up to 3 pages, at random places in the
 * source, placed one after another in the destination with random gaps; every third piece
 * continues the last in both regions (merged). *n_p pieces. */
static strata_scatter_entry_t *scatter_list(const region_pair_t *rp, int round, size_t *n_p)
{
    size_t bytes = rp->pages * rp->page, at = (size_t)round % 7, n = 0, cap = 4 * rp->pages;
    strata_scatter_entry_t *e = malloc(cap * sizeof(*e));
    uint64_t state = 7919u * (uint64_t)round + 3;

    CHECK(e != NULL, "memory");
    while (n < cap) {
        size_t len = 1 + mix(&state) % (3 * rp->page), src;

        if (n % 3 == 2 && e[n - 1].src_offset + e[n - 1].length + len <= bytes) {
            src = e[n - 1].src_offset + e[n - 1].length;
            at  = e[n - 1].dst_offset + e[n - 1].length;
        } else {
            src = mix(&state) % (bytes - len + 1);
            at += mix(&state) % 64;
        }
        if (at + len > bytes) {
            break;
        }
        e[n++] = (strata_scatter_entry_t){.src_offset = src, .dst_offset = at, .length = len};
        at += len;
    }
    *n_p = n;
    return e;
}

/* What the destination must hold after a round: the fill, then every named piece. */
static void expect_paged(const region_pair_t *rp, int writer, const uint32_t *src,
                         const uint32_t *dst, size_t n, unsigned char *want)
{
    memset(want, FILL, rp->pages * rp->page);
    for (size_t i = 0; i < n; ++i) {
        for (size_t b = 0; b < rp->page; ++b) {
            want[dst[i] * rp->page + b] = pattern(writer, src[i] * rp->page + b);
        }
    }
}

static void expect_scatter(const region_pair_t *rp, int writer,
                           const strata_scatter_entry_t *e, size_t n, unsigned char *want)
{
    memset(want, FILL, rp->pages * rp->page);
    for (size_t i = 0; i < n; ++i) {
        for (size_t b = 0; b < e[i].length; ++b) {
            want[e[i].dst_offset + b] = pattern(writer, e[i].src_offset + b);
        }
    }
}

/* The reader's side: every byte as want says (the first that differs named). */
static void check_bytes(const region_pair_t *rp, const unsigned char *want, const char *what)
{
    for (size_t b = 0; b < rp->pages * rp->page; ++b) {
        CHECK(rp->dst[b] == want[b], "%s: byte %zu (page %zu) is 0x%02x, expected 0x%02x%s",
              what, b, b / rp->page, rp->dst[b], want[b],
              want[b] == FILL ? " (outside the pieces named)" : "");
    }
}

static void alloc_regions(strata_comm_t *comm, strata_bootstrap_t *bs, region_pair_t *rp)
{
    size_t bytes = rp->pages * rp->page;
    strata_mem_desc_t mine;

    rp->src       = malloc(bytes);
    rp->dst       = malloc(bytes);
    rp->dst_descs = calloc((size_t)strata_comm_size(comm), sizeof(*rp->dst_descs));
    CHECK(rp->src && rp->dst && rp->dst_descs, "memory");
    for (size_t b = 0; b < bytes; ++b) {
        rp->src[b] = pattern(g_rank, b);
    }
    memset(rp->dst, FILL, bytes);
    CHECK(strata_mem_register(comm, rp->src, bytes, &rp->src_mem) == STRATA_OK, "register");
    CHECK(strata_mem_register(comm, rp->dst, bytes, &rp->dst_mem) == STRATA_OK, "register");
    strata_mem_descriptor(rp->dst_mem, &mine);
    CHECK(bs->allgather(bs->ctx, &mine, rp->dst_descs, sizeof(mine)) == STRATA_OK, "allgather");
}

static void free_regions(strata_comm_t *comm, region_pair_t *rp)
{
    strata_mem_deregister(comm, rp->src_mem);
    strata_mem_deregister(comm, rp->dst_mem);
    free(rp->src);
    free(rp->dst);
    free(rp->dst_descs);
}

/* The writer's side of a round: its request, waited for. */
static void wait_write(strata_status_t status, strata_request_t *req, const char *what)
{
    CHECK(status == STRATA_OK, "%s: %s", what, strata_status_string(status));
    status = strata_request_wait(req, WAIT_MS);
    CHECK(status == STRATA_OK, "%s completion: %s", what, strata_status_string(status));
    strata_request_free(req);
}

/* One round each of paged and scatter writes from writer to reader (its pair). */
static void run_round(strata_comm_t *comm, region_pair_t *rp, int round, unsigned char *want,
                      size_t *pieces_p)
{
    int size = strata_comm_size(comm), pair = (g_rank + size / 2) % size;
    int writer = (round % 2 == 0) ? PAIR_MIN(g_rank, pair) : PAIR_MAX(g_rank, pair);
    size_t n = rp->pages / 2 + (size_t)round, pieces = 0;
    uint32_t *src = malloc(n * sizeof(*src)), *dst = malloc(n * sizeof(*dst));
    strata_scatter_entry_t *e;
    strata_request_t *req;
    strata_status_t status;

    CHECK(src && dst, "memory");
    n = page_list(rp, round, n, src, dst);
    for (int kind = 0; kind < 2; ++kind) {
        const char *what = kind == 0 ? "paged write" : "scatter write";

        e = kind == 1 ? scatter_list(rp, round, &pieces) : NULL;
        memset(rp->dst, FILL, rp->pages * rp->page);
        CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier");
        if (g_rank == writer) {
            status = kind == 0 ? strata_write_paged(comm, pair, rp->src_mem,
                                                    &rp->dst_descs[pair], rp->page, src, dst, n,
                                                    STRATA_WRITE_IMM, IMM, &req)
                               : strata_write_scatter(comm, pair, rp->src_mem,
                                                      &rp->dst_descs[pair], e, pieces,
                                                      STRATA_WRITE_IMM, IMM, &req);
            wait_write(status, req, what);
        } else {
            status = strata_imm_wait(comm, IMM, strata_write_list_imm_count(comm, pair), pair,
                                     WAIT_MS);
            CHECK(status == STRATA_OK, "%s: waiting for its immediates: %s", what,
                  strata_status_string(status));
            if (kind == 0) {
                expect_paged(rp, pair, src, dst, n, want);
            } else {
                expect_scatter(rp, pair, e, pieces, want);
            }
            check_bytes(rp, want, what);
        }
        *pieces_p += kind == 0 ? n : pieces;
        free(e);
    }
    CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier");
    free(src);
    free(dst);
}

/* Rank 0: a one-page list (its one chunk the immediate's: no data operation) cancelled as
 * soon as it is made, before the engine took it, still ends. Its immediate, another than
 * the rounds', may go or not. */
static void check_cancel_at_once(strata_comm_t *comm, const region_pair_t *rp)
{
    uint32_t page[1] = {0};
    strata_request_t *req;
    strata_status_t status;

    CHECK(strata_write_paged(comm, 1, rp->src_mem, &rp->dst_descs[1], rp->page, page, page, 1,
                             STRATA_WRITE_IMM, IMM + 1, &req) == STRATA_OK, "one page");
    strata_request_cancel(req);
    status = strata_request_wait(req, 5000);
    CHECK(status == STRATA_ERR_CANCELLED || status == STRATA_OK,
          "a list cancelled at once ended with %s", strata_status_string(status));
    strata_request_free(req);
}

/* Rank 0: what the calls refuse, each with its line. */
static void check_refusals(strata_comm_t *comm, const region_pair_t *rp)
{
    uint32_t twice_src[3] = {1, 2, 3}, twice_dst[3] = {5, 9, 5}, past[1] = {0};
    strata_scatter_entry_t overlap[3] = {{0, 0, 100}, {200, 300, 50}, {500, 99, 10}};
    strata_request_t *req = NULL;
    char line[96];

    log_capture_start();
    CHECK(strata_write_paged(comm, 1, rp->src_mem, &rp->dst_descs[1], rp->page, twice_src,
                             twice_dst, 3, 0, 0, &req) == STRATA_ERR_INVALID,
          "a destination page named twice was accepted");
    past[0] = (uint32_t)rp->pages;
    CHECK(strata_write_paged(comm, 1, rp->src_mem, &rp->dst_descs[1], rp->page, twice_src,
                             past, 1, 0, 0, &req) == STRATA_ERR_INVALID,
          "a page past the region's end was accepted");
    CHECK(strata_write_scatter(comm, 1, rp->src_mem, &rp->dst_descs[1], overlap, 3, 0, 0,
                               &req) == STRATA_ERR_INVALID, "overlapping pieces were accepted");
    CHECK(strata_write_paged(comm, 1, rp->src_mem, &rp->dst_descs[1], 0, twice_src, past, 1,
                             0, 0, &req) == STRATA_ERR_INVALID, "pages of 0 bytes accepted");
    CHECK(strata_write_paged(comm, 1, rp->src_mem, &rp->dst_descs[1], rp->page, twice_src,
                             past, 1, 4, 0, &req) == STRATA_ERR_INVALID, "unknown flags accepted");
    log_capture_stop();
    CHECK(req == NULL, "a refused call made a request");
    CHECK(log_captured("pages at entries 0 and 2 write the same destination bytes", NULL, NULL),
          "the repeated page was not named");
    snprintf(line, sizeof(line), "destination page %zu (entry 0) ends past", rp->pages);
    CHECK(log_captured(line, NULL, NULL), "the page past the end was not named");
    CHECK(log_captured("entries 0 and 2 write the same destination bytes", NULL, NULL),
          "the overlapping pieces were not named");
    check_cancel_at_once(comm, rp);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* --kill-writer (rank 0 dies right after it starts a long list to rank 1) or --kill-reader
 * (rank 1 dies, rank 0 writes to it): the survivor sees STRATA_ERR_PEER_FAILED; rank 1, the
 * reader, finds nothing written outside the even pages the list named. */
static void run_kill(strata_comm_t *comm, region_pair_t *rp, bool writer_dies)
{
    size_t n = rp->pages / 2;
    uint32_t *src = malloc(n * sizeof(*src)), *dst = malloc(n * sizeof(*dst));
    strata_request_t *req;
    strata_status_t status;
    double start;

    CHECK(src && dst && strata_comm_size(comm) == 2, "2 ranks");
    for (size_t i = 0; i < n; ++i) {
        src[i] = (uint32_t)(rp->pages - 1 - 2 * i);
        dst[i] = (uint32_t)(2 * i);
    }
    CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier");
    if (g_rank == 1 && !writer_dies) {
        kill(getpid(), SIGKILL);
    }
    start = now_ms();
    if (g_rank == 0) {
        status = strata_write_paged(comm, 1, rp->src_mem, &rp->dst_descs[1], rp->page, src, dst,
                                    n, STRATA_WRITE_IMM, IMM, &req);
        if (writer_dies) {
            kill(getpid(), SIGKILL); /* mid-transfer */
        }
        if (status == STRATA_OK) {
            status = strata_request_wait(req, WAIT_MS);
            strata_request_free(req);
        }
    } else {
        status = strata_imm_wait(comm, IMM, strata_write_list_imm_count(comm, 0), 0, WAIT_MS);
        for (size_t b = 0; b < rp->pages * rp->page; ++b) {
            size_t page = b / rp->page;
            unsigned char named = pattern(0, (rp->pages - 1 - page) * rp->page + b % rp->page);

            CHECK(rp->dst[b] == FILL || (page % 2 == 0 && rp->dst[b] == named),
                  "byte %zu (page %zu) holds 0x%02x: %s", b, page, rp->dst[b],
                  page % 2 ? "outside the pages named" : "not what its page was sent");
        }
    }
    CHECK(status == STRATA_ERR_PEER_FAILED, "the peer died, and the %s got %s",
          g_rank == 0 ? "write" : "wait for its immediates", strata_status_string(status));
    printf("rank %d: rank %d failed after %.0f ms: %s\n", g_rank, 1 - g_rank, now_ms() - start,
           strata_status_string(status));
    free(src);
    free(dst);
}

int main(int argc, char **argv)
{
    region_pair_t rp = {.pages = 512, .page = 1024};
    int rounds = 4, kill_mode = 0;
    strata_bootstrap_t *bs;
    strata_comm_t *comm;
    unsigned char *want;
    size_t pieces = 0;

    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--pages") && i + 1 < argc) rp.pages = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--page") && i + 1 < argc) rp.page = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kill-writer")) kill_mode = 1;
        else if (!strcmp(argv[i], "--kill-reader")) kill_mode = 2;
        else CHECK(0, "unknown option %s", argv[i]);
    }
    CHECK(strata_bootstrap_from_env(&bs) == STRATA_OK, "bootstrap");
    CHECK(strata_comm_create(NULL, bs, &comm) == STRATA_OK, "comm_create");
    g_rank = strata_comm_rank(comm);
    CHECK(strata_comm_size(comm) % 2 == 0, "an even number of ranks");
    alloc_regions(comm, bs, &rp);
    if (kill_mode != 0) {
        run_kill(comm, &rp, kill_mode == 1);
    } else {
        want = malloc(rp.pages * rp.page);
        CHECK(want != NULL, "memory");
        if (g_rank == 0) {
            check_refusals(comm, &rp);
        }
        for (int round = 0; round < rounds; ++round) {
            run_round(comm, &rp, round, want, &pieces);
        }
        free(want);
        printf("rank %d: %d rounds passed (%zu pages and pieces of %zu-byte pages; %u "
               "immediates per list)\n", g_rank, rounds, pieces, rp.page,
               strata_write_list_imm_count(comm, (g_rank + strata_comm_size(comm) / 2) %
                                                     strata_comm_size(comm)));
    }
    free_regions(comm, &rp);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    return 0;
}
