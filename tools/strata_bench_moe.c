/*
 * strata-bench moe: two-tier MoE dispatch+combine through strata_moe on every rank of a
 * job whose ranks are grouped into nodes, for both routes, against MPI_Alltoallv moving the
 * same tokens in the same processes (strata_bench_mpi.h), one step of each in turn. Decode
 * sizes show latency (p50/p99), prefill sizes throughput. Launched by mpirun, which also
 * coordinates the ranks and carries strata's bootstrap; on one machine, --ranks-per-node
 * names the nodes:
 *
 *   mpirun -n 4 --mca btl self,tcp -x STRATA_INTER_PROVIDER=tcp -x STRATA_INTER_IFACE=lo \
 *       strata-bench moe --ranks-per-node 2
 *
 * Launched by strata-run instead, the ranks join through strata's bootstrap, which also
 * carries the bench's barriers; there is no MPI baseline, and where strata-run shaped the
 * links (--link-rate) each route's step is set against the time the busiest node link
 * needs for what it carries:
 *
 *   strata-run -n 4 --nodes 2 --link-rate 1gbit -- strata-bench moe
 */
#include "strata_bench_mpi.h"
#include "tool_cli.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static strata_status_t moe_mpi_allgather(void *ctx, const void *send, void *recv, size_t size)
{
    (void)ctx;
    return MPI_Allgather(send, (int)size, MPI_BYTE, recv, (int)size, MPI_BYTE,
                         MPI_COMM_WORLD) == MPI_SUCCESS ? STRATA_OK : STRATA_ERR_BOOTSTRAP;
}

static strata_status_t moe_mpi_barrier(void *ctx)
{
    (void)ctx;
    return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? STRATA_OK : STRATA_ERR_BOOTSTRAP;
}

/* The slowest rank's time since t0, in ms (collective). */
double moe_slowest_ms(const bench_intra_t *b, uint64_t t0)
{
    return bench_max(b, (double)(util_clock_now_ns() - t0) / 1e6);
}

/* Where the nodes' links are shaped (strata-run --link-rate): how ranks sit in nodes, and
 * the rate of every link, each way. */
typedef struct moe_link {
    int      per_node;
    uint64_t rate_bps; /* 0: not shaped (or not known) */
} moe_link_t;

static const char *const moe_bd_names[MOE_BD_N] = {
    "layout", "pack+post", "disp wait", "intra disp", "comb kernel", "comb wait", "reduce",
    "post delay",
};

/* One step's phases; the posting delay as the mean over the step's commands. */
void moe_breakdown_record(moe_breakdown_t *bd, const strata_moe_stats_t *s, bool record)
{
    uint64_t commands = s->commands_posted - bd->commands;

    for (int p = 0; record && p < STRATA_MOE_PHASES; ++p) {
        util_histogram_record(&bd->samples[MOE_BD_PHASES + p], s->phase_ns[p]);
    }
    if (record && commands > 0) {
        util_histogram_record(&bd->samples[MOE_BD_POST],
                              (s->post_delay_ns - bd->delay_ns) / commands);
    }
    bd->commands = s->commands_posted;
    bd->delay_ns = s->post_delay_ns;
}

void moe_breakdown_print(const char *row, moe_breakdown_t *bd, uint64_t step_p50)
{
    printf("%s breakdown |", row);
    for (int i = 0; i < MOE_BD_N; ++i) {
        util_histogram_summarize(&bd->samples[i], &bd->median[i]);
        util_histogram_reset(&bd->samples[i]);
        printf(" %s %.1f", moe_bd_names[i], (double)bd->median[i].p50 / 1e3);
        if (i != MOE_BD_POST) {
            printf(" (%.0f%%)", 100.0 * (double)bd->median[i].p50 / (double)step_p50);
        }
        printf(i + 1 < MOE_BD_N ? " |" : "\n");
    }
}

static void moe_print(const bench_intra_t *b, moe_route_t *flat, moe_route_t *hier,
                      const bench_intra_result_t *mpi, bool breakdown)
{
    if (mpi != NULL) {
        bench_intra_print_row("MPI_Alltoallv", b->tokens, mpi, NULL);
    }
    /* Without MPI (under strata-run), the flat route is what the hierarchical one is set
     * against. */
    bench_intra_print_row("strata flat", b->tokens, &flat->result, mpi);
    bench_intra_print_row("strata hier", b->tokens, &hier->result, mpi ? mpi : &flat->result);
    if (mpi != NULL) {
        printf("%6d strata/alltoallv | step p50 speed-up: flat %.2fx, hierarchical %.2fx; "
               "step p99: flat %.2fx, hierarchical %.2fx\n", b->tokens,
               (double)mpi->step.p50 / (double)flat->result.step.p50,
               (double)mpi->step.p50 / (double)hier->result.step.p50,
               (double)mpi->step.p99 / (double)flat->result.step.p99,
               (double)mpi->step.p99 / (double)hier->result.step.p99);
    }
    printf("%6d rank 0 to other nodes per step | flat %llu rows, hierarchical %llu rows "
           "(%llu and %llu payload bytes with combine)\n", b->tokens,
           (unsigned long long)flat->stats.tokens_to_nodes,
           (unsigned long long)hier->stats.tokens_to_nodes,
           (unsigned long long)flat->stats.bytes_to_nodes,
           (unsigned long long)hier->stats.bytes_to_nodes);
    printf("%6d object and layout created in (slowest rank) | flat %.1f ms, hierarchical "
           "%.1f ms\n", b->tokens, flat->create_ms, hier->create_ms);
    for (moe_route_t *r = flat; r != NULL; r = r == flat ? hier : NULL) {
        printf("%6d strata %s: host-copied bytes per step: %llu (network area in %s)\n",
               b->tokens, r == flat ? "flat" : "hier",
               (unsigned long long)r->stats.host_copied_bytes,
               r->stats.net_bounce ? "a host bounce buffer" : "the registered heap");
    }
    if (breakdown) {
        char row[32];

        snprintf(row, sizeof(row), "%6d flat ", b->tokens);
        moe_breakdown_print(row, &flat->bd, flat->result.step.p50);
        snprintf(row, sizeof(row), "%6d hier ", b->tokens);
        moe_breakdown_print(row, &hier->bd, hier->result.step.p50);
    }
    fflush(stdout);
}

/*
 * The most payload bytes any node sends over its link in one of r's steps (every rank's
 * dispatched rows and returned terms to other nodes, summed by node), into *bytes_p and
 * *node_p (collective).
 */
static void moe_busiest_link(const bench_intra_t *b, const moe_route_t *r, int per_node,
                             uint64_t *bytes_p, int *node_p)
{
    uint64_t *sent = calloc((size_t)b->size, sizeof(*sent)), *node_bytes;

    node_bytes = calloc((size_t)b->size, sizeof(*node_bytes));
    if (sent == NULL || node_bytes == NULL) {
        fprintf(stderr, "strata-bench moe: out of memory\n");
        exit(1);
    }
    bench_allgather_u64(b, r->stats.bytes_to_nodes, sent);
    *bytes_p = 0;
    *node_p  = 0;
    for (int rank = 0; rank < b->size; ++rank) {
        int node = rank / per_node;

        node_bytes[node] += sent[rank];
        if (node_bytes[node] > *bytes_p) {
            *bytes_p = node_bytes[node];
            *node_p  = node;
        }
    }
    free(sent);
    free(node_bytes);
}

/* Where the links are shaped: each route's step against the time its busiest link needs
 * (collective; rank 0 prints). */
static void moe_print_link(const bench_intra_t *b, moe_route_t *flat, moe_route_t *hier,
                           const moe_link_t *link)
{
    for (moe_route_t *r = flat; r != NULL; r = r == flat ? hier : NULL) {
        uint64_t bytes;
        int node;
        double bound_ns;

        moe_busiest_link(b, r, link->per_node, &bytes, &node);
        bound_ns = (double)bytes * 8.0 / (double)link->rate_bps * 1e9;
        if (b->rank != 0) {
            continue;
        }
        printf("%6d strata %s: busiest link: node %d sends %llu bytes per step; link bound "
               "%.1f us at %.3g Gbit/s; ", b->tokens, r == flat ? "flat" : "hier", node,
               (unsigned long long)bytes, bound_ns / 1e3, (double)link->rate_bps / 1e9);
        if (bytes == 0) {
            printf("step / link bound: none (nothing crosses a link)\n");
        } else {
            printf("step / link bound: p50 %.2f, p99 %.2f\n",
                   (double)r->result.step.p50 / bound_ns, (double)r->result.step.p99 / bound_ns);
        }
    }
    fflush(stdout);
}

/*
 * Both routes and, under mpirun, MPI_Alltoallv, one step of each in turn (the order
 * rotating), so that all of them see the same moments of a shared, noisy machine.
 */
static void moe_measure(bench_intra_t *b, strata_comm_t *comm, bool breakdown,
                        const moe_link_t *link, tool_progress_t *progress)
{
    static moe_route_t flat, hier;
    static bench_intra_samples_t mpi_samples;
    bench_intra_result_t mpi;
    int paths = b->launcher != NULL ? 2 : 3; /* no MPI to compare with under a launcher */

    bench_intra_route(b);
    if (b->launcher == NULL) {
        bench_intra_mpi_layout(b);
    }
    memset(&flat, 0, sizeof(flat));
    memset(&hier, 0, sizeof(hier));
    flat.route = STRATA_MOE_ROUTE_FLAT;
    hier.route = STRATA_MOE_ROUTE_HIERARCHICAL;
    moe_route_open(b, comm, &flat);
    moe_route_open(b, comm, &hier);
    for (int i = -2; i < b->iters; ++i) {
        tool_progress_update(progress, "moe %d tokens: step %d/%d", b->tokens, i + 2,
                             b->iters + 2);
        for (int j = 0; j < paths; ++j) {
            int which = (i + 3 + j) % paths;

            if (which == 2) {
                bench_intra_mpi_step(b, i >= 0 ? &mpi_samples : NULL);
            } else {
                moe_route_step(b, which == 0 ? &flat : &hier, i >= 0, breakdown);
            }
        }
    }
    if (b->launcher == NULL) {
        bench_intra_finish(b, &mpi_samples, &mpi);
    }
    moe_route_close(b, &flat);
    moe_route_close(b, &hier);
    if (b->rank == 0) {
        tool_progress_end(progress); /* the rows start on a clean line */
        moe_print(b, &flat, &hier, b->launcher == NULL ? &mpi : NULL, breakdown);
    }
    if (link->rate_bps > 0) {
        moe_print_link(b, &flat, &hier, link);
    }
}

static void moe_usage(FILE *out)
{
    fprintf(out, "Usage: mpirun -n N strata-bench moe [--ranks-per-node L] [--tokens N[,N...]]\n"
                 "              [--hidden H] [--topk K] [--experts E] [--iters N] [--breakdown]\n"
                 "              [--progress] [--combine exact,node-reduce |\n"
                 "              --exchange worst-case,streamed | --receive blocks,exact |\n"
                 "              --overlap]\n"
                 "       mpirun -n N strata-bench moe --modes push,pull,adaptive[,fixed:FILE]\n"
                 "              [--ranks-per-node L] [--tokens N] [--experts E] [--topk K]\n"
                 "              [--zipf S] [--seed N] [--trace FILE] [--route flat|hier] [--iters N]\n"
                 "              [--expert-classes]\n"
                 "Two-tier MoE dispatch+combine (bf16, uniform routing, all Push), flat and "
                 "hierarchical,\nagainst MPI_Alltoallv moving the same tokens. Ratios: "
                 "GB/s against MPI_Alltoallv.\n"
                 "--breakdown: per route and size, rank 0's median time of each phase of a step\n"
                 "(a layout made anew, pack and post, waits, kernels, reduce) and its share of the\n"
                 "step's median; post delay: mean time from a kernel's command to its posting.\n"
                 "--combine: instead of the routes and MPI, one hierarchical object per combine\n"
                 "mode (exact, node-reduce: docs/moe.md), one step of each in turn; per mode its\n"
                 "times, and rank 0's rows and payload bytes to other nodes per step.\n"
                 "--exchange: the same per exchange (worst-case, streamed: docs/moe.md; the\n"
                 "window is STRATA_MOE_WINDOW_BYTES), exact combine, and with both\n"
                 "'streamed/worst-case: step p50 X, p99 Y'.\n"
                 "--receive: the same per receive (blocks, or exact: the counts, then every row\n"
                 "into the caller's buffers, dispatch_recv_into), both on the streamed\n"
                 "exchange where STRATA_MOE_EXCHANGE=streamed, else the worst-case one; with both\n"
                 "'exact/blocks: step p50 X, p99 Y'.\n"
                 "--overlap: instead, one object on a stream; per size, rank 0's medians of the\n"
                 "time to its first and last complete local expert (strata_moe_expert_wait) and\n"
                 "to the whole dispatch, and 'first expert ready / dispatch done: X'.\n"
                 "--modes: one MoE object per Push/Pull mode, one step of each in turn, on routing\n"
                 "that changes by step: Zipf S (1.4) with a drifting hot set (--seed), or the\n"
                 "routing trace FILE (strata-tune generate; its shape sets tokens, top-k and\n"
                 "experts). Per mode: step p50/p99, the cost model's prediction, mode switches;\n"
                 "then adaptive's step over the better of push and pull. With\n"
                 "STRATA_ADAPTIVE_CALIBRATE=on the model is the one the adaptive object measured.\n"
                 "--expert-classes: every object on a stream; each step rank 0 polls its local\n"
                 "experts (strata_moe_expert_wait) until every one is complete, and prints per\n"
                 "mode the median time to an expert's completion by the rows it got (none, under\n"
                 "the step's mean, up to 4 x it, more): each mode's cost per class.\n"
                 "--progress: rank 0's progress line on stderr even where it is no terminal, as\n"
                 "under mpirun, which gives ranks pipes (without it: only on a terminal).\n"
                 "-h, --help: this text.\n");
}

static bool moe_parse_route(const char *text, strata_moe_route_t *route_p)
{
    if (strcmp(text, "flat") == 0) {
        *route_p = STRATA_MOE_ROUTE_FLAT;
    } else if (strcmp(text, "hier") == 0) {
        *route_p = STRATA_MOE_ROUTE_HIERARCHICAL;
    } else {
        tool_usage_error(MOE_TOOL, "--route '%s' is not flat or hier", text);
        return false;
    }
    return true;
}

/* The options of moe into m, c, *per_node_p and *breakdown_p, the shared ones into b and o;
 * false after a usage error naming the option and its value. */
static bool moe_option(bench_intra_t *b, bench_intra_opts_t *o, bench_modes_opts_t *m,
                       moe_variant_opts_t *c, int *per_node_p, bool *breakdown_p, int opt,
                       const char *arg)
{
    switch (opt) {
    case 'O': c->overlap = true; return true;
    case 'C': return moe_parse_variants("--combine", arg, MOE_VARIANT_COMBINE, c);
    case 'X': return moe_parse_variants("--exchange", arg, MOE_VARIANT_EXCHANGE, c);
    case 'V': return moe_parse_variants("--receive", arg, MOE_VARIANT_RECEIVE, c);
    case 'L': return tool_parse_int(MOE_TOOL, "--ranks-per-node", arg, 1, INT_MAX, per_node_p);
    case 'B': *breakdown_p = true; return true;
    case 'E': m->classes = true; return true;
    case 'M': m->modes = arg; return true;
    case 'Z': return tool_parse_double(MOE_TOOL, "--zipf", arg, 0.0, 16.0, &m->zipf);
    case 'S': return tool_parse_u64(MOE_TOOL, "--seed", arg, 0, UINT64_MAX, &m->seed);
    case 'T': m->trace = arg; return true;
    case 'R': return moe_parse_route(arg, &m->route);
    default:  return bench_intra_option(MOE_TOOL, b, o, opt, arg);
    }
}

int bench_moe_main(int argc, char **argv)
{
    static const struct option options[] = {
        INTRA_BENCH_OPTIONS, {"ranks-per-node", required_argument, NULL, 'L'},
        {"breakdown", no_argument, NULL, 'B'}, {"modes", required_argument, NULL, 'M'},
        {"zipf", required_argument, NULL, 'Z'}, {"seed", required_argument, NULL, 'S'},
        {"trace", required_argument, NULL, 'T'}, {"route", required_argument, NULL, 'R'},
        {"combine", required_argument, NULL, 'C'}, {"overlap", no_argument, NULL, 'O'},
        {"exchange", required_argument, NULL, 'X'},
        {"receive", required_argument, NULL, 'V'},
        {"expert-classes", no_argument, NULL, 'E'},
        {NULL, 0, NULL, 0},
    };
    bench_modes_opts_t modes = {.zipf = 1.4, .seed = 1, .route = STRATA_MOE_ROUTE_DEFAULT};
    bench_intra_t b = {.hidden = 2048, .topk = 8};
    bench_intra_opts_t o = {.sizes = {128, 2048}, .num_sizes = 2};
    moe_variant_opts_t combine = {.count = 0};
    int per_node = 0, experts_given, opt;
    bool breakdown = false;
    moe_link_t link = {0};
    char node_name[32];
    strata_config_t config = {.field_mask = STRATA_CONFIG_FIELD_NODE_NAME};
    strata_bootstrap_t bs = {.allgather = moe_mpi_allgather, .barrier = moe_mpi_barrier};
    tool_progress_t progress;
    strata_comm_t *comm;
    uint64_t t0;
    double comm_ms;

    optind = 2;
    while ((opt = getopt_long(argc, argv, ":" INTRA_BENCH_SHORT "L:BEM:Z:S:T:R:C:OX:V:", options,
                              NULL)) != -1) {
        if (opt == 'h') {
            moe_usage(stdout);
            return 0;
        }
        if (opt == '?' || opt == ':') {
            return tool_option_error(MOE_TOOL, argv, options, opt);
        }
        if (!moe_option(&b, &o, &modes, &combine, &per_node, &breakdown, opt, optarg)) {
            return TOOL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        return tool_usage_error(MOE_TOOL, "unexpected argument '%s'", argv[optind]);
    }
    if (modes.classes && modes.modes == NULL) {
        return tool_usage_error(MOE_TOOL, "--expert-classes measures the modes of --modes");
    }
    if (combine.overlap && (combine.count > 0 || modes.modes != NULL)) {
        return tool_usage_error(MOE_TOOL, "--overlap measures one object: not with --combine, "
                                "--exchange, --receive or --modes");
    }
    experts_given = b.experts;
    bench_intra_start(&b, &argc, &argv);
    if (bench_join_launcher(&b, MOE_TOOL)) {
        /* strata-run's ranks: its node placement (blocks of LOCAL_WORLD_SIZE, named by
         * STRATA_NODE_NAME), and the links' rate where it shaped them. */
        const char *local = getenv("LOCAL_WORLD_SIZE"), *rate = getenv("STRATA_RUN_LINK_RATE");

        if (experts_given == 0) {
            b.experts = 8 * b.size;
        }
        per_node      = per_node > 0 ? per_node : local != NULL ? atoi(local) : 0;
        link.rate_bps = rate != NULL ? strtoull(rate, NULL, 10) : 0;
    }
    b.device = intra_device_find("host");
    per_node = per_node > 0 ? per_node : b.size;
    if (b.experts % b.size != 0) {
        fprintf(stderr, "strata-bench moe: --experts %d is not a multiple of the %d ranks\n",
                b.experts, b.size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (b.size % per_node != 0) {
        fprintf(stderr, "strata-bench moe: the %d ranks are not a multiple of "
                "--ranks-per-node %d\n", b.size, per_node);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    link.per_node = per_node;
    bench_barrier(&b);
    t0 = util_clock_now_ns();
    if (b.launcher != NULL) { /* the launcher names the nodes (STRATA_NODE_NAME) */
        BENCH_TRY(strata_comm_create(NULL, b.launcher, &comm));
    } else {
        snprintf(node_name, sizeof(node_name), "node%d", b.rank / per_node);
        config.node_name = node_name;
        bs.rank          = b.rank;
        bs.world_size    = b.size;
        BENCH_TRY(strata_comm_create(&config, &bs, &comm));
    }
    comm_ms = moe_slowest_ms(&b, t0);
    if (modes.modes != NULL) {
        modes.breakdown = breakdown;
        b.tokens = o.sizes[0];
        b.iters  = o.iters > 0 ? o.iters : 200;
        bench_moe_modes(&b, comm, per_node, &modes);
        strata_comm_destroy(comm);
        if (b.launcher != NULL) {
            strata_bootstrap_destroy(b.launcher);
        }
        MPI_TRY(MPI_Finalize());
        return 0;
    }
    b.row_bytes = (size_t)b.hidden * sizeof(uint16_t);
    bench_intra_alloc(&b, bench_intra_max_size(o.sizes, o.num_sizes));
    if (b.rank == 0) {
        printf("# strata-bench moe: %d ranks on %d nodes, transport %s, hidden %d, top-%d of %d "
               "experts, bf16\n# payload per rank and step: dispatched rows + combined rows; "
               "times in us (rank 0), GB/s = payload / step p50\n"
               "# ratio: GB/s against %s\n"
               "# communicator created in %.1f ms (slowest rank)\n",
               b.size, strata_comm_num_nodes(comm), strata_comm_transport(comm), b.hidden,
               b.topk, b.experts,
               combine.count > 0   ? "the first mode given"
               : b.launcher != NULL ? "the flat route (no MPI here: launched by strata-run)"
                                    : "MPI_Alltoallv in the same processes",
               comm_ms);
        if (link.rate_bps > 0) {
            printf("# links shaped to %.3g Gbit/s each way: each route's step set against the "
                   "time its busiest node link needs for what it sends\n",
                   (double)link.rate_bps / 1e9);
        }
        if (!combine.overlap) {
            bench_intra_print_header();
        }
    }
    tool_progress_start(&progress, b.rank == 0, b.progress);
    for (int i = 0; i < o.num_sizes; ++i) {
        b.tokens = o.sizes[i];
        b.iters  = o.iters > 0 ? o.iters : o.sizes[i] >= 1024 ? 10 : 100;
        if (combine.overlap) {
            bench_moe_overlap(&b, comm, &progress);
        } else if (combine.count > 0) {
            moe_measure_variants(&b, comm, &combine, breakdown, &progress);
        } else {
            moe_measure(&b, comm, breakdown, &link, &progress);
        }
    }
    tool_progress_end(&progress);
    strata_comm_destroy(comm);
    if (b.launcher != NULL) {
        strata_bootstrap_destroy(b.launcher);
    }
    MPI_TRY(MPI_Finalize());
    return 0;
}
