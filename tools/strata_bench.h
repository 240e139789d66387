/*
 * strata-bench internals: the point-to-point patterns, run once through the engine and
 * once through raw calls of the engine's library (libfabric, or ucp) in the same process,
 * so ratios compare like with like.
 */
#ifndef STRATA_TOOLS_STRATA_BENCH_H
#define STRATA_TOOLS_STRATA_BENCH_H

#include <strata/strata.h>

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define BENCH_WINDOW 16 /* writes in flight in the bandwidth pattern */

/* Exit with the failing expression and its status: a benchmark has nothing to recover. */
#define BENCH_TRY(expr) \
    do { \
        strata_status_t _s = (expr); \
        if (_s != STRATA_OK) { \
            fprintf(stderr, "strata-bench: %s: %s\n", #expr, strata_status_string(_s)); \
            exit(1); \
        } \
    } while (0)

/** strata-bench intra (strata_bench_intra.c, built with MPI): argv[1] is "intra". */
int bench_intra_main(int argc, char **argv);
/** strata-bench moe (strata_bench_moe.c, built with MPI): argv[1] is "moe". */
int bench_moe_main(int argc, char **argv);
/** strata-bench incast (strata_bench_incast.c), launched by strata-run: argv[1] is "incast". */
int bench_incast_main(int argc, char **argv);
/** strata-bench weights (strata_bench_weights.c, built with MPI): argv[1] is "weights". */
int bench_weights_main(int argc, char **argv);
/** strata-bench kv (strata_bench_kv.c), launched by strata-run -n 2: argv[1] is "kv". */
int bench_kv_main(int argc, char **argv);

/** One way to move bytes between rank 0 and rank 1 with write-with-immediate. */
typedef struct bench_path {
    const char *name;
    void       *ctx;
    /** Write len bytes from the local buffer to the peer's at the same offset, with imm. */
    strata_status_t (*write)(void *ctx, size_t len, uint32_t imm);
    /** Wait until every write posted so far has left (local completion). */
    strata_status_t (*flush)(void *ctx);
    /** Wait for `count` writes of len bytes with imm from the peer. */
    strata_status_t (*wait_imm)(void *ctx, size_t len, uint32_t imm, uint64_t count);
} bench_path_t;

typedef struct bench_raw bench_raw_t;

/** Raw libfabric endpoint with the same provider and interface the engine chose. */
strata_status_t bench_raw_create(strata_bootstrap_t *bs, const char *provider, const char *iface,
                                 size_t buf_size, bench_raw_t **raw_p, bench_path_t *path);
void            bench_raw_destroy(bench_raw_t *raw);
/** One write with imm from the raw buffer at loff to the peer's at roff (BENCH_WINDOW in
 *  flight at most, as the path's write). */
strata_status_t bench_raw_write_at(bench_raw_t *raw, size_t loff, size_t roff, size_t len,
                                   uint32_t imm);

#ifdef STRATA_HAVE_UCX
typedef struct bench_raw_ucx bench_raw_ucx_t;

/** Raw ucp worker on the transports (UCX_TLS) and devices ("-": UCX's) the engine's rail
 *  took, writing with immediates the way the ucx transport does (strata_bench_raw_ucx.c). */
strata_status_t bench_raw_ucx_create(strata_bootstrap_t *bs, const char *tls,
                                     const char *devices, size_t buf_size,
                                     bench_raw_ucx_t **raw_p, bench_path_t *path);
void            bench_raw_ucx_destroy(bench_raw_ucx_t *raw);
#endif

#endif
