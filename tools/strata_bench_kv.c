/*
 * strata-bench kv: a KV-cache transfer's pages, rank 0 -> rank 1, as strata_write_paged
 * moves them (one call, one immediate per rail at the end) and as raw libfabric writes do,
 * one fi_writedata with an immediate per page, in the same processes over the same
 * provider and interface. Each list is random pages of a 128 MiB region into random pages
 * of the peer's; its time runs from the first post to rank 1's 8-byte acknowledgement
 * (with an immediate) once it counted the list's immediates. The paths alternate list by
 * list. Prints p50/p99 of a list's time, pages/s and GB/s at p50, and per page size the
 * line "paged/raw: pages/s X".
 */
#include "strata_bench.h"
#include "tool_cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_TOOL       "strata-bench kv"
#define KV_REGION     ((size_t)128 << 20)
#define KV_IMM_LIST   31u
#define KV_IMM_ACK    32u
#define KV_WARMUP     3
#define KV_TIMEOUT_MS 60000u

typedef struct kv_opts {
    uint64_t sizes[8];
    int      num_sizes, pages, lists;
} kv_opts_t;

/* strata's side: the communicator, its regions, the peer's destination. */
typedef struct kv_strata {
    strata_comm_t    *comm;
    char             *src, *dst;
    strata_mem_t     *src_mem, *dst_mem;
    strata_mem_desc_t peer_dst;
} kv_strata_t;

static void kv_usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-run -n 2 [--nodes 2] -- strata-bench kv [--page-sizes LIST]\n"
            "                                       [--pages N] [--lists N]\n"
            "A KV-cache transfer's pages, rank 0 -> rank 1: strata_write_paged against raw\n"
            "libfabric writes, one per page with an immediate, on the same provider and\n"
            "interface (STRATA_INTER_PROVIDER, STRATA_INTER_IFACE), in the same run.\n"
            "\n"
            "  --page-sizes LIST  page bytes, comma-separated (default 16k,64k,256k)\n"
            "  --pages N          random pages per list, 1..4096, at most half the 128 MiB\n"
            "                     region's pages (default 256)\n"
            "  --lists N          lists timed per path and size, 3..1001 (default 31)\n"
            "  -h, --help         this text\n");
}

static int kv_parse_sizes(const char *text, kv_opts_t *o)
{
    char *copy = strdup(text), *save = NULL;
    bool ok = copy != NULL;

    o->num_sizes = 0;
    for (char *tok = strtok_r(copy, ",", &save); ok && tok; tok = strtok_r(NULL, ",", &save)) {
        ok = o->num_sizes < 8 &&
             tool_parse_size(KV_TOOL, "--page-sizes", tok, 64, KV_REGION / 2,
                             &o->sizes[o->num_sizes++]);
    }
    free(copy);
    return ok && o->num_sizes > 0;
}

/* Options into *o; -1 to go on, else the exit status. */
static int kv_parse(int argc, char **argv, kv_opts_t *o)
{
    static const struct option options[] = {
        {"page-sizes", required_argument, NULL, 's'},
        {"pages", required_argument, NULL, 'n'},
        {"lists", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool ok = true;
    int opt;

    optind = 2;
    while (ok && (opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (opt) {
        case 's': ok = kv_parse_sizes(optarg, o); break;
        case 'n': ok = tool_parse_int(KV_TOOL, "--pages", optarg, 1, 4096, &o->pages); break;
        case 'l': ok = tool_parse_int(KV_TOOL, "--lists", optarg, 3, 1001, &o->lists); break;
        case 'h': kv_usage(stdout); return 0;
        default:  return tool_option_error(KV_TOOL, argv, options, opt);
        }
    }
    if (!ok) {
        return TOOL_EXIT_USAGE;
    }
    if (optind < argc) {
        return tool_usage_error(KV_TOOL, "unexpected argument '%s'", argv[optind]);
    }
    for (int i = 0; i < o->num_sizes; ++i) {
        if ((uint64_t)o->pages * 2 > KV_REGION / o->sizes[i]) {
            return tool_usage_error(KV_TOOL, "--pages %d: more than half the %llu pages of "
                                    "%llu bytes a 128 MiB region holds", o->pages,
                                    (unsigned long long)(KV_REGION / o->sizes[i]),
                                    (unsigned long long)o->sizes[i]);
        }
    }
    return -1;
}

static void kv_strata_setup(strata_bootstrap_t *bs, kv_strata_t *s)
{
    strata_mem_desc_t descs[2];

    BENCH_TRY(strata_comm_create(NULL, bs, &s->comm));
    s->src = util_alloc_aligned(4096, KV_REGION);
    s->dst = util_alloc_aligned(4096, KV_REGION);
    if (s->src == NULL || s->dst == NULL) {
        fprintf(stderr, "%s: no memory for two regions of 128 MiB\n", KV_TOOL);
        exit(1);
    }
    memset(s->src, 0x3c, KV_REGION);
    memset(s->dst, 0, KV_REGION);
    BENCH_TRY(strata_mem_register(s->comm, s->src, KV_REGION, &s->src_mem));
    BENCH_TRY(strata_mem_register(s->comm, s->dst, KV_REGION, &s->dst_mem));
    strata_mem_descriptor(s->dst_mem, &descs[bs->rank]);
    BENCH_TRY(bs->allgather(bs->ctx, &descs[bs->rank], descs, sizeof(descs[0])));
    s->peer_dst = descs[1 - bs->rank];
}

static void kv_strata_destroy(kv_strata_t *s)
{
    strata_mem_deregister(s->comm, s->src_mem);
    strata_mem_deregister(s->comm, s->dst_mem);
    strata_comm_destroy(s->comm);
    free(s->src);
    free(s->dst);
}

/* A random list: n distinct destination pages, sources at random, of `pages` pages. */
static void kv_list(uint64_t *state, uint32_t pages, int n, uint32_t *src, uint32_t *dst)
{
    for (int i = 0; i < n; ++i) {
        bool fresh;

        do {
            *state = *state * 6364136223846793005ull + 1442695040888963407ull;
            dst[i] = (uint32_t)((*state >> 33) % pages);
            fresh  = true;
            for (int j = 0; j < i && fresh; ++j) {
                fresh = dst[j] != dst[i];
            }
        } while (!fresh);
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (uint32_t)((*state >> 33) % pages);
    }
}

/* One list through strata: rank 0's time to the acknowledgement, ns (rank 1: 0). */
static uint64_t kv_strata_list(kv_strata_t *s, int rank, size_t page, const uint32_t *src,
                               const uint32_t *dst, int n)
{
    uint64_t start = util_clock_now_ns();
    strata_request_t *req;

    if (rank == 0) {
        strata_status_t status;

        /* the last list's operations go back to the pools within a round of progress */
        while ((status = strata_write_paged(s->comm, 1, s->src_mem, &s->peer_dst, page, src,
                                            dst, (size_t)n, STRATA_WRITE_IMM, KV_IMM_LIST,
                                            &req)) == STRATA_ERR_BUSY &&
               util_clock_now_ns() - start < KV_TIMEOUT_MS * UTIL_NSEC_PER_MSEC) {
            util_sleep_ns(UTIL_NSEC_PER_USEC);
        }
        BENCH_TRY(status);
        BENCH_TRY(strata_imm_wait(s->comm, KV_IMM_ACK, strata_write_imm_count(s->comm, 1, 8),
                                  1, KV_TIMEOUT_MS));
        BENCH_TRY(strata_request_wait(req, KV_TIMEOUT_MS));
        strata_request_free(req);
        return util_clock_now_ns() - start;
    }
    BENCH_TRY(strata_imm_wait(s->comm, KV_IMM_LIST, strata_write_list_imm_count(s->comm, 0), 0,
                              KV_TIMEOUT_MS));
    BENCH_TRY(strata_write(s->comm, 0, s->src_mem, 0, &s->peer_dst, 0, 8, STRATA_WRITE_IMM,
                           KV_IMM_ACK, &req));
    BENCH_TRY(strata_request_wait(req, KV_TIMEOUT_MS));
    strata_request_free(req);
    return 0;
}

/* The same list by raw libfabric: one write with an immediate per page. */
static uint64_t kv_raw_list(bench_raw_t *raw, const bench_path_t *path, int rank, size_t page,
                            const uint32_t *src, const uint32_t *dst, int n)
{
    uint64_t start = util_clock_now_ns();

    if (rank == 0) {
        for (int i = 0; i < n; ++i) {
            BENCH_TRY(bench_raw_write_at(raw, (size_t)src[i] * page, (size_t)dst[i] * page, page,
                                         KV_IMM_LIST));
        }
        BENCH_TRY(path->wait_imm(path->ctx, 8, KV_IMM_ACK, 1));
        BENCH_TRY(path->flush(path->ctx));
        return util_clock_now_ns() - start;
    }
    BENCH_TRY(path->wait_imm(path->ctx, page, KV_IMM_LIST, (uint64_t)n));
    BENCH_TRY(bench_raw_write_at(raw, 0, 0, 8, KV_IMM_ACK));
    BENCH_TRY(path->flush(path->ctx));
    return 0;
}

static int kv_compare(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* p50 and p99 of n times, sorted in place. */
static void kv_quantiles(uint64_t *t, int n, double *p50, double *p99)
{
    qsort(t, (size_t)n, sizeof(*t), kv_compare);
    *p50 = (double)t[n / 2];
    *p99 = (double)t[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
}

static void kv_measure(strata_bootstrap_t *bs, kv_strata_t *s, bench_raw_t *raw,
                       const bench_path_t *path, size_t page, const kv_opts_t *o)
{
    uint32_t *src = malloc(sizeof(*src) * (size_t)o->pages);
    uint32_t *dst = malloc(sizeof(*dst) * (size_t)o->pages);
    uint64_t *t_raw = calloc((size_t)o->lists, sizeof(uint64_t));
    uint64_t *t_paged = calloc((size_t)o->lists, sizeof(uint64_t)), state = page;
    double raw50, raw99, paged50, paged99, n = o->pages;

    if (!src || !dst || !t_raw || !t_paged) {
        fprintf(stderr, "%s: no memory\n", KV_TOOL);
        exit(1);
    }
    for (int i = -KV_WARMUP; i < o->lists; ++i) {
        uint64_t a, b;

        kv_list(&state, (uint32_t)(KV_REGION / page), o->pages, src, dst);
        BENCH_TRY(bs->barrier(bs->ctx));
        a = kv_raw_list(raw, path, bs->rank, page, src, dst, o->pages);
        BENCH_TRY(bs->barrier(bs->ctx));
        b = kv_strata_list(s, bs->rank, page, src, dst, o->pages);
        if (i >= 0) {
            t_raw[i]   = a;
            t_paged[i] = b;
        }
    }
    if (bs->rank == 0) {
        kv_quantiles(t_raw, o->lists, &raw50, &raw99);
        kv_quantiles(t_paged, o->lists, &paged50, &paged99);
        printf("%8zu | %8.3f %8.3f | %8.3f %8.3f | %10.0f %10.0f | %7.3f %7.3f\n", page,
               raw50 / 1e6, raw99 / 1e6, paged50 / 1e6, paged99 / 1e6, n * 1e9 / raw50,
               n * 1e9 / paged50, n * (double)page / raw50, n * (double)page / paged50);
        printf("paged/raw: pages/s %.2f (%zu-byte pages, p50)\n", raw50 / paged50, page);
        fflush(stdout);
    }
    free(src);
    free(dst);
    free(t_raw);
    free(t_paged);
}

int bench_kv_main(int argc, char **argv)
{
    kv_opts_t o = {.sizes = {16u << 10, 64u << 10, 256u << 10}, .num_sizes = 3, .pages = 256,
                   .lists = 31};
    strata_bootstrap_t *bs;
    kv_strata_t s = {0};
    bench_raw_t *raw = NULL;
    bench_path_t path;
    int rc = kv_parse(argc, argv, &o);

    if (rc >= 0) {
        return rc;
    }
    BENCH_TRY(strata_bootstrap_from_env(&bs));
    if (bs->world_size != 2) {
        fprintf(stderr, "%s: run with exactly 2 ranks (strata-run -n 2)\n", KV_TOOL);
        strata_bootstrap_destroy(bs);
        return 2;
    }
    util_log_set_rank(bs->rank);
    kv_strata_setup(bs, &s);
    {
        char first[64] = "", second[64] = "";

        sscanf(strata_comm_transport(s.comm), "ofi %63s %63s", first, second);
        if (first[0] == '\0') {
            fprintf(stderr, "%s: the raw baseline is libfabric's; the communicator took %s "
                    "(set STRATA_INTER_TRANSPORT=ofi)\n", KV_TOOL, strata_comm_transport(s.comm));
            return 1;
        }
        BENCH_TRY(bench_raw_create(bs, first, second, KV_REGION, &raw, &path));
    }
    if (bs->rank == 0) {
        printf("# strata-bench kv: %d random pages of a 128 MiB region per list, rank 0 -> 1, "
               "over %s; %d lists per path and size, alternating\n"
               "# raw: one fi_writedata with an immediate per page, %d in flight; paged: one "
               "strata_write_paged, %u immediate(s) at the end\n"
               "# time: first post to the receiver's acknowledgement, ms; rates at p50\n",
               o.pages, strata_comm_transport(s.comm), o.lists, BENCH_WINDOW,
               strata_write_list_imm_count(s.comm, 1));
        printf("%8s | %8s %8s | %8s %8s | %10s %10s | %7s %7s\n", "page", "raw p50", "raw p99",
               "pgd p50", "pgd p99", "raw pg/s", "pgd pg/s", "raw GB/s", "pgd GB/s");
    }
    for (int i = 0; i < o.num_sizes; ++i) {
        kv_measure(bs, &s, raw, &path, (size_t)o.sizes[i], &o);
    }
    BENCH_TRY(bs->barrier(bs->ctx));
    bench_raw_destroy(raw);
    kv_strata_destroy(&s);
    strata_bootstrap_destroy(bs);
    return 0;
}
