/*
 * strata-bench moe --combine, --exchange and --receive: one hierarchical object per mode,
 * one step of each in turn, per mode its times and rank 0's traffic to other nodes, and
 * with both modes of --exchange or --receive their ratio.
 */
#include "strata_bench_mpi.h"
#include "tool_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const moe_combine_names[] = {
    [STRATA_MOE_COMBINE_EXACT] = "exact", [STRATA_MOE_COMBINE_NODE_REDUCE] = "node-reduce"};
static const char *const moe_exchange_names[] = {
    [STRATA_MOE_EXCHANGE_WORST_CASE] = "worst-case", [STRATA_MOE_EXCHANGE_STREAMED] = "streamed"};
static const char *const moe_receive_names[] = {
    [STRATA_MOE_RECEIVE_BLOCKS] = "blocks", [STRATA_MOE_RECEIVE_EXACT] = "exact"};
static const char *const *const moe_variant_names[] = {
    [MOE_VARIANT_COMBINE] = moe_combine_names, [MOE_VARIANT_EXCHANGE] = moe_exchange_names,
    [MOE_VARIANT_RECEIVE] = moe_receive_names};
static const char *const moe_variant_options[] = {
    [MOE_VARIANT_COMBINE] = "combine", [MOE_VARIANT_EXCHANGE] = "exchange",
    [MOE_VARIANT_RECEIVE] = "receive"};

/* --receive compares the receives on one exchange: the streamed one where
 * STRATA_MOE_EXCHANGE names it, else the worst-case one (the library's auto would stream
 * the exact receive alone). */
static strata_moe_exchange_t moe_receive_exchange(void)
{
    const char *name = getenv("STRATA_MOE_EXCHANGE");

    return name != NULL && strcasecmp(name, "streamed") == 0 ? STRATA_MOE_EXCHANGE_STREAMED
                                                         : STRATA_MOE_EXCHANGE_WORST_CASE;
}

/* The name of r's mode of c's kind (every table names modes 1 and 2). */
static const char *moe_variant_name(const moe_variant_opts_t *c, const moe_route_t *r)
{
    int mode = c->kind == MOE_VARIANT_EXCHANGE  ? (int)r->exchange
               : c->kind == MOE_VARIANT_RECEIVE ? (int)r->receive
                                                : (int)r->combine;

    return mode >= 1 && mode <= 2 && (unsigned)c->kind <= MOE_VARIANT_RECEIVE
               ? moe_variant_names[c->kind][mode]
               : "default";
}

/* --exchange or --receive with both modes: the second mode's step (streamed, exact)
 * against the first's (worst-case, blocks), whatever the order given. */
static void moe_print_mode_ratio(const moe_variant_opts_t *c, const moe_route_t *objs)
{
    int second = c->modes[0] > c->modes[1] ? 0 : 1;
    const moe_route_t *num = &objs[second], *den = &objs[1 - second];

    printf("%s/%s: step p50 %.2f, p99 %.2f\n", moe_variant_name(c, num),
           moe_variant_name(c, den), (double)num->result.step.p50 / (double)den->result.step.p50,
           (double)num->result.step.p99 / (double)den->result.step.p99);
}

static void moe_print_variants(const bench_intra_t *b, const moe_variant_opts_t *c,
                               moe_route_t *objs, bool breakdown)
{
    for (int i = 0; i < c->count; ++i) {
        char row[32];

        snprintf(row, sizeof(row), "hier %s", moe_variant_name(c, &objs[i]));
        bench_intra_print_row(row, b->tokens, &objs[i].result, &objs[0].result);
    }
    for (int i = 0; i < c->count; ++i) {
        printf("%6d %s %s: rank 0 to other nodes per step: %llu rows, %llu payload bytes "
               "with combine; %d dispatch rounds; step p50 %.1f us, p99 %.1f us\n", b->tokens,
               moe_variant_options[c->kind], moe_variant_name(c, &objs[i]),
               (unsigned long long)objs[i].stats.tokens_to_nodes,
               (unsigned long long)objs[i].stats.bytes_to_nodes,
               objs[i].stats.exchange_rounds,
               (double)objs[i].result.step.p50 / 1e3, (double)objs[i].result.step.p99 / 1e3);
    }
    if (c->kind != MOE_VARIANT_COMBINE && c->count == 2) {
        moe_print_mode_ratio(c, objs);
    }
    for (int i = 0; breakdown && i < c->count; ++i) {
        char row[32];

        snprintf(row, sizeof(row), "%6d %s ", b->tokens, moe_variant_name(c, &objs[i]));
        moe_breakdown_print(row, &objs[i].bd, objs[i].result.step.p50);
    }
    fflush(stdout);
}

/*
 * --combine or --exchange: one hierarchical object per mode, one step of each in turn (the
 * order rotating), so that the modes see the same moments of a shared machine.
 */
void moe_measure_variants(bench_intra_t *b, strata_comm_t *comm,
                                 const moe_variant_opts_t *c, bool breakdown,
                                 tool_progress_t *progress)
{
    static moe_route_t objs[2];

    bench_intra_route(b);
    for (int i = 0; i < c->count; ++i) {
        memset(&objs[i], 0, sizeof(objs[i]));
        objs[i].route    = STRATA_MOE_ROUTE_HIERARCHICAL;
        objs[i].combine  = c->kind == MOE_VARIANT_COMBINE ? (strata_moe_combine_t)c->modes[i]
                                                          : STRATA_MOE_COMBINE_EXACT;
        objs[i].exchange = c->kind == MOE_VARIANT_EXCHANGE  ? (strata_moe_exchange_t)c->modes[i]
                           : c->kind == MOE_VARIANT_RECEIVE ? moe_receive_exchange()
                                                            : STRATA_MOE_EXCHANGE_DEFAULT;
        objs[i].receive  = c->kind == MOE_VARIANT_RECEIVE ? (strata_moe_receive_t)c->modes[i]
                                                          : STRATA_MOE_RECEIVE_DEFAULT;
        moe_route_open(b, comm, &objs[i]);
    }
    for (int i = -2; i < b->iters; ++i) {
        tool_progress_update(progress, "moe %d tokens: step %d/%d", b->tokens, i + 2,
                             b->iters + 2);
        for (int j = 0; j < c->count; ++j) {
            moe_route_step(b, &objs[(i + 2 + j) % c->count], i >= 0, breakdown);
        }
    }
    for (int i = 0; i < c->count; ++i) {
        moe_route_close(b, &objs[i]);
    }
    if (b->rank == 0) {
        tool_progress_end(progress);
        moe_print_variants(b, c, objs, breakdown);
    }
}

/* The index of name in names (entries 1 and 2), or 0. */
static int moe_mode_index(const char *const *names, const char *name)
{
    for (int i = 1; i <= 2; ++i) {
        if (strcmp(name, names[i]) == 0) {
            return i;
        }
    }
    return 0;
}

/* --combine "exact,node-reduce", --exchange "worst-case,streamed" or --receive
 * "blocks,exact": one or two modes, each once, and one of the options. */
bool moe_parse_variants(const char *option, const char *text, moe_variant_kind_t kind,
                               moe_variant_opts_t *c)
{
    const char *const *names = moe_variant_names[kind];
    char copy[64], *save = NULL;

    if (c->count > 0 && c->kind != kind) {
        tool_usage_error(MOE_TOOL, "--combine, --exchange and --receive: give one");
        return false;
    }
    c->count = 0;
    c->kind  = kind;
    snprintf(copy, sizeof(copy), "%s", text);
    for (char *name = strtok_r(copy, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        int mode = moe_mode_index(names, name);

        if (mode == 0 || c->count == 2 || (c->count == 1 && c->modes[0] == mode)) {
            tool_usage_error(MOE_TOOL, "%s '%s' is not %s, %s or both, each once", option,
                             text, names[1], names[2]);
            return false;
        }
        c->modes[c->count++] = mode;
    }
    if (c->count == 0) {
        tool_usage_error(MOE_TOOL, "%s '%s' names no mode", option, text);
        return false;
    }
    return true;
}
