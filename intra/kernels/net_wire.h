/*
 * What peers write into this rank's network area, checked before any of it is used: a
 * source's header, a receiver's grant, each token entry's record, and where the header says
 * our returns go. A peer may write the area again while we look, so the kernels read each
 * word once, into a copy, and decide from the copy alone. These functions touch nothing
 * else: the kernels call them, and so does the fuzz target tests/fuzz/fuzz_net_area.c.
 * Sums are taken in 64 bits: a peer's counts may be anything a 32-bit field holds.
 */
#ifndef STRATA_INTRA_NET_WIRE_H
#define STRATA_INTRA_NET_WIRE_H

#include "intra/kernels/kernel_port.h"
#include "intra/kernels/net_format.h"

/* A header's verdict. */
enum {
    NET_WIRE_OK,
    NET_WIRE_BAD,        /* malformed, another step, or counts out of range */
    NET_WIRE_OTHER_MODES /* well formed, but the source moves this step's experts otherwise */
};

/* The header a source wrote, each field read once. */
KERNEL_FN intra_net_header_t net_header_read(const volatile intra_net_header_t *h)
{
    intra_net_header_t copy;

    copy.magic       = h->magic;
    copy.pad         = h->pad;
    copy.step        = h->step;
    copy.num_push    = h->num_push;
    copy.num_pull    = h->num_pull;
    copy.mask_digest = h->mask_digest;
    copy.ret_at      = h->ret_at;
    return copy;
}

/* Whether a source's header is for this step, with counts that fit max_tokens entries,
 * and modes that agree with ours (digest). */
KERNEL_FN int net_header_check(const intra_net_header_t *h, uint64_t step, int32_t max_tokens,
                               uint64_t digest)
{
    if (h->magic != INTRA_NET_HEADER_MAGIC || h->step != step || h->num_push < 0 ||
        h->num_pull < 0 || (int64_t)h->num_push + (int64_t)h->num_pull > (int64_t)max_tokens) {
        return NET_WIRE_BAD;
    }
    return h->mask_digest == digest ? NET_WIRE_OK : NET_WIRE_OTHER_MODES;
}

/*
 * A header's step counts (the streamed exchange in rounds), each read once, added into
 * sums[0..count): whether every one is at least 0, their total at most limit (the rows a
 * peer can send: its tokens times the terms an entry holds), and no sum passes INT32_MAX.
 * Where not, sums are partly added: the step fails.
 */
KERNEL_FN int net_header_counts_add(const volatile int32_t *wire, int count, int64_t limit,
                                    int32_t *sums)
{
    int64_t total = 0;

    for (int e = 0; e < count; ++e) {
        int32_t c = wire[e];

        total += c;
        if (c < 0 || total > limit || (int64_t)sums[e] + c > INT32_MAX) {
            return 0;
        }
        sums[e] += c;
    }
    return 1;
}

/* The grant a receiver wrote, each field read once. */
KERNEL_FN intra_net_grant_t net_grant_read(const volatile intra_net_grant_t *g)
{
    intra_net_grant_t copy;

    copy.magic  = g->magic;
    copy.pad    = g->pad;
    copy.step   = g->step;
    copy.offset = g->offset;
    copy.first  = g->first;
    copy.count  = g->count;
    return copy;
}

/*
 * Whether a receiver's grant is for this step and asks for what we have: entries from our
 * first round-two one (first) on, within the sending ones we announced, into a place inside
 * its overflow area of overflow_entries entries.
 */
KERNEL_FN int net_grant_check(const intra_net_grant_t *g, uint64_t step, int32_t first,
                              int32_t sending, int64_t overflow_entries)
{
    return g->magic == INTRA_NET_GRANT_MAGIC && g->step == step && g->first == first &&
           g->count > 0 && (int64_t)g->first + (int64_t)g->count <= (int64_t)sending &&
           g->offset >= 0 && g->offset <= overflow_entries - (int64_t)g->count;
}

/*
 * A token entry's record: the token's index at its source into *token_p, each top-k slot's
 * node-local expert (or -1) into experts[0..topk). Returns the entry's terms here, or -1
 * where the token is out of range, an expert is, or the terms are none (a token is sent
 * only where it has one) or more than an entry's returned block holds (entry_terms).
 */
KERNEL_FN int net_record_check(const volatile int32_t *record, int topk, int32_t max_tokens,
                               int32_t experts_per_node, int entry_terms, int32_t *token_p,
                               int64_t *experts)
{
    int terms = 0;

    *token_p = record[0];
    if (*token_p < 0 || *token_p >= max_tokens) {
        return -1;
    }
    for (int k = 0; k < topk; ++k) {
        experts[k] = record[1 + k];
        if (experts[k] < -1 || experts[k] >= experts_per_node) {
            return -1;
        }
        terms += experts[k] >= 0;
    }
    return terms >= 1 && terms <= entry_terms ? terms : -1;
}

/* Whether rows returned rows of y_row_bytes, and the drops word after them, fit in the
 * peer's ret_in of ret_in_bytes at ret_at, where its header put them. */
KERNEL_FN int net_ret_at_check(int64_t ret_at, uint64_t rows, uint64_t y_row_bytes,
                               uint64_t ret_in_bytes)
{
    return ret_at >= 0 && (uint64_t)ret_at % INTRA_NET_DROPS_BYTES == 0 &&
           (uint64_t)ret_at <= ret_in_bytes && y_row_bytes > 0 &&
           rows <= (ret_in_bytes - (uint64_t)ret_at) / y_row_bytes &&
           rows * y_row_bytes + INTRA_NET_DROPS_BYTES <= ret_in_bytes - (uint64_t)ret_at;
}

#endif
