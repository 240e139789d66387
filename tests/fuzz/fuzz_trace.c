/*
 * Routing traces (adaptive/adapt_trace.c, the format strata-tune replays): read, turned into
 * topk_idx, written and read back. A trace that loads must survive the round trip
 * unchanged, and nothing may crash, leak or overflow on any input.
 */
#include "fuzz_input.h"

#include "adaptive/adapt_trace.h"

#define FUZZ_TOPK_MAX (1 << 16) /* topk_idx entries tried per rank */

static void fuzz_trace_check(const adapt_trace_t *trace)
{
    const adapt_trace_shape_t *shape = &trace->shape;
    size_t entries = (size_t)shape->tokens * (size_t)shape->topk;
    char err[UTIL_REASON_LEN], path[64];
    adapt_trace_t *again = NULL;
    int64_t *topk_idx;
    int fd;

    FUZZ_CHECK(adapt_trace_shape_check(shape, err) == STRATA_OK && trace->steps >= 0);
    if (entries <= FUZZ_TOPK_MAX && (topk_idx = malloc(entries * sizeof(*topk_idx))) != NULL) {
        for (int t = 0; t < trace->steps && t < 4; ++t) {
            for (int r = 0; r < shape->ranks && r < 16; ++r) {
                if (adapt_trace_topk_idx(trace, t, r, topk_idx) != STRATA_OK) {
                    continue;
                }
                for (size_t i = 0; i < entries; ++i) {
                    FUZZ_CHECK(topk_idx[i] >= -1 && topk_idx[i] < shape->experts);
                }
            }
        }
        free(topk_idx);
    }
    fd = fuzz_input_file(NULL, 0, path, sizeof(path));
    if (fd < 0) {
        return;
    }
    FUZZ_CHECK(adapt_trace_write(trace, path, err) == STRATA_OK);
    FUZZ_CHECK(adapt_trace_read(path, &again, err) == STRATA_OK);
    FUZZ_CHECK(again->shape.experts == shape->experts && again->shape.ranks == shape->ranks &&
               again->shape.ranks_per_node == shape->ranks_per_node &&
               again->shape.tokens == shape->tokens && again->shape.topk == shape->topk &&
               again->shape.row_bytes == shape->row_bytes && again->steps == trace->steps);
    FUZZ_CHECK(memcmp(again->counts, trace->counts,
                      (size_t)trace->steps * (size_t)shape->ranks * (size_t)shape->experts *
                          sizeof(int32_t)) == 0);
    adapt_trace_destroy(again);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[UTIL_REASON_LEN] = "";
    adapt_trace_t *trace = NULL;
    int fd = fuzz_input_file(data, size, path, sizeof(path));

    if (fd < 0) {
        return 0;
    }
    if (adapt_trace_read(path, &trace, err) == STRATA_OK) {
        fuzz_trace_check(trace);
        adapt_trace_destroy(trace);
    } else {
        FUZZ_CHECK(trace == NULL && err[0] != '\0');
    }
    close(fd);
    return 0;
}
