/*
 * What peers write into this rank's network area in a MoE step across nodes, as the kernels
 * check it (intra/kernels/net_wire.h): a source's header (and a first round's step counts
 * after it), a receiver's grant, a token
 * entry's record, and where a header puts our returns. The first byte picks the check; the
 * next ones set this rank's side (step, sizes), the rest is what the peer wrote (zeros past
 * the input). Whatever a check accepts must be safe to use as the kernels use it.
 */
#include "fuzz_input.h"

#include <string.h>

#include "intra/kernels/net_wire.h"

#define FUZZ_TOPK_MAX 16
#define FUZZ_COUNTS_MAX 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A first round's step counts after the header, added to sums already there: accepted,
 * every sum grew by a count of at least 0, within the limit in all, and below INT32_MAX. */
static void fuzz_step_counts(const uint8_t *data, size_t size, size_t at, int32_t max_tokens)
{
    int32_t wire[FUZZ_COUNTS_MAX], sums[FUZZ_COUNTS_MAX], before[FUZZ_COUNTS_MAX];
    int64_t limit = (int64_t)max_tokens * FUZZ_TOPK_MAX, total = 0;
    uint8_t count;

    fuzz_take(data, size, &at, &count, sizeof(count));
    fuzz_take(data, size, &at, before, sizeof(before));
    fuzz_take(data, size, &at, wire, sizeof(wire));
    count = (uint8_t)(count % (FUZZ_COUNTS_MAX + 1));
    memcpy(sums, before, sizeof(sums));
    if (net_header_counts_add(wire, count, limit, sums)) {
        for (int e = 0; e < count; ++e) {
            FUZZ_CHECK(wire[e] >= 0 && (int64_t)sums[e] == (int64_t)before[e] + wire[e]);
            total += wire[e];
        }
        FUZZ_CHECK(total <= limit);
    }
}

static void fuzz_header(const uint8_t *data, size_t size, size_t at)
{
    intra_net_header_t wire, h;
    int32_t max_tokens;
    uint64_t step;

    fuzz_take(data, size, &at, &max_tokens, sizeof(max_tokens));
    fuzz_take(data, size, &at, &step, sizeof(step));
    fuzz_take(data, size, &at, &wire, sizeof(wire));
    max_tokens &= 0xffffff; /* what an object may have: positive, below 2^24 */
    h = net_header_read(&wire);
    if (net_header_check(&h, step, max_tokens, 0x5eed) != NET_WIRE_BAD) {
        FUZZ_CHECK(h.step == step && h.num_push >= 0 && h.num_pull >= 0);
        FUZZ_CHECK(h.num_push <= max_tokens && h.num_pull <= max_tokens - h.num_push);
        fuzz_step_counts(data, size, at, max_tokens);
    }
}

static void fuzz_grant(const uint8_t *data, size_t size, size_t at)
{
    intra_net_grant_t wire, g;
    int32_t first, sending;
    int64_t overflow;

    fuzz_take(data, size, &at, &first, sizeof(first));
    fuzz_take(data, size, &at, &sending, sizeof(sending));
    fuzz_take(data, size, &at, &overflow, sizeof(overflow));
    fuzz_take(data, size, &at, &wire, sizeof(wire));
    sending &= 0xffffff;
    first    = (int32_t)((uint32_t)first % ((uint32_t)sending + 1));
    overflow &= 0xffffffffff; /* peers x max_tokens: below 2^40 */
    g = net_grant_read(&wire);
    if (net_grant_check(&g, 1, first, sending, overflow)) {
        FUZZ_CHECK(g.count > 0 && g.first == first && g.count <= sending - first);
        FUZZ_CHECK(g.offset >= 0 && g.offset <= overflow && g.count <= overflow - g.offset);
    }
}

static void fuzz_record(const uint8_t *data, size_t size, size_t at)
{
    int32_t record[1 + FUZZ_TOPK_MAX], token = 0;
    int64_t experts[FUZZ_TOPK_MAX];
    uint8_t shape[3];
    int terms, counted = 0;

    fuzz_take(data, size, &at, shape, sizeof(shape));
    fuzz_take(data, size, &at, record, sizeof(record));
    int topk = 1 + shape[0] % FUZZ_TOPK_MAX, per_node = 1 + shape[1];
    int entry_terms = 1 + shape[2] % topk;

    terms = net_record_check(record, topk, 4096, per_node, entry_terms, &token, experts);
    if (terms >= 0) {
        FUZZ_CHECK(token >= 0 && token < 4096);
        for (int k = 0; k < topk; ++k) {
            FUZZ_CHECK(experts[k] >= -1 && experts[k] < per_node);
            counted += experts[k] >= 0;
        }
        FUZZ_CHECK(terms == counted && terms >= 1 && terms <= entry_terms);
    }
}

static void fuzz_returns(const uint8_t *data, size_t size, size_t at)
{
    uint64_t rows, y_row, area;
    int64_t ret_at;

    fuzz_take(data, size, &at, &rows, sizeof(rows));
    fuzz_take(data, size, &at, &y_row, sizeof(y_row));
    fuzz_take(data, size, &at, &area, sizeof(area));
    fuzz_take(data, size, &at, &ret_at, sizeof(ret_at));
    if (net_ret_at_check(ret_at, rows, y_row, area)) {
        FUZZ_CHECK(ret_at >= 0 && (uint64_t)ret_at <= area && y_row > 0);
        FUZZ_CHECK(rows <= (area - (uint64_t)ret_at) / y_row);
        FUZZ_CHECK(rows * y_row + INTRA_NET_DROPS_BYTES <= area - (uint64_t)ret_at);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    switch (data[0] % 4) {
    case 0: fuzz_header(data, size, 1); break;
    case 1: fuzz_grant(data, size, 1); break;
    case 2: fuzz_record(data, size, 1); break;
    default: fuzz_returns(data, size, 1); break;
    }
    return 0;
}
